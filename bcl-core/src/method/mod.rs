//! The method interface: what a transport backend offers the core.
//!
//! A *method* (Nexus's word) is one way of moving BCL frames between
//! processes: shared memory, AF_XDP, a VFIO-driven NIC, AF_PACKET, UDP, or
//! the simulated fabric. Every method implements [`Method`], the Nexus
//! function table: probe, export a descriptor, open a link to a peer's
//! descriptor, move frames in bursts, report its MTU and guarantees, shut
//! down.
//!
//! Frames cross this interface as bytes that start with the BCL header (see
//! [`crate::wire`]); link-layer framing (Ethernet, UDP/IP) is the method's
//! business. Buffers are *lent*: on receive the method shows the core each
//! frame in place; on transmit it hands the core a buffer of its own (a UMEM
//! frame, a DMA buffer, a shared-memory slot) to write the frame into. The
//! interface is batch-oriented: one call moves a burst of frames.
//!
//! - [`kind`]: what the registry knows of a method before one is open
//!   ([`MethodKind`]: name, scope, probe, open, address grammar).
//! - [`direct`]: the extension for methods that move whole messages and
//!   transfer data, not only frames ([`DirectMethod`]).

pub mod direct;
pub mod kind;

pub use direct::{DirectError, DirectHead, DirectMethod, MessageClass, RxHandler, TransferHost};
pub use kind::{Attachment, MethodKind, OpenSpec, ProbeResult, Scope};

use std::fmt;
use std::os::fd::RawFd;
use std::str::FromStr;

/// A method's handle for one peer it can send to.
///
/// Links are numbered by the method that opened them; the core stores the
/// number with the peer and hands it back on every frame for that peer, so
/// sending never looks anything up by address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// Where the frames for one peer go: which of a port's methods, and which
/// link of that method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// Index of the method in the port's method list.
    pub method: u8,
    /// The link inside that method.
    pub link: LinkId,
}

/// How a process can be reached by one method: the method's name and an
/// address in that method's own syntax.
///
/// The text form is `METHOD:ADDRESS` (for example `udp:10.0.0.2:7000` or
/// `sim:3`), a single token without spaces, so it can be printed by one
/// process and pasted to another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    /// The method's name, as returned by [`Method::name`].
    pub method: String,
    /// The address, parsed only by that method.
    pub address: String,
}

impl Descriptor {
    /// A descriptor for `method` with `address`.
    pub fn new(method: impl Into<String>, address: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            address: address.into(),
        }
    }
}

impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.method, self.address)
    }
}

/// Error from parsing a [`Descriptor`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad descriptor {0:?}: expected METHOD:ADDRESS without spaces, e.g. udp:10.0.0.2:7000")]
pub struct DescriptorParseError(pub String);

impl FromStr for Descriptor {
    type Err = DescriptorParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DescriptorParseError(s.to_string());
        if s.chars().any(char::is_whitespace) {
            return Err(err());
        }
        let (method, address) = s.split_once(':').ok_or_else(err)?;
        if method.is_empty() || address.is_empty() {
            return Err(err());
        }
        Ok(Descriptor::new(method, address))
    }
}

/// What a method guarantees and how large its frames may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodCaps {
    /// Largest BCL frame (header plus payload) the method carries, in bytes.
    /// Link-layer headers are not included.
    pub mtu: usize,
    /// The medium itself guarantees that bytes arrive as sent (shared
    /// memory does; a wire does not, even with an Ethernet FCS, because
    /// veth and software bridges never check one). When true, the core may
    /// leave out its CRC32C.
    pub integrity: bool,
    /// The method never loses, duplicates or reorders frames (shared
    /// memory). When true, the core skips sequence numbers, acknowledgements
    /// and retransmission for links of this method.
    pub reliable: bool,
}

/// Whether a method can be used on this host, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// The method can be opened here.
    Usable,
    /// The method cannot be opened here; the text says why, for a person
    /// (for example "needs CAP_NET_RAW").
    NotUsable(String),
}

impl Availability {
    /// Whether it is [`Availability::Usable`].
    pub fn is_usable(&self) -> bool {
        matches!(self, Availability::Usable)
    }
}

/// A failure inside a method.
#[derive(Debug, thiserror::Error)]
pub enum MethodError {
    /// A descriptor was for another method or its address did not parse.
    #[error("descriptor {descriptor} is not usable by method {method}: {reason}")]
    BadDescriptor {
        /// The method asked to open the link.
        method: &'static str,
        /// The descriptor it was given.
        descriptor: Descriptor,
        /// Why it cannot be used.
        reason: String,
    },
    /// The method cannot run here.
    #[error("method {method} is not usable here: {reason}")]
    NotUsable {
        /// The method.
        method: &'static str,
        /// Why not.
        reason: String,
    },
    /// An operating-system call failed.
    #[error("method {method}: {context}: {source}")]
    Io {
        /// The method.
        method: &'static str,
        /// What the method was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Anything else, described for a person.
    #[error("method {method}: {reason}")]
    Other {
        /// The method.
        method: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// One frame written by the core into a buffer lent by the method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFrame {
    /// The link to send it on.
    pub link: LinkId,
    /// Bytes written at the start of the lent buffer.
    pub len: usize,
}

/// What a method counted, in a shape common to all methods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MethodCounters {
    /// Frames shown to the core (0 where the method leaves counting them to
    /// the core).
    pub rx_frames: u64,
    /// Frames handed to the medium.
    pub tx_frames: u64,
    /// Received frames dropped before the core saw them because they were
    /// not for this endpoint: another destination, another EtherType, our
    /// own outgoing frames.
    pub rx_foreign: u64,
    /// Received frames dropped before the core saw them because they were
    /// malformed: cut short, shorter than a link-layer header, from an
    /// impossible source.
    pub rx_malformed: u64,
    /// Frames lost on the way out (a failed kick, a full device queue).
    pub tx_errors: u64,
    /// Everything else the method counts, by name, for people.
    pub detail: Vec<(&'static str, u64)>,
}

impl MethodCounters {
    /// Frames the method dropped before the core saw them.
    pub fn rx_dropped(&self) -> u64 {
        self.rx_foreign + self.rx_malformed
    }
}

/// What [`Method::rx_burst_placing`] hands received frames to (the engine,
/// in front of [`Port`](crate::port::Port)).
pub trait RxSink {
    /// A whole frame, `bytes` starting at the BCL header, from `link`; as
    /// the sink of [`Method::rx_burst`].
    fn frame(&mut self, link: LinkId, bytes: &[u8]);

    /// Where the payload of the frame from `link` whose header (exactly
    /// [`HEADER_LEN`](crate::wire::HEADER_LEN) bytes) is `header` should be
    /// written, or `None` to receive it whole and hand it to
    /// [`frame`](RxSink::frame). The slice is exactly the payload's length
    /// as the header states it.
    fn placement(&mut self, link: LinkId, header: &[u8]) -> Option<&mut [u8]>;

    /// The frame from `link` with header `header` had its whole payload
    /// written where [`placement`](RxSink::placement) said, and nothing
    /// else was read in between. A frame whose payload did not arrive
    /// whole there must go to [`frame`](RxSink::frame) instead.
    fn placed(&mut self, link: LinkId, header: &[u8]);
}

/// How a method sends a frame in two pieces during
/// [`Method::tx_burst_gather`].
pub trait GatherSend {
    /// The smallest payload worth sending from where it lies (below it, a
    /// copy into the frame buffer is cheaper than the scattered send);
    /// `usize::MAX` when the method cannot now.
    fn min_payload(&self) -> usize;

    /// Sends to `link`, now and in order with the frames of this burst
    /// before it, the frame made of `header` followed by `payload`.
    /// Failures count as the method's transmit errors (the frame is lost;
    /// the protocol recovers it).
    fn send(&mut self, link: LinkId, header: &[u8], payload: &[u8]);
}

/// What [`Method::tx_burst_gather`] calls for each frame: the core, given
/// a frame buffer and the method's [`GatherSend`].
pub type GatherSource<'a> = dyn FnMut(&mut [u8], &mut dyn GatherSend) -> Option<TxFrame> + 'a;

/// A [`GatherSend`] that never gathers.
pub struct NoGather;

impl GatherSend for NoGather {
    fn min_payload(&self) -> usize {
        usize::MAX
    }

    fn send(&mut self, _link: LinkId, _header: &[u8], _payload: &[u8]) {}
}

/// Turns a boxed method into `Box<dyn Method>`; implemented for every
/// method, so that [`Method::into_direct`] has a default.
pub trait IntoBoxedMethod {
    /// `self` as a `Box<dyn Method>`.
    fn into_boxed_method(self: Box<Self>) -> Box<dyn Method>;
}

impl<M: Method> IntoBoxedMethod for M {
    fn into_boxed_method(self: Box<Self>) -> Box<dyn Method> {
        self
    }
}

/// A transport backend (see the module documentation).
///
/// All calls are non-blocking. A progress engine calls
/// [`rx_burst`](Method::rx_burst) and [`tx_burst`](Method::tx_burst) in a
/// loop (busy polling) or sleeps on [`readiness_fd`](Method::readiness_fd)
/// between rounds (blocking mode). `Any` lets an application reach its
/// method's own interface by type (counters, settings); the engine never
/// does: what only some methods can do is an extension trait
/// ([`DirectMethod`]) that a method hands over with
/// [`into_direct`](Method::into_direct).
pub trait Method: std::any::Any + Send + IntoBoxedMethod {
    /// The method's name: `sim`, `shm`, `afxdp`, `vfio`, `packet` or `udp`.
    fn name(&self) -> &'static str;

    /// Frame size and guarantees of this method.
    fn caps(&self) -> MethodCaps;

    /// This endpoint's own address, to be published to peers.
    fn descriptor(&self) -> Descriptor;

    /// Prepares sending to the peer at `peer` and returns the link to use.
    /// Opening the same descriptor twice returns the same link.
    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError>;

    /// Shows the core up to `budget` received frames, each in place.
    ///
    /// `sink` is called once per frame with the link of its sender (the
    /// method allocates a link the first time it hears from a new source,
    /// so the core can answer) and the frame's bytes starting at the BCL
    /// header. The bytes are valid only during the call. Returns the number
    /// of frames shown.
    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError>;

    /// [`rx_burst`](Method::rx_burst) for a method that can read a frame's
    /// header before its payload: for each frame it may ask
    /// [`RxSink::placement`] where the payload belongs, read it straight
    /// there and report [`RxSink::placed`]; other frames go to
    /// [`RxSink::frame`] as in `rx_burst`. The default never asks.
    fn rx_burst_placing(
        &mut self,
        budget: usize,
        sink: &mut dyn RxSink,
    ) -> Result<usize, MethodError> {
        self.rx_burst(budget, &mut |link, bytes| sink.frame(link, bytes))
    }

    /// Lends transmit buffers to the core until it has nothing more to send
    /// or the method runs out of buffers, then sends them as one batch.
    ///
    /// `source` is called with a buffer of at least [`MethodCaps::mtu`]
    /// bytes; it writes a frame at the start and returns where to send it,
    /// or returns `None` when it has nothing more to send (the buffer is
    /// then unused). Returns the number of frames sent.
    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError>;

    /// [`tx_burst`](Method::tx_burst) for a method that can send a frame
    /// from two pieces (a scattered send): `source` gets, besides the
    /// buffer, a [`GatherSend`] through which the core may send a frame as
    /// a header written in that buffer followed by a payload sent from
    /// where it lies (the application's buffer), instead of copying it in.
    /// `source` returns the frame either way; one that went through
    /// [`GatherSend::send`] is not to be sent again. The default never
    /// offers it.
    fn tx_burst_gather(&mut self, source: &mut GatherSource<'_>) -> Result<usize, MethodError> {
        self.tx_burst(&mut |buf| source(buf, &mut NoGather))
    }

    /// A file descriptor that becomes readable when frames arrive, for the
    /// blocking mode of a progress engine; `None` if the method can only be
    /// polled.
    fn readiness_fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether polling for received frames costs a system call (kernel
    /// sockets), rather than a look at memory the kernel or the NIC writes
    /// (packet rings, AF_XDP, VFIO, shared memory). A busy-polling engine
    /// polls such a method less often while it is idle, so that a port with
    /// shared-memory and network peers is not slowed by the slower method.
    fn rx_poll_is_syscall(&self) -> bool {
        false
    }

    /// Called by a blocking progress engine before it sleeps on
    /// [`readiness_fd`](Method::readiness_fd): arm whatever makes peers wake
    /// us, then re-check for work. Return false if there is work (then the
    /// engine does not sleep). Either way [`finish_wait`](Method::finish_wait)
    /// follows.
    fn prepare_wait(&mut self) -> bool {
        true
    }

    /// Called after the sleep that [`prepare_wait`](Method::prepare_wait)
    /// prepared (or after deciding not to sleep).
    fn finish_wait(&mut self) {}

    /// What the method counted.
    fn counters(&self) -> MethodCounters {
        MethodCounters::default()
    }

    /// How the method was set up, one line each, for people (attach mode,
    /// queues, fallbacks taken and why).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// The method as a [`DirectMethod`] if it is one (it then overrides
    /// this with `Ok(self)`), else itself back. An engine asks once, when
    /// the method is added, and keeps whichever it got.
    fn into_direct(self: Box<Self>) -> Result<Box<dyn DirectMethod>, Box<dyn Method>> {
        Err(self.into_boxed_method())
    }

    /// Releases the method's resources. Further calls may fail.
    fn shutdown(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_text_form_round_trips() {
        let d: Descriptor = "udp:10.0.0.2:7000".parse().unwrap();
        assert_eq!(d.method, "udp");
        assert_eq!(d.address, "10.0.0.2:7000");
        assert_eq!(d.to_string(), "udp:10.0.0.2:7000");
        assert!("udp".parse::<Descriptor>().is_err());
        assert!(":x".parse::<Descriptor>().is_err());
        assert!("udp: 1".parse::<Descriptor>().is_err());
    }
}
