//! Two reads of one entry under a time to idle, racing under the shard's
//! read lock: each moves the deadline to its own moment plus the idle
//! time, and the later read's deadline stands, whichever stores first (a
//! read never moves a deadline back). Broken on purpose by moving it as an
//! `Expiry`'s reads do, with a compare-exchange from the deadline each
//! read saw (`Expire::reads_only_extend` false): when the earlier read
//! stores first the later one's store fails, and the entry expires at the
//! earlier read's deadline ("expired at 12 ns").
//!
//! And two reads that shorten two entries' lives (an `Expiry`), racing
//! under the read lock: the shard's next expiry (no deadline is read
//! before it) ends at or before both new deadlines. Broken on purpose by
//! lowering the bound with a load and a store instead of `fetch_min`:
//! the later read's store can undo the earlier's, and the entry read at
//! 2 ns is still returned at its deadline ("alive at 12 ns").

use std::{cell::Cell, time::Duration};

use loom::{sync::Arc, thread};

use super::Fixed;
use crate::{Clock, Expiry, LruCache};

loom::thread_local! {
    /// Each thread's moment, in nanoseconds: set by the thread before it
    /// calls the cache, so that the reads' order in time is known.
    static NOW: Cell<u64> = Cell::new(0);
}

/// The calling thread's [`NOW`].
struct PerThread;

impl Clock for PerThread {
    fn now(&self) -> Duration {
        Duration::from_nanos(NOW.with(Cell::get))
    }
}

fn at(ns: u64) {
    NOW.with(|n| n.set(ns));
}

#[test]
fn racing_idle_reads_keep_the_later_deadline() {
    super::model(|| {
        let cache: LruCache<u32, u32, Fixed> = LruCache::builder(4)
            .shards(1)
            .hasher(Fixed::default())
            .time_to_idle(Duration::from_nanos(10))
            .clock(PerThread)
            .build()
            .unwrap();
        at(1);
        cache.insert(0, 100);
        let cache = Arc::new(cache);
        // Reads at 2 and 3: the deadline must end at 3 + 10.
        let threads: Vec<_> = [2, 3]
            .into_iter()
            .map(|t| {
                let c = cache.clone();
                thread::spawn(move || {
                    at(t);
                    assert_eq!(c.get(&0), Some(100));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        at(12);
        assert!(cache.contains_key(&0), "expired at 12 ns");
        at(13);
        assert!(!cache.contains_key(&0), "alive at 13 ns");
    });
}

/// Lives of 1000 ns, cut to 10 ns from a read.
struct ShortenedByReads;

impl Expiry<u32, u32> for ShortenedByReads {
    fn expire_after_create(&self, _: &u32, _: &u32) -> Option<Duration> {
        Some(Duration::from_nanos(1000))
    }
    fn expire_after_read(&self, _: &u32, _: &u32, _: Option<Duration>) -> Option<Duration> {
        Some(Duration::from_nanos(10))
    }
}

#[test]
fn racing_reads_that_shorten_lives_lower_the_next_expiry() {
    super::model(|| {
        let cache: LruCache<u32, u32, Fixed> = LruCache::builder(4)
            .shards(1)
            .hasher(Fixed::default())
            .expiry(ShortenedByReads)
            .clock(PerThread)
            .build()
            .unwrap();
        at(1);
        cache.insert(0, 100);
        cache.insert(1, 101);
        let cache = Arc::new(cache);
        // Key 0 read at 2 (due at 12), key 1 at 3 (due at 13).
        let threads: Vec<_> = [(0, 2), (1, 3)]
            .into_iter()
            .map(|(k, t)| {
                let c = cache.clone();
                thread::spawn(move || {
                    at(t);
                    assert_eq!(c.get(&k), Some(100 + k));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        at(12);
        assert!(!cache.contains_key(&0), "alive at 12 ns");
        assert!(cache.contains_key(&1), "expired at 12 ns");
        at(13);
        assert!(!cache.contains_key(&1), "alive at 13 ns");
    });
}
