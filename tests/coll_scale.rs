//! The collectives over the whole stack on the simulated fabric, in
//! virtual time, against their LogGP predictions: links with a latency L
//! and a rate (G per byte) and no CPU cost (virtual time does not move
//! while a process computes: o = g = 0), messages that go eager (8 B and
//! 1 KiB), communicators of 2 to 1,024 ranks in one test process. Each
//! collective's completion time must be within 10 % of its algorithm's
//! formula — which shows that the schedules the engine runs over the real
//! protocol stack take the steps the cost model counts. (Larger messages
//! add the rendezvous handshake, which the formulas do not count.)

use bcl::coll::alg::{Algorithm, Collective, Shape};
use bcl::coll::cost::{predict, CostModel, LogGp};
use bcl::coll::op::{BuiltinOp, Datatype, Op};
use bcl::coll::Call;
use bcl::sim::FaultProfile;
use std::time::Duration;

mod coll_common;

const L: Duration = Duration::from_micros(10);
const RATE: u64 = 1_000_000_000; // bytes/s: G = 1 ns/B

fn model() -> CostModel {
    let link = LogGp {
        l: L.as_secs_f64(),
        o_s: 0.0,
        o_r: 0.0,
        g: 0.0,
        big_g: 1.0 / RATE as f64,
    };
    CostModel {
        intra: link,
        inter: link,
        copy_per_byte: 0.0,
        reduce_per_byte: 0.0,
    }
}

/// Runs `c` with `alg` on `p` ranks with `n` bytes; returns the virtual
/// time from the start to the last rank's completion.
fn run(p: usize, c: Collective, alg: Algorithm, n: usize) -> Duration {
    let faults = FaultProfile {
        delay: L,
        rate_bytes_per_sec: Some(RATE),
        ..FaultProfile::default()
    };
    let (mut cluster, mut colls) = coll_common::sim_job(p, faults);
    let mut reqs = Vec::new();
    for coll in colls.iter_mut() {
        let world = coll.world().clone();
        let mut call = Call::new(c, vec![1; n]);
        call.algorithm = Some(alg);
        if c == Collective::Bcast && world.rank() != 0 {
            call.input = Vec::new();
        }
        call.len = n;
        if c.reduces() {
            call = call.reducing(Op::Builtin(BuiltinOp::Sum), Datatype::F64);
        }
        if c == Collective::Barrier {
            call.input = Vec::new();
            call.len = 0;
        }
        reqs.push(vec![coll.start(&world, call).unwrap()]);
    }
    coll_common::drive(&mut cluster, &mut colls, reqs, Duration::from_secs(1))
}

#[test]
fn small_collectives_take_the_time_their_formulas_predict() {
    let cases = [
        (Collective::Barrier, Algorithm::Dissemination, 0),
        (Collective::Bcast, Algorithm::BinomialTree, 8),
        (Collective::Bcast, Algorithm::BinomialTree, 1024),
        (Collective::Allreduce, Algorithm::RecursiveDoubling, 8),
        (Collective::Allreduce, Algorithm::RecursiveDoubling, 1024),
        (Collective::Allreduce, Algorithm::ReduceBcast, 1024),
        (Collective::Reduce, Algorithm::BinomialTree, 1024),
    ];
    let m = model();
    let mut worst: f64 = 0.0;
    for p in [2, 3, 8, 33, 64, 256, 1024] {
        for &(c, alg, n) in &cases {
            let nodes: Vec<u32> = (0..p as u32).map(|r| r + 1).collect();
            let shape = Shape {
                collective: c,
                rank: 0,
                size: p,
                root: 0,
                len: n,
                elem: if c.reduces() { 8 } else { 1 },
                counts: &[],
                send_counts: &[],
                recv_counts: &[],
                nodes: &nodes,
            };
            let predicted = predict(c, alg, &shape, &m);
            let measured = run(p, c, alg, n).as_secs_f64();
            let err = (measured - predicted).abs() / predicted;
            println!(
                "{:>9} {:>18} P={p:<4} {n:>5} B: measured {:8.2} µs, predicted {:8.2} µs, {:+.1} %",
                c.name(),
                alg.name(),
                measured * 1e6,
                predicted * 1e6,
                (measured - predicted) / predicted * 100.0
            );
            worst = worst.max(err);
            assert!(
                err <= 0.10,
                "{} {} P={p} {n} B: measured {measured:e} s, predicted {predicted:e} s",
                c.name(),
                alg.name()
            );
        }
    }
    println!("worst relative error {:.1} %", worst * 100.0);
}
