//! Chunked parallel jobs after the kernel's ktask (a patch series by
//! Daniel Jordan that was not merged as such; its multithreaded jobs
//! became padata's `padata_do_multithreaded`, Linux 5.7), and parallel
//! clearing and populating of large memory (as the ktask series cleared
//! gigantic pages).
//!
//! A [`Job`] over `[start, start + size)` is split the kernel's way
//! ([`Job::plan`]): threads = `min(max(size / max(min_chunk, align), 1),
//! max_threads)`, at most [`MAX_THREADS`], chunks of `roundup(max(size /
//! (threads * 4), min_chunk), align)`. [`run()`] claims chunks from every thread (the caller
//! included), starts none before all threads are ready, stops at the first
//! error and [undoes](run_with_undo) the chunks that finished, and
//! propagates a panic. [`run_slice`] does the same over a slice, each
//! chunk `&mut [T]`.
//!
//! ```
//! use mmbatch_ktask::{Job, run_slice};
//!
//! let mut buf = vec![1u8; 8 << 20];
//! mmbatch_ktask::clear(&mut buf, 2); // two threads, 2 MiB chunks
//! assert!(buf.iter().all(|b| *b == 0));
//!
//! let mut squares = vec![0u64; 100_000];
//! let job = Job::new(0, squares.len()).min_chunk(10_000);
//! run_slice::<_, ()>(&job, &mut squares, |start, chunk| {
//!     for (i, x) in (start as u64..).zip(chunk) {
//!         *x = i * i;
//!     }
//!     Ok(())
//! })
//! .unwrap();
//! assert_eq!(squares[300], 90_000);
//! ```
//!
//! # Platforms
//! [`Job`], [`run()`], [`run_slice`] and [`clear()`] are plain std and
//! build on every platform; [`populate_mapping`], [`HugeRegion`] and the `numa`
//! feature are Linux's (`MADV_POPULATE_WRITE`, hugetlb, sysfs) and exist
//! only there.
//!
//! # Guarantees
//! - Every worker is started before any chunk runs, and none outlives
//!   [`run()`].
//! - The first error stops the job: no chunk is claimed once it is
//!   recorded (one another worker claimed just before may still run), and
//!   every chunk that finished is undone before the error is returned.
//! - A panic in a chunk is propagated to the caller after the workers stop.
//!
//! Each protocol step (claiming, error and undo, completion) is a loom
//! model (`cargo xtask loom ktask`).
//!
//! # Features
//! - `numa` (off by default): NUMA placement, `numa::NumaJob`, `numa::run_numa` and
//!   `numa::bind_memory` (or `prefer_memory`), through hwlocality; needs libhwloc 2.8 or later,
//!   pkg-config and libudev installed. Without it the crate needs no
//!   system library.
//! - `failpoints` (tests only): fail points that let this crate's tests
//!   make its system calls fail.
//!
//! # Guarantees under faults
//! Each line is checked by `tests/faults.rs`, `tests/failpoints.rs` (fail
//! points inject the refusals), `tests/numa.rs`, `tests/huge.rs` and the
//! `ktask_jobs` fuzz target.
//! - **The OS refuses a helper thread** (`RLIMIT_NPROC`, a cgroup's
//!   `pids.max`): the job runs on the threads that started — the caller
//!   at least — as `padata_do_multithreaded` does; it never waits for a
//!   thread that was not made. A NUMA node whose thread is refused runs on
//!   the caller.
//! - **A helper's start hook panics** (NUMA binding): the job stops as for
//!   a panicking chunk and the panic reaches the caller.
//! - **`numa::run_numa_with_undo`** (feature `numa`): the first error on any node stops every node,
//!   and every chunk that finished, on every node, is undone. A panic on
//!   one node (one the caller runs itself included) stops every node and
//!   undoes them too before it reaches the caller.
//! - **Jobs whose numbers do not fit**: `start + size` past `usize::MAX`
//!   is [`JobError::Overflow`]; a `min_chunk` near `usize::MAX` or any
//!   `max_threads` never wraps the split (threads at most
//!   [`MAX_THREADS`]); `clear` with 0 threads uses one.
//! - **[`HugeRegion`]**: [`HugeRegion::new`] takes the pool's free pages
//!   and never changes the pool; too few is [`HugeError::NotReservable`],
//!   naming the command that reserves them. Only
//!   [`HugeRegion::new_growing_pool`] grows it, by what it lacks (free
//!   minus reserved), and takes exactly that out when it drops, under a
//!   process-wide lock, so regions drop in any order; a pool that cannot
//!   grow, or a refused mapping, leaves the pool as it was.
#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg), doc(auto_cfg(hide(mmbatch_loom))))]
// NUMA placement is Linux's (sysfs, mbind): one clear error on other
// systems, ahead of the type errors the missing calls would give.
#[cfg(all(feature = "numa", not(target_os = "linux")))]
compile_error!(
    "mmbatch-ktask's `numa` feature is Linux only, not Android (its placement reads sysfs and binds with mbind through libhwloc): leave it off on this system"
);

/// A `fail` crate fail point (<https://docs.rs/fail>), compiled in with the
/// `failpoints` feature, which only this crate's tests turn on; nothing
/// otherwise, so users never build `fail`. Unused under loom, whose build
/// leaves out the code that calls it.
#[cfg(feature = "failpoints")]
#[cfg_attr(mmbatch_loom, allow(unused_macros))]
macro_rules! fail_point {
    ($($t:tt)*) => {
        fail::fail_point!($($t)*)
    };
}
#[cfg(not(feature = "failpoints"))]
#[cfg_attr(mmbatch_loom, allow(unused_macros))]
macro_rules! fail_point {
    ($($t:tt)*) => {};
}

#[cfg(not(mmbatch_loom))]
mod clear;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
mod huge;
mod job;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
mod mem;
#[cfg(all(feature = "numa", target_os = "linux", not(mmbatch_loom)))]
pub mod numa;
mod run;
#[cfg(not(mmbatch_loom))]
mod slice;
mod sync;

#[cfg(not(mmbatch_loom))]
pub use clear::{MIN_CHUNK, clear};
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
pub use huge::{HugeError, HugeRegion};
pub use job::{Job, JobError, LOAD_BALANCE_FACTOR, MAX_THREADS, Plan};
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
pub use mem::{PopulateError, populate, populate_mapping};
/// The owned mapping the memory jobs run over (re-exported from
/// `mmbatch-mmap`).
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
pub use mmbatch_mmap::Mapping;
/// What [`Mapping`]'s constructors and `advise` take (re-exported from
/// `mmbatch-mmap`): no direct dependency needed to map or advise.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
pub use mmbatch_mmap::{Advice, MapFlags, ProtFlags};
#[cfg(all(any(target_os = "linux", target_os = "android"), not(mmbatch_loom)))]
pub use mmbatch_mmap::{HugePageSize, HugePagesUnavailable};
pub use run::RunError;
#[cfg(not(mmbatch_loom))]
pub use run::{run, run_with_undo};
#[cfg(not(mmbatch_loom))]
pub use slice::{run_slice, run_slice_with_undo};

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
