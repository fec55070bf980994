//! A synchronous step simulator of group layers, with no network.
//!
//! Every message sent during step `k` (one hop: a unicast, or one copy of
//! the root's multicast) arrives at the start of step `k + 1`; a step also
//! advances virtual time by [`StepSim::step_len`], which drives heartbeats
//! and failure detection. Processes can be killed: they stop at once,
//! without a goodbye, and what is sent to them is lost. Tests use it to
//! count message steps and to run membership changes under a message
//! stream deterministically.

use super::node::{Event, GroupConfig, GroupNode, Transmit};
use bcl_core::{ProcessAddr, Time};
use std::time::Duration;

/// Group layers of `n` processes exchanging messages in lock step (see the
/// module documentation).
#[derive(Debug)]
pub struct StepSim {
    /// The processes' group layers; process `i` has address
    /// [`StepSim::addr`]`(i)`; process 0 hosts the registry.
    pub nodes: Vec<GroupNode>,
    /// Whether each process is running.
    pub alive: Vec<bool>,
    /// The current step.
    pub step: u64,
    /// Virtual time per step.
    pub step_len: Duration,
    /// Every event so far, per process, with the step it happened in.
    pub events: Vec<Vec<(u64, Event)>>,
    /// Message hops delivered so far.
    pub hops: u64,
    in_flight: Vec<(usize, usize, Vec<u8>)>,
}

impl StepSim {
    /// `n` processes with `cfg`; a step lasts `step_len`.
    pub fn new(n: usize, cfg: &GroupConfig, step_len: Duration) -> StepSim {
        let nodes = (0..n)
            .map(|i| GroupNode::new(Self::addr(i), Self::addr(0), cfg.clone()))
            .collect();
        StepSim {
            nodes,
            alive: vec![true; n],
            step: 0,
            step_len,
            events: vec![Vec::new(); n],
            hops: 0,
            in_flight: Vec::new(),
        }
    }

    /// The address of process `i`.
    pub fn addr(i: usize) -> ProcessAddr {
        ProcessAddr::new(i as u32 + 1, 0)
    }

    /// The index of the process at `a`.
    pub fn index(a: ProcessAddr) -> usize {
        (a.node.0 as usize).wrapping_sub(1)
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        Time::ZERO + self.step_len * u32::try_from(self.step).unwrap_or(u32::MAX)
    }

    /// Calls into process `i` now (its messages leave in this step).
    pub fn call<R>(&mut self, i: usize, f: impl FnOnce(&mut GroupNode, Time) -> R) -> R {
        let now = self.now();
        let r = f(&mut self.nodes[i], now);
        self.collect(i);
        r
    }

    /// Stops process `i` without a goodbye.
    pub fn kill(&mut self, i: usize) {
        self.alive[i] = false;
    }

    /// Whether messages are in flight.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// One step: what was sent arrives, timers run, and what that sends
    /// leaves.
    pub fn step(&mut self) {
        self.step += 1;
        let now = self.now();
        for (from, to, bytes) in std::mem::take(&mut self.in_flight) {
            if self.alive.get(to).copied().unwrap_or(false) {
                self.hops += 1;
                self.nodes[to].handle(Self::addr(from), &bytes, now);
            }
        }
        for i in 0..self.nodes.len() {
            if self.alive[i] {
                if self.nodes[i].poll_timeout().is_some_and(|t| t <= now) {
                    self.nodes[i].handle_timeout(now);
                }
                self.collect(i);
            }
        }
    }

    fn collect(&mut self, i: usize) {
        while let Some(t) = self.nodes[i].poll_transmit() {
            match t {
                Transmit::Unicast { to, bytes } => self.in_flight.push((i, Self::index(to), bytes)),
                Transmit::Multicast { to, bytes, .. } => {
                    for d in to {
                        self.in_flight.push((i, Self::index(d), bytes.clone()));
                    }
                }
            }
        }
        while let Some(e) = self.nodes[i].poll_event() {
            self.events[i].push((self.step, e));
        }
    }
}
