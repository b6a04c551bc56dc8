//! The cache's hit and miss counters with more threads than a shard lock
//! has stripes, so that threads share stripes: the counters only grow,
//! and the shard's look at its lookups (under the write lock, once per
//! window of evictions) never sees them shrink.
//!
//! They were a load and a store: a thread preempted between the two wrote
//! back an older count, the sum went backwards, and the look at lookups
//! overflowed (`hits.wrapping_sub(seen) * 50`), a panic in debug builds
//! inside `insert`.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use mmbatch_cache::LruCache;
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn counters_never_go_backwards_when_threads_share_stripes() {
    let name = "counters_never_go_backwards_when_threads_share_stripes";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    // One shard: every thread counts in its few stripes (at most 8).
    let c: LruCache<u64, u64> = LruCache::builder(1024).shards(1).build().unwrap();
    for k in 0..1100 {
        c.insert(k, k);
    }
    let stop = AtomicBool::new(false);
    let threads = 24;
    let run_for = Duration::from_secs(3);
    let (mut last_hits, mut last_misses, mut polls) = (0, 0, 0u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (c, stop) = (&c, &stop);
            s.spawn(move || {
                // Lookups that hit (and the odd miss), never waiting on a
                // lock: threads run out their time slices and are
                // preempted anywhere, also inside a count.
                let mut k: u64 = t * 7919;
                while !stop.load(Ordering::Relaxed) {
                    k = k
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let _ = c.get(&((k >> 33) % 1100));
                }
            });
        }
        {
            let (c, stop) = (&c, &stop);
            // Insertions: evictions, and writers beside the readers.
            s.spawn(move || {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    c.insert(k % 1100, k);
                    k += 1;
                    std::thread::yield_now();
                }
            });
        }
        let start = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while start.elapsed() < run_for {
                let st = c.stats();
                polls += 1;
                assert!(
                    st.hits >= last_hits && st.misses >= last_misses,
                    "counters went backwards after {polls} polls: hits {last_hits} -> {}, \
                     misses {last_misses} -> {}",
                    st.hits,
                    st.misses
                );
                (last_hits, last_misses) = (st.hits, st.misses);
            }
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    });
    let st = c.stats();
    println!(
        "{threads} threads, {polls} polls: {} hits, {} misses, {} evictions",
        st.hits, st.misses, st.evictions
    );
    assert!(
        st.evictions > 0,
        "no evictions: the lookups raced no writer"
    );
    c.check_invariants().unwrap();
}
