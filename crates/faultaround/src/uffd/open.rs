//! Opening a region's userfaultfd, and what its refusals mean.

use std::io;

use rustix::io::Errno;

use super::sys::{UFFD_FEATURE_EVENT_REMOVE, UFFD_USER_MODE_ONLY, Uffd};
use crate::Error;

/// Which faults on a region its handlers serve: the process's own
/// accesses only, or the kernel's on its behalf too. From
/// [`UffdRegion::mode`](super::UffdRegion::mode).
///
/// The kernel reads a region's memory itself whenever the region is handed
/// to a system call: `write(2)`, `send(2)`, a pipe, an O_DIRECT read or
/// write (which pins the pages), io_uring, vhost, or another region's
/// `UFFDIO_COPY` from a [`pages`](super::PageSource::pages) slice into this
/// one. A page not yet present then faults in kernel mode, and only a
/// userfaultfd opened without `UFFD_USER_MODE_ONLY` is told of that fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UffdMode {
    /// Every fault is served, the kernel's on the process's behalf too
    /// (`copy_from_user` in `write(2)`, `pin_user_pages` for O_DIRECT):
    /// the region reads the same through a system call as through
    /// [`as_slice`](super::UffdRegion::as_slice). The process opened
    /// `/dev/userfaultfd`, or the system call was allowed without
    /// `UFFD_USER_MODE_ONLY` (`CAP_SYS_PTRACE`, or
    /// `vm.unprivileged_userfaultfd=1`), or the kernel predates the flag
    /// (before 5.11, where every userfaultfd serves kernel faults).
    AllFaults,
    /// Only the process's own accesses are served (`UFFD_USER_MODE_ONLY`,
    /// what an unprivileged process gets since Linux 5.11): a system call
    /// that reads a page not yet present fails with `EFAULT` ("Bad
    /// address": `write(2)`, `send(2)`, O_DIRECT, a `UFFDIO_COPY` from it),
    /// though `as_slice()[i]` reads it fine; a page already read by the
    /// process is no different from any other memory. For the full mode,
    /// run with one of: root or `CAP_SYS_PTRACE`; read and write access to
    /// `/dev/userfaultfd` (root's only, mode 0600, by default: a group or
    /// an ACL can grant it); or `sysctl vm.unprivileged_userfaultfd=1`.
    UserModeOnly,
}

/// A refused userfaultfd call, as [`errno_error`] names it.
pub(super) fn uffd_error(e: Errno) -> Error {
    errno_error(e.raw_os_error())
}

/// What a refused userfaultfd call's errno means.
fn errno_error(errno: i32) -> Error {
    let source = io::Error::from_raw_os_error(errno);
    match errno {
        libc::EPERM | libc::EACCES => Error::NoPermission { source },
        libc::ENOSYS | libc::EINVAL => Error::Unsupported {
            what: format!(
                "userfaultfd ({source}): it needs Linux 4.11+ built with CONFIG_USERFAULTFD"
            ),
        },
        _ => Error::Sys {
            op: "userfaultfd",
            source,
        },
    }
}

/// A userfaultfd with EVENT_REMOVE (Linux 4.11): a range the application
/// discards (MADV_DONTNEED, MADV_REMOVE) is reported, so it reads back as
/// zeros afterwards rather than as the source's data.
///
/// It serves the kernel's faults too ([`UffdMode::AllFaults`]) wherever
/// this process may have that, and settles for the process's own faults
/// ([`UffdMode::UserModeOnly`]) only where the kernel refuses the full mode
/// by permission (EPERM or EACCES): any other error (EMFILE, ENOMEM, a
/// feature missing) is returned, since the user-mode-only descriptor would
/// meet it too, and quietly settling for less would hide it. Asking for
/// user-mode-only every time, as this did before, failed every system call
/// that read a missing page of the region with EFAULT, even as root. With
/// `require_all`, the refusal is returned instead
/// ([`UffdRegionBuilder::require_kernel_faults`](super::UffdRegionBuilder::require_kernel_faults)).
pub(super) fn open_uffd(features: u64, require_all: bool) -> Result<(Uffd, UffdMode), Error> {
    match open_all_faults(features) {
        Err(Error::NoPermission { .. }) if !require_all => {}
        r => return r.map(|uffd| (uffd, UffdMode::AllFaults)),
    }
    uffd_by_syscall(true, features).map(|uffd| (uffd, UffdMode::UserModeOnly))
}

/// A userfaultfd that serves kernel-mode faults: `/dev/userfaultfd` (Linux
/// 6.1), which grants that to whoever may open it; where the device does
/// not exist or may not be opened, `userfaultfd(2)` without
/// `UFFD_USER_MODE_ONLY` (allowed with `CAP_SYS_PTRACE` or
/// `vm.unprivileged_userfaultfd=1`). `Error::NoPermission` when both are
/// refused.
///
/// The device is root's alone by default, so a process with
/// `CAP_SYS_PTRACE` but not root, or on a host with
/// `vm.unprivileged_userfaultfd=1`, is refused the device and then
/// allowed the system call.
///
/// Fail point `uffd::open_all_faults` (an errno name: `EPERM`, `EACCES`,
/// `EMFILE`) plays both ways in failing so.
fn open_all_faults(features: u64) -> Result<Uffd, Error> {
    fail_point!("uffd::open_all_faults", |arg| {
        Err(errno_error(match arg.as_deref() {
            Some("EACCES") => libc::EACCES,
            Some("EMFILE") => libc::EMFILE,
            _ => libc::EPERM,
        }))
    });
    match open_device() {
        Ok(uffd) => handshake(uffd, features),
        // No device (before 6.1, or not in this container; a device node
        // with no driver behind it, or one the container's device policy
        // refuses), or not ours to open: the system call may still allow
        // the full mode.
        Err(Errno::NOENT | Errno::NODEV | Errno::NXIO | Errno::ACCESS | Errno::PERM) => {
            uffd_by_syscall(false, features)
        }
        Err(e) => Err(uffd_error(e)),
    }
}

/// `/dev/userfaultfd`, opened. Fail point `uffd::open_device` (an errno
/// number): the open fails so.
fn open_device() -> Result<Uffd, Errno> {
    fail_point!("uffd::open_device", |arg| Err(Errno::from_raw_os_error(
        arg.and_then(|a| a.parse().ok()).unwrap_or(libc::ENODEV)
    )));
    Uffd::by_device(libc::O_CLOEXEC | libc::O_NONBLOCK)
}

/// `userfaultfd(2)`, with `UFFD_USER_MODE_ONLY` if `user_mode_only`, then
/// the `UFFDIO_API` handshake.
fn uffd_by_syscall(user_mode_only: bool, features: u64) -> Result<Uffd, Error> {
    let mut flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    if user_mode_only {
        flags |= UFFD_USER_MODE_ONLY as i32;
    }
    match Uffd::by_syscall(flags) {
        Ok(uffd) => handshake(uffd, features),
        // Before Linux 5.11 the flag is unknown; the system call without
        // it, which every such kernel has, was just refused to this
        // process: EPERM names the ways in.
        Err(Errno::INVAL) if user_mode_only => Err(errno_error(libc::EPERM)),
        Err(e) => Err(uffd_error(e)),
    }
}

/// The `UFFDIO_API` handshake, asking for EVENT_REMOVE (Linux 4.11) and
/// `features`.
fn handshake(uffd: Uffd, features: u64) -> Result<Uffd, Error> {
    match uffd.api(u64::from(UFFD_FEATURE_EVENT_REMOVE) | features) {
        Ok(_) => Ok(uffd),
        Err(e) if features != 0 => Err(Error::Unsupported {
            what: format!(
                "write tracking: UFFD_FEATURE_WP_ASYNC needs Linux 6.7 (UFFDIO_API: {})",
                io::Error::from(e)
            ),
        }),
        Err(e) => Err(Error::Unsupported {
            what: format!(
                "userfaultfd's REMOVE events: UFFD_FEATURE_EVENT_REMOVE needs Linux 4.11 \
                 (UFFDIO_API: {})",
                io::Error::from(e)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::errno_error;
    use crate::Error;

    /// The descriptor each way in gives is non-blocking (a handler reads
    /// it after every `poll`, and a blocking read with no event left would
    /// hold that handler for good) and closed on exec (a child the
    /// application starts must not inherit the region's faults). Skips a
    /// way this process is refused, saying so (only root has all three).
    #[test]
    fn each_way_in_gives_a_non_blocking_close_on_exec_userfaultfd() {
        use rustix::io::{FdFlags, fcntl_getfd};
        let ways = [
            (
                "/dev/userfaultfd",
                super::open_device().map_err(|e| e.to_string()),
            ),
            (
                "userfaultfd(2)",
                super::uffd_by_syscall(false, 0).map_err(|e| e.to_string()),
            ),
            // Allowed without privilege since Linux 5.11: checked anywhere.
            (
                "userfaultfd(2), user-mode only",
                super::uffd_by_syscall(true, 0).map_err(|e| e.to_string()),
            ),
        ];
        for (way, uffd) in ways {
            let uffd = match uffd {
                Ok(u) => u,
                Err(e) => {
                    eprintln!("skipped {way}: refused to this process ({e})");
                    continue;
                }
            };
            let fl = rustix::fs::fcntl_getfl(&uffd).unwrap();
            assert!(fl.contains(rustix::fs::OFlags::NONBLOCK), "{way}: {fl:?}");
            assert!(
                fcntl_getfd(&uffd).unwrap().contains(FdFlags::CLOEXEC),
                "{way}"
            );
        }
    }

    /// What a refused `userfaultfd` says: permission (and its fixes), a
    /// kernel without it (and the version and option it needs), or the
    /// errno as it came.
    #[test]
    fn a_refused_userfaultfd_names_its_cause() {
        for errno in [libc::EPERM, libc::EACCES] {
            assert!(
                matches!(errno_error(errno), Error::NoPermission { .. }),
                "{errno}"
            );
        }
        for errno in [libc::ENOSYS, libc::EINVAL] {
            let e = errno_error(errno);
            assert!(matches!(e, Error::Unsupported { .. }), "{errno}: {e}");
            assert!(e.to_string().contains("CONFIG_USERFAULTFD"), "{e}");
        }
        let e = errno_error(libc::EMFILE);
        assert!(
            matches!(
                e,
                Error::Sys {
                    op: "userfaultfd",
                    ..
                }
            ),
            "{e}"
        );
    }
}
