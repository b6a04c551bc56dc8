//! The second held-out set (2026-12-04): seven families, each after a
//! kind of trace none of the others models, first run before any change.

use super::R;
use crate::cache::{SPREAD as H, zipf_ranks, zipf_stream};

/// Families written after [`HELD_OUT`](super::HELD_OUT), each after a
/// kind of trace none of the others models, and first run before any
/// change (docs/cache.md, "A second held-out set"): `policy_families`
/// runs them with `HELD_OUT=2`.
pub const HELD_OUT_2: [&str; 7] = [
    "seqruns",
    "periodic",
    "multiprog",
    "kvchurn",
    "epochs",
    "rereads",
    "loopjitter",
];

/// `n` requests of held-out family `name` (one of [`HELD_OUT_2`]).
pub(super) fn held_out_2(name: &str, c: usize, n: usize, seed: u64) -> Vec<u64> {
    let mut r = R(seed * 2654435761 + 4242);
    let cu = c as u64;
    let keys: Vec<u64> = match name {
        // A block-storage volume: sequential runs from a random block of
        // an extent of 64 blocks (geometric of mean 16, cut at the
        // extent's end: about 12 on average), extents drawn by Zipf 0.8
        // from fifty caches' worth of blocks.
        "seqruns" => {
            let extents = (cu * 50 / 64).max(2);
            let z = zipf_ranks(extents, 0.8, n, seed).into_iter().map(|e| e - 1);
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
                .map(|rank| rank - 1)
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
    use crate::cache_hits::families::family;

    /// [`SPREAD`](H)'s inverse modulo 2^64 (it is odd), by Newton's
    /// iteration: a key times it is the key before the spread.
    fn spread_inverse() -> u64 {
        (0..6).fold(H, |x, _| {
            x.wrapping_mul(2u64.wrapping_sub(H.wrapping_mul(x)))
        })
    }

    #[test]
    fn spread_inverse_undoes_the_spread() {
        for k in [0, 1, 2, 12345, u64::MAX] {
            assert_eq!(k.wrapping_mul(H).wrapping_mul(spread_inverse()), k);
        }
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
