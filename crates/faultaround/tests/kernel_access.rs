//! The kernel reading a region on the process's behalf: `write(2)`,
//! `send(2)`, O_DIRECT and another region's `UFFDIO_COPY` fault on pages
//! not yet present in kernel mode, and must be served as the process's
//! own reads are.

use std::{
    io::{Read, Write},
    os::unix::fs::OpenOptionsExt,
    sync::Arc,
    time::Duration,
};

use mmbatch_faultaround::{PageRead, PageSource, UffdMode, UffdRegion};
use mmbatch_testkit::{child, signal};

const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(30);

/// Page i holds bytes derived from i, so misplaced pages show.
fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251) as u8)
        .collect()
}

/// A file of this test's own in the temporary directory, removed on drop.
struct TempPath(std::path::PathBuf);

impl TempPath {
    fn new(what: &str) -> Self {
        Self(std::env::temp_dir().join(format!(
            "mmbatch-kernel-access-{what}-{}",
            std::process::id()
        )))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether this process may have a region that serves kernel faults
/// (root always may: it opens `/dev/userfaultfd`); prints why a test is
/// skipped where it may not.
fn all_faults(r: &UffdRegion, test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(r.mode(), UffdMode::AllFaults, "root gets the full mode");
    }
    if r.mode() == UffdMode::UserModeOnly {
        println!(
            "skipped {test}: this process may have only a user-mode-only userfaultfd (not root, \
             no CAP_SYS_PTRACE, no access to /dev/userfaultfd, vm.unprivileged_userfaultfd=0)"
        );
        return false;
    }
    true
}

/// `write(2)` of a whole region none of whose pages is present: every
/// page faults in kernel mode (`copy_from_user`) and is served. The old
/// code always asked for `UFFD_USER_MODE_ONLY`: "Bad address (os error
/// 14)".
#[test]
fn write_2_reads_pages_not_yet_faulted_in() {
    let _hang = mmbatch_testkit::hang_guard("write_2_reads_pages_not_yet_faulted_in");
    let src = image(64);
    let r = UffdRegion::new(64 * PAGE, 2, src.clone(), 1).unwrap();
    if !all_faults(&r, "write_2_reads_pages_not_yet_faulted_in") {
        return;
    }
    assert!(format!("{r:?}").contains("mode: AllFaults"), "{r:?}");
    assert_eq!(r.resident_pages(), 0);
    let tmp = TempPath::new("write");
    std::fs::write(&tmp.0, r.as_slice()).unwrap();
    assert_eq!(std::fs::read(&tmp.0).unwrap(), src);
    assert_eq!(r.resident_pages(), 64);
    assert_eq!(r.stats().faults, 64 / 4, "{:?}", r.stats());
}

/// `send(2)` on a socket, read on another thread, from missing pages.
#[test]
fn send_reads_pages_not_yet_faulted_in() {
    let _hang = mmbatch_testkit::hang_guard("send_reads_pages_not_yet_faulted_in");
    let src = image(32);
    let r = UffdRegion::new(32 * PAGE, 0, src.clone(), 1).unwrap();
    if !all_faults(&r, "send_reads_pages_not_yet_faulted_in") {
        return;
    }
    let (mut tx, mut rx) = std::os::unix::net::UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).map(|_| got)
    });
    let sent = tx.write_all(r.as_slice());
    drop(tx);
    sent.unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), src);
}

/// An O_DIRECT write pins the region's pages (`pin_user_pages`), which
/// faults them in kernel mode too; skipped where the file system refuses
/// O_DIRECT.
#[test]
fn o_direct_write_reads_pages_not_yet_faulted_in() {
    let _hang = mmbatch_testkit::hang_guard("o_direct_write_reads_pages_not_yet_faulted_in");
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 0, src.clone(), 1).unwrap();
    if !all_faults(&r, "o_direct_write_reads_pages_not_yet_faulted_in") {
        return;
    }
    let tmp = TempPath::new("odirect");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&tmp.0);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            println!("skipped: {} refuses O_DIRECT ({e})", tmp.0.display());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    f.write_all(r.as_slice()).unwrap();
    drop(f);
    assert_eq!(std::fs::read(&tmp.0).unwrap(), src);
}

/// A source whose pages are another region's memory, as a clone of a
/// lazily restored image is.
struct OtherRegion(Arc<UffdRegion>);

impl PageSource for OtherRegion {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        let at = index as usize * buf.len();
        buf.copy_from_slice(&self.0.as_slice()[at..at + buf.len()]);
        PageRead::Ready
    }

    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        let at = usize::try_from(index).ok()? * page_size;
        self.0.as_slice().get(at..at + count * page_size)
    }
}

/// Region B's `pages()` points into region A, none of whose pages is
/// present: B's `UFFDIO_COPY` reads A's missing page in kernel mode, and
/// A's handler must serve it (B's reader must not get a signal). In a
/// child: the old code failed B's page, whose reader got SIGBUS.
#[test]
fn a_source_in_another_regions_missing_pages_is_served() {
    let name = "a_source_in_another_regions_missing_pages_is_served";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let src = image(32);
    let a = Arc::new(UffdRegion::new(32 * PAGE, 0, src.clone(), 1).unwrap());
    if !all_faults(&a, name) {
        std::process::exit(0);
    }
    let b = UffdRegion::new(32 * PAGE, 2, OtherRegion(a.clone()), 1).unwrap();
    assert_eq!(a.resident_pages(), 0);
    // SAFETY: B's memory, kept until this child exits.
    let sig = unsafe { signal::touch(b.as_ptr() as usize + 9 * PAGE + 3, LIMIT) };
    println!("B's reader got signal {sig}; B: {:?}; A: {:?}", b, a);
    if let Some(e) = b.failure() {
        println!("B's failure: {e}");
    }
    assert_eq!(sig, 0, "B's reader was signalled");
    assert!(b.failure().is_none());
    assert_eq!(
        &b.as_slice()[8 * PAGE..12 * PAGE],
        &src[8 * PAGE..12 * PAGE]
    );
    // A's handler served the copies' faults: pages 8..12 are now in A.
    assert!(a.stats().faults >= 1, "{:?}", a.stats());
    assert_eq!(b.as_slice(), &src[..]);
    std::process::exit(0);
}

/// `write(2)` of one page of `r` into a pipe: the bytes written, or the
/// errno.
fn write_page_to_pipe(r: &UffdRegion, page: usize) -> Result<Vec<u8>, i32> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let bytes = &r.as_slice()[page * PAGE..(page + 1) * PAGE];
    // SAFETY: `bytes` is `PAGE` bytes of the region (faulted in by the
    // kernel, or refused with EFAULT); the pipe holds 16 pages.
    let n = unsafe { libc::write(fds[1], bytes.as_ptr().cast(), PAGE) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut got = vec![0u8; PAGE];
    let out = if n == PAGE as isize {
        // SAFETY: reads at most `PAGE` bytes into `got`.
        let m = unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), PAGE) };
        assert_eq!(m, PAGE as isize);
        Ok(got)
    } else {
        assert_eq!(n, -1, "a partial write of a page");
        Err(errno)
    };
    for fd in fds {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
    }
    out
}

/// Drops root for `nobody` (uid and gid 65534, no supplementary groups):
/// no capability is left, and `/dev/userfaultfd` (root's, mode 0600 by
/// default) cannot be opened. In a child process only: the whole process
/// changes.
fn become_nobody() {
    // SAFETY: plain system calls on this process's credentials (glibc
    // applies them to every thread); none touches memory but `setgroups`,
    // which reads no entry of an empty list.
    assert_eq!(unsafe { libc::setgroups(0, std::ptr::null()) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setgid(65534) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setuid(65534) }, 0);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 65534);
}

/// Where this process may have only a user-mode-only userfaultfd (as
/// `nobody`, with `vm.unprivileged_userfaultfd=0`: `/dev/userfaultfd` is
/// EACCES, the system call without `UFFD_USER_MODE_ONLY` EPERM), a region
/// is still built, says so, and serves the process's own reads; a system
/// call reading a page not yet present gets EFAULT (the documented limit),
/// and the same call succeeds once the process has read the page.
#[test]
fn without_privilege_a_region_is_user_mode_only() {
    let name = "without_privilege_a_region_is_user_mode_only";
    if !child::is_child() {
        let knob = "/proc/sys/vm/unprivileged_userfaultfd";
        match std::fs::read_to_string(knob) {
            Ok(v) if v.trim() == "1" => {
                println!("skipped {name}: {knob} is 1, so nobody may have the full mode");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                println!("skipped {name}: {knob}: {e}");
                return;
            }
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped {name}: dropping to nobody needs root");
            return;
        }
    }
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    become_nobody();
    if let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
    {
        drop(f);
        println!("skipped {name}: nobody may open /dev/userfaultfd on this host");
        std::process::exit(0);
    }
    let src = image(16);
    let r = UffdRegion::new(16 * PAGE, 0, src.clone(), 1).unwrap();
    println!("as nobody: {r:?}");
    assert_eq!(r.mode(), UffdMode::UserModeOnly);
    assert!(format!("{r:?}").contains("mode: UserModeOnly"), "{r:?}");
    // The process's own reads are served.
    assert_eq!(r.as_slice()[PAGE + 1], src[PAGE + 1]);
    // A page already present is memory like any other to the kernel.
    assert_eq!(write_page_to_pipe(&r, 1).unwrap(), &src[PAGE..2 * PAGE]);
    // A page not yet present: EFAULT, and the region is not hurt by it.
    assert_eq!(write_page_to_pipe(&r, 5), Err(libc::EFAULT));
    assert!(r.failure().is_none());
    assert_eq!(r.as_slice()[5 * PAGE + 7], src[5 * PAGE + 7]);
    assert_eq!(write_page_to_pipe(&r, 5).unwrap(), &src[5 * PAGE..6 * PAGE]);
    std::process::exit(0);
}

/// A source that holds every page back (`NotReady`) until released: with
/// a long source timeout, its region's pages are slow to come, as a
/// snapshot file's on a network filesystem that stalls.
struct HeldBack {
    image: Vec<u8>,
    released: Arc<std::sync::atomic::AtomicBool>,
}

impl PageSource for HeldBack {
    fn len(&self) -> u64 {
        self.image.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if !self.released.load(std::sync::atomic::Ordering::Acquire) {
            return PageRead::NotReady;
        }
        let at = index as usize * buf.len();
        buf.copy_from_slice(&self.image[at..at + buf.len()]);
        PageRead::Ready
    }
}

/// Region B's `pages()` points into region A, whose source stalls (a
/// mapped snapshot file whose storage hangs): B's watchdog times the wait
/// for A's pages as it times any call into the source, so B's reader gets
/// its signal at B's source timeout, and B's drop returns, while A still
/// holds the page back. The old code copied from A's pages with
/// `UFFDIO_COPY` under B's events lock, outside the watchdog's view: the
/// reader, and B's drop, waited for A.
#[test]
fn a_source_mapping_slow_to_fault_is_timed_by_the_watchdog() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let name = "a_source_mapping_slow_to_fault_is_timed_by_the_watchdog";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let released = Arc::new(AtomicBool::new(false));
    let held = HeldBack {
        image: image(8),
        released: released.clone(),
    };
    let a = UffdRegion::builder(8 * PAGE)
        .source_timeout(Duration::from_secs(600))
        .build(held)
        .unwrap();
    let a = Arc::new(a);
    if !all_faults(&a, name) {
        std::process::exit(0);
    }
    let b = UffdRegion::builder(8 * PAGE)
        .source_timeout(Duration::from_millis(300))
        .build(OtherRegion(a.clone()))
        .unwrap();
    // SAFETY: B's memory, kept (or leaked) until this child exits.
    let sig = unsafe { signal::touch(b.as_ptr() as usize + 3 * PAGE, Duration::from_secs(10)) };
    println!(
        "B's reader got signal {sig}; B's failure: {:?}",
        b.failure()
    );
    assert_ne!(sig, 0, "B's reader was served, from a page A holds back");
    assert!(b.failure().is_some());
    // B's drop, with A's page still held back, in at most 10 s.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(b);
        let _ = tx.send(());
    });
    let dropped = rx.recv_timeout(Duration::from_secs(10));
    released.store(true, Ordering::Release);
    assert!(dropped.is_ok(), "B's drop waited for A's page");
    std::process::exit(0);
}

/// A mapping as a page source's bytes (`InMemory(Mapped(..))`).
struct Mapped(mmbatch_mmap::Mapping);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice().expect("mapped readable")
    }
}

/// A file of `pages` of [`image`], unlinked, and a shared read-only
/// mapping of it, for tests that cut it short under the mapping (its
/// users read the mapping only through calls that fail instead of
/// faulting: `UFFDIO_COPY`, `MADV_POPULATE_READ`, `write(2)`).
fn mapped_image(name: &str, pages: usize) -> (std::fs::File, Vec<u8>, mmbatch_mmap::Mapping) {
    use std::os::fd::AsFd;
    let tmp = TempPath::new(name);
    let data = image(pages);
    std::fs::write(&tmp.0, &data).unwrap();
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&tmp.0)
        .unwrap();
    // Unlinked now: the tests' children exit without running drops.
    drop(tmp);
    // SAFETY: the caller's own file, truncated only as the doc says.
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
    (file, data, mapping)
}

/// A snapshot file mapped as the source (`InMemory` over a shared mapping
/// of it, the VMMs' way), cut short while the region is served: a page
/// past the new end fails (its reader gets the region's signal, from
/// the copy's EFAULT), and the process lives on to serve the pages before
/// the end; shutdown's fill fails the rest the same way. Read from a
/// handler (to fault it in) or by the fill, the gone page killed the
/// process with SIGBUS. Any mode: the reads are the process's own.
#[test]
fn a_source_mapping_cut_short_fails_its_pages_not_the_process() {
    let name = "a_source_mapping_cut_short_fails_its_pages_not_the_process";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let (file, data, mapping) = mapped_image("cut-short", 16);
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let heard = failed.clone();
    let r = UffdRegion::builder(16 * PAGE)
        .source_timeout(Duration::from_secs(2))
        .on_failure(move |e| heard.lock().unwrap().push(e.to_string()))
        .build(mmbatch_faultaround::InMemory(Mapped(mapping)))
        .unwrap();
    assert_eq!(r.as_slice()[2 * PAGE + 1], data[2 * PAGE + 1]);
    file.set_len(8 * PAGE as u64).unwrap();
    // SAFETY: the region's memory, kept until this child exits.
    let sig = unsafe { signal::touch(r.as_ptr() as usize + 12 * PAGE, LIMIT) };
    println!("page 12's reader got signal {sig}; {:?}", r.failure());
    assert_ne!(sig, 0, "page 12, past the file's new end, was served");
    assert!(r.failure().is_some(), "the signal was not the region's");
    assert_eq!(r.as_slice()[5 * PAGE + 3], data[5 * PAGE + 3]);
    // Shutdown's fill copies the rest as the faults do: the pages past the
    // end fail by the copy's EFAULT, none by a call that did not return
    // (its thread taken by a SIGBUS of its own read).
    r.shutdown();
    let failed = failed.lock().unwrap().clone();
    println!("{failed:#?}");
    assert!(
        failed.len() >= 8 && failed.iter().all(|e| e.contains("EFAULT")),
        "{failed:#?}"
    );
    std::process::exit(0);
}

/// A page cache built from a mapped snapshot file cut short (under its
/// mapping, before the build) fails at the first page past the new end,
/// naming it, and the process lives on. Read with `read_page` (a memory
/// copy from the mapping), the gone page killed the process with SIGBUS.
#[test]
fn a_page_cache_from_a_source_mapping_cut_short_fails_its_page() {
    let name = "a_page_cache_from_a_source_mapping_cut_short_fails_its_page";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let (file, data, mapping) = mapped_image("cache-cut-short", 16);
    let source = mmbatch_faultaround::InMemory(Mapped(mapping));
    let whole = UffdRegion::page_cache_from(&source, 16 * PAGE).unwrap();
    let mut back = vec![0u8; 16 * PAGE];
    std::os::unix::fs::FileExt::read_exact_at(&whole, &mut back, 0).unwrap();
    assert!(back == data, "the page cache is not the image");
    file.set_len(8 * PAGE as u64 + 100).unwrap();
    let e = UffdRegion::page_cache_from(&source, 16 * PAGE).unwrap_err();
    println!("{e}");
    assert!(
        matches!(e, mmbatch_faultaround::Error::PageFailed { page: 9, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("EFAULT"), "{e}");
    std::process::exit(0);
}

/// A source that holds each read until `go` is set, saying when one is
/// waiting.
struct Held {
    data: Vec<u8>,
    waiting: Arc<std::sync::atomic::AtomicBool>,
    go: Arc<std::sync::atomic::AtomicBool>,
}

impl PageSource for Held {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        use std::sync::atomic::Ordering;
        self.waiting.store(true, Ordering::Release);
        while !self.go.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let at = index as usize * PAGE;
        buf.copy_from_slice(&self.data[at..at + PAGE]);
        PageRead::Ready
    }
}

/// A region dropped while the kernel still waits on one of its pages (a
/// VMM's vCPU under KVM reads guest memory through the region's address,
/// not a borrow, so nothing holds the drop back): the access fails with
/// EFAULT. The drop unregistered the range before unmapping it, which
/// woke the waiting access into the range's ordinary fault: `write(2)`
/// sent a page of zeros the guest never had. In a child: another test's
/// mapping made at the freed address would meet the woken access.
#[test]
fn a_kernel_access_waiting_across_the_drop_fails_rather_than_reads_zeros() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let name = "a_kernel_access_waiting_across_the_drop_fails_rather_than_reads_zeros";
    if let Some(run) = child::parent(name, LIMIT) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let src = image(16);
    for round in 0..4 {
        let (waiting, go) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let r = UffdRegion::builder(16 * PAGE)
            // Long enough that the watchdog does not fail the page (which
            // would give EFAULT on the old code too) before the drop.
            .source_timeout(Duration::from_secs(1))
            .build(Held {
                data: src.clone(),
                waiting: waiting.clone(),
                go: go.clone(),
            })
            .unwrap();
        if !all_faults(&r, name) {
            std::process::exit(0);
        }
        let at = r.as_ptr() as usize + 3 * PAGE;
        let (mut rd, wr) = pipe();
        let writer = std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            // SAFETY: a page of the region, which the drop may unmap
            // while the call waits on it: the kernel then fails the copy
            // (EFAULT), which is what is tested.
            let n = unsafe { libc::write(wr.as_raw_fd(), at as *const libc::c_void, PAGE) };
            (n, std::io::Error::last_os_error().raw_os_error())
        });
        mmbatch_testkit::wait_until(
            "the handler's read of page 3",
            Duration::from_secs(10),
            || waiting.load(Ordering::Acquire),
        );
        drop(r);
        go.store(true, Ordering::Release);
        let (n, errno) = writer.join().unwrap();
        if n > 0 {
            let mut sent = vec![0u8; n as usize];
            rd.read_exact(&mut sent).unwrap();
            let what = if sent.iter().all(|&b| b == 0) {
                "zeros"
            } else {
                "bytes"
            };
            panic!("round {round}: write(2) of a page waiting across the drop sent {n} {what}");
        }
        assert_eq!((n, errno), (-1, Some(libc::EFAULT)), "round {round}");
    }
    std::process::exit(0);
}

/// A pipe, as its read and write ends (a page fits in its buffer).
fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: a fresh descriptor of ours, owned once.
    let rd = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    // SAFETY: as above.
    let wr = unsafe { std::fs::File::from_raw_fd(fds[1]) };
    (rd, wr)
}
