//! What a cache reports: [`CacheStats`].

#[cfg(doc)]
use super::Policy;

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups that found their key: `get`, and the lookup each load
    /// (`get_or_insert_with` and the like) starts with, unless the load's
    /// `replace_if` refused the value found (a miss then). Exact: no
    /// lookup is lost to a race between threads. (A refusal is counted
    /// just after its lookup's hit, so a `stats` call between the two
    /// reports the hit, and the next one moves it to the misses.)
    pub hits: u64,
    /// Lookups that did not (exact, as `hits`).
    pub misses: u64,
    /// Entries the cache dropped on its own for capacity — not only
    /// evictions of cached entries, but also new ones
    /// [`rejected`](Self::rejected) or [`not_admitted`](Self::not_admitted)
    /// (each offered to the listener as evicted).
    pub evictions: u64,
    /// Insertions that found their key's shadow (`WORKINGSET_REFAULT`).
    pub refaults: u64,
    /// Refaults close enough to have stayed resident, inserted active
    /// (`WORKINGSET_ACTIVATE`).
    pub refault_activations: u64,
    /// Shadow entries held now (the history of evicted keys that refault
    /// detection reads), at most twice the entries the cache holds.
    pub shadows: u64,
    /// Shards thrashing now (under [`Policy::Workingset`]): most of their
    /// recent misses were refaults, as when a loop larger than the cache
    /// runs, and they take the kernel's strict refault test instead of
    /// ARC's. A new shard is not counted until it has evicted half its
    /// size. Thresholds: [docs/cache.md][thrashing].
    ///
    /// [thrashing]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#thrashing_above-thrashing_below
    pub thrashing_shards: u64,
    /// Shards running LIRS: every shard under [`Policy::Lirs`], none under
    /// [`Policy::Workingset`]; under [`Policy::Adaptive`] those that have
    /// taken up the policy its simulations chose (each does at its next
    /// write).
    pub lirs_shards: u64,
    /// Shards running LRU: every shard under [`Policy::Lru`];
    /// under [`Policy::Adaptive`] those that have taken up the policy its
    /// simulations chose.
    pub lru_shards: u64,
    /// Shards running LIRS with TinyLFU's admission: every shard under
    /// [`Policy::LirsTinyLfu`]; under [`Policy::Adaptive`] those that have
    /// taken up the policy its simulations chose (not counted in
    /// [`lirs_shards`](Self::lirs_shards)).
    pub tinylfu_shards: u64,
    /// Shards running the kernel's workingset: every shard under
    /// [`Policy::Workingset`]; under [`Policy::Adaptive`] those that have
    /// taken it up as the policy its simulations chose, and a shard not
    /// yet written (it takes up the duel's choice, `Lirs` at first, at its
    /// first write).
    pub workingset_shards: u64,
    /// Shards whose lookups now skip their memory barrier: no insertion or
    /// removal has reached them for a while, as their lookups see it, and
    /// membarrier(2) is available (Linux 4.14 and later). The next change
    /// of such a shard pays one `membarrier` call to end it.
    pub fast_read_shards: u64,
    /// Entries not cached because they weigh more than their shard's
    /// share of the capacity, or because every entry reclaim could evict
    /// to make room for them is [pinned](crate::Builder::pinned).
    pub rejected: u64,
    /// New entries not cached because [`Policy::LirsTinyLfu`]'s admission
    /// refused them (the sketch had seen the key no more often lately
    /// than the entry it would have evicted), or because, with a weigher,
    /// [`Policy::Lirs`] declined a cold key heavier than its HIR set and
    /// free room.
    pub not_admitted: u64,
    /// Loads claimed by the loading calls (`get_or_insert_with` and its
    /// fallible, borrowed-key and async forms, and the guard forms; one
    /// per key at a time),
    /// counted as each starts, whether it then succeeds, fails or is
    /// dropped.
    pub loads: u64,
    /// Loading calls (as [`loads`](Self::loads) counts them) that waited
    /// for another caller's load of their key instead of running their
    /// own, once a wait (a wait that gave up, at
    /// [`get_or_guard_timeout`](crate::LruCache::get_or_guard_timeout)'s
    /// deadline, counts too; a call that waits on a failed load and then
    /// on the next counts twice). A call asking for a key its own thread
    /// is loading panics instead, and is not counted.
    pub load_waits: u64,
    /// Loads (as [`loads`](Self::loads) counts them) that ended without a
    /// value: the loader returned an error or panicked, user code the
    /// cache runs as it lands the value (a key's `Eq`, a value's `Clone`,
    /// the weigher, an [`Expiry`](crate::Expiry), `replace_if`) panicked
    /// before it was stored, or the call's future or
    /// [`LoadGuard`](crate::LoadGuard) was dropped first. Counted as each
    /// ends, and never more than `loads` in one
    /// [`stats`](crate::LruCache::stats): `loads - load_failures` is the
    /// loads that stored their value (or found it too heavy to cache),
    /// returned another (one `replace_if` kept, or theirs where a removal
    /// kept it out), or still run. Caffeine's `loadFailureCount`.
    pub load_failures: u64,
}

impl CacheStats {
    /// hits / (hits + misses), 0 before any `get`.
    pub fn hit_ratio(&self) -> f64 {
        let gets = self.hits + self.misses;
        if gets == 0 {
            0.0
        } else {
            self.hits as f64 / gets as f64
        }
    }
}
