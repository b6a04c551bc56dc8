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
//! installed on top of ours meanwhile (then ours stays, chaining).
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

use nix::sys::mman::ProtFlags;

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
    prot: AtomicUsize,
    /// `op << 32 | errno` of the first failure, or 0.
    error: AtomicU64,
    /// The process's mapping count when it failed.
    maps_at_error: AtomicUsize,
    faults: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    batch: AtomicUsize::new(0),
    prot: AtomicUsize::new(0),
    error: AtomicU64::new(0),
    maps_at_error: AtomicUsize::new(0),
    faults: AtomicU64::new(0),
};

static SLOTS: [Slot; MAX_FAULT_REGIONS] = [EMPTY; MAX_FAULT_REGIONS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// Registration: which slots are taken, and whether our handler is in.
static REGISTRY: Mutex<[bool; MAX_FAULT_REGIONS]> = Mutex::new([false; MAX_FAULT_REGIONS]);

/// The action that was installed before ours. Written (under `REGISTRY`)
/// before our handler is installed and read by the handler only while it
/// is installed.
struct OldAction {
    valid: AtomicBool,
    action: std::cell::UnsafeCell<MaybeUninit<libc::sigaction>>,
}

// SAFETY: `action` is written only under REGISTRY while our handler is not
// installed (so no handler reads it), and only read while it is installed.
unsafe impl Sync for OldAction {}

static OLD: OldAction = OldAction {
    valid: AtomicBool::new(false),
    action: std::cell::UnsafeCell::new(MaybeUninit::uninit()),
};

/// This thread's errno (reading it allocates nothing: signal-safe).
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The action installed before ours.
///
/// # Safety
/// - `OLD.valid` was observed true (with Acquire), and our handler is still
///   installed, so nothing writes `OLD.action`.
unsafe fn old_action() -> &'static libc::sigaction {
    // SAFETY: the static lives forever; no writer runs (caller's promise).
    let slot = unsafe { &*OLD.action.get() };
    // SAFETY: `valid` is set only after the write completed.
    unsafe { slot.assume_init_ref() }
}

/// The SIGSEGV handler.
extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let siginfo = unsafe { &*info };
    // SAFETY: SIGSEGV's siginfo carries the faulting address.
    let addr = unsafe { siginfo.si_addr() } as usize;
    for slot in &SLOTS {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= slot.end.load(Ordering::Acquire) {
            continue;
        }
        handle(slot, addr, start);
        return;
    }
    chain(sig, info, ctx);
}

/// Makes the faulting page accessible and locks it, then the next
/// `batch - 1` pages of the region.
fn handle(slot: &Slot, addr: usize, start: usize) {
    let page = PAGE.load(Ordering::Relaxed);
    let end = slot.end.load(Ordering::Acquire);
    let prot = slot.prot.load(Ordering::Relaxed) as libc::c_int;
    let p = addr & !(page - 1);
    // SAFETY: [p, p + page) lies inside a region we mapped.
    if unsafe { libc::mprotect(p as *mut c_void, page, prot) } != 0 {
        record(slot, OP_MPROTECT, errno());
        // Never fault forever: open the whole region in one call.
        // SAFETY: [start, end) is the region we mapped.
        if unsafe { libc::mprotect(start as *mut c_void, end - start, prot) } != 0 {
            // Cannot even do that: let the re-executed access take the
            // default action rather than loop.
            // SAFETY: resets SIGSEGV to SIG_DFL; no memory is involved.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        }
        return;
    }
    // SAFETY: [p, p + page) is now accessible memory we mapped.
    if unsafe { libc::mlock(p as *const c_void, page) } != 0 {
        record(slot, OP_MLOCK, errno());
        return;
    }
    let batch = slot.batch.load(Ordering::Relaxed);
    let n = (batch - 1).min((end - p - page) / page);
    if n > 0 {
        let q = p + page;
        // Speculative: a failure here leaves those pages to fault alone.
        // SAFETY: [q, q + n * page) lies inside the region.
        if unsafe { libc::mprotect(q as *mut c_void, n * page, prot) } == 0 {
            // SAFETY: as above, now accessible.
            unsafe { libc::mlock(q as *const c_void, n * page) };
        }
    }
    slot.faults.fetch_add(1, Ordering::Relaxed);
}

fn record(slot: &Slot, op: u64, errno: i32) {
    // Counted now: the fallback below merges mappings back.
    slot.maps_at_error
        .store(accounting::map_count(), Ordering::Relaxed);
    let _ = slot.error.compare_exchange(
        0,
        op << 32 | errno as u32 as u64,
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// Passes a fault that is not ours to the previous action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    if !OLD.valid.load(Ordering::Acquire) {
        // SAFETY: resets SIGSEGV to SIG_DFL; the access re-faults and dies.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    // SAFETY: `valid` was just observed, and our handler is running, so it
    // is installed and `action` is not being written.
    let old = unsafe { old_action() };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: reinstalls the previous (default) action; the access
        // re-faults and takes it.
        unsafe { libc::sigaction(sig, old, std::ptr::null_mut()) };
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

fn install() -> Result<(), Error> {
    // SAFETY: an all-zero sigaction is a valid empty value.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = on_segv as *const () as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: sa_mask is ours to initialise.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    let mut old = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: both pointers are valid; `old` is written by the kernel.
    if unsafe { libc::sigaction(libc::SIGSEGV, &new, old.as_mut_ptr()) } != 0 {
        return Err(Error::Sys {
            op: "sigaction",
            source: std::io::Error::last_os_error(),
        });
    }
    // Our handler may run from here on, but only reads OLD once `valid`
    // is set; a fault outside our regions in between falls back to the
    // default action.
    // SAFETY: sigaction succeeded, so it filled `old`.
    let old = unsafe { old.assume_init() };
    // SAFETY: no handler reads `action` until `valid` is set below, and
    // REGISTRY serialises writers.
    unsafe { (*OLD.action.get()).write(old) };
    OLD.valid.store(true, Ordering::Release);
    Ok(())
}

fn uninstall() {
    let mut current = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: queries the current action into `current`.
    unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: sigaction filled it.
    let current = unsafe { current.assume_init() };
    if current.sa_sigaction != on_segv as *const () as usize {
        return; // someone installed a handler over ours: keep chaining
    }
    // SAFETY: we installed (so `valid` is set) and hold REGISTRY, so
    // nothing writes `action`.
    let old = unsafe { old_action() };
    // SAFETY: restores the previous action.
    unsafe { libc::sigaction(libc::SIGSEGV, old, std::ptr::null_mut()) };
    OLD.valid.store(false, Ordering::Release);
}

/// A region mapped `PROT_NONE` whose pages a SIGSEGV handler makes
/// accessible and locks, `batch` pages per fault (seed 003's alternative to
/// `MLOCK_ONFAULT`).
#[derive(Debug)]
pub struct FaultLockedRegion {
    region: LockedRegion,
    slot: usize,
}

impl FaultLockedRegion {
    /// Builds the region from `builder` (its lock policy is replaced by
    /// [`LockPolicy::Unlocked`]), protects it `PROT_NONE`, and registers it
    /// with the handler, installing the handler if it is the first.
    pub fn new(builder: RegionBuilder<'_>, batch: usize) -> Result<Self, Error> {
        if batch == 0 {
            return Err(Error::ZeroBatch);
        }
        let region = builder.policy(LockPolicy::Unlocked).build()?;
        let prot = if region.writable() {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        region.protect(0, region.len(), ProtFlags::PROT_NONE)?;
        PAGE.store(accounting::page_size(), Ordering::Relaxed);
        let mut used = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let slot = used
            .iter()
            .position(|u| !u)
            .ok_or(Error::TooManyFaultRegions {
                max: MAX_FAULT_REGIONS,
            })?;
        if !used.iter().any(|u| *u) {
            install()?;
        }
        used[slot] = true;
        let s = &SLOTS[slot];
        let start = region.as_ptr() as usize;
        s.end.store(start + region.len(), Ordering::Relaxed);
        s.batch.store(batch, Ordering::Relaxed);
        s.prot.store(prot as usize, Ordering::Relaxed);
        s.error.store(0, Ordering::Relaxed);
        s.faults.store(0, Ordering::Relaxed);
        s.start.store(start, Ordering::Release);
        Ok(Self { region, slot })
    }

    /// Reads byte `offset`, faulting its page in (and locking it with its
    /// batch) on first touch. An error recorded by the handler for this
    /// region is returned here; the read itself still happened.
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
        let e = SLOTS[self.slot].error.load(Ordering::Acquire);
        if e != 0 {
            let errno = nix::Error::from_raw(e as u32 as i32);
            let page = accounting::page_size();
            let op = if e >> 32 == OP_MPROTECT {
                "mprotect"
            } else {
                "mlock"
            };
            let maps = SLOTS[self.slot].maps_at_error.load(Ordering::Relaxed);
            let max = accounting::max_map_count();
            let cause = if errno == nix::Error::ENOMEM && max > 0 && maps + 2 >= max {
                Error::MapCountLimit { op, maps, max }
            } else if op == "mprotect" {
                Error::from_sys(op, page, errno)
            } else {
                Error::from_lock(op, page, errno)
            };
            return Err(Error::FaultHandler {
                cause: Box::new(cause),
            });
        }
        Ok(v)
    }

    /// Faults the handler resolved for this region.
    pub fn faults(&self) -> u64 {
        SLOTS[self.slot].faults.load(Ordering::Relaxed)
    }

    /// The underlying region.
    pub fn region(&self) -> &LockedRegion {
        &self.region
    }
}

impl Drop for FaultLockedRegion {
    fn drop(&mut self) {
        let mut used = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        SLOTS[self.slot].start.store(0, Ordering::Release);
        used[self.slot] = false;
        if !used.iter().any(|u| *u) {
            uninstall();
        }
        // The region itself is unmapped when `self.region` drops.
    }
}
