//! A device model of virtio-net's modern PCI interface, for the in-memory
//! host ([`crate::testing`]); feature `test-support`.
//!
//! It behaves like QEMU's `virtio-net-pci,disable-legacy=on,
//! iommu_platform=on` as far as our driver can tell, and is strict where
//! QEMU is lenient, so that driver bugs fail tests:
//!
//! * configuration (BAR 4): common configuration at 0x0000, ISR at 0x1000,
//!   device configuration (MAC, status, max queue pairs, MTU) at 0x2000,
//!   notifications at 0x3000 with a multiplier of 4; an MSI-X capability
//!   (table in BAR 1, not modelled: the host delivers vectors to eventfds);
//! * every common-configuration access must use the field's natural width
//!   (64-bit fields may be written as 32-bit halves); anything else is
//!   counted in [`ModelStats::bad_accesses`] and ignored;
//! * FEATURES_OK is refused for features not offered, without VERSION_1,
//!   or without ACCESS_PLATFORM when the model requires it;
//! * queues are processed only after DRIVER_OK; a notification before that
//!   is counted;
//! * every ring access goes through the host's IOMMU; a fault, a
//!   descriptor index out of range, a chain loop or a transmit descriptor
//!   marked device-writable sets NEEDS_RESET and stops the device;
//! * frames come from and go to a [`WirePort`]; a frame that arrives while
//!   no receive buffer is posted waits in the port's inbox until the
//!   driver posts one and notifies (or, with
//!   [`VirtioNetModelConfig::suppress_rx_notify`], until the next poke);
//! * faults can be injected into the used ring ([`UsedFault`]) to test
//!   the driver's validation of device input.

use crate::pci::{BarKind, CAP_ID_MSIX, CAP_ID_VENDOR};
use crate::testing::{ConfigSpace, DeviceCtx, DeviceModel, WirePort};

use super::queue::{AVAIL_F_NO_INTERRUPT, DESC_F_NEXT, DESC_F_WRITE, USED_F_NO_NOTIFY};
use super::{
    common, CAP_COMMON_CFG, CAP_DEVICE_CFG, CAP_ISR_CFG, CAP_NOTIFY_CFG, F_ACCESS_PLATFORM,
    F_NET_MAC, F_NET_MTU, F_VERSION_1, NO_VECTOR, STATUS_DRIVER_OK, STATUS_FEATURES_OK,
    STATUS_NEEDS_RESET, VIRTIO_NET_MODERN_DEVICE_ID, VIRTIO_VENDOR_ID,
};

const BAR: u8 = 4;
const COMMON_AT: u64 = 0x0000;
const ISR_AT: u64 = 0x1000;
const DEVICE_AT: u64 = 0x2000;
const NOTIFY_AT: u64 = 0x3000;
const NOTIFY_MULT: u32 = 4;
const NET_HDR_LEN: usize = 12;
/// Largest frame the model transmits (64 KiB plus header), as a bound.
const MAX_TX: usize = 65_536 + NET_HDR_LEN;

/// A fault to put into the next receive completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsedFault {
    /// Report a descriptor id beyond the queue.
    IdOutOfRange,
    /// Complete the buffer twice (the second completion names an id the
    /// driver no longer has in flight).
    DuplicateId,
    /// Report a length larger than any buffer.
    HugeLen,
    /// Report a length shorter than the virtio-net header.
    ShortLen,
    /// Move the used index far ahead of what was filled.
    IndexJump,
}

/// Settings of a [`VirtioNetModel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioNetModelConfig {
    /// The MAC in device configuration.
    pub mac: [u8; 6],
    /// Maximum (and default) queue size.
    pub queue_max: u16,
    /// Offer VIRTIO_NET_F_MTU with this MTU.
    pub mtu: Option<u16>,
    /// Offer ACCESS_PLATFORM and refuse FEATURES_OK without it.
    pub access_platform: bool,
    /// Set NO_NOTIFY in the receive used ring while buffers are posted
    /// (as QEMU does); frames then wait for the next poke.
    pub suppress_rx_notify: bool,
    /// MSI-X vectors.
    pub msix_vectors: u32,
}

impl Default for VirtioNetModelConfig {
    fn default() -> Self {
        Self {
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            queue_max: 256,
            mtu: None,
            access_platform: true,
            suppress_rx_notify: false,
            msix_vectors: 3,
        }
    }
}

/// Counters of a [`VirtioNetModel`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// Frames taken from the transmit queue and put on the wire.
    pub tx_frames: u64,
    /// Frames written into receive buffers.
    pub rx_frames: u64,
    /// Frames dropped because they did not fit the posted buffer.
    pub rx_too_big: u64,
    /// Doorbell writes.
    pub notifications: u64,
    /// Doorbell writes before DRIVER_OK or for a disabled queue.
    pub early_notifications: u64,
    /// Register accesses with a wrong width or offset.
    pub bad_accesses: u64,
    /// Protocol or DMA errors (each also sets NEEDS_RESET).
    pub errors: u64,
    /// Device resets (status written 0, or function reset).
    pub resets: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct QueueState {
    size: u16,
    enabled: bool,
    msix: u16,
    desc: u64,
    avail: u64,
    used: u64,
    last_avail: u16,
    used_idx: u16,
}

/// The virtio-net device model (see the module documentation).
pub struct VirtioNetModel {
    cfg: VirtioNetModelConfig,
    port: WirePort,
    status: u8,
    dfsel: u32,
    gfsel: u32,
    driver_features: u64,
    config_msix: u16,
    queue_sel: u16,
    queues: [QueueState; 2],
    isr: u8,
    generation: u8,
    fault: Option<UsedFault>,
    last_error: Option<String>,
    stats: ModelStats,
}

impl VirtioNetModel {
    /// A model sending and receiving frames on `port`.
    pub fn new(cfg: VirtioNetModelConfig, port: WirePort) -> Self {
        let mut me = Self {
            cfg,
            port,
            status: 0,
            dfsel: 0,
            gfsel: 0,
            driver_features: 0,
            config_msix: NO_VECTOR,
            queue_sel: 0,
            queues: Default::default(),
            isr: 0,
            generation: 0,
            fault: None,
            last_error: None,
            stats: ModelStats::default(),
        };
        me.reset_state();
        me
    }

    fn offered(&self) -> u64 {
        let mut f = F_VERSION_1 | F_NET_MAC;
        if self.cfg.access_platform {
            f |= F_ACCESS_PLATFORM;
        }
        if self.cfg.mtu.is_some() {
            f |= F_NET_MTU;
        }
        f
    }

    fn reset_state(&mut self) {
        self.status = 0;
        self.dfsel = 0;
        self.gfsel = 0;
        self.driver_features = 0;
        self.config_msix = NO_VECTOR;
        self.queue_sel = 0;
        self.isr = 0;
        self.queues = [QueueState {
            size: self.cfg.queue_max,
            msix: NO_VECTOR,
            ..Default::default()
        }; 2];
        self.stats.resets += 1;
    }

    /// Counters.
    pub fn stats(&self) -> ModelStats {
        self.stats
    }

    /// The device status byte.
    pub fn status(&self) -> u8 {
        self.status
    }

    /// The driver's accepted features.
    pub fn driver_features(&self) -> u64 {
        self.driver_features
    }

    /// The last protocol error, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The MSI-X vector the driver gave queue `q`.
    pub fn queue_vector(&self, q: usize) -> u16 {
        self.queues[q].msix
    }

    /// The size the driver chose for queue `q`.
    pub fn queue_size(&self, q: usize) -> u16 {
        self.queues[q].size
    }

    /// Makes the next receive completion faulty.
    pub fn inject_used_fault(&mut self, fault: UsedFault) {
        self.fault = Some(fault);
    }

    /// Changes the MAC (bumps the configuration generation).
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.cfg.mac = mac;
        self.generation = self.generation.wrapping_add(1);
    }

    fn fail(&mut self, why: String) {
        self.stats.errors += 1;
        self.status |= STATUS_NEEDS_RESET;
        self.last_error = Some(why);
    }

    fn running(&self) -> bool {
        self.status & STATUS_DRIVER_OK != 0 && self.status & STATUS_NEEDS_RESET == 0
    }

    fn common_image(&self) -> [u8; common::LEN as usize] {
        let mut b = [0u8; common::LEN as usize];
        let q = self.queues.get(usize::from(self.queue_sel));
        let put16 = |b: &mut [u8], o: u64, v: u16| {
            b[o as usize..o as usize + 2].copy_from_slice(&v.to_le_bytes())
        };
        let put32 = |b: &mut [u8], o: u64, v: u32| {
            b[o as usize..o as usize + 4].copy_from_slice(&v.to_le_bytes())
        };
        let dev = match self.dfsel {
            0 => self.offered() as u32,
            1 => (self.offered() >> 32) as u32,
            _ => 0,
        };
        put32(&mut b, common::DEVICE_FEATURE_SELECT, self.dfsel);
        put32(&mut b, common::DEVICE_FEATURE, dev);
        put32(&mut b, common::DRIVER_FEATURE_SELECT, self.gfsel);
        let drv = match self.gfsel {
            0 => self.driver_features as u32,
            1 => (self.driver_features >> 32) as u32,
            _ => 0,
        };
        put32(&mut b, common::DRIVER_FEATURE, drv);
        put16(&mut b, common::CONFIG_MSIX_VECTOR, self.config_msix);
        put16(&mut b, common::NUM_QUEUES, 2);
        b[common::DEVICE_STATUS as usize] = self.status;
        b[common::CONFIG_GENERATION as usize] = self.generation;
        put16(&mut b, common::QUEUE_SELECT, self.queue_sel);
        if let Some(q) = q {
            put16(&mut b, common::QUEUE_SIZE, q.size);
            put16(&mut b, common::QUEUE_MSIX_VECTOR, q.msix);
            put16(&mut b, common::QUEUE_ENABLE, u16::from(q.enabled));
            put16(&mut b, common::QUEUE_NOTIFY_OFF, self.queue_sel);
            for (o, v) in [
                (common::QUEUE_DESC, q.desc),
                (common::QUEUE_DRIVER, q.avail),
                (common::QUEUE_DEVICE, q.used),
            ] {
                b[o as usize..o as usize + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        b
    }

    fn field_width(offset: u64) -> Option<u8> {
        use common::*;
        Some(match offset {
            DEVICE_FEATURE_SELECT | DEVICE_FEATURE | DRIVER_FEATURE_SELECT | DRIVER_FEATURE => 4,
            CONFIG_MSIX_VECTOR | NUM_QUEUES | QUEUE_SELECT | QUEUE_SIZE | QUEUE_MSIX_VECTOR
            | QUEUE_ENABLE | QUEUE_NOTIFY_OFF => 2,
            DEVICE_STATUS | CONFIG_GENERATION => 1,
            QUEUE_DESC | QUEUE_DRIVER | QUEUE_DEVICE => 8,
            o if o == QUEUE_DESC + 4 || o == QUEUE_DRIVER + 4 || o == QUEUE_DEVICE + 4 => 4,
            _ => return None,
        })
    }

    fn width_ok(offset: u64, width: u8) -> bool {
        match Self::field_width(offset) {
            Some(8) => width == 8 || width == 4,
            Some(w) => w == width,
            None => false,
        }
    }

    fn common_write(&mut self, ctx: &mut DeviceCtx<'_>, offset: u64, width: u8, v: u64) {
        if !Self::width_ok(offset, width) {
            self.stats.bad_accesses += 1;
            return;
        }
        let sel = usize::from(self.queue_sel);
        let set_half = |old: u64, hi: bool, v: u64| {
            if hi {
                (old & 0xffff_ffff) | (v << 32)
            } else {
                (old & !0xffff_ffff) | (v & 0xffff_ffff)
            }
        };
        match offset {
            common::DEVICE_FEATURE_SELECT => self.dfsel = v as u32,
            common::DRIVER_FEATURE_SELECT => self.gfsel = v as u32,
            common::DRIVER_FEATURE => {
                if self.status & STATUS_FEATURES_OK != 0 {
                    self.stats.bad_accesses += 1;
                    return;
                }
                match self.gfsel {
                    0 => self.driver_features = set_half(self.driver_features, false, v),
                    1 => self.driver_features = set_half(self.driver_features, true, v),
                    _ => {}
                }
            }
            common::CONFIG_MSIX_VECTOR => {
                self.config_msix = if u32::from(v as u16) < self.cfg.msix_vectors {
                    v as u16
                } else {
                    NO_VECTOR
                }
            }
            common::DEVICE_STATUS => self.write_status(ctx, v as u8),
            common::QUEUE_SELECT => self.queue_sel = v as u16,
            _ if sel >= self.queues.len() => self.stats.bad_accesses += 1,
            common::QUEUE_SIZE => {
                let s = v as u16;
                if s == 0 || !s.is_power_of_two() || s > self.cfg.queue_max {
                    self.stats.bad_accesses += 1;
                } else {
                    self.queues[sel].size = s;
                }
            }
            common::QUEUE_MSIX_VECTOR => {
                let want = v as u16;
                self.queues[sel].msix = if u32::from(want) < self.cfg.msix_vectors {
                    want
                } else {
                    NO_VECTOR
                };
            }
            common::QUEUE_ENABLE => {
                if v == 1 {
                    self.queues[sel].enabled = true;
                    self.queues[sel].last_avail = 0;
                    self.queues[sel].used_idx = 0;
                } else {
                    self.stats.bad_accesses += 1;
                }
            }
            o => {
                let q = &mut self.queues[sel];
                let (field, hi) = match o {
                    common::QUEUE_DESC => (&mut q.desc, false),
                    common::QUEUE_DRIVER => (&mut q.avail, false),
                    common::QUEUE_DEVICE => (&mut q.used, false),
                    _ if o == common::QUEUE_DESC + 4 => (&mut q.desc, true),
                    _ if o == common::QUEUE_DRIVER + 4 => (&mut q.avail, true),
                    _ if o == common::QUEUE_DEVICE + 4 => (&mut q.used, true),
                    _ => {
                        self.stats.bad_accesses += 1;
                        return;
                    }
                };
                *field = if width == 8 {
                    v
                } else {
                    set_half(*field, hi, v)
                };
            }
        }
    }

    fn write_status(&mut self, ctx: &mut DeviceCtx<'_>, v: u8) {
        if v == 0 {
            self.reset_state();
            return;
        }
        let mut v = v;
        if v & STATUS_FEATURES_OK != 0 && self.status & STATUS_FEATURES_OK == 0 {
            let f = self.driver_features;
            let ok = f & !self.offered() == 0
                && f & F_VERSION_1 != 0
                && (!self.cfg.access_platform || f & F_ACCESS_PLATFORM != 0);
            if !ok {
                v &= !STATUS_FEATURES_OK;
            }
        }
        let was_running = self.running();
        self.status = v | (self.status & STATUS_NEEDS_RESET);
        if !was_running && self.running() {
            // Frames may have waited for the driver.
            self.deliver(ctx);
        }
    }

    fn device_config(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..6].copy_from_slice(&self.cfg.mac);
        b[6..8].copy_from_slice(&1u16.to_le_bytes()); // link up
        b[8..10].copy_from_slice(&1u16.to_le_bytes()); // one queue pair
        b[10..12].copy_from_slice(&self.cfg.mtu.unwrap_or(1500).to_le_bytes());
        b
    }

    fn notify(&mut self, ctx: &mut DeviceCtx<'_>, q: usize) {
        self.stats.notifications += 1;
        if !self.running() || q >= 2 || !self.queues[q].enabled {
            self.stats.early_notifications += 1;
            return;
        }
        if q == 1 {
            self.process_tx(ctx);
        } else {
            self.deliver(ctx);
        }
    }

    /// Reads the descriptor chain starting at `head`: `(addr, len, flags)`
    /// per descriptor.
    fn chain(
        &mut self,
        ctx: &mut DeviceCtx<'_>,
        q: usize,
        head: u16,
    ) -> Result<Vec<(u64, u32, u16)>, String> {
        let qs = self.queues[q];
        let mut out = Vec::new();
        let mut id = head;
        for _ in 0..qs.size {
            if id >= qs.size {
                return Err(format!(
                    "queue {q}: descriptor index {id} >= size {}",
                    qs.size
                ));
            }
            let d = qs.desc + 16 * u64::from(id);
            let addr = ctx.dma_read_u64(d).map_err(|e| e.to_string())?;
            let len = ctx.dma_read_u32(d + 8).map_err(|e| e.to_string())?;
            let flags = ctx.dma_read_u16(d + 12).map_err(|e| e.to_string())?;
            let next = ctx.dma_read_u16(d + 14).map_err(|e| e.to_string())?;
            out.push((addr, len, flags));
            if flags & DESC_F_NEXT == 0 {
                return Ok(out);
            }
            id = next;
        }
        Err(format!(
            "queue {q}: descriptor chain longer than the queue (loop)"
        ))
    }

    fn next_avail(&mut self, ctx: &mut DeviceCtx<'_>, q: usize) -> Result<Option<u16>, String> {
        let qs = self.queues[q];
        let avail_idx = ctx.dma_read_u16(qs.avail + 2).map_err(|e| e.to_string())?;
        if avail_idx == qs.last_avail {
            return Ok(None);
        }
        if avail_idx.wrapping_sub(qs.last_avail) > qs.size {
            return Err(format!(
                "queue {q}: avail index ran {} ahead",
                avail_idx.wrapping_sub(qs.last_avail)
            ));
        }
        let slot = u64::from(qs.last_avail & (qs.size - 1));
        let head = ctx
            .dma_read_u16(qs.avail + 4 + 2 * slot)
            .map_err(|e| e.to_string())?;
        self.queues[q].last_avail = qs.last_avail.wrapping_add(1);
        Ok(Some(head))
    }

    fn put_used(
        &mut self,
        ctx: &mut DeviceCtx<'_>,
        q: usize,
        id: u32,
        len: u32,
    ) -> Result<(), String> {
        let qs = self.queues[q];
        let slot = u64::from(qs.used_idx & (qs.size - 1));
        let e = qs.used + 4 + 8 * slot;
        ctx.dma_write_u32(e, id).map_err(|e| e.to_string())?;
        ctx.dma_write_u32(e + 4, len).map_err(|e| e.to_string())?;
        let next = qs.used_idx.wrapping_add(1);
        self.queues[q].used_idx = next;
        ctx.dma_write_u16(qs.used + 2, next)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn interrupt(&mut self, ctx: &mut DeviceCtx<'_>, q: usize) {
        let qs = self.queues[q];
        let Ok(flags) = ctx.dma_read_u16(qs.avail) else {
            return;
        };
        if flags & AVAIL_F_NO_INTERRUPT != 0 {
            return;
        }
        if qs.msix != NO_VECTOR {
            ctx.raise_msix(u32::from(qs.msix));
        } else {
            self.isr |= 1;
        }
    }

    fn process_tx(&mut self, ctx: &mut DeviceCtx<'_>) {
        let mut frames = Vec::new();
        let r: Result<(), String> = (|| {
            while let Some(head) = self.next_avail(ctx, 1)? {
                let chain = self.chain(ctx, 1, head)?;
                let mut bytes = Vec::new();
                for (addr, len, flags) in chain {
                    if flags & DESC_F_WRITE != 0 {
                        return Err("transmit descriptor is device-writable".into());
                    }
                    if bytes.len() + len as usize > MAX_TX {
                        return Err(format!("transmit chain longer than {MAX_TX} bytes"));
                    }
                    let at = bytes.len();
                    bytes.resize(at + len as usize, 0);
                    ctx.dma_read(addr, &mut bytes[at..])
                        .map_err(|e| e.to_string())?;
                }
                self.put_used(ctx, 1, u32::from(head), 0)?;
                if bytes.len() < NET_HDR_LEN {
                    return Err(format!(
                        "transmit buffer of {} bytes has no header",
                        bytes.len()
                    ));
                }
                if bytes[..NET_HDR_LEN].iter().any(|&b| b != 0) {
                    return Err("virtio_net_hdr asks for offloads that were not negotiated".into());
                }
                bytes.drain(..NET_HDR_LEN);
                frames.push(bytes);
            }
            Ok(())
        })();
        if !frames.is_empty() {
            self.stats.tx_frames += frames.len() as u64;
            self.interrupt(ctx, 1);
            let port = self.port.clone();
            ctx.defer(move || {
                for f in frames {
                    port.send(f);
                }
            });
        }
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// Moves frames from the port's inbox into posted receive buffers.
    fn deliver(&mut self, ctx: &mut DeviceCtx<'_>) {
        if !self.running() || !self.queues[0].enabled {
            return;
        }
        let mut delivered = 0;
        let r: Result<(), String> = (|| {
            while let Some(frame) = self.port.recv() {
                let Some(head) = self.next_avail(ctx, 0)? else {
                    self.port.unrecv(frame);
                    break;
                };
                let chain = self.chain(ctx, 0, head)?;
                let cap: u64 = chain.iter().map(|c| u64::from(c.1)).sum();
                let total = NET_HDR_LEN + frame.len();
                if chain.iter().any(|c| c.2 & DESC_F_WRITE == 0) {
                    return Err("receive descriptor is not device-writable".into());
                }
                if (total as u64) > cap {
                    // Drop the frame; the buffer stays posted.
                    self.stats.rx_too_big += 1;
                    self.queues[0].last_avail = self.queues[0].last_avail.wrapping_sub(1);
                    continue;
                }
                let mut data = vec![0u8; NET_HDR_LEN];
                data[10] = 1; // num_buffers
                data.extend_from_slice(&frame);
                let mut at = 0;
                for (addr, len, _) in chain {
                    if at == data.len() {
                        break;
                    }
                    let n = (len as usize).min(data.len() - at);
                    ctx.dma_write(addr, &data[at..at + n])
                        .map_err(|e| e.to_string())?;
                    at += n;
                }
                let (id, len) = match self.fault.take() {
                    None => (u32::from(head), total as u32),
                    Some(UsedFault::IdOutOfRange) => {
                        (u32::from(self.queues[0].size) + 7, total as u32)
                    }
                    Some(UsedFault::DuplicateId) => {
                        self.put_used(ctx, 0, u32::from(head), total as u32)?;
                        (u32::from(head), total as u32)
                    }
                    Some(UsedFault::HugeLen) => (u32::from(head), 1 << 30),
                    Some(UsedFault::ShortLen) => (u32::from(head), 3),
                    Some(UsedFault::IndexJump) => {
                        self.put_used(ctx, 0, u32::from(head), total as u32)?;
                        let q = self.queues[0];
                        let jumped = q.used_idx.wrapping_add(q.size + 1);
                        self.queues[0].used_idx = jumped;
                        ctx.dma_write_u16(q.used + 2, jumped)
                            .map_err(|e| e.to_string())?;
                        delivered += 1;
                        continue;
                    }
                };
                self.put_used(ctx, 0, id, len)?;
                delivered += 1;
            }
            Ok(())
        })();
        if delivered > 0 {
            self.stats.rx_frames += delivered;
            self.interrupt(ctx, 0);
        }
        if self.cfg.suppress_rx_notify {
            // Like QEMU: no notifications while buffers remain.
            let q = self.queues[0];
            if let Ok(avail_idx) = ctx.dma_read_u16(q.avail + 2) {
                let flags = if avail_idx != q.last_avail {
                    USED_F_NO_NOTIFY
                } else {
                    0
                };
                let _ = ctx.dma_write_u16(q.used, flags);
            }
        }
        if let Err(e) = r {
            self.fail(e);
        }
    }
}

impl DeviceModel for VirtioNetModel {
    fn config_space(&self) -> ConfigSpace {
        let mut c = ConfigSpace::new(
            VIRTIO_VENDOR_ID,
            VIRTIO_NET_MODERN_DEVICE_ID,
            0x020000,
            1,
            false,
        );
        c.set_bar(
            1,
            0x1000,
            BarKind::Memory {
                is_64bit: false,
                prefetchable: false,
            },
        );
        c.set_bar(
            BAR,
            0x4000,
            BarKind::Memory {
                is_64bit: true,
                prefetchable: true,
            },
        );
        // MSI-X: message control (table size - 1), table BIR 1 offset 0,
        // PBA BIR 1 offset 0x800.
        let mut msix = Vec::new();
        msix.extend_from_slice(&((self.cfg.msix_vectors.max(1) - 1) as u16).to_le_bytes());
        msix.extend_from_slice(&1u32.to_le_bytes());
        msix.extend_from_slice(&(0x800u32 | 1).to_le_bytes());
        c.add_capability(CAP_ID_MSIX, &msix);
        let vcap = |cfg_type: u8, offset: u64, length: u32, extra: Option<u32>| {
            let mut b = vec![
                if extra.is_some() { 20 } else { 16 },
                cfg_type,
                BAR,
                0,
                0,
                0,
            ];
            b.extend_from_slice(&(offset as u32).to_le_bytes());
            b.extend_from_slice(&length.to_le_bytes());
            if let Some(x) = extra {
                b.extend_from_slice(&x.to_le_bytes());
            }
            b
        };
        c.add_capability(
            CAP_ID_VENDOR,
            &vcap(CAP_COMMON_CFG, COMMON_AT, 0x1000, None),
        );
        c.add_capability(CAP_ID_VENDOR, &vcap(CAP_ISR_CFG, ISR_AT, 0x1000, None));
        c.add_capability(
            CAP_ID_VENDOR,
            &vcap(CAP_DEVICE_CFG, DEVICE_AT, 0x1000, None),
        );
        c.add_capability(
            CAP_ID_VENDOR,
            &vcap(CAP_NOTIFY_CFG, NOTIFY_AT, 0x1000, Some(NOTIFY_MULT)),
        );
        c
    }

    fn msix_vectors(&self) -> u32 {
        self.cfg.msix_vectors
    }

    fn mmio_read(&mut self, _ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8) -> u64 {
        if bar != BAR {
            return 0;
        }
        let w = usize::from(width);
        let from = |img: &[u8], o: u64| -> u64 {
            let o = o as usize;
            let mut b = [0u8; 8];
            if o + w <= img.len() {
                b[..w].copy_from_slice(&img[o..o + w]);
            }
            u64::from_le_bytes(b)
        };
        match offset {
            o if o < ISR_AT => {
                if o >= common::LEN || !Self::width_ok(o, width) {
                    self.stats.bad_accesses += 1;
                    return 0;
                }
                from(&self.common_image(), o)
            }
            o if o < DEVICE_AT => {
                let v = u64::from(self.isr);
                self.isr = 0;
                if o == ISR_AT {
                    v
                } else {
                    0
                }
            }
            o if o < NOTIFY_AT => from(&self.device_config(), o - DEVICE_AT),
            _ => 0,
        }
    }

    fn mmio_write(&mut self, ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8, value: u64) {
        if bar != BAR {
            return;
        }
        match offset {
            o if o < ISR_AT => self.common_write(ctx, o, width, value),
            o if o >= NOTIFY_AT => {
                let rel = o - NOTIFY_AT;
                if width != 2 || !rel.is_multiple_of(u64::from(NOTIFY_MULT)) {
                    self.stats.bad_accesses += 1;
                    return;
                }
                let q = (rel / u64::from(NOTIFY_MULT)) as usize;
                if value as usize != q {
                    self.stats.bad_accesses += 1;
                }
                self.notify(ctx, q);
            }
            _ => self.stats.bad_accesses += 1,
        }
    }

    fn reset(&mut self, _ctx: &mut DeviceCtx<'_>) {
        self.reset_state();
    }

    fn poll(&mut self, ctx: &mut DeviceCtx<'_>) {
        self.deliver(ctx);
    }
}
