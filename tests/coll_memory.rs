//! Memory per process against communicator size: P processes of one job
//! (endpoints and their collectives) in one test process on the simulated
//! fabric, P from 16 to 1,024; live heap bytes counted by the global
//! allocator after the job is set up and after a barrier, a 1 KiB
//! allreduce and a 1 KiB bcast on the world, divided by P.
//!
//! Two parts grow differently. The job's set-up gives every endpoint every
//! member's address and descriptor (as `bcl-run`'s rendezvous does): a few
//! hundred bytes per member, linear in P. Link state (sequence numbers,
//! windows, buffers) is made on first contact only, so what the
//! collectives add follows the peers a process actually talks to — about
//! log2 P of them for recursive doubling and binomial trees — not P. The
//! printed table is in docs/PERFORMANCE.md.

use bcl::coll::op::BuiltinOp;
use bcl::coll::Coll;
use bcl::sim::FaultProfile;
use bcl::SimCluster;
use std::alloc::System;
use std::time::Duration;

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Live bytes per process (after set-up, after the collectives) for a
/// job of `p`.
fn per_process(p: usize) -> (usize, usize) {
    let base = HEAP.allocated();
    let faults = FaultProfile {
        delay: Duration::from_micros(10),
        ..FaultProfile::default()
    };
    let mut cluster = SimCluster::new(p, faults, 1, 9000, |_, cfg| {
        cfg.ring_blocks = 256;
    })
    .unwrap();
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let mut colls: Vec<Coll> = std::mem::take(&mut cluster.endpoints)
        .into_iter()
        .map(|ep| Coll::new(ep, members.clone()).unwrap())
        .collect();
    drop(members);
    let set_up = HEAP.allocated() - base;
    let start = cluster.now();
    let mut reqs = Vec::new();
    for coll in colls.iter_mut() {
        let world = coll.world().clone();
        let b = coll.ibarrier(&world).unwrap();
        let data: Vec<u8> = vec![1; 1024];
        let a = coll
            .iallreduce(
                &world,
                data.clone(),
                bcl::coll::op::Datatype::U8,
                BuiltinOp::BitOr.into(),
            )
            .unwrap();
        let c = coll.ibcast(&world, 0, data, 1024).unwrap();
        reqs.push(vec![Some(b), Some(a), Some(c)]);
    }
    while reqs.iter().flatten().any(Option::is_some) {
        let mut moved = 0;
        for (coll, rs) in colls.iter_mut().zip(reqs.iter_mut()) {
            moved += coll.progress().unwrap();
            for r in rs.iter_mut() {
                if let Some(q) = r {
                    if coll.test(q).unwrap().is_some() {
                        *r = None;
                        moved += 1;
                    }
                }
            }
        }
        if moved == 0 {
            let next = colls
                .iter_mut()
                .filter_map(|c| c.messenger().endpoint().next_timeout())
                .chain(cluster.fabric.next_delivery())
                .min()
                .expect("something is pending");
            assert!(next - start < Duration::from_secs(10), "stuck");
            cluster.clock.set(next.max(cluster.now()));
        }
    }
    let after = HEAP.allocated() - base;
    drop(colls);
    drop(cluster);
    (set_up / p, after / p)
}

#[test]
fn link_state_grows_with_the_peers_contacted_not_with_p() {
    let sizes = [16usize, 64, 256, 1024];
    let mut rows = Vec::new();
    for p in sizes {
        let (set_up, after) = per_process(p);
        println!(
            "P={p:<5} per process: set up {set_up:>8} B, after collectives {after:>8} B \
             (collectives and links: {:>7} B)",
            after - set_up
        );
        rows.push((p, set_up, after - set_up));
    }
    let (p0, set_up0, links0) = rows[0];
    for &(p, set_up, links) in &rows[1..] {
        // The member table: linear, a few hundred bytes a member.
        let per_member = (set_up - set_up0) / (p - p0);
        assert!(
            per_member <= 512,
            "P={p}: set-up grows by {per_member} B per member"
        );
        // Links: with log2 P, not P (P / P0 is up to 64 here; log2 P / log2
        // P0 at most 2.5). Half as much again for the collectives' own
        // per-call state.
        let log_ratio = p.ilog2() as f64 / p0.ilog2() as f64;
        let bound = (links0 as f64 * log_ratio * 1.5) as usize;
        assert!(
            links <= bound,
            "P={p}: collectives and links take {links} B per process, more than {bound} B \
             ({links0} B at P={p0})"
        );
    }
}
