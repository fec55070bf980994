//! virtio-net driver (virtio 1.x, modern PCI) on any [`PciFunction`].
//!
//! One receive queue (0) and one transmit queue (1), each of `queue_size`
//! entries, with one fixed DMA buffer per descriptor. Everything lives in
//! a single DMA allocation (one 2 MiB huge page for 256-entry queues):
//!
//! ```text
//! [rx rings][tx rings][rx buffers: size x buf][tx buffers: size x buf]
//! ```
//!
//! Each buffer holds the 12-byte `virtio_net_hdr` (all zero on transmit:
//! no offloads are negotiated) followed by the Ethernet frame.
//!
//! Negotiated features: `VERSION_1` (required), `MAC` (required: the MAC is
//! our address), `ACCESS_PLATFORM` when offered (a device behind an IOMMU,
//! QEMU's `iommu_platform=on`, refuses to work without it), and `MTU` when
//! offered (the device's MTU replaces the default 1500). Nothing else: no
//! checksum or segmentation offloads, no mergeable buffers, no control
//! queue, no event index.
//!
//! Receive completions and transmit completions are found by polling the
//! used rings (no register access). Doorbells are written only when the
//! device has not suppressed notifications. With `interrupts`, MSI-X
//! vector 0 is attached to the receive queue and signals an eventfd, for a
//! blocking mode.

use super::queue::{SplitQueue, Used};
use super::{
    VirtioError, VirtioPciTransport, F_ACCESS_PLATFORM, F_NET_MAC, F_NET_MTU, F_VERSION_1,
    NO_VECTOR, STATUS_ACKNOWLEDGE, STATUS_DRIVER, STATUS_DRIVER_OK, STATUS_FAILED,
    STATUS_FEATURES_OK, VIRTIO_NET_MODERN_DEVICE_ID, VIRTIO_VENDOR_ID,
};
use crate::dma::{DmaRegion, DmaView};
use crate::nic::{EthernetDevice, NicError};
use crate::pci::{EventFd, PciAddress, PciFunction};
use bcl_ether::{Mac, HEADER_LEN};
use std::os::fd::{AsRawFd, RawFd};

/// Size of `virtio_net_hdr` with VERSION_1 (includes `num_buffers`).
pub const NET_HDR_LEN: usize = 12;
/// MTU when the device does not state one.
pub const DEFAULT_MTU: usize = 1500;
/// Largest MTU we size buffers for.
pub const MAX_MTU: usize = 9000;
/// Smallest MTU we accept from the device (IPv4's minimum).
pub const MIN_MTU: usize = 68;

const RXQ: u16 = 0;
const TXQ: u16 = 1;

/// Settings of a [`VirtioNet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioNetConfig {
    /// Entries per queue (rounded down to a power of two and to the
    /// device's maximum).
    pub queue_size: u16,
    /// Attach MSI-X vector 0 to the receive queue (when the function has
    /// MSI-X), for [`VirtioNet::interrupt_fd`].
    pub interrupts: bool,
}

impl Default for VirtioNetConfig {
    fn default() -> Self {
        Self {
            queue_size: 256,
            interrupts: true,
        }
    }
}

/// Counters of a [`VirtioNet`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Frames handed to the device.
    pub tx_frames: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Transmit attempts refused because all buffers were in flight.
    pub tx_ring_full: u64,
    /// Used elements with a bad id (out of range or not in flight).
    pub bad_used_id: u64,
    /// Receive completions with a length shorter than the header or longer
    /// than the buffer.
    pub bad_used_len: u64,
    /// Doorbells written.
    pub notifications: u64,
    /// Doorbells skipped because the device suppressed notifications.
    pub notifications_suppressed: u64,
}

/// A virtio-net device driven from user space (see the module
/// documentation).
pub struct VirtioNet<P: PciFunction> {
    transport: VirtioPciTransport<P::Bar>,
    rx: SplitQueue,
    tx: SplitQueue,
    rx_notify: super::QueueNotifier<P::Bar>,
    tx_notify: super::QueueNotifier<P::Bar>,
    buf_size: usize,
    rx_bufs: usize,
    tx_bufs: usize,
    tx_free: Vec<u16>,
    rx_done: Vec<u16>,
    mac: Mac,
    mtu: usize,
    features: u64,
    irq: Option<u32>,
    stats: NetStats,
    // Dropped after the device is reset in `Drop` (fields drop after
    // `drop()`), and before `pci`, which releases the device.
    mem: DmaRegion,
    pci: P,
}

impl<P: PciFunction> std::fmt::Debug for VirtioNet<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioNet")
            .field("address", &self.pci.address())
            .field("mac", &self.mac)
            .field("mtu", &self.mtu)
            .field("queue_size", &self.rx.size())
            .field("features", &format_args!("{:#x}", self.features))
            .finish()
    }
}

impl<P: PciFunction> VirtioNet<P> {
    /// Initialises the device (virtio 1.x §3.1.1): reset, acknowledge,
    /// negotiate features, set up the queues, read the MAC, post all
    /// receive buffers, DRIVER_OK.
    pub fn new(pci: P, config: VirtioNetConfig) -> Result<Self, VirtioError> {
        let (vendor, device) = pci.ids()?;
        if vendor != VIRTIO_VENDOR_ID || device != VIRTIO_NET_MODERN_DEVICE_ID {
            return Err(VirtioError::WrongDevice {
                address: pci.address().to_string(),
                vendor,
                device,
            });
        }
        pci.enable_bus_master()?;
        let t = VirtioPciTransport::new(&pci)?;
        t.reset()?;
        t.set_status(STATUS_ACKNOWLEDGE);
        t.add_status(STATUS_DRIVER);
        match Self::setup(pci, t, config) {
            Ok(me) => Ok(me),
            Err((t, e)) => {
                if let Some(t) = t {
                    t.add_status(STATUS_FAILED);
                }
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn setup(
        pci: P,
        t: VirtioPciTransport<P::Bar>,
        config: VirtioNetConfig,
    ) -> Result<Self, (Option<VirtioPciTransport<P::Bar>>, VirtioError)> {
        macro_rules! tri {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Err((Some(t), e.into())),
                }
            };
        }
        let offered = t.device_features();
        if offered & F_VERSION_1 == 0 {
            return Err((Some(t), VirtioError::MissingFeature("VERSION_1")));
        }
        if offered & F_NET_MAC == 0 {
            return Err((Some(t), VirtioError::MissingFeature("MAC")));
        }
        let features = offered & (F_VERSION_1 | F_NET_MAC | F_ACCESS_PLATFORM | F_NET_MTU);
        t.set_driver_features(features);
        t.add_status(STATUS_FEATURES_OK);
        if t.status() & STATUS_FEATURES_OK == 0 {
            return Err((Some(t), VirtioError::FeaturesRejected(features)));
        }
        if t.num_queues() < 2 {
            return Err((
                Some(t),
                VirtioError::Queue {
                    index: TXQ,
                    reason: "device has fewer than 2 queues".into(),
                },
            ));
        }

        let mtu = if features & F_NET_MTU != 0 {
            let mut b = [0u8; 2];
            match t.read_device_config(10, &mut b) {
                Some(()) => usize::from(u16::from_le_bytes(b)).clamp(MIN_MTU, MAX_MTU),
                None => DEFAULT_MTU,
            }
        } else {
            DEFAULT_MTU
        };
        let mut mac = [0u8; 6];
        if t.read_device_config(0, &mut mac).is_none() {
            return Err((
                Some(t),
                VirtioError::BadCapability("device configuration shorter than a MAC".into()),
            ));
        }

        // Queue sizes: ours, capped by each queue's maximum.
        let mut size = config.queue_size.max(1);
        for q in [RXQ, TXQ] {
            t.select_queue(q);
            let max = t.queue_size();
            if max == 0 {
                return Err((
                    Some(t),
                    VirtioError::Queue {
                        index: q,
                        reason: "not available (size 0)".into(),
                    },
                ));
            }
            size = size.min(max);
        }
        // Largest power of two <= size (split queues need one).
        let size = 1u16 << (15 - size.leading_zeros().min(15));

        let buf_size = (NET_HDR_LEN + HEADER_LEN + mtu).next_multiple_of(64);
        let qbytes = SplitQueue::bytes(size);
        let n = usize::from(size);
        let rx_bufs = 2 * qbytes;
        let tx_bufs = rx_bufs + n * buf_size;
        let total = tx_bufs + n * buf_size;
        let mem = tri!(pci.alloc_dma(total));

        // Interrupts: vector 0 for the receive queue, if possible.
        let mut irq = None;
        if config.interrupts && pci.msix_vectors() >= 1 && pci.enable_msix(1).is_ok() {
            irq = Some(0u32);
        }
        t.set_config_msix_vector(NO_VECTOR);

        let rx = SplitQueue::new(&mem, 0, size, irq.is_none());
        let tx = SplitQueue::new(&mem, qbytes, size, true);
        let mut notifiers = Vec::new();
        for (q, ring) in [(RXQ, &rx), (TXQ, &tx)] {
            t.select_queue(q);
            t.set_queue_size(size);
            let (d, a, u) = ring.iovas(&mem);
            t.set_queue_addresses(d, a, u);
            let want = if q == RXQ && irq.is_some() {
                0
            } else {
                NO_VECTOR
            };
            let got = t.set_queue_msix_vector(want);
            if q == RXQ && irq.is_some() && got != want {
                // The device could not attach the vector: poll only.
                tracing::warn!("virtio-net: device refused MSI-X vector for RX; polling only");
                let _ = pci.disable_msix();
                irq = None;
                rx.set_interrupts(&mem, false);
            }
            notifiers.push(tri!(t.notifier(q)));
            t.enable_queue();
        }
        let tx_notify = notifiers.pop().expect("two notifiers");
        let rx_notify = notifiers.pop().expect("two notifiers");

        let mut me = Self {
            transport: t,
            rx,
            tx,
            rx_notify,
            tx_notify,
            buf_size,
            rx_bufs,
            tx_bufs,
            tx_free: (0..size).rev().collect(),
            rx_done: Vec::with_capacity(usize::from(size)),
            mac: Mac(mac),
            mtu,
            features,
            irq,
            stats: NetStats::default(),
            mem,
            pci,
        };
        for id in 0..size {
            let addr = me.mem.iova_at(me.rx_bufs + usize::from(id) * buf_size);
            me.rx.push(&me.mem, id, addr, buf_size as u32, true);
        }
        me.rx.publish(&me.mem);
        me.transport.add_status(STATUS_DRIVER_OK);
        me.notify_rx();
        Ok(me)
    }

    /// The device's MAC address.
    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// The MTU: the largest Ethernet payload (the frame minus its
    /// [`HEADER_LEN`]-byte header).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The largest frame [`send`](Self::send) accepts (header included,
    /// no FCS).
    pub fn max_frame_len(&self) -> usize {
        self.buf_size - NET_HDR_LEN
    }

    /// Negotiated feature bits.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Entries per queue.
    pub fn queue_size(&self) -> u16 {
        self.rx.size()
    }

    /// The PCI function.
    pub fn pci(&self) -> &P {
        &self.pci
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// The DMA region holding rings and buffers (for diagnostics).
    pub fn dma(&self) -> &DmaRegion {
        &self.mem
    }

    /// If the device broke the virtqueue protocol, why; it must then be
    /// re-initialised.
    pub fn broken(&self) -> Option<String> {
        self.rx.broken().or(self.tx.broken()).map(|s| s.to_string())
    }

    fn check_broken(&self) -> Result<(), VirtioError> {
        match self.broken() {
            Some(s) => Err(VirtioError::DeviceBroken(s)),
            None => Ok(()),
        }
    }

    /// The eventfd signalled when frames arrive (MSI-X), if interrupts are
    /// on. Call [`ack_interrupt`](Self::ack_interrupt) before polling.
    pub fn interrupt_fd(&self) -> Option<&EventFd> {
        self.irq.and_then(|v| self.pci.interrupt_eventfd(v))
    }

    /// Clears a pending interrupt; returns how many arrived.
    pub fn ack_interrupt(&self) -> u64 {
        self.interrupt_fd().and_then(|e| e.read().ok()).unwrap_or(0)
    }

    fn notify_rx(&mut self) {
        if self.rx.device_wants_notify(&self.mem) {
            self.rx_notify.notify();
            self.stats.notifications += 1;
        } else {
            self.stats.notifications_suppressed += 1;
        }
    }

    /// Takes back transmit buffers the device has finished with; returns
    /// how many.
    pub fn reclaim_tx(&mut self) -> usize {
        let mut n = 0;
        while let Some(r) = self.tx.pop_used(&self.mem) {
            match r {
                Ok(Used { id, .. }) => {
                    self.tx_free.push(id);
                    n += 1;
                }
                Err(_) => self.stats.bad_used_id += 1,
            }
        }
        n
    }

    /// Transmit buffers free right now (after reclaiming).
    pub fn tx_available(&mut self) -> usize {
        self.reclaim_tx();
        self.tx_free.len()
    }

    /// Queues one frame made of `parts` (concatenated: Ethernet header,
    /// payload, ...) for transmission. Returns `Ok(false)` if all transmit
    /// buffers are in flight. Frames become visible to the device at
    /// [`flush`](Self::flush).
    pub fn send(&mut self, parts: &[&[u8]]) -> Result<bool, VirtioError> {
        self.check_broken()?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_frame_len() {
            return Err(VirtioError::FrameTooLong {
                len,
                max: self.max_frame_len(),
            });
        }
        if self.tx_free.is_empty() {
            self.reclaim_tx();
        }
        let Some(id) = self.tx_free.pop() else {
            self.stats.tx_ring_full += 1;
            return Ok(false);
        };
        let base = self.tx_bufs + usize::from(id) * self.buf_size;
        self.mem.fill(base, NET_HDR_LEN, 0);
        let mut at = base + NET_HDR_LEN;
        for p in parts {
            self.mem.write_bytes(at, p);
            at += p.len();
        }
        let addr = self.mem.iova_at(base);
        self.tx
            .push(&self.mem, id, addr, (NET_HDR_LEN + len) as u32, false);
        self.stats.tx_frames += 1;
        Ok(true)
    }

    /// Publishes queued frames and rings the transmit doorbell if the
    /// device wants it.
    pub fn flush(&mut self) {
        if self.tx.unpublished() == 0 {
            return;
        }
        self.tx.publish(&self.mem);
        if self.tx.device_wants_notify(&self.mem) {
            self.tx_notify.notify();
            self.stats.notifications += 1;
        } else {
            self.stats.notifications_suppressed += 1;
        }
    }

    /// Shows up to `budget` received frames to `f` (each a view of the
    /// Ethernet frame in its DMA buffer, valid during the call), recycles
    /// their buffers, and returns how many completions were consumed
    /// (including bad ones, which are counted and skipped).
    pub fn receive(
        &mut self,
        budget: usize,
        mut f: impl FnMut(DmaView<'_>),
    ) -> Result<usize, VirtioError> {
        self.check_broken()?;
        let mut consumed = 0;
        // Buffers go back to the device after the whole batch, so a device
        // that completes the same buffer twice in one batch is caught (the
        // second completion names a descriptor that is not in flight).
        self.rx_done.clear();
        while consumed < budget {
            let Some(r) = self.rx.pop_used(&self.mem) else {
                break;
            };
            consumed += 1;
            let Used { id, len } = match r {
                Ok(u) => u,
                Err(_) => {
                    self.stats.bad_used_id += 1;
                    continue;
                }
            };
            self.rx_done.push(id);
            let base = self.rx_bufs + usize::from(id) * self.buf_size;
            let len = len as usize;
            if len < NET_HDR_LEN || len > self.buf_size {
                self.stats.bad_used_len += 1;
            } else if let Some(view) = self.mem.view(base + NET_HDR_LEN, len - NET_HDR_LEN) {
                self.stats.rx_frames += 1;
                f(view);
            }
        }
        for i in 0..self.rx_done.len() {
            let id = self.rx_done[i];
            let addr = self
                .mem
                .iova_at(self.rx_bufs + usize::from(id) * self.buf_size);
            self.rx
                .push(&self.mem, id, addr, self.buf_size as u32, true);
        }
        if self.rx.unpublished() > 0 {
            self.rx.publish(&self.mem);
            self.notify_rx();
        }
        self.check_broken()?;
        Ok(consumed)
    }

    /// Stops the device (virtio reset: no more DMA) and disables MSI-X.
    pub fn shutdown(&mut self) {
        self.transport.set_status(0);
        let _ = self.transport.reset();
        if self.irq.take().is_some() {
            let _ = self.pci.disable_msix();
        }
    }
}

impl<P: PciFunction> Drop for VirtioNet<P> {
    fn drop(&mut self) {
        // The device must stop using the rings before their memory goes.
        self.shutdown();
    }
}

impl<P: PciFunction> EthernetDevice for VirtioNet<P> {
    fn mac(&self) -> Mac {
        VirtioNet::mac(self)
    }
    fn mtu(&self) -> usize {
        VirtioNet::mtu(self)
    }
    fn pci_address(&self) -> PciAddress {
        self.pci().address()
    }
    fn tx_space(&mut self) -> usize {
        self.tx_available()
    }
    fn send(&mut self, parts: &[&[u8]]) -> Result<bool, NicError> {
        Ok(VirtioNet::send(self, parts)?)
    }
    fn flush(&mut self) {
        VirtioNet::flush(self)
    }
    fn receive(
        &mut self,
        budget: usize,
        f: &mut dyn FnMut(DmaView<'_>),
    ) -> Result<usize, NicError> {
        Ok(VirtioNet::receive(self, budget, f)?)
    }
    fn interrupt_fd(&self) -> Option<RawFd> {
        VirtioNet::interrupt_fd(self).map(|e| e.as_raw_fd())
    }
    fn ack_interrupt(&self) {
        VirtioNet::ack_interrupt(self);
    }
    fn shutdown(&mut self) {
        VirtioNet::shutdown(self)
    }
}
