//! Statistics counters, per port and per peer.

use crate::wire::FrameError;

/// Frames dropped before delivery, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BadFrames {
    /// Shorter than a header.
    pub truncated: u64,
    /// Unknown version.
    pub bad_version: u64,
    /// Unknown frame type, or a type this port does not handle yet.
    pub bad_type: u64,
    /// Unknown flag bits.
    pub bad_flags: u64,
    /// Inconsistent lengths or message fields.
    pub bad_length: u64,
    /// CRC32C mismatch.
    pub bad_checksum: u64,
    /// No CRC32C where one is required.
    pub missing_checksum: u64,
    /// Another job's frame.
    pub wrong_job: u64,
    /// Addressed to another process.
    pub wrong_destination: u64,
    /// A sequence number outside the receive window.
    pub out_of_window: u64,
    /// An acknowledgement for frames never sent, or a malformed ACK body.
    pub bad_ack: u64,
    /// From a new peer beyond the peer limit.
    pub too_many_peers: u64,
    /// A bundle with inconsistent header fields or records, or a record
    /// longer than the eager limit.
    pub bad_bundle: u64,
    /// From an older incarnation of the sender (a process that has since
    /// restarted), or an older stream generation of the current one.
    pub stale: u64,
}

impl BadFrames {
    /// Total of all reasons.
    pub fn total(&self) -> u64 {
        self.truncated
            + self.bad_version
            + self.bad_type
            + self.bad_flags
            + self.bad_length
            + self.bad_checksum
            + self.missing_checksum
            + self.wrong_job
            + self.wrong_destination
            + self.out_of_window
            + self.bad_ack
            + self.too_many_peers
            + self.bad_bundle
            + self.stale
    }

    /// Counts one frame rejected by the parser.
    pub fn count(&mut self, e: FrameError) {
        let c = match e {
            FrameError::Truncated(_) => &mut self.truncated,
            FrameError::BadVersion(_) => &mut self.bad_version,
            FrameError::BadType(_) => &mut self.bad_type,
            FrameError::BadFlags(_) => &mut self.bad_flags,
            FrameError::BadLength => &mut self.bad_length,
            FrameError::BadChecksum => &mut self.bad_checksum,
            FrameError::MissingChecksum => &mut self.missing_checksum,
            FrameError::WrongJob(_) => &mut self.wrong_job,
            FrameError::WrongDestination => &mut self.wrong_destination,
            FrameError::BadBundle => &mut self.bad_bundle,
        };
        *c += 1;
    }
}

/// Counters of one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to methods.
    pub frames_sent: u64,
    /// Frames received that passed validation.
    pub frames_received: u64,
    /// DATA frames sent for the first time.
    pub data_frames_sent: u64,
    /// DATA frames sent again.
    pub retransmits: u64,
    /// ACK frames sent (not counting acknowledgements piggybacked on data).
    pub acks_sent: u64,
    /// NAK frames sent.
    pub naks_sent: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// DATA frames received again and dropped.
    pub duplicates: u64,
    /// DATA frames judged lost by time and sequence (a later-sent frame
    /// arrived and the reordering window passed), and so resent.
    pub frames_judged_lost: u64,
    /// Duplicates the peers reported in their acknowledgements: frames
    /// resent that had arrived after all (or copies the network made).
    pub duplicates_reported: u64,
    /// Times congestion control shrank a peer's window (queueing delay over
    /// the target, a loss, a timeout).
    pub congestion_decreases: u64,
    /// Times a loss decrease was undone: the resent frames were reported
    /// as duplicates (they had only been late).
    pub congestion_undos: u64,
    /// Times new data had to wait for pacing.
    pub pacing_waits: u64,
    /// Pings sent to watched peers that had been silent for a liveness
    /// period.
    pub pings_sent: u64,
    /// Peers declared dead after the liveness bound of silence.
    pub peers_declared_dead: u64,
    /// Peers heard from in a new incarnation (their process restarted).
    pub peers_restarted: u64,
    /// Frames and direct deliveries dropped because their sender's node
    /// is detached (an operator's partition, `Port::detach_node`).
    pub frames_from_detached: u64,
    /// Times a rail of a multi-rail peer was taken out of service (its
    /// link reported down, or its frames unacknowledged while others
    /// delivered).
    pub rails_down: u64,
    /// Times a rail out of service came back (a frame arrived on it).
    pub rails_up: u64,
    /// Pings sent on rails out of service to see whether they are back.
    pub rail_probes: u64,
    /// DATA frames dropped because the ring was full.
    pub ring_full_drops: u64,
    /// NAK(ring full) received: times this port had to back off.
    pub ring_full_backoffs: u64,
    /// Frames or messages a reliable method (shared memory) offered while
    /// the ring was full: refused for now, kept by the method and offered
    /// again (back-pressure, not loss).
    pub rx_backpressure: u64,
    /// Times this port dropped a peer's out-of-order messages to make room
    /// for the one it needed next.
    pub reneged: u64,
    /// DATA frames sent carrying a bundle of messages (first sending only).
    pub bundles_sent: u64,
    /// Messages that travelled in those bundles (so `messages_sent` minus
    /// this went one per frame).
    pub messages_bundled: u64,
    /// Bundle frames received and taken (each once).
    pub bundles_received: u64,
    /// Messages accepted by `send`.
    pub messages_sent: u64,
    /// Messages acknowledged end to end.
    pub messages_completed: u64,
    /// Messages that failed (peer unreachable).
    pub messages_failed: u64,
    /// Messages delivered into the ring and announced.
    pub messages_delivered: u64,
    /// Messages received in full into buffers posted on normal channels.
    pub transfers_received: u64,
    /// Frames of transfers nobody waited for (cancelled), dropped.
    pub transfer_frames_dropped: u64,
    /// Events put in the channel-event queue.
    pub channel_events: u64,
    /// Frames dropped, by reason.
    pub bad_frames: BadFrames,
}

/// Counters of one peer, kept in the peer's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Frames sent to the peer.
    pub frames_sent: u64,
    /// Valid frames received from it.
    pub frames_received: u64,
    /// Bytes of the frames sent to it (BCL header and payload, as handed
    /// to the method).
    pub bytes_sent: u64,
    /// Bytes of the valid frames received from it (BCL header and
    /// payload).
    pub bytes_received: u64,
    /// DATA frames resent to it.
    pub retransmits: u64,
    /// Duplicate DATA frames from it, dropped.
    pub duplicates: u64,
    /// Its DATA frames dropped because the ring was full.
    pub ring_full_drops: u64,
}
