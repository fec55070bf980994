//! Tests on real AF_PACKET sockets. They need root: each runs on a thread
//! of its own in a private network namespace (`unshare(CLONE_NEWNET)`
//! affects only the calling thread) with a veth pair `va`/`vb`, so nothing
//! is created outside it and nothing is left behind when the thread ends.
//! Without root they fail loudly unless BCL_SKIP_PRIVILEGED=1.

use super::*;
use bcl_core::{Method, TxFrame};
use std::process::Command;

fn privileged(test: &str) -> bool {
    // SAFETY-free check: effective uid 0.
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("BCL_SKIP_PRIVILEGED").is_ok_and(|v| v == "1") {
        println!("SKIP {test}: not root (BCL_SKIP_PRIVILEGED=1)");
        return false;
    }
    panic!("{test} needs root (AF_PACKET, network namespaces); run as root or set BCL_SKIP_PRIVILEGED=1");
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` on a new thread inside a private network namespace holding a
/// veth pair va (02:00:00:00:00:0a) <-> vb (02:00:00:00:00:0b), both up.
fn in_private_netns<T: Send + 'static>(veth: bool, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        ip(&["link", "set", "lo", "up"]);
        if veth {
            ip(&[
                "link",
                "add",
                "va",
                "address",
                "02:00:00:00:00:0a",
                "type",
                "veth",
                "peer",
                "name",
                "vb",
                "address",
                "02:00:00:00:00:0b",
            ]);
            ip(&["link", "set", "va", "up"]);
            ip(&["link", "set", "vb", "up"]);
        }
        f()
    })
    .join()
    .expect("test thread panicked")
}

fn open(ifname: &str, ethertype: u16) -> PacketMethod {
    PacketMethod::open(PacketConfig {
        ifname: Some(ifname.into()),
        ethertype,
        ..PacketConfig::default()
    })
    .unwrap()
}

fn send(m: &mut PacketMethod, link: bcl_core::LinkId, frames: &[Vec<u8>]) -> usize {
    let mut it = frames.iter();
    m.tx_burst(&mut |buf| {
        let f = it.next()?;
        buf[..f.len()].copy_from_slice(f);
        Some(TxFrame { link, len: f.len() })
    })
    .unwrap()
}

fn recv(m: &mut PacketMethod, want: usize) -> Vec<(bcl_core::LinkId, Vec<u8>)> {
    let mut got = Vec::new();
    for _ in 0..20_000 {
        m.rx_burst(64, &mut |l, b| got.push((l, b.to_vec())))
            .unwrap();
        if got.len() >= want {
            break;
        }
        std::thread::yield_now();
    }
    got
}

#[test]
fn frames_cross_a_veth_pair_through_the_rings() {
    if !privileged("frames_cross_a_veth_pair_through_the_rings") {
        return;
    }
    in_private_netns(true, || {
        let mut a = open("va", 0x88B5);
        let mut b = open("vb", 0x88B5);
        assert_eq!(a.caps().mtu, 1500);
        let d = b.descriptor().to_string();
        assert!(d.starts_with("packet:02:00:00:00:00:0b/"), "{d}");
        assert!(!d.contains(' '));
        let to_b = a.open_link(&b.descriptor()).unwrap();
        assert_eq!(a.open_link(&b.descriptor()).unwrap(), to_b);
        // More frames than the transmit ring holds, sizes 1..=1500.
        let frames: Vec<Vec<u8>> = (0..600u32)
            .map(|i| {
                let len = 1 + (i as usize * 37) % 1500;
                (0..len).map(|k| (k as u32 ^ i) as u8).collect()
            })
            .collect();
        let mut got = Vec::new();
        let mut sent = 0;
        while got.len() < frames.len() {
            if sent < frames.len() {
                let end = (sent + 100).min(frames.len());
                sent += send(&mut a, to_b, &frames[sent..end]);
            }
            got.extend(recv(&mut b, 1));
        }
        assert_eq!(got.len(), frames.len());
        for (i, (link, bytes)) in got.iter().enumerate() {
            // veth does not pad short frames; a real NIC may (trailing
            // bytes are the core's business, it ignores them).
            assert_eq!(&bytes[..frames[i].len()], &frames[i][..], "frame {i}");
            assert_eq!(b.link_mac(*link), Some(a.interface().mac));
        }
        let st = b.stats();
        assert_eq!(st.rx_frames, 600);
        assert_eq!(st.links_learned, 1);
        assert_eq!(st.rx_ring_drops, 0);
        // The learned link answers.
        send(&mut b, got[0].0, &[b"pong".to_vec()]);
        let back = recv(&mut a, 1);
        assert_eq!(back[0].0, to_b);
        assert_eq!(&back[0].1[..4], b"pong");
    });
}

#[test]
fn other_ethertypes_and_other_hosts_never_reach_the_core() {
    if !privileged("other_ethertypes_and_other_hosts_never_reach_the_core") {
        return;
    }
    in_private_netns(true, || {
        let mut b = open("vb", 0x88B5);
        // Another EtherType: the socket's protocol binding filters it out.
        let mut other = open("va", 0x88B6);
        let l = other.open_link(&b.descriptor()).unwrap();
        send(&mut other, l, &[vec![1u8; 60], vec![2u8; 60]]);
        // Our EtherType but another destination MAC: dropped and counted.
        let mut a = open("va", 0x88B5);
        let stranger = a
            .open_link(&"packet:02:00:00:00:00:99/1".parse().unwrap())
            .unwrap();
        send(&mut a, stranger, &[vec![3u8; 60]]);
        // And a good one last, so we know when everything has arrived.
        let to_b = a.open_link(&b.descriptor()).unwrap();
        send(&mut a, to_b, &[vec![4u8; 60]]);
        let got = recv(&mut b, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, vec![4u8; 60]);
        let st = b.stats();
        assert_eq!(st.rx_frames, 1);
        assert_eq!(st.rx_foreign, 1, "{st:?}");
    });
}

#[test]
fn probe_reports_a_missing_capability() {
    if !privileged("probe_reports_a_missing_capability") {
        return;
    }
    assert_eq!(probe(), bcl_core::Availability::Usable);
    let (probed, opened) = std::thread::spawn(|| {
        crate::sys::drop_net_raw_in_this_thread().unwrap();
        let opened = PacketMethod::open(PacketConfig {
            ifname: Some("lo".into()),
            ..PacketConfig::default()
        })
        .map(|_| ())
        .unwrap_err()
        .to_string();
        (probe(), opened)
    })
    .join()
    .unwrap();
    assert_eq!(
        probed,
        bcl_core::Availability::NotUsable("needs CAP_NET_RAW".into())
    );
    assert!(opened.contains("needs CAP_NET_RAW"), "{opened}");
}

#[test]
fn the_interface_choice_is_explained() {
    if !privileged("the_interface_choice_is_explained") {
        return;
    }
    let none = in_private_netns(false, || {
        PacketMethod::open(PacketConfig::default())
            .unwrap_err()
            .to_string()
    });
    assert!(
        none.contains("no interface is up apart from loopback"),
        "{none}"
    );
    let several = in_private_netns(true, || {
        PacketMethod::open(PacketConfig::default())
            .unwrap_err()
            .to_string()
    });
    assert!(
        several.contains("several interfaces are up (va, vb)"),
        "{several}"
    );
    let missing = in_private_netns(true, || {
        PacketMethod::open(PacketConfig {
            ifname: Some("eth7".into()),
            ..PacketConfig::default()
        })
        .unwrap_err()
        .to_string()
    });
    assert!(missing.contains("no interface named \"eth7\""), "{missing}");
    let low = in_private_netns(true, || {
        PacketMethod::open(PacketConfig {
            ifname: Some("va".into()),
            ethertype: 0x0100,
            ..PacketConfig::default()
        })
        .unwrap_err()
        .to_string()
    });
    assert!(low.contains("below 0x0600"), "{low}");
}

#[test]
fn descriptors_of_every_ethernet_method_parse_and_bad_ones_are_explained() {
    let a = parse_address("02:bc:01:00:00:02/3").unwrap();
    assert_eq!(a.mac.to_string(), "02:bc:01:00:00:02");
    assert_eq!(a.ifindex, Some(3));
    // The forms the other Ethernet methods print parse too.
    let v = parse_address("52:54:00:12:34:56@0000:00:02.0").unwrap();
    assert_eq!((v.ifindex, v.pci.as_deref()), (None, Some("0000:00:02.0")));
    assert!(parse_address("02:bc:01:00:00:02").is_ok());
    assert!(parse_address("02:bc:01:00:00/3")
        .unwrap_err()
        .contains("not a MAC"));
    assert!(parse_address("02:bc:01:00:00:02/x")
        .unwrap_err()
        .contains("not a number"));
    let k = crate::PacketKind;
    use bcl_core::method::MethodKind;
    assert!(k.check_address("52:54:00:12:34:56@0000:00:02.0").is_ok());
    assert!(k.check_address("01:00:5e:00:00:01/2").is_err());
}

#[test]
fn links_open_from_descriptors_of_the_other_ethernet_methods() {
    if !privileged("links_open_from_descriptors_of_the_other_ethernet_methods") {
        return;
    }
    in_private_netns(true, || {
        let mut a = open("va", 0x88B5);
        let b = open("vb", 0x88B5);
        let mac = b.interface().mac;
        let own = a.descriptor();
        let l = a.open_link(&b.descriptor()).unwrap();
        for d in [
            format!("afxdp:{mac}/{}", b.interface().index),
            format!("vfio:{mac}@0000:00:02.0"),
            format!("packet:{mac}"),
        ] {
            assert_eq!(a.open_link(&d.parse().unwrap()).unwrap(), l, "{d}");
        }
        assert!(a.open_link(&"udp:10.0.0.1:7".parse().unwrap()).is_err());
        let e = a.open_link(&own).unwrap_err().to_string();
        assert!(e.contains("own MAC"), "{e}");
    });
}
