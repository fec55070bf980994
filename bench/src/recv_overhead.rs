//! The receive overhead o_r (LogGP's receiver CPU time per message) of BCL
//! over shared memory and over UDP, and of the bare mechanism underneath
//! each, measured in one thread so that no scheduling between processes
//! enters the figure. `bcl-or` prints these figures; `bcl-loggp
//! --check-unified-poll` prints them beside its own two-process o_r.
//!
//! For each round a sender puts a batch of messages in flight and waits
//! until they are in the receiver's hands (shared memory: in its inbox; UDP:
//! in its socket buffer). Only then is the receiver timed: its progress
//! engine, delivery and release, until the whole batch is taken. o_r = that
//! time / batch, from the median round (a round in which the thread was
//! preempted does not count). Baselines, timed the same way: shm — the bare
//! inbox (`Mailbox` receive, copy out, release); udp — kernel `recv` of the
//! same datagrams. "shm, udp polled too" is the shm receiver in an endpoint
//! that also polls an idle UDP method in every round: what one poll of all
//! methods costs a shared-memory receive.

use bcl::shm::{Mailbox, MailboxConfig, ShmMethod};
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, Method, ProcessAddr, ProgressMode};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// Longest wait for any step of a round before the measurement gives up.
const T: Duration = Duration::from_secs(10);

/// How long a UDP round waits after sending before the receiver is timed:
/// a datagram sent on loopback is in the receiver's buffer at once; the
/// pause makes sure.
pub const UDP_SETTLE: Duration = Duration::from_micros(200);

/// Largest batch for messages that do not fit an inbox slot: each takes a
/// chunk of the 16-chunk exchange queue, and the sender cannot run ahead of
/// a receiver that is not polling.
pub const MAX_LARGE_BATCH: usize = 16;

/// Messages from this size on travel through the exchange queue, not an
/// inbox slot (and are limited to [`MAX_LARGE_BATCH`] per batch).
pub const LARGE: usize = 232;

/// A failed measurement step.
pub type Result<T> = std::result::Result<T, String>;

/// The job key of these measurements, distinct per process so that runs on
/// one node never share shared-memory segments.
fn job() -> JobKey {
    JobKey(std::process::id() ^ 0x0b0b_0000)
}

/// The udp method on loopback, port chosen by the kernel.
pub fn udp_method() -> Result<Box<dyn Method>> {
    let addr = "127.0.0.1:0".parse().map_err(|e| format!("address: {e}"))?;
    UdpMethod::open(UdpConfig::new(addr))
        .map(|m| Box::new(m) as Box<dyn Method>)
        .map_err(|e| format!("udp method: {e}"))
}

/// The shm method of process `addr`.
pub fn shm_method(addr: ProcessAddr) -> Result<Box<dyn Method>> {
    ShmMethod::open(job(), addr)
        .map(|m| Box::new(m) as Box<dyn Method>)
        .map_err(|e| format!("shm method: {e}"))
}

/// A sending endpoint over `tx` and a receiving one over the methods `rx`,
/// both busy-polling; the sender knows the receiver by the descriptor of
/// its own method.
pub fn endpoint_pair(
    tx: Box<dyn Method>,
    rx: Vec<Box<dyn Method>>,
) -> Result<(Endpoint, Endpoint)> {
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = Endpoint::builder(a, job())
        .method(tx)
        .mode(ProgressMode::BusyPoll)
        .build()
        .map_err(|e| format!("sender: {e}"))?;
    let mut builder = Endpoint::builder(b, job()).mode(ProgressMode::BusyPoll);
    for m in rx {
        builder = builder.method(m);
    }
    let eb = builder.build().map_err(|e| format!("receiver: {e}"))?;
    let name = ea.methods().next().map(|m| m.name()).unwrap_or_default();
    let d = eb
        .descriptors()
        .into_iter()
        .find(|d| d.method == name)
        .ok_or("no common method")?;
    ea.add_peer(b, d);
    Ok((ea, eb))
}

/// Runs rounds of `batch` messages until `messages` are timed, after one
/// untimed round (links, rings and caches warm), and returns nanoseconds
/// per message of the median round. `round` puts a batch in the receiver's
/// hands, then times the receiver taking it.
fn timed_rounds(
    batch: usize,
    messages: usize,
    mut round: impl FnMut() -> Result<Duration>,
) -> Result<f64> {
    round()?;
    let rounds = (0..messages.div_ceil(batch))
        .map(|_| round())
        .collect::<Result<Vec<Duration>>>()?;
    Ok(per_message(rounds, batch))
}

/// Times `receive` (called until it returns true) from now.
fn time_until(mut receive: impl FnMut() -> Result<bool>, what: &str) -> Result<Duration> {
    let t0 = Instant::now();
    while !receive()? {
        if t0.elapsed() > T {
            return Err(format!("{what} is stuck"));
        }
    }
    Ok(t0.elapsed())
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(what.to_string())
    }
}

/// BCL's o_r from `ea` to `eb`: nanoseconds of receiver time per message of
/// `size` bytes, `batch` in the receiver's hands per round. `settle` is the
/// pause before the receiver is timed (zero: the sender's progress is
/// enough, as for shm; [`UDP_SETTLE`] for udp).
pub fn bcl_or(
    ea: &mut Endpoint,
    eb: &mut Endpoint,
    size: usize,
    batch: usize,
    messages: usize,
    settle: Duration,
) -> Result<f64> {
    let to = eb.local();
    let msg = vec![0x5a; size];
    let e = |what: &'static str| move |err: bcl::Error| format!("{what}: {err}");
    timed_rounds(batch, messages, || {
        for _ in 0..batch {
            ea.send(to, &msg).map_err(e("send"))?;
        }
        // Out of the sender's hands (shm: written into the inbox; udp:
        // handed to the kernel).
        let deadline = Instant::now() + T;
        while ea.port().has_transmit_work()
            || (ea.port().outstanding_sends() > 0 && settle.is_zero())
        {
            ea.progress().map_err(e("sender progress"))?;
            check(Instant::now() < deadline, "the sender is stuck")?;
        }
        std::thread::sleep(settle);
        let mut got = 0;
        let dt = time_until(
            || {
                eb.progress().map_err(e("receiver progress"))?;
                while let Some(d) = eb.poll_delivery() {
                    eb.release(d).map_err(e("release"))?;
                    got += 1;
                }
                Ok(got >= batch)
            },
            "the receiver",
        )?;
        // Let the sender's sends complete (acknowledgements over udp).
        let deadline = Instant::now() + T;
        while ea.port().outstanding_sends() > 0 {
            ea.progress().map_err(e("sender progress"))?;
            eb.progress().map_err(e("receiver progress"))?;
            while ea.poll_send_event().is_some() {}
            check(Instant::now() < deadline, "sends never completed")?;
        }
        while ea.poll_send_event().is_some() {}
        Ok(dt)
    })
}

/// The bare mechanism under BCL's shm method: a producer writes the batch,
/// the consumer is timed receiving, copying out and releasing. Messages
/// that fit an inbox slot go through the inbox, larger ones through the
/// exchange queue (as BCL's frames of that size do). Returns the o_r and
/// which of the two it was.
pub fn bare_shm_or(size: usize, batch: usize, messages: usize) -> Result<(f64, &'static str)> {
    let (a, b) = (ProcessAddr::new(3, 1), ProcessAddr::new(3, 2));
    let open = |addr| Mailbox::open(MailboxConfig::new(job(), addr)).map_err(|e| e.to_string());
    let mut tx = open(a)?;
    let mut rx = open(b)?;
    let peer = tx.connect(b).map_err(|e| e.to_string())?;
    let msg = vec![0x5a; size];
    let mut out = vec![0u8; size];
    let inline = size < rx.max_inline();
    let or = timed_rounds(batch, messages, || {
        let deadline = Instant::now() + T;
        for _ in 0..batch {
            loop {
                let sent = if inline {
                    tx.try_send(peer, &msg).is_ok()
                } else {
                    tx.push_message(peer, &msg).map_err(|e| e.to_string())?.done
                };
                if sent {
                    break;
                }
                check(Instant::now() < deadline, "the producer is stuck")?;
            }
        }
        let mut got = 0;
        time_until(
            || {
                if inline {
                    if let Some(m) = rx.recv() {
                        m.copy_to(&mut out);
                        m.release();
                        got += 1;
                    }
                } else if matches!(
                    rx.pull_into(a, &mut out),
                    Ok(bcl::shm::PullProgress::Done { .. })
                ) {
                    got += 1;
                }
                Ok(got >= batch)
            },
            "the consumer",
        )
    })?;
    Ok((or, if inline { "inbox" } else { "exchange q" }))
}

/// Kernel UDP: the batch is sent, lands in the socket buffer, and the
/// receiver's `recv` calls are timed.
pub fn kernel_udp_or(size: usize, batch: usize, messages: usize, settle: Duration) -> Result<f64> {
    let io = |what: &'static str| move |e: std::io::Error| format!("{what}: {e}");
    let rx = UdpSocket::bind("127.0.0.1:0").map_err(io("socket"))?;
    let tx = UdpSocket::bind("127.0.0.1:0").map_err(io("socket"))?;
    tx.connect(rx.local_addr().map_err(io("address"))?)
        .map_err(io("connect"))?;
    rx.set_nonblocking(true).map_err(io("nonblocking"))?;
    let msg = vec![0x5a; size];
    let mut buf = vec![0u8; 65_536];
    timed_rounds(batch, messages, || {
        for _ in 0..batch {
            tx.send(&msg).map_err(io("send"))?;
        }
        std::thread::sleep(settle);
        let mut got = 0;
        time_until(
            || {
                if rx.recv(&mut buf).is_ok() {
                    got += 1;
                }
                Ok(got >= batch)
            },
            "loopback UDP (datagrams lost?)",
        )
    })
}

/// Nanoseconds per message of the median round: the median, not the mean,
/// so that a round in which the thread was preempted does not count.
fn per_message(mut rounds: Vec<Duration>, batch: usize) -> f64 {
    rounds.sort_unstable();
    rounds[rounds.len() / 2].as_nanos() as f64 / batch as f64
}

/// The one-thread o_r figures of one size and batch, ns per message.
#[derive(Clone, Debug, PartialEq)]
pub struct OneThread {
    /// Message size in bytes.
    pub size: usize,
    /// Messages in the receiver's hands per timed round.
    pub batch: usize,
    /// BCL over shm, the receiver polling shm only.
    pub shm: f64,
    /// BCL over shm, the receiver polling an idle udp method too.
    pub shm_udp_polled: f64,
    /// BCL over udp on loopback.
    pub udp: f64,
    /// The bare shm mechanism (inbox or exchange queue).
    pub bare_shm: f64,
    /// Which bare mechanism: `inbox` or `exchange q`.
    pub bare_shm_name: &'static str,
    /// Kernel `recv` of the same datagrams.
    pub kernel_udp: f64,
}

/// Measures every one-thread o_r of `size` and `batch`: `messages` timed
/// per shm figure, a tenth of them (at least a batch) per UDP figure (UDP
/// rounds pause to settle).
pub fn measure(size: usize, batch: usize, messages: usize) -> Result<OneThread> {
    if size >= LARGE && batch > MAX_LARGE_BATCH {
        return Err(format!(
            "batches above {MAX_LARGE_BATCH} need sizes below {LARGE} bytes"
        ));
    }
    let n = messages.max(batch);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let (mut ea, mut eb) = endpoint_pair(shm_method(a)?, vec![shm_method(b)?])?;
    let shm = bcl_or(&mut ea, &mut eb, size, batch, n, Duration::ZERO)?;
    drop((ea, eb));
    let (mut ea, mut eb) = endpoint_pair(shm_method(a)?, vec![shm_method(b)?, udp_method()?])?;
    let shm_udp_polled = bcl_or(&mut ea, &mut eb, size, batch, n, Duration::ZERO)?;
    drop((ea, eb));
    let (bare_shm, bare_shm_name) = bare_shm_or(size, batch, n)?;
    let un = (n / 10).max(batch);
    let (mut ea, mut eb) = endpoint_pair(udp_method()?, vec![udp_method()?])?;
    let udp = bcl_or(&mut ea, &mut eb, size, batch, un, UDP_SETTLE)?;
    let kernel_udp = kernel_udp_or(size, batch, un, UDP_SETTLE)?;
    Ok(OneThread {
        size,
        batch,
        shm,
        shm_udp_polled,
        udp,
        bare_shm,
        bare_shm_name,
        kernel_udp,
    })
}
