//! One process's state in one group, as a sans-IO state machine.
//!
//! A [`Member`] is handed what arrives (a message from a tree link or from
//! the root's multicast, a new view) and what the application asks (send,
//! barrier, reduce, leave), and hands back [`Output`]s: messages to one
//! tree neighbour, a multicast (root only), and the application's events.
//! It owns no socket, thread or clock, and needs no time: the links under
//! it deliver reliably, so it has no timer of its own; heartbeats and
//! failure detection run in the process's [`GroupNode`](super::GroupNode),
//! which is given the time.
//!
//! Rules (the Hybrid-Tree design's Hybrid-Tree, see the [module documentation](super)):
//!
//! - **Sending.** A non-root source sends a message on each of its tree
//!   links; the root multicasts its own messages.
//! - **Forwarding.** A non-root member forwards the first copy it gets on a
//!   tree link on every other tree link. A copy that came on the multicast
//!   is never forwarded. The root forwards nothing on tree links: it
//!   multicasts what it receives, in sequence order per source, so that
//!   "the root has multicast every message below its next expected number"
//!   holds and a newcomer can start there.
//! - **Duplicates and order.** A copy is identified by (group, source
//!   incarnation, sequence number); later copies are dropped. Each source's
//!   messages are delivered in sequence order.
//! - **Acknowledgements.** Cumulative per source: an `ACK` for source `s`
//!   with value `n` says that every member on the sender's side of the link
//!   has all of `s`'s messages below `n`. A member reports on the link
//!   towards `s` the minimum of its own next expected number and what its
//!   other links reported, and only when it grows: a member acknowledges
//!   after all its other links did, merging them into one. A source's
//!   message is complete when every one of its own links acknowledged it,
//!   so a source handles at most one acknowledgement per link per message,
//!   its degree, not the group size.
//! - **Retention.** A member keeps a message until every link that leads
//!   away from its source acknowledged it. When a link appears (a
//!   newcomer, or children re-parented after a departure) both ends send a
//!   `HELLO` with their next expected number per source, and each resends
//!   the retained messages the other lacks: an orphaned subtree gets what
//!   it missed, and its messages that were lost with the departed member
//!   climb on to the root.
//! - **Newcomers.** A newcomer starts at the root's next expected number of
//!   every source, and delivers a message only if it was sent in a view
//!   that already contained it (the `stamp`): messages sent while it was
//!   absent are never delivered to it, those sent after are, all of them.
//! - **Barrier.** Arrival is reduced up the tree (a member reports the
//!   smallest epoch its subtree and itself reached), the root multicasts
//!   the release, and confirmations are reduced up the tree the same way.
//! - **Reduce.** Each member combines its value with its children's partial
//!   results and passes the result up; the root has the result and, if
//!   asked, multicasts it.
//!
//! A source's own messages are not delivered back to it. The messages of
//! a member that fails may reach only part of the group (there is no
//! uniform agreement on a failed source's last messages); every other
//! source's messages reach every surviving member.

use super::view::{SourceId, Topology, View};
use super::wire::{Data, Hello, Msg, ReduceOp, Welcome};
use super::GroupId;
use bcl_core::ProcessAddr;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// How far ahead of the next expected message a sequence number may be;
/// farther ones are dropped as malformed (they would only fill memory).
const MAX_AHEAD: u64 = 1 << 16;
/// Reduce partial results kept for resending to a new parent.
const KEEP_PARTS: usize = 64;
/// How far ahead of the last finished reduce a child's epoch may be.
const MAX_EPOCH_AHEAD: u64 = 1 << 12;

/// Settings of a member.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// Most own messages not yet complete; sending more is refused with
    /// [`SendError::WindowFull`]. Bounds what every member retains.
    pub window: usize,
    /// Most messages held back while the member has no view yet (before
    /// its welcome) or from a link it does not know yet.
    pub max_early: usize,
}

impl Default for MemberConfig {
    fn default() -> Self {
        MemberConfig {
            window: 64,
            max_early: 1 << 14,
        }
    }
}

/// Why a send, barrier or reduce call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Too many own messages are not complete yet; try again after a
    /// completion.
    #[error("send window full")]
    WindowFull,
    /// The member is leaving.
    #[error("member is leaving")]
    Leaving,
    /// The member has no view yet.
    #[error("member has not joined yet")]
    NotJoined,
}

/// What a member hands back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send `msg` to tree neighbour (or agent) `to`.
    Unicast {
        /// The destination.
        to: ProcessAddr,
        /// The message.
        msg: Msg,
    },
    /// Send `msg` to every other member on the root's multicast.
    Multicast(Msg),
    /// A message for the application, in order per source.
    Deliver {
        /// Its source.
        source: SourceId,
        /// Its sequence number.
        seq: u64,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// Own message `seq` reached every member.
    SendComplete {
        /// The sequence number [`Member::send`] returned.
        seq: u64,
    },
    /// Barrier `epoch` is released: every member arrived.
    BarrierReleased {
        /// The epoch [`Member::barrier`] returned.
        epoch: u64,
    },
    /// At the root: every member confirmed the release of barrier `epoch`.
    BarrierComplete {
        /// The epoch.
        epoch: u64,
    },
    /// The result of reduce `epoch` (at the root, and everywhere when
    /// multicast).
    ReduceResult {
        /// The epoch [`Member::reduce`] returned.
        epoch: u64,
        /// The combined values.
        values: Vec<u64>,
    },
    /// A new view was installed.
    ViewChanged {
        /// Its version.
        version: u32,
    },
}

/// Counters of a member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Copies dropped as duplicates.
    pub duplicates: u64,
    /// Messages received but not delivered because they were sent before
    /// this member joined.
    pub skipped: u64,
    /// Messages forwarded on tree links.
    pub forwarded: u64,
    /// Messages resent to a new link after a `HELLO`.
    pub resent: u64,
    /// `ACK` messages received that acknowledged this member's own
    /// messages (at most its degree per message).
    pub own_acks: u64,
    /// Messages that did not fit the member's state (from a former link,
    /// an older view, a sequence number far ahead) and were dropped.
    pub stale: u64,
    /// Messages held back until the member had a view that explains them.
    pub early: u64,
    /// Messages dropped because the early queue was full.
    pub early_dropped: u64,
    /// Views refused (not a tree, or not containing this member).
    pub bad_views: u64,
}

/// A message copy a member holds: not yet delivered, or retained until
/// acknowledged.
#[derive(Clone, Debug)]
struct Held {
    stamp: u32,
    data: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
struct Source {
    /// Next sequence number to deliver; everything below is delivered
    /// (or skipped).
    next: u64,
    /// Held copies by sequence number.
    msgs: BTreeMap<u64, Held>,
    /// For a source newer than this member's view: the link its first copy
    /// came on.
    guess: Option<ProcessAddr>,
}

/// State of one tree link.
#[derive(Clone, Debug, Default)]
struct Link {
    /// Per source, what the neighbour acknowledged.
    acks: HashMap<SourceId, u64>,
    /// Per source, what this member acknowledged to the neighbour.
    reported: HashMap<SourceId, u64>,
    /// A child's barrier arrival and confirmation.
    arrive: u64,
    confirm: u64,
    /// A child's reduce partial results by epoch.
    parts: BTreeMap<u64, (ReduceOp, Vec<u64>)>,
}

/// Where a source's messages come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// This member.
    Me,
    /// A member of the view, behind this link.
    Toward(ProcessAddr),
    /// Newer than this member's view; maybe the link its first copy came on.
    Unknown(Option<ProcessAddr>),
    /// An incarnation that left.
    Gone,
}

/// A reduce contribution of this member.
#[derive(Clone, Debug)]
struct MyPart {
    op: ReduceOp,
    values: Vec<u64>,
    to_all: bool,
}

/// One process's state in one group (see the module documentation).
#[derive(Clone, Debug)]
pub struct Member {
    group: GroupId,
    me: SourceId,
    cfg: MemberConfig,
    view: Option<View>,
    topo: Option<Topology>,
    /// The version that admitted this member.
    joined: u32,
    sources: BTreeMap<SourceId, Source>,
    links: BTreeMap<ProcessAddr, Link>,
    /// Own messages below this are complete.
    own_done: u64,
    leaving: bool,
    // Barrier.
    b_calls: u64,
    b_released: u64,
    b_issued: u64,
    b_complete: u64,
    b_arrive_sent: u64,
    b_confirm_sent: u64,
    // Reduce.
    r_calls: u64,
    r_mine: BTreeMap<u64, MyPart>,
    r_sent: u64,
    r_seen: u64,
    r_kept: VecDeque<(u64, ReduceOp, Vec<u64>)>,
    /// Messages waiting for a view that explains them.
    early: VecDeque<(ProcessAddr, bool, Msg)>,
    /// Acknowledgements to send at the end of the current call.
    acks_pending: BTreeMap<ProcessAddr, BTreeMap<SourceId, u64>>,
    out: VecDeque<Output>,
    stats: MemberStats,
}

impl Member {
    /// A member of `group` that has no view yet: it holds back what
    /// arrives until [`Member::welcome`].
    pub fn new(group: GroupId, me: SourceId, cfg: MemberConfig) -> Member {
        Member {
            group,
            me,
            cfg,
            view: None,
            topo: None,
            joined: 0,
            sources: BTreeMap::new(),
            links: BTreeMap::new(),
            own_done: 0,
            leaving: false,
            b_calls: 0,
            b_released: 0,
            b_issued: 0,
            b_complete: 0,
            b_arrive_sent: 0,
            b_confirm_sent: 0,
            r_calls: 0,
            r_mine: BTreeMap::new(),
            r_sent: 0,
            r_seen: 0,
            r_kept: VecDeque::new(),
            early: VecDeque::new(),
            acks_pending: BTreeMap::new(),
            out: VecDeque::new(),
            stats: MemberStats::default(),
        }
    }

    /// A member of a group that starts with `view` and no history, all of
    /// whose members are created at once (a static group): its links are
    /// taken as established, no `HELLO` is sent.
    pub fn founding(group: GroupId, me: SourceId, view: View, cfg: MemberConfig) -> Member {
        let mut m = Member::new(group, me, cfg);
        m.start(view.version, &[], 0, 0);
        m.install(view, false);
        m.flush();
        m
    }

    /// Starts as a newcomer admitted by `w`: the view, and where each
    /// source, the barrier and the reduce stand.
    pub fn welcome(&mut self, w: Welcome) {
        if self.view.is_some() {
            self.stats.stale += 1;
            return;
        }
        self.start(w.view.version, &w.starts, w.barrier, w.reduce);
        self.install(w.view, true);
        self.replay_early();
        self.flush();
    }

    fn start(&mut self, joined: u32, starts: &[(SourceId, u64)], barrier: u64, reduce: u64) {
        self.joined = joined;
        for &(s, n) in starts {
            if s != self.me {
                self.sources.entry(s).or_default().next = n;
            }
        }
        self.sources.entry(self.me).or_default();
        for src in self.sources.values_mut() {
            let next = src.next;
            src.msgs.retain(|&k, _| k >= next);
        }
        self.b_calls = barrier;
        self.b_released = barrier;
        self.b_issued = barrier;
        self.b_complete = barrier;
        self.r_calls = reduce;
        self.r_sent = reduce;
        self.r_seen = reduce;
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// This member's incarnation.
    pub fn id(&self) -> SourceId {
        self.me
    }

    /// The installed view, once welcomed.
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// This member's links and paths in the installed view.
    pub fn topology(&self) -> Option<&Topology> {
        self.topo.as_ref()
    }

    /// The current tree links.
    pub fn links(&self) -> Vec<ProcessAddr> {
        self.links.keys().copied().collect()
    }

    /// Whether the member has a view.
    pub fn is_joined(&self) -> bool {
        self.view.is_some()
    }

    /// Whether this member is the root.
    pub fn is_root(&self) -> bool {
        self.topo.as_ref().is_some_and(Topology::is_root)
    }

    /// Counters.
    pub fn stats(&self) -> MemberStats {
        self.stats
    }

    /// Own messages sent and not yet complete.
    pub fn in_flight(&self) -> u64 {
        self.own_next() - self.own_done
    }

    /// Whether every own message is complete.
    pub fn sends_complete(&self) -> bool {
        self.in_flight() == 0
    }

    /// Whether [`Member::begin_leave`] was called.
    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// Stops accepting sends: the member is about to leave, once its own
    /// messages are complete ([`Member::sends_complete`]).
    pub fn begin_leave(&mut self) {
        self.leaving = true;
    }

    /// What a newcomer admitted now needs (at the root): per source the
    /// next sequence number the root will multicast, the barrier epochs
    /// released and the reduce epochs finished.
    pub fn frontier(&self) -> (Vec<(SourceId, u64)>, u64, u64) {
        let starts = self.sources.iter().map(|(&s, src)| (s, src.next)).collect();
        (starts, self.b_released, self.r_sent)
    }

    /// Message copies held for in-order delivery or for resending (for
    /// memory bounds).
    pub fn held(&self) -> usize {
        self.sources.values().map(|s| s.msgs.len()).sum()
    }

    /// Sources (member incarnations) this member keeps state for.
    pub fn sources(&self) -> usize {
        self.sources.len()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn own_next(&self) -> u64 {
        self.sources.get(&self.me).map_or(0, |s| s.next)
    }

    fn version(&self) -> u32 {
        self.view.as_ref().map_or(0, |v| v.version)
    }

    /// Sends `data` to every other member; returns its sequence number.
    /// [`Output::SendComplete`] follows when every member has it.
    pub fn send(&mut self, data: &[u8]) -> Result<u64, SendError> {
        if self.view.is_none() {
            return Err(SendError::NotJoined);
        }
        if self.leaving {
            return Err(SendError::Leaving);
        }
        if self.in_flight() >= self.cfg.window as u64 {
            return Err(SendError::WindowFull);
        }
        let stamp = self.version();
        let me = self.me;
        let src = self.sources.entry(me).or_default();
        let seq = src.next;
        src.next += 1;
        src.msgs.insert(
            seq,
            Held {
                stamp,
                data: data.to_vec(),
            },
        );
        let msg = Msg::Data(Data {
            source: me,
            seq,
            stamp,
            payload: data.to_vec(),
        });
        if self.is_root() {
            self.out.push_back(Output::Multicast(msg));
        } else {
            for &l in self.links.keys() {
                self.out.push_back(Output::Unicast {
                    to: l,
                    msg: msg.clone(),
                });
            }
        }
        self.update_own();
        self.flush();
        Ok(seq)
    }

    /// Enters the next barrier; returns its epoch.
    /// [`Output::BarrierReleased`] follows when every member entered it.
    pub fn barrier(&mut self) -> Result<u64, SendError> {
        if self.view.is_none() {
            return Err(SendError::NotJoined);
        }
        self.b_calls = self.b_calls.saturating_add(1);
        let e = self.b_calls;
        if e <= self.b_released {
            self.out.push_back(Output::BarrierReleased { epoch: e });
        }
        self.update_barrier();
        self.flush();
        Ok(e)
    }

    /// Contributes `values` to the next reduce with `op`; returns its
    /// epoch. The root gets [`Output::ReduceResult`]; with `to_all` (as the
    /// root passes it) the root multicasts the result and every member
    /// gets it.
    pub fn reduce(&mut self, op: ReduceOp, values: &[u64], to_all: bool) -> Result<u64, SendError> {
        if self.view.is_none() {
            return Err(SendError::NotJoined);
        }
        self.r_calls = self.r_calls.saturating_add(1);
        let e = self.r_calls;
        self.r_mine.insert(
            e,
            MyPart {
                op,
                values: values.to_vec(),
                to_all,
            },
        );
        self.update_reduce();
        self.flush();
        Ok(e)
    }

    /// A message from `from` (on the root's multicast if `mcast`).
    pub fn handle(&mut self, from: ProcessAddr, mcast: bool, msg: Msg) {
        self.dispatch(from, mcast, msg);
        self.flush();
    }

    /// Installs `view` if it is newer than the current one (a view change
    /// from the agent). New links are greeted with a `HELLO`.
    pub fn install_view(&mut self, view: View) {
        if self.view.is_none() {
            // A view before the welcome: wait for the welcome.
            self.stash(self.me.addr, false, Msg::View(view));
            return;
        }
        self.install(view, true);
        self.replay_early();
        self.flush();
    }

    fn dispatch(&mut self, from: ProcessAddr, mcast: bool, msg: Msg) {
        if self.view.is_none() {
            self.stash(from, mcast, msg);
            return;
        }
        match msg {
            Msg::Data(d) => self.on_data(from, mcast, d),
            Msg::Ack(entries) => self.on_ack(from, entries),
            Msg::Hello(h) => self.on_hello(from, h),
            Msg::Arrive(e) => match self.links.get_mut(&from) {
                Some(l)
                    if self
                        .topo
                        .as_ref()
                        .is_some_and(|t| t.children.contains(&from)) =>
                {
                    l.arrive = l.arrive.max(e);
                    self.update_barrier();
                }
                _ => self.stats.stale += 1,
            },
            Msg::Confirm(e) => match self.links.get_mut(&from) {
                Some(l)
                    if self
                        .topo
                        .as_ref()
                        .is_some_and(|t| t.children.contains(&from)) =>
                {
                    l.confirm = l.confirm.max(e);
                    self.update_barrier();
                }
                _ => self.stats.stale += 1,
            },
            Msg::Release(e) => self.on_release(e),
            Msg::Part { epoch, op, values } => {
                let child = self
                    .topo
                    .as_ref()
                    .is_some_and(|t| t.children.contains(&from));
                if child
                    && epoch > self.r_sent
                    && epoch <= self.r_sent.saturating_add(MAX_EPOCH_AHEAD)
                {
                    if let Some(l) = self.links.get_mut(&from) {
                        l.parts.insert(epoch, (op, values));
                    }
                    self.update_reduce();
                } else {
                    self.stats.stale += 1;
                }
            }
            Msg::Result { epoch, values, .. } => {
                if epoch > self.r_seen && epoch <= self.r_calls {
                    self.r_seen = epoch;
                    self.out.push_back(Output::ReduceResult { epoch, values });
                } else {
                    self.stats.stale += 1;
                }
            }
            Msg::View(v) => {
                self.install(v, true);
                self.replay_early();
            }
            // Management messages are not the member's.
            _ => self.stats.stale += 1,
        }
    }

    fn stash(&mut self, from: ProcessAddr, mcast: bool, msg: Msg) {
        if self.early.len() >= self.cfg.max_early {
            self.stats.early_dropped += 1;
            return;
        }
        self.stats.early += 1;
        self.early.push_back((from, mcast, msg));
    }

    /// Handles again what was held back; what still does not fit is held
    /// again or dropped.
    fn replay_early(&mut self) {
        let early = std::mem::take(&mut self.early);
        for (from, mcast, msg) in early {
            self.stats.early = self.stats.early.saturating_sub(1);
            match msg {
                Msg::View(v) => self.install(v, true),
                msg => self.dispatch(from, mcast, msg),
            }
        }
    }

    fn dir(&self, s: SourceId) -> Dir {
        if s == self.me {
            return Dir::Me;
        }
        let Some(topo) = &self.topo else {
            return Dir::Unknown(None);
        };
        match topo.inc(s.addr) {
            Some(inc) if inc == s.inc => match topo.toward(s.addr) {
                Some(l) => Dir::Toward(l),
                None => Dir::Unknown(None),
            },
            _ if s.inc > self.version() => Dir::Unknown(
                self.sources
                    .get(&s)
                    .and_then(|src| src.guess)
                    .filter(|&g| topo.is_link(g)),
            ),
            _ => Dir::Gone,
        }
    }

    fn on_data(&mut self, from: ProcessAddr, mcast: bool, d: Data) {
        let s = d.source;
        if s == self.me {
            self.stats.duplicates += 1;
            return;
        }
        let is_root = self.is_root();
        let is_link = self.links.contains_key(&from);
        if !self.sources.contains_key(&s) && self.dir(s) == Dir::Gone {
            // A departed incarnation whose state was pruned.
            self.stats.stale += 1;
            return;
        }
        let src = self.sources.entry(s).or_default();
        if d.seq < src.next || src.msgs.contains_key(&d.seq) {
            self.stats.duplicates += 1;
            return;
        }
        if d.seq - src.next > MAX_AHEAD {
            self.stats.stale += 1;
            return;
        }
        if !mcast && is_link && src.guess.is_none() {
            src.guess = Some(from);
        }
        src.msgs.insert(
            d.seq,
            Held {
                stamp: d.stamp,
                data: d.payload.clone(),
            },
        );
        if !mcast && !is_root {
            let msg = Msg::Data(d);
            for &l in self.links.keys() {
                if l != from {
                    self.stats.forwarded += 1;
                    self.out.push_back(Output::Unicast {
                        to: l,
                        msg: msg.clone(),
                    });
                }
            }
        }
        self.drain(s);
        self.update_source(s);
    }

    /// Delivers `s`'s messages that are next in order; the root multicasts
    /// them.
    fn drain(&mut self, s: SourceId) {
        let is_root = self.is_root();
        let joined = self.joined;
        let Some(src) = self.sources.get_mut(&s) else {
            return;
        };
        while let Some(h) = src.msgs.get(&src.next) {
            let seq = src.next;
            let Some(after) = seq.checked_add(1) else {
                break;
            };
            src.next = after;
            if h.stamp >= joined {
                self.stats.delivered += 1;
                self.out.push_back(Output::Deliver {
                    source: s,
                    seq,
                    data: h.data.clone(),
                });
            } else {
                self.stats.skipped += 1;
            }
            if is_root {
                self.out.push_back(Output::Multicast(Msg::Data(Data {
                    source: s,
                    seq,
                    stamp: h.stamp,
                    payload: h.data.clone(),
                })));
            }
        }
    }

    /// Recomputes what can be dropped and what to acknowledge for `s`.
    fn update_source(&mut self, s: SourceId) {
        let inl = match self.dir(s) {
            Dir::Me => return self.update_own(),
            Dir::Gone => {
                if let Some(src) = self.sources.get_mut(&s) {
                    let next = src.next;
                    src.msgs.retain(|&k, _| k >= next);
                }
                return;
            }
            Dir::Toward(l) | Dir::Unknown(Some(l)) => Some(l),
            Dir::Unknown(None) => None,
        };
        let covered = self
            .links
            .iter()
            .filter(|(&l, _)| Some(l) != inl)
            .map(|(_, link)| link.acks.get(&s).copied().unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX);
        let Some(src) = self.sources.get_mut(&s) else {
            return;
        };
        let r = src.next.min(covered);
        src.msgs.retain(|&k, _| k >= r);
        if let Some(l) = inl {
            if let Some(link) = self.links.get_mut(&l) {
                let rep = link.reported.entry(s).or_insert(0);
                if r > *rep {
                    *rep = r;
                    self.acks_pending.entry(l).or_default().insert(s, r);
                }
            }
        }
    }

    /// Completes own messages every link acknowledged.
    fn update_own(&mut self) {
        let me = self.me;
        let next = self.own_next();
        let done = self
            .links
            .values()
            .map(|l| l.acks.get(&me).copied().unwrap_or(0))
            .min()
            .unwrap_or(next)
            .min(next);
        if done > self.own_done {
            for seq in self.own_done..done {
                self.out.push_back(Output::SendComplete { seq });
            }
            self.own_done = done;
            if let Some(src) = self.sources.get_mut(&me) {
                src.msgs.retain(|&k, _| k >= done);
            }
        }
    }

    fn on_ack(&mut self, from: ProcessAddr, entries: Vec<(SourceId, u64)>) {
        let Some(link) = self.links.get_mut(&from) else {
            self.stats.stale += 1;
            return;
        };
        let mut touched = BTreeSet::new();
        for (s, v) in entries {
            let a = link.acks.entry(s).or_insert(0);
            if v > *a {
                *a = v;
                touched.insert(s);
            }
        }
        if touched.contains(&self.me) {
            self.stats.own_acks += 1;
        }
        for s in touched {
            self.update_source(s);
        }
    }

    fn on_hello(&mut self, from: ProcessAddr, h: Hello) {
        if !self.links.contains_key(&from) {
            if h.version > self.version() {
                self.stash(from, false, Msg::Hello(h));
            } else {
                self.stats.stale += 1;
            }
            return;
        }
        let parent = self.topo.as_ref().and_then(|t| t.parent);
        // Resend what the new neighbour lacks, for sources whose messages
        // flow from here towards it.
        let peer: HashMap<SourceId, u64> = h.next.into_iter().collect();
        let sources: Vec<SourceId> = self.sources.keys().copied().collect();
        for s in sources {
            let towards_peer = match self.dir(s) {
                Dir::Me | Dir::Unknown(None) => true,
                Dir::Toward(l) | Dir::Unknown(Some(l)) => l != from,
                Dir::Gone => false,
            };
            if !towards_peer {
                continue;
            }
            let from_seq = peer.get(&s).copied().unwrap_or(0);
            let src = &self.sources[&s];
            for (&seq, held) in src.msgs.range(from_seq..) {
                self.stats.resent += 1;
                self.out.push_back(Output::Unicast {
                    to: from,
                    msg: Msg::Data(Data {
                        source: s,
                        seq,
                        stamp: held.stamp,
                        payload: held.data.clone(),
                    }),
                });
            }
        }
        if let Some(link) = self.links.get_mut(&from) {
            link.reported.clear();
        }
        if parent == Some(from) {
            self.b_arrive_sent = 0;
            self.b_confirm_sent = 0;
            for (e, op, values) in &self.r_kept {
                if *e > h.reduce_sent {
                    self.out.push_back(Output::Unicast {
                        to: from,
                        msg: Msg::Part {
                            epoch: *e,
                            op: *op,
                            values: values.clone(),
                        },
                    });
                }
            }
        }
        self.update_all();
    }

    fn on_release(&mut self, e: u64) {
        // Only the root releases; a release that reaches it is bogus.
        if e <= self.b_released || self.is_root() {
            self.stats.stale += 1;
            return;
        }
        // Events only for epochs this member entered: a bounded range,
        // whatever the message says.
        for epoch in self.b_released.saturating_add(1)..=e.min(self.b_calls) {
            self.out.push_back(Output::BarrierReleased { epoch });
        }
        self.b_released = e;
        self.update_barrier();
    }

    fn update_barrier(&mut self) {
        let Some(topo) = &self.topo else {
            return;
        };
        let children = &topo.children;
        let parent = topo.parent;
        let min_child = |f: fn(&Link) -> u64| {
            children
                .iter()
                .map(|c| self.links.get(c).map_or(0, f))
                .min()
                .unwrap_or(u64::MAX)
        };
        let arrived = self.b_calls.min(min_child(|l| l.arrive));
        let confirm_children = min_child(|l| l.confirm);
        match parent {
            None => {
                if arrived > self.b_issued {
                    self.b_issued = arrived;
                    self.out.push_back(Output::Multicast(Msg::Release(arrived)));
                    for epoch in self.b_released.saturating_add(1)..=arrived {
                        self.out.push_back(Output::BarrierReleased { epoch });
                    }
                    self.b_released = self.b_released.max(arrived);
                }
                let confirmed = self.b_released.min(confirm_children);
                if confirmed > self.b_complete {
                    for epoch in self.b_complete.saturating_add(1)..=confirmed {
                        self.out.push_back(Output::BarrierComplete { epoch });
                    }
                    self.b_complete = confirmed;
                }
            }
            Some(p) => {
                if arrived > self.b_arrive_sent {
                    self.b_arrive_sent = arrived;
                    self.out.push_back(Output::Unicast {
                        to: p,
                        msg: Msg::Arrive(arrived),
                    });
                }
                let confirmed = self.b_released.min(confirm_children);
                if confirmed > self.b_confirm_sent {
                    self.b_confirm_sent = confirmed;
                    self.out.push_back(Output::Unicast {
                        to: p,
                        msg: Msg::Confirm(confirmed),
                    });
                }
            }
        }
    }

    fn update_reduce(&mut self) {
        let Some(topo) = &self.topo else {
            return;
        };
        let children = topo.children.clone();
        let parent = topo.parent;
        while let Some(e) = self.r_sent.checked_add(1) {
            let Some(mine) = self.r_mine.get(&e) else {
                break;
            };
            let ready = children
                .iter()
                .all(|c| self.links.get(c).is_some_and(|l| l.parts.contains_key(&e)));
            if !ready {
                break;
            }
            let MyPart { op, values, to_all } = mine.clone();
            let mut acc = values;
            for c in &children {
                if let Some((_, v)) = self.links.get_mut(c).and_then(|l| l.parts.remove(&e)) {
                    op.combine(&mut acc, &v);
                }
            }
            self.r_mine.remove(&e);
            self.r_sent = e;
            match parent {
                None => {
                    self.r_seen = e;
                    if to_all {
                        self.out.push_back(Output::Multicast(Msg::Result {
                            epoch: e,
                            op,
                            values: acc.clone(),
                        }));
                    }
                    self.out.push_back(Output::ReduceResult {
                        epoch: e,
                        values: acc,
                    });
                }
                Some(p) => {
                    self.out.push_back(Output::Unicast {
                        to: p,
                        msg: Msg::Part {
                            epoch: e,
                            op,
                            values: acc.clone(),
                        },
                    });
                    self.r_kept.push_back((e, op, acc));
                    if self.r_kept.len() > KEEP_PARTS {
                        self.r_kept.pop_front();
                    }
                }
            }
        }
        let sent = self.r_sent;
        for l in self.links.values_mut() {
            l.parts.retain(|&e, _| e > sent);
        }
    }

    fn update_all(&mut self) {
        let sources: Vec<SourceId> = self.sources.keys().copied().collect();
        for s in sources {
            self.update_source(s);
        }
        self.update_own();
        self.update_barrier();
        self.update_reduce();
    }

    /// Installs a newer view: links that went away are forgotten (with
    /// what they acknowledged and their partial results), new ones get a
    /// `HELLO` (when `hello`), and everything is recomputed.
    fn install(&mut self, view: View, hello: bool) {
        if self
            .view
            .as_ref()
            .is_some_and(|v| view.version <= v.version)
        {
            self.stats.stale += 1;
            return;
        }
        let Some(topo) = Topology::new(&view, self.me.addr) else {
            self.stats.bad_views += 1;
            return;
        };
        if topo.inc(self.me.addr) != Some(self.me.inc) {
            self.stats.bad_views += 1;
            return;
        }
        let new_links = topo.links();
        self.links.retain(|l, _| new_links.contains(l));
        let version = view.version;
        let mut greet = Vec::new();
        for &l in &new_links {
            if let std::collections::btree_map::Entry::Vacant(e) = self.links.entry(l) {
                e.insert(Link::default());
                greet.push(l);
            }
        }
        self.view = Some(view);
        self.topo = Some(topo);
        if hello && !greet.is_empty() {
            let next: Vec<(SourceId, u64)> = self
                .sources
                .iter()
                .filter(|(&s, _)| s != self.me)
                .map(|(&s, src)| (s, src.next))
                .collect();
            for l in greet {
                self.out.push_back(Output::Unicast {
                    to: l,
                    msg: Msg::Hello(Hello {
                        version,
                        reduce_sent: self.r_sent,
                        next: next.clone(),
                    }),
                });
            }
        }
        self.update_all();
        // Forget departed incarnations that have nothing held.
        let gone: Vec<SourceId> = self
            .sources
            .iter()
            .filter(|(_, src)| src.msgs.is_empty())
            .map(|(&s, _)| s)
            .filter(|&s| self.dir(s) == Dir::Gone)
            .collect();
        for s in gone {
            self.sources.remove(&s);
        }
        self.out.push_back(Output::ViewChanged { version });
    }

    /// Turns the acknowledgements gathered during a call into one `ACK`
    /// per link.
    fn flush(&mut self) {
        for (to, entries) in std::mem::take(&mut self.acks_pending) {
            self.out.push_back(Output::Unicast {
                to,
                msg: Msg::Ack(entries.into_iter().collect()),
            });
        }
    }
}
