//! The replacement [`Policy`] a cache runs.

/// How a hit reorders the cache, and what a miss remembers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// The kernel's two lists with its refault detection
    /// (`mm/workingset.c`): a new entry goes on the inactive list, the
    /// shard's probation — except while a new shard fills, when its first
    /// keys (up to nine tenths of it) go on the active list, as LIRS makes
    /// its first blocks LIR, so that a working set reused from further back
    /// than the shadows reach keeps the entries it started with; a hit counts a reference (up to 4, the multi-gen
    /// LRU's tiers); reclaim activates an inactive entry that was hit,
    /// evicts one that was not, and refills the inactive list from the
    /// active tail, where each reference buys another turn. An evicted
    /// entry leaves a shadow holding the eviction clock; a miss that finds
    /// its key's shadow is a refault, and its refault distance says how
    /// much larger the cache would have had to be to keep it. A refault
    /// within the shard's reach (twice that for an entry that had been
    /// active, up to twice the shard) is inserted active, as ARC moves
    /// every ghost hit to its frequency list; how far back that pays is
    /// learned per shard, between 0.35 and twice its size (starting at
    /// twice), from whether the entries activated from that band are hit
    /// before they leave the active list — unless the shard is thrashing
    /// (most of its misses refault, as every miss of a loop larger than the
    /// cache does), when the kernel's stricter test applies: active only
    /// within the active list's size, and only if its last activation or
    /// retry was paid by two hits (else it retries on the inactive list).
    /// Once most misses refault, a more distant refault of an entry that
    /// never reached the active list (`PG_workingset`, kept in the shadow)
    /// goes to the inactive tail, to be reclaimed first; before, to the
    /// head. The inactive list's size adapts as ARC's recency list does
    /// (0.3% to 15% of the shard, a tenth to start): refaults of entries
    /// evicted from probation grow it, refaults of entries the active list
    /// demoted shrink it. A one-off scan cannot flush hot entries, a
    /// working set that returns is recognised, the ARC paper's traces hit
    /// about as often as under ARC, and a loop larger than the cache keeps
    /// most of itself resident instead of missing on every request as
    /// under LRU and ARC (hit ratios: [docs/cache.md][policy-measurements]).
    ///
    /// What it promises on the shapes that defeat LRU (one shard, whatever
    /// the hasher's seed; a property test holds it): a loop over up to 1.5
    /// times the cache hits at least half as often as OPT once it has gone
    /// round four times; half the cache hit twice keeps nine in ten of its
    /// entries through a one-off scan of up to ten times the cache; a
    /// working set of half the cache that moves to new keys hits at least
    /// nine requests in ten once it has been requested four times the
    /// cache's size.
    ///
    /// [policy-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policy-measurements
    #[doc(alias = "workingset_refault")]
    #[doc(alias = "workingset_eviction")]
    Workingset,
    /// The same two lists without shadows: every new entry starts
    /// inactive.
    ActiveInactive,
    /// LRU: a hit moves the entry to the head of one list and eviction
    /// takes the tail. With batching off the order is exactly LRU's (one
    /// shard; the `lru` crate is the oracle of its property tests); with
    /// batching on a hit only marks the entry and reclaim gives marked
    /// entries a second chance (CLOCK), so a hit never takes a write lock.
    Lru,
    /// LIRS (Jiang and Zhang, SIGMETRICS 2002) on the same two lists, as
    /// CLOCK-Pro runs it without moving entries on a hit: the active list
    /// is the LIR set (98% of the shard), the inactive list the resident
    /// HIR entries. A hit marks the entry and, when it counts a reference,
    /// stamps it with the shard's eviction clock (4 bytes an entry, under
    /// this policy and while [`Adaptive`](Self::Adaptive) runs it); an
    /// evicted entry's shadow keeps its last access. A new key is LIR while
    /// the LIR set has room; after that a refault is LIR when its key was
    /// used more recently than the LIR entry last demoted, else HIR, as
    /// LIRS ranks blocks by their reuse distance. It keeps a stable working
    /// set through loops larger than the cache and interleaved patterns,
    /// where recency loses (the LIRS paper's traces); `Workingset` leads
    /// where recency pays (the ARC paper's OLTP trace, the sprite trace).
    /// Hit ratios: [docs/cache.md][lirs-measurements].
    ///
    /// What it promises on the shapes that defeat LRU, as
    /// [`Workingset`](Self::Workingset) does (property tests hold both): a
    /// loop over up to 1.5 times the cache hits at least half as often as
    /// OPT once it has gone round four times; half the cache hit twice
    /// keeps nine in ten of its entries through a one-off scan of up to ten
    /// times the cache; a working set of half the cache that moves to new
    /// keys hits at least nine requests in ten once it has been requested
    /// four times the cache's size.
    ///
    /// [lirs-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policylirs-cacheshardrefaultrs-issue-46-2026-11-29
    Lirs,
    /// The default: [`Workingset`](Self::Workingset) or
    /// [`Lirs`](Self::Lirs), whichever hits more on the cache's own
    /// requests. The cache runs both policies over a sample of its keys,
    /// in two simulations of a cache as many times smaller (miniature
    /// simulation, Waldspurger et al., USENIX ATC 2017; 256 to 511 entries
    /// each, or an eighth of the cache below 2048), and its shards run the one that
    /// hit more over about the last 4096 sampled requests, each from its
    /// next write; they start with `Lirs` (its LIR set forms as the cache
    /// fills, and `Workingset` adapts from whatever it finds). Each policy
    /// leads on workloads the other loses (recency and frequency against
    /// loops and interleaved patterns); this one follows the workload it
    /// is given, and a resized cache samples at the rate its new size
    /// calls for.
    ///
    /// Costs: a hit checks whether its key is sampled (one multiplication
    /// and comparison); a sampled hit stores the key's hash in its shard's
    /// buffer (16 between two writes of the shard; more are not sampled),
    /// and the shard's next write replays them into the simulations under
    /// its lock, unless another shard is doing so (it never waits). At
    /// most 1 key in 8 is sampled (below 4096 entries exactly 1 in 8): a
    /// small cache's accesses cost about a quarter more than
    /// `Workingset`'s. The simulations take up to 40 KiB a cache;
    /// LIRS's stamps 4 bytes an entry while the shards run it, once the
    /// sample has hit (a cache that hits nothing keeps none). A weighted
    /// cache runs `Workingset` (its number of entries, which the
    /// simulations are sized by, is not known), and reports `Adaptive`.
    /// Hit ratios and what else was tried:
    /// [docs/cache.md][adaptive-measurements].
    ///
    /// It keeps the promises both policies make on the shapes that defeat
    /// LRU (a property test holds it to them): a loop over up to 1.5 times
    /// the cache hits at least half as often as OPT once it has gone round
    /// four times; half the cache hit twice keeps nine in ten of its entries
    /// through a one-off scan of up to ten times the cache; a working set of
    /// half the cache that moves to new keys hits at least nine requests in
    /// ten once it has been requested four times the cache's size.
    ///
    /// [adaptive-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policyadaptive-cacheshardduelrs-issue-46-2026-11-29
    #[default]
    Adaptive,
}
