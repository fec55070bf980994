//! The `vfio` method: BCL frames in Ethernet II frames on a NIC driven from
//! user space.
//!
//! [`NicMethod`] implements [`Method`] over any NIC driver that implements
//! [`EthernetDevice`]: virtio-net ([`VirtioNet`]) and Myri-10G
//! ([`Myri10ge`]). [`VirtioNetMethod`] is virtio-net on a function bound to
//! `vfio-pci`; [`Myri10geMethod`] is a Myri-10G NIC; [`open_nic`] picks
//! the one the device needs.
//!
//! * Descriptor: `vfio:MAC@PCI`, e.g. `vfio:52:54:00:12:34:56@0000:00:02.0`:
//!   the MAC is the address, the PCI address after `@` is for people.
//!   [`Method::open_link`] takes a descriptor of any Ethernet method in the
//!   shared grammar `MAC[/IFINDEX][@PCI]` ([`bcl_ether::descriptor`]), so
//!   `packet:52:54:00:12:34:56/3` and `vfio:52:54:00:12:34:56` name the
//!   same peer.
//! * Frame: destination MAC, source MAC, EtherType (default 0x88B5,
//!   configurable), then the BCL frame. No padding is added; a link that
//!   pads short frames to 60 bytes hands the core trailing zeros, which
//!   the BCL header's lengths make harmless.
//! * Links, receive filtering and counters are [`bcl_ether::Station`]'s: a
//!   frame from a MAC never seen before gets a new link, so the core can
//!   answer (at most [`bcl_ether::MAX_PEERS`]); frames of another
//!   EtherType, for another unicast MAC, from ourselves, runts and frames
//!   from multicast sources are dropped and counted ([`MethodStats`]).
//! * MTU: 1500 bytes of BCL frame (the Ethernet header is extra) unless the
//!   device states its own MTU.
//! * Copies: DMA memory must not be referenced from Rust (see
//!   [`crate::dma`]), so the core writes a frame into a staging buffer that
//!   is copied into the DMA buffer, and a received frame is copied out of
//!   its DMA buffer before it is filtered and shown to the core: one copy
//!   each way.

use std::os::fd::RawFd;

use bcl_core::method::{
    Availability, Descriptor, LinkId, Method, MethodCaps, MethodCounters, MethodError, TxFrame,
};
use bcl_ether::{Mac, RxStats, Station, HEADER_LEN};

use crate::devices::supported_driver;
use crate::dma::DmaView;
use crate::myri10ge::{Myri10ge, Myri10geConfig, MYRICOM_VENDOR_ID};
use crate::nic::EthernetDevice;
use crate::pci::{PciAddress, PciFunction};
use crate::sysfs::Sysfs;
use crate::vfio::{precheck, VfioPciFunction};
use crate::virtio::net::{VirtioNet, VirtioNetConfig};

/// The method's name.
pub const METHOD_NAME: &str = "vfio";
/// Default EtherType of BCL frames (IEEE local experimental 1).
pub const DEFAULT_ETHERTYPE: u16 = bcl_core::wire::DEFAULT_ETHERTYPE;

/// Settings of the `vfio` method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VfioMethodConfig {
    /// EtherType of BCL frames.
    pub ethertype: u16,
    /// Entries per NIC queue.
    pub queue_size: u16,
    /// Use MSI-X for a blocking mode ([`Method::readiness_fd`]).
    pub interrupts: bool,
}

impl Default for VfioMethodConfig {
    fn default() -> Self {
        Self {
            ethertype: DEFAULT_ETHERTYPE,
            queue_size: 256,
            interrupts: true,
        }
    }
}

/// Counters of a [`NicMethod`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MethodStats {
    /// BCL frames sent.
    pub tx_frames: u64,
    /// BCL frames shown to the core.
    pub rx_frames: u64,
    /// The receive filter's counts, reason by reason.
    pub rx: RxStats,
}

/// The `vfio` method over an [`EthernetDevice`] (see the module
/// documentation).
pub struct NicMethod<N: EthernetDevice> {
    nic: N,
    mtu: usize,
    station: Station,
    stage_tx: Vec<u8>,
    stage_rx: Vec<u8>,
    tx_frames: u64,
}

/// The `vfio` method on a virtio-net NIC bound to `vfio-pci`.
pub type VirtioNetMethod = NicMethod<VirtioNet<VfioPciFunction>>;

/// The `vfio` method on a Myri-10G NIC bound to `vfio-pci`.
pub type Myri10geMethod = NicMethod<Myri10ge<VfioPciFunction>>;

fn other(reason: impl Into<String>) -> MethodError {
    MethodError::Other {
        method: METHOD_NAME,
        reason: reason.into(),
    }
}

/// The function at `pci`, bound to vfio-pci and opened, once [`probe`]
/// says it can be; the error says why not.
fn open_function(pci: &str) -> Result<(PciAddress, VfioPciFunction), MethodError> {
    if let Availability::NotUsable(reason) = probe(pci) {
        return Err(MethodError::NotUsable {
            method: METHOD_NAME,
            reason,
        });
    }
    let address: PciAddress = pci.parse().map_err(|e| other(format!("{e}")))?;
    let function = VfioPciFunction::open(address).map_err(|e| MethodError::NotUsable {
        method: METHOD_NAME,
        reason: e.to_string(),
    })?;
    Ok((address, function))
}

impl VirtioNetMethod {
    /// Opens the virtio-net NIC at PCI address `pci` (bound to vfio-pci).
    /// Fails with
    /// [`MethodError::NotUsable`] and the reason [`probe`] gives when the
    /// device cannot be used.
    pub fn open(pci: &str, config: VfioMethodConfig) -> Result<Self, MethodError> {
        let (address, function) = open_function(pci)?;
        if function.ids().map(|(v, _)| v).ok() == Some(MYRICOM_VENDOR_ID) {
            return Err(MethodError::NotUsable {
                method: METHOD_NAME,
                reason: format!(
                    "{address} is a Myri-10G NIC: open it with Myri10geMethod::open (it needs its firmware)"
                ),
            });
        }
        let nic = VirtioNet::new(
            function,
            VirtioNetConfig {
                queue_size: config.queue_size,
                interrupts: config.interrupts,
            },
        )
        .map_err(|e| other(format!("{address}: {e}")))?;
        Ok(NicMethod::new(nic, config))
    }
}

impl Myri10geMethod {
    /// Opens the Myri-10G NIC at PCI address `pci` (bound to vfio-pci),
    /// loads its firmware and brings it up. Fails with
    /// [`MethodError::NotUsable`] and the reason [`probe`] gives when the
    /// device cannot be used.
    pub fn open(
        pci: &str,
        config: Myri10geConfig,
        method: VfioMethodConfig,
    ) -> Result<Self, MethodError> {
        let (address, function) = open_function(pci)?;
        let nic = Myri10ge::new(function, config).map_err(|e| other(format!("{address}: {e}")))?;
        Ok(NicMethod::new(nic, method))
    }
}

/// Opens the `vfio` method on the NIC at PCI address `pci` (bound to
/// vfio-pci) with the driver its vendor needs: Myri-10G NICs with
/// [`Myri10geMethod::open`] and its default firmware configuration
/// (interrupts as `config` says), every other supported NIC with
/// [`VirtioNetMethod::open`]. The error says why the device cannot be used
/// ([`probe`]'s reason when it is not usable).
pub fn open_nic(
    pci: &str,
    config: VfioMethodConfig,
) -> Result<Box<dyn bcl_core::method::Method>, MethodError> {
    let is_myricom = pci
        .parse::<PciAddress>()
        .ok()
        .and_then(|a| crate::sysfs::Sysfs::system().device(&a).ok().flatten())
        .is_some_and(|info| info.vendor == MYRICOM_VENDOR_ID);
    if is_myricom {
        let nic = Myri10geConfig {
            interrupts: config.interrupts,
            ..Default::default()
        };
        return Ok(Box::new(Myri10geMethod::open(pci, nic, config)?));
    }
    Ok(Box::new(VirtioNetMethod::open(pci, config)?))
}

impl<N: EthernetDevice> NicMethod<N> {
    /// The method over an initialised NIC.
    pub fn new(nic: N, config: VfioMethodConfig) -> Self {
        let mtu = nic.mtu();
        Self {
            station: Station::new(nic.mac(), config.ethertype),
            nic,
            mtu,
            stage_tx: vec![0; mtu],
            stage_rx: vec![0; (HEADER_LEN + mtu).max(65_536)],
            tx_frames: 0,
        }
    }

    /// The NIC driver.
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// The NIC driver, mutably (e.g. to send a raw frame in a test).
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.nic
    }

    /// Counters.
    pub fn stats(&self) -> MethodStats {
        let rx = *self.station.stats();
        MethodStats {
            tx_frames: self.tx_frames,
            rx_frames: rx.accepted,
            rx,
        }
    }

    /// The MAC of `link`, if it exists.
    pub fn link_mac(&self, link: LinkId) -> Option<Mac> {
        self.station.link_mac(link)
    }
}

impl<N: EthernetDevice + 'static> Method for NicMethod<N> {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: self.mtu,
            integrity: false,
            reliable: false,
        }
    }

    fn descriptor(&self) -> Descriptor {
        let a = self
            .station
            .address()
            .with_pci(self.nic.pci_address().to_string());
        Descriptor::new(METHOD_NAME, a.to_string())
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        self.station.open_link(METHOD_NAME, peer)
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        self.nic.ack_interrupt();
        let mut shown = 0;
        // The NIC is borrowed during `receive`; split the other fields out.
        let Self {
            nic,
            station,
            stage_rx,
            ..
        } = self;
        let r = nic.receive(budget, &mut |view: DmaView<'_>| {
            // The whole frame comes out of DMA memory (one copy), then the
            // filter reads it as any other Ethernet method does.
            let len = view.len();
            let Some(frame) = stage_rx.get_mut(..len) else {
                station.stats_mut().truncated += 1;
                return;
            };
            if !view.copy_to(0, frame) {
                station.stats_mut().truncated += 1;
                return;
            }
            if let Some((link, bcl)) = station.receive(frame) {
                shown += 1;
                sink(link, bcl);
            }
        });
        r.map_err(|e| other(e.to_string()))?;
        Ok(shown)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        let mut sent = 0;
        let mut result = Ok(());
        while self.nic.tx_space() > 0 {
            let Some(TxFrame { link, len }) = source(&mut self.stage_tx[..self.mtu]) else {
                break;
            };
            if len > self.mtu {
                result = Err(other(format!(
                    "frame of {len} bytes exceeds the MTU {}",
                    self.mtu
                )));
                break;
            }
            let mut hdr = [0u8; HEADER_LEN];
            if !self.station.write_header(link, &mut hdr) {
                result = Err(other(format!("unknown link {}", link.0)));
                break;
            }
            match self.nic.send(&[&hdr, &self.stage_tx[..len]]) {
                Ok(true) => {
                    sent += 1;
                    self.tx_frames += 1;
                }
                Ok(false) => {
                    result = Err(other("NIC transmit ring full after reporting space"));
                    break;
                }
                Err(e) => {
                    result = Err(other(e.to_string()));
                    break;
                }
            }
        }
        self.nic.flush();
        result.map(|()| sent)
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        self.nic.interrupt_fd()
    }

    fn counters(&self) -> MethodCounters {
        self.station.method_counters(self.tx_frames, 0)
    }

    fn shutdown(&mut self) {
        self.nic.shutdown();
    }
}

/// Whether the NIC at PCI address `pci` can be used by the `vfio` method,
/// and if not, why (no such device, no BCL driver for it, no IOMMU, vfio
/// not loaded, not bound to vfio-pci, group not viable, busy, permission).
pub fn probe(pci: &str) -> Availability {
    probe_with(pci, &Sysfs::system())
}

/// [`probe`] against a given sysfs tree.
pub fn probe_with(pci: &str, sysfs: &Sysfs) -> Availability {
    let address: PciAddress = match pci.parse() {
        Ok(a) => a,
        Err(e) => return Availability::NotUsable(e.to_string()),
    };
    let info = match sysfs.device(&address) {
        Ok(Some(i)) => i,
        Ok(None) => {
            return Availability::NotUsable(format!(
                "no PCI device {address} (see `bcl-vfio list`)"
            ))
        }
        Err(e) => return Availability::NotUsable(format!("reading sysfs for {address}: {e}")),
    };
    if supported_driver(info.vendor, info.device).is_none() {
        return Availability::NotUsable(format!(
            "{address} is {:04x}:{:04x}; no BCL driver supports it (supported: {})",
            info.vendor,
            info.device,
            crate::devices::SUPPORTED_DEVICES
                .iter()
                .map(|(v, d, n)| format!("{v:04x}:{d:04x} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    match precheck(address, sysfs) {
        Ok(_) => Availability::Usable,
        Err(e) => Availability::NotUsable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::fake::FakeSys;
    use crate::testing::InMemoryPci;
    use crate::virtio::tests::{pair, MAC_A, MAC_B};

    type ModelMethod = NicMethod<VirtioNet<InMemoryPci>>;

    fn methods(queue_max: u16) -> (ModelMethod, ModelMethod) {
        let (a, b) = pair(queue_max, VirtioNetConfig::default());
        let cfg = VfioMethodConfig::default();
        (NicMethod::new(a.net, cfg), NicMethod::new(b.net, cfg))
    }

    fn bcl_frame(seq: u32, len: usize) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len)
            .map(|i| (i as u32).wrapping_mul(seq | 1) as u8)
            .collect();
        if len >= 4 {
            f[..4].copy_from_slice(&seq.to_be_bytes());
        }
        f
    }

    /// Sends `frames` on `link` with as many tx_burst calls as needed,
    /// draining the receiver in between; returns what it received.
    fn exchange(
        tx: &mut ModelMethod,
        rx: &mut ModelMethod,
        link: LinkId,
        frames: &[Vec<u8>],
    ) -> Vec<(LinkId, Vec<u8>)> {
        let mut next = 0;
        let mut got = Vec::new();
        for _ in 0..10_000 {
            tx.tx_burst(&mut |buf: &mut [u8]| {
                let f = frames.get(next)?;
                buf[..f.len()].copy_from_slice(f);
                next += 1;
                Some(TxFrame { link, len: f.len() })
            })
            .unwrap();
            rx.rx_burst(64, &mut |l, bytes| got.push((l, bytes.to_vec())))
                .unwrap();
            if got.len() == frames.len() {
                break;
            }
        }
        got
    }

    #[test]
    fn descriptor_names_the_mac_and_pci_address_and_links_are_stable() {
        let (mut a, b) = methods(16);
        assert_eq!(a.name(), "vfio");
        let d = b.descriptor();
        assert_eq!(d.to_string(), "vfio:52:54:00:00:00:0b@0000:00:03.0");
        let parsed: Descriptor = d.to_string().parse().unwrap();
        let l1 = a.open_link(&parsed).unwrap();
        let l2 = a
            .open_link(&"vfio:52:54:00:00:00:0b".parse().unwrap())
            .unwrap();
        let l3 = a
            .open_link(&"vfio:52-54-00-00-00-0B".parse().unwrap())
            .unwrap();
        assert_eq!((l1, l1), (l2, l3));
        assert_eq!(a.link_mac(l1), Some(Mac(MAC_B)));
        // The other Ethernet methods' descriptors name the same peer.
        for other in ["packet:52:54:00:00:00:0b/3", "afxdp:52:54:00:00:00:0b/0"] {
            assert_eq!(a.open_link(&other.parse().unwrap()).unwrap(), l1);
        }
        for bad in [
            "udp:10.0.0.1:7",
            "vfio:52:54:00:00:00",
            "vfio:zz:54:00:00:00:0b",
            "vfio:01:00:5e:00:00:01",
            "vfio:52:54:00:00:00:0b@eth0",
            "vfio:52:54:00:00:00:0a@0000:00:02.0",
        ] {
            let d: Descriptor = bad.parse().unwrap();
            assert!(
                matches!(a.open_link(&d), Err(MethodError::BadDescriptor { .. })),
                "{bad} accepted"
            );
        }
        assert_eq!(
            a.caps(),
            MethodCaps {
                mtu: 1500,
                integrity: false,
                reliable: false
            }
        );
        assert!(a.readiness_fd().is_some());
    }

    #[test]
    fn frames_of_varied_sizes_go_there_and_back_on_the_right_links() {
        let (mut a, mut b) = methods(32);
        let to_b = a.open_link(&b.descriptor()).unwrap();
        let sizes = [
            1usize, 2, 13, 14, 46, 59, 60, 61, 64, 100, 128, 511, 1000, 1499, 1500,
        ];
        let frames: Vec<Vec<u8>> = (0..200)
            .map(|i| bcl_frame(i, sizes[i as usize % sizes.len()]))
            .collect();
        let got = exchange(&mut a, &mut b, to_b, &frames);
        assert_eq!(got.len(), frames.len());
        let from_a = got[0].0;
        assert_eq!(
            b.link_mac(from_a),
            Some(Mac(MAC_A)),
            "B allocated a link for A's MAC"
        );
        for ((l, bytes), f) in got.iter().zip(&frames) {
            assert_eq!(*l, from_a);
            assert_eq!(bytes, f);
        }
        // B answers on the link it learned; A sees the link it opened.
        let back: Vec<Vec<u8>> = frames.iter().rev().cloned().collect();
        let got = exchange(&mut b, &mut a, from_a, &back);
        assert_eq!(got.len(), back.len());
        assert!(got.iter().all(|(l, _)| *l == to_b));
        assert!(got.iter().map(|(_, f)| f).eq(back.iter()));
        assert_eq!(a.stats().tx_frames, 200);
        assert_eq!(b.stats().rx_frames, 200);
        // The wake-up fd was signalled and is cleared by rx_burst.
        assert_eq!(b.nic().ack_interrupt(), 0);
    }

    #[test]
    fn foreign_ethertypes_other_destinations_and_runts_are_skipped_and_counted() {
        let (mut a, mut b) = methods(32);
        let raw = |m: &mut ModelMethod, f: Vec<u8>| {
            assert!(m.nic_mut().send(&[&f]).unwrap());
            m.nic_mut().flush();
        };
        let hdr = |dst: [u8; 6], src: [u8; 6], et: u16, payload: &[u8]| {
            let mut f = dst.to_vec();
            f.extend_from_slice(&src);
            f.extend_from_slice(&et.to_be_bytes());
            f.extend_from_slice(payload);
            f
        };
        raw(&mut a, hdr(MAC_B, MAC_A, 0x0800, b"ipv4"));
        raw(&mut a, hdr(MAC_B, MAC_A, 0x86dd, b"ipv6"));
        raw(&mut a, hdr([2, 0, 0, 0, 0, 9], MAC_A, 0x88b5, b"not for B"));
        raw(
            &mut a,
            hdr(MAC_B, [1, 0, 0, 0, 0, 1], 0x88b5, b"multicast source"),
        );
        raw(&mut a, vec![0x52, 0x54, 0, 0, 0]);
        raw(&mut a, hdr([0xff; 6], MAC_A, 0x88b5, b"broadcast is fine"));
        raw(&mut a, hdr(MAC_B, MAC_A, 0x88b5, b""));
        let mut got = Vec::new();
        assert_eq!(
            b.rx_burst(64, &mut |l, f| got.push((l, f.to_vec())))
                .unwrap(),
            2
        );
        assert_eq!(got[0].1, b"broadcast is fine");
        assert_eq!(got[1].1, b"", "an empty BCL frame is still a frame");
        let s = b.stats();
        assert_eq!(s.rx.other_ethertype, 2);
        assert_eq!(s.rx.not_for_us, 1);
        assert_eq!(s.rx.multicast_source, 1);
        assert_eq!(s.rx.runt, 1);
        let c = b.counters();
        assert_eq!((c.rx_frames, c.rx_foreign, c.rx_malformed), (2, 3, 2));
        // A configurable EtherType: a method on 0x0800 now sees the IPv4 one.
        let (a2, b2) = pair(8, VirtioNetConfig::default());
        let mut a2 = NicMethod::new(a2.net, VfioMethodConfig::default());
        let mut b2 = NicMethod::new(
            b2.net,
            VfioMethodConfig {
                ethertype: 0x0800,
                ..Default::default()
            },
        );
        raw(&mut a2, hdr(MAC_B, MAC_A, 0x0800, b"ip"));
        let mut n = 0;
        b2.rx_burst(8, &mut |_, f| {
            assert_eq!(f, b"ip");
            n += 1;
        })
        .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn tx_burst_stops_at_a_full_ring_without_losing_frames() {
        let (mut a, mut b) = methods(8);
        let link = a.open_link(&b.descriptor()).unwrap();
        let mut offered = 0;
        let sent = a
            .tx_burst(&mut |buf| {
                buf[0] = offered as u8;
                offered += 1;
                Some(TxFrame { link, len: 1 })
            })
            .unwrap();
        assert_eq!(sent, 8, "ring of 8");
        assert_eq!(
            offered, 8,
            "the core was not asked for a frame that had no buffer"
        );
        let mut got = Vec::new();
        b.rx_burst(64, &mut |_, f| got.push(f[0])).unwrap();
        assert_eq!(got, (0..8).collect::<Vec<u8>>());
    }

    #[test]
    fn core_mistakes_are_errors_not_panics() {
        let (mut a, b) = methods(8);
        let link = a.open_link(&b.descriptor()).unwrap();
        let mut once = true;
        let e = a
            .tx_burst(&mut |_| {
                once.then(|| {
                    once = false;
                    TxFrame {
                        link: LinkId(7),
                        len: 10,
                    }
                })
            })
            .unwrap_err();
        assert!(e.to_string().contains("unknown link"), "{e}");
        let mut once = true;
        let e = a
            .tx_burst(&mut |buf| {
                once.then(|| {
                    once = false;
                    TxFrame {
                        link,
                        len: buf.len() + 1,
                    }
                })
            })
            .unwrap_err();
        assert!(e.to_string().contains("exceeds the MTU"), "{e}");
    }

    #[test]
    fn probe_explains_why_a_device_is_not_usable() {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeSys::new(dir.path()).unwrap();
        let s = Sysfs::new(f.root());
        let not_usable = |pci: &str| match probe_with(pci, &s) {
            Availability::NotUsable(r) => r,
            Availability::Usable => panic!("{pci} usable"),
        };
        assert!(not_usable("nonsense").contains("bad PCI address"));
        assert!(not_usable("0000:00:02.0").contains("no PCI device"));
        f.add_device(
            "0000:00:01.0",
            0x8086,
            0x10d3,
            0x020000,
            Some("e1000e"),
            Some(1),
        )
        .unwrap();
        let r = not_usable("0000:00:01.0");
        assert!(
            r.contains("8086:10d3") && r.contains("1af4:1041 virtio-net"),
            "{r}"
        );
        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            Some(2),
        )
        .unwrap();
        assert!(not_usable("00:02.0").contains("bcl-vfio bind 0000:00:02.0"));
        f.set_driver("0000:00:02.0", Some("vfio-pci")).unwrap();
        assert!(not_usable("00:02.0").contains("vfio-pci module is not loaded"));
        std::fs::write(dir.path().join("dev/vfio/vfio"), "").unwrap();
        std::fs::write(dir.path().join("dev/vfio/2"), "").unwrap();
        assert_eq!(probe_with("00:02.0", &s), Availability::Usable);
        // A Myri-10G NIC is supported too (opened with Myri10geMethod).
        f.add_device(
            "0000:00:04.0",
            0x14c1,
            0x0008,
            0x020000,
            Some("myri10ge"),
            Some(4),
        )
        .unwrap();
        assert!(not_usable("00:04.0").contains("bcl-vfio bind 0000:00:04.0"));
        f.set_driver("0000:00:04.0", Some("vfio-pci")).unwrap();
        std::fs::write(dir.path().join("dev/vfio/4"), "").unwrap();
        assert_eq!(probe_with("00:04.0", &s), Availability::Usable);
    }

    #[test]
    fn the_vfio_method_carries_bcl_frames_over_myri10ge() {
        use crate::myri10ge::tests::{pair as myri_pair, MAC_A as MYRI_A};

        let (a, b) = myri_pair(64, 64);
        let cfg = VfioMethodConfig::default();
        let mut ma = NicMethod::new(a.nic, cfg);
        let mut mb = NicMethod::new(b.nic, cfg);
        assert_eq!(
            mb.descriptor().to_string(),
            "vfio:00:60:dd:00:00:0b@0000:00:03.0"
        );
        assert_eq!(
            ma.caps(),
            MethodCaps {
                mtu: 1500,
                integrity: false,
                reliable: false
            }
        );
        assert!(ma.readiness_fd().is_some());
        let to_b = ma.open_link(&mb.descriptor()).unwrap();
        let sizes = [0usize, 1, 45, 46, 47, 100, 112, 113, 1000, 1499, 1500];
        let frames: Vec<Vec<u8>> = (0..300u32)
            .map(|i| {
                (0..sizes[i as usize % sizes.len()])
                    .map(|k| (k as u32 ^ i.wrapping_mul(77)) as u8)
                    .collect()
            })
            .collect();
        let mut next = 0;
        let mut got: Vec<(LinkId, Vec<u8>)> = Vec::new();
        for _ in 0..10_000 {
            // At most 32 frames per burst: B's 64-entry rings refill in groups
            // of 8, and a NIC drops what finds no buffer.
            let mut burst = 0;
            ma.tx_burst(&mut |buf: &mut [u8]| {
                burst += 1;
                if burst > 32 {
                    return None;
                }
                let f = frames.get(next)?;
                buf[..f.len()].copy_from_slice(f);
                next += 1;
                Some(TxFrame {
                    link: to_b,
                    len: f.len(),
                })
            })
            .unwrap();
            mb.rx_burst(64, &mut |l, bytes| got.push((l, bytes.to_vec())))
                .unwrap();
            if got.len() == frames.len() {
                break;
            }
        }
        assert_eq!(got.len(), frames.len());
        let from_a = got[0].0;
        assert_eq!(mb.link_mac(from_a), Some(Mac(MYRI_A)));
        for ((l, g), f) in got.iter().zip(&frames) {
            assert_eq!(*l, from_a);
            // Frames shorter than 60 bytes on the wire arrive padded with
            // zeros, which BCL's own lengths make harmless.
            assert_eq!(g.len(), f.len().max(46));
            assert_eq!(&g[..f.len()], &f[..]);
            assert!(g[f.len()..].iter().all(|&z| z == 0));
        }
        assert_eq!(ma.stats().tx_frames, 300);
        assert_eq!(mb.stats().rx_frames, 300);
    }
}
