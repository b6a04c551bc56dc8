//! Writing a region: a write to a missing page is served from the source
//! as a read is, then lands on the source's bytes; nothing the handlers do
//! later undoes it; and system calls that write the region (`read(2)` into
//! it) are served as the process's own writes are.

use std::{io::Read, time::Duration};

use mmbatch_faultaround::{UffdMode, UffdRegion};
use mmbatch_testkit::child;

const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(30);

/// Panics naming the pages where `got` and `want` differ (a whole-slice
/// `assert_eq!` prints megabytes).
fn assert_pages_eq(got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len());
    let bad: Vec<(usize, usize)> = (0..got.len() / PAGE)
        .filter_map(|p| {
            let (g, w) = (
                &got[p * PAGE..(p + 1) * PAGE],
                &want[p * PAGE..(p + 1) * PAGE],
            );
            g.iter().zip(w).position(|(a, b)| a != b).map(|i| (p, i))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "pages differing (page, first byte): {bad:?}"
    );
}

/// Page i holds bytes derived from i, so misplaced pages show.
fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251) as u8)
        .collect()
}

/// A write into the middle of a page not yet present faults the page's
/// window in from the source; the page reads back as the source with the
/// written bytes in place.
#[test]
fn a_write_to_a_missing_page_lands_on_the_sources_bytes() {
    if let Some(run) = child::parent(
        "a_write_to_a_missing_page_lands_on_the_sources_bytes",
        LIMIT,
    ) {
        run.expect_success();
        return;
    }
    let src = image(64);
    let mut r = UffdRegion::new(64 * PAGE, 2, src.clone(), 1).unwrap();
    assert_eq!(r.resident_pages(), 0);
    let at = 9 * PAGE + 100;
    r.as_mut_slice()[at..at + 5].copy_from_slice(b"hello");
    // The write faulted page 9's window (pages 8..12) in.
    let st = r.stats();
    assert_eq!((st.faults, st.pages_copied), (1, 4), "{st:?}");
    let mut want = src.clone();
    want[at..at + 5].copy_from_slice(b"hello");
    assert_eq!(
        &r.as_slice()[8 * PAGE..12 * PAGE],
        &want[8 * PAGE..12 * PAGE]
    );
    // The rest faults in as before, and the write survives it.
    assert_pages_eq(r.as_slice(), &want);
    assert_eq!(r.stats().faults, 16);
}

/// Every page written before it was read, through the raw pointer a VMM
/// hands to its guest, then read back whole.
#[test]
fn writes_through_the_raw_pointer_read_back() {
    if let Some(run) = child::parent("writes_through_the_raw_pointer_read_back", LIMIT) {
        run.expect_success();
        return;
    }
    let src = image(32);
    let mut r = UffdRegion::new(32 * PAGE, 0, src.clone(), 2).unwrap();
    let p = r.as_mut_ptr();
    let mut want = src;
    for page in (0..32).rev() {
        let at = page * PAGE + page;
        // SAFETY: inside the region, and no borrow of its memory is alive.
        unsafe { p.wrapping_add(at).write_volatile(0xA5) };
        want[at] = 0xA5;
    }
    assert_pages_eq(r.as_slice(), &want);
    assert_eq!(r.stats().faults, 32, "{:?}", r.stats());
}

/// `read(2)` into a region none of whose pages is present: the kernel's
/// `copy_to_user` write-faults each page, which is served from the source
/// and then overwritten by the file's bytes. (Without kernel faults served
/// the read would fail with EFAULT.)
#[test]
fn read_2_writes_pages_not_yet_faulted_in() {
    if let Some(run) = child::parent("read_2_writes_pages_not_yet_faulted_in", LIMIT) {
        run.expect_success();
        return;
    }
    let mut r = UffdRegion::new(16 * PAGE, 2, image(16), 1).unwrap();
    if r.mode() != UffdMode::AllFaults {
        println!("skipped: this process may have only a user-mode-only userfaultfd");
        return;
    }
    // A file whose bytes differ from the image's everywhere.
    let data: Vec<u8> = image(16).iter().map(|b| !b).collect();
    let path = std::env::temp_dir().join(format!("mmbatch-writable-{}", std::process::id()));
    std::fs::write(&path, &data).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    // The file's first 8 pages into pages 4..12; the rest stays the
    // image's.
    f.read_exact(&mut r.as_mut_slice()[4 * PAGE..12 * PAGE])
        .unwrap();
    let mut want = image(16);
    want[4 * PAGE..12 * PAGE].copy_from_slice(&data[..8 * PAGE]);
    // The kernel's writes faulted pages 4..12 in, two windows of 4.
    assert_eq!(r.stats().faults, 2, "{:?}", r.stats());
    assert_pages_eq(r.as_slice(), &want);
    // Written back out by write(2): the kernel reads what the process and
    // the kernel wrote.
    let out = std::env::temp_dir().join(format!("mmbatch-writable-out-{}", std::process::id()));
    std::fs::write(&out, r.as_slice()).unwrap();
    let back = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    assert_pages_eq(&back, &want);
}
