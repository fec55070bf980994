//! The node hierarchy of a communicator that spans several nodes: each
//! node's members form a node communicator (whose barrier, bcast, reduce
//! and allreduce run on the node's shared-memory board, see
//! [`super::board`]) and the lowest rank of every node joins the leaders'
//! communicator, which works over the network. BCL-3's SMP-cluster
//! hierarchy: shared memory inside a node, one process per node between
//! nodes.
//!
//! Every member derives both communicators from the parent alone (its
//! members, their nodes and its id), so making them costs no message. Their
//! ids are the parent's with the top bit set, times two, plus 0 (node) or 1
//! (leaders): every node's node communicator shares one id, which is safe
//! because their members are disjoint (a message carries its sender, and
//! a board's name its node).

use super::comm::Comm;
use std::sync::Arc;

/// The top bit marks the ids of derived communicators.
const DERIVED: u32 = 1 << 31;

/// One member's view of a communicator's node hierarchy.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    /// The members of this member's node (ascending parent ranks).
    pub node: Comm,
    /// The node leaders, nodes in the order of their lowest rank; `None`
    /// at members that do not lead their node.
    pub leaders: Option<Comm>,
    /// Per parent rank: its node's index among the leaders, and its index
    /// in its node.
    pub place: Vec<(usize, usize)>,
    /// Whether every node holds an aligned block of 2^j consecutive ranks,
    /// all of one size: then the node reductions and the leaders'
    /// reduction together follow the parent's canonical tree, so
    /// reductions through the hierarchy give the same bits as any
    /// deterministic algorithm on the parent.
    pub aligned: bool,
}

impl Hierarchy {
    /// The hierarchy of `comm`, or `None` when it has none worth using
    /// (one node, or one member per node), or when its id leaves no room
    /// for derived ids.
    pub fn of(comm: &Comm) -> Option<Hierarchy> {
        let nodes = comm.nodes();
        if comm.id() >= DERIVED >> 1 || nodes.len() < 2 {
            return None;
        }
        let mut order: Vec<u32> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut place = Vec::with_capacity(nodes.len());
        for (rank, id) in nodes.iter().enumerate() {
            let n = match order.iter().position(|o| o == id) {
                Some(n) => n,
                None => {
                    order.push(*id);
                    groups.push(Vec::new());
                    order.len() - 1
                }
            };
            place.push((n, groups[n].len()));
            groups[n].push(rank);
        }
        if groups.len() < 2 || groups.iter().all(|g| g.len() == 1) {
            return None;
        }
        let (my_node, my_index) = place[comm.rank()];
        let addrs = |ranks: &[usize]| -> Arc<[crate::ProcessAddr]> {
            ranks.iter().map(|&r| comm.members()[r]).collect()
        };
        let node = Comm::new(DERIVED | comm.id() << 1, my_index, addrs(&groups[my_node]));
        let leaders = (my_index == 0).then(|| {
            let firsts: Vec<usize> = groups.iter().map(|g| g[0]).collect();
            Comm::new(DERIVED | comm.id() << 1 | 1, my_node, addrs(&firsts))
        });
        let q = groups[0].len();
        let aligned = q.is_power_of_two()
            && groups
                .iter()
                .enumerate()
                .all(|(i, g)| g.len() == q && g.iter().enumerate().all(|(j, &r)| r == i * q + j));
        Some(Hierarchy {
            node,
            leaders,
            place,
            aligned,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcessAddr;
    use bcl_core::{NodeId, PortId};

    fn comm(rank: usize, nodes: &[u32]) -> Comm {
        let members: Arc<[ProcessAddr]> = nodes
            .iter()
            .enumerate()
            .map(|(i, &n)| ProcessAddr {
                node: NodeId(n),
                port: PortId(100 + i as u16),
            })
            .collect();
        Comm::new(3, rank, members)
    }

    #[test]
    fn nodes_leaders_and_alignment() {
        let h = Hierarchy::of(&comm(3, &[7, 7, 9, 9])).unwrap();
        assert_eq!(h.node.size(), 2);
        assert_eq!(h.node.rank(), 1);
        assert_eq!(h.node.members()[0].port, PortId(102));
        assert!(h.leaders.is_none());
        assert_eq!(h.place, [(0, 0), (0, 1), (1, 0), (1, 1)]);
        assert!(h.aligned);
        let h = Hierarchy::of(&comm(2, &[7, 7, 9, 9])).unwrap();
        let leaders = h.leaders.unwrap();
        assert_eq!(leaders.rank(), 1);
        assert_eq!(
            leaders.members().iter().map(|a| a.port).collect::<Vec<_>>(),
            [PortId(100), PortId(102)]
        );
        assert_ne!(leaders.id(), h.node.id());
        // Interleaved placement: a hierarchy, not aligned.
        let h = Hierarchy::of(&comm(0, &[7, 9, 7, 9])).unwrap();
        assert!(!h.aligned);
        assert_eq!(h.place, [(0, 0), (1, 0), (0, 1), (1, 1)]);
        // One node, or one member per node: none.
        assert!(Hierarchy::of(&comm(0, &[7, 7, 7])).is_none());
        assert!(Hierarchy::of(&comm(0, &[7, 8, 9])).is_none());
    }
}
