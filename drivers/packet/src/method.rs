//! The `packet` method.

use crate::sys::{
    can_open_packet_socket, interface_mtu, OpenError, PacketSocket, PACKET_OTHERHOST,
    PACKET_OUTGOING, RX_MAX_MAC_OFFSET, TP_STATUS_AVAILABLE, TP_STATUS_KERNEL,
    TP_STATUS_SEND_REQUEST, TP_STATUS_USER,
};
use bcl_core::wire::{DEFAULT_ETHERTYPE, HEADER_LEN};
use bcl_core::{
    Availability, Descriptor, LinkId, Method, MethodCaps, MethodCounters, MethodError, TxFrame,
};
use bcl_ether::{choose_interface, Interface, Mac};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The method's name, as in its descriptors.
pub const METHOD_NAME: &str = "packet";

/// Length of an Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;

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
    /// outgoing frames, another EtherType.
    pub rx_foreign: u64,
    /// Frames cut short by the ring or shorter than an Ethernet header,
    /// dropped.
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
}

/// Shared counters of a [`PacketMethod`]; keep a handle with
/// [`PacketMethod::counters`] to read them after the method was given to an
/// endpoint.
#[derive(Debug, Default)]
pub struct PacketCounters {
    rx_frames: AtomicU64,
    rx_foreign: AtomicU64,
    rx_truncated: AtomicU64,
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
        PacketStats {
            rx_frames: r(&self.rx_frames),
            rx_foreign: r(&self.rx_foreign),
            rx_truncated: r(&self.rx_truncated),
            rx_ring_drops: r(&self.rx_ring_drops),
            tx_frames: r(&self.tx_frames),
            tx_ring_full: r(&self.tx_ring_full),
            tx_errors: r(&self.tx_errors),
            links_learned: r(&self.links_learned),
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

/// Parses the address part of a `packet:` descriptor, `MAC/IFINDEX`.
pub fn parse_address(text: &str) -> Result<(Mac, u32), String> {
    let (mac, index) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?} is not MAC/IFINDEX (e.g. 02:bc:01:00:00:02/3)"))?;
    let mac: Mac = mac.parse()?;
    let index = index
        .parse()
        .map_err(|_| format!("interface index {index:?} is not a number"))?;
    Ok((mac, index))
}

/// Raw Ethernet frames with the BCL EtherType (see the crate documentation).
pub struct PacketMethod {
    sock: PacketSocket,
    iface: Interface,
    ethertype: u16,
    mtu: usize,
    links: Vec<Mac>,
    by_mac: HashMap<Mac, u32>,
    counters: Arc<PacketCounters>,
    closed: bool,
}

impl std::fmt::Debug for PacketMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketMethod")
            .field("iface", &self.iface.name)
            .field("mac", &self.iface.mac.to_string())
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
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

/// The link of `mac`, created on first sight.
fn link_for(links: &mut Vec<Mac>, by_mac: &mut HashMap<Mac, u32>, mac: Mac) -> (LinkId, bool) {
    if let Some(&i) = by_mac.get(&mac) {
        return (LinkId(i), false);
    }
    let i = links.len() as u32;
    links.push(mac);
    by_mac.insert(mac, i);
    (LinkId(i), true)
}

impl PacketMethod {
    /// Opens the method on the configured interface.
    pub fn open(cfg: PacketConfig) -> Result<PacketMethod, MethodError> {
        let iface =
            choose_interface(cfg.ifname.as_deref()).map_err(|e| not_usable(e.to_string()))?;
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
        if cfg.ethertype < 0x0600 {
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
        let frame_size = (RX_MAX_MAC_OFFSET + ETH_HEADER_LEN + 4 + if_mtu)
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
        Ok(PacketMethod {
            sock,
            iface,
            ethertype: cfg.ethertype,
            mtu: if_mtu,
            links: Vec::new(),
            by_mac: HashMap::new(),
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
        self.ethertype
    }

    /// The MAC address of `link`.
    pub fn link_mac(&self, link: LinkId) -> Option<Mac> {
        self.links.get(link.0 as usize).copied()
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
        Descriptor::new(
            METHOD_NAME,
            format!("{}/{}", self.iface.mac, self.iface.index),
        )
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let bad = |reason: String| MethodError::BadDescriptor {
            method: METHOD_NAME,
            descriptor: peer.clone(),
            reason,
        };
        if peer.method != METHOD_NAME {
            return Err(bad(format!(
                "it is for method {:?}, not {METHOD_NAME:?}",
                peer.method
            )));
        }
        let (mac, _) = parse_address(&peer.address).map_err(bad)?;
        if mac == self.iface.mac {
            return Err(bad(format!(
                "{mac} is this endpoint's own interface ({})",
                self.iface.name
            )));
        }
        Ok(link_for(&mut self.links, &mut self.by_mac, mac).0)
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let (mut shown, mut foreign, mut truncated, mut learned) = (0u64, 0u64, 0u64, 0u64);
        let ring = &mut self.sock.rx;
        let ethertype = self.ethertype.to_be_bytes();
        let mut taken = 0;
        while taken < budget {
            let i = ring.head;
            if ring.load_status(i) & TP_STATUS_USER == 0 {
                break;
            }
            taken += 1;
            match ring.rx_frame(i) {
                None => truncated += 1,
                Some((_, true, _)) => truncated += 1,
                Some((bytes, false, pkttype)) => {
                    if bytes.len() < ETH_HEADER_LEN {
                        truncated += 1;
                    } else if pkttype == PACKET_OUTGOING
                        || pkttype == PACKET_OTHERHOST
                        || bytes[12..14] != ethertype
                    {
                        foreign += 1;
                    } else {
                        let mut src = [0u8; 6];
                        src.copy_from_slice(&bytes[6..12]);
                        let (link, new) = link_for(&mut self.links, &mut self.by_mac, Mac(src));
                        learned += u64::from(new);
                        sink(link, &bytes[ETH_HEADER_LEN..]);
                        shown += 1;
                    }
                }
            }
            ring.store_status(i, TP_STATUS_KERNEL);
            ring.head = (i + 1) % ring.frames;
        }
        let c = &self.counters;
        add(&c.rx_frames, shown);
        add(&c.rx_foreign, foreign);
        add(&c.rx_truncated, truncated);
        add(&c.links_learned, learned);
        Ok(shown as usize)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.check_open()?;
        let mut count = 0usize;
        let mut bad = None;
        let mtu = self.mtu;
        let src = self.iface.mac.0;
        let ethertype = self.ethertype.to_be_bytes();
        let ring = &mut self.sock.tx;
        while count < ring.frames {
            let i = ring.head;
            if ring.load_status(i) != TP_STATUS_AVAILABLE {
                add(&self.counters.tx_ring_full, 1);
                break;
            }
            let data = ring.tx_data(i);
            let (eth, rest) = data.split_at_mut(ETH_HEADER_LEN);
            let Some(frame) = source(&mut rest[..mtu]) else {
                break;
            };
            let Some(dst) = self.links.get(frame.link.0 as usize) else {
                bad = Some(format!(
                    "frame for unknown link {}; discarded",
                    frame.link.0
                ));
                break;
            };
            if frame.len > mtu {
                bad = Some(format!(
                    "frame of {} bytes exceeds the MTU of {mtu} bytes; discarded",
                    frame.len
                ));
                break;
            }
            eth[..6].copy_from_slice(&dst.0);
            eth[6..12].copy_from_slice(&src);
            eth[12..14].copy_from_slice(&ethertype);
            ring.set_tx_len(i, ETH_HEADER_LEN + frame.len);
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
        MethodCounters {
            rx_frames: s.rx_frames,
            tx_frames: s.tx_frames,
            rx_foreign: s.rx_foreign,
            rx_malformed: s.rx_truncated,
            tx_errors: s.tx_errors,
            detail: vec![
                ("rx_ring_drops", s.rx_ring_drops),
                ("tx_ring_full", s.tx_ring_full),
                ("links_learned", s.links_learned),
            ],
        }
    }

    fn shutdown(&mut self) {
        self.closed = true;
    }
}
