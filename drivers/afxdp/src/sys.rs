//! Thin, checked wrappers over the system calls the driver needs besides
//! `bpf(2)` (see [`crate::bpf`]) and netlink (see [`crate::netlink`]).

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// `SO_BUSY_POLL` from `asm-generic/socket.h` (the libc crate lacks it for
/// Linux/glibc).
pub(crate) const SO_BUSY_POLL: libc::c_int = 46;
/// `SO_PREFER_BUSY_POLL` (kernel 5.11).
pub(crate) const SO_PREFER_BUSY_POLL: libc::c_int = 69;
/// `SO_BUSY_POLL_BUDGET` (kernel 5.11).
pub(crate) const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
/// `XDP_MAX_TX_SKB_BUDGET` (kernel 6.17): how many descriptors one copy-mode
/// `sendto` kick transmits (default 32).
pub(crate) const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
/// `sxdp_flags` bit: frames may span several UMEM chunks (multi-buffer,
/// kernel ≥ 6.6).
pub(crate) const XDP_USE_SG: u16 = 1 << 4;
/// Descriptor `options` bit: more chunks of this frame follow.
pub(crate) const XDP_PKT_CONTD: u32 = 1;

/// The calling thread's last OS error.
pub(crate) fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// Turns a `-1`-on-error return value into a `Result`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(last_err())
    } else {
        Ok(ret)
    }
}

/// Wraps a fresh file descriptor returned by a system call.
pub(crate) fn owned_fd(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(last_err());
    }
    // SAFETY: `fd` was just returned by a successful system call that creates
    // a new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
pub(crate) fn setsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` initialised bytes that live
    // for the call; the kernel only reads them.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(r).map(drop)
}

/// `getsockopt` of a plain-old-data structure, zero-initialised first.
/// Returns the value and the length the kernel wrote.
///
/// # Safety
/// `T` must be valid for any bit pattern (a C structure of integers).
pub(crate) unsafe fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    let mut v = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` has room for `len` bytes; the kernel writes at most `len`
    // bytes and updates `len`.
    let r = unsafe { libc::getsockopt(fd, level, name, v.as_mut_ptr().cast(), &mut len) };
    cvt(r)?;
    // SAFETY: zero-initialised and the caller promises any bit pattern
    // (including the kernel's partial write) is a valid `T`.
    Ok((unsafe { v.assume_init() }, len as usize))
}

/// An anonymous or file-backed memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing about it
// is tied to the creating thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `mmap(NULL, len, READ|WRITE, flags, fd, offset)`.
    pub(crate) fn new(
        len: usize,
        flags: libc::c_int,
        fd: Option<RawFd>,
        offset: libc::off_t,
    ) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) cannot
        // alias any Rust object; failure is reported as MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.unwrap_or(-1),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_err());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Mmap { ptr, len })
    }

    /// Start of the mapping.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and
        // still owns; no reference into it outlives `self` (every user
        // borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// An `AF_XDP` socket, non-blocking and close-on-exec.
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    owned_fd(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`: the TX kick of AF_XDP.
pub(crate) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffers; the kernel reads nothing
    // from user memory.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(last_err())
    } else {
        Ok(())
    }
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL)`: drives busy polling
/// or wakes a zero-copy driver's RX path.
pub(crate) fn kick_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffers; the kernel writes
    // nothing to user memory.
    let r = unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(last_err())
    } else {
        Ok(())
    }
}

/// An epoll instance watching `fds` for readability (level-triggered).
pub(crate) fn epoll_for(fds: &[RawFd]) -> io::Result<OwnedFd> {
    // SAFETY: plain system call.
    let ep = owned_fd(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    for (i, &fd) in fds.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    }
    Ok(ep)
}

/// `poll(fd, POLLIN, timeout_ms)`: whether `fd` became readable.
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
    Ok(n > 0 && p.revents & libc::POLLIN != 0)
}

/// `ETHTOOL_GCHANNELS`: the channel counts of an interface.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels` of `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The RX queues of `ifname` that are active (receive channels plus
/// combined channels, as `ethtool -l` shows them), asked with
/// `ETHTOOL_GCHANNELS` on a socket of the calling thread's network
/// namespace. `Ok(None)` when the driver does not report channels.
/// Interfaces allocate more queues than they use (a veth made the default
/// way allocates 2 and activates 1; `ethtool -L` lowers a NIC's count),
/// and binding an AF_XDP socket to an inactive queue fails.
pub(crate) fn active_rx_queues(ifname: &str) -> io::Result<Option<u32>> {
    if ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {ifname:?}"),
        ));
    }
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let sock =
        owned_fd(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS reads the NUL-terminated
    // name from `ifr` (zeroed beyond the name, shorter than IFNAMSIZ) and
    // writes one `struct ethtool_channels` through `ifru_data`, which
    // points to `channels` (repr(C), the kernel's layout), alive for the
    // call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if r < 0 {
        let e = last_err();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    let active = channels.rx_count + channels.combined_count;
    Ok((active > 0).then_some(active))
}

/// Effective capability set of the calling thread (`CapEff` of
/// `/proc/thread-self/status`).
pub(crate) fn effective_caps() -> io::Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::other("no CapEff line in /proc/self/status"))
}

/// An identifier of the calling thread's network namespace (the inode of
/// `/proc/thread-self/ns/net`), or 0 if it cannot be read.
pub(crate) fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The name of an errno value for messages ("EOPNOTSUPP"), or its number.
pub(crate) fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::EINTR) => "EINTR",
        Some(libc::ENXIO) => "ENXIO",
        Some(libc::EBADF) => "EBADF",
        Some(libc::EAGAIN) => "EAGAIN",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EFAULT) => "EFAULT",
        Some(libc::EBUSY) => "EBUSY",
        Some(libc::EEXIST) => "EEXIST",
        Some(libc::ENODEV) => "ENODEV",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::ERANGE) => "ERANGE",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::ENOBUFS) => "ENOBUFS",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::EAFNOSUPPORT) => "EAFNOSUPPORT",
        Some(libc::ENETDOWN) => "ENETDOWN",
        Some(libc::E2BIG) => "E2BIG",
        Some(n) => return format!("errno {n}"),
        None => return e.to_string(),
    };
    name.to_string()
}
