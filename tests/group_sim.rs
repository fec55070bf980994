//! Dynamic groups over the whole stack on the simulated fabric, in virtual
//! time: a message stream from every member while one process joins, a
//! leaf leaves, an internal member is killed (no goodbye) and another
//! process joins, over a wire that loses, duplicates and reorders frames.
//! Every member that stays receives every message sent while it was
//! present exactly once and in order, and nothing sent before it joined;
//! barrier and reduce then run over the final membership.

use bcl::coll::messenger::Messenger;
use bcl::group::net::GroupEndpoint;
use bcl::group::view::SourceId;
use bcl::group::wire::ReduceOp;
use bcl::group::{Event, GroupConfig, GroupId};
use bcl::sim::FaultProfile;
use bcl::{ProcessAddr, SimCluster, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Group endpoints on one simulated fabric, driven together in virtual
/// time; a killed process's endpoint is dropped.
struct World {
    cluster: SimCluster,
    eps: Vec<Option<GroupEndpoint>>,
    log: Vec<Vec<(Time, Event)>>,
}

impl World {
    fn new(n: usize, faults: FaultProfile, seed: u64) -> World {
        let mut cluster = SimCluster::new(n, faults, seed, 1500, |_, c| {
            c.ring_blocks = 1024;
            c.rto.min = Duration::from_micros(200);
        })
        .unwrap();
        let addrs: Vec<ProcessAddr> = (0..n).map(SimCluster::addr).collect();
        let mut cfg = GroupConfig {
            heartbeat: Duration::from_millis(20),
            ..GroupConfig::default()
        };
        cfg.detect.late = Duration::from_millis(100);
        cfg.detect.probe_timeout = Duration::from_millis(50);
        cfg.member.window = 16;
        let eps = std::mem::take(&mut cluster.endpoints)
            .into_iter()
            .map(|ep| {
                Some(GroupEndpoint::new(Messenger::new(ep), &addrs, addrs[0], cfg.clone()).unwrap())
            })
            .collect();
        World {
            cluster,
            eps,
            log: vec![Vec::new(); n],
        }
    }

    /// One round of progress everywhere; returns how much moved.
    fn round(&mut self) -> usize {
        let now = self.cluster.now();
        let mut moved = 0;
        for (i, ep) in self.eps.iter_mut().enumerate() {
            if let Some(ep) = ep {
                moved += ep.progress().unwrap();
                while let Some(e) = ep.poll_event() {
                    self.log[i].push((now, e));
                }
            }
        }
        moved
    }

    /// Jumps the virtual clock to the next event.
    fn jump(&mut self) {
        let now = self.cluster.now();
        let next = self
            .eps
            .iter()
            .flatten()
            .filter_map(GroupEndpoint::next_timeout)
            .chain(self.cluster.fabric.next_delivery())
            .min()
            .unwrap_or(now + Duration::from_micros(10));
        self.cluster
            .clock
            .set(next.max(now + Duration::from_nanos(1)));
    }

    /// Drives until `done` holds (checked after every round).
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut World) -> bool) {
        let limit = self.cluster.now() + Duration::from_secs(60);
        loop {
            let moved = self.round();
            if done(self) {
                return;
            }
            assert!(self.cluster.now() < limit, "{what}: not reached in 60 s");
            if moved == 0 {
                self.jump();
            }
        }
    }

    fn ep(&mut self, i: usize) -> &mut GroupEndpoint {
        self.eps[i].as_mut().expect("running process")
    }

    fn group(&self, i: usize) -> Option<GroupId> {
        self.eps[i].as_ref()?.node().group_named("g")
    }

    fn joined_version(&self, i: usize) -> Option<u32> {
        self.log[i].iter().rev().find_map(|(_, e)| match e {
            Event::Joined { version, .. } => Some(*version),
            _ => None,
        })
    }
}

#[derive(Debug)]
struct Sent {
    stamp: u32,
    data: Vec<u8>,
}

fn payload(i: usize, k: usize) -> Vec<u8> {
    // Every tenth message is larger than the eager limit (rendezvous).
    let len = if k % 10 == 9 { 3000 } else { 40 };
    (0..len).map(|j| (i * 31 + k * 7 + j) as u8).collect()
}

fn lossy() -> FaultProfile {
    FaultProfile {
        loss: 0.01,
        duplicate: 0.005,
        reorder: 0.01,
        delay: Duration::from_micros(2),
        jitter: Duration::from_micros(3),
        ..FaultProfile::default()
    }
}

fn stream_with_join_leave_and_kill(faults: FaultProfile, seed: u64) {
    let n = 8;
    let quota = 60;
    let mut w = World::new(n, faults, seed);
    // Processes 0..6 form the group: 0 is registry, agent and root; 1 has
    // children 3 and 4, 2 has child 5.
    // One at a time, so the tree does not depend on arrival order.
    for i in 0..6 {
        w.ep(i).join("g").unwrap();
        w.run_until("joining", |w| w.group(i).is_some());
    }
    w.run_until("forming", |w| {
        (0..6).all(|i| {
            let g = w.group(i).unwrap();
            w.eps[i].as_ref().unwrap().node().view(g).map(|v| v.len()) == Some(6)
        })
    });
    let g = w.group(0).unwrap();
    let view = w.ep(0).node().view(g).unwrap().clone();
    assert_eq!(
        view.children(SimCluster::addr(1)),
        vec![SimCluster::addr(3), SimCluster::addr(4)]
    );

    let mut sent: BTreeMap<SourceId, Vec<Sent>> = BTreeMap::new();
    let mut count = vec![0usize; n];
    let mut killed = None;
    let mut killed_at = Time::ZERO;
    let mut steps_done = BTreeSet::new();
    w.run_until("stream", |w| {
        // The membership changes, paced by the root's progress.
        let root_sent = count[0];
        for (at, what) in [
            (10, "join 6"),
            (20, "leave 5"),
            (30, "kill 1"),
            (40, "join 7"),
        ] {
            if root_sent >= at && steps_done.insert(what) {
                match what {
                    "join 6" => w.ep(6).join("g").unwrap(),
                    "leave 5" => w.ep(5).leave(g).unwrap(),
                    "kill 1" => {
                        w.eps[1] = None;
                        killed = Some(1);
                        killed_at = w.cluster.now();
                    }
                    _ => w.ep(7).join("g").unwrap(),
                }
            }
        }
        for (i, count) in count.iter_mut().enumerate() {
            if *count >= quota || w.eps[i].is_none() || w.group(i).is_none() {
                continue;
            }
            let ep = w.eps[i].as_mut().unwrap();
            let Some(m) = ep.node().member(g) else {
                continue;
            };
            if m.is_leaving() || !m.is_joined() {
                continue;
            }
            let (id, stamp) = (m.id(), m.view().unwrap().version);
            let data = payload(i, *count);
            if let Ok(seq) = ep.send(g, &data) {
                let list = sent.entry(id).or_default();
                assert_eq!(seq as usize, list.len());
                list.push(Sent { stamp, data });
                *count += 1;
            }
        }
        steps_done.len() == 4
            && (0..n).all(|i| {
                w.eps[i].is_none()
                    || count[i] >= quota
                    || w.eps[i]
                        .as_ref()
                        .unwrap()
                        .node()
                        .member(g)
                        .is_none_or(|m| m.is_leaving())
            })
    });
    // Quiesce: every running member complete and in the root's view.
    w.run_until("quiescence", |w| {
        let v = w.eps[0].as_ref().unwrap().node().view(g).cloned();
        (0..n).all(|i| match &w.eps[i] {
            None => true,
            Some(ep) => match ep.node().member(g) {
                None => i == 5,
                Some(m) => m.sends_complete() && m.view().cloned() == v,
            },
        })
    });
    let settle = w.cluster.now() + Duration::from_millis(50);
    w.run_until("settling", |w| w.cluster.now() >= settle);

    let final_view = w.ep(0).node().view(g).unwrap().clone();
    let members: BTreeSet<ProcessAddr> = final_view.members().collect();
    let want: BTreeSet<ProcessAddr> = [0, 2, 3, 4, 6, 7].map(SimCluster::addr).into();
    assert_eq!(members, want);
    // 1's children went to the root.
    assert_eq!(
        final_view.entry(SimCluster::addr(3)).unwrap().parent,
        Some(SimCluster::addr(0))
    );
    assert!(w.log[5].iter().any(|(_, e)| matches!(
        e,
        Event::Left {
            expelled: false,
            ..
        }
    )));
    let detected = w.log[0]
        .iter()
        .find_map(|(t, e)| match e {
            Event::MemberFailed { member, .. } if *member == SimCluster::addr(1) => Some(*t),
            _ => None,
        })
        .expect("the killed member is declared failed");
    let killed_id = killed.map(|k| SourceId {
        addr: SimCluster::addr(k),
        inc: w.joined_version(k).unwrap(),
    });

    let mut total = 0;
    for i in 0..n {
        let Some(joined) = w.joined_version(i) else {
            continue;
        };
        let stays = members.contains(&SimCluster::addr(i));
        let mut got: BTreeMap<SourceId, Vec<u64>> = BTreeMap::new();
        for (_, e) in &w.log[i] {
            if let Event::Deliver {
                source, seq, data, ..
            } = e
            {
                let m = &sent[source][*seq as usize];
                assert_eq!(&m.data, data, "{i}: {source:?} #{seq} corrupted");
                assert!(
                    m.stamp >= joined,
                    "{i} joined at v{joined} got a message of v{}",
                    m.stamp
                );
                got.entry(*source).or_default().push(*seq);
                total += 1;
            }
        }
        for (source, msgs) in &sent {
            if source.addr == SimCluster::addr(i) {
                continue;
            }
            let eligible: Vec<u64> = (0..msgs.len() as u64)
                .filter(|&k| msgs[k as usize].stamp >= joined)
                .collect();
            let have = got.remove(source).unwrap_or_default();
            assert!(
                eligible.starts_with(&have),
                "{i} from {source:?}: {have:?} is not a prefix of {eligible:?}"
            );
            if stays && Some(*source) != killed_id {
                assert_eq!(have, eligible, "{i} (v{joined}) from {source:?}");
            }
        }
        assert!(got.is_empty());
    }
    // The newcomers missed what was sent before they came.
    for i in [6, 7] {
        let j = w.joined_version(i).unwrap();
        assert!(sent.values().flatten().any(|m| m.stamp < j));
    }
    // Links: 3 now hangs off the root; nothing uses 3's old link to 1.
    assert_eq!(w.ep(3).node().link_refs(SimCluster::addr(1)), 0);
    assert_eq!(w.ep(3).node().link_refs(SimCluster::addr(0)), 1);

    // Barrier and reduce over the final membership.
    let live: Vec<usize> = [0, 2, 3, 4, 6, 7].into();
    for &i in &live {
        w.ep(i).barrier(g).unwrap();
        w.ep(i)
            .reduce(g, ReduceOp::Sum, &[i as u64, 1], true)
            .unwrap();
    }
    let sum: u64 = live.iter().map(|&i| i as u64).sum();
    w.run_until("barrier and reduce", |w| {
        live.iter().all(|&i| {
            let l = &w.log[i];
            l.iter()
                .any(|(_, e)| matches!(e, Event::BarrierReleased { epoch: 1, .. }))
                && l.iter().any(|(_, e)| {
                    matches!(e, Event::ReduceResult { epoch: 1, values, .. }
                        if *values == [sum, live.len() as u64])
                })
        }) && w.log[0]
            .iter()
            .any(|(_, e)| matches!(e, Event::BarrierComplete { epoch: 1, .. }))
    });
    let fanout: u64 = w.eps.iter().flatten().map(|e| e.stats().fanout).sum();
    eprintln!(
        "group over the sim fabric (seed {seed}): {} messages sent, {total} deliveries, \
         {fanout} multicast copies, final view v{}, failure detected {:?} after the kill, \
         virtual time {:?}",
        sent.values().map(Vec::len).sum::<usize>(),
        final_view.version,
        detected.saturating_since(killed_at),
        Duration::from_nanos(w.cluster.now().as_nanos()),
    );
}

#[test]
fn stream_with_join_leave_and_killed_member_on_a_perfect_wire() {
    stream_with_join_leave_and_kill(FaultProfile::default(), 1);
}

#[test]
fn stream_with_join_leave_and_killed_member_on_a_lossy_wire() {
    for seed in [7, 8, 9] {
        stream_with_join_leave_and_kill(lossy(), seed);
    }
}
