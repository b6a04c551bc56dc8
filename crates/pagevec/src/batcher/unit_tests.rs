//! The drain generation's fold decision, driven step by step.

use std::sync::{Mutex, MutexGuard};

use super::{Apply, BatchStats, Batcher};
use crate::sync::Ordering;

struct Count(Mutex<u32>);

impl Apply for Count {
    type Op = ();
    type Key = ();
    type Guard<'a> = MutexGuard<'a, u32>;
    fn key(&self, _: &()) {}
    fn lock(&self, _: ()) -> MutexGuard<'_, u32> {
        self.0.lock().unwrap()
    }
    fn apply(&self, n: &mut MutexGuard<'_, u32>, _: ()) {
        **n += 1;
    }
}

/// A `drain_all` caller reads the generation; a pass then begins (bumps
/// it) and is cut short by a panic in Apply code before it reaches the
/// caller's op; the caller gets the drain mutex. It must drain its op
/// itself. Before, it folded into the cut-short pass (the generation had
/// moved) and returned with its op still queued (seen failing: "folded
/// into a pass that never ended").
#[test]
fn a_caller_does_not_fold_into_a_pass_that_panicked() {
    let b: Batcher<Count, 8> = Batcher::new(Count(Mutex::new(0)));
    b.queue(());
    let seen = b.drain_gen.fetch_add(0, Ordering::AcqRel);
    // The pass that panics: it bumped the generation and never ended.
    b.drain_gen.fetch_add(1, Ordering::AcqRel);
    b.drain_all_since(seen, false);
    assert_eq!(
        *b.target().0.lock().unwrap(),
        1,
        "folded into a pass that never ended"
    );
    assert_eq!(b.stats().drain_all_folded, 0);
}

/// A pass that began after the caller's read and ended whole still takes
/// the caller's work (the fold the kernel's `lru_drain_gen` allows).
#[test]
fn a_caller_folds_into_a_whole_pass_that_began_after_it() {
    let b: Batcher<Count, 8> = Batcher::new(Count(Mutex::new(0)));
    let seen = b.drain_gen.fetch_add(0, Ordering::AcqRel);
    b.queue(());
    b.drain_all(); // begins after `seen`, ends whole
    b.drain_all_since(seen, false);
    let st = b.stats();
    assert_eq!((st.drain_all_passes, st.drain_all_folded), (1, 1));
    assert_eq!(*b.target().0.lock().unwrap(), 1);
}

/// `+` and `+=` add every field, each with values that tell `+` from `-`
/// and `*` apart.
#[test]
fn batch_stats_add_every_field() {
    let a = BatchStats {
        ops: 10,
        immediate: 11,
        batches: 12,
        drains: 13,
        lock_acquisitions: 14,
        drain_all_passes: 15,
        drain_all_folded: 16,
        pending: 17,
    };
    let b = BatchStats {
        ops: 3,
        immediate: 4,
        batches: 5,
        drains: 6,
        lock_acquisitions: 7,
        drain_all_passes: 8,
        drain_all_folded: 9,
        pending: 2,
    };
    let want = BatchStats {
        ops: 13,
        immediate: 15,
        batches: 17,
        drains: 19,
        lock_acquisitions: 21,
        drain_all_passes: 23,
        drain_all_folded: 25,
        pending: 19,
    };
    assert_eq!(a + b, want);
    let mut c = a;
    c += b;
    assert_eq!(c, want);
}

/// A slot's ring over many laps, from positions that start anywhere
/// (`new_at` takes them modulo 2N; 61 is the last before a lap at N = 31)
/// and for N of 1 and 2: every op comes out once, in order, and none is
/// lost or doubled. With positions counted modulo 2^usize::BITS, which
/// 31 does not divide, the ops on both sides of the wrap shared cells:
/// started 40 before it (`usize::MAX - 40`, then not reduced), round 3
/// took [24, 41, 42, 43, 44, 45, 30, ...] where [24, 25, 26, ...] was
/// due.
#[test]
fn a_slots_positions_wrap_without_two_ops_in_one_cell() {
    laps::<31>(&[0, 61, usize::MAX - 2, usize::MAX - 40]);
    laps::<2>(&[0, 1, 2, 3, 5]);
    laps::<1>(&[0, 1, 2]);
}

/// Pushes and takes rounds of 1 to N ops on a `Slot<_, N>` started at
/// each of `starts`, checking order and that each op is dropped once.
fn laps<const N: usize>(starts: &[usize]) {
    use super::slot::{Slot, SlotStats};
    use crate::PageVec;
    use std::sync::Arc;
    for &start in starts {
        let slot = Slot::<(u32, Arc<()>), N>::new_at(start);
        let item = Arc::new(());
        let mut stats = SlotStats::default();
        let mut next = 0u32;
        for round in 0..70u32 {
            let n = 1 + (round * 7) % N as u32;
            for k in 0..n {
                // SAFETY: this thread is the slot's only producer.
                let full = unsafe { slot.push((next, item.clone())) }.expect("the ring has room");
                assert_eq!(full, k + 1 == N as u32);
                next += 1;
            }
            if n == N as u32 {
                // SAFETY: as above.
                let refused = unsafe { slot.push((u32::MAX, item.clone())) };
                assert!(refused.is_err(), "a full ring took one more");
            }
            let mut out = PageVec::<(u32, Arc<()>), N>::new();
            slot.take(&mut stats, &mut out);
            let got: Vec<u32> = out.iter().map(|(i, _)| *i).collect();
            let want: Vec<u32> = (next - n..next).collect();
            assert_eq!(got, want, "N {N}, start {start}, round {round}");
            drop(out);
            assert_eq!(
                Arc::strong_count(&item),
                1,
                "N {N}, start {start}, round {round}"
            );
        }
        assert_eq!(stats.taken, u64::from(next));
    }
}
