//! The group agent (the Hybrid-Tree design's GA): one per group, on the process of its
//! first member, which is also the root of the group's tree.
//!
//! The agent admits newcomers and places them in the tree, removes members
//! that leave or fail (re-parenting their children), versions every change
//! and watches its members: each member sends a heartbeat every period;
//! one not heard from for [`AgentConfig::late`] is probed, and one that does
//! not answer within [`AgentConfig::probe_timeout`] is declared failed and
//! removed as if it had left. It is pure state: the process's
//! [`GroupNode`](super::GroupNode) sends what it decides.

use super::view::{Tree, View};
use super::GroupId;
use bcl_core::{ProcessAddr, Time};
use std::collections::BTreeMap;
use std::time::Duration;

/// Failure detection settings of an agent (and of the registry, which
/// watches agents the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// No word from a member for this long: probe it.
    pub late: Duration,
    /// No answer to a probe for this long: declare it failed.
    pub probe_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            late: Duration::from_millis(300),
            probe_timeout: Duration::from_millis(100),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Liveness {
    last: Time,
    probe: Option<Time>,
}

/// What a timeout made the agent decide.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// Members to probe now.
    pub probe: Vec<ProcessAddr>,
    /// Members declared failed (remove them with [`Agent::remove`]).
    pub failed: Vec<ProcessAddr>,
}

/// The membership of one group (see the module documentation).
#[derive(Clone, Debug)]
pub struct Agent {
    group: GroupId,
    tree: Tree,
    version: u32,
    live: BTreeMap<ProcessAddr, Liveness>,
    cfg: AgentConfig,
}

impl Agent {
    /// The agent of a new group whose first member and root is `root`;
    /// the first view has version 1, which is also the root's incarnation.
    pub fn new(group: GroupId, root: ProcessAddr, cfg: AgentConfig) -> Agent {
        Agent {
            group,
            tree: Tree::new(root, 1),
            version: 1,
            live: BTreeMap::new(),
            cfg,
        }
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The current view.
    pub fn view(&self) -> View {
        self.tree.view(self.version)
    }

    /// The tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The root (this agent's process).
    pub fn root(&self) -> ProcessAddr {
        self.tree.root()
    }

    /// Whether `m` is a member.
    pub fn contains(&self, m: ProcessAddr) -> bool {
        self.tree.contains(m)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether the group has no member (never: the root is one).
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Admits `m` at a new version (its incarnation); returns the view.
    /// A member that registers again is admitted again as a new
    /// incarnation.
    pub fn admit(&mut self, m: ProcessAddr, now: Time) -> View {
        if m != self.root() && self.tree.contains(m) {
            self.tree.remove(m);
        }
        self.version += 1;
        self.tree.add(m, self.version);
        self.live.insert(
            m,
            Liveness {
                last: now,
                probe: None,
            },
        );
        self.view()
    }

    /// Removes `m` (leave or failure) at a new version; returns the view,
    /// or `None` if `m` is not a non-root member.
    pub fn remove(&mut self, m: ProcessAddr) -> Option<View> {
        self.tree.remove(m)?;
        self.live.remove(&m);
        self.version += 1;
        Some(self.view())
    }

    /// A message from `m` came: it is alive.
    pub fn heard(&mut self, m: ProcessAddr, now: Time) {
        if let Some(l) = self.live.get_mut(&m) {
            l.last = l.last.max(now);
            l.probe = None;
        }
    }

    /// When [`Agent::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.live
            .values()
            .map(|l| match l.probe {
                None => l.last + self.cfg.late,
                Some(p) => p + self.cfg.probe_timeout,
            })
            .min()
    }

    /// Probes late members and declares failed those that did not answer
    /// a probe in time.
    pub fn handle_timeout(&mut self, now: Time) -> Verdicts {
        let mut v = Verdicts::default();
        for (&m, l) in &mut self.live {
            match l.probe {
                None if now >= l.last + self.cfg.late => {
                    l.probe = Some(now);
                    v.probe.push(m);
                }
                Some(p) if now >= p + self.cfg.probe_timeout => v.failed.push(m),
                _ => {}
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(i: u32) -> ProcessAddr {
        ProcessAddr::new(i, 0)
    }

    #[test]
    fn silence_leads_to_a_probe_then_a_failure() {
        let cfg = AgentConfig {
            late: Duration::from_millis(30),
            probe_timeout: Duration::from_millis(10),
        };
        let mut ag = Agent::new(GroupId(1), a(0), cfg);
        let t0 = Time::ZERO;
        let v = ag.admit(a(1), t0);
        assert_eq!(v.version, 2);
        assert_eq!(v.entry(a(1)).unwrap().inc, 2);
        ag.admit(a(2), t0);
        let ms = |m: u64| t0 + Duration::from_millis(m);
        assert_eq!(ag.poll_timeout(), Some(ms(30)));
        ag.heard(a(2), ms(25));
        assert_eq!(ag.handle_timeout(ms(30)).probe, vec![a(1)]);
        // 1 answers the probe; 2 goes silent.
        ag.heard(a(1), ms(35));
        let v = ag.handle_timeout(ms(55));
        assert_eq!(v.probe, vec![a(2)]);
        assert!(v.failed.is_empty());
        let v = ag.handle_timeout(ms(65));
        assert_eq!(v.failed, vec![a(2)]);
        let view = ag.remove(a(2)).unwrap();
        assert!(!view.contains(a(2)));
        assert_eq!(ag.remove(a(2)), None);
        assert_eq!(ag.remove(a(0)), None);
    }
}
