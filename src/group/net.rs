//! Groups over the network: a [`GroupNode`] driven over a [`Messenger`].
//!
//! [`GroupEndpoint`] owns the process's messenger and its group layer. All
//! group traffic of the process travels under one messenger context,
//! [`GROUP_CONTEXT`], outside the range communicators use, so it never
//! mixes with their messages; the group number in the group header tells
//! the groups apart, and one context keeps everything between two
//! processes in one ordered stream (a welcome or a view change is never
//! overtaken by the data that depends on it). The adapter keeps one
//! receive posted per peer, hands what arrives to the group layer, sends
//! what it produces, reports peers the messenger gave up on as
//! unreachable, and runs the timers at the endpoint's time.
//!
//! The root's multicast is done here as a software fan-out: one unicast
//! per member. This is where an Ethernet multicast group would plug in for
//! the methods that can send one frame to many (`packet`, `afxdp`,
//! `vfio`): a [`Transmit::Multicast`] carries the group and its members, so
//! a method with a multicast MAC for the group would send it once. That
//! path is not built; a lossy multicast would also need the parent to
//! resend on the tree link what a child did not acknowledge in time.

use super::node::{Event, GroupConfig, GroupError, GroupNode, Transmit};
use super::wire::ReduceOp;
use super::GroupId;
use crate::coll::messenger::{Messenger, RecvId, SendId};
use crate::coll::CollError;
use bcl_core::{ProcessAddr, Time};
use std::collections::{BTreeMap, BTreeSet};

/// The messenger context of all group traffic (the top bit marks the
/// group layer's range; communicators use small context ids).
pub const GROUP_CONTEXT: u32 = 0x8000_0000;

/// The messenger tag of group traffic.
const TAG: u64 = 0;

/// Counters of a [`GroupEndpoint`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages handed to the messenger.
    pub sent: u64,
    /// Copies sent for the root's multicast (the fan-out).
    pub fanout: u64,
    /// Messages received.
    pub received: u64,
    /// Messages not sent because their peer is unreachable.
    pub to_unreachable: u64,
    /// Messages the messenger refused for another reason, dropped.
    pub send_errors: u64,
}

/// A process's groups over its messenger (see the module documentation).
pub struct GroupEndpoint {
    msg: Messenger,
    node: GroupNode,
    recvs: BTreeMap<ProcessAddr, RecvId>,
    sends: Vec<SendId>,
    down: BTreeSet<ProcessAddr>,
    stats: NetStats,
}

impl GroupEndpoint {
    /// Groups over `msg`, which talks to `peers` (the job's processes;
    /// this process may be among them); the job's registry runs at
    /// `registry`.
    pub fn new(
        msg: Messenger,
        peers: &[ProcessAddr],
        registry: ProcessAddr,
        cfg: GroupConfig,
    ) -> Result<GroupEndpoint, CollError> {
        let me = msg.local();
        let mut ge = GroupEndpoint {
            node: GroupNode::new(me, registry, cfg),
            msg,
            recvs: BTreeMap::new(),
            sends: Vec::new(),
            down: BTreeSet::new(),
            stats: NetStats::default(),
        };
        for &p in peers {
            ge.add_peer(p)?;
        }
        Ok(ge)
    }

    /// Listens to `peer` too (a process that joined the job later).
    pub fn add_peer(&mut self, peer: ProcessAddr) -> Result<(), CollError> {
        if peer != self.msg.local() && !self.recvs.contains_key(&peer) {
            let id = self.msg.irecv(peer, GROUP_CONTEXT, TAG)?;
            self.recvs.insert(peer, id);
        }
        Ok(())
    }

    /// This process.
    pub fn local(&self) -> ProcessAddr {
        self.msg.local()
    }

    /// The endpoint's current time.
    pub fn now(&self) -> Time {
        self.msg.endpoint().now()
    }

    /// The group layer.
    pub fn node(&self) -> &GroupNode {
        &self.node
    }

    /// The messenger underneath.
    pub fn messenger(&self) -> &Messenger {
        &self.msg
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Joins the group called `name` ([`Event::Joined`] follows).
    pub fn join(&mut self, name: &str) -> Result<(), GroupError> {
        let now = self.now();
        let r = self.node.join(name, now);
        self.flush();
        r
    }

    /// Leaves `group` ([`Event::Left`] follows).
    pub fn leave(&mut self, group: GroupId) -> Result<(), GroupError> {
        let now = self.now();
        let r = self.node.leave(group, now);
        self.flush();
        r
    }

    /// Sends `data` to every other member of `group`; returns its sequence
    /// number.
    pub fn send(&mut self, group: GroupId, data: &[u8]) -> Result<u64, GroupError> {
        let now = self.now();
        let r = self.node.send_to_group(group, data, now);
        self.flush();
        r
    }

    /// Enters the next barrier of `group`; returns its epoch.
    pub fn barrier(&mut self, group: GroupId) -> Result<u64, GroupError> {
        let now = self.now();
        let r = self.node.barrier(group, now);
        self.flush();
        r
    }

    /// Contributes to the next reduce of `group`; returns its epoch.
    pub fn reduce(
        &mut self,
        group: GroupId,
        op: ReduceOp,
        values: &[u64],
        to_all: bool,
    ) -> Result<u64, GroupError> {
        let now = self.now();
        let r = self.node.reduce(group, op, values, to_all, now);
        self.flush();
        r
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.node.poll_event()
    }

    /// The earliest of the endpoint's and the group layer's timers.
    pub fn next_timeout(&self) -> Option<Time> {
        [self.node.poll_timeout(), self.msg.endpoint().next_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// One round: the messenger's progress, every message that arrived,
    /// the timers that are due, and what all that sends. Returns how much
    /// moved (zero: nothing to do until [`GroupEndpoint::next_timeout`]).
    pub fn progress(&mut self) -> Result<usize, CollError> {
        let mut moved = self.msg.progress()?;
        let now = self.now();
        let peers: Vec<ProcessAddr> = self.recvs.keys().copied().collect();
        for peer in peers {
            while let Some(&id) = self.recvs.get(&peer) {
                match self.msg.take_recv(id) {
                    None => break,
                    Some(Ok(bytes)) => {
                        moved += 1;
                        self.stats.received += 1;
                        self.node.handle(peer, &bytes, now);
                        let id = self.msg.irecv(peer, GROUP_CONTEXT, TAG)?;
                        self.recvs.insert(peer, id);
                    }
                    Some(Err(_)) => {
                        self.recvs.remove(&peer);
                        self.unreachable(peer, now);
                    }
                }
            }
        }
        if self.node.poll_timeout().is_some_and(|t| t <= now) {
            self.node.handle_timeout(now);
        }
        moved += self.flush();
        self.sends.retain(|&id| self.msg.take_send(id).is_none());
        Ok(moved)
    }

    fn unreachable(&mut self, peer: ProcessAddr, now: Time) {
        if self.down.insert(peer) {
            self.node.peer_unreachable(peer, now);
        }
    }

    /// Sends everything the group layer produced; the multicast as one
    /// unicast per member.
    fn flush(&mut self) -> usize {
        let mut n = 0;
        while let Some(t) = self.node.poll_transmit() {
            n += 1;
            match t {
                Transmit::Unicast { to, bytes } => self.isend(to, &bytes),
                Transmit::Multicast { to, bytes, .. } => {
                    for d in to {
                        self.stats.fanout += 1;
                        self.isend(d, &bytes);
                    }
                }
            }
        }
        n
    }

    fn isend(&mut self, to: ProcessAddr, bytes: &[u8]) {
        if self.down.contains(&to) {
            self.stats.to_unreachable += 1;
            return;
        }
        match self.msg.isend(to, GROUP_CONTEXT, TAG, bytes) {
            Ok(id) => {
                self.stats.sent += 1;
                self.sends.push(id);
            }
            Err(CollError::PeerFailed { .. }) => {
                self.stats.to_unreachable += 1;
                let now = self.now();
                self.unreachable(to, now);
            }
            Err(_) => self.stats.send_errors += 1,
        }
    }
}
