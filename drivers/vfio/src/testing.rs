//! The in-memory PCI host: a [`PciFunction`] whose device is a *model*
//! written in Rust, for testing NIC drivers without hardware (feature
//! `test-support`; always available to this crate's own tests).
//!
//! # Pieces
//!
//! * [`DeviceModel`]: what a device model implements: BAR reads and writes,
//!   configuration-space write hooks, reset, and `poll` (run when
//!   something outside, such as a frame on a [`Wire`], wants its
//!   attention).
//! * [`ConfigSpace`]: a configuration-space image with a capability-list
//!   builder and BAR descriptions, owned by the host; the model gives the
//!   initial image.
//! * [`InMemoryPci`]: the host. It implements [`PciFunction`] for the
//!   driver under test and runs the model **synchronously**: an MMIO access
//!   locks the host, calls the model, unlocks. It owns a software IOMMU:
//!   [`alloc_dma`](PciFunction::alloc_dma) hands out zeroed memory at
//!   synthetic IOVAs (deliberately *not* equal to the virtual address, and
//!   with unmapped guard gaps between allocations), and the model can reach
//!   memory only through [`DeviceCtx::dma_read`]/[`DeviceCtx::dma_write`]
//!   with those IOVAs; anything else is a recorded DMA fault, as is DMA
//!   while bus mastering is off. MSI-X vectors are real eventfds.
//! * [`Wire`]: a point-to-point link between two models (two ports with
//!   bounded inboxes). Sending on a port queues the frame in the peer's
//!   inbox and pokes the peer's host, which calls its model's `poll`.
//!
//! # Threads
//!
//! The model runs in the thread of whoever touched it. A frame sent on a
//! wire is delivered (written into the peer's DMA memory) by the sender's
//! thread, after the sender's host lock is released (actions queued with
//! [`DeviceCtx::defer`]), so hosts never hold two locks. Drivers on the two
//! ends of one wire should be driven from one thread: DMA memory is plain
//! memory accessed with volatile operations, as on real hardware, and a
//! model writing it from another thread while the driver reads it would be
//! a data race.

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::dma::{volatile_copy_in, volatile_copy_out, DmaBacking, DmaRegion};
use crate::pci::{
    check_mmio_access, BarInfo, BarKind, Mmio, PciAddress, PciError, PciFunction, CFG_BAR0,
    CFG_CAPABILITIES, CFG_CLASS, CFG_COMMAND, CFG_DEVICE_ID, CFG_HEADER_TYPE, CFG_REVISION,
    CFG_STATUS, CFG_SUBSYSTEM_ID, CFG_SUBSYSTEM_VENDOR_ID, CFG_VENDOR_ID, COMMAND_BUS_MASTER,
    COMMAND_MEMORY, STATUS_CAP_LIST,
};

/// First IOVA handed out by the in-memory IOMMU (far from any virtual
/// address a test process uses, so IOVA/VA mix-ups fault).
pub const IOVA_BASE: u64 = 0x40_0000_0000;
/// Unmapped gap between two allocations, to catch overruns.
const IOVA_GUARD: u64 = 0x1_0000;

/// A configuration-space image: 256 bytes of conventional space plus an
/// optional extended part, the BAR sizes, and which bits the driver may
/// write (only the command register; everything else is read-only).
#[derive(Clone, Debug)]
pub struct ConfigSpace {
    bytes: Vec<u8>,
    bars: [Option<BarInfo>; 6],
    next_cap: u16,
    last_cap: Option<u16>,
}

impl ConfigSpace {
    /// A type-0 header with the given IDs and 24-bit class code, 256 bytes
    /// (`extended` = 4096 bytes, as for PCI Express).
    pub fn new(vendor: u16, device: u16, class: u32, revision: u8, extended: bool) -> Self {
        let mut me = Self {
            bytes: vec![0; if extended { 4096 } else { 256 }],
            bars: [None; 6],
            next_cap: 0x40,
            last_cap: None,
        };
        me.put_u16(CFG_VENDOR_ID, vendor);
        me.put_u16(CFG_DEVICE_ID, device);
        me.bytes[usize::from(CFG_REVISION)] = revision;
        me.bytes[usize::from(CFG_CLASS)..usize::from(CFG_CLASS) + 3]
            .copy_from_slice(&class.to_le_bytes()[..3]);
        me.bytes[usize::from(CFG_HEADER_TYPE)] = 0;
        me.put_u16(CFG_SUBSYSTEM_VENDOR_ID, vendor);
        me.put_u16(CFG_SUBSYSTEM_ID, device);
        me
    }

    /// Writes a 16-bit little-endian value (for building the image).
    pub fn put_u16(&mut self, offset: u16, v: u16) {
        let o = usize::from(offset);
        self.bytes[o..o + 2].copy_from_slice(&v.to_le_bytes());
    }

    /// Writes a 32-bit little-endian value (for building the image).
    pub fn put_u32(&mut self, offset: u16, v: u32) {
        let o = usize::from(offset);
        self.bytes[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Reads a 16-bit little-endian value.
    pub fn get_u16(&self, offset: u16) -> u16 {
        let o = usize::from(offset);
        u16::from_le_bytes([self.bytes[o], self.bytes[o + 1]])
    }

    /// Declares BAR `index` with `size` bytes (a power of two) of the given
    /// kind; a 64-bit memory BAR also occupies `index + 1`.
    pub fn set_bar(&mut self, index: u8, size: u64, kind: BarKind) {
        assert!(index < 6 && size.is_power_of_two());
        let low = match kind {
            BarKind::Io => 1,
            BarKind::Memory {
                is_64bit,
                prefetchable,
            } => (if is_64bit { 4 } else { 0 }) | (if prefetchable { 8 } else { 0 }),
        };
        self.put_u32(CFG_BAR0 + 4 * u16::from(index), low);
        self.bars[usize::from(index)] = Some(BarInfo {
            index,
            size,
            kind,
            mappable: true,
        });
    }

    /// Appends a capability with ID `id`; `body` is everything after the ID
    /// and next-pointer bytes. Returns the capability's offset.
    pub fn add_capability(&mut self, id: u8, body: &[u8]) -> u16 {
        let off = self.next_cap;
        let len = 2 + body.len() as u16;
        assert!(off + len <= 256, "capabilities do not fit in 256 bytes");
        let o = usize::from(off);
        self.bytes[o] = id;
        self.bytes[o + 1] = 0;
        self.bytes[o + 2..o + 2 + body.len()].copy_from_slice(body);
        match self.last_cap {
            None => self.bytes[usize::from(CFG_CAPABILITIES)] = off as u8,
            Some(prev) => self.bytes[usize::from(prev) + 1] = off as u8,
        }
        let status = self.get_u16(CFG_STATUS) | STATUS_CAP_LIST;
        self.put_u16(CFG_STATUS, status);
        self.last_cap = Some(off);
        self.next_cap = (off + len).next_multiple_of(4);
        off
    }

    /// Raw access for models that build unusual (or broken) images.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.get_u16(CFG_COMMAND)
    }

    fn bar(&self, index: u8) -> Option<BarInfo> {
        self.bars.get(usize::from(index)).copied().flatten()
    }

    /// Applies a driver write: only the command register is writable.
    fn driver_write(&mut self, offset: u16, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            let at = offset + i as u16;
            if at == CFG_COMMAND || at == CFG_COMMAND + 1 {
                self.bytes[usize::from(at)] = *b;
            }
        }
    }
}

/// A DMA access the in-memory IOMMU refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmaFault {
    /// Part of `[iova, iova + len)` is not mapped.
    #[error("DMA fault: {len} bytes at IOVA {iova:#x} not mapped")]
    Unmapped {
        /// Start of the access.
        iova: u64,
        /// Its length.
        len: usize,
    },
    /// The driver has not enabled bus mastering.
    #[error("DMA attempted with bus mastering disabled")]
    BusMasterDisabled,
}

/// Counters the host keeps about its model's behaviour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// DMA accesses refused by the IOMMU.
    pub dma_faults: u64,
    /// MSI-X messages delivered to an eventfd.
    pub interrupts: u64,
    /// Interrupts the model raised while the vector was not enabled.
    pub interrupts_masked: u64,
    /// MMIO reads and writes.
    pub mmio_accesses: u64,
    /// Live DMA mappings.
    pub dma_mappings: u64,
}

/// An action queued by a model to run after the host lock is released.
pub type Deferred = Box<dyn FnOnce() + Send>;

#[derive(Clone, Copy)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is the address of DMA memory owned by a `DmaRegion`;
// it is dereferenced only with volatile copies under the host lock, never
// as a Rust reference.
unsafe impl Send for Mapping {}

/// What a model may do to the outside world during one call: DMA through
/// the IOMMU, raise MSI-X vectors, and defer actions until the host is
/// unlocked.
pub struct DeviceCtx<'a> {
    iommu: &'a BTreeMap<u64, Mapping>,
    bus_master: bool,
    eventfds: &'a [EventFd],
    msix_enabled: u32,
    stats: &'a mut HostStats,
    deferred: &'a mut Vec<Deferred>,
}

impl DeviceCtx<'_> {
    fn translate(&mut self, iova: u64, len: usize) -> Result<*mut u8, DmaFault> {
        if !self.bus_master {
            self.stats.dma_faults += 1;
            return Err(DmaFault::BusMasterDisabled);
        }
        let fault = DmaFault::Unmapped { iova, len };
        let found = self
            .iommu
            .range(..=iova)
            .next_back()
            .and_then(|(&start, m)| {
                let off = iova - start;
                let end = off.checked_add(len as u64)?;
                (end <= m.len as u64).then(|| {
                    // SAFETY: off + len <= mapping length, so the pointer
                    // stays inside the mapped allocation.
                    unsafe { m.ptr.as_ptr().add(off as usize) }
                })
            });
        found.ok_or_else(|| {
            self.stats.dma_faults += 1;
            fault
        })
    }

    /// True if the driver enabled bus mastering.
    pub fn bus_master(&self) -> bool {
        self.bus_master
    }

    /// Reads device-visible memory at `iova` into `buf`.
    pub fn dma_read(&mut self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let p = self.translate(iova, buf.len())?;
        // SAFETY: `translate` returned a pointer to `buf.len()` mapped bytes
        // of DMA memory, which is never referenced by Rust references.
        unsafe { volatile_copy_out(p, buf) };
        Ok(())
    }

    /// Writes `data` to device-visible memory at `iova`.
    pub fn dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let p = self.translate(iova, data.len())?;
        // SAFETY: as in `dma_read`.
        unsafe { volatile_copy_in(p, data) };
        Ok(())
    }

    /// Reads a little-endian `u16` (atomically with acquire ordering when
    /// aligned, as a device reads a ring index).
    pub fn dma_read_u16(&mut self, iova: u64) -> Result<u16, DmaFault> {
        let p = self.translate(iova, 2)?;
        if iova.is_multiple_of(2) {
            // SAFETY: two mapped, aligned bytes of DMA memory, accessed only
            // through raw pointers; viewed as an atomic for this load.
            let v =
                unsafe { std::sync::atomic::AtomicU16::from_ptr(p.cast()) }.load(Ordering::Acquire);
            return Ok(u16::from_le(v));
        }
        let mut b = [0; 2];
        // SAFETY: two mapped bytes.
        unsafe { volatile_copy_out(p, &mut b) };
        Ok(u16::from_le_bytes(b))
    }

    /// Writes a little-endian `u16` (atomically with release ordering when
    /// aligned, as a device publishes a ring index).
    pub fn dma_write_u16(&mut self, iova: u64, v: u16) -> Result<(), DmaFault> {
        let p = self.translate(iova, 2)?;
        if iova.is_multiple_of(2) {
            // SAFETY: as in `dma_read_u16`.
            unsafe { std::sync::atomic::AtomicU16::from_ptr(p.cast()) }
                .store(v.to_le(), Ordering::Release);
            return Ok(());
        }
        // SAFETY: two mapped bytes.
        unsafe { volatile_copy_in(p, &v.to_le_bytes()) };
        Ok(())
    }

    /// Reads a little-endian `u32`.
    pub fn dma_read_u32(&mut self, iova: u64) -> Result<u32, DmaFault> {
        let mut b = [0; 4];
        self.dma_read(iova, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian `u32`.
    pub fn dma_write_u32(&mut self, iova: u64, v: u32) -> Result<(), DmaFault> {
        self.dma_write(iova, &v.to_le_bytes())
    }

    /// Reads a little-endian `u64`.
    pub fn dma_read_u64(&mut self, iova: u64) -> Result<u64, DmaFault> {
        let mut b = [0; 8];
        self.dma_read(iova, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Signals MSI-X vector `vector`. Returns false if the vector is not
    /// enabled (the message is lost, as with a masked vector).
    pub fn raise_msix(&mut self, vector: u32) -> bool {
        if vector < self.msix_enabled {
            if let Some(fd) = self.eventfds.get(vector as usize) {
                if fd.write(1).is_ok() {
                    self.stats.interrupts += 1;
                    return true;
                }
            }
        }
        self.stats.interrupts_masked += 1;
        false
    }

    /// Runs `action` after the host lock is released (e.g. sending a frame
    /// to a peer, whose host must be locked in turn).
    pub fn defer(&mut self, action: impl FnOnce() + Send + 'static) {
        self.deferred.push(Box::new(action));
    }
}

/// A device played by Rust code (see the module documentation).
///
/// MMIO accesses arrive with their BAR, offset and width (1, 2, 4 or 8);
/// offsets are already checked against the BAR size. Values are in the
/// CPU's byte order, as a driver passes them to [`Mmio`].
pub trait DeviceModel: Any + Send {
    /// The initial configuration space, BARs included.
    fn config_space(&self) -> ConfigSpace;

    /// MSI-X vectors the device offers.
    fn msix_vectors(&self) -> u32 {
        0
    }

    /// A driver read of `width` bytes at `offset` in BAR `bar`.
    fn mmio_read(&mut self, ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8) -> u64;

    /// A driver write of `width` bytes at `offset` in BAR `bar`.
    fn mmio_write(&mut self, ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8, value: u64);

    /// Called after the driver wrote configuration space (the host has
    /// already applied the writable bits).
    fn config_written(&mut self, _ctx: &mut DeviceCtx<'_>, _offset: u16, _data: &[u8]) {}

    /// Function-level reset: return to power-on state.
    fn reset(&mut self, ctx: &mut DeviceCtx<'_>);

    /// Something outside wants the device's attention (a frame arrived).
    fn poll(&mut self, _ctx: &mut DeviceCtx<'_>) {}
}

struct HostState {
    model: Box<dyn DeviceModel>,
    config: ConfigSpace,
    iommu: BTreeMap<u64, Mapping>,
    stats: HostStats,
}

struct Shared {
    state: Mutex<HostState>,
    eventfds: Vec<EventFd>,
    msix_enabled: AtomicU32,
    next_iova: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the model with a context, then the deferred actions
    /// after unlocking.
    fn run<R>(&self, f: impl FnOnce(&mut dyn DeviceModel, &mut DeviceCtx<'_>) -> R) -> R {
        let mut deferred = Vec::new();
        let r = {
            let mut guard = self.lock();
            let HostState {
                model,
                config,
                iommu,
                stats,
            } = &mut *guard;
            let mut ctx = DeviceCtx {
                iommu,
                bus_master: config.command() & COMMAND_BUS_MASTER != 0,
                eventfds: &self.eventfds,
                msix_enabled: self.msix_enabled.load(Ordering::Acquire),
                stats,
                deferred: &mut deferred,
            };
            f(model.as_mut(), &mut ctx)
        };
        for action in deferred {
            action();
        }
        r
    }
}

/// The in-memory PCI host (see the module documentation). Cloning gives
/// another handle to the same device (e.g. one for the driver, one for the
/// test to inspect the model).
#[derive(Clone)]
pub struct InMemoryPci {
    address: PciAddress,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for InMemoryPci {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryPci")
            .field("address", &self.address)
            .finish()
    }
}

impl InMemoryPci {
    /// A host for `model` at `address`. As after `vfio-pci` opened it, the
    /// function decodes memory but is not yet a bus master.
    pub fn new(address: PciAddress, model: impl DeviceModel) -> Self {
        let mut config = model.config_space();
        let cmd = config.command() | COMMAND_MEMORY;
        config.put_u16(CFG_COMMAND, cmd);
        let eventfds = (0..model.msix_vectors())
            .map(|_| EventFd::new(EFD_NONBLOCK).expect("eventfd"))
            .collect();
        Self {
            address,
            shared: Arc::new(Shared {
                state: Mutex::new(HostState {
                    model: Box::new(model),
                    config,
                    iommu: BTreeMap::new(),
                    stats: HostStats::default(),
                }),
                eventfds,
                msix_enabled: AtomicU32::new(0),
                next_iova: AtomicU64::new(IOVA_BASE),
            }),
        }
    }

    /// Runs `f` on the model, which must be of type `M` (for tests to
    /// inspect or steer it). Panics if it is not.
    pub fn with_model<M: DeviceModel, R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        let mut guard = self.shared.lock();
        let any: &mut dyn Any = guard.model.as_mut();
        f(any.downcast_mut::<M>().expect("model type mismatch"))
    }

    /// Calls the model's [`DeviceModel::poll`].
    pub fn poll_device(&self) {
        self.shared.run(|m, ctx| m.poll(ctx));
    }

    /// Makes frames arriving on `port` poke this device (its model's
    /// `poll` runs in the sender's thread).
    pub fn attach_wire(&self, port: &WirePort) {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        port.set_notifier(Arc::new(move || {
            if let Some(shared) = weak.upgrade() {
                shared.run(|m, ctx| m.poll(ctx));
            }
        }));
    }

    /// The host's counters.
    pub fn stats(&self) -> HostStats {
        let g = self.shared.lock();
        HostStats {
            dma_mappings: g.iommu.len() as u64,
            ..g.stats
        }
    }
}

impl PciFunction for InMemoryPci {
    type Bar = InMemoryBar;

    fn address(&self) -> PciAddress {
        self.address
    }

    fn config_size(&self) -> u16 {
        self.shared.lock().config.bytes.len() as u16
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), PciError> {
        let g = self.shared.lock();
        let size = g.config.bytes.len();
        let o = usize::from(offset);
        if o + buf.len() > size {
            return Err(PciError::ConfigOutOfRange {
                offset,
                len: buf.len(),
                size: size as u16,
            });
        }
        buf.copy_from_slice(&g.config.bytes[o..o + buf.len()]);
        Ok(())
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), PciError> {
        {
            let mut g = self.shared.lock();
            let size = g.config.bytes.len();
            if usize::from(offset) + data.len() > size {
                return Err(PciError::ConfigOutOfRange {
                    offset,
                    len: data.len(),
                    size: size as u16,
                });
            }
            g.config.driver_write(offset, data);
        }
        self.shared
            .run(|m, ctx| m.config_written(ctx, offset, data));
        Ok(())
    }

    fn bar_info(&self, index: u8) -> Option<BarInfo> {
        self.shared.lock().config.bar(index)
    }

    fn map_bar(&self, index: u8) -> Result<InMemoryBar, PciError> {
        let info = self.bar_info(index).ok_or(PciError::NoSuchBar(index))?;
        Ok(InMemoryBar {
            shared: self.shared.clone(),
            index,
            len: info.size,
        })
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaRegion, PciError> {
        if len == 0 {
            return Err(PciError::Dma("zero-length DMA allocation".into()));
        }
        let size = len.next_multiple_of(4096);
        let layout = std::alloc::Layout::from_size_align(size, 4096)
            .map_err(|e| PciError::Dma(e.to_string()))?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| PciError::Dma("out of memory".into()))?;
        let iova = self
            .shared
            .next_iova
            .fetch_add(size as u64 + IOVA_GUARD, Ordering::Relaxed);
        self.shared
            .lock()
            .iommu
            .insert(iova, Mapping { ptr, len: size });
        let backing = InMemoryBacking {
            shared: Arc::downgrade(&self.shared),
            layout,
        };
        // SAFETY: a fresh, exclusively owned, page-aligned allocation of
        // `size >= len` bytes, reachable by the model only through the
        // IOMMU table at `iova`, freed only by the backing.
        Ok(unsafe { DmaRegion::from_raw_parts(ptr, len, iova, 4096, Box::new(backing)) })
    }

    fn reset(&self) -> Result<(), PciError> {
        self.shared.run(|m, ctx| m.reset(ctx));
        Ok(())
    }

    fn msix_vectors(&self) -> u32 {
        self.shared.eventfds.len() as u32
    }

    fn enable_msix(&self, count: u32) -> Result<(), PciError> {
        if count == 0 || count as usize > self.shared.eventfds.len() {
            return Err(PciError::Unsupported(format!(
                "{count} MSI-X vectors requested, the model offers {}",
                self.shared.eventfds.len()
            )));
        }
        self.shared.msix_enabled.store(count, Ordering::Release);
        Ok(())
    }

    fn disable_msix(&self) -> Result<(), PciError> {
        self.shared.msix_enabled.store(0, Ordering::Release);
        Ok(())
    }

    fn interrupt_eventfd(&self, vector: u32) -> Option<&EventFd> {
        (vector < self.shared.msix_enabled.load(Ordering::Acquire))
            .then(|| self.shared.eventfds.get(vector as usize))
            .flatten()
    }
}

struct InMemoryBacking {
    shared: Weak<Shared>,
    layout: std::alloc::Layout,
}

impl DmaBacking for InMemoryBacking {
    fn release(&mut self, ptr: NonNull<u8>, _len: usize, iova: u64) {
        if let Some(shared) = self.shared.upgrade() {
            shared.lock().iommu.remove(&iova);
        }
        // SAFETY: allocated with this layout in `alloc_dma`; no longer in
        // the IOMMU table, so the model cannot reach it; freed once.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), self.layout) }
    }
}

/// A BAR of an [`InMemoryPci`]: every access runs the model.
#[derive(Clone)]
pub struct InMemoryBar {
    shared: Arc<Shared>,
    index: u8,
    len: u64,
}

impl std::fmt::Debug for InMemoryBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryBar")
            .field("index", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

impl InMemoryBar {
    fn read(&self, offset: u64, width: u8) -> u64 {
        check_mmio_access(offset, u64::from(width), self.len);
        let index = self.index;
        self.shared.run(|m, ctx| {
            ctx.stats.mmio_accesses += 1;
            m.mmio_read(ctx, index, offset, width)
        })
    }

    fn write(&self, offset: u64, width: u8, value: u64) {
        check_mmio_access(offset, u64::from(width), self.len);
        let index = self.index;
        self.shared.run(|m, ctx| {
            ctx.stats.mmio_accesses += 1;
            m.mmio_write(ctx, index, offset, width, value)
        })
    }
}

impl Mmio for InMemoryBar {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_u8(&self, offset: u64) -> u8 {
        self.read(offset, 1) as u8
    }
    fn read_u16(&self, offset: u64) -> u16 {
        self.read(offset, 2) as u16
    }
    fn read_u32(&self, offset: u64) -> u32 {
        self.read(offset, 4) as u32
    }
    fn read_u64(&self, offset: u64) -> u64 {
        self.read(offset, 8)
    }
    fn write_u8(&self, offset: u64, value: u8) {
        self.write(offset, 1, u64::from(value))
    }
    fn write_u16(&self, offset: u64, value: u16) {
        self.write(offset, 2, u64::from(value))
    }
    fn write_u32(&self, offset: u64, value: u32) {
        self.write(offset, 4, u64::from(value))
    }
    fn write_u64(&self, offset: u64, value: u64) {
        self.write(offset, 8, value)
    }
}

type Notifier = Arc<dyn Fn() + Send + Sync>;

struct PortInner {
    inbox: Mutex<VecDeque<Vec<u8>>>,
    notifier: Mutex<Option<Notifier>>,
    capacity: usize,
    dropped: AtomicU64,
    delivered: AtomicU64,
}

impl PortInner {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            inbox: Mutex::new(VecDeque::new()),
            notifier: Mutex::new(None),
            capacity,
            dropped: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        })
    }
}

/// A point-to-point link between two device models (a cable, or a switch
/// with two ports).
pub struct Wire;

impl Wire {
    /// Two connected ports, each able to hold `capacity` frames that the
    /// device on its end has not taken yet (more are dropped and counted).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize) -> (WirePort, WirePort) {
        let a = PortInner::new(capacity);
        let b = PortInner::new(capacity);
        (
            WirePort {
                own: a.clone(),
                peer: b.clone(),
            },
            WirePort { own: b, peer: a },
        )
    }
}

/// One end of a [`Wire`]. Clones share the end (a test may keep a clone
/// to inject or sniff frames).
#[derive(Clone)]
pub struct WirePort {
    own: Arc<PortInner>,
    peer: Arc<PortInner>,
}

impl WirePort {
    /// Sends a frame to the other end: queues it there and pokes the device
    /// attached to it. Returns false if the other end's inbox was full (the
    /// frame is dropped and counted).
    pub fn send(&self, frame: Vec<u8>) -> bool {
        {
            let mut inbox = self.peer.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if inbox.len() >= self.peer.capacity {
                self.peer.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            inbox.push_back(frame);
        }
        let notifier = self
            .peer
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(n) = notifier {
            n();
        }
        true
    }

    /// Takes the oldest frame that arrived at this end.
    pub fn recv(&self) -> Option<Vec<u8>> {
        let f = self
            .own
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if f.is_some() {
            self.own.delivered.fetch_add(1, Ordering::Relaxed);
        }
        f
    }

    /// Puts a frame back at the head of this end's inbox (a device that
    /// found no buffer for it keeps it for later).
    pub fn unrecv(&self, frame: Vec<u8>) {
        self.own
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_front(frame);
        self.own.delivered.fetch_sub(1, Ordering::Relaxed);
    }

    /// Frames waiting at this end.
    pub fn pending(&self) -> usize {
        self.own
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Frames dropped at this end because its inbox was full.
    pub fn dropped(&self) -> u64 {
        self.own.dropped.load(Ordering::Relaxed)
    }

    /// Frames taken from this end's inbox.
    pub fn delivered(&self) -> u64 {
        self.own.delivered.load(Ordering::Relaxed)
    }

    /// Sets what runs when a frame arrives at this end.
    pub fn set_notifier(&self, n: Notifier) {
        *self.own.notifier.lock().unwrap_or_else(|e| e.into_inner()) = Some(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::{CAP_ID_MSIX, CAP_ID_VENDOR};

    /// A toy device: BAR0 register 0 holds an IOVA, writing register 8
    /// makes the device copy 4 bytes from that IOVA to IOVA + 4 and raise
    /// vector 0.
    struct Copier {
        reg: u64,
    }

    impl DeviceModel for Copier {
        fn config_space(&self) -> ConfigSpace {
            let mut c = ConfigSpace::new(0x1234, 0x5678, 0x020000, 1, false);
            c.set_bar(
                0,
                0x1000,
                BarKind::Memory {
                    is_64bit: true,
                    prefetchable: false,
                },
            );
            c.add_capability(CAP_ID_VENDOR, &[0xaa, 0xbb]);
            c.add_capability(CAP_ID_MSIX, &[0; 10]);
            c
        }
        fn msix_vectors(&self) -> u32 {
            2
        }
        fn mmio_read(&mut self, _: &mut DeviceCtx<'_>, _: u8, offset: u64, _: u8) -> u64 {
            if offset == 0 {
                self.reg
            } else {
                0
            }
        }
        fn mmio_write(&mut self, ctx: &mut DeviceCtx<'_>, _: u8, offset: u64, _: u8, v: u64) {
            match offset {
                0 => self.reg = v,
                8 => {
                    let mut b = [0; 4];
                    if ctx.dma_read(self.reg, &mut b).is_ok() {
                        let _ = ctx.dma_write(self.reg + 4, &b);
                        ctx.raise_msix(0);
                    }
                }
                _ => {}
            }
        }
        fn reset(&mut self, _: &mut DeviceCtx<'_>) {
            self.reg = 0;
        }
    }

    fn host() -> InMemoryPci {
        InMemoryPci::new("0000:00:05.0".parse().unwrap(), Copier { reg: 0 })
    }

    #[test]
    fn config_space_ids_bars_and_capability_walk() {
        let h = host();
        assert_eq!(h.ids().unwrap(), (0x1234, 0x5678));
        let caps = h.capabilities().unwrap();
        assert_eq!(
            caps.iter().map(|c| c.id).collect::<Vec<_>>(),
            vec![CAP_ID_VENDOR, CAP_ID_MSIX]
        );
        assert_eq!(h.config_read_u8(caps[0].offset + 2).unwrap(), 0xaa);
        let bar = h.bar_info(0).unwrap();
        assert_eq!(bar.size, 0x1000);
        assert!(h.bar_info(1).is_none());
        assert!(matches!(h.map_bar(2), Err(PciError::NoSuchBar(2))));
        assert!(h.config_read_u32(254).is_err());
        // Only the command register is writable.
        h.config_write_u16(CFG_VENDOR_ID, 0).unwrap();
        assert_eq!(h.ids().unwrap().0, 0x1234);
    }

    #[test]
    fn dma_goes_through_the_iommu_and_needs_bus_master() {
        let h = host();
        let bar = h.map_bar(0).unwrap();
        let mem = h.alloc_dma(64).unwrap();
        assert_ne!(mem.iova(), mem.as_ptr() as u64, "IOVA must not equal VA");
        mem.write_bytes(0, &[1, 2, 3, 4]);
        bar.write_u64(0, mem.iova());
        bar.write_u32(8, 1);
        assert_eq!(h.stats().dma_faults, 1, "DMA without bus master must fault");
        let mut b = [0u8; 4];
        mem.read_bytes(4, &mut b);
        assert_eq!(b, [0; 4]);

        h.enable_bus_master().unwrap();
        h.enable_msix(1).unwrap();
        bar.write_u32(8, 1);
        mem.read_bytes(4, &mut b);
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(h.interrupt_eventfd(0).unwrap().read().unwrap(), 1);
        assert!(h.interrupt_eventfd(1).is_none(), "vector 1 not enabled");

        // An address past the allocation (in the guard gap) faults.
        bar.write_u64(0, mem.iova() + 4094);
        bar.write_u32(8, 1);
        assert_eq!(h.stats().dma_faults, 2);

        // After the region is dropped its IOVA is gone.
        let iova = mem.iova();
        assert_eq!(h.stats().dma_mappings, 1);
        drop(mem);
        assert_eq!(h.stats().dma_mappings, 0);
        bar.write_u64(0, iova);
        bar.write_u32(8, 1);
        assert_eq!(h.stats().dma_faults, 3);
        h.reset().unwrap();
        assert_eq!(bar.read_u64(0), 0);
    }

    #[test]
    fn wire_queues_frames_pokes_the_peer_and_bounds_the_inbox() {
        let (a, b) = Wire::new(2);
        let poked = Arc::new(AtomicU64::new(0));
        let p = poked.clone();
        b.set_notifier(Arc::new(move || {
            p.fetch_add(1, Ordering::Relaxed);
        }));
        assert!(a.send(vec![1]));
        assert!(a.send(vec![2]));
        assert!(!a.send(vec![3]));
        assert_eq!(b.dropped(), 1);
        assert_eq!(poked.load(Ordering::Relaxed), 2);
        assert_eq!(b.recv(), Some(vec![1]));
        b.unrecv(vec![1]);
        assert_eq!(b.pending(), 2);
        assert_eq!(b.recv(), Some(vec![1]));
        assert_eq!(b.recv(), Some(vec![2]));
        assert_eq!(b.recv(), None);
        assert_eq!(b.delivered(), 2);
        assert!(a.recv().is_none());
    }
}
