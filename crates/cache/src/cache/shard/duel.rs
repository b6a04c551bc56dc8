//! [`Policy::Adaptive`]: which of [`Policy::Workingset`],
//! [`Policy::Lirs`], [`Policy::Lru`] and [`Policy::LirsTinyLfu`] a
//! cache's shards run, chosen by miniature simulations of the four over a
//! sample of its keys
//! (Waldspurger et al., "Cache Modeling and Optimization using Miniature
//! Simulations", USENIX ATC 2017), as set dueling chooses a CPU cache's
//! insertion policy (Qureshi et al., ISCA 2007).
//!
//! A key is sampled when its short hash, mixed, falls in the lowest
//! `2^-shift` of the range; the simulations are shards of their own,
//! `2^shift` times smaller than the cache, fed every access of a sampled
//! key as it happens: its misses from the shard's insertion, under the
//! write lock, and its hits from the lookup, under the read lock (into
//! [`Sampled`] for the shard's next write section while another shard
//! feeds them). Whichever simulation has hit most, over about the last
//! [`DUEL_WINDOW`] sampled accesses (or the last [`DUEL_RECENT_WINDOW`],
//! see [`verdict_of_both`]), is what every shard runs from its next write
//! section.

use super::{Deadline, Evicted, Lruvec, Policy, batch::Batch, tunables::*};
use crate::sync::{AtomicBool, AtomicU8, AtomicU32, Mutex, Ordering};

/// Entries a weighted cache's simulations are first sized for, before
/// its shards have said what they hold (see [`Duel::weighted`]): the
/// smallest cache sampled at [`DUEL_MIN_SHIFT`] into simulations of
/// [`DUEL_ENTRIES`].
const WEIGHTED_START: usize = DUEL_ENTRIES << DUEL_MIN_SHIFT;

/// The reports a weighted cache's estimate of its entries is a decaying
/// mean over (see [`Sims::report`]): more steadies it between shards that
/// differ, fewer follows a change of the entries' weights sooner.
const REPORTS_OVER: f64 = 16.0;

/// The hits of sampled keys a shard holds for the duel between two of its
/// write sections, while another shard feeds the simulations; past that,
/// such hits are lost to the sample.
pub(in crate::cache) const SAMPLED: usize = 16;

/// Hits of sampled keys, pushed by lookups under the shard's read lock
/// (readers race only with each other), taken under its write lock.
pub(in crate::cache) struct Sampled {
    /// Their short hashes (0 stands in as 1).
    batch: Batch<SAMPLED>,
    /// Sampled hits since the shard's last write section, replayed or
    /// kept (see [`Duel::hit`]).
    hits: AtomicU32,
}

impl Sampled {
    pub(in crate::cache) fn new() -> Self {
        Self {
            batch: Batch::new(),
            hits: AtomicU32::new(0),
        }
    }

    /// Under the read lock: keeps the hit of short hash `h` if there is
    /// room. A full buffer costs a lookup one load and no store.
    pub(in crate::cache) fn push(&self, h: u32) {
        // 0 marks an empty slot: hash 0 stands in as 1 (a simulation's
        // key, not the cache's).
        let _filled = self.batch.push(h.max(1));
    }

    /// Whether no hit is kept.
    fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Under a read lock: counts a sampled hit since the shard's last
    /// write section, unless `cap` have been; past them a lookup costs one
    /// load and no store.
    fn admit(&self, cap: u32) -> bool {
        if self.hits.load(Ordering::Relaxed) >= cap {
            return false;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Under the write lock: hands each kept hit to `f` and empties the
    /// buffer.
    pub(in crate::cache) fn drain(&self, f: impl FnMut(u32)) {
        self.batch.drain(f);
    }
}

/// Whether the key of short hash `h` is in a sample of 1 in `2^shift`
/// keys (`shift` at most 32): its hash, mixed (the index and the shadows
/// place keys by these bits too), has its top `shift` bits clear. A
/// shard tests its keys by the bound it keeps (`Lruvec::samples`).
#[cfg(test)]
pub(in crate::cache) fn sampled(h: u32, shift: u32) -> bool {
    sample_key(h) < sample_below(shift)
}

/// The key of short hash `h` as the sample sees it: its hash, mixed. In
/// the sample of 1 in `2^shift` keys if below [`sample_below`]`(shift)`.
#[inline]
pub(in crate::cache) fn sample_key(h: u32) -> u64 {
    u64::from(h.wrapping_mul(0x9e37_79b9))
}

/// The bound a [`sample_key`] falls under in a sample of 1 in `2^shift`
/// keys (`shift` at most 32): a shard keeps it, so that a lookup's test
/// is one comparison with no shift to work out.
#[inline]
pub(in crate::cache) fn sample_below(shift: u32) -> u64 {
    1 << (32 - shift.min(32))
}

/// Hits in a row of one key, each a hit in every simulation, after which
/// one more changes nothing in any ([`Sims::access`] then only scores
/// it): every simulation's entry has its references saturated
/// (`mark_accessed` writes nothing past [`MAX_REFS`](super::MAX_REFS)),
/// LRU's is at the head, and a hit writes no sketch (only misses and
/// reclaim count). Not a tunable: fewer would skip hits that still
/// count a reference.
pub(in crate::cache) const DUEL_REPEATS: u32 = super::MAX_REFS as u32;

/// The policies the duel chooses between, in the order of its scores.
pub(in crate::cache) const CONTENDERS: [Policy; 4] = [
    Policy::Workingset,
    Policy::Lirs,
    Policy::Lru,
    Policy::LirsTinyLfu,
];

/// `policy`'s index in [`CONTENDERS`], as the verdict stores it in
/// memory (not the byte a saved state carries: `restart::policy_byte`).
///
/// # Panics
/// If `policy` is not one of them.
fn contender_index(policy: Policy) -> u8 {
    let k = CONTENDERS
        .iter()
        .position(|&p| p == policy)
        .expect("a contender");
    // Four contenders: fits a u8.
    k as u8
}

/// [`Policy::Workingset`]'s index in [`CONTENDERS`].
const WORKINGSET: usize = 0;

/// [`Policy::Lirs`]'s index in [`CONTENDERS`].
const LIRS: usize = 1;

/// [`Policy::Lru`]'s index in [`CONTENDERS`].
const LRU: usize = 2;

/// [`Policy::LirsTinyLfu`]'s index in [`CONTENDERS`].
const TINYLFU: usize = 3;

/// Which of [`CONTENDERS`] the shards should run, running `now` (an index
/// into it), after `seen` sampled accesses that left the simulations'
/// decaying hits at `score` of `window` accesses (decaying alike): no
/// change before [`DUEL_WARMUP`] sampled accesses, while the simulations
/// fill; `Workingset` while none hits (no policy keeps anything there,
/// and LIRS's stamps would cost memory for nothing); LRU once it leads the
/// best of the others (`Workingset`, `Lirs`, `LirsTinyLfu`) by [`DUEL_MARGIN`] plus [`DUEL_LRU_MARGIN_SHARE`]
/// of the lesser of its hits and misses, and by no less than the others'
/// margin, from [`DUEL_LRU_WARMUP`] on (taking it up spends what they
/// learned: Workingset's active list and refault history, LIRS's LIR set,
/// which no simulation prices; a share of hits alone would ask a trace
/// hit nine times in ten to lose a third of its misses); else the best
/// of the others if it leads what runs by [`DUEL_MARGIN`] plus
/// [`DUEL_MARGIN_SHARE`] of its hits, else `now`. `LirsTinyLfu` counts as
/// the best of the others only while `Lirs` or itself runs, and once it
/// also leads `Lirs` by that margin.
pub(in crate::cache) fn verdict(score: [f64; 4], window: f64, seen: u64, now: usize) -> usize {
    let lru_margin = asked(LRU, score[LRU], window);
    // The better of Workingset and LIRS, Workingset on a tie; LIRS with
    // admission instead while LIRS runs (with it or without) if it leads
    // both, and LIRS by the usual margin: it is LIRS with one more rule,
    // whose sketch starts afresh when taken up, and taken up from
    // Workingset near a tie, the shards turned to it and back and a loop
    // three times the cache lost a fifth of its hits.
    let tinylfu_leads = matches!(now, LIRS | TINYLFU)
        && score[TINYLFU] > score[LIRS] + asked(TINYLFU, score[TINYLFU], window)
        && score[TINYLFU] > score[WORKINGSET];
    let other = if tinylfu_leads {
        TINYLFU
    } else {
        usize::from(score[LIRS] > score[WORKINGSET])
    };
    // What LRU must lead: the best of the others, or LIRS with admission
    // running short of its own margin over LIRS.
    let rival = if now == TINYLFU {
        score[other].max(score[TINYLFU])
    } else {
        score[other]
    };
    if seen < DUEL_WARMUP {
        now
    } else if score.iter().all(|&s| s < 1.0) {
        0
    } else if seen >= DUEL_LRU_WARMUP && score[LRU] > rival + lru_margin {
        LRU
    } else if score[other] > score[now] + asked(other, score[other], window) {
        other
    } else {
        now
    }
}

/// The lead [`verdict`] asks of policy `k` (an index into [`CONTENDERS`])
/// with `score` hits of `window` accesses, to be taken up.
fn asked(k: usize, score: f64, window: f64) -> f64 {
    let margin = |lead: f64, share: f64| DUEL_MARGIN + share * lead;
    let usual = margin(score, DUEL_MARGIN_SHARE);
    if k == LRU {
        margin(score.min(window - score), DUEL_LRU_MARGIN_SHARE).max(usual)
    } else {
        usual
    }
}

/// [`verdict`] over the whole window (`whole`: the simulations' decaying
/// hits and the accesses they count), or, where that keeps `now`, over
/// the recent one ([`DUEL_RECENT_WINDOW`], `recent` likewise) for a policy
/// that the whole window also ranks first of the four (a first that
/// `now` may not turn to, `LirsTinyLfu` from `Workingset` or `Lru`, leaves
/// `now`), [`DUEL_MARGIN`] ahead of `now`. So a workload that changes
/// character is followed once the recent window sees the change and the
/// whole one ranks it first, not only once the whole one's lead passes
/// its margin, which takes most of a window; LRU too is taken up and
/// left that way, its larger margin asked of the recent window only. A
/// lead that is a blip of the recent window, or within `DUEL_MARGIN` of
/// `now` over the whole, turns nothing. Nor does the recent window turn
/// the shards back to `left`, the policy they left within the last
/// [`DUEL_RECENT_WINDOW`] sampled accesses, and the whole window does so
/// only if it leads what runs by twice the lead it is asked otherwise:
/// where two policies tie over the whole window, each phase of a
/// periodic workload leads lately, and a turn at each loses what each
/// policy had learned, which no simulation prices.
pub(in crate::cache) fn verdict_of_both(
    whole: ([f64; 4], f64),
    recent: ([f64; 4], f64),
    seen: u64,
    now: usize,
    left: Option<usize>,
) -> usize {
    let mut by_whole = verdict(whole.0, whole.1, seen, now);
    let k = by_whole;
    if Some(k) == left && whole.0[k] - whole.0[now] <= 2.0 * asked(k, whole.0[k], whole.1) {
        by_whole = now;
    }
    if by_whole != now || recent.0.iter().all(|&s| s < 1.0) {
        return by_whole;
    }
    let by_recent = verdict(recent.0, recent.1, seen, now);
    let first = whole.0.iter().all(|&s| whole.0[by_recent] >= s);
    if first && Some(by_recent) != left && whole.0[by_recent] > whole.0[now] + DUEL_MARGIN {
        by_recent
    } else {
        now
    }
}

/// Whether [`verdict_of_both`] keeps `now` whatever its other inputs,
/// from the whole window's scores alone: before [`DUEL_WARMUP`] sampled
/// accesses, and while some simulation hits and none leads `now` by more
/// than [`DUEL_MARGIN`], the least lead any of its rules asks (LRU's is
/// over the best of the others, which is at least `now`'s score unless
/// LRU runs, and then it keeps LRU; the margins' shares are not
/// negative). Tested first on every sampled access, which mostly changes
/// nothing: the full verdict costs a small cache about a tenth of its
/// instructions (docs/cache.md, "Small caches").
#[inline]
pub(in crate::cache) fn keeps(whole: &[f64; 4], seen: u64, now: usize) -> bool {
    // What the shortcut rests on: no rule asks less than DUEL_MARGIN.
    const _: () = assert!(DUEL_MARGIN_SHARE >= 0.0 && DUEL_LRU_MARGIN_SHARE >= 0.0);
    seen < DUEL_WARMUP
        || (whole.iter().any(|&s| s >= 1.0) && whole.iter().all(|&s| s <= whole[now] + DUEL_MARGIN))
}

/// The policy the shards left (`left`: it, and the sampled accesses seen
/// then) if that was within the last [`DUEL_RECENT_WINDOW`] of `seen`
/// sampled accesses: what [`verdict_of_both`] holds back.
pub(in crate::cache) fn just_left(left: Option<(usize, u64)>, seen: u64) -> Option<usize> {
    left.filter(|&(_, at)| seen - at < u64::from(DUEL_RECENT_WINDOW))
        .map(|(policy, _)| policy)
}

/// The cache's duel: the sample's simulations and their verdict.
pub(in crate::cache) struct Duel {
    sims: Mutex<Sims>,
    /// What every shard's write reads, apart from the mutex's line, which
    /// every sampled access writes; stored only when it changes.
    verdict: crossbeam_utils::CachePadded<Verdict>,
    /// A weighted cache's shards, whose entries the simulations follow
    /// (see [`Duel::weighted`]); 0 for a cache of entries, whose size
    /// only `set_capacity` changes.
    weighted_shards: usize,
    /// Sampled accesses a write section dropped, finding the simulations
    /// busy: a loom model's tally (std's atomic, outside loom's model of
    /// memory). Hits a lookup loses past its cap or to a full buffer are
    /// not counted here.
    #[cfg(all(test, loom))]
    dropped: std::sync::atomic::AtomicU32,
}

/// The duel's verdict.
struct Verdict {
    /// What the shards run: an index into [`CONTENDERS`].
    policy: AtomicU8,
    /// Whether any simulation has hit (until then LIRS shards keep no
    /// stamps).
    hit: AtomicBool,
    /// The sample's shift (see [`sample_below`]), which a weighted
    /// cache's shards take up at their next write section when the
    /// simulations follow its entries.
    shift: AtomicU32,
}

/// The simulations, one for each of [`CONTENDERS`] (keys are short
/// hashes, values nothing), the decaying counts of their hits, and a
/// buffer for their evictions.
struct Sims {
    /// Keys whose mixed short hash has its top `shift` bits clear are
    /// sampled.
    shift: u32,
    /// The cache's entries the simulations are sized for.
    basis: usize,
    /// A weighted cache's entries as its shards report them, a decaying
    /// mean (0: none reported yet).
    reported: f64,
    sims: [Lruvec<u32, ()>; 4],
    /// Hits of each over about the last [`DUEL_WINDOW`] sampled accesses.
    score: [f64; 4],
    /// Those accesses, decaying as `score` does.
    window: f64,
    /// Hits of each over about the last [`DUEL_RECENT_WINDOW`].
    recent: [f64; 4],
    /// Those accesses, decaying as `recent` does.
    recent_window: f64,
    /// Each simulation's hits and misses so far, which it reads as a
    /// shard reads its stripes' counts (`Lruvec::lookups`).
    lookups: [(u64, u64); 4],
    /// Sampled accesses so far.
    seen: u64,
    /// The policy the shards last left (an index into [`CONTENDERS`]),
    /// and `seen` then.
    left: Option<(usize, u64)>,
    /// Whether the verdict was learned before these simulations: taken
    /// from a save (`Duel::resume`), or carried over a resize.
    settled: bool,
    /// The key of the simulations' last access, and how many accesses in
    /// a row before it were of that key and hit in every simulation (0
    /// after a miss in any): see [`Sims::access`].
    last: u32,
    repeats: u32,
    /// Sampled accesses replayed in the simulations (the rest only
    /// scored).
    #[cfg(test)]
    replays: u64,
    out: Evicted<u32, ()>,
}

impl Duel {
    /// A duel for a cache of `entries` entries: simulations of
    /// [`DUEL_ENTRIES`] to twice that each, or an eighth of the cache
    /// (`2^-`[`DUEL_MIN_SHIFT`]) when that is fewer (see
    /// [`Sims::shift_for`]).
    pub(in crate::cache) fn new(entries: usize) -> Self {
        let sims = Sims::new(entries);
        Self {
            verdict: crossbeam_utils::CachePadded::new(Verdict {
                // LIRS first.
                policy: AtomicU8::new(1),
                hit: AtomicBool::new(false),
                shift: AtomicU32::new(sims.shift),
            }),
            sims: Mutex::new(sims),
            weighted_shards: 0,
            #[cfg(all(test, loom))]
            dropped: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// A duel for a weighted cache of `capacity` over `shards` shards,
    /// whose entries are not known until it holds some: the simulations
    /// are sized for the entries the shards report as they feed them
    /// (each shard's length scaled by its capacity over its weight, times
    /// the shards; their decaying mean, [`Sims::report`]), resized once
    /// that is more than a quarter off, as [`resize`](Self::resize)
    /// resizes them. Why: the simulations model the
    /// cache in entries (a sampled key counts 1, as the duel scores
    /// requests hit), and a capacity in weight (bytes, say) says nothing
    /// of how many it holds.
    /// `estimate`, the entries the user expects it to hold
    /// (`Builder::estimated_entries`), if it is within 1 and `capacity`,
    /// is where the simulations start and the mean of the reports starts
    /// from; otherwise they start at [`WEIGHTED_START`] entries (no more
    /// than `capacity`) and the first report stands alone.
    pub(in crate::cache) fn weighted(
        capacity: u64,
        estimate: Option<usize>,
        shards: usize,
    ) -> Self {
        let most = usize::try_from(capacity).unwrap_or(usize::MAX);
        let told = estimate.filter(|&e| (1..=most).contains(&e));
        let start = told.unwrap_or(WEIGHTED_START.min(most)).max(1);
        let duel = Self {
            weighted_shards: shards.max(1),
            ..Self::new(start)
        };
        if told.is_some() {
            crate::sync::lock(&duel.sims).reported = start as f64;
        }
        duel
    }

    /// The cache now holds `entries` entries (`set_capacity`): the
    /// simulations follow, sampled at the rate that suits the new size
    /// (new simulations, warming up again, if it changed; the verdict
    /// stands meanwhile). Returns the sample's `shift` (see [`sample_below`]).
    /// A weighted cache's duel takes no size from here: its shards report
    /// what their new capacities hold as they feed it.
    pub(in crate::cache) fn resize(&self, entries: usize) -> u32 {
        let sims = &mut *crate::sync::lock(&self.sims);
        if self.weighted_shards != 0 {
            return sims.shift;
        }
        sims.resize(entries);
        self.verdict.shift.store(sims.shift, Ordering::Relaxed);
        sims.shift
    }

    /// The sample's shift now: a weighted cache's shards take it up at
    /// their next write section (see [`weighted`](Self::weighted)).
    #[inline]
    pub(in crate::cache) fn shift_now(&self) -> u32 {
        self.verdict.shift.load(Ordering::Relaxed)
    }

    /// What the simulation of [`Policy::Workingset`] has learned (see
    /// [`Lruvec::learned`]), for a shard taking it up. Waits while a
    /// shard or a lookup feeds the simulations: taken only at a change of
    /// policy.
    pub(in crate::cache) fn learned(&self) -> Option<super::Learned> {
        crate::sync::lock(&self.sims).sims[WORKINGSET].learned()
    }

    /// Keys are sampled 1 in `2^shift` (see [`sample_below`]).
    pub(in crate::cache) fn shift(&self) -> u32 {
        crate::sync::lock(&self.sims).shift
    }

    /// Whether the key of `hash` (the cache's hash of it) is in the
    /// sample.
    #[cfg(test)]
    pub(in crate::cache) fn samples(&self, hash: u64) -> bool {
        self.samples_at(hash, self.shift())
    }

    /// Whether the key of `hash` is in a sample of 1 in `2^shift` keys.
    #[cfg(test)]
    pub(in crate::cache) fn samples_at(&self, hash: u64, shift: u32) -> bool {
        sampled(super::short_hash(hash), shift)
    }

    /// Holds the simulations, as a shard feeding them does.
    #[cfg(all(test, not(loom)))]
    pub(in crate::cache) fn feeding(&self) -> crate::sync::MutexGuard<'_, impl Sized> {
        crate::sync::lock(&self.sims)
    }

    /// Has the shards run `policy` (one of [`CONTENDERS`]) from their
    /// next write section, until the simulations' next verdict.
    #[cfg(all(test, not(loom)))]
    pub(in crate::cache) fn run(&self, policy: Policy) {
        self.verdict
            .policy
            .store(contender_index(policy), Ordering::Relaxed);
    }

    /// Takes up a saved cache's verdict (`LruCache::warm`), unless this
    /// duel's verdict is already learned (its simulations have warmed
    /// up, or it took a verdict before: a cache in use keeps its own):
    /// the shards run `policy` (one of [`CONTENDERS`]) from their next
    /// write section, and the sample counts as having hit if `hit`. No
    /// verdict comes before the simulations have seen [`DUEL_WARMUP`]
    /// sampled accesses in all, so this one stands until then at least.
    pub(in crate::cache) fn resume(&self, policy: Policy, hit: bool) {
        let sims = &mut *crate::sync::lock(&self.sims);
        if sims.settled() {
            return;
        }
        self.verdict
            .policy
            .store(contender_index(policy), Ordering::Relaxed);
        if hit {
            self.verdict.hit.store(true, Ordering::Relaxed);
        }
        sims.settled = true;
    }

    /// The verdict and whether the sample has hit, for a warm restart
    /// (`LruCache::save`), once the verdict is learned (see
    /// [`Sims::settled`]); before, it is where every duel starts.
    pub(in crate::cache) fn learned_verdict(&self) -> Option<(Policy, bool)> {
        let settled = crate::sync::lock(&self.sims).settled();
        settled.then(|| (self.policy(), self.has_hit()))
    }

    /// The cache's entries the simulations are sized for.
    #[cfg(all(test, not(loom)))]
    pub(in crate::cache) fn basis(&self) -> usize {
        crate::sync::lock(&self.sims).basis
    }

    /// Sampled accesses the simulations have seen.
    #[cfg(test)]
    pub(in crate::cache) fn seen(&self) -> u64 {
        crate::sync::lock(&self.sims).seen
    }

    /// Sampled accesses the simulations replayed, since they were made
    /// (the rest only scored: see [`Sims::access`]).
    #[cfg(test)]
    pub(in crate::cache) fn replays(&self) -> u64 {
        crate::sync::lock(&self.sims).replays
    }

    /// Each simulation's hits and misses so far.
    #[cfg(test)]
    pub(in crate::cache) fn lookups(&self) -> [(u64, u64); 4] {
        crate::sync::lock(&self.sims).lookups
    }

    /// Each simulation's decaying count of misses: the window less its
    /// score; over the whole window and over the recent one.
    #[cfg(all(test, not(loom)))]
    pub(in crate::cache) fn misses(&self) -> [[f64; 4]; 2] {
        let sims = crate::sync::lock(&self.sims);
        [
            sims.score.map(|s| sims.window - s),
            sims.recent.map(|s| sims.recent_window - s),
        ]
    }

    /// Whether the sample has hit yet (until then LIRS shards keep no
    /// stamps).
    pub(in crate::cache) fn has_hit(&self) -> bool {
        self.verdict.hit.load(Ordering::Relaxed)
    }

    /// The policy the shards should run (one of [`CONTENDERS`]).
    pub(in crate::cache) fn policy(&self) -> Policy {
        CONTENDERS[self.chosen()]
    }

    /// [`policy`](Self::policy)'s index in [`CONTENDERS`].
    fn chosen(&self) -> usize {
        usize::from(self.verdict.policy.load(Ordering::Relaxed))
    }

    /// Under a shard's write lock: replays `sampled`'s hits and then the
    /// miss of short hash `miss` (if sampled) into every simulation, and
    /// moves the verdict. Skipped when another shard is at it: the sample
    /// loses those accesses, and no shard waits for another's. Inline up
    /// to the test for anything to feed, which most insertions fail: the
    /// replay is a call of its own.
    /// `entries` is what the feeding shard would hold when full, 0 if it
    /// cannot tell yet (weighted caches' only: see
    /// [`weighted`](Self::weighted)).
    #[inline]
    pub(in crate::cache) fn feed(
        &self,
        sampled: &Sampled,
        miss: Option<u32>,
        entries: impl FnOnce() -> usize,
    ) {
        // A new section: lookups may replay again (stored only if they
        // did, so that a write leaves the buffer's line alone otherwise).
        if sampled.hits.load(Ordering::Relaxed) != 0 {
            sampled.hits.store(0, Ordering::Relaxed);
        }
        if miss.is_some() || !sampled.is_empty() {
            self.feed_sims(sampled, miss, entries);
        }
    }

    /// [`feed`](Self::feed)'s replay, once there is something to feed.
    #[inline(never)]
    fn feed_sims(&self, sampled: &Sampled, miss: Option<u32>, entries: impl FnOnce() -> usize) {
        let Some(mut sims) = self.try_sims() else {
            #[cfg(all(test, loom))]
            self.tally_dropped(sampled, miss);
            #[cfg(not(all(test, loom)))]
            sampled.drain(|_| {});
            return;
        };
        let sims = &mut *sims;
        if self.weighted_shards != 0 {
            // 0: the shard holds nothing yet to tell.
            let report = entries().saturating_mul(self.weighted_shards);
            if report != 0 {
                let cache = sims.report(report);
                if sims.off_basis(cache) {
                    sims.resize(cache);
                    self.verdict.shift.store(sims.shift, Ordering::Relaxed);
                }
            }
        }
        let below = self.takes_below(sims);
        let mut access = |h: u32| {
            if sample_key(h) < below {
                sims.access(h);
            }
        };
        sampled.drain(&mut access);
        if let Some(h) = miss {
            access(h);
        }
        self.judge(sims);
    }

    /// Drops the shard's kept hits and its miss, tallied (see
    /// `dropped`): [`feed_sims`](Self::feed_sims) found the simulations
    /// busy.
    #[cfg(all(test, loom))]
    fn tally_dropped(&self, sampled: &Sampled, miss: Option<u32>) {
        let mut n = u32::from(miss.is_some());
        sampled.drain(|_| n += 1);
        self.dropped
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sampled accesses a write section dropped, finding the simulations
    /// busy.
    #[cfg(all(test, loom))]
    pub(in crate::cache) fn dropped(&self) -> u32 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Under a shard's read lock: replays the hit of short hash `h` (a
    /// sampled key) into the simulations now, in the order of the cache's
    /// accesses (but for hits an earlier busy moment left in the buffer);
    /// while another thread feeds them, keeps it in `sampled` for the
    /// shard's next write section, so that no lookup waits. Why at once:
    /// held back to each shard's next write, the hits reached the
    /// simulations out of order and thinned, and they ranked the policies
    /// on another workload than the cache's (docs/cache.md).
    ///
    /// At most `cap` sampled hits between two of the shard's write
    /// sections reach them: while a shard only reads, its hits change
    /// nothing the simulations rank (past the cap a lookup costs one
    /// load).
    pub(in crate::cache) fn hit(&self, sampled: &Sampled, h: u32, cap: u32) {
        if !sampled.admit(cap) {
            return;
        }
        let Some(mut sims) = self.try_sims() else {
            sampled.push(h);
            return;
        };
        let sims = &mut *sims;
        if sample_key(h) < self.takes_below(sims) {
            sims.access(h);
        }
        self.judge(sims);
    }

    /// The bound of the keys the simulations take (see [`sample_key`]):
    /// weighted, only their sample's, since a shard that has not yet
    /// taken up a new shift samples at the old one; every key otherwise
    /// (a cache of entries changes its shift only in `set_capacity`,
    /// which has every shard take it up).
    fn takes_below(&self, sims: &Sims) -> u64 {
        if self.weighted_shards != 0 {
            sample_below(sims.shift)
        } else {
            u64::MAX
        }
    }

    /// The simulations, unless another thread holds them (no shard or
    /// lookup waits for another's replay). Nothing in them calls user
    /// code: kept working whatever poisoned the lock.
    fn try_sims(&self) -> Option<crate::sync::MutexGuard<'_, Sims>> {
        match self.sims.try_lock() {
            Ok(sims) => Some(sims),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Moves the verdict after the simulations' latest accesses.
    fn judge(&self, sims: &mut Sims) {
        let (now, verdict) = (self.chosen(), sims.verdict(self.chosen()));
        if verdict != now {
            sims.left = Some((now, sims.seen));
            // An index of CONTENDERS: fits a u8.
            self.verdict.policy.store(verdict as u8, Ordering::Relaxed);
        }
        if !self.has_hit() && sims.score.iter().any(|&s| s > 0.0) {
            self.verdict.hit.store(true, Ordering::Relaxed);
        }
    }
}

impl Sims {
    /// Simulations for a cache of `entries` entries (see [`Duel::new`]).
    fn new(entries: usize) -> Self {
        let shift = Self::shift_for(entries);
        let n = Self::entries(shift, entries);
        let sim = |policy| {
            let mut sim = Lruvec::new(policy, true, false, (false, false), n as u64, n);
            // A HIR share moved one entry at a time swings by a whole
            // percent in a simulation of a hundred entries: a loop's LIRS
            // simulation then fell behind, and the shards left LIRS, and
            // the loop, for Workingset (docs/cache.md).
            sim.hir_adapts = false;
            sim
        };
        Self {
            shift,
            basis: entries,
            reported: 0.0,
            sims: CONTENDERS.map(sim),
            score: [0.0; 4],
            window: 0.0,
            recent: [0.0; 4],
            recent_window: 0.0,
            lookups: [(0, 0); 4],
            seen: 0,
            left: None,
            settled: false,
            last: 0,
            repeats: 0,
            #[cfg(test)]
            replays: 0,
            out: Evicted::new(),
        }
    }

    /// Sized for a cache of `entries` entries: the simulations take the
    /// new size if the sample's rate stays; new ones, warming up again,
    /// if it changes (the verdict stands, learned as it was:
    /// `learned_verdict`).
    fn resize(&mut self, entries: usize) {
        if Self::shift_for(entries) == self.shift {
            let n = Self::entries(self.shift, entries);
            for sim in &mut self.sims {
                sim.set_capacity(n as u64, n, &mut self.out);
            }
            self.out.clear();
            self.basis = entries;
            // Reclaim for a smaller size may have spent the last key's
            // references or evicted it: its next hit replays.
            self.repeats = 0;
        } else {
            let (settled, reported) = (self.settled(), self.reported);
            *self = Self::new(entries);
            self.settled = settled;
            self.reported = reported;
        }
    }

    /// Takes a shard's report of the weighted cache's entries (its own
    /// estimate times the shards) into their decaying mean, which it
    /// returns. Why a mean: shards whose entries' weights differ (a
    /// heavy entry can take a shard's whole share) report different
    /// caches, and each report taken as it came resized the simulations
    /// back and forth.
    fn report(&mut self, entries: usize) -> usize {
        let r = entries as f64;
        self.reported = if self.reported == 0.0 {
            r
        } else {
            self.reported + (r - self.reported) / REPORTS_OVER
        };
        // At most `entries`' own range: the cast saturates.
        self.reported as usize
    }

    /// Whether a cache of `entries` entries is more than a quarter off what
    /// the simulations are sized for: a weighted cache's estimate moves
    /// with each entry's weight, and each resize costs the simulations
    /// what they evict.
    fn off_basis(&self, entries: usize) -> bool {
        let b = self.basis;
        entries > b.saturating_add(b / 4) || entries < b - b / 4
    }

    /// Whether the verdict is learned: the simulations have warmed up
    /// ([`DUEL_WARMUP`]), or it was learned before them (`settled`).
    fn settled(&self) -> bool {
        self.seen >= DUEL_WARMUP || self.settled
    }

    /// The sample's `shift` for a cache of `entries` entries: simulations
    /// of [`DUEL_ENTRIES`] to twice that, sampling at most 1 key in
    /// `2^`[`DUEL_MIN_SHIFT`] (smaller simulations below); at most 1 in
    /// 2^32 keys (a short hash has 32 bits).
    fn shift_for(entries: usize) -> u32 {
        (entries / DUEL_ENTRIES)
            .max(1)
            .ilog2()
            .clamp(DUEL_MIN_SHIFT, 32)
    }

    /// A simulation's entries for a cache of `entries` sampled 1 in
    /// `2^shift`.
    fn entries(shift: u32, entries: usize) -> usize {
        entries.div_ceil(1 << shift).max(1)
    }

    /// Which of [`CONTENDERS`] the shards should run, running `now` (see
    /// [`verdict_of_both`]), by [`keeps`]'s shortcut where it holds.
    fn verdict(&self, now: usize) -> usize {
        if keeps(&self.score, self.seen, now) {
            // Every test that feeds a duel checks the shortcut.
            debug_assert_eq!(self.whole_verdict(now), now, "the shortcut kept {now}");
            return now;
        }
        self.whole_verdict(now)
    }

    /// [`verdict_of_both`] over the simulations' windows.
    fn whole_verdict(&self, now: usize) -> usize {
        verdict_of_both(
            (self.score, self.window),
            (self.recent, self.recent_window),
            self.seen,
            now,
            just_left(self.left, self.seen),
        )
    }

    /// One access of the key of short hash `h` in every simulation.
    fn access(&mut self, h: u32) {
        // As the buffer keeps it (0 marks an empty slot there): a key's
        // hits and misses are one key here, whichever way they came.
        let h = h.max(1);
        let hash = u64::from(h) << 8;
        let decay = 1.0 - 1.0 / f64::from(DUEL_WINDOW);
        let recent_decay = 1.0 - 1.0 / f64::from(DUEL_RECENT_WINDOW);
        self.seen += 1;
        self.window = self.window * decay + 1.0;
        self.recent_window = self.recent_window * recent_decay + 1.0;
        // A key requested again and again (a hot key in the sample: Zipf
        // 1.1's hottest takes 12% of the requests), hit in every
        // simulation each time, hits in each once more, and after
        // [`DUEL_REPEATS`] such hits in a row one more changes nothing
        // in any: only the scores move, and the four lookups are skipped
        // (docs/cache.md, "A third host").
        if h == self.last && self.repeats >= DUEL_REPEATS {
            for k in 0..CONTENDERS.len() {
                self.lookups[k].0 += 1;
                self.score[k] = self.score[k] * decay + 1.0;
                self.recent[k] = self.recent[k] * recent_decay + 1.0;
            }
            return;
        }
        #[cfg(test)]
        {
            self.replays += 1;
        }
        let mut every = true;
        for (k, sim) in self.sims.iter_mut().enumerate() {
            let hit = match sim.find(hash, |&key| key == h) {
                Some(i) => {
                    // LRU's simulation as the shards run it: each hit
                    // moved to the head (see `Lruvec::drain_moves`).
                    if sim.policy == Policy::Lru {
                        sim.move_to_head(i);
                    } else {
                        // A simulation batches no moves.
                        let _full = sim.mark_accessed(i);
                    }
                    self.lookups[k].0 += 1;
                    1.0
                }
                None => {
                    self.lookups[k].1 += 1;
                    every = false;
                    // As the cache's insertion gives a shard its lookups.
                    if sim.looks_at_lookups() {
                        let (hits, misses) = self.lookups[k];
                        sim.lookups(hits, misses);
                    }
                    sim.insert_new(hash, h, (), 1, Deadline::NEVER, &mut self.out);
                    self.out.clear();
                    0.0
                }
            };
            self.score[k] = self.score[k] * decay + hit;
            self.recent[k] = self.recent[k] * recent_decay + hit;
        }
        self.repeats = match (every, h == self.last) {
            (false, _) => 0,
            (true, true) => self.repeats + 1,
            (true, false) => 1,
        };
        self.last = h;
    }
}
