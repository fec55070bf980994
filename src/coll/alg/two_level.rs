//! Two-level algorithms: one leader per node works across nodes, the
//! others only with their own node's ranks (which share memory).
//!
//! A node's leader is its lowest rank, or the root on the root's node.
//! Reduce and allreduce stay on the canonical tree only when every node
//! holds an aligned block of 2^j ranks (ranks a..a + 2^j, a a multiple of
//! 2^j), all nodes the same size: then a node's reduction is a subtree of
//! the canonical tree, and the leaders' canonical tree over node indices is
//! the rest of it. Other placements are refused for them.

use super::allreduce::exchange_partials;
use super::barrier::disseminate;
use super::tree::{binomial_bcast, canonical_reduce};
use super::{not_applicable, Algorithm, NotApplicable, Shape};
use crate::coll::schedule::{Combine, Schedule, INPUT, OUTPUT};
use std::collections::{HashMap, HashSet};

/// Who leads what, seen from one rank.
struct Placement {
    /// The leader of every node, nodes in the order of their lowest rank.
    leaders: Vec<usize>,
    /// The index in `leaders` of this rank's node.
    node: usize,
    /// The ranks of this rank's node, ascending.
    members: Vec<usize>,
    /// The index of this rank in `members`.
    me: usize,
    /// The index of the node's leader in `members`.
    leader: usize,
}

impl Placement {
    /// The placement of `shape`; the leader of the root's node is `root`
    /// when given.
    fn of(alg: Algorithm, shape: &Shape, root: Option<usize>) -> Result<Placement, NotApplicable> {
        if shape.nodes.len() != shape.size {
            return Err(not_applicable(
                alg,
                shape,
                format!(
                    "the placement names {} nodes for {} ranks",
                    shape.nodes.len(),
                    shape.size
                ),
            ));
        }
        let mut index: HashMap<u32, usize> = HashMap::new();
        let mut nodes: Vec<Vec<usize>> = Vec::new();
        for (rank, &id) in shape.nodes.iter().enumerate() {
            let i = *index.entry(id).or_insert_with(|| {
                nodes.push(Vec::new());
                nodes.len() - 1
            });
            nodes[i].push(rank);
        }
        let lead = |ranks: &Vec<usize>| match root {
            Some(root) if ranks.contains(&root) => root,
            _ => ranks[0],
        };
        let leaders: Vec<usize> = nodes.iter().map(lead).collect();
        let node = index[&shape.nodes[shape.rank]];
        let members = std::mem::take(&mut nodes[node]);
        let position = |rank: usize| members.iter().position(|&m| m == rank).unwrap_or(0);
        let me = position(shape.rank);
        let leader = position(leaders[node]);
        Ok(Placement {
            leaders,
            node,
            members,
            me,
            leader,
        })
    }

    /// Whether this rank leads its node.
    fn is_leader(&self) -> bool {
        self.me == self.leader
    }

    /// Refuses placements whose nodes are not aligned power-of-two blocks
    /// of one size (see the module documentation).
    fn check_aligned(&self, alg: Algorithm, shape: &Shape) -> Result<(), NotApplicable> {
        let per_node = self.members.len();
        let aligned = per_node.is_power_of_two()
            && shape.size.is_multiple_of(per_node)
            && shape
                .nodes
                .chunks(per_node)
                .all(|block| block.iter().all(|&id| id == block[0]))
            && shape
                .nodes
                .chunks(per_node)
                .map(|block| block[0])
                .collect::<HashSet<u32>>()
                .len()
                == shape.size / per_node;
        if aligned {
            Ok(())
        } else {
            Err(not_applicable(
                alg,
                shape,
                "the nodes are not aligned blocks of 2^j consecutive ranks, all of one size",
            ))
        }
    }
}

/// Barrier: node members signal their leader, the leaders run a
/// dissemination barrier, and each leader releases its node.
pub(super) fn barrier(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    let at = Placement::of(alg, shape, None)?;
    let mut s = Schedule::new();
    if at.members.len() == 1 && at.leaders.len() == 1 {
        return Ok(s);
    }
    // Byte 0 is sent; member i's arrival is received into byte i + 1 (no
    // two receives of a round write the same byte).
    let token = s.scratch(at.members.len() + 1);
    let leader = at.members[at.leader];
    let others = || at.members.iter().enumerate().filter(|&(_, &m)| m != leader);
    if at.is_leader() {
        let round = s.round();
        for (i, &m) in others() {
            round.recv(m, token, i + 1..i + 2, Combine::Replace);
        }
        disseminate(&mut s, &at.leaders, at.node);
        let round = s.round();
        for (_, &m) in others() {
            round.send(m, token, 0..1);
        }
    } else {
        s.round().send(leader, token, 0..1);
        s.round().recv(leader, token, 1..2, Combine::Replace);
    }
    Ok(s)
}

/// Bcast: a binomial tree among the leaders from the root (the leader of
/// its node), then one inside every node from its leader.
pub(super) fn bcast(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    let at = Placement::of(alg, shape, Some(shape.root))?;
    let all = 0..shape.len;
    let mut s = Schedule::new();
    if shape.rank == shape.root {
        s.round().copy(INPUT, all.clone(), OUTPUT, 0);
    }
    if at.is_leader() {
        let root_node = at
            .leaders
            .iter()
            .position(|&l| l == shape.root)
            .unwrap_or(0);
        binomial_bcast(&mut s, &at.leaders, at.node, root_node, OUTPUT, all.clone());
    }
    binomial_bcast(&mut s, &at.members, at.me, at.leader, OUTPUT, all);
    Ok(s)
}

/// Reduce: the canonical reduce inside every node to its leader, then
/// among the leaders to the root (aligned placements only).
pub(super) fn reduce(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    let at = Placement::of(alg, shape, Some(shape.root))?;
    at.check_aligned(alg, shape)?;
    let all = 0..shape.len;
    let mut s = Schedule::new();
    s.round().copy(INPUT, all.clone(), OUTPUT, 0);
    canonical_reduce(&mut s, &at.members, at.me, at.leader, OUTPUT, all.clone());
    if at.is_leader() {
        let root_node = at
            .leaders
            .iter()
            .position(|&l| l == shape.root)
            .unwrap_or(0);
        canonical_reduce(&mut s, &at.leaders, at.node, root_node, OUTPUT, all);
    }
    Ok(s)
}

/// Allreduce: the canonical reduce inside every node to its leader, the
/// generalized recursive doubling among the leaders, and a binomial bcast
/// inside every node (aligned placements only).
pub(super) fn allreduce(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    let at = Placement::of(alg, shape, None)?;
    at.check_aligned(alg, shape)?;
    let all = 0..shape.len;
    let mut s = Schedule::new();
    s.round().copy(INPUT, all.clone(), OUTPUT, 0);
    canonical_reduce(&mut s, &at.members, at.me, at.leader, OUTPUT, all.clone());
    if at.is_leader() {
        exchange_partials(&mut s, &at.leaders, at.node, OUTPUT, all.clone());
    }
    binomial_bcast(&mut s, &at.members, at.me, at.leader, OUTPUT, all);
    Ok(s)
}
