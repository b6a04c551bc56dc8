//! TinyLFU's frequency sketch (Einziger, Friedman and Manes, "TinyLFU: A
//! Highly Efficient Cache Admission Policy", ACM TOS 2017): how often a
//! key was seen lately, estimated in half a byte a counter.

/// A count-min sketch of 4-bit counters: four rows of `width` counters,
/// sixteen to a word, each key counted in one counter of each row and
/// estimated by the least of its four; every counter halves once the
/// sketch has counted `period` keys, so that counts say how often a key
/// was seen lately rather than ever (TinyLFU's reset).
pub(super) struct Sketch {
    words: Vec<u64>,
    /// `width - 1`: a row's counters are a power of two.
    mask: u32,
    /// Counts since the last halving.
    added: u32,
    /// Counts between halvings: ten per entry of the shard, as TinyLFU
    /// samples ten times the cache (longer remembers popularity that has
    /// moved on; shorter forgets a loop between its turns).
    period: u32,
}

/// A counter's ceiling (4 bits).
const MAX: u8 = 15;

/// Each row's multiplier, to draw its own counter from the key's hash.
const SEEDS: [u32; 4] = [0x9e37_79b1, 0x85eb_ca77, 0xc2b2_ae3d, 0x27d4_eb2f];

impl Sketch {
    /// A sketch for a shard of `entries` entries: one counter a row per
    /// entry (a power of two, at least 16), 2 bytes an entry in all.
    pub(super) fn new(entries: usize) -> Self {
        let entries = entries.clamp(16, 1 << 28);
        let width = entries.next_power_of_two();
        Self {
            words: vec![0; width * 4 / 16],
            mask: (width - 1) as u32,
            added: 0,
            // At most 2^31: fits.
            period: (entries * 10) as u32,
        }
    }

    /// Makes room for a shard grown to `entries` entries: a sketch too
    /// narrow for them starts over at their size (counts are hints). Sized
    /// from the shard's entries, not its bound: a weighted cache's bound
    /// defaults to its capacity in weight (bytes, say).
    pub(super) fn fit(&mut self, entries: usize) {
        if entries > self.mask as usize + 1 && self.mask < (1 << 28) - 1 {
            *self = Self::new(entries);
        } else {
            // Ten counts an entry between halvings, as the shard fills.
            self.period = self.period.max((entries.min(1 << 28) * 10) as u32);
        }
    }

    /// Row `row`'s counter of short hash `h`: its word and bit shift.
    fn slot(&self, h: u32, row: usize) -> (usize, u32) {
        let mixed = h.wrapping_mul(SEEDS[row]);
        // The high bits, which the multiply mixes best.
        let i = (mixed >> 16 ^ mixed).rotate_right(7) & self.mask;
        let at = row * (self.mask as usize + 1) + i as usize;
        (at / 16, (at % 16) as u32 * 4)
    }

    fn get(&self, (word, shift): (usize, u32)) -> u8 {
        (self.words[word] >> shift) as u8 & 0xf
    }

    /// How often the key of short hash `h` was counted lately (at most
    /// 15): never less than its true count since the last halving, more
    /// only where all four of its counters are shared.
    pub(super) fn estimate(&self, h: u32) -> u8 {
        (0..4).map(|r| self.get(self.slot(h, r))).min().unwrap_or(0)
    }

    /// Counts the key of short hash `h` once: only the counters at its
    /// estimate grow (the conservative update, which keeps other keys'
    /// estimates from rising with it), and every counter halves each
    /// `period` counts.
    pub(super) fn add(&mut self, h: u32) {
        let slots = [0, 1, 2, 3].map(|r| self.slot(h, r));
        let least = slots.iter().map(|&s| self.get(s)).min().unwrap_or(0);
        if least >= MAX {
            return;
        }
        for (word, shift) in slots {
            if self.get((word, shift)) == least {
                self.words[word] += 1 << shift;
            }
        }
        self.added += 1;
        if self.added >= self.period {
            self.halve();
        }
    }

    /// Halves every counter (TinyLFU's reset).
    fn halve(&mut self) {
        for w in &mut self.words {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
        self.added /= 2;
    }

    /// The sketch's bytes.
    #[cfg(all(test, not(loom)))]
    pub(super) fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_estimated_at_its_count_up_to_the_ceiling() {
        let mut s = Sketch::new(1024);
        for n in 1..=20u8 {
            s.add(7);
            assert_eq!(s.estimate(7), n.min(MAX));
        }
        assert_eq!(s.estimate(8), 0, "a key never counted");
    }

    #[test]
    fn counts_of_many_keys_are_never_underestimated() {
        let mut s = Sketch::new(256);
        // Fewer counts than a period: no halving.
        for k in 0..200u32 {
            for _ in 0..(k % 5) {
                s.add(k.wrapping_mul(0x2545_f491));
            }
        }
        let mut over = 0;
        for k in 0..200u32 {
            let e = s.estimate(k.wrapping_mul(0x2545_f491));
            assert!(e >= (k % 5) as u8, "key {k}: {e}");
            over += usize::from(e > (k % 5) as u8);
        }
        // 200 keys in 256 counters a row: few share all four.
        assert!(over < 20, "{over} of 200 overestimated");
    }

    #[test]
    fn every_counter_halves_after_ten_counts_an_entry() {
        let mut s = Sketch::new(64);
        assert_eq!(s.period, 640);
        for _ in 0..12 {
            s.add(1);
        }
        s.add(2);
        s.added = s.period - 1;
        // The period's last count: 13, then every counter halves.
        s.add(1);
        assert_eq!((s.estimate(1), s.estimate(2)), (6, 0));
        assert_eq!(s.added, s.period / 2);
    }

    #[test]
    fn a_sketch_grows_with_its_shard() {
        let mut s = Sketch::new(0);
        assert_eq!(s.bytes(), 2 * 16);
        s.add(1);
        s.fit(16);
        assert_eq!((s.bytes(), s.estimate(1)), (2 * 16, 1), "room enough");
        assert_eq!(s.period, 160);
        s.fit(17);
        assert_eq!((s.bytes(), s.estimate(1)), (2 * 32, 0), "afresh, wider");
        assert_eq!(s.period, 170);
        s.fit(30);
        assert_eq!((s.bytes(), s.period), (2 * 32, 300), "the period grows");
    }

    #[test]
    fn two_bytes_an_entry() {
        assert_eq!(Sketch::new(1 << 16).bytes(), 2 << 16);
        assert_eq!(Sketch::new(1000).bytes(), 2 * 1024);
        assert_eq!(Sketch::new(1).bytes(), 2 * 16);
    }
}
