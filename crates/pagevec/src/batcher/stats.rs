//! [`BatchStats`], what a [`Batcher`] has done.

#[cfg(doc)]
use super::Batcher;

/// What a [`Batcher`] has done, summed over all slots.
///
/// `lock_acquisitions` counts the target's locks taken by applying; with a
/// single key it equals `batches + drains + immediate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchStats {
    /// Ops queued with [`Batcher::queue`] into a batch (those a
    /// thread-local's destructor queued after its thread's batch was torn
    /// down, and that were applied at once, count as `immediate`).
    pub ops: u64,
    /// Ops applied at once: with [`Batcher::apply_now`], or queued by a
    /// thread-local's destructor after the thread's batch was torn down
    /// and applied then.
    pub immediate: u64,
    /// Full batches (`N` ops) applied.
    pub batches: u64,
    /// Partial batches (1 to `N - 1` ops) applied by a drain.
    pub drains: u64,
    /// Target locks taken while applying (batches, drains and immediate ops).
    pub lock_acquisitions: u64,
    /// [`Batcher::drain_all`] passes over every slot (including those of
    /// [`Batcher::disable`]).
    pub drain_all_passes: u64,
    /// [`Batcher::drain_all`] calls that folded into a concurrent pass.
    pub drain_all_folded: u64,
    /// Ops waiting in batches now.
    pub pending: u64,
}

/// Field by field: the stats of several batchers together.
impl std::ops::Add for BatchStats {
    type Output = BatchStats;

    fn add(self, b: BatchStats) -> BatchStats {
        BatchStats {
            ops: self.ops + b.ops,
            immediate: self.immediate + b.immediate,
            batches: self.batches + b.batches,
            drains: self.drains + b.drains,
            lock_acquisitions: self.lock_acquisitions + b.lock_acquisitions,
            drain_all_passes: self.drain_all_passes + b.drain_all_passes,
            drain_all_folded: self.drain_all_folded + b.drain_all_folded,
            pending: self.pending + b.pending,
        }
    }
}

impl std::ops::AddAssign for BatchStats {
    fn add_assign(&mut self, b: BatchStats) {
        *self = *self + b;
    }
}
