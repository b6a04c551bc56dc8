//! UffdRegion on the host kernel, small sizes, checked with mincore and
//! byte-for-byte against the source.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use mmbatch_faultaround::{Error, PageRead, PageSource, UffdRegion, Zeroes};

const PAGE: usize = 4096;

/// Page i holds bytes derived from i, so misplaced pages show.
fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251) as u8)
        .collect()
}

#[test]
fn one_fault_maps_exactly_the_window() {
    let _hang = mmbatch_testkit::hang_guard("one_fault_maps_exactly_the_window");
    let src = image(256);
    let r = UffdRegion::new(256 * PAGE, 4, src.clone(), 1).unwrap();
    assert_eq!(r.resident_pages(), 0);
    assert_eq!(r.as_slice()[37 * PAGE + 5], src[37 * PAGE + 5]);
    // Order 4 around page 37: pages 32..48, nothing else.
    assert_eq!(r.resident_pages(), 16);
    let st = r.stats();
    assert_eq!((st.faults, st.pages_copied), (1, 16));
    assert_eq!(
        &r.as_slice()[32 * PAGE..48 * PAGE],
        &src[32 * PAGE..48 * PAGE]
    );
    assert_eq!(r.stats().faults, 1, "reads inside the window do not fault");
}

#[test]
fn sequential_faults_are_pages_over_window() {
    let _hang = mmbatch_testkit::hang_guard("sequential_faults_are_pages_over_window");
    for order in [0u32, 1, 3, 5, 9] {
        let r = UffdRegion::new(1024 * PAGE, order, Zeroes(1 << 30), 1).unwrap();
        assert_eq!((r.len(), r.is_empty()), (1024 * PAGE, false));
        let mem = r.as_slice();
        let sum: u64 = (0..1024).map(|p| u64::from(mem[p * PAGE])).sum();
        assert_eq!(sum, 0);
        assert_eq!(r.stats().faults, 1024 >> order, "order {order}");
        assert_eq!(r.stats().pages_copied, 1024);
    }
}

#[test]
fn concurrent_faults_fill_every_page_once_with_its_contents() {
    let _hang =
        mmbatch_testkit::hang_guard("concurrent_faults_fill_every_page_once_with_its_contents");
    let pages = 2048;
    let src = image(pages);
    let r = UffdRegion::new(pages * PAGE, 3, src.clone(), 2).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (r, src) = (&r, &src);
            s.spawn(move || {
                // Overlapping windows: every thread walks all pages from a
                // different start.
                for i in 0..pages {
                    let p = (i * 7 + t * 301) % pages;
                    assert_eq!(r.as_slice()[p * PAGE + t], src[p * PAGE + t], "page {p}");
                }
            });
        }
    });
    assert_eq!(r.as_slice(), &src[..], "byte for byte");
    // A handler counts a copy after the ioctl that woke the reader
    // returns: the last window's count may land a moment after its
    // reader went on (seen under TCG: 2040 of 2048). Bounded wait.
    let start = std::time::Instant::now();
    while r.stats().pages_copied < pages as u64 && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let st = r.stats();
    assert_eq!(
        st.pages_copied, pages as u64,
        "each page copied exactly once: {st:?}"
    );
}

/// Odd pages are not ready until `ready` is set.
struct Flaky {
    data: Vec<u8>,
    ready: Arc<AtomicBool>,
}

impl PageSource for Flaky {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if index % 2 == 1 && !self.ready.load(Ordering::Acquire) {
            return PageRead::NotReady;
        }
        let at = index as usize * PAGE;
        buf.copy_from_slice(&self.data[at..at + PAGE]);
        PageRead::Ready
    }
}

#[test]
fn not_ready_neighbours_are_skipped_never_waited_for() {
    let _hang = mmbatch_testkit::hang_guard("not_ready_neighbours_are_skipped_never_waited_for");
    let data = image(64);
    let ready = Arc::new(AtomicBool::new(false));
    let r = UffdRegion::new(
        64 * PAGE,
        3,
        Flaky {
            data: data.clone(),
            ready: ready.clone(),
        },
        1,
    )
    .unwrap();
    assert_eq!(r.as_slice()[8 * PAGE], data[8 * PAGE]);
    // Window 8..16: the even pages came in, the odd ones were skipped.
    assert_eq!(r.resident_pages(), 4);
    assert_eq!(r.stats().pages_skipped, 4);
    // The faulting page itself is waited for until the source has it.
    let r = &r;
    std::thread::scope(|s| {
        let reader = s.spawn(move || r.as_slice()[9 * PAGE + 1]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        ready.store(true, Ordering::Release);
        assert_eq!(reader.join().unwrap(), data[9 * PAGE + 1]);
    });
}

/// A page-cache region's shutdown maps every cached page in place, so
/// that reading the region afterwards takes no fault (through the shmem
/// fault path it would take one per fault-around window).
#[test]
fn a_page_cache_regions_shutdown_maps_every_cached_page() {
    let _hang = mmbatch_testkit::hang_guard("a_page_cache_regions_shutdown_maps_every_cached_page");
    let pages = 256;
    let src = image(pages);
    let cache = UffdRegion::page_cache_from(&src, pages * PAGE).unwrap();
    // SAFETY: our own memfd, not written or truncated while mapped.
    let r = unsafe { UffdRegion::over_page_cache(&cache, pages * PAGE, 0, 1) }.unwrap();
    r.shutdown();
    // Minor faults of this thread.
    let faults = || {
        // SAFETY: a plain out-parameter for getrusage.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid rusage to fill.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
        ru.ru_minflt
    };
    let before = faults();
    let sum: u64 = (0..pages)
        .map(|p| u64::from(r.as_slice()[p * PAGE + 3]))
        .sum();
    let taken = faults() - before;
    assert_eq!(sum, (0..pages).map(|p| u64::from(src[p * PAGE + 3])).sum());
    assert!(
        taken <= 2,
        "{taken} faults reading a region its shutdown mapped"
    );
}

#[test]
fn shutdown_with_faults_in_flight_fails_no_thread() {
    let _hang = mmbatch_testkit::hang_guard("shutdown_with_faults_in_flight_fails_no_thread");
    let pages = 4096;
    let src = image(pages);
    let r = UffdRegion::new(pages * PAGE, 0, src.clone(), 1).unwrap();
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|t| {
                let (r, src) = (&r, &src);
                s.spawn(move || {
                    for p in (t..pages).step_by(3) {
                        assert_eq!(r.as_slice()[p * PAGE], src[p * PAGE]);
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(5));
        r.shutdown();
        for h in readers {
            h.join().unwrap();
        }
    });
    assert_eq!(r.resident_pages(), pages);
    assert_eq!(r.as_slice(), &src[..]);
}

#[test]
fn bad_input_is_a_clear_error() {
    let _hang = mmbatch_testkit::hang_guard("bad_input_is_a_clear_error");
    let e = UffdRegion::new(0, 0, Zeroes(1 << 20), 1).unwrap_err();
    assert!(matches!(e, Error::BadLength { .. }), "{e}");
    let e = UffdRegion::new(PAGE + 1, 0, Zeroes(1 << 20), 1).unwrap_err();
    assert!(e.to_string().contains("multiple of the page size"), "{e}");
    let e = UffdRegion::new(PAGE, 10, Zeroes(1 << 20), 1).unwrap_err();
    assert!(matches!(e, Error::OrderTooLarge { order: 10 }), "{e}");
    let e = UffdRegion::new(4 * PAGE, 0, vec![0u8; PAGE], 1).unwrap_err();
    assert!(e.to_string().contains("longer source"), "{e}");
}

#[test]
fn page_cache_region_maps_the_cached_window_without_copying() {
    let _hang =
        mmbatch_testkit::hang_guard("page_cache_region_maps_the_cached_window_without_copying");
    let src = image(256);
    let cache = UffdRegion::page_cache_from(&src, 256 * PAGE).unwrap();
    // SAFETY: our own memfd, not written or truncated while mapped.
    let r = unsafe { UffdRegion::over_page_cache(&cache, 256 * PAGE, 4, 1) }.unwrap();
    assert_eq!(r.as_slice()[37 * PAGE + 5], src[37 * PAGE + 5]);
    let st = r.stats();
    assert_eq!(
        (st.faults, st.pages_copied),
        (1, 16),
        "the window 32..48, mapped in place"
    );
    assert_eq!(
        &r.as_slice()[32 * PAGE..48 * PAGE],
        &src[32 * PAGE..48 * PAGE]
    );
    assert_eq!(r.stats().faults, 1);
    // Sequential: pages / 2^order faults, contents byte for byte.
    assert_eq!(r.as_slice(), &src[..]);
    assert_eq!(r.stats().faults, 256 / 16);
}

/// A memfd holding `data` but for the pages `hole` names, never written
/// (a page cache with holes, as guest memory the VMM never wrote has).
fn cache_with_holes(data: &[u8], hole: impl Fn(usize) -> bool) -> std::fs::File {
    use std::os::unix::fs::FileExt;
    let fd = rustix::fs::memfd_create("holes", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let file = std::fs::File::from(fd);
    file.set_len(data.len() as u64).unwrap();
    for (p, bytes) in data.chunks(PAGE).enumerate() {
        if !hole(p) {
            file.write_all_at(bytes, (p * PAGE) as u64).unwrap();
        }
    }
    file
}

#[test]
fn page_cache_region_skips_uncached_neighbours() {
    // In a child: a skip that stopped advancing would hang the fault.
    let name = "page_cache_region_skips_uncached_neighbours";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    // Even pages cached, odd pages holes (never written).
    let data = image(64);
    let cache = cache_with_holes(&data, |p| p % 2 == 1);
    // SAFETY: our own memfd, not written or truncated while mapped.
    let r = unsafe { UffdRegion::over_page_cache(&cache, 64 * PAGE, 3, 1) }.unwrap();
    assert_eq!(r.as_slice()[8 * PAGE], data[8 * PAGE]);
    let st = r.stats();
    assert_eq!((st.pages_copied, st.pages_skipped), (4, 4), "{st:?}");
    // An uncached page is an ordinary (missing) shmem fault: zeroes.
    assert_eq!(r.as_slice()[9 * PAGE], 0);
}

/// A window continued past a hole maps the rest of the window and no
/// further: the pages after the hole run on past the window's end in the
/// cache, and a count that grew with the pages done mapped them too.
#[test]
fn page_cache_window_past_a_hole_stops_at_the_windows_end() {
    let name = "page_cache_window_past_a_hole_stops_at_the_windows_end";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    // Every page cached but page 9.
    let data = image(64);
    let cache = cache_with_holes(&data, |p| p == 9);
    // SAFETY: our own memfd, not written or truncated while mapped.
    let r = unsafe { UffdRegion::over_page_cache(&cache, 64 * PAGE, 3, 1) }.unwrap();
    // The window of page 8 is pages 8..16: all but the hole.
    assert_eq!(r.as_slice()[8 * PAGE], data[8 * PAGE]);
    let st = r.stats();
    assert_eq!((st.pages_copied, st.pages_skipped), (7, 1), "{st:?}");
}

/// A user other than root builds a region and reads it. `/dev/userfaultfd`
/// is root's alone by default (this host: `crw------- root`), and the
/// `userfaultfd` crate, finding the device, never tried the system call,
/// which needs no privilege for user-mode faults since Linux 5.11: every
/// other user got "userfaultfd failed: ... Permission denied" (seen on the
/// code before, in this test). As root, the test drops to uid 65534 in a
/// child process.
#[test]
fn a_user_other_than_root_gets_a_region() {
    let name = "a_user_other_than_root_gets_a_region";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(30)) {
        run.expect_success();
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // SAFETY: no memory preconditions; the child has one thread.
        assert_eq!(unsafe { libc::setgid(65534) }, 0, "setgid");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setuid(65534) }, 0, "setuid");
    }
    let src = image(16);
    let r = match UffdRegion::new(16 * PAGE, 0, src.clone(), 1) {
        Ok(r) => r,
        Err(e @ Error::NoPermission { .. }) => {
            // Before Linux 5.11 only `vm.unprivileged_userfaultfd=1` lets
            // this user in; the error must say so.
            println!("refused: {e}");
            assert!(e.to_string().contains("unprivileged_userfaultfd"), "{e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.as_slice()[5 * PAGE + 3], src[5 * PAGE + 3]);
    assert_eq!(r.stats().faults, 1);
}

/// Settings out of range are refused at build, each naming the setting
/// and what it must be. Before: a zero `source_timeout` was taken, and
/// the watchdog then failed every page a healthy source had not yet
/// answered within its 1 ms tick (SIGBUS for the reader); `prefetchers(0)`
/// without a replay was "0 handler threads asked for"; a long image id was
/// "the working-set record is corrupt … record it again", with no record
/// given; a record's page size of 0 panicked in `write_pages`;
/// `page_cache_from` of 6000 bytes returned a cache whose last 1904 bytes
/// were zeroes.
#[test]
fn bad_settings_are_refused_naming_the_setting() {
    let _hang = mmbatch_testkit::hang_guard("bad_settings_are_refused_naming_the_setting");
    use std::time::Duration;
    let src = image(16);
    let e = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::ZERO)
        .build(src.clone())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "source_timeout",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("Duration::MAX"), "{e}");
    // The least it documents is taken.
    UffdRegion::builder(16 * PAGE)
        .source_timeout(mmbatch_faultaround::MIN_SOURCE_TIMEOUT)
        .build(src.clone())
        .unwrap();
    // Prefetchers are read only with a replay.
    UffdRegion::builder(16 * PAGE)
        .prefetchers(0)
        .build(src.clone())
        .unwrap();
    let record = mmbatch_faultaround::Record::new(PAGE, (16 * PAGE) as u64, "", [1, 2]).unwrap();
    let e = UffdRegion::builder(16 * PAGE)
        .prefetchers(0)
        .replay(record)
        .build(src.clone())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "prefetchers",
                ..
            }
        ),
        "{e}"
    );
    // An id of `MAX_ID_LEN` bytes is taken; one byte more is refused.
    let longest = "x".repeat(mmbatch_faultaround::MAX_ID_LEN);
    let r = UffdRegion::builder(16 * PAGE)
        .image_id(longest.as_str())
        .record(true)
        .build(src.clone())
        .unwrap();
    assert_eq!(r.record().unwrap().image_id(), longest);
    drop(r);
    let e = UffdRegion::builder(16 * PAGE)
        .image_id(longest + "x")
        .build(src.clone())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "image_id",
                ..
            }
        ),
        "{e}"
    );
    let e = UffdRegion::builder(16 * PAGE)
        .busy_poll(Duration::MAX)
        .build(src.clone())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "busy_poll",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("Duration::ZERO"), "{e}");
    UffdRegion::builder(16 * PAGE)
        .busy_poll(mmbatch_faultaround::MAX_BUSY_POLL)
        .build(src.clone())
        .unwrap();
    // A partial last page was written as zeroes past the whole pages.
    let e = UffdRegion::page_cache_from(&vec![7u8; 6000], 6000).unwrap_err();
    assert!(matches!(e, Error::BadLength { len: 6000, .. }), "{e}");
    for size in [0, 1000, 4097, 1 << 31] {
        let e = mmbatch_faultaround::Record::new(size, 1 << 20, "", [0]).unwrap_err();
        // The caller's argument, named: not a corrupt record.
        assert!(
            matches!(
                e,
                Error::BadSetting {
                    setting: "page_size",
                    ..
                }
            ),
            "{size}: {e}"
        );
        assert!(e.to_string().contains("page size"), "{size}: {e}");
    }
}

/// A `File` opened for writing only (`File::create`) as the page source:
/// every read failed with EBADF and the first faulting thread died of
/// SIGBUS, the cause only in `failure()`, which a dead process cannot
/// read (seen on the code before: this test's child died of signal 7).
/// Now the build is refused, naming the fix.
#[test]
fn a_write_only_file_source_is_refused_at_build() {
    let name = "a_write_only_file_source_is_refused_at_build";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(30)) {
        run.expect_success();
        return;
    }
    use std::io::Write;
    let path = std::env::temp_dir().join(format!("mmbatch-write-only-{}", std::process::id()));
    let src = image(16);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&src).unwrap();
    let built = UffdRegion::new(16 * PAGE, 0, f, 1);
    std::fs::remove_file(&path).unwrap();
    let e = match built {
        Ok(r) => {
            std::hint::black_box(r.as_slice()[0]);
            panic!("a region over a write-only file was built and read");
        }
        Err(e) => e,
    };
    println!("{e}");
    assert!(
        matches!(
            e,
            Error::SourceUnreadable {
                what: "page source",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("open it for reading"), "{e}");
}

/// `over_page_cache` of a file that is not shmem (here one in the build
/// directory) is refused naming that, where it said "this kernel lacks
/// userfaultfd support" (the kernel refuses minor-fault registration of
/// such a file with EINVAL on any version). Skipped where no directory at
/// hand is off tmpfs.
#[test]
fn a_page_cache_region_over_a_file_not_in_shmem_names_the_cause() {
    let _hang =
        mmbatch_testkit::hang_guard("a_page_cache_region_over_a_file_not_in_shmem_names_the_cause");
    // The build directory, else the temporary one (the test binary may run
    // where neither exists as built: the VM guest), whichever is not tmpfs.
    let not_tmpfs = |dir: &std::path::Path| {
        rustix::fs::statfs(dir).is_ok_and(|fs| {
            // The field's and the constant's types differ between targets.
            #[allow(clippy::unnecessary_cast)]
            let tmpfs = fs.f_type as i64 == libc::TMPFS_MAGIC as i64;
            !tmpfs
        })
    };
    let candidates = [
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        std::env::temp_dir(),
    ];
    let Some(dir) = candidates.iter().find(|d| not_tmpfs(d)) else {
        println!("skipped: no directory here is off tmpfs");
        return;
    };
    let path = dir.join(format!("not-shmem-{}", std::process::id()));
    std::fs::write(&path, image(16)).unwrap();
    // Read-write: the region's shared mapping is writable.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: this test's own file, not written or truncated while mapped.
    let r = unsafe { UffdRegion::over_page_cache(&file, 16 * PAGE, 0, 1) };
    std::fs::remove_file(&path).unwrap();
    let e = r.unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("must be shmem"), "{e}");
}

/// A lazy region's bookkeeping grows with the pages it serves, not with
/// its size: a 1 TiB region (a sparse image, reserved with
/// `MAP_NORESERVE`) serving one fault, with `resident_pages()` asked,
/// costs the process under 1 MiB (360 KiB here). Before: 288 MiB — a
/// bitmap of discarded pages written whole at build (32 MiB), and
/// `resident_pages` asking `mincore` about the whole region at once into a
/// byte per page (256 MiB; shutdown's fill did the same); 16 TiB cost
/// 4.5 GiB. Peak RSS growth, in a child process.
#[test]
fn a_huge_sparse_region_costs_memory_by_its_pages_not_its_size() {
    let name = "a_huge_sparse_region_costs_memory_by_its_pages_not_its_size";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(60)) {
        run.expect_success();
        return;
    }
    let kib = |field: &str| -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = kib("VmRSS:");
    // 1 TiB; 1 GiB on a 32-bit target.
    let len = usize::try_from(1u64 << 40).unwrap_or(1 << 30);
    let r = UffdRegion::new(len, 4, Zeroes(len as u64), 1).unwrap();
    assert_eq!(r.as_slice()[len / 2 + 3 * PAGE], 0);
    assert_eq!(r.resident_pages(), 16);
    let grown = kib("VmHWM:").saturating_sub(before);
    println!("peak RSS growth: {grown} KiB");
    assert!(
        grown < 32 << 10,
        "a {} GiB region serving one fault grew the peak RSS by {grown} KiB",
        len >> 30
    );
}

/// CPU time (user + system, in clock ticks) of this process's thread
/// named `name`.
fn thread_cpu_ticks(name: &str) -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // After the ")" that ends the name: state is field 3, utime 14,
        // stime 15.
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        return Some(rest[11].parse::<u64>().ok()? + rest[12].parse::<u64>().ok()?);
    }
    None
}

/// Busy polling with and without: every page served, the same contents;
/// and a handler busy-polls only between faults, never while the region
/// is idle — an idle second costs it no CPU to speak of (a handler that
/// kept polling would burn the whole second). In a child process: the
/// handler is found by its thread's name, which every region's first
/// handler shares with the other tests' running beside it.
#[test]
fn busy_polling_serves_the_same_and_stops_when_faults_do() {
    use std::time::Duration;
    let name = "busy_polling_serves_the_same_and_stops_when_faults_do";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(60)) {
        run.expect_success();
        return;
    }
    let src = image(64);
    for window in [
        Duration::ZERO,
        Duration::from_micros(100),
        mmbatch_faultaround::MAX_BUSY_POLL,
    ] {
        let r = UffdRegion::builder(64 * PAGE)
            .busy_poll(window)
            .build(src.clone())
            .unwrap();
        assert!(r.as_slice() == src.as_slice(), "{window:?}");
        assert_eq!(r.stats().faults, 64, "{window:?}");
        let Some(before) = thread_cpu_ticks("uffd-handler-0") else {
            eprintln!("no /proc/self/task here: the CPU bound is not checked");
            continue;
        };
        std::thread::sleep(Duration::from_secs(1));
        let spent = thread_cpu_ticks("uffd-handler-0").unwrap() - before;
        // Clock ticks are 10 ms; a polling handler would spend ~100.
        assert!(
            spent <= 5,
            "{window:?}: the idle handler spent {spent} ticks of CPU in 1 s"
        );
    }
}

/// Dropping a region whose handlers are idle returns as soon as its
/// threads have left, and not before: the source timeout bounds only the
/// wait for a thread stuck inside the source, and an idle region has
/// none (a drop that waited for the deadline regardless would take 120 s
/// here); a drop that did not wait for its threads would return with
/// their userfaultfd and eventfd still open.
#[test]
fn an_idle_regions_drop_does_not_wait_for_the_source_timeout() {
    // In a child: the other tests' regions open descriptors of these kinds.
    let name = "an_idle_regions_drop_does_not_wait_for_the_source_timeout";
    if let Some(run) = mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let fds = || mmbatch_testkit::open_fds_of(&["userfaultfd", "eventfd"]);
    let before = fds();
    let src = image(16);
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(std::time::Duration::from_secs(120))
        .build(src.clone())
        .unwrap();
    assert_eq!(r.as_slice()[5 * PAGE + 1], src[5 * PAGE + 1]);
    let done = Arc::new(AtomicBool::new(false));
    let dropped = done.clone();
    let start = std::time::Instant::now();
    let after = std::thread::spawn(move || {
        drop(r);
        dropped.store(true, Ordering::Release);
        fds()
    });
    mmbatch_testkit::wait_until(
        "an idle region's drop",
        std::time::Duration::from_secs(10),
        || done.load(Ordering::Acquire),
    );
    println!("drop took {:?}", start.elapsed());
    assert_eq!(after.join().unwrap(), before, "descriptors open after drop");
    std::process::exit(0);
}

/// A page the application discards before its first touch (a REMOVE
/// event) reads as zeros even when a neighbour's window would copy over
/// it, and only that page does: the window is copied around it, and the
/// pages before it in the region keep the image's bytes.
#[test]
fn a_page_discarded_before_its_first_touch_reads_zeros_inside_a_window() {
    let src = image(16);
    let mut r = UffdRegion::builder(16 * PAGE)
        .order(2)
        .build(src.clone())
        .unwrap();
    // SAFETY: one page of the region's own mapping; MADV_DONTNEED on
    // missing anonymous memory only discards, and the kernel hands the
    // handler a REMOVE event for it before madvise returns.
    let rc = unsafe {
        libc::madvise(
            r.as_mut_ptr().wrapping_add(6 * PAGE).cast(),
            PAGE,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
    // Page 4's fault: its window, pages 4..8, is copied around page 6.
    assert_eq!(r.as_slice()[4 * PAGE + 1], src[4 * PAGE + 1]);
    let mem = r.as_slice();
    assert!(mem[6 * PAGE..7 * PAGE].iter().all(|&b| b == 0), "page 6");
    assert_eq!(&mem[..6 * PAGE], &src[..6 * PAGE]);
    assert_eq!(&mem[7 * PAGE..], &src[7 * PAGE..]);
    assert_eq!(r.stats().remove_events, 1);
}

/// A page-cache region's `shutdown` maps every cached page even where
/// pages already mapped alternate with missing ones: each such page stops
/// a `UFFDIO_CONTINUE` short (EAGAIN after the pages before it), which
/// the bound on retries counted as a call without progress, so past 16
/// of them it napped and, at the source timeout, gave up with the rest
/// unmapped (old code: 53 of 64 pages mapped here).
#[test]
fn a_shutdown_maps_a_page_cache_whose_mapped_pages_alternate() {
    let _hang =
        mmbatch_testkit::hang_guard("a_shutdown_maps_a_page_cache_whose_mapped_pages_alternate");
    let pages = 64;
    let src = image(pages);
    let cache = UffdRegion::page_cache_from(&src, pages * PAGE).unwrap();
    // SAFETY: the memfd is this test's own; nothing writes or truncates it.
    let r = unsafe {
        UffdRegion::builder(pages * PAGE)
            .order(0)
            .source_timeout(mmbatch_faultaround::MIN_SOURCE_TIMEOUT)
            .build_over_page_cache(&cache)
    }
    .unwrap();
    for p in (1..pages).step_by(2) {
        assert_eq!(r.as_slice()[p * PAGE], src[p * PAGE], "page {p}");
    }
    assert_eq!(r.stats().pages_copied, (pages / 2) as u64);
    r.shutdown();
    let st = r.stats();
    assert_eq!(st.pages_copied, pages as u64, "pages mapped in all: {st:?}");
    assert!(r.as_slice() == src.as_slice());
}
