//! The `vfio` method kind, for the method registry.

use crate::method::{open_nic, probe, VfioMethodConfig, METHOD_NAME};
use crate::sysfs::Sysfs;
use bcl_core::method::{
    Attachment, Availability, Method, MethodError, MethodKind, OpenSpec, ProbeResult, Scope,
};

/// A NIC driven from user space through VFIO (virtio-net, Myri-10G).
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioKind;

impl MethodKind for VfioKind {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn summary(&self) -> &'static str {
        "a NIC driven from user space through VFIO: virtio-net, Myri-10G (needs root and a NIC bound to vfio-pci)"
    }

    fn scope(&self) -> Scope {
        Scope::Fabric
    }

    fn attachment(&self) -> Attachment {
        Attachment::Device
    }

    fn owns_nic(&self) -> bool {
        // A device bound to vfio-pci is opened by one process.
        true
    }

    fn opt_in(&self) -> Option<&'static str> {
        Some("it takes the NIC away from the kernel (bound to vfio-pci)")
    }

    fn family(&self) -> Option<&'static str> {
        Some("ethernet")
    }

    /// Probes every PCI device bound to vfio-pci (the interfaces do not
    /// matter: a NIC driven through VFIO has none).
    fn probe(&self, _interfaces: &[String]) -> Vec<ProbeResult> {
        let sysfs = Sysfs::system();
        let bound: Vec<String> = match sysfs.devices() {
            Ok(devices) => devices
                .iter()
                .filter(|d| d.bound_to_vfio())
                .map(|d| d.address.to_string())
                .collect(),
            Err(e) => {
                return vec![ProbeResult::host(Availability::NotUsable(format!(
                    "cannot list PCI devices: {e}"
                )))]
            }
        };
        if bound.is_empty() {
            return vec![ProbeResult::host(Availability::NotUsable(
                "no PCI device is bound to vfio-pci".into(),
            ))];
        }
        bound
            .into_iter()
            .map(|d| {
                let a = probe(&d);
                ProbeResult::on(d, a)
            })
            .collect()
    }

    fn open(&self, spec: &OpenSpec) -> Result<Box<dyn Method>, MethodError> {
        let pci = Sysfs::system()
            .resolve_nic(spec.nic.as_deref())
            .map_err(|reason| MethodError::NotUsable {
                method: METHOD_NAME,
                reason,
            })?;
        let mut config = VfioMethodConfig {
            interrupts: !spec.busy_poll,
            ..VfioMethodConfig::default()
        };
        if let Some(t) = spec.ethertype {
            config.ethertype = t;
        }
        open_nic(&pci, config)
    }

    /// The Ethernet grammar `MAC[/IFINDEX][@PCI]`, shared by every
    /// Ethernet method ([`bcl_ether::descriptor`]).
    fn check_address(&self, address: &str) -> Result<(), String> {
        address.parse::<bcl_ether::DescriptorAddress>().map(drop)
    }
}
