//! hugetlb regions: reserved for their life and given back, cleared in
//! huge-page chunks.

use mmbatch_ktask::{HugeError, HugePageSize, HugeRegion};

/// The huge page pool is global: tests that read or grow it take turns.
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pool(file: &str) -> usize {
    std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{file}"))
        .map_or(0, |s| s.trim().parse().unwrap_or(0))
}

#[test]
fn misaligned_lengths_are_refused_before_anything_is_reserved() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let before = pool("nr_hugepages");
    let e = HugeRegion::new_growing_pool(HugePageSize::Size2M, (2 << 20) + 4096).unwrap_err();
    assert!(matches!(e, HugeError::Misaligned { .. }));
    assert!(e.to_string().contains("round it up to 4194304"), "{e}");
    assert!(matches!(
        HugeRegion::new_growing_pool(HugePageSize::Size1G, 0),
        Err(HugeError::Misaligned { .. })
    ));
    assert_eq!(pool("nr_hugepages"), before);
}

#[test]
fn a_2m_region_is_reserved_cleared_and_given_back() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let before = pool("nr_hugepages");
    // Two pages more than are free, so the pool must grow (where it holds
    // few free pages already: a test touches every page it maps).
    let free = available();
    let pages = if free <= 64 { free + 2 } else { 4 };
    let len = pages * (2 << 20);
    match HugeRegion::new_growing_pool(HugePageSize::Size2M, len) {
        Ok(mut r) => {
            assert_eq!((r.len(), r.is_empty()), (len, false));
            assert_eq!(r.page_size(), HugePageSize::Size2M);
            if free <= 64 {
                assert_eq!(
                    pool("nr_hugepages"),
                    before + 2,
                    "grown by what was lacking"
                );
            }
            assert_eq!(r.as_mut_slice().len(), len);
            r.as_mut_slice().fill(9);
            r.clear(2);
            assert!(r.as_mut_slice().iter().all(|b| *b == 0));
            // Read through `&self`, and the same memory by pointer.
            let shared = &r;
            assert!(shared.as_slice().iter().all(|b| *b == 0));
            assert_eq!(shared.as_slice().len(), len);
            assert_eq!(shared.as_ptr(), r.as_mut_slice().as_ptr());
            let p = r.as_mut_ptr();
            // SAFETY: inside the region, which `r` keeps mapped; no
            // reference into it is alive.
            unsafe { p.wrapping_add(len - 1).write(5) };
            assert_eq!(r.as_slice()[len - 1], 5);
            drop(r);
            assert_eq!(
                pool("nr_hugepages"),
                before,
                "the pages this region added were given back"
            );
        }
        Err(HugeError::NotReservable(_)) if !nix_is_root() => {
            eprintln!(
                "not root: the huge page pool cannot be grown here; reservation not exercised"
            );
        }
        Err(e) => panic!("{e}"),
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|u| u.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Pages free and not promised to a mapping: what a region can take
/// without growing the pool.
fn available() -> usize {
    pool("free_hugepages").saturating_sub(pool("resv_hugepages"))
}

/// Regions dropped in creation order (a `Vec`), and made from two threads
/// at once: the old code restored an absolute pool size read at creation,
/// so the first drop shrank the pool under the second region and the last
/// drop left a page reserved for good; concurrent creations raced on
/// read-then-write. Now each region adds and removes only its own pages.
///
/// The host may hold free pages already (an administrator's
/// `nr_hugepages`): regions take those first and grow the pool only by
/// what they lack, so the test expects growth from what it found.
#[test]
fn regions_dropped_in_any_order_give_every_page_back() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if !nix_is_root() {
        eprintln!("not root: the huge page pool cannot be grown here; not exercised");
        return;
    }
    let (before, free) = (pool("nr_hugepages"), available());
    let regions: Vec<HugeRegion> = (0..3)
        .map(|_| HugeRegion::new_growing_pool(HugePageSize::Size2M, 2 << 20).unwrap())
        .collect();
    assert_eq!(
        pool("nr_hugepages"),
        before + 3usize.saturating_sub(free),
        "the pool grew by what its {free} free pages lacked"
    );
    drop(regions); // first made, first dropped
    assert_eq!(pool("nr_hugepages"), before, "pages left reserved");
    assert_eq!(available(), free, "pages left taken");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| HugeRegion::new_growing_pool(HugePageSize::Size2M, 4 << 20).unwrap())
            })
            .collect();
        let _held: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            pool("nr_hugepages"),
            before + 8usize.saturating_sub(free),
            "each region got its own pages"
        );
        assert_eq!(
            available(),
            free.saturating_sub(8),
            "each region took its own"
        );
    });
    assert_eq!(pool("nr_hugepages"), before, "pages left reserved");
    assert_eq!(available(), free, "pages left taken");
}

/// The same with the pool as an administrator leaves it: four free pages
/// reserved before the test (issue: it asserted growth by 3 and saw 4 -> 7
/// expected, 4 found). Sets the pool, and puts it back as it found it.
#[test]
fn regions_take_the_pools_free_pages_before_growing_it() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if !nix_is_root() {
        eprintln!("not root: the huge page pool cannot be set here; not exercised");
        return;
    }
    let path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let found = pool("nr_hugepages");
    std::fs::write(path, (found + 4).to_string()).unwrap();
    let set = pool("nr_hugepages");
    let free = available();
    let result = std::panic::catch_unwind(|| {
        let regions: Vec<HugeRegion> = (0..3)
            .map(|_| HugeRegion::new_growing_pool(HugePageSize::Size2M, 2 << 20).unwrap())
            .collect();
        let grown = pool("nr_hugepages") - set;
        drop(regions);
        (grown, pool("nr_hugepages"), available())
    });
    // One region larger than every free page: the pool grows by the
    // difference alone, and shrinks by it at the drop.
    let larger = std::panic::catch_unwind(|| {
        let free = available();
        let r = HugeRegion::new_growing_pool(HugePageSize::Size2M, (free + 2) * (2 << 20));
        let grown = pool("nr_hugepages") - set;
        drop(r.unwrap());
        (grown, pool("nr_hugepages"))
    });
    std::fs::write(path, found.to_string()).unwrap();
    let (grown, after, free_after) = result.unwrap();
    assert_eq!(grown, 3usize.saturating_sub(free), "{free} were free");
    assert_eq!((after, free_after), (set, free), "the pool as it was");
    assert_eq!(larger.unwrap(), (2, set), "grown by 2, then given back");
    assert_eq!(pool("nr_hugepages"), found, "the host's pool put back");
}

/// Each error that wraps another hands it to `source()`.
#[test]
fn wrapped_errors_are_the_source() {
    use std::error::Error as _;
    let map = HugeError::Map(std::io::Error::from_raw_os_error(12));
    assert_eq!(
        map.source()
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .and_then(std::io::Error::raw_os_error),
        Some(12)
    );
    let pool = HugeError::NotReservable(mmbatch_ktask::HugePagesUnavailable::new(
        HugePageSize::Size2M,
        3,
        1,
    ));
    assert!(
        pool.source()
            .is_some_and(|e| e.to_string().contains("nr_hugepages"))
    );
    assert!(HugeError::Misaligned { len: 1, page: 2 }.source().is_none());
}

/// `HugeRegion::populate` faults every page in (the pool's free count
/// falls by the region's pages, its reservation used up) and the memory
/// reads as zeroes; a thread count of 0 is taken as 1.
#[test]
fn a_region_populates_every_page() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pages = 3;
    let mut r = match HugeRegion::new_growing_pool(HugePageSize::Size2M, pages * (2 << 20)) {
        Ok(r) => r,
        Err(HugeError::NotReservable(e)) if !nix_is_root() => {
            eprintln!("not root and no free huge pages: not exercised ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let (free, resv) = (pool("free_hugepages"), pool("resv_hugepages"));
    r.populate(8).unwrap();
    assert_eq!(
        (pool("free_hugepages"), pool("resv_hugepages")),
        (free - pages, resv - pages),
        "every page faulted in"
    );
    assert!(r.as_slice().iter().all(|b| *b == 0));
    drop(r);
    let mut one = HugeRegion::new_growing_pool(HugePageSize::Size2M, 2 << 20).unwrap();
    one.populate(0).unwrap();
    one.as_mut_slice()[0] = 1;
}

/// Surplus pages (another mapping's, overcommitted; reserved by it, not
/// touched) held while a region grows the pool are surplus again after
/// the region drops, and leave
/// the pool when their mapping lets them go. The kernel makes surplus
/// pages persistent when `nr_hugepages` is written larger; the old drop
/// wrote the total less its own pages, so they stayed persistent: after
/// everything was unmapped the pool kept 2 pages (2 found, 0 expected).
/// Runs as root on a host whose 2 MiB pool is empty; sets the overcommit
/// and puts it back.
#[test]
fn surplus_pages_in_use_stay_surplus_through_a_grown_region() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if !nix_is_root() || pool("nr_hugepages") != 0 {
        eprintln!("not root, or the pool holds pages already: not exercised");
        return;
    }
    let over = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages";
    let found = pool("nr_overcommit_hugepages");
    std::fs::write(over, "2").unwrap();
    let result = std::panic::catch_unwind(|| {
        // Unmapped on drop, a panic's unwinding included: no page is left
        // reserved whatever fails below.
        let other = mmbatch_ktask::Mapping::new(
            2 * (2 << 20),
            mmbatch_mmap::ProtFlags::READ | mmbatch_mmap::ProtFlags::WRITE,
            mmbatch_mmap::MapFlags::PRIVATE | HugePageSize::Size2M.map_flags(),
        )
        .unwrap();
        let during = (pool("nr_hugepages"), pool("surplus_hugepages"));
        let region = HugeRegion::new_growing_pool(HugePageSize::Size2M, 2 << 20);
        let grown = pool("nr_hugepages");
        drop(region);
        let after_region = (pool("nr_hugepages"), pool("surplus_hugepages"));
        drop(other);
        (during, grown, after_region, pool("nr_hugepages"))
    });
    std::fs::write(over, found.to_string()).unwrap();
    let leftover = pool("nr_hugepages");
    if leftover != 0 {
        // Put the host back before failing.
        let _ = std::fs::write(
            "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "0",
        );
    }
    let (during, grown, after_region, after_all) = result.unwrap();
    assert_eq!(during, (2, 2), "the other mapping's pages are surplus");
    assert_eq!(grown, 3, "the region's page added");
    assert_eq!(
        after_region,
        (2, 2),
        "surplus again once the region dropped"
    );
    assert_eq!((after_all, leftover), (0, 0), "pages left in the pool");
}
