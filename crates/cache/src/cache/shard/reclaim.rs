//! Reclaim (`shrink_lruvec`): activation, the active list's refill of the
//! inactive one, the choice of a victim and its eviction with a shadow.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// `folio_activate`: moves an inactive entry to the active head.
    pub(super) fn activate(&mut self, i: u32) {
        if self.flags(i) & IN_BAND != 0 {
            // Hit on probation: activated by its refault, it would have
            // been resident for that hit.
            self.reach_outcome(true);
        }
        self.unlink(i, INACTIVE);
        // An activation on trial stays on trial: one hit on the inactive
        // list is not the two that pay.
        let f = self.flags(i) & (WORKINGSET | UNHIT | HIT_ONCE);
        self.set_flags(i, f | ACTIVE_FLAG);
        self.link_head(i, ACTIVE);
        if self.policy == Policy::Workingset {
            self.shadows.age_nonresident();
        }
    }

    /// `inactive_is_low`: the inactive list is below 1/(1 + ratio) of the
    /// shard, or under [`Policy::Workingset`] below its adaptive target.
    pub(super) fn inactive_is_low(&self) -> bool {
        let [inactive, active] = [self.lists[INACTIVE].len, self.lists[ACTIVE].len];
        match self.policy {
            Policy::Workingset => {
                active > 0 && real(inactive) < self.inactive_share * real(inactive + active)
            }
            // LIRS's HIR share, at least one entry.
            Policy::Lirs => {
                active > 0 && real(inactive) < (self.hir_share * real(inactive + active)).max(1.0)
            }
            // Only a shard that ran another policy has an active list:
            // drained, as LRU keeps one.
            Policy::Lru => active > 0,
            _ => inactive * INACTIVE_RATIO < active,
        }
    }

    /// `shrink_active_list`: from the active tail, an entry with references
    /// spends one on another turn on the active list, the others are
    /// deactivated to the inactive head; at most `SCAN_BATCH`
    /// deactivations, and each entry looked at once.
    fn shrink_active_list(&mut self) {
        let mut moved = 0;
        for _ in 0..self.lists[ACTIVE].len {
            if self.lists[ACTIVE].tail == NIL || moved == SCAN_BATCH || !self.inactive_is_low() {
                break;
            }
            moved += usize::from(self.scan_active_tail());
        }
    }

    /// One step of `shrink_active_list` at the active tail: an entry with
    /// references spends one on another turn at the active head, one
    /// without is deactivated. Returns whether it was.
    fn scan_active_tail(&mut self) -> bool {
        let t = self.lists[ACTIVE].tail;
        let f = self.flags(t);
        if f & REFS != 0 {
            self.count_reference(t);
            self.set_flags(t, f - 1);
            self.rotate(ACTIVE);
            return false;
        }
        self.unlink(t, ACTIVE);
        if f & IN_BAND != 0 {
            self.reach_outcome(Self::hit_since_refault(f));
        }
        if self.lirs {
            // LIRS's bottom LIR entry, as the clock finds it.
            self.lir_stamp = self.stamp_of(t);
        }
        self.set_flags(t, WORKINGSET | (f & (UNHIT | HIT_ONCE)));
        // Under `Workingset`, to the inactive tail: reclaimed next unless
        // hit first, so that its shadow says the active list was too small
        // (ARC's eviction from T2) rather than the inactive one. At the
        // head (the kernel's place, kept by `ActiveInactive`) it sat out a
        // second probation that new entries needed, and the OLTP trace
        // lost 0.1-0.3 points.
        // Under `Lru` (a shard that ran another policy draining its
        // active list), to the head, as the kernel deactivates: the
        // active tail's entries, oldest first, end up in their order in
        // front of the inactive ones.
        if self.policy == Policy::Workingset {
            self.link_tail(t, INACTIVE);
        } else {
            self.link_head(t, INACTIVE);
        }
        true
    }

    /// Whether the shard wants its lookups' counts now (see
    /// [`lookups`](Self::lookups)): once per window of evictions, under
    /// [`Policy::Workingset`].
    pub(in crate::cache) fn looks_at_lookups(&self) -> bool {
        self.policy == Policy::Workingset && self.evictions >= self.next_look
    }

    /// Takes the shard's lookup counts (hits and misses, as its lock's
    /// stripes count them) and judges the window since the last: an
    /// active list with no room left (see
    /// [`active_has_room`](Self::active_has_room)) in a shard whose
    /// lookups hit less than 1 in [`STALE_BELOW`] is stale, and
    /// [`pick_victim`](Self::pick_victim) ages it (see
    /// [`age_active_list`](Self::age_active_list)) until a window says
    /// otherwise.
    pub(in crate::cache) fn lookups(&mut self, hits: u64, misses: u64) {
        let (h, m) = (
            hits.wrapping_sub(self.seen_lookups.0),
            misses.wrapping_sub(self.seen_lookups.1),
        );
        self.seen_lookups = (hits, misses);
        self.next_look = self.evictions + MIN_WINDOW.max(self.len() as u64);
        self.stale = h.saturating_mul(STALE_BELOW) < h.saturating_add(m) && !self.active_has_room();
    }

    /// `prepare_scan_count`'s `may_deactivate`: the kernel deactivates
    /// from the active list whenever refaults have been activated since
    /// its last reclaim, not only when the inactive list is low, so that
    /// a working set that moved pushes out the one that left. A cache
    /// whose new working set refaults from beyond the reach never
    /// activates it, and sees the move instead in its hit ratio: in a
    /// stale shard (see [`lookups`](Self::lookups)) every [`AGE_EVERY`]
    /// evictions take one step at the active tail
    /// ([`scan_active_tail`](Self::scan_active_tail)).
    ///
    /// A loop twice the cache that starts after other requests (the
    /// loop-after-other-requests test) found the shard's active list full
    /// of the keys those requests had made hot, never requested again:
    /// nothing deactivated them (the inactive list never ran low, as each
    /// miss brought one entry in and took one out), and the loop's
    /// refaults, from about twice the shard's size, were beyond the reach.
    /// Aged, stale keys leave, the active list has room, the loop's
    /// refaults are activated (see
    /// [`active_has_room`](Self::active_has_room)) and hit, and the aging
    /// stops once a window's hits pass the bar. Aging harder cost the P3
    /// trace hits: its long reuse distances look stale to a window
    /// (measured: `docs/cache.md#policy-measurements`).
    fn age_active_list(&mut self, protect: u32) {
        let t = self.lists[ACTIVE].tail;
        if t != NIL && t != protect && self.lists[ACTIVE].len >= 2 {
            self.scan_active_tail();
        }
    }

    /// `shrink_lruvec`'s choice of one victim: refills the inactive list
    /// when it is low, then looks at the inactive tail — activating it if
    /// it was hit there (under batched [`Policy::Lru`], a hit buys a second
    /// chance instead) — until one is due for eviction, skipping
    /// `protect` and pinned entries (each rotated, at most a turn of its
    /// list, then the oldest unpinned entry is taken). Returns it still
    /// linked, or `None` when there is nothing to evict.
    pub(super) fn pick_victim(&mut self, protect: &mut u32) -> Option<u32> {
        // Every pass either returns, spends a reference, activates an
        // entry (which clears its references) or rotates a pinned tail,
        // and nothing adds a reference here: at most one activation and
        // `MAX_REFS` rotations an entry, and a turn of each list's pinned
        // tails. Past that the loop makes no progress, and debug
        // assertions panic rather than spin.
        if self.stale && self.evictions % AGE_EVERY == 0 && !self.active_has_room() {
            self.age_active_list(*protect);
        }
        let mut activated = 0;
        // Pinned tails passed over in each list: past a whole turn of a
        // list, it is not looked at again here.
        let mut pinned = [0usize; 2];
        let most = (3 + usize::from(MAX_REFS)) * self.len() + 8;
        for passes in 1usize.. {
            debug_assert!(
                passes <= most,
                "pick_victim made no progress in {most} passes"
            );
            if self.inactive_is_low() {
                self.shrink_active_list();
            }
            // The inactive tail, else the active one; `protect` is passed
            // over (rotated), and a list holding only it is skipped.
            let mut chosen = None;
            for list in [INACTIVE, ACTIVE] {
                let t = self.lists[list].tail;
                if t == NIL
                    || (t == *protect && self.lists[list].len == 1)
                    || pinned[list] >= self.lists[list].len
                {
                    continue;
                }
                if t == *protect {
                    self.rotate(list);
                }
                chosen = Some((self.lists[list].tail, list));
                break;
            }
            let Some((t, list)) = chosen else {
                // A turn of each list offered only pinned tails, counting
                // rotations, not entries: an unpinned entry may still wait
                // behind them (its reference spent meanwhile).
                return if pinned == [0, 0] {
                    None
                } else {
                    self.oldest_unpinned(*protect)
                };
            };
            if self.is_pinned(t) {
                pinned[list] += 1;
                self.rotate(list);
                continue;
            }
            let f = self.flags(t);
            if list == INACTIVE && f & REFS != 0 && self.policy != Policy::Lru {
                if self.policy == Policy::Workingset && activated >= self.activation_budget() {
                    return Some(t);
                }
                activated += 1;
                self.count_reference(t);
                self.adapt_hir(true);
                self.activate(t);
                continue;
            }
            if f & REFS != 0 && (self.policy != Policy::Lru || self.batching) {
                self.count_reference(t);
                self.set_flags(t, f - 1);
                self.rotate(list);
                continue;
            }
            return Some(t);
        }
        unreachable!("`1..` does not end")
    }

    /// The oldest entry, the inactive list's first, that is neither
    /// pinned nor `protect`: [`pick_victim`](Self::pick_victim)'s last
    /// resort once its turns found only pinned tails.
    fn oldest_unpinned(&self, protect: u32) -> Option<u32> {
        [INACTIVE, ACTIVE].into_iter().find_map(|list| {
            let mut i = self.lists[list].tail;
            (0..self.lists[list].len).find_map(|_| {
                let found = (i != protect && !self.is_pinned(i)).then_some(i);
                i = self.links[i as usize].prev;
                found
            })
        })
    }

    /// Under [`Policy::Lirs`], moves the HIR share by what became of a
    /// resident HIR entry at reclaim: `hit` there (it turns LIR), one entry
    /// more; evicted unhit, 1/[`LIRS_HIR_EVICTIONS_PER_HIT`] of one less.
    /// CLOCK-Pro's adaptation of its cold target (Jiang, Chen and Zhang,
    /// USENIX ATC 2005: a cold page reused in its test period grows it),
    /// counted on resident entries only. Why: a workload that never reuses
    /// its HIR blocks while they are resident (a loop over the cache and a
    /// little more) loses a hit for every entry the HIR set takes from the
    /// LIR set, and one that does (cscope's) needs them.
    pub(super) fn adapt_hir(&mut self, hit: bool) {
        if self.policy != Policy::Lirs || !self.hir_adapts {
            return;
        }
        let entry = 1.0 / real(self.len().max(1));
        self.hir_share = if hit {
            (self.hir_share + entry).min(LIRS_HIR)
        } else {
            (self.hir_share - entry / LIRS_HIR_EVICTIONS_PER_HIT).max(LIRS_HIR_MIN)
        };
    }

    /// Whether an entry activated by a refault (`UNHIT` then) has been
    /// hit since: once (`HIT_ONCE`) or twice (`UNHIT` cleared).
    fn hit_since_refault(f: u8) -> bool {
        f & UNHIT == 0 || f & HIT_ONCE != 0
    }

    /// How many inactive entries one [`pick_victim`](Self::pick_victim)
    /// may activate before it takes the tail even if referenced: as many
    /// as the inactive target holds, and at least `SWAP_CLUSTER_MAX` —
    /// `shrink_inactive_list` too looks at a bounded batch per pass. A loop
    /// larger than the cache lives frozen on the inactive list, every
    /// resident referenced; without a budget, one lost shadow (two-way
    /// buckets do collide) put a key at the inactive head, the next reclaim
    /// activated the whole shard in one pass, and from then on refault
    /// activations churned that shard (`docs/cache.md#policy-measurements`).
    pub(super) fn activation_budget(&self) -> usize {
        SCAN_BATCH.max((self.inactive_share * real(self.len())) as usize)
    }

    /// Evicts victim `t` but keeps its slot (detached: on no list, not
    /// indexed, its weight no longer counted), leaving a shadow
    /// (`workingset_eviction`).
    pub(super) fn evict_detached(&mut self, t: u32) {
        let shadow = self.evict_detached_later(t);
        self.leave_shadow(shadow);
    }

    /// [`evict_detached`](Self::evict_detached) without its shadow, which
    /// the caller leaves with [`leave_shadow`](Self::leave_shadow) once it
    /// has done other work: storing a shadow loads its bucket first (which
    /// way is empty or older), a cache miss the store waits for; started
    /// here as a prefetch, it overlaps that work.
    pub(super) fn evict_detached_later(&mut self, t: u32) -> Option<(u32, u8, u32)> {
        let (hash, f) = (self.links[t as usize].hash, self.flags(t));
        if f & (IN_BAND | ACTIVE_FLAG) == IN_BAND | ACTIVE_FLAG {
            // Evicted from the active list (the inactive one was empty).
            self.reach_outcome(Self::hit_since_refault(f));
        }
        self.detach(t);
        self.evictions += 1;
        self.fill = false;
        if self.weighted && self.evictions % FOLLOW_ENTRIES_EVERY == 1 {
            self.follow_entries();
        }
        // LIRS's stack keeps an entry's last access: counted from its
        // eviction, a loop's keys, which wait on the inactive list before
        // they go, passed for more recent than the oldest LIR entry and
        // churned the loop as under LRU (docs/cache.md).
        let at = if self.lirs { self.stamp_of(t) } else { 0 };
        matches!(self.policy, Policy::Workingset | Policy::Lirs).then(|| {
            self.shadows.prefetch(hash);
            (hash, f, at)
        })
    }

    /// A weighted shard, full (it is evicting): takes its length as the
    /// entries it holds ([`full_entries`](Self::full_entries)), and
    /// LIRS's stamps to that scale once it has moved a whole power of
    /// two past the stamps' scale, or two (a length on the edge of one
    /// would otherwise restamp every entry at each look). Why: scaled to
    /// `max_entries`, which a weighted cache's capacity sets (bytes, say),
    /// a stamp's unit spanned many times the shard, and LIRS saw every
    /// entry as used at once.
    #[cold]
    pub(super) fn follow_entries(&mut self) {
        let len = self.len().max(1);
        self.full_entries = len;
        let shift = Self::stamp_shift_for(len);
        let clear = Self::stamp_shift_for(len - len / 4) == shift
            && Self::stamp_shift_for(len + len / 4) == shift;
        if shift != self.stamp_shift && (clear || shift.abs_diff(self.stamp_shift) > 1) {
            self.restamp(len);
        }
    }

    /// Leaves the shadow of a victim that
    /// [`evict_detached_later`](Self::evict_detached_later) detached.
    pub(super) fn leave_shadow(&mut self, shadow: Option<(u32, u8, u32)>) {
        if let Some((hash, f, at)) = shadow {
            self.shadows.fit(self.len());
            // Under LIRS a resident HIR entry evicted unhit failed as a
            // `Workingset` retry does (LIRS places none on trial): a shard
            // taking `Workingset` up from LIRS on a loop otherwise read
            // each refault as a first one and churned the LIR set it
            // inherited (docs/cache.md).
            let unhit_hir = self.lirs && f & (ACTIVE_FLAG | REFS) == 0;
            let (ws, failed) = (f & WORKINGSET != 0, f & UNHIT != 0 || unhit_hir);
            if self.lirs {
                self.shadows.eviction_at(hash, ws, failed, at);
                self.age_stamps();
            } else {
                self.shadows.eviction(hash, ws, failed);
            }
        }
    }

    /// Under [`Policy::Lirs`], victim `t` of [`pick_victim`](Self::pick_victim)
    /// is about to be evicted: an inactive one leaves unhit (see
    /// [`adapt_hir`](Self::adapt_hir)). Not for a victim that stays (a
    /// new key refused admission).
    pub(super) fn note_victim(&mut self, t: u32) {
        if self.list_of(t) == INACTIVE {
            self.adapt_hir(false);
        }
    }

    /// Evicts into `out` while the shard is over its capacity with
    /// `weight` and `entries` more, skipping `protect`; at most one
    /// eviction an entry it holds (past that, debug assertions fail a
    /// reclaim that makes no progress rather than let it spin).
    pub(super) fn evict_while_over(
        &mut self,
        weight: u64,
        entries: usize,
        protect: &mut u32,
        out: &mut Evicted<K, V>,
    ) {
        for _ in 0..=self.len() {
            if !(self.over(weight, entries) && self.evict_one(protect, out)) {
                return;
            }
        }
        debug_assert!(false, "evicted more entries than the shard held");
    }

    /// Evicts one entry (see [`pick_victim`](Self::pick_victim)) into
    /// `out`; false when there is nothing to evict.
    pub(super) fn evict_one(&mut self, protect: &mut u32, out: &mut Evicted<K, V>) -> bool {
        let Some(t) = self.pick_victim(protect) else {
            return false;
        };
        self.note_victim(t);
        let cause = self.cause(t);
        self.evict_detached(t);
        let n = self.free_slot(t, protect);
        out.push((n.key, n.value, cause));
        true
    }
}
