//! Errors that name the fix.

use std::{fmt, io, ops::Range};

/// Why a fault-around operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A fault-around order above 9 (a window larger than a page table).
    OrderTooLarge {
        /// The order asked for.
        order: u32,
    },
    /// A fault at a page outside the mapping.
    FaultOutsideVma {
        /// The faulting page.
        page: u64,
        /// The mapping's pages.
        vma: Range<u64>,
    },
    /// A region length of zero or not a multiple of the page size.
    BadLength {
        /// The length asked for.
        len: usize,
        /// The page size.
        page_size: usize,
    },
    /// The source holds fewer bytes than the region.
    SourceTooShort {
        /// Bytes the source has.
        source_len: u64,
        /// Bytes the region needs.
        region_len: usize,
    },
    /// userfaultfd was refused (EPERM/EACCES).
    NoPermission {
        /// The kernel's error.
        source: io::Error,
    },
    /// The kernel has no userfaultfd (ENOSYS) or lacks a feature.
    Unsupported {
        /// What is missing.
        what: String,
    },
    /// A handler count of 0 or above the most a region starts.
    BadHandlers {
        /// Handlers asked for.
        handlers: usize,
        /// The most allowed.
        max: usize,
    },
    /// The OS refused a thread (`RLIMIT_NPROC`, a cgroup's `pids.max`).
    ThreadRefused {
        /// Threads started before the refusal (all stopped again).
        started: usize,
        /// Threads asked for.
        asked: usize,
        /// The OS's error.
        source: io::Error,
    },
    /// A page could not be filled: in a [`UffdRegion`](crate::UffdRegion)
    /// or a [`UffdHandler`](crate::UffdHandler), its readers got `signal`
    /// instead of the data; from a call that reads a source into a page
    /// cache or a working-set file, `signal` is `None`.
    PageFailed {
        /// The page; `u64::MAX` for a fault outside every range a
        /// [`UffdHandler`](crate::UffdHandler) was given.
        page: u64,
        /// What its readers got; `None` if neither poisoning nor
        /// protecting the page worked (they stay blocked until shutdown),
        /// or for a page never faulted on.
        signal: Option<crate::FailSignal>,
        /// Why: the source's error, a timeout, or the kernel's refusal.
        source: io::Error,
    },
    /// A page index past the end of a file in the engine's page cache.
    #[cfg(feature = "engine")]
    IndexOutOfRange {
        /// The index.
        index: u64,
        /// Pages in the file.
        len: u64,
    },
    /// A page the engine's page cache has no frame for (never inserted).
    #[cfg(feature = "engine")]
    NotCached {
        /// The page.
        page: u64,
    },
    /// A file too large for the engine's page cache (frames are 32-bit).
    #[cfg(feature = "engine")]
    FileTooLarge {
        /// Pages asked for.
        pages: u64,
    },
    /// The engine refused an operation (feature `engine`).
    #[cfg(feature = "engine")]
    Engine(mmbatch_lru::LruError),
    /// A working-set record that cannot be read: `reason` says what is
    /// wrong (not a record, a version this crate does not read, cut short,
    /// a checksum that does not match, a page past the image).
    RecordCorrupt {
        /// What is wrong with it.
        reason: String,
    },
    /// A working-set file ([`Record::write_pages`](crate::Record::write_pages))
    /// that is not its record's: `reason` says what is wrong (not such a
    /// file, written for another record, cut short).
    WorkingSetFile {
        /// What is wrong with it.
        reason: String,
    },
    /// A working-set record made from another image than the region's.
    RecordMismatch {
        /// What differs: `"image length"`, `"page size"` or `"image id"`.
        what: &'static str,
        /// The record's value.
        record: String,
        /// The region's value.
        region: String,
    },
    /// A builder setting out of range: `why` says what it must be.
    BadSetting {
        /// The builder method, or the argument.
        setting: &'static str,
        /// What it was given.
        value: String,
        /// What it must be.
        why: String,
    },
    /// A page source or working-set file that can never be read (a file
    /// open for writing only).
    SourceUnreadable {
        /// Which: `"page source"` or `"working-set file"`.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
    /// An image larger than the memory left to hold it:
    /// [`UffdRegion::page_cache_from`](crate::UffdRegion::page_cache_from)
    /// copies the whole image into a memfd, which would run the machine (or
    /// this process's memory cgroup) out of memory. Refused before a byte
    /// is written.
    ImageTooLarge {
        /// The image's bytes.
        len: usize,
        /// The bytes there is room for: available memory and free swap,
        /// or what the memory cgroup has left, whichever is less.
        room: u64,
    },
    /// The kernel refused to map the region (`ENOMEM`): no free range of
    /// addresses that large, or a limit on mappings.
    MapRefused {
        /// The region's bytes.
        len: usize,
        /// The kernel's error.
        source: io::Error,
    },
    /// A page-cache region's file is sealed against writes (`F_SEAL_WRITE`
    /// or `F_SEAL_FUTURE_WRITE`): the region maps it shared and writable,
    /// which the kernel then refuses (EPERM).
    FileSealed {
        /// The kernel's error.
        source: io::Error,
    },
    /// A huge-page region's pool has too few free pages; the message says
    /// how to reserve them.
    HugePagesUnavailable(mmbatch_mmap::HugePagesUnavailable),
    /// Another system error.
    Sys {
        /// The call that failed.
        op: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OrderTooLarge { order } => write!(
                f,
                "fault-around order {order} is too large: it must be at most 9 (512 pages, one page table)"
            ),
            Error::FaultOutsideVma { page, vma } => {
                write!(
                    f,
                    "fault at page {page} is outside the mapping (pages {vma:?})"
                )
            }
            Error::BadLength { len, page_size } => write!(
                f,
                "region length {len} must be a non-zero multiple of the page size {page_size}"
            ),
            Error::SourceTooShort {
                source_len,
                region_len,
            } => write!(
                f,
                "the page source has {source_len} bytes but the region needs {region_len}: use a shorter region \
                 or a longer source"
            ),
            Error::BadSetting {
                setting,
                value,
                why,
            } => write!(f, "setting {setting} ({value}) is refused: {why}"),
            Error::SourceUnreadable { what, source } => {
                write!(f, "the {what} cannot be read: {source}")
            }
            Error::NoPermission { source } => write!(
                f,
                "userfaultfd refused ({source}): open /dev/userfaultfd needs read/write access to it \
                 (e.g. `setfacl -m u:$USER:rw /dev/userfaultfd`), and the userfaultfd system call needs \
                 CAP_SYS_PTRACE or `sysctl -w vm.unprivileged_userfaultfd=1`; in a container, its \
                 seccomp profile may also block userfaultfd"
            ),
            Error::Unsupported { what } => write!(f, "this kernel lacks {what}"),
            Error::BadHandlers { handlers, max } => write!(
                f,
                "{handlers} handler threads asked for: a region runs 1 to {max}"
            ),
            Error::ThreadRefused {
                started,
                asked,
                source,
            } => write!(
                f,
                "the OS refused a thread after {started} of {asked} ({source}): the process hit \
                 RLIMIT_NPROC (`ulimit -u`) or its cgroup's pids.max; ask for fewer threads or \
                 raise the limit"
            ),
            Error::PageFailed {
                page,
                signal,
                source,
            } => {
                let got = match signal {
                    Some(crate::FailSignal::Sigbus) => "its readers got SIGBUS",
                    Some(crate::FailSignal::Sigsegv) => "its readers got SIGSEGV",
                    _ => "no reader was signalled",
                };
                if *page == u64::MAX {
                    return write!(
                        f,
                        "a fault outside the handler's ranges could not be served ({got}): \
                         {source}; give the handler every range the other process registered"
                    );
                }
                let fix = if source.kind() == io::ErrorKind::TimedOut {
                    "make the source answer sooner, or give it longer with the builder's \
                     source_timeout"
                } else {
                    "that is the page source's error or the kernel's refusal to install the \
                     page: fix the source, or what the kernel names"
                };
                write!(
                    f,
                    "page {page} could not be filled ({got}): {source}; {fix}"
                )
            }
            #[cfg(feature = "engine")]
            Error::IndexOutOfRange { index, len } => write!(
                f,
                "page index {index} is past the end of the file ({len} pages)"
            ),
            #[cfg(feature = "engine")]
            Error::NotCached { page } => write!(
                f,
                "page {page} is not in the page cache: insert it (PageCache::insert) before mapping it"
            ),
            #[cfg(feature = "engine")]
            Error::FileTooLarge { pages } => write!(
                f,
                "a file of {pages} pages is larger than the engine's page cache can index \
                 (at most {} pages: frame numbers are 32-bit)",
                u32::MAX
            ),
            Error::RecordCorrupt { reason } => write!(
                f,
                "the working-set record is corrupt ({reason}): record it again with \
                 UffdRegionBuilder::record and save it with Record::save"
            ),
            Error::WorkingSetFile { reason } => write!(
                f,
                "the working-set file does not go with the record replayed ({reason}): write it \
                 again from this record with Record::write_pages, or give the record it was \
                 written from"
            ),
            Error::RecordMismatch {
                what,
                record,
                region,
            } => write!(
                f,
                "the working-set record was made from another image: its {what} is {record}, \
                 this region's is {region}; replay a record of this image, or record one"
            ),
            #[cfg(feature = "engine")]
            Error::Engine(e) => write!(f, "{e}"),
            Error::ImageTooLarge { len, room } => write!(
                f,
                "the image is {} but there is room for {} more in memory and swap (or in this \
                 process's memory cgroup): page_cache_from copies the whole image into memory, \
                 and filling it would likely end in an OOM kill; free memory or raise the cgroup's \
                 limit, or serve the image from its source without copying it \
                 (UffdRegion::new, or over_page_cache over the image's own file)",
                Size(*len as u64),
                Size(*room)
            ),
            Error::MapRefused { len, source } => write!(
                f,
                "mapping the region's {} was refused ({source}): this process has no free range \
                 of addresses that large (x86-64 gives a process 128 TiB in all without 5-level \
                 paging), or a limit refused it (`ulimit -v` or `ulimit -d`, vm.max_map_count, \
                 vm.overcommit_memory=2); ask for a shorter region, or raise the limit",
                Size(*len as u64)
            ),
            Error::FileSealed { source } => write!(
                f,
                "the page cache's file is sealed against writes ({source}): a region maps its \
                 file shared and writable (as_mut_slice, a VMM's guest memory), so it cannot \
                 take a file sealed with F_SEAL_WRITE or F_SEAL_FUTURE_WRITE; F_SEAL_SHRINK \
                 still keeps the file from being truncated under the region"
            ),
            Error::HugePagesUnavailable(e) => write!(f, "{e}"),
            Error::Sys { op, source } => write!(f, "{op} failed: {source}"),
        }
    }
}

/// A byte count as people read it: `1 PiB (1125899906842624 bytes)`, or
/// `4095 bytes` below a KiB.
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let bytes = self.0;
        // The largest unit the count reaches, at most EiB (2^60).
        let Some(unit) = (bytes.max(1).ilog2() / 10).checked_sub(1) else {
            return write!(f, "{bytes} bytes");
        };
        let scaled = bytes as f64 / (1u64 << (10 * (unit + 1))) as f64;
        let name = UNITS[unit as usize];
        if bytes % (1 << (10 * (unit + 1))) == 0 {
            write!(f, "{scaled} {name} ({bytes} bytes)")
        } else {
            write!(f, "{scaled:.1} {name} ({bytes} bytes)")
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NoPermission { source }
            | Error::SourceUnreadable { source, .. }
            | Error::Sys { source, .. }
            | Error::MapRefused { source, .. }
            | Error::FileSealed { source }
            | Error::ThreadRefused { source, .. }
            | Error::PageFailed { source, .. } => Some(source),
            #[cfg(feature = "engine")]
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(feature = "engine")]
impl From<mmbatch_lru::LruError> for Error {
    fn from(e: mmbatch_lru::LruError) -> Self {
        Error::Engine(e)
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::FailSignal;
    use std::io;

    /// An error caused by a refused system call or a failed read hands
    /// that error on as its source, so that an error-chain report
    /// (anyhow's, eyre's) ends with the errno; one about a setting has
    /// none.
    #[test]
    fn an_error_with_a_cause_gives_it_as_its_source() {
        use std::error::Error as _;
        let errno = |e: &Error| {
            e.source()
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error)
        };
        let sys = Error::Sys {
            op: "mmap",
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        };
        assert_eq!(errno(&sys), Some(libc::ENOMEM));
        let denied = Error::NoPermission {
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert_eq!(errno(&denied), Some(libc::EPERM));
        let bad = Error::BadLength {
            len: 3,
            page_size: 4096,
        };
        assert!(bad.source().is_none());
        #[cfg(feature = "engine")]
        {
            let engine = Error::from(mmbatch_lru::LruError::ZeroFrames);
            assert!(
                engine
                    .source()
                    .and_then(|s| s.downcast_ref::<mmbatch_lru::LruError>())
                    .is_some_and(|e| matches!(e, mmbatch_lru::LruError::ZeroFrames)),
                "{engine}"
            );
        }
    }

    /// A failed page's message says what its readers got, the cause, and
    /// the fix: it is what a log shows of a page that never arrived.
    #[test]
    fn a_failed_page_says_what_its_readers_got() {
        let failed = |signal| Error::PageFailed {
            page: 7,
            signal,
            source: io::Error::new(io::ErrorKind::TimedOut, "source timed out"),
        };
        for (signal, got) in [
            (Some(FailSignal::Sigbus), "its readers got SIGBUS"),
            (Some(FailSignal::Sigsegv), "its readers got SIGSEGV"),
            (None, "no reader was signalled"),
        ] {
            let m = failed(signal).to_string();
            assert!(m.starts_with("page 7 could not be filled ("), "{m}");
            assert!(m.contains(got), "{signal:?}: {m}");
            assert!(m.contains("source timed out"), "{m}");
            assert!(m.contains("builder's source_timeout"), "{m}");
        }
        // The fix follows the cause: a source's own error, the kernel's
        // refusal, a fault outside a handler's ranges.
        let with = |page, source| {
            Error::PageFailed {
                page,
                signal: Some(FailSignal::Sigbus),
                source,
            }
            .to_string()
        };
        let m = with(7, io::Error::other("the download failed"));
        assert!(
            m.contains("the download failed; that is the page source's"),
            "{m}"
        );
        assert!(!m.contains("source_timeout"), "{m}");
        let m = with(
            u64::MAX,
            io::Error::other("a fault at 0x1000, outside every range"),
        );
        assert!(m.starts_with("a fault outside the handler's ranges"), "{m}");
        assert!(
            m.ends_with("give the handler every range the other process registered"),
            "{m}"
        );
        assert!(!m.contains("18446744073709551615"), "{m}");
    }

    /// Sizes print in the largest unit they reach, with the exact count.
    #[test]
    fn sizes_print_in_units_with_their_bytes() {
        let size = |b| super::Size(b).to_string();
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1024), "1 KiB (1024 bytes)");
        assert_eq!(size(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(size((1 << 20) - 1), "1024.0 KiB (1048575 bytes)");
        assert_eq!(size(300 << 20), "300 MiB (314572800 bytes)");
        assert_eq!(size(7 << 18), "1.8 MiB (1835008 bytes)");
        assert_eq!(size(1 << 50), "1 PiB (1125899906842624 bytes)");
        assert_eq!(size(u64::MAX), "16.0 EiB (18446744073709551615 bytes)");
    }
}
