//! `AfXdpMethod` between two network namespaces (root): verified frames
//! both ways, interoperation with an AF_PACKET peer, foreign traffic while
//! attached, blocking mode, busy polling, mode fallback and probing.

mod common;

use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bcl_afxdp::{probe, AfXdpConfig, AfXdpMethod, AttachMode, BindMode, RawXsk};
use bcl_core::method::{Availability, Descriptor, LinkId, Method, TxFrame};
use common::*;

/// Sends every frame on `link`, retrying while TX buffers are short.
fn send_all(m: &mut AfXdpMethod, link: LinkId, frames: &[Vec<u8>]) {
    let mut next = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while next < frames.len() {
        assert!(
            Instant::now() < deadline,
            "sent only {next} of {}",
            frames.len()
        );
        m.tx_burst(&mut |buf: &mut [u8]| {
            let f = frames.get(next)?;
            buf[..f.len()].copy_from_slice(f);
            next += 1;
            Some(TxFrame { link, len: f.len() })
        })
        .unwrap();
    }
}

/// Receives `n` frames (or what came within `timeout`).
fn recv_n(m: &mut AfXdpMethod, n: usize, timeout: Duration) -> Vec<(LinkId, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + timeout;
    while got.len() < n && Instant::now() < deadline {
        m.rx_burst(64, &mut |l, b| got.push((l, b.to_vec())))
            .unwrap();
    }
    got
}

fn frames(count: u32, mtu: usize) -> Vec<Vec<u8>> {
    let sizes = [1usize, 2, 13, 14, 46, 56, 57, 100, 1000, mtu - 1, mtu];
    (0..count)
        .map(|i| pattern(i, sizes[i as usize % sizes.len()]))
        .collect()
}

/// A veth made the default way allocates more RX queues than it activates
/// (here 2 and 1): the method binds only the active ones, says which it
/// skipped and why, and frames flow both ways.
#[test]
fn on_a_default_veth_only_the_active_queues_are_bound() {
    let Some(lab) = lab("pair-default.toml", "only_the_active_queues_are_bound") else {
        return;
    };
    let (if_a, _, _) = iface(&lab, "a");
    let (if_b, _, _) = iface(&lab, "b");
    let (d_tx, d_rx) = mpsc::channel::<Descriptor>();
    let b = lab.spawn_in("b", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_b)).expect("open b on a default veth");
        d_tx.send(m.descriptor()).unwrap();
        let got = recv_n(&mut m, 50, Duration::from_secs(5));
        assert_eq!(got.len(), 50, "b received everything");
        let from_a = got[0].0;
        let back: Vec<Vec<u8>> = got.into_iter().map(|(_, b)| b).collect();
        send_all(&mut m, from_a, &back);
        std::thread::sleep(Duration::from_millis(300));
        m.mode_report().clone()
    });
    let d_b = d_rx.recv().unwrap();
    let a = lab.spawn_in("a", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(&if_a)).expect("open a on a default veth");
        let to_b = m.open_link(&d_b).unwrap();
        let out = frames(50, m.caps().mtu);
        send_all(&mut m, to_b, &out);
        let got = recv_n(&mut m, out.len(), Duration::from_secs(5));
        let got: Vec<Vec<u8>> = got.into_iter().map(|(_, b)| b).collect();
        assert_eq!(got, out, "a received its frames back, intact and in order");
        m.mode_report().clone()
    });
    for report in [a.join().expect("a"), b.join().expect("b")] {
        let text = report.to_string();
        assert!(
            report.if_rx_queues > 1,
            "a default veth allocates several RX queues: {text}"
        );
        assert_eq!(report.active_rx_queues, 1, "{text}");
        assert_eq!(
            report.queues.len(),
            1,
            "only the active queue is bound: {text}"
        );
        assert_eq!(report.queues[0].queue, 0, "{text}");
        assert!(
            report.queues_note.contains("not bound: 1")
                && report.queues_note.contains("allocated but not active"),
            "the report says which queues were skipped and why: {text}"
        );
    }
}

#[test]
fn frames_of_varied_sizes_go_both_ways_on_the_right_links() {
    let Some(lab) = lab("pair.toml", "frames_of_varied_sizes_go_both_ways") else {
        return;
    };
    let (if_a, mac_a, _) = iface(&lab, "a");
    let (if_b, mac_b, _) = iface(&lab, "b");
    let (d_tx, d_rx) = mpsc::channel::<Descriptor>();
    let (a_tx, a_rx) = mpsc::channel::<Descriptor>();
    let b = lab.spawn_in("b", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_b)).expect("open b");
        assert_eq!(m.mac(), mac_b);
        d_tx.send(m.descriptor()).unwrap();
        let mtu = m.caps().mtu;
        let want = frames(300, mtu);
        let got = recv_n(&mut m, want.len(), Duration::from_secs(5));
        assert_eq!(got.len(), want.len(), "b received everything");
        let from_a = got[0].0;
        assert_eq!(m.link_mac(from_a), Some(mac_a), "b made a link for a's MAC");
        for ((l, bytes), f) in got.iter().zip(&want) {
            assert_eq!(*l, from_a);
            assert_eq!(bytes, f, "frame intact and in order");
        }
        // Answer on the link learned from the traffic; opening a's
        // descriptor gives the same link.
        let d_a = a_rx.recv().unwrap();
        assert_eq!(m.open_link(&d_a).unwrap(), from_a);
        let back: Vec<Vec<u8>> = want.iter().rev().cloned().collect();
        send_all(&mut m, from_a, &back);
        std::thread::sleep(Duration::from_millis(300));
        m.stats()
    });
    let d_b = d_rx.recv().unwrap();
    let a = lab.spawn_in("a", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(&if_a)).expect("open a");
        let caps = m.caps();
        assert_eq!(caps.mtu, 1500, "interface MTU");
        assert!(!caps.integrity && !caps.reliable);
        let d = m.descriptor();
        assert_eq!(d.method, "afxdp");
        assert_eq!(d.address, format!("{mac_a}/{}", m.mode_report().ifindex));
        assert_eq!(m.mode_report().queues.len(), 1);
        assert_eq!(
            m.mode_report().queues[0].bind,
            BindMode::Copy,
            "veth has no zero-copy"
        );
        let to_b = m.open_link(&d_b).unwrap();
        assert_eq!(
            m.open_link(&d_b).unwrap(),
            to_b,
            "same descriptor, same link"
        );
        a_tx.send(d.clone()).unwrap();
        let out = frames(300, caps.mtu);
        send_all(&mut m, to_b, &out);
        let got = recv_n(&mut m, out.len(), Duration::from_secs(5));
        assert_eq!(got.len(), out.len(), "a received the answers");
        assert!(got.iter().all(|(l, _)| *l == to_b));
        assert!(got.iter().map(|(_, f)| f).eq(out.iter().rev()));
        // Core mistakes are errors, not panics.
        let mut once = true;
        let e = m
            .tx_burst(&mut |_| {
                once.then(|| {
                    once = false;
                    TxFrame {
                        link: LinkId(77),
                        len: 10,
                    }
                })
            })
            .unwrap_err();
        assert!(e.to_string().contains("unknown link"), "{e}");
        let mut once = true;
        let e = m
            .tx_burst(&mut |buf| {
                once.then(|| {
                    once = false;
                    TxFrame {
                        link: to_b,
                        len: buf.len() + 1,
                    }
                })
            })
            .unwrap_err();
        assert!(e.to_string().contains("exceeds the MTU"), "{e}");
        // Shut down: further calls fail, the program is gone.
        m.shutdown();
        assert!(m.rx_burst(1, &mut |_, _| {}).is_err());
        assert!(m.readiness_fd().is_none());
        assert!(bcl_afxdp::netlink::link_info(&if_a).unwrap().xdp.is_none());
        m.stats()
    });
    let sa = a.join().unwrap();
    let sb = b.join().unwrap();
    assert_eq!((sa.tx_frames, sa.rx_frames), (300, 300));
    assert_eq!((sb.tx_frames, sb.rx_frames), (300, 300));
}

#[test]
fn an_af_packet_peer_interoperates() {
    let Some(lab) = lab("pair.toml", "an_af_packet_peer_interoperates") else {
        return;
    };
    let (if_a, mac_a, _) = iface(&lab, "a");
    let (if_b, mac_b, _) = iface(&lab, "b");
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let a = lab.spawn_in("a", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_a)).expect("open a");
        ready_tx.send(()).unwrap();
        let got = recv_n(&mut m, 50, Duration::from_secs(5));
        assert_eq!(got.len(), 50, "frames from the AF_PACKET peer");
        let l = got[0].0;
        assert_eq!(m.link_mac(l), Some(mac_b));
        for (i, (link, bytes)) in got.iter().enumerate() {
            assert_eq!(*link, l);
            assert_eq!(bytes, &pattern(i as u32, 20 + i * 7));
        }
        // The packet method's descriptor names the same peer.
        let d: Descriptor = format!("packet:{mac_b}/2").parse().unwrap();
        assert_eq!(m.open_link(&d).unwrap(), l);
        let out: Vec<Vec<u8>> = (0..50)
            .map(|i| pattern(1000 + i, 60 + i as usize * 11))
            .collect();
        send_all(&mut m, l, &out);
        done_rx.recv().unwrap();
    });
    ready_rx.recv().unwrap();
    let b = lab.spawn_in("b", move || {
        let s = PacketSock::open(&if_b, 0x88b5);
        for i in 0..50u32 {
            s.send(&eth(mac_a, mac_b, 0x88b5, &pattern(i, 20 + i as usize * 7)));
        }
        let mut got = Vec::new();
        while got.len() < 50 {
            match s.recv(Duration::from_secs(5)) {
                Some(f) => got.push(f),
                None => break,
            }
        }
        done_tx.send(()).unwrap();
        got
    });
    let got = b.join().unwrap();
    a.join().unwrap();
    assert_eq!(got.len(), 50, "AF_PACKET peer received the answers");
    for (i, f) in got.iter().enumerate() {
        assert_eq!(
            f,
            &eth(mac_b, mac_a, 0x88b5, &pattern(1000 + i as u32, 60 + i * 11))
        );
    }
}

#[test]
fn foreign_traffic_still_works_while_attached() {
    let Some(lab) = lab("pair.toml", "foreign_traffic_still_works_while_attached") else {
        return;
    };
    let (if_a, mac_a, ip_a) = iface(&lab, "a");
    let (if_b, _, ip_b) = iface(&lab, "b");
    let (ip_a, ip_b) = (ip_a.unwrap(), ip_b.unwrap());
    // Forget any neighbour so that the UDP exchange needs ARP.
    for (n, i) in [("a", &if_a), ("b", &if_b)] {
        let st = lab
            .command(n, "ip")
            .unwrap()
            .args(["neigh", "flush", "dev", i])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let b = lab.spawn_in("b", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_b)).expect("open b");
        let udp = UdpSocket::bind((ip_b, 7000)).unwrap();
        udp.set_nonblocking(true).unwrap();
        ready_tx.send(m.descriptor()).unwrap();
        let (mut echoed, mut bcl) = (0, 0);
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(10);
        while (echoed < 200 || bcl < 200) && Instant::now() < deadline {
            if let Ok((n, from)) = udp.recv_from(&mut buf) {
                udp.send_to(&buf[..n], from).unwrap();
                echoed += 1;
            }
            m.rx_burst(64, &mut |_, f| {
                assert_eq!(f, &pattern(bcl, 64)[..]);
                bcl += 1;
            })
            .unwrap();
        }
        (echoed, bcl)
    });
    let d_b = ready_rx.recv().unwrap();
    let a = lab.spawn_in("a", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_a)).expect("open a");
        let link = m.open_link(&d_b).unwrap();
        let udp = UdpSocket::bind((ip_a, 0)).unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 2048];
        for i in 0..200u32 {
            send_all(&mut m, link, &[pattern(i, 64)]);
            let msg = pattern(i, 100 + i as usize);
            udp.send_to(&msg, (ip_b, 7000)).unwrap();
            let (n, _) = udp
                .recv_from(&mut buf)
                .expect("UDP echo while XDP is attached");
            assert_eq!(&buf[..n], &msg[..]);
        }
    });
    a.join().unwrap();
    assert_eq!(b.join().unwrap(), (200, 200));
    // ARP went through the kernel: b's neighbour table learned a's MAC.
    let out = lab
        .command("b", "ip")
        .unwrap()
        .args(["neigh", "show", &ip_a.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&mac_a.to_string()), "neighbour entry: {text}");
}

#[test]
fn blocking_mode_wakes_on_either_queue_and_busy_poll_is_reported() {
    let Some(lab) = lab("pair-2q.toml", "blocking_mode_wakes_on_either_queue") else {
        return;
    };
    let (if_a, mac_a, _) = iface(&lab, "a");
    let (if_b, mac_b, _) = iface(&lab, "b");
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<u32>();
    let b = lab.spawn_in("b", move || {
        let mut cfg = AfXdpConfig::new(if_b);
        cfg.busy_poll = true;
        let mut m = AfXdpMethod::open(cfg).expect("open b");
        let r = m.mode_report().clone();
        assert_eq!(r.queues.len(), 2);
        for q in &r.queues {
            let bp = q.busy_poll.as_deref().unwrap_or("");
            assert!(bp.starts_with("on") || bp.contains("refused"), "{bp}");
        }
        assert!(r.to_string().contains("busy poll"), "{r}");
        let fd = m.readiness_fd().expect("a readiness fd");
        assert!(!bcl_afxdp::wait_readable(fd, 0).unwrap(), "nothing yet");
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        for q in [1u32, 0] {
            go_tx.send(q).unwrap();
            assert!(
                bcl_afxdp::wait_readable(fd, 3000).unwrap(),
                "woken by a frame on queue {q}"
            );
            let t = Instant::now();
            while got.len() < (2 - q) as usize && t.elapsed() < Duration::from_secs(2) {
                m.rx_burst(8, &mut |_, f| got.push(f.to_vec())).unwrap();
            }
            assert!(!bcl_afxdp::wait_readable(fd, 0).unwrap(), "drained");
        }
        let per_queue: Vec<u64> = m.queue_stats().iter().map(|s| s.rx_frames).collect();
        (got, per_queue)
    });
    ready_rx.recv().unwrap();
    let a = lab.spawn_in("a", move || {
        let mut cfg = AfXdpConfig::new(if_a);
        cfg.tx_on_all_queues = true;
        let mut x = RawXsk::open(&cfg).expect("open a");
        for q in go_rx.iter() {
            let f = eth(mac_b, mac_a, 0x88b5, &pattern(q, 80));
            let mut once = Some(f);
            while once.is_some() {
                x.send_on(q, &mut |buf| {
                    let f = once.take()?;
                    buf[..f.len()].copy_from_slice(&f);
                    Some(f.len())
                })
                .unwrap();
            }
        }
    });
    let (got, per_queue) = b.join().unwrap();
    a.join().unwrap();
    assert_eq!(got, vec![pattern(1, 80), pattern(0, 80)]);
    assert_eq!(per_queue, vec![1, 1], "one frame on each queue");
}

#[test]
fn large_mtu_falls_back_to_generic_and_carries_full_frames() {
    let Some(lab) = lab("pair.toml", "large_mtu_falls_back_to_generic") else {
        return;
    };
    let (if_a, _, _) = iface(&lab, "a");
    let (if_b, _, _) = iface(&lab, "b");
    // Above veth's native-XDP limit (~3500 with 4 KiB pages), within what a
    // 4 KiB chunk holds after the 256-byte headroom (3826).
    for (n, i) in [("a", &if_a), ("b", &if_b)] {
        let st = lab
            .command(n, "ip")
            .unwrap()
            .args(["link", "set", "dev", i, "mtu", "3800"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let (d_tx, d_rx) = mpsc::channel();
    let b = lab.spawn_in("b", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_b)).expect("open b");
        d_tx.send(m.descriptor()).unwrap();
        recv_n(&mut m, 20, Duration::from_secs(5))
    });
    let d_b = d_rx.recv().unwrap();
    let a = lab.spawn_in("a", move || {
        let mut m = AfXdpMethod::open(AfXdpConfig::new(if_a)).expect("open a");
        let r = m.mode_report().clone();
        assert_eq!(r.attach, AttachMode::Generic, "{r}");
        assert!(
            r.attach_note
                .contains("native (driver) attach refused: ERANGE"),
            "{r}"
        );
        assert_eq!(m.caps().mtu, 3800);
        let link = m.open_link(&d_b).unwrap();
        let out = frames(20, 3800);
        send_all(&mut m, link, &out);
        out
    });
    let out = a.join().unwrap();
    let got = b.join().unwrap();
    assert_eq!(got.len(), 20);
    assert!(got.iter().map(|(_, f)| f).eq(out.iter()));
}

#[test]
fn probe_says_why_not() {
    let Some(lab) = lab("pair.toml", "probe_says_why_not") else {
        return;
    };
    let (if_a, _, _) = iface(&lab, "a");
    let ns_lab = (*lab).clone();
    let h = lab.spawn_in("a", move || {
        assert_eq!(probe(&if_a), Availability::Usable);
        match probe("nosuch0") {
            Availability::NotUsable(r) => assert!(r.contains("no interface nosuch0"), "{r}"),
            Availability::Usable => panic!("usable without an interface"),
        }
        let st = ns_lab
            .command("a", "ip")
            .unwrap()
            .args(["link", "set", "dev", &if_a, "down"])
            .status()
            .unwrap();
        assert!(st.success());
        match probe(&if_a) {
            Availability::NotUsable(r) => assert!(r.contains("is down"), "{r}"),
            Availability::Usable => panic!("usable while down"),
        }
        let e = AfXdpMethod::open(AfXdpConfig::new(&if_a))
            .err()
            .expect("down");
        assert!(e.to_string().contains("is down"), "{e}");
        let me: bcl_core::MethodError = e.into();
        assert!(matches!(me, bcl_core::MethodError::NotUsable { .. }));
    });
    h.join().unwrap();
}
