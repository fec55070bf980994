//! Malformed and foreign frames injected on the wire while a stream flows:
//! they are dropped and counted, the process keeps running, and the stream
//! stays intact. Injected from the sender's node, into the receiver's
//! interface: frames of another EtherType (filtered by the kernel through
//! the socket's EtherType binding: they never reach BCL; the interface's own
//! counter shows they arrived), BCL headers cut short, headers announcing
//! more payload than the frame holds, frames of another job, and random
//! bytes. Needs root.

mod common;

use bcl::core::wire::{encode, FrameType, Header, HeaderFields};
use bcl::core::TxFrame;
use bcl::packet::{PacketConfig, PacketMethod};
use bcl::{Descriptor, JobKey, Method, ProgressMode};
use bcl_lab::{require_privileges, Lab};
use common::{lab, mixed_size, stream, Wire, CLIENT, JOB, SERVER};

/// Frames of each kind injected.
const EACH: usize = 200;

/// The malformed BCL frames (what follows the Ethernet header or is the
/// UDP payload), by kind.
fn malformed() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let good = |job: JobKey, payload: &[u8]| {
        let fields = HeaderFields {
            kind: Some(FrameType::Data),
            job,
            src: CLIENT,
            dst: SERVER,
            epoch: 0x0bad,
            seq: 7,
            msg_id: 0,
            frag_offset: 0,
            msg_len: payload.len() as u32,
            ..HeaderFields::default()
        };
        let mut buf = vec![0u8; 2048];
        let n = encode(&mut buf, &fields, payload, true).unwrap();
        buf.truncate(n);
        buf
    };
    let mut rng: u64 = 0x5eed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..EACH {
        let frame = good(JOB, &[0x55; 100]);
        // Truncated: fewer bytes than a header.
        out.push(("truncated", frame[..1 + i % 55].to_vec()));
        // Bad lengths: the header announces more payload than there is.
        let mut long = frame.clone();
        let at = std::mem::offset_of!(Header, payload_len);
        long[at..at + 2].copy_from_slice(&1400u16.to_be_bytes());
        out.push(("bad_length", long));
        // Another job's frame, otherwise valid (CRC and all).
        out.push(("wrong_job", good(JobKey(0xdead_beef), &[0x66; 100])));
        // Random bytes of random length; the first byte is not version 1.
        let len = 1 + (next() % 1400) as usize;
        let mut r: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        r[0] |= 0x80;
        out.push(("random", r));
    }
    out
}

/// Sends `frames` over `m` to `link`, in bursts.
fn send_frames(m: &mut dyn Method, link: bcl::LinkId, frames: &[Vec<u8>]) {
    let mut it = frames.iter();
    let mut left = frames.len();
    while left > 0 {
        let n = m
            .tx_burst(&mut |buf| {
                let f = it.next()?;
                buf[..f.len()].copy_from_slice(f);
                Some(TxFrame { link, len: f.len() })
            })
            .unwrap();
        left -= n;
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

fn rx_packets(lab: &Lab, node: &str, ifname: &str) -> u64 {
    let out = lab
        .command(node, "cat")
        .unwrap()
        .arg(format!("/sys/class/net/{ifname}/statistics/rx_packets"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn foreign_frames_on_the_packet_wire_are_dropped_and_counted() {
    if !require_privileges("foreign_frames_on_the_packet_wire") {
        return;
    }
    let lab = lab("pair.toml", "foreign-packet");
    let ifname = lab.interfaces("b").unwrap()[0].ifname.clone();
    let before = rx_packets(&lab, "b", &ifname);
    let inject = Box::new(|server: Descriptor| {
        // Another EtherType, otherwise a perfect BCL frame.
        let mut other = PacketMethod::open(PacketConfig {
            ethertype: 0x88b6,
            ..PacketConfig::default()
        })
        .unwrap();
        let link = other.open_link(&server).unwrap();
        let frames: Vec<Vec<u8>> = malformed()
            .into_iter()
            .filter(|(k, _)| *k == "wrong_job")
            .map(|(_, f)| f)
            .collect();
        send_frames(&mut other, link, &frames);
        // The malformed ones, with the BCL EtherType.
        let mut m = PacketMethod::open(PacketConfig::default()).unwrap();
        let link = m.open_link(&server).unwrap();
        let frames: Vec<Vec<u8>> = malformed().into_iter().map(|(_, f)| f).collect();
        send_frames(&mut m, link, &frames);
    });
    let run = stream(
        &lab,
        Wire::Packet,
        ProgressMode::Blocking,
        20_000,
        mixed_size,
        Some(inject),
    );
    assert_eq!(run.checked, 20_000);
    assert_eq!(run.receiver.messages_delivered, 20_000);
    let b = run.receiver.bad_frames;
    println!("receiver bad frames: {b:?}");
    assert_eq!(b.truncated, EACH as u64 + count_short_random());
    assert_eq!(b.bad_length, EACH as u64);
    assert_eq!(b.wrong_job, EACH as u64);
    assert!(b.total() >= 4 * EACH as u64, "{b:?}");
    // The other EtherType's frames reached the interface but not BCL.
    let p = run.receiver_packet.unwrap();
    let arrived = rx_packets(&lab, "b", &ifname) - before;
    println!("receiver packet method: {p:?}; interface received {arrived}");
    assert_eq!(p.rx_truncated, 0);
    assert!(
        arrived >= p.rx_frames + p.rx_foreign + EACH as u64,
        "interface {arrived} < BCL {} + other EtherType {EACH}",
        p.rx_frames + p.rx_foreign
    );
}

/// Random frames shorter than a header count as truncated too.
fn count_short_random() -> u64 {
    malformed()
        .iter()
        .filter(|(k, f)| *k == "random" && f.len() < bcl::core::wire::HEADER_LEN)
        .count() as u64
}

#[test]
fn foreign_datagrams_on_the_udp_wire_are_dropped_and_counted() {
    if !require_privileges("foreign_datagrams_on_the_udp_wire") {
        return;
    }
    let lab = lab("pair.toml", "foreign-udp");
    let inject = Box::new(|server: Descriptor| {
        let to = bcl::udp::parse_address(&server.address).unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for (i, (_, f)) in malformed().into_iter().enumerate() {
            sock.send_to(&f, to).unwrap();
            if i % 32 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
        }
    });
    let run = stream(
        &lab,
        Wire::Udp,
        ProgressMode::BusyPoll,
        20_000,
        mixed_size,
        Some(inject),
    );
    assert_eq!(run.checked, 20_000);
    assert_eq!(run.receiver.messages_delivered, 20_000);
    let b = run.receiver.bad_frames;
    println!("receiver bad frames: {b:?}");
    assert_eq!(b.truncated, EACH as u64 + count_short_random());
    assert_eq!(b.bad_length, EACH as u64);
    assert_eq!(b.wrong_job, EACH as u64);
    assert_eq!(b.total(), 4 * EACH as u64, "{b:?}");
}
