//! Multi-rail links: one peer reached through several NICs of one fabric.
//!
//! A peer with rails ([`Port::set_rails`]) has one route per rail, each
//! through a different method of the port (a method is one NIC opened one
//! way: `afxdp` on one NIC and `packet` on another are two rails). The
//! peer keeps one sequence space, one window and one reliability state
//! across its rails, so ordering and exactly-once delivery need nothing
//! new: frames that took different rails arrive out of order and the
//! receiver's window puts them back in order, as BCL-3's "per-message
//! sequence numbers" option (the thesis's option 3) does. What rails add is
//! which rail each frame takes:
//!
//! - **Striping.** Data goes in stripes of `stripe_bytes` (4 KiB by
//!   default, BCL-3's page): a rail that starts a stripe sends that many
//!   bytes' worth of consecutive frames, so per-rail bursts stay page-sized.
//!   A small message is one frame and goes on whichever rail asks first and
//!   has room (the least loaded).
//! - **Weights.** A rail may hold its share of the peer's window in flight,
//!   at least one stripe, and the least loaded rail (frames in flight per
//!   share) takes the next stripe. Shares follow each rail's measured
//!   speed: its round trip, measured on the frames it carried, shortens as
//!   its queue drains faster, so a rail that drains faster is acknowledged
//!   sooner, frees its share sooner and takes more stripes, and its share
//!   grows with the inverse of its round trip until every rail's queue
//!   takes as long to drain.
//! - **Congestion.** The peer's congestion window counts per rail: the
//!   frames allowed in flight are the window times the rails in service,
//!   since each rail's queue holds only its share and the delay the
//!   controller judges is one rail's. Pacing (which spaces one path's
//!   frames) is off for a peer with rails.
//! - **Acknowledgements** go on the rail the peer's last frame came by, and
//!   the answer to a ping on the rail the ping came by: a rail that is dead
//!   both ways never carries the only acknowledgements.
//! - **Failure.** A rail is taken out when the engine reports its link down
//!   ([`Port::rail_failed`]) or when frames sent on it have gone
//!   unacknowledged for longer than twice the retransmission timeout, eight
//!   of its own round trips and 10 ms (a busy two-core host stalls one
//!   rail's receive path for milliseconds), while the peer showed itself
//!   alive by another rail. Everything in flight
//!   on it is then judged lost and resent on the others (the receiver
//!   drops copies that arrive anyway, so nothing is delivered twice). The
//!   last rail up is never taken out: a peer with no rail left is a matter
//!   for liveness, not for rail choice.
//! - **Return.** A rail out of service gets a ping every
//!   [`PROBE_INTERVAL`] (or the timeout, if longer); any frame that arrives
//!   from the peer on it (the answer to such a ping, or the peer's own
//!   traffic) puts it back in service with an equal share.
//!
//! A receiver learns its sender's rails by itself: a frame from a known peer
//! arriving on another method that allows rails ([`Port::allow_rails`])
//! adds that way as a rail, so both ends stripe and answer by the rail a
//! frame came.
//!
//! Peers with one route pay one branch per scheduling decision for this.

use super::peer::{Liveness, PeerIdx, TxSlot};
use super::{Port, RouteError};
use crate::addr::ProcessAddr;
use crate::method::Route;
use crate::time::Time;
use crate::wire::HEADER_LEN;
use std::time::Duration;

/// Most rails one peer may have.
pub const MAX_RAILS: usize = 8;

/// How often a rail out of service is pinged to see whether it is back
/// (at least; the peer's retransmission timeout if that is longer).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(5);

/// A rail is never taken out for less silence than this: a scheduling
/// hiccup of a busy host is not a dead link (at 1 ms, a stream between two
/// processes on two busy cores lost a healthy rail once or twice a run).
const MIN_SILENCE: Duration = Duration::from_millis(10);

/// How often each rail's delivered bytes are turned into its share.
const SHARE_INTERVAL: Duration = Duration::from_millis(2);

/// Whether a rail carries traffic, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RailState {
    /// In service.
    Up,
    /// Out of service: frames sent on it went unacknowledged while other
    /// rails delivered.
    TimedOut,
    /// Out of service: the engine reported its link down (a send failed).
    LinkDown,
}

impl std::fmt::Display for RailState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RailState::Up => "up",
            RailState::TimedOut => "down (timeouts)",
            RailState::LinkDown => "down (link)",
        })
    }
}

/// One rail of a peer, as [`Port::rails`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailInfo {
    /// The route: method index and link.
    pub route: Route,
    /// In service or not.
    pub state: RailState,
    /// Frames in flight on it now.
    pub in_flight: u32,
    /// Its share of the peer's window, in thousandths.
    pub share_permille: u16,
    /// Frames sent on it (first sendings and resends).
    pub frames_sent: u64,
    /// Payload bytes sent on it.
    pub bytes_sent: u64,
    /// Payload bytes of frames sent on it and acknowledged.
    pub bytes_delivered: u64,
    /// Frames that arrived from the peer on it.
    pub frames_received: u64,
    /// Times it was taken out of service.
    pub downs: u32,
    /// Smoothed round trip of frames sent on it, once measured.
    pub srtt: Option<Duration>,
}

/// Sending state of one rail.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rail {
    pub route: Route,
    pub state: RailState,
    /// Frames sent on it not yet acknowledged, judged lost or resent.
    pub in_flight: u32,
    /// When the oldest frame sent on it since its last delivery (or since
    /// it came back) left; `NEVER` when it has sent nothing since. Losses
    /// do not reset it: only a delivery proves the rail.
    pub pending_since: Time,
    /// When a frame sent on it was last acknowledged.
    pub last_delivery: Time,
    /// When a frame from the peer last arrived on it.
    pub last_arrival: Time,
    /// Smoothed round trip of its frames, nanoseconds (0: none yet).
    pub srtt_ns: u64,
    /// Frames of the current stripe it may still send.
    pub stripe_left: u16,
    /// Share of the window, in 1/1024ths.
    pub share: u32,
    /// The peer pinged on it: answer on it.
    pub pong_due: bool,
    /// Out of service: the next ping on it is due then.
    pub probe_at: Time,
    /// The most recently sent frame on it known delivered (loss detection
    /// compares frames with the mark of their own rail: each rail keeps
    /// order, rails between them do not).
    pub mark: super::loss::RackMark,
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub bytes_delivered: u64,
    pub frames_received: u64,
    pub downs: u32,
}

impl Rail {
    fn new(route: Route, share: u32) -> Self {
        Rail {
            route,
            state: RailState::Up,
            in_flight: 0,
            pending_since: Time::NEVER,
            last_delivery: Time::ZERO,
            last_arrival: Time::ZERO,
            srtt_ns: 0,
            stripe_left: 0,
            share,
            pong_due: false,
            probe_at: Time::NEVER,
            mark: super::loss::RackMark::default(),
            frames_sent: 0,
            bytes_sent: 0,
            bytes_delivered: 0,
            frames_received: 0,
            downs: 0,
        }
    }

    fn up(&self) -> bool {
        self.state == RailState::Up
    }
}

/// The rails of one peer.
#[derive(Clone, Debug)]
pub(super) struct RailSet {
    pub rails: Vec<Rail>,
    /// Bit r: the peer is in rail r's method's ready queue.
    pub queued: u8,
    /// The rail the peer's last frame came by (acknowledgements go there).
    pub last_rx: u8,
    /// When the current share interval started.
    pub interval_start: Time,
}

impl RailSet {
    fn new(routes: &[Route]) -> Self {
        let share = 1024 / routes.len() as u32;
        RailSet {
            rails: routes.iter().map(|&r| Rail::new(r, share)).collect(),
            queued: 0,
            last_rx: 0,
            interval_start: Time::ZERO,
        }
    }

    /// The index of the rail through method `method`.
    pub fn by_method(&self, method: u8) -> Option<usize> {
        self.rails.iter().position(|r| r.route.method == method)
    }

    fn up_count(&self) -> usize {
        self.rails.iter().filter(|r| r.up()).count()
    }

    /// The rail acknowledgements and other control frames go on: the one
    /// the peer's last frame came by if it is up, else the first up.
    pub fn control_rail(&self) -> usize {
        let last = usize::from(self.last_rx);
        if self.rails.get(last).is_some_and(Rail::up) {
            return last;
        }
        self.rails.iter().position(Rail::up).unwrap_or(0)
    }

    /// Gives every rail in service an equal share.
    fn equal_shares(&mut self) {
        let n = self.up_count().max(1) as u32;
        for r in &mut self.rails {
            r.share = if r.up() { 1024 / n } else { 0 };
        }
    }

    /// Frames rail `r` may have in flight when the peer's window is
    /// `window` frames: its share, and at least one stripe.
    fn cap(&self, r: usize, window: u32, stripe_frames: u32) -> u32 {
        let share = u64::from(self.rails[r].share);
        let frames = (u64::from(window) * share).div_ceil(1024) as u32;
        frames.max(stripe_frames)
    }

    /// A frame sent on rail `tag - 1` left flight (acknowledged when
    /// `delivered` is `Some((bytes, round trip))`).
    fn leave_flight(
        &mut self,
        tag: u8,
        delivered: Option<(u16, Option<Duration>, u32)>,
        now: Time,
    ) {
        let Some(rail) = tag
            .checked_sub(1)
            .and_then(|r| self.rails.get_mut(usize::from(r)))
        else {
            return;
        };
        rail.in_flight = rail.in_flight.saturating_sub(1);
        if let Some((bytes, rtt, order)) = delivered {
            let newer = !rail.mark.known || super::loss::sent_before(rail.mark.order, order);
            if newer {
                rail.mark = super::loss::RackMark {
                    order,
                    rtt_ns: rtt.map_or(rail.mark.rtt_ns, |r| {
                        u32::try_from(r.as_nanos()).unwrap_or(u32::MAX)
                    }),
                    known: true,
                    resent: false,
                };
            }
            rail.last_delivery = now;
            rail.pending_since = if rail.in_flight == 0 {
                Time::NEVER
            } else {
                now
            };
            rail.bytes_delivered += u64::from(bytes);
            if let Some(rtt) = rtt {
                let sample = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
                rail.srtt_ns = if rail.srtt_ns == 0 {
                    sample
                } else {
                    (rail.srtt_ns * 7 + sample) / 8
                };
            }
        }
    }

    /// Once per interval, sets each rail's share in inverse proportion to
    /// its smoothed round trip: with equal frames in flight a rail that
    /// drains faster shows a shorter round trip (a shorter queue), so it
    /// gets more, until the queues of all rails take equally long to
    /// drain. (Shares in proportion to the bytes each rail delivered would
    /// feed on themselves where the CPU and not the link is the limit: the
    /// rail served first would deliver more, get more, and so on.)
    fn update_shares(&mut self, now: Time) {
        if now.saturating_since(self.interval_start) < SHARE_INTERVAL {
            return;
        }
        self.interval_start = now;
        let up = self.up_count().max(1) as u64;
        let measured = self
            .rails
            .iter()
            .filter(|r| r.up() && r.srtt_ns > 0)
            .count() as u64;
        if measured < up {
            return;
        }
        // Speeds as 2^40 / round trip, so integer division keeps precision.
        let speed = |r: &Rail| (1u64 << 40) / r.srtt_ns.max(1);
        let total: u64 = self.rails.iter().filter(|r| r.up()).map(speed).sum();
        // Each rail in service keeps a floor (an eighth of an equal share)
        // so that it keeps being measured.
        let floor = 1024 / (8 * up);
        for r in &mut self.rails {
            if !r.up() {
                r.share = 0;
                continue;
            }
            let target = (speed(r) as u128 * 1024 / u128::from(total.max(1))) as u64;
            let target = target.max(floor) as u32;
            // Smooth: half the old share, half the new one.
            r.share = (r.share + target) / 2;
        }
    }
}

/// The rail tag of a frame sent on rail `r` (0: sent without rails).
fn tag_of(r: usize) -> u8 {
    r as u8 + 1
}

impl Port {
    /// Reaches `addr` through every route in `routes` (rails: methods on
    /// different NICs of one fabric), the first being its main route (the
    /// one its frame size and integrity are taken from, with the smallest
    /// frame of all). One route is the same as [`Port::set_route`].
    pub fn set_rails(
        &mut self,
        now: Time,
        addr: ProcessAddr,
        routes: &[Route],
    ) -> Result<(), RouteError> {
        let Some(&main) = routes.first() else {
            return Err(RouteError::NoRails);
        };
        if routes.len() > MAX_RAILS {
            return Err(RouteError::TooManyRails(routes.len()));
        }
        for (i, r) in routes.iter().enumerate() {
            if usize::from(r.method) >= self.methods.len() {
                return Err(RouteError::UnknownMethod(r.method));
            }
            if routes[..i].iter().any(|o| o.method == r.method) {
                return Err(RouteError::RailMethodTwice(r.method));
            }
            if routes.len() > 1 && self.methods[usize::from(r.method)].caps.reliable {
                return Err(RouteError::RailOnReliableMethod(r.method));
            }
        }
        self.set_route(now, addr, main)?;
        let Some(idx) = self.peer_idx(addr) else {
            return Ok(());
        };
        if routes.len() == 1 {
            if self.rail_sets.remove(&idx).is_some() {
                let p = &mut self.peers[idx as usize];
                p.set_has_rails(false);
                p.queued = false;
                self.schedule(idx, now);
            }
            return Ok(());
        }
        self.install_rails(idx, RailSet::new(routes), now);
        Ok(())
    }

    /// Lets frames from a known peer that arrive by method `method` add
    /// that way as one of the peer's rails, when its route is another
    /// method that allows rails (see the module documentation).
    pub fn allow_rails(&mut self, method: u8) -> Result<(), RouteError> {
        let info = self
            .methods
            .get_mut(usize::from(method))
            .ok_or(RouteError::UnknownMethod(method))?;
        info.rails = !info.caps.reliable;
        Ok(())
    }

    /// The engine found method `method`'s link down (a send failed): its
    /// rails go out of service for every peer, and what was in flight on
    /// them is resent on the others. It comes back as a rail timing out
    /// does, by a frame that arrives on it.
    pub fn rail_failed(&mut self, method: u8, now: Time) {
        let peers: Vec<PeerIdx> = self
            .rail_sets
            .iter()
            .filter(|(_, s)| s.by_method(method).is_some())
            .map(|(&i, _)| i)
            .collect();
        for idx in peers {
            if let Some(r) = self.rail_sets.get(&idx).and_then(|s| s.by_method(method)) {
                self.take_rail_out(idx, r, RailState::LinkDown, now);
            }
        }
    }

    /// Whether some peer has a rail through method `method`.
    pub fn is_rail_method(&self, method: u8) -> bool {
        self.rail_sets
            .values()
            .any(|s| s.by_method(method).is_some())
    }

    /// Rails of peer `idx` in service (1 for a peer without rails).
    #[inline]
    pub(super) fn rails_up(&self, idx: PeerIdx) -> u32 {
        if !self.peers[idx as usize].has_rails() {
            return 1;
        }
        self.rail_sets
            .get(&idx)
            .map_or(1, |s| s.up_count().max(1) as u32)
    }

    /// The rails of `addr`, if it has more than one route.
    pub fn rails(&self, addr: ProcessAddr) -> Vec<RailInfo> {
        let Some(set) = self.peer_idx(addr).and_then(|i| self.rail_sets.get(&i)) else {
            return Vec::new();
        };
        set.rails
            .iter()
            .map(|r| RailInfo {
                route: r.route,
                state: r.state,
                in_flight: r.in_flight,
                share_permille: (r.share * 1000 / 1024) as u16,
                frames_sent: r.frames_sent,
                bytes_sent: r.bytes_sent,
                bytes_delivered: r.bytes_delivered,
                frames_received: r.frames_received,
                downs: r.downs,
                srtt: (r.srtt_ns > 0).then(|| Duration::from_nanos(r.srtt_ns)),
            })
            .collect()
    }

    /// Gives peer `idx` rail set `set`: its frames are cut to the smallest
    /// frame of its rails.
    fn install_rails(&mut self, idx: PeerIdx, set: RailSet, now: Time) {
        let smallest = set
            .rails
            .iter()
            .map(|r| self.methods[usize::from(r.route.method)].caps.mtu)
            .min()
            .unwrap_or(0)
            .saturating_sub(HEADER_LEN)
            .clamp(1, usize::from(u16::MAX));
        let p = &mut self.peers[idx as usize];
        p.set_has_rails(true);
        // Its rails keep their own queue bits from now on.
        p.queued = false;
        p.frag_payload = p.frag_payload.min(smallest as u16);
        let mut set = set;
        set.interval_start = now;
        self.rail_sets.insert(idx, set);
        self.schedule(idx, now);
        self.arm_timer(idx);
    }

    /// Payload frames per stripe on peer `idx`'s rails.
    fn stripe_frames(&self, idx: PeerIdx) -> u32 {
        let payload = u32::from(self.peers[idx as usize].frag_payload).max(1);
        self.cfg.stripe_bytes.div_ceil(payload).max(1)
    }

    /// Whether rail `r` of peer `idx` may carry a data frame now (a first
    /// sending or a resend) under window `window`.
    pub(super) fn rail_has_room(&self, idx: PeerIdx, r: usize, window: u32) -> bool {
        let Some(set) = self.rail_sets.get(&idx) else {
            return true;
        };
        let Some(rail) = set.rails.get(r) else {
            return false;
        };
        if !rail.up() {
            return false;
        }
        if rail.stripe_left > 0 || rail.in_flight == 0 {
            return true;
        }
        let stripe = self.stripe_frames(idx);
        if rail.in_flight + stripe > set.cap(r, window, stripe) {
            return false;
        }
        // The least loaded rail takes the next stripe: this one only if it
        // is not a stripe ahead of another (loads in frames per share).
        set.rails.iter().enumerate().all(|(o, other)| {
            o == r
                || !other.up()
                || u64::from(rail.in_flight) * u64::from(other.share.max(1))
                    <= u64::from(other.in_flight + stripe) * u64::from(rail.share.max(1))
        })
    }

    /// The rail the frame being built goes on, if the peer has rails.
    #[inline]
    pub(super) fn tx_rail_of(&self, idx: PeerIdx) -> Option<usize> {
        if self.peers[idx as usize].has_rails() {
            self.tx_rail.map(usize::from)
        } else {
            None
        }
    }

    /// The link the frame being built for peer `idx` leaves by.
    pub(super) fn tx_link(&self, idx: PeerIdx) -> Option<crate::method::LinkId> {
        if let Some(r) = self.tx_rail_of(idx) {
            return self.rail_sets.get(&idx)?.rails.get(r).map(|x| x.route.link);
        }
        self.peers[idx as usize].route.map(|r| r.link)
    }

    /// Records that data frame `seq` (`bytes` of payload) just left for
    /// peer `idx` on the rail being served.
    pub(super) fn rail_sent(&mut self, idx: PeerIdx, seq: crate::seq::Seq, bytes: u16, now: Time) {
        let Some(r) = self.tx_rail_of(idx) else {
            return;
        };
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.tx.as_mut() else { return };
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        let slot = w.slot_mut(seq);
        let old = slot.rail;
        slot.rail = tag_of(r);
        if old != 0 {
            set.leave_flight(old, None, now);
        }
        let rail = &mut set.rails[r];
        if rail.pending_since == Time::NEVER {
            rail.pending_since = now;
        }
        rail.in_flight += 1;
        rail.frames_sent += 1;
        rail.bytes_sent += u64::from(bytes);
        rail.stripe_left = rail.stripe_left.saturating_sub(1);
    }

    /// Starts a stripe on the rail being served if it has none going.
    pub(super) fn rail_start_stripe(&mut self, idx: PeerIdx) {
        let Some(r) = self.tx_rail_of(idx) else {
            return;
        };
        let stripe = self.stripe_frames(idx);
        if let Some(rail) = self
            .rail_sets
            .get_mut(&idx)
            .and_then(|s| s.rails.get_mut(r))
        {
            if rail.stripe_left == 0 {
                rail.stripe_left = stripe.min(u32::from(u16::MAX)) as u16;
            }
        }
    }

    /// Frame `slot` to peer `idx` left flight: acknowledged (`delivered`),
    /// or judged lost. Clears its rail tag.
    pub(super) fn rail_slot_done(
        rail_sets: &mut rustc_hash::FxHashMap<PeerIdx, RailSet>,
        idx: PeerIdx,
        slot: &mut TxSlot,
        delivered: bool,
        now: Time,
    ) {
        if slot.rail == 0 {
            return;
        }
        if let Some(set) = rail_sets.get_mut(&idx) {
            let d = delivered.then(|| {
                let rtt = (slot.sent_count == 1).then(|| now.saturating_since(slot.last_sent));
                (slot.len, rtt, slot.sent_order)
            });
            set.leave_flight(slot.rail, d, now);
        }
        slot.rail = 0;
    }

    /// After acknowledgements from peer `idx`: updates the shares and takes
    /// out a rail whose frames went unacknowledged too long while others
    /// delivered.
    pub(super) fn check_rails(&mut self, idx: PeerIdx, now: Time) {
        let rto = self.peers[idx as usize].rtt.rto(&self.cfg.rto);
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        set.update_shares(now);
        // The rail silent longest, if it is silent too long.
        let mut out: Option<(usize, Time)> = None;
        for (r, rail) in set.rails.iter().enumerate() {
            if !rail.up() || rail.pending_since == Time::NEVER {
                continue;
            }
            let waiting_from = rail.pending_since;
            if out.is_some_and(|(_, t)| t <= waiting_from) {
                continue;
            }
            let limit = (rto * 2)
                .max(Duration::from_nanos(rail.srtt_ns.saturating_mul(8)))
                .max(MIN_SILENCE);
            if now.saturating_since(waiting_from) <= limit {
                continue;
            }
            // The peer is alive by another rail: a frame sent there was
            // acknowledged, or one of its frames came by it.
            let others_delivered = set.rails.iter().enumerate().any(|(o, x)| {
                o != r
                    && x.up()
                    && (x.last_delivery > waiting_from || x.last_arrival > waiting_from)
            });
            if others_delivered {
                out = Some((r, waiting_from));
            }
        }
        if let Some((r, _)) = out {
            self.take_rail_out(idx, r, RailState::TimedOut, now);
        }
    }

    /// Takes rail `r` of peer `idx` out of service (unless it is the last
    /// one up): what is in flight on it is judged lost and resent on the
    /// others.
    fn take_rail_out(&mut self, idx: PeerIdx, r: usize, why: RailState, now: Time) {
        let probe = self.peers[idx as usize]
            .rtt
            .rto(&self.cfg.rto)
            .max(PROBE_INTERVAL);
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        if !set.rails[r].up() || set.up_count() <= 1 {
            return;
        }
        let rail = &mut set.rails[r];
        rail.state = why;
        rail.downs += 1;
        rail.in_flight = 0;
        rail.pending_since = Time::NEVER;
        rail.stripe_left = 0;
        rail.probe_at = now + probe;
        set.equal_shares();
        self.stats.rails_down += 1;
        let tag = tag_of(r);
        let p = &mut self.peers[idx as usize];
        let (una, next) = (p.una, p.next_seq);
        let mut lost: Option<(crate::seq::Seq, crate::seq::Seq)> = None;
        if let Some(w) = p.tx.as_mut() {
            let mut s = una;
            while s != next {
                let slot = w.slot_mut(s);
                if slot.rail == tag {
                    slot.rail = 0;
                    if !slot.sacked {
                        slot.lost = true;
                        lost = Some(lost.map_or((s, s), |(first, _)| (first, s)));
                    }
                }
                s = s.next();
            }
        }
        if let Some((first, last)) = lost {
            p.add_retx_range(first, last.next(), false);
        }
        self.schedule(idx, now);
        self.arm_timer(idx);
    }

    /// A frame from peer `idx` arrived by `route`: notes the rail it came
    /// by (learning it, if the method allows rails), puts a rail out of
    /// service back, and answers a ping on the rail it came by.
    pub(super) fn rail_arrival(&mut self, idx: PeerIdx, route: Route, ping: bool, now: Time) {
        let p = &self.peers[idx as usize];
        if !p.has_rails() {
            let Some(main) = p.route else { return };
            let learn = main.method != route.method
                && self.methods[usize::from(main.method)].rails
                && self.methods[usize::from(route.method)].rails;
            if !learn {
                return;
            }
            self.install_rails(idx, RailSet::new(&[main, route]), now);
        }
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        let r = match set.by_method(route.method) {
            Some(r) => r,
            None if set.rails.len() < MAX_RAILS
                && self.methods[usize::from(route.method)].rails =>
            {
                set.rails.push(Rail::new(route, 0));
                set.equal_shares();
                set.rails.len() - 1
            }
            None => return,
        };
        set.last_rx = r as u8;
        let rail = &mut set.rails[r];
        rail.frames_received += 1;
        rail.last_arrival = now;
        // A process that restarted may come another way.
        rail.route.link = route.link;
        if ping {
            rail.pong_due = true;
        }
        if !rail.up() {
            rail.state = RailState::Up;
            rail.probe_at = Time::NEVER;
            rail.pending_since = Time::NEVER;
            rail.last_delivery = now;
            set.equal_shares();
            self.stats.rails_up += 1;
        }
        if ping {
            self.schedule(idx, now);
        }
    }

    /// The earliest ping due on one of peer `idx`'s rails out of service.
    pub(super) fn rails_deadline(&self, idx: PeerIdx) -> Time {
        if !self.peers[idx as usize].has_rails() {
            return Time::NEVER;
        }
        // A rail already queued for its ping needs no timer.
        self.rail_sets.get(&idx).map_or(Time::NEVER, |s| {
            s.rails
                .iter()
                .enumerate()
                .filter(|&(i, r)| !r.up() && s.queued & (1 << i) == 0)
                .map(|(_, r)| r.probe_at)
                .min()
                .unwrap_or(Time::NEVER)
        })
    }

    /// Puts peer `idx` in the ready queue of each rail that has something
    /// to send now: an answer to a ping, a ping if out of service, control
    /// frames on the control rail, data if it has room.
    pub(super) fn schedule_rails(&mut self, idx: PeerIdx, now: Time, new_data: bool) {
        let p = &self.peers[idx as usize];
        let control = p.ack_now
            || p.nak != crate::wire::NakReason::None
            || p.liveness.has(Liveness::PING_NOW | Liveness::ANSWER_PING);
        let data = now >= p.busy_until && new_data;
        let window = self.peer_window(idx);
        let Some(set) = self.rail_sets.get(&idx) else {
            return;
        };
        let resend = now >= p.busy_until && (p.retx_pending() || p.probe_newest);
        let control_rail = set.control_rail();
        let mut want = 0u8;
        for (r, rail) in set.rails.iter().enumerate() {
            let work = rail.pong_due
                || (!rail.up() && now >= rail.probe_at)
                || (rail.up() && (control || resend) && r == control_rail)
                || (data && self.rail_has_room(idx, r, window));
            if work {
                want |= 1 << r;
            }
        }
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        let new = want & !set.queued;
        set.queued |= new;
        for r in 0..set.rails.len() {
            if new & (1 << r) != 0 {
                let m = usize::from(set.rails[r].route.method);
                self.ready[m].push_back(idx);
            }
        }
    }

    /// A retransmission timeout fired for peer `idx`: its control frames
    /// and resends move to the next rail in service, so that the probes of
    /// successive timeouts try every rail (the peer may be silent, and the
    /// rail its last frame came by dead).
    pub(super) fn rails_on_timeout(&mut self, idx: PeerIdx) {
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        let n = set.rails.len();
        let from = usize::from(set.last_rx);
        if let Some(next) = (1..=n).map(|k| (from + k) % n).find(|&r| set.rails[r].up()) {
            set.last_rx = next as u8;
        }
    }

    /// Peer `idx` starts a new sequence space (its sends failed): nothing
    /// is in flight on its rails any more.
    pub(super) fn rails_forget_flight(&mut self, idx: PeerIdx) {
        let Some(set) = self.rail_sets.get_mut(&idx) else {
            return;
        };
        for r in &mut set.rails {
            r.in_flight = 0;
            r.stripe_left = 0;
        }
        let p = &mut self.peers[idx as usize];
        let (una, next) = (p.una, p.next_seq);
        if let Some(w) = p.tx.as_mut() {
            let mut s = una;
            while s != next {
                w.slot_mut(s).rail = 0;
                s = s.next();
            }
        }
    }

    /// Peer `idx` was taken from method `method`'s ready queue: which of
    /// its rails that is (and it is no longer queued there), or `None` if
    /// none is.
    pub(super) fn rail_dequeued(&mut self, idx: PeerIdx, method: u8) -> Option<usize> {
        let set = self.rail_sets.get_mut(&idx)?;
        let r = set.by_method(method)?;
        set.queued &= !(1 << r);
        Some(r)
    }

    /// What rail `r` of peer `idx` sends when its method asks: the answer
    /// to a ping first, a ping if it is out of service, else what the peer
    /// has (data only within the rail's room).
    pub(super) fn emit_on_rail(
        &mut self,
        idx: PeerIdx,
        r: usize,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn crate::method::GatherSend,
    ) -> Option<usize> {
        let (pong, up, probe_due) = {
            let rail = &self.rail_sets.get(&idx)?.rails[r];
            (rail.pong_due, rail.up(), now >= rail.probe_at)
        };
        if pong {
            self.rail_sets.get_mut(&idx)?.rails[r].pong_due = false;
            let p = &mut self.peers[idx as usize];
            p.liveness.set(Liveness::ANSWER_PING, true);
            return self.emit_ack(idx, now, buf);
        }
        if !up {
            if !probe_due {
                return None;
            }
            let probe = self.peers[idx as usize]
                .rtt
                .rto(&self.cfg.rto)
                .max(PROBE_INTERVAL);
            self.rail_sets.get_mut(&idx)?.rails[r].probe_at = now + probe;
            let p = &mut self.peers[idx as usize];
            let saved = p.liveness;
            p.liveness.set(Liveness::PING_NOW, true);
            p.liveness.set_extra_pings(0);
            let len = self.emit_ack(idx, now, buf);
            let p = &mut self.peers[idx as usize];
            p.liveness
                .set(Liveness::PING_NOW, saved.has(Liveness::PING_NOW));
            p.liveness.set_extra_pings(saved.extra_pings());
            self.stats.rail_probes += 1;
            return len;
        }
        self.emit(idx, now, buf, gather)
    }
}

#[cfg(test)]
impl Port {
    /// Frames tagged per rail in the window of `addr`, against the rails'
    /// counts (tests check the two agree).
    pub(super) fn rail_counts(&self, addr: ProcessAddr) -> (Vec<u32>, Vec<u32>) {
        let Some(idx) = self.peer_idx(addr) else {
            return (Vec::new(), Vec::new());
        };
        let Some(set) = self.rail_sets.get(&idx) else {
            return (Vec::new(), Vec::new());
        };
        let mut tagged = vec![0u32; set.rails.len()];
        let p = &self.peers[idx as usize];
        if let Some(w) = p.tx.as_ref() {
            let mut s = p.una;
            while s != p.next_seq {
                let t = w.slot(s).rail;
                if t != 0 {
                    tagged[usize::from(t - 1)] += 1;
                }
                s = s.next();
            }
        }
        (tagged, set.rails.iter().map(|r| r.in_flight).collect())
    }
}
