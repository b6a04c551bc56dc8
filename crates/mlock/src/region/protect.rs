//! [`LockedRegion::protect`]: what the process may do with a region's
//! memory between uses (`mprotect`), as libsodium's `sodium_mprotect_*`.

use crate::Error;

use super::LockedRegion;
#[cfg(feature = "failpoints")]
use super::injected;

/// What the process may do with a region's memory, as
/// [`LockedRegion::protect`] sets it (`mprotect`; libsodium's
/// `sodium_mprotect_noaccess`, `_readonly` and `_readwrite`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Access {
    /// Neither reads nor writes: the process's own access faults
    /// (SIGSEGV, which kills it unless it handles the signal) and the
    /// kernel's on its behalf fails (`read(2)` into it: EFAULT), so a
    /// secret at rest is not read by a stray pointer or an over-read.
    /// Debuggers (`/proc/PID/mem`, ptrace) and core dumps still read it:
    /// see [`RegionBuilder::secret_memory`](super::RegionBuilder::secret_memory) and
    /// [`dont_dump`](super::RegionBuilder::dont_dump).
    NoAccess,
    /// Reads only.
    ReadOnly,
    /// Reads and writes: a writable region's access as built.
    ReadWrite,
}

impl Access {
    /// A region's access as built.
    pub(super) fn built(read_only: bool) -> Self {
        if read_only {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        }
    }

    pub(super) fn prot(self) -> rustix::mm::MprotectFlags {
        use rustix::mm::MprotectFlags;
        match self {
            Access::NoAccess => MprotectFlags::empty(),
            Access::ReadOnly => MprotectFlags::READ,
            Access::ReadWrite => MprotectFlags::READ | MprotectFlags::WRITE,
        }
    }

    /// The one of `self` and `other` that allows less.
    fn narrower(self, other: Access) -> Access {
        match (self, other) {
            (Access::NoAccess, _) | (_, Access::NoAccess) => Access::NoAccess,
            (Access::ReadOnly, _) | (_, Access::ReadOnly) => Access::ReadOnly,
            (Access::ReadWrite, Access::ReadWrite) => Access::ReadWrite,
        }
    }
}

impl LockedRegion {
    /// What the process may do with the memory now: the build's
    /// ([`Access::ReadOnly`] for a read-only region, else
    /// [`Access::ReadWrite`]), or what [`protect`](Self::protect) set.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Sets what the process may do with the memory (`mprotect` of the
    /// whole region). A secret kept [`Access::NoAccess`] between uses cannot
    /// be read by a stray pointer or an over-read, and stays locked and
    /// resident meanwhile; [`zero_on_drop`](super::RegionBuilder::zero_on_drop)
    /// opens it again to zero it. Takes `&mut self`, so no slice of the
    /// memory lives across the change.
    ///
    /// # Errors
    /// [`Error::BadFlags`] for [`Access::ReadWrite`] on a region built
    /// [`read_only`](super::RegionBuilder::read_only); the kernel's refusal of
    /// the `mprotect`, named: ENOMEM where making a private region that
    /// was never written writable again needs memory committed that
    /// strict overcommit (`vm.overcommit_memory=2`) refuses, or at
    /// `vm.max_map_count`. A refusal may leave part of the region changed
    /// (the kernel changes one mapping at a time, and `lock_range` of
    /// part of a region splits it): [`access`](Self::access) then says
    /// the narrower of the two, so no slice reaches a page it cannot.
    pub fn protect(&mut self, access: Access) -> Result<(), Error> {
        if access == Access::ReadWrite && self.read_only {
            return Err(Error::BadFlags {
                op: "LockedRegion::protect",
                why: "the region was built read_only: build it without read_only to write it",
            });
        }
        // Fail point `mlock::mprotect` plays the kernel's refusal after
        // it changed part of the region.
        #[cfg(feature = "failpoints")]
        let refused = fail::eval("mlock::mprotect", injected);
        #[cfg(not(feature = "failpoints"))]
        let refused = None;
        let changed = match refused {
            Some(e) => {
                // SAFETY: as below, the first page alone: a kernel that
                // changed the first mapping before it refused the next.
                let _ =
                    unsafe { rustix::mm::mprotect(self.as_ptr().cast(), self.page, access.prot()) };
                Err(e)
            }
            // SAFETY: the region's own pages, borrowed exclusively: no
            // reference into them is alive to see the change.
            None => unsafe { rustix::mm::mprotect(self.as_ptr().cast(), self.len, access.prot()) },
        };
        self.access = match changed {
            Ok(()) => access,
            Err(_) => self.access.narrower(access),
        };
        if let Some(z) = &mut self.zero_on_drop {
            z.reopen = self.access != Access::ReadWrite;
        }
        changed.map_err(|e| Error::from_sys("mprotect", self.len, e))
    }
}
