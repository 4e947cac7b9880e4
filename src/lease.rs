//! One writer among the replicas: leader election on a `coordination.k8s.io` Lease (holder,
//! lease duration, renew time; a write that lost a race is a 409 and leaves the Lease to
//! whoever won), used by the self-managed certificates ([`crate::certs::managed`]) and by the
//! drift watch (`watch::controller`). [`decide`] is the pure rule. Unlike client-go, which times a lease from when
//! it saw the renew time change, [`decide`] compares the holder's renew time with this
//! replica's clock: clock skew beyond the lease duration (15 s) can make a replica take over
//! early, so each user must stay safe with two writers at once: the certificates' Secret is
//! (every write is conditional on its resourceVersion, so one gets a 409; a stale caBundle one
//! of them writes is corrected on the next pass).

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

/// Decides from the Lease's spec (`None`: the Lease has none) at `now`.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::TakeOver;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => return Decision::Renew,
        None | Some("") => return Decision::TakeOver,
        Some(_) => {}
    }
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    match renewed {
        Some(at) if at.as_second().saturating_add(seconds) > now.as_second() => Decision::Held,
        _ => Decision::TakeOver,
    }
}

/// The Lease named `name` in `api`'s namespace, held as `identity`.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaseLock {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> LeaseLock {
        LeaseLock {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
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
        let decision = decide(lease.spec.as_ref(), &self.identity, now);
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

    #[test]
    fn the_holder_renews_and_others_wait_until_the_lease_lapses() {
        let held = spec(Some("a"), Some(1_000), 15);
        assert_eq!(decide(Some(&held), "a", at(1_005)), Decision::Renew);
        assert_eq!(decide(Some(&held), "b", at(1_014)), Decision::Held);
        assert_eq!(decide(Some(&held), "b", at(1_015)), Decision::TakeOver);
        // The holder renews even after lapsing: nobody else wrote in between.
        assert_eq!(decide(Some(&held), "a", at(2_000)), Decision::Renew);
    }

    #[test]
    fn an_empty_or_unrenewed_lease_is_taken() {
        assert_eq!(decide(None, "a", at(0)), Decision::TakeOver);
        assert_eq!(
            decide(Some(&spec(None, Some(1), 15)), "a", at(2)),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec(Some(""), None, 15)), "a", at(2)),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), None, 15)), "a", at(2)),
            Decision::TakeOver
        );
    }

    #[test]
    fn a_negative_duration_counts_as_zero() {
        let odd = spec(Some("b"), Some(100), -5);
        assert_eq!(decide(Some(&odd), "a", at(100)), Decision::TakeOver);
    }
}
