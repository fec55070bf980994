//! BCL end to end over the Myri-10G driver: two `bcl::Endpoint`s, each on
//! the `vfio` method over a modelled Myri-10G NIC (the firmware model of
//! `bcl_vfio::myri10ge::model` on the in-memory PCI host), the two NICs
//! joined by a virtual wire. Messages of many sizes go both ways and are
//! checked byte for byte; with small receive rings the NICs drop frames
//! and BCL's retransmission has to recover them.

use bcl::{Endpoint, JobKey, ProcessAddr};
use bcl_vfio::method::{NicMethod, VfioMethodConfig};
use bcl_vfio::myri10ge::model::{firmware_image, Myri10geModel, Myri10geModelConfig};
use bcl_vfio::myri10ge::{Firmware, Myri10ge, Myri10geConfig};
use bcl_vfio::testing::{InMemoryPci, Wire, WirePort};

const MAC_A: [u8; 6] = [0x00, 0x60, 0xdd, 0x00, 0x01, 0x0a];
const MAC_B: [u8; 6] = [0x00, 0x60, 0xdd, 0x00, 0x01, 0x0b];

struct Node {
    ep: Endpoint,
    host: InMemoryPci,
}

fn node(node_id: u32, pci: &str, mac: [u8; 6], port: WirePort, rx_entries: u32) -> Node {
    let host = InMemoryPci::new(
        pci.parse().unwrap(),
        Myri10geModel::new(
            Myri10geModelConfig {
                send_ring_entries: 256,
                rx_ring_entries: rx_entries,
                ..Myri10geModelConfig::with_mac(mac)
            },
            port.clone(),
        ),
    );
    host.attach_wire(&port);
    let nic = Myri10ge::new(
        host.clone(),
        Myri10geConfig {
            firmware: Firmware::Image(firmware_image()),
            ..Default::default()
        },
    )
    .expect("Myri-10G bring-up");
    let method = NicMethod::new(nic, VfioMethodConfig::default());
    let ep = Endpoint::builder(ProcessAddr::new(node_id, 0), JobKey(42))
        .method(Box::new(method))
        .build()
        .expect("endpoint");
    Node { ep, host }
}

fn pair(rx_entries: u32) -> (Node, Node) {
    let (pa, pb) = Wire::new(4096);
    let mut a = node(1, "0000:00:02.0", MAC_A, pa, rx_entries);
    let mut b = node(2, "0000:00:03.0", MAC_B, pb, rx_entries);
    a.ep.add_peer(b.ep.local(), b.ep.descriptors()[0].clone());
    b.ep.add_peer(a.ep.local(), a.ep.descriptors()[0].clone());
    (a, b)
}

/// Message `i` of `len` bytes: its number, then a pattern of both.
fn message(i: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u32).wrapping_mul(2_654_435_761).wrapping_add(i) as u8)
        .collect();
    let n = len.min(4);
    m[..n].copy_from_slice(&i.to_be_bytes()[..n]);
    m
}

const SIZES: [usize; 12] = [
    0, 1, 13, 46, 100, 1000, 1400, 1500, 3000, 9000, 12_345, 16_384,
];

/// Sends `count` messages each way, keeping `window` unacknowledged per
/// direction (refilled in bursts), driving both endpoints from this
/// thread; checks every delivery in order, byte for byte.
fn exchange(a: &mut Node, b: &mut Node, count: u32, window: usize) {
    let (la, lb) = (a.ep.local(), b.ep.local());
    let mut sent = [0u32; 2];
    let mut got = [0u32; 2];
    let mut handles: [Vec<bcl::SendHandle>; 2] = [Vec::new(), Vec::new()];
    let mut rounds = 0u64;
    while got != [count, count] {
        rounds += 1;
        assert!(
            rounds < 20_000_000,
            "stuck: sent {sent:?}, delivered {got:?}"
        );
        for dir in 0..2 {
            let (tx, dst) = if dir == 0 {
                (&mut *a, lb)
            } else {
                (&mut *b, la)
            };
            // Forget completed sends; keep the window.
            while let Some(ev) = tx.ep.poll_send_event() {
                match ev {
                    bcl::SendEvent::Complete(h) => handles[dir].retain(|x| *x != h),
                    bcl::SendEvent::Failed(h, f) => panic!("send {h:?} failed: {f}"),
                }
            }
            // Fill the window at once: bursts of frames, more than a small
            // receive ring holds.
            while sent[dir] < count && handles[dir].len() < window {
                let i = sent[dir];
                let m = message(i + 1_000_000 * dir as u32, SIZES[i as usize % SIZES.len()]);
                match tx.ep.send(dst, &m) {
                    Ok(h) => {
                        handles[dir].push(h);
                        sent[dir] += 1;
                    }
                    Err(bcl::Error::Send(_)) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
        }
        a.ep.progress().unwrap();
        b.ep.progress().unwrap();
        for (dir, got) in got.iter_mut().enumerate() {
            let rx = if dir == 0 { &mut *b } else { &mut *a };
            while let Some(d) = rx.ep.poll_delivery() {
                let i = *got;
                let want = message(i + 1_000_000 * dir as u32, SIZES[i as usize % SIZES.len()]);
                assert_eq!(
                    rx.ep.message(&d).unwrap(),
                    &want[..],
                    "message {i} in direction {dir}"
                );
                rx.ep.release(d).unwrap();
                *got += 1;
            }
        }
    }
}

fn model_stats(n: &Node) -> (bcl_vfio::myri10ge::model::Myri10geModelStats, u32) {
    n.host.with_model(|m: &mut Myri10geModel| {
        let c = m.counters();
        (
            m.stats(),
            c.dropped_no_small_buffer + c.dropped_no_big_buffer,
        )
    })
}

#[test]
fn two_endpoints_exchange_verified_messages_over_modelled_myri10ge_nics() {
    let (mut a, mut b) = pair(128);
    exchange(&mut a, &mut b, 600, 16);
    for n in [&a, &b] {
        let (s, _) = model_stats(n);
        assert!(s.tx_frames > 600, "{s:?}");
        assert_eq!(s.protocol_errors, 0);
        assert_eq!(s.dma_errors, 0);
        assert_eq!(n.host.stats().dma_faults, 0);
    }
}

#[test]
fn bcl_recovers_what_full_receive_rings_drop() {
    // 16 buffers per receive ring against BCL's default window: the
    // NICs drop frames that find no buffer, and BCL retransmits them.
    let (mut a, mut b) = pair(16);
    exchange(&mut a, &mut b, 300, 64);
    let dropped: u32 = [&a, &b].iter().map(|n| model_stats(n).1).sum();
    assert!(dropped > 0, "the small rings must have dropped frames");
    for n in [&a, &b] {
        let (s, _) = model_stats(n);
        assert_eq!(s.protocol_errors, 0);
        assert_eq!(n.host.stats().dma_faults, 0);
    }
}
