//! The per-CPU vmstat deltas and their fold at the threshold.

use super::*;

#[test]
fn deltas_fold_and_sum_exactly() {
    let v = VmStat::default();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    v.add(Stat::NrMlock, 1);
                }
                for _ in 0..300 {
                    v.add(Stat::NrMlock, -1);
                }
            });
        }
    });
    assert_eq!(v.read(Stat::NrMlock), 4 * 700);
    assert_eq!(v.updates(), 4 * 1300);
    // Folding kept the per-thread remainders small.
    assert!(v.global[Stat::NrMlock as usize].load(Ordering::Relaxed) >= 4 * (700 - THRESHOLD));
}

/// A thread's delta reaches the global counter once it passes the
/// threshold, whole, as `__mod_node_page_state` folds it.
#[test]
fn a_delta_folds_once_past_the_threshold() {
    let v = VmStat::default();
    let global = || v.global[Stat::Mlocked as usize].load(Ordering::Relaxed);
    for _ in 0..THRESHOLD {
        v.add(Stat::Mlocked, 1);
    }
    assert_eq!((global(), v.read(Stat::Mlocked)), (0, THRESHOLD));
    v.add(Stat::Mlocked, 1);
    assert_eq!(
        (global(), v.read(Stat::Mlocked)),
        (THRESHOLD + 1, THRESHOLD + 1)
    );
    v.add(Stat::Mlocked, -1);
    assert_eq!(
        (global(), v.read(Stat::Mlocked)),
        (THRESHOLD + 1, THRESHOLD)
    );
}
