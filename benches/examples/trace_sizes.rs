//! Replays the shared traces at cache sizes `cache-hits` does not judge
//! into `LruCache` and its peers, read-through, and prints the hit ratio
//! of each beside OPT, exact LRU, quick_cache and moka, marking where a
//! policy falls more than half a point below the best of the last three:
//! `cargo run --release -p mmbatch-benches --example trace_sizes [NAME]`
//! (about a minute, most of it P3). No size here was used to tune the
//! policy before 2026-12-05 (docs/cache.md, "Unseen sizes of the shared
//! traces").
//!
//! `NAME` keeps the traces whose name contains it (or any of several,
//! comma-separated); `SIZES=100,200` replaces each kept trace's sizes;
//! `REPS=3` runs each policy three times (each with its own random
//! hasher seed) and prints the median with the least and greatest;
//! `LAB_POLICY=adaptive,lirs` picks the policies (`cache::policies`'
//! names; `adaptive` alone by default); `TIMELINE` set prints, instead
//! and ignoring `REPS`, each policy's hit % over each thirtieth of the
//! trace (`cache_hits::timeline`).

use mmbatch_benches::cache_hits::{lab_policies, lab_print, read_trace, traces_dir, wanted};

/// Each shared trace and sizes between the judged ones
/// (`cache_hits::LIRS_TRACES`, `OLTP_SIZES`, `P3_SIZES`), below them and
/// above them (for P3, up to two thirds of its pages).
const SIZES: [(&str, &[usize]); 7] = [
    ("lirs-multi1", &[100, 150, 375, 750, 1500, 2000]),
    ("lirs-gli", &[100, 375, 750, 1500, 2000, 2500]),
    ("lirs-ps", &[100, 300, 750, 1500, 2000]),
    ("lirs-sprite", &[50, 200, 300, 750, 1500]),
    ("lirs-cs", &[50, 200, 400, 750, 1000]),
    ("OLTP", &[500, 3000, 7500, 20000, 30000]),
    ("P3", &[8192, 16384, 65536, 196608, 262144, 524288]),
];

fn main() {
    let only = std::env::args().nth(1);
    let env = |name: &str| std::env::var(name).ok();
    let reps: usize = env("REPS").map_or(3, |v| v.parse().expect("REPS: a number"));
    let sizes: Option<Vec<usize>> = env("SIZES").map(|v| {
        v.split(',')
            .map(|s| s.parse().expect("SIZES: comma-separated numbers"))
            .collect()
    });
    let ours = lab_policies();
    for (name, judged_not) in SIZES {
        if !wanted(only.as_deref(), name) {
            continue;
        }
        let path = traces_dir().join(format!("{name}.lis.zst"));
        let trace = read_trace(&path, usize::MAX).unwrap_or_else(|e| panic!("{name}: {e}"));
        let label = |c| format!("{name:12} {c:6}");
        let sizes = sizes.as_deref().unwrap_or(judged_not);
        lab_print(name, label, &trace, sizes, 0, &ours, reps);
    }
}
