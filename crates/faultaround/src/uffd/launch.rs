//! Building what a region and a [`UffdHandler`](super::UffdHandler) share:
//! checking the settings, the [`Shared`] state, starting the threads, and
//! reading it back (statistics, the failure, the record).

use std::{
    collections::{HashSet, VecDeque},
    io,
    sync::{
        Arc, Condvar, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use mmbatch_mmap::Mapping;

use super::{
    MAX_HANDLERS, MAX_ID_LEN, MIN_SOURCE_TIMEOUT, PageSource, REPLAY_RUN, Record, Settings,
    UffdStats,
    handler::{self, Area, Counters, Mode, Recorder, Shared, Watch},
    record::WorkingSet,
    sys::Uffd,
};
use crate::{Error, Window};

/// The largest window a handler buffers (each handler holds one): 16
/// pages of 2 MiB, 2^[`MAX_ORDER`](crate::MAX_ORDER) pages of 4 KiB with room
/// to spare.
pub(super) const MAX_WINDOW_BYTES: usize = 32 << 20;

impl Settings {
    /// Checks the settings for `len` bytes of `page`-byte pages served from
    /// `source` (the page size given by the setting `page_setting`, which a
    /// refusal of it names); the replay's working-set file, opened, if one
    /// was given.
    pub(super) fn check(
        &self,
        (page, page_setting): (usize, &'static str),
        len: usize,
        source: &dyn PageSource,
    ) -> Result<Option<WorkingSet>, Error> {
        let Settings {
            order,
            handlers,
            source_timeout,
            image_id,
            replay,
            replay_pages,
            prefetchers,
            busy_poll,
            ..
        } = self;
        if source.len() < len as u64 {
            return Err(Error::SourceTooShort {
                source_len: source.len(),
                region_len: len,
            });
        }
        if !(1..=MAX_HANDLERS).contains(handlers) {
            return Err(Error::BadHandlers {
                handlers: *handlers,
                max: MAX_HANDLERS,
            });
        }
        if replay.is_some() && !(1..=MAX_HANDLERS).contains(prefetchers) {
            return Err(Error::BadSetting {
                setting: "prefetchers",
                value: prefetchers.to_string(),
                why: format!("a replay needs 1 to {MAX_HANDLERS} prefetch threads"),
            });
        }
        if *source_timeout < MIN_SOURCE_TIMEOUT {
            return Err(Error::BadSetting {
                setting: "source_timeout",
                value: format!("{source_timeout:?}"),
                why: format!(
                    "a source needs at least {MIN_SOURCE_TIMEOUT:?} (the watchdog's tick) to \
                     answer, or every page it has not yet answered fails; Duration::MAX waits \
                     for good"
                ),
            });
        }
        if *busy_poll > super::builder::MAX_BUSY_POLL {
            return Err(Error::BadSetting {
                setting: "busy_poll",
                value: format!("{busy_poll:?}"),
                why: format!(
                    "a handler polls at most {:?} for the next fault (beyond, it burns a CPU \
                     for no gain in latency); Duration::ZERO turns polling off",
                    super::builder::MAX_BUSY_POLL
                ),
            });
        }
        Window::around(0, *order, 0..1)?;
        if page > MAX_WINDOW_BYTES {
            return Err(Error::BadSetting {
                setting: page_setting,
                value: format!("{} MiB pages", page >> 20),
                why: format!(
                    "a handler's buffer holds at most {} MiB, and one page of this size would \
                     need it whole: 1 GiB pages are not served; use 2 MiB pages",
                    MAX_WINDOW_BYTES >> 20
                ),
            });
        }
        if page << order > MAX_WINDOW_BYTES {
            return Err(Error::BadSetting {
                setting: "order",
                value: order.to_string(),
                why: format!(
                    "a window of 2^{order} pages of {page} bytes is over {} MiB, each handler's \
                     buffer; huge pages need a smaller order (0 serves one huge page a fault)",
                    MAX_WINDOW_BYTES >> 20
                ),
            });
        }
        if image_id.len() > MAX_ID_LEN {
            return Err(Error::BadSetting {
                setting: "image_id",
                value: format!("{} bytes", image_id.len()),
                why: format!("an image id is at most {MAX_ID_LEN} bytes (a hash or a name)"),
            });
        }
        source.check().map_err(|source| Error::SourceUnreadable {
            what: "page source",
            source,
        })?;
        if let Some(r) = replay {
            r.check(page, len as u64, image_id)?;
        }
        match (replay, replay_pages) {
            (Some(r), Some(file)) => Ok(Some(WorkingSet::open(file.clone(), r)?)),
            (None, Some(_)) => Err(Error::BadSetting {
                setting: "replay_pages",
                value: "a working-set file".into(),
                why: "a working-set file needs the record it was written for: give it with \
                      replay()"
                    .into(),
            }),
            _ => Ok(None),
        }
    }
}

/// What the two kinds of front end bring to [`Shared::new`].
pub(super) struct Parts<'a> {
    pub(super) mode: Mode,
    pub(super) uffd: Uffd,
    /// Sorted by first page, not overlapping.
    pub(super) areas: Vec<Area>,
    pub(super) page: usize,
    /// Whether to try `UFFDIO_POISON` (cleared when refused).
    pub(super) poison: bool,
    /// The process's own mapping, unmapped when the region goes.
    pub(super) mapping: Option<Mapping>,
    /// Memory of another process: presence is tracked in a bitmap.
    pub(super) foreign: bool,
    /// Pages go in write-protected, for write tracking.
    pub(super) track: bool,
    pub(super) source: Box<dyn PageSource>,
    pub(super) settings: &'a Settings,
}

fn sys(op: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Sys { op, source }
}

impl Shared {
    pub(super) fn new(p: Parts<'_>) -> Result<Arc<Self>, Error> {
        let Parts {
            mode,
            uffd,
            areas,
            page,
            poison,
            mapping,
            foreign,
            track,
            source,
            settings,
        } = p;
        let pages = areas.last().map_or(0, |a| a.first + a.pages) as usize;
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| sys("eventfd")(e.into()))?;
        // One bit per page the application discards.
        let removed = handler::zeroed_bitmap(pages.div_ceil(64))
            .map_err(sys("mmap (the region's bitmap of discarded pages)"))?;
        let installed = if foreign {
            Some(
                handler::zeroed_bitmap(pages.div_ceil(64))
                    .map_err(sys("mmap (the handler's bitmap of installed pages)"))?,
            )
        } else {
            None
        };
        let handlers = settings.handlers;
        Ok(Arc::new(Shared {
            mode,
            owner: (std::process::id(), super::fork::generation()),
            uffd,
            areas: areas.into_boxed_slice(),
            len: pages * page,
            page,
            order: settings.order,
            source,
            source_timeout: settings.source_timeout,
            not_ready_timeout: settings
                .not_ready_timeout
                .unwrap_or(settings.source_timeout),
            busy_poll: settings.busy_poll,
            on_failure: settings.on_failure.clone(),
            polling: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            wake,
            stats: Counters::default(),
            poison: AtomicBool::new(poison),
            failed: Mutex::new(HashSet::new()),
            failure: Mutex::new(None),
            pagemap: std::sync::OnceLock::new(),
            mapping: RwLock::new(mapping),
            alive: Mutex::new(0),
            exited: Condvar::new(),
            events: RwLock::new(()),
            retired: AtomicBool::new(false),
            removed,
            any_removed: AtomicBool::new(false),
            installed,
            track,
            deferred: Mutex::new(VecDeque::new()),
            recorder: settings
                .record
                .then(|| Recorder::new(Watch::slots(handlers), settings.image_id.clone())),
            replay: std::sync::OnceLock::new(),
            prefetching: Mutex::new(0),
            replayed: Condvar::new(),
            threads: Mutex::new(Vec::new()),
            watch: Watch::new(handlers),
            watch_lock: Mutex::new(()),
            watch_wake: Condvar::new(),
        }))
    }

    /// Starts the handlers, the watchdog (where a source is called) and
    /// the replay's threads. On a refusal the caller's drop stops the
    /// ones started.
    pub(super) fn launch(
        self: &Arc<Self>,
        settings: Settings,
        working_set: Option<WorkingSet>,
    ) -> Result<(), Error> {
        let Settings {
            handlers,
            replay,
            prefetchers,
            ..
        } = settings;
        // The watchdog only where a source is called (not over a page
        // cache, whose faults never wait for one).
        let watchdog = usize::from(self.mode == Mode::Copy);
        let asked = handlers + replay.as_ref().map_or(0, |_| prefetchers) + watchdog;
        let refused = |started| {
            move |source| Error::ThreadRefused {
                started,
                asked,
                source,
            }
        };
        // The plan first: a handler sizes its buffer by it.
        let plan = replay.map(|r| {
            let plan = Arc::new(handler::Replay::new(
                r.runs(REPLAY_RUN),
                working_set,
                self.page,
            ));
            let _ = self.replay.set(plan.clone());
            plan
        });
        for i in 0..handlers {
            self.start_handler(i).map_err(refused(i))?;
        }
        if watchdog == 1 {
            let s = self.clone();
            self.start("uffd-watchdog".into(), move || s.watch())
                .map_err(refused(handlers))?;
        }
        if let Some(plan) = plan {
            for i in 0..prefetchers {
                let (s, plan) = (self.clone(), plan.clone());
                // Counted before it runs, so `wait_replayed` cannot return
                // before it has started.
                *self.prefetching.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                self.start(format!("uffd-prefetch-{i}"), move || s.prefetch(&plan))
                    .map_err(|e| {
                        *self.prefetching.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                        refused(handlers + watchdog + i)(e)
                    })?;
            }
        }
        Ok(())
    }

    pub(super) fn stats(&self) -> UffdStats {
        let c = &self.stats;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        UffdStats {
            faults: ld(&c.faults),
            pages_copied: ld(&c.pages_copied),
            pages_skipped: ld(&c.pages_skipped),
            already_present: ld(&c.already_present),
            retries: ld(&c.retries),
            pages_failed: ld(&c.pages_failed),
            pages_prefetched: ld(&c.pages_prefetched),
            remove_events: ld(&c.remove_events),
            pages_zeroed: ld(&c.pages_zeroed),
            replay_runs_refused: ld(&c.replay_runs_refused),
        }
    }

    pub(super) fn failure(&self) -> Option<Error> {
        let f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.as_ref().map(|f| Error::PageFailed {
            page: f.page,
            signal: f.signal,
            source: io::Error::new(f.cause.kind(), f.cause.to_string()),
        })
    }

    pub(super) fn record(&self) -> Option<Record> {
        let r = self.recorder.as_ref()?;
        Some(
            Record::new(self.page, self.len as u64, &r.image_id, r.pages())
                .expect("recorded pages lie in the region and its id was checked"),
        )
    }

    pub(super) fn wait_replayed(&self, timeout: Duration) -> bool {
        let n = self.prefetching.lock().unwrap_or_else(|e| e.into_inner());
        let (n, _) = self
            .replayed
            .wait_timeout_while(n, timeout, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
        *n == 0
    }
}
