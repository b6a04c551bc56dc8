//! The VMM's side of a foreign userfaultfd, for tests and benchmarks of a
//! handler in another process: guest memory mapped, a userfaultfd created
//! and registered over it (what only the process owning the memory can
//! do), and the descriptor sent over a Unix socket with a message
//! (SCM_RIGHTS), as Firecracker sends it.

use std::{
    io::{IoSlice, IoSliceMut},
    mem::MaybeUninit,
    os::{
        fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
        unix::net::UnixStream,
    },
};

use linux_raw_sys::general::{UFFD_API, uffdio_api, uffdio_range, uffdio_register};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

pub use linux_raw_sys::general::{
    UFFD_FEATURE_EVENT_REMOVE, UFFD_FEATURE_MINOR_HUGETLBFS, UFFD_FEATURE_MINOR_SHMEM,
    UFFD_FEATURE_PAGEFAULT_FLAG_WP, UFFD_FEATURE_WP_ASYNC, UFFDIO_REGISTER_MODE_MINOR,
    UFFDIO_REGISTER_MODE_MISSING, UFFDIO_REGISTER_MODE_WP,
};

/// A private anonymous mapping of `len` bytes (`MAP_NORESERVE`), as a VMM
/// maps guest RAM; never unmapped (the process is a test's child).
pub fn map_anonymous(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping at an address the kernel
    // picks: nothing else is there.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

/// A non-blocking userfaultfd with `features` (`UFFD_FEATURE_*`),
/// registered for missing-page faults over each `(address, bytes)` range of
/// this process's memory. Panics, naming the call, on a refusal.
pub fn userfaultfd(ranges: &[(*mut u8, usize)], features: u32) -> OwnedFd {
    userfaultfd_registered(ranges, features, UFFDIO_REGISTER_MODE_MISSING)
}

/// [`userfaultfd`] registered in `mode` (`UFFDIO_REGISTER_MODE_*`), such
/// as missing-page and write-protect faults for write tracking.
pub fn userfaultfd_registered(ranges: &[(*mut u8, usize)], features: u32, mode: u32) -> OwnedFd {
    // SAFETY: userfaultfd(2) takes flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert!(fd >= 0, "userfaultfd: {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just returned, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut api = uffdio_api {
        api: u64::from(UFFD_API),
        features: u64::from(features),
        ioctls: 0,
    };
    let op = rustix::ioctl::opcode::read_write::<uffdio_api>(0xAA, 0x3F);
    // SAFETY: UFFDIO_API takes a `struct uffdio_api`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), op as _, &mut api) };
    assert_eq!(r, 0, "UFFDIO_API: {}", std::io::Error::last_os_error());
    for &(base, len) in ranges {
        let mut reg = uffdio_register {
            range: uffdio_range {
                start: base as u64,
                len: len as u64,
            },
            mode: u64::from(mode),
            ioctls: 0,
        };
        let op = rustix::ioctl::opcode::read_write::<uffdio_register>(0xAA, 0x00);
        // SAFETY: UFFDIO_REGISTER takes a `struct uffdio_register`; the
        // range is the caller's memory.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), op as _, &mut reg) };
        assert_eq!(r, 0, "UFFDIO_REGISTER: {}", std::io::Error::last_os_error());
    }
    fd
}

/// Connects to `socket` and sends `body` with `fd` in SCM_RIGHTS; the
/// connection (older Firecrackers close it at once, newer keep it; a test
/// may talk over it).
pub fn send(socket: &str, body: &[u8], fd: &OwnedFd) -> UnixStream {
    let stream = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connecting to the handler at {socket}: {e}"));
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &stream,
        &[IoSlice::new(body)],
        &mut control,
        SendFlags::empty(),
    )
    .expect("sending the userfaultfd");
    stream
}

/// The handler's side of [`send`]: the message's body (up to 64 KiB) and
/// the descriptor it carried.
pub fn receive(stream: &UnixStream) -> std::io::Result<(OwnedFd, Vec<u8>)> {
    let mut body = vec![0u8; 1 << 16];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut body)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    body.truncate(got.bytes);
    let fd = control
        .drain()
        .find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        })
        .ok_or_else(|| std::io::Error::other("the message carried no descriptor"))?;
    Ok((fd, body))
}
