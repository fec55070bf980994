//! Network interfaces of this host, and which one is on which fabric.
//!
//! Interfaces are classified from `/sys/class/net` and their IPv4
//! addresses from `getifaddrs`. Loopback, bridges (and their ports) and
//! container plumbing (`docker*`, `br-*`, `virbr*`) are never chosen
//! unless the configuration names them (`ifname`): they are the wrong
//! answer every time a library guesses (see UCX picking `docker0`).

use super::resources::{ClusterConfig, Node, Subnet};
use std::net::Ipv4Addr;
use std::path::Path;

/// One interface of this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicInfo {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// Administratively and operationally up.
    pub up: bool,
    /// IPv4 addresses with prefix lengths.
    pub ipv4: Vec<(Ipv4Addr, u8)>,
    /// Why it is never picked unless named, if so (`loopback`, `bridge`,
    /// `bridge port`, `container bridge`).
    pub excluded: Option<&'static str>,
}

impl NicInfo {
    /// The subnets of its IPv4 addresses.
    pub fn subnets(&self) -> Vec<Subnet> {
        self.ipv4
            .iter()
            .map(|(ip, l)| Subnet::of(*ip, *l))
            .collect()
    }

    /// The name a fabric gets when no configuration names it: its IPv4
    /// subnet (`ipv4:10.77.8.0/24`), assuming one subnet per L2 segment.
    pub fn discovered_fabric(&self) -> Option<String> {
        self.subnets().first().map(|s| format!("ipv4:{s}"))
    }
}

/// Why an interface named `name` should not be picked unless asked for.
pub fn exclusion(name: &str, sys: &Path) -> Option<&'static str> {
    let dir = sys.join(name);
    let kind = std::fs::read_to_string(dir.join("type")).unwrap_or_default();
    if name == "lo" || kind.trim() == "772" {
        return Some("loopback");
    }
    if name.starts_with("docker") || name.starts_with("br-") || name.starts_with("virbr") {
        return Some("container bridge");
    }
    if dir.join("bridge").exists() {
        return Some("bridge");
    }
    if dir.join("brport").exists() {
        return Some("bridge port");
    }
    None
}

/// Every interface of this host (of this network namespace).
pub fn interfaces() -> std::io::Result<Vec<NicInfo>> {
    let sys = Path::new("/sys/class/net");
    let mut out = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(sys)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let addrs: Vec<_> = nix::ifaddrs::getifaddrs()
        .map_err(std::io::Error::from)?
        .collect();
    for name in names {
        let dir = sys.join(&name);
        let index = std::fs::read_to_string(dir.join("ifindex"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let oper = std::fs::read_to_string(dir.join("operstate")).unwrap_or_default();
        let flags = std::fs::read_to_string(dir.join("flags")).unwrap_or_default();
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap_or(0);
        let up = flags & 1 != 0 && oper.trim() != "down";
        let mut ipv4 = Vec::new();
        for a in addrs.iter().filter(|a| a.interface_name == name) {
            let (Some(addr), Some(mask)) = (
                a.address.as_ref().and_then(|x| x.as_sockaddr_in()),
                a.netmask.as_ref().and_then(|x| x.as_sockaddr_in()),
            ) else {
                continue;
            };
            ipv4.push((addr.ip(), u32::from(mask.ip()).count_ones() as u8));
        }
        out.push(NicInfo {
            excluded: exclusion(&name, sys),
            name,
            index,
            up,
            ipv4,
        });
    }
    Ok(out)
}

/// [`resolve`] for the NICs of `node` that have a kernel interface: those
/// that allow a method for which `on_device` is false (a NIC that only
/// device methods use is bound to vfio-pci and has none). Index for index
/// with `node.nics`, `None` for the device-only ones.
pub fn resolve_kernel<'a>(
    cfg: &ClusterConfig,
    node: &Node,
    ifs: &'a [NicInfo],
    on_device: impl Fn(&str) -> bool,
) -> Result<Vec<Option<&'a NicInfo>>, String> {
    let has_interface =
        |n: &crate::cluster::resources::Nic| n.methods.iter().any(|m| !on_device(m));
    let kernel = Node {
        nics: node
            .nics
            .iter()
            .filter(|n| has_interface(n))
            .cloned()
            .collect(),
        ..node.clone()
    };
    let mut found = resolve(cfg, &kernel, ifs)?.into_iter();
    Ok(node
        .nics
        .iter()
        .map(|n| if has_interface(n) { found.next() } else { None })
        .collect())
}

/// The interfaces of all of `node`'s NICs among `ifs`, index for index
/// with `node.nics`: the named one, or one (never loopback, bridge or
/// container plumbing) with an address in the fabric's subnet.
///
/// A node may have several NICs on one fabric (rails): the k-th NIC of a
/// fabric that names no interface is the k-th unnamed interface in the
/// subnet, in interface-index order (the order they were created in). The
/// count must match: an interface in the subnet that no NIC accounts for
/// is an error (which one did the file mean?), as is a NIC with no
/// interface left.
pub fn resolve<'a>(
    cfg: &ClusterConfig,
    node: &Node,
    ifs: &'a [NicInfo],
) -> Result<Vec<&'a NicInfo>, String> {
    let mut out: Vec<Option<&NicInfo>> = vec![None; node.nics.len()];
    for (k, nic) in node.nics.iter().enumerate() {
        if let Some(name) = &nic.ifname {
            out[k] = Some(ifs.iter().find(|i| &i.name == name).ok_or_else(|| {
                format!(
                    "node {}: interface {name:?} of fabric {} does not exist here (have: {})",
                    node.name,
                    nic.fabric,
                    names(ifs)
                )
            })?);
        }
    }
    let named: Vec<&str> = node
        .nics
        .iter()
        .filter_map(|n| n.ifname.as_deref())
        .collect();
    let mut fabrics: Vec<&str> = Vec::new();
    for nic in node.nics.iter().filter(|n| n.ifname.is_none()) {
        if !fabrics.contains(&nic.fabric.as_str()) {
            fabrics.push(&nic.fabric);
        }
    }
    for fabric in fabrics {
        let slots: Vec<usize> = (0..node.nics.len())
            .filter(|k| node.nics[*k].ifname.is_none() && node.nics[*k].fabric == fabric)
            .collect();
        let subnet = cfg
            .fabric(fabric)
            .and_then(|f| f.subnet)
            .ok_or_else(|| {
                format!(
                    "node {}: fabric {fabric} has no subnet and the NIC names no ifname: cannot tell which interface is on it",
                    node.name
                )
            })?;
        let mut on: Vec<&NicInfo> = ifs
            .iter()
            .filter(|i| {
                i.excluded.is_none()
                    && !named.contains(&i.name.as_str())
                    && i.subnets()
                        .iter()
                        .any(|s| *s == subnet || subnet.contains(s.addr))
            })
            .collect();
        on.sort_by_key(|i| i.index);
        let list = |v: &[&NicInfo]| {
            v.iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if on.is_empty() {
            return Err(format!(
                "node {}: no interface with an address in {subnet} (fabric {fabric}); have: {}",
                node.name,
                names(ifs)
            ));
        }
        if on.len() != slots.len() {
            let listed = match slots.len() {
                1 => "1 NIC".to_string(),
                n => format!("{n} NICs"),
            };
            return Err(format!(
                "node {}: {} interfaces in {subnet} (fabric {fabric}): {}, but the node lists {listed} on it without ifname; list one [[node.nic]] per interface, or name them with ifname",
                node.name,
                if on.len() > slots.len() { "several" } else { "too few" },
                list(&on),
            ));
        }
        for (k, i) in slots.into_iter().zip(on) {
            out[k] = Some(i);
        }
    }
    Ok(out
        .into_iter()
        .map(|i| i.expect("every NIC resolved"))
        .collect())
}

fn names(ifs: &[NicInfo]) -> String {
    let v: Vec<String> = ifs
        .iter()
        .map(|i| match i.excluded {
            Some(why) => format!("{} ({why})", i.name),
            None => i.name.clone(),
        })
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, ip: &str, excluded: Option<&'static str>) -> NicInfo {
        NicInfo {
            name: name.into(),
            index: 1,
            up: true,
            ipv4: vec![(ip.parse().unwrap(), 24)],
            excluded,
        }
    }

    #[test]
    fn nics_are_found_by_fabric_never_on_bridges() {
        let cfg = ClusterConfig::parse(
            Path::new("t.toml"),
            "[[fabric]]\nname = \"A\"\nsubnet = \"10.1.0.0/24\"\n[[fabric]]\nname = \"B\"\n\
             [[node]]\nname = \"n\"\n[[node.nic]]\nfabric = \"A\"\n\
             [[node]]\nname = \"nb\"\n[[node.nic]]\nfabric = \"B\"\n\
             [[node]]\nname = \"m\"\n[[node.nic]]\nfabric = \"A\"\nifname = \"docker0\"\n",
        )
        .unwrap();
        let ifs = vec![
            nic("lo", "127.0.0.1", Some("loopback")),
            nic("docker0", "10.1.0.1", Some("container bridge")),
            nic("enp3s0", "10.1.0.7", None),
            nic("eth9", "192.168.1.2", None),
        ];
        let names = |v: Vec<&NicInfo>| v.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        let n = cfg.node("n").unwrap();
        assert_eq!(names(resolve(&cfg, n, &ifs).unwrap()), ["enp3s0"]);
        let e = resolve(&cfg, cfg.node("nb").unwrap(), &ifs).unwrap_err();
        assert!(e.contains("fabric B has no subnet"), "{e}");
        // Named explicitly: the bridge is what the user asked for.
        let m = cfg.node("m").unwrap();
        assert_eq!(names(resolve(&cfg, m, &ifs).unwrap()), ["docker0"]);
        let two = vec![nic("a", "10.1.0.7", None), nic("b", "10.1.0.8", None)];
        let e = resolve(&cfg, n, &two).unwrap_err();
        assert!(
            e.contains("several interfaces") && e.contains("a, b") && e.contains("lists 1 NIC"),
            "{e}"
        );
        let none = vec![nic("docker0", "10.1.0.1", Some("container bridge"))];
        let e = resolve(&cfg, n, &none).unwrap_err();
        assert!(
            e.contains("no interface") && e.contains("docker0 (container bridge)"),
            "{e}"
        );
    }

    #[test]
    fn several_nics_on_one_fabric_take_its_interfaces_in_index_order() {
        let cfg = ClusterConfig::parse(
            Path::new("t.toml"),
            "[[fabric]]\nname = \"A\"\nsubnet = \"10.1.0.0/24\"\n\
             [[fabric]]\nname = \"C\"\nsubnet = \"10.3.0.0/24\"\n\
             [[node]]\nname = \"r\"\n\
             [[node.nic]]\nfabric = \"A\"\n[[node.nic]]\nfabric = \"C\"\n[[node.nic]]\nfabric = \"A\"\n\
             [[node]]\nname = \"s\"\n\
             [[node.nic]]\nfabric = \"A\"\n[[node.nic]]\nfabric = \"A\"\nifname = \"x1\"\n",
        )
        .unwrap();
        let mut rail1 = nic("x1", "10.1.0.9", None);
        rail1.index = 7;
        let mut rail0 = nic("y0", "10.1.0.5", None);
        rail0.index = 3;
        let c = nic("c0", "10.3.0.5", None);
        // Name order says x1 first; index order (creation) says y0.
        let ifs = vec![rail1, c, rail0];
        let names = |v: Vec<&NicInfo>| v.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        let r = cfg.node("r").unwrap();
        assert_eq!(names(resolve(&cfg, r, &ifs).unwrap()), ["y0", "c0", "x1"]);
        // A named NIC is taken out of the subnet's pool.
        let s = cfg.node("s").unwrap();
        assert_eq!(names(resolve(&cfg, s, &ifs).unwrap()), ["y0", "x1"]);
        // Two NICs on A, one interface there: too few.
        let one = vec![nic("y0", "10.1.0.5", None), nic("c0", "10.3.0.5", None)];
        let e = resolve(&cfg, r, &one).unwrap_err();
        assert!(
            e.contains("too few interfaces") && e.contains("lists 2 NICs"),
            "{e}"
        );
    }

    #[test]
    fn this_hosts_interfaces_are_classified() {
        let ifs = interfaces().unwrap();
        if let Some(lo) = ifs.iter().find(|i| i.name == "lo") {
            assert_eq!(lo.excluded, Some("loopback"));
        }
        assert_eq!(
            exclusion("docker0", Path::new("/nonexistent")),
            Some("container bridge")
        );
        assert_eq!(exclusion("eth0", Path::new("/nonexistent")), None);
        assert_eq!(
            nic("x", "10.1.2.3", None).discovered_fabric().unwrap(),
            "ipv4:10.1.2.0/24"
        );
    }
}
