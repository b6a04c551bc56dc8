//! Host tests, small sizes, checked against the kernel's own accounting
//! (smaps, mincore, VmLck, /proc/self/maps) rather than return
//! codes. Scenarios that change process-wide state (limits, credentials,
//! mlockall, the mapping count, a stray segfault) run in a child process:
//! the test binary re-executes itself with `MMBATCH_MLOCK_CHILD` set.

#[cfg(feature = "fault-locked")]
use mmbatch_mlock::FaultLockedRegion;
use mmbatch_mlock::{
    Error, HugePageSize, LockAll, LockPolicy, LockedRegion, Pages, accounting, mlockall, munlockall,
};
use mmbatch_testkit::child;

const MIB: usize = 1 << 20;

/// The time limit of a test run in a child ([`child::scaled`] to the
/// machine): a fault handler that leaves the page protected faults
/// forever, a loop that stops advancing spins, and each fails at this
/// bound instead of hanging the test binary. Every such test takes well
/// under a second here.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

fn page() -> usize {
    accounting::page_size()
}

#[test]
fn populate_locks_the_whole_region() {
    let r = LockedRegion::builder(4 * MIB).build().unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 4 * MIB as u64);
    assert_eq!(r.resident_pages().unwrap(), 4 * MIB / page());
    assert!(accounting::process_locked_bytes().unwrap() >= 4 * MIB as u64);
}

#[test]
fn map_locked_populate_locks_the_whole_region() {
    let r = LockedRegion::builder(2 * MIB)
        .map_locked(true)
        .build()
        .unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 2 * MIB as u64);
}

#[test]
fn onfault_locks_exactly_the_touched_pages() {
    let mut r = LockedRegion::builder(4 * MIB)
        .policy(LockPolicy::OnFault)
        .build()
        .unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 0);
    assert_eq!(r.resident_pages().unwrap(), 0);
    let p = page();
    let buf = r.as_mut_slice().unwrap();
    for i in [0, 5, 17, 1000] {
        buf[i * p + 1] = 7;
    }
    assert_eq!(r.locked_bytes().unwrap(), 4 * p as u64);
    assert_eq!(r.resident_pages().unwrap(), 4);
}

/// An unlocked region locks a part of itself as pages are touched
/// (`lock_range_on_fault`), where `lock_range` would fault the part in:
/// the fallback of a region too large for the memlock limit.
#[test]
fn an_unlocked_region_locks_a_range_on_fault() {
    let mut r = LockedRegion::builder(4 * MIB)
        .policy(LockPolicy::Unlocked)
        .build()
        .unwrap();
    assert_eq!(r.policy(), LockPolicy::Unlocked);
    let p = page();
    r.lock_range_on_fault(0, MIB).unwrap();
    assert_eq!(r.resident_pages().unwrap(), 0, "nothing faulted in");
    let buf = r.as_mut_slice().unwrap();
    for i in [0, 3, 2 * MIB / p] {
        buf[i * p] = 7;
    }
    // The two pages in the range are locked; the one past it is not.
    assert_eq!(r.locked_bytes().unwrap(), 2 * p as u64);
    assert_eq!(r.resident_pages().unwrap(), 3);
    // `lock_range` locks by the region's policy: faulted in, all locked.
    r.lock_range(3 * MIB, MIB).unwrap();
    assert_eq!(r.locked_bytes().unwrap(), (2 * p + MIB) as u64);
}

#[test]
fn unlock_chunked_unlocks_everything() {
    if let Some(run) = child::parent("unlock_chunked_unlocks_everything", LIMIT) {
        return run.expect_success();
    }
    let r = LockedRegion::builder(8 * MIB).build().unwrap();
    r.unlock_chunked(MIB).unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 0);
    // A chunk that does not divide the length still covers it.
    let r = LockedRegion::builder(3 * MIB).build().unwrap();
    r.unlock_chunked(2 * MIB).unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 0);
}

/// What a region says of itself: its length, never empty, writable
/// unless read-only (then no mutable slice), and `unlock` unlocks it all.
#[test]
fn region_accessors_and_unlock() {
    let p = page();
    let mut r = LockedRegion::builder(4 * p).build().unwrap();
    assert_eq!((r.len(), r.is_empty(), r.writable()), (4 * p, false, true));
    assert_eq!(r.page_size(), p);
    assert!(r.as_mut_slice().is_some());
    assert_eq!(r.locked_bytes().unwrap(), 4 * p as u64);
    r.unlock().unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 0);
    let mut ro = LockedRegion::builder(p).read_only().build().unwrap();
    assert!(!ro.writable());
    assert!(ro.as_mut_slice().is_none());
}

#[test]
fn lock_and_unlock_sub_ranges() {
    let r = LockedRegion::builder(4 * MIB)
        .policy(LockPolicy::Unlocked)
        .build()
        .unwrap();
    assert_eq!(r.locked_bytes().unwrap(), 0);
    r.lock_range(MIB, MIB).unwrap();
    assert_eq!(r.locked_bytes().unwrap(), MIB as u64);
    r.unlock_range(MIB, MIB / 2).unwrap();
    assert_eq!(r.locked_bytes().unwrap(), MIB as u64 / 2);
}

#[test]
fn transparent_huge_page_region() {
    let r = LockedRegion::builder(4 * MIB)
        .pages(Pages::Transparent)
        .build()
        .unwrap();
    assert_eq!(r.as_ptr() as usize % (2 * MIB), 0, "aligned for THP");
    assert_eq!(r.locked_bytes().unwrap(), 4 * MIB as u64);
}

/// `VmFlags` of the smaps entry that starts at `addr`.
fn vm_flags(addr: usize) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, _)) = range.split_once('-') {
                if let Ok(a) = usize::from_str_radix(a, 16) {
                    inside = a == addr;
                    continue;
                }
            }
        }
        if inside {
            if let Some(f) = line.strip_prefix("VmFlags:") {
                return f.trim().to_owned();
            }
        }
    }
    panic!("no mapping starts at {addr:x}")
}

/// Transparent huge pages are asked for (`MADV_HUGEPAGE`, smaps `hg`),
/// base pages are kept from them (`MADV_NOHUGEPAGE`, `nh`).
#[test]
fn page_kinds_advise_the_kernel() {
    let thp = LockedRegion::builder(4 * MIB)
        .pages(Pages::Transparent)
        .build()
        .unwrap();
    let flags = vm_flags(thp.as_ptr() as usize);
    assert!(flags.split(' ').any(|f| f == "hg"), "THP region: {flags}");
    let base = LockedRegion::builder(MIB).build().unwrap();
    let flags = vm_flags(base.as_ptr() as usize);
    assert!(flags.split(' ').any(|f| f == "nh"), "base region: {flags}");
}

/// A file mapped from an offset shows the file's bytes from there; a
/// shared one writes the file; `map_locked` locks only what `Populate`
/// locks.
#[test]
fn file_regions_from_an_offset_shared_and_unlocked() {
    use std::os::fd::AsFd;
    let dir = std::env::temp_dir().join(format!("mmbatch-mlock-off-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    let p = page();
    let data: Vec<u8> = (0..4 * p).map(|i| (i / 7 % 253) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: this test's own file, not truncated while mapped; only the
    // shared region below writes it.
    let r = unsafe { LockedRegion::builder(2 * p).file(file.as_fd(), p as u64, false) }
        .read_only()
        .build()
        .unwrap();
    assert_eq!(r.as_slice(), &data[p..3 * p], "mapped from the offset");
    drop(r);
    // SAFETY: as above.
    let mut r = unsafe { LockedRegion::builder(p).file(file.as_fd(), 0, true) }
        .build()
        .unwrap();
    r.as_mut_slice().unwrap()[5] = 0xAB;
    drop(r);
    assert_eq!(
        std::fs::read(&path).unwrap()[5],
        0xAB,
        "a shared region writes the file"
    );
    // SAFETY: as above.
    let r = unsafe { LockedRegion::builder(2 * p).file(file.as_fd(), 0, false) }
        .policy(LockPolicy::Unlocked)
        .map_locked(true)
        .build()
        .unwrap();
    assert_eq!(
        r.locked_bytes().unwrap(),
        0,
        "map_locked without Populate locks nothing"
    );
    drop(r);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_backed_region_reads_the_file() {
    let dir = std::env::temp_dir().join(format!("mmbatch-mlock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    let data: Vec<u8> = (0..2 * MIB).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    use std::os::fd::AsFd;
    // SAFETY: this test's own file, neither written nor truncated while
    // mapped.
    let r = unsafe { LockedRegion::builder(2 * MIB).file(file.as_fd(), 0, false) }
        .read_only()
        .build()
        .unwrap();
    assert_eq!(r.as_slice(), &data[..]);
    assert_eq!(r.locked_bytes().unwrap(), 2 * MIB as u64);
    drop(r);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_lengths_and_ranges_are_clear_errors() {
    let e = LockedRegion::builder(0).build().unwrap_err();
    assert!(matches!(e, Error::ZeroLength), "{e}");
    // A page-aligned file offset past i64::MAX, which mmap cannot take:
    // past the end of any file (it was called misaligned).
    let f = std::fs::File::open("/proc/self/exe").unwrap();
    use std::os::fd::AsFd;
    let past = i64::MAX as u64 + 1;
    // SAFETY: refused before anything is mapped.
    let e = unsafe { LockedRegion::builder(page()).file(f.as_fd(), past, false) }
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::FileTooShort { offset, .. } if offset == past),
        "{e:?}"
    );
    // A region past the file's end: each access there would be SIGBUS,
    // through the safe slice (the old build mapped it). Writable too: only
    // a hugetlbfs file grows to cover a writable mapping.
    let exe = f.metadata().unwrap().len();
    let whole = (exe as usize).div_ceil(page()) * page();
    for (policy, read_only) in [
        (LockPolicy::Unlocked, true),
        (LockPolicy::OnFault, true),
        (LockPolicy::Unlocked, false),
    ] {
        // SAFETY: refused before anything is mapped.
        let b = unsafe { LockedRegion::builder(whole + page()).file(f.as_fd(), 0, false) };
        let b = if read_only { b.read_only() } else { b };
        let e = b.policy(policy).build().unwrap_err();
        assert!(
            matches!(e, Error::FileTooShort { file_len, .. } if file_len == exe),
            "{e:?}"
        );
        assert!(e.to_string().contains("SIGBUS"), "{e}");
    }
    let e = LockedRegion::builder(page() + 1).build().unwrap_err();
    assert!(e.to_string().contains("round it up to"), "{e}");
    let r = LockedRegion::builder(MIB)
        .policy(LockPolicy::Unlocked)
        .build()
        .unwrap();
    assert!(matches!(
        r.lock_range(MIB - page(), 2 * page()),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        r.lock_range(1, page()),
        Err(Error::Misaligned { .. })
    ));
    #[cfg(feature = "fault-locked")]
    assert!(matches!(
        FaultLockedRegion::new(LockedRegion::builder(MIB), 0),
        Err(Error::ZeroBatch)
    ));
}

#[test]
fn huge_pages_not_reserved() {
    // 1 GiB pages are not reserved here (and reserving one would take a
    // GiB of this machine); the error names the pool file to write.
    if accounting::huge_pages_free(1 << 30) > 0 {
        eprintln!(
            "1 GiB huge pages are reserved on this host: the not-reserved case cannot be shown"
        );
        return;
    }
    let e = LockedRegion::builder(1 << 30)
        .pages(Pages::Huge(HugePageSize::Size1G))
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, Error::HugePagesNotReserved(u) if u.needed == 1),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"),
        "{e}"
    );
}

/// `Pages::Huge` over a file that is not on hugetlbfs is refused by
/// name: the kernel's answer was a bare EINVAL from mmap.
#[test]
fn huge_pages_over_a_regular_file_are_refused() {
    let memfd = rustix::fs::memfd_create("plain", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&memfd, 2 * MIB as u64).unwrap();
    // SAFETY: the memfd is this test's own; nothing else writes it.
    let e = unsafe {
        LockedRegion::builder(2 * MIB)
            .pages(Pages::Huge(HugePageSize::Size2M))
            .file(std::os::fd::AsFd::as_fd(&memfd), 0, true)
    }
    .build()
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadFlags {
                op: "RegionBuilder::build",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("needs a file on hugetlbfs"), "{e}");
}

#[test]
fn hugetlb_2m_region_when_root() {
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let nr = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let before: usize = std::fs::read_to_string(nr).map_or(0, |s| s.trim().parse().unwrap_or(0));
    if let Some(run) = child::parent("hugetlb_2m_region_when_root", LIMIT) {
        // A child killed at the limit never ran its restore: the pool
        // goes back here too.
        let after: usize = std::fs::read_to_string(nr).map_or(0, |s| s.trim().parse().unwrap_or(0));
        if after != before {
            let _ = std::fs::write(nr, before.to_string());
        }
        return run.expect_success();
    }
    if std::fs::write(nr, (before + 4).to_string()).is_err() {
        eprintln!(
            "cannot reserve 2 MiB huge pages here (needs root): hugetlb region not exercised"
        );
        return;
    }
    // The pool goes back to its size even if an assertion fails.
    struct Restore<'a>(&'a str, usize);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            std::fs::write(self.0, self.1.to_string()).unwrap();
        }
    }
    let restore = Restore(nr, before);
    let result = (|| {
        // Exactly as many pages as are free builds; one more is refused
        // (by the mmap's reservation), naming the pool.
        let avail = HugePageSize::Size2M.available_pages();
        let huge = |pages: usize| {
            LockedRegion::builder(pages * 2 * MIB)
                .pages(Pages::Huge(HugePageSize::Size2M))
                .policy(LockPolicy::Unlocked)
                .build()
        };
        if avail > 0 {
            drop(huge(avail)?);
        }
        let e = huge(avail + 1).unwrap_err();
        assert!(
            matches!(&e, Error::HugePagesNotReserved(u) if u.needed == avail + 1 && u.free == avail),
            "{e:?}"
        );
        // A hugetlbfs memfd made for the region and never sized: the
        // writable mapping extends it (`hugetlbfs_file_mmap`), which
        // `Mapping::file`'s check of a file's end must allow.
        let memfd = rustix::fs::memfd_create(
            "hugetlb-file",
            rustix::fs::MemfdFlags::CLOEXEC
                | rustix::fs::MemfdFlags::HUGETLB
                | rustix::fs::MemfdFlags::HUGE_2MB,
        )
        .unwrap();
        // SAFETY: the memfd is this test's own; nothing else writes it.
        let mut f = unsafe {
            LockedRegion::builder(2 * MIB)
                .pages(Pages::Huge(HugePageSize::Size2M))
                .file(std::os::fd::AsFd::as_fd(&memfd), 0, true)
        }
        .build()?;
        f.as_mut_slice().unwrap()[MIB] = 3;
        assert_eq!(rustix::fs::fstat(&memfd).unwrap().st_size, 2 * MIB as i64);
        drop(f);
        // The file holds its huge page: mapped again with the pool's
        // every other page taken, it needs no new one (the up-front check
        // of the pool refused it).
        let rest = HugePageSize::Size2M.available_pages();
        let taken = (rest > 0).then(|| huge(rest)).transpose()?;
        assert_eq!(HugePageSize::Size2M.available_pages(), 0);
        // SAFETY: as above.
        let again = unsafe {
            LockedRegion::builder(2 * MIB)
                .pages(Pages::Huge(HugePageSize::Size2M))
                .file(std::os::fd::AsFd::as_fd(&memfd), 0, true)
        }
        .build()?;
        assert_eq!(again.as_slice()[MIB], 3, "the file's page, mapped again");
        // The file holds its huge page until it is closed.
        drop((again, taken, memfd));
        let mut r = LockedRegion::builder(4 * MIB)
            .pages(Pages::Huge(HugePageSize::Size2M))
            .build()?;
        r.as_mut_slice().unwrap()[3 * MIB] = 1;
        assert_eq!(r.page_size(), 2 * MIB);
        // Lock-on-fault over huge pages: the handler opens and locks a
        // whole huge page per fault (the old code mprotect-ed one base
        // page inside it: EINVAL, and every read reported it).
        #[cfg(feature = "fault-locked")]
        {
            let f = FaultLockedRegion::new(
                LockedRegion::builder(4 * MIB).pages(Pages::Huge(HugePageSize::Size2M)),
                1,
            )?;
            f.read(3 * MIB)?;
            f.read(2 * MIB + 5)?;
            // (smaps counts no hugetlb page as Locked: hugetlb pages are
            // unevictable anyway; residency shows the one huge page faulted.)
            assert_eq!(
                (f.faults(), f.region().resident_pages()?),
                (1, 2 * MIB / page())
            );
        }
        r.resident_pages()
    })();
    drop(restore);
    assert_eq!(result.unwrap(), 4 * MIB / page());
}

/// Whether `[addr, addr + len)` is exactly one mapping of this process.
/// Other tests map and unmap at the same time, and the kernel may hand a
/// freed address to one of them: an odd length tells the region's own
/// mapping from theirs.
fn mapped_exactly(addr: usize, len: usize) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| {
            let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
            usize::from_str_radix(a, 16) == Ok(addr)
                && usize::from_str_radix(b, 16) == Ok(addr + len)
        })
}

#[test]
fn drop_and_panic_leave_no_mapping() {
    let len = MIB + 3 * page();
    let r = LockedRegion::builder(len).build().unwrap();
    let addr = r.as_ptr() as usize;
    assert!(mapped_exactly(addr, len));
    drop(r);
    assert!(!mapped_exactly(addr, len));
    let mut addr = 0;
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let r = LockedRegion::builder(len).build().unwrap();
        addr = r.as_ptr() as usize;
        panic!("while the region is alive");
    }));
    assert!(res.is_err());
    assert!(!mapped_exactly(addr, len), "a panic leaked the mapping");
}

#[cfg(feature = "fault-locked")]
/// The memory is written and read through slices as through `read`: a
/// write to an untouched page faults it in, locked with its batch.
#[test]
fn fault_region_is_written_through_its_slice() {
    if let Some(run) = child::parent("fault_region_is_written_through_its_slice", LIMIT) {
        return run.expect_success();
    }
    let p = page();
    let mut r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
    r.as_mut_slice().expect("writable")[5 * p] = 7;
    assert_eq!(r.faults(), 1);
    assert_eq!(r.region().locked_bytes().unwrap(), 4 * p as u64);
    assert_eq!(r.as_slice()[5 * p], 7);
    assert_eq!(r.as_slice()[6 * p + 1], 0, "inside the batch");
    assert_eq!(r.faults(), 1);
    assert!(r.take_error().is_none());
}

#[cfg(feature = "fault-locked")]
#[test]
fn fault_region_locks_a_batch_per_fault() {
    if let Some(run) = child::parent("fault_region_locks_a_batch_per_fault", LIMIT) {
        return run.expect_success();
    }
    let p = page();
    let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 8).unwrap();
    assert_eq!(r.region().locked_bytes().unwrap(), 0);
    assert_eq!(r.read(0).unwrap(), 0);
    assert_eq!(r.faults(), 1);
    assert_eq!(r.region().locked_bytes().unwrap(), 8 * p as u64);
    r.read(7 * p + 3).unwrap(); // inside the batch: no fault
    assert_eq!(r.faults(), 1);
    r.read(8 * p).unwrap();
    assert_eq!(
        (r.faults(), r.region().locked_bytes().unwrap()),
        (2, 16 * p as u64)
    );
    // The batch is clipped to the region's end: nothing past it is opened
    // or locked — not the guard page, nor the mapping beyond it (the
    // kernel places mappings downwards, so there usually is one; else
    // one is put there).
    let end = r.region().as_ptr() as usize + MIB;
    // SAFETY: MAP_FIXED_NOREPLACE maps only where nothing is mapped.
    let ours = unsafe {
        libc::mmap(
            (end + p) as *mut _,
            8 * p,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    // The mappings that overlap the guard page and the 8 pages past it,
    // with their permissions.
    let beyond = || -> Vec<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter(|l| {
                let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
                let (a, b) = (
                    usize::from_str_radix(a, 16).unwrap(),
                    usize::from_str_radix(b, 16).unwrap(),
                );
                a < end + 9 * p && b > end
            })
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let before = beyond();
    // Three pages from the end: the batch of 8 takes those three.
    r.read(MIB - 3 * p).unwrap();
    assert_eq!(r.faults(), 3);
    assert_eq!(r.region().locked_bytes().unwrap(), 19 * p as u64);
    assert_eq!(
        beyond(),
        before,
        "a mapping past the region's guard was changed"
    );
    // Alone in this child, the process's VmLck is the region's.
    assert_eq!(accounting::process_locked_bytes().unwrap(), 19 * p as u64);
    r.read(MIB - 1).unwrap();
    assert_eq!(r.faults(), 3, "the last page came with the batch");
    if ours != libc::MAP_FAILED {
        // SAFETY: mapped above, ours.
        unsafe { libc::munmap(ours, 8 * p) };
    }
}

/// A region costs its length and its guards in address space, no more:
/// a page each side for base pages, a page and 2 MiB of alignment slack
/// for THP (`VmSize`, in a child where nothing else maps).
#[test]
fn a_region_reserves_its_length_and_guards() {
    assert_child_ok("address-space");
}

/// Runs `scenario` in a child copy of this test binary, killed at
/// [`LIMIT`].
fn child(scenario: &str) -> child::Run {
    child::run(
        "child_scenarios",
        LIMIT,
        &[("MMBATCH_MLOCK_CHILD", scenario)],
    )
}

fn assert_child_ok(scenario: &str) {
    let run = child(scenario);
    run.expect_success();
    for line in run.output.lines().filter(|l| l.starts_with("child:")) {
        eprintln!("{line}");
    }
}

#[test]
fn rlimit_memlock_is_named_with_the_fix() {
    assert_child_ok("rlimit");
}

#[test]
fn eperm_without_cap_ipc_lock() {
    assert_child_ok("eperm");
}

/// The `VmFlags` of the mapping holding `addr`, from /proc/self/smaps.
fn vm_flags_at(addr: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((a, b)) = line.split_once(' ').and_then(|(r, _)| r.split_once('-')) {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = (a..b).contains(&addr);
                continue;
            }
        }
        if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
            return flags.split_whitespace().map(str::to_owned).collect();
        }
    }
    panic!("no mapping holds {addr:#x}")
}

/// `dont_dump` leaves the region out of core dumps (smaps' `dd`), and a
/// region without it is dumped.
#[test]
fn a_region_can_be_left_out_of_core_dumps() {
    let secret = LockedRegion::builder(4 * page())
        .dont_dump()
        .build()
        .unwrap();
    assert!(vm_flags_at(secret.as_ptr() as usize).contains(&"dd".to_owned()));
    let plain = LockedRegion::builder(4 * page()).build().unwrap();
    assert!(!vm_flags_at(plain.as_ptr() as usize).contains(&"dd".to_owned()));
}

/// Root of a user namespace of its own (a rootless container's) has
/// CAP_IPC_LOCK in it, but the kernel asks the initial namespace, so
/// RLIMIT_MEMLOCK applies: its refusal is named as the limit. It was
/// taken for memory running out ("OutOfMemory { op: \"mlock\", .. }",
/// whose fix is the wrong one). The child enters the namespace between
/// fork and exec (a process must be single-threaded to).
#[test]
fn the_limit_is_named_for_root_of_a_user_namespace() {
    use std::os::unix::process::CommandExt;
    let map = format!("0 {} 1", nix::unistd::geteuid());
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_scenarios",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(child::CHILD_ENV, "1")
    .env("MMBATCH_MLOCK_CHILD", "userns");
    // Between fork and exec: system calls only, on a path and a buffer
    // made before the fork; nothing allocates.
    let enter = move || {
        // SAFETY: takes a flag; touches no memory of ours.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(c"/proc/self/uid_map".as_ptr(), libc::O_WRONLY) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `map` is valid for its length.
        let n = unsafe { libc::write(fd, map.as_ptr().cast(), map.len()) };
        // SAFETY: the descriptor just opened, closed once.
        unsafe { libc::close(fd) };
        if n != map.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure is async-signal-safe (above).
    unsafe { cmd.pre_exec(enter) };
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("no user namespace could be made here ({e}): not exercised");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("running 1 test"),
        "{}:\n{text}",
        out.status
    );
}

/// A hugetlb region's pages may come from overcommit
/// (`nr_overcommit_hugepages`) with no free page in the pool, as the
/// mapping's own reservation decides: the build refused it up front from
/// the free count ("HugePagesNotReserved(... free: 0 ...)"). Root only,
/// on an empty pool: sets the overcommit, and puts it back.
#[test]
fn a_hugetlb_region_maps_overcommitted_pages() {
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let read = |f: &str| -> usize {
        std::fs::read_to_string(format!("{dir}/{f}")).map_or(0, |s| s.trim().parse().unwrap_or(0))
    };
    let over = format!("{dir}/nr_overcommit_hugepages");
    let found = read("nr_overcommit_hugepages");
    let nr = format!("{dir}/nr_hugepages");
    // A page the kernel can allocate now (memory not too fragmented),
    // given straight back.
    let allocatable = read("nr_hugepages") == 0
        && std::fs::write(&nr, "1").is_ok()
        && read("nr_hugepages") == 1
        && std::fs::write(&nr, "0").is_ok();
    if !allocatable || std::fs::write(&over, "1").is_err() {
        eprintln!("the pool holds pages, no page can be had, or not root: not exercised");
        return;
    }
    let built = LockedRegion::builder(2 * MIB)
        .pages(Pages::Huge(HugePageSize::Size2M))
        .build()
        .map(|r| r.resident_pages());
    std::fs::write(&over, found.to_string()).unwrap();
    assert_eq!(built.unwrap().unwrap(), 512);
    // The surplus page leaves with the region (once seen still counted
    // just after the drop in a CI run of the whole workspace: waited for,
    // the counts named if it stays).
    let counts = || {
        [
            "nr_hugepages",
            "surplus_hugepages",
            "free_hugepages",
            "resv_hugepages",
        ]
        .map(|f| format!("{f} {}", read(f)))
        .join(", ")
    };
    let start = std::time::Instant::now();
    while read("nr_hugepages") != 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "the surplus page stayed in the pool: {}",
            counts()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A hugetlb region needs no RLIMIT_MEMLOCK: the kernel never locks its
/// pages (`mlock_fixup` skips hugetlb mappings), and `mlock` refused it
/// under a limit of 0 for memory it would not have locked ("NotPermitted
/// { op: \"mlock\", .. }"). Root only: grows the pool by one page for
/// the child (which drops root), and puts it back.
#[test]
fn a_hugetlb_region_needs_no_memlock_limit() {
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let nr = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let before: usize = std::fs::read_to_string(nr).map_or(0, |s| s.trim().parse().unwrap_or(0));
    if std::fs::write(nr, (before + 1).to_string()).is_err() {
        eprintln!("cannot reserve a 2 MiB huge page here (needs root): not exercised");
        return;
    }
    let run = child("hugetlb-no-memlock");
    std::fs::write(nr, before.to_string()).unwrap();
    run.expect_success();
}

#[cfg(feature = "fault-locked")]
#[test]
fn fault_handler_failure_is_an_error_not_a_loop() {
    assert_child_ok("fault-rlimit");
}

#[cfg(feature = "fault-locked")]
#[test]
fn fault_handler_at_max_map_count() {
    assert_child_ok("fault-maps");
}

#[test]
fn mlockall_onfault_and_munlockall() {
    assert_child_ok("mlockall");
}

#[test]
fn mlockall_future_locks_later_mappings() {
    assert_child_ok("mlockall-future");
}

#[test]
fn mlockall_over_the_limit_names_what_it_asked_for() {
    assert_child_ok("mlockall-rlimit");
}

/// A size field of /proc/self/status (`VmSize:`, `VmLck:`), in bytes:
/// the tests' own reading of the kernel's figure.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// `CapEff` of /proc/self/status, the kernel's own word on the
/// capabilities in effect.
fn effective_caps() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap();
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[test]
fn accounting_reads_the_kernels_figures() {
    const CAP_IPC_LOCK: u32 = 14;
    // The capability counts in the initial user namespace only (a
    // rootless container's root has it in its own). A uid_map of every id
    // to itself is the initial namespace's (a namespace could copy it,
    // which no test host does).
    let initial = accounting::in_initial_user_namespace();
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    if uid_map.split_whitespace().eq(["0", "0", "4294967295"]) {
        assert!(initial, "uid_map {uid_map:?} but not the initial namespace");
    }
    assert_eq!(
        accounting::has_cap_ipc_lock(),
        initial && effective_caps() & (1 << CAP_IPC_LOCK) != 0,
        "CapEff {:x}",
        effective_caps()
    );
    if nix::unistd::geteuid().is_root() && initial {
        assert!(accounting::has_cap_ipc_lock(), "root has CAP_IPC_LOCK");
    }
    // The mapping count is /proc/self/maps' line count (other tests map
    // and unmap meanwhile: compared when the count held still around it).
    let lines = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .count()
    };
    let agreed = (0..100).any(|_| {
        let (m1, c, m2) = (lines(), accounting::map_count(), lines());
        m1 == c && c == m2
    });
    assert!(
        agreed,
        "map_count never agreed with /proc/self/maps in 100 reads"
    );
    // The address space: other tests map meanwhile, so it must agree
    // with the readings on both sides once.
    let agreed = (0..100).any(|_| {
        let (v1, mapped, v2) = (
            status_bytes("VmSize:"),
            accounting::process_mapped_bytes().unwrap(),
            status_bytes("VmSize:"),
        );
        v1 == mapped && mapped == v2
    });
    assert!(
        agreed,
        "process_mapped_bytes never agreed with VmSize in 100 reads"
    );
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(accounting::max_map_count(), max);
}

/// A region's locked bytes are counted only over mappings wholly inside
/// the range asked about.
#[test]
fn smaps_locked_counts_only_mappings_inside_the_range() {
    let p = page();
    let r = LockedRegion::builder(4 * p).build().unwrap();
    let (a, b) = (r.as_ptr() as usize, r.as_ptr() as usize + 4 * p);
    assert_eq!(accounting::smaps_locked(a, b).unwrap(), 4 * p as u64);
    assert_eq!(accounting::smaps_locked(a, b - p).unwrap(), 0, "end inside");
    assert_eq!(
        accounting::smaps_locked(a + p, b).unwrap(),
        0,
        "start inside"
    );
    assert_eq!(
        accounting::smaps_locked(a - p, b + p).unwrap(),
        4 * p as u64,
        "the guards lock nothing"
    );
}

/// Held by the tests that resize the 2 MiB pool, so that one's restore
/// never undoes the other's pages.
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The pool counts follow the pool: as root, one more 2 MiB page
/// reserved shows in both, and the pool is given back.

#[test]
fn huge_page_pool_counts_follow_the_pool() {
    let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let size = HugePageSize::Size2M.bytes();
    let nr = HugePageSize::Size2M.pool_file("nr_hugepages");
    let read = |f: &str| -> usize {
        std::fs::read_to_string(HugePageSize::Size2M.pool_file(f))
            .map_or(0, |s| s.trim().parse().unwrap())
    };
    assert_eq!(accounting::huge_pages_total(size), read("nr_hugepages"));
    assert_eq!(accounting::huge_pages_free(size), read("free_hugepages"));
    let before = read("nr_hugepages");
    if std::fs::write(&nr, (before + 1).to_string()).is_err() {
        eprintln!("cannot grow the 2 MiB pool here (needs root): counts checked as read only");
        return;
    }
    struct Restore(String, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            // Not unwrap: a failed write while unwinding would abort.
            let _ = std::fs::write(&self.0, self.1.to_string());
        }
    }
    let _restore = Restore(nr, before);
    if read("nr_hugepages") == before {
        eprintln!("the kernel found no memory for a 2 MiB page: counts checked as read only");
        return;
    }
    assert_eq!(accounting::huge_pages_total(size), before + 1);
    assert_eq!(accounting::huge_pages_free(size), read("free_hugepages"));
    assert!(accounting::huge_pages_free(size) >= 1);
    assert_eq!(accounting::huge_pages_total(12345), 0, "no such pool");
}

#[cfg(feature = "fault-locked")]
#[test]
fn stray_segfault_reaches_the_default_action() {
    let run = child("stray-segv");
    assert_eq!(run.signal(), Some(libc::SIGSEGV), "{run:?}");
}

#[cfg(feature = "fault-locked")]
/// A handler installed before the first region (a crash reporter, say)
/// is where faults outside every region go while regions live, and it is
/// the action again once the last region is dropped.
#[test]
fn stray_faults_reach_the_handler_installed_before() {
    let run = child("handler-before-ours");
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(42),
        "the earlier handler exits 42: {run:?}"
    );
}

#[cfg(feature = "fault-locked")]
/// A fault that is not a region's goes to the handler from before, and
/// whatever that handler does to errno, the interrupted code finds errno
/// as it left it.
#[test]
fn errno_survives_a_chained_handler() {
    assert_child_ok("errno-chain");
}

#[cfg(feature = "fault-locked")]
/// A SIGSEGV sent with kill or raise, not a fault, is treated as the
/// action before ours would: ignored if it was ignored (and our handler
/// keeps serving the regions), the default action (death) otherwise.
#[test]
fn a_sent_sigsegv_takes_the_action_from_before() {
    assert_child_ok("raise-ignored");
    let run = child("raise-default");
    assert_eq!(run.signal(), Some(libc::SIGSEGV), "{run:?}");
}

#[cfg(feature = "fault-locked")]
/// A handler from before that serves a stray fault and returns leaves
/// ours installed: the region's next fault is still ours.
#[test]
fn a_chained_handler_that_returns_leaves_ours_in_place() {
    assert_child_ok("chain-returns");
}

#[cfg(feature = "fault-locked")]
/// Another library installs its SIGSEGV handler over ours (chaining to
/// ours, as well-behaved handlers do), the last region is dropped, and a
/// new one made. The old code then saved that handler as "the previous
/// one" while ours was still reachable through it: the two called each
/// other forever on any stray fault.
#[test]
fn handler_installed_over_ours_does_not_loop() {
    let run = child("handler-over-ours");
    assert_eq!(run.signal(), Some(libc::SIGSEGV), "{run:?}");
    assert!(
        run.output.contains("child: region B served its faults"),
        "{run:?}"
    );
}

#[cfg(feature = "fault-locked")]
/// Another library installs its handler over ours, the last region is
/// dropped (ours stays installed beneath, reachable through it), and that
/// library then resets SIGSEGV to the default action. The old code still
/// counted ours reachable and installed nothing for the next region: its
/// first fault killed the process.
#[test]
fn handler_reset_to_default_over_ours_is_reinstalled() {
    assert_child_ok("handler-reset-over-ours");
}

#[cfg(feature = "fault-locked")]
/// The handler's failing `mlock` used to leave its errno in the
/// interrupted code's errno.
#[test]
fn fault_handler_preserves_errno() {
    assert_child_ok("errno");
}

#[cfg(feature = "fault-locked")]
static FOREIGN_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
#[cfg(feature = "fault-locked")]
static FOREIGN_OLD: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

#[cfg(feature = "fault-locked")]
/// Another library's SIGSEGV handler: counts itself and chains to the
/// action it replaced; a loop shows as a third call (exit code 3).
extern "C" fn foreign(sig: i32, info: *mut libc::siginfo_t, ctx: *mut std::ffi::c_void) {
    if FOREIGN_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 3 {
        // SAFETY: async-signal-safe exit.
        unsafe { libc::_exit(3) };
    }
    let old = FOREIGN_OLD.get().expect("set before installing");
    if old.sa_flags & libc::SA_SIGINFO != 0 && old.sa_sigaction > 1 {
        // SAFETY: an SA_SIGINFO handler has this signature.
        let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut std::ffi::c_void) =
            unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: restores the replaced action so the access re-faults.
        unsafe { libc::sigaction(sig, old, std::ptr::null_mut()) };
    }
}

#[cfg(feature = "fault-locked")]
fn install_foreign_handler() {
    // SAFETY: an all-zero sigaction is a valid empty value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = foreign as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: queries the current action.
    unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) };
    FOREIGN_OLD.set(old).unwrap();
    // SAFETY: a valid action; FOREIGN_OLD is set before it can run.
    unsafe { libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) };
}

#[cfg(feature = "fault-locked")]
/// Calls of [`opener`].
static OPENED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(feature = "fault-locked")]
/// Another library's handler that serves a fault by opening whatever page
/// faulted, counts itself, and clobbers errno as a failing call would.
extern "C" fn opener(_: i32, info: *mut libc::siginfo_t, _: *mut std::ffi::c_void) {
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let info = unsafe { &*info };
    // SAFETY: SIGSEGV's siginfo carries the faulting address.
    let addr = unsafe { info.si_addr() } as usize & !(page() - 1);
    // SAFETY: a page of this test's own mappings.
    unsafe { libc::mprotect(addr as *mut _, page(), libc::PROT_READ) };
    OPENED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: this thread's errno slot.
    unsafe { *errno_slot() = 77 };
}

#[cfg(feature = "fault-locked")]
/// Installs [`opener`] as SIGSEGV's action (before any region).
fn install_opener() {
    // SAFETY: an all-zero sigaction is a valid empty value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = opener as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO;
    // SAFETY: a valid action for SIGSEGV.
    unsafe { libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) };
}

#[cfg(feature = "fault-locked")]
/// A fresh PROT_NONE page of the test's own, outside every region.
fn prot_none_page() -> *mut libc::c_void {
    // SAFETY: a fresh anonymous mapping the kernel places.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page(),
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p
}

#[cfg(feature = "fault-locked")]
fn errno_slot() -> *mut i32 {
    // SAFETY: no preconditions; this thread's errno.
    unsafe { libc::__errno_location() }
}

/// Lowers RLIMIT_MEMLOCK to `bytes` and, as root, drops to `nobody` so
/// that the limit applies (root has CAP_IPC_LOCK).
fn limit_memlock(bytes: u64) {
    use nix::sys::resource::{Resource, setrlimit};
    let bytes = nix::libc::rlim_t::try_from(bytes).unwrap();
    setrlimit(Resource::RLIMIT_MEMLOCK, bytes, bytes).unwrap();
    if nix::unistd::geteuid().is_root() {
        nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).unwrap();
        nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).unwrap();
        println!("child: dropped root to uid 65534 so RLIMIT_MEMLOCK applies");
    }
    assert!(!accounting::has_cap_ipc_lock());
}

#[test]
#[ignore = "run in a child process by the tests above"]
fn child_scenarios() {
    let Ok(scenario) = std::env::var("MMBATCH_MLOCK_CHILD") else {
        panic!("run by the parent tests with MMBATCH_MLOCK_CHILD set");
    };
    let maps_before = accounting::map_count();
    match scenario.as_str() {
        "rlimit" => {
            limit_memlock(64 << 10);
            let e = LockedRegion::builder(MIB).build().unwrap_err();
            println!("child: {e}");
            assert!(
                matches!(e, Error::MemlockLimit { requested, soft: 65536, .. } if requested == MIB),
                "{e:?}"
            );
            // Soft and hard limits alike: only a privileged process helps.
            assert!(e.to_string().contains("limits.conf"), "{e}");
            // OnFault counts the limit as pages are touched... but mlock2
            // checks the whole range up front, as the kernel does.
            let e = LockedRegion::builder(MIB)
                .policy(LockPolicy::OnFault)
                .build()
                .unwrap_err();
            assert!(matches!(e, Error::MemlockLimit { .. }), "{e:?}");
            // Within the limit it works.
            let r = LockedRegion::builder(32 << 10).build().unwrap();
            assert_eq!(r.locked_bytes().unwrap(), 32 << 10);
        }
        "hugetlb-no-memlock" => {
            limit_memlock(0);
            let huge = || LockedRegion::builder(2 * MIB).pages(Pages::Huge(HugePageSize::Size2M));
            let r = huge().build().unwrap();
            assert_eq!(r.resident_pages().unwrap(), 512, "populated");
            drop(r);
            let r = huge().map_locked(true).build().unwrap();
            assert_eq!(r.resident_pages().unwrap(), 512, "populated at map time");
            drop(r);
            let r = huge().policy(LockPolicy::OnFault).build().unwrap();
            assert_eq!(r.resident_pages().unwrap(), 0, "nothing faulted in");
            r.lock_range(0, 2 * MIB).unwrap();
            drop(r);
            let r = huge().policy(LockPolicy::Unlocked).build().unwrap();
            r.lock_range(0, 2 * MIB).unwrap();
            assert_eq!(r.resident_pages().unwrap(), 512, "lock_range faults in");
        }
        "userns" => {
            let caps = std::fs::read_to_string("/proc/self/status").unwrap();
            println!(
                "child: {}",
                caps.lines().find(|l| l.starts_with("CapEff")).unwrap()
            );
            assert!(!accounting::in_initial_user_namespace());
            assert!(!accounting::has_cap_ipc_lock(), "only in its own namespace");
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_MEMLOCK,
                64 << 10,
                64 << 10,
            )
            .unwrap();
            let e = LockedRegion::builder(MIB).build().unwrap_err();
            println!("child: {e}");
            assert!(matches!(e, Error::MemlockLimit { .. }), "{e:?}");
        }
        "eperm" => {
            limit_memlock(0);
            let e = LockedRegion::builder(MIB).build().unwrap_err();
            println!("child: {e}");
            assert!(matches!(e, Error::NotPermitted { .. }), "{e:?}");
            assert!(e.to_string().contains("CAP_IPC_LOCK"));
        }
        #[cfg(feature = "fault-locked")]
        "fault-rlimit" => {
            limit_memlock(64 << 10);
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 1).unwrap();
            let p = page();
            let mut first_error = None;
            for i in 0..64 {
                match r.read(i * p) {
                    Ok(_) => {}
                    Err(e) => {
                        first_error.get_or_insert((i, e.to_string()));
                    }
                }
            }
            let (at, e) = first_error.expect("the memlock limit stops locking");
            println!("child: page {at}: {e}");
            assert!(at <= 16, "64 KiB is 16 pages, error at {at}");
            assert!(e.contains("RLIMIT_MEMLOCK"), "{e}");
            // An mlock refusal leaves the pages after it to fault alone.
            assert!(r.locks_on_touch());
        }
        #[cfg(feature = "fault-locked")]
        "fault-maps" => {
            let max = accounting::max_map_count();
            let p = page();
            // Fill the mapping table to near its limit with one-page
            // mappings that cannot merge (alternating protections).
            let mut held = Vec::new();
            let start = accounting::map_count();
            while start + held.len() + 40 < max {
                let prot = if held.len() % 2 == 0 {
                    libc::PROT_READ
                } else {
                    libc::PROT_NONE
                };
                // SAFETY: a fresh anonymous mapping chosen by the kernel.
                let m = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        p,
                        prot,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(m, libc::MAP_FAILED);
                held.push(m);
            }
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 1).unwrap();
            // Made now, while there is room: locked page by page below.
            let locked = LockedRegion::builder(MIB)
                .policy(LockPolicy::Unlocked)
                .build()
                .unwrap();
            // Touched through the slice: the handler's error is kept, not
            // taken, until after the mappings below are gone.
            for i in (0..MIB / p).step_by(2) {
                std::hint::black_box(r.as_slice()[i * p]);
            }
            // mlock of single pages splits mappings too: at the limit the
            // error names it (map_count must not need the heap then).
            let e = (0..MIB / p)
                .step_by(2)
                .find_map(|i| locked.lock_range(i * p, p).err())
                .expect("the mapping limit stops mlock");
            println!("child: {e}");
            assert!(matches!(e, Error::MapCountLimit { .. }), "{e:?}");
            drop(locked);
            for m in held {
                // SAFETY: each was mapped above with length p.
                unsafe { libc::munmap(m, p) };
            }
            // Far from the limit now, the handler's failure is still told
            // as it was: by the mapping count when it failed.
            let e = r.take_error().expect("the mapping limit stops mprotect");
            println!("child: {e}");
            assert!(
                matches!(&e, Error::FaultHandler { cause }
                    if matches!(**cause, Error::MapCountLimit { op: "mprotect", .. })),
                "{e:?}"
            );
            assert!(e.to_string().contains("sysctl -w vm.max_map_count="));
            // Each error is told once. Refused an mprotect, the handler
            // opened the whole region (rather than fault forever), and
            // says so: a page not yet touched reads with no fault, and
            // so no lock.
            assert!(r.take_error().is_none());
            assert!(!r.locks_on_touch());
            let (faults, locked) = (r.faults(), r.region().locked_bytes().unwrap());
            assert_eq!(r.read(p).unwrap(), 0);
            assert_eq!(
                (r.faults(), r.region().locked_bytes().unwrap()),
                (faults, locked)
            );
            drop(r);
        }
        "mlockall" => {
            mlockall(LockAll::CURRENT | LockAll::ON_FAULT).unwrap();
            let locked = accounting::process_locked_bytes().unwrap();
            println!("child: VmLck {locked} after mlockall(CURRENT | ONFAULT)");
            assert!(locked > 0);
            munlockall().unwrap();
            assert_eq!(accounting::process_locked_bytes().unwrap(), 0);
        }
        "address-space" => {
            let vm_size = || status_bytes("VmSize:") as usize;
            let p = page();
            for (pages, slack) in [(Pages::Base, p), (Pages::Transparent, 2 * MIB)] {
                let before = vm_size();
                let r = LockedRegion::builder(4 * MIB)
                    .pages(pages)
                    .policy(LockPolicy::Unlocked)
                    .build()
                    .unwrap();
                let grew = vm_size() - before;
                println!("child: {pages:?}: VmSize grew by {grew} for 4 MiB");
                // A page and the alignment (a page, or THP's 2 MiB) on
                // top: the guards and the slack around the aligned region.
                assert_eq!(grew, 4 * MIB + p + slack, "{pages:?}");
                drop(r);
            }
        }
        "mlockall-future" => {
            mlockall(LockAll::FUTURE).unwrap();
            let before = accounting::process_locked_bytes().unwrap();
            // A mapping made after the call is locked as it is made.
            let r = LockedRegion::builder(MIB)
                .policy(LockPolicy::Unlocked)
                .build()
                .unwrap();
            let after = accounting::process_locked_bytes().unwrap();
            println!(
                "child: VmLck {before} -> {after} over a 1 MiB mapping after mlockall(FUTURE)"
            );
            assert!(after >= before + MIB as u64, "{before} -> {after}");
            drop(r);
            munlockall().unwrap();
            assert_eq!(accounting::process_locked_bytes().unwrap(), 0);
            // Past RLIMIT_MEMLOCK under mlockall(FUTURE), the region's
            // reservation is refused (EAGAIN): the limit, named. It was
            // "mmap failed: Resource temporarily unavailable".
            mlockall(LockAll::FUTURE).unwrap();
            limit_memlock(256 << 10);
            let e = LockedRegion::builder(MIB)
                .policy(LockPolicy::Unlocked)
                .build()
                .unwrap_err();
            println!("child: {e}");
            assert!(matches!(e, Error::MemlockLimit { .. }), "{e:?}");
        }
        "mlockall-rlimit" => {
            limit_memlock(64 << 10);
            let e = mlockall(LockAll::CURRENT).unwrap_err();
            println!("child: {e}");
            // What it asked to lock is the whole address space, VmSize.
            let Error::MemlockLimit {
                requested, soft, ..
            } = e
            else {
                panic!("{e:?}");
            };
            assert_eq!(soft, 64 << 10);
            let size = status_bytes("VmSize:");
            assert!(
                requested as u64 >= size / 2 && requested as u64 <= size * 2,
                "asked {requested}, VmSize {size}"
            );
        }
        #[cfg(feature = "fault-locked")]
        "handler-before-ours" => {
            /// Exits 42 for the stray access at address 8, 43 for any
            /// other fault (one of a region's, which ours should serve).
            extern "C" fn earlier(_: i32, info: *mut libc::siginfo_t, _: *mut std::ffi::c_void) {
                // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO
                // handlers.
                let info = unsafe { &*info };
                // SAFETY: SIGSEGV's siginfo carries the faulting address.
                let stray = unsafe { info.si_addr() } as usize == 8;
                // SAFETY: async-signal-safe exit.
                unsafe { libc::_exit(if stray { 42 } else { 43 }) };
            }
            let action = |f: usize| {
                // SAFETY: an all-zero sigaction is a valid empty value.
                let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
                sa.sa_sigaction = f;
                sa.sa_flags = libc::SA_SIGINFO;
                sa
            };
            let sa = action(earlier as *const () as usize);
            // SAFETY: a valid action for SIGSEGV.
            unsafe { libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) };
            let a = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            a.read(0).unwrap();
            drop(a);
            let mut now = std::mem::MaybeUninit::<libc::sigaction>::uninit();
            // SAFETY: queries the current action.
            unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), now.as_mut_ptr()) };
            // SAFETY: filled by sigaction.
            let now = unsafe { now.assume_init() };
            assert_eq!(
                now.sa_sigaction, sa.sa_sigaction,
                "the last region's drop restores the handler from before"
            );
            let b = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            b.read(MIB - 1).unwrap();
            assert_eq!(b.faults(), 1, "region B's fault was ours");
            println!("child: region B served its fault; now a stray one");
            // SAFETY: deliberately invalid: the earlier handler exits 42.
            let _ = unsafe { std::ptr::read_volatile(8 as *const u8) };
            unreachable!("the stray access must reach the earlier handler");
        }
        #[cfg(feature = "fault-locked")]
        "errno-chain" => {
            install_opener();
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            r.read(0).unwrap();
            let other = prot_none_page();
            // SAFETY: this thread's errno, a valid int.
            unsafe { *errno_slot() = 1234 };
            // SAFETY: faults once; the earlier handler makes it readable.
            let v = unsafe { std::ptr::read_volatile(other.cast::<u8>()) };
            // SAFETY: as above.
            let errno = unsafe { *errno_slot() };
            println!("child: read {v} through the earlier handler, errno {errno}");
            assert_eq!(
                errno, 1234,
                "errno after a fault the earlier handler served"
            );
            // SAFETY: mapped by prot_none_page.
            unsafe { libc::munmap(other, page()) };
        }
        #[cfg(feature = "fault-locked")]
        "chain-returns" => {
            install_opener();
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            r.read(0).unwrap();
            let other = prot_none_page();
            // SAFETY: faults once; the earlier handler opens it.
            unsafe { std::ptr::read_volatile(other.cast::<u8>()) };
            let opened = || OPENED.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(opened(), 1);
            r.read(8 * page()).unwrap();
            println!(
                "child: region faults {}, earlier handler calls {}",
                r.faults(),
                opened()
            );
            assert_eq!(r.faults(), 2, "the region's second fault was ours");
            assert_eq!(opened(), 1);
            // SAFETY: mapped by prot_none_page.
            unsafe { libc::munmap(other, page()) };
        }
        #[cfg(feature = "fault-locked")]
        "raise-ignored" | "raise-default" => {
            // The action before ours (in place of std's stack-overflow
            // handler, which takes a sent SIGSEGV for a fault).
            let before = if scenario == "raise-ignored" {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            // SAFETY: setting SIGSEGV's disposition involves no memory.
            unsafe { libc::signal(libc::SIGSEGV, before) };
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            r.read(0).unwrap();
            // Sent with kill (SI_USER); where ignored, with raise too
            // (SI_TKILL).
            let me = std::process::id() as libc::pid_t;
            // SAFETY: sending a signal involves no memory.
            unsafe { libc::kill(me, libc::SIGSEGV) };
            if scenario == "raise-ignored" {
                // SAFETY: as above.
                unsafe { libc::raise(libc::SIGSEGV) };
            }
            println!("child: a sent SIGSEGV was ignored");
            assert_eq!(
                scenario, "raise-ignored",
                "SIGSEGV's default action is death"
            );
            r.read(8 * page()).unwrap();
            assert_eq!(r.faults(), 2, "ours still serves the region's faults");
        }
        #[cfg(feature = "fault-locked")]
        "stray-segv" => {
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            r.read(0).unwrap();
            // A fault outside every region goes to the previous action and
            // the process dies of SIGSEGV, rather than looping.
            // SAFETY: deliberately invalid: this must kill the process.
            let _ = unsafe { std::ptr::read_volatile(8 as *const u8) };
            unreachable!("the stray access must kill the process");
        }
        #[cfg(feature = "fault-locked")]
        "handler-over-ours" => {
            let a = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            a.read(0).unwrap();
            install_foreign_handler();
            drop(a);
            let b = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            // Ours is never installed over a handler that chains to it.
            let mut now = std::mem::MaybeUninit::<libc::sigaction>::uninit();
            // SAFETY: queries the current action.
            unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), now.as_mut_ptr()) };
            // SAFETY: filled by sigaction.
            let now = unsafe { now.assume_init() }.sa_sigaction;
            assert_eq!(
                now, foreign as *const () as usize,
                "ours went over the foreign one"
            );
            b.read(5 * page()).unwrap();
            assert_eq!(b.faults(), 1);
            println!("child: region B served its faults");
            // A stray fault: the foreign handler, then ours, then the
            // default action. Not a loop.
            // SAFETY: deliberately invalid: this must kill the process.
            let _ = unsafe { std::ptr::read_volatile(8 as *const u8) };
            unreachable!("the stray access must kill the process");
        }
        #[cfg(feature = "fault-locked")]
        "handler-reset-over-ours" => {
            let a = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            a.read(0).unwrap();
            install_foreign_handler();
            drop(a);
            // That library goes away and leaves the default action.
            // SAFETY: an all-zero sigaction is SIG_DFL with no flags.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a valid action for SIGSEGV.
            unsafe { libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut()) };
            let b = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
            b.read(5 * page()).unwrap();
            assert_eq!(b.faults(), 1);
            println!("child: region B served its faults");
            drop(b);
            // Ours was restored away with the last region: the default
            // action is back.
            let mut now = std::mem::MaybeUninit::<libc::sigaction>::uninit();
            // SAFETY: queries the current action.
            unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), now.as_mut_ptr()) };
            // SAFETY: filled by sigaction.
            assert_eq!(unsafe { now.assume_init() }.sa_sigaction, libc::SIG_DFL);
        }
        #[cfg(feature = "fault-locked")]
        "errno" => {
            limit_memlock(0);
            let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 1).unwrap();
            for i in 0..4 {
                // SAFETY: this thread's errno, a valid int.
                unsafe { *errno_slot() = 1234 };
                // SAFETY: inside the region; the handler makes it readable.
                let _ = unsafe {
                    std::ptr::read_volatile(r.region().as_ptr().wrapping_add(i * page()))
                };
                // SAFETY: as above.
                let errno = unsafe { *errno_slot() };
                assert_eq!(errno, 1234, "errno after a fault whose mlock failed");
            }
            assert!(r.read(0).is_err(), "the mlock failure is still reported");
        }
        other => panic!("unknown scenario {other}"),
    }
    assert_eq!(accounting::map_count(), maps_before, "a mapping leaked");
}

/// Ranges whose end overflows `usize` are refused, and the refusal
/// prints: its message added `offset + len` and panicked (found by a
/// review of the fuzz targets, which dropped such errors unprinted).
#[test]
fn out_of_range_errors_print_at_the_ends_of_usize() {
    let r = LockedRegion::builder(accounting::page_size())
        .policy(LockPolicy::Unlocked)
        .build()
        .unwrap();
    let page = accounting::page_size();
    let e = r.lock_range(usize::MAX & !(page - 1), page).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("outside the region"), "{msg}");
    // A length no multiple of the page rounds up to: it suggested
    // "round it up to 18446744073709551615", itself no multiple.
    let e = r.lock_range(page, usize::MAX).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("round it down to {}", usize::MAX & !(page - 1))),
        "{msg}"
    );
}

/// A region stays locked, all of it, while a forked child shares its
/// pages copy-on-write (as children other tests of this binary fork do):
/// smaps' `Locked` is proportional (halved by a second mapper), what the
/// region locked is not. Before the fix this read 2 MiB of 4 MiB.
#[test]
fn locked_bytes_while_a_forked_child_shares_the_pages() {
    use nix::sys::{signal, wait};
    use nix::unistd::{ForkResult, fork};
    for pages in [Pages::Base, Pages::Transparent] {
        let r = LockedRegion::builder(4 * MIB).pages(pages).build().unwrap();
        let parent = std::process::id();
        // SAFETY: the child calls only async-signal-safe functions
        // (prctl, getppid, pause, _exit) until it is killed.
        let child = match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                // The child dies with the test binary, even one killed
                // before its kill below.
                // SAFETY: prctl is async-signal-safe.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
                // SAFETY: getppid is async-signal-safe.
                if unsafe { libc::getppid() } as u32 != parent {
                    // SAFETY: _exit is async-signal-safe.
                    unsafe { libc::_exit(0) };
                }
                loop {
                    // SAFETY: pause is async-signal-safe.
                    unsafe { libc::pause() };
                }
            }
            ForkResult::Parent { child } => child,
        };
        let locked = r.locked_bytes();
        signal::kill(child, signal::Signal::SIGKILL).unwrap();
        wait::waitpid(child, None).unwrap();
        assert_eq!(locked.unwrap(), 4 * MIB as u64, "{pages:?}");
    }
}

/// A shared, writable mapping of a memfd sealed against writes (either
/// seal): the kernel's EPERM is the seal's (this process may lock: root,
/// or a nonzero limit), not a refusal to lock. Named as such, with and
/// without `MAP_LOCKED`.
#[test]
fn a_write_sealed_file_is_named_not_read_as_a_lock_refusal() {
    use rustix::fs::{MemfdFlags, SealFlags};
    let (soft, _) = mmbatch_mlock::accounting::memlock_limits();
    if soft == 0 && !mmbatch_mlock::accounting::has_cap_ipc_lock() {
        eprintln!("this process may not lock: the seal's EPERM cannot be told apart here");
        return;
    }
    for seal in [SealFlags::WRITE, SealFlags::FUTURE_WRITE] {
        let memfd =
            rustix::fs::memfd_create("sealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .unwrap();
        rustix::fs::ftruncate(&memfd, 2 * MIB as u64).unwrap();
        rustix::fs::fcntl_add_seals(&memfd, seal).unwrap();
        for map_locked in [false, true] {
            // SAFETY: the memfd is this test's own; nothing else writes it.
            let e = unsafe {
                LockedRegion::builder(2 * MIB).map_locked(map_locked).file(
                    std::os::fd::AsFd::as_fd(&memfd),
                    0,
                    true,
                )
            }
            .build()
            .unwrap_err();
            assert!(
                matches!(&e, Error::FileSealed { source, .. }
                    if source.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error())),
                "{seal:?}, map_locked {map_locked}: {e:?}"
            );
            assert!(std::error::Error::source(&e).is_some());
            let msg = e.to_string();
            assert!(msg.contains("sealed") && msg.contains("read_only"), "{msg}");
        }
        // A private mapping of the sealed file maps and locks; a read-only
        // shared one too, but under F_SEAL_WRITE before Linux 6.7, which
        // refuses it as the seal's.
        for (read_only, shared) in [(false, false), (true, true)] {
            // SAFETY: as above.
            let b = unsafe {
                LockedRegion::builder(2 * MIB).file(std::os::fd::AsFd::as_fd(&memfd), 0, shared)
            };
            let b = if read_only { b.read_only() } else { b };
            match b.build() {
                Ok(_) => {}
                Err(Error::FileSealed { .. }) if shared && seal == SealFlags::WRITE => {
                    eprintln!("a kernel before 6.7: F_SEAL_WRITE refuses a read-only shared map");
                }
                Err(e) => panic!("{seal:?}, read_only {read_only} shared {shared}: {e:?}"),
            }
        }
    }
}
