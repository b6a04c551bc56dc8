//! The userfaultfd interface a region uses, over rustix's `ioctl` and the
//! kernel's structures as `linux-raw-sys` generates them (`<linux/userfaultfd.h>`):
//! opening a descriptor (the device or the system call), the API
//! handshake, registration, the ioctls that resolve faults, and reading
//! events (`fs/userfaultfd.c`).
//!
//! Written here rather than taken from the `userfaultfd` crate: its
//! `userfaultfd-sys` runs bindgen at build time, so every user of
//! `UffdRegion` needed libclang and the kernel headers installed, for a
//! dozen ioctls whose structures `linux-raw-sys` (already in the tree
//! through rustix) ships.

use std::{
    ffi::c_void,
    os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
};

use linux_raw_sys::general::{
    UFFD_API, UFFD_EVENT_PAGEFAULT, UFFD_EVENT_REMOVE, UFFD_PAGEFAULT_FLAG_MINOR,
    UFFDIO_COPY_MODE_DONTWAKE, UFFDIO_COPY_MODE_WP, UFFDIO_ZEROPAGE_MODE_DONTWAKE, uffd_msg,
    uffdio_api, uffdio_copy, uffdio_range, uffdio_register, uffdio_zeropage,
};
use rustix::{
    io::Errno,
    ioctl::{Opcode, Updater, ioctl, opcode},
};

pub(in crate::uffd) use linux_raw_sys::general::{
    UFFD_FEATURE_EVENT_REMOVE, UFFD_FEATURE_PAGEFAULT_FLAG_WP, UFFD_FEATURE_WP_ASYNC,
    UFFD_FEATURE_WP_HUGETLBFS_SHMEM, UFFD_USER_MODE_ONLY, UFFDIO_REGISTER_MODE_MINOR,
    UFFDIO_REGISTER_MODE_MISSING, UFFDIO_REGISTER_MODE_WP,
};

/// `_IOWR(UFFDIO, _UFFDIO_API, struct uffdio_api)`.
const UFFDIO_API: Opcode = opcode::read_write::<uffdio_api>(0xAA, 0x3F);
/// `_IOWR(UFFDIO, _UFFDIO_REGISTER, struct uffdio_register)`.
const UFFDIO_REGISTER: Opcode = opcode::read_write::<uffdio_register>(0xAA, 0x00);
/// `_IOR(UFFDIO, _UFFDIO_UNREGISTER, struct uffdio_range)`.
const UFFDIO_UNREGISTER: Opcode = opcode::read::<uffdio_range>(0xAA, 0x01);
/// `_IOR(UFFDIO, _UFFDIO_WAKE, struct uffdio_range)`.
const UFFDIO_WAKE: Opcode = opcode::read::<uffdio_range>(0xAA, 0x02);
/// `_IOWR(UFFDIO, _UFFDIO_COPY, struct uffdio_copy)`.
const UFFDIO_COPY: Opcode = opcode::read_write::<uffdio_copy>(0xAA, 0x03);
/// `_IOWR(UFFDIO, _UFFDIO_ZEROPAGE, struct uffdio_zeropage)`.
const UFFDIO_ZEROPAGE: Opcode = opcode::read_write::<uffdio_zeropage>(0xAA, 0x04);
/// `_IO(USERFAULTFD_IOC, 0x00)`: a new userfaultfd from `/dev/userfaultfd`.
const USERFAULTFD_IOC_NEW: Opcode = opcode::none(0xAA, 0x00);

/// Bits of the ioctls a registration reports (`1 << _UFFDIO_*`).
pub(in crate::uffd) const IOCTL_COPY: u64 = 1 << 0x03;
pub(in crate::uffd) const IOCTL_CONTINUE: u64 = 1 << 0x07;

/// `USERFAULTFD_IOC_NEW` with its flags: returns the new descriptor,
/// which rustix's ready-made ioctl types do not.
struct NewUffd(i32);

// SAFETY: the opcode is USERFAULTFD_IOC_NEW, whose argument is the flags
// as an integer (no memory is read or written through it), and whose
// return value is the new descriptor.
unsafe impl rustix::ioctl::Ioctl for NewUffd {
    type Output = RawFd;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> Opcode {
        USERFAULTFD_IOC_NEW
    }
    fn as_ptr(&mut self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut c_void,
    ) -> rustix::io::Result<RawFd> {
        Ok(out)
    }
}

/// An event read from a userfaultfd.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::uffd) enum Event {
    /// A thread faulted at `addr` (`UFFD_EVENT_PAGEFAULT`); `minor`: the
    /// page is in the page cache, only its mapping is missing
    /// (`UFFD_PAGEFAULT_FLAG_MINOR`).
    Pagefault { addr: usize, minor: bool },
    /// The application discarded `[start, end)` (`UFFD_EVENT_REMOVE`).
    Remove { start: usize, end: usize },
    /// An event the region did not ask for.
    Other,
}

/// A userfaultfd descriptor, closed on drop.
#[derive(Debug)]
pub(in crate::uffd) struct Uffd(OwnedFd);

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Runs ioctl `OP` on `fd` with `arg`, which the kernel reads and updates.
///
/// # Safety
/// `T` must be the structure `OP` takes, and what the ioctl does with the
/// memory `arg` names (a registered range, a copy's source) must be the
/// caller's to allow.
unsafe fn update<const OP: Opcode, T>(fd: &Uffd, arg: &mut T) -> Result<(), Errno> {
    // SAFETY: the caller guarantees `T` is `OP`'s argument.
    let op = unsafe { Updater::<OP, T>::new(arg) };
    // SAFETY: as the caller guarantees.
    unsafe { ioctl(fd, op) }
}

impl Uffd {
    /// A descriptor another process made (checked by the caller).
    pub(in crate::uffd) fn from_fd(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// `userfaultfd(2)` with `flags` (`O_CLOEXEC`, `O_NONBLOCK`,
    /// `UFFD_USER_MODE_ONLY`).
    pub(in crate::uffd) fn by_syscall(flags: i32) -> Result<Self, Errno> {
        // SAFETY: userfaultfd(2) takes flags and returns a new descriptor
        // or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0 {
            return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
        }
        // SAFETY: a descriptor the kernel has just returned, owned by
        // nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// A userfaultfd from `/dev/userfaultfd` (Linux 6.1), with `flags` as
    /// for [`by_syscall`](Self::by_syscall): the device grants kernel-mode
    /// faults to whoever may open it. `Err` of the open (ENOENT where the
    /// device does not exist, EACCES where it may not be opened) or of the
    /// ioctl.
    pub(in crate::uffd) fn by_device(flags: i32) -> Result<Self, Errno> {
        let dev = rustix::fs::open(
            "/dev/userfaultfd",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // SAFETY: USERFAULTFD_IOC_NEW takes its flags as the argument
        // itself (no memory) and returns a new descriptor.
        let fd = unsafe { ioctl(&dev, NewUffd(flags)) }?;
        // SAFETY: a descriptor the kernel has just returned, owned by
        // nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The `UFFDIO_API` handshake, asking for `features`; the features the
    /// kernel has, or its refusal (a feature it lacks).
    pub(in crate::uffd) fn api(&self, features: u64) -> Result<u64, Errno> {
        // Fail point `uffd::api`: the handshake refused, as a kernel
        // without a feature asked for refuses it.
        fail_point!("uffd::api", |_| Err(Errno::INVAL));
        let mut api = uffdio_api {
            api: u64::from(UFFD_API),
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a `struct uffdio_api` and touches no
        // other memory.
        unsafe { update::<UFFDIO_API, _>(self, &mut api) }?;
        Ok(api.features)
    }

    /// Registers `[start, start + len)` for the faults of `mode`
    /// (`UFFDIO_REGISTER_MODE_*`); the ioctls the range allows
    /// (`1 << _UFFDIO_*` bits).
    pub(in crate::uffd) fn register(
        &self,
        start: *mut c_void,
        len: usize,
        mode: u32,
    ) -> Result<u64, Errno> {
        let mut register = uffdio_register {
            range: uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: u64::from(mode),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a `struct uffdio_register`; it
        // changes how faults in the range are handled, not its memory.
        unsafe { update::<UFFDIO_REGISTER, _>(self, &mut register) }?;
        Ok(register.ioctls)
    }

    /// Unregisters `[start, start + len)`.
    pub(in crate::uffd) fn unregister(&self, start: *mut c_void, len: usize) -> Result<(), Errno> {
        let mut range = uffdio_range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: UFFDIO_UNREGISTER reads a `struct uffdio_range`.
        unsafe { update::<UFFDIO_UNREGISTER, _>(self, &mut range) }
    }

    /// Wakes the threads waiting on faults in `[start, start + len)`.
    pub(in crate::uffd) fn wake(&self, start: *mut c_void, len: usize) -> Result<(), Errno> {
        let mut range = uffdio_range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: UFFDIO_WAKE reads a `struct uffdio_range` and only wakes.
        unsafe { update::<UFFDIO_WAKE, _>(self, &mut range) }
    }

    /// `UFFDIO_COPY` of `len` bytes from `src` to `dst`, waking the
    /// readers if `wake`, the pages write-protected if `write_protect`
    /// (`UFFDIO_COPY_MODE_WP`): the bytes copied, or the errno with the kernel's
    /// `copy` field (bytes copied before an EAGAIN, or a negative errno).
    ///
    /// # Safety
    /// `src` must have `len` readable bytes and `dst..dst + len` must lie
    /// in a range this descriptor registered.
    pub(in crate::uffd) unsafe fn copy(
        &self,
        src: *const c_void,
        dst: *mut c_void,
        len: usize,
        wake: bool,
        write_protect: bool,
    ) -> Result<usize, (Errno, i64)> {
        let mut mode = if wake {
            0
        } else {
            u64::from(UFFDIO_COPY_MODE_DONTWAKE)
        };
        if write_protect {
            mode |= u64::from(UFFDIO_COPY_MODE_WP);
        }
        let mut copy = uffdio_copy {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode,
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY takes a `struct uffdio_copy`; the caller
        // vouches for its source and destination.
        match unsafe { update::<UFFDIO_COPY, _>(self, &mut copy) } {
            Ok(()) => Ok(copy.copy.max(0) as usize),
            Err(e) => Err((e, copy.copy)),
        }
    }

    /// `UFFDIO_ZEROPAGE` of `[start, start + len)`, waking the readers if
    /// `wake`.
    ///
    /// # Safety
    /// The range must lie in a range this descriptor registered.
    pub(in crate::uffd) unsafe fn zeropage(
        &self,
        start: *mut c_void,
        len: usize,
        wake: bool,
    ) -> Result<usize, Errno> {
        let mut zero = uffdio_zeropage {
            range: uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: if wake {
                0
            } else {
                u64::from(UFFDIO_ZEROPAGE_MODE_DONTWAKE)
            },
            zeropage: 0,
        };
        // SAFETY: UFFDIO_ZEROPAGE takes a `struct uffdio_zeropage`; the
        // caller vouches for the range.
        unsafe { update::<UFFDIO_ZEROPAGE, _>(self, &mut zero) }?;
        Ok(zero.zeropage.max(0) as usize)
    }

    /// Reads one event; `None` if none is pending (the descriptor is
    /// non-blocking).
    pub(in crate::uffd) fn read_event(&self) -> Result<Option<Event>, Errno> {
        let mut buf = [0u8; size_of::<uffd_msg>()];
        match rustix::io::read(self, &mut buf) {
            Ok(n) if n == buf.len() => {}
            Ok(_) => return Err(Errno::IO),
            Err(Errno::AGAIN) => return Ok(None),
            Err(e) => return Err(e),
        }
        // SAFETY: the kernel wrote a whole `struct uffd_msg`, plain data
        // for which any bytes are valid; read unaligned from the buffer.
        let msg: uffd_msg = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
        Ok(Some(match u32::from(msg.event) {
            UFFD_EVENT_PAGEFAULT => {
                // SAFETY: the event says which member of the union is set.
                let fault = unsafe { msg.arg.pagefault };
                Event::Pagefault {
                    addr: fault.address as usize,
                    minor: fault.flags & u64::from(UFFD_PAGEFAULT_FLAG_MINOR) != 0,
                }
            }
            UFFD_EVENT_REMOVE => {
                // SAFETY: as above.
                let r = unsafe { msg.arg.remove };
                Event::Remove {
                    start: r.start as usize,
                    end: r.end as usize,
                }
            }
            _ => Event::Other,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcodes built here are the kernel's, as `linux-raw-sys`
    /// generates them from `<linux/userfaultfd.h>`.
    #[test]
    fn opcodes_are_the_kernels() {
        use linux_raw_sys::ioctl as k;
        assert_eq!(UFFDIO_API, k::UFFDIO_API as Opcode);
        assert_eq!(UFFDIO_REGISTER, k::UFFDIO_REGISTER as Opcode);
        assert_eq!(UFFDIO_UNREGISTER, k::UFFDIO_UNREGISTER as Opcode);
        assert_eq!(UFFDIO_WAKE, k::UFFDIO_WAKE as Opcode);
        assert_eq!(UFFDIO_COPY, k::UFFDIO_COPY as Opcode);
        assert_eq!(UFFDIO_ZEROPAGE, k::UFFDIO_ZEROPAGE as Opcode);
    }
}
