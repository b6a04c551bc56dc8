//! When owners' reads may skip their barrier: once a lock has gone without
//! a write for a wait that each lock learns ([`Spell`]). Not under loom,
//! whose models set the mode themselves (a clock would make replays
//! differ).

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// How long a lock must go without a write, as its readers see it, before
/// owners' reads skip their barrier, at the least: 2 ms. The write that
/// ends such a spell pays a heavy barrier (more on a host with many CPUs,
/// each of which it interrupts), so each lock learns its own wait
/// ([`Spell`]), up to [`QUIET_MAX_NS`].
const QUIET_NS: u64 = 2_000_000;

/// The longest wait for quiet a lock learns: 1 s.
const QUIET_MAX_NS: u64 = 1_000_000_000;

/// The wait of a lock that never goes fast (`Builder::fast_reads(false)`).
const NEVER: u64 = u64::MAX;

/// A fast spell pays for the heavy barrier that ends it if it lasted this
/// many times the barrier's own time (its cost is then under 0.1%).
const SPELL_PAYS: u64 = 1000;

/// A lock's writes and fast spells: how long it waits for quiet before
/// the next spell, and since when the current one runs. A spell too short
/// to pay for its heavy barrier doubles the wait, one four times long
/// enough halves it: a lock written every few milliseconds stops going
/// fast after a few spells (each write would have paid a barrier), one
/// read for long stretches keeps going fast at the least wait.
pub(super) struct Spell {
    /// Writes so far, counted by the writer holding `block` (in the line
    /// it has just written).
    writes: AtomicUsize,
    quiet_ns: AtomicU64,
    since: AtomicU64,
    /// Spells ended (each by one heavy barrier).
    #[cfg(test)]
    pub(super) ended: AtomicU64,
}

/// What a stripe's lookups saw at their last look for quiet: the lock's
/// writes, and since when (nanoseconds from [`now`]'s start) they have
/// seen no other. In the stripe's line, which only its threads write.
pub(super) struct Seen {
    writes: AtomicUsize,
    since: AtomicU64,
}

impl Seen {
    pub(super) fn new() -> Self {
        Self {
            writes: AtomicUsize::new(0),
            since: AtomicU64::new(0),
        }
    }
}

/// Nanoseconds since the first call in this process (a monotonic clock).
pub(super) fn now() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Spell {
    pub(super) fn new(fast_reads: bool) -> Self {
        Self {
            writes: AtomicUsize::new(0),
            quiet_ns: AtomicU64::new(if fast_reads { QUIET_NS } else { NEVER }),
            since: AtomicU64::new(0),
            #[cfg(test)]
            ended: AtomicU64::new(0),
        }
    }

    /// Counts a write (by the writer holding `block`: no lost update).
    #[inline]
    pub(super) fn wrote(&self) {
        let w = &self.writes;
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// A look for quiet by lookups that saw `seen` last time: the time now
    /// if the lock has gone without a write for its wait, so they may make
    /// it fast (then [`began`](Self::began)).
    pub(super) fn quiet(&self, seen: &Seen) -> Option<u64> {
        let (writes, now) = (self.writes.load(Ordering::Relaxed), now());
        if writes != seen.writes.load(Ordering::Relaxed) {
            seen.writes.store(writes, Ordering::Relaxed);
            seen.since.store(now, Ordering::Relaxed);
            return None;
        }
        (now.saturating_sub(seen.since.load(Ordering::Relaxed))
            >= self.quiet_ns.load(Ordering::Relaxed))
        .then_some(now)
    }

    /// A spell began at `now`.
    pub(super) fn began(&self, now: u64) {
        self.since.store(now, Ordering::Relaxed);
    }

    /// The spell ended by the heavy barrier begun at `start` (and done
    /// now): learns from how long it lasted against what the barrier cost.
    /// Called by the writer holding `block`, so no other writer races.
    #[cold]
    pub(super) fn ended(&self, start: u64) {
        let (lasted, cost) = (
            start.saturating_sub(self.since.load(Ordering::Relaxed)),
            now().saturating_sub(start).max(1),
        );
        let quiet = self.quiet_ns.load(Ordering::Relaxed);
        let quiet = if quiet == NEVER {
            quiet
        } else if lasted < SPELL_PAYS * cost {
            (quiet * 2).min(QUIET_MAX_NS)
        } else if lasted >= 4 * SPELL_PAYS * cost {
            (quiet / 2).max(QUIET_NS)
        } else {
            quiet
        };
        self.quiet_ns.store(quiet, Ordering::Relaxed);
        #[cfg(test)]
        self.ended
            .store(self.ended.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests {
    use super::*;

    /// The wait for quiet doubles after each spell too short to pay for
    /// its barrier, up to its cap, and halves (to its floor) after one
    /// four times long enough. A start far from the clock's makes the
    /// barrier's measured cost its floor, 1 ns, so the test reads no time.
    #[test]
    fn the_wait_for_quiet_doubles_and_halves() {
        let s = Spell::new(true);
        let quiet = || s.quiet_ns.load(Ordering::Relaxed);
        let far = u64::MAX / 2;
        // Lasted 0: too short.
        for _ in 0..3 {
            s.began(far);
            s.ended(far);
        }
        assert_eq!(quiet(), 8 * QUIET_NS);
        // Lasted `far` ns against a cost of 1: long enough, four times over.
        s.began(0);
        s.ended(far);
        assert_eq!(quiet(), 4 * QUIET_NS);
        for _ in 0..4 {
            s.began(0);
            s.ended(far);
        }
        assert_eq!(quiet(), QUIET_NS, "never under the floor");
        for _ in 0..20 {
            s.began(far);
            s.ended(far);
        }
        assert_eq!(quiet(), QUIET_MAX_NS, "never over the cap");
        assert_eq!(s.ended.load(Ordering::Relaxed), 28);
        // Fast reads off: the wait stays never.
        let off = Spell::new(false);
        off.began(0);
        off.ended(far);
        assert_eq!(off.quiet_ns.load(Ordering::Relaxed), NEVER);
    }
}
