//! Group layer tests in virtual steps, with no network.

use super::member::{Member, MemberConfig, Output};
use super::node::{Event, GroupConfig};
use super::sim::StepSim;
use super::view::{SourceId, Tree, View};
use super::wire::{Msg, ReduceOp};
use super::{GroupId, GroupNode};
use bcl_core::ProcessAddr;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn addr(i: usize) -> ProcessAddr {
    ProcessAddr::new(i as u32 + 1, 0)
}

fn ceil_log2(n: usize) -> u64 {
    u64::from(n.next_power_of_two().trailing_zeros())
}

/// The view of a static group of `n`, placed by the agent's rule in
/// admission order (a complete binary tree).
fn static_view(n: usize) -> View {
    let mut t = Tree::new(addr(0), 1);
    for i in 1..n {
        t.add(addr(i), 1);
    }
    t.view(1)
}

/// The members of a static group with `view`.
fn founded(view: &View) -> Vec<Member> {
    (0..view.len())
        .map(|i| {
            let me = SourceId {
                addr: addr(i),
                inc: 1,
            };
            Member::founding(GroupId(1), me, view.clone(), MemberConfig::default())
        })
        .collect()
}

/// A static group of `n`: its view and members.
fn static_group(n: usize) -> (View, Vec<Member>) {
    let view = static_view(n);
    let members = founded(&view);
    (view, members)
}

/// What a member said in which step.
struct Record {
    step: u64,
    member: usize,
    output: Output,
}

/// Runs members in lock step: what is sent in step k arrives in step k+1.
/// `start` makes the step-0 calls. Returns every non-message output.
fn run_steps(members: &mut [Member], start: impl FnOnce(&mut [Member])) -> Vec<Record> {
    start(members);
    let mut records = Vec::new();
    let mut step = 0;
    loop {
        let mut flight: Vec<(usize, Option<usize>, Msg)> = Vec::new();
        for (i, m) in members.iter_mut().enumerate() {
            while let Some(o) = m.poll_output() {
                match o {
                    Output::Unicast { to, msg } => {
                        flight.push((i, Some(to.node.0 as usize - 1), msg))
                    }
                    Output::Multicast(msg) => flight.push((i, None, msg)),
                    output => records.push(Record {
                        step,
                        member: i,
                        output,
                    }),
                }
            }
        }
        if flight.is_empty() {
            return records;
        }
        step += 1;
        assert!(step < 10_000, "no quiescence");
        for (from, to, msg) in flight {
            match to {
                Some(t) => members[t].handle(addr(from), false, msg),
                None => {
                    for (t, m) in members.iter_mut().enumerate() {
                        if t != from {
                            m.handle(addr(from), true, msg.clone());
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn multicast_and_barrier_meet_the_step_bounds() {
    let mut worst_mcast = (0, 0, 0);
    let mut worst_barrier = (0, 0);
    let mut worst_ack = (0, 0, 0);
    let mut per_n = Vec::new();
    for n in 1..=64usize {
        let mut n_mcast = 0;
        let mut n_ack = 0;
        let bound = ceil_log2(n) + 1;
        let view = static_view(n);
        let template = founded(&view);
        for src in 0..n {
            let mut members = template.clone();
            let recs = run_steps(&mut members, |m| {
                m[src].send(b"hello").unwrap();
            });
            let mut got = BTreeSet::new();
            let mut last = 0;
            let mut complete = None;
            for r in &recs {
                match &r.output {
                    Output::Deliver { source, seq, data } => {
                        assert_eq!(
                            (source.addr, *seq, &data[..]),
                            (addr(src), 0, &b"hello"[..])
                        );
                        assert!(got.insert(r.member), "delivered twice");
                        last = last.max(r.step);
                    }
                    Output::SendComplete { seq: 0 } if r.member == src => complete = Some(r.step),
                    _ => {}
                }
            }
            assert_eq!(got.len(), n - 1, "N={n} source {src}");
            assert!(!got.contains(&src));
            assert!(last <= bound, "N={n} source {src}: {last} steps > {bound}");
            let complete = complete.expect("send completes");
            // Acknowledgements the source handled: at most one per link.
            let degree = view.children(addr(src)).len() + usize::from(src != 0);
            let acks = members[src].stats().own_acks;
            assert!(
                acks as usize <= degree,
                "N={n} source {src}: {acks} acks, degree {degree}"
            );
            n_mcast = n_mcast.max(last);
            n_ack = n_ack.max(complete);
            if last > worst_mcast.0 {
                worst_mcast = (last, n, src);
            }
            if complete > worst_ack.0 {
                worst_ack = (complete, n, src);
            }
            // Nothing is retained once complete.
            assert!(members.iter().all(|m| m.held() == 0));
        }
        let mut members = founded(&view);
        let recs = run_steps(&mut members, |m| {
            for x in m.iter_mut() {
                x.barrier().unwrap();
            }
        });
        let released: BTreeSet<usize> = recs
            .iter()
            .filter(|r| matches!(r.output, Output::BarrierReleased { epoch: 1 }))
            .map(|r| r.member)
            .collect();
        assert_eq!(released.len(), n);
        let done = recs
            .iter()
            .find(|r| matches!(r.output, Output::BarrierComplete { epoch: 1 }))
            .expect("barrier completes at the root");
        assert_eq!(done.member, 0);
        let bound = 2 * ceil_log2(n) + 1;
        assert!(
            done.step <= bound,
            "N={n}: barrier {} steps > {bound}",
            done.step
        );
        if done.step > worst_barrier.0 {
            worst_barrier = (done.step, n);
        }
        per_n.push(format!(
            "N={n}: {n_mcast}/{} {}/{bound} {n_ack}",
            ceil_log2(n) + 1,
            done.step
        ));
    }
    eprintln!(
        "per N: multicast max/bound, barrier/bound, send completion max\n{}",
        per_n.join("; ")
    );
    eprintln!(
        "multicast: worst {} steps (N={}, source {}), bound at N=64: {}; \
         send completion: worst {} steps (N={}, source {}); \
         barrier: worst {} steps (N={}), bound at N=64: {}",
        worst_mcast.0,
        worst_mcast.1,
        worst_mcast.2,
        ceil_log2(64) + 1,
        worst_ack.0,
        worst_ack.1,
        worst_ack.2,
        worst_barrier.0,
        worst_barrier.1,
        2 * ceil_log2(64) + 1
    );
}

#[test]
fn reduce_sums_over_the_membership_and_reaches_everyone() {
    for n in [1, 2, 5, 17] {
        let (_, mut members) = static_group(n);
        let recs = run_steps(&mut members, |m| {
            for (i, x) in m.iter_mut().enumerate() {
                x.reduce(ReduceOp::Sum, &[i as u64, 1], true).unwrap();
            }
        });
        let want = vec![(0..n as u64).sum::<u64>(), n as u64];
        let results: BTreeMap<usize, Vec<u64>> = recs
            .iter()
            .filter_map(|r| match &r.output {
                Output::ReduceResult { epoch: 1, values } => Some((r.member, values.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), n);
        assert!(results.values().all(|v| *v == want));
    }
}

#[test]
fn many_messages_from_every_source_arrive_once_in_order() {
    let n = 11;
    let (_, mut members) = static_group(n);
    let recs = run_steps(&mut members, |m| {
        for (i, x) in m.iter_mut().enumerate() {
            for k in 0..20u8 {
                x.send(&[i as u8, k]).unwrap();
            }
        }
    });
    let mut per: BTreeMap<(usize, ProcessAddr), Vec<u64>> = BTreeMap::new();
    let mut complete = 0;
    for r in recs {
        match r.output {
            Output::Deliver { source, seq, data } => {
                assert_eq!(data, [source.addr.node.0 as u8 - 1, seq as u8]);
                per.entry((r.member, source.addr)).or_default().push(seq);
            }
            Output::SendComplete { .. } => complete += 1,
            _ => {}
        }
    }
    assert_eq!(per.len(), n * (n - 1));
    assert!(per.values().all(|v| *v == (0..20).collect::<Vec<_>>()));
    assert_eq!(complete, n * 20);
}

fn fast_cfg() -> GroupConfig {
    let mut cfg = GroupConfig {
        heartbeat: Duration::from_millis(10),
        ..GroupConfig::default()
    };
    cfg.detect.late = Duration::from_millis(30);
    cfg.detect.probe_timeout = Duration::from_millis(10);
    cfg.member.window = 16;
    cfg
}

fn run_until(sim: &mut StepSim, max: u64, mut done: impl FnMut(&StepSim) -> bool) {
    for _ in 0..max {
        if done(sim) {
            return;
        }
        sim.step();
    }
    assert!(done(sim), "condition not reached in {max} steps");
}

/// Everyone in 0..n joins "g"; returns the group.
fn form(sim: &mut StepSim, n: usize) -> GroupId {
    for i in 0..n {
        sim.call(i, |node, now| node.join("g", now).unwrap());
    }
    let mut g = GroupId(0);
    run_until(sim, 200, |s| {
        (0..n).all(|i| s.nodes[i].group_named("g").is_some()) && {
            g = s.nodes[0].group_named("g").unwrap();
            let v = s.nodes[0].view(g).unwrap().clone();
            (0..n).all(|i| s.nodes[i].view(g) == Some(&v))
        }
    });
    g
}

#[test]
fn join_by_name_builds_the_tree_and_barrier_reduce_work() {
    let mut sim = StepSim::new(7, &fast_cfg(), Duration::from_millis(1));
    let g = form(&mut sim, 7);
    let view = sim.nodes[0].view(g).unwrap().clone();
    assert_eq!(view.len(), 7);
    assert_eq!(view.root(), Some(StepSim::addr(0)));
    assert_eq!(view.height(), 2);
    let reg = sim.nodes[0].registry().unwrap().group(g).unwrap();
    assert_eq!(reg.members.len(), 7);
    for i in 0..7 {
        sim.call(i, |n, now| n.barrier(g, now).unwrap());
        sim.call(i, |n, now| {
            n.reduce(g, ReduceOp::Max, &[i as u64], true, now).unwrap()
        });
    }
    run_until(&mut sim, 100, |s| {
        (0..7).all(|i| {
            s.events[i]
                .iter()
                .any(|(_, e)| matches!(e, Event::ReduceResult { values, .. } if *values == [6]))
                && s.events[i]
                    .iter()
                    .any(|(_, e)| matches!(e, Event::BarrierReleased { epoch: 1, .. }))
        })
    });
}

#[test]
fn links_are_counted_across_groups() {
    let mut sim = StepSim::new(3, &fast_cfg(), Duration::from_millis(1));
    for name in ["a", "b"] {
        for i in 0..3 {
            sim.call(i, |n, now| n.join(name, now).unwrap());
            run_until(&mut sim, 50, |s| s.nodes[i].group_named(name).is_some());
        }
    }
    run_until(&mut sim, 50, |s| !s.busy());
    // Both groups: 0 is the root, 1 and 2 its children.
    assert_eq!(sim.nodes[0].link_refs(StepSim::addr(1)), 2);
    assert_eq!(sim.nodes[1].link_refs(StepSim::addr(0)), 2);
    assert_eq!(sim.nodes[1].link_refs(StepSim::addr(2)), 0);
    let b = sim.nodes[1].group_named("b").unwrap();
    sim.call(1, |n, now| n.leave(b, now).unwrap());
    run_until(&mut sim, 50, |s| s.nodes[1].group_named("b").is_none());
    assert_eq!(sim.nodes[1].link_refs(StepSim::addr(0)), 1);
    let a = sim.nodes[1].group_named("a").unwrap();
    sim.call(1, |n, now| n.leave(a, now).unwrap());
    run_until(&mut sim, 50, |s| s.nodes[1].group_named("a").is_none());
    assert_eq!(sim.nodes[1].link_refs(StepSim::addr(0)), 0);
    assert!(sim.events[1].iter().any(|(_, e)| *e
        == Event::LinkClosed {
            peer: StepSim::addr(0)
        }));
    run_until(&mut sim, 50, |s| {
        s.nodes[0].link_refs(StepSim::addr(1)) == 0
    });
    // The registry forgets 1 in both groups.
    run_until(&mut sim, 5, |s| {
        let reg = s.nodes[0].registry().unwrap();
        [a, b]
            .iter()
            .all(|&g| !reg.group(g).unwrap().members.contains(&StepSim::addr(1)))
    });
}

#[test]
fn malformed_and_misdirected_messages_are_dropped_and_counted() {
    let mut node = GroupNode::new(addr(1), addr(0), GroupConfig::default());
    let t = bcl_core::Time::ZERO;
    node.handle(addr(3), &[], t);
    node.handle(addr(3), &[1, 99, 0, 0, 0, 0, 0, 1], t);
    node.handle(addr(3), &[1, 1, 0, 0, 0, 0, 0, 1, 5], t);
    assert_eq!(node.stats().malformed, 3);
    // A join request at a process that is not the registry.
    let p = super::wire::Packet {
        group: GroupId(0),
        mcast: false,
        msg: Msg::JoinReq { name: "x".into() },
    };
    node.handle(addr(3), &p.to_bytes(), t);
    assert_eq!(node.stats().misdirected, 1);
    // Data for a group it is not in.
    let p = super::wire::Packet {
        group: GroupId(9),
        mcast: false,
        msg: Msg::Arrive(1),
    };
    node.handle(addr(3), &p.to_bytes(), t);
    assert_eq!(node.stats().unknown_group, 1);
    assert!(node.poll_transmit().is_none());
}

#[test]
fn a_registration_that_overtakes_the_registry_answer_is_held() {
    use super::wire::Packet;
    let t = bcl_core::Time::ZERO;
    let mut node = GroupNode::new(addr(1), addr(0), GroupConfig::default());
    node.join("x", t).unwrap();
    assert!(
        matches!(node.poll_transmit(), Some(super::Transmit::Unicast { to, .. }) if to == addr(0))
    );
    let g = GroupId(5);
    let reg = Packet {
        group: g,
        mcast: false,
        msg: Msg::Register,
    };
    node.handle(addr(2), &reg.to_bytes(), t);
    assert!(node.poll_transmit().is_none());
    let rep = Packet {
        group: g,
        mcast: false,
        msg: Msg::JoinRep {
            name: "x".into(),
            agent: addr(1),
        },
    };
    node.handle(addr(0), &rep.to_bytes(), t);
    // The root welcomes its new child, then greets it.
    let to_2: Vec<Msg> = std::iter::from_fn(|| node.poll_transmit())
        .filter_map(|tx| match tx {
            super::Transmit::Unicast { to, bytes } if to == addr(2) => Packet::parse(&bytes).ok(),
            _ => None,
        })
        .map(|p| p.msg)
        .collect();
    assert!(
        matches!(to_2[..], [Msg::Welcome(_), Msg::Hello(_)]),
        "{to_2:?}"
    );
    assert_eq!(node.agent(g).unwrap().len(), 2);
}

#[test]
fn a_silent_member_is_probed_then_removed_and_a_dead_agent_loses_its_group() {
    let mut sim = StepSim::new(4, &fast_cfg(), Duration::from_millis(1));
    let g = form(&mut sim, 4);
    sim.kill(1);
    run_until(&mut sim, 200, |s| {
        s.nodes[0]
            .view(g)
            .is_some_and(|v| !v.contains(StepSim::addr(1)))
    });
    assert!(sim.events[0].iter().any(|(_, e)| *e
        == Event::MemberFailed {
            group: g,
            member: StepSim::addr(1)
        }));
    // 3 was 1's child: now the root's.
    run_until(&mut sim, 50, |s| {
        s.nodes[3]
            .member(g)
            .and_then(|m| m.topology())
            .and_then(|t| t.parent)
            == Some(StepSim::addr(0))
    });
    // A group whose agent is not the registry's process: kill its agent.
    sim.call(2, |n, now| n.join("h", now).unwrap());
    run_until(&mut sim, 50, |s| s.nodes[2].group_named("h").is_some());
    sim.call(3, |n, now| n.join("h", now).unwrap());
    run_until(&mut sim, 50, |s| s.nodes[3].group_named("h").is_some());
    let h = sim.nodes[3].group_named("h").unwrap();
    sim.kill(2);
    run_until(&mut sim, 300, |s| s.nodes[3].group_named("h").is_none());
    assert!(sim.events[3]
        .iter()
        .any(|(_, e)| *e == Event::Deleted { group: h }));
}

/// A message of the stream, as its source sent it.
#[derive(Clone, Debug)]
struct Sent {
    seq: u64,
    stamp: u32,
    step: u64,
    data: Vec<u8>,
}

/// A membership period of a process: the version that admitted it,
/// whether it is still open, and what it delivered.
type Period = (u32, bool, Vec<(SourceId, u64, Vec<u8>)>);

/// What happens to whom during a stream.
#[derive(Clone, Debug)]
enum Action {
    Join(usize),
    Leave(usize),
    Kill,
}

/// Runs a stream from every member with `actions` at their steps, then
/// checks delivery: exactly once, in order, everything sent while present
/// (for members that stay), nothing sent while absent.
fn stream_with_changes(initial: usize, total: usize, actions: &[(u64, Action)], seed: u64) {
    let cfg = fast_cfg();
    let window = cfg.member.window;
    let mut sim = StepSim::new(total, &cfg, Duration::from_millis(1));
    let g = form(&mut sim, initial);
    let start = sim.step;
    let stream_len = 300;
    let mut sent: BTreeMap<SourceId, Vec<Sent>> = BTreeMap::new();
    let mut killed: Vec<usize> = Vec::new();
    let mut kill_children = BTreeMap::new();
    let mut leavers = BTreeSet::new();
    let mut rng = seed;
    let mut next_rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    while sim.step < start + stream_len {
        let t = sim.step - start;
        for (at, a) in actions {
            if *at != t {
                continue;
            }
            match *a {
                Action::Join(i) => {
                    if sim.alive[i] && sim.nodes[i].group_named("g").is_none() {
                        let _ = sim.call(i, |n, now| n.join("g", now));
                    }
                }
                Action::Leave(pick) => {
                    let cands: Vec<usize> = (1..total)
                        .filter(|&i| {
                            sim.alive[i]
                                && !leavers.contains(&i)
                                && sim.nodes[i].member(g).is_some_and(|m| m.is_joined())
                        })
                        .collect();
                    if !cands.is_empty() {
                        let i = cands[pick % cands.len()];
                        leavers.insert(i);
                        sim.call(i, |n, now| n.leave(g, now).unwrap());
                    }
                }
                Action::Kill => {
                    // An internal member if there is one.
                    let view = sim.nodes[0].view(g).unwrap().clone();
                    let ok = |i: usize| i != 0 && sim.alive[i] && view.contains(StepSim::addr(i));
                    let internal =
                        (1..total).find(|&i| ok(i) && !view.children(StepSim::addr(i)).is_empty());
                    if let Some(i) = internal.or_else(|| (1..total).find(|&i| ok(i))) {
                        kill_children.insert(i, view.children(StepSim::addr(i)));
                        sim.kill(i);
                        killed.push(i);
                    }
                }
            }
        }
        for i in 0..total {
            if !sim.alive[i] || next_rand() % 3 == 0 {
                continue;
            }
            let Some(m) = sim.nodes[i].member(g) else {
                continue;
            };
            if !m.is_joined() || m.is_leaving() {
                continue;
            }
            let (id, stamp) = (m.id(), m.view().unwrap().version);
            let step = sim.step;
            let seq_guess = sent.get(&id).map_or(0, |v| v.len() as u64);
            let data: Vec<u8> = [i as u8]
                .into_iter()
                .chain(seq_guess.to_be_bytes())
                .collect();
            if let Ok(seq) = sim.call(i, |n, now| n.send_to_group(g, &data, now)) {
                assert_eq!(seq, seq_guess);
                sent.entry(id).or_default().push(Sent {
                    seq,
                    stamp,
                    step,
                    data,
                });
            }
        }
        sim.step();
    }
    // Quiesce: every running member complete and in the root's view.
    run_until(&mut sim, 3000, |s| {
        let Some(v) = s.nodes[0].view(g) else {
            return false;
        };
        (0..total).all(|i| {
            !s.alive[i]
                || match s.nodes[i].member(g) {
                    None => s.nodes[i].group_named("g").is_none() && !leaving_or_joining(s, i),
                    Some(m) => m.sends_complete() && m.view() == Some(v),
                }
        })
    });
    for _ in 0..30 {
        sim.step();
    }
    // The incarnations that were running when killed.
    let killed_ids: Vec<SourceId> = killed
        .iter()
        .filter_map(|&k| {
            sim.events[k].iter().rev().find_map(|(_, e)| match e {
                Event::Joined { version, .. } => Some(SourceId {
                    addr: StepSim::addr(k),
                    inc: *version,
                }),
                _ => None,
            })
        })
        .collect();
    let final_view = sim.nodes[0].view(g).unwrap().clone();
    // The step at which the root installed each version.
    let installed: BTreeMap<u32, u64> = sim.events[0]
        .iter()
        .filter_map(|(s, e)| match e {
            Event::ViewChanged { version, .. } => Some((*version, *s)),
            _ => None,
        })
        .collect();
    for i in 0..total {
        // One period per membership: a process that left may join again
        // as a new incarnation.
        let mut periods: Vec<Period> = Vec::new();
        for (_, e) in &sim.events[i] {
            match e {
                Event::Joined { version, .. } => periods.push((*version, true, Vec::new())),
                Event::Left { .. } => {
                    if let Some(p) = periods.last_mut() {
                        p.1 = false;
                    }
                }
                Event::Deliver {
                    source, seq, data, ..
                } => {
                    if let Some(p) = periods.last_mut() {
                        p.2.push((*source, *seq, data.clone()));
                    }
                }
                _ => {}
            }
        }
        let alive = sim.alive[i];
        for (joined, open, deliveries) in periods {
            let admitted = installed.get(&joined).copied().unwrap_or(0);
            let stays = alive && open && final_view.contains(StepSim::addr(i));
            let mut got: BTreeMap<SourceId, Vec<u64>> = BTreeMap::new();
            for (source, seq, data) in deliveries {
                let m = sent[&source]
                    .get(seq as usize)
                    .unwrap_or_else(|| panic!("{i} got {source:?} #{seq}, never sent"));
                assert_eq!(m.data, data);
                assert!(
                    m.stamp >= joined,
                    "{i} (joined at v{joined}) got {source:?} #{seq} stamped v{}",
                    m.stamp
                );
                assert!(
                    m.step >= admitted,
                    "{i} got {source:?} #{seq} sent at step {} before its admission at {admitted}",
                    m.step
                );
                got.entry(source).or_default().push(seq);
            }
            for (source, msgs) in &sent {
                if source.addr == StepSim::addr(i) {
                    continue;
                }
                let eligible: Vec<u64> = msgs
                    .iter()
                    .filter(|m| m.stamp >= joined)
                    .map(|m| m.seq)
                    .collect();
                let have = got.remove(source).unwrap_or_default();
                assert!(
                    eligible.starts_with(&have),
                    "{i} (v{joined}) from {source:?}: got {have:?}, eligible {eligible:?}"
                );
                if stays && !killed_ids.contains(source) {
                    assert_eq!(
                        have.len(),
                        eligible.len(),
                        "{i} (v{joined}) from {source:?}: missing"
                    );
                }
            }
            assert!(got.is_empty(), "{i} got messages of unknown sources");
            if stays {
                let m = sim.nodes[i].member(g).unwrap();
                assert!(m.sends_complete());
                assert!(m.held() <= window, "{i} holds {}", m.held());
                // State only for current members and failed ones with
                // messages still held.
                assert!(
                    m.sources() <= final_view.len() + killed.len(),
                    "{i} keeps {} sources",
                    m.sources()
                );
            }
        }
    }
    // Every message of a source that did not fail completed.
    let mut completed: BTreeMap<usize, usize> = BTreeMap::new();
    for (k, evs) in sim.events.iter().enumerate() {
        let n = evs
            .iter()
            .filter(|(_, e)| matches!(e, Event::SendComplete { .. }))
            .count();
        completed.insert(k, n);
    }
    let mut sent_by: BTreeMap<usize, usize> = BTreeMap::new();
    for (source, msgs) in &sent {
        if !killed_ids.contains(source) {
            *sent_by.entry(StepSim::index(source.addr)).or_default() += msgs.len();
        }
    }
    for (k, n) in sent_by {
        if !killed.contains(&k) {
            assert_eq!(completed[&k], n, "source {k}");
        }
    }
    for &k in &killed {
        assert!(!final_view.contains(StepSim::addr(k)));
    }
    let delivered: usize = sim
        .events
        .iter()
        .flatten()
        .filter(|(_, e)| matches!(e, Event::Deliver { .. }))
        .count();
    eprintln!(
        "stream: {} messages sent, {delivered} deliveries, {} hops, killed {killed:?} \
         (children {:?}), leavers {leavers:?}, final view v{} of {} members, {} steps",
        sent.values().map(Vec::len).sum::<usize>(),
        sim.hops,
        kill_children,
        final_view.version,
        final_view.len(),
        sim.step,
    );
    for &l in &leavers {
        if sim.alive[l] {
            assert!(sim.events[l].iter().any(|(_, e)| matches!(
                e,
                Event::Left {
                    expelled: false,
                    ..
                }
            )));
        }
    }
}

fn leaving_or_joining(s: &StepSim, i: usize) -> bool {
    let joins = s.events[i]
        .iter()
        .filter(|(_, e)| matches!(e, Event::Joined { .. }))
        .count();
    let lefts = s.events[i]
        .iter()
        .filter(|(_, e)| matches!(e, Event::Left { .. }))
        .count();
    joins > lefts
}

#[test]
fn stream_survives_an_internal_failure_a_join_and_a_leave() {
    let actions = [
        (40, Action::Join(8)),
        (60, Action::Kill),
        (90, Action::Leave(0)),
        (100, Action::Join(9)),
    ];
    stream_with_changes(8, 10, &actions, 12345);
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::FileFailurePersistence;

    fn action(outsiders: std::ops::Range<usize>) -> impl Strategy<Value = (u64, Action)> {
        (
            0u64..250,
            prop_oneof![
                3 => outsiders.prop_map(Action::Join),
                2 => (0usize..100).prop_map(Action::Leave),
            ],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 16,
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            ))),
            ..ProptestConfig::default()
        })]

        /// Random joins and leaves and one killed member (internal when
        /// there is one) during a stream from every member.
        #[test]
        fn joins_leaves_and_a_failure_during_a_stream(
            initial in 3usize..9,
            mut actions in proptest::collection::vec(action(9..12), 0..6),
            kill_at in 20u64..200,
            seed in 1u64..u64::MAX,
        ) {
            actions.push((kill_at, Action::Kill));
            stream_with_changes(initial, 12, &actions, seed);
        }

        /// Denser schedules with several failures, of leaving members and
        /// fresh newcomers too.
        #[test]
        fn dense_changes_with_several_failures(
            initial in 2usize..10,
            actions in proptest::collection::vec(
                (0u64..250, prop_oneof![
                    3 => (8usize..14).prop_map(Action::Join),
                    2 => (0usize..100).prop_map(Action::Leave),
                    1 => Just(Action::Kill),
                ]),
                0..14,
            ),
            seed in 1u64..u64::MAX,
        ) {
            stream_with_changes(initial, 14, &actions, seed);
        }
    }
}

mod hostile {
    use super::super::view::ViewEntry;
    use super::super::wire::{Data, Hello, Packet, Welcome};
    use super::*;
    use proptest::prelude::*;

    fn num() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..20, Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()]
    }

    fn small32() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..20, Just(u32::MAX), any::<u32>()]
    }

    fn who() -> impl Strategy<Value = ProcessAddr> {
        (0usize..8).prop_map(StepSim::addr)
    }

    fn source() -> impl Strategy<Value = SourceId> {
        (who(), small32()).prop_map(|(addr, inc)| SourceId { addr, inc })
    }

    fn pairs() -> impl Strategy<Value = Vec<(SourceId, u64)>> {
        proptest::collection::vec((source(), num()), 0..4)
    }

    fn view() -> impl Strategy<Value = View> {
        (
            small32(),
            proptest::collection::vec((who(), small32(), proptest::option::of(who())), 0..6),
        )
            .prop_map(|(version, es)| View {
                version,
                entries: es
                    .into_iter()
                    .map(|(member, inc, parent)| ViewEntry {
                        member,
                        inc,
                        parent,
                    })
                    .collect(),
            })
    }

    fn op() -> impl Strategy<Value = ReduceOp> {
        prop_oneof![
            Just(ReduceOp::Sum),
            Just(ReduceOp::Min),
            Just(ReduceOp::Max)
        ]
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (
                source(),
                num(),
                small32(),
                proptest::collection::vec(any::<u8>(), 0..8)
            )
                .prop_map(|(source, seq, stamp, payload)| Msg::Data(Data {
                    source,
                    seq,
                    stamp,
                    payload
                })),
            pairs().prop_map(Msg::Ack),
            (small32(), num(), pairs()).prop_map(|(version, reduce_sent, next)| Msg::Hello(
                Hello {
                    version,
                    reduce_sent,
                    next
                }
            )),
            num().prop_map(Msg::Arrive),
            num().prop_map(Msg::Release),
            num().prop_map(Msg::Confirm),
            (num(), op(), proptest::collection::vec(num(), 0..3))
                .prop_map(|(epoch, op, values)| Msg::Part { epoch, op, values }),
            (num(), op(), proptest::collection::vec(num(), 0..3))
                .prop_map(|(epoch, op, values)| Msg::Result { epoch, op, values }),
            "[a-h]{1,3}".prop_map(|name| Msg::JoinReq { name }),
            ("[a-h]{1,3}", who()).prop_map(|(name, agent)| Msg::JoinRep { name, agent }),
            Just(Msg::Register),
            (view(), pairs(), num(), num()).prop_map(|(view, starts, barrier, reduce)| {
                Msg::Welcome(Welcome {
                    view,
                    starts,
                    barrier,
                    reduce,
                })
            }),
            view().prop_map(Msg::View),
            Just(Msg::LeaveReq),
            any::<bool>().prop_map(|expelled| Msg::Left { expelled }),
            Just(Msg::LeaveNote),
            Just(Msg::Heartbeat),
            Just(Msg::Probe),
            who().prop_map(Msg::Failed),
            Just(Msg::AgentHeartbeat),
            Just(Msg::AgentProbe),
            Just(Msg::Gone),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Parseable messages with hostile contents, from members and
        /// strangers, into a running group: nothing panics and the
        /// processes keep running a stream and a barrier.
        #[test]
        fn hostile_messages_never_panic(
            injected in proptest::collection::vec(
                (0usize..6, 0usize..8, any::<bool>(), any::<bool>(), msg()),
                1..40,
            ),
        ) {
            let mut sim = StepSim::new(8, &fast_cfg(), Duration::from_millis(1));
            let g = form(&mut sim, 6);
            for (k, (to, from, real_group, mcast, msg)) in injected.into_iter().enumerate() {
                let p = Packet {
                    group: if real_group { g } else { GroupId(k as u32 % 3) },
                    mcast,
                    msg,
                };
                let now = sim.now();
                sim.nodes[to].handle(StepSim::addr(from), &p.to_bytes(), now);
                for i in 0..6 {
                    let _ = sim.call(i, |n, now| n.send_to_group(g, b"x", now));
                }
                sim.step();
            }
            for i in 0..6 {
                let _ = sim.call(i, |n, now| n.barrier(g, now));
            }
            for _ in 0..200 {
                sim.step();
            }
            prop_assert!(sim.events.iter().map(Vec::len).sum::<usize>() < 1_000_000);
        }
    }
}
