//! The hugetlb vocabulary the mmbatch crates share: a page size
//! ([`HugePageSize`]), its pool's counts, and the one error for a pool
//! that has too few free pages ([`HugePagesUnavailable`]).

use std::{fmt, fs, io, os::fd::BorrowedFd};

use rustix::mm::MapFlags;

/// A hugetlb page size: 2 MiB or 1 GiB on x86-64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HugePageSize {
    /// 2 MiB pages (`MAP_HUGE_2MB`).
    Size2M,
    /// 1 GiB pages (`MAP_HUGE_1GB`).
    Size1G,
}

impl HugePageSize {
    /// Bytes per page.
    pub const fn bytes(self) -> usize {
        match self {
            HugePageSize::Size2M => 2 << 20,
            HugePageSize::Size1G => 1 << 30,
        }
    }

    /// The flags that map pages of this size: `MAP_HUGETLB` and
    /// `MAP_HUGE_2MB` or `MAP_HUGE_1GB`.
    pub fn map_flags(self) -> MapFlags {
        MapFlags::HUGETLB
            | match self {
                HugePageSize::Size2M => crate::flags::HUGE_2MB,
                HugePageSize::Size1G => crate::flags::HUGE_1GB,
            }
    }

    /// The pool's file `file` under `/sys/kernel/mm/hugepages/`.
    pub fn pool_file(self, file: &str) -> String {
        format!(
            "/sys/kernel/mm/hugepages/hugepages-{}kB/{file}",
            self.bytes() / 1024
        )
    }

    /// Pages in the pool (`nr_hugepages`); 0 where it cannot be read.
    pub fn pool_pages(self) -> usize {
        self.read("nr_hugepages")
    }

    /// Free pages not promised to a mapping yet (`free_hugepages -
    /// resv_hugepages`): what a new mapping can reserve.
    pub fn available_pages(self) -> usize {
        self.read("free_hugepages")
            .saturating_sub(self.read("resv_hugepages"))
    }

    /// A count from the pool's `file` (`nr_hugepages`, `free_hugepages`,
    /// `resv_hugepages`, `surplus_hugepages`, ...); `None` where it cannot
    /// be read, for a caller that must not take a missing count for 0
    /// (one that writes the pool back from it).
    pub fn pool_count(self, file: &str) -> Option<usize> {
        fs::read_to_string(self.pool_file(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// `Ok` where the kernel has a pool of pages of this size, or where
    /// `/sys/kernel/mm/hugepages` cannot be read (a container without
    /// sysfs: the mapping's own error tells then); else an error of kind
    /// [`io::ErrorKind::Unsupported`] naming the sizes it has. The kernel
    /// refuses such pages with a bare EINVAL (`mmap`) or ENODEV
    /// (`memfd_create`), which this message replaces.
    pub fn check_supported(self) -> io::Result<()> {
        self.check_supported_in(crate::HUGEPAGES_DIR)
    }

    /// [`check_supported`](Self::check_supported) against the pools
    /// listed in `dir`.
    pub(crate) fn check_supported_in(self, dir: &str) -> io::Result<()> {
        match sizes_here(dir).and_then(|s| size_missing(self.bytes(), s)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn read(self, file: &str) -> usize {
        self.pool_count(file).unwrap_or(0)
    }
}

/// The huge page sizes, in KiB, that the kernel has pools for: the
/// `hugepages-<N>kB` directories of `dir` (`/sys/kernel/mm/hugepages`);
/// `None` where it cannot be read (no sysfs, as in some containers).
pub(crate) fn sizes_here(dir: &str) -> Option<Vec<usize>> {
    let mut sizes: Vec<usize> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()
        })
        .collect();
    sizes.sort_unstable();
    Some(sizes)
}

/// The error for a hugetlb mapping of `page`-byte pages the kernel
/// refused (`EINVAL`) when `sizes` (KiB, [`sizes_here`]) lacks that size:
/// the CPU or the kernel has no such pages, which a bare "Invalid
/// argument" did not say. `None` if the size is there.
pub(crate) fn size_missing(page: usize, sizes: Vec<usize>) -> Option<io::Error> {
    let kib = page / 1024;
    (!sizes.contains(&kib)).then(|| {
        let here: Vec<String> = sizes.iter().map(|&k| format!("{k} kB")).collect();
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "this kernel has no {kib} kB huge pages (no hugepages-{kib}kB pool under \
                 /sys/kernel/mm/hugepages; its sizes: {}): use one of those sizes; 1 GiB pages \
                 need a CPU with them (x86's pdpe1gb) and often the boot parameter hugepagesz=1G",
                if here.is_empty() {
                    "none".to_owned()
                } else {
                    here.join(", ")
                }
            ),
        )
    })
}

/// The pool of `size` pages has fewer free pages than a mapping needs:
/// the error every mmbatch crate returns for it, with the command that
/// reserves them (or, past the machine's memory, saying so).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HugePagesUnavailable {
    /// The page size.
    pub size: HugePageSize,
    /// Pages the mapping needs.
    pub needed: usize,
    /// Pages free (and not promised to another mapping) when it was asked.
    pub free: usize,
    /// Pages in the pool (`nr_hugepages`) when it was asked: the count the
    /// message's command raises, whenever it is printed.
    pub pool: usize,
    /// Pages of this size the machine's memory holds (`MemTotal`), read
    /// when it was asked; 0 where unknown. A mapping that needs more
    /// cannot have them, whatever the pool.
    pub memory_pages: usize,
}

impl HugePagesUnavailable {
    /// `needed` pages of `size` asked for, `free` free; the pool's size is
    /// read now.
    pub fn new(size: HugePageSize, needed: usize, free: usize) -> Self {
        Self {
            size,
            needed,
            free,
            pool: size.pool_pages(),
            memory_pages: memory_bytes() / size.bytes(),
        }
    }
}

/// The huge page size of a file on hugetlbfs (its filesystem's block,
/// `statfs`'s `f_bsize` where `f_type` is `HUGETLBFS_MAGIC`), or `None`
/// for a file on any other filesystem, whose block (64 KiB on some XFS,
/// 1 MiB on NFS) says nothing of its pages. A mapping of a hugetlbfs file
/// is of that page size, in whole pages of it, and a writable one extends
/// the file to cover it (`hugetlbfs_file_mmap`), so a memfd made with
/// `MFD_HUGETLB` may be mapped before it has a length.
///
/// # Errors
/// `fstatfs(2)`'s: `EBADF` for a descriptor that is not open.
pub fn hugetlbfs_page_size(fd: BorrowedFd<'_>) -> io::Result<Option<usize>> {
    let fs = rustix::fs::fstatfs(fd)?;
    // `f_type`'s width and sign differ by target: the magic is its low
    // 32 bits (on 32-bit targets a signed `f_type` holds it negative).
    #[allow(clippy::unnecessary_cast)]
    let f_type = fs.f_type as u32;
    Ok((f_type == linux_raw_sys::general::HUGETLBFS_MAGIC).then_some(fs.f_bsize as usize))
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`); 0 where it
/// cannot be read.
fn memory_bytes() -> usize {
    meminfo_bytes("MemTotal")
        .ok()
        .flatten()
        .map_or(0, |b| usize::try_from(b).unwrap_or(usize::MAX))
}

/// The value of `/proc/meminfo`'s `field` (`MemTotal`, `Hugepagesize`)
/// in bytes, the kernel printing it in kB; `None` where no line names
/// it, or its value is not a number of kB or overflows. In `u64`: a
/// 32-bit process may run on a kernel with more memory than it can
/// address. This crate's one reader of that file.
pub(crate) fn meminfo_bytes(field: &str) -> std::io::Result<Option<u64>> {
    let meminfo = fs::read_to_string("/proc/meminfo")?;
    Ok(meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .and_then(|kib| kib.checked_mul(1024)))
}

impl fmt::Display for HugePagesUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            size,
            needed,
            free,
            pool,
            memory_pages,
        } = *self;
        let kib = size.bytes() / 1024;
        if free >= needed {
            // The pool had them: the kernel's refusal was another limit's.
            return write!(
                f,
                "{needed} huge pages of {kib} KiB are needed and {free} are free, yet the mapping \
                 was refused (ENOMEM): another limit applies, a hugetlb cgroup's reservations \
                 (`hugetlb.{}.rsvd.max`), a cpuset whose nodes hold fewer of the free pages (the \
                 count is the machine's), a hugetlbfs mount's `size=`, the address space's \
                 (`ulimit -v`) or the mappings' (`vm.max_map_count`); raise the one this \
                 process is under",
                if size == HugePageSize::Size1G {
                    "1GB"
                } else {
                    "2MB"
                }
            );
        }
        let target = pool.saturating_add(needed.saturating_sub(free));
        if memory_pages > 0 && target > memory_pages {
            return write!(
                f,
                "{needed} huge pages of {kib} KiB are needed ({free} free), a pool of {target}: \
                 more than this machine's memory holds ({memory_pages} such pages): ask for a \
                 smaller region"
            );
        }
        write!(
            f,
            "{needed} huge pages of {kib} KiB are needed but only {free} are free: reserve them, as \
             root, with `echo {target} > {}`",
            size.pool_file("nr_hugepages"),
        )?;
        if size == HugePageSize::Size1G {
            f.write_str(
                " (1 GiB pages may need a reservation at boot, `hugepagesz=1G hugepages=N`, once \
                 memory is fragmented)",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for HugePagesUnavailable {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_the_pool_file_and_the_count_to_write() {
        let e = HugePagesUnavailable {
            size: HugePageSize::Size2M,
            needed: 3,
            free: 1,
            pool: 5,
            memory_pages: 1000,
        };
        let msg = e.to_string();
        // The pool as it was when asked, whatever it is when printed.
        assert!(msg.contains("`echo 7 > "), "{msg}");
        assert!(msg.contains("3 huge pages of 2048 KiB"), "{msg}");
        assert!(
            msg.contains("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
            "{msg}"
        );
        assert_eq!(
            HugePageSize::Size1G.map_flags(),
            MapFlags::HUGETLB | MapFlags::HUGE_1GB
        );
        assert_eq!(HugePageSize::Size2M.bytes(), 2 << 20);
        assert_eq!(HugePageSize::Size1G.bytes(), 1 << 30);
        // A 1 GiB pool's error adds the boot-time hint; a 2 MiB one's not.
        let g = HugePagesUnavailable::new(HugePageSize::Size1G, 1, 0).to_string();
        assert!(g.contains("hugepagesz=1G"), "{g}");
        assert!(!msg.contains("hugepagesz=1G"), "{msg}");
        // More than the machine holds: no command that cannot work (it
        // read `echo 8796093022207 > ...` for a region of usize::MAX; on a
        // 32-bit target, as many pages as the count holds).
        let pages = (usize::MAX >> 21).max(usize::MAX >> (usize::BITS - 24));
        let huge = HugePagesUnavailable::new(HugePageSize::Size2M, pages, 0);
        assert!(huge.memory_pages > 0, "MemTotal read: {huge:?}");
        let msg = huge.to_string();
        assert!(
            msg.contains("more than this machine's memory holds"),
            "{msg}"
        );
        assert!(!msg.contains("echo"), "{msg}");
        // The pool had the pages (ENOMEM was another limit's): no
        // command that changes nothing (it read `echo 5 > ...`).
        let other = HugePagesUnavailable {
            free: 3,
            ..e.clone()
        }
        .to_string();
        assert!(other.contains("hugetlb.2MB.rsvd.max"), "{other}");
        assert!(!other.contains("echo"), "{other}");
        // A pool as large as the memory can be reserved (5 + 995 - 0);
        // an unknown memory (0) refuses nothing.
        for (needed, memory_pages) in [(996, 1000), (usize::MAX / 2, 0)] {
            let e = HugePagesUnavailable {
                needed,
                memory_pages,
                ..e.clone()
            };
            assert!(e.to_string().contains("echo"), "{e:?}: {e}");
        }
    }

    /// The pool's counts as sysfs has them: one page added to the 2 MiB
    /// pool (as root; given back after) shows in `pool_pages` and
    /// `available_pages`.
    #[test]
    fn pool_counts_follow_sysfs() {
        // The pool to this test: the binary's other pool tests wait.
        let _turn = mmbatch_testkit::huge::hold();
        let size = HugePageSize::Size2M;
        let file = size.pool_file("nr_hugepages");
        let Ok(text) = fs::read_to_string(&file) else {
            return; // no hugetlbfs
        };
        let before: usize = text.trim().parse().unwrap();
        assert_eq!(size.pool_pages(), before);
        assert_eq!(size.pool_count("nr_hugepages"), Some(before));
        assert_eq!(size.pool_count("no_such_count"), None, "not read as 0");
        struct Restore(String, usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = fs::write(&self.0, self.1.to_string());
            }
        }
        let (available, restore) = (size.available_pages(), Restore(file.clone(), before));
        let grew = fs::write(&file, (before + 1).to_string()).is_ok()
            && fs::read_to_string(&file).is_ok_and(|t| t.trim() == (before + 1).to_string());
        if !grew {
            eprintln!("not root, or no free 2 MiB page: the pool could not grow; not exercised");
            return;
        }
        assert_eq!(size.pool_pages(), before + 1);
        assert_eq!(size.available_pages(), available + 1);
        drop(restore);
        assert_eq!(size.pool_pages(), before);
    }
}
