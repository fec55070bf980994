//! The message transport the tools measure, whatever carries it: a BCL
//! endpoint over any method, or a kernel UDP or TCP socket. The timing loops
//! of `bcl-pingpong` and `bcl-bw` are written once against [`Transport`], so
//! BCL and the kernel baselines are measured by the same code.

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

    /// Waits (until `deadline`) until everything sent has been delivered, as
    /// far as the transport can tell, and keeps serving the protocol
    /// meanwhile.
    fn flush(&mut self, deadline: Instant) -> Result<(), TransportError>;

    /// The transport's own counters.
    fn counters(&self) -> TransportCounters;

    /// Largest message the transport carries.
    fn max_message(&self) -> usize;

    /// Everything the transport counted, for a person (`--stats`).
    fn details(&self) -> String {
        format!("{:?}", self.counters())
    }

    /// The BCL endpoint behind this transport, if it is one: its normal and
    /// open channels carry `bcl-bw --channel normal|open` (the kernel
    /// baselines have no channels).
    fn bcl(&mut self) -> Option<&mut crate::bcl_transport::BclTransport> {
        None
    }

    /// Whether this is a BCL endpoint (with normal and open channels), not
    /// a baseline.
    fn has_channels(&self) -> bool {
        false
    }
}
