//! Method kinds: what is known about a method before one is open.
//!
//! A [`Method`] is an open endpoint of a transport; a [`MethodKind`] is
//! the transport itself, as the registry lists it: its name, how far it
//! reaches ([`Scope`]), what it is opened on ([`Attachment`]), whether it
//! can run here ([`MethodKind::probe`]), how to open it
//! ([`MethodKind::open`]) and which peer addresses it understands
//! ([`MethodKind::check_address`]). Each driver crate implements the kind
//! of its method; the `bcl` crate's registry lists them, and everything
//! that chooses, plans, opens or explains methods (the cluster layer,
//! `bcl-info`, `bcl-run`, the tools' `--method`) reads the registry, so
//! adding a method is one crate plus one registry entry.

use super::{Availability, Method, MethodError};
use crate::addr::{JobKey, ProcessAddr};
use std::net::SocketAddr;

/// How far a method reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Processes of one node only (shared memory).
    Node,
    /// One L2 segment (raw Ethernet, a NIC driven from user space, a
    /// simulated fabric).
    Fabric,
    /// Anything IP can route to.
    Routed,
}

impl Scope {
    /// `node`, `fabric` or `routed`, as shown to people.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Node => "node",
            Scope::Fabric => "fabric",
            Scope::Routed => "routed",
        }
    }
}

/// What a method is opened on, which decides how a process plans it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attachment {
    /// Nothing outside the process: opened once per process (shared
    /// memory).
    Process,
    /// A kernel network interface, named in [`OpenSpec::nic`].
    Interface,
    /// A PCI device driven from user space, named in [`OpenSpec::nic`] by
    /// its PCI address (or the interface name it had).
    Device,
    /// An IP address of an interface ([`OpenSpec::bind`]).
    IpAddress,
    /// The node's engine (`bcld`), which owns the NICs: opened once per
    /// process, where the daemon runs; the daemon chooses the NIC.
    Daemon,
    /// Only inside one process (a simulation): never opened for a job.
    InProcess,
}

/// Everything a method may be opened with; each kind reads the fields that
/// apply to it and ignores the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenSpec {
    /// The job the endpoint belongs to.
    pub job: JobKey,
    /// The endpoint's process address.
    pub local: ProcessAddr,
    /// [`Attachment::Interface`]: the interface name;
    /// [`Attachment::Device`]: the PCI address, or the interface name of
    /// the NIC. `None`: the only candidate there is (an error names them
    /// when there are several or none).
    pub nic: Option<String>,
    /// [`Attachment::IpAddress`]: the address to bind (port 0: any port).
    pub bind: Option<SocketAddr>,
    /// Ethernet methods: the EtherType of BCL frames (`None`: the kind's
    /// default for jobs).
    pub ethertype: Option<u16>,
    /// The endpoint will busy-poll: methods that can tune for it do
    /// (AF_XDP busy polling, a NIC without interrupts).
    pub busy_poll: bool,
    /// The largest frame, where a kind lets it be chosen (UDP datagrams);
    /// `None`: the kind's default.
    pub mtu: Option<usize>,
}

impl OpenSpec {
    /// A spec for process `local` of job `job` with nothing else chosen.
    pub fn new(job: JobKey, local: ProcessAddr) -> OpenSpec {
        OpenSpec {
            job,
            local,
            nic: None,
            bind: None,
            ethertype: None,
            busy_poll: false,
            mtu: None,
        }
    }
}

/// One answer of [`MethodKind::probe`]: whether the method can run on a
/// target (an interface, a device) or on this host as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// The interface or device probed; `None`: the host as a whole.
    pub target: Option<String>,
    /// Whether the method can be opened there, and why not.
    pub availability: Availability,
}

impl ProbeResult {
    /// The answer for the host as a whole.
    pub fn host(availability: Availability) -> ProbeResult {
        ProbeResult {
            target: None,
            availability,
        }
    }

    /// The answer for `target`.
    pub fn on(target: impl Into<String>, availability: Availability) -> ProbeResult {
        ProbeResult {
            target: Some(target.into()),
            availability,
        }
    }
}

/// A transport as the registry knows it (see the module documentation).
pub trait MethodKind: Send + Sync {
    /// The name in descriptors, pins and `--method`: the name its open
    /// methods report ([`Method::name`]).
    fn name(&self) -> &'static str;

    /// One line for people (`bcl-info`, `--help`).
    fn summary(&self) -> &'static str;

    /// How far it reaches.
    fn scope(&self) -> Scope;

    /// What it is opened on.
    fn attachment(&self) -> Attachment;

    /// Whether an open method owns its NIC, so that one process of a node
    /// at most uses it on one NIC (an AF_XDP program and socket, a device
    /// bound to one process).
    fn owns_nic(&self) -> bool {
        false
    }

    /// `Some(why)` if the method is used only where a cluster
    /// configuration allows it explicitly, never on interfaces found by
    /// themselves (it changes the NIC for everybody, e.g. attaches an XDP
    /// program).
    fn opt_in(&self) -> Option<&'static str> {
        None
    }

    /// The family of methods whose peers it reaches, if any: kinds of one
    /// family put the same frames on the same medium and share one address
    /// grammar, so a descriptor of one is opened by another with the method
    /// name changed (`ethernet`: packet, afxdp, vfio).
    fn family(&self) -> Option<&'static str> {
        None
    }

    /// Whether the method can run on each of `interfaces` (the host's
    /// candidate network interfaces: up, not loopback), or on this host as
    /// a whole for kinds not opened on an interface.
    fn probe(&self, interfaces: &[String]) -> Vec<ProbeResult>;

    /// Opens an endpoint of the method.
    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError>;

    /// Checks the address part of a peer's descriptor of this method; the
    /// error says what was expected.
    fn check_address(&self, address: &str) -> Result<(), String>;

    /// The process a descriptor's address names, for methods whose
    /// addresses name processes rather than NICs or sockets (shared
    /// memory: `NODE.PORT@NODEID`); `None` otherwise.
    fn process_of(&self, _address: &str) -> Option<ProcessAddr> {
        None
    }
}
