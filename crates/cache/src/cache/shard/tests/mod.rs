//! The adaptive inactive target and failed activations, on one shard.

use super::*;

/// A hash whose bits 8..40 (what the shard keeps) spread `k`.
fn hash(k: u64) -> u64 {
    k.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0xff
}

/// Key `k`'s slot in `lv`, if it is cached there.
fn slot(lv: &Lruvec<u64, u64>, k: u64) -> Option<u32> {
    lv.find(hash(k), |&x| x == k)
}

fn insert(lv: &mut Lruvec<u64, u64>, k: u64) {
    let mut out = Evicted::new();
    lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
}

/// A `Workingset` shard of `n` entries in its steady state: past the fill
/// that puts a new shard's first keys on the active list (`fills`).
fn steady(n: usize) -> Lruvec<u64, u64> {
    let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
    lv.fill = false;
    lv
}

/// A steady `Workingset` shard of `n` entries holding keys `0..n` on
/// probation, none hit.
fn full(n: usize) -> Lruvec<u64, u64> {
    let mut lv = steady(n);
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    lv
}

/// Activates 90% of `lv`'s entries, as a shard in a steady state holds
/// them: its active list leaves no room (see [`Lruvec::active_has_room`]).
fn activate_most(lv: &mut Lruvec<u64, u64>) {
    for i in 0..(lv.len() * 9 / 10) as u32 {
        if lv.list_of(i) == INACTIVE {
            lv.activate(i);
        }
    }
    assert!(!lv.active_has_room());
}

/// ARC's step: a refault moves the inactive target by one entry, or by
/// the ratio of the other kind's shadows to its own kind's when that is
/// larger (`p += max(|B2| / |B1|, 1)`).
#[test]
fn a_refault_moves_the_target_by_the_ratio_of_the_other_shadows() {
    let mut lv = full(1000);
    lv.inactive_share = 0.05;
    for k in 1..=40u32 {
        // 30 shadows of demoted entries (ARC's B2), 10 of probation (B1).
        lv.shadows
            .eviction(k.wrapping_mul(0x9e37_79b9), k <= 30, false);
    }
    assert_eq!(lv.shadows.counts(), (30, 10));
    let step = |lv: &mut Lruvec<u64, u64>, workingset| {
        let before = lv.inactive_share;
        lv.adapt(10, workingset);
        ((lv.inactive_share - before) * 1000.0).round()
    };
    assert_eq!(step(&mut lv, false), 3.0, "B1 refault: |B2| / |B1| = 3");
    assert_eq!(step(&mut lv, true), -1.0, "B2 refault: 10 / 30 rounds to 1");
}

#[test]
fn refaults_move_the_inactive_target_within_its_bounds() {
    let mut lv = steady(1000);
    let start = lv.inactive_share;
    // Nothing is hit, so everything is evicted from probation: their
    // refaults (distance about 300, within the shard's 1000) say the
    // inactive list was too small.
    for k in 0..1300 {
        insert(&mut lv, k);
    }
    // (Shadows that collide lose the older one.)
    let (demoted, probation) = lv.shadows.counts();
    assert!(demoted == 0 && probation > 250, "{demoted} {probation}");
    for k in 0..300 {
        insert(&mut lv, k);
    }
    assert!(lv.refaults > 0);
    assert!(lv.inactive_share > start, "{}", lv.inactive_share);
    assert!(lv.inactive_share <= INACTIVE_MAX);
    lv.check().unwrap();
    // Refaults of demoted entries shrink it, to the floor at most.
    for _ in 0..100_000 {
        lv.adapt(10, true);
    }
    assert_eq!(lv.inactive_share, INACTIVE_MIN);
    // One too distant says nothing; one at the shard's size is within it.
    lv.adapt(lv.len() + 1, false);
    assert_eq!(lv.inactive_share, INACTIVE_MIN);
    lv.adapt(lv.len(), false);
    assert!(lv.inactive_share > INACTIVE_MIN);
    for _ in 0..100_000 {
        lv.adapt(10, false);
    }
    assert_eq!(lv.inactive_share, INACTIVE_MAX);
}

#[test]
fn the_inactive_list_keeps_to_its_target() {
    let mut lv = full(1000);
    // Refaults of demoted entries pushed the target to its floor (1%);
    // with every entry hit, reclaim activates them as it reaches them and
    // evicts the new ones until the inactive list is down to the target
    // (the activation budget may take a hot entry, which comes back, as a
    // read-through cache loads it again). The fixed ratio held it at a
    // tenth (`ActiveInactive`: 100 / 900).
    for _ in 0..100_000 {
        lv.adapt(10, true);
    }
    for round in 0..4 {
        // Read-through: a key reclaim took is loaded again.
        for k in 0..1000 {
            match slot(&lv, k) {
                Some(i) => {
                    lv.mark_accessed(i);
                }
                None => insert(&mut lv, k),
            }
        }
        for k in 0..100 {
            insert(&mut lv, 10_000 * (round + 1) + k);
        }
    }
    let (inactive, active) = (lv.lists[INACTIVE].len, lv.lists[ACTIVE].len);
    let share = inactive as f64 / (inactive + active) as f64;
    assert!(
        active > 0 && share <= INACTIVE_MIN + 0.01,
        "{inactive} / {active}"
    );
    lv.check().unwrap();
}

/// Under `ActiveInactive` the inactive list is low, and the active list
/// gives it entries, while it holds under a tenth of the shard: the
/// kernel's `inactive_is_low` with `inactive_ratio` 9.
#[test]
fn active_inactive_keeps_a_tenth_of_the_shard_inactive() {
    let mut lv = Lruvec::new(
        Policy::ActiveInactive,
        true,
        false,
        (false, false),
        100,
        100,
    );
    lv.fill = false;
    for k in 0..100 {
        insert(&mut lv, k);
    }
    let activate_up_to = |lv: &mut Lruvec<u64, u64>, n| {
        for i in 0..100 {
            if lv.lists[ACTIVE].len < n && lv.list_of(i) == INACTIVE {
                lv.activate(i);
            }
        }
    };
    activate_up_to(&mut lv, 90);
    assert_eq!((lv.lists[INACTIVE].len, lv.lists[ACTIVE].len), (10, 90));
    assert!(!lv.inactive_is_low());
    activate_up_to(&mut lv, 91);
    assert!(lv.inactive_is_low());
}

/// A shard keeps bits 8 to 40 of a key's hash (the bits above chose the
/// shard; the index, the shadows and the duel's sample all key on these).
#[test]
fn short_hash_keeps_bits_8_to_40() {
    assert_eq!(short_hash(0x0000_00AB_CDEF_0123), 0xABCD_EF01);
    assert_eq!(short_hash(0xFFFF_FF00_0000_00FF), 0);
}

/// The index's hash spreads short hashes over all 64 bits: hashbrown takes
/// buckets from the low bits and tags from the top seven, and neighbouring
/// short hashes differ in both.
#[test]
fn index_hash_spreads_short_hashes() {
    let hashes: Vec<u64> = (1..=3).map(index_hash).collect();
    for (i, a) in hashes.iter().enumerate() {
        for b in &hashes[i + 1..] {
            assert_ne!(a & 0xffff, b & 0xffff, "buckets");
            assert_ne!(a >> 57, b >> 57, "tags");
        }
    }
}

/// In a thrashing shard (as a new shard is), a failed activation retries
/// on probation, marked, and so does a failed retry, without moving the
/// inactive target; a shard that is not thrashing takes the refault as
/// any other.
#[test]
fn a_failed_activation_retries_on_probation_while_thrashing() {
    let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), 10, 10);
    assert!(lv.thrashing);
    let h = short_hash(hash(7));
    // An activation that failed: the entry retries on the inactive list,
    // marked.
    lv.shadows.eviction(h, true, true);
    insert(&mut lv, 7);
    let i = lv.find(hash(7), |&k| k == 7).unwrap();
    assert_eq!(lv.flags(i), UNHIT, "retrying on probation");
    // Evicted unhit, the retry fails in turn: failed, not PG_workingset.
    for k in 100..120 {
        insert(&mut lv, k);
    }
    assert!(lv.find(hash(7), |&k| k == 7).is_none());
    let (_, ws, failed) = lv.shadows.refault(h).expect("its shadow");
    assert!(failed && !ws);
    // The refault after a failed retry retries again, and the inactive
    // target stays where it was.
    let share = lv.inactive_share;
    lv.shadows.eviction(h, false, true);
    assert_eq!(lv.workingset_refault(h).0, Place::Retry);
    assert_eq!(lv.inactive_share, share);
    // Not thrashing, the same refault is one from probation: it moves the
    // target and, close as it is, is activated.
    (lv.thrashing, lv.refault_share) = (false, 0.0);
    lv.shadows.eviction(h, false, true);
    assert_eq!(lv.workingset_refault(h).0, Place::Active);
    assert!(lv.inactive_share > share);
    lv.thrashing = true;
    // A retry that is hit twice pays: its shadow is a plain one.
    lv.shadows.eviction(h, true, true);
    insert(&mut lv, 7);
    let i = lv.find(hash(7), |&k| k == 7).unwrap();
    lv.mark_accessed(i);
    lv.mark_accessed(i);
    assert_eq!(lv.flags(i) & UNHIT, 0);
    lv.check().unwrap();
}

#[test]
fn an_activation_on_trial_pays_at_its_second_hit() {
    let f = ACTIVE_FLAG | WORKINGSET | UNHIT;
    // One hit, as each key of a loop gets per pass: still on trial.
    let once = Lruvec::<u64, u64>::hit_flags(f);
    assert_eq!(once & REFS, 1);
    assert_ne!(once & UNHIT, 0, "one hit does not pay");
    let twice = Lruvec::<u64, u64>::hit_flags(once);
    assert_eq!(twice & REFS, 2);
    assert_eq!(twice & (UNHIT | HIT_ONCE), 0, "two do");
    // Entries not on trial just count.
    assert_eq!(Lruvec::<u64, u64>::hit_flags(ACTIVE_FLAG), ACTIVE_FLAG | 1);
}

#[test]
fn reclaim_activating_an_entry_on_trial_keeps_the_trial() {
    let mut lv = full(10);
    let h = short_hash(hash(7_000));
    lv.shadows.eviction(h, true, true);
    insert(&mut lv, 7_000); // a retry: on trial, on the inactive list
    let i = lv.find(hash(7_000), |&k| k == 7_000).unwrap();
    lv.mark_accessed(i); // one hit
    // Reclaim reaches it and activates it for that hit; the trial goes on.
    // (New keys, with misses mostly new, start at the head.)
    lv.refault_share = 0.0;
    for k in 100..120 {
        insert(&mut lv, k);
    }
    let i = lv
        .find(hash(7_000), |&k| k == 7_000)
        .expect("activated, kept");
    assert_eq!(lv.flags(i) & (ACTIVE_FLAG | UNHIT), ACTIVE_FLAG | UNHIT);
    lv.check().unwrap();
}

/// The inactive list at its target is not low, as the kernel's
/// `inactive_is_low` (`inactive * ratio < active`): reclaim deactivates
/// only below it, so a balanced shard does not demote one entry more at
/// every reclaim.
#[test]
fn an_inactive_list_at_its_target_is_not_low() {
    let mut lv = full(200);
    // 1/8 of 200: exact in binary.
    lv.inactive_share = 0.125;
    for i in 0..175 {
        lv.activate(i);
    }
    assert_eq!((lv.lists[INACTIVE].len, lv.lists[ACTIVE].len), (25, 175));
    assert!(!lv.inactive_is_low(), "25 of 200 is the target");
    lv.activate(175);
    assert!(lv.inactive_is_low(), "24 of 200 is below it");
}

/// With batching off a hit is a `touch`, whose count of references stops
/// at `MAX_REFS` as a batched hit's does: one more and the entry would
/// outlive one more rotation of reclaim than the policy gives it.
#[test]
fn an_unbatched_hit_counts_up_to_max_refs() {
    let mut lv = Lruvec::new(Policy::Workingset, false, false, (false, false), 8, 8);
    // Past the fill, which puts a new shard's first keys on the active list.
    lv.fill = false;
    insert(&mut lv, 1);
    let i = lv.find(hash(1), |&k| k == 1).unwrap();
    assert_eq!(lv.flags(i) & ACTIVE_FLAG, 0, "a new key starts inactive");
    for _ in 0..3 * MAX_REFS {
        lv.touch(i);
    }
    assert_ne!(lv.flags(i) & ACTIVE_FLAG, 0, "activated by its hits");
    assert_eq!(lv.flags(i) & REFS, MAX_REFS);
    lv.check().unwrap();
}

/// With batching off, an entry hit more often at the active tail is given
/// another turn (a reference spent), as `shrink_active_list` gives it,
/// when reclaim finds the inactive list holding only the entry it makes
/// room for: the entry hit less goes, whatever their order on the list.
#[test]
fn an_unbatched_reclaim_gives_a_referenced_active_tail_another_turn() {
    for policy in [Policy::Workingset, Policy::ActiveInactive, Policy::Lirs] {
        let mut lv = Lruvec::new(policy, false, false, (false, false), 2, 2);
        lv.fill = false;
        for k in [1, 2] {
            insert(&mut lv, k);
        }
        // Both activated by their hits; 1 then hit up to `MAX_REFS`, 2
        // left with one reference.
        for (k, hits) in [(1, 2 + u32::from(MAX_REFS)), (2, 3)] {
            let i = slot(&lv, k).unwrap();
            for _ in 0..hits {
                lv.touch(i);
            }
            assert_ne!(lv.flags(i) & ACTIVE_FLAG, 0, "{policy:?}: {k} active");
        }
        insert(&mut lv, 3);
        let kept: Vec<u64> = [1, 2, 3]
            .into_iter()
            .filter(|&k| slot(&lv, k).is_some())
            .collect();
        assert_eq!(kept, [1, 3], "{policy:?}");
        lv.check().unwrap();
    }
}

/// A batched hit (`mark_accessed`, under the read lock) counts references
/// up to `MAX_REFS`, and up to one under `Lru` (CLOCK's bit): more and a
/// hot entry would outlive more rotations of reclaim than the policy
/// gives it.
#[test]
fn a_batched_hit_counts_up_to_max_refs() {
    for (policy, most) in [(Policy::Workingset, MAX_REFS), (Policy::Lru, 1)] {
        let mut lv = Lruvec::new(policy, true, false, (false, false), 8, 8);
        insert(&mut lv, 1);
        let i = lv.find(hash(1), |&k| k == 1).unwrap();
        for _ in 0..3 * MAX_REFS {
            lv.mark_accessed(i);
        }
        assert_eq!(lv.flags(i) & REFS, most, "{policy:?}");
        lv.check().unwrap();
    }
}

/// A shard taking up `Lru` keeps the references its entries counted
/// under `Workingset` (up to `MAX_REFS`) and spends them a rotation at a
/// time: its first pick rotates every entry four times before it evicts
/// the oldest, within `pick_victim`'s progress bound (checked under debug
/// assertions).
#[test]
fn a_shard_taking_up_lru_spends_the_references_it_had() {
    let mut lv = full(200);
    for k in 0..200 {
        let i = slot(&lv, k).unwrap();
        for _ in 0..MAX_REFS {
            lv.mark_accessed(i);
        }
        assert_eq!(lv.flags(i) & REFS, MAX_REFS);
    }
    lv.adopt(Policy::Lru);
    insert(&mut lv, 1_000_000);
    assert_eq!(lv.len(), 200);
    assert!(lv.find(hash(0), |&x| x == 0).is_none(), "the oldest goes");
    assert!((1..200).all(|k| slot(&lv, k).is_some()));
    lv.check().unwrap();
}

/// One reclaim activates as many hit entries as the inactive target
/// holds (a tenth of a new shard), and at least `SCAN_BATCH`.
#[test]
fn one_reclaim_activates_no_more_than_its_budget() {
    for (n, budget) in [(200, SCAN_BATCH), (1000, 100)] {
        // The frozen loop: every entry on the inactive list, every one hit.
        let mut lv = full(n);
        for k in 0..n as u64 {
            let i = slot(&lv, k).unwrap();
            lv.mark_accessed(i);
        }
        assert_eq!(lv.lists[ACTIVE].len, 0);
        assert_eq!(lv.activation_budget(), budget, "{n} entries");
        // One insertion: reclaim activates up to the budget, then takes the
        // (referenced) tail. Without the budget it activated all of them.
        insert(&mut lv, 1_000_000);
        assert_eq!(lv.lists[ACTIVE].len, budget, "{n} entries");
        assert_eq!(lv.len(), n);
        lv.check().unwrap();
    }
}

/// Not thrashing, a refault within the shard's size is activated however
/// small the active list (ARC's rule); thrashing, the same refault of an
/// entry that never was active goes to the inactive tail (the kernel's
/// test, against an empty active list).
#[test]
fn the_refault_rule_follows_thrashing() {
    for thrashing in [false, true] {
        let mut lv = full(1000);
        // 300 new keys evict 0..300 from probation (fewer than half the
        // shard: its misses do not count yet, so the mode set below holds).
        for k in 1000..1300 {
            insert(&mut lv, k);
        }
        assert_eq!(lv.lists[ACTIVE].len, 0);
        lv.thrashing = thrashing;
        lv.refault_share = if thrashing { 1.0 } else { 0.0 };
        let before = lv.activations;
        // Distance about 300: within the shard (1000), beyond the active
        // list (0).
        insert(&mut lv, 5);
        let i = lv.find(hash(5), |k| *k == 5).unwrap();
        assert_eq!(lv.refaults, 1);
        if thrashing {
            assert_eq!(lv.activations, before);
            assert_eq!(lv.lists[INACTIVE].tail, i);
        } else {
            assert_eq!(lv.activations, before + 1);
            assert_eq!(lv.list_of(i), ACTIVE);
        }
        lv.check().unwrap();
    }
}

/// A shard starts thrashing, leaves when most misses are new keys,
/// and comes back when most refault — with the bounds apart, and misses
/// counted only once it has evicted half its size.
#[test]
fn misses_that_mostly_refault_make_a_shard_thrash() {
    let mut lv = full(1000);
    assert!(lv.thrashing);
    // Not yet evicted half its size: misses do not count.
    for _ in 0..1000 {
        lv.note_miss(false);
    }
    assert_eq!(lv.refault_share, 1.0);
    for k in 1000..1500 {
        insert(&mut lv, k);
    }
    // New keys only: the share falls below the lower bound and the
    // shard stops, after about `-ln(bound) * window` misses.
    let mut n = 0;
    while lv.thrashing {
        lv.note_miss(false);
        n += 1;
        assert!(n < 1_000_000, "the shard never stopped thrashing");
    }
    assert!(lv.refault_share < THRASHING_BELOW);
    let expected = -THRASHING_BELOW.ln() * REFAULT_WINDOW;
    assert!(
        (n as f32 - expected).abs() < 10.0,
        "{n} misses, {expected} expected"
    );
    // A share between the bounds changes nothing either way.
    let middle = (THRASHING_ABOVE + THRASHING_BELOW) / 2.0;
    for _ in 0..10_000 {
        lv.note_miss(lv.refault_share < middle);
    }
    assert!(!lv.thrashing);
    // Refaults only: past the upper bound it thrashes again (within a
    // bounded number of misses: a shard that never did hung the test).
    let mut n = 0;
    while !lv.thrashing {
        lv.note_miss(true);
        n += 1;
        assert!(n < 1_000_000, "refaults only, and the shard never thrashed");
    }
    assert!(lv.refault_share > THRASHING_ABOVE);
    for _ in 0..10_000 {
        lv.note_miss(lv.refault_share < middle);
    }
    assert!(lv.thrashing);
}

/// Not thrashing, a refault of an entry that had been active (its shadow
/// has `PG_workingset`) is taken back from up to twice the shard's size,
/// one that never was from up to the learned reach (here the shard's
/// size).
#[test]
fn a_working_set_refault_reaches_twice_as_far() {
    for workingset in [true, false] {
        let mut lv = full(1000);
        activate_most(&mut lv);
        lv.thrashing = false;
        lv.refault_share = 0.0;
        lv.reach = 1.0;
        // Key 5000's shadow, 1500 evictions old.
        lv.shadows
            .eviction(short_hash(hash(5000)), workingset, false);
        for _ in 0..1500 {
            lv.shadows.age_nonresident();
        }
        let before = lv.activations;
        insert(&mut lv, 5000);
        assert_eq!(lv.refaults, 1);
        assert_eq!(lv.activations - before, u64::from(workingset));
        lv.check().unwrap();
    }
}

/// A refault too distant to activate that never had been active (ARC's
/// B1 beyond its reach): at the inactive head, as ARC starts a new key at
/// T1's head, while most misses are new keys; at the tail once they mostly
/// refault (a loop larger than the cache, which the tail keeps from
/// pushing out the entries being hit), thrashing or not yet, or once most
/// refaults are too distant to activate.
#[test]
fn a_distant_refault_starts_at_the_head_unless_misses_mostly_refault() {
    for (share, thrashing, distant, head) in [
        (0.0, false, 0.0, true),
        (0.7, false, 0.0, false),
        (1.0, true, 0.0, false),
        (0.0, false, 1.0, false),
    ] {
        let mut lv = full(1000);
        // 1200 new keys evict 0..1200 from probation: key 7's distance is
        // about 1193, beyond the shard (1000), within its shadows' reach
        // (key 7's shadow is one the two-way buckets kept).
        for k in 1000..2200 {
            insert(&mut lv, k);
        }
        activate_most(&mut lv);
        lv.thrashing = thrashing;
        lv.refault_share = share;
        lv.distant_share = distant;
        lv.reach = 1.0;
        let before = lv.activations;
        insert(&mut lv, 7);
        let i = lv.find(hash(7), |k| *k == 7).unwrap();
        assert_eq!(lv.refaults, 1, "key 7's shadow was found");
        assert_eq!(lv.activations, before);
        let (h, t) = (lv.lists[INACTIVE].head, lv.lists[INACTIVE].tail);
        assert_eq!(
            (h == i, t == i),
            (head, !head),
            "share {share}, thrashing {thrashing}, distant {distant}"
        );
        lv.check().unwrap();
    }
}

/// Refaults from beyond the reach raise the distant share past
/// [`DISTANT_ABOVE`]; from then on a miss with no shadow starts at the
/// inactive tail (at the head before), and refaults that activate bring
/// the share back down.
#[test]
fn misses_start_at_the_tail_while_refaults_come_from_beyond_the_reach() {
    let mut lv = full(1000);
    activate_most(&mut lv);
    (lv.thrashing, lv.refault_share, lv.reach) = (false, 0.0, 1.0);
    for k in 1000..2000 {
        insert(&mut lv, k);
    }
    let fresh = |lv: &mut Lruvec<u64, u64>, k: u64| {
        insert(lv, k);
        let i = slot(lv, k).unwrap();
        (lv.lists[INACTIVE].head == i, lv.lists[INACTIVE].tail == i)
    };
    assert_eq!(
        fresh(&mut lv, 1_000_000),
        (true, false),
        "new keys at the head"
    );
    let mut k = 2_000_000;
    while !lv.beyond_reach() {
        refault_from_probation(&mut lv, k, 1900);
        k += 1;
        assert!(k < 2_001_000, "the share never passed {DISTANT_ABOVE}");
    }
    assert_eq!(fresh(&mut lv, 1_000_001), (false, true), "at the tail now");
    while lv.beyond_reach() {
        refault_from_probation(&mut lv, k, 10);
        k += 1;
        assert!(k < 2_002_000, "the share never fell");
    }
    assert_eq!(
        fresh(&mut lv, 1_000_002),
        (true, false),
        "at the head again"
    );
    lv.check().unwrap();
}

/// A weighted shard's `max_entries` is its capacity in weight (bytes, say):
/// its shadow table is sized from the entries it holds when it first
/// evicts, not from that (which allocated 2 slots per unit of weight: here
/// 32 Mi slots, 128 MiB, for 16 entries), and grows with them.
#[test]
fn a_weighted_shards_shadows_follow_its_entries() {
    let mut lv: Lruvec<u64, u64> = Lruvec::new(
        Policy::Workingset,
        true,
        true,
        (false, false),
        1 << 24,
        1 << 24,
    );
    let mut out = Evicted::new();
    for k in 0..40u64 {
        lv.insert_new(hash(k), k, k, 1 << 20, Deadline::NEVER, &mut out);
    }
    assert!(lv.evictions > 0);
    assert!(
        lv.shadows.allocated() <= 64,
        "{} slots",
        lv.shadows.allocated()
    );
    // Lighter entries: the shard holds more, and the table grows.
    for k in 100..2100u64 {
        lv.insert_new(hash(k), k, k, 1 << 14, Deadline::NEVER, &mut out);
    }
    let (n, slots) = (lv.len(), lv.shadows.allocated());
    assert!(
        slots >= n && slots <= 8 * n,
        "{slots} slots for {n} entries"
    );
    lv.check().unwrap();
}

/// A weighted shard's index starts narrow, whatever its `max_entries`,
/// and widens at its 65537th entry, inserted or warmed: every key stays
/// found, before and after.
#[test]
fn a_weighted_shards_index_widens_as_it_grows() {
    let n = index::NARROW_MAX as u64 + 1000;
    for warmed in [false, true] {
        let mut lv: Lruvec<u64, u64> =
            Lruvec::new(Policy::Lru, true, true, (false, false), 1 << 40, 1 << 30);
        assert!(matches!(lv.table, index::Index::Narrow(_)));
        let mut out = Evicted::new();
        for k in 0..n {
            if warmed {
                lv.insert_warm(hash(k), k, k, 1, Deadline::NEVER, false)
                    .unwrap();
            } else {
                lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
            }
            if k + 1 == index::NARROW_MAX as u64 {
                assert!(matches!(lv.table, index::Index::Narrow(_)), "wide early");
            }
        }
        assert!(matches!(lv.table, index::Index::Wide(_)));
        assert!((0..n).all(|k| slot(&lv, k).is_some()), "warmed: {warmed}");
        lv.check().unwrap();
    }
}

/// Key `k` refaults at `distance` evictions from probation; its index.
fn refault_from_probation(lv: &mut Lruvec<u64, u64>, k: u64, distance: usize) -> u32 {
    lv.shadows.eviction(short_hash(hash(k)), false, false);
    for _ in 0..distance {
        lv.shadows.age_nonresident();
    }
    insert(lv, k);
    slot(lv, k).unwrap()
}

/// An entry a refault in the reach's band activated, evicted straight
/// from the active list (what reclaim does while the inactive list is
/// empty), shortens the reach as one deactivated unhit does: the reach
/// learns from every way such an entry leaves.
#[test]
fn an_in_band_entry_evicted_from_the_active_list_moves_the_reach() {
    let mut lv = full(1000);
    for k in 0..1000 {
        let i = slot(&lv, k).unwrap();
        lv.mark_accessed(i);
    }
    for k in 10_000..11_000u64 {
        insert(&mut lv, k);
        let i = slot(&lv, k).unwrap();
        lv.mark_accessed(i);
        (lv.thrashing, lv.refault_share) = (false, 0.0);
    }
    lv.reach = REACH_MAX;
    let i = refault_from_probation(&mut lv, 5000, 1500);
    assert_eq!(lv.list_of(i), ACTIVE);
    assert_ne!(lv.flags(i) & IN_BAND, 0);
    let step = REACH_STEP / lv.len() as f64;
    lv.evict_detached(i);
    assert!((lv.reach - (REACH_MAX - step)).abs() < 1e-9, "{}", lv.reach);
    let mut fix = NIL;
    let _ = lv.free_slot(i, &mut fix);
    lv.check().unwrap();
}

/// Not thrashing, refaults from probation between the reach's floor and twice the
/// shard's size are activated as far back as the reach, which starts at
/// the shard's size and follows whether they are hit: an activated one that
/// leaves the active list unhit shortens it by a step, one hit there
/// lengthens it, one left on probation and hit there lengthens it, one
/// evicted unhit from probation leaves it. Closer refaults are activated
/// whatever the reach and say nothing.
#[test]
fn the_reach_follows_whether_refaults_in_its_band_are_hit() {
    // Keys 0..1000 hit, then activated by reclaim as 1000 new keys come:
    // the active list is large.
    let mut lv = full(1000);
    for k in 0..1000 {
        let i = slot(&lv, k).unwrap();
        lv.mark_accessed(i);
    }
    let mut fresh = 10_000u64..;
    // New keys, each hit: reclaim activates them, and deactivates from
    // the active tail to make room (unhit, the active list would stay as
    // it is).
    let mut new_keys = |lv: &mut Lruvec<u64, u64>, n: usize| {
        for _ in 0..n {
            let k = fresh.next().unwrap();
            insert(lv, k);
            let i = slot(lv, k).unwrap();
            lv.mark_accessed(i);
            (lv.thrashing, lv.refault_share) = (false, 0.0);
        }
    };
    new_keys(&mut lv, 1000);
    assert!(lv.lists[ACTIVE].len > 500, "{}", lv.lists[ACTIVE].len);
    assert_eq!(lv.reach, REACH_START);
    lv.reach = REACH_MAX;
    let step = REACH_STEP / 1000.0;
    let at = |lv: &Lruvec<u64, u64>, k: u64| slot(lv, k).map(|i| lv.list_of(i));
    // New keys until `k` leaves `list`, at most 10 000.
    let mut until_out_of = |lv: &mut Lruvec<u64, u64>, k: u64, list: usize| {
        for _ in 0..10_000 {
            if at(lv, k) != Some(list) {
                return;
            }
            new_keys(lv, 1);
        }
        panic!("key {k} never left list {list}");
    };

    // At 1500, activated (at a reach of 2); out unhit: the reach
    // shrinks.
    let i = refault_from_probation(&mut lv, 5000, 1500);
    assert_eq!(lv.list_of(i), ACTIVE);
    assert_ne!(lv.flags(i) & IN_BAND, 0);
    until_out_of(&mut lv, 5000, ACTIVE);
    assert!((lv.reach - (REACH_MAX - step)).abs() < 1e-9, "{}", lv.reach);

    // Activated and hit once: it lengthens (by the step it had lost).
    let i = refault_from_probation(&mut lv, 5001, 1500);
    assert_eq!(lv.list_of(i), ACTIVE);
    lv.mark_accessed(i);
    until_out_of(&mut lv, 5001, ACTIVE);
    assert!((lv.reach - REACH_MAX).abs() < 1e-9, "{}", lv.reach);

    // Beyond a short reach, on probation: evicted unhit, no change; hit
    // there (reclaim activates it), the reach lengthens.
    lv.reach = 1.0;
    let i = refault_from_probation(&mut lv, 5002, 1500);
    assert_eq!(lv.list_of(i), INACTIVE);
    assert_ne!(lv.flags(i) & IN_BAND, 0);
    until_out_of(&mut lv, 5002, INACTIVE);
    assert_eq!(lv.reach, 1.0);
    let i = refault_from_probation(&mut lv, 5003, 1500);
    lv.mark_accessed(i);
    until_out_of(&mut lv, 5003, INACTIVE);
    assert_eq!(at(&lv, 5003), Some(ACTIVE));
    assert!((lv.reach - (1.0 + step)).abs() < 1e-9, "{}", lv.reach);

    // Within the reach's floor: activated at any reach, outside the band.
    lv.reach = REACH_MIN;
    let floor = (REACH_MIN * 1000.0) as usize;
    let i = refault_from_probation(&mut lv, 5004, floor - 50);
    assert_eq!(lv.list_of(i), ACTIVE);
    assert_eq!(lv.flags(i) & IN_BAND, 0);
    // The band starts past the floor: a refault distance of exactly the
    // floor (its own eviction is one of the evictions counted) is outside,
    // one further is in.
    let i = refault_from_probation(&mut lv, 5005, floor - 1);
    assert_eq!(lv.flags(i) & IN_BAND, 0, "at the floor");
    let i = refault_from_probation(&mut lv, 5006, floor);
    assert_ne!(lv.flags(i) & IN_BAND, 0, "past the floor");
    // An entry that had been active reaches twice as far: its band starts
    // past twice the floor.
    let from_active = |lv: &mut Lruvec<u64, u64>, k: u64, distance: usize| {
        lv.shadows.eviction(short_hash(hash(k)), true, false);
        for _ in 0..distance {
            lv.shadows.age_nonresident();
        }
        (lv.thrashing, lv.refault_share) = (false, 0.0);
        insert(lv, k);
        lv.flags(slot(lv, k).unwrap())
    };
    let floor = (2.0 * REACH_MIN * 1000.0) as usize;
    assert_eq!(
        from_active(&mut lv, 5007, floor - 1) & IN_BAND,
        0,
        "at twice the floor"
    );
    assert_ne!(
        from_active(&mut lv, 5008, floor) & IN_BAND,
        0,
        "past twice the floor"
    );
    // And is activated as far back as twice the reach, not further (at a
    // reach of REACH_MIN: 700 evictions of 1000).
    let within = from_active(&mut lv, 5009, floor - 50);
    assert_ne!(within & ACTIVE_FLAG, 0, "within twice the reach");
    let beyond = from_active(&mut lv, 5010, 999);
    assert_eq!(beyond & ACTIVE_FLAG, 0, "beyond twice the reach");
    lv.check().unwrap();
}

/// Misses that never refault take the refault share to exactly 0, never
/// through the subnormal floats whose arithmetic costs x86 a hundred
/// cycles and more: unflushed, it goes subnormal after about 45,000
/// misses without a refault, and in a `perf` profile of single-threaded
/// read-through whose misses found no shadow (shadows switched off for
/// the experiment), 72% of the insertion's samples sat on that one
/// addition and the insertion took 6x its share of the time.
#[test]
fn the_refault_share_of_fresh_misses_reaches_zero_not_subnormal() {
    let mut lv = full(100);
    // Fresh keys: every miss evicts, none refaults.
    for k in 100..1100 {
        insert(&mut lv, k);
    }
    assert!(lv.misses_count());
    for _ in 0..100_000 {
        lv.note_miss(false);
        assert!(
            lv.refault_share == 0.0 || lv.refault_share.is_normal(),
            "subnormal share {:e}",
            lv.refault_share
        );
    }
    assert_eq!(lv.refault_share, 0.0);
    assert!(!lv.thrashing);
}

/// The distant share decays the same way on refaults that all activate
/// (a shard whose active list has room activates every one): unflushed,
/// it went subnormal after about 22,000 of them.
#[test]
fn the_distant_share_of_activated_refaults_reaches_zero_not_subnormal() {
    let mut lv = full(100);
    lv.note_refault(true);
    for _ in 0..100_000 {
        lv.note_refault(false);
        assert!(
            lv.distant_share == 0.0 || lv.distant_share.is_normal(),
            "subnormal share {:e}",
            lv.distant_share
        );
    }
    assert_eq!(lv.distant_share, 0.0);
}

mod duel;
mod loops;

/// LIRS's HIR list is low below its share of the shard, not at it: 10
/// inactive entries of 100 at a share of 10% are enough, at 11% not.
#[test]
fn a_lirs_hir_list_at_its_share_is_not_low() {
    let n = 100usize;
    let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    lv.adopt(Policy::Lirs);
    assert_eq!((lv.lists[INACTIVE].len, lv.len()), (10, 100));
    lv.hir_share = 0.10;
    assert!(!lv.inactive_is_low(), "at the share");
    lv.hir_share = 0.11;
    assert!(lv.inactive_is_low(), "below it");
}

/// A new shard puts its first keys on the active list, up to
/// `FILL_ACTIVE` of its entries, and the rest on probation; once it has
/// evicted, a new key without a shadow starts on probation.
#[test]
fn a_filling_shard_puts_its_first_keys_on_the_active_list() {
    for n in [100usize, 64] {
        let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
        for k in 0..n as u64 {
            insert(&mut lv, k);
        }
        let fill = (FILL_ACTIVE * n as f64).floor() as usize;
        assert_eq!(lv.lists[ACTIVE].len, fill, "{n}");
        assert_eq!(lv.lists[INACTIVE].len, n - fill, "{n}");
        // Probation holds the inactive target's starting share of the
        // shard, 1 in INACTIVE_RATIO + 1 (rounded up), and is not low.
        assert_eq!(
            lv.lists[INACTIVE].len,
            n - n * INACTIVE_RATIO / (INACTIVE_RATIO + 1),
            "{n}"
        );
        assert!(!lv.inactive_is_low(), "{n}");
        // The first keys, not the last: the loop over them keeps them,
        // through the first eviction too (it refills nothing: with 64
        // entries a fill of ceil(0.9 n) left probation under its target,
        // and the first key was deactivated and evicted at once).
        insert(&mut lv, 1000);
        assert_eq!(lv.evictions, 1);
        assert!(
            lv.find(hash(0), |&x| x == 0)
                .is_some_and(|i| lv.list_of(i) == ACTIVE)
        );
        let i = lv.find(hash(1000), |&x| x == 1000).unwrap();
        assert_eq!(lv.list_of(i), INACTIVE);
        lv.check().unwrap();
        // Cleared, it fills again.
        drop(lv.clear());
        insert(&mut lv, 5);
        assert!(
            lv.find(hash(5), |&x| x == 5)
                .is_some_and(|i| lv.list_of(i) == ACTIVE)
        );
    }
}

/// The structure check names an entry that is on no list though indexed
/// (what a lost link would leave), before the weight it then misses.
#[test]
fn check_finds_an_entry_on_no_list() {
    let mut lv = full(8);
    assert_eq!(lv.check(), Ok(()));
    let list = lv.list_of(3);
    lv.unlink(3, list);
    let e = lv.check().unwrap_err();
    assert!(e.contains("8 entries, 8 indexed, 7 on lists"), "{e}");
}

/// Each way a shard can be broken that the structure check looks for,
/// made on purpose, is reported as what it is (the check is what every
/// proptest of the cache trusts).
#[test]
fn check_reports_each_broken_structure() {
    type Break = fn(&mut Lruvec<u64, u64>);
    let cases: [(&str, Break, &str); 9] = [
        (
            "a list's tail lost",
            |lv| lv.lists[INACTIVE].tail = NIL,
            "list 0: ends",
        ),
        (
            "a list longer than its entries",
            |lv| lv.lists[INACTIVE].len += 1,
            "out of range or seen twice",
        ),
        (
            "the tail not linked back to the head",
            |lv| {
                let t = lv.lists[INACTIVE].tail;
                lv.links[t as usize].next = NIL;
            },
            "not a circle",
        ),
        (
            "a flag for no entry",
            |lv| lv.flags.push(AtomicU8::new(0)),
            "links and 9 flags for 8 entries",
        ),
        (
            "more entries than the shard may hold",
            |lv| lv.max_entries = 4,
            "over the shard's",
        ),
        (
            "an entry the index lost",
            |lv| {
                let hash = index_hash(lv.links[3].hash);
                lv.table.remove(hash, 3);
            },
            "entry 3 missing from the index",
        ),
        (
            "a sketch kept with no admission",
            |lv| lv.sketch = Some(Sketch::new(0)),
            "admits false, sketch kept true",
        ),
        (
            "LIRS's bookkeeping on a Workingset shard",
            |lv| lv.lirs = true,
            "LIRS true, stamped false",
        ),
        (
            "stamps kept by a shard not running LIRS",
            |lv| {
                lv.stamped = true;
                for _ in 0..lv.nodes.len() {
                    lv.stamps.push(AtomicU16::new(0));
                }
            },
            "LIRS false, stamped true",
        ),
    ];
    for (what, break_it, said) in cases {
        let mut lv = full(8);
        assert_eq!(lv.check(), Ok(()), "{what}: before");
        break_it(&mut lv);
        let e = lv.check().expect_err(what);
        assert!(e.contains(said), "{what}: {e}");
    }
}

/// `Policy::Lirs`: a refault used more recently than the LIR set's reach
/// is LIR and counts as an activation; one further back is HIR and does
/// not, nor does a key with no shadow.
#[test]
fn a_lirs_refault_within_the_reach_is_an_activation() {
    let n = 100;
    let mut lv = Lruvec::new(Policy::Lirs, true, false, (false, false), n as u64, n);
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    assert_eq!(lv.lirs_place(None), Place::Inactive, "the LIR set is full");
    let (near, far) = (0x1111_1111u32, 0x2222_2222u32);
    lv.shadows.eviction(near, false, false);
    lv.shadows.eviction(far, false, false);
    let before = lv.activations;
    lv.lir_stamp = lv.shadows.now().wrapping_sub(1000);
    assert_eq!(lv.lirs_refault(near), Place::Fill);
    assert_eq!(lv.activations, before + 1);
    lv.lir_stamp = lv.shadows.now();
    assert_eq!(lv.lirs_refault(far), Place::Inactive);
    assert_eq!(lv.lirs_refault(0x3333_3333), Place::Inactive);
    assert_eq!(lv.activations, before + 1, "only the refault within reach");
}

/// A weighted shard of 100 units of `Policy::Lirs`, full of keys of
/// weight 1 (its LIR set full, its HIR set 2 entries).
fn full_weighted_lirs() -> Lruvec<u64, u64> {
    let mut out = Evicted::new();
    let mut lv = Lruvec::new(Policy::Lirs, true, true, (false, false), 100, 1 << 30);
    for k in 0..200u64 {
        lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
    }
    lv
}

/// `Policy::Lirs` in a weighted shard declines a cold key heavier than
/// its HIR set and free room, evicting nothing, to the listener as
/// evicted, and leaves its shadow: requested again within the LIR set's
/// reach, it is cached as LIR; beyond it, declined again, its shadow
/// replaced rather than doubled. A cold key no heavier is cached as HIR,
/// as unweighted LIRS caches it.
#[test]
fn a_weighted_lirs_shard_declines_a_cold_key_its_hir_set_cannot_hold() {
    let mut out = Evicted::new();
    let mut lv = full_weighted_lirs();
    let (len, lir, declined) = (lv.len(), lv.lists[ACTIVE].len, lv.not_admitted);
    let mut put = |lv: &mut Lruvec<u64, u64>, k: u64, w| {
        out.clear();
        let r = lv.insert_new(hash(k), k, k, w, Deadline::NEVER, &mut out);
        let gone: Vec<u64> = out.iter().map(|e| e.0).collect();
        (r, gone)
    };
    let (r, gone) = put(&mut lv, 1000, 10);
    assert!(matches!(r, Inserted::Rejected));
    assert_eq!(gone, [1000], "the key, to the listener");
    assert_eq!(lv.not_admitted, declined + 1);
    assert_eq!(
        (lv.len(), lv.lists[ACTIVE].len),
        (len, lir),
        "nothing evicted"
    );
    // Beyond the reach: declined again, one shadow all the while.
    let shadows = lv.shadows.len();
    let reach = lv.lir_stamp;
    for _ in 0..3 {
        lv.lir_stamp = lv.shadows.now();
        assert!(matches!(put(&mut lv, 1000, 10).0, Inserted::Rejected));
        assert_eq!(lv.shadows.len(), shadows, "one shadow for the key");
    }
    lv.lir_stamp = reach;
    assert!(matches!(put(&mut lv, 1000, 10).0, Inserted::New));
    let i = lv.find(hash(1000), |&k| k == 1000).expect("cached");
    assert!(lv.is_active(i), "LIR by its shadow");
    assert!(matches!(put(&mut lv, 2000, 1).0, Inserted::New));
    let i = lv.find(hash(2000), |&k| k == 2000).expect("cached");
    assert!(!lv.is_active(i), "HIR");
    lv.check().unwrap();
}

/// `Policy::Lirs` in a weighted shard: once it has evicted, a cold key is
/// HIR whatever room the shard has (weights that vary leave room after an
/// eviction); while it fills, its LIR set takes cold keys while it has
/// room, as unweighted.
#[test]
fn a_full_weighted_lirs_shard_takes_lir_entries_by_distance_alone() {
    let mut out = Evicted::new();
    let mut lv = full_weighted_lirs();
    // Room for 5 more units: the LIR set below its share.
    let mut fix = NIL;
    for _ in 0..5 {
        let t = lv.lists[INACTIVE].tail;
        let t = if t == NIL { lv.lists[ACTIVE].tail } else { t };
        lv.remove(t, &mut fix);
    }
    lv.insert_new(hash(3000), 3000, 3000, 1, Deadline::NEVER, &mut out);
    let i = lv
        .find(hash(3000), |&k| k == 3000)
        .expect("cached: it fits");
    assert!(!lv.is_active(i), "HIR");
    let mut lv = Lruvec::new(Policy::Lirs, true, true, (false, false), 100, 1 << 30);
    lv.insert_new(hash(3000), 3000, 3000, 1, Deadline::NEVER, &mut out);
    let i = lv.find(hash(3000), |&k| k == 3000).expect("cached");
    assert!(lv.is_active(i), "LIR while it fills");
    lv.check().unwrap();
}

/// `Policy::LirsTinyLfu`: a refused key leaves its victim in place, so
/// the HIR share, which moves by what becomes of resident HIR entries,
/// stays where it was (an eviction of an unhit HIR entry shrinks it); and
/// an expired victim never keeps its place against a new key.
#[test]
fn a_refused_key_moves_no_hir_share_and_an_expired_victim_gives_way() {
    let n = 1000;
    let mut lv = Lruvec::new(Policy::LirsTinyLfu, true, false, (true, false), n as u64, n);
    let mut out = Evicted::new();
    for k in 0..n as u64 {
        lv.insert_new(
            hash(k),
            k,
            k,
            1,
            Deadline {
                at: 1_000,
                cap: u64::MAX,
            },
            &mut out,
        );
    }
    let share = lv.hir_share;
    for k in 10_000..10_500u64 {
        lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
    }
    assert!(lv.not_admitted >= 450, "{} of 500 refused", lv.not_admitted);
    assert_eq!(lv.hir_share, share, "refusals moved the HIR share");
    // Past the first keys' deadline, a new key takes an expired victim's
    // place, however often that one was seen.
    lv.now = 2_000;
    let refused = lv.not_admitted;
    for k in 20_000..20_010u64 {
        lv.insert_new(hash(k), k, k, 1, Deadline::NEVER, &mut out);
    }
    assert_eq!(
        lv.not_admitted, refused,
        "a live key refused for an expired one"
    );
    lv.check().unwrap();
}

/// A shard's index keeps `u16` slot numbers while the shard holds up to
/// `NARROW_MAX` entries (slots `0..NARROW_MAX` fit), and widens to `u32`s
/// at the first entry past them, not when `set_capacity` lets it hold
/// more.
#[test]
fn an_index_widens_only_past_what_u16_slots_hold() {
    let n = index::NARROW_MAX;
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
    let mut out = Evicted::new();
    let narrow = |lv: &Lruvec<u64, u64>| matches!(lv.table, index::Index::Narrow(_));
    assert!(narrow(&lv));
    lv.set_capacity(n as u64 + 1, n + 1, &mut out);
    assert!(narrow(&lv), "widened before it held more than {n}");
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    assert!(narrow(&lv), "widened at {n} entries, which u16 slots hold");
    insert(&mut lv, n as u64);
    assert!(!narrow(&lv), "narrow past {n} entries");
    assert!((0..=n as u64).all(|k| slot(&lv, k).is_some()));
    lv.check().unwrap();
}

/// `Policy::LirsTinyLfu`: the victim that keeps its place against a
/// refused key waits at the inactive head, so the next contest meets
/// another entry rather than the same one again and again.
#[test]
fn a_refused_keys_victim_waits_at_the_inactive_head() {
    let n = 1000;
    let mut lv = Lruvec::new(
        Policy::LirsTinyLfu,
        true,
        false,
        (false, false),
        n as u64,
        n,
    );
    let mut out = Evicted::new();
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    // No entry was hit: reclaim takes the inactive tail.
    let tail = lv.lists[INACTIVE].tail;
    let refused = lv.not_admitted;
    lv.insert_new(hash(10_000), 10_000, 10_000, 1, Deadline::NEVER, &mut out);
    assert_eq!(lv.not_admitted, refused + 1, "a key never seen is refused");
    assert_eq!(
        lv.lists[INACTIVE].head, tail,
        "the victim waits at the head"
    );
    assert_ne!(lv.lists[INACTIVE].tail, tail);
    lv.check().unwrap();
}

/// `Policy::Lirs`: an evicted entry's shadow keeps its last access, so
/// that a refault's distance is its recency, as LIRS's stack keeps it.
/// Counted from its eviction instead, a loop's keys (which wait on the
/// inactive list before they go) passed for more recent than the oldest
/// LIR entry and churned (docs/cache.md: cs 500 29.3% against 22.9%).
#[test]
fn a_lirs_shadow_keeps_the_last_access() {
    let n = 1000;
    let mut lv = Lruvec::new(Policy::Lirs, true, false, (false, false), n as u64, n);
    // The LIR set, then `hir` HIR entries, all used at clock 0.
    let lir = ((1.0 - LIRS_HIR) * n as f64).floor() as usize;
    let hir = n - lir;
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    assert_eq!(lv.lists[ACTIVE].len, lir);
    // As many new keys evict the HIR entries, the last at clock hir - 1.
    for k in 0..hir as u64 {
        insert(&mut lv, 1000 + k);
    }
    let last = n as u64 - 1;
    assert!(lv.find(hash(last), |&k| k == last).is_none());
    let (d, ..) = lv
        .shadows
        .refault(short_hash(hash(last)))
        .expect("its shadow");
    assert_eq!(
        d,
        hir,
        "counted from its last access (clock 0), not its eviction ({})",
        hir - 1
    );
    lv.check().unwrap();
}

/// Aging a stale shard's active list passes over the entry being written
/// (`protect`) when it is the active tail, as reclaim does: when a value
/// replaced by a heavier one makes room, its own entry does not leave
/// the active list (here `pick_victim` is called with it protected, as
/// that insertion calls it).
#[test]
fn aging_passes_over_the_entry_being_written() {
    let n = 64;
    let mut lv = Lruvec::new(Policy::Workingset, true, false, (false, false), n as u64, n);
    // The fill puts the first keys on the active list, key 0 at its tail,
    // unhit; the rest wait on probation.
    for k in 0..n as u64 {
        insert(&mut lv, k);
    }
    let x = lv.find(hash(0), |&k| k == 0).unwrap();
    assert_eq!(lv.lists[ACTIVE].tail, x);
    assert!(lv.lists[ACTIVE].len >= 2 && !lv.active_has_room());
    lv.stale = true;
    assert_eq!(lv.evictions % AGE_EVERY, 0, "an aging step is due");
    let mut protect = x;
    let victim = lv.pick_victim(&mut protect).expect("a victim");
    assert_ne!(victim, x);
    assert!(
        lv.flags(x) & ACTIVE_FLAG != 0,
        "the entry being written left the active list"
    );
}

/// The entry being written (`protect`), alone on one list, is never the
/// victim: reclaim passes that list over and evicts from the other, under
/// every policy (checked before pinned tails were counted; an empty list
/// was skipped by its tail, NIL, and now by its length as well).
#[test]
fn the_entry_being_written_alone_on_its_list_is_not_the_victim() {
    for policy in [
        Policy::Workingset,
        Policy::Lirs,
        Policy::Lru,
        Policy::ActiveInactive,
    ] {
        let mut lv = Lruvec::new(policy, true, false, (false, false), 8, 8);
        for k in 0..8 {
            insert(&mut lv, k);
        }
        // Everything but one entry onto the active list.
        let keep = (0..8)
            .map(|k| slot(&lv, k).unwrap())
            .filter(|&i| !lv.is_active(i))
            .collect::<Vec<_>>();
        let (&p, rest) = keep.split_last().expect("an inactive entry");
        for &i in rest {
            lv.activate(i);
        }
        assert_eq!((lv.lists[INACTIVE].len, lv.lists[INACTIVE].tail), (1, p));
        let mut protect = p;
        let victim = lv.pick_victim(&mut protect).expect("a victim");
        assert_ne!(victim, p, "{policy:?}: the entry being written");
        lv.check().unwrap();
    }
}

/// `Policy::Lirs`'s test is strict, as LIRS's is: a refault is LIR only
/// if its key was used more recently than the LIR entry last demoted; one
/// used as long ago is HIR (the inactive head), one a tick more recently
/// LIR.
#[test]
fn a_lirs_refault_as_old_as_the_last_demoted_lir_entry_is_hir() {
    let n = 1000;
    for (newer, place) in [(0, Place::Inactive), (1, Place::Fill)] {
        let mut lv = Lruvec::new(Policy::Lirs, true, false, (false, false), n as u64, n);
        let hir = n - ((1.0 - LIRS_HIR) * n as f64).floor() as usize;
        for k in 0..(n + hir) as u64 {
            insert(&mut lv, k);
        }
        // Key n - 1, HIR and evicted, was last used at clock 0; the LIR
        // entry last demoted `newer` ticks before it.
        let last = n as u64 - 1;
        assert!(lv.find(hash(last), |&k| k == last).is_none());
        lv.lir_stamp = 0u32.wrapping_sub(newer);
        assert_eq!(lv.lir_reach() as usize, hir + newer as usize);
        assert_eq!(
            lv.lirs_refault(short_hash(hash(last))),
            place,
            "demoted {newer} tick(s) before the key's last use"
        );
    }
}

/// A shard's next expiry: the earliest deadline set; passed, the sweep
/// runs, and once it has looked at every slot it finds the next one due
/// (here none, the due entries reclaimed), after which lookups and
/// inserts read no deadline until then.
#[test]
fn the_next_expiry_follows_the_deadlines() {
    let n = 64;
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Workingset, true, false, (true, false), n as u64, n);
    let at = |at| Deadline { at, cap: u64::MAX };
    let mut out = Evicted::new();
    for k in 0..n as u64 {
        // Every eighth entry is due at 100, the others at 1000.
        let d = if k % 8 == 0 { 100 } else { 1000 };
        lv.insert_new(hash(k), k, k, 1, at(d), &mut out);
    }
    assert_eq!(lv.next_expiry.load(Ordering::Relaxed), 100);
    lv.now = 50;
    assert!((0..n as u32).all(|i| lv.live_at(i, 50)));
    lv.sweep_expired(&mut out);
    assert!(out.is_empty(), "nothing due: nothing looked at");
    assert_eq!((lv.sweep, lv.recalc_pos), (0, 0));
    lv.now = 100;
    for _ in 0..n {
        lv.sweep_expired(&mut out);
    }
    assert_eq!(out.len(), n / 8, "the due entries reclaimed");
    assert!(
        out.iter()
            .all(|(k, _, c)| k % 8 == 0 && *c == RemovalCause::Expired)
    );
    assert_eq!(lv.next_expiry.load(Ordering::Relaxed), 1000, "the next due");
    lv.check().unwrap();
}

/// With an entry due, a write's sweep looks at two slots, or at
/// [`SWEEP_WHEN_FULL`] when the shard is full, however many it finds
/// live, and reads [`RECALC_CHUNK`] deadlines toward the next expiry:
/// bounded work under the write lock, whatever the shard holds.
#[test]
fn a_sweep_looks_at_a_bounded_number_of_slots() {
    let n = 4 * RECALC_CHUNK;
    for (fill, looked) in [(n - 1, 2), (n, SWEEP_WHEN_FULL as u32)] {
        let mut lv: Lruvec<u64, u64> =
            Lruvec::new(Policy::Workingset, true, false, (true, false), n as u64, n);
        let mut out = Evicted::new();
        for k in 0..fill as u64 {
            lv.insert_new(
                hash(k),
                k,
                k,
                1,
                Deadline {
                    at: 1000,
                    cap: u64::MAX,
                },
                &mut out,
            );
        }
        // Due by the shard's bound, though no entry has expired.
        lv.next_expiry.store(100, Ordering::Relaxed);
        lv.now = 200;
        let _guard = mmbatch_testkit::hang_guard("a sweep of a full shard");
        lv.sweep_expired(&mut out);
        assert!(out.is_empty());
        assert_eq!(
            (lv.sweep, lv.recalc_pos),
            (looked, RECALC_CHUNK as u32),
            "{fill} entries"
        );
        // The rest of the deadlines, a chunk a write: the next expiry.
        for _ in 1..4 {
            lv.sweep_expired(&mut out);
        }
        assert_eq!(lv.next_expiry.load(Ordering::Relaxed), 1000);
    }
}

/// An entry moved (by a removal) into a slot the recomputation of the
/// next expiry has read, its own deadline unread, still counts: the
/// next expiry ends at or before it.
#[test]
fn an_entry_moved_behind_the_recomputation_counts() {
    let n = 4 * RECALC_CHUNK;
    let mut lv: Lruvec<u64, u64> =
        Lruvec::new(Policy::Workingset, true, false, (true, false), n as u64, n);
    let mut out = Evicted::new();
    for k in 0..n as u64 {
        // The last slot's entry is due at 500, the others at 1000.
        let at = if k == n as u64 - 1 { 500 } else { 1000 };
        lv.insert_new(hash(k), k, k, 1, Deadline { at, cap: u64::MAX }, &mut out);
    }
    lv.next_expiry.store(100, Ordering::Relaxed);
    lv.recalc_floor.store(u64::MAX, Ordering::Relaxed);
    lv.now = 200;
    lv.sweep_expired(&mut out);
    assert_eq!(lv.recalc_pos, RECALC_CHUNK as u32);
    // Slot 10 leaves; the last entry (due at 500) takes its place.
    let mut none = NIL;
    lv.remove(10, &mut none);
    assert_eq!(lv.deadline(10), 500);
    for _ in 1..4 {
        lv.sweep_expired(&mut out);
    }
    assert_eq!(lv.next_expiry.load(Ordering::Relaxed), 500);
    lv.check().unwrap();
    // A pass under way when the shard shrinks below its place: the last
    // entries leave, moving nothing, and the pass ends at the new length.
    lv.next_expiry.store(100, Ordering::Relaxed);
    lv.sweep_expired(&mut out);
    assert_eq!(lv.recalc_pos, RECALC_CHUNK as u32);
    for _ in 0..lv.len() {
        if lv.len() <= RECALC_CHUNK / 2 {
            break;
        }
        lv.remove(lv.len() as u32 - 1, &mut none);
    }
    assert_eq!(lv.len(), RECALC_CHUNK / 2);
    lv.sweep_expired(&mut out);
    assert_eq!(lv.next_expiry.load(Ordering::Relaxed), 500);
    lv.check().unwrap();
}

/// Only a time to idle capped by a time to live keeps a cap beside each
/// entry's deadline (8 bytes an entry, docs/cache.md "Expiry"): a time to
/// live alone, a time to idle alone and an `Expiry` keep none.
#[test]
fn only_a_time_to_idle_under_a_time_to_live_keeps_caps() {
    struct Minute;
    impl crate::Expiry<u64, u64> for Minute {
        fn expire_after_create(&self, _: &u64, _: &u64) -> Option<std::time::Duration> {
            Some(std::time::Duration::from_secs(60))
        }
    }
    let d = std::time::Duration::from_secs(60);
    let b = || crate::LruCache::<u64, u64>::builder(64).shards(1);
    for (what, cache, capped) in [
        ("time to live", b().time_to_live(d), false),
        ("time to idle", b().time_to_idle(d), false),
        ("both", b().time_to_live(d).time_to_idle(d), true),
        ("an Expiry", b().expiry(Minute), false),
    ] {
        let cache = cache.build().unwrap();
        for k in 0..64 {
            cache.insert(k, k);
        }
        let lv = cache.shards[0].read();
        assert_eq!(lv.deadlines.len(), 64, "{what}");
        assert_eq!(lv.caps.len(), if capped { 64 } else { 0 }, "{what}");
    }
}

/// The active list "has room" (a refault is activated whatever its
/// distance) only while it holds less than [`ACTIVE_ROOM`] of the shard:
/// at three of four entries it has none.
#[test]
fn the_active_list_has_room_below_three_quarters_of_the_shard() {
    let mut lv = full(4);
    assert!(lv.active_has_room(), "no entry active");
    lv.activate(0);
    lv.activate(1);
    assert!(lv.active_has_room(), "2 of 4 active");
    lv.activate(2);
    assert!(
        !lv.active_has_room(),
        "3 of 4 active: ACTIVE_ROOM is {ACTIVE_ROOM}"
    );
    lv.check().unwrap();
}

/// A `Workingset` shard takes its lookups' counts once a window of
/// evictions (its size, at least [`MIN_WINDOW`]), not at every insertion:
/// a window's hit ratio is what marks an active list stale.
#[test]
fn a_shard_looks_at_its_lookups_once_a_window() {
    let n = 64;
    let mut lv = full(n);
    assert!(lv.looks_at_lookups(), "a new shard looks at once");
    lv.lookups(0, 0);
    let window = MIN_WINDOW.max(n as u64);
    let mut k = n as u64;
    while lv.evictions < window {
        assert!(!lv.looks_at_lookups(), "after {} evictions", lv.evictions);
        insert(&mut lv, k);
        k += 1;
        assert!(k < n as u64 + 4 * window, "insertions evict nothing");
    }
    assert!(lv.looks_at_lookups(), "after a window of {window}");
}

/// A shard whose active list has no room is stale when fewer than one
/// lookup in `STALE_BELOW` hit since the last look (`Lruvec::lookups`):
/// exactly one in `STALE_BELOW` is not, none is.
#[test]
fn a_shard_is_stale_below_one_hit_in_stale_below() {
    let mut lv = full(100);
    activate_most(&mut lv);
    lv.lookups(1, STALE_BELOW - 1);
    assert!(!lv.stale, "1 hit in {STALE_BELOW} lookups");
    lv.lookups(1, 2 * STALE_BELOW - 1);
    assert!(lv.stale, "no hit in {STALE_BELOW} lookups");
    // With room on the active list, a shard is never stale.
    let mut roomy = full(100);
    roomy.lookups(0, STALE_BELOW);
    assert!(!roomy.stale);
}
