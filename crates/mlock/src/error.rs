//! Errors that name the cause and the fix.
//!
//! The kernel reports most lock failures as ENOMEM, EAGAIN or EPERM; which
//! limit was hit is read back from the kernel's own accounting (the
//! RLIMIT_MEMLOCK limits, `VmLck`, the number of mappings against
//! `vm.max_map_count`, the huge page pools) when the error happens.

use std::{fmt, io};

use rustix::io::Errno;

use mmbatch_mmap::HugePagesUnavailable;

use crate::accounting;

/// Why a lock, map or unlock failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A length of zero.
    ZeroLength,
    /// A length or offset that is not a multiple of the page size in use.
    Misaligned {
        /// What was misaligned (`"length"`, `"offset"`).
        what: &'static str,
        /// Its value.
        value: usize,
        /// The page size it must be a multiple of.
        page_size: usize,
    },
    /// A fault-locking batch of 0 pages (`FaultLockedRegion`, feature
    /// `fault-locked`).
    ZeroBatch,
    /// Flags the call cannot take: `why` says what it needs.
    BadFlags {
        /// The call.
        op: &'static str,
        /// What it needs.
        why: &'static str,
    },
    /// Every fault-handler slot is taken (`FaultLockedRegion`, feature
    /// `fault-locked`).
    TooManyFaultRegions {
        /// Slots there are.
        max: usize,
    },
    /// A sub-range outside the region.
    OutOfRange {
        /// Start of the sub-range.
        offset: usize,
        /// Its length.
        len: usize,
        /// The region's length.
        region: usize,
    },
    /// Locking `requested` bytes would pass RLIMIT_MEMLOCK.
    MemlockLimit {
        /// Bytes this call tried to lock.
        requested: usize,
        /// Bytes the process had locked already (`VmLck`).
        locked: u64,
        /// The soft limit, in bytes (`u64::MAX` for unlimited).
        soft: u64,
        /// The hard limit, in bytes.
        hard: u64,
    },
    /// Locking is not permitted: RLIMIT_MEMLOCK is 0 and the process lacks
    /// CAP_IPC_LOCK.
    NotPermitted {
        /// The call that was refused.
        op: &'static str,
    },
    /// The process has as many mappings as `vm.max_map_count` allows;
    /// locking or protecting part of a mapping splits it into more.
    MapCountLimit {
        /// The call that failed.
        op: &'static str,
        /// Mappings the process has now.
        maps: usize,
        /// `vm.max_map_count`.
        max: usize,
    },
    /// Not enough huge pages are free in the pool (the error every
    /// mmbatch crate gives for it).
    HugePagesNotReserved(HugePagesUnavailable),
    /// The kernel could not find the memory (ENOMEM, EAGAIN) for reasons
    /// other than the limits above.
    OutOfMemory {
        /// The call that failed.
        op: &'static str,
        /// Bytes it was asked for.
        len: usize,
        /// The kernel's error.
        source: io::Error,
    },
    /// A length no mapping can have (with its guard pages it exceeds the
    /// address space).
    TooLarge {
        /// The length asked for.
        len: usize,
    },
    /// A shared mapping of a file sealed against writes (as a memfd handed
    /// over by another process may be), which the kernel refuses with
    /// EPERM: a writable one under `F_SEAL_FUTURE_WRITE` or
    /// `F_SEAL_WRITE`, and before Linux 6.7 a read-only one too under
    /// `F_SEAL_WRITE`.
    FileSealed {
        /// The call that was refused.
        op: &'static str,
        /// The kernel's error (EPERM).
        source: io::Error,
    },
    /// The file ends before the region's last page: an access to a page
    /// past its end would be SIGBUS.
    FileTooShort {
        /// The file's length.
        file_len: u64,
        /// The offset the region maps from.
        offset: u64,
        /// The region's length.
        len: usize,
    },
    /// Another system error.
    Sys {
        /// The call that failed.
        op: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
    /// `FaultLockedRegion`'s handler (feature `fault-locked`) could not
    /// unprotect or lock the faulting page;
    /// the access went ahead (unlocked) rather than fault forever. `cause`
    /// is the handler's failure, classified as a direct call's would be.
    FaultHandler {
        /// Why.
        cause: Box<Error>,
    },
}

impl Error {
    /// Classifies the errno of a lock call (`mlock`, `mlock2`, `mlockall`,
    /// `mmap(MAP_LOCKED)`) that tried to lock `len` bytes.
    pub(crate) fn from_lock(op: &'static str, len: usize, e: Errno) -> Error {
        let source = io::Error::from(e);
        match e {
            Errno::PERM => Error::NotPermitted { op },
            Errno::NOMEM | Errno::AGAIN if may_be_memlock_limit(op, e) => {
                let (soft, hard) = accounting::memlock_limits();
                let locked = accounting::process_locked_bytes().unwrap_or(0);
                if over_memlock_limit(accounting::has_cap_ipc_lock(), locked, len, soft) {
                    return Error::MemlockLimit {
                        requested: len,
                        locked,
                        soft,
                        hard,
                    };
                }
                Error::from_map_count(op).unwrap_or(Error::OutOfMemory { op, len, source })
            }
            // mlock's EAGAIN: pages it could not fault in and lock.
            Errno::AGAIN => Error::OutOfMemory { op, len, source },
            _ => Error::Sys { op, source },
        }
    }

    /// Classifies the errno of a call that may split mappings (`mprotect`,
    /// `munlock`, `mmap`).
    pub(crate) fn from_sys(op: &'static str, len: usize, e: Errno) -> Error {
        if e == Errno::NOMEM {
            if let Some(err) = Error::from_map_count(op) {
                return err;
            }
            return Error::OutOfMemory {
                op,
                len,
                source: e.into(),
            };
        }
        Error::Sys {
            op,
            source: e.into(),
        }
    }

    /// `MapCountLimit` if the process is at (or within a few of) the limit.
    fn from_map_count(op: &'static str) -> Option<Error> {
        let (maps, max) = (accounting::map_count(), accounting::max_map_count());
        near_map_limit(maps, max).then_some(Error::MapCountLimit { op, maps, max })
    }
}

/// Whether errno `e` of lock call `op` can be RLIMIT_MEMLOCK's refusal:
/// ENOMEM of any (`mlock`, `mlock2` and `mlockall` check the limit
/// before locking anything), and EAGAIN of a mapping (`mmap(MAP_LOCKED)`,
/// or any `mmap` under `mlockall(MCL_FUTURE)`). `mlock`'s EAGAIN is pages
/// it could not fault in (the kernel's `__mlock_posix_error_return`),
/// after the range was counted in `VmLck`: read as the limit, the range
/// counted twice and named a limit that was not the cause.
fn may_be_memlock_limit(op: &str, e: Errno) -> bool {
    e == Errno::NOMEM || (e == Errno::AGAIN && op.starts_with("mmap"))
}

/// Whether a lock of `len` more bytes, with `locked` locked already, was
/// refused by RLIMIT_MEMLOCK's soft limit `soft`: only without
/// CAP_IPC_LOCK (which lifts the limit), and only past it (the kernel
/// allows locking up to the limit exactly).
fn over_memlock_limit(cap_ipc_lock: bool, locked: u64, len: usize, soft: u64) -> bool {
    !cap_ipc_lock && locked.saturating_add(len as u64) > soft
}

/// Whether `maps` mappings are at `vm.max_map_count` (`max`), or within
/// the two a split adds (splitting one mapping in three); never when the
/// limit could not be read (`max` 0).
pub(crate) fn near_map_limit(maps: usize, max: usize) -> bool {
    max > 0 && maps.saturating_add(2) >= max
}

fn bytes(n: u64) -> String {
    if n == u64::MAX {
        "unlimited".to_owned()
    } else if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

impl Error {
    /// `wipe_on_fork` on a kernel before 4.14, which refuses
    /// `MADV_WIPEONFORK` (EINVAL).
    pub(crate) const NO_WIPEONFORK: Error = Error::BadFlags {
        op: "RegionBuilder::build",
        why: "wipe_on_fork needs Linux 4.14 or later (madvise(MADV_WIPEONFORK) was refused): \
              without it, keep secrets out of a child by not forking, or by exec right after \
              fork",
    };

    /// `Pages::Transparent` on a kernel without transparent huge pages,
    /// which refuses `MADV_HUGEPAGE` (EINVAL).
    pub(crate) const NO_THP: Error = Error::BadFlags {
        op: "RegionBuilder::build",
        why: "Pages::Transparent needs a kernel with transparent huge pages \
              (CONFIG_TRANSPARENT_HUGEPAGE; madvise(MADV_HUGEPAGE) was refused): use Pages::Base, \
              or Pages::Huge with a reserved pool",
    };
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZeroLength => f.write_str("length is 0: a region needs at least one page"),
            Error::FileTooShort {
                file_len,
                offset,
                len,
            } => write!(
                f,
                "the file holds {file_len} bytes, and a region of {len} bytes from offset {offset} \
                 needs {}: an access past its end would be SIGBUS; map less, or extend the file \
                 first",
                u128::from(*offset) + *len as u128
            ),
            Error::FileSealed { op, .. } => write!(
                f,
                "{op} refused (EPERM): the file is sealed against writes (F_SEAL_WRITE or \
                 F_SEAL_FUTURE_WRITE), and a shared mapping of it cannot be writable (nor, \
                 under F_SEAL_WRITE before Linux 6.7, read-only); map it privately \
                 (RegionBuilder::file's shared = false), or read_only where the kernel allows"
            ),
            Error::TooLarge { len } => write!(
                f,
                "a region of {len} bytes cannot be mapped: with its guard pages it is larger \
                 than the address space; ask for less"
            ),
            Error::BadFlags { op, why } => write!(f, "{op}: {why}"),
            Error::ZeroBatch => {
                f.write_str("a fault batch of 0 pages: lock at least the faulting page (batch 1)")
            }
            Error::TooManyFaultRegions { max } => write!(
                f,
                "all {max} fault-handler regions are in use: drop one, or lock larger regions"
            ),
            Error::Misaligned {
                what,
                value,
                page_size,
            } => match value.div_ceil(*page_size).checked_mul(*page_size) {
                Some(up) => write!(
                    f,
                    "{what} {value} is not a multiple of the page size {page_size}: round it up \
                     to {up}"
                ),
                None => write!(
                    f,
                    "{what} {value} is not a multiple of the page size {page_size}, and rounding \
                     it up overflows: round it down to {}",
                    value / page_size * page_size
                ),
            },
            Error::OutOfRange {
                offset,
                len,
                region,
            } => match offset.checked_add(*len) {
                Some(end) => write!(
                    f,
                    "range {offset}..{end} is outside the region of {region} bytes"
                ),
                None => write!(
                    f,
                    "range of {len} bytes from offset {offset} runs past the end of the address \
                     space, outside the region of {region} bytes"
                ),
            },
            Error::MemlockLimit {
                requested,
                locked,
                soft,
                hard,
            } => {
                write!(
                    f,
                    "locking {} more would pass RLIMIT_MEMLOCK: {} locked already, soft limit \
                     {}, hard limit {}. ",
                    bytes(*requested as u64),
                    bytes(*locked),
                    bytes(*soft),
                    bytes(*hard)
                )?;
                let needed = locked.saturating_add(*requested as u64);
                if needed <= *hard {
                    // `ulimit -l` counts KiB.
                    write!(
                        f,
                        "Raise the soft limit, up to the hard one: `ulimit -l {}` before \
                         starting the process, or setrlimit(RLIMIT_MEMLOCK) in it; or grant \
                         CAP_IPC_LOCK",
                        needed.div_ceil(1024)
                    )
                } else {
                    f.write_str(
                        "The hard limit is below that too, and only a privileged process raises \
                         it: a `memlock` line in /etc/security/limits.conf, LimitMEMLOCK= in a \
                         systemd unit, `--ulimit memlock=` for a container; or grant CAP_IPC_LOCK \
                         (`setcap cap_ipc_lock+ep BINARY`)",
                    )
                }
            }
            Error::NotPermitted { op } => write!(
                f,
                "{op} refused (EPERM): RLIMIT_MEMLOCK is 0 and the process lacks CAP_IPC_LOCK. \
                 Raise the limit with `ulimit -l`, or grant the capability \
                 (`setcap cap_ipc_lock+ep BINARY`)"
            ),
            Error::MapCountLimit { op, maps, max } => write!(
                f,
                "{op} failed (ENOMEM): the process has {maps} mappings and vm.max_map_count is {max}; \
                 locking, unlocking or protecting part of a mapping splits it. Change whole \
                 regions at once (`unlock` rather than `unlock_chunked`, a larger batch for \
                 FaultLockedRegion), or raise the limit: `sysctl -w vm.max_map_count={}`",
                max * 4
            ),
            Error::HugePagesNotReserved(e) => write!(f, "{e}"),
            // A mapping's ENOMEM is never a cgroup's (it charges pages
            // as they are faulted in): address space or commit charge.
            Error::OutOfMemory { op, len, source }
                if op.starts_with("mmap") || op.starts_with("mprotect") =>
            {
                write!(
                    f,
                    "{op} of {} failed: {source}: the process's address space limit (`ulimit \
                     -v`) or the system's commit limit (with vm.overcommit_memory=2, \
                     CommitLimit in /proc/meminfo) refused it, or no free range of the address \
                     space is that large; raise the limit or ask for less",
                    bytes(*len as u64)
                )
            }
            Error::OutOfMemory { op, len, source } => write!(
                f,
                "{op} of {} failed: {source}: the system (or this process's memory cgroup, \
                 memory.max) is out of memory it can lock or map; free memory, raise the \
                 cgroup's limit, or ask for less",
                bytes(*len as u64)
            ),
            Error::Sys { op, source }
                if op.contains("ONFAULT") && source.raw_os_error() == Some(libc::ENOSYS) =>
            {
                write!(
                    f,
                    "{op} failed: {source}: this kernel predates lock-on-fault (Linux 4.4), or a \
                     seccomp filter refuses mlock2; lock the region whole with \
                     LockPolicy::Populate"
                )
            }
            Error::Sys { op, source } => write!(f, "{op} failed: {source}"),
            Error::FaultHandler { cause } => write!(
                f,
                "the fault handler could not lock the faulting page, so it was made accessible \
                 unlocked: {cause}"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::OutOfMemory { source, .. }
            | Error::Sys { source, .. }
            | Error::FileSealed { source, .. } => Some(source),
            Error::FaultHandler { cause } => Some(&**cause),
            Error::HugePagesNotReserved(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memlock_limit_is_blamed_only_past_it_and_without_the_capability() {
        assert!(over_memlock_limit(false, 60 << 10, 8 << 10, 64 << 10));
        // Exactly at the limit the kernel locks: a refusal there is not it.
        assert!(!over_memlock_limit(false, 56 << 10, 8 << 10, 64 << 10));
        assert!(!over_memlock_limit(false, 0, 4096, u64::MAX));
        // CAP_IPC_LOCK lifts the limit.
        assert!(!over_memlock_limit(true, 60 << 10, 8 << 10, 64 << 10));
        assert!(over_memlock_limit(false, u64::MAX, 1, u64::MAX - 1));
    }

    #[test]
    fn the_map_count_is_blamed_at_the_limit_or_within_a_split_of_it() {
        assert!(near_map_limit(65530, 65530));
        assert!(near_map_limit(65528, 65530));
        assert!(!near_map_limit(65527, 65530));
        assert!(
            !near_map_limit(32765, 65530),
            "half the limit is not near it"
        );
        assert!(!near_map_limit(10, 0), "an unreadable limit blames nothing");
        assert!(near_map_limit(usize::MAX, 65530));
    }

    /// A mapping's ENOMEM names the address space and commit limits, not
    /// a cgroup's (which charges pages as they are faulted in, never at
    /// `mmap`); a lock's names memory and the cgroup.
    #[test]
    fn out_of_memory_names_the_limits_of_its_call() {
        let oom = |op| {
            Error::OutOfMemory {
                op,
                len: 4096,
                source: io::Error::from_raw_os_error(12),
            }
            .to_string()
        };
        for op in ["mmap", "mprotect", "mmap(MAP_LOCKED)"] {
            let msg = oom(op);
            assert!(
                msg.contains("ulimit -v") && msg.contains("CommitLimit"),
                "{msg}"
            );
            assert!(!msg.contains("memory.max"), "{msg}");
        }
        assert!(oom("mlock").contains("memory.max"));
    }

    /// The memlock limit's message gives the `ulimit -l` that suffices
    /// where the hard limit allows it, and says only a privileged process
    /// helps where it does not (an unprivileged `ulimit -l` past the hard
    /// limit fails).
    #[test]
    fn the_memlock_fix_depends_on_the_hard_limit() {
        let limit = |hard| {
            Error::MemlockLimit {
                requested: 1 << 20,
                locked: 64 << 10,
                soft: 64 << 10,
                hard,
            }
            .to_string()
        };
        let raisable = limit(8 << 20);
        assert!(raisable.contains("`ulimit -l 1088`"), "{raisable}");
        let stuck = limit(64 << 10);
        assert!(!stuck.contains("ulimit -l"), "{stuck}");
        assert!(
            stuck.contains("limits.conf") && stuck.contains("CAP_IPC_LOCK"),
            "{stuck}"
        );
    }

    /// Lock-on-fault refused as unknown names the kernel it needs and the
    /// policy that works without it.
    #[test]
    fn lock_on_fault_unknown_to_the_kernel_names_the_fix() {
        let e = Error::from_lock("mlock2(MLOCK_ONFAULT)", 4096, Errno::NOSYS).to_string();
        assert!(
            e.contains("Linux 4.4") && e.contains("LockPolicy::Populate"),
            "{e}"
        );
        let e = Error::from_lock("mlock", 4096, Errno::NOSYS).to_string();
        assert!(!e.contains("LockPolicy::Populate"), "{e}");
    }

    /// Each error that wraps another hands it to `source()`, so that a
    /// caller's error report (anyhow's chain, say) shows the cause.
    #[test]
    fn wrapped_errors_are_the_source() {
        use std::error::Error as _;
        let oom = Error::OutOfMemory {
            op: "mlock",
            len: 4096,
            source: io::Error::from_raw_os_error(12),
        };
        let src = oom.source().expect("OutOfMemory has a source");
        assert_eq!(
            src.downcast_ref::<io::Error>()
                .and_then(io::Error::raw_os_error),
            Some(12)
        );
        let sys = Error::Sys {
            op: "munlockall",
            source: io::Error::from_raw_os_error(22),
        };
        assert!(
            sys.source()
                .unwrap()
                .to_string()
                .contains("Invalid argument")
        );
        let handler = Error::FaultHandler {
            cause: Box::new(Error::ZeroLength),
        };
        assert!(matches!(
            handler.source().unwrap().downcast_ref::<Error>(),
            Some(Error::ZeroLength)
        ));
        let huge = Error::HugePagesNotReserved(HugePagesUnavailable::new(
            mmbatch_mmap::HugePageSize::Size2M,
            3,
            1,
        ));
        let inner = huge.source().unwrap();
        assert_eq!(
            inner
                .downcast_ref::<HugePagesUnavailable>()
                .map(|e| e.needed),
            Some(3)
        );
        assert!(Error::ZeroLength.source().is_none());
    }

    #[test]
    fn sizes_print_in_the_largest_whole_unit() {
        assert_eq!(bytes(u64::MAX), "unlimited");
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes(3 << 20), "3 MiB");
        assert_eq!(bytes((1 << 30) + (1 << 20)), "1025 MiB");
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(1024), "1 KiB");
        assert_eq!(bytes(1000), "1000 bytes");
        assert_eq!(bytes(1025), "1025 bytes");
        assert_eq!(bytes(0), "0 bytes");
        let e = Error::MemlockLimit {
            requested: 1 << 20,
            locked: 60 << 10,
            soft: 64 << 10,
            hard: u64::MAX,
        };
        assert_eq!(
            e.to_string().split(". ").next().unwrap(),
            "locking 1 MiB more would pass RLIMIT_MEMLOCK: 60 KiB locked already, soft limit 64 \
             KiB, hard limit unlimited"
        );
    }
}
