//! [`Window`]: the kernel's fault-around window (`do_fault_around` in
//! `mm/memory.c`).

use std::ops::Range;

use crate::Error;

/// Entries per last-level page table (`PTRS_PER_PTE`): a window never
/// crosses one, so it is mapped under one page-table lock.
pub const PTRS_PER_TABLE: u64 = 512;

/// The largest fault-around order: a whole page table.
pub const MAX_ORDER: u32 = 9;

/// The pages to map around a fault, as virtual page numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Window {
    /// `[start, end)`, containing the faulting page.
    pub pages: Range<u64>,
}

impl Window {
    /// The window `do_fault_around` maps for a fault at virtual page
    /// `page` with `fault_around_bytes = PAGE_SIZE << order`: `2^order`
    /// pages, aligned down to `2^order`, clipped to the VMA `vma` and to the
    /// page table (512 pages) holding `page`. When the VMA starts inside the
    /// aligned block, the window starts at the VMA and still spans up to
    /// `2^order` pages, as the kernel's does.
    ///
    /// ```
    /// use mmbatch_faultaround::Window;
    ///
    /// // Order 4: the 16-page aligned block around page 37.
    /// assert_eq!(Window::around(37, 4, 0..1000).unwrap().pages, 32..48);
    /// // Clipped to the VMA's end, and to the page table's (512 pages).
    /// assert_eq!(Window::around(37, 4, 0..40).unwrap().pages, 32..40);
    /// assert_eq!(Window::around(510, 9, 0..2000).unwrap().pages, 0..512);
    /// ```
    #[doc(alias = "do_fault_around")]
    pub fn around(page: u64, order: u32, vma: Range<u64>) -> Result<Window, Error> {
        if order > MAX_ORDER {
            return Err(Error::OrderTooLarge { order });
        }
        if !vma.contains(&page) {
            return Err(Error::FaultOutsideVma { page, vma });
        }
        let nr = 1u64 << order;
        let table_start = page & !(PTRS_PER_TABLE - 1);
        let start = (page & !(nr - 1)).max(vma.start);
        // Saturating: near the top of the u64 page space the table's end
        // does not exist (the VMA ends before it).
        let end = start
            .saturating_add(nr)
            .min(table_start.saturating_add(PTRS_PER_TABLE))
            .min(vma.end);
        Ok(Window { pages: start..end })
    }

    /// The faulting page alone: where no window can be had (order 0's).
    pub(crate) fn single(page: u64) -> Window {
        Window {
            pages: page..page + 1,
        }
    }

    /// Number of pages: 0 for a range a caller made run backwards (`pages`
    /// is public), as `Range::is_empty` says of it.
    pub fn len(&self) -> u64 {
        self.pages.end.saturating_sub(self.pages.start)
    }

    /// Whether `pages` is empty: never for a window [`around`](Self::around)
    /// made (it holds the faulting page), but `pages` is public.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn a_single_window_is_its_page() {
        let w = Window::single(41);
        assert_eq!((w.pages.clone(), w.len()), (41..42, 1));
    }
}
