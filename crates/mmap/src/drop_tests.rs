//! Tests of a mapping's drop where the kernel refuses the `munmap`.

use super::*;
use crate::tests::mapped;

/// At `vm.max_map_count`, dropping a mapping inside a larger one (the
/// middle page of three, which `munmap` must split) releases its pages
/// and leaks the range: it panicked ("munmap of 4096 bytes
/// ... failed (Cannot allocate memory)"), in a drop the program could
/// not avoid. Locked pages too (`MADV_DONTNEED_LOCKED`, Linux 5.18),
/// which `MADV_DONTNEED` refuses. In a child: the test fills the
/// process's mappings.
#[test]
fn a_drop_at_the_map_count_limit_releases_the_pages() {
    use std::time::Duration;
    if let Some(run) = mmbatch_testkit::child::parent(
        "drop_tests::a_drop_at_the_map_count_limit_releases_the_pages",
        Duration::from_secs(60),
    ) {
        run.expect_success();
        return;
    }
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .map_or(0, |s| s.trim().parse().unwrap_or(0));
    if !(1000..=300_000).contains(&max) {
        eprintln!("vm.max_map_count is {max}: too many mappings to fill here; not exercised");
        return;
    }
    // The test's own reads of /proc/self/maps run out of a 32-bit address
    // space the mappings fragment.
    if cfg!(target_pointer_width = "32") {
        eprintln!("a 32-bit address space: not exercised");
        return;
    }
    let page = rustix::param::page_size();
    // Three pages mapped as one, handed out as three mappings, the middle
    // one written.
    let triple = |flags: MapFlags| {
        let whole = Mapping::new(3 * page, ProtFlags::READ | ProtFlags::WRITE, flags).unwrap();
        let (ptr, _, prot) = whole.into_raw_parts();
        let mut pages = [0, 1, 2].map(|i| {
            // Inside the mapping of three pages.
            let at = NonNull::new(ptr.as_ptr().wrapping_add(i * page)).unwrap();
            // SAFETY: the three pages are the whole mapping's, each owned
            // once.
            unsafe { Mapping::from_raw_parts(at, page, prot) }
        });
        pages[1].as_mut_slice().unwrap().fill(7);
        pages
    };
    let plain = triple(MapFlags::PRIVATE);
    let locked = (mmbatch_testkit::kernel_at_least(5, 18))
        .then(|| triple(MapFlags::PRIVATE | MapFlags::LOCKED));
    // Single pages, protections alternating so that none merges with
    // its neighbour, until the kernel refuses one more mapping.
    let mut fillers = Vec::new();
    let limit = loop {
        let prot = if fillers.len() % 2 == 0 {
            ProtFlags::READ
        } else {
            ProtFlags::empty()
        };
        match Mapping::new(page, prot, MapFlags::PRIVATE) {
            Ok(m) => fillers.push(m),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}");
                break fillers.len();
            }
        }
    };
    assert!(limit > 1000, "only {limit} mappings before ENOMEM");
    let mut kept = Vec::new();
    for (what, [first, middle, last]) in [("plain", Some(plain)), ("locked", locked)]
        .into_iter()
        .filter_map(|(what, t)| Some((what, t?)))
    {
        let at = middle.as_ptr();
        drop(middle);
        // Leaked, still mapped, and its pages released: it reads as zeros.
        assert!(mapped(at as usize), "{what}");
        // SAFETY: the range is still mapped (above), readable, and nothing
        // else owns it.
        let byte = unsafe { at.read_volatile() };
        assert_eq!(byte, 0, "the leaked {what} page kept its contents");
        kept.push((first, last));
    }
    drop(fillers);
    drop(kept);
}
