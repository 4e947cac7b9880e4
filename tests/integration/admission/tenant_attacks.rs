//! A tenant's attacks on the webhook every Pod write waits on, over real HTTPS against a real
//! registry, with Secrets served by the in-process fake Kubernetes API (issue 25 item 5).
//!
//! A review naming one large pull Secret (26 KB) 100,000 times: before names were
//! de-duplicated and capped, such a review (2.1 MB) took 29.4 s to answer a `?timeout=2s`
//! request, and `/healthz` waited 24.9 s beside it. Now the Secret is read once, the review is
//! answered within its deadline, and health checks on their own connections are served
//! meanwhile. (Since the memory model of issue 44 the review names it 90,000 times, about 60 MB
//! parsed, the most that fits the pool of large reviews; one naming it 120,000 times is
//! refused at once, unparsed.)
//!
//! Under load: four clients of tenant B post Pod reviews of an image resolved before the load
//! for six seconds while tenant A, on its own connections, runs each attack that once stalled
//! or exhausted pinhook, each attack's requests at once (as the apiserver calls the webhook for
//! concurrent writes): reviews naming the large Secret 90,000 times; reviews of 100 tags never
//! pushed each (every one a registry round trip); 8 MiB bodies. Every one of B's admissions is
//! answered 200, allowed and pinned to its digest within the deadline, and the process's
//! resident memory grows by less than 256 MiB (the chart's limit until issue 44, now 384 MiB) meanwhile
//! (the whole test process: pinhook, the fake API and both tenants' clients, so an upper
//! bound on pinhook's share). It prints one line: `tenant attacks: B sent N, failed F, p99 X
//! ms; A sent M (answers); RSS +R MiB (peak P MiB)`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::fake_kube::FakeKube;
use crate::common::images::{self, PushedIndex};
use crate::common::load::{quantile, Answer, Kind, Load, Replica, Shot, SERIAL};
use crate::common::pinhook::{apply_response, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{fixture_with_image, in_namespace, pod_review};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::KubeSecrets;
use serde_json::{json, Value};

const USER: &str = "puller";
const PASS: &str = "pull-secret-pass";
/// How often the attacking review names the Secret: 1.35 MB of body, about 60 MB parsed, nearly
/// the whole pool of large reviews (decided one at a time).
const NAMES: usize = 90_000;
/// How often a review too costly to parse names it: 1.8 MB of body, about 77 MB parsed, more
/// than the whole pool (refused at once, unparsed).
const NAMES_REFUSED: usize = 120_000;
/// The chart's memory limit for a pinhook replica (`resources.limits.memory`).
const CHART_MEMORY_LIMIT_MIB: u64 = 256;
const LOAD: Duration = Duration::from_secs(6);

struct World {
    registry: TestRegistry,
    pushed: PushedIndex,
    kube: FakeKube,
    pinhook: TestPinhook,
}

/// A registry with `auth` holding `repo:1.0`, the fake API, and pinhook reading Secrets from it.
async fn world(auth: RegistryAuth, repo: &str) -> World {
    let registry = TestRegistry::start(auth).await;
    let pushed = images::push_multi_arch(&registry, repo, "1.0", "tenant").await;
    let kube = FakeKube::start().await;
    let options = Options {
        secrets: Arc::new(KubeSecrets::new(kube.client(), Keyring::new())),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    World {
        registry,
        pushed,
        kube,
        pinhook,
    }
}

/// `namespace/big`: a 26 KB dockerconfigjson, the registry's login and 400 other registries'.
fn add_big_secret(world: &World, namespace: &str) {
    let mut auths = serde_json::Map::new();
    auths.insert(
        world.registry.host(),
        json!({"username": USER, "password": PASS}),
    );
    for i in 0..400 {
        auths.insert(
            format!("registry-{i:04}.example.com"),
            json!({"auth": "dXNlcjpwYXNzd29yZC1wYWRkaW5nLXBhZGRpbmc="}),
        );
    }
    let config = json!({ "auths": auths }).to_string();
    assert!(config.len() > 25_000, "{}", config.len());
    world.kube.add_raw_secret(
        namespace,
        "big",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &config,
    );
}

/// A Pod review in `namespace` naming `big` `count` times, as JSON (about 15 bytes a name).
fn secret_names_review(world: &World, namespace: &str, count: usize) -> Vec<u8> {
    let mut review = fixture_with_image(
        "v1.26/pod-create-pullsecrets-mutate.json",
        &world.registry,
        &world.pushed.reference,
    );
    in_namespace(&mut review, namespace);
    let names: Vec<Value> = (0..count).map(|_| json!({"name": "big"})).collect();
    review["request"]["object"]["spec"]["imagePullSecrets"] = Value::Array(names);
    let body = serde_json::to_vec(&review).expect("review");
    assert!(body.len() > count * 15, "{}", body.len());
    body
}

/// A client with connections of its own (as the kubelet's probes and another tenant have),
/// none kept idle when `fresh`.
fn own_client(pinhook: &TestPinhook, fresh: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(pinhook.ca_pem().as_bytes()).expect("ca");
    let builder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(10));
    let builder = if fresh {
        builder.pool_max_idle_per_host(0)
    } else {
        builder
    };
    builder.build().expect("client")
}

/// This process's resident set, KiB (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `body` for the life of the test binary: the attacker sends each many times without copying
/// it, so the memory measured is pinhook's, not the test's.
fn leaked(body: Vec<u8>) -> &'static [u8] {
    Box::leak(body.into_boxed_slice())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_secret_named_many_times_is_read_once_answered_in_time_and_health_keeps_answering() {
    let _serial = SERIAL.lock().await;
    let world = world(RegistryAuth::htpasswd(USER, PASS), "team/app").await;
    add_big_secret(&world, "team-a");
    // Named 120,000 times, the review would hold more than the whole pool of large reviews
    // parsed: refused at once, unparsed, nothing read.
    let started = Instant::now();
    let (status, answer) = world
        .pinhook
        .post(
            "/mutate?timeout=2s",
            secret_names_review(&world, "team-a", NAMES_REFUSED),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("pinhook does not parse it"), "{answer}");
    assert_eq!(
        world.kube.hits("secrets/big"),
        0,
        "{:?}",
        world.kube.reads()
    );
    // Named 90,000 times it is parsed: the Secret is read once, in time.
    let body = secret_names_review(&world, "team-a", NAMES);
    let size = body.len();
    let (kube, pinhook) = (&world.kube, &world.pinhook);

    // Health, on its own connections, every 20 ms while the review is answered.
    let probe = own_client(pinhook, true);
    let health_url = pinhook.url("/healthz");
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let status = probe.get(&health_url).send().await.map(|r| r.status());
                latencies.push((started.elapsed(), status.map(|s| s.as_u16()).ok()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            latencies
        })
    };
    // The same probes with nothing else asked of pinhook: what this machine gives right now.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let probes_before = 10;
    let started = Instant::now();
    let (status, answer) = pinhook.post("/mutate?timeout=2s", body).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let latencies = prober.await.expect("prober");

    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    // Read once, however often named.
    assert_eq!(kube.hits("secrets/big"), 1, "{:?}", kube.reads());
    // Within the review's own deadline: pinhook's contract with the apiserver.
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let failed = latencies.iter().filter(|(_, s)| *s != Some(200)).count();
    assert_eq!(failed, 0, "health checks failed: {latencies:?}");
    let (quiet, beside) = latencies.split_at(probes_before.min(latencies.len()));
    let slowest = |probes: &[(Duration, Option<u16>)]| {
        probes.iter().map(|(d, _)| *d).max().unwrap_or_default()
    };
    let (quiet_worst, worst) = (slowest(quiet), slowest(beside));
    assert!(beside.len() >= 5, "{} health checks beside", beside.len());
    // Under 100 ms, or within 3 times what the quiet probes took when the machine itself is
    // that slow (other tests run beside this one); never the seconds the stall cost.
    let bound = Duration::from_millis(100).max(quiet_worst * 3);
    assert!(
        worst < bound && worst < Duration::from_secs(1),
        "the slowest /healthz beside the review took {worst:?}, quiet {quiet_worst:?} \
         (all: {latencies:?}); review {took:?}"
    );
    eprintln!(
        "review of {} bytes answered in {took:?}; {} health checks beside it, slowest \
         {worst:?} (quiet: {quiet_worst:?})",
        size,
        beside.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_attacks_cost_no_admission_and_stay_within_the_memory_limit() {
    let _serial = SERIAL.lock().await;
    let world = world(RegistryAuth::None, "team-b/app").await;
    let (registry, pushed, pinhook) = (&world.registry, &world.pushed, &world.pinhook);
    let host = registry.host();

    // Tenant B's review, resolved once before the load.
    let mut b_review = pod_review(registry, &pushed.reference);
    in_namespace(&mut b_review, "team-b");
    let body = pinhook.mutate(&b_review).await;
    assert_eq!(
        apply_response(&b_review, &body)["spec"]["containers"][0]["image"],
        pushed.pinned_with_tag(),
        "{body}"
    );
    let b_review = Arc::new(b_review);

    // Tenant A's ammunition.
    add_big_secret(&world, "team-a");
    let secrets_body = leaked(secret_names_review(&world, "team-a", NAMES));
    let tags_bodies: Vec<&'static [u8]> = (0..6)
        .map(|round| {
            let mut review = pod_review(registry, &pushed.reference);
            in_namespace(&mut review, "team-a");
            let template = review["request"]["object"]["spec"]["containers"][0].clone();
            let containers: Vec<Value> = (0..100)
                .map(|i| {
                    let mut c = template.clone();
                    c["name"] = json!(format!("c{i}"));
                    c["image"] = json!(format!("{host}/team-a/ghost:r{round}-{i}"));
                    c
                })
                .collect();
            review["request"]["object"]["spec"]["containers"] = Value::Array(containers);
            leaked(serde_json::to_vec(&review).expect("json"))
        })
        .collect();
    let huge = leaked(vec![b' '; 8 << 20]);

    let baseline = rss_kib();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let attacker = {
        let client = own_client(pinhook, false);
        let url = pinhook.url("/mutate?timeout=2s");
        let done = done.clone();
        tokio::spawn(async move {
            let mut sent = 0usize;
            let mut statuses = std::collections::BTreeMap::<String, usize>::new();
            let post = |body: &'static [u8]| {
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
            };
            'attack: loop {
                let rounds: [(&str, Vec<&'static [u8]>); 3] = [
                    ("secret names", vec![secrets_body; 8]),
                    ("ghost tags", tags_bodies.clone()),
                    ("8 MiB body", vec![huge; 8]),
                ];
                // Each attack's requests at once, as the apiserver calls the webhook for
                // concurrent writes.
                // PINHOOK_ATTACKS (experiments only): a comma-separated subset of
                // "secret", "ghost", "huge" to run; all three by default.
                let only = std::env::var("PINHOOK_ATTACKS").ok();
                for (name, bodies) in rounds {
                    if done.load(Ordering::Relaxed) {
                        break 'attack;
                    }
                    if let Some(only) = &only {
                        let key = name.split(' ').next().unwrap_or_default();
                        let key = match key {
                            "secret" => "secret",
                            "ghost" => "ghost",
                            _ => "huge",
                        };
                        if !only.split(',').any(|o| o == key) {
                            continue;
                        }
                    }
                    sent += bodies.len();
                    let answers = futures::future::join_all(bodies.into_iter().map(&post)).await;
                    for answer in answers {
                        let status = match answer {
                            Ok(response) => response.status().as_u16().to_string(),
                            Err(e) => format!("transport: {e}"),
                        };
                        *statuses.entry(format!("{name}: {status}")).or_default() += 1;
                    }
                }
            }
            (sent, statuses)
        })
    };

    let load = Load {
        clients: 4,
        duration: LOAD,
        pause: Duration::from_millis(20),
        ..Load::default()
    };
    let replicas = [Replica {
        client: pinhook.client.clone(),
        base: pinhook.base.clone(),
    }];
    let expected = pushed.pinned_with_tag();
    let records = load
        .run(&replicas, Instant::now(), |_| {
            Some(Shot {
                kind: Kind::Cached,
                review: b_review.clone(),
                expected: expected.clone(),
            })
        })
        .await;
    done.store(true, Ordering::Relaxed);
    let (a_sent, a_statuses) = attacker.await.expect("attacker");
    sampler.await.expect("sampler");

    let mut failures = Vec::new();
    for record in &records {
        let ok = match &record.answer {
            Answer::Http { status: 200, body } => {
                body["response"]["allowed"] == true
                    && apply_response(&record.review, body)["spec"]["containers"][0]["image"]
                        == json!(record.expected)
                    && record.latency < Duration::from_secs(2)
            }
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "at {:?} after {:?}: {:?}",
                record.sent_at, record.latency, record.answer
            ));
        }
    }
    let latencies: Vec<Duration> = records.iter().map(|r| r.latency).collect();
    let peak_kib = peak.load(Ordering::Relaxed);
    let growth_mib = peak_kib.saturating_sub(baseline) / 1024;
    eprintln!(
        "tenant attacks: B sent {}, failed {}, p99 {} ms; A sent {a_sent} ({a_statuses:?}); RSS \
         +{growth_mib} MiB (peak {} MiB)",
        records.len(),
        failures.len(),
        quantile(&latencies, 0.99).as_millis(),
        peak_kib / 1024
    );
    assert!(records.len() >= 40, "B sent only {}", records.len());
    assert!(a_sent >= 6, "the attacks did not run: {a_statuses:?}");
    assert!(failures.is_empty(), "B's failed admissions: {failures:#?}");
    assert!(
        growth_mib < CHART_MEMORY_LIMIT_MIB,
        "resident memory grew by {growth_mib} MiB during the attacks"
    );
}

/// A Pod naming 128 large pull Secrets, the registry's login only in the last: every one was
/// read into the review's keyring and held while it waited on the registry (each of these
/// 26 KB Secrets about 160 KB parsed, 20 MB a review; Secrets of 1 MiB, 128 MiB a review,
/// as many reviews at once as the apiserver sent). Now a review keeps at most 256 KiB of
/// them: the first past it and the rest are not read, and the Pod is refused (in enforce) as
/// for a malformed Secret, since one not read may be such (issue 44). Another namespace's review with the same login in its one
/// Secret is pinned beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviews_pull_secrets_are_kept_only_to_its_share() {
    let _serial = SERIAL.lock().await;
    let world = world(RegistryAuth::htpasswd(USER, PASS), "team/app").await;
    let decoys = |login: bool| {
        let mut auths = serde_json::Map::new();
        for i in 0..400 {
            auths.insert(
                format!("registry-{i:04}.example.com"),
                json!({"auth": "dXNlcjpwYXNzd29yZC1wYWRkaW5nLXBhZGRpbmc="}),
            );
        }
        if login {
            auths.insert(
                world.registry.host(),
                json!({"username": USER, "password": PASS}),
            );
        }
        json!({ "auths": auths }).to_string()
    };
    let names: Vec<String> = (0..128).map(|i| format!("s{i:03}")).collect();
    for (i, name) in names.iter().enumerate() {
        world.kube.add_raw_secret(
            "team-a",
            name,
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            &decoys(i == 127),
        );
    }
    world.kube.add_raw_secret(
        "team-b",
        "s000",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &decoys(true),
    );
    let review = |namespace: &str, names: &[String]| {
        let mut review = fixture_with_image(
            "v1.26/pod-create-pullsecrets-mutate.json",
            &world.registry,
            &world.pushed.reference,
        );
        in_namespace(&mut review, namespace);
        let names: Vec<Value> = names.iter().map(|n| json!({ "name": n })).collect();
        review["request"]["object"]["spec"]["imagePullSecrets"] = Value::Array(names);
        serde_json::to_vec(&review).expect("review")
    };

    let (status, answer) = world
        .pinhook
        .post("/mutate?timeout=5s", review("team-a", &names))
        .await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    // Refused, not passed over: a Secret not read may be one kubelet refuses (a malformed
    // one was denied when it fit in the share, and must be past it too).
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].to_string();
    assert!(
        message.contains(
            "imagePullSecret team-a/s001 and the 126 after it not used: this Pod's pull \
             secrets pass 256 KiB, so pinhook cannot judge this Pod's pulls"
        ),
        "{answer}"
    );
    assert_eq!(
        world.kube.hits("secrets/s002"),
        0,
        "not read past the share"
    );
    assert_eq!(
        world.kube.hits("secrets/s127"),
        0,
        "not read past the share"
    );
    assert!(
        answer["response"]["patch"].is_null(),
        "resolved without the login in s127: not pinned ({answer})"
    );

    let (status, answer) = world
        .pinhook
        .post("/mutate?timeout=5s", review("team-b", &names[..1]))
        .await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patched = apply_response(
        &fixture_with_image(
            "v1.26/pod-create-pullsecrets-mutate.json",
            &world.registry,
            &world.pushed.reference,
        ),
        &answer,
    );
    assert!(
        patched.to_string().contains(&world.pushed.index_digest),
        "team-b pinned with its own Secret: {patched}"
    );
}
