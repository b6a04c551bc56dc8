//! `cargo bench --bench faultaround`: seed 002 under criterion, each
//! fault-around order a `BenchmarkId` of one group per pattern, in the
//! engine and on the host, measured by the same
//! `mmbatch_benches::faultaround::measure_*` that `cargo xtask repro` calls
//! (16 MiB mappings, one thread, so criterion can repeat them).

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mmbatch_benches::faultaround::{ORDERS, Pattern, measure_engine, measure_host};
use mmbatch_benches::total;
use mmbatch_faultaround::engine::PageCache;
use mmbatch_lru::{Config, Engine, Pfn};

const PAGES: u64 = 4096;

fn bench(c: &mut Criterion) {
    let lru = Arc::new(Engine::new(Config::new(PAGES as usize)).expect("engine"));
    let cache = PageCache::new(lru, PAGES).expect("page cache");
    for i in 0..PAGES {
        cache.insert(i, Pfn(i as u32), true).expect("free frame");
    }
    for pattern in Pattern::ALL {
        let mut group = c.benchmark_group(format!("faultaround-engine/{}", pattern.name()));
        for order in ORDERS {
            group.bench_function(BenchmarkId::from_parameter(order), |b| {
                b.iter_custom(|iters| {
                    total(iters, || {
                        measure_engine(&cache, pattern, order, 1).elapsed_s
                    })
                });
            });
        }
        group.finish();
        let mut group = c.benchmark_group(format!("faultaround/{}", pattern.name()));
        group.sample_size(10);
        for order in ORDERS {
            group.bench_function(BenchmarkId::from_parameter(order), |b| {
                b.iter_custom(|iters| {
                    total(iters, || {
                        measure_host(PAGES, pattern, order, 1, None).elapsed_s
                    })
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
