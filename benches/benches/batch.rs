//! `cargo bench --bench batch`: the `batch` experiment under criterion.
//! One group per workload and thread count, with the per-op baseline and
//! every batched variant as `BenchmarkId`s, measured by the same
//! `mmbatch_benches::batch::measure` that `cargo xtask repro` calls.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mmbatch_benches::{
    Config,
    batch::{Variant, Workload, measure},
};

fn bench(c: &mut Criterion) {
    for workload in [Workload::Counter, Workload::List] {
        for threads in Config::default().thread_rows() {
            let mut group =
                c.benchmark_group(format!("batch/{}/threads-{threads}", workload.name()));
            // One criterion iteration is one op, spread over the threads.
            group.throughput(Throughput::Elements(1));
            for variant in Variant::all() {
                group.bench_function(BenchmarkId::from_parameter(variant.name()), |b| {
                    b.iter_custom(|iters| {
                        let per_thread = iters.div_ceil(threads as u64).max(1);
                        let s = measure(workload, variant, threads, per_thread);
                        // Scale to exactly `iters` ops.
                        Duration::from_secs_f64(
                            s.elapsed.as_secs_f64() * iters as f64 / s.ops as f64,
                        )
                    });
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
