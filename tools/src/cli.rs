//! Command-line options shared by `bcl-pingpong` and `bcl-bw`
//! (shared/contracts/tools.md: common flags).

use crate::launch::{parse_cpus, parse_nodes};

/// A comma-separated list of CPU numbers, as a command-line value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_cpus(s).map(CpuList)
    }
}
use crate::end::{EndSpec, MethodArg};
use bcl::sim::FaultSpec;
use std::path::PathBuf;

/// Parses an EtherType: `0x88b5` or `34997`.
pub fn parse_ethertype(text: &str) -> Result<u16, String> {
    let v = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|_| format!("{text:?} is not an EtherType (e.g. 0x88b5)"))?;
    if v < 0x0600 {
        return Err(format!(
            "{text:?} is below 0x0600, which Ethernet reads as a length"
        ));
    }
    Ok(v)
}

/// Parses a congestion-control mode: `off`, `auto` or `on`.
pub fn parse_congestion(text: &str) -> Result<bcl::core::CongestionMode, String> {
    bcl::core::CongestionMode::parse(text)
        .ok_or_else(|| format!("{text:?} is none of off, auto and on"))
}

/// The rails of `--rails`: (method name if given, interface) per rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailList(pub Vec<(Option<String>, String)>);

/// Parses `--rails`: `IF,IF` or `METHOD@IF,...`, at least two rails, at
/// most [`bcl::core::MAX_RAILS`], each interface once.
pub fn parse_rails(text: &str) -> Result<RailList, String> {
    let mut rails: Vec<(Option<String>, String)> = Vec::new();
    for item in text.split(',').map(str::trim) {
        let (method, ifname) = match item.split_once('@') {
            Some((m, i)) => (Some(m.trim().to_string()), i.trim().to_string()),
            None => (None, item.to_string()),
        };
        if ifname.is_empty() || method.as_deref() == Some("") {
            return Err(format!(
                "{item:?}: expected an interface or METHOD@INTERFACE (e.g. to-r0 or afxdp@to-r0)"
            ));
        }
        if rails.iter().any(|(_, i)| *i == ifname) {
            return Err(format!("interface {ifname:?} is named twice"));
        }
        rails.push((method, ifname));
    }
    if rails.len() < 2 {
        return Err(format!(
            "{text:?}: name at least two interfaces (one rail is --ifname)"
        ));
    }
    if rails.len() > bcl::core::MAX_RAILS {
        return Err(format!(
            "{} rails: at most {}",
            rails.len(),
            bcl::core::MAX_RAILS
        ));
    }
    Ok(RailList(rails))
}

/// Options of both tools: the method, where the two ends run, and how.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Transport to measure: a BCL method or a baseline (listed by --help).
    #[arg(long, default_value = "shm", long_help = MethodArg::help())]
    pub method: MethodArg,

    /// Busy-poll (spin on the transport: lowest latency, a CPU at 100 %)
    /// instead of blocking (sleep in epoll / blocking socket calls). The sim
    /// method always busy-polls.
    #[arg(long)]
    pub busy_poll: bool,

    /// Serve: print exactly one line `listening: DESCRIPTOR`, then wait for a
    /// client.
    #[arg(long, group = "role")]
    pub serve: bool,

    /// Connect to the server at DESCRIPTOR, as printed by its `listening:`
    /// line (for example packet:02:bc:01:00:00:01/2 or udp:10.77.1.1:40000).
    #[arg(long, value_name = "DESCRIPTOR", group = "role")]
    pub connect: Option<String>,

    /// Start both ends in this process (two threads; IP methods on
    /// 127.0.0.1 unless --bind). The default for sim and shm.
    #[arg(long, group = "role")]
    pub local: bool,

    /// Run the two ends inside the namespaces of this bcl-lab topology
    /// (brought up for the run if it is not up); needs --nodes.
    #[arg(long, value_name = "FILE", group = "role", requires = "nodes")]
    pub lab: Option<PathBuf>,

    /// With --lab: the serving node and the connecting node.
    #[arg(long, value_name = "A,B", requires = "lab", value_parser = parse_nodes)]
    pub nodes: Option<(String, String)>,

    /// Pin to CPUs: one CPU for --serve/--connect; SERVER,CLIENT for --local
    /// and --lab (e.g. --pin 1,0).
    #[arg(long, value_name = "CPUS")]
    pub pin: Option<CpuList>,

    /// Interface of the packet and afxdp methods (default: the only non-loopback
    /// interface that is up). For vfio: a PCI address, or the interface name
    /// of the NIC to drive (which must then be bound to vfio-pci). For
    /// bcld: which of the daemon's NICs to go through (default: its first).
    #[arg(long, value_name = "IF")]
    pub ifname: Option<String>,

    /// Stripe over several NICs (multi-rail): a comma-separated list of
    /// interfaces, each optionally METHOD@IF to use another Ethernet method
    /// on it (for example to-r0,to-r1 or afxdp@to-r0,packet@to-r1); IF
    /// alone takes --method. Both ends open every rail; the server's
    /// `listening:` descriptor is one descriptor per rail joined by `+`.
    /// Large messages are striped over the rails in 4 KiB units, a rail
    /// that fails is left and used again when it returns; the end prints
    /// each rail's bytes (and --json has them under `rails`). With
    /// `--method bcld` each IF is one of the node daemon's NICs (the names
    /// it was started with): one connection to the daemon per NIC.
    /// Replaces --ifname.
    #[arg(long, value_name = "IF,IF", value_parser = parse_rails, conflicts_with = "ifname")]
    pub rails: Option<RailList>,

    /// PCI address of the vfio method's NIC, bound to vfio-pci (e.g.
    /// 0000:00:02.0; `bcl-vfio list` shows them). Default: --ifname, else
    /// the only supported NIC bound to vfio-pci.
    #[arg(long, value_name = "ADDRESS")]
    pub pci: Option<String>,

    /// Address of IP methods (udp, kernel-udp, kernel-tcp): IP or IP:PORT.
    /// Default: an interface address (never 0.0.0.0), port chosen by the
    /// kernel.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,

    /// EtherType of the Ethernet methods (packet, afxdp, vfio) and of
    /// afxdp-raw.
    #[arg(long, value_name = "TYPE", default_value = "0x88b5", value_parser = parse_ethertype)]
    pub ethertype: u16,

    /// Faults of the simulated wire (sim only), e.g.
    /// loss=0.1,reorder=0.05,dup=0.01,corrupt=0.001,delay=5us,jitter=1us,rate=10gbit,seed=7
    #[arg(long, value_name = "SPEC")]
    pub fault: Option<FaultSpec>,

    /// Largest BCL frame of the simulated wire, in bytes (sim only).
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,

    /// Largest BCL frame of the udp method, in bytes (the UDP payload; up to
    /// 65507, IP-fragmented above the path MTU). Default: 1472 over IPv4,
    /// 1452 over IPv6 (no fragmentation). Both ends must use the same value.
    #[arg(long, value_name = "BYTES")]
    pub udp_mtu: Option<usize>,

    /// BCL port of this end; both ends take the same (the server is
    /// node 2, the client node 1). Several pairs through one node daemon
    /// (`--method bcld`) need one port each. Node-local methods use the
    /// process id.
    #[arg(long, default_value_t = 0)]
    pub port: u16,

    /// Lower bound of BCL's retransmission timeout in microseconds (default:
    /// the core's, 200 µs). A VM whose vCPUs stall for milliseconds under
    /// load times out spuriously with a small bound.
    #[arg(long, value_name = "US")]
    pub rto_min_us: Option<u64>,

    /// BCL's congestion control (a delay-based window with pacing, for
    /// methods that may lose frames): off (BCL-3's fixed send window), auto
    /// (the fixed window until a peer's path loses frames behind a queue,
    /// controlled from then on) or on (controlled from the first frame).
    /// Default: BCL_CONGESTION from the environment, else off. Control
    /// keeps a shared bottleneck's queue short (incast through a switch).
    #[arg(long, value_name = "off|auto|on", value_parser = parse_congestion)]
    pub congestion: Option<bcl::core::CongestionMode>,

    /// Give up waiting for the peer after this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,

    /// A server waits this many seconds for its client.
    #[arg(long, default_value_t = 60)]
    pub wait_client_s: u64,

    /// Print everything the transport counted at the end (BCL: port,
    /// progress-engine and peer counters).
    #[arg(long)]
    pub stats: bool,

    /// Write the results as JSON (see shared/contracts/tools.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Capture every frame, direct message and transfer of the BCL
    /// endpoints to FILE (pcap-ng; `%p` becomes the process id), as
    /// BCL_PCAP=FILE does; read it with tools/wireshark/bcl.lua. BCL
    /// methods only.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
}

/// Where this process's end(s) run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The serving end only.
    Serve,
    /// The connecting end only, to this descriptor.
    Connect(String),
    /// Both ends, in this process.
    Local,
    /// Both ends, in these lab nodes.
    Lab(PathBuf, (String, String)),
}

impl CommonArgs {
    /// The role the options select, checked against the method.
    pub fn role(&self) -> Result<Role, String> {
        if self.fault.is_some() && !self.method.in_process() {
            return Err("--fault applies to the sim method only (for real wires use a bcl-lab impaired link, e.g. configs/lab/lossy-pair.toml)".into());
        }
        let role = if self.serve {
            Role::Serve
        } else if let Some(d) = &self.connect {
            Role::Connect(d.clone())
        } else if let (Some(f), Some(n)) = (&self.lab, &self.nodes) {
            Role::Lab(f.clone(), n.clone())
        } else if self.local || self.method.local_by_default() {
            Role::Local
        } else {
            return Err(format!(
                "choose where the ends run: --serve, --connect DESCRIPTOR, --local, or --lab FILE --nodes A,B (method {})",
                self.method.name()
            ));
        };
        if self.method.in_process() && role != Role::Local {
            return Err(format!(
                "the {} method runs both ends in this process: use --local",
                self.method.name()
            ));
        }
        Ok(role)
    }

    /// How to open this run's ends.
    pub fn spec(&self) -> EndSpec {
        EndSpec {
            method: self.method,
            busy_poll: self.busy_poll,
            ifname: self.ifname.clone(),
            bind: self.bind.clone(),
            ethertype: self.ethertype,
            fault: self.fault.clone(),
            sim_mtu: self.mtu,
            rto_min: self.rto_min_us.map(std::time::Duration::from_micros),
            udp_mtu: self.udp_mtu,
            pci: self.pci.clone(),
            pcap: self.pcap.clone(),
            congestion: self.congestion,
            rails: self.rails.as_ref().map(|r| r.0.clone()).unwrap_or_default(),
            port: self.port,
        }
    }

    /// The CPUs of --pin, if given.
    pub fn pins(&self) -> Option<&[usize]> {
        self.pin.as_ref().map(|p| p.0.as_slice())
    }

    /// `busy-poll` or `blocking`, as reported.
    pub fn mode_name(&self) -> &'static str {
        self.spec().mode().name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethertypes_parse_in_hex_or_decimal() {
        assert_eq!(parse_ethertype("0x88b5").unwrap(), 0x88b5);
        assert_eq!(parse_ethertype("34997").unwrap(), 0x88b5);
        assert!(parse_ethertype("0x0100").unwrap_err().contains("length"));
        assert!(parse_ethertype("x")
            .unwrap_err()
            .contains("not an EtherType"));
    }
}
