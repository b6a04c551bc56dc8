//! Ways a replay could install a working set, side by side on raw
//! userfaultfd ioctls (not through `UffdRegion`), to choose the replay's
//! path: `cargo run --release -p mmbatch-benches --example replay_paths
//! [MiB]` (default 1024; needs a userfaultfd, and `UFFDIO_MOVE`, Linux
//! 6.8, for the `move` rows). A working set of 10% of an image, in runs
//! of 1 to 62 pages, is installed one thread, warm, by:
//!
//! - `floor`: pread into memory made resident before the clock;
//! - `floor-fresh`: the same, each run populated (`MADV_POPULATE_WRITE`)
//!   inside the clock;
//! - `copy-run`: a pread a run into a buffer, one `UFFDIO_COPY` a run;
//! - `copy-run-dontwake`: the same with `UFFDIO_COPY_MODE_DONTWAKE`;
//! - `copy-2m`: 2 MiB of the working-set file a pread, a copy a run (what
//!   the replay does);
//! - `copy-direct`: `copy-2m` read with `O_DIRECT`;
//! - `copy-mmap`: `UFFDIO_COPY` straight from a read-only mapping of the
//!   working-set file, populated inside the clock;
//! - `move`: each run read into a populated staging buffer, then moved
//!   into place (`UFFDIO_MOVE`).
//!
//! Prints the median and minimum of 7 samples a row, in ms and GiB/s.
//! ARCHITECTURE section 4 gives a run's figures.

use std::{
    fs::File,
    os::{
        fd::AsRawFd,
        unix::fs::{FileExt, OpenOptionsExt},
    },
    time::Instant,
};

const PAGE: usize = 4096;
const SAMPLES: usize = 7;

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
struct Register {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}
/// `struct uffdio_copy` and `struct uffdio_move` (same layout).
#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    result: i64,
}
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_MOVE: libc::c_ulong = 0xc028_aa05;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const DONTWAKE: u64 = 1;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// An anonymous private mapping of `len` bytes.
fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping; the caller unmaps it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap");
    p.cast()
}

/// A userfaultfd with `features`, and `len` bytes registered with it.
fn region(len: usize, features: u64) -> (i32, *mut u8) {
    // SAFETY: the system call takes flags only.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) } as i32;
    assert!(fd >= 0, "userfaultfd: {}", std::io::Error::last_os_error());
    let mut api = Api {
        api: 0xaa,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API takes a `struct uffdio_api`.
    let r = unsafe { libc::ioctl(fd, UFFDIO_API, &mut api) };
    assert_eq!(r, 0, "UFFDIO_API");
    let base = map(len);
    let mut reg = Register {
        start: base as u64,
        len: len as u64,
        mode: 1,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER takes a `struct uffdio_register` of our mapping.
    let r = unsafe { libc::ioctl(fd, UFFDIO_REGISTER, &mut reg) };
    assert_eq!(r, 0, "UFFDIO_REGISTER");
    (fd, base)
}

/// `UFFDIO_COPY` or `UFFDIO_MOVE` of `len` bytes from `src` to `dst`.
fn install(fd: i32, op: libc::c_ulong, dst: *mut u8, src: *const u8, len: usize, mode: u64) {
    let mut c = Copy {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode,
        result: 0,
    };
    // SAFETY: `dst..dst + len` is inside our registered range, `src` has
    // `len` readable bytes (or mapped pages, to move).
    let r = unsafe { libc::ioctl(fd, op, &mut c) };
    assert_eq!(r, 0, "install: {}", std::io::Error::last_os_error());
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .map_or(1024, |a| a.parse().expect("MiB"));
    let pages = mib * 256;
    let dir = std::env::temp_dir();
    let (img_path, ws_path) = (dir.join("replay-paths.img"), dir.join("replay-paths.ws"));
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut data: Vec<u8> = (0..pages * PAGE / 8)
        .flat_map(|_| xorshift(&mut s).to_ne_bytes())
        .collect();
    std::fs::write(&img_path, &data).expect("writing the image");
    // Runs of 1..62 pages, 10% of the image, sorted, not overlapping.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let want = pages / 10;
    let mut total = 0;
    while total < want {
        let n = (1 + xorshift(&mut s) % 62) as usize;
        runs.push((
            xorshift(&mut s) as usize % (pages - 64),
            n.min(want - total),
        ));
        total += n.min(want - total);
    }
    runs.sort_unstable();
    runs.dedup_by(|b, a| b.0 < a.0 + a.1);
    let total: usize = runs.iter().map(|r| r.1).sum();
    let mut off = Vec::with_capacity(runs.len());
    let mut ws = Vec::with_capacity(total * PAGE);
    for &(at, n) in &runs {
        off.push(ws.len());
        ws.extend_from_slice(&data[at * PAGE..(at + n) * PAGE]);
    }
    std::fs::write(&ws_path, &ws).expect("writing the working-set file");
    data.clear();
    let ws_file = File::open(&ws_path).expect("the working-set file");
    // Refused where the temp directory cannot do O_DIRECT (tmpfs before
    // Linux 6.6): that row is then skipped.
    let direct = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&ws_path)
        .ok();
    // Warm: read both files once.
    drop(std::fs::read(&img_path));
    drop(std::fs::read(&ws_path));
    println!(
        "{} runs, {total} pages ({} MiB) of a {mib} MiB image; one thread, warm",
        runs.len(),
        (total * PAGE) >> 20
    );
    let bytes = total * PAGE;
    let modes = [
        "floor",
        "floor-fresh",
        "copy-run",
        "copy-run-dontwake",
        "copy-2m",
        "copy-direct",
        "copy-mmap",
        "move",
    ];
    for mode in modes {
        if mode == "copy-direct" && direct.is_none() {
            println!("{mode:>18}: skipped (the temp directory refuses O_DIRECT)");
            continue;
        }
        let mut ms = Vec::new();
        for _ in 0..SAMPLES {
            let (fd, base) = region(
                pages * PAGE,
                if mode == "move" { UFFD_FEATURE_MOVE } else { 0 },
            );
            let floor = map(bytes);
            if mode == "floor" {
                // SAFETY: our own mapping.
                unsafe { libc::madvise(floor.cast(), bytes, libc::MADV_POPULATE_WRITE) };
            }
            let buf = map(2 << 20);
            // SAFETY: our own mapping.
            unsafe { libc::madvise(buf.cast(), 2 << 20, libc::MADV_POPULATE_WRITE) };
            let buf_slice = |len: usize| {
                // SAFETY: `buf` maps 2 MiB, resident, used by this thread only.
                unsafe { std::slice::from_raw_parts_mut(buf, len) }
            };
            let start = Instant::now();
            let file_map = if mode == "copy-mmap" {
                // SAFETY: a read-only shared mapping of our own file, which
                // nothing changes while it is mapped.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        bytes,
                        libc::PROT_READ,
                        libc::MAP_SHARED,
                        ws_file.as_raw_fd(),
                        0,
                    )
                };
                assert_ne!(p, libc::MAP_FAILED);
                // SAFETY: the mapping just made.
                unsafe { libc::madvise(p, bytes, libc::MADV_POPULATE_READ) };
                p.cast::<u8>()
            } else {
                std::ptr::null_mut()
            };
            let mut chunk = 0..0;
            for (i, &(at, n)) in runs.iter().enumerate() {
                let (dst, len) = (base.wrapping_add(at * PAGE), n * PAGE);
                match mode {
                    "floor" | "floor-fresh" => {
                        let d = floor.wrapping_add(off[i]);
                        if mode == "floor-fresh" {
                            // SAFETY: inside our own mapping.
                            unsafe { libc::madvise(d.cast(), len, libc::MADV_POPULATE_WRITE) };
                        }
                        // SAFETY: `len` bytes of our own mapping at `d`.
                        let to = unsafe { std::slice::from_raw_parts_mut(d, len) };
                        ws_file.read_exact_at(to, off[i] as u64).expect("pread");
                    }
                    "copy-run" | "copy-run-dontwake" => {
                        ws_file
                            .read_exact_at(buf_slice(len), off[i] as u64)
                            .expect("pread");
                        install(
                            fd,
                            UFFDIO_COPY,
                            dst,
                            buf,
                            len,
                            if mode == "copy-run" { 0 } else { DONTWAKE },
                        );
                    }
                    "copy-2m" | "copy-direct" => {
                        if off[i] + len > chunk.end {
                            let n = (2 << 20).min(bytes - off[i]);
                            let f = if mode == "copy-direct" {
                                direct.as_ref().expect("checked above")
                            } else {
                                &ws_file
                            };
                            f.read_exact_at(buf_slice(n), off[i] as u64).expect("pread");
                            chunk = off[i]..off[i] + n;
                        }
                        install(
                            fd,
                            UFFDIO_COPY,
                            dst,
                            buf.wrapping_add(off[i] - chunk.start),
                            len,
                            0,
                        );
                    }
                    "copy-mmap" => {
                        install(fd, UFFDIO_COPY, dst, file_map.wrapping_add(off[i]), len, 0)
                    }
                    _ => {
                        // SAFETY: our own mapping.
                        unsafe { libc::madvise(buf.cast(), len, libc::MADV_POPULATE_WRITE) };
                        ws_file
                            .read_exact_at(buf_slice(len), off[i] as u64)
                            .expect("pread");
                        install(fd, UFFDIO_MOVE, dst, buf, len, 0);
                    }
                }
            }
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            if mode.starts_with("copy") || mode == "move" {
                let (at, n) = runs[runs.len() / 2];
                let mut want = vec![0u8; n * PAGE];
                File::open(&img_path)
                    .unwrap()
                    .read_exact_at(&mut want, (at * PAGE) as u64)
                    .unwrap();
                // SAFETY: the run is installed in our region.
                let got =
                    unsafe { std::slice::from_raw_parts(base.wrapping_add(at * PAGE), n * PAGE) };
                assert!(
                    got == want.as_slice(),
                    "{mode}: the region does not hold the image"
                );
            }
            let unmap = |p: *mut u8, len: usize| {
                // SAFETY: a mapping made above, of `len` bytes, unused from here.
                unsafe { libc::munmap(p.cast(), len) };
            };
            if !file_map.is_null() {
                unmap(file_map, bytes);
            }
            unmap(buf, 2 << 20);
            unmap(floor, bytes);
            unmap(base, pages * PAGE);
            // SAFETY: our own descriptor, not used after.
            unsafe { libc::close(fd) };
        }
        ms.sort_by(f64::total_cmp);
        let gib = bytes as f64 / (ms[SAMPLES / 2] / 1e3) / f64::from(1u32 << 30);
        println!(
            "{mode:>18}: median {:7.2} ms, min {:7.2} ms, {gib:.2} GiB/s",
            ms[SAMPLES / 2],
            ms[0]
        );
    }
    let _ = std::fs::remove_file(&img_path);
    let _ = std::fs::remove_file(&ws_path);
}
