//! Heterogeneous clusters: descriptor tables, the resource database, NIC
//! selection, per-peer method selection and bootstrap.
//!
//! - [`descriptor`]: the table of methods a process publishes.
//! - [`resources`]: the cluster configuration (`configs/*.toml`).
//! - [`nics`]: this host's interfaces and which is on which fabric.
//! - [`select`]: the policy (same node → `shm`; same fabric → `vfio`,
//!   `afxdp`, `packet`; otherwise `udp`), pins (`BCL_METHODS`), and the
//!   per-link record of the choice.
//! - [`bootstrap`]: how the processes of a job learn each other's tables.
//! - [`pmi2`]: the same through the launchers clusters already run
//!   (hydra's `mpiexec`, Slurm's `srun --mpi=pmi2`): a PMI-2 client.
//! - [`join`]: what a process of a job calls: open its methods, exchange
//!   tables, get an endpoint.
//!
//! An [`Endpoint`](crate::Endpoint) given a [`LocalPolicy`]
//! ([`Endpoint::set_policy`](crate::Endpoint::set_policy)) and its peers'
//! tables ([`Endpoint::add_peer_table`](crate::Endpoint::add_peer_table))
//! chooses each peer's method on first send and records why
//! ([`Endpoint::link`](crate::Endpoint::link)). Without a policy it keeps
//! the plain behaviour: the first method in its own order that opens one of
//! the peer's descriptors.

pub mod bootstrap;
pub mod control;
pub mod descriptor;
pub mod join;
pub mod nics;
pub mod pmi2;
pub mod resources;
pub mod select;

use crate::method_slot::MethodSlot;
use bcl_core::method::{Descriptor, Route};
use bcl_core::port::Port;
use bcl_core::{ProcessAddr, SendFailure, Time};
use descriptor::DescriptorTable;
use select::{LinkRecord, Policy};
use std::collections::HashMap;

/// This node's identity: processes with equal identities can share memory
/// (the shared-memory method's definition: boot id plus network namespace,
/// so that lab nodes, one namespace each, are different nodes).
pub use bcl_shm::node_identity;

/// What an endpoint needs to choose methods by policy: its own table (its
/// methods' descriptors with their fabrics and its node) and the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPolicy {
    /// This process's table.
    pub table: DescriptorTable,
    /// The order and pin.
    pub policy: Policy,
}

/// The endpoint's knowledge of its peers: plain descriptors, descriptor
/// tables, the policy and the record of every link's choice.
#[derive(Default)]
pub(crate) struct Directory {
    descriptors: HashMap<ProcessAddr, Vec<Descriptor>>,
    tables: HashMap<ProcessAddr, DescriptorTable>,
    policy: Option<LocalPolicy>,
    links: HashMap<ProcessAddr, LinkRecord>,
    /// Open every further rail a peer can be reached by (see
    /// [`Endpoint::rails`](crate::Endpoint)).
    rails: bool,
}

impl Directory {
    /// An empty directory; `rails`: reach peers through every method that
    /// can.
    pub(crate) fn with_rails(rails: bool) -> Self {
        Directory {
            rails,
            ..Directory::default()
        }
    }

    pub(crate) fn add(&mut self, addr: ProcessAddr, d: Descriptor) {
        self.descriptors.entry(addr).or_default().push(d);
    }

    pub(crate) fn add_table(&mut self, addr: ProcessAddr, t: DescriptorTable) {
        self.tables.insert(addr, t);
    }

    pub(crate) fn set_policy(&mut self, p: LocalPolicy) {
        self.policy = Some(p);
    }

    pub(crate) fn policy(&self) -> Option<&LocalPolicy> {
        self.policy.as_ref()
    }
}

/// Opens the route to `addr`: by policy when the endpoint has one and
/// knows the peer's table, else the first method in the endpoint's order
/// that opens one of the peer's descriptors. Records the choice; a peer
/// nothing reaches has its sends failed.
pub(crate) fn route(
    dir: &mut Directory,
    methods: &mut [MethodSlot],
    port: &mut Port,
    addr: ProcessAddr,
    now: Time,
) {
    let mut open = |methods: &mut [MethodSlot], i: usize, d: &Descriptor| {
        let link = methods[i].open_link(d).map_err(|e| e.to_string())?;
        let route = Route {
            method: i as u8,
            link,
        };
        port.set_route(now, addr, route).map_err(|e| e.to_string())
    };
    let record = match (&dir.policy, dir.tables.get(&addr)) {
        (Some(local), Some(peer)) => {
            let (found, mut passed) = select::candidates(&local.table, peer, &local.policy);
            let mut chosen = None;
            for c in found {
                let local_d = c.local.descriptor();
                let Some(i) = methods.iter().position(|m| m.descriptor() == local_d) else {
                    passed.push(format!(
                        "{}: no open method has descriptor {local_d}",
                        c.method
                    ));
                    continue;
                };
                match open(methods, i, &c.peer.descriptor()) {
                    Ok(()) => {
                        let before = select::passed_before(&passed, &local.policy, &c.method);
                        chosen = Some(LinkRecord {
                            method: Some(c.method.clone()),
                            descriptor: Some(c.peer.descriptor()),
                            reason: select::explain(&c, &before, &local.policy),
                        });
                        break;
                    }
                    Err(e) => passed.push(format!("{}: opening the link failed: {e}", c.method)),
                }
            }
            chosen.unwrap_or_else(|| LinkRecord {
                method: None,
                descriptor: None,
                reason: select::no_route(&passed, &local.policy),
            })
        }
        (policy, table) => {
            let mut all: Vec<Descriptor> = dir.descriptors.get(&addr).cloned().unwrap_or_default();
            if let Some(t) = table {
                all.extend(t.entries.iter().map(|e| e.descriptor()));
            }
            let allowed = |name: &str| policy.as_ref().is_none_or(|p| p.policy.allows(name));
            let mut failures = Vec::new();
            let mut chosen = None;
            'outer: for i in 0..methods.len() {
                let name = methods[i].name();
                if !allowed(name) {
                    continue;
                }
                for d in all.iter().filter(|d| d.method == name) {
                    match open(methods, i, d) {
                        Ok(()) => {
                            chosen = Some(LinkRecord {
                                method: Some(name.to_string()),
                                descriptor: Some(d.clone()),
                                reason: format!(
                                    "{name}: the first method in the endpoint's order that opens one of the peer's descriptors (no descriptor table for the peer)"
                                ),
                            });
                            break 'outer;
                        }
                        Err(e) => failures.push(format!("{d}: {e}")),
                    }
                }
            }
            chosen.unwrap_or_else(|| LinkRecord {
                method: None,
                descriptor: None,
                reason: if all.is_empty() {
                    "no descriptor known for the peer".to_string()
                } else {
                    format!(
                        "no method of this endpoint opens the peer's descriptors ({}){}",
                        all.iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        if failures.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", failures.join("; "))
                        }
                    )
                },
            })
        }
    };
    let failed = record.method.is_none();
    let main = record.descriptor.clone();
    dir.links.insert(addr, record);
    if failed {
        port.fail_sends_to(addr, SendFailure::NoRoute(addr));
    } else if dir.rails {
        if let Some(main) = main {
            add_rails(dir, methods, port, addr, &main, now);
        }
    }
}

/// The NIC a descriptor names: its address up to the first `/` (an
/// Ethernet method's MAC, before its port; an IP method's whole address).
fn nic_of(d: &Descriptor) -> String {
    d.address.split('/').next().unwrap_or_default().to_string()
}

/// Opens the further rails to `addr`, whose main link goes to descriptor
/// `main`: each other method of this endpoint of the main link's kind (the
/// Ethernet family, or the main method itself: a udp socket and an
/// Ethernet method may sit on one NIC, which descriptors cannot tell) takes the first of the peer's descriptors of its own
/// method not yet used by another rail and on the main link's fabric (when
/// the peer's table says), so the k-th NIC of one end pairs with the k-th
/// of the other, as BCL-3's dual-NIC protocol paired them.
fn add_rails(
    dir: &mut Directory,
    methods: &mut [MethodSlot],
    port: &mut Port,
    addr: ProcessAddr,
    main: &Descriptor,
    now: Time,
) {
    let Some(main_route) = port.peer_info(addr).and_then(|i| i.route) else {
        return;
    };
    // The peer's descriptors in its order, with their fabrics if known.
    let mut known: Vec<(Descriptor, Option<String>)> = dir
        .descriptors
        .get(&addr)
        .map(|v| v.iter().map(|d| (d.clone(), None)).collect())
        .unwrap_or_default();
    if let Some(t) = dir.tables.get(&addr) {
        known.extend(t.entries.iter().map(|e| (e.descriptor(), e.fabric.clone())));
    }
    let main_fabric = known
        .iter()
        .find(|(d, _)| d == main)
        .and_then(|(_, f)| f.clone());
    // NICs already in a rail, on each side: two rails on one NIC pair
    // would only share its link.
    let mut used_peer = vec![nic_of(main)];
    let mut used_local = vec![nic_of(
        &methods[usize::from(main_route.method)].descriptor(),
    )];
    let mut routes = vec![main_route];
    // Rails are NICs of one kind: methods of the main link's family (the
    // Ethernet methods between them), or the main link's method itself.
    let registry = crate::registry::Registry::builtin();
    let family = |name: &str| registry.get(name).and_then(|k| k.family());
    let main_name = methods[usize::from(main_route.method)].name();
    let same_kind = |name: &str| {
        name == main_name || (family(name).is_some() && family(name) == family(main_name))
    };
    for (i, method) in methods.iter_mut().enumerate() {
        if i == usize::from(main_route.method)
            || method.caps().reliable
            || !same_kind(method.name())
        {
            continue;
        }
        let local_nic = nic_of(&method.descriptor());
        if used_local.contains(&local_nic) {
            continue;
        }
        let name = method.name();
        let candidate = known.iter().find(|(d, fabric)| {
            d.method == name
                && !used_peer.contains(&nic_of(d))
                && (main_fabric.is_none() || fabric.is_none() || *fabric == main_fabric)
        });
        let Some((d, _)) = candidate.cloned() else {
            continue;
        };
        if let Ok(link) = method.open_link(&d) {
            routes.push(Route {
                method: i as u8,
                link,
            });
            used_peer.push(nic_of(&d));
            used_local.push(local_nic);
        }
    }
    if routes.len() > 1 {
        routes.truncate(bcl_core::MAX_RAILS);
        // Only the main route is required: a refusal leaves the peer on it.
        let _ = port.set_rails(now, addr, &routes);
    }
}

/// The record of `addr`'s link: the one made on first send, or, when the
/// peer's frames opened the link first, the method they came in on.
pub(crate) fn link(
    dir: &Directory,
    methods: &[MethodSlot],
    port: &Port,
    addr: ProcessAddr,
) -> Option<LinkRecord> {
    if let Some(r) = dir.links.get(&addr) {
        return Some(r.clone());
    }
    let route = port.peer_info(addr)?.route?;
    let name = methods.get(usize::from(route.method))?.name();
    Some(LinkRecord {
        method: Some(name.to_string()),
        descriptor: None,
        reason: format!("{name}: the peer's first frame came in on it (the peer chose)"),
    })
}
