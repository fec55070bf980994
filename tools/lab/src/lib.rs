//! `bcl-lab`: test clusters on one machine.
//!
//! A topology file (TOML, see the README and `configs/lab/`) describes nodes,
//! links, switches and routers. [`Lab::up`] turns it into network namespaces
//! (one per node, switch and impaired link), veth pairs created directly inside
//! those namespaces (nothing is ever placed in the root namespace), Linux
//! bridges, addresses and routes, and starts one impairment bridge process per
//! impaired link (`bcl-lab impair`, an AF_PACKET forwarder applying loss,
//! duplication, delay, jitter, reordering, corruption and a rate limit per
//! direction). [`Lab::down`] removes all of it, including what a crashed run
//! left behind, and never touches another lab's objects.
//!
//! Every object carries the lab's prefix: namespaces are `PREFIX.NODE`,
//! `PREFIX.SWITCH` and `PREFIX.imp.LINK`; state lives in `/run/bcl-lab/PREFIX/`.
//! Prefixes cannot contain '.', so no lab's names start with another's `PREFIX.`.
//!
//! ```no_run
//! use bcl_lab::LabGuard;
//! let lab = LabGuard::up("configs/lab/pair.toml".as_ref())?;
//! let out = lab.command("a", "ip")?.args(["-br", "addr"]).output()?;
//! println!("{}", String::from_utf8_lossy(&out.stdout));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bcl_ether::Mac;
use serde::Serialize;

mod config;
mod impair;
mod sys;

pub use config::{
    check_prefix, format_rate, parse_duration, parse_rate, parse_shape_rate, parse_size, Ipv4Cidr,
    LinkImpair, Route, SwitchShape, IFNAME_MAX,
};
pub use impair::{ImpairCounters, ImpairParams};

use config::{End, Topology};
use impair::{BridgeSpec, CountersFile};

/// Root of the per-lab state directories.
pub const STATE_ROOT: &str = "/run/bcl-lab";
/// Environment variable that overrides every lab's prefix.
pub const PREFIX_ENV: &str = "BCL_LAB_PREFIX";
/// Environment variable naming the `bcl-lab` binary used to run impairment bridges.
pub const BIN_ENV: &str = "BCL_LAB_BIN";
/// Environment variable that makes privileged tests skip instead of fail.
pub const SKIP_ENV: &str = "BCL_SKIP_PRIVILEGED";
/// Name of the bridge device inside a switch namespace.
pub const SWITCH_BRIDGE: &str = "br0";

/// Everything that can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The topology file is wrong: `FILE:LINE: message`.
    #[error("{}{}: {msg}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Config {
        /// The file.
        file: PathBuf,
        /// 1-based line of the offending value, when known.
        line: Option<usize>,
        /// What is wrong, naming the field.
        msg: String,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// An external command (mostly `ip`) failed.
    #[error("command `{command}` failed ({status}){}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// `up` found the lab (or leftovers of it) already present.
    #[error("lab \"{prefix}\" is already up ({what}); run `bcl-lab down FILE` first")]
    AlreadyUp {
        /// The lab's prefix.
        prefix: String,
        /// What was found.
        what: String,
    },
    /// The lab is not up.
    #[error("lab \"{prefix}\" is not up; run `bcl-lab up FILE` first")]
    NotUp {
        /// The lab's prefix.
        prefix: String,
    },
    /// A node name that the topology does not define.
    #[error("lab \"{prefix}\" has no node \"{node}\" (nodes: {known})")]
    UnknownNode {
        /// The lab's prefix.
        prefix: String,
        /// The name asked for.
        node: String,
        /// The nodes that exist.
        known: String,
    },
    /// An impairment bridge could not be started or read.
    #[error("impairment bridge of link \"{link}\": {msg}")]
    Impair {
        /// The link.
        link: String,
        /// What went wrong.
        msg: String,
    },
    /// `down` could not remove everything.
    #[error("lab \"{prefix}\": could not remove {what}")]
    Leftovers {
        /// The lab's prefix.
        prefix: String,
        /// What is still there.
        what: String,
    },
    /// Anything else (bad environment variable, missing binary, ...).
    #[error("{0}")]
    Other(String),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LabError {
    let context = context.into();
    move |source| LabError::Io { context, source }
}

/// One interface of a node, as configured by `up`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabInterface {
    /// The node it belongs to.
    pub node: String,
    /// Interface name inside the node's namespace.
    pub ifname: String,
    /// MAC address, `02:bc:..` form.
    pub mac: String,
    /// IPv4 address with prefix length.
    pub ipv4: Option<Ipv4Cidr>,
    /// The link this interface belongs to.
    pub link: String,
    /// The L2 segment (the switch's name, or the link's name for a point-to-point link).
    pub segment: String,
    /// The node or switch at the other end of the link.
    pub peer: String,
    /// Number of TX queues and of RX queues of the veth (0: the kernel's
    /// default counts).
    pub queues: u32,
    /// MTU.
    pub mtu: u32,
    /// Whether frames pass through an impairment bridge.
    pub impaired: bool,
}

/// A lab: a validated topology plus its prefix. Cheap to create; does nothing
/// to the system until [`Lab::up`].
#[derive(Debug, Clone)]
pub struct Lab {
    topo: Topology,
    prefix: String,
    bin: Option<PathBuf>,
}

/// `bcl-lab show --json` output; see [`Lab::report`].
#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    /// The lab's prefix.
    pub prefix: String,
    /// The topology file.
    pub file: String,
    /// Whether all node namespaces exist.
    pub up: bool,
    /// The state directory.
    pub state_dir: String,
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// Switches.
    pub switches: Vec<SwitchReport>,
    /// Links.
    pub links: Vec<LinkReport>,
    /// Live impairment counters (empty when down or nothing is impaired).
    pub counters: Vec<ImpairCounters>,
}

/// A node in a [`LabReport`].
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// Name.
    pub name: String,
    /// Namespace.
    pub netns: String,
    /// Whether it forwards IPv4.
    pub router: bool,
    /// Interfaces.
    pub interfaces: Vec<LabInterface>,
    /// Routes installed.
    pub routes: Vec<Route>,
}

/// A switch in a [`LabReport`].
#[derive(Debug, Clone, Serialize)]
pub struct SwitchReport {
    /// Name.
    pub name: String,
    /// Namespace.
    pub netns: String,
    /// The bridge device.
    pub bridge: String,
    /// Subnet of the segment.
    pub subnet: String,
    /// Attached nodes with their port interface in the switch namespace.
    pub ports: Vec<(String, String)>,
    /// Egress shaping of every port (`[switch.shape]`), if any.
    pub shape: Option<SwitchShape>,
}

/// A link in a [`LabReport`].
#[derive(Debug, Clone, Serialize)]
pub struct LinkReport {
    /// Name.
    pub name: String,
    /// The two endpoints (node or switch names).
    pub endpoints: [String; 2],
    /// Subnet of the segment the link is on.
    pub subnet: String,
    /// veth TX and RX queues per side (0: the kernel's default counts).
    pub queues: u32,
    /// MTU.
    pub mtu: u32,
    /// Impairment, if any.
    pub impair: Option<ImpairReport>,
}

/// An impaired link's middle in a [`LabReport`].
#[derive(Debug, Clone, Serialize)]
pub struct ImpairReport {
    /// The middle namespace running the bridge.
    pub netns: String,
    /// Seed of the bridge's random number generators.
    pub seed: u64,
    /// `endpoints[0]` → `endpoints[1]`.
    pub forward: ImpairParams,
    /// `endpoints[1]` → `endpoints[0]`.
    pub reverse: ImpairParams,
    /// Pid of the running bridge, if any.
    pub pid: Option<u32>,
}

impl Lab {
    /// Parses and validates a topology file. Touches nothing. The prefix is
    /// `$BCL_LAB_PREFIX`, else the file's `prefix`, else `bl-` + the file stem.
    pub fn load(path: &Path) -> Result<Lab, LabError> {
        let src = std::fs::read_to_string(path)
            .map_err(io_err(format!("cannot read {}", path.display())))?;
        let topo = config::parse(path, &src)?;
        let prefix = match std::env::var(PREFIX_ENV) {
            Ok(p) if !p.is_empty() => {
                check_prefix(&p).map_err(|m| LabError::Other(format!("{PREFIX_ENV}: {m}")))?;
                p
            }
            _ => match &topo.prefix {
                Some(p) => p.clone(),
                None => default_prefix(path),
            },
        };
        Ok(Lab {
            topo,
            prefix,
            bin: None,
        })
    }

    /// The same lab under another prefix (e.g. one per test).
    pub fn with_prefix(mut self, prefix: &str) -> Result<Lab, LabError> {
        check_prefix(prefix).map_err(LabError::Other)?;
        self.prefix = prefix.to_string();
        Ok(self)
    }

    /// Uses this `bcl-lab` binary to run impairment bridges (default:
    /// `$BCL_LAB_BIN`, the running `bcl-lab`, a `bcl-lab` next to the running
    /// executable or its parent directory, then `PATH`).
    pub fn with_bridge_binary(mut self, bin: &Path) -> Lab {
        self.bin = Some(bin.to_path_buf());
        self
    }

    /// The prefix of every object of this lab.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The topology file.
    pub fn file(&self) -> &Path {
        &self.topo.file
    }

    /// The state directory, `/run/bcl-lab/PREFIX`.
    pub fn state_dir(&self) -> PathBuf {
        Path::new(STATE_ROOT).join(&self.prefix)
    }

    /// Node names, in file order.
    pub fn nodes(&self) -> Vec<String> {
        self.topo.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Names of the impaired links, in file order.
    pub fn impaired_links(&self) -> Vec<String> {
        self.topo
            .links
            .iter()
            .filter(|l| l.impair.is_some())
            .map(|l| l.name.clone())
            .collect()
    }

    fn node_idx(&self, node: &str) -> Result<usize, LabError> {
        self.topo
            .node_index(node)
            .ok_or_else(|| LabError::UnknownNode {
                prefix: self.prefix.clone(),
                node: node.to_string(),
                known: self.nodes().join(", "),
            })
    }

    fn ns_name(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    fn imp_ns(&self, link: &str) -> String {
        format!("{}.imp.{link}", self.prefix)
    }

    /// The namespace of a node: `PREFIX.NODE`.
    pub fn netns(&self, node: &str) -> Result<String, LabError> {
        let i = self.node_idx(node)?;
        Ok(self.ns_name(&self.topo.nodes[i].name))
    }

    /// Every namespace this lab creates.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .topo
            .nodes
            .iter()
            .map(|n| self.ns_name(&n.name))
            .collect();
        v.extend(self.topo.switches.iter().map(|s| self.ns_name(&s.name)));
        v.extend(
            self.topo
                .links
                .iter()
                .filter(|l| l.impair.is_some())
                .map(|l| self.imp_ns(&l.name)),
        );
        v
    }

    /// The interfaces of a node.
    pub fn interfaces(&self, node: &str) -> Result<Vec<LabInterface>, LabError> {
        let i = self.node_idx(node)?;
        let n = &self.topo.nodes[i];
        Ok(n.ifaces
            .iter()
            .map(|f| LabInterface {
                node: n.name.clone(),
                ifname: f.ifname.clone(),
                mac: f.mac.to_string(),
                ipv4: Some(f.ipv4),
                link: self.topo.links[f.link].name.clone(),
                segment: self.topo.segments[f.segment].name.clone(),
                peer: f.peer.clone(),
                queues: f.queues,
                mtu: f.mtu,
                impaired: self.topo.links[f.link].impair.is_some(),
            })
            .collect())
    }

    /// `ip netns exec NS program`: add arguments, then spawn/output/status it.
    pub fn command(&self, node: &str, program: &str) -> Result<Command, LabError> {
        let ns = self.netns(node)?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns, program]);
        Ok(c)
    }

    /// Moves the calling **thread** into `node`'s network namespace, so
    /// sockets it opens from now on live there. Tests use this to run two
    /// ends of a link on two threads of one process. The thread stays there;
    /// use a dedicated thread.
    pub fn enter(&self, node: &str) -> Result<(), LabError> {
        let ns = self.netns(node)?;
        let path = PathBuf::from("/run/netns").join(&ns);
        let file = std::fs::File::open(&path).map_err(|source| LabError::Io {
            context: format!("open {}", path.display()),
            source,
        })?;
        // SAFETY: setns on a valid namespace file descriptor we own affects
        // only the calling thread's network namespace; no memory is shared
        // with the kernel.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(LabError::Io {
                context: format!("setns into {ns}"),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Runs `f` on a new thread inside `node`'s network namespace
    /// ([`Lab::enter`]); panics in that thread if the namespace cannot be
    /// entered.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        node: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let lab = self.clone();
        let node = node.to_string();
        std::thread::spawn(move || {
            lab.enter(&node)
                .unwrap_or_else(|e| panic!("enter node {node}: {e}"));
            f()
        })
    }

    /// Whether every node namespace exists.
    pub fn is_up(&self) -> bool {
        self.topo
            .nodes
            .iter()
            .all(|n| sys::netns_exists(&self.ns_name(&n.name)))
    }

    /// Namespaces that belong to this lab by name (`PREFIX.*`), whether or not
    /// the current file still describes them.
    fn owned_netns(&self) -> Vec<String> {
        let p = format!("{}.", self.prefix);
        sys::list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect()
    }

    fn bridge_files(&self, link: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        let d = self.state_dir();
        (
            d.join(format!("impair-{link}.spec.json")),
            d.join(format!("impair-{link}.pid")),
            d.join(format!("impair-{link}.counters.json")),
            d.join(format!("impair-{link}.log")),
        )
    }

    /// Creates the lab. Refuses when any of its namespaces or its state
    /// directory exists. On failure, removes what it created and returns the
    /// first error (which names the failing command and its stderr).
    pub fn up(&self) -> Result<(), LabError> {
        self.up_observed(&mut |_: UpStep<'_>| {})
    }

    /// [`Lab::up`], telling `step` as each part is made (a namespace, a
    /// switch, a link, a node's addresses and routes, an impairment bridge),
    /// with how many parts there are: what a progress bar shows.
    pub fn up_observed(&self, step: &mut dyn FnMut(UpStep<'_>)) -> Result<(), LabError> {
        if !sys::is_root() {
            return Err(LabError::Other(
                "bcl-lab up needs root (network namespaces, veth, AF_PACKET)".into(),
            ));
        }
        let present = self.owned_netns();
        if !present.is_empty() {
            return Err(LabError::AlreadyUp {
                prefix: self.prefix.clone(),
                what: format!("namespaces {}", present.join(", ")),
            });
        }
        if self.state_dir().join("lab.json").exists() {
            return Err(LabError::AlreadyUp {
                prefix: self.prefix.clone(),
                what: format!("state in {}", self.state_dir().display()),
            });
        }
        // Find the bridge binary before creating anything.
        let bin = if self.impaired_links().is_empty() {
            None
        } else {
            Some(self.bridge_binary()?)
        };
        let r = self.up_inner(bin.as_deref(), step);
        if r.is_err() {
            let _ = self.down();
        }
        r
    }

    fn up_inner(
        &self,
        bin: Option<&Path>,
        step: &mut dyn FnMut(UpStep<'_>),
    ) -> Result<(), LabError> {
        let dir = self.state_dir();
        std::fs::create_dir_all(&dir)
            .map_err(io_err(format!("cannot create {}", dir.display())))?;
        let record = serde_json::json!({
            "prefix": self.prefix,
            "file": self.topo.file.display().to_string(),
            "namespaces": self.namespaces(),
        });
        std::fs::write(dir.join("lab.json"), record.to_string()).map_err(io_err(format!(
            "cannot write {}",
            dir.join("lab.json").display()
        )))?;

        // Namespaces. IPv6 is off so that no router solicitation or MLD
        // chatter appears on the lab's links; routers forward IPv4.
        let t = &self.topo;
        let mut all: Vec<(String, bool, bool)> = t
            .nodes
            .iter()
            .map(|n| (self.ns_name(&n.name), n.router, n.multihomed()))
            .collect();
        all.extend(
            t.switches
                .iter()
                .map(|s| (self.ns_name(&s.name), false, false)),
        );
        all.extend(
            t.links
                .iter()
                .filter(|l| l.impair.is_some())
                .map(|l| (self.imp_ns(&l.name), false, false)),
        );
        let total = all.len()
            + t.switches.len()
            + t.links.len()
            + t.switches.iter().filter(|s| s.shape.is_some()).count()
            + t.nodes.len()
            + t.links.iter().filter(|l| l.impair.is_some()).count();
        let mut done = 0;
        let mut made = |what: &str| {
            done += 1;
            step(UpStep { done, total, what });
        };
        for (ns, router, multihomed) in &all {
            sys::ip(&["netns", "add", ns])?;
            let mut sysctl = vec![
                "netns".to_string(),
                "exec".into(),
                ns.clone(),
                "sysctl".into(),
                "-q".into(),
                "-w".into(),
                "net.ipv6.conf.all.disable_ipv6=1".into(),
                "net.ipv6.conf.default.disable_ipv6=1".into(),
            ];
            if *router {
                sysctl.push("net.ipv4.ip_forward=1".into());
            }
            if *multihomed {
                // Several ports on one segment: each answers ARP only for
                // its own address and announces that one (else every port
                // answers for every address and frames for one port land
                // on another), and no reverse-path filter drops what
                // arrives on a port that is not the route back.
                sysctl.extend([
                    "net.ipv4.conf.all.arp_ignore=1".into(),
                    "net.ipv4.conf.all.arp_announce=2".into(),
                    "net.ipv4.conf.all.rp_filter=0".into(),
                    "net.ipv4.conf.default.rp_filter=0".into(),
                ]);
            }
            sys::ip(&sysctl)?;
            sys::ip(&["-n", ns, "link", "set", "lo", "up"])?;
            made(&format!("namespace {ns}"));
        }
        for s in &t.switches {
            let ns = self.ns_name(&s.name);
            sys::ip(&[
                "-n",
                &ns,
                "link",
                "add",
                SWITCH_BRIDGE,
                "type",
                "bridge",
                "stp_state",
                "0",
                "forward_delay",
                "0",
            ])?;
            made(&format!("switch {}", s.name));
        }
        // Links: veth pairs created directly inside their namespaces.
        for l in &t.links {
            let side = |e: End| -> (String, String, Option<Mac>, bool) {
                match e {
                    End::Node { node, iface } => {
                        let n = &t.nodes[node];
                        (
                            self.ns_name(&n.name),
                            n.ifaces[iface].ifname.clone(),
                            Some(n.ifaces[iface].mac),
                            false,
                        )
                    }
                    End::Switch { switch, port } => (
                        self.ns_name(&t.switches[switch].name),
                        format!("p{port}"),
                        None,
                        true,
                    ),
                }
            };
            let a = side(l.ends[0]);
            let b = side(l.ends[1]);
            let mut pairs = Vec::new();
            if l.impair.is_some() {
                let mid = self.imp_ns(&l.name);
                pairs.push((a, (mid.clone(), "p0".to_string(), None, false)));
                pairs.push(((mid, "p1".to_string(), None, false), b));
            } else {
                pairs.push((a, b));
            }
            for (x, y) in &pairs {
                let q = l.queues.to_string();
                let mtu = l.mtu.to_string();
                let mut args: Vec<String> = vec!["link".into(), "add".into()];
                for (k, s) in [x, y].iter().enumerate() {
                    if k == 1 {
                        args.extend(["type".into(), "veth".into(), "peer".into()]);
                    }
                    args.extend(["name".into(), s.1.clone(), "netns".into(), s.0.clone()]);
                    // 0: the kernel's default queue counts.
                    if l.queues > 0 {
                        args.extend([
                            "numtxqueues".into(),
                            q.clone(),
                            "numrxqueues".into(),
                            q.clone(),
                        ]);
                    }
                    args.extend(["mtu".into(), mtu.clone()]);
                    if let Some(m) = s.2 {
                        args.extend(["address".into(), m.to_string()]);
                    }
                }
                sys::ip(&args)?;
                for s in [x, y] {
                    if s.3 {
                        sys::ip(&["-n", &s.0, "link", "set", &s.1, "master", SWITCH_BRIDGE])?;
                    }
                    sys::ip(&["-n", &s.0, "link", "set", &s.1, "up"])?;
                }
            }
            made(&format!("link {}", l.name));
        }
        for s in &t.switches {
            sys::ip(&[
                "-n",
                &self.ns_name(&s.name),
                "link",
                "set",
                SWITCH_BRIDGE,
                "up",
            ])?;
        }
        // Shaped switches: a token bucket on the egress of every port, the
        // bridge's way out towards each member. (A qdisc on a node's own
        // veth would not do: AF_PACKET's qdisc bypass and XDP skip it.)
        for s in &t.switches {
            let Some(shape) = &s.shape else { continue };
            let ns = self.ns_name(&s.name);
            for k in 0..s.ports.len() {
                let port = format!("p{k}");
                let mut args: Vec<String> = ["-n", &ns, "qdisc", "replace", "dev", &port, "root"]
                    .map(String::from)
                    .to_vec();
                args.extend(shape.tc_args());
                sys::run(Command::new("tc").args(&args))?;
            }
            made(&format!("shaping of switch {}", s.name));
        }
        for n in &t.nodes {
            let ns = self.ns_name(&n.name);
            for f in &n.ifaces {
                sys::ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &f.ipv4.to_string(),
                    "dev",
                    &f.ifname,
                ])?;
            }
            for r in &n.routes {
                sys::ip(&[
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &r.dest,
                    "via",
                    &r.via.to_string(),
                    "dev",
                    &r.dev,
                ])?;
            }
            made(&format!("addresses of {}", n.name));
        }
        // Impairment bridges.
        for l in t.links.iter().filter(|l| l.impair.is_some()) {
            self.start_bridge(l, bin.expect("resolved when links are impaired"))?;
            made(&format!("impairment bridge of {}", l.name));
        }
        Ok(())
    }

    fn start_bridge(&self, l: &config::Link, bin: &Path) -> Result<(), LabError> {
        let imp = l.impair.as_ref().expect("impaired link");
        let (spec_f, pid_f, counters_f, log_f) = self.bridge_files(&l.name);
        let spec = BridgeSpec {
            prefix: self.prefix.clone(),
            link: l.name.clone(),
            ifnames: ["p0".into(), "p1".into()],
            ends: [
                self.topo.end_name(l.ends[0]).to_string(),
                self.topo.end_name(l.ends[1]).to_string(),
            ],
            seed: imp.seed,
            forward: imp.forward.clone(),
            reverse: imp.reverse.clone(),
            pid_file: pid_f.clone(),
            counters_file: counters_f,
        };
        let json = serde_json::to_vec_pretty(&spec).expect("serializable");
        std::fs::write(&spec_f, json)
            .map_err(io_err(format!("cannot write {}", spec_f.display())))?;
        let log =
            File::create(&log_f).map_err(io_err(format!("cannot create {}", log_f.display())))?;
        let log2 = log.try_clone().map_err(io_err("dup log"))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.imp_ns(&l.name)])
            .arg(bin)
            .args([
                "impair",
                "--prefix",
                &self.prefix,
                "--link",
                &l.name,
                "--spec",
            ])
            .arg(&spec_f)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(io_err(format!("cannot run `{}`", sys::render(&cmd))))?;
        let t = Instant::now();
        loop {
            if pid_f.exists() {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_f).unwrap_or_default();
                return Err(LabError::Impair {
                    link: l.name.clone(),
                    msg: format!("exited at start ({st}): {}", log.trim()),
                });
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err(LabError::Impair {
                    link: l.name.clone(),
                    msg: format!("not ready after 10 s; see {}", log_f.display()),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Reap it when it exits, so it never lingers as our zombie.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Ok(())
    }

    fn bridge_binary(&self) -> Result<PathBuf, LabError> {
        if let Some(b) = &self.bin {
            return Ok(b.clone());
        }
        if let Some(b) = std::env::var_os(BIN_ENV) {
            return Ok(PathBuf::from(b));
        }
        if let Ok(exe) = std::env::current_exe() {
            if exe.file_name().is_some_and(|n| n == "bcl-lab") {
                return Ok(exe);
            }
            // Test binaries live in target/PROFILE/deps, bcl-lab in target/PROFILE.
            for dir in exe.ancestors().skip(1).take(2) {
                let c = dir.join("bcl-lab");
                if c.is_file() {
                    return Ok(c);
                }
            }
        }
        sys::which("bcl-lab").ok_or_else(|| {
            LabError::Other(format!(
                "cannot find the bcl-lab binary to run impairment bridges: build it (cargo build -p bcl-lab) or set {BIN_ENV}"
            ))
        })
    }

    /// Removes the lab: stops its impairment bridges (pid files and a /proc
    /// scan), ends every process left in its namespaces, deletes every
    /// namespace named `PREFIX.*` (which deletes their interfaces) and the
    /// state directory. Succeeds quietly when nothing is there.
    pub fn down(&self) -> Result<(), LabError> {
        let dir = self.state_dir();
        let mut pids: Vec<u32> = Vec::new();
        if let Ok(d) = std::fs::read_dir(&dir) {
            for e in d.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("impair-") && name.ends_with(".pid") {
                    if let Some(pid) = std::fs::read_to_string(e.path())
                        .ok()
                        .and_then(|s| s.trim().parse::<u32>().ok())
                    {
                        // Only if the pid still is one of our bridges (pids get reused).
                        if sys::cmdline(pid).is_some_and(|a| sys::is_bridge_of(&a, &self.prefix)) {
                            pids.push(pid);
                        }
                    }
                }
            }
        }
        pids.extend(sys::scan_bridges(&self.prefix));
        pids.sort_unstable();
        pids.dedup();
        let stuck = sys::stop_processes(&pids, Duration::from_secs(3));
        let namespaces = self.owned_netns();
        let mut others: Vec<u32> = namespaces
            .iter()
            .flat_map(|ns| sys::netns_pids(ns))
            .collect();
        others.retain(|p| *p != std::process::id());
        others.sort_unstable();
        others.dedup();
        let stuck2 = sys::stop_processes(&others, Duration::from_secs(2));
        let mut errors = Vec::new();
        for ns in &namespaces {
            if let Err(e) = sys::ip(&["netns", "del", ns]) {
                if sys::netns_exists(ns) {
                    errors.push(e.to_string());
                }
            }
        }
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                errors.push(format!("{}: {e}", dir.display()));
            }
        }
        let left = self.owned_netns();
        if !left.is_empty() || !stuck.is_empty() || !stuck2.is_empty() || !errors.is_empty() {
            let mut what = Vec::new();
            if !left.is_empty() {
                what.push(format!("namespaces {}", left.join(", ")));
            }
            if !stuck.is_empty() || !stuck2.is_empty() {
                what.push(format!("processes {:?}", [stuck, stuck2].concat()));
            }
            what.extend(errors);
            return Err(LabError::Leftovers {
                prefix: self.prefix.clone(),
                what: what.join("; "),
            });
        }
        Ok(())
    }

    /// Counters of every impaired link, two entries (forward, reverse) per
    /// link, as last written by the bridges (every 100 ms while frames flow,
    /// and on exit).
    pub fn impairment_counters(&self) -> Result<Vec<ImpairCounters>, LabError> {
        if !self.is_up() {
            return Err(LabError::NotUp {
                prefix: self.prefix.clone(),
            });
        }
        let mut v = Vec::new();
        for l in self.topo.links.iter().filter(|l| l.impair.is_some()) {
            let (_, _, cf, _) = self.bridge_files(&l.name);
            let text = std::fs::read_to_string(&cf).map_err(|e| LabError::Impair {
                link: l.name.clone(),
                msg: format!(
                    "no counters in {} ({e}); is the bridge running?",
                    cf.display()
                ),
            })?;
            let f: CountersFile = serde_json::from_str(&text).map_err(|e| LabError::Impair {
                link: l.name.clone(),
                msg: format!("bad counters file {}: {e}", cf.display()),
            })?;
            v.extend(f.directions);
        }
        Ok(v)
    }

    /// Pid of the running bridge of `link`, if any.
    pub fn bridge_pid(&self, link: &str) -> Option<u32> {
        let (_, pf, _, _) = self.bridge_files(link);
        let pid = std::fs::read_to_string(pf).ok()?.trim().parse().ok()?;
        (sys::alive(pid) && sys::cmdline(pid).is_some_and(|a| sys::is_bridge_of(&a, &self.prefix)))
            .then_some(pid)
    }

    /// Everything `bcl-lab show` prints.
    pub fn report(&self) -> LabReport {
        let t = &self.topo;
        let up = self.is_up();
        LabReport {
            prefix: self.prefix.clone(),
            file: t.file.display().to_string(),
            up,
            state_dir: self.state_dir().display().to_string(),
            nodes: t
                .nodes
                .iter()
                .map(|n| NodeReport {
                    name: n.name.clone(),
                    netns: self.ns_name(&n.name),
                    router: n.router,
                    interfaces: self.interfaces(&n.name).unwrap_or_default(),
                    routes: n.routes.clone(),
                })
                .collect(),
            switches: t
                .switches
                .iter()
                .map(|s| SwitchReport {
                    name: s.name.clone(),
                    netns: self.ns_name(&s.name),
                    bridge: SWITCH_BRIDGE.into(),
                    subnet: t.segments[s.segment].subnet.to_string(),
                    ports: s
                        .ports
                        .iter()
                        .enumerate()
                        .map(|(k, li)| {
                            let l = &t.links[*li];
                            let other = l
                                .ends
                                .iter()
                                .find(|e| matches!(e, End::Node { .. }))
                                .copied();
                            (
                                other.map(|e| t.end_name(e).to_string()).unwrap_or_default(),
                                format!("p{k}"),
                            )
                        })
                        .collect(),
                    shape: s.shape,
                })
                .collect(),
            links: t
                .links
                .iter()
                .map(|l| LinkReport {
                    name: l.name.clone(),
                    endpoints: [
                        t.end_name(l.ends[0]).to_string(),
                        t.end_name(l.ends[1]).to_string(),
                    ],
                    subnet: t.segments[l.segment].subnet.to_string(),
                    queues: l.queues,
                    mtu: l.mtu,
                    impair: l.impair.as_ref().map(|i| ImpairReport {
                        netns: self.imp_ns(&l.name),
                        seed: i.seed,
                        forward: i.forward.clone(),
                        reverse: i.reverse.clone(),
                        pid: self.bridge_pid(&l.name),
                    }),
                })
                .collect(),
            counters: if up {
                self.impairment_counters().unwrap_or_default()
            } else {
                Vec::new()
            },
        }
    }
}

/// `bl-` + the file stem with anything but `[A-Za-z0-9_-]` replaced by '-'.
fn default_prefix(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "lab".into());
    let mut p: String = format!("bl-{stem}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    p.truncate(config::PREFIX_MAX);
    p
}

/// One part of a lab made by [`Lab::up_observed`].
#[derive(Clone, Copy, Debug)]
pub struct UpStep<'a> {
    /// Parts made so far, this one included.
    pub done: usize,
    /// Parts in all.
    pub total: usize,
    /// What was made, e.g. `namespace bl-pair.a` or `link ab`.
    pub what: &'a str,
}

/// RAII guard for tests: [`LabGuard::up`] brings a lab up, dropping the guard
/// (also while unwinding from a panic) takes it down.
#[derive(Debug)]
pub struct LabGuard {
    lab: Lab,
}

impl LabGuard {
    /// Loads `path` and brings it up (prefix rules of [`Lab::load`]).
    pub fn up(path: &Path) -> Result<LabGuard, LabError> {
        LabGuard::new(Lab::load(path)?)
    }

    /// Brings `lab` up and guards it.
    pub fn new(lab: Lab) -> Result<LabGuard, LabError> {
        lab.up()?;
        Ok(LabGuard { lab })
    }
}

impl Deref for LabGuard {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Err(e) = self.lab.down() {
            eprintln!(
                "bcl-lab: cleanup of lab \"{}\" failed: {e}",
                self.lab.prefix()
            );
        }
    }
}

/// Why privileged tests cannot run here, or `None` if they can (root, and
/// `ip netns` works).
pub fn privilege_problem() -> Option<String> {
    if !sys::is_root() {
        return Some("not running as root".into());
    }
    match sys::ip(&["netns", "list"]) {
        Ok(_) => None,
        Err(e) => Some(format!("`ip netns` does not work: {e}")),
    }
}

/// The `bcl-lab` binary for a test of this workspace (it runs impairment
/// bridges): `$BCL_LAB_BIN`, else `bcl-lab` in the target directory of the
/// running test executable (`target/<profile>/deps/<test>` →
/// `target/<profile>/bcl-lab`), built there with cargo (same profile and
/// target directory) if missing. Panics with what to do when it cannot be
/// built.
pub fn test_binary() -> PathBuf {
    if let Some(p) = std::env::var_os(BIN_ENV) {
        return p.into();
    }
    let exe = std::env::current_exe().expect("the running test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable in target/<profile>/deps");
    let bin = profile_dir.join("bcl-lab");
    if bin.exists() {
        return bin;
    }
    let profile = match profile_dir.file_name().and_then(|s| s.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(p) => p.to_string(),
    };
    let target_dir = profile_dir.parent().expect("the target directory");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "-p", "bcl-lab", "--bin", "bcl-lab", "--profile"])
        .arg(&profile)
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo to build bcl-lab");
    assert!(
        status.success() && bin.exists(),
        "could not build bcl-lab at {}; build it with `cargo build -p bcl-lab` or set {BIN_ENV}",
        bin.display()
    );
    bin
}

/// For tests that need root: returns true when they can run. When they
/// cannot, panics with a clear message, unless `BCL_SKIP_PRIVILEGED=1`, in
/// which case it prints a skip line and returns false.
pub fn require_privileges(test: &str) -> bool {
    match privilege_problem() {
        None => true,
        Some(why) if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") => {
            println!("SKIP {test}: {why} ({SKIP_ENV}=1)");
            false
        }
        Some(why) => panic!(
            "{test} needs root and working network namespaces: {why}. Run as root, or set {SKIP_ENV}=1 to skip privileged tests"
        ),
    }
}

#[doc(hidden)]
pub mod internal {
    //! Entry points of the `bcl-lab` binary's hidden subcommands.

    /// Runs an impairment bridge from its spec file (`bcl-lab impair`).
    pub fn run_bridge(spec: &std::path::Path) -> Result<(), String> {
        crate::impair::bridge::run(spec)
    }

    /// Sets SO_RCVBUF(FORCE) of a socket.
    pub fn set_rcvbuf(fd: std::os::fd::RawFd, bytes: i32) {
        crate::impair::sock::set_rcvbuf(fd, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_prefix_from_file_name() {
        assert_eq!(
            default_prefix(Path::new("configs/lab/lossy-pair.toml")),
            "bl-lossy-pair"
        );
        assert_eq!(default_prefix(Path::new("x y.toml")), "bl-x-y");
    }

    #[test]
    fn bridge_process_matching() {
        let argv: Vec<String> = ["/x/bcl-lab", "impair", "--prefix", "bl-a", "--link", "l"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(sys::is_bridge_of(&argv, "bl-a"));
        assert!(!sys::is_bridge_of(&argv, "bl-a-2"));
        assert!(!sys::is_bridge_of(&argv, "bl"));
    }
}
