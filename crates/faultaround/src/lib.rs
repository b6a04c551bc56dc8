//! The kernel's fault-around (seed 002, Kirill Shutemov 2014): on a read
//! fault, map the ready pages of an aligned window of `2^order` pages
//! around it (`do_fault_around`, `->map_pages`), never blocking for a
//! neighbour; only the faulting page takes the slow path.
//!
//! - [`Window`]: the window, a pure function property-tested against the
//!   kernel's formula.
//! - [`MapPages`]: map the ready pages of a window, skip the rest.
//! - [`engine`]: per-process page tables over a shared page cache of
//!   [`mmbatch_lru`] frames.
//! - [`UffdRegion`]: an anonymous region filled on demand through
//!   userfaultfd from a [`PageSource`], a whole window per fault — lazy
//!   loading and snapshot restore, with the window order as the knob.
//!
//! ```
//! use std::sync::Arc;
//! use mmbatch_faultaround::engine::{FileMapping, PageCache};
//! use mmbatch_lru::{Config, Engine, Pfn};
//!
//! let lru = Arc::new(Engine::new(Config::new(64))?);
//! let cache = PageCache::new(lru, 64)?;
//! for i in 0..64 {
//!     cache.insert(i, Pfn(i as u32), true)?; // the file is cached
//! }
//! let mapping = FileMapping::new(&cache, 4)?; // FAULT_AROUND_ORDER 4
//! for page in 0..64 {
//!     mapping.read(page)?;
//! }
//! assert_eq!(mapping.faults(), 64 / 16);
//! # Ok::<(), mmbatch_faultaround::Error>(())
//! ```
//!
//! # Guarantees
//! - A fault never blocks to fill a neighbour: pages not ready are skipped
//!   and fault on their own later (the rule that makes fault-around safe).
//! - `UffdRegion`: pages already present are left alone (`EEXIST`),
//!   `EAGAIN` and partial copies are retried, and dropping the region stops
//!   and joins its handler threads before unmapping.

pub mod engine;
mod error;
mod uffd;
mod window;

pub use engine::MapPages;
pub use error::Error;
pub use uffd::{
    FailSignal, MAX_HANDLERS, PageRead, PageSource, UffdRegion, UffdRegionBuilder, UffdStats,
    Zeroes,
};
pub use window::{MAX_ORDER, PTRS_PER_TABLE, Window};
