//! Admission: [`Policy::LirsTinyLfu`]'s sketch counts and refusals
//! (TinyLFU's), and weighted [`Policy::Lirs`]'s decline of a key too
//! heavy for the HIR set.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Counts a reference reclaim found on entry `i` in the sketch, if
    /// one is kept: an entry hit between two of reclaim's looks at it
    /// counts once, as a hit under the read lock writes no sketch.
    pub(super) fn count_reference(&mut self, i: u32) {
        self.count(self.links[i as usize].hash);
    }

    /// Counts the key of short hash `hash` in the sketch, if one is kept
    /// (widened first if the shard has outgrown it).
    pub(super) fn count(&mut self, hash: u32) {
        let (entries, most) = (self.len(), self.max_entries);
        if let Some(s) = &mut self.sketch {
            s.fit(entries, most);
            s.add(hash);
        }
    }

    /// [`Policy::LirsTinyLfu`]'s admission (TinyLFU's): whether a new key
    /// of short hash `hash`, one LIRS would make HIR, loses its place to
    /// victim `t`, having been seen no more often lately than `t`'s key
    /// (ties keep the victim: a loop's keys, alike, do not churn each
    /// other). An expired victim never keeps its place. Read after the
    /// victim is taken, whose reclaim may move the LIR set's reach.
    pub(super) fn refuses(&self, hash: u32, t: u32) -> bool {
        self.sketch.as_ref().is_some_and(|s| {
            self.lirs_place(self.shadows.peek(hash)) == Place::Inactive
                && !self.expired(t)
                && s.estimate(hash) <= s.estimate(self.links[t as usize].hash)
        })
    }

    /// [`Policy::Lirs`] (not `LirsTinyLfu`, whose admission contests new
    /// keys) in a weighted shard that must evict (the caller tests all
    /// three): whether a new key of short hash `hash` and `weight`, one
    /// LIRS would make HIR, weighs more than the free room and the HIR
    /// entries reclaim would evict for it (see
    /// [`hir_weight_below`](Self::hir_weight_below)). Such a key is
    /// declined (see [`decline`](Self::decline)). Why: caching it evicts
    /// LIR entries, which a cold key never does in LIRS; in shards of 50
    /// entries weighing 1-16 KiB cold keys took the LIR set this way, and
    /// LIRS hit little more than LRU (docs/cache.md, "Weighted LIRS in
    /// small shards"). Read before reclaim runs, which may move the LIR
    /// set's reach: a key let in may still be placed HIR.
    #[inline(never)]
    pub(super) fn hir_cannot_hold(&self, hash: u32, weight: u64) -> bool {
        // What the free room leaves to evict (nothing: the entry bound
        // is what the shard is over).
        let need = weight.saturating_sub(self.capacity.saturating_sub(self.weight));
        self.hir_weight_below(need) && self.lirs_place(self.shadows.peek(hash)) == Place::Inactive
    }

    /// Whether the HIR entries reclaim would evict weigh less than `need`
    /// (0: never): counted from the inactive tail, the order reclaim
    /// takes them in, as far as `need`, passing over pinned ones; while
    /// the inactive list is empty, the active tail, which reclaim would
    /// demote and evict. A hit HIR entry counts: reclaim makes it LIR and
    /// demotes the LIR set's last entry in its place, as LIRS does.
    /// An expired entry on the way counts as room enough (reclaim never
    /// keeps one). Counted here rather than kept: a weight kept per list
    /// cost every shard's link and unlink, unweighted ones too. The walk
    /// reads the entries that caching the key would evict, no more.
    pub(super) fn hir_weight_below(&self, need: u64) -> bool {
        let (list, most) = match self.lists[INACTIVE].len {
            0 => (ACTIVE, 1),
            n => (INACTIVE, n),
        };
        let mut t = self.lists[list].tail;
        if t == NIL {
            return false;
        }
        let mut sum = 0;
        for _ in 0..most {
            if self.expired(t) {
                return false;
            }
            if !self.is_pinned(t) {
                sum += self.weight_of(t);
                if sum >= need {
                    return false;
                }
            }
            t = self.links[t as usize].prev;
        }
        true
    }

    /// Declines a new key of short hash `hash` (see
    /// [`hir_cannot_hold`](Self::hir_cannot_hold)) as if it had been
    /// cached as HIR and evicted unhit at once: its shadow, its only one,
    /// holds now, so that a request within the LIR set's reach makes it
    /// LIR, and the clock ticks as at an eviction. The entry goes to
    /// `out`, evicted.
    pub(super) fn decline(
        &mut self,
        hash: u32,
        key: K,
        value: V,
        out: &mut Evicted<K, V>,
    ) -> Inserted<V> {
        // An older shadow of the key goes: two would fill its bucket, and
        // the first found would date from an older decline.
        let _ = self.shadows.refault(hash);
        self.shadows.fit(self.len());
        self.shadows.eviction_at(hash, false, true, self.lirs_now());
        self.age_stamps();
        self.not_admitted += 1;
        out.push((key, value, RemovalCause::Evicted));
        Inserted::Rejected
    }
}
