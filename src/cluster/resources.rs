//! The resource database: a cluster described in a TOML file.
//!
//! ```toml
//! name = "mixed"                             # optional, for people
//! preference = ["shm", "vfio", "afxdp", "packet", "udp"]  # optional (this is the default)
//! pin = ["udp"]                              # optional; $BCL_METHODS overrides it
//! rails = true                               # optional: stripe over every NIC of a
//!                                            # fabric (default false; $BCL_RAILS overrides)
//!
//! [[fabric]]                                 # an L2 segment
//! name = "A"
//! subnet = "10.77.8.0/24"                    # optional: finds each node's NIC by address
//! methods = ["afxdp", "packet", "udp"]       # allowed on this fabric (default: all network methods)
//!
//! [[node]]
//! name = "a1"                                # [A-Za-z0-9_-]
//! host = "10.77.8.1"                         # where bcl-run reaches it (ssh); default: name
//! shm = true                                 # default true
//! [[node.nic]]                               # one per interface the node has on a fabric
//! fabric = "A"
//! ifname = "eth0"                            # optional: else the interface in the fabric's subnet
//! pci = "0000:00:04.0"                       # optional: the device for vfio (a NIC
//!                                            # allowing only vfio has no kernel interface)
//! methods = ["afxdp", "packet", "udp"]       # optional: else the fabric's
//! ```
//!
//! NICs are chosen by fabric, never by device name across nodes: each node
//! says which of its interfaces is on fabric `A` (or the fabric's subnet
//! finds it), so `eth0` on one node and `enp3s0` on another are the same
//! fabric. A node may list several NICs on one fabric (rails): without
//! `ifname`, the k-th of them is the k-th interface in the subnet by
//! interface index ([`super::nics::resolve`]), and the cluster layer gives
//! each process of the node its own NIC for methods that allow one
//! process per interface (`afxdp`: [`super::join::plan_on`]). Unknown
//! fields are errors; every error names the file, the line and the field.

use crate::registry::Registry;
use bcl_core::method::Scope;
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A resource database that cannot be used: file, line, field and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{}:{}: {field}: {message}", file.display(), line.map_or("?".to_string(), |l| l.to_string()))]
pub struct ResourceError {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based), when known.
    pub line: Option<usize>,
    /// The field (`node.nic.fabric`, ...), or `-` for syntax errors.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// An IPv4 subnet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subnet {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length.
    pub len: u8,
}

impl Subnet {
    /// Parses `A.B.C.D/LEN`.
    pub fn parse(text: &str) -> Option<Subnet> {
        let (a, l) = text.split_once('/')?;
        let addr: Ipv4Addr = a.parse().ok()?;
        let len: u8 = l.parse().ok()?;
        (len <= 32).then_some(Subnet { addr, len })
    }

    fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    /// Whether `ip` is in the subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr) & self.mask()
    }

    /// The subnet of `ip` with prefix `len`.
    pub fn of(ip: Ipv4Addr, len: u8) -> Subnet {
        let s = Subnet { addr: ip, len };
        Subnet {
            addr: Ipv4Addr::from(u32::from(ip) & s.mask()),
            len,
        }
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An L2 segment of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fabric {
    /// Its name.
    pub name: String,
    /// Its IPv4 subnet, if given.
    pub subnet: Option<Subnet>,
    /// Methods allowed on it.
    pub methods: Vec<String>,
}

/// A node's interface on one fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    /// The fabric.
    pub fabric: String,
    /// The interface name, if given.
    pub ifname: Option<String>,
    /// The PCI address (for vfio), if given.
    pub pci: Option<String>,
    /// Methods allowed on this NIC.
    pub methods: Vec<String>,
}

/// One host of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its name in the file.
    pub name: String,
    /// Where the launcher reaches it.
    pub host: String,
    /// Whether processes on it may use shared memory.
    pub shm: bool,
    /// Its NICs, in file order (several may be on one fabric).
    pub nics: Vec<Nic>,
}

/// A whole cluster description (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The file it was read from.
    pub file: PathBuf,
    /// Its name.
    pub name: String,
    /// Method preference order.
    pub preference: Vec<String>,
    /// The file's pin, if any.
    pub pin: Option<Vec<String>>,
    /// Reach peers through every NIC of a fabric (rails).
    pub rails: bool,
    /// The fabrics.
    pub fabrics: Vec<Fabric>,
    /// The nodes.
    pub nodes: Vec<Node>,
}

impl ClusterConfig {
    /// Reads and checks `path` against BCL's methods ([`Registry::builtin`]).
    pub fn load(path: &Path) -> Result<ClusterConfig, ResourceError> {
        Self::load_with(path, Registry::builtin())
    }

    /// Reads and checks the file at `path`; method names must be in
    /// `registry`.
    pub fn load_with(path: &Path, registry: &Registry) -> Result<ClusterConfig, ResourceError> {
        let text = std::fs::read_to_string(path).map_err(|e| ResourceError {
            file: path.to_path_buf(),
            line: None,
            field: "-".into(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse_with(path, &text, registry)
    }

    /// Parses and checks `text` against BCL's methods
    /// ([`Registry::builtin`]); `file` is named in errors.
    pub fn parse(file: &Path, text: &str) -> Result<ClusterConfig, ResourceError> {
        Self::parse_with(file, text, Registry::builtin())
    }

    /// Parses and checks `text`; method names must be in `registry`.
    pub fn parse_with(
        file: &Path,
        text: &str,
        registry: &Registry,
    ) -> Result<ClusterConfig, ResourceError> {
        let ctx = Ctx {
            file,
            src: text,
            registry,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().to_string();
            let field = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("unknown field") || msg.starts_with("missing field"))
                .map(str::to_string)
                .or_else(|| e.span().and_then(|s| key_on_line(text, s.start)))
                .unwrap_or_else(|| "-".into());
            ctx.err(e.span(), field, msg)
        })?;
        validate(&ctx, raw)
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The fabric called `name`.
    pub fn fabric(&self, name: &str) -> Option<&Fabric> {
        self.fabrics.iter().find(|f| f.name == name)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: Option<String>,
    preference: Option<Spanned<Vec<Spanned<String>>>>,
    pin: Option<Spanned<Vec<Spanned<String>>>>,
    rails: Option<bool>,
    #[serde(default)]
    fabric: Vec<RawFabric>,
    #[serde(default)]
    node: Vec<RawNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFabric {
    name: Spanned<String>,
    subnet: Option<Spanned<String>>,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Spanned<String>,
    host: Option<String>,
    shm: Option<bool>,
    #[serde(default)]
    nic: Vec<RawNic>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNic {
    fabric: Spanned<String>,
    ifname: Option<Spanned<String>>,
    pci: Option<String>,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
}

struct Ctx<'a> {
    file: &'a Path,
    src: &'a str,
    registry: &'a Registry,
}

impl Ctx<'_> {
    fn err(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ResourceError {
        ResourceError {
            file: self.file.to_path_buf(),
            line: span.map(|s| line_of(self.src, s.start)),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Checks a list of method names: known, no repeats, not empty.
    fn methods(
        &self,
        field: &str,
        list: &Spanned<Vec<Spanned<String>>>,
        network_only: bool,
    ) -> Result<Vec<String>, ResourceError> {
        if list.get_ref().is_empty() {
            return Err(self.err(Some(list.span()), field, "the list is empty"));
        }
        let mut out: Vec<String> = Vec::new();
        for m in list.get_ref() {
            let name = m.get_ref();
            let kind = self
                .registry
                .lookup(name)
                .map_err(|e| self.err(Some(m.span()), field, e.to_string()))?;
            if network_only && kind.scope() == Scope::Node {
                return Err(self.err(
                    Some(m.span()),
                    field,
                    format!(
                        "{name} is node-local, not a method of a fabric (set `shm` on the node)"
                    ),
                ));
            }
            if out.contains(name) {
                return Err(self.err(Some(m.span()), field, format!("{name:?} is listed twice")));
            }
            out.push(name.clone());
        }
        Ok(out)
    }
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// The key of the `key = value` line holding `offset`, if any.
fn key_on_line(src: &str, offset: usize) -> Option<String> {
    let start = src[..offset.min(src.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = src[start..].lines().next().unwrap_or("");
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)))
    .then(|| k.to_string())
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate(ctx: &Ctx<'_>, raw: RawConfig) -> Result<ClusterConfig, ResourceError> {
    let network = ctx.registry.network_methods();
    let preference = match &raw.preference {
        Some(p) => ctx.methods("preference", p, false)?,
        None => ctx.registry.default_preference(),
    };
    let pin = match &raw.pin {
        Some(p) => Some(ctx.methods("pin", p, false)?),
        None => None,
    };
    let mut fabrics: Vec<Fabric> = Vec::new();
    for f in &raw.fabric {
        let name = f.name.get_ref();
        if !valid_name(name) {
            return Err(ctx.err(
                Some(f.name.span()),
                "fabric.name",
                format!("{name:?}: use letters, digits, '-' and '_'"),
            ));
        }
        if fabrics.iter().any(|x| &x.name == name) {
            return Err(ctx.err(
                Some(f.name.span()),
                "fabric.name",
                format!("fabric {name:?} is defined twice"),
            ));
        }
        let subnet = match &f.subnet {
            Some(s) => Some(Subnet::parse(s.get_ref()).ok_or_else(|| {
                ctx.err(
                    Some(s.span()),
                    "fabric.subnet",
                    format!("{:?} is not A.B.C.D/LEN", s.get_ref()),
                )
            })?),
            None => None,
        };
        let methods = match &f.methods {
            Some(m) => ctx.methods("fabric.methods", m, true)?,
            None => network.clone(),
        };
        fabrics.push(Fabric {
            name: name.clone(),
            subnet,
            methods,
        });
    }
    let mut nodes: Vec<Node> = Vec::new();
    for n in &raw.node {
        let name = n.name.get_ref();
        if !valid_name(name) {
            return Err(ctx.err(
                Some(n.name.span()),
                "node.name",
                format!("{name:?}: use letters, digits, '-' and '_'"),
            ));
        }
        if nodes.iter().any(|x| &x.name == name) {
            return Err(ctx.err(
                Some(n.name.span()),
                "node.name",
                format!("node {name:?} is defined twice"),
            ));
        }
        let mut nics: Vec<Nic> = Vec::new();
        for c in &n.nic {
            let fname = c.fabric.get_ref();
            let Some(fabric) = fabrics.iter().find(|f| &f.name == fname) else {
                return Err(ctx.err(
                    Some(c.fabric.span()),
                    "node.nic.fabric",
                    format!("node {name:?}: fabric {fname:?} is not defined"),
                ));
            };
            // Several NICs on one fabric are rails (see `nics::resolve`);
            // one interface listed twice is a mistake.
            if let Some(i) = &c.ifname {
                let s = i.get_ref();
                if s.is_empty() || s.len() > 15 || s.contains(['/', ' ']) {
                    return Err(ctx.err(
                        Some(i.span()),
                        "node.nic.ifname",
                        format!("{s:?} is not an interface name (1..=15 characters, no '/')"),
                    ));
                }
                if nics.iter().any(|x| x.ifname.as_ref() == Some(s)) {
                    return Err(ctx.err(
                        Some(i.span()),
                        "node.nic.ifname",
                        format!("node {name:?}: interface {s:?} is listed twice"),
                    ));
                }
            }
            let methods = match &c.methods {
                Some(m) => {
                    let list = ctx.methods("node.nic.methods", m, true)?;
                    if let Some(bad) = list.iter().find(|x| !fabric.methods.contains(x)) {
                        return Err(ctx.err(
                            Some(m.span()),
                            "node.nic.methods",
                            format!("{bad:?} is not allowed on fabric {fname:?}"),
                        ));
                    }
                    list
                }
                // vfio needs a device: from the fabric's list only with `pci`.
                None => fabric
                    .methods
                    .iter()
                    .filter(|m| *m != "vfio" || c.pci.is_some())
                    .cloned()
                    .collect(),
            };
            if methods.iter().any(|m| m == "vfio") && c.pci.is_none() {
                return Err(ctx.err(
                    Some(c.fabric.span()),
                    "node.nic.pci",
                    format!(
                        "node {name:?}: vfio on fabric {fname:?} needs the device's `pci` address"
                    ),
                ));
            }
            nics.push(Nic {
                fabric: fname.clone(),
                ifname: c.ifname.as_ref().map(|i| i.get_ref().clone()),
                pci: c.pci.clone(),
                methods,
            });
        }
        nodes.push(Node {
            name: name.clone(),
            host: n.host.clone().unwrap_or_else(|| name.clone()),
            shm: n.shm.unwrap_or(true),
            nics,
        });
    }
    Ok(ClusterConfig {
        file: ctx.file.to_path_buf(),
        name: raw.name.unwrap_or_default(),
        preference,
        pin,
        rails: raw.rails.unwrap_or(false),
        fabrics,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "t"
[[fabric]]
name = "A"
subnet = "10.1.0.0/24"
methods = ["afxdp", "packet", "udp"]
[[fabric]]
name = "B"

[[node]]
name = "a1"
[[node.nic]]
fabric = "A"
[[node]]
name = "p"
host = "10.1.0.3"
shm = false
[[node.nic]]
fabric = "A"
ifname = "eth1"
methods = ["packet", "udp"]
[[node.nic]]
fabric = "B"
"#;

    fn parse(text: &str) -> Result<ClusterConfig, ResourceError> {
        ClusterConfig::parse(Path::new("c.toml"), text)
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(
            c.preference,
            vec!["shm", "bcld", "vfio", "afxdp", "packet", "udp"]
        );
        assert_eq!(c.pin, None);
        assert_eq!(c.fabric("A").unwrap().subnet, Subnet::parse("10.1.0.0/24"));
        assert_eq!(
            c.fabric("B").unwrap().methods,
            vec!["bcld", "vfio", "afxdp", "packet", "udp"]
        );
        let a1 = c.node("a1").unwrap();
        assert_eq!((a1.host.as_str(), a1.shm), ("a1", true));
        assert_eq!(a1.nics[0].methods, vec!["afxdp", "packet", "udp"]);
        let p = c.node("p").unwrap();
        assert_eq!((p.host.as_str(), p.shm), ("10.1.0.3", false));
        assert_eq!(p.nics[0].ifname.as_deref(), Some("eth1"));
        assert_eq!(p.nics[0].methods, vec!["packet", "udp"]);
        // Two NICs on one fabric: rails, in file order.
        let c = parse(&GOOD.replace(
            "name = \"a1\"\n[[node.nic]]\nfabric = \"A\"\n",
            "name = \"a1\"\n[[node.nic]]\nfabric = \"A\"\n[[node.nic]]\nfabric = \"A\"\nmethods = [\"afxdp\"]\n",
        ))
        .unwrap();
        let a1 = c.node("a1").unwrap();
        assert_eq!(a1.nics.len(), 2);
        assert_eq!(a1.nics[1].methods, vec!["afxdp"]);
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = err(&GOOD.replace("ifname = \"eth1\"", "ifname = \"eth1\"\ncolour = 3"));
        assert!(e.starts_with("c.toml:21: colour: unknown field"), "{e}");
        let e2 = err(&GOOD.replacen(
            "[[node.nic]]\nfabric = \"B\"",
            "[[node.nic]]\nfabric = \"C\"",
            1,
        ));
        assert!(
            e2.contains("c.toml:23: node.nic.fabric: node \"p\": fabric \"C\" is not defined"),
            "{e2}"
        );
        let e = err(&GOOD.replace(
            "\"packet\", \"udp\"]\n[[node.nic]]",
            "\"packet\", \"ucp\"]\n[[node.nic]]",
        ));
        assert!(
            e.starts_with("c.toml:21: node.nic.methods: unknown method \"ucp\""),
            "{e}"
        );
        let e = err(&GOOD.replace("subnet = \"10.1.0.0/24\"", "subnet = \"10.1.0.0\""));
        assert!(e.starts_with("c.toml:5: fabric.subnet:"), "{e}");
        let e = err(&GOOD.replace("shm = false", "shm = \"no\""));
        assert!(e.starts_with("c.toml:17: shm:"), "{e}");
        let e = err(&GOOD.replace(
            "[[node.nic]]\nfabric = \"B\"",
            "[[node.nic]]\nfabric = \"A\"\nifname = \"eth1\"",
        ));
        assert!(
            e.starts_with(
                "c.toml:24: node.nic.ifname: node \"p\": interface \"eth1\" is listed twice"
            ),
            "{e}"
        );
        let e = err(&format!("{GOOD}\n[[node]]\nname = \"a1\"\n"));
        assert!(e.contains("node.name: node \"a1\" is defined twice"), "{e}");
        let e = err(&GOOD.replace("methods = [\"packet\", \"udp\"]", "methods = [\"shm\"]"));
        assert!(e.contains("node.nic.methods: shm is node-local"), "{e}");
        let e = err(&GOOD.replace("methods = [\"packet\", \"udp\"]", "methods = [\"vfio\"]"));
        assert!(e.contains("not allowed on fabric \"A\""), "{e}");
        let e = err("pin = [\"udp\", \"udp\"]");
        assert!(
            e.starts_with("c.toml:1: pin: \"udp\" is listed twice"),
            "{e}"
        );
        let e = err("[[node]]\nname = \"bad name\"");
        assert!(e.starts_with("c.toml:2: node.name:"), "{e}");
        let e = err("[[node]]\nhost = \"x\"");
        assert!(e.contains("name"), "{e}");
        assert!(err("[[fabric]\n").starts_with("c.toml:1:"));
    }

    #[test]
    fn garbage_never_panics() {
        for i in 0..GOOD.len() {
            let _ = parse(&GOOD[..i]);
        }
        let _ = parse("\u{0}\u{1}[[[");
    }

    #[test]
    fn subnets() {
        let s = Subnet::parse("10.1.0.0/24").unwrap();
        assert!(s.contains("10.1.0.77".parse().unwrap()));
        assert!(!s.contains("10.1.1.1".parse().unwrap()));
        assert_eq!(Subnet::of("10.1.0.77".parse().unwrap(), 24), s);
        assert_eq!(s.to_string(), "10.1.0.0/24");
        assert!(Subnet::parse("10.1.0.0/33").is_none());
        assert!(Subnet::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }
}
