//! The synthetic trace shapes.

use rand::{RngExt, SeedableRng, rngs::SmallRng};

use crate::cache::{with_scans, zipf_stream};

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

    /// The row-name part.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Zipf => "zipf0.9",
            Shape::ZipfScan => "zipf0.9-scan",
            Shape::Loop => "loop1.25x",
            Shape::LoopNoise => "loop1.25x-noise",
            Shape::Shifting => "shifting",
            Shape::HotCold => "hot-cold",
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
        }
    }

    /// `n` requests of this shape over `keys` keys for a cache of
    /// `capacity`.
    pub fn trace(self, keys: u64, capacity: usize, n: usize, seed: u64) -> Vec<u64> {
        /// Multiplying by this odd constant is a bijection on u64.
        const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;
        match self {
            Shape::Zipf => zipf_stream(keys, 0.9, n, seed),
            Shape::ZipfScan => with_scans(&zipf_stream(keys, 0.9, n, seed), 0),
            Shape::Loop | Shape::LoopNoise => {
                let len = (capacity as u64 * 5 / 4).max(1);
                let noise = if self == Shape::LoopNoise { 0.01 } else { 0.0 };
                let mut rng = SmallRng::seed_from_u64(seed);
                (0..n as u64)
                    .map(|i| {
                        if noise > 0.0 && rng.random_bool(noise) {
                            len + rng.random_range(0..keys.max(1))
                        } else {
                            i % len
                        }
                    })
                    .collect()
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
