//! A server that answers remote service requests from many peers at once,
//! on tokio: one `AsyncRsr` with an inline handler (a key-value lookup)
//! and a threaded one (a slow job), and PEERS client endpoints in the same
//! process, each calling from CALLS concurrent tasks. Over udp on the
//! loopback interface; prints the calls per second and the answers'
//! latency percentiles.
//!
//! `cargo run --release --features tokio --example rsr_server -- [PEERS] [CALLS]`

use bcl::coll::messenger::Messenger;
use bcl::rsr::Rsr;
use bcl::tokio::AsyncRsr;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};
use std::time::{Duration, Instant};

const LOOKUP: u32 = 1;
const SLOW: u32 = 2;

fn endpoint(node: u32) -> Result<Endpoint, Box<dyn std::error::Error>> {
    let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse()?))?;
    Ok(Endpoint::builder(ProcessAddr::new(node, 0), JobKey(0x5e))
        .method(Box::new(udp))
        .mode(ProgressMode::Blocking)
        .build()?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let peers: u32 = args.next().unwrap_or_else(|| "8".into()).parse()?;
    let calls: u32 = args.next().unwrap_or_else(|| "500".into()).parse()?;
    let mut server = endpoint(1000)?;
    let mut clients = Vec::new();
    for node in 1..=peers {
        let mut c = endpoint(node)?;
        c.add_peer(server.local(), server.descriptors()[0].clone());
        server.add_peer(c.local(), c.descriptors()[0].clone());
        clients.push(c);
    }
    let to = server.local();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // The handlers: a lookup short enough to run inline, and a job
        // that blocks (here: sleeps) on the worker pool.
        let table: Vec<u64> = (0..1024u64).map(|k| k * k).collect();
        let mut s = Rsr::new(Messenger::new(server));
        s.register_handler(LOOKUP, move |_, key| {
            let k = key.first().copied().unwrap_or(0) as usize;
            table[k].to_be_bytes().to_vec()
        })?;
        s.register_threaded_handler(SLOW, |_, p| {
            std::thread::sleep(Duration::from_micros(200));
            p.to_vec()
        })?;
        let server = AsyncRsr::new(s)?;

        let start = Instant::now();
        let mut tasks = Vec::new();
        for c in clients {
            let c = AsyncRsr::new(Rsr::new(Messenger::new(c)))?;
            for i in 0..calls {
                let c = c.clone();
                tasks.push(tokio::spawn(async move {
                    let t0 = Instant::now();
                    let id = if i % 10 == 0 { SLOW } else { LOOKUP };
                    let answer = c.call(to, id, &[i as u8]).await;
                    (answer.map(|_| t0.elapsed()), c)
                }));
            }
        }
        let mut latencies = Vec::new();
        let mut keep = Vec::new();
        for t in tasks {
            let (took, c) = t.await?;
            latencies.push(took?);
            keep.push(c);
        }
        let wall = start.elapsed();
        latencies.sort();
        let pct = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        println!(
            "{} calls from {peers} peers ({calls} concurrent each) in {:.1} ms: {:.0} calls/s; latency p50 {:?}, p99 {:?}",
            latencies.len(),
            wall.as_secs_f64() * 1e3,
            latencies.len() as f64 / wall.as_secs_f64(),
            pct(0.5),
            pct(0.99)
        );
        println!(
            "server: {} requests handled",
            server.with_rsr(|r| r.stats().requests_handled)
        );
        drop(keep);
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}
