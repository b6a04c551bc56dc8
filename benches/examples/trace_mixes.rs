//! Replays the shared traces interleaved, as programs sharing one cache
//! would issue them (the LIRS paper's multi-program traces are such
//! mixes), into `LruCache` and its peers, read-through, and prints the
//! hit ratio of each beside OPT, exact LRU, quick_cache and moka, marking
//! where a policy falls more than half a point below the best of the last
//! three: `cargo run --release -p mmbatch-benches --example trace_mixes
//! [NAME]` (about 5 s). No mix was used to tune the policy.
//!
//! Each mix takes the traces' requests in bursts (1 to `2 * CHUNK`
//! requests, from a trace drawn at random in proportion to the requests
//! it has left, so that all of them run out together), each trace's keys
//! kept apart, the ARC traces cut to their first 400 000 requests; every
//! request counts. `CHUNK=200` (the default) sets the bursts; `NAME`
//! keeps the mixes whose name contains it (or any of several,
//! comma-separated);
//! `SIZES=250,1000,3000` sets the cache sizes; `REPS=3` runs each policy
//! three times (each with its own random hasher seed) and prints the
//! median with the least and greatest; `LAB_POLICY=adaptive,lirs` picks
//! the policies (`cache::policies`' names; `adaptive` alone by default);
//! `TIMELINE` set prints, instead and ignoring `REPS`, each policy's hit
//! % over each thirtieth of the mix (`cache_hits::timeline`). The
//! figures in docs/cache.md ("Unseen shapes: the shared traces
//! interleaved") come from here.

use mmbatch_benches::cache_hits::{MIXES, interleave, lab_policies, lab_print, wanted};

fn main() {
    let only = std::env::args().nth(1);
    let env = |name: &str| std::env::var(name).ok();
    let ours = lab_policies();
    let sizes: Vec<usize> = env("SIZES").map_or(vec![250, 1000, 3000], |v| {
        v.split(',')
            .map(|x| x.parse().expect("SIZES: numbers"))
            .collect()
    });
    let reps: usize = env("REPS").map_or(3, |v| v.parse().expect("REPS: a number"));
    let chunk: u64 = env("CHUNK").map_or(200, |v| v.parse().expect("CHUNK: a number"));
    for mix in MIXES {
        if !wanted(only.as_deref(), mix) {
            continue;
        }
        let t = interleave(mix, chunk).unwrap_or_else(|e| panic!("{mix}: {e}"));
        let label = |c| format!("{mix:37} {c:5}");
        lab_print(mix, label, &t, &sizes, 0, &ours, reps);
    }
}
