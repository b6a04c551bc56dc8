//! hugetlb regions of 2 MiB or 1 GiB pages from the kernel's pool; the
//! pool grown for a region's life only when the caller asks
//! ([`HugeRegion::new_growing_pool`]).

use std::{fmt, fs, io};

use mmbatch_mmap::{HugePageSize, HugePagesUnavailable, Mapping, PoolGrowth, PoolLock, ProtFlags};

use crate::{
    Job, MIN_CHUNK,
    clear::clear_by,
    mem::{PopulateError, populate_aligned},
};

/// [`HugeRegion::clear`]'s chunks: boundaries on and lengths of at least
/// this many bytes, whatever the page size (a 1 GiB page is split).
const CLEAR_CHUNK: usize = MIN_CHUNK;

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
    /// The pool does not have enough free pages (and, with
    /// [`HugeRegion::new_growing_pool`], could not be grown to).
    NotReservable(HugePagesUnavailable),
    /// mmap failed.
    Map(io::Error),
    /// [`HugeRegion::populate`]'s `madvise(MADV_POPULATE_WRITE)` failed;
    /// the pages it populated stay the region's.
    Populate(io::Error),
}

impl fmt::Display for HugeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HugeError::Misaligned { len, page } => write!(
                f,
                "length {len} is not a non-zero multiple of the huge page size {page}: round it up to {}",
                len.div_ceil(*page).max(1).saturating_mul(*page)
            ),
            HugeError::NotReservable(e) => write!(f, "{e}"),
            HugeError::Map(e) => write!(f, "mmap(MAP_HUGETLB) failed: {e}"),
            HugeError::Populate(e) => write!(
                f,
                "madvise(MADV_POPULATE_WRITE) of the region failed: {e}; the pages populated \
                 stay the region's"
            ),
        }
    }
}

impl std::error::Error for HugeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HugeError::NotReservable(e) => Some(e),
            HugeError::Map(e) | HugeError::Populate(e) => Some(e),
            HugeError::Misaligned { .. } => None,
        }
    }
}

/// Grows the locked pool by up to `n` pages
/// ([`PoolLock::grow`](mmbatch_mmap::PoolLock::grow)); `None` where it
/// cannot (not root, no such pool), which leaves the mapping to the pool
/// as it is. Fail point `ktask::hugepool` refuses, as a pool that cannot
/// grow would.
fn grow_pool(pool: &PoolLock, n: usize) -> Option<PoolGrowth> {
    fail_point!("ktask::hugepool", |_| None);
    pool.grow(n).ok()
}

/// `MemAvailable` from `/proc/meminfo`, in bytes: what the kernel could
/// give without swapping. Fail point `ktask::mem_available` reports its
/// argument instead (`return(4194304)`), or nothing (`return`).
fn mem_available() -> Option<u64> {
    fail_point!("ktask::mem_available", |bytes: Option<String>| bytes
        .and_then(|b| b.parse().ok()));
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// An anonymous hugetlb region, from the pool's free pages; one made with
/// [`new_growing_pool`](Self::new_growing_pool) gives back, when it drops,
/// the pages it added to the pool.
#[derive(Debug)]
pub struct HugeRegion {
    /// Unmapped first as the region drops (fields drop in order): pages
    /// still mapped cannot leave the pool.
    map: Mapping,
    size: HugePageSize,
    /// Pages this region's growth added to the pool's persistent part
    /// (new pages, and surplus pages the growth made persistent), taken
    /// out again when it drops, after the mapping.
    _grown: Option<PoolGrowth>,
}

impl HugeRegion {
    /// Maps `len` bytes (a non-zero multiple of the page size) of `size`
    /// pages from the pool's free pages; never changes the pool (but waits
    /// while another region, of any process using this crate, grows it).
    ///
    /// # Errors
    /// [`HugeError::NotReservable`] if the pool has too few free pages
    /// (it names the command that reserves them), `Misaligned`, `Map`.
    pub fn new(size: HugePageSize, len: usize) -> Result<Self, HugeError> {
        Self::make(size, len, false)
    }

    /// [`new`](Self::new), but a pool with too few free pages is first
    /// grown by what it lacks (writing
    /// `/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages`, which needs
    /// root), and those pages leave the pool again when the region drops.
    /// A process that dies without dropping it (abort, SIGKILL, the OOM
    /// killer, `mem::forget`) leaves the pool grown: the kernel keeps
    /// `nr_hugepages` as written, so write it back by hand.
    /// Regions may drop in any order: changes to the pool by this process
    /// and by every other that takes the pool's lock
    /// ([`HugePageSize::lock_pool`], an exclusive `flock` on its
    /// `nr_hugepages`) are serialised; a program writing it without the
    /// lock can still race, as the kernel offers no atomic adjustment. A
    /// region
    /// larger than the memory available is refused before the pool is
    /// touched.
    ///
    /// # Errors
    /// As [`new`](Self::new), which a pool that cannot grow (not root, or
    /// the memory will not come free) leaves it to: the mapping may still
    /// be had from overcommitted pages (`nr_overcommit_hugepages`);
    /// [`HugeError::NotReservable`] also for a region larger than the
    /// memory available.
    pub fn new_growing_pool(size: HugePageSize, len: usize) -> Result<Self, HugeError> {
        Self::make(size, len, true)
    }

    fn make(size: HugePageSize, len: usize, grow: bool) -> Result<Self, HugeError> {
        let page = size.bytes();
        if len == 0 || len % page != 0 {
            return Err(HugeError::Misaligned { len, page });
        }
        let needed = len / page;
        let unavailable =
            |free| HugeError::NotReservable(HugePagesUnavailable::new(size, needed, free));
        let pool = size.lock_pool();
        let free = size.available_pages();
        let mut grown = None;
        // Without growing, the mapping's own reservation decides (below):
        // sysfs's count reads 0 where a container hides it, and surplus
        // pages (`nr_overcommit_hugepages`) are not in it.
        if free < needed && grow {
            // Growing the pool turns free memory into huge pages as far as
            // it can (compacting on the way) before it falls short: as
            // root, a region larger than the memory there is took nearly
            // all of it from every other process for a moment, to be
            // refused anyway. Refuse first what cannot fit.
            let lacking = (needed - free).saturating_mul(page) as u64;
            // Refuse too where the memory available cannot be read.
            if mem_available().is_none_or(|avail| lacking > avail) {
                return Err(unavailable(free));
            }
            // Grown by less than it lacks (not root, or the memory would
            // not come free), the mapping may still be had: its own
            // reservation decides below, and overcommitted (surplus)
            // pages may cover the rest, as they do for `new`.
            grown = grow_pool(&pool, needed - free);
        }
        let map = || -> io::Result<Mapping> {
            fail_point!("ktask::mmap", |_| Err(io::Error::from(
                rustix::io::Errno::NOMEM
            )));
            Mapping::new(
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                mmbatch_mmap::MapFlags::PRIVATE | size.map_flags(),
            )
        };
        let map = match map() {
            Ok(m) => m,
            Err(e) => {
                // Read before the shrink: a growth that covered the region
                // shows free pages, so the error names the other limit that
                // refused the mapping.
                let free = size.available_pages();
                drop(grown);
                // A private hugetlb mapping reserves its pages at mmap:
                // ENOMEM is a short pool, or another limit's refusal.
                return Err(
                    if e.raw_os_error() == Some(rustix::io::Errno::NOMEM.raw_os_error()) {
                        unavailable(free)
                    } else {
                        HugeError::Map(e)
                    },
                );
            }
        };
        // The mapping holds its reservation now; the lock can go.
        drop(pool);
        Ok(Self {
            map,
            size,
            _grown: grown,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The page size.
    pub fn page_size(&self) -> HugePageSize {
        self.size
    }

    /// The memory, to read.
    pub fn as_slice(&self) -> &[u8] {
        self.map.as_slice().expect("mapped read-write")
    }

    /// The memory's first byte (for system calls that read it); valid for
    /// [`len`](Self::len) bytes while the region lives, written only
    /// through `&mut self` or a pointer from
    /// [`as_mut_ptr`](Self::as_mut_ptr), which is the one to hand a
    /// system call that writes (the region's own
    /// [`populate`](Self::populate) aligns its chunks to huge pages).
    pub fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }

    /// The memory's first byte, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_slice().as_mut_ptr()
    }

    /// The memory.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_mut_slice().expect("mapped read-write")
    }

    /// Zeroes the region on up to `max_threads` threads (0 is taken as
    /// 1), in chunks of 2 MiB ([`MIN_CHUNK`]) or more on
    /// 2 MiB boundaries: a 1 GiB page is shared among the threads, as the
    /// ktask series' parallel `clear_gigantic_page` shared one.
    #[doc(alias = "clear_gigantic_page")]
    pub fn clear(&mut self, max_threads: usize) {
        let job = Self::clear_job(self.len(), max_threads);
        clear_by(self.as_mut_slice(), &job);
    }

    /// The job [`clear`](Self::clear) runs over a region of `len` bytes.
    fn clear_job(len: usize, max_threads: usize) -> Job {
        crate::clear::clear_job(len, CLEAR_CHUNK, CLEAR_CHUNK, max_threads)
    }

    /// Faults the region in on up to `max_threads` threads (0 is taken as
    /// 1), in chunks aligned to (and at least) one huge page, so that no
    /// two threads fault one page: the kernel zeroes each page as it
    /// faults it in (`clear_huge_page`, `folio_zero_user` in recent
    /// kernels), which this spreads over the threads, as
    /// [`populate`](crate::populate) does for any mapping (given this
    /// region's pointer, that one aligns its chunks to base pages only).
    /// The region's pages were reserved when it was made, so the pool
    /// cannot run short here (unless the region was bound to a node since,
    /// [`numa::bind_memory`](crate::numa::bind_memory): the reservation is
    /// not per node, and a node without free pages is `EFAULT` here); its
    /// contents are kept.
    ///
    /// # Errors
    /// [`HugeError::Populate`] with the kernel's error (`EINVAL` before
    /// Linux 5.14; `ENOMEM` out of memory for page tables); the pages
    /// populated before it stay (releasing them could give up the
    /// region's reservation of them).
    pub fn populate(&mut self, max_threads: usize) -> Result<(), HugeError> {
        let page = self.size.bytes();
        let buf = self.as_mut_slice();
        // SAFETY: the region's own mapping, borrowed exclusively for the
        // call and huge-page aligned (so base-page aligned); nothing is
        // released (`release` false), so its contents stay.
        unsafe { populate_aligned(buf.as_mut_ptr(), buf.len(), page, page, max_threads, false) }
            .map_err(|e| match e {
                PopulateError::Madvise(e) => HugeError::Populate(e),
                PopulateError::Job(e) => {
                    HugeError::Populate(io::Error::new(io::ErrorKind::InvalidInput, e))
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One 1 GiB page is cleared on every thread asked for (the ktask
    /// series' point); in chunks of whole huge pages it had one thread.
    #[test]
    fn a_gigantic_page_is_cleared_on_several_threads() {
        let job = HugeRegion::clear_job(1 << 30, 8);
        assert_eq!(job.plan().unwrap().threads, 8);
        assert!(HugePageSize::Size2M.bytes() % CLEAR_CHUNK == 0);
    }
}
