//! Test support for the mmbatch crates (not published).
//!
//! [`child`] re-runs one test of the current test binary in a child
//! process with a bounded wait: hangs and fatal signals are tested there,
//! never by hanging or killing the test runner.
//! [`signal`] reads memory that should kill the process and reports the
//! signal. [`seccomp`] makes system calls fail. [`bytes`] reads sizes off fuzzer input for the fuzz targets.
//! Under `cfg(mmbatch_loom)`, `loom_model::check` runs every crate's loom models
//! the same way. [`threads_named`] counts a process's threads by name;
//! [`threads_named_settled`] waits for the count to settle;
//! [`wait_until`] waits, bounded, for a condition; [`hang_guard`] aborts
//! an in-process test that outlives its bound. [`vmm`] plays a VMM
//! handing its userfaultfd to a handler process. [`huge`] grows the huge
//! page pool for a test and puts it back.

pub mod bytes;
pub mod child;
#[cfg(target_os = "linux")]
pub mod huge;
#[cfg(mmbatch_loom)]
pub mod loom_model;
#[cfg(target_os = "linux")]
pub mod seccomp;
pub mod signal;
#[cfg(target_os = "linux")]
pub mod vmm;

/// The calling process's open descriptors whose `/proc/self/fd` link
/// names one of `kinds` (`anon_inode:[userfaultfd]` names `userfaultfd`):
/// a library's own kinds, which other tests' files and pipes are not.
pub fn open_fds_of(kinds: &[&str]) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("reading /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            kinds.iter().any(|k| l.contains(k))
        })
        .count()
}

/// The calling process's threads whose name (`/proc/self/task/*/comm`)
/// starts with `prefix`: the threads a library started and left.
pub fn threads_named(prefix: &str) -> usize {
    threads_named_in(prefix, None)
}

/// [`threads_named`] asleep (state `S` in `/proc/self/task/*/stat`: in
/// an interruptible wait, such as `poll` or a futex).
pub fn threads_named_asleep(prefix: &str) -> usize {
    threads_named_in(prefix, Some('S'))
}

/// The threads named `prefix*` in `state` (any state for `None`).
fn threads_named_in(prefix: &str, state: Option<char>) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists the threads")
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
                && state.is_none_or(|state| {
                    // The state follows the name's closing parenthesis.
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
                        st.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with(state))
                    })
                })
        })
        .count()
}

/// [`threads_named`] once it equals `want`, or after `limit`: a joined
/// thread's `/proc/self/task` entry goes a moment after the join returns
/// (the kernel reaps the task after waking the joiner; seen under TCG),
/// so a count taken at once can include threads already joined.
pub fn threads_named_settled(prefix: &str, want: usize, limit: std::time::Duration) -> usize {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let n = threads_named(prefix);
        if n == want || std::time::Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits up to `limit` for `done` to hold, checking every 5 ms; panics
/// with "`what` hangs" past it.
pub fn wait_until(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} hangs");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The message of a panic's payload (a `String` or a `&str`), or "" for
/// any other payload: what tests of "panics, naming the cause" read.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Whether the running kernel is at least `major.minor` (from
/// `/proc/sys/kernel/osrelease`; false where it cannot be read), for tests
/// of a feature a kernel release added, which assert the documented
/// fallback on older ones.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (got_major, got_minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (got_major, got_minor) >= (major, minor)
}

/// Aborts the process, naming `what`, unless dropped within `limit`
/// ([`hang_guard`]).
#[derive(Debug)]
#[must_use = "dropped at once it guards nothing: bind it (`let _hang = ...`) for the test's length"]
pub struct HangGuard {
    done: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

/// How long a [`hang_guard`] waits, before [`child::scaled`]: above the
/// bounds the guarded tests wait on themselves (the restore tests' 10 +
/// 20 + 10 s), under cargo-mutants' 66 s timeout, so that a mutant that
/// hangs them fails.
pub const HANG_LIMIT: std::time::Duration = std::time::Duration::from_secs(45);

/// A guard for an in-process test whose code could hang (a fault its
/// handler never serves): unless it is dropped within [`HANG_LIMIT`]
/// ([`child::scaled`]), a thread of its own prints "`what` did not
/// finish" and aborts the process, so that the test binary fails in
/// bounded time instead of running until killed. Tests that must survive
/// a hang run in a child ([`child::parent`]) instead.
pub fn hang_guard(what: &str) -> HangGuard {
    hang_guard_within(what, child::scaled(HANG_LIMIT))
}

/// [`hang_guard`] with a limit of the caller's, taken as given.
pub fn hang_guard_within(what: &str, limit: std::time::Duration) -> HangGuard {
    let done = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let (d, what) = (done.clone(), what.to_owned());
    std::thread::Builder::new()
        .name("hang-guard".into())
        .spawn(move || {
            let (lock, cv) = &*d;
            let g = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (g, _) = cv
                .wait_timeout_while(g, limit, |done| !*done)
                .unwrap_or_else(|e| e.into_inner());
            if !*g {
                // To the process's stderr: a test's captured output (where
                // `eprintln!` from a thread the test started goes) is lost
                // with the abort.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "{what} did not finish in {limit:?} (hang): aborting"
                );
                std::process::abort();
            }
        })
        .expect("the hang guard's thread starts");
    HangGuard { done }
}

impl Drop for HangGuard {
    fn drop(&mut self) {
        let (lock, cv) = &*self.done;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_one();
    }
}
