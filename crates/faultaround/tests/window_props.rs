//! `Window::around` against a direct transliteration of the kernel's
//! `do_fault_around` (mm/memory.c, 6.x):
//!
//! ```c
//! pte_off = pte_index(vmf->address);
//! vma_off = vmf->pgoff - vmf->vma->vm_pgoff;
//! from_pte = max(ALIGN_DOWN(pte_off, nr_pages), pte_off - min(pte_off, vma_off));
//! to_pte = min3(from_pte + nr_pages, (pgoff_t)PTRS_PER_PTE,
//!               pte_off + vma_pages(vmf->vma) - vma_off) - 1;
//! ```

use mmbatch_faultaround::{MAX_ORDER, PTRS_PER_TABLE, Window};
use proptest::prelude::*;

/// The kernel's formula, in page units, C's unsigned arithmetic kept.
fn kernel(page: u64, order: u32, vma_start: u64, vma_end: u64) -> (u64, u64) {
    let nr_pages = 1u64 << order;
    let pte_off = page % PTRS_PER_TABLE;
    let vma_off = page - vma_start;
    let align_down = |x: u64, a: u64| x & !(a - 1);
    let from_pte = align_down(pte_off, nr_pages).max(pte_off - pte_off.min(vma_off));
    let to_pte = (from_pte + nr_pages)
        .min(PTRS_PER_TABLE)
        .min(pte_off + (vma_end - vma_start) - vma_off)
        - 1;
    let table = page - pte_off;
    (table + from_pte, table + to_pte + 1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_kernel_formula(
        vma_start in 0u64..5000,
        vma_len in 1u64..5000,
        at in any::<prop::sample::Index>(),
        order in 0..=MAX_ORDER,
    ) {
        let vma = vma_start..vma_start + vma_len;
        let page = vma_start + at.index(vma_len as usize) as u64;
        let w = Window::around(page, order, vma.clone()).unwrap();
        let (from, to) = kernel(page, order, vma.start, vma.end);
        prop_assert_eq!(w.pages.clone(), from..to);
        // What the formula promises.
        prop_assert!(w.pages.contains(&page));
        prop_assert!(w.len() <= 1 << order);
        // Never empty: the faulting page is in.
        prop_assert!(!w.is_empty());
        prop_assert!(w.pages.start >= vma.start && w.pages.end <= vma.end);
        prop_assert_eq!(w.pages.start / PTRS_PER_TABLE, (w.pages.end - 1) / PTRS_PER_TABLE);
    }
}

/// `len` and `is_empty` read the (public) range as it is, even one a
/// caller emptied.
#[test]
fn len_and_is_empty_follow_the_range() {
    let mut w = Window::around(37, 4, 0..1000).unwrap();
    assert_eq!((w.len(), w.is_empty()), (16, false));
    w.pages = 40..40;
    assert_eq!((w.len(), w.is_empty()), (0, true));
    // Backwards: empty, not an overflow.
    w.pages = std::ops::Range { start: 40, end: 30 };
    assert_eq!((w.len(), w.is_empty()), (0, true));
}

#[test]
fn bad_orders_and_pages() {
    let e = Window::around(0, 10, 0..10).unwrap_err();
    assert!(e.to_string().contains("at most 9"), "{e}");
    assert!(Window::around(10, 4, 0..10).is_err());
}

/// Pages at the top of the u64 space: the window's end used to overflow
/// (found by the faultaround_sizes fuzz target).
#[test]
fn windows_at_the_top_of_the_page_space() {
    let top = u64::MAX;
    assert_eq!(
        Window::around(top - 1, 9, 0..top).unwrap().pages,
        top - 511..top
    );
    assert_eq!(
        Window::around(top - 3, 4, top - 8..top).unwrap().pages,
        top - 8..top
    );
}
