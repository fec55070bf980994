//! The group layer of one process (the Hybrid-Tree design's OA), sans-IO.
//!
//! A [`GroupNode`] holds the process's [`Member`]s (one per group it is
//! in), the [`Agent`]s of the groups it founded, and the [`Registry`] if it
//! is the job's registry process. It is handed received bytes, local calls
//! and the current time, and hands back [`Transmit`]s (bytes to one peer,
//! or to all of a group's other members on the root's multicast) and
//! [`Event`]s. It parses every message (a malformed one is dropped and
//! counted), routes it by group number, sends messages to itself through
//! an internal loopback, drives heartbeats and failure detection from the
//! time it is given, and counts how many groups use each peer link.
//!
//! Joining by name follows the Hybrid-Tree design's protocol: the process asks the
//! registry, which answers with the group number and the agent (creating
//! the group with this process as agent if the name is new); the process
//! registers with the agent, which places it in the tree, tells the parent
//! through a new view, and answers with a welcome carrying the view and
//! where every source stands. Leaving: the member stops sending, waits
//! until its own messages are complete, asks the agent, which re-parents
//! its children, issues a view and answers; the process then tells the
//! registry.

use super::agent::{Agent, AgentConfig};
use super::member::{Member, MemberConfig, Output, SendError};
use super::registry::Registry;
use super::view::{SourceId, View};
use super::wire::{Msg, Packet, ReduceOp, Welcome, MAX_NAME};
use super::GroupId;
use bcl_core::{ProcessAddr, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Settings of the group layer of a process.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// Settings of each member.
    pub member: MemberConfig,
    /// Period of member → agent and agent → registry heartbeats.
    pub heartbeat: Duration,
    /// Failure detection of members by agents and of agents by the
    /// registry.
    pub detect: AgentConfig,
    /// Most messages held, over all groups, for joins whose welcome has
    /// not come yet.
    pub max_pending: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            member: MemberConfig::default(),
            heartbeat: Duration::from_millis(100),
            detect: AgentConfig::default(),
            max_pending: 1 << 14,
        }
    }
}

/// Bytes to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transmit {
    /// To one peer.
    Unicast {
        /// The peer.
        to: ProcessAddr,
        /// The encoded message.
        bytes: Vec<u8>,
    },
    /// The root's multicast: the same bytes to every other member of
    /// `group`. Done as one unicast per member by the network adapter;
    /// an Ethernet multicast group would carry it in one frame.
    Multicast {
        /// The group.
        group: GroupId,
        /// Its members other than this process.
        to: Vec<ProcessAddr>,
        /// The encoded message.
        bytes: Vec<u8>,
    },
}

/// What the group layer tells the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Joined `group` (named `name`) in view `version`.
    Joined {
        /// The group.
        group: GroupId,
        /// Its name.
        name: String,
        /// The view that admitted this process.
        version: u32,
    },
    /// A group message, in order per source.
    Deliver {
        /// The group.
        group: GroupId,
        /// Its source.
        source: SourceId,
        /// Its sequence number.
        seq: u64,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// Own message `seq` reached every member.
    SendComplete {
        /// The group.
        group: GroupId,
        /// The sequence number.
        seq: u64,
    },
    /// Barrier `epoch` released.
    BarrierReleased {
        /// The group.
        group: GroupId,
        /// The epoch.
        epoch: u64,
    },
    /// At the root: every member confirmed the release of barrier `epoch`.
    BarrierComplete {
        /// The group.
        group: GroupId,
        /// The epoch.
        epoch: u64,
    },
    /// A reduce's result.
    ReduceResult {
        /// The group.
        group: GroupId,
        /// The epoch.
        epoch: u64,
        /// The values.
        values: Vec<u64>,
    },
    /// The membership changed.
    ViewChanged {
        /// The group.
        group: GroupId,
        /// The new version.
        version: u32,
        /// The number of members.
        members: usize,
    },
    /// At the agent: a member was declared failed and removed.
    MemberFailed {
        /// The group.
        group: GroupId,
        /// The member.
        member: ProcessAddr,
    },
    /// This process is out of `group` (`expelled`: declared failed).
    Left {
        /// The group.
        group: GroupId,
        /// Removed as failed rather than at its request.
        expelled: bool,
    },
    /// The group was deleted (its agent failed).
    Deleted {
        /// The group.
        group: GroupId,
    },
    /// A group now uses the link to `peer` and none did before.
    LinkOpened {
        /// The peer.
        peer: ProcessAddr,
    },
    /// No group uses the link to `peer` any more: it can be closed.
    LinkClosed {
        /// The peer.
        peer: ProcessAddr,
    },
}

/// Why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// This process is not a member of the group.
    #[error("not a member of group {0:?}")]
    NotMember(GroupId),
    /// Already a member of, or joining, a group of this name.
    #[error("already in or joining group {0:?}")]
    AlreadyJoined(String),
    /// The name is empty or longer than the wire allows.
    #[error("bad group name {0:?}")]
    BadName(String),
    /// The root (the agent) cannot leave while other members remain.
    #[error("the root of group {0:?} cannot leave while others remain")]
    RootCannotLeave(GroupId),
    /// The member refused.
    #[error(transparent)]
    Member(#[from] SendError),
}

/// Counters of a process's group layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Messages that could not be parsed, dropped.
    pub malformed: u64,
    /// Messages for a group this process is not in, dropped.
    pub unknown_group: u64,
    /// Messages that came to the wrong role (a registry message at a
    /// process that is not the registry, a view not from the agent),
    /// dropped.
    pub misdirected: u64,
    /// Messages held for a group whose welcome was awaited and dropped
    /// because too many were held.
    pub pending_dropped: u64,
}

/// A group this process is a member of.
#[derive(Debug)]
struct Membership {
    name: String,
    agent: ProcessAddr,
    member: Member,
    links: BTreeSet<ProcessAddr>,
    next_heartbeat: Time,
    leave_asked: bool,
}

/// A join under way.
#[derive(Debug)]
struct Joining {
    group: Option<GroupId>,
    agent: Option<ProcessAddr>,
}

/// The group layer of one process (see the module documentation).
#[derive(Debug)]
pub struct GroupNode {
    me: ProcessAddr,
    registry_addr: ProcessAddr,
    cfg: GroupConfig,
    registry: Option<Registry>,
    agents: BTreeMap<GroupId, Agent>,
    next_agent_heartbeat: BTreeMap<GroupId, Time>,
    groups: BTreeMap<GroupId, Membership>,
    joining: BTreeMap<String, Joining>,
    /// Messages for groups whose welcome (or, at a new agent, whose
    /// registry answer) has not come yet.
    pending: BTreeMap<GroupId, VecDeque<(ProcessAddr, Packet)>>,
    links: BTreeMap<ProcessAddr, usize>,
    loopback: VecDeque<Packet>,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    now: Time,
    stats: NodeStats,
}

impl GroupNode {
    /// The group layer of process `me`; the job's registry runs at
    /// `registry` (here, if that is `me`).
    pub fn new(me: ProcessAddr, registry: ProcessAddr, cfg: GroupConfig) -> GroupNode {
        GroupNode {
            me,
            registry_addr: registry,
            registry: (me == registry).then(|| Registry::new(cfg.detect)),
            cfg,
            agents: BTreeMap::new(),
            next_agent_heartbeat: BTreeMap::new(),
            groups: BTreeMap::new(),
            joining: BTreeMap::new(),
            pending: BTreeMap::new(),
            links: BTreeMap::new(),
            loopback: VecDeque::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            now: Time::ZERO,
            stats: NodeStats::default(),
        }
    }

    /// This process.
    pub fn local(&self) -> ProcessAddr {
        self.me
    }

    /// Counters.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// The member of `group`, if this process is in it.
    pub fn member(&self, group: GroupId) -> Option<&Member> {
        self.groups.get(&group).map(|m| &m.member)
    }

    /// The agent of `group`, if this process is its agent.
    pub fn agent(&self, group: GroupId) -> Option<&Agent> {
        self.agents.get(&group)
    }

    /// The registry, if this process hosts it.
    pub fn registry(&self) -> Option<&Registry> {
        self.registry.as_ref()
    }

    /// The groups this process is in.
    pub fn groups(&self) -> Vec<GroupId> {
        self.groups.keys().copied().collect()
    }

    /// The group of this name this process is in.
    pub fn group_named(&self, name: &str) -> Option<GroupId> {
        self.groups
            .iter()
            .find(|(_, m)| m.name == name)
            .map(|(&g, _)| g)
    }

    /// The installed view of `group`.
    pub fn view(&self, group: GroupId) -> Option<&View> {
        self.member(group).and_then(Member::view)
    }

    /// How many groups use the link to `peer` (zero: closed).
    pub fn link_refs(&self, peer: ProcessAddr) -> usize {
        self.links.get(&peer).copied().unwrap_or(0)
    }

    /// Every open link with its count of groups.
    pub fn links(&self) -> Vec<(ProcessAddr, usize)> {
        self.links.iter().map(|(&p, &n)| (p, n)).collect()
    }

    /// The next bytes to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Joins the group called `name`; [`Event::Joined`] follows.
    pub fn join(&mut self, name: &str, now: Time) -> Result<(), GroupError> {
        self.now = self.now.max(now);
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(GroupError::BadName(name.to_string()));
        }
        if self.joining.contains_key(name) || self.group_named(name).is_some() {
            return Err(GroupError::AlreadyJoined(name.to_string()));
        }
        self.joining.insert(
            name.to_string(),
            Joining {
                group: None,
                agent: None,
            },
        );
        self.send(
            self.registry_addr,
            GroupId(0),
            Msg::JoinReq {
                name: name.to_string(),
            },
        );
        self.run_loopback();
        Ok(())
    }

    /// Leaves `group`: once this member's messages are complete the agent
    /// removes it; [`Event::Left`] follows. The root can leave only as the
    /// last member, which deletes the group.
    pub fn leave(&mut self, group: GroupId, now: Time) -> Result<(), GroupError> {
        self.now = self.now.max(now);
        let ms = self
            .groups
            .get_mut(&group)
            .ok_or(GroupError::NotMember(group))?;
        if ms.agent == self.me {
            let alone = self.agents.get(&group).is_none_or(|a| a.len() <= 1);
            if !alone {
                return Err(GroupError::RootCannotLeave(group));
            }
            self.agents.remove(&group);
            self.next_agent_heartbeat.remove(&group);
            self.drop_membership(group);
            self.send(self.registry_addr, group, Msg::LeaveNote);
            self.events.push_back(Event::Left {
                group,
                expelled: false,
            });
        } else {
            ms.member.begin_leave();
            self.check_leaving(group);
        }
        self.run_loopback();
        Ok(())
    }

    /// Sends `data` to every other member of `group`; returns its sequence
    /// number ([`Event::SendComplete`] follows).
    pub fn send_to_group(
        &mut self,
        group: GroupId,
        data: &[u8],
        now: Time,
    ) -> Result<u64, GroupError> {
        self.now = self.now.max(now);
        let ms = self
            .groups
            .get_mut(&group)
            .ok_or(GroupError::NotMember(group))?;
        let seq = ms.member.send(data)?;
        self.pump(group);
        self.run_loopback();
        Ok(seq)
    }

    /// Enters the next barrier of `group`; returns its epoch
    /// ([`Event::BarrierReleased`] follows).
    pub fn barrier(&mut self, group: GroupId, now: Time) -> Result<u64, GroupError> {
        self.now = self.now.max(now);
        let ms = self
            .groups
            .get_mut(&group)
            .ok_or(GroupError::NotMember(group))?;
        let e = ms.member.barrier()?;
        self.pump(group);
        self.run_loopback();
        Ok(e)
    }

    /// Contributes to the next reduce of `group`; returns its epoch
    /// ([`Event::ReduceResult`] follows at the root, and everywhere with
    /// `to_all`).
    pub fn reduce(
        &mut self,
        group: GroupId,
        op: ReduceOp,
        values: &[u64],
        to_all: bool,
        now: Time,
    ) -> Result<u64, GroupError> {
        self.now = self.now.max(now);
        let ms = self
            .groups
            .get_mut(&group)
            .ok_or(GroupError::NotMember(group))?;
        let e = ms.member.reduce(op, values, to_all)?;
        self.pump(group);
        self.run_loopback();
        Ok(e)
    }

    /// Bytes from `from`.
    pub fn handle(&mut self, from: ProcessAddr, bytes: &[u8], now: Time) {
        self.now = self.now.max(now);
        match Packet::parse(bytes) {
            Ok(p) => self.dispatch(from, p),
            Err(_) => self.stats.malformed += 1,
        }
        self.run_loopback();
    }

    /// The transport says `peer` is unreachable: the Hybrid-Tree design's network
    /// management event. Groups this process is agent of remove it at
    /// once; the registry deletes the groups whose agent it was.
    pub fn peer_unreachable(&mut self, peer: ProcessAddr, now: Time) {
        self.now = self.now.max(now);
        let groups: Vec<GroupId> = self
            .agents
            .iter()
            .filter(|(_, a)| a.contains(peer) && a.root() != peer)
            .map(|(&g, _)| g)
            .collect();
        for g in groups {
            self.remove_member(g, peer, true);
        }
        if let Some(r) = &mut self.registry {
            let mut deleted = Vec::new();
            for g in r.agent_of(peer) {
                if let Some(members) = r.delete(g) {
                    deleted.push((g, members));
                }
            }
            for (g, members) in deleted {
                for m in members {
                    self.send(m, g, Msg::Gone);
                }
            }
        }
        self.run_loopback();
    }

    /// When [`GroupNode::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        let hb = self
            .groups
            .values()
            .filter(|m| m.agent != self.me)
            .map(|m| m.next_heartbeat);
        let ahb = self.next_agent_heartbeat.values().copied();
        let agents = self.agents.values().filter_map(Agent::poll_timeout);
        let reg = self.registry.as_ref().and_then(Registry::poll_timeout);
        hb.chain(ahb).chain(agents).chain(reg).min()
    }

    /// Heartbeats, probes and failure verdicts due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.now = self.now.max(now);
        let now = self.now;
        let period = self.cfg.heartbeat;
        let beats: Vec<(GroupId, ProcessAddr)> = self
            .groups
            .iter_mut()
            .filter(|(_, m)| m.agent != self.me && now >= m.next_heartbeat)
            .map(|(&g, m)| {
                m.next_heartbeat = now + period;
                (g, m.agent)
            })
            .collect();
        for (g, agent) in beats {
            self.send(agent, g, Msg::Heartbeat);
        }
        let due: Vec<GroupId> = self
            .next_agent_heartbeat
            .iter_mut()
            .filter(|(_, t)| now >= **t)
            .map(|(&g, t)| {
                *t = now + period;
                g
            })
            .collect();
        for g in due {
            self.send(self.registry_addr, g, Msg::AgentHeartbeat);
        }
        let groups: Vec<GroupId> = self.agents.keys().copied().collect();
        for g in groups {
            let Some(a) = self.agents.get_mut(&g) else {
                continue;
            };
            let v = a.handle_timeout(now);
            for m in v.probe {
                self.send(m, g, Msg::Probe);
            }
            for m in v.failed {
                self.remove_member(g, m, true);
            }
        }
        if let Some(r) = &mut self.registry {
            let v = r.handle_timeout(now);
            for (g, agent) in v.probe {
                self.send(agent, g, Msg::AgentProbe);
            }
            for (g, members) in v.deleted {
                for m in members {
                    self.send(m, g, Msg::Gone);
                }
            }
        }
        self.run_loopback();
    }

    fn send(&mut self, to: ProcessAddr, group: GroupId, msg: Msg) {
        let p = Packet {
            group,
            mcast: false,
            msg,
        };
        if to == self.me {
            self.loopback.push_back(p);
        } else {
            self.out.push_back(Transmit::Unicast {
                to,
                bytes: p.to_bytes(),
            });
        }
    }

    fn run_loopback(&mut self) {
        while let Some(p) = self.loopback.pop_front() {
            self.dispatch(self.me, p);
        }
    }

    fn dispatch(&mut self, from: ProcessAddr, p: Packet) {
        let g = p.group;
        let now = self.now;
        if let Some(a) = self.agents.get_mut(&g) {
            a.heard(from, now);
        }
        match p.msg {
            Msg::JoinReq { name } => match &mut self.registry {
                Some(r) => {
                    let a = r.join(&name, from, now);
                    self.send(
                        from,
                        a.group,
                        Msg::JoinRep {
                            name,
                            agent: a.agent,
                        },
                    );
                }
                None => self.stats.misdirected += 1,
            },
            Msg::LeaveNote => match &mut self.registry {
                Some(r) => {
                    if let Some(members) = r.left(g, from) {
                        for m in members {
                            self.send(m, g, Msg::Gone);
                        }
                    }
                }
                None => self.stats.misdirected += 1,
            },
            Msg::Failed(m) => match &mut self.registry {
                Some(r) => {
                    if r.group(g).is_some_and(|rec| rec.agent == from) {
                        r.left(g, m);
                    } else {
                        self.stats.misdirected += 1;
                    }
                }
                None => self.stats.misdirected += 1,
            },
            Msg::AgentHeartbeat => match &mut self.registry {
                Some(r) => r.heard_agent(g, from, now),
                None => self.stats.misdirected += 1,
            },
            Msg::JoinRep { name, agent } => self.on_join_rep(from, g, name, agent),
            Msg::AgentProbe => {
                if self.agents.contains_key(&g) && from == self.registry_addr {
                    self.send(from, g, Msg::AgentHeartbeat);
                } else {
                    self.stats.misdirected += 1;
                }
            }
            Msg::Gone => {
                if from == self.registry_addr && self.groups.contains_key(&g) {
                    self.agents.remove(&g);
                    self.next_agent_heartbeat.remove(&g);
                    self.drop_membership(g);
                    self.events.push_back(Event::Deleted { group: g });
                } else {
                    self.stats.misdirected += 1;
                }
            }
            Msg::Register => {
                if self.agents.contains_key(&g) {
                    self.admit(g, from);
                } else if self.awaiting(g) {
                    self.hold(
                        g,
                        from,
                        Packet {
                            msg: Msg::Register,
                            ..p
                        },
                    );
                } else {
                    self.stats.unknown_group += 1;
                }
            }
            Msg::LeaveReq => {
                if self.agents.contains_key(&g) {
                    self.remove_member(g, from, false);
                } else {
                    self.stats.misdirected += 1;
                }
            }
            Msg::Heartbeat => {
                if !self.agents.contains_key(&g) {
                    self.stats.misdirected += 1;
                }
            }
            Msg::Probe => match self.groups.get(&g) {
                Some(ms) if ms.agent == from => self.send(from, g, Msg::Heartbeat),
                _ => self.stats.misdirected += 1,
            },
            Msg::Welcome(w) => self.on_welcome(from, g, w),
            Msg::Left { expelled } => match self.groups.get(&g) {
                Some(ms) if ms.agent == from => {
                    self.drop_membership(g);
                    if !expelled {
                        self.send(self.registry_addr, g, Msg::LeaveNote);
                    }
                    self.events.push_back(Event::Left { group: g, expelled });
                }
                _ => self.stats.misdirected += 1,
            },
            msg => {
                let mcast = p.mcast;
                let awaiting = self.awaiting(g);
                match self.groups.get_mut(&g) {
                    Some(ms) => {
                        if let Msg::View(v) = msg {
                            if from != ms.agent {
                                self.stats.misdirected += 1;
                                return;
                            }
                            ms.member.install_view(v);
                        } else {
                            ms.member.handle(from, mcast, msg);
                        }
                        self.pump(g);
                    }
                    None if awaiting => self.hold(
                        g,
                        from,
                        Packet {
                            group: g,
                            mcast,
                            msg,
                        },
                    ),
                    None => self.stats.unknown_group += 1,
                }
            }
        }
    }

    /// Whether messages of group `g` may be for a join under way: one of
    /// group `g`, or one whose group number the registry has not told yet
    /// (another joiner's registration can overtake the registry's answer
    /// that makes this process the agent).
    fn awaiting(&self, g: GroupId) -> bool {
        self.joining
            .values()
            .any(|j| j.group.is_none_or(|x| x == g))
    }

    /// Forgets held messages of groups no join is waiting for any more.
    fn purge_pending(&mut self) {
        let keep: Vec<GroupId> = self
            .pending
            .keys()
            .copied()
            .filter(|&g| self.awaiting(g))
            .collect();
        let dropped: usize = self
            .pending
            .iter()
            .filter(|(g, _)| !keep.contains(g))
            .map(|(_, q)| q.len())
            .sum();
        self.stats.unknown_group += dropped as u64;
        self.pending.retain(|g, _| keep.contains(g));
    }

    fn hold(&mut self, g: GroupId, from: ProcessAddr, p: Packet) {
        let held: usize = self.pending.values().map(VecDeque::len).sum();
        if held >= self.cfg.max_pending {
            self.stats.pending_dropped += 1;
        } else {
            self.pending.entry(g).or_default().push_back((from, p));
        }
    }

    fn on_join_rep(&mut self, from: ProcessAddr, g: GroupId, name: String, agent: ProcessAddr) {
        if from != self.registry_addr {
            self.stats.misdirected += 1;
            return;
        }
        let Some(j) = self.joining.get_mut(&name) else {
            self.stats.misdirected += 1;
            return;
        };
        j.group = Some(g);
        j.agent = Some(agent);
        if agent == self.me {
            // A new group: this process is its agent and root.
            self.joining.remove(&name);
            let a = Agent::new(g, self.me, self.cfg.detect);
            let view = a.view();
            self.agents.insert(g, a);
            self.next_agent_heartbeat
                .insert(g, self.now + self.cfg.heartbeat);
            let me = SourceId {
                addr: self.me,
                inc: view.version,
            };
            let mut member = Member::new(g, me, self.cfg.member.clone());
            let version = view.version;
            member.welcome(Welcome {
                view,
                starts: Vec::new(),
                barrier: 0,
                reduce: 0,
            });
            self.groups.insert(
                g,
                Membership {
                    name: name.clone(),
                    agent: self.me,
                    member,
                    links: BTreeSet::new(),
                    next_heartbeat: Time::NEVER,
                    leave_asked: false,
                },
            );
            self.events.push_back(Event::Joined {
                group: g,
                name,
                version,
            });
            self.pump(g);
            self.replay_pending(g);
        } else {
            self.send(agent, g, Msg::Register);
        }
        self.purge_pending();
    }

    fn on_welcome(&mut self, from: ProcessAddr, g: GroupId, w: Welcome) {
        let Some(name) = self
            .joining
            .iter()
            .find(|(_, j)| j.group == Some(g) && j.agent == Some(from))
            .map(|(n, _)| n.clone())
        else {
            self.stats.misdirected += 1;
            return;
        };
        let Some(inc) = w.view.entry(self.me).map(|e| e.inc) else {
            self.stats.misdirected += 1;
            return;
        };
        self.joining.remove(&name);
        let version = w.view.version;
        let mut member = Member::new(g, SourceId { addr: self.me, inc }, self.cfg.member.clone());
        member.welcome(w);
        self.groups.insert(
            g,
            Membership {
                name: name.clone(),
                agent: from,
                member,
                links: BTreeSet::new(),
                next_heartbeat: self.now + self.cfg.heartbeat,
                leave_asked: false,
            },
        );
        self.events.push_back(Event::Joined {
            group: g,
            name,
            version,
        });
        self.pump(g);
        self.replay_pending(g);
        self.purge_pending();
    }

    fn replay_pending(&mut self, g: GroupId) {
        if let Some(q) = self.pending.remove(&g) {
            for (from, p) in q {
                self.dispatch(from, p);
            }
        }
    }

    /// The agent admits `m`: the root member takes the new view at the
    /// same instant as the newcomer's starting point is read from it.
    fn admit(&mut self, g: GroupId, m: ProcessAddr) {
        let now = self.now;
        let Some(a) = self.agents.get_mut(&g) else {
            return;
        };
        if m == a.root() {
            return;
        }
        let view = a.admit(m, now);
        let Some(ms) = self.groups.get_mut(&g) else {
            return;
        };
        let (starts, barrier, reduce) = ms.member.frontier();
        ms.member.install_view(view.clone());
        // The welcome goes first: what the root sends the newcomer next
        // (its greeting, the multicast) needs the newcomer's member.
        self.send(
            m,
            g,
            Msg::Welcome(Welcome {
                view: view.clone(),
                starts,
                barrier,
                reduce,
            }),
        );
        self.pump(g);
        for other in view.members() {
            if other != self.me && other != m {
                self.send(other, g, Msg::View(view.clone()));
            }
        }
    }

    /// The agent removes `m` (it left, or `expelled` as failed).
    fn remove_member(&mut self, g: GroupId, m: ProcessAddr, expelled: bool) {
        let Some(view) = self.agents.get_mut(&g).and_then(|a| a.remove(m)) else {
            return;
        };
        if let Some(ms) = self.groups.get_mut(&g) {
            ms.member.install_view(view.clone());
            self.pump(g);
        }
        for other in view.members() {
            if other != self.me {
                self.send(other, g, Msg::View(view.clone()));
            }
        }
        self.send(m, g, Msg::Left { expelled });
        if expelled {
            self.send(self.registry_addr, g, Msg::Failed(m));
            self.events.push_back(Event::MemberFailed {
                group: g,
                member: m,
            });
        }
    }

    /// Removes this process's membership of `g` and closes its links.
    fn drop_membership(&mut self, g: GroupId) {
        if let Some(ms) = self.groups.remove(&g) {
            for p in ms.links {
                self.unref(p);
            }
        }
    }

    fn unref(&mut self, p: ProcessAddr) {
        if let Some(n) = self.links.get_mut(&p) {
            *n -= 1;
            if *n == 0 {
                self.links.remove(&p);
                self.events.push_back(Event::LinkClosed { peer: p });
            }
        }
    }

    /// Hands the member's outputs on, then updates link counts and the
    /// leave protocol.
    fn pump(&mut self, g: GroupId) {
        let mut outs = Vec::new();
        let Some(ms) = self.groups.get_mut(&g) else {
            return;
        };
        while let Some(o) = ms.member.poll_output() {
            outs.push(o);
        }
        let members: Vec<ProcessAddr> = ms
            .member
            .view()
            .map(|v| v.members().filter(|&p| p != self.me).collect())
            .unwrap_or_default();
        for o in outs {
            match o {
                Output::Unicast { to, msg } => self.send(to, g, msg),
                Output::Multicast(msg) => {
                    if !members.is_empty() {
                        let bytes = Packet {
                            group: g,
                            mcast: true,
                            msg,
                        }
                        .to_bytes();
                        self.out.push_back(Transmit::Multicast {
                            group: g,
                            to: members.clone(),
                            bytes,
                        });
                    }
                }
                Output::Deliver { source, seq, data } => self.events.push_back(Event::Deliver {
                    group: g,
                    source,
                    seq,
                    data,
                }),
                Output::SendComplete { seq } => {
                    self.events.push_back(Event::SendComplete { group: g, seq })
                }
                Output::BarrierReleased { epoch } => self
                    .events
                    .push_back(Event::BarrierReleased { group: g, epoch }),
                Output::BarrierComplete { epoch } => self
                    .events
                    .push_back(Event::BarrierComplete { group: g, epoch }),
                Output::ReduceResult { epoch, values } => {
                    self.events.push_back(Event::ReduceResult {
                        group: g,
                        epoch,
                        values,
                    })
                }
                Output::ViewChanged { version } => self.events.push_back(Event::ViewChanged {
                    group: g,
                    version,
                    members: members.len() + 1,
                }),
            }
        }
        self.sync_links(g);
        self.check_leaving(g);
    }

    fn sync_links(&mut self, g: GroupId) {
        let Some(ms) = self.groups.get_mut(&g) else {
            return;
        };
        let now: BTreeSet<ProcessAddr> = ms.member.links().into_iter().collect();
        let added: Vec<ProcessAddr> = now.difference(&ms.links).copied().collect();
        let removed: Vec<ProcessAddr> = ms.links.difference(&now).copied().collect();
        ms.links = now;
        for p in added {
            let n = self.links.entry(p).or_insert(0);
            *n += 1;
            if *n == 1 {
                self.events.push_back(Event::LinkOpened { peer: p });
            }
        }
        for p in removed {
            self.unref(p);
        }
    }

    fn check_leaving(&mut self, g: GroupId) {
        let Some(ms) = self.groups.get_mut(&g) else {
            return;
        };
        if ms.member.is_leaving() && !ms.leave_asked && ms.member.sends_complete() {
            ms.leave_asked = true;
            let agent = ms.agent;
            self.send(agent, g, Msg::LeaveReq);
        }
    }
}
