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

use mmbatch_cache::{Compute, Computed, LruCache, Policy, RemovalCause};

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
    /// `remove_if(key, |v| v % 2 == m % 2)`.
    RemoveIf(u8, u32),
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
    /// `set_capacity(c)`.
    SetCapacity(u8),
    /// `compute(key, f)`, `f` as [`compute_op`] decides from the value.
    Compute(u8, u32),
}

/// What `Op::Compute(_, v)`'s function does with the entry's value `cur`:
/// removes a multiple of 3, adds `v` to any other, puts `v` where there
/// is none if `v` is even, else nothing.
pub fn compute_op(cur: Option<u32>, v: u32) -> Compute<u32> {
    match cur {
        Some(c) if c % 3 == 0 => Compute::Remove,
        Some(c) => Compute::Put(c.wrapping_add(v)),
        None if v % 2 == 0 => Compute::Put(v),
        None => Compute::Nop,
    }
}

/// The cache's entries by `peek` of every key.
fn resident(cache: &LruCache<u8, u32>) -> HashMap<u8, u32> {
    (0..=u8::MAX)
        .filter_map(|k| Some((k, cache.peek(&k)?)))
        .collect()
}

type Heard = Arc<Mutex<Vec<(u8, u32, RemovalCause)>>>;

/// A cache of `capacity` entries whose removal listener logs every entry
/// it hears, with the cause.
pub fn cache(capacity: usize, policy: Policy, batching: bool) -> (LruCache<u8, u32>, Heard) {
    let heard = Heard::default();
    let log = heard.clone();
    let cache = LruCache::builder(capacity as u64)
        .policy(policy)
        .batching(batching)
        .shards(4)
        .removal_listener(move |k, v, cause| log.lock().unwrap().push((k, v, cause)))
        .build()
        .unwrap();
    (cache, heard)
}

/// Values in the cache's hands: +1 as one goes in, -1 as it is heard,
/// drained or found resident at the end; every count ends at 0 (each
/// value heard exactly once, or still cached).
type Ledger = HashMap<(u8, u32), i64>;

fn debit(ledger: &mut Ledger, kv: (u8, u32)) {
    *ledger.entry(kv).or_default() -= 1;
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Runs `ops`, checking every result against the oracles that apply.
pub fn run(capacity: usize, policy: Policy, batching: bool, ops: &[Op]) -> Result<(), String> {
    let mut capacity = capacity;
    let exact = policy == Policy::Lru && !batching;
    let (cache, heard) = cache(capacity, policy, batching);
    let evicted = || -> Vec<(u8, u32)> {
        heard
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.2 == RemovalCause::Evicted)
            .map(|&(k, v, _)| (k, v))
            .collect()
    };
    // A new key that the admission refused (`Policy::LirsTinyLfu`, and
    // `Adaptive` while its shards run it) is not cached: heard evicted in
    // its own step instead.
    let admits = matches!(policy, Policy::LirsTinyLfu | Policy::Adaptive);
    let refused_so_far = || cache.stats().not_admitted;
    let visible = |k: u8, v: u32, from: usize, refused_before: u64| {
        cache.peek(&k) == Some(v)
            || (admits
                && refused_so_far() == refused_before + 1
                && heard.lock().unwrap()[from..].contains(&(k, v, RemovalCause::Evicted)))
    };
    let mut ledger = Ledger::new();
    // What the step is to have heard, besides evictions.
    let mut expect: Vec<(u8, u32, RemovalCause)>;
    let mut seen = 0;
    let mut oracle = lru::LruCache::new(NonZeroUsize::new(capacity).unwrap());
    let mut oracle_evicted = Vec::new();
    let mut latest: HashMap<u8, u32> = HashMap::new();
    for (i, op) in ops.iter().cloned().enumerate() {
        let at = |what: String| format!("step {i} {op:?}: {what}");
        let refused_before = refused_so_far();
        expect = Vec::new();
        match op {
            Op::Insert(k, v) => {
                *ledger.entry((k, v)).or_default() += 1;
                let old = cache.insert(k, v);
                if let Some(o) = old {
                    expect.push((k, o, RemovalCause::Replaced));
                }
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
                check(visible(k, v, seen, refused_before), || {
                    at("not visible".into())
                })?;
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
                    expect.push((k, v, RemovalCause::Removed));
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
            Op::RemoveIf(k, m) => {
                let says = |v: &u32| v % 2 == m % 2;
                let before = cache.peek(&k);
                let got = cache.remove_if(&k, says);
                if let Some(v) = got {
                    expect.push((k, v, RemovalCause::Removed));
                    check(Some(v) == before && says(&v), || at(format!("removed {v}")))?;
                    latest.remove(&k);
                } else {
                    check(before.is_none_or(|v| !says(&v)), || {
                        at(format!("{before:?} not removed"))
                    })?;
                }
                if exact {
                    let want = oracle.peek(&k).copied().filter(says);
                    if want.is_some() {
                        oracle.pop(&k);
                    }
                    check(got == want, || at(format!("{got:?}, lru {want:?}")))?;
                }
                check(cache.peek(&k) == before.filter(|v| !says(v)), || {
                    at("left wrong".into())
                })?;
            }
            Op::GetOrInsert(k, v) => {
                if cache.peek(&k).is_none() {
                    *ledger.entry((k, v)).or_default() += 1;
                }
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
            Op::Compute(k, v) => {
                let mut saw = None;
                let done = cache.compute(k, |cur| {
                    saw = Some(cur.copied());
                    compute_op(cur.copied(), v)
                });
                let cur = saw.ok_or_else(|| at("f not called".into()))?;
                if let Some(c) = cur {
                    check(Some(c) == latest.get(&k).copied(), || {
                        at(format!("f saw {c}"))
                    })?;
                }
                if exact {
                    let want = oracle.peek(&k).copied();
                    check(cur == want, || at(format!("f saw {cur:?}, lru {want:?}")))?;
                }
                let want = match compute_op(cur, v) {
                    Compute::Put(n) => {
                        *ledger.entry((k, n)).or_default() += 1;
                        latest.insert(k, n);
                        if exact {
                            if let Some((ek, ev)) = oracle.push(k, n) {
                                if ek != k {
                                    oracle_evicted.push((ek, ev));
                                }
                            }
                        }
                        check(visible(k, n, seen, refused_before), || {
                            at("not visible".into())
                        })?;
                        match cur {
                            Some(c) => {
                                expect.push((k, c, RemovalCause::Replaced));
                                Computed::Replaced(c)
                            }
                            None => Computed::Inserted,
                        }
                    }
                    Compute::Remove => {
                        let c = cur.expect("only a value is removed");
                        expect.push((k, c, RemovalCause::Removed));
                        latest.remove(&k);
                        if exact {
                            oracle.pop(&k);
                        }
                        check(cache.peek(&k).is_none(), || at("still there".into()))?;
                        Computed::Removed(c)
                    }
                    Compute::Nop => Computed::Unchanged(cur),
                };
                check(done == want, || at(format!("{done:?}, want {want:?}")))?;
            }
            Op::Clear => {
                let mut held: Vec<_> = resident(&cache).into_iter().collect();
                held.sort_unstable();
                expect.extend(held.into_iter().map(|(k, v)| (k, v, RemovalCause::Cleared)));
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
                for (&k, &v) in before.iter().filter(|&(&k, _)| k % m == 0) {
                    latest.remove(&k);
                    oracle.pop(&k);
                    expect.push((k, v, RemovalCause::Removed));
                }
                let after = resident(&cache);
                let kept: HashMap<u8, u32> =
                    before.into_iter().filter(|&(k, _)| k % m != 0).collect();
                check(after == kept, || {
                    at(format!("kept {after:?}, want {kept:?}"))
                })?;
            }
            Op::SetCapacity(c) => {
                let c = usize::from(c);
                let r = cache.set_capacity(c as u64);
                if c != 0 && c < cache.shards() {
                    check(r.is_err(), || at(format!("{c} accepted")))?;
                    check(cache.capacity() == capacity as u64, || at("changed".into()))?;
                } else {
                    check(r.is_ok(), || at(format!("{r:?}")))?;
                    check(cache.capacity() == c as u64, || at("not set".into()))?;
                    if exact && c < oracle.len() {
                        // lru's `resize` evicts from the LRU end, unheard.
                        let lru_first: Vec<(u8, u32)> =
                            oracle.iter().rev().map(|(&k, &v)| (k, v)).collect();
                        oracle_evicted.extend(lru_first[..oracle.len() - c].iter().copied());
                    }
                    match NonZeroUsize::new(c) {
                        Some(c) if exact => oracle.resize(c),
                        Some(_) => {}
                        None => {
                            // A cache of 0 stores nothing: emptied, it
                            // takes its capacity back (the ops on a cache
                            // of 0 are `a_capacity_of_zero_stores_nothing`'s).
                            oracle.clear();
                            check(cache.is_empty(), || at("not emptied".into()))?;
                            let back = cache.set_capacity(capacity as u64);
                            check(back.is_ok(), || at(format!("back to {capacity}: {back:?}")))?;
                        }
                    }
                    if c != 0 {
                        capacity = c;
                    }
                }
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
                for kv in got {
                    debit(&mut ledger, kv);
                }
                latest.clear();
                oracle.clear();
                check(cache.is_empty(), || at("not empty".into()))?;
            }
        }
        // Heard this step: the expected causes (in any order for a
        // retain's or a clear's shards), and evictions.
        let now: Vec<(u8, u32, RemovalCause)> = heard.lock().unwrap()[seen..].to_vec();
        seen += now.len();
        let mut other: Vec<_> = now
            .iter()
            .copied()
            .filter(|h| h.2 != RemovalCause::Evicted)
            .collect();
        other.sort_unstable_by_key(|&(k, v, c)| (k, v, c as u8));
        expect.sort_unstable_by_key(|&(k, v, c)| (k, v, c as u8));
        check(other == expect, || {
            at(format!("heard {other:?}, expected {expect:?}"))
        })?;
        for &(k, v, _) in &now {
            debit(&mut ledger, (k, v));
        }
        if exact {
            let got = evicted();
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
    let evicted = evicted().len() as u64;
    check(evicted == cache.stats().evictions, || {
        "listener and stats disagree".into()
    })?;
    for kv in resident(&cache) {
        debit(&mut ledger, kv);
    }
    ledger.retain(|_, n| *n != 0);
    check(ledger.is_empty(), || {
        format!("values not heard exactly once (count left, + unheard, - heard twice): {ledger:?}")
    })?;
    cache.check_invariants()
}
