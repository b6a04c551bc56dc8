//! Tests of the mapping and its checks.

use super::*;

/// Whether `addr` is mapped, from /proc/self/maps.
pub(crate) fn mapped(addr: usize) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| {
            let range = l.split(' ').next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            );
            (a..b).contains(&addr)
        })
}

#[test]
fn dropped_mapping_is_unmapped() {
    // An odd page count, so no neighbour merges with exactly this range.
    let m = Mapping::anonymous(7 << 12).unwrap();
    let (first, last) = (m.as_ptr() as usize, m.as_ptr() as usize + m.len() - 1);
    assert!(mapped(first) && mapped(last));
    drop(m);
    // Another test thread may map at the freed address; only a
    // mapping of exactly our range would be ours.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let ours = format!("{first:x}-{:x} ", last + 1);
    assert!(!maps.lines().any(|l| l.starts_with(&ours)), "{maps}");
}

#[test]
fn views_follow_protection() {
    let mut m = Mapping::populated(1 << 20).unwrap();
    m.as_mut_slice().unwrap().fill(3);
    assert!(m.as_slice().unwrap().iter().all(|&b| b == 3));
    let mut r = Mapping::new(1 << 16, ProtFlags::READ, MapFlags::PRIVATE).unwrap();
    assert_eq!(r.as_slice().unwrap()[0], 0);
    assert!(r.as_mut_slice().is_none());
    let n = Mapping::new(1 << 16, ProtFlags::empty(), MapFlags::PRIVATE).unwrap();
    assert!(n.as_slice().is_none());
}

#[test]
fn bad_input_is_refused() {
    let e = Mapping::anonymous(0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = Mapping::new(4096, ProtFlags::READ, MapFlags::PRIVATE | MapFlags::FIXED).unwrap_err();
    assert!(e.to_string().contains("MAP_FIXED"), "{e}");
    // More than the address space: the kernel's ENOMEM.
    let e = Mapping::anonymous(usize::MAX & !0xfff).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(12), "{e}");
}

/// `MAP_FIXED_NOREPLACE` with no address: as root the kernel mapped
/// page 0, `new` panicked ("mmap does not return NULL without
/// MAP_FIXED") and left page 0 mapped, so a null pointer read zeros.
/// Now refused, as is a mapping neither shared nor private (which was
/// the kernel's bare EINVAL).
#[test]
fn flags_a_mapping_cannot_have_are_refused_by_name() {
    let rw = ProtFlags::READ | ProtFlags::WRITE;
    let e = Mapping::new(4096, rw, MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("MAP_FIXED_NOREPLACE"), "{e}");
    assert!(!mapped(0), "page 0 is mapped");
    let e = Mapping::new(4096, rw, MapFlags::empty()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("MAP_PRIVATE"), "{e}");
    for one in [MapFlags::PRIVATE, MapFlags::SHARED] {
        assert_eq!(Mapping::new(4096, rw, one).unwrap().len(), 4096);
    }
}

/// `MAP_HUGETLB | MAP_NORESERVE` was mapped over an empty pool, and
/// the first write through the safe `as_mut_slice` killed the process
/// with SIGBUS. Now refused before the pool is looked at.
#[test]
fn hugetlb_without_a_reservation_is_refused() {
    let e = Mapping::new(
        2 << 20,
        ProtFlags::READ | ProtFlags::WRITE,
        MapFlags::PRIVATE | MapFlags::HUGETLB | MapFlags::HUGE_2MB | MapFlags::NORESERVE,
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("SIGBUS"), "{e}");
}

/// Huge pages of the default size free and not reserved by a
/// mapping (`HugePages_Free - HugePages_Rsvd`, from /proc/meminfo).
fn free_huge_pages() -> usize {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> usize {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    field("HugePages_Free:") - field("HugePages_Rsvd:")
}

/// A `MAP_HUGETLB` length short of a whole huge page. Before, the
/// kernel mapped a whole 2 MiB page, `len()` said 4096, and drop's
/// `munmap(ptr, 4096)` failed unseen: the huge page stayed taken until
/// the process exited, and a loop drained the pool.
#[test]
fn a_hugetlb_length_short_of_whole_huge_pages_is_refused() {
    let free = free_huge_pages();
    for flags in [MapFlags::HUGETLB, MapFlags::HUGETLB | MapFlags::HUGE_2MB] {
        match Mapping::new(
            4096,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | flags,
        ) {
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
                assert!(e.to_string().contains("ask for 2097152"), "{e}");
            }
            Ok(m) => {
                drop(m);
                panic!(
                    "4096 bytes of MAP_HUGETLB were mapped; after drop {} huge pages are \
                     free, {free} before",
                    free_huge_pages()
                );
            }
        }
    }
    let e = Mapping::new(
        (2 << 20) + 4096,
        ProtFlags::READ,
        MapFlags::PRIVATE | MapFlags::HUGETLB | MapFlags::HUGE_2MB,
    )
    .unwrap_err();
    assert!(e.to_string().contains("ask for 4194304"), "{e}");
}

/// A mapping that `munmap` refuses is not dropped in silence.
#[test]
fn a_mapping_munmap_refuses_panics_on_drop_and_errs_on_unmap() {
    let m = Mapping::anonymous(2 << 12).unwrap();
    let (p, ..) = m.into_raw_parts();
    // A misaligned start: munmap's EINVAL, as a broken contract gives.
    let misaligned = NonNull::new(p.as_ptr().wrapping_add(1)).unwrap();
    // SAFETY: breaks from_raw_parts' contract on purpose, but only so
    // far as munmap refuses: nothing is unmapped or accessed.
    let bad = unsafe { Mapping::from_raw_parts(misaligned, 4096, ProtFlags::READ) };
    assert_eq!(bad.unmap().unwrap_err().raw_os_error(), Some(22));
    // SAFETY: as above.
    let bad = unsafe { Mapping::from_raw_parts(misaligned, 4096, ProtFlags::READ) };
    let panic = std::panic::catch_unwind(move || drop(bad)).unwrap_err();
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(msg.contains("leaked"), "{msg}");
    // SAFETY: the original mapping, whole, given back.
    let m = unsafe { Mapping::from_raw_parts(p, 2 << 12, ProtFlags::READ | ProtFlags::WRITE) };
    m.unmap().unwrap();
}

/// The parts given up are the ones taken back: start, length and
/// protection (a read-only mapping stays read-only).
#[test]
fn raw_parts_round_trip() {
    let m = Mapping::anonymous(1 << 16).unwrap();
    let (p, len, prot) = m.into_raw_parts();
    assert_eq!(prot, ProtFlags::READ | ProtFlags::WRITE);
    // SAFETY: the parts just given up, whole.
    let mut m = unsafe { Mapping::from_raw_parts(p, len, prot) };
    assert_eq!(m.as_slice().unwrap().len(), 1 << 16);
    assert!(m.as_mut_slice().is_some());
}

/// What `anonymous` and `populated` promise: read-write, private,
/// the length asked for, writes read back.
#[test]
fn anonymous_and_populated_are_private_read_write_memory() {
    for m in [
        Mapping::anonymous(3 << 12).unwrap(),
        Mapping::populated(3 << 12).unwrap(),
    ] {
        let mut m = m;
        assert_eq!(m.len(), 3 << 12);
        assert!(!m.is_empty());
        assert_eq!(m.prot(), ProtFlags::READ | ProtFlags::WRITE);
        let bytes = m.as_mut_slice().expect("read-write");
        assert_eq!(bytes.len(), 3 << 12);
        bytes[5000] = 7;
        assert_eq!(m.as_slice().unwrap()[5000], 7);
    }
}

/// `populated` faults every page in, and a populate the kernel stops
/// short is an error with the mapping gone (`MAP_POPULATE` said nothing:
/// a mapping it left unpopulated came back as if whole).
#[test]
fn a_populate_that_stops_short_is_an_error() {
    let m = Mapping::populated(64 << 12).unwrap();
    let mut resident = [0u8; 64];
    // SAFETY: the mapping's 64 pages, and a vector of 64 bytes.
    let r = unsafe { libc::mincore(m.as_ptr().cast(), 64 << 12, resident.as_mut_ptr()) };
    assert_eq!(r, 0);
    assert!(resident.iter().all(|&b| b & 1 == 1), "{resident:?}");
    // Read-only memory cannot be faulted in for writing: the populate
    // the kernel refuses, as it would one out of memory.
    // (The mapping, moved in, is dropped with the error.)
    let ro = Mapping::new(16 << 12, ProtFlags::READ, MapFlags::PRIVATE).unwrap();
    let e = populate(ro).unwrap_err();
    assert!(e.raw_os_error().is_some(), "{e}");
    // Out of memory part way: the error, not the mapping.
    let refused = |_| Err(io::Error::from_raw_os_error(libc::ENOMEM));
    let e = populated_by(64 << 12, refused).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    // No such advice (before Linux 5.14): MAP_POPULATE's read-write,
    // private, resident memory instead.
    // And so where a seccomp filter refuses it (EPERM, ENOSYS).
    for refusal in [libc::EINVAL, libc::EPERM, libc::ENOSYS] {
        let refused = |_| Err(io::Error::from_raw_os_error(refusal));
        let mut m = populated_by(64 << 12, refused).unwrap();
        assert_eq!(m.prot(), ProtFlags::READ | ProtFlags::WRITE);
        m.as_mut_slice().expect("read-write")[5000] = 7;
        // SAFETY: the mapping's 64 pages, and a vector of 64 bytes.
        let r = unsafe { libc::mincore(m.as_ptr().cast(), 64 << 12, resident.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(
            resident.iter().all(|&b| b & 1 == 1),
            "{refusal}: {resident:?}"
        );
    }
}

/// The huge page size a mapping's flags name, and the default when
/// they name none.
#[test]
fn hugetlb_page_sizes_follow_the_flags() {
    let size = |f| hugetlb_page_size(MapFlags::HUGETLB | f).unwrap();
    assert_eq!(size(MapFlags::HUGE_2MB), 2 << 20);
    assert_eq!(size(MapFlags::HUGE_1GB), 1 << 30);
    // Only the six MAP_HUGE_* bits count: every other flag is ignored.
    assert_eq!(size(MapFlags::HUGE_2MB | MapFlags::POPULATE), 2 << 20);
    // No MAP_HUGE_* bits: the default size, as /proc/meminfo prints it.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(kb) = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))
    {
        let kb: usize = kb.trim().trim_end_matches("kB").trim().parse().unwrap();
        assert_eq!(size(MapFlags::empty()), kb * 1024);
    }
}

/// `protect` changes what the slices hand out with the protection;
/// `flush` writes a shared file mapping's bytes to the file.
#[test]
fn protect_and_flush() {
    let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 8192).unwrap();
    // SAFETY: the memfd is this test's own; nothing else writes it.
    let mut m = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(&fd),
            0,
            8192,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )
    }
    .unwrap();
    m.as_mut_slice().unwrap()[4097] = 7;
    m.flush().unwrap();
    let mut b = [0u8; 2];
    rustix::io::pread(&fd, &mut b, 4096).unwrap();
    assert_eq!(b, [0, 7]);
    m.protect(ProtFlags::READ).unwrap();
    assert_eq!(m.prot(), ProtFlags::READ);
    // The kernel's view too: the mapping's line in /proc/self/maps.
    let start = format!("{:x}-", m.as_ptr() as usize);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.starts_with(&start)).unwrap();
    assert!(
        line.split_whitespace().nth(1).unwrap().starts_with("r--"),
        "{line}"
    );
    assert!(m.as_mut_slice().is_none());
    assert_eq!(m.as_slice().unwrap()[4097], 7);
    m.protect(ProtFlags::empty()).unwrap();
    assert!(m.as_slice().is_none());
    m.protect(ProtFlags::READ | ProtFlags::WRITE).unwrap();
    m.as_mut_slice().unwrap()[0] = 1;
    assert_eq!(m.as_slice().unwrap()[..2], [1, 0]);
    // Anonymous memory: nothing to write back.
    Mapping::anonymous(4096).unwrap().flush().unwrap();
}

/// A protection the kernel refuses (write access to a shared mapping
/// of a file opened read-only: EACCES) is an error, and the slices
/// keep to the narrower of the two protections.
#[test]
fn a_refused_protect_keeps_the_narrower_protection() {
    let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4096).unwrap();
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let ro = std::fs::File::open(path).unwrap();
    // SAFETY: the memfd is this test's own; nothing else writes it.
    let mut m = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(&ro),
            0,
            4096,
            ProtFlags::READ,
            MapFlags::SHARED,
        )
    }
    .unwrap();
    let e = m.protect(ProtFlags::READ | ProtFlags::WRITE).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc_eacces()), "{e}");
    assert_eq!(m.prot(), ProtFlags::READ);
    assert!(m.as_mut_slice().is_none());
    assert_eq!(m.as_slice().unwrap()[0], 0);
}

/// EACCES, without a libc dependency.
fn libc_eacces() -> i32 {
    rustix::io::Errno::ACCESS.raw_os_error()
}

#[test]
fn a_file_offset_off_a_page_boundary_names_the_boundary() {
    let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4 << 20).unwrap();
    let page = rustix::param::page_size() as u64;
    let map = |offset| {
        // SAFETY: the memfd is this test's own; nothing else writes it.
        unsafe {
            Mapping::file(
                std::os::fd::AsFd::as_fd(&fd),
                offset,
                4096,
                ProtFlags::READ,
                MapFlags::SHARED,
            )
        }
    };
    let e = map(page + 100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(
        e.to_string()
            .contains(&format!("map from {page} and index 100")),
        "{e}"
    );
    assert_eq!(map(page).unwrap().len(), 4096);
}

/// A regular file shorter than the range: a touch past its end was
/// SIGBUS through the safe `as_slice`. Refused, naming the most that
/// maps, writable or not (only hugetlbfs extends a file to a writable
/// mapping); its last partial page maps (the kernel zero-fills it).
#[test]
fn a_file_range_past_the_files_end_is_refused() {
    let page = rustix::param::page_size() as u64;
    // A page and a half: the last page partial.
    let file_len = page + page / 2;
    let dir = std::env::temp_dir().join(format!("mmbatch-mmap-{}", std::process::id()));
    std::fs::write(&dir, vec![7u8; file_len as usize]).unwrap();
    // Writable, so that the kernel would map it writable too.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dir)
        .unwrap();
    std::fs::remove_file(&dir).unwrap();
    let map = |offset, len| {
        // SAFETY: the file is this test's own, unlinked; nothing else
        // writes it.
        unsafe {
            Mapping::file(
                std::os::fd::AsFd::as_fd(&f),
                offset,
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
            )
        }
    };
    let e = map(0, 3 * page as usize).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let expected = format!(
        "({file_len} bytes), where a touch is SIGBUS: extend the file first \
         (File::set_len) or map at most {} bytes",
        2 * page
    );
    assert!(e.to_string().contains(&expected), "{e}");
    let e = map(page, 2 * page as usize).unwrap_err();
    assert!(
        e.to_string().contains(&format!("map at most {page} bytes")),
        "{e}"
    );
    let e = map(2 * page, page as usize).unwrap_err();
    assert!(
        e.to_string().contains("map from an offset inside it"),
        "{e}"
    );
    let m = map(0, 2 * page as usize).unwrap();
    let end = file_len as usize;
    assert_eq!(m.as_slice().unwrap()[end - 1..end + 1], [7, 0]);
    let m = map(page, page as usize).unwrap();
    assert_eq!(m.as_slice().unwrap()[end - page as usize], 0);
    // Writable, the same: only hugetlbfs extends a file to a writable
    // mapping's end.
    // SAFETY: as above.
    let e = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(&f),
            0,
            3 * page as usize,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )
    }
    .unwrap_err();
    assert!(e.to_string().contains(&expected), "{e}");
    // An offset whose end overflows is past any end.
    assert!(map(u64::MAX - page + 1, page as usize).is_err());
    // An empty file has no offset inside it.
    let empty = dir.with_extension("empty");
    std::fs::write(&empty, []).unwrap();
    let f = std::fs::File::open(&empty).unwrap();
    std::fs::remove_file(&empty).unwrap();
    // SAFETY: the file is this test's own, unlinked; nothing writes it.
    let e = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(&f),
            0,
            page as usize,
            ProtFlags::READ,
            MapFlags::SHARED,
        )
    }
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("the file is empty: write or extend it first"),
        "{e}"
    );
}

/// A writable mapping of a hugetlbfs file may reach past its end: the
/// kernel extends the file to cover it (`hugetlbfs_file_mmap`), which
/// mlock's regions over an unsized hugetlbfs memfd rely on. A
/// read-only one may not. Needs a 2 MiB huge page in the pool (root).
#[test]
fn a_writable_hugetlbfs_file_may_be_mapped_past_its_end() {
    let Some(_pool) = mmbatch_testkit::huge::Pool::grow(1) else {
        return;
    };
    let huge = 2 << 20;
    let fd = rustix::fs::memfd_create(
        "t",
        rustix::fs::MemfdFlags::CLOEXEC
            | rustix::fs::MemfdFlags::HUGETLB
            | rustix::fs::MemfdFlags::HUGE_2MB,
    )
    .unwrap();
    let map = |prot| {
        // SAFETY: the memfd is this test's own; nothing else writes it.
        unsafe {
            Mapping::file(
                std::os::fd::AsFd::as_fd(&fd),
                0,
                huge,
                prot,
                MapFlags::SHARED,
            )
        }
    };
    let e = map(ProtFlags::READ).unwrap_err();
    assert!(
        e.to_string()
            .contains("the file is empty: write or extend it first"),
        "{e}"
    );
    let mut m = map(ProtFlags::READ | ProtFlags::WRITE).unwrap();
    m.as_mut_slice().unwrap()[huge - 1] = 1;
    assert_eq!(rustix::fs::fstat(&fd).unwrap().st_size, huge as i64);
    // Its pages are the file system's.
    assert_eq!(m.page_size(), huge);
}

/// A mapping knows the size of its pages: a `MAP_HUGETLB` one its huge
/// page size (the size its flags name), any other the base page size.
/// Needs a 2 MiB huge page in the pool (root) for the hugetlb case.
#[test]
fn a_mapping_knows_its_page_size() {
    let base = rustix::param::page_size();
    assert_eq!(Mapping::anonymous(3 * base).unwrap().page_size(), base);
    let (ptr, len, prot) = Mapping::anonymous(base).unwrap().into_raw_parts();
    // SAFETY: the mapping just given up, whole.
    let again = unsafe { Mapping::from_raw_parts(ptr, len, prot) };
    assert_eq!(again.page_size(), base);
    // A declared size must be a power of two of at least the base page,
    // dividing the start and the length.
    for bad in [0, 3000, base / 2, 2 << 20] {
        let e = Mapping::anonymous(base)
            .unwrap()
            .with_page_size(bad)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
    }
    let again = again.with_page_size(base).unwrap();
    assert_eq!(again.page_size(), base);
    // Two pages whose start is off a two-page boundary, the length whole.
    let (ptr, len, prot) = Mapping::anonymous(3 * base).unwrap().into_raw_parts();
    let off = if ptr.as_ptr().addr() % (2 * base) == 0 {
        base
    } else {
        0
    };
    let at = |o: usize| NonNull::new(ptr.as_ptr().wrapping_add(o)).unwrap();
    // SAFETY: two of the three pages just given up, owned once.
    let two = unsafe { Mapping::from_raw_parts(at(off), 2 * base, prot) };
    // SAFETY: the third, owned once.
    let one =
        unsafe { Mapping::from_raw_parts(at(if off == 0 { 2 * base } else { 0 }), base, prot) };
    assert_eq!(len, 3 * base);
    let e = two.with_page_size(2 * base).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    drop(one);
    let Some(_pool) = mmbatch_testkit::huge::Pool::grow(1) else {
        return;
    };
    let rw = ProtFlags::READ | ProtFlags::WRITE;
    let huge = Mapping::new(
        2 << 20,
        rw,
        MapFlags::PRIVATE | MapFlags::HUGETLB | MapFlags::HUGE_2MB,
    )
    .unwrap();
    assert_eq!(huge.page_size(), 2 << 20);
    // Lost through raw parts, declared back.
    let (ptr, len, prot) = huge.into_raw_parts();
    // SAFETY: the hugetlb mapping just given up, whole.
    let huge = unsafe { Mapping::from_raw_parts(ptr, len, prot) };
    assert_eq!(huge.page_size(), base);
    assert_eq!(huge.with_page_size(2 << 20).unwrap().page_size(), 2 << 20);
}

/// A hugetlbfs file's page is its filesystem's block, 2 MiB for a memfd
/// made with `MFD_HUGETLB | MFD_HUGE_2MB` (no page of the pool taken:
/// the file is empty); an ordinary file's is no huge page whatever its
/// filesystem's block.
#[test]
fn only_a_hugetlbfs_file_has_a_huge_page_size() {
    use std::os::fd::AsFd;
    let plain = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    assert_eq!(hugetlbfs_page_size(plain.as_fd()).unwrap(), None);
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    assert_eq!(hugetlbfs_page_size(file.as_fd()).unwrap(), None);
    let huge = rustix::fs::memfd_create(
        "t",
        rustix::fs::MemfdFlags::CLOEXEC
            | rustix::fs::MemfdFlags::HUGETLB
            | rustix::fs::MemfdFlags::HUGE_2MB,
    );
    // A kernel without hugetlbfs refuses the memfd.
    if let Ok(huge) = huge {
        assert_eq!(hugetlbfs_page_size(huge.as_fd()).unwrap(), Some(2 << 20));
    }
}

#[test]
fn whole_pages_accepts_multiples_and_a_zero_page_size() {
    assert!(whole_pages(4 << 20, 2 << 20, "t").is_ok());
    assert!(whole_pages(2 << 20, 2 << 20, "t").is_ok());
    assert!(whole_pages(4096, 0, "t").is_ok());
    let e = whole_pages(3 << 20, 2 << 20, "t").unwrap_err();
    assert!(e.to_string().contains("ask for 4194304"), "{e}");
    // Rounding up would pass the address space: ask for less.
    let e = whole_pages(usize::MAX, 2 << 20, "t").unwrap_err();
    let most = usize::MAX / (2 << 20) * (2 << 20);
    assert!(
        e.to_string().contains(&format!("ask for at most {most} ")),
        "{e}"
    );
}

#[test]
fn send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Mapping>();
}

/// A hugetlb size the kernel has no pool for is named in the error, with
/// the sizes it has (the kernel's bare EINVAL said "Invalid argument").
#[test]
fn a_huge_page_size_the_kernel_lacks_is_named() {
    let dir = std::env::temp_dir().join(format!("mmbatch-hugepages-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("hugepages-2048kB")).unwrap();
    std::fs::create_dir_all(dir.join("hugepages-64kB")).unwrap();
    std::fs::create_dir_all(dir.join("other")).unwrap();
    let sizes = huge::sizes_here(dir.to_str().unwrap());
    let checked = |size: HugePageSize| size.check_supported_in(dir.to_str().unwrap());
    assert!(checked(HugePageSize::Size2M).is_ok());
    let e = checked(HugePageSize::Size1G).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    assert!(e.to_string().contains("its sizes: 64 kB, 2048 kB"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // Without a listing (no sysfs) the kernel's answer decides.
    assert!(checked(HugePageSize::Size1G).is_ok());
    assert_eq!(sizes, Some(vec![64, 2048]));
    let e = huge::size_missing(1 << 30, vec![64, 2048]).expect("1 GiB is missing");
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    let msg = e.to_string();
    assert!(
        msg.contains("no 1048576 kB huge pages") && msg.contains("64 kB, 2048 kB"),
        "{msg}"
    );
    assert!(huge::size_missing(2 << 20, vec![64, 2048]).is_none());
    assert_eq!(huge::sizes_here("/nonexistent/hugepages"), None);
    // This host's own list has 2 MiB pages, and no 64 KiB ones (x86):
    // a mapping of those is refused with the sizes named.
    // (A kernel without hugetlbfs, or no sysfs: nothing more to try.)
    let Some(here) = huge::sizes_here(HUGEPAGES_DIR) else {
        return;
    };
    for size in [HugePageSize::Size2M, HugePageSize::Size1G] {
        let checked = size.check_supported();
        assert_eq!(
            checked.is_ok(),
            here.contains(&(size.bytes() >> 10)),
            "{size:?}: {checked:?}"
        );
    }
    if !here.is_empty() && !here.contains(&64) {
        let huge_64k = MapFlags::from_bits_retain(16 << MAP_HUGE_SHIFT);
        let e = Mapping::new(
            64 << 10,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::HUGETLB | huge_64k,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no 64 kB huge pages"), "{e}");
    }
}
