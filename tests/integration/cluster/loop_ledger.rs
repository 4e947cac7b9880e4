//! The loop breaker's ledger (issue 43): two replicas counting through one ConfigMap, over the
//! in-process fake API with the apiserver's optimistic concurrency (a replace with a stale
//! `resourceVersion` is a 409). Before, each replica counted in its own memory, so with the
//! chart's two replicas each saw about half the creations and paused on its own.

use std::sync::Arc;

use crate::common::fake_kube::FakeKube;
use pinhook::admission::loops::ledger::{ClusterLedger, LoopLedger, OWNERS_KEY};
use pinhook::admission::loops::LoopVerdict;
use pinhook::policy::LoopBreakerSettings;
use serde_json::json;

const PATH: &str = "/api/v1/namespaces/pinhook-system/configmaps/pinhook-loop-breaker";

fn settings() -> LoopBreakerSettings {
    LoopBreakerSettings {
        max_pods: 3,
        window_seconds: 60,
        pause_seconds: 600,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_count_every_creation_in_one_ledger() {
    let kube = FakeKube::start().await;
    kube.put(
        PATH,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pinhook-loop-breaker", "namespace": "pinhook-system",
                "resourceVersion": "1"}}),
    );
    let replicas: Vec<Arc<ClusterLedger>> = (0..2)
        .map(|_| {
            Arc::new(ClusterLedger::new(
                kube.client(),
                "pinhook-system",
                "pinhook-loop-breaker",
            ))
        })
        .collect();
    // Eight creations of one operator's Pod at once, four through each replica.
    let calls = (0..8).map(|i| {
        let replica = replicas[i % 2].clone();
        tokio::spawn(async move {
            replica
                .created(
                    &settings(),
                    ("team", "widget-uid"),
                    &["registry.example/db:1"],
                )
                .await
        })
    });
    let mut verdicts = Vec::new();
    for call in calls {
        verdicts.push(call.await.expect("the call finishes"));
    }
    let count = |want: fn(&LoopVerdict) -> bool| verdicts.iter().filter(|v| want(v)).count();
    assert_eq!(count(|v| *v == LoopVerdict::Pin), 3, "{verdicts:?}");
    assert_eq!(
        count(|v| matches!(v, LoopVerdict::Tripped { count: 4, .. })),
        1,
        "{verdicts:?}"
    );
    assert_eq!(
        count(|v| matches!(v, LoopVerdict::Paused { .. })),
        4,
        "{verdicts:?}"
    );
    // Both replicas see the pause, and a dry run's question counts nothing.
    for replica in &replicas {
        assert!(replica.paused(("team", "widget-uid")).await.is_some());
        assert!(replica.paused(("team", "other-uid")).await.is_none());
    }
    let stored = kube.get(PATH).expect("the ledger");
    let owners: serde_json::Value =
        serde_json::from_str(stored["data"][OWNERS_KEY].as_str().unwrap_or("{}"))
            .expect("the ledger's JSON");
    assert!(
        owners["team/widget-uid"]["paused_until"].is_u64(),
        "{owners}"
    );
}

/// Without its ConfigMap (not rendered, or not allowed) the breaker still works, in each
/// replica's memory, and says why in the log.
#[tokio::test]
async fn without_the_configmap_each_replica_counts_in_its_own_memory() {
    let kube = FakeKube::start().await;
    let ledger = ClusterLedger::new(kube.client(), "pinhook-system", "pinhook-loop-breaker");
    let mut verdicts = Vec::new();
    for _ in 0..5 {
        verdicts.push(
            ledger
                .created(&settings(), ("team", "w"), &["registry.example/db:1"])
                .await,
        );
    }
    assert!(
        matches!(verdicts[3], LoopVerdict::Tripped { .. }),
        "{verdicts:?}"
    );
    assert!(
        matches!(verdicts[4], LoopVerdict::Paused { .. }),
        "{verdicts:?}"
    );
}
