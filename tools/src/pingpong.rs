//! The pingpong exchange: a client sends a message, the server echoes it,
//! the client times the round trip. The timing loop is written once against
//! the [`Roundtrip`] trait, so BCL and the kernel baselines are measured by
//! the same code.
//!
//! Application protocol: every message is echoed unchanged; an empty message
//! ends the run. Message `i` of a size carries `i` in its first 8 bytes
//! (little endian, when it is at least 8 bytes long) followed by a pattern
//! derived from `i`, so the client can tell an exact echo from a duplicate
//! of an earlier message or a corrupted one.

use crate::latency::LatencyRecorder;
use crate::transport::{Transport, TransportError};
use std::time::{Duration, Instant};

/// How an echo compares with the message sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// Byte for byte the message sent.
    Exact,
    /// An echo of an earlier message (a duplicate delivery).
    Stale,
    /// Neither: the bytes were damaged.
    Corrupt,
}

/// Compares `reply` with `msg`, sent as iteration `iteration`.
pub fn classify(msg: &[u8], reply: &[u8], iteration: u64) -> Echo {
    if reply == msg {
        return Echo::Exact;
    }
    if reply.len() == msg.len() && reply.len() >= 8 {
        let it = u64::from_le_bytes(reply[..8].try_into().unwrap_or_default());
        if it < iteration && reply == fill_message(&mut vec![0; reply.len()], it) {
            return Echo::Stale;
        }
    }
    Echo::Corrupt
}

/// Writes message number `iteration` into `buf` and returns it.
pub fn fill_message(buf: &mut [u8], iteration: u64) -> &[u8] {
    let seed = (iteration as u8).wrapping_mul(17);
    for (k, b) in buf.iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(29).wrapping_add(seed);
    }
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&iteration.to_le_bytes()[..n]);
    buf
}

/// Why a round trip failed.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// No reply in time.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The transport failed.
    #[error("{0}")]
    Transport(String),
}

/// One client-side round trip over some transport.
pub trait Roundtrip {
    /// Sends `msg`, waits for its echo (up to `timeout`), and classifies the
    /// first reply; a [`Echo::Stale`] reply is counted by the caller, who
    /// then calls [`Roundtrip::wait_reply`] for the real one.
    fn roundtrip(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError>;
    /// Waits for a further reply to the last message.
    fn wait_reply(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError>;
    /// Tells the server the run is over.
    fn finish(&mut self) -> Result<(), PingError>;
}

/// What the client is asked to do.
#[derive(Clone, Debug)]
pub struct PingOptions {
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Timed round trips per size.
    pub iters: u64,
    /// Untimed round trips per size before the timed ones.
    pub warmup: u64,
    /// Longest wait for one reply.
    pub timeout: Duration,
}

/// Application-level counts of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AppCounters {
    /// Messages sent by the client.
    pub sent: u64,
    /// Exact echoes received.
    pub received: u64,
    /// Messages that got no reply in time.
    pub lost: u64,
    /// Echoes of earlier messages received again.
    pub duplicates: u64,
    /// Damaged echoes.
    pub corrupt: u64,
}

/// Result of one size.
pub struct SizeResult {
    /// Message size.
    pub size: usize,
    /// Timed round trips.
    pub iters: u64,
    /// Their round-trip times.
    pub latency: LatencyRecorder,
}

/// What a client run measured.
pub struct ClientOutcome {
    /// One entry per size.
    pub results: Vec<SizeResult>,
    /// The first round trip (link set-up included), kept out of the
    /// histograms.
    pub first_contact: Duration,
    /// Application counts.
    pub counters: AppCounters,
}

/// Runs the client side over `rt`.
pub fn run_client(rt: &mut dyn Roundtrip, opts: &PingOptions) -> Result<ClientOutcome, PingError> {
    let mut counters = AppCounters::default();
    let mut buf = vec![0u8; opts.sizes.iter().copied().max().unwrap_or(0)];
    let mut iteration = 0u64;
    let first_size = opts.sizes.first().copied().unwrap_or(8);
    let start = Instant::now();
    exchange(
        rt,
        fill_message(&mut buf[..first_size], iteration),
        iteration,
        opts.timeout,
        &mut counters,
    )?;
    let first_contact = start.elapsed();
    iteration += 1;

    let mut results = Vec::new();
    for &size in &opts.sizes {
        let mut latency = LatencyRecorder::new();
        for k in 0..opts.warmup + opts.iters {
            let msg = fill_message(&mut buf[..size], iteration);
            let t0 = Instant::now();
            let ok = exchange(rt, msg, iteration, opts.timeout, &mut counters)?;
            let rtt = t0.elapsed();
            iteration += 1;
            if ok && k >= opts.warmup {
                latency.record(rtt.as_nanos() as u64);
            }
        }
        results.push(SizeResult {
            size,
            iters: opts.iters,
            latency,
        });
    }
    rt.finish()?;
    Ok(ClientOutcome {
        results,
        first_contact,
        counters,
    })
}

/// One counted round trip; false if the reply was lost.
fn exchange(
    rt: &mut dyn Roundtrip,
    msg: &[u8],
    iteration: u64,
    timeout: Duration,
    counters: &mut AppCounters,
) -> Result<bool, PingError> {
    counters.sent += 1;
    let mut echo = rt.roundtrip(msg, iteration, timeout);
    loop {
        match echo {
            Ok(Echo::Exact) => {
                counters.received += 1;
                return Ok(true);
            }
            Ok(Echo::Corrupt) => {
                counters.corrupt += 1;
                return Ok(true);
            }
            Ok(Echo::Stale) => {
                counters.duplicates += 1;
                echo = rt.wait_reply(msg, iteration, timeout);
            }
            Err(PingError::Timeout(_)) => {
                counters.lost += 1;
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The client side over any [`Transport`].
pub struct TransportClient<'a> {
    t: &'a mut dyn Transport,
}

impl<'a> TransportClient<'a> {
    /// A client sending through `t`.
    pub fn new(t: &'a mut dyn Transport) -> Self {
        TransportClient { t }
    }
}

fn transport_error(e: TransportError) -> PingError {
    PingError::Transport(e.0)
}

impl Roundtrip for TransportClient<'_> {
    fn roundtrip(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError> {
        self.t
            .send(msg, Instant::now() + timeout)
            .map_err(transport_error)?;
        self.wait_reply(msg, iteration, timeout)
    }

    fn wait_reply(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError> {
        let mut echo = Echo::Corrupt;
        let got = self
            .t
            .recv(Instant::now() + timeout, &mut |reply| {
                echo = classify(msg, reply, iteration)
            })
            .map_err(transport_error)?;
        if got {
            Ok(echo)
        } else {
            Err(PingError::Timeout(timeout))
        }
    }

    fn finish(&mut self) -> Result<(), PingError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        self.t.send(&[], deadline).map_err(transport_error)?;
        // Wait (briefly) for the end marker to be delivered, so the server
        // is not left retransmitting to nobody.
        self.t.flush(deadline).map_err(transport_error)
    }
}

/// Runs an echo server over `t` until the client sends the end marker.
/// Waits up to `first_wait` for the first message and `idle` between
/// messages. Returns the number of messages echoed.
pub fn serve_echo(
    t: &mut dyn Transport,
    first_wait: Duration,
    idle: Duration,
) -> Result<u64, TransportError> {
    let mut echoed = 0;
    let mut scratch = Vec::new();
    let mut wait = first_wait;
    loop {
        scratch.clear();
        let got = t.recv(Instant::now() + wait, &mut |m| scratch.extend_from_slice(m))?;
        if !got {
            return Err(TransportError(format!(
                "no message from the client within {wait:?}"
            )));
        }
        wait = idle;
        if scratch.is_empty() {
            t.flush(Instant::now() + Duration::from_millis(300))?;
            return Ok(echoed);
        }
        t.send(&scratch, Instant::now() + idle)?;
        echoed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_are_classified() {
        let mut a = vec![0u8; 32];
        let m5 = fill_message(&mut a, 5).to_vec();
        let mut b = vec![0u8; 32];
        let m3 = fill_message(&mut b, 3).to_vec();
        assert_eq!(classify(&m5, &m5, 5), Echo::Exact);
        assert_eq!(classify(&m5, &m3, 5), Echo::Stale);
        let mut bad = m5.clone();
        bad[20] ^= 1;
        assert_eq!(classify(&m5, &bad, 5), Echo::Corrupt);
        assert_eq!(classify(&m5, &m5[..10], 5), Echo::Corrupt);
        // Small messages: no room for the iteration, only exactness.
        let mut s = [0u8; 4];
        let tiny = fill_message(&mut s, 9).to_vec();
        assert_eq!(classify(&tiny, &tiny, 9), Echo::Exact);
    }
}
