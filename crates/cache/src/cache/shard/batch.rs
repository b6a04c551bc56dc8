//! A batch that lookups fill under the shard's read lock and the shard
//! empties under its write lock: the kernel's `folio_batch` as its per-CPU
//! LRU caches use it (`folio_batch_add`, then `folio_batch_move_lru`
//! under the lruvec lock), per shard rather than per CPU.

use crate::sync::{AtomicU32, Ordering};

/// Up to `N` nonzero values pushed by lookups under the shard's read lock
/// (readers race only with each other), taken under its write lock.
pub(in crate::cache) struct Batch<const N: usize> {
    slots: [AtomicU32; N],
    len: AtomicU32,
}

impl<const N: usize> Batch<N> {
    /// An empty batch.
    pub(in crate::cache) fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicU32::new(0)),
            len: AtomicU32::new(0),
        }
    }

    /// Under the read lock: keeps `v` (not 0, which marks an empty slot)
    /// if there is room. Returns whether it took the last slot (one pusher
    /// does, until the next drain). A full batch costs one load and no
    /// store.
    pub(in crate::cache) fn push(&self, v: u32) -> bool {
        debug_assert_ne!(v, 0, "0 marks an empty slot");
        if self.len.load(Ordering::Relaxed) as usize >= N {
            return false;
        }
        // Each racing reader claims a slot of its own.
        let i = self.len.fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(slot) = self.slots.get(i) {
            slot.store(v, Ordering::Relaxed);
        }
        i + 1 == N
    }

    /// Whether nothing is kept.
    pub(in crate::cache) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Relaxed) == 0
    }

    /// Under the write lock: hands each kept value to `f`, in the order
    /// they were pushed, and empties the batch. Plain loads and stores: no
    /// reader pushes meanwhile.
    pub(in crate::cache) fn drain(&self, mut f: impl FnMut(u32)) {
        let n = (self.len.load(Ordering::Relaxed) as usize).min(N);
        if n == 0 {
            return;
        }
        self.len.store(0, Ordering::Relaxed);
        for slot in &self.slots[..n] {
            let v = slot.load(Ordering::Relaxed);
            if v != 0 {
                slot.store(0, Ordering::Relaxed);
                f(v);
            }
        }
    }
}
