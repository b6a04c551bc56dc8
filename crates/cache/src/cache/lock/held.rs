//! What each thread holds ([`Held`]): its stripe numbers — the
//! round-robin one every thread has, and the one it owns if it is among
//! the first [`MAX_STRIPES`] live threads (`OWNERS`, given back at its
//! exit) — and the locks it reads and writes.

use std::cell::Cell;

#[cfg_attr(mmbatch_loom, allow(unused_imports))]
use super::MAX_STRIPES;

/// What a thread holds: its stripe number, and the locks it reads and
/// writes (their ids), in the order it took them. User code runs under a
/// shard's lock — a key's `Eq` on every lookup, a value's `Clone` on a
/// hit — and may call back into the cache. A lookup there on a shard its
/// thread reads already must not wait for a writer (the writer waits for
/// that first read); a change there, or a lookup on a shard its thread is
/// changing, would wait for itself, and panics instead — however long
/// the chain: a thread that reads shard A, then B (from a `Clone` under
/// A), then changes A (from a `Clone` under B) panics too. Only the first
/// [`NEST`] locks of each kind are recorded.
///
/// A thread that owns its stripe number knows its reads of a lock with
/// more stripes than that number without a record, at any depth: they
/// are its count in that lock's stripe (`own_count`), which no other
/// thread writes. Only sharers record reads (in locks of fewer stripes,
/// an owner is one): recording an owner's reads too made a pure-read
/// lookup longer and slower (measured:
/// `docs/cache.md#lock-implementation-measurements`).
///
/// Kept beside the thread's stripe numbers, which a sharer's read looks
/// up anyway, in fixed arrays of plain cells ([`Record`]): a load and two
/// stores a lookup, in a line the thread alone writes.
pub(super) struct Held {
    /// The thread's stripe number, `usize::MAX` until it first locks.
    pub(super) stripe: Cell<usize>,
    /// The stripe number the thread owns ([`NONE`] for none), claimed with
    /// `stripe`.
    pub(super) owned: Cell<usize>,
    /// The locks it reads through shared stripes (more than one only when
    /// user code run under a lock calls back into the cache).
    pub(super) reads: Record,
    /// The locks it writes.
    pub(super) writes: Record,
}

/// How many nested locks of each kind a thread's record names: a chain of
/// calls back into the cache deeper than this is not followed past it.
pub(super) const NEST: usize = 8;

/// The locks of one kind a thread holds: how many, and the ids of the
/// first [`NEST`], outermost first.
pub(super) struct Record {
    n: Cell<usize>,
    ids: [Cell<usize>; NEST],
}

impl Record {
    const fn new() -> Self {
        Self {
            n: Cell::new(0),
            ids: [const { Cell::new(0) }; NEST],
        }
    }

    /// Records that the thread takes lock `id`; returns what to give
    /// [`end`](Self::end) when it lets it go.
    #[inline(always)]
    pub(super) fn begin(&self, id: usize) -> usize {
        let n = self.n.get();
        if let Some(c) = self.ids.get(n) {
            c.set(id);
        }
        self.n.set(n + 1);
        n
    }

    /// Lets the innermost lock go, `n` what its [`begin`](Self::begin)
    /// returned.
    #[inline(always)]
    pub(super) fn end(&self, n: usize) {
        self.n.set(n);
    }

    /// Whether the thread holds lock `id`.
    #[inline]
    pub(super) fn holds(&self, id: usize) -> bool {
        self.among_first(self.n.get(), id)
    }

    /// Whether the thread held lock `id` before its innermost one (the
    /// read being taken, when a reader finds a writer).
    pub(super) fn held_before(&self, id: usize) -> bool {
        self.among_first(self.n.get().saturating_sub(1), id)
    }

    #[inline]
    fn among_first(&self, n: usize, id: usize) -> bool {
        self.ids[..n.min(NEST)].iter().any(|c| c.get() == id)
    }

    /// The innermost lock, if recorded (debug checks).
    #[cfg(debug_assertions)]
    pub(super) fn innermost(&self) -> Option<usize> {
        let n = self.n.get().checked_sub(1)?;
        self.ids.get(n).map(Cell::get)
    }
}

/// No stripe number owned.
pub(super) const NONE: usize = usize::MAX;

impl Held {
    /// The thread's stripe number (reduced modulo a lock's stripes):
    /// handed out round-robin at its first lock, so the threads that start
    /// together (a pool, a benchmark's workers) get different stripes.
    #[inline]
    pub(super) fn stripe_index(&self) -> usize {
        let i = self.stripe.get();
        if i != usize::MAX {
            return i;
        }
        self.first_lock()
    }

    /// The thread's first lock: its round-robin stripe number, and a
    /// stripe number of its own if one is free.
    #[cold]
    fn first_lock(&self) -> usize {
        let i = next_stripe();
        self.stripe.set(i);
        self.owned.set(claim_owned());
        i
    }
}

#[cfg(not(mmbatch_loom))]
std::thread_local! {
    pub(super) static HELD: Held = const {
        Held {
            stripe: Cell::new(usize::MAX),
            owned: Cell::new(NONE),
            reads: Record::new(),
            writes: Record::new(),
        }
    };
    /// Gives the owned stripe number back when the thread exits.
    static RELEASE: Cell<Option<Release>> = const { Cell::new(None) };
}

/// The stripe numbers owned by live threads, a bit each.
#[cfg(not(mmbatch_loom))]
static OWNERS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

// Every stripe number below `MAX_STRIPES` has a bit.
#[cfg(not(mmbatch_loom))]
const _: () = assert!(MAX_STRIPES <= 8);

/// Claims the lowest free stripe number for the calling thread, until it
/// exits ([`NONE`] if all are taken, or if the thread is exiting: a lock
/// taken from another thread-local's destructor).
#[cfg(not(mmbatch_loom))]
fn claim_owned() -> usize {
    use std::sync::atomic::Ordering;
    RELEASE
        .try_with(|release| {
            let mut owners = OWNERS.load(Ordering::Relaxed);
            loop {
                let i = owners.trailing_ones() as usize;
                if i >= MAX_STRIPES {
                    return NONE;
                }
                // Acquire: the last owner's stores to its counts happen
                // before this thread's (its `Release` gave the bit back).
                match OWNERS.compare_exchange_weak(
                    owners,
                    owners | 1 << i,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        release.set(Some(Release(i)));
                        return i;
                    }
                    Err(now) => owners = now,
                }
            }
        })
        .unwrap_or(NONE)
}

/// Under loom, threads own no stripe number unless a model pins one
/// ([`set_owned`]).
#[cfg(mmbatch_loom)]
fn claim_owned() -> usize {
    NONE
}

/// A thread's owned stripe number, given back at its exit: no count of it
/// is held then (guards do not outlive the calls that take them), and a
/// lock taken later in the thread's exit shares a stripe instead.
#[cfg(not(mmbatch_loom))]
struct Release(usize);

#[cfg(not(mmbatch_loom))]
impl Drop for Release {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        // `HELD` has no destructor: it is there to the thread's end.
        HELD.with(|h| h.owned.set(NONE));
        // Release: this thread's count stores happen before the next
        // owner's.
        OWNERS.fetch_and(!(1u8 << self.0), Ordering::Release);
    }
}

#[cfg(mmbatch_loom)]
loom::thread_local! {
    pub(super) static HELD: Held = Held {
        stripe: Cell::new(usize::MAX),
        owned: Cell::new(NONE),
        reads: Record::new(),
        writes: Record::new(),
    };
}

/// The calling thread's stripe number.
#[inline]
pub(super) fn stripe_index() -> usize {
    HELD.with(Held::stripe_index)
}

#[cfg(not(mmbatch_loom))]
fn next_stripe() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Under loom, round-robin within each execution (loom's statics start
/// afresh with each), so every replay hands out the same stripes.
#[cfg(mmbatch_loom)]
fn next_stripe() -> usize {
    use crate::sync::{AtomicUsize, Ordering};
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Pins the calling thread to stripe `i` (models and tests, to put a
/// reader and a writer on given stripes).
#[cfg(test)]
pub(crate) fn set_stripe(i: usize) {
    HELD.with(|h| {
        h.stripe_index();
        h.stripe.set(i);
    });
}

/// Makes the calling thread count its reads as the owner of stripe `i`
/// ([`NONE`]: as no owner). Loom models only: two live threads owning one
/// number is the misuse the `OWNERS` bits rule out.
#[cfg(all(test, mmbatch_loom))]
pub(crate) fn set_owned(i: usize) {
    HELD.with(|h| {
        h.stripe_index();
        h.owned.set(i);
    });
}

/// Makes the calling thread share stripes as a thread that owns no
/// number does (tests of the record). It keeps its number, if any, until
/// it exits: no other thread owns it meanwhile.
#[cfg(all(test, not(mmbatch_loom)))]
pub(crate) fn disown() {
    HELD.with(|h| {
        h.stripe_index();
        h.owned.set(NONE);
    });
}

/// The stripe number the calling thread owns, after its first lock.
#[cfg(all(test, not(mmbatch_loom)))]
pub(crate) fn owned() -> usize {
    HELD.with(|h| {
        h.stripe_index();
        h.owned.get()
    })
}
