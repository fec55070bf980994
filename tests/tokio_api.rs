//! `bcl::tokio`: the async API under a multi-threaded tokio runtime, over
//! udp on the loopback interface and over shared memory. Thousands of
//! concurrent sends, each message exactly once; cancelled receives and
//! sends lose and duplicate nothing.

mod shm_common;

use bcl::tokio::AsyncEndpoint;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode};
use std::collections::BTreeSet;
use std::time::Duration;

/// Concurrent sends in the many-senders tests.
const CONCURRENT: usize = 2000;
/// How long any one await may take before the test calls it a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn udp_pair() -> (Endpoint, Endpoint) {
    let open = |node| {
        let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        Endpoint::builder(ProcessAddr::new(node, 0), JobKey(0x70c))
            .method(Box::new(udp))
            .mode(ProgressMode::Blocking)
            .build()
            .unwrap()
    };
    let (mut a, b) = (open(1), open(2));
    a.add_peer(b.local(), b.descriptors()[0].clone());
    (a, b)
}

fn shm_pair(tag: u32) -> (Endpoint, Endpoint) {
    let job = shm_common::job(tag);
    let (pa, pb) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut a = shm_common::endpoint(job, pa, ProgressMode::Blocking);
    let b = shm_common::endpoint(job, pb, ProgressMode::Blocking);
    a.add_peer(pb, shm_common::shm_descriptor(pb));
    (a, b)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing for {LIMIT:?}"))
}

fn message(i: usize) -> Vec<u8> {
    format!("message {i:05}").into_bytes()
}

/// `CONCURRENT` tasks each send one message through the same endpoint and
/// await its acknowledgement; the receiver takes every one exactly once.
async fn many_concurrent_sends(a: Endpoint, b: Endpoint) {
    let a = AsyncEndpoint::new(a).unwrap();
    let b = AsyncEndpoint::new(b).unwrap();
    let to = b.local();
    // The receiving task's handle goes when it has every message; this one
    // keeps the endpoint (and its acknowledgements) alive until every send
    // has its acknowledgement.
    let b_alive = b.clone();
    let receiver = tokio::spawn(async move {
        let mut got = Vec::with_capacity(CONCURRENT);
        while got.len() < CONCURRENT {
            let (from, bytes) = within("recv", b.recv()).await.unwrap();
            got.push((from, bytes));
        }
        got
    });
    let sends: Vec<_> = (0..CONCURRENT)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move { a.send(to, &message(i)).await })
        })
        .collect();
    for s in sends {
        if let Err(e) = within("send", s).await.unwrap() {
            let sa = a.with_endpoint(|ep| *ep.port().stats());
            let sb = b_alive.with_endpoint(|ep| *ep.port().stats());
            let eb = b_alive.with_endpoint(|ep| ep.engine_stats());
            panic!("send failed: {e}\nsender {sa:?}\nreceiver {sb:?}\n{eb:?}");
        }
    }
    let got = within("receiver", receiver).await.unwrap();
    assert!(got.iter().all(|(from, _)| *from == a.local()));
    let distinct: BTreeSet<_> = got.iter().map(|(_, m)| m.clone()).collect();
    assert_eq!(got.len(), CONCURRENT);
    assert_eq!(distinct.len(), CONCURRENT, "every message exactly once");
    assert_eq!(distinct, (0..CONCURRENT).map(message).collect());
}

#[test]
fn thousands_of_concurrent_sends_over_udp() {
    let (a, b) = udp_pair();
    runtime().block_on(many_concurrent_sends(a, b));
}

#[test]
fn thousands_of_concurrent_sends_over_shared_memory() {
    let (a, b) = shm_pair(0x70c1);
    runtime().block_on(many_concurrent_sends(a, b));
}

#[test]
fn a_cancelled_recv_loses_nothing_and_messages_keep_their_order() {
    let (a, b) = udp_pair();
    runtime().block_on(async move {
        let a = AsyncEndpoint::new(a).unwrap();
        let b = AsyncEndpoint::new(b).unwrap();
        // Receives that give up before anything comes.
        for _ in 0..5 {
            let r = tokio::time::timeout(Duration::from_millis(5), b.recv()).await;
            assert!(r.is_err(), "nothing was sent yet: {r:?}");
        }
        for i in 0..50 {
            within("send", a.send(b.local(), &message(i)))
                .await
                .unwrap();
        }
        // A receive cancelled while messages wait takes none of them.
        {
            let pending = b.recv();
            drop(pending);
        }
        for i in 0..50 {
            let (_, m) = within("recv", b.recv()).await.unwrap();
            assert_eq!(m, message(i), "in order, none lost");
        }
        let r = tokio::time::timeout(Duration::from_millis(20), b.recv()).await;
        assert!(r.is_err(), "no duplicates: {r:?}");
    });
}

#[test]
fn cancelled_sends_are_still_delivered_exactly_once() {
    let (a, b) = udp_pair();
    runtime().block_on(async move {
        let a = AsyncEndpoint::new(a).unwrap();
        let to = b.local();
        // The receiver is not served yet, so no acknowledgement can come:
        // each send is polled once (the message is accepted then) and
        // dropped while it waits.
        for i in 0..200 {
            let m = message(i);
            let r = tokio::time::timeout(Duration::ZERO, a.send(to, &m)).await;
            assert!(r.is_err(), "send {i} cannot have been acknowledged");
        }
        let b = AsyncEndpoint::new(b).unwrap();
        let mut got = Vec::new();
        while got.len() < 200 {
            got.push(within("recv", b.recv()).await.unwrap().1);
        }
        assert_eq!(got, (0..200).map(message).collect::<Vec<_>>());
        let r = tokio::time::timeout(Duration::from_millis(50), b.recv()).await;
        assert!(r.is_err(), "no duplicates: {r:?}");
        // The endpoint goes on: a send awaited to the end completes.
        within("send", a.send(to, b"after")).await.unwrap();
        assert_eq!(within("recv", b.recv()).await.unwrap().1, b"after");
    });
}

#[test]
fn ping_pong_between_two_tasks() {
    let (a, b) = shm_pair(0x70c2);
    runtime().block_on(async move {
        let a = AsyncEndpoint::new(a).unwrap();
        let b = AsyncEndpoint::new(b).unwrap();
        let (pa, pb) = (a.local(), b.local());
        b.with_endpoint(|ep| ep.add_peer(pa, shm_common::shm_descriptor(pa)));
        let server = tokio::spawn(async move {
            for _ in 0..1000 {
                let (from, m) = within("server recv", b.recv()).await.unwrap();
                within("server send", b.send(from, &m)).await.unwrap();
            }
        });
        for i in 0..1000 {
            let m = message(i);
            within("client send", a.send(pb, &m)).await.unwrap();
            let (from, back) = within("client recv", a.recv()).await.unwrap();
            assert_eq!((from, back), (pb, m));
        }
        within("server", server).await.unwrap();
    });
}

#[test]
fn outside_a_runtime_is_an_error_not_a_panic() {
    let (a, _b) = udp_pair();
    let e = AsyncEndpoint::new(a).err().expect("no runtime here");
    assert!(e.to_string().contains("runtime"), "{e}");
}

/// `len` bytes that differ with `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(131).wrapping_add(u32::from(seed)) as u8)
        .collect()
}

/// Eight transfers of 256 KiB on eight channels at once, then one of 1 MiB.
async fn channel_transfers(a: Endpoint, b: Endpoint) {
    let a = AsyncEndpoint::new(a).unwrap();
    let b = AsyncEndpoint::new(b).unwrap();
    let to = b.local();
    let channels: Vec<_> = (0..8)
        .map(|_| b.with_endpoint(|ep| ep.open_normal_channel()).unwrap())
        .collect();
    let receivers: Vec<_> = channels
        .iter()
        .map(|&ch| {
            let b = b.clone();
            tokio::spawn(async move { b.recv_on_channel(ch, None, vec![0; 1 << 20]).await })
        })
        .collect();
    let senders: Vec<_> = channels
        .iter()
        .enumerate()
        .map(|(i, &ch)| {
            let a = a.clone();
            tokio::spawn(
                async move { a.send_on_channel(to, ch, pattern(256 << 10, i as u8)).await },
            )
        })
        .collect();
    for (i, s) in senders.into_iter().enumerate() {
        let back = within("channel send", s).await.unwrap().unwrap();
        assert_eq!(
            back,
            pattern(256 << 10, i as u8),
            "the sent buffer comes back"
        );
    }
    for (i, r) in receivers.into_iter().enumerate() {
        let (from, buf, len) = within("channel recv", r).await.unwrap().unwrap();
        assert_eq!((from, len), (a.local(), 256 << 10));
        assert_eq!(buf[..len], pattern(256 << 10, i as u8)[..], "channel {i}");
    }
    let ch = channels[0];
    let big = pattern(1 << 20, 99);
    let (sent, got) = tokio::join!(
        a.send_on_channel(to, ch, big.clone()),
        b.recv_on_channel(ch, Some(a.local()), vec![0; 1 << 20])
    );
    sent.unwrap();
    let (_, buf, len) = got.unwrap();
    assert_eq!(&buf[..len], &big[..]);
}

#[test]
fn channel_transfers_over_udp() {
    let (a, b) = udp_pair();
    runtime().block_on(channel_transfers(a, b));
}

#[test]
fn channel_transfers_over_shared_memory() {
    let (a, b) = shm_pair(0x70c3);
    runtime().block_on(channel_transfers(a, b));
}

#[test]
fn a_cancelled_channel_receive_loses_no_message() {
    let (a, b) = udp_pair();
    runtime().block_on(async move {
        let a = AsyncEndpoint::new(a).unwrap();
        let b = AsyncEndpoint::new(b).unwrap();
        let to = b.local();
        let ch = b.with_endpoint(|ep| ep.open_normal_channel()).unwrap();
        // Given up before anything was sent: the buffer is taken back, and
        // the channel takes a new receive.
        let r = tokio::time::timeout(
            Duration::from_millis(5),
            b.recv_on_channel(ch, None, vec![0; 4096]),
        )
        .await;
        assert!(r.is_err(), "nothing was sent yet");
        let (sent, got) = tokio::join!(
            a.send_on_channel(to, ch, pattern(3000, 1)),
            b.recv_on_channel(ch, None, vec![0; 4096])
        );
        sent.unwrap();
        let (_, buf, len) = got.unwrap();
        assert_eq!(&buf[..len], &pattern(3000, 1)[..]);

        // Given up after the message arrived in its buffer: the message is
        // kept for the next receive on the channel.
        let mut pending = Box::pin(b.recv_on_channel(ch, None, vec![0; 4096]));
        assert!(
            tokio::time::timeout(Duration::ZERO, &mut pending)
                .await
                .is_err(),
            "posted, nothing there yet"
        );
        within("channel send", a.send_on_channel(to, ch, pattern(2000, 2)))
            .await
            .unwrap();
        drop(pending);
        let (from, buf, len) = within("kept message", b.recv_on_channel(ch, None, Vec::new()))
            .await
            .unwrap();
        assert_eq!(from, a.local());
        assert_eq!(&buf[..len], &pattern(2000, 2)[..]);
    });
}

#[test]
fn async_rsr_calls_from_many_tasks_and_peers() {
    use bcl::coll::messenger::Messenger;
    use bcl::rsr::Rsr;
    use bcl::tokio::AsyncRsr;
    // A server and four clients over udp; every client calls from 250
    // tasks at once, half to an inline handler, half to a threaded one.
    let open = |node| {
        let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        Endpoint::builder(ProcessAddr::new(node, 0), JobKey(0x70d))
            .method(Box::new(udp))
            .mode(ProgressMode::Blocking)
            .build()
            .unwrap()
    };
    let mut server = open(100);
    let mut clients: Vec<Endpoint> = (1..=4).map(open).collect();
    for c in &mut clients {
        c.add_peer(server.local(), server.descriptors()[0].clone());
        server.add_peer(c.local(), c.descriptors()[0].clone());
    }
    let to = server.local();
    runtime().block_on(async move {
        let mut s = Rsr::new(Messenger::new(server));
        s.register_handler(1, |from, p| {
            let mut r = from.node.0.to_be_bytes().to_vec();
            r.extend_from_slice(p);
            r
        })
        .unwrap();
        s.register_threaded_handler(2, |_, p| p.iter().rev().copied().collect())
            .unwrap();
        let server = AsyncRsr::new(s).unwrap();
        let mut tasks = Vec::new();
        for c in clients {
            let node = c.local().node.0;
            let c = AsyncRsr::new(Rsr::new(Messenger::new(c))).unwrap();
            for i in 0..250u32 {
                let c = c.clone();
                tasks.push(tokio::spawn(async move {
                    let p = format!("{node}:{i}").into_bytes();
                    if i % 2 == 0 {
                        let got = c.call(to, 1, &p).await.unwrap();
                        let mut want = node.to_be_bytes().to_vec();
                        want.extend_from_slice(&p);
                        assert_eq!(got, want);
                    } else {
                        let got = c.call(to, 2, &p).await.unwrap();
                        assert_eq!(got, p.iter().rev().copied().collect::<Vec<_>>());
                    }
                    c
                }));
            }
        }
        let mut keep = Vec::new();
        for t in tasks {
            keep.push(within("call", t).await.unwrap());
        }
        let handled = server.with_rsr(|r| r.stats().requests_handled);
        assert_eq!(handled, 1000, "every request handled once");
        // The clients' endpoints live until here, so their last
        // acknowledgements went out.
        drop(keep);
    });
}
