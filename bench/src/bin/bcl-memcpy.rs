//! `bcl-memcpy`: single-thread memcpy bandwidth per size, the baseline of
//! shared-memory bandwidth (a message through shared memory is copied at
//! least once; BCL's shm method copies it twice, pipelined on two cores).
//!
//! Prints `SIZE MB/s` (10^6 bytes per second) per size, copying between two
//! buffers of that size (each touched first, so no page faults are timed)
//! for about 0.2 s per size, the median of 5 such runs.

use clap::Parser;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Measure single-thread memcpy bandwidth.
#[derive(Parser, Debug)]
#[command(name = "bcl-memcpy", version)]
struct Cli {
    /// Sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "65536,1048576,4194304")]
    sizes: Vec<usize>,
}

fn main() {
    let cli = Cli::parse();
    println!("# bcl-memcpy: single-thread copy bandwidth, MB/s (median of 5 runs of ~0.2 s)");
    for &size in &cli.sizes {
        let src = vec![0x5au8; size.max(1)];
        let mut dst = vec![0u8; size.max(1)];
        let mut runs = Vec::new();
        for _ in 0..5 {
            let t0 = Instant::now();
            let mut copies = 0u64;
            while t0.elapsed() < Duration::from_millis(200) {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
                copies += 1;
            }
            runs.push(copies as f64 * size as f64 / t0.elapsed().as_secs_f64() / 1e6);
        }
        runs.sort_by(f64::total_cmp);
        println!("{size:>10} {:>10.1}", runs[2]);
    }
}
