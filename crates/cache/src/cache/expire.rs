//! Expiry: the [`Expiry`] and [`Clock`] a cache is built with, and how
//! it turns them into deadlines.

use std::{sync::Arc, time::Duration};

#[cfg(doc)]
use super::Builder;
use super::shard::Deadline;

/// When entries expire: each entry's time left after it is created,
/// updated (replaced by an insert) and read; `None` never expires. Calls
/// may run under the entry's shard lock (the write lock, the read lock for
/// `expire_after_read`), as a key's `Eq` does, and must not use the cache.
/// A panic leaves the cache as before the call. A load whose value loses
/// to a concurrent insert may have asked `expire_after_create` for it.
pub trait Expiry<K, V>: Send + Sync {
    /// The time left of an entry just created.
    fn expire_after_create(&self, key: &K, value: &V) -> Option<Duration>;

    /// The time left of an entry whose value was just replaced; `left`
    /// is what it had (default: as created).
    fn expire_after_update(&self, key: &K, value: &V, left: Option<Duration>) -> Option<Duration> {
        let _ = left;
        self.expire_after_create(key, value)
    }

    /// The time left of an entry just read (by `get` and the loads; not
    /// by `peek`); `left` is what it had (default: unchanged).
    fn expire_after_read(&self, key: &K, value: &V, left: Option<Duration>) -> Option<Duration> {
        let _ = (key, value);
        left
    }
}

/// The time expiry is measured in: monotonic, from any origin. Inject one
/// ([`Builder::clock`]) to control time in tests, or for a finer
/// resolution than the default's. It is read under the shard's lock (so
/// that no call acts on a moment before one it follows), as a key's `Eq`
/// runs, and must not use the cache.
pub trait Clock: Send + Sync {
    /// Now, since the clock's origin.
    fn now(&self) -> Duration;
}

/// The default clock, in nanoseconds: on Linux `CLOCK_MONOTONIC_COARSE`
/// (the time as of the kernel's last tick, read through the vDSO: a
/// fraction of `Instant::now`'s cost, docs/cache.md "Expiry") plus its
/// resolution, so an entry expires up to one tick (`clock_getres`: 1-4
/// ms) early, and late only by the kernel's delay in updating the coarse
/// clock after a tick (microseconds; more where a virtual machine's CPU
/// waits for its host); elsewhere `Instant`.
fn coarse_now() -> u64 {
    #[cfg(target_os = "linux")]
    {
        use rustix::time::{ClockId, clock_getres, clock_gettime};
        static RES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let res = *RES.get_or_init(|| {
            let r = clock_getres(ClockId::MonotonicCoarse);
            (r.tv_sec as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(r.tv_nsec as u64)
        });
        let t = clock_gettime(ClockId::MonotonicCoarse);
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
            .saturating_add(res)
            .min(u64::MAX - 1)
    }
    #[cfg(not(target_os = "linux"))]
    {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let o = *ORIGIN.get_or_init(std::time::Instant::now);
        u64::try_from(o.elapsed().as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1))
    }
}

/// A duration in nanoseconds on the expiry clock (`None`, or too long
/// for a `u64`: `u64::MAX`, never).
pub(super) fn nanos(d: Option<Duration>) -> u64 {
    d.and_then(|d| u64::try_from(d.as_nanos()).ok())
        .unwrap_or(u64::MAX)
}

/// How a cache's entries expire: the lifetimes of the builder, kept as
/// nanoseconds so that a hit costs no dynamic call, or an [`Expiry`].
pub(super) enum Kind<K, V> {
    /// [`Builder::time_to_live`]: reads move no deadline.
    Live(u64),
    /// [`Builder::time_to_idle`]: a read moves the deadline to now plus
    /// this.
    Idle(u64),
    /// Both: a read moves the deadline to now plus `idle`, never past
    /// the entry's cap (its creation or last update plus `live`).
    Both {
        /// The time to live.
        live: u64,
        /// The time to idle.
        idle: u64,
    },
    /// [`Builder::expiry`].
    Custom(Arc<dyn Expiry<K, V>>),
}

/// The time an entry has left when made, in nanoseconds (`u64::MAX`:
/// never), and the cap no read extends it past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Life {
    left: u64,
    cap: u64,
}

impl Life {
    /// The deadline of an entry made at `now` with this life.
    pub(super) fn at(self, now: u64) -> Deadline {
        Deadline {
            at: now.saturating_add(self.left),
            cap: now.saturating_add(self.cap),
        }
    }
}

/// A cache's expiry: how entries expire and the clock (`None`: the
/// default, [`coarse_now`]).
pub(super) struct Expire<K, V> {
    pub(super) kind: Kind<K, V>,
    pub(super) clock: Option<Arc<dyn Clock>>,
}

impl<K, V> Expire<K, V> {
    /// Whether a read only ever moves a deadline later (the builder's
    /// lifetimes; an `Expiry` may shorten one).
    pub(super) fn reads_only_extend(&self) -> bool {
        !matches!(self.kind, Kind::Custom(_))
    }

    /// Whether a read may move a deadline (all but a time to live alone).
    pub(super) fn reads_move_deadlines(&self) -> bool {
        !matches!(self.kind, Kind::Live(_))
    }

    /// Whether entries keep a cap beside their deadline.
    pub(super) fn capped(&self) -> bool {
        matches!(self.kind, Kind::Both { .. })
    }

    /// The life of an entry just created (`expire_after_create`).
    pub(super) fn create(&self, key: &K, value: &V) -> Life {
        match &self.kind {
            Kind::Live(d) | Kind::Idle(d) => Life {
                left: *d,
                cap: u64::MAX,
            },
            Kind::Both { live, idle } => Life {
                left: (*live).min(*idle),
                cap: *live,
            },
            Kind::Custom(e) => Life {
                left: nanos(e.expire_after_create(key, value)),
                cap: u64::MAX,
            },
        }
    }

    /// The deadline of an entry whose value was replaced at `now`; it had
    /// `was` (`expire_after_update`).
    pub(super) fn update(&self, key: &K, value: &V, now: u64, was: Deadline) -> Deadline {
        match &self.kind {
            Kind::Custom(e) => Life {
                left: nanos(e.expire_after_update(key, value, Self::left(now, was.at))),
                cap: u64::MAX,
            },
            _ => self.create(key, value),
        }
        .at(now)
    }

    /// The deadline of an entry read at `now`; it had `was`
    /// (`expire_after_read`).
    pub(super) fn read(&self, key: &K, value: &V, now: u64, was: Deadline) -> u64 {
        match &self.kind {
            Kind::Live(_) => was.at,
            Kind::Idle(idle) => now.saturating_add(*idle),
            Kind::Both { idle, .. } => now.saturating_add(*idle).min(was.cap),
            Kind::Custom(e) => now.saturating_add(nanos(e.expire_after_read(
                key,
                value,
                Self::left(now, was.at),
            ))),
        }
    }

    /// Now on the clock, in nanoseconds (below `u64::MAX`, which is never).
    pub(super) fn now(&self) -> u64 {
        match &self.clock {
            Some(c) => {
                u64::try_from(c.now().as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1))
            }
            None => coarse_now(),
        }
    }

    /// What is left of `deadline` at `now` (`None`: never expires).
    fn left(now: u64, deadline: u64) -> Option<Duration> {
        (deadline != u64::MAX).then(|| Duration::from_nanos(deadline.saturating_sub(now)))
    }
}
