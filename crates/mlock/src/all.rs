//! `mlockall` / `munlockall` for the whole process.

use rustix::mm::MlockAllFlags;

use crate::{Error, accounting};

/// What [`mlockall`] locks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockAll {
    /// `MCL_CURRENT`: everything mapped now.
    pub current: bool,
    /// `MCL_FUTURE`: everything mapped later.
    pub future: bool,
    /// `MCL_ONFAULT`: lock pages as they are touched, not all at once
    /// (with `current` and/or `future`).
    pub on_fault: bool,
}

/// Locks the process's memory (`mlockall`).
pub fn mlockall(what: LockAll) -> Result<(), Error> {
    let mut flags = MlockAllFlags::empty();
    if what.current {
        flags |= MlockAllFlags::CURRENT;
    }
    if what.future {
        flags |= MlockAllFlags::FUTURE;
    }
    if what.on_fault {
        flags |= MlockAllFlags::ONFAULT;
    }
    rustix::mm::mlockall(flags).map_err(|e| {
        let len = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmSize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            })
            .map_or(accounting::page_size(), |kb| kb * 1024);
        Error::from_lock("mlockall", len, e)
    })
}

/// Unlocks all of the process's memory and cancels `MCL_FUTURE`
/// (`munlockall`).
pub fn munlockall() -> Result<(), Error> {
    rustix::mm::munlockall().map_err(|e| Error::Sys {
        op: "munlockall",
        source: e.into(),
    })
}
