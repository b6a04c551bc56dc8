//! What the kernel or the OS refuses, injected with the `fail` crate's
//! fail points (on in tests only): each refusal gives a clear error or a
//! signalled page, and leaves nothing mapped, open or running.
//!
//! Fail points are process-wide, so each test holds a `FailScenario`
//! (one at a time) and the signal tests run in a child process.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use fail::FailScenario;
use mmbatch_faultaround::{
    Error, FailSignal, PageRead, PageSource, Record, UffdHandler, UffdMode, UffdRange, UffdRegion,
    UffdStats,
};
use mmbatch_testkit::{child, signal};

const PAGE: usize = 4096;
/// A child test's bound: each takes a second at most, and a protocol
/// broken so that faults are never served (a copy reported done that
/// copied nothing) hangs eight or nine of them at once, which the binary,
/// two at a time, must still get through inside cargo-mutants' 60 s.
const LIMIT: Duration = Duration::from_secs(10);

fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251) as u8)
        .collect()
}

/// Open userfaultfd and eventfd descriptors (the region's own kinds:
/// other tests' pipes do not count).
fn region_fds() -> usize {
    mmbatch_testkit::open_fds_of(&["userfaultfd", "eventfd"])
}

/// The process's `uffd-*` threads (handlers, replay, watchdog).
fn handler_threads() -> usize {
    mmbatch_testkit::threads_named("uffd-")
}

/// Mappings of exactly `len` bytes (thread stacks, cached by glibc after
/// a join, are not counted).
fn mappings(len: usize) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let size =
                usize::from_str_radix(b, 16).unwrap() - usize::from_str_radix(a, 16).unwrap();
            size == len
        })
        .count()
}

/// Memory a VMM would own: `pages` anonymous pages, never unmapped,
/// registered with a userfaultfd of its own, and the range a handler of
/// it serves (source offset 0).
fn vmm_memory(pages: usize) -> (*mut u8, std::os::fd::OwnedFd, UffdRange) {
    let base = mmbatch_testkit::vmm::map_anonymous(pages * PAGE);
    let uffd = mmbatch_testkit::vmm::userfaultfd(&[(base, pages * PAGE)], 0);
    let range = UffdRange {
        base: base as usize,
        len: pages * PAGE,
        offset: 0,
    };
    (base, uffd, range)
}

/// The signal a failed page of `r` gives its readers: SIGBUS where the
/// kernel poisons (6.6+), SIGSEGV through the protection fallback before
/// that (6.1 in `cargo xtask vm`).
fn signal_of(r: &UffdRegion) -> i32 {
    match r.fail_signal() {
        FailSignal::Sigbus => libc::SIGBUS,
        _ => libc::SIGSEGV,
    }
}

/// The signal a read of byte `offset` of `r` got (0: none); in a child
/// process only.
fn touch(r: &UffdRegion, offset: usize) -> i32 {
    // SAFETY: inside the region, which the caller keeps until it exits.
    unsafe { signal::touch(r.as_ptr() as usize + offset, Duration::from_secs(10)) }
}

/// A copy the kernel refuses for good (ENOMEM under a memory cgroup) used
/// to wake the reader, which faulted again: a 100% CPU livelock. Now the
/// page fails after a few tries and the reader gets the region's signal.
#[test]
fn persistent_copy_failure_fails_the_page() {
    if let Some(run) = child::parent("persistent_copy_failure_fails_the_page", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    fail::cfg("uffd::copy", "return(ENOMEM)").unwrap();
    let expected = signal_of(&r);
    println!(
        "path: failed pages get {:?} on this kernel",
        r.fail_signal()
    );
    assert_eq!(touch(&r, 3 * PAGE), expected);
    let e = r.failure().unwrap().to_string();
    println!("{e}");
    assert!(e.contains("page 3") && e.contains("ENOMEM"), "{e}");
    drop(scenario);
    std::process::exit(0);
}

/// Zero-filling a discarded page that the kernel refuses for good
/// (ENOMEM under a memory cgroup) used to wake the reader, which faulted
/// again: a 100% CPU livelock, as a refused copy was before. Now the page
/// fails after a few tries and the reader gets the region's signal.
#[test]
fn persistent_zero_fill_failure_fails_the_page() {
    if let Some(run) = child::parent("persistent_zero_fill_failure_fails_the_page", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    // (`touch` reads once per process: the first read is a plain one.)
    assert_eq!(
        r.as_slice()[3 * PAGE],
        image(16)[3 * PAGE],
        "page 3 from the source"
    );
    // The application discards page 3; its next touch is served zeros.
    let at = r.as_ptr() as usize + 3 * PAGE;
    // SAFETY: one page of the region, which no reference covers.
    let rc = unsafe { libc::madvise(at as *mut libc::c_void, PAGE, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
    fail::cfg("uffd::zeropage", "return(ENOMEM)").unwrap();
    let expected = signal_of(&r);
    assert_eq!(touch(&r, 3 * PAGE), expected);
    let e = r.failure().unwrap().to_string();
    println!("{e}");
    assert!(
        e.contains("page 3") && e.contains("the memory cgroup or the system is out of memory"),
        "{e}"
    );
    drop(scenario);
    std::process::exit(0);
}

/// A shutdown whose fill meets a copy the kernel refuses (ENOMEM three
/// times) fails that page and fills the others: only a process gone
/// (ESRCH) stops the fill.
#[test]
fn a_shutdown_fill_goes_on_past_a_refused_copy() {
    if let Some(run) = child::parent("a_shutdown_fill_goes_on_past_a_refused_copy", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    fail::cfg("uffd::copy", "3*return(ENOMEM)").unwrap();
    r.shutdown();
    fail::remove("uffd::copy");
    let st = r.stats();
    assert_eq!(st.pages_failed, 1, "{st:?}");
    let src = image(16);
    let unfilled = (1..16)
        .filter(|p| r.as_slice()[p * PAGE..(p + 1) * PAGE] != src[p * PAGE..(p + 1) * PAGE])
        .count();
    assert_eq!(unfilled, 0, "pages after the refused one left unfilled");
    drop(scenario);
    std::process::exit(0);
}

/// A copy refused with EFAULT is named as what it is (the source's bytes
/// could not be read), not as a lack of memory.
#[test]
fn a_copy_refused_with_efault_is_named_so() {
    if let Some(run) = child::parent("a_copy_refused_with_efault_is_named_so", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    fail::cfg("uffd::copy", "return(EFAULT)").unwrap();
    assert_ne!(touch(&r, 3 * PAGE), 0, "page 3 failed");
    let e = r.failure().unwrap().to_string();
    println!("{e}");
    assert!(
        e.contains("EFAULT: the source's bytes could not be read") && !e.contains("ENOMEM"),
        "{e}"
    );
    drop(scenario);
    std::process::exit(0);
}

/// A copy refused with EINVAL (a handler's page size that is not the
/// memory's: 4 KiB copies into 2 MiB hugetlbfs pages) names the page
/// size, where it said "Invalid argument" alone.
#[test]
fn a_copy_refused_with_einval_names_the_page_size() {
    if let Some(run) = child::parent("a_copy_refused_with_einval_names_the_page_size", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    fail::cfg("uffd::copy", "return(EINVAL)").unwrap();
    assert_ne!(touch(&r, 3 * PAGE), 0, "page 3 failed");
    let e = r.failure().unwrap().to_string();
    println!("{e}");
    assert!(
        e.contains("EINVAL: the page is not one of the memory's own"),
        "{e}"
    );
    drop(scenario);
    std::process::exit(0);
}

/// A window holding a failed page is installed around it: a later fault
/// in the window copies the other pages and leaves the failed one alone
/// (not copied over, not counted as present), whether the kernel
/// poisoned it or the fallback protected it.
#[test]
fn a_window_is_installed_around_a_failed_page() {
    if let Some(run) = child::parent("a_window_is_installed_around_a_failed_page", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 3, src.clone(), 1).unwrap();
    fail::cfg("uffd::copy", "return(ENOMEM)").unwrap();
    assert_ne!(touch(&r, 5 * PAGE), 0, "page 5 failed");
    fail::remove("uffd::copy");
    let before = r.stats();
    assert_eq!(before.pages_copied, 0, "{before:?}");
    // Order 3 around page 6: pages 0..8, page 5 failed.
    assert_eq!(r.as_slice()[6 * PAGE + 1], src[6 * PAGE + 1]);
    let st = r.stats();
    assert_eq!((st.pages_copied, st.already_present), (7, 0), "{st:?}");
    assert_eq!(&r.as_slice()[..5 * PAGE], &src[..5 * PAGE]);
    drop(scenario);
    std::process::exit(0);
}

/// Without UFFDIO_POISON (Linux before 6.6, played by a fail point) a
/// failed page is made inaccessible instead: SIGSEGV, never zeroes.
#[test]
fn without_poison_a_failed_page_gets_sigsegv() {
    if let Some(run) = child::parent("without_poison_a_failed_page_gets_sigsegv", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    fail::cfg("uffd::no_poison", "return").unwrap();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    assert_eq!(r.fail_signal(), FailSignal::Sigsegv);
    fail::cfg("uffd::copy", "return(EFAULT)").unwrap();
    assert_eq!(touch(&r, 5 * PAGE), libc::SIGSEGV);
    println!("fallback path (PROT_NONE): {}", r.failure().unwrap());
    fail::remove("uffd::copy");
    // The neighbours are still served.
    assert_eq!(r.as_slice()[6 * PAGE + 1], image(16)[6 * PAGE + 1]);
    drop(scenario);
    std::process::exit(0);
}

/// The poison ioctl itself refused at run time: the SIGSEGV fallback.
#[test]
fn refused_poison_falls_back_to_protection() {
    if let Some(run) = child::parent("refused_poison_falls_back_to_protection", LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    fail::cfg("uffd::poison", "return").unwrap();
    fail::cfg("uffd::copy", "return(ENOMEM)").unwrap();
    assert_eq!(touch(&r, 2 * PAGE), libc::SIGSEGV);
    assert_eq!(r.fail_signal(), FailSignal::Sigsegv);
    drop(scenario);
    std::process::exit(0);
}

/// EAGAIN (the kernel's `mmap_changing`) comes back from the userfaultfd
/// crate as a partial copy of `-EAGAIN as usize` bytes; the old code added
/// that to its progress and counters. Now it is retried as no progress.
#[test]
fn eagain_is_retried_and_a_negative_count_is_no_progress() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang =
        mmbatch_testkit::hang_guard("eagain_is_retried_and_a_negative_count_is_no_progress");
    let src = image(64);
    let r = UffdRegion::new(64 * PAGE, 2, src.clone(), 1).unwrap();
    fail::cfg("uffd::copy", "5*return(EAGAIN)").unwrap();
    assert_eq!(r.as_slice()[9 * PAGE + 3], src[9 * PAGE + 3]);
    let st = r.stats();
    assert!(st.retries >= 5, "{st:?}");
    assert_eq!(st.pages_copied, 4, "{st:?}");
    assert_eq!(r.as_slice(), &src[..]);
    assert_eq!(r.stats().pages_copied, 64);
}

/// A kernel that refuses the userfaultfd handshake (`UFFDIO_API`) is
/// named with the feature it lacks and the Linux that has it — write
/// tracking's when it was asked for, REMOVE events' otherwise — and the
/// refused region leaves no descriptor open.
#[test]
fn a_refused_handshake_names_the_missing_feature() {
    let _scenario = FailScenario::setup();
    let fds = region_fds();
    fail::cfg("uffd::api", "return").unwrap();
    let plain = UffdRegion::builder(16 * PAGE).build(image(16)).unwrap_err();
    let tracked = UffdRegion::builder(16 * PAGE)
        .track_writes(true)
        .build(image(16))
        .unwrap_err();
    fail::remove("uffd::api");
    let (plain, tracked) = (plain.to_string(), tracked.to_string());
    println!("{plain}\n{tracked}");
    assert!(
        plain.contains("UFFD_FEATURE_EVENT_REMOVE needs Linux 4.11"),
        "{plain}"
    );
    assert!(
        tracked.contains("UFFD_FEATURE_WP_ASYNC needs Linux 6.7"),
        "{tracked}"
    );
    assert_eq!(region_fds(), fds, "a descriptor was left open");
}

/// A fault that arrives while a copy is refused with EAGAIN is read from
/// the userfaultfd by the copying handler (to clear the pending event)
/// and queued; the handler serves it next and stays: it was never stuck
/// in the source, so it must not count itself back from a stall and
/// leave. Before the check, a handler that took that path left, and the
/// next fault waited for good (here: a bounded touch in a child).
#[test]
fn a_queued_fault_is_served_and_its_handler_stays() {
    let name = "a_queued_fault_is_served_and_its_handler_stays";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 0, src.clone(), 1).unwrap();
    assert_eq!(handler_threads_serving(1), 1);
    // Some 60 ms of EAGAIN: 16 retries at once, then one every 200 us.
    fail::cfg("uffd::copy", "300*return(EAGAIN)").unwrap();
    let base = r.as_ptr() as usize;
    // SAFETY: inside the region, which outlives the thread (joined below).
    let first = std::thread::spawn(move || unsafe { std::ptr::read_volatile(base as *const u8) });
    std::thread::sleep(Duration::from_millis(10));
    // Page 5's fault comes while page 0's copy is refused: the one
    // handler reads it to get past EAGAIN, and queues it.
    assert_eq!(touch(&r, 5 * PAGE), 0);
    assert_eq!(first.join().unwrap(), src[0]);
    let st = r.stats();
    println!("{st:?}");
    assert!(st.retries >= 300, "{st:?}");
    // The handler serves on: a fault after the queued one is served.
    assert_eq!(touch(&r, 9 * PAGE), 0);
    assert_eq!(handler_threads_serving(1), 1);
    assert_eq!(r.as_slice()[9 * PAGE + 1], src[9 * PAGE + 1]);
    // And then sleeps: the nudge that queued fault came with is read, not
    // left to wake every poll (the child's threads are the region's and
    // this one, asleep): under a tenth of the time idle in CPU.
    let cpu = process_cpu();
    std::thread::sleep(Duration::from_millis(500));
    let busy = process_cpu() - cpu;
    assert!(
        busy < Duration::from_millis(50),
        "{busy:?} of CPU over 500 ms idle"
    );
    drop(scenario);
    std::process::exit(0);
}

/// The CPU time this process has used.
fn process_cpu() -> Duration {
    // SAFETY: all-zero is a valid `rusage`, a plain out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `&mut ru` is a valid, writable `rusage`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// The process's `uffd-handler-` threads, once they are `want` (or
/// after a few seconds: a thread's entry comes and goes a moment after it
/// starts and leaves).
fn handler_threads_serving(want: usize) -> usize {
    mmbatch_testkit::threads_named_settled("uffd-handler-", want, Duration::from_secs(2))
}

/// The same for a handler of another's userfaultfd, which also counts
/// the pages it installed: a negative count is no page installed (taken
/// as pages, `-EAGAIN` bytes would mark some 2^52 of them, past the end of
/// the handler's page bitmap). Here the handler serves memory of this
/// process, registered as a VMM registers its own; in a child, since a
/// handler that dies leaves the read to wait for its page's failure.
#[test]
fn a_foreign_handler_counts_no_page_for_an_eagain() {
    let name = "a_foreign_handler_counts_no_page_for_an_eagain";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let src = image(64);
    let (base, uffd, range) = vmm_memory(64);
    let h = UffdHandler::builder(uffd, [range])
        .order(2)
        .handlers(1)
        .build(src.clone())
        .unwrap();
    fail::cfg("uffd::copy", "5*return(EAGAIN)").unwrap();
    // SAFETY: the mapping made above, never unmapped; the handler fills
    // each page before a read of it returns.
    let memory = unsafe { std::slice::from_raw_parts(base, 64 * PAGE) };
    assert_eq!(memory[9 * PAGE + 3], src[9 * PAGE + 3]);
    let st = h.stats();
    assert!(st.retries >= 5, "{st:?}");
    assert_eq!((st.pages_copied, h.installed_pages()), (4, 4), "{st:?}");
    assert!(memory == &src[..]);
    assert_eq!(h.installed_pages(), 64);
    drop(scenario);
    std::process::exit(0);
}

/// On a kernel without `UFFDIO_POISON` (before 6.6; fail point
/// `uffd::no_poison` plays one, as the 6.1 guest is) a handler of
/// another's userfaultfd says from its build that a failed page's readers
/// stay blocked (`fail_signal` is `None`): it cannot poison another
/// process's page, and must not claim to. In a child: the mapping a VMM
/// would own is never unmapped.
#[test]
fn a_foreign_handler_without_poison_says_readers_stay_blocked() {
    let name = "a_foreign_handler_without_poison_says_readers_stay_blocked";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let (_, uffd, range) = vmm_memory(16);
    fail::cfg("uffd::no_poison", "return").unwrap();
    let h = UffdHandler::builder(uffd, [range])
        .build(image(16))
        .unwrap();
    assert_eq!(h.fail_signal(), None);
    drop(h);
    drop(scenario);
    std::process::exit(0);
}

/// Where `/proc/self/fdinfo` cannot be read (a sandbox without `/proc`;
/// fail point `uffd::fdinfo`), a handler of another's userfaultfd tries
/// `UFFDIO_POISON` anyway: it used to take the unread line as "no
/// poison", so every failed page left its readers blocked for good even
/// on a kernel that poisons. Here (Linux 6.6+) a failed page's reader gets
/// SIGBUS. In a child: the mapping a VMM would own is never unmapped.
#[test]
fn a_foreign_handler_without_fdinfo_still_poisons() {
    let name = "a_foreign_handler_without_fdinfo_still_poisons";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let probe = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    if probe.fail_signal() != FailSignal::Sigbus {
        println!("skipped: this kernel has no UFFDIO_POISON (Linux 6.6)");
        std::process::exit(0);
    }
    drop(probe);
    let (base, uffd, range) = vmm_memory(16);
    fail::cfg("uffd::fdinfo", "return").unwrap();
    let h = UffdHandler::builder(uffd, [range])
        .build(image(16))
        .unwrap();
    fail::remove("uffd::fdinfo");
    assert_eq!(h.fail_signal(), Some(FailSignal::Sigbus));
    fail::cfg("uffd::copy", "return(ENOMEM)").unwrap();
    // SAFETY: the mapping made above, never unmapped.
    let sig = unsafe { signal::touch(base as usize + 3 * PAGE, Duration::from_secs(10)) };
    assert_eq!(sig, libc::SIGBUS, "the failed page's reader");
    drop(scenario);
    std::process::exit(0);
}

/// A window the kernel refuses to copy whole (ENOMEM once, as a memory
/// cgroup at its limit gives) is still installed: the faulting page
/// alone, then the rest of the window in runs from the source's memory,
/// so the reads that follow inside the window take no fault.
#[test]
fn a_refused_window_copy_still_installs_the_window() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang = mmbatch_testkit::hang_guard("a_refused_window_copy_still_installs_the_window");
    let src = image(64);
    let r = UffdRegion::new(64 * PAGE, 3, src.clone(), 1).unwrap();
    fail::cfg("uffd::copy", "1*return(ENOMEM)").unwrap();
    // Order 3 around page 13: pages 8..16, in runs 8..13 and 14..16.
    assert_eq!(r.as_slice()[13 * PAGE + 3], src[13 * PAGE + 3]);
    fail::remove("uffd::copy");
    assert_eq!(
        &r.as_slice()[8 * PAGE..16 * PAGE],
        &src[8 * PAGE..16 * PAGE]
    );
    let st = r.stats();
    assert_eq!((st.faults, st.pages_copied), (1, 8), "{st:?}");
}

/// EEXIST: the page is someone else's already; the reader is woken and
/// finds it (here it refaults once, as nothing was copied).
#[test]
fn eexist_wakes_the_reader() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang = mmbatch_testkit::hang_guard("eexist_wakes_the_reader");
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 0, src.clone(), 1).unwrap();
    fail::cfg("uffd::copy", "1*return(EEXIST)").unwrap();
    assert_eq!(r.as_slice()[PAGE], src[PAGE]);
    assert!(r.stats().already_present >= 1, "{:?}", r.stats());
}

/// What a 64-page region holds in the process: its descriptors, its
/// mapping, its threads.
fn what_regions_hold() -> (usize, usize, usize) {
    (region_fds(), mappings(64 * PAGE), handler_threads())
}

/// Asserts that a refused region gave back all it held (`before` is
/// [`what_regions_hold`] before it was made).
fn assert_nothing_left(before: (usize, usize, usize)) {
    let (fds, maps, threads) = before;
    assert_eq!(region_fds(), fds, "descriptors left open");
    assert_eq!(mappings(64 * PAGE), maps, "mappings left");
    assert_eq!(
        mmbatch_testkit::threads_named_settled("uffd-", threads, Duration::from_secs(2)),
        threads,
        "threads left running"
    );
}

/// A handler thread the OS refuses: a clear error, and the handlers
/// already started are stopped, the range unmapped, the uffd closed.
#[test]
fn refused_handler_thread_undoes_everything() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    // 10 s, not the default 45: a thread count left wrong hangs the
    // region's drop, and cargo-mutants bounds the whole `cargo test` run
    // (60 s), which reaches this binary some 20 s in.
    let _hang = mmbatch_testkit::hang_guard_within(
        "refused_handler_thread_undoes_everything",
        mmbatch_testkit::child::scaled(Duration::from_secs(10)),
    );
    let before = what_regions_hold();
    fail::cfg("uffd::spawn", "2*off->return").unwrap();
    let e = UffdRegion::new(64 * PAGE, 0, image(64), 4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ThreadRefused {
                started: 2,
                asked: 5,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("RLIMIT_NPROC"), "{e}");
    assert_nothing_left(before);
}

/// A replay thread the OS refuses: the same clear error, counting the
/// handler and the watchdog before it, and nothing left behind.
#[test]
fn refused_replay_thread_undoes_everything() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    // 10 s, not the default 45: a thread count left wrong hangs the
    // region's drop, and cargo-mutants bounds the whole `cargo test` run
    // (60 s), which reaches this binary some 20 s in.
    let _hang = mmbatch_testkit::hang_guard_within(
        "refused_replay_thread_undoes_everything",
        mmbatch_testkit::child::scaled(Duration::from_secs(10)),
    );
    let before = what_regions_hold();
    fail::cfg("uffd::spawn", "2*off->return").unwrap();
    let record = mmbatch_faultaround::Record::new(PAGE, (64 * PAGE) as u64, "", 0..64).unwrap();
    let e = UffdRegion::builder(64 * PAGE)
        .replay(record)
        .prefetchers(2)
        .build(image(64))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ThreadRefused {
                started: 2,
                asked: 4,
                ..
            }
        ),
        "{e}"
    );
    assert_nothing_left(before);
}

/// Where the kernel refuses a userfaultfd that serves kernel faults
/// (`/dev/userfaultfd` and the plain system call both EPERM or EACCES,
/// played by a fail point), the region is built user-mode-only, says so,
/// and serves the process's own reads.
#[test]
fn refused_all_faults_falls_back_to_user_mode_only() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang = mmbatch_testkit::hang_guard("refused_all_faults_falls_back_to_user_mode_only");
    for errno in ["EPERM", "EACCES"] {
        fail::cfg("uffd::open_all_faults", &format!("return({errno})")).unwrap();
        let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
        assert_eq!(r.mode(), UffdMode::UserModeOnly, "{errno}");
        assert_eq!(r.as_slice()[3 * PAGE + 1], image(16)[3 * PAGE + 1]);
    }
    fail::remove("uffd::open_all_faults");
    let r = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(r.mode(), UffdMode::AllFaults);
    }
}

/// A region built with `require_kernel_faults` where the full mode is
/// refused is an error naming the permissions, not a user-mode-only
/// region; nothing is left open or running. Where the full mode is
/// allowed it builds as usual.
#[test]
fn a_region_that_requires_kernel_faults_is_refused_without_them() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang =
        mmbatch_testkit::hang_guard("a_region_that_requires_kernel_faults_is_refused_without_them");
    let (fds, threads) = (region_fds(), handler_threads());
    let build = || {
        UffdRegion::builder(16 * PAGE)
            .require_kernel_faults(true)
            .build(image(16))
    };
    for errno in ["EPERM", "EACCES"] {
        fail::cfg("uffd::open_all_faults", &format!("return({errno})")).unwrap();
        let e = build().unwrap_err();
        assert!(matches!(e, Error::NoPermission { .. }), "{errno}: {e}");
        assert!(e.to_string().contains("/dev/userfaultfd"), "{e}");
        assert_eq!((region_fds(), handler_threads()), (fds, threads), "{errno}");
    }
    // Another refusal is returned as it was.
    fail::cfg("uffd::open_all_faults", "return(EMFILE)").unwrap();
    assert!(matches!(build().unwrap_err(), Error::Sys { .. }));
    fail::remove("uffd::open_all_faults");
    // Unrefused: as this process may have it (root without
    // CAP_SYS_PTRACE or the device, as in a container, may not).
    let free = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap().mode();
    match build() {
        Ok(r) => assert_eq!((free, r.mode()), (UffdMode::AllFaults, UffdMode::AllFaults)),
        Err(e) => {
            assert_eq!(free, UffdMode::UserModeOnly, "{e}");
            assert!(matches!(e, Error::NoPermission { .. }), "{e}");
        }
    }
}

/// `/dev/userfaultfd` failing as a container makes it fail (no node, a
/// node with no driver, a device policy that refuses it): the system call
/// is tried in full mode, which root is allowed. ENODEV and ENXIO were
/// errors that ended the region's construction.
#[test]
fn a_device_without_a_driver_falls_back_to_the_system_call() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang =
        mmbatch_testkit::hang_guard("a_device_without_a_driver_falls_back_to_the_system_call");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for errno in [libc::ENOENT, libc::ENODEV, libc::ENXIO] {
        fail::cfg("uffd::open_device", &format!("return({errno})")).unwrap();
        let r = UffdRegion::new(16 * PAGE, 0, image(16), 1)
            .unwrap_or_else(|e| panic!("errno {errno}: {e}"));
        if root {
            assert_eq!(r.mode(), UffdMode::AllFaults, "errno {errno}");
        }
        assert_eq!(r.as_slice()[3 * PAGE + 1], image(16)[3 * PAGE + 1]);
    }
    fail::remove("uffd::open_device");
}

/// Any other error opening the full-mode userfaultfd (here EMFILE) is an
/// error naming it, not a quiet fallback to user-mode-only (which would
/// meet it too, or hide it), and leaves nothing behind.
#[test]
fn other_userfaultfd_errors_are_not_taken_for_refusal() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang = mmbatch_testkit::hang_guard("other_userfaultfd_errors_are_not_taken_for_refusal");
    let before = what_regions_hold();
    fail::cfg("uffd::open_all_faults", "return(EMFILE)").unwrap();
    let e = UffdRegion::new(64 * PAGE, 0, image(64), 1).unwrap_err();
    assert!(
        matches!(&e, Error::Sys { op: "userfaultfd", source } if source.raw_os_error() == Some(libc::EMFILE)),
        "{e}"
    );
    assert_nothing_left(before);
}

/// mmap refused: the error says so, and the uffd is closed.
#[test]
fn refused_mmap_is_a_clear_error() {
    let _scenario = FailScenario::setup();
    // After the scenario's lock: waiting for another test is not a hang.
    let _hang = mmbatch_testkit::hang_guard("refused_mmap_is_a_clear_error");
    let fds = region_fds();
    fail::cfg("uffd::mmap", "return").unwrap();
    let e = UffdRegion::new(64 * PAGE, 0, image(64), 1).unwrap_err();
    assert!(
        matches!(e, Error::MapRefused { len, .. } if len == 64 * PAGE),
        "{e}"
    );
    assert!(e.to_string().contains("ask for a shorter region"), "{e}");
    assert_eq!(region_fds(), fds);
    // Another errno is the kernel's, named as the call's.
    fail::cfg("uffd::mmap", "return(22)").unwrap();
    let e = UffdRegion::new(64 * PAGE, 0, image(64), 1).unwrap_err();
    assert!(
        matches!(&e, Error::Sys { op: "mmap", source } if source.raw_os_error() == Some(libc::EINVAL)),
        "{e}"
    );
    assert_eq!(region_fds(), fds);
}

/// A refused map of a page cache is the seal's only where the kernel said
/// EPERM and the file is sealed against writes: EPERM over an unsealed
/// file, and ENOMEM over a sealed one, are the kernel's as before.
#[test]
fn a_refused_page_cache_map_names_the_seal_only_for_a_sealed_file() {
    use rustix::fs::{MemfdFlags, SealFlags};
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_refused_page_cache_map_names_the_seal");
    let memfd = |seal: Option<SealFlags>| {
        let fd =
            rustix::fs::memfd_create("sealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .unwrap();
        let file = std::fs::File::from(fd);
        file.set_len(4 * PAGE as u64).unwrap();
        if let Some(seal) = seal {
            rustix::fs::fcntl_add_seals(&file, seal).unwrap();
        }
        file
    };
    // SAFETY: each memfd is this test's own; nothing else writes or
    // truncates it.
    let over = |file: &std::fs::File| unsafe { UffdRegion::over_page_cache(file, 4 * PAGE, 0, 1) };
    fail::cfg("uffd::mmap", &format!("return({})", libc::EPERM)).unwrap();
    let e = over(&memfd(None)).unwrap_err();
    assert!(matches!(e, Error::Sys { op: "mmap", .. }), "{e:?}");
    let e = over(&memfd(Some(SealFlags::FUTURE_WRITE))).unwrap_err();
    assert!(matches!(e, Error::FileSealed { .. }), "{e:?}");
    fail::cfg("uffd::mmap", "return").unwrap();
    let e = over(&memfd(Some(SealFlags::WRITE))).unwrap_err();
    assert!(matches!(e, Error::MapRefused { .. }), "{e:?}");
}

/// `page_cache_from` refuses an image larger than the memory left for it
/// (fail point `uffd::memory_room` stands in for what is left), and fills
/// one that fits.
#[test]
fn a_page_cache_past_the_memory_left_is_refused() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_page_cache_past_the_memory_left_is_refused");
    fail::cfg("uffd::memory_room", &format!("return({})", 8 * PAGE)).unwrap();
    let e = UffdRegion::page_cache_from(&image(16), 16 * PAGE).unwrap_err();
    assert!(
        matches!(e, Error::ImageTooLarge { len, room } if len == 16 * PAGE && room == 8 * PAGE as u64),
        "{e}"
    );
    let cache = UffdRegion::page_cache_from(&image(16), 8 * PAGE).unwrap();
    assert_eq!(cache.metadata().unwrap().len(), 8 * PAGE as u64);
}

/// A registration the kernel refuses with EINVAL is named by what was
/// registered: for anonymous memory, a kernel without the userfaultfd it
/// needs; for a page cache, a file that is not shmem (or a kernel before
/// minor faults). The region's descriptors are closed either way.
#[test]
fn a_refused_registration_names_what_was_registered() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_refused_registration_names_what_was_registered");
    let fds = region_fds();
    let cache = UffdRegion::page_cache_from(&image(16), 16 * PAGE).unwrap();
    fail::cfg("uffd::register", "return").unwrap();
    let e = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what } if what.contains("userfaultfd")),
        "{e}"
    );
    // SAFETY: the memfd is this test's own; nothing writes or truncates it.
    let e = unsafe { UffdRegion::builder(16 * PAGE).build_over_page_cache(&cache) }.unwrap_err();
    assert!(
        matches!(&e, Error::Sys { op, .. } if op.contains("must be shmem")),
        "{e}"
    );
    fail::remove("uffd::register");
    assert_eq!(region_fds(), fds);
}

/// A process whose standard input is closed (a daemon's) gets descriptor
/// 0 for its userfaultfd: a valid descriptor, not a failure. In a child,
/// which closes its stdin, with the device refused so that the system
/// call hands the descriptor out.
#[test]
fn a_userfaultfd_can_be_descriptor_0() {
    let name = "a_userfaultfd_can_be_descriptor_0";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    fail::cfg("uffd::open_device", "return").unwrap();
    // SAFETY: closes this child's stdin, which nothing here reads.
    assert_eq!(unsafe { libc::close(0) }, 0);
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 0, src.clone(), 1).unwrap();
    assert_eq!(r.as_slice()[5 * PAGE + 1], src[5 * PAGE + 1]);
    // The region's descriptor took the lowest free number.
    assert!(
        std::fs::read_link("/proc/self/fd/0")
            .unwrap()
            .to_string_lossy()
            .contains("userfaultfd")
    );
    drop(r);
    drop(scenario);
    std::process::exit(0);
}

/// A huge page mapping the kernel refuses for another reason than a short
/// pool is that error, not `HugePagesUnavailable` (whose fix, growing the
/// pool, would not help); a short pool (`ENOMEM`) is, naming the pages
/// the region needs.
#[test]
fn a_huge_mapping_refused_otherwise_is_not_a_short_pool() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_huge_mapping_refused_otherwise_is_not_a_short_pool");
    let huge = 3 * (2 << 20);
    let build = || {
        UffdRegion::builder(huge)
            .huge_pages(mmbatch_faultaround::HugePageSize::Size2M)
            .build(mmbatch_faultaround::Zeroes(huge as u64))
            .unwrap_err()
    };
    fail::cfg("uffd::mmap_huge", &format!("return({})", libc::EINVAL)).unwrap();
    let e = build();
    assert!(
        matches!(&e, Error::Sys { op: "mmap", source } if source.raw_os_error() == Some(libc::EINVAL)),
        "{e}"
    );
    fail::cfg("uffd::mmap_huge", &format!("return({})", libc::ENOMEM)).unwrap();
    let e = build();
    assert!(
        matches!(e, Error::HugePagesUnavailable(ref u) if u.needed == 3),
        "{e}"
    );
}

/// The same for a huge-page image (`huge_page_cache_from`) where the
/// pool's count cannot be read ahead (a container): the kernel's refusal
/// decides, a short pool naming the pages the image needs.
#[test]
fn a_huge_page_cache_refused_otherwise_is_not_a_short_pool() {
    let _scenario = FailScenario::setup();
    let _hang =
        mmbatch_testkit::hang_guard("a_huge_page_cache_refused_otherwise_is_not_a_short_pool");
    let huge = 3 * (2 << 20);
    let make = || {
        UffdRegion::huge_page_cache_from(
            &mmbatch_faultaround::Zeroes(huge as u64),
            huge,
            mmbatch_faultaround::HugePageSize::Size2M,
        )
        .unwrap_err()
    };
    fail::cfg(
        "uffd::huge_page_cache_mmap",
        &format!("return({})", libc::EINVAL),
    )
    .unwrap();
    let e = make();
    if let Error::Sys {
        op: "memfd_create (MFD_HUGETLB)",
        ..
    } = e
    {
        eprintln!("skipped: this kernel makes no hugetlbfs memfd ({e})");
        return;
    }
    assert!(
        matches!(&e, Error::Sys { op: "mmap (the hugetlbfs memfd)", source }
            if source.raw_os_error() == Some(libc::EINVAL)),
        "{e}"
    );
    fail::cfg(
        "uffd::huge_page_cache_mmap",
        &format!("return({})", libc::ENOMEM),
    )
    .unwrap();
    let e = make();
    assert!(
        matches!(e, Error::HugePagesUnavailable(ref u) if u.needed == 3),
        "{e}"
    );
}

/// A hugetlbfs memfd the kernel refuses is an error that says why: its
/// ENODEV (no pool of the size), ENOSYS (no hugetlbfs) and EINVAL (before
/// MFD_HUGETLB) read "No such device" and the like on their own.
#[test]
fn a_refused_huge_page_memfd_names_what_is_missing() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_refused_huge_page_memfd_names_what_is_missing");
    let huge = 2 << 20;
    let refused = |errno: i32| {
        fail::cfg("uffd::huge_page_cache_memfd", &format!("return({errno})")).unwrap();
        UffdRegion::huge_page_cache_from(
            &mmbatch_faultaround::Zeroes(huge as u64),
            huge,
            mmbatch_faultaround::HugePageSize::Size2M,
        )
        .unwrap_err()
    };
    for (errno, says) in [
        (libc::ENODEV, "2048 kB huge pages"),
        (libc::ENOSYS, "CONFIG_HUGETLBFS"),
        (libc::EINVAL, "Linux 4.14"),
    ] {
        let e = refused(errno);
        assert!(
            matches!(&e, Error::Sys { op: "memfd_create (MFD_HUGETLB)", source }
                if source.kind() == std::io::ErrorKind::Unsupported),
            "{e}"
        );
        assert!(e.to_string().contains(says), "{errno}: {e}");
    }
    // Any other refusal is the kernel's own.
    let e = refused(libc::EMFILE);
    assert!(
        matches!(&e, Error::Sys { source, .. } if source.raw_os_error() == Some(libc::EMFILE)),
        "{e}"
    );
}

/// The huge page cache's pages are faulted in before it is written
/// (`MADV_POPULATE_WRITE`): a refusal that would have been a SIGBUS at
/// the write (EFAULT, ENOMEM) is an error naming the cgroup limit; where
/// the advice is not to be had (EINVAL before Linux 5.14, a filter's
/// ENOSYS) the cache is written as before; any other refusal is the
/// kernel's own. Root only (one page grown into the pool).
#[test]
fn a_huge_page_cache_whose_pages_are_refused_says_why() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_huge_page_cache_whose_pages_are_refused_says_why");
    let Some(_pool) = mmbatch_testkit::huge::Pool::grow(1) else {
        return;
    };
    let grown = mmbatch_testkit::huge::state();
    let huge = 2 << 20;
    let image: Vec<u8> = (0..huge).map(|b| (b % 251) as u8).collect();
    let make = |errno: i32| {
        // The last call's memfd may live on in a child another test
        // forked: its page comes back at the child's exec.
        mmbatch_testkit::huge::wait_available(1);
        fail::cfg(
            "uffd::huge_page_cache_populate",
            &format!("return({errno})"),
        )
        .unwrap();
        UffdRegion::huge_page_cache_from(&image, huge, mmbatch_faultaround::HugePageSize::Size2M)
    };
    for errno in [libc::EFAULT, libc::ENOMEM] {
        let e = make(errno).unwrap_err();
        assert!(
            matches!(&e, Error::Sys { source, .. }
                if source.kind() == std::io::ErrorKind::OutOfMemory),
            "{e} (the pool, grown: {grown}; now: {})",
            mmbatch_testkit::huge::state()
        );
        assert!(e.to_string().contains("hugetlb.2MB.max"), "{errno}: {e}");
    }
    for errno in [libc::EINVAL, libc::ENOSYS] {
        let file = make(errno).unwrap();
        let mut back = vec![0u8; huge];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 0).unwrap();
        assert!(back == image, "{errno}: the cache is not the image");
    }
    let e = make(libc::EIO).unwrap_err();
    assert!(
        matches!(&e, Error::Sys { source, .. } if source.raw_os_error() == Some(libc::EIO)),
        "{e}"
    );
}

/// Page 3's read never returns; the others are zeroes.
struct StuckOnThree;

impl mmbatch_faultaround::PageSource for StuckOnThree {
    fn len(&self) -> u64 {
        1 << 20
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
        if index == 3 {
            std::thread::sleep(Duration::from_secs(3600));
        }
        buf.fill(9);
        mmbatch_faultaround::PageRead::Ready
    }
}

/// The OS refuses the handler the watchdog starts in place of a stuck one:
/// faults meanwhile fail (none waits forever), and once threads can be had
/// again the next tick starts it and faults are served.
#[test]
fn a_refused_replacement_is_retried() {
    let name = "a_refused_replacement_is_retried";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(200))
        .build(StuckOnThree)
        .unwrap();
    fail::cfg("uffd::spawn", "return").unwrap();
    for page in [3, 8] {
        let n = r.stats().pages_failed;
        // SAFETY: the region's memory, which the child keeps until it exits.
        unsafe { signal::read_in_background(r.as_ptr() as usize + page * PAGE) };
        mmbatch_testkit::wait_until(&format!("page {page}"), Duration::from_secs(5), || {
            r.stats().pages_failed > n
        });
    }
    // Page 3 failed as stuck, page 8 for want of a handler.
    assert!(r.failure().unwrap().to_string().contains("no replacement"));
    fail::remove("uffd::spawn");
    // A tick later the replacement starts beside the stuck handler, and
    // serves (a failure parks this thread: the child's limit).
    mmbatch_testkit::wait_until(
        "the replacement handler",
        child::scaled(Duration::from_secs(5)),
        || mmbatch_testkit::threads_named("uffd-handler-") >= 2,
    );
    assert_eq!(r.as_slice()[10 * PAGE], 9);
    drop(scenario);
    std::process::exit(0);
}

/// A source that takes 20 ms over each page, counting its reads in
/// [`SLOW_READS`].
struct SlowReads;

static SLOW_READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl mmbatch_faultaround::PageSource for SlowReads {
    fn len(&self) -> u64 {
        (16 * PAGE) as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
        SLOW_READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Prompt: far inside the 1 s timeout even on a guest a busy host
        // stops for a while.
        std::thread::sleep(Duration::from_millis(20));
        buf.fill(index as u8 + 1);
        mmbatch_faultaround::PageRead::Ready
    }
}

/// The watchdog times calls into the source, not the work after them: a
/// source that answers within its timeout, followed by a copy the kernel
/// is slow to make (1.5 s here, past the 1 s timeout), leaves the fault
/// with its handler. Were the handler still taken for stuck in the
/// source, the watchdog would claim the fault and start a replacement
/// (`uffd-handler-1`, the first spare slot), and the slow handler would
/// leave as it came back: a kernel slow to copy (reclaim under a memory
/// cgroup) would churn handler threads.
#[test]
fn a_slow_copy_after_a_prompt_source_is_not_a_stuck_source() {
    let name = "a_slow_copy_after_a_prompt_source_is_not_a_stuck_source";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::builder(16 * PAGE)
        .order(0)
        .source_timeout(Duration::from_secs(1))
        .build(SlowReads)
        .unwrap();
    fail::cfg("uffd::copy", "1*sleep(1500)").unwrap();
    assert_eq!(r.as_slice()[5 * PAGE], 6);
    let st = r.stats();
    println!("{st:?}");
    assert_eq!(
        SLOW_READS.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "{st:?}"
    );
    assert_eq!((st.faults, st.pages_failed), (1, 0), "{st:?}");
    assert_eq!(handler_threads_serving(1), 1);
    // Still the first handler, never replaced.
    assert_eq!(mmbatch_testkit::threads_named("uffd-handler-0"), 1);
    drop(scenario);
    std::process::exit(0);
}

/// A shutdown that can have no thread for its fill fills every missing
/// page on the caller's own thread (unguarded), rather than failing them.
#[test]
fn a_shutdown_with_no_thread_to_be_had_fills_on_the_callers() {
    let name = "a_shutdown_with_no_thread_to_be_had_fills_on_the_callers";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let data = image(16);
    let r = UffdRegion::builder(16 * PAGE).build(data.clone()).unwrap();
    assert_eq!(r.as_slice()[PAGE + 1], data[PAGE + 1]);
    fail::cfg("uffd::spawn", "return").unwrap();
    r.shutdown();
    fail::remove("uffd::spawn");
    // Before any read: a failed page would stop this child with a signal.
    assert!(r.failure().is_none(), "{:?}", r.failure());
    assert_eq!(r.stats().pages_failed, 0);
    assert!(r.as_slice() == &data[..], "every page with its bytes");
    drop(scenario);
    std::process::exit(0);
}

/// Page 3 is never ready to a handler (`read_page`); the replay's
/// `read_pages` has it once `GATE` opens.
struct ReplayOnlyHasThree;

static GATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once the replay is in `read_pages`: it has taken page 3's run, so
/// a fault on page 3 does not take it first.
static REPLAY_READING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl mmbatch_faultaround::PageSource for ReplayOnlyHasThree {
    fn len(&self) -> u64 {
        (16 * PAGE) as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
        if index == 3 {
            return mmbatch_faultaround::PageRead::NotReady;
        }
        buf.fill(index as u8);
        mmbatch_faultaround::PageRead::Ready
    }
    fn read_pages(&self, index: u64, _: usize, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
        REPLAY_READING.store(true, std::sync::atomic::Ordering::Release);
        let deadline = std::time::Instant::now() + LIMIT;
        while !GATE.load(std::sync::atomic::Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < deadline,
                "the gate never opened"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        buf.fill(index as u8);
        mmbatch_faultaround::PageRead::Ready
    }
}

/// Whether the page at `addr` is present (`mincore`: for anonymous
/// memory, whether a page table entry maps it).
fn resident(addr: usize) -> bool {
    let mut v = 0u8;
    // SAFETY: one page of a live mapping, one byte of output.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, PAGE, &mut v) };
    r == 0 && v & 1 != 0
}

/// Without UFFDIO_POISON there was no EEXIST check: a page a replay
/// installed between a handler's decision to fail it (its source timed
/// out) and the `mprotect(PROT_NONE)` was made inaccessible, so a reader
/// got SIGSEGV on a page that holds its data (and that others may already
/// have read). The fail point `uffd::before_protect` lets the replay
/// install the page at exactly that moment; now the page is found present
/// under the lock every copy takes, is not failed, and reads back.
#[test]
fn without_poison_a_page_filled_before_protection_is_not_failed() {
    let name = "without_poison_a_page_filled_before_protection_is_not_failed";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    static PAGE3: AtomicUsize = AtomicUsize::new(0);
    static FILLED: AtomicBool = AtomicBool::new(false);
    let scenario = FailScenario::setup();
    fail::cfg("uffd::no_poison", "return").unwrap();
    fail::cfg_callback("uffd::before_protect", || {
        // The replay installs page 3 now, while the handler that gave up
        // on it is about to protect it.
        GATE.store(true, Ordering::Release);
        let addr = PAGE3.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !resident(addr) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        FILLED.store(resident(addr), Ordering::Release);
    })
    .unwrap();
    let record = mmbatch_faultaround::Record::new(PAGE, (16 * PAGE) as u64, "", [3]).unwrap();
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(100))
        .replay(record)
        .prefetchers(1)
        .build(ReplayOnlyHasThree)
        .unwrap();
    assert_eq!(r.fail_signal(), FailSignal::Sigsegv);
    PAGE3.store(r.as_ptr() as usize + 3 * PAGE, Ordering::Release);
    mmbatch_testkit::wait_until("the replay reading page 3", Duration::from_secs(10), || {
        REPLAY_READING.load(Ordering::Acquire)
    });
    // SAFETY: the region's memory, kept until this child exits.
    unsafe { signal::read_in_background(r.as_ptr() as usize + 3 * PAGE) };
    // The handler gives up on page 3 after the source timeout, then the
    // fail point fills it: wait until fail_page is done with it (it
    // recorded the failure, or took it back).
    mmbatch_testkit::wait_until("fail_page on page 3", Duration::from_secs(10), || {
        FILLED.load(Ordering::Acquire) && (r.failure().is_some() || r.stats().pages_failed == 0)
    });
    assert!(
        FILLED.load(Ordering::Acquire),
        "the replay did not install page 3"
    );
    println!("after the race: {r:?}, failure {:?}", r.failure());
    assert_eq!(
        touch(&r, 3 * PAGE + 5),
        0,
        "page 3 holds its data yet was made inaccessible"
    );
    assert_eq!(r.as_slice()[3 * PAGE + 5], 3);
    assert!(r.failure().is_none(), "{:?}", r.failure());
    assert_eq!(r.stats().pages_failed, 0);
    drop(scenario);
    std::process::exit(0);
}

/// Page 5's call waits for `release`, then answers (and sets
/// `returned`); every other page is its index. `in_memory`: the source
/// offers its pages one at a time in memory (`pages`), as an image
/// loaded late might, instead of through `read_page`.
struct Late {
    image: Vec<u8>,
    in_memory: bool,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
    returned: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Late {
    fn hold(&self, p: u64) {
        use std::sync::atomic::Ordering;
        if p == 5 {
            while !self.release.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.returned.store(true, Ordering::Release);
        }
    }
}

impl mmbatch_faultaround::PageSource for Late {
    fn len(&self) -> u64 {
        self.image.len() as u64
    }
    fn read_page(&self, p: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
        self.hold(p);
        buf.fill(p as u8);
        mmbatch_faultaround::PageRead::Ready
    }
    fn pages(&self, p: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        if !self.in_memory || count != 1 {
            return None;
        }
        self.hold(p);
        let at = p as usize * page_size;
        self.image.get(at..at + page_size)
    }
}

/// Without UFFDIO_POISON, a page whose source call outlives the source
/// timeout is failed by the watchdog (made inaccessible, the reader
/// signalled); when the call comes back late with the bytes, they are
/// dropped: a failed page is never filled afterwards, not even with its
/// data, since readers were already told it has none. Run in a child
/// (`name`, one signal a process), for a source answering by `read_page`
/// or with pages in memory.
fn a_late_answer_does_not_fill_the_failed_page(name: &str, in_memory: bool) {
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    let scenario = FailScenario::setup();
    fail::cfg("uffd::no_poison", "return").unwrap();
    let (release, returned) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let r = UffdRegion::builder(16 * PAGE)
        .order(2)
        .source_timeout(Duration::from_millis(200))
        .build(Late {
            image: image(16),
            in_memory,
            release: release.clone(),
            returned: returned.clone(),
        })
        .unwrap();
    assert_eq!(touch(&r, 5 * PAGE), libc::SIGSEGV);
    assert!(r.failure().unwrap().to_string().contains("page 5"));
    release.store(true, Ordering::Release);
    while !returned.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Time for the late call's thread to do whatever it would (longer
    // under emulation).
    std::thread::sleep(child::scaled(Duration::from_millis(300)));
    let addr = r.as_ptr() as usize + 5 * PAGE;
    println!("after the late answer: {:?}", r.stats());
    assert!(
        !resident(addr),
        "the failed page was filled by the late answer"
    );
    drop(scenario);
    std::process::exit(0);
}

#[test]
fn without_poison_a_late_read_does_not_fill_the_failed_page() {
    a_late_answer_does_not_fill_the_failed_page(
        "without_poison_a_late_read_does_not_fill_the_failed_page",
        false,
    );
}

#[test]
fn without_poison_late_pages_in_memory_do_not_fill_the_failed_page() {
    a_late_answer_does_not_fill_the_failed_page(
        "without_poison_late_pages_in_memory_do_not_fill_the_failed_page",
        true,
    );
}

/// Without UFFDIO_POISON, a failed page is left out of a neighbour's
/// window too, when the source holds the whole window in memory: the
/// window's fast path is skipped for a window with a failed page, and
/// the copy of its other missing pages (4 and 7 here, around the fault
/// on 6) must not take in page 5, which its readers were told has no
/// data.
#[test]
fn without_poison_a_neighbours_window_in_memory_skips_the_failed_page() {
    let name = "without_poison_a_neighbours_window_in_memory_skips_the_failed_page";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    static RELEASE: AtomicBool = AtomicBool::new(false);
    /// Every page in memory, in any count; a call that covers page 5
    /// waits for `RELEASE`.
    struct InMemoryLate(Vec<u8>);
    impl mmbatch_faultaround::PageSource for InMemoryLate {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, p: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
            let at = p as usize * PAGE;
            buf.copy_from_slice(&self.0[at..at + PAGE]);
            mmbatch_faultaround::PageRead::Ready
        }
        fn pages(&self, p: u64, count: usize, page_size: usize) -> Option<&[u8]> {
            if (p..p + count as u64).contains(&5) {
                while !RELEASE.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            self.0
                .get(p as usize * page_size..(p as usize + count) * page_size)
        }
    }
    let scenario = FailScenario::setup();
    fail::cfg("uffd::no_poison", "return").unwrap();
    let data = image(16);
    let r = UffdRegion::builder(16 * PAGE)
        .order(2)
        .source_timeout(Duration::from_millis(200))
        .build(InMemoryLate(data.clone()))
        .unwrap();
    // Page 5's window waits past the timeout: the page is failed.
    assert_eq!(touch(&r, 5 * PAGE), libc::SIGSEGV);
    RELEASE.store(true, Ordering::Release);
    std::thread::sleep(child::scaled(Duration::from_millis(100)));
    // A fault on 6: its window 4..8 holds the failed page.
    assert_eq!(r.as_slice()[6 * PAGE + 1], data[6 * PAGE + 1]);
    let base = r.as_ptr() as usize;
    println!("after the neighbour's fault: {:?}", r.stats());
    assert!(
        resident(base + 4 * PAGE) && resident(base + 7 * PAGE),
        "the window's neighbours"
    );
    assert!(
        !resident(base + 5 * PAGE),
        "the failed page was filled by a neighbour's window"
    );
    drop(scenario);
    std::process::exit(0);
}

/// A page-cache region whose page leaves the cache between its minor
/// fault and the handler's CONTINUE (a hole punched, as a balloon or a
/// truncation does) wakes the reader into the kernel's ordinary fault,
/// which reads the hole as zeros: the page is not failed. (Taken for a
/// misregistered range, it was poisoned: SIGBUS for a reader that had
/// done nothing wrong.)
#[test]
fn a_page_punched_out_before_its_continue_reads_as_zeros() {
    let name = "a_page_punched_out_before_its_continue_reads_as_zeros";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicI32, Ordering};
    static FD: AtomicI32 = AtomicI32::new(-1);
    let scenario = FailScenario::setup();
    let cache = UffdRegion::page_cache_from(&image(16), 16 * PAGE).unwrap();
    FD.store(cache.as_raw_fd(), Ordering::SeqCst);
    fail::cfg_callback("uffd::continue", || {
        // Page 5 leaves the cache (once).
        let fd = FD.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: our memfd, open for the test's life; a hole punched
            // in it is what the test is about.
            let r = unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    (5 * PAGE) as libc::off_t,
                    PAGE as libc::off_t,
                )
            };
            assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
        }
    })
    .unwrap();
    // SAFETY: our own memfd; the one change to it while mapped is the
    // hole, read through `touch` (a volatile read), never a reference.
    let r = unsafe { UffdRegion::over_page_cache(&cache, 16 * PAGE, 0, 1) }.unwrap();
    assert_eq!(touch(&r, 5 * PAGE + 1), 0, "the reader was signalled");
    assert!(r.failure().is_none(), "{:?}", r.failure());
    let at = r.as_ptr().wrapping_add(5 * PAGE + 1);
    // SAFETY: as above; page 5 is mapped now.
    let byte = unsafe { std::ptr::read_volatile(at) };
    assert_eq!(byte, 0, "the punched page did not read as a hole");
    drop(scenario);
    std::process::exit(0);
}

/// A `UFFDIO_CONTINUE` that keeps stopping with EAGAIN and maps nothing
/// (fail point `uffd::continue_again`: the kernel's answer while events
/// wait to be read) is retried up to the source timeout, then its page
/// is failed: the reader gets its signal rather than a handler retrying
/// for good.
#[test]
fn a_continue_that_never_progresses_fails_its_page() {
    let name = "a_continue_that_never_progresses_fails_its_page";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let cache = UffdRegion::page_cache_from(&image(16), 16 * PAGE).unwrap();
    fail::cfg("uffd::continue_again", "return").unwrap();
    // SAFETY: our own memfd; nothing writes or truncates it.
    let r = unsafe {
        UffdRegion::builder(16 * PAGE)
            .source_timeout(Duration::from_millis(50))
            .build_over_page_cache(&cache)
    }
    .unwrap();
    assert_ne!(touch(&r, 5 * PAGE + 1), 0, "the reader was not signalled");
    assert!(r.failure().is_some(), "no failure recorded");
    assert!(r.stats().retries > 16, "{:?}", r.stats());
    fail::remove("uffd::continue_again");
    drop(scenario);
    std::process::exit(0);
}

/// A kernel that registers the range but offers none of the ioctls the
/// region needs (fail point `uffd::ioctls`): an error naming the one it
/// lacks, for copies and for minor faults, and nothing left behind. The
/// minor-fault check used to test `UFFDIO_WAKE` where it needs
/// `UFFDIO_CONTINUE`.
#[test]
fn a_registration_without_the_needed_ioctl_is_refused_by_name() {
    if let Some(run) = child::parent(
        "a_registration_without_the_needed_ioctl_is_refused_by_name",
        LIMIT,
    ) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let cache = UffdRegion::page_cache_from(&image(16), 16 * PAGE).unwrap();
    let (fds, maps) = (region_fds(), mappings(16 * PAGE));
    fail::cfg("uffd::ioctls", "return").unwrap();
    let e = UffdRegion::new(16 * PAGE, 0, image(16), 1).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what } if what.contains("UFFDIO_COPY")),
        "{e}"
    );
    // SAFETY: our own memfd, unchanged while mapped (the region is refused).
    let e = unsafe { UffdRegion::over_page_cache(&cache, 16 * PAGE, 0, 1) }.unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what } if what.contains("UFFDIO_CONTINUE")),
        "{e}"
    );
    fail::remove("uffd::ioctls");
    assert_eq!(
        (region_fds(), mappings(16 * PAGE)),
        (fds, maps),
        "left behind"
    );
    assert_eq!(
        mmbatch_testkit::threads_named_settled("uffd-", 0, Duration::from_secs(2)),
        0
    );
    drop(scenario);
    std::process::exit(0);
}

/// A copy that succeeds without copying anything, every time: the run
/// backs off as for EAGAIN and, at the source timeout, fails the page
/// (the reader gets the region's signal) instead of spinning on the
/// ioctl with the reader held for good.
#[test]
fn a_copy_that_never_progresses_fails_the_page_at_the_timeout() {
    if let Some(run) = child::parent(
        "a_copy_that_never_progresses_fails_the_page_at_the_timeout",
        LIMIT,
    ) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(image(16))
        .unwrap();
    fail::cfg("uffd::copy", "return(NOTHING)").unwrap();
    let signal = signal_of(&r);
    let start = std::time::Instant::now();
    let got = touch(&r, 3 * PAGE);
    let took = start.elapsed();
    fail::remove("uffd::copy");
    assert_eq!(got, signal, "the reader was not failed");
    let cause = r.failure().expect("a failure recorded").to_string();
    // Failed by the backoff's bound (EAGAIN, after the source timeout),
    // not by an error of the copy itself.
    assert!(
        cause.contains("page 3") && cause.contains("os error 11"),
        "{cause}"
    );
    assert!(took >= Duration::from_millis(300), "failed after {took:?}");
    drop(scenario);
    std::process::exit(0);
}

/// The watchdog claims a handler stuck inside the source on a page that
/// another handler has installed meanwhile (a neighbour's window read it
/// at its second call): the page's reader is woken, nothing is failed.
/// Here on a foreign handler where the kernel has no `UFFDIO_POISON`
/// (fail point `uffd::no_poison`), which can neither poison nor protect
/// another process's page: a page failed there would be a failure on
/// record for a page that holds its data. In a child: the mapping a VMM
/// would own is never unmapped.
#[test]
fn a_stuck_handlers_page_installed_by_another_is_not_failed() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let name = "a_stuck_handlers_page_installed_by_another_is_not_failed";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static CALLS_FOR_FIVE: AtomicUsize = AtomicUsize::new(0);
    static RELEASE: AtomicBool = AtomicBool::new(false);
    /// The image's bytes; the first read of page 5 waits for `RELEASE`
    /// (up to 30 s), the later ones answer at once.
    struct FirstFiveStalls(Vec<u8>);
    impl mmbatch_faultaround::PageSource for FirstFiveStalls {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> mmbatch_faultaround::PageRead {
            if index == 5 && CALLS_FOR_FIVE.fetch_add(1, Ordering::SeqCst) == 0 {
                let until = std::time::Instant::now() + Duration::from_secs(30);
                while !RELEASE.load(Ordering::Acquire) && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let at = index as usize * PAGE;
            buf.copy_from_slice(&self.0[at..at + PAGE]);
            mmbatch_faultaround::PageRead::Ready
        }
    }
    let scenario = FailScenario::setup();
    fail::cfg("uffd::no_poison", "return").unwrap();
    let src = image(16);
    let (base, uffd, range) = vmm_memory(16);
    let h = UffdHandler::builder(uffd, [range])
        .order(1)
        .handlers(2)
        // Long enough for the other handler to install page 5 first,
        // however slow the host.
        .source_timeout(child::scaled(Duration::from_secs(1)))
        .build(FirstFiveStalls(src.clone()))
        .unwrap();
    assert_eq!(h.fail_signal(), None);
    let five = base as usize + 5 * PAGE;
    // SAFETY: the mapping made above, never unmapped; the handler fills
    // each page before a read of it returns.
    let reader = std::thread::spawn(move || unsafe { std::ptr::read_volatile(five as *const u8) });
    // The first handler is now inside page 5's first read.
    mmbatch_testkit::wait_until("page 5's first read", Duration::from_secs(5), || {
        CALLS_FOR_FIVE.load(Ordering::SeqCst) == 1
    });
    // SAFETY: as above. Page 4's window (pages 4 and 5) is served by the
    // other handler, whose read of page 5 answers at once.
    let four = unsafe { std::ptr::read_volatile((base as usize + 4 * PAGE) as *const u8) };
    assert_eq!(four, src[4 * PAGE]);
    assert_eq!(reader.join().unwrap(), src[5 * PAGE]);
    // Past the source timeout the watchdog claims the stuck handler and
    // starts a replacement beside the two, then decides the page (which
    // this test is for): two more ticks (a tick is a quarter of the
    // timeout) before the verdict is read.
    mmbatch_testkit::wait_until(
        "the stuck handler's replacement",
        child::scaled(Duration::from_secs(5)),
        || mmbatch_testkit::threads_named("uffd-handler-") >= 3,
    );
    std::thread::sleep(child::scaled(Duration::from_millis(500)));
    println!("{:?}, failure {:?}", h.stats(), h.failure());
    assert!(h.failure().is_none(), "{:?}", h.failure());
    assert_eq!(h.stats().pages_failed, 0);
    RELEASE.store(true, Ordering::Release);
    drop(h);
    drop(scenario);
    std::process::exit(0);
}

/// A replay stops once a copy is refused with ESRCH (the process whose
/// memory it installs has exited; fail point `uffd::copy` plays it): it
/// used to read every remaining run of the record from the source, each
/// copy failing at once.
#[test]
fn a_replay_stops_once_the_process_is_gone() {
    let _scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_replay_stops_once_the_process_is_gone");
    let reads = Arc::new(AtomicUsize::new(0));
    let src = Counting {
        src: image(128),
        reads: reads.clone(),
    };
    // 64 runs of one page, each a batch of its own.
    let record = Record::new(PAGE, (128 * PAGE) as u64, "", (0..128).step_by(2)).unwrap();
    fail::cfg("uffd::copy", "return(ESRCH)").unwrap();
    let r = UffdRegion::builder(128 * PAGE)
        .replay(record)
        .prefetchers(1)
        .build(src)
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)), "the replay ended");
    fail::remove("uffd::copy");
    let read = reads.load(Ordering::SeqCst);
    assert!(read <= 2, "{read} pages read after the process was gone");
}

/// A source that counts the pages asked of it.
struct Counting {
    src: Vec<u8>,
    reads: Arc<AtomicUsize>,
}

impl PageSource for Counting {
    fn len(&self) -> u64 {
        self.src.len() as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.src.read_page(index, buf)
    }
}

/// `rec`'s working-set file of `src`, already unlinked; `corrupt` flips
/// a byte of page 140 in it.
fn ws_file(rec: &Record, src: &[u8], corrupt: bool) -> std::fs::File {
    let path = std::env::temp_dir().join(format!("mmbatch-fp-ws-{}", std::process::id()));
    let mut bytes = Vec::new();
    rec.write_pages(&src.to_vec(), &mut bytes).unwrap();
    if corrupt {
        // The file's runs follow its 24-byte header, in record order.
        bytes[24 + 140 * PAGE] ^= 1;
    }
    std::fs::write(&path, &bytes).unwrap();
    let ws = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    ws
}

/// Removes its fail points when dropped. Declared after a region whose
/// replay one of them holds, it lets the replay go before the region's
/// drop waits for it, also when the test panics first (else the drop
/// waits on a paused replay until the hang guard aborts the binary).
struct RemovedOnDrop(&'static [&'static str]);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        for name in self.0 {
            fail::remove(name);
        }
    }
}

/// A region replaying pages 0..192 of a 256-page image (runs of 64) from
/// a working-set file, `corrupt` flipping a byte of page 140 in the file,
/// its replay threads held before their first batch; a fault on page 140
/// (the run 128..192, which the replay has not reached), then the replay
/// let go. Returns the source's page reads and the resident pages at the
/// fault, the stats once replayed, and whether the region then holds the
/// image's pages 0..192.
fn fault_ahead_of_a_working_set_replay(corrupt: bool) -> ((usize, usize), UffdStats, bool) {
    let src = image(256);
    let rec = Record::new(PAGE, (256 * PAGE) as u64, "", 0..192).unwrap();
    let ws = ws_file(&rec, &src, corrupt);
    let reads = Arc::new(AtomicUsize::new(0));
    fail::cfg("uffd::replay_batch", "pause").unwrap();
    let r = UffdRegion::builder(256 * PAGE)
        .replay(rec)
        .replay_pages(ws)
        .build(Counting {
            src: src.clone(),
            reads: reads.clone(),
        })
        .unwrap();
    let _go = RemovedOnDrop(&["uffd::replay_batch"]);
    // SAFETY: inside the region.
    let byte = unsafe { std::ptr::read_volatile(r.as_ptr().wrapping_add(140 * PAGE + 3)) };
    let at_fault = (reads.load(Ordering::SeqCst), r.resident_pages());
    fail::remove("uffd::replay_batch");
    assert_eq!(byte, src[140 * PAGE + 3]);
    assert!(r.wait_replayed(Duration::from_secs(20)));
    let same = r.as_slice()[..192 * PAGE] == src[..192 * PAGE];
    (at_fault, r.stats(), same)
}

/// A fault ahead of a replay from a working-set file takes its run from
/// that file, as the replay would have installed it: not from the source,
/// which may be remote, slow, or not have the pages yet.
#[test]
fn a_fault_ahead_of_a_working_set_replay_reads_the_file_not_the_source() {
    let scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard(
        "a_fault_ahead_of_a_working_set_replay_reads_the_file_not_the_source",
    );
    let (at_fault, st, same) = fault_ahead_of_a_working_set_replay(false);
    assert_eq!(at_fault, (0, 64), "{st:?}");
    assert_eq!((st.faults, st.pages_prefetched), (1, 128), "{st:?}");
    assert_eq!(st.replay_runs_refused, 0);
    assert!(same);
    scenario.teardown();
}

/// A run whose working-set bytes fail their CRC on a fault's path comes
/// from the source instead, whole, and is refused as the replay refuses
/// one (the replay does not take it again).
#[test]
fn a_faults_run_that_fails_its_crc_comes_from_the_source() {
    let scenario = FailScenario::setup();
    let _hang =
        mmbatch_testkit::hang_guard("a_faults_run_that_fails_its_crc_comes_from_the_source");
    let (at_fault, st, same) = fault_ahead_of_a_working_set_replay(true);
    assert_eq!(at_fault, (64, 64), "{st:?}");
    assert_eq!((st.faults, st.pages_prefetched), (1, 128), "{st:?}");
    assert_eq!(st.replay_runs_refused, 1);
    assert!(same, "the corrupt byte reached the region");
    scenario.teardown();
}

/// A fault ahead of the replay reads its run from the working-set file
/// under the watchdog, as any source call: a file that stops answering
/// (a network disk) fails the faulting page at the source timeout, not
/// when the read returns, and the read's late bytes do not undo that;
/// they install the run's other pages (nobody else would replay them),
/// and the replay, let go, installs the other runs.
#[test]
fn a_stalled_working_set_read_on_a_faults_path_fails_its_page() {
    let name = "a_stalled_working_set_read_on_a_faults_path_fails_its_page";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let scenario = FailScenario::setup();
    let src = image(256);
    let rec = Record::new(PAGE, (256 * PAGE) as u64, "", 0..192).unwrap();
    let ws = ws_file(&rec, &src, false);
    fail::cfg("uffd::replay_batch", "pause").unwrap();
    // Held until the reader has its signal, or for 4 s (scaled: then
    // the read's late bytes would have come first): no race with a slow
    // host.
    fail::cfg("uffd::taken_run_read", "pause").unwrap();
    let hold = child::scaled(Duration::from_secs(4));
    let (read_back, held) = std::sync::mpsc::channel::<()>();
    let release = std::thread::spawn(move || {
        let _ = held.recv_timeout(hold);
        fail::remove("uffd::taken_run_read");
    });
    let r = UffdRegion::builder(256 * PAGE)
        .replay(rec)
        .replay_pages(ws)
        .source_timeout(Duration::from_millis(200))
        .build(src.clone())
        .unwrap();
    let _go = RemovedOnDrop(&["uffd::taken_run_read", "uffd::replay_batch"]);
    let expected = signal_of(&r);
    let start = std::time::Instant::now();
    assert_eq!(touch(&r, 140 * PAGE), expected);
    let took = start.elapsed();
    println!("the stalled read's page failed after {took:?}");
    assert!(
        r.failure().is_some() && took < hold * 3 / 4,
        "the page waited for the held read ({took:?}): {:?}",
        r.failure()
    );
    let _ = read_back.send(());
    release.join().unwrap();
    let e = r.failure().unwrap();
    assert!(matches!(e, Error::PageFailed { page: 140, .. }), "{e}");
    fail::remove("uffd::replay_batch");
    assert!(r.wait_replayed(Duration::from_secs(8)));
    let st = r.stats();
    assert_eq!(
        (st.pages_prefetched, r.resident_pages(), st.faults),
        (128, 191, 1),
        "{st:?}"
    );
    // Read on this thread (a signal now would end the child): every
    // other page holds its bytes, and the stalled read's late bytes did
    // not bring page 140 back.
    for p in (0..256).filter(|&p| p != 140) {
        assert!(
            r.as_slice()[p * PAGE..(p + 1) * PAGE] == src[p * PAGE..(p + 1) * PAGE],
            "page {p}"
        );
    }
    assert_eq!(r.resident_pages(), 255, "{:?}", r.stats());
    assert_eq!(r.stats().pages_failed, 1);
    drop(scenario);
    std::process::exit(0);
}

/// A source whose runs are never ready (`read_pages`), its pages one by
/// one always (`read_page`): a remote store that answers page requests
/// at once but has no bulk read ready.
struct NoRunsReady(Vec<u8>);

impl PageSource for NoRunsReady {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.0.read_page(index, buf)
    }
    fn read_pages(&self, _: u64, _: usize, _: &mut [u8]) -> PageRead {
        PageRead::NotReady
    }
}

/// A fault ahead of the replay (held at `uffd::replay_batch`) on page 140
/// of a region replaying pages 0..192 of `src`, with `copy` set on the
/// `uffd::copy` fail point meanwhile (if any): whether page 140 then
/// holds its bytes, the pages resident, and the faults.
fn fault_ahead_of_a_held_replay(src: impl PageSource, copy: Option<&str>) -> (bool, usize, u64) {
    let want = image(256)[140 * PAGE..141 * PAGE].to_vec();
    let rec = Record::new(PAGE, (256 * PAGE) as u64, "", 0..192).unwrap();
    fail::cfg("uffd::replay_batch", "pause").unwrap();
    let r = UffdRegion::builder(256 * PAGE)
        .replay(rec)
        .build(src)
        .unwrap();
    let _go = RemovedOnDrop(&["uffd::copy", "uffd::replay_batch"]);
    if let Some(c) = copy {
        fail::cfg("uffd::copy", c).unwrap();
    }
    let same = r.as_slice()[140 * PAGE..141 * PAGE] == want[..];
    let resident = r.resident_pages();
    fail::remove("uffd::copy");
    fail::remove("uffd::replay_batch");
    assert!(r.wait_replayed(Duration::from_secs(20)));
    (same, resident, r.stats().faults)
}

/// A run a fault took whose bulk read is not ready comes in page by page,
/// as the fault's window would: the right bytes, all 64 pages, one fault.
#[test]
fn a_faults_run_not_ready_in_bulk_comes_page_by_page() {
    let scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_faults_run_not_ready_in_bulk_comes_page_by_page");
    assert_eq!(
        fault_ahead_of_a_held_replay(NoRunsReady(image(256)), None),
        (true, 64, 1)
    );
    scenario.teardown();
}

/// A fault's run whose copy the kernel refuses once still gets the
/// faulting page in, copied alone from the run's bytes read (its own
/// slice of them).
#[test]
fn a_faults_run_copy_refused_once_still_copies_its_page() {
    let scenario = FailScenario::setup();
    let _hang = mmbatch_testkit::hang_guard("a_faults_run_copy_refused_once_still_copies_its_page");
    let src = Counting {
        src: image(256),
        reads: Arc::new(AtomicUsize::new(0)),
    };
    let (same, resident, faults) = fault_ahead_of_a_held_replay(src, Some("1*return(ENOMEM)"));
    assert!(same, "page 140 holds another page's bytes");
    assert!(resident >= 1 && faults == 1, "{resident} {faults}");
    scenario.teardown();
}

/// `page_cache_from` over a source that never has page 2 ready gives up
/// at its wait (cut to nothing by the fail point `uffd::page_cache_wait`,
/// 30 s otherwise) with an error that names the page and the way out. In
/// a child, bounded: a wait with no end fails the test, not hangs it.
#[test]
fn a_page_cache_gives_up_on_a_page_never_ready() {
    let name = "a_page_cache_gives_up_on_a_page_never_ready";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    struct NeverTwo;
    impl PageSource for NeverTwo {
        fn len(&self) -> u64 {
            4 * PAGE as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            if index == 2 {
                return PageRead::NotReady;
            }
            buf.fill(index as u8);
            PageRead::Ready
        }
    }
    let scenario = FailScenario::setup();
    fail::cfg("uffd::page_cache_wait", "return").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(UffdRegion::page_cache_from(&NeverTwo, 4 * PAGE).map(drop));
    });
    let e = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("page_cache_from waited on")
        .unwrap_err();
    assert!(matches!(e, Error::PageFailed { page: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("did not have page 2 ready"), "{e}");
    drop(scenario);
    std::process::exit(0);
}
