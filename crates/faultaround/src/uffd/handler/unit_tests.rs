//! The window's runs of wanted pages, and the zeroed bitmaps.

use std::sync::atomic::Ordering;

use super::resident::{count_bits, count_present};
use super::{runs, zeroed_bitmap};

#[test]
fn runs_are_the_maximal_stretches_of_wanted_pages() {
    let set = |w: &'static [u64]| move |p: u64| w.contains(&p);
    assert_eq!(runs(8..16, set(&[])), []);
    let all = runs(8..16, set(&[8, 9, 10, 11, 12, 13, 14, 15]));
    assert_eq!((all.len(), all.first().cloned()), (1, Some(8..16)));
    assert_eq!(runs(8..16, set(&[9, 10, 12, 15])), [9..11, 12..13, 15..16]);
    assert_eq!(runs(8..16, set(&[8, 14, 15, 16])), [8..9, 14..16]);
}

/// Zeroed and writable, small (on the heap; the case Miri runs) and
/// large (mapped).
#[test]
fn zeroed_bitmaps_read_zero_and_take_writes() {
    assert!(zeroed_bitmap(0).unwrap().is_empty());
    let large = if cfg!(miri) { 3 } else { 1 << 20 };
    for words in [1, 3, 1000, large] {
        let b = zeroed_bitmap(words).unwrap();
        assert_eq!(b.len(), words);
        assert!(b.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        b[words - 1].fetch_or(1 << 63, Ordering::Relaxed);
        assert_eq!(b[words - 1].load(Ordering::Relaxed), 1 << 63);
    }
    assert!(zeroed_bitmap(usize::MAX / 4).is_err());
}

/// Counted a word at a time, as bit by bit: ranges starting and ending
/// inside a word, on its bounds, within one word, empty.
#[test]
fn bits_are_counted_over_any_range() {
    let b = zeroed_bitmap(4).unwrap();
    let set = [0u64, 5, 63, 64, 100, 127, 128, 200, 255];
    for &p in &set {
        b[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::Relaxed);
    }
    for from in 0..256 {
        for n in 0..=256 - from {
            let want = set
                .iter()
                .filter(|&&p| (from..from + n).contains(&(p as usize)))
                .count();
            assert_eq!(count_bits(&b, from, n), want, "{from}..{}", from + n);
        }
    }
}

/// `mincore`'s bytes counted a word at a time, as one by one: the low bit
/// alone says present (the others are reserved), over every length up to
/// five words and a tail, and the first byte of each huge page.
#[test]
fn present_pages_are_counted_by_the_low_bit() {
    // Present and absent bytes at every position a page's first can take
    // (every 2nd and 4th included).
    let bytes: Vec<u8> = (0..45u32)
        .map(|i| [1, 0, 3, 2, 0xff, 0xfe, 0][((i * i + 3 * i) % 7) as usize])
        .collect();
    for sub in [1, 2, 4] {
        for len in 0..=bytes.len() {
            let v = &bytes[..len];
            let want = (0..len).filter(|i| i % sub == 0 && v[*i] % 2 == 1).count();
            assert_eq!(count_present(v, sub), want, "{len} bytes, {sub} a page");
        }
    }
}

/// `fail_page` records the page as failed, keeps the first failure and
/// tells `on_failure`, with no reader needed: a mutant that failed no page
/// was otherwise caught only by the signal tests' time limits.
#[cfg(not(miri))]
#[test]
fn a_failed_page_is_recorded_and_told() {
    use std::sync::{Arc, Mutex};
    let page = rustix::param::page_size();
    let told = Arc::new(Mutex::new(Vec::new()));
    let heard = told.clone();
    let r = crate::UffdRegion::builder(4 * page)
        .on_failure(move |e| heard.lock().unwrap().push(e.to_string()))
        .build(crate::Zeroes(4 * page as u64))
        .unwrap();
    r.shared.fail_page(2, std::io::Error::other("injected"));
    assert!(r.shared.is_failed(2));
    let e = r.failure().expect("the failure kept").to_string();
    assert!(e.contains("page 2") && e.contains("injected"), "{e}");
    let told = told.lock().unwrap().clone();
    assert!(told.len() == 1 && told[0] == e, "{told:?}");
    assert_eq!(r.stats().pages_failed, 1);
}
