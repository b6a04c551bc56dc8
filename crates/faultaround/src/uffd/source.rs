//! [`PageSource`]: where a [`UffdRegion`](super::UffdRegion)'s pages come
//! from, and the sources built in.

use std::{fs::File, io, os::unix::fs::FileExt, time::Duration};

/// What a source made of a page request.
#[derive(Debug)]
#[non_exhaustive]
pub enum PageRead {
    /// The buffer holds the page.
    Ready,
    /// Not yet (still downloading, say). A neighbour that is not ready is
    /// skipped; the faulting page itself is waited for, up to the region's
    /// [source timeout](super::UffdRegionBuilder::source_timeout).
    NotReady,
    /// The page can never be produced (the file was truncated, the
    /// download failed). The access that faulted on it is stopped by a
    /// signal, as a file mapping past its end is (SIGBUS from Linux 6.6,
    /// SIGSEGV before: [`UffdRegion::fail_signal`](super::UffdRegion::fail_signal)),
    /// and the region records the error
    /// ([`UffdRegion::failure`](super::UffdRegion::failure)).
    Failed(io::Error),
}

/// Where a region's pages come from.
///
/// The handler threads call it; a call that panics fails that page (as
/// [`PageRead::Failed`]) and the handler goes on serving the others.
///
/// # Contract
/// - A page is the region's page: the system's page size (4 KiB on most
///   hosts), or 2 MiB for a region of huge pages (a
///   [`UffdHandler`](crate::UffdHandler): its `page_size`). `read_page`'s
///   `buf` is one such page, `read_pages`' `count` of them, and `index`
///   counts in them.
/// - Calls come at once from several threads (handlers, replay and
///   prefetch threads, a handler's replacement), and a call that outlasts
///   the source timeout may still be running, or return, after the region
///   is dropped: keep it `Sync`, and keep what it uses alive on its own
///   (an `Arc`), not borrowed from the region's owner.
/// - [`PageRead::NotReady`] is polled: the handler calls again, after
///   [`wait_ready`](Self::wait_ready) (by default naps of 50 us doubling
///   to 5 ms, at most a quarter of the source timeout; a source that can
///   tell when a page arrives wakes it then),
///   until the page is ready or the
///   [not-ready timeout](crate::UffdRegionBuilder::not_ready_timeout)
///   (by default the source timeout); the handler thread serves nothing
///   else meanwhile. Make such calls cheap and idempotent, and build with
///   two handlers or more where pages download.
/// - A slice from [`pages`](Self::pages) is faulted in by the handler
///   (`MADV_POPULATE_READ`, Linux 5.14; before, the copy faults it in,
///   under the lock the next event's reader waits for) before the kernel
///   copies from it, and the wait counts against the source timeout as a
///   slow call does: a mapped snapshot on storage that stalls fails the
///   page at the timeout instead of holding up the handlers. A page of it
///   that cannot be read (a file cut short) fails the region's page, its
///   reader gets the signal; the handler lives on (and so does shutdown's
///   fill, which copies from the slice too). It must not be the region's
///   own memory; another region not yet filled must serve the kernel's
///   faults (`UffdMode::AllFaults`), or its pages fail.
pub trait PageSource: Send + Sync + 'static {
    /// Bytes available.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` (one page) with page `index`, or says why it cannot.
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead;

    /// Checked once when a region is built: an error refuses the build,
    /// for a source that can never be read (by default, none; [`File`]
    /// refuses a descriptor open for writing only, whose every read would
    /// fail and send the faulting thread SIGBUS).
    fn check(&self) -> io::Result<()> {
        Ok(())
    }

    /// Fills `buf` (`count` pages) with pages `index..index + count`: one
    /// call for a whole run, where a replay installs many pages at once
    /// (by default, [`read_page`](Self::read_page) for each; [`File`]
    /// reads the run in one `pread`). The first page not ready or failed
    /// decides the answer.
    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        let page = buf.len() / count.max(1);
        for (i, chunk) in buf.chunks_exact_mut(page).enumerate() {
            match self.read_page(index + i as u64, chunk) {
                PageRead::Ready => {}
                other => return other,
            }
        }
        PageRead::Ready
    }

    /// Waits at most `timeout` for page `index` to become ready: the
    /// handler calls it after [`read_page`](Self::read_page) said
    /// [`NotReady`](PageRead::NotReady), before asking again. By default
    /// it sleeps the whole `timeout` (the handler's nap, 50 us doubling to
    /// 5 ms, and at most a quarter of the source timeout). A source that knows when a page arrives (a download) returns
    /// as soon as it does, so the fault is served then, not at the nap's
    /// end; returning early for any reason is fine, the handler asks
    /// again. Timed as the other calls are: one that outlasts the source
    /// timeout fails the page.
    ///
    /// ```
    /// use std::sync::{Condvar, Mutex};
    /// use std::time::Duration;
    /// use mmbatch_faultaround::{PageRead, PageSource};
    ///
    /// /// A snapshot still downloading: a page is ready once it arrived.
    /// struct Download {
    ///     pages: Mutex<Vec<Option<Box<[u8]>>>>,
    ///     arrived: Condvar,
    /// }
    ///
    /// impl Download {
    ///     /// Called by the downloader as each page lands.
    ///     fn arrive(&self, index: usize, page: Box<[u8]>) {
    ///         self.pages.lock().unwrap()[index] = Some(page);
    ///         self.arrived.notify_all();
    ///     }
    /// }
    ///
    /// impl PageSource for Download {
    ///     fn len(&self) -> u64 {
    ///         (self.pages.lock().unwrap().len() * 4096) as u64
    ///     }
    ///     fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
    ///         match &self.pages.lock().unwrap()[index as usize] {
    ///             Some(page) => {
    ///                 buf.copy_from_slice(page);
    ///                 PageRead::Ready
    ///             }
    ///             None => PageRead::NotReady,
    ///         }
    ///     }
    ///     fn wait_ready(&self, index: u64, timeout: Duration) {
    ///         let pages = self.pages.lock().unwrap();
    ///         let _ = self
    ///             .arrived
    ///             .wait_timeout_while(pages, timeout, |p| p[index as usize].is_none());
    ///     }
    /// }
    /// # let d = Download { pages: Mutex::new(vec![None; 2]), arrived: Condvar::new() };
    /// # d.arrive(1, vec![7; 4096].into());
    /// # d.wait_ready(1, Duration::from_secs(60));
    /// # assert!(matches!(d.read_page(1, &mut [0; 4096]), PageRead::Ready));
    /// ```
    fn wait_ready(&self, index: u64, timeout: Duration) {
        let _ = index;
        std::thread::sleep(timeout);
    }

    /// The bytes of `count` pages from page `index`, if the source holds
    /// them in memory and they are all ready: then `UFFDIO_COPY` copies
    /// straight from them, with no bounce buffer. A slice that is not
    /// exactly `count * page_size` bytes long is ignored (the pages are
    /// read with [`read_page`](Self::read_page) instead): the kernel would
    /// otherwise copy whatever memory follows it.
    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        let _ = (index, count, page_size);
        None
    }
}

/// Faults the pages `bytes` lies in into memory, mapped, before the kernel
/// or a copy reads them (`madvise(MADV_POPULATE_READ)`, Linux 5.14). A
/// page that cannot be read is an error here, where a read of it would be
/// a signal that kills the process: EFAULT for a mapped file cut short or
/// failing, or another region's failed page; EINVAL for memory made
/// inaccessible (`PROT_NONE`). Before 5.14 the advice is refused (EINVAL,
/// [`populate_read_works`] tells which), and nothing is done.
pub(crate) fn fault_in(bytes: &[u8]) -> rustix::io::Result<()> {
    let page = rustix::param::page_size();
    let head = bytes.as_ptr().addr() % page;
    let start = bytes.as_ptr().wrapping_sub(head);
    let len = (head + bytes.len()).next_multiple_of(page);
    // SAFETY: the whole pages `bytes` lies in, mapped (it is a live
    // slice); populating reads them in and changes no contents.
    unsafe {
        rustix::mm::madvise(
            start.cast_mut().cast(),
            len,
            rustix::mm::Advice::LinuxPopulateRead,
        )
    }
}

/// Whether `MADV_POPULATE_READ` works here, asked once of a page known to
/// be readable: not before Linux 5.14 (EINVAL), nor under a seccomp
/// filter that refuses it (EPERM, ENOSYS). Where it works, an error from
/// [`fault_in`] is the memory's.
pub(crate) fn populate_read_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| fault_in(&ZEROES[..1]).is_ok())
}

/// Zeroes enough for the largest window (512 pages of 4 KiB).
static ZEROES: [u8; 2 << 20] = [0; 2 << 20];

/// A source of zero pages, of this many bytes.
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
        ZEROES.get(..count.checked_mul(page_size)?)
    }
}

/// The byte range of `count` pages of `page_size` from page `index`, if
/// it does not overflow.
fn span(index: u64, count: usize, page_size: usize) -> Option<std::ops::Range<usize>> {
    let at = usize::try_from(index).ok()?.checked_mul(page_size)?;
    Some(at..at.checked_add(count.checked_mul(page_size)?)?)
}

/// Page `index` of an image held in memory, into `buf`.
fn read_bytes(image: &[u8], index: u64, buf: &mut [u8]) -> PageRead {
    match span(index, 1, buf.len()).and_then(|r| image.get(r)) {
        Some(page) => {
            buf.copy_from_slice(page);
            PageRead::Ready
        }
        None => PageRead::Failed(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("page {index} is past the end of the source"),
        )),
    }
}

/// An image in memory is its own bytes: copied into a region straight
/// from them, with no bounce buffer.
impl PageSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        read_bytes(self, index, buf)
    }

    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        self.get(span(index, count, page_size)?)
    }
}

/// Any image held in memory as bytes — `Arc<[u8]>`, `Box<[u8]>`,
/// `&'static [u8]`, `bytes::Bytes`, a `memmap2::Mmap` of a snapshot file
/// — as a source, copied into a region straight from its bytes as
/// `Vec<u8>` is (no bounce buffer; for a mapped file, one copy from the
/// page cache instead of a `pread` and a copy).
///
/// A newtype, not an impl for each type: a `PageSource` impl on
/// `Arc<[u8]>` would make `.len()` on one resolve to this trait's `u64`
/// wherever the trait is in scope.
///
/// ```
/// use std::sync::Arc;
/// use mmbatch_faultaround::{Error, InMemory, UffdRegion};
///
/// let image: Arc<[u8]> = vec![7u8; 16 * 4096].into();
/// // Shared with the rest of the program; the region reads it in place.
/// let region = match UffdRegion::new(image.len(), 2, InMemory(image.clone()), 1) {
///     Ok(r) => r,
///     // No userfaultfd here (a container's seccomp, an old kernel).
///     Err(e @ (Error::NoPermission { .. } | Error::Unsupported { .. })) => {
///         return println!("skipped: {e}")
///     }
///     Err(e) => panic!("{e}"),
/// };
/// assert_eq!(region.as_slice()[9 * 4096], 7);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InMemory<T>(pub T);

impl<T: AsRef<[u8]> + Send + Sync + 'static> PageSource for InMemory<T> {
    fn len(&self) -> u64 {
        self.0.as_ref().len() as u64
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        read_bytes(self.0.as_ref(), index, buf)
    }

    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        self.0.as_ref().get(span(index, count, page_size)?)
    }
}

impl PageSource for File {
    /// The file's length; a block device's, which its metadata gives as 0,
    /// from seeking to its end (reads are positioned, so the offset moved
    /// matters to none of them).
    fn len(&self) -> u64 {
        use std::os::unix::fs::FileTypeExt;
        match self.metadata() {
            Ok(m) if m.file_type().is_block_device() => {
                rustix::fs::seek(self, rustix::fs::SeekFrom::End(0)).unwrap_or(0)
            }
            Ok(m) => m.len(),
            Err(_) => 0,
        }
    }

    fn check(&self) -> io::Result<()> {
        let mode = rustix::fs::fcntl_getfl(self)? & rustix::fs::OFlags::ACCMODE;
        if mode == rustix::fs::OFlags::WRONLY {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the file is open for writing only: open it for reading (File::open, or \
                 OpenOptions with read(true))",
            ));
        }
        Ok(())
    }

    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        let page = (buf.len() / count.max(1)) as u64;
        match index
            .checked_mul(page)
            .map(|at| self.read_exact_at(buf, at))
        {
            Some(Ok(())) => PageRead::Ready,
            // Page by page, for the error that names the page.
            _ => (0..count)
                .map(|i| {
                    let chunk = &mut buf[i * page as usize..(i + 1) * page as usize];
                    self.read_page(index + i as u64, chunk)
                })
                .find(|r| !matches!(r, PageRead::Ready))
                .unwrap_or(PageRead::Ready),
        }
    }

    /// A page past the end (the file was truncated) or an I/O error fails
    /// the page; `EAGAIN` (a non-blocking file) is "not ready".
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        let Some(at) = index.checked_mul(buf.len() as u64) else {
            return PageRead::Failed(io::Error::other(format!("page {index}'s offset overflows")));
        };
        match self.read_exact_at(buf, at) {
            Ok(()) => PageRead::Ready,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => PageRead::NotReady,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => PageRead::Failed(io::Error::new(
                e.kind(),
                format!(
                    "page {index} is past the end of the file ({} bytes now: truncated?)",
                    PageSource::len(self)
                ),
            )),
            Err(e) => PageRead::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PageSource;

    /// An image in memory lends its pages whole, so that `UFFDIO_COPY`
    /// copies straight from it: exactly the bytes of the pages asked
    /// for, and nothing for a range past its end.
    #[test]
    fn an_image_in_memory_lends_the_pages_asked_for() {
        let image: Vec<u8> = (0..4 * 4096).map(|i| (i / 4096) as u8).collect();
        let two = image.pages(1, 2, 4096).unwrap();
        assert_eq!(two.len(), 2 * 4096);
        assert!(two[..4096].iter().all(|&b| b == 1));
        assert!(two[4096..].iter().all(|&b| b == 2));
        assert!(image.pages(3, 2, 4096).is_none(), "past the end");
        assert!(image.pages(u64::MAX, 1, 4096).is_none(), "overflow");
    }

    /// `Zeroes` lends zero pages in memory, so that a window of them is one
    /// `UFFDIO_COPY`: exactly the bytes asked for, up to a whole window
    /// of 512 pages of 4 KiB; more is read page by page.
    #[test]
    fn zeroes_lend_a_windows_worth_of_zero_pages() {
        let z = super::Zeroes(1 << 30);
        let three = z.pages(7, 3, 4096).unwrap();
        assert_eq!(three.len(), 3 * 4096);
        assert!(three.iter().all(|&b| b == 0));
        assert_eq!(z.pages(0, 512, 4096).map(<[u8]>::len), Some(512 * 4096));
        assert!(z.pages(0, 513, 4096).is_none(), "more than a window");
        assert!(z.pages(0, usize::MAX, 4096).is_none(), "overflow");
    }

    /// A source is empty when it has no bytes (the trait's default,
    /// which the built-in sources keep).
    #[test]
    fn a_source_of_no_bytes_is_empty() {
        assert!(PageSource::is_empty(&Vec::<u8>::new()));
        assert!(!PageSource::is_empty(&vec![0u8; 4096]));
        assert!(super::Zeroes(0).is_empty());
        assert!(!super::Zeroes(1).is_empty());
    }
}
