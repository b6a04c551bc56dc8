//! The `restore` experiment's image: a file whose page `i` holds a
//! pattern of `i`, its copies in shmem and hugetlbfs, and the file as a
//! page source that counts what it reads.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::FileExt,
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
};

use mmbatch_faultaround::{HugePageSize, PageRead, PageSource, UffdRegion};

use mmbatch_mmap::{MapFlags, Mapping, ProtFlags};

use super::{MAX_RUN, PAGE, Source};
/// The image's byte at `off`: page `i`'s bytes are a pattern of `i`.
pub(super) fn image_byte(off: u64) -> u8 {
    let page = off / PAGE as u64;
    (page.wrapping_mul(0x9E37_79B9).wrapping_add(off % 4093) >> 3) as u8
}

/// An image file of `pages` pages, unlinked when dropped.
#[derive(Debug)]
pub struct Image {
    path: PathBuf,
    pub(super) file: File,
    pages: u64,
    /// The image in shmem, made on first use.
    shm: std::sync::OnceLock<File>,
    /// The image in a hugetlbfs memfd, made on first use.
    huge_shm: std::sync::OnceLock<File>,
}

impl Image {
    /// Writes the image (its pattern) to a file in the temp directory.
    pub fn create(pages: u64) -> std::io::Result<Self> {
        Self::write_temp(&format!("{pages}.img"), pages, |file| {
            let chunk = 256 * PAGE as u64;
            let mut buf = vec![0u8; chunk as usize];
            let len = pages * PAGE as u64;
            let mut at = 0;
            while at < len {
                let n = chunk.min(len - at);
                for (i, b) in buf[..n as usize].iter_mut().enumerate() {
                    *b = image_byte(at + i as u64);
                }
                file.write_all(&buf[..n as usize])?;
                at += n;
            }
            Ok(())
        })
    }

    /// A file holding `bytes` (not an image: `pages` is its length in
    /// pages, rounded down), unlinked when dropped.
    pub(super) fn from_bytes(name: &str, bytes: &[u8]) -> std::io::Result<Self> {
        Self::write_temp(name, (bytes.len() / PAGE) as u64, |file| {
            file.write_all(bytes)
        })
    }

    /// A file `name` in the temp directory of `pages` pages, filled by
    /// `write` and synced; unlinked when dropped, also when writing fails.
    pub(super) fn write_temp(
        name: &str,
        pages: u64,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> std::io::Result<Self> {
        let path =
            std::env::temp_dir().join(format!("mmbatch-restore-{}-{name}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let mut img = Self {
            path,
            file,
            pages,
            shm: std::sync::OnceLock::new(),
            huge_shm: std::sync::OnceLock::new(),
        };
        write(&mut img.file)?;
        img.file.sync_all()?;
        Ok(img)
    }

    pub(super) fn len(&self) -> usize {
        self.pages as usize * PAGE
    }

    /// Whether every page of the file is in the page cache; false if
    /// that cannot be told.
    pub(super) fn resident(&self) -> bool {
        let len = self.len();
        cached_pages(&self.file, len) == Some(len.div_ceil(rustix::param::page_size()))
    }

    /// Makes sure the whole file is in the page cache: reads it unless
    /// it is already (it was read whole before every warm sample).
    pub(super) fn warm(&self) {
        if !self.resident() {
            self.read_all();
        }
    }

    /// Reads the whole file into a scratch buffer.
    pub(super) fn read_all(&self) {
        let mut buf = vec![0u8; 256 * PAGE];
        let mut at = 0;
        while at < self.len() {
            let n = buf.len().min(self.len() - at);
            self.file
                .read_exact_at(&mut buf[..n], at as u64)
                .expect("reading the image");
            at += n;
        }
    }

    /// The image in shmem (a memfd), made on first use.
    pub(super) fn shm(&self) -> &File {
        self.shm.get_or_init(|| {
            UffdRegion::page_cache_from(&self.file, self.len()).expect("the image in a memfd")
        })
    }

    /// The image in a hugetlbfs memfd of 2 MiB pages, made on first use
    /// (from the pool the run grew).
    pub(super) fn huge_shm(&self) -> &File {
        self.huge_shm.get_or_init(|| {
            UffdRegion::huge_page_cache_from(&self.file, self.len(), HugePageSize::Size2M)
                .expect("the image in a hugetlbfs memfd")
        })
    }

    /// Reads, into a scratch buffer, the working set's pages (`runs`) of
    /// each copy of the image (the file, and its shmem and hugetlbfs
    /// copies where made) and the working-set file `ws` whole, `first` (the
    /// source the next row reads) before the others: untimed, before a
    /// warm sample, so that every judged row finds its source's working
    /// set as recently touched as the others' do, and no nearer the CPU.
    /// Why: a host may make memory left idle for seconds slow to touch
    /// again (this one does: ARCHITECTURE section 4, `restore`), and the
    /// rows take their samples a round apart.
    pub fn read_sources(&self, runs: &[(u64, u64)], ws: Option<&Image>, first: Source) {
        let mut buf = vec![0u8; MAX_RUN as usize * PAGE];
        let mut read = |source: Source| {
            let copy = match source {
                Source::WorkingSet => return ws.into_iter().for_each(Image::read_all),
                Source::File => Some(&self.file),
                Source::Shm => self.shm.get(),
                Source::HugeShm => self.huge_shm.get(),
            };
            if let Some(f) = copy {
                for &(start, n) in runs {
                    let bytes = &mut buf[..n as usize * PAGE];
                    f.read_exact_at(bytes, start * PAGE as u64)
                        .expect("reading the image's working set");
                }
            }
        };
        read(first);
        for s in [
            Source::File,
            Source::Shm,
            Source::HugeShm,
            Source::WorkingSet,
        ] {
            if s != first {
                read(s);
            }
        }
    }

    /// Drops the image from the page cache: `POSIX_FADV_DONTNEED` on the
    /// (clean) file, and, only if some of its pages stay cached after it
    /// (the advice skips pages mapped or being written back), as root,
    /// `vm.drop_caches`, which drops every file's clean pages on the host.
    pub(super) fn drop_cache(&self) {
        let _ = rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::DontNeed);
        if cached_pages(&self.file, self.len()) != Some(0) {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
        }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The image file as a page source that counts the bytes it reads.
pub(super) struct Counted {
    pub(super) file: File,
    pub(super) bytes: &'static AtomicU64,
}

impl PageSource for Counted {
    fn len(&self) -> u64 {
        PageSource::len(&self.file)
    }

    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.file.read_page(index, buf)
    }

    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.file.read_pages(index, count, buf)
    }
}

/// Pages of the first `len` bytes of `file` in the page cache
/// (`mincore` over a read-only mapping, which faults nothing in); `None`
/// where it cannot be asked.
pub(super) fn cached_pages(file: &File, len: usize) -> Option<usize> {
    if len == 0 {
        return Some(0);
    }
    // SAFETY: a private, read-only mapping of our own file that is never
    // read, only asked of mincore, and unmapped before returning.
    let m = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(file),
            0,
            len,
            ProtFlags::READ,
            MapFlags::PRIVATE,
        )
    }
    .ok()?;
    let mut v = vec![0u8; len.div_ceil(rustix::param::page_size())];
    // SAFETY: our own mapping of `len` bytes, a byte of `v` per page.
    let r = unsafe { libc::mincore(m.as_ptr().cast(), len, v.as_mut_ptr()) };
    (r == 0).then(|| v.iter().filter(|&&b| b & 1 != 0).count())
}
