//! The teardown protocol of `stop.rs` (`Shared::shutdown`, for an owned
//! region and a [`UffdHandler`](crate::UffdHandler) serving another
//! process's userfaultfd alike), on one page, with a fault pending and a
//! handler thread left behind in a slow source call. The kernel's side is
//! reduced to what the protocol relies on (`handle_userfault`,
//! `mfill_atomic`, `userfaultfd_unregister` in the kernel):
//! - a fault on a missing page of a registered range sleeps until the page
//!   is filled and its waiters woken, or the range is unregistered, when
//!   it retries as an ordinary fault (anonymous memory: a zero page);
//! - a copy fills the page if it is missing and the range is registered
//!   (with any userfaultfd: `mfill_atomic` does not ask which), else fails;
//! - once shutdown returns, the process may map new memory at the same
//!   address and register it anew.
//!
//! The guarantees: the pending fault reads the source's data, never
//! zeros; and no copy of the old handler lands in the new memory. Our
//! side: `fill_missing` installs every missing page before `unregister`;
//! `retire` takes `events` for writing and marks the region retired
//! before it, and every copy checks the mark and makes its ioctl under
//! `events` held for reading. Broken variants, each caught: unregistering
//! before the fill (the order a process-level test also saw fail: "pending
//! page 11 came back wrong"), and a left-behind thread checking the mark
//! before it takes the lock.

use loom::{
    sync::{
        Arc, Condvar, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

const SOURCE: u8 = 7;

/// The kernel's state of the page and of its mapping.
#[derive(Default)]
struct Kernel {
    /// `None`: missing; `Some(byte)`: mapped.
    pte: Option<u8>,
    /// The range is registered with a userfaultfd.
    registered: bool,
    /// The reader is asleep in its fault.
    faulting: bool,
    /// The process has mapped new memory at the address (after shutdown).
    remapped: bool,
    /// A copy of the old handler landed in the new memory.
    stale: bool,
}

#[derive(Default)]
struct Region {
    kernel: Mutex<Kernel>,
    /// Signalled at every change of `kernel`.
    changed: Condvar,
    events: RwLock<()>,
    retired: AtomicBool,
}

/// How the model's shutdown and copies run: the protocol, or a broken
/// variant.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Protocol,
    UnregisterBeforeFill,
    CheckRetiredBeforeLock,
}

impl Region {
    fn wait_while<'a>(
        &self,
        k: loom::sync::MutexGuard<'a, Kernel>,
        cond: impl Fn(&Kernel) -> bool,
    ) -> loom::sync::MutexGuard<'a, Kernel> {
        super::wait_while(&self.changed, k, cond)
    }

    /// `UFFDIO_COPY` of the page: fills it if missing and registered,
    /// waking its waiters (EEXIST and ENOENT leave it).
    fn kernel_copy(&self) {
        let mut k = self.kernel.lock().unwrap();
        if k.registered && k.pte.is_none() {
            k.pte = Some(SOURCE);
            k.stale |= k.remapped;
            self.changed.notify_all();
        }
    }

    /// A copy as `copy_run` and `copy_ioctl` make it: the retired mark
    /// checked, and the ioctl made, under `events` held for reading.
    fn copy(&self, variant: Variant) {
        let early = self.retired.load(Ordering::Acquire);
        let _copying = self.events.read().unwrap();
        let retired = if variant == Variant::CheckRetiredBeforeLock {
            early
        } else {
            self.retired.load(Ordering::Acquire)
        };
        if !retired {
            self.kernel_copy();
        }
    }

    /// `Shared::retire`.
    fn retire(&self) {
        let _no_copy = self.events.write().unwrap();
        self.retired.store(true, Ordering::Release);
    }

    /// `UFFDIO_UNREGISTER`: sleeping faults are woken to retry.
    fn unregister(&self) {
        self.kernel.lock().unwrap().registered = false;
        self.changed.notify_all();
    }

    /// `Shared::shutdown` once the handlers are stopped (the left-behind
    /// one is not waited for).
    fn shutdown(&self, variant: Variant) {
        if variant == Variant::UnregisterBeforeFill {
            self.unregister();
        }
        // `fill_missing`: the page is missing unless a copy filled it.
        if self.kernel.lock().unwrap().pte.is_none() {
            self.copy(variant);
        }
        self.retire();
        if variant != Variant::UnregisterBeforeFill {
            self.unregister();
        }
    }
}

/// The application's read of the page, faulting: what it reads.
fn reader(r: &Region) -> u8 {
    let mut k = r.kernel.lock().unwrap();
    k.faulting = true;
    r.changed.notify_all();
    k = r.wait_while(k, |k| k.registered && k.pte.is_none());
    // An unregistered missing page faults as anonymous memory: zeros.
    *k.pte.get_or_insert(0)
}

fn model(variant: Variant) {
    mmbatch_testkit::loom_model::check(
        3,
        mmbatch_testkit::loom_model::DEFAULT_BRANCHES,
        move || {
            let r = Arc::new(Region::default());
            r.kernel.lock().unwrap().registered = true;
            let read = {
                let r = r.clone();
                thread::spawn(move || reader(&r))
            };
            // A handler thread stuck in the source past the shutdown's
            // deadline: its call returns at any moment, and it copies.
            let left_behind = {
                let r = r.clone();
                thread::spawn(move || r.copy(variant))
            };
            // The fault is pending when shutdown begins.
            drop(r.wait_while(r.kernel.lock().unwrap(), |k| !k.faulting));
            r.shutdown(variant);
            let got = read.join().unwrap();
            // Shutdown has returned and the read with it: the process maps
            // new memory there and registers it with another userfaultfd.
            {
                let mut k = r.kernel.lock().unwrap();
                k.pte = None;
                k.registered = true;
                k.remapped = true;
            }
            left_behind.join().unwrap();
            assert_eq!(got, SOURCE, "a fault pending at shutdown read zeros");
            assert!(
                !r.kernel.lock().unwrap().stale,
                "a left-behind handler's copy landed in the new memory"
            );
        },
    );
}

#[test]
fn loom_a_pending_fault_gets_its_data_and_nothing_lands_after_shutdown() {
    model(Variant::Protocol);
}

#[test]
#[should_panic(expected = "a fault pending at shutdown read zeros")]
fn loom_unregistering_before_the_fill_is_caught() {
    model(Variant::UnregisterBeforeFill);
}

#[test]
#[should_panic(expected = "a left-behind handler's copy landed")]
fn loom_checking_retired_outside_the_lock_is_caught() {
    model(Variant::CheckRetiredBeforeLock);
}
