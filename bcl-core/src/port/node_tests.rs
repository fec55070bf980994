//! Liveness per node: a thousand watched peers on ten nodes cost at most
//! one ping per node pair per period, also with two watchers on one node;
//! a process gone from a live node, and a whole node gone, are declared
//! dead within the bound; live ones never are.

use super::liveness_tests::{run, watched_config, State, MISSES, PERIOD};
use super::node::{LivePorts, NodeLiveness};
use super::tests::{caps, Net, MTU};
use super::*;
use crate::addr::NodeId;
use crate::method::LinkId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One node's shared liveness state, in memory.
#[derive(Default)]
struct Board {
    live: LivePorts,
    views: HashMap<NodeId, (Time, LivePorts)>,
    pinged: HashMap<NodeId, (Time, u16)>,
}

/// A process's handle on its node's board.
struct Shared(Arc<Mutex<Board>>);

impl NodeLiveness for Shared {
    fn local_live(&mut self, _: Time) -> LivePorts {
        self.0.lock().unwrap().live
    }
    fn view(&self, node: NodeId, _: Time) -> Option<(Time, LivePorts)> {
        self.0.lock().unwrap().views.get(&node).copied()
    }
    fn set_view(&mut self, node: NodeId, live: LivePorts, now: Time) {
        self.0.lock().unwrap().views.insert(node, (now, live));
    }
    fn take_ping(&mut self, node: NodeId, now: Time, period: Duration, port: u16) -> bool {
        let mut b = self.0.lock().unwrap();
        match b.pinged.get(&node) {
            Some(&(t, _)) if now.saturating_since(t) < period => false,
            _ => {
                b.pinged.insert(node, (now, port));
                true
            }
        }
    }
    fn unanswered(&self, node: NodeId) -> Option<u16> {
        let b = self.0.lock().unwrap();
        let &(t, port) = b.pinged.get(&node)?;
        let answered = b.views.get(&node).is_some_and(|&(at, _)| at >= t);
        (!answered).then_some(port)
    }
}

const NODES: u32 = 10;
const PER_NODE: u16 = 100;

thread_local! {
    /// Processes per remote node in the next `cluster_with` (tests that
    /// need few per node set it).
    static PER_NODE_NOW: std::cell::Cell<u16> = const { std::cell::Cell::new(PER_NODE) };
}
/// The watchers' node.
const HOME: u32 = 1;

/// Ports 0 and 1: watchers on node 1. Then `NODES` nodes (2, 3, ...) of
/// `PER_NODE` processes each, every one of which has sent both watchers a
/// message. Returns the net and the boards (index 0: node 1).
fn cluster() -> (Net, Vec<Arc<Mutex<Board>>>) {
    cluster_with(MISSES, Duration::ZERO)
}

/// [`cluster`] with `misses` periods of silence to the verdict.
fn cluster_with(misses: u32, offset: Duration) -> (Net, Vec<Arc<Mutex<Board>>>) {
    let mut addrs = vec![ProcessAddr::new(HOME, 0), ProcessAddr::new(HOME, 1)];
    let per_node = PER_NODE_NOW.with(|c| c.get());
    for n in 0..NODES {
        for p in 0..per_node {
            addrs.push(ProcessAddr::new(HOME + 1 + n, p));
        }
    }
    let boards: Vec<_> = (0..=NODES)
        .map(|_| Arc::new(Mutex::new(Board::default())))
        .collect();
    let mut ports = Vec::new();
    for (i, &a) in addrs.iter().enumerate() {
        let mut c = watched_config(i);
        c.liveness.misses = misses;
        c.local = a;
        c.ring_blocks = 64;
        let mut port = Port::new(c).unwrap();
        port.add_method(caps(MTU)).unwrap();
        let board = &boards[(a.node.0 - HOME) as usize];
        board.lock().unwrap().live[usize::from(a.port.0 / 64)] |= 1 << (a.port.0 % 64);
        port.set_node_liveness(Box::new(Shared(board.clone())));
        ports.push(port);
    }
    let mut net = Net::with_ports(ports, MTU);
    for i in 2..addrs.len() {
        for w in 0..2 {
            let to_w = Route {
                method: 0,
                link: LinkId(w as u32),
            };
            net.ports[i].set_route(net.now, addrs[w], to_w).unwrap();
            let to_i = Route {
                method: 0,
                link: LinkId(i as u32),
            };
            net.ports[w].set_route(net.now, addrs[i], to_i).unwrap();
            net.ports[i].send(net.now, addrs[w], &[1]).unwrap();
        }
    }
    assert_eq!(net.run_perfect().len(), 2 * (addrs.len() - 2));
    for w in 0..2 {
        if w == 1 && !offset.is_zero() {
            // The second watcher checks `offset` out of phase.
            let at = net.now + offset;
            run(&mut net, at, |_, _| State::Running);
        }
        for &a in &addrs[2..] {
            net.ports[w].watch_peer(net.now, a, true).unwrap();
        }
    }
    (net, boards)
}

/// Pings the watchers sent in a run.
fn pings(net: &Net) -> u64 {
    net.ports[0].stats().pings_sent + net.ports[1].stats().pings_sent
}

#[test]
fn a_thousand_peers_on_ten_nodes_cost_one_ping_per_node_pair_per_period() {
    let (mut net, _) = cluster();
    let periods = 30u32;
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * periods, |_, _| State::Running);
    let sent = pings(&net);
    println!(
        "2 watchers on one node, {} peers on {NODES} nodes, {periods} periods: {sent} pings ({:.2} per node pair per period)",
        u32::from(PER_NODE) * NODES,
        sent as f64 / f64::from(NODES * periods)
    );
    assert!(seen.gone.is_empty(), "{:?}", &seen.gone[..1]);
    // At most one per node pair and period (the first check may find the
    // turn free twice: +1 period).
    assert!(sent <= u64::from(NODES * (periods + 1)), "{sent} pings");
    assert!(sent >= u64::from(NODES * periods / 3), "{sent} pings");
    // The peers answer, nothing else: the watchers' frames are the pings.
    let from_watchers = seen.frames.iter().filter(|f| f.from < 2).count() as u64;
    assert_eq!(from_watchers, sent);
}

#[test]
fn a_process_gone_from_a_live_node_is_declared_dead_within_the_bound() {
    for misses in [MISSES, 4] {
        process_gone(misses);
    }
}

/// Longest time from a death to its verdict: `misses` periods after the
/// last frame or view that vouched for the peer, plus a millisecond tick
/// and a few hops.
fn bound(misses: u32) -> Duration {
    PERIOD * misses + Duration::from_millis(2)
}

/// One process of node 3 dies: only it is declared dead, by both
/// watchers, within `misses` periods (its neighbours go on answering
/// for their node: the dead one is not the one pinged).
fn process_gone(misses: u32) {
    let (mut net, boards) = cluster_with(misses, Duration::ZERO);
    // Node 3's port 5 (net index 2 + 100 + 5) dies; its node's board says so.
    let victim = 2 + usize::from(PER_NODE) + 5;
    let victim_addr = ProcessAddr::new(HOME + 2, 5);
    boards[2].lock().unwrap().live[0] &= !(1 << 5);
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * (misses + 4), |i, _| {
        if i == victim {
            State::Dead
        } else {
            State::Running
        }
    });
    let mut gone: Vec<_> = seen.gone.iter().map(|g| (g.0, g.1)).collect();
    gone.sort();
    assert_eq!(
        gone,
        vec![(0, victim_addr), (1, victim_addr)],
        "misses {misses}"
    );
    for g in &seen.gone {
        let after = g.2.saturating_since(from);
        assert!(after <= bound(misses), "declared after {after:?}");
    }
}

#[test]
fn a_node_gone_takes_its_processes_and_only_those() {
    let (mut net, _) = cluster();
    let gone_node = HOME + 4;
    let first = 2 + 3 * usize::from(PER_NODE);
    let on_gone_node = first..first + usize::from(PER_NODE);
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * (MISSES + 4), |i, _| {
        if on_gone_node.contains(&i) {
            State::Dead
        } else {
            State::Running
        }
    });
    assert_eq!(seen.gone.len(), 2 * usize::from(PER_NODE));
    for g in &seen.gone {
        assert_eq!(g.1.node.0, gone_node);
        assert!(g.2.saturating_since(from) <= bound(MISSES));
    }
}

#[test]
fn a_paused_process_is_not_declared_dead_before_the_bound() {
    let (mut net, boards) = cluster();
    let paused = 2 + 7;
    let from = net.now;
    let resume = from + PERIOD * (MISSES - 1);
    let board = boards[1].clone();
    board.lock().unwrap().live[0] &= !(1 << 7);
    let seen = run(&mut net, from + PERIOD * (MISSES + 3), |i, now| {
        if now >= resume {
            board.lock().unwrap().live[0] |= 1 << 7;
        }
        if i == paused && now < resume {
            State::Paused
        } else {
            State::Running
        }
    });
    assert!(seen.gone.is_empty(), "{:?}", seen.gone);
}

/// Two processes on each remote node; one dies after ten periods: only it
/// is declared dead, by both watchers, within `misses` periods of its
/// death (its neighbour, alone to answer for the node, is never taken for
/// dead), whatever the second watcher's phase.
#[test]
fn a_neighbour_alone_on_its_node_is_not_taken_for_dead() {
    PER_NODE_NOW.with(|c| c.set(2));
    let cases = [
        (2u32, 0u64),
        (2, 37),
        (2, 63),
        (3u32, 0u64),
        (4, 0),
        (3, 37),
        (3, 63),
        (4, 37),
    ];
    for ((misses, off), port) in cases.into_iter().flat_map(|c| [(c, 0u16), (c, 1)]) {
        let (mut net, boards) = cluster_with(misses, Duration::from_millis(off));
        // Node 3's port 0 or 1: the pings for a view go to either first.
        let victim = 2 + 2 + usize::from(port);
        let victim_addr = ProcessAddr::new(HOME + 2, port);
        let kill = net.now + PERIOD * 10 + Duration::from_millis(37);
        let board = boards[2].clone();
        let seen = run(&mut net, kill + PERIOD * (misses + 4), |i, now| {
            if now >= kill {
                board.lock().unwrap().live[0] &= !(1 << port);
            }
            if i == victim && now >= kill {
                State::Dead
            } else {
                State::Running
            }
        });
        let mut gone: Vec<_> = seen.gone.iter().map(|g| (g.0, g.1)).collect();
        gone.sort();
        assert_eq!(
            gone,
            vec![(0, victim_addr), (1, victim_addr)],
            "misses {misses}, offset {off} ms, victim port {port}"
        );
        for g in &seen.gone {
            let after = g.2.saturating_since(kill);
            assert!(after <= bound(misses), "declared {after:?} after the kill");
        }
    }
    PER_NODE_NOW.with(|c| c.set(PER_NODE));
}
