//! The `sim` method kind, for the method registry.

use crate::fabric::{SimFabric, METHOD_NAME};
use bcl_core::method::{
    Attachment, Availability, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope,
};

/// The simulated fabric. Endpoints of one [`SimFabric`] exist only inside
/// one process, so the kind opens them only when it holds a fabric
/// ([`SimKind::on`]); the registry's own entry (no fabric) lists the method
/// and explains why a job cannot open it.
#[derive(Clone, Default)]
pub struct SimKind {
    fabric: Option<SimFabric>,
}

impl SimKind {
    /// The kind whose [`open`](MethodKind::open) gives endpoints of
    /// `fabric`, under the fabric's method name.
    pub fn on(fabric: SimFabric) -> SimKind {
        SimKind {
            fabric: Some(fabric),
        }
    }
}

impl MethodKind for SimKind {
    fn name(&self) -> &'static str {
        self.fabric
            .as_ref()
            .map_or(METHOD_NAME, SimFabric::method_name)
    }

    fn summary(&self) -> &'static str {
        "an in-process simulated fabric with seeded faults (tests, demos)"
    }

    fn scope(&self) -> Scope {
        Scope::Fabric
    }

    fn attachment(&self) -> Attachment {
        Attachment::InProcess
    }

    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        vec![ProbeResult::host(Availability::Usable)]
    }

    fn open(&self, _spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        match &self.fabric {
            Some(f) => Ok(Box::new(f.endpoint())),
            None => Err(MethodError::NotUsable {
                method: METHOD_NAME,
                reason: "the simulated fabric exists inside one process: open its endpoints from a SimFabric".into(),
            }),
        }
    }

    fn check_address(&self, address: &str) -> Result<(), String> {
        if !address.is_empty() && address.bytes().all(|b| b.is_ascii_digit()) {
            address
                .parse::<u32>()
                .map(drop)
                .map_err(|_| format!("{address:?} is not an endpoint number"))
        } else {
            Err(format!("{address:?} is not an endpoint number"))
        }
    }
}
