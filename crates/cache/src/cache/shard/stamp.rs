//! [`Policy::Lirs`]'s stamps: each entry's last access on the eviction
//! clock, rounded to a 64th of the shard, in 16 bits an entry.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// [`Policy::Lirs`]: the clock as stamps keep it, to a 64th of the
    /// shard: a stamp then changes once in that many evictions, not at
    /// every one, so hits of a shard taking inserts write few stamps.
    pub(super) fn lirs_now(&self) -> u32 {
        self.stamp_units() << self.stamp_shift
    }

    /// The clock now in the stamps' units (`2^stamp_shift` evictions).
    pub(super) fn stamp_units(&self) -> u32 {
        self.shadows.now() >> self.stamp_shift
    }

    /// The stamps' unit for a shard of `max_entries` entries: a 64th of
    /// it in evictions, rounded down to a power of two, so that hits of a
    /// shard taking inserts write few stamps; its log at most 16, so that
    /// the units have 16 bits or more (a stamp's 16 bits then wrap where
    /// the units do, and [`STAMP_OLDEST`] units fit the clock).
    pub(super) fn stamp_shift_for(max_entries: usize) -> u32 {
        (usize::BITS - (max_entries / 64).max(1).leading_zeros() - 1).min(16)
    }

    /// The stamps in the unit of a shard of `max_entries` entries (after
    /// `set_capacity`): each entry's age carried over, up to
    /// [`STAMP_OLDEST`] of the new units. Kept in the unit the shard was
    /// built with, a shard grown a thousandfold read ages past a quarter
    /// of it as that old.
    pub(super) fn restamp(&mut self, max_entries: usize) {
        let shift = Self::stamp_shift_for(max_entries);
        if shift == self.stamp_shift {
            return;
        }
        let now = self.lirs_now();
        let ages: Vec<u32> = (0..self.stamps.len() as u32)
            .map(|i| now.wrapping_sub(self.stamp_of(i)))
            .collect();
        self.stamp_shift = shift;
        let units = self.stamp_units();
        for (s, age) in self.stamps.iter().zip(ages) {
            let age = (age >> shift).min(u32::from(STAMP_OLDEST));
            // Truncated on purpose, as `stamp_now`.
            s.store(units.wrapping_sub(age) as u16, Ordering::Relaxed);
        }
        self.stamps_aged = units;
    }

    /// [`lirs_now`](Self::lirs_now) as a stamp keeps it: its units, to 16
    /// bits.
    pub(super) fn stamp_now(&self) -> u16 {
        // Truncated on purpose: `stamp_of` counts back from now.
        self.stamp_units() as u16
    }

    /// [`Policy::Lirs`]: entry `i` is used now. Stored only when the
    /// (rounded) clock has moved since.
    pub(super) fn stamp(&self, i: u32) {
        let now = self.stamp_now();
        let s = &self.stamps[i as usize];
        if s.load(Ordering::Relaxed) != now {
            s.store(now, Ordering::Relaxed);
        }
    }

    /// Entry `i`'s last access ([`Policy::Lirs`]), on the clock as
    /// [`lirs_now`](Self::lirs_now) rounds it: counted back from now by
    /// the stamp's 16 bits (a stamp is 2 bytes an entry, not 4), exact
    /// for an entry used within the last [`STAMP_OLDEST`] units; an older
    /// one reads as that old (see
    /// [`age_stamps`](Self::age_stamps)), as a shadow keeps the oldest age
    /// it can. Now while no stamps are kept (see [`stamped`](Self::stamped)).
    pub(in crate::cache) fn stamp_of(&self, i: u32) -> u32 {
        if self.stamped {
            let units = self.stamp_units();
            let stamp = self.stamps[i as usize].load(Ordering::Relaxed);
            let age = u32::from((units as u16).wrapping_sub(stamp));
            units.wrapping_sub(age) << self.stamp_shift
        } else {
            self.lirs_now()
        }
    }

    /// A key refused admission: a miss all the same, so the clock LIRS's
    /// distances are read by counts it, as an eviction does, and the
    /// stamps age by it (a scan of new keys, each refused, moves the
    /// clock with no eviction at all).
    pub(in crate::cache) fn tick_refused(&mut self) {
        self.shadows.age_nonresident();
        self.age_stamps();
    }

    /// Keeps every stamp within [`STAMP_OLDEST`] of now plus one pass's
    /// interval, so that none wraps its 16 bits (which would read an old
    /// entry as new): once the clock has moved [`STAMP_OLDEST`] units since
    /// the last pass, a stamp older than that is made that old. Called at
    /// every tick of the clock under LIRS (an eviction, or a key refused
    /// admission); a pass over a shard's stamps every 2^14 units (a unit
    /// a 64th to a 128th of the shard) is one stamp looked at in 128 to
    /// 256 evictions.
    pub(in crate::cache) fn age_stamps(&mut self) {
        let units = self.stamp_units();
        if !self.stamped || units.wrapping_sub(self.stamps_aged) < u32::from(STAMP_OLDEST) {
            return;
        }
        self.stamps_aged = units;
        // Truncated on purpose, as `stamp_now`.
        let (now, oldest) = (units as u16, (units as u16).wrapping_sub(STAMP_OLDEST));
        for s in &self.stamps {
            if now.wrapping_sub(s.load(Ordering::Relaxed)) > STAMP_OLDEST {
                s.store(oldest, Ordering::Relaxed);
            }
        }
    }
}
