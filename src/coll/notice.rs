//! Failures inside a collective: a member's death fails the collective at
//! every other member, also at those that never talk to it.
//!
//! A step of a collective waits on one member at a time, and that member
//! may be alive and itself waiting on the dead one: in an allreduce by
//! recursive doubling among four, rank 2 waits on rank 3 while rank 0
//! waits on rank 2. When rank 3 dies, rank 2 sees it (its receive fails)
//! and leaves; rank 0 would wait on rank 2 for ever.
//!
//! So a member that sees a member fail in a collective *itself* (its own
//! send or receive failed, its method or liveness reported the peer) tells
//! every other member of the communicator, once per failed peer: a small
//! notice on the communicator's collective context, tagged
//! [`NOTICE_TAG`](super::messenger::NOTICE_TAG), naming the failed member.
//! A member that gets one takes the communicator as broken: its operations
//! in progress there fail at once, naming the failed member and who
//! reported it, and so does every later one (shrink the communicator to
//! the survivors first: [`super::Coll::shrink`]). A communicator is broken
//! for good, also where the failure was seen first-hand and the member
//! comes back later (a healed partition): the members left the failed
//! collective at different steps, so their calls no longer pair up. A hierarchical call
//! fails when its own communicator breaks, whichever smaller one its
//! current step runs on.
//!
//! Only first-hand failures are told, so a failure costs each member that
//! saw it one message per member (the dead one's partners in the
//! algorithm: a few), and nothing at all is sent or kept while nothing
//! fails: no heartbeat to members a process never talks to, and no state
//! for them, so link state still grows with the peers contacted.

use super::comm::Comm;
use super::error::CollError;
use super::messenger::{Messenger, NOTICE_TAG};
use crate::ProcessAddr;
use std::collections::{HashMap, HashSet};

/// What this process knows about failures in its communicators.
#[derive(Default)]
pub(super) struct Failures {
    /// Broken communicators, by id: the failed member and who reported it
    /// (this process itself for a failure it saw).
    broken: HashMap<u32, (ProcessAddr, ProcessAddr)>,
    /// (communicator id, failed peer) pairs this process has told about.
    told: HashSet<(u32, ProcessAddr)>,
    /// The messenger's failure count at the last look.
    seen: u64,
}

/// A notice's body: the failed member's address.
fn encode(peer: ProcessAddr) -> [u8; 6] {
    let mut b = [0u8; 6];
    b[..4].copy_from_slice(&peer.node.0.to_le_bytes());
    b[4..].copy_from_slice(&peer.port.0.to_le_bytes());
    b
}

fn decode(body: &[u8]) -> Option<ProcessAddr> {
    let node = u32::from_le_bytes(body.get(..4)?.try_into().ok()?);
    let port = u16::from_le_bytes(body.get(4..6)?.try_into().ok()?);
    (body.len() == 6).then_some(ProcessAddr::new(node, port))
}

impl Failures {
    /// Whether anything changed since the last call: a peer failed here,
    /// or a notice arrived (taken now). One comparison while nothing did.
    pub fn changed(&mut self, msg: &mut Messenger) -> bool {
        let mut changed = false;
        if msg.has_notices() {
            for (context, from, body) in msg.take_notices() {
                // Collective contexts are odd: id × 2 + 1.
                let id = context.wrapping_sub(1) / 2;
                let Some(peer) = decode(&body) else {
                    continue;
                };
                self.broken.entry(id).or_insert((peer, from));
                changed = true;
            }
        }
        let count = msg.failure_count();
        if count != self.seen {
            self.seen = count;
            changed = true;
        }
        changed
    }

    /// Why `comm` cannot complete a collective, if it cannot: a member that
    /// failed here, or a member's report that one failed.
    pub fn of(&self, msg: &Messenger, comm: &Comm) -> Option<CollError> {
        if let Some(e) = msg.first_failure(comm.members()) {
            return Some(e);
        }
        if self.broken.is_empty() {
            return None;
        }
        let &(peer, from) = self.broken.get(&comm.id())?;
        let me = comm.members()[comm.rank()];
        let why = if from == me {
            "failed in an earlier collective on this communicator, which stays broken until shrunk"
                .to_string()
        } else {
            format!("reported failed by {from}, a member of the communicator")
        };
        Some(CollError::PeerFailed {
            peer,
            rank: None,
            why,
        })
    }

    /// `error` ended a collective on `comm`: if it is a member's failure
    /// this process saw itself, tells the other members (once).
    pub fn tell(&mut self, msg: &mut Messenger, comm: &Comm, error: &CollError) {
        let CollError::PeerFailed { peer, .. } = error else {
            return;
        };
        let peer = *peer;
        if msg.peer_failure(peer).is_none() || !comm.members().contains(&peer) {
            return;
        }
        let me = comm.members()[comm.rank()];
        self.broken.entry(comm.id()).or_insert((peer, me));
        if !self.told.insert((comm.id(), peer)) {
            return;
        }
        let body = encode(peer);
        for &m in comm.members() {
            if m != me && m != peer && msg.peer_failure(m).is_none() {
                // A member that cannot be told fails its own way.
                let _ = msg.isend(m, comm.coll_context(), NOTICE_TAG, &body);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_body_names_one_address() {
        let a = ProcessAddr::new(70_000, 9);
        assert_eq!(decode(&encode(a)), Some(a));
        assert_eq!(decode(&[1, 2, 3]), None);
        assert_eq!(decode(&[0; 7]), None);
    }
}
