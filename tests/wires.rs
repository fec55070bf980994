//! BCL over real wires: the packet and udp methods between two network
//! namespaces joined by a veth pair (configs/lab/pair.toml), in both
//! progress modes, with every payload checked. Needs root; fails loudly
//! without it unless BCL_SKIP_PRIVILEGED=1.

mod common;

use bcl::ProgressMode;
use bcl_lab::require_privileges;
use common::{lab, mixed_size, pingpong, stream, Wire};

fn pingpong_test(wire: Wire, mode: ProgressMode, tag: &str) {
    if !require_privileges(tag) {
        return;
    }
    let lab = lab("pair.toml", tag);
    let run = pingpong(&lab, wire, mode, 2_000, mixed_size);
    assert_eq!(run.checked, 2_000);
    assert_eq!(run.receiver.messages_delivered, 2_000);
    assert_eq!(run.sender.messages_delivered, 2_000);
    assert_eq!(
        run.receiver.bad_frames.total(),
        0,
        "{:?}",
        run.receiver.bad_frames
    );
    if let Some(p) = run.receiver_packet {
        assert!(p.rx_frames >= 2_000, "{p:?}");
        assert_eq!(p.links_learned, 1);
    }
}

fn bandwidth_test(wire: Wire, mode: ProgressMode, tag: &str) {
    if !require_privileges(tag) {
        return;
    }
    let lab = lab("pair.toml", tag);
    let run = stream(&lab, wire, mode, 20_000, mixed_size, None);
    assert_eq!(run.checked, 20_000);
    assert_eq!(run.receiver.messages_delivered, 20_000);
    assert_eq!(run.sender.messages_completed, 20_000);
    assert_eq!(
        run.receiver.bad_frames.total(),
        0,
        "{:?}",
        run.receiver.bad_frames
    );
}

#[test]
fn pingpong_over_packet_busy_poll() {
    pingpong_test(Wire::Packet, ProgressMode::BusyPoll, "pp-packet");
}

#[test]
fn pingpong_over_udp_blocking() {
    pingpong_test(Wire::Udp, ProgressMode::Blocking, "pp-udp");
}

#[test]
fn bandwidth_over_packet_blocking() {
    bandwidth_test(Wire::Packet, ProgressMode::Blocking, "bw-packet");
}

#[test]
fn bandwidth_over_udp_busy_poll() {
    bandwidth_test(Wire::Udp, ProgressMode::BusyPoll, "bw-udp");
}
