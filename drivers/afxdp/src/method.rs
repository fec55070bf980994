//! The `afxdp` method: BCL frames in Ethernet II frames through AF_XDP
//! sockets.
//!
//! * Descriptor: `afxdp:MAC/IFINDEX`, e.g. `afxdp:02:00:00:00:02:01/3`.
//!   Peers are addressed by MAC; the index after `/` is for people.
//!   [`Method::open_link`] takes a descriptor of any Ethernet method in the
//!   shared grammar `MAC[/IFINDEX][@PCI]` ([`bcl_ether::descriptor`]):
//!   `packet` and `vfio` put the same frames on the wire, so they
//!   interoperate on one L2 segment.
//! * Frame: destination MAC, source MAC, EtherType (default 0x88B5,
//!   configurable), then the BCL frame; no padding is added. The header is
//!   written, and every received frame filtered, by [`bcl_ether::Station`].
//! * Receive: frames are shown to the core in place in the UMEM (no copy
//!   in user space), then their chunks go back to the fill ring. Frames of
//!   another EtherType never get here (the XDP program passes them to the
//!   kernel); frames for another unicast MAC, our own frames, runts and
//!   frames from a multicast source are skipped and counted. A frame from
//!   a MAC never seen before gets a new link so the core can answer.
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
use bcl_ether::{Mac, RxStats, Station, HEADER_LEN};

use crate::config::{AfXdpConfig, AfXdpError, ModeReport};
use crate::raw::RawXsk;
use crate::xsk::QueueStats;

/// The method's name.
pub const METHOD_NAME: &str = "afxdp";

/// Counters of an [`AfXdpMethod`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MethodStats {
    /// BCL frames sent.
    pub tx_frames: u64,
    /// BCL frames shown to the core.
    pub rx_frames: u64,
    /// The receive filter's counts, reason by reason (frames of another
    /// EtherType should not occur: the XDP program passes them on).
    pub rx: RxStats,
}

/// The `afxdp` method (see the module documentation).
pub struct AfXdpMethod {
    raw: Option<RawXsk>,
    ifindex: u32,
    mtu: usize,
    station: Station,
    tx_frames: u64,
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
        let mtu = (raw.if_mtu() as usize).min(raw.max_rx_frame() - HEADER_LEN);
        Ok(AfXdpMethod {
            station: Station::new(raw.mac(), config.ethertype),
            ifindex: raw.ifindex(),
            mtu,
            tx_frames: 0,
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
        let rx = *self.station.stats();
        MethodStats {
            tx_frames: self.tx_frames,
            rx_frames: rx.accepted,
            rx,
        }
    }

    /// Counters per bound queue (empty after shutdown).
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.raw
            .as_ref()
            .map(RawXsk::queue_stats)
            .unwrap_or_default()
    }

    /// The MAC of `link`, if it exists.
    pub fn link_mac(&self, link: LinkId) -> Option<Mac> {
        self.station.link_mac(link)
    }

    /// The interface's MAC.
    pub fn mac(&self) -> Mac {
        self.station.mac()
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
        let a = self.station.address().with_ifindex(self.ifindex);
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
        let Self { raw, station, .. } = self;
        let raw = raw.as_mut().ok_or_else(closed)?;
        let mut shown = 0;
        raw.recv(budget, &mut |_queue, frame: &[u8]| {
            if let Some((link, bcl)) = station.receive(frame) {
                shown += 1;
                sink(link, bcl);
            }
        })?;
        Ok(shown)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        let Self {
            raw,
            station,
            mtu,
            tx_frames,
            ..
        } = self;
        let raw = raw.as_mut().ok_or_else(closed)?;
        let mtu = *mtu;
        let mut failure: Option<MethodError> = None;
        let sent = raw.send_with(&mut |chunk: &mut [u8]| {
            let Some((hdr, body)) = chunk
                .split_first_chunk_mut()
                .filter(|(_, body)| body.len() >= mtu)
            else {
                failure = Some(other("UMEM chunk smaller than the MTU"));
                return None;
            };
            let TxFrame { link, len } = source(&mut body[..mtu])?;
            if len > mtu {
                failure = Some(other(format!("frame of {len} bytes exceeds the MTU {mtu}")));
                return None;
            }
            if !station.write_header(link, hdr) {
                failure = Some(other(format!("unknown link {}", link.0)));
                return None;
            }
            Some(HEADER_LEN + len)
        })?;
        *tx_frames += sent as u64;
        match failure {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        self.raw.as_ref().map(RawXsk::readiness_fd)
    }

    fn counters(&self) -> MethodCounters {
        self.station.method_counters(self.tx_frames, 0)
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
    use bcl_core::method::MethodKind;

    #[test]
    fn the_kind_checks_the_shared_ethernet_grammar() {
        let k = crate::AfXdpKind;
        for ok in [
            "02:00:00:00:02:01/3",
            "02:00:00:00:02:01",
            "02-00-00-00-02-0B",
            "52:54:00:12:34:56@0000:00:02.0",
        ] {
            assert!(k.check_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "10.0.0.1:7",
            "02:00:00:00:02",
            "zz:00:00:00:02:01/3",
            "01:00:5e:00:00:01/3",
            "02:00:00:00:02:01@to-b",
        ] {
            assert!(k.check_address(bad).is_err(), "{bad} accepted");
        }
    }
}
