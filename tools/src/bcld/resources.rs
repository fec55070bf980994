//! The daemon's NICs from the resource database: the node's entry in a
//! cluster file gives its id (its position, counting from 1, as jobs
//! number nodes) and its NICs with the methods each allows. The daemon
//! owns the NICs that allow `bcld` (the ones jobs reach through it), in
//! file order; a node none of whose NICs names `bcld` gives it its first
//! NIC with an Ethernet method. On each NIC it tries the Ethernet methods
//! the NIC allows in the registry's order (vfio, afxdp, packet).

use super::daemon::Candidate;
use bcl::cluster::nics;
use bcl::cluster::resources::ClusterConfig;
use bcl::core::method::Attachment;
use bcl::registry::Registry;
use std::path::Path;

/// This node's name: `$BCL_NODE`, else the host name.
pub fn own_name() -> String {
    std::env::var("BCL_NODE").unwrap_or_else(|_| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    })
}

/// The id of node `name` in `file` and the NICs its daemon opens, each
/// with its methods best first.
pub fn from_cluster(file: &Path, name: &str) -> Result<(u32, Vec<Candidate>), String> {
    let registry = Registry::builtin();
    let cfg = ClusterConfig::load_with(file, registry).map_err(|e| e.to_string())?;
    let index = cfg
        .nodes
        .iter()
        .position(|n| n.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = cfg.nodes.iter().map(|n| n.name.as_str()).collect();
            format!(
                "{}: no node {name:?} (its nodes: {}); name it with --node-name or BCL_NODE",
                file.display(),
                names.join(", ")
            )
        })?;
    let node = &cfg.nodes[index];
    let on_device = |m: &str| {
        registry
            .get(m)
            .is_some_and(|k| k.attachment() == Attachment::Device)
    };
    // The NICs with a kernel interface, found as the cluster layer finds
    // them (by name or by the fabric's subnet).
    let ifs = nics::interfaces().map_err(|e| format!("listing interfaces: {e}"))?;
    let found = nics::resolve_kernel(&cfg, node, &ifs, on_device)?;
    let daemon_nics = node
        .nics
        .iter()
        .filter(|n| n.methods.iter().any(|m| m == bcl::shm::engine::METHOD_NAME))
        .count();
    let mut out: Vec<Candidate> = Vec::new();
    for (nic, i) in node.nics.iter().zip(found) {
        let for_daemon = nic
            .methods
            .iter()
            .any(|m| m == bcl::shm::engine::METHOD_NAME);
        if daemon_nics > 0 && !for_daemon {
            continue;
        }
        if daemon_nics == 0 && !out.is_empty() {
            break;
        }
        let ifname = i.map(|i| i.name.clone());
        for kind in registry.kinds() {
            let m = kind.name();
            let usable = kind.family() == Some("ethernet")
                && kind.attachment() != Attachment::Daemon
                && nic.methods.iter().any(|x| x == m);
            if !usable {
                continue;
            }
            let target = match kind.attachment() {
                Attachment::Device => nic.pci.clone(),
                _ => ifname.clone(),
            };
            if let Some(t) = target {
                out.push(Candidate {
                    method: m.to_string(),
                    nic: Some(t),
                });
            }
        }
    }
    if out.is_empty() {
        return Err(format!(
            "{}: node {name} has no NIC that allows an Ethernet method (packet, afxdp, vfio)",
            file.display()
        ));
    }
    Ok((index as u32 + 1, out))
}
