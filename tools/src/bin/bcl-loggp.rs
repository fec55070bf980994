//! `bcl-loggp`: the LogGP parameters (L, o_s, o_r, g, G) of BCL over a
//! method, measured the way BCL-3 measured them, printed beside BCL-3's
//! Table 5.3, and the unified-poll check (o_r over shared memory against
//! o_r over a network method). The measurement is `bcl_tools::loggp`.

use bcl::core::method::Scope;
use bcl::Registry;
use bcl_tools::args::{parse_size, SizeList};
use bcl_tools::cli::{CommonArgs, Role};
use bcl_tools::end::{Baseline, EndSpec, MethodArg};
use bcl_tools::launch::{pin_current_thread, run_in_lab, spawn_pinned, split_pins};
use bcl_tools::loggp::{
    measure, netns_name, serve, table, timer_overhead_ns, Bcl3Path, Client, Host, LoggpCounters,
    LoggpReport, MethodResults, Model, OneThreadReport, Placement, Plan, PlanReport, ServeSummary,
    UnifiedPoll, STATISTIC,
};
use bcl_tools::methods::{open_client, open_local_pair, serve_one, Served};
use bcl_tools::report::write_json;
use bcl_tools::transport::Transport;
use clap::Parser;
use std::process::ExitCode;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Measure the LogGP parameters of a transport the way BCL-3 did (after
/// Culler et al., "Assessing Fast Network Interfaces"): the round trip by
/// ping-pong; the send overhead o_s from the time to issue a burst of a few
/// sends; the receive overhead o_r from the time to receive a message that
/// is already there; the gap g from a stream of back-to-back messages; the
/// gap per byte G = g / size (1 / bandwidth); the latency L = RTT/2 − o_s −
/// o_r. Every phase is repeated (--reps); each figure is the mean ± the
/// standard error over the repetitions, each repetition's figure the median
/// of its iterations.
///
/// Prints a table in the shape of BCL-3's Table 5.3 with BCL-3's figures
/// beside ours (intra-node for shm, inter-node for network methods). Both
/// ends run like bcl-pingpong's: --local, --serve/--connect, --lab FILE
/// --nodes A,B, or under bcl-run. With --json the figures, the placement,
/// the host and the commit are written for programs that choose algorithms
/// by their LogGP cost.
///
/// --check-unified-poll measures shm and --method (a network method) in
/// the same run, alternating repetitions, and compares their o_r: BCL-3
/// found o_r equal on both paths (1.0172 µs), because polling a network
/// peer read host memory as polling a local one did. Exit status 1 when a
/// size's ratio is outside --tolerance.
#[derive(Parser, Debug)]
#[command(name = "bcl-loggp", version, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Message sizes in bytes, comma-separated; K/M suffixes allowed. Every
    /// parameter is measured at every size; the model in the JSON takes L,
    /// o_s, o_r and g from the smallest and G from the largest.
    #[arg(long, default_value = "8,1K,64K")]
    sizes: SizeList,

    /// Repetitions of every phase of every size (mean ± standard error
    /// over them; at least 2 for an error).
    #[arg(long, default_value_t = 5)]
    reps: usize,

    /// Timed round trips per repetition, and as many timed receives (o_r).
    #[arg(long, default_value_t = 1000)]
    iters: u32,

    /// Untimed round trips before the timed ones.
    #[arg(long, default_value_t = 100)]
    warmup: u32,

    /// Timed bursts of sends per repetition (o_s).
    #[arg(long, default_value_t = 1000)]
    bursts: u32,

    /// Sends per burst: a few, so that none waits for room (o_s counts only
    /// the CPU time of the send call).
    #[arg(long, default_value_t = 4)]
    burst: u32,

    /// Messages of a back-to-back stream (g), at most.
    #[arg(long, default_value_t = 10_000)]
    stream: u32,

    /// Streams per repetition; g is the median of theirs.
    #[arg(long, default_value_t = 5)]
    streams: u32,

    /// Bytes of that stream, at most: large messages stream fewer (at least
    /// 16). K/M/G suffixes allowed.
    #[arg(long, default_value = "32M", value_parser = parse_size)]
    volume: usize,

    /// Pause between a send and the timed receive of its echo (o_r), in
    /// microseconds. Default: 1.5 median round trips of that size, at least
    /// 10 (longer pauses let a reliable method's peer time out and resend
    /// into the timed receive).
    #[arg(long, value_name = "US")]
    delay_us: Option<u64>,

    /// Measure shm and --method (a network method: udp, packet, afxdp, ...)
    /// in the same run, alternating, and compare their o_r. With --local
    /// both run in this process; with --lab or --connect the network
    /// method's server runs there and shm's in this process.
    #[arg(long)]
    check_unified_poll: bool,

    /// With --check-unified-poll: the CPU of the shm server thread. Default:
    /// under --local the server's CPU of --pin; under --connect and --lab
    /// unpinned (give the network server's CPU: it sleeps while shm is
    /// measured, e.g. --lab FILE --pin 1,0 --shm-pin 1).
    #[arg(long, value_name = "CPU")]
    shm_pin: Option<usize>,

    /// Largest accepted |o_r(method) / o_r(shm) − 1| of the check.
    #[arg(long, default_value_t = 0.10)]
    tolerance: f64,
}

const EXAMPLES: &str = "Examples:
  bcl-loggp --method shm --local --busy-poll --pin 1,0
  bcl-loggp --method udp --local --busy-poll --sizes 8,64K --json udp.json
  bcl-loggp --method udp --local --busy-poll --check-unified-poll --sizes 8
  bcl-loggp --method afxdp --lab configs/lab/pair-xdp.toml --nodes b,a --busy-poll --pin 1,0 --check-unified-poll --shm-pin 1
  # two ends by hand:
  ip netns exec bl-pair.b bcl-loggp --method packet --busy-poll --serve     # prints listening: packet:...
  ip netns exec bl-pair.a bcl-loggp --method packet --busy-poll --connect packet:02:bc:01:00:00:02/2";

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bcl-loggp: {e}");
            ExitCode::from(2)
        }
    }
}

/// A serving end running on its own thread.
type ServerThread = JoinHandle<Result<Result<ServeSummary, String>, String>>;

fn run(cli: &Cli) -> Result<ExitCode, String> {
    check_args(cli)?;
    let c = &cli.common;
    let spec = c.spec();
    let timeout = Duration::from_millis(c.timeout_ms);
    let wait_client = Duration::from_secs(c.wait_client_s);
    let lazy = spec.mode() == bcl::ProgressMode::BusyPoll;
    if !cli.check_unified_poll {
        if let Some(end) = bcl_tools::job::join(&spec)? {
            return match end {
                bcl_tools::job::JobEnd::Client(mut t) => {
                    let placement = Placement {
                        role: "job".into(),
                        netns: netns_name(),
                        ..Placement::default()
                    };
                    let name = bcl_tools::job::method_name("");
                    report(cli, vec![(name.to_string(), &mut *t)], placement)
                }
                bcl_tools::job::JobEnd::Server(mut t) => {
                    serve(&mut *t, lazy, wait_client, timeout).map_err(|e| e.to_string())?;
                    Ok(ExitCode::SUCCESS)
                }
                bcl_tools::job::JobEnd::Idle => Ok(ExitCode::SUCCESS),
            };
        }
    }
    let pins = c.pins();
    let shm_spec = EndSpec {
        method: MethodArg::bcl("shm")?,
        ..spec.clone()
    };
    match c.role()? {
        Role::Lab(file, nodes) => run_in_lab(&file, &nodes, pins),
        Role::Serve => {
            let cpu = pins.and_then(|p| p.first().copied());
            let mut t = serve_one(&spec, cpu, wait_client)?;
            let s = serve(&mut *t, lazy, wait_client, timeout).map_err(|e| e.to_string())?;
            if c.stats {
                println!("{}", t.details());
            }
            let tc = t.counters();
            println!(
                "# served {} phases, {} messages; transport retransmits {} bad frames {}",
                s.phases, s.messages, tc.retransmits, tc.bad_frames
            );
            Ok(ExitCode::SUCCESS)
        }
        Role::Connect(descriptor) => {
            // With the check, shm's server is a thread of this process,
            // started before this thread is pinned so that it does not
            // inherit the pin: it runs on whichever CPU the scheduler gives
            // it (the network method's server sleeps between its phases).
            let mut shm = None;
            if cli.check_unified_poll {
                let (served, client) = open_local_pair(&shm_spec)?;
                shm = Some((
                    client,
                    spawn_server(served, cli.shm_pin, lazy, wait_client, timeout),
                ));
            }
            let client_cpu = pins.and_then(|p| p.first()).copied();
            if let Some(cpu) = client_cpu {
                pin_current_thread(cpu)?;
            }
            let mut t = open_client(&spec, &descriptor, Instant::now() + timeout)?;
            let placement = Placement {
                role: "connect".into(),
                server_cpu: None,
                client_cpu,
                shm_server_cpu: cli.shm_pin.filter(|_| cli.check_unified_poll),
                netns: netns_name(),
                peer: Some(descriptor.clone()),
            };
            let name = c.method.name().to_string();
            match shm {
                Some((mut shm, server)) => {
                    let ends: Vec<(String, &mut dyn Transport)> =
                        vec![("shm".to_string(), &mut *shm), (name, &mut *t)];
                    let code = report(cli, ends, placement)?;
                    join_server(server)?;
                    Ok(code)
                }
                None => report(cli, vec![(name, &mut *t)], placement),
            }
        }
        Role::Local => {
            let (server_cpu, client_cpu) = split_pins(pins);
            let (served, mut t) = open_local_pair(&spec)?;
            let mut servers = vec![spawn_server(served, server_cpu, lazy, wait_client, timeout)];
            let mut shm = None;
            let shm_server_cpu = cli.shm_pin.or(server_cpu);
            if cli.check_unified_poll {
                let (served, client) = open_local_pair(&shm_spec)?;
                servers.push(spawn_server(
                    served,
                    shm_server_cpu,
                    lazy,
                    wait_client,
                    timeout,
                ));
                shm = Some(client);
            }
            if let Some(cpu) = client_cpu {
                pin_current_thread(cpu)?;
            }
            let placement = Placement {
                role: "local".into(),
                server_cpu,
                client_cpu,
                shm_server_cpu: shm_server_cpu.filter(|_| cli.check_unified_poll),
                netns: netns_name(),
                peer: None,
            };
            let name = c.method.name().to_string();
            let mut ends: Vec<(String, &mut dyn Transport)> = Vec::new();
            if let Some(s) = shm.as_mut() {
                ends.push(("shm".to_string(), &mut **s));
            }
            ends.push((name, &mut *t));
            let code = report(cli, ends, placement)?;
            for s in servers {
                let s = join_server(s)?;
                println!(
                    "# server: {} phases, {} messages; transport retransmits {} bad frames {}",
                    s.phases, s.messages, s.counters.retransmits, s.counters.bad_frames
                );
            }
            Ok(code)
        }
    }
}

/// Refuses what cannot be measured, before anything is opened.
fn check_args(cli: &Cli) -> Result<(), String> {
    let counts = [cli.iters, cli.bursts, cli.burst, cli.stream, cli.streams];
    if cli.reps == 0 || counts.contains(&0) {
        return Err(
            "--reps, --iters, --bursts, --burst, --stream and --streams must be at least 1".into(),
        );
    }
    if cli.tolerance.is_nan() || cli.tolerance <= 0.0 {
        return Err("--tolerance must be above 0".into());
    }
    let m = cli.common.method;
    if matches!(
        m,
        MethodArg::Baseline(Baseline::KernelUdp | Baseline::AfxdpRaw | Baseline::PacketRaw)
    ) {
        return Err(format!(
            "{} may drop messages, and the LogGP phases count every one (the server acknowledges bursts and streams once all arrived); measure it with bcl-pingpong or bcl-bw",
            m.name()
        ));
    }
    if cli.check_unified_poll {
        let network = matches!(m, MethodArg::Bcl(name) if name != "shm");
        if !network {
            return Err(format!(
                "--check-unified-poll compares shm with a network method: give it as --method (udp, packet, afxdp, ...), not {}",
                m.name()
            ));
        }
        if std::env::var_os("BCL_RANK").is_some() {
            return Err("--check-unified-poll opens its own ends: run it outside bcl-run".into());
        }
    }
    Ok(())
}

/// Starts the serving end of `served` on a thread (pinned to `cpu`).
fn spawn_server(
    served: Served,
    cpu: Option<usize>,
    lazy: bool,
    wait: Duration,
    idle: Duration,
) -> ServerThread {
    spawn_pinned(cpu, move || {
        let mut t = served.accept(Instant::now() + wait)?;
        serve(&mut *t, lazy, wait, idle).map_err(|e| format!("server: {e}"))
    })
}

fn join_server(s: ServerThread) -> Result<ServeSummary, String> {
    s.join()
        .map_err(|_| "server thread panicked".to_string())??
}

/// BCL-3's path a method compares with: shared memory and the local
/// baselines with the intra-node one, the rest with the inter-node one.
fn bcl3_path(method: &str) -> Bcl3Path {
    let local = match method.parse::<MethodArg>() {
        Ok(MethodArg::Bcl(name)) => Registry::builtin()
            .get(name)
            .is_some_and(|k| k.scope() == Scope::Node),
        Ok(MethodArg::Baseline(b)) => matches!(b, Baseline::Unix | Baseline::Spin),
        Err(_) => false,
    };
    if local {
        Bcl3Path::Intra
    } else {
        Bcl3Path::Inter
    }
}

/// Measures over `ends` (with the check: shm first, then the network
/// method), prints the tables and writes the JSON.
fn report(
    cli: &Cli,
    ends: Vec<(String, &mut dyn Transport)>,
    placement: Placement,
) -> Result<ExitCode, String> {
    let c = &cli.common;
    let timeout = Duration::from_millis(c.timeout_ms);
    for (name, t) in &ends {
        if let Some(s) = cli.sizes.0.iter().find(|s| **s > t.max_message()) {
            return Err(format!(
                "--sizes: {s} bytes exceeds the largest message of method {name} ({} bytes)",
                t.max_message()
            ));
        }
    }
    let plan = Plan {
        sizes: cli.sizes.0.clone(),
        reps: cli.reps,
        iters: cli.iters,
        warmup: cli.warmup,
        bursts: cli.bursts,
        burst: cli.burst,
        stream: cli.stream,
        volume: cli.volume as u64,
        streams: cli.streams,
        delay: cli.delay_us.map(Duration::from_micros),
        timeout,
    };
    let host = Host::here();
    let timer_ns = timer_overhead_ns();
    let names: Vec<String> = ends.iter().map(|(n, _)| n.clone()).collect();
    let mut clients: Vec<Client<'_>> = ends
        .into_iter()
        .map(|(_, t)| Client::new(t, timeout, timer_ns))
        .collect();
    let results = measure(&mut clients, &plan, |rep| {
        eprintln!("# repetition {}/{}", rep + 1, plan.reps);
    })
    .map_err(|e| e.to_string())?;
    for cl in &mut clients {
        cl.end().map_err(|e| e.to_string())?;
    }
    if c.stats {
        for (name, cl) in names.iter().zip(&clients) {
            println!("# {name}:\n{}", cl.details());
        }
    }
    let mut per_method: Vec<MethodResults> = names
        .iter()
        .zip(results)
        .zip(&clients)
        .map(|((name, results), cl)| MethodResults {
            method: name.clone(),
            model: Model::of(&results),
            results,
            counters: LoggpCounters::from(cl.counters()),
        })
        .collect();
    drop(clients);
    let mode = c.mode_name();
    print_header(cli, &names, mode, &placement, &host, timer_ns);
    for m in &per_method {
        let path = bcl3_path(&m.method);
        println!("# {} (BCL-3: Table 5.3)", m.method);
        print!("{}", table(&m.results, path));
        for r in m.results.iter().filter(|r| r.g_ns < r.o_s_ns) {
            println!(
                "# {}: g < o_s at {} B: in a stream a send costs less than in an isolated burst (frame methods bundle small messages queued while the send window is full; caches and rings stay warm); g is towards one peer",
                m.method, r.size
            );
        }
        let negative: Vec<String> = m
            .results
            .iter()
            .filter(|r| r.l_ns < 0.0)
            .map(|r| r.size.to_string())
            .collect();
        if !negative.is_empty() {
            println!(
                "# {}: L < 0 at {} B: o_s and o_r are not disjoint from the wire here (a send's system call carries the frame through the receiver's kernel on veth and loopback; large messages overlap their frames), so RTT/2 - o_s - o_r undercounts the latency",
                m.method,
                negative.join(", ")
            );
        }
        println!(
            "# {}: measuring end's transport retransmits {}, bad frames {}",
            m.method, m.counters.retransmits, m.counters.bad_frames
        );
    }
    println!("# L = RTT/2 − o_s − o_r (Eq. 5.1); g and G at each size, G = g/size = 1/bandwidth; BCL-3 (Dawning 3000: Power3-II 375 MHz, Myrinet) gives g for small messages and G at 128 KB");
    let measured = per_method.pop().ok_or("nothing measured")?;
    let reference = per_method.pop();
    let mut unified = None;
    let mut code = ExitCode::SUCCESS;
    if let Some(r) = &reference {
        let mut u = UnifiedPoll::compare(r, &measured, cli.tolerance);
        println!(
            "# unified poll: o_r of {} against shm, same run, alternating repetitions",
            measured.method
        );
        print!("{}", u.table(r, &measured));
        u.one_thread = one_thread(&plan);
        if let Some(o) = &u.one_thread {
            println!(
                "# one thread (bcl-or's measurement, {} B, batch {}, loopback): shm {:.0} ns, shm with udp polled too {:.0} ns ({:.2}x), udp {:.0} ns ({:.1}x shm); bare inbox {:.0}, kernel recv {:.0}",
                o.size,
                o.batch,
                o.shm_ns,
                o.shm_udp_polled_ns,
                o.shm_udp_polled_ns / o.shm_ns,
                o.udp_ns,
                o.udp_ns / o.shm_ns,
                o.bare_shm_ns,
                o.kernel_udp_ns
            );
        }
        println!(
            "# unified poll: {} within {:.0} % of shm{}",
            measured.method,
            cli.tolerance * 100.0,
            if u.within { "" } else { ": NO (exit status 1)" }
        );
        if !u.within {
            code = ExitCode::from(1);
        }
        unified = Some(u);
    }
    if let Some(path) = bcl_tools::job::report_path(&c.json) {
        let report = LoggpReport {
            tool: "bcl-loggp".into(),
            method: measured.method.clone(),
            mode: mode.into(),
            placement,
            host,
            timer_ns,
            plan: PlanReport::from(&plan),
            statistic: STATISTIC.into(),
            results: measured.results,
            model: measured.model,
            counters: measured.counters,
            reference,
            unified_poll: unified,
        };
        write_json(path, &report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(code)
}

/// `bcl-or`'s one-thread o_r at the smallest size, batch 1 (`None`, with a
/// note, where it cannot run, e.g. loopback down in a namespace).
fn one_thread(plan: &Plan) -> Option<OneThreadReport> {
    let size = plan.sizes.iter().copied().min()?;
    let messages = (plan.iters as usize).max(1000);
    match bcl_bench::recv_overhead::measure(size, 1, messages) {
        Ok(m) => Some(OneThreadReport {
            size: m.size,
            batch: m.batch,
            shm_ns: m.shm,
            shm_udp_polled_ns: m.shm_udp_polled,
            udp_ns: m.udp,
            bare_shm_ns: m.bare_shm,
            kernel_udp_ns: m.kernel_udp,
        }),
        Err(e) => {
            println!("# one thread (bcl-or's measurement): not measured: {e}");
            None
        }
    }
}

fn print_header(
    cli: &Cli,
    names: &[String],
    mode: &str,
    p: &Placement,
    host: &Host,
    timer_ns: f64,
) {
    let cpu = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("CPU {c}"));
    let mut place = match p.role.as_str() {
        "local" => format!(
            "local (server {}, client {})",
            cpu(p.server_cpu),
            cpu(p.client_cpu)
        ),
        "connect" => format!(
            "client {} connected to {}",
            cpu(p.client_cpu),
            p.peer.as_deref().unwrap_or("?")
        ),
        other => other.to_string(),
    };
    if let Some(c) = p.shm_server_cpu {
        place.push_str(&format!(", shm server CPU {c}"));
    }
    if let Some(ns) = &p.netns {
        place.push_str(&format!(" in netns {ns}"));
    }
    let commit = match (&host.commit, host.commit_dirty) {
        (Some(c), Some(true)) => format!("{} (with uncommitted changes)", short(c)),
        (Some(c), _) => short(c).to_string(),
        (None, _) => "unknown".into(),
    };
    println!(
        "# bcl-loggp: {}, mode {mode}; {place}; host {} ({} CPUs, {}), kernel {}, commit {commit}, load {:.2}",
        names.join(" and "),
        host.hostname,
        host.cpus,
        host.cpu_model,
        host.kernel,
        host.load_1min
    );
    let delay = cli
        .delay_us
        .map_or("1.5 round trips, at least 10 µs".to_string(), |d| {
            format!("{d} µs")
        });
    println!(
        "# {} repetition{}{}, each: {} round trips (after {}), {} receives of an echo already there (pause {delay}), {} bursts of {} sends, {} streams of up to {} messages / {} (g: their median); mean ± standard error over repetitions of per-repetition medians; clock reading ({timer_ns:.0} ns) subtracted from o_s and o_r",
        cli.reps,
        if cli.reps == 1 { "" } else { "s" },
        if names.len() > 1 { ", methods alternating" } else { "" },
        cli.iters,
        cli.warmup,
        cli.iters,
        cli.bursts,
        cli.burst,
        cli.streams,
        cli.stream,
        bytes(cli.volume)
    );
}

/// `n` bytes for a person: in KiB, MiB or GiB when a whole number of them.
fn bytes(n: usize) -> String {
    for (unit, name) in [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
    }
    format!("{n} bytes")
}

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["bcl-loggp", "--sizes", "8,64K", "--volume", "1M"]).unwrap();
        assert_eq!(cli.sizes.0, vec![8, 65536]);
        assert_eq!(cli.volume, 1 << 20);
        let cli = Cli::try_parse_from(["bcl-loggp", "--check-unified-poll"]).unwrap();
        assert!(check_args(&cli).unwrap_err().contains("network method"));
        let cli = Cli::try_parse_from(["bcl-loggp", "--method", "kernel-udp"]).unwrap();
        assert!(check_args(&cli).unwrap_err().contains("may drop"));
        let cli = Cli::try_parse_from(["bcl-loggp", "--reps", "0"]).unwrap();
        assert!(check_args(&cli).is_err());
        let cli =
            Cli::try_parse_from(["bcl-loggp", "--method", "udp", "--check-unified-poll"]).unwrap();
        assert!(check_args(&cli).is_ok());
    }

    #[test]
    fn methods_compare_with_bcl3s_path() {
        assert_eq!(bcl3_path("shm"), Bcl3Path::Intra);
        assert_eq!(bcl3_path("unix"), Bcl3Path::Intra);
        assert_eq!(bcl3_path("udp"), Bcl3Path::Inter);
        assert_eq!(bcl3_path("afxdp"), Bcl3Path::Inter);
        assert_eq!(bcl3_path("kernel-tcp"), Bcl3Path::Inter);
    }
}
