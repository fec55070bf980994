//! Network interfaces of this host, and which one is on which fabric.
//!
//! Interfaces are classified from `/sys/class/net` and their IPv4
//! addresses from `getifaddrs`. Loopback, bridges (and their ports) and
//! container plumbing (`docker*`, `br-*`, `virbr*`) are never chosen
//! unless the configuration names them (`ifname`): they are the wrong
//! answer every time a library guesses (see UCX picking `docker0`).

use super::resources::{ClusterConfig, Nic, Node, Subnet};
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

/// Finds the interface of `node`'s `nic` among `ifs`: the named one, or
/// the one (never loopback, bridge or container plumbing) with an address
/// in the fabric's subnet.
pub fn find<'a>(
    cfg: &ClusterConfig,
    node: &Node,
    nic: &Nic,
    ifs: &'a [NicInfo],
) -> Result<&'a NicInfo, String> {
    if let Some(name) = &nic.ifname {
        return ifs.iter().find(|i| &i.name == name).ok_or_else(|| {
            format!(
                "node {}: interface {name:?} of fabric {} does not exist here (have: {})",
                node.name,
                nic.fabric,
                names(ifs)
            )
        });
    }
    let subnet = cfg
        .fabric(&nic.fabric)
        .and_then(|f| f.subnet)
        .ok_or_else(|| {
            format!(
                "node {}: fabric {} has no subnet and the NIC names no ifname: cannot tell which interface is on it",
                node.name, nic.fabric
            )
        })?;
    let on: Vec<&NicInfo> = ifs
        .iter()
        .filter(|i| {
            i.excluded.is_none()
                && i.subnets()
                    .iter()
                    .any(|s| *s == subnet || subnet.contains(s.addr))
        })
        .collect();
    match on.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "node {}: no interface with an address in {subnet} (fabric {}); have: {}",
            node.name,
            nic.fabric,
            names(ifs)
        )),
        many => Err(format!(
            "node {}: several interfaces in {subnet} (fabric {}): {}; name one with ifname",
            node.name,
            nic.fabric,
            many.iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
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
             [[node]]\nname = \"n\"\n[[node.nic]]\nfabric = \"A\"\n[[node.nic]]\nfabric = \"B\"\n\
             [[node]]\nname = \"m\"\n[[node.nic]]\nfabric = \"A\"\nifname = \"docker0\"\n",
        )
        .unwrap();
        let ifs = vec![
            nic("lo", "127.0.0.1", Some("loopback")),
            nic("docker0", "10.1.0.1", Some("container bridge")),
            nic("enp3s0", "10.1.0.7", None),
            nic("eth9", "192.168.1.2", None),
        ];
        let n = cfg.node("n").unwrap();
        assert_eq!(find(&cfg, n, &n.nics[0], &ifs).unwrap().name, "enp3s0");
        let e = find(&cfg, n, &n.nics[1], &ifs).unwrap_err();
        assert!(e.contains("fabric B has no subnet"), "{e}");
        // Named explicitly: the bridge is what the user asked for.
        let m = cfg.node("m").unwrap();
        assert_eq!(find(&cfg, m, &m.nics[0], &ifs).unwrap().name, "docker0");
        let two = vec![nic("a", "10.1.0.7", None), nic("b", "10.1.0.8", None)];
        assert!(find(&cfg, n, &n.nics[0], &two)
            .unwrap_err()
            .contains("several"));
        let none = vec![nic("docker0", "10.1.0.1", Some("container bridge"))];
        let e = find(&cfg, n, &n.nics[0], &none).unwrap_err();
        assert!(
            e.contains("no interface") && e.contains("docker0 (container bridge)"),
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
