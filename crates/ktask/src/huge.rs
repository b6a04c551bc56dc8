//! hugetlb regions of 2 MiB or 1 GiB pages, reserved in the kernel's pool
//! for the region's life (as root) and given back when it drops.

use std::{fmt, fs, io};

use mmbatch_mmap::{MapFlags, Mapping, ProtFlags};

use crate::mem::clear_aligned;

/// A hugetlb page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HugeSize {
    /// 2 MiB pages.
    Size2M,
    /// 1 GiB pages.
    Size1G,
}

impl HugeSize {
    /// Bytes per page.
    pub fn bytes(self) -> usize {
        match self {
            HugeSize::Size2M => 2 << 20,
            HugeSize::Size1G => 1 << 30,
        }
    }

    fn pool(self, file: &str) -> String {
        format!(
            "/sys/kernel/mm/hugepages/hugepages-{}kB/{file}",
            self.bytes() / 1024
        )
    }

    /// Free pages not promised to a mapping yet (`free - resv`): what a new
    /// mapping can reserve.
    fn available(self) -> usize {
        self.read("free_hugepages")
            .saturating_sub(self.read("resv_hugepages"))
    }

    fn read(self, file: &str) -> usize {
        fs::read_to_string(self.pool(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// Why a huge-page region could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum HugeError {
    /// A length of zero or not a multiple of the page size.
    Misaligned {
        /// The length asked for.
        len: usize,
        /// The huge page size.
        page: usize,
    },
    /// The pool does not have (and could not be grown to) enough free pages.
    NotReservable {
        /// The page size.
        page: usize,
        /// Pages needed.
        needed: usize,
        /// Pages free after trying.
        free: usize,
    },
    /// mmap failed.
    Map(io::Error),
}

impl fmt::Display for HugeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HugeError::Misaligned { len, page } => write!(
                f,
                "length {len} is not a non-zero multiple of the huge page size {page}: round it up to {}",
                len.div_ceil(*page).max(1).saturating_mul(*page)
            ),
            HugeError::NotReservable { page, needed, free } => write!(
                f,
                "{needed} huge pages of {} KiB are needed but only {free} are free, and the pool could not be \
                 grown: as root, `echo {needed} > /sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages` \
                 (1 GiB pages may need a reservation at boot, `hugepagesz=1G hugepages={needed}`, when memory \
                 is fragmented)",
                page / 1024,
                page / 1024
            ),
            HugeError::Map(e) => write!(f, "mmap(MAP_HUGETLB) failed: {e}"),
        }
    }
}

impl std::error::Error for HugeError {}

/// Serialises this process's changes to the pools: each region grows the
/// pool by what it lacks and shrinks it by as much when it drops, so
/// regions can drop in any order (another process changing the pool at
/// the same moment can still race with us: the kernel offers no atomic
/// adjustment).
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Grows the pool of `size` pages by up to `n`; returns by how many it
/// grew (the kernel may find fewer free huge pages than asked). Fail point
/// `ktask::hugepool` refuses, as a pool that cannot grow would.
fn grow_pool(size: HugeSize, n: usize) -> usize {
    fail_point!("ktask::hugepool", |_| 0);
    let total = size.read("nr_hugepages");
    if fs::write(size.pool("nr_hugepages"), (total + n).to_string()).is_err() {
        return 0;
    }
    size.read("nr_hugepages").saturating_sub(total)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes: what the kernel could
/// give without swapping.
fn mem_available() -> Option<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Shrinks the pool by `n` pages (those this process added).
fn shrink_pool(size: HugeSize, n: usize) {
    let total = size.read("nr_hugepages");
    let _ = fs::write(
        size.pool("nr_hugepages"),
        total.saturating_sub(n).to_string(),
    );
}

/// An anonymous hugetlb region. Pages this region added to the pool are
/// given back when it drops.
#[derive(Debug)]
pub struct HugeRegion {
    /// Always `Some` until drop, which unmaps it before giving pages back.
    map: Option<Mapping>,
    size: HugeSize,
    /// Pages this region added to the pool, taken out again on drop.
    grown: usize,
}

impl HugeRegion {
    /// Maps `len` bytes of `size` pages, growing the pool first if it has
    /// too few free pages (which needs root).
    pub fn new(size: HugeSize, len: usize) -> Result<Self, HugeError> {
        let page = size.bytes();
        if len == 0 || len % page != 0 {
            return Err(HugeError::Misaligned { len, page });
        }
        let needed = len / page;
        let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let free = size.available();
        let mut grown = 0;
        if free < needed {
            // Growing the pool turns free memory into huge pages as far as
            // it can (compacting on the way) before it falls short: as
            // root, a region larger than the memory there is took nearly
            // all of it from every other process for a moment, to be
            // refused anyway. Refuse first what cannot fit.
            let lacking = (needed - free).saturating_mul(page) as u64;
            if mem_available().is_some_and(|avail| lacking > avail) {
                return Err(HugeError::NotReservable { page, needed, free });
            }
            grown = grow_pool(size, needed - free);
            let free = size.available();
            if free < needed {
                shrink_pool(size, grown);
                return Err(HugeError::NotReservable { page, needed, free });
            }
        }
        let huge = if size == HugeSize::Size1G {
            MapFlags::HUGE_1GB
        } else {
            MapFlags::HUGE_2MB
        };
        let map = || -> io::Result<Mapping> {
            fail_point!("ktask::mmap", |_| Err(io::Error::from(
                rustix::io::Errno::NOMEM
            )));
            Mapping::new(
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::HUGETLB | huge,
            )
        };
        let map = match map() {
            Ok(m) => m,
            Err(e) => {
                shrink_pool(size, grown);
                return Err(HugeError::Map(e));
            }
        };
        // The mapping holds its reservation now; the lock can go.
        drop(pool);
        Ok(Self {
            map: Some(map),
            size,
            grown,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, Mapping::len)
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The page size.
    pub fn page_size(&self) -> HugeSize {
        self.size
    }

    /// The memory.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map
            .as_mut()
            .and_then(Mapping::as_mut_slice)
            .expect("mapped read-write until drop")
    }

    /// Zeroes the region on up to `max_threads` threads (0 is taken as
    /// 1), in chunks aligned to (and at least) one huge page
    /// (`clear_gigantic_page` with ktask).
    pub fn clear(&mut self, max_threads: usize) {
        let page = self.size.bytes();
        clear_aligned(self.as_mut_slice(), page, page, max_threads);
    }
}

impl Drop for HugeRegion {
    fn drop(&mut self) {
        // Unmapped first: pages in use cannot leave the pool.
        drop(self.map.take());
        if self.grown > 0 {
            let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            shrink_pool(self.size, self.grown);
        }
    }
}
