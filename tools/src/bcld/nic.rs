//! The daemon's NICs: each one opened with the best method it allows, and
//! what the daemon keeps per NIC (its links, the containers being filled
//! for remote daemons, which links lead to a daemon).
//!
//! A link number means something only on its own NIC: every NIC method
//! numbers its links from 0. A client goes through one NIC (its hello
//! says which), so the links it opens and the frames it receives are that
//! NIC's.

use super::bundler::Bundler;
use super::daemon::{Candidate, Config, StartError};
use bcl::core::method::{Descriptor, Method, OpenSpec};
use bcl::core::{JobKey, ProcessAddr};
use bcl::registry::Registry;
use bcl::shm::engine::{MAX_FRAME, MAX_NICS};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// One NIC the daemon owns.
pub struct Nic {
    /// The name it was opened by (interface or PCI address), which a
    /// client's hello may give; `None`: the only NIC, opened unnamed.
    pub name: Option<String>,
    /// The method that drives it.
    pub method: Box<dyn Method>,
    /// The method's address on it (peers reach the daemon's clients here).
    pub address: String,
    /// Largest BCL frame it carries.
    pub mtu: usize,
    /// Links below this number exist (the method numbers them from 0).
    pub links: u32,
    /// Containers being filled and frames ready for this NIC.
    pub bundler: Bundler,
    /// Links a daemon receives on (it sent us a container).
    pub daemon_links: HashSet<u32>,
    /// Links a client said lead to a daemon that has not answered yet:
    /// when they were last probed and how often.
    pub probing: HashMap<u32, (Instant, u32)>,
    /// Links whose probe asked for an answer, to answer in the next round.
    pub answers_due: Vec<u32>,
}

impl Nic {
    fn new(name: Option<String>, method: Box<dyn Method>, node: u32) -> Nic {
        let address = method.descriptor().address;
        let mtu = method.caps().mtu.min(MAX_FRAME);
        Nic {
            name,
            method,
            address,
            mtu,
            links: 0,
            bundler: Bundler::new(node, mtu),
            daemon_links: HashSet::new(),
            probing: HashMap::new(),
            answers_due: Vec::new(),
        }
    }

    /// The NIC's descriptor.
    pub fn descriptor(&self) -> Descriptor {
        Descriptor::new(self.method.name(), self.address.clone())
    }

    /// The NIC as status and the welcome show it: `NAME=METHOD:ADDRESS`
    /// (just the descriptor for an unnamed NIC).
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("{n}={}", self.descriptor()),
            None => self.descriptor().to_string(),
        }
    }

    /// Whether `d` is this NIC's own descriptor.
    pub fn is(&self, d: &Descriptor) -> bool {
        d.method == self.method.name() && d.address == self.address
    }
}

/// Opens every NIC of `cfg.candidates`: the candidates of one NIC are
/// tried in order and the first that opens owns it. Returns the NICs in
/// the order they were first named, with a note for each NIC that opened
/// with none of its methods; fails only if no NIC opened.
pub fn open_all(cfg: &Config) -> Result<(Vec<Nic>, Vec<String>), StartError> {
    let registry = Registry::builtin();
    let mut names: Vec<&Option<String>> = Vec::new();
    for c in &cfg.candidates {
        if !names.contains(&&c.nic) {
            names.push(&c.nic);
        }
    }
    if names.len() > MAX_NICS {
        return Err(StartError::Config(format!(
            "{} NICs: a bcld owns at most {MAX_NICS}",
            names.len()
        )));
    }
    let mut nics = Vec::new();
    let mut failures = Vec::new();
    for name in names {
        let mut tried = Vec::new();
        for c in cfg.candidates.iter().filter(|c| &c.nic == name) {
            match open_one(registry, cfg, c)? {
                Ok(m) => {
                    nics.push(Nic::new(name.clone(), m, cfg.node));
                    tried.clear();
                    break;
                }
                Err(e) => tried.push(format!("{c}: {e}")),
            }
        }
        failures.extend(tried);
    }
    if nics.is_empty() {
        if failures.is_empty() {
            failures.push("no candidate NIC (does the node have an Ethernet NIC?)".into());
        }
        return Err(StartError::Nic(failures.join("; ")));
    }
    let notes = failures
        .into_iter()
        .map(|f| format!("not owned: {f}"))
        .collect();
    Ok((nics, notes))
}

/// Opens candidate `c`: `Err` for a setting that cannot work anywhere,
/// `Ok(Err)` for a NIC that did not open with it.
fn open_one(
    registry: &Registry,
    cfg: &Config,
    c: &Candidate,
) -> Result<Result<Box<dyn Method>, String>, StartError> {
    let kind = registry.get(&c.method).ok_or_else(|| {
        StartError::Config(format!(
            "method {}: not a method (known: {})",
            c.method,
            registry.names().join(", ")
        ))
    })?;
    if kind.family() != Some("ethernet") || kind.name() == bcl::shm::engine::METHOD_NAME {
        return Err(StartError::Config(format!(
            "method {}: bcld drives Ethernet NICs (packet, afxdp, vfio)",
            c.method
        )));
    }
    let mut spec = OpenSpec::new(JobKey(0), ProcessAddr::new(cfg.node, 0));
    spec.nic = c.nic.clone();
    spec.ethertype = cfg.ethertype;
    spec.busy_poll = cfg.busy_poll;
    Ok(kind.open(&spec).map_err(|e| e.to_string()))
}
