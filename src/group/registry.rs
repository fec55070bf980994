//! The registry (the Hybrid-Tree design's TIC): one per job, at a process every other
//! knows. It maps group names to numbers, makes the first process that
//! joins a name the group's agent, keeps every group's member list, and
//! watches the agents: an agent sends a heartbeat every period, a late one
//! is probed, and one that does not answer is declared failed and its
//! group deleted (the Hybrid-Tree design's "either rebuild the tree or delete the
//! group": we delete it). Pure state, like the [agent](super::agent).

use super::agent::AgentConfig;
use super::GroupId;
use bcl_core::{ProcessAddr, Time};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One group as the registry knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    /// Its name.
    pub name: String,
    /// Its agent's process.
    pub agent: ProcessAddr,
    /// Its members (the union over agents equals this, as in the Hybrid-Tree design).
    pub members: BTreeSet<ProcessAddr>,
    last: Time,
    probe: Option<Time>,
}

/// The answer to a join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The group's number.
    pub group: GroupId,
    /// Its agent.
    pub agent: ProcessAddr,
    /// Whether the group was created by this join (the joiner is the agent).
    pub created: bool,
}

/// What a timeout made the registry decide.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryVerdicts {
    /// Agents to probe, with their group.
    pub probe: Vec<(GroupId, ProcessAddr)>,
    /// Groups deleted because their agent failed, with the members to
    /// tell.
    pub deleted: Vec<(GroupId, Vec<ProcessAddr>)>,
}

/// Group names, numbers, agents and members (see the module
/// documentation).
#[derive(Clone, Debug)]
pub struct Registry {
    names: HashMap<String, GroupId>,
    groups: BTreeMap<GroupId, GroupRecord>,
    next: u32,
    cfg: AgentConfig,
}

impl Registry {
    /// An empty registry; agents are watched with `cfg`.
    pub fn new(cfg: AgentConfig) -> Registry {
        Registry {
            names: HashMap::new(),
            groups: BTreeMap::new(),
            next: 1,
            cfg,
        }
    }

    /// `p` joins the group named `name`, which is created (with `p` as its
    /// agent) if it does not exist.
    pub fn join(&mut self, name: &str, p: ProcessAddr, now: Time) -> Assignment {
        if let Some(&g) = self.names.get(name) {
            if let Some(r) = self.groups.get_mut(&g) {
                r.members.insert(p);
                return Assignment {
                    group: g,
                    agent: r.agent,
                    created: false,
                };
            }
        }
        let g = GroupId(self.next);
        self.next = self.next.wrapping_add(1).max(1);
        self.names.insert(name.to_string(), g);
        self.groups.insert(
            g,
            GroupRecord {
                name: name.to_string(),
                agent: p,
                members: BTreeSet::from([p]),
                last: now,
                probe: None,
            },
        );
        Assignment {
            group: g,
            agent: p,
            created: true,
        }
    }

    /// `p` left `g` (or was declared failed by the agent). When the agent
    /// itself leaves, the group is deleted; the members left to tell are
    /// returned.
    pub fn left(&mut self, g: GroupId, p: ProcessAddr) -> Option<Vec<ProcessAddr>> {
        let r = self.groups.get_mut(&g)?;
        r.members.remove(&p);
        if r.agent == p {
            return self.delete(g);
        }
        None
    }

    /// A message from `g`'s agent `p` came.
    pub fn heard_agent(&mut self, g: GroupId, p: ProcessAddr, now: Time) {
        if let Some(r) = self.groups.get_mut(&g) {
            if r.agent == p {
                r.last = r.last.max(now);
                r.probe = None;
            }
        }
    }

    /// Deletes `g`; returns its members other than the agent.
    pub fn delete(&mut self, g: GroupId) -> Option<Vec<ProcessAddr>> {
        let r = self.groups.remove(&g)?;
        self.names.remove(&r.name);
        Some(r.members.into_iter().filter(|&m| m != r.agent).collect())
    }

    /// The groups whose agent is `p` (when `p` is known to be dead).
    pub fn agent_of(&self, p: ProcessAddr) -> Vec<GroupId> {
        self.groups
            .iter()
            .filter(|(_, r)| r.agent == p)
            .map(|(&g, _)| g)
            .collect()
    }

    /// The number of a group name.
    pub fn lookup(&self, name: &str) -> Option<GroupId> {
        self.names.get(name).copied()
    }

    /// A group's record.
    pub fn group(&self, g: GroupId) -> Option<&GroupRecord> {
        self.groups.get(&g)
    }

    /// When [`Registry::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.groups
            .values()
            .map(|r| match r.probe {
                None => r.last + self.cfg.late,
                Some(p) => p + self.cfg.probe_timeout,
            })
            .min()
    }

    /// Probes late agents; deletes the groups of those that did not answer.
    pub fn handle_timeout(&mut self, now: Time) -> RegistryVerdicts {
        let mut v = RegistryVerdicts::default();
        let mut dead = Vec::new();
        for (&g, r) in &mut self.groups {
            match r.probe {
                None if now >= r.last + self.cfg.late => {
                    r.probe = Some(now);
                    v.probe.push((g, r.agent));
                }
                Some(p) if now >= p + self.cfg.probe_timeout => dead.push(g),
                _ => {}
            }
        }
        for g in dead {
            if let Some(members) = self.delete(g) {
                v.deleted.push((g, members));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_map_to_numbers_and_the_first_joiner_is_the_agent() {
        let mut r = Registry::new(AgentConfig::default());
        let (p, q) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
        let a = r.join("x", p, Time::ZERO);
        assert!(a.created);
        assert_eq!(a.agent, p);
        let b = r.join("x", q, Time::ZERO);
        assert_eq!((b.group, b.agent, b.created), (a.group, p, false));
        let c = r.join("y", q, Time::ZERO);
        assert_ne!(c.group, a.group);
        assert_eq!(r.left(a.group, q), None);
        assert_eq!(r.group(a.group).unwrap().members.len(), 1);
        // The agent leaving deletes the group.
        r.join("x", q, Time::ZERO);
        assert_eq!(r.left(a.group, p), Some(vec![q]));
        assert_eq!(r.lookup("x"), None);
    }

    #[test]
    fn a_silent_agent_loses_its_group() {
        let cfg = AgentConfig {
            late: Duration::from_millis(10),
            probe_timeout: Duration::from_millis(5),
        };
        let mut r = Registry::new(cfg);
        let (p, q) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
        let g = r.join("x", p, Time::ZERO).group;
        r.join("x", q, Time::ZERO);
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        assert_eq!(r.handle_timeout(t(10)).probe, vec![(g, p)]);
        let v = r.handle_timeout(t(15));
        assert_eq!(v.deleted, vec![(g, vec![q])]);
        assert_eq!(r.poll_timeout(), None);
    }
}
