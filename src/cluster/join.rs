//! Joining a job: the methods this process opens, its descriptor table, the
//! bootstrap exchange, and an endpoint that chooses a method per peer.
//!
//! [`join`] is what a program started by `bcl-run`, Slurm, or a PMI-2
//! launcher (hydra's `mpiexec`, `srun --mpi=pmi2`) calls:
//!
//! 1. who am I: [`JobInfo::from_env`], or, when `$PMI_FD` is set and
//!    neither `$BCL_RENDEZVOUS` nor `$BCL_STATIC` is, PMI-2
//!    ([`pmi2::start`]: rank and size from the launcher, node index and
//!    local rank from the ranks' node identities);
//! 2. the cluster: `$BCL_CLUSTER` (a resource database) if set, else this
//!    host's interfaces (fabric = IPv4 subnet; the methods opened on an
//!    interface or an IP address that are not opt-in: `packet` and `udp`,
//!    since `afxdp` attaches an XDP program to the NIC and so needs a
//!    configuration that allows it);
//! 3. the policy: the file's preference, `$BCL_METHODS` or the file's pin;
//! 4. which methods on which NIC ([`plan`], [`plan_on`]), opened in policy
//!    order; a method that cannot open is noted with the reason, and a pin
//!    none of whose methods opens is an error;
//! 5. the exchange: `$BCL_RENDEZVOUS` + `$BCL_JOB_SECRET`, the static
//!    file `$BCL_STATIC`, or the PMI-2 launcher's key-value space
//!    ([`pmi2::PmiStart::exchange`]);
//! 6. every peer's table goes to the endpoint; methods are chosen on first
//!    send.
//!
//! Every method is planned and opened through the [registry](crate::registry):
//! what a kind is opened on ([`Attachment`]), whether it owns its NIC and
//! whether it is opt-in decide the plan; [`MethodKind::open`] opens it.
//! Two methods can share a NIC: `packet` opened for a job uses its own
//! EtherType ([`bcl_packet::JOB_ETHERTYPE`]), because an AF_XDP program
//! takes every frame of its own (0x88B5) before the kernel's packet sockets
//! see it and passes every other frame to the kernel.
//!
//! NICs per process (multi-rail): AF_XDP allows one endpoint per interface,
//! so a node whose processes should all use `afxdp` on a fabric needs one
//! NIC per process there. The resource database lists them (several
//! `[[node.nic]]` on one fabric, found by subnet in interface order:
//! [`nics::resolve`]) and local rank *i* opens `afxdp` on the *i*-th;
//! processes beyond the number of NICs do not, and their notes say why
//! (they reach the fabric by `packet`). See [`plan_on`].

use super::bootstrap::{self, BootstrapError, JobInfo, Member, RendezvousAddr, Session, StaticJob};
use super::descriptor::DescriptorTable;
use super::nics::{self, NicInfo};
use super::pmi2;
use super::resources::{ClusterConfig, Node};
use super::select::{Pin, Policy};
use super::{node_identity, LocalPolicy};
use crate::endpoint::{Endpoint, ProgressMode};
use crate::registry::Registry;
use bcl_core::method::{Attachment, MethodKind, OpenSpec};
use bcl_core::{JobKey, Method, PortConfig, ProcessAddr};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// A method to open: which, on which interface, on which fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The method.
    pub method: String,
    /// The interface (network methods).
    pub ifname: Option<String>,
    /// Its IPv4 address (udp).
    pub ip: Option<Ipv4Addr>,
    /// The fabric.
    pub fabric: Option<String>,
}

/// What a process of `node` (local rank `local_rank`) should open under
/// `policy`, best first, and every method left out with the reason.
pub fn plan(
    cfg: Option<&ClusterConfig>,
    node: Option<&Node>,
    ifs: &[NicInfo],
    local_rank: u32,
    policy: &Policy,
) -> Result<(Vec<Planned>, Vec<String>), String> {
    let mut notes = Vec::new();
    // (ifname, ip, fabric, allowed methods)
    let mut nics_here: Vec<NicSlot> = Vec::new();
    match (cfg, node) {
        (Some(cfg), Some(node)) => {
            // A NIC driven from user space (a device kind: vfio) is bound
            // to its driver and has no kernel interface: only NICs allowing
            // other methods are looked up among the interfaces; `pci`
            // names the device for the device kinds.
            let on_device = |m: &str| {
                policy
                    .registry
                    .get(m)
                    .is_some_and(|k| k.attachment() == Attachment::Device)
            };
            let found = nics::resolve_kernel(cfg, node, ifs, on_device)?;
            for (nic, i) in node.nics.iter().zip(found) {
                let Some(i) = i else { continue };
                nics_here.push((
                    i.name.clone(),
                    i.ipv4.first().map(|a| a.0),
                    nic.fabric.clone(),
                    nic.methods
                        .iter()
                        .filter(|m| !on_device(m.as_str()))
                        .cloned()
                        .collect(),
                ));
            }
            for nic in &node.nics {
                let devices: Vec<String> = nic
                    .methods
                    .iter()
                    .filter(|m| on_device(m.as_str()))
                    .cloned()
                    .collect();
                if let (Some(pci), false) = (&nic.pci, devices.is_empty()) {
                    nics_here.push((pci.clone(), None, nic.fabric.clone(), devices));
                }
            }
        }
        _ => {
            for i in ifs {
                match (i.excluded, i.up, i.discovered_fabric()) {
                    (Some(why), _, _) => notes.push(format!("{}: not used ({why})", i.name)),
                    (None, false, _) => notes.push(format!("{}: not used (down)", i.name)),
                    (None, true, None) => {
                        notes.push(format!("{}: not used (no IPv4 address)", i.name))
                    }
                    (None, true, Some(f)) => nics_here.push((
                        i.name.clone(),
                        i.ipv4.first().map(|a| a.0),
                        f,
                        unconfigured_methods(&policy.registry),
                    )),
                }
            }
        }
    }
    let shm = node.is_none_or(|n| n.shm);
    let (out, more) = plan_on(&nics_here, shm, cfg.is_none(), local_rank, policy);
    notes.extend(more);
    Ok((out, notes))
}

/// A NIC as the planner sees it: interface (or PCI address), IPv4
/// address, fabric, methods allowed on it.
pub type NicSlot = (String, Option<Ipv4Addr>, String, Vec<String>);

/// The methods used on interfaces found without a configuration: every
/// kind opened on an interface, an IP address or through the node daemon
/// that is not opt-in (`bcld`, `packet`, `udp`; `afxdp` attaches a program
/// to the NIC, so only where a configuration allows it).
fn unconfigured_methods(registry: &Registry) -> Vec<String> {
    registry
        .kinds()
        .filter(|k| {
            matches!(
                k.attachment(),
                Attachment::Interface | Attachment::IpAddress | Attachment::Daemon
            ) && k.opt_in().is_none()
        })
        .map(|k| k.name().to_string())
        .collect()
}

/// [`plan`] on resolved NICs: the methods of `policy`'s order that this
/// process opens, and a note for every method left out. What a method is
/// opened on ([`MethodKind::attachment`]) decides where:
///
/// * once per process ([`Attachment::Process`]: `shm`), if `node_local`
///   (the node's `shm` setting) allows it;
/// * once per process for the node daemon ([`Attachment::Daemon`]:
///   `bcld`), on the fabric of the node's first NIC that allows it (every
///   interface found without a configuration does), through the daemon's
///   first NIC; with rails, and several NICs of that fabric allowing it,
///   once per such NIC, named (the daemon must own them by those names),
///   local rank *i*'s NIC (*i* modulo the count) first, as for `packet`;
///   where the daemon runs and opens, the process opens no other method of
///   its family itself ([`join`]);
/// * on an IP address ([`Attachment::IpAddress`]: `udp`): once, on the
///   first NIC that allows it and has an address; `unconfigured` (no
///   cluster configuration) falls back to 127.0.0.1;
/// * on a NIC ([`Attachment::Interface`], [`Attachment::Device`]): at most
///   once per fabric, on one of the fabric's NICs that allow it, chosen by
///   local rank (as NCCL and UCX assign NICs by locality). A method that
///   owns its NIC ([`MethodKind::owns_nic`]: `afxdp`, `vfio`): local rank
///   *i* takes the *i*-th such NIC of the fabric; local ranks beyond the
///   number of NICs do not open it there, and the note says why (not *i*
///   modulo the count: two processes would then ask for one NIC). Other
///   methods (`packet`): local rank *i* takes NIC *i* modulo the count
///   (processes share a NIC; with as many NICs as processes this is the
///   NIC of the process's `afxdp`);
/// * never for a job ([`Attachment::InProcess`]: `sim`).
pub fn plan_on(
    nics_here: &[NicSlot],
    node_local: bool,
    unconfigured: bool,
    local_rank: u32,
    policy: &Policy,
) -> (Vec<Planned>, Vec<String>) {
    let mut out: Vec<Planned> = Vec::new();
    let mut notes = Vec::new();
    for method in &policy.order {
        let Some(kind) = policy.registry.get(method) else {
            notes.push(format!("{method}: not a method this process knows"));
            continue;
        };
        let m = method.as_str();
        match kind.attachment() {
            Attachment::Process => {
                if node_local {
                    out.push(Planned {
                        method: m.to_string(),
                        ifname: None,
                        ip: None,
                        fabric: None,
                    });
                } else {
                    notes.push(format!("{m}: not allowed on this node (shm = false)"));
                }
            }
            Attachment::IpAddress => {
                let first = nics_here
                    .iter()
                    .find(|(_, ip, _, allowed)| ip.is_some() && allowed.iter().any(|x| x == m));
                match first {
                    Some((ifname, ip, fabric, _)) => out.push(Planned {
                        method: m.to_string(),
                        ifname: Some(ifname.clone()),
                        ip: *ip,
                        fabric: Some(fabric.clone()),
                    }),
                    None if unconfigured => out.push(Planned {
                        method: m.to_string(),
                        ifname: Some("lo".into()),
                        ip: Some(Ipv4Addr::LOCALHOST),
                        fabric: Some("loopback".into()),
                    }),
                    None => notes.push(format!(
                        "{m}: no NIC of this node allows it (or none has an IPv4 address)"
                    )),
                }
            }
            Attachment::InProcess => {
                notes.push(format!("{m}: in-process only, never opened for a job"))
            }
            Attachment::Daemon => {
                // The daemon's NIC is taken to be on the node's first
                // fabric that allows the method.
                let first = nics_here
                    .iter()
                    .find(|(_, _, _, allowed)| allowed.iter().any(|x| x == m));
                // Nothing to say where no NIC allows it (a configuration
                // that does not use the daemon).
                if let Some((_, _, fabric, _)) = first {
                    let named: Vec<&String> = nics_here
                        .iter()
                        .filter(|(_, _, f, allowed)| f == fabric && allowed.iter().any(|x| x == m))
                        .map(|(ifname, ..)| ifname)
                        .collect();
                    let n = named.len();
                    let through: Vec<Option<String>> = if policy.rails && n > 1 {
                        let i = local_rank as usize % n;
                        (0..n).map(|k| Some(named[(i + k) % n].clone())).collect()
                    } else {
                        vec![None]
                    };
                    for ifname in through {
                        out.push(Planned {
                            method: m.to_string(),
                            ifname,
                            ip: None,
                            fabric: Some(fabric.clone()),
                        });
                    }
                }
            }
            Attachment::Interface | Attachment::Device => plan_nic_method(
                kind,
                nics_here,
                unconfigured,
                local_rank,
                policy.rails,
                &mut out,
                &mut notes,
            ),
        }
    }
    (out, notes)
}

/// [`plan_on`] for one method opened on a NIC (see there).
fn plan_nic_method(
    kind: &dyn MethodKind,
    nics_here: &[NicSlot],
    unconfigured: bool,
    local_rank: u32,
    rails: bool,
    out: &mut Vec<Planned>,
    notes: &mut Vec<String>,
) {
    let m = kind.name();
    // The fabrics in NIC order, each with its NICs allowing m.
    let mut fabrics: Vec<(&str, Vec<&str>)> = Vec::new();
    for (ifname, _, fabric, allowed) in nics_here {
        if !allowed.iter().any(|x| x == m) {
            continue;
        }
        match fabrics.iter_mut().find(|(f, _)| f == fabric) {
            Some((_, list)) => list.push(ifname),
            None => fabrics.push((fabric, vec![ifname])),
        }
    }
    // A device method is there only where a NIC names its PCI device:
    // nothing to say about nodes without one.
    if fabrics.is_empty() && kind.attachment() != Attachment::Device {
        notes.push(match kind.opt_in() {
            Some(why) if unconfigured => {
                format!("{m}: only where a cluster configuration allows it ({why})")
            }
            _ => format!("{m}: no NIC of this node allows it"),
        });
    }
    let i = local_rank as usize;
    for (fabric, list) in fabrics {
        let pick = if kind.owns_nic() {
            list.get(i)
        } else {
            list.get(i % list.len())
        };
        let Some(ifname) = pick else {
            let held = match list.len() {
                1 => format!("its NIC ({}) is held by local rank 0", list[0]),
                n => format!(
                    "its {n} NICs ({}) are held by local ranks 0-{}",
                    list.join(", "),
                    n - 1
                ),
            };
            notes.push(format!(
                "{m} on fabric {fabric}: not opened by local rank {i}: {held} (one {m} endpoint per interface; local rank i takes the i-th NIC of the fabric)"
            ));
            continue;
        };
        out.push(Planned {
            method: m.to_string(),
            ifname: Some(ifname.to_string()),
            ip: None,
            fabric: Some(fabric.to_string()),
        });
        if rails && !kind.owns_nic() {
            // Rails: every other NIC of the fabric too, in order after
            // this process's own.
            let n = list.len();
            for k in 1..n {
                out.push(Planned {
                    method: m.to_string(),
                    ifname: Some(list[(i + k) % n].to_string()),
                    ip: None,
                    fabric: Some(fabric.to_string()),
                });
            }
        }
    }
}

/// The descriptor table a process of `node` (local rank `local_rank`)
/// would publish under `policy`, from the configuration alone (no probing:
/// addresses are placeholders `NODE/IFNAME`), for method matrices.
pub fn config_table(
    node: &Node,
    local_rank: u32,
    policy: &Policy,
) -> (DescriptorTable, Vec<String>) {
    // Placeholder names: nic-A, nic-A.2 for a second NIC on A, ...
    let slots: Vec<NicSlot> = node
        .nics
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let nth = node.nics[..k]
                .iter()
                .filter(|x| x.fabric == n.fabric && x.ifname.is_none())
                .count();
            let placeholder = match nth {
                0 => format!("nic-{}", n.fabric),
                _ => format!("nic-{}.{}", n.fabric, nth + 1),
            };
            (
                n.ifname.clone().unwrap_or(placeholder),
                Some(Ipv4Addr::UNSPECIFIED),
                n.fabric.clone(),
                n.methods.clone(),
            )
        })
        .collect();
    let (planned, notes) = plan_on(&slots, node.shm, false, local_rank, policy);
    let mut t = DescriptorTable::new(node.name.clone(), node.name.clone());
    for p in planned {
        let addr = format!(
            "{}/{}.{local_rank}",
            node.name,
            p.ifname.as_deref().unwrap_or("-")
        );
        t.push(
            &bcl_core::Descriptor::new(p.method, addr),
            p.fabric.as_deref(),
        );
    }
    (t, notes)
}

/// Opens one planned method for process `addr` of `job`, through its kind
/// in `registry`.
pub fn open(
    p: &Planned,
    job: JobKey,
    addr: ProcessAddr,
    registry: &Registry,
) -> Result<Box<dyn Method>, String> {
    let kind = registry.lookup(&p.method).map_err(|e| e.to_string())?;
    let mut spec = OpenSpec::new(job, addr);
    spec.nic = p.ifname.clone();
    spec.bind = p.ip.map(|ip| SocketAddr::new(IpAddr::V4(ip), 0));
    kind.open(&spec).map_err(|e| e.to_string())
}

/// An opened method with its fabric.
type Opened = (Box<dyn Method>, Option<String>);

/// Opens the methods of a static job file's entry: each at exactly its
/// address, so peers that read the same file reach it. Only methods opened
/// on an IP address (udp) can be given their address in advance (the
/// others are assigned theirs when opened).
fn open_static(
    t: &DescriptorTable,
    job: JobKey,
    addr: ProcessAddr,
    registry: &Registry,
) -> Result<Vec<Opened>, JoinError> {
    let mut out: Vec<Opened> = Vec::new();
    for e in &t.entries {
        let d = e.descriptor();
        let err = |why: String| JoinError::Config(format!("static job file: {d}: {why}"));
        let kind = registry.lookup(&e.method).map_err(|x| err(x.to_string()))?;
        if kind.attachment() != Attachment::IpAddress {
            let bound: Vec<&str> = registry
                .kinds()
                .filter(|k| k.attachment() == Attachment::IpAddress)
                .map(|k| k.name())
                .collect();
            return Err(err(format!(
                "only {} descriptors can be given a fixed address (the methods bound to an IP address)",
                bound.join(" or ")
            )));
        }
        kind.check_address(&e.address).map_err(err)?;
        let mut spec = OpenSpec::new(job, addr);
        spec.bind = Some(e.address.parse().map_err(|_| err("not IP:PORT".into()))?);
        let m = kind
            .open(&spec)
            .map_err(|x| JoinError::Config(format!("binding {d}: {x}")))?;
        out.push((m, e.fabric.clone()));
    }
    Ok(out)
}

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The bootstrap failed.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The configuration or pin cannot be used here.
    #[error("{0}")]
    Config(String),
    /// The endpoint could not be built.
    #[error("endpoint: {0}")]
    Endpoint(#[from] crate::endpoint::Error),
}

/// Adjusts a port configuration, told the smallest MTU of the methods.
pub type Configure = dyn Fn(&mut PortConfig, usize);

/// Settings of [`join`].
pub struct JoinOptions {
    /// How long the bootstrap may take.
    pub timeout: Duration,
    /// Progress mode of the endpoint.
    pub mode: ProgressMode,
    /// Adjusts the port configuration; told the smallest MTU of the opened
    /// methods.
    pub configure: Box<Configure>,
    /// The methods the process knows (default: [`Registry::builtin`]).
    pub registry: Registry,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            timeout: Duration::from_secs(30),
            mode: ProgressMode::Blocking,
            configure: Box::new(|_, _| {}),
            registry: Registry::builtin().clone(),
        }
    }
}

/// A process that has joined its job.
pub struct Joined {
    /// Who it is.
    pub info: JobInfo,
    /// Its endpoint, with every peer's table and the policy.
    pub endpoint: Endpoint,
    /// Every rank's address, index = rank.
    pub addrs: Vec<ProcessAddr>,
    /// Every rank's table, index = rank.
    pub tables: Vec<DescriptorTable>,
    /// The rendezvous or PMI-2 connection, for barriers (none in static
    /// mode; a PMI-2 one sends `finalize` when dropped).
    pub session: Option<Session>,
    /// Methods not opened and why, for people.
    pub notes: Vec<String>,
}

/// A job key from a job id (FNV-1a).
pub fn job_key(job_id: &str) -> JobKey {
    let mut h: u32 = 0x811c_9dc5;
    for b in job_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    JobKey(h.max(1))
}

/// The policy over `registry` from a configuration and the environment:
/// `$BCL_METHODS` overrides the file's pin.
pub fn policy_from(cfg: Option<&ClusterConfig>, registry: &Registry) -> Result<Policy, String> {
    let pin = match Pin::from_env(registry).map_err(|e| e.to_string())? {
        Some(p) => Some(p),
        None => cfg.and_then(|c| {
            c.pin.as_ref().map(|m| Pin {
                methods: m.clone(),
                source: format!("pin in {}", c.file.display()),
            })
        }),
    };
    let pref = cfg.map(|c| c.preference.clone()).unwrap_or_default();
    let mut policy = Policy::new(registry, &pref, pin);
    policy.rails = match std::env::var("BCL_RAILS") {
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "yes" | "true" => true,
            "0" | "off" | "no" | "false" => false,
            _ => return Err(format!("BCL_RAILS={v:?}: must be on or off")),
        },
        Err(_) => cfg.is_some_and(|c| c.rails),
    };
    Ok(policy)
}

/// Joins the job (see the module documentation).
pub fn join(opts: JoinOptions) -> Result<Joined, JoinError> {
    let pmi = match pmi2::requested() {
        true => Some(pmi2::start(opts.timeout)?),
        false => None,
    };
    let info = match &pmi {
        Some(p) => p.info.clone(),
        None => JobInfo::from_env()?,
    };
    let cfg = match std::env::var_os("BCL_CLUSTER") {
        Some(p) => Some(
            ClusterConfig::load_with(&PathBuf::from(p), &opts.registry)
                .map_err(|e| JoinError::Config(e.to_string()))?,
        ),
        None => None,
    };
    let node = match (&cfg, &info.node) {
        (Some(c), Some(n)) => Some(c.node(n).ok_or_else(|| {
            JoinError::Config(format!("node {n:?} is not in {}", c.file.display()))
        })?),
        (Some(c), None) => {
            return Err(JoinError::Config(format!(
                "BCL_NODE is not set: which node of {} is this?",
                c.file.display()
            )))
        }
        _ => None,
    };
    let policy = policy_from(cfg.as_ref(), &opts.registry).map_err(JoinError::Config)?;
    let static_job = match std::env::var_os("BCL_STATIC") {
        Some(file) => {
            let j = StaticJob::load(&PathBuf::from(file))?;
            if j.members.len() != info.size as usize {
                return Err(JoinError::Config(format!(
                    "the static job file lists {} processes, the job has {}",
                    j.members.len(),
                    info.size
                )));
            }
            Some(j)
        }
        None => None,
    };
    let (planned, mut notes) = match &static_job {
        // Static: exactly the descriptors the file gives this rank.
        Some(_) => (Vec::new(), Vec::new()),
        None => {
            let ifs = nics::interfaces()
                .map_err(|e| JoinError::Config(format!("listing interfaces: {e}")))?;
            plan(cfg.as_ref(), node, &ifs, info.local_rank, &policy).map_err(JoinError::Config)?
        }
    };
    let node_index = pmi
        .as_ref()
        .map(|p| p.node_index)
        .or_else(|| std::env::var("BCL_NODE_INDEX").ok()?.parse::<u32>().ok())
        .or_else(|| {
            let (c, n) = (cfg.as_ref()?, node?);
            c.nodes
                .iter()
                .position(|x| x.name == n.name)
                .map(|i| i as u32)
        })
        .unwrap_or(0);
    let mut local = ProcessAddr::new(node_index + 1, info.local_rank as u16);
    let job = job_key(&info.job_id);
    let mut methods: Vec<Opened> = Vec::new();
    if let Some(j) = &static_job {
        let me = &j.members[info.rank as usize];
        local = me
            .addr
            .parse()
            .map_err(|_| JoinError::Config(format!("static file: bad address {:?}", me.addr)))?;
        methods = open_static(&me.table, job, local, &opts.registry)?;
    }
    // A node daemon that opens owns the node's NICs of its family: the
    // process's own endpoints there would see the same frames twice (or,
    // for afxdp and vfio, fight the daemon for the NIC).
    let mut daemon_family: Option<&str> = None;
    for p in &planned {
        let kind = opts.registry.get(&p.method);
        let family = kind.and_then(|k| k.family());
        let through_daemon = kind.is_some_and(|k| k.attachment() == Attachment::Daemon);
        if let (Some(owner), Some(f)) = (daemon_family, family) {
            if owner == f && !through_daemon {
                notes.push(format!(
                    "{}: not opened, the node daemon (bcld) serves its NICs",
                    p.method
                ));
                continue;
            }
        }
        match open(p, job, local, &opts.registry) {
            Ok(m) => {
                if through_daemon {
                    daemon_family = daemon_family.or(family);
                }
                methods.push((m, p.fabric.clone()))
            }
            Err(e) => notes.push(format!(
                "{}{}: cannot open: {e}",
                p.method,
                p.ifname
                    .as_ref()
                    .map(|i| format!(" on {i}"))
                    .unwrap_or_default()
            )),
        }
    }
    if let Some(pin) = &policy.pin {
        let opened: Vec<&str> = methods.iter().map(|(m, _)| m.name()).collect();
        if !pin.methods.iter().any(|m| opened.contains(&m.as_str())) {
            return Err(JoinError::Config(format!(
                "{} cannot be honoured on this process: none of its methods opened ({})",
                pin.source,
                notes.join("; ")
            )));
        }
        for m in pin.methods.iter().filter(|m| !opened.contains(&m.as_str())) {
            notes.push(format!(
                "{m} (pinned by {}) is not open on this process",
                pin.source
            ));
        }
    }
    if methods.is_empty() {
        return Err(JoinError::Config(format!(
            "no method could be opened: {}",
            notes.join("; ")
        )));
    }
    let host = info.node.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_string()
    });
    let node_id = match &static_job {
        Some(j) => j.members[info.rank as usize].table.node.clone(),
        None => node_identity(),
    };
    let mut table = DescriptorTable::new(node_id, host);
    let mtu = methods
        .iter()
        .map(|(m, _)| m.caps().mtu)
        .min()
        .unwrap_or(1500);
    let mut b = Endpoint::builder(local, job)
        .mode(opts.mode)
        .rails(policy.rails)
        .configure(|c| (opts.configure)(c, mtu));
    for (m, fabric) in methods {
        table.push(&m.descriptor(), fabric.as_deref());
        b = b.method(m);
    }
    let mut endpoint = b.build()?;
    endpoint.set_policy(LocalPolicy {
        table: table.clone(),
        policy,
    });
    let (members, session): (Vec<Member>, Option<Session>) = if let Some(j) = static_job {
        (j.members, None)
    } else if let Some(p) = pmi {
        let (m, s) = p.exchange(local, &table, opts.timeout)?;
        (m, Some(s))
    } else {
        let at: RendezvousAddr = std::env::var("BCL_RENDEZVOUS")
            .map_err(|_| {
                BootstrapError::Identity(
                    "BCL_RENDEZVOUS is not set (start the job with bcl-run, mpiexec or srun --mpi=pmi2, or set BCL_STATIC)"
                        .into(),
                )
            })?
            .parse()?;
        let secret = std::env::var("BCL_JOB_SECRET")
            .map_err(|_| BootstrapError::Identity("BCL_JOB_SECRET is not set".into()))?;
        // bcl-run says how long the rendezvous waits: wait no longer.
        let timeout = std::env::var("BCL_TIMEOUT_SECS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(opts.timeout, |t| {
                opts.timeout.min(Duration::from_secs(t + 1))
            });
        let (m, s) = bootstrap::exchange(&at, &secret, &info, local, &table, timeout)?;
        // The operator's commands (bcl-admin detach/rejoin) reach the
        // endpoint through the control feed; a job runs without one.
        let feed = crate::admin::admin_channel()
            .map_err(|e| BootstrapError::Rendezvous(format!("control feed: {e}")))
            .and_then(|(to, inbox)| {
                super::control::subscribe(&at, &secret, &info, to, timeout)?;
                endpoint
                    .set_admin_inbox(inbox)
                    .map_err(|e| BootstrapError::Rendezvous(format!("control feed: {e}")))
            });
        if let Err(e) = feed {
            notes.push(format!("no operator control (bcl-admin): {e}"));
        }
        (m, Some(s))
    };
    // Liveness per node pair, shared with the job's processes of this node
    // (a job runs without it, watching each peer on its own).
    if std::env::var("BCL_NODE_LIVENESS").as_deref() != Ok("off") {
        if let Err(e) = endpoint.share_liveness_on_node() {
            notes.push(format!("liveness per process, not per node: {e}"));
        }
    }
    let mut addrs = Vec::new();
    let mut tables = Vec::new();
    for m in members {
        let a: ProcessAddr = m
            .addr
            .parse()
            .map_err(|_| JoinError::Config(format!("rank {}: bad address {:?}", m.rank, m.addr)))?;
        if m.rank != info.rank {
            endpoint.add_peer_table(a, m.table.clone());
        }
        addrs.push(a);
        tables.push(m.table);
    }
    Ok(Joined {
        info,
        endpoint,
        addrs,
        tables,
        session,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn plans_follow_the_nodes_nics_the_policy_and_the_afxdp_rule() {
        let cfg = ClusterConfig::parse(
            Path::new("m.toml"),
            "[[fabric]]\nname = \"A\"\nsubnet = \"10.1.0.0/24\"\n\
             [[node]]\nname = \"a\"\n[[node.nic]]\nfabric = \"A\"\nmethods = [\"afxdp\", \"packet\", \"udp\"]\n\
             [[node]]\nname = \"p\"\nshm = false\n[[node.nic]]\nfabric = \"A\"\nmethods = [\"packet\"]\n",
        )
        .unwrap();
        let ifs = vec![NicInfo {
            name: "eth0".into(),
            index: 2,
            up: true,
            ipv4: vec![("10.1.0.5".parse().unwrap(), 24)],
            excluded: None,
        }];
        let names = |p: &[Planned]| p.iter().map(|x| x.method.clone()).collect::<Vec<_>>();
        let pol = Policy::default();
        let (p, _) = plan(Some(&cfg), cfg.node("a"), &ifs, 0, &pol).unwrap();
        assert_eq!(names(&p), vec!["shm", "afxdp", "packet", "udp"]);
        assert_eq!(p[3].ip, Some("10.1.0.5".parse().unwrap()));
        assert_eq!(p[1].fabric.as_deref(), Some("A"));
        // One AF_XDP NIC, two processes: local rank 1 does not open it
        // and says why.
        let (p, notes) = plan(Some(&cfg), cfg.node("a"), &ifs, 1, &pol).unwrap();
        assert_eq!(names(&p), vec!["shm", "packet", "udp"]);
        assert!(
            notes.iter().any(|n| n
                == "afxdp on fabric A: not opened by local rank 1: its NIC (eth0) is held by local rank 0 (one afxdp endpoint per interface; local rank i takes the i-th NIC of the fabric)"),
            "{notes:?}"
        );
        let (p, notes) = plan(Some(&cfg), cfg.node("p"), &ifs, 0, &pol).unwrap();
        assert_eq!(names(&p), vec!["packet"]);
        assert!(notes.iter().any(|n| n.contains("shm = false")), "{notes:?}");
        assert!(
            notes.iter().any(|n| n.starts_with("udp: no NIC")),
            "{notes:?}"
        );
        let udp = Policy::new(
            Registry::builtin(),
            &[],
            Some(Pin::parse("udp", "BCL_METHODS=udp", Registry::builtin()).unwrap()),
        );
        let (p, _) = plan(Some(&cfg), cfg.node("a"), &ifs, 0, &udp).unwrap();
        assert_eq!(names(&p), vec!["udp"]);
        assert!(plan(Some(&cfg), cfg.node("a"), &[], 0, &pol)
            .unwrap_err()
            .contains("no interface"));
    }

    #[test]
    fn vfio_nics_are_named_by_pci_address_one_per_process() {
        // Node v: one kernel NIC on A, two NICs bound to vfio-pci on V
        // (no kernel interface for those).
        let cfg = ClusterConfig::parse(
            Path::new("v.toml"),
            "[[fabric]]\nname = \"A\"\nsubnet = \"10.1.0.0/24\"\n\
             [[fabric]]\nname = \"V\"\n\
             [[node]]\nname = \"v\"\n\
             [[node.nic]]\nfabric = \"A\"\nmethods = [\"packet\", \"udp\"]\n\
             [[node.nic]]\nfabric = \"V\"\npci = \"0000:00:04.0\"\nmethods = [\"vfio\"]\n\
             [[node.nic]]\nfabric = \"V\"\npci = \"0000:00:05.0\"\nmethods = [\"vfio\"]\n",
        )
        .unwrap();
        let ifs = vec![NicInfo {
            name: "eth0".into(),
            index: 2,
            up: true,
            ipv4: vec![("10.1.0.5".parse().unwrap(), 24)],
            excluded: None,
        }];
        let pol = Policy::default();
        let (p, _) = plan(Some(&cfg), cfg.node("v"), &ifs, 0, &pol).unwrap();
        assert_eq!(
            on(&p),
            pairs(&[
                ("shm", ""),
                ("vfio", "0000:00:04.0"),
                ("packet", "eth0"),
                ("udp", "eth0")
            ])
        );
        assert_eq!(p[1].fabric.as_deref(), Some("V"));
        let (p, _) = plan(Some(&cfg), cfg.node("v"), &ifs, 1, &pol).unwrap();
        assert_eq!(on(&p)[1], ("vfio".to_string(), "0000:00:05.0".to_string()));
        // A third process finds both devices taken and says so.
        let (p, notes) = plan(Some(&cfg), cfg.node("v"), &ifs, 2, &pol).unwrap();
        assert!(!p.iter().any(|x| x.method == "vfio"), "{p:?}");
        assert!(
            notes.iter().any(|n| n.starts_with("vfio on fabric V: not opened by local rank 2: its 2 NICs (0000:00:04.0, 0000:00:05.0) are held by local ranks 0-1")),
            "{notes:?}"
        );
        // Opening a device that is not there says which and why.
        let e = open(
            &p_vfio("0000:ff:1f.7"),
            JobKey(1),
            ProcessAddr::new(1, 1),
            Registry::builtin(),
        )
        .err()
        .unwrap();
        assert!(e.contains("0000:ff:1f.7"), "{e}");
    }

    fn p_vfio(pci: &str) -> Planned {
        Planned {
            method: "vfio".into(),
            ifname: Some(pci.into()),
            ip: None,
            fabric: Some("V".into()),
        }
    }

    /// NICs as `plan_on` sees them: (ifname, fabric, methods).
    fn slots(list: &[(&str, &str, &[&str])]) -> Vec<NicSlot> {
        list.iter()
            .map(|(i, f, m)| {
                (
                    i.to_string(),
                    Some(Ipv4Addr::new(10, 0, 0, 1)),
                    f.to_string(),
                    m.iter().map(|x| x.to_string()).collect(),
                )
            })
            .collect()
    }

    /// (method, ifname) of each planned method.
    fn on(p: &[Planned]) -> Vec<(String, String)> {
        p.iter()
            .map(|x| (x.method.clone(), x.ifname.clone().unwrap_or_default()))
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn with_rails_packet_opens_every_nic_of_a_fabric_own_one_first() {
        let mut pol = Policy {
            rails: true,
            ..Policy::default()
        };
        let all: &[&str] = &["afxdp", "packet", "udp"];
        let rail: &[&str] = &["afxdp", "packet"];
        let two = slots(&[("to-fa", "A", all), ("to-fa-2", "A", rail)]);
        let (p, _) = plan_on(&two, true, false, 1, &pol);
        assert_eq!(
            on(&p),
            pairs(&[
                ("shm", ""),
                ("afxdp", "to-fa-2"),
                ("packet", "to-fa-2"),
                ("packet", "to-fa"),
                ("udp", "to-fa")
            ]),
            "afxdp owns its NIC: still one per process"
        );
        pol.rails = false;
        let (p, _) = plan_on(&two, true, false, 1, &pol);
        assert_eq!(p.iter().filter(|x| x.method == "packet").count(), 1);
    }

    #[test]
    fn with_rails_a_process_goes_through_every_daemon_nic_of_the_fabric_its_own_first() {
        let mut pol = Policy {
            rails: true,
            order: vec!["bcld".into(), "packet".into()],
            ..Policy::default()
        };
        let both: &[&str] = &["bcld", "packet"];
        let two = slots(&[
            ("to-fa", "A", both),
            ("to-fb", "B", both),
            ("to-fa-2", "A", both),
        ]);
        // The daemon connections a plan opens, by NIC name ("": unnamed).
        let through_daemon = |nics: &[NicSlot], pol: &Policy| {
            let (p, _) = plan_on(nics, false, false, 1, pol);
            on(&p)
                .into_iter()
                .filter(|(m, _)| m == "bcld")
                .collect::<Vec<_>>()
        };
        assert_eq!(
            through_daemon(&two, &pol),
            pairs(&[("bcld", "to-fa-2"), ("bcld", "to-fa")]),
            "fabric A only (the first that allows bcld), local rank 1's NIC first"
        );
        // One NIC of the fabric, or no rails: the daemon's first NIC,
        // unnamed (the daemon chooses).
        let one = slots(&[("to-fa", "A", both), ("to-fb", "B", both)]);
        assert_eq!(through_daemon(&one, &pol), pairs(&[("bcld", "")]));
        pol.rails = false;
        assert_eq!(through_daemon(&two, &pol), pairs(&[("bcld", "")]));
    }

    #[test]
    fn each_process_of_a_node_takes_its_own_afxdp_nic_of_a_fabric() {
        let pol = Policy::default();
        let all: &[&str] = &["afxdp", "packet", "udp"];
        let rail: &[&str] = &["afxdp", "packet"];
        // Two NICs on fabric A, two processes: both open afxdp, each on
        // its own NIC; packet on the same NIC; udp on the first.
        let two = slots(&[("to-fa", "A", all), ("to-fa-2", "A", rail)]);
        let (p, notes) = plan_on(&two, true, false, 0, &pol);
        assert_eq!(
            on(&p),
            pairs(&[
                ("shm", ""),
                ("afxdp", "to-fa"),
                ("packet", "to-fa"),
                ("udp", "to-fa")
            ])
        );
        assert!(notes.is_empty(), "{notes:?}");
        let (p, notes) = plan_on(&two, true, false, 1, &pol);
        assert_eq!(
            on(&p),
            pairs(&[
                ("shm", ""),
                ("afxdp", "to-fa-2"),
                ("packet", "to-fa-2"),
                ("udp", "to-fa")
            ])
        );
        assert!(notes.is_empty(), "{notes:?}");
        // A third process: no AF_XDP NIC left (not rank modulo count,
        // which would ask for to-fa again); packet shares NIC 0.
        let (p, notes) = plan_on(&two, true, false, 2, &pol);
        assert_eq!(
            on(&p),
            pairs(&[("shm", ""), ("packet", "to-fa"), ("udp", "to-fa")])
        );
        assert_eq!(
            notes,
            ["afxdp on fabric A: not opened by local rank 2: its 2 NICs (to-fa, to-fa-2) are held by local ranks 0-1 (one afxdp endpoint per interface; local rank i takes the i-th NIC of the fabric)"]
        );
        // One NIC, two processes: rank 1 gets the recorded reason.
        let one = slots(&[("eth0", "A", all)]);
        let (p, notes) = plan_on(&one, true, false, 1, &pol);
        assert_eq!(
            on(&p),
            pairs(&[("shm", ""), ("packet", "eth0"), ("udp", "eth0")])
        );
        assert!(
            notes[0].starts_with("afxdp on fabric A: not opened by local rank 1: its NIC (eth0) is held by local rank 0"),
            "{notes:?}"
        );
        // NICs are counted per fabric: one on A and one on C give every
        // rank-0 process both, and rank 1 neither afxdp.
        let ac = slots(&[("x", "A", rail), ("y", "C", rail)]);
        let (p, _) = plan_on(&ac, false, false, 0, &pol);
        assert_eq!(
            on(&p),
            pairs(&[
                ("afxdp", "x"),
                ("afxdp", "y"),
                ("packet", "x"),
                ("packet", "y")
            ])
        );
        let (p, notes) = plan_on(&ac, false, false, 1, &pol);
        assert_eq!(on(&p), pairs(&[("packet", "x"), ("packet", "y")]));
        assert_eq!(
            notes
                .iter()
                .filter(|n| n.contains("not opened by local rank 1"))
                .count(),
            2,
            "{notes:?}"
        );
        // Only NICs that allow afxdp count: a second NIC with packet only
        // does not give rank 1 afxdp.
        let mixed = slots(&[("x", "A", rail), ("z", "A", &["packet"])]);
        let (p, _) = plan_on(&mixed, false, false, 1, &pol);
        assert_eq!(on(&p), pairs(&[("packet", "z")]));
    }

    #[test]
    fn the_configuration_matrix_gives_every_rail_its_process() {
        let cfg = ClusterConfig::parse(
            Path::new("m.toml"),
            "[[fabric]]\nname = \"A\"\nsubnet = \"10.1.0.0/24\"\n\
             [[node]]\nname = \"a\"\n[[node.nic]]\nfabric = \"A\"\n[[node.nic]]\nfabric = \"A\"\n",
        )
        .unwrap();
        let a = cfg.node("a").unwrap();
        let pol = Policy::default();
        let entries = |l: u32| {
            let (t, _) = config_table(a, l, &pol);
            t.entries
                .iter()
                .map(|e| format!("{} {}", e.method, e.address))
                .collect::<Vec<_>>()
        };
        assert!(entries(0).contains(&"afxdp a/nic-A.0".to_string()));
        assert!(entries(1).contains(&"afxdp a/nic-A.2.1".to_string()));
        assert!(!entries(2).iter().any(|e| e.starts_with("afxdp")));
        // And on this host's interfaces, found by subnet in index order.
        let ifs = vec![
            NicInfo {
                name: "r1".into(),
                index: 9,
                up: true,
                ipv4: vec![("10.1.0.6".parse().unwrap(), 24)],
                excluded: None,
            },
            NicInfo {
                name: "r0".into(),
                index: 4,
                up: true,
                ipv4: vec![("10.1.0.5".parse().unwrap(), 24)],
                excluded: None,
            },
        ];
        let (p, _) = plan(Some(&cfg), Some(a), &ifs, 1, &pol).unwrap();
        assert_eq!(
            on(&p),
            pairs(&[
                ("shm", ""),
                ("bcld", ""),
                ("afxdp", "r1"),
                ("packet", "r1"),
                ("udp", "r0")
            ])
        );
        assert_eq!(p[4].ip, Some("10.1.0.5".parse().unwrap()));
    }

    #[test]
    fn job_keys_differ_per_job() {
        assert_ne!(job_key("1"), job_key("2"));
        assert_eq!(job_key("x"), job_key("x"));
    }
}
