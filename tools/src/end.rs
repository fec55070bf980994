//! What a tool measures and how one end of it is set up: the `--method`
//! value ([`MethodArg`]: a BCL method of the [registry](bcl::registry) or
//! a baseline), the settings of an end ([`EndSpec`]), the process
//! addresses and job of the tools' runs, and the port settings BCL ends
//! use.

use bcl::core::method::{Attachment, MethodKind};
use bcl::sim::FaultSpec;
use bcl::udp::local_ip;
use bcl::{Endpoint, JobKey, Method, PortConfig, ProcessAddr, ProgressMode, Registry};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// What the tools measure that is not BCL: the kernel's ways and the
/// floors BCL is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Baseline {
    /// Plain kernel UDP sockets.
    KernelUdp,
    /// A plain kernel TCP connection with TCP_NODELAY.
    KernelTcp,
    /// A Unix-domain stream socket, length-prefixed messages.
    Unix,
    /// Two cache lines ping-ponged in shared memory (messages of at most
    /// 40 bytes, always spinning): the floor of any shared-memory protocol.
    Spin,
    /// Bare AF_XDP frames, one message per frame, no BCL protocol: the
    /// floor of BCL over AF_XDP.
    AfxdpRaw,
    /// Bare frames on the packet method's AF_PACKET rings, one message per
    /// frame, no BCL protocol: the floor of BCL over packet.
    PacketRaw,
}

impl Baseline {
    /// Every baseline.
    pub const ALL: [Baseline; 6] = [
        Baseline::KernelUdp,
        Baseline::KernelTcp,
        Baseline::Unix,
        Baseline::Spin,
        Baseline::AfxdpRaw,
        Baseline::PacketRaw,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Baseline::KernelUdp => "kernel-udp",
            Baseline::KernelTcp => "kernel-tcp",
            Baseline::Unix => "unix",
            Baseline::Spin => "spin",
            Baseline::AfxdpRaw => "afxdp-raw",
            Baseline::PacketRaw => "packet-raw",
        }
    }

    /// One line for `--help`.
    pub fn summary(self) -> &'static str {
        match self {
            Baseline::KernelUdp => "plain kernel UDP sockets, no BCL",
            Baseline::KernelTcp => "a plain kernel TCP connection (TCP_NODELAY), no BCL",
            Baseline::Unix => "a Unix-domain stream socket between processes of one node",
            Baseline::Spin => "the shared-memory floor: two cache lines ping-ponged (<= 40 B)",
            Baseline::AfxdpRaw => "the AF_XDP floor: bare frames, one message each, no BCL",
            Baseline::PacketRaw => {
                "the AF_PACKET floor: bare frames on packet's rings, one message each, no BCL"
            }
        }
    }
}

/// The transport a tool measures: a BCL method (a name of the registry) or
/// a baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MethodArg {
    /// BCL over the method of this name.
    Bcl(&'static str),
    /// A baseline.
    Baseline(Baseline),
}

impl MethodArg {
    /// BCL over method `name` of the registry.
    pub fn bcl(name: &str) -> Result<MethodArg, String> {
        let registry = Registry::builtin();
        let kind = registry.lookup(name).map_err(|e| e.to_string())?;
        Ok(MethodArg::Bcl(kind.name()))
    }

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            MethodArg::Bcl(name) => name,
            MethodArg::Baseline(b) => b.name(),
        }
    }

    /// What the method is opened on, for BCL methods.
    pub fn attachment(self) -> Option<Attachment> {
        match self {
            MethodArg::Bcl(name) => Registry::builtin().get(name).map(|k| k.attachment()),
            MethodArg::Baseline(_) => None,
        }
    }

    /// Whether the method runs inside one process only (both ends local).
    pub fn in_process(self) -> bool {
        self.attachment() == Some(Attachment::InProcess)
    }

    /// Whether the method addresses peers by IP (takes --bind).
    pub fn is_ip(self) -> bool {
        match self {
            MethodArg::Bcl(_) => self.attachment() == Some(Attachment::IpAddress),
            MethodArg::Baseline(b) => matches!(b, Baseline::KernelUdp | Baseline::KernelTcp),
        }
    }

    /// Whether both ends run on one node by default (`--local` unless
    /// another role is given): in-process and node-local methods.
    pub fn local_by_default(self) -> bool {
        matches!(
            self.attachment(),
            Some(Attachment::InProcess | Attachment::Process)
        )
    }

    /// The `--method` help: every BCL method of the registry and every
    /// baseline, one line each.
    pub fn help() -> String {
        let mut s = String::from(
            "Transport to measure. The default, shm, runs both ends on this node (--local unless another role is given).\nBCL methods:",
        );
        for k in Registry::builtin().kinds() {
            s.push_str(&format!("\n  {:<11} {}", k.name(), k.summary()));
        }
        s.push_str("\nBaselines:");
        for b in Baseline::ALL {
            s.push_str(&format!("\n  {:<11} {}", b.name(), b.summary()));
        }
        s
    }
}

impl std::str::FromStr for MethodArg {
    type Err = String;

    fn from_str(s: &str) -> Result<MethodArg, String> {
        if let Some(b) = Baseline::ALL.into_iter().find(|b| b.name() == s) {
            return Ok(MethodArg::Baseline(b));
        }
        MethodArg::bcl(s).map_err(|_| {
            let baselines: Vec<&str> = Baseline::ALL.iter().map(|b| b.name()).collect();
            format!(
                "unknown method {s:?} (BCL methods: {}; baselines: {})",
                Registry::builtin().names().join(", "),
                baselines.join(", ")
            )
        })
    }
}

/// How to open an end: the method and its settings.
#[derive(Clone, Debug)]
pub struct EndSpec {
    /// The method.
    pub method: MethodArg,
    /// Busy-poll instead of blocking.
    pub busy_poll: bool,
    /// Interface of methods opened on one (a PCI address or the NIC's
    /// interface for a device method).
    pub ifname: Option<String>,
    /// Address (IP or IP:PORT) for IP methods.
    pub bind: Option<String>,
    /// EtherType of Ethernet methods.
    pub ethertype: u16,
    /// Faults of the sim method's wire.
    pub fault: Option<FaultSpec>,
    /// MTU of the sim method's wire.
    pub sim_mtu: usize,
    /// Lower bound of BCL's retransmission timeout (default: the core's).
    pub rto_min: Option<Duration>,
    /// Largest BCL frame of the udp method (default: the method's, which
    /// fits a 1500-byte IP MTU).
    pub udp_mtu: Option<usize>,
    /// PCI address of a device method's NIC.
    pub pci: Option<String>,
    /// Capture file of the BCL endpoints (`--pcap`; else `BCL_PCAP`).
    pub pcap: Option<std::path::PathBuf>,
    /// When congestion control acts (`--congestion`; else `BCL_CONGESTION`,
    /// else off).
    pub congestion: Option<bcl::core::CongestionMode>,
    /// Rails (`--rails`): per rail, its method if not `method`, and its
    /// interface. Empty: one NIC (`ifname`).
    pub rails: Vec<(Option<String>, String)>,
    /// The BCL port of both ends (`--port`; node-local methods use the
    /// process id instead).
    pub port: u16,
}

impl EndSpec {
    /// The serving end's process address (node 2, `--port`), for methods
    /// whose descriptors do not name it.
    pub fn server_addr(&self) -> ProcessAddr {
        ProcessAddr::new(SERVER_ADDR.node.0, self.port)
    }

    /// `method` with nothing else chosen (the tools' defaults: blocking,
    /// EtherType 0x88B5, a 1500-byte sim wire, the methods' own MTUs and
    /// timeouts, no interface, address or device named).
    pub fn new(method: MethodArg) -> Self {
        EndSpec {
            method,
            busy_poll: false,
            ifname: None,
            bind: None,
            ethertype: bcl::core::wire::DEFAULT_ETHERTYPE,
            fault: None,
            sim_mtu: 1500,
            rto_min: None,
            udp_mtu: None,
            pci: None,
            pcap: None,
            port: 0,
            congestion: None,
            rails: Vec::new(),
        }
    }

    /// The progress mode in effect: busy-poll when asked for, and always
    /// for methods that can only be polled (the sim fabric, the spin
    /// floor).
    pub fn mode(&self) -> ProgressMode {
        if self.busy_poll
            || self.method.in_process()
            || self.method == MethodArg::Baseline(Baseline::Spin)
        {
            ProgressMode::BusyPoll
        } else {
            ProgressMode::Blocking
        }
    }

    /// The NIC to name when opening a method of `kind`: `--pci` (device
    /// methods), else `--ifname`.
    pub fn nic(&self, kind: &dyn MethodKind) -> Option<String> {
        match kind.attachment() {
            Attachment::Device => self.pci.clone().or_else(|| self.ifname.clone()),
            // For the daemon: which of its NICs to go through.
            Attachment::Interface | Attachment::Daemon => self.ifname.clone(),
            _ => None,
        }
    }
}

/// The BCL process address of the serving end.
pub const SERVER_ADDR: ProcessAddr = ProcessAddr::new(2, 0);
/// The BCL process address of the connecting end.
pub const CLIENT_ADDR: ProcessAddr = ProcessAddr::new(1, 0);
/// The job key of the tools' runs.
pub const JOB: JobKey = JobKey(0xbc1_7001);

/// The address of an end on `node` (2 serves, 1 connects) for a method of
/// `kind`: port `port` (`--port`), except that a node-local method (shared memory, whose resources are named
/// after the process address) gets the process id as its port, so that
/// runs on one node never meet; the server's address then travels in its
/// descriptor ([`MethodKind::process_of`]).
pub fn end_addr(kind: &dyn MethodKind, node: u32, port: u16) -> ProcessAddr {
    if kind.attachment() == Attachment::Process {
        ProcessAddr::new(node, (std::process::id() & 0xffff) as u16)
    } else {
        ProcessAddr::new(node, port)
    }
}

/// Port settings of the tools: the largest eager messages the MTU allows
/// (at most 1 MiB) and a 4 MiB receive ring, so streams of large messages
/// flow.
pub fn configure(cfg: &mut PortConfig, mtu: usize, rto_min: Option<Duration>) {
    cfg.eager_limit = PortConfig::max_eager_limit(mtu).min(1 << 20);
    cfg.ring_block_size = 256;
    cfg.ring_blocks = 16384;
    if let Some(min) = rto_min {
        cfg.rto.min = min;
        cfg.rto.initial = cfg.rto.initial.max(min);
        cfg.rto.max = cfg.rto.max.max(min);
    }
}

/// An endpoint of process `addr` over `method`, configured for the tools.
pub fn endpoint(
    addr: ProcessAddr,
    method: Box<dyn Method>,
    spec: &EndSpec,
    clock: Option<bcl::sim::SimClock>,
) -> Result<Endpoint, String> {
    endpoint_over(addr, vec![method], spec, clock)
}

/// An endpoint of process `addr` over `methods` (several: one per rail,
/// striped), configured for the tools.
pub fn endpoint_over(
    addr: ProcessAddr,
    methods: Vec<Box<dyn Method>>,
    spec: &EndSpec,
    clock: Option<bcl::sim::SimClock>,
) -> Result<Endpoint, String> {
    let mtu = methods.iter().map(|m| m.caps().mtu).min().unwrap_or(0);
    let rails = methods.len() > 1;
    let mut b = Endpoint::builder(addr, JOB);
    for m in methods {
        b = b.method(m);
    }
    let mut b = b.rails(rails).mode(spec.mode()).configure(|c| {
        configure(c, mtu, spec.rto_min);
        if let Some(mode) = spec.congestion {
            c.congestion.mode = mode;
        }
    });
    if let Some(clock) = clock {
        b = b.clock(clock);
    }
    if let Some(file) = &spec.pcap {
        b = b.pcap(file);
    }
    b.build().map_err(|e| e.to_string())
}

/// Parses --bind: `IP` or `IP:PORT`.
pub fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    text.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| format!("--bind {text:?} is not IP or IP:PORT"))
}

/// The address a server binds: --bind, else an interface address (never a
/// wildcard), port chosen by the kernel.
pub fn server_bind(spec: &EndSpec) -> Result<SocketAddr, String> {
    let mut a = match &spec.bind {
        Some(b) => parse_bind(b)?,
        None => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    };
    if a.ip().is_unspecified() {
        a.set_ip(local_ip(a.ip()).map_err(|e| e.0)?);
    }
    Ok(a)
}

/// The address a client binds: --bind, else the server's loopback if it is
/// on loopback, else a wildcard of the server's family.
pub fn client_bind(spec: &EndSpec, server: SocketAddr) -> Result<SocketAddr, String> {
    if let Some(b) = &spec.bind {
        return parse_bind(b);
    }
    let ip = match (server.ip().is_loopback(), server.is_ipv4()) {
        (true, true) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (true, false) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        (false, true) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (false, false) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    Ok(SocketAddr::new(ip, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_message_fits_the_window() {
        let mut cfg = PortConfig::new(CLIENT_ADDR, JOB);
        for mtu in [200, 1452, 1472, 1500, 9000, 65_507] {
            configure(&mut cfg, mtu, Some(Duration::from_millis(5)));
            cfg.validate(Some(mtu)).unwrap();
            assert!(cfg.eager_limit <= 1 << 20);
        }
        configure(&mut cfg, 65_507, None);
        assert_eq!(cfg.eager_limit, 1 << 20);
    }

    #[test]
    fn bind_addresses_are_never_wildcards_on_the_server() {
        let spec = EndSpec::new(MethodArg::bcl("udp").unwrap());
        assert!(!server_bind(&spec).unwrap().ip().is_unspecified());
        let with = EndSpec {
            bind: Some("127.0.0.1".into()),
            ..spec.clone()
        };
        assert_eq!(server_bind(&with).unwrap(), "127.0.0.1:0".parse().unwrap());
        assert!(parse_bind("nonsense")
            .unwrap_err()
            .contains("IP or IP:PORT"));
    }

    #[test]
    fn method_names_come_from_the_registry_and_the_baselines() {
        for name in Registry::builtin().names() {
            assert_eq!(name.parse::<MethodArg>().unwrap(), MethodArg::Bcl(name));
        }
        for b in Baseline::ALL {
            assert_eq!(
                b.name().parse::<MethodArg>().unwrap(),
                MethodArg::Baseline(b)
            );
        }
        let e = "tcp".parse::<MethodArg>().unwrap_err();
        assert!(
            e.starts_with("unknown method \"tcp\" (BCL methods: shm, bcld, vfio, afxdp, packet, udp, sim; baselines: kernel-udp,"),
            "{e}"
        );
        let help = MethodArg::help();
        assert!(
            help.contains("\n  afxdp-raw ") && help.contains("\n  vfio "),
            "{help}"
        );
        assert!(MethodArg::bcl("udp").unwrap().is_ip());
        assert!(!MethodArg::bcl("packet").unwrap().is_ip());
        assert!(MethodArg::Baseline(Baseline::KernelTcp).is_ip());
        assert!(MethodArg::bcl("sim").unwrap().local_by_default());
        assert!(MethodArg::bcl("shm").unwrap().local_by_default());
    }
}
