//! Remote service requests (`bcl::rsr`): both kinds of handler on the
//! simulated fabric with loss and reordering (every request answered
//! exactly once, replies matched to their requests, handlers of both kinds
//! in the sender's order, small requests handled in place), payloads past
//! the eager limit, unknown handler ids,
//! panicking handlers; and between threads over shared memory and udp.

mod shm_common;

use bcl::coll::messenger::Messenger;
use bcl::rsr::{CallError, Rsr, RsrError};
use bcl::sim::FaultProfile;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode, SimCluster};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ECHO: u32 = 1;
const SHOUT: u32 = 2;
const INLINE_PANIC: u32 = 3;
const THREADED_PANIC: u32 = 4;

/// Two processes on the simulated fabric with `faults`, each with its
/// `Rsr`.
fn sim_pair(faults: FaultProfile, seed: u64) -> (SimCluster, Vec<Rsr>) {
    let mut cluster = SimCluster::new(2, faults, seed, 1500, |_, _| {}).unwrap();
    let eps = std::mem::take(&mut cluster.endpoints);
    let mut rsrs: Vec<Rsr> = eps
        .into_iter()
        .map(|ep| Rsr::new(Messenger::new(ep)))
        .collect();
    let (a, b) = (SimCluster::addr(0), SimCluster::addr(1));
    let d = rsrs[1].messenger().endpoint().descriptors()[0].clone();
    rsrs[0].messenger().endpoint_mut().add_peer(b, d);
    let d = rsrs[0].messenger().endpoint().descriptors()[0].clone();
    rsrs[1].messenger().endpoint_mut().add_peer(a, d);
    (cluster, rsrs)
}

/// Progresses both until `done` says so, moving the virtual clock to the
/// next event when nothing moved (and waiting a little in real time for
/// worker threads when no event is due).
fn drive(cluster: &mut SimCluster, rsrs: &mut [Rsr], mut done: impl FnMut(&mut [Rsr]) -> bool) {
    let mut idle_rounds = 0;
    while !done(rsrs) {
        let mut moved = 0;
        for r in rsrs.iter_mut() {
            moved += r.progress().unwrap();
        }
        if moved > 0 {
            idle_rounds = 0;
            continue;
        }
        idle_rounds += 1;
        assert!(idle_rounds < 20_000, "nothing moves and nothing is due");
        let next = rsrs
            .iter_mut()
            .filter_map(|r| r.messenger().endpoint().next_timeout())
            .chain(cluster.fabric.next_delivery())
            .min();
        match next {
            Some(t) if t > cluster.now() => cluster.clock.set(t),
            Some(_) => {}
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

fn payload(i: usize) -> Vec<u8> {
    // Every 10th request is past the system channel's eager limit.
    let len = if i % 10 == 9 {
        100_000 + i
    } else {
        8 + i % 300
    };
    (0..len).map(|j| (j as u32 ^ i as u32) as u8).collect()
}

fn shout(p: &[u8]) -> Vec<u8> {
    p.iter().map(|b| b.wrapping_add(1)).collect()
}

#[test]
fn both_kinds_of_handler_answer_every_request_once_over_a_lossy_fabric() {
    let faults = FaultProfile {
        loss: 0.05,
        reorder: 0.05,
        delay: Duration::from_micros(10),
        ..FaultProfile::perfect()
    };
    let (mut cluster, mut rsrs) = sim_pair(faults, 5);
    let b = SimCluster::addr(1);
    let calls = Arc::new(AtomicU64::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    {
        let (calls, order) = (calls.clone(), order.clone());
        rsrs[1]
            .register_handler(ECHO, move |_, p| {
                calls.fetch_add(1, Ordering::Relaxed);
                order.lock().unwrap().push(p.len());
                p.to_vec()
            })
            .unwrap();
    }
    let threaded_order = Arc::new(Mutex::new(Vec::new()));
    {
        let (calls, order) = (calls.clone(), threaded_order.clone());
        rsrs[1].set_workers(4);
        rsrs[1]
            .register_threaded_handler(SHOUT, move |_, p| {
                calls.fetch_add(1, Ordering::Relaxed);
                // Uneven times: requests run side by side would finish out
                // of order.
                std::thread::sleep(Duration::from_micros(50 + (p.len() as u64 * 37) % 300));
                order.lock().unwrap().push(p.len());
                shout(p)
            })
            .unwrap();
    }
    let n = 200;
    let mut expect = HashMap::new();
    let mut echo_lens = Vec::new();
    let mut shout_lens = Vec::new();
    for i in 0..n {
        let (id, want) = if i % 2 == 0 {
            echo_lens.push(payload(i).len());
            (ECHO, payload(i))
        } else {
            shout_lens.push(payload(i).len());
            (SHOUT, shout(&payload(i)))
        };
        let r = rsrs[0].rsr(b, id, &payload(i)).unwrap();
        expect.insert(r, want);
    }
    let mut got = HashMap::new();
    drive(&mut cluster, &mut rsrs, |rsrs| {
        while let Some(c) = rsrs[0].poll_completion() {
            assert!(
                got.insert(c.request, c.result).is_none(),
                "one completion per request"
            );
        }
        got.len() == n
    });
    assert_eq!(
        calls.load(Ordering::Relaxed),
        n as u64,
        "each handler ran once per request"
    );
    for (r, want) in &expect {
        assert_eq!(got[r].as_ref().unwrap(), want, "the reply of {r:?}");
    }
    assert_eq!(
        *order.lock().unwrap(),
        echo_lens,
        "inline handlers run in the sender's order"
    );
    assert_eq!(
        *threaded_order.lock().unwrap(),
        shout_lens,
        "a sender's requests to a threaded handler run one at a time, in its order"
    );
    let in_place = rsrs[1].stats().taken_in_place;
    assert!(
        in_place > 0 && in_place <= n as u64 * 9 / 10,
        "small requests are handled in place, large ones never: {in_place}"
    );
    assert_eq!(rsrs[0].pending(), 0);
    assert!(
        cluster.fabric.stats().dropped > 0,
        "the fabric did lose frames: {:?}",
        cluster.fabric.stats()
    );
}

#[test]
fn unknown_ids_and_panicking_handlers_are_errors_at_the_sender() {
    let (mut cluster, mut rsrs) = sim_pair(FaultProfile::perfect(), 1);
    let b = SimCluster::addr(1);
    rsrs[1].register_handler(ECHO, |_, p| p.to_vec()).unwrap();
    rsrs[1]
        .register_handler(INLINE_PANIC, |_, _| panic!("inline handler gave up"))
        .unwrap();
    rsrs[1]
        .register_threaded_handler(THREADED_PANIC, |_, _| panic!("worker gave up"))
        .unwrap();
    let unknown = rsrs[0].rsr(b, 77, b"?").unwrap();
    let inline = rsrs[0].rsr(b, INLINE_PANIC, b"x").unwrap();
    let threaded = rsrs[0].rsr(b, THREADED_PANIC, b"y").unwrap();
    let after = rsrs[0].rsr(b, ECHO, b"still here").unwrap();
    let mut got = HashMap::new();
    drive(&mut cluster, &mut rsrs, |rsrs| {
        while let Some(c) = rsrs[0].poll_completion() {
            got.insert(c.request, c.result);
        }
        got.len() == 4
    });
    assert_eq!(
        got[&unknown],
        Err(RsrError::UnknownHandler {
            peer: b,
            handler: 77
        })
    );
    assert!(
        matches!(&got[&inline], Err(RsrError::HandlerPanicked { handler: INLINE_PANIC, message, .. }) if message == "inline handler gave up"),
        "{:?}",
        got[&inline]
    );
    assert!(
        matches!(&got[&threaded], Err(RsrError::HandlerPanicked { handler: THREADED_PANIC, message, .. }) if message == "worker gave up"),
        "{:?}",
        got[&threaded]
    );
    assert_eq!(
        got[&after],
        Ok(b"still here".to_vec()),
        "the endpoint goes on"
    );
    assert!(rsrs[0]
        .register_handler(1 << 30, |_, p| p.to_vec())
        .is_err());
}

const STOP: u32 = 5;

/// Serves `s` on this thread until a request to its `STOP` handler comes
/// (registered here), sleeping without a limit in between: only a frame,
/// a protocol timer or a worker's signal wakes it. Then lets the stop's
/// answer be acknowledged, and returns the counters.
fn serve_until_stopped(mut s: Rsr) -> bcl::rsr::RsrStats {
    let stop = Arc::new(AtomicU64::new(0));
    let flag = stop.clone();
    s.register_handler(STOP, move |_, _| {
        flag.store(1, Ordering::Relaxed);
        Vec::new()
    })
    .unwrap();
    while stop.load(Ordering::Relaxed) == 0 {
        s.progress_or_wait(None).unwrap();
    }
    for _ in 0..50 {
        let soon = s.messenger().endpoint().now() + Duration::from_millis(1);
        s.progress_or_wait(Some(soon)).unwrap();
    }
    s.stats()
}

/// Two blocking udp endpoints on the loopback interface that know each
/// other.
fn udp_pair(job: u32) -> (Endpoint, Endpoint) {
    let open = |node| {
        let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        Endpoint::builder(ProcessAddr::new(node, 0), JobKey(job))
            .method(Box::new(udp))
            .mode(ProgressMode::Blocking)
            .build()
            .unwrap()
    };
    let (mut a, mut b) = (open(1), open(2));
    a.add_peer(b.local(), b.descriptors()[0].clone());
    b.add_peer(a.local(), a.descriptors()[0].clone());
    (a, b)
}

/// A server thread answering requests with its handlers until asked to
/// stop, and a client calling them blocking. The server sleeps without a
/// limit between requests: a threaded handler's answer leaves only
/// because the finished worker wakes it (else the client's call times out).
fn calls_between_threads(client: Endpoint, server: Endpoint) {
    let to = server.local();
    let t = std::thread::spawn(move || {
        let mut s = Rsr::new(Messenger::new(server));
        s.register_handler(ECHO, |_, p| p.to_vec()).unwrap();
        s.register_threaded_handler(SHOUT, |_, p| shout(p)).unwrap();
        serve_until_stopped(s)
    });
    let mut c = Rsr::new(Messenger::new(client));
    let t_out = Duration::from_secs(20);
    for i in 0..100 {
        let p = payload(i);
        assert_eq!(c.call_blocking(to, ECHO, &p, t_out).unwrap(), p);
        assert_eq!(c.call_blocking(to, SHOUT, &p, t_out).unwrap(), shout(&p));
    }
    let e = c.call_blocking(to, 99, b"", t_out).unwrap_err();
    assert!(
        matches!(
            e,
            CallError::Rsr(RsrError::UnknownHandler { handler: 99, .. })
        ),
        "{e}"
    );
    c.call_blocking(to, STOP, b"", t_out).unwrap();
    let stats = t.join().unwrap();
    assert_eq!(stats.requests_handled, 202);
    // One call at a time, so nothing is ever held back: every small
    // request and every small answer is handled where it arrived (90 small
    // payloads to each of two handlers, the unknown id, the stop).
    assert_eq!(stats.taken_in_place, 182, "requests handled in place");
    assert_eq!(c.stats().taken_in_place, 182, "answers taken in place");
}

#[test]
fn blocking_calls_over_shared_memory() {
    let job = shm_common::job(0x55);
    let (pa, pb) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut a = shm_common::endpoint(job, pa, ProgressMode::Blocking);
    let mut b = shm_common::endpoint(job, pb, ProgressMode::Blocking);
    a.add_peer(pb, shm_common::shm_descriptor(pb));
    b.add_peer(pa, shm_common::shm_descriptor(pa));
    calls_between_threads(a, b);
}

#[test]
fn blocking_calls_over_udp() {
    let (a, b) = udp_pair(0x55);
    calls_between_threads(a, b);
}

const GATE: u32 = 6;

#[test]
fn a_finished_worker_wakes_a_server_asleep_with_nothing_due() {
    let (client, server) = udp_pair(0x56);
    let to = server.local();
    let (open_gate, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let t = std::thread::spawn(move || {
        let mut s = Rsr::new(Messenger::new(server));
        s.register_threaded_handler(GATE, move |_, _| {
            gate.lock().unwrap().recv().unwrap();
            b"through".to_vec()
        })
        .unwrap();
        serve_until_stopped(s)
    });
    let mut c = Rsr::new(Messenger::new(client));
    let request = c.rsr(to, GATE, b"").unwrap();
    // Until the request is acknowledged and both ends have nothing due.
    for _ in 0..100 {
        let soon = c.messenger().endpoint().now() + Duration::from_millis(1);
        c.progress_or_wait(Some(soon)).unwrap();
    }
    assert!(
        c.poll_completion().is_none(),
        "the handler waits at its gate"
    );
    open_gate.send(()).unwrap();
    let deadline = c.messenger().endpoint().now() + Duration::from_secs(20);
    let done = loop {
        if let Some(done) = c.poll_completion() {
            break done;
        }
        assert!(
            c.messenger().endpoint().now() < deadline,
            "the answer never left: the finished worker did not wake the server"
        );
        c.progress_or_wait(Some(deadline)).unwrap();
    };
    assert_eq!(done.request, request);
    assert_eq!(done.result, Ok(b"through".to_vec()));
    c.call_blocking(to, STOP, b"", Duration::from_secs(20))
        .unwrap();
    t.join().unwrap();
}
