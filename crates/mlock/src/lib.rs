//! Locked memory on the host: regions locked into RAM through the kernel's
//! own calls — `mmap(MAP_LOCKED | MAP_POPULATE)`, `mlock`,
//! `mlock2(MLOCK_ONFAULT)`, `munlock`, `mlockall(MCL_ONFAULT)` — with
//! errors that name the limit that was hit and how to raise it, and the
//! kernel's accounting (`/proc/self/smaps`' locked mappings, `VmLck`) to
//! check them.
//!
//! - [`LockedRegion`]: a region locked now ([`LockPolicy::Populate`]) or as
//!   it is touched ([`LockPolicy::OnFault`], `mlock2(MLOCK_ONFAULT)`), of
//!   base, transparent huge or hugetlb pages, anonymous or file-backed;
//!   dropping it unmaps (and so unlocks) it, even while unwinding. A
//!   region of base or transparent huge pages sits between two
//!   `PROT_NONE` guards, which keep the kernel from merging it with a
//!   neighbour (so its locked bytes read back from smaps as its own): it
//!   takes three of the process's `vm.max_map_count` mappings.
//!   [`LockedRegion::unlock_chunked`] munlocks in pieces so no single call
//!   holds the mmap lock for long.
//! - [`mlockall`] / [`munlockall`].
//! - `FaultLockedRegion` (feature `fault-locked`, off by default): a
//!   userspace alternative to `MLOCK_ONFAULT` (which kernels before 4.4
//!   lack), `PROT_NONE` plus a process-wide SIGSEGV handler that
//!   unprotects and locks N pages per fault. Prefer
//!   [`LockPolicy::OnFault`]: the kernel does the same with no signal
//!   handler in your process.
//!
//! ```
//! use mmbatch_mlock::{LockPolicy, LockedRegion};
//!
//! # fn main() -> Result<(), mmbatch_mlock::Error> {
//! // 64 KiB fits every default RLIMIT_MEMLOCK (64 KiB before Linux 5.16,
//! // 8 MiB since; containers may keep the old one): no privilege needed.
//! let region = LockedRegion::builder(64 << 10).policy(LockPolicy::Populate).build()?;
//! assert_eq!(region.locked_bytes()?, 64 << 10); // the kernel's smaps says so
//! # Ok(()) }
//! ```
//!
//! # Features
//! - `fault-locked` (off): `FaultLockedRegion` and its SIGSEGV handler.
//! - `failpoints` (tests only): fail points that let this crate's tests
//!   make its system calls fail.
//!
//! # Guarantees
//!
//! Errors: going over RLIMIT_MEMLOCK reports the limits, what is locked
//! and how to raise it; EPERM names CAP_IPC_LOCK; ENOMEM at
//! `vm.max_map_count` names the sysctl; missing huge pages name the pool
//! file to write. No error path leaves memory or a lock behind; at worst
//! (a `MAP_FIXED` that failed where the kernel cannot name mappings,
//! `CONFIG_ANON_VMA_NAME` off) the region's `PROT_NONE` reservation stays,
//! address space with no memory, rather than risk unmapping another
//! thread's mapping.
//!
//! # Guarantees under faults
//! Each line is checked by `tests/host.rs` (child processes for
//! process-wide state), `tests/failpoints.rs` (fail points inject `mmap`
//! and `mlock` refusals) and the `mlock_sizes` fuzz target.
//! - **The kernel refuses** `mmap` or `mlock` (`ENOMEM`, `EAGAIN`,
//!   `EPERM`): an error naming the limit and the fix; the region is
//!   unmapped and nothing stays locked.
//! - **`FaultLockedRegion`'s handler** (feature `fault-locked`) fails to
//!   lock (memlock limit, `vm.max_map_count`): the access goes ahead
//!   unlocked and `FaultLockedRegion::read` returns the error — never a
//!   fault loop.
//!   The handler leaves `errno` as it found it, uses the mapping's page
//!   size (hugetlb regions lock a huge page per fault), and is never
//!   installed over a handler that chains to it: another library's
//!   handler installed on top keeps working, and stray faults still reach
//!   the default action.
//! - **Sizes that cannot exist** (a length that with its guard pages
//!   exceeds the address space, offsets past `i64::MAX`) are errors.
//! - **File mappings**: [`RegionBuilder::file`] is `unsafe`: the caller
//!   promises that, while the region lives, nothing truncates the file
//!   and nothing else writes the mapped range (shared mapping or private:
//!   a private one shows other writers' changes until it writes a page).
#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Linux only: one clear error on other systems, ahead of the type
// errors the missing Linux calls would give.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
compile_error!(
    "mmbatch-mlock is Linux only: it locks memory with Linux's mlock2(MLOCK_ONFAULT), MAP_LOCKED and /proc accounting"
);

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

pub mod accounting;
mod all;
mod error;
#[cfg(feature = "fault-locked")]
mod fault;
mod region;

pub use all::{LockAll, mlockall, munlockall};
pub use error::Error;
#[cfg(feature = "fault-locked")]
pub use fault::{FaultLockedRegion, MAX_FAULT_REGIONS};
pub use mmbatch_mmap::{HugePageSize, HugePagesUnavailable};
pub use region::{Access, LockPolicy, LockedRegion, Pages, RegionBuilder};

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
