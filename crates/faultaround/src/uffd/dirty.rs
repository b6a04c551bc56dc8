//! Write tracking: the pages a region's process wrote since a moment it
//! chose, from the kernel's userfaultfd write-protect bits. Every page goes
//! in write-protected (`UFFDIO_COPY_MODE_WP`); with `UFFD_FEATURE_WP_ASYNC`
//! the kernel resolves a first write itself, clearing the bit, with no
//! handler round trip — the soft-dirty bit's cost — and `PAGEMAP_SCAN`
//! (Linux 6.7) lists the pages whose bit is clear, and can set it again in
//! the same walk. A [`UffdHandler`] tracks another process's writes the
//! same way, through that process's `/proc/PID/pagemap`, once it has set
//! its userfaultfd up for it.

use std::{
    ffi::c_void,
    fs::File,
    ops::Range,
    os::fd::{AsRawFd, BorrowedFd},
};

use linux_raw_sys::general::{
    PAGE_IS_PRESENT, PAGE_IS_SWAPPED, PAGE_IS_WRITTEN, PM_SCAN_CHECK_WPASYNC, PM_SCAN_WP_MATCHING,
    UFFD_FEATURE_WP_ASYNC, page_region, pm_scan_arg,
};
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};

use super::{Area, UffdHandler, UffdRegion};
use crate::Error;

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: Opcode = opcode::read_write::<pm_scan_arg>(b'f', 16);

/// Regions one `PAGEMAP_SCAN` call can return.
const BATCH: usize = 256;

/// `PAGEMAP_SCAN` with its argument: returns the regions it filled.
struct Scan<'a>(&'a mut pm_scan_arg);

// SAFETY: the opcode is PAGEMAP_SCAN, whose argument is a `struct
// pm_scan_arg` the kernel reads and updates (`walk_end`), and whose return
// value is the number of `page_region`s written to `vec`, which the caller
// points at a buffer of `vec_len` of them.
unsafe impl Ioctl for Scan<'_> {
    type Output = usize;
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> Opcode {
        PAGEMAP_SCAN
    }
    fn as_ptr(&mut self) -> *mut c_void {
        std::ptr::from_mut(self.0).cast()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<usize> {
        Ok(out as usize)
    }
}

impl UffdRegion {
    /// The pages written since the region was built or since the last
    /// [`take_written_pages`](Self::take_written_pages), as sorted
    /// ranges of page indices, neither overlapping nor touching: a page the process (or a system
    /// call on its behalf) wrote, not one the handlers filled. A page
    /// discarded since (`MADV_DONTNEED`) is not reported: it reads as
    /// zeros until written again. Refused
    /// unless the region was built with
    /// [`track_writes`](super::UffdRegionBuilder::track_writes).
    pub fn written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(false)
    }

    /// [`written_pages`](Self::written_pages), and write-protects those
    /// pages again in the same walk of the page table, so the next call
    /// reports only writes after this one: a write racing with the walk
    /// lands in one report or the next, never in neither.
    pub fn take_written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(true)
    }

    fn scan(&self, reset: bool) -> Result<Vec<Range<u64>>, Error> {
        let s = &self.shared;
        if !s.track {
            return Err(Error::BadSetting {
                setting: "track_writes",
                value: "false".into(),
                why: "the region was built without write tracking: build it with \
                      UffdRegionBuilder::track_writes(true)"
                    .into(),
            });
        }
        if self.shut_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(after_shutdown("track_writes"));
        }
        let pagemap = File::open("/proc/self/pagemap").map_err(|source| Error::Sys {
            op: "opening /proc/self/pagemap",
            source,
        })?;
        scan(&pagemap, &s.areas, s.page, reset)
    }
}

impl UffdHandler {
    /// The pages the other process wrote since the handler was built or
    /// since the last [`take_written_pages`](Self::take_written_pages), as
    /// sorted ranges of source page indices, neither overlapping nor
    /// touching (page `p` holds the source's bytes at `p * page_size`:
    /// two regions' neighbouring source pages share a range), as
    /// [`UffdRegion::written_pages`] reports its own. Refused unless the
    /// handler was built with
    /// [`track_writes_of`](super::UffdHandlerBuilder::track_writes_of).
    /// Tracking ends at [`shutdown`](Self::shutdown), which unregisters
    /// the ranges.
    pub fn written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(false)
    }

    /// [`written_pages`](Self::written_pages), write-protecting those pages
    /// again in the same walk, as
    /// [`UffdRegion::take_written_pages`] does.
    pub fn take_written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(true)
    }

    fn scan(&self, reset: bool) -> Result<Vec<Range<u64>>, Error> {
        if !self.shared.in_owner() {
            return Err(in_a_child("track_writes_of"));
        }
        let Some(pagemap) = &self.pagemap else {
            return Err(Error::BadSetting {
                setting: "track_writes_of",
                value: "none".into(),
                why: "the handler was built without write tracking: build it with \
                      UffdHandlerBuilder::track_writes_of(pid) (and the other process's \
                      userfaultfd set up for it)"
                    .into(),
            });
        };
        if self.shut_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(after_shutdown("track_writes_of"));
        }
        scan(pagemap, &self.shared.areas, self.shared.page, reset)
    }
}

/// A scan from a child of `fork(2)`, whose copy of a handler is the
/// parent's: resetting the other process's write-protect bits from there
/// would take writes out of the parent's next report.
fn in_a_child(setting: &'static str) -> Error {
    Error::BadSetting {
        setting,
        value: "in a child of fork".into(),
        why: "the handler belongs to the process that built it: take the written pages there"
            .into(),
    }
}

/// The refusal of a report after `shutdown`, which unregistered the
/// ranges and with them every write-protect bit: every present page would
/// read as written.
fn after_shutdown(setting: &'static str) -> Error {
    Error::BadSetting {
        setting,
        value: "after shutdown".into(),
        why: "shutdown unregistered the memory and cleared its write-protect bits, so writes \
              since are not tracked: take the written pages before shutdown"
            .into(),
    }
}

/// Checks, for [`UffdHandlerBuilder::track_writes_of`](super::UffdHandlerBuilder::track_writes_of), that process
/// `pid` set its userfaultfd `uffd` (our copy) and `areas` up for write
/// tracking, and opens its page map: `UFFD_FEATURE_WP_ASYNC` asked for in
/// its `UFFDIO_API` (our `/proc/self/fdinfo` of the descriptor shows the
/// features), every range registered with `UFFDIO_REGISTER_MODE_WP` (its
/// `/proc/PID/smaps` shows `uw`). Without these the first copy would fail,
/// or every first write would wait for a handler that does not expect it.
pub(super) fn pagemap_of(
    pid: u32,
    uffd: BorrowedFd<'_>,
    areas: &[Area],
    page: usize,
) -> Result<File, Error> {
    let bad = |value: String, why: String| Error::BadSetting {
        setting: "track_writes_of",
        value,
        why,
    };
    let fdinfo = format!("/proc/self/fdinfo/{}", uffd.as_raw_fd());
    let info = std::fs::read_to_string(&fdinfo).map_err(|source| Error::Sys {
        op: "reading the userfaultfd's /proc/self/fdinfo",
        source,
    })?;
    let features = uffd_features(&info).ok_or_else(|| {
        bad(
            fdinfo.clone(),
            format!("no \"API:\" line with the userfaultfd's features in {fdinfo}: {info:?}"),
        )
    })?;
    let wanted = u64::from(UFFD_FEATURE_WP_ASYNC);
    // Bit 31 is the kernel's own mark that the handshake happened.
    let features = features & !(1 << 31);
    if features & wanted != wanted {
        return Err(bad(
            format!("{pid}"),
            format!(
                "the other process's UFFDIO_API asked for features {features:#x}, without \
                 UFFD_FEATURE_WP_ASYNC ({wanted:#x}, Linux 6.7): its writes cannot be tracked \
                 unless it asks for that (with UFFD_FEATURE_PAGEFAULT_FLAG_WP) and registers \
                 its ranges with UFFDIO_REGISTER_MODE_WP"
            ),
        ));
    }
    let smaps_path = format!("/proc/{pid}/smaps");
    let smaps = std::fs::read_to_string(&smaps_path).map_err(|e| {
        bad(
            format!("{pid}"),
            format!(
                "reading {smaps_path}: {e}: is {pid} the process that registered the ranges \
                 (its end of the socket's SO_PEERCRED), alive, and ours to ptrace (the same \
                 user, or CAP_SYS_PTRACE)?"
            ),
        )
    })?;
    for a in areas {
        let range = a.addresses(page);
        if let Err(why) = registered_for_wp(&smaps, range.clone()) {
            return Err(bad(
                format!("{pid}"),
                format!(
                    "range {range:#x?} of process {pid}: {why} (is {pid} the process that \
                     registered the ranges?)"
                ),
            ));
        }
    }
    let path = format!("/proc/{pid}/pagemap");
    File::open(&path).map_err(|e| {
        bad(
            format!("{pid}"),
            format!(
                "opening {path}: {e}: process {pid} must be ours to ptrace (the same \
                     user, or CAP_SYS_PTRACE)"
            ),
        )
    })
}

/// Field `n` of a userfaultfd's `/proc/PID/fdinfo` text, from its line
/// `API:\t<api>:<features>:<ioctls>` in hex (`userfaultfd_show_fdinfo`).
fn api_field(fdinfo: &str, n: usize) -> Option<u64> {
    let line = fdinfo.lines().find_map(|l| l.strip_prefix("API:"))?;
    u64::from_str_radix(line.trim().split(':').nth(n)?, 16).ok()
}

/// The ioctls a userfaultfd's kernel offers (`UFFD_API_IOCTLS |
/// UFFD_API_RANGE_IOCTLS`), from its fdinfo text.
pub(super) fn uffd_ioctls(fdinfo: &str) -> Option<u64> {
    api_field(fdinfo, 2)
}

/// The features a userfaultfd's `UFFDIO_API` asked for, from its fdinfo
/// text.
pub(super) fn uffd_features(fdinfo: &str) -> Option<u64> {
    api_field(fdinfo, 1)
}

/// Whether every mapping of `smaps` (a `/proc/PID/smaps` text) over
/// `range` is registered for write-protect faults (`VmFlags: ... uw`), and
/// the whole range is mapped; else why not.
fn registered_for_wp(smaps: &str, range: Range<usize>) -> Result<(), String> {
    let mut covered = range.start;
    let mut current: Option<Range<usize>> = None;
    for line in smaps.lines() {
        if let Some((lo, hi)) = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(lo, hi)| {
                Some((
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                ))
            })
        {
            current = Some(lo..hi);
            continue;
        }
        let (Some(vma), Some(flags)) = (&current, line.strip_prefix("VmFlags:")) else {
            continue;
        };
        if vma.end <= range.start || vma.start >= range.end {
            continue;
        }
        if vma.start > covered {
            break;
        }
        if !flags.split_whitespace().any(|f| f == "uw") {
            return Err(format!(
                "the mapping at {vma:#x?} is not registered with UFFDIO_REGISTER_MODE_WP \
                 (its VmFlags: {}): register every range with MODE_MISSING | MODE_WP",
                flags.trim()
            ));
        }
        covered = covered.max(vma.end);
    }
    if covered < range.end {
        return Err(format!(
            "nothing is mapped at {covered:#x} in the other process"
        ));
    }
    Ok(())
}

/// `PAGEMAP_SCAN` over `areas` of the process whose page map `pagemap`
/// is: the pages present and written (their write-protect bit clear), as
/// sorted ranges of source page indices, neither overlapping nor
/// touching (runs of neighbouring areas joined); with `reset`, those
/// pages are write-protected again in the same walk.
fn scan(
    pagemap: &File,
    areas: &[Area],
    page: usize,
    reset: bool,
) -> Result<Vec<Range<u64>>, Error> {
    let mut regions = vec![
        page_region {
            start: 0,
            end: 0,
            categories: 0,
        };
        BATCH
    ];
    let mut out: Vec<Range<u64>> = Vec::new();
    let page = page as u64;
    // Sorted by first page: each area's ranges follow the last's.
    for a in areas {
        let (base, end) = (a.base as u64, a.base as u64 + a.pages * page);
        let mut at = base;
        while at < end {
            let mut arg = pm_scan_arg {
                size: std::mem::size_of::<pm_scan_arg>() as u64,
                flags: if reset {
                    u64::from(PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC)
                } else {
                    0
                },
                start: at,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: BATCH as u64,
                max_pages: 0,
                category_inverted: 0,
                // A hole (a page never filled, or discarded) reads as
                // "written" — no write-protect bit to be clear of — so only
                // pages that are there count.
                category_mask: u64::from(PAGE_IS_WRITTEN),
                category_anyof_mask: u64::from(PAGE_IS_PRESENT | PAGE_IS_SWAPPED),
                return_mask: u64::from(PAGE_IS_WRITTEN),
            };
            // SAFETY: `arg` is a `struct pm_scan_arg` whose `vec` points at
            // `regions`, `BATCH` entries long; the kernel writes only there
            // and to `arg`, and walks the page map's process, not ours.
            let n = unsafe { rustix::ioctl::ioctl(pagemap, Scan(&mut arg)) }.map_err(|e| {
                Error::Sys {
                    op: "PAGEMAP_SCAN on /proc/PID/pagemap (Linux 6.7)",
                    source: e.into(),
                }
            })?;
            for r in &regions[..n.min(BATCH)] {
                let pages =
                    a.first + (r.start - base) / page..a.first + (r.end - base).div_ceil(page);
                match out.last_mut() {
                    Some(last) if last.end == pages.start => last.end = pages.end,
                    _ => out.push(pages),
                }
            }
            // A full buffer stops the walk early: go on from where it did.
            if arg.walk_end <= at {
                break;
            }
            at = arg.walk_end;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_read_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02004002\nmnt_id:\t16\nino:\t1057\npending:\t0\n\
                    total:\t0\nAPI:\taa:8000c080:1c000000000003\n";
        assert_eq!(uffd_features(info), Some(0x8000_c080));
        assert_eq!(uffd_features("pos:\t0\n"), None);
        assert_eq!(uffd_features("API:\taa\n"), None);
        // This host's kernel (6.18): every range ioctl, POISON (bit 8) too.
        let here = "API:\taa:80000000:80000000000001ff\n";
        assert_eq!(uffd_ioctls(here), Some(0x8000_0000_0000_01ff));
        assert_eq!(uffd_ioctls("API:\taa:0\n"), None);
    }

    #[test]
    fn a_range_is_checked_mapping_by_mapping() {
        let smaps = "\
7f000000-7f002000 rw-p 00000000 00:00 0 \n\
Size:                  8 kB\n\
VmFlags: rd wr mr mw me ac um uw \n\
7f002000-7f004000 rw-p 00000000 00:00 0 \n\
Size:                  8 kB\n\
VmFlags: rd wr mr mw me ac um \n\
7f005000-7f006000 rw-p 00000000 00:00 0 \n\
VmFlags: rd wr mr mw me ac um uw \n";
        let base = 0x7f00_0000;
        assert_eq!(registered_for_wp(smaps, base..base + 0x2000), Ok(()));
        let e = registered_for_wp(smaps, base..base + 0x3000).unwrap_err();
        assert!(e.contains("MODE_WP"), "{e}");
        // A hole between mappings.
        let e = registered_for_wp(smaps, base + 0x5000..base + 0x7000).unwrap_err();
        assert!(e.contains("nothing is mapped at 0x7f006000"), "{e}");
        let e = registered_for_wp(smaps, base + 0x4000..base + 0x6000).unwrap_err();
        assert!(e.contains("nothing is mapped at 0x7f004000"), "{e}");
    }
}
