//! `mlockall` / `munlockall` for the whole process.

use rustix::mm::MlockAllFlags;

use crate::{Error, accounting};

bitflags::bitflags! {
    /// What [`mlockall`] locks (`MCL_*`): flags, so that the kernel's next
    /// one can be added.
    ///
    /// ```no_run
    /// use mmbatch_mlock::{LockAll, mlockall};
    ///
    /// mlockall(LockAll::CURRENT | LockAll::ON_FAULT)?;
    /// # Ok::<(), mmbatch_mlock::Error>(())
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct LockAll: u32 {
        /// `MCL_CURRENT`: everything mapped now.
        const CURRENT = 1;
        /// `MCL_FUTURE`: everything mapped later.
        const FUTURE = 1 << 1;
        /// `MCL_ONFAULT`: lock pages as they are touched, not all at once
        /// (with `CURRENT` and/or `FUTURE`).
        const ON_FAULT = 1 << 2;
    }
}

/// Locks the process's memory (`mlockall`). `what` needs `CURRENT`,
/// `FUTURE` or both ([`Error::BadFlags`] otherwise, checked before the
/// call: the kernel's EINVAL names nothing).
pub fn mlockall(what: LockAll) -> Result<(), Error> {
    if !what.intersects(LockAll::CURRENT | LockAll::FUTURE) {
        return Err(Error::BadFlags {
            op: "mlockall",
            why: "give LockAll::CURRENT, LockAll::FUTURE or both (ON_FAULT alone says how \
                  to lock, not what)",
        });
    }
    let mut flags = MlockAllFlags::empty();
    if what.contains(LockAll::CURRENT) {
        flags |= MlockAllFlags::CURRENT;
    }
    if what.contains(LockAll::FUTURE) {
        flags |= MlockAllFlags::FUTURE;
    }
    if what.contains(LockAll::ON_FAULT) {
        flags |= MlockAllFlags::ONFAULT;
    }
    rustix::mm::mlockall(flags).map_err(|e| {
        let len = accounting::process_mapped_bytes()
            .ok()
            .and_then(|b| usize::try_from(b).ok())
            .unwrap_or_else(accounting::page_size);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags that lock nothing are refused before the call, naming the
    /// fix, rather than as the kernel's bare EINVAL.
    #[test]
    fn flags_without_current_or_future_are_named() {
        for what in [LockAll::empty(), LockAll::ON_FAULT] {
            let e = mlockall(what).unwrap_err();
            assert!(
                matches!(e, Error::BadFlags { op: "mlockall", .. }),
                "{what:?}: {e}"
            );
            assert!(e.to_string().contains("LockAll::CURRENT"), "{e}");
        }
    }
}
