//! The simulated fabric and its endpoints.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bcl_core::{Descriptor, LinkId, Method, MethodCaps, MethodError, Time, TxFrame};
use rand_pcg::rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::clock::SimClock;
use crate::fault::FaultProfile;

/// The method name of the simulated fabric.
pub const METHOD_NAME: &str = "sim";

/// Most frames one [`Method::tx_burst`] call sends.
pub const MAX_TX_BURST: usize = 64;

/// Buffers an endpoint keeps for itself before returning them to the
/// fabric's shared free list.
const SPARE_CAP: usize = 2 * MAX_TX_BURST;

/// Least extra hold-back of a reordered frame (used when the profile's delay
/// is smaller).
const MIN_REORDER_HOLD: Duration = Duration::from_micros(5);

/// A shared link in front of one endpoint, like a switch port: every frame
/// to that endpoint, from any sender, crosses it after its own directed
/// link. It carries `rate_bytes_per_sec`; frames wait in a queue of at most
/// `queue_bytes` bytes, and a frame that does not fit is dropped (tail
/// drop). Several senders into one receiver (incast) meet here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bottleneck {
    /// Bandwidth of the shared link in bytes per second.
    pub rate_bytes_per_sec: u64,
    /// Bytes the queue before it holds (the frame on the wire not counted).
    pub queue_bytes: u64,
}

impl Bottleneck {
    /// A frame of `len` bytes reaches the bottleneck at `arrives`, its wire
    /// free at `wire_free`: when the frame leaves it, or `None` if the
    /// queue has no room for it.
    fn admit(&self, wire_free: Time, arrives: Time, len: usize) -> Option<Time> {
        let rate = u128::from(self.rate_bytes_per_sec.max(1));
        let waiting_ns = wire_free.as_nanos().saturating_sub(arrives.as_nanos());
        let queued = u128::from(waiting_ns) * rate / 1_000_000_000;
        if queued > u128::from(self.queue_bytes) {
            return None;
        }
        let bytes = u128::try_from(len).unwrap_or(u128::MAX);
        let serialisation = bytes.saturating_mul(1_000_000_000).div_ceil(rate);
        let start = wire_free.max(arrives);
        Some(start + Duration::from_nanos(u64::try_from(serialisation).unwrap_or(u64::MAX)))
    }
}

/// How to build a [`SimFabric`].
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// Largest BCL frame (header plus payload) in bytes; every lent transmit
    /// buffer is exactly this long. Default 1500.
    pub mtu: usize,
    /// What the wire does to frames on every directed link without an
    /// override ([`SimFabric::set_faults`]). Default: a perfect wire.
    pub faults: FaultProfile,
    /// Seed of the fabric's random number generator. Default 0.
    pub seed: u64,
    /// When frames become deliverable. Default: a new virtual clock at zero.
    pub clock: SimClock,
    /// The method name its endpoints report and their descriptors carry.
    /// Default `sim`; a second fabric under another name gives one
    /// endpoint two simulated methods (or a registry a second simulated
    /// kind).
    pub method_name: &'static str,
}

impl Default for FabricConfig {
    fn default() -> Self {
        Self {
            mtu: 1500,
            faults: FaultProfile::default(),
            seed: 0,
            clock: SimClock::default(),
            method_name: METHOD_NAME,
        }
    }
}

/// Counters of a fabric since its creation.
///
/// At every moment `offered + duplicated == delivered + dropped + in_flight`
/// (see [`SimFabric::in_flight`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames handed to the fabric by [`Method::tx_burst`].
    pub offered: u64,
    /// Frames (copies included) shown to a receiver by [`Method::rx_burst`].
    pub delivered: u64,
    /// Frames that will never be delivered: lost on the wire, sent to an
    /// address with no open endpoint, or still queued for an endpoint when
    /// it shut down.
    pub dropped: u64,
    /// The part of `dropped` sent to an address with no open endpoint.
    pub unroutable: u64,
    /// Extra copies created by duplication.
    pub duplicated: u64,
    /// Frames (copies included) whose bits were flipped.
    pub corrupted: u64,
    /// Frames (copies included) held back so that later frames overtake them.
    pub reordered: u64,
    /// Frames that found their directed link's wire busy and had to wait
    /// for it (rate limiting only).
    pub delayed_by_rate: u64,
    /// The part of `dropped` that found a bottleneck's queue full.
    pub queue_drops: u64,
    /// Frame buffers the fabric has allocated. Buffers are recycled, so
    /// this stops growing once the fabric reaches a steady state.
    pub buffers_allocated: u64,
}

impl fmt::Display for FabricStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offered={} delivered={} dropped={} unroutable={} duplicated={} corrupted={} \
             reordered={} delayed_by_rate={} queue_drops={} buffers_allocated={}",
            self.offered,
            self.delivered,
            self.dropped,
            self.unroutable,
            self.duplicated,
            self.corrupted,
            self.reordered,
            self.delayed_by_rate,
            self.queue_drops,
            self.buffers_allocated
        )
    }
}

/// A frame in flight. Its buffer is always `mtu` bytes long; the frame is
/// the first `len` of them.
struct Frame {
    at: Time,
    seq: u64,
    src: u32,
    len: usize,
    buf: Vec<u8>,
}

impl Frame {
    fn key(&self) -> (Time, u64) {
        (self.at, self.seq)
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Frame {}

impl PartialOrd for Frame {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Frame {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The frames queued for one endpoint, earliest delivery first.
struct Inbox {
    open: bool,
    frames: BinaryHeap<Reverse<Frame>>,
}

/// State of one directed link.
#[derive(Default)]
struct LinkState {
    /// When the wire finishes serialising the last frame (rate limiting).
    wire_free: Time,
    /// Delivery time of the last frame that was not reordered: later
    /// frames are not delivered before it, so jitter never reorders.
    last_in_order: Time,
}

/// Everything behind the fabric's lock.
struct State {
    default_faults: FaultProfile,
    overrides: HashMap<(u32, u32), FaultProfile>,
    links: HashMap<(u32, u32), LinkState>,
    /// Bottlenecks by receiving address, with the instant each one's wire
    /// is free.
    bottlenecks: HashMap<u32, (Bottleneck, Time)>,
    inboxes: Vec<Inbox>,
    free: Vec<Vec<u8>>,
    rng: Pcg64Mcg,
    seq: u64,
    in_flight: usize,
    stats: FabricStats,
}

struct Shared {
    mtu: usize,
    clock: SimClock,
    name: &'static str,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing that can panic runs under the lock (the callers' closures
        // run outside it), but a poisoned lock must not turn into a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A uniform number in `[0, 1)`.
fn unit(rng: &mut Pcg64Mcg) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (rng.next_u64() >> 11) as f64 * SCALE
}

/// True with probability `p` (no random draw when `p` is 0 or 1, or NaN).
fn chance(rng: &mut Pcg64Mcg, p: f64) -> bool {
    if p.is_nan() || p <= 0.0 {
        false
    } else if p >= 1.0 {
        true
    } else {
        unit(rng) < p
    }
}

/// A uniform number in `[0, n)`; 0 if `n` is 0 (Lemire's method, unbiased).
fn below(rng: &mut Pcg64Mcg, n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        // Truncations intended: low and high halves of the product.
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// A uniform number in `[0, max]`.
fn up_to(rng: &mut Pcg64Mcg, max: u64) -> u64 {
    match max.checked_add(1) {
        Some(n) => below(rng, n),
        None => rng.next_u64(),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Flips 1 to 3 distinct random bits of `frame`; false if it is empty.
fn corrupt(rng: &mut Pcg64Mcg, frame: &mut [u8]) -> bool {
    let bits = u64::try_from(frame.len())
        .unwrap_or(u64::MAX / 8)
        .saturating_mul(8);
    if bits == 0 {
        return false;
    }
    let count = usize::try_from(1 + below(rng, 3)).unwrap_or(1);
    let mut chosen = [u64::MAX; 3];
    for i in 0..count {
        // A frame has at least 8 bits, so a fresh bit is always found.
        let bit = loop {
            let b = below(rng, bits);
            if !chosen[..i].contains(&b) {
                break b;
            }
        };
        chosen[i] = bit;
        let byte = usize::try_from(bit / 8).ok().and_then(|i| frame.get_mut(i));
        if let Some(byte) = byte {
            *byte ^= 1 << (bit % 8);
        }
    }
    true
}

impl State {
    /// The index of `to`'s inbox if an open endpoint has that address.
    fn open_inbox(&self, to: u32) -> Option<usize> {
        let index = usize::try_from(to).ok()?;
        self.inboxes
            .get(index)
            .filter(|inbox| inbox.open)
            .map(|_| index)
    }

    /// Applies the faults of link `from -> to` to one frame (the first `len`
    /// bytes of `buf`) sent at `now`, and queues what survives.
    fn send(&mut self, mtu: usize, now: Time, from: u32, to: u32, len: usize, buf: Vec<u8>) {
        self.stats.offered += 1;
        let Some(inbox) = self.open_inbox(to) else {
            self.stats.dropped += 1;
            self.stats.unroutable += 1;
            self.free.push(buf);
            return;
        };
        // Small and without heap data: copying it frees the borrow of self.
        let profile = self
            .overrides
            .get(&(from, to))
            .unwrap_or(&self.default_faults)
            .clone();

        // The frame occupies the wire whether or not it is lost on it.
        let mut departs = now;
        if let Some(rate) = profile.rate_bytes_per_sec.filter(|r| *r > 0) {
            let link = self.links.entry((from, to)).or_default();
            if link.wire_free > now {
                self.stats.delayed_by_rate += 1;
            }
            let bytes = u128::try_from(len).unwrap_or(u128::MAX);
            let serialisation = bytes
                .saturating_mul(1_000_000_000)
                .div_ceil(u128::from(rate));
            let serialisation = u64::try_from(serialisation).unwrap_or(u64::MAX);
            departs = now.max(link.wire_free) + Duration::from_nanos(serialisation);
            link.wire_free = departs;
        }

        if let Some((neck, wire_free)) = self.bottlenecks.get_mut(&to) {
            match neck.admit(*wire_free, departs, len) {
                Some(leaves) => {
                    departs = leaves;
                    *wire_free = leaves;
                }
                None => {
                    self.stats.dropped += 1;
                    self.stats.queue_drops += 1;
                    self.free.push(buf);
                    return;
                }
            }
        }

        if chance(&mut self.rng, profile.loss) {
            self.stats.dropped += 1;
            self.free.push(buf);
            return;
        }
        let copy = if chance(&mut self.rng, profile.duplicate) {
            self.stats.duplicated += 1;
            let mut copy = match self.free.pop() {
                Some(buf) => buf,
                None => {
                    self.stats.buffers_allocated += 1;
                    vec![0; mtu]
                }
            };
            if let (Some(dst), Some(src)) = (copy.get_mut(..len), buf.get(..len)) {
                dst.copy_from_slice(src);
            }
            Some(copy)
        } else {
            None
        };
        self.queue(&profile, departs, from, to, inbox, len, buf);
        if let Some(copy) = copy {
            self.queue(&profile, departs, from, to, inbox, len, copy);
        }
    }

    /// Draws latency, reordering and corruption for one copy of a frame that
    /// left the sender's wire at `departs`, and puts it in inbox `inbox`.
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        profile: &FaultProfile,
        departs: Time,
        from: u32,
        to: u32,
        inbox: usize,
        len: usize,
        mut buf: Vec<u8>,
    ) {
        let jitter = if profile.jitter.is_zero() {
            0
        } else {
            up_to(&mut self.rng, nanos(profile.jitter))
        };
        let link = self.links.entry((from, to)).or_default();
        let mut at =
            (departs + profile.delay + Duration::from_nanos(jitter)).max(link.last_in_order);
        if chance(&mut self.rng, profile.reorder) {
            self.stats.reordered += 1;
            let times = 1 + below(&mut self.rng, 3);
            let hold = nanos(profile.delay.max(MIN_REORDER_HOLD)).saturating_mul(times);
            at = at + Duration::from_nanos(hold);
        } else {
            link.last_in_order = at;
        }
        if chance(&mut self.rng, profile.corrupt) {
            if let Some(frame) = buf.get_mut(..len) {
                if corrupt(&mut self.rng, frame) {
                    self.stats.corrupted += 1;
                }
            }
        }
        self.seq += 1;
        let frame = Frame {
            at,
            seq: self.seq,
            src: from,
            len,
            buf,
        };
        if let Some(inbox) = self.inboxes.get_mut(inbox) {
            inbox.frames.push(Reverse(frame));
            self.in_flight += 1;
        } else {
            // Unreachable: the caller checked the inbox exists.
            self.stats.dropped += 1;
            self.free.push(frame.buf);
        }
    }

    /// Moves up to `budget` frames of inbox `inbox` deliverable at `now`
    /// into `out`, earliest first.
    fn take_ready(&mut self, inbox: usize, now: Time, budget: usize, out: &mut Vec<Frame>) {
        let Some(inbox) = self.inboxes.get_mut(inbox) else {
            return;
        };
        let mut taken = 0;
        while taken < budget {
            if inbox.frames.peek().is_none_or(|f| f.0.at > now) {
                break;
            }
            let Some(Reverse(frame)) = inbox.frames.pop() else {
                break;
            };
            out.push(frame);
            taken += 1;
        }
        self.in_flight -= taken;
        self.stats.delivered += u64::try_from(taken).unwrap_or(u64::MAX);
    }

    /// Closes inbox `inbox`, dropping what is queued in it.
    fn close(&mut self, inbox: usize) {
        let Some(inbox) = self.inboxes.get_mut(inbox) else {
            return;
        };
        inbox.open = false;
        let queued = inbox.frames.len();
        self.free
            .extend(inbox.frames.drain().map(|Reverse(frame)| frame.buf));
        self.in_flight -= queued;
        self.stats.dropped += u64::try_from(queued).unwrap_or(u64::MAX);
    }
}

/// An in-process simulated fabric: a set of endpoints that exchange frames
/// through a lossy wire with seeded fault injection.
///
/// Cloning shares the fabric. It is `Send + Sync`; all state sits behind
/// one mutex, so calls from several threads are serialised.
///
/// # Determinism
///
/// The fabric draws every random decision from one generator seeded with
/// [`FabricConfig::seed`], in the order frames are sent. With a virtual
/// clock, the same seed and the same sequence of calls give identical
/// faults and deliveries. With a real clock, or with several threads, runs
/// are seeded but the interleaving of calls (and so the trace) is not
/// deterministic.
#[derive(Clone)]
pub struct SimFabric {
    shared: Arc<Shared>,
}

impl fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFabric")
            .field("mtu", &self.shared.mtu)
            .field("clock", &self.shared.clock)
            .finish_non_exhaustive()
    }
}

impl SimFabric {
    /// A fabric with no endpoints.
    pub fn new(cfg: FabricConfig) -> SimFabric {
        let state = State {
            default_faults: cfg.faults,
            overrides: HashMap::new(),
            links: HashMap::new(),
            bottlenecks: HashMap::new(),
            inboxes: Vec::new(),
            free: Vec::new(),
            rng: Pcg64Mcg::seed_from_u64(cfg.seed),
            seq: 0,
            in_flight: 0,
            stats: FabricStats::default(),
        };
        SimFabric {
            shared: Arc::new(Shared {
                mtu: cfg.mtu,
                clock: cfg.clock,
                name: cfg.method_name,
                state: Mutex::new(state),
            }),
        }
    }

    /// The method name of the fabric's endpoints.
    pub fn method_name(&self) -> &'static str {
        self.shared.name
    }

    /// A new endpoint with the next address (0, 1, 2, ...).
    pub fn endpoint(&self) -> SimEndpoint {
        let mut state = self.shared.lock();
        // More than u32::MAX endpoints cannot be addressed; the last
        // address is reused rather than panicking (never reached in practice).
        let address = u32::try_from(state.inboxes.len()).unwrap_or(u32::MAX);
        state.inboxes.push(Inbox {
            open: true,
            frames: BinaryHeap::new(),
        });
        drop(state);
        SimEndpoint {
            fabric: self.clone(),
            address,
            closed: false,
            spare: Vec::new(),
            pending: Vec::new(),
            received: Vec::new(),
        }
    }

    /// The fabric's clock.
    pub fn clock(&self) -> SimClock {
        self.shared.clock.clone()
    }

    /// The current time of the fabric's clock.
    pub fn now(&self) -> Time {
        self.shared.clock.now()
    }

    /// The largest frame the fabric carries.
    pub fn mtu(&self) -> usize {
        self.shared.mtu
    }

    /// The earliest time a frame in flight becomes deliverable, or `None`
    /// if nothing is in flight. A virtual-time harness advances its clock to
    /// the earlier of this and the protocol's next deadline.
    pub fn next_delivery(&self) -> Option<Time> {
        let state = self.shared.lock();
        state
            .inboxes
            .iter()
            .filter_map(|inbox| inbox.frames.peek().map(|f| f.0.at))
            .min()
    }

    /// Frames in flight in the whole fabric (queued, not yet received).
    pub fn in_flight(&self) -> usize {
        self.shared.lock().in_flight
    }

    /// The fabric's counters.
    pub fn stats(&self) -> FabricStats {
        self.shared.lock().stats
    }

    /// Replaces the profile of the directed link `from -> to` (frames sent
    /// by endpoint `from` to endpoint `to`); the other direction keeps its
    /// own. Applies to frames sent from now on.
    pub fn set_faults(&self, from: u32, to: u32, profile: FaultProfile) {
        self.shared.lock().overrides.insert((from, to), profile);
    }

    /// Removes the override of the directed link `from -> to`, so it uses
    /// the default profile again.
    pub fn clear_faults(&self, from: u32, to: u32) {
        self.shared.lock().overrides.remove(&(from, to));
    }

    /// Puts a [`Bottleneck`] in front of endpoint `to` (`None` removes it).
    /// Applies to frames sent from now on.
    pub fn set_bottleneck(&self, to: u32, neck: Option<Bottleneck>) {
        let mut state = self.shared.lock();
        match neck {
            Some(b) => {
                state.bottlenecks.insert(to, (b, Time::ZERO));
            }
            None => {
                state.bottlenecks.remove(&to);
            }
        }
    }

    /// Replaces the default profile (links without an override).
    pub fn set_default_faults(&self, profile: FaultProfile) {
        self.shared.lock().default_faults = profile;
    }
}

/// One endpoint of a [`SimFabric`]; implements [`Method`] with the name
/// `sim`.
///
/// Its descriptor is `sim:ADDRESS`. The [`LinkId`] of a peer is the peer's
/// address, both for [`Method::open_link`] and for the sender reported by
/// [`Method::rx_burst`]. Dropping the endpoint shuts it down.
pub struct SimEndpoint {
    fabric: SimFabric,
    address: u32,
    closed: bool,
    /// Transmit buffers kept by this endpoint (each `mtu` bytes long).
    spare: Vec<Vec<u8>>,
    /// Frames written by the core in this burst: (destination, length, buffer).
    pending: Vec<(u32, usize, Vec<u8>)>,
    /// Frames taken from the inbox in this burst.
    received: Vec<Frame>,
}

impl fmt::Debug for SimEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimEndpoint")
            .field("address", &self.address)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl SimEndpoint {
    /// This endpoint's address on the fabric.
    pub fn address(&self) -> u32 {
        self.address
    }

    /// The fabric this endpoint belongs to.
    pub fn fabric(&self) -> &SimFabric {
        &self.fabric
    }

    fn inbox(&self) -> usize {
        // The address came from an inbox index, so it fits.
        usize::try_from(self.address).unwrap_or(usize::MAX)
    }

    fn check_open(&self) -> Result<(), MethodError> {
        if self.closed {
            Err(MethodError::Other {
                method: self.fabric.shared.name,
                reason: format!("endpoint {} is shut down", self.address),
            })
        } else {
            Ok(())
        }
    }

    /// A transmit buffer of exactly `mtu` bytes.
    fn take_buffer(&mut self) -> Vec<u8> {
        if let Some(buf) = self.spare.pop() {
            return buf;
        }
        let mut state = self.fabric.shared.lock();
        let keep = state.free.len().saturating_sub(MAX_TX_BURST);
        self.spare.extend(state.free.drain(keep..));
        if let Some(buf) = self.spare.pop() {
            return buf;
        }
        state.stats.buffers_allocated += 1;
        drop(state);
        vec![0; self.fabric.shared.mtu]
    }

    /// Returns the buffers of received frames to the spare list, and what
    /// does not fit there to the fabric.
    fn recycle_received(&mut self) {
        let room = SPARE_CAP.saturating_sub(self.spare.len());
        if self.received.len() > room {
            let mut state = self.fabric.shared.lock();
            state
                .free
                .extend(self.received.drain(room..).map(|frame| frame.buf));
        }
        self.spare
            .extend(self.received.drain(..).map(|frame| frame.buf));
    }
}

impl Method for SimEndpoint {
    fn name(&self) -> &'static str {
        self.fabric.shared.name
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: self.fabric.shared.mtu,
            integrity: false,
            reliable: false,
        }
    }

    fn descriptor(&self) -> Descriptor {
        Descriptor::new(self.fabric.shared.name, self.address.to_string())
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let bad = |reason: String| MethodError::BadDescriptor {
            method: self.fabric.shared.name,
            descriptor: peer.clone(),
            reason,
        };
        let name = self.fabric.shared.name;
        if peer.method != name {
            return Err(bad(format!(
                "it is for method {:?}, not {name:?}",
                peer.method
            )));
        }
        let digits = !peer.address.is_empty() && peer.address.bytes().all(|b| b.is_ascii_digit());
        let address: u32 = peer
            .address
            .parse()
            .ok()
            .filter(|_| digits)
            .ok_or_else(|| {
                bad(format!(
                    "address {:?} is not an endpoint number",
                    peer.address
                ))
            })?;
        let known = self.fabric.shared.lock().inboxes.len();
        if usize::try_from(address).map_or(true, |a| a >= known) {
            return Err(bad(format!(
                "no endpoint {address} on this fabric ({known} endpoints)"
            )));
        }
        Ok(LinkId(address))
    }

    /// Shows the frames whose delivery time has come, earliest first (ties
    /// in sending order). `sink` runs without the fabric's lock held, so it
    /// may call into the fabric.
    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        // Left over only if a previous sink panicked.
        self.recycle_received();
        if budget == 0 {
            return Ok(0);
        }
        let now = self.fabric.now();
        let inbox = self.inbox();
        self.fabric
            .shared
            .lock()
            .take_ready(inbox, now, budget, &mut self.received);
        let count = self.received.len();
        for frame in &self.received {
            sink(LinkId(frame.src), frame.buf.get(..frame.len).unwrap_or(&[]));
        }
        self.recycle_received();
        Ok(count)
    }

    /// Lends buffers of exactly the MTU, at most [`MAX_TX_BURST`] per call,
    /// then queues the frames. Frames to an address without an open
    /// endpoint are dropped and counted in [`FabricStats::unroutable`].
    ///
    /// A [`TxFrame::len`] longer than the MTU (a broken source) ends the
    /// burst with [`MethodError::Other`]; that frame is discarded, the frames
    /// before it are sent.
    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let mtu = self.fabric.shared.mtu;
        let mut too_long = None;
        while self.pending.len() < MAX_TX_BURST {
            let mut buf = self.take_buffer();
            match source(&mut buf) {
                None => {
                    self.spare.push(buf);
                    break;
                }
                Some(frame) if frame.len > mtu => {
                    self.spare.push(buf);
                    too_long = Some(frame.len);
                    break;
                }
                Some(frame) => self.pending.push((frame.link.0, frame.len, buf)),
            }
        }
        let sent = self.pending.len();
        if sent > 0 {
            let now = self.fabric.now();
            let mut state = self.fabric.shared.lock();
            for (to, len, buf) in self.pending.drain(..) {
                state.send(mtu, now, self.address, to, len, buf);
            }
        }
        match too_long {
            None => Ok(sent),
            Some(len) => Err(MethodError::Other {
                method: self.fabric.shared.name,
                reason: format!(
                    "frame of {len} bytes exceeds the MTU of {mtu} bytes; \
                     discarded it after sending the {sent} frames before it"
                ),
            }),
        }
    }

    /// Closes the endpoint: frames queued for it are dropped, frames sent
    /// to it later are unroutable, and further calls fail.
    fn shutdown(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let inbox = self.inbox();
        let mut state = self.fabric.shared.lock();
        state.close(inbox);
        state.free.append(&mut self.spare);
    }
}

impl Drop for SimEndpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}
