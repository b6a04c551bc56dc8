//! The watchdog: a fault whose handler is stuck inside the page source.
//!
//! The not-ready timeout bounds a source that answers
//! [`NotReady`](super::PageRead::NotReady); a source that never returns
//! from `read_page` (a dead network peer, a lock it never gets) would
//! hold its handler, and the thread that faulted, for good. So each
//! handler publishes the fault it is serving in a [`Busy`] slot (a
//! ticket, the page, since when it has been inside a source call), and
//! the watchdog thread claims a fault whose call has lasted longer than
//! the source timeout: the faulting page is failed (its
//! reader gets the signal, [`fail_page`](Shared::fail_page)) or, if its
//! data is already in, woken; the stuck thread exits whenever the source
//! lets it go — or, if a handler is missing then, serves again — and a
//! replacement takes its place in a free slot: at most twice as many
//! handler threads as handlers ever exist, so a source that blocks on
//! every page cannot make threads without bound. Only a call that has not
//! returned counts: a page the source keeps saying `NotReady` for is
//! failed by its handler at the not-ready timeout. Once no handler is free, the
//! watchdog fails each new fault itself: nothing waits forever.
//!
//! Claiming is one compare-and-swap on the ticket, which the handler also
//! swaps before it copies the faulting page (`have_data`) and when it is
//! done (`end`): exactly one of them decides the page.

use std::{
    io,
    sync::{
        Arc, Mutex,
        atomic::{AtomicIsize, AtomicUsize, Ordering},
        mpsc::RecvTimeoutError,
    },
    time::{Duration, Instant},
};

#[cfg(all(test, mmbatch_loom))]
use loom::sync::atomic::AtomicU64;
#[cfg(not(all(test, mmbatch_loom)))]
use std::sync::atomic::AtomicU64;

use super::{CountOut, Fault, Shared};

/// The fault one handler thread is serving (see the module docs). Its
/// ticket protocol is loom-modelled (`tests/loom_watchdog.rs`).
#[derive(Debug)]
pub(in crate::uffd) struct Busy {
    /// 0: idle. Otherwise a fault's ticket: even while the handler waits
    /// for the faulting page's data, odd (`| 1`) once it has it.
    ticket: AtomicU64,
    /// The slot's faults so far (its tickets' numbers: tickets of one
    /// slot never repeat, so a stale compare-and-swap always fails).
    seq: AtomicU64,
    page: AtomicU64,
    /// When the handler's call into the source began, in nanoseconds from
    /// [`Watch::epoch`]; [`OUT`] between calls (a `NotReady` page's
    /// retries are bounded by the handler itself).
    since: AtomicU64,
}

/// `Busy::since` while the handler is not inside the source.
const OUT: u64 = u64::MAX;

impl Busy {
    pub(in crate::uffd) fn new() -> Self {
        Self {
            ticket: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            page: AtomicU64::new(0),
            since: AtomicU64::new(OUT),
        }
    }

    /// The handler starts serving a fault on `page`.
    pub(super) fn begin(&self, page: u64) -> u64 {
        let t = (self.seq.fetch_add(1, Ordering::Relaxed) + 1) << 1;
        self.page.store(page, Ordering::Relaxed);
        self.since.store(OUT, Ordering::Relaxed);
        // Published last: a watchdog that sees the ticket sees its page.
        self.ticket.store(t, Ordering::Release);
        t
    }

    /// The handler calls into the source at time `now` (`OUT`: it is
    /// back).
    pub(super) fn in_source(&self, now: u64) {
        self.since.store(now, Ordering::Release);
    }

    /// The handler has fault `t`'s data: false if the watchdog claimed
    /// the fault first (the page is failed; it must not be copied).
    pub(super) fn have_data(&self, t: u64) -> bool {
        // Marked now, or by an earlier call for this fault.
        self.ticket
            .compare_exchange(t, t | 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            || self.ticket.load(Ordering::Acquire) == t | 1
    }

    /// The broken [`have_data`](Self::have_data) the loom model must
    /// catch: the ticket read, then the mark stored, so a claim can fall
    /// in between.
    #[cfg(all(test, mmbatch_loom))]
    pub(super) fn have_data_racy(&self, t: u64) -> bool {
        let ours = self.ticket.load(Ordering::Acquire) == t;
        if ours {
            self.ticket.store(t | 1, Ordering::Release);
        }
        ours || self.ticket.load(Ordering::Acquire) == t | 1
    }

    /// The handler is done with fault `t`: false if the watchdog claimed
    /// it (this thread has been replaced and is to exit).
    pub(super) fn end(&self, t: u64) -> bool {
        let held = self.ticket.load(Ordering::Acquire);
        held & !1 == t
            && self
                .ticket
                .compare_exchange(held, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The watchdog claims the fault in progress if its handler has been
    /// inside one source call since before `before`: its page, and whether
    /// the handler had its data.
    pub(super) fn claim(&self, before: u64) -> Option<(u64, bool)> {
        let t = self.ticket.load(Ordering::Acquire);
        if t == 0 {
            return None;
        }
        let (page, since) = (
            self.page.load(Ordering::Relaxed),
            self.since.load(Ordering::Acquire),
        );
        // The ticket unchanged since it was read: `page` and `since` are
        // that fault's (a slot's tickets never repeat).
        (since < before
            && self
                .ticket
                .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok())
        .then_some((page, t & 1 == 1))
    }
}

/// Threads shutdown's fill may leave stuck in the source before it fails
/// the pages still missing.
pub(in crate::uffd) const FILL_THREADS: usize = 4;

/// The watchdog's state, in [`Shared`].
#[derive(Debug)]
pub(in crate::uffd) struct Watch {
    /// One slot per handler thread that can run at once — the `handlers`
    /// started with the region and as many replacements — and, last, the
    /// shutdown fill's ([`FILL_THREADS`]). A replacement takes a free slot, never the stuck
    /// thread's: the stuck thread still writes its own when its call
    /// returns.
    pub(in crate::uffd) busy: Box<[Busy]>,
    epoch: Instant,
    /// Handler slots without a thread: where replacements go. A claimed
    /// thread gives its slot back when the source lets it go, so the
    /// bound is on threads stuck at once, not over the region's life.
    free: Mutex<Vec<usize>>,
    /// Handler threads serving faults: started and not claimed.
    serving: AtomicUsize,
    /// Claimed threads (handlers, the shutdown fill) not yet gone:
    /// stopping waits for every thread but these. Signed: a claimed
    /// thread may leave before its claimer counts it, and a moment at -1
    /// only makes stopping wait longer.
    pub(in crate::uffd) stuck: AtomicIsize,
    /// Handlers the region was built with: how many should serve.
    handlers: usize,
}

impl Watch {
    pub(in crate::uffd) fn new(handlers: usize) -> Self {
        Self {
            busy: (0..Self::slots(handlers) + FILL_THREADS)
                .map(|_| Busy::new())
                .collect(),
            epoch: Instant::now(),
            free: Mutex::new((handlers..Self::slots(handlers)).collect()),
            serving: AtomicUsize::new(0),
            stuck: AtomicIsize::new(0),
            handlers,
        }
    }

    /// Handler slots for a region of `handlers` handlers (the recorder
    /// keeps a list per slot).
    pub(in crate::uffd) fn slots(handlers: usize) -> usize {
        2 * handlers
    }

    /// The shutdown fill's slots.
    fn fill_slots(&self) -> std::ops::Range<usize> {
        self.busy.len() - FILL_THREADS..self.busy.len()
    }

    fn now(&self) -> u64 {
        nanos(self.epoch.elapsed())
    }
}

/// `d` in nanoseconds, saturating (a timeout of `Duration::MAX` means
/// never).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A handler inside a source call (see [`Shared::in_source`]).
pub(super) struct InSource<'a>(Option<&'a Busy>);

impl Drop for InSource<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.0 {
            b.in_source(OUT);
        }
    }
}

/// A handler's hold on the fault it serves.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket {
    me: usize,
    t: u64,
}

impl Shared {
    /// Handler `me` starts serving a fault on `page`.
    pub(super) fn begin(&self, me: usize, page: u64) -> Ticket {
        let t = self.watch.busy[me].begin(page);
        Ticket { me, t }
    }

    /// Times a call into the source for the watchdog, until the guard
    /// drops (nothing for a thread that is not a handler: `None`).
    pub(super) fn in_source(&self, k: Option<Ticket>) -> InSource<'_> {
        let busy = k.map(|k| &self.watch.busy[k.me]);
        if let Some(b) = busy {
            b.in_source(self.watch.now());
        }
        InSource(busy)
    }

    /// See [`Busy::have_data`].
    pub(super) fn have_data(&self, k: Ticket) -> bool {
        self.watch.busy[k.me].have_data(k.t)
    }

    /// See [`Busy::end`].
    pub(super) fn end(&self, k: Ticket) -> bool {
        self.watch.busy[k.me].end(k.t)
    }

    /// Counts a handler in (at its start) or out (claimed).
    pub(super) fn serving(&self, delta: isize) {
        if delta > 0 {
            self.watch.serving.fetch_add(1, Ordering::AcqRel);
        } else {
            self.watch.serving.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Counts one more handler serving if fewer than the region's
    /// handlers do (and it is not stopping).
    fn reserve_serving(&self) -> bool {
        !self.stopping()
            && self
                .watch
                .serving
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.watch.handlers).then_some(n + 1)
                })
                .is_ok()
    }

    /// A claimed handler in slot `me` whose source call has returned:
    /// it serves again in its slot if a handler is missing (true), or
    /// leaves, its slot free again and a fault it had queued handed on.
    pub(super) fn back_from_stuck(&self, me: usize) -> bool {
        self.watch.stuck.fetch_sub(1, Ordering::AcqRel);
        if self.reserve_serving() {
            return true;
        }
        self.watch
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(me);
        if !self
            .deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
        false
    }

    /// How often the watchdog looks: a quarter of the source timeout,
    /// 1 ms to 1 s.
    fn tick(&self) -> Duration {
        (self.source_timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1))
    }

    /// The watchdog thread: every [`tick`](Self::tick), claims the faults
    /// whose source call has lasted longer than the source timeout and,
    /// while no handler is free, fails new faults.
    pub(in crate::uffd) fn watch(self: &Arc<Self>) {
        let _alive = CountOut(&self.alive, &self.exited);
        let timeout = nanos(self.source_timeout);
        let handlers = 0..self.watch.fill_slots().start;
        loop {
            {
                let g = self.watch_lock.lock().unwrap_or_else(|e| e.into_inner());
                let _ = self
                    .watch_wake
                    .wait_timeout_while(g, self.tick(), |_| !self.stopping())
                    .unwrap_or_else(|e| e.into_inner());
            }
            if self.stopping() {
                return;
            }
            let before = self.watch.now().saturating_sub(timeout);
            for me in handlers.clone() {
                let Some((page, had_data)) = self.watch.busy[me].claim(before) else {
                    continue;
                };
                self.watch.stuck.fetch_add(1, Ordering::AcqRel);
                self.serving(-1);
                let replaced = self.replace();
                if had_data || self.resident(page as usize, 1)[0] {
                    // Its data is in (the handler is stuck on a neighbour):
                    // let its reader go.
                    let _ = self.uffd.wake(self.addr(page), self.page);
                } else {
                    self.fail_page(page, stuck(page, self.source_timeout, replaced));
                }
            }
            // Handlers missing (a slot came free after its claim found
            // none, a spawn was refused): start them now.
            while self.replace() {}
            if self.watch.serving.load(Ordering::Acquire) == 0 {
                self.fail_waiting();
            }
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Starts a handler in a free slot if fewer than the region's
    /// handlers serve (and it is not stopping); whether it did.
    fn replace(self: &Arc<Self>) -> bool {
        let free = &self.watch.free;
        let Some(slot) = free.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
            return false;
        };
        if !self.reserve_serving() {
            free.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
            return false;
        }
        // Refused (no threads to be had): the others serve, or, with none
        // serving, the watchdog fails the faults; the next tick tries
        // again.
        let started = self.spawn_handler(slot).is_ok();
        if !started {
            self.serving(-1);
            free.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
        }
        started
    }

    /// Fails every fault waiting while no handler is free (a discarded
    /// page is still served with zeros: that needs no source).
    fn fail_waiting(&self) {
        loop {
            let next = self
                .deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
                .or_else(|| self.next_fault());
            let Some(Fault { addr, .. }) = next else {
                return;
            };
            let Some(page) = self.page_of(addr) else {
                self.fail_stray(addr);
                continue;
            };
            if self.is_removed(page) {
                self.zero_page(page);
            } else if self.resident(page as usize, 1)[0] {
                let _ = self.uffd.wake(self.addr(page), self.page);
            } else {
                self.fail_page(
                    page,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "page {page} was not served: every handler thread is stuck inside \
                             the page source (each in a call to `read_page` or `pages` that has \
                             lasted over {:?}, the region's source timeout) and no replacement \
                             could be started; the source must return from its calls",
                            self.source_timeout
                        ),
                    ),
                );
            }
        }
    }
}

/// Why a fault whose handler was stuck in the source was failed.
fn stuck(page: u64, timeout: Duration, replaced: bool) -> io::Error {
    let then = if replaced {
        "another handler serves in its place"
    } else {
        "no replacement was free to start"
    };
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the page source did not return from reading page {page} within {timeout:?} (the \
             region's source timeout); its handler thread is left to finish, and {then}. A \
             source must return, with `PageRead::NotReady` if the page is not there yet"
        ),
    )
}

/// Why shutdown's fill failed a page whose source call did not return.
fn fill_stuck(page: u64, timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "shutdown gave up on page {page}: the page source did not return from reading it \
             within {timeout:?} (the region's source timeout); the other pages are filled by \
             another thread, and this one is left to finish"
        ),
    )
}

impl Shared {
    /// Shutdown's fill: copies in every page still missing (the handlers
    /// have stopped), waiting for the source up to the not-ready timeout
    /// in all for pages it says are not ready; a page the source fails or
    /// does not have by then is failed. A source that answers, however
    /// slowly, fills every page. The source is called from a thread of
    /// its own, timed call by call as the handlers are, so that one stuck
    /// inside a call cannot hold the caller: once a call has lasted longer
    /// than the timeout, the caller claims the thread's slot (the thread
    /// copies nothing after that), fails that page and goes on with the
    /// rest on a new thread, up to [`FILL_THREADS`] stuck threads; past
    /// those, the pages still missing are failed. If no thread can be had,
    /// the fill runs on the caller's thread, unguarded.
    pub(in crate::uffd) fn fill_missing(self: &Arc<Self>) {
        let deadline = self.ready_deadline();
        let timeout = nanos(self.source_timeout);
        let mut from = 0;
        for slot in self.watch.fill_slots() {
            let (done, finished) = std::sync::mpsc::channel();
            let s = self.clone();
            let started = self.start("uffd-shutdown".into(), move || {
                let _alive = CountOut(&s.alive, &s.exited);
                if !s.fill_from(from, deadline, Some(slot)) {
                    s.watch.stuck.fetch_sub(1, Ordering::AcqRel);
                }
                let _ = done.send(());
            });
            if started.is_err() {
                // No thread: the fill goes on unguarded on the caller's,
                // unless a call has already been seen not to return.
                if from == 0 {
                    self.fill_from(from, deadline, None);
                    return;
                }
                break;
            }
            loop {
                match finished.recv_timeout(self.tick()) {
                    Ok(()) => return,
                    // Gone without a word (it cannot panic past its
                    // guards, but no page may be left missing).
                    Err(RecvTimeoutError::Disconnected) => return self.fail_missing(),
                    Err(RecvTimeoutError::Timeout) => {
                        let before = self.watch.now().saturating_sub(timeout);
                        if let Some((page, _)) = self.watch.busy[slot].claim(before) {
                            self.watch.stuck.fetch_add(1, Ordering::AcqRel);
                            self.fail_page(page, fill_stuck(page, self.source_timeout));
                            from = page as usize + 1;
                            break;
                        }
                    }
                }
            }
        }
        self.fail_missing();
    }

    /// Fills the missing pages from page `from` on, timed in `slot` if
    /// given; false if the fill was claimed as stuck and stopped.
    fn fill_from(&self, from: usize, deadline: Instant, slot: Option<usize>) -> bool {
        let mut buf = vec![0u8; self.page];
        let pages = self.len / self.page;
        for p in self.missing(from, pages - from) {
            if self.is_failed(p) {
                continue;
            }
            let k = slot.map(|me| self.begin(me, p));
            // A source holding the page in memory is copied from in the
            // kernel, as a fault copies it: a mapped file cut short fails
            // the copy (EFAULT), where a read of it here would be SIGBUS.
            let held = self.source_pages(p, 1, k);
            let read = match held {
                Some(_) => Ok(()),
                None => self.read_ready_until(p, &mut buf, deadline, k),
            };
            if k.is_some_and(|k| !self.have_data(k)) {
                return false;
            }
            match read {
                Ok(()) => match self.copy_page(p, held.unwrap_or(&buf), true) {
                    Ok(()) => {}
                    // Nothing is left to fill: stop at the first page, not
                    // after a read and a failed copy of each.
                    Err(e) if super::copy::is_gone(&e) => {
                        self.fail_page(p, e);
                        return k.is_none_or(|k| self.end(k));
                    }
                    Err(e) => self.fail_page(p, e),
                },
                Err(e) => self.fail_page(p, e),
            }
            if k.is_some_and(|k| !self.end(k)) {
                return false;
            }
        }
        true
    }

    /// Fails every page still missing: shutdown's source is stuck.
    fn fail_missing(&self) {
        let pages = self.len / self.page;
        for p in self.missing(0, pages) {
            if !self.is_failed(p) {
                self.fail_page(
                    p,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "shutdown gave up on page {p}: the page source did not return from \
                             a call within {:?} (the region's source timeout)",
                            self.source_timeout
                        ),
                    ),
                );
            }
        }
    }

    /// The source timeout from now (far off for a timeout too large to
    /// add).
    pub(in crate::uffd) fn deadline(&self) -> Instant {
        far(self.source_timeout)
    }

    /// The not-ready timeout from now: until when a page the source says
    /// is not ready is waited for.
    pub(in crate::uffd) fn ready_deadline(&self) -> Instant {
        far(self.not_ready_timeout)
    }
}

/// `timeout` from now, or far off for a timeout too large to add.
fn far(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(1 << 32)))
        .unwrap_or(now)
}

#[cfg(all(test, not(mmbatch_loom), not(miri)))]
mod tests;
