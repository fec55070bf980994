//! The blocking mode of the progress engine, over the udp method on the
//! loopback interface (no privileges needed). Assertions count progress
//! rounds and wake-ups, never time: a busy-polling wait runs millions of
//! rounds, a blocking one a handful.

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, Error, JobKey, ProcessAddr, ProgressMode, SendFailure};
use std::time::Duration;

const JOB: JobKey = JobKey(0xb10c);

fn endpoint(node: u32, mode: ProgressMode) -> Endpoint {
    let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    Endpoint::builder(ProcessAddr::new(node, 0), JOB)
        .method(Box::new(udp))
        .mode(mode)
        .build()
        .unwrap()
}

#[test]
fn an_idle_blocking_wait_sleeps_instead_of_polling() {
    let mut ep = endpoint(1, ProgressMode::Blocking);
    assert_eq!(ep.mode(), ProgressMode::Blocking);
    let r = ep.recv_blocking(Duration::from_millis(200));
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    let s = ep.engine_stats();
    // One sleep until the caller's limit (a spurious wake-up or two at most).
    assert!(s.waits >= 1 && s.waits <= 3, "{s:?}");
    assert!(s.rounds <= 4, "{s:?}");
    assert_eq!(s.woken_by_frames, 0, "{s:?}");
}

#[test]
fn busy_poll_mode_never_sleeps() {
    let mut ep = endpoint(1, ProgressMode::BusyPoll);
    let _ = ep.recv_blocking(Duration::from_millis(20));
    let s = ep.engine_stats();
    assert_eq!(s.waits, 0);
    assert!(s.rounds > 4, "{s:?}");
}

#[test]
fn a_blocking_receive_wakes_when_the_message_arrives() {
    let mut server = endpoint(2, ProgressMode::Blocking);
    let mut client = endpoint(1, ProgressMode::Blocking);
    client.add_peer(server.local(), server.descriptors()[0].clone());
    let server_addr = server.local();
    let t = std::thread::spawn(move || {
        let d = server.recv_blocking(Duration::from_secs(30)).unwrap();
        let got = server.message(&d).unwrap().to_vec();
        let from = d.from;
        server.release(d).unwrap();
        // Answer, after the client has surely fallen asleep waiting for it,
        // so the client's blocking wait is woken by a frame too.
        std::thread::sleep(Duration::from_millis(50));
        server
            .send_blocking(from, b"pong", Duration::from_secs(30))
            .unwrap();
        (got, server.engine_stats())
    });
    // Let the server fall asleep first (not required for correctness).
    std::thread::sleep(Duration::from_millis(50));
    client
        .send_blocking(server_addr, b"ping", Duration::from_secs(30))
        .unwrap();
    let d = client.recv_blocking(Duration::from_secs(30)).unwrap();
    // The client's counts up to its answer (not the acknowledging below).
    let c = client.engine_stats();
    assert_eq!(client.message(&d).unwrap(), b"pong");
    client.release(d).unwrap();
    // Keep acknowledging until the server's send has completed.
    while !t.is_finished() {
        let soon = client.now() + Duration::from_millis(5);
        client.progress_or_wait(Some(soon)).unwrap();
    }
    let (got, s) = t.join().unwrap();
    assert_eq!(got, b"ping");
    assert!(s.woken_by_frames >= 1, "{s:?}");
    // A handful of rounds, not a spin through the 50 ms of waiting.
    assert!(s.rounds < 100, "{s:?}");
    assert!(c.woken_by_frames >= 1 && c.rounds < 100, "{c:?}");
}

#[test]
fn protocol_timers_wake_a_blocking_endpoint() {
    // Nobody listens at the peer's address: every transmission times out,
    // and only the timer can wake the endpoint to retransmit.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut ep = Endpoint::builder(ProcessAddr::new(1, 0), JOB)
        .method(Box::new(
            UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap(),
        ))
        .mode(ProgressMode::Blocking)
        .configure(|c| {
            c.max_timeouts = 3;
            c.rto.initial = Duration::from_millis(2);
            c.rto.min = Duration::from_millis(2);
            c.rto.max = Duration::from_millis(20);
        })
        .build()
        .unwrap();
    let peer = ProcessAddr::new(9, 0);
    ep.add_peer(
        peer,
        format!("udp:{}", silent.local_addr().unwrap())
            .parse()
            .unwrap(),
    );
    let r = ep.send_blocking(peer, b"anyone?", Duration::from_secs(30));
    assert!(
        matches!(r, Err(Error::Failed(SendFailure::PeerUnreachable(p))) if p == peer),
        "{r:?}"
    );
    let s = ep.engine_stats();
    assert!(ep.port().stats().retransmits >= 3);
    assert!(s.woken_by_timer >= 3, "{s:?}");
    assert!(s.rounds < 100, "{s:?}");
}

#[test]
fn a_method_without_a_descriptor_forces_busy_polling() {
    let fabric = bcl::sim::SimFabric::new(bcl::sim::FabricConfig::default());
    let mut ep = Endpoint::builder(ProcessAddr::new(1, 0), JOB)
        .method(Box::new(fabric.endpoint()))
        .clock(fabric.clock())
        .mode(ProgressMode::Blocking)
        .build()
        .unwrap();
    assert_eq!(ep.mode(), ProgressMode::BusyPoll);
    ep.wait(None).unwrap(); // returns at once instead of sleeping forever
    assert_eq!(ep.engine_stats().waits, 0);
}
