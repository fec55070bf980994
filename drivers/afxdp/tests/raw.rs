//! Frame-level tests (root): the XDP program in the verifier and on test
//! frames, `RawXsk` on a two-queue veth, the program's lifetime (SIGKILL)
//! and the refusal to replace someone else's program.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bcl_afxdp::bpf;
use bcl_afxdp::{probe, AfXdpConfig, AfXdpError, AfXdpMethod, AttachMode, RawXsk};
use bcl_core::method::Availability;
use bcl_ether::Mac;
use common::*;

#[test]
fn program_passes_the_verifier_and_classifies_frames() {
    if !privileged("program_passes_the_verifier_and_classifies_frames") {
        return;
    }
    let map = bpf::create_xskmap(4, "test_xsks").expect("XSKMAP");
    // Fallback XDP_DROP: a BCL frame finds no socket in the empty map and
    // is dropped; every other frame is passed.
    let insns = bpf::redirect_program(0x88b5, map.as_raw_fd(), bpf::XDP_DROP);
    let prog = bpf::load_xdp_program(&insns, "bcl_test").expect("verifier accepts the program");
    let info = bpf::prog_info(prog.as_raw_fd()).unwrap();
    assert_eq!(info.name, "bcl_test");
    assert!(info.id > 0);
    let a = Mac([2, 0, 0, 0, 0, 1]);
    let b = Mac([2, 0, 0, 0, 0, 2]);
    let run = |f: &[u8]| bpf::test_run(prog.as_raw_fd(), f).expect("test run");
    assert_eq!(
        run(&eth(b, a, 0x88b5, &[0; 60])),
        bpf::XDP_DROP,
        "BCL frame is redirected"
    );
    assert_eq!(
        run(&eth(b, a, 0x88b5, &[])),
        bpf::XDP_DROP,
        "header-only BCL frame"
    );
    assert_eq!(
        run(&eth(Mac::BROADCAST, a, 0x0806, &[0; 28])),
        bpf::XDP_PASS,
        "ARP passes"
    );
    assert_eq!(
        run(&eth(b, a, 0x0800, &[0x45; 40])),
        bpf::XDP_PASS,
        "IPv4 passes"
    );
    assert_eq!(
        run(&eth(b, a, 0x86dd, &[0x60; 40])),
        bpf::XDP_PASS,
        "IPv6 passes"
    );
    assert_eq!(
        run(&eth(b, a, 0xb588, &[0; 40])),
        bpf::XDP_PASS,
        "byte-swapped EtherType passes"
    );
    // Another EtherType configured: 0x88b5 frames now pass.
    let insns = bpf::redirect_program(0x88b6, map.as_raw_fd(), bpf::XDP_DROP);
    let other = bpf::load_xdp_program(&insns, "bcl_test2").unwrap();
    let run = |f: &[u8]| bpf::test_run(other.as_raw_fd(), f).unwrap();
    assert_eq!(run(&eth(b, a, 0x88b5, &[0; 60])), bpf::XDP_PASS);
    assert_eq!(run(&eth(b, a, 0x88b6, &[0; 60])), bpf::XDP_DROP);
    // A broken program is refused with the verifier's log.
    let broken = [bpf::Insn::exit()];
    let e = bpf::load_xdp_program(&broken, "broken").unwrap_err();
    assert!(e.log.contains("R0"), "verifier log: {}", e.log);
}

/// Sends 100 frames from each TX queue of `a` to `b`; `b` binds both RX
/// queues. Returns the frames per receiving queue.
fn two_queue_exchange(mode: AttachMode, tweak: fn(&mut AfXdpConfig)) -> HashMap<u32, usize> {
    let Some(lab) = lab("pair-2q.toml", "two_queue_exchange") else {
        return HashMap::from([(0, 1), (1, 1)]);
    };
    let (if_a, mac_a, _) = iface(&lab, "a");
    let (if_b, mac_b, _) = iface(&lab, "b");
    let sizes = [4usize, 46, 100, 1000, 1486];
    let frame = move |q: u32, i: u32| {
        eth(
            mac_b,
            mac_a,
            0x88b5,
            &pattern(q * 1000 + i, sizes[i as usize % sizes.len()]),
        )
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx = lab.spawn_in("b", move || {
        let mut cfg = AfXdpConfig::new(if_b);
        cfg.force_attach = Some(mode);
        tweak(&mut cfg);
        let mut x = RawXsk::open(&cfg).expect("open b");
        assert_eq!(x.queues(), vec![0, 1]);
        assert_eq!(x.mode_report().attach, mode);
        ready_tx.send(()).unwrap();
        let mut got: Vec<(u32, Vec<u8>)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 200 && Instant::now() < deadline {
            x.recv(64, &mut |q, f| got.push((q, f.to_vec()))).unwrap();
        }
        if got.len() < 200 {
            eprintln!(
                "receiver: kernel stats {:?}, queue stats {:?}",
                x.kernel_stats(),
                x.queue_stats()
            );
        }
        got
    });
    ready_rx.recv().unwrap();
    let tx = lab.spawn_in("a", move || {
        let mut cfg = AfXdpConfig::new(if_a);
        cfg.force_attach = Some(mode);
        cfg.tx_on_all_queues = true;
        tweak(&mut cfg);
        let mut x = RawXsk::open(&cfg).expect("open a");
        for q in 0..2u32 {
            for i in 0..100u32 {
                let mut once = Some(frame(q, i));
                let deadline = Instant::now() + Duration::from_secs(2);
                while once.is_some() && Instant::now() < deadline {
                    x.send_on(q, &mut |buf| {
                        let f = once.take()?;
                        buf[..f.len()].copy_from_slice(&f);
                        Some(f.len())
                    })
                    .unwrap();
                }
            }
        }
        assert!(x.send_on(7, &mut |_| None).is_err(), "no such TX queue");
        // Keep the sockets until the receiver is done.
        std::thread::sleep(Duration::from_millis(300));
    });
    let got = rx.join().unwrap();
    tx.join().unwrap();
    assert_eq!(
        got.len(),
        200,
        "{mode:?}: every frame arrives on some queue"
    );
    let mut per_q: HashMap<u32, usize> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for (q, f) in &got {
        *per_q.entry(*q).or_default() += 1;
        assert!(f.len() >= 18, "runt {f:?}");
        let seq = u32::from_be_bytes([f[14], f[15], f[16], f[17]]);
        let (tq, i) = (seq / 1000, seq % 1000);
        assert_eq!(f, &frame(tq, i), "frame {seq} intact");
        assert!(seen.insert(seq), "frame {seq} once");
    }
    per_q
}

#[test]
fn two_queue_veth_native_receives_on_both_queues() {
    let per_q = two_queue_exchange(AttachMode::Native, |_| {});
    // veth hands a frame sent on TX queue q to the peer's RX queue q.
    assert!(
        per_q.get(&0).copied().unwrap_or(0) > 0 && per_q.get(&1).copied().unwrap_or(0) > 0,
        "frames on both queues: {per_q:?}"
    );
}

#[test]
fn two_queue_veth_generic_receives_everything() {
    // Generic XDP on veth sees these frames on queue 0 only; binding every
    // queue makes that irrelevant. Also covers the other knobs: no
    // need_wakeup (kick after every batch), busy polling, 2 KiB frames,
    // small rings.
    let per_q = two_queue_exchange(AttachMode::Generic, |c| {
        c.need_wakeup = false;
        c.busy_poll = true;
        c.frame_size = 2048;
        // Room for all 200 frames: raw frames have no flow control, and a
        // receiver that is scheduled out while the sender blasts would
        // otherwise see its fill ring run dry (counted as rx_dropped).
        c.rx_ring_size = 256;
        c.tx_ring_size = 64;
    });
    assert_eq!(per_q.values().sum::<usize>(), 200);
}

/// Starts `bcl-afxdp-info IF --hold 30` in `node` and waits for "ready".
fn spawn_holder(lab: &bcl_lab::Lab, node: &str, ifname: &str) -> std::process::Child {
    let mut child = lab
        .command(node, env!("CARGO_BIN_EXE_bcl-afxdp-info"))
        .unwrap()
        .args([ifname, "--hold", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn bcl-afxdp-info");
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let mut text = String::new();
    loop {
        match lines.next() {
            Some(Ok(l)) => {
                text.push_str(&l);
                text.push('\n');
                if l == "ready" {
                    break;
                }
            }
            _ => {
                let _ = child.kill();
                panic!("holder did not get ready:\n{text}");
            }
        }
    }
    assert!(text.contains("descriptor afxdp:"), "{text}");
    child
}

#[test]
fn program_is_gone_after_its_owner_is_sigkilled() {
    let Some(lab) = lab("pair.toml", "program_is_gone_after_its_owner_is_sigkilled") else {
        return;
    };
    let (if_a, _, _) = iface(&lab, "a");
    assert!(!ip_link_json(&lab, "a", &if_a).contains("\"xdp\""));
    let mut child = spawn_holder(&lab, "a", &if_a);
    let shown = ip_link_json(&lab, "a", &if_a);
    assert!(
        shown.contains("\"xdp\"") && shown.contains("bcl_xsk"),
        "program attached while the owner lives: {shown}"
    );
    // `ip netns exec` execs the program, so this pid is the holder.
    // SAFETY: kill(2) on the pid of our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let shown = ip_link_json(&lab, "a", &if_a);
        if !shown.contains("\"xdp\"") {
            break;
        }
        assert!(Instant::now() < deadline, "program still attached: {shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The interface is usable again at once (bind retries while the killed
    // socket is released).
    let h = lab.spawn_in("a", move || {
        let m = AfXdpMethod::open(AfXdpConfig::new(if_a)).expect("reopen after kill");
        m.mode_report().attach
    });
    h.join().unwrap();
}

#[test]
fn a_foreign_xdp_program_is_refused_and_left_alone() {
    let Some(lab) = lab(
        "pair.toml",
        "a_foreign_xdp_program_is_refused_and_left_alone",
    ) else {
        return;
    };
    let (if_a, _, _) = iface(&lab, "a");
    let if2 = if_a.clone();
    let h = lab.spawn_in("a", move || {
        let ifindex = bcl_afxdp::netlink::link_info(&if2).unwrap().ifindex;
        // "Someone else's" program: a pass-all program attached by a link
        // this endpoint did not create.
        let prog = bpf::load_xdp_program(&bpf::pass_program(), "other_prog").unwrap();
        let link = bpf::link_create_xdp(prog.as_raw_fd(), ifindex, bpf::XDP_FLAGS_SKB_MODE)
            .expect("attach the foreign program");
        let e = AfXdpMethod::open(AfXdpConfig::new(&if2))
            .err()
            .expect("refused");
        let msg = e.to_string();
        assert!(matches!(e, AfXdpError::ForeignProgram { .. }), "{msg}");
        assert!(
            msg.contains("\"other_prog\"")
                && msg.contains("does not own")
                && msg.contains("generic"),
            "{msg}"
        );
        match probe(&if2) {
            Availability::NotUsable(r) => assert!(r.contains("other_prog"), "{r}"),
            Availability::Usable => panic!("probe says usable under a foreign program"),
        }
        // Still attached, untouched.
        let info = bcl_afxdp::netlink::link_info(&if2).unwrap();
        assert_eq!(
            info.xdp.map(|x| x.prog_id),
            Some(bpf::prog_info(prog.as_raw_fd()).unwrap().id)
        );
        bpf::link_detach(link.as_raw_fd()).unwrap();
        drop(link);
        // Now it opens; a second endpoint on the same interface in this
        // process is refused with its own message.
        let m = AfXdpMethod::open(AfXdpConfig::new(&if2)).expect("open once the program is gone");
        let e = AfXdpMethod::open(AfXdpConfig::new(&if2))
            .err()
            .expect("second endpoint");
        assert!(
            e.to_string().contains("already runs an afxdp endpoint"),
            "{e}"
        );
        drop(m);
        let m = AfXdpMethod::open(AfXdpConfig::new(&if2)).expect("open again after drop");
        drop(m);
        assert!(
            bcl_afxdp::netlink::link_info(&if2).unwrap().xdp.is_none(),
            "detached on drop"
        );
    });
    h.join().unwrap();
    // Another process's BCL endpoint is foreign too.
    let mut child = spawn_holder(&lab, "a", &if_a);
    let if2 = if_a.clone();
    let r = lab
        .spawn_in("a", move || {
            AfXdpMethod::open(AfXdpConfig::new(&if2))
                .err()
                .map(|e| e.to_string())
        })
        .join()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let msg = r.expect("refused while another process holds the interface");
    assert!(msg.contains("\"bcl_xsk\""), "{msg}");
}

#[test]
fn multi_buffer_frames_cross_a_jumbo_veth_whole() {
    // MTU 65535: frames up to 65549 bytes span up to 17 chunks of 4 KiB
    // (XDP multi-buffer); native XDP accepts the MTU because the program
    // declares fragment support.
    let Some(lab) = lab("pair-jumbo.toml", "multi_buffer_frames_cross_a_jumbo_veth") else {
        return;
    };
    let (if_a, mac_a, _) = iface(&lab, "a");
    let (if_b, mac_b, _) = iface(&lab, "b");
    // One chunk holds 3840 bytes after the kernel's headroom: sizes on both
    // sides of one, two and seventeen chunks.
    let sizes = [
        60usize, 3000, 3840, 3841, 4096, 4097, 7680, 7681, 9000, 40_000, 65_549,
    ];
    let frame = move |i: usize| eth(mac_b, mac_a, 0x88b5, &pattern(i as u32, sizes[i] - 14));
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx = lab.spawn_in("b", move || {
        let mut x = RawXsk::open(&AfXdpConfig::new(if_b)).expect("open b");
        let r = x.mode_report().clone();
        assert_eq!(r.attach, AttachMode::Native, "{r}");
        assert_eq!(r.max_frame, 65_549, "{r}");
        assert!(r.multi_buffer_note.contains("XDP_USE_SG"), "{r}");
        assert_eq!(x.max_rx_frame(), 65_549);
        ready_tx.send(()).unwrap();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < sizes.len() && Instant::now() < deadline {
            x.recv(64, &mut |_, f| got.push(f.to_vec())).unwrap();
        }
        (got, x.queue_stats()[0])
    });
    ready_rx.recv().unwrap();
    let tx = lab.spawn_in("a", move || {
        let mut x = RawXsk::open(&AfXdpConfig::new(if_a)).expect("open a");
        assert_eq!(x.max_tx_frame(), 65_549);
        let too_long = vec![0u8; 65_550];
        assert!(
            x.send(&too_long).is_err(),
            "a frame above the MTU is refused"
        );
        for i in 0..sizes.len() {
            let f = frame(i);
            let deadline = Instant::now() + Duration::from_secs(2);
            while !x.send(&f).unwrap() {
                assert!(Instant::now() < deadline, "no TX buffer for frame {i}");
            }
            // One at a time: the test is about frames arriving whole, not
            // about the receiver keeping up.
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
    });
    let (got, stats) = rx.join().unwrap();
    tx.join().unwrap();
    assert_eq!(got.len(), sizes.len(), "every frame arrives: {stats:?}");
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f.len(), sizes[i], "frame {i}: its length");
        assert!(f == &frame(i), "frame {i} ({} bytes) intact", sizes[i]);
    }
    // Frames above one chunk (3841 bytes and up) were assembled.
    assert_eq!(stats.rx_multi_frames, 8, "{stats:?}");
    assert_eq!(stats.rx_oversized, 0, "{stats:?}");
}
