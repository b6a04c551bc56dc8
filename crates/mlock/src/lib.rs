//! Locked memory on the host: regions locked into RAM through the kernel's
//! own calls — `mmap(MAP_LOCKED | MAP_POPULATE)`, `mlock`,
//! `mlock2(MLOCK_ONFAULT)`, `munlock`, `mlockall(MCL_ONFAULT)` — with
//! errors that name the limit that was hit and how to raise it, and the
//! kernel's accounting (`/proc/self/smaps` Locked, `VmLck`) to check them.
//!
//! - [`LockedRegion`]: a region locked now ([`LockPolicy::Populate`]) or as
//!   it is touched ([`LockPolicy::OnFault`], seed 003's lock-on-fault), of
//!   base, transparent huge or hugetlb pages, anonymous or file-backed;
//!   dropping it unmaps (and so unlocks) it, even while unwinding.
//!   [`LockedRegion::unlock_chunked`] munlocks in pieces so no single call
//!   holds the mmap lock for long (seed 000's motivation).
//! - [`FaultLockedRegion`]: seed 003's userspace alternative, `PROT_NONE`
//!   plus a SIGSEGV handler that unprotects and locks N pages per fault.
//! - [`mlockall`] / [`munlockall`].
//!
//! ```
//! use mmbatch_mlock::{LockPolicy, LockedRegion};
//!
//! # fn main() -> Result<(), mmbatch_mlock::Error> {
//! // 1 MiB fits the default RLIMIT_MEMLOCK (8 MiB), so no privilege needed.
//! let region = LockedRegion::builder(1 << 20).policy(LockPolicy::Populate).build()?;
//! assert_eq!(region.locked_bytes()?, 1 << 20); // the kernel's smaps says so
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! Errors: going over RLIMIT_MEMLOCK reports the limits, what is locked
//! and how to raise it; EPERM names CAP_IPC_LOCK; ENOMEM at
//! `vm.max_map_count` names the sysctl; missing huge pages name the pool
//! file to write. No error path leaves a mapping or lock behind.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod accounting;
mod all;
mod error;
mod fault;
mod region;

pub use all::{LockAll, mlockall, munlockall};
pub use error::Error;
pub use fault::{FaultLockedRegion, MAX_FAULT_REGIONS};
pub use region::{LockPolicy, LockedRegion, Pages, RegionBuilder};
