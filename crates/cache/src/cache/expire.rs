//! Expiry: the [`Expiry`] and [`Clock`] a cache is built with, and how
//! it turns them into deadlines.

use std::{sync::Arc, time::Duration};

#[cfg(doc)]
use super::Builder;
use super::shard::Deadline;

/// When entries expire: each entry's time left after it is created,
/// updated (replaced by an insert) and read; `None` never expires, and
/// `Some(Duration::ZERO)` expires at once (no later lookup returns the
/// entry — a read that sets it still returns its value — and it is heard
/// as [`Expired`](super::RemovalCause::Expired) when reclaimed). Calls
/// run under the entry's shard lock (the write lock; for
/// `expire_after_read`, the read lock or the write lock), as a key's `Eq`
/// does, and must not use the cache.
/// A panic leaves the cache as before the call. Each value stored is asked
/// about once: created if its key was not cached (or had expired),
/// updated if it replaces a live value; a value `warm` loads and then
/// finds its key cached may have been asked `expire_after_create`.
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
/// resolution `res` ([`coarse_res`], read when the cache is built), so an
/// entry expires up to one tick (1-10 ms, by the kernel's `HZ`) early,
/// and late only by the kernel's delay in updating the coarse clock after
/// a tick (microseconds; more where a virtual machine's CPU waits for its
/// host); elsewhere `Instant`.
fn coarse_now(res: u64) -> u64 {
    #[cfg(target_os = "linux")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
        // The kernel keeps `CLOCK_MONOTONIC` below `KTIME_MAX` (`i64::MAX`
        // nanoseconds) and `res` is at most a second: no sum overflows,
        // and none reaches `u64::MAX - 1`.
        (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64 + res
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = res;
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let o = *ORIGIN.get_or_init(std::time::Instant::now);
        u64::try_from(o.elapsed().as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1))
    }
}

/// The resolution [`coarse_now`] adds, in nanoseconds: on Linux
/// `clock_getres(CLOCK_MONOTONIC_COARSE)` (a tick), at most a second;
/// elsewhere 0. Read once, when a cache is built, so that no read of the
/// clock pays for it.
pub(super) fn coarse_res() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let r = rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse);
        (r.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(r.tv_nsec as u64)
            .min(1_000_000_000)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
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
    /// What [`coarse_now`] adds (without a `clock`): [`coarse_res`].
    pub(super) res: u64,
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
            None => coarse_now(self.res),
        }
    }

    /// What is left of `deadline` at `now` (`None`: never expires).
    fn left(now: u64, deadline: u64) -> Option<Duration> {
        (deadline != u64::MAX).then(|| Duration::from_nanos(deadline.saturating_sub(now)))
    }
}

#[cfg(all(test, target_os = "linux", not(mmbatch_loom), not(miri)))]
mod tests {
    use super::*;
    use crate::LruCache;
    use rustix::time::{ClockId, Timespec, clock_getres, clock_gettime};

    /// `t` in nanoseconds, converted apart from the code under test.
    fn nanos_of(t: Timespec) -> u64 {
        let d = Duration::new(t.tv_sec.try_into().unwrap(), t.tv_nsec.try_into().unwrap());
        d.as_nanos().try_into().unwrap()
    }

    /// The default clock reads `CLOCK_MONOTONIC_COARSE` a tick ahead: its
    /// resolution added, so that an entry expires up to one tick early
    /// and never a tick late.
    #[test]
    fn the_default_clock_reads_the_coarse_clock_a_tick_ahead() {
        let res = coarse_res();
        assert_eq!(res, nanos_of(clock_getres(ClockId::MonotonicCoarse)));
        assert!(res > 0, "a coarse clock without a tick");
        let e: Expire<u8, u8> = Expire {
            kind: Kind::Live(1),
            clock: None,
            res,
        };
        let before = nanos_of(clock_gettime(ClockId::MonotonicCoarse));
        let now = e.now();
        let after = nanos_of(clock_gettime(ClockId::MonotonicCoarse));
        assert!(
            (before + res..=after + res).contains(&now),
            "{now} outside {before}..={after} plus {res}"
        );
    }

    /// A cache built with expiry on the default clock keeps its tick; one
    /// on an injected clock adds nothing to it.
    #[test]
    fn a_cache_keeps_the_tick_of_the_clock_it_reads() {
        struct Zero;
        impl Clock for Zero {
            fn now(&self) -> Duration {
                Duration::ZERO
            }
        }
        let ttl = Duration::from_secs(60);
        let default: LruCache<u8, u8> = LruCache::builder(8).time_to_live(ttl).build().unwrap();
        let injected: LruCache<u8, u8> = LruCache::builder(8)
            .time_to_live(ttl)
            .clock(Zero)
            .build()
            .unwrap();
        let res = |c: &LruCache<u8, u8>| c.expire.as_ref().expect("expiry on").res;
        assert_eq!(res(&default), coarse_res());
        assert_eq!(res(&injected), 0);
        assert_eq!(injected.expire.as_ref().unwrap().now(), 0);
    }
}
