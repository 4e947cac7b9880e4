//! The local demo (`scripts/demo.sh`): a real registry with a sample multi-arch image, pinhook
//! started as its own process with a generated certificate, and one Deployment review sent to
//! it over HTTPS. Prints what pinhook did. Reuses the integration-test harness.

// The integration tests' harness, of which this uses a part: the tests use all of it, and
// their binary is where an unused helper is an error.
#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::images;
use common::pinhook::{apply_response, response_patch, review_fixture};
use common::registry::{RegistryAuth, TestRegistry};
use serde_json::{json, Value};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let pinhook_bin = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/debug/pinhook".to_string());
    common::tls::init_crypto();

    println!("==> starting a local registry (Debian docker-registry, TLS) on 127.0.0.1");
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let mut pushed = Vec::new();
    for repo in ["app", "init", "sidecar"] {
        let index = images::push_multi_arch(&registry, &format!("team/{repo}"), "1.0", repo).await;
        println!(
            "    pushed {} (multi-arch index {})",
            index.reference, index.index_digest
        );
        pushed.push(index);
    }

    println!("==> generating a CA and a serving certificate into certs/demo/");
    let request = pinhook::certs::CertRequest {
        service: "pinhook".into(),
        namespace: "pinhook-system".into(),
        extra_sans: vec!["127.0.0.1".into(), "localhost".into()],
        validity_days: 7,
    };
    let files = pinhook::certs::generate(&request)?.write(std::path::Path::new("certs/demo"))?;

    // pinhook refuses to contact loopback registries unless the policy names them (a pod
    // spec must not make it probe internal hosts): allow the demo registry, and only it.
    let policy = std::path::Path::new("certs/demo/policy.yaml");
    std::fs::write(
        policy,
        format!(
            "mode: enforce\nregistries:\n  allowPrivate: [\"{}\"]\n",
            registry.host()
        ),
    )?;
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    println!("==> starting: {pinhook_bin} serve --listen {listen} --tls-cert {} --tls-key {} --registry-ca {} --policy {}",
        files.cert.display(), files.key.display(), registry.ca_path().display(), policy.display());
    let _pinhook = KillOnDrop(
        Command::new(&pinhook_bin)
            .args(["serve", "--listen", &listen])
            .arg("--tls-cert")
            .arg(&files.cert)
            .arg("--tls-key")
            .arg(&files.key)
            .arg("--registry-ca")
            .arg(registry.ca_path())
            .arg("--policy")
            .arg(policy)
            .env("PINHOOK_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("failed to start {pinhook_bin}"))?,
    );
    let ca = std::fs::read(&files.ca_cert)?;
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca)?])
        .build()?;
    wait_ready(&client, &format!("https://{listen}/readyz")).await?;

    let mut review = review_fixture("v1.26/deployment-create-mutate.json", &registry);
    let spec = &mut review["request"]["object"]["spec"]["template"]["spec"];
    let mut sidecar = spec["containers"][0].clone();
    sidecar["name"] = json!("sidecar");
    sidecar["image"] = json!(format!("{}/team/sidecar:1.0", registry.host()));
    if let Some(containers) = spec["containers"].as_array_mut() {
        containers.push(sidecar);
    }
    println!("==> POST /mutate with a Deployment AdmissionReview (3 images, all tags)");
    let url = format!("https://{listen}/mutate?timeout=10s");
    let started = Instant::now();
    let body: Value = client.post(&url).json(&review).send().await?.json().await?;
    let cold = started.elapsed();
    if body["response"]["allowed"] != json!(true) {
        bail!(
            "pinhook denied the review: {}",
            body["response"]["status"]["message"]
        );
    }
    if let Some(patch) = response_patch(&body) {
        println!("    JSON Patch: {}", serde_json::to_string(&patch)?);
    }
    let object = apply_response(&review, &body);
    let spec = &object["spec"]["template"]["spec"];
    for (field, list) in [
        ("initContainers", &spec["initContainers"]),
        ("containers", &spec["containers"]),
    ] {
        for container in list.as_array().into_iter().flatten() {
            println!(
                "    {field}[{}] -> {}",
                container["name"].as_str().unwrap_or("?"),
                container["image"].as_str().unwrap_or("?")
            );
        }
    }
    let started = Instant::now();
    let again: Value = client.post(&url).json(&review).send().await?.json().await?;
    println!(
        "==> cold {cold:?}, warm (cached) {:?}; warm response patches the same images: {}",
        started.elapsed(),
        response_patch(&again).map(|p| p.0.len()).unwrap_or(0) == 3
    );
    let all_pinned = pushed
        .iter()
        .all(|p| object.to_string().contains(&p.index_digest));
    println!("==> every image above is pinned to its index digest: {all_pinned}");
    if !all_pinned {
        bail!("the patched Deployment does not carry every index digest");
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

async fn wait_ready(client: &reqwest::Client, url: &str) -> Result<()> {
    for _ in 0..100 {
        if let Ok(response) = client.get(url).send().await {
            if response.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("pinhook did not become ready at {url}")
}
