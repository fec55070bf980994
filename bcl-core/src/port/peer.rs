//! Per-peer state: small when idle, with pooled windows while active.
//!
//! BCL-3's scalable flow control keeps no per-peer credits, so what a port
//! must remember about a peer it is not currently exchanging frames with is a
//! handful of counters: sequence positions, the round-trip estimate, the
//! route, statistics. That is [`Peer`], checked to stay within 256 bytes.
//! The per-frame bookkeeping of an active exchange — the sender's window of
//! unacknowledged frames ([`TxWindow`]) and the receiver's reassembly table
//! ([`RxWindow`]) — is borrowed from port-wide pools while needed and handed
//! back when the peer goes idle.

use super::congestion::{Congestion, CongestionRound};
use super::loss::{RackMark, ReorderState};
use crate::addr::ProcessAddr;
use crate::method::Route;
use crate::ring::RingSlot;
use crate::rtt::RttEstimator;
use crate::sack::{SackBitmap, RX_WINDOW};
use crate::seq::Seq;
use crate::stats::PeerStats;
use crate::time::Time;
use crate::wire::NakReason;

/// Index of a peer in the port's peer table.
pub(crate) type PeerIdx = u32;

/// "No message" in intrusive message lists.
pub(crate) const NO_MSG: u32 = u32::MAX;

/// Reassembly entries: messages overlapping the receive window, indexed by
/// message id modulo this size. Twice the window, because a message whose
/// first frame is still undelivered can reach back one window.
pub(crate) const RX_MSGS: usize = 2 * RX_WINDOW as usize;

/// One frame the sender has sent and not yet seen cumulatively acknowledged.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxSlot {
    /// Index of the message in the port's message table.
    pub msg: u32,
    /// Offset of the fragment in the message.
    pub offset: u32,
    /// Payload bytes of the fragment.
    pub len: u16,
    /// Times sent (for Karn's rule).
    pub sent_count: u8,
    /// This is the message's last fragment: acknowledging it completes the
    /// message.
    pub last_of_msg: bool,
    /// Selectively acknowledged: do not resend.
    pub sacked: bool,
    /// Judged lost by time and sequence: resend at the next opportunity.
    pub lost: bool,
    /// The frame is a bundle: `msg` is its first message, and the others
    /// follow it through their `next` links (ended by [`NO_MSG`]).
    pub bundle: bool,
    /// The rail it is in flight on, plus one (0: none; see `rails`).
    pub rail: u8,
    /// First sequence number of the message or chunk the frame belongs to.
    pub msg_seq: Seq,
    /// When it was last sent.
    pub last_sent: Time,
    /// The peer's transmission count when it was last sent: orders frames
    /// by sending, which sequence numbers (resends) and times (one clock
    /// reading per burst) cannot.
    pub sent_order: u32,
}

/// The sender's window: frames in flight to one peer, indexed by sequence
/// number modulo the window.
pub(crate) struct TxWindow {
    pub slots: [TxSlot; RX_WINDOW as usize],
    /// The most recently sent frame known delivered.
    pub rack: RackMark,
    /// Congestion control's pacing and once-per-round-trip state.
    pub cc: CongestionRound,
    /// When the last retransmission timeout fired: an acknowledgement of a
    /// frame sent before it may answer the timeout's probe, so it gives no
    /// round-trip sample.
    pub last_timeout: Time,
}

impl TxWindow {
    pub fn new() -> Box<Self> {
        Box::new(TxWindow {
            slots: [TxSlot::default(); RX_WINDOW as usize],
            rack: RackMark::default(),
            cc: CongestionRound::default(),
            last_timeout: Time::ZERO,
        })
    }

    pub fn slot(&self, seq: Seq) -> &TxSlot {
        &self.slots[seq.0 as usize % RX_WINDOW as usize]
    }

    pub fn slot_mut(&mut self, seq: Seq) -> &mut TxSlot {
        &mut self.slots[seq.0 as usize % RX_WINDOW as usize]
    }
}

/// A message being reassembled in the ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxMsg {
    /// Frame type: DATA for a system-channel message, else a control
    /// message the port handles itself.
    pub kind: crate::wire::FrameType,
    pub msg_id: u32,
    pub slot: RingSlot,
    pub len: u32,
    /// Payload bytes received so far (each frame counted once).
    pub received: u32,
    /// Sequence number of the message's first frame (from the header).
    pub first_seq: Seq,
    /// Highest sequence number of its frames received so far.
    pub last_seq: Seq,
}

/// The receiver's window for one peer: which frames past the next wanted one
/// have arrived, and the messages being reassembled.
pub(crate) struct RxWindow {
    pub bitmap: SackBitmap,
    pub active_msgs: u32,
    pub msgs: [Option<RxMsg>; RX_MSGS],
}

impl RxWindow {
    pub fn new() -> Box<Self> {
        Box::new(RxWindow {
            bitmap: SackBitmap::new(),
            active_msgs: 0,
            msgs: [None; RX_MSGS],
        })
    }

    pub fn entry(&self, msg_id: u32) -> &Option<RxMsg> {
        &self.msgs[msg_id as usize % RX_MSGS]
    }

    pub fn entry_mut(&mut self, msg_id: u32) -> &mut Option<RxMsg> {
        &mut self.msgs[msg_id as usize % RX_MSGS]
    }

    /// Whether the window holds nothing worth keeping.
    pub fn is_idle(&self) -> bool {
        self.active_msgs == 0 && self.bitmap.is_empty()
    }
}

/// A peer's liveness bits (see `liveness`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Liveness(u8);

impl Liveness {
    /// In the port's watch list.
    pub const WATCHED: u8 = 1;
    /// The application marked it critical: watched even when idle.
    pub const CRITICAL: u8 = 2;
    /// A ping should go out to it.
    pub const PING_NOW: u8 = 4;
    /// It pinged us: answer at once.
    pub const ANSWER_PING: u8 = 8;
    /// Declared gone (by its method or by liveness) and not heard from
    /// since: a frame from it is reported as the peer coming back.
    pub const DOWN: u8 = 16;
    /// Its incarnation is known (`Peer::incarnation`).
    pub const INCARNATION_KNOWN: u8 = 32;
    /// Two bits: pings still to send after the one due now (a suspect
    /// peer gets several, so a lossy path does not pass for a dead peer).
    const EXTRA_PINGS: u8 = 64 | 128;
    const EXTRA_PINGS_SHIFT: u32 = 6;

    /// Pings still to send after the one due now.
    pub fn extra_pings(self) -> u8 {
        (self.0 & Self::EXTRA_PINGS) >> Self::EXTRA_PINGS_SHIFT
    }

    /// Sets the pings to send after the one due now (at most 3).
    pub fn set_extra_pings(&mut self, n: u8) {
        self.0 = (self.0 & !Self::EXTRA_PINGS)
            | ((n.min(3) << Self::EXTRA_PINGS_SHIFT) & Self::EXTRA_PINGS);
    }

    /// Whether any of `bits` is set.
    pub fn has(self, bits: u8) -> bool {
        self.0 & bits != 0
    }

    /// Sets `bits` (`on`) or clears them.
    pub fn set(&mut self, bits: u8, on: bool) {
        if on {
            self.0 |= bits;
        } else {
            self.0 &= !bits;
        }
    }
}

/// Everything a port keeps about one remote process.
pub(crate) struct Peer {
    pub addr: ProcessAddr,
    pub route: Option<Route>,
    /// Payload bytes per frame on the route (MTU minus header).
    pub frag_payload: u16,
    /// In its method's ready queue.
    pub queued: bool,
    /// Its route's method neither loses nor reorders: frames to it are
    /// unsequenced.
    pub reliable: bool,
    /// Its route's method moves transfer data itself.
    pub bulk: bool,
    /// Frames handed to the (reliable) method for it, for matching the
    /// method's count of frames written (wrapping).
    pub unseq_handed: u32,
    /// [`Peer::AWAITING_ROUTE`] and [`Peer::RAILS`] (one byte, so an idle
    /// peer stays within 256 bytes).
    route_flags: u8,

    // ---- sending ----
    /// Times the sender gave up on this peer; it starts a new sequence space
    /// (a new epoch on the wire) each time.
    pub tx_generation: u8,
    pub tx: Option<Box<TxWindow>>,
    /// Next sequence number to assign.
    pub next_seq: Seq,
    /// Oldest sequence number not cumulatively acknowledged.
    pub una: Seq,
    /// Id of the next message to this peer.
    pub next_msg_id: u32,
    /// Ordered messages (system-channel and control) waiting to be framed
    /// (intrusive list).
    pub queue_head: u32,
    pub queue_tail: u32,
    /// Transfers ready to stream (intrusive list, round robin by chunks).
    pub xfer_head: u32,
    pub xfer_tail: u32,
    /// The message or transfer chunk being framed, frame after frame.
    pub framing: u32,
    /// Frames left in the current transfer chunk.
    pub chunk_left: u16,
    /// The next unit to frame should be a transfer chunk if one waits (so
    /// transfers and ordered messages take turns).
    pub transfer_turn: bool,
    pub rtt: RttEstimator,
    pub consecutive_timeouts: u8,
    /// Doublings of the ring-full back-off.
    pub busy_shift: u8,
    pub rto_deadline: Time,
    /// No data to this peer before this instant (its ring was full).
    pub busy_until: Time,
    /// Frames in `[retx_from, retx_to)` are candidates for resending.
    pub retx_from: Seq,
    pub retx_to: Seq,
    /// Resend every candidate not selectively acknowledged (timeout, ring
    /// full) rather than only those judged lost.
    pub retx_all: bool,
    /// A timeout asked to resend the newest frame in flight too.
    pub probe_newest: bool,
    /// DATA frames sent to it, first sendings and resends (wrapping): the
    /// next frame's [`TxSlot::sent_order`].
    pub transmissions: u32,
    /// How much reordering this peer's path shows, and when to look for
    /// losses again.
    pub reorder: ReorderState,
    /// Congestion window and the path's base round trip.
    pub cc: Congestion,

    // ---- receiving ----
    pub rx: Option<Box<RxWindow>>,
    /// We have heard from this peer and know where its sequence starts.
    pub rx_known: bool,
    /// Its frames come unsequenced (by a method that never loses): what we
    /// hold of them can never be dropped, nobody would resend it.
    pub rx_unsequenced: bool,
    /// The stream generation its frames to us carry (with `rx_known`).
    pub rx_generation: u8,
    /// Its incarnation, from the first frame heard from it (valid with
    /// [`Liveness::INCARNATION_KNOWN`]): frames of an older one are stale,
    /// a newer one means it restarted.
    pub incarnation: u32,
    /// When the last frame of its current incarnation arrived, in ticks of
    /// 2^20 ns, about 1 ms (wrapping every 69 s; only compared over shorter
    /// spans).
    pub last_heard_tick: u16,
    /// Next sequence number wanted (everything before it has arrived).
    pub expected: Seq,
    /// Id of the next message to deliver (messages are delivered in id
    /// order), valid with `deliver_id_known`: unknown until the frame at the
    /// start of the sender's window arrives. A value and a flag, not an
    /// `Option` (eight bytes), so an idle peer stays small; read it with
    /// [`Peer::deliver_id`].
    next_deliver_id: u32,
    deliver_id_known: bool,
    /// In-order frames not acknowledged yet.
    pub unacked: u32,
    /// An acknowledgement should go out at the next opportunity.
    pub ack_now: bool,
    /// A NAK should go out: reason and, for a full ring, the dropped frame.
    pub nak: NakReason,
    pub nak_dropped: Seq,
    /// A delayed acknowledgement is due at this instant.
    pub ack_deadline: Time,
    /// The highest cumulative acknowledgement sent to this peer so far.
    pub last_ack_sent: Seq,
    /// Duplicate DATA frames from it since our last ACK or NAK frame (the
    /// next one reports them).
    pub dups_unreported: u8,

    /// Liveness bits ([`Liveness`]); the rest of a watched peer's
    /// liveness state is in the port's watch list, so an idle peer pays
    /// one byte for it.
    pub liveness: Liveness,

    /// Earliest instant for which a timer entry is queued.
    pub timer_armed: Time,
    pub stats: PeerStats,
}

impl Peer {
    /// In the port's unrouted list.
    const AWAITING_ROUTE: u8 = 1;
    /// Reached through several rails (their state is in the port's rail
    /// sets; `route` is the main one).
    const RAILS: u8 = 2;

    /// Whether the peer is in the port's unrouted list.
    pub fn awaiting_route(&self) -> bool {
        self.route_flags & Self::AWAITING_ROUTE != 0
    }

    /// Notes whether the peer is in the port's unrouted list.
    pub fn set_awaiting_route(&mut self, on: bool) {
        self.set_route_flag(Self::AWAITING_ROUTE, on);
    }

    /// Whether the peer is reached through several rails.
    #[inline]
    pub fn has_rails(&self) -> bool {
        self.route_flags & Self::RAILS != 0
    }

    /// Notes whether the peer is reached through several rails.
    pub fn set_has_rails(&mut self, on: bool) {
        self.set_route_flag(Self::RAILS, on);
    }

    fn set_route_flag(&mut self, bit: u8, on: bool) {
        if on {
            self.route_flags |= bit;
        } else {
            self.route_flags &= !bit;
        }
    }

    pub fn new(addr: ProcessAddr, initial_seq: u32, cc: Congestion) -> Self {
        Peer {
            addr,
            route: None,
            frag_payload: 0,
            queued: false,
            reliable: false,
            bulk: false,
            unseq_handed: 0,
            route_flags: 0,
            tx_generation: 0,
            tx: None,
            next_seq: Seq(initial_seq),
            una: Seq(initial_seq),
            next_msg_id: 0,
            queue_head: NO_MSG,
            queue_tail: NO_MSG,
            xfer_head: NO_MSG,
            xfer_tail: NO_MSG,
            framing: NO_MSG,
            chunk_left: 0,
            transfer_turn: false,
            rtt: RttEstimator::new(),
            consecutive_timeouts: 0,
            busy_shift: 0,
            rto_deadline: Time::NEVER,
            busy_until: Time::ZERO,
            retx_from: Seq(initial_seq),
            retx_to: Seq(initial_seq),
            retx_all: false,
            probe_newest: false,
            transmissions: 0,
            reorder: ReorderState::new(Seq(initial_seq)),
            cc,

            rx: None,
            rx_known: false,
            rx_unsequenced: false,
            rx_generation: 0,
            incarnation: 0,
            last_heard_tick: 0,
            expected: Seq(0),
            next_deliver_id: 0,
            deliver_id_known: false,
            unacked: 0,
            ack_now: false,
            nak: NakReason::None,
            nak_dropped: Seq(0),
            ack_deadline: Time::NEVER,
            last_ack_sent: Seq(0),
            dups_unreported: 0,
            liveness: Liveness::default(),
            timer_armed: Time::NEVER,
            stats: PeerStats::default(),
        }
    }

    /// Id of the next message to deliver, once known.
    pub fn deliver_id(&self) -> Option<u32> {
        self.deliver_id_known.then_some(self.next_deliver_id)
    }

    /// Sets (or forgets) the id of the next message to deliver.
    pub fn set_deliver_id(&mut self, id: Option<u32>) {
        self.deliver_id_known = id.is_some();
        self.next_deliver_id = id.unwrap_or(0);
    }

    /// Frames sent and not cumulatively acknowledged.
    pub fn in_flight(&self) -> u32 {
        self.next_seq.since(self.una).unwrap_or(0)
    }

    /// Whether a retransmission sweep has candidates left.
    pub fn retx_pending(&self) -> bool {
        self.retx_from.before(self.retx_to)
    }

    /// Whether an ACK or NAK frame is wanted (a ping or its answer is one).
    pub fn ack_wanted(&self) -> bool {
        self.ack_now
            || self.nak != NakReason::None
            || self
                .liveness
                .has(Liveness::PING_NOW | Liveness::ANSWER_PING)
    }

    /// Whether something waits to be framed.
    pub fn has_unframed(&self) -> bool {
        self.framing != NO_MSG || self.queue_head != NO_MSG || self.xfer_head != NO_MSG
    }

    /// Whether the sender side holds nothing: no frame in flight, no message
    /// waiting.
    pub fn tx_idle(&self) -> bool {
        self.una == self.next_seq && !self.has_unframed()
    }

    /// Whether this peer could put a frame on the wire at `now`, given
    /// whether it has new data that may be framed (`new_data`).
    pub fn wants_tx(&self, now: Time, new_data: bool) -> bool {
        if self.ack_wanted() {
            return true;
        }
        if now < self.busy_until {
            return false;
        }
        self.retx_pending() || self.probe_newest || new_data
    }

    /// The earliest instant something about this peer must happen.
    pub fn next_deadline(&self) -> Time {
        let mut t = self
            .rto_deadline
            .min(self.ack_deadline)
            .min(self.reorder.deadline);
        if self.busy_until != Time::ZERO
            && (self.retx_pending() || self.probe_newest || self.has_unframed())
        {
            t = t.min(self.busy_until);
        }
        if let Some(w) = &self.tx {
            t = t.min(w.cc.wake);
        }
        t
    }

    /// A duplicate arrived: the sender resent something, perhaps a probe
    /// after a timeout. Answer at once, with a NAK if frames are missing
    /// (so the sender resends exactly those), else with an ACK; either
    /// counts the duplicate for the sender.
    pub fn answer_duplicate(&mut self) {
        self.dups_unreported = self.dups_unreported.saturating_add(1);
        let holes = self.rx.as_ref().is_some_and(|w| !w.bitmap.is_empty());
        if holes && self.nak == NakReason::None {
            self.nak = NakReason::Gap;
        }
        self.ack_now = true;
    }

    /// Widens the retransmission sweep to cover `[from, to)`.
    pub fn add_retx_range(&mut self, from: Seq, to: Seq, all: bool) {
        let from = if from.before(self.una) {
            self.una
        } else {
            from
        };
        if !from.before(to) {
            return;
        }
        if self.retx_pending() {
            if from.before(self.retx_from) {
                self.retx_from = from;
            }
            if self.retx_to.before(to) {
                self.retx_to = to;
            }
            self.retx_all |= all;
        } else {
            self.retx_from = from;
            self.retx_to = to;
            self.retx_all = all;
        }
    }
}
