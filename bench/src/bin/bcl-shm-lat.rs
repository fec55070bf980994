//! `bcl-shm-lat`: BCL's shared-memory latency against the floor, measured
//! in the same two threads, interleaved.
//!
//! The host moves this VM's two vCPUs between near and far placements every
//! few hundred milliseconds (the floor jumps between ~0.13 and ~0.3 µs one
//! way), so two separate runs are often not comparable. Here one client
//! thread and one echo thread, pinned to two CPUs, alternate blocks of round
//! trips: a block over the floor (`SpinLink`, two cache lines ping-ponged in
//! shared memory), then a block over BCL (two endpoints with the shm method,
//! `Endpoint::send` and `Endpoint::poll_recv_with`), and so on. Each BCL
//! block is compared with the mean of the floor blocks just before and
//! after it; a pair whose two floor blocks differ by more than 10 % saw the
//! placement move and is left out. Both paths are timed by the same code
//! (two `Instant` readings per round trip).
//!
//! Prints per pair the floor and BCL median round trips and their ratio,
//! then the median ratio and one-way latencies over the kept pairs.

use bcl::shm::{ShmMethod, SpinLink, SPIN_MAX_MESSAGE};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};
use clap::Parser;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "bcl-shm-lat", version, about)]
struct Cli {
    /// Floor/BCL block pairs.
    #[arg(long, default_value_t = 40)]
    pairs: usize,
    /// Round trips per block.
    #[arg(long, default_value_t = 5000)]
    block: usize,
    /// Message size in bytes (1 to 48).
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// CPUs of the echo thread and of the client thread.
    #[arg(long, default_value = "1,0")]
    pin: String,
}

/// Which path a block uses; the last message of a block tells the echo
/// thread to switch (first byte 1).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Floor,
    Bcl,
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
    let path = std::env::temp_dir().join(format!("bcl-shm-lat-{}", std::process::id()));
    let echo_link = SpinLink::create(&path).map_err(|e| e.to_string())?;
    // Each side builds its endpoint in its own thread, so that the two
    // endpoints' heap memory comes from different allocator arenas and
    // shares no cache line (as two processes' would not).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || -> Result<(), String> {
        pin(echo_cpu)?;
        let mut ep = endpoint(job, echo_addr)?;
        ep.add_peer(client_addr, shm_descriptor(client_addr));
        let _ = ready_tx.send(());
        echo_loop(echo_link, ep, client_addr)
    });
    pin(client_cpu)?;
    let mut client_ep = endpoint(job, client_addr)?;
    client_ep.add_peer(echo_addr, shm_descriptor(echo_addr));
    let mut client_link = SpinLink::open(&path).map_err(|e| e.to_string())?;
    ready_rx
        .recv_timeout(TIMEOUT)
        .map_err(|_| "the echo thread did not start".to_string())?;
    let mut msg = vec![0u8; cli.size];
    // Blocks 0 and 1 warm both paths up (not recorded); then floor, BCL,
    // floor, ..., floor: pairs + 1 floor blocks around pairs BCL blocks.
    let mut floors = Vec::new();
    let mut bcls = Vec::new();
    let last_block = 2 * cli.pairs + 2;
    let mut current = Path::Floor;
    for k in 0..=last_block {
        let mut rtts = Vec::with_capacity(cli.block);
        for i in 0..cli.block {
            let last = i + 1 == cli.block;
            msg[0] = if last { SWITCH } else { 0 };
            let t0 = Instant::now();
            match current {
                Path::Floor => spin_roundtrip(&mut client_link, &msg)?,
                Path::Bcl => bcl_roundtrip(&mut client_ep, echo_addr, &msg)?,
            }
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
        rtts.sort_unstable();
        let median = rtts[rtts.len() / 2];
        if k >= 2 {
            match current {
                Path::Floor => floors.push(median),
                Path::Bcl => bcls.push(median),
            }
        }
        current = match current {
            Path::Floor => Path::Bcl,
            Path::Bcl => Path::Floor,
        };
        if k == last_block {
            break;
        }
    }
    // Stop the echo thread: a zero-length message on its current path.
    let stop: &[u8] = &[];
    match current {
        Path::Floor => while !client_link.try_send(stop).map_err(|e| e.to_string())? {},
        Path::Bcl => {
            client_ep.send(echo_addr, stop).map_err(|e| e.to_string())?;
        }
    }
    echo.join()
        .map_err(|_| "the echo thread panicked".to_string())??;
    report(cli, &floors, &bcls);
    Ok(())
}

fn spin_roundtrip(link: &mut SpinLink, msg: &[u8]) -> Result<(), String> {
    while !link.try_send(msg).map_err(|e| e.to_string())? {}
    let mut buf = [0u8; SPIN_MAX_MESSAGE];
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if link.try_recv(&mut buf).is_some() {
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1 << 16) && start.elapsed() > TIMEOUT {
            return Err("no echo over the spin link".into());
        }
    }
}

fn bcl_roundtrip(ep: &mut Endpoint, to: ProcessAddr, msg: &[u8]) -> Result<(), String> {
    ep.send(to, msg).map_err(|e| e.to_string())?;
    ep.transmit().map_err(|e| e.to_string())?;
    while ep.poll_send_event().is_some() {}
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if ep
            .poll_recv_with(|_, _| ())
            .map_err(|e| e.to_string())?
            .is_some()
        {
            return Ok(());
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(1 << 16) && start.elapsed() > TIMEOUT {
            return Err("no echo over BCL".into());
        }
    }
}

/// Echoes on the current path; a message whose first byte is SWITCH is
/// echoed and then the path changes; an empty message ends the loop.
fn echo_loop(mut link: SpinLink, mut ep: Endpoint, client: ProcessAddr) -> Result<(), String> {
    let mut current = Path::Floor;
    let mut buf = [0u8; SPIN_MAX_MESSAGE];
    let mut msg = Vec::with_capacity(SPIN_MAX_MESSAGE);
    loop {
        match current {
            Path::Floor => {
                let n = loop {
                    if let Some(n) = link.try_recv(&mut buf) {
                        break n;
                    }
                };
                if n == 0 {
                    return Ok(());
                }
                while !link.try_send(&buf[..n]).map_err(|e| e.to_string())? {}
                if buf[0] == SWITCH {
                    current = Path::Bcl;
                }
            }
            Path::Bcl => {
                msg.clear();
                loop {
                    let got = ep
                        .poll_recv_with(|_, bytes| msg.extend_from_slice(bytes))
                        .map_err(|e| e.to_string())?;
                    if got.is_some() {
                        break;
                    }
                }
                if msg.is_empty() {
                    return Ok(());
                }
                ep.send(client, &msg).map_err(|e| e.to_string())?;
                ep.transmit().map_err(|e| e.to_string())?;
                while ep.poll_send_event().is_some() {}
                if msg[0] == SWITCH {
                    current = Path::Floor;
                }
            }
        }
    }
}

fn report(cli: &Cli, floors: &[u64], bcls: &[u64]) {
    println!(
        "# bcl-shm-lat: {} B, {} pairs of {} round trips, floor = SpinLink, BCL = shm endpoints (send + poll_recv_with); medians, ns",
        cli.size, cli.pairs, cli.block
    );
    println!("#  pair  floor RTT (before/after)   BCL RTT   BCL/floor");
    let mut ratios = Vec::new();
    let mut kept_floor = Vec::new();
    let mut kept_bcl = Vec::new();
    for (i, &b) in bcls.iter().enumerate() {
        let (f0, f1) = (floors[i], floors[i + 1]);
        let mean = (f0 + f1) as f64 / 2.0;
        let stable = (f0 as f64 - f1 as f64).abs() / mean <= 0.10;
        let ratio = b as f64 / mean;
        println!(
            "{:>7}  {:>8} / {:<8}  {:>8}   {:>6.2}{}",
            i + 1,
            f0,
            f1,
            b,
            ratio,
            if stable {
                ""
            } else {
                "   (placement moved: left out)"
            }
        );
        if stable {
            ratios.push(ratio);
            kept_floor.push(mean);
            kept_bcl.push(b as f64);
        }
    }
    if ratios.is_empty() {
        println!("no pair with a stable floor: run again (or with a smaller --block)");
        return;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (lo, hi) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[0], r[r.len() - 1])
    };
    let r = median(&mut ratios);
    let f = median(&mut kept_floor);
    let b = median(&mut kept_bcl);
    println!(
        "kept {} of {} pairs; BCL/floor median {:.2} (range {:.2}-{:.2}); one-way median: floor {:.0} ns, BCL {:.0} ns",
        kept_bcl.len(),
        bcls.len(),
        r,
        lo,
        hi,
        f / 2.0,
        b / 2.0
    );
}
