//! Unit tests of the cache against a scripted registry stand-in.
use std::sync::atomic::Ordering;

use super::failures::backoff_delay;
use super::*;
use crate::registry::testing::{digest, reference, Answer, Scripted};

fn cache(inner: Arc<Scripted>, config: CacheConfig) -> CachingResolver {
    CachingResolver::new(inner, config, Arc::new(Metrics::new()))
}

fn quick() -> CacheConfig {
    CacheConfig {
        hit_ttl: Duration::from_millis(250),
        failure_ttl: Duration::from_millis(500),
        backoff_base: Duration::from_millis(200),
        backoff_cap: Duration::from_millis(500),
        ..CacheConfig::default()
    }
}

#[test]
fn backoff_doubles_per_failure_up_to_the_cap() {
    let config = CacheConfig::default();
    let secs = |failures| backoff_delay(&config, failures).as_secs();
    assert_eq!(
        [1, 2, 3, 4, 6, 7, 8, 1000].map(secs),
        [1, 2, 4, 8, 32, 60, 60, 60]
    );
}

#[tokio::test]
async fn not_found_is_remembered_for_the_failure_ttl_then_asked_again() {
    let inner = Scripted::new(&[Answer::NotFound, Answer::Digest('a')]);
    let cache = cache(inner.clone(), quick());
    let image = reference("registry.example/team/app:1.0");
    for _ in 0..3 {
        assert!(cache.resolve(&image, &[]).await.is_err());
    }
    assert_eq!(inner.calls(), 1, "the failure answers for its TTL");
    tokio::time::sleep(Duration::from_millis(750)).await;
    let resolution = cache.resolve(&image, &[]).await;
    assert_eq!(resolution.map(|r| r.digest).ok(), Some(digest('a')));
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn transport_errors_are_not_cached_but_back_off_and_success_resets_the_backoff() {
    let script = [
        Answer::Unreachable,
        Answer::Unreachable,
        Answer::Digest('a'),
        Answer::Unreachable,
        Answer::Digest('a'),
    ];
    let inner = Scripted::new(&script);
    let cache = cache(inner.clone(), quick());
    let image = reference("registry.example/team/app:1.0");

    assert!(cache.resolve(&image, &[]).await.is_err());
    let backing_off = cache.resolve(&image, &[]).await;
    assert!(
        matches!(backing_off, Err(RegistryError::BackingOff { .. })),
        "{backing_off:?}"
    );
    assert_eq!(inner.calls(), 1, "no call while backing off");
    tokio::time::sleep(Duration::from_millis(250)).await; // past 200 ms
    assert!(cache.resolve(&image, &[]).await.is_err());
    assert_eq!(
        inner.calls(),
        2,
        "a transport error is not remembered as an answer"
    );
    tokio::time::sleep(Duration::from_millis(450)).await; // past 400 ms (doubled)
    assert!(cache.resolve(&image, &[]).await.is_ok());
    assert_eq!(inner.calls(), 3);

    // After a success the next outage starts again at the base delay, not at 800 ms
    // (capped 500 ms).
    tokio::time::sleep(Duration::from_millis(300)).await; // past hit_ttl
    let stale = cache.resolve(&image, &[]).await;
    assert_eq!(
        stale.map(|r| r.source).ok(),
        Some(ResolutionSource::Stale),
        "the failure is answered with the last known digest"
    );
    assert_eq!(inner.calls(), 4);
    tokio::time::sleep(Duration::from_millis(250)).await; // past 200 ms only
    let fresh = cache.resolve(&image, &[]).await;
    assert_eq!(
        fresh.map(|r| r.source).ok(),
        Some(ResolutionSource::Registry)
    );
    assert_eq!(inner.calls(), 5);
}

#[tokio::test]
async fn a_stale_digest_is_served_only_within_max_stale() {
    let inner = Scripted::new(&[Answer::Digest('a'), Answer::Unreachable]);
    let config = CacheConfig {
        max_stale: Duration::from_millis(1000),
        backoff_base: Duration::ZERO,
        ..quick()
    };
    let cache = cache(inner.clone(), config);
    let image = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(300)).await; // past hit_ttl
    let stale = cache.resolve(&image, &[]).await;
    assert_eq!(stale.map(|r| r.source).ok(), Some(ResolutionSource::Stale));
    assert!(cache.last_known(&image, &[]).is_some());
    tokio::time::sleep(Duration::from_millis(1000)).await; // past max_stale
    assert!(cache.resolve(&image, &[]).await.is_err());
    assert!(cache.last_known(&image, &[]).is_none());
}

#[tokio::test]
async fn another_credential_never_sees_an_entry_it_did_not_make() {
    let inner = Scripted::new(&[Answer::Digest('a'), Answer::NotFound]);
    let cache = cache(inner.clone(), CacheConfig::default());
    let image = reference("registry.example/team/app:1.0");
    let secret = Credential::basic("team-a", "s3cret");
    assert!(cache
        .resolve(&image, std::slice::from_ref(&secret))
        .await
        .is_ok());
    assert!(cache.resolve(&image, &[secret]).await.is_ok());
    assert_eq!(inner.calls(), 1);
    assert!(
        cache.resolve(&image, &[]).await.is_err(),
        "without the secret the registry is asked, and says no"
    );
    assert!(cache.last_known(&image, &[]).is_none());
}

fn labels_of(cache: &CachingResolver) -> Vec<String> {
    let text = cache.shared.metrics.encode().unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("pinhook_registry_requests_total{"))
        .filter_map(|l| l.split("registry=\"").nth(1))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn hosts_that_never_answered_take_no_label() {
    // A tenant names 1,000 hosts that do not serve the image: they share `other`.
    let inner = Scripted::new(&[Answer::NotFound]);
    let cache = cache(inner, CacheConfig::default());
    for i in 0..1000 {
        let image = reference(&format!("made-up-{i}.example/team/app:1.0"));
        assert!(cache.resolve(&image, &[]).await.is_err());
    }
    assert_eq!(labels_of(&cache), vec!["other".to_string()]);
    // The registry that serves images still gets its own label, and keeps it when it fails.
    let mut script = vec![Answer::NotFound; 1000];
    script.extend([Answer::Digest('a'), Answer::NotFound]);
    let inner = Scripted::new(&script);
    let cache = self::cache(inner, CacheConfig::default());
    for i in 0..1000 {
        let image = reference(&format!("made-up-{i}.example/team/app:1.0"));
        let _ = cache.resolve(&image, &[]).await;
    }
    let real = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&real, &[]).await.is_ok());
    assert!(cache
        .resolve(&reference("registry.example/team/app:gone"), &[])
        .await
        .is_err());
    let labels = labels_of(&cache);
    assert_eq!(
        labels.iter().filter(|l| *l == "registry.example").count(),
        2,
        "ok and not_found, both under its name: {labels:?}"
    );
}

#[tokio::test]
async fn registry_labels_are_bounded() {
    let inner = Scripted::new(&[Answer::Digest('a')]);
    let cache = cache(inner, CacheConfig::default());
    for i in 0..(MAX_REGISTRY_LABELS + 10) {
        let image = reference(&format!("registry{i}.example/team/app:1.0"));
        assert!(cache.resolve(&image, &[]).await.is_ok());
    }
    let text = cache.shared.metrics.encode().unwrap_or_default();
    let labelled = text
        .lines()
        .filter(|l| l.starts_with("pinhook_registry_requests_total{"))
        .count();
    assert_eq!(labelled, MAX_REGISTRY_LABELS + 1, "{text}");
    assert!(text.contains("registry=\"other\""), "{text}");
}

#[tokio::test]
async fn calls_to_one_registry_are_limited() {
    let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(50));
    let config = CacheConfig {
        per_registry_concurrency: 2,
        ..CacheConfig::default()
    };
    let cache = cache(inner.clone(), config);
    let images: Vec<Reference> = (0..8)
        .map(|i| reference(&format!("registry.example/team/app:{i}")))
        .collect();
    let calls = images.iter().map(|image| cache.resolve(image, &[]));
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(inner.calls(), 8);
    assert_eq!(inner.most_at_once.load(Ordering::SeqCst), 2);
}

fn cache_lookups(cache: &CachingResolver, result: &str) -> String {
    let text = cache.shared.metrics.encode().unwrap_or_default();
    let prefix = format!("pinhook_cache_lookups_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or("0")
        .to_string()
}

#[tokio::test]
async fn a_call_nobody_waits_for_any_more_is_cancelled_and_the_next_lookup_asks_again() {
    let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_secs(30));
    let cache = cache(inner.clone(), CacheConfig::default());
    let image = reference("registry.example/team/app:1.0");
    let waits = (0..3)
        .map(|_| tokio::time::timeout(Duration::from_millis(100), cache.resolve(&image, &[])));
    let gave_up = futures::future::join_all(waits).await;
    assert!(
        gave_up.iter().all(Result::is_err),
        "all three hit their deadline"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        (inner.calls(), inner.running(), inner.finished()),
        (1, 0, 0),
        "one call for the three, dropped when the last gave up"
    );
    assert_eq!(cache_lookups(&cache, "cancelled"), "1");
    assert!(lock(&cache.shared.in_flight).is_empty());
    // A later lookup is not stuck on the cancelled flight: it leads a new one.
    let again = tokio::time::timeout(Duration::from_millis(100), cache.resolve(&image, &[]));
    assert!(again.await.is_err());
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn a_call_that_one_lookup_still_waits_for_goes_on() {
    let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(300));
    let cache = cache(inner.clone(), CacheConfig::default());
    let image = reference("registry.example/team/app:1.0");
    let impatient = tokio::time::timeout(Duration::from_millis(50), cache.resolve(&image, &[]));
    let patient = cache.resolve(&image, &[]);
    let (impatient, patient) = tokio::join!(impatient, patient);
    assert!(impatient.is_err());
    assert_eq!(patient.map(|r| r.digest).ok(), Some(digest('a')));
    assert_eq!((inner.calls(), inner.finished()), (1, 1));
    assert_eq!(cache_lookups(&cache, "cancelled"), "0");
}

#[tokio::test]
async fn a_registry_that_stops_answering_trips_its_breaker_and_no_other() {
    let inner = Scripted::new(&[Answer::Unreachable]);
    let config = CacheConfig {
        breaker: BreakerSettings {
            threshold: 3,
            pause: Duration::from_secs(30),
            pause_cap: Duration::from_secs(60),
        },
        ..CacheConfig::default()
    };
    let cache = cache(inner.clone(), config);
    for i in 0..3 {
        let image = reference(&format!("hung.example/team/app{i}:1.0"));
        assert!(cache.resolve(&image, &[]).await.is_err());
    }
    assert_eq!(inner.calls(), 3);
    let refused = cache
        .resolve(&reference("hung.example/team/other:1.0"), &[])
        .await;
    assert!(
        matches!(&refused, Err(RegistryError::NotAnswering { silent: 3, .. })),
        "{refused:?}"
    );
    assert_eq!(inner.calls(), 3, "no call while the breaker is open");
    assert_eq!(cache_lookups(&cache, "breaker_open"), "1");
    let elsewhere = cache
        .resolve(&reference("fine.example/team/app:1.0"), &[])
        .await;
    assert!(elsewhere.is_err());
    assert_eq!(inner.calls(), 4, "another registry is still asked");
}

#[tokio::test]
async fn a_call_cancelled_after_hanging_a_second_counts_as_silent() {
    let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_secs(30));
    let config = CacheConfig {
        breaker: BreakerSettings {
            threshold: 2,
            pause: Duration::from_secs(30),
            pause_cap: Duration::from_secs(60),
        },
        ..CacheConfig::default()
    };
    let cache = cache(inner.clone(), config);
    let hung = (0..2).map(|i| {
        let image = reference(&format!("hung.example/team/app{i}:1.0"));
        let cache = &cache;
        async move {
            tokio::time::timeout(Duration::from_millis(1100), cache.resolve(&image, &[])).await
        }
    });
    futures::future::join_all(hung).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = cache
        .resolve(&reference("hung.example/team/other:1.0"), &[])
        .await;
    assert!(
        matches!(&refused, Err(RegistryError::NotAnswering { silent: 2, .. })),
        "{refused:?}"
    );
    assert_eq!(inner.calls(), 2);
}

#[tokio::test]
async fn dry_runs_keep_to_the_registry_limit_backoff_and_breaker() {
    let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(50));
    let config = CacheConfig {
        per_registry_concurrency: 2,
        ..CacheConfig::default()
    };
    let cache = cache(inner.clone(), config);
    let dry = cache.read_only();
    let images: Vec<Reference> = (0..6)
        .map(|i| reference(&format!("registry.example/team/app:{i}")))
        .collect();
    let results = futures::future::join_all(images.iter().map(|i| dry.resolve(i, &[]))).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        inner.most_at_once.load(Ordering::SeqCst),
        2,
        "the registry's limit"
    );

    // A key admission found failing is backing off for dry runs too.
    let failing = Scripted::new(&[Answer::Unreachable]);
    let cache = super::tests::cache(failing.clone(), quick());
    let image = reference("registry.example/team/down:1.0");
    assert!(cache.resolve(&image, &[]).await.is_err());
    let dry = cache.read_only();
    let backing_off = dry.resolve(&image, &[]).await;
    assert!(
        matches!(backing_off, Err(RegistryError::BackingOff { .. })),
        "{backing_off:?}"
    );
    assert_eq!(failing.calls(), 1, "no call while backing off");
}

/// Waits (up to 2 s) until `inner` has answered `calls` calls.
async fn answered(inner: &Scripted, calls: usize) {
    for _ in 0..200 {
        if inner.finished() >= calls {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn refreshing() -> CacheConfig {
    CacheConfig {
        hit_ttl: Duration::from_millis(400),
        ..CacheConfig::default()
    }
}

/// A used entry is re-resolved once in its TTL's last quarter, in the background: every
/// lookup is answered from the cache at once, the entry stays fresh across the TTL boundary,
/// and a tag that moved is noticed and recorded.
#[tokio::test]
async fn a_used_entry_is_refreshed_once_ahead_of_its_ttl_and_a_move_is_noticed() {
    // The registry takes 200 ms: a lookup that waited on the refresh would take that long.
    let inner = Scripted::slow(
        &[Answer::Digest('a'), Answer::Digest('b')],
        Duration::from_millis(200),
    );
    let cache = cache(inner.clone(), refreshing());
    let image = reference("registry.example/team/app:1.0");
    assert_eq!(
        cache.resolve(&image, &[]).await.map(|r| r.digest).ok(),
        Some(digest('a'))
    );
    tokio::time::sleep(Duration::from_millis(320)).await; // past 3/4 of 400 ms
    for _ in 0..10 {
        let started = std::time::Instant::now();
        let hit = cache.resolve(&image, &[]).await;
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "waited on the refresh"
        );
        assert_eq!(
            hit.as_ref().map(|r| r.source).ok(),
            Some(ResolutionSource::Cache)
        );
        assert_eq!(hit.map(|r| r.digest).ok(), Some(digest('a')));
    }
    answered(&inner, 2).await;
    assert_eq!(
        inner.calls(),
        2,
        "ten lookups in the last quarter: one refresh"
    );
    assert_eq!(cache_lookups(&cache, "refresh"), "1");
    let moves = cache.recent_moves();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(
        (moves[0].from.clone(), moves[0].to.clone()),
        (digest('a'), digest('b'))
    );

    // Past the first entry's TTL the refreshed one answers, fresh: no lookup waits.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let hit = cache.resolve(&image, &[]).await;
    assert_eq!(
        hit.as_ref().map(|r| r.source).ok(),
        Some(ResolutionSource::Cache)
    );
    assert_eq!(hit.map(|r| r.digest).ok(), Some(digest('b')));
    assert_eq!(inner.calls(), 2);
}

/// An entry nobody uses in its last quarter is not refreshed: it ends at its TTL and the next
/// lookup takes the miss path.
#[tokio::test]
async fn an_unused_entry_is_not_refreshed() {
    let inner = Scripted::new(&[Answer::Digest('a')]);
    let cache = cache(inner.clone(), refreshing());
    let image = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(100)).await; // only a quarter in
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(500)).await; // past the TTL, unused meanwhile
    assert_eq!(inner.calls(), 1, "nothing was refreshed");
    let miss = cache.resolve(&image, &[]).await;
    assert_eq!(
        miss.map(|r| r.source).ok(),
        Some(ResolutionSource::Registry)
    );
    assert_eq!(inner.calls(), 2);
    assert_eq!(cache_lookups(&cache, "refresh"), "0");
}

/// A refresh that fails leaves the entry to answer until its TTL, backs the key off like any
/// failure, and is not retried by later lookups of the same entry.
#[tokio::test]
async fn a_failed_refresh_is_not_retried_and_the_entry_serves_its_ttl() {
    let inner = Scripted::new(&[Answer::Digest('a'), Answer::Unreachable]);
    let cache = cache(inner.clone(), refreshing());
    let image = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(320)).await;
    assert!(cache.resolve(&image, &[]).await.is_ok());
    answered(&inner, 2).await;
    for _ in 0..5 {
        let hit = cache.resolve(&image, &[]).await;
        assert_eq!(hit.map(|r| r.source).ok(), Some(ResolutionSource::Cache));
    }
    assert_eq!(inner.calls(), 2, "one refresh, not retried per lookup");
    let key = flight_key(&image, &[]);
    assert!(
        cache.shared.active_backoff(&key).is_some(),
        "the failure backs the key off"
    );
}

/// Dry runs read the cache without refreshing it, and `refresh_ahead: false` turns it off.
#[tokio::test]
async fn dry_runs_and_a_disabled_refresh_ahead_never_refresh() {
    let image = reference("registry.example/team/app:1.0");
    let inner = Scripted::new(&[Answer::Digest('a')]);
    let dry = cache(inner.clone(), refreshing());
    assert!(dry.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(320)).await;
    assert!(dry.read_only().resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(inner.calls(), 1, "a dry run does not refresh");

    let inner = Scripted::new(&[Answer::Digest('a')]);
    let config = CacheConfig {
        refresh_ahead: false,
        ..refreshing()
    };
    let cache = cache(inner.clone(), config);
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(320)).await;
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(inner.calls(), 1, "refresh-ahead is off");
}

/// Without a moka TTL, an entry older than `max_stale` (and `hit_ttl`) is absent: not served
/// stale, not the "from" of a tag move, and removed when a lookup finds it.
#[tokio::test]
async fn an_entry_past_max_stale_is_absent_and_removed() {
    let inner = Scripted::new(&[
        Answer::Digest('a'),
        Answer::Unreachable,
        Answer::Digest('b'),
    ]);
    let config = CacheConfig {
        max_stale: Duration::from_millis(500),
        backoff_base: Duration::ZERO,
        ..quick()
    };
    let cache = cache(inner.clone(), config);
    let image = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&image, &[]).await.is_ok());
    let key = EntryKey {
        tag: image.manifest_reference().into(),
        credential: Credential::Anonymous.fingerprint(),
    };
    tokio::time::sleep(Duration::from_millis(600)).await; // past max_stale
    assert!(cache.last_known(&image, &[]).is_none());
    assert!(
        !cache.shared.digests.contains_key(&key),
        "the lookup removed it"
    );
    assert!(
        cache.resolve(&image, &[]).await.is_err(),
        "an outage is not answered from it"
    );
    let fresh = cache.resolve(&image, &[]).await;
    assert_eq!(
        fresh.as_ref().map(|r| r.moved_from.clone()).ok(),
        Some(None)
    );
    assert_eq!(fresh.map(|r| r.digest).ok(), Some(digest('b')));
    assert!(
        cache.recent_moves().is_empty(),
        "{:?}",
        cache.recent_moves()
    );
}

/// `expire_all` makes fresh entries stale but never younger: `max_stale` still counts from
/// the resolution, however many recheck cycles pass.
#[tokio::test]
async fn expire_all_keeps_the_age_of_a_stale_entry() {
    let inner = Scripted::new(&[Answer::Digest('a')]);
    let config = CacheConfig {
        max_stale: Duration::from_millis(600),
        ..quick()
    };
    let cache = cache(inner.clone(), config);
    let image = reference("registry.example/team/app:1.0");
    assert!(cache.resolve(&image, &[]).await.is_ok());
    tokio::time::sleep(Duration::from_millis(400)).await; // stale, within max_stale
    cache.expire_all();
    let stale = cache.last_known(&image, &[]);
    assert!(
        stale
            .as_ref()
            .is_some_and(|s| s.age >= Duration::from_millis(400)),
        "{stale:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // 700 ms since resolved
    cache.expire_all();
    assert!(cache.last_known(&image, &[]).is_none());
}

/// A registry call runs as the tenant of the lookup that leads it: its reads take from that
/// tenant's part of the reserve (`registry::http::body`). The call is a task of its own, which
/// a task-local does not reach by itself.
#[tokio::test]
async fn a_flight_runs_as_its_leaders_tenant() {
    struct Tenants(Mutex<Vec<String>>);
    #[async_trait::async_trait]
    impl Resolver for Tenants {
        async fn resolve(
            &self,
            _: &Reference,
            _: &[Credential],
        ) -> Result<Resolution, RegistryError> {
            lock(&self.0).push(crate::tenant::current());
            Err(RegistryError::Unauthorized {
                registry: "registry.example".to_string(),
            })
        }
    }
    let inner = Arc::new(Tenants(Mutex::new(Vec::new())));
    let cache = CachingResolver::new(inner.clone(), quick(), Arc::new(Metrics::new()));
    let image = reference("registry.example/team/app:1.0");
    let _ = crate::tenant::scope("team-b", cache.resolve(&image, &[])).await;
    assert_eq!(*lock(&inner.0), ["team-b"]);
}

fn verified(policy: u64) -> Arc<VerifiedDigest> {
    Arc::new(VerifiedDigest {
        policy,
        signers: Arc::from(vec![(0, Arc::from("key sha256:abc"))]),
    })
}

/// What the cache hands back beside the digest of `image` for `credentials`.
async fn kept_of(
    cache: &CachingResolver,
    image: &Reference,
    credentials: &[Credential],
) -> (Digest, Option<u64>) {
    let found = cache.resolve(image, credentials).await;
    let found = found.unwrap_or_else(|e| panic!("{e}"));
    (found.digest, found.verified.map(|v| v.policy))
}

/// A kept verification comes back with its digest, to the credentials that made it, until
/// its time; it is never kept beside another digest; a re-resolution that finds the same
/// digest keeps it, one that finds the tag moved drops it.
#[tokio::test]
async fn kept_beside_its_digest_for_its_credentials_until_its_time() {
    let inner = Scripted::new(&[
        Answer::Digest('a'),
        Answer::Digest('a'),
        Answer::Digest('b'),
    ]);
    let config = CacheConfig {
        hit_ttl: Duration::from_millis(300),
        refresh_ahead: false,
        ..CacheConfig::default()
    };
    let cache = CachingResolver::new(inner.clone(), config, Arc::new(Metrics::new()));
    let image = reference("registry.example/team/app:1.0");
    let secret = Credential::basic("team-a", "s3cret");
    let with_secret = std::slice::from_ref(&secret);
    let later = Instant::now() + Duration::from_secs(60);

    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), None));
    cache.keep_verified(&image, &[], &digest('a'), verified(1), later);
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), Some(1)));
    // Other candidates find the same entry (anonymous made it), not its verification.
    assert_eq!(
        kept_of(&cache, &image, with_secret).await,
        (digest('a'), None)
    );
    // Never beside another digest than its own.
    cache.keep_verified(&image, &[], &digest('b'), verified(2), later);
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), Some(1)));
    // Up to its time only.
    cache.keep_verified(&image, &[], &digest('a'), verified(3), Instant::now());
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), None));
    cache.keep_verified(&image, &[], &digest('a'), verified(4), later);
    assert_eq!(inner.calls(), 1);

    // Past the entry's TTL the registry answers the same digest: still kept.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), None));
    assert_eq!(inner.calls(), 2);
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('a'), Some(4)));
    // Then the tag moved: the new digest has no verification.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('b'), None));
    assert_eq!(kept_of(&cache, &image, &[]).await, (digest('b'), None));
    assert_eq!(inner.calls(), 3);
}
