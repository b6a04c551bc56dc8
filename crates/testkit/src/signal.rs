//! Reading memory that should kill the process, and seeing which signal
//! it got — in a child process made by [`child`](crate::child).

use std::{
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::{Duration, Instant},
};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_fault(sig: i32) {
    SIGNAL.store(sig, Ordering::SeqCst);
    loop {
        // SAFETY: pause is async-signal-safe; this thread stays here until
        // the process exits.
        unsafe { libc::pause() };
    }
}

/// Catches SIGBUS and SIGSEGV from now on: the faulting thread records the
/// signal and parks for good. For child processes only.
pub fn catch_fault_signals() {
    for sig in [libc::SIGBUS, libc::SIGSEGV] {
        // SAFETY: an all-zero sigaction is a valid empty value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_fault as *const () as usize;
        // SAFETY: installs a plain handler for a fault signal.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}

/// Reads the byte at `addr` from another thread and returns the signal
/// the read got (SIGBUS or SIGSEGV), or 0 if it returned; panics if it
/// did neither within `limit` (a hang). The reading thread never returns
/// from the signal: call this in a child process, which then exits.
/// Calls may follow one another, one at a time; a signal that another
/// reader (one of [`read_in_background`]'s) gets during a call is taken
/// for this read's.
///
/// # Safety
/// `addr` must stay mapped (or fault cleanly) until the process exits.
pub unsafe fn touch(addr: usize, limit: Duration) -> i32 {
    catch_fault_signals();
    // Each call's own: an earlier call's reader that took a signal is
    // parked in the handler for good, so a signal from now on is this
    // read's, unless a reader of `read_in_background` takes one meanwhile
    // (a static flag made every call after the first return the first
    // one's answer without waiting for its own read).
    SIGNAL.store(0, Ordering::SeqCst);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    std::thread::spawn(move || {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::read_volatile(addr as *const u8) };
        finished.store(true, Ordering::SeqCst);
    });
    let start = Instant::now();
    while start.elapsed() < limit {
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig != 0 {
            return sig;
        }
        if done.load(Ordering::SeqCst) {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("reading {addr:#x} neither returned nor signalled in {limit:?} (hang)");
}

/// Reads the byte at `addr` on a thread of its own, catching fault signals
/// from now on ([`catch_fault_signals`]): a read that gets one parks that
/// thread for good. For child processes.
///
/// # Safety
/// `addr` must stay mapped (or fault cleanly) until the process exits.
pub unsafe fn read_in_background(addr: usize) {
    catch_fault_signals();
    std::thread::spawn(move || {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::read_volatile(addr as *const u8) };
    });
}
