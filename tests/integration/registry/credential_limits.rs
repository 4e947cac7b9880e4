//! The bounds on credential provider plugin runs under attack (issue 25, "bounded work per
//! tenant action"): anyone who may create a Pod chooses how many distinct images a review
//! names, and each one matching a provider's `matchImages` asks for a plugin run. The plugin
//! here is this package's example, sleeping far longer than any admission waits; the live
//! plugin processes are counted by scanning `/proc` for the test's own plugin directory.
//!
//! Found by the security review, before the limits: 3 reviews of 100 images left 300 plugin
//! processes alive, for as long as the plugin slept (up to the 60 s exec timeout), after every
//! admission had stopped waiting.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::credential_programs::{PluginSetup, Provider};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::provider::{CredentialProviders, ProviderFiles, Settings};

/// How long the plugin sleeps: far past every wait below, well under its exec timeout.
const PLUGIN_SLEEP: &str = "20000";

/// Live (not zombie) processes whose command line names `dir`, and their resident memory in
/// KiB. A killed plugin counts until it is dead.
fn live_plugins(dir: &Path) -> (usize, u64) {
    let needle = dir.to_string_lossy().into_owned();
    let mut count = 0;
    let mut rss_kib = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    for entry in entries.flatten() {
        let proc_dir = entry.path();
        let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(&needle) {
            continue;
        }
        let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
        let zombie = status
            .lines()
            .any(|l| l.starts_with("State:") && (l.contains('Z') || l.contains('X')));
        if zombie {
            continue;
        }
        count += 1;
        rss_kib += status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (count, rss_kib)
}

/// Samples [`live_plugins`] every 20 ms until `stop`; returns the peak count and RSS.
fn sample_peak(dir: &Path, stop: Arc<std::sync::atomic::AtomicBool>) -> (usize, u64) {
    let mut peak = (0, 0);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let now = live_plugins(dir);
        peak = (peak.0.max(now.0), peak.1.max(now.1));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak
}

fn keyring_of(setup: &PluginSetup, settings: Settings) -> Keyring {
    let files = ProviderFiles {
        config: setup.write_config(),
        bin_dir: setup.bin_dir(),
        settings,
    };
    let providers = CredentialProviders::load(&files, None).expect("the config is valid");
    let mut keyring = Keyring::new();
    keyring.push_source(Arc::new(providers));
    keyring
}

/// `count` distinct repositories of `registry.attack.example`, review `review`'s own.
fn images(review: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("registry.attack.example/r{review}/image-{i}"))
        .collect()
}

/// What one attack left behind.
struct Aftermath {
    peak: usize,
    peak_rss_kib: u64,
    /// How long plugins stayed alive after the last caller gave up (`None`: still alive when
    /// we stopped looking).
    lingered: Option<Duration>,
    warnings: Vec<String>,
}

/// Runs `reviews` concurrent reviews of 100 distinct plugin-matching images each against
/// `keyring`: the first ones until the plugin wait ends, the last one dropped after 500 ms (an
/// admission whose deadline passed first). Then waits up to `look` for the plugins to go.
async fn attack(
    setup: &PluginSetup,
    keyring: Keyring,
    reviews: usize,
    look: Duration,
) -> Aftermath {
    let dir = setup.bin_dir();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || sample_peak(&dir, stop))
    };
    let asks = (0..reviews).map(|review| {
        let keyring = keyring.clone();
        async move {
            let images = images(review, 100);
            let asked = keyring.for_images(&images);
            match review + 1 == reviews {
                true => tokio::time::timeout(Duration::from_millis(500), asked)
                    .await
                    .map(|(_, warnings)| warnings)
                    .unwrap_or_default(),
                false => asked.await.1,
            }
        }
    });
    let warnings: Vec<String> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    let gave_up = Instant::now();
    let mut lingered = None;
    while gave_up.elapsed() < look {
        if live_plugins(&dir).0 == 0 {
            lingered = Some(gave_up.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (peak, peak_rss_kib) = sampler.join().expect("the sampler ends");
    Aftermath {
        peak,
        peak_rss_kib,
        lingered,
        warnings,
    }
}

fn sleeping_provider<'a>(name: &'a str, env: &'a [(&'a str, &'a str)]) -> Provider<'a> {
    Provider {
        name,
        match_images: &["registry.attack.example"],
        default_cache_duration: "1h",
        env,
    }
}

/// 3 concurrent reviews of 100 distinct plugin-matching images each (the review's input):
/// never more plugin processes than the per-provider limit (4 by default), and once every
/// caller has given up (two at the 1 s plugin wait, one dropped at 500 ms) none is left
/// within 2 s, where before the fix 300 slept on for the plugin's full 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_plugin_images_run_at_most_the_limit_and_none_outlives_its_callers() {
    let env = [("PLUGIN_SLEEP_MS", PLUGIN_SLEEP)];
    let setup = PluginSetup::new().provider(sleeping_provider("sleeper", &env));
    let settings = Settings {
        wait: Duration::from_secs(1),
        ..Settings::default()
    };
    // PINHOOK_MEASURE_LINGER=1 looks for as long as the plugin sleeps, to measure the old code.
    let look = match std::env::var_os("PINHOOK_MEASURE_LINGER") {
        Some(_) => Duration::from_secs(70),
        None => Duration::from_secs(2),
    };
    let after = attack(&setup, keyring_of(&setup, settings), 3, look).await;
    println!(
        "300 plugin images in 3 reviews: peak {} live plugin processes ({} KiB RSS), \
         {} plugin runs started, gone {:?} after the callers gave up",
        after.peak,
        after.peak_rss_kib,
        setup.runs("sleeper"),
        after.lingered
    );
    assert!(after.peak <= 4, "peak {} plugin processes", after.peak);
    assert!(
        after.lingered.is_some(),
        "plugin processes still alive 2 s after every caller gave up"
    );
    assert!(setup.runs("sleeper") <= 300, "{}", setup.runs("sleeper"));
    assert!(
        after
            .warnings
            .iter()
            .any(|w| w.contains("credential provider sleeper")),
        "{:?}",
        after.warnings
    );
}

/// Five providers all matching 3 reviews of 100 images: never more plugin processes than the
/// total limit (16 by default; the providers' own 4 each would allow 20), none left after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_providers_share_the_total_limit() {
    let env = [("PLUGIN_SLEEP_MS", PLUGIN_SLEEP)];
    let names = ["p1", "p2", "p3", "p4", "p5"];
    let mut setup = PluginSetup::new();
    for name in names {
        setup = setup.provider(sleeping_provider(name, &env));
    }
    let settings = Settings {
        wait: Duration::from_secs(1),
        ..Settings::default()
    };
    let after = attack(
        &setup,
        keyring_of(&setup, settings),
        3,
        Duration::from_secs(2),
    )
    .await;
    let runs: usize = names.iter().map(|name| setup.runs(name)).sum();
    println!(
        "5 providers, 300 images in 3 reviews: peak {} live plugin processes ({} KiB RSS), \
         {runs} runs started, gone {:?} after the callers gave up",
        after.peak, after.peak_rss_kib, after.lingered
    );
    assert!(after.peak <= 16, "peak {} plugin processes", after.peak);
    assert!(after.peak >= 5, "every provider ran: peak {}", after.peak);
    assert!(
        after.lingered.is_some(),
        "plugin processes still alive 2 s after every caller gave up"
    );
    assert!(
        after.warnings.iter().any(|w| w.contains("busy")),
        "{:?}",
        after.warnings
    );
}
