//! The `udp` method kind, for the method registry.

use crate::method::{probe, UdpConfig, UdpMethod, METHOD_NAME};
use bcl_core::method::{Attachment, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope};

/// BCL frames as UDP datagrams, for routed networks and unprivileged users.
#[derive(Clone, Copy, Debug, Default)]
pub struct UdpKind;

impl MethodKind for UdpKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "BCL frames in UDP datagrams: routed networks, no privilege needed"
    }

    fn scope(&self) -> Scope {
        Scope::Routed
    }

    fn attachment(&self) -> Attachment {
        Attachment::IpAddress
    }

    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        vec![ProbeResult::host(probe())]
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        let bind = spec.bind.ok_or_else(|| MethodError::Other {
            method: METHOD_NAME,
            reason: "no address to bind (an IP address of this host, port 0 for any)".into(),
        })?;
        let cfg = UdpConfig {
            mtu: spec.mtu,
            ..UdpConfig::new(bind)
        };
        Ok(Box::new(UdpMethod::open(cfg)?))
    }

    fn check_address(&self, address: &str) -> Result<(), String> {
        crate::parse_address(address).map(drop)
    }
}
