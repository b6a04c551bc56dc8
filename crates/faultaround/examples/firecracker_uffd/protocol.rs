//! Firecracker's page-fault-handler protocol, as its docs define it
//! (`docs/snapshotting/handling-page-faults-on-snapshot-resume.md`): the
//! handler listens on a Unix socket; on restore Firecracker connects and
//! sends one message whose body is a JSON array of its guest memory
//! regions (`GuestRegionUffdMapping`: `base_host_virt_addr`, `size`,
//! `offset` into the snapshot memory file, and the page size in bytes as
//! `page_size_kib` from Firecracker 1.7, as `page_size` too from about
//! 1.11) and whose ancillary data carries the userfaultfd (SCM_RIGHTS).
//! It expects no reply, and keeps its own copy of the userfaultfd. Older
//! versions close the socket then; newer ones (since its PR #5122) keep it
//! open for their life: either way the handler serves faults until the
//! Firecracker process exits, which it learns from a pidfd of the
//! socket's peer, never from the socket. A handshake of several
//! descriptors (the guest_memfd "secret hiding" protocol, which also
//! exchanges fault requests and replies over the socket) is refused.

use std::{
    error::Error,
    io::IoSliceMut,
    mem::MaybeUninit,
    os::{
        fd::OwnedFd,
        unix::net::{UnixListener, UnixStream},
    },
};

use mmbatch_faultaround::{PageSource, UffdHandler, UffdRange, UffdStats};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use serde::{Deserialize, Serialize};

/// One guest memory region, as Firecracker describes it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct GuestRegionUffdMapping {
    pub(crate) base_host_virt_addr: u64,
    pub(crate) size: usize,
    pub(crate) offset: u64,
    /// Bytes (sent since about Firecracker 1.11).
    #[serde(default)]
    pub(crate) page_size: Option<usize>,
    /// The same, in bytes despite its name (sent since Firecracker 1.7,
    /// deprecated since `page_size` came).
    #[serde(default)]
    pub(crate) page_size_kib: Option<usize>,
}

/// What the VMM's message brings.
pub(crate) struct Handshake {
    pub(crate) uffd: OwnedFd,
    pub(crate) ranges: Vec<UffdRange>,
    /// The regions' page size (4 KiB, or the huge page size of a VM
    /// backed by hugetlbfs).
    pub(crate) page_size: usize,
    /// The VMM's process id (the socket's `SO_PEERCRED`), for
    /// [`track_writes_of`](mmbatch_faultaround::UffdHandlerBuilder::track_writes_of);
    /// `None` where the kernel cannot say (the VMM in a pid namespace ours
    /// does not see, as a jailer may make).
    pub(crate) pid: Option<u32>,
    /// How the VMM's exit is learned ([`peer_exit`]).
    pub(crate) exit: PeerExit,
}

/// How long the VMM has to send its message once connected.
pub(crate) const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest region list taken (a few hundred bytes a region).
const MAX_MESSAGE: usize = 1 << 20;

/// Reads the VMM's message: the regions and the userfaultfd.
pub(crate) fn receive(stream: &UnixStream) -> Result<Handshake, Box<dyn Error>> {
    receive_within(stream, HANDSHAKE_TIMEOUT)
}

/// [`receive`], the VMM given `timeout` to send it all. The body may come
/// in several reads (the descriptor with the first); it is read until it
/// parses as the region list, the VMM stops sending, or the timeout.
pub(crate) fn receive_within(
    stream: &UnixStream,
    timeout: std::time::Duration,
) -> Result<Handshake, Box<dyn Error>> {
    stream.set_read_timeout(Some(timeout))?;
    let mut body = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut uffd: Option<OwnedFd> = None;
    let regions: Vec<GuestRegionUffdMapping> = loop {
        // Room for a few descriptors, so that a handshake of several is
        // received whole and named, not cut short by the kernel.
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| match e {
            rustix::io::Errno::AGAIN => {
                format!("the VMM sent no complete region list within {timeout:?} of connecting")
            }
            e => format!("reading the VMM's message: {e}"),
        })?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(more) = msg {
                fds.extend(more);
            }
        }
        if fds.len() > 1 || got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
            return Err(format!(
                "the VMM sent {} descriptors: a handshake of several (Firecracker's \
                 guest_memfd \"secret hiding\" protocol, which also expects replies) is not \
                 served here, only the userfaultfd alone",
                fds.len().max(2)
            )
            .into());
        }
        if let Some(fd) = fds.pop() {
            if uffd.is_some() {
                return Err("the VMM sent a second descriptor after its userfaultfd".into());
            }
            uffd = Some(fd);
        }
        if got.bytes == 0 {
            return Err(if body.is_empty() {
                "the VMM closed the socket without sending its region list".into()
            } else {
                format!(
                    "the VMM's region list is not the JSON expected: {}",
                    serde_json::from_slice::<Vec<GuestRegionUffdMapping>>(&body)
                        .err()
                        .map_or_else(|| "cut short".to_owned(), |e| e.to_string())
                )
                .into()
            });
        }
        body.extend_from_slice(&buf[..got.bytes]);
        match serde_json::from_slice(&body) {
            Ok(regions) => break regions,
            // More to come: a message longer than one read.
            Err(e) if e.is_eof() && body.len() < MAX_MESSAGE => {}
            Err(e) => {
                return Err(format!("the VMM's region list is not the JSON expected: {e}").into());
            }
        }
    };
    stream.set_read_timeout(None)?;
    let uffd =
        uffd.ok_or("the VMM's message carried no descriptor (SCM_RIGHTS): no userfaultfd")?;
    let system = rustix::param::page_size();
    let sizes: Vec<usize> = regions
        .iter()
        .map(|r| r.page_size.or(r.page_size_kib).unwrap_or(system))
        .collect();
    let page_size = sizes.first().copied().unwrap_or(system);
    if sizes.iter().any(|&s| s != page_size) {
        return Err(format!(
            "the regions have different page sizes ({sizes:?}): one handler serves one"
        )
        .into());
    }
    let ranges = regions
        .iter()
        .map(|r| UffdRange {
            base: r.base_host_virt_addr as usize,
            len: r.size,
            offset: r.offset,
        })
        .collect();
    let pid = peer_pid(stream);
    let exit = peer_exit(stream, pid);
    Ok(Handshake {
        uffd,
        ranges,
        page_size,
        pid,
        exit,
    })
}

/// `SO_PEERPIDFD` (`include/uapi/asm-generic/socket.h`, and sparc's own).
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_PEERPIDFD: libc::c_int = 77;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_PEERPIDFD: libc::c_int = 0x56;

/// How the handler learns that the VMM has exited.
pub(crate) enum PeerExit {
    /// A pidfd of it, readable once it exits.
    Watch(OwnedFd),
    /// It had exited already.
    Gone,
    /// No pidfd of it can be had (its pid is outside our namespace and
    /// the kernel predates `SO_PEERPIDFD`).
    Unknown,
}

/// A pidfd of the socket's peer: the socket's `SO_PEERPIDFD` (Linux 6.5),
/// else, on an older kernel (ENOPROTOOPT), `pidfd_open(2)` of its
/// `SO_PEERCRED` pid (Linux 5.3), taken right after the handshake to
/// narrow the window in which an exited VMM's pid could be reused.
fn peer_exit(stream: &UnixStream, pid: Option<u32>) -> PeerExit {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_PEERPIDFD writes one int, a new descriptor, to `fd`, and
    // its length to `len`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &mut len,
        )
    };
    if r == 0 && fd >= 0 && len as usize == std::mem::size_of::<libc::c_int>() {
        // SAFETY: a descriptor the kernel just gave us, owned by nothing
        // else.
        return PeerExit::Watch(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOPROTOOPT) {
        // The kernel has the option and could not take the peer's pid:
        // the peer is gone.
        return PeerExit::Gone;
    }
    let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return PeerExit::Unknown;
    };
    // SAFETY: pidfd_open(2) takes a pid and flags, and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        return PeerExit::Gone;
    }
    // SAFETY: a descriptor the kernel just gave us, owned by nothing else.
    PeerExit::Watch(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Blocks until the process of pidfd `exit` has exited.
pub(crate) fn wait_exit(exit: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: exit.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one `pollfd`, ours.
        if unsafe { libc::poll(&mut p, 1, -1) } >= 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The process id of the socket's peer (`SO_PEERCRED`), if the kernel
/// can say: it gives 0 for a process outside our pid namespace. (rustix's
/// `socket_peercred` holds the pid as a `NonZero`, which 0 is not.)
fn peer_pid(stream: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes, a `struct ucred`,
    // to `cred`, and its length to `len`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid.unsigned_abs())
}

/// A mapped memory file as bytes, for [`InMemory`](mmbatch_faultaround::InMemory)
/// (a `memmap2::Mmap` is one already).
pub(crate) struct Mapped(mmbatch_mmap::Mapping);

impl Mapped {
    /// `file`, mapped whole and read-only.
    ///
    /// # Safety
    /// Nothing may write or truncate the file while the mapping lives (a
    /// truncation makes its readers die of SIGBUS): the precondition the
    /// example's docs give its operator.
    pub(crate) unsafe fn of(file: &std::fs::File) -> Result<Self, Box<dyn Error>> {
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| "the file is larger than the address space")?;
        // SAFETY: the caller's obligation, passed on.
        let mapping = unsafe {
            mmbatch_mmap::Mapping::file(
                std::os::fd::AsFd::as_fd(file),
                0,
                len,
                mmbatch_mmap::ProtFlags::READ,
                mmbatch_mmap::MapFlags::PRIVATE,
            )
        }?;
        Ok(Self(mapping))
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0
            .as_slice()
            .expect("the memory file is mapped readable")
    }
}

/// Accepts one VMM on `listener`, serves its faults from `image` (the
/// snapshot memory file, or its bytes mapped) with `2^order`-page windows
/// and `handlers` threads until it exits, and returns what the handler
/// did. Where its exit cannot be watched (no pidfd of it), serves until
/// this process is stopped.
pub(crate) fn serve(
    listener: &UnixListener,
    image: impl PageSource,
    order: u32,
    handlers: usize,
) -> Result<UffdStats, Box<dyn Error>> {
    let (stream, _) = listener.accept()?;
    let Handshake {
        uffd,
        ranges,
        page_size,
        pid,
        exit,
    } = receive(&stream)?;
    // Nothing more comes over the socket (Firecracker expects no reply,
    // and older versions close it now): its exit is what ends the service.
    drop(stream);
    eprintln!(
        "firecracker_uffd: serving process {}: {} range(s) in {page_size}-byte pages",
        pid.map_or("(outside our pid namespace)".to_owned(), |p| p.to_string()),
        ranges.len()
    );
    let handler = UffdHandler::builder(uffd, ranges)
        .page_size(page_size)
        .order(order)
        .handlers(handlers)
        // Said at once: before Linux 6.6 the guest thread reading a
        // failed page stays blocked, and nothing else would tell.
        .on_failure(|e| eprintln!("firecracker_uffd: {e}"))
        .build(image)?;
    match &exit {
        PeerExit::Watch(exit) => wait_exit(exit)?,
        PeerExit::Gone => eprintln!("firecracker_uffd: the VMM exited before it was served"),
        PeerExit::Unknown => {
            eprintln!(
                "firecracker_uffd: no pidfd of the VMM (a pid namespace ours does not see, \
                 before Linux 6.5): serving until this process is stopped"
            );
            loop {
                std::thread::park();
            }
        }
    }
    Ok(handler.stats())
}
