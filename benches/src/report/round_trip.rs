//! How long a cache line takes to go from one CPU to another and back: what
//! every row that contends across threads depends on. On hardware, or a
//! VM whose vCPUs run at once, a round trip is a fraction of a
//! microsecond; on a host that time-slices the vCPUs on fewer physical
//! CPUs, the other side is not running when the line arrives, and a round
//! trip costs a scheduling slice.
//! Then a lock's contention, a batch's saving or a thread's speed-up
//! measures the hypervisor's scheduler, not the code.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// How long the probe runs: several of a hypervisor's or scheduler's time
/// slices, so that the time the other CPU was not running weighs in.
pub const WINDOW: Duration = Duration::from_millis(100);

/// Below this [`RoundTrip::concurrent_share`] the two CPUs were not both
/// running for a fifth of the probe or more: rows that contend across
/// threads then measure the scheduler as much as the code.
pub const CONCURRENT_BELOW: f64 = 0.8;

/// A cache line's round trip between two CPUs, measured by
/// [`cross_cpu_round_trip`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundTrip {
    /// The fastest run of 64 round trips, per round trip: the line's
    /// transfer time while both CPUs run (27-64 ns, or about 290 ns at
    /// times, on this project's 2-vCPU KVM guest: ARCHITECTURE section 4).
    pub best_ns: f64,
    /// Every round trip of the probe, on average: stretches in which one
    /// side was not running count in full.
    pub mean_ns: f64,
}

impl RoundTrip {
    /// The share of the probe in which both CPUs ran: `best / mean`.
    pub fn concurrent_share(&self) -> f64 {
        if self.mean_ns > 0.0 {
            (self.best_ns / self.mean_ns).min(1.0)
        } else {
            0.0
        }
    }

    /// Whether the CPUs ran at once for less than [`CONCURRENT_BELOW`] of
    /// the probe.
    pub fn not_concurrent(&self) -> bool {
        self.concurrent_share() < CONCURRENT_BELOW
    }
}

/// Round trips of one cache line between two threads pinned to two
/// different CPUs (the first two this process may use), for [`WINDOW`]:
/// each waits for the other's write and answers it. `None` with fewer than
/// two CPUs or where the threads cannot be pinned.
pub fn cross_cpu_round_trip() -> Option<RoundTrip> {
    const CHUNK: u64 = 64;
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        return None;
    }
    let (a, b) = (cpus[0], cpus[1]);
    let line = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    std::thread::scope(|s| {
        let answerer = s.spawn(|| {
            if !pin(b) {
                stop.store(true, Ordering::Relaxed);
                return false;
            }
            ready.store(true, Ordering::Release);
            // Answers each odd value with the next even one.
            while !stop.load(Ordering::Relaxed) {
                let v = line.load(Ordering::Acquire);
                if v % 2 == 1 {
                    line.store(v + 1, Ordering::Release);
                }
                std::hint::spin_loop();
            }
            true
        });
        let pinned = pin(a);
        // Timed from when both are in place: not the thread's start-up.
        while !ready.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        let start = Instant::now();
        let mut trips = 0u64;
        let mut best = Duration::MAX;
        'probe: while pinned && !stop.load(Ordering::Relaxed) {
            let chunk = Instant::now();
            for _ in 0..CHUNK {
                let v = 2 * trips;
                line.store(v + 1, Ordering::Release);
                let mut spins = 0u32;
                while line.load(Ordering::Acquire) != v + 2 {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    // The answerer may have given up (not pinned).
                    if spins % 65_536 == 0
                        && (stop.load(Ordering::Relaxed) || start.elapsed() > 10 * WINDOW)
                    {
                        break 'probe;
                    }
                }
                trips += 1;
            }
            best = best.min(chunk.elapsed());
            if start.elapsed() >= WINDOW {
                break;
            }
        }
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let answered = answerer.join().unwrap_or(false);
        unpin(&cpus);
        (pinned && answered && trips >= CHUNK).then(|| RoundTrip {
            best_ns: best.as_nanos() as f64 / CHUNK as f64,
            mean_ns: elapsed.as_nanos() as f64 / trips as f64,
        })
    })
}

/// The note for an experiment whose contended rows ran while the host did
/// not run two CPUs at once for part of the cross-CPU probes, or moved
/// them apart or together in between (a round trip that changed more than
/// twofold).
///
/// `contention` names the rows that depend on it (an experiment's
/// `Experiment::contention`); empty, there is no note.
pub fn note(contention: &str, probes: &[RoundTrip]) -> Option<String> {
    if contention.is_empty() {
        return None;
    }
    let mut why = Vec::new();
    if probes.iter().any(RoundTrip::not_concurrent) {
        let shares: Vec<String> = probes
            .iter()
            .map(|r| format!("{:.0}%", r.concurrent_share() * 100.0))
            .collect();
        why.push(format!(
            "both CPUs ran for only {} of a cross-CPU round-trip probe ({}; under {:.0}% \
             means another guest or process had one of them)",
            shares.join(" / "),
            if probes.len() == 2 {
                "before / after"
            } else {
                "around it"
            },
            CONCURRENT_BELOW * 100.0,
        ));
    }
    if let [before, after] = probes {
        let (lo, hi) = if before.best_ns < after.best_ns {
            (before.best_ns, after.best_ns)
        } else {
            (after.best_ns, before.best_ns)
        };
        if hi > 2.0 * lo {
            why.push(format!(
                "a cache line's round trip between the two CPUs went from {:.0} ns to {:.0} ns \
                 during it (the hypervisor placed the vCPUs elsewhere)",
                before.best_ns, after.best_ns
            ));
        }
    }
    if why.is_empty() {
        return None;
    }
    Some(format!(
        "the host's CPUs changed under this experiment: {}. {} measure the host's scheduling \
         as much as the code: compare them only within this run, or rerun on a quiet host",
        why.join("; and "),
        capitalise(contention),
    ))
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    use rustix::thread::{CpuSet, sched_getaffinity};
    let Ok(set) = sched_getaffinity(None) else {
        return Vec::new();
    };
    (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

/// Pins the calling thread to `cpu`; whether it could.
fn pin(cpu: usize) -> bool {
    use rustix::thread::{CpuSet, sched_setaffinity};
    let mut one = CpuSet::new();
    one.set(cpu);
    sched_setaffinity(None, &one).is_ok()
}

/// Gives the calling thread back every CPU in `cpus`.
fn unpin(cpus: &[usize]) {
    use rustix::thread::{CpuSet, sched_setaffinity};
    let mut all = CpuSet::new();
    for &c in cpus {
        all.set(c);
    }
    let _ = sched_setaffinity(None, &all);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(best_ns: f64, mean_ns: f64) -> RoundTrip {
        RoundTrip { best_ns, mean_ns }
    }

    #[test]
    fn a_quiet_host_gets_no_note() {
        assert_eq!(
            note("the rows at 2 threads", &[rt(63.0, 66.0), rt(64.0, 67.0)]),
            None
        );
        // No contended rows: no note, however the host behaved.
        assert_eq!(note("", &[rt(63.0, 300.0), rt(300.0, 900.0)]), None);
    }

    #[test]
    fn a_cpu_taken_away_or_moved_is_named() {
        let n = note("the rows at 2 threads", &[rt(63.0, 130.0), rt(63.0, 66.0)]).unwrap();
        assert!(
            n.contains("48% / 95%") && n.contains("The rows at 2 threads"),
            "{n}"
        );
        let n = note("both rows", &[rt(63.0, 66.0), rt(294.0, 300.0)]).unwrap();
        assert!(
            n.contains("from 63 ns to 294 ns") && !n.contains("ran for only"),
            "{n}"
        );
    }

    /// Two CPUs or more: a finite, positive round trip within the limit's
    /// reach, and the caller's affinity given back.
    #[test]
    fn measures_a_round_trip_and_unpins() {
        let before = allowed_cpus();
        let r = cross_cpu_round_trip();
        assert_eq!(allowed_cpus(), before);
        if before.len() >= 2 {
            let r = r.expect("two CPUs, and pinning allowed");
            assert!(r.best_ns > 0.0 && r.best_ns <= r.mean_ns, "{r:?}");
            assert!((0.0..=1.0).contains(&r.concurrent_share()), "{r:?}");
        } else {
            assert_eq!(r, None);
        }
    }
}
