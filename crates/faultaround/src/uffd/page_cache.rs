//! The page caches a region serves over: a memfd, or a hugetlbfs file,
//! filled from a page source.

use super::*;

impl UffdRegion {
    /// A memfd (shmem) of `len` bytes holding `source`'s pages in its page
    /// cache, for [`over_page_cache`](Self::over_page_cache). A page the
    /// source fails is an error. A page it says is
    /// [`NotReady`](PageRead::NotReady) is waited for as a region's
    /// handler waits (30 s at most, the default source timeout; then an
    /// error): a region over the cache would read a page left out as
    /// zeros. `len` must be a non-zero multiple of the page
    /// size ([`Error::BadLength`]), the source at least `len` bytes long
    /// ([`Error::SourceTooShort`]), and `len` no more than the memory and
    /// swap left, or what this process's memory cgroup has left
    /// ([`Error::ImageTooLarge`], checked before anything is written: the
    /// memfd's pages are memory).
    pub fn page_cache_from(source: &dyn PageSource, len: usize) -> Result<File, Error> {
        let page = page_size();
        if len == 0 || len % page != 0 {
            return Err(Error::BadLength {
                len,
                page_size: page,
            });
        }
        // As `build` checks: a source shorter than the file was read past
        // its end (a `Zeroes(0)` of any length filled 2^33 pages of tmpfs
        // for `len` = 2^45).
        if source.len() < len as u64 {
            return Err(Error::SourceTooShort {
                source_len: source.len(),
                region_len: len,
            });
        }
        // An image of `Zeroes(1 << 50)` filled the memfd until the OOM
        // killer took a process (not necessarily this one).
        if let Some(room) = room::memory_room().filter(|&room| len as u64 > room) {
            return Err(Error::ImageTooLarge { len, room });
        }
        let sys = |op| move |source| Error::Sys { op, source };
        let fd = rustix::fs::memfd_create("mmbatch-page-cache", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| sys("memfd_create")(e.into()))?;
        let file = File::from(fd);
        file.set_len(len as u64).map_err(sys("ftruncate"))?;
        let mut buf = vec![0u8; page];
        let pages = (len / page) as u64;
        let mut p = 0;
        while p < pages {
            // A source in memory is written from its own bytes (a run's
            // slice, else the page's own where part of the run is not
            // ready), else read: the kernel's copy fails a page it cannot
            // read (a mapped file cut short) with EFAULT, where a read of
            // it here would kill the process with SIGBUS.
            let n = (pages - p).min(SLICE_PAGES);
            if let Some(bytes) = exact_pages(source, p, n, page) {
                write_run(&file, bytes, p, page)?;
                p += n;
                continue;
            }
            if let Some(bytes) = exact_pages(source, p, 1, page) {
                write_run(&file, bytes, p, page)?;
                p += 1;
                continue;
            }
            read_whole(source, p, &mut buf)?;
            file.write_all_at(&buf, p * page as u64)
                .map_err(sys("writing the page cache"))?;
            p += 1;
        }
        Ok(file)
    }

    /// [`page_cache_from`](Self::page_cache_from) in huge pages: a
    /// hugetlbfs memfd of `len` bytes (whole huge pages of `size`) holding
    /// `source`'s pages (waited for as there), read a huge page at a time, for
    /// [`over_page_cache`](Self::over_page_cache), which then maps and
    /// continues whole huge pages. The file holds its pages from the pool
    /// until it is closed; a short pool is
    /// [`Error::HugePagesUnavailable`]. A program that may grow the pool
    /// itself does so under the pool's lock, and calls this under it
    /// (`mmbatch_mmap`'s `HugePageSize::lock_pool`, `PoolLock::grow`),
    /// keeping the growth until the file and every region over it are
    /// gone. Pages the pool has but a hugetlb cgroup's fault-time limit
    /// (`hugetlb.2MB.max`) or a memory policy refuses are an
    /// [`Error::Sys`] naming them, not a SIGBUS. A kernel that makes no
    /// hugetlbfs memfd of the size (or a sandbox that refuses one) is an
    /// [`Error::Sys`] whose source is of kind
    /// [`std::io::ErrorKind::Unsupported`], as a hugetlb mapping of a
    /// size the kernel lacks is in every mmbatch crate: a caller falls
    /// back to [`page_cache_from`](Self::page_cache_from) on it.
    pub fn huge_page_cache_from(
        source: &dyn PageSource,
        len: usize,
        size: HugePageSize,
    ) -> Result<File, Error> {
        let page = size.bytes();
        if len == 0 || len % page != 0 {
            return Err(Error::BadLength {
                len,
                page_size: page,
            });
        }
        if source.len() < len as u64 {
            return Err(Error::SourceTooShort {
                source_len: source.len(),
                region_len: len,
            });
        }
        if page > launch::MAX_WINDOW_BYTES {
            return Err(Error::BadSetting {
                setting: "huge_page_cache_from",
                value: format!("{} MiB pages", page >> 20),
                why: "1 GiB pages are not served (a handler's buffer would need the whole \
                      gigabyte): use 2 MiB pages"
                    .into(),
            });
        }
        let sys = |op| move |source| Error::Sys { op, source };
        let flags = rustix::fs::MemfdFlags::CLOEXEC
            | rustix::fs::MemfdFlags::HUGETLB
            | memfd_huge_size(page);
        // First, so that a size the kernel lacks is named as such (its
        // pool's count would read 0). Fail point
        // `uffd::huge_page_cache_memfd` stands in for the kernel's refusal.
        let fd = match injected_errno("uffd::huge_page_cache_memfd") {
            Some(e) => Err(e),
            None => rustix::fs::memfd_create("mmbatch-huge-page-cache", flags).map_err(Into::into),
        }
        .map_err(|e| sys("memfd_create (MFD_HUGETLB)")(huge_memfd_error(size, e)))?;
        // Checked ahead where the pool's count can be read (a container
        // may not see it: the shared mapping below reserves the pages,
        // and its ENOMEM says the same).
        let needed = len / page;
        // Fail point `uffd::huge_page_cache_mmap` plays a container that
        // cannot see the pool and whose mapping the kernel refuses.
        let injected = injected_errno("uffd::huge_page_cache_mmap");
        let counted =
            injected.is_none() && std::path::Path::new(&size.pool_file("free_hugepages")).exists();
        if counted && size.available_pages() < needed {
            return Err(Error::HugePagesUnavailable(HugePagesUnavailable::new(
                size,
                needed,
                size.available_pages(),
            )));
        }
        let file = File::from(fd);
        file.set_len(len as u64).map_err(sys("ftruncate"))?;
        // hugetlbfs has no write(2): the pages are written through a
        // mapping.
        let mapped = match injected {
            Some(e) => Err(e),
            // SAFETY: the memfd is ours alone, just made.
            None => unsafe {
                Mapping::file(
                    std::os::fd::AsFd::as_fd(&file),
                    0,
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::SHARED,
                )
            },
        };
        let mut m = mapped.map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOMEM) {
                Error::HugePagesUnavailable(HugePagesUnavailable::new(
                    size,
                    needed,
                    size.available_pages(),
                ))
            } else {
                Error::Sys {
                    op: "mmap (the hugetlbfs memfd)",
                    source: e,
                }
            }
        })?;
        populate_huge(&m)?;
        let mem = m.as_mut_slice().expect("mapped read-write");
        // Read into a buffer first: a source that writes part of a page
        // and then says it is not ready would leave that part in the
        // cache.
        let mut buf = vec![0u8; page];
        for (p, chunk) in mem.chunks_mut(page).enumerate() {
            let p = p as u64;
            // A source's bytes in memory are faulted in first, as a
            // handler does before its copy: a page that cannot be read (a
            // mapped file cut short) fails here, where the copy below
            // would raise SIGBUS. (A file cut in the moment between the
            // two still raises it: hugetlbfs has no write(2) to copy
            // through the kernel.)
            if let Some(bytes) = exact_pages(source, p, 1, page) {
                // Where the advice works at all (not before Linux 5.14,
                // nor under a filter that refuses it): the copy as before.
                if source::populate_read_works() {
                    match source::fault_in(bytes) {
                        // A signal, or a page to retry: the copy faults
                        // it in as it would have.
                        Ok(()) | Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                        // EINVAL is memory the process cannot read
                        // (PROT_NONE, or a device's), which the copy would
                        // take as SIGSEGV.
                        Err(e) => return Err(unreadable(p, "MADV_POPULATE_READ", e)),
                    }
                }
                chunk.copy_from_slice(bytes);
                continue;
            }
            read_whole(source, p, &mut buf)?;
            chunk.copy_from_slice(&buf);
        }
        Ok(file)
    }
}

/// Faults in every page of `m`, a shared mapping of a hugetlbfs memfd,
/// before the cache is written through it: the mapping reserved its pages,
/// but a hugetlb cgroup's fault-time limit (`hugetlb.<size>.max`) or a
/// memory policy whose nodes lack free pages refuses them only as each is
/// first touched, where a write raises SIGBUS and kills the process;
/// `MADV_POPULATE_WRITE` reports it (EFAULT, or ENOMEM) instead. Where the
/// advice is not to be had (before Linux 5.14, EINVAL; a seccomp filter's
/// EPERM or ENOSYS) the writes fault the pages in, as before. Fail point
/// `uffd::huge_page_cache_populate` stands in for the kernel's refusal.
fn populate_huge(m: &Mapping) -> Result<(), Error> {
    // No retry on EINTR: the advice stops only for a fatal signal.
    let e = match injected_errno("uffd::huge_page_cache_populate") {
        Some(e) => e,
        None => match m.advise(0..m.len(), mmbatch_mmap::Advice::PopulateWrite) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        },
    };
    let op = "MADV_POPULATE_WRITE (the hugetlbfs memfd's pages)";
    match e.raw_os_error() {
        // No such advice (before Linux 5.14), or a sandbox's filter
        // refusing `madvise`: the writes fault the pages in, as before.
        Some(libc::EINVAL | libc::EPERM | libc::ENOSYS) => Ok(()),
        Some(libc::EFAULT | libc::ENOMEM) => Err(Error::Sys {
            op,
            source: std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                // 2 MiB pages: the only size served.
                format!(
                    "the huge pages the mapping reserved could not be had ({e}): a hugetlb \
                     cgroup's fault-time limit (`hugetlb.2MB.max`) or a cpuset or memory policy \
                     whose nodes lack free huge pages refuses them; raise the limit or free \
                     pages on those nodes"
                ),
            ),
        }),
        _ => Err(Error::Sys { op, source: e }),
    }
}

/// Pages [`UffdRegion::page_cache_from`] writes a call from a source's
/// slice (2 MiB of 4 KiB pages, a handler's largest window).
const SLICE_PAGES: u64 = 512;

/// `source`'s slice of `n` pages of `page` bytes from page `p`, ignored
/// unless exactly that long, as the handlers ignore one (a short slice
/// would leave pages of the cache as zeros, a long one write past them).
fn exact_pages(source: &dyn PageSource, p: u64, n: u64, page: usize) -> Option<&[u8]> {
    let want = usize::try_from(n).ok()?.checked_mul(page)?;
    source
        .pages(p, n as usize, page)
        .filter(|s| s.len() == want)
}

/// What a source slice's EFAULT means, for its error.
const FAULT_HINT: &str = " (EFAULT: the source's bytes could not be read: a `pages()` slice into \
                          memory the kernel may not fault in, such as a mapped file cut short or \
                          failing)";

/// What a source slice's EINVAL from `MADV_POPULATE_READ` means.
const INVAL_HINT: &str = " (EINVAL: the source's bytes are memory this process cannot read, \
                          PROT_NONE such as another region's failed page, or a device's \
                          mapping the kernel cannot fault in)";

/// Page `p` failed: `what` of the source's bytes got `e` (the kernel
/// could not read them; EFAULT and EINVAL with their likely causes).
fn unreadable(p: u64, what: &str, e: rustix::io::Errno) -> Error {
    let hint = match e {
        rustix::io::Errno::FAULT => FAULT_HINT,
        rustix::io::Errno::INVAL => INVAL_HINT,
        _ => "",
    };
    Error::PageFailed {
        page: p,
        signal: None,
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} of the source's page {p} failed: {e}{hint}"),
        ),
    }
}

/// Writes `bytes`, the source's pages from page `first`, into the page
/// cache `file` at their place: the kernel copies them, so a page it
/// cannot read fails as [`Error::PageFailed`] naming it.
fn write_run(file: &File, bytes: &[u8], first: u64, page: usize) -> Result<(), Error> {
    let mut done = 0;
    while done < bytes.len() {
        match rustix::io::pwrite(file, &bytes[done..], first * page as u64 + done as u64) {
            Ok(0) => {
                return Err(Error::Sys {
                    op: "writing the page cache",
                    source: io::ErrorKind::WriteZero.into(),
                });
            }
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::FAULT) => {
                let p = first + (done / page) as u64;
                return Err(unreadable(
                    p,
                    "the page cache's write(2)",
                    rustix::io::Errno::FAULT,
                ));
            }
            Err(e) => {
                return Err(Error::Sys {
                    op: "writing the page cache",
                    source: e.into(),
                });
            }
        }
    }
    Ok(())
}

/// Page `p` of `source` into `buf`, a page [`NotReady`](PageRead::NotReady)
/// waited for as a handler waits ([`DEFAULT_SOURCE_TIMEOUT`] at most):
/// a page cache serves every page it is asked for, and a page left out
/// would read as zeros.
fn read_whole(source: &dyn PageSource, p: u64, buf: &mut [u8]) -> Result<(), Error> {
    let wait = || {
        // Fail point `uffd::page_cache_wait`: no wait (a test of the
        // timeout that takes no 30 s).
        fail_point!("uffd::page_cache_wait", |_| Duration::ZERO);
        DEFAULT_SOURCE_TIMEOUT
    };
    let deadline = std::time::Instant::now() + wait();
    let mut nap = Duration::from_micros(50);
    loop {
        let failed = |source| Error::PageFailed {
            page: p,
            signal: None,
            source,
        };
        match source.read_page(p, buf) {
            PageRead::Ready => return Ok(()),
            PageRead::Failed(e) => return Err(failed(e)),
            PageRead::NotReady if std::time::Instant::now() >= deadline => {
                return Err(failed(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the page source did not have page {p} ready within \
                         {DEFAULT_SOURCE_TIMEOUT:?}: build the page cache once the source holds \
                         every page, or serve the source with a region (`UffdRegion::builder`), \
                         whose not_ready_timeout you set"
                    ),
                )));
            }
            PageRead::NotReady => {
                source.wait_ready(p, nap);
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    }
}

/// `MFD_HUGE_2MB` and the like for pages of `page` bytes: the size's
/// log2 in the flags' high bits.
fn memfd_huge_size(page: usize) -> rustix::fs::MemfdFlags {
    let log2 = page.trailing_zeros() as libc::c_uint;
    rustix::fs::MemfdFlags::from_bits_retain(log2 << libc::MFD_HUGE_SHIFT)
}

/// The error of a refused hugetlbfs memfd of `size` pages: the kernel's
/// ENODEV (no pool of that size: `hugetlb_file_setup`), ENOSYS (no
/// hugetlbfs) and EINVAL (no MFD_HUGETLB) name no cause; these do.
fn huge_memfd_error(size: HugePageSize, e: io::Error) -> io::Error {
    let unsupported = |why: &str| io::Error::new(io::ErrorKind::Unsupported, why.to_owned());
    match e.raw_os_error() {
        Some(libc::ENODEV) => size.check_supported().err().unwrap_or_else(|| {
            unsupported(&format!(
                "this kernel makes no memfd of {} kB huge pages (ENODEV: it has no pool of that \
                 size); make the page cache in base pages (page_cache_from)",
                size.bytes() >> 10
            ))
        }),
        Some(libc::ENOSYS) => unsupported(
            "this kernel makes no hugetlbfs memfd (ENOSYS: built without CONFIG_HUGETLBFS, or a \
             seccomp filter refused memfd_create): make the page cache in base pages \
             (page_cache_from) where memfd_create is allowed",
        ),
        // The flags are valid wherever MFD_HUGETLB is known.
        Some(libc::EINVAL) => unsupported(
            "this kernel makes no hugetlbfs memfd (EINVAL: MFD_HUGETLB needs Linux 4.14): make \
             the page cache in base pages (page_cache_from)",
        ),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use rustix::fs::MemfdFlags;

    use super::{HugePageSize, memfd_huge_size};

    #[test]
    fn a_memfds_huge_page_size_is_its_flag() {
        assert_eq!(
            memfd_huge_size(HugePageSize::Size2M.bytes()),
            MemfdFlags::HUGE_2MB
        );
        assert_eq!(
            memfd_huge_size(HugePageSize::Size1G.bytes()),
            MemfdFlags::HUGE_1GB
        );
        assert_eq!(memfd_huge_size(64 << 10), MemfdFlags::HUGE_64KB);
    }
}
