//! Bad input and failing sources: nothing hangs, nothing panics, no safe
//! call reads memory it should not. Scenarios that hung on the old code run
//! in a child process with a bounded wait.

use std::{
    fs::File,
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use mmbatch_faultaround::{Error, FailSignal, PageRead, PageSource, UffdRegion};
use mmbatch_testkit::{child, signal};

const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(20);

fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251) as u8)
        .collect()
}

fn temp_file(data: &[u8]) -> File {
    let path = std::env::temp_dir().join(format!(
        "mmbatch-fa-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.write_all(data).unwrap();
    f
}

/// The file is truncated after the region is made: a read past the new
/// end used to block forever (the source said "not ready" for good), and
/// so did drop. Now the page fails: it is never filled, the failure is
/// recorded, and drop finishes.
#[test]
fn truncated_file_source_neither_hangs_nor_zero_fills() {
    if let Some(run) = child::parent("truncated_file_source_neither_hangs_nor_zero_fills", LIMIT) {
        run.expect_success();
        return;
    }
    let data = image(64);
    let file = temp_file(&data);
    let r = UffdRegion::new(64 * PAGE, 0, file.try_clone().unwrap(), 1).unwrap();
    assert_eq!(r.as_slice()[3 * PAGE], data[3 * PAGE]);
    file.set_len(8 * PAGE as u64).unwrap();
    // Page 40 is past the end now: its reader gets the region's signal,
    // and the failure says why.
    let sig = touch(&r, 40 * PAGE);
    assert_eq!(sig, expected_signal(&r), "page 40");
    let e = r.failure().expect("the failure is recorded");
    println!("{e}");
    assert!(matches!(e, Error::PageFailed { page: 40, .. }), "{e}");
    assert!(e.to_string().contains("past the end of the file"), "{e}");
    // The other missing pages past the end fail too; shutdown and drop
    // finish.
    r.shutdown();
    assert!(r.stats().pages_failed >= 56, "{:?}", r.stats());
    drop(r);
    std::process::exit(0);
}

/// On a kernel with `UFFDIO_POISON` (Linux 6.6) a region fails a page by
/// poisoning it, so its readers get SIGBUS: the path the docs promise
/// there, not the `PROT_NONE` fallback (SIGSEGV) that older kernels get.
#[test]
fn a_region_poisons_failed_pages_where_the_kernel_can() {
    let r = UffdRegion::builder(16 * PAGE)
        .build(mmbatch_faultaround::Zeroes(16 * PAGE as u64))
        .unwrap();
    let want = if mmbatch_testkit::kernel_at_least(6, 6) {
        FailSignal::Sigbus
    } else {
        FailSignal::Sigsegv
    };
    assert_eq!(r.fail_signal(), want);
}

fn expected_signal(r: &UffdRegion) -> i32 {
    match r.fail_signal() {
        FailSignal::Sigbus => {
            println!("path: UFFDIO_POISON (Linux 6.6+): a failed page gets SIGBUS");
            libc::SIGBUS
        }
        _ => {
            println!("path: PROT_NONE fallback (no UFFDIO_POISON): a failed page gets SIGSEGV");
            libc::SIGSEGV
        }
    }
}

// ---- touching a page that cannot be filled --------------------------------

/// The signal a read of byte `offset` of `r` got (0: none); in a child
/// process only.
fn touch(r: &UffdRegion, offset: usize) -> i32 {
    // SAFETY: inside the region, which the caller keeps until it exits.
    unsafe { signal::touch(r.as_ptr() as usize + offset, Duration::from_secs(10)) }
}

/// Page `bad` panics in `read_page`; the rest are zeroes.
struct Panicky {
    bad: u64,
}

impl PageSource for Panicky {
    fn len(&self) -> u64 {
        1 << 20
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        assert!(index != self.bad, "injected: page {index} cannot be read");
        buf.fill(1);
        PageRead::Ready
    }
}

/// A source that panics on one page used to kill the only handler thread:
/// that page's reader, and every later fault, then blocked forever.
#[test]
fn panicking_source_fails_its_page_and_the_handler_lives_on() {
    if let Some(run) = child::parent(
        "panicking_source_fails_its_page_and_the_handler_lives_on",
        LIMIT,
    ) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::new(64 * PAGE, 0, Panicky { bad: 5 }, 1).unwrap();
    assert_eq!(r.as_slice()[PAGE], 1);
    let sig = touch(&r, 5 * PAGE);
    println!("page 5: signal {sig}");
    assert_eq!(sig, expected_signal(&r));
    let e = r.failure().unwrap().to_string();
    assert!(e.contains("panicked reading page 5"), "{e}");
    assert!(
        e.contains("injected: page 5 cannot be read"),
        "the panic's message: {e}"
    );
    // The handler still serves other pages.
    assert_eq!(r.as_slice()[9 * PAGE], 1);
    std::process::exit(0);
}

/// `on_failure` hears of each failed page as it fails, the page, its
/// signal and the source's cause, where `failure` keeps the first only; a
/// panicking callback leaves the handler serving.
#[test]
fn on_failure_hears_each_failed_page() {
    use std::sync::{Arc, Mutex};
    if let Some(run) = child::parent("on_failure_hears_each_failed_page", LIMIT) {
        run.expect_success();
        return;
    }
    let builder = format!("{:?}", UffdRegion::builder(PAGE).on_failure(|_| {}));
    assert!(
        builder.contains("on_failure: Some(OnFailure(..))"),
        "{builder}"
    );
    let heard = Arc::new(Mutex::new(Vec::new()));
    let log = heard.clone();
    let r = UffdRegion::builder(64 * PAGE)
        .on_failure(move |e| {
            let Error::PageFailed { page, signal, .. } = &e else {
                panic!("not a page's failure: {e}");
            };
            log.lock().unwrap().push((*page, *signal, e.to_string()));
        })
        .build(Panicky { bad: 5 })
        .unwrap();
    assert_eq!(touch(&r, 5 * PAGE), expected_signal(&r));
    let r = {
        // A second region, whose callback panics.
        let second = UffdRegion::builder(64 * PAGE)
            .on_failure({
                let log = heard.clone();
                move |e| {
                    if let Error::PageFailed { page, signal, .. } = &e {
                        log.lock().unwrap().push((*page, *signal, e.to_string()));
                    }
                    panic!("injected: the callback panics");
                }
            })
            .build(Panicky { bad: 7 })
            .unwrap();
        assert_eq!(touch(&second, 7 * PAGE), expected_signal(&second));
        // The handler lived through the callback's panic.
        assert_eq!(second.as_slice()[9 * PAGE], 1);
        r
    };
    let heard = heard.lock().unwrap().clone();
    let signal = Some(r.fail_signal());
    assert_eq!(
        heard.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>(),
        [(5, signal), (7, signal)]
    );
    assert!(
        heard[0].2.contains("injected: page 5 cannot be read"),
        "{heard:?}"
    );
    std::process::exit(0);
}

/// `pages()` returning fewer bytes than asked used to make the kernel copy
/// whatever memory followed the slice into the region (here: past the end
/// of the source's allocation, so the copy failed with EFAULT and the
/// reader refaulted forever).
#[test]
fn a_short_pages_slice_is_not_trusted() {
    if let Some(run) = child::parent("a_short_pages_slice_is_not_trusted", LIMIT) {
        run.expect_success();
        return;
    }
    /// Pages stored last-first, so the bytes after page i are page i - 1.
    struct Short(Vec<u8>);
    impl Short {
        fn at(&self, index: u64) -> usize {
            self.0.len() - (index as usize + 1) * PAGE
        }
    }
    impl PageSource for Short {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            let at = self.at(index);
            buf.copy_from_slice(&self.0[at..at + PAGE]);
            PageRead::Ready
        }
        fn pages(&self, index: u64, _count: usize, _page_size: usize) -> Option<&[u8]> {
            // One page, whatever was asked: a bug in the source.
            let at = self.at(index);
            self.0.get(at..at + PAGE)
        }
    }
    let data = image(16);
    let reversed: Vec<u8> = data.chunks(PAGE).rev().flatten().copied().collect();
    let r = UffdRegion::new(16 * PAGE, 4, Short(reversed), 1).unwrap();
    assert!(
        r.as_slice() == &data[..],
        "the region differs from the source's pages"
    );
}

/// A source that never has a page: the reader used to wait forever; now
/// the page fails after the source timeout.
#[test]
fn a_page_never_ready_fails_after_the_source_timeout() {
    if let Some(run) = child::parent("a_page_never_ready_fails_after_the_source_timeout", LIMIT) {
        run.expect_success();
        return;
    }
    struct Never;
    impl PageSource for Never {
        fn len(&self) -> u64 {
            1 << 20
        }
        fn read_page(&self, _: u64, _: &mut [u8]) -> PageRead {
            PageRead::NotReady
        }
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(200))
        .build(Never)
        .unwrap();
    let start = std::time::Instant::now();
    assert_eq!(touch(&r, 3 * PAGE), expected_signal(&r));
    assert!(start.elapsed() < Duration::from_secs(5));
    let e = r.failure().unwrap();
    assert!(e.to_string().contains("within 200ms"), "{e}");
    // Shutdown gives the source the timeout once, not per page.
    let start = std::time::Instant::now();
    r.shutdown();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.stats().pages_failed, 16);
    std::process::exit(0);
}

/// A source stuck inside `read_page`: drop returns after the source
/// timeout instead of joining the stuck handler forever.
#[test]
fn drop_is_bounded_when_the_source_blocks() {
    if let Some(run) = child::parent("drop_is_bounded_when_the_source_blocks", LIMIT) {
        run.expect_success();
        return;
    }
    struct Stuck;
    impl PageSource for Stuck {
        fn len(&self) -> u64 {
            1 << 20
        }
        fn read_page(&self, _: u64, _: &mut [u8]) -> PageRead {
            std::thread::sleep(Duration::from_secs(3600));
            PageRead::NotReady
        }
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(Stuck)
        .unwrap();
    // A reader blocks in the fault (and, once the region is gone, takes
    // SIGSEGV on the unmapped address, which `touch` catches).
    let addr = r.as_ptr() as usize + 7 * PAGE;
    // SAFETY: the region's memory; the read fails with a signal once it
    // is unmapped, which parks the reading thread.
    unsafe { signal::read_in_background(addr) };
    std::thread::sleep(Duration::from_millis(100));
    let start = std::time::Instant::now();
    drop(r);
    let took = start.elapsed();
    println!("drop took {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    std::process::exit(0);
}

/// A handler thread left in the source by drop (past the deadline) must
/// install nothing once the region is gone: `UFFDIO_COPY` checks only that
/// its range is registered with some userfaultfd, so before, its late
/// copies of a window's neighbours landed in whatever was mapped and
/// registered at the old address next (here another userfaultfd's range,
/// mapped there with `MAP_FIXED_NOREPLACE`): the old image's bytes in
/// another mapping's pages.
#[test]
fn a_handler_left_in_the_source_installs_nothing_after_drop() {
    let name = "a_handler_left_in_the_source_installs_nothing_after_drop";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static RELEASE: AtomicBool = AtomicBool::new(false);
    static RETURNED: AtomicBool = AtomicBool::new(false);
    /// Page 4 at once; every other page waits for `RELEASE`.
    struct HeldNeighbours;
    impl PageSource for HeldNeighbours {
        fn len(&self) -> u64 {
            (16 * PAGE) as u64
        }
        fn read_page(&self, p: u64, buf: &mut [u8]) -> PageRead {
            if p != 4 {
                while !RELEASE.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                RETURNED.store(true, Ordering::Release);
            }
            buf.fill(0xAA);
            PageRead::Ready
        }
    }
    let len = 16 * PAGE;
    let r = UffdRegion::builder(len)
        .order(2)
        .source_timeout(Duration::from_millis(300))
        .build(HeldNeighbours)
        .unwrap();
    let base = r.as_ptr() as usize;
    // Page 4 comes at once; its window's neighbours hold the handler.
    assert_eq!(r.as_slice()[4 * PAGE], 0xAA);
    drop(r);
    // Another mapping at the same address, registered with another
    // userfaultfd (as the next region, or a VMM's, would be).
    // SAFETY: the range the region just unmapped; NOREPLACE fails rather
    // than map over anything else.
    let again = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(again as usize, base, "mmap at the old address");
    let _other = mmbatch_testkit::vmm::userfaultfd(&[(again.cast(), len)], 0);
    RELEASE.store(true, Ordering::Release);
    mmbatch_testkit::wait_until(
        "the held source call returns",
        Duration::from_secs(10),
        || RETURNED.load(Ordering::Acquire),
    );
    // The old thread has made its copies, had it made them, once it has
    // left (it exits when it finds the region stopped).
    assert_eq!(
        mmbatch_testkit::threads_named_settled("uffd-", 0, child::scaled(Duration::from_secs(10))),
        0,
        "the dropped region's threads are gone"
    );
    let mut present = vec![0u8; 16];
    // SAFETY: our mapping of `len` bytes, one byte per page out.
    let r = unsafe { libc::mincore(again, len, present.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    let filled: Vec<usize> = (0..16).filter(|&p| present[p] & 1 != 0).collect();
    println!("pages present in the new mapping: {filled:?}");
    assert!(
        filled.is_empty(),
        "the dropped region's thread filled {filled:?}"
    );
    std::process::exit(0);
}

/// A handler left in the source past shutdown, whose call then fails, must
/// not fail the page in memory that is the application's again: with
/// `UFFDIO_POISON` refused once the region is retired, the fallback
/// `mprotect` checked only that the region was still mapped, and made a
/// page the application had since discarded `PROT_NONE`.
#[test]
fn a_handler_left_in_the_source_protects_nothing_after_shutdown() {
    let name = "a_handler_left_in_the_source_protects_nothing_after_shutdown";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static RELEASE: AtomicBool = AtomicBool::new(false);
    static RETURNED: AtomicBool = AtomicBool::new(false);
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    /// Page 5's first call waits for `RELEASE` and then fails; every
    /// other call (shutdown's fill of page 5 among them) answers at once.
    struct FirstCallFails;
    impl PageSource for FirstCallFails {
        fn len(&self) -> u64 {
            (8 * PAGE) as u64
        }
        fn read_page(&self, p: u64, buf: &mut [u8]) -> PageRead {
            if p == 5 && CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
                while !RELEASE.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                RETURNED.store(true, Ordering::Release);
                return PageRead::Failed(std::io::Error::other("the download broke"));
            }
            buf.fill(0xAA);
            PageRead::Ready
        }
    }
    // Long enough for the shutdown below to come before the watchdog
    // claims the held call, on a loaded host too (ten times so under
    // emulation).
    let r = UffdRegion::builder(8 * PAGE)
        .source_timeout(child::scaled(Duration::from_secs(1)))
        .build(FirstCallFails)
        .unwrap();
    let page5 = r.as_ptr() as usize + 5 * PAGE;
    // A reader faults on page 5; the handler's call for it holds.
    read_in_background(&r, 5);
    mmbatch_testkit::wait_until("the held call", Duration::from_secs(5), || {
        CALLS.load(Ordering::SeqCst) > 0
    });
    // Shutdown leaves the held handler behind and fills page 5 itself.
    r.shutdown();
    assert_eq!(r.as_slice()[5 * PAGE], 0xAA, "shutdown filled page 5");
    // The memory is the application's: it discards page 5 ...
    // SAFETY: one page of the region, which no reference covers.
    let d = unsafe { libc::madvise(page5 as *mut libc::c_void, PAGE, libc::MADV_DONTNEED) };
    assert_eq!(d, 0, "madvise: {}", std::io::Error::last_os_error());
    // ... and the left-behind call fails its page.
    let_go(&RELEASE, &RETURNED);
    // The left-behind thread exits once it has dealt with the failure.
    assert_eq!(
        mmbatch_testkit::threads_named_settled("uffd-", 0, child::scaled(Duration::from_secs(10))),
        0,
        "the region's threads are gone"
    );
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| {
            let (range, _) = l.split_once(' ').unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            );
            (a..b).contains(&page5)
        })
        .expect("page 5 is mapped");
    assert!(
        line.split_whitespace().nth(1).unwrap().starts_with("rw"),
        "a thread left behind protected the application's page 5: {line}"
    );
    assert_eq!(r.as_slice()[5 * PAGE], 0, "page 5 discarded reads zeros");
    std::process::exit(0);
}

#[test]
fn handler_counts_are_checked() {
    for n in [0, mmbatch_faultaround::MAX_HANDLERS + 1, usize::MAX] {
        let e = UffdRegion::new(PAGE, 0, mmbatch_faultaround::Zeroes(1 << 20), n).unwrap_err();
        assert!(matches!(e, Error::BadHandlers { .. }), "{e}");
    }
}

/// A scripted source. Reading a page in `stuck` (every page with
/// `stuck_all`) sleeps an hour; one in `not_ready` answers `NotReady` after
/// `not_ready_call`; page `held` waits until `release` is set (then sets
/// `returned`); any other page takes `each` and is filled with its index.
#[derive(Default)]
struct Script {
    stuck: &'static [u64],
    stuck_all: bool,
    not_ready: &'static [u64],
    not_ready_call: Duration,
    held: Option<u64>,
    each: Duration,
    release: Arc<AtomicBool>,
    returned: Arc<AtomicBool>,
}

impl PageSource for Script {
    fn len(&self) -> u64 {
        1 << 20
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if self.stuck_all || self.stuck.contains(&index) {
            std::thread::sleep(Duration::from_secs(3600));
        } else if self.not_ready.contains(&index) {
            std::thread::sleep(self.not_ready_call);
            return PageRead::NotReady;
        } else if self.held == Some(index) {
            while !self.release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.returned.store(true, Ordering::SeqCst);
        } else {
            std::thread::sleep(self.each);
        }
        buf.fill(index as u8);
        PageRead::Ready
    }
}

/// A source stuck inside `read_page` held the faulting thread for good
/// (the source timeout only bounds `NotReady`): now the watchdog fails
/// that page after the source timeout, and a replacement handler serves
/// the next fault.
#[test]
fn a_source_stuck_in_read_page_fails_the_fault_not_the_region() {
    let name = "a_source_stuck_in_read_page_fails_the_fault_not_the_region";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(Script {
            stuck: &[5],
            ..Script::default()
        })
        .unwrap();
    let start = std::time::Instant::now();
    assert_eq!(touch(&r, 5 * PAGE), expected_signal(&r));
    let took = start.elapsed();
    println!("the stuck page failed after {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let e = r.failure().unwrap();
    assert!(matches!(e, Error::PageFailed { page: 5, .. }), "{e}");
    assert!(e.to_string().contains("did not return"), "{e}");
    // The only handler is still inside the source: its replacement serves
    // this read (a hang here is the child's time limit).
    assert_eq!(r.as_slice()[9 * PAGE + 1], 9);
    // Shutdown skips the failed page and is not held by the stuck thread
    // longer than the source timeout.
    let start = std::time::Instant::now();
    r.shutdown();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    std::process::exit(0);
}

/// A source stuck on every page: each fault is failed after the source
/// timeout, by the watchdog once no handler is free, and the stuck
/// threads are bounded (twice as many handler threads as handlers).
#[test]
fn a_source_stuck_on_every_page_fails_each_fault() {
    let name = "a_source_stuck_on_every_page_fails_each_fault";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(200))
        .build(Script {
            stuck_all: true,
            ..Script::default()
        })
        .unwrap();
    for (n, page) in [3usize, 7, 11, 13].into_iter().enumerate() {
        read_in_background(&r, page);
        wait_failed(&r, n as u64 + 1, &format!("page {page}"));
    }
    // The handler, its one replacement (both stuck) and the watchdog.
    assert_eq!(mmbatch_testkit::threads_named("uffd-"), 3);
    std::process::exit(0);
}

/// Shutdown called the source on the caller's thread: a source stuck
/// inside `read_page` held it for good. Now each call stuck past the
/// source timeout fails its page, and after four the rest are failed.
#[test]
fn shutdown_is_bounded_when_the_source_blocks() {
    if let Some(run) = child::parent("shutdown_is_bounded_when_the_source_blocks", LIMIT) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(Script {
            stuck_all: true,
            ..Script::default()
        })
        .unwrap();
    let start = std::time::Instant::now();
    r.shutdown();
    let took = start.elapsed();
    println!("shutdown took {took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert_eq!(r.stats().pages_failed, 16);
    let e = r.failure().unwrap();
    assert!(e.to_string().contains("shutdown gave up on page 0"), "{e}");
    std::process::exit(0);
}

/// Pages a source keeps saying `NotReady` for (each call taking 0.45 of
/// the timeout, so each fault lasts 1.35 of it, longer than the timeout and
/// a watchdog tick) are failed by their handler at the timeout; the
/// watchdog, which is for calls that never return, must not take them
/// too: when it timed the whole fault, each such page used up a
/// replacement handler, and after two the region failed every fault.
#[test]
fn not_ready_pages_leave_the_handlers_serving() {
    let name = "not_ready_pages_leave_the_handlers_serving";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    // Scaled under emulation: a host that stops the guest for the
    // call's margin (0.55 of the timeout) would have the watchdog claim
    // a call that did return.
    let timeout = child::scaled(Duration::from_millis(400));
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(timeout)
        .build(Script {
            not_ready: &[2, 3, 4],
            not_ready_call: timeout * 45 / 100,
            ..Script::default()
        })
        .unwrap();
    for (n, page) in [2usize, 3, 4].into_iter().enumerate() {
        read_in_background(&r, page);
        wait_failed(&r, n as u64 + 1, &format!("page {page}"));
    }
    // Served, not failed (a failure parks this thread: the child's limit).
    assert_eq!(r.as_slice()[9 * PAGE], 9);
    // Failed by its handler, not taken by the watchdog.
    let e = r.failure().unwrap().to_string();
    assert!(e.contains("ready within"), "{e}");
    std::process::exit(0);
}

/// Lets a [`Script`]'s held call return, and waits (up to 5 s) until it
/// has.
fn let_go(release: &AtomicBool, returned: &AtomicBool) {
    release.store(true, Ordering::SeqCst);
    mmbatch_testkit::wait_until("the held call to return", Duration::from_secs(5), || {
        returned.load(Ordering::SeqCst)
    });
}

/// Reads page `page` of `r` on a thread of its own, which a failed page's
/// signal parks; in a child process only.
fn read_in_background(r: &UffdRegion, page: usize) {
    // SAFETY: the region's memory, which the child keeps until it exits.
    unsafe { signal::read_in_background(r.as_ptr() as usize + page * PAGE) };
}

/// Waits up to 5 s ([`child::scaled`]) for `r` to have failed `n` pages.
fn wait_failed(r: &UffdRegion, n: u64, what: &str) {
    mmbatch_testkit::wait_until(what, child::scaled(Duration::from_secs(5)), || {
        r.stats().pages_failed >= n
    });
}

/// With one handler: page 5's call is stuck past the timeout (failed, a
/// replacement starts in another slot), then page 7's too (failed; no slot
/// is free), then page 5's call returns. Its thread must not touch the
/// replacement's watch — the two once shared a slot, and the old thread's
/// return hid the stuck call of page 7, whose reader then waited forever —
/// and it must serve again: left to exit, it freed a slot that nothing
/// filled, and the region failed every fault from then on.
#[test]
fn a_stall_that_returns_leaves_the_watchdog_whole() {
    let name = "a_stall_that_returns_leaves_the_watchdog_whole";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let source = Script {
        held: Some(5),
        stuck: &[7],
        ..Script::default()
    };
    let (release, returned) = (source.release.clone(), source.returned.clone());
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(source)
        .unwrap();
    read_in_background(&r, 5);
    wait_failed(&r, 1, "page 5, stuck past the timeout,");
    read_in_background(&r, 7);
    wait_failed(&r, 2, "page 7, stuck for good,");
    let_go(&release, &returned);
    // A few microseconds of work for page 5's thread to serve again.
    std::thread::sleep(Duration::from_millis(200));
    // Served, not failed (a failure parks this thread: the child's limit).
    assert_eq!(r.as_slice()[9 * PAGE], 9);
    std::process::exit(0);
}

/// With one handler: page 5's call is stuck past the timeout (failed, a
/// replacement serves in its place), then returns. The region already has
/// its one handler serving, so the returning thread leaves: threads stay
/// bounded by the handlers asked for, not one more for every stall that
/// ends.
#[test]
fn a_stall_that_returns_to_a_served_region_leaves() {
    let name = "a_stall_that_returns_to_a_served_region_leaves";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let source = Script {
        held: Some(5),
        ..Script::default()
    };
    let (release, returned) = (source.release.clone(), source.returned.clone());
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(source)
        .unwrap();
    read_in_background(&r, 5);
    wait_failed(&r, 1, "page 5, stuck past the timeout,");
    // The replacement serves.
    assert_eq!(r.as_slice()[9 * PAGE], 9);
    // The handler inside the source, its replacement and the watchdog.
    assert_eq!(mmbatch_testkit::threads_named("uffd-"), 3);
    let_go(&release, &returned);
    mmbatch_testkit::wait_until(
        "the returned handler thread to leave",
        Duration::from_secs(5),
        || mmbatch_testkit::threads_named("uffd-") == 2,
    );
    // Still served by the one that stayed.
    assert_eq!(r.as_slice()[11 * PAGE], 11);
    std::process::exit(0);
}

/// A slow source that answers fills every page at shutdown, however long
/// that takes in all (a total limit failed pages a working source was
/// still filling); a call that lasts longer than the timeout fails its
/// page, and the fill goes on with the others.
#[test]
fn shutdown_waits_for_a_slow_source_that_answers() {
    let name = "shutdown_waits_for_a_slow_source_that_answers";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let source = Script {
        stuck: &[7],
        each: Duration::from_millis(40),
        ..Script::default()
    };
    // 31 calls of 40 ms: 1.24 s in all, past the timeout; each call far
    // under it (a host that stops the process for a while must not make
    // one call look stuck; the timeout ten times so under emulation,
    // where the stuck page alone outlasts a limit on the whole fill).
    let r = UffdRegion::builder(32 * PAGE)
        .source_timeout(child::scaled(Duration::from_secs(1)))
        .build(source)
        .unwrap();
    // Page 7 never comes: touch none of it, and fill the rest.
    let start = std::time::Instant::now();
    r.shutdown();
    println!("shutdown took {:?}: {:?}", start.elapsed(), r.stats());
    assert_eq!(r.stats().pages_failed, 1, "only page 7 fails");
    for p in (0..32).filter(|&p| p != 7) {
        assert_eq!(r.as_slice()[p * PAGE], p as u8);
    }
    assert!(r.failure().unwrap().to_string().contains("page 7"));
    std::process::exit(0);
}

/// A source timeout of `Duration::MAX` (never give up) overflowed where
/// the handler computed its deadline: the fault failed, and its reader got
/// SIGBUS. Now it is a deadline far off: a page the source has ready only
/// at its third ask is waited for.
#[test]
fn an_endless_source_timeout_is_accepted() {
    /// Page 3 is not ready for the first two asks.
    struct Late(std::sync::atomic::AtomicUsize, Vec<u8>);
    impl PageSource for Late {
        fn len(&self) -> u64 {
            self.1.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            if index == 3 && self.0.fetch_add(1, Ordering::Relaxed) < 2 {
                return PageRead::NotReady;
            }
            let at = index as usize * buf.len();
            buf.copy_from_slice(&self.1[at..at + buf.len()]);
            PageRead::Ready
        }
    }
    if let Some(run) = child::parent("an_endless_source_timeout_is_accepted", LIMIT) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::MAX)
        .build(Late(0.into(), image(16)))
        .unwrap();
    assert_eq!(r.as_slice()[3 * PAGE + 1], image(16)[3 * PAGE + 1]);
    r.shutdown();
    assert_eq!(r.stats().pages_failed, 0);
    std::process::exit(0);
}

/// `page_cache_from` over a source that fails a page: an error naming
/// that page, not a cache with zeroes where the page failed.
#[test]
fn a_page_cache_from_a_failing_source_is_an_error() {
    struct FailsThree;
    impl PageSource for FailsThree {
        fn len(&self) -> u64 {
            8 * PAGE as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            if index == 3 {
                return PageRead::Failed(std::io::Error::other("injected"));
            }
            buf.fill(index as u8);
            PageRead::Ready
        }
    }
    let e = UffdRegion::page_cache_from(&FailsThree, 8 * PAGE).unwrap_err();
    assert!(matches!(e, Error::PageFailed { page: 3, .. }), "{e}");
}

/// Pages still downloading: the source says `NotReady` for each page's
/// first three calls, writing part of the page first (as a short read
/// does). The cache waits for each page and holds every byte of it; the
/// old one left the pages out (holes reading as zeros) without a word.
#[test]
fn a_page_cache_waits_for_pages_not_ready() {
    use std::sync::Mutex;
    struct Downloading(Mutex<Vec<u32>>);
    impl PageSource for Downloading {
        fn len(&self) -> u64 {
            8 * PAGE as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            let mut calls = self.0.lock().unwrap();
            calls[index as usize] += 1;
            if calls[index as usize] <= 3 {
                buf[..PAGE / 2].fill(0xEE);
                return PageRead::NotReady;
            }
            buf.copy_from_slice(&image(8)[index as usize * PAGE..][..PAGE]);
            PageRead::Ready
        }
    }
    let src = Downloading(Mutex::new(vec![0; 8]));
    let cache = UffdRegion::page_cache_from(&src, 8 * PAGE).unwrap();
    let mut back = vec![0u8; 8 * PAGE];
    std::os::unix::fs::FileExt::read_exact_at(&cache, &mut back, 0).unwrap();
    let wrong = (0..8).find(|&p| back[p * PAGE..][..PAGE] != image(8)[p * PAGE..][..PAGE]);
    assert_eq!(
        wrong, None,
        "page {wrong:?} of the cache is not the image's"
    );
}

/// A source whose `pages` slice is not the length asked for (a bug in
/// it): the page cache ignores the slice, as the handlers do, and holds
/// the image. Trusted, a slice of one page for a run of 512 left the
/// other 511 as zeros, and one too long wrote past its pages.
#[test]
fn a_page_cache_ignores_a_slice_of_the_wrong_length() {
    /// `pages` gives `extra + 1` pages from `index`, whatever was asked.
    struct Sloppy {
        image: Vec<u8>,
        extra: usize,
    }
    impl PageSource for Sloppy {
        fn len(&self) -> u64 {
            self.image.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            buf.copy_from_slice(&self.image[index as usize * PAGE..][..PAGE]);
            PageRead::Ready
        }
        fn pages(&self, index: u64, _count: usize, _page_size: usize) -> Option<&[u8]> {
            let at = index as usize * PAGE;
            self.image.get(at..at + (self.extra + 1) * PAGE)
        }
    }
    // 17 pages, the cache 16: a slice one page too long at page 15 would
    // write the 17th and grow the cache.
    for extra in [0, 1] {
        let src = Sloppy {
            image: image(17),
            extra,
        };
        let cache = UffdRegion::page_cache_from(&src, 16 * PAGE).unwrap();
        let mut back = vec![0u8; 16 * PAGE];
        std::os::unix::fs::FileExt::read_exact_at(&cache, &mut back, 0).unwrap();
        let wrong = (0..16).find(|&p| back[p * PAGE..][..PAGE] != image(16)[p * PAGE..][..PAGE]);
        assert_eq!(
            wrong, None,
            "{} extra page(s): page {wrong:?} is not the image's",
            extra
        );
        assert_eq!(cache.metadata().unwrap().len(), 16 * PAGE as u64);
    }
}

/// The page cache asks an in-memory source for whole runs of 512 pages
/// and then for the rest, not a page at a time (which the result alone
/// would not show: the bytes are the same).
#[test]
fn a_page_cache_is_written_a_run_at_a_time() {
    /// An image that records each `pages` request's first page and count.
    struct Runs(Vec<u8>, std::sync::Mutex<Vec<(u64, usize)>>);
    impl PageSource for Runs {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            buf.copy_from_slice(&self.0[index as usize * PAGE..][..PAGE]);
            PageRead::Ready
        }
        fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
            self.1.lock().unwrap().push((index, count));
            let at = index as usize * page_size;
            self.0.get(at..at + count * page_size)
        }
    }
    let src = Runs(image(600), std::sync::Mutex::new(Vec::new()));
    let cache = UffdRegion::page_cache_from(&src, 600 * PAGE).unwrap();
    let mut back = vec![0u8; 600 * PAGE];
    std::os::unix::fs::FileExt::read_exact_at(&cache, &mut back, 0).unwrap();
    assert!(back == src.0, "the cache is not the image");
    assert_eq!(*src.1.lock().unwrap(), [(0, 512), (512, 88)]);
}

/// A file's window read that fails part way (the file was truncated)
/// reads page by page: the pages before the failure hold their own bytes,
/// and the failure names the first page past the end.
#[test]
fn a_short_file_window_keeps_the_pages_before_the_end() {
    let image: Vec<u8> = (0..3 * PAGE).map(|b| (b % 251) as u8).collect();
    let f = temp_file(&image);
    let mut buf = vec![0xEE; 4 * PAGE];
    match PageSource::read_pages(&f, 1, 4, &mut buf) {
        PageRead::Failed(e) => assert!(e.to_string().contains("page 3 is past the end"), "{e}"),
        other => panic!("pages 1..5 of a 3-page file: {other:?}"),
    }
    assert!(buf[..2 * PAGE] == image[PAGE..], "pages 1 and 2 misread");
}

/// A window from a file (a source with no slice in memory, read page by
/// page) comes in whole with its one fault, the run of pages that ends
/// the window too.
#[test]
fn a_file_window_comes_in_with_one_fault() {
    let _hang = mmbatch_testkit::hang_guard("a_file_window_comes_in_with_one_fault");
    let data = image(64);
    let r = UffdRegion::new(64 * PAGE, 4, temp_file(&data), 1).unwrap();
    assert_eq!(r.as_slice(), &data[..]);
    let st = r.stats();
    assert_eq!((st.faults, st.pages_copied), (4, 64), "{st:?}");
}

/// Building a region over a regular file leaves the file's offset where
/// it was: its clones share that offset, and a user reading the snapshot
/// through one must not find it moved to the end (a block device's length
/// is still found by seeking, which moves it).
#[test]
fn a_region_over_a_file_leaves_its_offset_alone() {
    use std::io::{Read, Seek};
    let data = image(8);
    let f = temp_file(&data);
    let mut clone = f.try_clone().unwrap();
    // Writing the image left the shared offset at its end.
    clone.rewind().unwrap();
    let r = UffdRegion::new(8 * PAGE, 0, f, 1).unwrap();
    assert_eq!(clone.stream_position().unwrap(), 0);
    let mut first = vec![0u8; PAGE];
    clone.read_exact(&mut first).unwrap();
    assert_eq!(first, data[..PAGE]);
    drop(r);
}

/// `data` behind a free loop device, opened; `None`, saying why, where
/// none can be had (not root, no loop driver, no `losetup`, no device
/// node). Nothing is left behind however the test ends: the device is
/// detached at once (the kernel lets it go when this descriptor closes)
/// and its file removed (the device holds it open).
fn block_device_over(data: &[u8]) -> Option<File> {
    let file = std::env::temp_dir().join(format!("mmbatch-fa-loop-{}", std::process::id()));
    std::fs::write(&file, data).unwrap();
    let out = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_owned(),
        other => {
            eprintln!(
                "skipped: no loop device to be had (needs root, the loop driver and losetup): \
                 {other:?}"
            );
            return None;
        }
    };
    let opened = File::open(&dev);
    let _ = std::process::Command::new("losetup")
        .args(["-d", &dev])
        .status();
    match opened {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("skipped: {dev} could not be opened: {e}");
            None
        }
    }
}

/// A region over a block device (a snapshot kept on a volume) serves the
/// device's pages: its length, which the device's metadata gives as 0, is
/// the device's size.
#[test]
fn a_region_over_a_block_device_serves_its_pages() {
    use std::os::unix::fs::FileTypeExt;
    let _hang = mmbatch_testkit::hang_guard("a_region_over_a_block_device_serves_its_pages");
    let data = image(16);
    let Some(source) = block_device_over(&data) else {
        return;
    };
    assert!(source.metadata().unwrap().file_type().is_block_device());
    let r = UffdRegion::new(16 * PAGE, 0, source, 1).unwrap();
    assert_eq!(r.as_slice(), &data[..]);
    drop(r);
}

/// After `shutdown` the region is the process's ordinary memory: a page
/// the application discards reads back as zeroes, as anonymous memory
/// does, rather than faulting to handlers that are gone (a range left
/// registered held the discard, or the read after it, for good).
#[test]
fn a_shut_down_region_discards_as_anonymous_memory() {
    let name = "a_shut_down_region_discards_as_anonymous_memory";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let data = image(16);
    let mut r = UffdRegion::new(16 * PAGE, 0, data.clone(), 1).unwrap();
    r.shutdown();
    assert_eq!(r.as_slice(), &data[..], "shutdown installed every page");
    let at = r.as_mut_ptr().wrapping_add(5 * PAGE);
    // SAFETY: one whole page inside the region, which we borrow mutably.
    let rc = unsafe { libc::madvise(at.cast(), PAGE, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert!(r.as_slice()[5 * PAGE..6 * PAGE].iter().all(|&b| b == 0));
    assert_eq!(r.as_slice()[6 * PAGE..], data[6 * PAGE..]);
}

/// A source downloading its pages: page 3 says `NotReady` for its first
/// 600 ms (or for good, for the regions that must fail it). With a source timeout of 200 ms (a call that does not return
/// is caught that soon) and a not-ready timeout of 10 s, the page is
/// waited for and served; with the not-ready timeout left to its default
/// (the source timeout), it fails at 200 ms, as before the two were
/// apart. And a not-ready timeout shorter than the source timeout fails
/// such a page at once.
#[test]
fn a_page_not_ready_waits_for_its_own_timeout() {
    use std::{sync::Arc, time::Instant};
    if let Some(run) = child::parent("a_page_not_ready_waits_for_its_own_timeout", LIMIT) {
        run.expect_success();
        return;
    }
    /// Page 3 ready 600 ms after the start, or never (`None`).
    struct Downloading(Option<Instant>);
    impl PageSource for Downloading {
        fn len(&self) -> u64 {
            16 * PAGE as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            let ready = self
                .0
                .is_some_and(|start| start.elapsed() >= Duration::from_millis(600));
            if index == 3 && !ready {
                return PageRead::NotReady;
            }
            buf.fill(index as u8 + 1);
            PageRead::Ready
        }
    }
    let build = |not_ready: Option<Duration>, source: Duration, comes: bool| {
        let b = UffdRegion::builder(16 * PAGE).source_timeout(source);
        let b = match not_ready {
            Some(t) => b.not_ready_timeout(t),
            None => b,
        };
        Arc::new(b.build(Downloading(comes.then(Instant::now))).unwrap())
    };
    let waited = build(
        Some(Duration::from_secs(10)),
        Duration::from_millis(200),
        true,
    );
    assert_eq!(waited.as_slice()[3 * PAGE], 4, "{:?}", waited.failure());
    // Read on threads of their own (a failed page's reader is parked for
    // good): the failure is what tells.
    // Never ready for these two: their failures come from the timeouts
    // alone, however late a loaded machine gets to them.
    let failed = build(None, Duration::from_millis(200), false);
    let quick = build(Some(Duration::ZERO), Duration::from_secs(30), false);
    for r in [&failed, &quick] {
        // SAFETY: the region's memory, kept until this child exits.
        unsafe { signal::read_in_background(r.as_ptr() as usize + 3 * PAGE) };
    }
    mmbatch_testkit::wait_until("both pages failed", Duration::from_secs(5), || {
        failed.failure().is_some() && quick.failure().is_some()
    });
    let e = failed.failure().unwrap().to_string();
    assert!(e.contains("did not have page 3 ready within 200ms"), "{e}");
    let e = quick.failure().unwrap().to_string();
    assert!(e.contains("did not have page 3 ready within 0ns"), "{e}");
    std::process::exit(0);
}

/// Page `i` is ready once `wait_ready(i, _)` was called `after` times;
/// the waits are kept, with the timeouts they were given.
struct Landing {
    waits: std::sync::Mutex<Vec<(u64, Duration)>>,
    after: usize,
}

impl PageSource for Landing {
    fn len(&self) -> u64 {
        8 * PAGE as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        let waits = self.waits.lock().unwrap();
        if waits.iter().filter(|w| w.0 == index).count() < self.after {
            return PageRead::NotReady;
        }
        buf.copy_from_slice(&image(8)[index as usize * PAGE..][..PAGE]);
        PageRead::Ready
    }
    fn wait_ready(&self, index: u64, timeout: Duration) {
        // Recorded, not slept: a wait that really slept 4 ms against the
        // 16 ms source timeout of a test below could be claimed by the
        // watchdog on a loaded host, which is not what that test is for.
        self.waits.lock().unwrap().push((index, timeout));
    }
}

/// A [`Landing`] the test keeps a handle to.
struct Shared(Arc<Landing>);

impl PageSource for Shared {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.0.read_page(index, buf)
    }
    fn wait_ready(&self, index: u64, timeout: Duration) {
        self.0.wait_ready(index, timeout)
    }
}

/// With a source timeout under the handler's 5 ms nap, each wait is
/// given a quarter of the timeout at most: the watchdog times the wait as
/// a call, and took a default wait (a sleep) of 5 ms against a 4 ms
/// timeout for a hung source, failing a page that was only not ready.
#[test]
fn a_wait_for_a_page_stays_inside_the_source_timeout() {
    let name = "a_wait_for_a_page_stays_inside_the_source_timeout";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    // The 16 ms timeout (a quarter of it under the 5 ms nap) is short
    // enough for a host that stops this process's threads for it (a
    // guest under emulation on a busy host) to have the watchdog claim
    // a call: such a run is told by the watchdog's message and run
    // again; the waits' bound, the contract, is checked in every run.
    for attempt in 1..=5 {
        let src = Arc::new(Landing {
            waits: std::sync::Mutex::new(Vec::new()),
            after: 9,
        });
        let r = UffdRegion::builder(8 * PAGE)
            .source_timeout(Duration::from_millis(16))
            .not_ready_timeout(Duration::from_secs(5))
            .build(Shared(src.clone()))
            .unwrap();
        let sig = touch(&r, 3 * PAGE + 5);
        let waits = src.waits.lock().unwrap().clone();
        println!("attempt {attempt}: {waits:?}");
        let longest = waits.iter().map(|w| w.1).max();
        assert!(
            longest.is_none_or(|l| l == Duration::from_millis(4)),
            "{waits:?}"
        );
        if sig == 0 {
            assert_eq!(waits.len(), 9, "{waits:?}");
            std::process::exit(0);
        }
        let e = r.failure().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains("did not return from reading page 3 within 16ms"),
            "page 3 failed (signal {sig}) other than by a claimed call: {e}"
        );
    }
    panic!("the watchdog claimed a call in each of 5 runs: is this host that slow?");
}

/// A source with no `wait_ready` of its own is asked again after naps
/// (the default wait sleeps), not in a spin: a page not ready for 100 ms
/// is asked a few dozen times, where a wait that returned at once asked
/// thousands.
#[test]
fn a_page_not_ready_is_asked_after_naps() {
    /// Ready 100 ms after it is first asked for; counts the asks.
    struct Late(std::sync::Mutex<(Option<std::time::Instant>, usize)>);
    impl PageSource for Late {
        fn len(&self) -> u64 {
            8 * PAGE as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            let mut s = self.0.lock().unwrap();
            s.1 += 1;
            let first = *s.0.get_or_insert_with(std::time::Instant::now);
            if first.elapsed() < Duration::from_millis(100) {
                return PageRead::NotReady;
            }
            buf.copy_from_slice(&image(8)[index as usize * PAGE..][..PAGE]);
            PageRead::Ready
        }
    }
    let src = Arc::new(Late(std::sync::Mutex::new((None, 0))));
    /// The test's handle on the count.
    struct Handle(Arc<Late>);
    impl PageSource for Handle {
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            self.0.read_page(index, buf)
        }
    }
    let cache = UffdRegion::page_cache_from(&Handle(src.clone()), PAGE).unwrap();
    let mut back = vec![0u8; PAGE];
    std::os::unix::fs::FileExt::read_exact_at(&cache, &mut back, 0).unwrap();
    assert!(back == image(8)[..PAGE], "the cache is not the image");
    let asks = src.0.lock().unwrap().1;
    assert!(
        (2..200).contains(&asks),
        "page 0 was asked {asks} times in 100 ms"
    );
}

/// A source whose pages arrive only by its `wait_ready` (a download that
/// lands a page while the handler waits on it): the handler and the page
/// cache call it between a `NotReady` and the next read, with the nap as
/// its timeout, and serve the page as soon as it returns. The handler
/// that only slept failed the page at its not-ready timeout (the reader
/// got its signal).
#[test]
fn a_page_not_ready_is_waited_for_through_the_source() {
    use std::sync::Mutex;
    let name = "a_page_not_ready_is_waited_for_through_the_source";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let landing = || Landing {
        waits: Mutex::new(Vec::new()),
        after: 2,
    };
    let cache = UffdRegion::page_cache_from(&landing(), 8 * PAGE).unwrap();
    let mut back = vec![0u8; 8 * PAGE];
    std::os::unix::fs::FileExt::read_exact_at(&cache, &mut back, 0).unwrap();
    assert!(back == image(8), "the page cache is not the image");
    // Shared: the test reads the waits the handler made.
    let src = Arc::new(landing());
    let r = UffdRegion::builder(8 * PAGE)
        .not_ready_timeout(Duration::from_secs(2))
        .build(Shared(src.clone()))
        .unwrap();
    let sig = touch(&r, 3 * PAGE + 5);
    assert_eq!(sig, 0, "page 3 failed: {:?}", r.failure());
    assert_eq!(r.as_slice()[3 * PAGE + 5], image(8)[3 * PAGE + 5]);
    let waits = src.waits.lock().unwrap().clone();
    println!("{waits:?}");
    assert!(waits.iter().any(|w| w.0 == 3), "{waits:?}");
    assert!(
        waits
            .iter()
            .all(|w| (Duration::from_micros(50)..=Duration::from_millis(5)).contains(&w.1)),
        "a wait's timeout is not the handler's nap: {waits:?}"
    );
    std::process::exit(0);
}
