//! [`Held`]: the slots whose lock the calling thread holds while it applies
//! their ops, so that [`Apply`](super::Apply) code calling back into the
//! same batcher panics with the reason instead of waiting forever for a
//! lock its own thread holds (std's `Mutex` is not reentrant).

use std::cell::RefCell;

/// A slot this thread is applying: `(batcher, slot)` addresses, kept while
/// [`Held::enter`]'s guard lives. A batcher is named by the address of its
/// drain mutex, which no other batcher can share (a batcher's own address
/// can be its target's first field's: a batcher inside the target).
pub(super) struct Held {
    entry: (usize, usize),
}

#[cfg(not(mmbatch_loom))]
std::thread_local! {
    static APPLYING: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

// Loom runs its threads on one OS thread: each needs its own list.
#[cfg(mmbatch_loom)]
loom::thread_local! {
    static APPLYING: RefCell<Vec<(usize, usize)>> = RefCell::new(Vec::new());
}

fn addr<T>(x: &T) -> usize {
    std::ptr::from_ref(x) as usize
}

impl Held {
    /// Records that this thread holds `slot`'s lock of `batcher` and
    /// applies its ops, until the guard drops (also while unwinding).
    pub(super) fn enter<B, S>(batcher: &B, slot: &S) -> Held {
        let entry = (addr(batcher), addr(slot));
        // `try_with`: while the thread exits, after the list is gone (a
        // thread-local's destructor queueing, say), nothing is recorded;
        // `with` would panic there, which aborts.
        let _ = APPLYING.try_with(|a| a.borrow_mut().push(entry));
        Held { entry }
    }

    /// Whether this thread is applying any slot of `batcher` (see
    /// [`refuse_batcher`](Self::refuse_batcher)).
    pub(super) fn applies_batcher<B>(batcher: &B) -> bool {
        let batcher = addr(batcher);
        applying(|&(b, _)| b == batcher)
    }

    /// Panics if this thread is applying any slot of `batcher`: it holds
    /// that slot's lock and the target's, and every call that takes a slot
    /// lock or applies may wait for one of them.
    pub(super) fn refuse_batcher<B>(batcher: &B, call: &str) {
        if Self::applies_batcher(batcher) {
            reentered(call);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = APPLYING.try_with(|a| {
            let mut a = a.borrow_mut();
            if let Some(i) = a.iter().rposition(|&e| e == self.entry) {
                a.remove(i);
            }
        });
    }
}

/// Whether an entry this thread is applying satisfies `pred` (none while
/// the thread exits, after the list is gone).
fn applying(pred: impl Fn(&(usize, usize)) -> bool) -> bool {
    APPLYING
        .try_with(|a| a.borrow().iter().any(&pred))
        .unwrap_or(false)
}

#[cold]
#[track_caller]
fn reentered(call: &str) -> ! {
    panic!(
        "Batcher::{call} was called from Apply code (or an any_local predicate) while this \
         thread holds that batcher's locks: it would wait for one of them forever. Apply code \
         and any_local predicates must not call back into the batcher (drain_*, disable, \
         stats, any_local, or queue past a full batch); collect what they need and call after"
    );
}
