//! Userfaultfd events besides faults: `UFFD_EVENT_REMOVE`.
//!
//! When the application discards part of the region (`MADV_DONTNEED`,
//! `MADV_REMOVE`, as a balloon driver does), the kernel queues a REMOVE
//! event and holds the `madvise` until a handler reads it; only then does
//! it zap the pages (`userfaultfd_remove` in `fs/userfaultfd.c`). Until the
//! event is read, `UFFDIO_COPY` and `UFFDIO_ZEROPAGE` on the region fail
//! with EAGAIN (`mmap_changing`) — the trap Firecracker documents: a
//! handler that retries the copy without reading events spins forever.
//! So a copier that gets EAGAIN reads the pending events itself
//! ([`pump_events`](Shared::pump_events)) before retrying.
//!
//! After the zap a discarded page must read as zeros, as anonymous memory
//! does, not as the source's data: it is marked in `removed` and its next
//! fault is served with `UFFDIO_ZEROPAGE`. A copy that checked the marks
//! before a REMOVE was read, but reached the kernel after the zap, would
//! put the source's data back; so events are read (and marks set) under
//! `events` held for writing, and every copy checks the marks and makes
//! its ioctl under `events` held for reading.

use std::sync::atomic::Ordering;

use crate::uffd::sys::Event;

use super::{Fault, Shared};

impl Shared {
    /// Reads events until a page fault, which it returns; marks
    /// the ranges of REMOVE events on the way. `None` when none is
    /// pending.
    pub(super) fn next_fault(&self) -> Option<Fault> {
        let _reading = self.events.write().unwrap_or_else(|e| e.into_inner());
        loop {
            match self.uffd.read_event() {
                Ok(Some(Event::Pagefault { addr, minor })) => return Some(Fault { addr, minor }),
                Ok(Some(Event::Remove { start, end })) => self.mark_removed(start, end),
                Ok(Some(_)) => {}
                // Ok(None): another handler took it (EAGAIN).
                _ => return None,
            }
        }
    }

    /// Reads every pending event — REMOVE marks set, faults queued for the
    /// handlers (and one woken) — so a copy refused with EAGAIN can go
    /// on. Called without `events` held.
    pub(super) fn pump_events(&self) {
        let mut queued = false;
        while let Some(fault) = self.next_fault() {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(fault);
            queued = true;
        }
        if queued {
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
    }

    fn mark_removed(&self, start: usize, end: usize) {
        self.stats.remove_events.fetch_add(1, Ordering::Relaxed);
        for a in self.areas.iter() {
            let top = a.addresses(self.page).end;
            let (s, e) = (start.max(a.base), end.min(top));
            if s >= e {
                continue;
            }
            let first = a.first + ((s - a.base) / self.page) as u64;
            let last = a.first + (e - a.base).div_ceil(self.page) as u64;
            for p in first..last {
                let p = p as usize;
                self.removed[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
            }
            self.mark_installed(first, (last - first) as usize, false);
            self.any_removed.store(true, Ordering::Release);
        }
    }

    /// Whether the application discarded page `p` (read `events` first
    /// for a decision a copy depends on).
    pub(super) fn is_removed(&self, p: u64) -> bool {
        let p = p as usize;
        self.any_removed.load(Ordering::Acquire)
            && self.removed[p / 64].load(Ordering::Relaxed) & (1 << (p % 64)) != 0
    }

    /// Serves a fault on a discarded page with zeros (`UFFDIO_ZEROPAGE`),
    /// waking its readers. EAGAIN (another event pending) is retried after
    /// reading the events, up to the source timeout, and a refusal
    /// (ENOMEM) three times; then the page is failed, so its reader gets a
    /// signal rather than wait, or fault again, forever.
    pub(super) fn zero_page(&self, p: u64) {
        let deadline = self.deadline();
        let mut refused = 0;
        loop {
            let r = {
                let _copy = self.events.read().unwrap_or_else(|e| e.into_inner());
                if self.page > rustix::param::page_size() || self.track {
                    // hugetlb has no UFFDIO_ZEROPAGE, and the zero page it
                    // maps is not write-protected: copy a zeroed page.
                    let zeros = vec![0u8; self.page];
                    match self.copy_ioctl(zeros.as_ptr(), self.addr(p), self.page, false) {
                        super::copy::Copied::Bytes(b) => Ok(b),
                        super::copy::Copied::Again(_) => Err(rustix::io::Errno::AGAIN),
                        super::copy::Copied::Exists => Err(rustix::io::Errno::EXIST),
                        super::copy::Copied::Failed(e) => {
                            Err(rustix::io::Errno::from_raw_os_error(e))
                        }
                    }
                } else {
                    self.zeropage_ioctl(p)
                }
            };
            match r {
                Ok(_) => {
                    // Woken after the count, as a window is: a resumed
                    // reader sees the statistics with its page.
                    self.mark_installed(p, 1, true);
                    self.stats.pages_zeroed.fetch_add(1, Ordering::Relaxed);
                    let _ = self.uffd.wake(self.addr(p), self.page);
                    return;
                }
                Err(rustix::io::Errno::AGAIN) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    self.pump_events();
                    if std::time::Instant::now() >= deadline {
                        self.fail_page(
                            p,
                            std::io::Error::other(format!(
                                "UFFDIO_ZEROPAGE of page {p} refused with EAGAIN for {:?} \
                                 (the region's source timeout): events kept arriving",
                                self.source_timeout
                            )),
                        );
                        return;
                    }
                    std::thread::yield_now();
                }
                // Already there (EEXIST), or nothing left to serve: the
                // range unregistered (ENOENT, a retired region), the
                // faulting process gone (ESRCH). Wake any reader.
                Err(
                    rustix::io::Errno::EXIST | rustix::io::Errno::NOENT | rustix::io::Errno::SRCH,
                ) => {
                    self.mark_installed(p, 1, true);
                    let _ = self.uffd.wake(self.addr(p), self.page);
                    return;
                }
                // A refusal (ENOMEM under a memory cgroup): woken, the
                // reader would fault again at once, a livelock. Retried a
                // few times, as a copy is, then the page fails.
                Err(e) => {
                    refused += 1;
                    if refused == 3 {
                        let hint = if e == rustix::io::Errno::NOMEM {
                            " (ENOMEM: the memory cgroup or the system is out of memory)"
                        } else {
                            ""
                        };
                        self.fail_page(
                            p,
                            std::io::Error::new(
                                std::io::Error::from(e).kind(),
                                format!("zero-filling discarded page {p} failed: {e}{hint}"),
                            ),
                        );
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1 << refused));
                }
            }
        }
    }

    /// One `UFFDIO_ZEROPAGE` of page `p`, made with `events` held for
    /// reading; ENOENT, as for an unregistered range, once the region is
    /// retired. Fail point `uffd::zeropage` returns the errno it names
    /// (`ENOMEM` unless `EEXIST`).
    fn zeropage_ioctl(&self, p: u64) -> Result<usize, rustix::io::Errno> {
        if self.is_retired() {
            return Err(rustix::io::Errno::NOENT);
        }
        fail_point!("uffd::zeropage", |arg| Err(match arg.as_deref() {
            Some("EEXIST") => rustix::io::Errno::EXIST,
            _ => rustix::io::Errno::NOMEM,
        }));
        // SAFETY: one page of our registered range.
        unsafe { self.uffd.zeropage(self.addr(p), self.page, false) }
    }
}
