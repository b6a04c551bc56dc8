//! The guards of a [`ShardLock`]: a reader's count and record, a
//! writer's record and `block`, each given back on drop.

use std::ops::{Deref, DerefMut};

use super::{
    HELD, ShardLock, Stripe,
    cell::{Exclusive, Shared},
    gate::Unblock,
};

/// Shared access to a [`ShardLock`]'s value; unlocks on drop
/// (`percpu_up_read`).
pub(in crate::cache) struct ReadGuard<'a, T> {
    // Dropped in this order: the reference ends before the count does.
    pub(super) data: Shared<'a, T>,
    pub(super) counted: Counted<'a>,
}

/// A reader's count in its stripe, taken back on drop, and, for a
/// reader that shares its stripe, its place in its thread's record of
/// reads ([`Held`](super::held::Held)), given back.
///
/// A sharer's guards must drop in the reverse order of their making
/// (every caller holds one guard at a time; nesting comes only from user
/// code, which unwinds in order): the record of a read must never name a
/// lock the thread does not read, or a later read of that lock would pass
/// a writer that holds it. Debug builds check it. An owner's reads are
/// only counted, in any order.
pub(super) struct Counted<'a> {
    stripe: &'a Stripe,
    /// Counted in the stripe's `own_count` (the thread owns its number).
    pub(super) own: bool,
    /// A sharer's reads held before this one.
    depth: usize,
    #[cfg(debug_assertions)]
    id: usize,
    /// Under loom, the owned stripe number of a fast read, which leaves
    /// the barrier emulation with its guard.
    #[cfg(mmbatch_loom)]
    pub(super) fast: Option<usize>,
}

impl<'a> Counted<'a> {
    /// A read counted in the stripe its thread owns.
    #[inline(always)]
    pub(super) fn owner(stripe: &'a Stripe) -> Self {
        Self {
            stripe,
            own: true,
            depth: 0,
            #[cfg(debug_assertions)]
            id: 0,
            #[cfg(mmbatch_loom)]
            fast: None,
        }
    }

    /// A read of lock `id` counted in a shared stripe, `depth` what the
    /// thread's record returned.
    #[inline(always)]
    pub(super) fn sharer(stripe: &'a Stripe, depth: usize, id: usize) -> Self {
        let _ = id;
        Self {
            stripe,
            own: false,
            depth,
            #[cfg(debug_assertions)]
            id,
            #[cfg(mmbatch_loom)]
            fast: None,
        }
    }
}

impl Drop for Counted<'_> {
    // Inline across crates: out of line, the call cost lookups 5-8%.
    #[inline]
    fn drop(&mut self) {
        #[cfg(mmbatch_loom)]
        if let Some(slot) = self.fast {
            super::barrier::leave(slot);
        }
        self.stripe.leave(self.own);
        if !self.own {
            HELD.with(|h| {
                #[cfg(debug_assertions)]
                debug_assert!(
                    h.reads.innermost().is_none_or(|i| i == self.id),
                    "read guards dropped out of order"
                );
                h.reads.end(self.depth)
            });
        }
    }
}

impl<T> ReadGuard<'_, T> {
    /// The stripe this reader counts in (for
    /// [`ShardLock::look_for_quiet`]).
    pub(in crate::cache) fn stripe(&self) -> &Stripe {
        self.counted.stripe
    }

    /// Counts this reader's lookup in its stripe ([`Stripe::count`]): with
    /// plain stores if the thread owns the stripe.
    #[inline]
    pub(in crate::cache) fn count(&self, hit: bool) -> bool {
        self.counted.stripe.count(self.counted.own, hit)
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.data.get()
    }
}

/// Exclusive access to a [`ShardLock`]'s value; unlocks on drop
/// (`percpu_up_write`).
pub(in crate::cache) struct WriteGuard<'a, T> {
    // Dropped in this order: the reference ends, then `block` clears.
    pub(super) data: Exclusive<'a, T>,
    pub(super) lock: &'a ShardLock<T>,
    pub(super) _writing: Writing,
    pub(super) _unblock: Unblock<'a>,
}

/// A write's place in its thread's record of writes ([`Held`](super::held::Held)),
/// given back on drop. Guards drop in order as for [`Counted`]; debug
/// builds check it.
pub(super) struct Writing {
    depth: usize,
    #[cfg(debug_assertions)]
    id: usize,
}

impl Writing {
    /// Records that the thread writes lock `id`.
    #[inline]
    pub(super) fn new(id: usize) -> Self {
        Self {
            depth: HELD.with(|h| h.writes.begin(id)),
            #[cfg(debug_assertions)]
            id,
        }
    }
}

impl Drop for Writing {
    #[inline]
    fn drop(&mut self) {
        HELD.with(|h| {
            #[cfg(debug_assertions)]
            debug_assert!(
                h.writes.innermost().is_none_or(|i| i == self.id),
                "write guards dropped out of order"
            );
            h.writes.end(self.depth)
        });
    }
}

impl<T> WriteGuard<'_, T> {
    /// Counts a lookup made under the write lock in the calling thread's
    /// stripe (looked up only when asked: an insertion never needs it),
    /// with plain stores: no reader counts while a writer holds the lock.
    #[inline]
    pub(in crate::cache) fn count(&self, hit: bool) {
        let _ = self.lock.own().count(true, hit);
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.data.get()
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}
