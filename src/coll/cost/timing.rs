//! The LogGP timing simulator: runs the schedules of every rank in virtual
//! time.
//!
//! Each rank has a CPU clock and, per [`Link`], a transmit and a receive
//! port (its NIC, or its share of memory for shared memory). A round of a
//! rank runs as [`crate::coll::schedule`] says:
//!
//! 1. its local steps, each `bytes × copy_per_byte` (or `reduce_per_byte`)
//!    of CPU;
//! 2. its sends in order: a send of m bytes starts when the CPU and the
//!    transmit port are both free, takes `o_s` of CPU and keeps the
//!    transmit port for `max(g, m·G)`; its first byte reaches the
//!    receiver's port `L` after the overhead ends;
//! 3. its receives: the receive port takes the messages reaching it one at
//!    a time in arrival order (each for `max(g, m·G)`, the last byte
//!    `(m − 1)·G` after the first), so many senders to one receiver queue
//!    there; when every message of the round is in, the CPU takes them in
//!    arrival order, `o_r` each (not before the message is in), then the
//!    combining receives in step order, `m × reduce_per_byte` each.
//!
//! The next round starts when the CPU is done. Messages from one rank to
//! another are matched in order, as in [`crate::coll::sim`]. Port events
//! are processed in time order from one queue; rank progress is computed
//! eagerly when a round's last message comes in (everything it does
//! happens later than that). Memory is O(messages in flight + P).

use super::model::{CostModel, Link};
use crate::coll::schedule::{Combine, Schedule, Step};
use crate::coll::sim::SimError;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Completion times of a simulated collective, in seconds from a common
/// start.
#[derive(Clone, Debug, PartialEq)]
pub struct SimTimes {
    /// When each rank finished its last round.
    pub per_rank: Vec<f64>,
    /// The latest of them: the collective's time.
    pub max: f64,
    /// Messages sent.
    pub messages: usize,
    /// Bytes sent.
    pub bytes: usize,
}

/// A message on its way: the event is its first byte reaching the
/// receiver's port.
struct Event {
    time: f64,
    seq: u64,
    from: usize,
    to: usize,
    len: usize,
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Event) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    /// Reversed: the heap pops the earliest event, ties in sending order.
    fn cmp(&self, other: &Event) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.seq.cmp(&self.seq))
    }
}

/// A message that reached its receiver before the receiver asked for it.
struct Arrived {
    from: usize,
    len: usize,
    at: f64,
}

#[derive(Default)]
struct Rank {
    round: usize,
    cpu: f64,
    /// Transmit and receive ports, free from: [intra, inter].
    tx_free: [f64; 2],
    rx_free: [f64; 2],
    /// Messages in before their receive was posted, in arrival order.
    early: Vec<Arrived>,
    /// Receives of the current round still waiting: (from, step index).
    waiting: Vec<(usize, usize)>,
    /// Arrival time of each receive step of the current round, by step
    /// index (NaN while waiting).
    arrivals: Vec<f64>,
    done: bool,
}

struct Sim<'a> {
    schedules: &'a [Schedule],
    model: &'a CostModel,
    nodes: &'a [u32],
    ranks: Vec<Rank>,
    heap: BinaryHeap<Event>,
    seq: u64,
    messages: usize,
    bytes: usize,
    /// When each rank finished each round, if asked for.
    trace: Option<Vec<Vec<f64>>>,
    /// Scratch of [`Sim::finish_round`]: (arrival, step index) of the
    /// round's receives.
    order: Vec<(f64, usize)>,
}

fn link_index(l: Link) -> usize {
    match l {
        Link::Intra => 0,
        Link::Inter => 1,
    }
}

impl Sim<'_> {
    fn link(&self, a: usize, b: usize) -> Link {
        if self.nodes[a] == self.nodes[b] {
            Link::Intra
        } else {
            Link::Inter
        }
    }

    /// Runs rank `r` from the start of its current round until it waits
    /// for a message or ends.
    fn advance(&mut self, r: usize) -> Result<(), SimError> {
        let p = self.schedules.len();
        loop {
            let Some(round) = self.schedules[r].rounds.get(self.ranks[r].round) else {
                self.ranks[r].done = true;
                return Ok(());
            };
            // Phase 1: local steps.
            let mut cpu = self.ranks[r].cpu;
            for step in &round.steps {
                match step {
                    Step::Copy { range, .. } => {
                        cpu += range.len() as f64 * self.model.copy_per_byte
                    }
                    Step::Reduce { range, .. } => {
                        cpu += range.len() as f64 * self.model.reduce_per_byte
                    }
                    _ => {}
                }
            }
            // Phase 2: sends, then the receives' bookkeeping.
            let mut arrivals = std::mem::take(&mut self.ranks[r].arrivals);
            let mut waiting = std::mem::take(&mut self.ranks[r].waiting);
            arrivals.clear();
            arrivals.resize(round.steps.len(), f64::NAN);
            waiting.clear();
            for (i, step) in round.steps.iter().enumerate() {
                match *step {
                    Step::Send { to, ref range, .. } => {
                        if to >= p {
                            return Err(SimError::Bounds {
                                rank: r,
                                what: format!("send to rank {to} of {p}"),
                            });
                        }
                        let link = self.link(r, to);
                        let lp = self.model.link(link);
                        let m = range.len() as f64;
                        let k = link_index(link);
                        let start = cpu.max(self.ranks[r].tx_free[k]);
                        cpu = start + lp.o_s;
                        self.ranks[r].tx_free[k] = start + lp.gap(m);
                        self.seq += 1;
                        self.messages += 1;
                        self.bytes += range.len();
                        self.heap.push(Event {
                            time: (cpu + lp.l).max(start),
                            seq: self.seq,
                            from: r,
                            to,
                            len: range.len(),
                        });
                    }
                    Step::Recv {
                        from, ref range, ..
                    } => {
                        if from >= p {
                            return Err(SimError::Bounds {
                                rank: r,
                                what: format!("receive from rank {from} of {p}"),
                            });
                        }
                        let early = &mut self.ranks[r].early;
                        if let Some(j) = early.iter().position(|a| a.from == from) {
                            let a = early.remove(j);
                            if a.len != range.len() {
                                return Err(SimError::Length {
                                    to: r,
                                    from,
                                    expected: range.len(),
                                    got: a.len,
                                });
                            }
                            arrivals[i] = a.at;
                        } else {
                            waiting.push((from, i));
                        }
                    }
                    _ => {}
                }
            }
            self.ranks[r].cpu = cpu;
            self.ranks[r].arrivals = arrivals;
            let wait = !waiting.is_empty();
            self.ranks[r].waiting = waiting;
            if wait {
                return Ok(());
            }
            self.finish_round(r);
        }
    }

    /// Phase 3 of rank `r`'s current round, all of whose messages are in.
    fn finish_round(&mut self, r: usize) {
        let round = &self.schedules[r].rounds[self.ranks[r].round];
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        for (i, step) in round.steps.iter().enumerate() {
            if let Step::Recv { .. } = step {
                order.push((self.ranks[r].arrivals[i], i));
            }
        }
        if order.len() > 1 {
            order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        }
        let mut cpu = self.ranks[r].cpu;
        for &(at, i) in &order {
            let Step::Recv { from, .. } = round.steps[i] else {
                unreachable!("filtered above")
            };
            cpu = cpu.max(at) + self.model.link(self.link(from, r)).o_r;
        }
        for step in &round.steps {
            if let Step::Recv { range, combine, .. } = step {
                if *combine != Combine::Replace {
                    cpu += range.len() as f64 * self.model.reduce_per_byte;
                }
            }
        }
        self.order = order;
        if let Some(trace) = &mut self.trace {
            trace[r].push(cpu);
        }
        let rank = &mut self.ranks[r];
        rank.cpu = cpu;
        rank.round += 1;
    }

    /// The first byte of `e` reaches its receiver's port.
    fn arrive(&mut self, e: Event) -> Result<(), SimError> {
        let link = self.link(e.from, e.to);
        let lp = *self.model.link(link);
        let k = link_index(link);
        let m = e.len as f64;
        let rank = &mut self.ranks[e.to];
        let start = e.time.max(rank.rx_free[k]);
        rank.rx_free[k] = start + lp.gap(m);
        let at = start + lp.wire(m);
        match rank.waiting.iter().position(|&(f, _)| f == e.from) {
            Some(j) => {
                let (_, i) = rank.waiting.remove(j);
                let round = &self.schedules[e.to].rounds[rank.round];
                let Step::Recv { ref range, .. } = round.steps[i] else {
                    unreachable!("waiting holds receive steps")
                };
                if range.len() != e.len {
                    return Err(SimError::Length {
                        to: e.to,
                        from: e.from,
                        expected: range.len(),
                        got: e.len,
                    });
                }
                rank.arrivals[i] = at;
                if rank.waiting.is_empty() {
                    self.finish_round(e.to);
                    self.advance(e.to)?;
                }
            }
            None => rank.early.push(Arrived {
                from: e.from,
                len: e.len,
                at,
            }),
        }
        Ok(())
    }
}

/// Runs `schedules` (index = rank; rank r on node `nodes[r]`) under
/// `model` and returns when each rank finishes. Errors as
/// [`crate::coll::sim::run`] would fail on the same schedules: a deadlock,
/// a message whose length differs from its receive, a rank out of range,
/// or messages nobody receives; and `nodes` not giving one node per rank.
pub fn simulate(
    schedules: &[Schedule],
    model: &CostModel,
    nodes: &[u32],
) -> Result<SimTimes, SimError> {
    run(schedules, model, nodes, false).map(|(t, _)| t)
}

/// [`simulate`], with when each rank finished each of its rounds (in
/// which a round with only local steps and sends finishes when its last
/// send's overhead ends).
pub fn simulate_traced(
    schedules: &[Schedule],
    model: &CostModel,
    nodes: &[u32],
) -> Result<(SimTimes, Vec<Vec<f64>>), SimError> {
    run(schedules, model, nodes, true).map(|(t, trace)| (t, trace.unwrap_or_default()))
}

type Traced = (SimTimes, Option<Vec<Vec<f64>>>);

fn run(
    schedules: &[Schedule],
    model: &CostModel,
    nodes: &[u32],
    traced: bool,
) -> Result<Traced, SimError> {
    let p = schedules.len();
    if nodes.len() != p {
        return Err(SimError::Bounds {
            rank: 0,
            what: format!("nodes gives {} nodes for {p} ranks", nodes.len()),
        });
    }
    let mut sim = Sim {
        schedules,
        model,
        nodes,
        ranks: (0..p).map(|_| Rank::default()).collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        messages: 0,
        bytes: 0,
        trace: traced.then(|| vec![Vec::new(); p]),
        order: Vec::new(),
    };
    for r in 0..p {
        sim.advance(r)?;
    }
    while let Some(e) = sim.heap.pop() {
        sim.arrive(e)?;
    }
    if let Some(stuck) = sim.ranks.iter().position(|r| !r.done) {
        let waiting: Vec<String> = (stuck..p)
            .filter(|&r| !sim.ranks[r].done)
            .take(4)
            .map(|r| {
                let from: Vec<String> = sim.ranks[r]
                    .waiting
                    .iter()
                    .map(|(f, _)| f.to_string())
                    .collect();
                format!(
                    "rank {r} in round {} waiting for rank(s) {}",
                    sim.ranks[r].round,
                    from.join(", ")
                )
            })
            .collect();
        return Err(SimError::Deadlock(waiting.join("; ")));
    }
    let left: usize = sim.ranks.iter().map(|r| r.early.len()).sum();
    if left > 0 {
        return Err(SimError::Unreceived(left));
    }
    let per_rank: Vec<f64> = sim.ranks.iter().map(|r| r.cpu).collect();
    let max = per_rank.iter().copied().fold(0.0, f64::max);
    Ok((
        SimTimes {
            per_rank,
            max,
            messages: sim.messages,
            bytes: sim.bytes,
        },
        sim.trace,
    ))
}
