//! BCL through a faulty wire, over each network method (packet, udp):
//! configs/lab/lossy-pair.toml puts an impairment bridge between the two
//! nodes (10 % loss, 25 % reordering, 5 % duplication, 1 % bit corruption,
//! both directions, fixed seed). 100 000 messages of mixed sizes must all
//! arrive exactly once, in order and intact, and the counters must prove
//! that faults happened and were repaired: the bridge's (loss,
//! duplication, reordering, corruption) and ours (retransmissions,
//! duplicates dropped). Corrupted frames must be caught: over packet by our
//! CRC32C (a veth or a bridge checks no Ethernet FCS for us), over udp by
//! the kernels' IP/UDP checksums before BCL sees them. Needs root.

mod common;

use bcl::ProgressMode;
use bcl_lab::require_privileges;
use common::{assert_corruption_injected_and_caught, lab, mixed_size, stream, total, Wire};

const MESSAGES: u64 = 100_000;

fn faulty_stream(wire: Wire, tag: &str) {
    if !require_privileges(tag) {
        return;
    }
    let lab = lab("lossy-pair.toml", tag);
    let run = stream(
        &lab,
        wire,
        ProgressMode::Blocking,
        MESSAGES,
        mixed_size,
        None,
    );
    // Exactly once, in order, intact: checked message by message by the
    // receiver; here the totals.
    assert_eq!(run.checked, MESSAGES);
    assert_eq!(run.receiver.messages_delivered, MESSAGES);
    assert_eq!(run.sender.messages_completed, MESSAGES);
    assert_eq!(run.sender.messages_failed, 0);

    // The bridge's counters: every fault happened, and the corrupted frames
    // were caught where they must be.
    let (s, r) = (&run.sender, &run.receiver);
    println!("sender: {s:?}\nreceiver: {r:?}");
    let imp = assert_corruption_injected_and_caught(&lab, wire, &[*s, *r]);
    let (dropped, duplicated, reordered) = (
        total(&imp, |c| c.dropped),
        total(&imp, |c| c.duplicated),
        total(&imp, |c| c.reordered),
    );
    println!(
        "bridge: in {} dropped {dropped} duplicated {duplicated} reordered {reordered} corrupted {}",
        total(&imp, |c| c.frames_in),
        total(&imp, |c| c.corrupted)
    );
    assert!(dropped > 0 && duplicated > 0 && reordered > 0, "{imp:?}");

    // Ours: the losses and duplicates were seen and repaired.
    assert!(s.retransmits > 0, "no retransmission: {s:?}");
    assert!(r.duplicates > 0, "no duplicate dropped: {r:?}");
}

#[test]
fn a_faulty_wire_delivers_everything_exactly_once_in_order_over_packet() {
    faulty_stream(Wire::Packet, "lossy-packet");
}

#[test]
fn a_faulty_wire_delivers_everything_exactly_once_in_order_over_udp() {
    faulty_stream(Wire::Udp, "lossy-udp");
}
