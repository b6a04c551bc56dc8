//! Bad input and failing user code: the cache returns clear errors, is as
//! before the call, and keeps working. Scenarios that hung on the old
//! code run in a child process with a bounded wait.

use std::{
    cell::Cell,
    hash::{Hash, Hasher},
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, Mutex},
    time::Duration,
};

use mmbatch_cache::{CacheError, LruCache, Policy};
use mmbatch_testkit::child;
use proptest::prelude::*;

// ---- user code that panics on demand -------------------------------------

thread_local! {
    /// User calls left before the next one panics; 0 disarms.
    static COUNTDOWN: Cell<u32> = const { Cell::new(0) };
}

/// Every `Hash`, `Eq`, `Clone` of keys and values, weigher and listener
/// call counts down; the call that reaches zero panics.
fn tick() {
    COUNTDOWN.with(|c| match c.get() {
        0 => {}
        1 => {
            c.set(0);
            panic!("injected panic in user code");
        }
        n => c.set(n - 1),
    });
}

fn arm(n: u32) {
    COUNTDOWN.with(|c| c.set(n));
}

#[derive(Debug)]
struct Key(u32);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        tick();
        self.0.hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        tick();
        self.0 == other.0
    }
}

impl Eq for Key {}

impl Clone for Key {
    fn clone(&self) -> Self {
        tick();
        Key(self.0)
    }
}

#[derive(Debug, PartialEq)]
struct Val(u32);

impl Clone for Val {
    fn clone(&self) -> Self {
        tick();
        Val(self.0)
    }
}

type Cache = LruCache<Key, Val, foldhash::fast::FixedState, fn(&Key, &Val) -> u64>;

fn weigh(_: &Key, v: &Val) -> u64 {
    tick();
    u64::from(v.0 % 3)
}

fn cache(capacity: u64, policy: Policy, batching: bool, listened: Arc<Mutex<u64>>) -> Cache {
    LruCache::builder(capacity)
        .policy(policy)
        .batching(batching)
        .hasher(foldhash::fast::FixedState::with_seed(7))
        .weigher(weigh as fn(&Key, &Val) -> u64)
        .eviction_listener(move |_, _| {
            tick();
            *listened.lock().unwrap() += 1;
        })
        .build()
        .unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u32, u32),
    Get(u32),
    Remove(u32),
    GetOrInsert(u32, u32),
    LoaderPanics(u32),
    Clear,
}

fn run_op(c: &Cache, op: &Op) {
    match *op {
        Op::Insert(k, v) => drop(c.insert(Key(k), Val(v))),
        Op::Get(k) => drop(c.get(&Key(k))),
        Op::Remove(k) => drop(c.remove(&Key(k))),
        Op::GetOrInsert(k, v) => drop(c.get_or_insert_with(Key(k), || Val(v))),
        Op::LoaderPanics(k) => drop(c.get_or_insert_with(Key(k), || panic!("loader"))),
        Op::Clear => c.clear(),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..24u32, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        6 => (0..24u32).prop_map(Op::Get),
        2 => (0..24u32).prop_map(Op::Remove),
        4 => (0..24u32, any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        1 => (0..24u32).prop_map(Op::LoaderPanics),
        1 => Just(Op::Clear),
    ]
}

/// Quietens the panic hook for injected panics (they are expected).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .unwrap_or_default();
            if !msg.contains("injected") && msg != "loader" {
                default(info);
            }
        }));
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any user call may panic (`Hash`, `Eq`, `Clone` of keys and values,
    /// the weigher, the listener, a loader): after each panic the cache
    /// holds every frame, its invariants check clean, and it keeps
    /// working — it can still fill to capacity with fresh keys.
    #[test]
    fn user_code_panics_lose_nothing(
        capacity in 0u64..10,
        policy in prop_oneof![Just(Policy::Workingset), Just(Policy::ActiveInactive), Just(Policy::Lru), Just(Policy::Lirs), Just(Policy::LirsTinyLfu), Just(Policy::Adaptive)],
        batching in any::<bool>(),
        ops in prop::collection::vec((op(), 0u32..12), 1..150),
    ) {
        quiet_panics();
        let listened = Arc::new(Mutex::new(0));
        let c = cache(capacity, policy, batching, listened.clone());
        for (op, countdown) in &ops {
            arm(*countdown);
            // No `AssertUnwindSafe`: the cache is `RefUnwindSafe`, which
            // this test is what backs.
            let _ = catch_unwind(|| run_op(&c, op));
            arm(0);
            c.check_invariants().map_err(|e| TestCaseError::fail(format!("after {op:?} (countdown {countdown}): {e}")))?;
        }
        for k in 1000..1000 + 3 * capacity as u32 {
            c.insert(Key(k), Val(1));
        }
        c.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert!(c.len() as u64 <= capacity);
    }
}

/// Caches with a weigher, a listener and expiry cross `catch_unwind`
/// without `AssertUnwindSafe`, as `std::sync::Mutex` does: a panic in a
/// call leaves the cache whole (the property test above).
#[test]
fn a_cache_crosses_catch_unwind() {
    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &T) {}
    quiet_panics();
    let plain: LruCache<String, u64> = LruCache::new(10);
    let full = LruCache::<u32, Vec<u8>>::builder(100)
        .weigher(|_, v| v.len() as u64)
        .eviction_listener(|_, _| {})
        .time_to_live(Duration::from_secs(60))
        .build()
        .unwrap();
    unwind_safe(&plain);
    unwind_safe(&full);
    let r = catch_unwind(|| {
        plain.insert("a".to_owned(), 1);
        full.insert(1, vec![0; 10]);
        panic!("injected after the inserts")
    });
    assert!(r.is_err());
    assert_eq!((plain.get("a"), full.weight()), (Some(1), 10));
}

// ---- child-process scenarios (bounded wait) -------------------------------

/// Many insertions whose key's `Clone` panics after a frame was taken,
/// then ordinary insertions: on the old code each panic lost a frame and,
/// once every frame was lost, `reclaim_frame` spun forever.
#[test]
fn key_clone_panics_then_inserts_finish() {
    if let Some(run) = child::parent(
        "key_clone_panics_then_inserts_finish",
        Duration::from_secs(30),
    ) {
        run.expect_success();
        return;
    }
    quiet_panics();
    let c = cache(4, Policy::ActiveInactive, true, Arc::default());
    for k in 0..500 {
        // Hash, the weigher, then (no equal key to compare) the slot's
        // clone of the key panics.
        arm(3);
        let _ = catch_unwind(AssertUnwindSafe(|| c.insert(Key(k), Val(1))));
        arm(0);
    }
    for k in 0..100 {
        c.insert(Key(10_000 + k), Val(1));
    }
    c.check_invariants().unwrap();
    assert!(c.len() <= 4);
}

/// A listener that panics does not stop the other evicted entries from
/// reaching it, and the panic reaches the caller.
#[test]
fn listener_panic_still_delivers_the_rest() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    // One heavy insertion evicts several entries at once (under
    // `Workingset`: LIRS would decline a cold key heavier than its HIR
    // set).
    let c: LruCache<u32, u32, _, _> = LruCache::builder(64)
        .policy(Policy::Workingset)
        .weigher(|k: &u32, _: &u32| if *k == 64 { 8 } else { 1 })
        .eviction_listener(move |k, _| {
            h.lock().unwrap().push(k);
            if k % 2 == 0 {
                panic!("listener");
            }
        })
        .build()
        .unwrap();
    for k in 0..64 {
        c.insert(k, k);
    }
    // Past the capacity by 8: evicts 8 entries, half of whose listener
    // calls panic.
    let r = catch_unwind(AssertUnwindSafe(|| c.insert(64, 64)));
    assert!(r.is_err(), "the listener's panic reaches the caller");
    let heard = heard.lock().unwrap().len() as u64;
    assert_eq!(heard, c.stats().evictions, "every eviction was heard");
    assert_eq!(heard, 8);
    c.check_invariants().unwrap();
}

// ---- max_entries -----------------------------------------------------------

/// `max_entries` bounds the entries, not only the frames: reclaim starts
/// on the entry count as it does on the weight.
#[test]
fn max_entries_is_the_most_entries_held() {
    for (policy, batching) in [
        (Policy::Workingset, true),
        (Policy::ActiveInactive, true),
        (Policy::Lru, false),
        (Policy::Lru, true),
        (Policy::Lirs, true),
        (Policy::Adaptive, true),
    ] {
        for max in [1usize, 2, 10, 100] {
            let c: LruCache<u32, u32> = LruCache::builder(1000)
                .max_entries(max)
                .policy(policy)
                .batching(batching)
                .build()
                .unwrap();
            for k in 0..1000 {
                c.insert(k, k);
                assert!(
                    c.len() <= max,
                    "{policy:?} batching {batching}: {} entries with max_entries({max})",
                    c.len()
                );
            }
            assert_eq!(c.get(&999), Some(999), "the last insertion is kept");
            c.check_invariants().unwrap();
        }
    }
}

/// Capacities and weights at the ends of `u64`: a clear error for a
/// capacity whose accounting could overflow, and entries of weight 0 and
/// `u64::MAX` each with a defined outcome.
#[test]
fn extreme_capacities_and_weights() {
    let err = LruCache::<u32, u64>::builder(u64::MAX).build().unwrap_err();
    assert_eq!(err, CacheError::CapacityTooLarge { capacity: u64::MAX });
    assert!(err.to_string().contains("MAX_CAPACITY"), "{err}");
    let max = LruCache::<u32, u64>::MAX_CAPACITY;
    let c: LruCache<u32, u64, _, _> = LruCache::builder(max)
        .max_entries(8)
        .weigher(|_: &u32, w: &u64| *w)
        .build()
        .unwrap();
    c.insert(0, u64::MAX); // heavier than the capacity: not cached
    assert_eq!((c.len(), c.stats().evictions), (0, 1));
    for k in 1..20 {
        c.insert(k, max); // each fills the capacity: evicts the one before
        assert_eq!(c.weight(), max);
    }
    c.insert(100, 0); // weight 0 counts as 1
    c.check_invariants().unwrap();
    assert_eq!(c.get(&100), Some(0));
    // Unweighted, the largest capacity: a bounded number of shards, and
    // an adaptive duel that samples 1 key in 2^32 at most.
    let c: LruCache<u32, u64> = LruCache::builder(max).build().unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    assert!(c.shards() <= 256.max(8 * cpus), "{} shards", c.shards());
    for k in 0..1000 {
        c.insert(k, 0);
        assert_eq!(c.get(&k), Some(0));
    }
    c.check_invariants().unwrap();
}
