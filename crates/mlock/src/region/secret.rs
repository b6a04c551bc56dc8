//! Secret memory (`memfd_secret(2)`) for [`RegionBuilder::secret_memory`](super::RegionBuilder::secret_memory).

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use rustix::io::Errno;

use crate::Error;

/// A secret memory file of `len` bytes (`memfd_secret(2)`).
pub(super) fn memfd(len: usize) -> Result<OwnedFd, Error> {
    fail_point!("mlock::memfd_secret", |arg| Err(refusal(
        super::injected(arg),
        len
    )));
    // SAFETY: memfd_secret takes one flags argument and touches no memory
    // of ours.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_secret, libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(refusal(
            Errno::from_io_error(&io::Error::last_os_error()).unwrap_or(Errno::NOSYS),
            len,
        ));
    }
    let fd = i32::try_from(fd).expect("a descriptor is an int");
    // SAFETY: the kernel just gave us this descriptor, owned by no one.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::fs::ftruncate(&fd, len as u64).map_err(|e| Error::from_sys("ftruncate", len, e))?;
    Ok(fd)
}

/// The error for `memfd_secret`'s `e`, making a region of `len` bytes:
/// ENOSYS is a kernel without it.
fn refusal(e: Errno, len: usize) -> Error {
    match e {
        Errno::NOSYS => Error::BadFlags {
            op: "memfd_secret",
            why: "this kernel has no secret memory: it needs Linux 5.14 or later built with \
                  CONFIG_SECRETMEM, and before 6.5 the boot parameter secretmem.enable=1; \
                  leave secret_memory out (dont_dump, wipe_on_fork and zero_on_drop still \
                  apply)",
        },
        e => Error::from_sys("memfd_secret", len, e),
    }
}
