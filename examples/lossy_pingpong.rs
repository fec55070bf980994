//! Ping-pong of one message size over a lossy simulated wire in virtual time,
//! printing how long each exchange took. Used to study loss recovery.
//!
//! `cargo run --release --example lossy_pingpong -- 16384 200 loss=0.2,seed=3`

use bcl::sim::FaultSpec;
use bcl::SimCluster;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().unwrap_or_else(|| "16384".into()).parse()?;
    let iters: usize = args.next().unwrap_or_else(|| "200".into()).parse()?;
    let spec: FaultSpec = args
        .next()
        .unwrap_or_else(|| "loss=0.2,seed=1".into())
        .parse()?;
    let mut c = SimCluster::new(2, spec.profile.clone(), spec.seed, 1500, |_, _| {})?;
    let msg = vec![7u8; size];
    let mut times = Vec::new();
    for _ in 0..iters {
        let t0 = c.now();
        c.endpoints[0].send(SimCluster::addr(1), &msg)?;
        // Server echoes, client waits.
        let mut done = false;
        while !done {
            c.step()?;
            if let Some(d) = c.endpoints[1].poll_delivery() {
                c.endpoints[1].release(d)?;
                c.endpoints[1].send(SimCluster::addr(0), &msg)?;
            }
            if let Some(d) = c.endpoints[0].poll_delivery() {
                c.endpoints[0].release(d)?;
                done = true;
            }
            while c.endpoints[0].poll_send_event().is_some() {}
            while c.endpoints[1].poll_send_event().is_some() {}
        }
        let took = c.now() - t0;
        if std::env::var_os("TRACE").is_some() {
            let i0 = c.endpoints[0].port().peer_info(SimCluster::addr(1));
            let i1 = c.endpoints[1].port().peer_info(SimCluster::addr(0));
            println!("took {took:?}: a->b {:?}", i0.map(|i| (i.rto, i.srtt)));
            println!("               b->a {:?}", i1.map(|i| (i.rto, i.srtt)));
        }
        times.push(took);
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!(
        "size {size}: p50 {:?} p90 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        times.last().copied().unwrap_or(Duration::ZERO)
    );
    for (i, ep) in c.endpoints.iter().enumerate() {
        println!("endpoint {i}: {:?}", ep.port().stats());
    }
    println!("fabric: {}", c.fabric.stats());
    Ok(())
}
