//! Many loads in flight in one shard (past the few a shard keeps in a
//! list, in a table by hash): each is found by its key's callers, lands,
//! is outdated by its key's removal only, and one given up is swept out.
//! Every key can share one hash (`OneHash`), where only the key tells
//! loads apart. No call here waits (timeouts of zero), so none can hang.

use std::{
    hash::{BuildHasher, Hash, Hasher},
    sync::{
        Arc,
        atomic::{AtomicIsize, Ordering},
    },
    time::Duration,
};

use mmbatch_cache::{Compute, LoadGuard, LruCache};

/// Loads held at once: well past the list a shard starts with.
const HELD: u32 = 40;

/// Every key hashes to 0.
#[derive(Clone, Default)]
struct OneHash;

impl BuildHasher for OneHash {
    type Hasher = OneHasher;
    fn build_hasher(&self) -> OneHasher {
        OneHasher
    }
}

struct OneHasher;

impl Hasher for OneHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, _: &[u8]) {}
}

fn one_shard<S: BuildHasher>(hasher: S) -> LruCache<u32, u32, S> {
    LruCache::builder(1024)
        .shards(1)
        .hasher(hasher)
        .build()
        .unwrap()
}

/// Whether another thread finds `key`'s load in flight (a caller that
/// would wait) rather than a value or a load of its own to make.
fn in_flight<S: BuildHasher + Sync>(cache: &LruCache<u32, u32, S>, key: u32) -> bool {
    std::thread::scope(|s| {
        s.spawn(|| cache.get_or_guard_timeout(&key, Duration::ZERO).is_none())
            .join()
            .unwrap()
    })
}

fn each_load_is_found_and_lands<S: BuildHasher + Sync>(cache: LruCache<u32, u32, S>) {
    let mut guards: Vec<_> = (0..HELD)
        .map(|k| (k, cache.get_or_guard(&k).unwrap_err()))
        .collect();
    for k in 0..HELD {
        assert!(in_flight(&cache, k), "key {k}'s load not found");
    }
    assert!(!in_flight(&cache, HELD), "a key nobody loads");
    // Landed in an order of their own, each found until it lands.
    while !guards.is_empty() {
        let (k, g) = guards.swap_remove((guards.len() * 7 / 11).min(guards.len() - 1));
        g.insert(k * 10);
        assert!(!in_flight(&cache, k));
        assert_eq!(cache.get(&k), Some(k * 10));
        for (other, _) in &guards {
            assert!(in_flight(&cache, *other), "key {other}'s load lost");
        }
    }
    // And the shard loads on as before.
    assert_eq!(cache.get_or_insert_with(HELD, || 7), 7);
    cache.check_invariants().unwrap();
}

#[test]
fn many_loads_in_flight_are_each_found_and_land() {
    each_load_is_found_and_lands(one_shard(std::hash::RandomState::new()));
    each_load_is_found_and_lands(one_shard(OneHash));
}

fn a_removal_outdates_its_key_only<S: BuildHasher + Sync>(cache: LruCache<u32, u32, S>) {
    let guards: Vec<_> = (0..HELD)
        .map(|k| (k, cache.get_or_guard(&k).unwrap_err()))
        .collect();
    assert_eq!(cache.remove(&7), None);
    cache.compute(9, |_| Compute::Remove);
    // A removed key's next caller loads afresh, not waiting for the
    // outdated load.
    assert!(!in_flight(&cache, 7));
    assert!(in_flight(&cache, 8));
    for (k, g) in guards {
        assert_eq!(g.insert(k * 10), k * 10);
    }
    for k in 0..HELD {
        let want = (k != 7 && k != 9).then_some(k * 10);
        assert_eq!(cache.get(&k), want, "key {k}");
    }
    cache.check_invariants().unwrap();
}

#[test]
fn a_removal_among_many_loads_outdates_its_key_only() {
    a_removal_outdates_its_key_only(one_shard(std::hash::RandomState::new()));
    a_removal_outdates_its_key_only(one_shard(OneHash));
}

#[test]
fn a_clear_outdates_every_load_in_flight() {
    let cache = one_shard(OneHash);
    let guards: Vec<_> = (0..HELD)
        .map(|k| (k, cache.get_or_guard(&k).unwrap_err()))
        .collect();
    cache.clear();
    for (k, g) in guards {
        g.insert(k);
    }
    assert_eq!(cache.len(), 0);
}

/// A key that counts its live copies (the caller's, the loads').
#[derive(Debug)]
struct Counted {
    id: u32,
    live: Arc<AtomicIsize>,
}

impl Counted {
    fn new(id: u32, live: &Arc<AtomicIsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self {
            id,
            live: live.clone(),
        }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Self::new(self.id, &self.live)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Counted {}

impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

/// The guard of `key`'s load, which the caller makes.
fn guard(cache: &LruCache<Counted, u32>, key: Counted) -> LoadGuard<'_, Counted, u32> {
    cache.get_or_guard(&key).unwrap_err()
}

/// Loads given up (guards dropped without a value) of keys nobody asks
/// for again are swept out of the shard by later claims, their keys
/// dropped: in rounds of 200 given up, the copies held stay under two
/// rounds' worth (a sweep comes within as many claims as the shard held
/// flights after the last), and a run of claims sweeps out the rest.
#[test]
fn loads_given_up_are_swept_out() {
    let live = Arc::new(AtomicIsize::new(0));
    let cache: LruCache<Counted, u32> = LruCache::builder(1024).shards(1).build().unwrap();
    let mut next = 0;
    let mut claim = |cache| {
        next += 1;
        guard(cache, Counted::new(next, &live))
    };
    // The keys the shard holds beyond the cached ones.
    let held = |cache: &LruCache<Counted, u32>| live.load(Ordering::Relaxed) - cache.len() as isize;
    let mut after = Vec::new();
    for _ in 0..10 {
        let guards: Vec<_> = (0..200).map(|_| claim(&cache)).collect();
        drop(guards);
        // Loads of other keys: each a claim and a landing.
        for _ in 0..4 {
            claim(&cache).insert(0);
        }
        after.push(held(&cache));
    }
    assert!(
        after.iter().all(|&h| h <= 400),
        "keys held after each round: {after:?}"
    );
    for _ in 0..400 {
        claim(&cache).insert(0);
    }
    assert_eq!(held(&cache), 0, "after each round: {after:?}");
    // A key given up and asked again is loaded afresh.
    let again = Counted::new(1, &live);
    assert_eq!(cache.get_or_insert_with(again, || 5), 5);
}
