//! The duel's simulations: one shard of each contender over the sampled
//! keys, and the decaying counts of their hits.

use super::{
    CONTENDERS, DUEL_REPEATS,
    verdict::{just_left, keeps, verdict_of_both},
};
use crate::cache::shard::{Deadline, Evicted, Lruvec, Policy, tunables::*};

/// The reports a weighted cache's estimate of its entries is a decaying
/// mean over (see [`Sims::report`]): more steadies it between shards that
/// differ, fewer follows a change of the entries' weights sooner.
const REPORTS_OVER: f64 = 16.0;

/// The simulations, one for each of [`CONTENDERS`] (keys are short
/// hashes, values nothing), the decaying counts of their hits, and a
/// buffer for their evictions.
pub(super) struct Sims {
    /// Keys whose mixed short hash has its top `shift` bits clear are
    /// sampled.
    pub(super) shift: u32,
    /// The cache's entries the simulations are sized for.
    pub(super) basis: usize,
    /// A weighted cache's entries as its shards report them, a decaying
    /// mean (0: none reported yet).
    pub(super) reported: f64,
    pub(super) sims: [Lruvec<u32, ()>; 4],
    /// Hits of each over about the last [`DUEL_WINDOW`] sampled accesses.
    pub(super) score: [f64; 4],
    /// Those accesses, decaying as `score` does.
    pub(super) window: f64,
    /// Hits of each over about the last [`DUEL_RECENT_WINDOW`].
    pub(super) recent: [f64; 4],
    /// Those accesses, decaying as `recent` does.
    pub(super) recent_window: f64,
    /// Each simulation's hits and misses so far, which it reads as a
    /// shard reads its stripes' counts (`Lruvec::lookups`).
    pub(super) lookups: [(u64, u64); 4],
    /// Sampled accesses so far.
    pub(super) seen: u64,
    /// The policy the shards last left (an index into [`CONTENDERS`]),
    /// and `seen` then.
    pub(super) left: Option<(usize, u64)>,
    /// Whether the verdict was learned before these simulations: taken
    /// from a save (`Duel::resume`), or carried over a resize.
    pub(super) settled: bool,
    /// The key of the simulations' last access, and how many accesses in
    /// a row before it were of that key and hit in every simulation (0
    /// after a miss in any): see [`Sims::access`], which skips the
    /// replay by them, and [`Sims::replay`], which keeps them.
    last: u32,
    repeats: u32,
    /// Sampled accesses replayed in the simulations (the rest only
    /// scored).
    #[cfg(test)]
    pub(super) replays: u64,
    out: Evicted<u32, ()>,
}

impl Sims {
    /// Simulations for a cache of `entries` entries (see
    /// [`Duel::new`](super::Duel::new)).
    pub(super) fn new(entries: usize) -> Self {
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
    pub(super) fn resize(&mut self, entries: usize) {
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
    pub(super) fn report(&mut self, entries: usize) -> usize {
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
    pub(super) fn off_basis(&self, entries: usize) -> bool {
        let b = self.basis;
        entries > b.saturating_add(b / 4) || entries < b - b / 4
    }

    /// Whether the verdict is learned: the simulations have warmed up
    /// ([`DUEL_WARMUP`]), or it was learned before them (`settled`).
    pub(super) fn settled(&self) -> bool {
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
    pub(super) fn verdict(&self, now: usize) -> usize {
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
    pub(super) fn access(&mut self, h: u32) {
        // As the buffer keeps it (0 marks an empty slot there): a key's
        // hits and misses are one key here, whichever way they came.
        let h = h.max(1);
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
        let hits = if h == self.last && self.repeats >= DUEL_REPEATS {
            for l in &mut self.lookups {
                l.0 += 1;
            }
            [true; 4]
        } else {
            self.replay(h)
        };
        for (k, &hit) in hits.iter().enumerate() {
            let hit = f64::from(u8::from(hit));
            self.score[k] = self.score[k] * decay + hit;
            self.recent[k] = self.recent[k] * recent_decay + hit;
        }
    }

    /// [`access`](Self::access)'s lookups of the key of short hash `h`
    /// (not 0), each simulation's miss inserting it: which simulations hit.
    /// Keeps `last`, `repeats` (and under test `replays`) for the skip.
    fn replay(&mut self, h: u32) -> [bool; 4] {
        #[cfg(test)]
        {
            self.replays += 1;
        }
        let hash = u64::from(h) << 8;
        let mut hits = [false; 4];
        for (k, sim) in self.sims.iter_mut().enumerate() {
            if let Some(i) = sim.find(hash, |&key| key == h) {
                // LRU's simulation as the shards run it: each hit moved
                // to the head (see `Lruvec::drain_moves`).
                if sim.policy == Policy::Lru {
                    sim.move_to_head(i);
                } else {
                    // A simulation batches no moves.
                    let _full = sim.mark_accessed(i);
                }
                self.lookups[k].0 += 1;
                hits[k] = true;
            } else {
                self.lookups[k].1 += 1;
                // As the cache's insertion gives a shard its lookups.
                if sim.looks_at_lookups() {
                    let (found, missed) = self.lookups[k];
                    sim.lookups(found, missed);
                }
                sim.insert_new(hash, h, (), 1, Deadline::NEVER, &mut self.out);
                self.out.clear();
            }
        }
        let every = hits.iter().all(|&hit| hit);
        self.repeats = match (every, h == self.last) {
            (false, _) => 0,
            (true, true) => self.repeats + 1,
            (true, false) => 1,
        };
        self.last = h;
        hits
    }
}
