//! Replays the `cache-hits` traces through `LruCache`'s default policy
//! with a fixed hasher (two runs differ only by the policy) and prints
//! the hit ratio of each trace and size, for quick iterations on the
//! policy: `cargo run --release -p mmbatch-benches --example policy_lab
//! [NAME]` (about a minute; the peers' figures are in `cache-hits`).
//! `NAME` keeps the traces whose name contains it (or any of several,
//! comma-separated); `LAB_STATS=1` adds
//! the refault share, activations per refault, the time spent
//! thrashing, the share of requests served while shards ran LIRS and the
//! shards' policy changes (`Policy::Adaptive`'s); `LAB_HALF=1` counts
//! hits in each trace's second half only; `LAB_POLICY=NAME` replays
//! another policy (`workingset`, `lirs`, `lru`, ...).

use std::{collections::hash_map::DefaultHasher, hash::BuildHasherDefault};

use mmbatch_benches::cache_hits::{
    LIRS_TRACES, OLTP_SIZES, P3_SIZES, SYNTH_CAPACITY, SYNTH_KEYS, SYNTH_OPS, Shape, read_trace,
    traces_dir, wanted,
};
use mmbatch_cache::{LruCache, Policy};

fn main() {
    let only = std::env::args().nth(1);
    let mut cases: Vec<(String, Vec<u64>, Vec<usize>, usize)> = Vec::new();
    let want = |name: &str| wanted(only.as_deref(), name);
    for (name, sizes) in [("OLTP", OLTP_SIZES.to_vec()), ("P3", P3_SIZES.to_vec())] {
        if want(name) {
            let t = read_trace(&traces_dir().join(format!("{name}.lis.zst")), usize::MAX).unwrap();
            cases.push((name.into(), t, sizes, 0));
        }
    }
    for (name, sizes) in LIRS_TRACES {
        let name = format!("lirs-{name}");
        if want(&name) {
            let t = read_trace(&traces_dir().join(format!("{name}.lis.zst")), usize::MAX).unwrap();
            cases.push((name, t, sizes.to_vec(), 0));
        }
    }
    for (i, shape) in Shape::ALL.into_iter().chain(Shape::EXTRA).enumerate() {
        if want(shape.name()) {
            let n = SYNTH_OPS as usize;
            let t = shape.trace(SYNTH_KEYS, SYNTH_CAPACITY, n, 11 + i as u64);
            cases.push((shape.name().into(), t, vec![SYNTH_CAPACITY], n / 2));
        }
    }
    let half = std::env::var_os("LAB_HALF").is_some();
    // LAB_POLICY=lirs (or active-inactive, lru): another policy than the
    // default.
    let policy = std::env::var("LAB_POLICY").map_or(Policy::default(), |p| {
        mmbatch_benches::cache::policies()
            .into_iter()
            .find(|(n, _)| *n == p)
            .unwrap_or_else(|| panic!("LAB_POLICY={p}: not a policy"))
            .1
    });
    for (name, trace, sizes, from) in cases {
        let from = if half { trace.len() / 2 } else { from };
        for pages in sizes {
            // A fixed hasher: runs differ only by the policy.
            let c: LruCache<u64, u64, BuildHasherDefault<DefaultHasher>> =
                LruCache::builder(pages as u64)
                    .policy(policy)
                    .hasher(BuildHasherDefault::default())
                    .build()
                    .unwrap();
            let (mut h, mut thrash, mut lirs, mut lru, mut switches, mut lirs_ops, mut lru_ops) =
                (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
            for (i, &k) in trace.iter().enumerate() {
                if c.get(&k).is_some() {
                    h += u64::from(i >= from);
                } else {
                    c.insert(k, k);
                }
                let st = c.stats();
                thrash += st.thrashing_shards;
                switches += u64::from(st.lirs_shards != lirs || st.lru_shards != lru);
                (lirs, lru) = (st.lirs_shards, st.lru_shards);
                lirs_ops += u64::from(lirs > 0);
                lru_ops += u64::from(lru > 0);
            }
            let pct = h as f64 * 100.0 / (trace.len() - from) as f64;
            if std::env::var_os("LAB_STATS").is_some() {
                let st = c.stats();
                println!(
                    "{name:>20} {pages:>7} {pct:6.2}  refault/miss {:.2} act/refault {:.2} thrashing {:.2} lirs {:.2} lru {:.2} switches {switches}",
                    st.refaults as f64 / st.misses as f64,
                    st.refault_activations as f64 / st.refaults.max(1) as f64,
                    thrash as f64 / trace.len() as f64,
                    lirs_ops as f64 / trace.len() as f64,
                    lru_ops as f64 / trace.len() as f64
                );
                continue;
            }
            println!("{name:>20} {pages:>7} {pct:6.2}");
        }
    }
}
