//! [`Gate`]: a shard lock's state word — `block` (`sem->block`), which is
//! also the writers' lock, and whether owners' reads skip their barrier —
//! and how its waiters wait.

#[cfg(not(mmbatch_loom))]
use crate::sync::spin;
use crate::sync::{AtomicUsize, Ordering};

/// Set while a writer holds or is draining the lock (`sem->block`).
pub(super) const BLOCK: usize = 1;
/// Set while owners' reads skip their barrier (the kernel's
/// `rcu_sync_is_idle`): set only while `BLOCK` is clear, and cleared only
/// by the writer that sets `BLOCK`, which then owes the heavy barrier.
pub(super) const FAST: usize = 2;

/// A writer's `block`, cleared on drop: the lock released, with a plain
/// store (no waiter sleeps on a queue that would need waking).
pub(super) struct Unblock<'a>(pub(super) &'a Gate);

impl Drop for Unblock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// The state word. Whoever waits for `BLOCK` to clear — a writer for
/// another, a reader for a writer — polls (`sync::spin`: spins, yields,
/// then naps), so clearing it is a plain store with no one to wake.
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
    AtomicUsize,
    #[cfg(mmbatch_loom)] crate::sync::Mutex<()>,
    #[cfg(mmbatch_loom)] crate::sync::Condvar,
);

impl Gate {
    pub(super) fn new() -> Self {
        Gate(
            AtomicUsize::new(0),
            #[cfg(mmbatch_loom)]
            crate::sync::Mutex::new(()),
            #[cfg(mmbatch_loom)]
            crate::sync::Condvar::new(),
        )
    }

    /// The word: the reader's side of the handshake, SeqCst after its
    /// count.
    #[inline]
    pub(super) fn state(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Whether a writer holds or is draining the lock.
    #[inline]
    pub(super) fn is_set(&self) -> bool {
        self.state() & BLOCK != 0
    }

    /// Sets `block` whether or not another writer has it: the broken
    /// writer of a loom model only.
    #[cfg(all(mmbatch_loom, test))]
    pub(super) fn set_unconditionally(&self) {
        self.0.store(BLOCK, Ordering::SeqCst);
    }

    /// Sets `BLOCK` once no other writer has it — the writers' lock —
    /// clearing `FAST` in the same step; returns whether `FAST` was set
    /// (the writer then owes the heavy barrier). One compare-and-swap from
    /// clear in the usual case, as before there was a fast mode. SeqCst:
    /// this is the writer's side of the handshake, ordered before its
    /// loads of the readers' counts.
    #[inline]
    pub(super) fn take(&self) -> bool {
        loop {
            match self
                .0
                .compare_exchange(0, BLOCK, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return false,
                Err(FAST) => {
                    if self
                        .0
                        .compare_exchange(FAST, BLOCK, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        return true;
                    }
                }
                Err(_) => self.wait_clear(),
            }
        }
    }

    /// Sets `BLOCK` only if the lock is free and slow, in one
    /// compare-and-swap: the writers' lock for a writer that may not wait
    /// (for another writer, or for the heavy barrier a fast lock owes).
    /// Whether it did. SeqCst, as [`take`](Self::take).
    #[inline]
    pub(super) fn try_take(&self) -> bool {
        self.0
            .compare_exchange(0, BLOCK, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Sets `FAST` if the lock is free and slow (a reader's decision; a
    /// writer in between makes it fail, and a later look tries again);
    /// whether it did.
    #[cfg(any(not(mmbatch_loom), test))]
    pub(super) fn go_fast(&self) -> bool {
        self.0
            .compare_exchange(0, FAST, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Gives the lock back fast, unwritten, as the writer that took it
    /// found it: a writer that could not have its heavy barrier. Release,
    /// as [`clear`](Self::clear).
    #[cfg(not(mmbatch_loom))]
    pub(super) fn give_back_fast(&self) {
        self.0.store(FAST, Ordering::Release);
    }

    /// Waits until no writer holds the lock (a hint: the caller checks
    /// again with its own ordering).
    #[cfg(not(mmbatch_loom))]
    pub(super) fn wait_clear(&self) {
        let mut round = 0;
        while self.0.load(Ordering::Relaxed) & BLOCK != 0 {
            spin(&mut round);
        }
    }

    /// See the std version and the type's docs.
    #[cfg(mmbatch_loom)]
    pub(super) fn wait_clear(&self) {
        let mut parked = crate::sync::lock(&self.1);
        while self.0.load(Ordering::Relaxed) & BLOCK != 0 {
            parked = self.2.wait(parked).unwrap();
        }
    }

    /// Clears the word (`BLOCK`; `FAST` is clear while it is set) with a
    /// plain store: while `BLOCK` is set no one else changes the word.
    /// Release: the writer's writes happen before a reader that sees it
    /// clear.
    ///
    /// SeqCst under Miri: the nightly Miri this workspace pins (2026-05-19)
    /// lets a SeqCst load read a Release store that happens before a later
    /// SeqCst read-modify-write of the same atomic — the next writer's
    /// compare-and-swap — which C++20 forbids (rust-lang/miri#5104, fixed
    /// after it). A reader then saw `block` clear beside that writer and
    /// Miri reported the race the rule excludes. The Release store is
    /// correct by C++20 and on every target; the stronger one only keeps
    /// Miri from exploring the forbidden outcome.
    #[inline]
    fn clear(&self) {
        #[cfg(mmbatch_loom)]
        let _parked = crate::sync::lock(&self.1);
        self.0.store(
            0,
            if cfg!(miri) {
                Ordering::SeqCst
            } else {
                Ordering::Release
            },
        );
        #[cfg(mmbatch_loom)]
        self.2.notify_all();
    }
}
