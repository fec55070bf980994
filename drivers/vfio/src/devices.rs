//! Which NIC driver of this crate drives which PCI device. The table sits
//! above the drivers (it names them) and below what chooses one (`bcl-vfio
//! list`, [`crate::probe`], [`crate::open_nic`]), so the PCI layer the
//! drivers are written against knows none of them.

/// The NICs that a BCL driver in this crate supports, as
/// `(vendor, device, driver name)`. A new driver adds its IDs here.
pub const SUPPORTED_DEVICES: &[(u16, u16, &str)] = &[
    (
        crate::virtio::VIRTIO_VENDOR_ID,
        crate::virtio::VIRTIO_NET_MODERN_DEVICE_ID,
        "virtio-net",
    ),
    (
        crate::myri10ge::MYRICOM_VENDOR_ID,
        crate::myri10ge::MYRI10GE_Z8E_DEVICE_ID,
        "myri10ge",
    ),
    (
        crate::myri10ge::MYRICOM_VENDOR_ID,
        crate::myri10ge::MYRI10GE_Z8E_9_DEVICE_ID,
        "myri10ge",
    ),
];

/// The BCL driver for `vendor:device`, if there is one.
pub fn supported_driver(vendor: u16, device: u16) -> Option<&'static str> {
    SUPPORTED_DEVICES
        .iter()
        .find(|(v, d, _)| *v == vendor && *d == device)
        .map(|(_, _, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_table_knows_virtio_net_modern_and_myri10ge() {
        assert_eq!(supported_driver(0x1af4, 0x1041), Some("virtio-net"));
        assert_eq!(supported_driver(0x14c1, 0x0008), Some("myri10ge"));
        assert_eq!(supported_driver(0x14c1, 0x0009), Some("myri10ge"));
        assert_eq!(supported_driver(0x14c1, 0x0001), None);
        assert_eq!(supported_driver(0x1af4, 0x1000), None);
        assert_eq!(supported_driver(0x8086, 0x10d3), None);
    }
}
