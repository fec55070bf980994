//! Liveness: noticing that a peer we depend on has stopped answering.
//!
//! Retransmission timeouts notice a dead peer only while frames to it are
//! in flight, and only after `max_timeouts` of them (seconds). A peer we
//! merely wait for — a transfer it streams to us, a remote read it serves,
//! a buffer we posted for it, a rendezvous it has not answered — would be
//! waited for forever. So the port watches the peers it depends on and asks
//! a silent one whether it is still there:
//!
//! - **Watched peers only.** A peer is watched while it has frames in
//!   flight or queued, transfers in either direction, remote reads, a
//!   normal-channel buffer posted for it or a rendezvous waiting on it, or
//!   while the application marks it critical ([`Port::watch_peer`]). An
//!   idle peer costs nothing: no timer, no frame, so state and CPU stay flat
//!   in the number of idle peers.
//! - **Checks.** Once per `period` while any peer is watched, the port
//!   checks each watched peer: when did a valid frame of any kind last
//!   arrive from it? The receive path only notes the arrival's tick (about
//!   a millisecond, for the incarnation check), and the check reads it
//!   when the peer's received-frame counter moved; an exchange in progress
//!   sends no extra frame at all.
//! - **Ping.** A watched peer silent for half a period or more at a check
//!   is pinged: an ACK frame with the [`flags::PING`] bit, which the peer's
//!   port answers at once with an ACK frame (carrying its cumulative
//!   acknowledgement if it has one to give). An idle critical peer is so
//!   pinged once a period. The pings are the probes before the verdict.
//! - **Verdict.** A peer silent for `misses` periods since its last frame,
//!   and pinged meanwhile, is declared dead at that instant (the port's
//!   timer is set for it): exactly what [`Port::peer_gone`] does
//!   (everything to and from it fails, naming it; [`Port::poll_peer_event`]
//!   reports it). So a peer that stops is declared dead `misses` periods
//!   after its last frame, to the millisecond, and a live one that pauses
//!   for less than `misses − 1` periods (a busy CPU, a descheduled or
//!   stopped process, a long pause in the application) never is: it
//!   answers the ping waiting for it, or the next, before the bound. A port
//!   whose own check runs more than half a period late was itself stopped
//!   or starved: it pings the silent peers and judges none for another
//!   half period, so its own pause is not taken for theirs.
//!
//! A BCL process answers only while it makes progress (it is a library,
//! not a daemon): a rank computing without calling into it for longer than
//! the bound looks dead. The defaults (a period of 2 s, 5 misses: 10 to
//! 12 s, as long as a stalled transfer is given) leave room for that;
//! detection tests and fault-tolerant applications set shorter ones.
//!
//! With a [`NodeLiveness`] (what the job's processes of this node share,
//! see [`super::node`]) a silent peer's node may vouch for it instead, and
//! the pings go per node pair, not per peer.
//!
//! Peers reached through a method that never loses (shared memory) are
//! not pinged: their frames carry no acknowledgements, and such a method
//! sees a dead process itself (its process id) and reports it through
//! [`Port::peer_gone`].
//!
//! [`flags::PING`]: crate::wire::flags::PING

use super::node::{self, LivePorts, NodeLiveness, NODE_PORTS};
use super::peer::{Liveness, PeerIdx};
use super::Port;
use crate::addr::{NodeId, ProcessAddr};
use crate::time::Time;
use std::time::Duration;

/// Pings sent after the first to a peer silent for more than one check (a
/// suspect): with three per check, a path that loses 30 % of pings or
/// answers passes for dead only if it loses every one of ten exchanges in a
/// row (five checks), about six in a million.
pub(super) const SUSPECT_EXTRA_PINGS: u8 = 2;

/// How the port watches the peers it depends on: part of
/// [`PortConfig`](crate::PortConfig).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivenessConfig {
    /// Watch at all (default true). Off, a dead peer is noticed only by
    /// the retransmission timeouts of frames sent to it, and by the
    /// transfer-stall timeout.
    pub enabled: bool,
    /// Interval between the checks of the watched peers; a peer silent
    /// for half a period or more at a check is pinged (default 2 s).
    pub period: Duration,
    /// Periods of silence after which a watched peer is declared dead
    /// (default 5; at least 2, so that a ping goes first).
    pub misses: u32,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        LivenessConfig {
            enabled: true,
            period: Duration::from_secs(2),
            misses: 5,
        }
    }
}

impl LivenessConfig {
    /// The first field that cannot work and why.
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if self.period.is_zero() {
            return Some(("liveness.period", "must be positive".into()));
        }
        if self.misses < 2 {
            return Some((
                "liveness.misses",
                format!(
                    "is {}, must be at least 2 (a ping before the verdict)",
                    self.misses
                ),
            ));
        }
        None
    }

    /// Silence of a watched peer after which it is declared dead:
    /// `misses` periods after its last frame.
    pub fn bound(&self) -> Duration {
        self.period.saturating_mul(self.misses)
    }
}

/// A watched peer's liveness state (in the port's watch list, so that an
/// idle peer carries none of it).
pub(super) struct Watch {
    peer: PeerIdx,
    /// Its valid frames received as of the last check
    /// ([`PeerStats::frames_received`](crate::stats::PeerStats)): a check
    /// that finds more has heard from it, at no cost per frame.
    frames_seen: u64,
    /// Periodic checks in a row that found it silent (for half a period
    /// or more): pings sent since it was last heard from.
    silent_checks: u32,
    /// When it was last heard from (its last frame, to the tick; or the
    /// view of its node that last vouched for it).
    heard_at: Time,
}

impl Port {
    /// Marks `addr` critical (`true`): it is watched even when nothing is
    /// outstanding with it, and declared dead (reported by
    /// [`Port::poll_peer_event`]) when it stays silent for the liveness
    /// bound. `false` leaves it watched only while something is
    /// outstanding. Errors only if the peer table is full.
    pub fn watch_peer(
        &mut self,
        now: Time,
        addr: ProcessAddr,
        critical: bool,
    ) -> Result<(), super::SendError> {
        let idx = self.peer_idx_or_create(addr)?;
        self.peers[idx as usize]
            .liveness
            .set(Liveness::CRITICAL, critical);
        if critical {
            self.start_watching(idx, now);
        }
        Ok(())
    }

    /// Something about peer `idx` may now depend on it answering: watch it
    /// (its silence counts from the next check).
    pub(super) fn start_watching(&mut self, idx: PeerIdx, now: Time) {
        let p = &mut self.peers[idx as usize];
        if p.liveness.has(Liveness::WATCHED) || p.reliable || !self.cfg.liveness.enabled {
            return;
        }
        p.liveness.set(Liveness::WATCHED, true);
        self.watched.push(Watch {
            peer: idx,
            frames_seen: p.stats.frames_received,
            silent_checks: 0,
            heard_at: now,
        });
        if self.liveness_at == Time::NEVER {
            self.liveness_at = now + self.cfg.liveness.period;
        }
    }

    /// Whether anything outstanding depends on peer `idx` answering.
    fn depends_on(&self, idx: PeerIdx) -> bool {
        let p = &self.peers[idx as usize];
        !p.reliable
            && (p.liveness.has(Liveness::CRITICAL)
                || !p.tx_idle()
                || self.rx_transfers.keys().any(|&(i, _)| i == idx)
                || self.get_waits.keys().any(|&(i, _)| i == idx)
                || self.out_transfers.keys().any(|&(i, _)| i == idx)
                || self.channel_sends.keys().any(|&(i, _)| i == idx)
                || self.posted_for(idx))
    }

    /// When the liveness check is due, if a watched peer is depended on
    /// now (a port with nothing outstanding has no liveness timer: a flush
    /// before exit does not wait for one): the next periodic check, or
    /// earlier the instant a silent peer reaches the bound.
    pub(super) fn liveness_timeout(&self) -> Option<Time> {
        (self.liveness_at != Time::NEVER && self.watched.iter().any(|w| self.depends_on(w.peer)))
            .then_some(self.liveness_at.min(self.liveness_verdict_at))
    }

    /// The liveness check: once per period while any peer is watched (the
    /// periodic check: stops watching the peers nothing depends on any
    /// more, pings those silent for half a period or more), and at the
    /// instant a silent peer reaches the bound (declares dead those silent
    /// for `misses` periods since their last frame, pinged meanwhile).
    pub(super) fn check_liveness(&mut self, now: Time) {
        let cfg = self.cfg.liveness;
        let periodic = self.liveness_at <= now;
        let bound = cfg.period.saturating_mul(cfg.misses);
        // A periodic check more than half a period late: this process did
        // not run (stopped, descheduled, starved), and the silence it sees
        // may be its own. Its peers are pinged, and judged only once the
        // pings had half a period to be answered.
        if periodic && now.saturating_since(self.liveness_at) > cfg.period / 2 {
            self.liveness_verdicts_from = now + cfg.period / 2;
        }
        let may_judge = now >= self.liveness_verdicts_from;
        let mut dead = Vec::new();
        // With node liveness: nodes wanting a fresh view, each with the
        // watched peer to ping for it and how good a choice it is (listed
        // live by the last view first, then not the one pinged last without
        // an answer, then heard from last: a dead one answers nothing).
        let mut want_view: Vec<(NodeId, PeerIdx, (bool, bool, Time))> = Vec::new();
        let mut local_live: Option<LivePorts> = None;
        let mut verdict_at = Time::NEVER;
        let mut i = 0;
        while i < self.watched.len() {
            let idx = self.watched[i].peer;
            let depended_on = self.depends_on(idx);
            let frames_received = self.peers[idx as usize].stats.frames_received;
            if frames_received != self.watched[i].frames_seen {
                let heard = self.last_frame_at(idx, now, self.watched[i].heard_at);
                let w = &mut self.watched[i];
                w.frames_seen = frames_received;
                w.silent_checks = 0;
                w.heard_at = heard;
                self.peers[idx as usize].liveness.set_extra_pings(0);
            }
            let p = &mut self.peers[idx as usize];
            let w = &mut self.watched[i];
            // Its node may vouch for a silent peer: then it needs no ping.
            let mut by_node = false;
            // Per node only with three periods or more to the verdict: views
            // come once a period, and a turn spent pinging a peer that just
            // died costs its node a view; with two, its live neighbours'
            // next view would come at the verdict's instant.
            let silent = now.saturating_since(w.heard_at) >= cfg.period / 2;
            if depended_on && silent && p.addr.port.0 < NODE_PORTS && cfg.misses >= 3 {
                if let Some(nl) = self.node_liveness.as_mut() {
                    let (node, port) = (p.addr.node, p.addr.port.0);
                    let vouched_at = if node == self.cfg.local.node {
                        let live = *local_live.get_or_insert_with(|| nl.local_live(now));
                        // Not listed (gone or stopped): probed itself.
                        by_node = node::is_live(&live, port);
                        by_node.then_some(now)
                    } else {
                        let view = nl.view(node, now);
                        match view {
                            // No view of its node yet: asked for once (one
                            // ping per node); if none comes (no board
                            // there), per process from the next check.
                            None if w.silent_checks >= 2 => None,
                            _ => {
                                let (at, live) = view.unwrap_or((Time::ZERO, [0; 2]));
                                let fresh = view.is_some() && at >= w.heard_at;
                                let listed = node::is_live(&live, port);
                                let old = now.saturating_since(at) >= cfg.period / 2;
                                if !fresh || !listed || old {
                                    // Wanted: a view after its silence
                                    // began, a later one (it may resume),
                                    // or a newer one (views vouch for a
                                    // period each).
                                    let rank =
                                        (listed, nl.unanswered(node) != Some(port), w.heard_at);
                                    match want_view.iter_mut().find(|v| v.0 == node) {
                                        Some(v) if rank > v.2 => (v.1, v.2) = (idx, rank),
                                        Some(_) => {}
                                        None => want_view.push((node, idx, rank)),
                                    }
                                }
                                // A fresh view that does not list it (gone
                                // or stopped): the peer itself is probed.
                                by_node = !fresh || listed;
                                (fresh && listed).then_some(at)
                            }
                        }
                    };
                    if let Some(at) = vouched_at {
                        w.silent_checks = 0;
                        w.heard_at = w.heard_at.max(at);
                        p.liveness.set_extra_pings(0);
                    }
                }
            }
            let silence = now.saturating_since(w.heard_at);
            let silent = silence >= cfg.period / 2;
            if periodic && silent {
                w.silent_checks += 1;
            }
            // Dead: silent for the bound since its last frame (or the last
            // view that vouched for it), and probed meanwhile.
            if !depended_on || (silence >= bound && w.silent_checks > 0 && may_judge) {
                if depended_on {
                    dead.push(p.addr);
                }
                p.liveness
                    .set(Liveness::WATCHED | Liveness::PING_NOW, false);
                p.liveness.set_extra_pings(0);
                self.watched.swap_remove(i);
                continue;
            }
            let due = (w.heard_at + bound).max(self.liveness_verdicts_from);
            if due > now {
                verdict_at = verdict_at.min(due);
            }
            if periodic && silent && !by_node {
                let suspect = w.silent_checks > 1;
                self.ping(idx, suspect, now);
            }
            i += 1;
        }
        // One ping per node pair: to one peer of each node wanting a view,
        // if no process of this node pinged it this period — or if no view
        // came for two periods (the turn went to a ping nobody answers).
        for (node, idx, _) in want_view.into_iter().filter(|_| periodic) {
            let Some(nl) = self.node_liveness.as_mut() else {
                break;
            };
            let starved = nl
                .view(node, now)
                .is_some_and(|(at, _)| now.saturating_since(at) > cfg.period * 2);
            let port = self.peers[idx as usize].addr.port.0;
            if nl.take_ping(node, now, cfg.period, port) || starved {
                let suspect = self
                    .watched
                    .iter()
                    .find(|w| w.peer == idx)
                    .is_some_and(|w| w.silent_checks > 1);
                self.ping(idx, suspect, now);
            }
        }
        if self.watched.is_empty() {
            self.liveness_at = Time::NEVER;
        } else if periodic {
            self.liveness_at = now + cfg.period;
        }
        // A verdict due before the next periodic check gets its own
        // instant (at most one a period: a check finds it heard from, or
        // declares it).
        self.liveness_verdict_at = verdict_at;
        for addr in dead {
            self.stats.peers_declared_dead += 1;
            self.peer_gone(now, addr);
        }
    }

    /// Pings peer `idx`; a suspect (silent for more than one check: a live
    /// peer answers the first ping) gets several, back to back, so that
    /// only a path losing them all passes for dead.
    fn ping(&mut self, idx: PeerIdx, suspect: bool, now: Time) {
        let p = &mut self.peers[idx as usize];
        p.liveness.set(Liveness::PING_NOW, true);
        if suspect {
            p.liveness.set_extra_pings(SUSPECT_EXTRA_PINGS);
        }
        self.schedule(idx, now);
    }

    /// Shares liveness with the other processes of this node through
    /// `shared` (see [`super::node`]): one heartbeat per node pair, and
    /// every answer to a ping carries this node's live ports.
    pub fn set_node_liveness(&mut self, shared: Box<dyn NodeLiveness>) {
        self.node_liveness = Some(shared);
    }

    /// This node's live ports, for an answer to a ping (`None` without
    /// node liveness).
    pub(super) fn local_view(&mut self, now: Time) -> Option<LivePorts> {
        self.node_liveness.as_mut().map(|nl| nl.local_live(now))
    }

    /// A view of `node` arrived (an answer to a ping).
    pub(super) fn note_view(&mut self, node: NodeId, live: LivePorts, now: Time) {
        if let Some(nl) = self.node_liveness.as_mut() {
            nl.set_view(node, live, now);
        }
    }
}
