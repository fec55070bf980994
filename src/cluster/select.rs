//! Per-peer method selection: the policy, pins, and the record of each
//! link's choice.
//!
//! On first send to a peer the endpoint compares its own
//! [`DescriptorTable`] with the peer's and walks the methods in the
//! policy's order:
//!
//! | method's reach ([`Scope`], from the [registry](crate::registry)) | usable for a peer when |
//! |---|---|
//! | node (`shm`) | both tables name the same node |
//! | fabric (`vfio`, `afxdp`, `packet`, `sim`) | both have an entry on the same fabric (or neither side knows its fabrics) |
//! | routed (`udp`) | both have an entry |
//!
//! The default order is the registry's (`shm, vfio, afxdp, packet, udp`);
//! a configuration's `preference` changes it and a pin
//! (`BCL_METHODS=afxdp,udp`, or `pin` in the configuration) restricts
//! *and* orders it. Every name must be in the registry. The first usable
//! method whose link opens wins; its reason (and why each preferred method
//! was passed over) is kept per link, see [`LinkRecord`].

use super::descriptor::{DescriptorEntry, DescriptorTable};
use crate::registry::Registry;
pub use bcl_core::method::Scope;

/// A restriction and ordering of methods by the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The methods, in order.
    pub methods: Vec<String>,
    /// Where it came from, for messages (`BCL_METHODS=udp`, `pin in FILE`).
    pub source: String,
}

/// A pin that cannot be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{source_name}: {message}")]
pub struct PinError {
    /// Where the pin came from.
    pub source_name: String,
    /// What is wrong.
    pub message: String,
}

impl Pin {
    /// Parses a comma-separated list such as `afxdp,udp` of methods of
    /// `registry`.
    pub fn parse(text: &str, source: &str, registry: &Registry) -> Result<Pin, PinError> {
        let err = |message: String| PinError {
            source_name: source.to_string(),
            message,
        };
        let mut methods: Vec<String> = Vec::new();
        for m in text.split(',').map(str::trim) {
            if m.is_empty() {
                return Err(err(format!(
                    "{text:?}: empty method name (expected e.g. afxdp,udp)"
                )));
            }
            if let Err(e) = registry.lookup(m) {
                return Err(err(e.to_string()));
            }
            if methods.iter().any(|x| x == m) {
                return Err(err(format!("{m:?} is listed twice")));
            }
            methods.push(m.to_string());
        }
        Ok(Pin {
            methods,
            source: source.to_string(),
        })
    }

    /// `$BCL_METHODS`, if set.
    pub fn from_env(registry: &Registry) -> Result<Option<Pin>, PinError> {
        match std::env::var("BCL_METHODS") {
            Ok(v) => Pin::parse(&v, &format!("BCL_METHODS={v}"), registry).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(PinError {
                source_name: "BCL_METHODS".into(),
                message: e.to_string(),
            }),
        }
    }
}

/// The order methods are tried in, the pin that made it (if any), and the
/// registry that says what each method is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Methods in the order they are tried; others are never used.
    pub order: Vec<String>,
    /// The pin, if the order is the user's.
    pub pin: Option<Pin>,
    /// The method kinds (their scopes decide who reaches whom).
    pub registry: Registry,
    /// Open every NIC of a fabric for the methods that share NICs
    /// (`packet`), and reach each peer through all of them (rails),
    /// striping large messages (`rails = true` in the cluster file, or
    /// `BCL_RAILS=on`).
    pub rails: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(Registry::builtin(), &[], None)
    }
}

impl Policy {
    /// A policy over `registry` from a preference order (empty: the
    /// registry's default order) and an optional pin, which restricts and
    /// orders.
    pub fn new(registry: &Registry, preference: &[String], pin: Option<Pin>) -> Policy {
        let order = match &pin {
            Some(p) => p.methods.clone(),
            None if preference.is_empty() => registry.default_preference(),
            None => preference.to_vec(),
        };
        Policy {
            order,
            pin,
            registry: registry.clone(),
            rails: false,
        }
    }

    /// Whether `method` may be used at all.
    pub fn allows(&self, method: &str) -> bool {
        self.order.iter().any(|m| m == method)
    }
}

/// A method that can reach a peer, with the entries on both sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The method.
    pub method: String,
    /// Our entry (our method instance to use).
    pub local: DescriptorEntry,
    /// The peer's entry (the descriptor to open).
    pub peer: DescriptorEntry,
    /// Why it can reach the peer.
    pub reason: String,
}

/// Every method in `policy`'s order that can reach the process of `peer`
/// from the process of `local`, best first; plus, for each method passed
/// over, why (`"shm: different nodes"`).
pub fn candidates(
    local: &DescriptorTable,
    peer: &DescriptorTable,
    policy: &Policy,
) -> (Vec<Candidate>, Vec<String>) {
    let mut found = Vec::new();
    let mut passed = Vec::new();
    for method in &policy.order {
        let mine: Vec<&DescriptorEntry> = local.entries_of(method).collect();
        let theirs: Vec<&DescriptorEntry> = peer.entries_of(method).collect();
        if mine.is_empty() {
            passed.push(format!("{method}: not open here"));
            continue;
        }
        if theirs.is_empty() {
            passed.push(format!("{method}: the peer does not offer it"));
            continue;
        }
        let pick = |l: &DescriptorEntry, p: &DescriptorEntry, reason: String| Candidate {
            method: method.clone(),
            local: l.clone(),
            peer: p.clone(),
            reason,
        };
        let Some(scope) = policy.registry.scope(method) else {
            passed.push(format!("{method}: not a method this process knows"));
            continue;
        };
        match scope {
            Scope::Node => {
                if local.node == peer.node {
                    found.push(pick(
                        mine[0],
                        theirs[0],
                        format!("same node {}", local.node),
                    ));
                } else {
                    passed.push(format!(
                        "{method}: different nodes ({} here, {} there)",
                        local.node, peer.node
                    ));
                }
            }
            Scope::Fabric => {
                let common = mine.iter().find_map(|l| {
                    let f = l.fabric.as_ref()?;
                    theirs
                        .iter()
                        .find(|p| p.fabric.as_ref() == Some(f))
                        .map(|p| (*l, *p, f.clone()))
                });
                let unknown = mine.iter().all(|e| e.fabric.is_none())
                    && theirs.iter().all(|e| e.fabric.is_none());
                match common {
                    Some((l, p, f)) => found.push(pick(l, p, format!("same fabric {f}"))),
                    None if unknown => found.push(pick(
                        mine[0],
                        theirs[0],
                        "no fabric known on either side".into(),
                    )),
                    None => passed.push(format!(
                        "{method}: no common fabric ({} here, {} there)",
                        fabrics(&mine),
                        fabrics(&theirs)
                    )),
                }
            }
            Scope::Routed => {
                let reason = if local.node == peer.node {
                    "same node, routed by the kernel".to_string()
                } else {
                    format!(
                        "routed (IP) from {} to {}",
                        fabrics(&mine),
                        fabrics(&theirs)
                    )
                };
                found.push(pick(mine[0], theirs[0], reason));
            }
        }
    }
    (found, passed)
}

fn fabrics(entries: &[&DescriptorEntry]) -> String {
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e.fabric.as_deref().unwrap_or("?"))
        .collect();
    names.join("+")
}

/// The full reason for choosing `c`: its own reason, the pin, and why
/// every method tried before it was passed over.
pub fn explain(c: &Candidate, passed_before: &[String], policy: &Policy) -> String {
    let mut s = format!("{}: {}", c.method, c.reason);
    if let Some(p) = &policy.pin {
        s.push_str(&format!(" [pinned by {}]", p.source));
    }
    if !passed_before.is_empty() {
        s.push_str("; passed over: ");
        s.push_str(&passed_before.join("; "));
    }
    s
}

/// What is known about the link to one peer: the method chosen and why, or
/// why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkRecord {
    /// The method the link uses; `None` if the peer could not be reached.
    pub method: Option<String>,
    /// The peer's descriptor the link was opened to.
    pub descriptor: Option<bcl_core::Descriptor>,
    /// Why this method (or why none).
    pub reason: String,
}

/// Chooses a method for the pair `(local, peer)` as an endpoint would:
/// the first candidate, with its explanation; or why none can reach.
/// Used for method matrices of configurations (no link is opened).
pub fn choose(
    local: &DescriptorTable,
    peer: &DescriptorTable,
    policy: &Policy,
) -> Result<(Candidate, String), String> {
    let (found, passed) = candidates(local, peer, policy);
    match found.into_iter().next() {
        Some(c) => {
            let before = passed_before(&passed, policy, &c.method);
            let why = explain(&c, &before, policy);
            Ok((c, why))
        }
        None => Err(no_route(&passed, policy)),
    }
}

/// The entries of `passed` for methods the policy prefers to `method`.
pub fn passed_before(passed: &[String], policy: &Policy, method: &str) -> Vec<String> {
    let idx = policy
        .order
        .iter()
        .position(|m| m == method)
        .unwrap_or(policy.order.len());
    passed
        .iter()
        .filter(|p| {
            policy.order[..idx]
                .iter()
                .any(|m| p.starts_with(&format!("{m}:")))
        })
        .cloned()
        .collect()
}

/// The reason given when no method reaches a peer.
pub fn no_route(passed: &[String], policy: &Policy) -> String {
    let pin = policy
        .pin
        .as_ref()
        .map(|p| format!(" (methods restricted by {})", p.source))
        .unwrap_or_default();
    format!("no method reaches the peer{pin}: {}", passed.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(node: &str, entries: &[(&str, &str, Option<&str>)]) -> DescriptorTable {
        let mut t = DescriptorTable::new(node, node);
        for (m, a, f) in entries {
            t.push(&bcl_core::Descriptor::new(*m, *a), *f);
        }
        t
    }

    fn afxdp_node(node: &str, mac: &str) -> DescriptorTable {
        table(
            node,
            &[
                ("shm", "x", None),
                ("afxdp", mac, Some("A")),
                ("packet", mac, Some("A")),
                ("udp", "10.0.0.1:1", Some("A")),
            ],
        )
    }

    #[test]
    fn the_policy_picks_shm_then_fabric_methods_then_udp() {
        let p = Policy::default();
        let a1 = afxdp_node("n1", "m1");
        let a1b = afxdp_node("n1", "m1b");
        let a2 = afxdp_node("n2", "m2");
        let pk = table(
            "n3",
            &[
                ("packet", "m3", Some("A")),
                ("udp", "10.0.0.3:1", Some("A")),
            ],
        );
        let u = table("n4", &[("udp", "10.0.1.4:1", Some("B"))]);
        let pick = |a: &DescriptorTable, b: &DescriptorTable| choose(a, b, &p).unwrap();
        assert_eq!(pick(&a1, &a1b).0.method, "shm");
        let (c, why) = pick(&a1, &a2);
        assert_eq!(c.method, "afxdp");
        assert_eq!(c.peer.address, "m2");
        assert!(why.contains("same fabric A"), "{why}");
        assert!(why.contains("shm: different nodes"), "{why}");
        assert!(why.contains("vfio: not open here"), "{why}");
        let (c, why) = pick(&a1, &pk);
        assert_eq!(c.method, "packet");
        assert!(why.contains("afxdp: the peer does not offer it"), "{why}");
        assert_eq!(pick(&pk, &a1).0.method, "packet");
        let (c, why) = pick(&a1, &u);
        assert_eq!(c.method, "udp");
        assert!(why.contains("routed (IP) from A to B"), "{why}");
        assert!(why.contains("packet: the peer does not offer it"), "{why}");
        // Selection is symmetric under one policy.
        for (x, y) in [(&a1, &a2), (&a1, &pk), (&pk, &u), (&a1, &a1b)] {
            assert_eq!(pick(x, y).0.method, pick(y, x).0.method);
        }
    }

    #[test]
    fn different_fabrics_never_match_fabric_methods() {
        let x = table("n1", &[("packet", "m1", Some("A"))]);
        let y = table("n2", &[("packet", "m2", Some("B"))]);
        let e = choose(&x, &y, &Policy::default()).unwrap_err();
        assert!(
            e.contains("packet: no common fabric (A here, B there)"),
            "{e}"
        );
        // Unknown fabrics on both sides: the descriptor is tried.
        let x = table("n1", &[("sim", "1", None)]);
        let y = table("n2", &[("sim", "2", None)]);
        let p = Policy::new(Registry::builtin(), &["sim".to_string()], None);
        assert_eq!(choose(&x, &y, &p).unwrap().0.method, "sim");
    }

    #[test]
    fn pins_restrict_and_order() {
        let a1 = afxdp_node("n1", "m1");
        let a1b = afxdp_node("n1", "m1b");
        let a2 = afxdp_node("n2", "m2");
        let udp = Policy::new(
            Registry::builtin(),
            &[],
            Some(Pin::parse("udp", "BCL_METHODS=udp", Registry::builtin()).unwrap()),
        );
        let (c, why) = choose(&a1, &a1b, &udp).unwrap();
        assert_eq!(c.method, "udp");
        assert!(why.contains("[pinned by BCL_METHODS=udp]"), "{why}");
        let order = Policy::new(
            Registry::builtin(),
            &[],
            Some(
                Pin::parse(
                    "packet,afxdp",
                    "BCL_METHODS=packet,afxdp",
                    Registry::builtin(),
                )
                .unwrap(),
            ),
        );
        assert_eq!(choose(&a1, &a2, &order).unwrap().0.method, "packet");
        let u = table("n4", &[("udp", "10.0.1.4:1", Some("B"))]);
        let e = choose(&a1, &u, &order).unwrap_err();
        assert!(e.contains("restricted by BCL_METHODS=packet,afxdp"), "{e}");
        assert!(e.contains("afxdp: the peer does not offer it"), "{e}");
    }

    #[test]
    fn pin_syntax_errors_say_why() {
        assert_eq!(
            Pin::parse("afxdp, udp", "x", Registry::builtin())
                .unwrap()
                .methods,
            vec!["afxdp", "udp"]
        );
        assert!(Pin::parse("afxdp,,udp", "x", Registry::builtin())
            .unwrap_err()
            .to_string()
            .contains("empty method name"));
        assert!(Pin::parse("tcp", "BCL_METHODS=tcp", Registry::builtin())
            .unwrap_err()
            .to_string()
            .starts_with("BCL_METHODS=tcp: unknown method \"tcp\""));
        assert!(Pin::parse("udp,udp", "x", Registry::builtin())
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }
}
