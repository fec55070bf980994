//! `bcl-pingpong`: round-trip latency of BCL, with HDR histograms.

use bcl::sim::{FabricConfig, FaultSpec, RealClock, SimClock, SimFabric};
use bcl::{Endpoint, JobKey, ProcessAddr};
use bcl_tools::args::SizeList;
use bcl_tools::pingpong::{run_client, serve_bcl, BclClient, ClientOutcome, PingOptions};
use bcl_tools::report::{latency_table, write_json, PingCounters, PingReport, PingResult};
use clap::{Parser, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Methods this tool can measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MethodArg {
    /// The in-process simulated fabric (both ends in this process, in real
    /// time, optionally with injected faults): measures the protocol's own
    /// CPU cost and its recovery from faults.
    Sim,
}

impl MethodArg {
    fn name(self) -> &'static str {
        match self {
            MethodArg::Sim => "sim",
        }
    }
}

/// Measure BCL's round-trip latency: the client sends a message, the server
/// echoes it, and every round trip is recorded in an HDR histogram.
///
/// Prints an OSU-style table of round-trip percentiles per message size (in
/// microseconds; one-way latency is half). With --json the same figures are
/// written in the stable shape scripts rely on.
#[derive(Parser, Debug)]
#[command(name = "bcl-pingpong", version, after_help = EXAMPLES)]
struct Cli {
    /// Transport method to measure.
    #[arg(long, value_enum, default_value = "sim")]
    method: MethodArg,

    /// Message sizes in bytes, comma-separated; K/M suffixes allowed.
    #[arg(long, default_value = "8,64,1024,4096,16K")]
    sizes: SizeList,

    /// Timed round trips per size.
    #[arg(long, default_value_t = 10_000)]
    iters: u64,

    /// Untimed round trips per size before the timed ones.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,

    /// Busy-poll for completions (the lowest latency). The sim method always
    /// busy-polls.
    #[arg(long)]
    busy_poll: bool,

    /// Start both ends in this process (the sim method always does).
    #[arg(long)]
    local: bool,

    /// Faults of the simulated wire (sim only), e.g.
    /// loss=0.1,reorder=0.05,dup=0.01,corrupt=0.001,delay=5us,jitter=1us,rate=10gbit,seed=7
    #[arg(long)]
    fault: Option<FaultSpec>,

    /// Largest BCL frame of the simulated wire, in bytes (sim only).
    #[arg(long, default_value_t = 1500)]
    mtu: usize,

    /// Give up on a reply after this many milliseconds (counted as lost).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,

    /// Write the results as JSON (see shared/contracts/tools.md).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Write each size's percentile distribution in HdrHistogram's .hgrm
    /// format; with several sizes, the size is added to the file name
    /// (lat.hgrm -> lat-64.hgrm).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
}

const EXAMPLES: &str = "Examples:
  bcl-pingpong --method sim
  bcl-pingpong --method sim --fault loss=0.2,reorder=0.1,dup=0.05,corrupt=0.01 --iters 20000 --json out.json";

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

/// Everything a finished run reports.
struct Finished {
    outcome: ClientOutcome,
    retransmits: u64,
    bad_frames: u64,
    notes: Vec<String>,
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    if cli.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    let opts = PingOptions {
        sizes: cli.sizes.0.clone(),
        iters: cli.iters,
        warmup: cli.warmup,
        timeout: Duration::from_millis(cli.timeout_ms),
    };
    let finished = match cli.method {
        MethodArg::Sim => run_sim(cli, &opts)?,
    };
    let mode = "busy-poll";
    let results: Vec<PingResult> = finished
        .outcome
        .results
        .iter()
        .map(|r| PingResult::new(r.size, r.iters, &r.latency.summary()))
        .collect();
    let c = finished.outcome.counters;
    let counters = PingCounters {
        sent: c.sent,
        received: c.received,
        lost: c.lost,
        duplicates: c.duplicates,
        corrupt: c.corrupt,
        retransmits: finished.retransmits,
        bad_frames: finished.bad_frames,
    };
    println!("# bcl-pingpong: method {}, mode {mode}", cli.method.name());
    for n in &finished.notes {
        println!("# {n}");
    }
    print!("{}", latency_table(&results));
    println!(
        "# first contact {:.2} µs; sent {} received {} lost {} duplicates {} corrupt {}; transport retransmits {} bad frames {}",
        finished.outcome.first_contact.as_nanos() as f64 / 1000.0,
        counters.sent,
        counters.received,
        counters.lost,
        counters.duplicates,
        counters.corrupt,
        counters.retransmits,
        counters.bad_frames
    );
    if let Some(path) = &cli.json {
        let report = PingReport {
            tool: "bcl-pingpong".into(),
            method: cli.method.name().into(),
            mode: mode.into(),
            results,
            first_contact_ns: finished.outcome.first_contact.as_nanos() as u64,
            counters,
        };
        write_json(path, &report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &cli.hgrm {
        for r in &finished.outcome.results {
            let file = hgrm_path(path, r.size, finished.outcome.results.len());
            let mut f = std::fs::File::create(&file)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            r.latency
                .write_hgrm(&mut f)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        }
    }
    let clean = c.lost == 0 && c.duplicates == 0 && c.corrupt == 0;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

/// Both ends in this process on a real-time simulated fabric, each end on
/// its own thread.
fn run_sim(cli: &Cli, opts: &PingOptions) -> Result<Finished, String> {
    let spec = cli.fault.clone().unwrap_or_default();
    let fabric = SimFabric::new(FabricConfig {
        mtu: cli.mtu,
        faults: spec.profile.clone(),
        seed: spec.seed,
        clock: SimClock::Real(RealClock::new()),
    });
    let job = JobKey(0x5151);
    let server_addr = ProcessAddr::new(2, 0);
    let client_addr = ProcessAddr::new(1, 0);
    let build = |addr| {
        Endpoint::builder(addr, job)
            .method(Box::new(fabric.endpoint()))
            .clock(fabric.clock())
            .build()
            .map_err(|e| e.to_string())
    };
    let mut server = build(server_addr)?;
    let mut client = build(client_addr)?;
    client.add_peer(server_addr, server.descriptors()[0].clone());

    let idle = opts.timeout.max(Duration::from_secs(30));
    let server_thread = std::thread::spawn(move || {
        let r = serve_bcl(&mut server, idle);
        let stats = *server.port().stats();
        (r, stats)
    });
    let outcome =
        run_client(&mut BclClient::new(&mut client, server_addr), opts).map_err(|e| e.to_string());
    let (served, server_stats) = server_thread
        .join()
        .map_err(|_| "server thread panicked".to_string())?;
    let outcome = outcome?;
    served.map_err(|e| format!("server: {e}"))?;
    let client_stats = *client.port().stats();
    let mut notes = vec![format!(
        "faults: {}",
        if cli.fault.is_some() {
            spec.to_string()
        } else {
            "none".into()
        }
    )];
    notes.push(format!("fabric: {}", fabric.stats()));
    Ok(Finished {
        outcome,
        retransmits: client_stats.retransmits + server_stats.retransmits,
        bad_frames: client_stats.bad_frames.total() + server_stats.bad_frames.total(),
        notes,
    })
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
