//! `cargo run --release --example warm_path [ITERATIONS] [THREADS]`: the CPU of each stage of
//! a warm `/mutate` in process, no HTTP (issue 13, item 2).
//!
//! Runs the captured 1.26 Deployment review (every container on one cached tag, as
//! `benches/load.sh` sends it) through the stages `mutate_handler` runs: `parse_review`,
//! `mutate` (policy, keyring, cache lookup, patch), `observe` (the summary log line at info,
//! through the logger `pinhook serve` sets up, writing to a sink; the review metrics) and
//! `review_body`, with pinhook's allocator and the cache `pinhook serve` uses in front of a
//! stand-in registry that answers at once.
//! Prints the median time per stage over ITERATIONS (default 200,000) reviews on each of
//! THREADS threads at once (default 1; 2 shows what sharing the pinner's cache, policy and
//! metrics between two cores costs), and beside them what the floor does with the same body
//! (parse it into a `Value` and drop it) on as many threads. A profile of
//! this loop (`perf record -g target/release/examples/warm_path`) shows pinhook's own code
//! without the TLS, HTTP and kernel costs around it, which `benches/load.sh` measures. With
//! `WARM_PATH_VERIFY=1` a `verify` entry covers the image, signed by a key made here: what a
//! warm verified admission adds (a verdict-cache hit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pinhook::admission::{self, Pinner, PinnerParts};
use pinhook::cluster::NoNamespaces;
use pinhook::metrics::Metrics;
use pinhook::policy::{Policy, PolicyHandle};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::NodeOnly;
use pinhook::registry::{CacheConfig, CachingResolver};
use pinhook::server::observe;
use tracing_subscriber::util::SubscriberInitExt as _;

#[path = "support/instant_registry.rs"]
mod instant_registry;
#[path = "support/signed_source.rs"]
mod signed_source;

use instant_registry::InstantRegistry;
use signed_source::SignedSource;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REVIEW: &str =
    include_str!("../tests/fixtures/admissionreview/v1.26/deployment-create-mutate.json");
const IMAGE: &str = "127.0.0.1:5000/team/app:1.0";

/// The review `benches/load.sh` sends: every container's image replaced by [`IMAGE`].
fn review() -> anyhow::Result<Vec<u8>> {
    let mut review: serde_json::Value = serde_json::from_str(REVIEW)?;
    let spec = review
        .pointer_mut("/request/object/spec/template/spec")
        .ok_or_else(|| anyhow::anyhow!("the fixture has no pod template"))?;
    for list in ["containers", "initContainers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            container["image"] = IMAGE.into();
        }
    }
    // Indented as jq writes it for benches/load.sh.
    Ok(serde_json::to_vec_pretty(&review)?)
}

type Stages = [Vec<Duration>; 5];

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().map_or(Ok(200_000), |n| n.parse())?;
    let threads: usize = args.next().map_or(Ok(1), |n| n.parse())?;
    anyhow::ensure!((1..=64).contains(&threads), "THREADS must be 1-64");
    // As `pinhook serve` logs (main.rs), into a sink.
    let (writer, _guard) = pinhook::log::writer::spawn(std::io::sink());
    pinhook::log::line::text_format(
        tracing_subscriber::EnvFilter::new(
            std::env::var("PINHOOK_LOG").unwrap_or_else(|_| "info".into()),
        ),
        false,
        writer.clone(),
    )
    .init();
    pinhook::log::line::install_writer(writer);
    let metrics = Arc::new(Metrics::new());
    // WARM_PATH_VERIFY=1: a `verify` entry covers the image, whose digest is signed (a verdict
    // cache hit per review once warm).
    let verify = std::env::var_os("WARM_PATH_VERIFY").is_some();
    let digest = pinhook::reference::Digest::sha256_of(IMAGE.as_bytes());
    let (source, pem, _) = SignedSource::sign("127.0.0.1:5000/team/app", &[digest])?;
    let mut text = "mode: enforce\nregistries:\n  allowPrivate: [\"127.0.0.1:5000\"]\n".to_string();
    if verify {
        let pem = serde_json::to_string(&pem)?;
        text.push_str(&format!(
            "verify:\n- images: [\"127.0.0.1:5000/team/*\"]\n  keys:\n  - pem: {pem}\n"
        ));
    }
    let policy = Policy::parse(&text)?;
    let signatures =
        pinhook::registry::VerifiedSignatures::new(Arc::new(source), None, metrics.clone());
    let resolver = Arc::new(CachingResolver::new(
        Arc::new(InstantRegistry),
        CacheConfig::default(),
        metrics.clone(),
    ));
    let pinner = Arc::new(Pinner::new(PinnerParts {
        policy: PolicyHandle::new(policy),
        resolver: resolver.clone(),
        dry_run_resolver: resolver,
        secrets: Arc::new(NodeOnly {
            node: Keyring::new(),
        }),
        namespaces: Arc::new(NoNamespaces),
        owner_ttl: Duration::from_secs(60),
        on_owner: None,
        loop_ledger: None,
        revision_pods: None,
        signatures: Some(Arc::new(signatures)),
    }));
    let body = Arc::new(review()?);

    // Each thread runs its own loop on its own runtime, all sharing one pinner and one set of
    // metrics, as the workers of `pinhook serve` do.
    let loops: Vec<_> = (0..threads)
        .map(|_| {
            let (pinner, metrics, body) = (pinner.clone(), metrics.clone(), body.clone());
            std::thread::spawn(move || -> anyhow::Result<(Stages, Vec<Duration>)> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let stages = runtime.block_on(run(&pinner, &metrics, &body, iterations))?;
                Ok((stages, floor(&body, iterations)?))
            })
        })
        .collect();
    let mut stages: Stages = Default::default();
    let mut floor = Vec::new();
    for handle in loops {
        let (own, own_floor) = handle
            .join()
            .map_err(|_| anyhow::anyhow!("a loop panicked"))??;
        for (all, own) in stages.iter_mut().zip(own) {
            all.extend(own);
        }
        floor.extend(own_floor);
    }
    let names = ["parse_review", "mutate", "observe", "review_body", "drop"];
    let mut total = 0.0;
    for (name, stage) in names.iter().zip(stages.iter_mut()) {
        let m = median(stage);
        total += m;
        println!("{name:<14} {m:7.2} us");
    }
    println!(
        "{:<14} {total:7.2} us ({} byte review, {iterations} iterations on each of {threads} threads)",
        "sum",
        body.len()
    );
    println!(
        "{:<14} {:7.2} us (the floor's parse and drop)",
        "floor",
        median(&mut floor)
    );
    Ok(())
}

/// `iterations` warm reviews (after 1,000 unmeasured), each stage timed.
async fn run(
    pinner: &Pinner,
    metrics: &Metrics,
    body: &[u8],
    iterations: usize,
) -> anyhow::Result<Stages> {
    let budget = Duration::from_secs(10);
    let mut stages: Stages = Default::default();
    for i in 0..iterations + 1_000 {
        let t0 = Instant::now();
        let request = admission::parse_review(body)?;
        let t1 = Instant::now();
        let decision = admission::mutate(pinner, &request, budget).await;
        let t2 = Instant::now();
        let result = decision.result.as_str();
        observe::observe_decision(metrics, "mutate", &request, &decision);
        observe::record_review(metrics, "mutate", &request.operation, result, t0);
        let t3 = Instant::now();
        let answer = admission::review_body(&decision.response)?;
        let t4 = Instant::now();
        drop((request, answer));
        let t5 = Instant::now();
        if decision.response.patch.is_none() {
            anyhow::bail!("review {i} was not pinned");
        }
        if i >= 1_000 {
            let took = [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4];
            for (stage, took) in stages.iter_mut().zip(took) {
                stage.push(took);
            }
        }
    }
    Ok(stages)
}

/// What the floor of benches/load.sh does with the same body: parse it into a `Value`, drop it.
fn floor(body: &[u8], iterations: usize) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = Instant::now();
        let value: serde_json::Value = serde_json::from_slice(body)?;
        drop(value);
        took.push(t0.elapsed());
    }
    Ok(took)
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}
