//! The replacement [`Policy`] a cache runs.

/// How a hit reorders the cache, and what a miss remembers.
///
/// # Bounds where LRU fails
/// Each bound holds for the policies named, in their property tests
/// (whatever the hasher's seed):
/// 1. a loop over up to 1.5 times the cache hits at least half as often
///    as OPT once it has gone round four times (`Workingset`, `Lirs`,
///    `LirsTinyLfu`, `Adaptive`; LRU hits nothing);
/// 2. half the cache hit twice keeps nine in ten of its entries through a
///    one-off scan of up to nine times the cache (the same four);
/// 3. a working set of half the cache that moves to new keys hits at
///    least nine requests in ten once it has been requested four times the
///    cache's size (`Workingset`, `Lirs`, `Adaptive`);
/// 4. keys whose popularity slides (each growing hotter, then never
///    requested again), where recency pays, hit within 2 points of `Lru`
///    in a cache of a few thousand entries once 24 times its size has been
///    requested (`Adaptive`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// The kernel's two lists with its refault detection
    /// (`workingset_refault`, `mm/workingset.c`): once the shard has
    /// filled, a new entry starts on the inactive list, the shard's
    /// probation, and a hit there earns it
    /// the active list at reclaim; an evicted entry leaves a shadow, and a
    /// miss that finds a recent one (a refault) starts active, as ARC
    /// moves its ghost hits to its frequency list. A shard whose misses
    /// mostly refault (a loop larger than the cache) takes the kernel's
    /// stricter test instead. The mechanism: [docs/cache.md][policy-measurements].
    ///
    /// Why: a one-off scan cannot flush hot entries, a working set that
    /// returns is recognised, and a loop larger than the cache keeps part
    /// of itself resident instead of missing on every request (as under
    /// LRU and ARC). Bounds 1-3 of [`Policy`] hold.
    ///
    /// [policy-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policy-measurements
    #[doc(alias = "workingset_refault")]
    #[doc(alias = "workingset_eviction")]
    Workingset,
    /// The same two lists without shadows: every new entry starts
    /// inactive. Keeps no history, so it is among the cheapest policies
    /// where the policy's work shows: a small cache. The kernel's
    /// active/inactive lists before refault detection (`shrink_active_list`,
    /// `folio_mark_accessed`).
    #[doc(alias = "shrink_active_list")]
    ActiveInactive,
    /// LRU: a hit moves the entry to the head of one list and eviction
    /// takes the tail. With batching off the order is exactly LRU's (one
    /// shard; the `lru` crate is the oracle of its property tests); with
    /// batching on a hit only marks the entry and reclaim gives marked
    /// entries a second chance (CLOCK), so a hit never takes a write lock.
    /// (Under [`Adaptive`](Self::Adaptive) a shard running LRU orders by
    /// recency up to a batch instead: see there.)
    Lru,
    /// LIRS (Jiang and Zhang, SIGMETRICS 2002) on the same two lists, as
    /// CLOCK-Pro runs it without moving entries on a hit: the active list
    /// is the LIR set, nearly all of the shard; the inactive list the
    /// resident HIR entries. Once the LIR set is full, a miss is LIR when
    /// its key was used more recently than the LIR entry last demoted (its
    /// shadow keeps its last access), else HIR: entries rank by reuse
    /// distance, not recency. With a weigher, a new key that would be HIR
    /// in a full shard and weighs more than the resident HIR set and the
    /// free room together is not cached (it goes to the listener as
    /// evicted, and [`CacheStats::not_admitted`](crate::CacheStats::not_admitted)
    /// counts it): caching it would evict LIR entries, which a cold key
    /// never does in LIRS. Its shadow makes it LIR if it is requested
    /// again within the LIR set's reach.
    /// Why: it keeps a stable working set through loops larger than the
    /// cache and interleaved patterns, where recency loses; `Workingset`
    /// does better where recency pays. Costs 4 bytes an entry (each
    /// entry's last access) while it runs. Bounds 1-3 of [`Policy`] hold.
    /// Hit ratios: [docs/cache.md][lirs-measurements].
    ///
    /// [lirs-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policylirs-cacheshardrefaultrs
    Lirs,
    /// [`Lirs`](Self::Lirs) with TinyLFU's admission (Einziger et al., ACM
    /// TOS 2017) in front of its HIR set: once the shard is full, a new
    /// key that LIRS would make HIR is cached only if a frequency sketch
    /// has seen it more often lately than the entry it would evict (else
    /// it goes to the listener as evicted, and
    /// [`CacheStats::not_admitted`](crate::CacheStats::not_admitted)
    /// counts it): a key seen for the first time lately is refused, and
    /// gets in on a later miss. The sketch counts each new key inserted
    /// and each reference reclaim finds, under the shard's write lock, so
    /// a hit costs what it costs under `Lirs`. With a weigher, a new entry
    /// contests only the first entry it would evict.
    /// Why: a loop or a set of keys each reused at a steady rate, mixed
    /// with requests spread over many more keys (several programs sharing
    /// a cache, tenants, a periodic job beside a Zipf workload), keeps its
    /// frequent keys where recency and reuse distance churn them. It loses
    /// where recency pays (a key requested twice in a row, popularity
    /// that drifts), which is why [`Adaptive`](Self::Adaptive) runs it
    /// only where it leads. Costs, while it runs, the sketch's 2 bytes an
    /// entry besides `Lirs`'s 4. Bounds 1 and 2 of [`Policy`] hold. Hit
    /// ratios: [docs/cache.md][tinylfu-measurements].
    ///
    /// [tinylfu-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policylirstinylfu-cacheshardsketchrs
    LirsTinyLfu,
    /// The default: [`Workingset`](Self::Workingset), [`Lirs`](Self::Lirs),
    /// [`LirsTinyLfu`](Self::LirsTinyLfu) or [`Lru`](Self::Lru), whichever
    /// hits most on the cache's own requests. All four run over a sample of
    /// the cache's keys, in simulations of a cache as many times smaller
    /// (miniature simulation, Waldspurger et al., USENIX ATC 2017), and the
    /// shards run the one that has hit most lately, starting with `Lirs`.
    /// A change of policy spends what the one left had learned, so a near
    /// tie keeps what runs, and `Lru` must lead by more.
    /// Why: each policy leads where the others lose (frequency against
    /// recency-friendly workloads, whose popular keys drift; loops and
    /// interleaved patterns against both; keys reused at a steady rate
    /// among many others against recency and reuse distance alike), and no
    /// shard can tell from inside which kind of workload it serves.
    ///
    /// While shards run `LirsTinyLfu`, an insertion of a new key into a
    /// full shard may be refused, and with a weigher while they run
    /// `Lirs` a heavy cold key declined (see each). While they run `Lru`,
    /// each hit is batched under the read lock and moved to the head by
    /// the shard's next write, as the kernel batches `folio_activate`: LRU
    /// order up to a batch (where [`Lru`](Self::Lru) with batching on
    /// gives marked entries a second chance instead).
    ///
    /// Costs: every hit checks whether its key is sampled; sampled
    /// accesses (at most 1 key in 8, fewer in larger caches) are replayed
    /// into the simulations, which take up to about 80 KiB whatever the
    /// cache's size; no lookup waits for another's replay. Small caches
    /// (a few thousand entries or fewer) feel it in their speed. In a
    /// weighted cache the simulations count entries, not weight: they are
    /// sized for the entries the shards would hold full, at the mean
    /// weight of those they hold. How it chooses, hit ratios and speed:
    /// [docs/cache.md][adaptive-measurements]. All four bounds of
    /// [`Policy`] hold.
    ///
    /// [adaptive-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policyadaptive-cacheshardduelrs
    #[default]
    Adaptive,
}
