//! [`ShardLock`]: a shard's read-write lock whose readers count themselves
//! in their thread's stripe, so that lookups on different threads write no
//! common cache line.
//!
//! A plain read-write lock counts its readers in one word: every lookup
//! writes the shard's line, and on two cores that line moves between them
//! on about every other lookup. With a `RwLock` per shard, two threads
//! reading one `LruCache` ran at 0.7-0.8x one thread's rate on this 2-core
//! host (`repro --only cache`, pure read), while two private caches ran at
//! twice it; with stripes, at 1.7x. This is the kernel's
//! `percpu_rw_semaphore` (`kernel/locking/percpu-rwsem.c`): a reader
//! counts itself in its stripe (`read_count`, beside its hit counters in a
//! line of their own) and checks that no writer `block`s the lock; a
//! writer sets `block` and waits for every stripe's count to drain.
//! Threads get stripes round-robin as they first lock, since a thread
//! cannot cheaply ask which CPU it runs on.
//!
//! Its RCU fast path too, for a lock no writer has taken for
//! [`QUIET_NS`]: readers that own their stripe then count themselves with
//! no barrier, and the writer that ends the spell makes up for it with a
//! `membarrier(2)` on every thread of the process (`barrier.rs`; the
//! kernel's `rcu_sync` with a grace period, here an asymmetric barrier as
//! in userspace RCU and folly). The barrier was the `xchg` that took a
//! quarter of a lookup's samples in a `perf` profile (pure read, Zipf
//! 1.1, one thread); see [`ShardLock::read`] for the protocol, the loom
//! models in `tests/loom_fast_read.rs` for its check, and the figures in
//! issue 15's note.
//!
//! Setting `block` is also the writers' lock, as in the kernel
//! (`__percpu_down_write_trylock`: "try set sem->block; this provides
//! writer-writer exclusion"): one compare-and-swap from clear to set, a
//! load per stripe, and a plain store to unlock. Here it was a mutex, then
//! a store to `block`, and the mutex's release: three locked instructions,
//! the mutex's two 8% of `LruCache`'s samples and the store 2% in a `perf`
//! profile of single-threaded read-through, and a writer that found another sleeping on a futex. Whoever
//! waits for `block` to clear — a writer for another, a reader for a
//! writer — polls it (spins, yields, then naps: `sync::spin`): writers
//! hold a shard for one insertion or removal, and with no queue to sleep
//! on, the unlock wakes no one. Interleaved A/B against quick_cache
//! (harness over the `cache` experiment's module): read-through with
//! scans on 2 threads 1.02x -> 1.16-1.21x (workingset) and 1.02-1.10x ->
//! 1.29-1.34x (active-inactive), each of three pairs but one workingset
//! pair at 0.94x. (Stripes that were read-write locks of
//! their own, all taken by a writer, cost single-threaded read-through
//! 5-10%.)
//!
//! The first [`MAX_STRIPES`] threads alive own a stripe number each
//! (`OWNERS`, given back when the thread exits): in a lock with that
//! stripe, the owner counts its reads in the stripe's `own_count`, which
//! no other thread writes, so its unlock is a plain store rather than a
//! locked subtraction — the kernel's `this_cpu_dec`, which needs no lock
//! prefix because a CPU's counter is its own. Its count's increment is a
//! full barrier (the handshake needs one) unless the lock is fast. Other
//! threads share stripes by round-robin, counting with locked
//! instructions, fast or not.

use std::ops::{Deref, DerefMut};

use crossbeam_utils::CachePadded;

mod barrier;
mod cell;
mod gate;
mod held;

use cell::{Data, Exclusive, Shared};
use gate::{BLOCK, FAST, Gate, Unblock};
#[cfg(all(test, loom))]
pub(super) use held::set_owned;
#[cfg(test)]
pub(super) use held::set_stripe;
use held::{HELD, stripe_index};

use crate::sync::{AtomicU64, AtomicUsize, Ordering, smp_mb, spin};

/// The most stripes a shard has: a writer reads every one, so more would
/// make insertions slower on large hosts for less and less gain. Stripes
/// are dealt round-robin to every thread that ever locks a shard, so
/// threads that start together get different ones; with many threads,
/// some share.
pub(super) const MAX_STRIPES: usize = 8;

/// A stripe's lookups between two looks for quiet.
const CHECK_EVERY: u64 = 1024;

/// How long a lock must go without a write, as its readers see it, before
/// owners' reads skip their barrier, at the least: 2 ms. The write that
/// ends such a spell pays a heavy barrier (~10 us here, more on a host
/// with many CPUs, each of which it interrupts), so each lock learns its
/// own wait ([`Spell`]), up to [`QUIET_MAX_NS`].
#[cfg(not(loom))]
const QUIET_NS: u64 = 2_000_000;

/// The longest wait for quiet a lock learns: 1 s.
#[cfg(not(loom))]
const QUIET_MAX_NS: u64 = 1_000_000_000;

/// A fast spell pays for the heavy barrier that ends it if it lasted this
/// many times the barrier's own time (its cost is then under 0.1%).
#[cfg(not(loom))]
const SPELL_PAYS: u64 = 1000;

/// A lock's fast spells: how long it waits for quiet before the next, and
/// since when the current one runs. A spell too short to pay for its heavy
/// barrier doubles the wait, one four times long enough halves it: a lock
/// written every few milliseconds stops going fast after a few spells
/// (each write would have paid a barrier), one read for long stretches
/// keeps going fast at the least wait.
#[cfg(not(loom))]
struct Spell {
    quiet_ns: AtomicU64,
    since: AtomicU64,
    /// Spells ended (each by one heavy barrier).
    ended: AtomicU64,
}

/// Nanoseconds since the first call in this process (a monotonic clock for
/// [`QUIET_NS`]).
#[cfg(not(loom))]
fn epoch_nanos() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A full fence (`smp_mb()`), for a fast reader that turns slow.
#[inline]
fn full_fence() {
    #[cfg(not(loom))]
    std::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A reader's stripe: its counts of readers in the lock and its lookup
/// counters, in one line that only its threads write.
pub(super) struct Stripe {
    /// Readers holding the lock through this stripe that share it
    /// (`read_count`), counted with locked instructions.
    read_count: AtomicUsize,
    /// Reads held by the thread that owns this stripe's number: written by
    /// that thread alone, with plain stores.
    own_count: AtomicUsize,
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    /// The lock's writes its lookups saw at their last look for quiet, and
    /// since when (nanoseconds from [`epoch_nanos`]'s start) they have
    /// seen no other. Not under loom, whose models set the mode themselves
    /// (a clock would make replays differ).
    #[cfg(not(loom))]
    seen_writes: AtomicUsize,
    #[cfg(not(loom))]
    quiet_since: AtomicU64,
}

impl Stripe {
    /// Counts a lookup as a hit or a miss. A load and a store, not a
    /// locked add: lookups racing in one stripe may lose a count, and a
    /// hit costs one locked instruction fewer. Returns true every
    /// [`CHECK_EVERY`] hits or misses: time for the lookup to
    /// [`look_for_quiet`](ShardLock::look_for_quiet).
    #[inline]
    pub(super) fn count(&self, hit: bool) -> bool {
        let c = if hit { &self.hits } else { &self.misses };
        let n = c.load(Ordering::Relaxed) + 1;
        c.store(n, Ordering::Relaxed);
        n % CHECK_EVERY == 0
    }

    /// Counts a reader in, `own` on the owner's count (see the module
    /// docs). SeqCst: either this reader sees `block`, or the writer that
    /// set it sees this count and waits for it.
    #[inline]
    fn enter(&self, own: bool) {
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
    /// barrier the writer supplies (see [`ShardLock::read`]).
    #[inline]
    fn enter_fast(&self) {
        let c = &self.own_count;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Counts a reader out. Release: its reads happen before a writer's
    /// `&mut`.
    #[inline]
    fn leave(&self, own: bool) {
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

    /// Whether no reader holds the lock through this stripe.
    fn idle(&self) -> bool {
        self.read_count.load(Ordering::SeqCst) == 0 && self.own_count.load(Ordering::SeqCst) == 0
    }

    fn new() -> Self {
        Self {
            read_count: AtomicUsize::new(0),
            own_count: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            #[cfg(not(loom))]
            seen_writes: AtomicUsize::new(0),
            #[cfg(not(loom))]
            quiet_since: AtomicU64::new(0),
        }
    }
}

/// A read-write lock over `T` (`struct percpu_rw_semaphore`). Writers
/// are preferred: once one has set `block`, new readers wait. Poisoning is
/// ignored: a shard is consistent whenever user code can panic.
///
/// `repr(C)`: the header (`block`, which every read loads, and the
/// stripes' pointer) before the value, in one line.
#[repr(C)]
pub(super) struct ShardLock<T> {
    /// This lock among all of the process's, for the thread's record of
    /// the locks it holds ([`Held`](held::Held)); never reused, so a stale record
    /// cannot match another lock.
    id: usize,
    /// The state word: [`BLOCK`], set while a writer holds or is
    /// draining the lock (`sem->block`; setting it is how a writer takes
    /// the lock), and [`FAST`] while owners' reads skip their barrier.
    block: Gate,
    /// Writes so far, counted by the writer holding `block` (in the line
    /// it has just written): readers look for a spell without one before
    /// they go fast.
    writes: AtomicUsize,
    #[cfg(not(loom))]
    spell: Spell,
    stripes: Box<[CachePadded<Stripe>]>,
    data: Data<T>,
}

// SAFETY: the lock hands out `&T` to readers on many threads (so `T: Sync`)
// and `&mut T` to one writer at a time, which may be on any thread (so
// `T: Send`), exactly as `std::sync::RwLock<T>` requires.
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}

impl<T> ShardLock<T> {
    /// A lock of `stripes` stripes (rounded down to a power of two, at
    /// least 1 and at most [`MAX_STRIPES`]).
    pub(super) fn new(value: T, stripes: usize) -> Self {
        let n = 1 << stripes.clamp(1, MAX_STRIPES).ilog2();
        Self {
            id: next_id(),
            block: Gate::new(),
            writes: AtomicUsize::new(0),
            #[cfg(not(loom))]
            spell: Spell {
                quiet_ns: AtomicU64::new(QUIET_NS),
                since: AtomicU64::new(0),
                ended: AtomicU64::new(0),
            },
            stripes: (0..n).map(|_| CachePadded::new(Stripe::new())).collect(),
            data: Data::new(value),
        }
    }

    /// `on` false: owners' reads never skip their barrier (the wait for
    /// quiet never ends), so no write ever calls membarrier.
    pub(super) fn fast_reads(self, on: bool) -> Self {
        #[cfg(not(loom))]
        if !on {
            self.spell.quiet_ns.store(u64::MAX, Ordering::Relaxed);
        }
        #[cfg(loom)]
        let _ = on;
        self
    }

    /// Every stripe (for summing the counters).
    pub(super) fn stripes(&self) -> impl Iterator<Item = &Stripe> {
        self.stripes.iter().map(|s| &**s)
    }

    /// The calling thread's stripe.
    #[inline]
    fn own(&self) -> &Stripe {
        self.stripe(stripe_index())
    }

    #[inline]
    fn stripe(&self, index: usize) -> &Stripe {
        &self.stripes[index & (self.stripes.len() - 1)]
    }

    /// Shared access (`percpu_down_read`): counts the reader in its
    /// stripe, then checks for a writer; one found, the reader steps back
    /// out and waits for it.
    ///
    /// A thread that owns its stripe number, in a lock no writer has taken
    /// for a while ([`QUIET_NS`]), counts itself without a barrier
    /// (`percpu_down_read`'s fast path while `rcu_sync_is_idle`): it reads
    /// the state word, counts itself with a plain store, and reads the
    /// word again; [`FAST`] both times (and so no [`BLOCK`]), it holds the
    /// lock. A writer clears `FAST` as it takes the lock and then runs the
    /// barrier on every thread at once ([`barrier::heavy`], the kernel's
    /// grace period in `rcu_sync_enter`) before it reads the counts; only
    /// such a writer clears it, and `FAST` is set again only while the
    /// lock is free. A writer overlapping the reader took the lock after
    /// the reader's first read. If it saw `FAST`, its barrier landed on
    /// the reader after the count (it saw the count and waits) or before
    /// it (the reader's second read sees `BLOCK` or a slow word). If it
    /// saw the word slow, an earlier writer cleared `FAST` after the
    /// reader's first read, with a barrier: landing after the count, that
    /// writer waited for the reader, so the later one could not overlap;
    /// landing before it, the reader's second read finds `FAST` only if
    /// the lock was set fast again after the later writer left, whose
    /// writes it then sees. A reader that finds the word changed fences
    /// (as a slow reader does) and checks `block` again. Checking only
    /// `block` the second time misses the last case (the loom model
    /// `a_fast_reader_that_checks_only_block_is_caught` finds it): the
    /// later writer, running no barrier, may not see the count.
    ///
    /// A thread that reads this lock already (from user code run under
    /// it, directly or through other shards' locks) reads it again at
    /// once, even past a waiting writer (which waits for that first read),
    /// and one that writes this lock panics rather than wait for itself:
    /// see [`Held`](held::Held).
    #[inline]
    pub(super) fn read(&self) -> ReadGuard<'_, T> {
        self.read_with(true, true)
    }

    /// [`read`](Self::read); `pass_own` false, or `recheck` false (the
    /// fast reader checks only `block` the second time), only in the loom
    /// models' broken twins.
    #[inline(always)]
    fn read_with(&self, pass_own: bool, recheck: bool) -> ReadGuard<'_, T> {
        let (index, owned, depth) =
            HELD.with(|h| (h.stripe_index(), h.owned.get(), h.reads.begin(self.id)));
        let own = owned < self.stripes.len();
        if own {
            let state = self.block.state();
            if state & (FAST | BLOCK) == FAST {
                return self.read_fast(owned, depth, state, pass_own, recheck);
            }
        }
        let stripe = if own {
            &self.stripes[owned]
        } else {
            self.stripe(index)
        };
        // SeqCst on both sides (`smp_mb()` in the kernel).
        stripe.enter(own);
        // From here a panic uncounts the reader and restores the record.
        let counted = Counted::new(stripe, own, depth, self.id);
        smp_mb();
        if self.block.is_set() {
            self.wait_for_writer(stripe, own, pass_own);
        }
        ReadGuard {
            // SAFETY: this reader is counted and saw no `block` (or its
            // thread's record says it reads this lock already — guards
            // drop in order, see `Counted` — and that read, still counted,
            // keeps any writer waiting), so no writer has `&mut T` until
            // it is uncounted (when the guard drops): a writer sets
            // `block` before reading the counts.
            data: unsafe { self.data.shared() },
            counted,
        }
    }

    /// The owner's read without a barrier, the state word as it read it
    /// (`FAST`, no `BLOCK`) in `state` (see [`read`](Self::read)).
    #[inline(always)]
    fn read_fast(
        &self,
        owned: usize,
        depth: usize,
        state: usize,
        pass_own: bool,
        recheck: bool,
    ) -> ReadGuard<'_, T> {
        let stripe = &*self.stripes[owned];
        barrier::enter(owned);
        stripe.enter_fast();
        #[cfg_attr(not(loom), allow(unused_mut))]
        let mut counted = Counted::new(stripe, true, depth, self.id);
        #[cfg(loom)]
        {
            counted.fast = Some(owned);
        }
        barrier::light(owned);
        let now = self.block.state();
        barrier::light(owned);
        let unchanged = if recheck {
            now == state
        } else {
            now & BLOCK == 0
        };
        debug_assert_eq!(state, FAST);
        if !unchanged {
            // Now a slow reader: counted, fenced, then `block` again.
            full_fence();
            if self.block.is_set() {
                #[cfg(loom)]
                {
                    // Waiting outside the fast read, as a slow reader.
                    barrier::leave(owned);
                    counted.fast = None;
                }
                self.wait_for_writer(stripe, true, pass_own);
            }
        }
        ReadGuard {
            // SAFETY: this reader is counted, and no writer holds `&mut T`
            // until it is uncounted: it read `FAST` before and after its
            // count (a writer taking the lock meanwhile or later saw the
            // count after a heavy barrier, its own or an earlier writer's,
            // or left before the second read; see `read`), or it fenced
            // and then saw no `block` as a slow reader does, or it waited
            // for the writer as one does.
            data: unsafe { self.data.shared() },
            counted,
        }
    }

    /// Looks whether the lock has seen no write for its wait ([`Spell`],
    /// [`QUIET_NS`] at first; as this stripe's lookups last looked): then
    /// owners' reads go fast.
    /// Lookups call it every [`CHECK_EVERY`] of their counts
    /// ([`Stripe::count`]).
    #[cold]
    #[inline(never)]
    pub(super) fn look_for_quiet(&self, stripe: &Stripe) {
        #[cfg(not(loom))]
        {
            let writes = self.writes.load(Ordering::Relaxed);
            let now = epoch_nanos();
            if writes != stripe.seen_writes.load(Ordering::Relaxed) {
                stripe.seen_writes.store(writes, Ordering::Relaxed);
                stripe.quiet_since.store(now, Ordering::Relaxed);
            } else if now.saturating_sub(stripe.quiet_since.load(Ordering::Relaxed))
                >= self.spell.quiet_ns.load(Ordering::Relaxed)
                && barrier::available()
                && self.block.go_fast()
            {
                self.spell.since.store(now, Ordering::Relaxed);
            }
        }
        #[cfg(loom)]
        let _ = stripe;
    }

    /// Lets owners' reads skip their barrier from now on (the loom
    /// models).
    #[cfg(all(loom, test))]
    pub(super) fn go_fast(&self) {
        let _ = self.block.go_fast();
    }

    /// Whether owners' reads skip their barrier now.
    pub(super) fn is_fast(&self) -> bool {
        self.block.state() & FAST != 0
    }

    /// A reader that found `block` set: steps back out, waits for the
    /// writer to clear it, and counts itself again until it finds no
    /// writer (`percpu_rwsem_wait`). Not if its thread already reads this
    /// lock, however far out (unless `pass_own` is false: the loom model's
    /// broken twin): the writer waits for that read, so none writes, and
    /// waiting for it would deadlock. Panics if its thread writes this
    /// lock: it would wait for itself.
    #[cold]
    #[inline(never)]
    fn wait_for_writer(&self, stripe: &Stripe, own: bool, pass_own: bool) {
        let (read_before, writing) =
            HELD.with(|h| (h.reads.held_before(self.id), h.writes.holds(self.id)));
        if pass_own && read_before {
            return;
        }
        if writing {
            // The guard under construction is dropped by the unwind.
            panic!(
                "LruCache re-entered: this thread is changing an entry's shard and, from user \
                 code run under that shard's lock (a key's Eq, a value's Clone), looked the \
                 shard up again; the lookup would deadlock waiting for the change to end. Do \
                 not use the cache from Eq or Clone"
            );
        }
        loop {
            stripe.leave(own);
            self.block.wait_clear();
            stripe.enter(own);
            smp_mb();
            if !self.block.is_set() {
                return;
            }
        }
    }

    /// Waits until no reader holds the lock through any stripe (the
    /// writer's `rcuwait_wait_event(..., readers_active_check(sem))`).
    fn wait_for_readers(&self) {
        for s in self.stripes.iter() {
            let mut round = 0;
            while !s.idle() {
                spin(&mut round);
            }
        }
    }

    /// Learns from the spell the heavy barrier begun at `start` ended (see
    /// [`Spell`]); the writer holds `block`, so no other writer races.
    #[cfg(not(loom))]
    #[cold]
    fn end_spell(&self, start: u64) {
        let sp = &self.spell;
        let now = epoch_nanos();
        let (lasted, cost) = (
            start.saturating_sub(sp.since.load(Ordering::Relaxed)),
            now.saturating_sub(start).max(1),
        );
        let quiet = sp.quiet_ns.load(Ordering::Relaxed);
        let quiet = if quiet == u64::MAX {
            quiet
        } else if lasted < SPELL_PAYS * cost {
            (quiet * 2).min(QUIET_MAX_NS)
        } else if lasted >= 4 * SPELL_PAYS * cost {
            (quiet / 2).max(QUIET_NS)
        } else {
            quiet
        };
        sp.quiet_ns.store(quiet, Ordering::Relaxed);
        sp.ended
            .store(sp.ended.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Exclusive access (`percpu_down_write`): one writer at a time sets
    /// `block`, then waits for every stripe's readers to leave.
    ///
    /// # Panics
    /// If the calling thread reads or writes this lock already (user code
    /// run under it called back into the cache): it would wait for itself.
    pub(super) fn write(&self) -> WriteGuard<'_, T> {
        let (reading, writing) = HELD.with(|h| (h.reads.holds(self.id), h.writes.holds(self.id)));
        if reading || writing {
            panic!(
                "LruCache re-entered: user code run under an entry's shard lock (a value's \
                 Clone, a key's Eq) called back into the cache to change that shard; the \
                 change would deadlock waiting for this thread's own {} to end. Do not change \
                 the cache from Clone or Eq",
                if writing { "change" } else { "lookup" }
            );
        }
        let was_fast = self.block.take();
        // Cleared however this ends, even by a panic before the guard.
        let unblock = Unblock(&self.block);
        self.writes.store(
            self.writes.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        if was_fast {
            // `rcu_sync_enter`'s grace period: every fast reader's count is
            // visible now, or the reader sees `block`.
            #[cfg(not(loom))]
            let start = epoch_nanos();
            barrier::heavy();
            #[cfg(not(loom))]
            self.end_spell(start);
        }
        smp_mb();
        self.wait_for_readers();
        let writing = Writing::new(self.id);
        WriteGuard {
            // SAFETY: this writer set `block` (no other writer holds it
            // until it is cleared) and every stripe's readers have left:
            // new readers see `block` and wait, so this is the only
            // reference to `T` until the guard drops.
            data: unsafe { self.data.exclusive() },
            lock: self,
            _writing: writing,
            _unblock: unblock,
        }
    }
}

/// Shared access to a [`ShardLock`]'s value; unlocks on drop
/// (`percpu_up_read`).
pub(super) struct ReadGuard<'a, T> {
    // Dropped in this order: the reference ends before the count does.
    data: Shared<'a, T>,
    counted: Counted<'a>,
}

/// A reader's count in its stripe, taken back on drop, and its place in
/// its thread's record of reads ([`Held`](held::Held)), given back.
///
/// Guards of one thread must drop in the reverse order of their making
/// (every caller holds one guard at a time; nesting comes only from user
/// code, which unwinds in order): the record of a read must never name a
/// lock the thread does not read, or a later read of that lock would pass
/// a writer that holds it. Debug builds check it.
struct Counted<'a> {
    stripe: &'a Stripe,
    /// Counted in the stripe's `own_count` (the thread owns its number).
    own: bool,
    /// The reads its thread held before this one.
    depth: usize,
    #[cfg(debug_assertions)]
    id: usize,
    /// Under loom, the owned stripe number of a fast read, which leaves
    /// the barrier emulation with its guard.
    #[cfg(loom)]
    fast: Option<usize>,
}

impl<'a> Counted<'a> {
    #[inline(always)]
    fn new(stripe: &'a Stripe, own: bool, depth: usize, id: usize) -> Self {
        let _ = id;
        Self {
            stripe,
            own,
            depth,
            #[cfg(debug_assertions)]
            id,
            #[cfg(loom)]
            fast: None,
        }
    }
}

impl Drop for Counted<'_> {
    // Inline across crates: out of line, the call cost lookups 5-8%.
    #[inline]
    fn drop(&mut self) {
        #[cfg(loom)]
        if let Some(slot) = self.fast {
            barrier::leave(slot);
        }
        self.stripe.leave(self.own);
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

impl<T> ReadGuard<'_, T> {
    /// The stripe this reader counts in: the lookup counters to bump.
    pub(super) fn stripe(&self) -> &Stripe {
        self.counted.stripe
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
pub(super) struct WriteGuard<'a, T> {
    // Dropped in this order: the reference ends, then `block` clears.
    data: Exclusive<'a, T>,
    lock: &'a ShardLock<T>,
    _writing: Writing,
    _unblock: Unblock<'a>,
}

/// A write's place in its thread's record of writes ([`Held`](held::Held)),
/// given back on drop. Guards drop in order as for [`Counted`]; debug
/// builds check it.
struct Writing {
    depth: usize,
    #[cfg(debug_assertions)]
    id: usize,
}

impl Writing {
    /// Records that the thread writes lock `id`.
    fn new(id: usize) -> Self {
        Self {
            depth: HELD.with(|h| h.writes.begin(id)),
            #[cfg(debug_assertions)]
            id,
        }
    }
}

impl Drop for Writing {
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
    /// The calling thread's stripe: the lookup counters to bump (looked
    /// up only when asked: an insertion never needs it).
    #[inline]
    pub(super) fn stripe(&self) -> &Stripe {
        self.lock.own()
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

/// A lock id no other lock has had (from 1: 0 is none).
fn next_id() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The protocol broken on purpose, for the loom models that must catch
/// it.
#[cfg(all(loom, test))]
impl<T> ShardLock<T> {
    /// A read that waits for writers even when its thread reads the lock
    /// already: the recursion check broken on purpose, for the loom model
    /// that must catch it (the writer waits for the first read, the second
    /// for the writer).
    pub(super) fn read_waiting_for_writers(&self) -> ReadGuard<'_, T> {
        self.read_with(false, true)
    }

    /// A fast read that checks only `block` after its count, not whether
    /// the lock is still fast.
    pub(super) fn read_fast_checking_only_block(&self) -> ReadGuard<'_, T> {
        self.read_with(true, false)
    }

    /// A writer that ends the fast mode without the heavy barrier (a fast
    /// reader's count may not be visible yet when it reads the counts).
    pub(super) fn write_without_heavy_barrier(&self) -> WriteGuard<'_, T> {
        self.write_blocking_with(|block| {
            block.take();
        })
    }

    /// A writer that sets `block` with a plain store instead of taking it
    /// from `false` (a second writer is not kept out: both hold `&mut`).
    pub(super) fn write_without_excluding_writers(&self) -> WriteGuard<'_, T> {
        self.write_blocking_with(Gate::set_unconditionally)
    }

    /// A writer that sets `block` with `block_with`, then waits for the
    /// counts as `write` does, and nothing else.
    fn write_blocking_with(&self, block_with: impl FnOnce(&Gate)) -> WriteGuard<'_, T> {
        block_with(&self.block);
        let unblock = Unblock(&self.block);
        smp_mb();
        self.wait_for_readers();
        WriteGuard {
            // SAFETY: none: this is a broken writer a model must catch.
            data: unsafe { self.data.exclusive() },
            lock: self,
            _writing: Writing::new(self.id),
            _unblock: unblock,
        }
    }

    /// A writer that reads the counts before it sets `block` (a reader
    /// counted after the check but before `block` reads beside the
    /// writer).
    pub(super) fn write_checking_first(&self) -> WriteGuard<'_, T> {
        self.wait_for_readers();
        self.block.take();
        smp_mb();
        WriteGuard {
            // SAFETY: none: this is the broken writer the model must catch.
            data: unsafe { self.data.exclusive() },
            lock: self,
            _writing: Writing::new(self.id),
            _unblock: Unblock(&self.block),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Barrier;

    use super::{ShardLock, set_stripe};

    /// Miri runs these too (`cargo xtask miri`): few iterations.
    const ROUNDS: usize = if cfg!(miri) { 20 } else { 2000 };

    #[test]
    fn stripes_are_a_power_of_two_up_to_the_cap() {
        for (asked, got) in [(0, 1), (1, 1), (2, 2), (3, 2), (8, 8), (9, 8), (1000, 8)] {
            assert_eq!(ShardLock::new((), asked).stripes().count(), got, "{asked}");
        }
    }

    /// Readers on every stripe see a pair that writers keep equal: a
    /// writer that missed a stripe would let a reader see it half-written
    /// (the loom model checks the same against loom's cell tracking).
    #[test]
    fn writers_exclude_readers_on_every_stripe() {
        let lock = ShardLock::new((0u64, 0u64), 4);
        let start = Barrier::new(4);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (lock, start) = (&lock, &start);
                s.spawn(move || {
                    set_stripe(t);
                    start.wait();
                    for _ in 0..ROUNDS {
                        if t % 2 == 0 {
                            let mut w = lock.write();
                            w.0 += 1;
                            std::hint::black_box(&mut *w);
                            w.1 += 1;
                        } else {
                            let r = lock.read();
                            assert_eq!(r.0, r.1, "a reader saw a write half done");
                        }
                    }
                });
            }
        });
        let r = lock.read();
        assert_eq!(*r, (2 * ROUNDS as u64, 2 * ROUNDS as u64));
    }

    /// Owners' reads go fast once the lock has had no write for
    /// `QUIET_NS`, and the next write ends it (one heavy barrier). Where
    /// membarrier is refused (Miri, an old kernel, a seccomp filter) the
    /// reads stay slow.
    #[test]
    fn a_quiet_lock_goes_fast_until_the_next_write() {
        let lock = ShardLock::new(7u32, super::MAX_STRIPES);
        *lock.write() += 1;
        let until = std::time::Instant::now()
            + std::time::Duration::from_secs(if cfg!(miri) { 0 } else { 5 });
        let mut reads = 0u64;
        while !lock.is_fast() && std::time::Instant::now() < until {
            // As `LruCache::get` does.
            let r = lock.read();
            assert_eq!(*r, 8);
            if r.stripe().count(true) {
                lock.look_for_quiet(r.stripe());
            }
            reads += 1;
        }
        if !super::barrier::available() || super::held::owned() >= super::MAX_STRIPES {
            assert!(
                !lock.is_fast(),
                "fast without membarrier or an owned stripe"
            );
            return;
        }
        assert!(lock.is_fast(), "still slow after {reads} reads in 5 s");
        assert_eq!(*lock.read(), 8);
        *lock.write() += 1;
        assert!(!lock.is_fast(), "a write ends the fast mode");
        assert_eq!(*lock.read(), 9);
    }

    /// A lock written every 3 ms, read in between: a spell of fast reads
    /// that a write ends within a millisecond does not pay for its heavy
    /// barrier, so the lock waits longer for quiet each time and soon stays
    /// slow. With a fixed wait of 2 ms, every write ended a spell (100 of
    /// 100 here).
    #[test]
    fn a_lock_written_every_few_milliseconds_stops_going_fast() {
        if cfg!(miri) || !super::barrier::available() {
            return;
        }
        let lock = ShardLock::new(0u64, super::MAX_STRIPES);
        for _ in 0..100 {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(3);
            while std::time::Instant::now() < until {
                let r = lock.read();
                if r.stripe().count(true) {
                    lock.look_for_quiet(r.stripe());
                }
            }
            *lock.write() += 1;
        }
        assert_eq!(*lock.read(), 100);
        if super::held::owned() >= super::MAX_STRIPES {
            return; // never fast: this thread owns no stripe
        }
        let ended = lock.spell.ended.load(std::sync::atomic::Ordering::Relaxed);
        assert!(ended >= 1, "the lock never went fast");
        assert!(
            ended <= 8,
            "{ended} fast spells ended by a write, each a heavy barrier"
        );
    }

    /// A reader that owns its stripe, reading fast, and a writer that
    /// makes the lock fast again before every write, so each write ends
    /// the fast mode with a heavy barrier: the reader never sees a write
    /// half done. Without the heavy barrier this failed on this host (see
    /// the lock's docs); the loom model checks the same protocol with the
    /// barrier emulated.
    #[test]
    fn fast_readers_exclude_writers_that_end_the_fast_mode() {
        if cfg!(miri) || !super::barrier::available() {
            return;
        }
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        let lock = ShardLock::new((0u64, 0u64), super::MAX_STRIPES);
        let (stop, reads) = (AtomicBool::new(false), AtomicU64::new(0));
        let writes = 20_000;
        let (fast, owned) = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut fast = 0u64;
                while !stop.load(Relaxed) {
                    fast += u64::from(lock.is_fast());
                    let r = lock.read();
                    let a = r.0;
                    std::hint::black_box(&*r);
                    assert_eq!(a, r.1, "a fast reader saw a write half done");
                    drop(r);
                    reads.store(reads.load(Relaxed) + 1, Relaxed);
                }
                (fast, super::held::owned())
            });
            for _ in 0..writes {
                let _ = lock.block.go_fast();
                // Let the reader read fast a few times (bounded: it may
                // be descheduled).
                let (seen, mut round) = (reads.load(Relaxed), 0);
                while reads.load(Relaxed) < seen + 3 && round < 10_000 {
                    std::hint::spin_loop();
                    round += 1;
                }
                let mut w = lock.write();
                w.0 += 1;
                for _ in 0..50 {
                    std::hint::black_box(&mut *w);
                }
                w.1 += 1;
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap()
        });
        assert!(owned < super::MAX_STRIPES, "the reader owned no stripe");
        assert!(fast > 0, "no read went fast");
        assert_eq!(*lock.read(), (writes, writes));
    }

    /// A panic under the write lock releases it; the lock goes on (a
    /// shard is consistent whenever user code can panic).
    #[test]
    fn a_panic_under_the_write_lock_releases_it() {
        let lock = ShardLock::new(1, 2);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _w = lock.write();
            panic!("user code panicked under the lock");
        }));
        *lock.write() += 1;
        assert_eq!(*lock.read(), 2);
    }

    /// Guards dropped out of order would leave the thread's record naming
    /// a lock it no longer reads (a later read of it would pass a writer
    /// holding it): debug builds stop there.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "read guards dropped out of order")]
    fn read_guards_dropped_out_of_order_are_caught() {
        let (a, b) = (ShardLock::new(1, 2), ShardLock::new(2, 2));
        let ra = a.read();
        let _rb = b.read();
        drop(ra);
    }

    /// A thread's record names the first `NEST` locks it nests and only
    /// counts the rest; once every guard is gone it is empty again, and
    /// each lock is written and read as when nothing was nested.
    #[test]
    fn nesting_past_the_record_keeps_its_count() {
        use super::held::{HELD, NEST};
        let locks: Vec<ShardLock<usize>> = (0..NEST + 3).map(|i| ShardLock::new(i, 2)).collect();
        let reads = |i: usize| HELD.with(|h| h.reads.holds(locks[i].id));
        let guards: Vec<_> = locks.iter().map(|l| l.read()).collect();
        assert!((0..NEST).all(reads), "the first NEST are named");
        assert!(!reads(NEST), "the rest only counted");
        // Dropped innermost first.
        drop(guards.into_iter().rev().collect::<Vec<_>>());
        assert!(!(0..NEST).any(reads));
        for (i, l) in locks.iter().enumerate() {
            *l.write() += 1;
            assert_eq!(*l.read(), i + 1);
        }
    }

    /// Live threads own distinct stripe numbers, and give them back when
    /// they exit: thread after thread, each owns one (never given back,
    /// the numbers ran out after the eighth thread and every later thread
    /// shared stripes).
    #[test]
    fn owned_stripe_numbers_are_distinct_and_given_back() {
        let threads = if cfg!(miri) { 4 } else { super::MAX_STRIPES };
        let lock = ShardLock::new(0u32, super::MAX_STRIPES);
        let start = Barrier::new(threads);
        let mut owned: Vec<usize> = std::thread::scope(|s| {
            let spawned: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let r = lock.read();
                        let mine = super::held::owned();
                        start.wait();
                        drop(r);
                        mine
                    })
                })
                .collect();
            spawned.into_iter().map(|t| t.join().unwrap()).collect()
        });
        owned.retain(|&o| o != super::held::NONE);
        let n = owned.len();
        owned.sort_unstable();
        owned.dedup();
        assert_eq!(owned.len(), n, "two live threads owned one stripe number");
        // Other tests' threads may hold a few numbers meanwhile, not all.
        for t in 0..3 * threads {
            let mine = std::thread::scope(|s| {
                s.spawn(|| {
                    let _r = lock.read();
                    super::held::owned()
                })
                .join()
                .unwrap()
            });
            assert_ne!(
                mine,
                super::held::NONE,
                "thread {t} found no stripe number free"
            );
        }
        assert_eq!(*lock.write(), 0);
    }

    /// Each thread keeps one stripe number, and no two threads share one
    /// (the lock reduces it modulo its stripes).
    #[test]
    fn each_thread_has_its_own_stripe_number() {
        let here = super::stripe_index();
        assert_eq!(super::stripe_index(), here);
        let there = std::thread::scope(|s| s.spawn(super::stripe_index).join().unwrap());
        assert_ne!(here, there);
    }
}
