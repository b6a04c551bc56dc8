//! [`PageTables`]: a map from virtual page to frame in 512-entry tables,
//! each behind its own lock — the engine's stand-in for the last level of
//! the kernel's page tables and their split PTE locks (`pte_offset_map_lock`).

use crossbeam_utils::CachePadded;

use crate::{
    LruError,
    frame::{NIL, Pfn},
    sync::{AtomicU32, Mutex, Ordering, lock},
};

/// Entries per table (`PTRS_PER_PTE` on x86-64): a table maps 2 MiB of
/// 4 KiB pages.
pub const PTRS_PER_TABLE: usize = 512;

/// The most virtual pages page tables cover: x86-64's 47-bit user
/// address space (`TASK_SIZE`) in 4 KiB pages.
pub const MAX_VIRTUAL_PAGES: u64 = 1 << 35;

/// One table: entries written under `lock` and read without it (as the
/// MMU walks page tables while the kernel updates them under the PTE lock).
#[derive(Debug)]
struct Table {
    entries: Box<[AtomicU32]>,
    /// The PTE lock; it counts its acquisitions.
    lock: Mutex<u64>,
}

impl Table {
    fn lock(&self) -> crate::sync::MutexGuard<'_, u64> {
        let mut g = lock(&self.lock);
        *g += 1;
        g
    }
}

/// Page tables for `len` virtual pages, all unmapped at first.
///
/// ```
/// use mmbatch_lru::{PageTables, Pfn};
///
/// let pt = PageTables::new(1024);
/// pt.map(3, Pfn(42)).unwrap();
/// assert_eq!(pt.lookup(3), Some(Pfn(42)));
/// // One lock for a run of entries in one table (a PTE walk).
/// let mut seen = Vec::new();
/// let next = pt.walk(2, 6, |_vpn, pfn| {
///     seen.push(pfn);
///     true
/// });
/// assert_eq!((next, seen), (6, vec![None, Some(Pfn(42)), None, None]));
/// ```
#[derive(Debug)]
pub struct PageTables {
    tables: Box<[CachePadded<Table>]>,
    len: u64,
}

impl PageTables {
    /// Tables for virtual pages `0..len`.
    ///
    /// # Panics
    /// If the tables cannot be allocated ([`try_new`](Self::try_new)
    /// returns that as an error).
    pub fn new(len: u64) -> Self {
        Self::try_new(len).unwrap_or_else(|e| panic!("PageTables::new({len}): {e}"))
    }

    /// Tables for virtual pages `0..len`, or
    /// [`LruError::PageTablesTooLarge`] if they cannot be allocated (more
    /// than [`MAX_VIRTUAL_PAGES`], or memory refused).
    pub fn try_new(len: u64) -> Result<Self, LruError> {
        let too_large = || LruError::PageTablesTooLarge { len };
        if len > MAX_VIRTUAL_PAGES {
            return Err(too_large());
        }
        let n = usize::try_from(len.div_ceil(PTRS_PER_TABLE as u64)).map_err(|_| too_large())?;
        let mut tables = Vec::new();
        tables.try_reserve_exact(n).map_err(|_| too_large())?;
        for _ in 0..n {
            let mut entries = Vec::new();
            entries
                .try_reserve_exact(PTRS_PER_TABLE)
                .map_err(|_| too_large())?;
            entries.extend((0..PTRS_PER_TABLE).map(|_| AtomicU32::new(NIL)));
            tables.push(CachePadded::new(Table {
                entries: entries.into_boxed_slice(),
                lock: Mutex::new(0),
            }));
        }
        Ok(Self {
            tables: tables.into_boxed_slice(),
            len,
        })
    }

    /// Number of virtual pages covered.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no page is covered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn table(&self, vpn: u64) -> Option<(&Table, usize)> {
        (vpn < self.len).then(|| {
            let t = (vpn / PTRS_PER_TABLE as u64) as usize;
            (&*self.tables[t], (vpn % PTRS_PER_TABLE as u64) as usize)
        })
    }

    /// Maps `vpn` to `pfn` (`set_pte_at`); the old frame, if any.
    ///
    /// # Panics
    /// If `pfn` is `Pfn(u32::MAX)`, which no frame has (an engine has
    /// fewer frames): the tables keep it for an unmapped page, so mapping
    /// it would unmap `vpn` unseen.
    pub fn map(&self, vpn: u64, pfn: Pfn) -> Result<Option<Pfn>, OutOfRange> {
        assert!(
            pfn.0 != NIL,
            "PageTables::map({vpn}, Pfn(u32::MAX)): no frame has number u32::MAX (it marks an \
             unmapped page); map a frame of the engine, or unmap the page"
        );
        let (t, i) = self.table(vpn).ok_or(OutOfRange { vpn, len: self.len })?;
        let _g = t.lock();
        let old = t.entries[i].swap(pfn.0, Ordering::Release);
        Ok((old != NIL).then_some(Pfn(old)))
    }

    /// Unmaps `vpn`; the frame it mapped, if any (the kernel's
    /// `ptep_get_and_clear`).
    #[doc(alias = "ptep_get_and_clear")]
    pub fn unmap(&self, vpn: u64) -> Result<Option<Pfn>, OutOfRange> {
        let (t, i) = self.table(vpn).ok_or(OutOfRange { vpn, len: self.len })?;
        let _g = t.lock();
        let old = t.entries[i].swap(NIL, Ordering::Release);
        Ok((old != NIL).then_some(Pfn(old)))
    }

    /// The frame `vpn` maps, under its table's lock (the PTE step of
    /// `follow_page_mask`). `None` if unmapped or out of range.
    pub fn lookup(&self, vpn: u64) -> Option<Pfn> {
        let (t, i) = self.table(vpn)?;
        let _g = t.lock();
        let e = t.entries[i].load(Ordering::Relaxed);
        (e != NIL).then_some(Pfn(e))
    }

    /// The frame `vpn` maps, read without the table lock — what the MMU
    /// does on an access. `None` if unmapped or out of range.
    #[inline]
    pub fn peek(&self, vpn: u64) -> Option<Pfn> {
        let (t, i) = self.table(vpn)?;
        let e = t.entries[i].load(Ordering::Acquire);
        (e != NIL).then_some(Pfn(e))
    }

    /// Walks `vpn..end`, but not past the end of `vpn`'s table, under one
    /// lock of that table (`pte_offset_map_lock` + `pte++`), calling
    /// `f(vpn, frame)` until it returns false. Returns the first virtual
    /// page not visited (the one `f` refused is not visited). `f` runs
    /// under that table's lock, which is not reentrant: it must not map,
    /// unmap, walk or fill pages of the same table (it would wait for
    /// itself).
    pub fn walk(&self, vpn: u64, end: u64, mut f: impl FnMut(u64, Option<Pfn>) -> bool) -> u64 {
        let Some((t, first)) = self.table(vpn) else {
            return vpn;
        };
        let table_end = vpn - first as u64 + PTRS_PER_TABLE as u64;
        let end = end.min(table_end).min(self.len);
        let _g = t.lock();
        let mut at = vpn;
        while at < end {
            let e = t.entries[first + (at - vpn) as usize].load(Ordering::Relaxed);
            if !f(at, (e != NIL).then_some(Pfn(e))) {
                break;
            }
            at += 1;
        }
        at
    }

    /// Sets entries of `vpn..end` (not past `vpn`'s table) under one lock
    /// of that table: `f(vpn, current)` returns the frame to map at an
    /// unmapped entry, or `None` to leave it (`set_pte_range` in
    /// `filemap_map_pages`). Returns how many entries it set. `f` runs
    /// under the table's lock, as [`walk`](Self::walk)'s does.
    ///
    /// # Panics
    /// If `f` returns `Pfn(u32::MAX)`, as [`map`](Self::map) does.
    pub fn fill(
        &self,
        vpn: u64,
        end: u64,
        mut f: impl FnMut(u64, Option<Pfn>) -> Option<Pfn>,
    ) -> u64 {
        let Some((t, first)) = self.table(vpn) else {
            return 0;
        };
        let table_end = vpn - first as u64 + PTRS_PER_TABLE as u64;
        let end = end.min(table_end).min(self.len);
        let _g = t.lock();
        let mut set = 0;
        for at in vpn..end {
            let slot = &t.entries[first + (at - vpn) as usize];
            let e = slot.load(Ordering::Relaxed);
            if let Some(pfn) = f(at, (e != NIL).then_some(Pfn(e))) {
                assert!(
                    pfn.0 != NIL,
                    "PageTables::fill: f returned Pfn(u32::MAX) for page {at}: no frame has that \
                     number (it marks an unmapped page); return None to leave the page"
                );
                slot.store(pfn.0, Ordering::Release);
                set += 1;
            }
        }
        set
    }

    /// Table-lock acquisitions so far, over all tables.
    pub fn lock_acquisitions(&self) -> u64 {
        self.tables.iter().map(|t| *lock(&t.lock)).sum()
    }
}

/// A virtual page past the end of the page tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    /// The page asked for.
    pub vpn: u64,
    /// Pages covered.
    pub len: u64,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "virtual page {} is outside the page tables (pages 0..{})",
            self.vpn, self.len
        )?;
        match self.vpn.checked_add(1).filter(|&n| n <= MAX_VIRTUAL_PAGES) {
            Some(n) => write!(f, ": build them with PageTables::new({n})"),
            None => write!(
                f,
                ": page tables hold at most MAX_VIRTUAL_PAGES ({MAX_VIRTUAL_PAGES}) pages"
            ),
        }
    }
}

impl std::error::Error for OutOfRange {}
