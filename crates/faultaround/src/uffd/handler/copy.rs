//! Copying a window into the region (`UFFDIO_COPY`, `UFFDIO_CONTINUE`):
//! partial copies, EAGAIN and EEXIST, with a bounded backoff.

use std::{
    ffi::c_void,
    io,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use linux_raw_sys::general::{uffdio_continue, uffdio_range};
use rustix::io::Errno;

use super::*;

/// `_IOWR(UFFDIO, _UFFDIO_CONTINUE, struct uffdio_continue)`.
const UFFDIO_CONTINUE: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::read_write::<uffdio_continue>(0xAA, 0x07);

/// `UFFDIO_CONTINUE_MODE_DONTWAKE` (`(__u64)1 << 0`, a cast bindgen
/// leaves out of `linux-raw-sys`).
const UFFDIO_CONTINUE_MODE_DONTWAKE: u64 = 1 << 0;

/// What one `UFFDIO_COPY` did.
pub(in crate::uffd) enum Copied {
    Bytes(usize),
    /// EAGAIN after the given bytes: the kernel's `copy` field cast to
    /// `usize` (a negative errno becomes a huge count, which the caller
    /// tells apart).
    Again(usize),
    Exists,
    Failed(i32),
}

/// What a copy's or a continue's EINVAL means.
const EINVAL_HINT: &str = " (EINVAL: the page is not one of the memory's own pages: a handler's \
     page_size must be the page size the memory is mapped in, a hugetlbfs mapping's huge page \
     size, and each range must start and end on such pages)";

impl Shared {
    /// `UFFDIO_CONTINUE` of `n` pages from page `first`: maps the pages
    /// that are in the page cache; one already mapped (EEXIST) or not
    /// cached (EFAULT) is skipped; a partial result resumes after it; EAGAIN
    /// (an event pending) is retried after reading the events. Any other
    /// error stops it and is returned. Returns the pages mapped.
    pub(in crate::uffd) fn cont(&self, first: u64, n: usize, wake: bool) -> io::Result<usize> {
        let (mut done, mut total) = (0, 0);
        let mut again = Backoff::new(self);
        while done < n {
            let at = first + done as u64;
            let m = self.in_area(at, n - done);
            if m == 0 {
                // Between two areas: nothing there to map.
                done += 1;
                continue;
            }
            let mut arg = uffdio_continue {
                range: uffdio_range {
                    start: self.addr(at) as u64,
                    len: (m * self.page) as u64,
                },
                mode: if wake {
                    0
                } else {
                    UFFDIO_CONTINUE_MODE_DONTWAKE
                },
                mapped: 0,
            };
            // Fail point `uffd::continue`: a test's callback removes the
            // page from the cache between the fault and the ioctl.
            fail_point!("uffd::continue");
            // SAFETY: UFFDIO_CONTINUE takes a `struct uffdio_continue`.
            let op = unsafe { rustix::ioctl::Updater::<UFFDIO_CONTINUE, _>::new(&mut arg) };
            // Under `events`, as every copy: `protect_page` checks that the
            // page is not mapped and protects it with no mapping between.
            let copying = self.events.read().unwrap_or_else(|e| e.into_inner());
            if self.is_retired() {
                return Err(Errno::NOENT.into());
            }
            // Fail point `uffd::continue_again`: EAGAIN with nothing
            // mapped, as while events wait to be read.
            #[cfg(feature = "failpoints")]
            let again_injected = fail::eval("uffd::continue_again", |_| ()).is_some();
            #[cfg(not(feature = "failpoints"))]
            let again_injected = false;
            let r = if again_injected {
                Err(Errno::AGAIN)
            } else {
                // SAFETY: the ioctl maps pages only inside our registered
                // range.
                unsafe { rustix::ioctl::ioctl(&self.uffd, op) }
            };
            // `mapped` is bytes, or a negative errno.
            let mapped = usize::try_from(arg.mapped)
                .map_or(0, |b| b / self.page)
                .min(m);
            // Marked under `events`, as a copy's are: a REMOVE read after
            // this clears what it set.
            self.mark_installed(at, mapped, true);
            if r == Err(Errno::EXIST) {
                // An error maps nothing (`mapped` holds the errno; a
                // partial map is EAGAIN): the page found present is `at`.
                self.mark_installed(at, 1, true);
            }
            drop(copying);
            self.stats
                .pages_copied
                .fetch_add(mapped as u64, Ordering::Relaxed);
            done += mapped;
            total += mapped;
            match r {
                Ok(()) => {}
                Err(Errno::AGAIN) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    self.pump_events();
                    if mapped > 0 {
                        // A partial map (stopped at a page present): the
                        // bound is on calls that make no progress, as a
                        // copy's is. Counted across them, a range with
                        // more than 16 pages present gave up after a
                        // source timeout of naps, leaving the rest
                        // unmapped.
                        again = Backoff::new(self);
                    } else {
                        again.wait().map_err(|()| io::Error::from(Errno::AGAIN))?;
                    }
                }
                Err(Errno::EXIST) => {
                    self.stats.already_present.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                Err(Errno::FAULT) => {
                    self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                Err(e) => {
                    let hint = if e == Errno::INVAL { EINVAL_HINT } else { "" };
                    let e = io::Error::from(e);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("UFFDIO_CONTINUE of {m} page(s) from page {at} failed: {e}{hint}"),
                    ));
                }
            }
        }
        Ok(total)
    }

    /// Copies page `p` from `src`, retrying a failed copy a few times (a
    /// transient ENOMEM) before giving up; ESRCH (the process whose
    /// memory it is has exited: nothing is left to serve) at once, as
    /// [`ProcessGone`] (see [`is_gone`]).
    pub(in crate::uffd) fn copy_page(&self, p: u64, src: &[u8], wake: bool) -> io::Result<()> {
        let mut last = 0;
        for attempt in 0..3 {
            match self.copy_run(p, 1, src, wake) {
                Ok(_) => return Ok(()),
                Err(libc::ESRCH) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        ProcessGone { page: p },
                    ));
                }
                Err(errno) => last = errno,
            }
            std::thread::sleep(Duration::from_millis(1 << attempt));
        }
        // The hint names the cause of the errno seen, not always ENOMEM's
        // (an EFAULT read "ENOMEM: ... out of memory").
        let hint = match last {
            libc::ENOMEM => " (ENOMEM: the memory cgroup or the system is out of memory)",
            libc::EFAULT => {
                " (EFAULT: the source's bytes could not be read: a `pages()` slice into memory the \
                 kernel may not fault in, such as a mapped file cut short or failing, or a \
                 user-mode-only region's missing pages)"
            }
            libc::EINVAL => EINVAL_HINT,
            _ => "",
        };
        Err(io::Error::new(
            io::Error::from_raw_os_error(last).kind(),
            format!(
                "UFFDIO_COPY of page {p} failed: {}{hint}",
                io::Error::from_raw_os_error(last)
            ),
        ))
    }

    /// One `UFFDIO_COPY`, made with `events` held for reading; ENOENT, as
    /// for an unregistered range, once the region is retired. ESRCH (the
    /// process gone) also sets `gone`, which stops the replay.
    pub(in crate::uffd) fn copy_ioctl(
        &self,
        src: *const u8,
        dst: *mut c_void,
        len: usize,
        wake: bool,
    ) -> Copied {
        let copied = self.copy_ioctl_once(src, dst, len, wake);
        if matches!(copied, Copied::Failed(libc::ESRCH)) {
            self.gone.store(true, Ordering::Relaxed);
        }
        copied
    }

    /// [`copy_ioctl`](Self::copy_ioctl)'s ioctl. Fail point `uffd::copy`
    /// injects `NOTHING` (no bytes and no error), `EAGAIN`, `EEXIST`,
    /// `ENOMEM`, `EFAULT`, `EINVAL` or `ESRCH`.
    fn copy_ioctl_once(&self, src: *const u8, dst: *mut c_void, len: usize, wake: bool) -> Copied {
        if self.is_retired() {
            return Copied::Failed(libc::ENOENT);
        }
        fail_point!("uffd::copy", |arg| match arg.as_deref() {
            Some("EAGAIN") => Copied::Again((-(libc::EAGAIN as isize)) as usize),
            Some("EEXIST") => Copied::Exists,
            Some("EFAULT") => Copied::Failed(libc::EFAULT),
            Some("EINVAL") => Copied::Failed(libc::EINVAL),
            Some("ESRCH") => Copied::Failed(libc::ESRCH),
            // Success with nothing copied: no progress, no error.
            Some("NOTHING") => Copied::Bytes(0),
            _ => Copied::Failed(libc::ENOMEM),
        });
        // SAFETY: the caller gives `src` with `len` readable bytes and
        // `dst..dst + len` inside our registered range.
        match unsafe { self.uffd.copy(src.cast(), dst, len, wake, self.track) } {
            Ok(bytes) => Copied::Bytes(bytes),
            // The kernel's `copy` field, raw: bytes copied before EAGAIN,
            // or a negative errno.
            Err((Errno::AGAIN, copied)) => Copied::Again(copied as usize),
            Err((Errno::EXIST, _)) => Copied::Exists,
            Err((e, _)) => Copied::Failed(e.raw_os_error()),
        }
    }

    /// `UFFDIO_COPY` of `n` pages from `src` to page `first`: a partial
    /// copy or EAGAIN resumes where it stopped (a bounded number of times,
    /// reading pending events first: EAGAIN means one is pending); a page
    /// already present (EEXIST) is skipped, its waiters woken; a page the
    /// application discarded is skipped (it reads as zeros). Returns the
    /// pages copied, or an errno.
    pub(in crate::uffd) fn copy_run(
        &self,
        first: u64,
        n: usize,
        src: &[u8],
        wake: bool,
    ) -> Result<usize, i32> {
        debug_assert!(src.len() >= n * self.page);
        let (mut done, mut copied) = (0, 0);
        let mut again = Backoff::new(self);
        while done < n {
            // The marks are checked and the copy made under `events` (see
            // `events.rs`): no REMOVE can be read in between.
            let copying = self.events.read().unwrap_or_else(|e| e.into_inner());
            let p = first + done as u64;
            if self.is_removed(p) {
                done += 1;
                continue;
            }
            // Up to the next discarded page (none, usually: one load).
            // One ioctl stays in one range of memory.
            let left = self.in_area(p, n - done);
            if left == 0 {
                done += 1;
                continue;
            }
            let m = if self.any_removed.load(Ordering::Acquire) {
                (1..left)
                    .find(|&i| self.is_removed(p + i as u64))
                    .unwrap_or(left)
            } else {
                left
            };
            let dst = self.addr(p);
            let len = m * self.page;
            let r = self.copy_ioctl(src[done * self.page..].as_ptr(), dst, len, wake);
            match r {
                Copied::Bytes(b) | Copied::Again(b) if b <= len => {
                    self.mark_installed(p, b / self.page, true);
                }
                Copied::Exists => self.mark_installed(p, 1, true),
                _ => {}
            }
            drop(copying);
            let bytes = match r {
                Copied::Bytes(b) => b,
                Copied::Again(raw) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    if (1..=len).contains(&raw) {
                        // Stopped part way (at a page present, usually):
                        // the next copy starts there and meets the cause.
                        raw
                    } else {
                        // A negative count (the crate's cast of -EAGAIN)
                        // is no progress; an event is pending: read it
                        // (the wait is below).
                        self.pump_events();
                        0
                    }
                }
                Copied::Exists => {
                    self.stats.already_present.fetch_add(1, Ordering::Relaxed);
                    if wake {
                        let _ = self.uffd.wake(dst, self.page);
                    }
                    done += 1;
                    continue;
                }
                Copied::Failed(errno) => return Err(errno),
            };
            let pages = (bytes / self.page).min(m);
            self.stats
                .pages_copied
                .fetch_add(pages as u64, Ordering::Relaxed);
            done += pages;
            copied += pages;
            if pages == 0 {
                again.wait().map_err(|()| libc::EAGAIN)?;
            } else {
                // The bound is on copies that make no progress.
                again = Backoff::new(self);
            }
        }
        Ok(copied)
    }
}

/// Retries of EAGAIN or no-progress copies: at once a few times, then
/// with naps, giving up at the source timeout or when the region stops.
struct Backoff<'a> {
    shared: &'a Shared,
    tries: u32,
    start: Option<Instant>,
}

impl<'a> Backoff<'a> {
    fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            tries: 0,
            start: None,
        }
    }

    fn wait(&mut self) -> Result<(), ()> {
        self.tries += 1;
        if self.tries <= 16 {
            return Ok(());
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        if start.elapsed() >= self.shared.source_timeout {
            return Err(());
        }
        std::thread::sleep(Duration::from_micros(200));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn continue_opcode_is_the_kernels() {
        assert_eq!(
            super::UFFDIO_CONTINUE as u64,
            linux_raw_sys::ioctl::UFFDIO_CONTINUE as u64
        );
    }
}

/// A copy refused with ESRCH: the process whose memory the region is has
/// exited (its mm is gone), so no page of it is left to serve.
#[derive(Debug)]
pub(in crate::uffd) struct ProcessGone {
    page: u64,
}

impl std::fmt::Display for ProcessGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UFFDIO_COPY of page {} failed with ESRCH: the process whose memory this is has \
             exited, so no page of it is left to serve",
            self.page
        )
    }
}

impl std::error::Error for ProcessGone {}

/// Whether [`copy_page`](Shared::copy_page)'s error is [`ProcessGone`].
pub(in crate::uffd) fn is_gone(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<ProcessGone>())
}
