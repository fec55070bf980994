//! The `udp` method.

use crate::addr::{local_ip, parse_address};
use crate::sys::{self, set_buffer, Batch, RawAddr, SegmentedError};
use bcl_core::wire::HEADER_LEN;
use bcl_core::{
    Availability, Descriptor, GatherSend, GatherSource, LinkId, Method, MethodCaps, MethodCounters,
    MethodError, NoGather, RxSink, TxFrame,
};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// The method's name, as in its descriptors.
pub const METHOD_NAME: &str = "udp";

/// Datagrams moved by one `recvmmsg` or `sendmmsg`, at most.
pub const BATCH: usize = 64;

/// Largest UDP payload of an IPv4 datagram.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// Datagrams of at least this many bytes are received straight into the
/// posted buffer when the core has one for them ([`RxSink::placement`]).
/// Placing costs a second system call (the header is peeked first), which
/// is cheaper than the copy it saves from about this size on.
pub const PLACE_MIN: usize = 16 << 10;

/// Receive buffers while the kernel may coalesce datagrams (`UDP_GRO`),
/// each large enough for a whole segmented run.
const GRO_BUFFERS: usize = 16;

/// Data frames with at least this much payload are sent with their payload
/// gathered by the kernel from the application's buffer
/// ([`GatherSend`]), one `sendmsg` each, instead of copied into a batch
/// slot first.
pub const GATHER_MIN: usize = 16 << 10;

/// Small datagrams after a large one for which the method still peeks.
const PLACE_RECENT: u32 = 8;

/// Consecutive large datagrams the core would not place after which the
/// method stops peeking ...
const PLACE_MISSES: u32 = 4;
/// ... until this many large datagrams have come by the ordinary path.
const PLACE_RETRY_AFTER: u32 = 64;

/// How to open a [`UdpMethod`].
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// Where to bind. A wildcard IP (`0.0.0.0`, `::`) is replaced by an
    /// interface address ([`local_ip`]) so the descriptor is reachable; port
    /// 0 lets the kernel choose.
    pub bind: SocketAddr,
    /// Largest BCL frame (the UDP payload). Default: what fits a 1500-byte
    /// IP MTU without fragmentation, 1472 bytes over IPv4 and 1452 over IPv6.
    /// At most 65507.
    pub mtu: Option<usize>,
    /// Socket receive buffer in bytes (default 4 MiB; above the system limit
    /// only with CAP_NET_ADMIN).
    pub rcvbuf: usize,
    /// Socket send buffer in bytes (default 4 MiB).
    pub sndbuf: usize,
    /// Also protect every frame with the core's CRC32C (default false). The
    /// UDP checksum already covers each datagram end to end, and the
    /// receiving kernel drops one that fails it, as for kernel TCP; the
    /// CRC32C is a second, stronger check that costs a pass over every
    /// payload on each side. Both ends must agree: a receiver with it on
    /// drops frames without one.
    pub crc32c: bool,
    /// Hand the kernel runs of equal-sized frames to the same peer as one
    /// segmented datagram (`UDP_SEGMENT`), and take datagrams it coalesced
    /// whole (`UDP_GRO`) (default true). The frames on the wire are the
    /// same; the kernel's per-datagram work is done once per run. Falls
    /// back by itself where the kernel cannot.
    pub gso: bool,
}

impl UdpConfig {
    /// Defaults, bound to `bind`.
    pub fn new(bind: SocketAddr) -> Self {
        UdpConfig {
            bind,
            mtu: None,
            rcvbuf: 4 << 20,
            sndbuf: 4 << 20,
            crc32c: false,
            gso: true,
        }
    }
}

/// Counters of one [`UdpMethod`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Frames received and shown to the core (a coalesced datagram counts
    /// each of its frames).
    pub rx_datagrams: u64,
    /// Datagrams larger than the MTU, dropped.
    pub rx_truncated: u64,
    /// Datagrams from a source that is not an IPv4/IPv6 address, dropped.
    pub rx_bad_source: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Frames the kernel refused (buffer full, unreachable...), dropped; the
    /// protocol retransmits them.
    pub tx_dropped: u64,
    /// Links opened because a new source sent to us.
    pub links_learned: u64,
    /// Datagrams sent with their payload gathered from where it lay (no
    /// copy by the method).
    pub tx_gathered: u64,
    /// Runs of frames the kernel segmented from one send (`UDP_SEGMENT`).
    pub tx_segmented: u64,
    /// Datagrams received coalesced, several frames at once (`UDP_GRO`).
    pub rx_coalesced: u64,
    /// Datagrams whose payload was received straight into the posted
    /// buffer (no copy by the method or the core).
    pub rx_placed: u64,
    /// Large datagrams peeked at that the core did not place (received
    /// the ordinary way).
    pub rx_place_misses: u64,
}

/// Whether the `udp` method can be used here (a UDP socket can be created).
pub fn probe() -> Availability {
    match UdpSocket::bind("127.0.0.1:0") {
        Ok(_) => Availability::Usable,
        Err(e) => Availability::NotUsable(format!("cannot create a UDP socket: {e}")),
    }
}

struct Link {
    addr: SocketAddr,
    raw: RawAddr,
}

/// BCL frames as UDP payloads (see the crate documentation).
pub struct UdpMethod {
    socket: UdpSocket,
    local: SocketAddr,
    mtu: usize,
    links: Vec<Link>,
    by_addr: HashMap<SocketAddr, u32>,
    rx: Batch,
    tx: Batch,
    /// Links of the frames written into `tx` in the current burst.
    tx_links: Vec<u32>,
    stats: UdpStats,
    closed: bool,
    /// Datagrams asked of the next `recvmmsg`: 1 while traffic is light
    /// (after the first datagram, every further slot costs the kernel a
    /// message-header copy and a failed receive attempt, on the latency
    /// path), doubling while batches come back full.
    rx_vlen: usize,
    /// Link of the last datagram received.
    last_rx: Option<LinkId>,
    /// Set to [`PLACE_RECENT`] by a large datagram, lowered by each small
    /// one: placing is tried while large datagrams are recent (a stream of
    /// large transfer frames has a small last frame per message, and the
    /// next message's frames should still be placed).
    recent_large: u32,
    /// Large datagrams in a row the core did not place.
    place_misses: u32,
    /// Large datagrams received the ordinary way since placing was given
    /// up.
    unplaced_since: u32,
    /// Transmit bursts left in which frames are sent one by one, gathering
    /// large payloads: set by a large frame, lowered by each burst without
    /// one (then the batched `sendmmsg` path is back).
    gather_bursts: u32,
    /// Where frames are written when sent one by one.
    single: Vec<u8>,
    /// The header of the datagram peeked at, and its source.
    peek_head: [u8; HEADER_LEN],
    peek_from: RawAddr,
    /// [`UdpConfig::crc32c`].
    crc32c: bool,
    /// Send runs of frames segmented ([`UdpConfig::gso`]; off once the
    /// kernel refused).
    gso: bool,
}

impl std::fmt::Debug for UdpMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpMethod")
            .field("local", &self.local)
            .field("mtu", &self.mtu)
            .field("links", &self.links.len())
            .finish_non_exhaustive()
    }
}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> MethodError {
    move |source| MethodError::Io {
        method: METHOD_NAME,
        context: context.into(),
        source,
    }
}

impl UdpMethod {
    /// Opens a non-blocking UDP socket as configured.
    pub fn open(cfg: UdpConfig) -> Result<UdpMethod, MethodError> {
        let mut bind = cfg.bind;
        if bind.ip().is_unspecified() {
            let ip = local_ip(bind.ip()).map_err(|e| MethodError::NotUsable {
                method: METHOD_NAME,
                reason: e.0,
            })?;
            bind.set_ip(ip);
        }
        let max_default = if bind.is_ipv4() { 1472 } else { 1452 };
        let mtu = cfg.mtu.unwrap_or(max_default);
        if !(bcl_core::wire::HEADER_LEN + 1..=MAX_UDP_PAYLOAD).contains(&mtu) {
            return Err(MethodError::Other {
                method: METHOD_NAME,
                reason: format!(
                    "mtu {mtu} out of range {}..={MAX_UDP_PAYLOAD}",
                    bcl_core::wire::HEADER_LEN + 1
                ),
            });
        }
        let socket = UdpSocket::bind(bind).map_err(io_error(format!("bind {bind}")))?;
        socket
            .set_nonblocking(true)
            .map_err(io_error("set non-blocking"))?;
        let fd = socket.as_raw_fd();
        // Best effort: a smaller buffer only means more loss under bursts.
        let _ = set_buffer(fd, false, cfg.rcvbuf);
        let _ = set_buffer(fd, true, cfg.sndbuf);
        let local = socket.local_addr().map_err(io_error("getsockname"))?;
        // One spare byte per buffer tells a datagram of exactly the MTU
        // from a longer one. Coalesced datagrams need room for a whole
        // run, so fewer, larger buffers then.
        let gro = cfg.gso && mtu < GATHER_MIN && sys::enable_gro(fd).is_ok();
        let rx = if gro {
            let mut b = Batch::new(GRO_BUFFERS, sys::GSO_MAX_BYTES + 1);
            b.want_segment_size();
            b
        } else {
            Batch::new(BATCH, mtu + 1)
        };
        Ok(UdpMethod {
            socket,
            local,
            mtu,
            links: Vec::new(),
            by_addr: HashMap::new(),
            rx,
            tx: Batch::new(BATCH, mtu),
            tx_links: Vec::with_capacity(BATCH),
            stats: UdpStats::default(),
            closed: false,
            rx_vlen: 1,
            last_rx: None,
            recent_large: 0,
            place_misses: 0,
            unplaced_since: 0,
            gather_bursts: 0,
            single: vec![0; mtu],
            peek_head: [0; HEADER_LEN],
            peek_from: RawAddr::empty(),
            crc32c: cfg.crc32c,
            gso: cfg.gso,
        })
    }

    /// The address the socket is bound to (never a wildcard).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The method's counters.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// The link of a datagram from `raw`, learning it if new; `None` (and
    /// counted) if the source is not an IP address.
    fn link_of(&mut self, raw: &RawAddr) -> Option<LinkId> {
        // Most frames come from the peer of the previous one: compare the
        // raw address before hashing.
        if let Some(l) = self.last_rx.filter(|l| {
            self.links
                .get(l.0 as usize)
                .is_some_and(|k| k.raw.same(raw))
        }) {
            return Some(l);
        }
        let Some(src) = (*raw).to_std() else {
            self.stats.rx_bad_source += 1;
            return None;
        };
        let known = self.by_addr.len();
        let link = self.link_for(src);
        if self.by_addr.len() != known {
            self.stats.links_learned += 1;
        }
        self.last_rx = Some(link);
        Some(link)
    }

    /// Whether to peek at the next datagram to place it: large ones came
    /// lately, and the core has not refused the last few.
    fn placing_worthwhile(&self) -> bool {
        self.recent_large > 0 && self.place_misses < PLACE_MISSES
    }

    /// Bookkeeping for a datagram of `len` bytes received the ordinary way:
    /// after a while of large datagrams, placing is tried again.
    fn note_ordinary(&mut self, len: usize) {
        if len < PLACE_MIN {
            self.recent_large = self.recent_large.saturating_sub(1);
            return;
        }
        self.recent_large = PLACE_RECENT;
        if self.place_misses >= PLACE_MISSES {
            self.unplaced_since += 1;
            if self.unplaced_since >= PLACE_RETRY_AFTER {
                self.place_misses = 0;
                self.unplaced_since = 0;
            }
        }
    }

    /// The peer address of `link`, if it exists.
    pub fn link_addr(&self, link: LinkId) -> Option<SocketAddr> {
        self.links.get(link.0 as usize).map(|l| l.addr)
    }

    fn link_for(&mut self, addr: SocketAddr) -> LinkId {
        if let Some(&i) = self.by_addr.get(&addr) {
            return LinkId(i);
        }
        let i = self.links.len() as u32;
        self.links.push(Link {
            addr,
            raw: RawAddr::from_std(&addr),
        });
        self.by_addr.insert(addr, i);
        LinkId(i)
    }

    fn check_open(&self) -> Result<(), MethodError> {
        if self.closed {
            Err(MethodError::Other {
                method: METHOD_NAME,
                reason: format!("socket {} is shut down", self.local),
            })
        } else {
            Ok(())
        }
    }
}

impl Method for UdpMethod {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: self.mtu,
            // The UDP checksum covers every datagram end to end and the
            // receiving kernel drops one that fails it (the same guarantee
            // kernel TCP gives its users; this method's sockets never turn
            // it off), so the core's CRC32C is left out unless asked for.
            integrity: !self.crc32c,
            reliable: false,
        }
    }

    fn descriptor(&self) -> Descriptor {
        Descriptor::new(METHOD_NAME, self.local.to_string())
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let bad = |reason: String| MethodError::BadDescriptor {
            method: METHOD_NAME,
            descriptor: peer.clone(),
            reason,
        };
        if peer.method != METHOD_NAME {
            return Err(bad(format!(
                "it is for method {:?}, not {METHOD_NAME:?}",
                peer.method
            )));
        }
        let addr = parse_address(&peer.address).map_err(bad)?;
        if addr.is_ipv4() != self.local.is_ipv4() {
            return Err(bad(format!(
                "{addr} is not of the address family of this socket ({})",
                self.local
            )));
        }
        Ok(self.link_for(addr))
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let fd = self.socket.as_raw_fd();
        let vlen = self.rx_vlen.min(budget);
        let n = self.rx.recv(fd, vlen).map_err(io_error("recvmmsg"))?;
        self.rx_vlen = if n == vlen && n > 0 {
            (2 * vlen).min(BATCH)
        } else {
            n.max(1)
        };
        let mut shown = 0;
        for i in 0..n {
            let (bytes, truncated, raw) = self.rx.received(i);
            // A coalesced datagram holds frames of `segment` bytes back to
            // back, the last one possibly shorter.
            let segment = self.rx.segment_size(i).unwrap_or(bytes.len());
            if truncated || segment > self.mtu || bytes.is_empty() {
                self.stats.rx_truncated += 1;
                continue;
            }
            let raw = *raw;
            let Some(link) = self.link_of(&raw) else {
                continue;
            };
            self.note_ordinary(segment);
            let (bytes, _, _) = self.rx.received(i);
            if bytes.len() > segment {
                self.stats.rx_coalesced += 1;
            }
            for frame in bytes.chunks(segment) {
                sink(link, frame);
                shown += 1;
            }
        }
        self.stats.rx_datagrams += shown as u64;
        Ok(shown)
    }

    /// Large datagrams go straight into the posted buffer: the header is
    /// peeked at, the core says where the payload belongs, and one
    /// scattered read puts the header in a small buffer and the payload
    /// there. Small datagrams, and large ones the core has no place for,
    /// take the batched path of [`rx_burst`](Method::rx_burst).
    fn rx_burst_placing(
        &mut self,
        budget: usize,
        sink: &mut dyn RxSink,
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let fd = self.socket.as_raw_fd();
        let mut shown = 0;
        while shown < budget && self.placing_worthwhile() {
            let peeked = sys::peek(fd, &mut self.peek_head, &mut self.peek_from)
                .map_err(io_error("recvmsg (peek)"))?;
            let Some(len) = peeked else {
                return Ok(shown);
            };
            let from = self.peek_from;
            let link = if (PLACE_MIN..=self.mtu).contains(&len) {
                self.link_of(&from)
            } else {
                None
            };
            let placed = match link {
                Some(link) => match sink.placement(link, &self.peek_head) {
                    Some(dst) if HEADER_LEN + dst.len() == len => {
                        let mut head = [0u8; HEADER_LEN];
                        let got =
                            sys::recv_split(fd, &mut head, dst).map_err(io_error("recvmsg"))?;
                        if got == Some(len) && head == self.peek_head {
                            sink.placed(link, &head);
                            self.stats.rx_placed += 1;
                            self.stats.rx_datagrams += 1;
                            shown += 1;
                        } else {
                            // Not the datagram peeked at (only this method
                            // reads the socket, so never seen): what it
                            // left in the posted buffer lies beyond the
                            // transfer's frontier, where the frame for
                            // that range overwrites it.
                            self.stats.rx_truncated += 1;
                        }
                        true
                    }
                    _ => false,
                },
                None => false,
            };
            if placed {
                self.recent_large = PLACE_RECENT;
                self.place_misses = 0;
                continue;
            }
            if (PLACE_MIN..=self.mtu).contains(&len) {
                self.stats.rx_place_misses += 1;
                self.place_misses += 1;
            }
            // The ordinary way, for this datagram (it is first in line).
            shown += self.rx_burst(1, &mut |link, bytes| sink.frame(link, bytes))?;
        }
        if shown < budget {
            shown += self.rx_burst(budget - shown, &mut |link, bytes| sink.frame(link, bytes))?;
        }
        Ok(shown)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        self.tx_links.clear();
        let mut count = 0;
        let mut bad = None;
        while count < BATCH {
            let Some(frame) = source(self.tx.buf_mut(count)) else {
                break;
            };
            match self.links.get(frame.link.0 as usize) {
                Some(link) if frame.len <= self.mtu => {
                    let raw = link.raw;
                    self.tx.prepare_send(count, frame.len, &raw);
                    count += 1;
                    if frame.len >= HEADER_LEN + GATHER_MIN {
                        self.gather_bursts = PLACE_RECENT;
                    }
                }
                Some(_) => {
                    bad = Some(format!(
                        "frame of {} bytes exceeds the MTU of {} bytes; discarded",
                        frame.len, self.mtu
                    ));
                    break;
                }
                None => {
                    bad = Some(format!(
                        "frame for unknown link {}; discarded",
                        frame.link.0
                    ));
                    break;
                }
            }
        }
        let fd = self.socket.as_raw_fd();
        let mut done = 0;
        let mut sent = 0;
        while done < count {
            let result = if self.gso && count - done > 1 {
                match self.tx.send_segmented(fd, done, count, GATHER_MIN - 1) {
                    Ok((k, runs)) => {
                        self.stats.tx_segmented += runs as u64;
                        Ok(k)
                    }
                    Err(SegmentedError::Unsupported) => {
                        // This path cannot segment: one datagram per frame
                        // from now on.
                        self.gso = false;
                        continue;
                    }
                    Err(SegmentedError::Io(e)) => Err(e),
                }
            } else {
                self.tx.send(fd, done, count)
            };
            match result {
                Ok(k) if k > 0 => {
                    done += k;
                    sent += k;
                }
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Socket buffer full: the rest is lost like on a wire.
                    self.stats.tx_dropped += (count - done) as u64;
                    break;
                }
                Err(_) => {
                    // A per-destination error (unreachable network, ...):
                    // drop that frame, keep sending the others.
                    self.stats.tx_dropped += 1;
                    done += 1;
                }
            }
        }
        self.stats.tx_datagrams += sent as u64;
        match bad {
            None => Ok(count),
            Some(reason) => Err(MethodError::Other {
                method: METHOD_NAME,
                reason,
            }),
        }
    }

    fn rx_poll_is_syscall(&self) -> bool {
        true
    }

    /// While large frames are being sent, frames go out one by one: a
    /// large data frame as its header plus the application's bytes in one
    /// gathering `sendmsg` (no copy into a slot), any other frame whole
    /// with `sendto`. Otherwise the batched [`tx_burst`](Method::tx_burst).
    fn tx_burst_gather(&mut self, source: &mut GatherSource<'_>) -> Result<usize, MethodError> {
        if self.gather_bursts == 0 {
            return self.tx_burst(&mut |buf| source(buf, &mut NoGather));
        }
        self.check_open()?;
        self.gather_bursts -= 1;
        let mut out = Gather {
            fd: self.socket.as_raw_fd(),
            links: &self.links,
            stats: &mut self.stats,
            sent: false,
            gathered: false,
        };
        let mut count = 0;
        while count < BATCH {
            let Some(frame) = source(&mut self.single, &mut out) else {
                break;
            };
            count += 1;
            if std::mem::take(&mut out.sent) {
                continue;
            }
            let whole = self.single.get(..frame.len).unwrap_or(&[]);
            out.send_whole(frame.link, whole);
        }
        if out.gathered {
            self.gather_bursts = PLACE_RECENT;
        }
        Ok(count)
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        (!self.closed).then(|| self.socket.as_raw_fd())
    }

    /// Datagrams each way; one too large for the MTU, or from a source that
    /// is not an IP address, is malformed; the kernel's refusals are lost
    /// frames. Foreign datagrams do not exist here: the socket's port is
    /// this endpoint's.
    fn counters(&self) -> MethodCounters {
        let s = self.stats;
        MethodCounters {
            rx_frames: s.rx_datagrams,
            tx_frames: s.tx_datagrams,
            rx_foreign: 0,
            rx_malformed: s.rx_truncated + s.rx_bad_source,
            tx_errors: s.tx_dropped,
            detail: vec![
                ("rx_truncated", s.rx_truncated),
                ("rx_bad_source", s.rx_bad_source),
                ("links_learned", s.links_learned),
                ("tx_gathered", s.tx_gathered),
                ("tx_segmented", s.tx_segmented),
                ("rx_coalesced", s.rx_coalesced),
                ("rx_placed", s.rx_placed),
                ("rx_place_misses", s.rx_place_misses),
            ],
        }
    }

    fn shutdown(&mut self) {
        self.closed = true;
    }
}

/// The udp method's [`GatherSend`] during one burst of
/// [`Method::tx_burst_gather`].
struct Gather<'a> {
    fd: RawFd,
    links: &'a [Link],
    stats: &'a mut UdpStats,
    /// The frame just returned went out through [`GatherSend::send`].
    sent: bool,
    /// Some frame of the burst did.
    gathered: bool,
}

impl Gather<'_> {
    /// Sends `parts` as one datagram to `link`; a failure counts as a
    /// dropped frame (the protocol resends it).
    fn send(&mut self, link: LinkId, parts: [&[u8]; 2]) -> bool {
        let sent = match self.links.get(link.0 as usize) {
            Some(l) => loop {
                match sys::send_parts(self.fd, parts, &l.raw) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r.is_ok(),
                }
            },
            None => false,
        };
        if sent {
            self.stats.tx_datagrams += 1;
        } else {
            self.stats.tx_dropped += 1;
        }
        sent
    }

    /// Sends a frame written whole.
    fn send_whole(&mut self, link: LinkId, frame: &[u8]) {
        self.send(link, [frame, &[]]);
    }
}

impl GatherSend for Gather<'_> {
    fn min_payload(&self) -> usize {
        GATHER_MIN
    }

    fn send(&mut self, link: LinkId, header: &[u8], payload: &[u8]) {
        if Gather::send(self, link, [header, payload]) {
            self.stats.tx_gathered += 1;
        }
        self.sent = true;
        self.gathered = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> UdpMethod {
        UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap()
    }

    fn send(m: &mut UdpMethod, link: LinkId, frames: &[&[u8]]) -> usize {
        let mut it = frames.iter();
        m.tx_burst(&mut |buf| {
            let f = it.next()?;
            buf[..f.len()].copy_from_slice(f);
            Some(TxFrame { link, len: f.len() })
        })
        .unwrap()
    }

    fn recv_all(m: &mut UdpMethod, want: usize) -> Vec<(LinkId, Vec<u8>)> {
        let mut got = Vec::new();
        for _ in 0..10_000 {
            m.rx_burst(BATCH, &mut |l, b| got.push((l, b.to_vec())))
                .unwrap();
            if got.len() >= want {
                break;
            }
            std::thread::yield_now();
        }
        got
    }

    #[test]
    fn frames_cross_in_batches_and_the_sender_gets_a_link() {
        let mut a = open();
        let mut b = open();
        assert!(a.descriptor().to_string().starts_with("udp:127.0.0.1:"));
        let to_b = a.open_link(&b.descriptor()).unwrap();
        assert_eq!(a.open_link(&b.descriptor()).unwrap(), to_b);
        let frames: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 10 + i as usize]).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let mut sent = 0;
        while sent < refs.len() {
            sent += send(&mut a, to_b, &refs[sent..]);
        }
        let got = recv_all(&mut b, 100);
        assert_eq!(got.len(), 100);
        for (i, (link, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes, &frames[i]);
            assert_eq!(b.link_addr(*link), Some(a.local_addr()));
        }
        assert_eq!(b.stats().links_learned, 1);
        // The learned link answers.
        let back = got[0].0;
        send(&mut b, back, &[b"pong"]);
        let c = b.counters();
        assert_eq!(
            (c.rx_frames, c.tx_frames, c.tx_errors),
            (frames.len() as u64, 1, 0)
        );
        let got = recv_all(&mut a, 1);
        assert_eq!(got, vec![(to_b, b"pong".to_vec())]);
    }

    /// Runs of equal frames go to the kernel as segmented sends and come
    /// back coalesced on loopback; every frame arrives whole, in order, and
    /// the runs break where the size grows or the destination changes.
    #[test]
    fn runs_of_equal_frames_are_segmented_and_coalesced_and_arrive_whole() {
        let mut a = open();
        let mut b = open();
        let mut c = open();
        let to_b = a.open_link(&b.descriptor()).unwrap();
        let to_c = a.open_link(&c.descriptor()).unwrap();
        // To b: 40 frames of 1400 bytes, a short one, 30 of 1000, then two
        // growing; to c, in between: 5 of 1400.
        let mut plan: Vec<(LinkId, Vec<u8>)> = Vec::new();
        let mut k = 0u8;
        let mut frame = |len: usize| {
            k = k.wrapping_add(1);
            (0..len).map(|i| k ^ i as u8).collect::<Vec<u8>>()
        };
        for _ in 0..40 {
            plan.push((to_b, frame(1400)));
        }
        plan.push((to_b, frame(77)));
        for _ in 0..5 {
            plan.push((to_c, frame(1400)));
        }
        for _ in 0..30 {
            plan.push((to_b, frame(1000)));
        }
        plan.push((to_b, frame(1200)));
        plan.push((to_b, frame(1300)));
        let mut next = 0;
        while next < plan.len() {
            a.tx_burst(&mut |buf| {
                let (link, f) = plan.get(next)?;
                next += 1;
                buf[..f.len()].copy_from_slice(f);
                Some(TxFrame {
                    link: *link,
                    len: f.len(),
                })
            })
            .unwrap();
        }
        let to = |l: LinkId| plan.iter().filter(move |(x, _)| *x == l);
        let want_b: Vec<Vec<u8>> = to(to_b).map(|(_, f)| f.clone()).collect();
        let want_c: Vec<Vec<u8>> = to(to_c).map(|(_, f)| f.clone()).collect();
        let got_b: Vec<Vec<u8>> = recv_all(&mut b, want_b.len())
            .into_iter()
            .map(|x| x.1)
            .collect();
        let got_c: Vec<Vec<u8>> = recv_all(&mut c, want_c.len())
            .into_iter()
            .map(|x| x.1)
            .collect();
        assert_eq!(got_b, want_b);
        assert_eq!(got_c, want_c);
        // Runs: the 40 and the short one ending them, the 5 to c, the 30
        // (cut in two where a burst of BATCH frames ends); the growing ones
        // go alone.
        assert!(a.stats().tx_segmented >= 3, "{:?}", a.stats());
        assert_eq!(a.stats().tx_datagrams, plan.len() as u64);
        assert!(b.stats().rx_coalesced >= 1, "{:?}", b.stats());
        assert_eq!(b.stats().rx_truncated, 0);
    }

    #[test]
    fn oversized_datagrams_are_dropped_and_counted() {
        let mut b = UdpMethod::open(UdpConfig {
            mtu: Some(100),
            ..UdpConfig::new("127.0.0.1:0".parse().unwrap())
        })
        .unwrap();
        let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
        raw.send_to(&[7u8; 101], b.local_addr()).unwrap();
        raw.send_to(&[7u8; 2000], b.local_addr()).unwrap();
        raw.send_to(&[7u8; 100], b.local_addr()).unwrap();
        let got = recv_all(&mut b, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), 100);
        assert_eq!(b.stats().rx_truncated, 2);
        let c = b.counters();
        assert_eq!((c.rx_frames, c.rx_malformed, c.rx_foreign), (1, 2, 0));
    }

    #[test]
    fn bad_descriptors_are_explained() {
        let mut a = open();
        for (d, why) in [
            ("udp:0.0.0.0:5", "wildcard"),
            ("udp:nonsense", "IP:PORT"),
            ("sim:3", "not \"udp\""),
            ("udp:[::1]:5", "address family"),
        ] {
            let err = a.open_link(&d.parse().unwrap()).unwrap_err().to_string();
            assert!(err.contains(why), "{d}: {err}");
        }
    }

    #[test]
    fn ipv6_works_and_wildcards_are_resolved() {
        let mut a = UdpMethod::open(UdpConfig::new("[::1]:0".parse().unwrap())).unwrap();
        let mut b = UdpMethod::open(UdpConfig::new("[::1]:0".parse().unwrap())).unwrap();
        assert!(b.descriptor().to_string().starts_with("udp:[::1]:"));
        assert_eq!(b.caps().mtu, 1452);
        let l = a.open_link(&b.descriptor()).unwrap();
        send(&mut a, l, &[b"v6"]);
        assert_eq!(recv_all(&mut b, 1)[0].1, b"v6");
        let w = UdpMethod::open(UdpConfig::new("0.0.0.0:0".parse().unwrap())).unwrap();
        assert!(!w.local_addr().ip().is_unspecified());
        assert!(matches!(probe(), Availability::Usable));
    }
}
