//! AF_PACKET raw sockets for the impairment bridge (libc only). All `unsafe` of
//! the crate lives here.
//!
//! Batching is done with `recvmmsg`/`sendmmsg` rather than PACKET_MMAP rings:
//! one system call moves up to a batch of frames, which is what matters at the
//! rates we need (tens to a few hundred thousand frames per second); the
//! sockets use PACKET_VNET_HDR so that checksum-offloaded and GSO frames from
//! veth are forwarded with their offload state intact (a TX ring would copy
//! the frame anyway, and RX rings with vnet headers add ring bookkeeping for
//! no gain at this scale).

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An AF_PACKET SOCK_RAW socket bound to one interface, receiving every
/// EtherType, ignoring its own transmissions, with `virtio_net_hdr`s.
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    /// Scratch arrays for the batch calls (rebuilt on every call).
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `val` is a live c_int for the duration of the call and its exact
    // size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&val as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(r).map(|_| ())
}

/// Interface index of `name` in the current network namespace.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// Lets `ppoll` wake up within nanoseconds of its deadline (default timer slack
/// is 50 µs, too coarse for microsecond delays).
pub(crate) fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}

impl PacketSocket {
    /// Opens the socket on `ifname` and puts the interface in promiscuous mode
    /// (a packet membership, undone by the kernel when the socket closes).
    pub fn open(ifname: &str, batch: usize) -> io::Result<PacketSocket> {
        let index = ifindex(ifname)?;
        // Protocol 0 at creation: the socket sees nothing until bind() names
        // the interface and ETH_P_ALL, so no frame of another interface can
        // slip in between.
        // SAFETY: plain socket(2) call with constant arguments.
        let raw =
            cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let f = fd.as_raw_fd();
        setsockopt_int(f, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)?;
        // Never see our own transmissions (Linux >= 4.20); recv also checks
        // sll_pkttype as a second guard.
        setsockopt_int(f, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)?;
        // Hand frames straight to the driver (veth's qdisc is noqueue anyway).
        let _ = setsockopt_int(f, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
        if setsockopt_int(f, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20).is_err() {
            let _ = setsockopt_int(f, libc::SOL_SOCKET, libc::SO_RCVBUF, 32 << 20);
        }
        if setsockopt_int(f, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20).is_err() {
            let _ = setsockopt_int(f, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        cvt(unsafe {
            libc::bind(
                f,
                (&sll as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
        let mut mr: libc::packet_mreq = unsafe { mem::zeroed() };
        mr.mr_ifindex = index as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: `mr` is a valid packet_mreq and its exact size is passed.
        cvt(unsafe {
            libc::setsockopt(
                f,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mr as *const libc::packet_mreq).cast(),
                mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        })?;
        // SAFETY: mmsghdr, iovec and sockaddr_ll are plain old data (pointers
        // may be null while unused); they are filled before every use.
        let (hdrs, iovs, addrs) = unsafe {
            (
                vec![mem::zeroed::<libc::mmsghdr>(); batch],
                vec![mem::zeroed::<libc::iovec>(); batch],
                vec![mem::zeroed::<libc::sockaddr_ll>(); batch],
            )
        };
        Ok(PacketSocket {
            fd,
            hdrs,
            iovs,
            addrs,
        })
    }

    /// The raw descriptor (for poll).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Receives up to `slots.len()` frames without blocking. `lens[i]` gets the
    /// length of frame `i` (vnet header included), or 0 for a frame to skip
    /// (our own transmission); `truncated` counts frames larger than a slot.
    /// Returns the number of entries filled.
    pub fn recv_batch(
        &mut self,
        slots: &mut [Box<[u8]>],
        lens: &mut [usize],
        truncated: &mut u64,
    ) -> io::Result<usize> {
        let n = slots.len().min(self.hdrs.len()).min(lens.len());
        for (i, slot) in slots.iter_mut().enumerate().take(n) {
            self.iovs[i] = libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            };
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: hdrs[..n] point at iovs[i] and addrs[i] (owned by self) and
        // the iovecs at slots[i] (exclusively borrowed for this call), each
        // with its true length; the kernel writes only within those bounds.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        let got = r as usize;
        for (i, len) in lens.iter_mut().enumerate().take(got) {
            let h = &self.hdrs[i];
            let outgoing = self.addrs[i].sll_pkttype == libc::PACKET_OUTGOING;
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                *truncated += 1;
                *len = 0;
            } else if outgoing {
                *len = 0;
            } else {
                *len = h.msg_len as usize;
            }
        }
        Ok(got)
    }

    /// Sends `frames` (each starting with a vnet header). Returns
    /// `(sent, failed)`; a frame the kernel refuses is skipped and counted.
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> (u64, u64) {
        let mut sent = 0u64;
        let mut failed = 0u64;
        let mut pos = 0;
        while pos < frames.len() {
            let n = (frames.len() - pos).min(self.hdrs.len());
            for i in 0..n {
                let f = frames[pos + i];
                self.iovs[i] = libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                };
                let h = &mut self.hdrs[i];
                h.msg_hdr.msg_name = std::ptr::null_mut();
                h.msg_hdr.msg_namelen = 0;
                h.msg_hdr.msg_iov = &mut self.iovs[i];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
                h.msg_len = 0;
            }
            // SAFETY: hdrs[..n] point at iovs[i] (owned by self), which point
            // at the caller's frames (borrowed for this call) with their true
            // lengths; the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // The first frame was refused (EMSGSIZE, ENOBUFS, ...): skip it.
                failed += 1;
                pos += 1;
            } else if r == 0 {
                failed += 1;
                pos += 1;
            } else {
                sent += r as u64;
                pos += r as usize;
            }
        }
        (sent, failed)
    }

    /// Frames dropped by the kernel since the last call (PACKET_STATISTICS
    /// resets on read).
    pub fn take_drops(&self) -> u64 {
        // SAFETY: tpacket_stats is plain old data; all-zero is a valid value.
        let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live and `len` holds the size of `st`;
        // the kernel writes at most `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            u64::from(st.tp_drops)
        }
    }
}

/// Waits until one of `fds` is readable or `timeout_ns` passes. Returns which
/// are readable; EINTR gives all false.
pub(crate) fn poll_readable(fds: [RawFd; 2], timeout_ns: u64) -> io::Result<[bool; 2]> {
    let mut p = [
        libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: fds[1],
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `p` is a live array of two pollfds and `ts` a live timespec;
    // the signal mask pointer is null (unchanged).
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok([false, false]);
        }
        return Err(e);
    }
    let ready = |x: &libc::pollfd| x.revents & (libc::POLLIN | libc::POLLERR) != 0;
    if p.iter().any(|x| x.revents & libc::POLLNVAL != 0) {
        return Err(io::Error::other("poll: invalid descriptor"));
    }
    Ok([ready(&p[0]), ready(&p[1])])
}

/// Sets a socket's receive buffer, beyond `rmem_max` when allowed (root).
pub(crate) fn set_rcvbuf(fd: RawFd, bytes: i32) {
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
    }
}
