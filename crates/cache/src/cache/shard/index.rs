//! The shard's index (`mapping->i_pages`, as far as a cache needs one):
//! from a key's hash to its entry's slot, in a hashbrown table of slot
//! numbers — `u16`s in a shard that holds at most [`NARROW_MAX`] entries, `u32`s
//! otherwise (widened when a shard first holds more: `Lruvec::index_slot`).
//!
//! A hit loads the table's control bytes, then the slot number, then the
//! node: the slot numbers are half of the table's bytes and one of a
//! lookup's three dependent loads. In `u16`s (a shard of the `cache`
//! experiment holds 13107 entries) the table of a 1 Mi-key, 10% cache
//! shrinks from ~0.6 to ~0.4 MiB, which leaves more of the hot nodes in
//! the CPU's caches.

use hashbrown::HashTable;

/// The most entries a shard with a narrow index holds: its slots are
/// `0..NARROW_MAX`, each a `u16`.
pub(in crate::cache) const NARROW_MAX: usize = 1 << 16;

/// Slot numbers in `u16`s or `u32`s (see the module docs).
pub(super) enum Index {
    Narrow(HashTable<u16>),
    Wide(HashTable<u32>),
}

/// A slot number as an index stores it.
trait Slot: Copy {
    fn get(self) -> u32;
    fn of(i: u32) -> Self;
}

impl Slot for u16 {
    fn get(self) -> u32 {
        u32::from(self)
    }
    fn of(i: u32) -> Self {
        u16::try_from(i).expect("a narrow index holds slots below 65536")
    }
}

impl Slot for u32 {
    fn get(self) -> u32 {
        self
    }
    fn of(i: u32) -> Self {
        i
    }
}

/// `$body` with `$t` bound to the index's table, whichever its width.
macro_rules! each {
    ($index:expr, $t:ident => $body:expr) => {
        match $index {
            Index::Narrow($t) => $body,
            Index::Wide($t) => $body,
        }
    };
}

impl Index {
    /// An index for a shard of at most `max_entries` entries (slots
    /// `0..max_entries`).
    pub(super) fn new(max_entries: usize) -> Self {
        if max_entries <= NARROW_MAX {
            Self::Narrow(HashTable::new())
        } else {
            Self::Wide(HashTable::new())
        }
    }

    /// The slot under `hash` that satisfies `eq`.
    #[inline(always)]
    pub(super) fn find(&self, hash: u64, eq: impl Fn(u32) -> bool) -> Option<u32> {
        each!(self, t => t.find(hash, |&i| eq(i.get())).map(|&i| i.get()))
    }

    /// Whether slot `i` is indexed under `hash`.
    pub(super) fn contains(&self, hash: u64, i: u32) -> bool {
        self.find(hash, |j| j == i).is_some()
    }

    /// Indexes slot `i` under `hash` (it is not indexed yet); `rehash`
    /// gives any slot's hash when the table grows.
    pub(super) fn insert(&mut self, hash: u64, i: u32, rehash: impl Fn(u32) -> u64) {
        each!(self, t => {
            t.insert_unique(hash, Slot::of(i), |&j| rehash(j.get()));
        });
    }

    /// Drops slot `i`, indexed under `hash`.
    pub(super) fn remove(&mut self, hash: u64, i: u32) {
        each!(self, t => {
            if let Ok(e) = t.find_entry(hash, |&j| j.get() == i) {
                e.remove();
            }
        });
    }

    /// Re-points slot `from`, indexed under `hash`, to slot `to` (an entry
    /// that moved in the slab).
    pub(super) fn repoint(&mut self, hash: u64, from: u32, to: u32) {
        each!(self, t => {
            if let Some(slot) = t.find_mut(hash, |&j| j.get() == from) {
                *slot = Slot::of(to);
            }
        });
    }

    pub(super) fn len(&self) -> usize {
        each!(self, t => t.len())
    }

    /// Makes a narrow index wide, for a shard about to hold more than
    /// [`NARROW_MAX`] entries (a no-op if it is wide); `rehash` gives each
    /// slot's hash.
    pub(super) fn widen(&mut self, rehash: impl Fn(u32) -> u64) {
        if let Index::Narrow(t) = self {
            let mut wide = HashTable::with_capacity(t.len());
            for &slot in t.iter() {
                let i = slot.get();
                wide.insert_unique(rehash(i), i, |&j| rehash(j));
            }
            *self = Index::Wide(wide);
        }
    }

    pub(super) fn clear(&mut self) {
        each!(self, t => t.clear());
    }
}
