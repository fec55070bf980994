//! Failures in collectives: a member's death fails the collective at every
//! survivor, and agree-and-shrink (`Coll::shrink`) lets the survivors agree
//! on who failed and go on in a communicator of themselves. Each rank runs
//! in its own thread on the simulated fabric with a real clock (a little
//! loss, recovered by real retransmission timers), liveness every 100 ms
//! (a silent peer declared dead 5 periods after its last frame).

#[allow(dead_code)]
mod coll_common;

use bcl::coll::alg::{Algorithm, Collective};
use bcl::coll::{BuiltinOp, Call, Coll, CollError, Comm, Datatype, Op};
use bcl::sim::FaultProfile;
use bcl::{Endpoint, SimCluster};
use std::time::{Duration, Instant};

/// `p` endpoints on one simulated fabric, each knowing every other.
fn endpoints(p: usize, seed: u64) -> Vec<Endpoint> {
    let faults = FaultProfile {
        loss: 0.01,
        ..FaultProfile::default()
    };
    coll_common::real_clock_endpoints(p, faults, seed, |c| {
        c.liveness.enabled = true;
        c.liveness.period = Duration::from_millis(100);
        c.liveness.misses = 5;
    })
}

/// What a survivor got: its shrunk communicator's id, members and its rank
/// there, and the sum of world ranks over it.
type Outcome = (u32, Vec<bcl::ProcessAddr>, usize, u64);

/// Runs `p` ranks; rank r runs `before(r, coll)` (returning false ends the
/// rank there: it dies, its endpoint dropped), then shrinks the world and
/// sums its world rank over the result. Returns the survivors' outcomes.
fn run(
    p: usize,
    seed: u64,
    before: impl Fn(usize, &mut Coll) -> bool + Send + Sync + Clone + 'static,
) -> Vec<(usize, Outcome)> {
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let handles: Vec<_> = endpoints(p, seed)
        .into_iter()
        .map(|ep| {
            let mut c = Coll::new(ep, members.clone()).unwrap();
            c.set_timeout(Some(Duration::from_secs(60)));
            let before = before.clone();
            std::thread::spawn(move || {
                let world = c.world().clone();
                let r = world.rank();
                if !before(r, &mut c) {
                    return None;
                }
                let shrunk: Comm = c.shrink(&world).unwrap();
                let mut x = [r as u64];
                c.allreduce(&shrunk, &mut x, BuiltinOp::Sum).unwrap();
                // Stay reachable until every survivor is done.
                c.barrier(&shrunk).unwrap();
                assert!(c.flush(Duration::from_secs(30)).unwrap());
                Some((
                    r,
                    (shrunk.id(), shrunk.members().to_vec(), shrunk.rank(), x[0]),
                ))
            })
        })
        .collect();
    handles
        .into_iter()
        .filter_map(|h| h.join().unwrap())
        .collect()
}

/// Every survivor got the same communicator: the world's members less
/// `dead`, ranked in world order, a new id, and the right sum.
fn agreed(p: usize, dead: &[usize], got: &[(usize, Outcome)]) {
    let alive: Vec<usize> = (0..p).filter(|r| !dead.contains(r)).collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), alive);
    let members: Vec<_> = alive.iter().map(|&r| SimCluster::addr(r)).collect();
    let id = got[0].1 .0;
    assert_ne!(id, 0, "the shrunk communicator has a new id");
    for (r, (gid, gmembers, rank, sum)) in got {
        assert_eq!(*gid, id, "rank {r}");
        assert_eq!(gmembers, &members, "rank {r}");
        assert_eq!(*rank, alive.iter().position(|q| q == r).unwrap());
        assert_eq!(*sum, alive.iter().map(|&q| q as u64).sum::<u64>());
    }
}

#[test]
fn without_failures_everyone_stays() {
    let got = run(5, 1, |_, _| true);
    agreed(5, &[], &got);
}

#[test]
fn ranks_dead_before_the_shrink_are_left_out() {
    // Ranks 2 and 4 die at once; the others first find out by a receive
    // from rank 2 (which fails naming it: liveness), then shrink.
    let got = run(6, 2, |r, c| {
        if r == 2 || r == 4 {
            return false;
        }
        let world = c.world().clone();
        let e = c.recv(&world, 2, 7).unwrap_err();
        assert!(matches!(e, bcl::coll::CollError::PeerFailed { .. }), "{e}");
        true
    });
    agreed(6, &[2, 4], &got);
}

#[test]
fn ranks_that_die_unnoticed_are_found_by_the_shrink_itself() {
    // Nobody talks to rank 3 before the shrink: the shrink's own sends and
    // liveness find it dead.
    let got = run(5, 3, |r, _| r != 3);
    agreed(5, &[3], &got);
}

#[test]
fn a_rank_that_dies_halfway_through_its_proposals_still_leaves_one_agreement() {
    // Rank 3 starts the shrink but gets its first proposal only to ranks 0
    // and 1 before it dies (written here by hand: the world's collective
    // context 1, the first shrink's round-1 tag, "next id 1, nobody
    // failed"). Ranks 0 and 1 heard from everyone in round 1; ranks 2 and
    // 4 did not. Whatever they decide, they decide the same.
    let p = 5;
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let handles: Vec<_> = endpoints(p, 4)
        .into_iter()
        .map(|ep| {
            let mut c = Coll::new(ep, members.clone()).unwrap();
            c.set_timeout(Some(Duration::from_secs(60)));
            let members = members.clone();
            std::thread::spawn(move || {
                let world = c.world().clone();
                if world.rank() == 3 {
                    let tag = (1u64 << 63) | (1u64 << 32) | 1;
                    let mut proposal = 1u32.to_le_bytes().to_vec();
                    proposal.extend([0u8; 5]);
                    for to in [0, 1] {
                        let s = c.messenger().isend(members[to], 1, tag, &proposal).unwrap();
                        while c.messenger().take_send(s).is_none() {
                            c.progress().unwrap();
                        }
                    }
                    return None;
                }
                let shrunk = c.shrink(&world).unwrap();
                // Stay reachable a while: the others may still need us.
                let until = std::time::Instant::now() + Duration::from_secs(1);
                while std::time::Instant::now() < until {
                    c.progress().unwrap();
                }
                // Proposals from members that went on to a later round
                // after this one decided are dropped, not kept.
                let waiting = c.messenger().unexpected_waiting();
                assert_eq!(waiting, 0, "rank {}", world.rank());
                let late = c.messenger().stats().late_shrink_dropped;
                println!("rank {}: {late} late shrink messages dropped", world.rank());
                Some((world.rank(), shrunk.id(), shrunk.members().to_vec()))
            })
        })
        .collect();
    let got: Vec<_> = handles
        .into_iter()
        .filter_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(got.len(), 4);
    for g in &got[1..] {
        assert_eq!((g.1, &g.2), (got[0].1, &got[0].2), "{got:?}");
    }
    let m = &got[0].2;
    assert!(
        m.len() == 4 || m.len() == 5,
        "the survivors, with or without the rank that died: {m:?}"
    );
    println!("agreed on {} members", m.len());
}

/// Rank 3 dies after a barrier; the other three start an allreduce by
/// recursive doubling, in which rank 0 exchanges with ranks 1 and 2 only.
/// Rank 2 fails in the first round (its partner is rank 3) and leaves, so
/// rank 0 would wait on the live rank 2 for ever if rank 2 did not tell the
/// members what it saw: instead each survivor's call fails naming rank 3,
/// and the next collective on the world fails at once. No timeout is set.
#[test]
fn a_members_death_fails_the_collective_at_every_survivor() {
    let p = 4;
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let dead = SimCluster::addr(3);
    let (tx, rx) = std::sync::mpsc::channel();
    // Survivors stay alive and answer until all three have their result.
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for ep in endpoints(p, 11) {
        let mut c = Coll::new(ep, members.clone()).unwrap();
        let tx = tx.clone();
        let finished = finished.clone();
        std::thread::spawn(move || {
            let world = c.world().clone();
            let r = world.rank();
            c.barrier(&world).unwrap();
            if r == 3 {
                // Its last acknowledgements out, then its endpoint is
                // dropped: it answers nothing more.
                let _ = c.flush(Duration::from_millis(200));
                return;
            }
            let mut call = Call::new(Collective::Allreduce, 1u64.to_le_bytes().to_vec())
                .reducing(Op::Builtin(BuiltinOp::Sum), Datatype::U64);
            call.algorithm = Some(Algorithm::RecursiveDoubling);
            let started = Instant::now();
            let failed = c.run(&world, call);
            let took = started.elapsed();
            let next = c.barrier(&world);
            tx.send((r, failed.map(|_| ()), next, took)).unwrap();
            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            while finished.load(std::sync::atomic::Ordering::SeqCst) < 3 {
                c.progress().unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        });
    }
    drop(tx);
    let mut got = Vec::new();
    for _ in 0..3 {
        // A guard against a hang, not a measurement.
        got.push(
            rx.recv_timeout(Duration::from_secs(120))
                .expect("a survivor is still waiting"),
        );
    }
    got.sort_by_key(|g| g.0);
    for (r, failed, next, took) in got {
        for e in [failed.unwrap_err(), next.unwrap_err()] {
            match e {
                CollError::PeerFailed { peer, rank, .. } => {
                    assert_eq!(peer, dead, "rank {r}");
                    assert_eq!(rank, Some(3), "rank {r}");
                }
                other => panic!("rank {r}: {other}"),
            }
        }
        eprintln!("rank {r}: the allreduce failed {took:?} after it started");
    }
}

/// A communicator whose collective failed stays broken when the failed
/// member comes back (a partition that heals): point-to-point with it
/// works again, but the members left the failed collective at different
/// steps, so collectives there fail at once, naming it, until the
/// communicator is shrunk. Virtual time; liveness every 100 ms.
#[test]
fn a_communicator_stays_broken_when_the_failed_member_comes_back() {
    let (mut cluster, mut colls) =
        coll_common::sim_job_with(3, FaultProfile::perfect(), 1, 9000, |c| {
            c.ring_blocks = 256;
            c.liveness.enabled = true;
            c.liveness.period = Duration::from_millis(100);
            c.liveness.misses = 3;
        });
    let world = colls[0].world().clone();
    let member = SimCluster::addr(1);
    let cut = FaultProfile {
        loss: 1.0,
        ..FaultProfile::perfect()
    };
    cluster.fabric.set_faults(0, 1, cut.clone());
    cluster.fabric.set_faults(1, 0, cut);
    let reqs: Vec<_> = colls
        .iter_mut()
        .map(|c| c.ibarrier(&world).unwrap())
        .collect();
    let run_until = |cluster: &mut SimCluster,
                     colls: &mut [bcl::coll::Coll],
                     done: &mut dyn FnMut(&mut [bcl::coll::Coll]) -> bool| {
        let start = cluster.now();
        while !done(colls) {
            for c in colls.iter_mut() {
                c.progress().unwrap();
            }
            coll_common::to_next_event(cluster, colls, start, Duration::from_secs(10));
        }
    };
    let mut first = None;
    run_until(&mut cluster, &mut colls, &mut |colls| {
        first = colls[0].test(&reqs[0]).err();
        first.is_some()
    });
    let e = first.unwrap();
    assert!(
        matches!(e, CollError::PeerFailed { peer, .. } if peer == member),
        "{e}"
    );
    // The partition heals: a frame each way, and each takes the other
    // back.
    cluster.fabric.clear_faults(0, 1);
    cluster.fabric.clear_faults(1, 0);
    let rank0 = SimCluster::addr(0);
    colls[0]
        .messenger()
        .endpoint_mut()
        .send(member, b"hello")
        .unwrap();
    colls[1]
        .messenger()
        .endpoint_mut()
        .send(rank0, b"hello")
        .unwrap();
    run_until(&mut cluster, &mut colls, &mut |colls| {
        !colls[0].messenger().peer_failed(member) && !colls[1].messenger().peer_failed(rank0)
    });
    let rx = colls[0].irecv(&world, 1, 5).unwrap();
    colls[1].isend(&world, 0, 5, b"back").unwrap();
    let mut got = None;
    run_until(&mut cluster, &mut colls, &mut |colls| {
        got = colls[0].messenger().take_recv(rx);
        got.is_some()
    });
    assert_eq!(got.unwrap().unwrap(), b"back");
    let again = colls[0].ibarrier(&world).unwrap();
    colls[0].progress().unwrap();
    let e = colls[0].test(&again).unwrap_err();
    assert!(
        matches!(&e, CollError::PeerFailed { peer, why, .. } if *peer == member && why.contains("until shrunk")),
        "{e}"
    );
}
