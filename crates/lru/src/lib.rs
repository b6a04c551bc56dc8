//! A userspace LRU engine with the Linux kernel's structures and protocols:
//! a frame table (`struct page`), one lruvec per node with inactive, active
//! and unevictable lists under one `lru_lock`, and the operations of
//! `mm/swap.c`, `mm/vmscan.c` and `mm/mlock.c` — lru_add, mark_accessed,
//! activate, deactivate, rotate, isolate, putback, shrink, mlock, munlock,
//! lru_add_drain, lru_add_drain_all and lru_cache_disable.
//!
//! Each batched operation can run [batched](Mode::Batched) — queued on the
//! calling thread's batch (an [`mmbatch_pagevec::Batcher`]) and applied 31
//! at a time under one lock acquisition per node — or
//! [immediately](Mode::Immediate), so every experiment can measure a
//! technique against its own absence in the same engine.
//!
//! # Example: a small buffer pool
//!
//! ```
//! use mmbatch_lru::{Config, Engine, LruList, Pfn};
//!
//! // 64 frames of buffer memory on one node.
//! let lru = Engine::new(Config::new(64))?;
//! // Load 48 pages: each frame goes onto the inactive list.
//! for i in 0..48 {
//!     lru.lru_add(Pfn(i))?;
//! }
//! // Touch pages 0..8 twice: the second touch activates them.
//! for _ in 0..2 {
//!     for i in 0..8 {
//!         lru.mark_accessed(Pfn(i))?;
//!     }
//! }
//! // Pin page 40 (mlock): it moves to the unevictable list.
//! lru.mlock(Pfn(40))?;
//! lru.lru_add_drain(); // apply this thread's batches
//! assert_eq!(lru.list_sizes(0)?, [39, 8, 1]);
//!
//! // Memory pressure: reclaim 16 frames, writing back dirty ones.
//! let mut written_back = Vec::new();
//! let stats = lru.shrink(0, 16, |pfn| {
//!     written_back.push(pfn); // e.g. flush the buffer to disk
//!     true // the frame may be reused
//! })?;
//! assert_eq!(stats.evicted, 16);
//! // The oldest untouched pages went first; the hot and pinned ones stay.
//! assert_eq!(written_back[0], Pfn(8));
//! assert!(lru.list(0, LruList::Active)?.contains(&Pfn(3)));
//! assert!(lru.list(0, LruList::Unevictable)?.contains(&Pfn(40)));
//! // An evicted frame is free again.
//! lru.lru_add(Pfn(8))?;
//! lru.check_invariants().unwrap();
//! # Ok::<(), mmbatch_lru::LruError>(())
//! ```
//!
//! # Protocols
//! - Test-and-clear of a frame's LRU bit is the ownership token of every
//!   list move (`folio_test_clear_lru`): a frame is isolated at most once.
//! - A batched op holds a reference to its frame while queued; when the
//!   batch is applied each frame is re-checked under the lock, and one
//!   isolated since it was queued is skipped — never moved twice — and its
//!   reference dropped (`folio_batch_move_lru`, `folios_put`).
//! - `mlock_count` counts mlocks of a frame on the unevictable list under
//!   the lru_lock; it may undercount (as the kernel's), never underflows,
//!   and the last munlock returns the frame to an evictable list.
//! - List sizes and events are counted under the lru_lock; `NR_MLOCK` is a
//!   vmstat-style counter with per-thread deltas folded past a threshold.
//!
//! Each protocol has a loom model (`cargo xtask loom lru`).
//!
//! # Guarantees under faults
//! What happens when user code panics or an argument is out of range;
//! each line is checked by `tests/faults.rs` (and the `lru_sizes` fuzz
//! target), the engine's plain refusals by `tests/bad_input.rs`.
//! - **[`Engine::shrink`]'s evict callback panics**: every frame the pass
//!   had isolated, the one being offered included, goes back on its list
//!   with its references as before; frames the callback already accepted
//!   stay freed; then the panic continues in the caller.
//! - **Scan counts** ([`Engine::shrink`], [`Engine::shrink_active`]) may
//!   be anything up to `usize::MAX`: a pass scans at most the list.
//! - **[`Engine::munlock_range`] meets a frame number outside the table**:
//!   it returns [`LruError::OutOfRange`] after munlocking and releasing
//!   every frame it had pinned, at every step of the 2013 munlock series.
//! - **[`Engine::munlock_range`] meets a frame whose page lock the calling
//!   thread holds** ([`Engine::trylock_frame`]): it returns
//!   [`LruError::LockedByCaller`] the same way, where the kernel's
//!   `lock_page` would wait for itself (a lock another thread holds is
//!   waited for).
//! - **Sizes that cannot exist** are errors, not aborts:
//!   [`PageTables::try_new`] ([`LruError::PageTablesTooLarge`]),
//!   [`Config::nodes`] above [`MAX_NUMNODES`] ([`LruError::TooManyNodes`]).
#![deny(unsafe_code)]

mod engine;
mod error;
mod frame;
mod lruvec;
mod pagetable;
mod sync;
mod vmstat;

pub use engine::{
    BATCH, Config, Engine, EngineStats, MAX_NUMNODES, Mode, Modes, MunlockStats, MunlockStep,
    NodeLayout, SWAP_CLUSTER_MAX, ShrinkStats,
};
pub use error::LruError;
pub use frame::{Flags, FrameState, LruList, Pfn};
pub use lruvec::Event;
pub use pagetable::{MAX_VIRTUAL_PAGES, OutOfRange, PTRS_PER_TABLE, PageTables};
pub use vmstat::Stat;

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
