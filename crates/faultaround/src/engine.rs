//! Fault-around in the engine: per-process page tables over a shared page
//! cache of [`mmbatch_lru`] frames, read faults mapped through
//! [`MapPages`] (`do_read_fault` → `do_fault_around` → `filemap_map_pages`).
//! Feature `engine`.
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

use std::{
    ops::Range,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
};

use mmbatch_lru::{Engine, PageTables, Pfn};

use crate::{Error, Window};

/// Maps the easily reachable pages around a fault: the kernel's
/// `vm_operations_struct::map_pages` and `fault` pair.
pub trait MapPages {
    /// Maps the pages of `window` that are ready, without blocking, and
    /// skips the rest (`filemap_map_pages`); returns how many it mapped.
    /// It may skip the faulting page too.
    fn map_pages(&self, window: &Window) -> u64;

    /// The slow path (`filemap_fault`): makes `page` ready, blocking if it
    /// must, and maps it. Only the faulting page: never block for a
    /// neighbour.
    fn fault(&self, page: u64) -> Result<(), Error>;
}

const NONE: u32 = u32::MAX;

/// A file's pages in the engine's page cache: page `i` has a frame once
/// read, and is mappable when up to date and not locked.
#[derive(Debug)]
pub struct PageCache {
    lru: Arc<Engine>,
    frames: Box<[AtomicU32]>,
    uptodate: Box<[AtomicBool]>,
    /// Slow-path reads (`filemap_fault` bringing a page up to date).
    reads: AtomicU64,
}

impl PageCache {
    /// A cache for a file of `pages` pages, over frames of `lru`; a file
    /// of more than `u32::MAX` pages (or one the allocator refuses) is an
    /// error.
    pub fn new(lru: Arc<Engine>, pages: u64) -> Result<Self, Error> {
        let n = usize::try_from(pages)
            .ok()
            .filter(|_| pages <= u64::from(u32::MAX))
            .ok_or(Error::FileTooLarge { pages })?;
        let mut frames = Vec::new();
        let mut uptodate = Vec::new();
        frames
            .try_reserve_exact(n)
            .and_then(|()| uptodate.try_reserve_exact(n))
            .map_err(|_| Error::Sys {
                op: "allocating the page cache",
                source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            })?;
        frames.extend((0..n).map(|_| AtomicU32::new(NONE)));
        uptodate.extend((0..n).map(|_| AtomicBool::new(false)));
        Ok(Self {
            lru,
            frames: frames.into(),
            uptodate: uptodate.into(),
            reads: AtomicU64::new(0),
        })
    }

    /// Pages in the file.
    pub fn len(&self) -> u64 {
        self.frames.len() as u64
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Puts page `index` in free frame `pfn` (`lru_add`), up to date or
    /// not. An index past the file is refused before the frame is taken.
    pub fn insert(&self, index: u64, pfn: Pfn, uptodate: bool) -> Result<(), Error> {
        let i = self.slot(index)?;
        self.lru.lru_add(pfn)?;
        self.frames[i].store(pfn.0, Ordering::Release);
        self.uptodate[i].store(uptodate, Ordering::Release);
        Ok(())
    }

    fn slot(&self, index: u64) -> Result<usize, Error> {
        usize::try_from(index)
            .ok()
            .filter(|&i| i < self.frames.len())
            .ok_or(Error::IndexOutOfRange {
                index,
                len: self.len(),
            })
    }

    /// The frame of page `index` if it can be mapped without blocking:
    /// cached, up to date, and not locked (`filemap_map_pages` skips a page
    /// whose lock it cannot take). The kernel takes the lock to hold off
    /// truncation while it maps; the engine has no truncation, so testing
    /// the lock is enough — and concurrent mappings of one file then do not
    /// make each other skip pages (which would cost extra faults).
    fn ready(&self, index: u64) -> Option<Pfn> {
        let pfn = self.frames.get(index as usize)?.load(Ordering::Acquire);
        if pfn == NONE || !self.uptodate[index as usize].load(Ordering::Acquire) {
            return None;
        }
        let pfn = Pfn(pfn);
        (!self.lru.is_locked(pfn).ok()?).then_some(pfn)
    }

    /// `filemap_fault`: brings page `index` up to date (the "read"),
    /// waiting for its page lock.
    fn read_page(&self, index: u64) -> Result<Pfn, Error> {
        let i = self.slot(index).map_err(|_| Error::FaultOutsideVma {
            page: index,
            vma: 0..self.len(),
        })?;
        let pfn = Pfn(self.frames[i].load(Ordering::Acquire));
        if pfn.0 == NONE {
            return Err(Error::NotCached { page: index });
        }
        while !self.lru.trylock_frame(pfn)? {
            std::thread::yield_now();
        }
        if !self.uptodate[i].swap(true, Ordering::AcqRel) {
            self.reads.fetch_add(1, Ordering::Relaxed);
        }
        self.lru.unlock_frame(pfn)?;
        Ok(pfn)
    }

    /// Slow-path reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// One process's mapping of a whole cached file (its own page tables), with
/// fault-around of `2^order` pages.
#[derive(Debug)]
pub struct FileMapping<'c> {
    cache: &'c PageCache,
    pt: PageTables,
    order: u32,
    faults: AtomicU64,
    mapped: AtomicU64,
}

impl<'c> FileMapping<'c> {
    /// Maps all of `cache` with fault-around order `order` (0 = off).
    pub fn new(cache: &'c PageCache, order: u32) -> Result<Self, Error> {
        Window::around(0, order, 0..1)?;
        Ok(Self {
            cache,
            pt: PageTables::try_new(cache.len())?,
            order,
            faults: AtomicU64::new(0),
            mapped: AtomicU64::new(0),
        })
    }

    fn vma(&self) -> Range<u64> {
        0..self.cache.len()
    }

    /// A read of virtual page `page`: the frame it maps, after a fault if
    /// it was not mapped (`do_read_fault`).
    #[inline]
    pub fn read(&self, page: u64) -> Result<Pfn, Error> {
        if let Some(pfn) = self.pt.peek(page) {
            return Ok(pfn);
        }
        self.faults.fetch_add(1, Ordering::Relaxed);
        let window = Window::around(page, self.order, self.vma())?;
        if window.len() > 1 {
            self.map_pages(&window);
        }
        match self.pt.peek(page) {
            Some(pfn) => Ok(pfn),
            None => {
                self.fault(page)?;
                Ok(self.pt.peek(page).expect("fault mapped it"))
            }
        }
    }

    /// Faults taken.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// Pages mapped by faults (around and slow path).
    pub fn mapped(&self) -> u64 {
        self.mapped.load(Ordering::Relaxed)
    }

    /// Page-table lock acquisitions.
    pub fn pte_locks(&self) -> u64 {
        self.pt.lock_acquisitions()
    }
}

impl MapPages for FileMapping<'_> {
    fn map_pages(&self, window: &Window) -> u64 {
        let cache = self.cache;
        let n = self
            .pt
            .fill(window.pages.start, window.pages.end, |vpn, cur| match cur {
                Some(_) => None,
                None => cache.ready(vpn),
            });
        self.mapped.fetch_add(n, Ordering::Relaxed);
        n
    }

    fn fault(&self, page: u64) -> Result<(), Error> {
        let pfn = self.cache.read_page(page)?;
        let n = self
            .pt
            .fill(page, page + 1, |_, cur| cur.is_none().then_some(pfn));
        self.mapped.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}
