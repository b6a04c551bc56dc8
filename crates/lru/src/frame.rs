//! Frames: the engine's `struct page` / `struct folio`.

use std::fmt;

use crate::sync::{AtomicU32, Ordering};

/// A page frame number: an index into the engine's frame table (`mem_map`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pfn(pub u32);

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {}", self.0)
    }
}

bitflags::bitflags! {
    /// Page flags, as the kernel's `PG_*` bits. `Debug` prints their names
    /// (`Flags(LRU | ACTIVE)`), so an invariant error says which are set.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Flags: u32 {
        /// `PG_lru`: on an LRU list. Test-and-clear of this bit is the
        /// ownership token of every list move: who clears it owns the
        /// frame's list position until it sets it again.
        const LRU = 1 << 0;
        /// `PG_active`: on (or headed for) the active list.
        const ACTIVE = 1 << 1;
        /// `PG_referenced`: touched once since last considered; a second
        /// touch activates
        /// ([`Engine::mark_accessed`](crate::Engine::mark_accessed)).
        const REFERENCED = 1 << 2;
        /// `PG_unevictable`: on the unevictable list.
        const UNEVICTABLE = 1 << 3;
        /// `PG_mlocked`: mlocked by at least one mapping.
        const MLOCKED = 1 << 4;
        /// `PG_locked`: the page lock; reclaim skips locked frames.
        const LOCKED = 1 << 5;
        /// Not a kernel flag: set by [`Engine::isolate`](crate::Engine::isolate)
        /// and cleared by putback, so that a putback of a frame nobody
        /// isolated (a double putback) is an error instead of silent list
        /// corruption.
        const ISOLATED = 1 << 6;
    }
}

impl Flags {
    /// The list a frame with these flags belongs on (`folio_lru_list`).
    pub fn lru_list(self) -> LruList {
        if self.contains(Self::UNEVICTABLE) {
            LruList::Unevictable
        } else if self.contains(Self::ACTIVE) {
            LruList::Active
        } else {
            LruList::Inactive
        }
    }
}

/// The lists of an lruvec (`enum lru_list`, one file/anon class).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LruList {
    /// `LRU_INACTIVE_FILE`: reclaim scans its tail.
    Inactive = 0,
    /// `LRU_ACTIVE_FILE`: refills the inactive list when it runs low.
    Active = 1,
    /// `LRU_UNEVICTABLE`: mlocked frames; never scanned.
    Unevictable = 2,
}

impl LruList {
    /// Every list, in index order.
    pub const ALL: [LruList; 3] = [LruList::Inactive, LruList::Active, LruList::Unevictable];
}

/// The end of an intrusive list.
pub(crate) const NIL: u32 = u32::MAX;

/// One frame. Flags and refcount are atomics used lock-free, as in the
/// kernel; `mlock_count` and the list links are atomics only so that they
/// can live here, in the frame: they are read and written under the lock of
/// the frame's lruvec alone (Relaxed is enough: the lock orders them).
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) flags: AtomicU32,
    pub(crate) refcount: AtomicU32,
    /// `folio->mlock_count`: under the lruvec lock.
    pub(crate) mlock_count: AtomicU32,
    /// `folio->lru`: under the lruvec lock.
    pub(crate) prev: AtomicU32,
    pub(crate) next: AtomicU32,
    pub(crate) node: u32,
    /// The thread ([`this_thread`]) that holds the page lock through
    /// [`Engine::trylock_frame`](crate::Engine::trylock_frame), 0 for
    /// none or unknown: what lets `munlock_range` refuse a frame whose
    /// lock its caller holds rather than wait for itself. The engine's own
    /// page locks (reclaim's, munlock's) leave it 0.
    pub(crate) locker: AtomicU32,
}

/// A frame's reference count while the engine frees it (reclaim's
/// eviction callback runs, or `free_isolated`): the kernel's
/// `folio_ref_freeze` to 0, where a frozen folio is not yet free. Here 0
/// is free, so the freeze has a value of its own, which `lru_add`
/// refuses and no lookup (`folio_try_get`) takes; the frame becomes
/// free (0) once its flags are reset.
pub(crate) const FROZEN: u32 = u32::MAX;

/// What a frame looks like at one moment (for tests and tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameState {
    /// Its flags.
    pub flags: Flags,
    /// References: 1 while allocated, plus one per queued op or isolation;
    /// 0 when free, and `u32::MAX` while the engine frees it.
    pub refcount: u32,
    /// How many mlocks it is known to have (may undercount, as the
    /// kernel's).
    pub mlock_count: u32,
    /// Its NUMA node.
    pub node: u32,
}

/// The frames (`mem_map`): a fixed array, each frame on a fixed node.
#[derive(Debug)]
pub(crate) struct FrameTable {
    frames: Box<[Frame]>,
}

impl FrameTable {
    /// `frames` frames, frame `i` on node `node_of(i)`; `None` if the
    /// allocator refuses the table (a failed allocation would abort).
    pub(crate) fn try_new(frames: usize, node_of: impl Fn(usize) -> u32) -> Option<Self> {
        let mut table = Vec::new();
        table.try_reserve_exact(frames).ok()?;
        table.extend((0..frames).map(|i| Frame {
            flags: AtomicU32::new(0),
            refcount: AtomicU32::new(0),
            mlock_count: AtomicU32::new(0),
            prev: AtomicU32::new(NIL),
            next: AtomicU32::new(NIL),
            node: node_of(i),
            locker: AtomicU32::new(0),
        }));
        Some(Self {
            frames: table.into_boxed_slice(),
        })
    }

    /// Number of frames.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// The frame `pfn`; the caller checked the range.
    #[inline]
    pub(crate) fn get(&self, pfn: Pfn) -> &Frame {
        &self.frames[pfn.0 as usize]
    }

    /// Whether `pfn` names a frame.
    pub(crate) fn contains(&self, pfn: Pfn) -> bool {
        (pfn.0 as usize) < self.frames.len()
    }
}

impl Frame {
    #[inline]
    pub(crate) fn flags(&self) -> Flags {
        Flags::from_bits_retain(self.flags.load(Ordering::Acquire))
    }

    #[inline]
    pub(crate) fn test(&self, bit: Flags) -> bool {
        self.flags.load(Ordering::Acquire) & bit.bits() != 0
    }

    /// `folio_set_*`.
    #[inline]
    pub(crate) fn set(&self, bit: Flags) {
        self.flags.fetch_or(bit.bits(), Ordering::AcqRel);
    }

    /// `folio_clear_*`.
    #[inline]
    pub(crate) fn clear(&self, bit: Flags) {
        self.flags.fetch_and(!bit.bits(), Ordering::AcqRel);
    }

    /// Clears every flag of a frame being freed or added anew, and the
    /// page lock's holder with them: a record left behind would name a
    /// thread that no longer holds the lock.
    #[inline]
    pub(crate) fn reset_flags(&self) {
        self.locker.store(0, Ordering::Relaxed);
        self.flags.store(0, Ordering::Release);
    }

    /// `folio_test_set_*`: sets `bit`; whether it was set before.
    #[inline]
    pub(crate) fn test_and_set(&self, bit: Flags) -> bool {
        self.flags.fetch_or(bit.bits(), Ordering::AcqRel) & bit.bits() != 0
    }

    /// `folio_test_clear_*`: clears `bit`; whether it was set before.
    #[inline]
    pub(crate) fn test_and_clear(&self, bit: Flags) -> bool {
        self.flags.fetch_and(!bit.bits(), Ordering::AcqRel) & bit.bits() != 0
    }

    /// `folio_get`.
    #[inline]
    pub(crate) fn get_ref(&self) {
        let old = self.refcount.fetch_add(1, Ordering::Relaxed);
        debug_assert!(old > 0, "folio_get on a free frame");
    }

    /// `folio_put`. The engine's frames always keep their allocation
    /// reference while queued or isolated, so this never frees.
    #[inline]
    pub(crate) fn put_ref(&self) {
        let old = self.refcount.fetch_sub(1, Ordering::Release);
        debug_assert!(old > 1, "folio_put dropped an allocation reference");
    }

    /// Whether the calling thread holds this frame's page lock through
    /// [`Engine::trylock_frame`](crate::Engine::trylock_frame): waiting
    /// for it would wait for itself. (Compiled out under loom, whose
    /// models take no page lock that way.)
    #[inline]
    pub(crate) fn locked_by_caller(&self) -> bool {
        #[cfg(not(mmbatch_loom))]
        {
            self.test(Flags::LOCKED) && {
                let me = this_thread();
                me != 0 && self.locker.load(Ordering::Relaxed) == me
            }
        }
        #[cfg(mmbatch_loom)]
        false
    }

    pub(crate) fn state(&self) -> FrameState {
        FrameState {
            flags: self.flags(),
            refcount: self.refcount.load(Ordering::Acquire),
            mlock_count: self.mlock_count.load(Ordering::Relaxed),
            node: self.node,
        }
    }
}

/// A number for the calling thread, for [`Frame::locker`]: 1 up, in the
/// order threads first ask; 0 (unknown: the lock's holder goes
/// unrecorded) once `u32::MAX - 1` threads have asked, and in a
/// thread-local destructor that runs after its own.
pub(crate) fn this_thread() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    thread_local! {
        static ID: u32 = NEXT
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| n.checked_add(1),
            )
            .unwrap_or(0);
    }
    ID.try_with(|id| *id).unwrap_or(0)
}
