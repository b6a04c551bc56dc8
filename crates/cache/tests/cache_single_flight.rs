//! Single-flight loading (`get_or_insert_with`): one loader per key, and
//! waiters that a loader's failure never strands: a loader that panics,
//! one that asks for its own key, a value whose `Clone` or a key whose
//! `Drop` panics as the load lands. Each runs in a child process with a
//! bounded wait, since the failure they guard against is a hang.

use std::{
    hash::Hash,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Barrier,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mmbatch_cache::{Compute, Computed, LruCache};
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(30);

/// Eight threads miss on one key at once: one loader runs, all get its
/// value.
#[test]
fn one_loader_per_key() {
    if let Some(run) = child::parent("one_loader_per_key", LIMIT) {
        run.expect_success();
        return;
    }
    for round in 0..50u64 {
        let cache: LruCache<u64, u64> = LruCache::new(100);
        let runs = AtomicUsize::new(0);
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    let v = cache.get_or_insert_with(round, || {
                        runs.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(2));
                        round * 10
                    });
                    assert_eq!(v, round * 10);
                });
            }
        });
        assert_eq!(runs.load(Ordering::Relaxed), 1, "round {round}");
        let st = cache.stats();
        assert_eq!(st.loads, 1);
        cache.check_invariants().unwrap();
    }
}

/// Runs `first`, a caller whose load fails by a panic (its loader calls
/// `started.wait()`), on a thread, and `second` on this one once that
/// loader runs, so that `second` waits on the failing load; checks that
/// the panic reached `first`'s caller and returns what `second` got.
fn wait_on_a_failing_load<T: Send, R>(
    first: impl FnOnce(&Barrier) -> T + Send,
    second: impl FnOnce() -> R,
) -> R {
    let started = Barrier::new(2);
    std::thread::scope(|s| {
        let first = s.spawn(|| catch_unwind(AssertUnwindSafe(|| first(&started))));
        started.wait();
        let got = second();
        assert!(
            first.join().unwrap().is_err(),
            "the panic reached its caller"
        );
        got
    })
}

/// A loader that panics while another caller waits on it: the waiter is
/// woken, loads the value itself, and the panic reaches the first caller.
#[test]
fn a_panicking_loader_wakes_its_waiters() {
    if let Some(run) = child::parent("a_panicking_loader_wakes_its_waiters", LIMIT) {
        run.expect_success();
        return;
    }
    std::panic::set_hook(Box::new(|_| {}));
    let cache: LruCache<u32, u32> = LruCache::new(10);
    let v = wait_on_a_failing_load(
        |started| {
            cache.get_or_insert_with(1, || {
                started.wait();
                std::thread::sleep(Duration::from_millis(50));
                panic!("loader failed");
            })
        },
        // The first loader is running: this call waits for it, then loads.
        || cache.get_or_insert_with(1, || 11),
    );
    assert_eq!(v, 11);
    let st = cache.stats();
    assert_eq!((st.loads, st.load_waits), (2, 1), "{st:?}");
    assert_eq!(cache.get(&1), Some(11));
    // An error does the same.
    let r: Result<u32, &str> = cache.try_get_or_insert_with(2, || Err("no"));
    assert_eq!(r, Err("no"));
    assert_eq!(cache.peek(&2), None);
    cache.check_invariants().unwrap();
}

/// A loader that asks for its own key on its own thread — directly, or
/// through another key's loader — waited for itself forever. Now that call
/// panics with a message that says why; the panic unwinds through the
/// loader, the flight is completed empty, and the cache stays usable.
#[test]
fn a_loader_asking_for_its_own_key_panics_instead_of_waiting_forever() {
    let name = "a_loader_asking_for_its_own_key_panics_instead_of_waiting_forever";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    std::panic::set_hook(Box::new(|_| {}));
    let cache: LruCache<u32, u32> = LruCache::new(10);
    for through_another in [false, true] {
        let r = catch_unwind(AssertUnwindSafe(|| {
            cache.get_or_insert_with(1, || {
                if through_another {
                    cache.get_or_insert_with(2, || cache.get_or_insert_with(1, || 10) + 1)
                } else {
                    cache.get_or_insert_with(1, || 10)
                }
            })
        }));
        let msg = r.expect_err("the re-entry panics");
        let msg = msg
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| msg.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("");
        assert!(msg.contains("asked for that same key"), "{msg}");
        // Nothing stranded: the key loads normally now.
        assert_eq!(cache.get_or_insert_with(1, || 5), 5);
        cache.remove(&1);
        cache.check_invariants().unwrap();
    }
    // Loading another key from a loader is fine.
    assert_eq!(
        cache.get_or_insert_with(3, || cache.get_or_insert_with(4, || 4) + 1),
        5
    );
    // A call that panicked on its own thread's load waited for nothing.
    assert_eq!(cache.stats().load_waits, 0, "{:?}", cache.stats());
}

/// A value whose `Clone` panics once armed.
#[derive(Debug, PartialEq)]
struct Fragile(u32);

static FRAGILE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Clone for Fragile {
    fn clone(&self) -> Self {
        assert!(
            !FRAGILE.swap(false, std::sync::atomic::Ordering::SeqCst),
            "injected: the value's Clone panics"
        );
        Fragile(self.0)
    }
}

/// The value's `Clone` panics as the loaded value is stored, while another
/// caller waits on the load: the waiter used to wait forever (the flight
/// was already marked landed); now it is woken, loads itself, and the
/// panic reaches the first caller.
#[test]
fn a_panic_storing_the_loaded_value_wakes_the_waiters() {
    let name = "a_panic_storing_the_loaded_value_wakes_the_waiters";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    std::panic::set_hook(Box::new(|_| {}));
    let cache: LruCache<u32, Fragile> = LruCache::new(10);
    let v = wait_on_a_failing_load(
        |started| {
            cache.get_or_insert_with(1, || {
                started.wait();
                std::thread::sleep(Duration::from_millis(100));
                FRAGILE.store(true, std::sync::atomic::Ordering::SeqCst);
                Fragile(1)
            })
        },
        // Waits for the first load, which panics storing its value.
        || cache.get_or_insert_with(1, || Fragile(2)),
    );
    assert!(v == Fragile(1) || v == Fragile(2), "{v:?}");
    cache.check_invariants().unwrap();
}

/// A key whose copy made while armed panics when dropped.
#[derive(Debug)]
struct Mined {
    k: u32,
    mine: bool,
}

static MINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Mined {
    fn new(k: u32) -> Self {
        Self { k, mine: false }
    }
}

impl Clone for Mined {
    fn clone(&self) -> Self {
        Self {
            k: self.k,
            mine: MINED.swap(false, std::sync::atomic::Ordering::SeqCst),
        }
    }
}

impl Drop for Mined {
    fn drop(&mut self) {
        assert!(!self.mine, "injected: the key's Drop panics");
    }
}

impl PartialEq for Mined {
    fn eq(&self, other: &Self) -> bool {
        self.k == other.k
    }
}

impl Eq for Mined {}

impl Hash for Mined {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.k.hash(state);
    }
}

/// The flight's copy of the key (the first clone a load makes) panics
/// when dropped, while another caller waits on the load: dropped as the
/// flight left its shard, under the lock and before the waiters' room was
/// complete, it stranded the waiter; now it drops after both, the waiter
/// gets the value and the panic reaches the loading caller.
#[test]
fn a_key_whose_drop_panics_as_its_load_lands_strands_no_waiter() {
    let name = "a_key_whose_drop_panics_as_its_load_lands_strands_no_waiter";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    std::panic::set_hook(Box::new(|_| {}));
    let cache: LruCache<Mined, u32> = LruCache::new(10);
    let v = wait_on_a_failing_load(
        |started| {
            MINED.store(true, std::sync::atomic::Ordering::SeqCst);
            cache.get_or_insert_with(Mined::new(1), || {
                started.wait();
                std::thread::sleep(Duration::from_millis(100));
                1
            })
        },
        // Waits for the first load, whose flight's key panics as it lands.
        || cache.get_or_insert_with(Mined::new(1), || 2),
    );
    assert_eq!(v, 1);
    assert_eq!(cache.peek(&Mined::new(1)), Some(1));
    cache.check_invariants().unwrap();
}

/// A plain insert of the key while its load runs wins, as it would had it
/// come after the load: the loader's caller gets the inserted value, the
/// cache keeps it, and no listener hears it leave.
#[test]
fn an_insert_during_the_load_wins() {
    use std::sync::{Arc, Mutex};
    let heard = Arc::new(Mutex::new(Vec::new()));
    let log = heard.clone();
    let c: mmbatch_cache::LruCache<u32, u32> = mmbatch_cache::LruCache::builder(16)
        .removal_listener(move |k: u32, v: u32, cause| {
            log.lock().unwrap().push((k, v, cause));
        })
        .build()
        .unwrap();
    let got = c.get_or_insert_with(7, || {
        c.insert(7, 1);
        2
    });
    assert_eq!((got, c.get(&7)), (1, Some(1)));
    assert!(
        heard.lock().unwrap().is_empty(),
        "{:?}",
        heard.lock().unwrap()
    );
}

/// A key removed (or a cache cleared) while its load runs: the load's
/// value may predate the removal (a database read before the write that
/// removed the key), so its caller gets it but the cache does not keep
/// it; Guava cached it for good (google/guava#1881). The removal here
/// runs inside the loader, which orders it within the load.
#[test]
fn a_key_removed_while_it_loads_is_not_cached() {
    let c: LruCache<u32, u32> = LruCache::new(16);
    let got = c.get_or_insert_with(7, || {
        c.remove(&7);
        2
    });
    assert_eq!((got, c.get(&7)), (2, None), "removed during its load");
    let got = c.get_or_insert_with(8, || {
        c.clear();
        3
    });
    assert_eq!((got, c.get(&8)), (3, None), "cleared during its load");
    let got = c.get_or_insert_with(11, || {
        drop(c.drain());
        7
    });
    assert_eq!((got, c.get(&11)), (7, None), "drained during its load");
    let got = c
        .try_get_or_insert_with(9, || {
            c.remove_entry(&9);
            Ok::<_, ()>(4)
        })
        .unwrap();
    assert_eq!((got, c.get(&9)), (4, None), "remove_entry during its load");
    // compute's Remove is a removal, whatever its closure saw.
    let got = c.get_or_insert_with(12, || {
        assert_eq!(
            c.compute(12, |_| Compute::Remove),
            Computed::Unchanged(None)
        );
        8
    });
    assert_eq!(
        (got, c.get(&12)),
        (8, None),
        "compute's Remove during its load"
    );
    // A conditional removal decides on a cached value, and there is none
    // yet: the load's value is cached.
    let got = c.get_or_insert_with(10, || {
        c.remove_if(&10, |_| true);
        5
    });
    assert_eq!((got, c.get(&10)), (5, Some(5)), "remove_if during its load");
    // The next call loads afresh.
    assert_eq!(c.get_or_insert_with(7, || 6), 6);
    assert_eq!(c.get(&7), Some(6));
    c.check_invariants().unwrap();
}

/// A call that comes after the removal does not wait for the load the
/// removal outdated: it loads its own value, which is cached, and which
/// the first load's caller then gets too, as it would an insert's. (Here
/// it runs inside the first loader, where waiting for that load would
/// panic as a loader asking for its own key.)
#[test]
fn a_call_after_the_removal_loads_afresh() {
    let c: LruCache<u32, u32> = LruCache::new(16);
    let got = c.get_or_insert_with(7, || {
        c.remove(&7);
        assert_eq!(c.get_or_insert_with(7, || 3), 3);
        2
    });
    assert_eq!((got, c.get(&7)), (3, Some(3)));
    c.check_invariants().unwrap();
}

/// A removal outdates the loads of its key only: another key's load in
/// the same shard, even one of the same hash, is cached. (Every key
/// hashes alike here; key 2 loads inside key 1's loader, and removes 1.)
#[test]
fn a_removal_outdates_no_other_keys_load() {
    #[derive(Clone, Default)]
    struct OneHash;
    impl std::hash::BuildHasher for OneHash {
        type Hasher = OneHasher;
        fn build_hasher(&self) -> OneHasher {
            OneHasher
        }
    }
    struct OneHasher;
    impl std::hash::Hasher for OneHasher {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, _: &[u8]) {}
    }
    let c: LruCache<u32, u32, OneHash> = LruCache::builder(16).hasher(OneHash).build().unwrap();
    let got = c.get_or_insert_with(1, || {
        let two = c.get_or_insert_with(2, || {
            c.remove(&1);
            20
        });
        assert_eq!(two, 20);
        10
    });
    assert_eq!(got, 10);
    assert_eq!((c.get(&1), c.get(&2)), (None, Some(20)));
    // compute's Remove alike: key 4's load is cached, key 3's is not.
    let got = c.get_or_insert_with(3, || {
        let four = c.get_or_insert_with(4, || {
            c.compute(3, |_| Compute::Remove);
            40
        });
        assert_eq!(four, 40);
        30
    });
    assert_eq!(got, 30);
    assert_eq!((c.get(&3), c.get(&4)), (None, Some(40)));
}

/// A caller that waits with a timeout on a load that does not land gives
/// up at its deadline, with `None`, where `get_or_guard` would wait for
/// good; one whose load lands first gets the value; with nobody loading
/// it gets the guard.
#[test]
fn a_timed_wait_gives_up_on_a_load_that_does_not_land() {
    if let Some(run) = child::parent("a_timed_wait_gives_up_on_a_load_that_does_not_land", LIMIT) {
        run.expect_success();
        return;
    }
    let c: LruCache<u32, u32> = LruCache::new(16);
    let guard = c.get_or_guard(&7).unwrap_err();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = std::time::Instant::now();
            let r = c.get_or_guard_timeout(&7, Duration::from_millis(50));
            (r.map(|r| r.ok()), start.elapsed())
        });
        let (got, waited) = waiter.join().unwrap();
        assert_eq!(got, None, "gave up");
        assert!(waited >= Duration::from_millis(50), "waited {waited:?}");
        let zero = s.spawn(|| c.get_or_guard_timeout(&7, Duration::ZERO).map(|r| r.ok()));
        assert_eq!(zero.join().unwrap(), None, "a zero timeout does not wait");
        let waiter = s.spawn(|| {
            c.get_or_guard_timeout(&7, Duration::from_secs(20))
                .map(|r| r.ok())
        });
        until_waiting(&c, 2);
        assert_eq!(guard.insert(70), 70);
        assert_eq!(waiter.join().unwrap(), Some(Some(70)));
    });
    assert!(matches!(
        c.get_or_guard_timeout(&8, Duration::ZERO),
        Some(Err(_))
    ));
    assert!(matches!(
        c.get_or_guard_timeout(&7, Duration::ZERO),
        Some(Ok(70))
    ));
}

/// Callers already waiting on a load when its key is removed get its
/// value, as they would have had the load landed first; the cache does
/// not keep it.
#[test]
fn waiters_before_the_removal_get_the_loaded_value() {
    if let Some(run) = child::parent("waiters_before_the_removal_get_the_loaded_value", LIMIT) {
        run.expect_success();
        return;
    }
    let c: LruCache<u32, u32> = LruCache::new(16);
    let (loading, release) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            c.get_or_insert_with(7, || {
                loading.wait();
                release.wait();
                2
            })
        });
        loading.wait();
        let waiter = s.spawn(|| c.get_or_insert_with(7, || 9));
        until_waiting(&c, 1);
        assert_eq!(c.remove(&7), None);
        release.wait();
        assert_eq!(loader.join().unwrap(), 2);
        assert_eq!(waiter.join().unwrap(), 2);
    });
    assert_eq!(c.get(&7), None);
    assert_eq!(c.stats().loads, 1);
}

/// `get_or_guard`: of eight threads missing on one key at once, one gets
/// the guard and the others wait for its value; a guard dropped unused
/// wakes them, and one of them gets the guard next.
#[test]
fn one_guard_per_key() {
    if let Some(run) = child::parent("one_guard_per_key", LIMIT) {
        run.expect_success();
        return;
    }
    for round in 0..50u64 {
        let cache: LruCache<u64, u64> = LruCache::new(100);
        let guards = AtomicUsize::new(0);
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    let v = match cache.get_or_guard(&round) {
                        Ok(v) => v,
                        Err(guard) => {
                            assert_eq!(*guard.key(), round);
                            let first = guards.fetch_add(1, Ordering::SeqCst) == 0;
                            std::thread::sleep(Duration::from_millis(2));
                            if first && round % 2 == 1 {
                                // Given up: another thread loads next.
                                drop(guard);
                                return;
                            }
                            guard.insert(round * 10)
                        }
                    };
                    assert_eq!(v, round * 10);
                });
            }
        });
        let want = if round % 2 == 1 { 2 } else { 1 };
        assert_eq!(guards.load(Ordering::SeqCst), want, "round {round}");
        assert_eq!(cache.stats().loads, want as u64);
        assert_eq!(cache.get(&round), Some(round * 10));
        cache.check_invariants().unwrap();
    }
}

/// A thread that asks for the key it holds the guard of (or loads in a
/// `get_or_insert_with` closure) would wait for itself: it panics,
/// naming the cause, and the guard still inserts afterwards. An `insert`
/// of the key while the guard is held wins over the guard's value.
#[test]
fn a_guards_own_thread_asking_for_its_key_panics() {
    if let Some(run) = child::parent("a_guards_own_thread_asking_for_its_key_panics", LIMIT) {
        run.expect_success();
        return;
    }
    let cache: LruCache<String, u32> = LruCache::new(100);
    let guard = cache.get_or_guard("k").unwrap_err();
    let r = catch_unwind(AssertUnwindSafe(|| cache.get_or_guard("k").map_err(drop)));
    let msg = mmbatch_testkit::panic_message(&*r.unwrap_err());
    assert!(
        msg.contains("would never end") && msg.contains("LoadGuard"),
        "{msg}"
    );
    let r = catch_unwind(AssertUnwindSafe(|| {
        cache.get_or_insert_with("k".into(), || 0)
    }));
    let msg = mmbatch_testkit::panic_message(&*r.unwrap_err());
    assert!(
        msg.contains("would never end") && msg.contains("LoadGuard"),
        "{msg}"
    );
    assert_eq!(guard.insert(5), 5);
    assert_eq!(cache.get("k"), Some(5));
    let guard = cache.get_or_guard("other").unwrap_err();
    cache.insert("other".into(), 1);
    assert_eq!(guard.insert(2), 1, "the insert landed first");
    assert_eq!(cache.get("other"), Some(1));
    let r = catch_unwind(AssertUnwindSafe(|| {
        cache.get_or_insert_with("third".into(), || {
            cache.get_or_guard("third").map_err(drop).unwrap_or(0)
        })
    }));
    assert!(r.is_err(), "a loader's get_or_guard of its own key waited");
    assert_eq!(cache.get_or_guard("third").unwrap_err().insert(3), 3);
    cache.check_invariants().unwrap();
}

/// `get_or_insert_with_if`: eight threads find a cached value their
/// `replace_if` refuses at once: one load replaces it (heard as
/// replaced), all get the new value, and a plain `get_or_insert_with`
/// meanwhile gets the cached one. A value it passes is a hit; a failed
/// load leaves the cached value; an insert that lands during the load is
/// kept if `replace_if` passes it, and replaced if not.
#[test]
fn a_value_replace_if_refuses_is_loaded_again_once() {
    if let Some(run) = child::parent("a_value_replace_if_refuses_is_loaded_again_once", LIMIT) {
        run.expect_success();
        return;
    }
    use mmbatch_cache::RemovalCause;
    use std::sync::{Arc, Mutex};
    for round in 0..20u64 {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = heard.clone();
        let cache: LruCache<u64, i64> = LruCache::builder(100)
            .removal_listener(move |k, v, c| log.lock().unwrap().push((k, v, c)))
            .build()
            .unwrap();
        cache.insert(round, -1);
        let loads = AtomicUsize::new(0);
        let start = Barrier::new(9);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    let v = cache.get_or_insert_with_if(
                        round,
                        || {
                            loads.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                            round as i64
                        },
                        |v| *v < 0,
                    );
                    assert_eq!(v, round as i64);
                });
            }
            start.wait();
            let v = cache.get_or_insert_with(round, || unreachable!("cached"));
            assert!(v == -1 || v == round as i64, "{v}");
        });
        assert_eq!(loads.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(
            *heard.lock().unwrap(),
            [(round, -1, RemovalCause::Replaced)]
        );
        cache.check_invariants().unwrap();
    }
    let cache: LruCache<u8, i64> = LruCache::new(100);
    cache.insert(1, 5);
    assert_eq!(
        cache.get_or_insert_with_if(1, || unreachable!(), |v| *v < 0),
        5
    );
    cache.insert(1, -5);
    let r = cache.try_get_or_insert_with_if(1, || Err("down"), |v| *v < 0);
    assert_eq!((r, cache.get(&1)), (Err("down"), Some(-5)));
    // An insert while the load runs: kept if replace_if passes it.
    let v = cache.get_or_insert_with_if(
        1,
        || {
            cache.insert(1, 9);
            7
        },
        |v| *v < 0,
    );
    assert_eq!((v, cache.get(&1)), (9, Some(9)));
    cache.insert(1, -5);
    let v = cache.get_or_insert_with_if(
        1,
        || {
            cache.insert(1, -9);
            7
        },
        |v| *v < 0,
    );
    assert_eq!((v, cache.get(&1)), (7, Some(7)));
    cache.check_invariants().unwrap();
}

/// A cached value that `replace_if` refuses is a miss in the stats (the
/// caller did not get it), and the value loaded in its place is an update
/// of the entry for its `Expiry` (not a creation as well). Before, the
/// refusal counted as a hit and the store asked `expire_after_create`
/// first.
#[test]
fn a_refused_value_is_a_miss_and_its_replacement_an_update() {
    use mmbatch_cache::Expiry;
    use std::sync::Arc;
    #[derive(Default)]
    struct Calls {
        create: AtomicUsize,
        update: AtomicUsize,
    }
    struct Counted(Arc<Calls>);
    impl Expiry<u8, i64> for Counted {
        fn expire_after_create(&self, _: &u8, _: &i64) -> Option<Duration> {
            self.0.create.fetch_add(1, Ordering::Relaxed);
            None
        }
        fn expire_after_update(&self, _: &u8, _: &i64, _: Option<Duration>) -> Option<Duration> {
            self.0.update.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
    let calls = Arc::new(Calls::default());
    let expiring: LruCache<u8, i64> = LruCache::builder(100)
        .expiry(Counted(calls.clone()))
        .build()
        .unwrap();
    let plain: LruCache<u8, i64> = LruCache::new(100);
    for (cache, expiring) in [(&expiring, true), (&plain, false)] {
        cache.insert(1, -1);
        assert_eq!(cache.get_or_insert_with_if(1, || 7, |v| *v < 0), 7);
        let st = cache.stats();
        assert_eq!(
            (st.hits, st.misses, st.loads),
            (0, 1, 1),
            "expiry {expiring}"
        );
        assert_eq!(
            cache.get_or_insert_with_if(1, || unreachable!("cached"), |v| *v < 0),
            7
        );
        let st = cache.stats();
        assert_eq!(
            (st.hits, st.misses, st.loads),
            (1, 1, 1),
            "expiry {expiring}"
        );
        assert!((cache.stats().hit_ratio() - 0.5).abs() < 1e-9);
    }
    let calls = (
        calls.create.load(Ordering::Relaxed),
        calls.update.load(Ordering::Relaxed),
    );
    assert_eq!(calls, (1, 1), "(creations, updates)");
}

/// Waits (bounded) until `cache` has counted `n` callers waiting on
/// loads: the loader of a test holds its load until its waiters are in.
fn until_waiting<K: Hash + Eq + Clone, V: Clone>(cache: &LruCache<K, V>, n: u64) {
    mmbatch_testkit::wait_until("the waiters' arrival", Duration::from_secs(10), || {
        cache.stats().load_waits >= n
    });
}

/// Eight threads miss on one key, shared errors asked: one loader runs and
/// fails, and every caller returns its error, the same `Arc`, without a
/// load of its own. With the error not handed to the room (the plain
/// form's behaviour), the seven waiters each loaded in turn: 8 calls.
#[test]
fn a_shared_error_reaches_every_waiter() {
    if let Some(run) = child::parent("a_shared_error_reaches_every_waiter", LIMIT) {
        run.expect_success();
        return;
    }
    use std::sync::Arc;
    #[derive(Debug)]
    struct Down(u32); // not Clone
    let cache: LruCache<u64, u64> = LruCache::new(100);
    let calls = AtomicUsize::new(0);
    let start = Barrier::new(8);
    let errors: Vec<Arc<Down>> = std::thread::scope(|s| {
        let callers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    cache.try_get_or_insert_shared(5, || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        until_waiting(&cache, 7);
                        Err(Down(503))
                    })
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|c| c.join().unwrap().unwrap_err())
            .collect()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(errors[0].0, 503);
    assert!(errors.iter().all(|e| Arc::ptr_eq(e, &errors[0])));
    // Nothing cached: the next miss loads.
    let r: Result<u64, Arc<Down>> = cache.try_get_or_insert_shared(5, || Ok(50));
    assert_eq!(r.unwrap(), 50);
    let st = cache.stats();
    assert_eq!((st.loads, st.load_waits), (2, 7));
}

/// A caller waiting on a load whose error it cannot take (an error of
/// another type, or a loader of the plain form) starts over as before:
/// here two such waiters on a failing shared load, one of which then
/// loads for both; then a shared waiter, of the loader's own error type,
/// on a failing plain load, which shares nothing.
#[test]
fn a_waiter_not_sharing_the_error_starts_over() {
    if let Some(run) = child::parent("a_waiter_not_sharing_the_error_starts_over", LIMIT) {
        run.expect_success();
        return;
    }
    use std::sync::Arc;
    #[derive(Debug)]
    struct Down;
    #[derive(Debug)]
    struct Other;
    let cache: LruCache<u64, u64> = LruCache::new(100);
    let calls = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            cache.try_get_or_insert_shared(5, || {
                calls.fetch_add(1, Ordering::SeqCst);
                until_waiting(&cache, 2);
                Err(Down)
            })
        });
        // The loader's flight is claimed once it counts as a load.
        mmbatch_testkit::wait_until("the load's claim", LIMIT, || cache.stats().loads >= 1);
        let other = s.spawn(|| {
            cache.try_get_or_insert_shared(5, || {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Other>(6)
            })
        });
        let plain = s.spawn(|| {
            cache.try_get_or_insert_with(5, || {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Down>(6)
            })
        });
        assert!(matches!(loader.join().unwrap(), Err(e) if matches!(*e, Down)));
        let other: Result<u64, Arc<Other>> = other.join().unwrap();
        assert_eq!(other.unwrap(), 6);
        assert_eq!(plain.join().unwrap().unwrap(), 6);
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            cache.try_get_or_insert_with(7, || {
                calls.fetch_add(1, Ordering::SeqCst);
                until_waiting(&cache, 3);
                Err::<u64, _>(Down)
            })
        });
        mmbatch_testkit::wait_until("the load's claim", LIMIT, || cache.stats().loads >= 3);
        let shared = s.spawn(|| {
            cache.try_get_or_insert_shared(7, || {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Down>(70)
            })
        });
        assert!(matches!(loader.join().unwrap(), Err(Down)));
        assert_eq!(shared.join().unwrap().unwrap(), 70);
    });
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

/// A loaded value the cache does not keep (here a cache of capacity 0,
/// which stores nothing) still reaches every caller that waited on its
/// load: one load for eight callers. With the landing not handing the
/// value to the room, the waiters started over and each loaded in turn.
#[test]
fn a_value_not_cached_still_reaches_the_waiters() {
    if let Some(run) = child::parent("a_value_not_cached_still_reaches_the_waiters", LIMIT) {
        run.expect_success();
        return;
    }
    let cache: LruCache<u64, u64> = LruCache::new(0);
    let loads = AtomicUsize::new(0);
    let start = Barrier::new(8);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                start.wait();
                let v = cache.get_or_insert_with(3, || {
                    loads.fetch_add(1, Ordering::SeqCst);
                    until_waiting(&cache, 7);
                    30
                });
                assert_eq!(v, 30);
            });
        }
    });
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(cache.len(), 0);
}

/// A guard dropped, or inserted through, from code the cache runs under
/// the key's shard lock (here `compute`'s function on another key of the
/// one shard): the drop wakes the key's waiter, which loads next; the
/// insert panics as a re-entry, and its unwinding wakes the waiter too.
/// With the flight taken out under the shard's lock in the guard's drop,
/// the drop panicked there, the waiter waited forever, and the insert's
/// unwinding aborted the process.
#[test]
fn a_guard_given_up_under_its_shards_lock_wakes_its_waiters() {
    let name = "a_guard_given_up_under_its_shards_lock_wakes_its_waiters";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    use mmbatch_cache::Compute;
    let cache: LruCache<u32, u32> = LruCache::builder(64).shards(1).build().unwrap();
    for (round, insert) in [(1u32, false), (2, true)] {
        let guard = cache.get_or_guard(&round).unwrap_err();
        let waiting = Barrier::new(2);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                waiting.wait();
                match cache.get_or_guard(&round) {
                    Ok(v) => v,
                    Err(g) => g.insert(round * 10),
                }
            });
            waiting.wait();
            // Let the waiter reach the flight's room.
            std::thread::sleep(Duration::from_millis(50));
            let r = catch_unwind(AssertUnwindSafe(|| {
                cache.compute(999, |_| {
                    if insert {
                        guard.insert(7);
                    } else {
                        drop(guard);
                    }
                    Compute::Nop
                })
            }));
            assert_eq!(r.is_err(), insert, "round {round}");
            assert_eq!(waiter.join().unwrap(), round * 10);
        });
        assert_eq!(cache.get(&round), Some(round * 10));
    }
    cache.check_invariants().unwrap();
}

/// `load_failures` counts the loads that ended without a value: an
/// error, a panic, a guard dropped; a load that stores is not one.
#[test]
fn load_failures_count_the_loads_that_ended_without_a_value() {
    let cache: LruCache<u32, u32> = LruCache::new(10);
    assert_eq!(cache.try_get_or_insert_with(1, || Err("down")), Err("down"));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        cache.get_or_insert_with(2, || panic!("loader panicked"))
    }));
    assert!(panicked.is_err());
    drop(cache.get_or_guard(&3).unwrap_err());
    assert_eq!(cache.get_or_insert_with(4, || 4), 4);
    let guard = cache.get_or_guard(&5).unwrap_err();
    assert_eq!(guard.insert(5), 5);
    let st = cache.stats();
    assert_eq!((st.loads, st.load_failures), (5, 3), "{st:?}");
    // A hit starts no load, and fails none.
    assert_eq!(cache.get_or_insert_with(4, || unreachable!()), 4);
    assert_eq!(cache.stats().load_failures, 3);
}

/// A load whose value was stored is no failure, even if the clone it
/// hands its waiters then panics (it counted as one, though the value
/// was cached).
#[test]
fn a_stored_load_is_no_failure_when_its_waiters_clone_panics() {
    use std::sync::atomic::AtomicBool;
    static ARMED: AtomicBool = AtomicBool::new(false);
    static CLONES: AtomicUsize = AtomicUsize::new(0);
    /// Panics at its second clone once armed: the store's clone for the
    /// cache passes, the one for the waiters does not.
    struct Bomb;
    impl Clone for Bomb {
        fn clone(&self) -> Self {
            if ARMED.load(Ordering::SeqCst) && CLONES.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("the waiters' clone");
            }
            Bomb
        }
    }
    let cache: LruCache<u32, Bomb> = LruCache::new(10);
    ARMED.store(true, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = cache.get_or_insert_with(1, || Bomb);
    }));
    ARMED.store(false, Ordering::SeqCst);
    assert!(r.is_err(), "the second clone panicked");
    assert!(cache.contains_key(&1), "the value was stored");
    let st = cache.stats();
    assert_eq!((st.loads, st.load_failures), (1, 0), "{st:?}");
}
