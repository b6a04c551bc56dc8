//! `foreign-order-0` and `foreign-order-4`: the working set read by
//! another process — a VMM that maps guest memory, registers it with its
//! own userfaultfd and hands the descriptor over a Unix socket — served
//! from this process by a `UffdHandler`, as Firecracker's page-fault
//! handler serves a microVM. `repro` re-executes itself as the VMM
//! ([`child`]); the sample is timed in the VMM from before its `mmap`
//! until its threads have read the working set, as the owned rows are
//! timed from before the region is built.

use std::{
    io::Read,
    os::unix::net::UnixListener,
    process::{Command, ExitCode, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use mmbatch_faultaround::{UffdHandler, UffdRange};
use mmbatch_testkit::vmm;

use super::{Counted, Image, Sample, check, quantile, touch_timed};

/// Set in the VMM child: `SOCKET THREADS START:LEN,START:LEN,...` (the
/// working set's runs, in touch order).
const CHILD_ENV: &str = "MMBATCH_RESTORE_VMM";

/// The VMM's side: when `MMBATCH_RESTORE_VMM` is set, maps the image's length,
/// hands its userfaultfd to the handler, reads the working set (timing
/// each page's read), checks it, prints the seconds it took and the p50
/// and p99 read in nanoseconds, and returns the exit code (`repro`'s
/// `main` returns it); `None` in a normal run.
pub fn child() -> Option<ExitCode> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    Some(match play_vmm(&spec) {
        Ok((s, p50, p99)) => {
            println!("{s} {p50} {p99}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{CHILD_ENV}: {e}");
            ExitCode::FAILURE
        }
    })
}

fn play_vmm(spec: &str) -> Result<(f64, u64, u64), String> {
    let bad = || format!("{CHILD_ENV}={spec:.60}…: want SOCKET THREADS LEN START:N,...");
    let mut it = spec.split(' ');
    let (Some(socket), Some(threads), Some(len), Some(runs)) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(bad());
    };
    let threads: usize = threads.parse().map_err(|_| bad())?;
    let len: usize = len.parse().map_err(|_| bad())?;
    let runs: Vec<(u64, u64)> = runs
        .split(',')
        .map(|r| {
            let (s, n) = r.split_once(':')?;
            Some((s.parse().ok()?, n.parse().ok()?))
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let start = Instant::now();
    let base = vmm::map_anonymous(len);
    let uffd = vmm::userfaultfd(&[(base, len)], 0);
    let _stream = vmm::send(socket, format!("{} {len}", base as usize).as_bytes(), &uffd);
    let reads = touch_timed(base as usize, &runs, threads, true);
    let elapsed = start.elapsed().as_secs_f64();
    check(base, &runs)?;
    Ok((elapsed, quantile(&reads, 0.5), quantile(&reads, 0.99)))
}

/// The `repro` binary, which [`child`] runs in.
fn repro_exe() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    match exe.file_stem() {
        Some(s) if s == "repro" => Ok(exe),
        _ => Err(format!(
            "{} is not the repro binary, which the foreign rows re-execute as the VMM",
            exe.display()
        )),
    }
}

/// One foreign sample: the handler here, with `2^order`-page windows, the
/// VMM a child reading the working set on `threads` threads.
pub(super) fn foreign(
    image: &Image,
    runs: &[(u64, u64)],
    threads: usize,
    order: u32,
) -> Result<Sample, String> {
    let exe = repro_exe()?;
    let dir = std::env::temp_dir().join(format!("mmbatch-restore-vmm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let socket = dir.join("uffd.sock");
    let listener = UnixListener::bind(&socket).map_err(|e| e.to_string())?;
    let runs_arg: Vec<String> = runs.iter().map(|(s, n)| format!("{s}:{n}")).collect();
    let spec = format!(
        "{} {threads} {} {}",
        socket.display(),
        image.len(),
        runs_arg.join(",")
    );
    let mut child = Command::new(exe)
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the VMM: {e}"))?;
    let served = serve(&listener, image, order, &mut child);
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let (faults, pages_copied, bytes_read) = served?;
    if !out.status.success() {
        return Err(format!(
            "the VMM failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let printed = String::from_utf8_lossy(&out.stdout);
    let mut it = printed.split_whitespace();
    let no_time = || "the VMM printed no time".to_string();
    let elapsed_s = it.next().and_then(|t| t.parse().ok()).ok_or_else(no_time)?;
    let mut ns = || it.next().and_then(|t| t.parse().ok()).ok_or_else(no_time);
    let (read_p50_ns, read_p99_ns) = (ns()?, ns()?);
    Ok(Sample {
        elapsed_s,
        faults,
        pages_copied,
        bytes_read,
        prefetched: 0,
        read_p50_ns,
        read_p99_ns,
    })
}

/// Accepts the VMM (giving up if it exits first), serves it until it
/// hangs up: faults, pages copied, bytes read.
fn serve(
    listener: &UnixListener,
    image: &Image,
    order: u32,
    child: &mut std::process::Child,
) -> Result<(u64, u64, u64), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if child.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
                    return Err("the VMM never connected".into());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let (uffd, body) = vmm::receive(&stream).map_err(|e| format!("the VMM's message: {e}"))?;
    let body = String::from_utf8_lossy(&body);
    let (base, len) = body
        .split_once(' ')
        .and_then(|(b, l)| Some((b.parse().ok()?, l.parse().ok()?)))
        .ok_or_else(|| format!("the VMM's message {body:?} is not `BASE LEN`"))?;
    static BYTES_READ: AtomicU64 = AtomicU64::new(0);
    BYTES_READ.store(0, Ordering::Relaxed);
    let source = Counted {
        file: image.file.try_clone().map_err(|e| e.to_string())?,
        bytes: &BYTES_READ,
    };
    let handler = UffdHandler::builder(
        uffd,
        [UffdRange {
            base,
            len,
            offset: 0,
        }],
    )
    .order(order)
    .build(source)
    .map_err(|e| e.to_string())?;
    // Until the VMM exits.
    let _ = stream.read(&mut [0u8; 1]);
    if let Some(e) = handler.failure() {
        return Err(e.to_string());
    }
    let st = handler.stats();
    Ok((
        st.faults,
        st.pages_copied,
        BYTES_READ.load(Ordering::Relaxed),
    ))
}
