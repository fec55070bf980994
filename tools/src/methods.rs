//! Which transport a tool measures, and how each end opens it: BCL over the
//! `packet`, `udp` or `sim` method, or the kernel UDP/TCP baselines.

use crate::bcl_transport::{BclTransport, ExtraBadFrames};
use crate::kernel::{KernelTcp, KernelUdp, TcpServer};
use crate::transport::Transport;
use bcl::core::sack::RX_WINDOW;
use bcl::core::wire::HEADER_LEN;
use bcl::packet::{PacketConfig, PacketMethod};
use bcl::sim::{FabricConfig, FaultSpec, RealClock, SimClock, SimFabric};
use bcl::udp::{local_ip, UdpConfig, UdpMethod};
use bcl::{Descriptor, Endpoint, JobKey, Method, PortConfig, ProcessAddr, ProgressMode};
use clap::ValueEnum;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

/// The transports the tools measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// BCL over raw Ethernet (AF_PACKET, EtherType 0x88B5); needs CAP_NET_RAW.
    Packet,
    /// BCL over UDP datagrams.
    Udp,
    /// BCL over the in-process simulated fabric (both ends in this process,
    /// real time, optional --fault): the protocol's own cost.
    Sim,
    /// Baseline: plain kernel UDP sockets, no BCL.
    KernelUdp,
    /// Baseline: a plain kernel TCP connection with TCP_NODELAY, no BCL.
    KernelTcp,
    /// BCL over AF_XDP (XDP redirect of EtherType 0x88B5 to AF_XDP
    /// sockets); needs root (CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF).
    Afxdp,
    /// Floor: bare AF_XDP frames, one message per frame, no BCL protocol.
    AfxdpRaw,
    /// BCL over a NIC driven from user space through VFIO (--pci; the NIC
    /// bound to vfio-pci with `bcl-vfio bind`); needs root.
    Vfio,
    /// BCL over shared memory between processes of one node (the default
    /// for --local).
    Shm,
    /// Baseline: a Unix-domain stream socket, length-prefixed messages.
    Unix,
    /// Floor: two cache lines ping-ponged in shared memory (messages of at
    /// most 40 bytes, always spinning).
    Spin,
}

impl MethodArg {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            MethodArg::Packet => "packet",
            MethodArg::Udp => "udp",
            MethodArg::Sim => "sim",
            MethodArg::KernelUdp => "kernel-udp",
            MethodArg::KernelTcp => "kernel-tcp",
            MethodArg::Afxdp => "afxdp",
            MethodArg::AfxdpRaw => "afxdp-raw",
            MethodArg::Vfio => "vfio",
            MethodArg::Shm => "shm",
            MethodArg::Unix => "unix",
            MethodArg::Spin => "spin",
        }
    }

    /// Whether the method addresses peers by IP (takes --bind).
    pub fn is_ip(self) -> bool {
        matches!(
            self,
            MethodArg::Udp | MethodArg::KernelUdp | MethodArg::KernelTcp
        )
    }
}

/// How to open an end: the method and its settings.
#[derive(Clone, Debug)]
pub struct EndSpec {
    /// The method.
    pub method: MethodArg,
    /// Busy-poll instead of blocking.
    pub busy_poll: bool,
    /// Interface of the packet method.
    pub ifname: Option<String>,
    /// Address (IP or IP:PORT) for IP methods.
    pub bind: Option<String>,
    /// EtherType of the packet method.
    pub ethertype: u16,
    /// Faults of the sim method's wire.
    pub fault: Option<FaultSpec>,
    /// MTU of the sim method's wire.
    pub sim_mtu: usize,
    /// Lower bound of BCL's retransmission timeout (default: the core's).
    pub rto_min: Option<std::time::Duration>,
    /// Largest BCL frame of the udp method (default: the method's, which
    /// fits a 1500-byte IP MTU).
    pub udp_mtu: Option<usize>,
    /// PCI address of the vfio method's NIC.
    pub pci: Option<String>,
}

impl EndSpec {
    /// `method` with nothing else chosen (the tools' defaults: blocking,
    /// EtherType 0x88B5, a 1500-byte sim wire, the methods' own MTUs and
    /// timeouts, no interface, address or device named).
    pub fn new(method: MethodArg) -> Self {
        EndSpec {
            method,
            busy_poll: false,
            ifname: None,
            bind: None,
            ethertype: 0x88b5,
            fault: None,
            sim_mtu: 1500,
            rto_min: None,
            udp_mtu: None,
            pci: None,
        }
    }

    /// The progress mode in effect for BCL methods.
    pub fn mode(&self) -> ProgressMode {
        if self.busy_poll || matches!(self.method, MethodArg::Sim | MethodArg::Spin) {
            ProgressMode::BusyPoll
        } else {
            ProgressMode::Blocking
        }
    }
}

/// The BCL process address of the serving end.
pub const SERVER_ADDR: ProcessAddr = ProcessAddr::new(2, 0);
/// The BCL process address of the connecting end.
pub const CLIENT_ADDR: ProcessAddr = ProcessAddr::new(1, 0);
/// The job key of the tools' runs.
pub const JOB: JobKey = JobKey(0xbc1_7001);

/// A transport that can be moved to another thread.
pub type BoxTransport = Box<dyn Transport + Send>;

/// The largest message BCL's system channel can carry over frames of `mtu`
/// bytes: a message must fit the receive window (rounded down to KiB, at
/// most 1 MiB).
pub fn bcl_max_message(mtu: usize) -> usize {
    let fit = RX_WINDOW as usize * mtu.saturating_sub(HEADER_LEN);
    (fit.min(1 << 20) / 1024) * 1024
}

/// Port settings of the tools: the largest eager messages the MTU allows
/// and a 4 MiB receive ring, so streams of large messages flow.
pub(crate) fn configure(cfg: &mut PortConfig, mtu: usize, rto_min: Option<std::time::Duration>) {
    cfg.eager_limit = bcl_max_message(mtu);
    cfg.ring_block_size = 256;
    cfg.ring_blocks = 16384;
    if let Some(min) = rto_min {
        cfg.rto.min = min;
        cfg.rto.initial = cfg.rto.initial.max(min);
        cfg.rto.max = cfg.rto.max.max(min);
    }
}

pub(crate) fn endpoint(
    addr: ProcessAddr,
    method: Box<dyn Method>,
    spec: &EndSpec,
    clock: Option<SimClock>,
) -> Result<Endpoint, String> {
    let mtu = method.caps().mtu;
    let mut b = Endpoint::builder(addr, JOB)
        .method(method)
        .mode(spec.mode())
        .configure(|c| configure(c, mtu, spec.rto_min));
    if let Some(clock) = clock {
        b = b.clock(clock);
    }
    b.build().map_err(|e| e.to_string())
}

/// Parses --bind: `IP` or `IP:PORT`.
fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    text.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| format!("--bind {text:?} is not IP or IP:PORT"))
}

/// The address a server binds: --bind, else an interface address (never a
/// wildcard), port chosen by the kernel.
fn server_bind(spec: &EndSpec) -> Result<SocketAddr, String> {
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
fn client_bind(spec: &EndSpec, server: SocketAddr) -> Result<SocketAddr, String> {
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

fn open_packet(spec: &EndSpec) -> Result<(Box<dyn Method>, ExtraBadFrames), String> {
    let m = PacketMethod::open(PacketConfig {
        ifname: spec.ifname.clone(),
        ethertype: spec.ethertype,
        ..PacketConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let c = m.counters();
    let extra: ExtraBadFrames = Box::new(move || {
        let s = c.snapshot();
        s.rx_foreign + s.rx_truncated
    });
    Ok((Box::new(m), extra))
}

/// A serving end that is ready to be reached at `descriptor`.
pub struct Served {
    /// What the client passes to --connect.
    pub descriptor: String,
    pending: Pending,
}

enum Pending {
    Ready(BoxTransport),
    Unix(crate::local_methods::UnixServer, bool),
    Tcp(TcpServer, bool),
}

impl Served {
    /// The transport, once the client is there (TCP: accepted by
    /// `deadline`).
    pub fn accept(self, deadline: Instant) -> Result<BoxTransport, String> {
        match self.pending {
            Pending::Ready(t) => Ok(t),
            Pending::Tcp(l, busy) => l
                .accept(busy, deadline)
                .map(|t| Box::new(t) as BoxTransport)
                .map_err(|e| e.to_string()),
            Pending::Unix(l, busy) => l.accept(busy, deadline),
        }
    }
}

/// Opens the serving end.
pub fn open_server(spec: &EndSpec) -> Result<Served, String> {
    let busy = spec.busy_poll;
    let (descriptor, pending) = match spec.method {
        MethodArg::Packet => {
            let (m, extra) = open_packet(spec)?;
            let d = m.descriptor().to_string();
            let ep = endpoint(SERVER_ADDR, m, spec, None)?;
            (
                d,
                Pending::Ready(Box::new(BclTransport::new(ep, None, Some(extra)))),
            )
        }
        MethodArg::Udp => {
            let m = UdpMethod::open(UdpConfig {
                mtu: spec.udp_mtu,
                ..UdpConfig::new(server_bind(spec)?)
            })
            .map_err(|e| e.to_string())?;
            let d = m.descriptor().to_string();
            let ep = endpoint(SERVER_ADDR, Box::new(m), spec, None)?;
            (
                d,
                Pending::Ready(Box::new(BclTransport::new(ep, None, None))),
            )
        }
        MethodArg::KernelUdp => {
            let t = KernelUdp::open(server_bind(spec)?, None, busy).map_err(|e| e.to_string())?;
            (
                format!("kernel-udp:{}", t.local_addr()),
                Pending::Ready(Box::new(t)),
            )
        }
        MethodArg::KernelTcp => {
            let l = TcpServer::bind(server_bind(spec)?).map_err(|e| e.to_string())?;
            (
                format!("kernel-tcp:{}", l.local_addr()),
                Pending::Tcp(l, busy),
            )
        }
        MethodArg::Sim => {
            return Err(
                "the sim method runs both ends in one process: use --local (the default for sim)"
                    .into(),
            )
        }
        MethodArg::Vfio => {
            let (d, t) = crate::vfio_method::serve(spec)?;
            (d, Pending::Ready(t))
        }
        MethodArg::Shm => {
            let (d, t) = crate::local_methods::open_shm_server(spec)?;
            (d, Pending::Ready(t))
        }
        MethodArg::Unix => {
            let (d, l) = crate::local_methods::UnixServer::bind()?;
            (d, Pending::Unix(l, busy))
        }
        MethodArg::Spin => {
            let (d, t) = crate::local_methods::SpinTransport::serve()?;
            (d, Pending::Ready(Box::new(t)))
        }
        MethodArg::Afxdp => {
            let (d, t) = crate::afxdp_method::open_bcl_server(spec)?;
            (d, Pending::Ready(t))
        }
        MethodArg::AfxdpRaw => {
            let (d, t) = crate::afxdp_method::open_raw_server(spec)?;
            (d, Pending::Ready(t))
        }
    };
    Ok(Served {
        descriptor,
        pending,
    })
}

/// The address part of a --connect value for an IP method: `IP:PORT`,
/// optionally prefixed by the method's name.
fn ip_peer(method: MethodArg, text: &str) -> Result<SocketAddr, String> {
    let prefix = format!("{}:", method.name());
    let addr = text.strip_prefix(&prefix).unwrap_or(text);
    addr.parse().map_err(|_| {
        format!(
            "--connect {text:?}: expected {prefix}IP:PORT as printed by the server's `listening:` line"
        )
    })
}

/// Opens the connecting end, towards the server's `descriptor`.
pub fn open_client(
    spec: &EndSpec,
    descriptor: &str,
    deadline: Instant,
) -> Result<BoxTransport, String> {
    let busy = spec.busy_poll;
    let bcl_peer = |name: &str| -> Result<Descriptor, String> {
        let d: Descriptor = descriptor.parse().map_err(|e| format!("--connect: {e}"))?;
        if d.method != name {
            return Err(format!(
                "--connect {descriptor:?} is a descriptor of method {:?}, not {name:?}",
                d.method
            ));
        }
        Ok(d)
    };
    match spec.method {
        MethodArg::Packet => {
            let d = crate::vfio_method::ethernet_peer(descriptor, "packet")?;
            let (m, extra) = open_packet(spec)?;
            let mut ep = endpoint(CLIENT_ADDR, m, spec, None)?;
            ep.add_peer(SERVER_ADDR, d);
            Ok(Box::new(BclTransport::new(
                ep,
                Some(SERVER_ADDR),
                Some(extra),
            )))
        }
        MethodArg::Udp => {
            let d = bcl_peer("udp")?;
            let server =
                bcl::udp::parse_address(&d.address).map_err(|e| format!("--connect: {e}"))?;
            let m = UdpMethod::open(UdpConfig {
                mtu: spec.udp_mtu,
                ..UdpConfig::new(client_bind(spec, server)?)
            })
            .map_err(|e| e.to_string())?;
            let mut ep = endpoint(CLIENT_ADDR, Box::new(m), spec, None)?;
            ep.add_peer(SERVER_ADDR, d);
            Ok(Box::new(BclTransport::new(ep, Some(SERVER_ADDR), None)))
        }
        MethodArg::KernelUdp => {
            let server = ip_peer(spec.method, descriptor)?;
            let t = KernelUdp::open(client_bind(spec, server)?, Some(server), busy)
                .map_err(|e| e.to_string())?;
            Ok(Box::new(t))
        }
        MethodArg::KernelTcp => {
            let server = ip_peer(spec.method, descriptor)?;
            let t = KernelTcp::connect(server, busy, deadline).map_err(|e| e.to_string())?;
            Ok(Box::new(t))
        }
        MethodArg::Sim => Err("the sim method has no --connect: use --local".into()),
        MethodArg::Vfio => crate::vfio_method::connect(spec, descriptor),
        MethodArg::Shm => crate::local_methods::open_shm_client(spec, descriptor),
        MethodArg::Unix => crate::local_methods::open_unix_client(spec, descriptor, deadline),
        MethodArg::Spin => Ok(Box::new(crate::local_methods::SpinTransport::connect(
            descriptor,
        )?)),
        MethodArg::Afxdp => crate::vfio_method::ethernet_peer(descriptor, "afxdp")
            .and_then(|d| crate::afxdp_method::open_bcl_client(spec, &d.to_string())),
        MethodArg::AfxdpRaw => crate::afxdp_method::open_raw_client(spec, descriptor),
    }
}

/// Both ends in this process: the server on loopback (or --bind) and a
/// client connected to it. For sim, both ends on one real-time simulated
/// fabric (with --fault applied).
pub fn open_local_pair(spec: &EndSpec) -> Result<(Served, BoxTransport), String> {
    match spec.method {
        MethodArg::Sim => {
            let fault = spec.fault.clone().unwrap_or_default();
            let fabric = SimFabric::new(FabricConfig {
                mtu: spec.sim_mtu,
                faults: fault.profile.clone(),
                seed: fault.seed,
                clock: SimClock::Real(RealClock::new()),
                ..FabricConfig::default()
            });
            let s = fabric.endpoint();
            let c = fabric.endpoint();
            let d = s.descriptor();
            let server = endpoint(SERVER_ADDR, Box::new(s), spec, Some(fabric.clock()))?;
            let mut client = endpoint(CLIENT_ADDR, Box::new(c), spec, Some(fabric.clock()))?;
            client.add_peer(SERVER_ADDR, d.clone());
            Ok((
                Served {
                    descriptor: d.to_string(),
                    pending: Pending::Ready(Box::new(BclTransport::new(server, None, None))),
                },
                Box::new(BclTransport::new(client, Some(SERVER_ADDR), None)),
            ))
        }
        MethodArg::Afxdp | MethodArg::AfxdpRaw => Err(format!(
            "the {} method needs two interfaces, one per end: use --lab configs/lab/pair.toml --nodes a,b (or --serve/--connect in two namespaces)",
            spec.method.name()
        )),
        MethodArg::Vfio => Err(crate::vfio_method::LOCAL_REFUSED.into()),
        MethodArg::Packet => Err(
            "the packet method needs two interfaces, one per end: use --lab configs/lab/pair.toml --nodes a,b (or --serve/--connect in two namespaces)"
                .into(),
        ),
        _ => {
            let mut local = spec.clone();
            if local.bind.is_none() {
                local.bind = Some("127.0.0.1".into());
            }
            let served = open_server(&local)?;
            let client = open_client(&local, &served.descriptor, Instant::now() + std::time::Duration::from_secs(10))?;
            Ok((served, client))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_message_fits_the_window() {
        let fit = RX_WINDOW as usize * (1500 - HEADER_LEN);
        assert_eq!(bcl_max_message(1500), fit / 1024 * 1024);
        assert_eq!(bcl_max_message(65_507), 1 << 20);
        let mut cfg = PortConfig::new(CLIENT_ADDR, JOB);
        for mtu in [200, 1452, 1472, 1500, 9000, 65_507] {
            configure(&mut cfg, mtu, Some(std::time::Duration::from_millis(5)));
            cfg.validate(Some(mtu)).unwrap();
        }
    }

    #[test]
    fn bind_addresses_are_never_wildcards_on_the_server() {
        let spec = EndSpec::new(MethodArg::Udp);
        assert!(!server_bind(&spec).unwrap().ip().is_unspecified());
        let with = EndSpec {
            bind: Some("127.0.0.1".into()),
            ..spec.clone()
        };
        assert_eq!(server_bind(&with).unwrap(), "127.0.0.1:0".parse().unwrap());
        assert!(parse_bind("nonsense")
            .unwrap_err()
            .contains("IP or IP:PORT"));
        assert_eq!(
            ip_peer(MethodArg::KernelUdp, "kernel-udp:10.0.0.1:5").unwrap(),
            "10.0.0.1:5".parse().unwrap()
        );
        assert!(ip_peer(MethodArg::KernelTcp, "x")
            .unwrap_err()
            .contains("listening:"));
    }
}
