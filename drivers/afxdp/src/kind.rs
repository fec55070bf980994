//! The `afxdp` method kind, for the method registry.

use crate::config::AfXdpConfig;
use crate::method::{probe, AfXdpMethod, METHOD_NAME};
use bcl_core::method::{
    Attachment, Availability, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope,
};

/// Kernel-bypass raw Ethernet through AF_XDP sockets.
#[derive(Clone, Copy, Debug, Default)]
pub struct AfXdpKind;

impl MethodKind for AfXdpKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "raw Ethernet through AF_XDP sockets, kernel bypass on XDP-capable NICs (needs root)"
    }

    fn scope(&self) -> Scope {
        Scope::Fabric
    }

    fn attachment(&self) -> Attachment {
        Attachment::Interface
    }

    fn owns_nic(&self) -> bool {
        // Its XDP program and socket map belong to the process that
        // attached them.
        true
    }

    fn opt_in(&self) -> Option<&'static str> {
        Some("it attaches an XDP program to the NIC")
    }

    fn family(&self) -> Option<&'static str> {
        Some("ethernet")
    }

    fn probe(&self, interfaces: &[String]) -> Vec<ProbeResult> {
        interfaces
            .iter()
            .map(|i| ProbeResult::on(i.clone(), probe(i)))
            .collect()
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        let ifname = match &spec.nic {
            Some(n) => n.clone(),
            None => {
                bcl_ether::choose_interface(None)
                    .map_err(|e| MethodError::NotUsable {
                        method: METHOD_NAME,
                        reason: e.to_string(),
                    })?
                    .name
            }
        };
        if let Availability::NotUsable(reason) = probe(&ifname) {
            return Err(MethodError::NotUsable {
                method: METHOD_NAME,
                reason: format!("{reason} (interface {ifname})"),
            });
        }
        let mut cfg = AfXdpConfig::new(&ifname);
        if let Some(t) = spec.ethertype {
            cfg.ethertype = t;
        }
        cfg.busy_poll = spec.busy_poll;
        let m = AfXdpMethod::open(cfg).map_err(|e| MethodError::Other {
            method: METHOD_NAME,
            reason: format!("on {ifname}: {e}"),
        })?;
        Ok(Box::new(m))
    }

    /// The Ethernet grammar `MAC[/IFINDEX][@PCI]`, shared by every
    /// Ethernet method ([`bcl_ether::descriptor`]).
    fn check_address(&self, address: &str) -> Result<(), String> {
        address.parse::<bcl_ether::DescriptorAddress>().map(drop)
    }
}
