//! The shard's side of [`Policy::Adaptive`]: feeding the duel at a
//! miss, taking up the policy it chooses, and what a warm restart
//! resumes.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Under [`Policy::Adaptive`], at a miss of the key of short hash
    /// `h`: feeds the duel and runs the policy it chooses.
    pub(super) fn duel(&mut self, h: u32) {
        let Some((duel, sampled)) = &self.duel else {
            return;
        };
        duel.feed(sampled, self.samples(h).then_some(h), || {
            self.entries_when_full()
        });
        let (policy, hit) = (duel.policy(), duel.has_hit());
        // Weighted, the sample's rate follows the cache's entries.
        let shift = if self.weighted {
            duel.shift_now()
        } else {
            self.duel_shift
        };
        if shift != self.duel_shift {
            self.set_duel_shift(shift);
        }
        if policy != self.runs() {
            self.adopt(policy);
        }
        self.drain_moves();
        if self.lirs && hit && !self.stamped {
            self.keep_stamps();
        }
    }

    /// Starts keeping stamps, every entry's last access taken as now.
    pub(super) fn keep_stamps(&mut self) {
        let now = self.stamp_now();
        self.stamps = (0..self.nodes.len()).map(|_| AtomicU16::new(now)).collect();
        self.stamps_aged = self.stamp_units();
        self.stamped = true;
    }

    /// Runs `policy` (one of [`duel::CONTENDERS`]) from now: the lists
    /// stay as they are and reclaim moves them to its targets
    /// ([`Policy::Lru`] drains the active list). A shard taking up LIRS
    /// counts a shard's worth of evictions as the LIR set's reach until
    /// its first demotion (it keeps stamps once the duel's sample has hit:
    /// see [`keep_stamps`](Self::keep_stamps)); one giving it up drops its
    /// stamps.
    pub(super) fn adopt(&mut self, policy: Policy) {
        debug_assert!(duel::CONTENDERS.contains(&policy), "{policy:?}");
        let admits = policy == Policy::LirsTinyLfu;
        let policy = if admits { Policy::Lirs } else { policy };
        // LRU's batched moves (only a shard running LRU has any, and it
        // adopts no other policy but to leave it), dropped: their counts
        // stand.
        if let Some(moves) = &self.moves {
            moves.drain(|_| {});
        }
        self.admits = admits;
        // The sketch is kept while admission runs: counting for a shard
        // that might take admission up cost LIRS a fifth of its speed
        // (docs/cache.md). A shard taking it up starts counting afresh.
        if !admits {
            self.sketch = None;
        } else if self.sketch.is_none() {
            self.sketch = Some(Sketch::new(self.len()));
        }
        if policy == Policy::Lirs && self.lirs {
            // Admission taken up or given up: LIRS's lists, stamps and
            // reach stay as they are.
            return;
        }
        self.policy = policy;
        // Statistics taken from a save were `Workingset`'s, now left.
        self.resumed = false;
        self.lirs = policy == Policy::Lirs;
        self.max_refs = max_refs_of(policy);
        // `Workingset`'s aging of a stale active list (`lookups`) is no
        // other policy's: LIRS demotes its LIR set only to refill the HIR
        // set, LRU drains it.
        self.stale = false;
        if self.lirs {
            // A shard's worth back (weighted, what it holds as far as it
            // can tell before its first eviction). Truncated on purpose:
            // the shadows' clock wraps.
            let worth = if self.full_entries == 0 {
                self.entries_when_full()
            } else {
                self.full_entries
            };
            self.lir_stamp = self.shadows.now().wrapping_sub(worth as u32);
            // From no evidence, as `Workingset`'s statistics below.
            self.hir_share = LIRS_HIR;
        } else {
            self.stamps = Vec::new();
            self.stamped = false;
        }
        if policy == Policy::Lru {
            // LRU leaves none, and its evictions do not move the clock
            // the shadows are read by: kept, they would read as evicted
            // just before a return to the others however long LRU ran.
            self.shadows.clear();
        }
        if policy == Policy::Workingset {
            // No other policy keeps the statistics `Workingset` places new
            // entries by. The duel's simulation of it has kept them all
            // along, as shares of its size that hold for a shard's: the
            // shard takes them from there (its lists, shadows and flags
            // stay the other policy's). Learned afresh, a loop interleaved
            // with Zipf requests lost 5 points for the rest of the trace
            // after one change, below both policies run alone (test
            // `adaptive_changing_policy_keeps_what_either_gets`).
            match self.duel.as_ref().and_then(|(duel, _)| duel.learned()) {
                Some(learned) => self.take_learned(learned),
                None => {
                    // While the simulation's statistics are still mostly
                    // their start (see `Lruvec::learned`), from no
                    // evidence. Left at a new shard's "presumed
                    // thrashing", new keys went to the inactive tail, were
                    // gone before their second request, whose refault kept
                    // the share up: a shard whose keys are reused once soon
                    // after their first request hit 49% for twenty shards'
                    // worth of requests after the change, against 74%
                    // (test
                    // `a_shard_giving_up_lirs_places_new_keys_by_fresh_evidence`).
                    self.refault_share = 0.0;
                    self.distant_share = 0.0;
                    self.thrashing = false;
                }
            }
        }
    }

    /// The entries the shard would hold with its capacity full, at the
    /// mean weight of those it holds, and at most `max_entries` (0, not
    /// known, while it holds none): what a weighted cache's duel sizes
    /// its simulations by.
    pub(super) fn entries_when_full(&self) -> usize {
        if self.weight == 0 {
            return 0;
        }
        let n = u128::from(self.len() as u64) * u128::from(self.capacity) / u128::from(self.weight);
        usize::try_from(n).map_or(self.max_entries, |n| n.min(self.max_entries))
    }

    /// The duel samples 1 key in `2^shift` from now (the cache was
    /// resized, or a weighted cache's duel follows its entries: see
    /// [`Duel::resize`], [`Duel::weighted`]).
    pub(in crate::cache) fn set_duel_shift(&mut self, shift: u32) {
        // Without a duel no key is sampled (`samples`): the bound stays 0.
        debug_assert!(self.duel.is_some(), "a sampling rate for no duel");
        self.duel_shift = shift;
        self.sample_below = duel::sample_below(shift);
    }

    /// What the shard has learned, for a warm restart
    /// (`LruCache::save`): `Workingset`'s statistics while it runs that
    /// policy and they are mostly evidence ([`learned`](Self::learned)),
    /// and LIRS's HIR share while it runs LIRS and has evicted.
    pub(in crate::cache) fn learned_state(&self) -> (Option<Learned>, Option<f64>) {
        let ws = (self.policy == Policy::Workingset)
            .then(|| self.learned())
            .flatten();
        // A share that never moved is the start, not learned.
        let hir = (self.lirs && self.evictions > 0).then_some(self.hir_share);
        (ws, hir)
    }

    /// Takes up what a saved cache learned (`LruCache::warm`): under
    /// [`Policy::Adaptive`], the duel's verdict at once (with stamps
    /// under LIRS once its sample has hit); then, unless the shard has
    /// evicted (it learns from its own evictions and refaults, and keeps
    /// what it learned), `Workingset`'s statistics if it runs that policy
    /// and LIRS's HIR share if it runs LIRS (a shard taking up either
    /// later starts them as [`adopt`](Self::adopt) says, not from these).
    pub(in crate::cache) fn resume(&mut self, ws: Option<Learned>, hir: Option<f64>) {
        if let Some((duel, _)) = &self.duel {
            let (policy, hit) = (duel.policy(), duel.has_hit());
            if policy != self.runs() {
                self.adopt(policy);
            }
            if self.lirs && hit && !self.stamped {
                self.keep_stamps();
            }
        }
        if self.evictions > 0 {
            return;
        }
        if let Some(l) = ws.filter(|_| self.policy == Policy::Workingset) {
            self.take_learned(l);
            self.resumed = true;
        }
        if let Some(h) = hir.filter(|_| self.lirs && self.hir_adapts) {
            self.hir_share = h;
        }
    }

    /// The policy the shard runs: its cache's, or under
    /// [`Policy::Adaptive`] the duel's verdict it last took up.
    pub(in crate::cache) fn runs(&self) -> Policy {
        if self.admits {
            Policy::LirsTinyLfu
        } else {
            self.policy
        }
    }
}
