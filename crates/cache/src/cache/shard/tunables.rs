//! The policy's tuned constants: list sizes and the bounds of what
//! `Policy::Workingset` learns (the inactive target, the reach, thrashing,
//! staleness), each with one line of why. The measurements that chose
//! them are in `docs/cache.md`, "Tunables and their measurements", under
//! each constant's name.

/// Hits a shard running [`Policy::Lru`](crate::Policy::Lru) under
/// [`Policy::Adaptive`](crate::Policy::Adaptive) batches between two write
/// sections to move to the head (`PAGEVEC_SIZE`'s role): past them a hit
/// keeps only its count, a second chance as CLOCK gives. More keeps LRU's
/// order through longer runs of hits, for a larger batch to drain.
pub(super) const LRU_MOVES: usize = 32;

/// Deactivations per `shrink_active_list` pass (`SWAP_CLUSTER_MAX`).
pub(super) const SCAN_BATCH: usize = 32;

/// Active entries per inactive one at most (`inactive_is_low`'s
/// `inactive_ratio`): the inactive list is the shard's probation, a
/// tenth of it. The kernel computes `int_sqrt(10 * gigabytes)`, which
/// is 9 for a lruvec of 8 GiB; S3-FIFO's small queue is a tenth too; the
/// kernel's ratio of 1 for small lists, and 3, lost hits. Under
/// [`Policy::Workingset`](crate::Policy::Workingset) it is only where the
/// adaptive target starts.
pub(super) const INACTIVE_RATIO: usize = 9;

/// The bounds of [`Policy::Workingset`](crate::Policy::Workingset)'s
/// inactive target, as shares of the shard's entries. Under Zipf the
/// target sits on the floor: new keys pay by refaulting (see
/// [`REACH_MIN`]) far more often than by a second hit on probation, and
/// probation only delays the eviction of the cold ones. 0.3%: a higher
/// floor cost Zipf and loops hits; 15%: a higher cap cost the ARC traces
/// hits.
pub(super) const INACTIVE_MIN: f64 = 0.003;
pub(super) const INACTIVE_MAX: f64 = 0.15;

/// The active list's share of the shard below which every refault is
/// activated (see [`Lruvec::active_has_room`](super::Lruvec::active_has_room)): 10 points under the least
/// it holds in a steady state, when the inactive target is at
/// [`INACTIVE_MAX`].
pub(super) const ACTIVE_ROOM: f64 = 0.75;

/// How far back, in multiples of the shard's entries, a refault of an
/// entry evicted from probation (ARC's B1) may be and still be activated
/// when the shard is not thrashing: the reach is learned between these
/// bounds (see [`Lruvec::reach_outcome`](super::Lruvec::reach_outcome)),
/// from [`REACH_START`]; an entry that had been active (B2) reaches twice
/// as far, up to the top. Under Zipf the reach learns its way down to the
/// floor; 0.35: a lower floor helped Zipf but cost the P3 trace.
pub(super) const REACH_MIN: f64 = 0.35;
pub(super) const REACH_MAX: f64 = 2.0;
/// Where the reach starts: at the top, every refault its shadow survives
/// to, learned down from there. Started at the shard's size (ARC's rule),
/// the reach took most of a trace to climb where P3 has it. The cost: a
/// loop that starts after other requests is activated from its first
/// refaults, before its shards see they thrash.
pub(super) const REACH_START: f64 = REACH_MAX;
/// The reach's step per outcome, in multiples of the shard's entries
/// divided by them: crossing the band takes about `len / 2.7` outcomes.
/// A step a quarter as large left the reach near its start for most of
/// the P3 trace.
pub(super) const REACH_STEP: f64 = 4.0;

/// The share of a shard's misses that refault above which it is
/// thrashing, and below which it stops. 0.6: under the share a loop twice
/// the cache refaults on while its shards do not thrash (two-way buckets
/// lose about a third of the shadows it needs), so that it is seen
/// thrashing. Apart, so that a shard near one bound does not flip back and
/// forth.
pub(super) const THRASHING_ABOVE: f32 = 0.6;
pub(super) const THRASHING_BELOW: f32 = 0.45;
/// Misses the refault share averages over (an exponential moving average).
pub(super) const REFAULT_WINDOW: f32 = 512.0;
/// Below this the refault and distant shares are taken as 0 (see
/// `moving_average`).
pub(super) const REFAULT_FLOOR: f32 = 1e-6;
/// The refault share from which a distant refault of an entry never
/// active goes to the inactive tail rather than its head (see
/// `workingset_refault`). 0.5: at the head always, a loop twice the cache
/// that began after other requests never got its shards back to
/// thrashing; at the tail always, the ARC traces lost hits.
pub(super) const TAIL_ABOVE: f32 = 0.5;
/// The share of a shard's recent refaults too distant to activate from
/// which it places what it misses at the inactive tail too, as above
/// [`TAIL_ABOVE`] (see `workingset_refault`): its refaults say the working
/// set is larger than the reach of its shadows, as in a loop over three
/// times the cache, whose misses mostly find no shadow (their shadows were
/// dropped before the loop came round) and whose refaults all come from
/// beyond the reach. At the inactive head, each such miss pushed out a
/// probation entry that the next turn would have hit; at the tail, the
/// entries already there stay to be hit. 0.8: higher bounds cost the P3
/// trace.
pub(super) const DISTANT_ABOVE: f32 = 0.8;
/// Refaults the distant share averages over (an exponential moving
/// average).
pub(super) const DISTANT_WINDOW: f32 = 256.0;

/// A shard whose active list has no room and whose lookups hit less than
/// 1 in this many over a window finds that list stale (see
/// [`Lruvec::lookups`](super::Lruvec::lookups)): where it gets almost no
/// hits, aging the list costs almost none. A higher bar let a stale
/// window's aging take entries the P3 trace would hit later.
pub(super) const STALE_BELOW: u64 = 50;
/// Evictions per step of aging a stale active list. A step at every
/// eviction aged too hard: a loop and the P3 trace lost hits.
pub(super) const AGE_EVERY: u64 = 4;
/// The fewest evictions in a window of lookups (a window is the shard's
/// size in evictions).
pub(super) const MIN_WINDOW: u64 = 64;

/// The share of a filling shard's entries that new keys take on the
/// active list (see `Lruvec::fills`): all but the inactive target's
/// starting share ([`INACTIVE_RATIO`]), so that the first eviction
/// deactivates nothing. Trades loops reused from beyond the shadows
/// (more is better) against a filling shard's hot entries, which a
/// refill at its first evictions could deactivate (quick_cache's 0.97
/// lost some of them to a scan).
pub(super) const FILL_ACTIVE: f64 = 1.0 - 1.0 / (INACTIVE_RATIO as f64 + 1.0);

/// Slots the expiry sweep looks at before an insert into a full shard
/// (`Lruvec::sweep_expired`; two otherwise): one cache line of deadlines,
/// so that an expired entry near the hand gives its room before a live
/// one is evicted. More costs every insert at capacity the reads.
pub(super) const SWEEP_WHEN_FULL: usize = 8;

/// Deadlines a due sweep reads toward the shard's next expiry
/// (`Lruvec::recalc_next_expiry`): eight cache lines; more finds the
/// next expiry in fewer writes, each longer.
pub(super) const RECALC_CHUNK: usize = 64;

/// [`Policy::Lirs`](crate::Policy::Lirs)'s share of resident HIR entries
/// (the inactive list) at the start, and at most: more gives
/// recency-friendly traces a longer probation, less keeps more of a loop
/// resident (docs/cache.md).
pub(super) const LIRS_HIR: f64 = 0.02;

/// The least HIR share the adaptation ([`LIRS_HIR_EVICTIONS_PER_HIT`])
/// shrinks to: a loop just over the cache keeps 99.5% of the shard as
/// its LIR set.
pub(super) const LIRS_HIR_MIN: f64 = 0.005;

/// A HIR hit grows the HIR share by one entry, and this many HIR entries
/// evicted unhit shrink it by one: more keeps a larger HIR set for
/// workloads that reuse HIR blocks rarely, fewer gives a loop its room
/// sooner.
pub(super) const LIRS_HIR_EVICTIONS_PER_HIT: f64 = 64.0;

/// Entries of each of [`Policy::Adaptive`](crate::Policy::Adaptive)'s four
/// simulations, at least (`duel/sims.rs`; up to twice as many, the sample
/// being 1 in a power of two of the keys; fewer in a cache smaller than
/// `DUEL_ENTRIES << DUEL_MIN_SHIFT`, an eighth of it): more judges the policies
/// closer to the cache's own behaviour, for more memory (about 40 bytes
/// an entry, four times) and a larger share of accesses sampled.
pub(super) const DUEL_ENTRIES: usize = 256;

/// [`Policy::Adaptive`](crate::Policy::Adaptive) samples at most 1 key
/// in `2^DUEL_MIN_SHIFT`, so that its simulations replay about an eighth
/// of the cache's accesses (more when a sampled key is hot): a larger
/// shift makes a small cache's lookups cheaper and its simulations (an
/// eighth of it at this shift) cruder judges (docs/cache.md, "Small
/// caches").
pub(super) const DUEL_MIN_SHIFT: u32 = 3;

/// The sampled accesses over which [`Policy::Adaptive`](crate::Policy::Adaptive)
/// compares its simulations' hits (a decaying count): longer is steadier
/// on workloads where the policies hit alike (loops), shorter follows
/// a workload that changes character sooner.
pub(super) const DUEL_WINDOW: u32 = 4096;

/// The sampled accesses of [`Policy::Adaptive`](crate::Policy::Adaptive)'s
/// second, shorter count, which can turn the shards to the policy the
/// whole [`DUEL_WINDOW`] ranks first before its lead over what runs
/// reaches the margin (`verdict_of_both`, `duel/verdict.rs`): shorter
/// follows a workload that changes character sooner, and trusts a
/// shorter stretch of it.
pub(super) const DUEL_RECENT_WINDOW: u32 = DUEL_WINDOW / 4;

/// How many more hits (of about [`DUEL_WINDOW`]) one simulation must have
/// before the shards change policy, with [`DUEL_MARGIN_SHARE`]: a change
/// costs the lists a transition and a LIRS shard its stamps, so a near
/// tie keeps the policy (docs/cache.md: margins of 2% flipped late, none
/// flipped on every loop's pass).
pub(super) const DUEL_MARGIN: f64 = 4.0;

/// The share of the leading simulation's hits added to [`DUEL_MARGIN`]:
/// more keeps a policy through ties, as on a loop, where the simulations
/// of Workingset and LIRS hit alike but LIRS keeps more of it at full
/// size; less takes up a policy that leads by little sooner (0.5% flipped
/// loops once the simulations saw hits in order; docs/cache.md).
pub(super) const DUEL_MARGIN_SHARE: f64 = 0.01;

/// [`DUEL_MARGIN_SHARE`] when LRU leads the best of the others, a share
/// of the lesser of LRU's hits and misses: taking LRU up drains the
/// active list Workingset built and LIRS's LIR set, which the simulations
/// (each running its policy throughout) do not price; more keeps what
/// they learned through near ties, less gives LRU the traces it leads by
/// little (docs/cache.md).
pub(super) const DUEL_LRU_MARGIN_SHARE: f64 = 0.04;

/// Sampled accesses before the duel may take up LRU: eight simulations'
/// worth of [`DUEL_ENTRIES`], while Workingset and LIRS still learn
/// which keys to protect and LRU, which learns nothing, leads; longer
/// leaves a recency-friendly trace to the others longer (docs/cache.md).
pub(super) const DUEL_LRU_WARMUP: u64 = 8 * DUEL_ENTRIES as u64;

/// Sampled accesses before the duel's first verdict: four times a
/// simulation of [`DUEL_ENTRIES`], which first fills (as the cache does)
/// and then turns over; the same count for the smaller simulations of a
/// cache below 2048 entries, which then waits 8192 requests. Sooner lets
/// the noise of the fill decide; later leaves a cache on its first
/// policy for many times its size (docs/cache.md, `Policy::Adaptive`,
/// "Warm-up", and "Small caches").
pub(super) const DUEL_WARMUP: u64 = 4 * DUEL_ENTRIES as u64;

/// A weighted shard looks at its length every this many evictions to
/// learn the entries it holds (`Lruvec::follow_entries`): more follows a
/// change of the entries' weights later, fewer costs evictions a
/// division more often.
pub(super) const FOLLOW_ENTRIES_EVERY: u64 = 256;
