//! A thread's batch ([`Slot`]: a single-producer ring with lock-serialised
//! consumers) and the registry that finds the calling thread's slot.

use core::mem::MaybeUninit;

#[cfg(not(mmbatch_loom))]
use crossbeam_utils::CachePadded;

use crate::{
    PageVec,
    sync::{AtomicUsize, Mutex, Ordering, UnsafeCell, lock},
};

/// Counters of a slot, written only by consumers holding its lock.
#[derive(Default)]
pub(super) struct SlotStats {
    /// Ops taken out of the ring.
    pub(super) taken: u64,
    pub(super) batches: u64,
    pub(super) drains: u64,
    pub(super) locks: u64,
}

/// One thread's batch: a single-producer ring with lock-serialised
/// consumers. See the module docs for the protocol.
pub(super) struct Slot<T, const N: usize> {
    /// Where the next op goes, a position in `[0, 2N)` (see
    /// [`next`](Self::next)). Written only by the owner.
    pub(super) tail: AtomicUsize,
    /// The position of the oldest op not taken. Written only under `lock`.
    pub(super) head: AtomicUsize,
    /// Ops applied with `apply_now`. Written only by the owner.
    pub(super) immediate: AtomicUsize,
    /// Serialises consumers, and is held while they apply.
    pub(super) lock: Mutex<SlotStats>,
    /// Cell `i % N` ([`cell`](Self::cell)) holds the op at position `i`
    /// for `i` from `head` up to `tail`.
    pub(super) ring: [UnsafeCell<MaybeUninit<T>>; N],
}

// SAFETY: a cell of `ring` is written only by the owner, and only while it
// is outside [head, tail) — after the consumer that emptied it published
// `head` (Release, read by the owner with Acquire); it is read only by a
// consumer holding `lock`, and only inside [head, tail) — after the owner
// published `tail` (Release, read with Acquire). So no cell is accessed by
// two threads without a happens-before edge between them, and ops only move
// between threads, which `T: Send` allows.
unsafe impl<T: Send, const N: usize> Sync for Slot<T, N> {}

impl<T, const N: usize> Slot<T, N> {
    /// The position after `i`. Positions count modulo `2N`: a multiple of
    /// `N`, so cell `i % N` follows on from one lap to the next whatever
    /// `N` is, and twice `N`, so that a full ring (`N` ops) is told from
    /// an empty one.
    #[inline]
    pub(super) fn next(i: usize) -> usize {
        if i + 1 == 2 * N { 0 } else { i + 1 }
    }

    /// The cell of position `i` (`i % N`, for `i` in `[0, 2N)`).
    #[inline]
    pub(super) fn cell(i: usize) -> usize {
        if i >= N { i - N } else { i }
    }

    /// The ops waiting between positions `head` and `tail`.
    #[inline]
    pub(super) fn len(head: usize, tail: usize) -> usize {
        if tail >= head {
            tail - head
        } else {
            tail + 2 * N - head
        }
    }

    pub(super) fn new() -> Self {
        Self::new_at(0)
    }

    /// An empty slot whose positions start at `pos` (taken modulo `2N`).
    pub(super) fn new_at(pos: usize) -> Self {
        let pos = pos % (2 * N);
        Self {
            tail: AtomicUsize::new(pos),
            head: AtomicUsize::new(pos),
            immediate: AtomicUsize::new(0),
            lock: Mutex::new(SlotStats::default()),
            ring: core::array::from_fn(|_| UnsafeCell::new(MaybeUninit::uninit())),
        }
    }

    /// Appends `op`; `Ok(true)` when the ring is now full and must be
    /// applied, `Err(op)` if it was already full.
    ///
    /// # Safety
    /// - Only the slot's owner thread may call this (it is the ring's single
    ///   producer).
    #[inline]
    pub(super) unsafe fn push(&self, op: T) -> Result<bool, T> {
        let tail = self.tail.load(Ordering::Relaxed);
        // Acquire: a consumer's reads of the cells it emptied happen-before
        // we overwrite them.
        let head = self.head.load(Ordering::Acquire);
        let len = Self::len(head, tail);
        debug_assert!(len <= N);
        if len >= N {
            return Err(op);
        }
        self.ring[Self::cell(tail)].with_mut(|cell| {
            // SAFETY: fewer than N ops wait, so cell `tail % N` holds none
            // of them (theirs are the `len` cells before it, modulo N): no
            // consumer reads it, and the caller is the only producer.
            // Overwriting does not drop: the cell holds no op.
            unsafe { (*cell).write(op) };
        });
        // Release: publishes the op to consumers that Acquire `tail`.
        self.tail.store(Self::next(tail), Ordering::Release);
        Ok(len + 1 == N)
    }

    /// Moves every waiting op into `out`, in order, counting them in
    /// `held`. The caller holds `lock` (witnessed by `held`, its guarded
    /// counters) and `out` is empty.
    pub(super) fn take(&self, held: &mut SlotStats, out: &mut PageVec<T, N>) {
        debug_assert!(out.is_empty());
        // Only lock holders write `head`.
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: the owner's writes of cells before `tail` are visible.
        let tail = self.tail.load(Ordering::Acquire);
        let len = Self::len(head, tail);
        // Checked in release builds too: past N, the pushes below would
        // write out of bounds (a push interrupted by a signal handler that
        // pushes to the same slot breaks the single-producer contract so).
        assert!(len <= N, "a batch slot holds more ops than its N cells");
        held.taken += len as u64;
        let mut i = head;
        while i != tail {
            let op = self.ring[Self::cell(i)].with_mut(|cell| {
                // SAFETY: `cell` points into `self.ring`, valid for reads,
                // and we hold `lock`, so no other consumer touches it.
                let op = unsafe { cell.read() };
                // SAFETY: `i` is from `head` up to `tail`: the owner
                // initialised this cell
                // before publishing `tail`. It is read once: `head` then
                // moves past it.
                unsafe { op.assume_init() }
            });
            // SAFETY: at most `len` <= N ops go into the empty `out`.
            unsafe { out.push_unchecked(op) };
            i = Self::next(i);
        }
        // Release: our reads above happen-before the owner reuses the cells.
        self.head.store(tail, Ordering::Release);
    }
}

impl<T, const N: usize> Drop for Slot<T, N> {
    fn drop(&mut self) {
        // Exclusive access: drop whatever was never applied.
        let mut batch = PageVec::<T, N>::new();
        self.take(&mut lock(&self.lock), &mut batch);
    }
}

/// Touched before a thread first makes a slot, and destroyed with the
/// thread's thread-locals: after `thread_local`'s own guard of the id it
/// gives the thread (which frees the id) when the batcher gave that id,
/// before it when another `ThreadLocal` did. Past the guard,
/// `ThreadLocal::get_or` panics taking a new id, and a panic out of a
/// thread-local's destructor aborts the process: a destructor that queued
/// on a batcher aborted so (a thread-local first touched before the
/// thread's first `queue`).
#[cfg(not(mmbatch_loom))]
struct Alive;

#[cfg(not(mmbatch_loom))]
impl Drop for Alive {
    // A destructor of its own, so that `try_with` fails once it has run.
    fn drop(&mut self) {}
}

#[cfg(not(mmbatch_loom))]
std::thread_local! {
    static ALIVE: Alive = const { Alive };
    /// Set once `get_or` panicked on this thread (its thread-locals torn
    /// down): the thread makes no slot after that. No destructor, so it
    /// reads the same to the end.
    static NO_SLOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The slots of a batcher, one per thread that ever queued.
#[cfg(not(mmbatch_loom))]
pub(super) struct Registry<T: Send, const N: usize>(
    thread_local::ThreadLocal<CachePadded<Slot<T, N>>>,
);

#[cfg(not(mmbatch_loom))]
impl<T: Send, const N: usize> Registry<T, N> {
    pub(super) fn new() -> Self {
        Self(thread_local::ThreadLocal::new())
    }

    /// The calling thread's slot, made on its first call; `None` while
    /// the thread's thread-locals are torn down, once it cannot make one
    /// (see [`ALIVE`]).
    #[inline]
    pub(super) fn local_or_insert(&self) -> Option<&Slot<T, N>> {
        match self.0.get() {
            Some(slot) => Some(slot),
            None => self.insert(),
        }
    }

    /// [`local_or_insert`](Self::local_or_insert)'s first call on a thread.
    #[cold]
    fn insert(&self) -> Option<&Slot<T, N>> {
        // Gone once the thread's thread-locals are torn down, if touched
        // before (see `ALIVE`).
        ALIVE.try_with(|_| ()).ok()?;
        if NO_SLOT.get() {
            return None;
        }
        // Where another `ThreadLocal` gave the thread its id, freed before
        // a late destructor's first call here, `ALIVE` is first touched
        // during the teardown and `get_or` panics taking a new id (its
        // message still prints, and with `panic = "abort"` it aborts):
        // caught, for a panic out of a thread-local's destructor aborts.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.0.get_or(|| CachePadded::new(Slot::new()))
        })) {
            Ok(slot) => Some(slot),
            Err(_) => {
                NO_SLOT.set(true);
                None
            }
        }
    }

    pub(super) fn local(&self) -> Option<&Slot<T, N>> {
        self.0.get().map(|s| &**s)
    }

    /// Whether this thread's thread-locals are being torn down, past the
    /// point where it may have a slot (see [`ALIVE`]): known where the
    /// thread touched `ALIVE` before, or `get_or` panicked.
    pub(super) fn exiting() -> bool {
        NO_SLOT.get() || ALIVE.try_with(|_| ()).is_err()
    }

    /// Every slot created before this call (and perhaps some created during
    /// it): a slot's creation happens-before any op pushed into it.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Slot<T, N>> {
        self.0.iter().map(|s| &**s)
    }
}

/// Under loom: a fixed set of slots, assigned to model threads by their
/// loom thread id. The id map is a std mutex, invisible to loom, so it adds
/// no happens-before edge the real `ThreadLocal` would not have.
#[cfg(mmbatch_loom)]
pub(super) struct Registry<T: Send, const N: usize> {
    pub(super) slots: Vec<Slot<T, N>>,
    pub(super) owners: std::sync::Mutex<Vec<loom::thread::ThreadId>>,
}

#[cfg(mmbatch_loom)]
impl<T: Send, const N: usize> Registry<T, N> {
    const MAX_THREADS: usize = 4;

    pub(super) fn new() -> Self {
        Self {
            slots: (0..Self::MAX_THREADS).map(|_| Slot::new()).collect(),
            owners: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub(super) fn index(&self, insert: bool) -> Option<usize> {
        let me = loom::thread::current().id();
        let mut owners = self.owners.lock().unwrap();
        if let Some(i) = owners.iter().position(|t| *t == me) {
            return Some(i);
        }
        if !insert {
            return None;
        }
        assert!(owners.len() < Self::MAX_THREADS, "too many loom threads");
        owners.push(me);
        Some(owners.len() - 1)
    }

    pub(super) fn local_or_insert(&self) -> Option<&Slot<T, N>> {
        Some(&self.slots[self.index(true).unwrap()])
    }

    pub(super) fn local(&self) -> Option<&Slot<T, N>> {
        self.index(false).map(|i| &self.slots[i])
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Slot<T, N>> {
        self.slots.iter()
    }
}
