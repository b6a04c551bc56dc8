//! Refault detection after `mm/workingset.c`: an evicted entry leaves a
//! shadow — a tag of its key's hash and the shard's eviction clock — so
//! that a miss on that key soon after can tell how long the entry had been
//! gone.
//!
//! The clock (`nonresident_age`) advances on every eviction and every
//! activation (`workingset_age_nonresident`). The refault distance, the
//! clock now less the clock at eviction, is how many more entries the
//! cache would have needed to keep it; if the active list is at least that
//! large, the entry would have stayed resident had the inactive list been
//! allowed to grow into the active one, so it is activated at once
//! (`workingset_test_recent`).
//!
//! A shadow also keeps the entry's `PG_workingset` bit (the kernel packs
//! it into the shadow too, `pack_shadow`): whether the entry had been on
//! the active list. A refault too distant to activate is then placed by
//! that bit: one that had been in the working set starts over at the
//! inactive head; one that never had is thrashing through the inactive
//! list (a loop larger than the cache) and goes to its tail, where it is
//! reclaimed first instead of pushing out entries that are being hit.
//!
//! Shadows live in a table of twice the shard's entries (8 bytes a slot)
//! in buckets of two slots sharing a cache line, allocated at the first
//! eviction: one line touched per eviction and per miss. A new shadow
//! takes an empty slot of its bucket, else the older shadow's, as the
//! kernel's shadow shrinker drops old ones (`count_shadow_nodes`): shadows
//! are hints, and a lost or mistaken one only changes which list an entry
//! starts on.

/// Slots per bucket: a shadow goes to the emptier or older of two
/// neighbouring slots (one cache line), so two recent shadows that hash
/// alike both survive. Direct-mapped (one way) lost enough shadows that a
/// loop larger than the cache fell back to missing on every request in
/// about one run in sixteen.
const WAYS: usize = 2;

/// A shard's shadows.
#[derive(Debug)]
pub(super) struct Shadows {
    /// `(tag | workingset << 1) << 32 | age`; 0 is empty (tags have their
    /// low bit set and bit 1 clear).
    slots: Vec<u64>,
    /// Slots in use.
    len: usize,
    size: usize,
    /// `lruvec->nonresident_age`.
    age: u32,
}

impl Shadows {
    /// Shadows for a shard of `max_entries` entries: twice as many slots,
    /// so that collisions lose few of the shadows recent enough to pass
    /// the test (half as many lost 0.3-1 point of hit ratio on the ARC
    /// traces).
    pub(super) fn new(max_entries: usize) -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
            size: (max_entries.min(usize::MAX / 4) * 2).max(WAYS),
            age: 0,
        }
    }

    /// The slot and tag of `hash`: bits the shard choice (40..) and the
    /// index (low bits) use little of.
    fn place(&self, hash: u64) -> (usize, u64) {
        let buckets = self.size as u64 / WAYS as u64;
        let bucket = ((u64::from((hash >> 8) as u32) * buckets) >> 32) as usize;
        (bucket * WAYS, ((hash >> 32) & !2) | 1)
    }

    /// Loads `hash`'s slot ahead of [`refault`](Self::refault), so that
    /// its cache miss overlaps the eviction that comes first (a plain load
    /// the CPU runs out of order: the crate has no `unsafe` for a
    /// prefetch instruction).
    pub(super) fn prefetch(&self, hash: u64) {
        if !self.slots.is_empty() {
            std::hint::black_box(self.slots[self.place(hash).0]);
        }
    }

    /// `workingset_age_nonresident`: an eviction or activation happened.
    pub(super) fn age_nonresident(&mut self) {
        self.age = self.age.wrapping_add(1);
    }

    /// `workingset_eviction`: remembers that `hash`'s entry was evicted
    /// now, and whether it had been in the working set (`PG_workingset`).
    pub(super) fn eviction(&mut self, hash: u64, workingset: bool) {
        if self.slots.is_empty() {
            self.slots = vec![0; self.size];
        }
        let (first, tag) = self.place(hash);
        let age = self.age;
        let bucket = &mut self.slots[first..first + WAYS];
        // An empty way, else the oldest shadow's (the one nearest to being
        // useless: its distance is the largest).
        let way = (0..WAYS)
            .max_by_key(|&w| match bucket[w] {
                0 => u32::MAX,
                s => age.wrapping_sub(s as u32),
            })
            .unwrap_or(0);
        if bucket[way] == 0 {
            self.len += 1;
        }
        bucket[way] = (tag | u64::from(workingset) << 1) << 32 | u64::from(age);
        self.age_nonresident();
    }

    /// `workingset_refault`'s first half (`unpack_shadow` and the
    /// distance): takes `hash`'s shadow, if any, and returns its refault
    /// distance and its `PG_workingset` bit; the caller tests the distance
    /// (`workingset_test_recent`).
    pub(super) fn refault(&mut self, hash: u64) -> Option<(usize, bool)> {
        if self.len == 0 {
            return None;
        }
        let (first, tag) = self.place(hash);
        let s = self.slots[first..first + WAYS]
            .iter_mut()
            .find(|s| **s != 0 && (**s >> 32) & !2 == tag)?;
        let age = *s as u32;
        let ws = (*s >> 33) & 1 != 0;
        *s = 0;
        self.len -= 1;
        Some((self.age.wrapping_sub(age) as usize, ws))
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
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let used = self.slots.iter().filter(|s| **s != 0).count();
        if used != self.len || self.slots.len() > self.size {
            return Err(format!(
                "{used} shadow slots used, {} counted, {} slots of {}",
                self.len,
                self.slots.len(),
                self.size
            ));
        }
        Ok(())
    }
}
