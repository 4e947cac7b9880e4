//! What one recheck of `pinhook watch` holds in memory, stage by stage, for PODS bare Pods in
//! NAMESPACES namespaces running IMAGES distinct `tag@digest` images (the shape of
//! `benches/watch-scale.sh`): a counting allocator measures the bytes each stage of the pure core
//! keeps live, as the I/O half (`watch::controller::cycle`) runs them, every tag resolving to the
//! pinned digest (an unchanged cluster).
//!
//! ```text
//! cargo run --release --example watch_memory -- [PODS] [NAMESPACES] [IMAGES]   (50000 1000 2000)
//! ```
//!
//! Prints, per stage, the bytes allocated and still live after it, in total and per Pod: what
//! grows with Pods (bytes per Pod stay flat as PODS grows) and what grows with images or
//! namespaces only. The Pod store is the watch's `PodStore` (`watch::controller::pods`); the
//! snapshot the copy a cycle is handed; the rest the cycle's own structures, the inventory the
//! one structure kept from one cycle to the next. Not a benchmark of time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use pinhook::policy::{Mode, Policy};
use pinhook::reference::Reference;
use pinhook::registry::keyring::Keyring;
use pinhook::watch::controller::{pods, PodStore};
use pinhook::watch::recheck::{self, LookupPlan, Modes};
use pinhook::watch::{namespace_report, Inventory, PodRecord, TagLookup, Timestamp};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the same layout; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                - layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: as `GlobalAlloc::realloc` requires, forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    isize::try_from(LIVE.load(Ordering::Relaxed)).unwrap_or(isize::MAX)
}

/// One line: a stage's live bytes, in total and per Pod.
fn row(stage: &str, bytes: isize, pods: usize) {
    println!(
        "{stage:<58} {:>9.1} MiB {:>7.0} B/Pod",
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / pods.max(1) as f64
    );
}

/// A Pod as the apiserver serves it for `benches/watch-scale.py`'s creates (defaults filled);
/// with `WATCH_MEMORY_RUNNING=1`, scheduled and running as a node reports it (`nodeName`, the
/// container's `imageID`: what the watch keeps of what runs).
fn pod_json(namespace: &str, name: &str, uid: &str, image: &str) -> serde_json::Value {
    let mut pod = pending_pod_json(namespace, name, uid, image);
    if std::env::var_os("WATCH_MEMORY_RUNNING").is_some() {
        let (name, digest) = image.rsplit_once('@').unwrap_or((image, ""));
        let slash = name.rfind('/').unwrap_or(0);
        let repository = match name.rfind(':') {
            Some(colon) if colon > slash => &name[..colon],
            _ => name,
        };
        pod["spec"]["nodeName"] = serde_json::json!("node-0001.example.internal");
        pod["status"] = serde_json::json!({
            "phase": "Running", "qosClass": "BestEffort",
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                "image": image, "imageID": format!("{repository}@{digest}")}],
        });
    }
    pod
}

fn pending_pod_json(namespace: &str, name: &str, uid: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid,
            "resourceVersion": "123456", "creationTimestamp": "2026-11-26T10:00:00Z",
        },
        "spec": {
            "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "resources": {},
            }],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default",
            "schedulerName": "default-scheduler", "securityContext": {},
            "terminationGracePeriodSeconds": 30, "priority": 0,
            "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args
            .next()
            .map(|a| a.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (pods, namespaces, images) = (arg(50_000)?, arg(1_000)?, arg(2_000)?);
    if namespaces == 0 || images == 0 || pods < namespaces {
        return Err("need PODS >= NAMESPACES >= 1 and IMAGES >= 1".into());
    }
    let per = pods / namespaces;
    let pods = per * namespaces;
    // The digests of team/scale:1..IMAGES (any distinct sha256 digests do).
    let digests: Vec<String> = (0..images)
        .map(|k| format!("sha256:{:064x}", (k as u128 + 1) * 0x9e37_79b9_7f4a_7c15))
        .collect();
    let policy = Policy::parse("mode: enforce\n")?;
    println!("{pods} Pods ({per} per namespace) in {namespaces} namespaces, {images} images");

    // The Pod store, as the watcher fills it from the list.
    let base = live();
    let store = PodStore::default();
    let mut records = Vec::with_capacity(pods);
    for n in 0..namespaces {
        let namespace = format!("e2e-z-{n:04}");
        for j in 0..per {
            let k = (37 * n + 41 * j) % images;
            let image = format!("127.0.0.1:40000/team/scale:{}@{}", k + 1, digests[k]);
            let uid = format!("{:08x}-0000-4000-8000-{:012x}", n, j);
            let pod = pod_json(&namespace, &format!("p{j:05}"), &uid, &image);
            records.push(pods::record(&pod)?);
        }
    }
    store.replace(records);
    let stored = live() - base;
    row("Pod store (kept)", stored, pods);

    // One cycle, its stages in the order cycle.rs runs them.
    let mark = live();
    let copy: Vec<PodRecord> = store.snapshot().to_vec();
    row(
        "  (a copy of every record: what a snapshot was before)",
        live() - mark,
        pods,
    );
    drop(copy);
    let mark = live();
    let snapshot = store.snapshot();
    row("  snapshot handed to the cycle", live() - mark, pods);
    let mark = live();
    let running = recheck::running(&snapshot);
    let mut modes = Modes::new();
    for namespace in recheck::namespaces(&running) {
        modes.insert(namespace.to_string(), Some(Mode::Enforce));
    }
    row("  running Pods, modes", live() - mark, pods);
    let mark = live();
    let parsed = recheck::ParsedImages::of(&running);
    row("  parsed references", live() - mark, pods);
    let mark = live();
    let requests = recheck::keyrings_wanted(&policy, &running, &modes, &parsed);
    row("  keyrings wanted", live() - mark, pods);
    let mark = live();
    let keyring = Keyring::new();
    let mut plan = LookupPlan::default();
    for request in requests {
        plan.add(request, &keyring);
    }
    let distinct = plan.distinct();
    row("  lookup plan (requests consumed)", live() - mark, pods);
    let mark = live();
    let answers: HashMap<_, _> = plan
        .calls()
        .into_iter()
        .map(|lookup| {
            let digest = lookup.reference.digest().cloned();
            let answer = digest.map_or(TagLookup::NotLooked, TagLookup::Resolved);
            (lookup.key, answer)
        })
        .collect();
    // Every tag resolves to its pin (an unchanged cluster): no pin is checked by digest.
    let probes = plan.probes(&answers);
    let checks = probes.answer(&HashMap::new());
    let lookups = plan.answer(&answers);
    drop(answers);
    row("  site lookups (plan consumed)", live() - mark, pods);
    let mark = live();
    let classified = recheck::classify_all(
        &policy.clone(),
        &running,
        &modes,
        &parsed,
        &lookups,
        &checks,
        &recheck::SiteVerdicts::default(),
    );
    row("  classified images", live() - mark, pods);
    let mark = live();
    let targets = recheck::report_targets(&classified, &modes, std::iter::empty());
    row(
        "  report targets (images grouped by namespace)",
        live() - mark,
        pods,
    );
    let mark = live();
    let now = Timestamp::from_system_time(std::time::SystemTime::now());
    let mut largest: isize = 0;
    for target in &targets {
        let before = live();
        let report = namespace_report(
            &target.namespace,
            target.mode,
            target.images.iter().copied(),
            now,
            None,
        );
        largest = largest.max(live() - before);
        drop(report);
    }
    row(
        "  one namespace's fresh report, the largest (4 at once)",
        largest,
        pods,
    );
    debug_assert_eq!(live(), mark);
    let mark = live();
    let inventory = Inventory::from_images(&classified);
    let inventory_bytes = live() - mark;
    row(
        "  inventory (kept until the next cycle's)",
        inventory_bytes,
        pods,
    );
    let cycle_peak = live() - base;
    row(
        "  all of the above at once (before report writes)",
        cycle_peak,
        pods,
    );
    drop(targets);
    drop(classified);
    drop(lookups);
    drop(running);
    drop(snapshot);
    row(
        "kept between cycles (store, inventory)",
        live() - base,
        pods,
    );
    println!(
        "distinct keys {distinct}; reference parse size {} B",
        std::mem::size_of::<Reference>()
    );
    drop((inventory, store));
    Ok(())
}
