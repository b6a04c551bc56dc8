//! [`Stripe`]: a reader's stripe of a shard lock — its counts of readers
//! and its lookup counters, in a line of its own.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// A stripe's lookups between two looks for quiet
/// ([`ShardLock::look_for_quiet`](super::ShardLock::look_for_quiet)).
pub(super) const CHECK_EVERY: u64 = 1024;

/// A reader's stripe: its counts of readers in the lock and its lookup
/// counters, in one line that only its threads write.
pub(in crate::cache) struct Stripe {
    /// Readers holding the lock through this stripe that share it
    /// (`read_count`), counted with locked instructions.
    read_count: AtomicUsize,
    /// Reads held by the thread that owns this stripe's number: written by
    /// that thread alone, with plain stores.
    own_count: AtomicUsize,
    /// Lookups counted by the stripe's owner, or by a writer holding the
    /// lock: one writer at a time, plain stores.
    hits: AtomicU64,
    misses: AtomicU64,
    /// Lookups counted by threads that share the stripe, with locked
    /// adds: apart from the owner's, so that neither loses the other's.
    shared_hits: AtomicU64,
    shared_misses: AtomicU64,
    /// What its lookups saw at their last look for quiet.
    #[cfg(not(mmbatch_loom))]
    pub(super) seen: super::spell::Seen,
}

impl Stripe {
    /// Counts a lookup as a hit or a miss: `exclusive` for the stripe's
    /// owner or a writer holding the lock (no other thread writes these
    /// counts meanwhile: a load and a store, a hit's locked instruction
    /// saved), otherwise a locked add, as the stripe is shared. Returns
    /// true every [`CHECK_EVERY`] hits or misses: time for the lookup to
    /// [`look_for_quiet`](super::ShardLock::look_for_quiet).
    ///
    /// A load and a store by threads that shared a stripe lost counts, and
    /// one preempted between the two wrote back an older count: the sums
    /// went backwards, and the shard's look at its lookups overflowed.
    #[inline]
    pub(super) fn count(&self, exclusive: bool, hit: bool) -> bool {
        let n = if exclusive {
            let c = if hit { &self.hits } else { &self.misses };
            let n = c.load(Ordering::Relaxed) + 1;
            c.store(n, Ordering::Relaxed);
            n
        } else {
            let c = if hit {
                &self.shared_hits
            } else {
                &self.shared_misses
            };
            c.fetch_add(1, Ordering::Relaxed) + 1
        };
        n % CHECK_EVERY == 0
    }

    /// Lookups counted so far, hits and misses. Each count only grows: a
    /// later call returns no less.
    pub(in crate::cache) fn lookups(&self) -> (u64, u64) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (
            load(&self.hits) + load(&self.shared_hits),
            load(&self.misses) + load(&self.shared_misses),
        )
    }

    /// Counts a reader in, `own` on the owner's count (see the module
    /// docs). SeqCst: either this reader sees `block`, or the writer that
    /// set it sees this count and waits for it.
    #[inline]
    pub(super) fn enter(&self, own: bool) {
        if own {
            let c = &self.own_count;
            // Only this thread writes it: no lost update. A SeqCst store is
            // an `xchg` on x86, as costly as the locked add.
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::SeqCst);
        } else {
            self.read_count.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts the owner in without a barrier: the fast path, whose
    /// barrier the writer supplies (see [`ShardLock::read`](super::ShardLock::read)).
    #[inline]
    pub(super) fn enter_fast(&self) {
        let c = &self.own_count;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Counts a reader out. Release: its reads happen before a writer's
    /// `&mut`.
    #[inline]
    pub(super) fn leave(&self, own: bool) {
        if own {
            let c = &self.own_count;
            let n = c.load(Ordering::Relaxed);
            // A lost update: two live threads counted as its owner.
            debug_assert!(n > 0, "an owned stripe's count went below zero");
            c.store(n.wrapping_sub(1), Ordering::Release);
        } else {
            self.read_count.fetch_sub(1, Ordering::Release);
        }
    }

    /// How many reads the owner of this stripe's number holds: exact when
    /// that owner asks (no other thread writes the count), which is how
    /// an owner knows it reads the lock already.
    #[inline]
    pub(super) fn owner_reads(&self) -> usize {
        self.own_count.load(Ordering::Relaxed)
    }

    /// Whether no reader holds the lock through this stripe.
    #[inline]
    pub(super) fn idle(&self) -> bool {
        self.read_count.load(Ordering::SeqCst) == 0 && self.own_count.load(Ordering::SeqCst) == 0
    }

    pub(super) fn new() -> Self {
        Self {
            read_count: AtomicUsize::new(0),
            own_count: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            shared_hits: AtomicU64::new(0),
            shared_misses: AtomicU64::new(0),
            #[cfg(not(mmbatch_loom))]
            seen: super::spell::Seen::new(),
        }
    }
}
