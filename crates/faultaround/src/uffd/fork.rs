//! What a child of `fork(2)` finds where a region is being served. The
//! kernel hands a child a userfaultfd range unregistered, so every page not
//! yet copied in would read as zeros; an anonymous region is therefore
//! mapped `MADV_DONTFORK` (the child inherits no mapping there), and the
//! child's hole is filled at once with an inaccessible reservation, so
//! that nothing the child maps later without `MAP_FIXED` lands in it
//! (where the region's `as_slice` would read it): the `pthread_atfork`
//! child handler below, over every region [`serve`]d and not yet
//! [`release`]d.

use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering},
};

/// The ranges being served, behind a spin lock that the fork handlers
/// hold across the fork (a mutex held by another thread at the fork would
/// stay locked in the child; the prepare handler takes the lock, so no
/// thread holds it mid-change when the child is made). Nothing allocates
/// or blocks while it is held by a change ([`serve`] allocates outside),
/// so the prepare handler never waits on anything a fork holds.
struct Served {
    /// [`FREE`], [`CHANGING`] or [`FORKING`].
    lock: AtomicU8,
    ranges: UnsafeCell<Vec<(usize, usize)>>,
}

const FREE: u8 = 0;
/// Held by [`with`], for a push or a retain.
const CHANGING: u8 = 1;
/// Held from the prepare handler to the parent or child handler.
const FORKING: u8 = 2;

// SAFETY: `ranges` is only touched with the lock held (`with`, and the
// fork handlers between prepare and parent / child).
unsafe impl Sync for Served {}

static SERVED: Served = Served {
    lock: AtomicU8::new(FREE),
    ranges: UnsafeCell::new(Vec::new()),
};

/// Forks this process's line has been through (the child handler counts
/// its own): a region made before one is not the child's to stop
/// ([`generation`]).
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Takes the lock as `how` ([`CHANGING`] or [`FORKING`]). A change holds
/// it for a push or a retain, so with debug assertions one waited on for
/// ten seconds fails (a lock never released) rather than spin for ever; a
/// fork holds it as long as the fork takes, and is waited for.
fn lock(how: u8) {
    let mut since = None;
    loop {
        match SERVED
            .lock
            .compare_exchange_weak(FREE, how, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return,
            Err(CHANGING) if cfg!(debug_assertions) => {
                let since = since.get_or_insert_with(std::time::Instant::now);
                assert!(
                    since.elapsed() < std::time::Duration::from_secs(10),
                    "the registry of served regions was never unlocked"
                );
            }
            Err(_) => since = None,
        }
        std::thread::yield_now();
    }
}

fn unlock() {
    SERVED.lock.store(FREE, Ordering::Release);
}

/// Unlocks when dropped, so that a panic in `f` (`with`) unlocks too.
struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        unlock();
    }
}

/// Installs the fork handlers, once; a thread that finds them being
/// installed goes on without waiting (a wait on a `Once` that a fork
/// caught half-run would never end in the child).
fn install() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the three handlers are `extern "C"` functions that live for
    // the program and touch only `SERVED`, `FORKS` and mmap(2).
    let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    // ENOMEM only; without the handlers a child has a hole there instead
    // of a reservation, and `generation` tells it nothing.
    let _ = r;
}

/// Runs `f` on the ranges with the lock held; `f` must not allocate or
/// block.
fn with<T>(f: impl FnOnce(&mut Vec<(usize, usize)>) -> T) -> T {
    install();
    lock(CHANGING);
    let _held = Held;
    // SAFETY: the lock is held.
    f(unsafe { &mut *SERVED.ranges.get() })
}

/// The forks this process's line has been through, for a region or
/// handler to tell later whether it is in the process that made it:
/// installs the fork handlers that count them.
pub(super) fn generation() -> u64 {
    install();
    FORKS.load(Ordering::Acquire)
}

/// `len` bytes from `addr`, mapped `MADV_DONTFORK`, are served from now
/// on: a child gets an inaccessible reservation there. A longer list is
/// allocated outside the lock, and the old one freed outside it.
pub(super) fn serve(addr: usize, len: usize) {
    let mut spare = Vec::new();
    loop {
        let done = with(|r| {
            if r.len() < r.capacity() {
                r.push((addr, len));
                Ok(Vec::new())
            } else if spare.capacity() > r.len() {
                // Within its capacity: no allocation under the lock.
                spare.extend_from_slice(r);
                spare.push((addr, len));
                Ok(std::mem::replace(r, std::mem::take(&mut spare)))
            } else {
                Err(r.len())
            }
        });
        match done {
            Ok(old) => {
                drop(old);
                return;
            }
            Err(n) => spare = Vec::with_capacity(2 * n + 4),
        }
    }
}

/// The range from `addr` is no longer served (it is about to be unmapped,
/// or inherited as ordinary memory): a child gets what the kernel gives.
/// Called before the unmap, so that no child reserves over a range the
/// parent has reused.
pub(super) fn release(addr: usize) {
    with(|r| r.retain(|&(a, _)| a != addr));
}

extern "C" fn prepare() {
    lock(FORKING);
}

extern "C" fn parent() {
    unlock();
}

/// `MAP_FIXED_NOREPLACE` (Linux 4.17), from the kernel's headers: the
/// libc crate does not name it on Android, which runs the same kernel.
const MAP_FIXED_NOREPLACE: libc::c_int = linux_raw_sys::general::MAP_FIXED_NOREPLACE as libc::c_int;

/// In the child, on the forking thread alone: a `PROT_NONE` reservation
/// over each range served (mmap(2) is async-signal-safe; nothing
/// allocates).
extern "C" fn child() {
    FORKS.fetch_add(1, Ordering::AcqRel);
    // SAFETY: the lock is held since `prepare`, and the child has no other
    // thread.
    let ranges = unsafe { &*SERVED.ranges.get() };
    for &(addr, len) in ranges {
        // SAFETY: a new anonymous mapping of the region's range, a hole in
        // the child (mapped DONTFORK); NOREPLACE leaves anything already
        // there alone (EEXIST: a range `shutdown` made inheritable just
        // before the fork).
        let got = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if got != libc::MAP_FAILED && got as usize != addr {
            // A kernel before 4.17 took NOREPLACE for a hint and mapped
            // elsewhere: that reservation serves nothing.
            // SAFETY: the mapping just made, of `len` bytes.
            unsafe { libc::munmap(got, len) };
        }
    }
    unlock();
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    };

    use super::{FORKING, FREE, SERVED};

    /// The prepare handler waits for a change of the ranges in progress
    /// on another thread (so the child never sees one half made), holds
    /// the lock until the parent handler, and the parent handler frees it.
    /// Read first and asserted after the lock is free again, so a failure
    /// leaves no other test spinning.
    #[test]
    fn a_fork_waits_for_a_change_of_the_ranges() {
        let done = Arc::new(AtomicBool::new(false));
        let (inside, entered) = mpsc::channel();
        let d = done.clone();
        let changer = std::thread::spawn(move || {
            super::with(|r| {
                inside.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(200));
                r.push((1 << 30, 4096));
                d.store(true, Ordering::SeqCst);
            });
        });
        entered.recv().unwrap();
        super::prepare();
        // Only once the change is whole (however long the thread slept).
        let whole = done.load(Ordering::SeqCst);
        let during = SERVED.lock.load(Ordering::SeqCst);
        super::parent();
        let after = SERVED.lock.swap(FREE, Ordering::SeqCst);
        changer.join().unwrap();
        super::release(1 << 30);
        assert!(whole, "prepare ran inside a change");
        assert_eq!(
            (during, after),
            (FORKING, FREE),
            "held across the fork, then free"
        );
    }

    /// A range released is no longer reserved in a child; others stay.
    /// Ranges past the list's capacity go to a longer list.
    #[test]
    fn a_released_range_is_forgotten() {
        let base = (1 << 31) + 4096;
        let ranges: Vec<usize> = (0..20).map(|i| base + i * 8192).collect();
        for &a in &ranges {
            super::serve(a, 4096);
        }
        super::release(ranges[0]);
        let r = super::with(|r| r.clone());
        assert!(!r.contains(&(ranges[0], 4096)), "{r:x?}");
        assert!(
            ranges[1..].iter().all(|&a| r.contains(&(a, 4096))),
            "{r:x?}"
        );
        for &a in &ranges[1..] {
            super::release(a);
        }
        let r = super::with(|r| r.clone());
        assert!(ranges.iter().all(|&a| !r.contains(&(a, 4096))), "{r:x?}");
    }
}
