//! Raw micro-benchmarks of the shared-memory primitives, each printed next
//! to its baseline from the same run, as a ratio.
//!
//! ```text
//! cargo run --release -p bcl-shm --example shm_bench -- [all|latency|rate|bw|sweep|unix]
//! ```
//!
//! Two processes (this one and a re-executed child), pinned to CPUs 0 and 1
//! (`--cpus A,B` to change):
//!
//! * `latency`: 8-byte ping-pong through the system ring vs the floor
//!   ("spin": two processes ping-ponging one cache line), one way = RTT/2;
//! * `rate`: 8-byte messages, one sender, one receiver, messages/s;
//! * `bw`: 4 MiB messages through the pipelined exchange queue vs a
//!   single-thread `memcpy` of 4 MiB in this process;
//! * `sweep`: `bw` for chunk sizes 4 KiB..1 MiB and two queue depths;
//! * `unix`: 8-byte ping-pong over a Unix stream socket (blocking reads).

use bcl_core::{JobKey, ProcessAddr};
use bcl_shm::{Geometry, PullProgress, ShmConfig, ShmError, ShmPort};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it;
    // sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "warning: cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

struct Opts {
    cpus: (usize, usize),
    job: JobKey,
    iters: u64,
}

fn opt<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn spawn_child(o: &Opts, role: &str, extra: &[String]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(role)
        .arg("--cpus")
        .arg(format!("{},{}", o.cpus.0, o.cpus.1))
        .arg("--job")
        .arg(o.job.0.to_string())
        .arg("--iters")
        .arg(o.iters.to_string())
        .args(extra)
        .spawn()
        .expect("spawn child")
}

fn addr_a() -> ProcessAddr {
    ProcessAddr::new(0, 1)
}
fn addr_b() -> ProcessAddr {
    ProcessAddr::new(0, 2)
}

fn open_port(o: &Opts, addr: ProcessAddr, g: Geometry) -> ShmPort {
    let mut cfg = ShmConfig::new(o.job, addr);
    cfg.geometry = g;
    ShmPort::open(cfg).expect("open shm port")
}

fn connect(p: &mut ShmPort, to: ProcessAddr) -> bcl_shm::PeerId {
    let t = Instant::now();
    loop {
        match p.connect(to) {
            Ok(id) => return id,
            Err(ShmError::NoSuchPeer { .. } | ShmError::NotReady { .. })
                if t.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

fn send_spin(p: &mut ShmPort, to: bcl_shm::PeerId, msg: &[u8]) {
    loop {
        match p.try_send(to, msg) {
            Ok(()) => return,
            Err(ShmError::Full) => std::hint::spin_loop(),
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Receives one message (spinning), returns its first 8 bytes.
fn recv_spin(p: &mut ShmPort) -> u64 {
    loop {
        if let Some(m) = p.recv() {
            let mut b = [0u8; 8];
            m.copy_to(&mut b);
            m.release();
            return u64::from_le_bytes(b);
        }
        std::hint::spin_loop();
    }
}

// ---------------------------------------------------------------- spin floor

fn spin_file(job: JobKey) -> String {
    format!("/dev/shm/bcl-bench-spin-{:08x}", job.0)
}

fn map_spin(path: &str, create: bool) -> &'static AtomicU64 {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .expect("spin file");
    f.set_len(4096).unwrap();
    // SAFETY: maps one page of the file shared; the mapping is leaked
    // (lives until exit), so the 'static reference stays valid; the word is
    // only accessed atomically.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        &*(p as *const AtomicU64)
    }
}

fn spin_pingpong(o: &Opts, child: bool) -> Option<f64> {
    let path = spin_file(o.job);
    if child {
        pin(o.cpus.1);
        let w = map_spin(&path, false);
        let n = o.iters;
        for i in 0..n {
            while w.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            w.store(2 * i + 2, Ordering::Release);
        }
        return None;
    }
    let w = map_spin(&path, true);
    w.store(0, Ordering::Relaxed);
    let mut c = spawn_child(o, "spin", &[]);
    pin(o.cpus.0);
    let n = o.iters;
    let warm = n / 10;
    let mut t0 = Instant::now();
    for i in 0..n {
        if i == warm {
            t0 = Instant::now();
        }
        w.store(2 * i + 1, Ordering::Release);
        while w.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let el = t0.elapsed();
    c.wait().unwrap();
    let _ = std::fs::remove_file(&path);
    Some(el.as_nanos() as f64 / (n - warm) as f64 / 2.0)
}

// ---------------------------------------------------------------- ring ping-pong

fn small_geometry() -> Geometry {
    Geometry {
        chunk_size: 4096,
        chunks: 2,
        dir_entries: 4,
        ..Geometry::default()
    }
}

fn ring_pingpong(o: &Opts, child: bool) -> Option<f64> {
    if child {
        pin(o.cpus.1);
        let mut b = open_port(o, addr_b(), small_geometry());
        let to_a = connect(&mut b, addr_a());
        for _ in 0..o.iters {
            let v = recv_spin(&mut b);
            send_spin(&mut b, to_a, &v.to_le_bytes());
        }
        return None;
    }
    let mut c = spawn_child(o, "ring", &[]);
    pin(o.cpus.0);
    let mut a = open_port(o, addr_a(), small_geometry());
    let to_b = connect(&mut a, addr_b());
    let n = o.iters;
    let warm = n / 10;
    let mut t0 = Instant::now();
    for i in 0..n {
        if i == warm {
            t0 = Instant::now();
        }
        send_spin(&mut a, to_b, &i.to_le_bytes());
        let v = recv_spin(&mut a);
        assert_eq!(v, i);
    }
    let el = t0.elapsed();
    c.wait().unwrap();
    Some(el.as_nanos() as f64 / (n - warm) as f64 / 2.0)
}

// ---------------------------------------------------------------- message rate

fn rate(o: &Opts, child: bool) -> Option<f64> {
    let n = o.iters * 20;
    if child {
        pin(o.cpus.1);
        let mut b = open_port(o, addr_b(), small_geometry());
        let to_a = connect(&mut b, addr_a());
        let mut got = 0u64;
        let mut t0 = None;
        let mut next = 0u64;
        while got < n {
            got += b.recv_burst(64, |_, m| {
                let v = u64::from_le_bytes(m.try_into().unwrap());
                assert_eq!(v, next);
                next += 1;
            }) as u64;
            if got > 0 && t0.is_none() {
                t0 = Some(Instant::now());
            }
        }
        let el = t0.unwrap().elapsed();
        // Report the receiver's rate back to the parent.
        let rate = (n - 1) as f64 / el.as_secs_f64();
        send_spin(&mut b, to_a, &rate.to_bits().to_le_bytes());
        return None;
    }
    let mut c = spawn_child(o, "rate", &[]);
    pin(o.cpus.0);
    let mut a = open_port(o, addr_a(), small_geometry());
    let to_b = connect(&mut a, addr_b());
    for i in 0..n {
        send_spin(&mut a, to_b, &i.to_le_bytes());
    }
    let r = f64::from_bits(recv_spin(&mut a));
    c.wait().unwrap();
    Some(r)
}

// ---------------------------------------------------------------- bandwidth

const MSG: usize = 4 << 20;

fn bw_geometry(chunk: u32, chunks: u32) -> Geometry {
    Geometry {
        chunk_size: chunk,
        chunks,
        dir_entries: 2,
        ring_slots: 64,
        ..Geometry::default()
    }
}

/// One 4 MiB message per round, `rounds` rounds after 3 warm-up rounds;
/// returns GB/s measured by the receiver (first byte of round 0 to the
/// last byte of the last round).
fn bw(o: &Opts, child: bool, chunk: u32, chunks: u32, rounds: u64) -> Option<f64> {
    let warm = 3;
    let g = bw_geometry(chunk, chunks);
    if child {
        pin(o.cpus.1);
        let mut b = open_port(o, addr_b(), g);
        let to_a = connect(&mut b, addr_a());
        let mut dst = vec![0u8; MSG];
        dst.iter_mut().for_each(|x| *x = 1);
        let mut t0 = Instant::now();
        for r in 0..warm + rounds {
            if r == warm {
                t0 = Instant::now();
            }
            loop {
                match b.pull_into(addr_a(), &mut dst) {
                    Ok(PullProgress::Done { len }) => {
                        assert_eq!(len, MSG);
                        break;
                    }
                    Ok(_) => {}
                    Err(ShmError::PeerGone { .. }) => {}
                    Err(e) => panic!("pull: {e}"),
                }
            }
            assert_eq!(dst[MSG - 1], (r as u8).wrapping_add(1));
        }
        let el = t0.elapsed();
        let gbs = (rounds as usize * MSG) as f64 / el.as_secs_f64() / 1e9;
        send_spin(&mut b, to_a, &gbs.to_bits().to_le_bytes());
        return None;
    }
    let mut c = spawn_child(
        o,
        "bw",
        &[
            "--chunk".into(),
            chunk.to_string(),
            "--chunks".into(),
            chunks.to_string(),
            "--rounds".into(),
            rounds.to_string(),
        ],
    );
    pin(o.cpus.0);
    let mut a = open_port(o, addr_a(), g);
    let to_b = connect(&mut a, addr_b());
    let mut src = vec![0u8; MSG];
    for r in 0..warm + rounds {
        src[0] = r as u8;
        src[MSG - 1] = (r as u8).wrapping_add(1);
        while !a.push_message(to_b, &src).expect("push").done {}
    }
    let g = f64::from_bits(recv_spin(&mut a));
    c.wait().unwrap();
    Some(g)
}

/// Single-thread memcpy of 4 MiB between two warm buffers, GB/s (best of
/// five runs of `rounds` copies).
fn memcpy_bw(rounds: u64) -> f64 {
    let src = vec![3u8; MSG];
    let mut dst = vec![0u8; MSG];
    let mut best = 0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        for r in 0..rounds {
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst);
            dst[r as usize % MSG] = 0;
        }
        let g = (rounds as usize * MSG) as f64 / t0.elapsed().as_secs_f64() / 1e9;
        best = best.max(g);
    }
    best
}

// ---------------------------------------------------------------- unix socket

fn unix_pingpong(o: &Opts, child: bool) -> Option<f64> {
    let path = format!("/tmp/bcl-bench-unix-{:08x}", o.job.0);
    let n = (o.iters / 20).max(1000);
    if child {
        pin(o.cpus.1);
        let mut s = loop {
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        let mut b = [0u8; 8];
        for _ in 0..n {
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        }
        return None;
    }
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut c = spawn_child(o, "unix", &[]);
    pin(o.cpus.0);
    let (mut s, _) = l.accept().unwrap();
    let warm = n / 10;
    let mut b = [0u8; 8];
    let mut t0 = Instant::now();
    for i in 0..n {
        if i == warm {
            t0 = Instant::now();
        }
        s.write_all(&i.to_le_bytes()).unwrap();
        s.read_exact(&mut b).unwrap();
    }
    let el = t0.elapsed();
    c.wait().unwrap();
    let _ = std::fs::remove_file(&path);
    Some(el.as_nanos() as f64 / (n - warm) as f64 / 2.0)
}

// ---------------------------------------------------------------- driver

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cpus = opt(&args, "--cpus")
        .map(|s| {
            let (a, b) = s.split_once(',').expect("--cpus A,B");
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .unwrap_or((0, 1));
    let job = opt(&args, "--job")
        .map(|s| JobKey(s.parse().unwrap()))
        .unwrap_or(JobKey(0xbe00_0000 | (std::process::id() & 0xffffff)));
    let iters = opt(&args, "--iters")
        .map(|s| s.parse().unwrap())
        .unwrap_or(200_000);
    let o = Opts { cpus, job, iters };
    if let Some(role) = opt(&args, "--child") {
        match role {
            "spin" => spin_pingpong(&o, true),
            "ring" => ring_pingpong(&o, true),
            "rate" => rate(&o, true),
            "unix" => unix_pingpong(&o, true),
            "bw" => {
                let chunk = opt(&args, "--chunk").unwrap().parse().unwrap();
                let chunks = opt(&args, "--chunks").unwrap().parse().unwrap();
                let rounds = opt(&args, "--rounds").unwrap().parse().unwrap();
                bw(&o, true, chunk, chunks, rounds)
            }
            r => panic!("unknown role {r}"),
        };
        return;
    }
    let what = args
        .get(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or("all");
    println!(
        "# bcl-shm raw benchmarks; CPUs {},{}; load before: {}",
        cpus.0,
        cpus.1,
        loadavg()
    );
    let all = what == "all";
    if all || what == "latency" {
        // Interleave floor and ring runs, keep the best of each (least
        // disturbed by other load).
        let mut floor = f64::MAX;
        let mut ring = f64::MAX;
        for _ in 0..3 {
            floor = floor.min(spin_pingpong(&o, false).unwrap());
            ring = ring.min(ring_pingpong(&o, false).unwrap());
        }
        println!(
            "latency 8 B one-way: ring {ring:.0} ns, floor (spin) {floor:.0} ns, ratio {:.2} (target <= 1.3 and <= 250 ns)",
            ring / floor
        );
    }
    if all || what == "unix" {
        let u = unix_pingpong(&o, false).unwrap();
        println!(
            "latency 8 B one-way: unix stream socket {:.1} us (reference)",
            u / 1000.0
        );
    }
    if all || what == "rate" {
        let mut best = 0f64;
        for _ in 0..3 {
            best = best.max(rate(&o, false).unwrap());
        }
        println!(
            "rate 8 B, 1 sender 1 receiver: {:.2} M msg/s (target >= 3)",
            best / 1e6
        );
    }
    if all || what == "bw" {
        let rounds = 50;
        let g = Geometry::default();
        let mut best = 0f64;
        for _ in 0..3 {
            best = best.max(bw(&o, false, g.chunk_size, g.chunks, rounds).unwrap());
        }
        let m = memcpy_bw(rounds);
        println!(
            "bandwidth 4 MiB: exchange {best:.1} GB/s ({} KiB x {} chunks), memcpy {m:.1} GB/s, ratio {:.2} (target >= 0.8)",
            g.chunk_size / 1024,
            g.chunks,
            best / m
        );
    }
    if what == "sweep" {
        let rounds = 30;
        println!("chunk_KiB depth exchange_GBps memcpy_GBps ratio");
        for depth in [4u32, 8] {
            for kib in [4u32, 8, 16, 32, 64, 128, 256, 512, 1024] {
                let mut best = 0f64;
                for _ in 0..3 {
                    best = best.max(bw(&o, false, kib * 1024, depth, rounds).unwrap());
                }
                let m = memcpy_bw(rounds);
                println!("{kib:9} {depth:5} {best:12.1} {m:11.1} {:5.2}", best / m);
            }
        }
    }
    println!("# load after: {}", loadavg());
}
