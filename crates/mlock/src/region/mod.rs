//! [`LockedRegion`]: a mapping locked into memory, unlocked and unmapped on
//! drop.

use std::{
    ffi::c_void,
    os::fd::{AsFd, BorrowedFd},
};

use mmbatch_mmap::{HugePageSize, HugePagesUnavailable, Mapping};
use rustix::{
    fs::SealFlags,
    io::Errno,
    mm::{Advice, MapFlags, ProtFlags, madvise},
};

use crate::{Error, accounting};

mod guarded;
mod lock;
mod protect;
mod secret;
mod zero;

pub use protect::Access;

use zero::ZeroOnDrop;

/// When a region's pages are locked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockPolicy {
    /// Fault in and lock every page now (`mlock`, or
    /// `mmap(MAP_LOCKED | MAP_POPULATE)` with
    /// [`map_locked`](RegionBuilder::map_locked)).
    #[default]
    Populate,
    /// Lock each page when it is first touched (`mlock2(MLOCK_ONFAULT)`).
    /// The whole range counts against RLIMIT_MEMLOCK from the build on,
    /// touched or not.
    OnFault,
    /// Map only; lock sub-ranges later with
    /// [`lock_range`](LockedRegion::lock_range).
    Unlocked,
}

/// Page size of a region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pages {
    /// Base pages, with transparent huge pages refused (`MADV_NOHUGEPAGE`).
    #[default]
    Base,
    /// Transparent huge pages requested (`MADV_HUGEPAGE`), the region
    /// aligned to 2 MiB.
    Transparent,
    /// hugetlb pages of the given size, from the pool's free pages
    /// (never grown by this crate). The kernel never swaps them, nor
    /// locks them: [`LockPolicy::Populate`] faults them in without
    /// `mlock` (so RLIMIT_MEMLOCK does not apply), and
    /// [`LockPolicy::OnFault`] maps only.
    Huge(HugePageSize),
}

impl Pages {
    /// The size lengths and offsets must be multiples of.
    pub fn size(self) -> usize {
        match self {
            Pages::Base | Pages::Transparent => accounting::page_size(),
            Pages::Huge(size) => size.bytes(),
        }
    }

    fn hugetlb(self) -> bool {
        matches!(self, Pages::Huge(_))
    }
}

/// Builds a [`LockedRegion`]; see [`LockedRegion::builder`].
#[derive(Debug)]
pub struct RegionBuilder<'fd> {
    len: usize,
    policy: LockPolicy,
    pages: Pages,
    file: Option<(BorrowedFd<'fd>, u64, bool)>,
    read_only: bool,
    map_locked: bool,
    dont_dump: bool,
    wipe_on_fork: bool,
    zero_on_drop: bool,
    pub(crate) secret: bool,
}

impl<'fd> RegionBuilder<'fd> {
    /// When pages are locked (default: [`LockPolicy::Populate`]).
    pub fn policy(mut self, policy: LockPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The page size (default: [`Pages::Base`]).
    pub fn pages(mut self, pages: Pages) -> Self {
        self.pages = pages;
        self
    }

    /// Maps `fd` from `offset` (page-aligned) instead of anonymous memory;
    /// `shared` selects `MAP_SHARED` over `MAP_PRIVATE`. With
    /// [`Pages::Huge`] the file must be on hugetlbfs, in huge pages of that
    /// size (a memfd made with `MFD_HUGETLB`, or a file on a hugetlbfs
    /// mount): any other is refused at build ([`Error::BadFlags`]).
    ///
    /// The file must reach into the region's last page (a regular file
    /// that ends before it is refused at build: an access to a page past
    /// its end would be SIGBUS; the tail of the page holding the end reads
    /// zeros).
    ///
    /// # Safety
    /// The region hands out `&[u8]` (and `&mut [u8]`) over the file's
    /// pages. While it lives, nothing may truncate the file (an access past
    /// the new end is SIGBUS), and nothing else may write the mapped range
    /// (another descriptor, mapping or process), shared mapping or private:
    /// a private mapping shows other writers' changes to a page until the
    /// region writes it. The obligation of `memmap2::Mmap::map`.
    pub unsafe fn file(mut self, fd: BorrowedFd<'fd>, offset: u64, shared: bool) -> Self {
        self.file = Some((fd, offset, shared));
        self
    }

    /// Backs the region with secret memory (`memfd_secret(2)`, Linux
    /// 5.14): pages the kernel takes out of its direct map and maps only
    /// in this process's page tables, so that the kernel does not read
    /// them for other processes (`/proc/PID/mem`, `process_vm_readv`,
    /// ptrace); they are never swapped (locked by the kernel whatever the
    /// [`policy`](Self::policy) says, against RLIMIT_MEMLOCK; `unlock`
    /// changes nothing), never in a core dump, and zeroed by the kernel
    /// when freed. The system cannot hibernate while one exists.
    /// `LockPolicy::Populate` faults the pages in by reading them: out of
    /// memory there is the OOM killer's, not an error.
    ///
    /// A forked child shares the memory (it is a file's, mapped shared),
    /// so [`wipe_on_fork`](Self::wipe_on_fork) is refused with it: the
    /// kernel refuses `MADV_WIPEONFORK` over shared memory, and
    /// `MADV_DONTFORK` would leave the child a hole where its copy of the
    /// region thinks it owns a mapping (its drop would unmap whatever the
    /// child mapped there since). Keep secret memory out of children by
    /// not forking while it is held, or by `exec` right after `fork`.
    ///
    /// Base pages only, not over a [`file`](Self::file), not
    /// [`read_only`](Self::read_only) ([`Error::BadFlags`] at build). A
    /// kernel without it (before 5.14, built without `CONFIG_SECRETMEM`,
    /// or before 6.5 booted without `secretmem.enable=1`), an architecture
    /// without it, and a seccomp filter refusing it (Docker's default
    /// profile) are [`Error::BadFlags`] at build, naming which. Each
    /// region is a file of its own, one descriptor while it is built.
    #[doc(alias = "memfd_secret")]
    pub fn secret_memory(mut self) -> Self {
        self.secret = true;
        self
    }

    /// Leaves the region out of the process's core dumps
    /// (`madvise(MADV_DONTDUMP)`): for keys and other secrets, which
    /// locking keeps out of swap but not out of a dump.
    pub fn dont_dump(mut self) -> Self {
        self.dont_dump = true;
        self
    }

    /// Gives a child made by `fork` zeros in place of the region's pages
    /// (`madvise(MADV_WIPEONFORK)`, Linux 4.14): for secrets, which a
    /// child would otherwise share, unlocked (the kernel does not pass
    /// `mlock` on across `fork`), and could write out to swap. The child
    /// sees a region of zeros at the same address; `exec` drops it anyway.
    /// Anonymous memory only: the kernel refuses it over a file or hugetlb
    /// pages, and [`build`](Self::build) with them fails
    /// ([`Error::BadFlags`]).
    #[doc(alias = "MADV_WIPEONFORK")]
    pub fn wipe_on_fork(mut self) -> Self {
        self.wipe_on_fork = true;
        self
    }

    /// Zeroes the region when it is dropped, before it is unmapped (with
    /// writes the compiler keeps: `zeroize`): for secrets, whose pages
    /// would otherwise go back to the kernel, or stay in a file, as they
    /// were. Anonymous memory is zeroed where it is resident (`mincore`):
    /// a page never touched holds nothing, and zeroing it would allocate
    /// it. A file's every page is zeroed, and the zeros reach the file
    /// if it is shared. Memory a forked child shares with its parent (a
    /// shared file, [`secret_memory`](Self::secret_memory)) is zeroed only
    /// by the process that built the region: a child dropping its copy of
    /// the region leaves the parent's secret alone. Not with
    /// [`read_only`](Self::read_only) ([`Error::BadFlags`] at build).
    ///
    /// What it does not reach: a page written to swap (only a locked page
    /// is kept out of it: not under [`LockPolicy::Unlocked`] or after an
    /// `unlock`); copies the kernel made and freed unzeroed (page
    /// migration by compaction, which moves locked pages too while
    /// `vm.compact_unevictable_allowed` is 1, its default, and khugepaged's
    /// collapse under [`Pages::Transparent`]: boot with `init_on_free=1`
    /// to have freed pages zeroed); an exit that runs no drop
    /// (`std::process::exit`, `abort`, a panic under `panic = "abort"`, a
    /// signal); and a region left [`protect`](LockedRegion::protect)ed
    /// whose opening the kernel refuses in the drop (the `mprotect` back
    /// to writable: strict overcommit, `vm.max_map_count`), which is left
    /// unzeroed rather than fault.
    pub fn zero_on_drop(mut self) -> Self {
        self.zero_on_drop = true;
        self
    }

    /// Maps read-only (`PROT_READ`).
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// With [`LockPolicy::Populate`], locks through
    /// `mmap(MAP_LOCKED | MAP_POPULATE)` instead of `mlock` after mapping,
    /// as programs that lock at map time do. The pages are then faulted in
    /// before the page-size advice applies: with [`Pages::Transparent`]
    /// they are base pages, and with [`Pages::Base`] under THP "always"
    /// they may be huge. The kernel does not report a fault-in that falls
    /// short (a memory cgroup at its limit: `mmap(2)`, "MAP_POPULATE"):
    /// the pages it left out are locked as they are first touched, and
    /// [`resident_pages`](LockedRegion::resident_pages) tells.
    pub fn map_locked(mut self, yes: bool) -> Self {
        self.map_locked = yes;
        self
    }

    /// Maps and locks the region. Under `mlockall(MCL_FUTURE)` the whole
    /// reservation is locked as it is mapped: its guard pages (and, with
    /// [`Pages::Transparent`], up to 2 MiB of alignment) counts against
    /// RLIMIT_MEMLOCK too.
    ///
    /// # Errors
    /// [`Error::ZeroLength`], or [`Error::Misaligned`] for a length or
    /// file offset that is not a multiple of the page size;
    /// [`Error::BadFlags`] for options that do not go together;
    /// [`Error::FileTooShort`]; [`Error::FileSealed`] for a shared,
    /// writable mapping of a file sealed against writes; and each refusal
    /// of the kernel's, named:
    /// [`Error::MemlockLimit`] (RLIMIT_MEMLOCK), [`Error::MapCountLimit`]
    /// (`vm.max_map_count`), [`Error::HugePagesNotReserved`],
    /// [`Error::OutOfMemory`], [`Error::TooLarge`], [`Error::NotPermitted`],
    /// [`Error::Sys`].
    pub fn build(self) -> Result<LockedRegion, Error> {
        let page = self.pages.size();
        if self.len == 0 {
            return Err(Error::ZeroLength);
        }
        if self.len % page != 0 {
            return Err(Error::Misaligned {
                what: "length",
                value: self.len,
                page_size: page,
            });
        }
        self.check_options()?;
        if self.secret && self.file.is_none() {
            let fd = secret::memfd(self.len)?;
            let mut over = self;
            over.file = Some((fd.as_fd(), 0, true));
            // The mapping holds the file; the descriptor goes.
            return over.build_checked();
        }
        self.build_checked()
    }

    /// [`build`](Self::build) once the options are checked (and secret
    /// memory has its file).
    fn build_checked(self) -> Result<LockedRegion, Error> {
        let page = self.pages.size();
        if let Some((fd, offset, _)) = self.file {
            if offset % page as u64 != 0 {
                return Err(Error::Misaligned {
                    what: "offset",
                    value: offset as usize,
                    page_size: page,
                });
            }
            let end = i64::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i64::try_from(self.len).ok()?));
            let stat = rustix::fs::fstat(fd).map_err(|e| Error::from_sys("fstat", 0, e))?;
            let huge_fs = mmbatch_mmap::hugetlbfs_page_size(fd).ok().flatten();
            // A file mapping's pages are its file's: the kernel refuses
            // MAP_HUGETLB over any other file (a bare EINVAL), and maps a
            // hugetlbfs file in its own huge pages whatever was asked.
            if let Pages::Huge(size) = self.pages {
                if huge_fs != Some(size.bytes()) {
                    return Err(Error::BadFlags {
                        op: "RegionBuilder::build",
                        why: "Pages::Huge over a file needs a file on hugetlbfs of that huge page \
                              size (a memfd made with MFD_HUGETLB, or a file on a hugetlbfs \
                              mount); map any other file with Pages::Base or Pages::Transparent",
                    });
                }
            }
            // A writable mapping of a hugetlbfs file extends the file to
            // its end (`hugetlbfs_file_mmap`), as a memfd made for it and
            // never truncated relies on: not checked.
            let grows = !self.read_only && huge_fs.is_some();
            let regular = rustix::fs::FileType::from_raw_mode(stat.st_mode)
                == rustix::fs::FileType::RegularFile
                && !grows;
            // The last page may hold the file's end: its tail reads zeros.
            let mapped = stat.st_size.saturating_add(page as i64 - 1) / page as i64 * page as i64;
            match end {
                Some(end) if !regular || end <= mapped => {}
                _ => {
                    return Err(Error::FileTooShort {
                        file_len: u64::try_from(stat.st_size).unwrap_or(0),
                        offset,
                        len: self.len,
                    });
                }
            }
        }
        let prot = if self.read_only {
            ProtFlags::READ
        } else {
            ProtFlags::READ | ProtFlags::WRITE
        };
        let mut region = if self.pages.hugetlb() {
            self.map_hugetlb(prot)?
        } else {
            self.map_guarded(prot)?
        };
        // From here on, Drop unmaps on every error path.
        region.policy = self.policy;
        region.secret = self.secret;
        if !self.pages.hugetlb() {
            let advice = match self.pages {
                Pages::Transparent => Advice::LinuxHugepage,
                _ => Advice::LinuxNoHugepage,
            };
            // SAFETY: the range is our own mapping; the advice changes no
            // contents.
            let advised = unsafe { madvise(region.sub(0), region.len, advice) };
            // Fail point `mlock::madvise` plays a kernel without
            // transparent huge pages (EINVAL).
            #[cfg(feature = "failpoints")]
            let advised = match fail::eval("mlock::madvise", |_| ()) {
                Some(()) => Err(rustix::io::Errno::INVAL),
                None => advised,
            };
            match advised {
                Ok(()) => {}
                // A kernel without transparent huge pages refuses the
                // advice, and has no huge page to refuse.
                Err(rustix::io::Errno::INVAL) if self.pages == Pages::Base => {}
                Err(rustix::io::Errno::INVAL) => return Err(Error::NO_THP),
                Err(e) => return Err(Error::from_sys("madvise", region.len, e)),
            }
        }
        if self.dont_dump {
            // SAFETY: the range is our own mapping; the advice changes no
            // contents.
            unsafe { madvise(region.sub(0), region.len, Advice::LinuxDontDump) }
                .map_err(|e| Error::from_sys("madvise(MADV_DONTDUMP)", region.len, e))?;
        }
        if self.wipe_on_fork {
            // SAFETY: the range is our own mapping; the advice changes no
            // contents (only a child's).
            match unsafe { madvise(region.sub(0), region.len, Advice::LinuxWipeOnFork) } {
                Ok(()) => {}
                // `check_options` let only private anonymous memory here.
                Err(Errno::INVAL) => return Err(Error::NO_WIPEONFORK),
                Err(e) => return Err(Error::from_sys("madvise(MADV_WIPEONFORK)", region.len, e)),
            }
        }
        match self.policy {
            // Mapped with MAP_LOCKED | MAP_POPULATE (`flags`, for every
            // kind of page): locked already.
            // (Secret memory refuses MAP_POPULATE's fault-in without a
            // word: `lock_range` reads it in.)
            LockPolicy::Populate if self.map_locked && !self.secret => {}
            LockPolicy::Populate => region.lock_range(0, region.len)?,
            LockPolicy::OnFault => region.lock_range(0, region.len)?,
            LockPolicy::Unlocked => {}
        }
        if self.zero_on_drop {
            // Secret memory as anonymous: its pages never touched are
            // no one's (zeroing them would allocate them).
            let anonymous = self.file.is_none() || self.secret;
            let shared = matches!(self.file, Some((_, _, true)));
            region.zero_on_drop = Some(ZeroOnDrop::new(&region, anonymous, shared));
        }
        Ok(region)
    }

    /// Refuses options that do not go together, before anything is
    /// mapped.
    fn check_options(&self) -> Result<(), Error> {
        let bad = |why| {
            Err(Error::BadFlags {
                op: "RegionBuilder::build",
                why,
            })
        };
        if self.secret {
            let why = if self.file.is_some() {
                Some("secret_memory makes the region's own file: not with file")
            } else if self.pages != Pages::Base {
                Some("secret_memory is in base pages: use Pages::Base")
            } else if self.read_only {
                Some("secret_memory starts as zeros: a read-only region of it holds nothing")
            } else if self.wipe_on_fork {
                Some(
                    "secret_memory is shared with a forked child, and the kernel refuses \
                     MADV_WIPEONFORK over shared memory: leave wipe_on_fork out, and do not fork \
                     while the secret is held (or exec at once)",
                )
            } else {
                None
            };
            if let Some(why) = why {
                return bad(why);
            }
        } else if self.wipe_on_fork && self.file.is_some() {
            return bad("wipe_on_fork needs anonymous memory: the kernel refuses \
                        MADV_WIPEONFORK over a file (a child could read the file anyway)");
        }
        if self.wipe_on_fork && self.pages.hugetlb() {
            return bad(
                "wipe_on_fork needs Pages::Base or Pages::Transparent: the kernel \
                        refuses MADV_WIPEONFORK over hugetlb pages, which it maps as a file's",
            );
        }
        if self.zero_on_drop && self.read_only {
            return bad(
                "zero_on_drop writes the region when it is dropped: drop read_only, \
                        or zero_on_drop (a read-only anonymous region holds only zeros)",
            );
        }
        Ok(())
    }

    fn flags(&self) -> MapFlags {
        let mut flags = match self.file {
            Some((_, _, true)) => MapFlags::SHARED,
            _ => MapFlags::PRIVATE,
        };
        if self.map_locked && self.policy == LockPolicy::Populate {
            // hugetlb pages are never locked (`mlock_fixup` skips them),
            // and MAP_LOCKED would check RLIMIT_MEMLOCK for nothing.
            flags |= if self.pages.hugetlb() {
                MapFlags::POPULATE
            } else {
                MapFlags::LOCKED | MapFlags::POPULATE
            };
        }
        flags
    }

    fn map_hugetlb(&self, prot: ProtFlags) -> Result<LockedRegion, Error> {
        let Pages::Huge(huge) = self.pages else {
            unreachable!("map_hugetlb is called for hugetlb pages only")
        };
        let size = huge.bytes();
        let needed = self.len / size;
        let unavailable =
            |free| Error::HugePagesNotReserved(HugePagesUnavailable::new(huge, needed, free));
        // The kernel's own reservation at mmap says whether the pool has
        // the pages (ENOMEM, below): sysfs's count reads 0 where a
        // container hides it, surplus pages (`nr_overcommit_hugepages`)
        // are not in it, and a file's pages may exist already.
        let flags = self.flags() | huge.map_flags();
        fail_point!("mlock::mmap", |arg| Err(self.map_error(injected(arg))));
        let mapped = match self.file {
            // SAFETY: the builder's caller took on the file's obligations
            // (`RegionBuilder::file`).
            Some((fd, offset, _)) => unsafe {
                Mapping::file(fd.as_fd(), offset, self.len, prot, flags)
            },
            None => Mapping::new(self.len, prot, flags),
        };
        let mapped = mapped.map_err(|e| {
            hugetlb_refusal(e, |n| match n {
                Errno::NOMEM => unavailable(huge.available_pages()),
                n => self.map_error(n),
            })
        })?;
        Ok(LockedRegion {
            mapping: mapped,
            offset: 0,
            len: self.len,
            policy: LockPolicy::Unlocked,
            page: size,
            hugetlb: true,
            secret: false,
            read_only: self.read_only,
            access: Access::built(self.read_only),
            zero_on_drop: None,
        })
    }

    /// `mmap(MAP_FIXED)` of the file, or of anonymous memory, at `addr`.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be memory a `Mapping` this region owns
    /// covers (it is replaced, and unmapped with that `Mapping`).
    unsafe fn map(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: ProtFlags,
        flags: MapFlags,
    ) -> Result<(), Errno> {
        match self.file {
            // SAFETY: the caller vouches for the MAP_FIXED range; the
            // builder's caller for the file (`RegionBuilder::file`).
            Some((fd, offset, _)) => unsafe {
                rustix::mm::mmap(addr, len, prot, flags, fd.as_fd(), offset)
            },
            // SAFETY: as above.
            None => unsafe { rustix::mm::mmap_anonymous(addr, len, prot, flags) },
        }
        .map(drop)
    }

    fn map_error(&self, e: Errno) -> Error {
        if e == Errno::PERM && self.writes_a_sealed_file() {
            return Error::FileSealed {
                op: "mmap",
                source: e.into(),
            };
        }
        if self.secret {
            // Secret memory's mapping is locked: its EAGAIN is the limit.
            Error::from_lock("mmap(secret memory)", self.len, e)
        } else if self.map_locked && self.policy == LockPolicy::Populate {
            Error::from_lock("mmap(MAP_LOCKED)", self.len, e)
        } else {
            Error::from_sys("mmap", self.len, e)
        }
    }

    /// Whether the region maps its file shared while the file's seals
    /// refuse that mapping: `F_SEAL_FUTURE_WRITE` refuses a writable one,
    /// and `F_SEAL_WRITE` any before Linux 6.7 (a writable one since). The
    /// kernel's EPERM for it (`memfd_check_seals_mmap`) is then the seal's,
    /// not a refusal to lock.
    fn writes_a_sealed_file(&self) -> bool {
        let Some((fd, _, true)) = self.file else {
            return false;
        };
        rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| {
            s.contains(SealFlags::WRITE) || (s.contains(SealFlags::FUTURE_WRITE) && !self.read_only)
        })
    }
}

/// The errno a fail point (`mlock::mmap`, `mlock::mlock`) injects:
/// `ENOMEM` unless its argument names `EAGAIN` or `EPERM`.
// Only the fail points call it; they compile to nothing outside tests.
#[allow(dead_code)]
fn injected(arg: Option<String>) -> Errno {
    match arg.as_deref() {
        Some("EAGAIN") => Errno::AGAIN,
        Some("EPERM") => Errno::PERM,
        Some("EINVAL") => Errno::INVAL,
        Some("ENOSYS") => Errno::NOSYS,
        _ => Errno::NOMEM,
    }
}

/// A refused hugetlb `Mapping`'s error: a page size the kernel has no
/// pool for comes named by the mapping, with no errno, and is kept as it
/// is; the rest are classified by errno (`classify`).
fn hugetlb_refusal(e: std::io::Error, classify: impl FnOnce(Errno) -> Error) -> Error {
    if e.raw_os_error().is_none() && e.kind() == std::io::ErrorKind::Unsupported {
        Error::Sys {
            op: "mmap",
            source: e,
        }
    } else {
        classify(errno(&e))
    }
}

/// The errno of a refused `Mapping`.
fn errno(e: &std::io::Error) -> Errno {
    Errno::from_io_error(e).unwrap_or(Errno::INVAL)
}

/// A mapping locked into memory: unlocked and unmapped when dropped (also
/// while unwinding from a panic).
///
/// Dropped at `vm.max_map_count` where unmapping must split a mapping
/// the kernel merged, the range is leaked and its pages released as far
/// as the kernel lets, as `mmbatch_mmap::Mapping`'s drop does (locked
/// pages from Linux 5.18, the range still counted against
/// RLIMIT_MEMLOCK).
///
/// ```no_run
/// use mmbatch_mlock::{LockPolicy, LockedRegion};
///
/// # fn main() -> Result<(), mmbatch_mlock::Error> {
/// // 1 MiB that reclaim cannot evict, locked as each page is touched.
/// let mut buf = LockedRegion::builder(1 << 20).policy(LockPolicy::OnFault).build()?;
/// buf.as_mut_slice().unwrap()[0] = 1;
/// let locked = buf.locked_bytes()?;
/// assert!(locked > 0 && locked < 1 << 20); // only the page touched
/// // Unlock in 256 KiB steps, so no single munlock holds the mmap lock long.
/// buf.unlock_chunked(256 << 10)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockedRegion {
    /// Zeroes the region in its drop, which runs before `mapping`'s (the
    /// fields' order): [`RegionBuilder::zero_on_drop`].
    zero_on_drop: Option<ZeroOnDrop>,
    /// The whole reservation (guards and slack included) or hugetlb
    /// mapping: unmapping it releases the lock with the pages.
    mapping: Mapping,
    /// Where the region starts in `mapping`.
    offset: usize,
    len: usize,
    policy: LockPolicy,
    page: usize,
    /// hugetlb pages, which the kernel neither swaps nor locks.
    hugetlb: bool,
    /// Secret memory, which the kernel locks itself and `mlock` cannot
    /// fault in ([`RegionBuilder::secret_memory`]).
    secret: bool,
    read_only: bool,
    /// What [`protect`](Self::protect) last set, or the build's.
    access: Access,
}

impl LockedRegion {
    /// Whether its drop zeroes it ([`RegionBuilder::zero_on_drop`]).
    #[cfg(feature = "fault-locked")]
    pub(crate) fn zeroes_on_drop(&self) -> bool {
        self.zero_on_drop.is_some()
    }

    /// Leaves the region as it is when dropped, `zero_on_drop` or not.
    #[cfg(feature = "fault-locked")]
    pub(crate) fn forget_zeroing(&mut self) {
        // Forgotten, not dropped: its drop is the zeroing.
        std::mem::forget(self.zero_on_drop.take());
    }

    /// A builder for a region of `len` bytes.
    pub fn builder<'fd>(len: usize) -> RegionBuilder<'fd> {
        RegionBuilder {
            len,
            policy: LockPolicy::Populate,
            pages: Pages::Base,
            file: None,
            read_only: false,
            map_locked: false,
            dont_dump: false,
            wipe_on_fork: false,
            zero_on_drop: false,
            secret: false,
        }
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr().wrapping_add(self.offset)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Zeroes the region if it was built to
    /// ([`zero_on_drop`](RegionBuilder::zero_on_drop)) and unmaps it,
    /// returning the kernel's refusal, which a drop cannot say: at
    /// `vm.max_map_count`, where unmapping must split a mapping the kernel
    /// merged with a neighbour ([`Error::MapCountLimit`]). Refused, the
    /// range is handed to a drop as the region's own drop would be (which
    /// tries once more, and may leave it mapped, its pages released as
    /// far as the kernel lets), and the caller knows.
    ///
    /// # Errors
    /// The kernel's refusal of the `munmap`, named.
    pub fn close(self) -> Result<(), Error> {
        let region_len = self.len;
        let LockedRegion {
            zero_on_drop,
            mapping,
            ..
        } = self;
        // Zeroed first, as a drop does.
        drop(zero_on_drop);
        // The mapping's recorded protection is the build's; `protect` may
        // have changed the region's since, and the guards never had it.
        let (ptr, len, _) = mapping.into_raw_parts();
        // Fail point `mlock::munmap` plays the kernel's refusal.
        #[cfg(feature = "failpoints")]
        let refused = fail::eval("mlock::munmap", injected);
        #[cfg(not(feature = "failpoints"))]
        let refused = None;
        let unmapped = match refused {
            Some(e) => Err(e),
            // SAFETY: the whole mapping, ours, and nothing borrows it: the
            // region is consumed.
            None => unsafe { rustix::mm::munmap(ptr.as_ptr().cast(), len) },
        };
        unmapped.map_err(|e| {
            // SAFETY: refused, the range is still ours and mapped (with
            // at least no access): a `Mapping` again, whose drop handles
            // it as a region's drop.
            drop(unsafe { Mapping::from_raw_parts(ptr, len, ProtFlags::empty()) });
            Error::from_sys("munmap", region_len, e)
        })
    }

    /// When its pages are locked: the builder's
    /// [`policy`](RegionBuilder::policy).
    pub fn policy(&self) -> LockPolicy {
        self.policy
    }

    /// The page size of the region.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// The memory.
    ///
    /// # Panics
    /// If [`protect`](Self::protect) made it [`Access::NoAccess`]: no reference
    /// to memory the process cannot read is handed out.
    pub fn as_slice(&self) -> &[u8] {
        assert!(
            self.access != Access::NoAccess,
            "LockedRegion::as_slice on a region protected with Access::NoAccess: \
             protect(Access::ReadOnly) first"
        );
        // SAFETY: [ptr, ptr + len) is a readable mapping we own for &self's
        // lifetime (`protect`, which could change that, takes `&mut self`).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// Whether the region was built writable (not
    /// [`read_only`](RegionBuilder::read_only)), whatever
    /// [`protect`](Self::protect) has made it since: that is
    /// [`access`](Self::access).
    pub fn writable(&self) -> bool {
        !self.read_only
    }

    /// The memory, writable; `None` for a region built read-only, or one
    /// [`protect`](Self::protect) made other than [`Access::ReadWrite`].
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if self.access != Access::ReadWrite {
            return None;
        }
        // SAFETY: a writable mapping we own, borrowed exclusively.
        Some(unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len) })
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), Error> {
        for (what, value) in [("offset", offset), ("length", len)] {
            if value % self.page != 0 {
                return Err(Error::Misaligned {
                    what,
                    value,
                    page_size: self.page,
                });
            }
        }
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::OutOfRange {
                offset,
                len,
                region: self.len,
            });
        }
        Ok(())
    }

    /// The address `offset` bytes into the region (callers checked
    /// `offset < len`).
    fn sub(&self, offset: usize) -> *mut c_void {
        self.as_ptr().wrapping_add(offset).cast()
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    /// A size the kernel lacks keeps the mapping's message; an errno,
    /// even one of the same kind (EOPNOTSUPP), is classified.
    #[test]
    fn a_missing_huge_page_size_keeps_its_message() {
        let named = std::io::Error::new(std::io::ErrorKind::Unsupported, "no 64 kB huge pages");
        let e = hugetlb_refusal(named, |_| panic!("classified"));
        assert!(e.to_string().contains("no 64 kB huge pages"), "{e}");
        for (raw, want) in [
            (libc::ENOMEM, Errno::NOMEM),
            (libc::EOPNOTSUPP, Errno::OPNOTSUPP),
        ] {
            let mut got = None;
            hugetlb_refusal(std::io::Error::from_raw_os_error(raw), |n| {
                got = Some(n);
                Error::ZeroLength
            });
            assert_eq!(got, Some(want));
        }
    }
}
