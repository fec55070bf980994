//! The impairment bridge: a forwarding process in the middle namespace of an
//! impaired link that moves every frame between its two interfaces and applies
//! seeded loss, rate limiting, corruption, duplication, delay with jitter and
//! reordering, per direction, counting what it did.
//!
//! [`Engine`] is the per-direction fault pipeline (pure, unit-tested, no I/O);
//! `bridge` drives two engines from two AF_PACKET sockets (`sock`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use bcl_ether::HEADER_LEN;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

pub(crate) mod bridge;
pub(crate) mod sock;

/// Length of the `virtio_net_hdr` that PACKET_VNET_HDR puts before every frame.
pub(crate) const VNET_LEN: usize = 10;
const VNET_F_NEEDS_CSUM: u8 = 1;
/// How long a frame chosen for reordering waits for a later frame to overtake it.
pub(crate) const REORDER_HOLD_NS: u64 = 1_000_000;

/// Fault parameters of one direction of an impaired link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImpairParams {
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is sent twice.
    pub duplicate: f64,
    /// Probability that a frame is held back until the next frame of the same
    /// direction has been sent (at most 1 ms), so that it arrives after it.
    pub reorder: f64,
    /// Probability that one bit is flipped in the bytes after the Ethernet
    /// header (the receiving stack's checksums must catch it).
    pub corrupt: f64,
    /// Fixed one-way delay, nanoseconds.
    pub delay_ns: u64,
    /// Uniform jitter added to the delay, ± nanoseconds (may reorder frames).
    pub jitter_ns: u64,
    /// Rate limit in bits per second (0: none), a token bucket shaper.
    pub rate_bps: u64,
    /// Token bucket depth in bytes (0: one frame's worth).
    pub burst_bytes: u64,
    /// Longest a frame may wait in the shaper; frames beyond are dropped and
    /// counted as `rate_limited`.
    pub limit_ns: u64,
}

impl ImpairParams {
    /// Whether these parameters do nothing to frames.
    pub fn is_noop(&self) -> bool {
        self.loss == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.delay_ns == 0
            && self.jitter_ns == 0
            && self.rate_bps == 0
    }

    /// A one-line human description ("loss 10% reorder 25% delay 50us").
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        for (name, p) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if p > 0.0 {
                v.push(format!("{name} {}%", p * 100.0));
            }
        }
        if self.delay_ns > 0 {
            v.push(format!("delay {}", fmt_ns(self.delay_ns)));
        }
        if self.jitter_ns > 0 {
            v.push(format!("jitter ±{}", fmt_ns(self.jitter_ns)));
        }
        if self.rate_bps > 0 {
            v.push(format!("rate {}bit/s", fmt_si(self.rate_bps)));
            if self.burst_bytes > 0 {
                v.push(format!("burst {}B", self.burst_bytes));
            }
            v.push(format!("limit {}", fmt_ns(self.limit_ns)));
        }
        if v.is_empty() {
            "no faults".to_string()
        } else {
            v.join(" ")
        }
    }
}

fn fmt_ns(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

fn fmt_si(v: u64) -> String {
    for (d, s) in [
        (1_000_000_000_000u64, "t"),
        (1_000_000_000, "g"),
        (1_000_000, "m"),
        (1_000, "k"),
    ] {
        if v >= d && v.is_multiple_of(d) {
            return format!("{}{s}", v / d);
        }
    }
    v.to_string()
}

/// Counters of one direction of one impaired link, as the bridge reports them.
///
/// Invariant (once traffic has stopped and `queued` is 0, exactly; at any
/// moment including `queued`):
/// `frames_in + duplicated == frames_out + dropped + rate_limited + tx_errors + queued`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpairCounters {
    /// The link's name.
    pub link: String,
    /// Sending endpoint (node or switch) of this direction.
    pub from: String,
    /// Receiving endpoint of this direction.
    pub to: String,
    /// Frames received from `from`.
    pub frames_in: u64,
    /// Frames sent to `to` (duplicates included).
    pub frames_out: u64,
    /// Bytes received (Ethernet frames without FCS).
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Frames dropped by `loss` (and GSO super-frames chosen for corruption,
    /// which cannot be corrupted detectably; see the README).
    pub dropped: u64,
    /// Extra copies sent by `duplicate`.
    pub duplicated: u64,
    /// Frames given a non-zero `delay`/`jitter`.
    pub delayed: u64,
    /// Frames held back by `reorder`.
    pub reordered: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// Frames dropped by the rate limiter (shaper queue over `limit`).
    pub rate_limited: u64,
    /// Frames that waited in the rate limiter's queue.
    pub shaped: u64,
    /// Frames inside the bridge (delay queue, shaper, reorder hold) at the
    /// time of the snapshot.
    pub queued: u64,
    /// Frames the kernel refused to send.
    pub tx_errors: u64,
    /// Frames the kernel dropped before the bridge read them (socket buffer
    /// full; PACKET_STATISTICS). Not part of `frames_in`.
    pub kernel_drops: u64,
    /// Frames larger than the bridge's buffers (dropped, not in `frames_in`).
    pub truncated: u64,
}

impl ImpairCounters {
    /// Checks the conservation invariant.
    pub fn is_consistent(&self) -> bool {
        self.frames_in + self.duplicated
            == self.frames_out + self.dropped + self.rate_limited + self.tx_errors + self.queued
    }
}

/// What the bridge writes to its counters file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CountersFile {
    pub link: String,
    pub pid: u32,
    pub updated_unix_ms: u64,
    /// True in the last write, made when the bridge exits.
    pub exited: bool,
    pub directions: Vec<ImpairCounters>,
}

/// The spec `up` writes for one bridge process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BridgeSpec {
    pub prefix: String,
    pub link: String,
    /// Interface names in the middle namespace: [towards endpoints[0], towards endpoints[1]].
    pub ifnames: [String; 2],
    /// Endpoint names: [endpoints[0], endpoints[1]].
    pub ends: [String; 2],
    pub seed: u64,
    /// Direction 0: received on ifnames[0], sent on ifnames[1] (forward).
    pub forward: ImpairParams,
    /// Direction 1: received on ifnames[1], sent on ifnames[0] (reverse).
    pub reverse: ImpairParams,
    pub pid_file: std::path::PathBuf,
    pub counters_file: std::path::PathBuf,
}

/// A frame to transmit: a slot of the receive batch (zero copy) or a buffer
/// owned by the engine.
#[derive(Debug)]
pub(crate) enum TxItem {
    Slot(usize),
    Owned(Vec<u8>),
}

struct Timed {
    at: u64,
    seq: u64,
    buf: Vec<u8>,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct Held {
    buf: Vec<u8>,
    deadline: u64,
}

/// The fault pipeline of one direction. Frames carry the `virtio_net_hdr`
/// (`VNET_LEN` bytes) in front of the Ethernet header.
///
/// Order per frame: loss → rate limit (shaper) → corruption → duplication →
/// delay/jitter → (at egress) reordering.
pub(crate) struct Engine {
    p: ImpairParams,
    rng: Pcg64,
    pub c: ImpairCounters,
    heap: BinaryHeap<Reverse<Timed>>,
    held: VecDeque<Held>,
    /// Shaper: theoretical arrival time (GCRA form of the token bucket).
    tat: u64,
    burst_ns: u64,
    seq: u64,
    pool: Vec<Vec<u8>>,
}

impl Engine {
    pub fn new(p: ImpairParams, seed: u64) -> Engine {
        let burst_ns = if p.rate_bps > 0 {
            (p.burst_bytes as u128 * 8 * 1_000_000_000 / p.rate_bps as u128) as u64
        } else {
            0
        };
        Engine {
            p,
            rng: Pcg64::seed_from_u64(seed),
            c: ImpairCounters::default(),
            heap: BinaryHeap::new(),
            held: VecDeque::new(),
            tat: 0,
            burst_ns,
            seq: 0,
            pool: Vec::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.rng.random::<f64>() < p)
    }

    fn copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        b
    }

    /// Gives a sent buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < 4096 {
            self.pool.push(buf);
        }
    }

    /// Frames inside the engine.
    pub fn queued(&self) -> u64 {
        (self.heap.len() + self.held.len()) as u64
    }

    /// The earliest time at which `release_due` has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let h = self.heap.peek().map(|Reverse(t)| t.at);
        let r = self.held.front().map(|x| x.deadline);
        match (h, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes one received frame (`frame` is receive slot `slot`) at time `now`;
    /// frames to send now are appended to `out`.
    pub fn ingress(&mut self, now: u64, frame: &mut [u8], slot: usize, out: &mut Vec<TxItem>) {
        let len = frame.len().saturating_sub(VNET_LEN) as u64;
        self.c.frames_in += 1;
        self.c.bytes_in += len;
        if self.chance(self.p.loss) {
            self.c.dropped += 1;
            return;
        }
        let mut wait = 0u64;
        if self.p.rate_bps > 0 {
            let tx_ns = (len as u128 * 8 * 1_000_000_000 / self.p.rate_bps as u128) as u64;
            let tat = self.tat.max(now);
            let depart = now.max(tat.saturating_sub(self.burst_ns));
            if depart - now > self.p.limit_ns {
                self.c.rate_limited += 1;
                return;
            }
            self.tat = tat + tx_ns;
            if depart > now {
                self.c.shaped += 1;
                wait = depart - now;
            }
        }
        if self.chance(self.p.corrupt) {
            if !corrupt(frame, &mut self.rng) {
                // A GSO super-frame: its checksums are computed after us, so a
                // flipped bit would go undetected. Drop it instead.
                self.c.dropped += 1;
                return;
            }
            self.c.corrupted += 1;
        }
        let copies = if self.chance(self.p.duplicate) {
            self.c.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut extra = self.p.delay_ns;
            if self.p.jitter_ns > 0 {
                let j = self.rng.random_range(0..=2 * self.p.jitter_ns);
                extra = (extra + j).saturating_sub(self.p.jitter_ns);
            }
            if extra > 0 {
                self.c.delayed += 1;
            }
            let total = wait + extra;
            if total == 0 {
                self.egress(now, TxItem::Slot(slot), frame, out);
            } else {
                let buf = self.copy(frame);
                self.seq += 1;
                self.heap.push(Reverse(Timed {
                    at: now + total,
                    seq: self.seq,
                    buf,
                }));
            }
        }
    }

    /// A frame reaches the wire side: maybe held back for reordering; after a
    /// frame is sent, frames held back are released behind it.
    fn egress(&mut self, now: u64, item: TxItem, bytes: &[u8], out: &mut Vec<TxItem>) {
        if self.chance(self.p.reorder) {
            self.c.reordered += 1;
            let buf = match item {
                TxItem::Owned(b) => b,
                TxItem::Slot(_) => self.copy(bytes),
            };
            self.held.push_back(Held {
                buf,
                deadline: now + REORDER_HOLD_NS,
            });
            return;
        }
        out.push(item);
        while let Some(h) = self.held.pop_front() {
            out.push(TxItem::Owned(h.buf));
        }
    }

    /// Moves frames whose time has come to `out`.
    pub fn release_due(&mut self, now: u64, out: &mut Vec<TxItem>) {
        while self.heap.peek().is_some_and(|Reverse(t)| t.at <= now) {
            let Reverse(t) = self.heap.pop().expect("peeked");
            self.egress(now, TxItem::Owned(t.buf), &[], out);
        }
        while self.held.front().is_some_and(|h| h.deadline <= now) {
            let h = self.held.pop_front().expect("checked");
            out.push(TxItem::Owned(h.buf));
        }
    }

    /// Everything still inside, for a clean exit.
    pub fn drain(&mut self, out: &mut Vec<TxItem>) {
        while let Some(Reverse(t)) = self.heap.pop() {
            out.push(TxItem::Owned(t.buf));
        }
        while let Some(h) = self.held.pop_front() {
            out.push(TxItem::Owned(h.buf));
        }
    }
}

/// Flips one random bit after the Ethernet header. A frame whose L4 checksum
/// the kernel left for "hardware" (NEEDS_CSUM) gets its checksum completed
/// first and the flag cleared, so the receiver verifies it and sees the flip.
/// Returns false (nothing done) for GSO super-frames.
fn corrupt(frame: &mut [u8], rng: &mut Pcg64) -> bool {
    if frame.len() <= VNET_LEN + HEADER_LEN {
        return true;
    }
    let gso_type = frame[1];
    if gso_type != 0 {
        return false;
    }
    complete_csum(frame);
    frame[0] = 0; // no NEEDS_CSUM, no DATA_VALID: the receiver verifies
    let pkt = &mut frame[VNET_LEN..];
    let byte = rng.random_range(HEADER_LEN..pkt.len());
    let bit = rng.random_range(0..8);
    pkt[byte] ^= 1 << bit;
    true
}

/// Completes a checksum the kernel left for offload (NEEDS_CSUM): the
/// Internet checksum from `csum_start` to the end, stored at
/// `csum_start + csum_offset` (whose field already holds the pseudo-header sum).
fn complete_csum(frame: &mut [u8]) {
    if frame[0] & VNET_F_NEEDS_CSUM == 0 {
        return;
    }
    let start = u16::from_ne_bytes([frame[6], frame[7]]) as usize;
    let off = u16::from_ne_bytes([frame[8], frame[9]]) as usize;
    let pkt = &mut frame[VNET_LEN..];
    if start + off + 2 <= pkt.len() {
        let mut c = !fold(checksum_add(&pkt[start..]));
        if c == 0 && off == 6 {
            c = 0xffff; // UDP: 0 means "no checksum"
        }
        pkt[start + off..start + off + 2].copy_from_slice(&c.to_be_bytes());
    }
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn checksum_add(b: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = it.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: u32) -> Vec<u8> {
        let mut f = vec![0u8; VNET_LEN + 100];
        f[VNET_LEN + 20..VNET_LEN + 24].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn id(b: &[u8]) -> u32 {
        u32::from_be_bytes(b[VNET_LEN + 20..VNET_LEN + 24].try_into().unwrap())
    }

    /// Runs `n` frames, one per microsecond, and returns the ids sent.
    fn run(p: ImpairParams, n: u32) -> (Vec<u32>, ImpairCounters) {
        let mut e = Engine::new(p, 42);
        let mut sent = Vec::new();
        let mut out = Vec::new();
        let mut now = 0;
        let mut collect = |out: &mut Vec<TxItem>, slot: &[u8], e: &mut Engine| {
            for it in out.drain(..) {
                match it {
                    TxItem::Slot(_) => sent.push(id(slot)),
                    TxItem::Owned(b) => {
                        sent.push(id(&b));
                        e.recycle(b);
                    }
                }
            }
        };
        for i in 0..n {
            now += 1_000;
            let mut f = frame(i);
            e.release_due(now, &mut out);
            e.ingress(now, &mut f, 0, &mut out);
            collect(&mut out, &f, &mut e);
        }
        now += 10_000_000_000;
        e.release_due(now, &mut out);
        collect(&mut out, &[], &mut e);
        let mut c = e.c.clone();
        c.frames_out = sent.len() as u64;
        c.queued = e.queued();
        (sent, c)
    }

    #[test]
    fn noop_forwards_everything_in_order() {
        let (sent, c) = run(ImpairParams::default(), 1000);
        assert_eq!(sent, (0..1000).collect::<Vec<_>>());
        assert!(c.is_consistent());
    }

    #[test]
    fn faults_are_applied_and_counted() {
        let p = ImpairParams {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.25,
            corrupt: 0.01,
            ..Default::default()
        };
        let (sent, c) = run(p.clone(), 10_000);
        assert!(c.is_consistent(), "{c:?}");
        assert!(c.dropped > 800 && c.dropped < 1200, "{c:?}");
        assert!(c.duplicated > 300 && c.duplicated < 700, "{c:?}");
        assert!(c.reordered > 1500, "{c:?}");
        assert!(c.corrupted > 50, "{c:?}");
        assert!(sent.windows(2).any(|w| w[1] < w[0]), "reordered");
        assert!(sent.windows(2).any(|w| w[1] == w[0]), "duplicated");
        // Same seed, same result.
        assert_eq!(run(p, 10_000).0, sent);
    }

    #[test]
    fn delay_keeps_order_without_jitter_and_jitter_reorders() {
        let p = ImpairParams {
            delay_ns: 50_000,
            ..Default::default()
        };
        let (sent, c) = run(p, 1000);
        assert_eq!(sent, (0..1000).collect::<Vec<_>>());
        assert_eq!(c.delayed, 1000);
        let p = ImpairParams {
            delay_ns: 50_000,
            jitter_ns: 40_000,
            ..Default::default()
        };
        let (sent, c) = run(p, 1000);
        assert_eq!(sent.len(), 1000);
        assert!(sent.windows(2).any(|w| w[1] < w[0]));
        assert!(c.is_consistent());
    }

    #[test]
    fn rate_limit_drops_over_limit() {
        // 110-byte frames every 1 us = 880 Mbit/s offered into 100 Mbit/s with a
        // 1 ms queue: most frames are dropped, the rest are shaped.
        let p = ImpairParams {
            rate_bps: 100_000_000,
            limit_ns: 1_000_000,
            ..Default::default()
        };
        let (sent, c) = run(p, 10_000);
        assert!(c.rate_limited > 5000, "{c:?}");
        assert!(c.shaped > 0);
        assert_eq!(sent.len() as u64 + c.rate_limited, 10_000);
        assert!(sent.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn corruption_completes_partial_checksum_then_flips_one_bit() {
        // A UDP/IPv4 frame with a NEEDS_CSUM vnet header.
        let mut f = vec![0u8; VNET_LEN + 14 + 20 + 8 + 6];
        f[0] = VNET_F_NEEDS_CSUM;
        let start: u16 = 34; // UDP header
        f[6..8].copy_from_slice(&start.to_ne_bytes());
        f[8..10].copy_from_slice(&6u16.to_ne_bytes());
        for i in 0..6 {
            f[VNET_LEN + 42 + i] = 0x41 + i as u8; // payload
        }
        f[VNET_LEN + 40] = 0x12; // pseudo-header sum left by the stack
                                 // The receiver adds the real pseudo-header sum (0x1200 here).
        let valid = |f: &[u8]| fold(0x1200 + checksum_add(&f[VNET_LEN + 34..])) == 0xffff;
        let mut done = f.clone();
        complete_csum(&mut done);
        assert!(valid(&done), "completed checksum verifies");
        let mut rng = Pcg64::seed_from_u64(1);
        for _ in 0..50 {
            let mut g = f.clone();
            assert!(corrupt(&mut g, &mut rng));
            assert_eq!(g[0], 0);
            let bits: u32 = g[VNET_LEN..]
                .iter()
                .zip(&done[VNET_LEN..])
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(bits, 1, "exactly one bit flipped");
            if g[VNET_LEN + 34..] != done[VNET_LEN + 34..] {
                assert!(!valid(&g), "receiver detects the flip");
            }
        }
        // GSO frames are refused.
        f[1] = 1;
        assert!(!corrupt(&mut f, &mut rng));
    }
}
