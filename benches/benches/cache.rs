//! `cargo bench --bench cache`: the cache experiment under criterion — each
//! implementation as a `BenchmarkId` of one group per mix and workload, at
//! 2×CPUs threads, measured by the same `mmbatch_benches::cache::measure`
//! that `cargo xtask repro` calls (on a smaller key space). The scan
//! workload replays the same scan keys each iteration here (criterion
//! repeats one stream), so its scans are one-off only within an iteration.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mmbatch_benches::{
    Config,
    cache::{
        self, Impl, build,
        in_flight::{Guarded, misses_in_flight},
        measure, plan, warm, zipf_stream,
    },
    total,
};

/// 64 Ki keys, a 6,553-entry cache, 256 Ki operations per iteration (the
/// small cache: 4096 keys, 409 entries).
const KEYS: u64 = 1 << 16;
const OPS: usize = 1 << 18;

fn bench(c: &mut Criterion) {
    let threads = Config::default().max_threads();
    for (workload, mix) in plan() {
        // The small cache at the size `repro` runs it (a 64th of the key
        // space here would leave it 25 entries); the others at `KEYS`.
        let keys = if workload.judged() {
            KEYS
        } else {
            workload.keys(cache::KEYS as u64)
        };
        let capacity = (keys / 10) as usize;
        let s = workload.skew();
        let warmup = workload.apply(&zipf_stream(keys, s, capacity * 8, 1), 0);
        let stream = workload.apply(&zipf_stream(keys, s, OPS, 2), warmup.len() as u64);
        let mut group = c.benchmark_group(format!(
            "cache/{}-{}/threads-{threads}",
            mix.name(),
            workload.name()
        ));
        group.sample_size(10);
        group.throughput(Throughput::Elements(OPS as u64));
        for which in Impl::all() {
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

/// Read-through misses of one thread while 0, 1 Ki and 16 Ki other loads
/// are held open (`cache::in_flight`), in a 64 Ki-entry cache.
fn in_flight(c: &mut Criterion) {
    const MISSES: u64 = 1 << 14;
    let mut group = c.benchmark_group("cache/miss-with-loads-in-flight");
    group.sample_size(10);
    group.throughput(Throughput::Elements(MISSES));
    for held in [0, 1 << 10, 1 << 14] {
        for which in Guarded::ALL {
            group.bench_function(BenchmarkId::new(which.name(), held), |b| {
                b.iter_custom(|iters| {
                    total(iters, || misses_in_flight(which, 1 << 16, held, MISSES))
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2));
    targets = bench, in_flight
}
criterion_main!(benches);
