//! The port: one communication endpoint's protocol state machine.
//!
//! A [`Port`] is sans-IO. The application calls [`Port::send`] and reads
//! completions with [`Port::poll_send_event`] and [`Port::poll_delivery`]. A
//! progress engine moves frames: it hands every received frame to
//! [`Port::handle_frame`], asks [`Port::poll_transmit`] to fill transmit
//! buffers that a method lends, calls [`Port::handle_timeout`] when
//! [`Port::poll_timeout`] says so, and routes new peers ([`Port::next_unrouted`],
//! [`Port::set_route`]). The port never reads a clock: every call that needs
//! the time is given it.
//!
//! Reliability is per ordered pair of processes: 32-bit wrap-safe sequence
//! numbers per frame, cumulative acknowledgement piggybacked on every frame
//! plus delayed ACK frames with a selective bitmap, NAKs on gaps (fast
//! retransmission) and on a full receive ring (back-off), a retransmission
//! timeout from SRTT/RTTVAR with exponential back-off, duplicate suppression
//! and in-order delivery. A send completes only when acknowledged.

mod bulk;
mod channels;
mod congestion;
mod congestion_log;
mod detach;
mod lifecycle;
mod liveness;
mod loss;
pub mod node;

pub use bulk::{BulkKind, BulkToken, OutboundBulk};
pub use channels::{ChannelError, Refused};
pub use congestion::{CongestionConfig, CongestionMode};
pub use congestion_log::{CongestionCause, CongestionChange, CONGESTION_LOG_CAPACITY};
pub use lifecycle::STALE_FRAME_LIFETIME;
pub use liveness::LivenessConfig;
pub use rails::{RailInfo, RailState, MAX_RAILS, PROBE_INTERVAL};
pub use send::FULL_RESEND_AFTER_TIMEOUTS;
mod peer;
mod placement;
mod rails;
mod recv;
mod send;
mod timer;

use crate::addr::ProcessAddr;
use crate::config::{ConfigError, PortConfig};
use crate::event::{
    ChannelEvent, Delivery, PeerEvent, RegionId, SendEvent, SendFailure, SendHandle,
};
use crate::method::{MethodCaps, Route};
use crate::ring::{RingSlot, SystemRing};
use crate::seq::Seq;
use crate::stats::{PeerStats, PortStats};
use crate::time::Time;
use crate::wire::{Expect, FrameType, HEADER_LEN};
use congestion::Congestion;
use peer::{Peer, PeerIdx, RxWindow, TxWindow};
use rustc_hash::FxHashMap;
use send::Gate;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Why [`Port::send`] refused a message. Nothing was queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Larger than the system channel's eager limit.
    #[error(
        "message of {len} bytes exceeds the system channel's eager limit of {limit} bytes; \
         send large messages through a normal channel (rendezvous)"
    )]
    TooLarge {
        /// The message length.
        len: usize,
        /// The eager limit.
        limit: usize,
    },
    /// Too many sends outstanding; poll for completions and retry.
    #[error("{0} sends are outstanding, the configured maximum; wait for completions and retry")]
    WouldBlock(usize),
    /// The port already keeps state for the maximum number of peers.
    #[error("the port already talks to {0} peers, the configured maximum")]
    TooManyPeers(usize),
    /// Sending to oneself through the network is not supported.
    #[error("cannot send to the port's own address {0}")]
    SelfSend(ProcessAddr),
    /// The peer's node is detached from this port by an administrator
    /// (see [`Port::detach_node`]); nothing is exchanged with it until it
    /// is rejoined.
    #[error("{0} is on node {node}, which is detached from this job (an administrator's `bcl-admin detach`; `bcl-admin rejoin` brings it back)", node = .0.node.0)]
    NodeDetached(ProcessAddr),
}

/// Why [`Port::set_route`] refused a route.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The route names a method index never registered with
    /// [`Port::add_method`].
    #[error("method index {0} is not registered with this port")]
    UnknownMethod(u8),
    /// No state could be created for the peer.
    #[error(transparent)]
    Peer(SendError),
    /// [`Port::set_rails`] was given no route.
    #[error("a peer needs at least one rail")]
    NoRails,
    /// More rails than [`MAX_RAILS`].
    #[error("{0} rails: at most {max} per peer", max = MAX_RAILS)]
    TooManyRails(usize),
    /// Two rails through one method (a method is one NIC opened one way).
    #[error("method index {0} is named by two rails (each rail needs its own method)")]
    RailMethodTwice(u8),
    /// A method that never loses moves data its own way (shared memory):
    /// it cannot be a rail.
    #[error("method index {0} is reliable (shared memory): it cannot be one of several rails")]
    RailOnReliableMethod(u8),
}

/// Why [`Port::release`] refused a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ring slot {0:?} is not a live delivery (already released?)")]
pub struct ReleaseError(pub RingSlot);

/// What the port knows about one peer, for tools and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer.
    pub addr: ProcessAddr,
    /// Its route, if assigned.
    pub route: Option<Route>,
    /// Frames in flight to it (sent, not cumulatively acknowledged).
    pub in_flight: u32,
    /// Messages and transfers to it accepted but not yet framed: its
    /// ordered queue, its transfer queue and the unit being framed.
    pub queued: u32,
    /// Current retransmission timeout.
    pub rto: std::time::Duration,
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<std::time::Duration>,
    /// When the back-off after its last ring-full NAK ends (sends to it
    /// wait until then), if it ever sent one.
    pub backoff_until: Option<Time>,
    /// When the port looks again for frames to it lost by time and
    /// sequence (a frame overtaken by a later one, whose reordering window
    /// has not passed yet), if it waits for one.
    pub loss_check_at: Option<Time>,
    /// How long a frame overtaken by a later one may still arrive before it
    /// is judged lost (zero until the path is seen to reorder; it grows
    /// when the peer reports duplicates).
    pub reorder_window: std::time::Duration,
    /// Congestion control's view of the path, if the peer is controlled
    /// (its method may lose frames and control is on).
    pub congestion: Option<CongestionInfo>,
    /// Its counters.
    pub stats: PeerStats,
}

/// Congestion control's state for one peer (see [`CongestionConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionInfo {
    /// Whole frames allowed in flight.
    pub window: u32,
    /// The path's round trip without queueing, once measured.
    pub base_rtt: Option<std::time::Duration>,
    /// Queueing delay: the smoothed round trip over the base.
    pub queueing_delay: Option<std::time::Duration>,
    /// Bytes per second pacing allows (full frames), once a round trip is
    /// measured.
    pub pacing_rate: Option<u64>,
}

/// Congestion control's view of the path to `p` (whether the peer is
/// controlled at all is the caller's question): for [`PeerInfo`] and the
/// congestion log. A free function, so that it can be called while other
/// fields of the port are borrowed.
fn congestion_info(cfg: &PortConfig, p: &Peer) -> CongestionInfo {
    let srtt = p.rtt.srtt();
    CongestionInfo {
        window: p.cc.limit_frames(cfg.tx_window),
        base_rtt: p.cc.base_rtt(),
        queueing_delay: p.cc.queueing_delay(srtt),
        pacing_rate: p
            .cc
            .pacing_rate(&cfg.congestion, srtt, cfg.tx_window)
            .map(|frames| (frames * f64::from(p.frag_payload)) as u64),
    }
}

/// The receive ring held for one message that could not get in, so that
/// other senders cannot starve it.
#[derive(Clone, Copy, Debug)]
struct RingReservation {
    peer: PeerIdx,
    msg_id: u32,
    until: Time,
}

/// What a method offers, as the port needs it.
#[derive(Clone, Copy, Debug)]
struct MethodInfo {
    caps: MethodCaps,
    /// The method moves transfer data itself (see [`Port::set_method_bulk`]).
    bulk: bool,
    /// Frames arriving by it may add a rail to a peer (see [`Port::allow_rails`]).
    rails: bool,
}

/// Where an outgoing message's bytes come from.
enum OutBody {
    /// A copy in the port's pool (system-channel and control messages).
    Pooled(Vec<u8>),
    /// The application's buffer, moved in or lent until completion
    /// (normal-channel sends and RMA puts).
    Owned(crate::lent::SendBuffer),
    /// Part of a registered region (the reply to an RMA get this port serves).
    Region {
        region: RegionId,
        offset: u64,
        len: u32,
    },
    /// A transfer given up while frames of it were in flight: its buffer went
    /// back to the application, and resent frames carry no payload (the
    /// receiver discards them) until the last one is acknowledged.
    Void { len: u32 },
}

/// What completing an outgoing message means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDone {
    /// A system-channel send: a [`SendEvent`].
    System,
    /// A control message: nothing to report.
    Internal,
    /// A service message: nothing to report when it is acknowledged; a
    /// failure names the peer in the service failure queue.
    Service,
    /// A normal-channel send: [`ChannelEvent::SendDone`].
    ChannelSend,
    /// An RMA put: [`ChannelEvent::PutDone`].
    Put,
    /// Data this port serves for a remote get: release the region.
    GetReply,
}

/// An accepted message on its way out: a system-channel message, a control
/// message, or a transfer on a normal or open channel.
struct OutMessage {
    handle: SendHandle,
    peer: PeerIdx,
    /// Frame type of its frames.
    kind: FrameType,
    /// Channel of its frames (0 for system-channel and control messages).
    channel: u16,
    body: OutBody,
    on_done: OnDone,
    /// Message id in the peer's ordered stream, or the transfer id.
    msg_id: u32,
    /// Sequence number of the first frame of the message or current chunk.
    first_seq: Seq,
    /// Offset of the next fragment to frame.
    next_offset: u32,
    /// Frames of it sent and not cumulatively acknowledged.
    in_flight: u32,
    /// For an RMA put: the offset asked for (for error reports).
    rma_offset: u64,
    /// Next message in the peer's queue.
    next: u32,
}

impl OutMessage {
    /// Whether it is a transfer (data outside the ordered message stream).
    fn is_transfer(&self) -> bool {
        !matches!(
            self.on_done,
            OnDone::System | OnDone::Internal | OnDone::Service
        )
    }
}

/// One endpoint's protocol state (see the module documentation).
pub struct Port {
    cfg: PortConfig,
    expect: Expect,
    /// What each method offers, by method index.
    methods: Vec<MethodInfo>,
    peers: Vec<Peer>,
    peer_index: FxHashMap<ProcessAddr, PeerIdx>,
    /// The peer looked up last (indices never change once given): a
    /// ping-pong or a stream to one peer skips the hash lookup.
    last_peer: Cell<Option<(ProcessAddr, PeerIdx)>>,
    ring: SystemRing,
    ring_reservation: Option<RingReservation>,
    messages: Vec<Option<OutMessage>>,
    free_messages: Vec<u32>,
    /// Normal and open channels, by channel id (index 0, the system
    /// channel, is never used).
    channels: Vec<Option<channels::Channel>>,
    /// Registered memory regions.
    regions: Vec<channels::RegionSlot>,
    /// Transfers this port sends, waiting for an answer or streaming, by
    /// (peer, transfer id).
    out_transfers: FxHashMap<(PeerIdx, u32), u32>,
    /// Transfers arriving on this port's channels, by (peer, their id).
    rx_transfers: FxHashMap<(PeerIdx, u32), channels::RxTransfer>,
    /// Remote reads this port waits for, by (peer, our transfer id).
    get_waits: FxHashMap<(PeerIdx, u32), channels::GetWait>,
    /// Buffers announced by a receiver before we asked: (peer, channel) →
    /// capacity.
    credits: FxHashMap<(PeerIdx, u16), u64>,
    /// Sends on normal channels that have not ended, per (peer, channel),
    /// in the order the application made them, each with whether its
    /// rendezvous has started: only the first one's has (see
    /// `start_channel_send`).
    channel_sends: FxHashMap<(PeerIdx, u16), VecDeque<(u32, bool)>>,
    /// (peer, channel) whose first send ended: the next one starts in
    /// `start_channel_sends`, which has the time.
    channel_sends_ended: Vec<(PeerIdx, u16)>,
    channel_events: VecDeque<ChannelEvent>,
    /// Transfers whose data a bulk method is to move (see `bulk`).
    bulk_ready: VecDeque<u32>,
    next_transfer: u32,
    /// When to look for transfers that stopped making progress.
    stall_check_at: Time,
    buffers: Vec<Vec<u8>>,
    tx_windows: Vec<Box<TxWindow>>,
    rx_windows: Vec<Box<RxWindow>>,
    /// Per method: peers with something to transmit, round robin.
    ready: Vec<VecDeque<PeerIdx>>,
    unrouted: VecDeque<PeerIdx>,
    timers: BinaryHeap<Reverse<(Time, PeerIdx)>>,
    /// Peers whose liveness is watched (see `liveness`), when they are
    /// checked next, and when the first may be due for the verdict.
    watched: Vec<liveness::Watch>,
    liveness_at: Time,
    liveness_verdict_at: Time,
    /// No verdict before this instant: the port itself ran late (it was
    /// stopped or starved), so what looked like silence is probed first.
    liveness_verdicts_from: Time,
    /// Nodes an administrator cut off (see `detach`).
    detached: detach::Detached,
    /// The rails of peers reached through several methods (see `rails`).
    rail_sets: FxHashMap<PeerIdx, rails::RailSet>,
    /// The rail whose method is being served by `poll_transmit`.
    tx_rail: Option<u8>,
    /// What this node's processes share about liveness (see [`node`]);
    /// `None`: every peer is watched on its own.
    node_liveness: Option<Box<dyn node::NodeLiveness>>,
    send_events: VecDeque<SendEvent>,
    /// What the port learnt about its peers' lives (gone, back,
    /// restarted), not yet taken by [`Port::poll_peer_event`].
    peer_events: VecDeque<PeerEvent>,
    deliveries: VecDeque<Delivery>,
    /// Delivered service messages ([`FrameType::Service`]), for the
    /// engine's remote-service layer.
    service_deliveries: VecDeque<Delivery>,
    /// Peers a service message could not be delivered to.
    service_failures: VecDeque<SendFailure>,
    next_handle: u64,
    outstanding: usize,
    /// Message ids placed by the bundle being taken in (reused, so taking a
    /// bundle allocates nothing once warm).
    bundle_scratch: Vec<u32>,
    /// Congestion changes recorded for tools, when asked for (see
    /// [`congestion_log`]).
    cc_log: congestion_log::CongestionLog,
    /// Until this instant, frames to sequenced peers carry
    /// [`flags::CONGESTED`](crate::wire::flags::CONGESTED): frames were
    /// missing in a peer's stream lately.
    congested_until: Time,
    stats: PortStats,
}

impl Port {
    /// A port with configuration `cfg`. Methods are added with
    /// [`Port::add_method`].
    pub fn new(cfg: PortConfig) -> Result<Port, ConfigError> {
        cfg.validate(None)?;
        let max = cfg.max_outstanding_sends;
        Ok(Port {
            expect: Expect {
                job: cfg.job,
                local: cfg.local,
                require_crc: cfg.crc,
            },
            methods: Vec::new(),
            peers: Vec::new(),
            peer_index: FxHashMap::default(),
            last_peer: Cell::new(None),
            ring: SystemRing::new(cfg.ring_blocks, cfg.ring_block_size),
            ring_reservation: None,
            messages: (0..max).map(|_| None).collect(),
            free_messages: (0..max as u32).rev().collect(),
            channels: vec![None],
            regions: Vec::new(),
            out_transfers: FxHashMap::default(),
            rx_transfers: FxHashMap::default(),
            get_waits: FxHashMap::default(),
            credits: FxHashMap::default(),
            channel_sends: FxHashMap::default(),
            channel_sends_ended: Vec::new(),
            channel_events: VecDeque::new(),
            bulk_ready: VecDeque::new(),
            next_transfer: 1,
            stall_check_at: Time::NEVER,
            buffers: Vec::with_capacity(max),
            tx_windows: Vec::new(),
            rx_windows: Vec::new(),
            ready: Vec::new(),
            unrouted: VecDeque::new(),
            timers: BinaryHeap::new(),
            watched: Vec::new(),
            liveness_at: Time::NEVER,
            liveness_verdict_at: Time::NEVER,
            liveness_verdicts_from: Time::ZERO,
            detached: detach::Detached::default(),
            rail_sets: FxHashMap::default(),
            tx_rail: None,
            node_liveness: None,
            send_events: VecDeque::with_capacity(max),
            peer_events: VecDeque::new(),
            deliveries: VecDeque::with_capacity(cfg.ring_blocks as usize),
            service_deliveries: VecDeque::new(),
            service_failures: VecDeque::new(),
            next_handle: 0,
            outstanding: 0,
            bundle_scratch: Vec::new(),
            cc_log: Default::default(),
            congested_until: Time::ZERO,
            stats: PortStats::default(),
            cfg,
        })
    }

    /// This port's address.
    pub fn local(&self) -> ProcessAddr {
        self.cfg.local
    }

    /// The configuration the port runs with.
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// Port-wide counters.
    pub fn stats(&self) -> &PortStats {
        &self.stats
    }

    /// Sends (queued or unacknowledged) not completed yet.
    pub fn outstanding_sends(&self) -> usize {
        self.outstanding
    }

    /// Blocks of the receive ring not holding a message.
    pub fn ring_free_blocks(&self) -> u32 {
        self.ring.free_blocks()
    }

    /// Number of peers the port keeps state for.
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Windows currently lent to active peers (sender, receiver): a measure
    /// of the port's memory beyond its fixed pools.
    pub fn active_windows(&self) -> (usize, usize) {
        let tx = self.peers.iter().filter(|p| p.tx.is_some()).count();
        let rx = self.peers.iter().filter(|p| p.rx.is_some()).count();
        (tx, rx)
    }

    /// What the port knows about `addr`, if it has state for it.
    pub fn peer_info(&self, addr: ProcessAddr) -> Option<PeerInfo> {
        Some(self.info_of(&self.peers[self.peer_idx(addr)? as usize]))
    }

    /// What the port knows about every peer it keeps state for, in the
    /// order the peers were first seen (no lookups: for statistics pages
    /// that look at all of them).
    pub fn peer_infos(&self) -> impl Iterator<Item = PeerInfo> + '_ {
        self.peers.iter().map(|p| self.info_of(p))
    }

    fn info_of(&self, p: &Peer) -> PeerInfo {
        PeerInfo {
            addr: p.addr,
            route: p.route,
            in_flight: p.in_flight(),
            queued: self.queued_units(p),
            rto: p.rtt.rto(&self.cfg.rto),
            srtt: p.rtt.srtt(),
            backoff_until: (p.busy_until != Time::ZERO).then_some(p.busy_until),
            loss_check_at: (p.reorder.deadline != Time::NEVER).then_some(p.reorder.deadline),
            reorder_window: p.reorder.window(&p.rtt),
            congestion: (self.cfg.congestion.controls() && !p.reliable && !p.cc.is_dormant())
                .then(|| congestion_info(&self.cfg, p)),
            stats: p.stats,
        }
    }

    /// Messages and transfers of `p` waiting to be framed: walks its two
    /// intrusive lists (bounded by the message table, so a broken link
    /// cannot loop). Off the data path: for [`Port::peer_info`].
    fn queued_units(&self, p: &Peer) -> u32 {
        let limit = self.messages.len();
        let mut n = u32::from(p.framing != peer::NO_MSG);
        for head in [p.queue_head, p.xfer_head] {
            let mut m = head;
            let mut steps = 0;
            while m != peer::NO_MSG && steps < limit {
                n += 1;
                steps += 1;
                m = self
                    .messages
                    .get(m as usize)
                    .and_then(|x| x.as_ref())
                    .map_or(peer::NO_MSG, |x| x.next);
            }
        }
        n
    }

    /// The full internal state kept for `addr`, formatted for a person
    /// (debugging and diagnostics tools; the format is not stable).
    pub fn peer_debug(&self, addr: ProcessAddr) -> Option<String> {
        let p = &self.peers[self.peer_idx(addr)? as usize];
        Some(format!(
            "peer {addr}: route {:?} queued {} | tx: una {:?} next {:?} queue_head {} retx [{:?},{:?}) all {} \
             rto_deadline {:?} busy_until {:?} busy_shift {} timeouts {} window {} | rx: known {} expected {:?} \
             deliver {:?} unacked {} ack_now {} nak {:?} ack_deadline {:?} window {} | timer_armed {:?}",
            p.route,
            p.queued,
            p.una,
            p.next_seq,
            p.queue_head,
            p.retx_from,
            p.retx_to,
            p.retx_all,
            p.rto_deadline,
            p.busy_until,
            p.busy_shift,
            p.consecutive_timeouts,
            p.tx.is_some(),
            p.rx_known,
            p.expected,
            p.deliver_id(),
            p.unacked,
            p.ack_now,
            p.nak,
            p.ack_deadline,
            p.rx.is_some(),
            p.timer_armed,
        ))
    }

    /// Port-wide state for diagnostics (the format is not stable).
    pub fn debug_summary(&self) -> String {
        format!(
            "ring free {}/{} reservation {:?} deliveries queued {} outstanding {} send events {}",
            self.ring.free_blocks(),
            self.ring.capacity_blocks(),
            self.ring_reservation,
            self.deliveries.len(),
            self.outstanding,
            self.send_events.len()
        )
    }

    /// All peers the port keeps state for.
    pub fn peers(&self) -> impl Iterator<Item = ProcessAddr> + '_ {
        self.peers.iter().map(|p| p.addr)
    }

    /// Next entry of the send-completion queue.
    pub fn poll_send_event(&mut self) -> Option<SendEvent> {
        self.send_events.pop_front()
    }

    /// Next change in a peer's life: gone (its method reported its
    /// process closed, or liveness declared it dead), back, or restarted,
    /// whether or not anything was in flight with it. A receiver waiting
    /// for a peer learns here that nothing will come.
    pub fn poll_peer_event(&mut self) -> Option<PeerEvent> {
        self.peer_events.pop_front()
    }

    /// Next entry of the receive-completion queue.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.deliveries.pop_front()
    }

    /// Next delivered service message (see [`Port::send_service`]); read
    /// and release it as any delivery.
    pub fn poll_service_delivery(&mut self) -> Option<Delivery> {
        self.service_deliveries.pop_front()
    }

    /// Next failure of a service message (its peer is unreachable): what
    /// was sent to that peer as a service message may be lost.
    pub fn poll_service_failure(&mut self) -> Option<SendFailure> {
        self.service_failures.pop_front()
    }

    /// Whether service failures wait (see [`Port::poll_service_failure`]).
    pub fn has_service_failures(&self) -> bool {
        !self.service_failures.is_empty()
    }

    /// Whether service messages wait in the service queue.
    pub fn has_service_deliveries(&self) -> bool {
        !self.service_deliveries.is_empty()
    }

    /// The bytes of a delivered message, until it is released.
    pub fn message(&self, delivery: &Delivery) -> Option<&[u8]> {
        self.ring
            .bytes(delivery.slot)
            .map(|b| &b[..delivery.len as usize])
    }

    /// Gives a delivered message's ring blocks back.
    pub fn release(&mut self, slot: RingSlot) -> Result<(), ReleaseError> {
        if self.ring.free(slot) {
            Ok(())
        } else {
            Err(ReleaseError(slot))
        }
    }

    /// The next peer that needs a route before anything can be sent to it.
    pub fn next_unrouted(&mut self) -> Option<ProcessAddr> {
        while let Some(idx) = self.unrouted.pop_front() {
            let p = &mut self.peers[idx as usize];
            p.set_awaiting_route(false);
            if p.route.is_none() {
                return Some(p.addr);
            }
        }
        None
    }

    /// Registers a method the port's frames may travel by and returns its
    /// index, the `method` of [`Route`]s through it.
    pub fn add_method(&mut self, caps: MethodCaps) -> Result<u8, ConfigError> {
        self.cfg.validate(Some(caps.mtu))?;
        let index = u8::try_from(self.methods.len()).map_err(|_| ConfigError {
            field: "methods",
            problem: "more than 256 methods on one port".into(),
        })?;
        self.methods.push(MethodInfo {
            caps,
            bulk: false,
            rails: false,
        });
        self.ready.push(VecDeque::new());
        Ok(index)
    }

    /// Sets the route to `addr`: frames to the peer go there from now on.
    /// Creates the peer's state if needed.
    pub fn set_route(
        &mut self,
        now: Time,
        addr: ProcessAddr,
        route: Route,
    ) -> Result<(), RouteError> {
        if usize::from(route.method) >= self.methods.len() {
            return Err(RouteError::UnknownMethod(route.method));
        }
        let idx = self.peer_idx_or_create(addr).map_err(RouteError::Peer)?;
        self.apply_route(idx, route);
        self.schedule(idx, now);
        self.arm_timer(idx);
        Ok(())
    }

    /// Whether a transmit round has anything to do: peers waiting for a
    /// route, or frames ready for some method.
    pub fn has_transmit_work(&self) -> bool {
        !self.unrouted.is_empty() || self.ready.iter().any(|q| !q.is_empty())
    }

    /// Whether the port has frames for method `method` to send now.
    pub fn wants_transmit(&self, method: u8) -> bool {
        self.ready
            .get(method as usize)
            .is_some_and(|q| !q.is_empty())
    }

    /// Sets a peer's route; the method index must be registered.
    fn apply_route(&mut self, idx: PeerIdx, route: Route) {
        let info = self.methods[usize::from(route.method)];
        let max_payload = info
            .caps
            .mtu
            .saturating_sub(HEADER_LEN)
            .clamp(1, usize::from(u16::MAX));
        let p = &mut self.peers[idx as usize];
        if p.route.is_some_and(|old| old != route) {
            p.cc.forget_base();
        }
        p.route = Some(route);
        p.frag_payload = max_payload as u16;
        p.reliable = info.caps.reliable;
        p.bulk = info.bulk;
    }

    /// Marks method `method` as moving the data of transfers itself (as the
    /// shared-memory method does with its exchange queues): transfers over
    /// it are handed to the engine ([`Port::next_outbound_bulk`]) instead of
    /// being cut into frames. Only for methods whose caps say `reliable`.
    pub fn set_method_bulk(&mut self, method: u8) -> Result<(), RouteError> {
        let info = self
            .methods
            .get_mut(usize::from(method))
            .ok_or(RouteError::UnknownMethod(method))?;
        info.bulk = info.caps.reliable;
        Ok(())
    }

    /// Whether frames leaving or arriving by method `method` carry a CRC32C.
    fn crc_for(&self, method: u8) -> bool {
        self.cfg.crc
            && !self
                .methods
                .get(usize::from(method))
                .is_some_and(|m| m.caps.integrity)
    }

    #[inline]
    fn peer_idx(&self, addr: ProcessAddr) -> Option<PeerIdx> {
        if let Some((a, idx)) = self.last_peer.get() {
            if a == addr {
                return Some(idx);
            }
        }
        let idx = self.peer_index.get(&addr).copied()?;
        self.last_peer.set(Some((addr, idx)));
        Some(idx)
    }

    fn peer_idx_or_create(&mut self, addr: ProcessAddr) -> Result<PeerIdx, SendError> {
        self.check_not_cut_off(addr)?;
        if let Some(idx) = self.peer_idx(addr) {
            return Ok(idx);
        }
        if self.peers.len() >= self.cfg.max_peers {
            return Err(SendError::TooManyPeers(self.cfg.max_peers));
        }
        let idx = self.peers.len() as PeerIdx;
        self.peers.push(Peer::new(
            addr,
            self.cfg.initial_seq,
            Congestion::new(&self.cfg.congestion, self.cfg.tx_window),
        ));
        self.peer_index.insert(addr, idx);
        Ok(idx)
    }

    /// Puts the peer where the engine will find it: in its method's ready
    /// queue if it can transmit, in the unrouted list if it has no route.
    fn schedule(&mut self, idx: PeerIdx, now: Time) {
        if self.cut_off(self.peers[idx as usize].addr) {
            return;
        }
        let gate = self.new_data_gate(idx, now);
        let new_data = gate == Gate::Open;
        if let Some(w) = self.peers[idx as usize].tx.as_mut() {
            // New data waiting only for pacing needs a timer, not a place
            // in the ready queue.
            let wake = match gate {
                Gate::PacedUntil(t) => t,
                _ => Time::NEVER,
            };
            let newly = wake != Time::NEVER && w.cc.wake == Time::NEVER;
            w.cc.wake = wake;
            if newly {
                self.stats.pacing_waits += 1;
                self.arm_timer(idx);
            }
        }
        let p = &mut self.peers[idx as usize];
        if p.has_rails() {
            self.schedule_rails(idx, now, new_data);
            return;
        }
        if !p.wants_tx(now, new_data) {
            return;
        }
        match p.route {
            None => {
                if !p.awaiting_route() {
                    p.set_awaiting_route(true);
                    self.unrouted.push_back(idx);
                }
            }
            Some(route) => {
                if !p.queued {
                    p.queued = true;
                    self.ready[route.method as usize].push_back(idx);
                }
            }
        }
    }

    /// Returns pooled windows of a peer that has gone idle.
    fn recycle_windows(&mut self, idx: PeerIdx) {
        let p = &mut self.peers[idx as usize];
        if p.tx.is_some() && p.tx_idle() && !p.retx_pending() {
            if let Some(w) = p.tx.take() {
                self.tx_windows.push(w);
            }
        }
        if p.rx.as_ref().is_some_and(|w| w.is_idle()) {
            if let Some(w) = p.rx.take() {
                self.rx_windows.push(w);
            }
        }
    }

    /// A message slot, beyond the configured maximum if `internal` (control
    /// messages must never be refused: they carry other transfers'
    /// progress).
    fn alloc_message(&mut self, internal: bool) -> Option<u32> {
        if let Some(m) = self.free_messages.pop() {
            return Some(m);
        }
        if internal {
            self.messages.push(None);
            return Some(self.messages.len() as u32 - 1);
        }
        None
    }

    fn take_buffer(&mut self, data: &[u8]) -> Vec<u8> {
        let mut b = self.buffers.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        b
    }

    fn free_message(&mut self, m: u32) -> Option<OutMessage> {
        let msg = self.messages[m as usize].take()?;
        if !self.bulk_ready.is_empty() {
            // The slot may be reused: it must not stay handed to the engine.
            self.bulk_ready.retain(|x| *x != m);
        }
        self.free_messages.push(m);
        if msg.on_done != OnDone::Internal && msg.on_done != OnDone::GetReply {
            self.outstanding -= 1;
        }
        Some(msg)
    }

    fn recycle_buffer(&mut self, data: Vec<u8>) {
        self.buffers.push(data);
    }
}

#[cfg(test)]
mod asymmetric_tests;
#[cfg(test)]
mod bulk_tests;
#[cfg(test)]
mod bundle_tests;
#[cfg(test)]
mod channel_tests;
#[cfg(test)]
mod detach_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod liveness_tests;
#[cfg(test)]
mod loss_tests;
#[cfg(test)]
mod node_tests;
#[cfg(test)]
mod rails_tests;
#[cfg(test)]
mod tests;
