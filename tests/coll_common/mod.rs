//! Helpers of the collectives' whole-stack tests in virtual time: a job of
//! P processes on the simulated fabric, and a loop that drives every
//! process until its requests complete, moving the clock to the next event
//! whenever nothing moved.

use bcl::coll::{Coll, Request};
use bcl::sim::FaultProfile;
use bcl::{PortConfig, SimCluster, Time};
use std::time::Duration;

/// A job of `p` processes on the simulated fabric with `faults`, each with
/// its `Coll` over the world (small rings: a thousand endpoints fit in one
/// test process).
pub fn sim_job(p: usize, faults: FaultProfile) -> (SimCluster, Vec<Coll>) {
    sim_job_with(p, faults, 1, 9000, |cfg| cfg.ring_blocks = 256)
}

/// [`sim_job`] with the fabric's seed and MTU and every port's
/// configuration given.
pub fn sim_job_with(
    p: usize,
    faults: FaultProfile,
    seed: u64,
    mtu: usize,
    configure: impl Fn(&mut PortConfig),
) -> (SimCluster, Vec<Coll>) {
    let mut cluster = SimCluster::new(p, faults, seed, mtu, |_, cfg| configure(cfg)).unwrap();
    let members: Vec<_> = (0..p).map(SimCluster::addr).collect();
    let colls = std::mem::take(&mut cluster.endpoints)
        .into_iter()
        .map(|ep| Coll::new(ep, members.clone()).unwrap())
        .collect();
    (cluster, colls)
}

/// Progresses every process until all of its requests (`reqs[i]` for
/// process i) are complete; returns the virtual time from the call to the
/// last completion. Fails if that takes more than `limit` of virtual time.
pub fn drive(
    cluster: &mut SimCluster,
    colls: &mut [Coll],
    mut reqs: Vec<Vec<Request>>,
    limit: Duration,
) -> Duration {
    let start = cluster.now();
    let mut end = start;
    while reqs.iter().any(|r| !r.is_empty()) {
        let mut moved = 0;
        for (coll, rs) in colls.iter_mut().zip(reqs.iter_mut()) {
            moved += coll.progress().unwrap();
            let before = rs.len();
            rs.retain(|r| coll.test(r).unwrap().is_none());
            if rs.len() < before {
                end = cluster.now();
                moved += 1;
            }
        }
        if moved == 0 {
            to_next_event(cluster, colls, start, limit);
        }
    }
    end - start
}

/// Moves the virtual clock to the next event of any process or of the
/// fabric. Fails if nothing is pending, or if that is `limit` or more
/// after `start`.
pub fn to_next_event(cluster: &mut SimCluster, colls: &mut [Coll], start: Time, limit: Duration) {
    let next = colls
        .iter_mut()
        .filter_map(|c| c.messenger().endpoint().next_timeout())
        .chain(cluster.fabric.next_delivery())
        .min()
        .expect("something is pending");
    assert!(next - start < limit, "stuck");
    cluster.clock.set(next.max(cluster.now()));
}

/// `p` endpoints on one simulated fabric with `faults` and a real clock
/// (for ranks in threads running blocking calls: loss is recovered by real
/// retransmission timers), each knowing every other; `configure` adjusts
/// every port's configuration. (Not every test binary that includes this
/// module uses it.)
#[allow(dead_code)]
pub fn real_clock_endpoints(
    p: usize,
    faults: FaultProfile,
    seed: u64,
    configure: impl Fn(&mut PortConfig),
) -> Vec<bcl::Endpoint> {
    let fabric = bcl::sim::SimFabric::new(bcl::sim::FabricConfig {
        faults,
        seed,
        clock: bcl::sim::SimClock::Real(bcl::sim::RealClock::new()),
        ..Default::default()
    });
    let mut eps: Vec<bcl::Endpoint> = (0..p)
        .map(|i| {
            bcl::Endpoint::builder(SimCluster::addr(i), bcl::simnet::SIM_JOB)
                .method(Box::new(fabric.endpoint()))
                .clock(fabric.clock())
                .configure(&configure)
                .build()
                .unwrap()
        })
        .collect();
    let ds: Vec<_> = eps.iter().map(|e| e.descriptors()[0].clone()).collect();
    for (i, e) in eps.iter_mut().enumerate() {
        for (j, d) in ds.iter().enumerate() {
            if i != j {
                e.add_peer(SimCluster::addr(j), d.clone());
            }
        }
    }
    eps
}
