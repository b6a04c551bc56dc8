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
//! see [`verdict_of_both`](verdict::verdict_of_both)), is what every
//! shard runs from its next write section.

use super::{Policy, batch::Batch, tunables::*};
use crate::sync::{AtomicBool, AtomicU8, AtomicU32, Mutex, Ordering};

mod sims;
mod verdict;

use sims::Sims;
#[cfg(all(test, not(mmbatch_loom)))]
pub(in crate::cache) use verdict::{just_left, keeps, verdict, verdict_of_both};

/// Entries a weighted cache's simulations are first sized for, before
/// its shards have said what they hold (see [`Duel::weighted`]): the
/// smallest cache sampled at [`DUEL_MIN_SHIFT`] into simulations of
/// [`DUEL_ENTRIES`].
const WEIGHTED_START: usize = DUEL_ENTRIES << DUEL_MIN_SHIFT;

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
    #[cfg(all(test, mmbatch_loom))]
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
            #[cfg(all(test, mmbatch_loom))]
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
    /// [`Lruvec::learned`](super::Lruvec::learned)), for a shard taking it
    /// up. Waits while a shard or a lookup feeds the simulations: taken
    /// only at a change of policy.
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
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(in crate::cache) fn feeding(&self) -> crate::sync::MutexGuard<'_, impl Sized> {
        crate::sync::lock(&self.sims)
    }

    /// Has the shards run `policy` (one of [`CONTENDERS`]) from their
    /// next write section, until the simulations' next verdict.
    #[cfg(all(test, not(mmbatch_loom)))]
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
    #[cfg(all(test, not(mmbatch_loom)))]
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
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(in crate::cache) fn replays(&self) -> u64 {
        crate::sync::lock(&self.sims).replays
    }

    /// Each simulation's hits and misses so far.
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(in crate::cache) fn lookups(&self) -> [(u64, u64); 4] {
        crate::sync::lock(&self.sims).lookups
    }

    /// Each simulation's decaying count of misses: the window less its
    /// score; over the whole window and over the recent one.
    #[cfg(all(test, not(mmbatch_loom)))]
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
            #[cfg(all(test, mmbatch_loom))]
            self.tally_dropped(sampled, miss);
            #[cfg(not(all(test, mmbatch_loom)))]
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
    #[cfg(all(test, mmbatch_loom))]
    fn tally_dropped(&self, sampled: &Sampled, miss: Option<u32>) {
        let mut n = u32::from(miss.is_some());
        sampled.drain(|_| n += 1);
        self.dropped
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sampled accesses a write section dropped, finding the simulations
    /// busy.
    #[cfg(all(test, mmbatch_loom))]
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
