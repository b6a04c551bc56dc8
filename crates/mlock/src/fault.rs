//! [`FaultLockedRegion`]: seed 003's userspace alternative to
//! `MLOCK_ONFAULT` — map `PROT_NONE`, and in a SIGSEGV handler make the
//! faulting page accessible and lock it, then speculatively the `batch - 1`
//! pages after it.
//!
//! The handler is process-wide state. Regions register in a fixed table of
//! atomics that the handler reads without locks; it calls only `mprotect`
//! and `mlock` (async-signal-safe system calls) and touches no allocator.
//! A fault outside every registered region goes to the handler that was
//! installed before ours (std's stack-overflow handler, for instance), or
//! to the default action. The handler is installed with the first region
//! and the previous one restored with the last, unless another handler was
//! installed on top of ours meanwhile: then ours stays reachable through
//! it, and is not installed again (installing it over a handler that
//! chains to it would make the two call each other forever) — unless the
//! action is later found reset to the default or ignore, when the next
//! region made installs ours again. The previous
//! action is copied out through a seqlock, never read while being written;
//! the handler saves and restores `errno`.
//!
//! A failure inside the handler (ENOMEM once `vm.max_map_count` mappings
//! exist, or a memlock limit) is recorded in the region, and the whole
//! region is made accessible — one `mprotect` over whole mappings needs no
//! new ones — so the access goes ahead unlocked instead of faulting
//! forever; the caller's [`read`](FaultLockedRegion::read) then returns the
//! error.

use std::{
    ffi::c_void,
    mem::MaybeUninit,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use rustix::{
    io::Errno,
    mm::{MprotectFlags, mlock, mprotect},
};

use crate::{Error, LockPolicy, LockedRegion, RegionBuilder, accounting};

/// Regions that can use the handler at once.
pub const MAX_FAULT_REGIONS: usize = 16;

const OP_MPROTECT: u64 = 1;
const OP_MLOCK: u64 = 2;

/// One registered region, read by the handler without locks. `start` is
/// written last on registration and cleared first on removal, so the
/// handler sees either nothing or a complete entry.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    batch: AtomicUsize,
    /// The mapping's page size.
    page: AtomicUsize,
    prot: AtomicUsize,
    /// The first failure since it was last taken, or 0: `op << 56 |
    /// errno << 32 | the process's mapping count then` (one word, so that
    /// the count is that failure's).
    error: AtomicU64,
    /// Set once an mprotect refusal made the handler open the whole
    /// region: no access faults, nor locks, after that.
    opened: AtomicBool,
    faults: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    batch: AtomicUsize::new(0),
    page: AtomicUsize::new(4096),
    prot: AtomicUsize::new(0),
    error: AtomicU64::new(0),
    opened: AtomicBool::new(false),
    faults: AtomicU64::new(0),
};

static SLOTS: [Slot; MAX_FAULT_REGIONS] = [EMPTY; MAX_FAULT_REGIONS];

/// Registration: which slots are taken, and where our handler stands.
struct Registry {
    used: [bool; MAX_FAULT_REGIONS],
    /// Our handler is installed, or reachable through a handler another
    /// library installed over it (which chains to ours): either way it
    /// must not be installed again, and `OLD` must not change.
    reachable: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    used: [false; MAX_FAULT_REGIONS],
    reachable: false,
});

const WORDS: usize = std::mem::size_of::<libc::sigaction>().div_ceil(8);

/// The action that was installed before ours, as a seqlock over atomic
/// words: the handler copies it out without locks (a writer never blocks
/// it, and a torn copy is retried), and it is written only while our
/// handler is unreachable, under `REGISTRY` — so a handler still running
/// from before can at worst retry.
struct OldAction {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
    valid: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

static OLD: OldAction = OldAction::new();

impl OldAction {
    /// Nothing saved yet.
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            words: [ZERO; WORDS],
            valid: AtomicBool::new(false),
        }
    }

    /// Writes `action` (callers hold `REGISTRY`: one writer).
    fn store(&self, action: &libc::sigaction) {
        let mut words = [0u64; WORDS];
        // SAFETY: `words` has at least size_of::<sigaction>() bytes and
        // does not overlap `action`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (action as *const libc::sigaction).cast::<u8>(),
                words.as_mut_ptr().cast::<u8>(),
                std::mem::size_of::<libc::sigaction>(),
            )
        };
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (w, v) in self.words.iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        self.valid.store(true, Ordering::Release);
    }

    /// A consistent copy, or `None` if nothing was saved. Signal-safe: no
    /// locks, no allocation.
    fn load(&self) -> Option<libc::sigaction> {
        if !self.valid.load(Ordering::Acquire) {
            return None;
        }
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut words = [0u64; WORDS];
            for (v, w) in words.iter_mut().zip(&self.words) {
                *v = w.load(Ordering::Relaxed);
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                let mut action = MaybeUninit::<libc::sigaction>::uninit();
                // SAFETY: `words` holds at least size_of::<sigaction>()
                // bytes; `action` has room for them; they do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        words.as_ptr().cast::<u8>(),
                        action.as_mut_ptr().cast::<u8>(),
                        std::mem::size_of::<libc::sigaction>(),
                    )
                };
                // SAFETY: the bytes of a sigaction written by `store`
                // (every bit pattern of its integer and pointer fields is a
                // valid value).
                return Some(unsafe { action.assume_init() });
            }
        }
    }
}

/// This thread's errno (reading it allocates nothing: signal-safe).
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(v: i32) {
    // SAFETY: no preconditions; returns this thread's errno slot (Bionic
    // names it `__errno`).
    #[cfg(target_os = "android")]
    let slot = unsafe { libc::__errno() };
    // SAFETY: as above.
    #[cfg(not(target_os = "android"))]
    let slot = unsafe { libc::__errno_location() };
    // SAFETY: a valid, aligned, thread-local int.
    unsafe { *slot = v };
}

/// The SIGSEGV handler. It leaves errno as the interrupted code had it.
extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let saved = errno();
    dispatch(sig, info, ctx, saved);
    set_errno(saved);
}

fn dispatch(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, saved: i32) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let siginfo = unsafe { &*info };
    // SAFETY: SIGSEGV's siginfo carries the faulting address.
    let addr = unsafe { siginfo.si_addr() } as usize;
    // A SIGSEGV sent by kill or raise (si_code <= 0) carries no address
    // (those bytes are the sender's pid and uid): never a region's.
    let from_fault = siginfo.si_code > 0;
    for slot in SLOTS.iter().filter(|_| from_fault) {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= slot.end.load(Ordering::Acquire) {
            continue;
        }
        handle(slot, addr, start);
        return;
    }
    set_errno(saved);
    chain(sig, info, ctx, from_fault);
}

/// Makes the faulting page accessible and locks it, then the next
/// `batch - 1` pages of the region.
fn handle(slot: &Slot, addr: usize, start: usize) {
    // The mapping's page size: a hugetlb region is protected and locked a
    // huge page at a time.
    let page = slot.page.load(Ordering::Relaxed);
    let end = slot.end.load(Ordering::Acquire);
    // rustix's calls are raw system calls: async-signal-safe, and they
    // leave errno alone.
    let prot = MprotectFlags::from_bits_retain(slot.prot.load(Ordering::Relaxed) as u32);
    let p = addr & !(page - 1);
    // SAFETY: [p, p + page) lies inside a region we mapped.
    if let Err(e) = unsafe { mprotect(p as *mut c_void, page, prot) } {
        record(slot, OP_MPROTECT, e.raw_os_error());
        slot.opened.store(true, Ordering::Release);
        // Never fault forever: open the whole region in one call.
        // SAFETY: [start, end) is the region we mapped.
        if unsafe { mprotect(start as *mut c_void, end - start, prot) }.is_err() {
            // Cannot even do that: let the re-executed access take the
            // default action rather than loop.
            // SAFETY: resets SIGSEGV to SIG_DFL; no memory is involved.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        }
        return;
    }
    // SAFETY: [p, p + page) is now accessible memory we mapped.
    if let Err(e) = unsafe { mlock(p as *mut c_void, page) } {
        record(slot, OP_MLOCK, e.raw_os_error());
        return;
    }
    let batch = slot.batch.load(Ordering::Relaxed);
    let n = (batch - 1).min((end - p - page) / page);
    if n != 0 {
        let q = p + page;
        // Speculative: a failure here leaves those pages to fault alone.
        // SAFETY: [q, q + n * page) lies inside the region.
        if unsafe { mprotect(q as *mut c_void, n * page, prot) }.is_ok() {
            // SAFETY: as above, now accessible.
            let _ = unsafe { mlock(q as *mut c_void, n * page) };
        }
    }
    slot.faults.fetch_add(1, Ordering::Relaxed);
}

fn record(slot: &Slot, op: u64, errno: i32) {
    // Counted now: the fallback below merges mappings back.
    let maps = u32::try_from(accounting::map_count()).unwrap_or(u32::MAX);
    let word = op << 56 | (errno as u64 & 0xffff) << 32 | u64::from(maps);
    let _ = slot
        .error
        .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed);
}

/// Passes a SIGSEGV that is not ours to the previous action. A fault
/// re-faults into what is installed; one sent by kill or raise is acted
/// on here, as the previous action would have: ignored (ours stays), or
/// sent again to take the default action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, from_fault: bool) {
    let ours = on_segv as *const () as usize;
    let old = match OLD.load() {
        // Never back to ourselves: that would loop.
        Some(old) if old.sa_sigaction != ours => old,
        _ => {
            // SAFETY: resets SIGSEGV to SIG_DFL; no memory is involved.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
            resend(sig, from_fault);
            return;
        }
    };
    let h = old.sa_sigaction;
    if h == libc::SIG_IGN && !from_fault {
        return;
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: reinstalls the previous action; the access re-faults
        // and takes it (the kernel kills a process that ignores a fault).
        unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        resend(sig, from_fault);
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so
        // it has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Sends `sig` again if it was sent rather than raised by a fault (which
/// happens again by itself when the access is retried): blocked while
/// the handler runs, it arrives once the handler returns.
fn resend(sig: libc::c_int, from_fault: bool) {
    if !from_fault {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}

/// Makes our handler reachable for a new region (callers hold
/// `REGISTRY`). `OLD` is written only here, and only when our handler was
/// unreachable: installed over nothing of ours, or buried under a handler
/// since reset to the default action.
fn install(reg: &mut Registry) -> Result<(), Error> {
    if reg.reachable && !buried_under_default() {
        return Ok(());
    }
    // SAFETY: an all-zero sigaction is a valid empty value.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = on_segv as *const () as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: sa_mask is ours to initialise.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // Save the current action before installing ours, so the first stray
    // fault after installation finds it (a fault in between takes the
    // current action, which is still in place).
    let old = current_action().map_err(|source| Error::Sys {
        op: "sigaction",
        source,
    })?;
    if old.sa_sigaction != on_segv as *const () as usize {
        OLD.store(&old);
    }
    // SAFETY: a valid action for SIGSEGV.
    if unsafe { libc::sigaction(libc::SIGSEGV, &new, std::ptr::null_mut()) } != 0 {
        return Err(Error::Sys {
            op: "sigaction",
            source: std::io::Error::last_os_error(),
        });
    }
    reg.reachable = true;
    Ok(())
}

/// Whether SIGSEGV's action is now the default or ignore: ours, left
/// installed beneath another library's handler, is then no longer
/// reachable (that library reset the action when it went away) and must
/// be installed again. Any other foreign handler may chain to ours and is
/// trusted to; a failed query trusts too.
fn buried_under_default() -> bool {
    current_action()
        .is_ok_and(|a| a.sa_sigaction == libc::SIG_DFL || a.sa_sigaction == libc::SIG_IGN)
}

/// SIGSEGV's action now.
fn current_action() -> std::io::Result<libc::sigaction> {
    let mut current = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: queries the current action into `current`.
    if unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), current.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: sigaction succeeded, so it filled `current`.
    Ok(unsafe { current.assume_init() })
}

/// With the last region gone: restore the previous action if ours is
/// still the installed one. If another handler was installed over ours, it
/// may chain to ours: ours stays reachable (and passes every fault on to
/// `OLD`), and is neither reinstalled nor given a new `OLD` later.
fn uninstall(reg: &mut Registry) {
    let Ok(current) = current_action() else {
        return;
    };
    if current.sa_sigaction != on_segv as *const () as usize {
        return; // buried under another handler: stays reachable
    }
    let restore = OLD.load().unwrap_or_else(|| {
        // SAFETY: an all-zero sigaction is SIG_DFL with no flags.
        unsafe { std::mem::zeroed() }
    });
    // SAFETY: restores the previous action.
    unsafe { libc::sigaction(libc::SIGSEGV, &restore, std::ptr::null_mut()) };
    reg.reachable = false;
}

/// A region mapped `PROT_NONE` whose pages a SIGSEGV handler makes
/// accessible and locks, `batch` pages per fault: a userspace alternative
/// to `MLOCK_ONFAULT` (which kernels before 4.4 lack) — prefer
/// [`LockPolicy::OnFault`], which needs no handler.
///
/// **It installs a process-wide SIGSEGV handler** with the first region
/// and restores the previous one with the last. A fault outside every
/// region goes on to the handler installed before (std's stack-overflow
/// handler, say) or to the default action; a handler another library
/// installs after it must chain to it, or faults in the regions kill the
/// process. At most [`MAX_FAULT_REGIONS`] live at once. A failure in the
/// handler never loops: where `mlock` is refused (a memlock limit) the
/// faulting page stays accessible, unlocked; where `mprotect` is (at
/// `vm.max_map_count`) the whole region is made accessible, unlocked; and
/// [`read`](Self::read) returns the first such error.
#[derive(Debug)]
pub struct FaultLockedRegion {
    region: LockedRegion,
    slot: usize,
}

impl FaultLockedRegion {
    /// Builds the region from `builder` (its lock policy is replaced by
    /// [`LockPolicy::Unlocked`]), protects it `PROT_NONE`, and registers it
    /// with the handler, installing the handler if it is the first.
    ///
    /// # Errors
    /// [`Error::ZeroBatch`] for a `batch` of 0,
    /// [`Error::TooManyFaultRegions`] with [`MAX_FAULT_REGIONS`] alive,
    /// whatever [`RegionBuilder::build`] returns, and [`Error::Sys`] for a
    /// refused `mprotect` or `sigaction`.
    pub fn new(builder: RegionBuilder<'_>, batch: usize) -> Result<Self, Error> {
        if batch == 0 {
            return Err(Error::ZeroBatch);
        }
        if builder.secret {
            return Err(Error::BadFlags {
                op: "FaultLockedRegion::new",
                why: "secret memory is locked by the kernel as it is touched already, and its \
                      pages cannot be locked by mlock: build the LockedRegion alone",
            });
        }
        let mut region = builder.policy(LockPolicy::Unlocked).build()?;
        let prot = if region.writable() {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let taken = (|| {
            let slot = reg
                .used
                .iter()
                .position(|u| !u)
                .ok_or(Error::TooManyFaultRegions {
                    max: MAX_FAULT_REGIONS,
                })?;
            install(&mut reg)?;
            if let Err(e) = region.protect_range(0, region.len(), MprotectFlags::empty()) {
                if !reg.used.iter().any(|u| *u) {
                    uninstall(&mut reg);
                }
                return Err(e);
            }
            Ok(slot)
        })();
        let slot = match taken {
            Ok(slot) => slot,
            Err(e) => {
                // A region the caller never had is not theirs to zero (a
                // shared file's contents), and may be partly protected.
                region.forget_zeroing();
                return Err(e);
            }
        };
        reg.used[slot] = true;
        let s = &SLOTS[slot];
        let start = region.as_ptr() as usize;
        s.page.store(region.page_size(), Ordering::Relaxed);
        s.end.store(start + region.len(), Ordering::Relaxed);
        s.batch.store(batch, Ordering::Relaxed);
        s.prot.store(prot as usize, Ordering::Relaxed);
        s.error.store(0, Ordering::Relaxed);
        s.opened.store(false, Ordering::Relaxed);
        s.faults.store(0, Ordering::Relaxed);
        s.start.store(start, Ordering::Release);
        Ok(Self { region, slot })
    }

    /// Reads byte `offset`, faulting its page in (and locking it with its
    /// batch) on first touch. An error the handler met for this region
    /// since the last `read` or [`take_error`](Self::take_error) is
    /// returned here, once, instead of the byte: the access itself went
    /// ahead (unlocked, rather than fault forever), so `read` again for
    /// its value.
    pub fn read(&self, offset: usize) -> Result<u8, Error> {
        if offset >= self.region.len() {
            return Err(Error::OutOfRange {
                offset,
                len: 1,
                region: self.region.len(),
            });
        }
        let byte = self.region.as_ptr().wrapping_add(offset);
        // SAFETY: offset < len, so `byte` is inside our mapping; if its page
        // is still PROT_NONE the handler makes it readable.
        let v = unsafe { std::ptr::read_volatile(byte) };
        match self.take_error() {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }

    /// The memory: the process's own access, through this slice or a
    /// pointer into it, faults its page in (and locks it with its batch)
    /// on first touch. A system call handed a page not yet touched
    /// (`read(2)` into it, `write(2)` from it) fails with `EFAULT`
    /// instead: the kernel's access raises no signal for the handler to
    /// serve. Touch such pages first.
    pub fn as_slice(&self) -> &[u8] {
        self.region.as_slice()
    }

    /// The memory, writable (`None` for a read-only region); a write
    /// faults its page in as a read does (and a system call is refused
    /// as [`as_slice`](Self::as_slice) says).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        self.region.as_mut_slice()
    }

    /// The error the handler met making a page of this region accessible
    /// or locking it (the access went ahead, unlocked), if any since the
    /// last call or [`read`](Self::read): taken, so that the next error
    /// is heard too. The first error after a call is kept; later errors
    /// before the next call are discarded. After an `mprotect`
    /// refusal the handler opens the whole region (never to fault
    /// forever): [`locks_on_touch`](Self::locks_on_touch) is then false.
    pub fn take_error(&self) -> Option<Error> {
        let e = SLOTS[self.slot].error.swap(0, Ordering::AcqRel);
        if e == 0 {
            return None;
        }
        let errno = Errno::from_raw_os_error((e >> 32 & 0xffff) as i32);
        let page = self.region.page_size();
        let op = if e >> 56 == OP_MPROTECT {
            "mprotect"
        } else {
            "mlock"
        };
        let maps = (e & 0xffff_ffff) as usize;
        let max = accounting::max_map_count();
        let cause = if errno == Errno::NOMEM && crate::error::near_map_limit(maps, max) {
            Error::MapCountLimit { op, maps, max }
        } else if op == "mprotect" {
            Error::from_sys(op, page, errno)
        } else {
            Error::from_lock(op, page, errno)
        };
        Some(Error::FaultHandler {
            cause: Box::new(cause),
        })
    }

    /// Whether a first touch still faults its page in and locks it:
    /// false for good once the handler, refused an `mprotect`, opened the
    /// whole region (the error said so once, through
    /// [`take_error`](Self::take_error) or [`read`](Self::read)).
    pub fn locks_on_touch(&self) -> bool {
        !SLOTS[self.slot].opened.load(Ordering::Acquire)
    }

    /// Faults the handler resolved for this region.
    pub fn faults(&self) -> u64 {
        SLOTS[self.slot].faults.load(Ordering::Relaxed)
    }

    /// The underlying region. Its [`access`](LockedRegion::access) is
    /// what the process's own accesses get (the build's): the pages not
    /// yet touched are `PROT_NONE` underneath until the handler opens
    /// them, so a system call handed one fails with `EFAULT` (see
    /// [`as_slice`](Self::as_slice)).
    pub fn region(&self) -> &LockedRegion {
        &self.region
    }
}

impl FaultLockedRegion {
    /// Makes every page of the region accessible as `open` says
    /// (`mprotect`); fail point `mlock::open_on_drop` refuses it.
    fn open_pages(&self, open: MprotectFlags) -> Result<(), Error> {
        fail_point!("mlock::open_on_drop", |_| Err(Error::from_sys(
            "mprotect",
            self.region.len(),
            rustix::io::Errno::NOMEM
        )));
        self.region.protect_range(0, self.region.len(), open)
    }
}

impl Drop for FaultLockedRegion {
    fn drop(&mut self) {
        if self.region.zeroes_on_drop() {
            // The region's drop writes every page: opened first, so that
            // a page never touched does not fault into a handler that may
            // be gone by then.
            let open = if self.region.writable() {
                MprotectFlags::READ | MprotectFlags::WRITE
            } else {
                MprotectFlags::READ
            };
            if self.open_pages(open).is_err() {
                // Not zeroed rather than a fault with no handler.
                self.region.forget_zeroing();
            }
        }
        let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        SLOTS[self.slot].start.store(0, Ordering::Release);
        reg.used[self.slot] = false;
        if !reg.used.iter().any(|u| *u) {
            uninstall(&mut reg);
        }
        // The region itself is unmapped when `self.region` drops.
    }
}

#[cfg(test)]
#[path = "fault_tests.rs"]
mod tests;
