//! `Policy::Adaptive` on one shard: the sampled hits' buffer, a shard
//! changing policy, and the duel's verdict.

use super::*;
use crate::{cache::shard::duel as sim, sync::Arc};

/// A new shard of `n` entries under `policy`, filling as a new cache's.
fn shard(policy: Policy, n: u64) -> Lruvec<u64, u64> {
    Lruvec::new(policy, true, false, (false, false), n, n as usize)
}

/// Steps the xorshift64 sequence at `x`.
fn xorshift(x: &mut u64) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
}

/// A read-through access of `k`: a hit is counted and sampled, a miss
/// inserted. Returns whether it hit.
fn access(lv: &mut Lruvec<u64, u64>, k: u64) -> bool {
    match slot(lv, k) {
        Some(i) => {
            // As a lookup does, the write lock taken.
            if lv.mark_accessed(i) {
                lv.drain_moves();
            }
            lv.sample_hit(hash(k));
            true
        }
        None => {
            insert(lv, k);
            false
        }
    }
}

/// A shard's buffer (sampled hits that found the duel busy) keeps them
/// until it is full (the rest are lost to the sample), and a drain hands
/// each kept one over once, in order.
#[test]
fn sampled_hits_are_kept_until_full_and_drained_once() {
    let s = sim::Sampled::new();
    for h in 0..sim::SAMPLED as u32 + 4 {
        s.push(h);
    }
    let mut got = Vec::new();
    s.drain(|h| got.push(h));
    // Hash 0 stands in as 1 (0 marks an empty slot).
    let want: Vec<u32> = (0..sim::SAMPLED as u32).map(|h| h.max(1)).collect();
    assert_eq!(got, want);
    s.drain(|h| got.push(h));
    assert_eq!(got.len(), sim::SAMPLED, "a second drain found more");
    s.push(7);
    s.drain(|h| got.push(h));
    assert_eq!(got.last(), Some(&7), "the buffer refills after a drain");
}

/// A shard that changes policy in the middle of a workload, again and
/// again, keeps its structures consistent (LIRS's stamps appear and go),
/// and each policy's reclaim takes the lists from where another left
/// them.
#[test]
fn a_shard_changing_policy_keeps_its_structure() {
    let n = 200u64;
    let mut lv: Lruvec<u64, u64> = shard(Policy::Workingset, n);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for step in 0..20_000u64 {
        if step % 997 == 0 {
            // Workingset, LIRS, LRU, Workingset, ... in turn.
            let next = sim::CONTENDERS[(step / 997 + 1) as usize % sim::CONTENDERS.len()];
            lv.adopt(next);
            if next == Policy::Lirs {
                lv.keep_stamps();
                assert_eq!(lv.stamps.len(), lv.len());
            }
            assert_eq!(lv.runs(), next);
            lv.check().unwrap();
        }
        xorshift(&mut x);
        // A hot set of half the shard and a loop over twice it.
        let k = if x % 2 == 0 {
            x % (n / 2)
        } else {
            1000 + step % (2 * n)
        };
        access(&mut lv, k);
        if step % 101 == 0 {
            lv.check().unwrap();
        }
    }
    lv.check().unwrap();
    assert_eq!(lv.len() as u64, n);
}

/// A shard taking up LRU forgets its shadows (LRU's evictions move no
/// clock, so kept ones would read as just evicted on a return to the
/// others), and the others keep theirs; with batching off, a hit on an
/// entry another policy left active moves it to the head of the list LRU
/// keeps, its active flag cleared.
#[test]
fn a_shard_taking_up_lru_forgets_shadows_and_moves_active_hits() {
    let n = 64u64;
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::Workingset,
        false,
        false,
        (false, false),
        n,
        n as usize,
    );
    for k in 0..4 * n {
        insert(&mut lv, k);
    }
    assert!(lv.shadows.len() > 0, "evictions left shadows");
    lv.adopt(Policy::Lirs);
    lv.adopt(Policy::Workingset);
    assert!(lv.shadows.len() > 0, "Workingset and LIRS keep them");
    // Entries on the active list: resident ones hit twice with batching
    // off.
    let resident: Vec<u32> = (0..4 * n).filter_map(|k| slot(&lv, k)).take(8).collect();
    for &i in &resident {
        lv.touch(i);
        lv.touch(i);
    }
    let i = resident[3];
    assert!(lv.is_active(i), "the setup activates");
    lv.adopt(Policy::Lru);
    assert_eq!(lv.shadows.len(), 0, "LRU forgets them");
    lv.touch(i);
    assert!(!lv.is_active(i), "a hit under LRU leaves the active list");
    assert_eq!(
        lv.lists[INACTIVE].head, i,
        "at the head of the inactive one"
    );
    lv.check().unwrap();
}

/// A shard taking up LRU drains the active list another policy left to
/// the inactive head, as the kernel deactivates: the next victim is the
/// least recent of what was already inactive, not an entry just drained.
#[test]
fn a_shard_taking_up_lru_drains_the_active_list_to_the_inactive_head() {
    let n = 100u64;
    let mut lv = shard(Policy::Workingset, n);
    for k in 0..n {
        insert(&mut lv, k);
    }
    let inactive: Vec<u64> = (0..n)
        .filter(|&k| slot(&lv, k).is_some_and(|i| !lv.is_active(i)))
        .collect();
    assert!(!inactive.is_empty() && inactive.len() < n as usize);
    lv.adopt(Policy::Lru);
    insert(&mut lv, 1000);
    let gone: Vec<u64> = (0..n).filter(|&k| slot(&lv, k).is_none()).collect();
    assert_eq!(gone.len(), 1);
    assert!(
        inactive.contains(&gone[0]),
        "evicted {gone:?}, inactive were {inactive:?}"
    );
    lv.check().unwrap();
}

/// The sample's bound is exclusive, and a shard's kept bound is the
/// duel's: the key whose mixed hash is the bound itself is out, the one
/// just below it in, at every rate; a shard without a duel samples none.
#[test]
fn the_sample_bound_is_exclusive_and_a_shard_keeps_the_duels() {
    // The mixing constant's inverse mod 2^32 (Newton's iteration): the
    // short hash whose mixed hash is a given value.
    let c = 0x9e37_79b9u32;
    let mut inv = c;
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u32.wrapping_sub(c.wrapping_mul(inv)));
    }
    assert_eq!(c.wrapping_mul(inv), 1);
    let unmix = |x: u64| u32::try_from(x).unwrap().wrapping_mul(inv);
    for shift in 1..=32 {
        let bound = 1u64 << (32 - shift);
        assert_eq!(sim::sample_below(shift), bound);
        assert!(
            !sim::sampled(unmix(bound), shift),
            "shift {shift}: the bound"
        );
        assert!(
            sim::sampled(unmix(bound - 1), shift),
            "shift {shift}: below it"
        );
    }
    let d = Arc::new(sim::Duel::new(1 << 20));
    let mut lv = shard(Policy::Adaptive, 1 << 12).with_duel(d.clone());
    // The bound `with_duel` kept, then the ones a resize would set.
    let bound = 1u64 << (32 - d.shift());
    assert!(!lv.samples(unmix(bound)) && lv.samples(unmix(bound - 1)));
    for shift in [3, 9, 32] {
        lv.set_duel_shift(shift);
        let bound = 1u64 << (32 - shift);
        assert!(!lv.samples(unmix(bound)), "shift {shift}: the bound");
        assert!(lv.samples(unmix(bound - 1)), "shift {shift}: below it");
        assert!(lv.samples(unmix(0)));
    }
    let plain = shard(Policy::Lirs, 1 << 12);
    assert!(!plain.samples(unmix(0)), "no duel, no sample");
}

/// A LIRS shard of an adaptive cache keeps no stamps until the duel's
/// sample has hit (a cache that hits nothing pays nothing for them); from
/// then on it stamps every entry, their last access taken as now, and a
/// refault from within a shard's worth of evictions is LIR until the
/// first demotion says how far the LIR set reaches.
#[test]
fn a_lirs_shard_keeps_stamps_once_the_sample_hits() {
    let n = 100u64;
    let d = Arc::new(sim::Duel::new(n as usize));
    let mut lv = shard(Policy::Adaptive, n).with_duel(d.clone());
    for k in 0..3 * n {
        access(&mut lv, k);
    }
    assert!(lv.runs() == Policy::Lirs && !d.has_hit());
    assert!(lv.stamps.is_empty(), "no hit yet: no stamps");
    lv.check().unwrap();
    // A sampled key requested twice (a miss, then a hit), and the next
    // write.
    // One key in 8 is sampled: a bounded search (a broken sample fails
    // here rather than searching on for good).
    let k = (10 * n..1000 * n)
        .find(|&k| d.samples(hash(k)))
        .expect("a sampled key among 99 000");
    assert!(!access(&mut lv, k));
    assert!(access(&mut lv, k));
    access(&mut lv, 20 * n);
    assert!(d.has_hit());
    // Stamped at that write, before it evicted (the clock may have moved
    // on by one step of the stamps' rounding since).
    let (now, step) = (lv.lirs_now(), 1u32 << lv.stamp_shift);
    assert_eq!(lv.stamps.len(), lv.len());
    assert!((0..lv.len() as u32).all(|i| now.wrapping_sub(lv.stamp_of(i)) <= step));
    lv.check().unwrap();
    // Giving LIRS up drops them.
    lv.adopt(Policy::Workingset);
    assert!(lv.stamps.is_empty(), "a Workingset shard keeps no stamps");
    lv.check().unwrap();
    // Taking it up again: the reach starts at a shard's worth.
    lv.adopt(Policy::Lirs);
    assert_eq!(lv.lir_reach(), n as u32);
}

/// The duel's verdict follows the simulation that hits more: LIRS on a
/// loop over twice the cache after other requests (LIRS keeps part of the
/// loop, `Workingset` little of it: 48 against 19 points in `policy_lab`),
/// `Workingset` on keys reused once soon after their first request beside
/// a hot set (LIRS's 2% of resident HIR entries lets them go first), and
/// `Workingset` on a sample that hits nothing.
#[test]
fn the_duel_follows_the_simulation_that_hits_more() {
    // Simulations of `n` entries, fed the sample's keys.
    let n = 400usize;
    let run = |trace: &mut dyn Iterator<Item = u32>| {
        let d = sim::Duel::new(n << 3);
        assert_eq!(d.shift(), 3, "1 key in 8 sampled");
        let s = sim::Sampled::new();
        for h in trace {
            d.feed(&s, Some(h.max(1)), || 0);
        }
        matches!(d.policy(), Policy::Lirs | Policy::LirsTinyLfu)
    };
    let n32 = n as u32;
    let others = (0..4 * n32).map(|k| 1_000_000 + k % (n32 / 2));
    let looped = (0..20 * n32).map(|k| k % (2 * n32));
    assert!(
        run(&mut others.chain(looped)),
        "a loop over twice the cache runs LIRS (with admission or without)"
    );
    let mut x = 88_172_645_463_325_252u64;
    let pairs = (0..40 * n32).map(move |i| {
        xorshift(&mut x);
        match i % 4 {
            // A hot set of half the cache, and new keys requested twice,
            // a twentieth of the cache apart.
            0 | 1 => (x % (n as u64 / 2)) as u32,
            2 => 2_000_000 + i / 4,
            _ => 2_000_000 + (i / 4).saturating_sub(n32 / 20),
        }
    });
    assert!(
        !run(&mut pairs.into_iter()),
        "reuse soon after a first request runs Workingset"
    );
    let fresh = (0..20 * n32).map(|k| 3_000_000 + k);
    assert!(
        !run(&mut fresh.into_iter()),
        "a sample that hits nothing runs Workingset"
    );
}

/// Shards share their duel; the sampled hits of each reach it from their
/// lookups, and every shard runs the verdict from its next write.
#[test]
fn shards_share_the_duel() {
    let d = Arc::new(sim::Duel::new(300));
    let mk = || shard(Policy::Adaptive, 150).with_duel(d.clone());
    let (mut a, mut b) = (mk(), mk());
    assert_eq!(
        a.runs(),
        Policy::Workingset,
        "a shard starts as Workingset until its first write"
    );
    access(&mut a, 1);
    access(&mut b, 2);
    assert!(
        a.runs() == Policy::Lirs && b.runs() == Policy::Lirs,
        "the duel starts at LIRS"
    );
    // About 2500 sampled (1 in 8), past the warm-up.
    for k in 0..20_000 {
        access(&mut a, 100_000 + k);
    }
    assert_eq!(d.policy(), Policy::Workingset, "nothing hit: Workingset");
    assert_eq!(b.runs(), Policy::Lirs, "b has not written since");
    access(&mut b, 3);
    assert_eq!(b.runs(), Policy::Workingset);
    b.check().unwrap();
}

/// A shard that gives up LIRS for `Workingset` places new keys by fresh
/// evidence: on keys reused once soon after their first request beside a
/// hot set, it hits as often as a shard that ran `Workingset` throughout,
/// within a few shards' worth of requests of the change. (With the
/// refault statistics LIRS never kept, new keys went to the inactive tail
/// and the shard hit 49% for twenty shards' worth of requests, against
/// 74%.)
#[test]
fn a_shard_giving_up_lirs_places_new_keys_by_fresh_evidence() {
    let n = 2048u64;
    let mut x = 88_172_645_463_325_252u64;
    let trace: Vec<u64> = (0..24 * n)
        .map(|i| {
            xorshift(&mut x);
            match i % 4 {
                0 | 1 => x % (n / 2),
                2 => 2_000_000 + i / 4,
                _ => 2_000_000 + (i / 4).saturating_sub(n / 20),
            }
        })
        .collect();
    let (change, from) = (trace.len() / 3, trace.len() / 2);
    let run = |lirs_first: bool| {
        let mut lv: Lruvec<u64, u64> = shard(Policy::Workingset, n);
        if lirs_first {
            lv.adopt(Policy::Lirs);
            lv.keep_stamps();
        }
        let mut hits = 0;
        for (i, &k) in trace.iter().enumerate() {
            if i == change && lirs_first {
                lv.adopt(Policy::Workingset);
            }
            hits += usize::from(access(&mut lv, k) && i >= from);
        }
        lv.check().unwrap();
        hits as f64 * 100.0 / (trace.len() - from) as f64
    };
    let (throughout, changed) = (run(false), run(true));
    assert!(
        changed >= throughout - 1.0,
        "{changed:.1}% after the change, {throughout:.1}% throughout"
    );
}

/// A shard that gives up LIRS for `Workingset` on a loop just over its
/// size, with what the duel's simulation of `Workingset` learned there
/// (thrashing, probation of 2%), keeps the loop: the passes after the
/// change hit about as often as under LIRS. LIRS's evictions of HIR
/// entries never hit had left shadows that did not say so; `Workingset`
/// read each refault as a first one, activated it over the LIR set it
/// inherited, and churned the loop (the second pass after the change hit
/// 8%, against LIRS's 90%).
#[test]
fn a_shard_giving_up_lirs_keeps_a_loop() {
    let n = 1000u64;
    let len = n * 11 / 10;
    let mut lv: Lruvec<u64, u64> = shard(Policy::Workingset, n);
    lv.adopt(Policy::Lirs);
    lv.keep_stamps();
    let pass = |lv: &mut Lruvec<u64, u64>| {
        let hits = (0..len).filter(|&k| access(lv, k)).count();
        hits as f64 * 100.0 / len as f64
    };
    for _ in 0..10 {
        pass(&mut lv);
    }
    let lirs = pass(&mut lv);
    lv.adopt(Policy::Workingset);
    // What the simulation learned on the loop (see `take_learned`).
    lv.thrashing = true;
    lv.refault_share = 1.0;
    lv.inactive_share = 0.02;
    for after in 1..=3 {
        let hit = pass(&mut lv);
        assert!(
            hit >= lirs - 5.0,
            "pass {after} after the change: {hit:.1}%, {lirs:.1}% before"
        );
    }
    lv.check().unwrap();
}

/// Under LIRS only a resident HIR entry evicted never hit leaves a shadow
/// that failed: an LIR entry (evicted from the active list when the HIR
/// set is empty) or an entry hit since its placement did not, and a shard
/// that takes up `Workingset` may activate its refault.
#[test]
fn lirs_marks_only_unhit_hir_evictions_failed() {
    let mut lv: Lruvec<u64, u64> = shard(Policy::Lirs, 64);
    for (h, flags, failed) in [
        (11u32, 0u8, true),
        (12, ACTIVE_FLAG, false),
        (13, 1, false),
        (14, ACTIVE_FLAG | MAX_REFS, false),
    ] {
        lv.leave_shadow(Some((h, flags, 0)));
        let (_, _, was) = lv.shadows.refault(h).expect("a shadow");
        assert_eq!(was, failed, "flags {flags:#b}");
    }
}

/// What a `Workingset` simulation has learned is handed to a shard only
/// once it is mostly evidence: from a `REFAULT_WINDOW` of misses counted
/// past the first half-size of evictions (before them the shares are
/// still mostly their "presumed thrashing" start), not before.
#[test]
fn learned_state_is_handed_on_once_it_is_mostly_evidence() {
    let n = 64u64;
    let mut lv = shard(Policy::Workingset, n);
    let gate = n / 2 + REFAULT_WINDOW as u64;
    let mut k = 0;
    while lv.evictions + 1 < gate {
        insert(&mut lv, k);
        k += 1;
        assert!(k < 4 * (n + gate), "insertions evict nothing");
    }
    assert!(lv.learned().is_none(), "{} evictions", lv.evictions);
    insert(&mut lv, k);
    assert_eq!(lv.evictions, gate);
    assert!(lv.learned().is_some(), "{} evictions", lv.evictions);
}

/// A resized cache's duel samples at the rate its new size calls for:
/// simulations of 256 to 511 entries (an eighth of a smaller cache), not
/// a thousandth of one entry after shrinking from 1 Mi entries to 1000
/// (nor 2^12 times too many after growing back).
#[test]
fn a_resized_duel_samples_for_the_new_size() {
    let d = sim::Duel::new(1 << 20);
    assert_eq!(d.shift(), 12);
    assert_eq!(d.resize(1000), 3, "at most 1 key in 8 (simulations of 125)");
    assert_eq!(d.shift(), 3);
    assert_eq!(d.resize(1 << 20), 12);
    assert_eq!(
        d.resize((1 << 20) + 5),
        12,
        "the same rate: the simulations only resize"
    );
    // Below 4096 entries the rate is 1 in 8 whatever the size: 100 ->
    // 4000 grows the simulations in place (13 entries to 500).
    assert_eq!(d.resize(100), 3);
    assert_eq!(d.resize(4000), 3);
}

/// A resized cache's shards sample keys at its duel's new rate: after a
/// shrink from 65536 entries to 1000, about 1 access in 8 reaches the
/// simulations, not 1 in 256 (simulations of 4 entries' worth of keys,
/// judging a cache 32 times larger than the one they stand for).
#[test]
fn a_resized_cache_feeds_its_duel_at_the_new_rate() {
    let cache: crate::LruCache<u64, u64> =
        crate::LruCache::builder(1 << 16).shards(1).build().unwrap();
    let duel = cache.duel.as_ref().expect("Adaptive keeps a duel");
    assert_eq!(duel.shift(), 8);
    cache.set_capacity(1000).unwrap();
    assert_eq!(duel.shift(), 3);
    let before = duel.seen();
    for k in 0..8000 {
        cache.insert(k, k);
    }
    let fed = duel.seen() - before;
    assert!(
        (700..1300).contains(&fed),
        "{fed} of 8000 new keys sampled (1 in 8: about 1000)"
    );
}

/// A `Workingset` shard that found its active list stale (few hits, see
/// `Lruvec::lookups`) and then takes up LIRS runs LIRS: it does not go on
/// aging its LIR set as `Workingset` ages a stale active list. On a loop
/// 1.25 times the shard it keeps as much of the loop as a LIRS shard that
/// was never stale.
#[test]
fn a_stale_shard_taking_up_lirs_stops_aging_its_lir_set() {
    let n = 1000u64;
    let run = |stale: bool| {
        let mut lv: Lruvec<u64, u64> = shard(Policy::Workingset, n);
        lv.stale = stale;
        lv.adopt(Policy::Lirs);
        lv.keep_stamps();
        let (passes, keys) = (20u64, n * 5 / 4);
        let mut hits = 0;
        for pass in 0..passes {
            for k in 0..keys {
                hits += u64::from(access(&mut lv, k) && pass >= passes / 2);
            }
        }
        lv.check().unwrap();
        hits
    };
    let (fresh, was_stale) = (run(false), run(true));
    assert_eq!(
        was_stale, fresh,
        "a shard that had been stale hit {was_stale}, a fresh one {fresh}"
    );
}

/// The verdict's rule, at its edges: nothing changes in the first
/// `DUEL_WARMUP` sampled accesses; after them the other simulation must
/// lead by more than `DUEL_MARGIN` hits plus `DUEL_MARGIN_SHARE` of the
/// leader's (14 hits at 1000), either way; a tie keeps the policy; a sample
/// without hits runs `Workingset`.
#[test]
fn the_verdict_needs_a_lead_past_the_margin_after_the_warm_up() {
    let w = DUEL_WARMUP;
    // (Workingset's and Lirs's hits, sampled accesses, running LIRS, the
    // verdict, why.)
    let cases: [([f64; 2], u64, bool, bool, &str); 18] = [
        ([1000.0, 0.0], w - 1, true, true, "warming up: no change"),
        ([0.0, 1000.0], w - 1, false, false, "warming up: no change"),
        (
            [1000.0, 0.0],
            w,
            true,
            false,
            "the warm-up ends at DUEL_WARMUP",
        ),
        ([0.0, 0.0], w, true, false, "no hits: Workingset"),
        ([1.0, 0.0], w, true, true, "one hit's worth is a hit"),
        ([1000.0, 986.5], w, true, true, "a lead of 13.5 keeps LIRS"),
        (
            [1000.0, 985.5],
            w,
            true,
            false,
            "a lead of 14.5 turns to Workingset",
        ),
        (
            [1000.0, 986.0],
            w,
            true,
            true,
            "a lead of exactly 14 keeps LIRS",
        ),
        ([500.0, 500.0], w, true, true, "a tie keeps LIRS"),
        (
            [986.5, 1000.0],
            w,
            false,
            false,
            "a lead of 13.5 keeps Workingset",
        ),
        (
            [985.5, 1000.0],
            w,
            false,
            true,
            "a lead of 14.5 turns to LIRS",
        ),
        (
            [986.0, 1000.0],
            w,
            false,
            false,
            "a lead of exactly 14 keeps Workingset",
        ),
        ([500.0, 500.0], w, false, false, "a tie keeps Workingset"),
        (
            [10.0, 14.0],
            w,
            false,
            false,
            "a lead of 4 keeps Workingset",
        ),
        ([10.0, 14.2], w, false, true, "a lead of 4.2 turns to LIRS"),
        ([14.0, 10.0], w, true, true, "a lead of 4 keeps LIRS"),
        (
            [14.2, 10.0],
            w,
            true,
            false,
            "a lead of 4.2 turns to Workingset",
        ),
        ([0.0, 1000.0], w, false, true, "far behind: LIRS"),
    ];
    for (score, seen, lirs, want, why) in cases {
        assert_eq!(
            sim::verdict(
                [score[0], score[1], 0.0, 0.0],
                4096.0,
                seen,
                usize::from(lirs)
            ),
            usize::from(want),
            "{score:?}, seen {seen}, LIRS {lirs}: {why}"
        );
    }
}

/// LRU's edges in the verdict: taken up only from `DUEL_LRU_WARMUP`
/// sampled accesses on, and only past `DUEL_MARGIN` plus
/// `DUEL_LRU_MARGIN_SHARE` of the lesser of its hits and misses over the
/// better of the others, and never past less than the usual margin (at
/// 1000 hits: 44 of 4096 accesses, 28 of 1600, 14 of 1100), however far
/// the running policy trails; left for the better of the others once that
/// one leads LRU by the usual margin (14).
#[test]
fn the_verdict_takes_up_lru_only_past_its_larger_margin() {
    let (w, lw) = (DUEL_WARMUP, DUEL_LRU_WARMUP);
    let (ws, lirs, lru) = (0, 1, 2);
    // (Workingset's, LIRS's and LRU's hits, sampled accesses, running,
    // the verdict, why), of 4096 accesses.
    let cases: [([f64; 4], u64, usize, usize, &str); 8] = [
        (
            [900.0, 800.0, 1000.0, 0.0],
            lw - 1,
            lirs,
            ws,
            "LRU not yet: Workingset",
        ),
        (
            [900.0, 800.0, 1000.0, 0.0],
            lw,
            lirs,
            lru,
            "a lead of 100 over Workingset",
        ),
        (
            [956.5, 800.0, 1000.0, 0.0],
            lw,
            lirs,
            ws,
            "a lead of 43.5 over Workingset",
        ),
        ([955.5, 800.0, 1000.0, 0.0], lw, lirs, lru, "a lead of 44.5"),
        (
            [956.5, 0.0, 1000.0, 0.0],
            lw,
            lirs,
            ws,
            "LIRS trailing by 1000 changes nothing",
        ),
        (
            [1000.0, 990.0, 995.0, 0.0],
            w.max(lw),
            lru,
            lru,
            "Workingset by 5: LRU stays",
        ),
        (
            [1000.0, 990.0, 985.0, 0.0],
            w.max(lw),
            lru,
            ws,
            "Workingset by 15: leaves LRU",
        ),
        (
            [0.0, 0.0, 0.5, 0.0],
            w.max(lw),
            lru,
            ws,
            "no hits: Workingset",
        ),
    ];
    for (score, seen, now, want, why) in cases {
        assert_eq!(
            sim::verdict(score, 4096.0, seen, now),
            want,
            "{score:?}, seen {seen}, running {now}: {why}"
        );
    }
    // Fewer misses than hits: 1000 hits of 1600 accesses (4 + 4% of 600
    // misses), of 1100 (4 + 4% of 100 is under the usual 4 + 1% of 1000).
    // (Workingset's hits, accesses, the verdict.)
    let misses: [(f64, f64, usize); 4] = [
        (972.0, 1600.0, ws),
        (971.5, 1600.0, lru),
        (986.0, 1100.0, ws),
        (985.5, 1100.0, lru),
    ];
    for (workingset, window, want) in misses {
        assert_eq!(
            sim::verdict([workingset, 800.0, 1000.0, 0.0], window, lw, lirs),
            want,
            "Workingset {workingset}, LRU 1000 of {window}"
        );
    }
}

/// `LirsTinyLfu` stands with `Workingset` and `Lirs` as one of the
/// others while LIRS runs (with admission or without) and once it leads
/// `Lirs` by the usual margin (4 + 1% of its hits): then taken up past
/// that margin over what runs, and it holds LRU to LRU's larger margin as
/// the others do. From `Workingset`, the shards turn to `Lirs` first.
#[test]
fn the_verdict_weighs_lirs_with_admission_as_one_of_the_others() {
    let s = DUEL_WARMUP.max(DUEL_LRU_WARMUP);
    let (ws, lirs, lru, tlfu) = (0, 1, 2, 3);
    // (Workingset's, LIRS's, LRU's and LirsTinyLfu's hits, running, the
    // verdict, why), of 4096 accesses.
    let cases: [([f64; 4], usize, usize, &str); 11] = [
        (
            [900.0, 990.0, 0.0, 1000.0],
            lirs,
            lirs,
            "LIRS by 10 only: LIRS",
        ),
        ([900.0, 985.5, 0.0, 1000.0], lirs, tlfu, "LIRS by 14.5: it"),
        (
            [800.0, 900.0, 0.0, 913.0],
            lirs,
            lirs,
            "a lead of 13 keeps LIRS",
        ),
        (
            [800.0, 900.0, 0.0, 914.5],
            lirs,
            tlfu,
            "a lead of 14.5 turns to it",
        ),
        (
            [800.0, 913.0, 0.0, 900.0],
            tlfu,
            tlfu,
            "LIRS by 13: it stays",
        ),
        (
            [800.0, 915.5, 0.0, 900.0],
            tlfu,
            lirs,
            "LIRS by 15.5: back to LIRS",
        ),
        (
            [900.0, 900.0, 0.0, 900.0],
            lirs,
            lirs,
            "a three-way tie keeps LIRS",
        ),
        (
            [900.0, 800.0, 0.0, 1000.0],
            lirs,
            tlfu,
            "far ahead of Workingset",
        ),
        ([900.0, 800.0, 0.0, 1000.0], ws, ws, "not from Workingset"),
        (
            [800.0, 900.0, 0.0, 1000.0],
            ws,
            lirs,
            "from Workingset, LIRS first",
        ),
        (
            [900.0, 800.0, 1000.0, 990.0],
            tlfu,
            tlfu,
            "LRU by 10 is not enough",
        ),
    ];
    for (score, now, want, why) in cases {
        assert_eq!(
            sim::verdict(score, 4096.0, s, now),
            want,
            "{score:?}, running {now}: {why}"
        );
    }
    // LRU must lead LIRS with admission while it runs, even short of its
    // margin over LIRS: by 37 here, under LRU's margin of 45.9.
    assert_eq!(
        sim::verdict([0.0, 1000.0, 1047.0, 1010.0], 4096.0, s, tlfu),
        tlfu
    );
    // At the margin's edges, decided by what LRU must lead: LIRS with
    // admission exactly at its margin over LIRS (14 of 1000) is not the
    // best of the others, so LRU, 54 over LIRS, is taken up; LIRS with
    // admission level with Workingset is not either; nor, on a tie of
    // Workingset and LIRS, is LIRS.
    assert_eq!(
        sim::verdict([900.0, 986.0, 1040.0, 1000.0], 4096.0, s, lirs),
        lru
    );
    assert_eq!(
        sim::verdict([1000.0, 900.0, 0.0, 1000.0], 4096.0, s, lirs),
        ws
    );
    assert_eq!(sim::verdict([900.0, 900.0, 0.0, 0.0], 4096.0, s, lru), ws);
    assert_eq!(sim::CONTENDERS[tlfu], Policy::LirsTinyLfu);
    assert_eq!(sim::CONTENDERS[lru], Policy::Lru);
}

/// Where the whole window keeps what runs, the recent one may turn the
/// shards, by the same rules (LRU's larger margin and warm-up, and
/// `LirsTinyLfu` only from LIRS, included), to the policy the whole
/// window ranks first of the four, ahead of what runs by `DUEL_MARGIN`
/// (4); never to one that is not (even where the first is one what runs
/// may not take up), nor on a recent window without hits; and a turn the
/// whole window makes stands whatever the recent one says.
#[test]
fn the_recent_window_turns_the_shards_only_to_the_whole_windows_first() {
    let s = DUEL_WARMUP.max(DUEL_LRU_WARMUP);
    let (ws, lirs, lru, tlfu) = (0, 1, 2, 3);
    let recent_window = f64::from(DUEL_RECENT_WINDOW);
    assert_eq!(recent_window, 1024.0, "the cases below are of 1024");
    assert_eq!(DUEL_MARGIN, 4.0);
    // (hits over the whole window of 4096, over the recent one, running,
    // the verdict, why).
    type Case = ([f64; 4], [f64; 4], usize, usize, &'static str);
    let cases: [Case; 12] = [
        (
            [1000.0, 1010.0, 0.0, 0.0],
            [250.0, 270.0, 0.0, 0.0],
            ws,
            lirs,
            "LIRS by 10 of a margin of 14.1, by 20 of 6.7 lately: LIRS",
        ),
        (
            [1000.0, 1010.0, 0.0, 0.0],
            [250.0, 256.0, 0.0, 0.0],
            ws,
            ws,
            "LIRS by 6 of 6.6 lately: Workingset stays",
        ),
        (
            [1010.0, 1000.0, 0.0, 0.0],
            [250.0, 270.0, 0.0, 0.0],
            ws,
            ws,
            "LIRS ahead lately but behind over the whole: Workingset stays",
        ),
        (
            [1000.0, 1004.0, 0.0, 0.0],
            [250.0, 270.0, 0.0, 0.0],
            ws,
            ws,
            "LIRS ahead lately, by only 4 over the whole: Workingset stays",
        ),
        (
            [1000.0, 1020.0, 0.0, 0.0],
            [270.0, 250.0, 0.0, 0.0],
            ws,
            lirs,
            "the whole window's turn stands",
        ),
        (
            [1010.0, 1000.0, 0.0, 0.0],
            [0.5, 0.0, 0.0, 0.0],
            lirs,
            lirs,
            "no recent hits: LIRS stays",
        ),
        (
            [1000.0, 900.0, 1030.0, 0.0],
            [250.0, 225.0, 280.0, 0.0],
            ws,
            lru,
            "LRU by 30 of 45.2, by 30 of 15.2 lately: LRU",
        ),
        (
            [1000.0, 900.0, 1030.0, 0.0],
            [250.0, 225.0, 262.0, 0.0],
            ws,
            ws,
            "LRU by 12 of 14.5 lately: Workingset stays",
        ),
        (
            [1000.0, 1013.0, 1005.0, 0.0],
            [250.0, 255.0, 280.0, 0.0],
            ws,
            ws,
            "LRU first lately, LIRS first over the whole: Workingset stays",
        ),
        (
            [1000.0, 1010.0, 0.0, 1020.0],
            [250.0, 270.0, 0.0, 280.0],
            ws,
            ws,
            "LIRS with admission first over the whole, which Workingset may not take up: Workingset stays",
        ),
        (
            [1000.0, 1010.0, 0.0, 1020.0],
            [250.0, 270.0, 0.0, 280.0],
            lirs,
            tlfu,
            "from LIRS, LIRS with admission by 10 of 14.2, by 10 of 6.8 lately: it",
        ),
        (
            [1000.0, 990.0, 990.0, 0.0],
            [240.0, 200.0, 220.0, 0.0],
            lru,
            ws,
            "Workingset by 10 of 14, by 20 of 6.4 lately: leaves LRU",
        ),
    ];
    for (whole, recent, now, want, why) in cases {
        assert_eq!(
            sim::verdict_of_both((whole, 4096.0), (recent, recent_window), s, now, None),
            want,
            "{whole:?} / {recent:?}, running {now}: {why}"
        );
    }
    // LRU's warm-up holds for the recent window too.
    let (whole, recent) = ([1000.0, 900.0, 1030.0, 0.0], [250.0, 225.0, 280.0, 0.0]);
    assert_eq!(
        sim::verdict_of_both(
            (whole, 4096.0),
            (recent, recent_window),
            DUEL_LRU_WARMUP - 1,
            ws,
            None
        ),
        ws
    );
}

/// Neither window turns the shards straight back to the policy they just
/// left (`left`): the recent one never does, and the whole one asks twice
/// the lead it asks otherwise; a policy left earlier, or what runs, is
/// judged as before.
#[test]
fn the_shards_turn_back_to_what_they_left_only_for_twice_the_lead() {
    let s = DUEL_WARMUP.max(DUEL_LRU_WARMUP);
    let (ws, lirs, lru) = (0, 1, 2);
    let both = |whole: [f64; 4], recent: [f64; 4], now, left| {
        sim::verdict_of_both((whole, 4096.0), (recent, 1024.0), s, now, left)
    };
    // Workingset first over the whole by 10 (under its margin of 14.1),
    // by 20 of 6.7 lately: the recent window turns the shards to it, but
    // not back to it.
    let (whole, recent) = ([1010.0, 0.0, 1000.0, 0.0], [270.0, 0.0, 250.0, 0.0]);
    assert_eq!(both(whole, recent, lru, None), ws);
    assert_eq!(both(whole, recent, lru, Some(lirs)), ws, "another left");
    assert_eq!(both(whole, recent, lru, Some(ws)), lru, "just left");
    // Over the whole window, LIRS by 20 of a margin of 14.2: taken up,
    // unless just left, which asks it twice (28.4).
    let (whole, recent) = ([1000.0, 1020.0, 0.0, 0.0], [0.0; 4]);
    assert_eq!(both(whole, recent, ws, None), lirs);
    assert_eq!(both(whole, recent, ws, Some(lirs)), ws, "just left");
    let whole = [1000.0, 1030.0, 0.0, 0.0];
    assert_eq!(both(whole, recent, ws, Some(lirs)), lirs, "by 30: back");
    // LRU by 100 over Workingset, where it is asked 83.8 (4 + 4% of its
    // 1996 misses): taken up, unless just left (about twice that).
    let whole = [2000.0, 1500.0, 2100.0, 0.0];
    assert_eq!(both(whole, recent, ws, None), lru);
    assert_eq!(both(whole, recent, ws, Some(lru)), ws, "just left");
    // The hold weighs only the return to what was left (a first version
    // lowered the left policy's score before every comparison, which
    // failed both cases below): running LRU, having left Workingset,
    // which leads by 55 (over its doubled 50.1), Workingset it is, not
    // LIRS (whose 30 over LRU would take it up were Workingset's score
    // lowered); and a Workingset 2.5 ahead of LIRS (under its margin of
    // 4.03) stays out, where lowered by that margin every score would be
    // under 1 and the no-hit rule would turn back to it.
    let whole = [2105.0, 2080.0, 2050.0, 0.0];
    assert_eq!(both(whole, recent, lru, Some(ws)), ws);
    assert_eq!(both([3.0, 0.5, 0.5, 0.0], recent, lirs, Some(ws)), lirs);
    // Held back for the recent window's 1024 sampled accesses after the
    // turn, no longer.
    let at = 5000;
    assert_eq!(sim::just_left(Some((lru, at)), at), Some(lru));
    assert_eq!(sim::just_left(Some((lru, at)), at + 1023), Some(lru));
    assert_eq!(sim::just_left(Some((lru, at)), at + 1024), None);
    assert_eq!(sim::just_left(None, at), None);
}

/// The duel counts its sampled accesses as it counts each simulation's
/// hits (a decaying count over about `DUEL_WINDOW`), so that the window
/// less a score is that simulation's misses: one key requested again and
/// again missed once, the first time.
#[test]
fn the_window_less_a_score_is_the_misses() {
    let d = sim::Duel::new(1 << 20);
    let s = sim::Sampled::new();
    let n = 1000;
    for _ in 0..n {
        d.hit(&s, 5, u32::MAX);
    }
    assert_eq!(d.seen(), n);
    for (misses, window) in d
        .misses()
        .into_iter()
        .zip([DUEL_WINDOW, DUEL_RECENT_WINDOW])
    {
        let decay = 1.0 - 1.0 / f64::from(window);
        let first = decay.powi(n as i32 - 1);
        for (k, misses) in misses.into_iter().enumerate() {
            assert!(
                (misses - first).abs() < 1e-6,
                "simulation {k}, window {window}: {misses} misses, not {first}"
            );
        }
    }
}

/// A key hit again and again is replayed in the simulations until it has
/// hit in every one `DUEL_REPEATS` times in a row (its references then
/// saturated: one more hit changes nothing), and from there only scored,
/// as a replay would score it (`the_window_less_a_score_is_the_misses`
/// checks the scores); another key in between, a miss, or a resize
/// starts the count again.
#[test]
fn a_key_hit_again_and_again_is_scored_without_replay() {
    let d = sim::Duel::new(1 << 20);
    let s = sim::Sampled::new();
    let run = u64::from(sim::DUEL_REPEATS) + 1;
    for _ in 0..100 {
        d.hit(&s, 5, u32::MAX);
    }
    // The first access misses (the key is inserted), the next
    // `DUEL_REPEATS` hit; every later one counts as a hit too.
    assert_eq!((d.seen(), d.replays()), (100, run));
    assert_eq!(d.lookups(), [(99, 1); 4]);
    d.hit(&s, 6, u32::MAX);
    let [before, _] = d.misses();
    d.hit(&s, 5, u32::MAX);
    let [after, _] = d.misses();
    assert_eq!(d.replays(), run + 2, "a new key, then the old one again");
    for k in 0..4 {
        assert!(after[k] < before[k], "simulation {k}: key 5 still hits");
    }
    for _ in 0..10 {
        d.hit(&s, 5, u32::MAX);
    }
    let replayed = run + 2 + u64::from(sim::DUEL_REPEATS) - 1;
    assert_eq!(d.replays(), replayed);
    // The same size: the same sample rate, the simulations kept.
    d.resize(1 << 20);
    d.hit(&s, 5, u32::MAX);
    assert_eq!(d.replays(), replayed + 1, "a resize starts the count again");
}

/// A write of a key outside the sample still hands the shard's sampled
/// hits to the simulations (a cache whose sample is 1 key in 4096 rarely
/// writes a sampled key).
#[test]
fn an_unsampled_write_hands_over_the_sampled_hits() {
    let d = sim::Duel::new(1 << 20);
    let s = sim::Sampled::new();
    for h in 1..=3 {
        s.push(h);
    }
    d.feed(&s, None, || 0);
    assert_eq!(d.seen(), 3);
    d.feed(&s, None, || 0);
    assert_eq!(d.seen(), 3, "each hit once");
}

/// A sampled hit reaches the simulations at once, in the order of the
/// cache's accesses, not at its shard's next write (held back to each
/// shard's next miss, the hits reached them out of order, and a zigzag's
/// simulations ranked the policies wrong); while another shard feeds
/// them, it waits in the shard's buffer for its next write. Between two
/// writes at most a cap of them do.
#[test]
fn a_sampled_hit_reaches_the_simulations_at_once() {
    let d = sim::Duel::new(1 << 20);
    let s = sim::Sampled::new();
    d.hit(&s, 5, 16);
    assert_eq!(d.seen(), 1, "the hit went to the simulations");
    let mut kept = Vec::new();
    s.drain(|h| kept.push(h));
    assert_eq!(kept, [], "and not to the buffer");
    {
        let _other_shard = d.feeding();
        d.hit(&s, 6, 16);
    }
    assert_eq!(d.seen(), 1, "the simulations were busy");
    d.feed(&s, None, || 0);
    assert_eq!(d.seen(), 2, "the next write handed the hit over");
    // A shard that only reads replays `cap` hits (here 16) until its
    // next write section, then no more.
    for h in 10..40 {
        d.hit(&s, h, 16);
    }
    assert_eq!(d.seen(), 18, "16 more hits, then none");
    d.feed(&s, None, || 0);
    d.hit(&s, 41, 16);
    assert_eq!(d.seen(), 19, "a write section lets hits through again");
}

/// A shard that only reads replays twice its share of the sampled keys'
/// hits (400 entries sampled 1 in 8: 100) and then none until its next
/// write: a read-only phase changes nothing the simulations rank, and
/// replaying all of it made a small cache's reads about 15% slower.
#[test]
fn a_reading_shard_replays_twice_its_sampled_share() {
    let n = 400u64;
    let d = Arc::new(sim::Duel::new(n as usize));
    let mut lv = shard(Policy::Adaptive, n).with_duel(d.clone());
    for k in 0..n {
        access(&mut lv, k);
    }
    let sampled: Vec<u64> = (0..n).filter(|&k| d.samples(hash(k))).collect();
    assert!(sampled.len() > 20, "{} sampled keys", sampled.len());
    let before = d.seen();
    for _ in 0..20 {
        for &k in &sampled {
            assert!(access(&mut lv, k), "key {k} is resident");
        }
    }
    assert_eq!(d.seen() - before, 100, "replayed between two writes");
    access(&mut lv, 1_000_000);
    let after_write = d.seen();
    assert!(access(&mut lv, sampled[0]));
    assert_eq!(d.seen(), after_write + 1, "a write lets hits through again");
}

/// A small cache's duel replays about an eighth of its accesses, not every
/// one: sampled whole, each access of a 400-entry cache cost three shards'
/// work (docs/cache.md: 0.40x `Workingset`'s read-through speed).
#[test]
fn a_small_cache_replays_an_eighth_of_its_accesses() {
    let n = 400u64;
    let d = Arc::new(sim::Duel::new(n as usize));
    assert_eq!(d.shift(), 3);
    let mut lv = shard(Policy::Adaptive, n).with_duel(d.clone());
    let mut x = 88_172_645_463_325_252u64;
    for _ in 0..16_000 {
        xorshift(&mut x);
        // Hits and misses alike: 100 hot keys (a quarter of the cache),
        // and a cold range.
        access(&mut lv, if x % 2 == 0 { x % (n / 2) } else { x % 100_000 });
    }
    let seen = d.seen();
    assert!(
        (1_000..=3_000).contains(&seen),
        "{seen} of 16000 accesses replayed"
    );
}

/// Under LIRS a hit stamps its entry with the clock now: the last access
/// that its shadow keeps when it is evicted, and from which a refault's
/// distance, and so whether it is LIR, is counted. An entry hit after the
/// clock has moved on carries the new stamp, not its insertion's.
#[test]
fn a_lirs_hit_stamps_its_entry_now() {
    let n = 64u64;
    let mut lv = shard(Policy::Lirs, n);
    for k in 0..n {
        access(&mut lv, k);
    }
    let step = 1u32 << lv.stamp_shift;
    let start = lv.lirs_now();
    // New keys turn the clock over several of the stamps' steps.
    let mut k = 1000;
    while lv.lirs_now().wrapping_sub(start) < 4 * step {
        access(&mut lv, k);
        k += 1;
        assert!(k < 1000 + 1000 * n, "the clock does not move");
    }
    // A first key still cached, stamped long ago, hit now.
    let (key, i) = (0..n)
        .find_map(|key| lv.find(hash(key), |&x| x == key).map(|i| (key, i)))
        .expect("some first key stays (the fill made it LIR)");
    assert!(lv.lirs_now().wrapping_sub(lv.stamp_of(i)) >= 2 * step);
    assert!(access(&mut lv, key));
    assert!(
        lv.lirs_now().wrapping_sub(lv.stamp_of(i)) <= step,
        "stamp {} against now {}",
        lv.stamp_of(i),
        lv.lirs_now()
    );
}

/// A LIRS stamp keeps 16 bits of the clock's units: an entry's last
/// access reads back exactly for `STAMP_OLDEST` units, and after that
/// no younger than that (it never wraps round to read as new) and no
/// older than twice that; a pass over the stamps runs once in
/// `STAMP_OLDEST` units, not at every eviction. In shards where a unit
/// is one tick of the clock and where it is eight, and with the clock
/// ticked three times between passes' checks (no path does today: the
/// pass must not count on seeing every tick).
#[test]
fn a_lirs_stamp_reads_old_entries_as_old_not_new() {
    for (n, ticks) in [(64u64, 1u32), (64, 3), (512, 1), (512, 3)] {
        let mut lv = shard(Policy::Lirs, n);
        for k in 0..n {
            access(&mut lv, k);
        }
        let i = slot(&lv, 0).unwrap();
        let (shift, t0) = (lv.stamp_shift, lv.shadows.now());
        assert_eq!(shift, if n == 64 { 0 } else { 3 });
        let round = |t: u32| t >> shift << shift;
        let oldest = u32::from(STAMP_OLDEST) << shift;
        let mut oldest_read = 0;
        let mut d = 0;
        while d < 4 << (16 + shift) {
            for _ in 0..ticks {
                lv.shadows.age_nonresident();
            }
            d += ticks;
            // As an eviction does.
            lv.age_stamps();
            let age = lv.lirs_now().wrapping_sub(lv.stamp_of(i));
            let exact = round(t0 + d).wrapping_sub(round(t0));
            assert!(
                age == exact || (exact > oldest && (oldest..2 * oldest).contains(&age)),
                "{n} entries, {ticks} ticks an eviction: {d} ticks after its last \
                 access entry 0 reads {age} old"
            );
            oldest_read = oldest_read.max(age);
        }
        assert!(
            oldest_read > oldest + oldest / 2,
            "{n} entries: ages read up to {oldest_read}: a pass at every eviction"
        );
    }
}

/// Under LIRS with admission a key refused ticks the clock as an
/// eviction does, and ages the stamps as one: after 70 000 refusals and
/// no eviction (a scan of new keys, each refused), the fill's entries
/// read as old as a stamp can (without the pass at a refusal they
/// wrapped and read as new); and through `insert_new`, where refusals
/// and evictions mix, likewise.
#[test]
fn refused_keys_age_the_lirs_stamps_too() {
    let oldest = u32::from(STAMP_OLDEST);
    let fill_ages = |lv: &Lruvec<u64, u64>| -> Vec<u32> {
        (0..64)
            .filter_map(|first| slot(lv, first))
            .map(|i| lv.lirs_now().wrapping_sub(lv.stamp_of(i)))
            .collect()
    };
    let mut lv = shard(Policy::LirsTinyLfu, 64);
    for k in 0..64 {
        access(&mut lv, k);
    }
    for _ in 0..70_000 {
        lv.tick_refused();
    }
    let ages = fill_ages(&lv);
    assert_eq!(ages.len(), 64);
    assert!(
        ages.iter().all(|a| (oldest..2 * oldest).contains(a)),
        "refusals alone: the fill's entries read {ages:?} old"
    );

    let mut lv = shard(Policy::LirsTinyLfu, 64);
    for k in 0..64 {
        access(&mut lv, k);
    }
    let (start, mut k) = (lv.not_admitted, 1_000_000);
    while lv.not_admitted - start < 70_000 {
        access(&mut lv, k);
        k += 1;
        assert!(k < 1_200_000, "new keys were not refused");
    }
    let ages = fill_ages(&lv);
    assert!(!ages.is_empty(), "the fill's keys all left");
    assert!(
        ages.iter().all(|a| (oldest..2 * oldest).contains(a)),
        "refusals among evictions: the fill's entries read {ages:?} old"
    );
}

/// At the coarsest unit (2^16 evictions: shards of 4 Mi entries and
/// more), a stamp's 16 bits wrap where the units do: an entry's age reads
/// back exactly across the clock's wrap at 2^32, and then as old as a
/// stamp can, never as new (with units of 2^20 evictions, the old cap,
/// a stamp kept 4 bits more than the units had, and aged entries read as
/// used now).
#[test]
fn the_coarsest_stamps_read_back_across_the_clocks_wrap() {
    assert_eq!(Lruvec::<u64, u64>::stamp_shift_for(usize::MAX), 16);
    let mut lv = shard(Policy::Lirs, 64);
    for k in 0..64 {
        access(&mut lv, k);
    }
    let i = slot(&lv, 0).unwrap();
    lv.stamp_shift = 16;
    // Three units before the wrap, every entry used now.
    let t0 = u32::MAX - (3 << 16);
    lv.shadows.set_now(t0);
    lv.keep_stamps();
    let oldest = u32::from(STAMP_OLDEST);
    for d in 1..=(3 * oldest) {
        // One unit on, as evictions move it.
        lv.shadows.set_now(t0.wrapping_add(d << 16));
        lv.age_stamps();
        let age = (lv.lirs_now().wrapping_sub(lv.stamp_of(i))) >> 16;
        assert!(
            age == d || (d > oldest && (oldest..2 * oldest).contains(&age)),
            "{d} units on, entry 0 reads {age} units old"
        );
    }
}

/// `set_capacity` carries each LIRS stamp over to the new size's unit:
/// an entry's age reads the same, to a unit, after the shard grows a
/// thousandfold, and shrunk back it reads as old as a stamp can (kept in
/// the unit the shard was built with, the grown shard read every age
/// past 2^14 evictions as that old).
#[test]
fn a_resized_lirs_shard_keeps_its_entries_ages() {
    let mut lv = shard(Policy::Lirs, 64);
    for k in 0..64 {
        access(&mut lv, k);
    }
    let i = slot(&lv, 0).unwrap();
    for _ in 0..40_000 {
        lv.shadows.age_nonresident();
    }
    let age = |lv: &Lruvec<u64, u64>| lv.lirs_now().wrapping_sub(lv.stamp_of(i));
    assert_eq!(age(&lv), 40_000);
    let mut out = Evicted::new();
    lv.set_capacity(64 << 10, 64 << 10, &mut out);
    assert_eq!(lv.stamp_shift, 10);
    // An eviction: the clock ticks and the stamps may age.
    lv.shadows.age_nonresident();
    lv.age_stamps();
    assert!(
        age(&lv).abs_diff(40_001) < 1 << 10,
        "grown, entry 0 reads {} old",
        age(&lv)
    );
    lv.set_capacity(64, 64, &mut out);
    assert_eq!(lv.stamp_shift, 0);
    assert_eq!(age(&lv), u32::from(STAMP_OLDEST), "shrunk back");
    assert!(out.is_empty());
    lv.check().unwrap();
}

/// An adaptive shard of `n` entries made to run LRU, and `count` keys
/// outside the duel's sample (whose accesses leave its verdict alone).
fn running_lru(n: u64, count: usize) -> (Lruvec<u64, u64>, Vec<u64>) {
    let d = Arc::new(sim::Duel::new(n as usize));
    let lv = shard(Policy::Adaptive, n).with_duel(d.clone());
    d.run(Policy::Lru);
    // 7 keys in 8 are outside the sample: a bounded search (a broken
    // sample fails here rather than searching on for good).
    let keys: Vec<u64> = (0..16 * count as u64)
        .filter(|&k| !d.samples(hash(k)))
        .take(count)
        .collect();
    assert_eq!(keys.len(), count, "unsampled keys among {}", 16 * count);
    (lv, keys)
}

/// [`running_lru`] holding its first `n` keys, the first the least recent,
/// and one key more to insert.
fn full_running_lru(n: u64) -> (Lruvec<u64, u64>, Vec<u64>) {
    let (mut lv, keys) = running_lru(n, n as usize + 1);
    for &k in &keys[..n as usize] {
        insert(&mut lv, k);
    }
    (lv, keys)
}

/// A shard running LRU for `Adaptive` moves each entry hit under the read
/// lock to the head at its next write section (an insertion, or the
/// lookup that fills the batch), in the order of first hits: on random
/// requests, on zigzag sweeps and on skewed requests (whose runs of
/// hits fill batches)
/// its hits are those of exact LRU with the moves so batched (a
/// sequential model). CLOCK's counts alone (what the shard ran before)
/// missed other keys.
#[test]
fn an_adaptive_shard_running_lru_moves_its_hits_to_the_head() {
    let n = 64u64;
    let (mut lv, keys) = running_lru(n, 2 * n as usize);
    // Most recent at the front.
    let mut model: std::collections::VecDeque<u64> = Default::default();
    let mut batch: Vec<u64> = Vec::new();
    let drain = |model: &mut std::collections::VecDeque<u64>, batch: &mut Vec<u64>| {
        for &b in batch.iter() {
            model.retain(|&m| m != b);
            model.push_front(b);
        }
        batch.clear();
    };
    let (mut x, mut y) = (0x2545_f491_4f6c_dd1d_u64, 0x9e37_79b9_7f4a_7c15_u64);
    let sweep = 3 * n as usize / 2;
    let zigzag = (0..sweep).chain((0..sweep).rev()).cycle();
    let requests = (0..6000)
        .map(|_| {
            xorshift(&mut x);
            (x % keys.len() as u64) as usize
        })
        .chain(zigzag.take(6 * sweep))
        .chain((0..20_000).map(|_| {
            // Skewed: the product of two uniform picks, so that low keys
            // are requested most and runs of hits are long.
            xorshift(&mut y);
            let m = keys.len() as u64;
            ((y % m) * ((y >> 32) % m) / m) as usize
        }));
    for (step, r) in requests.enumerate() {
        let k = keys[r];
        let want = model.contains(&k);
        if want {
            if !batch.contains(&k) {
                batch.push(k);
                if batch.len() == LRU_MOVES {
                    drain(&mut model, &mut batch);
                }
            }
        } else {
            drain(&mut model, &mut batch);
            if model.len() == n as usize {
                model.pop_back();
            }
            model.push_front(k);
        }
        assert_eq!(access(&mut lv, k), want, "request {step}, key {k}");
        assert_eq!(lv.runs(), Policy::Lru);
    }
    lv.check().unwrap();
}

/// A hit that finds the batch full (its drainer has not taken the write
/// lock yet) keeps its count: a second chance, as CLOCK gives, so no
/// entry hit since the last write section is evicted while one that was
/// not remains.
#[test]
fn hits_past_a_full_batch_keep_a_second_chance() {
    let n = 64u64;
    let (mut lv, keys) = full_running_lru(n);
    let hit = LRU_MOVES + 8;
    let filled: Vec<bool> = keys[..hit]
        .iter()
        .map(|&k| lv.mark_accessed(slot(&lv, k).unwrap()))
        .collect();
    assert_eq!(
        filled.iter().position(|&f| f),
        Some(LRU_MOVES - 1),
        "the hit that took the last slot, alone, drains"
    );
    assert_eq!(filled.iter().filter(|&&f| f).count(), 1);
    insert(&mut lv, keys[n as usize]);
    let gone: Vec<u64> = keys[..n as usize]
        .iter()
        .copied()
        .filter(|&k| slot(&lv, k).is_none())
        .collect();
    assert_eq!(gone, [keys[hit]], "the least recent key not hit");
    lv.check().unwrap();
}

/// A batched index whose entry holds no count (its count spent by
/// reclaim, or the slot freed and taken by an entry never hit) is not
/// moved: the least recent entry stays the next victim.
#[test]
fn a_batched_entry_without_a_count_is_not_moved() {
    let n = 64u64;
    let (mut lv, keys) = full_running_lru(n);
    let oldest = lv.lists[INACTIVE].tail;
    assert_eq!(lv.node(oldest).key, keys[0]);
    assert!(!lv.moves.as_ref().unwrap().push(oldest + 1));
    lv.drain_moves();
    assert_eq!(lv.lists[INACTIVE].tail, oldest, "moved without a count");
    insert(&mut lv, keys[n as usize]);
    assert!(lv.find(hash(keys[0]), |&x| x == keys[0]).is_none());
    lv.check().unwrap();
}

/// Moves batched before another write section removed entries (the
/// slab moving its last entries into the holes) name slots past its end:
/// the drain skips them (an in-bounds slot holding an entry without a
/// count: the test above), and leaves the shard consistent.
#[test]
fn moves_batched_before_a_removal_leave_the_shard_consistent() {
    let n = 64u64;
    let (mut lv, keys) = full_running_lru(n);
    for &k in &keys[n as usize - 8..n as usize] {
        assert!(access(&mut lv, k));
    }
    for &k in &keys[..8] {
        let i = slot(&lv, k).unwrap();
        let mut fix = NIL;
        lv.remove(i, &mut fix);
    }
    insert(&mut lv, keys[n as usize]);
    lv.check().unwrap();
    assert_eq!(lv.len(), n as usize - 7);
}

/// A trained `Workingset` shard's statistics, for the warm-restart tests.
fn trained(n: u64) -> Learned {
    let mut lv = shard(Policy::Workingset, n);
    let mut x = 88_172_645_463_325_252u64;
    for _ in 0..40 * n {
        xorshift(&mut x);
        let k = if x % 3 == 0 { x % (n / 2) } else { x % (8 * n) };
        match slot(&lv, k) {
            Some(i) => {
                let _full = lv.mark_accessed(i);
            }
            None => insert(&mut lv, k),
        }
    }
    lv.learned().expect("mostly evidence")
}

/// `Learned`'s bytes: a trained shard's statistics come back as they
/// were, thrashing or not; a number that is not finite is refused; one
/// out of bounds is brought within them.
#[test]
fn learned_statistics_round_trip_through_their_bytes() {
    let l = trained(256);
    for thrashing in [false, true] {
        let l = Learned { thrashing, ..l };
        let mut b = [0u8; LEARNED_BYTES];
        assert_eq!(l.encode(&mut b), thrashing);
        assert_eq!(Learned::decode(&b, thrashing), Some(l));
    }
    let mut b = [0u8; LEARNED_BYTES];
    let _ = l.encode(&mut b);
    for at in [0, 8] {
        let mut bad = b;
        bad[at..at + 8].copy_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(Learned::decode(&bad, false), None, "byte {at}");
    }
    for at in [16, 20] {
        let mut bad = b;
        bad[at..at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
        assert_eq!(Learned::decode(&bad, false), None, "byte {at}");
    }
    let mut wild = [0u8; LEARNED_BYTES];
    wild[..8].copy_from_slice(&9.0f64.to_le_bytes());
    wild[8..16].copy_from_slice(&(-3.0f64).to_le_bytes());
    wild[16..20].copy_from_slice(&2.0f32.to_le_bytes());
    wild[20..].copy_from_slice(&(-1.0f32).to_le_bytes());
    let w = Learned::decode(&wild, true).expect("finite");
    assert_eq!(
        (w.inactive_share, w.reach, w.refault_share, w.distant_share),
        (INACTIVE_MAX, REACH_MIN, 1.0, 0.0)
    );
}

/// The mean of shards' statistics: each field's mean, thrashing if most
/// shards thrash; nothing from no shards.
#[test]
fn learned_statistics_average_over_shards() {
    let a = Learned {
        inactive_share: 0.01,
        reach: 0.5,
        refault_share: 0.2,
        distant_share: 0.0,
        thrashing: true,
    };
    let b = Learned {
        inactive_share: 0.03,
        reach: 1.5,
        refault_share: 0.6,
        distant_share: 0.4,
        thrashing: false,
    };
    let m = Learned::mean(&[a, b, b]).expect("three shards");
    let close = |x: f64, y: f64| (x - y).abs() < 1e-6;
    assert!(close(m.inactive_share, 0.07 / 3.0), "{m:?}");
    assert!(close(m.reach, 3.5 / 3.0), "{m:?}");
    assert!(close(f64::from(m.refault_share), 1.4 / 3.0), "{m:?}");
    assert!(close(f64::from(m.distant_share), 0.8 / 3.0), "{m:?}");
    assert!(!m.thrashing, "one of three thrashes");
    assert!(Learned::mean(&[a, a, b]).expect("three").thrashing);
    assert!(
        !Learned::mean(&[a, b]).expect("two").thrashing,
        "half is not most"
    );
    assert_eq!(Learned::mean(&[]), None);
}

/// A shard reports what it learned under the policy it runs (the
/// statistics only under `Workingset` once they are evidence, the HIR
/// share only under LIRS), and one taking up a saved state adopts the
/// duel's verdict at once under `Adaptive` (with stamps under LIRS, and
/// only there, once the duel's sample has hit), takes the statistics of
/// the policy it runs and hands them on at once; a shard of a fixed
/// policy keeps its policy; a shard that has evicted keeps what it
/// learned.
#[test]
fn a_shard_reports_and_resumes_what_it_learned() {
    let n = 256u64;
    let l = trained(n);
    let fresh = shard(Policy::Workingset, n);
    assert_eq!(fresh.learned_state(), (None, None), "nothing learned yet");
    let mut lirs = shard(Policy::Lirs, n);
    assert_eq!(
        lirs.learned_state(),
        (None, None),
        "the start is not learned"
    );
    for k in 0..8 * n {
        insert(&mut lirs, k);
    }
    assert!(lirs.learned().is_some(), "evidence enough");
    let own = Some(lirs.hir_share);
    assert_eq!(
        lirs.learned_state(),
        (None, own),
        "not Workingset's to report"
    );

    let d = Arc::new(sim::Duel::new(n as usize));
    d.resume(Policy::Lirs, true);
    let mut lv = shard(Policy::Adaptive, n).with_duel(d.clone());
    lv.resume(Some(l), Some(LIRS_HIR_MIN));
    assert_eq!(lv.runs(), Policy::Lirs);
    assert!(lv.stamped, "LIRS after a sample that hit keeps stamps");
    assert_eq!(lv.hir_share, LIRS_HIR_MIN);
    assert_eq!(lv.learned_state(), (None, None), "no eviction yet");
    d.run(Policy::Workingset);
    lv.resume(Some(l), None);
    assert_eq!(lv.runs(), Policy::Workingset);
    assert!(!lv.stamped, "no stamps but under LIRS");
    assert_eq!(lv.learned(), Some(l), "handed on before evidence");
    assert_eq!(lv.learned_state(), (Some(l), None));
    d.run(Policy::Lirs);
    lv.resume(None, None);
    d.run(Policy::Workingset);
    lv.resume(None, None);
    assert_eq!(
        lv.learned(),
        None,
        "the saved statistics left with Workingset"
    );

    let mut fixed = shard(Policy::Workingset, n);
    fixed.resume(Some(l), Some(0.01));
    assert_eq!(fixed.runs(), Policy::Workingset);
    assert_eq!(fixed.learned(), Some(l));
    assert_eq!(fixed.hir_share, LIRS_HIR, "no LIRS here: unchanged");
    let mut fixed = shard(Policy::Lirs, n);
    let reach = fixed.reach;
    fixed.resume(Some(l), Some(0.01));
    assert_eq!(fixed.runs(), Policy::Lirs);
    assert_eq!(fixed.hir_share, 0.01);
    assert_eq!(fixed.reach, reach, "no Workingset here: unchanged");

    // In use: what it learned stands.
    let mut used = shard(Policy::Workingset, n);
    for k in 0..2 * n {
        insert(&mut used, k);
    }
    let own = (used.inactive_share, used.reach, used.refault_share);
    used.resume(Some(l), None);
    assert_eq!((used.inactive_share, used.reach, used.refault_share), own);
    let own = lirs.hir_share;
    lirs.resume(None, Some(0.01));
    assert_eq!(lirs.hir_share, own, "{} evictions", lirs.evictions);
}

/// The verdict's shortcut holds what runs before the warm-up, and after
/// it while some simulation hits and none leads what runs by more than
/// `DUEL_MARGIN`; not once one does, nor while none hits.
#[test]
fn the_verdicts_shortcut_holds_within_the_margin() {
    let s = DUEL_WARMUP;
    assert!(sim::keeps(&[0.0; 4], s - 1, 0), "warming up");
    assert!(!sim::keeps(&[0.0; 4], s, 0), "no simulation hits");
    assert!(!sim::keeps(&[0.5, 0.9, 0.0, 0.0], s, 1), "none hits once");
    assert!(sim::keeps(&[0.5, 1.0, 0.0, 0.0], s, 1));
    let at = DUEL_MARGIN;
    assert!(sim::keeps(&[100.0, 100.0 + at, 90.0, 0.0], s, 0));
    assert!(sim::keeps(&[100.0, 100.0 + at, 90.0, 0.0], s, 1));
    assert!(!sim::keeps(&[100.0, 100.5 + at, 90.0, 0.0], s, 0));
    assert!(!sim::keeps(&[100.0, 90.0, 90.0, 100.5 + at], s, 0));
    assert!(!sim::keeps(&[100.0, 90.0, 100.5 + at, 0.0], s, 1));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// Wherever [`sim::keeps`] says what runs stays, the whole verdict
    /// keeps it too, whatever the window (the recent one a quarter of
    /// it, as their decays make them), the recent scores, the policy just
    /// left and the sampled accesses seen: the shortcut changes no
    /// verdict. Scores are drawn close to what runs (up to 200 behind, up
    /// to 8 ahead), near zero and near the window, where the rules differ
    /// most.
    #[test]
    fn the_verdicts_shortcut_keeps_only_what_the_verdict_keeps(
        now in 0usize..4,
        window in proptest::prop_oneof![8.0f64..1024.0, 1024.0f64..4096.0],
        base in proptest::prop_oneof![0.0f64..0.001, 0.0f64..1.0, 0.99f64..1.0],
        lead in proptest::array::uniform4(-200.0f64..8.0),
        recent_base in proptest::prop_oneof![0.0f64..0.003, 0.0f64..1.0],
        recent_lead in proptest::array::uniform4(-60.0f64..24.0),
        seen in 0u64..2 * DUEL_LRU_WARMUP,
        left in proptest::option::of(0usize..4),
    ) {
        let base = base * window;
        let mut whole = lead.map(|d| (base + d).clamp(0.0, window));
        whole[now] = base;
        let recent_window = window / 4.0;
        let recent_base = recent_base * recent_window;
        let recent = recent_lead.map(|d| (recent_base + d).clamp(0.0, recent_window));
        if sim::keeps(&whole, seen, now) {
            proptest::prop_assert_eq!(
                sim::verdict_of_both((whole, window), (recent, recent_window), seen, now, left),
                now,
                "{:?} of {} / {:?}, {} seen, left {:?}", whole, window, recent, seen, left
            );
        }
    }
}

/// A weighted cache's duel sizes its simulations by the entries its
/// shards report (each shard's estimate times the shards, a decaying
/// mean of the reports), sampling at the rate that suits them; reports
/// that alternate within a quarter of the size (shards whose entries
/// weigh differently) move nothing; and while a shard still samples at
/// an old rate, keys outside the new sample do not reach the simulations.
#[test]
fn a_weighted_duel_follows_the_entries_its_shards_report() {
    let d = sim::Duel::weighted(1 << 40, None, 2);
    // Before any report: the smallest cache sampled 1 key in 8.
    assert_eq!((d.shift(), d.shift_now(), d.basis()), (3, 3, 2048));
    let s = sim::Sampled::new();
    // A key in every sample (its mixed hash is 0).
    let always = 0u32;
    // The first report stands alone: 2 shards of 50 000, a cache of 100
    // 000, 390 simulations' worth of 256: 1 key in 2^8.
    d.feed(&s, Some(always), || 50_000);
    assert_eq!((d.shift(), d.shift_now(), d.basis()), (8, 8, 100_000));
    assert_eq!(d.seen(), 1, "the key of the sample reached them");
    // Shards that differ by half: the same simulations throughout.
    for i in 0..40 {
        d.feed(
            &s,
            Some(always),
            || if i % 2 == 0 { 40_000 } else { 60_000 },
        );
        assert_eq!(d.basis(), 100_000, "resized at report {i}");
    }
    // A cache ten times smaller: the mean gets there, and the sample
    // with it (1 key in 2^5 for 10 000).
    for _ in 0..200 {
        d.feed(&s, Some(always), || 5_000);
    }
    assert_eq!(d.shift_now(), 5);
    assert!((7_500..=12_500).contains(&d.basis()), "{}", d.basis());
    // A key sampled at 1 in 8 but not at 1 in 32, from a shard that has
    // not yet taken the new rate up: dropped, from a write or a lookup.
    let h = (1u32..)
        .find(|&h| sim::sampled(h, 3) && !sim::sampled(h, 5))
        .unwrap();
    let seen = d.seen();
    d.feed(&s, Some(h), || 5_000);
    assert_eq!(d.seen(), seen, "a key outside the sample reached them");
    d.hit(&s, h, 16);
    assert_eq!(d.seen(), seen, "a hit outside the sample reached them");
    // The first key out of it: its mixed hash is the bound itself.
    let inv = {
        let a = 0x9e37_79b9u32;
        let mut x = a;
        for _ in 0..5 {
            x = x.wrapping_mul(2u32.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    };
    let edge = (1u32 << 27).wrapping_mul(inv);
    assert_eq!(sim::sample_key(edge), sim::sample_below(5));
    d.feed(&s, Some(edge), || 5_000);
    d.hit(&s, edge, 16);
    assert_eq!(d.seen(), seen, "the bound's own key reached them");
    d.hit(&s, always, 16);
    assert_eq!(d.seen(), seen + 1);
}

/// A weighted shard takes up the sampling shift its duel publishes at
/// its next write: a shard of 2^20 units holding entries of 1 says the
/// cache holds 2^20 entries (1 key in 2^12 sampled), and its lookups
/// then test keys against that sample, not the first one (1 in 8).
#[test]
fn a_weighted_shard_takes_up_its_duels_new_shift() {
    let d = Arc::new(sim::Duel::weighted(1 << 20, None, 1));
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::Adaptive,
        true,
        true,
        (false, false),
        1 << 20,
        1 << 20,
    )
    .with_duel(d.clone());
    assert_eq!(lv.duel_shift, 3);
    // Keys sampled at the first shift, so that each write feeds the duel
    // (the first finds the shard empty and reports nothing).
    let keys: Vec<u64> = (0..100_000u64)
        .filter(|&k| d.samples_at(hash(k), 3))
        .take(3)
        .collect();
    for &k in &keys {
        insert(&mut lv, k);
    }
    assert_eq!(d.shift_now(), 12);
    assert_eq!(lv.duel_shift, 12, "the shard took up the duel's shift");
    assert_eq!(lv.sample_below, sim::sample_below(12));
}

/// A weighted duel resizes on a report more than a quarter off the
/// entries its simulations are sized for, and not on one a quarter off
/// exactly (its first report stands alone; sized for 2048 at first).
#[test]
fn a_weighted_duel_resizes_past_a_quarter_off() {
    let s = sim::Sampled::new();
    for (report, resized) in [(2560, false), (2561, true), (1536, false), (1535, true)] {
        let d = sim::Duel::weighted(1 << 40, None, 1);
        d.feed(&s, Some(0), || report);
        let basis = if resized { report } else { 2048 };
        assert_eq!(d.basis(), basis, "a report of {report}");
    }
}

/// A weighted duel told the cache's entries (`Builder::estimated_entries`)
/// starts its simulations at that size and its reports' mean from it, so
/// a first report from a shard that weighs differently does not resize
/// them; reports that stay away move them as without the estimate.
#[test]
fn a_weighted_duel_told_its_entries_starts_there() {
    let s = sim::Sampled::new();
    let d = sim::Duel::weighted(1 << 40, Some(100_000), 2);
    assert_eq!((d.shift(), d.shift_now(), d.basis()), (8, 8, 100_000));
    d.feed(&s, Some(0), || 30_000);
    assert_eq!(d.basis(), 100_000, "one report of 60 000 resized them");
    for _ in 0..200 {
        d.feed(&s, Some(0), || 30_000);
    }
    assert!((45_000..=75_000).contains(&d.basis()), "{}", d.basis());
    // An estimate past the capacity (an entry weighs a unit at least), or
    // of 0, is none: the simulations start as untold, and the first
    // report stands alone.
    for (capacity, estimate) in [(1000, 100_000), (1 << 40, 0), (0, 10)] {
        let d = sim::Duel::weighted(capacity, Some(estimate), 1);
        let untold = sim::Duel::weighted(capacity, None, 1);
        assert_eq!(d.basis(), untold.basis(), "{capacity} {estimate}");
        d.feed(&s, Some(0), || 500);
        assert_eq!(d.basis(), 500, "{capacity} {estimate}");
    }
}

/// A weighted shard learns the entries it holds from its length at its
/// first eviction and every 256th after (not at each: a heavy entry's
/// evictions do not move it), and LIRS's stamps take that scale; an
/// unweighted shard keeps its `max_entries`.
#[test]
fn a_weighted_shard_learns_its_entries_at_its_evictions() {
    let mut out = Evicted::new();
    // 100 units, at first with no idea how many entries (its stamps as
    // fine as they go). `Workingset`: LIRS would decline the heavy cold
    // key below (`a_weighted_lirs_shard_declines_a_cold_key_its_hir_set_cannot_hold`).
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Workingset, true, true, (false, false), 100, 1 << 30);
    assert_eq!((lv.full_entries, lv.stamp_shift), (0, 0));
    for k in 0..101u64 {
        lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
    }
    // The first eviction: 100 entries (the victim's slot is the new
    // key's).
    assert_eq!(lv.evictions, 1);
    assert_eq!(lv.full_entries, 100);
    // A key of 10 units evicts 10 more: the scale stays.
    lv.insert_new(hash(1000), 1000, 1000, 10, Deadline::NEVER, &mut out);
    assert_eq!(lv.evictions, 11);
    assert_eq!(lv.full_entries, 100);
    // 2^12 entries of 1 unit in a shard whose `max_entries` says 2^30:
    // stamps at a 64th of 2^12, not of 2^30.
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Lirs, true, true, (false, false), 1 << 12, 1 << 30);
    for k in 0..(1u64 << 12) + 1 {
        lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
    }
    assert_eq!(lv.stamp_shift, Lruvec::<u64, u64>::stamp_shift_for(1 << 12));
    // Unweighted: `max_entries` stands.
    let mut lv = shard(Policy::Lirs, 100);
    for k in 0..200u64 {
        insert(&mut lv, k);
    }
    assert_eq!(lv.full_entries, 100);
}

/// A weighted shard's stamps take a new scale when its length has moved
/// two powers of two past theirs, or one and clear of the next boundary
/// (a quarter either way), not on the edge of one.
#[test]
fn a_weighted_shards_stamps_rescale_clear_of_an_edge() {
    let mut out = Evicted::new();
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Lirs, true, true, (false, false), 1 << 20, 1 << 30);
    let mut fill = |lv: &mut Lruvec<u64, u64>, to: u64| {
        for k in lv.len() as u64..to {
            lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
        }
        lv.follow_entries();
        (lv.full_entries, lv.stamp_shift)
    };
    // 384 entries (a 64th is 6: scale 2^2), two past 2^0: taken on
    // the edge or not.
    assert_eq!(fill(&mut lv, 384), (384, 2));
    // 520 (8.1: 2^3), one past and within a quarter of 2^3's edge: kept.
    assert_eq!(fill(&mut lv, 520), (520, 2));
    // 700 (10.9: 2^3), a quarter either way still 2^3: taken.
    assert_eq!(fill(&mut lv, 700), (700, 3));
    // 1000 (15.6: 2^3), the same scale: nothing to do.
    assert_eq!(fill(&mut lv, 1000), (1000, 3));
    // From 2^2, 1000 is one past but within a quarter of 2^4's edge
    // (1250): kept.
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Lirs, true, true, (false, false), 1 << 20, 1 << 30);
    assert_eq!(fill(&mut lv, 384), (384, 2));
    assert_eq!(fill(&mut lv, 1000), (1000, 2));
}
