//! AF_XDP measurements between two network namespaces, next to the kernel
//! baselines from the same run (root):
//!
//! * 64 B round trips, busy polling, echo pinned to CPU 1 and ping to
//!   CPU 0: kernel UDP, bare AF_XDP frames (`RawXsk`), BCL over AF_XDP;
//! * 8 B message rate of BCL over AF_XDP (one sending core);
//! * 64 KiB message bandwidth of BCL over AF_XDP against kernel TCP, with a
//!   larger veth MTU.
//!
//! ```sh
//! cargo run --release -p bcl-bench --bin bcl-xdp-pingpong -- [--iters 20000] [--rounds 3] [--skip-bw]
//! ```
//!
//! The lab (`configs/lab/pair.toml`) is brought up under its own prefix and
//! taken down at the end. Latency runs are interleaved over `--rounds`
//! rounds and summarised by their medians; the ratios are printed last,
//! each with its target in brackets. `--only udp|raw|bcl|rate|rawrate|bw|tcp`
//! runs one measurement (for `perf record`); `--generic`/`--native` force
//! the XDP mode; `XPP_RTO_MIN_MS=N` raises the protocol's minimum
//! retransmission timeout; `XPP_DEBUG=1` prints AF_XDP drop counters.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bcl::afxdp::{AfXdpConfig, AfXdpMethod, AttachMode, RawXsk};
use bcl::ether::Mac;
use bcl::{Endpoint, JobKey, ProcessAddr, SendEvent};
use bcl_core::Descriptor;
use bcl_lab::{Lab, LabGuard};
use hdrhistogram::Histogram;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Opts {
    iters: u64,
    warmup: u64,
    mode: Option<AttachMode>,
    busy_poll: bool,
    skip_bw: bool,
    bw_mtu: u32,
    secs: f64,
    only: Option<String>,
    rounds: usize,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        iters: 20_000,
        warmup: 2_000,
        mode: None,
        busy_poll: false,
        skip_bw: false,
        bw_mtu: 3500,
        secs: 2.0,
        only: None,
        rounds: 3,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--iters" => o.iters = val().parse().expect("--iters N"),
            "--warmup" => o.warmup = val().parse().expect("--warmup N"),
            "--generic" => o.mode = Some(AttachMode::Generic),
            "--native" => o.mode = Some(AttachMode::Native),
            "--busy-poll" => o.busy_poll = true,
            "--skip-bw" => o.skip_bw = true,
            "--bw-mtu" => o.bw_mtu = val().parse().expect("--bw-mtu N"),
            "--secs" => o.secs = val().parse().expect("--secs S"),
            "--only" => o.only = Some(val()),
            "--rounds" => o.rounds = val().parse::<usize>().expect("--rounds N").max(1),
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

/// Pins the calling thread to `cpu`; a CPU that cannot be used leaves the
/// thread where it is.
fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn in_node<T: Send + 'static>(
    lab: &Lab,
    node: &str,
    cpu: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    lab.spawn_in(node, move || {
        pin(cpu);
        f()
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

struct Lat {
    p50: f64,
    p99: f64,
    min: f64,
    max: f64,
    n: u64,
}

fn lat(h: &Histogram<u64>) -> Lat {
    let us = |v: u64| v as f64 / 1000.0;
    Lat {
        p50: us(h.value_at_quantile(0.5)),
        p99: us(h.value_at_quantile(0.99)),
        min: us(h.min()),
        max: us(h.max()),
        n: h.len(),
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("histogram")
}

fn mac_of(lab: &Lab, node: &str) -> ([u8; 6], String, Ipv4Addr) {
    let i = lab.interfaces(node).expect("interfaces").remove(0);
    (
        i.mac.parse::<Mac>().expect("mac").octets(),
        i.ifname,
        i.ipv4.expect("ipv4").addr,
    )
}

// ---------------------------------------------------------------- UDP

fn udp_pingpong(lab: &Lab, o: &Opts) -> Res<Lat> {
    let (_, _, ip_b) = mac_of(lab, "b");
    let (_, _, ip_a) = mac_of(lab, "a");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let echo = in_node(lab, "b", 1, move || -> Res<()> {
        let s = UdpSocket::bind((ip_b, 9000))?;
        s.set_nonblocking(true)?;
        ready_tx.send(())?;
        let mut buf = [0u8; 2048];
        while !s2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], from)?;
            }
        }
        Ok(())
    });
    ready_rx.recv()?;
    let (iters, warmup) = (o.iters, o.warmup);
    let ping = in_node(lab, "a", 0, move || -> Res<Histogram<u64>> {
        let s = UdpSocket::bind((ip_a, 0))?;
        s.connect((ip_b, 9000))?;
        s.set_nonblocking(true)?;
        // 22 bytes of payload: a 64-byte Ethernet frame.
        let msg = [7u8; 22];
        let mut buf = [0u8; 2048];
        let mut h = hist();
        for i in 0..warmup + iters {
            let t = Instant::now();
            s.send(&msg)?;
            let mut spins = 0u32;
            loop {
                match s.recv(&mut buf) {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && t.elapsed() > Duration::from_secs(1) {
                    return Err("UDP reply lost".into());
                }
            }
            if i >= warmup {
                h.record(t.elapsed().as_nanos() as u64)?;
            }
        }
        Ok(h)
    });
    let h = ping.join().expect("ping thread")?;
    stop.store(true, Ordering::Relaxed);
    echo.join().expect("echo thread")?;
    Ok(lat(&h))
}

// ---------------------------------------------------------------- raw AF_XDP

fn xdp_config(ifname: &str, o: &Opts) -> AfXdpConfig {
    let mut c = AfXdpConfig::new(ifname);
    c.force_attach = o.mode;
    c.busy_poll = o.busy_poll;
    c
}

fn raw_pingpong(lab: &Lab, o: &Opts, frame_len: usize) -> Res<(Lat, String)> {
    let (mac_a, if_a, _) = mac_of(lab, "a");
    let (mac_b, if_b, _) = mac_of(lab, "b");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let cb = xdp_config(&if_b, o);
    let echo = in_node(lab, "b", 1, move || -> Res<()> {
        let mut x = RawXsk::open(&cb)?;
        ready_tx.send(x.mode_report().to_string())?;
        let mut pending: Option<(usize, [u8; 2048])> = None;
        while !s2.load(Ordering::Relaxed) {
            x.recv(1, &mut |_, f| {
                let mut b = [0u8; 2048];
                let n = f.len().min(2048);
                b[..n].copy_from_slice(&f[..n]);
                // Swap the addresses.
                b[..6].copy_from_slice(&f[6..12]);
                b[6..12].copy_from_slice(&f[..6]);
                pending = Some((n, b));
            })?;
            if let Some((n, b)) = pending.take() {
                while !x.send(&b[..n])? {}
            }
        }
        Ok(())
    });
    let report = ready_rx.recv()?;
    let ca = xdp_config(&if_a, o);
    let (iters, warmup) = (o.iters, o.warmup);
    let ping = in_node(lab, "a", 0, move || -> Res<Histogram<u64>> {
        let mut x = RawXsk::open(&ca)?;
        let mut frame = vec![0u8; frame_len];
        frame[..6].copy_from_slice(&mac_b);
        frame[6..12].copy_from_slice(&mac_a);
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        let mut h = hist();
        for i in 0..warmup + iters {
            frame[14..22].copy_from_slice(&i.to_le_bytes());
            let t = Instant::now();
            while !x.send(&frame)? {}
            let mut got = false;
            let mut spins = 0u32;
            while !got {
                x.recv(1, &mut |_, f| {
                    got = f.len() >= 22 && f[14..22] == i.to_le_bytes();
                })?;
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && t.elapsed() > Duration::from_secs(1) {
                    return Err(format!("raw reply {i} lost").into());
                }
            }
            if i >= warmup {
                h.record(t.elapsed().as_nanos() as u64)?;
            }
        }
        Ok(h)
    });
    let h = ping.join().expect("ping thread")?;
    stop.store(true, Ordering::Relaxed);
    echo.join().expect("echo thread")?;
    Ok((lat(&h), report))
}

/// Streams `frame_len`-byte frames from a to b (batches of 64) for `secs`;
/// returns frames per second received at b.
fn raw_rate(lab: &Lab, o: &Opts, frame_len: usize) -> Res<f64> {
    let (mac_a, if_a, _) = mac_of(lab, "a");
    let (mac_b, if_b, _) = mac_of(lab, "b");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let cb = xdp_config(&if_b, o);
    let sink = in_node(lab, "b", 1, move || -> Res<(u64, Duration)> {
        let mut x = RawXsk::open(&cb)?;
        ready_tx.send(())?;
        let mut n = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        while !s2.load(Ordering::Relaxed) {
            let k = x.recv(64, &mut |_, _| {})?;
            if k > 0 {
                let now = Instant::now();
                if first.is_none() {
                    first = Some(now);
                } else {
                    n += k as u64;
                }
                last = now;
            }
        }
        if std::env::var_os("XPP_DEBUG").is_some() {
            eprintln!("raw sink: kernel stats {:?}", x.kernel_stats());
        }
        Ok((n, last.duration_since(first.unwrap_or(last))))
    });
    ready_rx.recv()?;
    let ca = xdp_config(&if_a, o);
    let secs = o.secs;
    let src = in_node(lab, "a", 0, move || -> Res<u64> {
        let mut x = RawXsk::open(&ca)?;
        let mut frame = vec![0u8; frame_len];
        frame[..6].copy_from_slice(&mac_b);
        frame[6..12].copy_from_slice(&mac_a);
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        let t = Instant::now();
        let mut sent = 0u64;
        while t.elapsed().as_secs_f64() < secs {
            let mut k = 0;
            sent += x.send_with(&mut |buf| {
                if k == 64 {
                    return None;
                }
                k += 1;
                buf[..frame.len()].copy_from_slice(&frame);
                Some(frame.len())
            })? as u64;
        }
        Ok(sent)
    });
    let sent = src.join().expect("source thread")?;
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (n, dt) = sink.join().expect("sink thread")?;
    if std::env::var_os("XPP_DEBUG").is_some() {
        eprintln!("raw source: sent {sent}, received {n} in {dt:?}");
    }
    Ok(n as f64 / dt.as_secs_f64().max(1e-9))
}

// ---------------------------------------------------------------- BCL

fn endpoint(me: u32, cfg: AfXdpConfig, eager: Option<usize>) -> Res<Endpoint> {
    let m = AfXdpMethod::open(cfg)?;
    let ep = Endpoint::builder(ProcessAddr::new(me, 0), JobKey(9))
        .method(Box::new(m))
        .configure(|c| {
            if let Some(ms) = std::env::var("XPP_RTO_MIN_MS")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                c.rto.min = Duration::from_millis(ms);
                c.rto.initial = c.rto.initial.max(c.rto.min);
            }
            if let Some(e) = eager {
                c.eager_limit = e;
                c.ring_blocks = 16384;
                c.ring_block_size = 256;
            }
        })
        .build()?;
    Ok(ep)
}

/// Runs a BCL server on b (`serve`) and a client on a (`client`) with
/// their endpoints connected.
#[allow(clippy::type_complexity)]
fn bcl_pair<T: Send + 'static>(
    lab: &Lab,
    o: &Opts,
    eager: Option<usize>,
    serve: impl FnOnce(&mut Endpoint, ProcessAddr, &AtomicBool) -> Res<()> + Send + 'static,
    client: impl FnOnce(&mut Endpoint, ProcessAddr) -> Res<T> + Send + 'static,
) -> Res<T> {
    let (_, if_a, _) = mac_of(lab, "a");
    let (_, if_b, _) = mac_of(lab, "b");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let (d_b_tx, d_b_rx) = mpsc::channel::<Descriptor>();
    let (d_a_tx, d_a_rx) = mpsc::channel::<Descriptor>();
    let cb = xdp_config(&if_b, o);
    let ca = xdp_config(&if_a, o);
    let server = in_node(lab, "b", 1, move || -> Res<()> {
        let mut ep = endpoint(2, cb, eager)?;
        d_b_tx.send(ep.descriptors()[0].clone())?;
        let a = ProcessAddr::new(1, 0);
        ep.add_peer(a, d_a_rx.recv()?);
        serve(&mut ep, a, &s2)
    });
    let client = in_node(lab, "a", 0, move || -> Res<T> {
        let mut ep = endpoint(1, ca, eager)?;
        d_a_tx.send(ep.descriptors()[0].clone())?;
        let b = ProcessAddr::new(2, 0);
        ep.add_peer(b, d_b_rx.recv()?);
        let r = client(&mut ep, b);
        // Keep acknowledging a little for the server's last sends.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            let _ = ep.progress();
        }
        r
    });
    let r = client.join().expect("client thread");
    stop.store(true, Ordering::Relaxed);
    server.join().expect("server thread")?;
    r
}

fn bcl_pingpong(lab: &Lab, o: &Opts, size: usize) -> Res<(Lat, String)> {
    let (iters, warmup) = (o.iters, o.warmup);
    bcl_pair(
        lab,
        o,
        None,
        |ep, a, stop| {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                ep.progress()?;
                while let Some(d) = ep.poll_delivery() {
                    let n = d.len as usize;
                    buf[..n].copy_from_slice(ep.message(&d).ok_or("no message")?);
                    ep.release(d)?;
                    ep.send(a, &buf[..n])?;
                }
                while ep.poll_send_event().is_some() {}
            }
            Ok(())
        },
        move |ep, b| {
            let mut msg = vec![5u8; size];
            let mut h = hist();
            for i in 0..warmup + iters {
                msg[..8].copy_from_slice(&i.to_le_bytes());
                let t = Instant::now();
                ep.send(b, &msg)?;
                let mut spins = 0u32;
                'wait: loop {
                    ep.progress()?;
                    while let Some(d) = ep.poll_delivery() {
                        let ok = ep.message(&d).is_some_and(|m| m[..8] == i.to_le_bytes());
                        ep.release(d)?;
                        if ok {
                            break 'wait;
                        }
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) && t.elapsed() > Duration::from_secs(2) {
                        return Err(format!("BCL reply {i} lost").into());
                    }
                }
                if i >= warmup {
                    h.record(t.elapsed().as_nanos() as u64)?;
                }
                while let Some(ev) = ep.poll_send_event() {
                    if let SendEvent::Failed(_, f) = ev {
                        return Err(f.into());
                    }
                }
            }
            let report = ep
                .methods()
                .next()
                .map(|m| format!("{} {}", m.name(), m.descriptor()))
                .unwrap_or_default();
            Ok((lat(&h), format!("{report}; {:?}", ep.port().stats())))
        },
    )
}

/// Streams `size`-byte messages from a to b for `secs`; returns messages
/// per second and bytes per second delivered at b.
fn bcl_stream(lab: &Lab, o: &Opts, size: usize, eager: Option<usize>) -> Res<(f64, f64, String)> {
    let delivered = Arc::new(AtomicU64::new(0));
    let d2 = delivered.clone();
    let rx_stats = Arc::new(std::sync::Mutex::new(String::new()));
    let rx2 = rx_stats.clone();
    let secs = o.secs;
    let r = bcl_pair(
        lab,
        o,
        eager,
        move |ep, _a, stop| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ep.progress()?;
                while let Some(d) = ep.poll_delivery() {
                    ep.release(d)?;
                    n += 1;
                }
                d2.store(n, Ordering::Relaxed);
            }
            let s = ep.port().stats();
            *rx2.lock().map_err(|_| "poisoned")? = format!(
                "receiver: frames_received {}, duplicates {}, acks_sent {}, naks_sent {}",
                s.frames_received, s.duplicates, s.acks_sent, s.naks_sent
            );
            Ok(())
        },
        move |ep, b| {
            let msg = vec![3u8; size];
            let start = Instant::now();
            let mut sent = 0u64;
            let mut completed = 0u64;
            let mut measured: Option<(Instant, u64)> = None;
            loop {
                loop {
                    match ep.send(b, &msg) {
                        Ok(_) => sent += 1,
                        Err(bcl::endpoint::Error::Send(bcl_core::SendError::WouldBlock(_))) => {
                            break
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                ep.progress()?;
                while let Some(ev) = ep.poll_send_event() {
                    match ev {
                        SendEvent::Complete(_) => completed += 1,
                        SendEvent::Failed(_, f) => return Err(f.into()),
                    }
                }
                let el = start.elapsed().as_secs_f64();
                if measured.is_none() && el > 0.3 {
                    measured = Some((Instant::now(), completed));
                }
                if el > secs + 0.3 {
                    break;
                }
            }
            let (t, c0) = measured.ok_or("too short")?;
            let dt = t.elapsed().as_secs_f64();
            let rate = (completed - c0) as f64 / dt;
            Ok((
                rate,
                format!("sent {sent} completed {completed}; {:?}", ep.port().stats()),
            ))
        },
    )?;
    let (rate, stats) = r;
    let rx = rx_stats.lock().map_err(|_| "poisoned")?.clone();
    Ok((
        rate,
        rate * size as f64,
        format!(
            "{stats}; delivered {}; {rx}",
            delivered.load(Ordering::Relaxed)
        ),
    ))
}

fn tcp_stream(lab: &Lab, o: &Opts, size: usize) -> Res<f64> {
    let (_, _, ip_b) = mac_of(lab, "b");
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = in_node(lab, "b", 1, move || -> Res<u64> {
        let l = TcpListener::bind((ip_b, 9100))?;
        ready_tx.send(())?;
        let (mut s, _) = l.accept()?;
        let mut buf = vec![0u8; size];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        Ok(total)
    });
    ready_rx.recv()?;
    let secs = o.secs;
    let client = in_node(lab, "a", 0, move || -> Res<f64> {
        let mut s = TcpStream::connect((ip_b, 9100))?;
        s.set_nodelay(true)?;
        let buf = vec![1u8; size];
        let start = Instant::now();
        let mut sent = 0u64;
        let mut measured: Option<(Instant, u64)> = None;
        loop {
            s.write_all(&buf)?;
            sent += size as u64;
            let el = start.elapsed().as_secs_f64();
            if measured.is_none() && el > 0.3 {
                measured = Some((Instant::now(), sent));
            }
            if el > secs + 0.3 {
                break;
            }
        }
        let (t, s0) = measured.ok_or("too short")?;
        Ok((sent - s0) as f64 / t.elapsed().as_secs_f64())
    });
    let r = client.join().expect("tcp client")?;
    server.join().expect("tcp server")?;
    Ok(r)
}

fn set_mtu(lab: &Lab, mtu: u32) -> Res<()> {
    for n in ["a", "b"] {
        let (_, ifname, _) = mac_of(lab, n);
        let st = lab
            .command(n, "ip")?
            .args(["link", "set", "dev", &ifname, "mtu", &mtu.to_string()])
            .status()?;
        if !st.success() {
            return Err(format!("cannot set MTU {mtu}").into());
        }
    }
    Ok(())
}

fn row(name: &str, l: &Lat) {
    println!(
        "{name:<34} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>8}",
        l.p50, l.p99, l.min, l.max, l.n
    );
}

fn main() -> Res<()> {
    let o = parse_opts();
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/lab/pair.toml");
    let lab = LabGuard::new(
        Lab::load(&topo)?.with_prefix(&format!("xpp{}", std::process::id() % 10000))?,
    )?;
    println!("load average at start: {}", loadavg());
    println!(
        "RTT, busy polling, echo on CPU 1, ping on CPU 0, {} iterations after {} warm-up (µs)",
        o.iters, o.warmup
    );
    println!(
        "{:<34} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "transport", "p50", "p99", "min", "max", "n"
    );
    if let Some(only) = o.only.as_deref() {
        // One measurement alone (for profiling).
        match only {
            "udp" => row("kernel UDP, 64 B frame", &udp_pingpong(&lab, &o)?),
            "raw" => row("AF_XDP raw, 64 B frame", &raw_pingpong(&lab, &o, 64)?.0),
            "bcl" => row("BCL/afxdp, 64 B message", &bcl_pingpong(&lab, &o, 64)?.0),
            "rate" => {
                let (r, _, st) = bcl_stream(&lab, &o, 8, None)?;
                println!("BCL 8 B rate {:.3} M msg/s\n  {st}", r / 1e6);
            }
            "rawrate" => println!(
                "raw 64 B rate {:.3} M frames/s",
                raw_rate(&lab, &o, 64)? / 1e6
            ),
            "bw" => {
                set_mtu(&lab, o.bw_mtu)?;
                let (m, bw, st) = bcl_stream(&lab, &o, 65536, Some(65536))?;
                println!(
                    "BCL 64 KiB: {:.2} Gbit/s ({m:.0} msg/s)\n  {st}",
                    bw * 8.0 / 1e9
                );
            }
            "tcp" => {
                set_mtu(&lab, o.bw_mtu)?;
                println!(
                    "TCP 64 KiB: {:.2} Gbit/s",
                    tcp_stream(&lab, &o, 65536)? * 8.0 / 1e9
                );
            }
            other => {
                return Err(
                    format!("--only {other}: udp, raw, bcl, rate, rawrate, bw or tcp").into(),
                )
            }
        }
        return Ok(());
    }
    // Interleaved rounds, so that a change in the machine's load hits every
    // transport alike; the ratios use the median of the rounds' p50s.
    let names = [
        "kernel UDP, 64 B frame",
        "AF_XDP raw, 64 B frame",
        "AF_XDP raw, 134 B frame",
        "BCL/afxdp, 64 B message",
        "BCL/afxdp, 8 B message",
    ];
    let mut all: Vec<Vec<Lat>> = (0..names.len()).map(|_| Vec::new()).collect();
    let mut report = String::new();
    let mut stats = String::new();
    for round in 0..o.rounds {
        println!("round {} (load {})", round + 1, loadavg());
        let udp = udp_pingpong(&lab, &o)?;
        let (raw64, r) = raw_pingpong(&lab, &o, 64)?;
        let (raw134, _) = raw_pingpong(&lab, &o, 14 + 56 + 64)?;
        let (bcl64, st) = bcl_pingpong(&lab, &o, 64)?;
        let (bcl8, _) = bcl_pingpong(&lab, &o, 8)?;
        report = r;
        stats = st;
        for (k, l) in [udp, raw64, raw134, bcl64, bcl8].into_iter().enumerate() {
            row(names[k], &l);
            all[k].push(l);
        }
    }
    let median = |v: &[Lat], f: fn(&Lat) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(|a, b| a.total_cmp(b));
        x[x.len() / 2]
    };
    println!("\nmedian over {} rounds (µs):", o.rounds);
    println!("{:<34} {:>8} {:>8}", "transport", "p50", "p99");
    let p50: Vec<f64> = all.iter().map(|v| median(v, |l| l.p50)).collect();
    let p99: Vec<f64> = all.iter().map(|v| median(v, |l| l.p99)).collect();
    for k in 0..names.len() {
        println!("{:<34} {:>8.2} {:>8.2}", names[k], p50[k], p99[k]);
    }
    println!(
        "\nmodes (echo side): {}",
        report.trim_end().replace('\n', "\n  ")
    );
    println!("client port (last BCL run): {stats}");
    println!("\nratios (targets in brackets):");
    println!(
        "  BCL 64 B p50 / kernel UDP p50      = {:.2}  [<= 0.45]",
        p50[3] / p50[0]
    );
    println!(
        "  BCL 64 B p50 / raw 64 B frame p50  = {:.2}  [<= 1.15]",
        p50[3] / p50[1]
    );
    println!(
        "  BCL 64 B p50 / raw 134 B frame p50 = {:.2}  (same frame length on the wire)",
        p50[3] / p50[2]
    );
    println!(
        "  BCL 64 B p99 / p50                 = {:.2}  [<= 2]",
        p99[3] / p50[3]
    );
    println!(
        "  raw 64 B p99 / p50                 = {:.2}",
        p99[1] / p50[1]
    );

    let raw_pps = raw_rate(&lab, &o, 64)?;
    println!(
        "\nAF_XDP raw frame rate, 64 B frames, one sending core: {:.3} M frames/s",
        raw_pps / 1e6
    );
    let (rate, _, st) = bcl_stream(&lab, &o, 8, None)?;
    println!(
        "\n8 B message rate, BCL/afxdp, one sending core: {:.3} M msg/s  [>= 1]",
        rate / 1e6
    );
    println!("  {st}");

    if !o.skip_bw {
        set_mtu(&lab, o.bw_mtu)?;
        let tcp = tcp_stream(&lab, &o, 65536)?;
        let (mrate, bw, st) = bcl_stream(&lab, &o, 65536, Some(65536))?;
        println!(
            "\n64 KiB messages, veth MTU {}, UMEM frames 4096 B (BCL frame {} B):",
            o.bw_mtu, o.bw_mtu
        );
        println!("  kernel TCP:  {:.2} Gbit/s", tcp * 8.0 / 1e9);
        println!(
            "  BCL/afxdp:   {:.2} Gbit/s ({:.0} msg/s)  ratio {:.2}  [>= 1]",
            bw * 8.0 / 1e9,
            mrate,
            bw / tcp
        );
        println!("  {st}");
    }
    println!("\nload average at end: {}", loadavg());
    Ok(())
}
