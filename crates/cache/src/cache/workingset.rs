//! Refault detection after `mm/workingset.c`: an evicted entry leaves a
//! shadow — a tag of its key's hash and the shard's eviction clock — so
//! that a miss on that key soon after can tell how long the entry had been
//! gone.
//!
//! The clock (`nonresident_age`) advances on every eviction and every
//! activation (`workingset_age_nonresident`). The refault distance, the
//! clock now less the clock at eviction, is how many more entries the
//! cache would have needed to keep it. The kernel's test: if the active
//! list is at least that large, the entry would have stayed resident had
//! the inactive list been allowed to grow into the active one, so it is
//! activated at once (`workingset_test_recent`). A shard applies it while
//! it is thrashing; otherwise it activates every refault within its size,
//! as ARC does its ghost hits (see `Lruvec::workingset_refault`).
//!
//! A shadow also keeps the entry's `PG_workingset` bit (the kernel packs
//! it into the shadow too, `pack_shadow`): whether the entry had been on
//! the active list. A refault too distant to activate is then placed by
//! that bit: one that had been in the working set starts over at the
//! inactive head; one that never had, while most of the shard's misses
//! refault, is thrashing through the inactive list (a loop larger than
//! the cache) and goes to its tail, where it is reclaimed first instead of
//! pushing out entries that are being hit (with misses mostly new keys,
//! it starts at the head too).
//!
//! Shadows live in a table of twice the shard's entries (4 bytes a slot:
//! an 11-bit tag, a failed-activation bit, the `PG_workingset` bit and 19
//! bits of the clock, coarsened by `bucket_order` in shards too large for
//! 19 bits, as the kernel packs its shadows) in buckets of two slots,
//! allocated at the first eviction:
//! one cache line touched per eviction and per miss. A new shadow
//! takes an empty slot of its bucket, else the older shadow's, as the
//! kernel's shadow shrinker drops old ones (`count_shadow_nodes`): shadows
//! are hints, and a lost or mistaken one only changes which list an entry
//! starts on.
//!
//! The kernel keeps a shadow in the page cache's xarray slot its page
//! left, so a refault finds it on the lookup it does anyway. Here that
//! would put shadows in the shard's index: exact shadows need about twice
//! the shard's entries, an index holding twice as many shadows as entries
//! has three times the slots, and an index that size costs what this
//! table costs (measured: `docs/cache.md#policy-measurements`).

/// Slots per bucket: a shadow goes to the emptier or older of two
/// neighbouring slots (one cache line), so two recent shadows that hash
/// alike both survive. Direct-mapped (one way) lost enough shadows that a
/// loop larger than the cache sometimes fell back to missing on every
/// request; four ways (still one line) helped some loops but cost the P3
/// trace and the loop 1.25x the cache
/// (`docs/cache.md#tunables-and-their-measurements`).
const WAYS: usize = 2;

/// Bits of the clock a shadow keeps (`EVICTION_BITS`).
const AGE_BITS: u32 = 19;
const AGE_MASK: u32 = (1 << AGE_BITS) - 1;
const WORKINGSET_BIT: u32 = 1 << AGE_BITS;
/// The entry had been activated by a refault and was evicted without a
/// hit since (see `workingset_refault`).
const FAILED_BIT: u32 = 1 << (AGE_BITS + 1);

/// A shard's shadows.
#[derive(Debug)]
pub(super) struct Shadows {
    /// `tag << 21 | failed << 20 | workingset << 19 | age >> order`; 0 is
    /// empty (tags have their low bit set).
    slots: Vec<u32>,
    /// Slots in use.
    len: usize,
    /// Of them, those with the `PG_workingset` bit.
    workingset: usize,
    size: usize,
    /// The most slots: twice the shard's `max_entries`.
    limit: usize,
    /// `bucket_order`: the clock's low bits a shadow drops, so that the
    /// distances a shard can use fit in `AGE_BITS`.
    order: u32,
    /// `lruvec->nonresident_age`.
    age: u32,
}

// The methods every miss and eviction calls are `#[inline(always)]`: out
// of line, the shadow work done and ignored by active-inactive cost it
// 16-18% of read-through at Zipf 0.9 on one thread, inline 12-15% (the
// in-process A/B of docs/cache.md's "shadows outside the index", two and
// four runs).
impl Shadows {
    /// Shadows for a shard of `max_entries` entries: twice as many slots,
    /// so that collisions lose few of the shadows recent enough to pass
    /// the test (half as many lost hits on the ARC traces).
    pub(super) fn new(max_entries: usize) -> Self {
        let limit = (max_entries.min(usize::MAX / 4) * 2).max(WAYS);
        Self {
            slots: Vec::new(),
            len: 0,
            workingset: 0,
            size: limit,
            limit,
            order: Self::order_for(limit),
            age: 0,
        }
    }

    /// Distances up to the table's size, which is as long as a shadow
    /// lives, must fit (`workingset_init`'s bucket_order).
    fn order_for(size: usize) -> u32 {
        (usize::BITS - size.leading_zeros()).saturating_sub(AGE_BITS)
    }

    /// Sizes the table for a shard of `entries` entries, at its first
    /// eviction and whenever it has grown past half the table: twice the
    /// entries or, for a table that holds shadows, half as large again if
    /// that is more, up to the limit. Sized from `max_entries` alone, a
    /// weighted cache (whose `max_entries` defaults to its capacity in
    /// weight: bytes, say) allocated two slots per unit of weight at its
    /// first eviction — 128 GiB of shadows for a 16 GiB blob cache. A
    /// table that grows starts empty (shadows are hints).
    #[inline(always)]
    pub(super) fn fit(&mut self, entries: usize) {
        let grown = entries.saturating_mul(2) > self.size && self.size < self.limit;
        if !grown && !self.slots.is_empty() {
            return;
        }
        let want = entries.saturating_mul(2).clamp(WAYS, self.limit);
        if self.slots.is_empty() {
            self.size = want;
        } else {
            self.size = want
                .max(self.size.saturating_add(self.size / 2))
                .min(self.limit);
            self.slots = Vec::new();
            self.len = 0;
            self.workingset = 0;
        }
        self.order = Self::order_for(self.size);
    }

    /// A shard's new `max_entries` (`set_capacity`): the limit follows; a
    /// table over the new limit is dropped, to be sized again at the next
    /// eviction (shadows are hints).
    pub(super) fn set_limit(&mut self, max_entries: usize) {
        self.limit = (max_entries.min(usize::MAX / 4) * 2).max(WAYS);
        if self.size > self.limit {
            self.size = self.limit;
            self.slots = Vec::new();
            self.len = 0;
            self.workingset = 0;
            self.order = Self::order_for(self.size);
        }
    }

    /// The slot and tag of an entry's 32-bit hash: the bucket from its high
    /// bits, the tag from its low ones.
    #[inline(always)]
    fn place(&self, hash: u32) -> (usize, u32) {
        let buckets = self.size as u64 / WAYS as u64;
        let bucket = ((u64::from(hash) * buckets) >> 32) as usize;
        (bucket * WAYS, ((hash & 0x3ff) << 1 | 1) << (AGE_BITS + 2))
    }

    /// The clock, as a shadow keeps it.
    #[inline(always)]
    fn stamp(&self) -> u32 {
        (self.age >> self.order) & AGE_MASK
    }

    /// Prefetches `hash`'s bucket, which [`refault`](Self::refault) or
    /// [`eviction`](Self::eviction) will read soon, so that its cache miss
    /// overlaps the work in between.
    #[inline(always)]
    pub(super) fn prefetch(&self, hash: u32) {
        if !self.slots.is_empty() {
            super::prefetch::prefetch_read(&self.slots[self.place(hash).0]);
        }
    }

    /// `workingset_age_nonresident`: an eviction or activation happened.
    #[inline(always)]
    pub(super) fn age_nonresident(&mut self) {
        self.age = self.age.wrapping_add(1);
    }

    /// `workingset_eviction`: remembers that `hash`'s entry was evicted
    /// now, whether it had been in the working set (`PG_workingset`), and
    /// whether it was a refault activation that never paid, or under
    /// LIRS a resident HIR entry never hit (`failed`).
    #[inline(always)]
    pub(super) fn eviction(&mut self, hash: u32, workingset: bool, failed: bool) {
        self.remember(hash, workingset, failed, self.stamp());
    }

    /// The clock (`nonresident_age`), whole.
    #[inline(always)]
    pub(super) fn now(&self) -> u32 {
        self.age
    }

    /// Sets the clock, for tests of what happens far along it.
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(super) fn set_now(&mut self, at: u32) {
        self.age = at;
    }

    /// [`eviction`](Self::eviction), remembering clock `at` (a past one:
    /// `Policy::Lirs` keeps the entry's last access) instead of now; one
    /// older than a shadow can tell is kept as the oldest it can (wrapped,
    /// it read as recent).
    #[inline(always)]
    pub(super) fn eviction_at(&mut self, hash: u32, workingset: bool, failed: bool, at: u32) {
        let oldest = AGE_MASK << self.order;
        let at = self.age.wrapping_sub(self.age.wrapping_sub(at).min(oldest));
        self.remember(hash, workingset, failed, (at >> self.order) & AGE_MASK);
    }

    /// Leaves `hash`'s shadow holding `at`, a clock as a shadow keeps it
    /// ([`stamp`](Self::stamp)), and ticks the clock.
    #[inline(always)]
    fn remember(&mut self, hash: u32, workingset: bool, failed: bool, at: u32) {
        if self.slots.is_empty() {
            self.slots = vec![0; self.size];
        }
        let (first, tag) = self.place(hash);
        let now = self.stamp();
        let bucket = &mut self.slots[first..first + WAYS];
        // An empty way, else the oldest shadow's (the one nearest to being
        // useless: its distance is the largest).
        let way = (0..WAYS)
            .max_by_key(|&w| match bucket[w] {
                0 => u32::MAX,
                s => now.wrapping_sub(s) & AGE_MASK,
            })
            .unwrap_or(0);
        // Counted without branches: whether the way was empty is as
        // random as the key.
        let old = bucket[way];
        self.len += usize::from(old == 0);
        self.workingset =
            self.workingset + usize::from(workingset) - usize::from(old & WORKINGSET_BIT != 0);
        bucket[way] = tag
            | if workingset { WORKINGSET_BIT } else { 0 }
            | if failed { FAILED_BIT } else { 0 }
            | at;
        self.age_nonresident();
    }

    /// The distance of the shadow of `hash`, if one is held, as
    /// [`refault`](Self::refault) would give it, leaving it in place.
    pub(super) fn peek(&self, hash: u32) -> Option<usize> {
        self.slot_of(hash).map(|i| self.distance(self.slots[i]))
    }

    /// The index in `slots` of the shadow of `hash`, if one is held: a
    /// way of its bucket holding its tag.
    fn slot_of(&self, hash: u32) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let (first, tag) = self.place(hash);
        (first..first + WAYS).find(|&i| {
            let s = self.slots[i];
            s != 0 && s & !(FAILED_BIT | WORKINGSET_BIT | AGE_MASK) == tag
        })
    }

    /// How many evictions ago shadow `s` was left, to the table's
    /// granularity.
    fn distance(&self, s: u32) -> usize {
        ((self.stamp().wrapping_sub(s) & AGE_MASK) << self.order) as usize
    }

    pub(super) fn refault(&mut self, hash: u32) -> Option<(usize, bool, bool)> {
        let i = self.slot_of(hash)?;
        let s = std::mem::take(&mut self.slots[i]);
        let ws = s & WORKINGSET_BIT != 0;
        self.len -= 1;
        self.workingset -= usize::from(ws);
        Some((self.distance(s), ws, s & FAILED_BIT != 0))
    }

    /// Shadows held of entries that had been active (`PG_workingset`) and
    /// of the others.
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.workingset, self.len - self.workingset)
    }

    /// Slots allocated.
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(super) fn allocated(&self) -> usize {
        self.slots.len()
    }

    /// Shadows held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Forgets every shadow and frees their table (the clock keeps
    /// running).
    pub(super) fn clear(&mut self) {
        self.slots = Vec::new();
        self.len = 0;
        self.workingset = 0;
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let used = self.slots.iter().filter(|s| **s != 0).count();
        let ws = self
            .slots
            .iter()
            .filter(|s| **s & WORKINGSET_BIT != 0)
            .count();
        if used != self.len || ws != self.workingset || self.slots.len() > self.size {
            return Err(format!(
                "{used} shadow slots used ({ws} of them PG_workingset), {} counted ({}), {} \
                 slots of {}",
                self.len,
                self.workingset,
                self.slots.len(),
                self.size
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
