//! The cache's sequential oracles, shared by the property tests and the
//! `cache_ops` fuzz target: a `HashMap` of latest values for every policy
//! and mode, and the `lru` crate for exact order under `Policy::Lru` with
//! batching off. `run` checks every result and the cache's invariants
//! after every step.

#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use mmbatch_cache::{LruCache, Policy};

/// One operation on key `.0`.
#[derive(Clone, Debug)]
pub enum Op {
    /// `insert(key, value)`.
    Insert(u8, u32),
    /// `get(key)`.
    Get(u8),
    /// `peek(key)`.
    Peek(u8),
    /// `remove(key)`.
    Remove(u8),
    /// `get_or_insert_with(key, || value)`.
    GetOrInsert(u8, u32),
    /// `clear()`.
    Clear,
    /// `iter()`, checked against `peek` of every key.
    Iter,
    /// `retain(|k, _| k % m != 0)`.
    Retain(u8),
    /// `drain()`.
    Drain,
}

/// The cache's entries by `peek` of every key.
fn resident(cache: &LruCache<u8, u32>) -> HashMap<u8, u32> {
    (0..=u8::MAX)
        .filter_map(|k| Some((k, cache.peek(&k)?)))
        .collect()
}

type Evicted = Arc<Mutex<Vec<(u8, u32)>>>;

/// A cache of `capacity` entries whose listener logs evictions.
pub fn cache(capacity: usize, policy: Policy, batching: bool) -> (LruCache<u8, u32>, Evicted) {
    let evicted = Evicted::default();
    let log = evicted.clone();
    let cache = LruCache::builder(capacity as u64)
        .policy(policy)
        .batching(batching)
        .shards(4)
        .eviction_listener(move |k, v| log.lock().unwrap().push((k, v)))
        .build()
        .unwrap();
    (cache, evicted)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Runs `ops`, checking every result against the oracles that apply.
pub fn run(capacity: usize, policy: Policy, batching: bool, ops: &[Op]) -> Result<(), String> {
    let exact = policy == Policy::Lru && !batching;
    let (cache, evicted) = cache(capacity, policy, batching);
    let mut oracle = lru::LruCache::new(NonZeroUsize::new(capacity).unwrap());
    let mut oracle_evicted = Vec::new();
    let mut latest: HashMap<u8, u32> = HashMap::new();
    for (i, op) in ops.iter().cloned().enumerate() {
        let at = |what: String| format!("step {i} {op:?}: {what}");
        match op {
            Op::Insert(k, v) => {
                let old = cache.insert(k, v);
                if let Some(o) = old {
                    check(Some(o) == latest.get(&k).copied(), || {
                        at(format!("replaced {o}"))
                    })?;
                }
                latest.insert(k, v);
                if exact {
                    let want = oracle.peek(&k).copied();
                    if let Some((ek, ev)) = oracle.push(k, v) {
                        if ek != k {
                            oracle_evicted.push((ek, ev));
                        }
                    }
                    check(old == want, || {
                        at(format!("returned {old:?}, lru {want:?}"))
                    })?;
                }
                check(cache.peek(&k) == Some(v), || at("not visible".into()))?;
            }
            Op::Get(k) | Op::Peek(k) => {
                let got = if matches!(op, Op::Get(_)) {
                    cache.get(&k)
                } else {
                    cache.peek(&k)
                };
                if let Some(v) = got {
                    check(Some(v) == latest.get(&k).copied(), || {
                        at(format!("stale {v}"))
                    })?;
                }
                if exact {
                    let want = if matches!(op, Op::Get(_)) {
                        oracle.get(&k)
                    } else {
                        oracle.peek(&k)
                    };
                    check(got == want.copied(), || {
                        at(format!("{got:?}, lru {want:?}"))
                    })?;
                }
            }
            Op::Remove(k) => {
                let got = cache.remove(&k);
                if let Some(v) = got {
                    check(Some(v) == latest.get(&k).copied(), || {
                        at(format!("removed {v}"))
                    })?;
                }
                latest.remove(&k);
                if exact {
                    let want = oracle.pop(&k);
                    check(got == want, || at(format!("{got:?}, lru {want:?}")))?;
                }
                check(cache.peek(&k).is_none(), || at("still there".into()))?;
            }
            Op::GetOrInsert(k, v) => {
                let got = cache.get_or_insert_with(k, || v);
                match latest.get(&k) {
                    Some(&cur) if got == cur => {}
                    _ => {
                        check(got == v, || at(format!("returned {got}")))?;
                        latest.insert(k, v);
                    }
                }
                if exact {
                    let want = *oracle.get_or_insert(k, || v);
                    check(got == want, || at(format!("{got}, lru {want}")))?;
                }
            }
            Op::Clear => {
                cache.clear();
                latest.clear();
                oracle.clear();
                check(cache.is_empty(), || at("not empty".into()))?;
            }
            Op::Iter => {
                let want = resident(&cache);
                let got: Vec<(u8, u32)> = cache.iter().collect();
                let map: HashMap<u8, u32> = got.iter().copied().collect();
                check(map.len() == got.len(), || {
                    at(format!("a key twice: {got:?}"))
                })?;
                check(map == want, || at(format!("iter {map:?}, peek {want:?}")))?;
            }
            Op::Retain(m) => {
                let m = m.max(1);
                let before = resident(&cache);
                let removed = cache.retain(|k, _| k % m != 0);
                let want = before.keys().filter(|&&k| k % m == 0).count();
                check(removed == want, || {
                    at(format!("removed {removed}, {want} matched"))
                })?;
                for (&k, _) in before.iter().filter(|&(&k, _)| k % m == 0) {
                    latest.remove(&k);
                    oracle.pop(&k);
                }
                let after = resident(&cache);
                let kept: HashMap<u8, u32> =
                    before.into_iter().filter(|&(k, _)| k % m != 0).collect();
                check(after == kept, || {
                    at(format!("kept {after:?}, want {kept:?}"))
                })?;
            }
            Op::Drain => {
                let want = resident(&cache);
                let got: Vec<(u8, u32)> = cache.drain().collect();
                let map: HashMap<u8, u32> = got.iter().copied().collect();
                check(map.len() == got.len(), || {
                    at(format!("a key twice: {got:?}"))
                })?;
                check(map == want, || {
                    at(format!("drained {map:?}, held {want:?}"))
                })?;
                latest.clear();
                oracle.clear();
                check(cache.is_empty(), || at("not empty".into()))?;
            }
        }
        if exact {
            let got = evicted.lock().unwrap().clone();
            if got.len() > oracle_evicted.len() {
                // The oracle's get_or_insert evicts without telling: its
                // victim must be the cache's.
                for &(k, v) in &got[oracle_evicted.len()..] {
                    check(!oracle.contains(&k), || {
                        at(format!("evicted {k} the lru kept"))
                    })?;
                    oracle_evicted.push((k, v));
                }
            }
            check(got == oracle_evicted, || {
                at(format!("evicted {got:?}, lru {oracle_evicted:?}"))
            })?;
            check(cache.len() == oracle.len(), || {
                at(format!("len {} vs {}", cache.len(), oracle.len()))
            })?;
        }
        check(cache.len() <= capacity, || {
            at(format!("len {} over {capacity}", cache.len()))
        })?;
        cache.check_invariants().map_err(at)?;
    }
    let evicted = evicted.lock().unwrap().len() as u64;
    check(evicted == cache.stats().evictions, || {
        "listener and stats disagree".into()
    })?;
    cache.check_invariants()
}
