//! `bcl-or`: the receive overhead o_r (LogGP's receiver CPU time per
//! message) of BCL over shared memory and over UDP, next to the bare
//! mechanism underneath each, measured in one thread so that no scheduling
//! between processes enters the figure. The measurement is
//! [`bcl_bench::recv_overhead`] (its documentation says how); this program
//! prints it per size and batch.

use bcl_bench::recv_overhead::{measure, LARGE, MAX_LARGE_BATCH};
use clap::Parser;

/// Measure the receive overhead o_r of BCL (shm, udp) against the bare inbox
/// and kernel UDP receives.
#[derive(Parser, Debug)]
#[command(name = "bcl-or", version)]
struct Cli {
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,1024")]
    sizes: Vec<usize>,
    /// Messages in flight per timed batch (1 = a message per progress
    /// round). At most 16 for messages larger than an inbox slot (232 bytes):
    /// each takes a chunk of the 16-chunk exchange queue, and the sender
    /// cannot run ahead of a receiver that is not polling.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    batches: Vec<usize>,
    /// Messages timed per size and batch.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
}

fn main() {
    let cli = Cli::parse();
    if cli.sizes.iter().any(|&s| s >= LARGE) && cli.batches.iter().any(|&b| b > MAX_LARGE_BATCH) {
        eprintln!(
            "bcl-or: --batches above {MAX_LARGE_BATCH} need --sizes below {LARGE} (see --help)"
        );
        std::process::exit(2);
    }
    println!("# bcl-or: receive overhead o_r, ns per message (one thread; receiver timed with the messages already there)");
    println!(
        "{:>8} {:>6}  {:>26} {:>10} {:>12} {:>7}",
        "size", "batch", "BCL method", "BCL o_r", "baseline", "ratio"
    );
    for &size in &cli.sizes {
        for &batch in &cli.batches {
            let m = match measure(size, batch, cli.messages) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("bcl-or: size {size}, batch {batch}: {e}");
                    std::process::exit(1);
                }
            };
            for (name, ours, base, base_name) in [
                ("shm", m.shm, m.bare_shm, m.bare_shm_name),
                (
                    "shm, udp polled too",
                    m.shm_udp_polled,
                    m.bare_shm,
                    m.bare_shm_name,
                ),
                ("udp", m.udp, m.kernel_udp, "kernel recv"),
            ] {
                println!(
                    "{size:>8} {batch:>6}  {name:>26} {ours:>10.0} {base:>8.0} ({base_name}) {:>6.2}x",
                    ours / base
                );
            }
        }
    }
}
