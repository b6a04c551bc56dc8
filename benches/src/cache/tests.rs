//! The `cache` experiment's own tests: its streams, rows and judged notes.

use super::*;

/// The ranks are Zipf's draws, from 1 to `keys`, the lowest the most
/// requested, and [`zipf_stream`]'s keys are those ranks spread.
#[test]
fn zipf_ranks_are_the_streams_draws() {
    let ranks = zipf_ranks(100, 1.0, 10_000, 3);
    assert!(ranks.iter().all(|&r| (1..=100).contains(&r)));
    let count = |k| ranks.iter().filter(|&&r| r == k).count();
    assert!(count(1) > count(2) && count(2) > count(50));
    let spread: Vec<u64> = ranks.iter().map(|r| r.wrapping_mul(SPREAD)).collect();
    assert_eq!(zipf_stream(100, 1.0, 10_000, 3), spread);
}

#[test]
fn every_cache_counts_hits_and_stays_bounded() {
    let stream = zipf_stream(1000, 0.9, 4000, 7);
    for i in Impl::for_mix(Mix::ReadThrough) {
        let c = build(i, 100);
        warm(&*c, &stream);
        let s = measure(&*c, Mix::Mixed, 2, &stream);
        assert_eq!(s.ops, 4000, "{i:?}");
        assert_eq!(s.gets, 3600, "{i:?}");
        assert!(s.hits > 0 && s.hits < s.gets, "{i:?}: {s:?}");
        let s = measure(&*c, Mix::ReadThrough, 2, &stream);
        assert_eq!((s.ops, s.gets), (4000, 4000), "{i:?}");
        assert!(s.hits > 0 && s.hits < s.gets, "{i:?}: {s:?}");
    }
}

/// The loader mix counts as hits the requests that did not load: on
/// one thread, as many as read-through by get and insert hits on the
/// same stream — exactly for `Mutex<lru>`, and within 5% for the
/// others, whose two instances hash with different random seeds
/// (moka's evictions also run on its own schedule): two instances of
/// quick_cache read through by get and insert differed by up to 2.4%.
#[test]
fn loads_count_the_hits_read_through_counts() {
    let stream = zipf_stream(1000, 0.9, 4000, 7);
    for i in Impl::for_mix(Mix::ReadThrough) {
        let (a, b) = (build(i, 100), build(i, 100));
        let by_get = measure(&*a, Mix::ReadThrough, 1, &stream);
        let by_load = measure(&*b, Mix::Load, 1, &stream);
        assert_eq!((by_load.ops, by_load.gets), (4000, 4000), "{i:?}");
        assert!(
            by_load.hits > 0 && by_load.hits < 4000,
            "{i:?}: {by_load:?}"
        );
        if i == Impl::MutexLru {
            assert_eq!(by_load.hits, by_get.hits);
        }
        let (x, y) = (by_load.hits as f64, by_get.hits as f64);
        assert!((x - y).abs() <= 0.05 * y, "{i:?}: {x} vs {y}");
    }
}

#[test]
fn scans_are_a_quarter_of_requests_and_never_repeat() {
    let zipf = zipf_stream(1000, 0.9, 8 * SCAN_RUN, 3);
    let a = with_scans(&zipf, 0);
    let b = with_scans(&zipf, a.len() as u64);
    let scans = |v: &[u64]| v.iter().filter(|&&k| k & SCAN_TAG != 0).count();
    assert_eq!(scans(&a), 2 * SCAN_RUN);
    let mut all: Vec<u64> = a
        .iter()
        .chain(&b)
        .copied()
        .filter(|k| k & SCAN_TAG != 0)
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a scan key repeated");
    // Zipf keys keep their identity, minus the tag bit.
    assert_eq!(a[0], zipf[0] & !SCAN_TAG);
    assert_eq!(a[3 * SCAN_RUN], SCAN_TAG);
}

#[test]
fn smallest_run_produces_every_row_and_table() {
    let cfg = Config {
        scale: 0.001,
        threads: Some(2),
        samples: 1,
    };
    let r = run(&cfg, &mut crate::Quiet);
    // threads 1 and 2.
    let per_mix: usize = plan().iter().map(|&(_, m)| Impl::for_mix(m).len()).sum();
    assert_eq!(r.rows.len(), per_mix * 2);
    assert!(r.row("mmbatch-ttl/readthrough-s0.9/threads-2").is_some());
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("readthrough-s0.9, 2 thread(s)")
                && n.contains("mmbatch-weighted-told (told its entries)")),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("moka-ttl's (target >= 3x")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.tables.len(), plan().len() * 2);
    // The small cache is reported, never judged.
    let small: Vec<_> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("readthrough-s0.9-small, "))
        .collect();
    assert_eq!(small.len(), 2, "{:?}", r.notes);
    for n in small {
        assert!(n.contains("(reported, no target)"), "{n}");
        assert!(!n.contains("target >=") && !n.contains("MISSED"), "{n}");
    }
    assert!(
        r.row("mmbatch-active-inactive/read-s0.9/threads-2")
            .is_some()
    );
    assert!(
        r.row("quick_cache/readthrough-s0.9-scan/threads-1")
            .is_some()
    );
    assert!(
        r.notes.iter().any(|n| n.contains("target >= 3x")),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("readthrough-s0.9-scan, 2 thread(s)")),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("load-s1.1, 1 thread(s)") && n.contains("no target")),
        "{:?}",
        r.notes
    );
    assert!(r.notes.last().unwrap().starts_with("targets: "));
}
