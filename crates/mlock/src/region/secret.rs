//! Secret memory (`memfd_secret(2)`) for
//! [`RegionBuilder::secret_memory`](super::RegionBuilder::secret_memory).

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use rustix::io::Errno;

use crate::Error;

/// `memfd_secret`'s number, where the kernel has secret memory (the
/// architectures with `ARCH_HAS_SET_DIRECT_MAP`; one number on each, from
/// the kernel's unified table: libc does not have it on all of them).
const SYS_MEMFD_SECRET: Option<libc::c_long> = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "s390x",
    target_arch = "loongarch64",
    target_arch = "powerpc64"
)) {
    Some(447)
} else {
    None
};

/// A secret memory file of `len` bytes (`memfd_secret(2)`).
pub(super) fn memfd(len: usize) -> Result<OwnedFd, Error> {
    fail_point!("mlock::memfd_secret", |arg| Err(refusal(
        super::injected(arg),
        len
    )));
    let Some(nr) = SYS_MEMFD_SECRET else {
        return Err(refusal(Errno::NOSYS, len));
    };
    // SAFETY: memfd_secret takes one flags argument and touches no memory
    // of ours.
    let fd = unsafe { libc::syscall(nr, libc::O_CLOEXEC) };
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
/// ENOSYS is a kernel (or an architecture) without it, EPERM a seccomp
/// filter's refusal.
fn refusal(e: Errno, len: usize) -> Error {
    match e {
        Errno::PERM => Error::BadFlags {
            op: "memfd_secret",
            why: "memfd_secret was refused (EPERM): a seccomp filter forbids it (Docker's and \
                  Kubernetes' default profiles do); allow the system call in the profile, or \
                  leave secret_memory out",
        },
        Errno::NOSYS => Error::BadFlags {
            op: "memfd_secret",
            why: "this kernel has no secret memory: it needs Linux 5.14 or later built with \
                  CONFIG_SECRETMEM (x86, arm64, riscv64, s390x, loongarch64, powerpc64), and \
                  before 6.5 the boot parameter secretmem.enable=1; \
                  leave secret_memory out (dont_dump, wipe_on_fork and zero_on_drop still \
                  apply)",
        },
        e => Error::from_sys("memfd_secret", len, e),
    }
}
