//! The duel's verdict: which simulation's lead turns the shards, and
//! when.

use super::{LIRS, LRU, TINYLFU, WORKINGSET};
use crate::cache::shard::tunables::*;

/// Which of [`CONTENDERS`](super::CONTENDERS) the shards should run,
/// running `now` (an index into it), after `seen` sampled accesses that
/// left the simulations' decaying hits at `score` of `window` accesses
/// (decaying alike): no change before [`DUEL_WARMUP`] sampled accesses,
/// while the simulations fill; `Workingset` while none hits (no policy
/// keeps anything there, and LIRS's stamps would cost memory for nothing);
/// LRU once it leads the best of the others (`Workingset`, `Lirs`,
/// `LirsTinyLfu`) by [`DUEL_MARGIN`] plus [`DUEL_LRU_MARGIN_SHARE`] of the
/// lesser of its hits and misses, and by no less than the others' margin,
/// from [`DUEL_LRU_WARMUP`] on (taking it up spends what they learned:
/// Workingset's active list and refault history, LIRS's LIR set, which no
/// simulation prices; a share of hits alone would ask a trace hit nine
/// times in ten to lose a third of its misses); else the best of the others
/// if it leads what runs by [`DUEL_MARGIN`] plus [`DUEL_MARGIN_SHARE`] of
/// its hits, else `now`. `LirsTinyLfu` counts as the best of the others
/// only while `Lirs` or itself runs, and once it also leads `Lirs` by that
/// margin.
pub(in crate::cache) fn verdict(score: [f64; 4], window: f64, seen: u64, now: usize) -> usize {
    let lru_margin = asked(LRU, score[LRU], window);
    // The better of Workingset and LIRS, Workingset on a tie; LIRS with
    // admission instead while LIRS runs (with it or without) if it leads
    // both, and LIRS by the usual margin: it is LIRS with one more rule,
    // whose sketch starts afresh when taken up, and taken up from
    // Workingset near a tie, the shards turned to it and back and a loop
    // three times the cache lost a fifth of its hits.
    let tinylfu_leads = matches!(now, LIRS | TINYLFU)
        && score[TINYLFU] > score[LIRS] + asked(TINYLFU, score[TINYLFU], window)
        && score[TINYLFU] > score[WORKINGSET];
    let other = if tinylfu_leads {
        TINYLFU
    } else {
        usize::from(score[LIRS] > score[WORKINGSET])
    };
    // What LRU must lead: the best of the others, or LIRS with admission
    // running short of its own margin over LIRS.
    let rival = if now == TINYLFU {
        score[other].max(score[TINYLFU])
    } else {
        score[other]
    };
    if seen < DUEL_WARMUP {
        now
    } else if score.iter().all(|&s| s < 1.0) {
        0
    } else if seen >= DUEL_LRU_WARMUP && score[LRU] > rival + lru_margin {
        LRU
    } else if score[other] > score[now] + asked(other, score[other], window) {
        other
    } else {
        now
    }
}

/// The lead [`verdict`] asks of policy `k` (an index into
/// [`CONTENDERS`](super::CONTENDERS)) with `score` hits of `window`
/// accesses, to be taken up.
fn asked(k: usize, score: f64, window: f64) -> f64 {
    let margin = |lead: f64, share: f64| DUEL_MARGIN + share * lead;
    let usual = margin(score, DUEL_MARGIN_SHARE);
    if k == LRU {
        margin(score.min(window - score), DUEL_LRU_MARGIN_SHARE).max(usual)
    } else {
        usual
    }
}

/// [`verdict`] over the whole window (`whole`: the simulations' decaying
/// hits and the accesses they count), or, where that keeps `now`, over
/// the recent one ([`DUEL_RECENT_WINDOW`], `recent` likewise) for a policy
/// that the whole window also ranks first of the four (a first that
/// `now` may not turn to, `LirsTinyLfu` from `Workingset` or `Lru`, leaves
/// `now`), [`DUEL_MARGIN`] ahead of `now`. So a workload that changes
/// character is followed once the recent window sees the change and the
/// whole one ranks it first, not only once the whole one's lead passes
/// its margin, which takes most of a window; LRU too is taken up and
/// left that way, its larger margin asked of the recent window only. A
/// lead that is a blip of the recent window, or within `DUEL_MARGIN` of
/// `now` over the whole, turns nothing. Nor does the recent window turn
/// the shards back to `left`, the policy they left within the last
/// [`DUEL_RECENT_WINDOW`] sampled accesses, and the whole window does so
/// only if it leads what runs by twice the lead it is asked otherwise:
/// where two policies tie over the whole window, each phase of a
/// periodic workload leads lately, and a turn at each loses what each
/// policy had learned, which no simulation prices.
pub(in crate::cache) fn verdict_of_both(
    whole: ([f64; 4], f64),
    recent: ([f64; 4], f64),
    seen: u64,
    now: usize,
    left: Option<usize>,
) -> usize {
    let mut by_whole = verdict(whole.0, whole.1, seen, now);
    let k = by_whole;
    if Some(k) == left && whole.0[k] - whole.0[now] <= 2.0 * asked(k, whole.0[k], whole.1) {
        by_whole = now;
    }
    if by_whole != now || recent.0.iter().all(|&s| s < 1.0) {
        return by_whole;
    }
    let by_recent = verdict(recent.0, recent.1, seen, now);
    let first = whole.0.iter().all(|&s| whole.0[by_recent] >= s);
    if first && Some(by_recent) != left && whole.0[by_recent] > whole.0[now] + DUEL_MARGIN {
        by_recent
    } else {
        now
    }
}

/// Whether [`verdict_of_both`] keeps `now` whatever its other inputs,
/// from the whole window's scores alone: before [`DUEL_WARMUP`] sampled
/// accesses, and while some simulation hits and none leads `now` by more
/// than [`DUEL_MARGIN`], the least lead any of its rules asks (LRU's is
/// over the best of the others, which is at least `now`'s score unless
/// LRU runs, and then it keeps LRU; the margins' shares are not
/// negative). Tested first on every sampled access, which mostly changes
/// nothing: the full verdict costs a small cache about a tenth of its
/// instructions (docs/cache.md, "Small caches").
#[inline]
pub(in crate::cache) fn keeps(whole: &[f64; 4], seen: u64, now: usize) -> bool {
    // What the shortcut rests on: no rule asks less than DUEL_MARGIN.
    const _: () = assert!(DUEL_MARGIN_SHARE >= 0.0 && DUEL_LRU_MARGIN_SHARE >= 0.0);
    seen < DUEL_WARMUP
        || (whole.iter().any(|&s| s >= 1.0) && whole.iter().all(|&s| s <= whole[now] + DUEL_MARGIN))
}

/// The policy the shards left (`left`: it, and the sampled accesses seen
/// then) if that was within the last [`DUEL_RECENT_WINDOW`] of `seen`
/// sampled accesses: what [`verdict_of_both`] holds back.
pub(in crate::cache) fn just_left(left: Option<(usize, u64)>, seen: u64) -> Option<usize> {
    left.filter(|&(_, at)| seen - at < u64::from(DUEL_RECENT_WINDOW))
        .map(|(policy, _)| policy)
}
