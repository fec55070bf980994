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
use bcl::{Endpoint, ProcessAddr};
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

/// The client side over a BCL endpoint.
pub struct BclClient<'a> {
    ep: &'a mut Endpoint,
    server: ProcessAddr,
}

impl<'a> BclClient<'a> {
    /// A client of the echo server at `server`.
    pub fn new(ep: &'a mut Endpoint, server: ProcessAddr) -> Self {
        BclClient { ep, server }
    }

    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), PingError> {
        loop {
            match self.ep.send(self.server, msg) {
                Ok(_) => return Ok(()),
                Err(bcl::Error::Send(bcl::core::SendError::WouldBlock(_)))
                    if Instant::now() < deadline =>
                {
                    self.reap()?;
                    self.ep
                        .progress()
                        .map_err(|e| PingError::Transport(e.to_string()))?;
                }
                Err(e) => return Err(PingError::Transport(e.to_string())),
            }
        }
    }

    /// Drops completions, reporting failed sends.
    fn reap(&mut self) -> Result<(), PingError> {
        while let Some(ev) = self.ep.poll_send_event() {
            if let bcl::SendEvent::Failed(_, f) = ev {
                return Err(PingError::Transport(f.to_string()));
            }
        }
        Ok(())
    }
}

impl Roundtrip for BclClient<'_> {
    fn roundtrip(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError> {
        self.send(msg, Instant::now() + timeout)?;
        self.wait_reply(msg, iteration, timeout)
    }

    fn wait_reply(
        &mut self,
        msg: &[u8],
        iteration: u64,
        timeout: Duration,
    ) -> Result<Echo, PingError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(d) = self.ep.poll_delivery() {
                let echo = match self.ep.message(&d) {
                    Some(reply) if d.from == self.server => classify(msg, reply, iteration),
                    _ => Echo::Corrupt,
                };
                self.ep
                    .release(d)
                    .map_err(|e| PingError::Transport(e.to_string()))?;
                self.reap()?;
                return Ok(echo);
            }
            if Instant::now() >= deadline {
                return Err(PingError::Timeout(timeout));
            }
            self.ep
                .progress()
                .map_err(|e| PingError::Transport(e.to_string()))?;
        }
    }

    fn finish(&mut self) -> Result<(), PingError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        self.send(&[], deadline)?;
        // Wait (briefly) for the end marker to be acknowledged, so the server
        // is not left retransmitting to nobody.
        while self.ep.port().outstanding_sends() > 0 && Instant::now() < deadline {
            self.ep
                .progress()
                .map_err(|e| PingError::Transport(e.to_string()))?;
            self.reap()?;
        }
        Ok(())
    }
}

/// Runs a BCL echo server until a client sends the end marker or nothing
/// arrives for `idle_timeout`. Returns the number of messages echoed.
pub fn serve_bcl(ep: &mut Endpoint, idle_timeout: Duration) -> Result<u64, bcl::Error> {
    let mut echoed = 0;
    let mut scratch = Vec::new();
    let mut last_activity = Instant::now();
    loop {
        ep.progress()?;
        while ep.poll_send_event().is_some() {}
        let Some(d) = ep.poll_delivery() else {
            if last_activity.elapsed() > idle_timeout {
                return Err(bcl::Error::Timeout(idle_timeout));
            }
            continue;
        };
        last_activity = Instant::now();
        if d.len == 0 {
            ep.release(d)?;
            linger(ep, Duration::from_millis(200))?;
            return Ok(echoed);
        }
        scratch.clear();
        scratch.extend_from_slice(ep.message(&d).unwrap_or_default());
        let from = d.from;
        ep.release(d)?;
        loop {
            match ep.send(from, &scratch) {
                Ok(_) => break,
                Err(bcl::Error::Send(bcl::core::SendError::WouldBlock(_))) => {
                    ep.progress()?;
                    while ep.poll_send_event().is_some() {}
                }
                Err(e) => return Err(e),
            }
        }
        echoed += 1;
    }
}

/// Keeps making progress for a while, so final acknowledgements go out.
pub fn linger(ep: &mut Endpoint, time: Duration) -> Result<(), bcl::Error> {
    let end = Instant::now() + time;
    while Instant::now() < end {
        ep.progress()?;
        while ep.poll_send_event().is_some() {}
        if ep.port().outstanding_sends() == 0 && ep.next_timeout().is_none() {
            break;
        }
    }
    Ok(())
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
