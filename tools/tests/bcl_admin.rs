//! `bcl-admin detach` and `rejoin` on a job running in three bcl-lab nodes:
//! the detached node's rank is reported down at once on both sides and
//! nothing is exchanged with it, the other two stream to each other
//! throughout (checked exactly once and in order), and after the rejoin
//! everyone reports everyone up and the rejoined rank's new messages
//! arrive. Needs root; fails loudly without it unless
//! BCL_SKIP_PRIVILEGED=1.

use bcl_lab::require_privileges;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ADMIN: &str = env!("CARGO_BIN_EXE_bcl-admin");

/// The job's output lines as they come.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    /// Waits for a line containing `text` (within 60 s) and returns it.
    fn wait_for(&mut self, text: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(text) {
                        return l;
                    }
                }
                Err(_) => panic!("no line with {text:?}; so far:\n{}", self.seen.join("\n")),
            }
        }
    }
}

fn admin(job: &str, args: &[&str]) -> Output {
    Command::new(ADMIN)
        .arg("--job")
        .arg(job)
        .args(args)
        .output()
        .unwrap()
}

fn admin_ok(job: &str, args: &[&str]) -> String {
    let out = admin(job, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bcl-admin {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_detached_node_is_cut_off_at_once_and_comes_back_on_rejoin() {
    if !require_privileges("a_detached_node_is_cut_off_at_once_and_comes_back_on_rejoin") {
        return;
    }
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/lab/switched4.toml");
    let mut job = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .args(["-n", "3", "--timeout", "60", "--lab"])
        .arg(&lab)
        .args(["--nodes", "n1,n2,n3", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "detachable_rank",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("BCL_LAB_PREFIX", format!("t{}-adm", std::process::id()))
        .env("BCL_METHODS", "udp")
        .env("BCL_DETACH_TEST", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    for pipe in [
        Box::new(job.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(job.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
    }
    let mut lines = Lines {
        rx,
        seen: Vec::new(),
    };
    let job_id = lines
        .wait_for("[0] job ")
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    lines.wait_for("[2] ready");

    // A node the job does not have: a clear error naming the ones it has.
    let out = admin(&job_id, &["detach", "n9"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no node \"n9\"") && err.contains("n3 (node 3)"),
        "{err}"
    );

    let t0 = Instant::now();
    let said = admin_ok(&job_id, &["detach", "n3"]);
    assert!(
        said.contains("detached node 3 (n3): told 3 ranks"),
        "{said}"
    );
    for line in ["[0] rank 2 down", "[1] rank 2 down", "[2] isolated"] {
        lines.wait_for(line);
    }
    let detach_seen = t0.elapsed();
    for line in [
        "[0] send to rank 2 refused",
        "[1] send to rank 2 refused",
        "[2] send to rank 0 refused",
    ] {
        let l = lines.wait_for(line);
        assert!(l.contains("detached"), "{l}");
    }
    let status = admin_ok(&job_id, &["status"]);
    assert!(
        status
            .lines()
            .any(|l| l.contains("n3") && l.contains("DETACHED")),
        "{status}"
    );
    assert!(
        status
            .lines()
            .filter(|l| l.contains("attached") && !l.contains("DETACHED"))
            .count()
            == 2,
        "{status}"
    );
    // The other two stream on while node 3 is out.
    std::thread::sleep(Duration::from_millis(500));

    let t1 = Instant::now();
    let said = admin_ok(&job_id, &["rejoin", "3"]);
    assert!(said.contains("rejoined node 3 (3): told 3 ranks"), "{said}");
    for line in ["[0] rank 2 up", "[1] rank 2 up", "[2] back"] {
        lines.wait_for(line);
    }
    let rejoin_seen = t1.elapsed();
    let status = job.wait().unwrap();
    // Drain what is left of the output.
    while let Ok(l) = lines.rx.recv_timeout(Duration::from_secs(2)) {
        lines.seen.push(l);
    }
    let all = lines.seen.join("\n");
    assert!(status.success(), "{all}");
    for r in [0, 1] {
        assert!(
            all.contains(&format!(
                "[{r}] rank 2 detached and rejoined; the stream with the other survivor arrived exactly once and in order"
            )),
            "{all}"
        );
    }
    assert!(
        all.contains("[2] answered by ranks 0 and 1 after the rejoin"),
        "{all}"
    );
    assert!(!all.contains("restarted"), "{all}");
    eprintln!(
        "detach: every rank reported it {:.1} ms after bcl-admin started; rejoin: {:.1} ms",
        detach_seen.as_secs_f64() * 1e3,
        rejoin_seen.as_secs_f64() * 1e3
    );
    for l in lines.seen.iter().filter(|l| l.contains("exactly once")) {
        eprintln!("{l}");
    }
}

/// A rank of the test above (does nothing in a normal test run).
///
/// Ranks 0 and 1 (nodes 1 and 2) stream numbered messages to each other
/// from start to end, checked exactly once and in order, and answer every
/// hello of rank 2. Rank 2 (node 3) says hello to both and waits for the
/// answers ("ready"), waits until the operator's detach has cut it off
/// from both ("isolated"), checks that a send is refused, waits for both
/// to be back after the rejoin ("back"), says hello again, and once both
/// answered says goodbye; ranks 0 and 1 then end their stream.
#[test]
fn detachable_rank() {
    use bcl::cluster::join::{join, JoinOptions};
    use bcl::PeerEvent;
    const DATA: u8 = 0;
    const HELLO: u8 = 1;
    const ANSWER: u8 = 2;
    const BYE: u8 = 3;
    const END: u8 = 4;
    if std::env::var_os("BCL_DETACH_TEST").is_none() || std::env::var_os("BCL_RANK").is_none() {
        return;
    }
    let mut joined = join(JoinOptions::default()).unwrap();
    let me = joined.info.rank;
    let addrs = joined.addrs.clone();
    let ep = &mut joined.endpoint;
    let deadline = Instant::now() + Duration::from_secs(90);
    let msg = |kind: u8, seq: u32| {
        let mut m = vec![kind, me as u8];
        m.extend_from_slice(&seq.to_le_bytes());
        m
    };
    let send = |ep: &mut bcl::Endpoint, to: u32, m: &[u8]| {
        while let Err(e) = ep.send(addrs[to as usize], m) {
            assert!(Instant::now() < deadline, "rank {me}: cannot send: {e}");
            ep.progress().unwrap();
        }
    };
    let step = |ep: &mut bcl::Endpoint| {
        let until = ep.now() + Duration::from_millis(1);
        ep.progress_or_wait(Some(until)).unwrap();
        assert!(Instant::now() < deadline, "rank {me}: out of time");
        while ep.poll_send_event().is_some() {}
    };
    if me == 0 {
        println!("job {}", joined.info.job_id);
    }
    if me == 2 {
        let hello_round = |ep: &mut bcl::Endpoint, round: u32| {
            for to in [0, 1] {
                send(ep, to, &msg(HELLO, round));
            }
            let mut answered = [false; 2];
            while !(answered[0] && answered[1]) {
                step(ep);
                while let Some(d) = ep.poll_delivery() {
                    let m = ep.message(&d).unwrap().to_vec();
                    ep.release(d).unwrap();
                    if m[0] == ANSWER && m[2..6] == round.to_le_bytes() {
                        answered[m[1] as usize] = true;
                    }
                }
            }
        };
        hello_round(ep, 0);
        println!("ready");
        let mut down = [false; 2];
        while !(down[0] && down[1]) {
            step(ep);
            while let Some(ev) = ep.poll_peer_event() {
                if let PeerEvent::Down(a) = ev {
                    down[addrs.iter().position(|x| *x == a).unwrap()] = true;
                }
            }
        }
        println!("isolated from ranks 0 and 1");
        let e = ep.send(addrs[0], b"x").unwrap_err();
        println!("send to rank 0 refused: {e}");
        let mut up = [false; 2];
        while !(up[0] && up[1]) {
            step(ep);
            while let Some(ev) = ep.poll_peer_event() {
                match ev {
                    PeerEvent::Up(a) => up[addrs.iter().position(|x| *x == a).unwrap()] = true,
                    PeerEvent::Restarted(a) => println!("{a} restarted"),
                    PeerEvent::Down(_) => {}
                }
            }
        }
        println!("back");
        hello_round(ep, 1);
        println!("answered by ranks 0 and 1 after the rejoin");
        for to in [0, 1] {
            send(ep, to, &msg(BYE, 0));
        }
        while ep.port().outstanding_sends() > 0 {
            step(ep);
        }
        ep.flush_until(ep.now() + Duration::from_millis(200))
            .unwrap();
        return;
    }
    let other = 1 - me;
    let (mut next_out, mut next_in) = (0u32, 0u32);
    let (mut bye, mut end_sent, mut their_end) = (false, false, None);
    let (mut was_down, mut was_up) = (false, false);
    loop {
        step(ep);
        if !bye && ep.port().outstanding_sends() < 32 {
            send(ep, other, &msg(DATA, next_out));
            next_out += 1;
        }
        if bye && !end_sent {
            send(ep, other, &msg(END, next_out));
            end_sent = true;
        }
        while let Some(ev) = ep.poll_peer_event() {
            match ev {
                PeerEvent::Down(a) if a == addrs[2] => {
                    was_down = true;
                    println!("rank 2 down");
                    let e = ep.send(addrs[2], b"x").unwrap_err();
                    println!("send to rank 2 refused: {e}");
                }
                PeerEvent::Up(a) if a == addrs[2] => {
                    was_up = true;
                    println!("rank 2 up");
                }
                other => println!("unexpected {other:?}"),
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let m = ep.message(&d).unwrap().to_vec();
            ep.release(d).unwrap();
            let seq = u32::from_le_bytes(m[2..6].try_into().unwrap());
            match m[0] {
                DATA => {
                    assert_eq!(seq, next_in, "rank {me}: from rank {other}");
                    next_in += 1;
                }
                HELLO => send(ep, 2, &msg(ANSWER, seq)),
                BYE => bye = true,
                END => their_end = Some(seq),
                k => panic!("rank {me}: unexpected message kind {k}"),
            }
        }
        if end_sent && their_end == Some(next_in) && ep.port().outstanding_sends() == 0 {
            break;
        }
    }
    ep.flush_until(ep.now() + Duration::from_millis(200))
        .unwrap();
    assert!(
        was_down && was_up,
        "rank {me}: down {was_down}, up {was_up}"
    );
    println!(
        "rank 2 detached and rejoined; the stream with the other survivor arrived exactly once and in order ({next_in} messages)"
    );
}
