//! `bcl-run` on this host: a local job over shared memory, the exit status
//! of the first failing rank, output prefixes, signal forwarding, ssh
//! command lines (`--dry-run`), jobs over real ssh (a private sshd on
//! 127.0.0.1, root), and a rank that never shows up.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn bcl_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bcl-run"));
    c.env_remove("BCL_METHODS").env_remove("BCL_CLUSTER");
    c
}

/// Runs `c` to the end, asserts it succeeded (printing both outputs if
/// not), and returns its standard output.
fn succeeds(c: &mut Command) -> String {
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Asserts the job's output reports `n` links, all over shared memory.
fn all_links_shm(stdout: &str, n: usize) {
    let links: Vec<&str> = stdout.lines().filter(|l| l.contains("] link ")).collect();
    assert_eq!(links.len(), n, "{stdout}");
    assert!(
        links.iter().all(|l| l.contains("\"method\":\"shm\"")),
        "{stdout}"
    );
}

#[test]
fn a_local_job_runs_one_binary_over_shared_memory() {
    let stdout = succeeds(bcl_run().args([
        "-n",
        "3",
        "--",
        env!("CARGO_BIN_EXE_bcl-alltoall"),
        "--sizes",
        "8,65536,1048576",
    ]));
    all_links_shm(&stdout, 6);
    for r in 0..3 {
        assert!(
            stdout.contains(&format!("[{r}] done {{\"rank\":{r},\"received\":6,")),
            "{stdout}"
        );
    }
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("] hash "))
        .map(|l| l.split("\"hash\":").nth(1).unwrap())
        .collect();
    assert_eq!(hashes.len(), 3);
    assert!(hashes.iter().all(|h| *h == hashes[0]));
}

#[test]
fn the_job_fails_with_the_first_failing_rank_and_output_is_prefixed() {
    let out = bcl_run()
        .args([
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "if [ \"$BCL_RANK\" = 1 ]; then echo \"out of $BCL_RANK/$BCL_SIZE\"; echo err >&2; exit 7; fi; sleep 20",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    assert!(stdout.contains("[1] out of 1/3"), "{stdout}");
    assert!(stderr.contains("[1] err"), "{stderr}");
    assert!(stderr.contains("rank 1 failed"), "{stderr}");
}

#[test]
fn with_keep_going_the_others_run_to_their_end() {
    let out = bcl_run()
        .args([
            "-n",
            "3",
            "--keep-going",
            "--",
            "sh",
            "-c",
            "if [ \"$BCL_RANK\" = 1 ]; then exit 7; fi; sleep 1; echo \"done $BCL_RANK\"",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    assert!(stdout.contains("[0] done 0"), "{stdout}");
    assert!(stdout.contains("[2] done 2"), "{stdout}");
    assert!(stderr.contains("rank 1 failed"), "{stderr}");
    assert!(stderr.contains("the other ranks go on"), "{stderr}");
}

/// Starts a two-rank job (extra `bcl-run` arguments `place`) whose ranks
/// trap SIGTERM (print got-term, exit 5), sends `bcl-run` SIGTERM once both
/// are ready, and checks both ranks got it and their status came back.
fn sigterm_reaches_both_ranks(place: &[&str]) {
    let mut child = bcl_run()
        .args(place)
        .args([
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 5' TERM; echo ready; while true; do sleep 0.05; done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ready = 0;
    while ready < 2 {
        let l = lines.next().unwrap().unwrap();
        if l.ends_with("ready") {
            ready += 1;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "{rest:?}");
    assert!(rest.iter().any(|l| l == "[0] got-term"), "{rest:?}");
    assert!(rest.iter().any(|l| l == "[1] got-term"), "{rest:?}");
}

#[test]
fn sigterm_is_forwarded_to_every_rank() {
    sigterm_reaches_both_ranks(&["-n", "2"]);
}

#[test]
fn dry_run_prints_the_ssh_command_of_every_rank() {
    let mut c = bcl_run();
    c.args([
        "--hosts",
        "h1,h2",
        "--per-node",
        "2",
        "--dry-run",
        "--rendezvous-host",
        "10.0.0.9",
        "--",
        "/opt/bin/prog",
        "an arg",
    ]);
    let stdout = succeeds(&mut c);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for (r, host, local) in [(0, "h1", 0), (1, "h1", 1), (2, "h2", 0), (3, "h2", 1)] {
        let l = lines[r];
        assert!(
            l.starts_with(&format!("[{r}] ssh -o BatchMode=yes {host} ")),
            "{l}"
        );
        assert!(l.contains(&format!("BCL_RANK={r} ")), "{l}");
        assert!(l.contains("BCL_SIZE=4 "), "{l}");
        assert!(l.contains(&format!("BCL_LOCAL_RANK={local} ")), "{l}");
        assert!(l.contains("BCL_RENDEZVOUS=tcp:10.0.0.9:"), "{l}");
        // The secret goes on the session's standard input, never on a
        // command line.
        assert!(!l.contains("BCL_JOB_SECRET="), "{l}");
        assert!(l.contains(" bcl-rank env "), "{l}");
        assert!(l.contains("/opt/bin/prog"), "{l}");
        assert!(l.contains("'an arg'"), "{l}");
    }
}

#[test]
fn a_rank_that_never_shows_up_is_a_clear_error() {
    let script = format!(
        "if [ \"$BCL_RANK\" = 0 ]; then exec {} --sizes 8; fi; sleep 12",
        env!("CARGO_BIN_EXE_bcl-alltoall")
    );
    let out = bcl_run()
        .args(["-n", "2", "--timeout", "3", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("[0] bcl-alltoall: rendezvous"), "{stderr}");
    assert!(stderr.contains("1 never showed up within 3s"), "{stderr}");
}

#[test]
fn a_program_started_without_bcl_run_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-alltoall"))
        .env_remove("BCL_RANK")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("start the program with bcl-run"),
        "{stderr}"
    );
}

#[test]
fn pingpong_and_bw_run_rank_0_against_rank_1_under_bcl_run() {
    let dir = tempfile::tempdir().unwrap();
    let pj = dir.path().join("pp.json");
    let stdout = succeeds(
        bcl_run()
            .args([
                "-n",
                "3",
                "--",
                env!("CARGO_BIN_EXE_bcl-pingpong"),
                "--sizes",
                "8,1024",
            ])
            .args([
                "--iters",
                "200",
                "--warmup",
                "20",
                "--json",
                pj.to_str().unwrap(),
            ]),
    );
    assert!(
        stdout.contains("[0] # job: rank 0 <-> rank 1 over shm"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pj).unwrap()).unwrap();
    assert_eq!(v["tool"], "bcl-pingpong");
    assert_eq!(v["method"], "shm");
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    assert_eq!(v["results"][1]["iters"], 200);

    let bj = dir.path().join("bw.json");
    succeeds(
        bcl_run()
            .args([
                "-n",
                "2",
                "--",
                env!("CARGO_BIN_EXE_bcl-bw"),
                "--sizes",
                "1024,64K",
            ])
            .args(["--iters", "10", "--verify", "--json", bj.to_str().unwrap()]),
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bj).unwrap()).unwrap();
    assert_eq!(v["tool"], "bcl-bw");
    assert_eq!(v["method"], "shm");
    assert_eq!(v["role"], "sender");
    assert_eq!(v["verify"]["lost"], 0);
    assert_eq!(v["verify"]["corrupted"], 0);
    // Warm-up windows are delivered (and verified) too.
    let timed: u64 = (0..2)
        .map(|i| v["results"][i]["messages"].as_u64().unwrap())
        .sum();
    assert!(v["verify"]["delivered"].as_u64().unwrap() >= timed);
    assert_eq!(v["verify"]["out_of_order"], 0);
}

#[test]
fn a_static_job_file_needs_no_rendezvous() {
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            std::net::UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.toml");
    let mut text = String::new();
    for (r, p) in ports.iter().enumerate() {
        text.push_str(&format!(
            "[[process]]\nrank = {r}\naddr = \"{}.0\"\nnode = \"n{r}\"\ndescriptors = [\"udp:127.0.0.1:{p}\"]\nfabric = \"lo\"\n",
            r + 1
        ));
    }
    std::fs::write(&file, text).unwrap();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_bcl-alltoall"))
                .args(["--sizes", "8,65536", "--timeout", "30"])
                .env("BCL_RANK", r.to_string())
                .env("BCL_SIZE", "2")
                .env("BCL_JOB_ID", "static-test")
                .env("BCL_STATIC", &file)
                .env_remove("BCL_RENDEZVOUS")
                .env_remove("BCL_CLUSTER")
                .env_remove("BCL_METHODS")
                .env_remove("BCL_PROGRAM_HASH")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, c) in ranks.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "rank {r}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("\"method\":\"udp\""), "{stdout}");
        assert!(
            stdout.contains(&format!("done {{\"rank\":{r},\"received\":2,")),
            "{stdout}"
        );
    }
    // A static file cannot fix the address of other methods.
    std::fs::write(&file, "[[process]]\nrank = 0\naddr = \"1.0\"\nnode = \"n\"\ndescriptors = [\"packet:02:00:00:00:00:01/2\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-alltoall"))
        .env("BCL_RANK", "0")
        .env("BCL_SIZE", "1")
        .env("BCL_STATIC", &file)
        .env_remove("BCL_CLUSTER")
        .env_remove("BCL_METHODS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only udp descriptors"));
}

#[test]
fn bcl_info_job_prints_a_running_jobs_links() {
    let stdout =
        succeeds(bcl_run().args(["-n", "3", "--", env!("CARGO_BIN_EXE_bcl-info"), "--job"]));
    all_links_shm(&stdout, 6);
}

/// A private sshd on 127.0.0.1 that accepts one key (for the ssh-mode
/// tests; needs root and openssh-server, which `scripts/test` installs).
struct Sshd {
    child: std::process::Child,
    /// The `--ssh-command` that reaches it.
    ssh_command: String,
    _dir: tempfile::TempDir,
}

impl Sshd {
    /// bcl-run options placing two ranks on two "hosts" (both this machine)
    /// reached through this sshd.
    fn two_hosts(&self) -> [&str; 6] {
        [
            "--hosts",
            "127.0.0.1,localhost",
            "--rendezvous-host",
            "127.0.0.1",
            "--ssh-command",
            &self.ssh_command,
        ]
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sshd(test: &str) -> Option<Sshd> {
    if !bcl_lab::require_privileges(test) {
        return None;
    }
    let daemon = std::path::Path::new("/usr/sbin/sshd");
    assert!(
        daemon.exists(),
        "{test} needs /usr/sbin/sshd (package openssh-server; scripts/test installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    for key in ["host", "user"] {
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(p(key))
            .status()
            .expect("ssh-keygen (openssh-client)");
        assert!(st.success());
    }
    std::fs::copy(p("user.pub"), p("authorized_keys")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
         PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
         KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {}\n\
         PrintMotd no\n",
        p("host").display(),
        p("authorized_keys").display(),
        p("sshd.pid").display()
    );
    std::fs::write(p("sshd_config"), config).unwrap();
    // Privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let child = Command::new(daemon)
        .args(["-D", "-e", "-f"])
        .arg(p("sshd_config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "sshd did not listen on 127.0.0.1:{port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let ssh_command = format!(
        "ssh -p {port} -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        p("user").display()
    );
    Some(Sshd {
        child,
        ssh_command,
        _dir: dir,
    })
}

#[test]
fn a_job_runs_over_real_ssh_and_the_secret_stays_off_command_lines() {
    let Some(d) = sshd("a_job_runs_over_real_ssh") else {
        return;
    };
    // Two "hosts" (both this machine, through sshd): a verified all-to-all.
    let mut c = bcl_run();
    c.args(d.two_hosts()).args([
        "--",
        env!("CARGO_BIN_EXE_bcl-alltoall"),
        "--sizes",
        "8,65536",
    ]);
    let stdout = succeeds(&mut c);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("[{r}] done {{\"rank\":{r},\"received\":2,")),
            "{stdout}"
        );
    }
    // The ranks get the secret, and no process on the host has it on its
    // command line (python reads it from its environment).
    let probe = "import os, glob\n\
        s = os.environ['BCL_JOB_SECRET'].encode()\n\
        seen = 0\n\
        for f in glob.glob('/proc/[0-9]*/cmdline'):\n\
        \x20   try:\n\
        \x20       seen += s in open(f, 'rb').read()\n\
        \x20   except OSError:\n\
        \x20       pass\n\
        print('secret', len(s), 'on command lines', seen)\n";
    let mut c = bcl_run();
    c.args(d.two_hosts())
        .args(["--timeout", "5", "--", "python3", "-c", probe]);
    let stdout = succeeds(&mut c);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("secret")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for l in lines {
        assert!(l.ends_with("on command lines 0"), "{l}");
        assert!(!l.contains("secret 0 "), "the secret arrived: {l}");
    }
}

#[test]
fn sigterm_reaches_ranks_started_over_ssh() {
    let Some(d) = sshd("sigterm_reaches_ranks_started_over_ssh") else {
        return;
    };
    // The ranks' own exit status comes back through ssh.
    sigterm_reaches_both_ranks(&d.two_hosts());
}

/// A rank killed outright leaves its shared-memory segment and doorbell in
/// /dev/shm (nothing of it runs to remove them); bcl-run removes what the
/// job left once every rank has ended, and says what. Each rank runs under
/// `sh`, which exits 0 whatever happens to it, so the job ends by itself.
/// Held by the tests whose processes start and die around the same time:
/// every shared-memory endpoint that starts removes the segments of dead
/// processes it finds in /dev/shm, which would take away what the
/// leftovers test expects `bcl-run` to find.
static SHM_LEFTOVERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn what_a_killed_rank_leaves_in_dev_shm_is_removed_at_the_end() {
    let _alone = SHM_LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner());
    let script = r#""$0" --ops barrier --iters 1000000000 --warmup 0 & p=$!; if [ "$BCL_RANK" = 1 ]; then sleep 2; kill -9 $p; fi; wait; exit 0"#;
    let out = bcl_run()
        .args(["-n", "2", "--timeout", "60", "--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_bcl-coll"))
        .env_remove("BCL_COLL_BOARD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let removed: Vec<&str> = stderr
        .lines()
        .find_map(|l| l.strip_prefix("bcl-run: removed what the job left in /dev/shm: "))
        .unwrap_or_else(|| panic!("nothing removed:\n{stderr}"))
        .split(", ")
        .collect();
    assert!(
        removed.iter().any(|f| f.ends_with(".bell")),
        "no doorbell among {removed:?}"
    );
    assert!(
        removed
            .iter()
            .any(|f| f.starts_with("bcl-") && f.matches('-').count() == 3 && !f.contains('.')),
        "no segment among {removed:?}"
    );
    for f in &removed {
        assert!(
            !std::path::Path::new("/dev/shm").join(f).exists(),
            "{f} is still there"
        );
    }
}

#[test]
fn with_restart_a_killed_rank_rejoins_and_the_others_stream_on() {
    let _alone = SHM_LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner());
    // Over shared memory (local ranks' default), then over udp.
    for methods in [None, Some("udp")] {
        restarted_three_times(methods);
    }
}

fn restarted_three_times(methods: Option<&str>) {
    let mut c = bcl_run();
    if let Some(m) = methods {
        c.env("BCL_METHODS", m);
    }
    let out = c
        .args(["-n", "3", "--restart", "3", "--timeout", "60", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "restartable_rank",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("BCL_RESTART_TEST", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{methods:?}: {stdout}\n{stderr}");
    for k in 1..=3 {
        assert!(
            stderr.contains(&format!(
                "rank 1 failed (signal: 9 (SIGKILL)); restarting it ({k} of 3)"
            )),
            "{stderr}"
        );
    }
    assert!(
        stdout.contains("[1] incarnation 3: back with every rank"),
        "{stdout}"
    );
    for r in [0, 2] {
        assert!(
            stdout.contains(&format!("[{r}] rank 1 restarted 3 times; the stream with the other survivor arrived exactly once and in order")),
            "{stdout}\n{stderr}"
        );
    }
}

/// A rank of the restart test above (does nothing in a normal test run).
///
/// Rank 1 says hello to ranks 0 and 2 and waits for both answers; in its
/// first three incarnations it then kills itself (SIGKILL), in the fourth
/// it says goodbye and ends. Ranks 0 and 2 stream numbered messages to
/// each other all along (checked: exactly once, in order), answer every
/// hello, count rank 1's restarts (`PeerEvent::Restarted`), and after the
/// goodbye finish their stream and end.
#[test]
fn restartable_rank() {
    use bcl::cluster::join::{join, JoinOptions};
    use bcl::PeerEvent;
    use std::time::{Duration, Instant};
    const DATA: u8 = 0;
    const HELLO: u8 = 1;
    const ANSWER: u8 = 2;
    const BYE: u8 = 3;
    const END: u8 = 4;
    if std::env::var_os("BCL_RESTART_TEST").is_none() || std::env::var_os("BCL_RANK").is_none() {
        return;
    }
    let restart: u8 = std::env::var("BCL_RESTART").map_or(0, |v| v.parse().unwrap());
    let mut joined = join(JoinOptions::default()).unwrap();
    let me = joined.info.rank;
    let addrs = joined.addrs.clone();
    let ep = &mut joined.endpoint;
    let deadline = Instant::now() + Duration::from_secs(60);
    let msg = |kind: u8, seq: u32| {
        let mut m = vec![kind, me as u8, restart];
        m.extend_from_slice(&seq.to_le_bytes());
        m
    };
    let send = |ep: &mut bcl::Endpoint, to: u32, m: &[u8]| {
        while ep.send(addrs[to as usize], m).is_err() {
            assert!(Instant::now() < deadline, "rank {me}: cannot send");
            ep.progress().unwrap();
        }
    };
    // Until our sends are acknowledged, then a moment for our own last
    // acknowledgements to go out (liveness keeps a timer, so "until no
    // timer is left" would never come).
    let flush = |ep: &mut bcl::Endpoint| {
        while ep.port().outstanding_sends() > 0 {
            assert!(
                Instant::now() < deadline,
                "rank {me}: sends never completed"
            );
            let until = ep.now() + Duration::from_millis(1);
            ep.progress_or_wait(Some(until)).unwrap();
        }
        ep.flush_until(ep.now() + Duration::from_millis(200))
            .unwrap();
    };
    let step = |ep: &mut bcl::Endpoint| {
        let until = ep.now() + Duration::from_millis(1);
        ep.progress_or_wait(Some(until)).unwrap();
        assert!(Instant::now() < deadline, "rank {me}: out of time");
        while ep.poll_send_event().is_some() {}
    };
    if me == 1 {
        for to in [0, 2] {
            send(ep, to, &msg(HELLO, 0));
        }
        let mut answered = [false; 3];
        while !(answered[0] && answered[2]) {
            step(ep);
            while let Some(d) = ep.poll_delivery() {
                let m = ep.message(&d).unwrap().to_vec();
                ep.release(d).unwrap();
                if m[0] == ANSWER && m[2] == restart {
                    answered[m[1] as usize] = true;
                }
            }
        }
        if restart < 3 {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        for to in [0, 2] {
            send(ep, to, &msg(BYE, 0));
        }
        flush(ep);
        println!("incarnation {restart}: back with every rank");
        return;
    }
    let other = 2 - me;
    let (mut next_out, mut next_in) = (0u32, 0u32);
    let (mut bye, mut their_end, mut restarts) = (false, None, 0);
    loop {
        step(ep);
        if !bye && ep.port().outstanding_sends() < 32 {
            send(ep, other, &msg(DATA, next_out));
            next_out += 1;
        }
        while let Some(ev) = ep.poll_peer_event() {
            if ev == PeerEvent::Restarted(addrs[1]) {
                restarts += 1;
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let m = ep.message(&d).unwrap().to_vec();
            ep.release(d).unwrap();
            let seq = u32::from_le_bytes(m[3..7].try_into().unwrap());
            match m[0] {
                DATA => {
                    assert_eq!(seq, next_in, "rank {me}: from rank {other}");
                    next_in += 1;
                }
                HELLO => send(ep, 1, &[ANSWER, me as u8, m[2], 0, 0, 0, 0]),
                BYE => {
                    bye = true;
                    send(ep, other, &msg(END, next_out));
                }
                END => their_end = Some(seq),
                k => panic!("rank {me}: unknown message kind {k}"),
            }
        }
        if bye && their_end == Some(next_in) {
            break;
        }
    }
    flush(ep);
    println!(
        "rank 1 restarted {restarts} times; the stream with the other survivor arrived exactly once and in order ({next_in} messages)"
    );
}
