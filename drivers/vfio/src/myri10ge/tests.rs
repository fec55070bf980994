//! The Myri-10G driver against the firmware model on the in-memory PCI
//! host: two modelled NICs joined by a wire.

use std::time::Duration;

use super::driver::{LinkState, Myri10ge, STALL_POLLS};
use super::mcp::{self, Cmd, CmdStatus, FirmwareError, FW_OFFSET};
use super::model::{
    firmware_image, FirmwareImageSpec, Myri10geModel, Myri10geModelConfig, RxFault,
    DEFAULT_STRING_SPECS, SMALL_RING_AT,
};
use super::*;
use crate::pci::{Mmio, PciFunction, CFG_COMMAND, COMMAND_BUS_MASTER};
use crate::testing::{InMemoryPci, Wire, WirePort};

pub(crate) const MAC_A: [u8; 6] = [0x00, 0x60, 0xdd, 0x00, 0x00, 0x0a];
pub(crate) const MAC_B: [u8; 6] = [0x00, 0x60, 0xdd, 0x00, 0x00, 0x0b];

pub(crate) struct Nic {
    pub nic: Myri10ge<InMemoryPci>,
    pub host: InMemoryPci,
    pub port: WirePort,
}

/// A driver configuration with the synthetic image and short timeouts.
pub(crate) fn config() -> Myri10geConfig {
    Myri10geConfig {
        firmware: Firmware::Image(firmware_image()),
        command_timeout: Duration::from_millis(20),
        handoff_timeout: Duration::from_millis(50),
        ..Default::default()
    }
}

/// A modelled NIC at `addr` on `port`, not yet driven.
pub(crate) fn host(addr: &str, model: Myri10geModelConfig, port: &WirePort) -> InMemoryPci {
    let h = InMemoryPci::new(
        addr.parse().unwrap(),
        Myri10geModel::new(model, port.clone()),
    );
    h.attach_wire(port);
    h
}

pub(crate) fn nic(
    addr: &str,
    model: Myri10geModelConfig,
    port: WirePort,
    cfg: Myri10geConfig,
) -> Nic {
    let host = host(addr, model, &port);
    let nic = Myri10ge::new(host.clone(), cfg).expect("driver init");
    Nic { nic, host, port }
}

fn ring_cfg(mac: [u8; 6], send: u32, rx: u32) -> Myri10geModelConfig {
    Myri10geModelConfig {
        send_ring_entries: send,
        rx_ring_entries: rx,
        ..Myri10geModelConfig::with_mac(mac)
    }
}

/// Two NICs on one wire: A (00:02.0) and B (00:03.0).
pub(crate) fn pair_with(send: u32, rx: u32, cfg: Myri10geConfig) -> (Nic, Nic) {
    let (pa, pb) = Wire::new(4096);
    (
        nic("0000:00:02.0", ring_cfg(MAC_A, send, rx), pa, cfg.clone()),
        nic("0000:00:03.0", ring_cfg(MAC_B, send, rx), pb, cfg),
    )
}

pub(crate) fn pair(send: u32, rx: u32) -> (Nic, Nic) {
    pair_with(send, rx, config())
}

fn model<R>(n: &Nic, f: impl FnOnce(&mut Myri10geModel) -> R) -> R {
    n.host.with_model(f)
}

fn eth(dst: [u8; 6], src: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x88b5u16.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A frame of `len` bytes in all, carrying `seq`.
fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len.saturating_sub(14))
        .map(|i| (i as u32 ^ seq.wrapping_mul(2_654_435_761)) as u8)
        .collect();
    let n = p.len().min(4);
    p[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    eth(dst, src, &p)
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_le_bytes(f[14..18].try_into().unwrap())
}

/// What arrives for a sent frame: padded to 60 bytes.
fn padded(f: &[u8]) -> Vec<u8> {
    let mut f = f.to_vec();
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn recv_all(n: &mut Nic, budget: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    n.nic.receive(budget, |v| out.push(v.to_vec())).unwrap();
    out
}

fn assert_clean(n: &Nic) {
    let s = model(n, |m| m.stats());
    assert_eq!(
        s.protocol_errors,
        0,
        "model saw a protocol error: {:?}",
        model(n, |m| m.last_error().map(str::to_string))
    );
    assert_eq!(s.dma_errors, 0);
    assert_eq!(n.host.stats().dma_faults, 0);
}

/// Sends `frames` from `tx` to `rx`, at most `window` in flight, and
/// returns what `rx` received.
fn exchange(tx: &mut Nic, rx: &mut Nic, frames: &[Vec<u8>], window: usize) -> Vec<Vec<u8>> {
    let mut next = 0;
    let mut got = Vec::new();
    let mut rounds = 0;
    while got.len() < frames.len() {
        rounds += 1;
        assert!(
            rounds < 1_000_000,
            "no progress: {} of {}",
            got.len(),
            frames.len()
        );
        let mut sent = 0;
        while next < frames.len() && sent < window {
            if !tx.nic.send(&[&frames[next]]).unwrap() {
                break;
            }
            next += 1;
            sent += 1;
        }
        got.extend(recv_all(rx, 256));
    }
    got
}

#[test]
fn bring_up_loads_the_firmware_hands_off_and_configures_the_nic() {
    let (mut a, b) = pair(1024, 512);
    assert_eq!(a.nic.mac(), MAC_A);
    assert_eq!(b.nic.mac(), MAC_B);
    assert_eq!(a.nic.eeprom().serial_number, Some(424242));
    assert_eq!(
        a.nic.eeprom().product_code.as_deref(),
        Some("10G-PCIE-8B-S")
    );
    assert_eq!(a.nic.firmware_version(), "1.4.57 -P- model firmware");
    assert_eq!(a.nic.sram_size(), u64::from(DEFAULT_STRING_SPECS));
    assert_eq!(
        (
            a.nic.send_ring_entries(),
            a.nic.rx_ring_entries(),
            a.nic.rx_done_entries()
        ),
        (1024, 512, 1024),
        "ring sizes come from the firmware"
    );
    assert_eq!(a.nic.mtu(), 1500);
    assert_eq!(a.nic.max_frame_len(), 1514);
    assert_eq!(
        (a.nic.small_buffer_size(), a.nic.big_buffer_size()),
        (126, 2048)
    );

    let image = firmware_image();
    model(&a, |m| {
        assert_eq!(
            m.running_firmware(),
            Some(("1.4.57 -P- model firmware", true))
        );
        assert_eq!(m.stats().handoffs, 1);
        assert!(m.dummy_rdma(), "dummy RDMAs enabled after the hand-off");
        let s = m.sram();
        let at = FW_OFFSET as usize;
        assert_eq!(
            &s[at..at + image.len()],
            &image[..],
            "image in SRAM at 1 MiB"
        );
        assert_eq!(&s[8..0x3c], &image[8..0x3c], "bootstrap copied it to 8");
        assert!(m.is_up());
        assert_eq!(m.buffer_sizes(), (Some(126), Some(2048), Some(1518)));
        assert_eq!(m.filters(), (MAC_A, false, true, true));
        assert_eq!(m.coalescing_delay(), 75);
        assert_eq!(m.rx_buffers_posted(), (512, 512), "both rings full");
        let cmds: Vec<Cmd> = m.commands().iter().map(|c| c.cmd).collect();
        assert_eq!(
            cmds,
            [
                Cmd::GET_RX_RING_SIZE,
                Cmd::RESET,
                Cmd::SET_RSS_MCP_SLOT_TYPE,
                Cmd::SET_INTRQ_SIZE,
                Cmd::SET_INTRQ_DMA,
                Cmd::GET_IRQ_ACK_OFFSET,
                Cmd::GET_IRQ_DEASSERT_OFFSET,
                Cmd::GET_INTR_COAL_DELAY_OFFSET,
                Cmd::SET_MAC_ADDRESS,
                Cmd::ENABLE_FLOW_CONTROL,
                Cmd::DISABLE_PROMISC,
                Cmd::ENABLE_ALLMULTI,
                Cmd::GET_SEND_OFFSET,
                Cmd::GET_SMALL_RX_OFFSET,
                Cmd::GET_BIG_RX_OFFSET,
                Cmd::GET_SEND_RING_SIZE,
                Cmd::GET_RX_RING_SIZE,
                Cmd::SET_STATS_DMA_V2,
                Cmd::SET_MTU,
                Cmd::SET_SMALL_BUFFER_SIZE,
                Cmd::SET_BIG_BUFFER_SIZE,
                Cmd::ETHERNET_UP,
            ]
        );
        assert!(m.commands().iter().all(|c| c.result == Some(CmdStatus::OK)));
        let intrq = m.commands()[3];
        assert_eq!(intrq.data[0], 1024 * 4, "two rx-done slots per ring entry");
    });
    assert_clean(&a);
    assert_eq!(
        a.host.stats().dma_mappings,
        3,
        "control, receive, send memory"
    );

    // The link-up interrupt: its block is handled on the next poll.
    assert_eq!(a.nic.link_state(), LinkState::Unknown);
    assert!(a.nic.ack_interrupt() >= 1, "MSI-X vector 0 fired");
    assert!(a.nic.poll_irq());
    assert_eq!(a.nic.link_state(), LinkState::Up);
    assert_eq!(a.nic.stats().link_changes, 1);
    assert_eq!(a.nic.firmware_counters().link_up, mcp::MXGEFW_LINK_UP);
}

#[test]
fn the_running_firmware_can_be_adopted_instead_of_loading_one() {
    let (pa, pb) = Wire::new(64);
    let cfg = Myri10geConfig {
        firmware: Firmware::Running,
        ..config()
    };
    let mut a = nic("0000:00:02.0", ring_cfg(MAC_A, 64, 64), pa, cfg.clone());
    let mut b = nic("0000:00:03.0", ring_cfg(MAC_B, 64, 64), pb, cfg.clone());
    assert_eq!(a.nic.firmware_version(), "1.4.43 -- model EEPROM firmware");
    model(&a, |m| {
        assert_eq!(m.stats().handoffs, 0);
        assert_eq!(
            m.running_firmware(),
            Some(("1.4.43 -- model EEPROM firmware", false))
        );
    });
    let f = frame(MAC_B, MAC_A, 7, 300);
    assert!(a.nic.send(&[&f]).unwrap());
    assert_eq!(recv_all(&mut b, 8), vec![f]);

    // An EEPROM firmware that is not the Ethernet one cannot be adopted.
    let (pc, _pd) = Wire::new(4);
    let h = host(
        "0000:00:04.0",
        Myri10geModelConfig {
            running_firmware_type: mcp::MCP_TYPE_MX,
            ..Default::default()
        },
        &pc,
    );
    let e = Myri10ge::new(h, cfg).unwrap_err();
    assert!(
        matches!(
            e,
            Myri10geError::Firmware {
                error: FirmwareError::WrongType { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"MX  \""), "{e}");
}

/// Init against a fresh model configured by `setup`; returns the error
/// and the host.
fn init_error(
    model_cfg: Myri10geModelConfig,
    cfg: Myri10geConfig,
    setup: impl FnOnce(&mut Myri10geModel),
) -> (Myri10geError, InMemoryPci) {
    let (p, _q) = Wire::new(4);
    let h = host("0000:00:05.0", model_cfg, &p);
    h.with_model(setup);
    let e = Myri10ge::new(h.clone(), cfg).expect_err("init must fail");
    (e, h)
}

/// After a failed init the NIC is left quiet: bus mastering off, MSI-X
/// off, no DMA memory left, no DMA fault.
fn assert_left_quiet(h: &InMemoryPci) {
    let cmd = h.config_read_u16(CFG_COMMAND).unwrap();
    assert_eq!(cmd & COMMAND_BUS_MASTER, 0, "bus mastering off");
    assert!(h.interrupt_eventfd(0).is_none(), "MSI-X off");
    assert_eq!(h.stats().dma_mappings, 0, "DMA memory released");
    assert_eq!(h.stats().dma_faults, 0);
}

#[test]
fn firmware_images_are_validated_with_clear_errors() {
    let with = |spec: FirmwareImageSpec| Myri10geConfig {
        firmware: Firmware::Image(spec.build()),
        ..config()
    };
    let cases: Vec<(FirmwareImageSpec, &str)> = vec![
        (
            FirmwareImageSpec {
                mcp_type: mcp::MCP_TYPE_MX,
                ..Default::default()
            },
            "is not the Ethernet firmware",
        ),
        (
            FirmwareImageSpec {
                version: "1.3.9 -- old".into(),
                ..Default::default()
            },
            "\"1.3.9 -- old\": this driver needs 1.4.x",
        ),
        (
            FirmwareImageSpec {
                header_offset: 0x2002,
                ..Default::default()
            },
            "bad firmware header pointer 0x2002 (not 4-byte aligned)",
        ),
        (
            FirmwareImageSpec {
                header_offset: 64 * 1024 - 100,
                ..Default::default()
            },
            "ends past the image",
        ),
        (
            FirmwareImageSpec {
                len: 0x3f,
                ..Default::default()
            },
            "shorter than the 64 bytes",
        ),
        (
            FirmwareImageSpec {
                len: (DEFAULT_STRING_SPECS as u64 - FW_OFFSET) as usize,
                ..Default::default()
            },
            "does not fit the",
        ),
    ];
    for (spec, want) in cases {
        let (e, h) = init_error(Default::default(), with(spec.clone()), |_| {});
        assert!(matches!(e, Myri10geError::Firmware { .. }), "{spec:?}: {e}");
        assert!(e.to_string().contains(want), "{spec:?}: {e}");
        assert_eq!(h.with_model(|m: &mut Myri10geModel| m.stats().handoffs), 0);
        assert_left_quiet(&h);
    }
    // A missing file names the path.
    let (e, _) = init_error(
        Default::default(),
        Myri10geConfig {
            firmware: Firmware::File("/nonexistent/myri10ge_ethp_z8e.dat".into()),
            ..config()
        },
        |_| {},
    );
    assert!(matches!(e, Myri10geError::FirmwareIo { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/myri10ge_ethp_z8e.dat"));
}

#[test]
fn an_image_file_loads_and_a_real_one_can_be_checked_too() {
    // BCL_MYRI10GE_FIRMWARE names a real image (e.g. Debian's
    // /lib/firmware/myri10ge_ethp_z8e.dat) to run through the same path;
    // otherwise a synthetic one is written to a file.
    let dir = tempfile::tempdir().unwrap();
    let path = match std::env::var_os("BCL_MYRI10GE_FIRMWARE") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let p = dir.path().join("myri10ge_ethp_z8e.dat");
            std::fs::write(&p, firmware_image()).unwrap();
            p
        }
    };
    let image = std::fs::read(&path).unwrap();
    let (pa, pb) = Wire::new(64);
    let cfg = Myri10geConfig {
        firmware: Firmware::File(path),
        ..config()
    };
    let mut a = nic("0000:00:02.0", ring_cfg(MAC_A, 64, 64), pa, cfg.clone());
    let mut b = nic("0000:00:03.0", ring_cfg(MAC_B, 64, 64), pb, cfg);
    let version = a.nic.firmware_version().to_string();
    assert!(version.starts_with("1.4."), "{version}");
    model(&a, |m| {
        assert_eq!(m.running_firmware(), Some((version.as_str(), true)));
        let at = FW_OFFSET as usize;
        assert_eq!(&m.sram()[at..at + image.len()], &image[..]);
    });
    let f = frame(MAC_B, MAC_A, 1, 1514);
    assert!(a.nic.send(&[&f]).unwrap());
    assert_eq!(recv_all(&mut b, 8), vec![f]);
    assert_clean(&a);
}

#[test]
fn handoff_and_readback_failures_are_reported() {
    let (e, h) = init_error(Default::default(), config(), |m| m.fail_next_handoff());
    assert!(matches!(e, Myri10geError::Handoff(_)), "{e}");
    assert!(
        e.to_string().contains("did not confirm the hand-off"),
        "{e}"
    );
    assert_left_quiet(&h);

    let (e, h) = init_error(Default::default(), config(), |m| m.corrupt_readback(0x1234));
    assert!(
        matches!(e, Myri10geError::FirmwareReadback { offset: 0x1234, .. }),
        "{e}"
    );
    assert_eq!(h.with_model(|m: &mut Myri10geModel| m.stats().handoffs), 0);
    assert_left_quiet(&h);
}

#[test]
fn the_mac_comes_from_the_eeprom_strings_and_bad_sram_layouts_are_refused() {
    let strings = |s: &[u8]| Myri10geModelConfig {
        eeprom_strings: Some(s.to_vec()),
        ..Default::default()
    };
    let (pa, _pb) = Wire::new(4);
    let n = nic(
        "0000:00:02.0",
        strings(b"PC=10G-PCIE-8A-C\0MAC=00:60:dd:12:34:56\0SN=77\0\0"),
        pa,
        config(),
    );
    assert_eq!(n.nic.mac(), [0x00, 0x60, 0xdd, 0x12, 0x34, 0x56]);
    assert_eq!(model(&n, |m| m.filters().0), n.nic.mac(), "SET_MAC_ADDRESS");

    for (cfg, want) in [
        (strings(b"SN=77\0PC=x\0\0"), "no MAC= entry"),
        (strings(b"MAC=00:60:dd:12:34\0\0"), "is not a MAC address"),
        (strings(&[0xff; 300]), "no MAC= entry"),
        (
            Myri10geModelConfig {
                string_specs: 0x1000,
                ..Default::default()
            },
            "invalid SRAM size 0x1000",
        ),
        (
            Myri10geModelConfig {
                string_specs: 0x00ff_ff80,
                ..Default::default()
            },
            "invalid SRAM size 0xffff80",
        ),
    ] {
        let (e, h) = init_error(cfg, config(), |_| {});
        assert!(matches!(e, Myri10geError::Sram(_)), "{e}");
        assert!(e.to_string().contains(want), "{e}");
        assert_left_quiet(&h);
    }
}

#[test]
fn frames_of_every_size_cross_both_ways_padded_to_60() {
    let (mut a, mut b) = pair(256, 128);
    let sizes: Vec<usize> = (14..=130)
        .chain([200, 511, 512, 1000, 1499, 1500, 1513, 1514])
        .collect();
    for (from_a, base) in [(true, 0u32), (false, 10_000)] {
        let (tx, rx, dst, src) = if from_a {
            (&mut a, &mut b, MAC_B, MAC_A)
        } else {
            (&mut b, &mut a, MAC_A, MAC_B)
        };
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &l)| frame(dst, src, base + i as u32, l))
            .collect();
        let got = exchange(tx, rx, &frames, 64);
        assert_eq!(got.len(), frames.len());
        for (g, f) in got.iter().zip(&frames) {
            assert_eq!(g, &padded(f), "frame of {} bytes", f.len());
        }
    }
    for n in [&a, &b] {
        assert_clean(n);
        let s = n.nic.stats();
        assert_eq!(s.rx_frames, sizes.len() as u64);
        assert_eq!(s.bad_rx_len + s.rx_no_buffer, 0);
    }
    let too_long = vec![0u8; 1515];
    assert!(matches!(
        a.nic.send(&[&too_long]),
        Err(Myri10geError::FrameTooLong {
            len: 1515,
            max: 1514
        })
    ));
}

#[test]
fn frames_up_to_126_bytes_use_small_buffers_and_longer_ones_big_buffers() {
    let (mut a, mut b) = pair(64, 64);
    for len in [60, 100, 126, 127, 128, 1514] {
        let f = frame(MAC_B, MAC_A, len as u32, len);
        assert!(a.nic.send(&[&f]).unwrap());
    }
    assert_eq!(recv_all(&mut b, 16).len(), 6);
    let s = b.nic.stats();
    assert_eq!((s.rx_small, s.rx_big), (3, 3));
    let m = model(&b, |m| m.stats());
    assert_eq!((m.rx_small, m.rx_big), (3, 3));
    // A frame split over a parts list lands the same way.
    let f = frame(MAC_B, MAC_A, 9, 700);
    assert!(a.nic.send(&[&f[..14], &f[14..300], &f[300..]]).unwrap());
    assert_eq!(recv_all(&mut b, 16), vec![f]);
}

#[test]
fn tens_of_thousands_of_frames_wrap_small_rings() {
    // 16 send descriptors, 16 buffers per receive ring, 32 rx-done slots.
    let (mut a, mut b) = pair(16, 16);
    let total = 50_000u32;
    let frames: Vec<Vec<u8>> = (0..total)
        .map(|i| {
            let len = match i % 5 {
                0 => 60,
                1 => 126,
                2 => 127,
                3 => 1514,
                _ => 64 + (i as usize * 7) % 1400,
            };
            frame(MAC_B, MAC_A, i, len)
        })
        .collect();
    // A receive ring refills in groups of 8: keep at most 16 - 7 frames of
    // one kind in flight.
    let got = exchange(&mut a, &mut b, &frames, 9);
    assert_eq!(got.len(), frames.len());
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        assert_eq!(g, &padded(f), "frame {i}");
    }
    assert_clean(&a);
    assert_clean(&b);
    let c = model(&b, |m| m.counters());
    assert_eq!(c.dropped_no_small_buffer + c.dropped_no_big_buffer, 0);
    assert!(
        b.nic.stats().rx_groups_posted > u64::from(total) / 8,
        "buffers went back in groups of 8"
    );
    // All sends completed (the send-done count came back in interrupt
    // blocks) and the ring is free again.
    while a.nic.poll_irq() {}
    assert_eq!(a.nic.tx_available(), 14);
    assert_eq!(model(&a, |m| m.counters().send_done_count), total);
}

#[test]
fn jumbo_frames_use_several_descriptors_across_the_ring_end() {
    let cfg = Myri10geConfig {
        mtu: 9000,
        ..config()
    };
    let (mut a, mut b) = pair_with(16, 16, cfg);
    assert_eq!(a.nic.max_frame_len(), 9014);
    assert_eq!(a.nic.big_buffer_size(), 16384);
    assert_eq!(a.nic.small_buffer_size(), 1518);
    let frames: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| {
            frame(
                MAC_B,
                MAC_A,
                i,
                [9014, 60, 4097, 1519, 2048, 2049][i as usize % 6],
            )
        })
        .collect();
    let got = exchange(&mut a, &mut b, &frames, 9);
    assert_eq!(got.len(), frames.len());
    assert!(got.iter().zip(&frames).all(|(g, f)| g == &padded(f)));
    assert_eq!(a.nic.stats().tx_descriptors, 500 * (5 + 1 + 3 + 1 + 1 + 2));
    assert_clean(&a);
    assert_clean(&b);
}

#[test]
fn lost_interrupt_messages_do_not_stall_polling() {
    let (mut a, mut b) = pair(32, 32);
    for n in [&a, &b] {
        n.nic.ack_interrupt();
        model(n, |m| m.lose_interrupt_messages(u32::MAX));
    }
    let frames: Vec<Vec<u8>> = (0..3000).map(|i| frame(MAC_B, MAC_A, i, 200)).collect();
    let got = exchange(&mut a, &mut b, &frames, 20);
    assert_eq!(got, frames);
    assert_eq!(a.nic.ack_interrupt() + b.nic.ack_interrupt(), 0, "no MSI-X");
    assert!(model(&a, |m| m.stats().msix_lost) > 10);
    assert!(
        a.nic.stats().irq_blocks > 10,
        "send completions came through the polled interrupt block"
    );
    assert_clean(&a);
}

#[test]
fn an_interrupt_lost_entirely_is_recovered_by_re_arming() {
    let (mut a, mut b) = pair(16, 32);
    // Settle the link-up interrupts first.
    while a.nic.poll_irq() {}
    while b.nic.poll_irq() {}
    // A's next interrupt (for its first sends) never reaches the host: no
    // block, no message, and the firmware waits for its claim.
    model(&a, |m| m.lose_interrupts(1));
    let mut seq = 0;
    while a.nic.send(&[&frame(MAC_B, MAC_A, seq, 100)]).unwrap() {
        seq += 1;
    }
    assert_eq!(seq, 14, "the send ring filled");
    assert_eq!(recv_all(&mut b, 64).len(), 14, "the frames went out");
    assert_eq!(model(&a, |m| m.stats().interrupts_lost), 1);
    // Unclaimed, the firmware raises nothing, even for a received frame.
    let before = model(&a, |m| m.stats().interrupts);
    assert!(b.nic.send(&[&frame(MAC_A, MAC_B, 1000, 100)]).unwrap());
    assert_eq!(model(&a, |m| m.stats().interrupts), before);
    assert_eq!(
        recv_all(&mut a, 64).len(),
        1,
        "receiving needs no interrupt"
    );
    assert_eq!(a.nic.tx_available(), 0);
    // After STALL_POLLS quiet polls the driver claims again; the firmware
    // then raises the interrupt it held back (for the received frame),
    // whose block carries the cumulative send-done count and frees the
    // ring.
    for _ in 0..STALL_POLLS {
        a.nic.poll_irq();
    }
    assert_eq!(a.nic.stats().irq_rearms, 1);
    assert_eq!(model(&a, |m| m.stats().interrupts), before + 1);
    assert_eq!(a.nic.tx_available(), 14);
    let frames: Vec<Vec<u8>> = (14..2000).map(|i| frame(MAC_B, MAC_A, i, 100)).collect();
    assert_eq!(exchange(&mut a, &mut b, &frames, 9), frames);
    assert_clean(&a);
    assert_clean(&b);
}

#[test]
fn a_full_receive_ring_drops_and_counts_and_refill_recovers() {
    let (mut a, mut b) = pair(64, 16);
    // 40 small frames while B takes none: 16 buffers, 24 drops.
    for i in 0..40 {
        assert!(a.nic.send(&[&frame(MAC_B, MAC_A, i, 64)]).unwrap());
        a.nic.poll_irq();
    }
    assert_eq!(model(&b, |m| m.counters().dropped_no_small_buffer), 24);
    let got = recv_all(&mut b, 64);
    assert_eq!(
        got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
        (0..16).collect::<Vec<_>>()
    );
    while b.nic.poll_irq() {}
    assert_eq!(b.nic.firmware_counters().dropped_no_small_buffer, 24);
    // Same for big frames.
    for i in 100..140 {
        while !a.nic.send(&[&frame(MAC_B, MAC_A, i, 1000)]).unwrap() {}
    }
    assert_eq!(recv_all(&mut b, 64).len(), 16);
    while b.nic.poll_irq() {}
    assert_eq!(b.nic.firmware_counters().dropped_no_big_buffer, 24);
    // Refilled: everything gets through again.
    let frames: Vec<Vec<u8>> = (200..300)
        .map(|i| frame(MAC_B, MAC_A, i, 64 + i as usize))
        .collect();
    assert_eq!(exchange(&mut a, &mut b, &frames, 8), frames);
    assert_clean(&a);
    assert_clean(&b);
}

#[test]
fn a_failing_firmware_command_is_a_clear_error() {
    let (e, h) = init_error(Default::default(), config(), |m| {
        m.fail_command(Cmd::ETHERNET_UP, CmdStatus::ERROR_BUSY, None)
    });
    assert!(
        matches!(
            e,
            Myri10geError::CommandFailed {
                cmd: Cmd::ETHERNET_UP,
                status: CmdStatus::ERROR_BUSY
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "firmware command MXGEFW_CMD_ETHERNET_UP (14) failed: MXGEFW_CMD_ERROR_BUSY (3)"
    );
    // The NIC was reset on the way out.
    let last = h.with_model(|m: &mut Myri10geModel| *m.commands().last().unwrap());
    assert_eq!(last.cmd, Cmd::RESET);
    assert_left_quiet(&h);

    let (e, h) = init_error(Default::default(), config(), |m| {
        m.fail_command(Cmd::RESET, CmdStatus(0x4242), Some(1))
    });
    assert_eq!(
        e.to_string(),
        "firmware command MXGEFW_CMD_RESET (1) failed: unknown result code 0x4242"
    );
    assert_left_quiet(&h);

    let (e, h) = init_error(Default::default(), config(), |m| {
        m.ignore_command(Cmd::SET_MTU)
    });
    assert!(
        matches!(
            e,
            Myri10geError::CommandTimeout {
                cmd: Cmd::SET_MTU,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("MXGEFW_CMD_SET_MTU (16) timed out"),
        "{e}"
    );
    assert_left_quiet(&h);
}

#[test]
fn optional_commands_may_fail_and_old_statistics_dma_is_used() {
    let (pa, pb) = Wire::new(64);
    let ha = host("0000:00:02.0", ring_cfg(MAC_A, 32, 32), &pa);
    ha.with_model(|m: &mut Myri10geModel| {
        m.fail_command(Cmd::SET_RSS_MCP_SLOT_TYPE, CmdStatus::UNKNOWN, None);
        m.fail_command(Cmd::SET_STATS_DMA_V2, CmdStatus::UNKNOWN, None);
    });
    let mut a = Nic {
        nic: Myri10ge::new(ha.clone(), config()).unwrap(),
        host: ha,
        port: pa,
    };
    let mut b = nic("0000:00:03.0", ring_cfg(MAC_B, 32, 32), pb, config());
    assert!(model(&a, |m| m
        .commands()
        .iter()
        .any(|c| c.cmd == Cmd::SET_STATS_DMA_OBSOLETE)));
    // The 40-byte block still brings send completions and the link state.
    let frames: Vec<Vec<u8>> = (0..500).map(|i| frame(MAC_B, MAC_A, i, 90)).collect();
    assert_eq!(exchange(&mut a, &mut b, &frames, 20), frames);
    while a.nic.poll_irq() {}
    assert_eq!(a.nic.link_state(), LinkState::Up);
    assert_eq!(a.nic.tx_available(), 30);
    assert_clean(&a);
}

#[test]
fn bad_answers_about_rings_are_refused() {
    for (cmd, data, want) in [
        (
            Cmd::GET_SEND_RING_SIZE,
            1000,
            "power-of-two number of 16-byte",
        ),
        (
            Cmd::GET_SEND_RING_SIZE,
            16,
            "power-of-two number of 16-byte",
        ),
        (Cmd::GET_RX_RING_SIZE, 0, "power-of-two number of 8-byte"),
        (
            Cmd::GET_RX_RING_SIZE,
            8 << 20,
            "power-of-two number of 8-byte",
        ),
        (Cmd::GET_SEND_OFFSET, 0x00ff_fff8, "outside BAR 0"),
        (Cmd::GET_BIG_RX_OFFSET, 0x2000_0000, "outside BAR 0"),
        (Cmd::GET_SMALL_RX_OFFSET, 0x30_0004, "not 8-byte aligned"),
        (Cmd::GET_IRQ_ACK_OFFSET, 0x0100_0000, "outside BAR 0"),
        (
            Cmd::GET_INTR_COAL_DELAY_OFFSET,
            0x3e_0202,
            "not a 4-byte word",
        ),
    ] {
        let (e, h) = init_error(Default::default(), config(), |m| {
            m.override_answer(cmd, data)
        });
        assert!(
            matches!(e, Myri10geError::BadAnswer { cmd: c, data: d, .. } if c == cmd && d == data),
            "{cmd}: {e}"
        );
        assert!(e.to_string().contains(want), "{e}");
        assert_left_quiet(&h);
    }
}

#[test]
fn bad_values_written_by_the_device_are_counted_not_trusted() {
    let (mut a, mut b) = pair(64, 16);
    let send = |a: &mut Nic, seq: u32, len: usize| {
        assert!(a.nic.send(&[&frame(MAC_B, MAC_A, seq, len)]).unwrap());
    };
    // A length longer than the big buffer: consumed, skipped.
    model(&b, |m| m.inject_rx_fault(RxFault::BadLength(0xfff0)));
    send(&mut a, 1, 1000);
    send(&mut a, 2, 1000);
    let got = recv_all(&mut b, 16);
    assert_eq!(got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(), vec![2]);
    // A length shorter than an Ethernet header: consumed, skipped.
    model(&b, |m| m.inject_rx_fault(RxFault::BadLength(5)));
    send(&mut a, 3, 60);
    send(&mut a, 4, 60);
    let got = recv_all(&mut b, 16);
    assert_eq!(got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(), vec![4]);
    assert_eq!(b.nic.stats().bad_rx_len, 2);
    // An rx-done entry no buffer backs: every posted small buffer is used
    // before the driver reads the ring, then comes one more entry.
    let posted = model(&b, |m| m.rx_buffers_posted().0);
    assert!(posted >= 9, "{posted}");
    for i in 0..posted - 1 {
        send(&mut a, 10 + i, 60);
    }
    model(&b, |m| m.inject_rx_fault(RxFault::Spurious(100)));
    send(&mut a, 9 + posted, 60);
    let got = recv_all(&mut b, 64);
    assert_eq!(
        got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
        (10..10 + posted).collect::<Vec<_>>()
    );
    assert_eq!(b.nic.stats().rx_no_buffer, 1);
    assert_eq!(model(&b, |m| m.counters().dropped_no_small_buffer), 0);
    // Frames still flow.
    send(&mut a, 30, 80);
    assert_eq!(recv_all(&mut b, 16).len(), 1);

    // A send-done count far ahead of what is in flight is ignored.
    while a.nic.poll_irq() {}
    model(&a, |m| m.inject_send_done_jump(1000));
    send(&mut a, 31, 80);
    while a.nic.poll_irq() {}
    assert_eq!(a.nic.stats().bad_send_done, 1);
    let frames: Vec<Vec<u8>> = (40..240).map(|i| frame(MAC_B, MAC_A, i, 70)).collect();
    let got = exchange(&mut a, &mut b, &frames, 8);
    assert_eq!(got.len(), 1 + frames.len(), "frame 31 and the rest");
    assert_eq!(&got[1..], &frames[..]);
    assert_clean(&a);
    assert_clean(&b);
}

#[test]
fn the_model_catches_driver_protocol_mistakes() {
    let (a, _b) = pair(16, 16);
    let bar = a.host.map_bar(0).unwrap();
    // Every receive descriptor is posted: rewriting one is a mistake.
    bar.write_u64(SMALL_RING_AT, 0);
    let e = model(&a, |m| m.last_error().map(str::to_string)).unwrap();
    assert!(
        e.contains("write to posted small receive descriptor 0"),
        "{e}"
    );
    // A send descriptor made valid without FIRST.
    let d = mcp::KreqEtherSend {
        addr: 0x1000,
        length: 60,
        rdma_count: 1,
        flags: mcp::MXGEFW_FLAGS_NO_TSO,
        ..Default::default()
    }
    .to_bytes();
    bar.write_u64(super::model::SEND_RING_AT, mcp::bytes_to_u64(&d[..8]));
    bar.write_u64(super::model::SEND_RING_AT + 8, mcp::bytes_to_u64(&d[8..]));
    let e = model(&a, |m| m.last_error().map(str::to_string)).unwrap();
    assert!(e.contains("must start with FIRST"), "{e}");
    assert_eq!(model(&a, |m| m.stats().protocol_errors), 2);
}

#[test]
fn interrupts_wake_the_eventfd_and_are_re_armed_by_claims() {
    let (mut a, mut b) = pair(32, 32);
    while b.nic.poll_irq() {}
    b.nic.ack_interrupt();
    for round in 0..5u32 {
        assert_eq!(b.nic.ack_interrupt(), 0, "round {round}: nothing pending");
        assert!(a.nic.send(&[&frame(MAC_B, MAC_A, round, 100)]).unwrap());
        assert_eq!(b.nic.ack_interrupt(), 1, "round {round}: one interrupt");
        assert_eq!(recv_all(&mut b, 16).len(), 1);
    }
    // Polling mode: no vector, no fd; frames still arrive.
    let (pc, pd) = Wire::new(16);
    let cfg = Myri10geConfig {
        interrupts: false,
        ..config()
    };
    let mut c = nic("0000:00:04.0", ring_cfg(MAC_A, 32, 32), pc, cfg.clone());
    let mut d = nic("0000:00:05.0", ring_cfg(MAC_B, 32, 32), pd, cfg);
    assert!(d.nic.interrupt_fd().is_none());
    assert!(c.nic.send(&[&frame(MAC_B, MAC_A, 1, 100)]).unwrap());
    assert_eq!(recv_all(&mut d, 16).len(), 1);
    assert!(d.host.stats().interrupts_masked > 0);
}

#[test]
fn shutdown_brings_the_link_down_and_stops_all_dma() {
    let (mut a, b) = pair(32, 32);
    a.nic.shutdown();
    assert!(!a.nic.is_up());
    assert_eq!(
        a.nic.stats().link_down_events,
        1,
        "the link-down interrupt came"
    );
    assert!(matches!(
        a.nic.send(&[&frame(MAC_B, MAC_A, 0, 60)]),
        Err(Myri10geError::Down)
    ));
    model(&a, |m| {
        let cmds: Vec<Cmd> = m.commands().iter().map(|c| c.cmd).collect();
        assert_eq!(&cmds[cmds.len() - 2..], &[Cmd::ETHERNET_DOWN, Cmd::RESET]);
        assert!(!m.is_up());
        assert!(!m.dummy_rdma(), "dummy RDMAs disabled");
    });
    let cmd = a.host.config_read_u16(CFG_COMMAND).unwrap();
    assert_eq!(cmd & COMMAND_BUS_MASTER, 0);
    // A frame for A now is lost in the NIC, with no DMA.
    b.port.send(frame(MAC_A, MAC_B, 1, 100));
    assert_eq!(model(&a, |m| m.stats().rx_while_down), 1);
    let host = a.host.clone();
    drop(a);
    assert_eq!(host.stats().dma_mappings, 0, "DMA memory released");
    assert_eq!(host.stats().dma_faults, 0);
    assert!(host.interrupt_eventfd(0).is_none(), "MSI-X disabled");
}

#[test]
fn the_wrong_device_and_impossible_mtus_are_refused() {
    let (p, _q) = Wire::new(4);
    let h = host(
        "0000:00:06.0",
        Myri10geModelConfig {
            device_id: 0x0001,
            ..Default::default()
        },
        &p,
    );
    let e = Myri10ge::new(h, config()).unwrap_err();
    assert!(
        e.to_string().contains("14c1:0001, not a Myri-10G NIC"),
        "{e}"
    );
    let h = host(
        "0000:00:07.0",
        Myri10geModelConfig {
            device_id: 0x0009,
            ..Default::default()
        },
        &p,
    );
    assert!(
        Myri10ge::new(h, config()).is_ok(),
        "0x0009 is a Myri-10G too"
    );
    for mtu in [67, 9001] {
        let h = host("0000:00:08.0", Default::default(), &p);
        let e = Myri10ge::new(h, Myri10geConfig { mtu, ..config() }).unwrap_err();
        assert!(matches!(e, Myri10geError::Config(_)), "{e}");
    }
}

#[test]
fn shutdown_still_resets_the_nic_when_ethernet_down_fails() {
    let (mut a, _b) = pair(32, 32);
    model(&a, |m| {
        m.fail_command(Cmd::ETHERNET_DOWN, CmdStatus::ERROR_BUSY, None)
    });
    a.nic.shutdown();
    assert_eq!(a.nic.stats().link_down_events, 0, "no link-down answer");
    let cmds: Vec<Cmd> = model(&a, |m| m.commands().iter().map(|c| c.cmd).collect());
    assert_eq!(&cmds[cmds.len() - 2..], &[Cmd::ETHERNET_DOWN, Cmd::RESET]);
    let cmd = a.host.config_read_u16(CFG_COMMAND).unwrap();
    assert_eq!(cmd & COMMAND_BUS_MASTER, 0);
    // After shutdown nothing touches the NIC any more.
    let before = a.host.stats().mmio_accesses;
    assert_eq!(a.nic.receive(16, |_| panic!("no frames")).unwrap(), 0);
    assert!(!a.nic.poll_irq());
    assert_eq!(a.nic.tx_available(), 0);
    assert_eq!(a.host.stats().mmio_accesses, before);
    assert_clean(&a);
}
