//! The driver's view of a PCI function: the [`PciFunction`] trait and the
//! types around it.
//!
//! A NIC driver in this crate is written against [`PciFunction`] and never
//! against VFIO directly. Two implementations exist:
//!
//! * [`crate::vfio::VfioPciFunction`]: a real device bound to `vfio-pci`,
//!   through the rust-vmm `vfio-ioctls` crate;
//! * [`crate::testing::InMemoryPci`] (feature `test-support`): a device
//!   *model* written in Rust plays the device, with a software IOMMU, so
//!   drivers are unit-tested without hardware.
//!
//! # What a driver gets
//!
//! * **Configuration space**: byte-granular [`config_read`] /
//!   [`config_write`] plus little-endian helpers and a capability-list walk
//!   ([`capabilities`]) that never loops or reads out of range, whatever
//!   the device reports.
//! * **BARs** as MMIO regions ([`Mmio`]): 8/16/32/64-bit volatile reads and
//!   writes at offsets inside the BAR. Drivers cut validated sub-ranges out
//!   of a BAR with [`MmioWindow`].
//! * **DMA memory** ([`DmaRegion`]) that is already mapped in the device's
//!   IOMMU domain; the device sees it at [`DmaRegion::iova`].
//! * **Interrupts**: MSI-X vectors delivered to `eventfd`s, for a blocking
//!   mode.
//! * **Reset** of the whole function.
//!
//! [`config_read`]: PciFunction::config_read
//! [`config_write`]: PciFunction::config_write
//! [`capabilities`]: PciFunction::capabilities

use std::fmt;
use std::str::FromStr;

pub use vmm_sys_util::eventfd::EventFd;

use crate::dma::DmaRegion;

/// Offset of the vendor ID in configuration space.
pub const CFG_VENDOR_ID: u16 = 0x00;
/// Offset of the device ID in configuration space.
pub const CFG_DEVICE_ID: u16 = 0x02;
/// Offset of the command register in configuration space.
pub const CFG_COMMAND: u16 = 0x04;
/// Offset of the status register in configuration space.
pub const CFG_STATUS: u16 = 0x06;
/// Offset of the revision ID in configuration space.
pub const CFG_REVISION: u16 = 0x08;
/// Offset of the 24-bit class code (programming interface, subclass, class).
pub const CFG_CLASS: u16 = 0x09;
/// Offset of the header type in configuration space.
pub const CFG_HEADER_TYPE: u16 = 0x0e;
/// Offset of base address register 0; BAR n is at `CFG_BAR0 + 4 * n`.
pub const CFG_BAR0: u16 = 0x10;
/// Offset of the subsystem vendor ID.
pub const CFG_SUBSYSTEM_VENDOR_ID: u16 = 0x2c;
/// Offset of the subsystem ID.
pub const CFG_SUBSYSTEM_ID: u16 = 0x2e;
/// Offset of the capabilities pointer.
pub const CFG_CAPABILITIES: u16 = 0x34;

/// Command register: respond to I/O space accesses.
pub const COMMAND_IO: u16 = 1 << 0;
/// Command register: respond to memory space accesses.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: the function may master the bus (DMA).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command register: legacy INTx interrupts disabled.
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// Status register: the capability list is present.
pub const STATUS_CAP_LIST: u16 = 1 << 4;

/// Capability ID of power management.
pub const CAP_ID_PM: u8 = 0x01;
/// Capability ID of MSI.
pub const CAP_ID_MSI: u8 = 0x05;
/// Capability ID of a vendor-specific capability (virtio uses these).
pub const CAP_ID_VENDOR: u8 = 0x09;
/// Capability ID of PCI Express.
pub const CAP_ID_PCIE: u8 = 0x10;
/// Capability ID of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;

/// Size of the conventional configuration space; capabilities live in it.
pub const CONFIG_SPACE_SIZE: u16 = 256;

/// A PCI address `DOMAIN:BUS:DEVICE.FUNCTION`, e.g. `0000:00:02.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..32.
    pub device: u8,
    /// Function number, 0..8.
    pub function: u8,
}

impl PciAddress {
    /// The address `domain:bus:device.function`; `None` if the device or
    /// function number is out of range.
    pub fn new(domain: u16, bus: u8, device: u8, function: u8) -> Option<Self> {
        (device < 32 && function < 8).then_some(Self {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Error from parsing a [`PciAddress`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad PCI address {0:?}: expected DOMAIN:BUS:DEVICE.FUNCTION like 0000:00:02.0 (or BUS:DEVICE.FUNCTION)")]
pub struct PciAddressParseError(pub String);

impl FromStr for PciAddress {
    type Err = PciAddressParseError;

    /// Parses `0000:00:02.0` or the short form `00:02.0` (domain 0), hex.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PciAddressParseError(s.to_string());
        let (rest, function) = s.rsplit_once('.').ok_or_else(err)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return Err(err()),
        };
        let hex = |t: &str, max_len: usize| -> Result<u32, PciAddressParseError> {
            if t.is_empty() || t.len() > max_len || !t.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(err());
            }
            u32::from_str_radix(t, 16).map_err(|_| err())
        };
        let domain = u16::try_from(hex(domain, 4)?).map_err(|_| err())?;
        let bus = u8::try_from(hex(bus, 2)?).map_err(|_| err())?;
        let device = u8::try_from(hex(device, 2)?).map_err(|_| err())?;
        let function = u8::try_from(hex(function, 1)?).map_err(|_| err())?;
        PciAddress::new(domain, bus, device, function).ok_or_else(err)
    }
}

/// What kind of address space a BAR decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    /// Memory space.
    Memory {
        /// The BAR is 64 bits wide (it uses the next BAR slot too).
        is_64bit: bool,
        /// The region is prefetchable.
        prefetchable: bool,
    },
    /// I/O port space.
    Io,
}

/// One base address register as the host reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarInfo {
    /// BAR index, 0..6.
    pub index: u8,
    /// Size of the region in bytes (a power of two for real BARs).
    pub size: u64,
    /// Memory or I/O.
    pub kind: BarKind,
    /// The host can map the region into the process (fast MMIO); when
    /// false, accesses go through a slower path (pread/pwrite on the VFIO
    /// device file).
    pub mappable: bool,
}

/// Errors from a [`PciFunction`] and the layers built directly on it.
#[derive(Debug, thiserror::Error)]
pub enum PciError {
    /// A configuration-space access fell outside the space.
    #[error("configuration space access at {offset:#x}+{len} is outside the {size}-byte space")]
    ConfigOutOfRange {
        /// Offset of the access.
        offset: u16,
        /// Length of the access.
        len: usize,
        /// Size of the configuration space.
        size: u16,
    },
    /// The BAR does not exist (size 0) or the index is out of range.
    #[error("BAR {0} does not exist on this function")]
    NoSuchBar(u8),
    /// An I/O or memory mapping failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// The function cannot do what was asked (e.g. it has no MSI-X, or no
    /// reset method).
    #[error("{0}")]
    Unsupported(String),
    /// The device reported something that violates the PCI rules (e.g. a
    /// capability pointer out of range).
    #[error("device error: {0}")]
    Device(String),
    /// A DMA allocation or IOMMU mapping failed.
    #[error("DMA: {0}")]
    Dma(String),
}

/// One entry of the capability list in configuration space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciCapability {
    /// Capability ID (e.g. [`CAP_ID_MSIX`]).
    pub id: u8,
    /// Offset of the capability's first byte (its ID) in configuration space.
    pub offset: u16,
}

/// A memory-mapped I/O region: a BAR, or part of one.
///
/// Every access is a single volatile load or store of exactly the given
/// width, at `offset` bytes from the start of the region, in the CPU's byte
/// order (PCI devices are little-endian; drivers convert).
///
/// # Panics
///
/// Accesses outside `0..len()` or not naturally aligned panic: they are
/// driver bugs. A driver must validate every offset that comes from the
/// device (capability offsets, sizes) against [`len`](Mmio::len) before it
/// uses it, so that no device input can reach such a panic. [`MmioWindow`]
/// does that validation once for a sub-range.
pub trait Mmio: Send {
    /// Length of the region in bytes.
    fn len(&self) -> u64;
    /// True if the region has length 0.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads one byte.
    fn read_u8(&self, offset: u64) -> u8;
    /// Reads 16 bits.
    fn read_u16(&self, offset: u64) -> u16;
    /// Reads 32 bits.
    fn read_u32(&self, offset: u64) -> u32;
    /// Reads 64 bits as one access.
    fn read_u64(&self, offset: u64) -> u64;
    /// Writes one byte.
    fn write_u8(&self, offset: u64, value: u8);
    /// Writes 16 bits.
    fn write_u16(&self, offset: u64, value: u16);
    /// Writes 32 bits.
    fn write_u32(&self, offset: u64, value: u32);
    /// Writes 64 bits as one access.
    fn write_u64(&self, offset: u64, value: u64);
}

/// Checks an MMIO access against a region length and alignment; used by
/// every [`Mmio`] implementation.
#[inline]
#[track_caller]
pub(crate) fn check_mmio_access(offset: u64, width: u64, len: u64) {
    assert!(
        offset.checked_add(width).is_some_and(|end| end <= len),
        "MMIO access at {offset:#x} (width {width}) outside region of {len:#x} bytes"
    );
    assert!(
        offset.is_multiple_of(width),
        "misaligned MMIO access at {offset:#x} (width {width})"
    );
}

/// A validated sub-range `[base, base + len)` of an MMIO region, with
/// accessors relative to `base`.
///
/// Construction checks the range against the region once, so drivers can
/// take window offsets and lengths from the device (e.g. virtio capability
/// structures) without risking an out-of-range access later.
#[derive(Clone, Debug)]
pub struct MmioWindow<B> {
    bar: B,
    base: u64,
    len: u64,
}

impl<B: Mmio> MmioWindow<B> {
    /// The window `[base, base + len)` of `bar`, or `None` if it does not
    /// lie inside the region.
    pub fn new(bar: B, base: u64, len: u64) -> Option<Self> {
        let end = base.checked_add(len)?;
        (end <= bar.len()).then_some(Self { bar, base, len })
    }

    /// Offset of the window inside its region.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The underlying region.
    pub fn region(&self) -> &B {
        &self.bar
    }

    #[inline]
    #[track_caller]
    fn at(&self, offset: u64, width: u64) -> u64 {
        check_mmio_access(offset, width, self.len);
        self.base + offset
    }
}

impl<B: Mmio> Mmio for MmioWindow<B> {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_u8(&self, offset: u64) -> u8 {
        self.bar.read_u8(self.at(offset, 1))
    }
    fn read_u16(&self, offset: u64) -> u16 {
        self.bar.read_u16(self.at(offset, 2))
    }
    fn read_u32(&self, offset: u64) -> u32 {
        self.bar.read_u32(self.at(offset, 4))
    }
    fn read_u64(&self, offset: u64) -> u64 {
        self.bar.read_u64(self.at(offset, 8))
    }
    fn write_u8(&self, offset: u64, value: u8) {
        self.bar.write_u8(self.at(offset, 1), value)
    }
    fn write_u16(&self, offset: u64, value: u16) {
        self.bar.write_u16(self.at(offset, 2), value)
    }
    fn write_u32(&self, offset: u64, value: u32) {
        self.bar.write_u32(self.at(offset, 4), value)
    }
    fn write_u64(&self, offset: u64, value: u64) {
        self.bar.write_u64(self.at(offset, 8), value)
    }
}

/// A PCI function as a user-space driver sees it (see the module
/// documentation).
///
/// All methods take `&self`: implementations use interior mutability, so a
/// driver may keep BAR handles and DMA regions next to the function.
/// Implementations are `Send` (a driver moves between threads with its
/// port) but not necessarily `Sync`.
pub trait PciFunction: Send {
    /// The handle to a mapped BAR. Cheap to clone; keeps the mapping alive.
    type Bar: Mmio + Clone + Send + 'static;

    /// The function's PCI address (for messages and descriptors).
    fn address(&self) -> PciAddress;

    /// Size of the configuration space (256 or 4096).
    fn config_size(&self) -> u16;

    /// Reads `buf.len()` bytes of configuration space at `offset`.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), PciError>;

    /// Writes `data` to configuration space at `offset`.
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), PciError>;

    /// The BAR at `index` (0..6), or `None` if it does not exist (size 0,
    /// the upper half of a 64-bit BAR, or index out of range).
    fn bar_info(&self, index: u8) -> Option<BarInfo>;

    /// Maps BAR `index` for MMIO. Mapping the same BAR twice returns
    /// handles to the same mapping.
    fn map_bar(&self, index: u8) -> Result<Self::Bar, PciError>;

    /// Allocates `len` bytes (rounded up to the allocation's page size) of
    /// zeroed memory that the device can reach by DMA, mapped in the
    /// function's IOMMU domain. Unmapped and freed when dropped.
    ///
    /// Allocations are expensive (an IOMMU map, possibly a 2 MiB huge
    /// page): allocate a few large regions and carve them up.
    fn alloc_dma(&self, len: usize) -> Result<DmaRegion, PciError>;

    /// Resets the function (VFIO: function-level, power-management or bus
    /// reset, whichever the kernel can do). Configuration-space state such
    /// as bus mastering is lost.
    fn reset(&self) -> Result<(), PciError>;

    /// Number of MSI-X vectors the function offers (0 if it has no MSI-X).
    fn msix_vectors(&self) -> u32;

    /// Enables MSI-X vectors `0..count`; each vector then signals its own
    /// `eventfd` ([`interrupt_eventfd`](Self::interrupt_eventfd)). The
    /// device still has to be told (in its own registers) which events use
    /// which vector.
    fn enable_msix(&self, count: u32) -> Result<(), PciError>;

    /// Disables MSI-X; the eventfds are closed.
    fn disable_msix(&self) -> Result<(), PciError>;

    /// The eventfd (non-blocking) signalled when MSI-X vector `vector`
    /// fires, once MSI-X is enabled. Read it to re-arm.
    fn interrupt_eventfd(&self, vector: u32) -> Option<&EventFd>;

    /// Reads an 8-bit configuration register.
    fn config_read_u8(&self, offset: u16) -> Result<u8, PciError> {
        let mut b = [0u8; 1];
        self.config_read(offset, &mut b)?;
        Ok(b[0])
    }

    /// Reads a 16-bit little-endian configuration register.
    fn config_read_u16(&self, offset: u16) -> Result<u16, PciError> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Reads a 32-bit little-endian configuration register.
    fn config_read_u32(&self, offset: u16) -> Result<u32, PciError> {
        let mut b = [0u8; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a 16-bit little-endian configuration register.
    fn config_write_u16(&self, offset: u16, value: u16) -> Result<(), PciError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Writes a 32-bit little-endian configuration register.
    fn config_write_u32(&self, offset: u16, value: u32) -> Result<(), PciError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Vendor and device ID from configuration space.
    fn ids(&self) -> Result<(u16, u16), PciError> {
        Ok((
            self.config_read_u16(CFG_VENDOR_ID)?,
            self.config_read_u16(CFG_DEVICE_ID)?,
        ))
    }

    /// Sets the memory-space and bus-master bits of the command register
    /// (DMA is refused by the device, and by our in-memory host, without
    /// bus mastering), and disables legacy INTx.
    fn enable_bus_master(&self) -> Result<(), PciError> {
        let cmd = self.config_read_u16(CFG_COMMAND)?;
        self.config_write_u16(
            CFG_COMMAND,
            cmd | COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE,
        )
    }

    /// Walks the capability list. Robust against a hostile device: the
    /// walk stops after 48 entries (the most that fit), rejects pointers
    /// into the header or outside the 256-byte space, and ignores the low
    /// two pointer bits as the PCI specification says.
    fn capabilities(&self) -> Result<Vec<PciCapability>, PciError> {
        let status = self.config_read_u16(CFG_STATUS)?;
        if status & STATUS_CAP_LIST == 0 {
            return Ok(Vec::new());
        }
        let mut caps = Vec::new();
        let mut ptr = self.config_read_u8(CFG_CAPABILITIES)? & !3;
        while ptr != 0 {
            if ptr < 0x40 {
                return Err(PciError::Device(format!(
                    "capability pointer {ptr:#x} points into the configuration header"
                )));
            }
            if caps.len() >= 48 {
                return Err(PciError::Device(
                    "capability list does not terminate (loop?)".into(),
                ));
            }
            let offset = u16::from(ptr);
            let id = self.config_read_u8(offset)?;
            caps.push(PciCapability { id, offset });
            ptr = self.config_read_u8(offset + 1)? & !3;
        }
        Ok(caps)
    }

    /// The first capability with ID `id`, if any.
    fn find_capability(&self, id: u8) -> Result<Option<PciCapability>, PciError> {
        Ok(self.capabilities()?.into_iter().find(|c| c.id == id))
    }
}

/// Waits until `fd` (e.g. an interrupt eventfd or a method's readiness
/// fd) is readable, at most `timeout`. Returns whether it became readable.
pub fn wait_readable(
    fd: std::os::fd::RawFd,
    timeout: std::time::Duration,
) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: `pfd` is a valid pollfd array of length 1 that lives
        // across the call; poll does not keep the pointer.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r >= 0 {
            return Ok(r > 0 && pfd.revents & libc::POLLIN != 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// PCI class code of network controllers (the top byte of the 24-bit
/// class).
pub const CLASS_NETWORK: u8 = 0x02;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn pci_address_parses_long_and_short_forms() {
        let a: PciAddress = "0000:00:02.0".parse().unwrap();
        assert_eq!(a, PciAddress::new(0, 0, 2, 0).unwrap());
        assert_eq!(a.to_string(), "0000:00:02.0");
        let b: PciAddress = "3b:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "0000:3b:1f.7");
        let c: PciAddress = "ABCD:ff:00.1".parse().unwrap();
        assert_eq!(c.domain, 0xabcd);
        for bad in [
            "",
            "0000:00:02",
            "0000:00:20.0",
            "00:02.8",
            "x:00:02.0",
            "0:0:0:0.0",
            "00:02.",
            "000000:00:02.0",
            "00:002.0",
        ] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn wait_readable_sees_an_eventfd_signal() {
        let e = EventFd::new(vmm_sys_util::eventfd::EFD_NONBLOCK).unwrap();
        let t = std::time::Duration::from_millis(10);
        assert!(!wait_readable(e.as_raw_fd(), t).unwrap());
        e.write(1).unwrap();
        assert!(wait_readable(e.as_raw_fd(), t).unwrap());
    }
}
