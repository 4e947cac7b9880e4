//! `cargo run --release --example verdict_cost [DIGESTS]`: what a signature verification costs
//! pinhook in CPU and memory, without a registry (issue 46, item 6).
//!
//! Drives the [`VerifiedSignatures`] `pinhook serve` uses (pinhook's allocator, its verdict
//! cache, the `sigstore` crate's ECDSA P-256 verification) over a stand-in source that answers
//! at once with one cosign signature layer per digest, signed beforehand with a fresh key as
//! `cosign sign --key` signs. Prints, for DIGESTS (default 20,000) distinct digests:
//! - a cold verification (a cache miss: the layer judged, its signature checked), p50 and p99;
//! - a warm one (a cache hit: no cryptography), p50 and p99, beside a warm resolution-cache
//!   lookup of pinhook's own `CachingResolver` (what an unverified warm admission pays per
//!   image);
//! - the resident memory (`VmRSS`) the verdict cache grew by, per entry held (the cache keeps at
//!   most `VERDICT_CACHE_BYTES`, so DIGESTS past its cap measure it full).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pinhook::metrics::Metrics;
use pinhook::reference::{Digest, Reference};
use pinhook::registry::verified::VERDICT_CACHE_BYTES;
use pinhook::registry::{
    CacheConfig, CachingResolver, Credential, Resolver, SignatureVerifier, VerifiedSignatures,
};
use pinhook::signatures::Verdict;

#[path = "support/instant_registry.rs"]
mod instant_registry;
#[path = "support/rss.rs"]
mod rss;
#[path = "support/signed_source.rs"]
mod signed_source;

use instant_registry::InstantRegistry;
use rss::rss_kib;
use signed_source::SignedSource;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REPOSITORY: &str = "registry.example/team/app";
const WARM_LOOKUPS: usize = 200_000;

fn percentiles(mut took: Vec<Duration>) -> (f64, f64) {
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    (at(0.50).as_secs_f64() * 1e6, at(0.99).as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let digests: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 20_000,
    };
    pinhook::install_crypto_provider();
    let image = Reference::parse(&format!("{REPOSITORY}:1.0"))?;
    let order: Vec<Digest> = (0..digests)
        .map(|i| Digest::sha256_of(format!("image {i}").as_bytes()))
        .collect();
    let (source, _, trust) = SignedSource::sign(REPOSITORY, &order)?;
    let trust = Arc::new(trust);
    let verifier = VerifiedSignatures::new(Arc::new(source), None, Arc::new(Metrics::new()));
    let none: &[Credential] = &[];

    let empty_rss = rss_kib()?;
    let mut cold = Vec::with_capacity(digests);
    for digest in &order {
        let started = Instant::now();
        let verdict = verifier.verify(&image, digest, none, &trust).await?;
        cold.push(started.elapsed());
        if !matches!(verdict, Verdict::Verified { .. }) {
            anyhow::bail!("{digest}: {verdict:?}");
        }
    }
    let held = verifier.entries();
    let full_rss = rss_kib()?;

    // Warm: the last digest verified is held.
    let hot = order.last().ok_or_else(|| anyhow::anyhow!("no digest"))?;
    let mut warm = Vec::with_capacity(WARM_LOOKUPS);
    for _ in 0..WARM_LOOKUPS {
        let started = Instant::now();
        verifier.verify(&image, hot, none, &trust).await?;
        warm.push(started.elapsed());
    }
    // What an unverified warm admission pays per image: a resolution-cache hit.
    let cache = CachingResolver::new(
        Arc::new(InstantRegistry),
        CacheConfig::default(),
        Arc::new(Metrics::new()),
    );
    cache.resolve(&image, none).await?;
    let mut lookup = Vec::with_capacity(WARM_LOOKUPS);
    for _ in 0..WARM_LOOKUPS {
        let started = Instant::now();
        cache.resolve(&image, none).await?;
        lookup.push(started.elapsed());
    }

    let (cold50, cold99) = percentiles(cold);
    let (warm50, warm99) = percentiles(warm);
    let (look50, look99) = percentiles(lookup);
    let grown = full_rss.saturating_sub(empty_rss);
    println!(
        "{digests} digests verified, {held} verdicts held (cache {} KiB by its weigher)",
        VERDICT_CACHE_BYTES / 1024
    );
    println!("cold verification (ECDSA P-256, judged): p50 {cold50:.1} us  p99 {cold99:.1} us");
    println!("warm verification (verdict cache hit):   p50 {warm50:.2} us  p99 {warm99:.2} us");
    println!("warm resolution (resolution cache hit):  p50 {look50:.2} us  p99 {look99:.2} us");
    println!(
        "RSS: +{:.2} MiB for {held} verdicts: {:.0} bytes per verdict held",
        grown as f64 / 1024.0,
        grown as f64 * 1024.0 / held.max(1) as f64
    );
    Ok(())
}
