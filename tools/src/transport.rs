//! The message transport the tools measure, whatever carries it: a BCL
//! endpoint over any method, or a baseline (kernel UDP or TCP, a Unix
//! socket, a shared-memory or AF_XDP floor). The timing loops of
//! `bcl-pingpong` and `bcl-bw` are written once against [`Transport`], so
//! BCL and the baselines are measured by the same code. What only some
//! transports can do is a capability: batched sends
//! ([`Transport::send_queued`]) and channels ([`ChannelTransport`]).

use std::time::Instant;

/// A transport failure (not a timeout: waits report those as `Ok(false)`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

impl TransportError {
    /// An error described by `what` and the underlying `cause`.
    pub fn new(what: impl std::fmt::Display, cause: impl std::fmt::Display) -> Self {
        TransportError(format!("{what}: {cause}"))
    }
}

/// What a transport itself counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// Frames resent by the transport's own reliability (BCL only).
    pub retransmits: u64,
    /// Frames dropped as malformed, corrupted or foreign.
    pub bad_frames: u64,
    /// DATA frames sent for the first time (BCL only).
    pub data_frames: u64,
    /// Times congestion control shrank a peer's window (BCL only).
    pub congestion_decreases: u64,
    /// Times new data waited for pacing (BCL only).
    pub pacing_waits: u64,
}

/// Messages to and from one peer.
///
/// A server-side transport learns its peer from the first message it
/// receives; sending before that fails.
pub trait Transport {
    /// Sends `msg`, waiting (until `deadline`) while the transport is full.
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError>;

    /// Waits until `deadline` for the next message and shows it to `f`;
    /// `Ok(false)` if none came in time.
    fn recv(&mut self, deadline: Instant, f: &mut dyn FnMut(&[u8]))
        -> Result<bool, TransportError>;

    /// Looks once for a message and shows it to `f`, without waiting;
    /// `Ok(false)` if none was there. By default a receive whose deadline
    /// has passed (a transport whose receive polls many times before it
    /// reads the clock should look only once).
    fn try_recv(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<bool, TransportError> {
        self.recv(Instant::now(), f)
    }

    /// Waits (until `deadline`) until everything sent has been delivered, as
    /// far as the transport can tell, and keeps serving the protocol
    /// meanwhile. Nothing to do for a transport without a protocol of its
    /// own.
    fn flush(&mut self, _deadline: Instant) -> Result<(), TransportError> {
        Ok(())
    }

    /// The transport's own counters (none by default).
    fn counters(&self) -> TransportCounters {
        TransportCounters::default()
    }

    /// Largest message the transport carries.
    fn max_message(&self) -> usize;

    /// Its rails to the peer, when it stripes over several NICs.
    fn rails(&self) -> Vec<crate::report::RailReport> {
        Vec::new()
    }

    /// Everything the transport counted, for a person (`--stats`).
    fn details(&self) -> String {
        format!("{:?}", self.counters())
    }

    /// Queues `msg` without putting it on the wire yet, so that several
    /// queued small messages can leave together at the next
    /// [`Transport::transmit`]; a transport that cannot batch sends at once.
    fn send_queued(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        self.send(msg, deadline)
    }

    /// Puts what [`Transport::send_queued`] queued on the wire.
    fn transmit(&mut self) -> Result<(), TransportError> {
        Ok(())
    }

    /// The transport's normal and open channels, if it has them (BCL
    /// endpoints; the baselines have none).
    fn channels(&mut self) -> Option<&mut dyn ChannelTransport> {
        None
    }
}

/// A transport that can be moved to another thread.
pub type BoxTransport = Box<dyn Transport + Send>;

/// What [`ChannelTransport::recv_any`] found.
#[derive(Debug)]
pub enum Incoming {
    /// A message on the system channel (shown to the caller's function).
    Message,
    /// A channel event: a completion on a normal or open channel.
    Event(bcl::ChannelEvent),
}

/// A transport with BCL's normal and open channels: the endpoint they are
/// called on, the peer, and a wait for messages and channel events alike.
pub trait ChannelTransport: Transport {
    /// The endpoint.
    fn endpoint(&self) -> &bcl::Endpoint;

    /// The endpoint, for channel calls.
    fn endpoint_mut(&mut self) -> &mut bcl::Endpoint;

    /// The peer: given to a client, learnt by a server from the first
    /// message.
    fn peer(&self) -> Option<bcl::ProcessAddr>;

    /// Waits until `deadline` for the next system-channel message (shown to
    /// `f`) or channel event (returned), whichever comes first; `None` if
    /// nothing came in time.
    fn recv_any(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Incoming>, TransportError>;
}
