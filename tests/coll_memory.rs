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

use bcl::coll::op::{BuiltinOp, Datatype};
use bcl::sim::FaultProfile;
use std::alloc::System;
use std::time::Duration;

mod coll_common;

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
    let (mut cluster, mut colls) = coll_common::sim_job(p, faults);
    let set_up = HEAP.allocated() - base;
    let mut reqs = Vec::new();
    for coll in colls.iter_mut() {
        let world = coll.world().clone();
        let data: Vec<u8> = vec![1; 1024];
        let or = BuiltinOp::BitOr.into();
        reqs.push(vec![
            coll.ibarrier(&world).unwrap(),
            coll.iallreduce(&world, data.clone(), Datatype::U8, or)
                .unwrap(),
            coll.ibcast(&world, 0, data, 1024).unwrap(),
        ]);
    }
    coll_common::drive(&mut cluster, &mut colls, reqs, Duration::from_secs(10));
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
