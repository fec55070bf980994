//! Remote service requests through the endpoint's own calls
//! (`Endpoint::register_handler`, `rsr`, `call`, `poll_rsr`; `bcl::service`):
//! service messages never reach the application's receive queue, and the
//! application's messages sent beside them arrive exactly once and in
//! order; `poll_rsr` leaves the application's messages alone; large
//! requests and replies ride a normal channel over shared memory and over
//! the simulated fabric; two endpoints sending each other large requests
//! at once both get their answers; a request to a peer that is gone fails
//! with an error naming it; `call` returns the peer's error, times out, and
//! the late answer comes as a completion.

mod shm_common;

use bcl::service::RsrError;
use bcl::sim::FaultProfile;
use bcl::{Endpoint, ProcessAddr, ProgressMode, SimCluster};
use shm_common::{pattern, shm_descriptor, T};
use std::time::{Duration, Instant};

const ECHO: u32 = 1;
const REVERSE: u32 = 2;

/// Two busy-polling shm endpoints that know each other, with the handlers
/// registered on both.
fn shm_pair(tag: u32) -> (Endpoint, Endpoint) {
    let job = shm_common::job(tag);
    let (pa, pb) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut a = shm_common::endpoint(job, pa, ProgressMode::BusyPoll);
    let mut b = shm_common::endpoint(job, pb, ProgressMode::BusyPoll);
    a.add_peer(pb, shm_descriptor(pb));
    b.add_peer(pa, shm_descriptor(pa));
    for ep in [&mut a, &mut b] {
        handlers(ep);
    }
    (a, b)
}

fn handlers(ep: &mut Endpoint) {
    ep.register_handler(ECHO, |_, p, reply| reply.extend_from_slice(p))
        .unwrap();
    ep.register_handler(REVERSE, |_, p, reply| {
        reply.extend_from_slice(&p.iter().rev().copied().collect::<Vec<_>>())
    })
    .unwrap();
}

/// Progresses both until `done`, failing after [`T`].
fn drive(
    a: &mut Endpoint,
    b: &mut Endpoint,
    mut done: impl FnMut(&mut Endpoint, &mut Endpoint) -> bool,
) {
    let deadline = Instant::now() + T;
    while !done(a, b) {
        assert!(Instant::now() < deadline, "no progress in {T:?}");
        a.progress().unwrap();
        b.progress().unwrap();
    }
}

#[test]
fn service_messages_and_application_messages_share_a_link_apart() {
    let (mut a, mut b) = shm_pair(0x71);
    let to = b.local();
    let n = 300u32;
    let mut requests = Vec::new();
    for i in 0..n {
        a.send(to, &i.to_le_bytes()).unwrap();
        requests.push(a.rsr(to, ECHO, &pattern(8 + i as usize % 100, i)).unwrap());
    }
    let mut got = Vec::new();
    let mut answers = 0;
    drive(&mut a, &mut b, |a, b| {
        while let Some(v) = b
            .poll_recv_with(|_, m| u32::from_le_bytes(m.try_into().unwrap()))
            .unwrap()
        {
            got.push(v);
        }
        while let Some(c) = a.poll_rsr_completion() {
            let i = requests.iter().position(|r| *r == c.request).unwrap();
            assert_eq!(c.result.unwrap(), pattern(8 + i % 100, i as u32));
            answers += 1;
        }
        got.len() == n as usize && answers == n
    });
    assert_eq!(
        got,
        (0..n).collect::<Vec<_>>(),
        "every message once, in order"
    );
    assert_eq!(b.rsr_stats().requests_handled, u64::from(n));
    assert!(
        b.poll_delivery().is_none(),
        "no service message reached the application"
    );
    assert_eq!(a.rsr_pending(), 0);
}

#[test]
fn poll_rsr_serves_requests_and_leaves_the_applications_messages() {
    let (mut a, mut b) = shm_pair(0x72);
    let to = b.local();
    // A message, then a request behind it, then another message.
    a.send(to, b"before").unwrap();
    let r = a.rsr(to, REVERSE, b"abc").unwrap();
    a.send(to, b"after").unwrap();
    a.transmit().unwrap();
    let deadline = Instant::now() + T;
    while b.rsr_stats().requests_handled == 0 {
        assert!(Instant::now() < deadline, "the request was never handled");
        b.poll_rsr().unwrap();
    }
    while a.rsr_pending() > 0 {
        assert!(Instant::now() < deadline, "the answer never came");
        a.poll_rsr().unwrap();
        b.poll_rsr().unwrap();
    }
    let c = a.take_rsr_completion(r).expect("the request's answer");
    assert_eq!(c.result.unwrap(), b"cba");
    let mut got = Vec::new();
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "messages lost: {got:?}");
        if let Some(m) = b.poll_recv_with(|_, m| m.to_vec()).unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got, [b"before".to_vec(), b"after".to_vec()]);
}

/// Large requests and replies (past the eager limit) both ways, small ones
/// between them, over `a` and `b`: answered, intact, and the requests of
/// one sender taken in its order.
fn large_both_ways(a: &mut Endpoint, b: &mut Endpoint, step: impl FnMut()) {
    let mut step = step;
    let (pa, pb) = (a.local(), b.local());
    let sizes = [100_000usize, 12, 300_000, 40, 70_000];
    let mut from_a = Vec::new();
    let mut from_b = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        from_a.push((a.rsr(pb, REVERSE, &pattern(len, i as u32)).unwrap(), len, i));
        from_b.push((
            b.rsr(pa, ECHO, &pattern(len, 50 + i as u32)).unwrap(),
            len,
            i,
        ));
    }
    let (mut done_a, mut done_b) = (0, 0);
    let deadline = Instant::now() + T;
    while done_a < sizes.len() || done_b < sizes.len() {
        assert!(
            Instant::now() < deadline,
            "answers missing: {done_a}, {done_b}"
        );
        a.progress().unwrap();
        b.progress().unwrap();
        step();
        while let Some(c) = a.poll_rsr_completion() {
            let (_, len, i) = from_a.iter().find(|r| r.0 == c.request).copied().unwrap();
            let mut want = pattern(len, i as u32);
            want.reverse();
            assert!(c.result.unwrap() == want, "reply {i} of {len} bytes");
            done_a += 1;
        }
        while let Some(c) = b.poll_rsr_completion() {
            let (_, len, i) = from_b.iter().find(|r| r.0 == c.request).copied().unwrap();
            assert!(
                c.result.unwrap() == pattern(len, 50 + i as u32),
                "reply {i}"
            );
            done_b += 1;
        }
    }
    // Each end sent 3 large requests and 3 large replies, and took as
    // many of each.
    assert_eq!(a.rsr_stats().large_payloads, 12);
    assert_eq!(b.rsr_stats().large_payloads, 12);
    // No channel event of the layer's transfers reached the application.
    assert!(a.poll_channel_event().is_none());
    assert!(b.poll_channel_event().is_none());
}

#[test]
fn large_payloads_both_ways_at_once_over_shared_memory() {
    let (mut a, mut b) = shm_pair(0x73);
    large_both_ways(&mut a, &mut b, || {});
}

#[test]
fn large_payloads_both_ways_at_once_over_a_lossy_fabric() {
    let faults = FaultProfile {
        loss: 0.02,
        reorder: 0.05,
        delay: Duration::from_micros(10),
        ..FaultProfile::perfect()
    };
    let mut cluster = SimCluster::new(2, faults, 9, 1500, |_, _| {}).unwrap();
    let mut eps = std::mem::take(&mut cluster.endpoints);
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    a.add_peer(b.local(), b.descriptors()[0].clone());
    b.add_peer(a.local(), a.descriptors()[0].clone());
    handlers(&mut a);
    handlers(&mut b);
    let clock = cluster.clock.clone();
    large_both_ways(&mut a, &mut b, || clock.advance(Duration::from_micros(20)));
    assert!(cluster.fabric.stats().dropped > 0, "the fabric lost frames");
}

#[test]
fn a_request_to_a_peer_that_is_gone_fails_naming_it() {
    let (mut a, mut b) = shm_pair(0x74);
    let gone = b.local();
    // The link exists (one answered call), then the peer goes away.
    let server = std::thread::spawn(move || {
        let deadline = Instant::now() + T;
        while b.rsr_stats().requests_handled == 0 && Instant::now() < deadline {
            b.poll_rsr().unwrap();
        }
        // Let the answer out before going.
        for _ in 0..1000 {
            b.poll_rsr().unwrap();
        }
        b.rsr_stats().requests_handled
    });
    assert_eq!(a.call(gone, ECHO, b"hi", T).unwrap(), b"hi");
    assert_eq!(server.join().unwrap(), 1);
    let r = a.rsr(gone, ECHO, b"anyone?").unwrap();
    let deadline = Instant::now() + T;
    let c = loop {
        assert!(Instant::now() < deadline, "no error: the request hangs");
        a.progress().unwrap();
        if let Some(c) = a.poll_rsr_completion() {
            break c;
        }
    };
    assert_eq!(c.request, r);
    match c.result {
        Err(RsrError::Failed { peer, handler, .. }) => {
            assert_eq!((peer, handler), (gone, ECHO));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.rsr_pending(), 0);
}

#[test]
fn bad_handler_ids_are_refused_at_once() {
    let (mut a, b) = shm_pair(0x75);
    let e = a
        .rsr(b.local(), bcl::service::MAX_HANDLER_ID + 1, b"")
        .unwrap_err();
    assert!(e.to_string().contains("largest"), "{e}");
    let e = a.register_handler(u32::MAX, |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("largest"), "{e}");
}

#[test]
fn call_reports_errors_and_a_late_answer_becomes_a_completion() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const SLOW: u32 = 3;
    let (mut a, mut b) = shm_pair(0x76);
    let to = b.local();
    b.register_handler(SLOW, |_, p, reply| {
        std::thread::sleep(Duration::from_millis(200));
        reply.extend_from_slice(p);
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                b.poll_rsr().unwrap();
            }
        })
    };
    let e = a.call(to, 99, b"?", T).unwrap_err();
    assert!(
        matches!(
            e,
            bcl::service::api::ServiceError::Rsr(RsrError::UnknownHandler { handler: 99, .. })
        ),
        "{e}"
    );
    let e = a
        .call(to, SLOW, b"late", Duration::from_millis(20))
        .unwrap_err();
    assert!(
        matches!(e, bcl::service::api::ServiceError::Timeout(_)),
        "{e}"
    );
    // The answer still comes, as a completion.
    let deadline = Instant::now() + T;
    let c = loop {
        assert!(Instant::now() < deadline, "the late answer never came");
        a.poll_rsr().unwrap();
        if let Some(c) = a.poll_rsr_completion() {
            break c;
        }
    };
    assert_eq!(c.result.unwrap(), b"late");
    // And the next call works as before.
    assert_eq!(a.call_with(to, ECHO, b"again", T, |r| r.len()).unwrap(), 5);
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
