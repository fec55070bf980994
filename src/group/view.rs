//! Membership views and the tree they describe.
//!
//! A [`View`] is the group's membership at one version: every member with
//! its incarnation and its parent in the unicast tree (the root has none).
//! The group agent owns the authoritative [`Tree`] and hands out a view at
//! every change; each member derives its own [`Topology`] from the view:
//! its tree links, and for every other member the link that leads towards
//! it (where that member's messages come from and where their
//! acknowledgements go).

use bcl_core::ProcessAddr;
use std::collections::{HashMap, VecDeque};

/// One incarnation of a member: its process and the view version that
/// admitted it. A process that leaves and joins again is a new source
/// with its own sequence numbers, so stale messages of its earlier
/// incarnation can never be taken for new ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId {
    /// The process.
    pub addr: ProcessAddr,
    /// The view version that admitted it.
    pub inc: u32,
}

/// One member in a [`View`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewEntry {
    /// The member's process.
    pub member: ProcessAddr,
    /// Its incarnation (the version that admitted it).
    pub inc: u32,
    /// Its parent in the tree; `None` for the root.
    pub parent: Option<ProcessAddr>,
}

/// A group's membership at one version.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct View {
    /// Increases by one at every change.
    pub version: u32,
    /// The members, in the order the agent admitted them.
    pub entries: Vec<ViewEntry>,
}

/// Why a view received from the network was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// No member or more than one without a parent.
    #[error("a view needs exactly one root")]
    Root,
    /// A member appears twice.
    #[error("a member appears twice")]
    Duplicate,
    /// A parent that is not a member, or a cycle.
    #[error("the parents do not form a tree")]
    NotATree,
}

impl View {
    /// The root, if the view has exactly one.
    pub fn root(&self) -> Option<ProcessAddr> {
        let mut roots = self.entries.iter().filter(|e| e.parent.is_none());
        match (roots.next(), roots.next()) {
            (Some(r), None) => Some(r.member),
            _ => None,
        }
    }

    /// The member's entry.
    pub fn entry(&self, m: ProcessAddr) -> Option<&ViewEntry> {
        self.entries.iter().find(|e| e.member == m)
    }

    /// Whether `m` is a member.
    pub fn contains(&self, m: ProcessAddr) -> bool {
        self.entry(m).is_some()
    }

    /// The members' processes.
    pub fn members(&self) -> impl Iterator<Item = ProcessAddr> + '_ {
        self.entries.iter().map(|e| e.member)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the view has no member.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The children of `m`, in admission order.
    pub fn children(&self, m: ProcessAddr) -> Vec<ProcessAddr> {
        self.entries
            .iter()
            .filter(|e| e.parent == Some(m))
            .map(|e| e.member)
            .collect()
    }

    /// Checks that the view is a tree with one root (views come from the
    /// network; a bad one is dropped).
    pub fn validate(&self) -> Result<(), ViewError> {
        let root = self.root().ok_or(ViewError::Root)?;
        let mut index = HashMap::with_capacity(self.entries.len());
        for e in &self.entries {
            if index.insert(e.member, e.parent).is_some() {
                return Err(ViewError::Duplicate);
            }
        }
        // Every member reaches the root in fewer steps than there are
        // members: no cycle, no unknown parent.
        for e in &self.entries {
            let mut cur = e.member;
            let mut steps = 0;
            while cur != root {
                match index.get(&cur) {
                    Some(Some(p)) => cur = *p,
                    _ => return Err(ViewError::NotATree),
                }
                steps += 1;
                if steps > self.entries.len() {
                    return Err(ViewError::NotATree);
                }
            }
        }
        Ok(())
    }

    /// Depth of `m` (the root is at 0), for a valid view.
    pub fn depth(&self, m: ProcessAddr) -> Option<usize> {
        let mut cur = self.entry(m)?;
        let mut d = 0;
        while let Some(p) = cur.parent {
            cur = self.entry(p)?;
            d += 1;
            if d > self.entries.len() {
                return None;
            }
        }
        Some(d)
    }

    /// The greatest depth of a member (0 for one member).
    pub fn height(&self) -> usize {
        self.members()
            .filter_map(|m| self.depth(m))
            .max()
            .unwrap_or(0)
    }
}

/// One member's derived picture of a view: its links and which link leads
/// towards every other member.
#[derive(Clone, Debug)]
pub struct Topology {
    /// This member.
    pub me: ProcessAddr,
    /// The root.
    pub root: ProcessAddr,
    /// Its parent (none at the root).
    pub parent: Option<ProcessAddr>,
    /// Its children, in admission order.
    pub children: Vec<ProcessAddr>,
    /// For every other member, the neighbour on the path to it.
    toward: HashMap<ProcessAddr, ProcessAddr>,
    /// Every member's incarnation.
    incs: HashMap<ProcessAddr, u32>,
}

impl Topology {
    /// The topology of `me` in `view`, or `None` if `me` is not a member
    /// or the view is not a tree.
    pub fn new(view: &View, me: ProcessAddr) -> Option<Topology> {
        view.validate().ok()?;
        let root = view.root()?;
        let parent = view.entry(me)?.parent;
        let mut adj: HashMap<ProcessAddr, Vec<ProcessAddr>> = HashMap::new();
        for e in &view.entries {
            if let Some(p) = e.parent {
                adj.entry(p).or_default().push(e.member);
                adj.entry(e.member).or_default().push(p);
            }
        }
        let children = view.children(me);
        // Breadth-first from me, remembering the first hop.
        let mut toward = HashMap::with_capacity(view.len());
        let mut queue = VecDeque::new();
        for &n in adj.get(&me).into_iter().flatten() {
            toward.insert(n, n);
            queue.push_back(n);
        }
        while let Some(x) = queue.pop_front() {
            let hop = toward[&x];
            for &y in adj.get(&x).into_iter().flatten() {
                if y != me && !toward.contains_key(&y) {
                    toward.insert(y, hop);
                    queue.push_back(y);
                }
            }
        }
        let incs = view.entries.iter().map(|e| (e.member, e.inc)).collect();
        Some(Topology {
            me,
            root,
            parent,
            children,
            toward,
            incs,
        })
    }

    /// The tree links: the parent first, then the children.
    pub fn links(&self) -> Vec<ProcessAddr> {
        self.parent
            .into_iter()
            .chain(self.children.iter().copied())
            .collect()
    }

    /// Whether `p` is one of the tree links.
    pub fn is_link(&self, p: ProcessAddr) -> bool {
        self.parent == Some(p) || self.children.contains(&p)
    }

    /// The neighbour on the path to member `m`.
    pub fn toward(&self, m: ProcessAddr) -> Option<ProcessAddr> {
        self.toward.get(&m).copied()
    }

    /// The incarnation of member `m` in this view.
    pub fn inc(&self, m: ProcessAddr) -> Option<u32> {
        self.incs.get(&m).copied()
    }

    /// Whether this member is the root.
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }

    /// The number of tree links (the member's degree).
    pub fn degree(&self) -> usize {
        self.children.len() + usize::from(self.parent.is_some())
    }
}

/// The agent's tree: positions, vacated slots, and the views it issues.
///
/// A newcomer takes a vacated slot if one exists (it becomes a child of
/// the parent of the member that left it, the shallowest such slot first);
/// otherwise it becomes a new leaf under the shallowest member with fewer
/// than two children (breadth-first, in admission order). A departing
/// member's children are re-parented to its parent. The root never
/// departs while others remain. Nothing rebalances the tree: after many
/// departures of internal members it tends to a star, on which every
/// algorithm still runs.
#[derive(Clone, Debug)]
pub struct Tree {
    entries: Vec<ViewEntry>,
    /// Parents of vacated positions.
    slots: Vec<ProcessAddr>,
}

impl Tree {
    /// A tree of one member, the root.
    pub fn new(root: ProcessAddr, inc: u32) -> Tree {
        Tree {
            entries: vec![ViewEntry {
                member: root,
                inc,
                parent: None,
            }],
            slots: Vec::new(),
        }
    }

    /// The root.
    pub fn root(&self) -> ProcessAddr {
        self.entries[0].member
    }

    /// Whether `m` is a member.
    pub fn contains(&self, m: ProcessAddr) -> bool {
        self.entries.iter().any(|e| e.member == m)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the tree has no member (never: it always holds its root).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The members.
    pub fn members(&self) -> impl Iterator<Item = ProcessAddr> + '_ {
        self.entries.iter().map(|e| e.member)
    }

    /// The parent of `m`.
    pub fn parent(&self, m: ProcessAddr) -> Option<ProcessAddr> {
        self.entries
            .iter()
            .find(|e| e.member == m)
            .and_then(|e| e.parent)
    }

    /// Vacated slots (their parents), for inspection.
    pub fn slots(&self) -> &[ProcessAddr] {
        &self.slots
    }

    fn children_count(&self, m: ProcessAddr) -> usize {
        self.entries.iter().filter(|e| e.parent == Some(m)).count()
    }

    fn depth(&self, m: ProcessAddr) -> usize {
        let mut d = 0;
        let mut cur = m;
        while let Some(p) = self.parent(cur) {
            cur = p;
            d += 1;
        }
        d
    }

    /// Where the next newcomer goes (its parent).
    pub fn place(&self) -> ProcessAddr {
        if let Some(&p) = self.slots.iter().min_by_key(|&&p| self.depth(p)) {
            return p;
        }
        // Breadth-first in admission order.
        let mut queue = VecDeque::from([self.root()]);
        while let Some(x) = queue.pop_front() {
            if self.children_count(x) < 2 {
                return x;
            }
            for e in &self.entries {
                if e.parent == Some(x) {
                    queue.push_back(e.member);
                }
            }
        }
        self.root()
    }

    /// Admits `m` with incarnation `inc`; returns its parent.
    pub fn add(&mut self, m: ProcessAddr, inc: u32) -> ProcessAddr {
        let parent = self.place();
        if let Some(i) = self.slots.iter().position(|&p| p == parent) {
            self.slots.remove(i);
        }
        self.entries.push(ViewEntry {
            member: m,
            inc,
            parent: Some(parent),
        });
        parent
    }

    /// Removes `m` (not the root): its children move to its parent, and
    /// its position becomes a vacated slot under that parent. Returns the
    /// re-parented children, or `None` if `m` is not a non-root member.
    pub fn remove(&mut self, m: ProcessAddr) -> Option<Vec<ProcessAddr>> {
        let i = self.entries.iter().position(|e| e.member == m)?;
        let parent = self.entries[i].parent?;
        self.entries.remove(i);
        let mut moved = Vec::new();
        for e in &mut self.entries {
            if e.parent == Some(m) {
                e.parent = Some(parent);
                moved.push(e.member);
            }
        }
        // Slots under the departed member go with its children.
        self.slots.retain(|&p| p != m);
        self.slots.push(parent);
        Some(moved)
    }

    /// The view of this tree at `version`.
    pub fn view(&self, version: u32) -> View {
        View {
            version,
            entries: self.entries.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(i: u32) -> ProcessAddr {
        ProcessAddr::new(i, 0)
    }

    #[test]
    fn joins_fill_a_complete_binary_tree() {
        let mut t = Tree::new(a(0), 1);
        for i in 1..15 {
            let p = t.add(a(i), i + 1);
            assert_eq!(p, a((i - 1) / 2), "member {i}");
        }
        assert_eq!(t.view(1).height(), 3);
    }

    #[test]
    fn leave_reparents_and_join_takes_the_slot() {
        let mut t = Tree::new(a(0), 1);
        for i in 1..7 {
            t.add(a(i), i + 1);
        }
        // 1 has children 3, 4.
        assert_eq!(t.remove(a(1)), Some(vec![a(3), a(4)]));
        assert_eq!(t.parent(a(3)), Some(a(0)));
        assert_eq!(t.slots(), &[a(0)]);
        assert_eq!(t.add(a(9), 20), a(0));
        assert!(t.slots().is_empty());
        // The root cannot be removed, nor a stranger.
        assert_eq!(t.remove(a(0)), None);
        assert_eq!(t.remove(a(42)), None);
        t.view(3).validate().unwrap();
    }

    #[test]
    fn topology_knows_the_way() {
        let mut t = Tree::new(a(0), 1);
        for i in 1..7 {
            t.add(a(i), i + 1);
        }
        let v = t.view(7);
        let top = Topology::new(&v, a(1)).unwrap();
        assert_eq!(top.parent, Some(a(0)));
        assert_eq!(top.children, vec![a(3), a(4)]);
        assert_eq!(top.toward(a(3)), Some(a(3)));
        assert_eq!(top.toward(a(6)), Some(a(0)));
        assert_eq!(top.toward(a(2)), Some(a(0)));
        assert_eq!(top.toward(a(1)), None);
        assert!(Topology::new(&v, a(9)).is_none());
    }

    #[test]
    fn bad_views_are_refused() {
        let e = |m, p: Option<u32>| ViewEntry {
            member: a(m),
            inc: 1,
            parent: p.map(a),
        };
        let two_roots = View {
            version: 1,
            entries: vec![e(1, None), e(2, None)],
        };
        assert_eq!(two_roots.validate(), Err(ViewError::Root));
        let cycle = View {
            version: 1,
            entries: vec![e(1, None), e(2, Some(3)), e(3, Some(2))],
        };
        assert_eq!(cycle.validate(), Err(ViewError::NotATree));
        let dup = View {
            version: 1,
            entries: vec![e(1, None), e(2, Some(1)), e(2, Some(1))],
        };
        assert_eq!(dup.validate(), Err(ViewError::Duplicate));
        let orphan = View {
            version: 1,
            entries: vec![e(1, None), e(2, Some(7))],
        };
        assert_eq!(orphan.validate(), Err(ViewError::NotATree));
    }
}
