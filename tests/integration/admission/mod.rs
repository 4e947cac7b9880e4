//! What pinhook answers over real HTTPS with real AdmissionReview captures against a real
//! registry: `/mutate` and `/validate`, the mirror guard, every policy knob, `pinhook check`
//! (the same decisions offline), and the bounds on a review's work, on clients and under
//! faults, and what a review's own text can do to the log.

mod apiserver_policy;
mod body_budget;
mod bounded_reviews;
mod check_cli;
mod faults_under_load;
mod log_injection;
mod match_conditions;
mod mirrors_https;
mod mutate_https;
mod policy;
mod server_limits;
mod signatures_https;
mod tenant_attacks;
mod validate_https;
mod who_may_call;
