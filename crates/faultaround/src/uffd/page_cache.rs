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
        for p in 0..(len / page) as u64 {
            read_whole(source, p, &mut buf)?;
            file.write_all_at(&buf, p * page as u64)
                .map_err(sys("writing the page cache"))?;
        }
        Ok(file)
    }

    /// [`page_cache_from`](Self::page_cache_from) in huge pages: a
    /// hugetlbfs memfd of `len` bytes (whole huge pages of `size`) holding
    /// `source`'s pages (waited for as there), read a huge page at a time, for
    /// [`over_page_cache`](Self::over_page_cache), which then maps and
    /// continues whole huge pages. The file holds its pages from the pool
    /// until it is closed; a short pool is
    /// [`Error::HugePagesUnavailable`].
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
        let sys = |op| move |source| Error::Sys { op, source };
        let flags = rustix::fs::MemfdFlags::CLOEXEC
            | rustix::fs::MemfdFlags::HUGETLB
            | match size {
                HugePageSize::Size1G => rustix::fs::MemfdFlags::HUGE_1GB,
                _ => rustix::fs::MemfdFlags::HUGE_2MB,
            };
        let fd = rustix::fs::memfd_create("mmbatch-huge-page-cache", flags)
            .map_err(|e| sys("memfd_create (MFD_HUGETLB)")(e.into()))?;
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
        let mem = m.as_mut_slice().expect("mapped read-write");
        // Read into a buffer first: a source that writes part of a page
        // and then says it is not ready would leave that part in the
        // cache.
        let mut buf = vec![0u8; page];
        for (p, chunk) in mem.chunks_mut(page).enumerate() {
            read_whole(source, p as u64, &mut buf)?;
            chunk.copy_from_slice(&buf);
        }
        Ok(file)
    }
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
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    }
}
