//! `bcl-async-pingpong`: ping-pong through `bcl::tokio` (async `send` and
//! `recv` under a tokio runtime), and as remote service requests
//! (`bcl::service`, an inline echo handler), against the same exchange through
//! the blocking API (`send_blocking`, `recv_blocking`), one thread per end
//! each way, in one process, alternating the three several times so a slow
//! minute of the machine falls on all alike. Over shared memory, udp on
//! the loopback interface, or afxdp between the two namespaces of
//! `configs/lab/pair-xdp.toml` (root; the endpoints are opened in their
//! namespaces, then driven from this process's threads). The RSRs are
//! compared with the exchange `bcl-pingpong` makes (`send_until` and
//! `transmit`, `recv_with_until`), run alongside. Prints each run's p50 and
//! p99 and the median ratios of the p50s (async / blocking, rsr /
//! pingpong) with their ranges.
//!
//! The async ends run each in a current-thread runtime on its own thread
//! (`--runtime per-end`, thread-per-core style), or both in one
//! multi-thread runtime of two workers (`--runtime shared`), where a wake-up
//! often crosses between the workers.

use bcl::shm::ShmMethod;
use bcl::tokio::AsyncEndpoint;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Descriptor, Endpoint, JobKey, ProcessAddr, ProgressMode};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// Async (tokio) ping-pong against the blocking API's, alternating.
#[derive(Parser, Debug)]
#[command(name = "bcl-async-pingpong", version)]
struct Cli {
    /// The method both ends use.
    #[arg(long, value_enum, default_value = "shm")]
    method: Method,
    /// Message size in bytes.
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// Round trips timed per run (after 10 % more as warm-up).
    #[arg(long, default_value_t = 5000)]
    iters: usize,
    /// Runs of each API, alternating.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// How the blocking API's endpoints wait: blocking (sleep in epoll, as
    /// the async runtime does) or busy-poll.
    #[arg(long, value_enum, default_value = "blocking")]
    mode: Mode,
    /// Where the async ends run: per-end (a current-thread runtime per end,
    /// each on its own thread) or shared (one multi-thread runtime, two
    /// workers).
    #[arg(long, value_enum, default_value = "per-end")]
    runtime: RuntimeKind,
    /// Leave the async runs out (only blocking against RSR).
    #[arg(long)]
    no_async: bool,
    /// Run only this API, `--reps` times, and print no ratios: for a
    /// profiler or a system-call count of one API alone.
    #[arg(long, value_enum)]
    only: Option<Api>,
}

/// The exchanges the benchmark times.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Api {
    /// `send_blocking`/`recv_blocking`.
    Blocking,
    /// `bcl::tokio`.
    Async,
    /// `bcl-pingpong`'s exchange.
    Pingpong,
    /// Remote service requests (`Endpoint::call`).
    Rsr,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RuntimeKind {
    PerEnd,
    Shared,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Method {
    Shm,
    Udp,
    Afxdp,
}

/// The lab of the afxdp runs, up while the benchmark runs (a static is
/// never dropped: `main` takes it down at the end).
static LAB: std::sync::OnceLock<bcl_lab::LabGuard> = std::sync::OnceLock::new();

/// An afxdp endpoint on the first interface of lab node `node`, opened
/// inside its namespace.
fn afxdp_endpoint(node: &str, addr: ProcessAddr, job: JobKey, mode: ProgressMode) -> Endpoint {
    let lab = LAB.get().expect("the lab is up");
    let ifname = lab.interfaces(node).expect("interfaces").remove(0).ifname;
    lab.spawn_in(node, move || {
        let m = bcl::afxdp::AfXdpMethod::open(bcl::afxdp::AfXdpConfig::new(ifname)).expect("afxdp");
        Endpoint::builder(addr, job)
            .mode(mode)
            .method(Box::new(m))
            .build()
            .expect("endpoint")
    })
    .join()
    .expect("open in the namespace")
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Blocking,
    BusyPoll,
}

impl Mode {
    /// The endpoints' progress mode.
    fn progress_mode(self) -> ProgressMode {
        match self {
            Mode::Blocking => ProgressMode::Blocking,
            Mode::BusyPoll => ProgressMode::BusyPoll,
        }
    }
}

const T: Duration = Duration::from_secs(30);

/// Two endpoints that know each other: (client, server).
fn pair(method: Method, mode: ProgressMode, run: u32) -> (Endpoint, Endpoint) {
    let job = JobKey(std::process::id() << 8 ^ run);
    let (ca, sa) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let open = |addr: ProcessAddr| -> Endpoint {
        let b = Endpoint::builder(addr, job).mode(mode);
        let b = match method {
            Method::Shm => b.method(Box::new(ShmMethod::open(job, addr).expect("shm"))),
            Method::Udp => b.method(Box::new(
                UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).expect("udp"),
            )),
            Method::Afxdp => {
                let node = if addr == ca { "a" } else { "b" };
                return afxdp_endpoint(node, addr, job, mode);
            }
        };
        b.build().expect("endpoint")
    };
    let (mut c, mut s) = (open(ca), open(sa));
    let descriptor = |ep: &Endpoint, addr: ProcessAddr| match method {
        Method::Shm => Descriptor::new("shm", format!("{addr}@{}", bcl::shm::node_identity())),
        Method::Udp | Method::Afxdp => ep.descriptors()[0].clone(),
    };
    let (dc, ds) = (descriptor(&c, ca), descriptor(&s, sa));
    c.add_peer(sa, ds);
    s.add_peer(ca, dc);
    (c, s)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

/// Round trips as `bcl-pingpong` makes them (`send_until`, then
/// `transmit` so the message leaves at once; `recv_with_until`, which
/// reads a busy-polled message in place), one thread per end: the RSRs'
/// baseline.
fn pingpong_run(cli: &Cli, run: u32) -> Histogram<u64> {
    let mode = cli.mode.progress_mode();
    let (mut c, mut s) = pair(cli.method, mode, run);
    let total = cli.iters + cli.iters / 10;
    fn reap(ep: &mut Endpoint) {
        while let Some(ev) = ep.poll_send_event() {
            if let bcl::SendEvent::Failed(_, why) = ev {
                panic!("send failed: {why}");
            }
        }
    }
    let server = std::thread::spawn(move || {
        let mut m = Vec::new();
        for _ in 0..total {
            let until = s.now() + T;
            let from = s
                .recv_with_until(until, |from, bytes| {
                    m.clear();
                    m.extend_from_slice(bytes);
                    from
                })
                .expect("server recv")
                .expect("a request in time");
            s.send_until(from, &m, until).expect("server send");
            s.transmit().expect("server transmit");
            reap(&mut s);
        }
        s
    });
    let to = ProcessAddr::new(1, 2);
    let msg = vec![0x5a; cli.size];
    let mut h = histogram();
    for i in 0..total {
        let t0 = Instant::now();
        let until = c.now() + T;
        c.send_until(to, &msg, until).expect("client send");
        c.transmit().expect("client transmit");
        c.recv_with_until(until, |_, _| ())
            .expect("client recv")
            .expect("an answer in time");
        reap(&mut c);
        if i >= total - cli.iters {
            h.record(t0.elapsed().as_nanos() as u64).expect("record");
        }
    }
    let _s = server.join().expect("server thread");
    h
}

/// Round trips through the blocking API, one thread per end.
fn blocking_run(cli: &Cli, run: u32) -> Histogram<u64> {
    let mode = cli.mode.progress_mode();
    let (mut c, mut s) = pair(cli.method, mode, run);
    let total = cli.iters + cli.iters / 10;
    let server = std::thread::spawn(move || {
        for _ in 0..total {
            let d = s.recv_blocking(T).expect("server recv");
            let from = d.from;
            let m = s.message(&d).expect("message").to_vec();
            s.release(d).expect("release");
            s.send_blocking(from, &m, T).expect("server send");
        }
        s
    });
    let to = ProcessAddr::new(1, 2);
    let msg = vec![0x5a; cli.size];
    let mut h = histogram();
    for i in 0..total {
        let t0 = Instant::now();
        c.send_blocking(to, &msg, T).expect("client send");
        let d = c.recv_blocking(T).expect("client recv");
        c.release(d).expect("release");
        if i >= total - cli.iters {
            h.record(t0.elapsed().as_nanos() as u64).expect("record");
        }
    }
    // The server's last send waits for the acknowledgement of its answer:
    // keep serving until it is done.
    while !server.is_finished() {
        let soon = c.now() + Duration::from_millis(5);
        c.progress_or_wait(Some(soon)).expect("client progress");
    }
    drop(server.join().expect("server thread"));
    h
}

/// The server's side of the async exchange: echo `total` messages.
async fn async_server(s: Endpoint, total: usize) {
    let s = AsyncEndpoint::new(s).expect("async server");
    for _ in 0..total {
        let (from, m) = s.recv().await.expect("server recv");
        s.send(from, &m).await.expect("server send");
    }
    // Acknowledge the client's last messages before the endpoint goes.
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// The client's side: `total` round trips, the last `iters` timed.
async fn async_client(c: Endpoint, total: usize, iters: usize, size: usize) -> Histogram<u64> {
    let c = AsyncEndpoint::new(c).expect("async client");
    let to = ProcessAddr::new(1, 2);
    let msg = vec![0x5a; size];
    let mut h = histogram();
    for i in 0..total {
        let t0 = Instant::now();
        c.send(to, &msg).await.expect("client send");
        c.recv().await.expect("client recv");
        if i >= total - iters {
            h.record(t0.elapsed().as_nanos() as u64).expect("record");
        }
    }
    // Acknowledge the server's last answer before the endpoint goes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    h
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The same round trips through `bcl::tokio`.
fn async_run(cli: &Cli, run: u32) -> Histogram<u64> {
    let (c, s) = pair(cli.method, ProgressMode::Blocking, run);
    let total = cli.iters + cli.iters / 10;
    let (iters, size) = (cli.iters, cli.size);
    match cli.runtime {
        RuntimeKind::PerEnd => {
            let server =
                std::thread::spawn(move || current_thread().block_on(async_server(s, total)));
            let h = current_thread().block_on(async_client(c, total, iters, size));
            server.join().expect("server thread");
            h
        }
        RuntimeKind::Shared => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let server = tokio::spawn(async_server(s, total));
                let h = async_client(c, total, iters, size).await;
                server.await.expect("server task");
                h
            })
        }
    }
}

/// The same round trips as remote service requests (`bcl::service`): the
/// client's `Endpoint::call_with` to an inline echo handler at the server, both
/// endpoints in the blocking API's mode, one thread per end. A
/// busy-polling server loops on `poll_rsr`, a blocking one sleeps in
/// `progress_or_wait`.
fn rsr_run(cli: &Cli, run: u32) -> Histogram<u64> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mode = cli.mode.progress_mode();
    let (mut c, mut s) = pair(cli.method, mode, run);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server = std::thread::spawn(move || {
        s.register_handler(1, |_, p, reply| reply.extend_from_slice(p))
            .expect("handler");
        while !server_stop.load(Ordering::Relaxed) {
            if mode == ProgressMode::BusyPoll {
                // As a busy-polling server loops: no clock reading.
                s.poll_rsr().expect("server progress");
            } else {
                let soon = s.now() + Duration::from_millis(2);
                s.progress_or_wait(Some(soon)).expect("server progress");
            }
        }
        s
    });
    let to = ProcessAddr::new(1, 2);
    let msg = vec![0x5a; cli.size];
    let total = cli.iters + cli.iters / 10;
    let mut h = histogram();
    for i in 0..total {
        let t0 = Instant::now();
        c.call_with(to, 1, &msg, T, |_| ()).expect("call");
        if i >= total - cli.iters {
            h.record(t0.elapsed().as_nanos() as u64).expect("record");
        }
    }
    for _ in 0..10 {
        let soon = c.now() + Duration::from_millis(1);
        c.progress_or_wait(Some(soon)).expect("client progress");
    }
    stop.store(true, Ordering::Relaxed);
    drop(server.join().expect("server thread"));
    h
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn main() {
    let cli = Cli::parse();
    if cli.iters == 0 || cli.reps == 0 {
        eprintln!("bcl-async-pingpong: --iters and --reps must be at least 1");
        std::process::exit(2);
    }
    if cli.method == Method::Afxdp {
        if let Some(why) = bcl_lab::privilege_problem() {
            eprintln!("bcl-async-pingpong: --method afxdp needs the lab: {why}");
            std::process::exit(2);
        }
        let config =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/lab/pair-xdp.toml");
        match bcl_lab::LabGuard::up(&config) {
            Ok(guard) => {
                let _ = LAB.set(guard);
            }
            Err(e) => {
                eprintln!("bcl-async-pingpong: bringing up {}: {e}", config.display());
                std::process::exit(2);
            }
        }
    }
    println!(
        "# bcl-async-pingpong: {:?}, {} B, {} round trips per run, blocking API in {:?} mode, async runtime {:?}",
        cli.method, cli.size, cli.iters, cli.mode, cli.runtime
    );
    println!(
        "{:>4} {:>9} {:>12} {:>12}",
        "run", "api", "p50 (us)", "p99 (us)"
    );
    let mut ratios = Vec::new();
    let mut rsr_ratios = Vec::new();
    if let Some(api) = cli.only {
        for rep in 0..cli.reps {
            let run = rep as u32 * 4;
            let h = match api {
                Api::Blocking => blocking_run(&cli, run),
                Api::Async => async_run(&cli, run + 1),
                Api::Pingpong => pingpong_run(&cli, run + 3),
                Api::Rsr => rsr_run(&cli, run + 2),
            };
            println!(
                "{:>4} {:>9} {:>12.2} {:>12.2}",
                rep + 1,
                format!("{api:?}").to_lowercase(),
                us(h.value_at_quantile(0.5)),
                us(h.value_at_quantile(0.99))
            );
        }
        lab_down();
        return;
    }
    for rep in 0..cli.reps {
        let run = rep as u32 * 4;
        let b = blocking_run(&cli, run);
        let a = (!cli.no_async).then(|| async_run(&cli, run + 1));
        let p = pingpong_run(&cli, run + 3);
        let r = rsr_run(&cli, run + 2);
        let runs = [
            ("blocking", Some(&b)),
            ("async", a.as_ref()),
            ("pingpong", Some(&p)),
            ("rsr", Some(&r)),
        ];
        for (name, h) in runs.iter().filter_map(|(n, h)| Some((n, (*h)?))) {
            println!(
                "{:>4} {:>9} {:>12.2} {:>12.2}",
                rep + 1,
                name,
                us(h.value_at_quantile(0.5)),
                us(h.value_at_quantile(0.99))
            );
        }
        if let Some(a) = &a {
            ratios.push(a.value_at_quantile(0.5) as f64 / b.value_at_quantile(0.5) as f64);
        }
        rsr_ratios.push(r.value_at_quantile(0.5) as f64 / p.value_at_quantile(0.5) as f64);
    }
    for (name, mut ratios) in [("async / blocking", ratios), ("rsr / pingpong", rsr_ratios)] {
        if ratios.is_empty() {
            continue;
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "{name} p50: median {:.2} [{:.2}–{:.2}] over {} alternating runs",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
            ratios.len()
        );
    }
    lab_down();
}

/// Takes the afxdp runs' lab down, if it is up.
fn lab_down() {
    if let Some(lab) = LAB.get() {
        if let Err(e) = lab.down() {
            eprintln!("bcl-async-pingpong: taking the lab down: {e}");
        }
    }
}
