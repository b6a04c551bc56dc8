//! `Builder::pinned`: reclaim passes pinned entries over under every
//! policy; a shard of pinned entries refuses new ones rather than overfill
//! or spin (run in a child process with a bounded wait); a pin lifted
//! lets the entry go; a capacity made smaller is reached as entries
//! unpin; a predicate that panics or uses the cache panics in the caller
//! and leaves the cache usable.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use mmbatch_cache::{LruCache, Policy, RemovalCause};
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(30);

const POLICIES: [Policy; 6] = [
    Policy::Adaptive,
    Policy::Workingset,
    Policy::Lirs,
    Policy::LirsTinyLfu,
    Policy::Lru,
    Policy::ActiveInactive,
];

/// Keys below 16 pinned in a cache of 64 (one shard): through 20,000
/// requests that hit the pinned keys a little and stream new ones, none
/// of them is evicted, and the cache stays within its capacity.
#[test]
fn pinned_entries_are_never_evicted() {
    for policy in POLICIES {
        let c = LruCache::<u64, u64>::builder(64)
            .shards(1)
            .policy(policy)
            .pinned(|k, _| *k < 16)
            .build()
            .unwrap();
        for k in 0..16 {
            c.insert(k, k);
        }
        for k in 16..20_000u64 {
            if k % 7 == 0 {
                // Hits on other entries, so reclaim has references to
                // spend and entries to activate around the pinned ones.
                c.get(&(16 + (k * 31) % 40));
            }
            if c.get(&k).is_none() {
                c.insert(k, k);
            }
            assert!(c.len() <= 64, "{policy:?}: {} entries", c.len());
        }
        for k in 0..16 {
            assert_eq!(c.peek(&k), Some(k), "{policy:?}: pinned key {k} evicted");
        }
        c.check_invariants().unwrap();
    }
}

/// Every entry pinned: a new one is refused (heard as evicted, counted as
/// rejected), none of the pinned goes, and nothing spins.
#[test]
fn a_shard_of_pinned_entries_refuses_new_ones() {
    if let Some(run) = child::parent("a_shard_of_pinned_entries_refuses_new_ones", LIMIT) {
        run.expect_success();
        return;
    }
    for policy in POLICIES {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        let c = LruCache::<u64, u64>::builder(8)
            .shards(1)
            .policy(policy)
            .pinned(|_, _| true)
            .removal_listener(move |k, _, cause| h.lock().unwrap().push((k, cause)))
            .build()
            .unwrap();
        for k in 0..8 {
            c.insert(k, k);
        }
        for k in 8..108 {
            assert_eq!(c.insert(k, k), None);
            assert!(!c.contains_key(&k), "{policy:?}: key {k} cached");
        }
        assert_eq!(c.len(), 8);
        assert!((0..8).all(|k| c.contains_key(&k)));
        assert_eq!(c.stats().rejected, 100, "{policy:?}");
        let heard = heard.lock().unwrap();
        assert_eq!(heard.len(), 100, "{policy:?}");
        assert!(
            heard
                .iter()
                .all(|&(k, cause)| k >= 8 && cause == RemovalCause::Evicted)
        );
        c.check_invariants().unwrap();
    }
}

/// Weighted: a replacement that makes the one unpinned entry too heavy to
/// fit beside the pinned ones removes it (the new value is not cached),
/// rather than leave the shard over its capacity.
#[test]
fn a_replacement_that_cannot_fit_beside_pinned_entries_is_not_cached() {
    let c = LruCache::<u64, u64>::builder(10)
        .shards(1)
        .weigher(|_: &u64, v: &u64| *v)
        .pinned(|k, _| *k != 0)
        .build()
        .unwrap();
    c.insert(1, 4);
    c.insert(2, 4);
    c.insert(0, 1);
    assert_eq!(c.weight(), 9);
    assert_eq!(c.insert(0, 3), Some(1), "the old value is returned");
    assert_eq!(c.peek(&0), None, "the new value does not fit");
    assert_eq!((c.weight(), c.len()), (8, 2));
    assert_eq!(c.stats().rejected, 1);
    // Room enough: a replacement stays.
    c.insert(0, 2);
    assert_eq!(c.insert(0, 1), Some(2));
    assert_eq!(c.peek(&0), Some(1));
    c.check_invariants().unwrap();
}

/// A pin lifted: the entry is evicted as any other; and a capacity made
/// smaller than the pinned entries is held until they unpin, then reached.
#[test]
fn pins_lifted_let_entries_go() {
    let pinning = Arc::new(AtomicBool::new(true));
    let p = pinning.clone();
    let c = LruCache::<u64, u64>::builder(8)
        .shards(1)
        .pinned(move |k, _| *k < 8 && p.load(Ordering::Relaxed))
        .build()
        .unwrap();
    for k in 0..8 {
        c.insert(k, k);
    }
    c.set_capacity(4).unwrap();
    assert_eq!(c.len(), 8, "pinned entries stay over a smaller capacity");
    c.check_invariants().unwrap();
    assert_eq!(c.insert(100, 100), None);
    assert!(!c.contains_key(&100), "no room while all are pinned");
    pinning.store(false, Ordering::Relaxed);
    for k in 200..300 {
        c.insert(k, k);
        assert!(c.len() <= 8);
    }
    // Eight were there: at least four of them evicted once unpinned
    // (which stay is the policy's: new keys seen once do not displace an
    // active list).
    assert!(c.len() <= 4, "{} entries once unpinned", c.len());
    c.check_invariants().unwrap();
}

/// The text of the panic `r` carries.
fn panic_message<T: std::fmt::Debug>(r: std::thread::Result<T>) -> String {
    mmbatch_testkit::panic_message(&*r.unwrap_err())
}

/// A predicate that panics (asked under the shard's write lock): the
/// insertion panics in the caller, and the cache goes on, consistent.
#[test]
fn a_pinned_predicate_that_panics_leaves_the_cache_usable() {
    let armed = Arc::new(AtomicBool::new(false));
    let a = armed.clone();
    let c = LruCache::<u64, u64>::builder(8)
        .shards(1)
        .pinned(move |k, _| {
            assert!(!a.load(Ordering::Relaxed), "predicate panicked");
            *k == 0
        })
        .build()
        .unwrap();
    for k in 0..8 {
        c.insert(k, k);
    }
    armed.store(true, Ordering::Relaxed);
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.insert(100, 100))));
    assert!(msg.contains("predicate panicked"), "{msg}");
    armed.store(false, Ordering::Relaxed);
    c.check_invariants().unwrap();
    for k in 200..220 {
        c.insert(k, k);
    }
    assert_eq!(c.len(), 8);
    assert_eq!(c.peek(&0), Some(0), "still pinned");
    c.check_invariants().unwrap();
}

/// A predicate that looks the cache up runs under the shard's write
/// lock: it panics naming the cause instead of hanging (in a child
/// process with a bounded wait).
#[test]
fn a_pinned_predicate_that_uses_the_cache_panics_instead_of_hanging() {
    let name = "a_pinned_predicate_that_uses_the_cache_panics_instead_of_hanging";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    static CACHE: OnceLock<LruCache<u64, u64>> = OnceLock::new();
    let c = CACHE.get_or_init(|| {
        LruCache::builder(4)
            .shards(1)
            .pinned(|_, _| CACHE.get().unwrap().get(&1).is_some())
            .build()
            .unwrap()
    });
    for k in 0..4 {
        c.insert(k, k);
    }
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.insert(100, 100))));
    assert!(msg.contains("would deadlock"), "{msg}");
    c.check_invariants().unwrap();
}

/// An unpinned entry behind pinned tails, its reference spent during the
/// same reclaim: still found and evicted, not mistaken for a shard of
/// pinned entries (reclaim counted rotations of pinned tails as if each
/// were another entry, and refused the new key).
#[test]
fn an_unpinned_entry_behind_pinned_ones_is_still_evicted() {
    for policy in POLICIES {
        let c = LruCache::<u64, u64>::builder(2)
            .shards(1)
            .policy(policy)
            .pinned(|k, _| *k == 0)
            .build()
            .unwrap();
        c.insert(0, 0);
        c.insert(1, 1);
        c.get(&1);
        c.insert(2, 2);
        assert_eq!(c.stats().rejected, 0, "{policy:?}: key 2 refused");
        assert!(c.contains_key(&0), "{policy:?}");
        // TinyLFU's admission may keep 1 instead (not a pin's doing).
        if policy != Policy::LirsTinyLfu {
            assert!(c.contains_key(&2) && !c.contains_key(&1), "{policy:?}");
        }
        c.check_invariants().unwrap();
    }
}
