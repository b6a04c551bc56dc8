//! What the examples that replay shapes never used for tuning
//! (`policy_families`, `trace_mixes`, `trace_sizes`) share: the policies
//! they run, the row each prints and the `TIMELINE` each can print
//! instead.

use mmbatch_cache::{LruCache, Policy};

use super::{Contender, hits};

/// The policies `LAB_POLICY` names (comma-separated names of
/// [`policies`](crate::cache::policies)); `adaptive`, the default, alone
/// when unset.
pub fn lab_policies() -> Vec<Contender> {
    let wanted = std::env::var("LAB_POLICY").ok();
    crate::cache::policies()
        .into_iter()
        .filter(|(p, _)| {
            wanted
                .as_deref()
                .map_or(*p == "adaptive", |w| w.split(',').any(|w| w == *p))
        })
        .map(|(p, policy)| Contender::Mmbatch(p, policy))
        .collect()
}

/// One printed row for `trace` (its [`next_uses`](super::next_uses) in
/// `next`) at `capacity`, hits counted from `count_from`: `label`, OPT,
/// exact LRU, quick_cache and moka, then each of `ours` as the median of
/// `reps` replays (each cache with its own hasher seed; the least and
/// greatest beside it when more than one), marked `BELOW(by)` where that
/// median is more than half a point under the best of the last three.
pub fn lab_row(
    label: &str,
    trace: &[u64],
    next: &[usize],
    capacity: usize,
    count_from: usize,
    ours: &[Contender],
    reps: usize,
) -> String {
    let counted = (trace.len() - count_from).max(1) as f64;
    let pct = |w: Contender| 100.0 * hits(w, capacity, trace, next, count_from) as f64 / counted;
    let (opt, lru, qc, mk) = (
        pct(Contender::Opt),
        pct(Contender::ExactLru),
        pct(Contender::QuickCache),
        pct(Contender::Moka),
    );
    let bar = qc.max(mk).max(lru) - 0.5;
    let mut line = format!("{label}  opt {opt:5.1} lru {lru:5.1} qc {qc:5.1} moka {mk:5.1} |");
    for &w in ours {
        let mut xs: Vec<f64> = (0..reps.max(1)).map(|_| pct(w)).collect();
        xs.sort_by(f64::total_cmp);
        let x = xs[xs.len() / 2];
        line += &format!(" {} {x:5.1}", w.name().trim_start_matches("mmbatch-"));
        if xs.len() > 1 {
            line += &format!(" [{:.1}-{:.1}]", xs[0], xs[xs.len() - 1]);
        }
        if x < bar {
            line += &format!(" BELOW({:+.1})", x - bar - 0.5);
        }
    }
    line
}

/// Whether the example's `NAME` argument (`only`: names, comma-separated,
/// or none for all) keeps the trace, family or mix called `name`: it
/// contains one of them.
pub fn wanted(only: Option<&str>, name: &str) -> bool {
    only.is_none_or(|o| o.split(',').any(|o| name.contains(o)))
}

/// Prints `trace` at each of `sizes` for each of `ours`: a [`lab_row`]
/// labelled `label(size)`, hits counted from `count_from`, or, with
/// `TIMELINE` set, a [`timeline`] instead (`reps` then unused).
pub fn lab_print(
    name: &str,
    label: impl Fn(usize) -> String,
    trace: &[u64],
    sizes: &[usize],
    count_from: usize,
    ours: &[Contender],
    reps: usize,
) {
    if std::env::var_os("TIMELINE").is_some() {
        for &c in sizes {
            timeline(&format!("{name} {c}"), trace, c, count_from, ours);
        }
        return;
    }
    let next = super::next_uses(trace);
    for &c in sizes {
        println!(
            "{}",
            lab_row(&label(c), trace, &next, c, count_from, ours, reps)
        );
    }
}

/// The examples' `TIMELINE`: each of `ours` replayed over `trace` at
/// `capacity`, one line a policy: the hit % of each thirtieth of the
/// trace (each of `Adaptive`'s marked with what its shards ran at the
/// thirtieth's end: `L`, some ran `Lirs`; `R`, some `Lru`; else
/// `Workingset`), and the hit % from `count_from` on: how the duel
/// follows a workload that changes.
pub fn timeline(
    label: &str,
    trace: &[u64],
    capacity: usize,
    count_from: usize,
    ours: &[Contender],
) {
    println!("{label}");
    let chunk = (trace.len() / 30).max(1);
    for &w in ours {
        let Contender::Mmbatch(name, policy) = w else {
            continue;
        };
        let cache: LruCache<u64, u64> = LruCache::builder(capacity as u64)
            .policy(policy)
            .build()
            .expect("a valid capacity");
        let mut line = format!("  {name:10}");
        let (mut before, mut counted) = ((0, 0), (0u64, 0u64));
        for (i, &k) in trace.iter().enumerate() {
            let hit = cache.get(&k).is_some();
            if !hit {
                cache.insert(k, k);
            }
            if i >= count_from {
                counted = (counted.0 + u64::from(hit), counted.1 + 1);
            }
            if (i + 1) % chunk == 0 {
                let s = cache.stats();
                let (h, m) = (s.hits - before.0, s.misses - before.1);
                before = (s.hits, s.misses);
                line += &format!(" {:3.0}", 100.0 * h as f64 / (h + m).max(1) as f64);
                line += match (policy, s.lirs_shards > 0, s.lru_shards > 0) {
                    (Policy::Adaptive, true, _) => "L",
                    (Policy::Adaptive, _, true) => "R",
                    _ => " ",
                };
            }
        }
        let pct = 100.0 * counted.0 as f64 / counted.1.max(1) as f64;
        println!("{line} | {pct:.2}");
    }
}
