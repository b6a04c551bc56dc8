//! The kernel's fault-around (Kirill Shutemov, 2014): on a read
//! fault, map the ready pages of an aligned window of `2^order` pages
//! around it (`do_fault_around`, `->map_pages`), never blocking for a
//! neighbour; only the faulting page takes the slow path.
//!
//! - [`Window`]: the window, a pure function property-tested against the
//!   kernel's formula.
//! - [`UffdRegion`]: an anonymous region filled on demand through
//!   userfaultfd from a [`PageSource`] (a `File`, a `Vec<u8>`, any bytes
//!   in memory through [`InMemory`], or your own), a whole window per
//!   fault — lazy
//!   loading and snapshot restore, with the window order as the knob; in
//!   2 MiB pages ([`UffdRegionBuilder::huge_pages`]); reporting the pages
//!   written ([`UffdRegionBuilder::track_writes`]).
//! - [`UffdHandler`]: the same for a userfaultfd another process made and
//!   registered — a VMM's page-fault handler (`examples/firecracker_uffd`
//!   speaks Firecracker's protocol).
//! - `engine` (feature `engine`): `MapPages` and per-process page tables
//!   over a shared page cache of `mmbatch-lru` frames, the fault-around
//!   experiment's model of the kernel's.
//!
//! ```
//! use mmbatch_faultaround::{Error, UffdRegion, Zeroes};
//!
//! // 64 pages (of 4 KiB) filled on demand from a source, 16 pages per fault.
//! let len = 64 * 4096;
//! let region = match UffdRegion::new(len, 4, Zeroes(len as u64), 1) {
//!     Ok(r) => r,
//!     // No userfaultfd here (a container's seccomp, an old kernel).
//!     Err(e @ (Error::NoPermission { .. } | Error::Unsupported { .. })) => {
//!         return println!("skipped: {e}")
//!     }
//!     Err(e) => panic!("{e}"),
//! };
//! assert_eq!(region.as_slice()[5 * 4096], 0); // one fault fills pages 0..16
//! assert_eq!(region.stats().faults, 1);
//! ```
//!
//! # Features
//! - `engine` (off): the `engine` module, which brings in `mmbatch-lru`
//!   (and through it `mmbatch-pagevec`).
//! - `failpoints` (tests only): fail points that let this crate's tests
//!   make its system calls fail.
//!
//! # Guarantees
//! - A fault never blocks to fill a neighbour: pages not ready are skipped
//!   and fault on their own later (the rule that makes fault-around safe).
//! - `UffdRegion`: pages already present are left alone (`EEXIST`),
//!   `EAGAIN` and partial copies are retried (a bounded number of times),
//!   and dropping the region stops and joins its handler threads before
//!   unmapping (but for those stuck inside the source past the source
//!   timeout, which install nothing from then on: see below). An access
//!   still waiting on a page as the region drops (only through its
//!   address: another thread's, or KVM's in a VMM) then fails, SIGSEGV
//!   or EFAULT, rather than reading zeros (unless the process maps that
//!   address again first).
//! - A child of `fork(2)` never reads zeros where the source's data was
//!   still to come (the kernel would hand it the range unregistered): an
//!   anonymous region being served is not inherited (`MADV_DONTFORK`),
//!   and the child finds an inaccessible reservation there: it faults,
//!   and nothing it maps without `MAP_FIXED` lands there. (A fork that
//!   runs no `pthread_atfork` handler, such as a raw `clone`, or a child
//!   whose reservation the kernel refuses, finds a hole instead.) After
//!   [`UffdRegion::shutdown`] the region is ordinary memory, which a child
//!   inherits. In a child, drop and `shutdown` of a copy of a region or
//!   handler do nothing (the threads and the registration are the
//!   parent's) and a handler's written-page scan is refused; its other
//!   calls are not for a child, whose locks may have been taken at the
//!   fork (`tests/fork.rs`).
//!
//! # Guarantees under faults
//! Each line is checked by `tests/faults.rs` and `tests/failpoints.rs`
//! (fail points inject the kernel's refusals), and the
//! `faultaround_sizes` fuzz target.
//! - **The source fails a page** ([`PageRead::Failed`], a panic in
//!   `read_page` or `pages`, a file truncated under the region, no answer
//!   within the [source timeout](UffdRegionBuilder::source_timeout), or
//!   `NotReady` past the
//!   [not-ready timeout](UffdRegionBuilder::not_ready_timeout)):
//!   the page is never filled — not with zeroes, not later by a
//!   neighbour's window — and its reader gets SIGBUS (`UFFDIO_POISON`,
//!   Linux 6.6+) or, where that is missing or refused, SIGSEGV (the page
//!   made `PROT_NONE`); [`UffdRegion::failure`] names the page and the
//!   cause, [`UffdStats::pages_failed`] counts them. The handler thread
//!   lives on and serves the other pages; one stuck inside the source
//!   past the timeout is replaced (a watchdog fails its fault). A page
//!   filled meanwhile (by the replay, a neighbour's window) is not failed,
//!   with `UFFDIO_POISON` or without: a page once readable never becomes
//!   inaccessible.
//! - **The kernel keeps refusing a copy** (`ENOMEM` under a memory cgroup,
//!   `EFAULT`): after three tries the page fails as above, instead of
//!   waking a reader that faults again forever. `EAGAIN`'s negative count
//!   (the kernel's `copy` field) is no progress.
//! - **A `pages()` slice of the wrong length** is ignored (the page is
//!   read with `read_page`): the kernel never copies memory past it.
//! - **Drop** takes at most the source timeout waiting for the source;
//!   **shutdown** fills every page a source that answers can give, waits
//!   up to the not-ready timeout in all for pages the source says are not
//!   ready, and against one stuck in its calls takes about six source
//!   timeouts more at most. A thread stuck inside the source is left to finish on its own,
//!   and once the region is dropped it makes no copy, zero page or poison
//!   (`UFFDIO_COPY` would fill whatever is registered at the old address
//!   by then, with any userfaultfd).
//! - **Refusals at construction** (a handler thread, `mmap`, the
//!   userfaultfd) are errors that name the limit; nothing is left mapped,
//!   open or running.
//! - **The kernel reads a missing page** (`write(2)`, `send(2)`, O_DIRECT,
//!   another region's `UFFDIO_COPY` from a `pages()` slice into this one):
//!   served as the process's own read is, wherever the process may have a
//!   userfaultfd for kernel faults ([`UffdMode::AllFaults`]); where it may
//!   not (refused by permission only), the region is user-mode-only and
//!   such a call gets `EFAULT` ([`UffdRegion::mode`] says which;
//!   `tests/kernel_access.rs`).
//! - **Out-of-range input**: handler counts outside 1..=[`MAX_HANDLERS`],
//!   orders above [`MAX_ORDER`], windows at the top of the `u64` page
//!   space, engine page-cache indices past the file (refused before a
//!   frame is taken) and files of more than `u32::MAX` pages are errors.
//!   So are a region larger than the address space ([`Error::MapRefused`])
//!   and a [`UffdRegion::page_cache_from`] image larger than the memory
//!   and swap left, or its memory cgroup's room ([`Error::ImageTooLarge`],
//!   refused before it is written: filling it would end in an OOM kill).
//! - **Shared mappings**: [`UffdRegion::over_page_cache`] is `unsafe`:
//!   the caller promises nothing writes or truncates the file meanwhile.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Linux only: one clear error on other systems, ahead of the type
// errors the missing Linux calls would give.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
compile_error!("mmbatch-faultaround is Linux only: userfaultfd(2) exists only on Linux");

/// A `fail` crate fail point (<https://docs.rs/fail>), compiled in with the
/// `failpoints` feature, which only this crate's tests turn on; nothing
/// otherwise, so users never build `fail`.
#[cfg(feature = "failpoints")]
macro_rules! fail_point {
    ($($t:tt)*) => {
        fail::fail_point!($($t)*)
    };
}
#[cfg(not(feature = "failpoints"))]
macro_rules! fail_point {
    ($($t:tt)*) => {};
}

#[cfg(feature = "engine")]
pub mod engine;
mod error;
mod uffd;
mod window;

#[cfg(feature = "engine")]
pub use engine::MapPages;
pub use error::Error;
/// Huge page sizes, for [`UffdRegionBuilder::huge_pages`] (which serves
/// `Size2M` only and refuses `Size1G`).
pub use mmbatch_mmap::HugePageSize;
pub use uffd::{
    DEFAULT_BUSY_POLL, FailSignal, InMemory, MAX_BUSY_POLL, MAX_HANDLERS, MAX_ID_LEN,
    MIN_SOURCE_TIMEOUT, PageRead, PageSource, REPLAY_RUN, Record, UffdHandler, UffdHandlerBuilder,
    UffdMode, UffdRange, UffdRegion, UffdRegionBuilder, UffdStats, Zeroes,
};
pub use window::{MAX_ORDER, PTRS_PER_TABLE, Window};

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
