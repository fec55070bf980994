//! The `afxdp` method: BCL frames in Ethernet II frames through AF_XDP
//! sockets.
//!
//! * Descriptor: `afxdp:MAC/IFINDEX`, e.g. `afxdp:02:00:00:00:02:01/3`.
//!   Peers are addressed by MAC; the index after `/` is for people.
//!   [`Method::open_link`] also takes `packet:MAC/...` descriptors: the
//!   `packet` (AF_PACKET) method puts the same frames on the wire, so the
//!   two interoperate on one L2 segment.
//! * Frame: destination MAC, source MAC, EtherType (default 0x88B5,
//!   configurable), then the BCL frame; no padding is added.
//! * Receive: frames are shown to the core in place in the UMEM (no copy
//!   in user space), then their chunks go back to the fill ring. Frames of
//!   another EtherType never get here (the XDP program passes them to the
//!   kernel); frames for another unicast MAC, runts and frames from a
//!   multicast source are skipped and counted. A frame from a MAC never
//!   seen before gets a new link so the core can answer.
//! * Transmit: the core writes each frame straight into a UMEM chunk, 14
//!   bytes in; the Ethernet header goes in front; the batch is submitted
//!   with one release store and one `sendto` kick when the kernel asks.
//! * MTU: the interface MTU. Frames larger than one UMEM chunk (after the
//!   kernel's 256-byte RX headroom) travel as multi-buffer frames over
//!   several chunks, assembled before the core sees them; where the kernel
//!   refuses those, the MTU is capped by what one chunk holds.

use std::os::fd::RawFd;

use bcl_core::method::{
    Availability, Descriptor, LinkId, Method, MethodCaps, MethodCounters, MethodError, TxFrame,
};
use rustc_hash::FxHashMap;

use crate::config::{format_mac, parse_mac, AfXdpConfig, AfXdpError, ModeReport, ETH_HLEN};
use crate::raw::RawXsk;
use crate::xsk::QueueStats;

/// The method's name.
pub const METHOD_NAME: &str = "afxdp";
/// Descriptor methods whose frames are wire-compatible with ours.
pub const COMPATIBLE_METHODS: [&str; 2] = ["afxdp", "packet"];
/// Most links (distinct peer MACs) one endpoint keeps.
pub const MAX_LINKS: usize = 65_536;

/// Counters of an [`AfXdpMethod`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MethodStats {
    /// BCL frames sent.
    pub tx_frames: u64,
    /// BCL frames shown to the core.
    pub rx_frames: u64,
    /// Frames skipped: another EtherType (should not happen: the XDP
    /// program filters them).
    pub rx_other_ethertype: u64,
    /// Frames skipped: addressed to another unicast MAC.
    pub rx_not_for_us: u64,
    /// Frames skipped: shorter than an Ethernet header.
    pub rx_runt: u64,
    /// Frames skipped: multicast source MAC.
    pub rx_bad_source: u64,
    /// Frames skipped: a new source while [`MAX_LINKS`] links exist.
    pub rx_link_limit: u64,
}

/// Peer MACs and their link numbers.
#[derive(Default)]
struct Links {
    list: Vec<[u8; 6]>,
    by_mac: FxHashMap<[u8; 6], LinkId>,
    /// The last source seen, to skip the hash lookup in a stream.
    last: Option<([u8; 6], LinkId)>,
}

impl Links {
    fn mac(&self, link: LinkId) -> Option<[u8; 6]> {
        self.list.get(link.0 as usize).copied()
    }

    fn get_or_add(&mut self, mac: [u8; 6]) -> Option<LinkId> {
        if let Some((m, l)) = self.last {
            if m == mac {
                return Some(l);
            }
        }
        let l = match self.by_mac.get(&mac) {
            Some(&l) => l,
            None => {
                if self.list.len() >= MAX_LINKS {
                    return None;
                }
                let l = LinkId(self.list.len() as u32);
                self.list.push(mac);
                self.by_mac.insert(mac, l);
                l
            }
        };
        self.last = Some((mac, l));
        Some(l)
    }
}

/// The `afxdp` method (see the module documentation).
pub struct AfXdpMethod {
    raw: Option<RawXsk>,
    mac: [u8; 6],
    ifindex: u32,
    ethertype: [u8; 2],
    mtu: usize,
    links: Links,
    stats: MethodStats,
    report: ModeReport,
}

fn other(reason: impl Into<String>) -> MethodError {
    MethodError::Other {
        method: METHOD_NAME,
        reason: reason.into(),
    }
}

fn closed() -> MethodError {
    other("the method was shut down")
}

impl AfXdpMethod {
    /// Opens the method on `config.ifname` in the calling thread's network
    /// namespace (see [`RawXsk::open`]).
    pub fn open(config: AfXdpConfig) -> Result<AfXdpMethod, AfXdpError> {
        let raw = RawXsk::open(&config)?;
        let mtu = (raw.if_mtu() as usize).min(raw.max_rx_frame() - ETH_HLEN);
        Ok(AfXdpMethod {
            mac: raw.mac(),
            ifindex: raw.ifindex(),
            ethertype: config.ethertype.to_be_bytes(),
            mtu,
            links: Links::default(),
            stats: MethodStats::default(),
            report: raw.mode_report().clone(),
            raw: Some(raw),
        })
    }

    /// What was obtained: attach mode, bind mode per queue, and why.
    pub fn mode_report(&self) -> &ModeReport {
        &self.report
    }

    /// Counters.
    pub fn stats(&self) -> MethodStats {
        self.stats
    }

    /// Counters per bound queue (empty after shutdown).
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.raw
            .as_ref()
            .map(RawXsk::queue_stats)
            .unwrap_or_default()
    }

    /// The MAC of `link`, if it exists.
    pub fn link_mac(&self, link: LinkId) -> Option<[u8; 6]> {
        self.links.mac(link)
    }

    /// The interface's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn parse_descriptor(d: &Descriptor) -> Result<[u8; 6], MethodError> {
        let bad = |reason: &str| MethodError::BadDescriptor {
            method: METHOD_NAME,
            descriptor: d.clone(),
            reason: reason.to_string(),
        };
        if !COMPATIBLE_METHODS.contains(&d.method.as_str()) {
            return Err(bad("not an afxdp or packet descriptor"));
        }
        let mac_text = d.address.split(['/', '@']).next().unwrap_or_default();
        let mac = parse_mac(mac_text)
            .ok_or_else(|| bad("expected a MAC like 02:00:00:00:02:01, optionally /IFINDEX"))?;
        if mac[0] & 1 != 0 {
            return Err(bad("a multicast MAC cannot name a peer"));
        }
        Ok(mac)
    }
}

impl Method for AfXdpMethod {
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
        Descriptor::new(
            METHOD_NAME,
            format!("{}/{}", format_mac(&self.mac), self.ifindex),
        )
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let mac = Self::parse_descriptor(peer)?;
        self.links
            .get_or_add(mac)
            .ok_or_else(|| other(format!("more than {MAX_LINKS} links")))
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        let Self {
            raw,
            links,
            stats,
            mac,
            ethertype,
            ..
        } = self;
        let raw = raw.as_mut().ok_or_else(closed)?;
        let own = *mac;
        let et = *ethertype;
        let mut shown = 0;
        raw.recv(budget, &mut |_queue, frame: &[u8]| {
            let Some((hdr, body)) = frame.split_first_chunk::<ETH_HLEN>() else {
                stats.rx_runt += 1;
                return;
            };
            if hdr[12..14] != et {
                stats.rx_other_ethertype += 1;
                return;
            }
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&hdr[0..6]);
            if dst != own && dst[0] & 1 == 0 {
                stats.rx_not_for_us += 1;
                return;
            }
            let mut src = [0u8; 6];
            src.copy_from_slice(&hdr[6..12]);
            if src[0] & 1 != 0 {
                stats.rx_bad_source += 1;
                return;
            }
            let Some(link) = links.get_or_add(src) else {
                stats.rx_link_limit += 1;
                return;
            };
            shown += 1;
            sink(link, body);
        })?;
        stats.rx_frames += shown as u64;
        Ok(shown)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        let Self {
            raw,
            links,
            stats,
            mac,
            ethertype,
            mtu,
            ..
        } = self;
        let raw = raw.as_mut().ok_or_else(closed)?;
        let mtu = *mtu;
        let mut failure: Option<MethodError> = None;
        let sent = raw.send_with(&mut |chunk: &mut [u8]| {
            if chunk.len() < ETH_HLEN + mtu {
                failure = Some(other("UMEM chunk smaller than the MTU"));
                return None;
            }
            let (hdr, body) = chunk.split_at_mut(ETH_HLEN);
            let TxFrame { link, len } = source(&mut body[..mtu])?;
            if len > mtu {
                failure = Some(other(format!("frame of {len} bytes exceeds the MTU {mtu}")));
                return None;
            }
            let Some(dst) = links.mac(link) else {
                failure = Some(other(format!("unknown link {}", link.0)));
                return None;
            };
            hdr[0..6].copy_from_slice(&dst);
            hdr[6..12].copy_from_slice(mac);
            hdr[12..14].copy_from_slice(ethertype);
            Some(ETH_HLEN + len)
        })?;
        stats.tx_frames += sent as u64;
        match failure {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        self.raw.as_ref().map(RawXsk::readiness_fd)
    }

    fn counters(&self) -> MethodCounters {
        let s = self.stats;
        MethodCounters {
            rx_frames: s.rx_frames,
            tx_frames: s.tx_frames,
            rx_foreign: s.rx_other_ethertype + s.rx_not_for_us,
            rx_malformed: s.rx_runt + s.rx_bad_source,
            tx_errors: 0,
            detail: vec![("rx_link_limit", s.rx_link_limit)],
        }
    }

    fn notes(&self) -> Vec<String> {
        self.report
            .to_string()
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    fn shutdown(&mut self) {
        // Detaches the XDP program and closes the sockets.
        self.raw = None;
    }
}

/// Whether the `afxdp` method can be used on interface `ifname` (in the
/// calling thread's network namespace), and if not, why: missing
/// capabilities, a kernel without AF_XDP sockets or `bpf()`, a verifier
/// that refuses the program, no such interface, interface down, or another
/// XDP program already attached.
pub fn probe(ifname: &str) -> Availability {
    match probe_reason(ifname) {
        None => Availability::Usable,
        Some(r) => Availability::NotUsable(r),
    }
}

fn probe_reason(ifname: &str) -> Option<String> {
    use crate::sys::errno_name;
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_NET_RAW: u32 = 13;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_BPF: u32 = 39;
    if let Ok(caps) = crate::sys::effective_caps() {
        let has = |c: u32| caps & (1u64 << c) != 0;
        let mut missing = Vec::new();
        if !has(CAP_NET_RAW) {
            missing.push("CAP_NET_RAW");
        }
        if !has(CAP_NET_ADMIN) {
            missing.push("CAP_NET_ADMIN");
        }
        if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
            missing.push("CAP_BPF");
        }
        if !missing.is_empty() {
            return Some(format!(
                "needs {} (AF_XDP sockets and XDP programs are privileged); run as root or grant them with setcap",
                missing.join(", ")
            ));
        }
    }
    match crate::sys::xdp_socket() {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            return Some("the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS is off)".into())
        }
        Err(e) => {
            return Some(format!(
                "cannot create an AF_XDP socket: {}",
                errno_name(&e)
            ))
        }
    }
    let map = match crate::bpf::create_xskmap(1, crate::xdp::MAP_NAME) {
        Ok(m) => m,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            return Some("the kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off)".into())
        }
        Err(e) => return Some(format!("cannot create an XSKMAP: {}", errno_name(&e))),
    };
    let prog = crate::bpf::redirect_program(
        crate::config::DEFAULT_ETHERTYPE,
        std::os::fd::AsRawFd::as_raw_fd(&map),
        crate::bpf::XDP_PASS,
    );
    if let Err(e) = crate::bpf::load_xdp_program(&prog, crate::xdp::PROG_NAME) {
        return Some(format!("the kernel refuses the XDP program: {e}"));
    }
    match crate::netlink::link_info(ifname) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            Some(format!("no interface {ifname} in this network namespace"))
        }
        Err(e) => Some(format!("cannot query interface {ifname}: {e}")),
        Ok(info) if !info.is_up() => Some(format!("interface {ifname} is down")),
        Ok(info) if info.mac.is_none() => Some(format!("interface {ifname} is not Ethernet")),
        Ok(info) => info.xdp.map(|p| {
            let name = crate::bpf::prog_info_by_id(p.prog_id)
                .map(|i| format!(" \"{}\"", i.name))
                .unwrap_or_default();
            format!(
                "interface {ifname} already has an XDP program (id {}{name}, {})",
                p.prog_id, p.mode
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_of_both_wire_compatible_methods_parse() {
        let ok = |s: &str| AfXdpMethod::parse_descriptor(&s.parse().unwrap());
        assert_eq!(ok("afxdp:02:00:00:00:02:01/3").unwrap(), [2, 0, 0, 0, 2, 1]);
        assert_eq!(ok("afxdp:02:00:00:00:02:01").unwrap(), [2, 0, 0, 0, 2, 1]);
        assert_eq!(
            ok("packet:02:00:00:00:02:0b/7").unwrap(),
            [2, 0, 0, 0, 2, 11]
        );
        assert_eq!(
            ok("packet:02-00-00-00-02-0B@to-b").unwrap(),
            [2, 0, 0, 0, 2, 11]
        );
        for bad in [
            "udp:10.0.0.1:7",
            "afxdp:02:00:00:00:02",
            "afxdp:zz:00:00:00:02:01/3",
            "afxdp:01:00:5e:00:00:01/3",
            "vfio:02:00:00:00:02:01",
        ] {
            assert!(
                matches!(ok(bad), Err(MethodError::BadDescriptor { .. })),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn links_are_stable_and_bounded() {
        let mut l = Links::default();
        let a = l.get_or_add([2, 0, 0, 0, 0, 1]).unwrap();
        let b = l.get_or_add([2, 0, 0, 0, 0, 2]).unwrap();
        assert_ne!(a, b);
        assert_eq!(l.get_or_add([2, 0, 0, 0, 0, 1]), Some(a));
        assert_eq!(l.get_or_add([2, 0, 0, 0, 0, 2]), Some(b));
        assert_eq!(l.mac(b), Some([2, 0, 0, 0, 0, 2]));
        assert_eq!(l.mac(LinkId(99)), None);
    }
}
