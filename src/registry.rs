//! The method registry: every method kind BCL can use, in one table.
//!
//! Each entry is a driver crate's [`MethodKind`] (name, scope, what it is
//! opened on, probe, open, address grammar). Everything that names,
//! chooses, plans, opens or explains methods reads it: pins and
//! preferences ([`crate::cluster::select`]), the resource database
//! ([`crate::cluster::resources`]), the per-process plan and opening
//! ([`crate::cluster::join`]), `bcl-info` ([`Registry::probe`]), `bcl-run`
//! and the tools' `--method`. Adding a method is a driver crate plus one
//! line in [`Registry::builtin`]; a program (or a test) can also extend
//! its own registry with [`Registry::with`].
//!
//! The order of the table is the default preference
//! ([`Registry::default_preference`]): node-local first, then user-space
//! NICs, then kernel raw Ethernet, then routed UDP.

use bcl_core::method::{Attachment, MethodKind, ProbeResult, Scope};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The method kinds a process knows (see the module documentation).
/// Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    kinds: Arc<[Arc<dyn MethodKind>]>,
}

/// A method name the registry does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown method {name:?} (known: {known})")]
pub struct UnknownMethod {
    /// The name asked for.
    pub name: String,
    /// The names the registry knows, comma-separated.
    pub known: String,
}

/// One row of [`Registry::probe`]: whether a method can run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRow {
    /// The method.
    pub method: &'static str,
    /// One line about it.
    pub summary: &'static str,
    /// How far it reaches.
    pub scope: Scope,
    /// Whether it can be opened here (on at least one target).
    pub usable: bool,
    /// Per target (interface, device) or for the host: usable or why not.
    pub detail: String,
}

impl Registry {
    /// BCL's methods, in the default order of preference.
    pub fn builtin() -> &'static Registry {
        static BUILTIN: OnceLock<Registry> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            Registry::from_kinds(vec![
                Arc::new(bcl_shm::ShmKind),
                Arc::new(bcl_shm::engine::EngineKind),
                Arc::new(bcl_vfio::VfioKind),
                Arc::new(bcl_afxdp::AfXdpKind),
                Arc::new(bcl_packet::PacketKind),
                Arc::new(bcl_udp::UdpKind),
                Arc::new(bcl_sim::SimKind::default()),
            ])
        })
    }

    /// A registry of exactly `kinds`, in that order.
    pub fn from_kinds(kinds: Vec<Arc<dyn MethodKind>>) -> Registry {
        Registry {
            kinds: kinds.into(),
        }
    }

    /// This registry with `kind` added: in place of the entry of the same
    /// name, or else last.
    pub fn with(&self, kind: impl MethodKind + 'static) -> Registry {
        let kind: Arc<dyn MethodKind> = Arc::new(kind);
        let mut kinds: Vec<Arc<dyn MethodKind>> = self.kinds.to_vec();
        match kinds.iter().position(|k| k.name() == kind.name()) {
            Some(i) => kinds[i] = kind,
            None => kinds.push(kind),
        }
        Registry::from_kinds(kinds)
    }

    /// The kinds, in order of preference.
    pub fn kinds(&self) -> impl Iterator<Item = &dyn MethodKind> {
        self.kinds.iter().map(|k| &**k)
    }

    /// The kind named `name`, if known.
    pub fn get(&self, name: &str) -> Option<&dyn MethodKind> {
        self.kinds().find(|k| k.name() == name)
    }

    /// The kind named `name`; the error lists the known names.
    pub fn lookup(&self, name: &str) -> Result<&dyn MethodKind, UnknownMethod> {
        self.get(name).ok_or_else(|| UnknownMethod {
            name: name.to_string(),
            known: self.names().join(", "),
        })
    }

    /// Every name, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds().map(|k| k.name()).collect()
    }

    /// The reach of `method`; `None` for a name the registry does not know.
    pub fn scope(&self, method: &str) -> Option<Scope> {
        self.get(method).map(|k| k.scope())
    }

    /// The order methods are tried in when a configuration gives none:
    /// every kind a job can open, in the table's order.
    pub fn default_preference(&self) -> Vec<String> {
        self.kinds()
            .filter(|k| k.attachment() != Attachment::InProcess)
            .map(|k| k.name().to_string())
            .collect()
    }

    /// The kinds that can be allowed on a fabric (every kind a job can open
    /// that is not node-local).
    pub fn network_methods(&self) -> Vec<String> {
        self.kinds()
            .filter(|k| k.attachment() != Attachment::InProcess && k.scope() != Scope::Node)
            .map(|k| k.name().to_string())
            .collect()
    }

    /// Whether a descriptor of method `a` can be opened by method `b`: the
    /// same method, or two methods of one family (same frames, same
    /// address grammar), as the tools' `--connect` and the Ethernet test
    /// matrix use them with one EtherType. Selection within a job pairs a
    /// method with itself only: there `packet` uses its own EtherType
    /// ([`bcl_packet::JOB_ETHERTYPE`]) to share a NIC with `afxdp`.
    pub fn reaches(&self, a: &str, b: &str) -> bool {
        if a == b {
            return true;
        }
        match (self.get(a), self.get(b)) {
            (Some(x), Some(y)) => x.family().is_some() && x.family() == y.family(),
            _ => false,
        }
    }

    /// Whether each method can run here: `interfaces` are the host's
    /// candidate network interfaces (up, not loopback, bridges or
    /// container plumbing).
    pub fn probe(&self, interfaces: &[String]) -> Vec<ProbeRow> {
        self.kinds()
            .map(|k| {
                let results = k.probe(interfaces);
                ProbeRow {
                    method: k.name(),
                    summary: k.summary(),
                    scope: k.scope(),
                    usable: results.iter().any(|r| r.availability.is_usable()),
                    detail: describe(k, &results),
                }
            })
            .collect()
    }
}

/// The text of a probe: per target "usable" or why not.
fn describe(kind: &dyn MethodKind, results: &[ProbeResult]) -> String {
    if results.is_empty() {
        return match kind.attachment() {
            Attachment::Interface => {
                "no interface that is up and not loopback, a bridge or container plumbing".into()
            }
            _ => "nothing to probe".into(),
        };
    }
    let parts: Vec<String> = results
        .iter()
        .map(|r| {
            let what = match &r.availability {
                bcl_core::Availability::Usable => "usable".to_string(),
                bcl_core::Availability::NotUsable(why) => why.clone(),
            };
            match &r.target {
                Some(t) => format!("{t}: {what}"),
                None => what,
            }
        })
        .collect();
    // A host-wide "usable" says nothing more.
    if parts == ["usable"] {
        return match kind.attachment() {
            Attachment::InProcess => "in-process only (tests)".into(),
            _ => String::new(),
        };
    }
    parts.join("; ")
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// Two registries are equal when they list the same names in the same
/// order (kinds have no other identity).
impl PartialEq for Registry {
    fn eq(&self, other: &Self) -> bool {
        self.names() == other.names()
    }
}

impl Eq for Registry {}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin().clone()
    }
}
