//! [`ZeroOnDrop`]: a region's zeroing as it is dropped
//! ([`RegionBuilder::zero_on_drop`](super::RegionBuilder::zero_on_drop)).

use super::LockedRegion;
use crate::accounting;

/// Zeroes a region's memory when dropped
/// ([`RegionBuilder::zero_on_drop`](super::RegionBuilder::zero_on_drop)):
/// held by the region, which drops it before its mapping.
#[derive(Debug)]
pub(super) struct ZeroOnDrop {
    /// The region's first byte: page-aligned, so aligned for `u64`.
    start: std::ptr::NonNull<u64>,
    /// The region's length in `u64`s (a whole number of pages).
    words: usize,
    /// Anonymous memory: only its resident pages can hold anything.
    resident_only: bool,
    /// For memory shared with a forked child (a shared file, secret
    /// memory): the process that built the region, the only one whose
    /// drop zeroes it (a child's copy of the region would zero the
    /// parent's memory, or meet none where the child has no mapping).
    only_in: Option<u32>,
    /// [`LockedRegion::protect`] left the memory other than writable:
    /// the drop makes it writable again before zeroing it.
    pub(super) reopen: bool,
}

// SAFETY: an address, written only in the drop, by the thread dropping the
// region that owns it; the region's memory is `Send` and `Sync` as the
// region is.
unsafe impl Send for ZeroOnDrop {}
// SAFETY: as above; `&ZeroOnDrop` gives no access to the memory.
unsafe impl Sync for ZeroOnDrop {}

impl ZeroOnDrop {
    /// For writable `region`, which must hold it (in its `zero_on_drop`);
    /// `anonymous`: only its resident pages can hold anything; `shared`:
    /// a forked child shares the memory.
    pub(super) fn new(region: &LockedRegion, anonymous: bool, shared: bool) -> Self {
        debug_assert!(region.writable(), "zero_on_drop on a read-only region");
        let start = std::ptr::NonNull::new(region.as_ptr().cast::<u64>())
            .expect("a mapped region is not at address 0");
        Self {
            start,
            words: region.len / size_of::<u64>(),
            resident_only: anonymous,
            only_in: shared.then(std::process::id),
            reopen: false,
        }
    }
}

impl Drop for ZeroOnDrop {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        if self.only_in.is_some_and(|pid| pid != std::process::id()) {
            return;
        }
        if self.reopen {
            let len = self.words * size_of::<u64>();
            let rw = super::Access::ReadWrite.prot();
            // SAFETY: the region's own pages, which nothing borrows (it is
            // being dropped). Refused (at `vm.max_map_count`), the memory
            // is left as `protect` made it, unzeroed, rather than fault
            // here: the unmap that follows still frees its pages.
            if unsafe { rustix::mm::mprotect(self.start.as_ptr().cast(), len, rw) }.is_err() {
                return;
            }
        }
        // SAFETY: the region holding this is being dropped, so nothing
        // borrows its memory; its mapping, dropped after this field, is
        // still mapped, writable (`check_options` refused `read_only`, and
        // `reopen` undid `protect`) and accessible (a `FaultLockedRegion`
        // opens its pages first), and page-aligned.
        let memory = unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.words) };
        if !self.resident_only {
            memory.zeroize();
            return;
        }
        // Asked of `mincore` a few hundred pages at a time: no allocation
        // in a drop, however large the region.
        let page_words = accounting::page_size() / size_of::<u64>();
        let mut resident = [0u8; 256];
        for chunk in memory.chunks_mut(page_words * resident.len()) {
            let len = size_of_val(chunk);
            // SAFETY: `chunk` is mapped and page-aligned (whole pages from
            // the region's start), and `resident` has a byte for each of
            // its pages; mincore reads none of the memory.
            let r = unsafe { libc::mincore(chunk.as_mut_ptr().cast(), len, resident.as_mut_ptr()) };
            if r != 0 {
                chunk.zeroize();
                continue;
            }
            for (page, r) in chunk.chunks_mut(page_words).zip(resident) {
                if r & 1 != 0 {
                    page.zeroize();
                }
            }
        }
    }
}

#[cfg(test)]
mod zero_tests {
    use super::ZeroOnDrop;
    use crate::accounting;
    use crate::{LockPolicy, LockedRegion};

    /// A region's `ZeroOnDrop`, dropped ahead of the region so that the
    /// memory can be read after: of anonymous memory, the pages written
    /// (resident) are zeroed and the rest stay untouched (not resident);
    /// of any memory (`anonymous` false), every page.
    #[test]
    fn the_zeroing_covers_the_resident_pages_or_all() {
        let page = accounting::page_size();
        for anonymous in [true, false] {
            // More pages than one `mincore` call asks about.
            let mut r = LockedRegion::builder(300 * page)
                .policy(LockPolicy::Unlocked)
                .build()
                .unwrap();
            let bytes = r.as_mut_slice().unwrap();
            for p in [1, 3, 260, 299] {
                bytes[p * page..][..page].fill(0xA5);
            }
            drop(ZeroOnDrop::new(&r, anonymous, false));
            // Counted before the read below maps every page.
            let resident = r.resident_pages().unwrap();
            assert_eq!(
                resident,
                if anonymous { 4 } else { 300 },
                "anonymous {anonymous}"
            );
            let written = r.as_slice().iter().filter(|&&b| b != 0).count();
            assert_eq!(written, 0, "anonymous {anonymous}: bytes left unzeroed");
        }
    }
}
