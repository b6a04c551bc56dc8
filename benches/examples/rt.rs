//! temporary profiling harness (not committed)
use mmbatch_benches::cache::{Impl, Mix, build, measure, zipf_stream};
use mmbatch_lru::Policy;
fn main() {
    let keys = 1u64 << 20;
    let cap = (keys / 10) as usize;
    let s: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(1.1);
    let threads: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse().unwrap())
        .unwrap_or(1);
    let read = std::env::args().nth(3).is_some();
    let mix = if read { Mix::Read } else { Mix::ReadThrough };
    let impls = [
        Impl::QuickCache,
        Impl::Mmbatch("workingset", Policy::Workingset),
        Impl::Mmbatch("active-inactive", Policy::ActiveInactive),
    ];
    let caches: Vec<_> = impls.iter().map(|&i| build(i, cap)).collect();
    let warm = zipf_stream(keys, s, 2_000_000, 1);
    for c in &caches {
        mmbatch_benches::cache::warm(&**c, &warm);
    }
    let fixed = zipf_stream(keys, s, 1_000_000, 7);
    let mut res = vec![Vec::new(); impls.len()];
    for round in 0..15 {
        let st = if read {
            fixed.clone()
        } else {
            zipf_stream(keys, s, 1_000_000, 100 + round)
        };
        for (i, c) in caches.iter().enumerate() {
            let smp = measure(&**c, mix, threads, &st);
            res[i].push(smp.ops as f64 / smp.elapsed_s / 1e6);
        }
    }
    let q = {
        let mut r = res[0].clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        r[r.len() / 2]
    };
    for (i, r) in res.iter_mut().enumerate() {
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{:20} median {:.2} Mops/s  {:.2}x",
            impls[i].name(),
            r[r.len() / 2],
            r[r.len() / 2] / q
        );
    }
}
