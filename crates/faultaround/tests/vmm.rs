//! A child process plays the VMM: it maps guest memory, creates and
//! registers a userfaultfd, and hands it over with its region list on a
//! Unix socket as Firecracker does; this process serves it with a
//! [`UffdHandler`] — through the `firecracker_uffd` example's protocol code
//! — and the child checks what it reads.

#[path = "../examples/firecracker_uffd/protocol.rs"]
#[allow(dead_code)]
mod protocol;

use std::{
    ffi::c_void,
    fs::File,
    io::Write,
    os::{
        fd::OwnedFd,
        unix::net::{UnixListener, UnixStream},
    },
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use mmbatch_faultaround::{
    FailSignal, HugePageSize, PageRead, PageSource, Record, UffdHandler, UffdHandlerBuilder,
    UffdRegion, UffdStats,
};
use mmbatch_testkit::{child, vmm};
use protocol::GuestRegionUffdMapping;

/// A child VMM's bound (scaled under emulation): each takes well under a
/// second here, and a bound shorter than a mutation run's timeout makes a
/// hang a failure.
const LIMIT: Duration = Duration::from_secs(20);
/// How long a child VMM may run on once its handler has returned: a VMM
/// that has finished exits within milliseconds of its handler.
const HANDLER_GONE: Duration = Duration::from_secs(2);
const SOCKET: &str = "MMBATCH_VMM_SOCKET";
const IMAGE: &str = "MMBATCH_VMM_IMAGE";

fn page() -> usize {
    rustix::param::page_size()
}

/// Guest memory as the child maps it: region `B` (16 pages) holds the
/// image's first 16 pages, region `A` (48 pages, mapped first, described
/// first) the next 48: out of order in memory and in the list.
const A_PAGES: usize = 48;
const B_PAGES: usize = 16;
const PAGES: usize = A_PAGES + B_PAGES;

/// Page `p` of the image: bytes derived from `p`, so a misplaced page shows.
fn image_page(p: usize) -> Vec<u8> {
    (0..page()).map(|i| (p * 13 + i % 241) as u8).collect()
}

/// A temporary directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("mmbatch-vmm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_image(dir: &Dir) -> PathBuf {
    let path = dir.0.join("snapshot.mem");
    let mut f = File::create(&path).unwrap();
    for p in 0..PAGES {
        f.write_all(&image_page(p)).unwrap();
    }
    path
}

// ---- the VMM (child) side ----

fn map(pages: usize) -> *mut u8 {
    vmm::map_anonymous(pages * page())
}

/// The one range of `pages` pages at `mem`, holding the source's first
/// pages.
fn one_range(mem: *mut u8, pages: usize) -> mmbatch_faultaround::UffdRange {
    mmbatch_faultaround::UffdRange {
        base: mem as usize,
        len: pages * page(),
        offset: 0,
    }
}

/// A userfaultfd with REMOVE events, as Firecracker makes it (a balloon
/// needs them), registered over each range of `pages` pages.
fn userfaultfd(ranges: &[(*mut u8, usize)]) -> OwnedFd {
    let bytes: Vec<_> = ranges.iter().map(|&(b, n)| (b, n * page())).collect();
    vmm::userfaultfd(&bytes, vmm::UFFD_FEATURE_EVENT_REMOVE)
}

/// Sends the region list and the userfaultfd, as Firecracker does.
fn send(socket: &str, regions: &[GuestRegionUffdMapping], uffd: &OwnedFd) -> UnixStream {
    vmm::send(socket, &serde_json::to_vec(regions).unwrap(), uffd)
}

fn region(base: *mut u8, pages: usize, first: usize) -> GuestRegionUffdMapping {
    GuestRegionUffdMapping {
        base_host_virt_addr: base as u64,
        size: pages * page(),
        offset: (first * page()) as u64,
        page_size: Some(page()),
        page_size_kib: Some(page()),
    }
}

/// The VMM: maps the two regions, hands them over, reads every page from
/// two threads and checks it against the image, writes, discards a page
/// (a balloon's `MADV_DONTNEED`) and reads zeros from it.
fn vmm() {
    let socket = std::env::var(SOCKET).unwrap();
    let a = map(A_PAGES);
    let b = map(B_PAGES);
    let uffd = userfaultfd(&[(a, A_PAGES), (b, B_PAGES)]);
    let regions = [region(a, A_PAGES, B_PAGES), region(b, B_PAGES, 0)];
    // Closed at once, as Firecracker's `guest_memory_from_uffd` dropped
    // its socket before its PR #5122: the handler serves until this
    // process exits.
    drop(send(&socket, &regions, &uffd));
    // Image page of each guest page.
    let pages: Vec<(usize, usize)> = (0..A_PAGES)
        .map(|i| (a as usize + i * page(), B_PAGES + i))
        .chain((0..B_PAGES).map(|i| (b as usize + i * page(), i)))
        .collect();
    std::thread::scope(|s| {
        for half in pages.chunks(PAGES / 2) {
            s.spawn(move || {
                for &(addr, p) in half.iter().rev() {
                    // SAFETY: a page of our mapping; the handler fills it.
                    let got = unsafe { std::slice::from_raw_parts(addr as *const u8, page()) };
                    assert!(
                        got == image_page(p),
                        "guest page at {addr:#x} is not image page {p}"
                    );
                }
            });
        }
    });
    // SAFETY: inside region A.
    let w = unsafe { a.add(5 * page() + 7) };
    // SAFETY: our mapping, present now.
    unsafe { w.write_volatile(0xEE) };
    // SAFETY: as above.
    assert_eq!(unsafe { w.read_volatile() }, 0xEE);
    // SAFETY: inside region B.
    let d = unsafe { b.add(3 * page()) };
    // SAFETY: one page of our own mapping.
    let r = unsafe { libc::madvise(d.cast::<c_void>(), page(), libc::MADV_DONTNEED) };
    assert_eq!(r, 0);
    // SAFETY: as above: discarded, so it faults again and reads as zeros.
    let z = unsafe { std::slice::from_raw_parts(d, page()) };
    assert!(
        z.iter().all(|&x| x == 0),
        "a discarded page read the image back"
    );
    println!("vmm: {PAGES} guest pages read as the image from 2 threads; write and discard seen");
}

/// A [`child::run_until`] condition: true once `finished` (the handler's
/// thread has returned, or panicked) has held for [`HANDLER_GONE`]. A
/// handler gone while its VMM runs (one that failed to build) leaves the
/// VMM's faults unserved: the test fails then, not at the child's limit.
fn gone(finished: impl Fn() -> bool) -> impl Fn() -> bool {
    let since = std::sync::OnceLock::new();
    let grace = child::scaled(HANDLER_GONE);
    move || finished() && since.get_or_init(Instant::now).elapsed() > grace
}

/// Accepts the VMM on `l` and reads its message: the connection and the
/// handshake.
fn handshake(l: &UnixListener) -> (UnixStream, protocol::Handshake) {
    let (stream, _) = l.accept().unwrap();
    let hs = protocol::receive(&stream).unwrap();
    (stream, hs)
}

/// Runs the child `name` as the VMM against a handler in this process
/// fed by `serve`, which returns once the VMM has gone; the child's output.
fn with_vmm<T: Send>(
    name: &str,
    tag: &str,
    serve: impl FnOnce(&UnixListener, File) -> T + Send,
) -> (child::Run, T) {
    with_vmm_until(name, tag, &[], serve, || false)
}

/// [`with_vmm`] with extra environment `env`, the child killed early
/// once `give_up` holds (at [`LIMIT`] else).
fn with_vmm_until<T: Send>(
    name: &str,
    tag: &str,
    env: &[(&str, &str)],
    serve: impl FnOnce(&UnixListener, File) -> T + Send,
    give_up: impl Fn() -> bool,
) -> (child::Run, T) {
    let dir = Dir::new(tag);
    let image = write_image(&dir);
    let socket = dir.0.join("uffd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let sock = socket.to_str().unwrap().to_owned();
    let img = image.to_str().unwrap().to_owned();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let r = serve(&listener, File::open(&image).unwrap());
            done.store(true, Ordering::Release);
            r
        });
        let mut vars = vec![(SOCKET, sock.as_str()), (IMAGE, img.as_str())];
        vars.extend_from_slice(env);
        let run = {
            let handler_gone = gone(|| server.is_finished());
            child::run_until(name, LIMIT, &vars, || handler_gone() || give_up())
        };
        // A child that died before connecting leaves the server in
        // `accept`: connect and hang up to let it go.
        if !done.load(Ordering::Acquire) {
            let _ = UnixStream::connect(&socket);
        }
        (run, server.join().unwrap())
    })
}

#[test]
fn a_vmm_is_served_over_firecrackers_protocol() {
    if child::is_child() {
        return vmm();
    }
    // From the memory file (pread into the handler's buffer) and from its
    // bytes mapped (the example's way: one copy from the page cache).
    for mapped in [false, true] {
        let (run, stats) = with_vmm(
            "a_vmm_is_served_over_firecrackers_protocol",
            "fc",
            |l, image| {
                let served = if mapped {
                    // SAFETY: the test's image; nothing writes it.
                    let m = unsafe { protocol::Mapped::of(&image) }.unwrap();
                    protocol::serve(l, mmbatch_faultaround::InMemory(m), 2, 2)
                } else {
                    protocol::serve(l, image, 2, 2)
                };
                served.map_err(|e| e.to_string())
            },
        );
        println!("{}", run.output);
        run.expect_success();
        let stats = stats.expect("the handler");
        println!("handler (mapped: {mapped}): {stats:?}");
        // Every page was read once, the discarded one read again as zeros.
        assert_eq!(stats.pages_copied, PAGES as u64, "{stats:?}");
        assert_eq!(
            (stats.remove_events, stats.pages_zeroed),
            (1, 1),
            "{stats:?}"
        );
        assert_eq!(stats.pages_failed, 0, "{stats:?}");
        // Windows of 4 pages: far fewer faults than pages.
        assert!(stats.faults < PAGES as u64, "{stats:?}");
    }
}

/// A VMM that hands its memory over and exits before a page is read.
fn vmm_exiting() {
    let socket = std::env::var(SOCKET).unwrap();
    let a = map(PAGES);
    let uffd = userfaultfd(&[(a, PAGES)]);
    drop(send(&socket, &[region(a, PAGES, 0)], &uffd));
    println!("vmm: exiting with {PAGES} pages never read");
}

/// A shutdown once the VMM has exited stops filling at the first page
/// the kernel refuses with ESRCH (its memory is gone): it used to read
/// every missing page from the source and try each copy three times,
/// 7 ms of sleeps a page (about two hours for 4 GiB of guest memory),
/// failing them one by one.
#[test]
fn a_shutdown_after_the_vmm_exited_stops_at_once() {
    if child::is_child() {
        return vmm_exiting();
    }
    let (run, (stats, failure)) = with_vmm(
        "a_shutdown_after_the_vmm_exited_stops_at_once",
        "gone",
        |l, image| {
            let (stream, hs) = handshake(l);
            drop(stream);
            let handler = UffdHandler::builder(hs.uffd, hs.ranges)
                .build(image)
                .unwrap();
            match &hs.exit {
                protocol::PeerExit::Watch(exit) => protocol::wait_exit(exit).unwrap(),
                protocol::PeerExit::Gone => {}
                protocol::PeerExit::Unknown => panic!("no pidfd of the child"),
            }
            handler.shutdown();
            (handler.stats(), handler.failure().map(|e| e.to_string()))
        },
    );
    println!("{}", run.output);
    run.expect_success();
    println!("{stats:?}\n{failure:?}");
    assert!(stats.pages_failed <= 1, "{stats:?}");
    let failure = failure.expect("the fill's failure");
    assert!(failure.contains("exited"), "{failure}");
}

/// The VMM for the write-tracking test: registers its regions for
/// missing-page and write-protect faults with `UFFD_FEATURE_WP_ASYNC`,
/// reads region A, writes three pages of A it read and three of B it
/// never touched (a write fault on a missing page), says "w1" on the
/// socket and waits for the handler's answer; then writes one more page
/// and discards A2 and says "w2". Source pages written: 2, 3, 15, 16, 21,
/// 46, then 22 (B's last page, 15, and A's first, 16, are neighbours in
/// the source though not in memory); discarded: 18.
fn vmm_writing() {
    let socket = std::env::var(SOCKET).unwrap();
    let a = map(A_PAGES);
    let b = map(B_PAGES);
    let bytes = [(a, A_PAGES * page()), (b, B_PAGES * page())];
    let uffd = vmm::userfaultfd_registered(
        &bytes,
        vmm::UFFD_FEATURE_EVENT_REMOVE
            | vmm::UFFD_FEATURE_PAGEFAULT_FLAG_WP
            | vmm::UFFD_FEATURE_WP_ASYNC,
        vmm::UFFDIO_REGISTER_MODE_MISSING | vmm::UFFDIO_REGISTER_MODE_WP,
    );
    let regions = [region(a, A_PAGES, B_PAGES), region(b, B_PAGES, 0)];
    let mut stream = send(&socket, &regions, &uffd);
    for i in 0..A_PAGES {
        let at = a.wrapping_add(i * page());
        // SAFETY: a page of our mapping; the handler fills it.
        let got = unsafe { std::slice::from_raw_parts(at, page()) };
        assert!(
            got == image_page(B_PAGES + i),
            "guest page A{i} is not the image's"
        );
    }
    let write = |at: *mut u8, p: usize| {
        let at = at.wrapping_add(p * page() + 1);
        // SAFETY: in page `p` of one of our two mappings.
        unsafe { at.write_volatile(0xEE) };
    };
    write(a, 0);
    write(a, 5);
    write(a, 30);
    write(b, 2);
    write(b, 3);
    write(b, B_PAGES - 1);
    let written = b.wrapping_add(2 * page() + 1);
    // SAFETY: written just above, present.
    assert_eq!(unsafe { written.read_volatile() }, 0xEE);
    let mut ack = [0u8; 2];
    stream.write_all(b"w1").unwrap();
    std::io::Read::read_exact(&mut stream, &mut ack).unwrap();
    write(a, 6);
    // A balloon takes A2 back (source page 18, read above).
    // SAFETY: one page of our own mapping.
    let r = unsafe {
        libc::madvise(
            a.wrapping_add(2 * page()).cast(),
            page(),
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(r, 0);
    stream.write_all(b"w2").unwrap();
    std::io::Read::read_exact(&mut stream, &mut ack).unwrap();
    println!("vmm: wrote pages A0, A5, A30, B2, B3, B15, then A6; discarded A2");
}

/// A VMM that set its userfaultfd up for write tracking has its writes
/// reported by the handler, by source page, exactly: pages it wrote after
/// reading them, pages whose first touch was a write, and after
/// `take_written_pages` only the writes that came later; neighbouring
/// source pages in one range even where two regions meet. A page it
/// discards is no longer counted installed, and no other with it.
#[test]
fn a_vmms_writes_are_reported_by_its_handler() {
    if child::is_child() {
        return vmm_writing();
    }
    if !mmbatch_testkit::kernel_at_least(6, 7) {
        eprintln!("no UFFD_FEATURE_WP_ASYNC or PAGEMAP_SCAN before Linux 6.7: not run here");
        return;
    }
    let (run, reports) = with_vmm(
        "a_vmms_writes_are_reported_by_its_handler",
        "wp",
        |l, image| {
            let (mut stream, hs) = handshake(l);
            let pid = hs.pid.expect("SO_PEERCRED names the VMM");
            assert_ne!(pid, std::process::id(), "SO_PEERCRED gave our own pid");
            let h = UffdHandler::builder(hs.uffd, hs.ranges)
                .order(2)
                .track_writes_of(pid)
                .build(image)
                .unwrap();
            let mut said = [0u8; 2];
            std::io::Read::read_exact(&mut stream, &mut said).unwrap();
            assert_eq!(&said, b"w1");
            // Every page copied is one the handler counts as there.
            assert_eq!(h.installed_pages() as u64, h.stats().pages_copied);
            let first = h.written_pages().unwrap();
            let taken = h.take_written_pages().unwrap();
            let after = h.written_pages().unwrap();
            stream.write_all(b"ok").unwrap();
            std::io::Read::read_exact(&mut stream, &mut said).unwrap();
            assert_eq!(&said, b"w2");
            let second = h.written_pages().unwrap();
            // A2 discarded: one page fewer installed once the handler
            // has taken the REMOVE event (within a bound).
            let want = h.stats().pages_copied as usize - 1;
            let until = Instant::now() + Duration::from_secs(5);
            while h.installed_pages() != want && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            let installed = (h.installed_pages(), want);
            // Shutdown unregisters, and with it every write-protect bit:
            // a report after it is refused, not a page map of "written".
            h.shutdown();
            let e = h.written_pages().unwrap_err().to_string();
            assert!(e.contains("before shutdown"), "{e}");
            stream.write_all(b"ok").unwrap();
            (first, taken, after, second, installed, h.stats())
        },
    );
    println!("{}", run.output);
    run.expect_success();
    let (first, taken, after, second, installed, stats) = reports;
    assert_eq!(installed.0, installed.1, "installed pages after a discard");
    println!("handler: {stats:?}");
    assert_eq!(first, vec![2..4, 15..17, 21..22, 46..47]);
    assert_eq!(taken, first);
    assert_eq!(after, vec![]);
    assert_eq!(second, vec![22..23]);
    assert_eq!(stats.pages_failed, 0, "{stats:?}");
}

/// A handler asked to track the writes of a process whose userfaultfd was
/// not set up for it is refused at build, naming what is missing — not
/// left to fail every copy, or to make every first write wait.
#[test]
fn write_tracking_of_a_userfaultfd_not_set_up_for_it_is_refused() {
    let mem = map(4);
    let (pid, range) = (std::process::id(), [(mem, 4 * page())]);
    let ranges = || [one_range(mem, 4)];
    // The refusal of tracking `pid`'s writes through `uffd`.
    let refusal = |uffd, pid| {
        UffdHandler::builder(uffd, ranges())
            .track_writes_of(pid)
            .build(File::open("/proc/self/exe").unwrap())
            .unwrap_err()
            .to_string()
    };
    // No WP_ASYNC in the UFFDIO_API (the only way on a kernel before 6.7).
    let uffd = vmm::userfaultfd(&range, vmm::UFFD_FEATURE_EVENT_REMOVE);
    let e = refusal(uffd, pid);
    assert!(
        e.contains("UFFD_FEATURE_WP_ASYNC") && e.contains("track_writes_of"),
        "{e}"
    );
    // It names the features the process asked for, as it asked for them
    // (not with the kernel's own bit 31, which marks the handshake done).
    let asked = format!("features {:#x},", vmm::UFFD_FEATURE_EVENT_REMOVE);
    assert!(e.contains(&asked), "{e}");
    if !mmbatch_testkit::kernel_at_least(6, 7) {
        return;
    }
    // WP_ASYNC asked for, but the range registered for missing pages only.
    let uffd = vmm::userfaultfd(
        &range,
        vmm::UFFD_FEATURE_PAGEFAULT_FLAG_WP | vmm::UFFD_FEATURE_WP_ASYNC,
    );
    let e = refusal(uffd, pid);
    assert!(
        e.contains("UFFDIO_REGISTER_MODE_WP") && e.contains("VmFlags"),
        "{e}"
    );
    // A process that is not there.
    let uffd = vmm::userfaultfd_registered(
        &range,
        vmm::UFFD_FEATURE_PAGEFAULT_FLAG_WP | vmm::UFFD_FEATURE_WP_ASYNC,
        vmm::UFFDIO_REGISTER_MODE_MISSING | vmm::UFFDIO_REGISTER_MODE_WP,
    );
    let e = refusal(uffd, u32::MAX / 2);
    assert!(e.contains("smaps"), "{e}");
    // A handler built without it says how to ask.
    let uffd = vmm::userfaultfd(&range, vmm::UFFD_FEATURE_EVENT_REMOVE);
    let h = UffdHandler::builder(uffd, ranges())
        .build(File::open("/proc/self/exe").unwrap())
        .unwrap();
    let e = h.written_pages().unwrap_err().to_string();
    assert!(e.contains("track_writes_of(pid)"), "{e}");
    drop(h);
    // SAFETY: the 4 pages mapped above, no longer used (this test runs
    // in the harness's process, not a child).
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// A userfaultfd set up for events the handler does not serve (a fork's
/// new descriptor, a remap it would not follow) is refused at build,
/// naming the feature, instead of leaving the other process's faults to
/// hang.
#[test]
fn a_userfaultfd_asking_for_unserved_events_is_refused() {
    let mem = map(4);
    let ranges = [one_range(mem, 4)];
    let uffd = vmm::userfaultfd(
        &[(mem, 4 * page())],
        // REMAP, not FORK: FORK needs CAP_SYS_PTRACE since Linux 5.11.
        linux_raw_sys::general::UFFD_FEATURE_EVENT_REMAP | vmm::UFFD_FEATURE_EVENT_REMOVE,
    );
    let e = UffdHandler::builder(uffd, ranges)
        .build(File::open("/proc/self/exe").unwrap())
        .unwrap_err()
        .to_string();
    println!("{e}");
    assert!(
        e.contains("UFFD_FEATURE_EVENT_REMAP") && e.contains("uffd"),
        "{e}"
    );
}

/// A page size that is not a power of two, or below the system's, is
/// refused at build, naming the setting; the system's page is taken.
#[test]
fn a_handler_of_an_impossible_page_size_is_refused() {
    let mem = map(4);
    let ranges = || [one_range(mem, 4)];
    for bad in [3 * page(), page() / 2, 0] {
        let uffd = vmm::userfaultfd(&[(mem, 4 * page())], vmm::UFFD_FEATURE_EVENT_REMOVE);
        let e = UffdHandler::builder(uffd, ranges())
            .page_size(bad)
            .build(File::open("/proc/self/exe").unwrap())
            .unwrap_err();
        assert!(
            matches!(
                e,
                mmbatch_faultaround::Error::BadSetting {
                    setting: "page_size",
                    ..
                }
            ),
            "{bad}: {e}"
        );
    }
    let uffd = vmm::userfaultfd(&[(mem, 4 * page())], vmm::UFFD_FEATURE_EVENT_REMOVE);
    let h = UffdHandler::builder(uffd, ranges())
        .page_size(page())
        .build(File::open("/proc/self/exe").unwrap())
        .unwrap();
    assert_eq!(h.page_size(), page());
    drop(h);
    // SAFETY: the 4 pages mapped above, no longer used (this test runs
    // in the harness's process, not a child).
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// A range that overflows is refused as one that overflows (it was
/// refused as "not multiples of the page size", which it was), and a
/// range's error prints its numbers as hex with `0x` (a length of
/// `40000`, hex, read as a decimal that is not a multiple of 4096).
#[test]
fn a_bad_range_is_refused_naming_its_fault() {
    let mem = map(4);
    let refusal = |r: mmbatch_faultaround::UffdRange| {
        let uffd = vmm::userfaultfd(&[(mem, 4 * page())], vmm::UFFD_FEATURE_EVENT_REMOVE);
        UffdHandler::builder(uffd, [r])
            .build(File::open("/proc/self/exe").unwrap())
            .unwrap_err()
            .to_string()
    };
    let mut past_the_end = one_range(mem, 4);
    past_the_end.offset = u64::MAX - page() as u64 + 1;
    let e = refusal(past_the_end);
    assert!(
        e.contains("runs past the end") && !e.contains("multiples"),
        "{e}"
    );
    let mut unaligned = one_range(mem, 4);
    unaligned.len = 0x40000 + 1;
    let e = refusal(unaligned);
    assert!(
        e.contains("len: 0x40001 (262145 bytes)") && e.contains("multiples"),
        "{e}"
    );
    // SAFETY: the 4 pages mapped above, no longer used (this test runs
    // in the harness's process, not a child).
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// A page as large as a handler's buffer, 32 MiB (arm64's contiguous huge
/// pages over 4 KiB base pages), is taken; one twice that is refused at
/// build, naming the bound.
#[test]
fn a_handler_takes_pages_up_to_its_buffer() {
    const BIG: usize = 32 << 20;
    for size in [BIG, 2 * BIG] {
        // Twice the larger page, so that an aligned one fits whatever the
        // mapping's start; never touched. A mapping of its own for each
        // size: a child another test spawns meanwhile may hold the last
        // userfaultfd open for a moment (a forked child has every
        // descriptor until it execs), and registering its range again
        // would then be EBUSY.
        let raw = map(4 * BIG / page());
        let mem = raw.wrapping_add(raw.align_offset(2 * BIG));
        let range = mmbatch_faultaround::UffdRange {
            base: mem as usize,
            len: size,
            offset: 0,
        };
        let uffd = vmm::userfaultfd(&[(mem, size)], vmm::UFFD_FEATURE_EVENT_REMOVE);
        let built = UffdHandler::builder(uffd, [range])
            .page_size(size)
            .build(mmbatch_faultaround::Zeroes(size as u64));
        match built {
            Ok(h) if size == BIG => assert_eq!(h.page_size(), BIG),
            Err(e) if size > BIG => {
                // The setting named is the one the caller gave.
                assert!(
                    matches!(
                        e,
                        mmbatch_faultaround::Error::BadSetting {
                            setting: "page_size",
                            ..
                        }
                    ),
                    "{e}"
                );
                assert!(e.to_string().contains("at most 32 MiB"), "{e}");
            }
            other => panic!("{size} bytes a page: {:?}", other.map(|h| h.page_size())),
        }
        // SAFETY: the mapping made above, no longer used (this test runs
        // in the harness's process, not a child).
        unsafe { libc::munmap(raw.cast(), 4 * BIG) };
    }
}

/// A userfaultfd the other process made blocking is made non-blocking
/// (the handler's threads share it: a read that finds the fault taken by
/// another must return), its other flags kept.
#[test]
fn a_blocking_userfaultfd_is_made_non_blocking() {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let mem = map(4);
    let ranges = [one_range(mem, 4)];
    let uffd = vmm::userfaultfd(&[(mem, 4 * page())], vmm::UFFD_FEATURE_EVENT_REMOVE);
    let blocking = fcntl_getfl(&uffd).unwrap() - OFlags::NONBLOCK;
    fcntl_setfl(&uffd, blocking).unwrap();
    // A second descriptor of the same open file shares its flags.
    let seen = uffd.try_clone().unwrap();
    let h = UffdHandler::builder(uffd, ranges)
        .build(File::open("/proc/self/exe").unwrap())
        .unwrap();
    let flags = fcntl_getfl(&seen).unwrap();
    if flags != blocking | OFlags::NONBLOCK {
        // Left blocking, the handler's threads could not be stopped.
        std::mem::forget(h);
        panic!("flags {flags:?}, not {:?}", blocking | OFlags::NONBLOCK);
    }
    drop(h);
    // SAFETY: the 4 pages mapped above, no longer used (this test runs
    // in the harness's process, not a child).
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// A userfaultfd received without `MSG_CMSG_CLOEXEC` is made
/// close-on-exec: a program the handler's process runs later would hold
/// it, and with it the other process's memory, past that process's exit.
#[test]
fn an_adopted_userfaultfd_is_made_close_on_exec() {
    use std::os::fd::{AsRawFd, BorrowedFd};

    use rustix::io::{FdFlags, fcntl_getfd, fcntl_setfd};
    let mem = map(4);
    let ranges = [one_range(mem, 4)];
    let uffd = vmm::userfaultfd(&[(mem, 4 * page())], vmm::UFFD_FEATURE_EVENT_REMOVE);
    fcntl_setfd(&uffd, FdFlags::empty()).unwrap();
    let raw = uffd.as_raw_fd();
    let h = UffdHandler::builder(uffd, ranges)
        .build(File::open("/proc/self/exe").unwrap())
        .unwrap();
    // SAFETY: the handler's descriptor, open while `h` lives.
    let flags = fcntl_getfd(unsafe { BorrowedFd::borrow_raw(raw) }).unwrap();
    drop(h);
    assert!(flags.contains(FdFlags::CLOEXEC), "{flags:?}");
    // SAFETY: the 4 pages mapped above, no longer used.
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// A userfaultfd handed over before its `UFFDIO_API` is refused at
/// build: the kernel reports it readable as an error and fails every
/// read, so the handler's threads spun at full CPU serving nothing.
#[test]
fn a_userfaultfd_before_its_api_handshake_is_refused() {
    use std::os::fd::FromRawFd;
    let mem = map(4);
    let ranges = [one_range(mem, 4)];
    // SAFETY: userfaultfd(2) takes flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert!(fd >= 0, "userfaultfd: {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just returned, owned by nothing else.
    let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let threads = mmbatch_testkit::threads_named("uffd-");
    let r = UffdHandler::builder(uffd, ranges).build(File::open("/proc/self/exe").unwrap());
    let e = match r {
        Ok(h) => {
            let busy = mmbatch_testkit::threads_named("uffd-") - threads;
            drop(h);
            panic!("built, with {busy} handler threads on a descriptor they cannot read");
        }
        Err(e) => e.to_string(),
    };
    println!("{e}");
    assert!(e.contains("UFFDIO_API"), "{e}");
    // SAFETY: the 4 pages mapped above, no longer used.
    unsafe { libc::munmap(mem.cast(), 4 * page()) };
}

/// Maps `pages` pages of `file` from page `first`, shared (a VMM's guest
/// memory backed by a memfd).
fn map_shared(file: &File, pages: usize, first: usize) -> *mut u8 {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh shared mapping of our own file at an address the
    // kernel picks; never unmapped (the process is a test's child).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * page(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            (first * page()) as libc::off_t,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

/// The VMM for the page-cache tests: its guest memory is a memfd holding
/// the image (a template restored by sharing its page cache, as e2b and
/// fcvm do), mapped shared as regions A and B, and its one page past the
/// image (a hole) as region C, registered for minor faults — or, with
/// `MMBATCH_VMM_MODE=missing`, for missing pages, when it reads the hole.
fn vmm_over_page_cache() {
    let socket = std::env::var(SOCKET).unwrap();
    let image = std::env::var(IMAGE).unwrap();
    let missing = std::env::var("MMBATCH_VMM_MODE").is_ok_and(|m| m == "missing");
    let fd = rustix::fs::memfd_create("vmm-guest", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let mut memfd = File::from(fd);
    memfd.write_all(&std::fs::read(image).unwrap()).unwrap();
    memfd.set_len(((HOLE + 1) * page()) as u64).unwrap();
    let a = map_shared(&memfd, A_PAGES, B_PAGES);
    let b = map_shared(&memfd, B_PAGES, 0);
    // The file's last page, never written: a hole (and the two pages
    // before it in no range).
    let hole = map_shared(&memfd, 1, HOLE);
    let bytes = [(a, A_PAGES * page()), (b, B_PAGES * page()), (hole, page())];
    let (features, mode) = if missing {
        (0, vmm::UFFDIO_REGISTER_MODE_MISSING)
    } else {
        (
            vmm::UFFD_FEATURE_MINOR_SHMEM,
            vmm::UFFDIO_REGISTER_MODE_MINOR,
        )
    };
    let uffd = vmm::userfaultfd_registered(&bytes, features, mode);
    let regions = [
        region(a, A_PAGES, B_PAGES),
        region(b, B_PAGES, 0),
        region(hole, 1, HOLE),
    ];
    let mut stream = send(&socket, &regions, &uffd);
    if missing {
        // SAFETY: a page of our mapping, inside the file.
        let x = unsafe { hole.read_volatile() };
        println!("vmm: read {x} from the hole");
        return;
    }
    let pages: Vec<(usize, usize)> = (0..A_PAGES)
        .map(|i| (a as usize + i * page(), B_PAGES + i))
        .chain((0..B_PAGES).map(|i| (b as usize + i * page(), i)))
        .collect();
    std::thread::scope(|s| {
        for half in pages.chunks(PAGES / 2) {
            s.spawn(move || {
                for &(addr, p) in half {
                    // SAFETY: a page of our mapping; the handler maps it.
                    let got = unsafe { std::slice::from_raw_parts(addr as *const u8, page()) };
                    assert!(
                        got == image_page(p),
                        "guest page at {addr:#x} is not image page {p}"
                    );
                }
            });
        }
    });
    // The handler shuts down; the memory is then ours alone, the hole
    // read as shmem reads one.
    stream.write_all(b"rd").unwrap();
    std::io::Read::read_exact(&mut stream, &mut [0u8; 2]).unwrap();
    // SAFETY: a page of our mapping, unregistered now.
    assert_eq!(unsafe { hole.read_volatile() }, 0);
    println!("vmm: {PAGES} guest pages of a shared page cache read as the image");
}

/// The source page of the VMM's page-cache test's hole: past the image,
/// with two pages between that no range holds.
const HOLE: usize = PAGES + 2;

/// A VMM whose guest memory is a shared page cache holding the image,
/// registered for minor faults, is served by `UFFDIO_CONTINUE`: every
/// page reads as the image, in windows, with nothing copied.
#[test]
fn a_vmms_page_cache_is_mapped_in_place() {
    if child::is_child() {
        return vmm_over_page_cache();
    }
    let (run, stats) = with_vmm("a_vmms_page_cache_is_mapped_in_place", "minor", |l, _| {
        let (mut stream, hs) = handshake(l);
        let mut given = hs.ranges.clone();
        let h = UffdHandler::builder(hs.uffd, hs.ranges)
            .order(2)
            .handlers(2)
            .record(true)
            .build_over_page_cache()
            .unwrap();
        // The ranges read back as given (three, two at source offsets
        // past 0), sorted by offset.
        given.sort_by_key(|r| r.offset);
        assert_eq!(h.ranges(), given);
        let mut said = [0u8; 2];
        std::io::Read::read_exact(&mut stream, &mut said).unwrap();
        // `shutdown` maps what is cached over every range — pages mapped
        // already, the hole, the pages between ranges — and returns.
        let h = std::sync::Arc::new(h);
        let (done, finished) = std::sync::mpsc::channel();
        let shut = h.clone();
        std::thread::spawn(move || {
            shut.shutdown();
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("the handler's shutdown hangs");
        stream.write_all(b"ok").unwrap();
        let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
        (
            h.stats(),
            h.record().map(|r| r.pages().len()),
            h.failure().map(|e| e.to_string()),
        )
    });
    println!("{}", run.output);
    run.expect_success();
    let (stats, recorded, failure) = stats;
    println!("handler: {stats:?}");
    assert_eq!(failure, None);
    assert_eq!(
        stats.pages_copied, PAGES as u64,
        "every page mapped once: {stats:?}"
    );
    assert!(stats.faults < PAGES as u64, "windows of 4 pages: {stats:?}");
    assert_eq!(recorded, Some(stats.faults as usize), "{stats:?}");
}

/// A VMM that registered its page cache for missing pages (not minor
/// ones) and faults on a page the file lacks gets that page failed, with
/// a cause naming the setup — not a handler waking it forever.
#[test]
fn a_page_cache_registered_for_missing_pages_is_failed_not_spun_on() {
    if child::is_child() {
        return vmm_over_page_cache();
    }
    let built = std::sync::OnceLock::new();
    let (run, failure) = with_vmm_until(
        "a_page_cache_registered_for_missing_pages_is_failed_not_spun_on",
        "missing",
        &[("MMBATCH_VMM_MODE", "missing")],
        |l, _| {
            let (stream, hs) = handshake(l);
            let h = std::sync::Arc::new(
                UffdHandler::builder(hs.uffd, hs.ranges)
                    .build_over_page_cache()
                    .unwrap(),
            );
            let _ = built.set(h.clone());
            let _ = std::io::Read::read(&mut &stream, &mut [0u8; 1]);
            (h.failure().map(|e| e.to_string()), h.stats())
        },
        blocked_since(|| {
            built
                .get()
                .is_some_and(|h: &std::sync::Arc<UffdHandler>| h.failure().is_some())
        }),
    );
    let (failure, stats) = failure;
    println!("{}\nhandler: {stats:?}", run.output);
    assert_reader_stopped(&run);
    let failure = failure.expect("the failure");
    assert!(
        failure.contains("MODE_MINOR") && failure.contains("page 66"),
        "{failure}"
    );
    assert!(
        stats.faults < 10,
        "the fault came back {} times",
        stats.faults
    );
}

/// The VMM for the hugetlbfs test: its guest memory is a hugetlbfs memfd
/// of four 2 MiB pages holding the image, mapped shared as two regions
/// (huge pages 2-3, then 0-1), registered for minor faults.
fn vmm_over_huge_page_cache() {
    use mmbatch_testkit::huge::HUGE;
    let socket = std::env::var(SOCKET).unwrap();
    let image = huge_image();
    let memfd = UffdRegion::huge_page_cache_from(&image, 4 * HUGE, HugePageSize::Size2M).unwrap();
    let map = |first: usize| {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of our own memfd, at an address
        // the kernel picks; never unmapped (the process is a test's child).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                (first * HUGE) as libc::off_t,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        p.cast::<u8>()
    };
    let (hi, lo) = (map(2), map(0));
    let uffd = vmm::userfaultfd_registered(
        &[(hi, 2 * HUGE), (lo, 2 * HUGE)],
        vmm::UFFD_FEATURE_MINOR_HUGETLBFS,
        vmm::UFFDIO_REGISTER_MODE_MINOR,
    );
    let huge_region = |base: *mut u8, first: usize| GuestRegionUffdMapping {
        base_host_virt_addr: base as u64,
        size: 2 * HUGE,
        offset: (first * HUGE) as u64,
        page_size: Some(HUGE),
        page_size_kib: Some(HUGE),
    };
    let _stream = send(&socket, &[huge_region(hi, 2), huge_region(lo, 0)], &uffd);
    for (base, first) in [(lo, 0), (hi, 2)] {
        // SAFETY: our two mappings; the handler maps their pages.
        let got = unsafe { std::slice::from_raw_parts(base, 2 * HUGE) };
        assert!(
            got == &image[first * HUGE..(first + 2) * HUGE],
            "huge pages {first}-{} are not the image's",
            first + 1
        );
    }
    println!("vmm: 4 huge pages of a shared hugetlbfs page cache read as the image");
}

/// Four huge pages whose bytes derive from their place.
fn huge_image() -> Vec<u8> {
    let huge = mmbatch_testkit::huge::HUGE;
    (0..4 * huge)
        .map(|b| ((b / huge) * 31 + b % 4093) as u8)
        .collect()
}

/// A VMM whose guest memory is a hugetlbfs memfd is served a whole huge
/// page a fault, mapped in place (`UFFDIO_CONTINUE`) by a handler whose
/// page size is the protocol's.
#[test]
fn a_vmms_hugetlbfs_page_cache_is_mapped_in_huge_pages() {
    if child::is_child() {
        return vmm_over_huge_page_cache();
    }
    let Some(_pool) = mmbatch_testkit::huge::Pool::grow(4) else {
        return;
    };
    let (run, stats) = with_vmm(
        "a_vmms_hugetlbfs_page_cache_is_mapped_in_huge_pages",
        "huge",
        |l, _| {
            let (mut stream, hs) = handshake(l);
            assert_eq!(hs.page_size, mmbatch_testkit::huge::HUGE);
            let h = UffdHandler::builder(hs.uffd, hs.ranges)
                .page_size(hs.page_size)
                .build_over_page_cache()
                .unwrap();
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
            (h.stats(), h.failure().map(|e| e.to_string()))
        },
    );
    println!("{}", run.output);
    run.expect_success();
    let (stats, failure) = stats;
    println!("handler: {stats:?}");
    assert_eq!(failure, None);
    assert_eq!(stats.pages_copied, 4, "four huge pages mapped: {stats:?}");
}

/// A handler built without the protocol's page size (the system's 4 KiB
/// for 2 MiB hugetlbfs memory) can fill no page: the VMM's reader gets
/// SIGBUS where the kernel poisons (else stays blocked, as documented),
/// and the failure names the page size to build with. Poisoned at 4 KiB, the poison was refused as the copy
/// was (EINVAL), taken for a kernel without it, and the reader blocked
/// for good.
#[test]
fn a_handler_of_the_wrong_page_size_fails_the_reader_and_names_the_size() {
    if child::is_child() {
        return vmm_over_huge_page_cache();
    }
    let Some(_pool) = mmbatch_testkit::huge::Pool::grow(4) else {
        return;
    };
    let built = std::sync::OnceLock::new();
    let (run, failure) = with_vmm_until(
        "a_handler_of_the_wrong_page_size_fails_the_reader_and_names_the_size",
        "huge-misfit",
        &[],
        |l, _| {
            let (mut stream, hs) = handshake(l);
            assert_eq!(hs.page_size, mmbatch_testkit::huge::HUGE);
            let h = std::sync::Arc::new(
                UffdHandler::builder(hs.uffd, hs.ranges)
                    .build_over_page_cache()
                    .unwrap(),
            );
            let _ = built.set(h.clone());
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
            h.failure().map(|e| e.to_string())
        },
        blocked_since(|| {
            built
                .get()
                .is_some_and(|h: &std::sync::Arc<UffdHandler>| h.failure().is_some())
        }),
    );
    println!("{}", run.output);
    assert_reader_stopped(&run);
    let failure = failure.expect("the failure");
    println!("handler: {failure}");
    assert!(
        failure.contains("UFFDIO_CONTINUE of 1 page(s) from page 0 failed")
            && failure.contains("EINVAL: the page is not one of the memory's own"),
        "{failure}"
    );
    // The size is learnt from the poison that took it.
    let size = format!("page_size({})", mmbatch_testkit::huge::HUGE);
    assert_eq!(failure.contains(&size), poisons(), "{failure}");
}

/// The VMM for the replay test: maps region B, hands it over, waits for
/// the handler's word that the replay is done, then checks every page
/// without having faulted on the recorded ones.
fn vmm_replayed() {
    let socket = std::env::var(SOCKET).unwrap();
    let b = map(B_PAGES);
    let uffd = userfaultfd(&[(b, B_PAGES)]);
    let mut stream = send(&socket, &[region(b, B_PAGES, 0)], &uffd);
    let mut done = [0u8; 2];
    std::io::Read::read_exact(&mut stream, &mut done).unwrap();
    for p in 0..B_PAGES {
        let at = b.wrapping_add(p * page());
        // SAFETY: a page of our mapping, replayed or filled on its fault.
        let got = unsafe { std::slice::from_raw_parts(at, page()) };
        assert!(got == image_page(p), "page {p} is not the image's");
    }
    println!("vmm: {B_PAGES} pages read after the replay");
}

/// A handler given a record replays it into the VMM's memory before the
/// VMM touches it, as an owned region does: `wait_replayed` says when,
/// and the recorded pages then take no fault.
#[test]
fn a_foreign_replay_installs_the_record_before_the_vmm_faults() {
    if child::is_child() {
        return vmm_replayed();
    }
    let recorded = [3u64, 4, 5, 9, 12];
    let (run, (waited, stats)) = with_vmm(
        "a_foreign_replay_installs_the_record_before_the_vmm_faults",
        "replay",
        |l, image| {
            let (mut stream, hs) = handshake(l);
            let record = Record::new(page(), (B_PAGES * page()) as u64, "", recorded).unwrap();
            let h = UffdHandler::builder(hs.uffd, hs.ranges)
                .replay(record)
                .build(image)
                .unwrap();
            let waited = h.wait_replayed(Duration::from_secs(10));
            let after_replay = h.stats();
            stream.write_all(b"go").unwrap();
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
            (waited, (after_replay, h.stats()))
        },
    );
    println!("{}", run.output);
    run.expect_success();
    let (replayed, end) = stats;
    println!("handler after the replay: {replayed:?}\nat the end: {end:?}");
    assert!(waited, "wait_replayed gave up");
    assert_eq!(replayed.pages_prefetched, recorded.len() as u64);
    assert_eq!(replayed.faults, 0, "the VMM had not touched its memory yet");
    // The other 11 pages faulted, each alone (order 0); the recorded
    // ones did not.
    assert_eq!(end.faults, (B_PAGES - recorded.len()) as u64, "{end:?}");
}

/// Guest memory of the gap test: image pages 0..4 and 8..16, in two
/// mappings; image pages 4..8 are in neither.
const GAP: [(usize, usize); 2] = [(0, 4), (8, 8)];

/// The VMM for the gap test: maps [`GAP`]'s two regions, hands them over,
/// waits for the handler's word that the replay is done, then checks
/// every page.
fn vmm_replayed_with_a_gap() {
    let socket = std::env::var(SOCKET).unwrap();
    let maps: Vec<(*mut u8, usize, usize)> =
        GAP.iter().map(|&(first, n)| (map(n), n, first)).collect();
    let ranges: Vec<(*mut u8, usize)> = maps.iter().map(|&(b, n, _)| (b, n)).collect();
    let regions: Vec<_> = maps.iter().map(|&(b, n, f)| region(b, n, f)).collect();
    let uffd = userfaultfd(&ranges);
    let mut stream = send(&socket, &regions, &uffd);
    let mut done = [0u8; 2];
    std::io::Read::read_exact(&mut stream, &mut done).unwrap();
    for &(base, n, first) in &maps {
        for i in 0..n {
            // SAFETY: a page of our mapping, replayed or filled on its fault.
            let got = unsafe { std::slice::from_raw_parts(base.wrapping_add(i * page()), page()) };
            assert!(
                got == image_page(first + i),
                "image page {} misplaced",
                first + i
            );
        }
    }
    println!("vmm: both regions read after the replay");
}

/// A record made against another layout of guest memory (here, one run
/// over image pages 2..10) replayed into ranges with a gap (4..8 in no
/// range): the pages on either side are installed, the gap skipped, and
/// the replay ends.
#[test]
fn a_foreign_replay_skips_the_gap_between_ranges() {
    if child::is_child() {
        return vmm_replayed_with_a_gap();
    }
    let _hang = mmbatch_testkit::hang_guard("a_foreign_replay_skips_the_gap_between_ranges");
    let (run, (waited, stats)) = with_vmm(
        "a_foreign_replay_skips_the_gap_between_ranges",
        "gap",
        |l, image| {
            let (mut stream, hs) = handshake(l);
            let record = Record::new(page(), (16 * page()) as u64, "", 2..10).unwrap();
            let h = UffdHandler::builder(hs.uffd, hs.ranges)
                .replay(record)
                .build(image)
                .unwrap();
            let waited = h.wait_replayed(Duration::from_secs(10));
            let stats = h.stats();
            stream.write_all(b"go").unwrap();
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
            (waited, stats)
        },
    );
    println!("{}", run.output);
    run.expect_success();
    println!("handler after the replay: {stats:?}");
    assert!(waited, "wait_replayed gave up");
    assert_eq!(stats.pages_prefetched, 4, "pages 2, 3, 8 and 9: {stats:?}");
    assert_eq!(stats.faults, 0, "{stats:?}");
}

/// The page the VMM of [`vmm_wrote_first`] writes before it registers.
const WRITTEN_FIRST: usize = 5;

/// The VMM for the pre-written page test: maps region B and writes one
/// page ([`WRITTEN_FIRST`]) before registering it (a device model or the
/// loader placing data before the restore begins), hands it over, waits
/// for the replay, then checks that page kept its own bytes and every
/// other page is the image's.
fn vmm_wrote_first() {
    let socket = std::env::var(SOCKET).unwrap();
    let b = map(B_PAGES);
    let mine = vec![0xC3u8; page()];
    let at = b.wrapping_add(WRITTEN_FIRST * page());
    // SAFETY: one page inside our mapping; nothing else touches it yet.
    unsafe { std::ptr::copy_nonoverlapping(mine.as_ptr(), at, page()) };
    let uffd = userfaultfd(&[(b, B_PAGES)]);
    let mut stream = send(&socket, &[region(b, B_PAGES, 0)], &uffd);
    let mut done = [0u8; 2];
    std::io::Read::read_exact(&mut stream, &mut done).unwrap();
    for p in 0..B_PAGES {
        // SAFETY: a page of our mapping, present or filled on its fault.
        let got = unsafe { std::slice::from_raw_parts(b.wrapping_add(p * page()), page()) };
        if p == WRITTEN_FIRST {
            assert!(
                got == mine,
                "the handler overwrote page {p}, written before"
            );
        } else {
            assert!(got == image_page(p), "page {p} is not the image's");
        }
    }
    println!("vmm: page {WRITTEN_FIRST} kept what it wrote; the others read the image");
}

/// A page the other process wrote before it registered the range is
/// present: the replay's copy onto it is refused (EEXIST), its bytes
/// stay the process's own, and it counts among the pages the handler
/// knows are resident, so `installed_pages` ends at every page of the
/// range.
#[test]
fn a_page_written_before_registration_is_kept_and_counted() {
    if child::is_child() {
        return vmm_wrote_first();
    }
    let _hang =
        mmbatch_testkit::hang_guard("a_page_written_before_registration_is_kept_and_counted");
    let recorded = [3u64, 4, WRITTEN_FIRST as u64, 9];
    let (run, (waited, stats, _, installed)) = with_vmm(
        "a_page_written_before_registration_is_kept_and_counted",
        "written-first",
        |l, image| replay_then_release(l, &recorded, |b| b.build(image)),
    );
    println!("{}", run.output);
    run.expect_success();
    println!("handler at the end: {stats:?}, {installed} pages installed");
    assert!(waited, "wait_replayed gave up");
    assert_eq!(stats.already_present, 1, "{stats:?}");
    assert_eq!(installed, B_PAGES, "{stats:?}");
}

/// The VMM for the tests of pages mapped before registration: its guest
/// memory (one range, B) a memfd holding the image's first `B_PAGES`,
/// every page read (so mapped) before it registers the range for minor
/// faults, or only the pages `MMBATCH_VMM_MAPPED` lists.
fn vmm_mapped_first() {
    let socket = std::env::var(SOCKET).unwrap();
    let image = std::fs::read(std::env::var(IMAGE).unwrap()).unwrap();
    let fd = rustix::fs::memfd_create("vmm-guest", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let mut memfd = File::from(fd);
    memfd.write_all(&image[..B_PAGES * page()]).unwrap();
    let b = map_shared(&memfd, B_PAGES, 0);
    let mapped: Vec<usize> = match std::env::var("MMBATCH_VMM_MAPPED") {
        Ok(list) => list.split(',').map(|p| p.parse().unwrap()).collect(),
        Err(_) => (0..B_PAGES).collect(),
    };
    for p in mapped {
        let at = b.wrapping_add(p * page());
        // SAFETY: a page of our mapping, inside the file, written with
        // the byte it holds: a write fault maps that page alone, where a
        // read's maps the kernel's fault-around window of cached pages.
        unsafe { at.write_volatile(image[p * page()]) };
    }
    let uffd = vmm::userfaultfd_registered(
        &[(b, B_PAGES * page())],
        vmm::UFFD_FEATURE_MINOR_SHMEM,
        vmm::UFFDIO_REGISTER_MODE_MINOR,
    );
    let mut stream = send(&socket, &[region(b, B_PAGES, 0)], &uffd);
    let mut done = [0u8; 2];
    std::io::Read::read_exact(&mut stream, &mut done).unwrap();
    for p in 0..B_PAGES {
        // SAFETY: a page of our mapping, mapped since before registration.
        let got = unsafe { std::slice::from_raw_parts(b.wrapping_add(p * page()), page()) };
        assert!(got == image_page(p), "page {p} is not the image's");
    }
    println!("vmm: {B_PAGES} pages mapped before registration read the image");
}

/// A page the other process mapped before it registered its page cache
/// for minor faults is present: the replay's `UFFDIO_CONTINUE` onto it is
/// refused (EEXIST), and it counts among the pages the handler knows are
/// installed, as a copied page found present does.
#[test]
fn a_page_mapped_before_registration_is_counted_in_place() {
    if child::is_child() {
        return vmm_mapped_first();
    }
    let _hang =
        mmbatch_testkit::hang_guard("a_page_mapped_before_registration_is_counted_in_place");
    let recorded = [3u64, 4, 5, 9];
    let (run, (waited, stats, _, installed)) = with_vmm(
        "a_page_mapped_before_registration_is_counted_in_place",
        "mapped-first",
        |l, _| replay_then_release(l, &recorded, UffdHandlerBuilder::build_over_page_cache),
    );
    println!("{}", run.output);
    run.expect_success();
    assert!(waited, "wait_replayed gave up");
    assert_eq!(stats.already_present, recorded.len() as u64, "{stats:?}");
    assert_eq!(installed, recorded.len(), "{stats:?}");
}

/// A replayed run whose middle page the other process mapped before it
/// registered (one `UFFDIO_CONTINUE` maps pages 3 and 4 and stops short
/// with EAGAIN; the next finds 5 present) counts that page: after the
/// replay the handler knows pages 1, 3, 4, 5 and 9 installed.
#[test]
fn a_page_mapped_before_registration_inside_a_replayed_run_is_counted() {
    if child::is_child() {
        return vmm_mapped_first();
    }
    let name = "a_page_mapped_before_registration_inside_a_replayed_run_is_counted";
    let _hang = mmbatch_testkit::hang_guard(name);
    let recorded = [1u64, 3, 4, 5, 9];
    let (run, (waited, stats, replayed, _)) = with_vmm_until(
        name,
        "mapped-some",
        &[("MMBATCH_VMM_MAPPED", "5,9")],
        |l, _| replay_then_release(l, &recorded, UffdHandlerBuilder::build_over_page_cache),
        || false,
    );
    println!("{}", run.output);
    run.expect_success();
    println!("handler at the end: {stats:?}, {replayed} pages installed by the replay");
    assert!(waited, "wait_replayed gave up");
    assert_eq!(stats.already_present, 2, "{stats:?}");
    // The run's CONTINUE stopped short of page 5 (EAGAIN, a retry).
    assert!(stats.retries >= 1, "{stats:?}");
    assert_eq!(replayed, recorded.len(), "{stats:?}");
}

/// The handler side of the tests of pages present before registration:
/// takes the VMM's userfaultfd and ranges, replays `recorded` (pages of
/// range B) with the handler `build` makes, lets the VMM read once the
/// replay is done, and returns whether it was, the handler's stats and
/// its installed pages after the replay and at the end.
fn replay_then_release(
    l: &UnixListener,
    recorded: &[u64],
    build: impl FnOnce(UffdHandlerBuilder) -> Result<UffdHandler, mmbatch_faultaround::Error>,
) -> (bool, UffdStats, usize, usize) {
    let (mut stream, hs) = handshake(l);
    let record = Record::new(
        page(),
        (B_PAGES * page()) as u64,
        "",
        recorded.iter().copied(),
    )
    .unwrap();
    let h = build(UffdHandler::builder(hs.uffd, hs.ranges).replay(record)).unwrap();
    let waited = h.wait_replayed(Duration::from_secs(10));
    let replayed = h.installed_pages();
    stream.write_all(b"go").unwrap();
    let _ = std::io::Read::read(&mut stream, &mut [0u8; 1]);
    (waited, h.stats(), replayed, h.installed_pages())
}

/// A source that fails one page.
struct FailsPage(File, u64);

impl PageSource for FailsPage {
    fn len(&self) -> u64 {
        PageSource::len(&self.0)
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if index == self.1 {
            return PageRead::Failed(std::io::Error::other("the snapshot store lost it"));
        }
        self.0.read_page(index, buf)
    }
}

/// The VMM for the failure tests: reads `MMBATCH_VMM_READ`'s page of
/// region B (an offset in pages, or `stray` for a registered page no
/// range describes: of two such pages, the one whose address has the
/// page size's bit set, so that the page poisoned must be the faulting
/// one, not a neighbour a mask one bit off would name).
fn vmm_reading_one() {
    let socket = std::env::var(SOCKET).unwrap();
    let b = map(B_PAGES);
    let stray = map(2);
    let uffd = userfaultfd(&[(b, B_PAGES), (stray, 2)]);
    let _stream = send(&socket, &[region(b, B_PAGES, 0)], &uffd);
    let at = match std::env::var("MMBATCH_VMM_READ").unwrap().as_str() {
        "stray" if stray as usize & page() != 0 => stray,
        // SAFETY: the second page of the two-page stray mapping.
        "stray" => unsafe { stray.add(page()) },
        n => {
            // SAFETY: inside region B.
            unsafe { b.add(n.parse::<usize>().unwrap() * page()) }
        }
    };
    // SAFETY: a page of our mapping: served, or a signal.
    let x = unsafe { at.read_volatile() };
    println!("vmm: read {x}");
}

/// Before Linux 6.6 a page cannot be poisoned in another process: the
/// reader stays blocked (the documented fallback), and the child is
/// killed once its page has been failed this long.
const BLOCKED: Duration = Duration::from_secs(3);

/// A [`child::run_until`] condition where pages cannot be poisoned: true
/// once `failed` (the handler has failed the reader's page) has held for
/// [`BLOCKED`], unscaled: what is timed is the reader staying blocked,
/// not work that emulation slows (scaled, the wait was 30 s a test in
/// the emulated guest). Never true where pages are poisoned: the reader
/// dies of SIGBUS there.
fn blocked_since(failed: impl Fn() -> bool) -> impl Fn() -> bool {
    let since = std::sync::OnceLock::new();
    move || !poisons() && failed() && since.get_or_init(Instant::now).elapsed() > BLOCKED
}

/// Runs `name` as a VMM reading one page, served by a handler over a
/// source failing page 9; the child's run and the handler's failure.
fn failing(name: &str, read: &str) -> (child::Run, Option<String>) {
    let dir = Dir::new(read);
    let image = write_image(&dir);
    let socket = dir.0.join("uffd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let built = std::sync::OnceLock::new();
    let handler = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let (stream, _) = listener.accept().unwrap();
            let hs = protocol::receive(&stream).unwrap();
            let source = FailsPage(File::open(&image).unwrap(), 9);
            let h = std::sync::Arc::new(
                UffdHandler::builder(hs.uffd, hs.ranges)
                    .build(source)
                    .unwrap(),
            );
            // Said before any page fails, too (a 6.1 guest heard SIGBUS).
            assert_eq!(h.fail_signal(), poisons().then_some(FailSignal::Sigbus));
            let _ = built.set(h.clone());
            let _ = std::io::Read::read(&mut &stream, &mut [0u8; 1]);
            h
        });
        let run = {
            let handler_gone = gone(|| h.is_finished());
            let blocked = blocked_since(|| {
                built
                    .get()
                    .is_some_and(|h: &std::sync::Arc<UffdHandler>| h.failure().is_some())
            });
            child::run_until(
                name,
                LIMIT,
                &[
                    (SOCKET, socket.to_str().unwrap()),
                    ("MMBATCH_VMM_READ", read),
                ],
                || handler_gone() || blocked(),
            )
        };
        (run, h.join().unwrap())
    });
    let (run, h) = handler;
    assert_eq!(
        h.fail_signal(),
        poisons().then_some(FailSignal::Sigbus),
        "the handler says how a failed page's readers are stopped"
    );
    (run, h.failure().map(|e| e.to_string()))
}

/// Whether the kernel has `UFFDIO_POISON` (Linux 6.6).
fn poisons() -> bool {
    mmbatch_testkit::kernel_at_least(6, 6)
}

/// The reader got SIGBUS where pages can be poisoned, else stayed blocked
/// until killed.
fn assert_reader_stopped(run: &child::Run) {
    if poisons() {
        assert_eq!(run.signal(), Some(libc::SIGBUS), "{}", run.output);
    } else {
        assert!(
            run.status.is_none(),
            "the reader was not left blocked: {run:?}"
        );
        eprintln!("no UFFDIO_POISON before Linux 6.6: the reader stayed blocked, as documented");
    }
}

/// A page the source fails is poisoned in the VMM: its reader gets
/// SIGBUS, and the handler's failure names the page and the cause.
#[test]
fn a_page_the_source_fails_kills_the_vmms_reader_with_sigbus() {
    if child::is_child() {
        return vmm_reading_one();
    }
    let (run, failure) = failing(
        "a_page_the_source_fails_kills_the_vmms_reader_with_sigbus",
        "9",
    );
    assert_reader_stopped(&run);
    let failure = failure.expect("the failure");
    assert!(
        failure.contains("page 9") && failure.contains("lost it"),
        "{failure}"
    );
}

/// A fault in memory the VMM registered but did not describe is not left
/// waiting: its reader gets SIGBUS and the failure names the address.
#[test]
fn a_fault_outside_the_described_ranges_is_failed_not_left_waiting() {
    if child::is_child() {
        return vmm_reading_one();
    }
    let (run, failure) = failing(
        "a_fault_outside_the_described_ranges_is_failed_not_left_waiting",
        "stray",
    );
    assert_reader_stopped(&run);
    let failure = failure.expect("the failure");
    assert!(failure.contains("outside every range"), "{failure}");
}

/// A source that has nothing ready until `open` is set: the VMM's faults
/// stay pending meanwhile.
struct Gated(File, std::sync::Arc<AtomicBool>);

impl PageSource for Gated {
    fn len(&self) -> u64 {
        PageSource::len(&self.0)
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if !self.1.load(Ordering::Acquire) {
            return PageRead::NotReady;
        }
        self.0.read_page(index, buf)
    }
}

/// The VMM for the teardown test: three threads read a page of region B
/// each (blocking: the handler's source is not ready), then every page of
/// B is checked against the image — after the handler's `shutdown` the
/// memory is the VMM's alone, so a page left missing would read as zeros.
fn vmm_pending() {
    let socket = std::env::var(SOCKET).unwrap();
    let b = map(B_PAGES);
    let uffd = userfaultfd(&[(b, B_PAGES)]);
    let mut stream = send(&socket, &[region(b, B_PAGES, 0)], &uffd);
    let base = b as usize;
    std::thread::scope(|s| {
        let readers: Vec<_> = [2usize, 7, 11]
            .into_iter()
            .map(|p| {
                s.spawn(move || {
                    // SAFETY: a page of our mapping; the handler fills it.
                    let got = unsafe {
                        std::slice::from_raw_parts((base + p * page()) as *const u8, page())
                    };
                    assert!(got == image_page(p), "pending page {p} came back wrong");
                })
            })
            .collect();
        // Tell the handler the readers are (about to be) waiting.
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(b"go").unwrap();
        for r in readers {
            r.join().unwrap();
        }
    });
    for p in 0..B_PAGES {
        // SAFETY: a page of our mapping, filled (or a plain anonymous
        // page once unregistered).
        let got = unsafe { std::slice::from_raw_parts((base + p * page()) as *const u8, page()) };
        assert!(
            got == image_page(p),
            "page {p} is not the image's after shutdown"
        );
    }
    println!("vmm: 3 pending reads and all {B_PAGES} pages served by the handler's shutdown");
}

/// `shutdown` with the VMM's faults pending and the source not ready:
/// the handler threads stop, the fill waits for the source, installs
/// every page (waking the pending readers with their data) and only then
/// unregisters — teardown never hands the VMM a missing page, which would
/// read as zeros once unregistered.
#[test]
fn shutdown_with_the_vmms_faults_pending_gives_every_page_its_data() {
    if child::is_child() {
        return vmm_pending();
    }
    let name = "shutdown_with_the_vmms_faults_pending_gives_every_page_its_data";
    let dir = Dir::new("pending");
    let image = write_image(&dir);
    let socket = dir.0.join("uffd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (run, stats) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let (stream, _) = listener.accept().unwrap();
            let hs = protocol::receive(&stream).unwrap();
            let open = std::sync::Arc::new(AtomicBool::new(false));
            let h = UffdHandler::builder(hs.uffd, hs.ranges)
                .build(Gated(File::open(&image).unwrap(), open.clone()))
                .unwrap();
            let mut go = [0u8; 2];
            std::io::Read::read_exact(&mut &stream, &mut go).unwrap();
            assert_eq!(h.installed_pages(), 0, "served before the source was ready");
            // The source comes back while shutdown waits for it.
            let opener = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                open.store(true, Ordering::Release);
            });
            h.shutdown();
            opener.join().unwrap();
            let stats = h.stats();
            let _ = std::io::Read::read(&mut &stream, &mut [0u8; 1]);
            stats
        });
        let run = child::run_until(
            name,
            LIMIT,
            &[(SOCKET, socket.to_str().unwrap())],
            gone(|| h.is_finished()),
        );
        (run, h.join().unwrap())
    });
    println!("{}", run.output);
    run.expect_success();
    println!("handler: {stats:?}");
    assert_eq!(stats.pages_copied, B_PAGES as u64, "{stats:?}");
    assert_eq!(stats.pages_failed, 0, "{stats:?}");
}

/// Sends `body` in `parts` writes, `fds` with the first, over a fresh
/// connection to `socket`; the connection.
fn send_parts(socket: &std::path::Path, body: &[u8], parts: usize, fds: &[&OwnedFd]) -> UnixStream {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let stream = UnixStream::connect(socket).unwrap();
    let borrowed: Vec<_> = fds.iter().map(|f| std::os::fd::AsFd::as_fd(*f)).collect();
    let chunk = body.len().div_ceil(parts.max(1)).max(1);
    for (i, part) in body.chunks(chunk).enumerate() {
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if i == 0 && !borrowed.is_empty() {
            assert!(control.push(SendAncillaryMessage::ScmRights(&borrowed)));
        }
        rustix::net::sendmsg(
            &stream,
            &[std::io::IoSlice::new(part)],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        // Apart, so that the handler reads them apart.
        std::thread::sleep(Duration::from_millis(20));
    }
    stream
}

/// The handshake as Firecracker's versions send it, and as they do not:
/// a region list longer than one read is read whole; several descriptors
/// (the guest_memfd "secret hiding" handshake, which expects replies) are
/// refused naming it; a VMM that sends nothing, or closes first, is an
/// error within the handshake's time, never a hang.
#[test]
fn the_handshake_takes_a_long_message_and_names_what_it_refuses() {
    let _hang =
        mmbatch_testkit::hang_guard("the_handshake_takes_a_long_message_and_names_what_it_refuses");
    let dir = Dir::new("handshake");
    let socket = dir.0.join("uffd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // No memory is registered (nor mapped): the handshake reads only the
    // list and the descriptor, and this test must not register memory
    // beside the others' in this process.
    let uffd = vmm::userfaultfd(&[], 0);
    let regions = [region(
        std::ptr::null_mut::<u8>().wrapping_add(1 << 30),
        4,
        0,
    )];
    let body = serde_json::to_vec(&regions).unwrap();
    let short = Duration::from_millis(300);
    let accept = || listener.accept().unwrap().0;
    // In three writes: read whole.
    let vmm = send_parts(&socket, &body, 3, &[&uffd]);
    let hs = protocol::receive_within(&accept(), short).unwrap();
    assert_eq!(hs.ranges.len(), 1);
    assert_eq!(hs.page_size, page());
    drop(vmm);
    // Two descriptors: named, not taken.
    let extra = vmm::userfaultfd(&[], 0);
    let vmm = send_parts(&socket, &body, 1, &[&uffd, &extra]);
    let e = protocol::receive_within(&accept(), short)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("2 descriptors") && e.contains("secret hiding"),
        "{e}"
    );
    drop(vmm);
    // Connected, and nothing sent: an error at the timeout.
    let vmm = UnixStream::connect(&socket).unwrap();
    let at = Instant::now();
    let e = protocol::receive_within(&accept(), short)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no complete region list within"), "{e}");
    assert!(at.elapsed() < 10 * short, "{:?}", at.elapsed());
    drop(vmm);
    // Closed before sending.
    drop(UnixStream::connect(&socket).unwrap());
    let e = protocol::receive_within(&accept(), short)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("closed the socket without sending"), "{e}");
}

/// A source that never has a page ready.
struct NeverReady(u64);

impl PageSource for NeverReady {
    fn len(&self) -> u64 {
        self.0
    }

    fn read_page(&self, _: u64, _: &mut [u8]) -> PageRead {
        PageRead::NotReady
    }
}

/// A handler dropped while a guest thread waits on a fault it has read
/// (its source holding the page back) wakes that thread: it faults again,
/// and a handler built on a duplicate of the descriptor serves it, as the
/// builder's docs offer for a retry. The kernel queues a fault once: the
/// old drop left the thread waiting for good ("the reader was not served
/// by the second handler").
#[test]
fn a_dropped_handler_leaves_its_waiting_faults_to_the_next() {
    let name = "a_dropped_handler_leaves_its_waiting_faults_to_the_next";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let mem = map(4);
    let uffd = userfaultfd(&[(mem, 4)]);
    let spare = uffd.try_clone().unwrap();
    let first = UffdHandler::builder(uffd, [one_range(mem, 4)])
        .source_timeout(Duration::from_secs(600))
        .build(NeverReady(4 * page() as u64))
        .unwrap();
    let addr = mem as usize + 2 * page() + 5;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: a byte of the guest memory mapped above, never unmapped
        // (this is a test's child).
        let _ = tx.send(unsafe { std::ptr::read_volatile(addr as *const u8) });
    });
    mmbatch_testkit::wait_until("the first handler read the fault", LIMIT, || {
        first.stats().faults >= 1
    });
    drop(first);
    let image: Vec<u8> = (0..4).flat_map(image_page).collect();
    let _second = UffdHandler::builder(spare, [one_range(mem, 4)])
        .build(mmbatch_faultaround::InMemory(image))
        .unwrap();
    let got = rx.recv_timeout(Duration::from_secs(5));
    assert_eq!(
        got,
        Ok(image_page(2)[5]),
        "the reader was not served by the second handler"
    );
}

/// A window half of whose pages are present (written before the range
/// was registered) is copied around them: each copy the kernel stops at a
/// present page goes on past it. Every missing page gets its data and no
/// present page is overwritten. (The old code also read the events and
/// counted a retry towards its naps at each stop: 75 ms a fault of an
/// order-9 window with every other page present, against 2 ms now, in
/// the throwaway probe `zz_present`.)
#[test]
fn a_window_is_copied_around_its_present_pages() {
    let name = "a_window_is_copied_around_its_present_pages";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let mem = map(16);
    for p in (1..16).step_by(2) {
        // SAFETY: a page of the mapping above, not yet registered.
        unsafe { mem.wrapping_add(p * page()).write_volatile(0xEE) };
    }
    let uffd = userfaultfd(&[(mem, 16)]);
    let image: Vec<u8> = (0..16).flat_map(image_page).collect();
    let h = UffdHandler::builder(uffd, [one_range(mem, 16)])
        .order(4)
        .build(mmbatch_faultaround::InMemory(image))
        .unwrap();
    // SAFETY: the 16 pages mapped above, never unmapped (a test's child).
    let memory = unsafe { std::slice::from_raw_parts(mem, 16 * page()) };
    assert_eq!(memory[3], image_page(0)[3]);
    for p in 0..16 {
        let got = &memory[p * page()..][..page()];
        if p % 2 == 1 {
            assert!(
                got[0] == 0xEE && got[1..].iter().all(|&b| b == 0),
                "page {p} overwritten"
            );
        } else {
            assert!(got == image_page(p), "page {p} is not the image's");
        }
    }
    let st = h.stats();
    assert_eq!((st.faults, st.pages_copied), (1, 8), "{st:?}");
}
