//! `cargo bench --bench restore`: the `restore` experiment under
//! criterion — the time until a 64 MiB image's working set is resident,
//! lazy (one page and 16 pages per fault) against record-and-replay and
//! the kernel's own private file mapping, warm page cache, one thread —
//! measured by the same `mmbatch_benches::restore::measure` that
//! `cargo xtask repro` calls.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::restore::{Image, measure, record_first_run, working_set};
use mmbatch_benches::total;

const PAGES: u64 = 16 << 10;

fn bench(c: &mut Criterion) {
    let image = Image::create(PAGES).expect("writing the image");
    let runs = working_set(PAGES, 18);
    let rec = record_first_run(&image, &runs, 1, false, "");
    let mut group = c.benchmark_group("restore/64M-warm");
    group.sample_size(10);
    for s in [
        "lazy-order-0",
        "lazy-order-4",
        "replay",
        "replay-order-4",
        "eager",
        "file-mapping",
    ] {
        group.bench_function(BenchmarkId::from_parameter(s), |b| {
            b.iter_custom(|iters| {
                total(iters, || {
                    measure(&image, s, &runs, &rec, 1)
                        .unwrap_or_else(|e| panic!("{s}: {e}"))
                        .elapsed_s
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
