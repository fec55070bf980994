//! `bcl-bw`: unidirectional streaming bandwidth of BCL and of the kernel
//! baselines, BCL-3's method.

use bcl_tools::args::{parse_size, SizeList};
use bcl_tools::bw::channels::MAX_DEPTH;
use bcl_tools::bw::{
    plan, run_receiver, run_sender_observed, BwOptions, BwOutcome, ChannelKind, MIN_SIZE,
};
use bcl_tools::cli::{CommonArgs, Role};
use bcl_tools::end::{Baseline, MethodArg};
use bcl_tools::launch::{pin_current_thread, run_in_lab, spawn_pinned, split_pins};
use bcl_tools::methods::{open_client, open_local_pair, serve_one};
use bcl_tools::plot::{run_label, size_label, Chart, PlotFile, Quantity, SizePanel, SizeSeries};
use bcl_tools::report::{
    bandwidth_table, write_json, BwCounters, BwReport, BwResult, RailReport, VerifyReport,
};
use bcl_tools::transport::{Transport, TransportCounters};
use clap::Parser;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Large buffers (the messages of normal and open channels) live in shared
/// memory, so a receiver on this node copies them straight from the
/// sender's buffer (one copy; `--no-shared-heap` turns it off).
#[global_allocator]
static HEAP: bcl::shm::heap::SharedHeap = bcl::shm::heap::SharedHeap::new();

/// Measure unidirectional streaming bandwidth: the connecting side streams
/// windows of messages, the serving side acknowledges each window once its
/// volume has arrived (BCL-3's method), and the sender times the windows.
///
/// BCL is measured over any method of the registry (--method; --help lists
/// them), with its data messages on the system channel (eager), on normal
/// channels (rendezvous into buffers the receiver posts) or on an open
/// channel (RMA puts into a region the receiver registered): --channel. The
/// baselines (kernel-udp, kernel-tcp, unix, spin, afxdp-raw, packet-raw) run the very
/// same loop without BCL. Prints an
/// OSU-style table (MB/s = 10^6 bytes per second). With --verify every
/// message carries a sequence number and a CRC32C, and the receiver counts
/// delivered, lost, duplicated, out-of-order and corrupted messages; both
/// sides print the same counts, and the exit status is non-zero unless all
/// arrived exactly once, in order, intact.
#[derive(Parser, Debug)]
#[command(name = "bcl-bw", version, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Message sizes in bytes, comma-separated; K/M suffixes allowed; at
    /// least 16 bytes (the per-message header).
    #[arg(long, default_value = "64,1024,8192,64K")]
    sizes: SizeList,

    /// Timed windows per size.
    #[arg(long, default_value_t = 100)]
    iters: u64,

    /// Untimed windows per size before the timed ones.
    #[arg(long, default_value_t = 10)]
    warmup: u64,

    /// Messages per window (the receiver acknowledges every window).
    #[arg(long, default_value_t = 64)]
    window: u32,

    /// Sequence number and CRC32C in every message; the receiver checks and
    /// counts (exit status 1 if anything was lost, duplicated, reordered or
    /// corrupted).
    #[arg(long)]
    verify: bool,

    /// Where BCL's data messages land: `system` (eager sends, up to the
    /// eager limit), `normal` (the receiver posts a buffer per message on
    /// one of --channels normal channels; rendezvous) or `open` (the sender
    /// puts messages into a ring of --channels slots the receiver
    /// registered; RMA). Control messages use the system channel. The
    /// server follows the client's choice. Kernel baselines have no
    /// channels.
    #[arg(long, value_enum, default_value = "system")]
    channel: ChannelKind,

    /// Normal and open channels: messages in flight (normal: channels, each
    /// with one posted buffer; open: slots of the region). Default: per
    /// size, about 4 MiB in flight, 2 to 16.
    #[arg(long, value_name = "N")]
    channels: Option<usize>,

    /// Instead of --iters windows of --window messages, time about BYTES per
    /// size (K/M/G suffixes): windows of at most BYTES/16 (at least one
    /// message, at most --window), as many as move BYTES, and a tenth as
    /// many warm-up windows (at most --warmup). For sweeps up to large
    /// sizes.
    #[arg(long, value_name = "BYTES", value_parser = parse_volume)]
    volume: Option<u64>,

    /// The sending side writes FILE: one line per window acknowledged
    /// (warm-up included), `UNIX_NS BYTES` — the wall-clock time in
    /// nanoseconds and the bytes acknowledged so far — to see bandwidth
    /// over time (for example around a rail taken down).
    #[arg(long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,

    /// After the run, the sending side also times memcpy of each size (one
    /// buffer into another, best of 5 trials of about --volume (or 256 MiB)
    /// / 5 bytes per size, in the same pinned thread): the baseline of
    /// shared-memory methods, printed and written as memcpy_mbytes_per_s.
    #[arg(long)]
    memcpy: bool,

    /// Allocate message buffers in private memory. By default buffers of
    /// 256 KiB and more are allocated in shared memory (bcl-shm's shared
    /// heap), so that over the shm method the receiver copies a message
    /// straight from the sender's buffer into its own (one copy); without
    /// it, messages go through the exchange queue (two pipelined copies).
    /// Matters on the sending side.
    #[arg(long)]
    no_shared_heap: bool,

    /// Draw bandwidth (MB/s) and message rate against message size (log
    /// axes of size), one panel each, with memcpy beside the bandwidth when
    /// --memcpy measured it. FILE.svg or FILE.png, by extension. Written by
    /// the sending (--connect) side, which has the measurements.
    #[arg(long, value_name = "FILE")]
    plot: Option<PlotFile>,
}

/// memcpy bandwidth (10^6 bytes per second) of `size`-byte copies: the
/// best of 5 trials of about `volume` / 5 bytes each, after a warm-up copy
/// (the best, because a trial the scheduler interrupts says nothing about
/// memcpy).
fn memcpy_rate(size: usize, volume: u64) -> f64 {
    // Plain private memory, as any program's memcpy.
    let shared = bcl::shm::heap::enabled();
    bcl::shm::heap::set_enabled(false);
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; size];
    bcl::shm::heap::set_enabled(shared);
    dst.copy_from_slice(&src);
    let n = (volume / 5 / size.max(1) as u64).max(1);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..n {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        let s = t0.elapsed().as_secs_f64();
        if s > 0.0 {
            best = best.max((n * size as u64) as f64 / s / 1e6);
        }
    }
    best
}

fn parse_volume(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err("--volume must be at least 1 byte".into()),
        v => Ok(v as u64),
    }
}

const EXAMPLES: &str = "Examples:
  bcl-bw --method udp --local --verify
  bcl-bw --method shm --local --busy-poll --pin 1,0 --sizes 64,1K,8K,64K --plot bw.svg
  bcl-bw --method sim --channel normal --sizes 64K,1M,16M --volume 256M --verify
  bcl-bw --method packet --lab configs/lab/pair.toml --nodes b,a --channel open --sizes 1M --verify
  bcl-bw --method packet --lab configs/lab/pair.toml --nodes a,b --sizes 64K --busy-poll --pin 1,0 --json bw.json
  bcl-bw --method kernel-tcp --lab configs/lab/pair.toml --nodes a,b --sizes 64K";

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bcl-bw: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    let c = &cli.common;
    if cli.plot.is_some() {
        if c.serve {
            return Err("--plot: the serving side receives and measures nothing; give --plot to the --connect side (or run --local or --lab)".into());
        }
        // Before measuring: a chart that cannot be drawn should not cost a run.
        bcl_tools::plot::font::load()?;
    }
    bcl::shm::heap::set_enabled(!cli.no_shared_heap);
    if cli.iters == 0 || cli.window == 0 {
        return Err("--iters and --window must be at least 1".into());
    }
    if let Some(s) = cli.sizes.0.iter().find(|s| **s < MIN_SIZE) {
        return Err(format!(
            "--sizes: {s} is below the minimum of {MIN_SIZE} bytes (the per-message header)"
        ));
    }
    let largest_channel_message = u32::MAX as usize;
    if cli.channel != ChannelKind::System {
        if let Some(s) = cli.sizes.0.iter().find(|s| **s > largest_channel_message) {
            return Err(format!(
                "--sizes: {s} bytes exceeds the largest message of a {} channel ({largest_channel_message} bytes: BCL's message length has 32 bits)",
                cli.channel.name()
            ));
        }
    }
    if let Some(n) = cli.channels {
        if cli.channel == ChannelKind::System {
            return Err("--channels applies to --channel normal and --channel open".into());
        }
        if !(1..=MAX_DEPTH).contains(&n) {
            return Err(format!("--channels {n}: must be 1..={MAX_DEPTH}"));
        }
    }
    // Under bcl-run: rank 0 streams to rank 1 over the job's method.
    let job = bcl_tools::job::join(&c.spec())?;
    let role = if job.is_some() {
        Role::Local
    } else {
        c.role()?
    };
    let spec = c.spec();
    let timeout = Duration::from_millis(c.timeout_ms);
    let wait_client = Duration::from_secs(c.wait_client_s);
    let opts = BwOptions {
        sizes: cli.sizes.0.clone(),
        windows: cli.iters,
        warmup: cli.warmup,
        window: cli.window,
        verify: cli.verify,
        lossy: c.method == MethodArg::Baseline(Baseline::KernelUdp),
        timeout,
        channel: cli.channel,
        depth: cli.channels,
        volume: cli.volume,
    };
    let pins = c.pins();
    let check_sizes = |t: &mut dyn Transport| -> Result<(), String> {
        if cli.channel != ChannelKind::System {
            return match t.channels().is_some() {
                true => Ok(()),
                false => Err(format!(
                    "--channel {}: method {} is a baseline without BCL's channels (its messages go over one socket or link); leave --channel out",
                    cli.channel.name(),
                    c.method.name()
                )),
            };
        }
        match opts.sizes.iter().find(|s| **s > t.max_message()) {
            Some(s) if t.channels().is_some() => Err(format!(
                "--sizes: {s} bytes exceeds the largest message of BCL's system channel over method {} here ({} bytes, the eager limit: a message must fit one receive window of frames); larger messages go through normal channels: add --channel normal",
                c.method.name(),
                t.max_message()
            )),
            Some(s) => Err(format!(
                "--sizes: {s} bytes exceeds the largest message of method {} ({} bytes)",
                c.method.name(),
                t.max_message()
            )),
            None => Ok(()),
        }
    };
    match job {
        Some(bcl_tools::job::JobEnd::Client(mut t)) => {
            check_sizes(&mut *t)?;
            let out = send(&mut *t, &opts, cli.timeline.as_deref())?;
            return finish(
                cli,
                "sender",
                &out,
                Some(t.counters()),
                t.channels().is_some(),
                t.rails(),
            );
        }
        Some(bcl_tools::job::JobEnd::Server(mut t)) => {
            let out = run_receiver(&mut *t, wait_client, timeout).map_err(|e| e.to_string())?;
            let rails = t.rails();
            return finish(cli, "receiver", &out, None, t.channels().is_some(), rails);
        }
        Some(bcl_tools::job::JobEnd::Idle) => return Ok(ExitCode::SUCCESS),
        None => {}
    }
    match role {
        Role::Lab(file, nodes) => run_in_lab(&file, &nodes, pins),
        Role::Serve => {
            let cpu = pins.and_then(|p| p.first().copied());
            let mut t = serve_one(&spec, cpu, wait_client)?;
            let out = run_receiver(&mut *t, wait_client, timeout).map_err(|e| e.to_string())?;
            if c.stats {
                println!("{}", t.details());
            }
            let rails = t.rails();
            finish(cli, "receiver", &out, None, t.channels().is_some(), rails)
        }
        Role::Connect(descriptor) => {
            if let Some(cpu) = pins.and_then(|p| p.first()) {
                pin_current_thread(*cpu)?;
            }
            let mut t = open_client(&spec, &descriptor, Instant::now() + timeout)?;
            check_sizes(&mut *t)?;
            let out = send(&mut *t, &opts, cli.timeline.as_deref())?;
            if c.stats {
                println!("{}", t.details());
            }
            finish(
                cli,
                "sender",
                &out,
                Some(t.counters()),
                t.channels().is_some(),
                t.rails(),
            )
        }
        Role::Local => {
            let (served, mut client) = open_local_pair(&spec)?;
            check_sizes(&mut *client)?;
            let (server_cpu, client_cpu) = split_pins(pins);
            let stats = c.stats;
            let receiver = spawn_pinned(server_cpu, move || -> Result<BwOutcome, String> {
                let mut t = served.accept(Instant::now() + wait_client)?;
                let out = run_receiver(&mut *t, wait_client, timeout)
                    .map_err(|e| format!("receiver: {e}"));
                if stats {
                    println!("# receiver:\n{}", t.details());
                }
                out
            });
            if let Some(cpu) = client_cpu {
                pin_current_thread(cpu)?;
            }
            let out = send(&mut *client, &opts, cli.timeline.as_deref());
            if c.stats {
                println!("# sender:\n{}", client.details());
            }
            receiver
                .join()
                .map_err(|_| "receiver thread panicked".to_string())??
                .map(drop)?;
            finish(
                cli,
                "sender",
                &out?,
                Some(client.counters()),
                client.channels().is_some(),
                client.rails(),
            )
        }
    }
}

/// Streams the sweep, with a progress bar over every size's windows
/// (warm-up and timed) on standard error when it is a terminal.
fn send(
    t: &mut dyn Transport,
    opts: &BwOptions,
    timeline: Option<&std::path::Path>,
) -> Result<BwOutcome, String> {
    let windows = opts
        .sizes
        .iter()
        .map(|s| {
            let p = plan(opts, *s);
            p.warmup + p.windows
        })
        .sum();
    let bar = bcl_tools::progress::bar(windows, "bcl-bw");
    let mut current = None;
    let mut acknowledged = 0u64;
    // Written as windows complete (one short line every window), so that
    // a script can watch the stream while it runs.
    let mut file = match timeline {
        Some(path) => Some(
            std::fs::File::create(path)
                .map_err(|e| format!("--timeline: cannot create {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut write_failed = None;
    let out = run_sender_observed(t, opts, &mut |size| {
        if current != Some(size) {
            current = Some(size);
            bar.set_message(size_label(size));
        }
        bar.inc(1);
        if let Some(f) = file.as_mut() {
            use std::io::Write;
            acknowledged += size as u64 * u64::from(plan(opts, size).window);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            if let Err(e) = writeln!(f, "{now} {acknowledged}") {
                write_failed.get_or_insert(e);
            }
        }
    });
    bar.finish_and_clear();
    if let (Some(e), Some(path)) = (write_failed, timeline) {
        return Err(format!("--timeline: cannot write {}: {e}", path.display()));
    }
    out.map_err(|e| e.to_string())
}

/// The --plot chart: bandwidth and message rate against size (memcpy
/// beside the bandwidth when measured).
fn bw_chart(cli: &Cli, results: &[BwResult], channel: Option<&str>) -> Chart {
    let c = &cli.common;
    let method = bcl_tools::job::method_name(c.method.name());
    let label = run_label(method, channel, Some(c.mode_name()));
    let series = |f: &dyn Fn(&BwResult) -> f64| SizeSeries {
        label: label.clone(),
        points: results.iter().map(|r| (r.size, f(r))).collect(),
    };
    let mut bandwidth = vec![series(&|r| r.mbytes_per_s)];
    if results.iter().any(|r| r.memcpy_mbytes_per_s.is_some()) {
        bandwidth.push(SizeSeries {
            label: "memcpy (same run)".into(),
            points: results
                .iter()
                .filter_map(|r| r.memcpy_mbytes_per_s.map(|m| (r.size, m)))
                .collect(),
        });
    }
    let channel = channel.map_or(String::new(), |ch| format!(", {ch} channel"));
    Chart::Size {
        title: format!("bcl-bw: {method}{channel}, {}", c.mode_name()),
        panels: vec![
            SizePanel {
                quantity: Quantity::Bandwidth,
                series: bandwidth,
            },
            SizePanel {
                quantity: Quantity::Rate,
                series: vec![series(&|r| r.msgs_per_s)],
            },
        ],
    }
}

/// Prints and writes one side's results; the exit status follows --verify.
fn finish(
    cli: &Cli,
    role: &str,
    out: &BwOutcome,
    own: Option<TransportCounters>,
    bcl: bool,
    rails: Vec<RailReport>,
) -> Result<ExitCode, String> {
    let c = &cli.common;
    let results: Vec<BwResult> = out
        .results
        .iter()
        .map(|r| {
            let mut b = BwResult::new(r.size, r.messages, r.seconds).with_plan(r.window, r.depth);
            if cli.memcpy {
                b.memcpy_mbytes_per_s = Some(memcpy_rate(r.size, cli.volume.unwrap_or(256 << 20)));
            }
            b
        })
        .collect();
    let own = own.unwrap_or_default();
    let counters = BwCounters {
        retransmits: out.receiver.retransmits + own.retransmits,
        bad_frames: out.receiver.bad_frames + own.bad_frames,
        data_frames: out.receiver.data_frames + own.data_frames,
        congestion_decreases: out.receiver.congestion_decreases + own.congestion_decreases,
        pacing_waits: out.receiver.pacing_waits + own.pacing_waits,
    };
    let v = out.verify;
    let verify = cli.verify.then_some(VerifyReport {
        delivered: v.delivered,
        lost: v.lost,
        duplicated: v.duplicated,
        out_of_order: v.out_of_order,
        corrupted: v.corrupted,
    });
    let channel = if bcl {
        format!(", channel {}", out.channel.name())
    } else {
        String::new()
    };
    println!(
        "# bcl-bw: method {}{channel}, mode {}, {role}, window {} messages",
        bcl_tools::job::method_name(c.method.name()),
        c.mode_name(),
        cli.window
    );
    if out
        .results
        .iter()
        .any(|r| r.depth.is_some() || r.window != cli.window)
    {
        let plan: Vec<String> = out
            .results
            .iter()
            .map(|r| match r.depth {
                Some(d) => format!("{}: window {} in flight {d}", r.size, r.window),
                None => format!("{}: window {}", r.size, r.window),
            })
            .collect();
        println!("# per size: {}", plan.join(", "));
    }
    if !results.is_empty() {
        print!("{}", bandwidth_table(&results));
    }
    if let Some(v) = &verify {
        println!(
            "# verify: delivered {} lost {} duplicated {} out_of_order {} corrupted {}",
            v.delivered, v.lost, v.duplicated, v.out_of_order, v.corrupted
        );
    }
    println!(
        "# transport retransmits {} bad frames {}",
        counters.retransmits, counters.bad_frames
    );
    for (i, r) in rails.iter().enumerate() {
        println!(
            "# rail {i}: {} {} {}: sent {} bytes in {} frames, {} acknowledged, received {} frames, out of service {} times",
            r.method, r.local, r.state, r.bytes_sent, r.frames_sent, r.bytes_delivered, r.frames_received, r.downs
        );
    }
    if let Some(path) = bcl_tools::job::report_path(&c.json) {
        let report = BwReport {
            tool: "bcl-bw".into(),
            method: bcl_tools::job::method_name(c.method.name()).into(),
            channel: out.channel.name().into(),
            mode: c.mode_name().into(),
            role: role.into(),
            results: results.clone(),
            verify,
            counters,
            rails,
        };
        write_json(path, &report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(file) = cli.plot.as_ref().filter(|_| role == "sender") {
        let channel = bcl.then(|| out.channel.name());
        bw_chart(cli, &results, channel).write(file)?;
    }
    Ok(if cli.verify && !v.is_clean() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["bcl-bw", "--sizes", "64,64K", "--verify"]).unwrap();
        assert_eq!(cli.sizes.0, vec![64, 65536]);
        assert!(cli.verify);
        assert_eq!(cli.channel, ChannelKind::System);
        let cli = Cli::try_parse_from([
            "bcl-bw",
            "--channel",
            "normal",
            "--channels",
            "4",
            "--volume",
            "1G",
        ])
        .unwrap();
        assert_eq!(cli.channel, ChannelKind::Normal);
        assert_eq!(cli.channels, Some(4));
        assert_eq!(cli.volume, Some(1 << 30));
        let err = Cli::try_parse_from(["bcl-bw", "--channel", "rdma"]).unwrap_err();
        assert!(err.to_string().contains("normal"), "{err}");
        let err = Cli::try_parse_from(["bcl-bw", "--window", "x"]).unwrap_err();
        assert!(err.to_string().contains("--window"), "{err}");
    }
}
