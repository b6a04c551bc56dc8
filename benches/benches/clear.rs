//! `cargo bench --bench clear`: seed 001 under criterion — memset against
//! ktask clear at each thread count, and MAP_POPULATE against parallel
//! MADV_POPULATE_WRITE — measured by the same
//! `mmbatch_benches::clear::measure_*` that `cargo xtask repro` calls
//! (256 MiB, so criterion can repeat them).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::clear::{measure_clear, measure_populate, threads};
use mmbatch_benches::total;
use mmbatch_ktask::Mapping;

const BYTES: usize = 256 << 20;

fn bench(c: &mut Criterion) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut buf = Mapping::populated(BYTES).expect("mmap");
    let mut group = c.benchmark_group("clear/256M");
    group.sample_size(10);
    for t in std::iter::once(0).chain(threads(cpus, None)) {
        let id = if t == 0 {
            "memset".to_owned()
        } else {
            format!("ktask-{t}")
        };
        group.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter_custom(|iters| {
                total(iters, || {
                    measure_clear(buf.as_mut_slice().expect("read-write"), t)
                })
            });
        });
    }
    group.finish();
    let mut group = c.benchmark_group("populate/256M");
    group.sample_size(10);
    for t in std::iter::once(0).chain(threads(cpus, None)) {
        let id = if t == 0 {
            "map-populate".to_owned()
        } else {
            format!("madv-{t}")
        };
        group.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter_custom(|iters| total(iters, || measure_populate(BYTES, t)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
