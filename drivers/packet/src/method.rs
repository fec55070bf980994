//! The `packet` method.

use crate::sys::{
    can_open_packet_socket, interface_mtu, OpenError, PacketSocket, RX_MAX_MAC_OFFSET,
    TP_STATUS_AVAILABLE, TP_STATUS_KERNEL, TP_STATUS_SEND_REQUEST, TP_STATUS_USER,
};
use bcl_core::wire::{DEFAULT_ETHERTYPE, HEADER_LEN};
use bcl_core::{
    Availability, Descriptor, LinkId, Method, MethodCaps, MethodCounters, MethodError, TxFrame,
};
use bcl_ether::{
    choose_interface, DescriptorAddress, Interface, Mac, RxStats, SharedRxStats, Station,
    MIN_ETHERTYPE, VLAN_TAG_LEN,
};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The method's name, as in its descriptors.
pub const METHOD_NAME: &str = "packet";

/// How to open a [`PacketMethod`].
#[derive(Clone, Debug)]
pub struct PacketConfig {
    /// The interface; `None` = the only non-loopback interface that is up.
    pub ifname: Option<String>,
    /// EtherType of BCL frames (default 0x88B5, IEEE local experimental).
    pub ethertype: u16,
    /// Frames of the receive ring (default 1024).
    pub rx_frames: usize,
    /// Frames of the transmit ring (default 256).
    pub tx_frames: usize,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            ifname: None,
            ethertype: DEFAULT_ETHERTYPE,
            rx_frames: 1024,
            tx_frames: 256,
        }
    }
}

/// A snapshot of a [`PacketMethod`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames shown to the core.
    pub rx_frames: u64,
    /// Frames not for us, dropped: another host's destination MAC, our own
    /// frames, another EtherType ([`RxStats::foreign`]).
    pub rx_foreign: u64,
    /// Malformed frames, dropped: cut short by the ring, shorter than an
    /// Ethernet header, from a multicast source ([`RxStats::malformed`]).
    pub rx_truncated: u64,
    /// Frames the kernel dropped because the receive ring was full (read
    /// from PACKET_STATISTICS at each [`PacketMethod::stats`]).
    pub rx_ring_drops: u64,
    /// Frames handed to the kernel for sending.
    pub tx_frames: u64,
    /// Transmit bursts cut short because the ring had no free frame.
    pub tx_ring_full: u64,
    /// `send()` kicks that failed (their frames are lost; the protocol
    /// retransmits).
    pub tx_errors: u64,
    /// Links opened because a new source MAC sent to us.
    pub links_learned: u64,
    /// The receive filter's counts, reason by reason.
    pub rx: RxStats,
}

/// Shared counters of a [`PacketMethod`]; keep a handle with
/// [`PacketMethod::counters`] to read them after the method was given to an
/// endpoint.
#[derive(Debug, Default)]
pub struct PacketCounters {
    rx: SharedRxStats,
    rx_ring_drops: AtomicU64,
    tx_frames: AtomicU64,
    tx_ring_full: AtomicU64,
    tx_errors: AtomicU64,
    links_learned: AtomicU64,
}

impl PacketCounters {
    /// The current values.
    pub fn snapshot(&self) -> PacketStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let rx = self.rx.snapshot();
        PacketStats {
            rx_frames: rx.accepted,
            rx_foreign: rx.foreign(),
            rx_truncated: rx.malformed(),
            rx_ring_drops: r(&self.rx_ring_drops),
            tx_frames: r(&self.tx_frames),
            tx_ring_full: r(&self.tx_ring_full),
            tx_errors: r(&self.tx_errors),
            links_learned: r(&self.links_learned),
            rx,
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Whether the `packet` method can be used by this thread: it needs
/// CAP_NET_RAW to open an AF_PACKET socket.
pub fn probe() -> Availability {
    match can_open_packet_socket() {
        Ok(()) => Availability::Usable,
        Err(OpenError::NoCapability) => Availability::NotUsable("needs CAP_NET_RAW".into()),
        Err(OpenError::Io(e)) => {
            Availability::NotUsable(format!("cannot open an AF_PACKET socket: {e}"))
        }
    }
}

/// Parses the address part of a descriptor of any Ethernet method,
/// `MAC[/IFINDEX][@PCI]` ([`bcl_ether::descriptor`]).
pub fn parse_address(text: &str) -> Result<DescriptorAddress, String> {
    text.parse()
}

/// Raw Ethernet frames with the BCL EtherType (see the crate documentation).
pub struct PacketMethod {
    sock: PacketSocket,
    iface: Interface,
    mtu: usize,
    station: Station,
    counters: Arc<PacketCounters>,
    closed: bool,
}

impl std::fmt::Debug for PacketMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketMethod")
            .field("iface", &self.iface.name)
            .field("mac", &self.iface.mac.to_string())
            .field(
                "ethertype",
                &format_args!("{:#06x}", self.station.ethertype()),
            )
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

fn not_usable(reason: String) -> MethodError {
    MethodError::NotUsable {
        method: METHOD_NAME,
        reason,
    }
}

/// Opens the AF_PACKET socket and rings of `cfg` on its interface: what
/// the method and the bare-frame floor ([`crate::RawPacket`]) share.
/// Returns the socket, the interface and its MTU.
pub(crate) fn open_socket(
    cfg: &PacketConfig,
) -> Result<(PacketSocket, Interface, usize), MethodError> {
    let iface = choose_interface(cfg.ifname.as_deref()).map_err(|e| not_usable(e.to_string()))?;
    if !iface.up {
        return Err(not_usable(format!("interface {} is down", iface.name)));
    }
    let if_mtu = interface_mtu(&iface.name).map_err(|e| MethodError::Io {
        method: METHOD_NAME,
        context: format!("MTU of {}", iface.name),
        source: e,
    })?;
    if if_mtu <= HEADER_LEN {
        return Err(not_usable(format!(
            "interface {} has MTU {if_mtu}, too small for a BCL frame",
            iface.name
        )));
    }
    if cfg.ethertype < MIN_ETHERTYPE {
        return Err(MethodError::Other {
            method: METHOD_NAME,
            reason: format!(
                "EtherType {:#06x} is below 0x0600 (that is an 802.3 length)",
                cfg.ethertype
            ),
        });
    }
    // Room for the ring header, the MAC header (and a VLAN tag) and the
    // largest frame.
    let frame_size = (RX_MAX_MAC_OFFSET + bcl_ether::HEADER_LEN + VLAN_TAG_LEN + if_mtu)
        .next_power_of_two()
        .max(2048);
    let sock = PacketSocket::open(
        iface.index,
        cfg.ethertype,
        frame_size,
        cfg.rx_frames.max(8),
        cfg.tx_frames.max(8),
    )
    .map_err(|e| match e {
        OpenError::NoCapability => not_usable("needs CAP_NET_RAW".into()),
        OpenError::Io(source) => MethodError::Io {
            method: METHOD_NAME,
            context: format!("AF_PACKET socket on {}", iface.name),
            source,
        },
    })?;
    Ok((sock, iface, if_mtu))
}

impl PacketMethod {
    /// Opens the method on the configured interface.
    pub fn open(cfg: PacketConfig) -> Result<PacketMethod, MethodError> {
        let (sock, iface, mtu) = open_socket(&cfg)?;
        Ok(PacketMethod {
            sock,
            station: Station::new(iface.mac, cfg.ethertype),
            iface,
            mtu,
            counters: Arc::default(),
            closed: false,
        })
    }

    /// The interface in use.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The EtherType in use.
    pub fn ethertype(&self) -> u16 {
        self.station.ethertype()
    }

    /// The MAC address of `link`.
    pub fn link_mac(&self, link: LinkId) -> Option<Mac> {
        self.station.link_mac(link)
    }

    /// A handle on the method's counters that stays valid after the method
    /// is moved into an endpoint.
    pub fn counters(&self) -> Arc<PacketCounters> {
        self.counters.clone()
    }

    /// The current counters (also collects the kernel's ring-drop count).
    pub fn stats(&self) -> PacketStats {
        add(&self.counters.rx_ring_drops, self.sock.take_drops());
        self.counters.snapshot()
    }

    fn check_open(&self) -> Result<(), MethodError> {
        if self.closed {
            Err(MethodError::Other {
                method: METHOD_NAME,
                reason: format!("method on {} is shut down", self.iface.name),
            })
        } else {
            Ok(())
        }
    }
}

impl Method for PacketMethod {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: self.mtu,
            // veth and software bridges never check an Ethernet FCS.
            integrity: false,
            reliable: false,
        }
    }

    fn descriptor(&self) -> Descriptor {
        let a = self.station.address().with_ifindex(self.iface.index);
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
        self.check_open()?;
        let mut shown = 0usize;
        let ring = &mut self.sock.rx;
        let station = &mut self.station;
        let mut taken = 0;
        while taken < budget {
            let i = ring.head;
            if ring.load_status(i) & TP_STATUS_USER == 0 {
                break;
            }
            taken += 1;
            // The filter's destination and source checks drop, from the
            // bytes alone, what the kernel marks PACKET_OTHERHOST (another
            // station's frame, seen in promiscuous mode) and
            // PACKET_OUTGOING (our own).
            match ring.rx_frame(i) {
                Some((bytes, false)) => {
                    if let Some((link, frame)) = station.receive(bytes) {
                        sink(link, frame);
                        shown += 1;
                    }
                }
                None | Some((_, true)) => station.stats_mut().truncated += 1,
            }
            ring.store_status(i, TP_STATUS_KERNEL);
            ring.head = (i + 1) % ring.frames;
        }
        if taken > 0 {
            self.counters.rx.publish(station.stats());
            self.counters
                .links_learned
                .store(station.peers().learned(), Ordering::Relaxed);
        }
        Ok(shown)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let mut count = 0usize;
        let mut bad = None;
        let mtu = self.mtu;
        let station = &self.station;
        let ring = &mut self.sock.tx;
        while count < ring.frames {
            let i = ring.head;
            if ring.load_status(i) != TP_STATUS_AVAILABLE {
                add(&self.counters.tx_ring_full, 1);
                break;
            }
            let Some((eth, rest)) = ring.tx_data(i).split_first_chunk_mut() else {
                bad = Some("transmit ring frame shorter than an Ethernet header".into());
                break;
            };
            let Some(frame) = source(&mut rest[..mtu]) else {
                break;
            };
            if !station.write_header(frame.link, eth) {
                bad = Some(format!(
                    "frame for unknown link {}; discarded",
                    frame.link.0
                ));
                break;
            }
            if frame.len > mtu {
                bad = Some(format!(
                    "frame of {} bytes exceeds the MTU of {mtu} bytes; discarded",
                    frame.len
                ));
                break;
            }
            ring.set_tx_len(i, bcl_ether::HEADER_LEN + frame.len);
            ring.store_status(i, TP_STATUS_SEND_REQUEST);
            ring.head = (i + 1) % ring.frames;
            count += 1;
        }
        if count > 0 {
            add(&self.counters.tx_frames, count as u64);
            if self.sock.kick().is_err() {
                add(&self.counters.tx_errors, 1);
            }
        }
        match bad {
            None => Ok(count),
            Some(reason) => Err(MethodError::Other {
                method: METHOD_NAME,
                reason,
            }),
        }
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        (!self.closed).then(|| self.sock.fd())
    }

    fn counters(&self) -> MethodCounters {
        let s = self.stats();
        let mut c = self.station.method_counters(s.tx_frames, s.tx_errors);
        c.detail.extend([
            ("rx_ring_drops", s.rx_ring_drops),
            ("tx_ring_full", s.tx_ring_full),
        ]);
        c
    }

    fn shutdown(&mut self) {
        self.closed = true;
    }
}
