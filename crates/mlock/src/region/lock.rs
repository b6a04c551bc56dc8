//! [`LockedRegion`]'s locking and unlocking of its ranges, and its
//! kernel accounting.

use std::ffi::c_void;

use rustix::{
    io::Errno,
    mm::{Advice, madvise, mlock, munlock},
};

#[cfg(doc)]
use super::Pages;
use super::{LockPolicy, LockedRegion};
use crate::{Error, accounting};

impl LockedRegion {
    /// Locks `[offset, offset + len)` by the region's policy: `mlock` for
    /// `Populate` and `Unlocked`, `mlock2(MLOCK_ONFAULT)` for `OnFault`.
    /// A [`Pages::Huge`] region's pages are never swapped, and the kernel
    /// does not lock them (`mlock_fixup` skips hugetlb mappings) though
    /// `mlock` would count them against RLIMIT_MEMLOCK: this faults them
    /// in instead (`MADV_POPULATE_WRITE`, or `_READ` for a region not
    /// writable now; `mlock` before Linux 5.14), or, for `OnFault`, does
    /// nothing.
    ///
    /// # Errors
    /// [`Error::Misaligned`] for an offset or length that is not a
    /// multiple of the page size, [`Error::ZeroLength`],
    /// [`Error::OutOfRange`] past the region's end; [`Error::BadFlags`]
    /// for a region [`protect`](Self::protect)ed with
    /// [`Access::NoAccess`](crate::Access::NoAccess), whose pages cannot
    /// be faulted in (`lock_range_on_fault` can lock it); and the kernel's
    /// refusal, named ([`Error::MemlockLimit`] for RLIMIT_MEMLOCK).
    pub fn lock_range(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.lock_range_by(offset, len, self.policy)
    }

    /// Locks `[offset, offset + len)` as [`LockPolicy::OnFault`] does,
    /// whatever the region's policy: its pages are locked as they are
    /// touched (`mlock2(MLOCK_ONFAULT)`, Linux 4.4), none faulted in now.
    /// So a region built [`LockPolicy::Unlocked`] (as one too large for
    /// RLIMIT_MEMLOCK must be) can lock the part the limit allows,
    /// without touching it. The kernel counts the whole range against the
    /// limit at once, as for `OnFault`.
    ///
    /// # Errors
    /// As [`lock_range`](Self::lock_range).
    #[doc(alias = "MLOCK_ONFAULT")]
    pub fn lock_range_on_fault(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.lock_range_by(offset, len, LockPolicy::OnFault)
    }

    /// [`lock_range`](Self::lock_range) by `policy`.
    fn lock_range_by(&self, offset: usize, len: usize, policy: LockPolicy) -> Result<(), Error> {
        self.check_range(offset, len)?;
        if self.access == super::Access::NoAccess && policy != LockPolicy::OnFault {
            return Err(Error::BadFlags {
                op: "LockedRegion::lock_range",
                why: "the region is protected with Access::NoAccess, whose pages cannot be \
                      faulted in: protect(Access::ReadOnly) first, or lock_range_on_fault",
            });
        }
        fail_point!("mlock::mlock", |arg| Err(Error::from_lock(
            "mlock",
            len,
            super::injected(arg)
        )));
        let ptr = self.sub(offset);
        if self.hugetlb {
            return self.populate_hugetlb(ptr, len, policy);
        }
        if self.secret {
            // Locked by the kernel since its `mmap` (`secretmem_mmap` sets
            // VM_LOCKED), and out of `mlock`'s reach (its fault-in is
            // refused: ENOMEM): faulted in by a read of each page, but for
            // `OnFault`.
            if policy != LockPolicy::OnFault {
                for p in (0..len).step_by(self.page) {
                    let at = ptr.cast::<u8>().wrapping_add(p);
                    // SAFETY: inside our mapping, readable (secret memory
                    // is never built read-only, and one protected with
                    // `NoAccess` was refused above), and a read changes
                    // nothing.
                    unsafe { std::ptr::read_volatile(at) };
                }
            }
            return Ok(());
        }
        if policy == LockPolicy::OnFault {
            // SAFETY: the range is inside our mapping.
            unsafe { rustix::mm::mlock_with(ptr, len, rustix::mm::MlockFlags::ONFAULT) }
                .map_err(|e| Error::from_lock("mlock2(MLOCK_ONFAULT)", len, e))
        } else {
            // SAFETY: the range is inside our mapping.
            unsafe { mlock(ptr, len) }.map_err(|e| Error::from_lock("mlock", len, e))
        }
    }

    /// [`lock_range`](Self::lock_range) of a hugetlb region: faults the
    /// range in, or nothing for `OnFault`.
    fn populate_hugetlb(
        &self,
        ptr: *mut c_void,
        len: usize,
        policy: LockPolicy,
    ) -> Result<(), Error> {
        if policy == LockPolicy::OnFault {
            return Ok(());
        }
        let (advice, op) = if self.access != super::Access::ReadWrite {
            (Advice::LinuxPopulateRead, "madvise(MADV_POPULATE_READ)")
        } else {
            (Advice::LinuxPopulateWrite, "madvise(MADV_POPULATE_WRITE)")
        };
        // SAFETY: the range is inside our mapping; populating changes no
        // contents (a page first faulted in reads zeros, as it would).
        match unsafe { madvise(ptr, len, advice) } {
            Ok(()) => Ok(()),
            // Before Linux 5.14 (no such advice): `mlock` faults the pages
            // in, and counts them against the limit.
            Err(Errno::INVAL) => {
                // SAFETY: the range is inside our mapping.
                unsafe { mlock(ptr, len) }.map_err(|e| Error::from_lock("mlock", len, e))
            }
            Err(e) => Err(Error::from_sys(op, len, e)),
        }
    }

    /// Unlocks `[offset, offset + len)` (`munlock`).
    ///
    /// # Errors
    /// As [`lock_range`](Self::lock_range), but for the memlock limit.
    pub fn unlock_range(&self, offset: usize, len: usize) -> Result<(), Error> {
        self.check_range(offset, len)?;
        // SAFETY: the range is inside our mapping.
        unsafe { munlock(self.sub(offset), len) }.map_err(|e| Error::from_sys("munlock", len, e))
    }

    /// Unlocks the whole region in one `munlock`.
    pub fn unlock(&self) -> Result<(), Error> {
        self.unlock_range(0, self.len)
    }

    /// Unlocks the whole region `chunk` bytes per `munlock`, so that no
    /// single call holds the mmap lock for long (one `munlock` of a large
    /// region stalls every other mapping change of the process until it
    /// returns).
    ///
    /// # Errors
    /// [`Error::ZeroLength`] for a `chunk` of 0, [`Error::Misaligned`] for
    /// one shorter than the region that is not a multiple of the page size
    /// (one at least as long unlocks the region in one call), and the
    /// kernel's refusal of a `munlock`, named.
    pub fn unlock_chunked(&self, chunk: usize) -> Result<(), Error> {
        self.check_range(0, chunk.min(self.len))?;
        let mut offset = 0;
        while offset < self.len {
            let n = chunk.min(self.len - offset);
            self.unlock_range(offset, n)?;
            offset += n;
        }
        Ok(())
    }

    /// Bytes of the region resident and locked, by the kernel's account
    /// ([`accounting::smaps_locked`]);
    /// 0 for a [`Pages::Huge`] region, whose pages are never swapped.
    pub fn locked_bytes(&self) -> Result<u64, Error> {
        let start = self.as_ptr() as usize;
        accounting::smaps_locked(start, start + self.len).map_err(|source| Error::Sys {
            op: "reading /proc/self/smaps",
            source,
        })
    }

    /// Base pages (the system's page size) of the region resident in
    /// memory now (`mincore`): a resident huge page counts all of its own.
    pub fn resident_pages(&self) -> Result<usize, Error> {
        let base = accounting::page_size();
        let mut vec = vec![0u8; self.len.div_ceil(base)];
        // SAFETY: the range is our mapping and `vec` has one byte per base
        // page of it.
        let r = unsafe { libc::mincore(self.sub(0), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(Error::Sys {
                op: "mincore",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(vec.iter().filter(|v| **v & 1 != 0).count())
    }

    /// Changes the protection of `[offset, offset + len)` (`mprotect`):
    /// `FaultLockedRegion`'s alone.
    #[cfg(feature = "fault-locked")]
    pub(crate) fn protect_range(
        &self,
        offset: usize,
        len: usize,
        prot: rustix::mm::MprotectFlags,
    ) -> Result<(), Error> {
        self.check_range(offset, len)?;
        // SAFETY: the range is inside our mapping; as_slice's readers are
        // the lock-on-fault handler's, which unprotects a page they touch.
        unsafe { rustix::mm::mprotect(self.sub(offset), len, prot) }
            .map_err(|e| Error::from_sys("mprotect", len, e))
    }
}
