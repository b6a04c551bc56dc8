//! Replays 23 synthetic access patterns that no tunable of `LruCache`
//! was set on (Zipf at four skews, one-hit wonders, loops just over and
//! well over the cache, two programs interleaved, a moving hot set, an
//! LRU stack-distance model, scans, correlated pairs, phases, a zigzag,
//! nested loops, tenants, a CDN-like mix) into `LruCache` and its peers,
//! read-through, at two sizes, and prints the hit ratio of each beside
//! OPT, exact LRU, quick_cache and moka, marking where a policy falls
//! more than half a point below the best of the last three:
//! `cargo run --release -p mmbatch-benches --example policy_families
//! [NAME]` (about 20 s); with `HELD_OUT` set, the ten families written
//! after the policy instead (`families::HELD_OUT`), with `HELD_OUT=2` the
//! seven written a day later (`families::HELD_OUT_2`). `NAME` keeps the
//! families whose name contains it (or any of several, comma-separated);
//! `SIZES=500,5000` sets the cache sizes; `REPS=5` runs each policy five
//! times (each with its own random hasher seed) and prints the minimum,
//! median and maximum;
//! `LAB_POLICY=adaptive,lirs` picks the policies (`cache::policies`'
//! names; `adaptive` alone by default). Hits count from a fifth of the
//! trace on. `TIMELINE` set (to anything) prints instead, ignoring
//! `REPS`, each policy's hit % over each thirtieth of the trace and what
//! `Adaptive`'s shards ran then (`cache_hits::timeline`). The
//! figures behind issue 46's notes on unseen shapes (docs/cache.md) come
//! from here.

use mmbatch_benches::cache_hits::{
    families::{FAMILIES, HELD_OUT, HELD_OUT_2, family},
    lab_policies, lab_print, wanted,
};

fn main() {
    let only = std::env::args().nth(1);
    let n = 600_000;
    let env = |name: &str| std::env::var(name).ok();
    let ours = lab_policies();
    let sizes: Vec<usize> = env("SIZES").map_or(vec![500, 5000], |v| {
        v.split(',')
            .map(|x| x.parse().expect("SIZES: numbers"))
            .collect()
    });
    let reps: usize = env("REPS").map_or(1, |v| v.parse().expect("REPS: a number"));
    let set: &[&str] = match env("HELD_OUT").as_deref() {
        Some("2") => &HELD_OUT_2,
        Some(_) => &HELD_OUT,
        None => &FAMILIES,
    };
    for &name in set {
        if !wanted(only.as_deref(), name) {
            continue;
        }
        // A family's trace depends on the cache's size: one trace a size.
        for &c in &sizes {
            let t = family(name, c, n, 7);
            let label = |c| format!("{name:13} {c:5}");
            lab_print(name, label, &t, &[c], t.len() / 5, &ours, reps);
        }
    }
}
