//! [`ShardLock`]: a shard's read-write lock whose readers count themselves
//! in their thread's stripe, so that lookups on different threads write no
//! common cache line.
//!
//! A plain read-write lock counts its readers in one word: every lookup
//! writes the shard's line, and on two cores that line moves between them
//! on about every other lookup. This is the kernel's
//! `percpu_rw_semaphore` (`kernel/locking/percpu-rwsem.c`): a reader
//! counts itself in its stripe (`read_count`, beside its hit counters in a
//! line of their own) and checks that no writer `block`s the lock; a
//! writer sets `block` and waits for every stripe's count to drain.
//! Threads get stripes round-robin as they first lock, since a thread
//! cannot cheaply ask which CPU it runs on.
//!
//! Its RCU fast path too, for a lock no writer has taken for
//! a while (`spell.rs`): readers that own their stripe then count themselves with
//! no barrier, and the writer that ends the spell makes up for it with a
//! `membarrier(2)` on every thread of the process (`barrier.rs`; the
//! kernel's `rcu_sync` with a grace period, here an asymmetric barrier as
//! in userspace RCU and folly). It saves the reader's barrier (the `xchg`
//! of its count), a large share of a pure-read lookup's time; see
//! [`ShardLock::read`] for the protocol and the loom models in
//! `tests/loom_fast_read.rs` for its check.
//!
//! Setting `block` is also the writers' lock, as in the kernel
//! (`__percpu_down_write_trylock`: "try set sem->block; this provides
//! writer-writer exclusion"): one compare-and-swap from clear to set, a
//! load per stripe, and a plain store to unlock: one locked instruction a
//! write, where a mutex and a separate `block` took three. Whoever waits
//! for `block` to clear — a writer for another, a reader for a writer —
//! polls it (spins, yields, then naps: `sync::spin`): writers hold a shard
//! for one insertion or removal, and with no queue to sleep on, the
//! unlock wakes no one.
//!
//! In one thread's read-through (lookups, and an insertion per miss) the
//! lock is never fast: writes keep ending the quiet.
//!
//! What each of these choices was measured to gain, and the designs
//! tried and not kept: `docs/cache.md#lock-implementation-measurements`.
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

use crossbeam_utils::CachePadded;

mod barrier;
mod cell;
mod gate;
mod guard;
mod held;
#[cfg(not(mmbatch_loom))]
mod spell;
mod stripe;

use cell::Data;
use gate::{BLOCK, FAST, Gate, Unblock};
use guard::{Counted, Writing};
pub(super) use guard::{ReadGuard, WriteGuard};
#[cfg(all(test, mmbatch_loom))]
pub(super) use held::set_owned;
#[cfg(test)]
pub(super) use held::set_stripe;
use held::{HELD, stripe_index};

#[cfg(not(mmbatch_loom))]
use spell::Spell;
pub(super) use stripe::Stripe;

use crate::sync::{smp_mb, spin};

/// The most stripes a shard has: a writer reads every one, so more would
/// make insertions slower on large hosts for less and less gain. Stripes
/// are dealt round-robin to every thread that ever locks a shard, so
/// threads that start together get different ones; with many threads,
/// some share.
pub(super) const MAX_STRIPES: usize = 8;

/// How long a writer waits for the readers to leave before it steps back
/// and lets readers waiting for it in, in rounds of `sync::spin`: its
/// spins and yields, then 21 naps of 50 us. Readers hold a shard for one
/// lookup, microseconds; one that holds it this long is running slow user
/// code, or waiting for another lock from it. Nested reads across shards,
/// crossed on two threads (`Clone` under A reads B, under B reads A),
/// with a writer waiting on each shard, wait for each other in a cycle
/// that only a writer's step back breaks: the kernel's `percpu_rw_semaphore`
/// forbids such nesting outright, a cache whose values' `Clone` may read
/// it cannot.
#[cfg(not(mmbatch_loom))]
const GIVE_WAY_AFTER: u32 = 1024 + 20;

/// The most times a writer doubles its naps before a step back (each
/// step back doubles them, up to 2^6 times [`GIVE_WAY_AFTER`]'s 20 naps:
/// 1280 naps, about 0.1 s). Why: readers inside when `block` is set are
/// the only ones it waits for, so a writer whose wait outgrows their
/// reads gets in; with a fixed wait, reads each longer than it (a slow
/// `Clone`), steady on other threads, held a writer off until chance let
/// it in. Trades how long crossed nested reads wait, should a waiter miss
/// a step back (each wait after one is longer), and how long other
/// readers of the shard wait behind the writer, for that.
#[cfg(not(mmbatch_loom))]
const GIVE_WAY_DOUBLINGS: u32 = 6;

/// How many rounds of `sync::spin` a writer waits for the readers after
/// `gave_way` step backs: [`GIVE_WAY_AFTER`], its naps doubled at each
/// step back up to [`GIVE_WAY_DOUBLINGS`] times.
#[cfg(not(mmbatch_loom))]
fn give_way_after(gave_way: u32) -> u32 {
    let naps = GIVE_WAY_AFTER - 1024;
    1024 + (naps << gave_way.min(GIVE_WAY_DOUBLINGS))
}

/// Rounds (`spin_loop` hints: a few to about 40 nanoseconds each, by CPU)
/// that [`ShardLock::write_if_cheap`] waits for readers, over all stripes,
/// before it declines: a lookup's read section lasts well under a
/// microsecond, and a decline only leaves the work to the next writer.
const CHEAP_WAIT: u32 = if cfg!(mmbatch_loom) { 1 } else { 256 };

/// How long a writer that steps back leaves the lock free: four of a
/// waiting reader's 50 us naps, so that each waiter sees `block` clear.
/// A waiter that misses it is let in at the next step back.
#[cfg(not(mmbatch_loom))]
const GIVE_WAY_FOR: std::time::Duration = std::time::Duration::from_micros(200);

/// A writer's give-ways in the crate's unit tests before they abort
/// ([`crate::sync::bound_in_tests`]): 20, the waits before the first six
/// about 0.1 s of 50 us naps in all and each later one about 0.06 s (at
/// least), about 1 s in all.
#[cfg(test)]
#[cfg_attr(mmbatch_loom, allow(dead_code))]
const TEST_GIVE_WAYS: u32 = 20;

/// Counts a writer's give-way in the crate's unit tests, which abort at
/// [`TEST_GIVE_WAYS`]: a count of its own, so that a writer whose
/// patience stopped growing is still stopped.
#[cfg(test)]
#[cfg_attr(mmbatch_loom, allow(dead_code))]
fn gave_way_in_tests(gave_way: &mut u32) {
    *gave_way += 1;
    crate::sync::bound_in_tests(
        *gave_way,
        TEST_GIVE_WAYS,
        "a writer gave way to its readers",
    );
}

/// A read that did not go fast ([`ShardLock::try_read_fast`]), and the
/// stripe its thread owns in the lock, if any, which its slow read counts
/// in ([`ShardLock::read_not_fast`], of the same lock: debug builds check).
pub(in crate::cache) struct NotFast<'a>(Option<&'a CachePadded<Stripe>>);

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
    /// Its writes and fast spells: when owners' reads may go fast.
    #[cfg(not(mmbatch_loom))]
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
            #[cfg(not(mmbatch_loom))]
            spell: Spell::new(true),
            stripes: (0..n).map(|_| CachePadded::new(Stripe::new())).collect(),
            data: Data::new(value),
        }
    }

    /// `on` false: owners' reads never skip their barrier (the wait for
    /// quiet never ends), so no write ever calls membarrier.
    #[cfg_attr(mmbatch_loom, allow(unused_mut))]
    pub(super) fn fast_reads(mut self, on: bool) -> Self {
        #[cfg(not(mmbatch_loom))]
        {
            self.spell = Spell::new(on);
        }
        #[cfg(mmbatch_loom)]
        let _ = on;
        self
    }

    /// Lookups its readers counted so far, hits and misses, summed over
    /// the stripes; neither sum goes down from one call to the next.
    pub(super) fn lookups(&self) -> (u64, u64) {
        self.stripes.iter().fold((0, 0), |(h, m), s| {
            let (sh, sm) = s.lookups();
            (h + sh, m + sm)
        })
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
    /// for a while (`spell.rs`), counts itself without a barrier
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
    /// writes it then sees. A reader that finds the word changed steps
    /// back out, having read nothing, and reads as a slow reader. Checking
    /// only `block` the second time misses the last case (the loom model
    /// `a_fast_reader_that_checks_only_block_is_caught` finds it): the
    /// later writer, running no barrier, may not see the count.
    ///
    /// A thread that reads this lock already (from user code run under
    /// it, directly or through other shards' locks) reads it again at
    /// once, even past a waiting writer (which waits for that first read),
    /// and one that writes this lock panics rather than wait for itself:
    /// see [`Held`](held::Held). An owner knows its reads by its stripe's
    /// count, a sharer by its thread's record.
    #[inline]
    pub(super) fn read(&self) -> ReadGuard<'_, T> {
        self.read_with(true, true)
    }

    /// [`read`](Self::read); `pass_own` false, or `recheck` false (the
    /// fast reader checks only `block` the second time), only in the loom
    /// models' broken twins.
    #[inline(always)]
    fn read_with(&self, pass_own: bool, recheck: bool) -> ReadGuard<'_, T> {
        match self.try_read_fast_with(recheck) {
            Ok(guard) => guard,
            Err(not_fast) => self.read_not_fast_with(not_fast, pass_own),
        }
    }

    /// [`read`](Self::read)'s fast path alone, for a lookup that keeps its
    /// values in registers (nothing on this path calls out): the owner's
    /// read without a barrier, or, where `read` would read as a slow
    /// reader (no stripe owned, the lock not fast, or the word changed
    /// after the count: the reader stepped back out, having read nothing),
    /// what [`read_not_fast`](Self::read_not_fast) goes on from.
    #[inline(always)]
    pub(in crate::cache) fn try_read_fast(&self) -> Result<ReadGuard<'_, T>, NotFast<'_>> {
        self.try_read_fast_with(true)
    }

    /// [`try_read_fast`](Self::try_read_fast); `recheck` false (checking
    /// only `block` after the count) only in the loom models' broken twin.
    #[inline(always)]
    fn try_read_fast_with(&self, recheck: bool) -> Result<ReadGuard<'_, T>, NotFast<'_>> {
        // An owner's reads of this lock are its stripe's `own_count`: no
        // record of them (see `Held`).
        let owned = HELD.with(|h| h.owned.get());
        let Some(stripe) = self.stripes.get(owned) else {
            return Err(NotFast(None));
        };
        let state = self.block.state();
        if state & (FAST | BLOCK) != FAST {
            return Err(NotFast(Some(stripe)));
        }
        let (counted, now) = self.count_fast(stripe, owned);
        let unchanged = if recheck {
            now == state
        } else {
            now & BLOCK == 0
        };
        if !unchanged {
            // Uncounted on drop, having read nothing.
            drop(counted);
            return Err(NotFast(Some(stripe)));
        }
        Ok(ReadGuard {
            // SAFETY: this reader is counted, and no writer holds `&mut T`
            // until it is uncounted: it read `FAST` before and after its
            // count (a writer taking the lock meanwhile or later saw the
            // count after a heavy barrier, its own or an earlier writer's,
            // or left before the second read; see `read`).
            data: unsafe { self.data.shared() },
            counted,
        })
    }

    /// [`read`](Self::read) as a slow reader, after
    /// [`try_read_fast`](Self::try_read_fast) returned `not_fast`.
    #[inline(always)]
    pub(in crate::cache) fn read_not_fast<'a>(&'a self, not_fast: NotFast<'a>) -> ReadGuard<'a, T> {
        self.read_not_fast_with(not_fast, true)
    }

    /// [`read_not_fast`](Self::read_not_fast); `pass_own` false only in
    /// the loom models' broken twin.
    #[inline(always)]
    fn read_not_fast_with<'a>(&'a self, not_fast: NotFast<'a>, pass_own: bool) -> ReadGuard<'a, T> {
        let (stripe, counted) = if let NotFast(Some(stripe)) = not_fast {
            debug_assert!(
                self.stripes
                    .as_ptr_range()
                    .contains(&std::ptr::from_ref(stripe)),
                "a NotFast of another lock"
            );
            Self::count_owner(stripe)
        } else {
            // No stripe of this lock owned: the thread has no number, or
            // one this lock has no stripe for, or it has not locked yet
            // (its first lock claims a number, and it may then own one
            // here).
            let (owned, sharer) = HELD.with(|h| {
                let index = h.stripe_index();
                let owned = h.owned.get();
                let sharer = (owned >= self.stripes.len()).then(|| (index, h.reads.begin(self.id)));
                (owned, sharer)
            });
            match sharer {
                None => Self::count_owner(&self.stripes[owned]),
                Some((index, depth)) => {
                    let stripe = self.stripe(index);
                    stripe.enter(false);
                    // From here a panic uncounts the reader and restores
                    // the record.
                    (stripe, Counted::sharer(stripe, depth, self.id))
                }
            }
        };
        smp_mb();
        if self.block.is_set() {
            self.wait_for_writer(stripe, counted.own, pass_own);
        }
        ReadGuard {
            // SAFETY: this reader is counted and saw no `block` (or its
            // thread reads this lock already — its stripe's `own_count`
            // or its record says so; guards drop in order, see `Counted`
            // — and that read, still counted, keeps any writer waiting),
            // so no writer has `&mut T` until it is uncounted (when the
            // guard drops): a writer sets `block` before reading the
            // counts.
            data: unsafe { self.data.shared() },
            counted,
        }
    }

    /// The fast read's count: the owner of stripe number `owned` counts
    /// itself with a plain store, then reads the state word again; returns
    /// the count and that word.
    #[inline(always)]
    fn count_fast<'a>(&'a self, stripe: &'a Stripe, owned: usize) -> (Counted<'a>, usize) {
        barrier::enter(owned);
        stripe.enter_fast();
        #[cfg_attr(not(mmbatch_loom), allow(unused_mut))]
        let mut counted = Counted::owner(stripe);
        #[cfg(mmbatch_loom)]
        {
            counted.fast = Some(owned);
        }
        barrier::light(owned);
        let now = self.block.state();
        barrier::light(owned);
        (counted, now)
    }

    /// Counts an owner in `stripe` with a barrier (a slow read).
    #[inline(always)]
    fn count_owner(stripe: &CachePadded<Stripe>) -> (&Stripe, Counted<'_>) {
        // SeqCst on both sides (`smp_mb()` in the kernel).
        stripe.enter(true);
        // From here a panic uncounts the reader.
        (&**stripe, Counted::owner(stripe))
    }

    /// Looks whether the lock has gone without a write for its wait (as
    /// this stripe's lookups last looked; see `spell.rs`): then owners'
    /// reads go fast. Lookups call it every so many of their counts
    /// ([`Stripe::count`]).
    #[cold]
    #[inline(never)]
    pub(super) fn look_for_quiet(&self, stripe: &Stripe) {
        // (No `let` chain: the MSRV, 1.85, predates them.)
        #[cfg(not(mmbatch_loom))]
        if let Some(now) = self.spell.quiet(&stripe.seen) {
            if barrier::available() && self.block.go_fast() {
                self.spell.began(now);
            }
        }
        #[cfg(mmbatch_loom)]
        let _ = stripe;
    }

    /// Lets owners' reads of this free lock skip their barrier from now
    /// on, where the heavy barrier that ends it is available (the tests;
    /// true if it did).
    #[cfg(test)]
    pub(super) fn go_fast(&self) -> bool {
        #[cfg(not(mmbatch_loom))]
        if !barrier::available() {
            return false;
        }
        self.block.go_fast()
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
        let (read_before, writing) = HELD.with(|h| {
            let read_before = if own {
                // This read is counted already.
                stripe.owner_reads() > 1
            } else {
                h.reads.held_before(self.id)
            };
            (read_before, h.writes.holds(self.id))
        });
        if pass_own && read_before {
            return;
        }
        if writing {
            // The guard under construction is dropped by the unwind.
            panic!(
                "LruCache re-entered: this thread is changing an entry's shard and, from user \
                 code run under that shard's lock (a key's Eq, a value's Clone, compute's \
                 function, a retain, remove_if or replace_if predicate), looked the shard up \
                 again; the lookup would deadlock waiting for the change to end. Do not use \
                 the cache from Eq, Clone, or a function the cache calls"
            );
        }
        #[cfg(all(test, not(mmbatch_loom)))]
        let mut retries = 0;
        loop {
            stripe.leave(own);
            self.block.wait_clear();
            stripe.enter(own);
            smp_mb();
            if !self.block.is_set() {
                return;
            }
            // Each retry follows a writer that took the lock again before
            // this reader rechecked, and no unit test writes one lock more
            // than 20 000 times while it is read: 210 000 retries is a
            // protocol that never lets the reader in, and the crate's
            // tests abort rather than spin on.
            #[cfg(all(test, not(mmbatch_loom)))]
            {
                retries += 1;
                crate::sync::bound_in_tests(
                    retries,
                    crate::sync::TEST_SPIN_ROUNDS,
                    "a reader turned back by writers",
                );
            }
        }
    }

    /// Waits until no reader holds the lock through any stripe (the
    /// writer's `rcuwait_wait_event(..., readers_active_check(sem))`);
    /// true once none does. False if the readers have not all left after
    /// `patience` rounds of waiting ([`give_way_after`]): the writer then
    /// steps back (see [`write`](Self::write)). Under loom it waits as
    /// long as it takes.
    #[inline]
    fn wait_for_readers(&self, patience: u32) -> bool {
        #[cfg(mmbatch_loom)]
        let _ = patience;
        let mut round = 0;
        for s in self.stripes.iter() {
            while !s.idle() {
                #[cfg(not(mmbatch_loom))]
                if round >= patience {
                    return false;
                }
                spin(&mut round);
            }
        }
        true
    }

    /// Exclusive access (`percpu_down_write`): one writer at a time sets
    /// `block`, then waits for every stripe's readers to leave. A writer
    /// that has waited [`GIVE_WAY_AFTER`] for them clears `block` for
    /// [`GIVE_WAY_FOR`] and starts again, so that readers nested across
    /// locks never wait for each other through two writers forever; each
    /// step back doubles its next wait ([`give_way_after`]), so that
    /// readers slower than the first wait cannot hold it off for good.
    ///
    /// The small helpers it calls (`Gate::take`, `Stripe::idle`,
    /// `Record::holds`, `Writing`, `Unblock`) are `#[inline]`: they are not
    /// generic, and a user's crate, which instantiates this, cannot inline
    /// them otherwise (no LTO by default).
    ///
    /// # Panics
    /// If the calling thread reads or writes this lock already (user code
    /// run under it called back into the cache): it would wait for itself.
    /// If the lock was fast and no heavy barrier can be had ([`NoBarrier`]).
    #[inline]
    pub(super) fn write(&self) -> WriteGuard<'_, T> {
        match self.try_write() {
            Ok(guard) => guard,
            Err(NoBarrier) => no_barrier(),
        }
    }

    /// Whether the calling thread reads this lock (its owned stripe's
    /// count, or its record of shared reads) and whether it writes it.
    #[inline]
    fn held(&self) -> (bool, bool) {
        HELD.with(|h| {
            let reading = match self.stripes.get(h.owned.get()) {
                Some(own) => own.owner_reads() > 0,
                None => h.reads.holds(self.id),
            };
            (reading, h.writes.holds(self.id))
        })
    }

    /// [`write`](Self::write) for work a lookup may leave to the next
    /// writer, which never waits: `None` where this thread holds the lock
    /// already (a lookup from user code run under it), another writer
    /// holds it, the lock is fast (the write would owe a heavy barrier and
    /// end owners' fast reads), or a reader is still inside after
    /// [`CHEAP_WAIT`] rounds in all. Why: a lookup that waited could close a
    /// cycle the cache promises to break — two threads each reading one
    /// shard from user code run under the other's read lock — where a
    /// waiting writer's give-way cannot help, the reads it waits for
    /// being the other waiter's own.
    pub(super) fn write_if_cheap(&self) -> Option<WriteGuard<'_, T>> {
        let (reading, writing) = self.held();
        if reading || writing {
            return None;
        }
        if !self.block.try_take() {
            return None;
        }
        // Cleared however this ends.
        let unblock = Unblock(&self.block);
        smp_mb();
        // One budget for every stripe.
        let mut round = 0;
        for s in self.stripes.iter() {
            while !s.idle() {
                if round == CHEAP_WAIT {
                    return None;
                }
                round += 1;
                std::hint::spin_loop();
                #[cfg(mmbatch_loom)]
                loom::thread::yield_now();
            }
        }
        // A write, for the fast mode's quiet: only one that happens.
        #[cfg(not(mmbatch_loom))]
        self.spell.wrote();
        let writing = Writing::new(self.id);
        Some(WriteGuard {
            // SAFETY: as in `try_write`: this writer set `block` from clear
            // (no other writer holds it, and the lock was not fast, so
            // every reader counts itself before it reads `block`), and
            // every stripe's readers have left since: new readers see
            // `block` and wait, so this is the only reference to `T` until
            // the guard drops.
            data: unsafe { self.data.exclusive() },
            lock: self,
            _writing: writing,
            _unblock: unblock,
        })
    }

    /// [`write`](Self::write), or [`NoBarrier`] where it would panic for
    /// want of a heavy barrier: the lock is then fast and unwritten, as it
    /// was (its spell counts the attempt as a write), and readable. For
    /// clean-up that must not panic.
    ///
    /// # Panics
    /// As [`write`](Self::write), if the calling thread holds this lock.
    pub(super) fn try_write(&self) -> Result<WriteGuard<'_, T>, NoBarrier> {
        let (reading, writing) = self.held();
        if reading || writing {
            panic!(
                "LruCache re-entered: user code run under an entry's shard lock (a value's \
                 Clone, a key's Eq, compute's function, a retain, remove_if or replace_if \
                 predicate) called back into the cache to change that shard; the change would \
                 deadlock waiting for this thread's own {} to end. Do not change the cache \
                 from Clone, Eq, or a function the cache calls",
                if writing { "change" } else { "lookup" }
            );
        }
        // Step backs so far (the writer's patience grows with them).
        #[cfg_attr(mmbatch_loom, allow(unused_mut, unused_variables))]
        let mut gave_way = 0u32;
        #[cfg(all(test, not(mmbatch_loom)))]
        let mut gave_way_in_tests_count = 0;
        loop {
            let was_fast = self.block.take();
            // Cleared however this ends, even by a panic before the guard.
            let unblock = Unblock(&self.block);
            #[cfg(not(mmbatch_loom))]
            self.spell.wrote();
            if was_fast {
                // `rcu_sync_enter`'s grace period: every fast reader's count
                // is visible now, or the reader sees `block`.
                #[cfg(not(mmbatch_loom))]
                let start = spell::now();
                if !barrier::heavy() {
                    // Fast readers may be inside unseen: the lock goes back
                    // as it was, fast, so that the next writer owes the
                    // barrier too, and this change panics.
                    std::mem::forget(unblock);
                    #[cfg(not(mmbatch_loom))]
                    self.block.give_back_fast();
                    return Err(NoBarrier);
                }
                #[cfg(not(mmbatch_loom))]
                self.spell.ended(start);
            }
            smp_mb();
            #[cfg(not(mmbatch_loom))]
            let patience = give_way_after(gave_way);
            #[cfg(mmbatch_loom)]
            let patience = 0;
            if self.wait_for_readers(patience) {
                let writing = Writing::new(self.id);
                return Ok(WriteGuard {
                    // SAFETY: this writer set `block` (no other writer holds
                    // it until it is cleared) and every stripe's readers
                    // have left: new readers see `block` and wait, so this
                    // is the only reference to `T` until the guard drops.
                    data: unsafe { self.data.exclusive() },
                    lock: self,
                    _writing: writing,
                    _unblock: unblock,
                });
            }
            // A reader held on: it may be waiting, from user code, for a
            // lock whose writer waits for a reader that waits for this one
            // (crossed nested reads). Step back, unwritten, until readers
            // waiting for `block` have seen it clear, then take it again.
            drop(unblock);
            #[cfg(not(mmbatch_loom))]
            std::thread::sleep(GIVE_WAY_FOR);
            #[cfg(not(mmbatch_loom))]
            {
                gave_way += 1;
            }
            #[cfg(all(test, not(mmbatch_loom)))]
            gave_way_in_tests(&mut gave_way_in_tests_count);
        }
    }
}

/// A fast lock's writer could not have the heavy barrier it owes (see
/// [`barrier::heavy`]): the lock cannot be changed now without risking a
/// fast reader inside unseen.
#[derive(Debug)]
pub(super) struct NoBarrier;

/// [`ShardLock::write`]'s panic for [`NoBarrier`].
#[cold]
#[inline(never)]
fn no_barrier() -> ! {
    panic!(
        "LruCache: changing a shard whose lookups skip their memory barrier needs a barrier \
         on every thread of the process, and none could be had: membarrier(2) failed (a \
         seccomp filter installed after the cache went fast?) and the kernel refused to move \
         this thread onto each CPU (sched_setaffinity). Allow either system call, or build \
         the cache with Builder::fast_reads(false)"
    )
}

/// A lock id no other lock has had (from 1: 0 is none).
fn next_id() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(all(mmbatch_loom, test))]
mod broken;
#[cfg(all(test, not(mmbatch_loom)))]
pub(super) mod tests;
