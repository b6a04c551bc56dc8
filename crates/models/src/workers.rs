//! A fixed set of persistent worker threads that run one job at a time for
//! a driving thread: how the model tests (and the fuzz targets) drive real
//! per-thread batches step by step, deterministically. Shared by the
//! pagevec and lru test suites and the fuzz targets.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Condvar, Mutex};
#[cfg(not(miri))]
use std::sync::{MutexGuard, OnceLock};

/// Worker threads in the pool.
pub const THREADS: usize = 3;

/// Work for one worker.
pub type Job = Box<dyn FnOnce() + Send>;

/// The worker threads, spawned once and reused by every run (one run at a
/// time): a fresh thread per run would make each run pay for thread start
/// and teardown, and LeakSanitizer (under cargo-fuzz) reports the TLS
/// destructor records of threads still tearing down as leaks.
#[cfg(not(miri))]
pub fn workers() -> MutexGuard<'static, Pool> {
    static WORKERS: OnceLock<Mutex<Pool>> = OnceLock::new();
    let guard = WORKERS.get_or_init(|| Mutex::new(Pool::spawn())).lock();
    guard.unwrap_or_else(|e| e.into_inner())
}

/// Under Miri, which requires every thread joined before `main` returns,
/// each run has its own pool.
#[cfg(miri)]
pub fn workers() -> Pool {
    Pool::spawn()
}

/// `THREADS` workers; dropping the pool stops and joins them.
#[derive(Debug)]
pub struct Pool {
    mailboxes: Vec<Arc<Mailbox>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn spawn() -> Self {
        let mailboxes: Vec<Arc<Mailbox>> = (0..THREADS).map(|_| Arc::default()).collect();
        let threads = mailboxes
            .iter()
            .enumerate()
            .map(|(i, mailbox)| {
                let mailbox = mailbox.clone();
                std::thread::Builder::new()
                    .name(format!("model-worker-{i}"))
                    .spawn(move || mailbox.serve())
                    .expect("spawning a model worker")
            })
            .collect();
        Pool { mailboxes, threads }
    }
}

impl std::ops::Deref for Pool {
    type Target = [Arc<Mailbox>];
    fn deref(&self) -> &Self::Target {
        &self.mailboxes
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for mailbox in &self.mailboxes {
            *mailbox.mail.lock().unwrap_or_else(|e| e.into_inner()) = Mail::Quit;
            mailbox.changed.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A one-job handshake between the driver and a worker.
#[derive(Default)]
pub struct Mailbox {
    mail: Mutex<Mail>,
    changed: Condvar,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox").finish_non_exhaustive()
    }
}

#[derive(Default)]
enum Mail {
    #[default]
    Idle,
    Job(Job),
    Busy,
    Finished(Result<(), String>),
    Quit,
}

impl Mailbox {
    /// Runs `job` on the worker and waits for it; a panic comes back as an
    /// error.
    pub fn run(&self, job: Job) -> Result<(), String> {
        let mut mail = self.mail.lock().unwrap();
        *mail = Mail::Job(job);
        self.changed.notify_all();
        loop {
            match std::mem::take(&mut *mail) {
                Mail::Finished(result) => return result,
                other => {
                    *mail = other;
                    mail = self.changed.wait(mail).unwrap();
                }
            }
        }
    }

    /// The worker's loop: take a job, run it, report; until told to quit.
    fn serve(&self) {
        let mut mail = self.mail.lock().unwrap();
        loop {
            match std::mem::replace(&mut *mail, Mail::Busy) {
                Mail::Quit => return,
                Mail::Job(job) => {
                    drop(mail);
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        .map_err(|p| {
                            p.downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| p.downcast_ref::<String>().cloned())
                                .unwrap_or_default()
                        });
                    mail = self.mail.lock().unwrap();
                    *mail = Mail::Finished(result);
                    self.changed.notify_all();
                }
                other => {
                    *mail = other;
                    mail = self.changed.wait(mail).unwrap();
                }
            }
        }
    }
}
