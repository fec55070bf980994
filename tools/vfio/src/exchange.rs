//! `bcl-vfio exchange A B`: frames of varied sizes from NIC A to NIC B and
//! back through the `vfio` method, every byte verified; plus the blocking
//! path (MSI-X wake-up) and the skipping of foreign EtherTypes.

use std::time::{Duration, Instant};

use bcl_core::method::{LinkId, Method, TxFrame};
use bcl_vfio::method::{VfioMethodConfig, VirtioNetMethod};
use bcl_vfio::pci::wait_readable;

/// Settings of an exchange.
#[derive(Debug, Clone, Copy)]
pub struct ExchangeOptions {
    /// Frames each way.
    pub frames: usize,
    /// Most frames in flight (sent, not yet received). Keep it at or below
    /// the receive ring size: a real NIC drops frames that find no buffer.
    pub window: usize,
    /// Give up after this long per direction.
    pub timeout: Duration,
    /// The method's settings (EtherType, queue size, interrupts).
    pub method: VfioMethodConfig,
}

/// The BCL frame number `seq` of `len` bytes: a sequence number then a
/// pattern that depends on both.
pub fn test_frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seq) as u8)
        .collect();
    let n = len.min(4);
    f[..n].copy_from_slice(&seq.to_be_bytes()[..n]);
    f
}

/// The size of frame `seq` for an MTU: small, boundary and full sizes.
pub fn test_size(seq: u32, mtu: usize) -> usize {
    const SIZES: [usize; 12] = [1, 14, 46, 59, 60, 64, 100, 128, 512, 1000, 1400, 1499];
    let i = seq as usize % (SIZES.len() + 1);
    if i == SIZES.len() {
        mtu
    } else {
        SIZES[i].min(mtu)
    }
}

/// Sends `count` test frames from `tx` on `link` and checks that `rx`
/// receives them in order, byte for byte, all from one link. Returns that
/// link.
pub fn one_way<M: Method, N: Method>(
    tx: &mut M,
    rx: &mut N,
    link: LinkId,
    count: usize,
    seq_base: u32,
    window: usize,
    timeout: Duration,
) -> Result<LinkId, String> {
    let mtu = tx.caps().mtu.min(rx.caps().mtu);
    let mut next_tx = 0usize;
    let mut next_rx = 0usize;
    let mut from: Option<LinkId> = None;
    let mut error: Option<String> = None;
    let start = Instant::now();
    while next_rx < count {
        if start.elapsed() > timeout {
            return Err(format!(
                "timeout after {:?}: sent {next_tx}, received {next_rx} of {count}",
                timeout
            ));
        }
        // At most `window` frames in flight, so that none finds the
        // receiver without a buffer (a real NIC would drop it).
        tx.tx_burst(&mut |buf: &mut [u8]| {
            if next_tx >= count || next_tx >= next_rx + window {
                return None;
            }
            let seq = seq_base + next_tx as u32;
            let f = test_frame(seq, test_size(seq, mtu));
            buf[..f.len()].copy_from_slice(&f);
            next_tx += 1;
            Some(TxFrame { link, len: f.len() })
        })
        .map_err(|e| format!("tx_burst: {e}"))?;
        rx.rx_burst(64, &mut |l, bytes| {
            if error.is_some() {
                return;
            }
            let seq = seq_base + next_rx as u32;
            let want = test_frame(seq, test_size(seq, mtu));
            if bytes != want.as_slice() {
                error = Some(format!(
                    "frame {next_rx}: got {} bytes starting {:02x?}, expected {} bytes starting {:02x?}",
                    bytes.len(),
                    &bytes[..bytes.len().min(8)],
                    want.len(),
                    &want[..want.len().min(8)]
                ));
            }
            match from {
                None => from = Some(l),
                Some(f) if f != l => error = Some(format!("frame {next_rx} on link {l:?}, earlier ones on {f:?}")),
                _ => {}
            }
            next_rx += 1;
        })
        .map_err(|e| format!("rx_burst: {e}"))?;
        if let Some(e) = error.take() {
            return Err(e);
        }
    }
    from.ok_or_else(|| "no frames".to_string())
}

/// Counters of both ends, for the report and for failures.
fn stats_line(ma: &VirtioNetMethod, mb: &VirtioNetMethod) -> String {
    let (sa, sb) = (ma.nic().stats(), mb.nic().stats());
    format!(
        "NIC A: {sa:?}; method A: {:?}; NIC B: {sb:?}; method B: {:?}",
        ma.stats(),
        mb.stats()
    )
}

/// Runs the whole exchange between the NICs at PCI addresses `a` and `b`;
/// `out` gets a line per step. Returns an error describing the first
/// failure.
pub fn exchange(
    a: &str,
    b: &str,
    opts: ExchangeOptions,
    out: &mut dyn FnMut(String),
) -> Result<(), String> {
    let mut ma = VirtioNetMethod::open(a, opts.method).map_err(|e| format!("open {a}: {e}"))?;
    let mut mb = VirtioNetMethod::open(b, opts.method).map_err(|e| format!("open {b}: {e}"))?;
    out(format!(
        "opened A = {} and B = {} (MTU {}, queue size {}, DMA pages {} KiB)",
        ma.descriptor(),
        mb.descriptor(),
        ma.caps().mtu,
        ma.nic().queue_size(),
        ma.nic().dma().page_size() / 1024
    ));
    let to_b = ma
        .open_link(&mb.descriptor())
        .map_err(|e| format!("open_link: {e}"))?;

    // Blocking path: B sleeps on its readiness fd until A's first frame.
    match mb.readiness_fd() {
        Some(fd) => {
            let mut sent = 0;
            ma.tx_burst(&mut |buf| {
                (sent == 0).then(|| {
                    sent += 1;
                    buf[..5].copy_from_slice(b"hello");
                    TxFrame { link: to_b, len: 5 }
                })
            })
            .map_err(|e| format!("tx_burst: {e}"))?;
            let t = Instant::now();
            let woke = wait_readable(fd, Duration::from_secs(10)).map_err(|e| e.to_string())?;
            if !woke {
                return Err("B's readiness fd (MSI-X eventfd) did not fire within 10 s".into());
            }
            let waited = t.elapsed();
            let mut got = Vec::new();
            for _ in 0..1000 {
                mb.rx_burst(8, &mut |_, f| got.push(f.to_vec()))
                    .map_err(|e| format!("rx_burst: {e}"))?;
                if !got.is_empty() {
                    break;
                }
            }
            if got != [b"hello".to_vec()] {
                return Err(format!("after the wake-up B received {got:?}"));
            }
            out(format!(
                "blocking: B woke on its MSI-X eventfd after {waited:?} and received the frame"
            ));
        }
        None => out("blocking: B has no readiness fd (no MSI-X); polling only".into()),
    }

    let t = Instant::now();
    let from_a = one_way(
        &mut ma,
        &mut mb,
        to_b,
        opts.frames,
        0,
        opts.window,
        opts.timeout,
    )
    .map_err(|e| format!("A -> B: {e}; {}", stats_line(&ma, &mb)))?;
    let ab = t.elapsed();
    if mb.link_mac(from_a) != Some(ma.nic().mac()) {
        return Err(format!("B's link {from_a:?} is not A's MAC"));
    }
    out(format!(
        "A -> B: {} frames of varied sizes verified in {ab:?}",
        opts.frames
    ));
    let t = Instant::now();
    let from_b = one_way(
        &mut mb,
        &mut ma,
        from_a,
        opts.frames,
        1 << 20,
        opts.window,
        opts.timeout,
    )
    .map_err(|e| format!("B -> A: {e}; {}", stats_line(&ma, &mb)))?;
    if from_b != to_b {
        return Err(format!(
            "A received B's frames on link {from_b:?}, opened {to_b:?}"
        ));
    }
    out(format!(
        "B -> A: {} frames verified in {:?} on the link A opened",
        opts.frames,
        t.elapsed()
    ));

    // A frame of another EtherType is skipped and counted.
    let before = mb.stats().rx.other_ethertype;
    let mut raw = mb.nic().mac().0.to_vec();
    raw.extend_from_slice(&ma.nic().mac().0);
    raw.extend_from_slice(&0x0800u16.to_be_bytes());
    raw.extend_from_slice(&[0u8; 46]);
    ma.nic_mut().send(&[&raw]).map_err(|e| e.to_string())?;
    ma.nic_mut().flush();
    let t = Instant::now();
    let mut shown = 0;
    while mb.stats().rx.other_ethertype == before && t.elapsed() < Duration::from_secs(5) {
        shown += mb.rx_burst(8, &mut |_, _| {}).map_err(|e| e.to_string())?;
    }
    if mb.stats().rx.other_ethertype != before + 1 || shown != 0 {
        return Err(format!(
            "an IPv4 frame was not skipped: other-ethertype {} -> {}, shown {shown}",
            before,
            mb.stats().rx.other_ethertype
        ));
    }
    out("an EtherType 0x0800 frame was skipped and counted".into());
    out(stats_line(&ma, &mb));
    ma.shutdown();
    mb.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_frames_cover_boundaries_and_differ() {
        let sizes: Vec<usize> = (0..13).map(|s| test_size(s, 1500)).collect();
        assert!(sizes.contains(&1) && sizes.contains(&60) && sizes.contains(&1500));
        assert_eq!(test_size(12, 900), 900);
        assert!(sizes.iter().all(|&s| s <= 1500));
        assert_eq!(test_frame(7, 1), vec![0]);
        assert_eq!(&test_frame(0x01020304, 8)[..4], &[1, 2, 3, 4]);
        assert_ne!(test_frame(1, 64), test_frame(2, 64));
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;
    use bcl_core::method::Method;
    use bcl_vfio::method::NicMethod;
    use bcl_vfio::testing::{InMemoryPci, Wire};
    use bcl_vfio::virtio::model::{VirtioNetModel, VirtioNetModelConfig};
    use bcl_vfio::virtio::net::{VirtioNet, VirtioNetConfig};

    fn method(
        addr: &str,
        mac: [u8; 6],
        port: bcl_vfio::testing::WirePort,
    ) -> NicMethod<VirtioNet<InMemoryPci>> {
        let host = InMemoryPci::new(
            addr.parse().unwrap(),
            VirtioNetModel::new(
                VirtioNetModelConfig {
                    mac,
                    queue_max: 32,
                    ..Default::default()
                },
                port.clone(),
            ),
        );
        host.attach_wire(&port);
        let nic = VirtioNet::new(host, VirtioNetConfig::default()).unwrap();
        NicMethod::new(nic, VfioMethodConfig::default())
    }

    #[test]
    fn one_way_verifies_frames_against_the_model_both_ways() {
        let (pa, pb) = Wire::new(256);
        let mut a = method("0000:00:02.0", [2, 0, 0, 0, 0, 0xa], pa);
        let mut b = method("0000:00:03.0", [2, 0, 0, 0, 0, 0xb], pb);
        let to_b = a.open_link(&b.descriptor()).unwrap();
        let t = Duration::from_secs(10);
        let from_a = one_way(&mut a, &mut b, to_b, 300, 0, 32, t).unwrap();
        assert_eq!(
            one_way(&mut b, &mut a, from_a, 300, 1 << 20, 32, t).unwrap(),
            to_b
        );
        // A frame that A did not mean to send arrives first: caught.
        let mut bad = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5];
        bad.extend_from_slice(&test_frame(999, 14));
        a.nic_mut().send(&[&bad]).unwrap();
        a.nic_mut().flush();
        let err = one_way(&mut a, &mut b, to_b, 5, 5000, 32, t).unwrap_err();
        assert!(err.contains("frame 0"), "{err}");
    }
}
