//! Which of a region's pages are present: `mincore` over the process's
//! own memory, bitmaps of installed pages over another's.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Shared;

/// Pages [`Shared::missing`] asks `mincore` about at a time: 64 KiB of
/// buffer, 256 MiB of a region of 4 KiB pages.
const MINCORE_CHUNK: usize = 1 << 16;

/// Bitmaps of at least this many bytes are mapped rather than allocated.
const MAP_BITMAP_FROM: usize = 1 << 16;

/// A bitmap of zeroed words that costs memory only where bits are set: a
/// private anonymous mapping (`MAP_NORESERVE`, zero pages until written)
/// from [`MAP_BITMAP_FROM`] bytes, whatever the global allocator does
/// with a large zeroed allocation (a 16 TiB region's 512 MiB were once
/// written all at once, and the fuzzer's allocator refuses 2 GiB outright);
/// a heap allocation below, and always under Miri, which cannot map.
pub(in crate::uffd) enum ZeroedBitmap {
    Heap(Box<[AtomicU64]>),
    #[cfg(not(miri))]
    Mapped {
        map: mmbatch_mmap::Mapping,
        words: usize,
    },
}

impl std::ops::Deref for ZeroedBitmap {
    type Target = [AtomicU64];
    fn deref(&self) -> &[AtomicU64] {
        match self {
            ZeroedBitmap::Heap(b) => b,
            #[cfg(not(miri))]
            // SAFETY: the mapping is readable and writable, page-aligned (so
            // aligned for `AtomicU64`), at least `words * 8` bytes long,
            // lives as long as `self`, and is only ever accessed through
            // these atomics; all-zero bytes are a valid `AtomicU64`.
            ZeroedBitmap::Mapped { map, words } => unsafe {
                std::slice::from_raw_parts(map.as_ptr().cast::<AtomicU64>(), *words)
            },
        }
    }
}

/// How many pages `mincore`'s bytes `v` say present (the low bit of each),
/// a page being `sub` bytes: a huge page's first base page answers for it.
/// Eight bytes a word where pages are base pages.
pub(super) fn count_present(v: &[u8], sub: usize) -> usize {
    if sub > 1 {
        return v.iter().step_by(sub).filter(|&&b| b & 1 != 0).count();
    }
    let words = v.chunks_exact(8);
    let rest = words.remainder().iter().filter(|&&b| b & 1 != 0).count();
    let low = u64::from_ne_bytes([1; 8]);
    words
        .map(|w| (u64::from_ne_bytes(w.try_into().unwrap()) & low).count_ones() as usize)
        .sum::<usize>()
        + rest
}

/// How many of bits `from..from + n` of `bits` are set, a word at a time.
pub(super) fn count_bits(bits: &[AtomicU64], from: usize, n: usize) -> usize {
    let (first, last) = (from / 64, (from + n).div_ceil(64));
    (first..last)
        .map(|w| {
            let mut word = bits[w].load(Ordering::Relaxed);
            if w == first {
                word &= u64::MAX << (from % 64);
            }
            let end = (from + n) % 64;
            if w + 1 == last && end != 0 {
                word &= (1u64 << end) - 1;
            }
            word.count_ones() as usize
        })
        .sum()
}

/// A [`ZeroedBitmap`] of `words` words, or the mapping's refusal.
pub(in crate::uffd) fn zeroed_bitmap(words: usize) -> std::io::Result<ZeroedBitmap> {
    let Some(bytes) = words.checked_mul(8).filter(|&b| b <= isize::MAX as usize) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a bitmap of {words} words overflows the address space"),
        ));
    };
    #[cfg(not(miri))]
    if bytes >= MAP_BITMAP_FROM {
        use mmbatch_mmap::{MapFlags, Mapping, ProtFlags};
        let map = Mapping::new(
            bytes,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        )?;
        return Ok(ZeroedBitmap::Mapped { map, words });
    }
    let _ = bytes;
    Ok(ZeroedBitmap::Heap(
        (0..words).map(|_| AtomicU64::new(0)).collect(),
    ))
}

impl Shared {
    /// The pages of `from..from + n` not present, in order: `mincore`
    /// asked [`MINCORE_CHUNK`] pages at a time, so that a walk over a
    /// huge sparse region holds a byte per page of one chunk, not of the
    /// region (a 16 TiB region's 4 GiB).
    pub(in crate::uffd) fn missing(&self, from: usize, n: usize) -> impl Iterator<Item = u64> + '_ {
        self.chunks(from as u64..(from + n) as u64)
            .flat_map(move |(start, len)| {
                self.resident(start, len)
                    .into_iter()
                    .enumerate()
                    .filter(|&(_, present)| !present)
                    .map(move |(i, _)| (start + i) as u64)
            })
    }

    /// The pages of `want` in the areas, as runs `(first, n)` of at most
    /// [`MINCORE_CHUNK`] pages, each in one area, in order.
    fn chunks(&self, want: std::ops::Range<u64>) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.areas
            .iter()
            .map(move |a| want.start.max(a.first)..want.end.min(a.first + a.pages))
            .filter(|r| r.start < r.end)
            .flat_map(|r| {
                (r.start..r.end)
                    .step_by(MINCORE_CHUNK)
                    .map(move |s| (s as usize, MINCORE_CHUNK.min((r.end - s) as usize)))
            })
    }

    /// `mincore` over pages `from..from + n` of one area of our own
    /// mapping: a byte per base page (`mincore` answers per base page, a
    /// huge page's too), and how many base pages make a page; `None` if
    /// the call fails.
    fn mincore(&self, from: usize, n: usize) -> Option<(Vec<u8>, usize)> {
        debug_assert!(self.installed.is_none(), "another process's memory");
        let sub = (self.page / rustix::param::page_size()).max(1);
        let mut v = vec![0u8; n * sub];
        // SAFETY: the range is inside one area of our own mapping and `v`
        // has one byte per base page of it.
        let r = unsafe { libc::mincore(self.addr(from as u64), n * self.page, v.as_mut_ptr()) };
        (r == 0).then_some((v, sub))
    }

    /// Which of pages `from..from + n` (in one area) are present: `mincore`
    /// for the process's own memory, the `installed` bits for another's;
    /// for a window, [`missing`](Self::missing) for more.
    pub(in crate::uffd) fn resident(&self, from: usize, n: usize) -> Vec<bool> {
        if let Some(bits) = &self.installed {
            return (from..from + n)
                .map(|p| bits[p / 64].load(Ordering::Relaxed) & (1 << (p % 64)) != 0)
                .collect();
        }
        match self.mincore(from, n) {
            Some((v, sub)) => v.chunks(sub).map(|b| b[0] & 1 != 0).collect(),
            None => vec![false; n],
        }
    }

    /// How many pages of the areas are present, as [`resident`](Self::resident)
    /// answers page by page, counted a word at a time: a 1 TiB region is
    /// 2^28 pages, which a flag each took seconds to walk.
    pub(in crate::uffd) fn resident_pages(&self) -> usize {
        self.chunks(0..u64::MAX)
            .map(|(from, n)| self.resident_count(from, n))
            .sum()
    }

    /// How many of pages `from..from + n` (in one area, at most
    /// [`MINCORE_CHUNK`]) are present: [`resident`](Self::resident)'s
    /// answer, counted.
    fn resident_count(&self, from: usize, n: usize) -> usize {
        if let Some(bits) = &self.installed {
            return count_bits(bits, from, n);
        }
        self.mincore(from, n)
            .map_or(0, |(v, sub)| count_present(&v, sub))
    }
}
