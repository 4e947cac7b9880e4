//! The load generator of `benches/e2e-admission.sh`: N Pod creates through a real apiserver,
//! one at a time, timed from the request to the last byte of the answer.
//!
//! Each create is a `POST /api/v1/namespaces/NS/pods` (server-side dry run with `--dry-run`:
//! `?dryRun=All`) of a Pod with `--images` containers (1 or 10), each of its own image, naming a
//! scheduler that does not exist (it stays Pending, unbound, and goes at once when deleted).
//! Every answer must be 201 and its images pinned (`--expect pinned`: every image carries
//! `@sha256:`) or left as written (`--expect unpinned`); any other answer fails the run.
//!
//! Images: `--warm-images A,B,...` uses these (the same for every create: after the warm-up,
//! pinhook answers them from its cache). `--fresh-tags HOST/REPO:TAG` pushes, before the timed
//! creates, one new tag of `REPO:TAG`'s manifest per image of each create (no auth: the e2e
//! registry), so that every create names tags pinhook has never seen: each image costs it a
//! registry request (its cache missed; its connection to the registry is warm).
//!
//! Around the timed creates it reads `utime + stime` of each `--cpu NAME=PID` from
//! `/proc/PID/stat`. After them, with real creates, it deletes the Pods it made (a
//! deletecollection by label; not timed).
//!
//! Prints one line: `n p50_ms p99_ms max_ms mean_ms` then, for each `--cpu`, that process's CPU
//! time per create in microseconds. `--latencies FILE` appends every latency (ms), one a line
//! (with paired namespaces, those of each paired namespace NS to `FILE.NS`).
//!
//! `--paired-namespace NS` makes every timed create a set: the same Pod (its own name) is also
//! created in NS, a namespace the webhooks' `namespaceSelector` leaves out, so the apiserver calls
//! no webhook for it; the creates of a set rotate which goes first (with one paired namespace:
//! ABBA), so that whatever slows the machine for a moment falls on every arm alike. Its Pods must
//! come back as written, or pinned when it is given as `NS=pinned` (a namespace another webhook,
//! such as `benches/e2e-admission.sh`'s webhook floor, pins). The flag may be repeated; the line
//! then ends, for each paired namespace in order, with `p50_ms p99_ms max_ms mean_ms` of its
//! creates, and the CPU times are per set.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(about = "Pod creates through a real apiserver, timed one at a time")]
struct Args {
    /// https://127.0.0.1:PORT of the apiserver
    #[arg(long)]
    server: String,
    /// The apiserver's bearer token
    #[arg(long)]
    token_file: PathBuf,
    /// CA certificate (PEM) of the apiserver and of the registry
    #[arg(long)]
    ca: Vec<PathBuf>,
    #[arg(long)]
    namespace: String,
    /// Timed creates
    #[arg(long, default_value_t = 200)]
    count: usize,
    /// Untimed creates first (the same kind of images)
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Containers (distinct images) per Pod
    #[arg(long, default_value_t = 1)]
    images: usize,
    /// Server-side dry run (`?dryRun=All`)
    #[arg(long)]
    dry_run: bool,
    /// Images for every create (at least --images of them)
    #[arg(long, value_delimiter = ',')]
    warm_images: Vec<String>,
    /// HOST/REPO:TAG whose manifest is pushed under a fresh tag per image of each create
    #[arg(long)]
    fresh_tags: Option<String>,
    /// pinned | unpinned: what every created Pod's images must be
    #[arg(long)]
    expect: String,
    /// A name for the Pods (and their label): unique per run of this client
    #[arg(long)]
    label: String,
    /// NAME=PID of a process whose CPU time to measure
    #[arg(long)]
    cpu: Vec<String>,
    /// Clock ticks per second of /proc/PID/stat (`getconf CLK_TCK`)
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Append every timed latency (ms) to this file
    #[arg(long)]
    latencies: Option<PathBuf>,
    /// NS or NS=pinned: pair every create with one in this namespace (see above); repeatable
    #[arg(long)]
    paired_namespace: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    ensure!(args.images >= 1, "--images must be at least 1");
    let pinned = match args.expect.as_str() {
        "pinned" => true,
        "unpinned" => false,
        other => bail!("--expect must be pinned or unpinned, not {other:?}"),
    };
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(4);
    for ca in &args.ca {
        let pem = std::fs::read(ca).with_context(|| format!("read {}", ca.display()))?;
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
    }
    let client = builder.build()?;
    let token = std::fs::read_to_string(&args.token_file)?
        .trim()
        .to_string();
    let cpus: Vec<(String, u32)> = args
        .cpu
        .iter()
        .map(|s| {
            let (name, pid) = s.split_once('=').context("--cpu NAME=PID")?;
            Ok((name.to_string(), pid.parse()?))
        })
        .collect::<Result<_>>()?;

    let total = args.warmup + args.count;
    let images: Vec<Vec<String>> = match &args.fresh_tags {
        Some(source) => push_fresh_tags(&client, source, &args.label, total, args.images).await?,
        None => {
            ensure!(
                args.warm_images.len() >= args.images,
                "--warm-images names {} images, --images wants {}",
                args.warm_images.len(),
                args.images
            );
            vec![args.warm_images[..args.images].to_vec(); total]
        }
    };

    let url_in = |namespace: &str| {
        format!(
            "{}/api/v1/namespaces/{namespace}/pods{}",
            args.server.trim_end_matches('/'),
            if args.dry_run { "?dryRun=All" } else { "" }
        )
    };
    // arm 0: --namespace; then each --paired-namespace, in order
    let mut arms = vec![Arm {
        url: url_in(&args.namespace),
        namespace: args.namespace.clone(),
        pinned,
    }];
    for spec in &args.paired_namespace {
        let (namespace, pinned) = match spec.split_once('=') {
            None => (spec.as_str(), false),
            Some((ns, "pinned")) => (ns, true),
            Some(_) => bail!("--paired-namespace NS or NS=pinned, not {spec:?}"),
        };
        arms.push(Arm {
            url: url_in(namespace),
            namespace: namespace.to_string(),
            pinned,
        });
    }
    let create = |url: &str, i: usize| {
        let containers: Vec<Value> = images[i]
            .iter()
            .enumerate()
            .map(|(j, image)| json!({ "name": format!("c{j}"), "image": image }))
            .collect();
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": format!("{}-{i}", args.label), "labels": { "e2e-cost": args.label } },
            "spec": {
                "schedulerName": "e2e-cost-none",
                "terminationGracePeriodSeconds": 0,
                "containers": containers,
            },
        });
        client
            .post(url)
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(serde_json::to_vec(&pod).expect("a Pod serializes"))
    };

    for i in 0..args.warmup {
        for arm in &arms {
            let body = send(create(&arm.url, i)).await?;
            check(&body, args.images, arm.pinned)
                .with_context(|| format!("warm-up create {i} in {}", arm.namespace))?;
        }
    }
    let before = cpu_ticks(&cpus)?;
    let mut latencies: Vec<Vec<f64>> = vec![Vec::with_capacity(args.count); arms.len()];
    let mut bodies: Vec<Vec<axum::body::Bytes>> = vec![Vec::with_capacity(args.count); arms.len()];
    for i in args.warmup..total {
        // the arms of a set in rotation: each goes first, second... equally often
        for k in 0..arms.len() {
            let a = (i + k) % arms.len();
            let (ms, body) = timed(create(&arms[a].url, i)).await?;
            latencies[a].push(ms);
            bodies[a].push(body);
        }
    }
    let after = cpu_ticks(&cpus)?;
    for (arm, arm_bodies) in arms.iter().zip(&bodies) {
        for (i, body) in arm_bodies.iter().enumerate() {
            check(body, args.images, arm.pinned)
                .with_context(|| format!("create {} in {}", args.warmup + i, arm.namespace))?;
        }
    }
    if !args.dry_run {
        for Arm { namespace, .. } in &arms {
            let delete = format!(
                "{}/api/v1/namespaces/{namespace}/pods?labelSelector=e2e-cost%3D{}",
                args.server.trim_end_matches('/'),
                args.label
            );
            let status = client
                .delete(&delete)
                .bearer_auth(&token)
                .send()
                .await?
                .status();
            ensure!(
                status.is_success(),
                "deleting the Pods in {namespace}: {status}"
            );
        }
    }

    if let Some(path) = &args.latencies {
        use std::io::Write;
        for (a, arm_latencies) in latencies.iter().enumerate() {
            let path = match a {
                0 => path.clone(),
                _ => PathBuf::from(format!("{}.{}", path.display(), arms[a].namespace)),
            };
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            for ms in arm_latencies {
                writeln!(f, "{ms:.3}")?;
            }
        }
    }
    let mut line = summary(&mut latencies[0]);
    for (b, a) in before.iter().zip(&after) {
        let us = (a - b) as f64 * 1e6 / args.clk_tck as f64 / args.count.max(1) as f64;
        line.push_str(&format!(" {us:.0}"));
    }
    for arm_latencies in latencies.iter_mut().skip(1) {
        line.push(' ');
        line.push_str(&summary(arm_latencies));
    }
    println!("{line}");
    Ok(())
}

/// Where one arm of a set creates its Pods, and what their images must be.
struct Arm {
    namespace: String,
    url: String,
    pinned: bool,
}

/// One create, timed from the request to the last byte of the answer: (ms, body).
async fn timed(request: reqwest::RequestBuilder) -> Result<(f64, axum::body::Bytes)> {
    let started = Instant::now();
    let body = send(request).await?;
    Ok((started.elapsed().as_secs_f64() * 1000.0, body))
}

/// `n p50 p99 max mean` of these latencies (sorted in place).
fn summary(latencies: &mut [f64]) -> String {
    let mean = latencies.iter().sum::<f64>() / latencies.len().max(1) as f64;
    latencies.sort_by(f64::total_cmp);
    format!(
        "{} {:.3} {:.3} {:.3} {:.3}",
        latencies.len(),
        percentile(latencies, 50.0),
        percentile(latencies, 99.0),
        latencies.last().copied().unwrap_or(0.0),
        mean
    )
}

/// Sends one create; its whole body (an answer other than 201 is an error).
async fn send(request: reqwest::RequestBuilder) -> Result<axum::body::Bytes> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    if status != 201 {
        bail!(
            "the apiserver answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(400)])
        );
    }
    Ok(body)
}

/// The created Pod has `images` containers, all pinned (or none).
fn check(body: &[u8], images: usize, pinned: bool) -> Result<()> {
    let pod: Value = serde_json::from_slice(body)?;
    let stored: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .context("no containers in the answer")?
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    ensure!(stored.len() == images, "answer has {} images", stored.len());
    for image in stored {
        ensure!(
            image.contains("@sha256:") == pinned,
            "stored image {image} (expected {})",
            if pinned { "pinned" } else { "as written" }
        );
    }
    Ok(())
}

/// Nearest rank.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `utime + stime` of each process, in clock ticks.
fn cpu_ticks(cpus: &[(String, u32)]) -> Result<Vec<u64>> {
    cpus.iter()
        .map(|(name, pid)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .with_context(|| format!("{name} (pid {pid}) is gone"))?;
            // fields after the command name (which may hold spaces), from field 3 on
            let rest = stat.rsplit_once(')').context("odd /proc stat")?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields[11].parse()?;
            let stime: u64 = fields[12].parse()?;
            Ok(utime + stime)
        })
        .collect()
}

/// Pushes `source`'s manifest under `count * per` new tags of its repository; returns the
/// images, `per` for each create.
async fn push_fresh_tags(
    client: &reqwest::Client,
    source: &str,
    label: &str,
    count: usize,
    per: usize,
) -> Result<Vec<Vec<String>>> {
    let (host, rest) = source
        .split_once('/')
        .context("--fresh-tags HOST/REPO:TAG")?;
    let (repo, tag) = rest
        .rsplit_once(':')
        .context("--fresh-tags HOST/REPO:TAG")?;
    let accept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
    let response = client
        .get(format!("https://{host}/v2/{repo}/manifests/{tag}"))
        .header("Accept", accept)
        .send()
        .await?;
    ensure!(
        response.status().is_success(),
        "GET {source}: {}",
        response.status()
    );
    let media_type = response
        .headers()
        .get("content-type")
        .context("no content type")?
        .to_str()?
        .to_string();
    let manifest = response.bytes().await?;
    let images: Vec<Vec<String>> = (0..count)
        .map(|i| {
            (0..per)
                .map(|j| format!("{host}/{repo}:{label}-{i}-{j}"))
                .collect()
        })
        .collect();
    stream::iter(images.iter().flatten().map(|image| {
        let tag = image.rsplit_once(':').expect("a tag").1.to_string();
        let (client, media_type, manifest) = (client.clone(), media_type.clone(), manifest.clone());
        let url = format!("https://{host}/v2/{repo}/manifests/{tag}");
        async move {
            let status = client
                .put(&url)
                .header("Content-Type", media_type)
                .body(manifest)
                .send()
                .await?
                .status();
            ensure!(status.as_u16() == 201, "PUT {url}: {status}");
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(8)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(images)
}
