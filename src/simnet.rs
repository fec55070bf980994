//! A cluster of endpoints on one simulated fabric, in virtual time.
//!
//! [`SimCluster`] is for tests, property tests and demonstrations: every
//! endpoint knows every other's descriptor, and [`SimCluster::step`] makes
//! one round of progress on all of them, then, if nothing moved, jumps the
//! virtual clock to the next event (a frame becoming deliverable or a
//! protocol timer). The same seed gives the same run.

use crate::endpoint::{Endpoint, Error};
use bcl_core::{JobKey, PortConfig, ProcessAddr, Time};
use bcl_sim::{FabricConfig, FaultProfile, SimClock, SimFabric, VirtualClock};

/// Endpoints on one virtual-time fabric (see the module documentation).
pub struct SimCluster {
    /// The fabric, for its statistics and per-link fault settings.
    pub fabric: SimFabric,
    /// The virtual clock shared by the fabric and every endpoint.
    pub clock: VirtualClock,
    /// The endpoints; endpoint `i` has address [`SimCluster::addr`]`(i)`.
    pub endpoints: Vec<Endpoint>,
}

/// The job key of simulated clusters.
pub const SIM_JOB: JobKey = JobKey(0x51a1);

impl SimCluster {
    /// `n` endpoints on a fabric with `faults`, seeded with `seed`, frames of
    /// at most `mtu` bytes; `configure` adjusts each port's configuration
    /// (it is told the endpoint's index).
    pub fn new(
        n: usize,
        faults: FaultProfile,
        seed: u64,
        mtu: usize,
        configure: impl Fn(usize, &mut PortConfig),
    ) -> Result<SimCluster, Error> {
        let clock = VirtualClock::new();
        let fabric = SimFabric::new(FabricConfig {
            mtu,
            faults,
            seed,
            clock: SimClock::Virtual(clock.clone()),
            ..FabricConfig::default()
        });
        let mut endpoints = Vec::with_capacity(n);
        for i in 0..n {
            let ep = Endpoint::builder(Self::addr(i), SIM_JOB)
                .method(Box::new(fabric.endpoint()))
                .clock(SimClock::Virtual(clock.clone()))
                .configure(|c| {
                    c.epoch = 1 + i as u32;
                    configure(i, c)
                })
                .build()?;
            endpoints.push(ep);
        }
        let descriptors: Vec<_> = endpoints
            .iter()
            .map(|e| e.descriptors()[0].clone())
            .collect();
        for (i, ep) in endpoints.iter_mut().enumerate() {
            for (j, d) in descriptors.iter().enumerate() {
                if i != j {
                    ep.add_peer(Self::addr(j), d.clone());
                }
            }
        }
        Ok(SimCluster {
            fabric,
            clock,
            endpoints,
        })
    }

    /// The address of endpoint `i`.
    pub fn addr(i: usize) -> ProcessAddr {
        ProcessAddr::new(i as u32 + 1, 0)
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// One round of progress on every endpoint; if no frame moved, the clock
    /// jumps to the next event. Returns false when nothing is left to happen
    /// (no frame in flight, no timer pending).
    pub fn step(&mut self) -> Result<bool, Error> {
        let mut moved = 0;
        for ep in &mut self.endpoints {
            moved += ep.progress()?;
        }
        if moved > 0 {
            return Ok(true);
        }
        let next_timer = self.endpoints.iter().filter_map(|e| e.next_timeout()).min();
        let next = match (self.fabric.next_delivery(), next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return Ok(false),
            },
        };
        if next > self.clock.now() {
            self.clock.set(next);
        }
        Ok(true)
    }
}
