//! `cargo bench --bench activate`: seed 004 under criterion, immediate and
//! batched activation as `BenchmarkId`s of one group per workload, measured
//! by the same `mmbatch_benches::activate::measure` that `cargo xtask
//! repro` calls (with a smaller table, so criterion can repeat it).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::total;
use mmbatch_benches::{
    Config,
    activate::{Workload, measure},
};
use mmbatch_lru::Mode;

/// 64 Ki frames per run.
const FRAMES: usize = 1 << 16;

fn bench(c: &mut Criterion) {
    let threads = Config::default().max_threads();
    for workload in Workload::ALL {
        let name = match workload {
            Workload::Exit => "exit",
            w => w.name(),
        };
        let mut group = c.benchmark_group(format!("activate/{name}/threads-{threads}"));
        group.sample_size(10);
        for (mode, id) in [(Mode::Immediate, "immediate"), (Mode::Batched, "batched")] {
            group.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter_custom(|iters| {
                    total(iters, || measure(workload, mode, threads, FRAMES).elapsed_s)
                });
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
