//! Working-set records and working-set files from arbitrary bytes, as a
//! restore reads them from disk: `Record::from_bytes` returns a record or
//! `RecordCorrupt` (never a panic); a record it accepts round-trips and its
//! runs cover each recorded page once; a region replaying a record with an
//! arbitrary working-set file either refuses it, naming the file
//! (`WorkingSetFile`), or builds and serves every page with the image's
//! data.
#![no_main]

use std::{io::Write, time::Duration};

use libfuzzer_sys::fuzz_target;
use mmbatch_faultaround::{Error, REPLAY_RUN, Record, UffdRegion};

const PAGE: usize = 4096;
const PAGES: usize = 64;

fn memfd(bytes: &[u8]) -> std::fs::File {
    let mut f = std::fs::File::from(
        rustix::fs::memfd_create("fuzz", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd"),
    );
    f.write_all(bytes).expect("write");
    f
}

/// A record from `bytes`, or `RecordCorrupt`; an accepted one round-trips
/// and its runs cover each of its pages once.
fn parse(bytes: &[u8]) {
    match Record::from_bytes(bytes) {
        Ok(r) => {
            assert_eq!(Record::from_bytes(&r.to_bytes()).expect("round trip"), r);
            let mut covered: Vec<u64> = r
                .runs(REPLAY_RUN)
                .iter()
                .flat_map(|&(s, n)| {
                    assert!((1..=REPLAY_RUN).contains(&n));
                    s..s + n as u64
                })
                .collect();
            covered.sort_unstable();
            let mut pages = r.pages().to_vec();
            pages.sort_unstable();
            assert_eq!(covered, pages, "runs cover each recorded page once");
        }
        Err(Error::RecordCorrupt { .. }) => {}
        Err(e) => panic!("{e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let (split, data) = data
        .split_first()
        .map_or((0, data), |(s, d)| (*s as usize, d));
    let (record_bytes, ws_bytes) = data.split_at((split * 4).min(data.len()));

    // As given, and with a valid checksum appended (so that the fields
    // behind it are parsed too).
    let mut sealed = record_bytes.to_vec();
    sealed.extend_from_slice(&crc32fast::hash(record_bytes).to_le_bytes());
    parse(record_bytes);
    parse(&sealed);

    // A region of 64 pages replaying a record of some of them, with the
    // fuzzer's working-set file.
    let image: Vec<u8> = (0..PAGES * PAGE)
        .map(|b| (b / PAGE) as u8 ^ b as u8)
        .collect();
    let pages = record_bytes.iter().map(|&b| u64::from(b) % PAGES as u64);
    let record = Record::new(PAGE, image.len() as u64, "fuzz", pages).expect("pages in range");
    let built = UffdRegion::builder(PAGES * PAGE)
        .image_id("fuzz")
        .replay(record)
        .replay_pages(memfd(ws_bytes))
        .build(image.clone());
    match built {
        Ok(region) => {
            assert!(region.wait_replayed(Duration::from_secs(10)));
            assert_eq!(region.as_slice(), &image[..], "a page with other data");
        }
        // A file that is not this record's (its header, its length).
        Err(Error::WorkingSetFile { .. }) => {}
        Err(Error::NoPermission { .. } | Error::Unsupported { .. }) => {}
        Err(e) => panic!("{e}"),
    }
});
