//! The system interface of the packet method: the AF_PACKET socket, its
//! PACKET_MMAP rings (TPACKET_V2) and the interface queries. All `unsafe` of
//! the crate is here.
//!
//! # The ring protocol
//!
//! A ring is an array of frames in memory shared with the kernel. Each frame
//! starts with a `tpacket2_hdr` whose first word, `tp_status`, says who owns
//! the frame:
//!
//! - receive ring: `TP_STATUS_KERNEL` (0) = the kernel may fill it;
//!   `TP_STATUS_USER` bit = a received frame waits for us. We read it in
//!   place, then hand it back by storing `TP_STATUS_KERNEL`.
//! - transmit ring: `TP_STATUS_AVAILABLE` (0) = ours to fill;
//!   `TP_STATUS_SEND_REQUEST` = filled, for the kernel to send on the next
//!   `send()`; `TP_STATUS_SENDING` = the kernel still uses it.
//!
//! The status word is only accessed atomically (acquire loads, release
//! stores), which orders the frame's bytes against it. While a frame is ours
//! the kernel does not touch its bytes, so lending them as a slice for the
//! duration of one call is sound.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

const SOL_PACKET: libc::c_int = 263;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V2: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// `tp_status` values.
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
pub(crate) const TP_STATUS_USER: u32 = 1;
pub(crate) const TP_STATUS_AVAILABLE: u32 = 0;
pub(crate) const TP_STATUS_SEND_REQUEST: u32 = 1;

/// `struct tpacket2_hdr` (32 bytes).
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    tp_block_size: libc::c_uint,
    tp_block_nr: libc::c_uint,
    tp_frame_size: libc::c_uint,
    tp_frame_nr: libc::c_uint,
}

/// `struct tpacket_stats`.
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: libc::c_uint,
    tp_drops: libc::c_uint,
}

/// Offset of the frame data in a transmit-ring frame: the header, aligned
/// (`TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`).
pub(crate) const TX_DATA_OFFSET: usize = 32;
/// Where the kernel places a received frame's MAC header at the latest
/// (TPACKET_ALIGN(TPACKET2_HDRLEN) + 16 + an aligned network header).
pub(crate) const RX_MAX_MAC_OFFSET: usize = 96;

fn last_error(context: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{context}: {e}"))
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<T>() bytes from `value`, a live
    // reference for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An AF_PACKET raw socket with one receive and one transmit ring mapped.
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    pub rx: Ring,
    pub tx: Ring,
}

// SAFETY: the mapping is owned by this value alone (created in `open`,
// unmapped in `drop`); the raw pointers in it and in its rings refer only to
// that mapping, so moving the value between threads moves sole ownership.
unsafe impl Send for PacketSocket {}

/// One ring inside the mapping.
pub(crate) struct Ring {
    base: *mut u8,
    pub frame_size: usize,
    pub frames: usize,
    /// The next frame to look at.
    pub head: usize,
}

impl Ring {
    fn frame(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.frames);
        // SAFETY: i < frames and the ring spans frames * frame_size bytes of
        // the mapping, so the result stays inside it.
        unsafe { self.base.add(i * self.frame_size) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every frame starts with a 4-byte aligned tp_status word
        // (frames are 16-byte aligned in a page-aligned mapping); the kernel
        // also accesses it atomically, so an atomic view is the right one;
        // the mapping outlives `&self`.
        unsafe { &*(self.frame(i).cast::<AtomicU32>()) }
    }

    /// Status of frame `i`, with acquire ordering (the frame's bytes written
    /// before the status are visible after it).
    pub fn load_status(&self, i: usize) -> u32 {
        self.status(i).load(Ordering::Acquire)
    }

    /// Hands frame `i` over with `status`, with release ordering.
    pub fn store_status(&self, i: usize, status: u32) {
        self.status(i).store(status, Ordering::Release)
    }

    /// A received frame `i` (status USER): its bytes from the MAC header on
    /// and whether it was truncated. `None` if the header is inconsistent
    /// (never from a sane kernel).
    pub fn rx_frame(&self, i: usize) -> Option<(&[u8], bool)> {
        let f = self.frame(i);
        // SAFETY: the frame is ours (status USER, checked by the caller with
        // acquire ordering) and starts with a tpacket2_hdr; read_unaligned
        // copies it out without forming a reference.
        let h = unsafe { std::ptr::read_unaligned(f.cast::<Tpacket2Hdr>()) };
        let mac = usize::from(h.tp_mac);
        let snap = h.tp_snaplen as usize;
        if mac.checked_add(snap)? > self.frame_size {
            return None;
        }
        // SAFETY: mac + snap <= frame_size (checked), so the slice lies in
        // this frame; the kernel does not write a frame we own until we store
        // TP_STATUS_KERNEL, which the caller does only after the slice is
        // gone (it borrows &self... and the caller's borrow of the ring).
        let bytes = unsafe { std::slice::from_raw_parts(f.add(mac), snap) };
        Some((bytes, h.tp_snaplen < h.tp_len))
    }

    /// The data area of transmit frame `i` (ours: status AVAILABLE).
    pub fn tx_data(&mut self, i: usize) -> &mut [u8] {
        let f = self.frame(i);
        // SAFETY: the data area starts TX_DATA_OFFSET bytes into the frame
        // and ends with it; the frame is ours (AVAILABLE, checked by the
        // caller), and `&mut self` makes the slice unique on our side.
        unsafe {
            std::slice::from_raw_parts_mut(f.add(TX_DATA_OFFSET), self.frame_size - TX_DATA_OFFSET)
        }
    }

    /// Sets the length of transmit frame `i` before it is handed over.
    pub fn set_tx_len(&mut self, i: usize, len: usize) {
        let f = self.frame(i);
        // SAFETY: tp_len is the u32 at offset 4 of the frame header; the
        // frame is ours; the pointer is 4-byte aligned.
        unsafe { std::ptr::write_volatile(f.add(4).cast::<u32>(), len as u32) };
    }
}

/// Ring geometry: frames of `frame_size` bytes (a power of two, at least
/// 2048), blocks of at least a page holding whole frames.
fn request(frame_size: usize, frames: usize) -> TpacketReq {
    let block = frame_size.max(4096);
    let per_block = block / frame_size;
    let blocks = frames.div_ceil(per_block);
    TpacketReq {
        tp_block_size: block as libc::c_uint,
        tp_block_nr: blocks as libc::c_uint,
        tp_frame_size: frame_size as libc::c_uint,
        tp_frame_nr: (blocks * per_block) as libc::c_uint,
    }
}

/// Why a socket could not be opened.
pub(crate) enum OpenError {
    /// The caller lacks CAP_NET_RAW.
    NoCapability,
    /// Anything else.
    Io(io::Error),
}

/// Creates an AF_PACKET socket that receives nothing yet (protocol 0).
fn raw_socket() -> Result<OwnedFd, OpenError> {
    // SAFETY: plain system call; the returned descriptor is checked and then
    // owned by exactly one OwnedFd.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => OpenError::NoCapability,
            _ => OpenError::Io(e),
        });
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether this thread may open AF_PACKET sockets (tries one).
pub(crate) fn can_open_packet_socket() -> Result<(), OpenError> {
    raw_socket().map(drop)
}

impl PacketSocket {
    /// Opens a socket bound to interface `ifindex` for frames of `ethertype`,
    /// with a receive ring of `rx_frames` and a transmit ring of `tx_frames`
    /// frames of `frame_size` bytes.
    pub fn open(
        ifindex: u32,
        ethertype: u16,
        frame_size: usize,
        rx_frames: usize,
        tx_frames: usize,
    ) -> Result<PacketSocket, OpenError> {
        let fd = raw_socket()?;
        let raw = fd.as_raw_fd();
        let io = |ctx: &str| OpenError::Io(last_error(ctx));
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)
            .map_err(|_| io("PACKET_VERSION TPACKET_V2"))?;
        let one: libc::c_int = 1;
        // Straight to the driver, no qdisc: lower latency; the protocol does
        // its own flow control.
        setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &one)
            .map_err(|_| io("PACKET_QDISC_BYPASS"))?;
        // A frame the kernel cannot send is dropped, not kept in the ring
        // (the protocol retransmits).
        setsockopt(raw, SOL_PACKET, PACKET_LOSS, &one).map_err(|_| io("PACKET_LOSS"))?;
        // Never see frames sent on this interface (by us or by others); on
        // kernels without the option the receive filter drops them (their
        // source is this interface's MAC).
        let _ = setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
        let rx_req = request(frame_size, rx_frames);
        let tx_req = request(frame_size, tx_frames);
        setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &rx_req).map_err(|_| io("PACKET_RX_RING"))?;
        setsockopt(raw, SOL_PACKET, PACKET_TX_RING, &tx_req).map_err(|_| io("PACKET_TX_RING"))?;
        let rx_len = (rx_req.tp_block_size * rx_req.tp_block_nr) as usize;
        let tx_len = (tx_req.tp_block_size * tx_req.tp_block_nr) as usize;
        let map_len = rx_len + tx_len;
        // SAFETY: maps the rings just configured on our socket; the kernel
        // chooses the address; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io("mmap of the packet rings"));
        }
        let map = map.cast::<u8>();
        let sock = PacketSocket {
            fd,
            map,
            map_len,
            rx: Ring {
                base: map,
                frame_size,
                frames: rx_req.tp_frame_nr as usize,
                head: 0,
            },
            tx: Ring {
                // SAFETY: the TX ring follows the RX ring inside the mapping.
                base: unsafe { map.add(rx_len) },
                frame_size,
                frames: tx_req.tp_frame_nr as usize,
                head: 0,
            },
        };
        // Bind last: only now frames of our EtherType on our interface start
        // to arrive, straight into the ring.
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: bind reads a sockaddr_ll of the given size from &sll.
        let r = unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io(&format!("bind to interface index {ifindex}")));
        }
        Ok(sock)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Asks the kernel to send every frame marked SEND_REQUEST, without
    /// waiting for their completion.
    pub fn kick(&self) -> io::Result<()> {
        // SAFETY: a zero-length send with no buffer only triggers the TX
        // ring; no memory is passed.
        let r = unsafe { libc::send(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Frames the kernel dropped because the receive ring was full since the
    /// last call (PACKET_STATISTICS resets on read).
    pub fn take_drops(&self) -> u64 {
        let mut st = TpacketStats::default();
        let mut len = size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `st`.
        let r = unsafe {
            libc::getsockopt(
                self.fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            u64::from(st.tp_drops)
        } else {
            0
        }
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `open`; no slice into
        // it survives (they borrow `self`).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// `poll(fd, POLLIN, timeout_ms)`: whether `fd` became readable.
pub(crate) fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0 && p.revents & libc::POLLIN != 0)
}

/// The MTU of interface `name`, asked with SIOCGIFMTU on `fd`.
pub(crate) fn interface_mtu(name: &str) -> io::Result<usize> {
    let sock = raw_dgram_socket()?;
    // SAFETY: ifreq is plain data; zero is a valid start.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} too long"),
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifru_mtu inside `req`.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req) };
    if r != 0 {
        return Err(last_error(&format!("SIOCGIFMTU {name}")));
    }
    // SAFETY: after SIOCGIFMTU the union holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    usize::try_from(mtu).map_err(|_| io::Error::other(format!("negative MTU of {name}")))
}

/// A UDP socket for interface ioctls (needs no privilege).
fn raw_dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor is checked and then owned.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_error("socket(AF_INET, SOCK_DGRAM)"));
    }
    // SAFETY: fresh descriptor, owned once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Drops CAP_NET_RAW from the calling thread's effective set (tests of the
/// probe run it on a throw-away thread; capabilities are per thread).
#[cfg(test)]
pub(crate) fn drop_net_raw_in_this_thread() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two Data structs for version 3.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    if r != 0 {
        return Err(last_error("capget"));
    }
    d[0].effective &= !(1 << CAP_NET_RAW);
    // SAFETY: capset reads the header and two Data structs.
    let r = unsafe { libc::syscall(libc::SYS_capset, &h, d.as_ptr()) };
    if r != 0 {
        return Err(last_error("capset"));
    }
    Ok(())
}
