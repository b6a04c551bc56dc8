//! Failing a page that cannot be filled: its readers get SIGBUS
//! (`UFFDIO_POISON`, Linux 6.6+) or SIGSEGV (`PROT_NONE`), after the
//! failure is recorded.

use std::{io, sync::atomic::Ordering};

use mmbatch_mmap::HugePageSize;

use super::*;

/// `_IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)` (0xC020_AA08;
/// built here, as the others are in `sys.rs`).
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

/// What [`protect_page`](Shared::protect_page) made of a page.
pub(in crate::uffd) enum Protected {
    Yes,
    /// Mapped already: filled meanwhile, nothing to fail.
    Present,
    /// `mprotect` refused, or the region is gone.
    No,
}

/// What `UFFDIO_POISON` made of a page.
pub(in crate::uffd) enum Poisoned {
    Yes,
    /// Refused at the handler's page size (EINVAL) and taken for the
    /// whole huge page of this size around it: the memory is mapped in
    /// larger pages than the handler was built for.
    Larger(usize),
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
    /// not failed, and its readers are woken to read it: `UFFDIO_POISON`
    /// finds it present (EEXIST), and the `PROT_NONE` fallback checks for
    /// it under `events` held for writing, so no copy lands between the
    /// check and the `mprotect` ([`protect_page`](Self::protect_page)).
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
        let (mut cause, mut wake) = (cause, (self.addr(page), self.page));
        let signal = match self.poison_page(page) {
            Poisoned::Yes => Some(FailSignal::Sigbus),
            Poisoned::Larger(huge) => {
                cause = misfit(cause, self.page, huge);
                wake = (huge_page_of(wake.0, huge), huge);
                Some(FailSignal::Sigbus)
            }
            Poisoned::Present => return self.unfail(page),
            Poisoned::No => {
                // Fail point `uffd::before_protect`: a test fills the page
                // here, between the decision and the protection.
                fail_point!("uffd::before_protect");
                match self.protect_page(page) {
                    Protected::Yes => Some(FailSignal::Sigsegv),
                    Protected::Present => return self.unfail(page),
                    Protected::No => None,
                }
            }
        };
        let told = self.failed_with(Failure {
            page,
            cause,
            signal,
        });
        if signal.is_some() {
            let _ = self.uffd.wake(wake.0, wake.1);
        }
        self.tell(told);
    }

    /// Keeps `failure` if it is the first; returns what to tell
    /// `on_failure` (as `failure()` would give it: its cause's kind and
    /// message), once the page's readers are woken.
    fn failed_with(&self, failure: Failure) -> Option<crate::Error> {
        let told = self.on_failure.as_ref().map(|_| crate::Error::PageFailed {
            page: failure.page,
            signal: failure.signal,
            source: io::Error::new(failure.cause.kind(), failure.cause.to_string()),
        });
        let mut first = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(failure);
        }
        told
    }

    /// Tells `on_failure` of a failed page (a panic in it is caught).
    fn tell(&self, told: Option<crate::Error>) {
        if let (Some(tell), Some(e)) = (&self.on_failure, told) {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (tell.0)(e)));
        }
    }

    /// A fault at `addr`, in none of the ranges the handler was given (the
    /// process that registered the memory registered more than it
    /// described): poisoned where the kernel can, so the faulting thread
    /// gets SIGBUS rather than wait forever (before Linux 6.6 it stays
    /// blocked, as a failed page's reader does), and recorded as a failure
    /// of page `u64::MAX` whose cause names the address.
    pub(in crate::uffd) fn fail_stray(&self, addr: usize) {
        let at = (addr & !(self.page - 1)) as *mut std::ffi::c_void;
        self.stats.pages_failed.fetch_add(1, Ordering::Relaxed);
        let mut cause = io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a fault at {addr:#x}, outside every range the handler was given: the \
                 process registered memory it did not describe"
            ),
        );
        let (signal, wake) = match self.poison_at(at) {
            Poisoned::Yes => (Some(FailSignal::Sigbus), (at, self.page)),
            Poisoned::Larger(huge) => {
                cause = misfit(cause, self.page, huge);
                (Some(FailSignal::Sigbus), (huge_page_of(at, huge), huge))
            }
            Poisoned::Present | Poisoned::No => (None, (at, self.page)),
        };
        let told = self.failed_with(Failure {
            page: u64::MAX,
            cause,
            signal,
        });
        // Without the poison, waking would only fault it again at once:
        // the reader stays blocked, as a failed page's does.
        if signal.is_some() {
            let _ = self.uffd.wake(wake.0, wake.1);
        }
        self.tell(told);
    }

    /// Takes back the failing of `page`, found filled meanwhile: it is not
    /// counted failed, and its readers are woken to read it.
    fn unfail(&self, page: u64) {
        if self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&page)
        {
            self.stats.pages_failed.fetch_sub(1, Ordering::Relaxed);
        }
        let _ = self.uffd.wake(self.addr(page), self.page);
    }

    /// `UFFDIO_POISON` on `page`, not waking its readers
    /// (`UFFDIO_POISON_MODE_DONTWAKE`); fail point `uffd::poison` makes it
    /// refused as an older kernel would.
    pub(in crate::uffd) fn poison_page(&self, page: u64) -> Poisoned {
        self.poison_at(self.addr(page))
    }

    /// `UFFDIO_POISON` on the page at `at`, as [`poison_page`](Self::poison_page).
    ///
    /// A hugetlb mapping refuses a range that is not whole pages of its
    /// own size with the EINVAL a kernel without the ioctl gives: so on
    /// EINVAL the huge page around `at` is poisoned at each larger size
    /// in turn ([`Poisoned::Larger`]), and only where every one is
    /// refused so is poisoning taken to be missing (another error ends
    /// the tries for this page alone). Without this a handler
    /// built with a smaller page size than the memory's turned poisoning
    /// off at its first failed page, and every reader blocked for good.
    fn poison_at(&self, at: *mut std::ffi::c_void) -> Poisoned {
        if !self.poison.load(Ordering::Relaxed) {
            return Poisoned::No;
        }
        fail_point!("uffd::poison", |_| {
            self.poison.store(false, Ordering::Relaxed);
            Poisoned::No
        });
        match self.poison_range(at, self.page) {
            Ok(()) => Poisoned::Yes,
            Err(rustix::io::Errno::EXIST) => Poisoned::Present,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOTTY) => {
                let larger = [HugePageSize::Size2M, HugePageSize::Size1G]
                    .map(HugePageSize::bytes)
                    .into_iter()
                    .filter(|&huge| huge > self.page);
                for huge in larger {
                    match self.poison_range(huge_page_of(at, huge), huge) {
                        Ok(()) => return Poisoned::Larger(huge),
                        Err(rustix::io::Errno::EXIST) => return Poisoned::Present,
                        // Not this size either: the next.
                        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOTTY) => {}
                        // Another refusal (the range gone, no memory): this
                        // page is not poisoned, and the next may be.
                        Err(_) => return Poisoned::No,
                    }
                }
                self.poison.store(false, Ordering::Relaxed);
                Poisoned::No
            }
            Err(_) => Poisoned::No,
        }
    }

    /// One `UFFDIO_POISON` of `len` bytes at `at` (not waking its
    /// readers), tried again while a REMOVE event is pending (EAGAIN);
    /// ENOENT once the region is retired.
    fn poison_range(&self, at: *mut std::ffi::c_void, len: usize) -> rustix::io::Result<()> {
        for _ in 0..100 {
            let mut arg = UffdioPoison {
                start: at as u64,
                len: len as u64,
                mode: UFFDIO_POISON_MODE_DONTWAKE,
                updated: 0,
            };
            // SAFETY: UFFDIO_POISON takes a `struct uffdio_poison`, which
            // `UffdioPoison` lays out.
            let op = unsafe { rustix::ioctl::Updater::<UFFDIO_POISON, _>::new(&mut arg) };
            let r = {
                // Under `events`, as a copy: none once the region is retired.
                let _installing = self.events.read().unwrap_or_else(|e| e.into_inner());
                if self.is_retired() {
                    return Err(rustix::io::Errno::NOENT);
                }
                // SAFETY: the ioctl acts only on our registered range.
                unsafe { rustix::ioctl::ioctl(&self.uffd, op) }
            };
            match r {
                Err(rustix::io::Errno::AGAIN) => self.pump_events(),
                r => return r,
            }
        }
        Err(rustix::io::Errno::AGAIN)
    }

    /// The fallback: `PROT_NONE` on `page` (not waking its readers), whose
    /// retried access then faults with SIGSEGV — unless the page is
    /// present ([`Protected::Present`]).
    ///
    /// The check and the `mprotect` are made under `events` held for
    /// writing, and every `UFFDIO_COPY`, `UFFDIO_ZEROPAGE` and
    /// `UFFDIO_CONTINUE` is made under it held for reading: a copy lands
    /// either before the check, which then sees it, or after the
    /// `mprotect`, where it finds the page failed for good (as a copy
    /// after `UFFDIO_POISON` gets EEXIST). Checked after the `mprotect`
    /// instead, a page filled before it would be inaccessible until the
    /// protection was undone, and a reader of it would get SIGSEGV
    /// meanwhile; unchecked (as before), for good.
    pub(in crate::uffd) fn protect_page(&self, page: u64) -> Protected {
        let mapping = self.mapping.read().unwrap_or_else(|e| e.into_inner());
        if mapping.is_none() {
            return Protected::No;
        }
        let _no_copy = self.events.write().unwrap_or_else(|e| e.into_inner());
        // Retired (shut down): the range is the application's again, and
        // a thread left behind in the source protects none of it, as it
        // installs none.
        if self.is_retired() {
            return Protected::No;
        }
        if self.mapped(page) {
            return Protected::Present;
        }
        // SAFETY: one page of our own mapping, still mapped (checked under
        // the lock drop takes before unmapping).
        let r = unsafe {
            rustix::mm::mprotect(
                self.addr(page),
                self.page,
                rustix::mm::MprotectFlags::empty(),
            )
        };
        if r.is_ok() {
            Protected::Yes
        } else {
            Protected::No
        }
    }

    /// Whether a page table entry of this process maps `page` (present, or
    /// swapped out), read from `/proc/self/pagemap` ([`pte_maps`], then
    /// [`mapped_by`]).
    fn mapped(&self, page: u64) -> bool {
        // Opened once: shutdown may fail every page of a huge region.
        let pagemap = self
            .pagemap
            .get_or_init(|| std::fs::File::open("/proc/self/pagemap").ok());
        let read = pagemap
            .as_ref()
            .map(|f| pte_maps(f, self.addr(page) as usize));
        mapped_by(read, self.mode, || self.resident(page as usize, 1)[0])
    }
}

/// Whether a page is mapped: its pagemap entry's answer when one was read;
/// else, in anonymous memory ([`Mode::Copy`]), whether it is `resident`
/// (`mincore`), which there is the same; else not. Over a page cache
/// `mincore` reports the cached page whether it is mapped here or not, so
/// a page whose entry cannot be read counts as not mapped.
fn mapped_by(read: Option<io::Result<bool>>, mode: Mode, resident: impl FnOnce() -> bool) -> bool {
    match read {
        Some(Ok(mapped)) => mapped,
        _ if mode == Mode::Copy => resident(),
        _ => false,
    }
}

/// A pagemap entry's bit 63: the page is present (`PM_PRESENT`,
/// `fs/proc/task_mmu.c`).
const PM_PRESENT: u64 = 0x8000_0000_0000_0000;
/// A pagemap entry's bit 62: the page is swapped out (`PM_SWAP`).
const PM_SWAP: u64 = 0x4000_0000_0000_0000;

/// Whether a page table entry of this process maps the page at `addr`:
/// present or swapped out, bits 63 and 62 of its entry in `pagemap`
/// (`/proc/self/pagemap`: one 8-byte entry per base page, a huge page's
/// first among them).
fn pte_maps(pagemap: &std::fs::File, addr: usize) -> io::Result<bool> {
    let at = (addr / rustix::param::page_size()) as u64 * 8;
    let mut entry = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(pagemap, &mut entry, at)?;
    Ok(u64::from_ne_bytes(entry) & (PM_PRESENT | PM_SWAP) != 0)
}

/// The start of the `huge`-byte page holding `at`.
fn huge_page_of(at: *mut std::ffi::c_void, huge: usize) -> *mut std::ffi::c_void {
    (at as usize & !(huge - 1)) as *mut std::ffi::c_void
}

/// `cause` with what a poison at a larger size showed: the memory's page
/// size, and the setting that fixes it.
fn misfit(cause: io::Error, page: usize, huge: usize) -> io::Error {
    io::Error::new(
        cause.kind(),
        format!(
            "{cause}; the memory is mapped in {huge}-byte pages, not the handler's {page} \
             (its readers were stopped by poisoning the whole page): build the handler with \
             page_size({huge})"
        ),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn poison_opcode_is_the_kernels() {
        // include/uapi/linux/userfaultfd.h: _IOWR(0xAA, 0x08, 32 bytes).
        assert_eq!(super::UFFDIO_POISON, 0xC020_AA08);
    }

    #[test]
    fn pagemap_bits_are_the_kernels() {
        assert_eq!((super::PM_PRESENT, super::PM_SWAP), (1 << 63, 1 << 62));
    }

    /// The pagemap's answer wins; without one, `mincore`'s counts in
    /// anonymous memory only.
    #[test]
    fn mapped_by_prefers_the_pagemap_and_trusts_mincore_only_when_anonymous() {
        use super::{Mode, mapped_by};
        let unread = || Some(Err(std::io::ErrorKind::UnexpectedEof.into()));
        for resident in [false, true] {
            for mode in [Mode::Copy, Mode::Continue] {
                assert!(mapped_by(Some(Ok(true)), mode, || resident));
                assert!(!mapped_by(Some(Ok(false)), mode, || resident));
            }
            assert_eq!(mapped_by(unread(), Mode::Copy, || resident), resident);
            assert_eq!(mapped_by(None, Mode::Copy, || resident), resident);
            assert!(!mapped_by(unread(), Mode::Continue, || resident));
            assert!(!mapped_by(None, Mode::Continue, || resident));
        }
    }

    /// The pagemap entry read is the page's own: of four fresh anonymous
    /// pages, the one written is mapped and the others not, and an
    /// address past the pagemap's end is an error, not an answer.
    #[test]
    fn pte_maps_reads_the_entry_of_the_page_at_the_address() {
        let page = rustix::param::page_size();
        let m = mmbatch_mmap::Mapping::anonymous(4 * page).unwrap();
        let base = m.as_ptr() as usize;
        // SAFETY: inside the mapping, which is readable and writable.
        unsafe { std::ptr::write_volatile((base + 2 * page) as *mut u8, 1) };
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mapped: Vec<bool> = (0..4)
            .map(|p| super::pte_maps(&pagemap, base + p * page + 5).unwrap())
            .collect();
        assert_eq!(mapped, [false, false, true, false]);
        assert!(super::pte_maps(&pagemap, usize::MAX).is_err());
    }
}
