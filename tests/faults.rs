//! BCL through a faulty wire: configs/lab/lossy-pair.toml puts an
//! impairment bridge between the two nodes (10 % loss, 25 % reordering, 5 %
//! duplication, 1 % bit corruption, both directions). 100 000 messages of
//! mixed sizes must all arrive exactly once, in order and intact, and the
//! counters must prove that faults happened and were repaired: the bridge's
//! (loss, duplication, reordering, corruption) and ours (retransmissions,
//! duplicates dropped, corrupted frames caught by the CRC32C — a veth or a
//! bridge checks no Ethernet FCS for us). Needs root.

mod common;

use bcl::ProgressMode;
use bcl_lab::require_privileges;
use common::{lab, mixed_size, stream, Wire};

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

    // The bridge's counters (written every 100 ms and on exit).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let imp = lab.impairment_counters().unwrap();
    let sum = |f: fn(&bcl_lab::ImpairCounters) -> u64| imp.iter().map(f).sum::<u64>();
    let (dropped, duplicated, reordered, corrupted) = (
        sum(|c| c.dropped),
        sum(|c| c.duplicated),
        sum(|c| c.reordered),
        sum(|c| c.corrupted),
    );
    println!(
        "bridge: in {} dropped {dropped} duplicated {duplicated} reordered {reordered} corrupted {corrupted}",
        sum(|c| c.frames_in)
    );
    assert!(
        dropped > 0 && duplicated > 0 && reordered > 0 && corrupted > 0,
        "{imp:?}"
    );

    // Ours: the faults were seen and repaired.
    let (s, r) = (&run.sender, &run.receiver);
    println!("sender: {s:?}\nreceiver: {r:?}");
    assert!(s.retransmits > 0, "no retransmission: {s:?}");
    assert!(r.duplicates > 0, "no duplicate dropped: {r:?}");
    let caught = s.bad_frames.bad_checksum + r.bad_frames.bad_checksum;
    assert!(caught > 0, "no corrupted frame caught by the CRC32C");
}

#[test]
fn a_faulty_wire_delivers_everything_exactly_once_in_order_over_packet() {
    faulty_stream(Wire::Packet, "lossy-packet");
}
