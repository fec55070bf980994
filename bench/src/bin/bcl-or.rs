//! `bcl-or`: the receive overhead o_r (LogGP's receiver CPU time per
//! message) of BCL over shared memory and over UDP, next to the bare
//! mechanism underneath each, measured in one thread so that no scheduling
//! between processes enters the figure.
//!
//! For each size a sender puts a batch of messages in flight and waits until
//! they are in the receiver's hands (shared memory: in its inbox; UDP: in its
//! socket buffer). Only then is the receiver timed: its progress engine,
//! delivery and release, until the whole batch is taken. o_r = that time /
//! batch, from the median round (a round in which the thread was preempted
//! does not count). Baselines, timed the same way: shm - the bare inbox
//! (`Mailbox` receive, copy out, release); udp - kernel `recv` of the same datagrams.
//! "shm, udp polled too" is the shm receiver in an endpoint that also polls
//! an idle UDP method in every round: the cost of one poll for all methods.

use bcl::shm::{Mailbox, MailboxConfig, ShmMethod};
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, Method, ProcessAddr, ProgressMode};
use clap::Parser;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// Measure the receive overhead o_r of BCL (shm, udp) against the bare inbox
/// and kernel UDP receives.
#[derive(Parser, Debug)]
#[command(name = "bcl-or", version)]
struct Cli {
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,1024")]
    sizes: Vec<usize>,
    /// Messages in flight per timed batch (1 = a message per progress
    /// round). At most 16 for messages larger than an inbox slot (232 bytes):
    /// each takes a chunk of the 16-chunk exchange queue, and the sender
    /// cannot run ahead of a receiver that is not polling.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    batches: Vec<usize>,
    /// Messages timed per size and batch.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
}

const T: Duration = Duration::from_secs(10);

fn job() -> JobKey {
    JobKey(std::process::id() ^ 0x0b0b_0000)
}

fn udp() -> Box<dyn Method> {
    Box::new(
        UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().expect("address")))
            .expect("udp method"),
    )
}

fn shm(addr: ProcessAddr) -> Box<dyn Method> {
    Box::new(ShmMethod::open(job(), addr).expect("shm method"))
}

/// A sending and a receiving endpoint, busy-polling.
fn pair(tx: Box<dyn Method>, rx: Vec<Box<dyn Method>>) -> (Endpoint, Endpoint) {
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = Endpoint::builder(a, job())
        .method(tx)
        .mode(ProgressMode::BusyPoll)
        .build()
        .expect("sender");
    let mut builder = Endpoint::builder(b, job()).mode(ProgressMode::BusyPoll);
    for m in rx {
        builder = builder.method(m);
    }
    let eb = builder.build().expect("receiver");
    let name = ea.methods().next().map(|m| m.name()).unwrap_or_default();
    let d = eb
        .descriptors()
        .into_iter()
        .find(|d| d.method == name)
        .expect("a common method");
    ea.add_peer(b, d);
    (ea, eb)
}

/// Runs rounds of `batch` messages until `messages` are timed, after one
/// untimed round (links, rings and caches warm), and returns nanoseconds per
/// message of the median round. `round` puts a batch in the receiver's
/// hands, then times the receiver taking it.
fn timed_rounds(batch: usize, messages: usize, mut round: impl FnMut() -> Duration) -> f64 {
    round();
    let rounds: Vec<Duration> = (0..messages.div_ceil(batch)).map(|_| round()).collect();
    per_message(rounds, batch)
}

/// Times `receive` (called until it returns true) from now.
fn time_until(mut receive: impl FnMut() -> bool, what: &str) -> Duration {
    let t0 = Instant::now();
    while !receive() {
        assert!(t0.elapsed() < T, "{what} is stuck");
    }
    t0.elapsed()
}

/// Nanoseconds of receiver time per message.
fn bcl_or(
    ea: &mut Endpoint,
    eb: &mut Endpoint,
    size: usize,
    batch: usize,
    messages: usize,
    settle: Duration,
) -> f64 {
    let to = eb.local();
    let msg = vec![0x5a; size];
    timed_rounds(batch, messages, || {
        for _ in 0..batch {
            ea.send(to, &msg).expect("send");
        }
        // Out of the sender's hands (shm: written into the inbox; udp: handed
        // to the kernel).
        let deadline = Instant::now() + T;
        while ea.port().has_transmit_work()
            || (ea.port().outstanding_sends() > 0 && settle.is_zero())
        {
            ea.progress().expect("sender progress");
            assert!(Instant::now() < deadline, "the sender is stuck");
        }
        std::thread::sleep(settle);
        let mut got = 0;
        let dt = time_until(
            || {
                eb.progress().expect("receiver progress");
                while let Some(d) = eb.poll_delivery() {
                    eb.release(d).expect("release");
                    got += 1;
                }
                got >= batch
            },
            "the receiver",
        );
        // Let the sender's sends complete (acknowledgements over udp).
        let deadline = Instant::now() + T;
        while ea.port().outstanding_sends() > 0 {
            ea.progress().expect("sender progress");
            eb.progress().expect("receiver progress");
            while ea.poll_send_event().is_some() {}
            assert!(Instant::now() < deadline, "sends never completed");
        }
        while ea.poll_send_event().is_some() {}
        dt
    })
}

/// The bare mechanism under BCL's shm method: a producer writes the batch,
/// the consumer is timed receiving, copying out and releasing. Messages
/// that fit an inbox slot go through the inbox, larger ones through the
/// exchange queue (as BCL's frames of that size do).
fn bare_shm_or(size: usize, batch: usize, messages: usize) -> (f64, &'static str) {
    let (a, b) = (ProcessAddr::new(3, 1), ProcessAddr::new(3, 2));
    let mut tx = Mailbox::open(MailboxConfig::new(job(), a)).expect("mailbox");
    let mut rx = Mailbox::open(MailboxConfig::new(job(), b)).expect("mailbox");
    let peer = tx.connect(b).expect("connect");
    let msg = vec![0x5a; size];
    let mut out = vec![0u8; size];
    let inline = size < rx.max_inline();
    let or = timed_rounds(batch, messages, || {
        let deadline = Instant::now() + T;
        for _ in 0..batch {
            while !(if inline {
                tx.try_send(peer, &msg).is_ok()
            } else {
                tx.push_message(peer, &msg).expect("push").done
            }) {
                assert!(Instant::now() < deadline, "the producer is stuck");
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
                got >= batch
            },
            "the consumer",
        )
    });
    (or, if inline { "inbox" } else { "exchange q" })
}

/// Kernel UDP: the batch is sent, lands in the socket buffer, and the
/// receiver's `recv` calls are timed.
fn kernel_udp_or(size: usize, batch: usize, messages: usize, settle: Duration) -> f64 {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let tx = UdpSocket::bind("127.0.0.1:0").expect("socket");
    tx.connect(rx.local_addr().expect("address"))
        .expect("connect");
    rx.set_nonblocking(true).expect("nonblocking");
    let msg = vec![0x5a; size];
    let mut buf = vec![0u8; 65_536];
    timed_rounds(batch, messages, || {
        for _ in 0..batch {
            tx.send(&msg).expect("send");
        }
        std::thread::sleep(settle);
        let mut got = 0;
        time_until(
            || {
                if rx.recv(&mut buf).is_ok() {
                    got += 1;
                }
                got >= batch
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

fn main() {
    let cli = Cli::parse();
    if cli.sizes.iter().any(|&s| s >= 232) && cli.batches.iter().any(|&b| b > 16) {
        eprintln!("bcl-or: --batches above 16 need --sizes below 232 (see --help)");
        std::process::exit(2);
    }
    // A UDP datagram sent on loopback is in the receiver's buffer at once;
    // a short pause makes sure before the receiver is timed.
    let settle = Duration::from_micros(200);
    println!("# bcl-or: receive overhead o_r, ns per message (one thread; receiver timed with the messages already there)");
    println!(
        "{:>8} {:>6}  {:>26} {:>10} {:>12} {:>7}",
        "size", "batch", "BCL method", "BCL o_r", "baseline", "ratio"
    );
    for &size in &cli.sizes {
        for &batch in &cli.batches {
            let n = cli.messages.max(batch);
            let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
            let (mut ea, mut eb) = pair(shm(a), vec![shm(b)]);
            let shm_alone = bcl_or(&mut ea, &mut eb, size, batch, n, Duration::ZERO);
            drop((ea, eb));
            let (mut ea, mut eb) = pair(shm(a), vec![shm(b), udp()]);
            let shm_with_udp = bcl_or(&mut ea, &mut eb, size, batch, n, Duration::ZERO);
            drop((ea, eb));
            let (bare, bare_name) = bare_shm_or(size, batch, n);
            // UDP rounds sleep to settle: fewer of them.
            let un = (n / 10).max(batch);
            let (mut ea, mut eb) = pair(udp(), vec![udp()]);
            let bcl_udp = bcl_or(&mut ea, &mut eb, size, batch, un, settle);
            let kernel = kernel_udp_or(size, batch, un, settle);
            for (name, ours, base, base_name) in [
                ("shm", shm_alone, bare, bare_name),
                ("shm, udp polled too", shm_with_udp, bare, bare_name),
                ("udp", bcl_udp, kernel, "kernel recv"),
            ] {
                println!(
                    "{size:>8} {batch:>6}  {name:>26} {ours:>10.0} {base:>8.0} ({base_name}) {:>6.2}x",
                    ours / base
                );
            }
        }
    }
}
