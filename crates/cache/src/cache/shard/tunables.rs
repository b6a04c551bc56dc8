//! The policy's tuned constants: list sizes and the bounds of what
//! `Policy::Workingset` learns (the inactive target, the reach, thrashing,
//! staleness), each with the measurements that chose it.

/// Deactivations per `shrink_active_list` pass (`SWAP_CLUSTER_MAX`).
pub(super) const SCAN_BATCH: usize = 32;

/// Active entries per inactive one at most (`inactive_is_low`'s
/// `inactive_ratio`): the inactive list is the shard's probation, a
/// tenth of it. The kernel computes `int_sqrt(10 * gigabytes)`, which
/// is 9 for a lruvec of 8 GiB; S3-FIFO's small queue is a tenth too. Both
/// the kernel's ratio of 1 for small lists and 3 lost up to 2.5 points of
/// hit ratio on the ARC traces and Zipf workloads (`cache-hits`). Under
/// [`Policy::Workingset`](crate::Policy::Workingset) it is only where the adaptive target starts.
pub(super) const INACTIVE_RATIO: usize = 9;

/// The bounds of [`Policy::Workingset`](crate::Policy::Workingset)'s inactive target, as shares of the
/// shard's entries. Capped at 25% or 50% instead of 15%, the OLTP trace
/// lost 0.2-0.5 points and P3 at 32768 pages 0.4; a floor of 3% instead of
/// 1% cost the loop 1.25x the cache 10 points of hits (`cache-hits`).
/// Under Zipf the target sits on the floor: new keys pay by refaulting
/// (see [`REACH_MIN`]) far more often than by a second hit on probation,
/// and probation only delays the eviction of the cold ones. With a floor
/// of 0.3% instead of 1% (and the reach's floor at 0.35 instead of 0.5),
/// Zipf 0.9 gained 0.17 points, Zipf 0.9 with one-off scans 0.09 (its lead
/// over quick_cache from 0.015 to 0.10), Zipf 0.7 and 1.1 and the cache at
/// 1000 entries 0.06-0.28, the loop 1.25x the cache with noise 0.3; OLTP
/// lost 0.015-0.07, P3 at 32768 pages 0.14, the shifting set 0.04 (means
/// over 8 hash seeds; loops over 40).
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
/// bounds (see [`Lruvec::reach_outcome`](super::Lruvec::reach_outcome)), from [`REACH_START`]; an entry
/// that had been active (B2) reaches twice as far, up to the top. Under
/// Zipf the reach learns its way down to the floor: with the reach fixed,
/// Zipf 0.9 hit most at 0.2 of the shard (+0.23 points over 0.5, one
/// run), but a floor of 0.25 cost P3 at 32768 pages 0.39 points (3 hash
/// seeds), and 0.35 0.14 (8; see [`INACTIVE_MIN`] for the rest).
pub(super) const REACH_MIN: f64 = 0.35;
pub(super) const REACH_MAX: f64 = 2.0;
/// Where the reach starts: at the top, every refault its shadow survives
/// to, learned down from there. Started at the shard's size (ARC's rule),
/// the reach took most of a trace to climb where P3 has it: against this
/// start, P3 lost 1.75 points of hits at 16384 pages and 0.73 at 32768,
/// its second half replayed on its own — a cache started mid-workload —
/// 3.2 at 32768 (10.2%, below quick_cache's 12.7%), its first half 1.3,
/// OLTP 0.1-0.15, a loop three times the cache 14 (0.05% instead of 14%);
/// the rest moved by 0.04 at most (a harness replaying `cache-hits`' cases
/// with two fixed hasher seeds). The cost: a loop that starts after other
/// requests is activated from its first refaults, before its shards see
/// they thrash, and at 1.6-2x the cache kept 4-8 points fewer of its hits
/// (2000 keys in 1000, 4 shards, 8 seeds: 36.8% instead of 45.2%; quick_cache
/// keeps none), while at 1.1x it kept 3.9 more and at 2.5x 24% instead of
/// 0.1% (the loop-after-other-requests test). Halfway (1.25) lost most of
/// the gains and still cost the 1.6x loop 10 points.
pub(super) const REACH_START: f64 = REACH_MAX;
/// The reach's step per outcome, in multiples of the shard's entries
/// divided by them: crossing the band takes about `len / 2.7` outcomes.
/// A step a quarter as large left the reach near its start for most of
/// the P3 trace.
pub(super) const REACH_STEP: f64 = 4.0;

/// The share of a shard's misses that refault above which it is
/// thrashing, and below which it stops. In the second half of 2 Mi
/// read-through requests at 10240 entries, a loop 1.1x to 1.5x the cache
/// refaults on 99.8-100% of its misses, and a loop twice the cache on 68%
/// while its shards do not thrash (95% once they do): its refaults come a
/// shard's size of evictions after their evictions, and two-way buckets
/// lose about a third of the shadows by then while refault activations
/// churn. OLTP refaults on 14-23%, P3 on 13% at 32768 pages and 44% at
/// 131072, where its shards cross the bound in stretches. At 0.8 and 0.6
/// no shard of a loop twice the cache stayed thrashing: ARC's rule
/// activated its refaults, which churned each other, and it hit 16.4% of
/// its requests at 10240 entries (0.45% with 1% of other requests mixed
/// in, 0.45% too at 1000 entries; quick_cache 47.7-48.7, moka 49-50, OPT
/// 50). At 0.6 and 0.45: 42.5% (48.5% with the noise, 48.9% at 1000
/// entries), the loop three times the cache with noise 29.7% -> 28.8% at
/// 10240 and 25.3% -> 31.6% at 1000, and the rows of `cache-hits` within
/// their noise (P3 32768 18.86, 131072 50.00; one run each way). P3's
/// shards at 131072 pages thrash 42% of the time instead of 10%, its hit
/// ratio unchanged (44.22% against 44.15% over the trace's second half),
/// OLTP's about 1% at most either way. The cost
/// is in loops that begin after other requests, where a shard that enters
/// thrashing earlier keeps more of a stale active list: at 1.1x the cache,
/// 74.9% -> 69.1% at 4096 entries, 79.8% -> 78.1% at 1000 (quick_cache
/// keeps none; moka about 90). Apart, so that a shard near one bound does
/// not flip back and forth.
pub(super) const THRASHING_ABOVE: f32 = 0.6;
pub(super) const THRASHING_BELOW: f32 = 0.45;
/// Misses the refault share averages over (an exponential moving average).
pub(super) const REFAULT_WINDOW: f32 = 512.0;
/// Below this the refault and distant shares are taken as 0 (see
/// `moving_average`).
pub(super) const REFAULT_FLOOR: f32 = 1e-6;
/// The refault share from which a distant refault of an entry never
/// active goes to the inactive tail rather than its head (see
/// `workingset_refault`). At the head always, a loop twice the cache that
/// began after other requests never got its shards back to thrashing
/// and fell from 46% hits to 0.1% (the loop-after-other-requests test);
/// at the head below 0.5, it keeps 46%, and against the tail always the
/// ARC paper's OLTP trace gains 0.10-0.24 points at every size, P3 0.39 at
/// 32768 pages and 0.09 at 131072, a loop 1.25x the cache with 1% of
/// other requests 2.1, Zipf and hot/cold unchanged (mean of 3 processes
/// of `cache-hits`); below 0.3, about half of that.
pub(super) const TAIL_ABOVE: f32 = 0.5;
/// The share of a shard's recent refaults too distant to activate from
/// which it places what it misses at the inactive tail too, as above
/// [`TAIL_ABOVE`] (see `workingset_refault`): its refaults say the working
/// set is larger than the reach of its shadows, as in a loop over three
/// times the cache, whose misses mostly find no shadow (their shadows were
/// dropped before the loop came round) and whose refaults all come from
/// beyond the reach. At the inactive head, each such miss pushed out a
/// probation entry that the next turn would have hit, and 7-9% of the
/// cache churned; at the tail, the entries already there stay to be hit.
/// Over 8 hash seeds (`cache-hits`' cases and more): the loop three
/// times the cache 30.26% -> 33.34% (quick_cache 32.58, moka 33.49, OPT
/// 33.59), the loop twice the cache after other requests 10.7 -> 17.9,
/// with noise 48.36 -> 48.85, P3 at 32768 pages 18.68 -> 19.05; P3 at
/// 131072 lost 0.15 (49.86), OLTP moved by 0.03 at most and Zipf with and
/// without scans by 0.02. At 0.9 and 0.95 (3 seeds) the loops gained
/// about as much, but P3 at 32768 pages lost 0.06 and 0.22.
pub(super) const DISTANT_ABOVE: f32 = 0.8;
/// Refaults the distant share averages over (an exponential moving
/// average).
pub(super) const DISTANT_WINDOW: f32 = 256.0;

/// A shard whose active list has no room and whose lookups hit less than
/// 1 in this many over a window finds that list stale (see
/// [`Lruvec::lookups`](super::Lruvec::lookups)): where it gets almost no hits, aging the list
/// costs almost none. Below 1 in 20 instead, P3 at 32768 pages lost 0.25
/// points (a stale window's aging took entries it would hit later), and
/// with aging kept up until a whole turn of the active list found only
/// hit entries, 1.8; below 1 in 50, nothing (two runs of `cache-hits`).
pub(super) const STALE_BELOW: u64 = 50;
/// Evictions per step of aging a stale active list. A step at every
/// eviction took the loop three times the cache from 30% hits to none,
/// and P3 at 32768 pages lost 1.2 points (one run, with stale below 1 in
/// 20).
pub(super) const AGE_EVERY: u64 = 4;
/// The fewest evictions in a window of lookups (a window is the shard's
/// size in evictions).
pub(super) const MIN_WINDOW: u64 = 64;
