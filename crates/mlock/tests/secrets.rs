//! The options for secrets: `wipe_on_fork` (a forked child sees zeros)
//! and `zero_on_drop` (the memory is zeroed before it goes back), checked
//! through a real child and a file's own pages.

use std::os::fd::AsFd;

use mmbatch_mlock::{Error, HugePageSize, LockPolicy, LockedRegion, Pages, accounting};
use nix::{
    sys::wait::{WaitStatus, waitpid},
    unistd::{ForkResult, fork},
};

const SECRET: u8 = 0xA5;

/// What a child forked now finds in `region`'s bytes: 0 if all are zero,
/// 1 if all are still `SECRET`, 2 for anything else.
fn what_a_child_sees(region: &LockedRegion) -> i32 {
    let (start, len) = (region.as_ptr().cast_const(), region.len());
    // SAFETY: the child reads memory and calls `_exit`, both
    // async-signal-safe, and nothing else.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            // SAFETY: the region is mapped in the child (wiped or copied)
            // at the same address, `len` bytes long, and nothing writes it.
            let bytes = unsafe { std::slice::from_raw_parts(start, len) };
            let code = if bytes.iter().all(|&b| b == 0) {
                0
            } else if bytes.iter().all(|&b| b == SECRET) {
                1
            } else {
                2
            };
            // SAFETY: _exit is async-signal-safe; the child runs no Rust
            // destructors (the parent's region is the parent's).
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None).unwrap() {
            WaitStatus::Exited(_, code) => code,
            other => panic!("the child did not exit: {other:?}"),
        },
    }
}

/// A child forked from a process holding a secret gets zeros in a
/// `wipe_on_fork` region, and a copy (unlocked) in a region without it;
/// the parent keeps its own.
#[test]
fn a_forked_child_sees_a_wipe_on_fork_region_as_zeros() {
    for policy in [LockPolicy::Populate, LockPolicy::OnFault] {
        let len = 4 * accounting::page_size();
        let mut wiped = LockedRegion::builder(len)
            .policy(policy)
            .wipe_on_fork()
            .build()
            .unwrap();
        let mut kept = LockedRegion::builder(len).policy(policy).build().unwrap();
        wiped.as_mut_slice().unwrap().fill(SECRET);
        kept.as_mut_slice().unwrap().fill(SECRET);
        assert_eq!(
            (what_a_child_sees(&wiped), what_a_child_sees(&kept)),
            (0, 1),
            "{policy:?}: (wiped, kept): 0 is zeros, 1 the secret"
        );
        assert!(wiped.as_slice().iter().all(|&b| b == SECRET), "{policy:?}");
    }
}

/// The kernel refuses `MADV_WIPEONFORK` over a file or hugetlb pages: the
/// build says so before it maps anything (no pool needed).
#[test]
fn wipe_on_fork_over_a_file_or_hugetlb_pages_is_refused() {
    let fd = rustix::fs::memfd_create("wipe", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let page = accounting::page_size();
    rustix::fs::ftruncate(&fd, page as u64).unwrap();
    // SAFETY: the memfd is this test's own; nothing else maps, writes or
    // truncates it.
    let file = unsafe { LockedRegion::builder(page).file(fd.as_fd(), 0, false) };
    let huge = LockedRegion::builder(2 << 20).pages(Pages::Huge(HugePageSize::Size2M));
    for (what, builder) in [("file", file), ("hugetlb", huge)] {
        let e = builder.wipe_on_fork().build().unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadFlags {
                    op: "RegionBuilder::build",
                    ..
                }
            ),
            "{what}: {e:?}"
        );
        assert!(e.to_string().contains("wipe_on_fork needs"), "{what}: {e}");
    }
}

/// A region over a shared memfd, dropped: with `zero_on_drop` the file's
/// pages read zeros after, without it the secret. A page never touched is
/// zeroed too (`LockPolicy::Unlocked` leaves the second page out until
/// then).
#[test]
fn zero_on_drop_zeroes_the_memory_before_it_goes() {
    let page = accounting::page_size();
    for zero in [true, false] {
        let fd = rustix::fs::memfd_create("secret", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 2 * page as u64).unwrap();
        rustix::io::pwrite(&fd, &vec![SECRET; page], page as u64).unwrap();
        // SAFETY: the memfd is this test's own; nothing else maps, writes
        // or truncates it while the region lives.
        let mut builder = unsafe { LockedRegion::builder(2 * page).file(fd.as_fd(), 0, true) }
            .policy(LockPolicy::Unlocked);
        if zero {
            builder = builder.zero_on_drop();
        }
        let mut region = builder.build().unwrap();
        region.as_mut_slice().unwrap()[..page].fill(SECRET);
        drop(region);
        let mut back = vec![0xFF; 2 * page];
        assert_eq!(rustix::io::pread(&fd, &mut back, 0).unwrap(), 2 * page);
        let want = if zero { 0 } else { SECRET };
        assert!(
            back.iter().all(|&b| b == want),
            "zero_on_drop {zero}: the file holds {:#x} at 0 and {:#x} at a page",
            back[0],
            back[page]
        );
    }
}

/// `zero_on_drop` writes the region: refused with `read_only`.
#[test]
fn zero_on_drop_of_a_read_only_region_is_refused() {
    let e = LockedRegion::builder(accounting::page_size())
        .read_only()
        .zero_on_drop()
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::BadFlags { .. }), "{e:?}");
    assert!(e.to_string().contains("zero_on_drop writes"), "{e}");
}

/// A `FaultLockedRegion` keeps its untouched pages inaccessible, and its
/// drop takes its fault handler away before the region's drop zeroes
/// them: the pages are opened first. In a child: a zeroing that faults
/// with no handler kills the process.
#[cfg(feature = "fault-locked")]
#[test]
fn zero_on_drop_zeroes_a_fault_locked_region() {
    use mmbatch_mlock::FaultLockedRegion;
    use mmbatch_testkit::child;
    let name = "zero_on_drop_zeroes_a_fault_locked_region";
    if let Some(run) = child::parent(name, std::time::Duration::from_secs(10)) {
        run.expect_success();
        return;
    }
    let page = accounting::page_size();
    let fd = rustix::fs::memfd_create("secret", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4 * page as u64).unwrap();
    rustix::io::pwrite(&fd, &vec![SECRET; 4 * page], 0).unwrap();
    // SAFETY: the memfd is this test's own; nothing else maps, writes or
    // truncates it while the region lives.
    let builder = unsafe { LockedRegion::builder(4 * page).file(fd.as_fd(), 0, true) };
    let region = FaultLockedRegion::new(builder.zero_on_drop(), 1).unwrap();
    assert_eq!(region.read(page).unwrap(), SECRET);
    drop(region);
    let mut back = vec![0xFF; 4 * page];
    assert_eq!(rustix::io::pread(&fd, &mut back, 0).unwrap(), 4 * page);
    assert!(back.iter().all(|&b| b == 0), "{:#x}", back[0]);
}

/// The peak resident memory of this process (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// An anonymous `zero_on_drop` region used sparsely (256 MiB, one page
/// written, `LockPolicy::Unlocked`) is zeroed where it is resident: its
/// drop does not allocate the pages it never touched (zeroing them would
/// have raised the process's peak by 256 MiB, an OOM in a tight cgroup).
/// In a child, whose peak is its own.
#[test]
fn zero_on_drop_leaves_untouched_anonymous_pages_alone() {
    let name = "zero_on_drop_leaves_untouched_anonymous_pages_alone";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    let mut r = LockedRegion::builder(256 << 20)
        .policy(LockPolicy::Unlocked)
        .zero_on_drop()
        .build()
        .unwrap();
    r.as_mut_slice().unwrap()[5 << 20] = SECRET;
    let before = peak_kib();
    drop(r);
    let grown = peak_kib() - before;
    assert!(grown < 64 << 10, "the drop raised the peak by {grown} KiB");
}

/// A `FaultLockedRegion` refused after its region was made (every slot
/// taken) drops that region, which the caller never had: it neither
/// faults (its pages were `PROT_NONE` before the refusal, with no handler
/// to open them for the zeroing: SIGSEGV) nor zeroes the file it maps
/// (whose contents a refused call must leave alone). In a child.
#[cfg(feature = "fault-locked")]
#[test]
fn a_refused_fault_region_zeroes_without_a_fault() {
    use mmbatch_mlock::{FaultLockedRegion, MAX_FAULT_REGIONS};
    use mmbatch_testkit::child;
    let name = "a_refused_fault_region_zeroes_without_a_fault";
    if let Some(run) = child::parent(name, std::time::Duration::from_secs(10)) {
        run.expect_success();
        return;
    }
    let page = accounting::page_size();
    let held: Vec<_> = (0..MAX_FAULT_REGIONS)
        .map(|_| FaultLockedRegion::new(LockedRegion::builder(page), 1).unwrap())
        .collect();
    // Over a file, whose every page a zeroing writes.
    let fd = rustix::fs::memfd_create("secret", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4 * page as u64).unwrap();
    rustix::io::pwrite(&fd, &vec![SECRET; 4 * page], 0).unwrap();
    // SAFETY: this test's own memfd; nothing else maps, writes or
    // truncates it.
    let builder = unsafe { LockedRegion::builder(4 * page).file(fd.as_fd(), 0, true) };
    let e = FaultLockedRegion::new(builder.zero_on_drop(), 1).unwrap_err();
    assert!(matches!(e, Error::TooManyFaultRegions { .. }), "{e:?}");
    drop(held);
    // The refused region was never the caller's: the file keeps its bytes.
    let mut back = vec![0; 4 * page];
    rustix::io::pread(&fd, &mut back, 0).unwrap();
    assert!(
        back.iter().all(|&b| b == SECRET),
        "the refused region zeroed the file"
    );
}

/// A secret memory region, or `None` (said) where this kernel has none.
fn secret_region(builder: mmbatch_mlock::RegionBuilder<'_>) -> Option<LockedRegion> {
    match builder.secret_memory().build() {
        Ok(r) => Some(r),
        Err(
            e @ Error::BadFlags {
                op: "memfd_secret", ..
            },
        ) => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("{e:?}"),
    }
}

/// Reads `len` bytes at `addr` of this process through the kernel
/// (`/proc/self/mem`), as another process's debugger would.
fn read_through_the_kernel(addr: *const u8, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open("/proc/self/mem")?;
    let mut buf = vec![0; len];
    mem.read_exact_at(&mut buf, addr as u64)?;
    Ok(buf)
}

/// Secret memory holds what is written to it, locked, and the kernel
/// will not read it for anyone (`/proc/PID/mem`, as a debugger reads),
/// where it reads an ordinary locked region's bytes.
#[test]
fn secret_memory_is_out_of_the_kernels_reach() {
    let len = 4 * accounting::page_size();
    let Some(mut secret) = secret_region(LockedRegion::builder(len).zero_on_drop()) else {
        return;
    };
    let mut plain = LockedRegion::builder(len).build().unwrap();
    secret.as_mut_slice().unwrap().fill(SECRET);
    plain.as_mut_slice().unwrap().fill(SECRET);
    assert!(secret.as_slice().iter().all(|&b| b == SECRET));
    assert_eq!(secret.locked_bytes().unwrap(), len as u64);
    assert_eq!(
        read_through_the_kernel(plain.as_ptr(), len).unwrap(),
        vec![SECRET; len]
    );
    let e = read_through_the_kernel(secret.as_ptr(), len).unwrap_err();
    println!("reading secret memory through /proc/self/mem: {e}");
    // Populated as asked with `map_locked` too (MAP_POPULATE alone
    // leaves secret memory out without a word).
    let Some(mapped) = secret_region(LockedRegion::builder(len).map_locked(true)) else {
        return;
    };
    assert_eq!(mapped.resident_pages().unwrap(), 4);
    // Locked whatever the policy: the kernel locks secret memory itself.
    let Some(mut unlocked) = secret_region(LockedRegion::builder(len).policy(LockPolicy::Unlocked))
    else {
        return;
    };
    unlocked.as_mut_slice().unwrap()[0] = SECRET;
    assert_eq!(
        unlocked.locked_bytes().unwrap(),
        accounting::page_size() as u64
    );
}

/// The kernel's own refusal of `memfd_secret` (a seccomp filter's
/// EPERM, as Docker's default profile gives) is named, and descriptor 0
/// (stdin closed) is a descriptor like any other. In a child: the
/// filter and the closed stdin are for good.
#[test]
fn secret_memory_refused_by_a_filter_is_named() {
    let name = "secret_memory_refused_by_a_filter_is_named";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(10)) {
        return run.expect_success();
    }
    let page = accounting::page_size();
    if secret_region(LockedRegion::builder(page)).is_none() {
        return;
    }
    // SAFETY: this test process's stdin, which nothing here reads.
    assert_eq!(unsafe { libc::close(0) }, 0);
    let r = LockedRegion::builder(page).secret_memory().build();
    assert!(r.is_ok(), "with descriptor 0 free: {r:?}");
    drop(r);
    mmbatch_testkit::seccomp::refuse_syscalls(&[447]);
    let e = LockedRegion::builder(page)
        .secret_memory()
        .build()
        .unwrap_err();
    println!("child: {e}");
    assert!(
        matches!(
            e,
            Error::BadFlags {
                op: "memfd_secret",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("seccomp"), "{e}");
}

/// Options secret memory cannot take are refused before anything is made.
#[test]
fn secret_memory_refuses_what_it_cannot_be() {
    let page = accounting::page_size();
    let fd = rustix::fs::memfd_create("not-secret", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, page as u64).unwrap();
    // SAFETY: the memfd is this test's own; nothing else maps, writes or
    // truncates it.
    let file = unsafe { LockedRegion::builder(page).file(fd.as_fd(), 0, true) };
    for (what, builder) in [
        ("file", file),
        (
            "hugetlb",
            LockedRegion::builder(2 << 20).pages(Pages::Huge(HugePageSize::Size2M)),
        ),
        (
            "thp",
            LockedRegion::builder(2 << 20).pages(Pages::Transparent),
        ),
        ("read-only", LockedRegion::builder(page).read_only()),
        ("wipe_on_fork", LockedRegion::builder(page).wipe_on_fork()),
    ] {
        let e = builder.secret_memory().build().unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadFlags {
                    op: "RegionBuilder::build",
                    ..
                }
            ),
            "{what}: {e:?}"
        );
        assert!(e.to_string().contains("secret_memory"), "{what}: {e}");
    }
}

/// A `FaultLockedRegion` locks pages with `mlock` as they fault: secret
/// memory, which the kernel locks itself and `mlock` cannot fault in, is
/// refused before anything is made.
#[cfg(feature = "fault-locked")]
#[test]
fn a_fault_locked_region_refuses_secret_memory() {
    let builder = LockedRegion::builder(accounting::page_size()).secret_memory();
    let e = mmbatch_mlock::FaultLockedRegion::new(builder, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadFlags {
                op: "FaultLockedRegion::new",
                ..
            }
        ),
        "{e:?}"
    );
}

/// A forked child that drops its copy of a `zero_on_drop` region over
/// memory it shares with its parent (a shared file; secret memory) leaves
/// the parent's secret alone: only the process that built the region
/// zeroes it. (The child's drop zeroed the parent's file before.)
#[test]
fn a_forked_childs_drop_leaves_the_parents_secret() {
    let page = accounting::page_size();
    let fd = rustix::fs::memfd_create("shared", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, page as u64).unwrap();
    // SAFETY: the memfd is this test's own; nothing else maps, writes or
    // truncates it while the region lives.
    let builder = unsafe { LockedRegion::builder(page).file(fd.as_fd(), 0, true) };
    let mut regions = vec![builder.zero_on_drop().build().unwrap()];
    regions.extend(secret_region(LockedRegion::builder(page).zero_on_drop()));
    for r in &mut regions {
        r.as_mut_slice().unwrap().fill(SECRET);
    }
    // SAFETY: the child drops the regions (getpid, munmap: both
    // async-signal-safe, no allocation) and calls `_exit`.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            // Dropped one by one: the vector's buffer is not freed
            // (malloc may be locked by a thread the fork left behind).
            regions.drain(..).for_each(drop);
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            assert_eq!(waitpid(child, None).unwrap(), WaitStatus::Exited(child, 0));
        }
    }
    for (i, r) in regions.iter().enumerate() {
        assert!(
            r.as_slice().iter().all(|&b| b == SECRET),
            "region {i} zeroed"
        );
    }
}

/// How a child forked now ends after reading the byte at `at`: exit 0, or
/// the signal that killed it.
fn a_child_reading(at: *const u8) -> WaitStatus {
    let at = at as usize;
    // SAFETY: the child reads one byte and calls `_exit`, both
    // async-signal-safe, and nothing else.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: setrlimit is async-signal-safe; no core file (slow,
            // and holding the secret) for the SIGSEGV that may follow.
            unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
            // SAFETY: the region's first byte, mapped in the child at the
            // same address: readable, or a SIGSEGV, which is the test.
            let _ = unsafe { (at as *const u8).read_volatile() };
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => waitpid(child, None).unwrap(),
    }
}

/// A secret protected with `Access::NoAccess` kills a reader with SIGSEGV and
/// stays locked and resident meanwhile; `Read` gives it back read-only,
/// `ReadWrite` writable, its bytes kept throughout.
#[test]
fn a_secret_protected_from_access_cannot_be_read_and_stays_locked() {
    use mmbatch_mlock::Access;
    use nix::sys::signal::Signal;
    let len = 4 * accounting::page_size();
    let mut r = LockedRegion::builder(len).build().unwrap();
    assert_eq!(r.access(), Access::ReadWrite);
    r.as_mut_slice().unwrap().fill(SECRET);
    let locked = r.locked_bytes().unwrap();
    assert_eq!(locked, len as u64);
    r.protect(Access::NoAccess).unwrap();
    assert_eq!(r.access(), Access::NoAccess);
    assert!(r.as_mut_slice().is_none());
    assert!(
        matches!(
            a_child_reading(r.as_ptr()),
            WaitStatus::Signaled(_, Signal::SIGSEGV, _)
        ),
        "a read of a region protected from access did not fault"
    );
    assert_eq!(
        r.locked_bytes().unwrap(),
        locked,
        "unlocked by the protection"
    );
    assert_eq!(r.resident_pages().unwrap(), 4);
    r.protect(Access::ReadOnly).unwrap();
    assert!(matches!(
        a_child_reading(r.as_ptr()),
        WaitStatus::Exited(_, 0)
    ));
    assert!(r.as_slice().iter().all(|&b| b == SECRET));
    assert!(r.as_mut_slice().is_none(), "writable while Read");
    r.protect(Access::ReadWrite).unwrap();
    r.as_mut_slice().unwrap()[0] = 1;
    assert_eq!(r.as_slice()[..2], [1, SECRET]);
}

/// No reference to memory the process cannot read is handed out.
#[test]
#[should_panic(expected = "as_slice on a region protected with Access::NoAccess")]
fn a_slice_of_a_region_protected_from_access_panics() {
    let mut r = LockedRegion::builder(accounting::page_size())
        .build()
        .unwrap();
    r.protect(mmbatch_mlock::Access::NoAccess).unwrap();
    let _ = r.as_slice();
}

/// A region built read-only is not made writable by `protect`; the other
/// accesses it takes.
#[test]
fn a_read_only_region_is_not_made_writable() {
    use mmbatch_mlock::Access;
    let page = accounting::page_size();
    let fd = rustix::fs::memfd_create("ro", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, page as u64).unwrap();
    // SAFETY: the memfd is this test's own; nothing else maps, writes or
    // truncates it while the region lives.
    let mut r = unsafe { LockedRegion::builder(page).file(fd.as_fd(), 0, true) }
        .read_only()
        .build()
        .unwrap();
    assert_eq!(r.access(), Access::ReadOnly);
    let e = r.protect(Access::ReadWrite).unwrap_err();
    assert!(
        matches!(e, Error::BadFlags { .. }) && e.to_string().contains("read_only"),
        "{e}"
    );
    assert_eq!(r.access(), Access::ReadOnly, "a refusal changes nothing");
    r.protect(Access::NoAccess).unwrap();
    r.protect(Access::ReadOnly).unwrap();
    assert!(r.as_slice().iter().all(|&b| b == 0));
}

/// `zero_on_drop` zeroes a region left protected from access: the drop
/// opens it first (zeroing it as it was faulted the process).
#[test]
fn zero_on_drop_zeroes_a_region_protected_from_access() {
    use mmbatch_mlock::Access;
    let page = accounting::page_size();
    for access in [Access::NoAccess, Access::ReadOnly] {
        let fd = rustix::fs::memfd_create("secret", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 2 * page as u64).unwrap();
        // SAFETY: the memfd is this test's own; nothing else maps, writes
        // or truncates it while the region lives.
        let mut r = unsafe { LockedRegion::builder(2 * page).file(fd.as_fd(), 0, true) }
            .zero_on_drop()
            .build()
            .unwrap();
        r.as_mut_slice().unwrap().fill(SECRET);
        r.protect(access).unwrap();
        drop(r);
        let mut back = vec![0xFF; 2 * page];
        assert_eq!(rustix::io::pread(&fd, &mut back, 0).unwrap(), 2 * page);
        assert!(back.iter().all(|&b| b == 0), "{access:?}: not zeroed");
    }
}

/// A region protected with `NoAccess` cannot be faulted in: `lock_range`
/// is refused by name (secret memory's read of each page would have
/// faulted the process), and `lock_range_on_fault`, which faults nothing
/// in, locks it.
#[test]
fn a_region_protected_from_access_is_not_faulted_in_to_lock_it() {
    use mmbatch_mlock::Access;
    let page = accounting::page_size();
    let mut regions = vec![
        LockedRegion::builder(2 * page)
            .policy(LockPolicy::Unlocked)
            .build()
            .unwrap(),
    ];
    regions.extend(secret_region(
        LockedRegion::builder(2 * page).policy(LockPolicy::Unlocked),
    ));
    for mut r in regions {
        r.protect(Access::NoAccess).unwrap();
        let e = r.lock_range(0, 2 * page).unwrap_err();
        assert!(
            matches!(e, Error::BadFlags { .. }) && e.to_string().contains("Access::NoAccess"),
            "{e}"
        );
        r.lock_range_on_fault(0, 2 * page).unwrap();
        r.protect(Access::ReadOnly).unwrap();
        r.lock_range(0, 2 * page).unwrap();
        assert!(r.as_slice().iter().all(|&b| b == 0));
    }
}
