//! The endpoint's descriptor (`AsFd`) in event loops of the application's
//! own: an epoll set that holds nothing but the descriptor, and
//! `Endpoint::service` each time it is readable. Over udp on the loopback
//! interface and over shared memory (no privileges needed). Assertions
//! count wake-ups against arrivals, never time: a loop that spins wakes
//! thousands of times in the pauses between messages, and one that misses
//! an event waits out its limit and fails.

mod shm_common;

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode, SendEvent};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Messages each test sends, one per pause.
const MESSAGES: usize = 30;
/// The pause between two messages: long enough for a spinning loop to show.
const PAUSE: Duration = Duration::from_millis(3);
/// How long a loop waits for the next event before calling it missed.
const LIMIT: Duration = Duration::from_secs(10);

/// An application's event loop around one endpoint: its own epoll set with
/// the endpoint's descriptor alone.
struct EventLoop {
    epoll: Epoll,
    wakeups: usize,
}

impl EventLoop {
    fn new(ep: &Endpoint) -> EventLoop {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        epoll
            .add(ep.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1))
            .unwrap();
        EventLoop { epoll, wakeups: 0 }
    }

    /// Sleeps until the endpoint's descriptor is readable or `timeout`
    /// passes; whether it was readable.
    fn wait(&mut self, timeout: Duration) -> bool {
        let mut events = [EpollEvent::empty()];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let n = self
            .epoll
            .wait(&mut events, EpollTimeout::from(ms))
            .unwrap();
        if n > 0 {
            self.wakeups += 1;
        }
        n > 0
    }
}

/// The receiving side: takes `count` messages through its event loop and
/// returns them with the loop's wake-ups; panics if an event is missed.
fn receive(mut ep: Endpoint, count: usize) -> (Vec<Vec<u8>>, usize, Endpoint) {
    let mut ev = EventLoop::new(&ep);
    let mut got = Vec::new();
    ep.service().unwrap();
    while got.len() < count {
        assert!(
            ev.wait(LIMIT),
            "receiver: nothing readable for {LIMIT:?} after {} of {count} messages (an event was missed)",
            got.len()
        );
        ep.service().unwrap();
        while let Some(d) = ep.poll_delivery() {
            got.push(ep.message(&d).unwrap().to_vec());
            ep.release(d).unwrap();
        }
        // The releases are work for the endpoint: serve it before waiting.
        ep.service().unwrap();
    }
    // Serve until the sender has its acknowledgements (it stops sending).
    let quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(100) {
        if ev.wait(Duration::from_millis(20)) {
            ep.service().unwrap();
        }
    }
    (got, ev.wakeups, ep)
}

/// The sending side: one message per pause, then waits until all are
/// acknowledged; everything through its event loop. Returns the loop's
/// wake-ups.
fn send(mut ep: Endpoint, to: ProcessAddr, count: usize) -> (usize, Endpoint) {
    let mut ev = EventLoop::new(&ep);
    let mut completed = 0;
    let mut next_send = Instant::now();
    let mut sent = 0;
    ep.service().unwrap();
    while completed < count {
        if sent < count && Instant::now() >= next_send {
            ep.send(to, &message(sent)).unwrap();
            sent += 1;
            next_send = Instant::now() + PAUSE;
            ep.service().unwrap();
        }
        // Events first (a send may complete at once), then sleep.
        while let Some(e) = ep.poll_send_event() {
            match e {
                SendEvent::Complete(_) => completed += 1,
                SendEvent::Failed(h, why) => panic!("send {h:?} failed: {why:?}"),
            }
        }
        if completed == count {
            break;
        }
        let timeout = if sent < count {
            next_send.saturating_duration_since(Instant::now())
        } else {
            LIMIT
        };
        if ev.wait(timeout) {
            ep.service().unwrap();
        } else {
            assert!(
                sent < count,
                "sender: {completed} of {count} acknowledged, then nothing for {LIMIT:?}"
            );
        }
    }
    (ev.wakeups, ep)
}

fn message(i: usize) -> Vec<u8> {
    format!("message {i:04}").into_bytes()
}

/// Runs a sender and a receiver, each in its own thread and event loop,
/// and checks what arrived and how often each loop woke.
fn exchange(sender: Endpoint, receiver: Endpoint) {
    let to = receiver.local();
    let r = std::thread::spawn(move || receive(receiver, MESSAGES));
    let (sender_wakeups, sender) = send(sender, to, MESSAGES);
    let (got, receiver_wakeups, receiver) = r.join().unwrap();
    let want: Vec<_> = (0..MESSAGES).map(message).collect();
    assert_eq!(got, want, "every message once, in order");
    println!(
        "wake-ups for {MESSAGES} messages: sender {sender_wakeups}, receiver {receiver_wakeups}"
    );
    // Each message wakes the receiver for its arrival and perhaps for the
    // delayed acknowledgement's timer, the sender for the acknowledgement
    // and a timer or two; a spinning loop wakes thousands of times in the
    // pauses. The bound leaves room for a retransmission now and then.
    let bound = 4 * MESSAGES + 10;
    assert!(
        receiver_wakeups <= bound,
        "receiver woke {receiver_wakeups} times for {MESSAGES} messages"
    );
    assert!(
        sender_wakeups <= bound,
        "sender woke {sender_wakeups} times for {MESSAGES} messages"
    );
    assert!(
        receiver_wakeups >= MESSAGES / 2,
        "the receiver must have slept between messages"
    );

    // Idle now: the descriptors stay quiet.
    for mut ep in [sender, receiver] {
        ep.service().unwrap();
        let mut ev = EventLoop::new(&ep);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            if ev.wait(Duration::from_millis(50)) {
                ep.service().unwrap();
            }
        }
        assert!(
            ev.wakeups <= 2,
            "an idle endpoint woke its loop {} times in 200 ms",
            ev.wakeups
        );
    }
}

fn udp_endpoint(node: u32, mode: ProgressMode) -> Endpoint {
    let udp = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    Endpoint::builder(ProcessAddr::new(node, 0), JobKey(0xfd))
        .method(Box::new(udp))
        .mode(mode)
        .build()
        .unwrap()
}

#[test]
fn an_event_loop_on_the_descriptor_alone_serves_udp_without_spinning() {
    // A busy-poll endpoint has the descriptor too: the mode only says how
    // the endpoint's own waits behave.
    let mut sender = udp_endpoint(1, ProgressMode::BusyPoll);
    let receiver = udp_endpoint(2, ProgressMode::Blocking);
    sender.add_peer(receiver.local(), receiver.descriptors()[0].clone());
    exchange(sender, receiver);
}

#[test]
fn an_event_loop_on_the_descriptor_alone_serves_shared_memory_without_spinning() {
    let job = shm_common::job(0xfd);
    let a = ProcessAddr::new(1, 1);
    let b = ProcessAddr::new(1, 2);
    let mut sender = shm_common::endpoint(job, a, ProgressMode::Blocking);
    let receiver = shm_common::endpoint(job, b, ProgressMode::Blocking);
    sender.add_peer(b, shm_common::shm_descriptor(b));
    exchange(sender, receiver);
}

#[test]
fn the_descriptor_is_readable_when_a_frame_waits_and_quiet_after_service() {
    let mut a = udp_endpoint(1, ProgressMode::Blocking);
    let mut b = udp_endpoint(2, ProgressMode::Blocking);
    a.add_peer(b.local(), b.descriptors()[0].clone());
    let mut ev = EventLoop::new(&b);
    b.service().unwrap();
    assert!(!ev.wait(Duration::ZERO), "nothing has come yet");
    a.send(b.local(), b"hello").unwrap();
    a.service().unwrap();
    assert!(
        ev.wait(Duration::from_secs(5)),
        "the frame makes the descriptor readable"
    );
    b.service().unwrap();
    let d = b.poll_delivery().expect("the message, after one service");
    assert_eq!(b.message(&d).unwrap(), b"hello");
    b.release(d).unwrap();
    b.service().unwrap();
    // The acknowledgement went out (at once or on the delayed-ACK timer,
    // which wakes the loop once); then the descriptor is quiet.
    let mut wakeups = 0;
    while ev.wait(Duration::from_millis(50)) {
        wakeups += 1;
        assert!(wakeups <= 2, "woken {wakeups} times with nothing to do");
        b.service().unwrap();
    }
    assert_eq!(
        b.port().peer_info(a.local()).unwrap().stats.frames_sent,
        1,
        "the acknowledgement"
    );
}

#[test]
fn protocol_timers_alone_make_the_descriptor_readable() {
    // A peer that never answers: only the retransmission timer can wake
    // the loop, until the send fails. Nothing waits forever.
    let mut a = udp_endpoint(1, ProgressMode::Blocking);
    // `b` exists but is never served: its socket takes the frames, nothing
    // answers.
    let b = udp_endpoint(2, ProgressMode::Blocking);
    let b_addr = b.local();
    a.add_peer(b_addr, b.descriptors()[0].clone());
    let mut ev = EventLoop::new(&a);
    a.send(b_addr, b"anyone?").unwrap();
    a.service().unwrap();
    let failed = loop {
        assert!(ev.wait(LIMIT), "no timer woke the loop in {LIMIT:?}");
        a.service().unwrap();
        if let Some(e) = a.poll_send_event() {
            break e;
        }
        assert!(ev.wakeups < 1000, "woken {} times", ev.wakeups);
    };
    assert!(matches!(failed, SendEvent::Failed(..)), "{failed:?}");
    let timeouts = a.port().stats().timeouts;
    println!("{} wake-ups for {timeouts} timeouts", ev.wakeups);
    assert!(timeouts >= 2, "the retransmission timer fired ({timeouts})");
    assert!(
        ev.wakeups as u64 <= 2 * timeouts + 4,
        "{} wake-ups for {timeouts} timeouts",
        ev.wakeups
    );
}
