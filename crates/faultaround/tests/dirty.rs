//! Write tracking: a region built with `track_writes` reports exactly the
//! pages written since it was built or since the last take — not the ones
//! its handlers filled, read, discarded or left untouched.

use std::{io::Write as _, ops::Range};

use mmbatch_faultaround::{Error, UffdRegion};

const PAGE: usize = 4096;
const PAGES: usize = 64;

/// A tracked region, or `None` on a kernel before 6.7, where the build
/// must be refused as unsupported, naming the release that has it.
fn region() -> Option<UffdRegion> {
    let src: Vec<u8> = (0..PAGES * PAGE).map(|b| (b / PAGE) as u8).collect();
    let r = UffdRegion::builder(PAGES * PAGE)
        .order(2)
        .handlers(2)
        .track_writes(true)
        .build(src);
    if mmbatch_testkit::kernel_at_least(6, 7) {
        return Some(r.unwrap());
    }
    let e = r.unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { .. }) && e.to_string().contains("Linux 6.7"),
        "{e}"
    );
    eprintln!("write tracking needs Linux 6.7: refused as unsupported here ({e})");
    None
}

fn ranges(pages: &[u64]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some(r) if r.end == p => r.end += 1,
            _ => out.push(p..p + 1),
        }
    }
    out
}

#[test]
fn the_pages_written_since_a_take_are_reported_exactly() {
    let _hang = mmbatch_testkit::hang_guard("the_pages_written_since_a_take_are_reported_exactly");
    let Some(mut r) = region() else { return };
    // Half the region read (filled by the handlers), nothing written.
    let sum: u64 = (0..PAGES / 2)
        .map(|p| u64::from(r.as_slice()[p * PAGE]))
        .sum();
    assert_eq!(sum, (0..32).sum::<u64>());
    assert_eq!(r.written_pages().unwrap(), []);
    // Writes to present pages, and to missing ones (faulted in, then
    // written).
    for p in [3, 4, 10, 40, 63] {
        r.as_mut_slice()[p * PAGE + 5] = 0xFF;
    }
    let want = ranges(&[3, 4, 10, 40, 63]);
    assert_eq!(r.written_pages().unwrap(), want);
    // Reading does not reset; taking does.
    assert_eq!(r.written_pages().unwrap(), want);
    assert_eq!(r.take_written_pages().unwrap(), want);
    assert_eq!(r.written_pages().unwrap(), []);
    for p in [10, 20] {
        r.as_mut_slice()[p * PAGE] = 1;
    }
    assert_eq!(r.take_written_pages().unwrap(), ranges(&[10, 20]));
    assert_eq!(r.as_slice()[40 * PAGE + 5], 0xFF);
    assert!(r.failure().is_none());
}

/// More written runs than one `PAGEMAP_SCAN` holds (its buffer takes 256)
/// are all reported: the scan goes on from where a full buffer stopped.
#[test]
fn more_runs_than_a_scan_holds_are_all_reported() {
    let _hang = mmbatch_testkit::hang_guard("more_runs_than_a_scan_holds_are_all_reported");
    let pages = 1024;
    let r = UffdRegion::builder(pages * PAGE)
        .track_writes(true)
        .build(mmbatch_faultaround::Zeroes((pages * PAGE) as u64));
    let mut r = match r {
        Ok(r) => r,
        // Refused as `region` says it must be before Linux 6.7.
        Err(e) if !mmbatch_testkit::kernel_at_least(6, 7) => {
            assert!(e.to_string().contains("Linux 6.7"), "{e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    // Every other page: 512 runs of one page.
    let every_other: Vec<u64> = (0..pages as u64).step_by(2).collect();
    for &p in &every_other {
        r.as_mut_slice()[p as usize * PAGE] = 1;
    }
    assert_eq!(r.written_pages().unwrap(), ranges(&every_other));
    assert_eq!(r.take_written_pages().unwrap(), ranges(&every_other));
    assert_eq!(r.written_pages().unwrap(), []);
}

#[test]
fn writes_from_several_threads_are_all_reported() {
    let _hang = mmbatch_testkit::hang_guard("writes_from_several_threads_are_all_reported");
    let Some(mut r) = region() else { return };
    let base = r.as_mut_ptr() as usize;
    let mine = |t: usize| (0..PAGES).filter(move |p| p % 3 == t % 3 || p % 7 == 0);
    std::thread::scope(|s| {
        for t in 0..2 {
            s.spawn(move || {
                for p in mine(t) {
                    // SAFETY: inside the region, which no borrow holds
                    // while the scope runs; a byte per page, racing only
                    // with the other thread's identical writes.
                    unsafe { ((base + p * PAGE + t) as *mut u8).write_volatile(9) };
                }
            });
        }
    });
    let mut want: Vec<u64> = mine(0).chain(mine(1)).map(|p| p as u64).collect();
    want.sort_unstable();
    want.dedup();
    assert_eq!(r.written_pages().unwrap(), ranges(&want));
}

#[test]
fn discarded_pages_read_back_as_zeros_unwritten() {
    let _hang = mmbatch_testkit::hang_guard("discarded_pages_read_back_as_zeros_unwritten");
    let Some(mut r) = region() else { return };
    r.as_mut_slice()[5 * PAGE] = 7;
    assert_eq!(r.take_written_pages().unwrap(), ranges(&[5]));
    let at = r.as_mut_ptr().wrapping_add(5 * PAGE);
    // SAFETY: one page of the region, which no borrow holds.
    let rc = unsafe { libc::madvise(at.cast(), PAGE, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0);
    assert_eq!(r.as_slice()[5 * PAGE], 0);
    assert_eq!(r.written_pages().unwrap(), []);
    r.as_mut_slice()[5 * PAGE] = 8;
    assert_eq!(r.written_pages().unwrap(), ranges(&[5]));
}

#[test]
fn a_system_call_writing_the_region_is_a_write() {
    let _hang = mmbatch_testkit::hang_guard("a_system_call_writing_the_region_is_a_write");
    let Some(mut r) = region() else { return };
    let (mut rx, mut tx) = std::os::unix::net::UnixStream::pair().unwrap();
    tx.write_all(&[0xAB; 3 * PAGE]).unwrap();
    // read(2) into pages 30..33, not yet present.
    std::io::Read::read_exact(&mut rx, &mut r.as_mut_slice()[30 * PAGE..33 * PAGE]).unwrap();
    assert_eq!(r.written_pages().unwrap(), ranges(&[30, 31, 32]));
}

#[test]
fn an_untracked_region_refuses_to_report() {
    let _hang = mmbatch_testkit::hang_guard("an_untracked_region_refuses_to_report");
    let r = UffdRegion::new(PAGES * PAGE, 0, vec![0u8; PAGES * PAGE], 1).unwrap();
    let e = r.written_pages().unwrap_err();
    assert!(matches!(e, Error::BadSetting { .. }), "{e}");
    assert!(e.to_string().contains("track_writes(true)"), "{e}");
}

/// The `VmFlags` of the mapping that starts at `addr` (`/proc/self/smaps`).
fn vm_flags(addr: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut lines = smaps.lines();
    while let Some(l) = lines.next() {
        let Some((start, _)) = l.split_whitespace().next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        if usize::from_str_radix(start, 16) != Ok(addr) {
            continue;
        }
        let flags = lines
            .find_map(|l| l.strip_prefix("VmFlags:"))
            .expect("a VmFlags line");
        return flags.split_whitespace().map(str::to_owned).collect();
    }
    panic!("no mapping at {addr:#x}");
}

/// A region registers for what it serves: missing pages always (`um`),
/// write-protect faults (`uw`) only when it tracks writes. Registered for
/// write-protection it does not use, a region would be refused by a
/// kernel or an architecture without userfaultfd write-protection, and
/// its memory would carry the kernel's write-protect markers for nothing.
#[test]
fn only_a_tracking_region_registers_for_write_protection() {
    let _hang =
        mmbatch_testkit::hang_guard("only_a_tracking_region_registers_for_write_protection");
    let plain = UffdRegion::new(PAGES * PAGE, 2, vec![0u8; PAGES * PAGE], 1).unwrap();
    let flags = vm_flags(plain.as_ptr() as usize);
    assert!(flags.iter().any(|f| f == "um"), "{flags:?}");
    assert!(!flags.iter().any(|f| f == "uw"), "{flags:?}");
    let Some(tracked) = region() else { return };
    let flags = vm_flags(tracked.as_ptr() as usize);
    assert!(
        flags.iter().any(|f| f == "um") && flags.iter().any(|f| f == "uw"),
        "{flags:?}"
    );
}
