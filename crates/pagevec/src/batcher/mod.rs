//! [`Batcher`]: queue operations on a per-thread batch, apply a full batch
//! to shared state under one lock — the protocol of the kernel's per-CPU
//! `cpu_fbatches` in `mm/swap.c` (`folio_batch_add` + `folio_batch_move_lru`,
//! `lru_add_drain`, `lru_add_drain_all`, `lru_cache_disable`).
//!
//! # Design: why the fast path takes no lock
//!
//! The kernel's per-CPU batch is protected by `local_lock`, which only
//! disables preemption: a few cycles. A userspace per-CPU slot needs a real
//! lock (two threads can run on one CPU in turn, preempted mid-push), and an
//! uncontended mutex costs two atomic read-modify-writes — as much as the
//! shared lock the batch is meant to amortise. So each *thread* owns a slot
//! (found through [`thread_local::ThreadLocal`], ~1 ns), and the slot is a
//! single-producer ring of `N` ops:
//!
//! - **Queue (owner only, no RMW, no lock):** write the op at cell `tail % N`,
//!   publish it with a `Release` store of `tail`, then a compiler-only
//!   barrier and a relaxed load of the disable count.
//! - **Apply (any consumer, under the slot's lock):** load `tail` with
//!   `Acquire`, move ops `[head, tail)` out into a [`PageVec`], store `head`
//!   with `Release` (the owner's `Acquire` load of `head` orders those reads
//!   before it reuses the cells), then apply the batch — still holding the
//!   slot lock, so batches of one thread reach the shared state in queue
//!   order even when the owner and a remote drainer race. Consumers are the
//!   owner when its batch fills (once per `N` ops) and remote
//!   [`drain_all`](Batcher::drain_all) passes; the slot lock is otherwise
//!   uncontended. Applying takes the target's lock once per run of ops with
//!   the same [`Apply::Key`] (`folio_lruvec_relock_irqsave`).
//! - **`drain_all` (`lru_add_drain_all`, with its `lru_drain_gen`):** read
//!   the generation with an `AcqRel` RMW, take the drain mutex, and if a
//!   pass that bumped the generation past it has ended whole, fold into
//!   that pass; otherwise bump it with an `AcqRel` RMW, drain every slot and
//!   record the pass as ended (a pass cut short by a panic in Apply code
//!   is not: the callers waiting on it make their own). The reads are RMWs, not
//!   loads: a drainer's increment then reads from the caller's release
//!   sequence, so every op queued before the caller began happens-before
//!   that drainer's scan; and that drainer finished its scan before
//!   releasing the mutex the folding caller then takes. (With a plain load a
//!   caller could read a stale generation after a pass had already scanned
//!   past its slot, then fold into it — the loom model `drain_all_folds`
//!   fails that way.)
//! - **`disable` (`lru_cache_disable`):** bump the disable count, run an
//!   asymmetric heavy barrier (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//!   as the kernel runs `synchronize_rcu_expedited()`), then an unfolded
//!   drain pass. The queue path's light barrier pairs with it: either the
//!   queueing thread sees the count and applies its own batch before
//!   returning, or the pass sees its op. So while disabled, no op waits.
//!
//! # Guarantees (each a loom model in `batcher/tests/`)
//! - Every queued op is applied exactly once (or dropped with the batcher
//!   if applying panicked).
//! - Every op queued before [`drain_all`](Batcher::drain_all) began (that
//!   happens-before the call) is applied when it returns; concurrent calls
//!   fold into one pass.
//! - While [disabled](Batcher::disable), no op waits in a batch.
//! - One thread's ops are applied in the order it queued them.
//! - A remote drain of a slot is safe against its owner queueing into it.
//!
//! # Costs and limits
//! Batches are per thread, not per CPU: memory and `drain_all` work grow
//! with the number of threads that ever queued. A thread's slot outlives
//! the thread (its ops wait for the next `drain_all`, or are inherited by the
//! next thread that reuses its id); dropping the `Batcher` applies them.
//! [`Apply`] code runs under the slot lock and the target's lock, neither
//! reentrant: Apply code that calls back into the batcher applying it
//! (`drain_*`, `disable`, `stats`, `any_local`, or `queue` past a full
//! batch), whichever thread's batch it applies, panics, naming the call
//! (a `Debug` print leaves the statistics out instead), where it would wait forever for a lock its own thread holds
//! ([`Held`] tracks the batchers a thread is applying).

mod held;
mod slot;
mod stats;
#[cfg(all(test, mmbatch_loom))]
mod tests;
#[cfg(all(test, not(mmbatch_loom)))]
mod unit_tests;

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::{
    PageVec, barrier,
    pagevec::PAGEVEC_SIZE,
    sync::{AtomicUsize, Mutex, Ordering, lock},
};
use held::Held;
use slot::{Registry, Slot};
pub use stats::BatchStats;

/// The shared state a [`Batcher`] applies operations to.
///
/// An op names the lock it needs through its [`Key`](Apply::Key) (in the
/// kernel, a folio's lruvec); [`lock`](Apply::lock) takes that lock and
/// [`apply`](Apply::apply) does the op's work under it. Consecutive ops with
/// equal keys share one acquisition.
pub trait Apply: Sync {
    /// One queued operation.
    type Op: Send;
    /// Which lock an op needs (`folio_lruvec`).
    type Key: Copy + Eq;
    /// Proof that the lock for one key is held, and access to what it guards.
    type Guard<'a>
    where
        Self: 'a;

    /// The lock `op` needs.
    fn key(&self, op: &Self::Op) -> Self::Key;
    /// Takes the lock for `key` (`folio_lruvec_lock_irqsave`).
    fn lock(&self, key: Self::Key) -> Self::Guard<'_>;
    /// Applies `op` under `guard`, the lock of `self.key(&op)` (the
    /// `move_fn` of `folio_batch_move_lru`).
    fn apply(&self, guard: &mut Self::Guard<'_>, op: Self::Op);
}

/// Per-thread batches of operations applied to a shared [`Apply`] target
/// under one lock per batch.
///
/// Limits a user meets:
/// - Batches are per thread: memory and [`drain_all`](Self::drain_all)'s
///   work grow with the threads that ever queued. A thread's slot
///   outlives it: ops it left wait for the next `drain_all` (or the next
///   thread given its slot).
/// - Dropping the batcher applies every op still waiting, except while
///   its thread unwinds from a panic (applying could panic again and
///   abort the process): the ops are dropped then.
/// - If [`Apply`] code panics, the op it panicked on and the rest of that
///   batch are dropped, and the batch's locks are not counted in
///   [`stats`](Self::stats).
/// - A batch of `N` ops is moved on the applying thread's stack: keep
///   `N * size_of::<Op>()` well under that stack (2 MiB for a thread
///   `std::thread::spawn` starts).
/// - [`Apply`] code runs under the thread's slot lock and the target's
///   lock. If it calls back into a batcher it is applying (`queue` past a
///   full batch or while disabled, `drain_*`, `disable`, `stats`,
///   `any_local`), that call panics naming itself, where it would wait
///   forever for a lock its own thread holds; a `Debug` print of it
///   leaves its statistics out.
///
/// ```
/// use std::sync::{Mutex, MutexGuard};
/// use mmbatch_pagevec::{Apply, Batcher};
///
/// /// A counter behind one lock, as the kernel's lruvec behind lru_lock.
/// struct Counter(Mutex<u64>);
///
/// impl Apply for Counter {
///     type Op = u64;
///     type Key = ();
///     type Guard<'a> = MutexGuard<'a, u64>;
///     fn key(&self, _: &u64) {}
///     fn lock(&self, _: ()) -> MutexGuard<'_, u64> {
///         self.0.lock().unwrap()
///     }
///     fn apply(&self, total: &mut MutexGuard<'_, u64>, n: u64) {
///         **total += n;
///     }
/// }
///
/// let batcher: Batcher<Counter, 31> = Batcher::new(Counter(Mutex::new(0)));
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| (0..100).for_each(|_| batcher.queue(1)));
///     }
/// });
/// batcher.drain_all(); // lru_add_drain_all: nothing left waiting
/// assert_eq!(*batcher.target().0.lock().unwrap(), 400);
/// let stats = batcher.stats();
/// assert_eq!(stats.ops, 400);
/// assert_eq!(stats.lock_acquisitions, stats.batches + stats.drains);
/// assert!(stats.lock_acquisitions < 400);
/// ```
#[doc(alias = "cpu_fbatches")]
#[doc(alias = "folio_batch_move_lru")]
pub struct Batcher<A: Apply, const N: usize = PAGEVEC_SIZE> {
    slots: Registry<A::Op, N>,
    /// `lru_disable_count`.
    disabled: CachePadded<AtomicUsize>,
    /// `lru_drain_gen` in `__lru_add_drain_all`.
    drain_gen: CachePadded<AtomicUsize>,
    /// The drain mutex of `__lru_add_drain_all`, guarding its counters.
    drain_lock: Mutex<DrainStats>,
    /// Ops applied at once because their thread was exiting (see
    /// [`queue_exiting`](Self::queue_exiting)), counted as immediate.
    exiting: AtomicUsize,
    /// `None` only after `into_inner` took it.
    target: Option<A>,
}

/// Takes back a [`Batcher::disable`] whose drain pass panicked.
struct UndoDisable<'a>(&'a AtomicUsize);

impl Drop for UndoDisable<'_> {
    fn drop(&mut self) {
        // Checked, as `enable` is: a stray `enable` meanwhile must not wrap.
        let _ = self
            .0
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

#[derive(Default)]
struct DrainStats {
    passes: u64,
    folded: u64,
    /// The generation of the last pass that ended whole.
    completed: usize,
}

impl<A: Apply, const N: usize> Batcher<A, N> {
    /// A batcher applying to `target`, enabled, with no batches yet. A
    /// batch capacity `N` of 0 fails the build (a constant check, which
    /// `cargo check` does not run: `cargo build` reports it).
    ///
    /// Ops wait in their thread's batch until it fills, a drain, or the
    /// batcher's drop; a thread's exit does not apply them. A batcher in
    /// a `static` is never dropped: call
    /// [`drain_all`](Self::drain_all) before the process exits (or its
    /// threads finish) where every op must reach the target.
    pub fn new(target: A) -> Self {
        const { assert!(N > 0, "a Batcher needs a batch capacity N of at least 1") };
        barrier::init();
        Self {
            slots: Registry::new(),
            disabled: CachePadded::new(AtomicUsize::new(0)),
            drain_gen: CachePadded::new(AtomicUsize::new(0)),
            drain_lock: Mutex::new(DrainStats::default()),
            exiting: AtomicUsize::new(0),
            target: Some(target),
        }
    }

    /// The shared state ops are applied to.
    ///
    /// A thread holding a lock that [`Apply::lock`] takes must not call
    /// into the batcher (`queue`, which may apply a full batch; `drain_*`,
    /// `disable`, `stats`): the call waits for that lock, held by its own
    /// thread, for ever, and no check sees it (the reentry check knows the
    /// batcher's locks, not the target's). Take the target's lock after,
    /// or apply through the batcher.
    pub fn target(&self) -> &A {
        self.target
            .as_ref()
            .expect("the target is only taken by into_inner, which consumes the Batcher")
    }

    /// Applies every waiting op, then returns the target.
    pub fn into_inner(mut self) -> A {
        self.drain_owned();
        self.target
            .take()
            .expect("the target is only taken here, by value")
    }

    /// Queues `op` on the calling thread's batch; when that batch is full,
    /// applies it under one lock per key (`folio_batch_add` +
    /// `folio_batch_move_lru`). While [disabled](Self::disable) the op is
    /// applied before this returns.
    ///
    /// From a thread-local's destructor that runs after the thread's batch
    /// is torn down, the op is still applied exactly once, after the
    /// thread's earlier ones: at once, after every thread's waiting ops (a
    /// [`drain_all`](Self::drain_all) on the calling thread; counted as
    /// [immediate](BatchStats::immediate)), or, where the thread can still
    /// be given a batch, batched as usual. [`Apply`] code then runs in a
    /// thread whose other thread-locals may be gone, and must not call back
    /// into this batcher (the reentry check needs a thread-local: it would
    /// wait for a lock its own thread holds). One case still aborts with
    /// `panic = "abort"`: a thread whose first use of any batcher is such a
    /// destructor, and whose thread id came from another `ThreadLocal`
    /// (the `thread_local` crate panics taking a new one; where panics
    /// unwind, the panic's message prints and the call goes on).
    ///
    /// Not async-signal-safe: a signal handler must not queue (a queue
    /// it interrupts on the same thread is the batch's one producer, and
    /// a full batch takes locks). After `fork`, the child may only exec:
    /// a lock another of the parent's threads held stays held.
    ///
    /// # Panics
    /// If called, past a full batch or while disabled, from [`Apply`]
    /// code applying this batcher: it would wait for a lock its own
    /// thread holds.
    #[inline]
    pub fn queue(&self, op: A::Op) {
        let Some(slot) = self.slots.local_or_insert() else {
            return self.queue_exiting(op);
        };
        // SAFETY: `local_or_insert` returns the calling thread's own slot,
        // so this thread is its only producer.
        let full = match unsafe { slot.push(op) } {
            Ok(full) => full,
            Err(op) => return self.queue_slow(slot, op),
        };
        // Pairs with the heavy barrier in `disable`: see the module docs.
        barrier::light();
        if full || self.disabled.load(Ordering::Relaxed) != 0 {
            self.drain_slot(slot);
        }
    }

    /// The ring was full on entry (only possible if applying panicked after
    /// a push): apply it, then queue again.
    #[cold]
    fn queue_slow(&self, slot: &Slot<A::Op, N>, op: A::Op) {
        self.drain_slot(slot);
        self.queue(op);
    }

    /// `queue` from a thread-local's destructor, once the thread can have
    /// no slot: applies every waiting op (this thread's earlier ones among
    /// them, which keeps its order) and then `op`, at once. A `drain_all`
    /// a call, which may fold into a concurrent pass.
    #[cold]
    fn queue_exiting(&self, op: A::Op) {
        self.drain_all();
        self.apply_exiting(op);
    }

    /// Applies `op` under its own lock for a thread that can have no slot,
    /// counted as immediate.
    fn apply_exiting(&self, op: A::Op) {
        let target = self.target();
        let mut guard = target.lock(target.key(&op));
        target.apply(&mut guard, op);
        drop(guard);
        self.exiting.fetch_add(1, Ordering::Relaxed);
    }

    /// Applies `op` at once, under its own lock, bypassing the batches (the
    /// unbatched path, for ops that cannot wait). From
    /// Apply code that holds the target's lock for the same key, it waits
    /// for that lock forever: the target's locks are the target's. Ops the
    /// calling thread queued earlier may still be waiting: call
    /// [`drain_local`](Self::drain_local) first if order matters.
    pub fn apply_now(&self, op: A::Op) {
        let Some(slot) = self.slots.local_or_insert() else {
            return self.apply_exiting(op);
        };
        let target = self.target();
        let mut guard = target.lock(target.key(&op));
        target.apply(&mut guard, op);
        drop(guard);
        // Only the owner writes `immediate`: a load and a store, no RMW.
        let n = slot.immediate.load(Ordering::Relaxed);
        slot.immediate.store(n + 1, Ordering::Relaxed);
    }

    /// Whether an op waiting in the calling thread's batch satisfies `pred`
    /// — how `__lru_cache_activate_folio` looks for a folio in this CPU's
    /// `lru_add` batch. Takes the slot's lock (uncontended unless a remote
    /// drain is running).
    ///
    /// # Panics
    /// If called from [`Apply`] code applying this batcher (see the type's
    /// guarantees): it would wait for a lock its own thread holds. `pred`
    /// runs under the slot's lock, and the same holds for it: a call back
    /// into this batcher from `pred` panics.
    pub fn any_local(&self, mut pred: impl FnMut(&A::Op) -> bool) -> bool {
        let Some(slot) = self.slots.local() else {
            return false;
        };
        // Not only its own slot: under another slot's drain this thread
        // holds the target's lock, and a remote drainer of this slot holds
        // the slot lock and waits for the target's (lock order inverted).
        Held::refuse_batcher(&self.drain_lock, "any_local");
        let _held = lock(&slot.lock);
        // `pred` is user code under the slot lock.
        let _applying = Held::enter(&self.drain_lock, slot);
        let head = slot.head.load(Ordering::Relaxed);
        // Only this thread pushes, so `tail` is its own latest store.
        let tail = slot.tail.load(Ordering::Relaxed);
        let mut i = head;
        while i != tail {
            let found = slot.ring[Slot::<A::Op, N>::cell(i)].with(|cell| {
                // SAFETY: `cell` points into the ring; holding the lock keeps
                // consumers from moving its op out, and only this thread
                // (the owner) writes cells, so a shared borrow is sound.
                let cell = unsafe { &*cell };
                // SAFETY: `i` is from `head` up to `tail`: this thread
                // pushed an op here.
                pred(unsafe { cell.assume_init_ref() })
            });
            if found {
                return true;
            }
            i = Slot::<A::Op, N>::next(i);
        }
        false
    }

    /// Applies the calling thread's waiting ops (`lru_add_drain`). From a
    /// thread-local's destructor that runs after the thread's batch is out
    /// of reach, it applies every thread's, where the thread is known to be
    /// exiting (it had made its batch itself), and otherwise leaves them to
    /// the next [`drain_all`](Self::drain_all).
    ///
    /// # Panics
    /// If called from [`Apply`] code applying this batcher (see the type's
    /// guarantees): it would wait for a lock its own thread holds.
    #[doc(alias = "lru_add_drain_cpu")]
    pub fn drain_local(&self) {
        Held::refuse_batcher(&self.drain_lock, "drain_local");
        if let Some(slot) = self.slots.local() {
            return self.drain_slot(slot);
        }
        // A thread-local's destructor, after this thread's slot is out of
        // reach: its ops are applied with everyone's. (Loom's threads
        // never get there.)
        #[cfg(not(mmbatch_loom))]
        if Registry::<A::Op, N>::exiting() {
            self.drain_all();
        }
    }

    /// Applies every thread's waiting ops; returns once every op queued
    /// before this call began is applied (`lru_add_drain_all`). Concurrent
    /// callers fold into one pass.
    ///
    /// # Panics
    /// If called from [`Apply`] code applying this batcher (see the type's
    /// guarantees): it would wait for a lock its own thread holds.
    #[doc(alias = "lru_add_drain_all")]
    pub fn drain_all(&self) {
        self.drain_all_inner(false);
    }

    fn drain_all_inner(&self, force: bool) {
        Held::refuse_batcher(&self.drain_lock, "drain_all");
        // An RMW, not a load: see "drain_all" in the module docs.
        let seen = self.drain_gen.fetch_add(0, Ordering::AcqRel);
        self.drain_all_since(seen, force);
    }

    /// The rest of `drain_all` for a caller that read generation `seen`:
    /// fold into a pass that began after and ended whole, or make one.
    fn drain_all_since(&self, seen: usize, force: bool) {
        let mut stats = lock(&self.drain_lock);
        if !force && stats.completed > seen {
            // A pass began after our RMW and ended, whole, before we got
            // the lock: it applied everything we must wait for. (One that
            // began after it and panicked half-way, in Apply code, does not
            // count: `completed` moves only at a pass's end.)
            stats.folded += 1;
            return;
        }
        let generation = self.drain_gen.fetch_add(1, Ordering::AcqRel) + 1;
        for slot in self.slots.iter() {
            self.drain_slot(slot);
        }
        stats.passes += 1;
        stats.completed = generation;
    }

    /// Makes every later op apply at once and applies every waiting op
    /// (`lru_cache_disable`), until a matching [`enable`](Self::enable).
    /// Nests: each call needs its own `enable`.
    ///
    /// # Panics
    /// If `membarrier(2)` has failed since the batcher registered it (a
    /// seccomp filter installed late) and `sched_setaffinity(2)` is refused
    /// too: no barrier pairs with the queue path's, and the call would
    /// miss ops. The batcher is then as before the call, and the next call
    /// tries again. Also if called from [`Apply`] code applying this
    /// batcher: it would wait for a lock its own thread holds.
    #[doc(alias = "lru_cache_disable")]
    pub fn disable(&self) {
        Held::refuse_batcher(&self.drain_lock, "disable");
        self.disabled.fetch_add(1, Ordering::Relaxed);
        // A pass that panics (in Apply code) leaves the batcher as it was:
        // the caller has no `disable` to match with `enable`.
        let undo = UndoDisable(&self.disabled);
        // Pairs with the light barrier in `queue`: a racing queuer either
        // sees the count, or its op is visible to the pass below.
        barrier::heavy();
        // Unfolded: a pass that began before the barrier may have missed ops
        // whose owners had not seen the count.
        self.drain_all_inner(true);
        std::mem::forget(undo);
    }

    /// Undoes one [`disable`](Self::disable) (`lru_cache_enable`).
    ///
    /// # Panics
    /// If the batcher is not disabled.
    #[doc(alias = "lru_cache_enable")]
    pub fn enable(&self) {
        let dec = self
            .disabled
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
        assert!(
            dec.is_ok(),
            "Batcher::enable called more times than Batcher::disable"
        );
    }

    /// Whether [`disable`](Self::disable) is in effect.
    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::Acquire) != 0
    }

    /// Counters summed over all slots. Takes each slot's lock in turn, so
    /// call it outside hot loops.
    ///
    /// # Panics
    /// If called from [`Apply`] code applying this batcher (see the type's
    /// guarantees): it would wait for a lock its own thread holds.
    pub fn stats(&self) -> BatchStats {
        Held::refuse_batcher(&self.drain_lock, "stats");
        let mut s = BatchStats::default();
        for slot in self.slots.iter() {
            let st = lock(&slot.lock);
            let tail = slot.tail.load(Ordering::Acquire);
            let head = slot.head.load(Ordering::Relaxed);
            let pending = Slot::<A::Op, N>::len(head, tail) as u64;
            s.ops += st.taken + pending;
            s.pending += pending;
            let immediate = slot.immediate.load(Ordering::Relaxed) as u64;
            s.immediate += immediate;
            s.batches += st.batches;
            s.drains += st.drains;
            s.lock_acquisitions += st.locks + immediate;
        }
        let exiting = self.exiting.load(Ordering::Relaxed) as u64;
        s.immediate += exiting;
        s.lock_acquisitions += exiting;
        let d = lock(&self.drain_lock);
        s.drain_all_passes = d.passes;
        s.drain_all_folded = d.folded;
        s
    }

    /// Takes `slot`'s waiting ops and applies them, holding the slot lock
    /// throughout so the owner's later batches cannot overtake them.
    fn drain_slot(&self, slot: &Slot<A::Op, N>) {
        // Any slot of this batcher, not only this one: applying another
        // thread's slot holds the target's lock, which applying this one
        // takes again.
        Held::refuse_batcher(&self.drain_lock, "queue (a full or disabled batch)");
        let mut stats = lock(&slot.lock);
        let mut batch = PageVec::<A::Op, N>::new();
        slot.take(&mut stats, &mut batch);
        match batch.len() {
            0 => return,
            n if n == N => stats.batches += 1,
            _ => stats.drains += 1,
        }
        let _applying = Held::enter(&self.drain_lock, slot);
        stats.locks += apply_batch(self.target(), &mut batch);
    }

    /// Drains every slot with exclusive access (Drop, `into_inner`).
    fn drain_owned(&mut self) {
        for slot in self.slots.iter() {
            self.drain_slot(slot);
        }
    }
}

impl<A: Apply, const N: usize> Drop for Batcher<A, N> {
    fn drop(&mut self) {
        // Apply what is waiting, so no op is lost; while unwinding, applying
        // could panic again and abort, so the ops are only dropped then.
        if self.target.is_some() && !std::thread::panicking() {
            self.drain_owned();
        }
    }
}

/// The batcher's capacity, state, [`stats`](Batcher::stats) and target.
/// From [`Apply`] code applying this batcher, where `stats` would wait
/// for a lock the thread holds (and panics), the statistics are left out:
/// a print never panics.
impl<A: Apply + fmt::Debug, const N: usize> fmt::Debug for Batcher<A, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Batcher");
        d.field("capacity", &N)
            .field("disabled", &self.is_disabled());
        if Held::applies_batcher(&self.drain_lock) {
            d.field(
                "stats",
                &format_args!("(not taken while this thread applies it)"),
            );
        } else {
            d.field("stats", &self.stats());
        }
        d.field("target", &self.target).finish()
    }
}

/// Applies (and empties) `batch` in order, taking the target's lock once
/// per run of equal keys: `folio_batch_move_lru` with
/// `folio_lruvec_relock_irqsave`. Returns the number of lock acquisitions.
///
/// This is what a [`Batcher`] does with a full batch; it is public for code
/// that collects its own [`PageVec`] (for instance, isolating a range of
/// frames under one lock).
#[doc(alias = "folio_batch_move_lru")]
pub fn apply_batch<A: Apply, const N: usize>(target: &A, batch: &mut PageVec<A::Op, N>) -> u64 {
    let mut ops = batch.drain();
    let Some(first) = ops.next() else { return 0 };
    let mut key = target.key(&first);
    let mut guard = target.lock(key);
    let mut locks = 1;
    target.apply(&mut guard, first);
    for op in ops {
        let next = target.key(&op);
        if next != key {
            drop(guard);
            key = next;
            guard = target.lock(key);
            locks += 1;
        }
        target.apply(&mut guard, op);
    }
    locks
}
