//! Multi-process tests: producers, senders and owners run in child
//! processes (this test binary re-executed with `BCL_SHM_CHILD` set, so
//! nothing is forked from a multi-threaded test harness), the consumer in
//! the test process.
//!
//! Size knob: `BCL_SHM_STRESS_MSGS` (messages per producer in the stress
//! test, default 500 000 with 4 producers: two million messages).

use bcl_core::{JobKey, ProcessAddr};
use bcl_shm::{
    cleanup_stale, segment_name, Mailbox, MailboxConfig, PullProgress, SendError, ShmError,
    ShmEvent,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The heavy tests spin processes on a 2-CPU machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn job() -> JobKey {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(1);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    JobKey(
        (std::process::id().rotate_left(16))
            ^ t
            ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9),
    )
}

const NODE: u32 = 7;
const CONSUMER: u16 = 1;

fn dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

fn cfg(job: JobKey, port: u16) -> MailboxConfig {
    let mut c = MailboxConfig::new(job, ProcessAddr::new(NODE, port));
    c.geometry.inbox_slots = 256;
    c.geometry.dir_entries = 16;
    c.geometry.chunk_size = 16 * 1024;
    c.geometry.chunks = 4;
    c
}

fn spawn(role: &str, job: JobKey, args: &[String]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("BCL_SHM_CHILD", role)
        .env("BCL_SHM_JOB", job.0.to_string())
        .env("BCL_SHM_ARGS", args.join(" "))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill9(c: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    let _ = c.wait();
}

fn wait_ok(c: &mut Child, what: &str) {
    let st = c.wait().unwrap();
    assert!(st.success(), "{what} exited with {st}");
}

fn seg_path(job: JobKey, port: u16) -> PathBuf {
    dir().join(segment_name(job, ProcessAddr::new(NODE, port)))
}

fn wait_for_file(p: &Path) {
    let t = Instant::now();
    while !p.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The owner marks it ready right after creating it.
    std::thread::sleep(Duration::from_millis(20));
}

fn connect_retry(p: &mut Mailbox, to: ProcessAddr) -> bcl_shm::PeerId {
    let t = Instant::now();
    loop {
        match p.connect(to) {
            Ok(id) => return id,
            Err(ShmError::NoSuchPeer { .. } | ShmError::NotReady { .. })
                if t.elapsed() < Duration::from_secs(20) =>
            {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("connect to {to}: {e}"),
        }
    }
}

/// The payload of message `seq` from producer `p`: a header (p, seq) and a
/// pattern, of a length that varies with `seq`.
fn payload(p: u16, seq: u64, max: usize, buf: &mut Vec<u8>) {
    let len = 10 + (seq as usize * 7 + p as usize) % (max - 10 + 1);
    buf.clear();
    buf.extend_from_slice(&p.to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    let x = (seq as u8).wrapping_mul(13) ^ p as u8;
    buf.extend((0..len - 10).map(|i| x.wrapping_add(i as u8)));
}

fn check_payload(bytes: &[u8], max: usize) -> (u16, u64) {
    assert!(bytes.len() >= 10, "short message");
    let p = u16::from_le_bytes(bytes[0..2].try_into().unwrap());
    let seq = u64::from_le_bytes(bytes[2..10].try_into().unwrap());
    let mut want = Vec::new();
    payload(p, seq, max, &mut want);
    assert!(
        bytes == want.as_slice(),
        "message {seq} of producer {p} is corrupt"
    );
    (p, seq)
}

fn large(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

// ---------------------------------------------------------------- children

/// Entry point of the child processes (a no-op in the parent).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("BCL_SHM_CHILD") else {
        return;
    };
    let job = JobKey(std::env::var("BCL_SHM_JOB").unwrap().parse().unwrap());
    let args: Vec<u64> = std::env::var("BCL_SHM_ARGS")
        .unwrap()
        .split_whitespace()
        .map(|a| a.parse().unwrap())
        .collect();
    match role.as_str() {
        // producer PORT ID COUNT: sends COUNT messages to the consumer.
        "producer" => {
            let (port, id, count) = (args[0] as u16, args[1] as u16, args[2]);
            let mut p = Mailbox::open(cfg(job, port)).unwrap();
            let to = connect_retry(&mut p, ProcessAddr::new(NODE, CONSUMER));
            let max = p.max_inline();
            let mut buf = Vec::new();
            for seq in 0..count {
                payload(id, seq, max, &mut buf);
                loop {
                    match p.try_send(to, &buf) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            if !p.wait(Some(Duration::from_millis(10))) {
                                std::thread::yield_now();
                            }
                        }
                        Err(e) => panic!("producer {id}: {e}"),
                    }
                }
            }
        }
        // abandon PORT ID COUNT: sends COUNT messages, then claims a slot,
        // writes half a message into it and kills itself (killed mid-write).
        "abandon" => {
            let (port, id, count) = (args[0] as u16, args[1] as u16, args[2]);
            let mut p = Mailbox::open(cfg(job, port)).unwrap();
            let to = connect_retry(&mut p, ProcessAddr::new(NODE, CONSUMER));
            let max = p.max_inline();
            let mut buf = Vec::new();
            for seq in 0..count {
                payload(id, seq, max, &mut buf);
                while let Err(e) = p.try_send(to, &buf) {
                    assert!(matches!(e, SendError::Full), "{e}");
                    std::thread::yield_now();
                }
            }
            payload(id, count, max, &mut buf);
            while p.test_abandon_claim(to, &buf[..buf.len() / 2]).is_err() {
                std::thread::yield_now();
            }
            // SAFETY: kill(2) on ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        // owner PORT: opens a mailbox and sleeps until killed.
        "owner" => {
            let _p = Mailbox::open(cfg(job, args[0] as u16)).unwrap();
            std::thread::sleep(Duration::from_secs(600));
        }
        // big PORT COUNT [DIE_AT]: pushes COUNT large messages to the
        // consumer; with DIE_AT, kills itself after pushing DIE_AT bytes of
        // message 0.
        "big" => {
            let (port, count) = (args[0] as u16, args[1]);
            let mut p = Mailbox::open(cfg(job, port)).unwrap();
            let to = connect_retry(&mut p, ProcessAddr::new(NODE, CONSUMER));
            for k in 0..count {
                let m = large(big_len(k), k);
                loop {
                    let pr = p.push_message(to, &m).unwrap();
                    if args.len() > 2 && pr.sent as u64 >= args[2] {
                        // SAFETY: kill(2) on ourselves.
                        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                    }
                    if pr.done {
                        break;
                    }
                    p.wait(Some(Duration::from_millis(10)));
                }
            }
            // Stay until the consumer has everything (it kills us).
            std::thread::sleep(Duration::from_secs(600));
        }
        r => panic!("unknown child role {r}"),
    }
    std::process::exit(0);
}

fn big_len(k: u64) -> usize {
    // Around chunk boundaries (16 KiB chunks, 4 deep) and well beyond.
    const SIZES: [usize; 8] = [
        1,
        16 * 1024 - 1,
        16 * 1024,
        16 * 1024 + 1,
        64 * 1024,
        100_003,
        1 << 20,
        3 << 20,
    ];
    SIZES[k as usize % SIZES.len()]
}

// ---------------------------------------------------------------- tests

#[test]
fn stress_many_producers_exactly_once_in_order() {
    let _g = serial();
    let per: u64 = std::env::var("BCL_SHM_STRESS_MSGS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500_000);
    let producers = 4u16;
    let j = job();
    let mut c = Mailbox::open(cfg(j, CONSUMER)).unwrap();
    let max = c.max_inline();
    let mut kids: Vec<Child> = (0..producers)
        .map(|i| {
            spawn(
                "producer",
                j,
                &[(10 + i).to_string(), i.to_string(), per.to_string()],
            )
        })
        .collect();
    let mut next = vec![0u64; producers as usize];
    let total = per * u64::from(producers);
    let mut got = 0u64;
    let t = Instant::now();
    while got < total {
        let n = c.recv_burst(256, |from, bytes| {
            let (p, seq) = check_payload(bytes, max);
            assert_eq!(from, ProcessAddr::new(NODE, 10 + p), "sender identity");
            assert_eq!(
                seq, next[p as usize],
                "producer {p}: exactly once, in order"
            );
            next[p as usize] += 1;
        });
        got += n as u64;
        if n == 0 {
            c.wait(Some(Duration::from_millis(20)));
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "stuck at {got} of {total}"
        );
        if let Some(ev) = c.poll_event() {
            assert!(matches!(ev, ShmEvent::PeerClosed { .. }), "{ev:?}");
        }
    }
    for k in &mut kids {
        wait_ok(k, "producer");
    }
    assert!(c.recv().is_none());
    eprintln!(
        "{total} messages from {producers} processes in {:?}",
        t.elapsed()
    );
}

#[test]
fn producer_killed_mid_write_is_skipped_and_reported() {
    let _g = serial();
    let j = job();
    let mut c = Mailbox::open(cfg(j, CONSUMER)).unwrap();
    let max = c.max_inline();
    // Two well-behaved producers and one that dies holding a claimed slot,
    // three times over.
    let per = 20_000u64;
    let mut good: Vec<Child> = (0..2u16)
        .map(|i| {
            spawn(
                "producer",
                j,
                &[(10 + i).to_string(), i.to_string(), per.to_string()],
            )
        })
        .collect();
    let mut bad: Vec<Child> = (0..3u16)
        .map(|i| {
            spawn(
                "abandon",
                j,
                &[
                    (20 + i).to_string(),
                    (2 + i).to_string(),
                    (1000 * (i as u64 + 1)).to_string(),
                ],
            )
        })
        .collect();
    let mut next: HashMap<u16, u64> = HashMap::new();
    let mut died = Vec::new();
    let t = Instant::now();
    // Deaths are reported after the dead producer's published messages.
    while next.get(&0) != Some(&per) || next.get(&1) != Some(&per) || died.len() < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "stuck: {next:?}, died {died:?}"
        );
        let n = c.recv_burst(256, |from, bytes| {
            let (p, seq) = check_payload(bytes, max);
            assert_eq!(from.port.0, if p < 2 { 10 + p } else { 20 + p - 2 });
            let e = next.entry(p).or_default();
            assert_eq!(seq, *e, "producer {p}: exactly once, in order");
            *e += 1;
        });
        while let Some(ev) = c.poll_event() {
            match ev {
                ShmEvent::PeerDied { addr, .. } => {
                    let p = addr.port.0 - 20 + 2;
                    let want = 1000 * (u64::from(p) - 1);
                    assert_eq!(
                        next.get(&p),
                        Some(&want),
                        "all of {addr}'s messages came before its death"
                    );
                    died.push(addr.port.0)
                }
                ShmEvent::PeerClosed { .. } => {}
                ev => panic!("{ev:?}"),
            }
        }
        if n == 0 {
            c.wait(Some(Duration::from_millis(5)));
        }
    }
    // The abandoning producers' messages before the fatal claim all arrived.
    for i in 0..3u16 {
        assert_eq!(next.get(&(2 + i)), Some(&(1000 * (u64::from(i) + 1))));
    }
    died.sort();
    assert_eq!(died, vec![20, 21, 22]);
    for k in &mut good {
        wait_ok(k, "producer");
    }
    for k in &mut bad {
        let _ = k.wait();
    }
}

#[test]
fn producers_sigkilled_at_random_do_not_hurt_others() {
    let _g = serial();
    let j = job();
    let mut c = Mailbox::open(cfg(j, CONSUMER)).unwrap();
    let max = c.max_inline();
    let per = 30_000u64;
    let mut good = spawn("producer", j, &["10".into(), "0".into(), per.to_string()]);
    let mut next: HashMap<u16, u64> = HashMap::new();
    let mut deaths = 0;
    let t = Instant::now();
    for round in 0..6u16 {
        // A victim that would send forever, killed after a random while.
        let mut victim = spawn(
            "producer",
            j,
            &[
                (30 + round).to_string(),
                (1 + round).to_string(),
                u64::MAX.to_string(),
            ],
        );
        let until = Instant::now() + Duration::from_millis(30 + (u64::from(round) * 37) % 50);
        while Instant::now() < until {
            c.recv_burst(256, |_, bytes| {
                let (p, seq) = check_payload(bytes, max);
                let e = next.entry(p).or_default();
                assert_eq!(seq, *e, "producer {p}: exactly once, in order");
                *e += 1;
            });
        }
        kill9(&mut victim);
    }
    while next.get(&0) != Some(&per) || deaths < 6 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "stuck: {next:?}, {deaths} deaths"
        );
        let n = c.recv_burst(256, |_, bytes| {
            let (p, seq) = check_payload(bytes, max);
            let e = next.entry(p).or_default();
            assert_eq!(seq, *e, "producer {p}: exactly once, in order");
            *e += 1;
        });
        if n == 0 {
            c.check_peers();
            c.wait(Some(Duration::from_millis(5)));
        }
        while let Some(ev) = c.poll_event() {
            match ev {
                ShmEvent::PeerDied { .. } => deaths += 1,
                ShmEvent::PeerClosed { .. } => {}
                ev => panic!("{ev:?}"),
            }
        }
    }
    wait_ok(&mut good, "producer");
}

#[test]
fn stale_segments_are_removed_live_ones_kept() {
    let _g = serial();
    let j = job();
    let mut dead = spawn("owner", j, &["40".into()]);
    let mut live = spawn("owner", j, &["41".into()]);
    let mut reused = spawn("owner", j, &["42".into()]);
    for p in [40, 41, 42] {
        wait_for_file(&seg_path(j, p));
    }
    kill9(&mut dead);
    // Pid reuse: the owner of 42 is alive, but we make its segment claim a
    // start time that this pid does not have (as if the pid now belonged
    // to another process).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(seg_path(j, 42))
            .unwrap();
        f.write_at(&1u64.to_le_bytes(), 24).unwrap(); // owner_start
    }
    assert!(
        seg_path(j, 40).exists(),
        "a SIGKILLed owner leaves its segment behind"
    );
    let r = cleanup_stale(&dir()).unwrap();
    let removed: Vec<_> = r.removed.iter().map(|(p, _)| p.clone()).collect();
    assert!(removed.contains(&seg_path(j, 40)), "{r:?}");
    assert!(removed.contains(&seg_path(j, 42)), "{r:?}");
    assert!(!seg_path(j, 40).exists());
    assert!(!seg_path(j, 42).exists());
    assert!(!PathBuf::from(format!("{}.bell", seg_path(j, 40).display())).exists());
    assert!(seg_path(j, 41).exists(), "a live owner's segment is kept");
    assert!(r.kept >= 1);
    // Opening a mailbox over a stale segment of the same name also works.
    let mut dead2 = spawn("owner", j, &["43".into()]);
    wait_for_file(&seg_path(j, 43));
    kill9(&mut dead2);
    let mut c = cfg(j, 43);
    c.cleanup_on_open = false;
    let p = Mailbox::open(c).unwrap();
    drop(p);
    assert!(
        !seg_path(j, 43).exists(),
        "a closed mailbox removes its segment"
    );
    kill9(&mut live);
    kill9(&mut reused);
    cleanup_stale(&dir()).unwrap();
    assert!(!seg_path(j, 41).exists());
}

#[test]
fn large_messages_arrive_byte_identical() {
    let _g = serial();
    let j = job();
    let mut c = Mailbox::open(cfg(j, CONSUMER)).unwrap();
    let count = 16u64;
    let mut kid = spawn("big", j, &["50".into(), count.to_string()]);
    let from = ProcessAddr::new(NODE, 50);
    let mut dst = vec![0u8; 4 << 20];
    let t = Instant::now();
    for k in 0..count {
        loop {
            assert!(t.elapsed() < Duration::from_secs(120));
            match c.pull_into(from, &mut dst) {
                Ok(PullProgress::Done { len }) => {
                    assert_eq!(len, big_len(k));
                    assert!(dst[..len] == large(len, k)[..], "message {k} differs");
                    break;
                }
                Ok(_) => {
                    c.wait(Some(Duration::from_millis(10)));
                }
                Err(ShmError::PeerGone { .. }) => {
                    // Not registered yet: the child has not connected.
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    kill9(&mut kid);
}

#[test]
fn sender_death_mid_message_is_an_error_not_a_hang() {
    let _g = serial();
    let j = job();
    let mut c = Mailbox::open(cfg(j, CONSUMER)).unwrap();
    // Seven messages; the child dies after pushing 200 KiB of a message,
    // which first happens in message 6 (1 MiB): messages 0..=5 arrive whole.
    let mut kid = spawn(
        "big",
        j,
        &["51".into(), "7".into(), (200 * 1024).to_string()],
    );
    let from = ProcessAddr::new(NODE, 51);
    let mut dst = vec![0u8; 4 << 20];
    let t = Instant::now();
    let mut done = 0;
    let err = loop {
        assert!(t.elapsed() < Duration::from_secs(60), "hung");
        match c.pull_into(from, &mut dst) {
            Ok(PullProgress::Done { .. }) => done += 1,
            Ok(_) => {
                c.wait(Some(Duration::from_millis(10)));
            }
            Err(ShmError::PeerGone { .. }) if done == 0 && t.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(err, ShmError::PeerGone { .. }), "{err}");
    assert_eq!(done, 6, "the messages before the fatal one arrived");
    let _ = kid.wait();
    let mut saw = false;
    while let Some(ev) = c.poll_event() {
        saw |= matches!(ev, ShmEvent::PeerDied { addr, .. } if addr == from);
    }
    assert!(saw, "death reported");
}

#[test]
fn consumer_death_gives_the_producer_an_error_not_a_hang() {
    let _g = serial();
    let j = job();
    let mut kid = spawn("owner", j, &["60".into()]);
    wait_for_file(&seg_path(j, 60));
    let mut p = Mailbox::open(cfg(j, 61)).unwrap();
    let to = connect_retry(&mut p, ProcessAddr::new(NODE, 60));
    // Fill its inbox and its exchange queue: nobody consumes.
    while p.try_send(to, b"x").is_ok() {}
    let big = vec![7u8; 1 << 20];
    let pr = p.push_message(to, &big).unwrap();
    assert!(!pr.done);
    // A blocked sender sleeps; the receiver's death wakes it (pidfd).
    let killer = {
        let pid = kid.id() as i32;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: kill(2) on our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        })
    };
    let t = Instant::now();
    assert!(p.wait(Some(Duration::from_secs(10))));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "woken by the death, not the timeout"
    );
    killer.join().unwrap();
    let _ = kid.wait();
    let t = Instant::now();
    let err = loop {
        assert!(t.elapsed() < Duration::from_secs(10), "producer hangs");
        match p.push_message(to, &big) {
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, ShmError::PeerGone { .. }), "{err}");
    assert!(matches!(p.try_send(to, b"y"), Err(SendError::PeerGone(_))));
    assert!(matches!(p.poll_event(), Some(ShmEvent::PeerDied { .. })));
    cleanup_stale(&dir()).unwrap();
    assert!(!seg_path(j, 60).exists());
}

#[test]
fn another_users_segment_being_created_is_not_taken_for_garbage() {
    use std::os::unix::fs::MetadataExt;
    // The segment must belong to another user: root only.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        assert_eq!(
            std::env::var("BCL_SKIP_PRIVILEGED").as_deref(),
            Ok("1"),
            "this test must run as root (it gives a file to uid 65534); set BCL_SKIP_PRIVILEGED=1 to skip it"
        );
        eprintln!("SKIP another_users_segment_being_created: not root");
        return;
    }
    let _g = serial();
    let j = job();
    // Another user's creator that has made and sized its file but not yet
    // written the header (it holds that user's directory lock, not ours).
    let theirs = seg_path(j, 50);
    std::fs::write(&theirs, vec![0u8; 4096]).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // The same file of our own user: a creator that crashed, since ours
    // take the lock cleanup_stale holds.
    let ours = seg_path(j, 51);
    std::fs::write(&ours, vec![0u8; 4096]).unwrap();
    let r = cleanup_stale(&dir()).unwrap();
    let kept = theirs.exists();
    let _ = std::fs::remove_file(&theirs);
    assert!(
        kept,
        "another user's segment in creation was removed: {r:?}"
    );
    assert!(
        !ours.exists(),
        "our own crashed creator's file was kept: {r:?}"
    );
    assert!(r.skipped >= 1, "{r:?}");
}
