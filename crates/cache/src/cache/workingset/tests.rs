//! Shadow entries: the packing of eviction distances, and the
//! structure check's counts.

use super::*;

/// `peek` reads a shadow's distance as `refault` would give it, with its
/// flags set or not, and leaves it in place; another tag in the same
/// bucket, an empty table and a taken shadow read as none.
#[test]
fn peek_reads_a_shadow_and_leaves_it() {
    let mut s = Shadows::new(1000);
    assert_eq!(s.peek(0xdead_beef), None, "an empty table");
    s.eviction(0xdead_beef, true, true);
    s.eviction(0x1234_5678, false, false);
    for _ in 0..100 {
        s.age_nonresident();
    }
    // Each eviction ticks the clock too.
    assert_eq!(s.peek(0xdead_beef), Some(102));
    assert_eq!(s.peek(0x1234_5678), Some(101));
    assert_eq!(s.peek(0x1234_5679), None, "another tag, the same bucket");
    assert_eq!(s.len(), 2, "left in place");
    assert_eq!(s.refault(0xdead_beef).map(|r| r.0), Some(102));
    assert_eq!(s.peek(0xdead_beef), None, "taken");
    // A large shard's table keeps the clock's high bits (`order` 3):
    // peek reads them as refault does.
    let mut s = Shadows::new(1 << 20);
    s.eviction(0xdead_beef, false, false);
    for _ in 0..12_345 {
        s.age_nonresident();
    }
    let d = s.peek(0xdead_beef).expect("the shadow");
    assert!(d > 12_000, "{d}");
    assert_eq!(s.refault(0xdead_beef).map(|r| r.0), Some(d));
}

#[test]
fn distances_survive_the_packing() {
    // A small shard keeps the clock whole; a large one drops
    // `order` low bits (bucket_order) and its distances round down.
    for (entries, order) in [(1000, 0), (1 << 20, 3)] {
        let mut s = Shadows::new(entries);
        assert_eq!(s.order, order, "{entries} entries");
        s.eviction(0xdead_beef, true, false);
        for _ in 0..12_345 {
            s.age_nonresident();
        }
        let (d, ws, _) = s.refault(0xdead_beef).expect("the shadow");
        let exact = 12_345 + 1; // the eviction ticks the clock too
        assert!(ws);
        assert!(d <= exact && exact - d < 1 << order, "{d} vs {exact}");
        assert_eq!(s.refault(0xdead_beef), None, "taken");
        // Another hash in the same bucket with another tag misses.
        s.eviction(0x1234_5678, false, true);
        assert_eq!(s.refault(0x1234_5679), None);
        // The failed bit comes back, and is not part of the tag.
        let (_, ws, failed) = s.refault(0x1234_5678).expect("the shadow");
        assert!(!ws && failed);
        s.check().unwrap();
    }
}

/// `eviction_at` in a shard large enough that shadows drop low clock
/// bits: a past clock is kept (to the clock's coarseness), and one
/// older than a shadow can tell is kept as the oldest it can.
#[test]
fn a_past_clock_is_kept_and_clamped_in_a_large_shard() {
    let mut s = Shadows::new(1 << 20);
    assert_eq!(s.order, 3);
    s.fit(1 << 20);
    for _ in 0..100_000 {
        s.age_nonresident();
    }
    s.eviction_at(0xdead_beef, false, false, 0);
    let (d, ..) = s.refault(0xdead_beef).expect("the shadow");
    let exact = 100_000 + 1;
    assert!(d <= exact && exact - d < 1 << 3, "{d} vs {exact}");
    // Older than the 2^19 << 3 a shadow can tell: the oldest it can.
    for _ in 0..(AGE_MASK << 3) {
        s.age_nonresident();
    }
    s.eviction_at(0x1234_5678, false, false, 0);
    let (d, ..) = s.refault(0x1234_5678).expect("the shadow");
    let oldest = (AGE_MASK as usize) << 3;
    assert!(d <= oldest && oldest - d < 1 << 4, "{d} vs {oldest}");
}

/// The structure check notices each count gone wrong alone: slots in
/// use, those marked `PG_workingset`, a table over its size.
#[test]
fn check_reports_each_miscount() {
    let shadows = || {
        let mut s = Shadows::new(64);
        s.fit(64);
        s.eviction(0xdead_beef, true, false);
        s.eviction(0x1234_5678, false, false);
        s.check().unwrap();
        s
    };
    let mut s = shadows();
    s.len += 1;
    assert!(s.check().unwrap_err().contains("3 counted"));
    let mut s = shadows();
    s.workingset = 0;
    assert!(
        s.check()
            .unwrap_err()
            .contains("PG_workingset), 2 counted (0)")
    );
    let mut s = shadows();
    s.size = s.slots.len() - 1;
    assert!(s.check().unwrap_err().contains("slots of"));
}

/// The shadows are counted by kind, of entries once active (ARC's B2)
/// and of the others (B1), as `Lruvec::adapt`'s step takes their ratio;
/// a refault takes one from its own kind.
#[test]
fn shadows_are_counted_by_kind() {
    let mut s = Shadows::new(1000);
    let hash = |i: u32| i.wrapping_mul(0x9E37_79B9);
    for i in 0..30 {
        s.eviction(hash(i), i < 10, false);
    }
    // (Shadows that collide lose the older one: few, at 30 of 1000.)
    let (demoted, probation) = s.counts();
    assert_eq!(demoted + probation, s.len(), "{demoted} {probation}");
    assert!(
        s.len() >= 25 && demoted <= 10 && probation <= 20,
        "{demoted} {probation}"
    );
    // The first of the active entries' shadows still held, taken.
    assert!((0..10).any(|i| s.refault(hash(i)).is_some()));
    assert_eq!(s.counts(), (demoted - 1, probation));
    s.check().unwrap();
}

/// `set_capacity`'s new limit: a table over it is dropped (its memory
/// goes with the shrink; shadows are hints), one within it keeps its
/// shadows.
#[test]
fn a_lower_limit_drops_a_larger_table_and_keeps_one_within_it() {
    let mut s = Shadows::new(1000);
    s.fit(1000);
    s.eviction(0xdead_beef, false, false);
    assert_eq!(s.size, 2000);
    s.set_limit(1000);
    assert_eq!((s.size, s.len()), (2000, 1), "the same limit keeps it");
    s.set_limit(100);
    assert!(s.size <= 200, "a table of {} slots past its limit", s.size);
    assert_eq!((s.len(), s.slots.len()), (0, 0), "dropped");
    s.check().unwrap();
}

/// A shard's table is sized to twice its entries while it holds no
/// shadow, and once it does, when the shard outgrows half of it, to twice
/// its entries or half as large again, whichever is more (so a shard
/// growing an entry at a time reallocates a logarithmic number of
/// times), never past the limit; a grown table starts empty.
#[test]
fn a_table_grows_by_half_again_or_to_twice_the_entries_up_to_the_limit() {
    let mut s = Shadows::new(10_000);
    s.fit(100);
    assert_eq!(s.size, 200, "twice the entries at the first eviction");
    s.eviction(0xdead_beef, false, false);
    s.fit(100);
    assert_eq!((s.size, s.len()), (200, 1), "half full: kept");
    s.fit(101);
    assert_eq!((s.size, s.len()), (300, 0), "half as large again, empty");
    // Empty (allocated at the next eviction): twice the entries.
    s.fit(400);
    assert_eq!(s.size, 800, "twice the entries");
    s.fit(9_000);
    assert_eq!(s.size, 18_000);
    s.eviction(0xdead_beef, false, false);
    s.fit(9_500);
    assert_eq!(s.size, 20_000, "no larger than the limit");
}
