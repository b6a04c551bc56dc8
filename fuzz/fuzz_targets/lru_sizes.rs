//! The engine's and the cache's public API with arbitrary sizes, counts and
//! weights: every call returns a value or a clear error — never a panic, a
//! wrap or an allocation the size of the request — and the structures stay
//! consistent. Real allocations are kept small so the fuzzer measures the
//! arithmetic, not the host's memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmbatch_testkit::bytes::Bytes;
use mmbatch_cache::{LruCache, Policy};
use mmbatch_lru::{Config, Engine, MAX_VIRTUAL_PAGES, MunlockStep, PageTables, Pfn};

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    // The engine: frames and nodes (frames kept small), scans of any size.
    let frames = (b.size() % 64 + 1) as usize;
    let nodes = b.size() as usize;
    let Ok(engine) = Engine::new(Config::new(frames).nodes(nodes)) else {
        return;
    };
    for p in 0..frames as u32 {
        engine.lru_add(Pfn(p)).unwrap();
    }
    engine.lru_add_drain();
    let _ = engine.shrink_active(b.size() as usize % (nodes + 1), b.size() as usize);
    let _ = engine.shrink(b.size() as usize % (nodes + 1), b.size() as usize, |p| p.0 % 2 == 0);
    engine.lru_add_drain_all();
    engine.check_invariants().unwrap();

    // Page tables of any length: refused when they cannot exist, small
    // ones built and walked over any range.
    let len = b.size();
    // Lengths between 2^16 and the limit are real (large) allocations:
    // skipped.
    let tables = if (1 << 16..=MAX_VIRTUAL_PAGES).contains(&len) {
        None
    } else {
        Some(PageTables::try_new(len))
    };
    match tables {
        None => {}
        Some(Ok(pt)) => {
            for v in 0..len.min(frames as u64) {
                pt.map(v, Pfn(v as u32)).unwrap();
                let _ = engine.mlock(Pfn(v as u32));
            }
            // A page anywhere: refused past the tables, and the refusal
            // prints.
            if let Err(e) = pt.map(b.size(), Pfn(0)) {
                let _ = e.to_string();
            }
            let (start, end) = (b.size(), b.size());
            let step = MunlockStep::new(b.u8() % 8).unwrap();
            let _ = engine.munlock_range(&pt, start..end, step);
            engine.lru_add_drain_all();
            engine.check_invariants().unwrap();
        }
        Some(Err(e)) => assert!(len > MAX_VIRTUAL_PAGES, "PageTables::try_new({len}): {e}"),
    }

    // The cache: any capacity and weights, a bounded number of frames.
    let capacity = b.size();
    // Any entry bound and shard count: the index switches from u16 to
    // u32 slots past 65536 entries a shard, shards stop at MAX_SHARDS
    // (both bounded by the capacity and max_entries, so most builds stay
    // small).
    let max_entries = b.size() as usize;
    let policy = if b.u8() & 1 == 0 { Policy::Lru } else { Policy::ActiveInactive };
    let Ok(cache) = LruCache::builder(capacity)
        .max_entries(max_entries)
        .shards(b.size() as usize)
        .policy(policy)
        .weigher(|_: &u8, w: &u64| *w)
        .build()
    else {
        return;
    };
    for i in 0..64u8 {
        let w = b.size();
        cache.insert(i % 16, w);
        let _ = cache.get(&(i % 7));
        if i % 5 == 0 {
            cache.remove(&(i % 3));
        }
    }
    cache.check_invariants().unwrap();
});
