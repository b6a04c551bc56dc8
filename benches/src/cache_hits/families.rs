//! Synthetic access patterns (Zipf at four skews, one-hit wonders, loops
//! just over and well over the cache, two programs interleaved, a moving
//! hot set, an LRU stack-distance model, scans, correlated pairs, phases,
//! a zigzag, nested loops, tenants, a CDN-like mix), for the
//! `policy_families` and `policy_sim` examples. Written to stand in for
//! traces the policy had not seen, [`FAMILIES`] have since judged the
//! duel's rules (docs/cache.md), so they are seen now; [`HELD_OUT`],
//! written after, were first run before any change, and [`HELD_OUT_2`]
//! (block storage, periodic keys, time-sliced programs, churning keys,
//! shuffled epochs, rereads, an imperfect loop) a day later.

use crate::cache::{SPREAD as H, zipf_stream};

/// xorshift64: the families' own randomness, seeded per family.
struct R(u64);
impl R {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
/// `n` requests of family `name` (one of [`FAMILIES`], [`HELD_OUT`] or
/// [`HELD_OUT_2`]) for a cache of `c` entries, seeded by `seed`.
///
/// # Panics
/// If `name` is not one of [`FAMILIES`], [`HELD_OUT`] or [`HELD_OUT_2`].
pub fn family(name: &str, c: usize, n: usize, seed: u64) -> Vec<u64> {
    if HELD_OUT.contains(&name) {
        return held_out(name, c, n, seed);
    }
    if HELD_OUT_2.contains(&name) {
        return held_out_2(name, c, n, seed);
    }
    let mut r = R(seed * 2654435761 + 12345);
    let cu = c as u64;
    match name {
        "zipf0.6" => zipf_stream(cu * 100, 0.6, n, seed),
        "zipf0.8" => zipf_stream(cu * 100, 0.8, n, seed),
        "zipf1.0" => zipf_stream(cu * 100, 1.0, n, seed),
        "zipf1.2" => zipf_stream(cu * 100, 1.2, n, seed),
        "onehit" => {
            let z = zipf_stream(cu * 20, 0.9, n, seed);
            let mut u = 1u64 << 60;
            z.into_iter()
                .map(|k| {
                    if r.below(2) == 0 {
                        u += 1;
                        u
                    } else {
                        k
                    }
                })
                .collect()
        }
        "loop1.1" | "loop1.25" | "loop1.5" | "loop2" | "loop4" => {
            let m: f64 = name[4..].parse().unwrap();
            let len = (c as f64 * m) as u64;
            (0..n as u64).map(|i| (i % len).wrapping_mul(H)).collect()
        }
        "loop+zipf" => {
            let z = zipf_stream(cu * 50, 0.9, n, seed);
            let len = (c as f64 * 1.5) as u64;
            let mut j = 0u64;
            z.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    if (i / 1000) % 2 == 0 {
                        j += 1;
                        (1u64 << 61) | (j % len)
                    } else {
                        k
                    }
                })
                .collect()
        }
        "2pools" => (0..n)
            .map(|_| {
                if r.below(2) == 0 {
                    r.below(cu / 2)
                } else {
                    (1 << 40) + r.below(cu * 10)
                }
            })
            .map(|k| k.wrapping_mul(H))
            .collect(),
        "random2x" => (0..n).map(|_| r.below(cu * 2).wrapping_mul(H)).collect(),
        "sliding" => {
            let z = zipf_stream(cu * 4, 0.9, n, seed);
            z.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    let rank = k.wrapping_mul(0xF1DE_83E1_9937_733D);
                    (rank + (i as u64) / 20).wrapping_mul(H)
                })
                .collect()
        }
        "lrustack" => {
            let mut stack: Vec<u64> = Vec::new();
            let mut nextk = 0u64;
            (0..n)
                .map(|_| {
                    let k = if !stack.is_empty() && r.f() < 0.85 {
                        let d = ((-r.f().ln()) * (c as f64) * 0.5) as usize;
                        let d = d.min(stack.len() - 1);
                        let idx = stack.len() - 1 - d;
                        stack.remove(idx)
                    } else {
                        nextk += 1;
                        nextk
                    };
                    stack.push(k);
                    if stack.len() > c * 8 {
                        stack.drain(..c);
                    }
                    k.wrapping_mul(H)
                })
                .collect()
        }
        "zipf+bigscan" => {
            let z = zipf_stream(cu * 50, 0.9, n, seed);
            let mut s = 1u64 << 62;
            z.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    if i % 50_000 < 2 * c {
                        s += 1;
                        s
                    } else {
                        k
                    }
                })
                .collect()
        }
        "correlated" => {
            let z = zipf_stream(cu * 30, 0.9, n / 2, seed);
            let mut out = Vec::with_capacity(n);
            let mut u = 1u64 << 59;
            for k in z {
                if r.below(3) == 0 {
                    u += 1;
                    out.push(u);
                    out.push(u);
                } else {
                    out.push(k);
                }
            }
            out.truncate(n);
            out
        }
        "phases" => (0..n)
            .map(|i| {
                let ph = (i / (n / 5)) as u64;
                let z = r.f();
                let rank = ((cu as f64 * 3.0) * z.powf(3.0)) as u64;
                (ph << 40 | rank).wrapping_mul(H)
            })
            .collect(),
        "zigzag" => {
            let len = (c as f64 * 1.5) as u64;
            (0..n as u64)
                .map(|i| {
                    let p = i % (2 * len);
                    let k = if p < len { p } else { 2 * len - 1 - p };
                    k.wrapping_mul(H)
                })
                .collect()
        }
        "nested" => {
            let inner = cu / 2;
            let outer = cu * 2;
            let per = 3 * inner + outer;
            let mut s = 0u64;
            (0..n as u64)
                .map(|i| {
                    let p = i % per;
                    if p == 0 {
                        s += 1;
                    }
                    let k = if p < 3 * inner {
                        p % inner
                    } else {
                        (1 << 40) + (s * outer + p)
                    };
                    k.wrapping_mul(H)
                })
                .collect()
        }
        "alternate" => {
            let z = zipf_stream((cu * 8) / 10, 0.9, n, seed);
            z.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    let set = ((i as u64) / (5 * cu)) % 2;
                    ((set << 40) | k).wrapping_mul(H)
                })
                .collect()
        }
        "tenants" => {
            let zs: Vec<Vec<u64>> = (0..4)
                .map(|t| zipf_stream(cu * 10, 0.9, n, seed + t))
                .collect();
            let len = (c as f64 * 1.2) as u64;
            let mut j = 0u64;
            (0..n)
                .map(|i| {
                    let t = r.below(5);
                    if t == 4 {
                        j += 1;
                        (1u64 << 50) | (j % len)
                    } else {
                        (t << 44) | zs[t as usize][i]
                    }
                })
                .map(|k| k.wrapping_mul(H))
                .collect()
        }
        "cdn" => {
            let z = zipf_stream(cu * 200, 0.75, n, seed);
            let mut u = 1u64 << 58;
            z.into_iter()
                .map(|k| {
                    if r.below(10) < 3 {
                        u += 1;
                        u
                    } else {
                        k
                    }
                })
                .collect()
        }
        _ => panic!("{name}"),
    }
}

/// The families, in the order `policy_families` prints them.
pub const FAMILIES: [&str; 23] = [
    "zipf0.6",
    "zipf0.8",
    "zipf1.0",
    "zipf1.2",
    "onehit",
    "loop1.1",
    "loop1.25",
    "loop1.5",
    "loop2",
    "loop4",
    "loop+zipf",
    "2pools",
    "random2x",
    "sliding",
    "lrustack",
    "zipf+bigscan",
    "correlated",
    "phases",
    "zigzag",
    "nested",
    "alternate",
    "tenants",
    "cdn",
];

/// Families written on 2026-12-03, after the policy and its tunables,
/// first run before any change to see how `Adaptive` meets shapes it was
/// not set on (docs/cache.md, "Shapes held out"), and since used to judge
/// two changes, not kept: `policy_families` runs them with `HELD_OUT`
/// set.
pub const HELD_OUT: [&str; 10] = [
    "loop0.9",
    "twoloops",
    "growloop",
    "hotset",
    "files",
    "btree",
    "popshift",
    "scanloop",
    "burst3",
    "zipf0.7-3c",
];

/// `n` requests of held-out family `name` (one of [`HELD_OUT`]).
fn held_out(name: &str, c: usize, n: usize, seed: u64) -> Vec<u64> {
    let mut r = R(seed * 2654435761 + 999);
    let cu = c as u64;
    let keys: Vec<u64> = match name {
        // A loop that fits: every policy should keep all of it.
        "loop0.9" => (0..n as u64).map(|i| i % (cu * 9 / 10)).collect(),
        // Two programs interleaved at random: a loop of 0.6x the cache
        // (worth keeping whole) beside one of 2x (worth a share).
        "twoloops" => {
            let (a, b) = (cu * 6 / 10, cu * 2);
            let (mut i, mut j) = (0, 0);
            (0..n)
                .map(|_| {
                    if r.below(2) == 0 {
                        i += 1;
                        (i % a) | 1 << 60
                    } else {
                        j += 1;
                        (j % b) | 1 << 61
                    }
                })
                .collect()
        }
        // A loop that grows by a quarter at a time, from half the cache
        // to three times it over the trace (eight steps, the passes
        // between them about 13.4 caches' worth of requests in all).
        "growloop" => {
            let mut out = Vec::with_capacity(n);
            let every = (n as u64 / (14 * cu)).max(1);
            let (mut len, mut at, mut passes) = (cu / 2, 0, 0);
            while out.len() < n {
                out.push(at);
                at += 1;
                if at == len {
                    (at, passes) = (0, passes + 1);
                    if passes % every == 0 {
                        len = (len * 5 / 4).min(cu * 3);
                    }
                }
            }
            out
        }
        // 80% of requests to a hot set of half the cache, the rest
        // uniform over twenty caches' worth.
        "hotset" => (0..n)
            .map(|_| {
                if r.f() < 0.8 {
                    r.below(cu / 2)
                } else {
                    (1 << 40) + r.below(cu * 20)
                }
            })
            .collect(),
        // A file server: files drawn by Zipf 0.8 from 2000, each read
        // whole, of lengths exponential with a mean of a 50th of the
        // cache.
        "files" => {
            let z = zipf_stream(2000, 0.8, n, seed);
            let mut out = Vec::with_capacity(n);
            for f in z {
                if out.len() >= n {
                    break;
                }
                let len = 1 + (-r.f().max(1e-9).ln() * (c as f64 / 50.0)) as u64;
                out.extend((0..len).map(|b| ((f % 1_000_000) << 20) | b));
            }
            out.truncate(n);
            out
        }
        // A B-tree's pages: 30% to the inner nodes (a tenth of the
        // cache), 60% to leaves skewed by a log-uniform draw over ten
        // caches' worth, 10% to a hundred caches' worth at random.
        "btree" => (0..n)
            .map(|_| {
                let x = r.f();
                if x < 0.3 {
                    r.below(cu / 10)
                } else if x < 0.9 {
                    let leaf = ((cu * 10) as f64).powf(r.f()) as u64;
                    (1 << 40) + leaf.min(cu * 10 - 1)
                } else {
                    (1 << 41) + r.below(cu * 100)
                }
            })
            .collect(),
        // Zipf 0.9 over twenty caches' worth whose popular keys change
        // eight times over the trace.
        "popshift" => zipf_stream(cu * 20, 0.9, n, seed)
            .into_iter()
            .enumerate()
            .map(|(i, k)| k.wrapping_add((i / (n / 8).max(1)) as u64 * 7919))
            .collect(),
        // Zipf 0.9 over ten caches' worth, a third of the time (in runs
        // of 2000) a loop of three caches' worth.
        "scanloop" => {
            let mut s = 0u64;
            zipf_stream(cu * 10, 0.9, n, seed)
                .into_iter()
                .enumerate()
                .map(|(i, k)| {
                    if (i / 2000) % 3 == 0 {
                        s += 1;
                        (1 << 62) | (s % (cu * 3))
                    } else {
                        k
                    }
                })
                .collect()
        }
        // Zipf 0.9 over ten caches' worth, and at a third of the draws a
        // new key that comes back twice, within a quarter and a half of
        // the cache's worth of requests (about a fifth of the requests
        // are new keys).
        "burst3" => {
            let mut out = Vec::with_capacity(n);
            let mut new = 1u64 << 50;
            let mut due: Vec<(usize, u64)> = Vec::new();
            for (i, k) in zipf_stream(cu * 10, 0.9, n, seed).into_iter().enumerate() {
                if let Some(p) = due.iter().position(|&(t, _)| t <= i) {
                    out.push(due.swap_remove(p).1);
                } else if r.below(3) == 0 {
                    new += 1;
                    out.push(new);
                    due.push((i + 1 + r.below(cu / 4) as usize, new));
                    due.push((i + 1 + r.below(cu / 2) as usize, new));
                } else {
                    out.push(k);
                }
            }
            out
        }
        // A flat Zipf over three caches' worth.
        "zipf0.7-3c" => zipf_stream(cu * 3, 0.7, n, seed),
        _ => panic!("{name}"),
    };
    keys.into_iter().map(|k| k.wrapping_mul(H)).collect()
}

/// Families written after [`HELD_OUT`], each after a kind of trace none
/// of the others models, and first run before any change (docs/cache.md,
/// "A second held-out set"): `policy_families` runs them with
/// `HELD_OUT=2`.
pub const HELD_OUT_2: [&str; 7] = [
    "seqruns",
    "periodic",
    "multiprog",
    "kvchurn",
    "epochs",
    "rereads",
    "loopjitter",
];

/// [`SPREAD`](H)'s inverse modulo 2^64 (it is odd), by Newton's
/// iteration: a key times it is the key before the spread.
fn spread_inverse() -> u64 {
    (0..6).fold(H, |x, _| {
        x.wrapping_mul(2u64.wrapping_sub(H.wrapping_mul(x)))
    })
}

/// `n` ranks (from 0) drawn from Zipf(`keys`, `s`): [`zipf_stream`]'s
/// draws with [`SPREAD`](H) undone.
fn zipf_ranks(keys: u64, s: f64, n: usize, seed: u64) -> Vec<u64> {
    let inverse = spread_inverse();
    zipf_stream(keys, s, n, seed)
        .into_iter()
        .map(|k| k.wrapping_mul(inverse) - 1)
        .collect()
}

/// `n` requests of held-out family `name` (one of [`HELD_OUT_2`]).
fn held_out_2(name: &str, c: usize, n: usize, seed: u64) -> Vec<u64> {
    let mut r = R(seed * 2654435761 + 4242);
    let cu = c as u64;
    let keys: Vec<u64> = match name {
        // A block-storage volume: sequential runs from a random block of
        // an extent of 64 blocks (geometric of mean 16, cut at the
        // extent's end: about 12 on average), extents drawn by Zipf 0.8
        // from fifty caches' worth of blocks.
        "seqruns" => {
            let extents = (cu * 50 / 64).max(2);
            let z = zipf_ranks(extents, 0.8, n, seed);
            let mut out = Vec::with_capacity(n);
            for e in z {
                if out.len() >= n {
                    break;
                }
                let start = r.below(64);
                let mut b = start;
                loop {
                    out.push((e << 6) + b);
                    b += 1;
                    if b == 64 || r.below(16) == 0 {
                        break;
                    }
                }
            }
            out.truncate(n);
            out
        }
        // Keys each requested at a steady period of its own, jittered by
        // a tenth: four caches' worth of keys, their periods drawn
        // log-uniform from a quarter of the cache to sixteen caches' worth
        // of ticks of a clock on which all of them together make about
        // 3.8 requests a tick, so about one to sixty caches' worth of
        // requests; those of short period are the ones to keep.
        "periodic" => {
            use std::{cmp::Reverse, collections::BinaryHeap};
            let k = cu * 4;
            let (lo, hi) = ((c as f64 / 4.0).max(1.0), c as f64 * 16.0);
            let mut due = BinaryHeap::new();
            for key in 0..k {
                let p = lo * (hi / lo).powf(r.f());
                let first = (r.f() * p) as u64;
                due.push(Reverse((first, key, p.to_bits())));
            }
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                let Reverse((t, key, p)) = due.pop().expect("keys are never dropped");
                out.push(key);
                let p = f64::from_bits(p);
                let next = t + (p * (0.9 + 0.2 * r.f())).max(1.0) as u64;
                due.push(Reverse((next, key, p.to_bits())));
            }
            out
        }
        // Three programs sharing the cache in time slices of 1000
        // requests, round robin: a loop of 0.7x the cache, Zipf 1.0
        // over five caches' worth, and a stream of keys never seen
        // again.
        "multiprog" => {
            let z = zipf_stream(cu * 5, 1.0, n, seed);
            let (mut at, mut new) = (0u64, 0u64);
            (0..n)
                .map(|i| match (i / 1000) % 3 {
                    0 => {
                        at += 1;
                        (1 << 60) | (at % (cu * 7 / 10))
                    }
                    1 => z[i],
                    _ => {
                        new += 1;
                        (1 << 61) | new
                    }
                })
                .collect()
        }
        // A key-value store whose keys churn: Zipf 1.0 over ten caches'
        // worth of popularity ranks, and each request replaces its rank's
        // key with a new one at a chance of 1 in 50, so that popularity
        // lasts and the keys that carry it do not.
        "kvchurn" => {
            let mut generation = vec![0u64; (cu * 10) as usize];
            zipf_ranks(cu * 10, 1.0, n, seed)
                .into_iter()
                .map(|rank| {
                    let g = &mut generation[rank as usize];
                    let key = (*g << 32) | rank;
                    if r.below(50) == 0 {
                        *g += 1;
                    }
                    key
                })
                .collect()
        }
        // Training epochs over a dataset of three caches' worth, each
        // epoch in a fresh random order.
        "epochs" => {
            let mut order: Vec<u64> = (0..cu * 3).collect();
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                for i in (1..order.len()).rev() {
                    order.swap(i, r.below(i as u64 + 1) as usize);
                }
                out.extend_from_slice(&order);
            }
            out.truncate(n);
            out
        }
        // Short-term rereads: half the requests repeat the key of one of
        // the last 16 requests, the others Zipf 0.8 over twenty caches'
        // worth.
        "rereads" => {
            let z = zipf_stream(cu * 20, 0.8, n, seed);
            let mut last = [0u64; 16];
            z.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    let key = if i >= 16 && r.below(2) == 0 {
                        last[r.below(16) as usize]
                    } else {
                        k
                    };
                    last[i % 16] = key;
                    key
                })
                .collect()
        }
        // A loop of 1.3x the cache that a program runs imperfectly: each
        // pass skips a tenth of its keys at random, and at one step in
        // twenty (about one request in eighteen, skipped steps making
        // none) the request is a key outside it, drawn from fifty
        // caches' worth.
        "loopjitter" => {
            let len = cu * 13 / 10;
            let mut out = Vec::with_capacity(n);
            let mut at = 0;
            while out.len() < n {
                if r.below(20) == 0 {
                    out.push((1 << 60) | r.below(cu * 50));
                    continue;
                }
                if r.below(10) != 0 {
                    out.push(at);
                }
                at = (at + 1) % len;
            }
            out
        }
        _ => panic!("{name}"),
    };
    keys.into_iter().map(|k| k.wrapping_mul(H)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks are Zipf's draws, from 0 and below `keys`, the lowest
    /// the most requested: the spreading hash is undone.
    #[test]
    fn zipf_ranks_undo_the_spread() {
        let ranks = zipf_ranks(100, 1.0, 10_000, 3);
        assert!(ranks.iter().all(|&r| r < 100));
        let count = |k| ranks.iter().filter(|&&r| r == k).count();
        assert!(count(0) > count(1) && count(1) > count(50));
    }

    /// The keys a family gave, before [`SPREAD`](H).
    fn unspread(t: &[u64]) -> Vec<u64> {
        let inverse = spread_inverse();
        t.iter().map(|k| k.wrapping_mul(inverse)).collect()
    }

    /// Every family of the second held-out set gives `n` requests, and
    /// none is one key.
    #[test]
    fn held_out_2_families_fill_their_length() {
        for name in HELD_OUT_2 {
            let t = family(name, 100, 5_000, 1);
            assert_eq!(t.len(), 5_000, "{name}");
            assert!(t.iter().any(|&k| k != t[0]), "{name}");
        }
    }

    /// The second held-out set's families have the shapes their comments
    /// give, at a cache of 200 (the share of outside keys, of rereads, the
    /// runs' mean length, the periods in requests, each epoch a
    /// permutation, each time slice its program's).
    #[test]
    fn held_out_2_families_have_their_shapes() {
        let (c, n) = (200u64, 400_000);
        let share = |t: &[u64], f: &dyn Fn(usize) -> bool| {
            (0..t.len()).filter(|&i| f(i)).count() as f64 / t.len() as f64
        };

        let t = unspread(&family("loopjitter", c as usize, n, 1));
        let outside = share(&t, &|i| t[i] >> 60 == 1);
        assert!((0.052..0.058).contains(&outside), "loopjitter: {outside}");

        let t = unspread(&family("rereads", c as usize, n, 1));
        let reread = share(&t, &|i| i >= 16 && t[i - 16..i].contains(&t[i]));
        assert!((0.5..0.56).contains(&reread), "rereads: {reread}");

        let t = unspread(&family("seqruns", c as usize, n, 1));
        let starts = 1.0 + share(&t, &|i| i > 0 && t[i] != t[i - 1] + 1) * n as f64;
        let mean = n as f64 / starts;
        assert!((11.5..13.5).contains(&mean), "seqruns: runs of {mean}");

        let t = unspread(&family("periodic", c as usize, n, 1));
        let mut seen = std::collections::HashMap::new();
        for (i, &k) in t.iter().enumerate() {
            let e = seen.entry(k).or_insert((i, i, 0usize));
            (e.1, e.2) = (i, e.2 + 1);
        }
        let mut gaps: Vec<f64> = seen
            .values()
            .filter(|e| e.2 >= 3)
            .map(|&(first, last, count)| (last - first) as f64 / (count - 1) as f64 / c as f64)
            .collect();
        gaps.sort_by(f64::total_cmp);
        let (low, high) = (gaps[0], gaps[gaps.len() - 1]);
        assert!(
            (0.7..1.3).contains(&low),
            "periodic: shortest period {low} caches"
        );
        assert!(
            (40.0..80.0).contains(&high),
            "periodic: longest period {high} caches"
        );

        let t = unspread(&family("epochs", c as usize, n, 1));
        for epoch in t.chunks_exact(3 * c as usize) {
            let mut e = epoch.to_vec();
            e.sort_unstable();
            assert!(e.iter().copied().eq(0..3 * c), "epochs: not a permutation");
        }

        let t = unspread(&family("multiprog", c as usize, n, 1));
        for (i, &k) in t.iter().enumerate() {
            let tag = k >> 60;
            match (i / 1000) % 3 {
                0 => assert_eq!(tag, 1, "multiprog: request {i} outside the loop"),
                2 => assert_eq!(tag, 2, "multiprog: request {i} not a new key"),
                _ => {}
            }
        }
    }
}
