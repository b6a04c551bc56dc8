//! `cargo bench --bench munlock`: seed 000 under criterion, one group per
//! layout with every step of the series as a `BenchmarkId`, measured by the
//! same `mmbatch_benches::munlock::measure` that `cargo xtask repro` calls
//! (with a smaller area, so criterion can repeat it).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::munlock::measure;
use mmbatch_benches::total;
use mmbatch_lru::MunlockStep;

/// 64 Ki frames (256 MiB of pages) per munlock.
const FRAMES: usize = 1 << 16;

fn bench(c: &mut Criterion) {
    for (name, interleave) in [("single-node", false), ("interleave", true)] {
        let mut group = c.benchmark_group(format!("munlock/{name}"));
        group.sample_size(10);
        for step in MunlockStep::all() {
            group.bench_function(BenchmarkId::from_parameter(step.get()), |b| {
                b.iter_custom(|iters| total(iters, || measure(FRAMES, interleave, step).elapsed_s));
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
