//! The `packet` method kind, for the method registry.

use crate::method::{parse_address, probe, PacketConfig, PacketMethod, METHOD_NAME};
use bcl_core::method::{Attachment, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope};

/// EtherType of `packet` endpoints opened without one (by the cluster layer
/// for a job): 0x88B6, not the BCL default 0x88B5, because an AF_XDP
/// program on a shared NIC takes every 0x88B5 frame before the kernel's
/// packet sockets see it and passes every other frame on. So a process's
/// `packet` works on an interface where another process of the node holds
/// `afxdp`, and every `packet` endpoint of a job speaks 0x88B6.
pub const JOB_ETHERTYPE: u16 = 0x88B6;

/// Raw Ethernet through AF_PACKET, on any Linux NIC.
#[derive(Clone, Copy, Debug, Default)]
pub struct PacketKind;

impl MethodKind for PacketKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "raw Ethernet through AF_PACKET rings, on any Linux NIC (needs CAP_NET_RAW)"
    }

    fn scope(&self) -> Scope {
        Scope::Fabric
    }

    fn attachment(&self) -> Attachment {
        Attachment::Interface
    }

    fn family(&self) -> Option<&'static str> {
        Some("ethernet")
    }

    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        vec![ProbeResult::host(probe())]
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        let cfg = PacketConfig {
            ifname: spec.nic.clone(),
            ethertype: spec.ethertype.unwrap_or(JOB_ETHERTYPE),
            ..PacketConfig::default()
        };
        Ok(Box::new(PacketMethod::open(cfg)?))
    }

    /// The Ethernet grammar `MAC[/IFINDEX][@PCI]`, shared by every
    /// Ethernet method ([`bcl_ether::descriptor`]).
    fn check_address(&self, address: &str) -> Result<(), String> {
        parse_address(address).map(drop)
    }
}
