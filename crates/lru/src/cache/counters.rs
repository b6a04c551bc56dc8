//! Hit and miss counters that a get can bump without sharing a cache line
//! with other threads: one padded array per thread, written only by its
//! owner (a load and a store, no atomic read-modify-write), summed on read
//! — the per-CPU counter of the kernel's `vm_event_states`.

#[cfg(not(loom))]
use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Which counter.
#[derive(Clone, Copy, Debug)]
pub(super) enum Count {
    Hit = 0,
    Miss = 1,
}

const N: usize = 2;

#[derive(Debug, Default)]
pub(super) struct Counters {
    #[cfg(not(loom))]
    local: thread_local::ThreadLocal<CachePadded<[AtomicU64; N]>>,
    #[cfg(loom)]
    global: [AtomicU64; N],
}

impl Counters {
    #[inline]
    pub(super) fn bump(&self, c: Count) {
        #[cfg(not(loom))]
        {
            let slot = &self.local.get_or(Default::default)[c as usize];
            // Only this thread writes its slot: readers see either value.
            slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        #[cfg(loom)]
        self.global[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn read(&self, c: Count) -> u64 {
        #[cfg(not(loom))]
        {
            self.local
                .iter()
                .map(|s| s[c as usize].load(Ordering::Relaxed))
                .sum()
        }
        #[cfg(loom)]
        self.global[c as usize].load(Ordering::Relaxed)
    }
}
