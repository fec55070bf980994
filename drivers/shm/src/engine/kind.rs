//! The `bcld` method kind, for the method registry.

use super::{socket_path, EngineMethod, METHOD_NAME};
use bcl_core::method::{Attachment, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope};
use bcl_core::Availability;
use std::os::unix::net::UnixStream;

/// The NICs of the node's daemon `bcld`, reached through shared-memory
/// rings: usable where the daemon runs, by any user.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineKind;

impl MethodKind for EngineKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "the node daemon bcld's NICs through shared-memory rings (no privileges; the daemon stamps identity)"
    }

    fn scope(&self) -> Scope {
        Scope::Fabric
    }

    fn attachment(&self) -> Attachment {
        Attachment::Daemon
    }

    /// The daemon's frames are Ethernet frames from its NIC: peers that
    /// speak `packet`, `afxdp` or `vfio` reach a client, and a client
    /// reaches them.
    fn family(&self) -> Option<&'static str> {
        Some("ethernet")
    }

    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        let path = socket_path();
        let availability = match UnixStream::connect(&path) {
            Ok(_) => Availability::Usable,
            Err(e) => Availability::NotUsable(format!("no bcld at {} ({e})", path.display())),
        };
        vec![ProbeResult::host(availability)]
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        let secret = std::env::var("BCL_JOB_SECRET").unwrap_or_default();
        Ok(Box::new(EngineMethod::connect(
            &socket_path(),
            spec,
            &secret,
        )?))
    }

    /// The Ethernet grammar `MAC[/IFINDEX][@PCI]` (the daemon's NIC).
    fn check_address(&self, address: &str) -> Result<(), String> {
        let mac = address.split(['/', '@']).next().unwrap_or("");
        let ok = mac.len() == 17
            && mac
                .split(':')
                .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
        if ok {
            Ok(())
        } else {
            Err(format!("{address:?} is not MAC[/IFINDEX][@PCI]"))
        }
    }
}
