//! The real host: a PCI function bound to `vfio-pci`, driven through the
//! rust-vmm `vfio-ioctls` crate.
//!
//! [`VfioPciFunction::open`] checks the preconditions in sysfs first (so
//! every failure says what to do: no IOMMU, not bound to vfio-pci, group
//! not viable and which device is in the way, group busy, permission),
//! then opens a VFIO container (type-1 v2 IOMMU), the device's group and
//! the device. It reads the region table once; BARs are mapped on demand
//! with `mmap` on the device file at the region's offset (vfio-ioctls has
//! no BAR-mmap helper), falling back to `pread`/`pwrite` for BARs that the
//! kernel does not let us map.
//!
//! DMA memory ([`PciFunction::alloc_dma`]) comes from 2 MiB huge pages when
//! the kernel has some reserved, else from 4 KiB pages with a warning
//! (more IOTLB misses; ixy.rs measured VFIO with 4 KiB pages much slower).
//! Each allocation is placed at a fixed virtual address in a window that
//! starts at 4 GiB (`MAP_FIXED_NOREPLACE`) and mapped in the IOMMU at
//! **IOVA = virtual address**, as ixy does. Keeping the addresses low means
//! they fit the 39-bit address width of the smallest Intel IOMMUs (and of
//! QEMU's emulated one); ordinary `mmap` addresses near 2^47 would not.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_TYPE,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::dma::{DmaBacking, DmaRegion};
use crate::pci::{
    check_mmio_access, BarInfo, BarKind, Mmio, PciAddress, PciError, PciFunction, CFG_BAR0,
};
use crate::sysfs::{GroupNotViable, Sysfs, VFIO_PCI_DRIVER};

/// Size of a huge page used for DMA memory.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;
/// Size of a normal page.
pub const SMALL_PAGE_SIZE: usize = 4096;
/// Where DMA allocations start in the virtual (= IO virtual) address space.
pub const DMA_WINDOW_START: u64 = 4 << 30;
/// Upper bound of the DMA window: 2^39, the narrowest Intel IOMMU address
/// width (and QEMU intel-iommu's default).
pub const DMA_WINDOW_END: u64 = 1 << 39;

/// Most MSI-X vectors we set up eventfds for.
const MAX_VECTORS: u32 = 64;

/// Why a device cannot be opened through VFIO. Each message says what to
/// do about it.
#[derive(Debug, thiserror::Error)]
pub enum VfioOpenError {
    /// No PCI device at that address.
    #[error("no PCI device {0} (see `bcl-vfio list`)")]
    NoDevice(PciAddress),
    /// The device has no IOMMU group.
    #[error("no IOMMU: device {0} has no IOMMU group. Enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (or amd_iommu=on) iommu=pt")]
    NoIommu(PciAddress),
    /// The device is not bound to vfio-pci.
    #[error("device {address} is {}, not to vfio-pci: run `bcl-vfio bind {address}`", match .driver { Some(d) => format!("bound to {d}"), None => "not bound to any driver".to_string() })]
    NotBound {
        /// The device.
        address: PciAddress,
        /// Its current driver.
        driver: Option<String>,
    },
    /// `/dev/vfio/vfio` does not exist.
    #[error("{0} does not exist: the vfio-pci module is not loaded (run `bcl-vfio setup`)")]
    NoVfio(PathBuf),
    /// Another device in the IOMMU group is bound to a kernel driver.
    #[error(transparent)]
    GroupNotViable(#[from] GroupNotViable),
    /// Another process (or this one) has the group open.
    #[error("IOMMU group {0} is in use: another process has /dev/vfio/{0} open")]
    GroupBusy(u32),
    /// No permission on a VFIO device node.
    #[error("no permission to open {0}: run as root, or let a user in with `bcl-vfio setup --user NAME`")]
    Permission(PathBuf),
    /// Reading sysfs failed.
    #[error("reading sysfs for {address}: {source}")]
    Sysfs {
        /// The device.
        address: PciAddress,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A VFIO ioctl failed.
    #[error("VFIO: {0}")]
    Vfio(#[source] VfioError),
    /// A configuration or region access failed while opening.
    #[error(transparent)]
    Pci(#[from] PciError),
}

/// The device file and the vfio-ioctls device, shared by the function and
/// its BAR mappings (a mapping must not outlive the device: vfio-pci
/// revokes BAR mappings when the device is released).
struct DeviceShared {
    /// A duplicate of the VFIO device fd, for pread/pwrite/mmap.
    file: File,
    /// Keeps the group attached to the container while the device is open.
    device: VfioDevice,
}

/// A PCI function bound to `vfio-pci` (see the module documentation).
pub struct VfioPciFunction {
    address: PciAddress,
    group: u32,
    shared: Arc<DeviceShared>,
    container: Arc<VfioContainer>,
    config_offset: u64,
    config_size: u16,
    bars: [Option<BarInfo>; 6],
    bar_offsets: [u64; 6],
    mapped: Mutex<[Option<VfioBar>; 6]>,
    msix_count: u32,
    msix_enabled: AtomicU32,
    eventfds: Vec<EventFd>,
}

impl std::fmt::Debug for VfioPciFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPciFunction")
            .field("address", &self.address)
            .field("group", &self.group)
            .field("bars", &self.bars)
            .field("msix_count", &self.msix_count)
            .finish()
    }
}

fn os_errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

impl VfioPciFunction {
    /// Opens the device at `address` in a container of its own.
    pub fn open(address: PciAddress) -> Result<Self, VfioOpenError> {
        Self::open_with(address, &Sysfs::system())
    }

    /// Like [`open`](Self::open), reading the preconditions from `sysfs`.
    pub fn open_with(address: PciAddress, sysfs: &Sysfs) -> Result<Self, VfioOpenError> {
        let group = precheck(address, sysfs)?;
        let container = VfioContainer::new(None).map_err(|e| match e {
            VfioError::OpenContainer(io) if matches!(os_errno(&io), libc::EACCES | libc::EPERM) => {
                VfioOpenError::Permission(sysfs.vfio_container_node())
            }
            other => VfioOpenError::Vfio(other),
        })?;
        let container = Arc::new(container);
        let dev_path = sysfs.device_dir(&address);
        let device = VfioDevice::new(&dev_path, container.clone(), false).map_err(|e| match e {
            VfioError::OpenGroup(ref io, _) if os_errno(io) == libc::EBUSY => {
                VfioOpenError::GroupBusy(group)
            }
            VfioError::OpenGroup(ref io, _)
                if matches!(os_errno(io), libc::EACCES | libc::EPERM) =>
            {
                VfioOpenError::Permission(sysfs.vfio_group_node(group))
            }
            VfioError::GroupViable => match sysfs.check_group_viable(group) {
                Ok(Err(g)) => VfioOpenError::GroupNotViable(g),
                _ => VfioOpenError::Vfio(VfioError::GroupViable),
            },
            other => VfioOpenError::Vfio(other),
        })?;
        // SAFETY: the fd belongs to `device`, which is alive for this call;
        // we only borrow it to duplicate it.
        let borrowed = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let file = File::from(
            borrowed
                .try_clone_to_owned()
                .map_err(|source| PciError::Io {
                    context: "duplicating the VFIO device fd".into(),
                    source,
                })?,
        );

        let config_offset = device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX);
        let config_size = device.get_region_size(VFIO_PCI_CONFIG_REGION_INDEX);
        if config_size < 256 {
            return Err(PciError::Device(format!(
                "VFIO config region is {config_size} bytes (expected 256 or 4096)"
            ))
            .into());
        }
        let config_size = config_size.min(4096) as u16;
        let msix_count = device
            .get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)
            .map(|i| i.count)
            .unwrap_or(0);
        let mut me = Self {
            address,
            group,
            shared: Arc::new(DeviceShared { file, device }),
            container,
            config_offset,
            config_size,
            bars: [None; 6],
            bar_offsets: [0; 6],
            mapped: Mutex::new(Default::default()),
            msix_count,
            msix_enabled: AtomicU32::new(0),
            eventfds: Vec::new(),
        };
        for i in 0..6u8 {
            let size = me.shared.device.get_region_size(u32::from(i));
            if size == 0 {
                continue;
            }
            let flags = me.shared.device.get_region_flags(u32::from(i));
            let raw = me.config_read_u32(CFG_BAR0 + 4 * u16::from(i))?;
            let kind = if raw & 1 == 1 {
                BarKind::Io
            } else {
                BarKind::Memory {
                    is_64bit: (raw >> 1) & 3 == 2,
                    prefetchable: raw & 8 != 0,
                }
            };
            me.bars[usize::from(i)] = Some(BarInfo {
                index: i,
                size,
                kind,
                mappable: flags & VFIO_REGION_INFO_FLAG_MMAP != 0,
            });
            me.bar_offsets[usize::from(i)] = me.shared.device.get_region_offset(u32::from(i));
        }
        for _ in 0..msix_count.min(MAX_VECTORS) {
            me.eventfds
                .push(EventFd::new(EFD_NONBLOCK).map_err(|e| PciError::Io {
                    context: "creating an eventfd".into(),
                    source: e,
                })?);
        }
        Ok(me)
    }

    /// The device's IOMMU group.
    pub fn iommu_group(&self) -> u32 {
        self.group
    }

    /// The VFIO container (IOMMU domain) the device is in.
    pub fn container(&self) -> &Arc<VfioContainer> {
        &self.container
    }

    /// Makes the kernel signal MSI-X vector `vector`'s eventfd as if the
    /// device had raised it (VFIO's loopback trigger), to test the
    /// interrupt path without the device's help.
    pub fn trigger_interrupt(&self, vector: u32) -> Result<(), PciError> {
        if vector >= self.msix_enabled.load(Ordering::Acquire) {
            return Err(PciError::Unsupported(format!(
                "MSI-X vector {vector} is not enabled"
            )));
        }
        self.shared
            .device
            .trigger_irq(VFIO_PCI_MSIX_IRQ_INDEX, vector)
            .map_err(|e| PciError::Unsupported(format!("triggering MSI-X vector {vector}: {e}")))
    }

    /// VFIO region table entries `(index, size, offset, flags)` for the
    /// BARs, ROM and configuration space (for diagnostics).
    pub fn regions(&self) -> Vec<(u32, u64, u64, u32)> {
        let d = &self.shared.device;
        (0..=VFIO_PCI_CONFIG_REGION_INDEX)
            .map(|i| {
                (
                    i,
                    d.get_region_size(i),
                    d.get_region_offset(i),
                    d.get_region_flags(i),
                )
            })
            .collect()
    }
}

/// Checks in sysfs that `address` can be opened through VFIO; returns its
/// IOMMU group.
pub fn precheck(address: PciAddress, sysfs: &Sysfs) -> Result<u32, VfioOpenError> {
    let info = sysfs
        .device(&address)
        .map_err(|source| VfioOpenError::Sysfs { address, source })?
        .ok_or(VfioOpenError::NoDevice(address))?;
    let group = info.iommu_group.ok_or(VfioOpenError::NoIommu(address))?;
    if info.driver.as_deref() != Some(VFIO_PCI_DRIVER) {
        return Err(VfioOpenError::NotBound {
            address,
            driver: info.driver,
        });
    }
    let node = sysfs.vfio_container_node();
    if !node.exists() {
        return Err(VfioOpenError::NoVfio(node));
    }
    sysfs
        .check_group_viable(group)
        .map_err(|source| VfioOpenError::Sysfs { address, source })??;
    let gnode = sysfs.vfio_group_node(group);
    if let Err(e) = OpenOptions::new().read(true).write(true).open(&gnode) {
        match os_errno(&e) {
            libc::EBUSY => return Err(VfioOpenError::GroupBusy(group)),
            libc::EACCES | libc::EPERM => return Err(VfioOpenError::Permission(gnode)),
            libc::ENOENT => return Err(VfioOpenError::NoVfio(gnode)),
            _ => return Err(VfioOpenError::Sysfs { address, source: e }),
        }
    }
    Ok(group)
}

impl PciFunction for VfioPciFunction {
    type Bar = VfioBar;

    fn address(&self) -> PciAddress {
        self.address
    }

    fn config_size(&self) -> u16 {
        self.config_size
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), PciError> {
        check_config(offset, buf.len(), self.config_size)?;
        self.shared
            .file
            .read_exact_at(buf, self.config_offset + u64::from(offset))
            .map_err(|source| PciError::Io {
                context: format!("reading config space at {offset:#x}"),
                source,
            })
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), PciError> {
        check_config(offset, data.len(), self.config_size)?;
        self.shared
            .file
            .write_all_at(data, self.config_offset + u64::from(offset))
            .map_err(|source| PciError::Io {
                context: format!("writing config space at {offset:#x}"),
                source,
            })
    }

    fn bar_info(&self, index: u8) -> Option<BarInfo> {
        self.bars.get(usize::from(index)).copied().flatten()
    }

    fn map_bar(&self, index: u8) -> Result<VfioBar, PciError> {
        let info = self.bar_info(index).ok_or(PciError::NoSuchBar(index))?;
        let mut mapped = self.mapped.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bar) = &mapped[usize::from(index)] {
            return Ok(bar.clone());
        }
        let offset = self.bar_offsets[usize::from(index)];
        let len = usize::try_from(info.size)
            .map_err(|_| PciError::Unsupported(format!("BAR {index} too large to map")))?;
        let mut access = BarAccess::File { offset };
        if info.mappable && matches!(info.kind, BarKind::Memory { .. }) {
            // SAFETY: mapping a VFIO region of `len` bytes at the region's
            // offset on the device fd, as the VFIO API documents; we let the
            // kernel choose the address, so nothing existing is replaced.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    self.shared.file.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                tracing::warn!(
                    "{}: mmap of BAR {index} failed ({}); using pread/pwrite",
                    self.address,
                    std::io::Error::last_os_error()
                );
            } else if let Some(ptr) = NonNull::new(p.cast::<u8>()) {
                access = BarAccess::Mapped { ptr };
            }
        }
        let bar = VfioBar {
            map: Arc::new(BarMap {
                access,
                len: info.size,
                shared: self.shared.clone(),
            }),
        };
        mapped[usize::from(index)] = Some(bar.clone());
        Ok(bar)
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaRegion, PciError> {
        alloc_dma_identity(&self.container, len)
    }

    fn reset(&self) -> Result<(), PciError> {
        // VFIO_DEVICE_RESET = _IO(VFIO_TYPE, VFIO_BASE + 11). vfio-ioctls'
        // `reset()` discards the result, so we issue it ourselves.
        let request = (u64::from(VFIO_TYPE) << 8) | u64::from(VFIO_BASE + 11);
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is a VFIO
        // device fd that we own.
        let r = unsafe { libc::ioctl(self.shared.file.as_raw_fd(), request as _) };
        if r == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if os_errno(&err) == libc::EINVAL {
            Err(PciError::Unsupported(format!(
                "{}: the kernel has no reset method for this device (no FLR, PM or bus reset)",
                self.address
            )))
        } else {
            Err(PciError::Io {
                context: format!("VFIO_DEVICE_RESET on {}", self.address),
                source: err,
            })
        }
    }

    fn msix_vectors(&self) -> u32 {
        self.msix_count
    }

    fn enable_msix(&self, count: u32) -> Result<(), PciError> {
        if count == 0 || count as usize > self.eventfds.len() {
            return Err(PciError::Unsupported(format!(
                "{}: {count} MSI-X vectors requested, the device offers {}",
                self.address, self.msix_count
            )));
        }
        let fds: Vec<&EventFd> = self.eventfds[..count as usize].iter().collect();
        self.shared
            .device
            .enable_msix(fds)
            .map_err(|e| PciError::Unsupported(format!("{}: enabling MSI-X: {e}", self.address)))?;
        self.msix_enabled.store(count, Ordering::Release);
        Ok(())
    }

    fn disable_msix(&self) -> Result<(), PciError> {
        if self.msix_enabled.swap(0, Ordering::AcqRel) == 0 {
            return Ok(());
        }
        self.shared
            .device
            .disable_msix()
            .map_err(|e| PciError::Unsupported(format!("{}: disabling MSI-X: {e}", self.address)))
    }

    fn interrupt_eventfd(&self, vector: u32) -> Option<&EventFd> {
        (vector < self.msix_enabled.load(Ordering::Acquire))
            .then(|| self.eventfds.get(vector as usize))
            .flatten()
    }
}

fn check_config(offset: u16, len: usize, size: u16) -> Result<(), PciError> {
    if usize::from(offset) + len > usize::from(size) {
        return Err(PciError::ConfigOutOfRange { offset, len, size });
    }
    Ok(())
}

enum BarAccess {
    /// Mapped with mmap: volatile loads and stores.
    Mapped { ptr: NonNull<u8> },
    /// Not mappable: pread/pwrite on the device file at `offset`.
    File { offset: u64 },
}

struct BarMap {
    access: BarAccess,
    len: u64,
    shared: Arc<DeviceShared>,
}

// SAFETY: the mapping is device memory reached only through volatile
// accesses (which the device tolerates from any thread) or through
// pread/pwrite on a file; nothing in it is a Rust object.
unsafe impl Send for BarMap {}
// SAFETY: as above; concurrent MMIO accesses are what hardware registers
// are designed for, and none creates a Rust reference.
unsafe impl Sync for BarMap {}

impl Drop for BarMap {
    fn drop(&mut self) {
        if let BarAccess::Mapped { ptr } = self.access {
            // SAFETY: ptr/len are exactly what mmap returned in `map_bar`,
            // and this is the last handle to the mapping.
            unsafe { libc::munmap(ptr.as_ptr().cast(), self.len as usize) };
        }
    }
}

/// A mapped BAR of a [`VfioPciFunction`]. Cloning shares the mapping.
#[derive(Clone)]
pub struct VfioBar {
    map: Arc<BarMap>,
}

impl std::fmt::Debug for VfioBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioBar")
            .field("len", &self.map.len)
            .field(
                "mapped",
                &matches!(self.map.access, BarAccess::Mapped { .. }),
            )
            .finish()
    }
}

impl VfioBar {
    /// True if accesses are direct loads/stores (mmap), false if they go
    /// through pread/pwrite system calls.
    pub fn is_mapped(&self) -> bool {
        matches!(self.map.access, BarAccess::Mapped { .. })
    }

    fn file_read<const N: usize>(&self, base: u64, offset: u64) -> [u8; N] {
        let mut b = [0xffu8; N];
        if let Err(e) = self.map.shared.file.read_exact_at(&mut b, base + offset) {
            // A failed read behaves like a PCI master abort: all ones.
            tracing::warn!("BAR read at {offset:#x} failed: {e}");
            b = [0xff; N];
        }
        b
    }

    fn file_write(&self, base: u64, offset: u64, data: &[u8]) {
        if let Err(e) = self.map.shared.file.write_all_at(data, base + offset) {
            tracing::warn!("BAR write at {offset:#x} failed: {e}");
        }
    }
}

macro_rules! bar_rw {
    ($read:ident, $write:ident, $t:ty) => {
        fn $read(&self, offset: u64) -> $t {
            check_mmio_access(offset, std::mem::size_of::<$t>() as u64, self.map.len);
            match self.map.access {
                // SAFETY: the access is inside the mapping and naturally
                // aligned (checked above); the mapping lives as long as
                // `self.map`; MMIO is accessed only with volatile ops.
                BarAccess::Mapped { ptr } => unsafe {
                    ptr.as_ptr()
                        .add(offset as usize)
                        .cast::<$t>()
                        .read_volatile()
                },
                BarAccess::File { offset: base } => {
                    <$t>::from_ne_bytes(self.file_read(base, offset))
                }
            }
        }
        fn $write(&self, offset: u64, value: $t) {
            check_mmio_access(offset, std::mem::size_of::<$t>() as u64, self.map.len);
            match self.map.access {
                // SAFETY: as for the read.
                BarAccess::Mapped { ptr } => unsafe {
                    ptr.as_ptr()
                        .add(offset as usize)
                        .cast::<$t>()
                        .write_volatile(value)
                },
                BarAccess::File { offset: base } => {
                    self.file_write(base, offset, &value.to_ne_bytes())
                }
            }
        }
    };
}

impl Mmio for VfioBar {
    fn len(&self) -> u64 {
        self.map.len
    }
    bar_rw!(read_u8, write_u8, u8);
    bar_rw!(read_u16, write_u16, u16);
    bar_rw!(read_u32, write_u32, u32);
    bar_rw!(read_u64, write_u64, u64);
}

/// Next candidate address in the DMA window (shared by all functions in the
/// process so that allocations do not collide).
static DMA_CURSOR: AtomicU64 = AtomicU64::new(DMA_WINDOW_START);
static WARNED_SMALL_PAGES: AtomicBool = AtomicBool::new(false);

/// Releases an identity-mapped DMA allocation: IOMMU unmap, then munmap.
struct IdentityBacking {
    container: Arc<VfioContainer>,
    map_len: usize,
}

impl DmaBacking for IdentityBacking {
    fn release(&mut self, ptr: NonNull<u8>, _len: usize, iova: u64) {
        if let Err(e) = self.container.vfio_dma_unmap(iova, self.map_len) {
            tracing::warn!(
                "VFIO DMA unmap of {iova:#x}+{:#x} failed: {e}",
                self.map_len
            );
        }
        // SAFETY: ptr/map_len are the mapping created in
        // `alloc_dma_identity`; the region owning it is being dropped, so
        // nothing accesses it any more, and it is no longer in the IOMMU.
        unsafe { libc::munmap(ptr.as_ptr().cast(), self.map_len) };
    }
}

/// Maps anonymous memory at a fixed address in the DMA window; returns the
/// pointer or the errno of the last failure.
fn mmap_in_window(size: usize, huge: bool) -> Result<NonNull<u8>, std::io::Error> {
    let mut flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE | libc::MAP_FIXED_NOREPLACE;
    if huge {
        flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
    }
    let step = (size as u64).next_multiple_of(HUGE_PAGE_SIZE as u64);
    for _ in 0..4096 {
        let addr = DMA_CURSOR.fetch_add(step, Ordering::Relaxed);
        if addr + step > DMA_WINDOW_END {
            break;
        }
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping
        // (it fails with EEXIST instead); the new anonymous mapping is ours.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            if os_errno(&e) == libc::EEXIST {
                continue;
            }
            return Err(e);
        }
        if p as u64 + size as u64 > DMA_WINDOW_END {
            // A kernel without MAP_FIXED_NOREPLACE took the address as a
            // hint and put the mapping elsewhere, out of IOMMU reach.
            // SAFETY: unmapping the mapping we just created.
            unsafe { libc::munmap(p, size) };
            return Err(std::io::Error::from_raw_os_error(libc::ERANGE));
        }
        if let Some(ptr) = NonNull::new(p.cast::<u8>()) {
            return Ok(ptr);
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::ENOMEM))
}

/// Allocates DMA memory mapped in `container` at IOVA = virtual address.
pub fn alloc_dma_identity(
    container: &Arc<VfioContainer>,
    len: usize,
) -> Result<DmaRegion, PciError> {
    if len == 0 {
        return Err(PciError::Dma("zero-length DMA allocation".into()));
    }
    let huge_len = len.next_multiple_of(HUGE_PAGE_SIZE);
    let (ptr, map_len, page_size) = match mmap_in_window(huge_len, true) {
        Ok(p) => (p, huge_len, HUGE_PAGE_SIZE),
        Err(huge_err) => {
            if !WARNED_SMALL_PAGES.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "no 2 MiB huge pages for DMA ({huge_err}); falling back to 4 KiB pages, \
                     which costs IOTLB misses. Reserve huge pages: bcl-vfio setup --hugepages N"
                );
            }
            let small_len = len.next_multiple_of(SMALL_PAGE_SIZE);
            let p = mmap_in_window(small_len, false).map_err(|e| {
                PciError::Dma(format!(
                    "cannot allocate {small_len} bytes of DMA memory: {e}"
                ))
            })?;
            (p, small_len, SMALL_PAGE_SIZE)
        }
    };
    // Keep DMA pages out of a child's copy-on-write after fork().
    // SAFETY: advising on our own fresh mapping.
    unsafe { libc::madvise(ptr.as_ptr().cast(), map_len, libc::MADV_DONTFORK) };
    let iova = ptr.as_ptr() as u64;
    // SAFETY: the memory was just mapped by us and no reference to it
    // exists; from here on it is only reached through the DmaRegion's
    // volatile/atomic accessors until the backing unmaps it.
    if let Err(e) = unsafe { container.vfio_dma_map(iova, map_len, ptr.as_ptr()) } {
        // SAFETY: unmapping our own mapping, which the IOMMU does not have.
        unsafe { libc::munmap(ptr.as_ptr().cast(), map_len) };
        return Err(PciError::Dma(format!(
            "VFIO_IOMMU_MAP_DMA of {map_len:#x} bytes at IOVA {iova:#x} failed: {e} \
             (a non-root user needs a memlock limit (ulimit -l) at least this large)"
        )));
    }
    let backing = IdentityBacking {
        container: container.clone(),
        map_len,
    };
    // SAFETY: ptr is valid for map_len >= len bytes, page aligned, not
    // referenced anywhere, mapped in the IOMMU at `iova`, and released only
    // by the backing when the region drops.
    Ok(unsafe { DmaRegion::from_raw_parts(ptr, len, iova, page_size, Box::new(backing)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::fake::FakeSys;

    #[test]
    fn precheck_explains_each_missing_precondition() {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeSys::new(dir.path()).unwrap();
        let s = Sysfs::new(f.root());
        let a: PciAddress = "0000:00:02.0".parse().unwrap();
        assert!(matches!(precheck(a, &s), Err(VfioOpenError::NoDevice(_))));

        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            None,
        )
        .unwrap();
        let e = precheck(a, &s).unwrap_err();
        assert!(matches!(e, VfioOpenError::NoIommu(_)));
        assert!(e.to_string().contains("intel_iommu=on"));

        let b: PciAddress = "0000:00:03.0".parse().unwrap();
        f.add_device(
            "0000:00:03.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            Some(3),
        )
        .unwrap();
        let e = precheck(b, &s).unwrap_err();
        assert!(e.to_string().contains("bound to virtio-pci"), "{e}");
        assert!(e.to_string().contains("bcl-vfio bind 0000:00:03.0"), "{e}");

        f.set_driver("0000:00:03.0", Some("vfio-pci")).unwrap();
        let e = precheck(b, &s).unwrap_err();
        assert!(matches!(e, VfioOpenError::NoVfio(_)), "{e}");

        std::fs::write(dir.path().join("dev/vfio/vfio"), "").unwrap();
        f.add_device(
            "0000:00:03.1",
            0x8086,
            0x1234,
            0x020000,
            Some("e1000e"),
            Some(3),
        )
        .unwrap();
        let e = precheck(b, &s).unwrap_err();
        assert!(
            e.to_string()
                .contains("0000:00:03.1 in the same group is bound to e1000e"),
            "{e}"
        );

        f.set_driver("0000:00:03.1", None).unwrap();
        let e = precheck(b, &s).unwrap_err();
        assert!(
            matches!(e, VfioOpenError::NoVfio(ref p) if p.ends_with("dev/vfio/3")),
            "{e}"
        );

        std::fs::write(dir.path().join("dev/vfio/3"), "").unwrap();
        assert_eq!(precheck(b, &s).unwrap(), 3);
    }
}
