//! Opening a region's userfaultfd, and what its refusals mean.

use std::{io, os::fd::AsRawFd};

use userfaultfd::{FeatureFlags, Uffd, UffdBuilder};

use crate::Error;

/// An error of the `userfaultfd` crate, its errno kept (the crate's own
/// message for one is just "System error").
pub(super) fn uffd_error(e: userfaultfd::Error) -> Error {
    match e {
        userfaultfd::Error::SystemError(errno) => errno_error(errno as i32),
        e => Error::Sys {
            op: "userfaultfd",
            source: io::Error::other(e.to_string()),
        },
    }
}

/// What a refused userfaultfd call's errno means.
fn errno_error(errno: i32) -> Error {
    let source = io::Error::from_raw_os_error(errno);
    match errno {
        libc::EPERM | libc::EACCES => Error::NoPermission { source },
        libc::ENOSYS | libc::EINVAL => Error::Unsupported {
            what: format!("userfaultfd: {source}"),
        },
        _ => Error::Sys {
            op: "userfaultfd",
            source,
        },
    }
}

/// A userfaultfd for faults in user mode, with EVENT_REMOVE (Linux 4.11):
/// a range the application discards (MADV_DONTNEED, MADV_REMOVE) is
/// reported, so it reads back as zeros afterwards rather than as the
/// source's data.
///
/// The `userfaultfd` crate opens `/dev/userfaultfd` when it exists and
/// then never tries the system call. The device is root's alone by
/// default (Linux 6.1 made it), so every other user was refused, though
/// the system call with `UFFD_USER_MODE_ONLY` needs no privilege since
/// Linux 5.11. A device this process may not open is passed over for the
/// system call here.
pub(super) fn open_uffd() -> Result<Uffd, Error> {
    let opened = UffdBuilder::new()
        .close_on_exec(true)
        .non_blocking(true)
        .user_mode_only(true)
        .require_features(FeatureFlags::EVENT_REMOVE)
        .create();
    match opened {
        Err(userfaultfd::Error::OpenDevUserfaultfd(e))
            if e.kind() == io::ErrorKind::PermissionDenied =>
        {
            uffd_by_syscall()
        }
        other => other.map_err(uffd_error),
    }
}

/// `userfaultfd(2)` for user-mode faults, then the `UFFDIO_API`
/// handshake asking for EVENT_REMOVE (what `UffdBuilder::create` does
/// after opening the device).
fn uffd_by_syscall() -> Result<Uffd, Error> {
    use std::os::fd::FromRawFd;
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let user_mode = userfaultfd_sys::UFFD_USER_MODE_ONLY as i32;
    // SAFETY: userfaultfd(2) takes flags and returns a new descriptor or -1.
    let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | user_mode) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Before Linux 5.11 the flag is unknown: without it, this user
        // needs `vm.unprivileged_userfaultfd=1` (EPERM names the fix).
        // SAFETY: as above.
        fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    }
    if fd < 0 {
        return Err(errno_error(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: a descriptor the kernel has just returned, owned by nothing
    // else; the `Uffd` closes it, on every path below too.
    let uffd = unsafe { Uffd::from_raw_fd(fd as i32) };
    let mut api = userfaultfd_sys::uffdio_api {
        api: userfaultfd_sys::UFFD_API,
        features: userfaultfd_sys::UFFD_FEATURE_EVENT_REMOVE,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `uffdio_api`, which `api` is.
    let r = unsafe {
        libc::ioctl(
            uffd.as_raw_fd(),
            userfaultfd_sys::UFFDIO_API as _,
            &mut api as *mut userfaultfd_sys::uffdio_api,
        )
    };
    if r != 0 {
        return Err(Error::Unsupported {
            what: format!(
                "userfaultfd with EVENT_REMOVE (Linux 4.11): UFFDIO_API: {}",
                io::Error::last_os_error()
            ),
        });
    }
    Ok(uffd)
}
