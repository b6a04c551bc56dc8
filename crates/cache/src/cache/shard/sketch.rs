//! TinyLFU's frequency sketch (Einziger, Friedman and Manes, "TinyLFU: A
//! Highly Efficient Cache Admission Policy", ACM TOS 2017): how often a
//! key was seen lately, estimated in half a byte a counter.

/// A count-min sketch of 4-bit counters, blocked as Caffeine's
/// `FrequencySketch` is: each key's four counters lie in one 64-byte
/// block (one cache line: an update costs one miss, not four), one in
/// each of four pairs of its words, sixteen counters to a word; a key is
/// estimated by the least of its four. Every counter halves once the
/// sketch has counted `period` keys, so that counts say how often a key
/// was seen lately rather than ever (TinyLFU's reset).
pub(super) struct Sketch {
    blocks: Vec<Block>,
    /// Counts since the last halving.
    added: u32,
    /// Counts between halvings: ten per entry the sketch is sized for, as
    /// TinyLFU samples ten times the cache (longer remembers popularity
    /// that has moved on; shorter forgets a loop between its turns).
    period: u32,
}

/// Eight words of sixteen 4-bit counters, on a cache line of their own.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Block([u64; 8]);

/// Entries a block serves: 128 counters, four an entry (2 bytes).
const ENTRIES_PER_BLOCK: usize = 32;

/// A counter's ceiling (4 bits).
const MAX: u8 = 15;

impl Sketch {
    /// A sketch for a shard of `entries` entries (at least 32): four
    /// counters an entry, 2 bytes.
    pub(super) fn new(entries: usize) -> Self {
        let blocks = entries.clamp(1, 1 << 28).div_ceil(ENTRIES_PER_BLOCK);
        Self {
            blocks: vec![Block::default(); blocks],
            added: 0,
            // At most 10 x 2^28, under 2^32: fits.
            period: (blocks * ENTRIES_PER_BLOCK * 10) as u32,
        }
    }

    /// Entries the sketch is sized for.
    fn entries(&self) -> usize {
        self.blocks.len() * ENTRIES_PER_BLOCK
    }

    /// Makes room for a shard grown to `entries` entries, of at most
    /// `most`: a sketch too small for them starts over (counts are hints),
    /// twice as large or as large as `most`, whichever is less. Sized as
    /// the shard fills, not from its bound: a cache that never fills
    /// allocates little, and a weighted cache's bound is its capacity in
    /// weight (bytes, say).
    #[inline]
    pub(super) fn fit(&mut self, entries: usize, most: usize) {
        if entries > self.entries() {
            self.grow(entries, most);
        }
    }

    /// [`fit`](Self::fit)'s rare half: a new sketch, unless at the most.
    #[cold]
    fn grow(&mut self, entries: usize, most: usize) {
        let now = self.entries();
        if now < 1 << 28 {
            *self = Self::new(entries.max((2 * now).min(most)));
        }
    }

    /// The key of short hash `h`'s four counters: its block, and in it
    /// each counter's word and bit shift (one in each pair of words).
    #[inline]
    fn slots(&self, h: u32) -> (usize, [(usize, u32); 4]) {
        let spread = h.wrapping_mul(0x9e37_79b1);
        // Lemire's multiply-shift onto the blocks, from the high bits.
        let block = ((u64::from(spread) * self.blocks.len() as u64) >> 32) as usize;
        // Another mix for the counters: a byte each.
        let c = counter_hash(h);
        let slot = |i: u32| {
            let byte = c >> (i * 8);
            // `& 7`: a word of the block, which the compiler sees (no
            // bounds check).
            (((2 * i + (byte & 1)) & 7) as usize, ((byte >> 1) & 15) * 4)
        };
        (block, [slot(0), slot(1), slot(2), slot(3)])
    }

    /// The four counters at `slots` in `words`.
    #[inline]
    fn counts(words: &[u64; 8], slots: &[(usize, u32); 4]) -> [u8; 4] {
        let count = |(w, shift): (usize, u32)| (words[w] >> shift) as u8 & 0xf;
        [
            count(slots[0]),
            count(slots[1]),
            count(slots[2]),
            count(slots[3]),
        ]
    }

    /// The least of four counts.
    #[inline]
    fn least(c: [u8; 4]) -> u8 {
        c[0].min(c[1]).min(c[2].min(c[3]))
    }

    /// How often the key of short hash `h` was counted lately (at most
    /// 15): never less than its true count since the last halving, more
    /// only where all four of its counters are shared.
    pub(super) fn estimate(&self, h: u32) -> u8 {
        let (b, slots) = self.slots(h);
        Self::least(Self::counts(&self.blocks[b].0, &slots))
    }

    /// Counts the key of short hash `h` once: only the counters at its
    /// estimate grow (the conservative update, which keeps other keys'
    /// estimates from rising with it), and every counter halves each
    /// `period` counts.
    pub(super) fn add(&mut self, h: u32) {
        let (b, slots) = self.slots(h);
        let words = &mut self.blocks[b].0;
        let counts = Self::counts(words, &slots);
        let least = Self::least(counts);
        if least >= MAX {
            return;
        }
        // Raised without a branch (which counter is least is a coin's
        // toss): each lies in a word of its own, so the counts read above
        // stay current.
        for i in 0..4 {
            let (w, shift) = slots[i];
            words[w] += u64::from(counts[i] == least) << shift;
        }
        self.added += 1;
        if self.added >= self.period {
            self.halve();
        }
    }

    /// Halves every counter (TinyLFU's reset).
    fn halve(&mut self) {
        for b in &mut self.blocks {
            for w in &mut b.0 {
                *w = (*w >> 1) & 0x7777_7777_7777_7777;
            }
        }
        self.added /= 2;
    }

    /// The sketch's bytes.
    #[cfg(all(test, not(mmbatch_loom)))]
    pub(super) fn bytes(&self) -> usize {
        self.blocks.len() * 64
    }
}

/// The bits that place a key's counters in its block, mixed apart from
/// those that chose the block.
fn counter_hash(h: u32) -> u32 {
    (h ^ (h >> 15)).wrapping_mul(0x2c1b_3c6d).rotate_left(13)
}

#[cfg(all(test, not(mmbatch_loom)))]
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
        // 200 keys in 1024 counters: few share all four.
        assert!(over < 20, "{over} of 200 overestimated");
    }

    #[test]
    fn few_keys_share_all_four_counters() {
        // 2000 keys counted once in a sketch of 4096 entries (16 Ki
        // counters): about 1 in 300 has all four shared, with short
        // hashes as the cache makes them and with consecutive ones.
        for spread in [0x9e37_79b9u32, 1] {
            let mut s = Sketch::new(4096);
            let keys = (1..=2000u32).map(|k| k.wrapping_mul(spread));
            keys.clone().for_each(|h| s.add(h));
            let over = keys.filter(|&h| s.estimate(h) > 1).count();
            assert!(
                over <= 20,
                "{over} of 2000 overestimated (spread {spread:#x})"
            );
        }
    }

    #[test]
    fn a_keys_counters_are_four_in_one_block() {
        let s = Sketch::new(1 << 12);
        for h in [0u32, 1, 7, 0xdead_beef, u32::MAX] {
            let (b, slots) = s.slots(h);
            assert!(b < s.blocks.len());
            for (i, &(w, shift)) in slots.iter().enumerate() {
                assert_eq!(w / 2, i, "row {i} in its pair of words");
                assert!(shift <= 60 && shift % 4 == 0);
            }
        }
    }

    #[test]
    fn every_counter_halves_after_ten_counts_an_entry() {
        let mut s = Sketch::new(64);
        assert_eq!(s.period, 640, "ten counts an entry");
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
        assert_eq!(s.bytes(), 64);
        s.add(1);
        s.fit(32, 600);
        assert_eq!((s.bytes(), s.estimate(1)), (64, 1), "room enough");
        s.fit(33, 600);
        assert_eq!(
            (s.bytes(), s.estimate(1)),
            (128, 0),
            "afresh, twice as large"
        );
        assert_eq!(s.period, 640);
        for n in [65, 129, 257] {
            s.fit(n, 600);
        }
        assert_eq!(s.bytes(), 2 * 512);
        s.fit(513, 600);
        assert_eq!(s.bytes(), 2 * 608, "no larger than the shard's bound");
        s.fit(600, 600);
        assert_eq!(s.bytes(), 2 * 608);
        let mut big = Sketch::new(0);
        big.fit(10_000, usize::MAX);
        assert_eq!(
            big.bytes(),
            2 * 10_016,
            "past twice: as large as the entries"
        );
    }

    #[test]
    fn two_bytes_an_entry() {
        assert_eq!(Sketch::new(1 << 16).bytes(), 2 << 16);
        assert_eq!(Sketch::new(1000).bytes(), 2 * 1024);
        assert_eq!(Sketch::new(1).bytes(), 64);
    }
}
