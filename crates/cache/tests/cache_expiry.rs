//! Expiry against a sequential model on a clock the test moves: an entry
//! is returned until its deadline and never after, every value is heard
//! exactly once, with its cause (replaced, removed, expired, evicted,
//! cleared), at the step that removed it, and expired entries are
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
    Purge,
    /// `retain` keeping the values whose remainder mod 4 is not this.
    Retain(u8),
    Drain,
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
        1 => Just(Op::Purge),
        1 => (0..4u8).prop_map(Op::Retain),
        1 => Just(Op::Drain),
    ]
}

/// The model of an entry: its value, deadline and cap (ms).
type Model = HashMap<u8, (u32, u64, u64)>;

/// Runs `ops` on a cache of `capacity` entries with a time to live
/// and/or to idle (ms), checking each result, and each removal heard with
/// its cause, against the model. Evictions are the policy's choice: an
/// entry heard as evicted must be one the model holds, and leaves it.
fn run(ops: &[Op], capacity: u64, live: Option<u64>, idle: Option<u64>) -> Result<(), String> {
    let clock = Manual::default();
    let heard = Heard::default();
    let log = heard.clone();
    let mut b = LruCache::builder(capacity)
        .shards(2)
        .clock(clock.clone())
        .removal_listener(move |k, v, cause| log.lock().unwrap().push((k, v, cause)));
    if let Some(ms) = live {
        b = b.time_to_live(Duration::from_millis(ms));
    }
    if let Some(ms) = idle {
        b = b.time_to_idle(Duration::from_millis(ms));
    }
    let cache: LruCache<u8, u32> = b.build().unwrap();
    // A new or updated entry: its deadline, and the cap reads keep to.
    let made = |now: u64, v: u32| {
        let cap = live.map_or(u64::MAX, |l| now + l);
        (v, cap.min(idle.map_or(u64::MAX, |i| now + i)), cap)
    };
    let read = |m: &mut Model, k: u8, now: u64| {
        if let (Some(i), Some(e)) = (idle, m.get_mut(&k)) {
            e.1 = (now + i).min(e.2);
        }
    };
    let mut model: Model = HashMap::new();
    let mut ledger: HashMap<(u8, u32), i64> = HashMap::new();
    let alive = |m: &Model, k: u8, now: u64| m.get(&k).filter(|e| e.1 > now).map(|e| e.0);
    for (i, op) in ops.iter().cloned().enumerate() {
        let now = clock.ms();
        let at = |w: String| format!("step {i} {op:?} at {now} ms: {w}");
        let (before_op, model_before) = (heard.lock().unwrap().len(), model.clone());
        match op {
            Op::Insert(k, v) => {
                *ledger.entry((k, v)).or_default() += 1;
                let got = cache.insert(k, v);
                let want = alive(&model, k, now);
                if got != want {
                    return Err(at(format!("returned {got:?}, model {want:?}")));
                }
                model.insert(k, made(now, v));
            }
            Op::Get(k) | Op::Peek(k) => {
                let got = if matches!(op, Op::Get(_)) {
                    cache.get(&k)
                } else {
                    cache.peek(&k)
                };
                let want = alive(&model, k, now);
                if got != want {
                    return Err(at(format!("returned {got:?}, model {want:?}")));
                }
                if want.is_some() && matches!(op, Op::Get(_)) {
                    read(&mut model, k, now);
                }
            }
            Op::Remove(k) => {
                let got = cache.remove(&k);
                let want = alive(&model, k, now);
                if got != want {
                    return Err(at(format!("removed {got:?}, model {want:?}")));
                }
                model.remove(&k);
            }
            Op::GetOrInsert(k, v) => {
                let want = alive(&model, k, now);
                if want.is_none() {
                    *ledger.entry((k, v)).or_default() += 1;
                }
                let got = cache.get_or_insert_with(k, || v);
                match want {
                    Some(w) if got == w => read(&mut model, k, now),
                    Some(w) => return Err(at(format!("returned {got}, model {w}"))),
                    None if got == v => {
                        model.insert(k, made(now, v));
                    }
                    None => return Err(at(format!("returned {got}, loaded {v}"))),
                }
            }
            Op::Advance(ms) => clock.advance(u64::from(ms)),
            Op::Iter => {
                let got: HashMap<u8, u32> = cache.iter().collect();
                let want: HashMap<u8, u32> = (0..16)
                    .filter_map(|k| Some((k, alive(&model, k, now)?)))
                    .collect();
                if got != want {
                    return Err(at(format!("iter {got:?}, model {want:?}")));
                }
            }
            Op::Purge => {
                // Exactly the expired entries still cached go, each heard
                // as expired; every live one stays.
                let before = heard.lock().unwrap().len();
                let purged = cache.purge_expired();
                let now_heard = heard.lock().unwrap()[before..].to_vec();
                if now_heard.len() != purged {
                    return Err(at(format!("purged {purged}, heard {now_heard:?}")));
                }
                for &(k, v, cause) in &now_heard {
                    let expired = model.get(&k).is_some_and(|e| e.0 == v && e.1 <= now);
                    if !expired || cause != RemovalCause::Expired {
                        return Err(at(format!("purge heard {k} -> {v} as {cause:?}")));
                    }
                }
                let live = (0..16).filter(|&k| alive(&model, k, now).is_some()).count();
                if cache.len() != live {
                    return Err(at(format!("{} left, model {live}", cache.len())));
                }
            }
            Op::Retain(m) => {
                let gone = |v: u32| v % 4 == u32::from(m);
                let got = cache.retain(|_, &v| !gone(v));
                let want: Vec<u8> = (0..16)
                    .filter(|&k| alive(&model, k, now).is_some_and(gone))
                    .collect();
                if got != want.len() {
                    return Err(at(format!("retain removed {got}, model {want:?}")));
                }
                for k in want {
                    model.remove(&k);
                }
            }
            Op::Drain => {
                let got: HashMap<u8, u32> = cache.drain().collect();
                let want: HashMap<u8, u32> = (0..16)
                    .filter_map(|k| Some((k, alive(&model, k, now)?)))
                    .collect();
                if got != want {
                    return Err(at(format!("drained {got:?}, model {want:?}")));
                }
                // Returned, not heard: accounted for here.
                for (k, v) in got {
                    *ledger.entry((k, v)).or_default() -= 1;
                    model.remove(&k);
                }
            }
        }
        // What this step made the listener hear: a replacement or a
        // removal of the entry the model had alive, as this step asks;
        // an expiry of an entry the model had expired; an eviction of an
        // entry the model holds (the step's own new one, refused
        // admission, among them), which then leaves the model.
        let step_heard = heard.lock().unwrap()[before_op..].to_vec();
        let mut asked: Vec<(u8, u32, RemovalCause)> = match op {
            Op::Insert(k, _) => alive(&model_before, k, now)
                .map(|v| (k, v, RemovalCause::Replaced))
                .into_iter()
                .collect(),
            Op::Remove(k) => alive(&model_before, k, now)
                .map(|v| (k, v, RemovalCause::Removed))
                .into_iter()
                .collect(),
            Op::Retain(m) => (0..16)
                .filter_map(|k| Some((k, alive(&model_before, k, now)?)))
                .filter(|&(_, v)| v % 4 == u32::from(m))
                .map(|(k, v)| (k, v, RemovalCause::Removed))
                .collect(),
            _ => Vec::new(),
        };
        for &(k, v, cause) in &step_heard {
            let ok = match cause {
                RemovalCause::Replaced | RemovalCause::Removed => asked
                    .iter()
                    .position(|&a| a == (k, v, cause))
                    .map(|i| asked.swap_remove(i))
                    .is_some(),
                RemovalCause::Expired => {
                    model_before.get(&k).is_some_and(|e| e.0 == v && e.1 <= now)
                }
                RemovalCause::Evicted => {
                    let held = model.get(&k).is_some_and(|e| e.0 == v);
                    if held {
                        model.remove(&k);
                    }
                    held || model_before.get(&k).is_some_and(|e| e.0 == v)
                }
                _ => false,
            };
            if !ok {
                return Err(at(format!(
                    "heard {k} -> {v} as {cause:?}; heard {step_heard:?}"
                )));
            }
            if cause == RemovalCause::Expired
                && model.get(&k).is_some_and(|e| e.0 == v && e.1 <= now)
            {
                model.remove(&k);
            }
        }
        if !asked.is_empty() {
            return Err(at(format!("{asked:?} not heard; heard {step_heard:?}")));
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
        run(&ops, 64, Some(10), None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn time_to_idle_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(&ops, 64, None, Some(10)).map_err(TestCaseError::fail)?;
    }

    /// 16 keys in 6 entries: evictions mixed with expiries, replacements
    /// and removals, each heard once with its cause.
    #[test]
    fn every_cause_is_heard_once_in_a_cache_that_evicts(
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(&ops, 6, Some(10), None).map_err(TestCaseError::fail)?;
    }

    /// Both: reads extend an entry up to its time to live, never past.
    #[test]
    fn time_to_live_and_idle_together_match_the_model(
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(&ops, 64, Some(25), Some(10)).map_err(TestCaseError::fail)?;
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
    struct Minute;
    impl Expiry<u8, u8> for Minute {
        fn expire_after_create(&self, _: &u8, _: &u8) -> Option<Duration> {
            Some(Duration::from_secs(60))
        }
    }
    let e = LruCache::<u8, u8>::builder(8)
        .time_to_live(Duration::from_secs(1))
        .expiry(Minute)
        .build()
        .unwrap_err();
    assert_eq!(e, CacheError::Lifetimes);
    assert!(e.to_string().contains("have the Expiry apply them"), "{e}");

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

/// One entry with a second to live among entries with an hour expires
/// on time however it got its short life: created into a full shard (in
/// the slot of the entry it evicted) or shortened by an update. (A
/// shard skips deadlines while none is due: the short one must count.)
#[test]
fn a_short_life_among_long_ones_expires_on_time() {
    struct ByValue;
    impl Expiry<u8, u64> for ByValue {
        fn expire_after_create(&self, _: &u8, v: &u64) -> Option<Duration> {
            Some(Duration::from_millis(*v))
        }
        fn expire_after_update(&self, _: &u8, v: &u64, _: Option<Duration>) -> Option<Duration> {
            Some(Duration::from_millis(*v))
        }
    }
    const HOUR: u64 = 3_600_000;
    let clock = Manual::default();
    let c: LruCache<u8, u64> = LruCache::builder(4)
        .clock(clock.clone())
        .expiry(ByValue)
        .build()
        .unwrap();
    assert_eq!(c.shards(), 1);
    for k in 0..4 {
        c.insert(k, HOUR);
    }
    c.insert(10, 1000);
    assert_eq!(c.len(), 4, "the new entry took an evicted one's place");
    let updated = (0..4).find(|k| c.contains_key(k)).unwrap();
    c.insert(updated, 1000);
    clock.advance(2000);
    assert_eq!((c.get(&10), c.get(&updated)), (None, None));
    let long = (0..4).filter(|&k| k != updated && c.get(&k) == Some(HOUR));
    assert_eq!(long.count(), 2);
}

/// An `Expiry` may shorten an entry's life on a read, not only extend it
/// (moka's `expire_after_read`): a session that is read once has a
/// minute left, whatever it had.
#[test]
fn a_read_can_shorten_a_life() {
    struct ReadOnce;
    impl Expiry<u8, u64> for ReadOnce {
        fn expire_after_create(&self, _: &u8, _: &u64) -> Option<Duration> {
            Some(Duration::from_secs(3600))
        }
        fn expire_after_read(&self, _: &u8, _: &u64, _: Option<Duration>) -> Option<Duration> {
            Some(Duration::from_secs(60))
        }
    }
    let clock = Manual::default();
    let c: LruCache<u8, u64> = LruCache::builder(8)
        .clock(clock.clone())
        .expiry(ReadOnce)
        .build()
        .unwrap();
    c.insert(1, 10);
    c.insert(2, 20);
    assert_eq!(c.get(&1), Some(10));
    clock.advance(61_000);
    // Read a minute ago: gone; never read: an hour to go.
    assert_eq!((c.get(&1), c.get(&2)), (None, Some(20)));
}

/// The default clock (coarse, read a tick ahead): an entry is there
/// well before its time to live ends and gone once it has, but for the
/// kernel's delay in updating the coarse clock, which a contended host
/// stretched past a millisecond (a CI run, 2026-12-04): allowed 50 ms.
#[test]
fn the_default_clock_expires_on_time() {
    let c: LruCache<u8, u8> = LruCache::builder(8)
        .time_to_live(Duration::from_millis(200))
        .build()
        .unwrap();
    c.insert(1, 1);
    assert_eq!(c.get(&1), Some(1));
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(c.get(&1), None, "returned 50 ms after its time to live");
    assert_eq!(c.peek(&1), None);
    assert!(!c.contains_key(&1));
}

/// A cache of one shard with a time to live of 10 ms on `clock`, its
/// listener logging into `heard`.
fn logged(clock: &Manual, heard: &Heard, every_cause: bool) -> LruCache<u8, u32> {
    let log = heard.clone();
    let b = LruCache::builder(64)
        .shards(1)
        .clock(clock.clone())
        .time_to_live(Duration::from_millis(10));
    if every_cause {
        b.removal_listener(move |k, v, c| log.lock().unwrap().push((k, v, c)))
    } else {
        b.eviction_listener(move |k, v| log.lock().unwrap().push((k, v, RemovalCause::Evicted)))
    }
    .build()
    .unwrap()
}

/// `purge_expired` reclaims what a cache that is only read would keep:
/// each expired entry heard once as expired, live ones untouched, and
/// what expires later purged by a later call (the shard's next expiry
/// set to the earliest deadline left, not past it).
#[test]
fn purge_expired_reclaims_what_reads_leave() {
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    // Two keys at each of 0, 4 and 8 ms (a time to live of 10), each
    // insert before any deadline: no write has swept anything.
    for k in 0..6 {
        c.insert(k, u32::from(k));
        if k % 2 == 1 {
            clock.advance(4);
        }
    }
    // At 12 ms: keys 0 and 1 have expired; reads find them gone, and
    // leave them there.
    assert_eq!((c.get(&0), c.get(&1), c.len()), (None, None, 6));
    assert_eq!(c.purge_expired(), 2);
    assert_eq!(c.len(), 4);
    let mut got = heard.lock().unwrap().clone();
    got.sort_unstable_by_key(|&(k, ..)| k);
    assert_eq!(
        got,
        [(0, 0, RemovalCause::Expired), (1, 1, RemovalCause::Expired)]
    );
    // Nothing more due: nothing goes.
    assert_eq!(c.purge_expired(), 0);
    // At 15 ms: keys 2 and 3 (made at 4 ms).
    clock.advance(3);
    assert_eq!(c.purge_expired(), 2);
    assert_eq!(c.iter().count(), 2);
    assert_eq!(c.len(), 2);
    // Without expiry: nothing to do.
    let plain: LruCache<u8, u32> = LruCache::new(8);
    plain.insert(1, 1);
    assert_eq!((plain.purge_expired(), plain.len()), (0, 1));
}

/// `compute` sees an expired entry as absent: a `Put` inserts anew (the
/// expired value heard as expired, not replaced), with a new deadline.
#[test]
fn compute_sees_an_expired_entry_as_absent() {
    use mmbatch_cache::{Compute, Computed};
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    c.insert(1, 5);
    clock.advance(10);
    let mut saw = Some(None);
    let done = c.compute(1, |cur| {
        saw = Some(cur.copied());
        Compute::Put(7)
    });
    assert_eq!((saw, done), (Some(None), Computed::Inserted));
    assert_eq!(*heard.lock().unwrap(), [(1, 5, RemovalCause::Expired)]);
    clock.advance(9);
    assert_eq!(c.get(&1), Some(7), "made at 10 ms, lives to 20");
    clock.advance(1);
    assert_eq!(c.compute(1, |_| Compute::Remove), Computed::Unchanged(None));
    // The expired entry went as `remove` takes one: heard, out of `len`
    // (it stayed, and was heard only when reclaimed).
    assert_eq!(
        *heard.lock().unwrap(),
        [(1, 5, RemovalCause::Expired), (1, 7, RemovalCause::Expired)]
    );
    assert!(c.is_empty());
}

/// `remove_if` sees an expired entry as absent: its predicate is not
/// asked, nothing is returned, and the entry is heard as expired; of a
/// live one, the predicate decides, and `remove_entry` hands back the key.
#[test]
fn remove_if_sees_an_expired_entry_as_absent() {
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    c.insert(1, 5);
    c.insert(2, 6);
    clock.advance(10);
    c.insert(3, 7);
    let asked = std::cell::Cell::new(0);
    let ask = |_: &u32| {
        asked.set(asked.get() + 1);
        true
    };
    assert_eq!(c.remove_if(&1, ask), None);
    assert_eq!(asked.get(), 0, "asked of an expired entry");
    assert_eq!(c.remove_entry(&2), None);
    assert_eq!(c.remove_if(&3, |v| *v == 8), None);
    assert_eq!(c.remove_if(&3, ask), Some(7));
    assert_eq!(asked.get(), 1);
    assert_eq!(
        *heard.lock().unwrap(),
        [
            (1, 5, RemovalCause::Expired),
            (2, 6, RemovalCause::Expired),
            (3, 7, RemovalCause::Removed)
        ]
    );
    assert!(c.is_empty());
}

/// `purge_expired` with nothing due leaves the shards' readers alone: a
/// shard only read goes on skipping its readers' barrier, where a write
/// lock would end that (where membarrier(2) is refused no shard goes
/// fast, and the test only checks the count).
#[test]
fn purging_nothing_due_does_not_slow_readers() {
    let clock = Manual::default();
    let c: LruCache<u64, u64> = LruCache::builder(4096)
        .shards(4)
        .clock(clock.clone())
        .time_to_live(Duration::from_secs(3600))
        .build()
        .unwrap();
    for k in 0..1024 {
        c.insert(k, k);
    }
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while c.stats().fast_read_shards < 4 && std::time::Instant::now() < until {
        for k in 0..1024 {
            assert_eq!(c.get(&k), Some(k));
        }
    }
    let fast = c.stats().fast_read_shards;
    assert_eq!(c.purge_expired(), 0);
    if fast == 0 {
        eprintln!("no shard went fast (membarrier refused?): count checked only");
    } else {
        assert_eq!(fast, 4, "every shard only read for 5 s");
        assert_eq!(
            c.stats().fast_read_shards,
            4,
            "a purge with nothing due write-locked a shard"
        );
    }
}

/// `compute`'s removals and replacements are heard by a removal listener
/// only; the evictions and expiries it causes by every listener.
#[test]
fn compute_is_heard_by_cause() {
    use mmbatch_cache::Compute;
    let (clock, heard) = (Manual::default(), Heard::default());
    // An eviction listener: evictions and expiries only.
    let c = logged(&clock, &heard, false);
    c.insert(1, 1);
    c.compute(1, |_| Compute::Put(2));
    c.compute(1, |_| Compute::Remove);
    assert_eq!(*heard.lock().unwrap(), []);
    c.insert(3, 3);
    clock.advance(10);
    c.compute(3, |_| Compute::Put(4));
    assert_eq!(*heard.lock().unwrap(), [(3, 3, RemovalCause::Evicted)]);
    // A removal listener: every cause.
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    c.insert(1, 1);
    c.compute(1, |_| Compute::Put(2));
    c.compute(1, |_| Compute::Remove);
    assert_eq!(
        *heard.lock().unwrap(),
        [
            (1, 1, RemovalCause::Replaced),
            (1, 2, RemovalCause::Removed)
        ]
    );
}

/// `drain` returns live entries only; an expired one is heard as such.
#[test]
fn drain_returns_no_expired_entry() {
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    c.insert(1, 1);
    clock.advance(5);
    c.insert(2, 2);
    // Key 1 expires; no write comes to sweep it first.
    clock.advance(5);
    let drained: Vec<_> = c.drain().collect();
    assert_eq!(drained, vec![(2, 2)]);
    assert_eq!(*heard.lock().unwrap(), vec![(1, 1, RemovalCause::Expired)]);
    assert!(c.is_empty());
}

/// `retain` with a listener that panics on the expired entry: the
/// entry `keep` removed is still heard, and the panic continues.
#[test]
fn retain_hears_every_removal_when_the_listener_panics() {
    let clock = Manual::default();
    let heard = Heard::default();
    let log = heard.clone();
    let c: LruCache<u8, u32> = LruCache::builder(64)
        .shards(1)
        .clock(clock.clone())
        .time_to_live(Duration::from_millis(10))
        .removal_listener(move |k, v, cause| {
            log.lock().unwrap().push((k, v, cause));
            assert!(cause != RemovalCause::Expired, "listener panics");
        })
        .build()
        .unwrap();
    c.insert(1, 1);
    clock.advance(5);
    c.insert(2, 2);
    c.insert(3, 3);
    // Key 1 expires; no write comes to sweep it before `retain`.
    clock.advance(5);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.retain(|k, _| *k != 2)));
    assert!(r.is_err(), "the listener's panic continues");
    let mut h = heard.lock().unwrap().clone();
    h.sort_unstable_by_key(|e| (e.0, e.1));
    assert_eq!(
        h,
        vec![(1, 1, RemovalCause::Expired), (2, 2, RemovalCause::Removed)]
    );
    assert_eq!(c.iter().collect::<Vec<_>>(), vec![(3, 3)]);
    assert_eq!(h.len(), 2);
}

/// `clear` with an eviction listener: entries that had expired are heard
/// (the shard's work would have reclaimed them), live ones not.
#[test]
fn clear_hears_expired_entries_with_an_eviction_listener() {
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, false);
    c.insert(1, 1);
    clock.advance(5);
    c.insert(2, 2);
    // Key 1 expires; no write comes to sweep it first.
    clock.advance(5);
    c.clear();
    assert_eq!(*heard.lock().unwrap(), vec![(1, 1, RemovalCause::Evicted)]);
    assert!(c.is_empty());
}

/// `warm` over a key that expired: the loaded value replaces it.
#[test]
fn warm_replaces_an_expired_entry() {
    let (clock, heard) = (Manual::default(), Heard::default());
    let c = logged(&clock, &heard, true);
    c.insert(1, 1);
    let saved = c.save();
    clock.advance(10);
    assert_eq!(c.warm(&saved.state, saved.keys, |_| Some(7)), 1);
    assert_eq!(c.get(&1), Some(7));
    assert_eq!(*heard.lock().unwrap(), vec![(1, 1, RemovalCause::Expired)]);
}

/// A full shard with an expired entry: an insert takes the expired
/// entry's room, not a live entry's.
#[test]
fn an_insert_reclaims_expired_room_before_evicting() {
    struct ByValue;
    impl Expiry<u8, u32> for ByValue {
        fn expire_after_create(&self, _: &u8, v: &u32) -> Option<Duration> {
            Some(Duration::from_millis(u64::from(*v)))
        }
    }
    let clock = Manual::default();
    let c: LruCache<u8, u32> = LruCache::builder(2)
        .shards(1)
        .clock(clock.clone())
        .expiry(ByValue)
        .build()
        .unwrap();
    c.insert(1, 1000); // the policy's victim: the oldest
    c.insert(2, 5);
    clock.advance(5);
    c.insert(3, 1000);
    assert_eq!(
        (c.get(&1), c.get(&2), c.get(&3)),
        (Some(1000), None, Some(1000))
    );
    // Wherever the expired entry sits: a full shard of 8 looks at all 8
    // slots (one line of deadlines) before it evicts a live entry.
    for short in 0..8u8 {
        let c: LruCache<u8, u32> = LruCache::builder(8)
            .shards(1)
            .clock(clock.clone())
            .expiry(ByValue)
            .build()
            .unwrap();
        for k in 0..8 {
            c.insert(k, if k == short { 5 } else { 1000 });
        }
        clock.advance(5);
        c.insert(8, 1000);
        let lost: Vec<u8> = (0..8)
            .filter(|&k| k != short && c.peek(&k).is_none())
            .collect();
        assert!(lost.is_empty(), "expired {short}: live {lost:?} evicted");
    }
}

/// An insert racing a read across an entry's deadline: once a read has
/// seen the entry expire, the insert does not return its value. (An
/// update lives long, so that a read after the insert sees its value.)
#[test]
fn an_insert_never_returns_a_value_a_read_saw_expire() {
    use std::sync::mpsc;
    struct LongUpdates;
    impl Expiry<u8, u32> for LongUpdates {
        fn expire_after_create(&self, _: &u8, _: &u32) -> Option<Duration> {
            Some(Duration::from_millis(10))
        }
        fn expire_after_update(&self, _: &u8, _: &u32, _: Option<Duration>) -> Option<Duration> {
            Some(Duration::from_secs(1))
        }
    }
    /// The manual clock, but the thread named "writer" parks in its first
    /// read (with what it read) until released or 300 ms have passed.
    #[derive(Clone)]
    struct Parking {
        t: Manual,
        parked: Arc<Mutex<Option<mpsc::Sender<()>>>>,
        release: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
    }
    impl Clock for Parking {
        fn now(&self) -> Duration {
            let now = self.t.now();
            if std::thread::current().name() == Some("writer")
                && let Some(parked) = self.parked.lock().unwrap().take()
            {
                parked.send(()).unwrap();
                let release = self.release.lock().unwrap().take().unwrap();
                let _ = release.recv_timeout(Duration::from_millis(300));
            }
            now
        }
    }
    let (parked_tx, parked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let clock = Parking {
        t: Manual::default(),
        parked: Arc::new(Mutex::new(Some(parked_tx))),
        release: Arc::new(Mutex::new(Some(release_rx))),
    };
    let c: Arc<LruCache<u8, u32>> = Arc::new(
        LruCache::builder(8)
            .clock(clock.clone())
            .expiry(LongUpdates)
            .build()
            .unwrap(),
    );
    c.insert(1, 1);
    let w = {
        let c = c.clone();
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || c.insert(1, 2))
            .unwrap()
    };
    parked_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the writer's insert read no clock within 10 s");
    clock.t.advance(10);
    // Reads after the writer's clock read, in its write section or not.
    let read = c.get(&1);
    let _ = release_tx.send(());
    let replaced = w.join().unwrap();
    assert!(
        !(read.is_none() && replaced == Some(1)),
        "a read saw key 1 expire, then the insert returned its value"
    );
}

/// A lookup of a key that is not cached reads no clock (the clock may be
/// a system call, or a user's code; a miss needs no time): `get`, `peek`
/// and `contains_key` alike. A key that is there reads it.
#[test]
fn lookups_of_absent_keys_read_no_clock() {
    #[derive(Clone, Default)]
    struct Counting(Arc<AtomicU64>);
    impl Clock for Counting {
        fn now(&self) -> Duration {
            self.0.fetch_add(1, Ordering::SeqCst);
            Duration::ZERO
        }
    }
    let clock = Counting::default();
    let c = LruCache::<u32, u32>::builder(100)
        .time_to_live(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    c.insert(1, 1);
    let reads = || clock.0.load(Ordering::SeqCst);
    let before = reads();
    assert_eq!(c.get(&2), None);
    assert_eq!(c.peek(&2), None);
    assert!(!c.contains_key(&2));
    assert_eq!(reads(), before, "a miss read the clock");
    assert_eq!(c.peek(&1), Some(1));
    assert!(c.contains_key(&1));
    assert!(reads() >= before + 2);
}

/// A clock at the end of what it can say (`Duration::MAX`, or exactly
/// `u64::MAX` nanoseconds) is read as just before "never": an entry that
/// never expires (a time to live of `Duration::MAX`) is still returned,
/// and so is one made then with a finite life (its deadline saturates).
#[test]
fn a_clock_at_its_end_keeps_entries_that_never_expire() {
    #[derive(Clone)]
    struct At(Arc<AtomicU64>, bool);
    impl Clock for At {
        fn now(&self) -> Duration {
            if self.1 {
                Duration::MAX
            } else {
                Duration::from_nanos(self.0.load(Ordering::SeqCst))
            }
        }
    }
    for past_u64 in [false, true] {
        let t = Arc::new(AtomicU64::new(0));
        let forever: LruCache<u8, u8> = LruCache::builder(8)
            .clock(At(t.clone(), false))
            .time_to_live(Duration::MAX)
            .build()
            .unwrap();
        forever.insert(1, 1);
        let end = LruCache::<u8, u8>::builder(8)
            .clock(At(t.clone(), past_u64))
            .time_to_live(Duration::MAX)
            .build()
            .unwrap();
        t.store(u64::MAX, Ordering::SeqCst);
        assert_eq!(forever.get(&1), Some(1), "u64::MAX ns");
        end.insert(2, 2);
        assert_eq!(end.get(&2), Some(2), "past u64: {past_u64}");
        let brief: LruCache<u8, u8> = LruCache::builder(8)
            .clock(At(t.clone(), past_u64))
            .time_to_live(Duration::from_secs(1))
            .build()
            .unwrap();
        brief.insert(3, 3);
        assert_eq!(brief.get(&3), Some(3), "made at the end, it lives");
    }
}

/// An `Expiry` that panics when a read or a replacement asks it: the
/// panic reaches the caller, no lock is left held, and the entry is as
/// the call found it (a read changes nothing; a replacement whose
/// lifetime could not be had is not made).
#[test]
fn an_expiry_that_panics_on_read_or_update_leaves_the_entry_as_it_was() {
    // A lock left held would hang the inserts at the end.
    let _hang = mmbatch_testkit::hang_guard(
        "an_expiry_that_panics_on_read_or_update_leaves_the_entry_as_it_was",
    );
    struct Panics;
    impl Expiry<u8, u8> for Panics {
        fn expire_after_create(&self, _: &u8, _: &u8) -> Option<Duration> {
            Some(Duration::from_secs(60))
        }
        fn expire_after_read(&self, _: &u8, v: &u8, left: Option<Duration>) -> Option<Duration> {
            assert!(*v != 13, "unlucky read");
            left
        }
        fn expire_after_update(&self, _: &u8, v: &u8, _: Option<Duration>) -> Option<Duration> {
            assert!(*v != 14, "unlucky update");
            Some(Duration::from_secs(60))
        }
    }
    let p: LruCache<u8, u8> = LruCache::builder(8).expiry(Panics).build().unwrap();
    p.insert(1, 1);
    p.insert(3, 13);
    p.insert(4, 4);
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.get(&3)));
    assert!(read.is_err(), "the read's panic reaches its caller");
    let update = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.insert(4, 14)));
    assert!(update.is_err(), "the update's panic reaches its caller");
    p.check_invariants().unwrap();
    assert_eq!((p.peek(&3), p.peek(&4)), (Some(13), Some(4)));
    // No lock was left held: every shard still reads and writes.
    assert_eq!(p.get(&1), Some(1));
    for k in 100..120 {
        p.insert(k, k);
    }
    assert!(p.len() <= 8);
    p.check_invariants().unwrap();
}
