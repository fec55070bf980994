//! Topology files: the serde model of the TOML format and its validation into a
//! [`Topology`] in which every name, address, MAC and route is decided.
//!
//! Nothing here touches the system; it is pure and unit-tested.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::impair::ImpairParams;
use crate::LabError;

/// Linux `IFNAMSIZ` minus the terminating NUL: the longest interface name.
pub const IFNAME_MAX: usize = 15;
/// Longest lab prefix.
pub const PREFIX_MAX: usize = 40;
/// Longest node, switch or link name.
pub const NAME_MAX: usize = 32;
/// Default MTU of every link.
pub const DEFAULT_MTU: u32 = 1500;
/// Default pool from which segment subnets are carved (one /24 each).
pub const DEFAULT_SUBNET_POOL: &str = "10.200.0.0/16";

// ---------------------------------------------------------------- file model

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCfg {
    prefix: Option<Spanned<String>>,
    mtu: Option<Spanned<u32>>,
    subnet_pool: Option<Spanned<String>>,
    #[serde(default)]
    node: Vec<NodeCfg>,
    #[serde(default)]
    switch: Vec<SwitchCfg>,
    #[serde(default)]
    link: Vec<LinkCfg>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeCfg {
    name: Spanned<String>,
    #[serde(default)]
    router: bool,
    #[serde(default)]
    iface: Vec<IfaceCfg>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IfaceCfg {
    on: Spanned<String>,
    ifname: Option<Spanned<String>>,
    mac: Option<Spanned<String>>,
    ipv4: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchCfg {
    name: Spanned<String>,
    #[serde(default)]
    members: Vec<Spanned<String>>,
    subnet: Option<Spanned<String>>,
    mtu: Option<Spanned<u32>>,
    queues: Option<Spanned<u32>>,
    /// Ports (interfaces) per member where more than one: `{ a1 = 2 }`.
    #[serde(default)]
    ports: BTreeMap<String, Spanned<u32>>,
}

/// Most ports one node may have on one switch.
pub const PORTS_MAX: u32 = 8;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkCfg {
    name: Option<Spanned<String>>,
    endpoints: Spanned<Vec<Spanned<String>>>,
    queues: Option<Spanned<u32>>,
    mtu: Option<Spanned<u32>>,
    subnet: Option<Spanned<String>>,
    impair: Option<ImpairCfg>,
}

/// `[link.impair]`: the direction fields here apply to both directions;
/// `[link.impair.forward]` / `[link.impair.reverse]` override them per direction.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImpairCfg {
    seed: Option<u64>,
    loss: Option<Spanned<f64>>,
    duplicate: Option<Spanned<f64>>,
    reorder: Option<Spanned<f64>>,
    corrupt: Option<Spanned<f64>>,
    delay: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    burst: Option<Spanned<u64>>,
    limit: Option<Spanned<String>>,
    forward: Option<DirCfg>,
    reverse: Option<DirCfg>,
}

impl ImpairCfg {
    fn both(&self) -> DirCfg {
        DirCfg {
            loss: self.loss.clone(),
            duplicate: self.duplicate.clone(),
            reorder: self.reorder.clone(),
            corrupt: self.corrupt.clone(),
            delay: self.delay.clone(),
            jitter: self.jitter.clone(),
            rate: self.rate.clone(),
            burst: self.burst.clone(),
            limit: self.limit.clone(),
        }
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirCfg {
    loss: Option<Spanned<f64>>,
    duplicate: Option<Spanned<f64>>,
    reorder: Option<Spanned<f64>>,
    corrupt: Option<Spanned<f64>>,
    delay: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    burst: Option<Spanned<u64>>,
    limit: Option<Spanned<String>>,
}

impl DirCfg {
    /// Field-by-field override: `over` wins where it sets a field.
    fn merged(&self, over: &DirCfg) -> DirCfg {
        DirCfg {
            loss: over.loss.clone().or_else(|| self.loss.clone()),
            duplicate: over.duplicate.clone().or_else(|| self.duplicate.clone()),
            reorder: over.reorder.clone().or_else(|| self.reorder.clone()),
            corrupt: over.corrupt.clone().or_else(|| self.corrupt.clone()),
            delay: over.delay.clone().or_else(|| self.delay.clone()),
            jitter: over.jitter.clone().or_else(|| self.jitter.clone()),
            rate: over.rate.clone().or_else(|| self.rate.clone()),
            burst: over.burst.clone().or_else(|| self.burst.clone()),
            limit: over.limit.clone().or_else(|| self.limit.clone()),
        }
    }
}

// ---------------------------------------------------------------- validated model

/// An IPv4 address with its prefix length (`10.77.1.1/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// The prefix length, 0..=32.
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// The network mask as an integer.
    pub fn mask(&self) -> u32 {
        if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        }
    }

    /// The network this address belongs to (host bits cleared).
    pub fn network(&self) -> Ipv4Cidr {
        Ipv4Cidr {
            addr: Ipv4Addr::from(u32::from(self.addr) & self.mask()),
            prefix_len: self.prefix_len,
        }
    }

    /// Whether `addr` lies inside this network.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask() == u32::from(self.addr) & self.mask()
    }

    fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        let len = self.prefix_len.min(other.prefix_len);
        let m = Ipv4Cidr {
            addr: self.addr,
            prefix_len: len,
        };
        m.contains(other.addr)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl std::str::FromStr for Ipv4Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("\"{s}\" is not in ADDRESS/LEN form (e.g. \"10.1.0.0/24\")"))?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("\"{a}\" is not an IPv4 address"))?;
        let prefix_len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("\"{l}\" is not a prefix length (0..=32)"))?;
        Ok(Ipv4Cidr { addr, prefix_len })
    }
}

/// One side of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// A node; `iface` indexes `Node::ifaces`.
    Node { node: usize, iface: usize },
    /// A switch; the port interface in the switch namespace is `p{port}`.
    Switch { switch: usize, port: usize },
}

/// A node (one network namespace).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub name: String,
    pub router: bool,
    pub ifaces: Vec<Iface>,
    pub routes: Vec<Route>,
}

impl Node {
    /// Whether two of its interfaces are on one segment (several ports on a
    /// switch): the node then needs per-interface ARP (see `Lab::up`).
    pub fn multihomed(&self) -> bool {
        let mut seen = HashSet::new();
        self.ifaces.iter().any(|f| !seen.insert(f.segment))
    }
}

/// An interface of a node.
#[derive(Debug, Clone)]
pub(crate) struct Iface {
    pub ifname: String,
    pub mac: [u8; 6],
    pub ipv4: Ipv4Cidr,
    pub link: usize,
    pub segment: usize,
    pub queues: u32,
    pub mtu: u32,
    pub peer: String,
}

/// A route installed on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// Destination subnet.
    pub dest: String,
    /// Next hop (a router's address on a directly attached subnet).
    pub via: Ipv4Addr,
    /// Outgoing interface.
    pub dev: String,
}

/// A switch: a Linux bridge `br0` in its own namespace.
#[derive(Debug, Clone)]
pub(crate) struct Switch {
    pub name: String,
    pub segment: usize,
    /// Links attached, in port order (port `k` is interface `p{k}`).
    pub ports: Vec<usize>,
}

/// A link: a veth pair, or two veth pairs through an impairment namespace.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub name: String,
    pub ends: [End; 2],
    pub queues: u32,
    pub mtu: u32,
    pub impair: Option<LinkImpair>,
    pub segment: usize,
}

/// Impairment of one link: parameters per direction and the RNG seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkImpair {
    /// Seed of the bridge's random number generators.
    pub seed: u64,
    /// `endpoints[0]` → `endpoints[1]`.
    pub forward: ImpairParams,
    /// `endpoints[1]` → `endpoints[0]`.
    pub reverse: ImpairParams,
}

/// An L2 segment with one IPv4 subnet: a switch, or a link between two nodes.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub name: String,
    pub subnet: Ipv4Cidr,
}

/// A validated topology. Independent of the prefix.
#[derive(Debug, Clone)]
pub(crate) struct Topology {
    pub file: PathBuf,
    pub prefix: Option<String>,
    pub nodes: Vec<Node>,
    pub switches: Vec<Switch>,
    pub links: Vec<Link>,
    pub segments: Vec<Segment>,
}

impl Topology {
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    pub fn end_name(&self, e: End) -> &str {
        match e {
            End::Node { node, .. } => &self.nodes[node].name,
            End::Switch { switch, .. } => &self.switches[switch].name,
        }
    }
}

// ---------------------------------------------------------------- helpers

/// Checks a node/switch/link name.
pub(crate) fn check_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= NAME_MAX
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{s}\" is not a valid name (1..={NAME_MAX} chars of a-z, 0-9, '-', '_', starting with a letter or digit)"
        ))
    }
}

/// Checks a lab prefix. Prefixes never contain '.', which separates the prefix
/// from the rest of a namespace name, so one lab's names never start with
/// another lab's `prefix.`.
pub fn check_prefix(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= PREFIX_MAX
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{s}\" is not a valid lab prefix (1..={PREFIX_MAX} chars of A-Z, a-z, 0-9, '-', '_', starting with a letter or digit)"
        ))
    }
}

/// Checks an interface name against IFNAMSIZ and the characters `ip` accepts.
pub(crate) fn check_ifname(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > IFNAME_MAX {
        return Err(format!(
            "interface name \"{s}\" is {} chars; Linux allows 1..={IFNAME_MAX} (IFNAMSIZ)",
            s.len()
        ));
    }
    if s == "lo"
        || s == "br0"
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "interface name \"{s}\" is reserved or has characters other than A-Z, a-z, 0-9, '-', '_', '.'"
        ));
    }
    Ok(())
}

/// Parses a MAC address `02:00:00:00:00:01`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || format!("\"{s}\" is not a MAC address (e.g. \"02:00:00:00:00:01\")");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.len() != 2 {
            return Err(bad());
        }
        mac[i] = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 {
        return Err(format!(
            "\"{s}\" is a multicast MAC; an interface needs a unicast one"
        ));
    }
    if mac == [0; 6] {
        return Err(format!("\"{s}\" is the all-zero MAC"));
    }
    Ok(mac)
}

/// Formats a MAC address.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Parses a duration: a number followed by `ns`, `us`, `ms` or `s` ("50us",
/// "1.5ms"); a bare `0` is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        format!(
            "bad duration \"{s}\" (use a number and one of ns, us, ms, s: e.g. \"50us\", \"2ms\")"
        )
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(bad()),
    };
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=3600.0).contains(&secs) {
        return Err(format!("duration \"{s}\" is out of range (0..=1h)"));
    }
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

/// Parses a rate in bits per second: "1gbit", "100mbit", "64kbit", "9600bit" or
/// a bare integer (bits per second). Units are decimal (k = 1000).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        format!(
            "bad rate \"{s}\" (use a number and one of bit, kbit, mbit, gbit, tbit: e.g. \"1gbit\", \"100mbit\")"
        )
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => return Err(bad()),
    };
    let bps = v * scale;
    if !bps.is_finite() || !(1000.0..=1e13).contains(&bps) {
        return Err(format!("rate \"{s}\" is out of range (1kbit..=10tbit)"));
    }
    Ok(bps as u64)
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// Error context: the file and its text, to turn spans into line numbers.
struct Ctx<'a> {
    file: &'a Path,
    src: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: Option<Range<usize>>, msg: impl Into<String>) -> LabError {
        LabError::Config {
            file: self.file.to_path_buf(),
            line: span.map(|s| line_of(self.src, s.start)),
            msg: msg.into(),
        }
    }
}

// ---------------------------------------------------------------- parse + validate

/// Parses and validates a topology from text; `file` is used in messages.
pub(crate) fn parse(file: &Path, src: &str) -> Result<Topology, LabError> {
    let ctx = Ctx { file, src };
    let cfg: FileCfg = toml::from_str(src).map_err(|e| {
        let msg = e.message().trim();
        // Type errors name no field; take the key from the offending line.
        let key = e.span().and_then(|sp| {
            let start = src[..sp.start.min(src.len())]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            let line = src[start..].lines().next().unwrap_or("");
            let (k, _) = line.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.\"".contains(&b)))
            .then(|| k.to_string())
        });
        match key {
            Some(k) if !msg.contains('`') => ctx.err(e.span(), format!("`{k}`: {msg}")),
            _ => ctx.err(e.span(), msg),
        }
    })?;
    validate(&ctx, cfg)
}

/// An address given in the file: address, optional prefix length, span.
type ExplicitAddr = (Ipv4Addr, Option<u8>, Range<usize>);

struct RawLink {
    name: Spanned<String>,
    ends: Vec<Spanned<String>>,
    queues: u32,
    mtu: u32,
    subnet: Option<Spanned<String>>,
    impair: Option<ImpairCfg>,
    what: String,
    /// The port number of a switch member's further port (2, 3, ...); such
    /// a link may attach its node to the switch's segment again, and its
    /// interface is `to-SWITCH-N`.
    port: Option<u32>,
}

fn validate(ctx: &Ctx<'_>, cfg: FileCfg) -> Result<Topology, LabError> {
    let prefix = match &cfg.prefix {
        Some(p) => {
            check_prefix(p.get_ref())
                .map_err(|m| ctx.err(Some(p.span()), format!("prefix: {m}")))?;
            Some(p.get_ref().clone())
        }
        None => None,
    };
    let check_mtu = |m: &Option<Spanned<u32>>, what: &str, dflt: u32| -> Result<u32, LabError> {
        match m {
            None => Ok(dflt),
            Some(v) if (68..=65535).contains(v.get_ref()) => Ok(*v.get_ref()),
            Some(v) => Err(ctx.err(
                Some(v.span()),
                format!("{what}mtu = {} is out of range (68..=65535)", v.get_ref()),
            )),
        }
    };
    let check_queues = |q: &Option<Spanned<u32>>, what: &str| -> Result<u32, LabError> {
        match q {
            None => Ok(1),
            Some(v) if (1..=64).contains(v.get_ref()) => Ok(*v.get_ref()),
            Some(v) => Err(ctx.err(
                Some(v.span()),
                format!("{what}queues = {} is out of range (1..=64)", v.get_ref()),
            )),
        }
    };
    let mtu = check_mtu(&cfg.mtu, "", DEFAULT_MTU)?;
    let pool = match &cfg.subnet_pool {
        Some(p) => {
            let c: Ipv4Cidr = p
                .get_ref()
                .parse()
                .map_err(|m| ctx.err(Some(p.span()), format!("subnet_pool: {m}")))?;
            if c.prefix_len > 24 {
                return Err(ctx.err(
                    Some(p.span()),
                    "subnet_pool: must be /24 or larger (one /24 is carved per segment)",
                ));
            }
            c.network()
        }
        None => DEFAULT_SUBNET_POOL.parse().expect("constant"),
    };

    // Nodes and switches share one name space (both become namespaces).
    let mut names: HashMap<String, Range<usize>> = HashMap::new();
    let mut nodes: Vec<Node> = Vec::new();
    for n in &cfg.node {
        let name = n.name.get_ref();
        check_name(name).map_err(|m| ctx.err(Some(n.name.span()), format!("node name: {m}")))?;
        if names.contains_key(name) {
            return Err(ctx.err(
                Some(n.name.span()),
                format!("node \"{name}\" is defined twice (duplicate node)"),
            ));
        }
        names.insert(name.clone(), n.name.span());
        nodes.push(Node {
            name: name.clone(),
            router: n.router,
            ifaces: Vec::new(),
            routes: Vec::new(),
        });
    }
    if nodes.is_empty() {
        return Err(ctx.err(None, "no [[node]] is defined"));
    }
    let mut switches: Vec<Switch> = Vec::new();
    for s in &cfg.switch {
        let name = s.name.get_ref();
        check_name(name).map_err(|m| ctx.err(Some(s.name.span()), format!("switch name: {m}")))?;
        if names.contains_key(name) {
            return Err(ctx.err(
                Some(s.name.span()),
                format!("switch \"{name}\": the name is already used by a node or switch"),
            ));
        }
        names.insert(name.clone(), s.name.span());
        switches.push(Switch {
            name: name.clone(),
            segment: 0,
            ports: Vec::new(),
        });
    }
    let mut ends_by_name: HashMap<String, (bool, usize)> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        ends_by_name.insert(n.name.clone(), (true, i));
    }
    for (i, s) in switches.iter().enumerate() {
        ends_by_name.insert(s.name.clone(), (false, i));
    }
    let lookup_end = |n: &str| -> Option<(bool, usize)> { ends_by_name.get(n).copied() };

    // All links: explicit ones first, then one per switch member.
    let mut raw: Vec<RawLink> = Vec::new();
    for l in &cfg.link {
        let ends = l.endpoints.get_ref().clone();
        let lname = match &l.name {
            Some(n) => n.clone(),
            None if ends.len() == 2 => Spanned::new(
                l.endpoints.span(),
                format!("{}-{}", ends[0].get_ref(), ends[1].get_ref()),
            ),
            None => Spanned::new(l.endpoints.span(), "?".to_string()),
        };
        let what = format!("link \"{}\"", lname.get_ref());
        if ends.len() != 2 {
            return Err(ctx.err(
                Some(l.endpoints.span()),
                format!(
                    "{what}: endpoints must name exactly two nodes or switches, found {}",
                    ends.len()
                ),
            ));
        }
        check_name(lname.get_ref())
            .map_err(|m| ctx.err(Some(lname.span()), format!("{what}: name: {m}")))?;
        raw.push(RawLink {
            queues: check_queues(&l.queues, &format!("{what}: "))?,
            mtu: check_mtu(&l.mtu, &format!("{what}: "), mtu)?,
            name: lname,
            ends,
            subnet: l.subnet.clone(),
            impair: l.impair.clone(),
            what,
            port: None,
        });
    }
    for (si, s) in cfg.switch.iter().enumerate() {
        let what = format!("switch \"{}\"", s.name.get_ref());
        let smtu = check_mtu(&s.mtu, &format!("{what}: "), mtu)?;
        let squeues = check_queues(&s.queues, &format!("{what}: "))?;
        let mut seen = HashSet::new();
        for m in &s.members {
            if !seen.insert(m.get_ref().clone()) {
                return Err(ctx.err(
                    Some(m.span()),
                    format!("{what}: member \"{}\" is listed twice", m.get_ref()),
                ));
            }
            raw.push(RawLink {
                name: Spanned::new(m.span(), format!("{}-{}", switches[si].name, m.get_ref())),
                ends: vec![m.clone(), s.name.clone()],
                queues: squeues,
                mtu: smtu,
                subnet: None,
                impair: None,
                what: format!("{what}: member \"{}\"", m.get_ref()),
                port: None,
            });
        }
        // Further ports of a member: after every member's first port, so
        // adding ports never renumbers the others (addresses follow link
        // order).
        let mut extra: Vec<(&Spanned<String>, u32)> = Vec::new();
        for (node, count) in &s.ports {
            let Some(m) = s.members.iter().find(|m| m.get_ref() == node) else {
                return Err(ctx.err(
                    Some(count.span()),
                    format!("{what}: ports: \"{node}\" is not a member of the switch"),
                ));
            };
            if !(1..=PORTS_MAX).contains(count.get_ref()) {
                return Err(ctx.err(
                    Some(count.span()),
                    format!(
                        "{what}: ports.{node} = {} is out of range (1..={PORTS_MAX})",
                        count.get_ref()
                    ),
                ));
            }
            extra.push((m, *count.get_ref()));
        }
        // Member order, then port order: a1-2, a2-2, a1-3, ...
        extra.sort_by_key(|(m, _)| s.members.iter().position(|x| x == *m));
        for k in 2..=PORTS_MAX {
            for (m, _) in extra.iter().filter(|(_, c)| *c >= k) {
                raw.push(RawLink {
                    name: Spanned::new(
                        m.span(),
                        format!("{}-{}-{k}", switches[si].name, m.get_ref()),
                    ),
                    ends: vec![(*m).clone(), s.name.clone()],
                    queues: squeues,
                    mtu: smtu,
                    subnet: None,
                    impair: None,
                    what: format!("{what}: port {k} of member \"{}\"", m.get_ref()),
                    port: Some(k),
                });
            }
        }
    }

    // Resolve endpoints, build segments.
    let mut link_names: HashSet<String> = HashSet::new();
    let mut links: Vec<Link> = Vec::new();
    let mut segments: Vec<Segment> = Vec::new();
    let mut seg_subnet_cfg: Vec<Option<Spanned<String>>> = Vec::new();
    for (si, s) in cfg.switch.iter().enumerate() {
        switches[si].segment = segments.len();
        segments.push(Segment {
            name: s.name.get_ref().clone(),
            subnet: pool,
        });
        seg_subnet_cfg.push(s.subnet.clone());
    }
    // (node, segment) pairs, to refuse a node attached twice to one segment.
    let mut attached: HashSet<(usize, usize)> = HashSet::new();
    for r in &raw {
        if !link_names.insert(r.name.get_ref().clone()) {
            return Err(ctx.err(
                Some(r.name.span()),
                format!(
                    "{}: a link with this name already exists (set a distinct `name`)",
                    r.what
                ),
            ));
        }
        let mut resolved = Vec::new();
        for e in &r.ends {
            match lookup_end(e.get_ref()) {
                Some(x) => resolved.push(x),
                None => {
                    return Err(ctx.err(
                        Some(e.span()),
                        format!("{}: node \"{}\" is not defined", r.what, e.get_ref()),
                    ));
                }
            }
        }
        if r.ends[0].get_ref() == r.ends[1].get_ref() {
            return Err(ctx.err(
                Some(r.ends[1].span()),
                format!("{}: both endpoints are \"{}\"", r.what, r.ends[0].get_ref()),
            ));
        }
        if !resolved[0].0 && !resolved[1].0 {
            return Err(ctx.err(
                Some(r.ends[0].span()),
                format!("{}: links between two switches are not supported", r.what),
            ));
        }
        let li = links.len();
        let segment = match resolved.iter().find(|(is_node, _)| !is_node) {
            Some((_, sw)) => {
                if let Some(s) = &r.subnet {
                    return Err(ctx.err(
                        Some(s.span()),
                        format!(
                            "{}: a link to a switch is on the switch's subnet; set `subnet` on the switch",
                            r.what
                        ),
                    ));
                }
                switches[*sw].segment
            }
            None => {
                segments.push(Segment {
                    name: r.name.get_ref().clone(),
                    subnet: pool,
                });
                seg_subnet_cfg.push(r.subnet.clone());
                segments.len() - 1
            }
        };
        let mut ends = [End::Switch { switch: 0, port: 0 }; 2];
        for (k, (is_node, idx)) in resolved.iter().enumerate() {
            let peer = r.ends[1 - k].get_ref().clone();
            ends[k] = if *is_node {
                if !attached.insert((*idx, segment)) && r.port.is_none() {
                    return Err(ctx.err(
                        Some(r.ends[k].span()),
                        format!(
                            "{}: node \"{}\" is already attached to segment \"{}\" (for several ports on a switch, set the switch's `ports`)",
                            r.what,
                            r.ends[k].get_ref(),
                            segments[segment].name
                        ),
                    ));
                }
                let node = &mut nodes[*idx];
                node.ifaces.push(Iface {
                    ifname: match r.port {
                        Some(n) => format!("to-{peer}-{n}"),
                        None => format!("to-{peer}"),
                    },
                    mac: [0; 6],
                    ipv4: Ipv4Cidr {
                        addr: Ipv4Addr::UNSPECIFIED,
                        prefix_len: 0,
                    },
                    link: li,
                    segment,
                    queues: r.queues,
                    mtu: r.mtu,
                    peer,
                });
                End::Node {
                    node: *idx,
                    iface: node.ifaces.len() - 1,
                }
            } else {
                let sw = &mut switches[*idx];
                sw.ports.push(li);
                End::Switch {
                    switch: *idx,
                    port: sw.ports.len() - 1,
                }
            };
        }
        let impair = match &r.impair {
            Some(i) => Some(impair_params(ctx, &r.what, i, r.name.get_ref())?),
            None => None,
        };
        links.push(Link {
            name: r.name.get_ref().clone(),
            ends,
            queues: r.queues,
            mtu: r.mtu,
            impair,
            segment,
        });
    }

    // Per-node interface overrides.
    let mut explicit_addr: Vec<Option<ExplicitAddr>> = Vec::new();
    let mut iface_ids: Vec<(usize, usize)> = Vec::new(); // flat index -> (node, iface)
    let mut flat: HashMap<(usize, usize), usize> = HashMap::new();
    for (ni, n) in nodes.iter().enumerate() {
        for ii in 0..n.ifaces.len() {
            flat.insert((ni, ii), iface_ids.len());
            iface_ids.push((ni, ii));
            explicit_addr.push(None);
        }
    }
    let mut explicit_mac: Vec<Option<([u8; 6], Range<usize>)>> = vec![None; iface_ids.len()];
    for (ni, ncfg) in cfg.node.iter().enumerate() {
        let nwhat = format!("node \"{}\"", ncfg.name.get_ref());
        let mut done = HashSet::new();
        for ic in &ncfg.iface {
            let on = ic.on.get_ref();
            // `on` names a link of this node, or a segment (switch) it is on.
            let found: Vec<usize> = nodes[ni]
                .ifaces
                .iter()
                .enumerate()
                .filter(|(_, f)| links[f.link].name == *on || segments[f.segment].name == *on)
                .map(|(i, _)| i)
                .collect();
            let ii = match found.as_slice() {
                [i] => *i,
                [] => {
                    return Err(ctx.err(
                        Some(ic.on.span()),
                        format!("{nwhat}: iface.on = \"{on}\": the node has no link or switch of that name"),
                    ));
                }
                _ => {
                    return Err(ctx.err(
                        Some(ic.on.span()),
                        format!("{nwhat}: iface.on = \"{on}\" is ambiguous; name the link"),
                    ));
                }
            };
            if !done.insert(ii) {
                return Err(ctx.err(
                    Some(ic.on.span()),
                    format!("{nwhat}: interface on \"{on}\" is configured twice"),
                ));
            }
            let f = flat[&(ni, ii)];
            if let Some(n) = &ic.ifname {
                check_ifname(n.get_ref())
                    .map_err(|m| ctx.err(Some(n.span()), format!("{nwhat}: iface.ifname: {m}")))?;
                nodes[ni].ifaces[ii].ifname = n.get_ref().clone();
            }
            if let Some(m) = &ic.mac {
                let mac = parse_mac(m.get_ref())
                    .map_err(|e| ctx.err(Some(m.span()), format!("{nwhat}: iface.mac: {e}")))?;
                explicit_mac[f] = Some((mac, m.span()));
            }
            if let Some(a) = &ic.ipv4 {
                let s = a.get_ref();
                let parsed = if s.contains('/') {
                    s.parse::<Ipv4Cidr>().map(|c| (c.addr, Some(c.prefix_len)))
                } else {
                    s.parse::<Ipv4Addr>()
                        .map(|a| (a, None))
                        .map_err(|_| format!("\"{s}\" is not an IPv4 address"))
                };
                let (addr, len) = parsed
                    .map_err(|e| ctx.err(Some(a.span()), format!("{nwhat}: iface.ipv4: {e}")))?;
                explicit_addr[f] = Some((addr, len, a.span()));
            }
        }
        // Default names and length checks.
        let mut seen: HashMap<String, ()> = HashMap::new();
        for f in &nodes[ni].ifaces {
            if let Err(m) = check_ifname(&f.ifname) {
                return Err(ctx.err(
                    Some(ncfg.name.span()),
                    format!(
                        "{nwhat}: link \"{}\": {m}; shorten the peer's name or set [[node.iface]] ifname",
                        links[f.link].name
                    ),
                ));
            }
            if seen.insert(f.ifname.clone(), ()).is_some() {
                return Err(ctx.err(
                    Some(ncfg.name.span()),
                    format!(
                        "{nwhat}: two interfaces are named \"{}\"; set [[node.iface]] ifname",
                        f.ifname
                    ),
                ));
            }
        }
    }

    // Subnets: explicit, else from an explicit address with a length, else the pool.
    let mut fixed: Vec<Option<Ipv4Cidr>> = vec![None; segments.len()];
    for (si, sc) in seg_subnet_cfg.iter().enumerate() {
        if let Some(s) = sc {
            let c: Ipv4Cidr = s.get_ref().parse().map_err(|m| {
                ctx.err(
                    Some(s.span()),
                    format!("\"{}\": subnet: {m}", segments[si].name),
                )
            })?;
            if c.prefix_len > 30 {
                return Err(ctx.err(
                    Some(s.span()),
                    format!(
                        "\"{}\": subnet {c} is too small (at most /30)",
                        segments[si].name
                    ),
                ));
            }
            fixed[si] = Some(c.network());
        }
    }
    for (f, ea) in explicit_addr.iter().enumerate() {
        let (ni, ii) = iface_ids[f];
        let seg = nodes[ni].ifaces[ii].segment;
        if let Some((addr, Some(len), span)) = ea {
            let c = Ipv4Cidr {
                addr: *addr,
                prefix_len: *len,
            }
            .network();
            match fixed[seg] {
                None => fixed[seg] = Some(c),
                Some(s) if s == c => {}
                Some(s) => {
                    return Err(ctx.err(
                        Some(span.clone()),
                        format!(
                            "node \"{}\": iface.ipv4 {addr}/{len} does not match subnet {s} of \"{}\"",
                            nodes[ni].name, segments[seg].name
                        ),
                    ));
                }
            }
        }
    }
    for i in 0..fixed.len() {
        for j in 0..i {
            if let (Some(a), Some(b)) = (fixed[i], fixed[j]) {
                if a.overlaps(&b) {
                    return Err(ctx.err(
                        None,
                        format!(
                            "subnets of \"{}\" ({a}) and \"{}\" ({b}) overlap",
                            segments[i].name, segments[j].name
                        ),
                    ));
                }
            }
        }
    }
    let mut next_pool: u32 = 0;
    let pool_size: u32 = 1u32 << (24 - u32::from(pool.prefix_len));
    for si in 0..segments.len() {
        let subnet = match fixed[si] {
            Some(c) => c,
            None => loop {
                if next_pool >= pool_size {
                    return Err(ctx.err(None, format!("subnet_pool {pool} has no /24 left")));
                }
                let c = Ipv4Cidr {
                    addr: Ipv4Addr::from(u32::from(pool.addr) + ((next_pool + 1) << 8)),
                    prefix_len: 24,
                };
                next_pool += 1;
                if fixed.iter().flatten().all(|f| !f.overlaps(&c)) && pool.contains(c.addr) {
                    break c;
                }
            },
        };
        segments[si].subnet = subnet;
    }
    // Addresses: explicit first, then hosts .1, .2, ... in attachment order.
    let mut used: HashMap<Ipv4Addr, String> = HashMap::new();
    for (f, ea) in explicit_addr.iter().enumerate() {
        let (ni, ii) = iface_ids[f];
        if let Some((addr, _, span)) = ea {
            let seg = nodes[ni].ifaces[ii].segment;
            let subnet = segments[seg].subnet;
            let host = u32::from(*addr) & !subnet.mask();
            if !subnet.contains(*addr) || host == 0 || host == !subnet.mask() {
                return Err(ctx.err(
                    Some(span.clone()),
                    format!(
                        "node \"{}\": iface.ipv4 {addr} is not a host address of subnet {subnet} (\"{}\")",
                        nodes[ni].name, segments[seg].name
                    ),
                ));
            }
            if let Some(other) = used.insert(*addr, nodes[ni].name.clone()) {
                return Err(ctx.err(
                    Some(span.clone()),
                    format!(
                        "node \"{}\": iface.ipv4 {addr} is also given to node \"{other}\"",
                        nodes[ni].name
                    ),
                ));
            }
            nodes[ni].ifaces[ii].ipv4 = Ipv4Cidr {
                addr: *addr,
                prefix_len: subnet.prefix_len,
            };
        }
    }
    let mut next_host: Vec<u32> = vec![1; segments.len()];
    let mut seg_hosts: Vec<u32> = vec![0; segments.len()];
    for l in &links {
        for e in l.ends {
            if let End::Node { node, iface } = e {
                let f = flat[&(node, iface)];
                let seg = l.segment;
                seg_hosts[seg] += 1;
                if explicit_addr[f].is_some() {
                    continue;
                }
                let subnet = segments[seg].subnet;
                let addr = loop {
                    let host = next_host[seg];
                    if host >= !subnet.mask() {
                        return Err(ctx.err(
                            None,
                            format!(
                                "subnet {subnet} of \"{}\" has no address left",
                                segments[seg].name
                            ),
                        ));
                    }
                    next_host[seg] += 1;
                    let a = Ipv4Addr::from(u32::from(subnet.addr) + host);
                    if !used.contains_key(&a) {
                        break a;
                    }
                };
                used.insert(addr, nodes[node].name.clone());
                nodes[node].ifaces[iface].ipv4 = Ipv4Cidr {
                    addr,
                    prefix_len: subnet.prefix_len,
                };
            }
        }
    }
    // MACs: explicit, else 02:bc:SS:SS:00:HH from segment and host number.
    let mut macs: HashMap<[u8; 6], String> = HashMap::new();
    for (f, em) in explicit_mac.iter().enumerate() {
        if let Some((mac, span)) = em {
            let (ni, _) = iface_ids[f];
            if let Some(other) = macs.insert(*mac, nodes[ni].name.clone()) {
                return Err(ctx.err(
                    Some(span.clone()),
                    format!(
                        "node \"{}\": iface.mac {} is also used by node \"{other}\"",
                        nodes[ni].name,
                        format_mac(mac)
                    ),
                ));
            }
            nodes[ni].ifaces[iface_ids[f].1].mac = *mac;
        }
    }
    for (f, em) in explicit_mac.iter().enumerate() {
        if em.is_some() {
            continue;
        }
        let (ni, ii) = iface_ids[f];
        let iface = &nodes[ni].ifaces[ii];
        let seg = iface.segment as u16 + 1;
        let host = u32::from(iface.ipv4.addr) & !iface.ipv4.mask();
        let mut mac = [
            0x02,
            0xbc,
            (seg >> 8) as u8,
            seg as u8,
            (host >> 8) as u8,
            host as u8,
        ];
        while macs.contains_key(&mac) {
            mac[4] = mac[4].wrapping_add(0x80);
        }
        macs.insert(mac, nodes[ni].name.clone());
        nodes[ni].ifaces[ii].mac = mac;
    }

    let mut topo = Topology {
        file: ctx.file.to_path_buf(),
        prefix,
        nodes,
        switches,
        links,
        segments,
    };
    compute_routes(&mut topo);
    Ok(topo)
}

fn impair_params(
    ctx: &Ctx<'_>,
    what: &str,
    i: &ImpairCfg,
    link_name: &str,
) -> Result<LinkImpair, LabError> {
    let dir = |d: &DirCfg, dname: &str| -> Result<ImpairParams, LabError> {
        let prob = |v: &Option<Spanned<f64>>, field: &str| -> Result<f64, LabError> {
            match v {
                None => Ok(0.0),
                Some(p) if (0.0..=1.0).contains(p.get_ref()) => Ok(*p.get_ref()),
                Some(p) => Err(ctx.err(
                    Some(p.span()),
                    format!(
                        "{what}: impair{dname}.{field} = {} is not a probability (0.0..=1.0; 10 % is 0.1)",
                        p.get_ref()
                    ),
                )),
            }
        };
        let dur = |v: &Option<Spanned<String>>,
                   field: &str,
                   dflt: Duration|
         -> Result<Duration, LabError> {
            match v {
                None => Ok(dflt),
                Some(s) => parse_duration(s.get_ref()).map_err(|m| {
                    ctx.err(
                        Some(s.span()),
                        format!("{what}: impair{dname}.{field}: {m}"),
                    )
                }),
            }
        };
        let rate = match &d.rate {
            None => 0,
            Some(s) => parse_rate(s.get_ref())
                .map_err(|m| ctx.err(Some(s.span()), format!("{what}: impair{dname}.rate: {m}")))?,
        };
        let p = ImpairParams {
            loss: prob(&d.loss, "loss")?,
            duplicate: prob(&d.duplicate, "duplicate")?,
            reorder: prob(&d.reorder, "reorder")?,
            corrupt: prob(&d.corrupt, "corrupt")?,
            delay_ns: dur(&d.delay, "delay", Duration::ZERO)?.as_nanos() as u64,
            jitter_ns: dur(&d.jitter, "jitter", Duration::ZERO)?.as_nanos() as u64,
            rate_bps: rate,
            burst_bytes: d.burst.as_ref().map(|b| *b.get_ref()).unwrap_or(0),
            limit_ns: dur(&d.limit, "limit", Duration::from_millis(100))?.as_nanos() as u64,
        };
        if let (Some(b), 0) = (&d.burst, rate) {
            return Err(ctx.err(
                Some(b.span()),
                format!("{what}: impair{dname}.burst is set but no rate"),
            ));
        }
        Ok(p)
    };
    let both = i.both();
    let fwd = match &i.forward {
        Some(f) => dir(&both.merged(f), ".forward")?,
        None => dir(&both, "")?,
    };
    let rev = match &i.reverse {
        Some(r) => dir(&both.merged(r), ".reverse")?,
        None => dir(&both, "")?,
    };
    // Default seed: stable per link name, so runs are reproducible anyway.
    let seed = i.seed.unwrap_or_else(|| {
        link_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    });
    Ok(LinkImpair {
        seed,
        forward: fwd,
        reverse: rev,
    })
}

/// Installs routes: for every node and every subnet it is not on, a route via
/// the first router on the shortest path (breadth-first over routers).
fn compute_routes(t: &mut Topology) {
    // segment -> [(node, iface)] attached
    let mut on_seg: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (ni, n) in t.nodes.iter().enumerate() {
        for (ii, f) in n.ifaces.iter().enumerate() {
            on_seg.entry(f.segment).or_default().push((ni, ii));
        }
    }
    for ni in 0..t.nodes.len() {
        let mut first_hop: HashMap<usize, (Ipv4Addr, String)> = HashMap::new();
        let mut visited_seg: HashSet<usize> = HashSet::new();
        let mut visited_router: HashSet<usize> = HashSet::from([ni]);
        let mut q: VecDeque<(usize, Option<(Ipv4Addr, String)>)> = VecDeque::new();
        for f in &t.nodes[ni].ifaces {
            if visited_seg.insert(f.segment) {
                q.push_back((f.segment, None));
            }
        }
        while let Some((seg, hop)) = q.pop_front() {
            for &(rn, ri) in on_seg.get(&seg).map(Vec::as_slice).unwrap_or(&[]) {
                if !t.nodes[rn].router || !visited_router.insert(rn) {
                    continue;
                }
                let hop = hop.clone().unwrap_or_else(|| {
                    let my = t.nodes[ni]
                        .ifaces
                        .iter()
                        .find(|f| f.segment == seg)
                        .map(|f| f.ifname.clone())
                        .unwrap_or_default();
                    (t.nodes[rn].ifaces[ri].ipv4.addr, my)
                });
                for f in &t.nodes[rn].ifaces {
                    if visited_seg.insert(f.segment) {
                        first_hop.insert(f.segment, hop.clone());
                        q.push_back((f.segment, Some(hop.clone())));
                    }
                }
            }
        }
        let mut routes: Vec<(usize, Route)> = first_hop
            .into_iter()
            .map(|(seg, (via, dev))| {
                (
                    seg,
                    Route {
                        dest: t.segments[seg].subnet.network().to_string(),
                        via,
                        dev,
                    },
                )
            })
            .collect();
        routes.sort_by_key(|(s, _)| *s);
        t.nodes[ni].routes = routes.into_iter().map(|(_, r)| r).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(src: &str) -> Result<Topology, LabError> {
        parse(Path::new("x.toml"), src)
    }

    fn err(src: &str) -> String {
        p(src).expect_err("must fail").to_string()
    }

    const PAIR: &str = r#"
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
endpoints = ["a", "b"]
"#;

    #[test]
    fn pair_defaults() {
        let t = p(PAIR).unwrap();
        assert_eq!(t.links[0].name, "a-b");
        assert_eq!(t.nodes[0].ifaces[0].ifname, "to-b");
        assert_eq!(t.nodes[0].ifaces[0].ipv4.to_string(), "10.200.1.1/24");
        assert_eq!(t.nodes[1].ifaces[0].ipv4.to_string(), "10.200.1.2/24");
        assert_eq!(format_mac(&t.nodes[1].ifaces[0].mac), "02:bc:00:01:00:02");
        assert_eq!(t.links[0].queues, 1);
        assert_eq!(t.links[0].mtu, 1500);
        assert!(t.nodes[0].routes.is_empty());
    }

    #[test]
    fn unknown_field_names_line_and_field() {
        let e = err("[[node]]\nname = \"a\"\ncolour = \"red\"\n");
        assert!(e.starts_with("x.toml:3:"), "{e}");
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn undefined_node() {
        let e = err("[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[link]]\nname = \"a-b\"\nendpoints = [\"a\", \"c\"]\n");
        assert_eq!(e, "x.toml:7: link \"a-b\": node \"c\" is not defined");
    }

    #[test]
    fn duplicate_node() {
        let e = err("[[node]]\nname = \"a\"\n[[node]]\nname = \"a\"\n");
        assert!(
            e.starts_with("x.toml:4:") && e.contains("duplicate node"),
            "{e}"
        );
    }

    #[test]
    fn bad_duration() {
        let e = err(&format!("{PAIR}[link.impair]\ndelay = \"5 parsecs\"\n"));
        assert!(
            e.starts_with("x.toml:9:") && e.contains("impair.delay") && e.contains("bad duration"),
            "{e}"
        );
    }

    #[test]
    fn probability_above_one() {
        let e = err(&format!("{PAIR}[link.impair]\nloss = 1.5\n"));
        assert!(
            e.starts_with("x.toml:9:") && e.contains("impair.loss") && e.contains("probability"),
            "{e}"
        );
        let e = err(&format!("{PAIR}[link.impair.reverse]\ncorrupt = 2\n"));
        assert!(e.contains("impair.reverse.corrupt"), "{e}");
    }

    #[test]
    fn ifname_too_long() {
        let e = err(&format!(
            "{PAIR}\n[[node.iface]]\non = \"a-b\"\nifname = \"averyveryverylongname\"\n"
        ));
        assert!(
            e.starts_with("x.toml:11:") && e.contains("ifname") && e.contains("IFNAMSIZ"),
            "{e}"
        );
        // Derived names are checked too.
        let e = err("[[node]]\nname = \"a\"\n[[node]]\nname = \"bbbbbbbbbbbbbbbbbbbbb\"\n[[link]]\nname = \"l\"\nendpoints = [\"a\", \"bbbbbbbbbbbbbbbbbbbbb\"]\n");
        assert!(e.starts_with("x.toml:2:") && e.contains("IFNAMSIZ"), "{e}");
    }

    #[test]
    fn type_errors_do_not_panic() {
        for src in [
            "node = 3",
            "[[node]]\nname = 3",
            "[[link]]\nendpoints = \"a\"",
            "mtu = -1",
            "[[node]]\nname = \"a\"\n[[link]]\nendpoints = [\"a\"]",
            "[[node]]\nname = \"A.B\"",
            "prefix = \"a.b\"\n[[node]]\nname = \"a\"",
            "[",
            "",
        ] {
            let e = err(src);
            assert!(e.starts_with("x.toml"), "{e}");
        }
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-1ms").is_err());
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100Mbit").unwrap(), 100_000_000);
        assert!(parse_rate("1gbps").is_err());
    }

    #[test]
    fn per_direction_override() {
        let t = p(&format!(
            "{PAIR}[link.impair]\nseed = 7\nloss = 0.1\ndelay = \"1ms\"\n[link.impair.reverse]\nloss = 0.5\n"
        ))
        .unwrap();
        let i = t.links[0].impair.as_ref().unwrap();
        assert_eq!(i.seed, 7);
        assert_eq!(i.forward.loss, 0.1);
        assert_eq!(i.reverse.loss, 0.5);
        assert_eq!(i.reverse.delay_ns, 1_000_000);
    }

    #[test]
    fn switch_and_router_routes() {
        let t = p(r#"
[[node]]
name = "a"
[[node]]
name = "r"
router = true
[[node]]
name = "b"
[[switch]]
name = "left"
subnet = "10.1.0.0/24"
members = ["a", "r"]
[[link]]
endpoints = ["r", "b"]
subnet = "10.2.0.0/24"
"#)
        .unwrap();
        let a = &t.nodes[0];
        assert_eq!(a.ifaces[0].ifname, "to-left");
        assert_eq!(a.ifaces[0].ipv4.to_string(), "10.1.0.1/24");
        assert_eq!(
            a.routes,
            vec![Route {
                dest: "10.2.0.0/24".into(),
                via: "10.1.0.2".parse().unwrap(),
                dev: "to-left".into()
            }]
        );
        let b = &t.nodes[2];
        assert_eq!(b.routes[0].dest, "10.1.0.0/24");
        assert_eq!(b.routes[0].via, "10.2.0.1".parse::<Ipv4Addr>().unwrap());
        assert!(t.nodes[1].routes.is_empty());
    }

    #[test]
    fn switch_ports_give_a_member_several_interfaces_on_one_segment() {
        let src = |ports: &str| {
            format!(
                "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[node]]\nname = \"c\"\n\
                 [[switch]]\nname = \"sw\"\nsubnet = \"10.3.0.0/24\"\nmembers = [\"a\", \"b\", \"c\"]\n{ports}\n"
            )
        };
        let t = p(&src("ports = { c = 3, a = 2 }")).unwrap();
        let show = |n: usize| {
            t.nodes[n]
                .ifaces
                .iter()
                .map(|f| format!("{} {} {}", f.ifname, f.ipv4, t.links[f.link].name))
                .collect::<Vec<_>>()
        };
        // First ports keep the addresses they have without `ports`; the
        // further ones follow in member order, then port order.
        assert_eq!(
            show(0),
            ["to-sw 10.3.0.1/24 sw-a", "to-sw-2 10.3.0.4/24 sw-a-2"]
        );
        assert_eq!(show(1), ["to-sw 10.3.0.2/24 sw-b"]);
        assert_eq!(
            show(2),
            [
                "to-sw 10.3.0.3/24 sw-c",
                "to-sw-2 10.3.0.5/24 sw-c-2",
                "to-sw-3 10.3.0.6/24 sw-c-3"
            ]
        );
        assert!(t.nodes[0].multihomed() && t.nodes[2].multihomed());
        assert!(!t.nodes[1].multihomed());
        assert_eq!(t.switches[0].ports.len(), 6);
        // Every port has its own MAC.
        let macs: HashSet<[u8; 6]> = t
            .nodes
            .iter()
            .flat_map(|n| n.ifaces.iter().map(|f| f.mac))
            .collect();
        assert_eq!(macs.len(), 6);
        let e = err(&src("ports = { d = 2 }"));
        assert!(
            e.starts_with("x.toml:11:") && e.contains("\"d\" is not a member"),
            "{e}"
        );
        let e = err(&src("ports = { a = 0 }"));
        assert!(e.contains("ports.a = 0 is out of range (1..=8)"), "{e}");
        // A second link of a node to the same switch is still refused, and
        // the error says how to get several ports.
        let e = err(&format!(
            "{}[[link]]\nendpoints = [\"a\", \"sw\"]\n",
            src("")
        ));
        assert!(
            e.contains("already attached to segment \"sw\"") && e.contains("`ports`"),
            "{e}"
        );
    }

    #[test]
    fn explicit_addresses() {
        let t = p(&format!(
            "{PAIR}subnet = \"10.9.0.0/24\"\n[[node.iface]]\non = \"a-b\"\nipv4 = \"10.9.0.9\"\nmac = \"02:00:00:00:00:09\"\n"
        ))
        .unwrap();
        assert_eq!(t.nodes[1].ifaces[0].ipv4.to_string(), "10.9.0.9/24");
        assert_eq!(t.nodes[0].ifaces[0].ipv4.to_string(), "10.9.0.1/24");
        assert_eq!(format_mac(&t.nodes[1].ifaces[0].mac), "02:00:00:00:00:09");
        let e = err(&format!(
            "{PAIR}subnet = \"10.9.0.0/24\"\n[[node.iface]]\non = \"a-b\"\nipv4 = \"10.8.0.9\"\n"
        ));
        assert!(e.starts_with("x.toml:11:"), "{e}");
    }
}
