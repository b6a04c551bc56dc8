//! Regions of 2 MiB hugetlb pages: each fault served with a whole huge
//! page, records counting huge pages, a short pool refused with the fix,
//! and every huge page back in the pool after drop.

mod gated;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mmbatch_faultaround::{Error, HugePageSize, Record, UffdRegion};

use mmbatch_testkit::huge::{FREE, HUGE, NR, Pool, read};

/// Whether this kernel lacks `MADV_POPULATE_READ` (before Linux 5.14):
/// the page caches then copy without faulting the source in first, and
/// the tests of what that catches have nothing to test.
fn populate_read_missing() -> bool {
    let page = [0u8; 8192];
    let at = (page.as_ptr() as usize).next_multiple_of(4096);
    // SAFETY: a page inside the local array (8 KiB holds an aligned 4 KiB
    // page); the advice reads it in and changes nothing.
    let r = unsafe { libc::madvise(at as *mut libc::c_void, 4096, libc::MADV_POPULATE_READ) };
    r != 0
}

/// Whether this is test `name`'s child process, where the test runs. In
/// the parent: grows the pool by `pages` (or says it cannot), runs the
/// child, puts the pool back whatever became of it, and checks its exit.
fn in_child_with_pool(name: &str, pages: usize) -> bool {
    if mmbatch_testkit::child::is_child() {
        return true;
    }
    let Some(pool) = Pool::grow(pages) else {
        return false;
    };
    let run = mmbatch_testkit::child::parent(name, Duration::from_secs(30)).expect("not the child");
    drop(pool);
    println!("{}", run.output);
    run.expect_success();
    false
}

/// Huge page `i` holds bytes derived from `i` and the offset.
fn image(pages: usize) -> Vec<u8> {
    (0..pages * HUGE)
        .map(|b| ((b / HUGE) * 31 + b % 4093) as u8)
        .collect()
}

#[test]
fn a_huge_page_region_is_served_a_whole_huge_page_a_fault() {
    let Some(_pool) = Pool::grow(8) else { return };
    let _hang =
        mmbatch_testkit::hang_guard("a_huge_page_region_is_served_a_whole_huge_page_a_fault");
    let free_before = read(FREE);
    let src = image(8);
    {
        let mut r = UffdRegion::builder(8 * HUGE)
            .huge_pages(HugePageSize::Size2M)
            .handlers(2)
            .build(src.clone())
            .unwrap();
        // Reserved at build: the pool's free pages are promised, not yet
        // taken.
        assert_eq!(r.resident_pages(), 0);
        for p in [5, 0, 7, 2] {
            assert_eq!(r.as_slice()[p * HUGE + 12345], src[p * HUGE + 12345]);
        }
        let st = r.stats();
        assert_eq!((st.faults, st.pages_copied), (4, 4), "{st:?}");
        assert_eq!(r.resident_pages(), 4);
        assert!(
            r.as_slice() == src.as_slice(),
            "the region differs from the image"
        );
        assert_eq!(r.stats().pages_copied, 8);
        // A write lands on the source's bytes.
        r.as_mut_slice()[3 * HUGE + 1] = 0xAB;
        assert_eq!(r.as_slice()[3 * HUGE + 1], 0xAB);
        assert_eq!(r.as_slice()[3 * HUGE], src[3 * HUGE]);
        // A discarded huge page reads as zeros (hugetlb has no
        // UFFDIO_ZEROPAGE: a zeroed page is copied).
        let at = r.as_mut_ptr().wrapping_add(6 * HUGE);
        // SAFETY: one huge page of the region, which no borrow holds.
        let rc = unsafe { libc::madvise(at.cast(), HUGE, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        assert!(r.as_slice()[6 * HUGE..7 * HUGE].iter().all(|&b| b == 0));
        let st = r.stats();
        assert_eq!((st.remove_events, st.pages_zeroed), (1, 1), "{st:?}");
        assert!(r.failure().is_none());
    }
    // Every huge page is back in the pool.
    assert_eq!(read(FREE), free_before);
}

#[test]
fn records_and_replays_count_huge_pages() {
    let Some(_pool) = Pool::grow(16) else { return };
    let _hang = mmbatch_testkit::hang_guard("records_and_replays_count_huge_pages");
    let src = image(8);
    let rec = {
        let r = UffdRegion::builder(8 * HUGE)
            .huge_pages(HugePageSize::Size2M)
            .record(true)
            .build(src.clone())
            .unwrap();
        for p in [6, 1, 3] {
            std::hint::black_box(r.as_slice()[p * HUGE + 7]);
        }
        r.record().unwrap()
    };
    assert_eq!(rec.pages(), [6, 1, 3]);
    let r = UffdRegion::builder(8 * HUGE)
        .huge_pages(HugePageSize::Size2M)
        .replay(rec)
        .build(src.clone())
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(30)));
    assert_eq!(r.stats().pages_prefetched, 3);
    assert_eq!(r.resident_pages(), 3);
    assert!(r.as_slice() == src.as_slice());
}

/// A fault ahead of the replay takes the recorded run it lands in only
/// where the run fits a fault's 2 MiB buffer: in a region of 2 MiB pages,
/// its own page (a run of 64 huge pages would be 128 MiB a handler).
#[test]
fn a_fault_ahead_of_a_huge_page_replay_takes_its_page_not_its_run() {
    let Some(_pool) = Pool::grow(8) else { return };
    let _hang = mmbatch_testkit::hang_guard(
        "a_fault_ahead_of_a_huge_page_replay_takes_its_page_not_its_run",
    );
    let src = image(8);
    let open = gated::gate();
    let runs_read = Arc::new(AtomicUsize::new(0));
    let rec = Record::new(HUGE, (8 * HUGE) as u64, "", [0, 1, 3, 4, 6, 7]).unwrap();
    let r = UffdRegion::builder(8 * HUGE)
        .huge_pages(HugePageSize::Size2M)
        .replay(rec)
        .source_timeout(Duration::from_secs(2))
        .build(gated::GatedRuns {
            src: src.clone(),
            open: open.clone(),
            runs_read: runs_read.clone(),
        })
        .unwrap();
    // Both replay threads wait in the runs 0..2 and 3..5.
    for _ in 0..2000 {
        if runs_read.load(Ordering::SeqCst) == gated::HELD {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(runs_read.load(Ordering::SeqCst), gated::HELD);
    assert_eq!(r.as_slice()[6 * HUGE + 5], src[6 * HUGE + 5]);
    assert_eq!(r.resident_pages(), 1, "{:?}", r.stats());
    gated::release(&open);
    assert!(r.wait_replayed(Duration::from_secs(30)));
    assert_eq!(r.resident_pages(), 6);
    assert!(r.failure().is_none());
    for p in [0, 1, 3, 4, 6, 7] {
        assert!(r.as_slice()[p * HUGE..(p + 1) * HUGE] == src[p * HUGE..(p + 1) * HUGE]);
    }
}

#[test]
fn a_short_pool_is_refused_with_the_command_that_reserves_it() {
    let _pool = mmbatch_testkit::huge::hold();
    let _hang =
        mmbatch_testkit::hang_guard("a_short_pool_is_refused_with_the_command_that_reserves_it");
    let free = HugePageSize::Size2M.available_pages();
    let e = UffdRegion::builder((free + 1) * HUGE)
        .huge_pages(HugePageSize::Size2M)
        .build(vec![0u8; (free + 1) * HUGE])
        .unwrap_err();
    assert!(matches!(e, Error::HugePagesUnavailable(_)), "{e}");
    assert!(e.to_string().contains(NR), "{e}");
}

#[test]
fn lengths_and_orders_that_do_not_fit_huge_pages_are_refused() {
    let _hang =
        mmbatch_testkit::hang_guard("lengths_and_orders_that_do_not_fit_huge_pages_are_refused");
    let b = || UffdRegion::builder(HUGE + 4096).huge_pages(HugePageSize::Size2M);
    let e = b().build(vec![0u8; 2 * HUGE]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadLength {
                page_size: HUGE,
                ..
            }
        ),
        "{e}"
    );
    let e = UffdRegion::builder(HUGE)
        .huge_pages(HugePageSize::Size2M)
        .order(5)
        .build(vec![0u8; HUGE])
        .unwrap_err();
    assert!(e.to_string().contains("smaller order"), "{e}");
}

#[test]
fn writes_to_huge_pages_are_tracked() {
    let Some(_pool) = Pool::grow(4) else { return };
    let _hang = mmbatch_testkit::hang_guard("writes_to_huge_pages_are_tracked");
    let r = UffdRegion::builder(4 * HUGE)
        .huge_pages(HugePageSize::Size2M)
        .track_writes(true)
        .build(image(4));
    if !mmbatch_testkit::kernel_at_least(6, 7) {
        let e = r.unwrap_err();
        assert!(e.to_string().contains("Linux 6.7"), "{e}");
        return;
    }
    let mut r = r.unwrap();
    std::hint::black_box(r.as_slice()[0] as u32 + r.as_slice()[3 * HUGE] as u32);
    assert_eq!(r.written_pages().unwrap(), []);
    r.as_mut_slice()[2 * HUGE + 99] = 1;
    r.as_mut_slice()[3 * HUGE] = 1;
    let written: Vec<u64> = r
        .take_written_pages()
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(written, [2, 3]);
    assert_eq!(r.written_pages().unwrap(), []);
}

/// A huge-page cache from a source still downloading: `NotReady` for each
/// page's first two calls, having written part of the page (as a short
/// read does). The cache waits for each page and holds it whole; the old
/// one read into the memfd's mapping in place and left a page of
/// half-written bytes and zeros, as if valid.
#[test]
fn a_huge_page_cache_waits_for_whole_pages() {
    use mmbatch_faultaround::{PageRead, PageSource};
    struct Downloading(Vec<u8>, std::sync::Mutex<[u32; 2]>);
    impl PageSource for Downloading {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            let mut calls = self.1.lock().unwrap();
            calls[index as usize] += 1;
            let page = &self.0[index as usize * HUGE..][..HUGE];
            if calls[index as usize] <= 2 {
                buf[..HUGE / 2].copy_from_slice(&page[..HUGE / 2]);
                return PageRead::NotReady;
            }
            buf.copy_from_slice(page);
            PageRead::Ready
        }
    }
    let _hang = mmbatch_testkit::hang_guard("a_huge_page_cache_waits_for_whole_pages");
    let Some(_pool) = Pool::grow(2) else { return };
    let src = Downloading(image(2), std::sync::Mutex::new([0; 2]));
    let file = UffdRegion::huge_page_cache_from(&src, 2 * HUGE, HugePageSize::Size2M).unwrap();
    let mut back = vec![0u8; 2 * HUGE];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 0).unwrap();
    assert!(back == src.0, "the cache is not the image");
}

/// A hugetlbfs memfd holding the image, mapped and continued a whole huge
/// page at a time (`UFFDIO_CONTINUE`, no copy), and replayed in place.
#[test]
fn a_hugetlbfs_page_cache_is_continued_in_huge_pages() {
    let _hang = mmbatch_testkit::hang_guard("a_hugetlbfs_page_cache_is_continued_in_huge_pages");
    // The memfd's 4 and the recording region's 4.
    let Some(_pool) = Pool::grow(8) else { return };
    let src = image(4);
    let file = UffdRegion::huge_page_cache_from(&src, 4 * HUGE, HugePageSize::Size2M).unwrap();
    // SAFETY: the memfd is this test's own; nothing else writes or
    // truncates it.
    let r = unsafe { UffdRegion::over_page_cache(&file, 4 * HUGE, 0, 1) }.unwrap();
    assert_eq!(r.as_slice()[3 * HUGE + 5], src[3 * HUGE + 5]);
    assert_eq!((r.stats().faults, r.stats().pages_copied), (1, 1));
    assert!(r.as_slice() == src.as_slice());
    assert_eq!(r.stats().pages_copied, 4);
    drop(r);
    // Replayed in place: a record of huge pages 2 and 0.
    let rec = {
        let r = UffdRegion::builder(4 * HUGE)
            .huge_pages(HugePageSize::Size2M)
            .record(true)
            .build(src.clone())
            .unwrap();
        std::hint::black_box(r.as_slice()[2 * HUGE] as u32 + r.as_slice()[0] as u32);
        r.record().unwrap()
    };
    // SAFETY: as above.
    let r = unsafe {
        UffdRegion::builder(4 * HUGE)
            .replay(rec)
            .build_over_page_cache(&file)
    }
    .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(30)));
    assert_eq!(r.stats().pages_prefetched, 2);
    assert!(r.as_slice() == src.as_slice());
}

/// 1 GiB pages are refused before anything is mapped or reserved, naming
/// the size to use: one would need a gigabyte of buffer per handler (the
/// message said an order of 0 would do, which it did not).
#[test]
fn one_gib_pages_are_refused_naming_the_size_to_use() {
    const GIB: usize = 1 << 30;
    let e = UffdRegion::builder(GIB)
        .huge_pages(HugePageSize::Size1G)
        .order(0)
        .build(mmbatch_faultaround::Zeroes(GIB as u64))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "huge_pages",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("use 2 MiB pages"), "{e}");
    let e = UffdRegion::huge_page_cache_from(
        &mmbatch_faultaround::Zeroes(GIB as u64),
        GIB,
        HugePageSize::Size1G,
    )
    .unwrap_err();
    assert!(e.to_string().contains("use 2 MiB pages"), "{e}");
}

/// A huge-page image must be whole huge pages: an empty length or one
/// that is not a multiple of the huge page is refused before the pool is
/// touched (this runs with no huge pages reserved).
#[test]
fn a_huge_page_image_of_partial_pages_is_refused() {
    let src = mmbatch_faultaround::Zeroes(4 * HUGE as u64);
    for len in [0, 4096, HUGE + 4096] {
        let e = UffdRegion::huge_page_cache_from(&src, len, HugePageSize::Size2M).unwrap_err();
        assert!(
            matches!(e, Error::BadLength { page_size, .. } if page_size == HUGE),
            "{len}: {e}"
        );
    }
}

/// A source shorter than the image asked for is refused, naming both
/// lengths, before the pool is touched (no huge page is reserved here).
#[test]
fn a_huge_page_image_longer_than_its_source_is_refused() {
    let src = mmbatch_faultaround::Zeroes(HUGE as u64);
    let e = UffdRegion::huge_page_cache_from(&src, 2 * HUGE, HugePageSize::Size2M).unwrap_err();
    assert!(
        matches!(e, Error::SourceTooShort { source_len, region_len }
            if source_len == HUGE as u64 && region_len == 2 * HUGE),
        "{e}"
    );
}

/// A huge page cache built from a mapped file cut short (under its
/// mapping, before the build) fails at the huge page past the new end,
/// naming it, and the process lives on. Copied from the mapping, the gone
/// bytes killed the process with SIGBUS. In a child: the pool is grown
/// and put back by the parent, whatever becomes of the child.
#[test]
fn a_huge_page_cache_from_a_source_mapping_cut_short_fails_its_page() {
    use std::os::fd::AsFd;
    let name = "a_huge_page_cache_from_a_source_mapping_cut_short_fails_its_page";
    if !in_child_with_pool(name, 2) {
        return;
    }
    struct Mapped(mmbatch_mmap::Mapping);
    impl AsRef<[u8]> for Mapped {
        fn as_ref(&self) -> &[u8] {
            self.0.as_slice().expect("mapped readable")
        }
    }
    let path = std::env::temp_dir().join(format!("mmbatch-huge-cut-short-{}", std::process::id()));
    let data = image(2);
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    // SAFETY: this test's own file, unlinked; its truncation below is
    // what is tested.
    let mapping = unsafe {
        mmbatch_mmap::Mapping::file(
            file.as_fd(),
            0,
            data.len(),
            mmbatch_mmap::ProtFlags::READ,
            mmbatch_mmap::MapFlags::SHARED,
        )
    }
    .unwrap();
    let source = mmbatch_faultaround::InMemory(Mapped(mapping));
    let whole = UffdRegion::huge_page_cache_from(&source, 2 * HUGE, HugePageSize::Size2M).unwrap();
    let mut back = vec![0u8; 2 * HUGE];
    std::os::unix::fs::FileExt::read_exact_at(&whole, &mut back, 0).unwrap();
    assert!(back == data, "the cache is not the image");
    drop(whole);
    file.set_len((HUGE + HUGE / 2) as u64).unwrap();
    if populate_read_missing() {
        println!(
            "no MADV_POPULATE_READ here: the cut is not caught before the copy; not exercised"
        );
        std::process::exit(0);
    }
    let e = UffdRegion::huge_page_cache_from(&source, 2 * HUGE, HugePageSize::Size2M).unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::PageFailed { page: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("EFAULT: the source's bytes"), "{e}");
    std::process::exit(0);
}

/// A huge page cache whose source's bytes are memory that cannot be read
/// (`PROT_NONE`, as another region's failed page is under the fallback
/// before Linux 6.6) fails the page: the fault-in's EINVAL is that
/// memory, not a kernel without the advice, and copying from it would
/// kill the process with SIGSEGV.
#[test]
fn a_huge_page_cache_from_unreadable_memory_fails_its_page() {
    use mmbatch_faultaround::{PageRead, PageSource};
    let name = "a_huge_page_cache_from_unreadable_memory_fails_its_page";
    if !in_child_with_pool(name, 1) {
        return;
    }
    /// One huge page, its bytes in a `PROT_NONE` mapping.
    struct Sealed(mmbatch_mmap::Mapping);
    impl PageSource for Sealed {
        fn len(&self) -> u64 {
            HUGE as u64
        }
        fn read_page(&self, _: u64, _: &mut [u8]) -> PageRead {
            PageRead::Failed(std::io::Error::other("read_page is not asked"))
        }
        fn pages(&self, _: u64, count: usize, page_size: usize) -> Option<&[u8]> {
            // SAFETY: the mapping's bytes, alive with `self`, which this
            // process must not read: the slice models what the crate meets
            // (another region's failed page, protected), and the code under
            // test gives it only to the kernel, whose populate refuses it.
            // Read here, it would fault: that is the bug the test catches.
            (count * page_size == HUGE)
                .then(|| unsafe { std::slice::from_raw_parts(self.0.as_ptr(), HUGE) })
        }
    }
    if populate_read_missing() {
        println!("no MADV_POPULATE_READ here: not exercised");
        std::process::exit(0);
    }
    let none = mmbatch_mmap::Mapping::new(
        HUGE,
        mmbatch_mmap::ProtFlags::empty(),
        mmbatch_mmap::MapFlags::PRIVATE,
    )
    .unwrap();
    let e =
        UffdRegion::huge_page_cache_from(&Sealed(none), HUGE, HugePageSize::Size2M).unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::PageFailed { page: 0, .. }), "{e:?}");
    assert!(e.to_string().contains("MADV_POPULATE_READ"), "{e}");
    std::process::exit(0);
}

/// A sandbox that refuses `madvise` (a seccomp filter's EPERM): the huge
/// page cache copies its source as it did before it faulted the source
/// in first, where it failed every page with the filter's EPERM.
#[test]
fn a_huge_page_cache_is_made_where_madvise_is_refused() {
    use mmbatch_testkit::seccomp::refuse_syscalls;
    let name = "a_huge_page_cache_is_made_where_madvise_is_refused";
    if !in_child_with_pool(name, 2) {
        return;
    }
    let data = image(2);
    refuse_syscalls(&[libc::SYS_madvise]);
    let source = mmbatch_faultaround::InMemory(data.clone());
    let file = UffdRegion::huge_page_cache_from(&source, 2 * HUGE, HugePageSize::Size2M).unwrap();
    let mut back = vec![0u8; 2 * HUGE];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 0).unwrap();
    assert!(back == data, "the cache is not the image");
    std::process::exit(0);
}

/// A cgroup v2 of this test's own, with the hugetlb controller and a
/// fault-time limit of `max` bytes of 2 MiB pages (`hugetlb.2MB.max`):
/// cgroup2 mounted in a temporary directory where it is not mounted yet
/// (a host on cgroup v1), taken down again when dropped. `None` where it
/// cannot be made (not root, no hugetlb controller free for cgroup v2).
struct HugetlbCgroup {
    /// Empty until made.
    dir: std::path::PathBuf,
    /// Where this test mounted cgroup2, to unmount.
    mounted: Option<std::path::PathBuf>,
    /// The root's `cgroup.subtree_control`, where this test turned the
    /// hugetlb controller on, to turn it off again.
    enabled: Option<std::path::PathBuf>,
}

impl HugetlbCgroup {
    fn new(max: u64) -> Option<Self> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let found = mounts.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let at = f.nth(1)?;
            (f.next()? == "cgroup2").then(|| std::path::PathBuf::from(at))
        });
        let (root, mounted) = match found {
            Some(root) => (root, None),
            None => {
                let at = std::env::temp_dir().join(format!("mmbatch-cg2-{}", std::process::id()));
                std::fs::create_dir_all(&at).ok()?;
                let path = std::ffi::CString::new(at.to_str()?).ok()?;
                // SAFETY: NUL-terminated strings that outlive the call.
                let r = unsafe {
                    libc::mount(
                        c"none".as_ptr(),
                        path.as_ptr(),
                        c"cgroup2".as_ptr(),
                        0,
                        std::ptr::null(),
                    )
                };
                if r != 0 {
                    let _ = std::fs::remove_dir(&at);
                    return None;
                }
                (at.clone(), Some(at))
            }
        };
        // Dropped on every early return below: takes down what was made.
        let mut cg = HugetlbCgroup {
            dir: std::path::PathBuf::new(),
            mounted,
            enabled: None,
        };
        let has = |file: &str| {
            std::fs::read_to_string(root.join(file))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "hugetlb"))
        };
        if !has("cgroup.controllers") {
            return None;
        }
        if !has("cgroup.subtree_control") {
            let control = root.join("cgroup.subtree_control");
            std::fs::write(&control, "+hugetlb").ok()?;
            cg.enabled = Some(control);
        }
        let dir = root.join(format!("mmbatch-hugetlb-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        cg.dir = dir;
        std::fs::write(cg.dir.join("hugetlb.2MB.max"), max.to_string()).ok()?;
        Some(cg)
    }

    /// The file a process writes its pid to, to move into the cgroup.
    fn procs(&self) -> String {
        self.dir.join("cgroup.procs").to_str().unwrap().to_owned()
    }
}

impl Drop for HugetlbCgroup {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            // A process that has just exited leaves its cgroup a moment
            // later (EBUSY until then).
            for _ in 0..200 {
                if std::fs::remove_dir(&self.dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(control) = &self.enabled {
            let _ = std::fs::write(control, "-hugetlb");
        }
        if let Some(at) = &self.mounted {
            let path = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated string that outlives the call.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            let _ = std::fs::remove_dir(at);
        }
    }
}

/// A hugetlb cgroup's fault-time limit (`hugetlb.2MB.max`) lets the
/// memfd's mapping reserve its pages and refuses them only as each is
/// first touched: the cache's fill, writing through the mapping, took
/// SIGBUS there and the process died (seen on the old code: the child
/// killed by signal 7). Now an error naming the limit. Root only: the
/// child moves itself into a cgroup limited to no huge pages.
#[test]
fn a_hugetlb_cgroup_limit_is_an_error_not_a_sigbus() {
    const NAME: &str = "a_hugetlb_cgroup_limit_is_an_error_not_a_sigbus";
    const CGROUP: &str = "MMBATCH_HUGETLB_CGROUP_PROCS";
    if let Ok(procs) = std::env::var(CGROUP) {
        std::fs::write(&procs, std::process::id().to_string()).unwrap();
        let src = image(2);
        let e = UffdRegion::huge_page_cache_from(&src, 2 * HUGE, HugePageSize::Size2M)
            .expect_err("the cgroup allows no huge page");
        assert!(matches!(e, Error::Sys { .. }), "{e:?}");
        assert!(e.to_string().contains("hugetlb.2MB.max"), "{e}");
        return;
    }
    if populate_read_missing() {
        // Before Linux 5.14 the writes fault the pages in, as they did.
        println!("no MADV_POPULATE_* here: not exercised");
        return;
    }
    let Some(pool) = Pool::grow(2) else {
        return;
    };
    let Some(cgroup) = HugetlbCgroup::new(0) else {
        eprintln!("no cgroup v2 with the hugetlb controller here (or not root): not exercised");
        return;
    };
    let run =
        mmbatch_testkit::child::run(NAME, Duration::from_secs(30), &[(CGROUP, &cgroup.procs())]);
    drop(cgroup);
    drop(pool);
    assert_eq!(run.signal(), None, "the child was killed: {}", run.output);
    run.expect_success();
}
