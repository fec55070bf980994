//! Liveness per node: one heartbeat per node pair instead of one per
//! process pair.
//!
//! A port on its own watches each peer it depends on separately (see
//! `liveness`): with many processes per node that is a ping per process
//! pair. Given a [`NodeLiveness`] — what the job's processes of this node
//! share (the endpoint's node board) — it watches *nodes* instead:
//!
//! - **A node vouches for its processes.** Every answer to a ping carries
//!   the answering node's live ports ([`flags::NODE`]: a bitmap of ports
//!   0..127 whose process exists and is not stopped, as that node's board
//!   says). The view is shared by every process of the receiving node.
//! - **A silent watched peer** is alive as of the arrival of a view of its
//!   node, newer than its silence, that lists it (a peer on this node: if
//!   this node's own board lists it, no ping at all). Not listed (its
//!   process is gone or stopped), it is pinged itself and its silence goes
//!   on to the verdict as before, so a stopped process is declared dead
//!   only after the same bound.
//! - **One ping per node pair.** A silent peer without a view of its node
//!   newer than half a period makes its node want one; the port then pings
//!   *one* watched peer of that node (one its last view lists live, not the
//!   one pinged last if that one never answered, then the one heard from
//!   last), and only if no process of this node pinged that node within
//!   the last period ([`NodeLiveness::take_ping`]). If views of a node stop
//!   arriving for two periods (the process that took the turn pings one
//!   that is gone), every process pings again, each its own choice, so a
//!   dead representative cannot hide live ones.
//! - A node that never sent a view (no board there), ports from 128 up,
//!   and every peer when the verdict comes after fewer than three periods,
//!   are watched per process as without node liveness: views arrive once a
//!   period, and a turn spent pinging a peer that just died costs its node
//!   a view, so with two periods to the verdict its live neighbours' next
//!   view would come at the verdict's instant (on two lab nodes, a false
//!   death in 11 runs of 100).
//!
//! [`flags::NODE`]: crate::wire::flags::NODE

use crate::addr::NodeId;
use crate::time::Time;
use crate::wire::NODE_VIEW_LEN;
use std::time::Duration;

/// Ports a node's view covers: 0..NODE_PORTS.
pub const NODE_PORTS: u16 = 128;

/// Live ports of a node: bit `p % 64` of word `p / 64` is port `p`.
pub type LivePorts = [u64; 2];

/// What the job's processes of one node share about liveness (see the
/// module documentation). Times are the port's.
pub trait NodeLiveness: Send {
    /// This node's live ports now.
    fn local_live(&mut self, now: Time) -> LivePorts;
    /// The last view of `node`: when it arrived and its live ports.
    fn view(&self, node: NodeId, now: Time) -> Option<(Time, LivePorts)>;
    /// A view of `node` arrived now.
    fn set_view(&mut self, node: NodeId, live: LivePorts, now: Time);
    /// Whether this process pings `node` now, at its port `port`: true if
    /// no process of this node did within `period` (the turn is then this
    /// process's, and `port` is remembered as the one pinged).
    fn take_ping(&mut self, node: NodeId, now: Time, period: Duration, port: u16) -> bool;
    /// The port of `node` pinged last, if no view of `node` arrived since
    /// (it did not answer: another is pinged next).
    fn unanswered(&self, node: NodeId) -> Option<u16>;
}

/// Whether `port` is set in `live` (false from [`NODE_PORTS`] up).
pub fn is_live(live: &LivePorts, port: u16) -> bool {
    port < NODE_PORTS && live[usize::from(port / 64)] & (1 << (port % 64)) != 0
}

/// The wire form of a view (after an ACK frame's body).
pub fn encode_view(live: &LivePorts) -> [u8; NODE_VIEW_LEN] {
    let mut b = [0u8; NODE_VIEW_LEN];
    b[..8].copy_from_slice(&live[0].to_le_bytes());
    b[8..].copy_from_slice(&live[1].to_le_bytes());
    b
}

/// A view from its wire form; `None` if too short.
pub fn decode_view(bytes: &[u8]) -> Option<LivePorts> {
    let b = bytes.get(..NODE_VIEW_LEN)?;
    Some([
        u64::from_le_bytes(b[..8].try_into().ok()?),
        u64::from_le_bytes(b[8..].try_into().ok()?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip_and_ports_beyond_the_view_are_not_live() {
        let live: LivePorts = [1 | 1 << 63, 1 << 1];
        let back = decode_view(&encode_view(&live)).unwrap();
        assert_eq!(back, live);
        assert!(is_live(&back, 0) && is_live(&back, 63) && is_live(&back, 65));
        assert!(!is_live(&back, 1) && !is_live(&back, 64));
        assert!(!is_live(&[u64::MAX; 2], 128));
        assert_eq!(decode_view(&[0; 15]), None);
    }
}
