//! Batching primitives after the Linux kernel's: [`PageVec`] (`struct
//! folio_batch`) and [`Batcher`] (`cpu_fbatches` with `lru_add_drain`, `lru_add_drain_all` and
//! `lru_cache_disable` from `mm/swap.c`).
//!
//! The kernel takes `lruvec->lru_lock` once per batch of up to 31 folios
//! instead of once per folio; on a contended lock that is most of the cost
//! of an LRU operation (the kernel batches `activate_page` for this). This
//! crate gives userspace the same shape: queue operations on a per-thread
//! batch, apply a full batch to shared state in one lock acquisition.
//!
//! ```
//! use std::sync::{Mutex, MutexGuard};
//! use mmbatch_pagevec::{Apply, Batcher};
//!
//! /// Two lists behind one lock each, like two nodes' lruvecs.
//! struct Lists([Mutex<Vec<u32>>; 2]);
//!
//! impl Apply for Lists {
//!     type Op = u32; // a page frame number
//!     type Key = usize; // its node
//!     type Guard<'a> = MutexGuard<'a, Vec<u32>>;
//!     fn key(&self, pfn: &u32) -> usize {
//!         (*pfn % 2) as usize
//!     }
//!     fn lock(&self, node: usize) -> Self::Guard<'_> {
//!         self.0[node].lock().unwrap()
//!     }
//!     fn apply(&self, list: &mut Self::Guard<'_>, pfn: u32) {
//!         list.push(pfn);
//!     }
//! }
//!
//! let lists = Lists([Mutex::new(vec![]), Mutex::new(vec![])]);
//! let batcher: Batcher<Lists, 8> = Batcher::new(lists);
//! for pfn in 0..8 {
//!     batcher.queue(pfn); // the 8th fills the batch: it is applied
//! }
//! // Keys alternate, so each op re-locked: 8 acquisitions for one batch.
//! assert_eq!(batcher.stats().lock_acquisitions, 8);
//! for pfn in [10, 12, 14, 11] {
//!     batcher.queue(pfn);
//! }
//! batcher.drain_local(); // lru_add_drain: one lock for 10, 12, 14
//! assert_eq!(batcher.stats().lock_acquisitions, 10);
//! let lists = batcher.into_inner();
//! assert_eq!(*lists.0[0].lock().unwrap(), [0, 2, 4, 6, 10, 12, 14]);
//! ```
//!
//! # Guarantees
//! - [`PageVec`] is a sound inline container (Miri-tested): no allocation,
//!   and no item is ever dropped twice. Every item is dropped once, a
//!   drain dropped early drops the rest; items are leaked (never
//!   double-dropped) only where a `Drain` is forgotten
//!   (`std::mem::forget`) or a `retain` predicate or an item's `Drop`
//!   panics.
//! - [`Batcher`]: no op lost or applied twice (dropping it applies what
//!   waits, except while its thread unwinds from a panic, when applying
//!   could panic again and abort: the ops are dropped then, as are the op
//!   whose Apply code panics and the rest of its batch); [`Batcher::drain_all`]
//!   applies every op queued before it began, and concurrent calls fold into
//!   one pass; while [disabled](Batcher::disable) no op waits in a batch;
//!   one thread's ops apply in queue order; remote drains are safe against
//!   the owner queueing. Each is a loom model (`cargo xtask loom pagevec`).
//!   The protocol and why it holds: the workspace's
//!   [ARCHITECTURE.md](https://github.com/mmbatch/mmbatch/blob/main/ARCHITECTURE.md).
//!
//! # Features
//! - `std` (default): [`Batcher`]. Without it the crate is
//!   `no_std` and offers [`PageVec`] alone.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![cfg_attr(docsrs, feature(doc_cfg), doc(auto_cfg(hide(mmbatch_loom))))]

#[cfg(all(test, not(feature = "std")))]
extern crate std;

mod pagevec;
pub use pagevec::{CapacityError, Drain, IntoIter, PAGEVEC_SIZE, PageVec};

#[cfg(feature = "std")]
mod barrier;
#[cfg(feature = "std")]
mod batcher;
#[cfg(feature = "std")]
mod sync;

#[cfg(feature = "std")]
pub use batcher::{Apply, BatchStats, Batcher, apply_batch};

/// Whether [`Batcher::disable`] uses `membarrier(2)` (so the queue path's
/// barrier is compiler-only) rather than full fences on both sides. Known
/// after the first `Batcher` is built; turns false for good if membarrier
/// fails later (a seccomp filter installed since).
#[cfg(feature = "std")]
pub fn uses_membarrier() -> bool {
    barrier::expedited()
}

/// For loom models in other crates that call [`Batcher::disable`]: models
/// the queue path's light barrier as the SeqCst fence it acts as against
/// disable's heavy one (see the batcher docs). Call it first in the model.
#[cfg(mmbatch_loom)]
#[doc(hidden)]
pub fn loom_model_with_heavy_barrier() {
    barrier::model_with_heavy_barrier();
}

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
