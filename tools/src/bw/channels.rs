//! `bcl-bw --channel normal|open`: the data messages of a size go through
//! BCL's normal channels (rendezvous) or an open channel (RMA), while the
//! window protocol's control messages stay on the system channel.
//!
//! # Normal channels: `D` channels, one posted buffer each
//!
//! At BEGIN the receiver opens `D` normal channels and posts a buffer of
//! the message size on each, **for the sender by name**, so the sender is
//! told at once (BCL's `RNDV_READY`) and its first message on each channel
//! streams without a request round trip. The BEGIN's ACK lists the channel
//! numbers. Message `s` goes on channel `s mod D`:
//!
//! - the sender keeps one message in flight per channel (`D` in all): it
//!   sends message `s` as soon as the send of message `s − D` on the same
//!   channel has completed (`SendDone`: its buffer is back), so `D`
//!   transfers overlap and a channel's rendezvous hand-shake hides behind
//!   the other channels' data;
//! - the receiver consumes completed buffers in sequence order (message `s`
//!   from channel `s mod D`, holding any that completed early) — that is the
//!   order the application sees, and what `--verify` checks — and re-posts
//!   each buffer on its channel for message `s + D` right after checking it.
//!   If the sender's next message arrives before the re-post, its request
//!   waits at the receiver and is granted by the post (either order works).
//!
//! `D` is `--channels`, else [`auto_depth`](super::auto_depth): about
//! 4 MiB in flight, 2 to 16 messages.
//!
//! # Open channel: a ring of `D` slots in a registered region
//!
//! At BEGIN the receiver registers a region of `D` × size bytes, exposes it
//! on an open channel with a fresh random key and answers with channel and
//! key. Message `s` is put at slot `s mod D`. RMA completes at the initiator
//! only, so the sender tells the receiver, in order, on the system channel
//! (`NOTICE s`) once the put of `s` is done; the receiver checks the slot
//! (sequence number, and CRC32C with `--verify`) and answers `FREE s`; the
//! sender reuses a slot only after its FREE. With `--verify` the sender
//! also reads the last message of each size back with a get and compares
//! it byte for byte.

use super::{
    begin_message, control, data_buffer, err, parse_control, request, stamp, BwOptions,
    BwSizeResult, ChannelKind, Plan, SizeState, Verify, ACK, BEGIN_ACK, FREE, NOTICE,
};
use crate::transport::TransportError;
use crate::transport::{ChannelTransport, Incoming};
use bcl::{ChannelEvent, ChannelId, ProcessAddr, RegionId, SendHandle};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Largest number of messages in flight the receiver accepts.
pub const MAX_DEPTH: usize = 1024;

/// The sender's side of one size on channels.
struct Tx<'a> {
    t: &'a mut dyn ChannelTransport,
    server: ProcessAddr,
    kind: ChannelKind,
    /// Normal: one channel per slot; open: the one open channel.
    chans: Vec<ChannelId>,
    key: u64,
    size: usize,
    /// The sender's buffers, one per slot; `None` while in flight.
    bufs: Vec<Option<Vec<u8>>>,
    /// Open: the receiver is done with the slot's previous message.
    free: Vec<bool>,
    /// In-flight sends and puts: slot and message number.
    flight: HashMap<SendHandle, (usize, u64)>,
    /// Open: puts complete but not yet announced (announced in order).
    done: BTreeSet<u64>,
    next_notice: u64,
    /// Window acknowledgements received: window → messages.
    acks: HashMap<u64, u64>,
    /// Open, --verify: the read-back of the last message.
    got_back: Option<(SendHandle, Option<Vec<u8>>)>,
    timeout: Duration,
}

impl Tx<'_> {
    /// Waits for one message or event (at most the timeout) and takes it
    /// into account.
    fn pump(&mut self, what: &str) -> Result<(), TransportError> {
        let mut ctrl = None;
        let got = self.t.recv_any(Instant::now() + self.timeout, &mut |m| {
            ctrl = parse_control(m);
        })?;
        match got {
            None => Err(err(format!(
                "{what}: nothing from the receiver within {:?}",
                self.timeout
            ))),
            Some(Incoming::Message) => {
                match ctrl {
                    Some((ACK, w)) if w.len() >= 2 => {
                        self.acks.insert(w[0], w[1]);
                    }
                    Some((FREE, w)) if !w.is_empty() && self.kind == ChannelKind::Open => {
                        let slot = (w[0] % self.bufs.len() as u64) as usize;
                        self.free[slot] = true;
                    }
                    _ => {}
                }
                Ok(())
            }
            Some(Incoming::Event(ev)) => self.on_event(ev),
        }
    }

    fn on_event(&mut self, ev: ChannelEvent) -> Result<(), TransportError> {
        match ev {
            ChannelEvent::SendDone { handle, buffer }
            | ChannelEvent::PutDone { handle, buffer } => {
                let Some((slot, seq)) = self.flight.remove(&handle) else {
                    return Err(err(format!("completion of an unknown transfer {handle:?}")));
                };
                self.bufs[slot] = Some(buffer);
                if self.kind == ChannelKind::Open {
                    self.done.insert(seq);
                    while self.done.remove(&self.next_notice) {
                        let notice = control(NOTICE, &[self.next_notice]);
                        self.t.send(&notice, Instant::now() + self.timeout)?;
                        self.next_notice += 1;
                    }
                }
                Ok(())
            }
            ChannelEvent::GetDone { handle, buffer } => {
                match self.got_back.as_mut() {
                    Some((h, slot)) if *h == handle => *slot = Some(buffer),
                    _ => return Err(err(format!("an unexpected get completed: {handle:?}"))),
                }
                Ok(())
            }
            ChannelEvent::SendFailed { handle, error, .. }
            | ChannelEvent::RmaFailed { handle, error, .. } => {
                let what = match self.flight.get(&handle) {
                    Some((_, seq)) => format!("message {seq} of {} bytes", self.size),
                    None => "the read-back".into(),
                };
                Err(err(format!(
                    "{} on {} channel failed: {error}",
                    what,
                    self.kind.name()
                )))
            }
            ChannelEvent::Received { channel, .. }
            | ChannelEvent::ReceiveFailed { channel, .. } => {
                Err(err(format!("unexpected receive on channel {channel:?}")))
            }
        }
    }

    /// Waits until `slot` can carry the next message: its buffer is back
    /// and (open) the receiver freed it.
    fn take_slot(&mut self, slot: usize) -> Result<Vec<u8>, TransportError> {
        loop {
            if self.free[slot] {
                if let Some(b) = self.bufs[slot].take() {
                    return Ok(b);
                }
            }
            self.pump("waiting for a buffer to come back")?;
        }
    }

    fn issue(&mut self, slot: usize, seq: u64, buf: Vec<u8>) -> Result<(), TransportError> {
        let ep = self.t.endpoint_mut();
        let issued = match self.kind {
            ChannelKind::Normal => ep.send_on_channel(self.server, self.chans[slot], buf),
            _ => ep.put(
                self.server,
                self.chans[0],
                self.key,
                (slot * self.size) as u64,
                buf,
            ),
        };
        let handle = issued.map_err(|r| {
            err(format!(
                "message {seq} on {} channel refused: {}",
                self.kind.name(),
                r.error
            ))
        })?;
        self.flight.insert(handle, (slot, seq));
        if self.kind == ChannelKind::Open {
            self.free[slot] = false;
        }
        self.t.transmit()
    }

    fn wait_ack(&mut self, w: u64) -> Result<u64, TransportError> {
        loop {
            if let Some(n) = self.acks.remove(&w) {
                return Ok(n);
            }
            self.pump(&format!("window {w} of size {}", self.size))?;
        }
    }

    fn wait_all_back(&mut self) -> Result<(), TransportError> {
        while !self.flight.is_empty() {
            self.pump("waiting for the last completions")?;
        }
        Ok(())
    }

    /// Open, --verify: reads `slot` back and compares it with what was put.
    fn read_back(&mut self, slot: usize, seq: u64) -> Result<(), TransportError> {
        let handle = self
            .t
            .endpoint_mut()
            .get(
                self.server,
                self.chans[0],
                self.key,
                (slot * self.size) as u64,
                vec![0; self.size],
            )
            .map_err(|r| err(format!("read-back refused: {}", r.error)))?;
        self.got_back = Some((handle, None));
        self.t.transmit()?;
        let got = loop {
            if let Some((_, Some(b))) = self.got_back.as_mut() {
                break std::mem::take(b);
            }
            self.pump("reading the last message back")?;
        };
        self.got_back = None;
        let want = self.bufs[slot].as_deref().unwrap_or_default();
        if got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b);
            return Err(err(format!(
                "read-back of message {seq} ({} bytes) differs from what was put (first difference at byte {at:?})",
                self.size
            )));
        }
        Ok(())
    }
}

/// One size on normal or open channels (see the module documentation).
pub(super) fn send_size(
    t: &mut dyn ChannelTransport,
    opts: &BwOptions,
    size: usize,
    p: Plan,
    on_window: &mut dyn FnMut(usize),
) -> Result<BwSizeResult, TransportError> {
    let kind = opts.channel;
    let server = t
        .peer()
        .ok_or_else(|| err("the sender has no peer address"))?;
    let depth = opts.depth.unwrap_or_else(|| super::auto_depth(size));
    let begin = begin_message(size, p, opts.verify, kind, depth);
    let words = request(t, &begin, ACK, false, opts.timeout, &mut |w| {
        w.first() == Some(&u64::from(BEGIN_ACK))
    })?;
    // [BEGIN_ACK, 0, depth, channels...] or [.., depth, channel, key].
    let d = words.get(2).copied().unwrap_or(0) as usize;
    let (chans, key) = match kind {
        ChannelKind::Normal if d >= 1 && words.len() == 3 + d => {
            (words[3..].iter().map(|c| ChannelId(*c as u16)).collect(), 0)
        }
        ChannelKind::Open if d >= 1 && words.len() == 5 => {
            (vec![ChannelId(words[3] as u16)], words[4])
        }
        _ => {
            return Err(err(format!(
                "the receiver did not open {} channels (answer {words:?}); is it an older bcl-bw?",
                kind.name()
            )))
        }
    };
    let buffer = data_buffer(size);
    let mut tx = Tx {
        t,
        server,
        kind,
        chans,
        key,
        size,
        bufs: (0..d).map(|_| Some(buffer.clone())).collect(),
        free: vec![true; d],
        flight: HashMap::new(),
        done: BTreeSet::new(),
        next_notice: 0,
        acks: HashMap::new(),
        got_back: None,
        timeout: opts.timeout,
    };
    drop(buffer);
    let mut seq = 0u64;
    let mut delivered = 0u64;
    let mut t0 = Instant::now();
    for w in 0..p.warmup + p.windows {
        if w == p.warmup {
            t0 = Instant::now();
        }
        for _ in 0..p.window {
            let slot = (seq % d as u64) as usize;
            let mut buf = tx.take_slot(slot)?;
            stamp(&mut buf, seq, opts.verify);
            tx.issue(slot, seq, buf)?;
            seq += 1;
        }
        let n = tx.wait_ack(w)?;
        if w >= p.warmup {
            delivered += n;
        }
        on_window(size);
    }
    let seconds = t0.elapsed().as_secs_f64();
    tx.wait_all_back()?;
    if kind == ChannelKind::Open && opts.verify && seq > 0 {
        let last = seq - 1;
        tx.read_back((last % d as u64) as usize, last)?;
    }
    Ok(BwSizeResult {
        size,
        window: p.window,
        depth: Some(d),
        messages: delivered,
        bytes: delivered * size as u64,
        seconds,
    })
}

/// The receiver's channels of the current size.
#[derive(Default)]
pub(super) enum RxChannels {
    /// The system channel (or nothing yet).
    #[default]
    None,
    /// Normal channels, one posted buffer each.
    Normal {
        from: ProcessAddr,
        chans: Vec<ChannelId>,
        /// Buffers that completed before their turn: (buffer, length).
        held: Vec<Option<(Vec<u8>, usize)>>,
        /// The next message to consume.
        next: u64,
        /// Messages of the size.
        count: u64,
    },
    /// A region exposed on an open channel.
    Open {
        region: RegionId,
        depth: usize,
        size: usize,
    },
}

/// A fresh random key for an open channel.
fn random_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

impl RxChannels {
    /// Opens what a BEGIN asks for (after closing the previous size's);
    /// returns the words the BEGIN's ACK carries after `[BEGIN_ACK, 0]`.
    pub(super) fn begin(
        &mut self,
        t: Option<&mut dyn ChannelTransport>,
        kind: ChannelKind,
        size: usize,
        depth: u64,
        count: u64,
    ) -> Result<Vec<u64>, TransportError> {
        let Some(t) = t else {
            self.close_quietly();
            return match kind {
                ChannelKind::System => Ok(Vec::new()),
                k => Err(err(format!(
                    "the sender asked for {} channels, which only BCL methods have",
                    k.name()
                ))),
            };
        };
        self.close(t);
        if kind == ChannelKind::System {
            return Ok(Vec::new());
        }
        let depth = usize::try_from(depth)
            .ok()
            .filter(|d| (1..=MAX_DEPTH).contains(d))
            .ok_or_else(|| {
                err(format!(
                    "BEGIN: {depth} messages in flight (1..={MAX_DEPTH})"
                ))
            })?;
        let from = t
            .peer()
            .ok_or_else(|| err("BEGIN before the sender was known"))?;
        let ep = t.endpoint_mut();
        match kind {
            ChannelKind::Normal => {
                let mut chans = Vec::with_capacity(depth);
                for _ in 0..depth {
                    let ch = ep
                        .open_normal_channel()
                        .map_err(|e| err(format!("opening a normal channel: {e}")))?;
                    ep.post(ch, Some(from), vec![0; size])
                        .map_err(|r| err(format!("posting on {ch:?}: {}", r.error)))?;
                    chans.push(ch);
                }
                let mut words = vec![depth as u64];
                words.extend(chans.iter().map(|c| u64::from(c.0)));
                *self = RxChannels::Normal {
                    from,
                    chans,
                    held: (0..depth).map(|_| None).collect(),
                    next: 0,
                    count,
                };
                t.transmit()?;
                Ok(words)
            }
            _ => {
                let bytes = depth
                    .checked_mul(size)
                    .ok_or_else(|| err("BEGIN: region too large"))?;
                let region = ep.register(vec![0; bytes]);
                let key = random_key();
                let ch = ep
                    .open_rma_channel(region, key)
                    .map_err(|e| err(format!("opening an open channel: {e}")))?;
                *self = RxChannels::Open {
                    region,
                    depth,
                    size,
                };
                Ok(vec![depth as u64, u64::from(ch.0), key])
            }
        }
    }

    /// A channel event: a normal-channel message (consumed in order, its
    /// buffer re-posted) or a failure.
    pub(super) fn on_event(
        &mut self,
        t: &mut dyn ChannelTransport,
        ev: ChannelEvent,
        state: &mut Option<SizeState>,
        v: &mut Verify,
        reply: &mut Vec<Vec<u8>>,
    ) -> Result<(), TransportError> {
        match ev {
            ChannelEvent::Received {
                channel,
                buffer,
                len,
                ..
            } => {
                let RxChannels::Normal {
                    from,
                    chans,
                    held,
                    next,
                    count,
                } = self
                else {
                    return Err(err(format!(
                        "a message on {channel:?} outside a normal-channel run"
                    )));
                };
                let Some(i) = chans.iter().position(|c| *c == channel) else {
                    return Err(err(format!("a message on unknown channel {channel:?}")));
                };
                held[i] = Some((buffer, len));
                let d = chans.len() as u64;
                loop {
                    let i = (*next % d) as usize;
                    let Some((buf, len)) = held[i].take() else {
                        break;
                    };
                    match state.as_mut() {
                        Some(s) => {
                            if let Some((w, n)) = s.take(&buf[..len.min(buf.len())], v) {
                                reply.push(control(ACK, &[w, n]));
                            }
                        }
                        None => v.corrupted += 1,
                    }
                    // The next message on this channel, if any.
                    if *next + d < *count {
                        t.endpoint_mut()
                            .post(chans[i], Some(*from), buf)
                            .map_err(|r| {
                                err(format!("re-posting on {:?}: {}", chans[i], r.error))
                            })?;
                    }
                    *next += 1;
                }
                t.transmit()
            }
            ChannelEvent::ReceiveFailed {
                channel,
                from,
                error,
                ..
            } => Err(err(format!(
                "receiving on {channel:?} from {from} failed: {error}"
            ))),
            other => Err(err(format!("unexpected channel event {other:?}"))),
        }
    }

    /// Open channel: message `seq` is in its slot; check it and free the
    /// slot.
    pub(super) fn on_notice(
        &mut self,
        t: &mut dyn ChannelTransport,
        seq: u64,
        state: &mut Option<SizeState>,
        v: &mut Verify,
        reply: &mut Vec<Vec<u8>>,
    ) -> Result<(), TransportError> {
        let RxChannels::Open {
            region,
            depth,
            size,
        } = self
        else {
            v.corrupted += 1;
            return Ok(());
        };
        let slot = (seq % *depth as u64) as usize;
        let data = t
            .endpoint()
            .region(*region)
            .and_then(|r| r.get(slot * *size..(slot + 1) * *size))
            .ok_or_else(|| err("the open channel's region is gone"))?;
        let ack = match state.as_mut() {
            Some(s) => s.take(data, v),
            None => {
                v.corrupted += 1;
                None
            }
        };
        reply.push(control(FREE, &[seq]));
        if let Some((w, n)) = ack {
            reply.push(control(ACK, &[w, n]));
        }
        Ok(())
    }

    /// Closes the size's channels and gives their memory back.
    pub(super) fn close(&mut self, t: &mut dyn ChannelTransport) {
        match std::mem::take(self) {
            RxChannels::None => {}
            RxChannels::Normal { chans, .. } => {
                for ch in chans {
                    let _ = t.endpoint_mut().close_channel(ch);
                }
            }
            RxChannels::Open { region, .. } => {
                // Refused while a read-back is being served: keep serving
                // the protocol a little, then retry.
                let end = Instant::now() + Duration::from_secs(2);
                while t.endpoint_mut().unregister(region).is_err() && Instant::now() < end {
                    let _ = t.flush(Instant::now() + Duration::from_millis(10));
                }
            }
        }
    }

    fn close_quietly(&mut self) {
        *self = RxChannels::None;
    }
}
