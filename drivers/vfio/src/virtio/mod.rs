//! virtio 1.x over modern PCI: the transport ([`VirtioPciTransport`]),
//! split virtqueues ([`queue`]) and the virtio-net driver ([`net`]); with
//! feature `test-support`, a device model of virtio-net ([`model`]).
//!
//! Only the modern interface is supported (PCI device ID 0x1040 + device
//! type, i.e. 0x1041 for net; QEMU's `disable-legacy=on`): configuration
//! lives in BAR regions that vendor-specific PCI capabilities point to.
//! Every capability and offset the device reports is checked against its
//! BAR before use.

use crate::pci::{Mmio, MmioWindow, PciError, PciFunction, CAP_ID_VENDOR};

pub mod net;
pub mod queue;

#[cfg(any(test, doc, feature = "test-support"))]
pub mod model;

#[cfg(test)]
pub(crate) mod tests;

/// PCI vendor ID of virtio devices (Red Hat, Inc.).
pub const VIRTIO_VENDOR_ID: u16 = 0x1af4;
/// PCI device ID of a modern (non-transitional) virtio-net device.
pub const VIRTIO_NET_MODERN_DEVICE_ID: u16 = 0x1041;

/// Device status: the guest found the device.
pub const STATUS_ACKNOWLEDGE: u8 = 1;
/// Device status: the guest knows how to drive it.
pub const STATUS_DRIVER: u8 = 2;
/// Device status: the driver is ready.
pub const STATUS_DRIVER_OK: u8 = 4;
/// Device status: feature negotiation is complete.
pub const STATUS_FEATURES_OK: u8 = 8;
/// Device status: the device hit an error and needs a reset.
pub const STATUS_NEEDS_RESET: u8 = 64;
/// Device status: the driver gave up.
pub const STATUS_FAILED: u8 = 128;

/// Feature: the device has a maximum MTU in its configuration.
pub const F_NET_MTU: u64 = 1 << 3;
/// Feature: the device has a MAC address in its configuration.
pub const F_NET_MAC: u64 = 1 << 5;
/// Feature: virtio 1.0 or later (required: we do not speak legacy).
pub const F_VERSION_1: u64 = 1 << 32;
/// Feature: the device is behind an IOMMU and uses IOVAs (QEMU's
/// `iommu_platform=on`; a.k.a. VIRTIO_F_IOMMU_PLATFORM). Must be accepted
/// when offered.
pub const F_ACCESS_PLATFORM: u64 = 1 << 33;

/// "No vector" value for MSI-X vector registers.
pub const NO_VECTOR: u16 = 0xffff;

/// Capability type: common configuration.
pub const CAP_COMMON_CFG: u8 = 1;
/// Capability type: notification area.
pub const CAP_NOTIFY_CFG: u8 = 2;
/// Capability type: ISR status.
pub const CAP_ISR_CFG: u8 = 3;
/// Capability type: device-specific configuration.
pub const CAP_DEVICE_CFG: u8 = 4;
/// Capability type: PCI configuration access.
pub const CAP_PCI_CFG: u8 = 5;

/// Offsets in the common configuration structure.
pub mod common {
    /// Selects which 32 feature bits `DEVICE_FEATURE` shows.
    pub const DEVICE_FEATURE_SELECT: u64 = 0x00;
    /// 32 bits of the device's features.
    pub const DEVICE_FEATURE: u64 = 0x04;
    /// Selects which 32 feature bits `DRIVER_FEATURE` sets.
    pub const DRIVER_FEATURE_SELECT: u64 = 0x08;
    /// 32 bits of the driver's accepted features.
    pub const DRIVER_FEATURE: u64 = 0x0c;
    /// MSI-X vector for configuration changes.
    pub const CONFIG_MSIX_VECTOR: u64 = 0x10;
    /// Number of queues the device has.
    pub const NUM_QUEUES: u64 = 0x12;
    /// Device status.
    pub const DEVICE_STATUS: u64 = 0x14;
    /// Configuration generation counter.
    pub const CONFIG_GENERATION: u64 = 0x15;
    /// Selects the queue the `QUEUE_*` fields refer to.
    pub const QUEUE_SELECT: u64 = 0x16;
    /// Queue size (max on read; the driver may write a smaller one).
    pub const QUEUE_SIZE: u64 = 0x18;
    /// MSI-X vector of the queue.
    pub const QUEUE_MSIX_VECTOR: u64 = 0x1a;
    /// Queue enable.
    pub const QUEUE_ENABLE: u64 = 0x1c;
    /// The queue's notification offset (times the multiplier).
    pub const QUEUE_NOTIFY_OFF: u64 = 0x1e;
    /// IOVA of the descriptor table.
    pub const QUEUE_DESC: u64 = 0x20;
    /// IOVA of the driver (available) ring.
    pub const QUEUE_DRIVER: u64 = 0x28;
    /// IOVA of the device (used) ring.
    pub const QUEUE_DEVICE: u64 = 0x30;
    /// Size of the structure in virtio 1.0.
    pub const LEN: u64 = 0x38;
}

/// Errors of the virtio transport and drivers.
#[derive(Debug, thiserror::Error)]
pub enum VirtioError {
    /// A PCI-level operation failed.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The function is not the expected virtio device.
    #[error("{address} is {vendor:04x}:{device:04x}, not a modern virtio-net device (1af4:1041); for QEMU use disable-legacy=on")]
    WrongDevice {
        /// PCI address.
        address: String,
        /// Vendor ID found.
        vendor: u16,
        /// Device ID found.
        device: u16,
    },
    /// A required virtio capability is absent or unusable.
    #[error("virtio capability {0} missing or invalid")]
    MissingCapability(&'static str),
    /// A capability points outside its BAR or is malformed.
    #[error("bad virtio capability: {0}")]
    BadCapability(String),
    /// The device lacks a feature we need.
    #[error("device does not offer {0}")]
    MissingFeature(&'static str),
    /// The device refused our feature set (FEATURES_OK did not stick).
    #[error("device rejected the negotiated features {0:#x}")]
    FeaturesRejected(u64),
    /// The device did not complete a reset.
    #[error("device did not complete reset")]
    ResetTimeout,
    /// A queue is missing or has an unusable size.
    #[error("queue {index}: {reason}")]
    Queue {
        /// Queue index.
        index: u16,
        /// What is wrong.
        reason: String,
    },
    /// A frame does not fit the device's buffers.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLong {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The device broke the virtqueue protocol; it must be reset.
    #[error("device broke the virtqueue protocol: {0}")]
    DeviceBroken(String),
}

/// Where one virtio structure lives: BAR, offset and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapLocation {
    /// BAR index.
    pub bar: u8,
    /// Offset in the BAR.
    pub offset: u32,
    /// Length in bytes.
    pub length: u32,
}

/// The virtio structures found in a function's capability list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioCaps {
    /// Common configuration.
    pub common: CapLocation,
    /// Notification area.
    pub notify: CapLocation,
    /// Multiplier for `queue_notify_off`.
    pub notify_multiplier: u32,
    /// ISR status byte.
    pub isr: CapLocation,
    /// Device-specific configuration.
    pub device: Option<CapLocation>,
}

/// Reads the virtio vendor capabilities. The first usable capability of
/// each type wins (as the specification asks); capabilities that name a
/// missing BAR, are too short, or reach past their BAR are skipped.
pub fn find_caps<P: PciFunction>(pci: &P) -> Result<VirtioCaps, VirtioError> {
    let mut common = None;
    let mut notify = None;
    let mut isr = None;
    let mut device = None;
    for cap in pci.capabilities()? {
        if cap.id != CAP_ID_VENDOR {
            continue;
        }
        let o = cap.offset;
        let cap_len = pci.config_read_u8(o + 2)?;
        if cap_len < 16 || u16::from(cap_len) + o > 256 {
            continue;
        }
        let cfg_type = pci.config_read_u8(o + 3)?;
        let bar = pci.config_read_u8(o + 4)?;
        let offset = pci.config_read_u32(o + 8)?;
        let length = pci.config_read_u32(o + 12)?;
        let Some(info) = pci.bar_info(bar) else {
            continue;
        };
        if u64::from(offset) + u64::from(length) > info.size {
            continue;
        }
        let loc = CapLocation {
            bar,
            offset,
            length,
        };
        match cfg_type {
            CAP_COMMON_CFG if common.is_none() && u64::from(length) >= common::LEN => {
                common = Some(loc)
            }
            CAP_NOTIFY_CFG if notify.is_none() && cap_len >= 20 && length >= 2 => {
                let mult = pci.config_read_u32(o + 16)?;
                notify = Some((loc, mult));
            }
            CAP_ISR_CFG if isr.is_none() && length >= 1 => isr = Some(loc),
            CAP_DEVICE_CFG if device.is_none() => device = Some(loc),
            _ => {}
        }
    }
    let common = common.ok_or(VirtioError::MissingCapability("common configuration"))?;
    let (notify, notify_multiplier) =
        notify.ok_or(VirtioError::MissingCapability("notification"))?;
    let isr = isr.ok_or(VirtioError::MissingCapability("ISR"))?;
    Ok(VirtioCaps {
        common,
        notify,
        notify_multiplier,
        isr,
        device,
    })
}

/// The doorbell of one queue: a 16-bit write of the queue index at a
/// validated offset of the notification area.
#[derive(Clone, Debug)]
pub struct QueueNotifier<B> {
    window: MmioWindow<B>,
    queue: u16,
}

impl<B: Mmio> QueueNotifier<B> {
    /// Rings the doorbell.
    pub fn notify(&self) {
        self.window.write_u16(0, self.queue.to_le());
    }
}

/// The virtio modern PCI transport of one function: its common, notify,
/// ISR and device-configuration windows.
pub struct VirtioPciTransport<B> {
    common: MmioWindow<B>,
    notify: MmioWindow<B>,
    notify_multiplier: u32,
    isr: MmioWindow<B>,
    device: Option<MmioWindow<B>>,
}

impl<B: Mmio + Clone> VirtioPciTransport<B> {
    /// Finds the capabilities and maps the BARs they name.
    pub fn new<P: PciFunction<Bar = B>>(pci: &P) -> Result<Self, VirtioError> {
        let caps = find_caps(pci)?;
        let window = |loc: CapLocation, what: &str| -> Result<MmioWindow<B>, VirtioError> {
            let bar = pci.map_bar(loc.bar)?;
            MmioWindow::new(bar, u64::from(loc.offset), u64::from(loc.length)).ok_or_else(|| {
                VirtioError::BadCapability(format!(
                    "{what} at BAR {} {:#x}+{:#x} is outside the BAR",
                    loc.bar, loc.offset, loc.length
                ))
            })
        };
        Ok(Self {
            common: window(caps.common, "common configuration")?,
            notify: window(caps.notify, "notification area")?,
            notify_multiplier: caps.notify_multiplier,
            isr: window(caps.isr, "ISR")?,
            device: caps
                .device
                .map(|d| window(d, "device configuration"))
                .transpose()?,
        })
    }

    /// The device status byte.
    pub fn status(&self) -> u8 {
        self.common.read_u8(common::DEVICE_STATUS)
    }

    /// Writes the device status byte.
    pub fn set_status(&self, status: u8) {
        self.common.write_u8(common::DEVICE_STATUS, status)
    }

    /// Adds bits to the device status.
    pub fn add_status(&self, bits: u8) {
        self.set_status(self.status() | bits)
    }

    /// Resets the device and waits until it reports status 0.
    pub fn reset(&self) -> Result<(), VirtioError> {
        self.set_status(0);
        for i in 0..100_000u32 {
            if self.status() == 0 {
                return Ok(());
            }
            if i > 100 {
                std::thread::yield_now();
            }
        }
        Err(VirtioError::ResetTimeout)
    }

    /// The device's 64 feature bits.
    pub fn device_features(&self) -> u64 {
        self.common.write_u32(common::DEVICE_FEATURE_SELECT, 0);
        let lo = u32::from_le(self.common.read_u32(common::DEVICE_FEATURE));
        self.common
            .write_u32(common::DEVICE_FEATURE_SELECT, 1u32.to_le());
        let hi = u32::from_le(self.common.read_u32(common::DEVICE_FEATURE));
        u64::from(lo) | (u64::from(hi) << 32)
    }

    /// Writes the driver's accepted features.
    pub fn set_driver_features(&self, features: u64) {
        self.common.write_u32(common::DRIVER_FEATURE_SELECT, 0);
        self.common
            .write_u32(common::DRIVER_FEATURE, (features as u32).to_le());
        self.common
            .write_u32(common::DRIVER_FEATURE_SELECT, 1u32.to_le());
        self.common
            .write_u32(common::DRIVER_FEATURE, ((features >> 32) as u32).to_le());
    }

    /// Number of queues the device has.
    pub fn num_queues(&self) -> u16 {
        u16::from_le(self.common.read_u16(common::NUM_QUEUES))
    }

    /// Selects queue `index` for the `queue_*` accessors.
    pub fn select_queue(&self, index: u16) {
        self.common.write_u16(common::QUEUE_SELECT, index.to_le())
    }

    /// The selected queue's size (its maximum until the driver writes one).
    pub fn queue_size(&self) -> u16 {
        u16::from_le(self.common.read_u16(common::QUEUE_SIZE))
    }

    /// Sets the selected queue's size.
    pub fn set_queue_size(&self, size: u16) {
        self.common.write_u16(common::QUEUE_SIZE, size.to_le())
    }

    /// Sets the selected queue's ring addresses (IOVAs), each as two 32-bit
    /// writes, low half first (the specification allows it and some
    /// devices accept nothing wider).
    pub fn set_queue_addresses(&self, desc: u64, driver: u64, device: u64) {
        for (off, v) in [
            (common::QUEUE_DESC, desc),
            (common::QUEUE_DRIVER, driver),
            (common::QUEUE_DEVICE, device),
        ] {
            self.common.write_u32(off, (v as u32).to_le());
            self.common.write_u32(off + 4, ((v >> 32) as u32).to_le());
        }
    }

    /// Sets the selected queue's MSI-X vector; returns what the device
    /// reads back ([`NO_VECTOR`] if it could not allocate it).
    pub fn set_queue_msix_vector(&self, vector: u16) -> u16 {
        self.common
            .write_u16(common::QUEUE_MSIX_VECTOR, vector.to_le());
        u16::from_le(self.common.read_u16(common::QUEUE_MSIX_VECTOR))
    }

    /// Sets the configuration-change MSI-X vector; returns the read-back.
    pub fn set_config_msix_vector(&self, vector: u16) -> u16 {
        self.common
            .write_u16(common::CONFIG_MSIX_VECTOR, vector.to_le());
        u16::from_le(self.common.read_u16(common::CONFIG_MSIX_VECTOR))
    }

    /// Enables the selected queue.
    pub fn enable_queue(&self) {
        self.common.write_u16(common::QUEUE_ENABLE, 1u16.to_le())
    }

    /// The selected queue's enable bit.
    pub fn queue_enabled(&self) -> bool {
        u16::from_le(self.common.read_u16(common::QUEUE_ENABLE)) == 1
    }

    /// The doorbell of the selected queue `index`, checked against the
    /// notification area.
    pub fn notifier(&self, index: u16) -> Result<QueueNotifier<B>, VirtioError> {
        let off = u16::from_le(self.common.read_u16(common::QUEUE_NOTIFY_OFF));
        let at = u64::from(off) * u64::from(self.notify_multiplier);
        let window = MmioWindow::new(self.notify.region().clone(), self.notify.base() + at, 2)
            .filter(|_| at + 2 <= self.notify.len())
            .ok_or_else(|| VirtioError::Queue {
                index,
                reason: format!(
                    "notify offset {off} x {} is outside the notification area",
                    self.notify_multiplier
                ),
            })?;
        Ok(QueueNotifier {
            window,
            queue: index,
        })
    }

    /// Reads and clears the ISR status (only meaningful without MSI-X).
    pub fn read_isr(&self) -> u8 {
        self.isr.read_u8(0)
    }

    /// Length of the device configuration (0 if there is none).
    pub fn device_config_len(&self) -> u64 {
        self.device.as_ref().map_or(0, |d| d.len())
    }

    /// Reads `buf.len()` bytes of device configuration at `offset`, retried
    /// until the configuration generation is stable. `None` if the range is
    /// outside the device configuration.
    pub fn read_device_config(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        let dev = self.device.as_ref()?;
        if offset + buf.len() as u64 > dev.len() {
            return None;
        }
        for _ in 0..1000 {
            let before = self.common.read_u8(common::CONFIG_GENERATION);
            for (i, b) in buf.iter_mut().enumerate() {
                *b = dev.read_u8(offset + i as u64);
            }
            if self.common.read_u8(common::CONFIG_GENERATION) == before {
                return Some(());
            }
        }
        None
    }
}
