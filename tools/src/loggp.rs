//! LogGP parameters of a transport — L (latency), o_s (send overhead), o_r
//! (receive overhead), g (gap between messages) and G (gap per byte) —
//! measured the way BCL-3 measured them, after Culler et al., "Assessing
//! Fast Network Interfaces" (thesis §5.2, Table 5.3):
//!
//! - **RTT** by ping-pong: the client sends a message, the server echoes it.
//! - **o_s** from a few sends: the client times a burst of `burst` sends (few
//!   enough that none waits for room), divided by `burst`; the server
//!   acknowledges each burst once it has all of it, so every burst starts
//!   with nothing in flight.
//! - **o_r** from a receive of a message that is already there: the client
//!   sends, then spins without touching the transport for a pause beyond
//!   the round trip (so the echo has arrived: in the shm inbox, the socket
//!   buffer, the RX ring), then times the one receive call that takes the
//!   echo.
//! - **g** from the steady state of many back-to-back sends: the client
//!   streams `m` messages and the server acknowledges the last one; the
//!   stream takes (m − 1)·g plus one round trip, so
//!   g = (time − RTT) / (m − 1); the median of a few streams (a stream in
//!   which a thread lost its CPU for a scheduler slice does not count).
//! - **G** = g / size: the time per byte when streaming messages of that
//!   size, i.e. 1 / bandwidth (the thesis takes G = 1 / bandwidth for long
//!   messages; [`Model`] takes it at the largest size measured).
//! - **L** = RTT/2 − o_s − o_r (Eq. 5.1). Inside one node it can be below
//!   zero (BCL-3's intra-node L is −0.14 µs): sending and receiving overlap.
//!
//! Each phase yields one figure per repetition — the median of its
//! iterations, so that an iteration in which a thread lost its CPU does not
//! count — and a parameter is reported as the mean over the repetitions ±
//! the standard error of that mean (BCL-3's Δ). The cost of reading the
//! clock, measured at start, is subtracted from the o_s and o_r intervals.
//!
//! The two ends speak a small protocol on the transport itself, so they can
//! run anywhere the tools run (two threads, two namespaces, two hosts): the
//! client sends a [`Command`], the server answers `ready` and then does the
//! phase (echo each message, or take bursts and acknowledge each). Between
//! phases a busy-polling server waits for the next command in slices of
//! [`LAZY_SLICE`] (one [`Transport::try_recv`], then sleep), so an idle
//! server leaves its CPU to whatever is being measured meanwhile (the other
//! method of `--check-unified-poll`).

use crate::transport::{Transport, TransportCounters, TransportError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Length of a control message (commands and the server's replies).
pub const CMD_LEN: usize = 16;
const MAGIC: [u8; 4] = *b"LGP1";
const OP_ECHO: u8 = 1;
const OP_SINK: u8 = 2;
const OP_END: u8 = 3;
const OP_READY: u8 = 10;
const OP_ACK: u8 = 11;

/// How long an idle busy-polling server sleeps between two looks for the
/// next command.
pub const LAZY_SLICE: Duration = Duration::from_micros(200);

/// What the client asks the server to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Echo each of the next `count` messages as it arrives.
    Echo {
        /// Messages to echo.
        count: u32,
    },
    /// Take `bursts` bursts of `burst` messages and acknowledge each burst
    /// once all of it has arrived.
    Sink {
        /// Bursts.
        bursts: u32,
        /// Messages per burst.
        burst: u32,
    },
    /// The run is over.
    End,
}

fn control(op: u8, a: u32, b: u32) -> [u8; CMD_LEN] {
    let mut m = [0u8; CMD_LEN];
    m[..4].copy_from_slice(&MAGIC);
    m[4] = op;
    m[8..12].copy_from_slice(&a.to_le_bytes());
    m[12..16].copy_from_slice(&b.to_le_bytes());
    m
}

/// The op and two numbers of a control message, if `m` is one.
fn parse_control(m: &[u8]) -> Option<(u8, u32, u32)> {
    if m.len() != CMD_LEN || m[..4] != MAGIC {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
    Some((m[4], word(8), word(12)))
}

impl Command {
    /// The command as a control message.
    pub fn encode(self) -> [u8; CMD_LEN] {
        match self {
            Command::Echo { count } => control(OP_ECHO, count, 0),
            Command::Sink { bursts, burst } => control(OP_SINK, bursts, burst),
            Command::End => control(OP_END, 0, 0),
        }
    }

    /// The command in `m`, if `m` is one.
    pub fn decode(m: &[u8]) -> Option<Command> {
        match parse_control(m)? {
            (OP_ECHO, count, _) => Some(Command::Echo { count }),
            (OP_SINK, bursts, burst) => Some(Command::Sink { bursts, burst }),
            (OP_END, _, _) => Some(Command::End),
            _ => None,
        }
    }
}

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum LoggpError {
    /// The peer did not answer in time.
    #[error("no {what} from the peer within {timeout:?}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        timeout: Duration,
    },
    /// The peer answered something else than the protocol expects.
    #[error("unexpected message from the peer: {0}")]
    Protocol(String),
    /// The transport failed.
    #[error("{0}")]
    Transport(#[from] TransportError),
}

/// What the server did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeSummary {
    /// Phases (commands other than the end).
    pub phases: u64,
    /// Data messages received.
    pub messages: u64,
    /// The transport's counters at the end.
    pub counters: TransportCounters,
}

/// Runs the server over `t` until the client's [`Command::End`]. Waits up
/// to `command_wait` for each command (between two commands the client may
/// be measuring another method for a while) and `idle` for any message of
/// a phase; `lazy` (for busy-polling transports) waits for commands one
/// poll per [`LAZY_SLICE`] instead of spinning.
pub fn serve(
    t: &mut dyn Transport,
    lazy: bool,
    command_wait: Duration,
    idle: Duration,
) -> Result<ServeSummary, LoggpError> {
    let mut summary = ServeSummary::default();
    let mut scratch = Vec::new();
    loop {
        let cmd = wait_command(t, lazy, command_wait, &mut scratch)?;
        let ready = control(OP_READY, 0, 0);
        match cmd {
            Command::End => {
                t.flush(Instant::now() + Duration::from_millis(300))?;
                summary.counters = t.counters();
                return Ok(summary);
            }
            Command::Echo { count } => {
                t.send(&ready, Instant::now() + idle)?;
                for _ in 0..count {
                    take(t, idle, &mut scratch)?;
                    t.send(&scratch, Instant::now() + idle)?;
                }
                summary.messages += u64::from(count);
            }
            Command::Sink { bursts, burst } => {
                t.send(&ready, Instant::now() + idle)?;
                let ack = control(OP_ACK, 0, 0);
                for _ in 0..bursts {
                    for _ in 0..burst {
                        take(t, idle, &mut scratch)?;
                    }
                    t.send(&ack, Instant::now() + idle)?;
                }
                summary.messages += u64::from(bursts) * u64::from(burst);
            }
        }
        summary.phases += 1;
    }
}

/// Receives the next message into `scratch`, waiting up to `wait`.
fn take(t: &mut dyn Transport, wait: Duration, scratch: &mut Vec<u8>) -> Result<(), LoggpError> {
    let got = t.recv(Instant::now() + wait, &mut |m| {
        scratch.clear();
        scratch.extend_from_slice(m);
    })?;
    if got {
        Ok(())
    } else {
        Err(LoggpError::Timeout {
            what: "message",
            timeout: wait,
        })
    }
}

/// Waits up to `wait` for the next command.
fn wait_command(
    t: &mut dyn Transport,
    lazy: bool,
    wait: Duration,
    scratch: &mut Vec<u8>,
) -> Result<Command, LoggpError> {
    let end = Instant::now() + wait;
    loop {
        let mut keep = |m: &[u8]| {
            scratch.clear();
            scratch.extend_from_slice(m);
        };
        let got = if lazy {
            t.try_recv(&mut keep)?
        } else {
            t.recv(end, &mut keep)?
        };
        if got {
            return Command::decode(scratch).ok_or_else(|| {
                LoggpError::Protocol(format!(
                    "a {}-byte message where a command was due",
                    scratch.len()
                ))
            });
        }
        if Instant::now() >= end {
            return Err(LoggpError::Timeout {
                what: "command",
                timeout: wait,
            });
        }
        if lazy {
            std::thread::sleep(LAZY_SLICE);
        }
    }
}

/// How much to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Repetitions of every phase of every size.
    pub reps: usize,
    /// Timed round trips, and timed receives, per repetition.
    pub iters: u32,
    /// Untimed round trips before them.
    pub warmup: u32,
    /// Timed bursts of sends (o_s) per repetition.
    pub bursts: u32,
    /// Sends per burst.
    pub burst: u32,
    /// Messages of a g stream, at most.
    pub stream: u32,
    /// Bytes of a g stream, at most (large messages stream fewer).
    pub volume: u64,
    /// g streams per repetition (g is their median).
    pub streams: u32,
    /// Pause between a send and the timed receive of its echo (o_r);
    /// `None`: [`Plan::delay_for`]'s rule.
    pub delay: Option<Duration>,
    /// Longest wait for any reply.
    pub timeout: Duration,
}

/// The fewest messages of a g stream (the formula needs two).
pub const MIN_STREAM: u32 = 16;

impl Plan {
    /// Messages of the g stream of `size`: `stream`, fewer when that is more
    /// than `volume` bytes, at least [`MIN_STREAM`].
    pub fn stream_for(&self, size: usize) -> u32 {
        let by_volume = self.volume / size.max(1) as u64;
        u32::try_from(by_volume)
            .unwrap_or(u32::MAX)
            .min(self.stream)
            .max(MIN_STREAM)
    }

    /// The o_r pause after a median round trip of `rtt_ns`: `delay` if
    /// given, else 1.5 round trips and at least 10 µs. The echo is there
    /// after one round trip (a round trip ends when the echo has been
    /// received); the half is margin. Not more: a reliable method's peer
    /// resends what is not acknowledged within its retransmission timeout
    /// (BCL's is at least 200 µs), and resent frames received in the timed
    /// call would count as receive overhead.
    pub fn delay_for(&self, rtt_ns: f64) -> Duration {
        self.delay.unwrap_or_else(|| {
            Duration::from_nanos((1.5 * rtt_ns) as u64).max(Duration::from_micros(10))
        })
    }
}

/// One repetition's figures for one size, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Median round trip.
    pub rtt: f64,
    /// Median send overhead.
    pub o_s: f64,
    /// Median receive overhead.
    pub o_r: f64,
    /// Gap between messages of the stream.
    pub g: f64,
    /// The o_r pause used.
    pub delay: f64,
    /// Messages of the g stream.
    pub stream: u32,
}

/// The cost of one clock reading (`Instant::now`), in nanoseconds: the
/// median of back-to-back readings; a timed interval contains about one.
pub fn timer_overhead_ns() -> f64 {
    let mut v: Vec<f64> = (0..2001)
        .map(|_| {
            let t0 = Instant::now();
            let t1 = Instant::now();
            (t1 - t0).as_nanos() as f64
        })
        .collect();
    median(&mut v)
}

/// The middle value (the upper of the two middle ones); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The measuring end over one transport.
pub struct Client<'a> {
    t: &'a mut dyn Transport,
    timeout: Duration,
    timer_ns: f64,
    buf: Vec<u8>,
}

impl<'a> Client<'a> {
    /// A client measuring through `t`, with replies awaited up to
    /// `timeout` and `timer_ns` subtracted per timed interval.
    pub fn new(t: &'a mut dyn Transport, timeout: Duration, timer_ns: f64) -> Self {
        Client {
            t,
            timeout,
            timer_ns,
            buf: Vec::new(),
        }
    }

    /// The transport's counters.
    pub fn counters(&self) -> TransportCounters {
        self.t.counters()
    }

    /// Everything the transport counted, for a person.
    pub fn details(&self) -> String {
        self.t.details()
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// Receives one message and returns its length.
    fn recv_len(&mut self, what: &'static str) -> Result<usize, LoggpError> {
        let mut len = 0;
        let got = self.t.recv(self.deadline(), &mut |m| len = m.len())?;
        if got {
            Ok(len)
        } else {
            Err(LoggpError::Timeout {
                what,
                timeout: self.timeout,
            })
        }
    }

    /// Waits for the control reply `op`.
    fn expect(&mut self, op: u8, what: &'static str) -> Result<(), LoggpError> {
        let mut reply = None;
        let got = self
            .t
            .recv(self.deadline(), &mut |m| reply = parse_control(m))?;
        match (got, reply) {
            (false, _) => Err(LoggpError::Timeout {
                what,
                timeout: self.timeout,
            }),
            (true, Some((o, _, _))) if o == op => Ok(()),
            (true, other) => Err(LoggpError::Protocol(format!(
                "{other:?} where the {what} was due"
            ))),
        }
    }

    /// Sends `cmd` and waits until the server is ready for it.
    fn command(&mut self, cmd: Command) -> Result<(), LoggpError> {
        self.t.send(&cmd.encode(), self.deadline())?;
        self.expect(OP_READY, "ready")
    }

    fn message(&mut self, size: usize) {
        if self.buf.len() < size {
            self.buf.resize(size, 0);
            for (k, b) in self.buf.iter_mut().enumerate() {
                *b = (k as u8).wrapping_mul(29).wrapping_add(0x5a);
            }
        }
    }

    /// Median round trip of `iters` ping-pongs of `size` bytes, after
    /// `warmup` untimed ones.
    pub fn rtt(&mut self, size: usize, warmup: u32, iters: u32) -> Result<f64, LoggpError> {
        self.message(size);
        self.command(Command::Echo {
            count: warmup + iters,
        })?;
        let mut v = Vec::with_capacity(iters as usize);
        for k in 0..warmup + iters {
            let t0 = Instant::now();
            self.t.send(&self.buf[..size], t0 + self.timeout)?;
            let len = self.recv_len("echo")?;
            let dt = t0.elapsed().as_nanos() as f64;
            if len != size {
                return Err(LoggpError::Protocol(format!(
                    "an echo of {len} bytes to a message of {size}"
                )));
            }
            if k >= warmup {
                v.push(dt);
            }
        }
        Ok(median(&mut v))
    }

    /// Median time of the receive call that takes an echo of `size` bytes
    /// which arrived during a pause of `delay` after the send.
    pub fn o_r(&mut self, size: usize, iters: u32, delay: Duration) -> Result<f64, LoggpError> {
        self.message(size);
        // One untimed exchange first: the phase's first message meets a
        // server that has just answered `ready`.
        self.command(Command::Echo { count: iters + 1 })?;
        let mut v = Vec::with_capacity(iters as usize);
        for k in 0..=iters {
            self.t.send(&self.buf[..size], self.deadline())?;
            let sent = Instant::now();
            while sent.elapsed() < delay {
                std::hint::spin_loop();
            }
            let t0 = Instant::now();
            let len = self.recv_len("echo")?;
            let dt = t0.elapsed().as_nanos() as f64;
            if len != size {
                return Err(LoggpError::Protocol(format!(
                    "an echo of {len} bytes to a message of {size}"
                )));
            }
            if k > 0 {
                v.push((dt - self.timer_ns).max(0.0));
            }
        }
        Ok(median(&mut v))
    }

    /// Median time per send in bursts of `burst` sends of `size` bytes
    /// (`bursts` timed, after one untimed).
    pub fn o_s(&mut self, size: usize, bursts: u32, burst: u32) -> Result<f64, LoggpError> {
        self.message(size);
        let burst = burst.max(1);
        self.command(Command::Sink {
            bursts: bursts + 1,
            burst,
        })?;
        let mut v = Vec::with_capacity(bursts as usize);
        for b in 0..=bursts {
            let t0 = Instant::now();
            let deadline = t0 + self.timeout;
            for _ in 0..burst {
                self.t.send(&self.buf[..size], deadline)?;
            }
            let dt = t0.elapsed().as_nanos() as f64;
            self.expect(OP_ACK, "burst acknowledgement")?;
            if b > 0 {
                v.push(((dt - self.timer_ns) / f64::from(burst)).max(0.0));
            }
        }
        Ok(median(&mut v))
    }

    /// The gap g of a stream of `m` messages of `size` bytes whose round
    /// trip is `rtt_ns`: (stream time − RTT) / (m − 1), the stream timed
    /// from the first send to the server's acknowledgement of the last
    /// message.
    pub fn gap(&mut self, size: usize, m: u32, rtt_ns: f64) -> Result<f64, LoggpError> {
        self.message(size);
        let m = m.max(2);
        self.command(Command::Sink {
            bursts: 1,
            burst: m,
        })?;
        let t0 = Instant::now();
        let deadline = t0 + self.timeout;
        for _ in 0..m {
            self.t.send(&self.buf[..size], deadline)?;
        }
        self.expect(OP_ACK, "stream acknowledgement")?;
        let total = t0.elapsed().as_nanos() as f64;
        let g = (total - rtt_ns) / f64::from(m - 1);
        // A round trip longer than usual could exceed what the stream
        // added; then the plain mean is the better estimate.
        Ok(if g > 0.0 { g } else { total / f64::from(m) })
    }

    /// One repetition of every phase for `size`.
    pub fn sample(&mut self, size: usize, plan: &Plan) -> Result<Sample, LoggpError> {
        let rtt = self.rtt(size, plan.warmup, plan.iters)?;
        let delay = plan.delay_for(rtt);
        let o_r = self.o_r(size, plan.iters, delay)?;
        let o_s = self.o_s(size, plan.bursts, plan.burst)?;
        let stream = plan.stream_for(size);
        let mut gs = (0..plan.streams.max(1))
            .map(|_| self.gap(size, stream, rtt))
            .collect::<Result<Vec<f64>, LoggpError>>()?;
        let g = median(&mut gs);
        Ok(Sample {
            rtt,
            o_s,
            o_r,
            g,
            delay: delay.as_nanos() as f64,
            stream,
        })
    }

    /// Ends the run: the server returns from [`serve`].
    pub fn end(&mut self) -> Result<(), LoggpError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        self.t.send(&Command::End.encode(), deadline)?;
        self.t.flush(deadline)?;
        Ok(())
    }
}

/// Runs `plan` over every client: repetition by repetition, the clients in
/// turn (in reverse order every other repetition, so that drift of the host
/// between minutes weighs on all alike), each doing every size. `progress`
/// is told when each repetition starts. Returns, per client, one result per
/// size.
pub fn measure(
    clients: &mut [Client<'_>],
    plan: &Plan,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Vec<LoggpResult>>, LoggpError> {
    let n = clients.len();
    let mut samples = vec![vec![Vec::with_capacity(plan.reps); plan.sizes.len()]; n];
    for rep in 0..plan.reps {
        progress(rep);
        let order: Vec<usize> = if rep % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in order {
            for (k, &size) in plan.sizes.iter().enumerate() {
                let s = clients[i].sample(size, plan)?;
                samples[i][k].push(s);
            }
        }
    }
    Ok(samples
        .iter()
        .map(|per_size| {
            plan.sizes
                .iter()
                .zip(per_size)
                .map(|(&size, s)| LoggpResult::from_samples(size, s))
                .collect()
        })
        .collect())
}

/// Mean and standard error of the mean, `sqrt(Σ(mean − v)² / (N(N − 1)))`
/// (BCL-3's Δ); the error is 0 for fewer than two values.
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let ss: f64 = v.iter().map(|x| (x - mean).powi(2)).sum();
    (mean, (ss / (n * (n - 1.0))).sqrt())
}

/// The LogGP parameters and the round trip, one value of type `T` each
/// (the standard errors, or the per-repetition values).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Params<T> {
    /// Latency L = RTT/2 − o_s − o_r.
    #[serde(rename = "L_ns")]
    pub l_ns: T,
    /// Send overhead.
    pub o_s_ns: T,
    /// Receive overhead.
    pub o_r_ns: T,
    /// Gap between messages of this size.
    pub g_ns: T,
    /// Gap per byte (g / size).
    #[serde(rename = "G_ns_per_byte")]
    pub gap_per_byte_ns: T,
    /// Round trip.
    pub rtt_ns: T,
}

/// One size's parameters in the `bcl-loggp` report: means over the
/// repetitions, with their standard errors and the values themselves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggpResult {
    /// Message size in bytes.
    pub size: usize,
    /// Latency L = RTT/2 − o_s − o_r, ns (below zero when send and receive
    /// overlap, as inside a node).
    #[serde(rename = "L_ns")]
    pub l_ns: f64,
    /// Send overhead, ns.
    pub o_s_ns: f64,
    /// Receive overhead, ns.
    pub o_r_ns: f64,
    /// Gap between messages of this size in a stream, ns.
    pub g_ns: f64,
    /// Gap per byte, ns per byte: g / size, i.e. 1 / the streaming
    /// bandwidth at this size.
    #[serde(rename = "G_ns_per_byte")]
    pub gap_per_byte_ns: f64,
    /// Round trip (ping-pong), ns.
    pub rtt_ns: f64,
    /// Streaming bandwidth at this size, 10^6 bytes per second (size / g).
    pub mbytes_per_s: f64,
    /// Messages of each g stream.
    pub stream_messages: u32,
    /// Mean pause between a send and the timed receive of its echo, ns.
    pub o_r_delay_ns: f64,
    /// Repetitions.
    pub reps: usize,
    /// Standard errors of the means.
    pub se: Params<f64>,
    /// The value of each repetition.
    pub per_rep: Params<Vec<f64>>,
}

impl LoggpResult {
    /// The result of `size` from its repetitions.
    pub fn from_samples(size: usize, s: &[Sample]) -> Self {
        let col = |f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
        let per_rep = Params {
            l_ns: col(&|x| x.rtt / 2.0 - x.o_s - x.o_r),
            o_s_ns: col(&|x| x.o_s),
            o_r_ns: col(&|x| x.o_r),
            g_ns: col(&|x| x.g),
            gap_per_byte_ns: col(&|x| x.g / size.max(1) as f64),
            rtt_ns: col(&|x| x.rtt),
        };
        let (l, l_se) = mean_se(&per_rep.l_ns);
        let (os, os_se) = mean_se(&per_rep.o_s_ns);
        let (or, or_se) = mean_se(&per_rep.o_r_ns);
        let (g, g_se) = mean_se(&per_rep.g_ns);
        let (gb, gb_se) = mean_se(&per_rep.gap_per_byte_ns);
        let (rtt, rtt_se) = mean_se(&per_rep.rtt_ns);
        LoggpResult {
            size,
            l_ns: l,
            o_s_ns: os,
            o_r_ns: or,
            g_ns: g,
            gap_per_byte_ns: gb,
            rtt_ns: rtt,
            mbytes_per_s: if g > 0.0 { size as f64 / g * 1e3 } else { 0.0 },
            stream_messages: s.first().map_or(0, |x| x.stream),
            o_r_delay_ns: mean_se(&col(&|x| x.delay)).0,
            reps: s.len(),
            se: Params {
                l_ns: l_se,
                o_s_ns: os_se,
                o_r_ns: or_se,
                g_ns: g_se,
                gap_per_byte_ns: gb_se,
                rtt_ns: rtt_se,
            },
            per_rep,
        }
    }
}

/// The parameters a cost model uses, from the sizes measured: L, o_s, o_r
/// and g of the smallest size, G of the largest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Latency, ns (smallest size).
    #[serde(rename = "L_ns")]
    pub l_ns: f64,
    /// Send overhead, ns (smallest size).
    pub o_s_ns: f64,
    /// Receive overhead, ns (smallest size).
    pub o_r_ns: f64,
    /// Gap between small messages, ns (smallest size).
    pub g_ns: f64,
    /// Gap per byte of long messages, ns per byte (largest size).
    #[serde(rename = "G_ns_per_byte")]
    pub gap_per_byte_ns: f64,
    /// The size L, o_s, o_r and g come from.
    pub small_size: usize,
    /// The size G comes from.
    pub large_size: usize,
    /// How the parameters combine (LogGP).
    pub formula: String,
}

impl Model {
    /// The model of `results` (`None` when empty).
    pub fn of(results: &[LoggpResult]) -> Option<Model> {
        let small = results.iter().min_by_key(|r| r.size)?;
        let large = results.iter().max_by_key(|r| r.size)?;
        Some(Model {
            l_ns: small.l_ns,
            o_s_ns: small.o_s_ns,
            o_r_ns: small.o_r_ns,
            g_ns: small.g_ns,
            gap_per_byte_ns: large.gap_per_byte_ns,
            small_size: small.size,
            large_size: large.size,
            formula: "one k-byte message: o_s + (k-1)*G + L + o_r; back-to-back messages leave max(g, o_s) apart".into(),
        })
    }
}

/// BCL-3's figures (thesis Table 5.3; shared/reference/seed-000-bcl3.md
/// §6.4), in the row order of [`table`]: L, o_s, o_r, g (µs), G (ns/B), 1/G
/// (MB/s), RTT/2 (µs).
pub const BCL3_INTRA: [&str; 7] = [
    "-0.14 ± 0.03",
    "1.85 ± 0.03",
    "1.0172 ± 0.0002",
    "3.120 ± 0.002",
    "2.55 ± 0.03",
    "391 ± 5",
    "2.726 ± 0.001",
];

/// BCL-3's inter-node figures (semi-user-level protocol over Myrinet), in
/// the same order as [`BCL3_INTRA`].
pub const BCL3_INTER: [&str; 7] = [
    "10.27 ± 0.03",
    "7.05 ± 0.01",
    "1.0172 ± 0.0002",
    "11.0911 ± 0.0006",
    "6.8300 ± 0.0002",
    "146.412 ± 0.004",
    "18.34 ± 0.03",
];

/// Which of BCL-3's paths a method compares with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bcl3Path {
    /// The intra-node path (shared memory).
    Intra,
    /// The inter-node path (Myrinet).
    Inter,
}

/// `mean ± se` with `digits` decimals.
fn pm(mean: f64, se: f64, digits: usize) -> String {
    format!("{mean:.digits$} ± {se:.digits$}")
}

/// Mean ± standard error of `f` over the repetitions of `r`, formatted.
fn derived(r: &LoggpResult, digits: usize, f: impl Fn(usize) -> f64) -> String {
    let v: Vec<f64> = (0..r.reps).map(f).collect();
    let (m, se) = mean_se(&v);
    pm(m, se, digits)
}

/// The LogGP table in the shape of BCL-3's Table 5.3: one column per size
/// (mean ± standard error over the repetitions) and BCL-3's figures of
/// `path` beside them.
pub fn table(results: &[LoggpResult], path: Bcl3Path) -> String {
    // Per row: label, decimals, and the row's value in repetition i.
    type Row = (&'static str, usize, fn(&Params<Vec<f64>>, usize) -> f64);
    let rows: [Row; 7] = [
        ("L (µs)", 3, |p, i| p.l_ns[i] / 1e3),
        ("o_s (µs)", 3, |p, i| p.o_s_ns[i] / 1e3),
        ("o_r (µs)", 3, |p, i| p.o_r_ns[i] / 1e3),
        ("g (µs)", 3, |p, i| p.g_ns[i] / 1e3),
        ("G (ns/B)", 3, |p, i| p.gap_per_byte_ns[i]),
        ("1/G (MB/s)", 1, |p, i| 1e3 / p.gap_per_byte_ns[i]),
        ("RTT/2 (µs)", 3, |p, i| p.rtt_ns[i] / 2e3),
    ];
    let (bcl3, name) = match path {
        Bcl3Path::Intra => (BCL3_INTRA, "BCL-3 intra-node"),
        Bcl3Path::Inter => (BCL3_INTER, "BCL-3 inter-node"),
    };
    let w = 20;
    let mut out = format!("{:<12}", "parameter");
    for r in results {
        out.push_str(&format!(" {:>w$}", format!("{} B", r.size)));
    }
    out.push_str(&format!(" {name:>w$}\n"));
    for (k, (label, digits, value)) in rows.iter().enumerate() {
        out.push_str(&format!("{label:<12}"));
        for r in results {
            let cell = derived(r, *digits, |i| value(&r.per_rep, i));
            out.push_str(&format!(" {cell:>w$}"));
        }
        out.push_str(&format!(" {:>w$}\n", bcl3[k]));
    }
    out
}

/// Where the two ends ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// `local` (two threads of this process), `connect` (this process
    /// measured against a server started elsewhere, e.g. by `--lab`) or
    /// `job` (rank 0 against rank 1 under `bcl-run`).
    pub role: String,
    /// CPU the serving end was pinned to, when known.
    pub server_cpu: Option<usize>,
    /// CPU the measuring end was pinned to.
    pub client_cpu: Option<usize>,
    /// With the unified-poll check: CPU of the shm server thread.
    pub shm_server_cpu: Option<usize>,
    /// The network namespace the measuring end ran in (its name under
    /// /run/netns), if any.
    pub netns: Option<String>,
    /// The server's descriptor, when connecting to one.
    pub peer: Option<String>,
}

/// The host the measuring end ran on, and the build.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// CPU model.
    pub cpu_model: String,
    /// CPUs of the host (online processors).
    pub cpus: usize,
    /// One-minute load average when the run started.
    pub load_1min: f64,
    /// Commit of the build: `BCL_COMMIT` if set, else the commit checked out
    /// where the executable lies, at run time; `None` when unknown.
    pub commit: Option<String>,
    /// Whether that checkout had uncommitted changes to tracked files.
    pub commit_dirty: Option<bool>,
}

impl Host {
    /// This host, now.
    pub fn here() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|m| m.trim().to_string())
            .unwrap_or_default();
        let load_1min = read("/proc/loadavg")
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0);
        let (commit, commit_dirty) = commit();
        Host {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model,
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            load_1min,
            commit,
            commit_dirty,
        }
    }
}

/// The commit of this build: `BCL_COMMIT`, else asked of git in the
/// directory of the executable (a build's target directory lies in its
/// checkout).
fn commit() -> (Option<String>, Option<bool>) {
    if let Ok(c) = std::env::var("BCL_COMMIT") {
        return (Some(c), None);
    }
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.to_path_buf()))
    else {
        return (None, None);
    };
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]);
    let dirty = head
        .as_ref()
        .and_then(|_| git(&["status", "--porcelain", "--untracked-files=no"]))
        .map(|s| !s.is_empty());
    (head, dirty)
}

/// The name of the network namespace this process is in, found as `ip
/// netns identify` does: the entry of /run/netns that is the same file as
/// /proc/self/ns/net.
pub fn netns_name() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self/ns/net").ok()?;
    std::fs::read_dir("/run/netns")
        .ok()?
        .filter_map(Result::ok)
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// How much was measured, as run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Repetitions of every phase.
    pub reps: usize,
    /// Timed round trips, and timed receives, per repetition.
    pub iters: u32,
    /// Untimed round trips before them.
    pub warmup: u32,
    /// Timed bursts of sends per repetition.
    pub bursts: u32,
    /// Sends per burst.
    pub burst: u32,
    /// Messages of a g stream, at most.
    pub stream: u32,
    /// Bytes of a g stream, at most.
    pub volume: u64,
    /// g streams per repetition.
    pub streams: u32,
    /// The o_r pause, if fixed (else 1.5 round trips, at least 10 µs).
    pub delay_ns: Option<u64>,
}

impl From<&Plan> for PlanReport {
    fn from(p: &Plan) -> Self {
        PlanReport {
            reps: p.reps,
            iters: p.iters,
            warmup: p.warmup,
            bursts: p.bursts,
            burst: p.burst,
            stream: p.stream,
            volume: p.volume,
            streams: p.streams,
            delay_ns: p.delay.map(|d| d.as_nanos() as u64),
        }
    }
}

/// Transport counters of the measuring end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggpCounters {
    /// Frames the transport resent.
    pub retransmits: u64,
    /// Frames dropped as malformed, corrupted or foreign.
    pub bad_frames: u64,
}

impl From<TransportCounters> for LoggpCounters {
    fn from(c: TransportCounters) -> Self {
        LoggpCounters {
            retransmits: c.retransmits,
            bad_frames: c.bad_frames,
        }
    }
}

/// One method's parameters (the reference method of a unified-poll check).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MethodResults {
    /// The method.
    pub method: String,
    /// One entry per size.
    pub results: Vec<LoggpResult>,
    /// The model's parameters.
    pub model: Option<Model>,
    /// Counters of its measuring end.
    pub counters: LoggpCounters,
}

/// o_r of the checked method against the reference at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PollResult {
    /// Message size.
    pub size: usize,
    /// Mean o_r of the reference method (shm), ns.
    pub o_r_reference_ns: f64,
    /// Mean o_r of the checked method, ns.
    pub o_r_ns: f64,
    /// o_r_ns / o_r_reference_ns.
    pub ratio: f64,
    /// The same ratio per repetition (both measured in that repetition).
    pub ratio_per_rep: Vec<f64>,
    /// Whether the ratio is within the tolerance of 1.
    pub within: bool,
}

/// The one-thread o_r figures of `bcl-or` (`bcl_bench::recv_overhead`),
/// ns per message, beside the check's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneThreadReport {
    /// Message size.
    pub size: usize,
    /// Messages per timed round.
    pub batch: usize,
    /// BCL over shm.
    pub shm_ns: f64,
    /// BCL over shm, an idle udp method polled in every round too.
    pub shm_udp_polled_ns: f64,
    /// BCL over udp on loopback.
    pub udp_ns: f64,
    /// The bare shm mechanism.
    pub bare_shm_ns: f64,
    /// Kernel `recv` of the same datagrams.
    pub kernel_udp_ns: f64,
}

/// The unified-poll check: BCL-3's claim that receiving from a network
/// peer costs what receiving from a local one does (Table 5.3: o_r
/// 1.0172 µs on both paths), as o_r of `method` against o_r of shm in the
/// same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnifiedPoll {
    /// The reference method (`shm`).
    pub reference: String,
    /// The method checked.
    pub method: String,
    /// Largest accepted |ratio − 1|.
    pub tolerance: f64,
    /// Whether every size is within the tolerance.
    pub within: bool,
    /// One entry per size.
    pub results: Vec<PollResult>,
    /// `bcl-or`'s one-thread figures at the smallest size, when measured.
    pub one_thread: Option<OneThreadReport>,
}

impl UnifiedPoll {
    /// Compares o_r of `checked` with o_r of `reference`, size by size.
    pub fn compare(
        reference: &MethodResults,
        checked: &MethodResults,
        tolerance: f64,
    ) -> UnifiedPoll {
        let results: Vec<PollResult> = reference
            .results
            .iter()
            .zip(&checked.results)
            .map(|(r, c)| {
                let ratio = if r.o_r_ns > 0.0 {
                    c.o_r_ns / r.o_r_ns
                } else {
                    f64::INFINITY
                };
                PollResult {
                    size: r.size,
                    o_r_reference_ns: r.o_r_ns,
                    o_r_ns: c.o_r_ns,
                    ratio,
                    ratio_per_rep: r
                        .per_rep
                        .o_r_ns
                        .iter()
                        .zip(&c.per_rep.o_r_ns)
                        .map(|(a, b)| b / a)
                        .collect(),
                    within: (ratio - 1.0).abs() <= tolerance,
                }
            })
            .collect();
        UnifiedPoll {
            reference: reference.method.clone(),
            method: checked.method.clone(),
            tolerance,
            within: results.iter().all(|r| r.within),
            results,
            one_thread: None,
        }
    }

    /// The check as a table: o_r of both methods, the ratio and its range
    /// over the repetitions.
    pub fn table(&self, reference: &MethodResults, checked: &MethodResults) -> String {
        let (a, b) = (&self.reference, &self.method);
        let mut out = format!(
            "{:>8} {:>20} {:>20} {:>10} {:>20} {:>8}\n",
            "size",
            format!("o_r {a} (µs)"),
            format!("o_r {b} (µs)"),
            format!("{b}/{a}"),
            "per repetition",
            format!("±{:.0} %", self.tolerance * 100.0)
        );
        for ((p, r), c) in self
            .results
            .iter()
            .zip(&reference.results)
            .zip(&checked.results)
        {
            let lo = p
                .ratio_per_rep
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let hi = p.ratio_per_rep.iter().copied().fold(0.0, f64::max);
            out.push_str(&format!(
                "{:>8} {:>20} {:>20} {:>10.2} {:>20} {:>8}\n",
                p.size,
                pm(r.o_r_ns / 1e3, r.se.o_r_ns / 1e3, 3),
                pm(c.o_r_ns / 1e3, c.se.o_r_ns / 1e3, 3),
                p.ratio,
                format!("{lo:.2}–{hi:.2}"),
                if p.within { "yes" } else { "no" }
            ));
        }
        out
    }
}

/// The `--json` output of `bcl-loggp` (shared/contracts/tools.md). Self-
/// describing, so that a program choosing algorithms by their LogGP cost
/// (`bcl::coll`) can take it as it is: what was measured (method, mode),
/// where (placement, host), with which build (commit), how (plan,
/// statistic), and the parameters per size and as one model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggpReport {
    /// Always `bcl-loggp`.
    pub tool: String,
    /// The method measured.
    pub method: String,
    /// `busy-poll` or `blocking`.
    pub mode: String,
    /// Where the ends ran.
    pub placement: Placement,
    /// The host and build of the measuring end.
    pub host: Host,
    /// Cost of one clock reading, subtracted from o_s and o_r, ns.
    pub timer_ns: f64,
    /// How much was measured.
    pub plan: PlanReport,
    /// How the figures were formed.
    pub statistic: String,
    /// One entry per size.
    pub results: Vec<LoggpResult>,
    /// L, o_s, o_r, g of the smallest size and G of the largest.
    pub model: Option<Model>,
    /// Counters of the measuring end.
    pub counters: LoggpCounters,
    /// With --check-unified-poll: the reference method (shm), measured in
    /// the same run, alternating with `method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<MethodResults>,
    /// With --check-unified-poll: the comparison of o_r.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unified_poll: Option<UnifiedPoll>,
}

/// The `statistic` line of the report.
pub const STATISTIC: &str = "each phase's figure per repetition is the median of its iterations (g: of its streams); a parameter is the mean over repetitions, se its standard error (sqrt(sum((mean-v)^2)/(N(N-1)))); L = RTT/2 - o_s - o_r; g = (stream time - RTT)/(messages - 1); G = g/size";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_and_nothing_else_decodes() {
        for c in [
            Command::Echo { count: 7 },
            Command::Sink {
                bursts: 3,
                burst: 4,
            },
            Command::End,
        ] {
            assert_eq!(Command::decode(&c.encode()), Some(c));
        }
        assert_eq!(Command::decode(&[0u8; CMD_LEN]), None);
        assert_eq!(Command::decode(&control(OP_READY, 0, 0)), None);
        assert_eq!(Command::decode(&Command::End.encode()[..8]), None);
    }

    #[test]
    fn statistics_are_bcl3s() {
        assert_eq!(mean_se(&[]), (0.0, 0.0));
        assert_eq!(mean_se(&[5.0]), (5.0, 0.0));
        let (m, se) = mean_se(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        // sqrt(5 / 12)
        assert!((se - (5.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn results_follow_the_loggp_relations() {
        let s = |rtt: f64| Sample {
            rtt,
            o_s: 100.0,
            o_r: 50.0,
            g: 400.0,
            delay: 10_000.0,
            stream: 1000,
        };
        let r = LoggpResult::from_samples(1000, &[s(1000.0), s(1200.0)]);
        assert_eq!(r.rtt_ns, 1100.0);
        assert_eq!(r.l_ns, 550.0 - 150.0);
        assert_eq!(r.gap_per_byte_ns, 0.4);
        assert_eq!(r.mbytes_per_s, 2500.0);
        assert_eq!(r.per_rep.l_ns, vec![350.0, 450.0]);
        assert_eq!(r.se.l_ns, 50.0);
        let v = serde_json::to_value(&r).unwrap();
        for k in ["size", "L_ns", "o_s_ns", "o_r_ns", "g_ns", "G_ns_per_byte"] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["se"].get("G_ns_per_byte").is_some());
        let small = LoggpResult::from_samples(8, &[s(900.0)]);
        let m = Model::of(&[r.clone(), small]).unwrap();
        assert_eq!((m.small_size, m.large_size), (8, 1000));
        assert_eq!(m.gap_per_byte_ns, 0.4);
        assert_eq!(m.l_ns, 450.0 - 150.0);
        let t = table(&[r], Bcl3Path::Intra);
        assert!(t.contains("1000 B") && t.contains("1.0172 ± 0.0002"), "{t}");
        assert!(t.contains("2500.0"), "{t}");
    }

    #[test]
    fn streams_shrink_with_the_volume() {
        let plan = Plan {
            sizes: vec![8],
            reps: 1,
            iters: 1,
            warmup: 0,
            bursts: 1,
            burst: 4,
            stream: 20_000,
            volume: 1 << 20,
            streams: 1,
            delay: None,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(plan.stream_for(8), 20_000);
        assert_eq!(plan.stream_for(4096), 256);
        assert_eq!(plan.stream_for(1 << 30), MIN_STREAM);
        assert_eq!(plan.delay_for(1_000.0), Duration::from_micros(10));
        assert_eq!(plan.delay_for(100_000.0), Duration::from_micros(150));
    }
}
