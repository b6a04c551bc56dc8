//! vmstat-style counters: each thread adds to its own delta (no atomic
//! read-modify-write, like the kernel's per-CPU `vm_stat_diff`), folded
//! into the global value when it passes a threshold
//! (`__mod_zone_page_state` with `stat_threshold`).

#[cfg(not(mmbatch_loom))]
use crossbeam_utils::CachePadded;

use crate::sync::{AtomicI64, Ordering};

/// A counter kept outside the lru_lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stat {
    /// `NR_MLOCK`: frames with `PG_mlocked` set.
    NrMlock,
    /// `UNEVICTABLE_PGMLOCKED`: frames newly mlocked.
    Mlocked,
}

impl Stat {
    /// Number of counters.
    pub const COUNT: usize = 2;
    /// Every counter, in index order.
    pub const ALL: [Stat; Self::COUNT] = [Stat::NrMlock, Stat::Mlocked];

    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Stat::NrMlock => "nr_mlock",
            Stat::Mlocked => "unevictable_pgs_mlocked",
        }
    }
}

/// A delta this large is folded into the global value (the kernel scales
/// `stat_threshold` with CPUs and memory; 32 is a small machine's).
#[cfg(not(mmbatch_loom))]
const THRESHOLD: i64 = 32;

/// Slot `Stat::COUNT` of a delta array counts calls to `add`.
const UPDATES: usize = Stat::COUNT;

#[derive(Debug, Default)]
pub(crate) struct VmStat {
    global: [AtomicI64; Stat::COUNT + 1],
    #[cfg(not(mmbatch_loom))]
    local: thread_local::ThreadLocal<CachePadded<[AtomicI64; Stat::COUNT + 1]>>,
}

impl VmStat {
    /// Adds `delta` to `stat` (`mod_zone_page_state`). Only this thread
    /// writes its delta, so a load and a store suffice.
    #[inline]
    pub(crate) fn add(&self, stat: Stat, delta: i64) {
        #[cfg(not(mmbatch_loom))]
        match self.local.get().or_else(|| self.first_local()) {
            Some(local) => {
                bump(&local[UPDATES], 1, &self.global[UPDATES]);
                bump(&local[stat as usize], delta, &self.global[stat as usize]);
            }
            // The thread's thread-locals are torn down: no delta of its own.
            None => {
                self.global[UPDATES].fetch_add(1, Ordering::Relaxed);
                self.global[stat as usize].fetch_add(delta, Ordering::Relaxed);
            }
        }
        #[cfg(mmbatch_loom)]
        {
            self.global[UPDATES].fetch_add(1, Ordering::Relaxed);
            self.global[stat as usize].fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// The calling thread's deltas, made on its first `add`; `None` while
    /// its thread-locals are torn down, once it cannot make them: past
    /// `thread_local`'s guard of the thread's id, `get_or` panics taking a
    /// new one, and a panic out of a thread-local's destructor (one that
    /// calls the engine as its thread exits) aborts. As
    /// `mmbatch_pagevec`'s batcher makes its slots.
    #[cfg(not(mmbatch_loom))]
    #[cold]
    fn first_local(&self) -> Option<&CachePadded<[AtomicI64; Stat::COUNT + 1]>> {
        LIVE.try_with(|_| ()).ok()?;
        if NO_DELTAS.get() {
            return None;
        }
        // Where another `ThreadLocal` gave the thread its id (freed before
        // a late destructor's first call here), `LIVE` is first touched
        // during the teardown, and `get_or` panics: caught.
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.local.get_or(Default::default)
        }));
        made.inspect_err(|_| NO_DELTAS.set(true)).ok()
    }

    /// The value, deltas included: exact when no update is in flight
    /// (`global_zone_page_state` plus the per-CPU diffs).
    pub(crate) fn read(&self, stat: Stat) -> i64 {
        self.read_index(stat as usize)
    }

    /// Calls to `add` so far.
    pub(crate) fn updates(&self) -> u64 {
        self.read_index(UPDATES) as u64
    }

    fn read_index(&self, i: usize) -> i64 {
        let global = self.global[i].load(Ordering::Relaxed);
        #[cfg(not(mmbatch_loom))]
        {
            global
                + self
                    .local
                    .iter()
                    .map(|l| l[i].load(Ordering::Relaxed))
                    .sum::<i64>()
        }
        #[cfg(mmbatch_loom)]
        {
            global
        }
    }
}

/// Touched before a thread first makes its deltas, and destroyed with its
/// thread-locals: after `thread_local`'s guard of the id the thread got
/// for them, so `try_with` fails once `get_or` would panic.
#[cfg(not(mmbatch_loom))]
struct Live;

#[cfg(not(mmbatch_loom))]
impl Drop for Live {
    // A destructor of its own, so that `try_with` fails once it has run.
    fn drop(&mut self) {}
}

#[cfg(not(mmbatch_loom))]
std::thread_local! {
    static LIVE: Live = const { Live };
    /// Set once `get_or` panicked on this thread: it makes no deltas after
    /// that. No destructor, so it reads the same to the end.
    static NO_DELTAS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(not(mmbatch_loom))]
#[inline]
fn bump(local: &AtomicI64, delta: i64, global: &AtomicI64) {
    let d = local.load(Ordering::Relaxed) + delta;
    if d.abs() > THRESHOLD {
        global.fetch_add(d, Ordering::Relaxed);
        local.store(0, Ordering::Relaxed);
    } else {
        local.store(d, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
