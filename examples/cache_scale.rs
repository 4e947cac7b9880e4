//! `cargo run --release --example cache_scale [ENTRIES]`: memory and warm latency of the
//! resolution cache at scale (issue 13, item 4).
//!
//! Fills a [`CachingResolver`] (the one `pinhook serve` uses, with pinhook's allocator) with
//! ENTRIES (default 100,000) distinct (image, credential) entries: ENTRIES / 4 repositories,
//! each resolved with four different pull-secret credentials (the per-namespace credentials of
//! the lessons; each makes its own entry). The registry behind it is a stand-in answering at
//! once, so only the cache is measured. Prints the process's resident memory (`VmRSS`) before
//! and after, per entry, and the latency of a warm lookup (p50, p99 of 200,000 sequential
//! lookups of one hot entry, and of lookups spread over every entry) when the cache holds one
//! entry and when it holds ENTRIES. Goal: ≤ 64 MiB above the empty process, warm latency
//! unchanged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pinhook::metrics::Metrics;
use pinhook::reference::Reference;
use pinhook::registry::{CacheConfig, CachingResolver, Credential, ResolutionSource, Resolver};

#[path = "support/instant_registry.rs"]
mod instant_registry;
#[path = "support/rss.rs"]
mod rss;

use instant_registry::InstantRegistry;
use rss::rss_kib;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const LOOKUPS: usize = 200_000;
const CREDENTIALS: usize = 4;

/// (p50, p99) in microseconds of `LOOKUPS` sequential lookups, the i-th of entry
/// `i % entries` (`entries` 1: one hot entry).
async fn lookups(
    cache: &CachingResolver,
    images: &[Reference],
    credentials: &[Vec<Credential>],
    entries: usize,
) -> anyhow::Result<(f64, f64)> {
    let mut took = Vec::with_capacity(LOOKUPS);
    for i in 0..LOOKUPS {
        let entry = i % entries;
        let (reference, credentials) = (
            &images[entry / CREDENTIALS],
            &credentials[entry % CREDENTIALS],
        );
        let started = Instant::now();
        let resolution = cache.resolve(reference, credentials).await?;
        took.push(started.elapsed());
        if resolution.source != ResolutionSource::Cache {
            anyhow::bail!(
                "lookup {i} of {} was not a cache hit",
                reference.tag_reference()
            );
        }
    }
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    Ok((at(0.50).as_secs_f64() * 1e6, at(0.99).as_secs_f64() * 1e6))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let entries: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 100_000,
    };
    let repositories = entries.div_ceil(CREDENTIALS);
    let credentials: Vec<Vec<Credential>> = (0..CREDENTIALS)
        .map(|c| {
            vec![Credential::basic(
                format!("team-{c}"),
                format!("secret-{c}"),
            )]
        })
        .collect();
    let images: Vec<Reference> = (0..repositories)
        .map(|i| {
            Reference::parse(&format!(
                "registry-{}.example/team-{}/app-{i}:1.{}",
                i % 50,
                i % 977,
                i % 7
            ))
        })
        .collect::<Result<_, _>>()?;
    let config = CacheConfig {
        max_entries: entries as u64,
        ..CacheConfig::default()
    };
    let cache = CachingResolver::new(Arc::new(InstantRegistry), config, Arc::new(Metrics::new()));

    let empty_rss = rss_kib()?;
    cache.resolve(&images[0], &credentials[0]).await?;
    let (small_p50, small_p99) = lookups(&cache, &images, &credentials, 1).await?;

    let started = Instant::now();
    for entry in 0..entries {
        let (image, credential) = (
            &images[entry / CREDENTIALS],
            &credentials[entry % CREDENTIALS],
        );
        cache.resolve(image, credential).await?;
    }
    let filled_in = started.elapsed();
    // Let moka apply its pending inserts before measuring.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let full_rss = rss_kib()?;
    let (hot_p50, hot_p99) = lookups(&cache, &images, &credentials, 1).await?;
    let (spread_p50, spread_p99) = lookups(&cache, &images, &credentials, entries).await?;
    let grown = full_rss.saturating_sub(empty_rss);
    println!(
        "cache filled with {entries} entries ({repositories} repositories x {CREDENTIALS} credentials) in {:.2} s",
        filled_in.as_secs_f64()
    );
    println!(
        "RSS: {:.1} MiB empty, {:.1} MiB full: +{:.1} MiB ({:.0} bytes per entry); goal <= 64 MiB: {}",
        empty_rss as f64 / 1024.0,
        full_rss as f64 / 1024.0,
        grown as f64 / 1024.0,
        grown as f64 * 1024.0 / entries.max(1) as f64,
        if grown <= 64 * 1024 { "met" } else { "NOT met" }
    );
    println!("warm lookup, 1 entry:              p50 {small_p50:.2} us  p99 {small_p99:.2} us");
    println!("warm lookup, full, one hot entry:  p50 {hot_p50:.2} us  p99 {hot_p99:.2} us");
    println!("warm lookup, full, every entry:    p50 {spread_p50:.2} us  p99 {spread_p99:.2} us");
    println!(
        "ratio full / 1 entry: p50 {:.2} x (hot), {:.2} x (spread)",
        hot_p50 / small_p50,
        spread_p50 / small_p50
    );
    Ok(())
}
