//! A region and `fork(2)`: a child inherits a userfaultfd range
//! unregistered, and read every page the parent had not yet copied in as
//! zeros, through a safe `as_slice`. A region being served is not
//! inherited (the child faults instead); after `shutdown`, with every page
//! in, it is ordinary memory and is.

use std::{io, time::Duration};

use mmbatch_faultaround::{FailSignal, PageRead, PageSource, UffdRegion};

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

/// How a forked child that read one byte ended.
#[derive(Debug, PartialEq)]
enum Child {
    /// It read this byte.
    Read(u8),
    /// It died of this signal.
    Signal(i32),
}

/// Forks a child that reads the byte at `addr` and exits with it as its
/// status; waits for it at most ten seconds (then kills it).
fn child_reads(addr: *const u8) -> Child {
    // SAFETY: the child calls only async-signal-safe functions (prctl,
    // a volatile read of memory, _exit) before it exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: prctl is async-signal-safe; the child dies with the
        // test binary.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        // SAFETY: `addr` is in the region's range; a read that faults
        // ends the child by signal, which is what the parent looks for.
        let b = unsafe { std::ptr::read_volatile(addr) };
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(i32::from(b)) };
    }
    let mut status = 0;
    for _ in 0..1000 {
        // SAFETY: waits for our own child, into a local.
        let r = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", io::Error::last_os_error());
        if r == pid {
            return if libc::WIFEXITED(status) {
                Child::Read(libc::WEXITSTATUS(status) as u8)
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
    panic!("the child reading {addr:?} hung");
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
    r.shutdown();
    // Poisoned (6.6+) or made inaccessible (older kernels), as in the
    // parent.
    let failed = match r.fail_signal() {
        FailSignal::Sigbus => libc::SIGBUS,
        _ => libc::SIGSEGV,
    };
    for (page, want) in [
        (1, Child::Read(0x11)),
        (10, Child::Read(0x1a)),
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
