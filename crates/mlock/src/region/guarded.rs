//! Base and THP regions: a PROT_NONE reservation with guards, the region
//! made accessible in its middle, and the careful return of a reservation
//! whose `MAP_FIXED` failed late.

use std::{ffi::c_void, os::fd::AsFd};

use mmbatch_mmap::Mapping;
use rustix::{
    io::Errno,
    mm::{MapFlags, MprotectFlags, ProtFlags},
};

use super::{Access, LockPolicy, LockedRegion, Pages, RegionBuilder, errno};
use crate::{Error, accounting};

impl RegionBuilder<'_> {
    /// Base or THP pages: a PROT_NONE reservation with a guard page (or
    /// alignment slack) on each side, the region made accessible in its
    /// middle. The guards keep the kernel from merging the region's mapping
    /// with a neighbour, so its smaps entry is its own.
    ///
    /// Anonymous memory is made accessible with `mprotect`, which fails
    /// without unmapping anything. A file, or `MAP_LOCKED`, needs
    /// `mmap(MAP_FIXED)` over the middle, and before Linux 6.12 a
    /// `MAP_FIXED` that fails late (the commit charge, a file's `mmap`) has
    /// already unmapped what it replaces: see
    /// [`release_after_failed_map`](Self::release_after_failed_map).
    pub(super) fn map_guarded(&self, prot: ProtFlags) -> Result<LockedRegion, Error> {
        let page = accounting::page_size();
        let align = if self.pages == Pages::Transparent {
            2 << 20
        } else {
            page
        };
        // The region, a guard page each side, and the alignment slack.
        let total = self
            .len
            .checked_add(page + align)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(Error::TooLarge { len: self.len })?;
        fail_point!("mlock::mmap", |arg| Err(
            self.map_error(super::injected(arg))
        ));
        // Not MAP_NORESERVE: a PROT_NONE private mapping is never charged,
        // and the middle made writable by `mprotect` is then charged as a
        // writable `mmap` would be.
        // Under mlockall(MCL_FUTURE) the reservation is locked, and
        // counts against RLIMIT_MEMLOCK: EAGAIN is that limit.
        let reservation = Mapping::new(total, ProtFlags::empty(), MapFlags::PRIVATE).map_err(
            |e| match errno(&e) {
                rustix::io::Errno::AGAIN => {
                    Error::from_lock("mmap", total, rustix::io::Errno::AGAIN)
                }
                e => Error::from_sys("mmap", total, e),
            },
        )?;
        let base = reservation.as_ptr() as usize;
        let offset = (base + page).next_multiple_of(align) - base;
        let region = LockedRegion {
            mapping: reservation,
            offset,
            len: self.len,
            policy: LockPolicy::Unlocked,
            page: self.pages.size(),
            hugetlb: false,
            secret: false,
            read_only: self.read_only,
            access: Access::built(self.read_only),
            zero_on_drop: None,
        };
        let map_locked = self.map_locked && self.policy == LockPolicy::Populate;
        if self.file.is_none() && !map_locked {
            let flags = if self.read_only {
                MprotectFlags::READ
            } else {
                MprotectFlags::READ | MprotectFlags::WRITE
            };
            // SAFETY: [offset, offset + len) lies inside our reservation;
            // changing its protection changes no contents.
            unsafe { rustix::mm::mprotect(region.sub(0), self.len, flags) }
                .map_err(|e| Error::from_sys("mprotect", self.len, e))?;
            return Ok(region);
        }
        if self.file.is_some() {
            // A file refused (its `mmap`, the commit charge of a private
            // writable mapping) is refused here, before the reservation is
            // touched; MAP_FIXED then rarely fails late.
            self.probe_file(prot)?;
        }
        let name = name_reservation(&region.mapping);
        let flags = self.flags() | MapFlags::FIXED;
        let map_fixed = || {
            fail_point!("mlock::map_fixed_late", |arg| {
                // Plays a kernel before 6.12, whose MAP_FIXED unmaps the
                // range it replaces and then fails late (with ENOMEM), or a
                // file's `mmap` failing late on any kernel (with the errno
                // the argument names).
                // SAFETY: our reservation's middle, which that kernel
                // would have unmapped.
                let _ = unsafe { rustix::mm::munmap(region.sub(0), self.len) };
                Err(super::injected(arg))
            });
            fail_point!("mlock::map_fixed", |arg| Err(super::injected(arg)));
            // SAFETY: [offset, offset + len) lies inside our reservation
            // (guard and slack on both sides), so MAP_FIXED replaces only
            // our own PROT_NONE pages, which the reservation unmaps with
            // the rest.
            unsafe { self.map(region.sub(0), self.len, prot, flags) }
        };
        let mapped = map_fixed();
        // Another thread mapping into a hole the failure left (tests).
        let squatter = || -> Option<()> {
            fail_point!("mlock::squat_after_failed_map", mapped.is_err(), |_| {
                squat(region.sub(0));
                None
            });
            None
        };
        squatter();
        match mapped {
            Ok(()) => {
                if name.is_some() {
                    // The guards need no name while the region lives.
                    let tail = region.offset + region.len;
                    let base = region.mapping.as_ptr() as usize;
                    unname(base, region.offset);
                    unname(base + tail, region.mapping.len() - tail);
                }
                Ok(region)
            }
            // Refused before the kernel touched the reservation: anonymous
            // MAP_FIXED fails late only in the commit charge (or a VMA's
            // allocation), with ENOMEM; EAGAIN and EPERM (the memlock
            // limit, `do_mmap`'s first checks) and the rest come first. A
            // file's `mmap` may fail late with anything, but the probe
            // above passed it: its EAGAIN is the limit's, and so is its
            // EPERM unless the file is sealed against the mapping now (a
            // seal added since the probe, refused late). Secret memory's
            // EAGAIN (its memlock check, which another thread's locking
            // since the probe can fail) comes from the file's own `mmap`,
            // late: after MAP_FIXED unmapped the middle.
            Err(e)
                if e != Errno::NOMEM
                    && (self.file.is_none()
                        || (e == Errno::AGAIN && !self.secret)
                        || (e == Errno::PERM && !self.writes_a_sealed_file())) =>
            {
                Err(self.map_error(e))
            }
            Err(e) => {
                Self::release_after_failed_map(region, name.as_deref());
                Err(self.map_error(e))
            }
        }
    }

    /// Maps the file once where the kernel likes (no `MAP_FIXED`, no
    /// locking or populating) and unmaps it: what the file or the commit
    /// charge refuses is refused here.
    fn probe_file(&self, prot: ProtFlags) -> Result<(), Error> {
        let Some((fd, offset, shared)) = self.file else {
            return Ok(());
        };
        let flags = if shared {
            MapFlags::SHARED
        } else {
            MapFlags::PRIVATE
        };
        // SAFETY: a fresh mapping the kernel places, unmapped right after;
        // the builder's caller took on the file's obligations.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                self.len,
                prot,
                flags,
                fd.as_fd(),
                offset,
            )
        }
        .map_err(|e| self.map_error(e))?;
        // SAFETY: the mapping just made, nobody else's.
        let _ = unsafe { rustix::mm::munmap(p, self.len) };
        Ok(())
    }

    /// Gives back a reservation whose `MAP_FIXED` failed. Before Linux
    /// 6.12 (and on any kernel when a file's `mmap` fails), `mmap_region`
    /// unmaps the range it replaces first and does not put it back when a
    /// later step fails, so the middle may be a hole that another thread's
    /// `mmap` has filled since: unmapping the whole reservation would unmap
    /// that thread's memory. So:
    /// - the guards and slack, which the failed call did not touch, are
    ///   unmapped;
    /// - the middle is unmapped only if `/proc/self/maps` shows it is still
    ///   the reservation, by the name [`name_reservation`] gave it (no
    ///   other mapping has it); else (a hole, someone else's mapping, or no
    ///   VMA names: `CONFIG_ANON_VMA_NAME` off) it stays, at worst `len`
    ///   bytes of PROT_NONE address space and no memory, where unmapping
    ///   could have been undefined behaviour.
    fn release_after_failed_map(region: LockedRegion, name: Option<&str>) {
        let LockedRegion {
            mapping,
            offset,
            len,
            ..
        } = region;
        let (base, total, _) = mapping.into_raw_parts();
        let base = base.as_ptr();
        let middle = base.wrapping_add(offset).cast::<c_void>();
        let tail = offset + len;
        // SAFETY: [0, offset) is our reservation's guard and slack, which
        // the failed MAP_FIXED did not touch.
        let _ = unsafe { rustix::mm::munmap(base.cast(), offset) };
        // SAFETY: as above, for [tail, total).
        let _ = unsafe { rustix::mm::munmap(base.wrapping_add(tail).cast(), total - tail) };
        if name.is_some_and(|n| still_named(middle as usize, len, n)) {
            // SAFETY: the middle is still our reservation (its name is
            // ours alone), which nothing else unmaps.
            let _ = unsafe { rustix::mm::munmap(middle, len) };
        }
    }
}

/// Names a reservation's mapping `mmbatch-reservation-N` (a number no
/// other reservation of this process has) with `PR_SET_VMA_ANON_NAME`, so
/// that [`LockedRegion`]'s cleanup can tell it from another mapping in
/// `/proc/self/maps`; `None` where the kernel keeps no names (before 5.17,
/// or `CONFIG_ANON_VMA_NAME` off).
fn name_reservation(reservation: &Mapping) -> Option<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The counter's address too: two copies of this crate in one process
    // (two versions, a plugin) each count from 0.
    let name = format!(
        "mmbatch-reservation-{:x}-{n}",
        std::ptr::from_ref(&NEXT) as usize
    );
    let cname = std::ffi::CString::new(name.clone()).ok()?;
    // SAFETY: names the anonymous mapping this function's caller owns;
    // reads `cname` only during the call. (rustix's wrapper takes the
    // range as `&[u8]`, which PROT_NONE memory cannot soundly be.)
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_VMA,
            libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
            reservation.as_ptr() as libc::c_ulong,
            reservation.len() as libc::c_ulong,
            cname.as_ptr() as libc::c_ulong,
        )
    };
    (r == 0).then_some(name)
}

/// Whether `/proc/self/maps` shows `[addr, addr + len)` inside one mapping
/// named `name`.
fn still_named(addr: usize, len: usize, name: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|maps| named_in(&maps, addr, len, name))
}

/// Whether `maps` (the text of a `/proc/PID/maps`) has `[addr, addr +
/// len)` inside one mapping named `name`.
fn named_in(maps: &str, addr: usize, len: usize, name: &str) -> bool {
    let label = format!("[anon:{name}]");
    maps.lines().any(|l| {
        let mut f = l.split_whitespace();
        let range = f.next().and_then(|r| r.split_once('-'));
        let Some((a, b)) = range else { return false };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            return false;
        };
        // Perms, offset, device, inode, then the name as the sixth field
        // and last (a file's path could end in the same text).
        let rest: Vec<&str> = f.collect();
        a <= addr && addr + len <= b && rest.len() == 5 && rest[4] == label
    })
}

/// Takes the name off `[addr, addr + len)` (empty: nothing to do).
fn unname(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: names (with none) part of a mapping this region owns.
    unsafe {
        libc::prctl(
            libc::PR_SET_VMA,
            libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// Maps a page at `addr` as another thread would into a hole a failed
/// `MAP_FIXED` left (fail point `mlock::squat_after_failed_map`): only
/// where nothing is mapped, and never unmapped, so a test can check that
/// the failed build did not unmap it.
// Only the fail point calls it.
#[allow(dead_code)]
fn squat(addr: *mut c_void) {
    let page = accounting::page_size();
    // SAFETY: without MAP_FIXED, `addr` is a hint: the kernel maps there
    // only if nothing is mapped, and elsewhere otherwise. (Not
    // MAP_FIXED_NOREPLACE, which rustix does not name on Android.)
    let got = unsafe { rustix::mm::mmap_anonymous(addr, page, ProtFlags::READ, MapFlags::PRIVATE) };
    if let Ok(got) = got {
        if got != addr {
            // SAFETY: the page just mapped elsewhere, which nothing else
            // knows of.
            let _ = unsafe { rustix::mm::munmap(got, page) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::named_in;

    const MAPS: &str = "\
7f000000-7f010000 ---p 00000000 00:00 0                          [anon:mmbatch-reservation-1-0]
7f010000-7f020000 rw-p 00000000 00:00 0 
7f020000-7f030000 r--p 00000000 08:01 1234                       /tmp/[anon:mmbatch-reservation-1-0]
";

    #[test]
    fn a_range_is_named_only_inside_one_mapping_of_that_name() {
        let n = "mmbatch-reservation-1-0";
        assert!(
            named_in(MAPS, 0x7f00_0000, 0x1_0000, n),
            "the whole mapping"
        );
        assert!(named_in(MAPS, 0x7f00_1000, 0x1000, n), "a page inside it");
        assert!(
            !named_in(MAPS, 0x7f00_f000, 0x2000, n),
            "running past its end"
        );
        assert!(
            !named_in(MAPS, 0x7eff_f000, 0x2000, n),
            "starting before it"
        );
        assert!(!named_in(
            MAPS,
            0x7f00_0000,
            0x1_0000,
            "mmbatch-reservation-1-1"
        ));
        assert!(
            !named_in(MAPS, 0x7f01_0000, 0x1000, n),
            "an unnamed mapping"
        );
        assert!(
            !named_in(MAPS, 0x7f02_0000, 0x1000, n),
            "a file whose path ends in the name"
        );
        assert!(!named_in("", 0x7f00_0000, 0x1000, n));
    }
}
