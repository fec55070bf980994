//! Unidirectional streaming bandwidth, BCL-3's method: the sender streams a
//! window of messages, the receiver acknowledges once the window's volume
//! has arrived, and the sender times many windows. Written against
//! [`Transport`], so BCL and the kernel baselines run the same code.
//!
//! # Messages
//!
//! Data messages are exactly the measured size (at least [`MIN_SIZE`]
//! bytes) and start with a 16-byte header: magic `BCLD`, a CRC32C of the
//! rest (with `--verify`, else 0), and a 64-bit sequence number counting from
//! 0 per size. Control messages start with magic `BCLC` and a kind:
//! `BEGIN` (size, window, messages, verify, channel kind, messages in
//! flight), `ACK` (window, messages received in it; the BEGIN's ACK carries
//! the channels the receiver opened), `END-OF-WINDOW` (lossy transports:
//! "acknowledge what you have"), `FINISH`, `REPORT` (the receiver's verify
//! counts and transport counters), so both sides end with the same counts,
//! and for open channels `NOTICE` and `FREE` (see [`channels`]).
//!
//! # Channels
//!
//! Over BCL, data messages go through the channel kind the sender chose
//! ([`ChannelKind`]): the system channel (eager, what `Transport::send`
//! does), normal channels (rendezvous into buffers the receiver posts) or an
//! open channel (RMA puts into a region the receiver registered). Control
//! messages always use the system channel. The receiver follows the
//! sender's BEGIN, so a server needs no `--channel` of its own. The schemes
//! that keep the pipe full are described in [`channels`].
//!
//! On a lossy transport (kernel UDP) the sender asks for the window's
//! acknowledgement with END-OF-WINDOW when it does not come, and counts as
//! delivered only what the receiver saw; control messages are resent until
//! answered.

pub mod channels;

use crate::transport::Incoming;
use crate::transport::{Transport, TransportCounters, TransportError};
use std::time::{Duration, Instant};

/// Smallest message: the data header.
pub const MIN_SIZE: usize = 16;

const DATA_MAGIC: u32 = u32::from_be_bytes(*b"BCLD");
const CTRL_MAGIC: u32 = u32::from_be_bytes(*b"BCLC");
const BEGIN: u8 = 1;
const ACK: u8 = 2;
const END_OF_WINDOW: u8 = 3;
const FINISH: u8 = 4;
const REPORT: u8 = 5;
/// Open channels: the put of a message is complete (sender to receiver).
const NOTICE: u8 = 6;
/// Open channels: the receiver is done with a message's slot.
const FREE: u8 = 7;
/// Messages a BCL sender queues before a transmit round when it streams a
/// window over the system channel: enough for a frame of small messages to
/// carry many of them (the core bundles what is queued), few enough that the
/// wire never idles long.
const SEND_BATCH: u32 = 64;

/// The window number acknowledging a BEGIN.
const BEGIN_ACK: u32 = u32::MAX;
/// How often a lossy transport's control messages are resent.
const RESEND: Duration = Duration::from_millis(20);

/// Where BCL data messages land at the receiver (BCL-3's channel types).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelKind {
    /// The system channel: eager sends, copied into the receiver's ring;
    /// messages up to the eager limit.
    #[default]
    System,
    /// Normal channels: the receiver posts a buffer per message, the sender
    /// rendezvous into it (no size limit below 4 GiB).
    Normal,
    /// An open channel: the sender puts messages into a region the receiver
    /// registered (remote memory access).
    Open,
}

impl ChannelKind {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ChannelKind::System => "system",
            ChannelKind::Normal => "normal",
            ChannelKind::Open => "open",
        }
    }

    fn code(self) -> u64 {
        match self {
            ChannelKind::System => 0,
            ChannelKind::Normal => 1,
            ChannelKind::Open => 2,
        }
    }

    fn from_code(c: u64) -> Option<Self> {
        match c {
            0 => Some(ChannelKind::System),
            1 => Some(ChannelKind::Normal),
            2 => Some(ChannelKind::Open),
            _ => None,
        }
    }
}

/// What the receiver found, with `--verify`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verify {
    /// Distinct messages that arrived intact.
    pub delivered: u64,
    /// Messages that never arrived.
    pub lost: u64,
    /// Intact messages that arrived again.
    pub duplicated: u64,
    /// Intact messages that arrived after a later one.
    pub out_of_order: u64,
    /// Messages whose checksum or header did not match.
    pub corrupted: u64,
}

impl Verify {
    /// Whether everything arrived exactly once, in order, intact.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.out_of_order == 0 && self.corrupted == 0
    }
}

/// What the sender is asked to do.
#[derive(Clone, Debug)]
pub struct BwOptions {
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Timed windows per size.
    pub windows: u64,
    /// Untimed windows per size before the timed ones.
    pub warmup: u64,
    /// Messages per window (the receiver acknowledges each window).
    pub window: u32,
    /// Checksum every message and have the receiver check it.
    pub verify: bool,
    /// The transport may lose messages (kernel UDP).
    pub lossy: bool,
    /// Longest wait for any acknowledgement.
    pub timeout: Duration,
    /// Where the data messages land (BCL only).
    pub channel: ChannelKind,
    /// Normal and open channels: messages in flight (`None`: chosen per
    /// size by [`auto_depth`]).
    pub depth: Option<usize>,
    /// Time about this many bytes per size instead of `windows` windows of
    /// `window` messages (see [`plan`]).
    pub volume: Option<u64>,
}

/// How one size is run: messages per window, untimed and timed windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Messages per window.
    pub window: u32,
    /// Untimed windows first.
    pub warmup: u64,
    /// Timed windows.
    pub windows: u64,
}

/// The plan of `size`: the options' windows, or with a volume `V`: windows
/// of at most `V / 16` bytes (at least one message, at most `window`), as
/// many as move `V` bytes (at least one), and a tenth as many warm-up
/// windows (at least one, at most `warmup`).
pub fn plan(opts: &BwOptions, size: usize) -> Plan {
    let Some(volume) = opts.volume else {
        return Plan {
            window: opts.window,
            warmup: opts.warmup,
            windows: opts.windows,
        };
    };
    let size = size.max(1) as u64;
    let window = (volume / 16 / size).clamp(1, u64::from(opts.window)) as u32;
    let windows = (volume / (u64::from(window) * size)).max(1);
    let warmup = windows.div_ceil(10).min(opts.warmup);
    Plan {
        window,
        warmup,
        windows,
    }
}

/// Messages in flight on normal and open channels when not given: about
/// 4 MiB, 2 to 16. Measured on veth (docs/PERFORMANCE.md, *Normal and open
/// channels against kernel TCP*, "Messages in flight"): 16 × 64 KiB keeps
/// the pipe full, while many large transfers at once lose frames at the
/// receiver's ring and retransmit (at 1 MiB over 64 KiB frames, 64 in
/// flight moved half of what 1 did); two in flight hide each message's
/// hand-shake behind the other's data.
pub fn auto_depth(size: usize) -> usize {
    ((4usize << 20) / size.max(1)).clamp(2, 16)
}

/// One size's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwSizeResult {
    /// Message size.
    pub size: usize,
    /// Messages per window.
    pub window: u32,
    /// Normal and open channels: messages in flight.
    pub depth: Option<usize>,
    /// Messages delivered in the timed windows.
    pub messages: u64,
    /// Bytes delivered in the timed windows.
    pub bytes: u64,
    /// Time from the first timed message to the last acknowledgement.
    pub seconds: f64,
}

/// The outcome, the same on both sides.
#[derive(Clone, Debug, PartialEq)]
pub struct BwOutcome {
    /// The channel kind of the run (the receiver's: the one it served).
    pub channel: ChannelKind,
    /// Per size (sender side; empty on the receiver).
    pub results: Vec<BwSizeResult>,
    /// The receiver's counts.
    pub verify: Verify,
    /// The receiver's transport counters.
    pub receiver: TransportCounters,
}

fn err(msg: impl Into<String>) -> TransportError {
    TransportError(msg.into())
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A control message: magic, kind, then little-endian words.
fn control(kind: u8, words: &[u64]) -> Vec<u8> {
    let mut m = CTRL_MAGIC.to_be_bytes().to_vec();
    m.push(kind);
    m.extend_from_slice(&[0; 3]);
    for w in words {
        m.extend_from_slice(&w.to_le_bytes());
    }
    m
}

/// Kind and words of a control message.
fn parse_control(m: &[u8]) -> Option<(u8, Vec<u64>)> {
    if m.len() < 8 || m[..4] != CTRL_MAGIC.to_be_bytes() {
        return None;
    }
    let words = m[8..]
        .chunks_exact(8)
        .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
        .collect();
    Some((m[4], words))
}

/// Writes data message `seq` into `buf` (its payload already filled).
fn stamp(buf: &mut [u8], seq: u64, verify: bool) {
    buf[..4].copy_from_slice(&DATA_MAGIC.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = if verify { crc32c::crc32c(&buf[8..]) } else { 0 };
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Sends `msg` and waits for a control answer of `kind` accepted by `want`;
/// on a lossy transport resends every [`RESEND`].
fn request(
    t: &mut dyn Transport,
    msg: &[u8],
    kind: u8,
    lossy: bool,
    timeout: Duration,
    want: &mut dyn FnMut(&[u64]) -> bool,
) -> Result<Vec<u64>, TransportError> {
    let end = Instant::now() + timeout;
    loop {
        t.send(msg, end)?;
        let retry = if lossy {
            (Instant::now() + RESEND).min(end)
        } else {
            end
        };
        let mut answer = None;
        while answer.is_none() {
            let got = t.recv(retry, &mut |m| {
                if let Some((k, w)) = parse_control(m) {
                    if k == kind && want(&w) {
                        answer = Some(w);
                    }
                }
            })?;
            if !got {
                break;
            }
        }
        if let Some(w) = answer {
            return Ok(w);
        }
        if Instant::now() >= end {
            return Err(err(format!(
                "no answer from the receiver within {timeout:?}"
            )));
        }
    }
}

/// The streaming side.
pub fn run_sender(t: &mut dyn Transport, opts: &BwOptions) -> Result<BwOutcome, TransportError> {
    run_sender_observed(t, opts, &mut |_| {})
}

/// The streaming side, calling `on_window(size)` after each window
/// (warm-up and timed, [`plan`]'s `warmup + windows` per size) is
/// acknowledged: what a progress bar over the sweep counts. The call
/// happens inside the timed loop, once per window, so it must be cheap.
pub fn run_sender_observed(
    t: &mut dyn Transport,
    opts: &BwOptions,
    on_window: &mut dyn FnMut(usize),
) -> Result<BwOutcome, TransportError> {
    let mut results = Vec::new();
    for &size in &opts.sizes {
        if size < MIN_SIZE {
            return Err(err(format!(
                "size {size} is below the minimum of {MIN_SIZE} bytes"
            )));
        }
        let p = plan(opts, size);
        let r = match opts.channel {
            ChannelKind::System => send_size_system(t, opts, size, p, on_window)?,
            kind => {
                let b = t.channels().ok_or_else(|| {
                    err(format!(
                        "--channel {}: only BCL methods have channels",
                        kind.name()
                    ))
                })?;
                channels::send_size(b, opts, size, p, on_window)?
            }
        };
        results.push(r);
    }
    let words = request(
        t,
        &control(FINISH, &[]),
        REPORT,
        opts.lossy,
        opts.timeout,
        &mut |_| true,
    )?;
    let w = |i: usize| words.get(i).copied().unwrap_or(0);
    Ok(BwOutcome {
        channel: opts.channel,
        results,
        verify: Verify {
            delivered: w(0),
            lost: w(1),
            duplicated: w(2),
            out_of_order: w(3),
            corrupted: w(4),
        },
        receiver: TransportCounters {
            retransmits: w(5),
            bad_frames: w(6),
            data_frames: 0,
            ..Default::default()
        },
    })
}

/// The BEGIN of a size: size, window, messages, verify, channel kind,
/// messages in flight.
fn begin_message(size: usize, p: Plan, verify: bool, kind: ChannelKind, depth: usize) -> Vec<u8> {
    let count = (p.warmup + p.windows) * u64::from(p.window);
    control(
        BEGIN,
        &[
            size as u64,
            u64::from(p.window),
            count,
            u64::from(verify),
            kind.code(),
            depth as u64,
        ],
    )
}

/// A message of `size` bytes filled with the data pattern (its header is
/// stamped per send).
fn data_buffer(size: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..size.min(4096))
        .map(|k| (k as u8).wrapping_mul(31))
        .collect();
    let mut buf = Vec::with_capacity(size);
    while buf.len() < size {
        let n = (size - buf.len()).min(block.len());
        buf.extend_from_slice(&block[..n]);
    }
    buf
}

/// One size over the system channel (and the kernel baselines).
fn send_size_system(
    t: &mut dyn Transport,
    opts: &BwOptions,
    size: usize,
    p: Plan,
    on_window: &mut dyn FnMut(usize),
) -> Result<BwSizeResult, TransportError> {
    let total_windows = p.warmup + p.windows;
    let begin = begin_message(size, p, opts.verify, ChannelKind::System, 0);
    request(t, &begin, ACK, opts.lossy, opts.timeout, &mut |w| {
        w.first() == Some(&u64::from(BEGIN_ACK))
    })?;
    let mut buf = data_buffer(size);
    let mut seq = 0u64;
    let mut delivered = 0u64;
    let mut t0 = Instant::now();
    for w in 0..total_windows {
        if w == p.warmup {
            t0 = Instant::now();
        }
        let deadline = Instant::now() + opts.timeout;
        for i in 0..p.window {
            stamp(&mut buf, seq, opts.verify);
            // Queue a batch, then one transmit round, so that small
            // messages leave bundled several to a frame where the transport
            // can (BCL); others send each at once.
            t.send_queued(&buf, deadline)?;
            if (i + 1) % SEND_BATCH == 0 || i + 1 == p.window {
                t.transmit()?;
            }
            seq += 1;
        }
        let wn = w as u32;
        let mut got = None;
        let first_wait = if opts.lossy { RESEND } else { opts.timeout };
        let until = (Instant::now() + first_wait).min(deadline);
        while got.is_none() {
            let any = t.recv(until, &mut |m| {
                if let Some((ACK, words)) = parse_control(m) {
                    if words.first() == Some(&u64::from(wn)) {
                        got = words.get(1).copied();
                    }
                }
            })?;
            if !any {
                break;
            }
        }
        let received = match got {
            Some(n) => n,
            None if opts.lossy => {
                let eow = control(END_OF_WINDOW, &[u64::from(wn)]);
                let rest = deadline.saturating_duration_since(Instant::now());
                let words = request(t, &eow, ACK, true, rest, &mut |words| {
                    words.first() == Some(&u64::from(wn))
                })?;
                words.get(1).copied().unwrap_or(0)
            }
            None => {
                return Err(err(format!(
                    "window {w} of size {size} not acknowledged within {:?}",
                    opts.timeout
                )))
            }
        };
        if w >= p.warmup {
            delivered += received;
        }
        on_window(size);
    }
    Ok(BwSizeResult {
        size,
        window: p.window,
        depth: None,
        messages: delivered,
        bytes: delivered * size as u64,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The receiver's bookkeeping of one size.
struct SizeState {
    size: usize,
    window: u64,
    count: u64,
    verify: bool,
    seen: Vec<bool>,
    highest: Option<u64>,
    unique: u64,
    cur_window: u64,
    cur_count: u64,
}

impl SizeState {
    /// Takes one data message; returns a window to acknowledge, if complete.
    fn take(&mut self, m: &[u8], v: &mut Verify) -> Option<(u64, u64)> {
        let intact = m.len() == self.size
            && m[..4] == DATA_MAGIC.to_be_bytes()
            && (!self.verify || u32_at(m, 4) == Some(crc32c::crc32c(&m[8..])));
        let seq = u64_at(m, 8).filter(|s| *s < self.count);
        let Some(seq) = seq.filter(|_| intact) else {
            v.corrupted += 1;
            return None;
        };
        let slot = &mut self.seen[seq as usize];
        if *slot {
            v.duplicated += 1;
            return None;
        }
        *slot = true;
        self.unique += 1;
        v.delivered += 1;
        if self.highest.is_some_and(|h| seq < h) {
            v.out_of_order += 1;
        } else {
            self.highest = Some(seq);
        }
        let w = seq / self.window;
        if w > self.cur_window {
            self.cur_window = w;
            self.cur_count = 0;
        }
        if w == self.cur_window {
            self.cur_count += 1;
            if self.cur_count == self.window {
                return Some((w, self.cur_count));
            }
        }
        None
    }
}

/// The receiving side: answers until the sender says FINISH (or nothing
/// comes for `idle`), then reports. Waits `first_wait` for the first
/// message. Over BCL it serves whichever channel kind each BEGIN asks for.
pub fn run_receiver(
    t: &mut dyn Transport,
    first_wait: Duration,
    idle: Duration,
) -> Result<BwOutcome, TransportError> {
    let mut v = Verify::default();
    let mut state: Option<SizeState> = None;
    let mut chans = channels::RxChannels::default();
    let mut served = ChannelKind::System;
    let mut wait = first_wait;
    let mut reply: Vec<Vec<u8>> = Vec::new();
    let mut finished = false;
    while !finished {
        let mut ctrl = None;
        let mut ack = None;
        let mut on_message = |m: &[u8]| {
            if let Some(c) = parse_control(m) {
                ctrl = Some(c);
            } else if let Some(s) = state.as_mut() {
                ack = s.take(m, &mut v);
            } else {
                v.corrupted += 1;
            }
        };
        let deadline = Instant::now() + wait;
        let got = match t.channels() {
            Some(b) => b.recv_any(deadline, &mut on_message)?,
            None => t
                .recv(deadline, &mut on_message)?
                .then_some(Incoming::Message),
        };
        let event = match got {
            None => return Err(err(format!("nothing from the sender within {wait:?}"))),
            Some(Incoming::Message) => None,
            Some(Incoming::Event(ev)) => Some(ev),
        };
        wait = idle;
        if let Some((w, n)) = ack {
            reply.push(control(ACK, &[w, n]));
        }
        if let Some(ev) = event {
            // Only BCL transports have channel events.
            if let Some(b) = t.channels() {
                chans.on_event(b, ev, &mut state, &mut v, &mut reply)?;
            }
        }
        match ctrl {
            Some((BEGIN, words)) if words.len() >= 4 => {
                close_size(&mut state, &mut v);
                let (size, window, count) = (words[0] as usize, words[1].max(1), words[2]);
                let seen_len = usize::try_from(count).map_err(|_| err("BEGIN: count too large"))?;
                let kind = words
                    .get(4)
                    .map_or(Some(ChannelKind::System), |c| ChannelKind::from_code(*c))
                    .ok_or_else(|| err("BEGIN: unknown channel kind"))?;
                let depth = words.get(5).copied().unwrap_or(0);
                state = Some(SizeState {
                    size,
                    window,
                    count,
                    verify: words[3] != 0,
                    seen: vec![false; seen_len],
                    highest: None,
                    unique: 0,
                    cur_window: 0,
                    cur_count: 0,
                });
                let opened = chans.begin(t.channels(), kind, size, depth, count)?;
                served = kind;
                let mut words = vec![u64::from(BEGIN_ACK), 0];
                words.extend(opened);
                reply.push(control(ACK, &words));
            }
            Some((END_OF_WINDOW, words)) => {
                let w = words.first().copied().unwrap_or(0);
                let n = state
                    .as_ref()
                    .filter(|s| s.cur_window == w)
                    .map_or(0, |s| s.cur_count);
                reply.push(control(ACK, &[w, n]));
            }
            Some((NOTICE, words)) => {
                let seq = words.first().copied().unwrap_or(u64::MAX);
                match t.channels() {
                    Some(b) => chans.on_notice(b, seq, &mut state, &mut v, &mut reply)?,
                    None => v.corrupted += 1,
                }
            }
            Some((FINISH, _)) => finished = true,
            Some(_) => v.corrupted += 1,
            None => {}
        }
        for m in reply.drain(..) {
            t.send(&m, Instant::now() + idle)?;
        }
    }
    close_size(&mut state, &mut v);
    if let Some(b) = t.channels() {
        chans.close(b);
    }
    let c = t.counters();
    let report = control(
        REPORT,
        &[
            v.delivered,
            v.lost,
            v.duplicated,
            v.out_of_order,
            v.corrupted,
            c.retransmits,
            c.bad_frames,
        ],
    );
    t.send(&report, Instant::now() + idle)?;
    // Stay a little: deliver the report, answer a repeated FINISH (its
    // report may have been lost), send final acknowledgements.
    t.flush(Instant::now() + Duration::from_millis(300))?;
    let linger_end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < linger_end {
        let mut again = false;
        // The sender may close its end meanwhile (TCP): the run is over.
        let Ok(_) = t.recv(linger_end, &mut |m| {
            again |= matches!(parse_control(m), Some((FINISH, _)));
        }) else {
            break;
        };
        if again && t.send(&report, Instant::now() + idle).is_err() {
            break;
        }
    }
    Ok(BwOutcome {
        channel: served,
        results: Vec::new(),
        verify: v,
        receiver: t.counters(),
    })
}

/// Counts the messages of the finished size that never arrived.
fn close_size(state: &mut Option<SizeState>, v: &mut Verify) {
    if let Some(s) = state.take() {
        v.lost += s.count - s.unique;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_classifies_what_arrives() {
        let mut s = SizeState {
            size: 32,
            window: 2,
            count: 4,
            verify: true,
            seen: vec![false; 4],
            highest: None,
            unique: 0,
            cur_window: 0,
            cur_count: 0,
        };
        let mut v = Verify::default();
        let msg = |seq| {
            let mut b = vec![7u8; 32];
            stamp(&mut b, seq, true);
            b
        };
        assert_eq!(s.take(&msg(0), &mut v), None);
        assert_eq!(s.take(&msg(0), &mut v), None); // duplicate
        assert_eq!(s.take(&msg(1), &mut v), Some((0, 2)));
        assert_eq!(s.take(&msg(3), &mut v), None);
        let mut bad = msg(2);
        bad[20] ^= 1;
        assert_eq!(s.take(&bad, &mut v), None); // corrupted
        assert_eq!(s.take(&msg(2), &mut v), Some((1, 2))); // late: out of order
        assert_eq!(s.take(&msg(9), &mut v), None); // beyond the count
        let mut state = Some(s);
        close_size(&mut state, &mut v);
        assert_eq!(
            v,
            Verify {
                delivered: 4,
                lost: 0,
                duplicated: 1,
                out_of_order: 1,
                corrupted: 2,
            }
        );
        assert!(!v.is_clean());
    }

    #[test]
    fn control_messages_round_trip() {
        let m = control(ACK, &[3, 64]);
        assert_eq!(parse_control(&m), Some((ACK, vec![3, 64])));
        let mut data = vec![0u8; 16];
        stamp(&mut data, 5, false);
        assert_eq!(parse_control(&data), None);
    }
}
