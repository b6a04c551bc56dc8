//! A region and `fork(2)`: a child inherits a userfaultfd range
//! unregistered, and read every page the parent had not yet copied in as
//! zeros, through a safe `as_slice`. A region being served is not
//! inherited: the child finds an inaccessible reservation there, which
//! faults and which nothing it maps can take. After `shutdown`, with every
//! page in, the region is ordinary memory and is inherited. A child that
//! drops its copy leaves the parent's region alone.

use std::{io, time::Duration};

use mmbatch_faultaround::{FailSignal, PageRead, PageSource, UffdRegion};
use mmbatch_testkit::child::scaled;

const PAGE: usize = 4096;

/// Page `i` holds byte `0x10 + i` everywhere; page [`FAILED`] fails.
struct Image(usize);

const FAILED: u64 = 7;

impl PageSource for Image {
    fn len(&self) -> u64 {
        (self.0 * PAGE) as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        if index == FAILED {
            return PageRead::Failed(io::Error::other("page 7 is gone"));
        }
        buf.fill(0x10 + index as u8);
        PageRead::Ready
    }
}

/// How a forked child ended.
#[derive(Debug, PartialEq)]
enum Child {
    /// It exited with this status.
    Exited(u8),
    /// It died of this signal.
    Signal(i32),
}

/// Forks a child that runs `body` (which must call only async-signal-safe
/// functions) and exits with its status; waits for it a bounded time
/// (then kills it, and panics naming `what`).
fn in_child(what: &str, body: impl FnOnce() -> u8) -> Child {
    // SAFETY: the child runs `body`, async-signal-safe by the caller's
    // word, then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: prctl is async-signal-safe: the child dies with the test
        // binary, and one killed by a fault leaves no core file.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
        let code = body();
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(i32::from(code)) };
    }
    wait_for(pid, what)
}

/// Waits for child `pid` a bounded time (then kills it, and panics naming
/// `what`).
fn wait_for(pid: libc::pid_t, what: &str) -> Child {
    let mut status = 0;
    let deadline = std::time::Instant::now() + scaled(Duration::from_secs(10));
    while std::time::Instant::now() < deadline {
        // SAFETY: waits for our own child, into a local.
        let r = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", io::Error::last_os_error());
        if r == pid {
            return if libc::WIFEXITED(status) {
                Child::Exited(libc::WEXITSTATUS(status) as u8)
            } else {
                Child::Signal(libc::WTERMSIG(status))
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // SAFETY: reaps our own child, into a local.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
    panic!("the child that {what} hung");
}

/// A child that reads the byte at `addr` and exits with it.
fn child_reads(addr: *const u8) -> Child {
    in_child(&format!("reads {addr:?}"), || {
        // SAFETY: `addr` is in a region's range; a read that faults ends
        // the child by signal, which is what the caller looks for.
        unsafe { std::ptr::read_volatile(addr) }
    })
}

/// A child of a process whose region is being served: no zeros where the
/// parent had not yet faulted (on the old code page 10 read 0x00, and
/// the failed page too), but a fault; after `shutdown`, the parent's bytes
/// (and the failed page still failed).
#[test]
fn a_forked_child_never_reads_zeros_for_pages_not_yet_in() {
    let r = UffdRegion::builder(16 * PAGE).build(Image(16)).unwrap();
    let base = r.as_slice().as_ptr();
    assert_eq!(r.as_slice()[PAGE], 0x11, "page 1, in before the fork");
    for page in [10, FAILED as usize, 1] {
        // SAFETY: inside the region (the child reads it).
        let got = child_reads(unsafe { base.add(page * PAGE) });
        assert!(
            matches!(got, Child::Signal(libc::SIGSEGV)),
            "page {page} in a child of a region being served: {got:?}"
        );
    }
    // The child's range is taken (a reservation), so nothing it maps
    // lands where the region's `as_slice` would read it: mapping there
    // without replacing is refused (EEXIST).
    let len = 16 * PAGE;
    let got = in_child("maps over the range", || {
        // SAFETY: a new mapping, refused where anything is mapped.
        let m = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            // SAFETY: the pointer to this thread's errno.
            let errno = unsafe { libc::__errno_location() };
            // SAFETY: valid for this thread's life; read at once.
            unsafe { *errno as u8 }
        } else {
            0
        }
    });
    assert_eq!(
        got,
        Child::Exited(libc::EEXIST as u8),
        "mapping over the range in the child: 0 if it could, else errno"
    );
    r.shutdown();
    // Poisoned (6.6+) or made inaccessible (older kernels), as in the
    // parent.
    let failed = match r.fail_signal() {
        FailSignal::Sigbus => libc::SIGBUS,
        _ => libc::SIGSEGV,
    };
    for (page, want) in [
        (1, Child::Exited(0x11)),
        (10, Child::Exited(0x1a)),
        (FAILED as usize, Child::Signal(failed)),
    ] {
        // SAFETY: inside the region.
        let got = child_reads(unsafe { base.add(page * PAGE) });
        assert_eq!(got, want, "page {page} in a child after shutdown");
    }
    assert!(
        r.failure().is_some(),
        "page 7 failed in the shutdown's fill"
    );
}

/// The same with 2 MiB hugetlb pages: a child of a region being served
/// faults on every page of it, whether the parent had it in or not (never
/// zeros), and after `shutdown` reads the parent's bytes, the huge pages'
/// private copies shared with it.
#[test]
fn a_forked_child_of_a_huge_page_region_never_reads_zeros() {
    use mmbatch_testkit::huge::{FREE, HUGE, Pool, read};
    let Some(_pool) = Pool::grow(4) else { return };
    let free_before = read(FREE);
    let image: Vec<u8> = (0..4 * HUGE)
        .map(|b| ((b / HUGE) * 31 + b % 4093) as u8)
        .collect();
    {
        let r = UffdRegion::builder(4 * HUGE)
            .huge_pages(mmbatch_faultaround::HugePageSize::Size2M)
            .build(image.clone())
            .unwrap();
        let base = r.as_slice().as_ptr();
        let at = |page: usize| page * HUGE + 4097;
        assert_eq!(
            r.as_slice()[at(1)],
            image[at(1)],
            "huge page 1, in before the fork"
        );
        for page in [2, 1, 0, 3] {
            // SAFETY: inside the region (the child reads it).
            let got = child_reads(unsafe { base.add(at(page)) });
            assert!(
                matches!(got, Child::Signal(libc::SIGSEGV)),
                "huge page {page} in a child of a region being served: {got:?}"
            );
        }
        r.shutdown();
        assert!(
            r.as_slice() == image.as_slice(),
            "the parent's region after shutdown"
        );
        for page in [0, 1, 2, 3] {
            // SAFETY: inside the region.
            let got = child_reads(unsafe { base.add(at(page)) });
            assert_eq!(
                got,
                Child::Exited(image[at(page)]),
                "huge page {page} in a child after shutdown"
            );
        }
        assert!(r.failure().is_none());
    }
    // Every huge page is back in the pool, the children's too.
    assert_eq!(read(FREE), free_before);
}

/// A child that shuts down and drops its copy of a region being served (a
/// fork server's worker returning from main) leaves the parent's region
/// alone: on the old code its drop joined the parent's handler threads,
/// which do not exist in the child, and hung; its unregister would have
/// left the parent's pages not yet in reading zeros.
#[test]
fn a_child_dropping_its_copy_leaves_the_parent_served() {
    let r = UffdRegion::builder(16 * PAGE).build(Image(16)).unwrap();
    assert_eq!(r.as_slice()[PAGE], 0x11);
    // SAFETY: the child shuts down and drops its copy (getpid and atomics
    // in the region's `shutdown` and drop, nothing that allocates or
    // locks) and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: prctl is async-signal-safe.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        r.shutdown();
        drop(r);
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) };
    }
    let got = wait_for(pid, "drops its copy of the region");
    assert_eq!(got, Child::Exited(0), "the child's drop");
    // Still served here: a page not yet in reads the source's bytes.
    assert_eq!(r.as_slice()[12 * PAGE], 0x1c, "page 12 in the parent");
    assert_eq!(r.stats().faults, 2);
}

/// A child whose pid is its maker's (pid 1 of a new PID namespace, made
/// by pid 1 of another, as a fork server that is a container's init
/// does) still leaves the parent's region alone: the fork count the fork
/// handlers keep tells them apart where the pid does not. Runs as pid 1 of
/// a namespace of its own (`unshare -p -f`, as root); skipped where that
/// is refused.
#[test]
fn a_child_with_its_makers_pid_leaves_the_region_alone() {
    const INSIDE: &str = "MMBATCH_FORK_TEST_PID1";
    let name = "a_child_with_its_makers_pid_leaves_the_region_alone";
    if std::env::var_os(INSIDE).is_none() {
        let exe = std::env::current_exe().unwrap();
        // `-p -f`: what util-linux's and BusyBox's unshare both take.
        let out = std::process::Command::new("unshare")
            .args(["-p", "-f"])
            .arg(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(INSIDE, "1")
            .output();
        let Ok(out) = out else {
            return eprintln!("skipped: no unshare(1)");
        };
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        if text.contains("unshare failed") || text.contains("Operation not permitted") {
            return eprintln!("skipped: a PID namespace is refused here: {text}");
        }
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    assert_eq!(std::process::id(), 1, "pid 1 of a namespace of its own");
    let r = UffdRegion::builder(16 * PAGE).build(Image(16)).unwrap();
    assert_eq!(r.as_slice()[PAGE], 0x11);
    // SAFETY: a system call with no memory; the next child is pid 1 of a
    // namespace of its own.
    let e = unsafe { libc::unshare(libc::CLONE_NEWPID) };
    assert_eq!(e, 0, "unshare: {}", io::Error::last_os_error());
    // SAFETY: the child checks its pid, shuts down and drops its copy
    // (getpid and atomics, nothing that allocates or locks), and calls
    // _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: getpid is async-signal-safe.
        if unsafe { libc::getpid() } != 1 {
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(2) };
        }
        r.shutdown();
        drop(r);
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) };
    }
    let got = wait_for(pid, "has its maker's pid and drops its copy");
    assert_eq!(
        got,
        Child::Exited(0),
        "the child's drop (2: its pid was not 1)"
    );
    assert_eq!(r.as_slice()[12 * PAGE], 0x1c, "page 12 in the parent");
}
