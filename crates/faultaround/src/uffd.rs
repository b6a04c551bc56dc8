//! [`UffdRegion`]: fault-around on the host, through userfaultfd.

use std::{
    ffi::c_void,
    fs::File,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::fs::FileExt,
    },
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
};

use userfaultfd::{Event, IoctlFlags, RegisterMode, Uffd, UffdBuilder};

use crate::{Error, Window};

/// Whether a source could produce a page now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageRead {
    /// The buffer holds the page.
    Ready,
    /// Not yet (still downloading, say). A neighbour that is not ready is
    /// skipped; the faulting page itself is waited for.
    NotReady,
}

/// Where a region's pages come from.
pub trait PageSource: Send + Sync + 'static {
    /// Bytes available.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` (one page) with page `index`, or reports it not ready.
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead;

    /// The bytes of `count` pages from page `index`, if the source holds
    /// them in memory and they are all ready: then `UFFDIO_COPY` copies
    /// straight from them, with no bounce buffer.
    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        let _ = (index, count, page_size);
        None
    }
}

/// Zeroes enough for the largest window (512 pages of 4 KiB).
static ZEROES: [u8; 2 << 20] = [0; 2 << 20];

/// A source of zero pages.
#[derive(Clone, Copy, Debug)]
pub struct Zeroes(pub u64);

impl PageSource for Zeroes {
    fn len(&self) -> u64 {
        self.0
    }

    fn read_page(&self, _: u64, buf: &mut [u8]) -> PageRead {
        buf.fill(0);
        PageRead::Ready
    }

    fn pages(&self, _: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        ZEROES.get(..count * page_size)
    }
}

impl PageSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        let at = index as usize * buf.len();
        buf.copy_from_slice(&self[at..at + buf.len()]);
        PageRead::Ready
    }

    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        let at = index as usize * page_size;
        self.get(at..at + count * page_size)
    }
}

impl PageSource for File {
    fn len(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }

    /// A page that cannot be read now (I/O error) is reported not ready.
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        match self.read_exact_at(buf, index * buf.len() as u64) {
            Ok(()) => PageRead::Ready,
            Err(_) => PageRead::NotReady,
        }
    }
}

/// What a region's handlers did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UffdStats {
    /// Missing-page faults handled.
    pub faults: u64,
    /// Pages copied in (`UFFDIO_COPY`), or mapped from the page cache
    /// (`UFFDIO_CONTINUE`) for a [page-cache region](UffdRegion::over_page_cache).
    pub pages_copied: u64,
    /// Window pages skipped because the source was not ready.
    pub pages_skipped: u64,
    /// Copies that found the page already present (EEXIST).
    pub already_present: u64,
    /// Copies retried after EAGAIN or a partial copy.
    pub retries: u64,
}

#[derive(Default)]
struct Counters {
    faults: AtomicU64,
    pages_copied: AtomicU64,
    pages_skipped: AtomicU64,
    already_present: AtomicU64,
    retries: AtomicU64,
}

/// How faults are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Missing pages: copy from the source (`UFFDIO_COPY`).
    Copy,
    /// Minor faults on a shared page-cache mapping: map the cached pages
    /// (`UFFDIO_CONTINUE`), as the kernel's `map_pages` does.
    Continue,
}

struct Shared {
    mode: Mode,
    uffd: Uffd,
    base: usize,
    len: usize,
    page: usize,
    order: u32,
    source: Box<dyn PageSource>,
    stop: AtomicBool,
    wake: OwnedFd,
    stats: Counters,
}

// SAFETY: Uffd is a file descriptor; its ioctls and reads are thread-safe
// system calls. The rest is atomics and immutable data.
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

/// An anonymous region registered with userfaultfd and filled on demand
/// from a [`PageSource`]: a missing-page fault is resolved by copying the
/// ready pages of its whole fault-around window (the faulting page first),
/// by one or more handler threads.
///
/// ```no_run
/// use mmbatch_faultaround::UffdRegion;
///
/// # fn main() -> Result<(), mmbatch_faultaround::Error> {
/// let image: Vec<u8> = vec![7; 64 << 20]; // e.g. a snapshot to restore
/// let region = UffdRegion::new(64 << 20, 4, image, 1)?; // 16 pages per fault
/// assert_eq!(region.as_slice()[12345], 7); // faults in pages 0..16
/// assert_eq!(region.stats().faults, 1);
/// # Ok(()) }
/// ```
pub struct UffdRegion {
    shared: Arc<Shared>,
    handlers: Mutex<Vec<JoinHandle<()>>>,
    shut_down: AtomicBool,
}

impl std::fmt::Debug for UffdRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UffdRegion")
            .field("len", &self.shared.len)
            .field("order", &self.shared.order)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

fn uffd_error(e: userfaultfd::Error) -> Error {
    use userfaultfd::Error as U;
    let errno = match &e {
        U::SystemError(errno) => Some(*errno as i32),
        _ => None,
    };
    match errno {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::NoPermission {
            source: std::io::Error::from_raw_os_error(errno.unwrap_or(libc::EPERM)),
        },
        Some(libc::ENOSYS) | Some(libc::EINVAL) => Error::Unsupported {
            what: format!("userfaultfd: {e}"),
        },
        _ => Error::Sys {
            op: "userfaultfd",
            source: std::io::Error::other(e.to_string()),
        },
    }
}

impl UffdRegion {
    /// Maps `len` bytes (a multiple of the page size), registers them for
    /// missing-page faults, and starts `handlers` threads (at least 1) that
    /// resolve each fault by copying its `2^order`-page window from
    /// `source`.
    pub fn new(
        len: usize,
        order: u32,
        source: impl PageSource,
        handlers: usize,
    ) -> Result<Self, Error> {
        if source.len() < len as u64 {
            return Err(Error::SourceTooShort {
                source_len: source.len(),
                region_len: len,
            });
        }
        Self::build(len, order, Box::new(source), handlers, None)
    }

    /// A shared mapping of `file` (a shmem file, such as a memfd, whose
    /// pages are in the page cache) registered for minor faults: a fault on
    /// a cached page not yet mapped here maps the cached pages of its
    /// window in place (`UFFDIO_CONTINUE`), copying nothing — the kernel's
    /// `map_pages`, from userspace. A window page not in the cache is
    /// skipped. Needs Linux 5.13.
    pub fn over_page_cache(
        file: &File,
        len: usize,
        order: u32,
        handlers: usize,
    ) -> Result<Self, Error> {
        let source_len = PageSource::len(file);
        if source_len < len as u64 {
            return Err(Error::SourceTooShort {
                source_len,
                region_len: len,
            });
        }
        Self::build(
            len,
            order,
            Box::new(Zeroes(len as u64)),
            handlers,
            Some(file.as_raw_fd()),
        )
    }

    /// A memfd (shmem) of `len` bytes holding `source`'s ready pages in its
    /// page cache, for [`over_page_cache`](Self::over_page_cache).
    pub fn page_cache_from(source: &dyn PageSource, len: usize) -> Result<File, Error> {
        let sys = |op| move |source| Error::Sys { op, source };
        // SAFETY: a NUL-terminated name; memfd_create has no other inputs.
        let fd = unsafe { libc::memfd_create(c"mmbatch-page-cache".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys("memfd_create")(std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(sys("ftruncate"))?;
        let page = page_size();
        let mut buf = vec![0u8; page];
        for p in 0..(len / page) as u64 {
            if source.read_page(p, &mut buf) == PageRead::Ready {
                file.write_all_at(&buf, p * page as u64)
                    .map_err(sys("writing the page cache"))?;
            }
        }
        Ok(file)
    }

    fn build(
        len: usize,
        order: u32,
        source: Box<dyn PageSource>,
        handlers: usize,
        shared_fd: Option<i32>,
    ) -> Result<Self, Error> {
        let page = page_size();
        if len == 0 || len % page != 0 {
            return Err(Error::BadLength {
                len,
                page_size: page,
            });
        }
        Window::around(0, order, 0..1)?;
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(true)
            .create()
            .map_err(uffd_error)?;
        let (flags, fd) = match shared_fd {
            Some(fd) => (libc::MAP_SHARED, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping chosen by the kernel, of our own file if
        // any.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::Sys {
                op: "mmap",
                source: std::io::Error::last_os_error(),
            });
        }
        let unmap = || {
            // SAFETY: the mapping made above, not yet shared.
            unsafe { libc::munmap(base, len) };
        };
        let (mode, register, needed, what) = match shared_fd {
            // Registering for minor faults succeeds only where the kernel
            // has UFFDIO_CONTINUE (5.13).
            Some(_) => (
                Mode::Continue,
                RegisterMode::MINOR,
                IoctlFlags::WAKE,
                "minor faults and UFFDIO_CONTINUE on shmem (Linux 5.13)",
            ),
            None => (
                Mode::Copy,
                RegisterMode::MISSING,
                IoctlFlags::COPY,
                "UFFDIO_COPY on anonymous memory",
            ),
        };
        let ioctls = match uffd.register_with_mode(base, len, register) {
            Ok(i) => i,
            Err(e) => {
                unmap();
                return Err(uffd_error(e));
            }
        };
        if !ioctls.contains(needed) {
            unmap();
            return Err(Error::Unsupported { what: what.into() });
        }
        // SAFETY: eventfd has no memory preconditions.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            unmap();
            return Err(Error::Sys {
                op: "eventfd",
                source: std::io::Error::last_os_error(),
            });
        }
        let shared = Arc::new(Shared {
            mode,
            uffd,
            base: base as usize,
            len,
            page,
            order,
            source,
            stop: AtomicBool::new(false),
            // SAFETY: efd is a fresh descriptor we own.
            wake: unsafe { OwnedFd::from_raw_fd(efd) },
            stats: Counters::default(),
        });
        let region = UffdRegion {
            shared: shared.clone(),
            handlers: Mutex::new(Vec::new()),
            shut_down: AtomicBool::new(false),
        };
        for i in 0..handlers.max(1) {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("uffd-handler-{i}"))
                .spawn(move || s.serve())
                .map_err(|source| Error::Sys {
                    op: "spawning a handler thread",
                    source,
                })?;
            region
                .handlers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(h);
        }
        Ok(region)
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.shared.base as *const u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.shared.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memory; reading a missing page faults it (and its window) in.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as self; missing pages are
        // filled by the handlers (or, after shutdown, are all present).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.shared.len) }
    }

    /// What the handlers did so far.
    pub fn stats(&self) -> UffdStats {
        let c = &self.shared.stats;
        UffdStats {
            faults: c.faults.load(Ordering::Relaxed),
            pages_copied: c.pages_copied.load(Ordering::Relaxed),
            pages_skipped: c.pages_skipped.load(Ordering::Relaxed),
            already_present: c.already_present.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
        }
    }

    /// Pages present in memory now (`mincore`).
    pub fn resident_pages(&self) -> usize {
        self.shared
            .resident(0, self.shared.len / self.shared.page)
            .iter()
            .filter(|r| **r)
            .count()
    }

    /// Stops the handler threads without failing any faulting thread:
    /// after they exit, every page still missing is copied in (waiting for
    /// the source if it must) and the range unregistered, so a fault in
    /// flight is woken with its data and later accesses do not fault.
    pub fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stop_handlers();
        let s = &self.shared;
        let pages = s.len / s.page;
        if s.mode == Mode::Continue {
            // Map whatever is cached; a page still faulting after this
            // takes the ordinary shmem fault once the range is unregistered.
            s.cont(0, pages, true);
        } else {
            let resident = s.resident(0, pages);
            let mut buf = vec![0u8; s.page];
            for (p, present) in resident.into_iter().enumerate() {
                if !present {
                    s.read_ready(p as u64, &mut buf);
                    s.copy(p as u64, 1, &buf);
                }
            }
        }
        let _ = s.uffd.unregister(s.base as *mut c_void, s.len);
    }

    fn stop_handlers(&self) {
        self.shared.stop.store(true, Ordering::Release);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        unsafe { libc::write(self.shared.wake.as_raw_fd(), (&raw const one).cast(), 8) };
        for h in self
            .handlers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = h.join();
        }
    }
}

impl Drop for UffdRegion {
    fn drop(&mut self) {
        // No access can be in flight (we are borrowed mutably), so the
        // handlers can simply stop.
        self.stop_handlers();
        let s = &self.shared;
        let _ = s.uffd.unregister(s.base as *mut c_void, s.len);
        // SAFETY: the mapping is ours and nothing refers to it any more.
        unsafe { libc::munmap(s.base as *mut c_void, s.len) };
    }
}

impl Shared {
    /// A handler thread: wait for faults (or the stop signal), resolve them.
    fn serve(&self) {
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
                    self.resolve(addr as usize, &mut buf);
                }
            }
        }
    }

    /// Waits until the source has page `p`, into `buf`.
    fn read_ready(&self, p: u64, buf: &mut [u8]) {
        while self.source.read_page(p, &mut buf[..self.page]) == PageRead::NotReady {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// Which of pages `from..from + n` are present (`mincore`).
    fn resident(&self, from: usize, n: usize) -> Vec<bool> {
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

    /// Resolves a missing-page fault at `addr`: the faulting page first
    /// (without waking), then the window's other missing pages that are
    /// ready, in runs; then the faulting thread is woken — as the kernel
    /// maps the whole window before the fault returns.
    fn resolve(&self, addr: usize, buf: &mut [u8]) {
        let page = ((addr - self.base) / self.page) as u64;
        let npages = (self.len / self.page) as u64;
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        let faulting = (self.base + page as usize * self.page) as *mut c_void;
        if self.mode == Mode::Continue {
            let w = Window::around(page, self.order, 0..npages).unwrap_or(Window {
                pages: page..page + 1,
            });
            // The faulting page is cached (a minor fault); its neighbours
            // may not be: those are skipped, never waited for.
            self.cont(w.pages.start, w.len() as usize, false);
            let start = (self.base + w.pages.start as usize * self.page) as *mut c_void;
            let _ = self.uffd.wake(start, w.len() as usize * self.page);
            return;
        }
        // Fast path: a source holding the whole window in memory gets it
        // copied in one UFFDIO_COPY (pages already present are skipped by
        // the EEXIST/partial handling in `copy_mode`), then one wake for
        // the window: two ioctls per fault. Waking last means a resumed
        // thread sees the whole window, and these statistics, in place.
        if let Ok(w) = Window::around(page, self.order, 0..npages) {
            if let Some(src) = self
                .source
                .pages(w.pages.start, w.len() as usize, self.page)
            {
                self.copy_mode(w.pages.start, w.len() as usize, src, false);
                let start = (self.base + w.pages.start as usize * self.page) as *mut c_void;
                let _ = self.uffd.wake(start, w.len() as usize * self.page);
                return;
            }
        }
        match self.source.pages(page, 1, self.page) {
            Some(src) => self.copy_mode(page, 1, src, false),
            None => {
                self.read_ready(page, buf);
                self.copy_mode(page, 1, &buf[..self.page], false);
            }
        }
        if let Ok(w) = Window::around(page, self.order, 0..npages) {
            if w.len() > 1 {
                self.copy_window(&w, page, buf);
            }
        }
        let _ = self.uffd.wake(faulting, self.page);
    }

    fn copy_window(&self, w: &Window, page: u64, buf: &mut [u8]) {
        let present = self.resident(w.pages.start as usize, w.len() as usize);
        if self
            .source
            .pages(w.pages.start, w.len() as usize, self.page)
            .is_some()
        {
            // In memory and ready: copy each run of missing pages straight
            // from the source.
            let mut p = w.pages.start;
            while p < w.pages.end {
                let i = (p - w.pages.start) as usize;
                if p == page || present[i] {
                    p += 1;
                    continue;
                }
                let mut end = p + 1;
                while end < w.pages.end && end != page && !present[(end - w.pages.start) as usize] {
                    end += 1;
                }
                let n = (end - p) as usize;
                if let Some(src) = self.source.pages(p, n, self.page) {
                    self.copy(p, n, src);
                }
                p = end;
            }
            return;
        }
        let mut run_start = None;
        let mut run_len = 0usize;
        for (i, p) in w.pages.clone().enumerate() {
            let wanted = p != page && !present[i];
            let ready = wanted
                && self
                    .source
                    .read_page(p, &mut buf[run_len * self.page..(run_len + 1) * self.page])
                    == PageRead::Ready;
            if wanted && !ready {
                self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
            }
            if ready {
                run_start.get_or_insert(p);
                run_len += 1;
            } else if let Some(start) = run_start.take() {
                self.copy(start, run_len, &buf[..run_len * self.page]);
                run_len = 0;
            }
        }
        if let Some(start) = run_start {
            self.copy(start, run_len, &buf[..run_len * self.page]);
        }
    }

    /// `UFFDIO_CONTINUE` of `n` pages from page `first`: maps the pages
    /// that are in the page cache; one already mapped (EEXIST) or not
    /// cached (EFAULT) is skipped; a partial result resumes after it.
    fn cont(&self, first: u64, n: usize, wake: bool) {
        let mut done = 0;
        while done < n {
            let mut arg = userfaultfd_sys::uffdio_continue {
                range: userfaultfd_sys::uffdio_range {
                    start: (self.base + (first as usize + done) * self.page) as u64,
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
            let mapped = if arg.mapped > 0 {
                arg.mapped as usize / self.page
            } else {
                0
            };
            self.stats
                .pages_copied
                .fetch_add(mapped as u64, Ordering::Relaxed);
            done += mapped;
            if r == 0 {
                continue;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                }
                Some(libc::EEXIST) => {
                    self.stats.already_present.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                Some(libc::EFAULT) => {
                    self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                _ => return,
            }
        }
    }

    /// `UFFDIO_COPY` of `n` pages from `src` to page `first`, waking
    /// waiters: a partial copy or EAGAIN resumes where it stopped; a page
    /// already present (EEXIST) is skipped, its waiters woken.
    fn copy(&self, first: u64, n: usize, src: &[u8]) {
        self.copy_mode(first, n, src, true);
    }

    fn copy_mode(&self, first: u64, n: usize, src: &[u8], wake: bool) {
        let mut done = 0;
        while done < n {
            let dst = self.base + (first as usize + done) * self.page;
            let len = (n - done) * self.page;
            let from = src[done * self.page..].as_ptr();
            // SAFETY: `from` has `len` readable bytes; `dst..dst + len` is
            // inside our registered range.
            let r = unsafe { self.uffd.copy(from.cast(), dst as *mut c_void, len, wake) };
            match r {
                Ok(bytes) => {
                    self.stats
                        .pages_copied
                        .fetch_add((bytes / self.page) as u64, Ordering::Relaxed);
                    done += bytes / self.page;
                    if bytes == 0 {
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(userfaultfd::Error::PartiallyCopied(bytes)) => {
                    self.stats
                        .pages_copied
                        .fetch_add((bytes / self.page) as u64, Ordering::Relaxed);
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    done += bytes / self.page;
                }
                Err(userfaultfd::Error::CopyFailed(e)) if e as i32 == libc::EEXIST => {
                    self.stats.already_present.fetch_add(1, Ordering::Relaxed);
                    let _ = self.uffd.wake(dst as *mut c_void, self.page);
                    done += 1;
                }
                // The range is gone (unregistered during shutdown): stop.
                Err(_) => return,
            }
        }
    }
}
