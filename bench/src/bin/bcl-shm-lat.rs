//! `bcl-shm-lat`: BCL's shared-memory latency against the floor, measured
//! in the same two threads, interleaved.
//!
//! The host moves this VM's two vCPUs between near and far placements every
//! few hundred milliseconds (the floor moves between about 60 and 310 ns
//! one way: docs/PERFORMANCE.md, *How to read these numbers*), so two
//! separate runs are often not comparable. Here one client thread and one
//! echo thread, pinned to two CPUs, cycle through blocks of round trips
//! over four paths:
//! * the floor (`SpinLink`, two cache lines ping-ponged in shared memory);
//! * a line ring (`LineRing`: each message takes the next cache line of a
//!   ring, with no protocol and no prefetch: what a ring pays for fresh
//!   lines);
//! * the bare inbox (two mailboxes, `bcl_shm::Mailbox`, with `try_send`
//!   and `recv`: the ring the shm method sends small messages through,
//!   without the engine);
//! * BCL (two endpoints with the shm method, `Endpoint::send` and
//!   `Endpoint::poll_recv_with`).
//!
//! The line ring, inbox and BCL blocks of one group are compared with the
//! mean of the floor blocks just before and after the group; a group whose
//! two floor blocks differ by more than 10 % saw the placement move and is
//! left out. All paths are timed by the same code (two `Instant` readings
//! per round trip).
//!
//! Prints per group the median round trips and the ratios to the floor,
//! then the median ratios and one-way latencies over the kept groups. Line
//! ring to floor is what a ring costs on this placement; inbox to line ring
//! is the inbox's protocol; BCL to inbox is the engine.

use bcl::shm::{Mailbox, MailboxConfig, PeerId, ShmError, ShmMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};
use bcl_bench::floors::{LineRing, SpinLink, SPIN_MAX_MESSAGE};
use clap::Parser;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "bcl-shm-lat", version, about)]
struct Cli {
    /// Block groups (a line-ring, an inbox and a BCL block between two floor
    /// blocks).
    #[arg(long, default_value_t = 40)]
    pairs: usize,
    /// Round trips per block.
    #[arg(long, default_value_t = 5000)]
    block: usize,
    /// Message size in bytes (1 to 40).
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// CPUs of the echo thread and of the client thread.
    #[arg(long, default_value = "1,0")]
    pin: String,
}

/// Which path a block uses; the last message of a block tells the echo
/// thread to switch (first byte 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Floor,
    LineRing,
    Inbox,
    Bcl,
}

impl Path {
    /// The cycle: floor, line ring, inbox, BCL, floor, ...
    fn next(self) -> Path {
        match self {
            Path::Floor => Path::LineRing,
            Path::LineRing => Path::Inbox,
            Path::Inbox => Path::Bcl,
            Path::Bcl => Path::Floor,
        }
    }
}

const SWITCH: u8 = 1;
const TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-shm-lat: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn pin_cpus(text: &str) -> Result<(usize, usize), String> {
    let (a, b) = text
        .split_once(',')
        .ok_or_else(|| format!("--pin {text:?}: expected ECHO,CLIENT (e.g. 1,0)"))?;
    let cpu = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("--pin {text:?}: {s:?} is not a CPU number"))
    };
    Ok((cpu(a)?, cpu(b)?))
}

fn pin(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

fn endpoint(job: JobKey, addr: ProcessAddr) -> Result<Endpoint, String> {
    let m = ShmMethod::open(job, addr).map_err(|e| e.to_string())?;
    Endpoint::builder(addr, job)
        .method(Box::new(m))
        .mode(ProgressMode::BusyPoll)
        .build()
        .map_err(|e| e.to_string())
}

/// The descriptor an shm endpoint of `addr` on this node publishes.
fn shm_descriptor(addr: ProcessAddr) -> bcl::Descriptor {
    bcl::Descriptor::new("shm", format!("{addr}@{}", bcl::shm::node_identity()))
}

fn run(cli: &Cli) -> Result<(), String> {
    if cli.size == 0 || cli.size > SPIN_MAX_MESSAGE {
        return Err(format!("--size must be 1 to {SPIN_MAX_MESSAGE} bytes"));
    }
    if cli.pairs == 0 || cli.block < 100 {
        return Err("--pairs must be at least 1 and --block at least 100".into());
    }
    let (echo_cpu, client_cpu) = pin_cpus(&cli.pin)?;
    let job = JobKey(std::process::id() << 8 ^ 0x4c);
    let (client_addr, echo_addr) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let (client_inbox_addr, echo_inbox_addr) = (ProcessAddr::new(1, 3), ProcessAddr::new(1, 4));
    let path = std::env::temp_dir().join(format!("bcl-shm-lat-{}", std::process::id()));
    let echo_link = SpinLink::create(&path).map_err(|e| e.to_string())?;
    let lines_path = std::env::temp_dir().join(format!("bcl-shm-lat-lines-{}", std::process::id()));
    let echo_lines = LineRing::create(&lines_path).map_err(|e| e.to_string())?;
    // Each side builds its endpoint and mailbox in its own thread, so
    // that their heap memory comes from different allocator arenas and
    // shares no cache line (as two processes' would not).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || -> Result<(), String> {
        pin(echo_cpu)?;
        let mut ep = endpoint(job, echo_addr)?;
        ep.add_peer(client_addr, shm_descriptor(client_addr));
        let mut mailbox = bare_mailbox(job, echo_inbox_addr)?;
        let _ = ready_tx.send(());
        let to_client = connect_mailbox(&mut mailbox, client_inbox_addr)?;
        echo_loop(Paths {
            link: echo_link,
            lines: echo_lines,
            mailbox,
            mailbox_peer: to_client,
            ep,
            ep_peer: client_addr,
        })
    });
    pin(client_cpu)?;
    let mut client_ep = endpoint(job, client_addr)?;
    client_ep.add_peer(echo_addr, shm_descriptor(echo_addr));
    let mut client_mailbox = bare_mailbox(job, client_inbox_addr)?;
    let client_link = SpinLink::open(&path).map_err(|e| e.to_string())?;
    let client_lines = LineRing::open(&lines_path).map_err(|e| e.to_string())?;
    ready_rx
        .recv_timeout(TIMEOUT)
        .map_err(|_| "the echo thread did not start".to_string())?;
    let to_echo = connect_mailbox(&mut client_mailbox, echo_inbox_addr)?;
    let mut client = Paths {
        link: client_link,
        lines: client_lines,
        mailbox: client_mailbox,
        mailbox_peer: to_echo,
        ep: client_ep,
        ep_peer: echo_addr,
    };
    let mut msg = vec![0u8; cli.size];
    // Blocks 0 to 3 warm the four paths up (not recorded); then floor,
    // line ring, inbox, BCL, floor, ..., floor: pairs + 1 floor blocks
    // around pairs groups.
    let mut floors = Vec::new();
    let mut line_rings = Vec::new();
    let mut inboxes = Vec::new();
    let mut bcls = Vec::new();
    let last_block = 4 * cli.pairs + 4;
    let mut current = Path::Floor;
    for k in 0..=last_block {
        let mut rtts = Vec::with_capacity(cli.block);
        for i in 0..cli.block {
            let last = i + 1 == cli.block;
            msg[0] = if last { SWITCH } else { 0 };
            let t0 = Instant::now();
            client.roundtrip(current, &msg)?;
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
        rtts.sort_unstable();
        let median = rtts[rtts.len() / 2];
        if k >= 4 {
            match current {
                Path::Floor => floors.push(median),
                Path::LineRing => line_rings.push(median),
                Path::Inbox => inboxes.push(median),
                Path::Bcl => bcls.push(median),
            }
        }
        current = current.next();
        if k == last_block {
            break;
        }
    }
    // Stop the echo thread: a zero-length message on the path it switched
    // to after the last block.
    client.send(current, &[])?;
    echo.join()
        .map_err(|_| "the echo thread panicked".to_string())??;
    report(cli, &floors, &line_rings, &inboxes, &bcls);
    Ok(())
}

/// A mailbox for the bare-inbox path.
fn bare_mailbox(job: JobKey, addr: ProcessAddr) -> Result<Mailbox, String> {
    Mailbox::open(MailboxConfig::new(job, addr)).map_err(|e| format!("mailbox {addr}: {e}"))
}

/// Connects to the peer's mailbox, waiting for it to exist.
fn connect_mailbox(mailbox: &mut Mailbox, to: ProcessAddr) -> Result<PeerId, String> {
    let start = Instant::now();
    loop {
        match mailbox.connect(to) {
            Ok(id) => return Ok(id),
            Err(ShmError::NoSuchPeer { .. } | ShmError::NotReady { .. })
                if start.elapsed() < TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(format!("connecting the mailbox to {to}: {e}")),
        }
    }
}

/// One thread's ends of the four paths.
struct Paths {
    link: SpinLink,
    lines: LineRing,
    mailbox: Mailbox,
    mailbox_peer: PeerId,
    ep: Endpoint,
    ep_peer: ProcessAddr,
}

impl Paths {
    /// Sends `msg` on `path`.
    fn send(&mut self, path: Path, msg: &[u8]) -> Result<(), String> {
        match path {
            Path::Floor => while !self.link.try_send(msg).map_err(|e| e.to_string())? {},
            Path::LineRing => while !self.lines.try_send(msg).map_err(|e| e.to_string())? {},
            Path::Inbox => loop {
                match self.mailbox.try_send(self.mailbox_peer, msg) {
                    Ok(()) => break,
                    Err(bcl::shm::SendError::Full) => {}
                    Err(e) => return Err(format!("inbox send: {e}")),
                }
            },
            Path::Bcl => {
                self.ep.send(self.ep_peer, msg).map_err(|e| e.to_string())?;
                self.ep.transmit().map_err(|e| e.to_string())?;
                while self.ep.poll_send_event().is_some() {}
            }
        }
        Ok(())
    }

    /// Polls `path` once; a message is copied into `buf` and its length
    /// returned.
    fn poll(
        &mut self,
        path: Path,
        buf: &mut [u8; SPIN_MAX_MESSAGE],
    ) -> Result<Option<usize>, String> {
        Ok(match path {
            Path::Floor => self.link.try_recv(buf),
            Path::LineRing => self.lines.try_recv(buf),
            Path::Inbox => self.mailbox.recv().map(|m| {
                let n = m.copy_to(buf);
                m.release();
                n
            }),
            Path::Bcl => self
                .ep
                .poll_recv_with(|_, bytes| {
                    let n = bytes.len().min(SPIN_MAX_MESSAGE);
                    buf[..n].copy_from_slice(&bytes[..n]);
                    n
                })
                .map_err(|e| e.to_string())?,
        })
    }

    /// One round trip of `msg` on `path` (client side).
    fn roundtrip(&mut self, path: Path, msg: &[u8]) -> Result<(), String> {
        self.send(path, msg)?;
        let mut buf = [0u8; SPIN_MAX_MESSAGE];
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            if self.poll(path, &mut buf)?.is_some() {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(1 << 16) && start.elapsed() > TIMEOUT {
                return Err(format!("no echo on the {path:?} path"));
            }
        }
    }
}

/// Echoes on the current path; a message whose first byte is SWITCH is
/// echoed and then the path changes; an empty message ends the loop.
fn echo_loop(mut ends: Paths) -> Result<(), String> {
    let mut current = Path::Floor;
    let mut buf = [0u8; SPIN_MAX_MESSAGE];
    loop {
        let n = loop {
            if let Some(n) = ends.poll(current, &mut buf)? {
                break n;
            }
        };
        if n == 0 {
            return Ok(());
        }
        ends.send(current, &buf[..n])?;
        if buf[0] == SWITCH {
            current = current.next();
        }
    }
}

fn report(cli: &Cli, floors: &[u64], line_rings: &[u64], inboxes: &[u64], bcls: &[u64]) {
    println!(
        "# bcl-shm-lat: {} B, {} groups of {} round trips; floor = SpinLink, line ring = LineRing (a fresh line per message, no protocol), inbox = bare shm inbox (Mailbox), BCL = shm endpoints (send + poll_recv_with); medians, ns",
        cli.size, cli.pairs, cli.block
    );
    println!(
        "#  group  floor RTT (before/after)   line ring  /floor   inbox  /floor     BCL  /floor"
    );
    // (floor mean, line ring, inbox, BCL) of the kept groups.
    let mut kept = Vec::new();
    for i in 0..bcls.len() {
        let (f0, f1) = (floors[i], floors[i + 1]);
        let mean = (f0 + f1) as f64 / 2.0;
        let stable = (f0 as f64 - f1 as f64).abs() / mean <= 0.10;
        let (l, r, b) = (line_rings[i] as f64, inboxes[i] as f64, bcls[i] as f64);
        println!(
            "{:>8}  {:>8} / {:<8}  {:>10.0} {:>6.2}  {:>7.0} {:>6.2}  {:>7.0} {:>6.2}{}",
            i + 1,
            f0,
            f1,
            l,
            l / mean,
            r,
            r / mean,
            b,
            b / mean,
            if stable {
                ""
            } else {
                "   (placement moved: left out)"
            }
        );
        if stable {
            kept.push([mean, l, r, b]);
        }
    }
    if kept.is_empty() {
        println!("no group with a stable floor: run again (or with a smaller --block)");
        return;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = |col: usize| median(kept.iter().map(|k| k[col] / k[0]).collect());
    let one_way = |col: usize| median(kept.iter().map(|k| k[col]).collect()) / 2.0;
    let bcl_ratios: Vec<f64> = kept.iter().map(|k| k[3] / k[0]).collect();
    let (lo, hi) = bcl_ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    println!(
        "kept {} of {} pairs; BCL/floor median {:.2} (range {:.2}-{:.2}); one-way median: floor {:.0} ns, BCL {:.0} ns; line ring {:.0} ns ({:.2} x floor), bare inbox {:.0} ns ({:.2} x floor)",
        kept.len(),
        bcls.len(),
        ratio(3),
        lo,
        hi,
        one_way(0),
        one_way(3),
        one_way(1),
        ratio(1),
        one_way(2),
        ratio(2)
    );
}
