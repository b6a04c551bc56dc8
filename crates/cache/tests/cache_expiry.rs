//! Expiry against a sequential model on a clock the test moves: an entry
//! is returned until its deadline and never after, every value is heard
//! exactly once (expired ones as expired), and expired entries are
//! reclaimed by the shard's own writes.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use mmbatch_cache::{CacheError, Clock, Expiry, LruCache, RemovalCause};
use proptest::prelude::*;

/// A clock the test moves, in milliseconds.
#[derive(Clone, Default)]
struct Manual(Arc<AtomicU64>);

impl Clock for Manual {
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::SeqCst))
    }
}

impl Manual {
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    fn ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

type Heard = Arc<Mutex<Vec<(u8, u32, RemovalCause)>>>;

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u32),
    Get(u8),
    Peek(u8),
    Remove(u8),
    GetOrInsert(u8, u32),
    Advance(u8),
    Iter,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..16u8, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        6 => (0..16u8).prop_map(Op::Get),
        2 => (0..16u8).prop_map(Op::Peek),
        2 => (0..16u8).prop_map(Op::Remove),
        3 => (0..16u8, any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        4 => (0..8u8).prop_map(Op::Advance),
        1 => Just(Op::Iter),
    ]
}

const TTL: u64 = 10;

/// Runs `ops` on a cache with a time to live (`idle`: a time to idle) of
/// 10 ms, checking each result against the model: key -> (value,
/// deadline in ms).
fn run(ops: &[Op], idle: bool) -> Result<(), String> {
    let clock = Manual::default();
    let heard = Heard::default();
    let log = heard.clone();
    let b = LruCache::builder(64)
        .shards(2)
        .clock(clock.clone())
        .removal_listener(move |k, v, cause| log.lock().unwrap().push((k, v, cause)));
    let b = if idle {
        b.time_to_idle(Duration::from_millis(TTL))
    } else {
        b.time_to_live(Duration::from_millis(TTL))
    };
    let cache: LruCache<u8, u32> = b.build().unwrap();
    let mut model: HashMap<u8, (u32, u64)> = HashMap::new();
    let mut ledger: HashMap<(u8, u32), i64> = HashMap::new();
    let live =
        |m: &HashMap<u8, (u32, u64)>, k: u8, now: u64| m.get(&k).filter(|e| e.1 > now).map(|e| e.0);
    for (i, op) in ops.iter().cloned().enumerate() {
        let now = clock.ms();
        let at = |w: String| format!("step {i} {op:?} at {now} ms: {w}");
        match op {
            Op::Insert(k, v) => {
                *ledger.entry((k, v)).or_default() += 1;
                let got = cache.insert(k, v);
                let want = live(&model, k, now);
                if got != want {
                    return Err(at(format!("returned {got:?}, model {want:?}")));
                }
                model.insert(k, (v, now + TTL));
            }
            Op::Get(k) | Op::Peek(k) => {
                let got = if matches!(op, Op::Get(_)) {
                    cache.get(&k)
                } else {
                    cache.peek(&k)
                };
                let want = live(&model, k, now);
                if got != want {
                    return Err(at(format!("returned {got:?}, model {want:?}")));
                }
                if idle && want.is_some() && matches!(op, Op::Get(_)) {
                    model.get_mut(&k).unwrap().1 = now + TTL;
                }
            }
            Op::Remove(k) => {
                let got = cache.remove(&k);
                let want = live(&model, k, now);
                if got != want {
                    return Err(at(format!("removed {got:?}, model {want:?}")));
                }
                model.remove(&k);
            }
            Op::GetOrInsert(k, v) => {
                let want = live(&model, k, now);
                if want.is_none() {
                    *ledger.entry((k, v)).or_default() += 1;
                }
                let got = cache.get_or_insert_with(k, || v);
                match want {
                    Some(w) if got == w => {
                        if idle {
                            model.get_mut(&k).unwrap().1 = now + TTL;
                        }
                    }
                    Some(w) => return Err(at(format!("returned {got}, model {w}"))),
                    None if got == v => {
                        model.insert(k, (v, now + TTL));
                    }
                    None => return Err(at(format!("returned {got}, loaded {v}"))),
                }
            }
            Op::Advance(ms) => clock.advance(u64::from(ms)),
            Op::Iter => {
                let got: HashMap<u8, u32> = cache.iter().collect();
                let want: HashMap<u8, u32> = (0..16)
                    .filter_map(|k| Some((k, live(&model, k, now)?)))
                    .collect();
                if got != want {
                    return Err(at(format!("iter {got:?}, model {want:?}")));
                }
            }
        }
        cache.check_invariants().map_err(at)?;
    }
    // Everything left goes with clear: expired entries heard as expired.
    let end = clock.ms();
    let before = heard.lock().unwrap().len();
    cache.clear();
    for &(k, v, cause) in &heard.lock().unwrap()[before..] {
        let expired = model.get(&k).is_some_and(|e| e.0 == v && e.1 <= end);
        let want = if expired {
            RemovalCause::Expired
        } else {
            RemovalCause::Cleared
        };
        if cause != want {
            return Err(format!(
                "clear heard {k} -> {v} as {cause:?}, model says {want:?}"
            ));
        }
    }
    for &(k, v, _) in heard.lock().unwrap().iter() {
        *ledger.entry((k, v)).or_default() -= 1;
    }
    ledger.retain(|_, n| *n != 0);
    if !ledger.is_empty() {
        return Err(format!("values not heard exactly once: {ledger:?}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn time_to_live_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(&ops, false).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn time_to_idle_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(&ops, true).map_err(TestCaseError::fail)?;
    }
}

/// Expired entries nobody reads again are reclaimed by the shard's own
/// writes: 100 expire, 100 inserts of other keys later all are gone,
/// each heard as expired.
#[test]
fn expired_entries_are_reclaimed_by_the_shards_writes() {
    let clock = Manual::default();
    let heard = Heard::default();
    let log = heard.clone();
    let cache: LruCache<u8, u32> = LruCache::builder(1000)
        .shards(1)
        .clock(clock.clone())
        .time_to_live(Duration::from_millis(5))
        .removal_listener(move |k, v, c| log.lock().unwrap().push((k, v, c)))
        .build()
        .unwrap();
    let cache16: LruCache<u16, u32> = LruCache::builder(1000)
        .shards(1)
        .clock(clock.clone())
        .time_to_live(Duration::from_millis(5))
        .build()
        .unwrap();
    for k in 0..100u16 {
        cache16.insert(k, 0);
    }
    for k in 0..100u8 {
        cache.insert(k, 0);
    }
    clock.advance(5);
    assert!(cache.get(&7).is_none());
    for k in 100..200u16 {
        cache16.insert(k, 1);
    }
    assert_eq!(
        cache16.len(),
        100,
        "the expired entries were not all reclaimed"
    );
    for k in 100..=255u8 {
        cache.insert(k, 1);
    }
    let expired = heard
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.2 == RemovalCause::Expired)
        .count();
    assert_eq!(expired, 100);
    cache.check_invariants().unwrap();
}

/// Bad input and odd clocks: zero is refused naming the fix, two
/// lifetimes at once too; `Duration::MAX` never expires; a clock that
/// goes back only delays expiry; an `Expiry` that panics leaves the
/// cache as it was.
#[test]
fn bad_lifetimes_and_clocks_have_clear_outcomes() {
    let e = LruCache::<u8, u8>::builder(8)
        .time_to_live(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        e,
        CacheError::ZeroLifetime {
            setting: "time_to_live"
        }
    );
    assert!(e.to_string().contains("leave it unset"), "{e}");
    let e = LruCache::<u8, u8>::builder(8)
        .time_to_live(Duration::from_secs(1))
        .time_to_idle(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(e, CacheError::Lifetimes);

    let clock = Manual::default();
    let forever: LruCache<u8, u8> = LruCache::builder(8)
        .clock(clock.clone())
        .time_to_live(Duration::MAX)
        .build()
        .unwrap();
    forever.insert(1, 1);
    clock.advance(u64::MAX / 2);
    assert_eq!(forever.get(&1), Some(1));

    // A clock that goes back (here: one whose origin moves).
    let back = Arc::new(AtomicU64::new(100));
    #[derive(Clone)]
    struct Back(Arc<AtomicU64>);
    impl Clock for Back {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::SeqCst))
        }
    }
    let c: LruCache<u8, u8> = LruCache::builder(8)
        .clock(Back(back.clone()))
        .time_to_live(Duration::from_millis(10))
        .build()
        .unwrap();
    c.insert(1, 1);
    back.store(50, Ordering::SeqCst);
    assert_eq!(c.get(&1), Some(1), "expired early when the clock went back");
    back.store(109, Ordering::SeqCst);
    assert_eq!(c.get(&1), Some(1));
    back.store(110, Ordering::SeqCst);
    assert_eq!(c.get(&1), None);

    struct Panics;
    impl Expiry<u8, u8> for Panics {
        fn expire_after_create(&self, _: &u8, v: &u8) -> Option<Duration> {
            assert!(*v != 13, "unlucky value");
            Some(Duration::from_secs(60))
        }
    }
    let p: LruCache<u8, u8> = LruCache::builder(8).expiry(Panics).build().unwrap();
    p.insert(1, 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.insert(2, 13)));
    assert!(r.is_err());
    assert_eq!((p.len(), p.get(&1), p.get(&2)), (1, Some(1), None));
    p.check_invariants().unwrap();
}

/// A per-entry `Expiry`: each value says how long it lives.
#[test]
fn each_entry_can_have_its_own_lifetime() {
    struct ByValue;
    impl Expiry<u8, u64> for ByValue {
        fn expire_after_create(&self, _: &u8, v: &u64) -> Option<Duration> {
            (*v > 0).then(|| Duration::from_millis(*v))
        }
    }
    let clock = Manual::default();
    let c: LruCache<u8, u64> = LruCache::builder(8)
        .clock(clock.clone())
        .expiry(ByValue)
        .build()
        .unwrap();
    c.insert(1, 5);
    c.insert(2, 50);
    c.insert(3, 0); // never
    clock.advance(10);
    assert_eq!((c.get(&1), c.get(&2), c.get(&3)), (None, Some(50), Some(0)));
    clock.advance(100);
    assert_eq!((c.get(&1), c.get(&2), c.get(&3)), (None, None, Some(0)));
}

/// The default clock (coarse, read a tick ahead): an entry is there
/// well before its time to live ends and gone once it has.
#[test]
fn the_default_clock_expires_on_time_never_late() {
    let c: LruCache<u8, u8> = LruCache::builder(8)
        .time_to_live(Duration::from_millis(200))
        .build()
        .unwrap();
    c.insert(1, 1);
    assert_eq!(c.get(&1), Some(1));
    std::thread::sleep(Duration::from_millis(201));
    assert_eq!(c.get(&1), None, "returned after its time to live");
    assert_eq!(c.peek(&1), None);
    assert!(!c.contains_key(&1));
}
