//! `cargo bench --bench cache`: the cache experiment under criterion — each
//! implementation as a `BenchmarkId` of one group per mix and skew, at
//! 2×CPUs threads, measured by the same `mmbatch_benches::cache::measure`
//! that `cargo xtask repro` calls (on a smaller key space).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mmbatch_benches::{
    Config,
    cache::{Impl, Mix, SKEWS, build, measure, warm, zipf_stream},
    total,
};

/// 64 Ki keys, a 6,553-entry cache, 256 Ki operations per iteration.
const KEYS: u64 = 1 << 16;
const OPS: usize = 1 << 18;

fn bench(c: &mut Criterion) {
    let threads = Config::default().max_threads();
    let capacity = (KEYS / 10) as usize;
    for s in SKEWS {
        let warmup = zipf_stream(KEYS, s, capacity * 8, 1);
        let stream = zipf_stream(KEYS, s, OPS, 2);
        for mix in Mix::ALL {
            let mut group =
                c.benchmark_group(format!("cache/{}-s{s}/threads-{threads}", mix.name()));
            group.sample_size(10);
            group.throughput(Throughput::Elements(OPS as u64));
            for which in Impl::ALL {
                let cache = build(which, capacity);
                warm(&*cache, &warmup);
                group.bench_function(BenchmarkId::from_parameter(which.name()), |b| {
                    b.iter_custom(|iters| {
                        total(iters, || measure(&*cache, mix, threads, &stream).elapsed_s)
                    });
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
