//! Stopping a region: [`shutdown`](UffdRegion::shutdown), which serves
//! every fault still waiting before it lets go, and drop, which stops the
//! threads and unmaps; and starting the region's threads.

use std::{ffi::c_void, io, sync::atomic::Ordering, thread::JoinHandle, time::Instant};

use super::{Mode, Shared, UffdRegion};

impl UffdRegion {
    /// Stops the handler threads without failing any faulting thread that
    /// the source can serve: after they exit, every page still missing is
    /// copied in and the range unregistered, so a fault in flight is woken
    /// with its data and later accesses do not fault.
    ///
    /// # Blocking
    /// Pages the source says are not ready are waited for until one
    /// [not-ready timeout](crate::UffdRegionBuilder::not_ready_timeout)
    /// (by default the source timeout) after the fill began (one deadline
    /// for all of them); a page
    /// the source fails, or does not have by then, is failed (its readers
    /// get the signal). Calls that return are never cut short: a slow
    /// source that answers fills every page however long that takes.
    /// A source stuck inside a call is bounded: a handler in such a call
    /// holds shutdown up to the source timeout, and each fill call that
    /// lasts longer than the timeout fails its page and the fill goes on
    /// from a new thread, up to four such calls, after which the pages
    /// still missing are failed: at most about six source timeouts in all
    /// against a source that never returns. An anonymous region, which a
    /// child of `fork(2)` does not inherit while it is served, is then
    /// ordinary memory, which a child inherits. In a child of `fork(2)`,
    /// does nothing: the region is the parent's to serve.
    pub fn shutdown(&self) {
        if !self.shared.in_owner() || self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.shutdown();
        if self.shared.mode == Mode::Copy {
            // Every page is in (or failed, which a child inherits as
            // failed): ordinary memory now, which fork(2) hands on (an
            // error, ENOMEM at the map count, leaves it not inherited).
            let mapping = self
                .shared
                .mapping
                .read()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(m) = mapping.as_ref() {
                // After the advice, and only if it took: a fork in between
                // reserves nothing over the range it inherits (NOREPLACE),
                // and a range left not inherited keeps its reservation.
                if m.advise(0..m.len(), mmbatch_mmap::Advice::DoFork).is_ok() {
                    super::fork::release(m.as_ptr() as usize);
                }
            }
        }
    }
}

impl Shared {
    /// Whether this is the process that made the region (or handler), not
    /// a child of `fork(2)`. In a child, the handler threads are the
    /// parent's (joining one would wait forever), and the userfaultfd is
    /// the parent's too: unregistering through it would unregister the
    /// parent's range (`UFFDIO_UNREGISTER` acts on the memory it was
    /// made for), whose pages not yet in would then read as zeros there.
    /// Told by the fork count the fork handlers keep (which a pid reused,
    /// or pid 1 in a new namespace, does not fool), and by the pid (for a
    /// raw `clone` that runs no fork handler).
    pub(super) fn in_owner(&self) -> bool {
        (std::process::id(), super::fork::generation()) == self.owner
    }

    /// [`UffdRegion::shutdown`]'s work, for a [`UffdHandler`](super::UffdHandler) too:
    /// the fill before the unregister, so a pending fault gets its data;
    /// `retire` before both end, so a thread left behind installs nothing
    /// after (loom: `handler/tests/loom_teardown.rs`).
    pub(super) fn shutdown(self: &std::sync::Arc<Self>) {
        self.stop_handlers();
        if self.mode == Mode::Continue {
            // Map whatever is cached; a page still faulting after this
            // takes the ordinary shmem fault once the range is unregistered.
            let _ = self.cont(0, self.len / self.page, true);
        } else {
            self.fill_missing();
        }
        // A thread still in the source installs nothing once the ranges
        // are handed over (the process may map and register anew there).
        self.retire();
        self.unregister();
    }

    /// Stops the handlers and joins them, waiting up to the source timeout
    /// for the ones inside a source call (not for those the watchdog
    /// already found stuck). A thread still in the source is left to
    /// finish on its own: once its region is dropped its installs are
    /// refused ([`retire`](Self::retire)), and its one other call on the
    /// range, `mprotect`, checks `mapping` first.
    pub(super) fn stop_handlers(&self) {
        let s = self;
        s.stop.store(true, Ordering::Release);
        let _ = rustix::io::write(&s.wake, &1u64.to_ne_bytes());
        {
            // Under its lock: the watchdog cannot miss the stop between
            // checking it and going to sleep.
            let _g = s.watch_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.watch_wake.notify_all();
        }
        let deadline = s.deadline();
        let mut alive = s.alive.lock().unwrap_or_else(|e| e.into_inner());
        // Threads the watchdog found stuck in the source are not waited
        // for: they are left to finish.
        while *alive as isize > s.watch.stuck.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            alive = s
                .exited
                .wait_timeout(alive, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        // Every handler has left its loop: join them all (each has only
        // its locals to drop). Checking `is_finished` alone left a thread
        // that had counted itself out but not yet returned detached, still
        // holding the uffd and eventfd open after drop — seen under TCG in
        // `cargo xtask vm` as "descriptors left open". Past the deadline
        // (a source blocked for good), the unfinished ones are left.
        let all_out = *alive == 0;
        drop(alive);
        for h in s
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            if all_out || h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// Ends every install into the range: waits for the copies in flight
    /// (each holds `events` for reading) and marks the region retired, so
    /// a handler thread that outlived [`stop_handlers`](Self::stop_handlers)
    /// (stuck in a source call past the deadline) makes no later one.
    /// Why: `UFFDIO_COPY` checks only that its range is registered with
    /// some userfaultfd, not with its own; once this range is unmapped, a
    /// new region mapped at the same address and registered with another
    /// userfaultfd would take the old thread's copy.
    pub(super) fn retire(&self) {
        let _no_copy = self.events.write().unwrap_or_else(|e| e.into_inner());
        self.retired.store(true, Ordering::Release);
    }

    /// Whether [`retire`](Self::retire) has run; read under `events`.
    pub(in crate::uffd) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Wakes every access waiting on a page of any area (`UFFDIO_WAKE`),
    /// to fault again: into whatever is mapped there by then.
    pub(super) fn wake_all(&self) {
        for a in self.areas.iter() {
            let _ = self
                .uffd
                .wake(a.base as *mut c_void, a.addresses(self.page).len());
        }
    }

    /// Unregisters every area (a failure is left: the range is gone, or
    /// its process has exited).
    pub(super) fn unregister(&self) {
        for a in self.areas.iter() {
            let _ = self
                .uffd
                .unregister(a.base as *mut c_void, a.addresses(self.page).len());
        }
    }

    /// Starts one of the region's threads (a handler, a replay thread, the
    /// watchdog), counted in `alive` before it runs (its body counts
    /// itself out) and joined by `stop_handlers`. Fail point `uffd::spawn`
    /// plays the OS refusing it.
    pub(super) fn start(
        &self,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> io::Result<()> {
        *self.alive.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        match spawn(name, body) {
            Ok(h) => {
                self.threads
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(h);
                Ok(())
            }
            Err(e) => {
                *self.alive.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                Err(e)
            }
        }
    }
}

/// `std::thread::Builder::spawn`, refused with EAGAIN by fail point
/// `uffd::spawn`.
fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    fail_point!("uffd::spawn", |_| Err(io::Error::from_raw_os_error(
        libc::EAGAIN
    )));
    std::thread::Builder::new().name(name).spawn(body)
}

impl Drop for UffdRegion {
    fn drop(&mut self) {
        if !self.shared.in_owner() {
            // A child's copy: left as it is (see `Shared::in_owner`).
            return;
        }
        // No access through the region can be in flight (it is borrowed
        // mutably), so the handlers can simply stop; one through its
        // address (another thread's, KVM's) is failed below.
        self.shared.stop_handlers();
        let s = &self.shared;
        let mut mapping = s.mapping.write().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = mapping.as_ref() {
            // Before the unmap: no child reserves a range reused since.
            super::fork::release(m.as_ptr() as usize);
        }
        s.retire();
        // Unmapped under the lock: a handler left running checks `mapping`
        // before touching the range. Unmapped before anything waiting is
        // woken: an access still waiting on a page (another thread's
        // through a raw pointer, or KVM's, which reads guest memory by
        // address) then fails, SIGSEGV or EFAULT, unless the address is
        // mapped again first; unregistering first woke it into the
        // range's ordinary fault, and it read zeros. The unmap ends the
        // registration with the mapping.
        if let Some(m) = mapping.take() {
            let (ptr, len, _) = m.into_raw_parts();
            // SAFETY: the region's whole mapping, which nothing borrows
            // any more (the region is being dropped).
            if unsafe { rustix::mm::munmap(ptr.as_ptr().cast(), len) }.is_err() {
                // Refused (ENOMEM at `vm.max_map_count`): made
                // inaccessible (the mapping's own bounds: no split), so
                // the access the unregister wakes fails as it would
                // unmapped; then unregistered, since the `Mapping`'s drop
                // releases the pages with MADV_DONTNEED, whose REMOVE
                // event would wait for a handler that has stopped.
                // SAFETY: the same whole mapping, which nothing borrows.
                let _ = unsafe {
                    rustix::mm::mprotect(
                        ptr.as_ptr().cast(),
                        len,
                        rustix::mm::MprotectFlags::empty(),
                    )
                };
                s.unregister();
                // SAFETY: refused, the range is still ours and mapped
                // (with no access now: the empty protection says so).
                drop(unsafe {
                    mmbatch_mmap::Mapping::from_raw_parts(ptr, len, rustix::mm::ProtFlags::empty())
                });
            }
        }
        s.wake_all();
    }
}

#[cfg(all(test, not(mmbatch_loom), not(miri)))]
mod tests;
