//! Collectives over the whole stack on the simulated fabric, in virtual
//! time: every collective on communicators of 1 to 33 ranks, with loss,
//! reordering and duplication on the wire, against a sequential reference
//! computed here. Reductions are checked bitwise on f64 sums, which only a
//! fixed reduction order passes.

use bcl::coll::alg::{Algorithm, Collective};
use bcl::coll::op::{reduce_canonical, BuiltinOp, Datatype, Op};
use bcl::coll::{Call, Coll, Comm, Request};
use bcl::sim::FaultProfile;
use bcl::{SimCluster, Time};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::time::Duration;

#[allow(dead_code)]
mod coll_common;

/// Colls on one simulated fabric, driven together in virtual time.
struct World {
    cluster: SimCluster,
    colls: Vec<Coll>,
}

impl World {
    fn new(p: usize, faults: FaultProfile, seed: u64) -> World {
        let (cluster, colls) = coll_common::sim_job_with(p, faults, seed, 1500, |c| {
            c.ring_blocks = 1024;
            c.rto.min = Duration::from_micros(200);
        });
        World { cluster, colls }
    }

    /// Drives every rank until each request of `reqs` (one per rank, None
    /// for ranks not taking part) completes; returns the outputs.
    fn finish(&mut self, reqs: Vec<Option<Request>>) -> Vec<Vec<u8>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        let limit = self.cluster.now() + Duration::from_secs(600);
        loop {
            let mut moved = 0;
            for (i, c) in self.colls.iter_mut().enumerate() {
                moved += c.progress().unwrap();
                if out[i].is_none() {
                    if let Some(r) = &reqs[i] {
                        if let Some(v) = c.test(r).unwrap() {
                            out[i] = Some(v);
                            moved += 1;
                        }
                    }
                }
            }
            if reqs
                .iter()
                .zip(&out)
                .all(|(r, o)| r.is_none() || o.is_some())
            {
                return out.into_iter().map(Option::unwrap_or_default).collect();
            }
            assert!(
                self.cluster.now() < limit,
                "no completion in 600 s of virtual time"
            );
            if moved == 0 {
                self.jump();
            }
        }
    }

    /// Jumps the virtual clock to the next event.
    fn jump(&mut self) {
        let timers = self
            .colls
            .iter_mut()
            .filter_map(|c| c.messenger().endpoint().next_timeout());
        let next = timers
            .chain(self.cluster.fabric.next_delivery())
            .min()
            .unwrap_or(self.cluster.now() + Duration::from_micros(10));
        let next: Time = next.max(self.cluster.now() + Duration::from_nanos(1));
        self.cluster.clock.set(next);
    }

    fn world(&self, r: usize) -> Comm {
        self.colls[r].world().clone()
    }
}

fn f64_bytes(rank: usize, n: usize, seed: u64) -> Vec<u8> {
    // Values of very different magnitudes: sums depend on their order.
    (0..n)
        .flat_map(|i| {
            let x = ((seed ^ (rank as u64 * 0x9e37_79b9) ^ (i as u64 * 0x85eb_ca6b)) % 1_000_003)
                as f64;
            let v = x * 10f64.powi(((rank + i) % 17) as i32 - 8);
            v.to_ne_bytes()
        })
        .collect()
}

fn bytes(rank: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + rank * 7 + 1) as u8).collect()
}

fn canonical(inputs: &[Vec<u8>]) -> Vec<u8> {
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let mut out = vec![0; inputs[0].len()];
    let mut scratch = Vec::new();
    reduce_canonical(
        &Op::Builtin(BuiltinOp::Sum),
        Datatype::F64,
        &refs,
        &mut out,
        &mut scratch,
    )
    .unwrap();
    out
}

/// Runs `collective` on P ranks with `n` units (f64 elements for
/// reductions, bytes otherwise) and checks every rank's output.
fn check(
    w: &mut World,
    collective: Collective,
    root: usize,
    n: usize,
    seed: u64,
    alg: Option<Algorithm>,
) {
    let p = w.colls.len();
    let reduction = collective
        .reduces()
        .then(|| (Op::Builtin(BuiltinOp::Sum), Datatype::F64));
    // Uneven block lengths per rank (some zero) for the v-variants.
    // Uneven blocks: 0, n/3, 2n/3 and n bytes in turn.
    let counts: Vec<usize> = (0..p).map(|r| n * ((r + 1) % 4) / 3).collect();
    let mut calls = Vec::new();
    let mut expect: Vec<Option<Vec<u8>>> = Vec::new();
    match collective {
        Collective::Barrier => {
            for _ in 0..p {
                calls.push(Call::new(collective, Vec::new()));
                expect.push(Some(Vec::new()));
            }
        }
        Collective::Bcast => {
            let data = bytes(root, n);
            for r in 0..p {
                let mut c = Call::new(
                    collective,
                    if r == root { data.clone() } else { Vec::new() },
                );
                c.root = root;
                c.len = n;
                calls.push(c);
                expect.push(Some(data.clone()));
            }
        }
        Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan => {
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| f64_bytes(r, n, seed)).collect();
            for r in 0..p {
                let mut c = Call::new(collective, inputs[r].clone());
                c.root = root;
                c.reduction = reduction.clone();
                calls.push(c);
                expect.push(match collective {
                    Collective::Reduce if r != root => None,
                    Collective::Reduce | Collective::Allreduce => Some(canonical(&inputs)),
                    Collective::Scan => Some(canonical(&inputs[..=r])),
                    _ if r == 0 => Some(vec![0; n * 8]),
                    _ => Some(canonical(&inputs[..r])),
                });
            }
        }
        Collective::Gather | Collective::Allgather => {
            let all: Vec<u8> = (0..p).flat_map(|r| bytes(r, counts[r])).collect();
            for r in 0..p {
                let mut c = Call::new(collective, bytes(r, counts[r]));
                c.root = root;
                c.counts = counts.clone();
                calls.push(c);
                let full = collective == Collective::Allgather || r == root;
                expect.push(Some(if full { all.clone() } else { Vec::new() }));
            }
        }
        Collective::Scatter => {
            let all: Vec<u8> = (0..p).flat_map(|r| bytes(r, counts[r])).collect();
            for r in 0..p {
                let mut c = Call::new(collective, if r == root { all.clone() } else { Vec::new() });
                c.root = root;
                c.counts = counts.clone();
                calls.push(c);
                expect.push(Some(bytes(r, counts[r])));
            }
        }
        Collective::Alltoall => {
            // Rank s sends 0, n/3, 2n/3 or n bytes to rank d.
            let len = |s: usize, d: usize| n * ((s + 2 * d + 1) % 4) / 3;
            let block = |s: usize, d: usize| bytes(s * p + d, len(s, d));
            for r in 0..p {
                let data: Vec<u8> = (0..p).flat_map(|d| block(r, d)).collect();
                let mut c = Call::new(collective, data);
                c.send_counts = (0..p).map(|d| len(r, d)).collect();
                c.recv_counts = (0..p).map(|s| len(s, r)).collect();
                calls.push(c);
                expect.push(Some((0..p).flat_map(|s| block(s, r)).collect()));
            }
        }
        Collective::ReduceScatter => {
            let counts: Vec<usize> = counts.iter().map(|c| c * 8).collect();
            let total: usize = counts.iter().sum();
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| f64_bytes(r, total / 8, seed)).collect();
            let sum = canonical(&inputs);
            let mut at = 0;
            for r in 0..p {
                let mut c = Call::new(collective, inputs[r].clone());
                c.counts = counts.clone();
                c.reduction = reduction.clone();
                calls.push(c);
                expect.push(Some(sum[at..at + counts[r]].to_vec()));
                at += counts[r];
            }
        }
    }
    if let Some(a) = alg {
        // Skip algorithms that cannot serve these counts on some rank.
        let applicable = calls.iter().enumerate().all(|(r, c)| {
            let shape = bcl::coll::alg::Shape {
                collective,
                rank: r,
                size: p,
                root,
                len: if collective == Collective::ReduceScatter {
                    c.input.len()
                } else {
                    c.len
                },
                elem: if collective.reduces() { 8 } else { 1 },
                counts: &c.counts,
                send_counts: &c.send_counts,
                recv_counts: &c.recv_counts,
                nodes: &[],
            };
            bcl::coll::alg::schedule(a, &shape).is_ok()
        });
        if !applicable {
            return;
        }
    }
    let reqs: Vec<Option<Request>> = calls
        .into_iter()
        .enumerate()
        .map(|(r, mut c)| {
            c.algorithm = alg;
            let comm = w.world(r);
            Some(w.colls[r].start(&comm, c).unwrap())
        })
        .collect();
    let got = w.finish(reqs);
    let exact = alg.is_none_or(|a| a.deterministic(collective));
    for r in 0..p {
        let Some(expect) = &expect[r] else { continue };
        if !exact {
            // Another reduction order: equal up to rounding.
            let f = |b: &[u8]| -> Vec<f64> {
                b.chunks_exact(8)
                    .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
                    .collect()
            };
            for (x, y) in f(&got[r]).into_iter().zip(f(expect)) {
                assert!(
                    (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                    "{} rank {r}: {x} vs {y}",
                    collective.name()
                );
            }
            continue;
        }
        assert_eq!(
            &got[r],
            expect,
            "{} with P={p}, root {root}, n={n}, algorithm {alg:?}: rank {r} differs",
            collective.name()
        );
    }
}

/// Every collective as the selector chooses it, on every communicator
/// size from 1 to 33, small and large, roots in the middle and at the end.
#[test]
fn every_collective_and_size_on_a_lossy_wire() {
    for p in 1..=33 {
        let mut w = World::new(p, lossy(), p as u64);
        for c in Collective::ALL {
            for (n, root) in [(0, p / 2), (1, p - 1), (100, p / 2), (3000, p - 1)] {
                check(&mut w, c, root, n, 7, None);
            }
        }
    }
}

fn lossy() -> FaultProfile {
    FaultProfile {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        delay: Duration::from_micros(2),
        jitter: Duration::from_micros(3),
        ..FaultProfile::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// Random collective, size 1..=33, root, length (up to rendezvous
    /// sizes) and fault seed; every algorithm that implements it.
    #[test]
    fn collectives_over_a_lossy_wire(
        p in 1usize..=33,
        which in 0usize..11,
        root_pick in 0usize..1000,
        n in prop_oneof![Just(0usize), 1usize..40, 200usize..600, Just(2500usize)],
        seed in 0u64..1_000_000,
    ) {
        let c = Collective::ALL[which];
        let mut w = World::new(p, lossy(), seed);
        for &a in c.algorithms() {
            if a == Algorithm::TwoLevel {
                continue;
            }
            let probe = bcl::coll::alg::Shape {
                collective: c, rank: 0, size: p, root: 0, len: n * 8, elem: 8,
                counts: &vec![8; p], send_counts: &vec![8; p], recv_counts: &vec![8; p], nodes: &[],
            };
            if bcl::coll::alg::schedule(a, &probe).is_err() {
                continue;
            }
            check(&mut w, c, root_pick % p, n, seed, Some(a));
        }
    }
}

#[test]
fn medium_and_large_messages_arrive_intact() {
    let mut w = World::new(4, lossy(), 3);
    for c in &mut w.colls {
        c.messenger().set_fragment_limit(64 * 1024);
    }
    // 50 KB blocks go in pieces, 300 KB by rendezvous.
    check(&mut w, Collective::Allreduce, 0, 40_000, 5, None);
    check(&mut w, Collective::Bcast, 2, 300_000, 5, None);
    check(&mut w, Collective::Alltoall, 0, 50_000, 5, None);
    // 4 MiB: the largest size the collectives are measured at.
    check(&mut w, Collective::Bcast, 1, 4 << 20, 5, None);
    check(&mut w, Collective::Allreduce, 3, (4 << 20) / 8, 5, None);
    let sent: u64 = w
        .colls
        .iter_mut()
        .map(|c| c.messenger().stats().rendezvous_sent)
        .sum();
    assert!(sent > 0, "no message went by rendezvous");
    let pieces: u64 = w
        .colls
        .iter_mut()
        .map(|c| c.messenger().stats().fragmented_sent)
        .sum();
    assert!(pieces > 0, "no medium message went in pieces");
}

#[test]
fn dup_and_split_keep_traffic_apart() {
    // dup and split are blocking collectives: each rank runs in its own
    // thread, on a fabric with a real clock (loss recovered by real
    // retransmission timers).
    let p = 7;
    let eps = coll_common::real_clock_endpoints(p, lossy(), 11, |_| {});
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let handles: Vec<_> = eps
        .into_iter()
        .map(|ep| {
            let mut c = Coll::new(ep, members.clone()).unwrap();
            c.set_timeout(Some(Duration::from_secs(60)));
            std::thread::spawn(move || {
                let world = c.world().clone();
                let dup = c.dup(&world).unwrap();
                assert_ne!(dup.id(), world.id());
                assert_eq!(dup.members(), world.members());
                let r = world.rank();
                let color = (r % 3 != 2).then_some((r % 3) as u32);
                let sub = c.split(&world, color, -(r as i32)).unwrap();
                // Sum of world ranks on the dup, and inside each part.
                let mut x = [r as u64];
                c.allreduce(&dup, &mut x, BuiltinOp::Sum).unwrap();
                let total = x[0];
                let part = sub.map(|s| {
                    let mut y = [r as u64];
                    c.allreduce(&s, &mut y, BuiltinOp::Sum).unwrap();
                    (s.rank(), s.size(), y[0])
                });
                // Stay reachable until everyone is done.
                c.barrier(&world).unwrap();
                assert!(c.flush(Duration::from_secs(30)).unwrap());
                (r, total, part)
            })
        })
        .collect();
    let mut results = Vec::new();
    for h in handles {
        results.push(h.join().unwrap());
    }
    for (r, total, part) in results {
        assert_eq!(total, (0..p as u64).sum::<u64>());
        match r % 3 {
            2 => assert_eq!(part, None),
            color => {
                let members: Vec<usize> = (0..p).filter(|q| q % 3 == color).collect();
                let sum: usize = members.iter().sum();
                // Keys are -rank: ranks in reverse order.
                let rank = members.iter().rev().position(|&q| q == r).unwrap();
                assert_eq!(part, Some((rank, members.len(), sum as u64)));
            }
        }
    }
}

#[test]
fn nonblocking_collectives_overlap_with_each_other_and_point_to_point() {
    let p = 6;
    let mut w = World::new(p, lossy(), 21);
    let n = 300;
    let inputs: Vec<Vec<u8>> = (0..p).map(|r| f64_bytes(r, n, 9)).collect();
    let big = bytes(99, 50_000);
    let mut reqs = Vec::new();
    let mut recvs = Vec::new();
    for (r, input) in inputs.iter().enumerate() {
        let comm = w.world(r);
        let c = &mut w.colls[r];
        // Point-to-point before, between and after the collectives, in a
        // different place on each rank.
        let next = (r + 1) % p;
        let prev = (r + p - 1) % p;
        if r % 2 == 0 {
            c.isend(&comm, next, 5, &bytes(r, 20_000)).unwrap();
        }
        let a = c.ibarrier(&comm).unwrap();
        let b = c
            .iallreduce(&comm, input.clone(), Datatype::F64, BuiltinOp::Sum.into())
            .unwrap();
        let rx = c.irecv(&comm, prev, 5).unwrap();
        let d = c
            .ibcast(
                &comm,
                3,
                if r == 3 { big.clone() } else { Vec::new() },
                big.len(),
            )
            .unwrap();
        if r % 2 == 1 {
            c.isend(&comm, next, 5, &bytes(r, 20_000)).unwrap();
        }
        reqs.push(vec![a, b, d]);
        recvs.push(rx);
    }
    // Complete them in reverse order of starting.
    let expect_sum = canonical(&inputs);
    for k in (0..3).rev() {
        let ks: Vec<Option<Request>> = reqs.iter_mut().map(|v| Some(v.remove(k))).collect();
        let got = w.finish(ks);
        for out in got {
            match k {
                0 => assert!(out.is_empty()),
                1 => assert_eq!(out, expect_sum),
                _ => assert_eq!(out, big),
            }
        }
    }
    for (r, rx) in recvs.into_iter().enumerate() {
        let prev = (r + p - 1) % p;
        let got = loop {
            if let Some(m) = w.colls[r].messenger().take_recv(rx) {
                break m.unwrap();
            }
            let mut moved = 0;
            for c in &mut w.colls {
                moved += c.progress().unwrap();
            }
            if moved == 0 {
                w.jump();
            }
        };
        assert_eq!(got, bytes(prev, 20_000));
    }
}

#[test]
fn a_collective_with_a_dead_peer_fails_naming_it() {
    let mut w = World::new(2, FaultProfile::default(), 4);
    // Rank 1 is gone before the barrier.
    drop(w.colls.pop());
    let world = w.world(0);
    let r = w.colls[0].ibarrier(&world).unwrap();
    let limit = w.cluster.now() + Duration::from_secs(600);
    let err = loop {
        w.colls[0].progress().unwrap();
        match w.colls[0].test(&r) {
            Ok(None) => {}
            Ok(Some(_)) => panic!("a barrier with a dead peer completed"),
            Err(e) => break e,
        }
        assert!(
            w.cluster.now() < limit,
            "no failure in 600 s of virtual time"
        );
        w.jump();
    };
    match err {
        bcl::coll::CollError::PeerFailed { peer, rank, .. } => {
            assert_eq!(peer, SimCluster::addr(1));
            assert_eq!(rank, Some(1), "the error names the peer's rank too");
        }
        e => panic!("expected the peer's failure, got {e}"),
    }
    // Later operations with it fail at once.
    let again = w.colls[0].ibarrier(&world).unwrap();
    assert!(matches!(
        w.colls[0].test(&again),
        Err(bcl::coll::CollError::PeerFailed { .. })
    ));
}

#[test]
fn a_request_announcing_an_impossible_length_fails_its_receive() {
    let mut w = World::new(2, FaultProfile::default(), 5);
    let mut rts = Vec::new();
    // Point-to-point context of the world (id 0), tag 5, 1 TiB.
    bcl::coll::wire::Msg::Rts {
        context: 0,
        tag: 5,
        len: 1 << 40,
        token: 1,
    }
    .encode(&mut rts);
    w.colls[0]
        .messenger()
        .endpoint_mut()
        .send(SimCluster::addr(1), &rts)
        .unwrap();
    let world = w.world(1);
    let rx = w.colls[1].irecv(&world, 0, 5).unwrap();
    let got = loop {
        for c in &mut w.colls {
            c.progress().unwrap();
        }
        if let Some(r) = w.colls[1].messenger().take_recv(rx) {
            break r;
        }
        w.jump();
    };
    match got {
        Err(bcl::coll::CollError::Invalid(why)) => {
            assert!(why.contains("1099511627776 bytes"), "{why}")
        }
        other => panic!("expected the receive to fail, got {other:?}"),
    }
}
