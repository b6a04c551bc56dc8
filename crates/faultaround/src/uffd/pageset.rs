//! [`PageSet`]: a record's pages as bits over their span, for the checks
//! and the run-making a replay does before it installs anything.
//!
//! Both sit on a restore's path (a record read from its file, then its
//! runs planned, before the first `UFFDIO_COPY`), where a hash set and a
//! sorted copy cost a quarter of a restore (docs/restore.md, "Build's
//! share").

use std::collections::HashSet;

/// A set of page numbers: one bit a page over the span from the least to
/// the greatest where that span is dense enough (a word of bits, 64
/// pages, for each page listed: the bits take no more memory than the
/// list), a hash set otherwise (a few pages scattered over a vast image).
pub(super) enum PageSet {
    Bits { base: u64, words: Vec<u64> },
    Sparse(HashSet<u64>),
}

impl PageSet {
    /// An empty set sized for `pages` (which it does not hold yet).
    pub(super) fn for_pages(pages: &[u64]) -> Self {
        let (Some(&min), Some(&max)) = (pages.iter().min(), pages.iter().max()) else {
            return Self::Sparse(HashSet::new());
        };
        let words = (max - min) / 64 + 1;
        if words > pages.len().max(1024) as u64 {
            return Self::Sparse(HashSet::with_capacity(pages.len()));
        }
        Self::Bits {
            base: min,
            words: vec![0; words as usize],
        }
    }

    /// `pages` as a set.
    pub(super) fn of(pages: &[u64]) -> Self {
        let mut set = Self::for_pages(pages);
        for &p in pages {
            set.insert(p);
        }
        set
    }

    /// Adds `p`; false if it was there. Within the span of the pages the
    /// set was sized for.
    pub(super) fn insert(&mut self, p: u64) -> bool {
        match self {
            Self::Bits { base, words } => {
                let (w, bit) = Self::at(*base, p);
                let was = words[w] & bit != 0;
                words[w] |= bit;
                !was
            }
            Self::Sparse(set) => set.insert(p),
        }
    }

    /// Takes `p` out (nothing if it is not there).
    pub(super) fn remove(&mut self, p: u64) {
        match self {
            Self::Bits { base, words } => {
                if let Some(i) = p.checked_sub(*base) {
                    if let Some(w) = words.get_mut((i / 64) as usize) {
                        *w &= !(1 << (i % 64));
                    }
                }
            }
            Self::Sparse(set) => {
                set.remove(&p);
            }
        }
    }

    /// Whether `p` is in the set (false for any page outside its span).
    pub(super) fn contains(&self, p: u64) -> bool {
        match self {
            Self::Bits { base, words } => p.checked_sub(*base).is_some_and(|i| {
                words
                    .get((i / 64) as usize)
                    .is_some_and(|w| w & (1 << (i % 64)) != 0)
            }),
            Self::Sparse(set) => set.contains(&p),
        }
    }

    /// The word and bit of page `p` (in the span) from `base`.
    fn at(base: u64, p: u64) -> (usize, u64) {
        let i = p - base;
        ((i / 64) as usize, 1 << (i % 64))
    }
}

#[cfg(test)]
mod tests {
    use super::PageSet;

    /// Dense pages get bits, scattered ones a hash set, and both answer
    /// alike: insert says whether a page is new, remove takes it out,
    /// pages outside the span are not there.
    #[test]
    fn dense_and_sparse_sets_agree() {
        let dense: Vec<u64> = (1000..1100).chain([1000, 1050]).collect();
        let sparse: Vec<u64> = vec![5, 1 << 40, 77 << 30, 5];
        for pages in [&dense, &sparse] {
            let mut set = PageSet::for_pages(pages);
            assert_eq!(
                matches!(set, PageSet::Bits { .. }),
                std::ptr::eq(pages, &dense)
            );
            let fresh: Vec<bool> = pages.iter().map(|&p| set.insert(p)).collect();
            let mut first = std::collections::HashSet::new();
            let want: Vec<bool> = pages.iter().map(|&p| first.insert(p)).collect();
            assert_eq!(fresh, want);
            for &p in pages {
                assert!(set.contains(p));
            }
            for p in [0, 4, 6, 999, 1100, 1 << 41, u64::MAX] {
                assert!(!set.contains(p), "page {p}");
            }
            set.remove(pages[1]);
            set.remove(u64::MAX);
            set.remove(0);
            assert!(!set.contains(pages[1]));
            assert!(set.contains(pages[0]));
        }
        // Bits while they take no more than a word a page (1024 words at
        // least); past that, a hash set.
        let bits = |pages: &[u64]| matches!(PageSet::for_pages(pages), PageSet::Bits { .. });
        assert!(bits(&[0, 1024 * 64 - 1]));
        assert!(!bits(&[0, 1024 * 64]));
        let many: Vec<u64> = (0..2000).map(|i| i * 64).collect();
        assert!(bits(&[&many[..], &[2000 * 64]].concat()));
        assert!(!bits(&[&many[..], &[2001 * 64]].concat()));
        // One page, and none.
        assert!(PageSet::of(&[u64::MAX]).contains(u64::MAX));
        assert!(!PageSet::of(&[]).contains(0));
    }
}
