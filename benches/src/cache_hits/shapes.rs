//! The synthetic trace shapes.

use rand::{RngExt, SeedableRng, rngs::SmallRng};

use crate::cache::{with_scans, zipf_stream};

/// `n` requests of a loop over keys `0..len`, a share `noise` of them to
/// random keys of `len..len + keys` instead.
fn loop_requests(len: u64, noise: f64, keys: u64, n: u64, rng: &mut SmallRng) -> Vec<u64> {
    (0..n)
        .map(|i| {
            if noise > 0.0 && rng.random_bool(noise) {
                len + rng.random_range(0..keys.max(1))
            } else {
                i % len
            }
        })
        .collect()
}

/// A synthetic trace shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Zipf 0.9.
    Zipf,
    /// Zipf 0.9 with 25% one-off scans.
    ZipfScan,
    /// A loop over 1.25 × capacity keys.
    Loop,
    /// The same loop with 1% of requests to random other keys.
    LoopNoise,
    /// Zipf 0.9 over a key set replaced each quarter.
    Shifting,
    /// 25% of requests to capacity / 2 hot keys, 75% to the rest.
    HotCold,
    /// A loop over 3 × capacity keys (not judged: see [`Shape::EXTRA`]).
    Loop3x,
    /// A loop over 2 × capacity keys with 1% of requests to random other
    /// keys (not judged).
    Loop2xNoise,
    /// A quarter of other requests (half to capacity / 2 hot keys, half
    /// to the rest), then a loop over 2 × capacity keys with 1% of
    /// requests to random other keys (not judged).
    LoopAfter,
    /// A power law over 4 × capacity ranks whose keys slide by one every
    /// 20 requests: a key grows hotter as the ranks slide towards it, and
    /// once past the hottest is never requested again (not judged;
    /// recency pays).
    Sliding,
    /// The LRU stack model: 85% of requests re-reference a key at a
    /// stack depth drawn from an exponential of mean capacity / 2 (a new
    /// key if the stack is not that deep), the rest a new key (not
    /// judged; recency pays).
    LruStack,
    /// Bursts of 1000 requests taking turns: a loop over 1.5 × capacity
    /// keys, and Zipf 0.9 over the keys (not judged; two programs
    /// interleaved, as in the LIRS paper's multi traces).
    LoopZipf,
}

impl Shape {
    /// Every shape, in table order.
    pub const ALL: [Shape; 6] = [
        Shape::Zipf,
        Shape::ZipfScan,
        Shape::Loop,
        Shape::LoopNoise,
        Shape::Shifting,
        Shape::HotCold,
    ];

    /// Shapes beyond the list, reported but not judged: where
    /// `LruCache`'s policies lose or have lost (a loop twice the cache with
    /// noise, which its shards did not see thrashing until the bound went
    /// from 0.8 to 0.6, a loop too large for the shadows to see it come
    /// round, and a loop that begins after other requests filled the
    /// active list).
    pub const EXTRA: [Shape; 6] = [
        Shape::Loop2xNoise,
        Shape::Loop3x,
        Shape::LoopAfter,
        Shape::Sliding,
        Shape::LruStack,
        Shape::LoopZipf,
    ];

    /// The row-name part.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Zipf => "zipf0.9",
            Shape::ZipfScan => "zipf0.9-scan",
            Shape::Loop => "loop1.25x",
            Shape::LoopNoise => "loop1.25x-noise",
            Shape::Shifting => "shifting",
            Shape::HotCold => "hot-cold",
            Shape::Loop3x => "loop3x",
            Shape::Loop2xNoise => "loop2x-noise",
            Shape::LoopAfter => "loop2x-after-other",
            Shape::Sliding => "sliding",
            Shape::LruStack => "lru-stack",
            Shape::LoopZipf => "loop1.5x-zipf",
        }
    }

    /// For table titles.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Zipf => "Zipf s=0.9",
            Shape::ZipfScan => "Zipf s=0.9 + 25% one-off scans",
            Shape::Loop => "loop over 1.25x capacity",
            Shape::LoopNoise => "loop over 1.25x capacity, 1% of requests to random other keys",
            Shape::Shifting => "Zipf s=0.9, key set replaced each quarter",
            Shape::HotCold => "25% to a hot set of capacity/2, 75% uniform over the rest",
            Shape::Loop3x => "loop over 3x capacity",
            Shape::Loop2xNoise => "loop over 2x capacity, 1% of requests to random other keys",
            Shape::LoopAfter => {
                "a quarter of other requests (half to a hot set of capacity/2), then a loop over \
                 2x capacity with 1% of requests to random other keys"
            }
            Shape::Sliding => {
                "a power law over 4x capacity ranks, each rank's key moving on by one every 20 \
                 requests"
            }
            Shape::LruStack => {
                "LRU stack model: 85% re-references at an exponential depth of mean capacity/2, \
                 15% new keys"
            }
            Shape::LoopZipf => {
                "bursts of 1000 requests in turn: a loop over 1.5x capacity, Zipf s=0.9"
            }
        }
    }

    /// `n` requests of this shape over `keys` keys for a cache of
    /// `capacity`.
    pub fn trace(self, keys: u64, capacity: usize, n: usize, seed: u64) -> Vec<u64> {
        use crate::cache::SPREAD;
        match self {
            Shape::Zipf => zipf_stream(keys, 0.9, n, seed),
            Shape::ZipfScan => with_scans(&zipf_stream(keys, 0.9, n, seed), 0),
            Shape::Loop | Shape::LoopNoise | Shape::Loop3x | Shape::Loop2xNoise => {
                let len = match self {
                    Shape::Loop3x => capacity as u64 * 3,
                    Shape::Loop2xNoise => capacity as u64 * 2,
                    _ => capacity as u64 * 5 / 4,
                }
                .max(1);
                let noise = if matches!(self, Shape::LoopNoise | Shape::Loop2xNoise) {
                    0.01
                } else {
                    0.0
                };
                loop_requests(
                    len,
                    noise,
                    keys,
                    n as u64,
                    &mut SmallRng::seed_from_u64(seed),
                )
            }
            Shape::LoopAfter => {
                let mut rng = SmallRng::seed_from_u64(seed);
                let (before, hot) = (n / 4, (capacity as u64 / 2).max(1));
                let len = (capacity as u64 * 2).max(1);
                // Keys from `len + keys` on: none of the loop's or its
                // noise's.
                let other = len + keys;
                let mut t: Vec<u64> = (0..before)
                    .map(|_| {
                        other
                            + if rng.random_bool(0.5) {
                                rng.random_range(0..hot)
                            } else {
                                rng.random_range(hot..hot + keys.max(1))
                            }
                    })
                    .collect();
                t.extend(loop_requests(
                    len,
                    0.01,
                    keys,
                    (n - before) as u64,
                    &mut rng,
                ));
                t
            }
            Shape::Shifting => {
                // Rank r in quarter q is key (r + q × keys) × SPREAD:
                // disjoint key sets.
                let quarter = n.div_ceil(4).max(1);
                zipf_stream(keys, 0.9, n, seed)
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| {
                        k.wrapping_add(((i / quarter) as u64 * keys).wrapping_mul(SPREAD))
                    })
                    .collect()
            }
            Shape::Sliding => {
                let mut rng = SmallRng::seed_from_u64(seed);
                let ranks = 4.0 * capacity as f64;
                (0..n)
                    .map(|i| {
                        let u: f64 = rng.random();
                        ((ranks * u * u * u) as u64 + i as u64 / 20).wrapping_mul(SPREAD)
                    })
                    .collect()
            }
            Shape::LruStack => {
                let mut rng = SmallRng::seed_from_u64(seed);
                // The stack, most recent last; trimmed from 8x to 7x the
                // cache (deeper re-references are rare: e^-14).
                let mut stack: Vec<u64> = Vec::new();
                let mut new = 0u64;
                (0..n)
                    .map(|_| {
                        let depth = rng.random_bool(0.85).then(|| {
                            let u: f64 = rng.random();
                            (-(1.0 - u).ln() * capacity as f64 / 2.0) as usize
                        });
                        // A depth past the stack (early on, or past the
                        // trim) is a key never seen, not the oldest one.
                        let k = match depth.filter(|&d| d < stack.len()) {
                            Some(d) => stack.remove(stack.len() - 1 - d),
                            None => {
                                new += 1;
                                new
                            }
                        };
                        stack.push(k);
                        if stack.len() > 8 * capacity.max(1) {
                            stack.drain(..capacity.max(1));
                        }
                        k.wrapping_mul(SPREAD)
                    })
                    .collect()
            }
            Shape::LoopZipf => {
                let len = (capacity as u64 * 3 / 2).max(1);
                let mut next = 0u64;
                zipf_stream(keys, 0.9, n, seed)
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| {
                        if (i / 1000) % 2 == 0 {
                            next += 1;
                            // Past Zipf's ranks (1..=keys, spread alike).
                            (keys + 1 + next % len).wrapping_mul(SPREAD)
                        } else {
                            k
                        }
                    })
                    .collect()
            }
            Shape::HotCold => {
                let hot = (capacity as u64 / 2).max(1);
                let mut rng = SmallRng::seed_from_u64(seed);
                (0..n)
                    .map(|_| {
                        let k = if rng.random_bool(0.25) {
                            rng.random_range(0..hot)
                        } else {
                            rng.random_range(hot..keys.max(hot + 1))
                        };
                        k.wrapping_mul(SPREAD)
                    })
                    .collect()
            }
        }
    }
}
