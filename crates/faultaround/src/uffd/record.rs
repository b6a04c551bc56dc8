//! [`Record`]: the pages a region's faults touched, in first-touch order,
//! with the identity of the image they came from — what REAP (Ustiugov et
//! al., ASPLOS 2021) records on a function's first run and installs
//! eagerly on the next restore.
//!
//! The file is small: a header (magic and version, page size, image
//! length, the image's id), the page list as varint deltas (a run of
//! consecutive pages costs a byte a page), and a CRC-32 of all of it.

use std::{
    fs::File,
    io::{Read, Write},
    os::unix::fs::FileExt,
};

use super::{PageRead, PageSource, pageset::PageSet};
use crate::Error;

/// The file's first bytes; the last is the format version.
const MAGIC: [u8; 8] = *b"MMBREC\0\x01";
/// The longest image id.
pub const MAX_ID_LEN: usize = 255;
/// The working-set file's first bytes; the last is the format version
/// (2: the runs' CRCs after the pages, so that a writer streams them).
const PAGES_MAGIC: [u8; 8] = *b"MMBWSP\0\x02";
/// The working-set file's header: magic, the record's identity, page
/// size, run count.
const PAGES_HEAD: usize = 24;
/// The most pages a replay installs with one `UFFDIO_COPY` (256 KiB of
/// 4 KiB pages): large enough that the ioctl's cost is spread thin, small
/// enough that a handler reading an event waits at most one such copy.
pub const REPLAY_RUN: usize = 64;

/// The working set of one run over one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub(super) page_size: u32,
    pub(super) image_len: u64,
    pub(super) image_id: String,
    pub(super) pages: Vec<u64>,
}

impl Record {
    /// A record of `pages` (indices, in the order they are to be
    /// installed) of an image of `image_len` bytes named `image_id`.
    /// Duplicates after the first are dropped. An id over
    /// [`MAX_ID_LEN`] bytes, a page size that is not a power of two from
    /// 4096 to 1 GiB, or a page past the image is [`Error::BadSetting`].
    pub fn new(
        page_size: usize,
        image_len: u64,
        image_id: &str,
        pages: impl IntoIterator<Item = u64>,
    ) -> Result<Self, Error> {
        Self::checked(page_size, image_len, image_id, pages).map_err(|(setting, value, why)| {
            Error::BadSetting {
                setting,
                value,
                why,
            }
        })
    }

    /// [`new`](Self::new)'s checks: what is wrong, as the argument's name,
    /// its value and what it must be ([`from_bytes`](Self::from_bytes)
    /// calls a record that fails them corrupt).
    fn checked(
        page_size: usize,
        image_len: u64,
        image_id: &str,
        pages: impl IntoIterator<Item = u64>,
    ) -> Result<Self, (&'static str, String, String)> {
        if image_id.len() > MAX_ID_LEN {
            return Err((
                "image_id",
                format!("{} bytes", image_id.len()),
                format!("an image id is at most {MAX_ID_LEN} bytes (a hash or a name)"),
            ));
        }
        // Base pages to 1 GiB huge pages: 0 made `write_pages` panic in
        // `chunks_exact`, and larger ones allocate a run's bounce buffer.
        if !page_size.is_power_of_two() || !(4096..=1 << 30).contains(&page_size) {
            return Err((
                "page_size",
                page_size.to_string(),
                "a page size is a power of two from 4096 to 1 GiB".into(),
            ));
        }
        let page_size = page_size as u32;
        let npages = image_len / u64::from(page_size);
        let pages = pages.into_iter();
        let mut list = Vec::with_capacity(pages.size_hint().0);
        for p in pages {
            // Checked as it comes: an endless iterator stops at the first
            // page past the image.
            if p >= npages {
                return Err((
                    "pages",
                    format!("page {p}"),
                    format!("past the image's {npages} pages"),
                ));
            }
            list.push(p);
        }
        let mut seen = PageSet::for_pages(&list);
        list.retain(|&p| seen.insert(p));
        Ok(Record {
            page_size,
            image_len,
            image_id: image_id.to_owned(),
            pages: list,
        })
    }

    /// The recorded pages, first touch first.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// The image's length in bytes.
    pub fn image_len(&self) -> u64 {
        self.image_len
    }

    /// The image's id, as given to
    /// [`image_id`](super::UffdRegionBuilder::image_id).
    pub fn image_id(&self) -> &str {
        &self.image_id
    }

    /// The page size the record counts in.
    pub fn page_size(&self) -> usize {
        self.page_size as usize
    }

    /// The record as bytes: a header (magic and version, page size, image
    /// length, the image's id), the page list as varint deltas (a run of
    /// consecutive pages costs a byte a page), and a CRC-32 of all of it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.image_id.len() + self.pages.len() * 2);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.page_size.to_le_bytes());
        out.extend_from_slice(&self.image_len.to_le_bytes());
        out.push(self.image_id.len() as u8);
        out.extend_from_slice(self.image_id.as_bytes());
        put_varint(&mut out, self.pages.len() as u64);
        let mut prev = 0u64;
        for &p in &self.pages {
            // Zigzag deltas: the next page of a run is +1, one byte.
            let d = p.wrapping_sub(prev) as i64;
            put_varint(&mut out, ((d << 1) ^ (d >> 63)) as u64);
            prev = p;
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a record made by [`to_bytes`](Self::to_bytes); anything else
    /// is [`Error::RecordCorrupt`], saying what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let corrupt = |reason: &str| Error::RecordCorrupt {
            reason: reason.to_owned(),
        };
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len() - 1] != MAGIC[..MAGIC.len() - 1] {
            return Err(corrupt("not a working-set record: no MMBREC magic"));
        }
        if bytes[MAGIC.len() - 1] != MAGIC[MAGIC.len() - 1] {
            return Err(Error::RecordCorrupt {
                reason: format!(
                    "format version {} (this crate reads version {})",
                    bytes[MAGIC.len() - 1],
                    MAGIC[MAGIC.len() - 1]
                ),
            });
        }
        let Some((body, crc)) = bytes
            .split_last_chunk::<4>()
            .filter(|(body, _)| body.len() >= MAGIC.len())
        else {
            // (A body shorter than the magic, whose CRC happened to match,
            // would have been sliced past its end below.)
            return Err(corrupt("cut short"));
        };
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err(corrupt(
                "its checksum does not match its contents (changed or cut short)",
            ));
        }
        let mut r = Reader(&body[MAGIC.len()..]);
        let short = || corrupt("cut short");
        let page_size = u32::from_le_bytes(r.take()?.ok_or_else(short)?);
        let image_len = u64::from_le_bytes(r.take()?.ok_or_else(short)?);
        let [id_len] = r.take()?.ok_or_else(short)?;
        let id = r.bytes(usize::from(id_len)).ok_or_else(short)?;
        let id = std::str::from_utf8(id).map_err(|_| corrupt("an image id that is not UTF-8"))?;
        let n = r.varint().ok_or_else(short)?;
        let npages = image_len / u64::from(page_size.max(1));
        if n > npages {
            return Err(corrupt("more pages than the image has"));
        }
        // Each page takes at least a byte: a count larger than the bytes
        // left is a lie, not a reason to allocate (found by fuzzing).
        if n > r.0.len() as u64 {
            return Err(corrupt("cut short"));
        }
        let mut pages = Vec::with_capacity(n as usize);
        let mut prev = 0u64;
        for _ in 0..n {
            let z = r.varint().ok_or_else(short)?;
            let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
            prev = prev.wrapping_add(d as u64);
            pages.push(prev);
        }
        if !r.0.is_empty() {
            return Err(corrupt("bytes after the page list"));
        }
        Record::checked(page_size as usize, image_len, id, pages).map_err(|(what, value, why)| {
            Error::RecordCorrupt {
                reason: format!("its {what} is out of range ({value}: {why})"),
            }
        })
    }

    /// Writes the record (a few bytes per page).
    pub fn save(&self, mut w: impl Write) -> std::io::Result<()> {
        w.write_all(&self.to_bytes())
    }

    /// Reads a record written by [`save`](Self::save).
    pub fn load(mut r: impl Read) -> Result<Self, Error> {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).map_err(|source| Error::Sys {
            op: "reading the working-set record",
            source,
        })?;
        Self::from_bytes(&bytes)
    }

    /// Refuses a record of another image than one of `image_len` bytes in
    /// pages of `page_size` named `image_id`.
    pub(super) fn check(
        &self,
        page_size: usize,
        image_len: u64,
        image_id: &str,
    ) -> Result<(), Error> {
        let mismatch = |what, record: String, region: String| {
            Err(Error::RecordMismatch {
                what,
                record,
                region,
            })
        };
        if self.page_size as usize != page_size {
            return mismatch(
                "page size",
                self.page_size.to_string(),
                page_size.to_string(),
            );
        }
        if self.image_len != image_len {
            return mismatch(
                "image length",
                self.image_len.to_string(),
                image_len.to_string(),
            );
        }
        if self.image_id != image_id {
            return mismatch(
                "image id",
                format!("{:?}", self.image_id),
                format!("{image_id:?}"),
            );
        }
        Ok(())
    }

    /// The pages as runs of consecutive recorded pages, at most `max`
    /// long, in the order of each run's first touch: a page not yet in a
    /// run starts one and takes in the recorded pages next to it. (Two
    /// threads touching two runs interleave their first touches; grouping
    /// by neighbours, not by record order, keeps each run whole.)
    pub fn runs(&self, max: usize) -> Vec<(u64, usize)> {
        let max = max.max(1);
        // The pages not yet in a run: bits, not a hash set or a sorted copy
        // (this is on every replay's path: ARCHITECTURE 4, `restore`).
        let mut free = PageSet::of(&self.pages);
        let mut runs = Vec::new();
        for &p in &self.pages {
            if !free.contains(p) {
                continue;
            }
            // Back up to `max / 2` free neighbours below, then forward to
            // `max` pages in all (bounded counts: no loop variable to
            // stall).
            let below = (1..=max as u64 / 2)
                .take_while(|&k| p.checked_sub(k).is_some_and(|q| free.contains(q)))
                .count();
            let start = p - below as u64;
            let above = (1..(max - below) as u64)
                .take_while(|&k| p.checked_add(k).is_some_and(|q| free.contains(q)))
                .count();
            let n = below + 1 + above;
            for k in 0..n as u64 {
                free.remove(start + k);
            }
            runs.push((start, n));
        }
        runs
    }
}

impl Record {
    /// The record's CRC-32 (of its bytes before their own CRC: a message
    /// followed by its CRC always hashes to the same residue), which
    /// ties a working-set file to it.
    fn identity(&self) -> u32 {
        let bytes = self.to_bytes();
        crc32fast::hash(&bytes[..bytes.len() - 4])
    }

    /// Writes the working set's bytes — REAP's working-set file: the
    /// recorded pages read from `source` once, laid out run after run in
    /// replay order, so that a replay reads them in one sequential pass
    /// ([`UffdRegionBuilder::replay_pages`](super::UffdRegionBuilder::replay_pages))
    /// instead of seeking through the image. A header ties it to this
    /// record; each run has a CRC-32, checked before it is installed.
    /// Streams: besides the record's own page list (and its runs), it
    /// holds one run of pages (at most [`REPLAY_RUN`]) and 4 bytes a run,
    /// whatever the working set's size; `w` is best buffered. A page the
    /// source fails, or says is not ready, fails the call at once
    /// ([`Error::PageFailed`]): it waits for nothing, as a fault would,
    /// so write the file from a source that holds the whole image.
    pub fn write_pages(&self, source: &dyn PageSource, mut w: impl Write) -> Result<(), Error> {
        let runs = self.runs(REPLAY_RUN);
        let page = self.page_size as usize;
        // As long as the longest run: a bounce buffer of REPLAY_RUN pages
        // of the record's page size was 64 GiB for a one-page record of
        // 1 GiB pages, and a 40-byte record file aborted the process.
        let longest = runs.iter().map(|&(_, n)| n).max().unwrap_or(0);
        let mut data = vec![0u8; longest * page];
        let sys = |source| Error::Sys {
            op: "writing the working-set file",
            source,
        };
        let mut head = Vec::with_capacity(PAGES_HEAD);
        head.extend_from_slice(&PAGES_MAGIC);
        head.extend_from_slice(&self.identity().to_le_bytes());
        head.extend_from_slice(&self.page_size.to_le_bytes());
        head.extend_from_slice(&(runs.len() as u64).to_le_bytes());
        w.write_all(&head).map_err(sys)?;
        let mut crcs = Vec::with_capacity(4 * runs.len());
        for &(start, n) in &runs {
            let buf = &mut data[..n * page];
            match source.read_pages(start, n, buf) {
                PageRead::Ready => {}
                PageRead::Failed(e) => {
                    return Err(Error::PageFailed {
                        page: start,
                        signal: None,
                        source: e,
                    });
                }
                _ => {
                    return Err(Error::PageFailed {
                        page: start,
                        signal: None,
                        source: std::io::Error::other("the page source was not ready"),
                    });
                }
            }
            crcs.extend_from_slice(&crc32fast::hash(buf).to_le_bytes());
            w.write_all(buf).map_err(sys)?;
        }
        w.write_all(&crcs).map_err(sys)?;
        w.flush().map_err(sys)
    }
}

/// A working-set file opened for a record's replay: where each run's
/// bytes are, and their CRC.
#[derive(Debug)]
pub(super) struct WorkingSet {
    pub(super) file: std::sync::Arc<File>,
    /// Per run (in `Record::runs(REPLAY_RUN)` order): file offset, CRC.
    pub(super) runs: Vec<(u64, u32)>,
}

impl WorkingSet {
    /// Checks `file` against `record`: its header (what it is, the record
    /// it was written for, the page size, the runs) and its length.
    pub(super) fn open(file: std::sync::Arc<File>, record: &Record) -> Result<Self, Error> {
        let unfit = |reason: String| Error::WorkingSetFile { reason };
        let read = |source| Error::Sys {
            op: "reading the working-set file",
            source,
        };
        let runs = record.runs(REPLAY_RUN);
        let mut head = [0u8; PAGES_HEAD];
        super::PageSource::check(&*file).map_err(|source| Error::SourceUnreadable {
            what: "working-set file",
            source,
        })?;
        let len = file.metadata().map_err(read)?.len();
        if len < PAGES_HEAD as u64 {
            return Err(unfit(format!(
                "{len} bytes: not a working-set file, or one cut short"
            )));
        }
        file.read_exact_at(&mut head, 0).map_err(read)?;
        if head[..7] != PAGES_MAGIC[..7] {
            return Err(unfit("not a working-set file: no MMBWSP magic".into()));
        }
        if head[7] != PAGES_MAGIC[7] {
            return Err(unfit(format!(
                "working-set file version {} (this crate reads version {})",
                head[7], PAGES_MAGIC[7]
            )));
        }
        let word = |bytes: &[u8], at: usize| {
            u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
        };
        let (written_for, replayed) = (word(&head, 8), record.identity());
        if written_for != replayed {
            return Err(unfit(format!(
                "it was written for a record of CRC-32 {written_for:08x}; the record replayed \
                 is {replayed:08x}"
            )));
        }
        let nruns = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
        if word(&head, 12) != record.page_size || nruns != runs.len() as u64 {
            return Err(unfit(
                "its page size or run count is not its record's".into(),
            ));
        }
        let page = u64::from(record.page_size);
        let body = record.pages.len() as u64 * page;
        let want = PAGES_HEAD as u64 + body + 4 * runs.len() as u64;
        if len != want {
            return Err(unfit(format!(
                "it has {len} bytes; its record needs {want}"
            )));
        }
        // The runs' CRCs, after their pages.
        let mut crcs = vec![0u8; 4 * runs.len()];
        file.read_exact_at(&mut crcs, PAGES_HEAD as u64 + body)
            .map_err(read)?;
        let mut at = PAGES_HEAD as u64;
        let table = runs
            .iter()
            .enumerate()
            .map(|(i, &(_, n))| {
                let entry = (at, word(&crcs, 4 * i));
                at += n as u64 * page;
                entry
            })
            .collect();
        Ok(Self { file, runs: table })
    }
}

/// LEB128: 7 bits a byte, low first, the top bit set on all but the last;
/// at most ten bytes for 64 bits (the loop is bounded by that, so that no
/// slip in its condition can write without end).
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    for _ in 0..9 {
        if v < 0x80 {
            break;
        }
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Result<Option<[u8; N]>, Error> {
        Ok(self.bytes(N).map(|b| b.try_into().expect("N bytes")))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let [b] = self.take::<1>().ok()??;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Varints round-trip at every length's edges, each in as many bytes
    /// as its bits need, seven a byte.
    #[test]
    fn varints_take_the_bytes_their_bits_need() {
        for (v, len) in [
            (0u64, 1),
            (0x7f, 1),
            (0x80, 2),
            (0x3fff, 2),
            (0x4000, 3),
            (u64::from(u32::MAX), 5),
            (1 << 62, 9),
            (u64::MAX, 10),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), len, "{v:#x}");
            assert_eq!(Reader(&out).varint(), Some(v), "{v:#x}");
        }
    }

    /// `Record::runs` as it was first written, with hash sets: the model
    /// the sorted version must match run for run (working-set files
    /// already written lay their runs out in this order).
    fn runs_model(pages: &[u64], max: usize) -> Vec<(u64, usize)> {
        let max = max.max(1);
        let set: std::collections::HashSet<u64> = pages.iter().copied().collect();
        let mut covered = std::collections::HashSet::new();
        let mut runs = Vec::new();
        for &p in pages {
            if covered.contains(&p) {
                continue;
            }
            let free = |q: u64| set.contains(&q) && !covered.contains(&q);
            let mut start = p;
            while start > 0 && free(start - 1) && ((p - start) as usize) < max / 2 {
                start -= 1;
            }
            let mut end = p + 1;
            while free(end) && ((end - start) as usize) < max {
                end += 1;
            }
            covered.extend(start..end);
            runs.push((start, (end - start) as usize));
        }
        runs
    }

    #[cfg(not(miri))]
    proptest::proptest! {
        #[test]
        fn runs_are_the_models(
            pages in proptest::collection::vec(0u64..300, 0..200),
            max in 0usize..70,
            far in proptest::bool::ANY,
        ) {
            // `far`: every other page a gigapage on, too sparse for bits.
            let pages: Vec<u64> = pages
                .iter()
                .enumerate()
                .map(|(i, &p)| if far && i % 2 == 1 { p + (1 << 30) } else { p })
                .collect();
            let r = Record::new(4096, 1 << 43, "", pages.iter().copied()).unwrap();
            let mut seen = std::collections::HashSet::new();
            let first: Vec<u64> = pages.into_iter().filter(|&p| seen.insert(p)).collect();
            proptest::prop_assert_eq!(r.pages(), &first[..]);
            proptest::prop_assert_eq!(r.runs(max), runs_model(r.pages(), max));
        }
    }

    fn sample() -> Record {
        Record::new(4096, 1 << 30, "snap-1", [5, 6, 7, 8, 100, 3, 4, 262143]).unwrap()
    }

    #[test]
    fn round_trips() {
        let r = sample();
        let bytes = r.to_bytes();
        assert_eq!(Record::from_bytes(&bytes).unwrap(), r);
        // A run costs a byte a page.
        assert!(
            bytes.len() < 8 + 4 + 8 + 1 + 6 + 1 + 8 * 3 + 4,
            "{}",
            bytes.len()
        );
        // Pages 3 and 4 join 5..9: neighbours, whatever the touch order.
        assert_eq!(r.runs(512), [(3, 6), (100, 1), (262143, 1)]);
        assert_eq!(
            r.runs(2),
            [(4, 2), (6, 2), (8, 1), (100, 1), (3, 1), (262143, 1)]
        );
        // Two threads' runs touched in turn stay two runs.
        let two = Record::new(4096, 1 << 30, "", [10, 50, 11, 51, 12, 52]).unwrap();
        assert_eq!(two.runs(64), [(10, 3), (50, 3)]);
    }

    #[test]
    fn corruption_is_named() {
        let bytes = sample().to_bytes();
        let reason = |b: &[u8]| match Record::from_bytes(b) {
            Err(Error::RecordCorrupt { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason(b"hello").contains("magic"));
        assert!(reason(&bytes[..bytes.len() - 3]).contains("checksum"));
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(reason(&flipped).contains("checksum"));
        let mut v2 = bytes.clone();
        v2[7] = 2;
        assert!(reason(&v2).contains("version 2"));
        assert!(reason(&[]).contains("magic"));
        // The magic and no more: a record cut short, not something else.
        let r = reason(&MAGIC);
        assert!(r.contains("cut short"), "{r}");
        // Records of pages 0 and 1 of a 2-page image whose page list ends
        // with `tail` in place of its last `cut` bytes, checksummed anew.
        let edited = |cut: usize, tail: &[u8]| {
            let mut body = Record::new(4096, 8192, "x", [0, 1]).unwrap().to_bytes();
            body.truncate(body.len() - 4 - cut); // the checksum, then `cut`
            body.extend_from_slice(tail);
            let crc = crc32fast::hash(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            reason(&body)
        };
        // A page past the image: the last delta +2, page 2.
        let r = edited(1, &[4]);
        assert!(r.contains("past the image"), "{r}");
        // More pages listed than the image has (page 1 twice; no record
        // made by `to_bytes` lists a page twice): the count and both
        // deltas replaced by 3 pages, 0, +1, +0.
        let r = edited(3, &[3, 0, 2, 0]);
        assert!(r.contains("more pages than the image has"), "{r}");
    }

    /// A caller's out-of-range argument is named as such, not taken for
    /// a corrupt record.
    #[test]
    fn bad_arguments_are_named() {
        let setting = |r: Result<Record, Error>| match r {
            Err(Error::BadSetting { setting, .. }) => setting,
            other => panic!("{other:?}"),
        };
        assert_eq!(setting(Record::new(4096, 8192, "x", [2])), "pages");
        assert_eq!(setting(Record::new(5000, 8192, "x", [0])), "page_size");
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert_eq!(setting(Record::new(4096, 8192, &long, [0])), "image_id");
        assert!(Record::new(4096, 8192, &long[1..], [0, 1]).is_ok());
    }

    #[test]
    fn another_image_is_refused_by_what_differs() {
        let r = sample();
        assert!(r.check(4096, 1 << 30, "snap-1").is_ok());
        for (page, len, id, what) in [
            (4096, 1 << 29, "snap-1", "image length"),
            (4096, 1 << 30, "snap-2", "image id"),
            (2 << 20, 1 << 30, "snap-1", "page size"),
        ] {
            match r.check(page, len, id) {
                Err(e @ Error::RecordMismatch { what: w, .. }) => {
                    assert_eq!(w, what);
                    assert!(e.to_string().contains(what), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
