//! `bcl-shm-insns`: an 8-byte ping-pong between two shared-memory endpoints
//! in one thread, for counting instructions (`bench/shm-insns.sh` runs it
//! under callgrind twice, with two iteration counts, and divides the
//! difference: the instructions of one one-way message, send plus receive,
//! without set-up). One thread makes the count repeatable: nothing waits
//! for another CPU, and a busy host changes the time, not the count.
//!
//! ```text
//! bcl-shm-insns --iters 20000
//! ```

use bcl::shm::ShmMethod;
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};

const JOB: JobKey = JobKey(0x1a5);

fn end(addr: ProcessAddr) -> Endpoint {
    let m = ShmMethod::open(JOB, addr).expect("shared memory");
    Endpoint::builder(addr, JOB)
        .method(Box::new(m))
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
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).expect("--iters N"),
            _ => {
                eprintln!("usage: bcl-shm-insns [--iters N]");
                std::process::exit(2);
            }
        }
    }
    let pid = (std::process::id() & 0x7fff) as u16;
    let (a_addr, b_addr) = (ProcessAddr::new(1, pid), ProcessAddr::new(2, pid));
    let mut a = end(a_addr);
    let mut b = end(b_addr);
    a.add_peer(b_addr, b.descriptors()[0].clone());
    b.add_peer(a_addr, a.descriptors()[0].clone());
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
