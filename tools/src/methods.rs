//! Opening the ends of a run — as server (`--serve`), client
//! (`--connect`) or both in this process (`--local`) — for BCL over any
//! method of the [registry](bcl::registry), or for a baseline.
//!
//! A BCL end is opened through its method kind, whatever the method: the
//! kind says what it is opened on ([`Attachment`]), so the tools know which
//! of `--ifname`, `--pci` and `--bind` apply, whether `--local` can put
//! both ends in this process, and which descriptors a client can reach
//! (its own method's, or any of its family's: the Ethernet methods share
//! frames and address grammar). Setup notes a method makes (AF_XDP's attach
//! and bind modes, for instance) go to standard error as `# METHOD: ...`
//! lines; standard output carries the `listening:` line.

use crate::afxdp_raw;
use crate::bcl_transport::BclTransport;
use crate::end::{
    client_bind, end_addr, endpoint, endpoint_over, server_bind, Baseline, EndSpec, MethodArg, JOB,
    SERVER_ADDR,
};
use crate::kernel::{KernelTcp, KernelUdp, TcpServer};
use crate::local::{open_unix_client, SpinTransport, UnixServer};
use crate::packet_raw;
use crate::transport::BoxTransport;
use bcl::core::method::{Attachment, MethodKind, OpenSpec};
use bcl::sim::{FabricConfig, RealClock, SimClock, SimFabric};
use bcl::{Descriptor, Method, ProcessAddr, ProgressMode, Registry};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A serving end that is ready to be reached at `descriptor`.
pub struct Served {
    /// What the client passes to --connect.
    pub descriptor: String,
    pending: Pending,
}

enum Pending {
    Ready(BoxTransport),
    Unix(UnixServer, bool),
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

/// The whole `--serve` start: pins this thread to `cpu` (if given), opens
/// the serving end, prints its `listening:` line and waits up to `wait` for
/// the client.
pub fn serve_one(
    spec: &EndSpec,
    cpu: Option<usize>,
    wait: Duration,
) -> Result<BoxTransport, String> {
    if let Some(cpu) = cpu {
        crate::launch::pin_current_thread(cpu)?;
    }
    let served = open_server(spec)?;
    crate::launch::announce(&served.descriptor);
    served.accept(Instant::now() + wait)
}

/// Opens the serving end.
pub fn open_server(spec: &EndSpec) -> Result<Served, String> {
    let busy = spec.busy_poll;
    let (descriptor, pending) = match spec.method {
        MethodArg::Bcl(name) => {
            let registry = Registry::builtin();
            let kind = registry.lookup(name).map_err(|e| e.to_string())?;
            if kind.attachment() == Attachment::InProcess {
                return Err(format!(
                    "the {name} method runs both ends in one process: use --local (the default for {name})"
                ));
            }
            let (d, t) = if spec.rails.is_empty() {
                serve_on(
                    open_method(kind, spec, end_addr(kind, 2, spec.port), None)?,
                    spec,
                )?
            } else {
                let methods = open_rails(registry, kind, spec, 2)?;
                serve_on_rails(methods, spec)?
            };
            (d, Pending::Ready(t))
        }
        MethodArg::Baseline(Baseline::KernelUdp) => {
            let t = KernelUdp::open(server_bind(spec)?, None, busy).map_err(|e| e.to_string())?;
            (
                format!("kernel-udp:{}", t.local_addr()),
                Pending::Ready(Box::new(t)),
            )
        }
        MethodArg::Baseline(Baseline::KernelTcp) => {
            let l = TcpServer::bind(server_bind(spec)?).map_err(|e| e.to_string())?;
            (
                format!("kernel-tcp:{}", l.local_addr()),
                Pending::Tcp(l, busy),
            )
        }
        MethodArg::Baseline(Baseline::Unix) => {
            let (d, l) = UnixServer::bind()?;
            (d, Pending::Unix(l, busy))
        }
        MethodArg::Baseline(Baseline::Spin) => {
            let (d, t) = SpinTransport::serve()?;
            (d, Pending::Ready(Box::new(t)))
        }
        MethodArg::Baseline(Baseline::AfxdpRaw) => {
            let (d, t) = afxdp_raw::open_server(spec)?;
            (d, Pending::Ready(t))
        }
        MethodArg::Baseline(Baseline::PacketRaw) => {
            let (d, t) = packet_raw::open_server(spec)?;
            (d, Pending::Ready(t))
        }
    };
    Ok(Served {
        descriptor,
        pending,
    })
}

/// Opens the connecting end, towards the server's `descriptor`.
pub fn open_client(
    spec: &EndSpec,
    descriptor: &str,
    deadline: Instant,
) -> Result<BoxTransport, String> {
    let busy = spec.busy_poll;
    match spec.method {
        MethodArg::Bcl(name) => {
            let registry = Registry::builtin();
            let kind = registry.lookup(name).map_err(|e| e.to_string())?;
            if kind.attachment() == Attachment::InProcess {
                return Err(format!("the {name} method has no --connect: use --local"));
            }
            if !spec.rails.is_empty() {
                return connect_on_rails(registry, kind, spec, descriptor);
            }
            let peer = peer_descriptor(registry, kind, descriptor)?;
            let method = open_method(kind, spec, end_addr(kind, 1, spec.port), Some(&peer))?;
            connect_on(method, spec, peer)
        }
        MethodArg::Baseline(Baseline::KernelUdp) => {
            let server = ip_peer(spec.method, descriptor)?;
            let t = KernelUdp::open(client_bind(spec, server)?, Some(server), busy)
                .map_err(|e| e.to_string())?;
            Ok(Box::new(t))
        }
        MethodArg::Baseline(Baseline::KernelTcp) => {
            let server = ip_peer(spec.method, descriptor)?;
            let t = KernelTcp::connect(server, busy, deadline).map_err(|e| e.to_string())?;
            Ok(Box::new(t))
        }
        MethodArg::Baseline(Baseline::Unix) => open_unix_client(busy, descriptor, deadline),
        MethodArg::Baseline(Baseline::Spin) => Ok(Box::new(SpinTransport::connect(descriptor)?)),
        MethodArg::Baseline(Baseline::AfxdpRaw) => afxdp_raw::open_client(spec, descriptor),
        MethodArg::Baseline(Baseline::PacketRaw) => packet_raw::open_client(spec, descriptor),
    }
}

/// Both ends in this process: the server on loopback (or --bind) and a
/// client connected to it. For an in-process method (sim), both ends on one
/// real-time simulated fabric (with --fault applied).
pub fn open_local_pair(spec: &EndSpec) -> Result<(Served, BoxTransport), String> {
    let name = spec.method.name();
    match (spec.method.attachment(), spec.method) {
        (Some(Attachment::InProcess), _) => sim_pair(spec),
        (Some(Attachment::Interface), _)
        | (None, MethodArg::Baseline(Baseline::AfxdpRaw | Baseline::PacketRaw)) => {
            Err(format!(
                "the {name} method needs two interfaces, one per end: use --lab configs/lab/pair.toml --nodes a,b (or --serve/--connect in two namespaces)"
            ))
        }
        (Some(Attachment::Daemon), MethodArg::Bcl(name)) => daemon_local_pair(name, spec),
        (Some(Attachment::Device), _) => Err(format!(
            "the {name} method drives one NIC per process: start one end per NIC, e.g. `bcl-pingpong --method {name} --pci 0000:01:00.0 --serve` and `bcl-pingpong --method {name} --pci 0000:02:00.0 --connect DESCRIPTOR`"
        )),
        _ => {
            let mut local = spec.clone();
            if local.bind.is_none() {
                local.bind = Some("127.0.0.1".into());
            }
            let served = open_server(&local)?;
            let deadline = Instant::now() + Duration::from_secs(10);
            let client = open_client(&local, &served.descriptor, deadline)?;
            Ok((served, client))
        }
    }
}

/// Both ends in this process as two clients of this node's daemon: the
/// server at node 2, port `--port`, the client at node 2, the next port.
/// Their frames go from one client's ring to the other's through the
/// daemon, never onto the NIC.
fn daemon_local_pair(name: &str, spec: &EndSpec) -> Result<(Served, BoxTransport), String> {
    let registry = Registry::builtin();
    let kind = registry.lookup(name).map_err(|e| e.to_string())?;
    let client_port = spec.port.checked_add(1).ok_or_else(|| {
        format!(
            "--port {}: a local pair through the daemon takes this port and the next",
            spec.port
        )
    })?;
    let served = open_server(spec)?;
    let peer = peer_descriptor(registry, kind, &served.descriptor)?;
    let local = ProcessAddr::new(SERVER_ADDR.node.0, client_port);
    let method = open_method(kind, spec, local, Some(&peer))?;
    let mut ep = endpoint(local, method, spec, None)?;
    let server = spec.server_addr();
    ep.add_peer(server, peer);
    Ok((served, Box::new(BclTransport::new(ep, Some(server)))))
}

/// Opens an end of `kind` for process `local` with the settings of `spec`;
/// a client passes the server's descriptor (methods bound to an IP address
/// bind next to it).
fn open_method(
    kind: &dyn MethodKind,
    spec: &EndSpec,
    local: ProcessAddr,
    server: Option<&Descriptor>,
) -> Result<Box<dyn Method>, String> {
    let mut o = OpenSpec::new(JOB, local);
    o.nic = spec.nic(kind);
    o.ethertype = Some(spec.ethertype);
    o.busy_poll = spec.mode() == ProgressMode::BusyPoll;
    o.mtu = spec.udp_mtu;
    if kind.attachment() == Attachment::IpAddress {
        o.bind = Some(match server {
            None => server_bind(spec)?,
            Some(d) => {
                let at: SocketAddr = d
                    .address
                    .parse()
                    .map_err(|_| format!("--connect: {d} is not IP:PORT"))?;
                client_bind(spec, at)?
            }
        });
    }
    let method = kind.open(&o).map_err(|e| match alternative(kind) {
        Some(other) => {
            format!("{e}. (--method {other} puts the same frames on the wire and reaches the same peers)")
        }
        None => e.to_string(),
    })?;
    for note in method.notes() {
        eprintln!("# {}: {note}", kind.name());
    }
    Ok(method)
}

/// A method of `kind`'s family that every host can use where `kind` cannot
/// (not opt-in: `packet` for `afxdp` and `vfio`; none for `bcld`).
fn alternative(kind: &dyn MethodKind) -> Option<&'static str> {
    // The daemon's users are the ones who cannot open a NIC themselves.
    if kind.attachment() == Attachment::Daemon {
        return None;
    }
    let family = kind.family()?;
    Registry::builtin()
        .kinds()
        .find(|k| {
            k.family() == Some(family)
                && k.name() != kind.name()
                && k.opt_in().is_none()
                && k.attachment() != Attachment::Daemon
        })
        .map(|k| k.name())
}

/// The descriptor a client of `kind` opens for `text`, the server's
/// `listening:` descriptor: the server's own method's, or one of the same
/// family with only the method name changed.
pub fn peer_descriptor(
    registry: &Registry,
    kind: &dyn MethodKind,
    text: &str,
) -> Result<Descriptor, String> {
    let d: Descriptor = text.parse().map_err(|e| format!("--connect: {e}"))?;
    let name = kind.name();
    if !registry.reaches(&d.method, name) {
        let reached: Vec<&str> = match kind.family() {
            Some(f) => registry
                .kinds()
                .filter(|k| k.family() == Some(f))
                .map(|k| k.name())
                .collect(),
            None => vec![name],
        };
        return Err(format!(
            "--connect {text:?} is a descriptor of method {:?}; the {name} method reaches only {} peers (as printed by the server's `listening:` line)",
            d.method,
            reached.join(", ")
        ));
    }
    kind.check_address(&d.address)
        .map_err(|e| format!("--connect {text:?}: {e}"))?;
    Ok(Descriptor::new(name, d.address))
}

/// The kind of an opened method, from the registry.
fn kind_of(method: &dyn Method) -> Result<&'static dyn MethodKind, String> {
    Registry::builtin()
        .get(method.name())
        .ok_or_else(|| format!("method {} is not in the registry", method.name()))
}

/// The serving end over an opened `method`: its descriptor and transport.
pub fn serve_on(method: Box<dyn Method>, spec: &EndSpec) -> Result<(String, BoxTransport), String> {
    let local = end_addr(kind_of(&*method)?, 2, spec.port);
    let d = method.descriptor().to_string();
    let ep = endpoint(local, method, spec, None)?;
    Ok((d, Box::new(BclTransport::new(ep, None))))
}

/// The connecting end over an opened `method`, towards `peer` (a
/// descriptor of the method).
pub fn connect_on(
    method: Box<dyn Method>,
    spec: &EndSpec,
    peer: Descriptor,
) -> Result<BoxTransport, String> {
    let kind = kind_of(&*method)?;
    let server = kind.process_of(&peer.address).unwrap_or(spec.server_addr());
    let mut ep = endpoint(end_addr(kind, 1, spec.port), method, spec, None)?;
    ep.add_peer(server, peer);
    Ok(Box::new(BclTransport::new(ep, Some(server))))
}

/// The kind of each rail of `spec.rails` (its own method, else `kind`),
/// checked: Ethernet methods on an interface, of `kind`'s family, or the
/// node daemon's NICs (`bcld`, each rail one of the daemon's NICs by name).
fn rail_kinds<'a>(
    registry: &'a Registry,
    kind: &'a dyn MethodKind,
    spec: &EndSpec,
) -> Result<Vec<(&'a dyn MethodKind, String)>, String> {
    spec.rails
        .iter()
        .map(|(method, ifname)| {
            let k = match method {
                Some(m) => registry.lookup(m).map_err(|e| format!("--rails: {e}"))?,
                None => kind,
            };
            let on_nics = matches!(k.attachment(), Attachment::Interface | Attachment::Daemon);
            if !on_nics || k.family() != kind.family() {
                return Err(format!(
                    "--rails: {} is not an Ethernet method on an interface of the {} family (rails are NICs: packet, afxdp, or bcld's NICs)",
                    k.name(),
                    kind.name()
                ));
            }
            Ok((k, ifname.clone()))
        })
        .collect()
}

/// Opens every rail of `spec` for the end on `node` (2 serves, 1
/// connects).
fn open_rails(
    registry: &Registry,
    kind: &dyn MethodKind,
    spec: &EndSpec,
    node: u32,
) -> Result<Vec<Box<dyn Method>>, String> {
    rail_kinds(registry, kind, spec)?
        .into_iter()
        .map(|(k, ifname)| {
            let mut one = spec.clone();
            one.ifname = Some(ifname.clone());
            open_method(k, &one, end_addr(k, node, spec.port), None)
                .map_err(|e| format!("--rails: rail {}@{ifname}: {e}", k.name()))
        })
        .collect()
}

/// The serving end over several rails: its descriptor (one per rail,
/// joined by `+`) and transport.
fn serve_on_rails(
    methods: Vec<Box<dyn Method>>,
    spec: &EndSpec,
) -> Result<(String, BoxTransport), String> {
    let d: Vec<String> = methods.iter().map(|m| m.descriptor().to_string()).collect();
    let ep = endpoint_over(spec.server_addr(), methods, spec, None)?;
    Ok((d.join("+"), Box::new(BclTransport::new(ep, None))))
}

/// The connecting end over several rails, towards the server's
/// descriptors (`D1+D2+...`, one per rail, in rail order).
fn connect_on_rails(
    registry: &Registry,
    kind: &dyn MethodKind,
    spec: &EndSpec,
    descriptors: &str,
) -> Result<BoxTransport, String> {
    let kinds = rail_kinds(registry, kind, spec)?;
    let texts: Vec<&str> = descriptors.split('+').collect();
    if texts.len() != kinds.len() {
        return Err(format!(
            "--connect: {} descriptors for {} rails (the server's --rails and this one's must name as many interfaces)",
            texts.len(),
            kinds.len()
        ));
    }
    let peers: Vec<Descriptor> = kinds
        .iter()
        .zip(&texts)
        .map(|((k, _), t)| peer_descriptor(registry, *k, t))
        .collect::<Result<_, _>>()?;
    let methods = open_rails(registry, kind, spec, 1)?;
    let mut ep = endpoint_over(end_addr(kind, 1, spec.port), methods, spec, None)?;
    let server = spec.server_addr();
    for p in peers {
        ep.add_peer(server, p);
    }
    Ok(Box::new(BclTransport::new(ep, Some(server))))
}

/// Both ends of an in-process method on one real-time simulated fabric.
fn sim_pair(spec: &EndSpec) -> Result<(Served, BoxTransport), String> {
    let fault = spec.fault.clone().unwrap_or_default();
    let fabric = SimFabric::new(FabricConfig {
        mtu: spec.sim_mtu,
        faults: fault.profile.clone(),
        seed: fault.seed,
        clock: SimClock::Real(RealClock::new()),
        ..FabricConfig::default()
    });
    let (s, c) = (fabric.endpoint(), fabric.endpoint());
    let d = s.descriptor();
    let server = endpoint(SERVER_ADDR, Box::new(s), spec, Some(fabric.clock()))?;
    let client_addr = crate::end::CLIENT_ADDR;
    let mut client = endpoint(client_addr, Box::new(c), spec, Some(fabric.clock()))?;
    client.add_peer(SERVER_ADDR, d.clone());
    Ok((
        Served {
            descriptor: d.to_string(),
            pending: Pending::Ready(Box::new(BclTransport::new(server, None))),
        },
        Box::new(BclTransport::new(client, Some(SERVER_ADDR))),
    ))
}

/// The address part of a --connect value for an IP baseline: `IP:PORT`,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str) -> &'static dyn MethodKind {
        Registry::builtin().get(name).unwrap()
    }

    #[test]
    fn ip_baselines_take_ip_and_port() {
        let m = MethodArg::Baseline(Baseline::KernelUdp);
        assert_eq!(
            ip_peer(m, "kernel-udp:10.0.0.1:5").unwrap(),
            "10.0.0.1:5".parse().unwrap()
        );
        assert!(ip_peer(MethodArg::Baseline(Baseline::KernelTcp), "x")
            .unwrap_err()
            .contains("listening:"));
    }

    #[test]
    fn a_client_reaches_its_own_method_and_its_family() {
        let r = Registry::builtin();
        let v = "vfio:52:54:00:bc:10:0a@0000:01:00.0";
        let p = "packet:02:bc:01:00:00:01/2";
        assert_eq!(peer_descriptor(r, kind("vfio"), v).unwrap().to_string(), v);
        assert_eq!(
            peer_descriptor(r, kind("packet"), p).unwrap().to_string(),
            p
        );
        assert_eq!(
            peer_descriptor(r, kind("afxdp"), p).unwrap().to_string(),
            "afxdp:02:bc:01:00:00:01/2"
        );
        let e = peer_descriptor(r, kind("vfio"), "udp:10.0.0.1:5").unwrap_err();
        assert!(
            e.contains("the vfio method reaches only bcld, vfio, afxdp, packet peers"),
            "{e}"
        );
        let e = peer_descriptor(r, kind("udp"), p).unwrap_err();
        assert!(e.contains("reaches only udp peers"), "{e}");
        let e = peer_descriptor(r, kind("packet"), "packet:nomac/2").unwrap_err();
        assert!(e.contains("packet:nomac/2"), "{e}");
        let e = peer_descriptor(r, kind("packet"), "packet 52").unwrap_err();
        assert!(e.contains("bad descriptor"), "{e}");
    }

    #[test]
    fn opening_a_device_method_says_what_is_missing() {
        // On this machine no NIC is bound to vfio-pci.
        let spec = |pci: Option<&str>| EndSpec {
            pci: pci.map(str::to_string),
            ..EndSpec::new(MethodArg::bcl("vfio").unwrap())
        };
        let open = |s: &EndSpec| {
            open_method(kind("vfio"), s, SERVER_ADDR, None)
                .err()
                .unwrap()
        };
        let e = open(&spec(None));
        assert!(e.contains("--pci ADDRESS"), "{e}");
        let e = open(&spec(Some("0000:ff:1f.7")));
        assert!(e.contains("no PCI device 0000:ff:1f.7"), "{e}");
        let e = open(&spec(Some("not-an-address")));
        assert!(e.contains("not-an-address"), "{e}");
        let e = open_client(&spec(Some("0000:ff:1f.7")), "udp:1.2.3.4:5", Instant::now())
            .err()
            .unwrap();
        assert!(e.contains("reaches only"), "{e}");
        let e = open_local_pair(&spec(None)).err().unwrap();
        assert!(e.contains("one NIC per process"), "{e}");
    }
}
