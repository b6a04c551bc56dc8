//! Refault detection after `mm/workingset.c`: an evicted entry leaves a
//! shadow — its key's hash and the shard's eviction clock — so that a
//! miss on that key soon after can tell how long the entry had been gone.
//!
//! The clock (`nonresident_age`) advances on every eviction and every
//! activation (`workingset_age_nonresident`). The refault distance, the
//! clock now less the clock at eviction, is how many more entries the
//! cache would have needed to keep it; if the active list is at least that
//! large, the entry would have stayed resident had the inactive list been
//! allowed to grow into the active one, so it is activated at once
//! (`workingset_test_recent`).

use hashbrown::HashTable;

/// One shadow: the low 32 bits of a key's hash (a collision only
/// activates an entry early: shadows are hints, as the kernel's are) and
/// the eviction clock when it was evicted.
#[derive(Clone, Copy, Debug)]
struct Shadow {
    hash: u32,
    age: u32,
    /// Which eviction left it (low 32 bits; its ring slot is
    /// `seq % max`).
    seq: u32,
}

/// A shard's shadows, bounded FIFO: the oldest goes first (the kernel's
/// shadow shrinker, `count_shadow_nodes`, keeps them in proportion to the
/// cache; here at most `max`). Older shadows could never pass the test
/// anyway: their distance exceeds the largest possible active list.
#[derive(Debug)]
pub(super) struct Shadows {
    table: HashTable<Shadow>,
    /// Hashes in eviction order: eviction `seq` in slot `seq % max`.
    ring: Vec<u32>,
    /// Evictions so far.
    seq: u64,
    max: usize,
    /// `lruvec->nonresident_age`.
    pub(super) age: u32,
}

impl Shadows {
    /// Shadows for a shard of `max_entries` entries: at most half as many
    /// (the active list, the refault test's bound, is kept at most half
    /// the shard), and at least one.
    pub(super) fn new(max_entries: usize) -> Self {
        Self {
            table: HashTable::new(),
            ring: Vec::new(),
            seq: 0,
            max: (max_entries / 2).max(1),
            age: 0,
        }
    }

    fn short(hash: u64) -> u32 {
        // hashbrown uses the top 7 bits for control bytes and the low bits
        // for buckets; the low 32 bits feed our own table through
        // `rehash`, which needs only a well-mixed value.
        hash as u32
    }

    fn rehash(s: &u32) -> u64 {
        u64::from(*s).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// `workingset_age_nonresident`: an eviction or activation happened.
    pub(super) fn age_nonresident(&mut self) {
        self.age = self.age.wrapping_add(1);
    }

    /// `workingset_eviction`: remembers that `hash`'s entry was evicted
    /// now, forgetting the oldest shadow past the bound.
    pub(super) fn eviction(&mut self, hash: u64) {
        let h = Self::short(hash);
        let (age, seq) = (self.age, self.seq);
        self.age_nonresident();
        self.seq = seq + 1;
        if self.ring.len() < self.max {
            self.ring.push(h);
        } else {
            // The slot's shadow is `max` evictions old: forget it, unless
            // its key was evicted again since (a newer shadow).
            let slot = (seq % self.max as u64) as usize;
            let old = std::mem::replace(&mut self.ring[slot], h);
            let old_seq = (seq - self.max as u64) as u32;
            if let Ok(e) = self
                .table
                .find_entry(Self::rehash(&old), |s| s.hash == old && s.seq == old_seq)
            {
                e.remove();
            }
        }
        let shadow = Shadow {
            hash: h,
            age,
            seq: seq as u32,
        };
        match self.table.find_mut(Self::rehash(&h), |s| s.hash == h) {
            Some(s) => *s = shadow,
            None => {
                self.table
                    .insert_unique(Self::rehash(&h), shadow, |s| Self::rehash(&s.hash));
            }
        }
    }

    /// `workingset_refault` and `workingset_test_recent`: takes `hash`'s
    /// shadow, if any, and says whether its refault distance is within
    /// `active` (`Some(true)`: activate), beyond it (`Some(false)`), or
    /// there was no shadow (`None`).
    pub(super) fn refault(&mut self, hash: u64, active: usize) -> Option<bool> {
        let h = Self::short(hash);
        let shadow = self
            .table
            .find_entry(Self::rehash(&h), |s| s.hash == h)
            .ok()?
            .remove()
            .0;
        let distance = self.age.wrapping_sub(shadow.age);
        Some(distance as usize <= active)
    }

    /// Shadows held.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Forgets every shadow (the clock keeps running).
    pub(super) fn clear(&mut self) {
        self.table.clear();
        self.ring.clear();
        self.seq = 0;
    }

    pub(super) fn check(&self) -> Result<(), String> {
        if self.table.len() > self.max || self.ring.len() > self.max {
            return Err(format!(
                "{} shadows ({} in the ring) over the bound {}",
                self.table.len(),
                self.ring.len(),
                self.max
            ));
        }
        Ok(())
    }
}
