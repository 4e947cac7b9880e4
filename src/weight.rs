//! The weight of an entry in a cache bounded in bytes: every cache that keeps what callers
//! send (tags, owners, namespaces, error texts) is bounded by the bytes it holds, not only by
//! its entries, so that the memory model of docs/security.md (`app::memory`) adds up.

/// An entry's weight in a moka cache of `budget` bytes (its `max_capacity`) holding at most
/// `max_entries` entries: its `bytes`, and never less than its share of the budget, so that
/// neither bound is passed. Saturates at `u32::MAX` (moka's weight type).
pub fn weight(bytes: usize, budget: u64, max_entries: u64) -> u32 {
    let floor = budget / max_entries.max(1);
    u32::try_from(u64::try_from(bytes).unwrap_or(u64::MAX).max(floor)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_weighs_its_bytes_and_at_least_its_share() {
        assert_eq!(weight(10, 1000, 10), 100);
        assert_eq!(weight(500, 1000, 10), 500);
        assert_eq!(weight(usize::MAX, 1000, 10), u32::MAX);
        assert_eq!(weight(10, 1000, 0), 1000);
    }

    #[test]
    fn a_cache_weighed_so_holds_neither_more_entries_nor_more_bytes() {
        let budget = 1000u64;
        let cache = moka::sync::Cache::builder()
            .max_capacity(budget)
            .weigher(move |_: &u32, v: &String| weight(v.len(), budget, 4))
            .build();
        for i in 0..100u32 {
            cache.insert(i, "x".to_string());
        }
        cache.run_pending_tasks();
        assert!(cache.entry_count() <= 4, "{}", cache.entry_count());
        for i in 0..100u32 {
            cache.insert(1000 + i, "y".repeat(400));
        }
        cache.run_pending_tasks();
        assert!(cache.weighted_size() <= budget, "{}", cache.weighted_size());
    }
}
