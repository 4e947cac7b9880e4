//! The process's resident memory, for the in-process examples that measure memory
//! (`cache_scale`, `verdict_cost`). Included with `#[path]`; not an example itself.

/// `VmRSS` of this process, KiB.
pub fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}
