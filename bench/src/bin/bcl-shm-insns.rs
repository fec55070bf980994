//! `bcl-shm-insns`: an 8-byte ping-pong between two shared-memory endpoints
//! in one thread, for counting instructions (`bench/shm-insns.sh` runs it
//! under callgrind twice, with two iteration counts, and divides the
//! difference: the instructions of one one-way message, send plus receive,
//! without set-up). One thread makes the count repeatable: nothing waits
//! for another CPU, and a busy host changes the time, not the count.
//!
//! With `--rsr` the round trips are remote service requests instead
//! (`bcl::service`: the client's `Endpoint::rsr`, the server's inline echo
//! handler, the client's completion), over the same two endpoints, for
//! comparing what a request adds to a plain round trip.
//!
//! With `--udp` the two endpoints talk udp on the loopback interface
//! instead: every message a BCL frame through the whole protocol core
//! (sequence numbers, acknowledgements, CRC32C) and a socket, for counting
//! the core's stages on a framed method (the kernel's part is not counted).
//!
//! ```text
//! bcl-shm-insns --iters 20000 [--rsr] [--udp]
//! ```

use bcl::shm::ShmMethod;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};

const JOB: JobKey = JobKey(0x1a5);

fn end(addr: ProcessAddr, udp: bool) -> Endpoint {
    let m: Box<dyn bcl::Method> = if udp {
        let cfg = UdpConfig::new("127.0.0.1:0".parse().expect("address"));
        Box::new(UdpMethod::open(cfg).expect("udp socket"))
    } else {
        Box::new(ShmMethod::open(JOB, addr).expect("shared memory"))
    };
    Endpoint::builder(addr, JOB)
        .method(m)
        .mode(ProgressMode::BusyPoll)
        .build()
        .expect("endpoint")
}

/// Receives one message on `ep` (busy-polling) and returns its first byte.
fn recv(ep: &mut Endpoint) -> u8 {
    loop {
        if let Some(b) = ep.poll_recv_with(|_, bytes| bytes[0]).expect("receive") {
            return b;
        }
    }
}

fn main() {
    let mut iters: u64 = 10_000;
    let mut rsr = false;
    let mut udp = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).expect("--iters N"),
            "--rsr" => rsr = true,
            "--udp" => udp = true,
            _ => {
                eprintln!("usage: bcl-shm-insns [--iters N] [--rsr] [--udp]");
                std::process::exit(2);
            }
        }
    }
    let pid = (std::process::id() & 0x7fff) as u16;
    let (a_addr, b_addr) = (ProcessAddr::new(1, pid), ProcessAddr::new(2, pid));
    let mut a = end(a_addr, udp);
    let mut b = end(b_addr, udp);
    a.add_peer(b_addr, b.descriptors()[0].clone());
    b.add_peer(a_addr, a.descriptors()[0].clone());
    if rsr {
        rsr_round_trips(a, b, b_addr, iters);
        return;
    }
    let mut msg = [0u8; 8];
    for i in 0..iters {
        msg[0] = i as u8;
        a.send(b_addr, &msg).expect("send a->b");
        // The first message of a pair goes through the port (the link is
        // made on the way); later ones are direct and leave at once.
        a.transmit().expect("transmit a");
        let got = recv(&mut b);
        b.send(a_addr, &[got; 8]).expect("send b->a");
        b.transmit().expect("transmit b");
        assert_eq!(recv(&mut a), i as u8);
        while a.poll_send_event().is_some() || b.poll_send_event().is_some() {}
    }
    println!("{iters} round trips");
}

/// `iters` RSR round trips from `a` to an inline echo handler at `b`,
/// through the endpoint's calls (`Endpoint::rsr`, `register_handler`).
fn rsr_round_trips(mut a: Endpoint, mut b: Endpoint, b_addr: ProcessAddr, iters: u64) {
    b.register_handler(1, |_, p, reply| reply.extend_from_slice(p))
        .expect("handler");
    let mut msg = [0u8; 8];
    for i in 0..iters {
        msg[0] = i as u8;
        let request = a.rsr(b_addr, 1, &msg).expect("request");
        a.transmit().expect("transmit a");
        let answer = loop {
            // The server's loop, then the client's: each a quick poll that
            // handles a service message where it lies.
            b.poll_rsr().expect("server poll");
            a.poll_rsr().expect("client poll");
            let done = a.poll_rsr_completion_with(|r, result| {
                assert_eq!(r, request);
                result.expect("answer")[0]
            });
            if let Some(first) = done {
                break first;
            }
        };
        assert_eq!(answer, i as u8);
    }
    println!("{iters} RSR round trips");
}
