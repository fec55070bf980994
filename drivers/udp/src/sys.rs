//! The system calls of the udp method: batched receive and send with
//! `recvmmsg`/`sendmmsg`, socket-address conversions, socket options.
//!
//! All `unsafe` of the crate is here.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// A socket address in the kernel's form.
#[derive(Clone, Copy)]
pub(crate) struct RawAddr {
    pub storage: libc::sockaddr_storage,
    pub len: libc::socklen_t,
}

impl RawAddr {
    /// No address yet (length 0).
    pub fn empty() -> RawAddr {
        RawAddr {
            // SAFETY: plain C struct; all-zero is a valid value.
            storage: unsafe { zeroed() },
            len: 0,
        }
    }

    pub fn from_std(addr: &SocketAddr) -> RawAddr {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned
                // for sockaddr_in (that is its purpose); we write one value.
                unsafe {
                    std::ptr::write(
                        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>(),
                        sin,
                    )
                };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe {
                    std::ptr::write(
                        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                        sin6,
                    )
                };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    /// Whether `other` is the same address (same length and bytes).
    pub fn same(&self, other: &RawAddr) -> bool {
        let n = self.len as usize;
        if n != other.len as usize || n > size_of::<libc::sockaddr_storage>() {
            return false;
        }
        let bytes = |r: &RawAddr| {
            // SAFETY: sockaddr_storage is plain data of at least `n` bytes
            // (checked above); viewing its first `n` bytes is sound.
            unsafe {
                std::slice::from_raw_parts(
                    (&r.storage as *const libc::sockaddr_storage).cast::<u8>(),
                    n,
                )
            }
        };
        bytes(self) == bytes(other)
    }

    /// The address as a std address, if it is IPv4 or IPv6.
    pub fn to_std(self) -> Option<SocketAddr> {
        let family = i32::from(self.storage.ss_family);
        let base = (&self.storage as *const libc::sockaddr_storage).cast::<u8>();
        if family == libc::AF_INET && self.len as usize >= size_of::<libc::sockaddr_in>() {
            // SAFETY: the kernel wrote a sockaddr_in here (family and length
            // checked); the storage is aligned for it; read_unaligned avoids
            // relying on that anyway.
            let sin = unsafe { std::ptr::read_unaligned(base.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        } else if family == libc::AF_INET6 && self.len as usize >= size_of::<libc::sockaddr_in6>() {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(base.cast::<libc::sockaddr_in6>()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        } else {
            None
        }
    }
}

/// `count` preallocated datagram buffers of `buf_len` bytes with the message
/// headers `recvmmsg`/`sendmmsg` need, all pointing into this structure's own
/// heap allocations (which never move or resize after `new`).
pub(crate) struct Batch {
    slab: Vec<u8>,
    buf_len: usize,
    names: Vec<RawAddr>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Slots the last receive filled (the only ones to reset).
    dirty: usize,
    /// One control-message buffer per slot: receiving, where the kernel
    /// writes a coalesced datagram's segment size (`UDP_GRO`); sending,
    /// where a run of frames gets its `UDP_SEGMENT` size.
    ctrl: Vec<Ctrl>,
    /// Receiving: ask for the segment size (`UDP_GRO` is on).
    gro: bool,
    /// Sending segmented: one header per run of frames, and the slots each
    /// covers.
    runs: Vec<libc::mmsghdr>,
    run_slots: Vec<usize>,
}

/// Room for one control message carrying an `int` (aligned for `cmsghdr`).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Ctrl([u8; 32]);

/// Most frames the kernel segments out of one UDP GSO send
/// (`UDP_MAX_SEGMENTS`).
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;

/// Largest UDP payload of one datagram, segmented or coalesced (IPv4).
pub(crate) const GSO_MAX_BYTES: usize = 65_507;

/// How a segmented send failed.
pub(crate) enum SegmentedError {
    /// The kernel cannot segment on this path (no checksum offload, an
    /// IPsec route, an old kernel): send frames one datagram each.
    Unsupported,
    /// Any other failure, as for an ordinary send.
    Io(io::Error),
}

// SAFETY: the raw pointers inside `iovs`, `hdrs` and `runs` point only into
// `slab`, `names`, `iovs` and `ctrl`, heap allocations owned by the same value
// that are never reallocated; moving the value to another thread moves them
// together and nothing else refers to them.
unsafe impl Send for Batch {}

impl Batch {
    pub fn new(count: usize, buf_len: usize) -> Batch {
        let mut slab = vec![0u8; count * buf_len];
        let mut names = vec![RawAddr::empty(); count];
        let mut iovs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                iov_base: slab[i * buf_len..].as_mut_ptr().cast(),
                iov_len: buf_len,
            })
            .collect();
        let hdrs = (0..count)
            .map(|i| {
                // SAFETY: plain C struct; all-zero is valid (null pointers,
                // zero lengths), the fields that matter are set below.
                let mut h: libc::mmsghdr = unsafe { zeroed() };
                h.msg_hdr.msg_name = (&mut names[i].storage as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_hdr.msg_iov = &mut iovs[i];
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        Batch {
            slab,
            buf_len,
            names,
            iovs,
            hdrs,
            dirty: count,
            ctrl: vec![Ctrl([0; 32]); count],
            gro: false,
            runs: Vec::with_capacity(count),
            run_slots: Vec::with_capacity(count),
        }
    }

    /// Receives with the segment size of coalesced datagrams (the socket
    /// has `UDP_GRO` on; slots must then hold [`GSO_MAX_BYTES`]).
    pub fn want_segment_size(&mut self) {
        self.gro = true;
        for i in 0..self.count() {
            let ctrl = &mut self.ctrl[i];
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_control = ctrl.0.as_mut_ptr().cast();
            h.msg_controllen = ctrl.0.len() as _;
        }
    }

    /// The segment size of the datagram received into slot `i`, if the
    /// kernel coalesced several there (`UDP_GRO`): it then holds frames of
    /// that size back to back, the last one possibly shorter.
    pub fn segment_size(&self, i: usize) -> Option<usize> {
        if !self.gro {
            return None;
        }
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: msg_control points at ctrl[i] (32 bytes, 8-aligned) and
        // msg_controllen is what the kernel wrote there (at most that);
        // CMSG_FIRSTHDR/CMSG_NXTHDR only return headers inside it, and the
        // data of a UDP_GRO message is one int, read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP
                    && (*c).cmsg_type == libc::UDP_GRO
                    && (*c).cmsg_len as usize
                        >= libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize
                {
                    let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    return usize::try_from(size).ok().filter(|s| *s > 0);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    pub fn count(&self) -> usize {
        self.hdrs.len()
    }

    /// Buffer `i`, whole.
    pub fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.slab[i * self.buf_len..(i + 1) * self.buf_len]
    }

    /// The datagram received into slot `i`: its bytes (clamped to the
    /// buffer), whether the kernel truncated it, and its source.
    pub fn received(&self, i: usize) -> (&[u8], bool, &RawAddr) {
        let h = &self.hdrs[i];
        let len = (h.msg_len as usize).min(self.buf_len);
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let start = i * self.buf_len;
        (&self.slab[start..start + len], truncated, &self.names[i])
    }

    /// Receives up to `max` datagrams without blocking; 0 when none waits.
    pub fn recv(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        let n = max.min(self.count());
        if n == 0 {
            return Ok(0);
        }
        // Only slots written by the last call (or set up for sending) differ
        // from the receive set-up.
        for i in 0..self.dirty.min(self.count()) {
            self.iovs[i].iov_len = self.buf_len;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_flags = 0;
            if self.gro {
                h.msg_controllen = self.ctrl[i].0.len() as _;
            }
        }
        self.dirty = 0;
        if n == 1 {
            return if self.gro {
                self.recv_one_msg(fd)
            } else {
                self.recv_one(fd)
            };
        }
        // SAFETY: hdrs[..n] point at valid iovecs and name buffers owned by
        // self (see `new`), each iovec at a distinct buf_len-byte region of
        // the slab; the kernel writes only within those bounds.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for i in 0..r as usize {
            self.names[i].len = self.hdrs[i].msg_hdr.msg_namelen;
        }
        self.dirty = r as usize;
        Ok(r as usize)
    }

    /// One datagram into slot 0 with `recvmsg` (which, unlike `recvfrom`,
    /// brings the segment size of a coalesced datagram): on the latency
    /// path it is cheaper than `recvmmsg` of one.
    fn recv_one_msg(&mut self, fd: RawFd) -> io::Result<usize> {
        // SAFETY: hdrs[0].msg_hdr points at iovs[0] (slot 0 of the slab,
        // buf_len bytes), names[0].storage and ctrl[0], all owned by self
        // with their sizes set by `recv`; the kernel writes within them.
        let r = unsafe {
            libc::recvmsg(
                fd,
                &mut self.hdrs[0].msg_hdr,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        // With MSG_TRUNC the result is the datagram's real length; the
        // kernel set MSG_TRUNC in msg_flags if it did not fit.
        let h = &mut self.hdrs[0];
        h.msg_len = u32::try_from(r).unwrap_or(u32::MAX);
        self.names[0].len = h.msg_hdr.msg_namelen;
        self.dirty = 1;
        Ok(1)
    }

    /// One datagram into slot 0 with plain `recvfrom`: on the latency path
    /// it is cheaper than `recvmmsg` (no message-header and iovec import).
    fn recv_one(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: the buffer is slot 0 of the slab (buf_len bytes, owned by
        // self), the address buffer is names[0].storage with its size in
        // `namelen`; the kernel writes within both.
        let r = unsafe {
            libc::recvfrom(
                fd,
                self.slab.as_mut_ptr().cast(),
                self.buf_len,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut self.names[0].storage as *mut libc::sockaddr_storage).cast(),
                &mut namelen,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        // With MSG_TRUNC the result is the datagram's real length.
        let len = r as usize;
        self.names[0].len = namelen;
        let h = &mut self.hdrs[0];
        h.msg_len = u32::try_from(len).unwrap_or(u32::MAX);
        h.msg_hdr.msg_flags = if len > self.buf_len {
            libc::MSG_TRUNC
        } else {
            0
        };
        self.dirty = 1;
        Ok(1)
    }

    /// Sets slot `i` up to send its first `len` bytes to `to`.
    pub fn prepare_send(&mut self, i: usize, len: usize, to: &RawAddr) {
        self.dirty = self.dirty.max(i + 1);
        self.names[i] = *to;
        self.iovs[i].iov_len = len.min(self.buf_len);
        self.hdrs[i].msg_hdr.msg_namelen = to.len;
        self.hdrs[i].msg_hdr.msg_flags = 0;
    }

    /// Sends slots `from..to` (prepared with [`Batch::prepare_send`]);
    /// returns how many the kernel took (at least one unless it failed).
    pub fn send(&mut self, fd: RawFd, from: usize, to: usize) -> io::Result<usize> {
        let to = to.min(self.count());
        if from >= to {
            return Ok(0);
        }
        if to - from == 1 {
            // One frame (the latency path): plain sendto is cheaper.
            let iov = &self.iovs[from];
            let name = &self.names[from];
            // SAFETY: iov points into slot `from` of the slab with iov_len <=
            // buf_len, the address is names[from] with its length; both are
            // owned by self and only read by the kernel.
            let r = unsafe {
                libc::sendto(
                    fd,
                    iov.iov_base,
                    iov.iov_len,
                    libc::MSG_DONTWAIT,
                    (&name.storage as *const libc::sockaddr_storage).cast(),
                    name.len,
                )
            };
            return if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(1)
            };
        }
        // SAFETY: hdrs[from..to] point at valid iovecs and addresses owned by
        // self, each iovec within its slab region (iov_len <= buf_len).
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs[from..].as_mut_ptr(),
                (to - from) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

impl Batch {
    /// Sends slots `from..to` (prepared with [`Batch::prepare_send`]) with
    /// UDP segmentation offload: each run of consecutive frames to the same
    /// address, all of one length but the last (which may be shorter), at
    /// most [`GSO_MAX_SEGMENTS`] frames and [`GSO_MAX_BYTES`] bytes, goes
    /// to the kernel as one datagram that it cuts into those frames
    /// (`UDP_SEGMENT`); on the wire they are the same datagrams as sent one
    /// by one, and the stack below the socket handles each run once. Frames
    /// longer than `max_segment` go alone. Returns how many slots the
    /// kernel took, and in how many segmented runs.
    pub fn send_segmented(
        &mut self,
        fd: RawFd,
        from: usize,
        to: usize,
        max_segment: usize,
    ) -> Result<(usize, usize), SegmentedError> {
        let to = to.min(self.count());
        self.runs.clear();
        self.run_slots.clear();
        let mut i = from;
        while i < to {
            let seg = self.iovs[i].iov_len;
            let mut j = i + 1;
            let mut bytes = seg;
            while j < to
                && seg <= max_segment
                && j - i < GSO_MAX_SEGMENTS
                && bytes + self.iovs[j].iov_len <= GSO_MAX_BYTES
                && self.iovs[j].iov_len <= seg
                && self.names[j].same(&self.names[i])
            {
                bytes += self.iovs[j].iov_len;
                j += 1;
                if self.iovs[j - 1].iov_len < seg {
                    break;
                }
            }
            let mut h = self.hdrs[i];
            h.msg_hdr.msg_iovlen = (j - i) as _;
            if j - i > 1 {
                let r = self.runs.len();
                let ctrl = &mut self.ctrl[r];
                h.msg_hdr.msg_control = ctrl.0.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic; the one
                // control message is written inside ctrl[r] (32 bytes,
                // 8-aligned, more than CMSG_SPACE(2) = 24), which outlives
                // the send below.
                unsafe {
                    h.msg_hdr.msg_controllen = libc::CMSG_SPACE(2) as _;
                    let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
                }
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            self.runs.push(h);
            self.run_slots.push(j - i);
            i = j;
        }
        if self.runs.is_empty() {
            return Ok((0, 0));
        }
        // SAFETY: runs[..] are copies of slot headers whose iovec pointers
        // point into `iovs` (each run's iovecs consecutive, each within its
        // slab slot), names into `names`, control buffers into `ctrl`; all
        // owned by self, unchanged during the call and only read by the
        // kernel.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.runs.as_mut_ptr(),
                self.runs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                    if self.run_slots.iter().any(|n| *n > 1) =>
                {
                    SegmentedError::Unsupported
                }
                _ => SegmentedError::Io(e),
            });
        }
        let taken = &self.run_slots[..r as usize];
        Ok((taken.iter().sum(), taken.iter().filter(|n| **n > 1).count()))
    }
}

/// Turns on `UDP_GRO`: the kernel then hands over a segmented datagram
/// whole, with its segment size ([`Batch::segment_size`]).
pub(crate) fn enable_gro(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: the option value is an int on the stack, its size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads the start of the next datagram into `head` without taking it off
/// the socket (`MSG_PEEK`), and its source into `from`. Returns the
/// datagram's whole length, or `None` when none waits.
pub(crate) fn peek(fd: RawFd, head: &mut [u8], from: &mut RawAddr) -> io::Result<Option<usize>> {
    let mut iov = libc::iovec {
        iov_base: head.as_mut_ptr().cast(),
        iov_len: head.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut from.storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: the one iovec covers `head`, the name buffer is `from.storage`
    // with its size in msg_namelen; the kernel writes within both, and all
    // of them outlive the call.
    let r = unsafe {
        libc::recvmsg(
            fd,
            &mut msg,
            libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    from.len = msg.msg_namelen;
    // With MSG_TRUNC the result is the datagram's real length.
    Ok(Some(r as usize))
}

/// Takes the next datagram off the socket, its first `head.len()` bytes
/// into `head` and the rest into `rest`. Returns its whole length (more
/// than the two buffers hold if it was cut short); `None` if none waits.
pub(crate) fn recv_split(fd: RawFd, head: &mut [u8], rest: &mut [u8]) -> io::Result<Option<usize>> {
    let mut iov = [
        libc::iovec {
            iov_base: head.as_mut_ptr().cast(),
            iov_len: head.len(),
        },
        libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        },
    ];
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: the two iovecs cover `head` and `rest`, exclusively borrowed
    // for the call; no name buffer is passed; the kernel writes only
    // within the iovecs.
    let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(r as usize))
}

/// Sends one datagram made of `parts` (up to two: a header and a payload,
/// gathered by the kernel from where they lie) to `to`, without blocking.
pub(crate) fn send_parts(fd: RawFd, parts: [&[u8]; 2], to: &RawAddr) -> io::Result<()> {
    let mut iov = parts.map(|p| libc::iovec {
        iov_base: p.as_ptr() as *mut libc::c_void,
        iov_len: p.len(),
    });
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&to.storage as *const libc::sockaddr_storage) as *mut libc::c_void;
    msg.msg_namelen = to.len;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: the iovecs cover `parts`, borrowed for the call and only read
    // by the kernel (sendmsg never writes through them), as is the address.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets an integer socket option; with `force` first tries the privileged
/// variant (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`) that ignores the system limit.
pub(crate) fn set_buffer(fd: RawFd, send: bool, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let (force, plain) = if send {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    } else {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    };
    for opt in [force, plain] {
        // SAFETY: setsockopt reads size_of::<c_int>() bytes from &value,
        // which lives across the call.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_the_kernel_form() {
        for text in ["10.1.2.3:7000", "[fd00::1:2]:9", "[fe80::1%3]:5"] {
            let a: SocketAddr = text.parse().unwrap();
            assert_eq!(RawAddr::from_std(&a).to_std(), Some(a), "{text}");
        }
        let mut r = RawAddr::from_std(&"10.1.2.3:7000".parse().unwrap());
        r.len = 2;
        assert_eq!(r.to_std(), None);
    }
}
