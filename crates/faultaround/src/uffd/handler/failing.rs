//! Failing a page that cannot be filled: its readers get SIGBUS
//! (`UFFDIO_POISON`, Linux 6.6+) or SIGSEGV (`PROT_NONE`), after the
//! failure is recorded.

use std::{io, sync::atomic::Ordering};

use super::*;

/// `_IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)` (0xC020_AA08;
/// the userfaultfd crates predate it).
const UFFDIO_POISON: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::read_write::<UffdioPoison>(0xAA, 0x08);
/// Bit of `UFFDIO_POISON` in the ioctls a registration reports.
pub(in crate::uffd) const UFFDIO_POISON_BIT: u64 = 1 << 0x08;
/// `UFFDIO_POISON_MODE_DONTWAKE`: poison without waking the readers.
const UFFDIO_POISON_MODE_DONTWAKE: u64 = 1 << 0;

#[repr(C)]
struct UffdioPoison {
    start: u64,
    len: u64,
    mode: u64,
    updated: i64,
}

/// What `UFFDIO_POISON` made of a page.
pub(in crate::uffd) enum Poisoned {
    Yes,
    /// Already present (EEXIST): filled meanwhile, nothing to fail.
    Present,
    /// Not available (before Linux 6.6, or refused).
    No,
}

impl Shared {
    /// Gives up on page `page`: makes the page's readers fail instead of
    /// fault again — SIGBUS through `UFFDIO_POISON` where the kernel has
    /// it, else SIGSEGV through `PROT_NONE` — records `cause`, and only
    /// then wakes them, so a reader that got the signal always finds the
    /// failure recorded (waking first let a reader on a kernel without
    /// `UFFDIO_POISON` see `failure()` empty: seen on Linux 6.1 in
    /// `cargo xtask vm`).
    ///
    /// A page filled meanwhile (by a replay thread, another handler's
    /// window, a source call the watchdog gave up on that came back) is
    /// not failed: `UFFDIO_POISON` finds it present, and its readers are
    /// woken to read it.
    ///
    /// A page already failed is left to whoever failed it (poisoning it
    /// again would find the poison present).
    pub(in crate::uffd) fn fail_page(&self, page: u64, cause: io::Error) {
        if !self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(page)
        {
            return;
        }
        self.stats.pages_failed.fetch_add(1, Ordering::Relaxed);
        let signal = match self.poison_page(page) {
            Poisoned::Yes => Some(FailSignal::Sigbus),
            Poisoned::Present => {
                if self
                    .failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&page)
                {
                    self.stats.pages_failed.fetch_sub(1, Ordering::Relaxed);
                }
                let _ = self.uffd.wake(self.addr(page), self.page);
                return;
            }
            Poisoned::No if self.protect_page(page) => Some(FailSignal::Sigsegv),
            Poisoned::No => None,
        };
        {
            let mut first = self.failure.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(Failure {
                    page,
                    cause,
                    signal,
                });
            }
        }
        if signal.is_some() {
            let _ = self.uffd.wake(self.addr(page), self.page);
        }
    }

    /// `UFFDIO_POISON` on `page`, not waking its readers
    /// (`UFFDIO_POISON_MODE_DONTWAKE`); fail point `uffd::poison` makes it
    /// refused as an older kernel would.
    pub(in crate::uffd) fn poison_page(&self, page: u64) -> Poisoned {
        if !self.poison.load(Ordering::Relaxed) {
            return Poisoned::No;
        }
        fail::fail_point!("uffd::poison", |_| {
            self.poison.store(false, Ordering::Relaxed);
            Poisoned::No
        });
        // EAGAIN: a REMOVE event is pending; read it and try again.
        for _ in 0..100 {
            let mut arg = UffdioPoison {
                start: self.addr(page) as u64,
                len: self.page as u64,
                mode: UFFDIO_POISON_MODE_DONTWAKE,
                updated: 0,
            };
            // SAFETY: UFFDIO_POISON takes a `struct uffdio_poison`, which
            // `UffdioPoison` lays out.
            let op = unsafe { rustix::ioctl::Updater::<UFFDIO_POISON, _>::new(&mut arg) };
            // SAFETY: the ioctl acts only on our registered range.
            let r = unsafe { rustix::ioctl::ioctl(&self.uffd, op) };
            match r {
                Ok(()) => return Poisoned::Yes,
                Err(rustix::io::Errno::AGAIN) => self.pump_events(),
                Err(rustix::io::Errno::EXIST) => return Poisoned::Present,
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOTTY) => {
                    self.poison.store(false, Ordering::Relaxed);
                    return Poisoned::No;
                }
                Err(_) => return Poisoned::No,
            }
        }
        Poisoned::No
    }

    /// The fallback: `PROT_NONE` on `page` (not waking its readers), whose
    /// retried access then faults with SIGSEGV.
    pub(in crate::uffd) fn protect_page(&self, page: u64) -> bool {
        let mapping = self.mapping.read().unwrap_or_else(|e| e.into_inner());
        if mapping.is_none() {
            return false;
        }
        // SAFETY: one page of our own mapping, still mapped (checked under
        // the lock drop takes before unmapping).
        unsafe {
            rustix::mm::mprotect(
                self.addr(page),
                self.page,
                rustix::mm::MprotectFlags::empty(),
            )
        }
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn poison_opcode_is_the_kernels() {
        // include/uapi/linux/userfaultfd.h: _IOWR(0xAA, 0x08, 32 bytes).
        assert_eq!(super::UFFDIO_POISON, 0xC020_AA08);
    }
}
