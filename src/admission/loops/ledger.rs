//! Where the loop breaker's counts live, so that every replica counts every creation
//! ([`LoopLedger`]): the cluster's ConfigMap ([`ClusterLedger`], the chart renders it empty in
//! pinhook's namespace and lets pinhook `get` and `update` it by name), or this process's memory
//! ([`LocalLedger`]) without a cluster.
//!
//! The ConfigMap holds one key, [`OWNERS_KEY`]: a JSON object from `<namespace>/<owner uid>` to
//! its [`OwnerTrack`]. A creation reads it, counts ([`OwnerTrack::record`], the same rule as in
//! memory), drops what no longer matters, and writes it back with the `resourceVersion` it read:
//! a replica that wrote in between makes that a 409, and the creation is counted again on what
//! it wrote, after a short pause that differs between replicas. Bounded: [`MAX_LEDGER_OWNERS`]
//! owners and [`MAX_OWNERS_PER_NAMESPACE`] of one namespace (the least recently active dropped
//! first),
//! [`MAX_LEDGER_BYTES`] of JSON, [`MAX_ATTEMPTS`] writes, [`LEDGER_TIMEOUT`] in all. When the
//! ledger cannot be read or written in time, the creation is counted in this process's memory
//! and a warning logged: pinning goes on, and `/validate`, which never asks the breaker, still
//! checks every Pod.
//!
//! Only listed operators' Pod creations come here (`owners.pinPodsOf`), never the built-in
//! controllers' Pods: a handful of reads and writes of one small object.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use tracing::warn;

use super::{now_seconds, LoopBreaker, LoopVerdict, OwnerTrack};
use crate::policy::LoopBreakerSettings;

/// The ConfigMap's key that holds the counts.
pub const OWNERS_KEY: &str = "owners.json";
/// Owners the ledger keeps at once.
pub const MAX_LEDGER_OWNERS: usize = 256;
/// The ledger's JSON at most (a ConfigMap holds 1 MiB).
pub const MAX_LEDGER_BYTES: usize = 512 << 10;
/// Writes one creation tries before it counts in memory instead.
pub const MAX_ATTEMPTS: usize = 10;
/// Owners of one namespace the ledger keeps at most: a tenant naming made-up owners cannot push
/// another namespace's counts out.
pub const MAX_OWNERS_PER_NAMESPACE: usize = 32;
/// How long one creation may spend on the ledger.
pub const LEDGER_TIMEOUT: Duration = Duration::from_secs(2);

/// Where creations are counted.
#[async_trait]
pub trait LoopLedger: Send + Sync {
    /// Counts the creation of a Pod of `owner` (namespace, uid) with `images`, now.
    async fn created(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
    ) -> LoopVerdict;

    /// How long `owner`'s Pods are still left as written, if they are (a dry run or an UPDATE,
    /// which count nothing).
    async fn paused(&self, owner: (&str, &str)) -> Option<Duration>;
}

/// This process's memory: for a pinhook without a cluster (tests, `pinhook check`).
#[derive(Default)]
pub struct LocalLedger {
    breaker: LoopBreaker,
}

/// The counts in a ConfigMap every replica reads and writes.
pub struct ClusterLedger {
    api: Api<ConfigMap>,
    name: String,
    /// Where a creation is counted when the ConfigMap cannot be.
    fallback: LoopBreaker,
}

/// Why the ledger could not count a creation.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot read ConfigMap {name}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write ConfigMap {name}")]
    Write {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {name} does not exist (the chart renders it)")]
    Missing { name: String },
    #[error("ConfigMap {name} kept changing: {MAX_ATTEMPTS} writes lost the race")]
    Contended { name: String },
    #[error("ConfigMap {name} did not answer within {LEDGER_TIMEOUT:?}")]
    Timeout { name: String },
}

// === impl LocalLedger ===

#[async_trait]
impl LoopLedger for LocalLedger {
    async fn created(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
    ) -> LoopVerdict {
        self.breaker.created(settings, owner, images, now_seconds())
    }

    async fn paused(&self, owner: (&str, &str)) -> Option<Duration> {
        self.breaker.paused(owner, now_seconds())
    }
}

// === impl ClusterLedger ===

impl ClusterLedger {
    /// The ledger in ConfigMap `name` of `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> ClusterLedger {
        ClusterLedger {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            fallback: LoopBreaker::new(),
        }
    }

    async fn count(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
    ) -> Result<LoopVerdict, LedgerError> {
        let key = format!("{}/{}", owner.0, owner.1);
        for _ in 0..MAX_ATTEMPTS {
            let read = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|source| LedgerError::Read {
                    name: self.name.clone(),
                    source,
                })?;
            let Some(mut map) = read else {
                return Err(LedgerError::Missing {
                    name: self.name.clone(),
                });
            };
            let data = map.data.get_or_insert_with(BTreeMap::new);
            let mut owners = read_owners(data.get(OWNERS_KEY).map(String::as_str));
            let now = now_seconds();
            let verdict = owners
                .entry(key.clone())
                .or_default()
                .record(settings, images, now);
            data.insert(OWNERS_KEY.to_string(), write_owners(owners, settings, now));
            // `replace` carries the resourceVersion read above: a replica that wrote since makes
            // it 409, and the creation is counted again on what that replica wrote.
            match self
                .api
                .replace(&self.name, &PostParams::default(), &map)
                .await
            {
                Ok(_) => return Ok(verdict),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    // Another replica wrote in between: wait a little, a different little for
                    // each, and count again on what it wrote.
                    let jitter = u64::from(now_subsec_jitter()) % 20_000;
                    tokio::time::sleep(Duration::from_micros(5_000 + jitter)).await;
                    continue;
                }
                Err(source) => {
                    return Err(LedgerError::Write {
                        name: self.name.clone(),
                        source,
                    })
                }
            }
        }
        Err(LedgerError::Contended {
            name: self.name.clone(),
        })
    }
}

#[async_trait]
impl LoopLedger for ClusterLedger {
    async fn created(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
    ) -> LoopVerdict {
        if settings.max_pods == 0 {
            return LoopVerdict::Pin;
        }
        let counted = tokio::time::timeout(LEDGER_TIMEOUT, self.count(settings, owner, images))
            .await
            .unwrap_or_else(|_| {
                Err(LedgerError::Timeout {
                    name: self.name.clone(),
                })
            });
        match counted {
            Ok(verdict) => verdict,
            Err(e) => {
                warn!(error = %crate::error::error_chain(&e), "loop breaker: counted in this replica's memory only");
                self.fallback
                    .created(settings, owner, images, now_seconds())
            }
        }
    }

    async fn paused(&self, owner: (&str, &str)) -> Option<Duration> {
        let read = tokio::time::timeout(LEDGER_TIMEOUT, self.api.get_opt(&self.name)).await;
        let data = match read {
            Ok(Ok(Some(map))) => map.data.unwrap_or_default(),
            _ => return self.fallback.paused(owner, now_seconds()),
        };
        let mut owners = read_owners(data.get(OWNERS_KEY).map(String::as_str));
        owners
            .get_mut(&format!("{}/{}", owner.0, owner.1))?
            .paused_now(now_seconds())
    }
}

/// Microseconds that differ between two callers at once (the clock's).
fn now_subsec_jitter() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros())
}

/// The owners a ledger holds; a value that is not the ledger's JSON (edited by hand) starts
/// afresh rather than failing every creation.
fn read_owners(text: Option<&str>) -> BTreeMap<String, OwnerTrack> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// `owners` as the ledger's JSON: without what no longer matters at `now`, at most
/// [`MAX_LEDGER_OWNERS`] (the most recently active kept) and [`MAX_LEDGER_BYTES`].
fn write_owners(
    mut owners: BTreeMap<String, OwnerTrack>,
    settings: &LoopBreakerSettings,
    now: u64,
) -> String {
    owners.retain(|_, track| !track.is_stale(now, settings.window_seconds));
    // At most MAX_OWNERS_PER_NAMESPACE per namespace (the key is `<namespace>/<uid>`), the least
    // recently active dropped first.
    let mut per_namespace: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (key, track) in &owners {
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        per_namespace
            .entry(namespace.to_string())
            .or_default()
            .push((track.last_seen(), key.clone()));
    }
    for (_, mut keys) in per_namespace {
        if keys.len() > MAX_OWNERS_PER_NAMESPACE {
            keys.sort();
            for (_, key) in keys.iter().take(keys.len() - MAX_OWNERS_PER_NAMESPACE) {
                owners.remove(key);
            }
        }
    }
    if owners.len() > MAX_LEDGER_OWNERS {
        let mut by_age: Vec<(u64, String)> = owners
            .iter()
            .map(|(key, track)| (track.last_seen(), key.clone()))
            .collect();
        by_age.sort();
        for (_, key) in by_age.into_iter().take(owners.len() - MAX_LEDGER_OWNERS) {
            owners.remove(&key);
        }
    }
    loop {
        let text = serde_json::to_string(&owners).unwrap_or_default();
        if text.len() <= MAX_LEDGER_BYTES || owners.is_empty() {
            return text;
        }
        let oldest = owners
            .iter()
            .min_by_key(|(_, track)| track.last_seen())
            .map(|(key, _)| key.clone());
        if let Some(key) = oldest {
            owners.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LoopBreakerSettings {
        LoopBreakerSettings {
            max_pods: 3,
            window_seconds: 60,
            pause_seconds: 600,
        }
    }

    #[test]
    fn the_ledger_keeps_what_matters_within_its_bounds() {
        let now = 1_700_000_000;
        let mut owners = BTreeMap::new();
        for i in 0..(MAX_LEDGER_OWNERS + 50) {
            let mut track = OwnerTrack::default();
            let _ = track.record(&settings(), &["app:1"], now - 30 + (i as u64 % 30));
            owners.insert(format!("ns-{}/uid-{i}", i % 20), track);
        }
        let mut stale = OwnerTrack::default();
        let _ = stale.record(&settings(), &["app:1"], now - 3600);
        owners.insert("team/stale".to_string(), stale);
        let written = write_owners(owners, &settings(), now);
        let read = read_owners(Some(&written));
        assert_eq!(read.len(), MAX_LEDGER_OWNERS);
        assert!(!read.contains_key("team/stale"));
        assert!(written.len() <= MAX_LEDGER_BYTES);
        assert!(read_owners(Some("not json")).is_empty());
    }

    /// A namespace naming many owners keeps its own most recent ones, and another namespace's
    /// owner stays.
    #[test]
    fn one_namespace_cannot_push_another_out() {
        let now = 1_700_000_000;
        let mut owners = BTreeMap::new();
        let mut other = OwnerTrack::default();
        let _ = other.record(&settings(), &["app:1"], now - 50);
        owners.insert("victim/uid-v".to_string(), other);
        for i in 0..500u64 {
            let mut track = OwnerTrack::default();
            let _ = track.record(&settings(), &["app:1"], now - 40 + i % 40);
            owners.insert(format!("tenant/uid-{i}"), track);
        }
        let read = read_owners(Some(&write_owners(owners, &settings(), now)));
        assert!(read.contains_key("victim/uid-v"));
        assert_eq!(
            read.keys().filter(|k| k.starts_with("tenant/")).count(),
            MAX_OWNERS_PER_NAMESPACE
        );
    }

    /// Two replicas counting through one ledger trip it at `maxPods + 1` creations in all, and
    /// both then see the pause: what they write is one state.
    #[test]
    fn creations_from_two_replicas_add_up_in_one_ledger() {
        let now = 1_700_000_000;
        let mut ledger = String::new();
        let mut verdicts = Vec::new();
        for i in 0..6 {
            // replica A on even creations, B on odd: each reads what the other wrote
            let mut owners =
                read_owners(Some(&ledger).filter(|l| !l.is_empty()).map(|l| l.as_str()));
            let verdict = owners.entry("team/w1".to_string()).or_default().record(
                &settings(),
                &["db:1"],
                now + i,
            );
            ledger = write_owners(owners, &settings(), now + i);
            verdicts.push(match verdict {
                LoopVerdict::Pin => "pin",
                LoopVerdict::Tripped { .. } => "tripped",
                LoopVerdict::Paused { .. } => "paused",
            });
        }
        assert_eq!(
            verdicts,
            ["pin", "pin", "pin", "tripped", "paused", "paused"]
        );
    }
}
