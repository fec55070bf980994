//! Single-process tests of `Mailbox`: two or three mailboxes in one process
//! talking through their segments.

use bcl_core::{JobKey, ProcessAddr};
use bcl_shm::{Mailbox, MailboxConfig, PullProgress, SendError, ShmError, ShmEvent};
use std::time::{Duration, Instant};

fn job() -> JobKey {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    JobKey(
        (std::process::id() << 12)
            ^ t
            ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9),
    )
}

fn mailbox(job: JobKey, node: u32, p: u16) -> Mailbox {
    let mut cfg = MailboxConfig::new(job, ProcessAddr::new(node, p));
    cfg.geometry.inbox_slots = 16;
    cfg.geometry.dir_entries = 4;
    cfg.geometry.chunk_size = 4096;
    cfg.geometry.chunks = 4;
    Mailbox::open(cfg).unwrap()
}

#[test]
fn small_messages_round_trip_in_order() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let mut b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    assert_eq!(a.connect(b.local()).unwrap(), to_b, "connect is idempotent");
    for i in 0..10u32 {
        a.try_send(to_b, &i.to_le_bytes()).unwrap();
    }
    let mut got = Vec::new();
    b.recv_burst(100, |from, bytes| {
        assert_eq!(from, ProcessAddr::new(1, 1));
        got.push(u32::from_le_bytes(bytes.try_into().unwrap()));
    });
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert!(b.recv().is_none());
}

#[test]
fn full_inbox_is_back_pressure_not_loss() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let mut b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    let mut sent = 0u32;
    loop {
        match a.try_send(to_b, &sent.to_le_bytes()) {
            Ok(()) => sent += 1,
            Err(SendError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(sent, 16);
    // Consumed slots go back to the producers in batches of a quarter inbox
    // (or when the consumer finds the inbox empty).
    for k in 0..4u32 {
        let m = b.recv().unwrap();
        assert_eq!(m.bytes(), &k.to_le_bytes());
        m.release();
    }
    for _ in 0..4 {
        a.try_send(to_b, &sent.to_le_bytes()).unwrap();
        sent += 1;
    }
    assert!(matches!(a.try_send(to_b, b"full"), Err(SendError::Full)));
    let mut next = 4u32;
    while let Some(m) = b.recv() {
        assert_eq!(m.bytes(), &next.to_le_bytes());
        next += 1;
        m.release();
    }
    assert_eq!(next, sent);
    // Found empty: everything announced, a whole inbox fits again.
    for _ in 0..16 {
        a.try_send(to_b, b"again").unwrap();
    }
}

#[test]
fn unreleased_message_stays_at_head() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let mut b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    a.try_send(to_b, b"hello").unwrap();
    {
        let m = b.recv().unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(m.copy_to(&mut buf), 5);
        assert_eq!(&buf[..5], b"hello");
    }
    let m = b.recv().unwrap();
    assert_eq!(m.bytes(), b"hello");
    m.release();
    assert!(b.recv().is_none());
}

#[test]
fn too_large_for_a_slot_is_refused() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    let big = vec![0u8; a.max_inline() + 1];
    assert!(matches!(
        a.try_send(to_b, &big),
        Err(SendError::TooLarge { .. })
    ));
    a.try_send(to_b, &big[..a.max_inline()]).unwrap();
}

#[test]
fn large_message_through_exchange_queue() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let mut b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    let msg: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut dst = vec![0u8; msg.len()];
    let mut done_push = false;
    let mut done_pull = false;
    let mut rounds = 0;
    while !(done_push && done_pull) {
        rounds += 1;
        if !done_push {
            done_push = a.push_message(to_b, &msg).unwrap().done;
        }
        if !done_pull {
            match b.pull_into(a.local(), &mut dst).unwrap() {
                PullProgress::Done { len } => {
                    assert_eq!(len, msg.len());
                    done_pull = true;
                }
                PullProgress::Partial { received, total } => {
                    assert!(received < total);
                    assert_eq!(total, msg.len());
                }
                PullProgress::Empty => {}
            }
        }
    }
    assert!(rounds >= 100_000 / (4 * 4096));
    assert!(dst == msg);
    // Empty message, then a too-small buffer.
    assert!(a.push_message(to_b, &[]).unwrap().done);
    assert_eq!(
        b.pull_into(a.local(), &mut dst).unwrap(),
        PullProgress::Done { len: 0 }
    );
    assert!(!a.push_message(to_b, &msg[..20000]).unwrap().done);
    assert_eq!(b.next_message_len(a.local()).unwrap(), Some(20000));
    let mut small = [0u8; 10];
    assert!(matches!(
        b.pull_into(a.local(), &mut small),
        Err(ShmError::Exchange(bcl_shm::ExError::TooSmall {
            needed: 20000,
            ..
        }))
    ));
}

#[test]
fn connect_errors_are_clear() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let e = a.connect(ProcessAddr::new(1, 9)).unwrap_err();
    assert!(matches!(e, ShmError::NoSuchPeer { .. }), "{e}");
    // Address in use.
    let mut cfg = MailboxConfig::new(j, ProcessAddr::new(1, 1));
    cfg.geometry.inbox_slots = 16;
    let e = Mailbox::open(cfg).unwrap_err();
    assert!(matches!(e, ShmError::AddressInUse { .. }), "{e}");
    // Directory full: 4 entries.
    let mut b = mailbox(j, 1, 2);
    let mut others: Vec<Mailbox> = (3..8).map(|p| mailbox(j, 1, p)).collect();
    for (k, o) in others.iter_mut().enumerate() {
        let r = o.connect(b.local());
        if k < 4 {
            r.unwrap();
        } else {
            assert!(matches!(r, Err(ShmError::DirectoryFull { .. })));
        }
    }
    // A sender that leaves frees its entry once the receiver notices.
    others.truncate(1);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        b.check_peers();
        if others[0].connect(ProcessAddr::new(1, 2)).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline);
    }
    let mut closed = 0;
    while let Some(ev) = b.poll_event() {
        assert!(matches!(ev, ShmEvent::PeerClosed { .. }), "{ev:?}");
        closed += 1;
    }
    assert_eq!(closed, 3, "the three senders that connected and left");
    drop(a);
}

#[test]
fn closed_receiver_is_reported_to_sender() {
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    a.try_send(to_b, b"x").unwrap();
    drop(b);
    a.check_peers();
    assert!(matches!(
        a.try_send(to_b, b"y"),
        Err(SendError::PeerGone(_))
    ));
    assert_eq!(
        a.poll_event(),
        Some(ShmEvent::PeerClosed {
            addr: ProcessAddr::new(1, 2)
        })
    );
    // A new incarnation can be reached under the same id.
    let mut b2 = mailbox(j, 1, 2);
    assert_eq!(a.connect(b2.local()).unwrap(), to_b);
    a.try_send(to_b, b"z").unwrap();
    assert_eq!(b2.recv().unwrap().bytes(), b"z");
}

#[test]
fn wait_sleeps_and_wakes() {
    let j = job();
    let mut b = mailbox(j, 1, 2);
    let t = Instant::now();
    assert!(b.wait(Some(Duration::from_millis(50))));
    assert!(t.elapsed() >= Duration::from_millis(45));
    let addr = b.local();
    let h = std::thread::spawn(move || {
        let mut a = mailbox(j, 1, 1);
        let to_b = a.connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        a.try_send(to_b, b"wake").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let t = Instant::now();
    let mut got = false;
    while t.elapsed() < Duration::from_secs(5) && !got {
        b.wait(Some(Duration::from_secs(5)));
        if let Some(m) = b.recv() {
            assert_eq!(m.bytes(), b"wake");
            m.release();
            got = true;
        }
    }
    assert!(got);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "woken by the doorbell, not the timeout"
    );
    h.join().unwrap();
}

/// A buggy peer may scribble anywhere in our segment: nothing panics and
/// no call hangs; at worst messages are dropped and reported as corrupt.
#[test]
fn corrupted_segment_never_panics_or_hangs() {
    use std::os::unix::fs::FileExt;
    let j = job();
    let mut a = mailbox(j, 1, 1);
    let mut b = mailbox(j, 1, 2);
    let to_b = a.connect(b.local()).unwrap();
    let to_a = b.connect(a.local()).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(b.segment_path())
        .unwrap();
    let len = f.metadata().unwrap().len();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; 1 << 16];
    let (mut received, mut corrupt) = (0, 0);
    let t = Instant::now();
    for round in 0..3000u32 {
        // Normal traffic both ways.
        let _ = a.try_send(to_b, &round.to_le_bytes());
        let _ = a.push_message(to_b, &buf[..5000 + (round as usize % 7) * 3000]);
        let _ = b.try_send(to_a, b"back");
        // Garbage: a few words anywhere after the header page, often in the
        // inbox's first page and the first directory entry.
        for _ in 0..usize::from(round % 8 == 0) * 4 {
            let r = rnd();
            let off = match r % 3 {
                0 => 4096 + (rnd() % 8192),
                1 => 4096 + (rnd() % (len - 4096)),
                _ => len.min(8192 + 16 * 256 + 8192) - 8 - (rnd() % 8192),
            } & !7;
            let val = match rnd() % 4 {
                0 => rnd(),
                1 => rnd() % 64,
                2 => u64::MAX,
                _ => 0,
            };
            f.write_at(&val.to_le_bytes(), off).unwrap();
        }
        for _ in 0..4 {
            if let Some(m) = b.recv() {
                received += m.bytes().len().min(1);
                m.release();
            }
        }
        let _ = b.pull_into(a.local(), &mut buf);
        let _ = b.next_message_len(a.local());
        let _ = b.exchange_ready();
        if b.prepare_wait() {
            // Not sleeping: this only checks that preparing is safe.
        }
        b.finish_wait();
        b.check_peers();
        while let Some(ev) = b.poll_event() {
            corrupt += usize::from(matches!(ev, ShmEvent::Corrupt { .. }));
        }
        while a.recv().is_some_and(|m| {
            m.release();
            true
        }) {}
    }
    assert!(t.elapsed() < Duration::from_secs(60));
    eprintln!("{received} messages received, {corrupt} corruptions reported");
    assert!(received > 0 && corrupt > 0, "the test exercised both paths");
}

/// The engine keeps methods in `Box<dyn Method>`, which requires `Send`.
#[test]
fn port_is_send() {
    fn send<T: Send>() {}
    send::<Mailbox>();
}
