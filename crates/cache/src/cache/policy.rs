//! The replacement [`Policy`] a cache runs.

/// How a hit reorders the cache, and what a miss remembers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// The kernel's two lists with its refault detection
    /// (`workingset_refault`, `mm/workingset.c`). A new entry starts on
    /// the inactive list, the shard's probation (while a new shard fills,
    /// on the active list, as LIRS makes its first blocks LIR); a hit
    /// counts a reference (up to 4, the multi-gen LRU's tiers); reclaim
    /// activates an inactive entry that was hit, evicts one that was not,
    /// and refills the inactive list from the active tail. An evicted
    /// entry leaves a shadow holding the eviction clock: a miss that finds
    /// it is a refault, and one recent enough (within a reach the shard
    /// learns from whether such entries are hit) starts active, as ARC
    /// moves its ghost hits to its frequency list. A thrashing shard (most
    /// misses refault, as under a loop larger than the cache) takes the
    /// kernel's stricter test instead, and the inactive list's size adapts
    /// as ARC's recency list does.
    ///
    /// Why: a one-off scan cannot flush hot entries, a working set that
    /// returns is recognised, and a loop larger than the cache keeps part
    /// of itself resident instead of missing on every request (as under
    /// LRU and ARC). The mechanism's details and hit ratios:
    /// [docs/cache.md][policy-measurements].
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
    /// is the LIR set (98% to 99.5% of the shard: the HIR set shrinks while
    /// its entries go unhit, as CLOCK-Pro's cold target does), the
    /// inactive list the resident HIR entries. A hit marks the entry and, when it counts a reference,
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
    /// The default: [`Workingset`](Self::Workingset), [`Lirs`](Self::Lirs)
    /// or [`Lru`](Self::Lru), whichever hits most on the cache's own
    /// requests. All three run over a sample of the cache's keys, in
    /// simulations of a cache as many times smaller (miniature simulation,
    /// Waldspurger et al., USENIX ATC 2017), and the shards run the one
    /// that has hit most lately, starting with `Lirs`; `Lru` must lead the
    /// better of the others by more (4%), since taking it up spends what
    /// they learned. A shard taking up `Workingset` starts from what the
    /// duel's simulation of it learned of the workload (its inactive
    /// target, reach and refault shares), so a change of policy does not
    /// cost the time `Workingset` takes to learn it. Why: each policy
    /// leads where the others lose (frequency against recency-friendly
    /// workloads, whose popular keys drift; loops and interleaved patterns
    /// against both), and no shard can tell from inside which kind of
    /// workload it serves.
    ///
    /// Costs: every hit checks whether its key is sampled; sampled
    /// accesses (at most 1 key in 8, fewer in larger caches) are replayed
    /// into the simulations as they happen, a hit by its lookup (while
    /// another thread replays, by its shard's next write: no lookup waits
    /// for another's replay; between two of a shard's writes, twice its
    /// share of the sampled keys' hits at most). In a cache of a few
    /// thousand entries or fewer that makes a read-through access cost
    /// about a third more than under `Workingset`; in large ones it is
    /// lost in the noise. The
    /// simulations take up to 60 KiB; LIRS's stamps 4 bytes an entry while
    /// the shards run it. A weighted cache runs `Workingset` (the
    /// simulations are sized in entries, which a weight does not give)
    /// and reports `Adaptive`. Hit ratios, tunables and what else was
    /// tried: [docs/cache.md][adaptive-measurements].
    ///
    /// It keeps the promises `Workingset` and `Lirs` make on the shapes
    /// that defeat LRU, and one where recency pays (property tests hold it
    /// to them): a loop over up to 1.5 times the cache hits at least half
    /// as often as OPT once it has gone round four times; half the cache
    /// hit twice keeps nine in ten of its entries through a one-off scan of
    /// up to ten times the cache; a working set of half the cache that
    /// moves to new keys hits at least nine requests in ten once it has
    /// been requested four times the cache's size; keys whose popularity
    /// slides (each growing hotter, then never requested again) hit within
    /// 2 points of `Lru` in a cache of a few thousand entries, once 24
    /// times its size has been requested.
    ///
    /// [adaptive-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#policyadaptive-cacheshardduelrs-issue-46-2026-11-29
    #[default]
    Adaptive,
}
