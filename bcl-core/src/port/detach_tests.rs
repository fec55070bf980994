//! Detached nodes: an operator's partition, and the way back.

use super::tests::{addr, config, Net};
use super::*;
use crate::addr::NodeId;
use crate::event::SendFailure;

fn peer_events(port: &mut Port) -> Vec<PeerEvent> {
    std::iter::from_fn(|| port.poll_peer_event()).collect()
}

/// Three ports on nodes 1, 2 and 3 that have all talked to each other.
fn three_nodes() -> Net {
    let mut net = Net::new(vec![config(0), config(1), config(2)]);
    for i in 0..3 {
        for j in 0..3 {
            if i != j {
                net.ports[i].send(net.now, addr(j), b"hello").unwrap();
            }
        }
    }
    assert_eq!(net.run_perfect().len(), 6);
    net
}

#[test]
fn a_detached_node_is_down_at_once_and_nothing_crosses_either_way() {
    let mut net = three_nodes();
    let node3 = addr(2).node;
    // Port 0 has a message to port 2 in flight when the operator acts.
    let doomed = net.ports[0].send(net.now, addr(2), b"in flight").unwrap();
    let in_flight = net.transmit();
    assert_eq!(in_flight.len(), 1);
    net.ports[0].detach_node(net.now, node3);
    net.ports[2].detach_node(net.now, node3);
    assert_eq!(
        peer_events(&mut net.ports[0]),
        vec![PeerEvent::Down(addr(2))]
    );
    let mut isolated = peer_events(&mut net.ports[2]);
    isolated.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        isolated,
        vec![PeerEvent::Down(addr(0)), PeerEvent::Down(addr(1))]
    );
    let failed: Vec<_> = net.send_events(0);
    assert!(
        failed.contains(&SendEvent::Failed(
            doomed,
            SendFailure::PeerUnreachable(addr(2))
        )),
        "{failed:?}"
    );
    // New traffic to it is refused, naming it.
    assert_eq!(
        net.ports[0].send(net.now, addr(2), b"no"),
        Err(SendError::NodeDetached(addr(2)))
    );
    assert_eq!(
        net.ports[2].send(net.now, addr(1), b"no"),
        Err(SendError::NodeDetached(addr(1)))
    );
    let text = SendError::NodeDetached(addr(2)).to_string();
    assert!(text.contains("3.0") && text.contains("node 3"), "{text}");
    // The frame already on the wire, and one from port 1 (which has not
    // heard of the detach yet), are dropped at port 2 and counted.
    net.deliver(&in_flight);
    net.ports[1].send(net.now, addr(2), b"unaware").unwrap();
    let from_1 = net.transmit();
    assert!(from_1.iter().all(|f| f.from == 1 && f.to == 2));
    net.deliver(&from_1);
    assert!(net.drain_deliveries().is_empty());
    assert_eq!(net.ports[2].stats().frames_from_detached, 2);
    // Ports 0 and 1 carry on with each other.
    net.ports[0].send(net.now, addr(1), b"still on").unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        let frames = net.transmit();
        // Nothing leaves port 2, and nothing leaves port 0 for it.
        assert!(frames
            .iter()
            .all(|f| f.from != 2 && !(f.from == 0 && f.to == 2)));
        net.deliver(&frames);
        got.extend(net.drain_deliveries());
    }
    assert_eq!(got, vec![(1, addr(0), b"still on".to_vec())]);
    assert_eq!(net.ports[0].detached_nodes(), vec![node3]);
    assert_eq!(net.ports[2].detached_nodes(), vec![node3]);
}

#[test]
fn a_rejoined_node_comes_back_up_and_what_waited_for_it_arrives_once() {
    let mut net = three_nodes();
    let node3 = addr(2).node;
    net.ports[0].detach_node(net.now, node3);
    net.ports[2].detach_node(net.now, node3);
    // Port 1 never hears of the detach: its message to port 2 is dropped
    // there until the node is back, then resent and delivered once.
    net.ports[1].send(net.now, addr(2), b"patient").unwrap();
    let dropped = net.transmit();
    net.deliver(&dropped);
    assert!(net.drain_deliveries().is_empty());
    peer_events(&mut net.ports[0]);
    peer_events(&mut net.ports[2]);

    net.ports[0].rejoin_node(net.now, node3);
    net.ports[2].rejoin_node(net.now, node3);
    assert!(net.ports[0].detached_nodes().is_empty());
    assert!(net.ports[2].detached_nodes().is_empty());
    let got = net.run_perfect();
    assert_eq!(got, vec![(2, addr(1), b"patient".to_vec())]);
    assert_eq!(peer_events(&mut net.ports[0]), vec![PeerEvent::Up(addr(2))]);
    let mut back = peer_events(&mut net.ports[2]);
    back.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(back, vec![PeerEvent::Up(addr(0)), PeerEvent::Up(addr(1))]);
    // Fresh traffic both ways, in the same incarnation (no restart).
    net.ports[0]
        .send(net.now, addr(2), b"welcome back")
        .unwrap();
    net.ports[2].send(net.now, addr(0), b"thanks").unwrap();
    let mut got = net.run_perfect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (0, addr(2), b"thanks".to_vec()),
            (2, addr(0), b"welcome back".to_vec())
        ]
    );
    assert_eq!(net.ports[0].stats().peers_restarted, 0);
}

#[test]
fn an_isolated_port_keeps_the_peers_on_its_own_node() {
    let mut port = Port::new(config(0)).unwrap();
    port.add_method(super::tests::caps(super::tests::MTU))
        .unwrap();
    let own = addr(0).node;
    let neighbour = ProcessAddr::new(own.0, 9);
    let remote = ProcessAddr::new(own.0 + 1, 0);
    port.detach_node(Time::ZERO, own);
    assert!(port.send(Time::ZERO, neighbour, b"next door").is_ok());
    assert_eq!(
        port.send(Time::ZERO, remote, b"far"),
        Err(SendError::NodeDetached(remote))
    );
    // Detaching twice, and rejoining a node never detached, change nothing.
    port.detach_node(Time::ZERO, own);
    port.rejoin_node(Time::ZERO, NodeId(77));
    assert_eq!(port.detached_nodes(), vec![own]);
    port.rejoin_node(Time::ZERO, own);
    assert!(port.send(Time::ZERO, remote, b"far").is_ok());
}
