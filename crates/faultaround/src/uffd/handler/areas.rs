//! Where a region's pages are: one or more ranges of memory, each holding
//! a run of the source's pages. A region a process maps for itself is one
//! range; a [`UffdHandler`](crate::UffdHandler) serving another process's
//! userfaultfd has one per range that process registered (a VMM's guest
//! memory regions), each at its offset into the source.
//!
//! Pages are numbered as the source numbers them (page `p` is the bytes at
//! `p * page` of the source), so records, replays, bitmaps and failures
//! mean the same page whichever range it lies in.

use std::{ffi::c_void, ops::Range, sync::atomic::Ordering};

use super::Shared;

/// One range of memory: `pages` pages at address `base` (in the address
/// space of the process that registered it) holding source pages
/// `first..first + pages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::uffd) struct Area {
    pub(in crate::uffd) base: usize,
    pub(in crate::uffd) first: u64,
    pub(in crate::uffd) pages: u64,
}

impl Area {
    pub(in crate::uffd) fn source_pages(&self) -> Range<u64> {
        self.first..self.first + self.pages
    }

    /// The area's addresses, in pages of `page` bytes.
    pub(in crate::uffd) fn addresses(&self, page: usize) -> Range<usize> {
        self.base..self.base + self.pages as usize * page
    }

    /// The source page at address `addr`, if the area holds it (pages of
    /// `page` bytes).
    fn page_at(&self, addr: usize, page: usize) -> Option<u64> {
        let i = (addr.checked_sub(self.base)? / page) as u64;
        (i < self.pages).then_some(self.first + i)
    }
}

/// The area of `areas` (sorted by `first`, not overlapping) holding source
/// page `p`: the first whose end is past `p`, if it starts at or before it.
fn area_holding(areas: &[Area], p: u64) -> Option<&Area> {
    let i = areas.partition_point(|a| a.first + a.pages <= p);
    areas.get(i).filter(|a| a.first <= p)
}

impl Shared {
    /// The area holding source page `p`.
    fn area_of(&self, p: u64) -> Option<&Area> {
        area_holding(&self.areas, p)
    }

    /// The address of source page `p` (which lies in an area: every page a
    /// handler is given does).
    pub(in crate::uffd) fn addr(&self, p: u64) -> *mut c_void {
        let a = self
            .area_of(p)
            .unwrap_or_else(|| panic!("page {p} lies in none of the region's ranges"));
        (a.base + (p - a.first) as usize * self.page) as *mut c_void
    }

    /// The source page at address `addr`, if it lies in an area.
    pub(in crate::uffd) fn page_of(&self, addr: usize) -> Option<u64> {
        self.areas.iter().find_map(|a| a.page_at(addr, self.page))
    }

    /// The source pages of the area holding `p`: a fault's window stays
    /// inside them (the next area may be anywhere in memory).
    pub(in crate::uffd) fn bounds(&self, p: u64) -> Range<u64> {
        self.area_of(p).map_or(p..p + 1, Area::source_pages)
    }

    /// How many of the `n` pages from `p` lie in `p`'s area, so that one
    /// ioctl over them stays in one range of memory.
    pub(in crate::uffd) fn in_area(&self, p: u64, n: usize) -> usize {
        self.area_of(p)
            .map_or(0, |a| n.min((a.first + a.pages - p) as usize))
    }

    /// Marks `n` pages from `p` as installed, for a handler that cannot
    /// ask `mincore` (the memory is another process's).
    pub(in crate::uffd) fn mark_installed(&self, p: u64, n: usize, yes: bool) {
        let Some(bits) = &self.installed else { return };
        for q in p..p + n as u64 {
            let (w, b) = ((q / 64) as usize, 1u64 << (q % 64));
            if yes {
                bits[w].fetch_or(b, Ordering::Relaxed);
            } else {
                bits[w].fetch_and(!b, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Area, area_holding};

    /// An area's addresses and source pages run from its base and its
    /// first page for its length.
    #[test]
    fn an_area_spans_its_pages() {
        let a = Area {
            base: 0x10_000,
            first: 6,
            pages: 3,
        };
        assert_eq!(a.addresses(0x1000), 0x10_000..0x13_000);
        assert_eq!(a.addresses(0x20_0000), 0x10_000..0x61_0000);
        assert_eq!(a.source_pages(), 6..9);
        // Its addresses hold its pages, and no address outside them does
        // (a fault just past the end is another range's).
        assert_eq!(a.page_at(0x10_000, 0x1000), Some(6));
        assert_eq!(a.page_at(0x12_fff, 0x1000), Some(8));
        assert_eq!(a.page_at(0x13_000, 0x1000), None);
        assert_eq!(a.page_at(0xf_fff, 0x1000), None);
    }

    /// Each source page is found in its own area, whichever of three it
    /// lies in (a gap between the second and third); a page in the gap or
    /// past the end is in none. (A wrong search sent a foreign handler's
    /// copies to another range, and its VMM's reader waited forever.)
    #[test]
    fn each_page_is_in_its_own_area() {
        let areas = [
            Area {
                base: 0x10_000,
                first: 0,
                pages: 4,
            },
            Area {
                base: 0x90_000,
                first: 4,
                pages: 2,
            },
            Area {
                base: 0x50_000,
                first: 10,
                pages: 3,
            },
        ];
        let holder = |p| area_holding(&areas, p).map(|a| a.first);
        let want = [
            (0, Some(0)),
            (3, Some(0)),
            (4, Some(4)),
            (5, Some(4)),
            (6, None),
            (9, None),
            (10, Some(10)),
            (12, Some(10)),
            (13, None),
            (u64::MAX / 2, None),
        ];
        for (p, area) in want {
            assert_eq!(holder(p), area, "page {p}");
        }
        assert_eq!(area_holding(&[], 0), None);
    }
}
