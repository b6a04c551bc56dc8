//! Read-through misses while other loads are in flight: what a server
//! with many slow loads outstanding (a database behind the cache) pays
//! on each new miss. Each load is held open by a guard of the cache's own
//! (`LruCache::get_or_guard`, quick_cache's `get_value_or_guard`), so one
//! thread can hold thousands; moka has no guard, and is not measured.

use std::{hint::black_box, time::Instant};

use mmbatch_cache::LruCache;

/// A cache whose loads a guard holds open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// `LruCache` with its default policy.
    Mmbatch,
    /// `quick_cache::sync::Cache`.
    QuickCache,
}

impl Guarded {
    /// Every cache measured.
    pub const ALL: [Self; 2] = [Self::Mmbatch, Self::QuickCache];

    /// Its name in the bench's rows.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mmbatch => "mmbatch",
            Self::QuickCache => "quick_cache",
        }
    }
}

/// The first key of the loads held open: above every key `misses` asks.
const HELD_FROM: u64 = 1 << 62;

/// Seconds that `misses` read-through misses (`get_or_insert_with` of
/// keys never cached) take in a `which` cache of `capacity` entries while
/// `in_flight` loads of other keys are held open.
pub fn misses_in_flight(which: Guarded, capacity: usize, in_flight: u64, misses: u64) -> f64 {
    let held = HELD_FROM..HELD_FROM + in_flight;
    match which {
        Guarded::Mmbatch => {
            let cache = LruCache::<u64, u64>::builder(capacity as u64)
                .build()
                .expect("a valid capacity");
            let guards: Vec<_> = held
                .map(|k| cache.get_or_guard(&k).expect_err("a new key"))
                .collect();
            let start = Instant::now();
            for k in 0..misses {
                black_box(cache.get_or_insert_with(k, || k));
            }
            let secs = start.elapsed().as_secs_f64();
            for g in guards {
                let _ = g.insert(0);
            }
            secs
        }
        Guarded::QuickCache => {
            let cache = quick_cache::sync::Cache::<u64, u64>::new(capacity);
            let guards: Vec<_> = held
                .map(|k| match cache.get_value_or_guard(&k, None) {
                    quick_cache::sync::GuardResult::Guard(g) => g,
                    _ => panic!("quick_cache: key {k} is new, yet not guarded"),
                })
                .collect();
            let start = Instant::now();
            for k in 0..misses {
                let loaded = cache.get_or_insert_with(&k, || Ok::<_, std::convert::Infallible>(k));
                black_box(loaded.unwrap_or_else(|e| match e {}));
            }
            let secs = start.elapsed().as_secs_f64();
            for g in guards {
                let _ = g.insert(0);
            }
            secs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_runs_its_misses_with_loads_held() {
        for which in Guarded::ALL {
            assert!(
                misses_in_flight(which, 64, 100, 200) > 0.0,
                "{}",
                which.name()
            );
        }
    }
}
