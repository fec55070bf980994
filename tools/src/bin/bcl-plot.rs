//! `bcl-plot`: draws several `--json` reports of `bcl-pingpong` or `bcl-bw`
//! on one chart, so that runs from one session (BCL and its baselines) are
//! compared at a glance.

use bcl_tools::args::parse_size;
use bcl_tools::plot::reports::{chart, PlotRequest};
use bcl_tools::plot::PlotFile;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Draw the --json reports of bcl-pingpong or bcl-bw on one chart, one
/// series per file, labelled by its tool, method and mode (and its channel
/// when not the system channel; the file name is added where two labels
/// would be equal): `bcl-pingpong udp (busy-poll)` beside
/// `bcl-pingpong kernel-udp (busy-poll)`.
///
/// bcl-pingpong reports become round-trip percentile curves: x is the
/// percentile as HdrHistogram's plotter draws it (1/(1-p) on a log scale:
/// 0%, 90%, 99%, 99.9%, ...), y the round trip in µs; every size of every
/// file, or one size with --size. Reports that carry the whole distribution
/// (the `distribution` field) are drawn in full, older ones through their
/// p50, p90, p99, p99.9 and max. bcl-bw reports become bandwidth (MB/s), or
/// with --rate message rate, against message size on a log axis.
///
/// Pingpong and bw reports do not share a chart. The chart's format is the
/// output file's extension: .svg or .png. Text is set in DejaVu Sans,
/// built into the tool (or the TrueType file named by $BCL_PLOT_FONT).
#[derive(Parser, Debug)]
#[command(name = "bcl-plot", version, after_help = EXAMPLES)]
struct Cli {
    /// The reports (bcl-pingpong --json or bcl-bw --json files), in legend
    /// order.
    #[arg(value_name = "FILE.json", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// The chart to write: FILE.svg or FILE.png.
    #[arg(short, long, value_name = "CHART")]
    output: PlotFile,

    /// bcl-pingpong reports: draw this message size only (K/M suffixes
    /// allowed); every report must have it.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    size: Option<usize>,

    /// bcl-bw reports: draw message rate (messages/s, log scale) instead of
    /// bandwidth.
    #[arg(long)]
    rate: bool,

    /// The chart's caption (default: what it shows).
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
}

const EXAMPLES: &str = "Examples:
  bcl-pingpong --method shm --local --busy-poll --pin 1,0 --sizes 8 --json shm.json
  bcl-pingpong --method spin --local --pin 1,0 --sizes 8 --json spin.json
  bcl-plot shm.json spin.json -o shm-vs-spin.svg
  bcl-plot udp.json kernel-udp.json --size 64 -o lat.png
  bcl-plot bw-packet.json bw-kernel-tcp.json --rate -o rate.svg";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let req = PlotRequest {
        files: cli.files,
        size: cli.size,
        rate: cli.rate,
        title: cli.title,
    };
    match chart(&req).and_then(|c| c.write(&cli.output)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-plot: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "bcl-plot", "a.json", "b.json", "-o", "c.svg", "--size", "1K",
        ])
        .unwrap();
        assert_eq!(cli.files.len(), 2);
        assert_eq!(cli.size, Some(1024));
        let err = Cli::try_parse_from(["bcl-plot", "a.json", "-o", "c.pdf"]).unwrap_err();
        assert!(err.to_string().contains("c.pdf"), "{err}");
        let err = Cli::try_parse_from(["bcl-plot", "-o", "c.svg"]).unwrap_err();
        assert!(err.to_string().contains("FILE.json"), "{err}");
    }
}
