//! Dynamic groups: the Hybrid-Tree of the ATM group communication work.
//!
//! A group is a set of processes, any of which sends to all the others.
//! Members are joined by a **unicast tree** (normally binary: one link to
//! the parent, one per child, used both ways), and the root alone has a
//! **multicast** to every other member. Processes join and leave by group
//! name at any time; a member that stops answering is removed.
//!
//! ```text
//!               R ===multicast===> A B C D E       (root only)
//!             /   \
//!            A     B               unicast tree links
//!           / \     \
//!          C   D     E
//!
//!   C sends m:   step 1  C -> A            (C's links: its parent)
//!                step 2  A -> R, A -> D    (A forwards on its other links)
//!                step 3  R ==> all         (the root multicasts; D, A
//!                                           drop the copy as duplicate)
//!   acks of m:   E -> B -> R -> A -> C, and D -> A: each member acks
//!                towards C once all its other links did; C sees one ack
//! ```
//!
//! # Rules
//!
//! - A non-root member forwards the first copy it gets on a tree link on
//!   every other tree link; nothing received on the multicast is
//!   forwarded; the root multicasts what it gets on tree links and its own
//!   messages. The root sends its own messages by multicast **only**, not
//!   also down the tree: with the multicast done reliably (the software
//!   fan-out below) the tree copy would be a second copy to every member
//!   (each child floods it to its subtree). The root does not forward on
//!   tree links what it received on one either; the multicast reaches the
//!   other subtrees. A multicast completes in at most depth + 1 steps
//!   (⌈log2 N⌉ + 1 on the balanced tree).
//! - Copies are identified by (group, source incarnation, sequence number)
//!   and later ones dropped; delivery is in order per source.
//! - Acknowledgements are aggregated up the tree: a member acknowledges on
//!   the link towards the source after all its other links did, so a
//!   source handles one acknowledgement per link per message (its degree),
//!   not one per member. They are cumulative per source, which also makes
//!   them survive re-parenting.
//! - Barrier: arrivals reduced to the root, release multicast, confirmations
//!   reduced to the root (2·depth + 1 steps). Reduce: partial results
//!   combined up the tree (sum, min or max of `u64` vectors), the result at
//!   the root and, if asked, multicast.
//!
//! # Maintenance
//!
//! When a member leaves or fails, its children are re-parented to its
//! parent and its position becomes a vacated slot there; a newcomer takes
//! a vacated slot (the shallowest) or becomes a new leaf under the
//! shallowest member with fewer than two children. Every change is a new
//! view version. Members retain messages until the links away from the
//! source acknowledged them; on a new link both ends exchange their next
//! expected sequence number per source and resend what the other lacks, so
//! a re-parented subtree gets what it missed and its own messages lost with
//! the departed member reach the root. A newcomer starts at the root's next
//! expected number for every source (the root multicasts in sequence order,
//! so everything from there reaches it), and delivers only messages sent in
//! a view that contained it: messages sent while it was absent are never
//! delivered to it. A process that leaves and joins again is a new
//! incarnation with its own sequence numbers.
//!
//! Several groups share the link between two processes: every message
//! carries its group number, and each process counts how many groups use
//! each peer link ([`GroupNode::link_refs`]); a link whose count drops to
//! zero is reported closed ([`Event::LinkClosed`]).
//!
//! # Management
//!
//! Three tiers, as in the Hybrid-Tree design: the [`registry::Registry`] (one per job)
//! maps group names to numbers and makes the first joiner the group's
//! [`agent::Agent`]; the agent (on the root's process) places members in
//! the tree, tells the affected members through new views and watches
//! them; the member side is the process's [`GroupNode`] with one
//! [`member::Member`] per group. Failure detection is by heartbeat and
//! probe, driven by the time the caller passes in: members send the agent
//! a heartbeat every period, a late one is probed, and one that does not
//! answer in time is removed as if it had left. Agents are watched by the
//! registry the same way; a failed agent's group is deleted. A transport
//! that gives up on a peer ([`GroupNode::peer_unreachable`]) removes it at
//! once.
//!
//! # Parts
//!
//! Everything but [`net`] is sans-IO: handed bytes, calls and the time,
//! it hands back bytes to send and events.
//!
//! - [`wire`]: the messages and their encoding (malformed ones are dropped
//!   and counted, never a panic);
//! - [`view`]: views, a member's topology, the agent's tree;
//! - [`member`]: one process in one group;
//! - [`agent`], [`registry`]: membership and failure detection;
//! - [`node`]: the group layer of a process;
//! - [`net`]: [`GroupNode`] over [`crate::coll::messenger::Messenger`], the
//!   root's multicast as a software fan-out (one unicast per member); an
//!   Ethernet multicast group would plug in there;
//! - [`sim`]: a lock-step simulator of group layers for tests.
//!
//! # Limits
//!
//! The root is the agent and cannot leave while other members remain; its
//! failure deletes the group (no agent fail-over). The registry is a single
//! process. The multicast is assumed reliable, as the software fan-out
//! over reliable links is; a lossy Ethernet multicast would need the parent
//! to resend on the tree link what a child did not acknowledge in time.
//! The last messages of a member that fails may reach only part of the
//! group. The Hybrid-Tree design's query protocol and its scatter, gather, all-to-all
//! and scan (named there without algorithms) are not provided.
pub mod agent;
pub mod member;
pub mod net;
pub mod node;
pub mod registry;
pub mod sim;
pub mod view;
pub mod wire;

pub use node::{Event, GroupConfig, GroupError, GroupNode, Transmit};

/// A group number, assigned by the registry; it is in every group
/// message's header, so groups share the links between processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GroupId(pub u32);

#[cfg(test)]
mod tests;
