//! Errors: each names what was wrong and what to do instead.

use std::fmt;

use crate::frame::Pfn;

/// Why the engine refused an operation. Refusals change nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LruError {
    /// `Config::frames` was 0.
    ZeroFrames,
    /// `Config::nodes` was 0.
    ZeroNodes,
    /// More frames than a `Pfn` (u32, with `u32::MAX` reserved) can name.
    TooManyFrames {
        /// What was asked for.
        frames: usize,
    },
    /// A frame number past the end of the table.
    OutOfRange {
        /// The frame asked for.
        pfn: Pfn,
        /// Frames in the table.
        frames: usize,
    },
    /// A node number past the last node.
    NoSuchNode {
        /// The node asked for.
        node: usize,
        /// Nodes in the engine.
        nodes: usize,
    },
    /// `lru_add` of a frame that is already in use.
    InUse {
        /// The frame.
        pfn: Pfn,
        /// Its references (0 would mean free).
        refcount: u32,
    },
    /// An operation on a free frame (never added, or evicted).
    Free(Pfn),
    /// `lru_add` of a frame that reclaim is freeing (from `shrink`'s
    /// eviction callback, or another thread while it runs).
    Reclaiming(Pfn),
    /// `putback` of a frame the engine did not isolate for the caller —
    /// typically a second putback of the same frame.
    NotIsolated(Pfn),
    /// `munlock` of a frame that is not mlocked.
    NotMlocked(Pfn),
    /// A `MunlockStep` above 7.
    NoSuchStep(u8),
    /// A virtual range past the end of the page tables.
    RangeOutsidePageTables {
        /// The end of the range asked for.
        end: u64,
        /// Pages the tables cover.
        len: u64,
    },
    /// `free_isolated` of a frame others still hold references to.
    Busy {
        /// The frame.
        pfn: Pfn,
        /// Its references (2 would be the allocation and the isolation).
        refcount: u32,
    },
    /// More nodes than [`MAX_NUMNODES`](crate::MAX_NUMNODES).
    TooManyNodes {
        /// Nodes asked for.
        nodes: usize,
    },
    /// Page tables whose tables cannot be allocated.
    PageTablesTooLarge {
        /// Virtual pages asked for.
        len: u64,
    },
    /// `munlock_range` met a frame whose page lock the calling thread
    /// holds ([`Engine::trylock_frame`](crate::Engine::trylock_frame)):
    /// `lock_page` would wait for itself. The frames before it in the
    /// range are munlocked; it and those after are not.
    LockedByCaller(Pfn),
    /// A frame table the allocator refused (`Config::frames` past the
    /// memory the process may have).
    FrameTableTooLarge {
        /// Frames asked for.
        frames: usize,
    },
}

impl fmt::Display for LruError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LruError::ZeroFrames => {
                f.write_str("an engine needs at least one frame: set Config::frames > 0")
            }
            LruError::ZeroNodes => {
                f.write_str("an engine needs at least one node: set Config::nodes > 0")
            }
            LruError::TooManyFrames { frames } => write!(
                f,
                "{frames} frames do not fit a u32 frame number: use at most {} frames",
                u32::MAX - 1
            ),
            LruError::OutOfRange { pfn, frames } => {
                write!(f, "{pfn} is out of range: the table has frames 0..{frames}")
            }
            LruError::NoSuchNode { node, nodes } => {
                write!(
                    f,
                    "node {node} does not exist: the engine has nodes 0..{nodes}"
                )
            }
            LruError::InUse { pfn, refcount } => write!(
                f,
                "lru_add of {pfn}, which is in use ({refcount} references): only a free frame \
                 can be added; to return an isolated frame use putback"
            ),
            LruError::Free(pfn) => write!(
                f,
                "{pfn} is free (never added, or evicted): lru_add it first"
            ),
            LruError::Reclaiming(pfn) => write!(
                f,
                "lru_add of {pfn}, which reclaim is freeing (shrink's eviction callback runs for \
                 it): add it again after shrink returns"
            ),
            LruError::NotIsolated(pfn) => write!(
                f,
                "{pfn} is not isolated: each successful isolate allows one putback or \
                 free_isolated (is this the second for the same isolate?)"
            ),
            LruError::NotMlocked(pfn) => write!(
                f,
                "munlock of {pfn}, which is not mlocked: each mlock allows one munlock (is this a \
                 second munlock?)"
            ),
            LruError::NoSuchStep(n) => write!(
                f,
                "munlock step {n} does not exist: the 2013 munlock series has steps 0 (before it) \
                 to 7 (all seven patches)"
            ),
            LruError::RangeOutsidePageTables { end, len } => write!(
                f,
                "range ends at virtual page {end}, past the page tables' {len} pages: \
                 build them with PageTables::new({end}) or more"
            ),
            LruError::Busy { pfn, refcount } => write!(
                f,
                "{pfn} has {refcount} references, more than its allocation and isolation: \
                 wait for queued operations (lru_add_drain_all) and retry"
            ),
            LruError::TooManyNodes { nodes } => write!(
                f,
                "{nodes} nodes exceed MAX_NUMNODES ({}, the kernel's limit): set Config::nodes \
                 to at most that",
                crate::MAX_NUMNODES
            ),
            LruError::LockedByCaller(pfn) => write!(
                f,
                "munlock_range met {pfn}, whose page lock this thread holds (trylock_frame): \
                 taking it would wait for itself; the frames before it in the range are \
                 munlocked. unlock_frame it first, or munlock from another thread"
            ),
            LruError::FrameTableTooLarge { frames } => write!(
                f,
                "a frame table of {frames} frames ({} bytes) cannot be allocated: the allocator \
                 refused it; set Config::frames to fewer",
                frames.saturating_mul(std::mem::size_of::<crate::frame::Frame>())
            ),
            LruError::PageTablesTooLarge { len } => write!(
                f,
                "page tables for {len} virtual pages cannot be allocated (at most {} pages, \
                 {} bytes per {} pages): cover only the range that is mapped",
                crate::MAX_VIRTUAL_PAGES,
                crate::PTRS_PER_TABLE * 4,
                crate::PTRS_PER_TABLE
            ),
        }
    }
}

impl std::error::Error for LruError {}
