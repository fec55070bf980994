//! `bcl-pingpong`: round-trip latency of BCL and of the kernel baselines,
//! with HDR histograms.

use bcl_tools::args::SizeList;
use bcl_tools::cli::{CommonArgs, Role};
use bcl_tools::launch::{pin_current_thread, run_in_lab, spawn_pinned, split_pins};
use bcl_tools::methods::{open_client, open_local_pair, serve_one};
use bcl_tools::pingpong::{run_client, serve_echo, ClientOutcome, PingOptions, TransportClient};
use bcl_tools::plot::{size_label, Chart, LatencySeries, PlotFile};
use bcl_tools::report::{latency_table, write_json, PingCounters, PingReport, PingResult};
use bcl_tools::transport::BoxTransport;
use bcl_tools::transport::TransportCounters;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Measure round-trip latency: the client sends a message, the server
/// echoes it, and every round trip is recorded in an HDR histogram.
///
/// BCL is measured over any method of the registry (--method; --help lists
/// them); the baselines (kernel-udp, kernel-tcp, unix, spin, afxdp-raw, packet-raw) run
/// the very same timing loop without BCL.
/// Prints an OSU-style table of round-trip percentiles per message size (in
/// microseconds; one-way latency is half). With --json the same figures are
/// written in the stable shape scripts rely on.
#[derive(Parser, Debug)]
#[command(name = "bcl-pingpong", version, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Message sizes in bytes, comma-separated; K/M suffixes allowed.
    #[arg(long, default_value = "8,64,1024,4096,16K")]
    sizes: SizeList,

    /// Timed round trips per size.
    #[arg(long, default_value_t = 10_000)]
    iters: u64,

    /// Untimed round trips per size before the timed ones.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,

    /// Write each size's percentile distribution in HdrHistogram's .hgrm
    /// format; with several sizes, the size is added to the file name
    /// (lat.hgrm -> lat-64.hgrm).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,

    /// Draw the round trips' percentile distribution, one curve per size:
    /// x is the percentile as HdrHistogram's plotter draws it (1/(1-p) on a
    /// log scale: 0%, 90%, 99%, 99.9%, ...), y the round trip in µs. FILE.svg
    /// or FILE.png, by extension. Written by the measuring (--connect) side.
    #[arg(long, value_name = "FILE")]
    plot: Option<PlotFile>,
}

const EXAMPLES: &str = "Examples:
  bcl-pingpong --method sim --fault loss=0.2,reorder=0.1 --iters 20000
  bcl-pingpong --method udp --local --busy-poll --sizes 64
  bcl-pingpong --method shm --local --busy-poll --pin 1,0 --sizes 8,1K --plot shm.svg
  bcl-pingpong --method packet --lab configs/lab/pair.toml --nodes a,b --busy-poll --pin 1,0 --json out.json
  # two ends by hand, in two namespaces:
  ip netns exec bl-pair.a bcl-pingpong --method packet --serve          # prints listening: packet:02:bc:..
  ip netns exec bl-pair.b bcl-pingpong --method packet --connect packet:02:bc:01:00:00:01/2";

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bcl-pingpong: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    if cli.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    let c = &cli.common;
    if cli.plot.is_some() {
        if c.serve {
            return Err("--plot: the serving side measures nothing; give --plot to the --connect side (or run --local or --lab)".into());
        }
        // Before measuring: a chart that cannot be drawn should not cost a run.
        bcl_tools::plot::font::load()?;
    }
    // Under bcl-run: rank 0 measures against rank 1 over the job's method.
    if let Some(end) = bcl_tools::job::join(&c.spec())? {
        let timeout = Duration::from_millis(c.timeout_ms);
        return match end {
            bcl_tools::job::JobEnd::Client(mut t) => {
                let opts = PingOptions {
                    sizes: cli.sizes.0.clone(),
                    iters: cli.iters,
                    warmup: cli.warmup,
                    timeout,
                };
                check_sizes(
                    &opts.sizes,
                    t.max_message(),
                    bcl_tools::job::method_name(""),
                )?;
                let outcome = run_client(&mut TransportClient::new(&mut *t), &opts)
                    .map_err(|e| e.to_string())?;
                finish(cli, outcome, t.counters(), None)
            }
            bcl_tools::job::JobEnd::Server(mut t) => {
                let wait = Duration::from_secs(c.wait_client_s);
                serve_echo(&mut *t, wait, timeout).map_err(|e| e.to_string())?;
                Ok(ExitCode::SUCCESS)
            }
            bcl_tools::job::JobEnd::Idle => Ok(ExitCode::SUCCESS),
        };
    }
    let role = c.role()?;
    let spec = c.spec();
    let timeout = Duration::from_millis(c.timeout_ms);
    let wait_client = Duration::from_secs(c.wait_client_s);
    let opts = PingOptions {
        sizes: cli.sizes.0.clone(),
        iters: cli.iters,
        warmup: cli.warmup,
        timeout,
    };
    let pins = c.pins();
    match role {
        Role::Lab(file, nodes) => run_in_lab(&file, &nodes, pins),
        Role::Serve => {
            let cpu = pins.and_then(|p| p.first().copied());
            let mut t = serve_one(&spec, cpu, wait_client)?;
            let echoed = serve_echo(&mut *t, wait_client, timeout).map_err(|e| e.to_string())?;
            let tc = t.counters();
            if c.stats {
                println!("{}", t.details());
            }
            println!(
                "# served {echoed} messages; transport retransmits {} bad frames {}",
                tc.retransmits, tc.bad_frames
            );
            Ok(ExitCode::SUCCESS)
        }
        Role::Connect(descriptor) => {
            if let Some(cpu) = pins.and_then(|p| p.first()) {
                pin_current_thread(*cpu)?;
            }
            let mut t = open_client(&spec, &descriptor, Instant::now() + timeout)?;
            check_sizes(&opts.sizes, t.max_message(), c.method.name())?;
            let outcome =
                run_client(&mut TransportClient::new(&mut *t), &opts).map_err(|e| e.to_string())?;
            finish(cli, outcome, t.counters(), None)
        }
        Role::Local => {
            let (served, mut client) = open_local_pair(&spec)?;
            check_sizes(&opts.sizes, client.max_message(), c.method.name())?;
            let (server_cpu, client_cpu) = split_pins(pins);
            let stats = c.stats;
            let server = spawn_pinned(server_cpu, move || -> Result<TransportCounters, String> {
                let mut t: BoxTransport = served.accept(Instant::now() + wait_client)?;
                serve_echo(&mut *t, wait_client, timeout).map_err(|e| format!("server: {e}"))?;
                if stats {
                    println!("# server:\n{}", t.details());
                }
                Ok(t.counters())
            });
            if let Some(cpu) = client_cpu {
                pin_current_thread(cpu)?;
            }
            let outcome = run_client(&mut TransportClient::new(&mut *client), &opts)
                .map_err(|e| e.to_string());
            if c.stats {
                println!("# client:\n{}", client.details());
            }
            let server = server
                .join()
                .map_err(|_| "server thread panicked".to_string())??;
            let server_counters = server?;
            finish(cli, outcome?, client.counters(), Some(server_counters))
        }
    }
}

/// Refuses sizes the transport cannot carry, before anything is sent.
fn check_sizes(sizes: &[usize], max: usize, method: &str) -> Result<(), String> {
    match sizes.iter().find(|s| **s > max) {
        Some(s) => Err(format!(
            "--sizes: {s} bytes exceeds the largest message of method {method} ({max} bytes)"
        )),
        None => Ok(()),
    }
}

/// Prints and writes the results of the client side.
fn finish(
    cli: &Cli,
    outcome: ClientOutcome,
    client: TransportCounters,
    server: Option<TransportCounters>,
) -> Result<ExitCode, String> {
    let c = &cli.common;
    let mode = c.mode_name();
    let results: Vec<PingResult> = outcome
        .results
        .iter()
        .map(|r| {
            PingResult::new(r.size, r.iters, &r.latency.summary())
                .with_distribution(r.latency.distribution())
        })
        .collect();
    let s = server.unwrap_or_default();
    let a = outcome.counters;
    let counters = PingCounters {
        sent: a.sent,
        received: a.received,
        lost: a.lost,
        duplicates: a.duplicates,
        corrupt: a.corrupt,
        retransmits: client.retransmits + s.retransmits,
        bad_frames: client.bad_frames + s.bad_frames,
    };
    println!(
        "# bcl-pingpong: method {}, mode {mode}",
        bcl_tools::job::method_name(c.method.name())
    );
    if let Some(f) = &c.fault {
        println!("# faults: {f}");
    }
    print!("{}", latency_table(&results));
    println!(
        "# first contact {:.2} µs; sent {} received {} lost {} duplicates {} corrupt {}; transport retransmits {} bad frames {}",
        outcome.first_contact.as_nanos() as f64 / 1000.0,
        counters.sent,
        counters.received,
        counters.lost,
        counters.duplicates,
        counters.corrupt,
        counters.retransmits,
        counters.bad_frames
    );
    if let Some(path) = &c.json {
        let report = PingReport {
            tool: "bcl-pingpong".into(),
            method: bcl_tools::job::method_name(c.method.name()).into(),
            mode: mode.into(),
            results,
            first_contact_ns: outcome.first_contact.as_nanos() as u64,
            counters,
        };
        write_json(path, &report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &cli.hgrm {
        for r in &outcome.results {
            let file = hgrm_path(path, r.size, outcome.results.len());
            let mut f = std::fs::File::create(&file)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            r.latency
                .write_hgrm(&mut f)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        }
    }
    if let Some(file) = &cli.plot {
        latency_chart(c, &outcome).write(file)?;
    }
    let clean = a.lost == 0 && a.duplicates == 0 && a.corrupt == 0;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The --plot chart: one percentile curve per size.
fn latency_chart(c: &CommonArgs, outcome: &ClientOutcome) -> Chart {
    let series = outcome
        .results
        .iter()
        .map(|r| LatencySeries {
            label: size_label(r.size),
            count: r.latency.summary().count,
            points: r.latency.distribution(),
        })
        .collect();
    Chart::Latency {
        title: format!(
            "bcl-pingpong: {} ({}), round trip by percentile",
            bcl_tools::job::method_name(c.method.name()),
            c.mode_name()
        ),
        series,
    }
}

/// The .hgrm file for `size`: the given name when there is one size.
fn hgrm_path(path: &Path, size: usize, sizes: usize) -> PathBuf {
    if sizes == 1 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("latency");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("hgrm");
    path.with_file_name(format!("{stem}-{size}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["bcl-pingpong", "--sizes", "8,1K"]).unwrap();
        assert_eq!(cli.sizes.0, vec![8, 1024]);
        let err = Cli::try_parse_from(["bcl-pingpong", "--sizes", "8,zero"]).unwrap_err();
        assert!(err.to_string().contains("not a size"), "{err}");
        let err = Cli::try_parse_from(["bcl-pingpong", "--fault", "loss=2"]).unwrap_err();
        assert!(err.to_string().contains("loss"), "{err}");
        let err = Cli::try_parse_from(["bcl-pingpong", "--serve", "--connect", "udp:1.2.3.4:5"])
            .unwrap_err();
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        let err = Cli::try_parse_from(["bcl-pingpong", "--lab", "x.toml"]).unwrap_err();
        assert!(err.to_string().contains("--nodes"), "{err}");
        let cli = Cli::try_parse_from(["bcl-pingpong", "--method", "udp"]).unwrap();
        assert!(cli.common.role().unwrap_err().contains("--serve"));
        let cli = Cli::try_parse_from([
            "bcl-pingpong",
            "--method",
            "kernel-tcp",
            "--fault",
            "loss=0.1",
        ])
        .unwrap();
        assert!(cli.common.role().unwrap_err().contains("sim method only"));
        let cli = Cli::try_parse_from([
            "bcl-pingpong",
            "--method",
            "packet",
            "--pin",
            "1,0",
            "--lab",
            "f",
            "--nodes",
            "a,b",
        ])
        .unwrap();
        assert_eq!(cli.common.pins(), Some(&[1, 0][..]));
        assert_eq!(
            cli.common.role().unwrap(),
            Role::Lab("f".into(), ("a".into(), "b".into()))
        );
    }

    #[test]
    fn hgrm_files_are_named_per_size() {
        assert_eq!(
            hgrm_path(Path::new("/t/lat.hgrm"), 64, 1),
            PathBuf::from("/t/lat.hgrm")
        );
        assert_eq!(
            hgrm_path(Path::new("/t/lat.hgrm"), 64, 2),
            PathBuf::from("/t/lat-64.hgrm")
        );
    }
}
