//! [`Gate`]: a shard lock's `block` (`sem->block`), which is also the
//! writers' lock, and how its waiters wait.

#[cfg(not(loom))]
use crate::sync::spin;
use crate::sync::{AtomicBool, Ordering};

/// A writer's `block`, cleared on drop: the lock released, with a plain
/// store (no waiter sleeps on a queue that would need waking).
pub(super) struct Unblock<'a>(pub(super) &'a Gate);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// `block`: set by the writer that holds the lock. Whoever waits for it
/// to clear — a writer for another, a reader for a writer — polls
/// (`sync::spin`: spins, yields, then naps), so clearing it is a plain
/// store with no one to wake.
///
/// Under loom the waiters sleep on a condition variable the writer
/// notifies instead: loom explores every schedule, including one where
/// two polling threads (a reader waiting for the writer, the writer for
/// another reader's count) take turns forever and the thread they wait
/// for never runs — a schedule no real scheduler keeps up, which loom
/// cannot tell from a hang. The handshake the models check (the writer
/// sets `block` then reads the counts, a reader counts itself then reads
/// `block`) is the same code either way.
pub(super) struct Gate(
    AtomicBool,
    #[cfg(loom)] crate::sync::Mutex<()>,
    #[cfg(loom)] crate::sync::Condvar,
);

impl Gate {
    pub(super) fn new() -> Self {
        Gate(
            AtomicBool::new(false),
            #[cfg(loom)]
            crate::sync::Mutex::new(()),
            #[cfg(loom)]
            crate::sync::Condvar::new(),
        )
    }

    /// Whether a writer holds or is draining the lock: the reader's side
    /// of the handshake, SeqCst after its count.
    #[inline]
    pub(super) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets `block` whether or not another writer has it: the broken
    /// writer of a loom model only.
    #[cfg(all(loom, test))]
    pub(super) fn set_unconditionally(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Sets `block` once no other writer has it: the writers' lock. SeqCst:
    /// this is the writer's side of the handshake, ordered before its
    /// loads of the readers' counts.
    pub(super) fn take(&self) {
        while self
            .0
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            self.wait_clear();
        }
    }

    /// Waits until no writer holds the lock (a hint: the caller checks
    /// again with its own ordering).
    #[cfg(not(loom))]
    pub(super) fn wait_clear(&self) {
        let mut round = 0;
        while self.0.load(Ordering::Relaxed) {
            spin(&mut round);
        }
    }

    /// See the std version and the type's docs.
    #[cfg(loom)]
    pub(super) fn wait_clear(&self) {
        let mut parked = crate::sync::lock(&self.1);
        while self.0.load(Ordering::Relaxed) {
            parked = self.2.wait(parked).unwrap();
        }
    }

    /// Clears `block`. Release: the writer's writes happen before a reader
    /// that sees it clear.
    ///
    /// SeqCst under Miri: the nightly Miri this workspace pins (2026-05-19)
    /// lets a SeqCst load read a Release store that happens before a later
    /// SeqCst read-modify-write of the same atomic — the next writer's
    /// compare-and-swap — which C++20 forbids (rust-lang/miri#5104, fixed
    /// after it). A reader then saw `block` clear beside that writer and
    /// Miri reported the race the rule excludes. The Release store is
    /// correct by C++20 and on every target; the stronger one only keeps
    /// Miri from exploring the forbidden outcome.
    fn clear(&self) {
        #[cfg(loom)]
        let _parked = crate::sync::lock(&self.1);
        self.0.store(
            false,
            if cfg!(miri) {
                Ordering::SeqCst
            } else {
                Ordering::Release
            },
        );
        #[cfg(loom)]
        self.2.notify_all();
    }
}
