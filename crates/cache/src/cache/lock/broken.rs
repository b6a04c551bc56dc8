//! The shard lock's protocol broken on purpose, for the loom models that
//! must catch it.

use super::{Gate, ReadGuard, ShardLock, Unblock, WriteGuard, Writing, smp_mb};

impl<T> ShardLock<T> {
    /// A read that waits for writers even when its thread reads the lock
    /// already: the recursion check broken on purpose, for the loom model
    /// that must catch it (the writer waits for the first read, the second
    /// for the writer).
    pub(in crate::cache) fn read_waiting_for_writers(&self) -> ReadGuard<'_, T> {
        self.read_with(false, true)
    }

    /// A fast read that checks only `block` after its count, not whether
    /// the lock is still fast.
    pub(in crate::cache) fn read_fast_checking_only_block(&self) -> ReadGuard<'_, T> {
        self.read_with(true, false)
    }

    /// A writer that ends the fast mode without the heavy barrier (a fast
    /// reader's count may not be visible yet when it reads the counts).
    pub(in crate::cache) fn write_without_heavy_barrier(&self) -> WriteGuard<'_, T> {
        self.write_blocking_with(|block| {
            block.take();
        })
    }

    /// A writer that sets `block` with a plain store instead of taking it
    /// from `false` (a second writer is not kept out: both hold `&mut`).
    pub(in crate::cache) fn write_without_excluding_writers(&self) -> WriteGuard<'_, T> {
        self.write_blocking_with(Gate::set_unconditionally)
    }

    /// A lookup's optional write (`write_if_cheap`) that takes `block` and
    /// does not look at the readers' counts (a reader counted before
    /// `block` was set reads beside it).
    pub(in crate::cache) fn write_if_cheap_without_readers(&self) -> Option<WriteGuard<'_, T>> {
        if !self.block.try_take() {
            return None;
        }
        let unblock = Unblock(&self.block);
        smp_mb();
        Some(WriteGuard {
            // SAFETY: none: this is a broken writer a model must catch.
            data: unsafe { self.data.exclusive() },
            lock: self,
            _writing: Writing::new(self.id),
            _unblock: unblock,
        })
    }

    /// A writer that sets `block` with `block_with`, then waits for the
    /// counts as `write` does, and nothing else.
    fn write_blocking_with(&self, block_with: impl FnOnce(&Gate)) -> WriteGuard<'_, T> {
        block_with(&self.block);
        let unblock = Unblock(&self.block);
        smp_mb();
        self.wait_for_readers(0);
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
    pub(in crate::cache) fn write_checking_first(&self) -> WriteGuard<'_, T> {
        self.wait_for_readers(0);
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
