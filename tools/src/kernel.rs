//! The kernel baselines: [`Transport`]s over plain kernel UDP and TCP
//! sockets, measured by the same timing code as BCL.
//!
//! Both come in the tools' two modes: **busy-poll** (non-blocking socket,
//! spinning on `recv`/`send` until they succeed) and **blocking** (blocking
//! calls). TCP runs with `TCP_NODELAY`.
//!
//! Framing: on TCP every message is preceded by its length (4 bytes, little
//! endian). On UDP a message travels as one datagram when it fits (up to
//! 65495 bytes) and as several otherwise; every datagram starts with a
//! 12-byte chunk header (message number, offset, total length, little
//! endian). A message with a lost chunk is never shown (the receiver counts
//! it as lost implicitly: it just does not arrive).

use crate::transport::{Transport, TransportCounters, TransportError};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Largest UDP payload (IPv4).
const MAX_DATAGRAM: usize = 65_507;
/// Chunk header of kernel-udp datagrams.
const CHUNK_HEADER: usize = 12;
/// Largest message either baseline accepts.
const MAX_MESSAGE: usize = 1 << 30;
/// How long a blocking call sleeps before the deadline is checked again.
const BLOCKING_SLICE: Duration = Duration::from_millis(50);

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Kernel UDP: datagrams to one peer.
pub struct KernelUdp {
    sock: UdpSocket,
    peer: Option<SocketAddr>,
    busy: bool,
    rx: Vec<u8>,
    tx: Vec<u8>,
    next_msg: u32,
    /// Message being reassembled: number, total length, bytes so far.
    assembling: Option<(u32, usize, usize)>,
    assembly: Vec<u8>,
    bad: u64,
}

impl KernelUdp {
    /// A socket bound to `bind`, sending to `peer` (a server learns its peer
    /// from the first datagram).
    pub fn open(
        bind: SocketAddr,
        peer: Option<SocketAddr>,
        busy: bool,
    ) -> Result<Self, TransportError> {
        let sock =
            UdpSocket::bind(bind).map_err(|e| TransportError::new(format!("bind {bind}"), e))?;
        if busy {
            sock.set_nonblocking(true)
        } else {
            sock.set_read_timeout(Some(BLOCKING_SLICE))
        }
        .map_err(|e| TransportError::new("socket mode", e))?;
        // The same 4 MiB buffers as BCL's udp method, for a fair baseline
        // (the privileged variant ignores the system limit; best effort).
        {
            use nix::sys::socket::{setsockopt, sockopt};
            let size = 4usize << 20;
            if setsockopt(&sock, sockopt::RcvBufForce, &size).is_err() {
                let _ = setsockopt(&sock, sockopt::RcvBuf, &size);
            }
            if setsockopt(&sock, sockopt::SndBufForce, &size).is_err() {
                let _ = setsockopt(&sock, sockopt::SndBuf, &size);
            }
        }
        Ok(KernelUdp {
            sock,
            peer,
            busy,
            rx: vec![0; MAX_DATAGRAM + 1],
            tx: vec![0; MAX_DATAGRAM],
            next_msg: 0,
            assembling: None,
            assembly: Vec::new(),
            bad: 0,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.sock
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl Transport for KernelUdp {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let peer = self
            .peer
            .ok_or_else(|| TransportError("no peer yet: nothing received".into()))?;
        let n = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1);
        let chunk = MAX_DATAGRAM - CHUNK_HEADER;
        let mut offset = 0;
        loop {
            let len = (msg.len() - offset).min(chunk);
            self.tx[..4].copy_from_slice(&n.to_le_bytes());
            self.tx[4..8].copy_from_slice(&(offset as u32).to_le_bytes());
            self.tx[8..12].copy_from_slice(&(msg.len() as u32).to_le_bytes());
            self.tx[CHUNK_HEADER..CHUNK_HEADER + len].copy_from_slice(&msg[offset..offset + len]);
            loop {
                match self.sock.send_to(&self.tx[..CHUNK_HEADER + len], peer) {
                    Ok(_) => break,
                    Err(e) if would_block(&e) || e.kind() == ErrorKind::ConnectionRefused => {
                        if Instant::now() >= deadline {
                            return Err(TransportError::new("send", "timed out"));
                        }
                    }
                    Err(e) => return Err(TransportError::new("sendto", e)),
                }
            }
            offset += len;
            if offset >= msg.len() {
                return Ok(());
            }
        }
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        loop {
            let (len, from) = match self.sock.recv_from(&mut self.rx) {
                Ok(x) => x,
                Err(e) if would_block(&e) || e.kind() == ErrorKind::ConnectionRefused => {
                    if Instant::now() >= deadline {
                        return Ok(false);
                    }
                    if self.busy {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                Err(e) => return Err(TransportError::new("recvfrom", e)),
            };
            if self.peer.is_none() {
                self.peer = Some(from);
            }
            if !(CHUNK_HEADER..=MAX_DATAGRAM).contains(&len) {
                self.bad += 1;
                continue;
            }
            let word =
                |i: usize| u32::from_le_bytes(self.rx[i..i + 4].try_into().unwrap_or_default());
            let (n, offset, total) = (word(0), word(4) as usize, word(8) as usize);
            let data_len = len - CHUNK_HEADER;
            if total > MAX_MESSAGE || offset + data_len > total {
                self.bad += 1;
                continue;
            }
            if offset == 0 && data_len == total {
                self.assembling = None;
                f(&self.rx[CHUNK_HEADER..len]);
                return Ok(true);
            }
            if offset == 0 {
                self.assembly.resize(total, 0);
                self.assembling = Some((n, total, 0));
            }
            match self.assembling {
                Some((m, t, got)) if m == n && t == total && got == offset => {
                    self.assembly[offset..offset + data_len]
                        .copy_from_slice(&self.rx[CHUNK_HEADER..len]);
                    if got + data_len == total {
                        self.assembling = None;
                        f(&self.assembly[..total]);
                        return Ok(true);
                    }
                    self.assembling = Some((m, t, got + data_len));
                }
                // A chunk of a message whose start was lost, or out of
                // order: that message is lost.
                _ => self.assembling = None,
            }
        }
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            retransmits: 0,
            bad_frames: self.bad,
            data_frames: 0,
            ..Default::default()
        }
    }

    fn max_message(&self) -> usize {
        MAX_MESSAGE
    }
}

/// Puts a stream socket in the tools' mode: non-blocking for busy-poll,
/// else blocking calls that return every [`BLOCKING_SLICE`] so deadlines
/// are checked.
fn stream_mode(
    busy: bool,
    set_nonblocking: impl Fn(bool) -> std::io::Result<()>,
    set_timeouts: impl Fn(Option<Duration>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    set_nonblocking(busy)?;
    if busy {
        Ok(())
    } else {
        set_timeouts(Some(BLOCKING_SLICE))
    }
}

/// A byte stream a [`KernelTcp`] runs over.
trait ByteStream: Read + Write + Send {}
impl<T: Read + Write + Send> ByteStream for T {}

/// Kernel TCP with `TCP_NODELAY`: length-prefixed messages on one
/// connection. Also runs over a Unix-domain stream socket (the `unix`
/// baseline, [`KernelTcp::over_unix`]).
pub struct KernelTcp {
    stream: Box<dyn ByteStream>,
    busy: bool,
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
}

/// A TCP listener waiting for the one connection of a run.
pub struct TcpServer {
    listener: TcpListener,
}

impl TcpServer {
    /// Listens on `bind`.
    pub fn bind(bind: SocketAddr) -> Result<Self, TransportError> {
        let listener = TcpListener::bind(bind)
            .map_err(|e| TransportError::new(format!("listen on {bind}"), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TransportError::new("listener mode", e))?;
        Ok(TcpServer { listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Waits until `deadline` for the client.
    pub fn accept(self, busy: bool, deadline: Instant) -> Result<KernelTcp, TransportError> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => return KernelTcp::new(stream, busy),
                Err(e) if would_block(&e) => {
                    if Instant::now() >= deadline {
                        return Err(TransportError("no client connected in time".into()));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(TransportError::new("accept", e)),
            }
        }
    }
}

impl KernelTcp {
    /// Connects to `server`, retrying until `deadline`.
    pub fn connect(
        server: SocketAddr,
        busy: bool,
        deadline: Instant,
    ) -> Result<Self, TransportError> {
        loop {
            match TcpStream::connect_timeout(&server, Duration::from_secs(1)) {
                Ok(s) => return KernelTcp::new(s, busy),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(TransportError::new(format!("connect to {server}"), e)),
            }
        }
    }

    fn new(stream: TcpStream, busy: bool) -> Result<Self, TransportError> {
        stream
            .set_nodelay(true)
            .and_then(|()| {
                stream_mode(
                    busy,
                    |nb| stream.set_nonblocking(nb),
                    |t| {
                        stream.set_read_timeout(t)?;
                        stream.set_write_timeout(t)
                    },
                )
            })
            .map_err(|e| TransportError::new("TCP socket options", e))?;
        Ok(Self::framed(Box::new(stream), busy))
    }

    /// The same length-prefixed messages over a connected Unix-domain stream
    /// socket.
    pub fn over_unix(
        stream: std::os::unix::net::UnixStream,
        busy: bool,
    ) -> Result<Self, TransportError> {
        stream_mode(
            busy,
            |nb| stream.set_nonblocking(nb),
            |t| {
                stream.set_read_timeout(t)?;
                stream.set_write_timeout(t)
            },
        )
        .map_err(|e| TransportError::new("Unix socket options", e))?;
        Ok(Self::framed(Box::new(stream), busy))
    }

    fn framed(stream: Box<dyn ByteStream>, busy: bool) -> Self {
        KernelTcp {
            stream,
            busy,
            inbuf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
            out: Vec::new(),
        }
    }

    /// A complete message in the input buffer, as (start, len).
    fn buffered(&self) -> Option<(usize, usize)> {
        let avail = self.end - self.start;
        if avail < 4 {
            return None;
        }
        let len =
            u32::from_le_bytes(self.inbuf[self.start..self.start + 4].try_into().ok()?) as usize;
        (avail >= 4 + len).then_some((self.start + 4, len))
    }
}

impl Transport for KernelTcp {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        self.out.clear();
        self.out
            .extend_from_slice(&(msg.len() as u32).to_le_bytes());
        self.out.extend_from_slice(msg);
        let mut done = 0;
        while done < self.out.len() {
            match self.stream.write(&self.out[done..]) {
                Ok(0) => return Err(TransportError("connection closed".into())),
                Ok(n) => done += n,
                Err(e) if would_block(&e) => {
                    if Instant::now() >= deadline {
                        return Err(TransportError::new("send", "timed out"));
                    }
                }
                Err(e) => return Err(TransportError::new("send", e)),
            }
        }
        Ok(())
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        loop {
            if let Some((at, len)) = self.buffered() {
                f(&self.inbuf[at..at + len]);
                self.start = at + len;
                return Ok(true);
            }
            // Make room: move what is left to the front, grow for big messages.
            if self.start > 0 {
                self.inbuf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end >= 4 {
                let len =
                    u32::from_le_bytes(self.inbuf[..4].try_into().unwrap_or_default()) as usize;
                if len > MAX_MESSAGE {
                    return Err(TransportError(format!("message of {len} bytes announced")));
                }
                if 4 + len > self.inbuf.len() {
                    self.inbuf.resize(4 + len, 0);
                }
            }
            match self.stream.read(&mut self.inbuf[self.end..]) {
                Ok(0) => return Err(TransportError("connection closed by the peer".into())),
                Ok(n) => self.end += n,
                Err(e) if would_block(&e) => {
                    if Instant::now() >= deadline {
                        return Ok(false);
                    }
                    if self.busy {
                        std::hint::spin_loop();
                    }
                }
                Err(e) => return Err(TransportError::new("recv", e)),
            }
        }
    }

    fn max_message(&self) -> usize {
        MAX_MESSAGE
    }
}
