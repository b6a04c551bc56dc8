//! The REMOVE-vs-copy protocol of `events.rs` and `copy.rs`, on one page,
//! with the kernel's side reduced to what the protocol relies on
//! (`userfaultfd_remove` and `mfill_atomic` in the kernel):
//! - `madvise(MADV_DONTNEED)` queues the REMOVE event (setting
//!   `mmap_changing`), waits until a handler has read it, then zaps;
//! - a copy while the event is queued and unread fails with EAGAIN; else
//!   it fills the page if it is missing (one step: the kernel's
//!   `map_changing_lock` orders it against the queueing);
//! - reading the event clears `mmap_changing`.
//!
//! The guarantee: once the `madvise` returns, the page never holds the
//! source's data again. Our side: the handler reads events and marks
//! `removed` under `events` held for writing; a copier checks `removed`
//! and copies under `events` held for reading, and backs off on EAGAIN.
//! Checking `removed` before taking the lock (the broken variant) lets a
//! copy decided before the read land after the zap: loom finds it.

use loom::{
    sync::{
        Arc, Condvar, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

const SOURCE: u8 = 7;

/// The kernel's state of the page and of the one REMOVE event.
#[derive(Default)]
struct Kernel {
    /// `None`: missing; `Some(byte)`: mapped.
    pte: Option<u8>,
    /// Queued, not yet read (`mmap_changing`).
    pending: bool,
    /// Read by a handler.
    read: bool,
}

#[derive(Default)]
struct Region {
    kernel: Mutex<Kernel>,
    /// Signalled at every change of `kernel` (blocking, not spinning,
    /// keeps loom's search small).
    changed: Condvar,
    events: RwLock<()>,
    removed: AtomicBool,
}

impl Region {
    /// Waits on `changed` while `cond` holds (loom's Condvar has no
    /// `wait_while`).
    fn wait_while<'a>(
        &self,
        k: loom::sync::MutexGuard<'a, Kernel>,
        cond: impl Fn(&Kernel) -> bool,
    ) -> loom::sync::MutexGuard<'a, Kernel> {
        super::wait_while(&self.changed, k, cond)
    }
}

/// A replay thread's copy of the page; `check_under_lock` is the
/// protocol, false the broken variant.
fn copier(r: &Region, check_under_lock: bool) {
    loop {
        let early = r.removed.load(Ordering::Acquire);
        let copying = r.events.read().unwrap();
        let removed = if check_under_lock {
            r.removed.load(Ordering::Acquire)
        } else {
            early
        };
        if removed {
            return;
        }
        let mut k = r.kernel.lock().unwrap();
        if k.pending {
            // EAGAIN: let the event be read (lock released), then retry.
            drop(copying);
            drop(r.wait_while(k, |k| k.pending));
            continue;
        }
        if k.pte.is_none() {
            k.pte = Some(SOURCE);
            r.changed.notify_all();
        }
        return;
    }
}

/// A handler reading events until it has read the REMOVE.
fn handler(r: &Region) {
    // Wait for the event to be queued (poll), outside the lock.
    drop(r.wait_while(r.kernel.lock().unwrap(), |k| !k.pending));
    let _reading = r.events.write().unwrap();
    let mut k = r.kernel.lock().unwrap();
    k.pending = false;
    k.read = true;
    r.changed.notify_all();
    drop(k);
    r.removed.store(true, Ordering::Release);
}

/// The application discarding the page.
fn discard(r: &Region) {
    r.kernel.lock().unwrap().pending = true;
    r.changed.notify_all();
    let mut k = r.wait_while(r.kernel.lock().unwrap(), |k| !k.read);
    k.pte = None;
}

fn model(check_under_lock: bool) {
    mmbatch_testkit::loom_model::check(
        3,
        mmbatch_testkit::loom_model::DEFAULT_BRANCHES,
        move || {
            let r = Arc::new(Region::default());
            let threads = [
                {
                    let r = r.clone();
                    thread::spawn(move || copier(&r, check_under_lock))
                },
                {
                    let r = r.clone();
                    thread::spawn(move || handler(&r))
                },
            ];
            discard(&r);
            // madvise has returned: the page is zeros from now on.
            let after = r.kernel.lock().unwrap().pte;
            for t in threads {
                t.join().unwrap();
            }
            let last = r.kernel.lock().unwrap().pte;
            assert!(
                after != Some(SOURCE) && last != Some(SOURCE),
                "the source's data came back after the discard"
            );
        },
    );
}

#[test]
fn loom_a_discarded_page_never_gets_the_source_back() {
    model(true);
}

#[test]
#[should_panic(expected = "the source's data came back")]
fn loom_checking_removed_outside_the_lock_is_caught() {
    model(false);
}
