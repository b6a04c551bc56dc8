//! Two reads of one entry under a time to idle, racing under the shard's
//! read lock: each moves the deadline to its own moment plus the idle
//! time, and the later read's deadline stands, whichever stores first (a
//! read never moves a deadline back). Broken on purpose by moving it as an
//! `Expiry`'s reads do, with a compare-exchange from the deadline each
//! read saw (`Expire::reads_only_extend` false): when the earlier read
//! stores first the later one's store fails, and the entry expires at the
//! earlier read's deadline ("expired at 12 ns").

use std::{cell::Cell, time::Duration};

use loom::{sync::Arc, thread};

use super::Fixed;
use crate::{Clock, LruCache};

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
