//! The fault handler threads: read userfaultfd events, resolve each fault
//! by copying (or mapping) its window, and fail a page that cannot be
//! filled so its reader gets a signal instead of waiting forever.

use std::{
    collections::HashSet,
    ffi::c_void,
    io,
    os::fd::{AsRawFd, OwnedFd},
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Condvar, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use userfaultfd::{Event, Uffd};

use super::{PageRead, PageSource};
use crate::Window;

/// How faults are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Missing pages: copy from the source (`UFFDIO_COPY`).
    Copy,
    /// Minor faults on a shared page-cache mapping: map the cached pages
    /// (`UFFDIO_CONTINUE`), as the kernel's `map_pages` does.
    Continue,
}

/// The signal a reader of a failed page gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailSignal {
    /// `SIGBUS`, from a poisoned page table entry (`UFFDIO_POISON`,
    /// Linux 6.6+): what a file mapping past its end gives.
    Sigbus,
    /// `SIGSEGV`, from the page made inaccessible (`mprotect(PROT_NONE)`):
    /// the fallback where `UFFDIO_POISON` is missing or refused.
    Sigsegv,
}

/// The first page a region failed to fill.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) page: u64,
    pub(super) cause: io::Error,
    /// `None`: neither poisoning nor protecting worked; the reader stays
    /// blocked until the region shuts down.
    pub(super) signal: Option<FailSignal>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) faults: AtomicU64,
    pub(super) pages_copied: AtomicU64,
    pub(super) pages_skipped: AtomicU64,
    pub(super) already_present: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) pages_failed: AtomicU64,
}

/// What a region's handler threads share with it.
pub(super) struct Shared {
    pub(super) mode: Mode,
    pub(super) uffd: Uffd,
    pub(super) base: usize,
    pub(super) len: usize,
    pub(super) page: usize,
    pub(super) order: u32,
    pub(super) source: Box<dyn PageSource>,
    pub(super) source_timeout: Duration,
    pub(super) stop: AtomicBool,
    pub(super) wake: OwnedFd,
    pub(super) stats: Counters,
    /// Whether `UFFDIO_POISON` is available (cleared when refused).
    pub(super) poison: AtomicBool,
    /// Pages failed: never filled afterwards (not by a neighbour's window,
    /// not by shutdown), so their readers keep getting the signal.
    pub(super) failed: Mutex<HashSet<u64>>,
    pub(super) failure: Mutex<Option<Failure>>,
    /// False once the region is unmapped: guards `mprotect`, the one call a
    /// handler that outlived the region must not make.
    pub(super) mapped: RwLock<bool>,
    /// Handler threads still running, and their exit signal.
    pub(super) alive: Mutex<usize>,
    pub(super) exited: Condvar,
}

/// `_IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)`.
pub(super) const UFFDIO_POISON: libc::c_ulong = 0xC020_AA08;
/// Bit of `UFFDIO_POISON` in the ioctls a registration reports.
pub(super) const UFFDIO_POISON_BIT: u64 = 1 << 0x08;
/// `UFFDIO_POISON_MODE_DONTWAKE`: poison without waking the readers.
const UFFDIO_POISON_MODE_DONTWAKE: u64 = 1 << 0;

#[repr(C)]
struct UffdioPoison {
    start: u64,
    len: u64,
    mode: u64,
    updated: i64,
}

/// What one `UFFDIO_COPY` did.
enum Copied {
    Bytes(usize),
    /// EAGAIN after the given bytes. The value is raw from the userfaultfd
    /// crate, which casts the kernel's negative `copy` field to `usize`.
    Again(usize),
    Exists,
    Failed(i32),
}

/// Why the faulting page's data could not be had.
enum Unready {
    Failed(io::Error),
    Stopped,
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

/// Counts a handler thread out when it exits, even by panicking.
struct Alive<'a>(&'a Shared);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        let mut n = self.0.alive.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        self.0.exited.notify_all();
    }
}

impl Shared {
    /// A handler thread: wait for faults (or the stop signal), resolve them.
    pub(super) fn serve(&self) {
        let _alive = Alive(self);
        let mut buf = vec![0u8; self.page << crate::MAX_ORDER];
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.uffd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfds.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if r <= 0 {
                continue;
            }
            // Several handlers may wake for one event: only one reads it
            // (the others get EAGAIN: Ok(None)).
            while let Ok(Some(event)) = self.uffd.read_event() {
                if let Event::Pagefault { addr, .. } = event {
                    let addr = addr as usize;
                    // Source calls are guarded one by one; this is for a
                    // bug of ours: the reader must not wait forever.
                    if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.resolve(addr, &mut buf)))
                    {
                        let page = ((addr - self.base) / self.page) as u64;
                        let msg = format!("the fault handler panicked: {}", panic_message(&*p));
                        self.fail_page(page, io::Error::other(msg));
                    }
                }
            }
        }
    }

    /// `read_page`, with a panic turned into a failed page.
    fn read(&self, p: u64, buf: &mut [u8]) -> PageRead {
        match catch_unwind(AssertUnwindSafe(|| self.source.read_page(p, buf))) {
            Ok(r) => r,
            Err(payload) => PageRead::Failed(io::Error::other(format!(
                "the page source panicked reading page {p}: {}",
                panic_message(&*payload)
            ))),
        }
    }

    /// `pages`, ignored unless exactly `n` pages long (and if it panics).
    fn source_pages(&self, p: u64, n: usize) -> Option<&[u8]> {
        catch_unwind(AssertUnwindSafe(|| self.source.pages(p, n, self.page)))
            .ok()
            .flatten()
            .filter(|s| Some(s.len()) == n.checked_mul(self.page))
    }

    /// Waits until the source has page `p`, into `buf`: until it fails,
    /// `deadline` passes (a failure too), or — if `heed_stop` — the region
    /// stops.
    fn read_ready(
        &self,
        p: u64,
        buf: &mut [u8],
        deadline: Instant,
        heed_stop: bool,
    ) -> Result<(), Unready> {
        let mut nap = Duration::from_micros(50);
        loop {
            match self.read(p, &mut buf[..self.page]) {
                PageRead::Ready => return Ok(()),
                PageRead::Failed(e) => return Err(Unready::Failed(e)),
                PageRead::NotReady => {}
            }
            if heed_stop && self.stop.load(Ordering::Acquire) {
                return Err(Unready::Stopped);
            }
            if Instant::now() >= deadline {
                return Err(Unready::Failed(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the page source did not have page {p} ready within {:?} (the region's \
                         source timeout)",
                        self.source_timeout
                    ),
                )));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// [`read_ready`](Self::read_ready) for shutdown, which has stopped
    /// the handlers but still waits for the source, up to `deadline`.
    pub(super) fn read_ready_until(
        &self,
        p: u64,
        buf: &mut [u8],
        deadline: Instant,
    ) -> io::Result<()> {
        self.read_ready(p, buf, deadline, false)
            .map_err(|e| match e {
                Unready::Failed(e) => e,
                Unready::Stopped => io::Error::other("stopped"),
            })
    }

    /// Which of pages `from..from + n` are present (`mincore`).
    pub(super) fn resident(&self, from: usize, n: usize) -> Vec<bool> {
        let mut v = vec![0u8; n];
        // SAFETY: the range is inside our mapping and `v` has one byte per
        // page of it.
        let r = unsafe {
            libc::mincore(
                (self.base + from * self.page) as *mut c_void,
                n * self.page,
                v.as_mut_ptr(),
            )
        };
        if r != 0 {
            return vec![false; n];
        }
        v.into_iter().map(|b| b & 1 != 0).collect()
    }

    fn addr(&self, page: u64) -> *mut c_void {
        (self.base + page as usize * self.page) as *mut c_void
    }

    pub(super) fn is_failed(&self, page: u64) -> bool {
        self.stats.pages_failed.load(Ordering::Relaxed) != 0
            && self
                .failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&page)
    }

    fn any_failed(&self, w: &Window) -> bool {
        self.stats.pages_failed.load(Ordering::Relaxed) != 0
            && w.pages.clone().any(|p| self.is_failed(p))
    }

    /// Resolves a missing-page fault at `addr`: the faulting page first
    /// (without waking), then the window's other missing pages that are
    /// ready, in runs; then the faulting thread is woken — as the kernel
    /// maps the whole window before the fault returns.
    fn resolve(&self, addr: usize, buf: &mut [u8]) {
        let page = ((addr - self.base) / self.page) as u64;
        let npages = (self.len / self.page) as u64;
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        let window = Window::around(page, self.order, 0..npages).unwrap_or(Window {
            pages: page..page + 1,
        });
        let (wstart, wlen) = (window.pages.start, window.len() as usize);
        if self.mode == Mode::Continue {
            // The faulting page is cached (a minor fault); its neighbours
            // may not be: those are skipped, never waited for.
            if self.cont(wstart, wlen, false).is_err() {
                if let Err(e) = self.cont(page, 1, false) {
                    self.fail_page(page, e);
                    return;
                }
            }
            let _ = self.uffd.wake(self.addr(wstart), wlen * self.page);
            return;
        }
        let deadline = Instant::now() + self.source_timeout;
        // Fast path: a source holding the whole window in memory gets it
        // copied in one UFFDIO_COPY (pages already present are skipped by
        // the EEXIST/partial handling in `copy_run`), then one wake for
        // the window: two ioctls per fault. Waking last means a resumed
        // thread sees the whole window, and these statistics, in place.
        if let Some(src) = self.source_pages(wstart, wlen) {
            if !self.any_failed(&window) && self.copy_run(wstart, wlen, src, false).is_ok() {
                let _ = self.uffd.wake(self.addr(wstart), wlen * self.page);
                return;
            }
        }
        let copied = match self.source_pages(page, 1) {
            Some(src) => self.copy_page(page, src, false),
            None => match self.read_ready(page, buf, deadline, true) {
                Ok(()) => self.copy_page(page, &buf[..self.page], false),
                Err(Unready::Stopped) => return,
                Err(Unready::Failed(e)) => {
                    self.fail_page(page, e);
                    return;
                }
            },
        };
        if let Err(e) = copied {
            self.fail_page(page, e);
            return;
        }
        if wlen > 1 {
            self.copy_window(&window, page, buf);
        }
        let _ = self.uffd.wake(self.addr(page), self.page);
    }

    fn copy_window(&self, w: &Window, page: u64, buf: &mut [u8]) {
        let present = self.resident(w.pages.start as usize, w.len() as usize);
        let wanted =
            |p: u64| p != page && !present[(p - w.pages.start) as usize] && !self.is_failed(p);
        if self.source_pages(w.pages.start, w.len() as usize).is_some() {
            // In memory and ready: copy each run of missing pages straight
            // from the source.
            let mut p = w.pages.start;
            while p < w.pages.end {
                if !wanted(p) {
                    p += 1;
                    continue;
                }
                let mut end = p + 1;
                while end < w.pages.end && wanted(end) {
                    end += 1;
                }
                let n = (end - p) as usize;
                if let Some(src) = self.source_pages(p, n) {
                    let _ = self.copy_run(p, n, src, true);
                }
                p = end;
            }
            return;
        }
        let mut run_start = None;
        let mut run_len = 0usize;
        for p in w.pages.clone() {
            let ready = wanted(p)
                && matches!(
                    self.read(p, &mut buf[run_len * self.page..(run_len + 1) * self.page]),
                    PageRead::Ready
                );
            if wanted(p) && !ready {
                self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
            }
            if ready {
                run_start.get_or_insert(p);
                run_len += 1;
            } else if let Some(start) = run_start.take() {
                let _ = self.copy_run(start, run_len, &buf[..run_len * self.page], true);
                run_len = 0;
            }
        }
        if let Some(start) = run_start {
            let _ = self.copy_run(start, run_len, &buf[..run_len * self.page], true);
        }
    }

    /// `UFFDIO_CONTINUE` of `n` pages from page `first`: maps the pages
    /// that are in the page cache; one already mapped (EEXIST) or not
    /// cached (EFAULT) is skipped; a partial result resumes after it. Any
    /// other error stops it and is returned.
    pub(super) fn cont(&self, first: u64, n: usize, wake: bool) -> io::Result<()> {
        let mut done = 0;
        let mut again = Backoff::new(self);
        while done < n {
            let mut arg = userfaultfd_sys::uffdio_continue {
                range: userfaultfd_sys::uffdio_range {
                    start: self.addr(first + done as u64) as u64,
                    len: ((n - done) * self.page) as u64,
                },
                mode: if wake {
                    0
                } else {
                    userfaultfd_sys::UFFDIO_CONTINUE_MODE_DONTWAKE
                },
                mapped: 0,
            };
            // SAFETY: UFFDIO_CONTINUE reads and writes `arg`, a valid
            // uffdio_continue, and maps pages inside our registered range.
            let r = unsafe {
                libc::ioctl(
                    self.uffd.as_raw_fd(),
                    userfaultfd_sys::UFFDIO_CONTINUE as libc::c_ulong,
                    &raw mut arg,
                )
            };
            let err = io::Error::last_os_error();
            // `mapped` is bytes, or a negative errno.
            let mapped = usize::try_from(arg.mapped)
                .map_or(0, |b| b / self.page)
                .min(n - done);
            self.stats
                .pages_copied
                .fetch_add(mapped as u64, Ordering::Relaxed);
            done += mapped;
            if r == 0 {
                continue;
            }
            match err.raw_os_error() {
                Some(libc::EAGAIN) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    again.wait().map_err(|()| err)?;
                }
                Some(libc::EEXIST) => {
                    self.stats.already_present.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                Some(libc::EFAULT) => {
                    self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                _ => return Err(err),
            }
        }
        Ok(())
    }

    /// Copies page `p` from `src`, retrying a failed copy a few times (a
    /// transient ENOMEM) before giving up.
    pub(super) fn copy_page(&self, p: u64, src: &[u8], wake: bool) -> io::Result<()> {
        let mut last = 0;
        for attempt in 0..3 {
            match self.copy_run(p, 1, src, wake) {
                Ok(()) => return Ok(()),
                Err(errno) => last = errno,
            }
            std::thread::sleep(Duration::from_millis(1 << attempt));
        }
        Err(io::Error::new(
            io::Error::from_raw_os_error(last).kind(),
            format!(
                "UFFDIO_COPY of page {p} failed: {} (ENOMEM: the memory cgroup or the system is \
                 out of memory)",
                io::Error::from_raw_os_error(last)
            ),
        ))
    }

    /// One `UFFDIO_COPY`; fail point `uffd::copy` injects `EAGAIN`,
    /// `EEXIST`, `ENOMEM` or `EFAULT`.
    fn copy_ioctl(&self, src: *const u8, dst: *mut c_void, len: usize, wake: bool) -> Copied {
        fail::fail_point!("uffd::copy", |arg| match arg.as_deref() {
            Some("EAGAIN") => Copied::Again((-(libc::EAGAIN as isize)) as usize),
            Some("EEXIST") => Copied::Exists,
            Some("EFAULT") => Copied::Failed(libc::EFAULT),
            _ => Copied::Failed(libc::ENOMEM),
        });
        // SAFETY: the caller gives `src` with `len` readable bytes and
        // `dst..dst + len` inside our registered range.
        match unsafe { self.uffd.copy(src.cast(), dst, len, wake) } {
            Ok(bytes) => Copied::Bytes(bytes),
            Err(userfaultfd::Error::PartiallyCopied(raw)) => Copied::Again(raw),
            Err(userfaultfd::Error::CopyFailed(e)) if e as i32 == libc::EEXIST => Copied::Exists,
            Err(userfaultfd::Error::CopyFailed(e)) => Copied::Failed(e as i32),
            Err(_) => Copied::Failed(libc::EIO),
        }
    }

    /// `UFFDIO_COPY` of `n` pages from `src` to page `first`: a partial
    /// copy or EAGAIN resumes where it stopped (a bounded number of times);
    /// a page already present (EEXIST) is skipped, its waiters woken. Any
    /// other error is returned as an errno.
    pub(super) fn copy_run(&self, first: u64, n: usize, src: &[u8], wake: bool) -> Result<(), i32> {
        debug_assert!(src.len() >= n * self.page);
        let mut done = 0;
        let mut again = Backoff::new(self);
        while done < n {
            let dst = self.addr(first + done as u64);
            let len = (n - done) * self.page;
            let bytes = match self.copy_ioctl(src[done * self.page..].as_ptr(), dst, len, wake) {
                Copied::Bytes(b) => b,
                Copied::Again(raw) => {
                    // A negative count (the crate's cast of -EAGAIN) is no
                    // progress.
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    again.wait().map_err(|()| libc::EAGAIN)?;
                    if raw <= len { raw } else { 0 }
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
            let pages = (bytes / self.page).min(n - done);
            self.stats
                .pages_copied
                .fetch_add(pages as u64, Ordering::Relaxed);
            done += pages;
            if pages == 0 {
                again.wait().map_err(|()| libc::EAGAIN)?;
            }
        }
        Ok(())
    }

    /// Gives up on page `page`: makes the page's readers fail instead of
    /// fault again — SIGBUS through `UFFDIO_POISON` where the kernel has
    /// it, else SIGSEGV through `PROT_NONE` — records `cause`, and only
    /// then wakes them, so a reader that got the signal always finds the
    /// failure recorded (waking first let a reader on a kernel without
    /// `UFFDIO_POISON` see `failure()` empty: seen on Linux 6.1 in
    /// `cargo xtask vm`).
    pub(super) fn fail_page(&self, page: u64, cause: io::Error) {
        if self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(page)
        {
            self.stats.pages_failed.fetch_add(1, Ordering::Relaxed);
        }
        let signal = if self.poison_page(page) {
            Some(FailSignal::Sigbus)
        } else if self.protect_page(page) {
            Some(FailSignal::Sigsegv)
        } else {
            None
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
    fn poison_page(&self, page: u64) -> bool {
        if !self.poison.load(Ordering::Relaxed) {
            return false;
        }
        fail::fail_point!("uffd::poison", |_| {
            self.poison.store(false, Ordering::Relaxed);
            false
        });
        let mut arg = UffdioPoison {
            start: self.addr(page) as u64,
            len: self.page as u64,
            mode: UFFDIO_POISON_MODE_DONTWAKE,
            updated: 0,
        };
        // SAFETY: UFFDIO_POISON reads and writes `arg`, a valid
        // uffdio_poison, and acts only on our registered range.
        let r = unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_POISON, &raw mut arg) };
        if r == 0 {
            return true;
        }
        if matches!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL | libc::ENOTTY)
        ) {
            self.poison.store(false, Ordering::Relaxed);
        }
        false
    }

    /// The fallback: `PROT_NONE` on `page` (not waking its readers), whose
    /// retried access then faults with SIGSEGV.
    fn protect_page(&self, page: u64) -> bool {
        let mapped = self.mapped.read().unwrap_or_else(|e| e.into_inner());
        if !*mapped {
            return false;
        }
        // SAFETY: one page of our own mapping, still mapped (checked under
        // the lock drop takes before unmapping).
        let r = unsafe { libc::mprotect(self.addr(page), self.page, libc::PROT_NONE) };
        r == 0
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
