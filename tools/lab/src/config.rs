//! Topology files: the serde model of the TOML format and its validation into a
//! [`Topology`] in which every name, address, MAC and route is decided.
//!
//! Nothing here touches the system; it is pure and unit-tested.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bcl_ether::Mac;
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
    /// `[switch.shape]`: a token bucket on every port's egress.
    shape: Option<ShapeCfg>,
}

/// `[switch.shape]`: `tc ... tbf` on each port of the switch (the bridge's
/// egress towards each member).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeCfg {
    rate: Spanned<String>,
    burst: Option<Spanned<SizeCfg>>,
    limit: Option<Spanned<SizeCfg>>,
}

/// A byte count as the file gives it: an integer (bytes) or text with a
/// unit (`"16kb"`).
#[derive(Debug, Clone)]
enum SizeCfg {
    Bytes(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for SizeCfg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SizeCfg;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes (16384) or a number with a unit (\"16kb\")")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeCfg, E> {
                Ok(SizeCfg::Bytes(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeCfg, E> {
                Ok(SizeCfg::Bytes(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeCfg, E> {
                Ok(SizeCfg::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
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
    pub mac: Mac,
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
    /// Egress shaping of every port, if any.
    pub shape: Option<SwitchShape>,
}

/// The Ethernet header that a frame adds to the MTU: what a qdisc counts.
pub const ETH_HEADER: u32 = 14;
/// Default `burst` of a shaped switch, unless two frames are larger.
pub const DEFAULT_SHAPE_BURST: u64 = 16 * 1024;
/// Default `limit` of a shaped switch: queued bytes per port.
pub const DEFAULT_SHAPE_LIMIT: u64 = 256 * 1024;

/// Shaping of a switch (`[switch.shape]`): a token bucket filter (`tc
/// qdisc replace dev pK root tbf ...`) on the egress of every port `pK` in
/// the switch namespace, so that everything a member receives through the
/// switch passes it. Numbers are exact, as `tc` is given them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchShape {
    /// Rate, bits per second (`tc ... rate {rate_bps}bit`).
    pub rate_bps: u64,
    /// Bucket depth, bytes (`burst`).
    pub burst_bytes: u64,
    /// Queue per port, bytes; beyond it frames are dropped at the tail (`limit`).
    pub limit_bytes: u64,
}

impl SwitchShape {
    /// The `tbf` part of the `tc qdisc replace dev pK root` command line,
    /// with plain numbers so that `tc`'s own unit parsing has nothing to decide.
    pub fn tc_args(&self) -> Vec<String> {
        vec![
            "tbf".into(),
            "rate".into(),
            format!("{}bit", self.rate_bps),
            "burst".into(),
            self.burst_bytes.to_string(),
            "limit".into(),
            self.limit_bytes.to_string(),
        ]
    }

    /// One line for `bcl-lab show`: `tbf rate 200mbit burst 16384 B limit 262144 B`.
    pub fn describe(&self) -> String {
        format!(
            "tbf rate {} burst {} B limit {} B",
            format_rate(self.rate_bps),
            self.burst_bytes,
            self.limit_bytes
        )
    }
}

/// A rate in the largest decimal unit that states it exactly (`200mbit`, `1500bit`).
pub fn format_rate(bps: u64) -> String {
    for (unit, scale) in [
        ("tbit", 1_000_000_000_000u64),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bps >= scale && bps.is_multiple_of(scale) {
            return format!("{}{unit}", bps / scale);
        }
    }
    format!("{bps}bit")
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

/// Whether `s` has 1..=`max` bytes, starts with an ASCII letter or digit
/// and has only bytes that `allowed` accepts.
fn is_identifier(s: &str, max: usize, allowed: impl Fn(u8) -> bool) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes().all(allowed)
}

/// Checks a node/switch/link name.
pub(crate) fn check_name(s: &str) -> Result<(), String> {
    if is_identifier(s, NAME_MAX, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
    }) {
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
    if is_identifier(s, PREFIX_MAX, |b| {
        b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
    }) {
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

/// An interface's MAC address in [`Mac`]'s text form (`02:00:00:00:00:01`,
/// also with `-`): one that can name an interface, so neither a group
/// (multicast) address nor all zeros. The messages are the lab's own, with
/// an example of the form, since the file is written by hand.
fn iface_mac(s: &str) -> Result<Mac, String> {
    let mac: Mac = s
        .parse()
        .map_err(|_| format!("\"{s}\" is not a MAC address (e.g. \"02:00:00:00:00:01\")"))?;
    if mac.is_multicast() {
        return Err(format!(
            "\"{s}\" is a multicast MAC; an interface needs a unicast one"
        ));
    }
    if mac == Mac::default() {
        return Err(format!("\"{s}\" is the all-zero MAC"));
    }
    Ok(mac)
}

/// Splits text at the end of its leading number: "1.5ms" is ("1.5", "ms").
fn split_number(t: &str) -> (&str, &str) {
    t.split_at(
        t.find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len()),
    )
}

/// Parses a duration: a number followed by `ns`, `us`, `ms` or `s` ("50us",
/// "1.5ms"); a bare `0` is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let (num, unit) = split_number(t);
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
    let (num, unit) = split_number(&t);
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

/// `num` (decimal digits with an optional fraction: "200", "1.5", ".5")
/// times `scale`, exactly: an error when the product is not a whole number
/// or does not fit in a `u64`.
fn exact_scaled(num: &str, scale: u64) -> Result<u64, &'static str> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || frac.len() > 18 {
        return Err("not a number");
    }
    let too_large = "too large";
    let i: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large)?
    };
    let f: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| too_large)?
    };
    let den = 10u128.pow(frac.len() as u32);
    let scaled_frac = f * u128::from(scale);
    if !scaled_frac.is_multiple_of(den) {
        return Err("not a whole number in the base unit");
    }
    let v = i
        .checked_mul(u128::from(scale))
        .and_then(|w| w.checked_add(scaled_frac / den))
        .ok_or(too_large)?;
    u64::try_from(v).map_err(|_| too_large)
}

/// Most a shaped switch's `rate` may be: 10 tbit/s.
pub const SHAPE_RATE_MAX: u64 = 10_000_000_000_000;

/// Parses a shaping rate, exactly, into bits per second: a number and one
/// of `bit`, `kbit`, `mbit`, `gbit`, `tbit` (decimal, as tc reads them) or
/// `kibit`, `mibit`, `gibit`, `tibit` (binary): "200mbit", "1.5gbit". A unit
/// is required, since tc reads a bare number and its `bps` units as
/// *bytes* per second. Must be above 0 and at most 10 tbit.
pub fn parse_shape_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = split_number(&t);
    let scale: u64 = match unit.trim() {
        "bit" => 1,
        "kbit" => 1_000,
        "mbit" => 1_000_000,
        "gbit" => 1_000_000_000,
        "tbit" => 1_000_000_000_000,
        "kibit" => 1 << 10,
        "mibit" => 1 << 20,
        "gibit" => 1 << 30,
        "tibit" => 1 << 40,
        u if u.ends_with("bps") => {
            return Err(format!(
                "\"{s}\": tc's \"{u}\" means bytes per second; write the rate in bits (e.g. \"200mbit\")"
            ))
        }
        _ => {
            return Err(format!(
                "bad rate \"{s}\" (use a number and one of bit, kbit, mbit, gbit, tbit: e.g. \"200mbit\", \"1gbit\")"
            ))
        }
    };
    let bps = exact_scaled(num, scale).map_err(|why| format!("bad rate \"{s}\" ({why})"))?;
    if bps == 0 {
        return Err(format!("rate \"{s}\" must be above 0"));
    }
    if bps > SHAPE_RATE_MAX {
        return Err(format!("rate \"{s}\" is above 10tbit"));
    }
    Ok(bps)
}

/// Most a shaped switch's `burst` or `limit` may be: what tc's 32-bit fields hold.
pub const SHAPE_SIZE_MAX: u64 = u32::MAX as u64;

/// Parses a byte count, exactly: a number and one of `b` (or none), `k`,
/// `kb`, `kib`, `m`, `mb`, `mib`, `g`, `gb`, `gib`. The multiples are
/// binary, as in tc (`16kb` is 16384 bytes). At most 4 GiB - 1.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = split_number(&t);
    let scale: u64 = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "bad size \"{s}\" (bytes, or a number and one of b, kb, mb, gb, binary as in tc: e.g. \"16kb\" = 16384)"
            ))
        }
    };
    let bytes = exact_scaled(num, scale).map_err(|why| format!("bad size \"{s}\" ({why})"))?;
    if bytes > SHAPE_SIZE_MAX {
        return Err(format!("size \"{s}\" is above 4 GiB - 1 (tc's limit)"));
    }
    Ok(bytes)
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

    /// An error on the line of `value`.
    fn err_at<T>(&self, value: &Spanned<T>, msg: impl Into<String>) -> LabError {
        self.err(Some(value.span()), msg)
    }

    /// Runs `check` on a value from the file. A failure is an error on the
    /// value's line that names the field: `FIELD: why`.
    fn check<T, U>(
        &self,
        value: &Spanned<T>,
        field: &str,
        check: impl FnOnce(&T) -> Result<U, String>,
    ) -> Result<U, LabError> {
        check(value.get_ref()).map_err(|m| self.err_at(value, format!("{field}: {m}")))
    }

    /// A number from the file that must lie in `range`. Outside it, the
    /// error names the field, the value and the range:
    /// `FIELD = V is out of range (LO..=HI)`.
    fn in_range(
        &self,
        value: &Spanned<u32>,
        field: &str,
        range: RangeInclusive<u32>,
    ) -> Result<u32, LabError> {
        let v = *value.get_ref();
        if range.contains(&v) {
            Ok(v)
        } else {
            Err(self.err_at(
                value,
                format!(
                    "{field} = {v} is out of range ({}..={})",
                    range.start(),
                    range.end()
                ),
            ))
        }
    }
}

/// How messages name a field of `owner` (`link "a-b": mtu`); a file-level
/// field (empty `owner`) is named alone (`mtu`).
fn field_of(owner: &str, field: &str) -> String {
    if owner.is_empty() {
        field.to_string()
    } else {
        format!("{owner}: {field}")
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
        // Messages that quote a field or key ("missing field `rate`") name it
        // already; others ("invalid type: boolean `true`, ...") do not.
        let names_key = msg.contains("field `") || msg.contains("key `");
        match key {
            Some(k) if !names_key => ctx.err(e.span(), format!("`{k}`: {msg}")),
            _ => ctx.err(e.span(), msg),
        }
    })?;
    validate(&ctx, cfg)
}

/// Checks a parsed file and decides every name, address, MAC and route.
/// The steps run in this order, each goes through the file's items in order,
/// and the first broken rule is the error.
fn validate(ctx: &Ctx<'_>, cfg: FileCfg) -> Result<Topology, LabError> {
    let prefix = lab_prefix(ctx, &cfg.prefix)?;
    let mtu = mtu_setting(ctx, &cfg.mtu, "", DEFAULT_MTU)?;
    let pool = subnet_pool(ctx, &cfg.subnet_pool)?;
    let mut names = HashMap::new();
    let mut nodes = declare_nodes(ctx, &cfg.node, &mut names)?;
    at_least_one_node(ctx, &nodes)?;
    let mut segments = Vec::new();
    let mut switches = declare_switches(ctx, &cfg.switch, mtu, &mut names, &mut segments)?;
    let raw = raw_links(ctx, &cfg, mtu)?;
    let links = attach_links(ctx, &raw, &names, &mut nodes, &mut switches, &mut segments)?;
    let settings = iface_settings(ctx, &cfg.node, &mut nodes, &links, &segments)?;
    let segments = assign_subnets(ctx, &nodes, &settings, segments, pool)?;
    assign_addresses(ctx, &mut nodes, &settings, &links, &segments)?;
    assign_macs(ctx, &mut nodes, &settings)?;
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

// ---------------------------------------------------------------- file-level settings

/// Valid MTUs: 68 is the least IPv4 allows, 65535 the most a veth takes.
const MTU_RANGE: RangeInclusive<u32> = 68..=65535;
/// Valid queue counts of a veth side; 0 leaves the counts to the kernel
/// (`ip link add` without `numtxqueues`/`numrxqueues`: a veth then
/// allocates a queue per CPU and activates one, as a user's veth does).
const QUEUES_RANGE: RangeInclusive<u32> = 0..=64;

/// `prefix` must pass [`check_prefix`]: it starts every namespace name of
/// the lab, and one lab's names must never start with another's.
fn lab_prefix(ctx: &Ctx<'_>, prefix: &Option<Spanned<String>>) -> Result<Option<String>, LabError> {
    prefix
        .as_ref()
        .map(|p| ctx.check(p, "prefix", |p| check_prefix(p).map(|()| p.clone())))
        .transpose()
}

/// `mtu` of the file, a switch or a link (`owner`), else `default`: within
/// [`MTU_RANGE`], so a bad value points at its line instead of failing
/// halfway through `up`.
fn mtu_setting(
    ctx: &Ctx<'_>,
    mtu: &Option<Spanned<u32>>,
    owner: &str,
    default: u32,
) -> Result<u32, LabError> {
    match mtu {
        None => Ok(default),
        Some(v) => ctx.in_range(v, &field_of(owner, "mtu"), MTU_RANGE),
    }
}

/// `queues` of a switch or link (`owner`), else 1: within [`QUEUES_RANGE`]
/// (0: the kernel's default counts).
fn queues_setting(
    ctx: &Ctx<'_>,
    queues: &Option<Spanned<u32>>,
    owner: &str,
) -> Result<u32, LabError> {
    match queues {
        None => Ok(1),
        Some(v) => ctx.in_range(v, &field_of(owner, "queues"), QUEUES_RANGE),
    }
}

/// `subnet_pool`, else [`DEFAULT_SUBNET_POOL`]: ADDRESS/LEN of /24 or
/// larger, since segments without a subnet get one /24 each from it
/// ([`next_pool_subnet`]); a /24 pool gives one segment its subnet.
fn subnet_pool(ctx: &Ctx<'_>, pool: &Option<Spanned<String>>) -> Result<Ipv4Cidr, LabError> {
    let Some(p) = pool else {
        return Ok(DEFAULT_SUBNET_POOL.parse().expect("constant"));
    };
    let c: Ipv4Cidr = ctx.check(p, "subnet_pool", |s| s.parse())?;
    if c.prefix_len > 24 {
        return Err(ctx.err_at(
            p,
            "subnet_pool: must be /24 or larger (one /24 is carved per segment)",
        ));
    }
    Ok(c.network())
}

// ---------------------------------------------------------------- nodes and switches

/// What a node or switch name refers to.
#[derive(Debug, Clone, Copy)]
enum Named {
    Node(usize),
    Switch(usize),
}

/// Takes a node or switch name: it must pass [`check_name`] and be unused
/// by nodes and switches alike, since both become namespaces `PREFIX.NAME`
/// and links name their endpoints by it. `kind` names the field (`node
/// name: ...`); `duplicate` gives the message for a name already taken.
fn claim_name(
    ctx: &Ctx<'_>,
    names: &mut HashMap<String, Named>,
    name: &Spanned<String>,
    kind: &str,
    named: Named,
    duplicate: impl FnOnce(&str) -> String,
) -> Result<String, LabError> {
    let n = name.get_ref();
    ctx.check(name, &format!("{kind} name"), |s| check_name(s))?;
    if names.contains_key(n) {
        return Err(ctx.err_at(name, duplicate(n)));
    }
    names.insert(n.clone(), named);
    Ok(n.clone())
}

/// The `[[node]]`s, each under a name taken by [`claim_name`].
fn declare_nodes(
    ctx: &Ctx<'_>,
    cfg: &[NodeCfg],
    names: &mut HashMap<String, Named>,
) -> Result<Vec<Node>, LabError> {
    let mut nodes = Vec::new();
    for (i, n) in cfg.iter().enumerate() {
        let name = claim_name(ctx, names, &n.name, "node", Named::Node(i), |name| {
            format!("node \"{name}\" is defined twice (duplicate node)")
        })?;
        nodes.push(Node {
            name,
            router: n.router,
            ifaces: Vec::new(),
            routes: Vec::new(),
        });
    }
    Ok(nodes)
}

/// A topology has at least one node: without one there is nothing to run
/// a program in, and an empty file would load as a lab of nothing.
fn at_least_one_node(ctx: &Ctx<'_>, nodes: &[Node]) -> Result<(), LabError> {
    if nodes.is_empty() {
        return Err(ctx.err(None, "no [[node]] is defined"));
    }
    Ok(())
}

/// The `[[switch]]`es, each under a name taken by [`claim_name`] and on a
/// segment of its own (all links to a switch are on its segment), with its
/// `[switch.shape]` checked by [`switch_shape`] against the switch's MTU
/// (its `mtu`, else the file's, `default_mtu`).
fn declare_switches(
    ctx: &Ctx<'_>,
    cfg: &[SwitchCfg],
    default_mtu: u32,
    names: &mut HashMap<String, Named>,
    segments: &mut Vec<SegmentDraft>,
) -> Result<Vec<Switch>, LabError> {
    let mut switches = Vec::new();
    for (i, s) in cfg.iter().enumerate() {
        let name = claim_name(ctx, names, &s.name, "switch", Named::Switch(i), |name| {
            format!("switch \"{name}\": the name is already used by a node or switch")
        })?;
        let what = format!("switch \"{name}\"");
        let shape = match &s.shape {
            Some(c) => {
                let mtu = mtu_setting(ctx, &s.mtu, &what, default_mtu)?;
                Some(switch_shape(ctx, &what, c, mtu)?)
            }
            None => None,
        };
        switches.push(Switch {
            segment: new_segment(segments, &name, &s.subnet),
            name,
            ports: Vec::new(),
            shape,
        });
    }
    Ok(switches)
}

/// A switch's `[switch.shape]`: `rate` passes [`parse_shape_rate`]; `burst`
/// and `limit` (integers of bytes, or text for [`parse_size`]) hold at least
/// one whole frame of the switch (`mtu` + the 14-byte Ethernet header: tbf
/// counts frames with their header, and drops a frame larger than its
/// bucket). `burst` defaults to 16 KiB, or twice the MTU if larger; `limit`
/// to 256 KiB. `limit` may be below `burst` (tbf allows it).
fn switch_shape(
    ctx: &Ctx<'_>,
    what: &str,
    c: &ShapeCfg,
    mtu: u32,
) -> Result<SwitchShape, LabError> {
    let field = |name: &str| field_of(what, &format!("shape.{name}"));
    let rate_bps = ctx.check(&c.rate, &field("rate"), |s| parse_shape_rate(s))?;
    let frame = u64::from(mtu) + u64::from(ETH_HEADER);
    let size = |v: &Spanned<SizeCfg>, name: &str| -> Result<u64, LabError> {
        let bytes = ctx.check(v, &field(name), |v| match v {
            SizeCfg::Bytes(b) if *b < 0 => Err(format!("{b} is negative")),
            SizeCfg::Bytes(b) if *b as u64 > SHAPE_SIZE_MAX => {
                Err(format!("{b} is above 4 GiB - 1 (tc's limit)"))
            }
            SizeCfg::Bytes(b) => Ok(*b as u64),
            SizeCfg::Text(t) => parse_size(t),
        })?;
        if bytes < frame {
            return Err(ctx.err_at(
                v,
                format!(
                    "{} = {bytes} bytes is less than one frame of the switch (MTU {mtu} + {ETH_HEADER}-byte Ethernet header = {frame} bytes)",
                    field(name)
                ),
            ));
        }
        Ok(bytes)
    };
    let burst_bytes = match &c.burst {
        Some(b) => size(b, "burst")?,
        None => DEFAULT_SHAPE_BURST.max(2 * u64::from(mtu)),
    };
    let limit_bytes = match &c.limit {
        Some(l) => size(l, "limit")?,
        None => DEFAULT_SHAPE_LIMIT,
    };
    Ok(SwitchShape {
        rate_bps,
        burst_bytes,
        limit_bytes,
    })
}

// ---------------------------------------------------------------- links

/// A link as the file states or implies it, before its endpoints are
/// resolved: a `[[link]]`, or one port of a switch member.
struct RawLink {
    name: Spanned<String>,
    ends: Vec<Spanned<String>>,
    queues: u32,
    mtu: u32,
    subnet: Option<Spanned<String>>,
    impair: Option<ImpairCfg>,
    /// How messages name the link: `link "a-b"`, `switch "sw": member "a"`.
    what: String,
    /// The port number of a switch member's further port (2, 3, ...); such
    /// a link may attach its node to the switch's segment again, and its
    /// interface is `to-SWITCH-N`.
    port: Option<u32>,
}

/// All links: the `[[link]]`s first, then those of each switch's members.
/// Addresses follow this order.
fn raw_links(ctx: &Ctx<'_>, cfg: &FileCfg, mtu: u32) -> Result<Vec<RawLink>, LabError> {
    let mut raw = Vec::new();
    for l in &cfg.link {
        raw.push(declared_link(ctx, l, mtu)?);
    }
    for s in &cfg.switch {
        raw.extend(member_links(ctx, s, mtu)?);
    }
    Ok(raw)
}

/// A `[[link]]`, named by its `name` or else "ENDPOINT0-ENDPOINT1". Its
/// endpoints are two (see [`two_endpoints`]), its name passes [`check_name`]
/// (the name is that of its segment, its impairment namespace and what
/// `iface.on` refers to), and its queues and MTU are in range.
fn declared_link(ctx: &Ctx<'_>, l: &LinkCfg, default_mtu: u32) -> Result<RawLink, LabError> {
    let ends = l.endpoints.get_ref().clone();
    let name = match &l.name {
        Some(n) => n.clone(),
        None if ends.len() == 2 => Spanned::new(
            l.endpoints.span(),
            format!("{}-{}", ends[0].get_ref(), ends[1].get_ref()),
        ),
        None => Spanned::new(l.endpoints.span(), "?".to_string()),
    };
    let what = format!("link \"{}\"", name.get_ref());
    two_endpoints(ctx, &what, &l.endpoints)?;
    ctx.check(&name, &field_of(&what, "name"), |s| check_name(s))?;
    Ok(RawLink {
        queues: queues_setting(ctx, &l.queues, &what)?,
        mtu: mtu_setting(ctx, &l.mtu, &what, default_mtu)?,
        name,
        ends,
        subnet: l.subnet.clone(),
        impair: l.impair.clone(),
        what,
        port: None,
    })
}

/// A link has exactly two endpoints: it is one veth pair (or two, through
/// an impairment namespace) between two namespaces.
fn two_endpoints(
    ctx: &Ctx<'_>,
    what: &str,
    endpoints: &Spanned<Vec<Spanned<String>>>,
) -> Result<(), LabError> {
    let n = endpoints.get_ref().len();
    if n != 2 {
        return Err(ctx.err_at(
            endpoints,
            format!("{what}: endpoints must name exactly two nodes or switches, found {n}"),
        ));
    }
    Ok(())
}

/// The links of a switch: one per member (`SWITCH-MEMBER`), then the
/// further ports of [`further_ports`] (`SWITCH-MEMBER-N`). Its queues and
/// MTU are in range and apply to all of them; each member is listed once
/// (see [`member_listed_once`]).
fn member_links(ctx: &Ctx<'_>, s: &SwitchCfg, default_mtu: u32) -> Result<Vec<RawLink>, LabError> {
    let what = format!("switch \"{}\"", s.name.get_ref());
    let mtu = mtu_setting(ctx, &s.mtu, &what, default_mtu)?;
    let queues = queues_setting(ctx, &s.queues, &what)?;
    let link = |m: &Spanned<String>, port: Option<u32>| {
        let (name, link_what) = match port {
            None => (
                format!("{}-{}", s.name.get_ref(), m.get_ref()),
                format!("{what}: member \"{}\"", m.get_ref()),
            ),
            Some(k) => (
                format!("{}-{}-{k}", s.name.get_ref(), m.get_ref()),
                format!("{what}: port {k} of member \"{}\"", m.get_ref()),
            ),
        };
        RawLink {
            name: Spanned::new(m.span(), name),
            ends: vec![m.clone(), s.name.clone()],
            queues,
            mtu,
            subnet: None,
            impair: None,
            what: link_what,
            port,
        }
    };
    let mut seen = HashSet::new();
    let mut links = Vec::new();
    for m in &s.members {
        member_listed_once(ctx, &what, &mut seen, m)?;
        links.push(link(m, None));
    }
    for (m, k) in further_ports(ctx, &what, s)? {
        links.push(link(m, Some(k)));
    }
    Ok(links)
}

/// A switch lists each member once: each listing is a link `SWITCH-MEMBER`,
/// so a second one would repeat its name; more ports come from `ports`.
fn member_listed_once(
    ctx: &Ctx<'_>,
    what: &str,
    seen: &mut HashSet<String>,
    member: &Spanned<String>,
) -> Result<(), LabError> {
    if !seen.insert(member.get_ref().clone()) {
        return Err(ctx.err_at(
            member,
            format!("{what}: member \"{}\" is listed twice", member.get_ref()),
        ));
    }
    Ok(())
}

/// A switch's `ports`: each key is a member, each count 1..=[`PORTS_MAX`].
/// Returns the ports beyond each member's first as (member, port number),
/// in member order, then port order (a1-2, a2-2, a1-3, ...): they come
/// after every member's first port, so adding ports never renumbers the
/// others (addresses follow link order).
fn further_ports<'a>(
    ctx: &Ctx<'_>,
    what: &str,
    s: &'a SwitchCfg,
) -> Result<Vec<(&'a Spanned<String>, u32)>, LabError> {
    let mut counts: Vec<(&Spanned<String>, u32)> = Vec::new();
    for (node, count) in &s.ports {
        let Some(m) = s.members.iter().find(|m| m.get_ref() == node) else {
            return Err(ctx.err_at(
                count,
                format!("{what}: ports: \"{node}\" is not a member of the switch"),
            ));
        };
        let field = field_of(what, &format!("ports.{node}"));
        counts.push((m, ctx.in_range(count, &field, 1..=PORTS_MAX)?));
    }
    counts.sort_by_key(|(m, _)| s.members.iter().position(|x| x == *m));
    let mut ports = Vec::new();
    for k in 2..=PORTS_MAX {
        ports.extend(counts.iter().filter(|(_, c)| *c >= k).map(|(m, _)| (*m, k)));
    }
    Ok(ports)
}

// ---------------------------------------------------------------- segments and attachment

/// A segment before its subnet is decided: its name and the `subnet` the
/// file gives it, if any.
struct SegmentDraft {
    name: String,
    subnet: Option<Spanned<String>>,
}

/// Adds a segment; returns its index.
fn new_segment(
    segments: &mut Vec<SegmentDraft>,
    name: &str,
    subnet: &Option<Spanned<String>>,
) -> usize {
    segments.push(SegmentDraft {
        name: name.to_string(),
        subnet: subnet.clone(),
    });
    segments.len() - 1
}

/// Resolves every link's endpoints and attaches it: a port on each switch
/// end, an interface on each node end, and a segment of its own unless it
/// is on a switch's. Each link passes, in this order, [`link_name_unused`],
/// [`resolve_endpoints`], [`distinct_endpoints`], [`not_switch_to_switch`],
/// [`link_segment`], [`attached_once`] for each node end, and
/// [`impair_params`].
fn attach_links(
    ctx: &Ctx<'_>,
    raw: &[RawLink],
    names: &HashMap<String, Named>,
    nodes: &mut [Node],
    switches: &mut [Switch],
    segments: &mut Vec<SegmentDraft>,
) -> Result<Vec<Link>, LabError> {
    let mut link_names: HashSet<String> = HashSet::new();
    // (node, segment) pairs, to refuse a node attached twice to one segment.
    let mut attached: HashSet<(usize, usize)> = HashSet::new();
    let mut links: Vec<Link> = Vec::new();
    for r in raw {
        link_name_unused(ctx, &mut link_names, r)?;
        let resolved = resolve_endpoints(ctx, r, names)?;
        distinct_endpoints(ctx, r)?;
        not_switch_to_switch(ctx, r, resolved)?;
        let segment = link_segment(ctx, r, resolved, switches, segments)?;
        let li = links.len();
        let mut ends = [End::Switch { switch: 0, port: 0 }; 2];
        for (k, end) in resolved.into_iter().enumerate() {
            ends[k] = match end {
                Named::Node(node) => {
                    attached_once(ctx, &mut attached, r, k, node, segment, segments)?;
                    let iface = add_iface(&mut nodes[node], r, k, li, segment);
                    End::Node { node, iface }
                }
                Named::Switch(switch) => {
                    let sw = &mut switches[switch];
                    sw.ports.push(li);
                    End::Switch {
                        switch,
                        port: sw.ports.len() - 1,
                    }
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
    Ok(links)
}

/// Link names are unique: a link's name names its segment and impairment
/// namespace, and `iface.on` refers to it.
fn link_name_unused(
    ctx: &Ctx<'_>,
    link_names: &mut HashSet<String>,
    r: &RawLink,
) -> Result<(), LabError> {
    if !link_names.insert(r.name.get_ref().clone()) {
        return Err(ctx.err_at(
            &r.name,
            format!(
                "{}: a link with this name already exists (set a distinct `name`)",
                r.what
            ),
        ));
    }
    Ok(())
}

/// Both endpoints of a link are defined nodes or switches.
fn resolve_endpoints(
    ctx: &Ctx<'_>,
    r: &RawLink,
    names: &HashMap<String, Named>,
) -> Result<[Named; 2], LabError> {
    let resolve = |e: &Spanned<String>| {
        names.get(e.get_ref()).copied().ok_or_else(|| {
            ctx.err_at(
                e,
                format!("{}: node \"{}\" is not defined", r.what, e.get_ref()),
            )
        })
    };
    Ok([resolve(&r.ends[0])?, resolve(&r.ends[1])?])
}

/// The two endpoints of a link differ: a link connects two namespaces.
fn distinct_endpoints(ctx: &Ctx<'_>, r: &RawLink) -> Result<(), LabError> {
    if r.ends[0].get_ref() == r.ends[1].get_ref() {
        return Err(ctx.err_at(
            &r.ends[1],
            format!("{}: both endpoints are \"{}\"", r.what, r.ends[0].get_ref()),
        ));
    }
    Ok(())
}

/// At least one end of a link is a node: each switch is one segment with
/// one subnet, and joining two would make them one.
fn not_switch_to_switch(ctx: &Ctx<'_>, r: &RawLink, resolved: [Named; 2]) -> Result<(), LabError> {
    if let [Named::Switch(_), Named::Switch(_)] = resolved {
        return Err(ctx.err_at(
            &r.ends[0],
            format!("{}: links between two switches are not supported", r.what),
        ));
    }
    Ok(())
}

/// The segment of a link: its switch's, or a new one of its own. A link to
/// a switch sets no `subnet`, since it is on the switch's subnet.
fn link_segment(
    ctx: &Ctx<'_>,
    r: &RawLink,
    resolved: [Named; 2],
    switches: &[Switch],
    segments: &mut Vec<SegmentDraft>,
) -> Result<usize, LabError> {
    let switch = resolved.iter().find_map(|e| match e {
        Named::Switch(s) => Some(*s),
        Named::Node(_) => None,
    });
    match switch {
        Some(sw) => {
            if let Some(s) = &r.subnet {
                return Err(ctx.err_at(
                    s,
                    format!(
                        "{}: a link to a switch is on the switch's subnet; set `subnet` on the switch",
                        r.what
                    ),
                ));
            }
            Ok(switches[sw].segment)
        }
        None => Ok(new_segment(segments, r.name.get_ref(), &r.subnet)),
    }
}

/// A node is on a segment once, except through a switch's `ports` (see
/// [`further_ports`]), which names and numbers the further interfaces.
/// `attached` records the (node, segment) pairs seen.
fn attached_once(
    ctx: &Ctx<'_>,
    attached: &mut HashSet<(usize, usize)>,
    r: &RawLink,
    k: usize,
    node: usize,
    segment: usize,
    segments: &[SegmentDraft],
) -> Result<(), LabError> {
    if !attached.insert((node, segment)) && r.port.is_none() {
        return Err(ctx.err_at(
            &r.ends[k],
            format!(
                "{}: node \"{}\" is already attached to segment \"{}\" (for several ports on a switch, set the switch's `ports`)",
                r.what,
                r.ends[k].get_ref(),
                segments[segment].name
            ),
        ));
    }
    Ok(())
}

/// Adds to `node` the interface of end `k` of link `li`, named after the
/// peer (`to-PEER`, or `to-SWITCH-N` for a further port); its address and
/// MAC are decided later. Returns the interface's index.
fn add_iface(node: &mut Node, r: &RawLink, k: usize, li: usize, segment: usize) -> usize {
    let peer = r.ends[1 - k].get_ref().clone();
    node.ifaces.push(Iface {
        ifname: match r.port {
            Some(n) => format!("to-{peer}-{n}"),
            None => format!("to-{peer}"),
        },
        mac: Mac::default(),
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
    node.ifaces.len() - 1
}

// ---------------------------------------------------------------- interface settings

/// An `iface.ipv4` as given: the address and its prefix length, if any.
#[derive(Debug, Clone, Copy)]
struct GivenAddr {
    addr: Ipv4Addr,
    prefix_len: Option<u8>,
}

/// What a `[[node.iface]]` sets on one interface besides its name.
#[derive(Debug, Clone, Default)]
struct IfaceSettings {
    ipv4: Option<Spanned<GivenAddr>>,
    mac: Option<Spanned<Mac>>,
}

/// Applies each node's `[[node.iface]]`: the target interface (see
/// [`iface_target`] and [`configured_once`]), then its `ifname` (which must
/// pass [`check_ifname`]), `mac` ([`iface_mac`]) and `ipv4`
/// ([`parse_iface_ipv4`]). Then the node's interface names pass
/// [`iface_names`]. Returns the MACs and addresses given, per node and
/// interface.
fn iface_settings(
    ctx: &Ctx<'_>,
    cfg: &[NodeCfg],
    nodes: &mut [Node],
    links: &[Link],
    segments: &[SegmentDraft],
) -> Result<Vec<Vec<IfaceSettings>>, LabError> {
    let mut settings = Vec::new();
    for (ncfg, node) in cfg.iter().zip(nodes.iter_mut()) {
        let nwhat = format!("node \"{}\"", ncfg.name.get_ref());
        let mut given = vec![IfaceSettings::default(); node.ifaces.len()];
        let mut done = HashSet::new();
        for ic in &ncfg.iface {
            let ii = iface_target(ctx, &nwhat, &ic.on, node, links, segments)?;
            configured_once(ctx, &nwhat, &mut done, ii, &ic.on)?;
            if let Some(n) = &ic.ifname {
                ctx.check(n, &field_of(&nwhat, "iface.ifname"), |s| check_ifname(s))?;
                node.ifaces[ii].ifname = n.get_ref().clone();
            }
            if let Some(m) = &ic.mac {
                let mac = ctx.check(m, &field_of(&nwhat, "iface.mac"), |s| iface_mac(s))?;
                given[ii].mac = Some(Spanned::new(m.span(), mac));
            }
            if let Some(a) = &ic.ipv4 {
                let addr =
                    ctx.check(a, &field_of(&nwhat, "iface.ipv4"), |s| parse_iface_ipv4(s))?;
                given[ii].ipv4 = Some(Spanned::new(a.span(), addr));
            }
        }
        iface_names(ctx, &nwhat, &ncfg.name, node, links)?;
        settings.push(given);
    }
    Ok(settings)
}

/// `iface.on` names exactly one interface of the node: a link of the node,
/// or a switch it is on (with several ports on it, the link must be named).
/// Returns the interface's index.
fn iface_target(
    ctx: &Ctx<'_>,
    nwhat: &str,
    on: &Spanned<String>,
    node: &Node,
    links: &[Link],
    segments: &[SegmentDraft],
) -> Result<usize, LabError> {
    let name = on.get_ref();
    let found: Vec<usize> = node
        .ifaces
        .iter()
        .enumerate()
        .filter(|(_, f)| links[f.link].name == *name || segments[f.segment].name == *name)
        .map(|(i, _)| i)
        .collect();
    match found.as_slice() {
        [i] => Ok(*i),
        [] => Err(ctx.err_at(
            on,
            format!("{nwhat}: iface.on = \"{name}\": the node has no link or switch of that name"),
        )),
        _ => Err(ctx.err_at(
            on,
            format!("{nwhat}: iface.on = \"{name}\" is ambiguous; name the link"),
        )),
    }
}

/// One `[[node.iface]]` per interface: two would contradict each other.
/// `done` holds the interfaces already configured.
fn configured_once(
    ctx: &Ctx<'_>,
    nwhat: &str,
    done: &mut HashSet<usize>,
    iface: usize,
    on: &Spanned<String>,
) -> Result<(), LabError> {
    if !done.insert(iface) {
        return Err(ctx.err_at(
            on,
            format!(
                "{nwhat}: interface on \"{}\" is configured twice",
                on.get_ref()
            ),
        ));
    }
    Ok(())
}

/// Parses an `iface.ipv4`: an address, with or without a prefix length.
fn parse_iface_ipv4(s: &str) -> Result<GivenAddr, String> {
    if s.contains('/') {
        s.parse::<Ipv4Cidr>().map(|c| GivenAddr {
            addr: c.addr,
            prefix_len: Some(c.prefix_len),
        })
    } else {
        s.parse::<Ipv4Addr>()
            .map(|addr| GivenAddr {
                addr,
                prefix_len: None,
            })
            .map_err(|_| format!("\"{s}\" is not an IPv4 address"))
    }
}

/// Every interface name of a node, derived (`to-PEER`) or given, passes
/// [`check_ifname`], and no two are equal: they share the node's namespace.
/// The error points at the node, whose `[[node.iface]]` ifname fixes it.
fn iface_names(
    ctx: &Ctx<'_>,
    nwhat: &str,
    node_name: &Spanned<String>,
    node: &Node,
    links: &[Link],
) -> Result<(), LabError> {
    let mut seen = HashSet::new();
    for f in &node.ifaces {
        if let Err(m) = check_ifname(&f.ifname) {
            return Err(ctx.err_at(
                node_name,
                format!(
                    "{nwhat}: link \"{}\": {m}; shorten the peer's name or set [[node.iface]] ifname",
                    links[f.link].name
                ),
            ));
        }
        if !seen.insert(&f.ifname) {
            return Err(ctx.err_at(
                node_name,
                format!(
                    "{nwhat}: two interfaces are named \"{}\"; set [[node.iface]] ifname",
                    f.ifname
                ),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- subnets

/// Decides each segment's subnet: its `subnet` ([`explicit_subnet`]), else
/// that of an address given with a length ([`subnet_from_address`]), else
/// the next /24 of the pool ([`next_pool_subnet`]). Subnets given either
/// way pass [`disjoint_subnets`] first.
fn assign_subnets(
    ctx: &Ctx<'_>,
    nodes: &[Node],
    settings: &[Vec<IfaceSettings>],
    drafts: Vec<SegmentDraft>,
    pool: Ipv4Cidr,
) -> Result<Vec<Segment>, LabError> {
    let mut fixed: Vec<Option<Ipv4Cidr>> = Vec::new();
    for d in &drafts {
        let subnet = match &d.subnet {
            Some(s) => Some(explicit_subnet(ctx, &d.name, s)?),
            None => None,
        };
        fixed.push(subnet);
    }
    for (node, given) in nodes.iter().zip(settings) {
        for (f, g) in node.ifaces.iter().zip(given) {
            if let Some(a) = &g.ipv4 {
                let segment = &drafts[f.segment].name;
                subnet_from_address(ctx, &node.name, a, &mut fixed[f.segment], segment)?;
            }
        }
    }
    disjoint_subnets(ctx, &fixed, &drafts)?;
    let mut next_pool: u32 = 0;
    let mut segments = Vec::new();
    for (d, f) in drafts.into_iter().zip(&fixed) {
        let subnet = match f {
            Some(c) => *c,
            None => next_pool_subnet(ctx, pool, &mut next_pool, &fixed, &d.name)?,
        };
        segments.push(Segment {
            name: d.name,
            subnet,
        });
    }
    Ok(segments)
}

/// A segment's `subnet` is ADDRESS/LEN of at most /30: a smaller one has
/// no two host addresses.
fn explicit_subnet(
    ctx: &Ctx<'_>,
    segment: &str,
    subnet: &Spanned<String>,
) -> Result<Ipv4Cidr, LabError> {
    let c: Ipv4Cidr = ctx.check(subnet, &format!("\"{segment}\": subnet"), |s| s.parse())?;
    if c.prefix_len > 30 {
        return Err(ctx.err_at(
            subnet,
            format!("\"{segment}\": subnet {c} is too small (at most /30)"),
        ));
    }
    Ok(c.network())
}

/// An `iface.ipv4` given with a length fixes its segment's subnet (`fixed`);
/// one already fixed, by `subnet` or an earlier address, must be the same.
fn subnet_from_address(
    ctx: &Ctx<'_>,
    node: &str,
    given: &Spanned<GivenAddr>,
    fixed: &mut Option<Ipv4Cidr>,
    segment: &str,
) -> Result<(), LabError> {
    let GivenAddr { addr, prefix_len } = *given.get_ref();
    let Some(len) = prefix_len else {
        return Ok(());
    };
    let c = Ipv4Cidr {
        addr,
        prefix_len: len,
    }
    .network();
    match *fixed {
        None => *fixed = Some(c),
        Some(s) if s == c => {}
        Some(s) => {
            return Err(ctx.err_at(
                given,
                format!(
                    "node \"{node}\": iface.ipv4 {addr}/{len} does not match subnet {s} of \"{segment}\""
                ),
            ));
        }
    }
    Ok(())
}

/// Subnets fixed in the file do not overlap: routes to them would be
/// ambiguous, and two segments could hand out one address.
fn disjoint_subnets(
    ctx: &Ctx<'_>,
    fixed: &[Option<Ipv4Cidr>],
    segments: &[SegmentDraft],
) -> Result<(), LabError> {
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
    Ok(())
}

/// The next /24 of the pool (a network address, /24 or larger) that
/// overlaps no fixed subnet, for `segment`; `next` counts the /24s already
/// tried. They are tried from the pool's second /24 on and its first one
/// last: a larger pool numbers its segments' subnets from 1 (10.200.1.0/24,
/// 10.200.2.0/24, ... from the default pool), and a /24 pool still gives
/// its one /24. The /24's index is OR-ed into the host bits of the pool's
/// address, so no pool, not even one at the top of the address space,
/// makes the arithmetic overflow. Running out of /24s is an error, since
/// every segment needs one.
fn next_pool_subnet(
    ctx: &Ctx<'_>,
    pool: Ipv4Cidr,
    next: &mut u32,
    fixed: &[Option<Ipv4Cidr>],
    segment: &str,
) -> Result<Ipv4Cidr, LabError> {
    let pool_size: u32 = 1u32 << (24 - u32::from(pool.prefix_len));
    loop {
        if *next >= pool_size {
            return Err(ctx.err(
                None,
                format!("subnet_pool {pool} has no /24 left for \"{segment}\""),
            ));
        }
        let index = (*next + 1) % pool_size;
        *next += 1;
        let c = Ipv4Cidr {
            addr: Ipv4Addr::from(u32::from(pool.addr) | (index << 8)),
            prefix_len: 24,
        };
        if fixed.iter().flatten().all(|f| !f.overlaps(&c)) {
            return Ok(c);
        }
    }
}

// ---------------------------------------------------------------- addresses and MACs

/// Decides every interface's address: the given ones first (each passes
/// [`host_address`] and [`address_unused`]), then hosts .1, .2, ... in
/// link order ([`next_free_host`]).
fn assign_addresses(
    ctx: &Ctx<'_>,
    nodes: &mut [Node],
    settings: &[Vec<IfaceSettings>],
    links: &[Link],
    segments: &[Segment],
) -> Result<(), LabError> {
    let mut used: HashMap<Ipv4Addr, String> = HashMap::new();
    for (node, given) in nodes.iter_mut().zip(settings) {
        for (f, g) in node.ifaces.iter_mut().zip(given) {
            if let Some(a) = &g.ipv4 {
                let segment = &segments[f.segment];
                host_address(ctx, &node.name, a, segment)?;
                address_unused(ctx, &mut used, &node.name, a)?;
                f.ipv4 = Ipv4Cidr {
                    addr: a.get_ref().addr,
                    prefix_len: segment.subnet.prefix_len,
                };
            }
        }
    }
    let mut next_host: Vec<u32> = vec![1; segments.len()];
    for l in links {
        for e in l.ends {
            if let End::Node { node, iface } = e {
                if settings[node][iface].ipv4.is_some() {
                    continue;
                }
                let segment = &segments[l.segment];
                let addr = next_free_host(ctx, &mut next_host[l.segment], segment, &used)?;
                used.insert(addr, nodes[node].name.clone());
                nodes[node].ifaces[iface].ipv4 = Ipv4Cidr {
                    addr,
                    prefix_len: segment.subnet.prefix_len,
                };
            }
        }
    }
    Ok(())
}

/// A given `iface.ipv4` is a host address of its segment's subnet: inside
/// it, and neither its network nor its broadcast address.
fn host_address(
    ctx: &Ctx<'_>,
    node: &str,
    given: &Spanned<GivenAddr>,
    segment: &Segment,
) -> Result<(), LabError> {
    let addr = given.get_ref().addr;
    let subnet = segment.subnet;
    let host = u32::from(addr) & !subnet.mask();
    if !subnet.contains(addr) || host == 0 || host == !subnet.mask() {
        return Err(ctx.err_at(
            given,
            format!(
                "node \"{node}\": iface.ipv4 {addr} is not a host address of subnet {subnet} (\"{}\")",
                segment.name
            ),
        ));
    }
    Ok(())
}

/// No two interfaces are given one address. `used` maps the addresses
/// handed out so far to their nodes.
fn address_unused(
    ctx: &Ctx<'_>,
    used: &mut HashMap<Ipv4Addr, String>,
    node: &str,
    given: &Spanned<GivenAddr>,
) -> Result<(), LabError> {
    let addr = given.get_ref().addr;
    if let Some(other) = used.insert(addr, node.to_string()) {
        return Err(ctx.err_at(
            given,
            format!("node \"{node}\": iface.ipv4 {addr} is also given to node \"{other}\""),
        ));
    }
    Ok(())
}

/// The next host address of a segment, counting from `next`, that is not
/// in `used`; a subnet without one left is an error.
fn next_free_host(
    ctx: &Ctx<'_>,
    next: &mut u32,
    segment: &Segment,
    used: &HashMap<Ipv4Addr, String>,
) -> Result<Ipv4Addr, LabError> {
    let subnet = segment.subnet;
    loop {
        let host = *next;
        if host >= !subnet.mask() {
            return Err(ctx.err(
                None,
                format!(
                    "subnet {subnet} of \"{}\" has no address left",
                    segment.name
                ),
            ));
        }
        *next += 1;
        let a = Ipv4Addr::from(u32::from(subnet.addr) + host);
        if !used.contains_key(&a) {
            return Ok(a);
        }
    }
}

/// Decides every interface's MAC: the given ones first (each passes
/// [`mac_unused`]), then one from segment and host number ([`derived_mac`]).
fn assign_macs(
    ctx: &Ctx<'_>,
    nodes: &mut [Node],
    settings: &[Vec<IfaceSettings>],
) -> Result<(), LabError> {
    let mut macs: HashMap<Mac, String> = HashMap::new();
    for (node, given) in nodes.iter_mut().zip(settings) {
        for (f, g) in node.ifaces.iter_mut().zip(given) {
            if let Some(m) = &g.mac {
                mac_unused(ctx, &mut macs, &node.name, m)?;
                f.mac = *m.get_ref();
            }
        }
    }
    for (node, given) in nodes.iter_mut().zip(settings) {
        for (f, g) in node.ifaces.iter_mut().zip(given) {
            if g.mac.is_none() {
                f.mac = derived_mac(f, &macs).ok_or_else(|| {
                    ctx.err(None, format!(
                        "node \"{}\": interface {}: every MAC the lab would derive for it (02:bc:..:..:XX:..) is given to another interface by iface.mac; give this one an iface.mac too",
                        node.name, f.ifname
                    ))
                })?;
                macs.insert(f.mac, node.name.clone());
            }
        }
    }
    Ok(())
}

/// No two interfaces are given one MAC, so a MAC identifies one interface
/// (bridges forward by it). `macs` maps the MACs handed out so far to their
/// nodes.
fn mac_unused(
    ctx: &Ctx<'_>,
    macs: &mut HashMap<Mac, String>,
    node: &str,
    given: &Spanned<Mac>,
) -> Result<(), LabError> {
    let mac = *given.get_ref();
    if let Some(other) = macs.insert(mac, node.to_string()) {
        return Err(ctx.err_at(
            given,
            format!("node \"{node}\": iface.mac {mac} is also used by node \"{other}\""),
        ));
    }
    Ok(())
}

/// 02:bc:SS:SS:HH:HH from the interface's segment (counted from 1) and
/// host number; if `macs` holds that, the first of the other 255 values of
/// the fifth byte (0x80 further first) that it does not hold. `None` when
/// all 256 are taken (only explicit MACs can take them).
fn derived_mac(iface: &Iface, macs: &HashMap<Mac, String>) -> Option<Mac> {
    let seg = (iface.segment as u16).wrapping_add(1);
    let host = u32::from(iface.ipv4.addr) & !iface.ipv4.mask();
    let base = Mac([
        0x02,
        0xbc,
        (seg >> 8) as u8,
        seg as u8,
        (host >> 8) as u8,
        host as u8,
    ]);
    let steps = [0u8, 0x80]
        .into_iter()
        .chain((1..=255u8).filter(|s| *s != 0x80));
    steps
        .map(|step| {
            let mut mac = base;
            mac.0[4] = mac.0[4].wrapping_add(step);
            mac
        })
        .find(|mac| !macs.contains_key(mac))
}

// ---------------------------------------------------------------- impairment

/// A link's `[link.impair]`: the parameters of each direction (see
/// [`impair_direction`]) and the seed, by default one derived from the
/// link name, so runs are reproducible anyway.
fn impair_params(
    ctx: &Ctx<'_>,
    what: &str,
    i: &ImpairCfg,
    link_name: &str,
) -> Result<LinkImpair, LabError> {
    let both = i.both();
    let direction = |over: &Option<DirCfg>, name: &str| match over {
        Some(d) => impair_direction(ctx, what, &both.merged(d), name),
        None => impair_direction(ctx, what, &both, ""),
    };
    let forward = direction(&i.forward, ".forward")?;
    let reverse = direction(&i.reverse, ".reverse")?;
    let seed = i.seed.unwrap_or_else(|| {
        link_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    });
    Ok(LinkImpair {
        seed,
        forward,
        reverse,
    })
}

/// One direction's impairment parameters. `dname` is where its fields are
/// in messages: "" for `[link.impair]`, ".forward" or ".reverse" where the
/// direction overrides them. Probabilities pass [`probability`], `delay`,
/// `jitter` and `limit` [`parse_duration`], `rate` [`parse_rate`], and
/// `burst` [`burst_needs_rate`].
fn impair_direction(
    ctx: &Ctx<'_>,
    what: &str,
    d: &DirCfg,
    dname: &str,
) -> Result<ImpairParams, LabError> {
    let field = |name: &str| field_of(what, &format!("impair{dname}.{name}"));
    let duration = |v: &Option<Spanned<String>>, name: &str, default: Duration| match v {
        None => Ok(default),
        Some(s) => ctx.check(s, &field(name), |s| parse_duration(s)),
    };
    let rate = match &d.rate {
        None => 0,
        Some(s) => ctx.check(s, &field("rate"), |s| parse_rate(s))?,
    };
    let p = ImpairParams {
        loss: probability(ctx, &d.loss, &field("loss"))?,
        duplicate: probability(ctx, &d.duplicate, &field("duplicate"))?,
        reorder: probability(ctx, &d.reorder, &field("reorder"))?,
        corrupt: probability(ctx, &d.corrupt, &field("corrupt"))?,
        delay_ns: duration(&d.delay, "delay", Duration::ZERO)?.as_nanos() as u64,
        jitter_ns: duration(&d.jitter, "jitter", Duration::ZERO)?.as_nanos() as u64,
        rate_bps: rate,
        burst_bytes: d.burst.as_ref().map(|b| *b.get_ref()).unwrap_or(0),
        limit_ns: duration(&d.limit, "limit", Duration::from_millis(100))?.as_nanos() as u64,
    };
    burst_needs_rate(ctx, &d.burst, rate, &field("burst"))?;
    Ok(p)
}

/// A probability is 0.0..=1.0 (unset: 0). The message shows the scale,
/// since "10" for 10 % is the likely mistake.
fn probability(ctx: &Ctx<'_>, v: &Option<Spanned<f64>>, field: &str) -> Result<f64, LabError> {
    match v {
        None => Ok(0.0),
        Some(p) if (0.0..=1.0).contains(p.get_ref()) => Ok(*p.get_ref()),
        Some(p) => Err(ctx.err_at(
            p,
            format!(
                "{field} = {} is not a probability (0.0..=1.0; 10 % is 0.1)",
                p.get_ref()
            ),
        )),
    }
}

/// `burst` is the depth of the rate limiter's token bucket, so it needs a
/// `rate`; alone it would be silently ignored.
fn burst_needs_rate(
    ctx: &Ctx<'_>,
    burst: &Option<Spanned<u64>>,
    rate: u64,
    field: &str,
) -> Result<(), LabError> {
    if let (Some(b), 0) = (burst, rate) {
        return Err(ctx.err_at(b, format!("{field} is set but no rate")));
    }
    Ok(())
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
        assert_eq!(t.nodes[1].ifaces[0].mac.to_string(), "02:bc:00:01:00:02");
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
        let macs: HashSet<Mac> = t
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
    fn iface_macs_take_both_text_forms_and_refuse_with_the_field_and_line() {
        let with_mac = |m: &str| format!("{PAIR}[[node.iface]]\non = \"a-b\"\nmac = \"{m}\"\n");
        let t = p(&with_mac("02-00-00-00-00-0A")).unwrap();
        assert_eq!(t.nodes[1].ifaces[0].mac.to_string(), "02:00:00:00:00:0a");
        for (mac, why) in [
            (
                "02:00:00:00:00",
                "is not a MAC address (e.g. \"02:00:00:00:00:01\")",
            ),
            (
                "+2:00:00:00:00:01",
                "is not a MAC address (e.g. \"02:00:00:00:00:01\")",
            ),
            (
                "03:00:00:00:00:01",
                "is a multicast MAC; an interface needs a unicast one",
            ),
            ("00:00:00:00:00:00", "is the all-zero MAC"),
        ] {
            assert_eq!(
                err(&with_mac(mac)),
                format!("x.toml:10: node \"b\": iface.mac: \"{mac}\" {why}")
            );
        }
    }

    #[test]
    fn explicit_addresses() {
        let t = p(&format!(
            "{PAIR}subnet = \"10.9.0.0/24\"\n[[node.iface]]\non = \"a-b\"\nipv4 = \"10.9.0.9\"\nmac = \"02:00:00:00:00:09\"\n"
        ))
        .unwrap();
        assert_eq!(t.nodes[1].ifaces[0].ipv4.to_string(), "10.9.0.9/24");
        assert_eq!(t.nodes[0].ifaces[0].ipv4.to_string(), "10.9.0.1/24");
        assert_eq!(t.nodes[1].ifaces[0].mac.to_string(), "02:00:00:00:00:09");
        let e = err(&format!(
            "{PAIR}subnet = \"10.9.0.0/24\"\n[[node.iface]]\non = \"a-b\"\nipv4 = \"10.8.0.9\"\n"
        ));
        assert!(e.starts_with("x.toml:11:"), "{e}");
    }

    /// Two nodes on switch "sw" (line 8: `[switch.shape]`, line 9 on: `shape`).
    fn shaped(shape: &str) -> String {
        format!(
            "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[switch]]\nname = \"sw\"\nmembers = [\"a\", \"b\"]\n[switch.shape]\n{shape}"
        )
    }

    #[test]
    fn shape_defaults_and_tc_arguments() {
        let t = p(&shaped("rate = \"200mbit\"\n")).unwrap();
        let shape = t.switches[0].shape.unwrap();
        assert_eq!(
            shape,
            SwitchShape {
                rate_bps: 200_000_000,
                burst_bytes: 16384,
                limit_bytes: 262144
            }
        );
        assert_eq!(
            shape.tc_args().join(" "),
            "tbf rate 200000000bit burst 16384 limit 262144"
        );
        assert_eq!(
            shape.describe(),
            "tbf rate 200mbit burst 16384 B limit 262144 B"
        );
        // Unshaped switches stay unshaped.
        let t = p(&shaped("").replace("[switch.shape]\n", "")).unwrap();
        assert!(t.switches[0].shape.is_none());
        // A jumbo switch's default burst holds two of its frames' MTUs.
        let t = p(&shaped("rate = \"1gbit\"\n").replace(
            "members = [\"a\", \"b\"]\n",
            "members = [\"a\", \"b\"]\nmtu = 9000\n",
        ))
        .unwrap();
        assert_eq!(t.switches[0].shape.unwrap().burst_bytes, 18000);
    }

    #[test]
    fn shape_sizes_take_units_or_bytes() {
        let t = p(&shaped(
            "rate = \"1.5gbit\"\nburst = \"16kb\"\nlimit = 300000\n",
        ))
        .unwrap();
        let shape = t.switches[0].shape.unwrap();
        assert_eq!(
            (shape.rate_bps, shape.burst_bytes, shape.limit_bytes),
            (1_500_000_000, 16384, 300_000)
        );
        // limit below burst is allowed (tbf takes it), as long as it holds a frame.
        let t = p(&shaped(
            "rate = \"20mbit\"\nburst = \"64kb\"\nlimit = \"2kb\"\n",
        ))
        .unwrap();
        assert_eq!(t.switches[0].shape.unwrap().limit_bytes, 2048);
    }

    #[test]
    fn shape_rates_parse_exactly() {
        assert_eq!(parse_shape_rate("200mbit").unwrap(), 200_000_000);
        assert_eq!(parse_shape_rate("1Gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_shape_rate("1.5gbit").unwrap(), 1_500_000_000);
        assert_eq!(parse_shape_rate("0.001kbit").unwrap(), 1);
        assert_eq!(parse_shape_rate(".5kbit").unwrap(), 500);
        assert_eq!(parse_shape_rate("9600bit").unwrap(), 9600);
        assert_eq!(parse_shape_rate("1kibit").unwrap(), 1024);
        assert_eq!(parse_shape_rate("2mibit").unwrap(), 2 << 20);
        assert_eq!(parse_shape_rate("10tbit").unwrap(), SHAPE_RATE_MAX);
        // 0.1 gbit is exact here, where a float product would not be.
        assert_eq!(parse_shape_rate("0.1gbit").unwrap(), 100_000_000);
        for (bad, why) in [
            ("0mbit", "must be above 0"),
            ("0.0001bit", "not a whole number"),
            ("11tbit", "above 10tbit"),
            ("200", "bad rate"),
            ("200mbps", "bytes per second"),
            ("fast", "bad rate"),
            ("1.2.3mbit", "not a number"),
            ("mbit", "not a number"),
            ("99999999999999999999999gbit", "too large"),
        ] {
            let e = parse_shape_rate(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_parse_exactly_in_binary_units() {
        assert_eq!(parse_size("16kb").unwrap(), 16384);
        assert_eq!(parse_size("256KB").unwrap(), 262144);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5kib").unwrap(), 1536);
        assert_eq!(parse_size("1514").unwrap(), 1514);
        assert_eq!(parse_size("1514b").unwrap(), 1514);
        for (bad, why) in [
            ("4gb", "above 4 GiB - 1"),
            ("1.5b", "not a whole number"),
            ("16kbit", "bad size"),
            ("-1kb", "bad size"),
            ("", "not a number"),
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert_eq!(format_rate(200_000_000), "200mbit");
        assert_eq!(format_rate(1_500_000_000), "1500mbit");
        assert_eq!(format_rate(1024), "1024bit");
    }

    #[test]
    fn shape_errors_name_the_file_line_and_field() {
        let cases = [
            (
                "burst = 16384\n",
                "x.toml:8:",
                "missing field `rate`",
            ),
            (
                "rate = \"fast\"\n",
                "x.toml:9:",
                "switch \"sw\": shape.rate: bad rate \"fast\"",
            ),
            (
                "rate = \"0gbit\"\n",
                "x.toml:9:",
                "switch \"sw\": shape.rate: rate \"0gbit\" must be above 0",
            ),
            (
                "rate = \"1gbit\"\nburst = 1500\n",
                "x.toml:10:",
                "switch \"sw\": shape.burst = 1500 bytes is less than one frame of the switch (MTU 1500 + 14-byte Ethernet header = 1514 bytes)",
            ),
            (
                "rate = \"1gbit\"\nburst = \"1kb\"\n",
                "x.toml:10:",
                "shape.burst = 1024 bytes is less than one frame",
            ),
            (
                "rate = \"1gbit\"\nburst = \"lots\"\n",
                "x.toml:10:",
                "switch \"sw\": shape.burst: bad size \"lots\"",
            ),
            (
                "rate = \"1gbit\"\nburst = -5\n",
                "x.toml:10:",
                "switch \"sw\": shape.burst: -5 is negative",
            ),
            (
                "rate = \"1gbit\"\nlimit = 1000\n",
                "x.toml:10:",
                "switch \"sw\": shape.limit = 1000 bytes is less than one frame",
            ),
            (
                "rate = \"1gbit\"\nlimit = 5000000000\n",
                "x.toml:10:",
                "switch \"sw\": shape.limit: 5000000000 is above 4 GiB - 1",
            ),
            (
                "rate = \"1gbit\"\nlimit = true\n",
                "x.toml:10:",
                "`limit`: invalid type: boolean `true`, expected a size in bytes",
            ),
            (
                "rate = \"1gbit\"\npeakrate = \"2gbit\"\n",
                "x.toml:10:",
                "peakrate",
            ),
        ];
        for (shape, at, why) in cases {
            let e = err(&shaped(shape));
            assert!(e.starts_with(at) && e.contains(why), "{shape:?}: {e}");
        }
        // The frame is the switch's: a jumbo switch needs a deeper bucket.
        let e = err(&shaped("rate = \"1gbit\"\nburst = \"8kb\"\n").replace(
            "members = [\"a\", \"b\"]\n",
            "members = [\"a\", \"b\"]\nmtu = 9000\n",
        ));
        assert!(
            e.starts_with("x.toml:11:")
                && e.contains("MTU 9000 + 14-byte Ethernet header = 9014 bytes"),
            "{e}"
        );
    }
}
