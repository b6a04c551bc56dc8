//! Loops larger than the shard, and the index at its widths' limits.

use super::*;

/// Forty passes of a loop over keys `0..len` through `lv`, read-through
/// (a hit marks the entry, a miss inserts it): the share of the last ten
/// passes' requests that hit. The shard's structure is checked after.
fn loop_hit_ratio(lv: &mut Lruvec<u64, u64>, len: u64) -> f64 {
    let (passes, counted) = (40u64, 10u64);
    let mut hits = 0u64;
    for pass in 0..passes {
        for k in 0..len {
            match lv.find(hash(k), |&x| x == k) {
                Some(i) => {
                    lv.mark_accessed(i);
                    hits += u64::from(pass >= passes - counted);
                }
                None => insert(lv, k),
            }
        }
    }
    lv.check().unwrap();
    hits as f64 / (counted * len) as f64
}

/// A loop over three times the shard refaults from about twice its size,
/// at the edge of the reach, and finds a shadow for about 40% of its
/// misses: not thrashing. A shard whose early refaults missed the reach
/// never built an active list and cycled the loop through probation
/// unhit (0.3% of requests hit); while the active list has room, every
/// remembered refault is activated, and the shard keeps most of a third
/// of the loop resident (OPT: a third).
#[test]
fn a_loop_over_three_times_the_shard_keeps_part_of_it() {
    let n = 512u64;
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::Workingset,
        true,
        false,
        (false, false),
        n,
        n as usize,
    );
    let ratio = loop_hit_ratio(&mut lv, 3 * n);
    assert!(
        !lv.thrashing(),
        "the loop's refault share: {}",
        lv.refault_share
    );
    assert!(
        ratio > 0.2,
        "{:.1}% of the loop's requests hit",
        ratio * 100.0
    );
}

/// A loop twice the shard that starts after other requests: those made
/// half the shard's worth of keys hot, and the active list holds them
/// when the loop starts, never requested again. The loop refaults from
/// about twice the shard, beyond the reach, and almost nothing hits: the
/// shard finds its active list stale and ages it, and the loop's keys
/// take the room. Unaged, nothing deactivated the stale keys, and the
/// loop cycled through probation unhit.
#[test]
fn a_loop_after_other_requests_ages_the_stale_active_list_out() {
    let n = 1024u64;
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::Workingset,
        true,
        false,
        (false, false),
        n,
        n as usize,
    );
    let (trace, from) = mmbatch_models::traces::loop_after_other(n);
    // Read-through, the lookups counted as the lock's stripes count them
    // and handed to the shard as `LruCache::insert` does.
    let (mut hits, mut misses, mut loop_hits) = (0u64, 0u64, 0u64);
    for (at, &k) in trace.iter().enumerate() {
        if let Some(i) = lv.find(hash(k), |&y| y == k) {
            lv.mark_accessed(i);
            hits += 1;
            loop_hits += u64::from(at >= from);
        } else {
            misses += 1;
            insert(&mut lv, k);
            if lv.looks_at_lookups() {
                lv.lookups(hits, misses);
            }
        }
    }
    lv.check().unwrap();
    let ratio = loop_hits as f64 / (trace.len() - from) as f64;
    // Aged, 25.6% of the loop's requests hit (OPT: 50%); unaged, 7.1%.
    assert!(
        ratio > 0.15,
        "{:.2}% of the loop's requests hit",
        ratio * 100.0
    );
}

/// A miss with no shadow starts at the inactive head while misses are
/// mostly new keys, and at the tail once they mostly refault (its shadow
/// was likely lost): in a shard holding a loop frozen on its inactive
/// list, every resident entry hit, a newcomer at the head would push a
/// hit entry to the tail, and reclaim would activate a burst of them.
#[test]
fn a_shadowless_miss_goes_to_the_tail_once_misses_mostly_refault() {
    // A key whose short hash is no evicted key's.
    const NEW: u64 = 5_000_000;
    for (share, at_tail) in [(0.0, false), (0.7, true)] {
        let mut lv = full(1000);
        // Evictions enough for misses to count (new keys, at the head);
        // every resident hit.
        lv.refault_share = 0.0;
        for k in 1000..1600 {
            insert(&mut lv, k);
        }
        for k in 600..1600 {
            let i = lv.find(hash(k), |&x| x == k).unwrap();
            lv.mark_accessed(i);
        }
        lv.refault_share = share;
        lv.thrashing = share > 0.5;
        if at_tail {
            // Mostly refaults since the start, too.
            lv.refaults = lv.evictions;
        }
        let refaults = lv.refaults;
        insert(&mut lv, NEW);
        let i = lv.find(hash(NEW), |&x| x == NEW).unwrap();
        assert_eq!(lv.refaults, refaults, "no shadow");
        let (h, t) = (lv.lists[INACTIVE].head, lv.lists[INACTIVE].tail);
        assert_eq!((h == i, t == i), (!at_tail, at_tail), "share {share}");
        // The next miss evicts the newcomer, activating none of the hit
        // entries; at the head, reclaim reaches them and activates them up
        // to its budget.
        let before = lv.lists[ACTIVE].len;
        insert(&mut lv, NEW + 1);
        let activated = lv.lists[ACTIVE].len - before;
        if at_tail {
            assert!(lv.find(hash(NEW), |&x| x == NEW).is_none());
            assert_eq!(activated, 0);
        } else {
            assert!(activated >= SCAN_BATCH, "{activated} activated");
        }
        lv.check().unwrap();
    }
}

/// A shard of up to 65536 entries indexes them in `u16`s, a larger one in
/// `u32`s; both find every entry they hold, and removals (which move the
/// slab's last entry into the freed slot) re-point the right one, up to
/// the highest slot either can hold.
#[test]
fn both_index_widths_hold_a_full_shard() {
    for n in [65536usize, 65537] {
        let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
        // Past its fill (a new shard keeps its first keys): the index, not
        // the fill, is under test.
        lv.fill = false;
        assert_eq!(
            matches!(lv.table, index::Index::Narrow(_)),
            n <= 65536,
            "{n} entries"
        );
        // Past the capacity: the oldest keys are evicted.
        for k in 0..n as u64 + 10 {
            insert(&mut lv, k);
        }
        assert_eq!(lv.len(), n);
        lv.check().unwrap();
        let find = |lv: &Lruvec<u64, u64>, k: u64| lv.find(hash(k), |&x| x == k);
        assert!(find(&lv, 0).is_none());
        // Removing an entry moves the slab's last one into its slot.
        let mut none = NIL;
        let first = find(&lv, 10).expect("an old key");
        lv.remove(first, &mut none);
        lv.check().unwrap();
        assert!(find(&lv, 10).is_none());
        assert_eq!(lv.len(), n - 1);
        for k in [11, n as u64 / 2, n as u64 + 9] {
            let i = find(&lv, k).unwrap_or_else(|| panic!("key {k} lost"));
            assert_eq!(lv.node(i).key, k);
        }
    }
}

/// Read-through of `keys` over `lv` for `passes` passes; hits of the
/// last `counted` passes.
fn loop_hits(
    lv: &mut Lruvec<u64, u64>,
    keys: std::ops::Range<u64>,
    passes: u64,
    counted: u64,
) -> u64 {
    let mut hits = 0u64;
    for pass in 0..passes {
        for k in keys.clone() {
            match lv.find(hash(k), |&x| x == k) {
                Some(i) => {
                    lv.mark_accessed(i);
                    hits += u64::from(pass >= passes - counted);
                }
                None => insert(lv, k),
            }
        }
    }
    hits
}

/// Under LIRS, a loop just over the shard never hits a resident HIR
/// entry, so the HIR share falls to its floor and the loop keeps 99.5% of
/// the shard as its LIR set (98% at the fixed share); a workload whose
/// HIR entries are hit while resident grows it back, to at most
/// `LIRS_HIR`. The duel's simulations keep theirs fixed.
#[test]
fn lirs_hir_share_follows_whether_hir_entries_are_hit() {
    let n = 1000u64;
    let lirs = |adapts: bool| {
        let mut lv: Lruvec<u64, u64> =
            Lruvec::new(Policy::Lirs, true, false, (false, false), n, n as usize);
        lv.hir_adapts = adapts;
        lv
    };
    let mut lv = lirs(true);
    let hits = loop_hits(&mut lv, 0..n * 5 / 4, 20, 10);
    lv.check().unwrap();
    assert_eq!(lv.hir_share, LIRS_HIR_MIN);
    let ratio = hits as f64 / (10 * n * 5 / 4) as f64;
    assert!(ratio > 0.79, "{ratio}");
    let mut fixed = lirs(false);
    let fixed_hits = loop_hits(&mut fixed, 0..n * 5 / 4, 20, 10);
    assert_eq!(fixed.hir_share, LIRS_HIR);
    assert!(
        hits > fixed_hits,
        "{hits} vs {fixed_hits} at the fixed share"
    );
    // Now a working set of the LIR set and, cycling through the HIR set,
    // keys each requested twice in a row a few requests apart: hit while
    // resident on the HIR list.
    for round in 0..2000u64 {
        let k = 10_000 + round;
        loop_hits(&mut lv, k..k + 1, 1, 0);
        loop_hits(&mut lv, 0..3, 1, 0);
        loop_hits(&mut lv, k..k + 1, 1, 0);
    }
    lv.check().unwrap();
    assert!(lv.hir_share > LIRS_HIR_MIN, "{}", lv.hir_share);
    assert!(lv.hir_share <= LIRS_HIR, "{}", lv.hir_share);
    // A resize's evictions say nothing of reuse: the share stays; a
    // cleared shard starts afresh.
    let mut shrunk = lirs(true);
    loop_hits(&mut shrunk, 0..n, 1, 0);
    let mut out = Evicted::new();
    shrunk.set_capacity(n / 4, (n / 4) as usize, &mut out);
    assert_eq!(shrunk.hir_share, LIRS_HIR, "after a resize");
    loop_hits(&mut lv, 0..n * 5 / 4, 20, 0);
    assert_eq!(lv.hir_share, LIRS_HIR_MIN);
    drop(lv.clear());
    assert_eq!(lv.hir_share, LIRS_HIR, "after clear");
}

/// `Policy::LirsTinyLfu` keeps a loop just over the shard as OPT does:
/// ties keep the victim, so the keys that miss do not churn those that
/// hit, as long as the sketch sees the hits too (reclaim counts the
/// references it finds; missing keys are counted at every miss).
#[test]
fn lirs_with_admission_keeps_a_loop_at_opt() {
    let n = 1000u64;
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::LirsTinyLfu,
        true,
        false,
        (false, false),
        n,
        n as usize,
    );
    let ratio = loop_hit_ratio(&mut lv, n * 11 / 10);
    // OPT: (n - 1) / len, 90.8%.
    assert!(
        ratio > 0.905,
        "{:.2}% of the loop's requests hit",
        ratio * 100.0
    );
}
