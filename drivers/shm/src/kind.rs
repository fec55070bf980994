//! The `shm` method kind, for the method registry.

use crate::method::{parse_address, probe, ShmMethod, METHOD_NAME};
use bcl_core::method::{Attachment, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope};
use bcl_core::ProcessAddr;

/// Shared memory between processes of one node.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmKind;

impl MethodKind for ShmKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "shared memory between processes of one node (lock-free rings, no retransmission)"
    }

    fn scope(&self) -> Scope {
        Scope::Node
    }

    fn attachment(&self) -> Attachment {
        Attachment::Process
    }

    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        vec![ProbeResult::host(probe())]
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        Ok(Box::new(ShmMethod::open(spec.job, spec.local)?))
    }

    fn check_address(&self, address: &str) -> Result<(), String> {
        parse_address(address).map(drop)
    }

    fn process_of(&self, address: &str) -> Option<ProcessAddr> {
        parse_address(address).ok().map(|(a, _)| a)
    }
}
