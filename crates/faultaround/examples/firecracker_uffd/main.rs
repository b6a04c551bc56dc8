//! A page-fault handler for Firecracker snapshots, built on
//! [`UffdHandler`](mmbatch_faultaround::UffdHandler): give Firecracker's
//! snapshot-load request `mem_backend: {backend_type: "Uffd",
//! backend_path: SOCKET}` and run
//!
//! ```text
//! cargo run --release --example firecracker_uffd -- SOCKET MEMORY_FILE [ORDER [HANDLERS]]
//! ```
//!
//! It listens on SOCKET, serves the microVM's faults from MEMORY_FILE in
//! windows of 2^ORDER pages (default 4) with HANDLERS threads (default 2),
//! and prints what it did when the microVM exits.
//!
//! MEMORY_FILE is mapped and copied from (as Firecracker's own handler
//! does): nothing may write or truncate it while the microVM restores — a
//! snapshot taken to the same path truncates it, and the handler then
//! dies of SIGBUS. Snapshot to a new path.

mod protocol;

use std::{os::unix::net::UnixListener, process::ExitCode};

use mmbatch_faultaround::InMemory;
use protocol::Mapped;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, memory, rest @ ..] = args.as_slice() else {
        eprintln!("usage: firecracker_uffd SOCKET MEMORY_FILE [ORDER [HANDLERS]]");
        return ExitCode::from(2);
    };
    let num = |i: usize, default: usize| rest.get(i).map_or(Ok(default), |s| s.parse::<usize>());
    let (Ok(order), Ok(handlers)) = (num(0, 4), num(1, 2)) else {
        eprintln!("ORDER and HANDLERS are numbers");
        return ExitCode::from(2);
    };
    let run = || -> Result<_, Box<dyn std::error::Error>> {
        let image = std::fs::File::open(memory)
            .map_err(|e| format!("opening the memory file {memory}: {e}"))?;
        // The file mapped and served from its bytes (as Firecracker's own
        // handler does): each window is one copy from the page cache, not
        // a `pread` into a buffer and a copy from it. Before the socket
        // is bound, so that a file that cannot be mapped leaves no socket
        // file behind.
        // SAFETY: the precondition the module docs give the operator:
        // nothing writes or truncates the memory file while it is served
        // (nothing of ours does).
        let mapped = unsafe { Mapped::of(&image) }
            .map_err(|e| format!("mapping the memory file {memory}: {e}"))?;
        let listener = UnixListener::bind(socket)
            .map_err(|e| format!("listening on {socket}: {e} (remove a stale socket file)"))?;
        protocol::serve(&listener, InMemory(mapped), order as u32, handlers)
    };
    match run() {
        Ok(stats) => {
            println!("firecracker_uffd: {stats:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("firecracker_uffd: {e}");
            ExitCode::FAILURE
        }
    }
}
