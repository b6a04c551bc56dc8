//! Where a new entry starts, and how refaults size the inactive list
//! (`workingset_refault`, and ARC's adaptation).

use super::*;

impl<K, V> Lruvec<K, V> {
    /// `workingset_refault`: where a new entry of `hash` starts. With no
    /// shadow, on the inactive list (at its tail once misses mostly refault:
    /// see below). With one, the refault distance says
    /// how much larger the cache would have had to be to keep the entry,
    /// and the rule depends on whether the shard is thrashing
    /// ([`note_miss`](Self::note_miss)).
    ///
    /// Not thrashing, ARC's rule: every refault within the shard's size
    /// (within the learned reach, which starts at twice that: see
    /// [`reach_outcome`](Self::reach_outcome) and [`REACH_START`]) is
    /// activated, as ARC moves every ghost hit to T2, and the
    /// adaptive inactive target (ARC's `p`, [`adapt`](Self::adapt)) keeps
    /// probation from starving. The kernel's stricter test alone (below)
    /// left the ARC paper's P3 trace under ARC. An entry that had been
    /// active (`PG_workingset`, ARC's B2) is taken back from twice as far
    /// (twice the reach, at most twice the shard), as far as its shadow
    /// can survive. Measured: `docs/cache.md#policy-measurements`.
    ///
    /// While the active list holds under [`ACTIVE_ROOM`] of the shard,
    /// every refault is activated, whatever its distance (see
    /// [`active_has_room`](Self::active_has_room)).
    ///
    /// Thrashing — most misses refault, as every miss of a loop larger
    /// than the cache does — the kernel's test: a refault distance within
    /// the active list means the entry would have stayed resident had the
    /// inactive list been that much larger, and it is activated
    /// (`workingset_test_recent`). Under ARC's rule such a loop gets no
    /// hits at all (ARC's own result on it).
    ///
    /// A refault too distant to activate starts over at the inactive head
    /// if the entry had been in the working set, or while most misses are
    /// new keys (below [`TAIL_ABOVE`]), as ARC starts a key it no longer
    /// remembers at T1's head. Once they mostly refault, thrashing or not
    /// yet, one that never was in the working set goes to the inactive
    /// tail, as `lru_deactivate_file` places a folio that will not be
    /// reused: it is reclaimed first, and the entries being hit stay. The
    /// tail is what keeps a loop larger than the cache resident while the
    /// shard decides it thrashes; taken while misses were mostly new keys,
    /// it cost the ARC traces hits. A miss with no shadow goes there too
    /// once misses mostly refault: it is most likely a refault whose shadow
    /// a collision took. "Mostly" must hold since the start too (refaults
    /// at least half the evictions): the share alone starts at 1, and a
    /// new cache put its first new keys behind its old ones
    /// (`weigher_bounds_total_weight` caught it).
    ///
    /// There an activation must also pay: an entry activated by a refault
    /// and evicted without two hits since ([`Lruvec::hit_flags`]) leaves a
    /// shadow marked failed, and its next refault starts on the inactive
    /// list whatever its distance, to be activated by a hit there. Without
    /// this a loop larger than the cache with 0.1% to 1% of other requests
    /// mixed in lost most of its hits: the loop's keys, activated by
    /// refaults, were evicted just before their turn came and refaulted at
    /// a short distance, activated again — LRU's behaviour on a loop,
    /// sustained by the refaults themselves.
    ///
    /// That retry is marked too, so a key that keeps failing stays on
    /// probation until it pays, and its failed refaults do not move the
    /// inactive target (ARC's adaptation read them as "probation too
    /// small" and grew it, which fed the loop's churn). It applies only to
    /// thrashing shards: elsewhere, never forgiving stuck keys of middling
    /// heat on probation.
    ///
    /// A distant refault of an entry never active, and a miss with no
    /// shadow, also go to the inactive tail, whatever the refault share,
    /// while most of the shard's refaults are too distant to activate
    /// ([`DISTANT_ABOVE`]): a working set beyond the reach of the shadows,
    /// such as a loop three times the cache, whose misses mostly find no
    /// shadow.
    pub(super) fn workingset_refault(&mut self, hash: u32) -> (Place, bool) {
        let shadow = self.shadows.refault(hash);
        self.note_miss(shadow.is_some());
        let Some((distance, workingset, failed)) = shadow else {
            if self.fills() {
                return (Place::Fill, false);
            }
            // Mostly refaults by the recent share and by the count since
            // the start: the share starts at 1 (presumed thrashing), which
            // would put a new cache's first new keys behind its old ones.
            let lost = self.misses_count()
                && ((self.refault_share >= TAIL_ABOVE
                    && self.refaults.saturating_mul(2) >= self.evictions)
                    || self.beyond_reach());
            return (
                if lost {
                    Place::InactiveTail
                } else {
                    Place::Inactive
                },
                false,
            );
        };
        self.refaults += 1;
        // A thrashing shard's failed refaults are its loop going round:
        // they say nothing of how large probation should be.
        if !(failed && self.thrashing) {
            self.adapt(distance, workingset);
        }
        let len = real(self.len());
        let d = real(distance);
        // An entry that had been active reaches twice as far, within the
        // band's top.
        let (low, reach) = if workingset {
            (2.0 * REACH_MIN, (2.0 * self.reach).min(REACH_MAX))
        } else {
            (REACH_MIN, self.reach)
        };
        let in_band = !self.thrashing && d > low * len && d <= REACH_MAX * len;
        let recent = if self.thrashing {
            !failed && distance <= self.lists[ACTIVE].len
        } else {
            d <= reach * len || self.active_has_room()
        };
        self.note_refault(!recent);
        let place = if recent {
            self.activations += 1;
            self.shadows.age_nonresident();
            Place::Active
        } else if failed && self.thrashing {
            Place::Retry
        } else if workingset || (self.refault_share < TAIL_ABOVE && !self.beyond_reach()) {
            Place::Inactive
        } else {
            Place::InactiveTail
        };
        (place, in_band)
    }

    /// [`Policy::Lirs`]'s `workingset_refault`: where a new entry of
    /// `hash` starts. LIR (active) while the LIR set has room, as LIRS
    /// makes blocks LIR until its LIR set is full; then LIR if its shadow
    /// says it was used more recently than the LIR entry last demoted was
    /// (its reuse distance is below the oldest LIR entry's recency), else
    /// HIR (the inactive head). Evictions tick the clock; activations do
    /// not, so distances count misses, as LIRS's recency counts blocks.
    pub(super) fn lirs_refault(&mut self, hash: u32) -> Place {
        let shadow = self.shadows.refault(hash);
        self.refaults += u64::from(shadow.is_some());
        let place = self.lirs_place(shadow.map(|(distance, ..)| distance));
        self.activations += u64::from(shadow.is_some() && place == Place::Fill);
        place
    }

    /// Where [`lirs_refault`](Self::lirs_refault) places a key whose
    /// shadow is `distance` evictions old (`None`: no shadow). A weighted
    /// shard's LIR set takes keys by room only while the shard fills (it
    /// has not evicted since it was made or cleared); after that, by
    /// their distance alone. Why: weights that vary leave a full shard
    /// more than its HIR share free after an eviction (the victims that
    /// made room for a heavy key weighed more than it), and each cold key
    /// that came next went LIR, evicting LIR entries (shards of 50
    /// entries weighing 1-16 KiB replayed `ps` no better than LRU:
    /// docs/cache.md, "Weighted LIRS in small shards").
    pub(super) fn lirs_place(&self, distance: Option<usize>) -> Place {
        if (self.active_below(1.0 - LIRS_HIR) && (self.fill || !self.weighted))
            || distance.is_some_and(|d| d < self.lir_reach() as usize)
        {
            Place::Fill
        } else {
            Place::Inactive
        }
    }

    /// How recently a refault's key must have been used to be LIR: more
    /// recently than the LIR entry last demoted was (its age now, not at
    /// its demotion: frozen at the demotion, a shard whose refaults
    /// stopped qualifying never demoted again, and kept its old LIR set
    /// through a loop over new keys, `a_lirs_shard_takes_up_a_new_loop`).
    pub(super) fn lir_reach(&self) -> u32 {
        self.shadows.now().wrapping_sub(self.lir_stamp)
    }

    /// Whether a new key (no shadow) goes on the active list: while the
    /// shard fills (it has not evicted since it was made or cleared), up
    /// to [`FILL_ACTIVE`] of its entries, as LIRS makes every block LIR until its LIR set is full
    /// and quick_cache admits to its hot set until it is. A working set
    /// whose reuse comes from further back than the shadows reach (a loop
    /// over several times the cache) then keeps the entries it started
    /// with, to be hit each time round, where a shard filling probation
    /// first cycled them all through it unhit.
    pub(super) fn fills(&self) -> bool {
        // Whole entries: with the rest on probation at least the inactive
        // target's starting share, the first eviction refills nothing.
        self.fill && self.active_below(FILL_ACTIVE)
    }

    /// Whether one more active entry keeps the active list within `share`
    /// of the shard, by entries and by weight.
    fn active_below(&self, share: f64) -> bool {
        // A whole count is at most `x` exactly when it is at most `x`'s
        // floor: compared unfloored (`floor` is a call on x86-64's
        // baseline, on every insertion).
        real(self.lists[ACTIVE].len + 1) <= share * real(self.max_entries)
            && (self.weight as f64) < share * self.capacity as f64
    }

    /// Counts a refault in the distant share (see [`DISTANT_ABOVE`]).
    pub(super) fn note_refault(&mut self, distant: bool) {
        self.distant_share = moving_average(self.distant_share, distant, DISTANT_WINDOW);
    }

    /// Whether most of the shard's recent refaults were too distant to
    /// activate (see [`DISTANT_ABOVE`]): its working set is beyond the
    /// reach of its shadows.
    pub(super) fn beyond_reach(&self) -> bool {
        self.distant_share >= DISTANT_ABOVE
    }

    /// Whether the active list holds less than [`ACTIVE_ROOM`] of the
    /// shard: then, not thrashing, any refault its shadow remembers is
    /// activated whatever its distance, since activating it demotes
    /// nothing (the inactive list is over its largest target, and takes
    /// the entry's place). The active list is that short only where
    /// activations have not been paying their way in: a shard starting
    /// up, or one that a loop larger than its reach cycles as a FIFO.
    ///
    /// Such a loop refaults from about twice the shard's size, at the
    /// edge of the reach and of its shadows' reach, and a shard whose
    /// first refaults missed the reach never built an active list: every
    /// entry went through the inactive list and out unhit. With this room
    /// it does, and a cache filling mid-workload keeps its early refaults
    /// (measured: `docs/cache.md#policy-measurements`).
    pub(super) fn active_has_room(&self) -> bool {
        real(self.lists[ACTIVE].len) < ACTIVE_ROOM * real(self.len())
    }

    /// What an entry placed by a refault in the reach's band
    /// ([`IN_BAND`]) says, once: `paid` if it was hit — at least once while
    /// activated, or on probation (reclaim then activates it: activated at
    /// once, it would have been resident for that hit) — and not if it
    /// was activated and left the active list unhit. The reach moves by a
    /// step toward activating such refaults or away from it. An entry left
    /// on probation and evicted unhit says nothing: it had a shorter
    /// chance than an activated one, and counted it pulled the reach down
    /// on P3 from any start. Refaults of entries that had been active,
    /// within twice the reach, are in the band from the shard's size on
    /// and count alike.
    ///
    /// ARC activates every refault its ghost lists remember, the kernel
    /// (`workingset_test_recent`) every one within the workingset's size;
    /// how far back activation pays depends on the workload. Under Zipf's
    /// independent requests a key refaulting from near the edge of the
    /// cache has about the heat of the one its activation demotes, and
    /// activating it churns; no fixed reach suits both Zipf and the P3
    /// trace (measured: `docs/cache.md#policy-measurements`).
    pub(super) fn reach_outcome(&mut self, paid: bool) {
        let step = REACH_STEP / real(self.len().max(1));
        let reach = if paid {
            self.reach + step
        } else {
            self.reach - step
        };
        self.reach = reach.clamp(REACH_MIN, REACH_MAX);
    }

    /// Counts a miss in the shard's refault share, and moves it into or out
    /// of thrashing across the bounds ([`THRASHING_ABOVE`],
    /// [`THRASHING_BELOW`]). The kernel counts refaults too
    /// (`WORKINGSET_REFAULT`, and `WORKINGSET_RESTORE` for a page that had
    /// been in the working set, whose read `filemap_read_folio` then counts
    /// as a memory stall); a cache sees thrashing in the share. Misses
    /// count once the shard has evicted half its size: by then the first
    /// pass of a loop up to 1.5x the cache has no fresh keys left to count,
    /// and a larger loop that slips out (a shard leaves thrashing after
    /// about 360 fresh misses) comes back once its refaults run (the
    /// loop-after-other-requests test).
    pub(super) fn note_miss(&mut self, refault: bool) {
        if !self.misses_count() {
            return;
        }
        self.refault_share = moving_average(self.refault_share, refault, REFAULT_WINDOW);
        if self.thrashing {
            self.thrashing = self.refault_share >= THRASHING_BELOW;
        } else {
            self.thrashing = self.refault_share > THRASHING_ABOVE;
        }
    }

    /// ARC's adaptation (Megiddo and Modha, FAST 2003) of the inactive
    /// target, driven by the shadows as ARC's is by its ghost lists: a
    /// refault within the shard's size of an entry evicted from probation
    /// (no `PG_workingset`: ARC's B1) says the inactive list was too small,
    /// one of an entry the active list had demoted (B2) that the active
    /// list was; each moves the target by one entry, or by the ratio of
    /// the other kind's shadows to its own when that is larger, as ARC's
    /// `p` moves. A fixed share suits one workload only (docs/cache.md,
    /// `Lruvec::adapt`); the target finds each its own.
    pub(super) fn adapt(&mut self, distance: usize, workingset: bool) {
        let entries = self.len().max(1);
        if distance > entries {
            return;
        }
        let (demoted, probation) = self.shadows.counts();
        let (mine, other) = if workingset {
            (demoted, probation)
        } else {
            (probation, demoted)
        };
        let step = real((other / mine.max(1)).max(1)) / real(entries);
        let share = if workingset {
            self.inactive_share - step
        } else {
            self.inactive_share + step
        };
        self.inactive_share = share.clamp(INACTIVE_MIN, INACTIVE_MAX);
    }
}

/// What [`Policy::Workingset`] has learned of a workload, in shares and
/// multiples of a shard's size, so that it carries from the duel's
/// simulation of it to a shard taking it up ([`Lruvec::learned`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::cache) struct Learned {
    pub(super) inactive_share: f64,
    pub(super) reach: f64,
    pub(super) refault_share: f32,
    pub(super) distant_share: f32,
    pub(super) thrashing: bool,
}

impl<K, V> Lruvec<K, V> {
    /// What the shard has learned running [`Policy::Workingset`]: its
    /// inactive target, its reach, its refault and distant shares and
    /// whether it thrashes; `None` until that is mostly evidence (or
    /// taken from a saved cache, [`resume`](Self::resume)): misses
    /// count once it has evicted half its size
    /// ([`note_miss`](Self::note_miss)), and the shares start at
    /// "presumed thrashing", so a [`REFAULT_WINDOW`] of counted misses
    /// more (the start's weight then below 37%).
    pub(in crate::cache) fn learned(&self) -> Option<Learned> {
        let counted = self.evictions.saturating_sub(self.len() as u64 / 2);
        (self.resumed || counted >= REFAULT_WINDOW as u64).then_some(Learned {
            inactive_share: self.inactive_share,
            reach: self.reach,
            refault_share: self.refault_share,
            distant_share: self.distant_share,
            thrashing: self.thrashing,
        })
    }

    /// Starts from what the duel's simulation of `Workingset` learned, or
    /// a saved cache's shards (`LruCache::warm`).
    pub(super) fn take_learned(&mut self, learned: Learned) {
        let Learned {
            inactive_share,
            reach,
            refault_share,
            distant_share,
            thrashing,
        } = learned;
        self.inactive_share = inactive_share;
        self.reach = reach;
        self.refault_share = refault_share;
        self.distant_share = distant_share;
        self.thrashing = thrashing;
    }
}

impl Learned {
    /// The mean of `all` (shares of a shard's size, so shards of any size
    /// average), thrashing if most were; `None` if `all` is empty.
    pub(in crate::cache) fn mean(all: &[Learned]) -> Option<Learned> {
        let n = all.len();
        let mean = |f: fn(&Learned) -> f64| all.iter().map(f).sum::<f64>() / n as f64;
        (n > 0).then(|| Learned {
            inactive_share: mean(|l| l.inactive_share),
            reach: mean(|l| l.reach),
            refault_share: mean(|l| f64::from(l.refault_share)) as f32,
            distant_share: mean(|l| f64::from(l.distant_share)) as f32,
            thrashing: 2 * all.iter().filter(|l| l.thrashing).count() > n,
        })
    }

    /// Writes the statistics into `out` (little-endian: the inactive
    /// share and the reach as `f64`, the refault and distant shares as
    /// `f32`), for `PolicyState`'s bytes; returns whether it thrashes.
    pub(in crate::cache) fn encode(&self, out: &mut [u8; LEARNED_BYTES]) -> bool {
        out[..8].copy_from_slice(&self.inactive_share.to_le_bytes());
        out[8..16].copy_from_slice(&self.reach.to_le_bytes());
        out[16..20].copy_from_slice(&self.refault_share.to_le_bytes());
        out[20..].copy_from_slice(&self.distant_share.to_le_bytes());
        self.thrashing
    }

    /// The statistics [`encode`](Self::encode) wrote, each brought
    /// within the bounds a shard keeps it in; `None` if one is not
    /// finite.
    pub(in crate::cache) fn decode(b: &[u8; LEARNED_BYTES], thrashing: bool) -> Option<Learned> {
        let f64_at = |i: usize| f64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let f32_at = |i: usize| f32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let (inactive_share, reach) = (f64_at(0), f64_at(8));
        let (refault_share, distant_share) = (f32_at(16), f32_at(20));
        let finite = inactive_share.is_finite()
            && reach.is_finite()
            && refault_share.is_finite()
            && distant_share.is_finite();
        finite.then(|| Learned {
            inactive_share: inactive_share.clamp(INACTIVE_MIN, INACTIVE_MAX),
            reach: reach.clamp(REACH_MIN, REACH_MAX),
            refault_share: refault_share.clamp(0.0, 1.0),
            distant_share: distant_share.clamp(0.0, 1.0),
            thrashing,
        })
    }
}

/// LIRS's HIR share `h` (a saved cache's), within the bounds a shard
/// keeps it in; `None` if it is not finite.
pub(in crate::cache) fn hir_share_within(h: f64) -> Option<f64> {
    h.is_finite().then(|| h.clamp(LIRS_HIR_MIN, LIRS_HIR))
}

/// The length of [`Learned::encode`]'s bytes.
pub(in crate::cache) const LEARNED_BYTES: usize = 24;

/// `share` moved one step of an exponential moving average over `window`
/// events towards 1 if `yes`, else towards 0. Decaying towards 0, a share
/// would turn subnormal, whose arithmetic costs a hundred cycles or more
/// on x86: it is flushed to zero below [`REFAULT_FLOOR`], far below any
/// bound a share is tested with.
fn moving_average(share: f32, yes: bool, window: f32) -> f32 {
    let x = if yes { 1.0 } else { 0.0 };
    let share = share + (x - share) / window;
    if share < REFAULT_FLOOR { 0.0 } else { share }
}
