//! What a child of `fork(2)` finds where a region is being served. The
//! kernel hands a child a userfaultfd range unregistered, so every page not
//! yet copied in would read as zeros; an anonymous region is therefore
//! mapped `MADV_DONTFORK` (the child inherits no mapping there), and the
//! child's hole is filled at once with an inaccessible reservation, so
//! that nothing the child maps later lands in it (where the region's
//! `as_slice` would read it): the `pthread_atfork` child handler below,
//! over every region [`serve`]d and not yet [`release`]d.

use std::{
    cell::UnsafeCell,
    sync::{
        Once,
        atomic::{AtomicBool, Ordering},
    },
};

/// The ranges being served, behind a spin lock that the fork handlers
/// hold across the fork (a mutex held by another thread at the fork would
/// stay locked in the child; the prepare handler takes the lock, so no
/// thread holds it mid-change when the child is made).
struct Served {
    locked: AtomicBool,
    ranges: UnsafeCell<Vec<(usize, usize)>>,
}

// SAFETY: `ranges` is only touched with `locked` held (`with`, and the
// fork handlers between prepare and parent / child).
unsafe impl Sync for Served {}

static SERVED: Served = Served {
    locked: AtomicBool::new(false),
    ranges: UnsafeCell::new(Vec::new()),
};

/// Takes the lock. Held for a push or a retain, or across a fork: with
/// debug assertions, one held for ten seconds fails (a lock never
/// released) rather than spin for ever.
fn lock() {
    let mut since = None;
    while SERVED
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if cfg!(debug_assertions) {
            let since = since.get_or_insert_with(std::time::Instant::now);
            assert!(
                since.elapsed() < std::time::Duration::from_secs(10),
                "the registry of served regions was never unlocked"
            );
        }
        std::thread::yield_now();
    }
}

fn unlock() {
    SERVED.locked.store(false, Ordering::Release);
}

/// Unlocks when dropped, so that a panic in `f` (`with`) unlocks too.
struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        unlock();
    }
}

/// Runs `f` on the ranges with the lock held.
fn with<T>(f: impl FnOnce(&mut Vec<(usize, usize)>) -> T) -> T {
    static HANDLERS: Once = Once::new();
    HANDLERS.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions that live
        // for the program and touch only `SERVED` and mmap(2).
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        // ENOMEM only; without the handlers a child has a hole there
        // instead of a reservation (it faults until it maps something).
        let _ = r;
    });
    lock();
    let _held = Held;
    // SAFETY: the lock is held.
    f(unsafe { &mut *SERVED.ranges.get() })
}

/// `len` bytes from `addr`, mapped `MADV_DONTFORK`, are served from now
/// on: a child gets an inaccessible reservation there.
pub(super) fn serve(addr: usize, len: usize) {
    with(|r| r.push((addr, len)));
}

/// The range from `addr` is no longer served (it is about to be unmapped,
/// or inherited as ordinary memory): a child gets what the kernel gives.
/// Called before the unmap, so that no child reserves over a range the
/// parent has reused.
pub(super) fn release(addr: usize) {
    with(|r| r.retain(|&(a, _)| a != addr));
}

extern "C" fn prepare() {
    lock();
}

extern "C" fn parent() {
    unlock();
}

/// In the child, on the forking thread alone: a `PROT_NONE` reservation
/// over each range served (mmap(2) is async-signal-safe; nothing
/// allocates).
extern "C" fn child() {
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
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_FIXED_NOREPLACE
                    | libc::MAP_NORESERVE,
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

    /// The prepare handler waits for a change of the ranges in progress
    /// on another thread (so the child never sees one half made), and
    /// holds the lock until the parent handler.
    #[test]
    fn a_fork_waits_for_a_change_of_the_ranges() {
        let done = Arc::new(AtomicBool::new(false));
        let (inside, entered) = mpsc::channel();
        let d = done.clone();
        let changer = std::thread::spawn(move || {
            super::with(|r| {
                inside.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(200));
                r.push((1 << 40, 4096));
                d.store(true, Ordering::SeqCst);
            });
        });
        entered.recv().unwrap();
        super::prepare();
        // Only once the change is whole (however long the thread slept).
        assert!(done.load(Ordering::SeqCst), "prepare ran inside a change");
        // Held until the parent handler: a change now would wait.
        assert!(super::SERVED.locked.load(Ordering::SeqCst));
        super::parent();
        changer.join().unwrap();
        super::release(1 << 40);
    }

    /// A range released is no longer reserved in a child; others stay.
    #[test]
    fn a_released_range_is_forgotten() {
        let (a, b) = ((1 << 41) + 4096, (1 << 41) + 8192);
        super::serve(a, 4096);
        super::serve(b, 4096);
        super::release(a);
        let r = super::with(|r| r.clone());
        assert!(!r.contains(&(a, 4096)) && r.contains(&(b, 4096)), "{r:x?}");
        super::release(b);
        let r = super::with(|r| r.clone());
        assert!(!r.contains(&(b, 4096)), "{r:x?}");
    }
}
