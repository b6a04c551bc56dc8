//! The watchdog: a fault whose handler is stuck inside the page source.
//!
//! The source timeout bounds a source that answers
//! [`NotReady`](super::PageRead::NotReady); a source that never returns
//! from `read_page` (a dead network peer, a lock it never gets) would
//! hold its handler, and the thread that faulted, for good. So each
//! handler publishes the fault it is serving in a [`Busy`] slot (a
//! ticket, the page, since when it has been inside a source call), and
//! the watchdog thread claims a fault whose call has lasted longer than
//! the source timeout: the faulting page is failed (its
//! reader gets the signal, [`fail_page`](Shared::fail_page)) or, if its
//! data is already in, woken; the stuck thread exits whenever the source
//! lets it go, and a replacement takes its place — at most `handlers`
//! replacements over the region's life, so a source that blocks on every
//! page cannot make threads without bound. Only a call that has not
//! returned counts: a page the source keeps saying `NotReady` for is
//! failed by its handler at the timeout. Once no handler is free, the
//! watchdog fails each new fault itself: nothing waits forever.
//!
//! Claiming is one compare-and-swap on the ticket, which the handler also
//! swaps before it copies the faulting page (`have_data`) and when it is
//! done (`end`): exactly one of them decides the page.

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

#[cfg(all(test, loom))]
use loom::sync::atomic::AtomicU64;
#[cfg(not(all(test, loom)))]
use std::sync::atomic::AtomicU64;

use super::{CountOut, Shared};

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
    #[cfg(all(test, loom))]
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

/// The watchdog's state, in [`Shared`].
#[derive(Debug)]
pub(in crate::uffd) struct Watch {
    pub(in crate::uffd) busy: Box<[Busy]>,
    epoch: Instant,
    /// Replacement handlers the watchdog may still start.
    spares: AtomicUsize,
    /// Handler threads serving faults: started and not stuck.
    serving: AtomicUsize,
}

impl Watch {
    pub(in crate::uffd) fn new(handlers: usize) -> Self {
        Self {
            busy: (0..handlers).map(|_| Busy::new()).collect(),
            epoch: Instant::now(),
            spares: AtomicUsize::new(handlers),
            serving: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
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

    /// Counts a handler in (at its start) or out (stuck).
    pub(super) fn serving(&self, delta: isize) {
        if delta > 0 {
            self.watch.serving.fetch_add(1, Ordering::AcqRel);
        } else {
            self.watch.serving.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The watchdog thread: every tick (a quarter of the source timeout,
    /// 1 ms to 1 s), claims the faults stuck past the source timeout and,
    /// while no handler is free, fails new faults.
    pub(in crate::uffd) fn watch(self: &Arc<Self>) {
        let _alive = CountOut(&self.alive, &self.exited);
        let tick =
            (self.source_timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let timeout = self.source_timeout.as_nanos() as u64;
        loop {
            {
                let g = self.watch_lock.lock().unwrap_or_else(|e| e.into_inner());
                let _ = self
                    .watch_wake
                    .wait_timeout_while(g, tick, |_| !self.stop.load(Ordering::Acquire))
                    .unwrap_or_else(|e| e.into_inner());
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let before = self.watch.now().saturating_sub(timeout);
            for (me, b) in self.watch.busy.iter().enumerate() {
                let Some((page, had_data)) = b.claim(before) else {
                    continue;
                };
                self.serving(-1);
                if had_data || self.resident(page as usize, 1)[0] {
                    // Its data is in (the handler is stuck on a neighbour):
                    // let its reader go.
                    let _ = self.uffd.wake(self.addr(page), self.page);
                } else {
                    self.fail_page(page, stuck(page, self.source_timeout));
                }
                self.replace(me);
            }
            if self.watch.serving.load(Ordering::Acquire) == 0 {
                self.fail_waiting();
            }
        }
    }

    /// Starts a replacement for stuck handler `me`, if any is left.
    fn replace(self: &Arc<Self>, me: usize) {
        let w = &self.watch;
        if w.spares
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_err()
        {
            return;
        }
        // Refused (no threads to be had): the others serve, or, with none
        // free, the watchdog fails the faults.
        let _ = self.start_handler(me);
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
            let Some(addr) = next else { return };
            let page = ((addr - self.base) / self.page) as u64;
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
                             the page source (each has been in `read_page` or `pages` for over \
                             {:?}, the region's source timeout) and no replacement could be \
                             started; the source must return from its calls",
                            self.source_timeout
                        ),
                    ),
                );
            }
        }
    }
}

/// Why a fault whose handler was stuck in the source was failed.
fn stuck(page: u64, timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the page source did not return from reading page {page} within {timeout:?} (the \
             region's source timeout); its handler thread is left to finish and another serves \
             in its place. A source must return, with `PageRead::NotReady` if the page is not \
             there yet"
        ),
    )
}

impl Shared {
    /// Shutdown's fill: copies in every page still missing (the handlers
    /// have stopped), waiting for the source up to the source timeout in
    /// all; a page the source fails or does not have by then is failed.
    /// The source is called from a thread of its own, so a source stuck
    /// inside a call cannot hold the caller: past the timeout (and a
    /// grace of a tenth of it, at least 100 ms) the pages still missing
    /// are failed here and
    /// the thread is left to finish (it then finds each page present or
    /// failed, and copies nothing).
    pub(in crate::uffd) fn fill_missing(self: &Arc<Self>) {
        let deadline = Instant::now() + self.source_timeout;
        let (done, finished) = std::sync::mpsc::channel();
        let s = self.clone();
        let started = self.start("uffd-shutdown".into(), move || {
            let _alive = CountOut(&s.alive, &s.exited);
            s.fill_until(deadline);
            let _ = done.send(());
        });
        match started {
            Ok(()) => {
                let grace = (self.source_timeout / 10).max(Duration::from_millis(100));
                if finished.recv_timeout(self.source_timeout + grace).is_err() {
                    self.fail_missing();
                }
            }
            // No thread to be had: on the caller's, as before.
            Err(_) => self.fill_until(deadline),
        }
    }

    fn fill_until(&self, deadline: Instant) {
        let mut buf = vec![0u8; self.page];
        let pages = self.len / self.page;
        for (p, present) in self.resident(0, pages).into_iter().enumerate() {
            let p = p as u64;
            if present || self.is_failed(p) {
                continue;
            }
            match self.read_ready_until(p, &mut buf, deadline) {
                Ok(()) => {
                    if let Err(e) = self.copy_page(p, &buf, true) {
                        self.fail_page(p, e);
                    }
                }
                Err(e) => self.fail_page(p, e),
            }
        }
    }

    /// Fails every page still missing: shutdown's source is stuck.
    fn fail_missing(&self) {
        let pages = self.len / self.page;
        for (p, present) in self.resident(0, pages).into_iter().enumerate() {
            let p = p as u64;
            if !present && !self.is_failed(p) {
                self.fail_page(
                    p,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "shutdown gave up on page {p}: the page source did not return \
                             within {:?} (the region's source timeout)",
                            self.source_timeout
                        ),
                    ),
                );
            }
        }
    }
}
