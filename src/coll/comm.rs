//! Communicators: ordered groups of processes with their own message space.
//!
//! A [`Comm`] names its members by rank and carries a context id. Every
//! message of the communicator carries that id, so the traffic of different
//! communicators never mixes although they share the same per-peer links.
//! Each communicator has two contexts: `2·id` for point-to-point messages
//! and `2·id + 1` for its collectives, so a collective never takes an
//! application's message. New communicators ([`Coll::dup`],
//! [`Coll::split`]) get an id every member agrees on, found with a
//! collective over the parent.

use super::error::CollError;
use bcl_core::ProcessAddr;
use std::sync::Arc;

/// An ordered group of processes with its own message space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm {
    id: u32,
    rank: usize,
    members: Arc<[ProcessAddr]>,
    /// The node of each member.
    nodes: Arc<[u32]>,
}

impl Comm {
    /// The communicator `id` of `members` (index = rank), seen by `rank`.
    pub(crate) fn new(id: u32, rank: usize, members: Arc<[ProcessAddr]>) -> Comm {
        let nodes = members.iter().map(|a| a.node.0).collect();
        Comm {
            id,
            rank,
            members,
            nodes,
        }
    }

    /// Its id (the same on every member).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The caller's rank in it.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The members' addresses, index = rank.
    pub fn members(&self) -> &[ProcessAddr] {
        &self.members
    }

    /// The address of `rank`.
    pub fn addr(&self, rank: usize) -> Result<ProcessAddr, CollError> {
        self.members.get(rank).copied().ok_or_else(|| {
            CollError::Invalid(format!(
                "rank {rank} in a communicator of {} members",
                self.size()
            ))
        })
    }

    /// The rank of `addr`, if it is a member.
    pub fn rank_of(&self, addr: ProcessAddr) -> Option<usize> {
        self.members.iter().position(|&a| a == addr)
    }

    /// The node of each member (for two-level algorithms).
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// Context of its point-to-point messages (the one to give the
    /// [`Messenger`](super::messenger::Messenger) for them).
    pub fn p2p_context(&self) -> u32 {
        self.id.wrapping_mul(2)
    }

    /// Context of its collectives.
    pub(crate) fn coll_context(&self) -> u32 {
        self.id.wrapping_mul(2).wrapping_add(1)
    }
}
