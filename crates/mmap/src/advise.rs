//! [`Mapping::advise`] and [`Mapping::discard`]: `madvise(2)` over a
//! mapping's pages.

use std::{io, ops::Range};

use crate::Mapping;

/// Advice [`Mapping::advise`] gives the kernel about a range: only advice
/// that leaves the bytes as they are, so it needs no more than `&self`
/// (discarding pages is [`Mapping::discard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Advice {
    /// `MADV_NORMAL`: no special treatment (the default).
    Normal,
    /// `MADV_RANDOM`: expect random access (no readahead).
    Random,
    /// `MADV_SEQUENTIAL`: expect sequential access (aggressive readahead).
    Sequential,
    /// `MADV_WILLNEED`: expect access soon (start reading it in).
    WillNeed,
    /// `MADV_HUGEPAGE`: back the range with transparent huge pages where
    /// it can (THP in `madvise` mode only does so on this advice).
    HugePage,
    /// `MADV_NOHUGEPAGE`: no transparent huge pages here.
    NoHugePage,
    /// `MADV_COLD`: reclaim these pages first (Linux 5.4).
    Cold,
    /// `MADV_PAGEOUT`: reclaim these pages now (Linux 5.4).
    PageOut,
    /// `MADV_POPULATE_READ`: fault every page in for reading now (Linux
    /// 5.14); an error, not a signal, where a page cannot be.
    PopulateRead,
    /// `MADV_POPULATE_WRITE`: fault every page in for writing now (Linux
    /// 5.14), as a first write would (a private file mapping's pages are
    /// copied; the bytes stay the same).
    PopulateWrite,
    /// `MADV_DONTFORK`: a child of `fork(2)` does not inherit the range
    /// (an access there faults in the child): for memory whose contents
    /// another agent supplies, such as a range registered with
    /// userfaultfd, which a child would read as zeros.
    DontFork,
    /// `MADV_DOFORK`: undoes [`DontFork`](Self::DontFork).
    DoFork,
    /// `MADV_DONTDUMP`: leave the range out of core dumps (keys and
    /// other secrets).
    DontDump,
    /// `MADV_DODUMP`: undoes [`DontDump`](Self::DontDump).
    DoDump,
}

impl Advice {
    fn raw(self) -> rustix::mm::Advice {
        use rustix::mm::Advice as A;
        match self {
            Self::Normal => A::Normal,
            Self::Random => A::Random,
            Self::Sequential => A::Sequential,
            Self::WillNeed => A::WillNeed,
            Self::HugePage => A::LinuxHugepage,
            Self::NoHugePage => A::LinuxNoHugepage,
            Self::Cold => A::LinuxCold,
            Self::PageOut => A::LinuxPageOut,
            Self::PopulateRead => A::LinuxPopulateRead,
            Self::PopulateWrite => A::LinuxPopulateWrite,
            Self::DontFork => A::LinuxDontFork,
            Self::DoFork => A::LinuxDoFork,
            Self::DontDump => A::LinuxDontDump,
            Self::DoDump => A::LinuxDoDump,
        }
    }
}

impl Mapping {
    /// Gives `advice` for bytes `range` of the mapping (`madvise(2)`): the
    /// start a multiple of the base page size, the end rounded up to a
    /// page by the kernel (in a hugetlb mapping, give whole huge pages:
    /// kernels refuse or round other ranges differently). A range past
    /// the mapping, or a non-empty one starting off a page boundary, is
    /// refused as `InvalidInput`, naming which (an empty range is nothing
    /// to do); the kernel's refusals (advice it
    /// lacks, such as `HugePage` without transparent huge pages:
    /// `EINVAL`; a populate that cannot fault a page in: `EFAULT`,
    /// `ENOMEM`) are returned as they are.
    pub fn advise(&self, range: Range<usize>, advice: Advice) -> io::Result<()> {
        let (addr, len) = self.pages_of(&range, "advise")?;
        // SAFETY: inside our own mapping; the advice leaves its bytes as
        // they are, so no slice of it changes.
        unsafe { rustix::mm::madvise(addr, len, advice.raw()) }?;
        Ok(())
    }

    /// Frees bytes `range`'s pages (`MADV_DONTNEED`): anonymous private
    /// memory reads as zeros after it, a file mapping reads the file again
    /// (a private one loses its written copies). `&mut self`: no slice
    /// sees its bytes change. Refused as [`advise`](Self::advise) refuses;
    /// the kernel refuses locked pages (`EINVAL`). In a hugetlb mapping,
    /// give whole huge pages: kernels with the 6.2 fix (and its stable
    /// backports) free only the whole huge pages in the range, some
    /// earlier ones rounded the end up, and before 5.18 they refuse.
    pub fn discard(&mut self, range: Range<usize>) -> io::Result<()> {
        let (addr, len) = self.pages_of(&range, "discard")?;
        // SAFETY: inside our own mapping, and nothing borrows it
        // (`&mut self`): the pages' new contents are what a later read
        // sees.
        unsafe { rustix::mm::madvise(addr, len, rustix::mm::Advice::LinuxDontNeed) }?;
        Ok(())
    }

    /// The address and length of `range`, checked to lie in the mapping
    /// and start on a page; `what` names the call in the refusal.
    fn pages_of(
        &self,
        range: &Range<usize>,
        what: &str,
    ) -> io::Result<(*mut std::ffi::c_void, usize)> {
        let page = rustix::param::page_size();
        let refuse = |why: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}({range:?}): {why}"),
            ))
        };
        if range.start > range.end || range.end > self.len {
            return refuse(format!("not a range of the mapping's {} bytes", self.len));
        }
        // Nothing to advise, wherever it starts (the kernel would refuse a
        // start off a page, such as the end of a mapping of 5000 bytes).
        if range.is_empty() {
            return Ok((self.ptr.as_ptr().cast(), 0));
        }
        if range.start % page != 0 {
            return refuse(format!(
                "the start is not a multiple of the page size, {page} bytes"
            ));
        }
        Ok((
            self.ptr.as_ptr().wrapping_add(range.start).cast(),
            range.end - range.start,
        ))
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use crate::{Advice, Mapping, ProtFlags};

    /// Pages of `m` present now (`mincore`).
    fn resident(m: &Mapping) -> usize {
        let mut v = vec![0u8; m.len() / page()];
        // SAFETY: our own mapping, a byte per page.
        let r = unsafe { libc::mincore(m.as_ptr().cast(), m.len(), v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    fn page() -> usize {
        rustix::param::page_size()
    }

    #[test]
    fn advice_leaves_the_bytes_and_populate_faults_pages_in() {
        #[allow(non_snake_case)]
        let PAGE = page();
        let mut m = Mapping::anonymous(16 * PAGE).unwrap();
        m.as_mut_slice().unwrap()[5 * PAGE] = 7;
        for a in [
            Advice::Normal,
            Advice::Random,
            Advice::Sequential,
            Advice::WillNeed,
            Advice::Cold,
            Advice::DontDump,
            Advice::DoDump,
        ] {
            m.advise(0..16 * PAGE, a).unwrap();
        }
        // Refused by a kernel without transparent huge pages (where sysfs
        // shows them, taken).
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        for a in [Advice::HugePage, Advice::NoHugePage] {
            let r = m.advise(0..16 * PAGE, a);
            assert!(r.is_ok() || !thp, "{a:?}: {r:?}");
        }
        assert_eq!(resident(&m), 1);
        m.advise(0..8 * PAGE, Advice::PopulateWrite).unwrap();
        assert_eq!(resident(&m), 8);
        // A length off a page is rounded up: the ninth page.
        m.advise(8 * PAGE..8 * PAGE + 1, Advice::PopulateWrite)
            .unwrap();
        assert_eq!(resident(&m), 9);
        assert_eq!(m.as_slice().unwrap()[5 * PAGE], 7);
        // Reading pages in needs no write access.
        let r = Mapping::new(4 * PAGE, ProtFlags::READ, crate::MapFlags::PRIVATE).unwrap();
        r.advise(0..4 * PAGE, Advice::PopulateRead).unwrap();
        // Writing them does: the kernel's refusal, returned.
        assert!(r.advise(0..4 * PAGE, Advice::PopulateWrite).is_err());
    }

    #[test]
    fn discard_frees_the_range_only() {
        #[allow(non_snake_case)]
        let PAGE = page();
        let mut m = Mapping::anonymous(4 * PAGE).unwrap();
        m.as_mut_slice().unwrap().fill(9);
        m.discard(PAGE..3 * PAGE).unwrap();
        assert_eq!(resident(&m), 2);
        let s = m.as_slice().unwrap();
        assert!(s[..PAGE].iter().all(|&b| b == 9));
        assert!(s[PAGE..3 * PAGE].iter().all(|&b| b == 0));
        assert!(s[3 * PAGE..].iter().all(|&b| b == 9));
    }

    #[test]
    fn a_range_outside_or_off_a_page_is_refused_by_name() {
        #[allow(non_snake_case)]
        let PAGE = page();
        let mut m = Mapping::anonymous(4 * PAGE).unwrap();
        let err = |r: std::io::Result<()>| {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            e.to_string()
        };
        let e = err(m.advise(0..5 * PAGE, Advice::WillNeed));
        assert!(e.contains(&format!("{} bytes", 4 * PAGE)), "{e}");
        #[allow(clippy::reversed_empty_ranges)]
        let e = err(m.discard(2 * PAGE..PAGE));
        assert!(e.starts_with("discard("), "{e}");
        let e = err(m.advise(100..PAGE, Advice::WillNeed));
        assert!(e.contains("page size"), "{e}");
        // Nothing was discarded by the refusals.
        m.as_mut_slice().unwrap().fill(1);
        assert!(m.discard(4 * PAGE..4 * PAGE).is_ok());
        assert!(m.as_slice().unwrap().iter().all(|&b| b == 1));
        // An empty range off a page boundary is nothing to do, not an
        // error: the end of a mapping whose length is not whole pages.
        let mut odd = Mapping::anonymous(3 * PAGE + 100).unwrap();
        let end = odd.len();
        odd.discard(end..end).unwrap();
        odd.advise(100..100, Advice::WillNeed).unwrap();
    }
}
