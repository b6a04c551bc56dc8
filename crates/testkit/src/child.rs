//! One test, re-run in a child process with a time limit.
//!
//! ```no_run
//! use std::time::Duration;
//! use mmbatch_testkit::child;
//!
//! #[test]
//! fn truncated_source_does_not_hang() {
//!     if let Some(run) = child::parent("truncated_source_does_not_hang", Duration::from_secs(30)) {
//!         run.expect_success();
//!         return;
//!     }
//!     // ... the body, run in the child only.
//! }
//! ```

use std::{
    os::unix::process::ExitStatusExt,
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

/// Set in the child's environment.
pub const CHILD_ENV: &str = "MMBATCH_TEST_CHILD";

/// How a child run ended.
#[derive(Debug)]
pub struct Run {
    /// The test's name.
    pub name: String,
    /// `None`: killed after the time limit.
    pub status: Option<ExitStatus>,
    /// stdout then stderr.
    pub output: String,
    /// The limit it was given.
    pub limit: Duration,
}

impl Run {
    /// Panics unless the child exited successfully in time, having run
    /// the test (a name that is not a test's full path runs none, and
    /// succeeds).
    pub fn expect_success(&self) {
        match self.status {
            None => panic!(
                "{} did not finish in {:?} (hang):\n{}",
                self.name, self.limit, self.output
            ),
            Some(s) if !s.success() => panic!("{} failed ({s}):\n{}", self.name, self.output),
            Some(_) if !self.output.contains("running 1 test") => panic!(
                "{} ran no test in the child: name the test by its full path (a unit test's \
                 with its modules):\n{}",
                self.name, self.output
            ),
            Some(_) => {}
        }
    }

    /// The signal that killed the child, if one did; panics on a hang.
    pub fn signal(&self) -> Option<i32> {
        match self.status {
            None => panic!(
                "{} did not finish in {:?} (hang):\n{}",
                self.name, self.limit, self.output
            ),
            Some(s) => s.signal(),
        }
    }
}

/// Whether this process is a child started by [`parent`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// In the test runner: runs test `name` (exactly) of this binary in a
/// child, waits at most `limit` ([`scaled`] to the machine; then kills
/// it), and returns how it ended.
/// In the child: `None`, so the caller runs the test's body.
pub fn parent(name: &str, limit: Duration) -> Option<Run> {
    if is_child() {
        return None;
    }
    Some(run(name, limit, &[]))
}

/// A limit [`lower_rlimit`] lowers.
#[derive(Clone, Copy, Debug)]
pub enum Rlimit {
    /// `RLIMIT_FSIZE`: the largest file the process may write (a memfd
    /// too); past it, `SIGXFSZ`.
    FileSize,
    /// `RLIMIT_AS`: the process's address space; past it, mappings and
    /// allocations fail.
    AddressSpace,
}

/// Lowers this process's `limit` (soft and hard) to at most `bytes`,
/// never raising a hard limit the host already set lower: for a child
/// whose test must fail safely where the code under test would fill the
/// machine.
///
/// # Panics
/// If the kernel refuses.
pub fn lower_rlimit(limit: Rlimit, bytes: u64) {
    let resource = match limit {
        Rlimit::FileSize => libc::RLIMIT_FSIZE,
        Rlimit::AddressSpace => libc::RLIMIT_AS,
    };
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `now` is a valid rlimit for the call to write.
    let got = unsafe { libc::getrlimit(resource, &mut now) };
    assert_eq!(got, 0, "getrlimit: {}", std::io::Error::last_os_error());
    // rlim_t is 32 bits on 32-bit targets: a larger bound is no bound.
    let bytes = libc::rlim_t::try_from(bytes).unwrap_or(libc::rlim_t::MAX);
    now.rlim_max = now.rlim_max.min(bytes);
    now.rlim_cur = now.rlim_cur.min(bytes);
    // SAFETY: `now` is a valid rlimit for the call to read.
    let set = unsafe { libc::setrlimit(resource, &now) };
    assert_eq!(set, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// `limit` for this machine: as given, or multiplied by
/// `MMBATCH_TEST_TIME_SCALE` where that is set, or by 10 in a guest under
/// software emulation (`MMBATCH_VM=qemu-tcg`, which `cargo xtask vm`
/// passes), where everything runs tens of times slower.
pub fn scaled(limit: Duration) -> Duration {
    let scale = std::env::var("MMBATCH_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or_else(|| {
            if std::env::var_os("MMBATCH_VM").is_some_and(|v| v == "qemu-tcg") {
                10
            } else {
                1
            }
        });
    limit.saturating_mul(scale.max(1))
}

/// Runs test `name` of this binary in a child with extra environment
/// `env`, killed after `limit` ([`scaled`] to the machine).
pub fn run(name: &str, limit: Duration, env: &[(&str, &str)]) -> Run {
    run_until(name, limit, env, || false)
}

/// [`run`], the child also killed (as at its limit) once `give_up`
/// returns true: when what it waits on is known to be gone (a handler
/// that failed), a test fails then rather than at its limit.
pub fn run_until(
    name: &str,
    limit: Duration,
    env: &[(&str, &str)],
    give_up: impl Fn() -> bool,
) -> Run {
    let limit = scaled(limit);
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        name,
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // The child dies with the thread that spawned it (which waits for
        // it here): a test binary killed at a limit of its own (the VM's)
        // leaves no child blocked in a fault.
        let die_with_parent = || {
            // SAFETY: PR_SET_PDEATHSIG takes a signal number; no memory.
            if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: between fork and exec the closure makes one system call,
        // prctl, which is async-signal-safe, and allocates nothing.
        unsafe { cmd.pre_exec(die_with_parent) };
    }
    let mut child = cmd.spawn().expect("spawning the test binary");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break Some(status);
        }
        if start.elapsed() > limit || give_up() {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().expect("the child's output");
    Run {
        name: name.to_owned(),
        status,
        output: String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr),
        limit,
    }
}
