//! `cargo bench --bench timedmunlock`: seed 000 on the host under
//! criterion, raw system calls and the crate side by side, measured by the
//! same `mmbatch_benches::timedmunlock::measure` that `cargo xtask repro`
//! calls (256 MiB per run, so criterion can repeat it).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::timedmunlock::{Kind, measure};
use mmbatch_benches::total;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("timedmunlock/256M");
    group.sample_size(10);
    for kind in [
        Kind::RawNoThp,
        Kind::RegionNoThp,
        Kind::RawThp,
        Kind::RegionThp,
        Kind::RegionChunked,
    ] {
        group.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
            b.iter_custom(|iters| total(iters, || measure(kind, 256 << 20)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
