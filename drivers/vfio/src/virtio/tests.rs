//! The virtio-net driver against the virtio-net device model on the
//! in-memory PCI host: two modelled NICs joined by a wire.

use super::model::{UsedFault, VirtioNetModel, VirtioNetModelConfig};
use super::net::{VirtioNet, VirtioNetConfig, NET_HDR_LEN};
use super::*;
use crate::pci::PciFunction;
use crate::testing::{InMemoryPci, Wire, WirePort};

pub(crate) const MAC_A: [u8; 6] = [0x52, 0x54, 0x00, 0x00, 0x00, 0x0a];
pub(crate) const MAC_B: [u8; 6] = [0x52, 0x54, 0x00, 0x00, 0x00, 0x0b];

pub(crate) struct Nic {
    pub net: VirtioNet<InMemoryPci>,
    pub host: InMemoryPci,
    pub port: WirePort,
}

pub(crate) fn nic(
    addr: &str,
    model: VirtioNetModelConfig,
    port: WirePort,
    cfg: VirtioNetConfig,
) -> Nic {
    let host = InMemoryPci::new(
        addr.parse().unwrap(),
        VirtioNetModel::new(model, port.clone()),
    );
    host.attach_wire(&port);
    let net = VirtioNet::new(host.clone(), cfg).expect("driver init");
    Nic { net, host, port }
}

/// Two NICs on one wire: A (00:02.0) and B (00:03.0).
pub(crate) fn pair(queue_max: u16, cfg: VirtioNetConfig) -> (Nic, Nic) {
    let (pa, pb) = Wire::new(1024);
    let m = |mac| VirtioNetModelConfig {
        mac,
        queue_max,
        ..Default::default()
    };
    (
        nic("0000:00:02.0", m(MAC_A), pa, cfg),
        nic("0000:00:03.0", m(MAC_B), pb, cfg),
    )
}

fn eth(dst: [u8; 6], src: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x88b5u16.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(31)) as u8)
        .collect();
    if len >= 4 {
        p[..4].copy_from_slice(&seq.to_le_bytes());
    }
    p
}

fn recv_all(n: &mut Nic, budget: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    n.net.receive(budget, |v| out.push(v.to_vec())).unwrap();
    out
}

fn model_stats(n: &Nic) -> model::ModelStats {
    n.host.with_model(|m: &mut VirtioNetModel| m.stats())
}

#[test]
fn init_negotiates_only_what_we_use_and_reads_the_mac() {
    let (a, b) = pair(256, VirtioNetConfig::default());
    assert_eq!(a.net.mac(), MAC_A);
    assert_eq!(b.net.mac(), MAC_B);
    assert_eq!(
        a.net.features(),
        F_VERSION_1 | F_NET_MAC | F_ACCESS_PLATFORM,
        "no MTU offered, so none negotiated"
    );
    assert_eq!(a.net.mtu(), 1500);
    assert_eq!(a.net.max_frame_len(), 1536 - NET_HDR_LEN);
    assert_eq!(a.net.queue_size(), 256);
    let (status, features, vec_rx, vec_tx, size) = a.host.with_model(|m: &mut VirtioNetModel| {
        (
            m.status(),
            m.driver_features(),
            m.queue_vector(0),
            m.queue_vector(1),
            m.queue_size(0),
        )
    });
    assert_eq!(
        status,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK
    );
    assert_eq!(features, a.net.features());
    assert_eq!(vec_rx, 0, "RX queue uses MSI-X vector 0");
    assert_eq!(vec_tx, NO_VECTOR);
    assert_eq!(size, 256);
    let s = model_stats(&a);
    assert_eq!(
        s.bad_accesses, 0,
        "every register access had the right width"
    );
    assert_eq!(s.early_notifications, 0, "no doorbell before DRIVER_OK");
    assert_eq!(s.errors, 0);
    assert_eq!(a.host.stats().dma_faults, 0);
    assert_eq!(
        a.host.stats().dma_mappings,
        1,
        "one DMA allocation for rings and buffers"
    );
    assert!(a.net.interrupt_fd().is_some());
    assert_ne!(a.net.dma().iova(), a.net.dma().as_ptr() as u64);
}

#[test]
fn device_mtu_is_used_and_sizes_the_buffers() {
    let (pa, _pb) = Wire::new(16);
    let n = nic(
        "0000:00:04.0",
        VirtioNetModelConfig {
            mtu: Some(9000),
            ..Default::default()
        },
        pa,
        VirtioNetConfig::default(),
    );
    assert_eq!(n.net.mtu(), 9000);
    assert!(n.net.features() & F_NET_MTU != 0);
    assert!(n.net.max_frame_len() >= 9014);
}

#[test]
fn frames_of_every_size_cross_both_ways() {
    let (mut a, mut b) = pair(256, VirtioNetConfig::default());
    let max_payload = a.net.max_frame_len() - 14;
    let sizes: Vec<usize> = (0..=64)
        .chain([100, 511, 512, 1000, 1499, 1500, max_payload])
        .collect();
    for (from_a, seq_base) in [(true, 0u32), (false, 1000)] {
        let (tx, rx, dst, src) = if from_a {
            (&mut a, &mut b, MAC_B, MAC_A)
        } else {
            (&mut b, &mut a, MAC_A, MAC_B)
        };
        let mut expect = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let f = eth(dst, src, &payload(seq_base + i as u32, len));
            assert!(tx.net.send(&[&f[..14], &f[14..]]).unwrap());
            expect.push(f);
            if i % 16 == 15 {
                tx.net.flush();
            }
        }
        tx.net.flush();
        let got = recv_all(rx, 1000);
        assert_eq!(got.len(), expect.len());
        for (g, e) in got.iter().zip(&expect) {
            assert_eq!(g, e, "frame of {} bytes corrupted", e.len());
        }
        assert_eq!(
            tx.net.reclaim_tx(),
            expect.len(),
            "all TX buffers come back"
        );
    }
    for n in [&a, &b] {
        assert_eq!(model_stats(n).errors, 0);
        assert_eq!(n.host.stats().dma_faults, 0);
    }
}

#[test]
fn rings_wrap_past_the_16_bit_index_and_buffers_are_refilled() {
    let (mut a, mut b) = pair(8, VirtioNetConfig::default());
    assert_eq!(a.net.queue_size(), 8);
    let total = 70_000u32;
    let mut seq = 0u32;
    let mut next_rx = 0u32;
    while next_rx < total {
        // Up to a full ring per round.
        while seq < total
            && a.net
                .send(&[&eth(MAC_B, MAC_A, &seq.to_le_bytes())])
                .unwrap()
        {
            seq += 1;
        }
        a.net.flush();
        for f in recv_all(&mut b, 64) {
            let got = u32::from_le_bytes(f[14..18].try_into().unwrap());
            assert_eq!(got, next_rx, "frames out of order or lost");
            next_rx += 1;
        }
    }
    assert_eq!(b.net.stats().rx_frames, u64::from(total));
    assert_eq!(b.net.stats().bad_used_id + b.net.stats().bad_used_len, 0);
    assert_eq!(model_stats(&b).rx_frames, u64::from(total));
    assert_eq!(b.port.dropped(), 0);
}

#[test]
fn frames_wait_for_buffers_and_arrive_after_refill() {
    let (mut a, mut b) = pair(8, VirtioNetConfig::default());
    // 20 frames: 8 fill B's ring, 12 wait in B's inbox (the wire).
    for seq in 0..20u32 {
        while !a
            .net
            .send(&[&eth(MAC_B, MAC_A, &seq.to_le_bytes())])
            .unwrap()
        {
            a.net.flush();
        }
        a.net.flush();
    }
    assert_eq!(model_stats(&b).rx_frames, 8);
    assert_eq!(b.port.pending(), 12);
    let mut got = Vec::new();
    for _ in 0..5 {
        // Each receive refills and notifies; the device then delivers more.
        for f in recv_all(&mut b, 4) {
            got.push(u32::from_le_bytes(f[14..18].try_into().unwrap()));
        }
    }
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    assert_eq!(b.port.pending(), 0);
    assert!(b.net.stats().notifications >= 3);
}

#[test]
fn doorbells_are_skipped_when_the_device_suppresses_them() {
    let (pa, pb) = Wire::new(64);
    let mut a = nic(
        "0000:00:02.0",
        VirtioNetModelConfig {
            mac: MAC_A,
            ..Default::default()
        },
        pa,
        VirtioNetConfig::default(),
    );
    let mut b = nic(
        "0000:00:03.0",
        VirtioNetModelConfig {
            mac: MAC_B,
            suppress_rx_notify: true,
            ..Default::default()
        },
        pb,
        VirtioNetConfig::default(),
    );
    let before = b.net.stats();
    for seq in 0..10u32 {
        a.net
            .send(&[&eth(MAC_B, MAC_A, &seq.to_le_bytes())])
            .unwrap();
        a.net.flush();
        assert_eq!(recv_all(&mut b, 16).len(), 1);
    }
    let after = b.net.stats();
    assert_eq!(
        after.notifications, before.notifications,
        "no RX doorbell needed"
    );
    assert_eq!(
        after.notifications_suppressed - before.notifications_suppressed,
        10
    );
}

#[test]
fn transmit_ring_full_is_reported_and_recovers() {
    let (mut a, mut b) = pair(8, VirtioNetConfig::default());
    for seq in 0..8u32 {
        assert!(a
            .net
            .send(&[&eth(MAC_B, MAC_A, &seq.to_le_bytes())])
            .unwrap());
    }
    assert!(
        !a.net.send(&[&eth(MAC_B, MAC_A, b"x")]).unwrap(),
        "ring full"
    );
    assert_eq!(a.net.stats().tx_ring_full, 1);
    assert_eq!(model_stats(&a).tx_frames, 0, "nothing visible before flush");
    a.net.flush();
    assert_eq!(model_stats(&a).tx_frames, 8);
    assert_eq!(a.net.tx_available(), 8);
    assert_eq!(recv_all(&mut b, 64).len(), 8);
    let too_long = vec![0u8; a.net.max_frame_len() + 1];
    assert!(matches!(
        a.net.send(&[&too_long]),
        Err(VirtioError::FrameTooLong { .. })
    ));
}

#[test]
fn receive_interrupt_signals_the_eventfd() {
    let (mut a, b) = pair(16, VirtioNetConfig::default());
    let (_, _) = (b.net.ack_interrupt(), ());
    assert_eq!(b.net.ack_interrupt(), 0, "nothing pending");
    a.net.send(&[&eth(MAC_B, MAC_A, b"ping")]).unwrap();
    a.net.flush();
    assert!(b.net.ack_interrupt() >= 1);
    // TX completions do not interrupt (NO_INTERRUPT on the TX ring).
    assert_eq!(a.host.stats().interrupts, 0);
    // Polling mode: no vector, no fd.
    let (pa, _pb) = Wire::new(4);
    let p = nic(
        "0000:00:05.0",
        VirtioNetModelConfig::default(),
        pa,
        VirtioNetConfig {
            interrupts: false,
            ..Default::default()
        },
    );
    assert!(p.net.interrupt_fd().is_none());
    assert_eq!(
        p.host
            .with_model(|m: &mut VirtioNetModel| m.queue_vector(0)),
        NO_VECTOR
    );
}

#[test]
fn bad_completions_from_the_device_are_counted_not_trusted() {
    let (mut a, mut b) = pair(16, VirtioNetConfig::default());
    let send = |a: &mut Nic, seq: u32| {
        a.net
            .send(&[&eth(MAC_B, MAC_A, &seq.to_le_bytes())])
            .unwrap();
        a.net.flush();
    };
    for (i, (fault, shown)) in [
        (UsedFault::IdOutOfRange, 0),
        (UsedFault::DuplicateId, 1),
        (UsedFault::HugeLen, 0),
        (UsedFault::ShortLen, 0),
    ]
    .into_iter()
    .enumerate()
    {
        b.host
            .with_model(|m: &mut VirtioNetModel| m.inject_used_fault(fault));
        send(&mut a, i as u32);
        assert_eq!(recv_all(&mut b, 16).len(), shown, "{fault:?}");
        // A good frame still gets through afterwards.
        send(&mut a, 100 + i as u32);
        let got = recv_all(&mut b, 16);
        assert_eq!(got.len(), 1, "after {fault:?}");
    }
    let s = b.net.stats();
    assert_eq!(s.bad_used_id, 2);
    assert_eq!(s.bad_used_len, 2);
    // A used index far ahead: the queue is declared broken, no panic.
    b.host
        .with_model(|m: &mut VirtioNetModel| m.inject_used_fault(UsedFault::IndexJump));
    send(&mut a, 999);
    let err = b.net.receive(16, |_| {}).unwrap_err();
    assert!(matches!(err, VirtioError::DeviceBroken(_)), "{err}");
    assert!(b.net.broken().is_some());
    assert!(matches!(
        b.net.send(&[b"x"]),
        Err(VirtioError::DeviceBroken(_))
    ));
}

#[test]
fn wrong_device_is_refused_and_drop_resets_the_device() {
    struct NotVirtio;
    impl crate::testing::DeviceModel for NotVirtio {
        fn config_space(&self) -> crate::testing::ConfigSpace {
            crate::testing::ConfigSpace::new(0x8086, 0x10d3, 0x020000, 0, false)
        }
        fn mmio_read(
            &mut self,
            _: &mut crate::testing::DeviceCtx<'_>,
            _: u8,
            _: u64,
            _: u8,
        ) -> u64 {
            0
        }
        fn mmio_write(
            &mut self,
            _: &mut crate::testing::DeviceCtx<'_>,
            _: u8,
            _: u64,
            _: u8,
            _: u64,
        ) {
        }
        fn reset(&mut self, _: &mut crate::testing::DeviceCtx<'_>) {}
    }
    let h = InMemoryPci::new("0000:00:09.0".parse().unwrap(), NotVirtio);
    let e = VirtioNet::new(h, VirtioNetConfig::default()).unwrap_err();
    assert!(e.to_string().contains("8086:10d3"), "{e}");

    let (a, _b) = pair(8, VirtioNetConfig::default());
    let host = a.host.clone();
    assert!(host.msix_vectors() > 0);
    drop(a);
    assert_eq!(host.with_model(|m: &mut VirtioNetModel| m.status()), 0);
    assert_eq!(host.stats().dma_mappings, 0, "DMA memory released");
    assert!(host.interrupt_eventfd(0).is_none(), "MSI-X disabled");
}

#[test]
fn capability_parser_skips_caps_outside_their_bar() {
    // A model whose first common-config capability points past BAR 4: the
    // parser must skip it and use the second one.
    let (pa, _pb) = Wire::new(4);
    struct Shifted(VirtioNetModel);
    impl crate::testing::DeviceModel for Shifted {
        fn config_space(&self) -> crate::testing::ConfigSpace {
            let good = self.0.config_space();
            let mut c = crate::testing::ConfigSpace::new(0x1af4, 0x1041, 0x020000, 1, false);
            c.set_bar(
                4,
                0x4000,
                crate::pci::BarKind::Memory {
                    is_64bit: true,
                    prefetchable: true,
                },
            );
            // Bogus: common config at 0x3f00 + 0x1000 (past the BAR end).
            let mut b = vec![16, CAP_COMMON_CFG, 4, 0, 0, 0];
            b.extend_from_slice(&0x3f00u32.to_le_bytes());
            b.extend_from_slice(&0x1000u32.to_le_bytes());
            c.add_capability(crate::pci::CAP_ID_VENDOR, &b);
            // Bogus: names BAR 2, which does not exist.
            let mut b = vec![16, CAP_COMMON_CFG, 2, 0, 0, 0];
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&0x1000u32.to_le_bytes());
            c.add_capability(crate::pci::CAP_ID_VENDOR, &b);
            // Then the real ones, copied from the good image.
            let h = InMemoryPci::new("0000:00:0a.0".parse().unwrap(), DummyWrap(good));
            for cap in h.capabilities().unwrap() {
                if cap.id == crate::pci::CAP_ID_VENDOR {
                    let mut body = vec![0u8; 18];
                    h.config_read(cap.offset + 2, &mut body).unwrap();
                    c.add_capability(crate::pci::CAP_ID_VENDOR, &body[..usize::from(body[0]) - 2]);
                }
            }
            c
        }
        fn msix_vectors(&self) -> u32 {
            0
        }
        fn mmio_read(
            &mut self,
            ctx: &mut crate::testing::DeviceCtx<'_>,
            bar: u8,
            o: u64,
            w: u8,
        ) -> u64 {
            self.0.mmio_read(ctx, bar, o, w)
        }
        fn mmio_write(
            &mut self,
            ctx: &mut crate::testing::DeviceCtx<'_>,
            bar: u8,
            o: u64,
            w: u8,
            v: u64,
        ) {
            self.0.mmio_write(ctx, bar, o, w, v)
        }
        fn reset(&mut self, ctx: &mut crate::testing::DeviceCtx<'_>) {
            crate::testing::DeviceModel::reset(&mut self.0, ctx)
        }
    }
    struct DummyWrap(crate::testing::ConfigSpace);
    impl crate::testing::DeviceModel for DummyWrap {
        fn config_space(&self) -> crate::testing::ConfigSpace {
            self.0.clone()
        }
        fn mmio_read(
            &mut self,
            _: &mut crate::testing::DeviceCtx<'_>,
            _: u8,
            _: u64,
            _: u8,
        ) -> u64 {
            0
        }
        fn mmio_write(
            &mut self,
            _: &mut crate::testing::DeviceCtx<'_>,
            _: u8,
            _: u64,
            _: u8,
            _: u64,
        ) {
        }
        fn reset(&mut self, _: &mut crate::testing::DeviceCtx<'_>) {}
    }
    let h = InMemoryPci::new(
        "0000:00:0b.0".parse().unwrap(),
        Shifted(VirtioNetModel::new(VirtioNetModelConfig::default(), pa)),
    );
    let caps = find_caps(&h).unwrap();
    assert_eq!(caps.common.offset, 0, "bogus caps skipped");
    assert_eq!(caps.notify_multiplier, 4);
    let net = VirtioNet::new(h, VirtioNetConfig::default()).unwrap();
    assert!(
        net.interrupt_fd().is_none(),
        "no MSI-X on this model: polling"
    );
}
