//! Detached nodes: an operator's partition.
//!
//! An administrator may take a node out of a job on purpose (it misbehaves,
//! it needs maintenance) and bring it back later, as BCL-3's operators did:
//! [`Port::detach_node`] and [`Port::rejoin_node`]. While a node is
//! detached:
//!
//! - its peers are gone for this port: everything to and from them fails
//!   naming them, and [`Port::poll_peer_event`] reports each known one
//!   [`PeerEvent::Down`](crate::PeerEvent::Down), at once rather than after
//!   the liveness bound;
//! - nothing is exchanged with it: new sends, posted receives and remote
//!   reads naming one of its peers are refused with
//!   [`SendError::NodeDetached`], frames and direct deliveries from it are
//!   dropped and counted (`frames_from_detached`), and nothing is
//!   transmitted to it (not even a ping or an acknowledgement).
//!
//! Detaching the port's *own* node isolates the port from every other node
//! instead (the detached side of the same command); peers on its own node
//! stay reachable.
//!
//! Rejoining lifts the partition and pings the node's known peers (three
//! pings, so one lost frame does not hide a peer): each that answers is
//! reported [`PeerEvent::Up`](crate::PeerEvent::Up) (or `Restarted`, if it
//! is a new process), as after a healed partition, and traffic flows again
//! with each side's sequence state as it was.
//!
//! The set is a short list (an operator detaches a handful of nodes), and
//! every check starts with "is it empty", so a job with no detached node
//! pays one predictable branch per frame.

use super::peer::{Liveness, PeerIdx};
use super::{Port, SendError};
use crate::addr::{NodeId, ProcessAddr};
use crate::time::Time;

/// Pings after the first that a rejoined node's known peers get.
const REJOIN_EXTRA_PINGS: u8 = 2;

/// The nodes cut off from this port.
#[derive(Clone, Debug, Default)]
pub(super) struct Detached {
    /// Nodes detached by name.
    nodes: Vec<NodeId>,
    /// The port's own node is detached: every other node is cut off.
    isolated: bool,
}

impl Detached {
    /// Whether nothing is detached (the common case, checked first).
    #[inline]
    fn is_empty(&self) -> bool {
        !self.isolated && self.nodes.is_empty()
    }
}

impl Port {
    /// Whether frames from or to `addr` are cut off by a detached node.
    #[inline]
    pub(super) fn cut_off(&self, addr: ProcessAddr) -> bool {
        let d = &self.detached;
        !d.is_empty()
            && addr.node != self.cfg.local.node
            && (d.isolated || d.nodes.contains(&addr.node))
    }

    /// [`SendError::NodeDetached`] if `addr` is cut off.
    #[inline]
    pub(super) fn check_not_cut_off(&self, addr: ProcessAddr) -> Result<(), SendError> {
        if self.cut_off(addr) {
            return Err(SendError::NodeDetached(addr));
        }
        Ok(())
    }

    /// Counts a frame or delivery dropped because its sender is cut off.
    pub(super) fn note_from_detached(&mut self) {
        self.stats.frames_from_detached += 1;
    }

    /// Takes `node` out: its known peers are declared gone (reported
    /// `Down` at once) and nothing is exchanged with it until
    /// [`Port::rejoin_node`]. `node` = the port's own node isolates the
    /// port from every other node. Detaching a node twice does nothing more.
    pub fn detach_node(&mut self, now: Time, node: NodeId) {
        if node == self.cfg.local.node {
            self.detached.isolated = true;
        } else if !self.detached.nodes.contains(&node) {
            self.detached.nodes.push(node);
        }
        let gone: Vec<ProcessAddr> = self
            .peers
            .iter()
            .map(|p| p.addr)
            .filter(|&a| self.cut_off(a))
            .collect();
        for addr in gone {
            self.peer_gone(now, addr);
        }
    }

    /// Brings `node` back (the port's own node: ends the isolation): its
    /// known peers are pinged, and each that answers is reported `Up`.
    /// Rejoining a node that is not detached does nothing.
    pub fn rejoin_node(&mut self, now: Time, node: NodeId) {
        let before: Vec<PeerIdx> = (0..self.peers.len() as PeerIdx)
            .filter(|&i| self.cut_off(self.peers[i as usize].addr))
            .collect();
        if node == self.cfg.local.node {
            self.detached.isolated = false;
        } else {
            self.detached.nodes.retain(|&n| n != node);
        }
        for idx in before {
            if self.cut_off(self.peers[idx as usize].addr) {
                continue;
            }
            let p = &mut self.peers[idx as usize];
            if p.route.is_none() || p.reliable {
                continue;
            }
            p.liveness.set(Liveness::PING_NOW, true);
            p.liveness.set_extra_pings(REJOIN_EXTRA_PINGS);
            self.schedule(idx, now);
        }
    }

    /// The nodes detached from this port (its own node if it is isolated
    /// from the others), for tools.
    pub fn detached_nodes(&self) -> Vec<NodeId> {
        let mut v = self.detached.nodes.clone();
        if self.detached.isolated {
            v.push(self.cfg.local.node);
        }
        v
    }
}
