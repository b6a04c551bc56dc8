//! `cargo bench --bench lockonfault`: seed 003 on the host under
//! criterion, the processing part of each strategy as a `BenchmarkId`,
//! measured by the same `mmbatch_benches::lockonfault::measure` that
//! `cargo xtask repro` calls (a 64 MiB file, so criterion can repeat it).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::lockonfault::{Strategy, data_file, measure, offsets};
use mmbatch_benches::total;

fn bench(c: &mut Criterion) {
    let bytes = 64 << 20;
    let path = data_file(bytes).expect("data file");
    let offs = offsets(bytes);
    let mut group = c.benchmark_group("lockonfault/64M/processing");
    group.sample_size(10);
    for strategy in Strategy::ALL {
        if measure(strategy, &path, bytes, &offs).is_err() {
            eprintln!("{}: refused by this host, skipped", strategy.name());
            continue;
        }
        group.bench_function(BenchmarkId::from_parameter(strategy.name()), |b| {
            b.iter_custom(|iters| {
                total(iters, || {
                    measure(strategy, &path, bytes, &offs)
                        .expect("ran once")
                        .processing_s
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
