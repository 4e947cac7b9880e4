//! One writer among the replicas: leader election on a `coordination.k8s.io` Lease (holder,
//! lease duration, renew time; a write that lost a race is a 409 and leaves the Lease to
//! whoever won), used by the self-managed certificates ([`crate::certs::managed`]) and by the
//! drift watch (`watch::controller`). [`observe`] and [`decide`] are the pure rule, timed as
//! client-go times it: a Lease held by another replica lapses a lease duration after this
//! replica last *saw* its record change (its own clock), never by the renew time written in it,
//! and the duration it honours is at most its own. A Lease written with a renew time in the
//! future or a duration of years therefore holds for one duration, and rotation goes on. Two
//! writers at once stay possible (a replica that stalls past its lease): each user stays safe
//! with that: the certificates' Secret is (every write is conditional on its resourceVersion,
//! so one gets a 409; a stale caBundle one of them writes is corrected on the next pass).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

/// What this replica may do with the Lease as it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It holds it: renew.
    Renew,
    /// Nobody holds it, or the holder stopped renewing: take it.
    TakeOver,
    /// Another replica holds it.
    Held,
}

/// A Lease record as this replica last read it, and when (its own clock) it first read it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    record: Record,
    since: Timestamp,
}

/// What changes when the holder renews or someone takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renewed: Option<Timestamp>,
    acquired: Option<Timestamp>,
    transitions: Option<i32>,
}

/// The observation after reading `spec` at `now`: the earlier one when the record has not
/// changed since, else a new one starting now.
pub fn observe(previous: Option<Observed>, spec: Option<&LeaseSpec>, now: Timestamp) -> Observed {
    let record = Record {
        holder: spec.and_then(|s| s.holder_identity.clone()),
        renewed: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        acquired: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
        transitions: spec.and_then(|s| s.lease_transitions),
    };
    match previous {
        Some(seen) if seen.record == record => seen,
        _ => Observed { record, since: now },
    }
}

/// Decides from the Lease's spec (`None`: the Lease has none) at `now`, given when this replica
/// first saw its current record and the longest lease duration it honours.
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    seen: &Observed,
    now: Timestamp,
    longest: Duration,
) -> Decision {
    let Some(spec) = spec else {
        return Decision::TakeOver;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => return Decision::Renew,
        None | Some("") => return Decision::TakeOver,
        Some(_) => {}
    }
    let longest = i64::try_from(longest.as_secs()).unwrap_or(i64::MAX);
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0)).min(longest);
    if seen.since.as_second().saturating_add(seconds) > now.as_second() {
        Decision::Held
    } else {
        Decision::TakeOver
    }
}

/// The Lease named `name` in `api`'s namespace, held as `identity`.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    seen: std::sync::Mutex<Option<Observed>>,
}

impl LeaseLock {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> LeaseLock {
        LeaseLock {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            seen: std::sync::Mutex::new(None),
        }
    }

    /// Takes or renews the Lease; `true` when this replica holds it for another lease
    /// duration. Losing a race (409) is `false`, not an error.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return lost_race_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        let seen = {
            let mut last = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let seen = observe(last.take(), lease.spec.as_ref(), now);
            *last = Some(seen.clone());
            seen
        };
        let decision = decide(
            lease.spec.as_ref(),
            &self.identity,
            &seen,
            now,
            self.duration,
        );
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        match decision {
            Decision::Held => return Ok(false),
            Decision::Renew => {}
            Decision::TakeOver => {
                spec.holder_identity = Some(self.identity.clone());
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions =
                    Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            }
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(MicroTime(now));
        // `replace` carries the resourceVersion read above: a concurrent writer makes it 409.
        lost_race_is_false(
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await,
        )
    }
}

fn lost_race_is_false(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONGEST: Duration = Duration::from_secs(15);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn spec(holder: Option<&str>, renewed: Option<i64>, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: renewed.map(|s| MicroTime(at(s))),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    /// `decide` after reading `lease` at each of `reads` in turn (the same record each time).
    fn decide_after(lease: &LeaseSpec, identity: &str, reads: &[i64]) -> Decision {
        let mut seen = None;
        let mut decision = Decision::Held;
        for &now in reads {
            let observed = observe(seen.take(), Some(lease), at(now));
            decision = decide(Some(lease), identity, &observed, at(now), LONGEST);
            seen = Some(observed);
        }
        decision
    }

    #[test]
    fn the_holder_renews_and_others_wait_a_duration_after_they_saw_it_renewed() {
        let held = spec(Some("a"), Some(1_000), 15);
        assert_eq!(decide_after(&held, "a", &[1_005]), Decision::Renew);
        assert_eq!(decide_after(&held, "b", &[1_000, 1_014]), Decision::Held);
        assert_eq!(
            decide_after(&held, "b", &[1_000, 1_015]),
            Decision::TakeOver
        );
        // A replica that first reads an old record still waits a full duration from then.
        assert_eq!(decide_after(&held, "b", &[5_000]), Decision::Held);
        assert_eq!(
            decide_after(&held, "b", &[5_000, 5_015]),
            Decision::TakeOver
        );
        // The holder renews even after lapsing: nobody else wrote in between.
        assert_eq!(decide_after(&held, "a", &[1_000, 2_000]), Decision::Renew);
    }

    #[test]
    fn a_renewal_restarts_the_wait() {
        let first = spec(Some("a"), Some(1_000), 15);
        let renewed = spec(Some("a"), Some(1_010), 15);
        let seen = observe(None, Some(&first), at(1_000));
        let seen = observe(Some(seen), Some(&renewed), at(1_010));
        assert_eq!(
            decide(Some(&renewed), "b", &seen, at(1_020), LONGEST),
            Decision::Held
        );
        assert_eq!(
            decide(Some(&renewed), "b", &seen, at(1_025), LONGEST),
            Decision::TakeOver
        );
    }

    #[test]
    fn a_lease_renewed_in_the_future_or_for_years_holds_one_duration_of_ours() {
        // Renewed a year ahead of this replica's clock: client-go ignores the written time too.
        let future = spec(Some("b"), Some(1_000 + 365 * 86_400), 15);
        assert_eq!(decide_after(&future, "a", &[1_000, 1_014]), Decision::Held);
        assert_eq!(
            decide_after(&future, "a", &[1_000, 1_015]),
            Decision::TakeOver
        );
        // A duration of 68 years is honoured as this replica's own (15 s).
        let forever = spec(Some("b"), Some(1_000), i32::MAX);
        assert_eq!(decide_after(&forever, "a", &[1_000, 1_014]), Decision::Held);
        assert_eq!(
            decide_after(&forever, "a", &[1_000, 1_015]),
            Decision::TakeOver
        );
    }

    #[test]
    fn an_empty_or_unheld_lease_is_taken() {
        assert_eq!(
            decide(None, "a", &observe(None, None, at(0)), at(0), LONGEST),
            Decision::TakeOver
        );
        assert_eq!(
            decide_after(&spec(None, Some(1), 15), "a", &[2]),
            Decision::TakeOver
        );
        assert_eq!(
            decide_after(&spec(Some(""), None, 15), "a", &[2]),
            Decision::TakeOver
        );
        // Held but never renewed: a duration from when it was first seen.
        assert_eq!(
            decide_after(&spec(Some("b"), None, 15), "a", &[2]),
            Decision::Held
        );
        assert_eq!(
            decide_after(&spec(Some("b"), None, 15), "a", &[2, 17]),
            Decision::TakeOver
        );
    }

    #[test]
    fn a_negative_duration_counts_as_zero() {
        let odd = spec(Some("b"), Some(100), -5);
        assert_eq!(decide_after(&odd, "a", &[100]), Decision::TakeOver);
    }
}
