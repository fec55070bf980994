//! What the NIC drivers ([`crate::virtio`], [`crate::myri10ge`]) offer and
//! the `vfio` method ([`crate::method`]) needs: whole Ethernet frames in
//! and out of DMA buffers. The drivers implement [`EthernetDevice`]; the
//! method is written against it and imports the drivers, never the other
//! way round.

use std::os::fd::RawFd;

use bcl_ether::Mac;

use crate::dma::DmaView;
use crate::pci::PciAddress;

/// An error from a NIC driver, for [`EthernetDevice`].
pub type NicError = Box<dyn std::error::Error + Send + Sync>;

/// A NIC driver as the `vfio` method sees it: send and receive whole
/// Ethernet frames (no FCS) through DMA buffers.
pub trait EthernetDevice: Send {
    /// The NIC's MAC address.
    fn mac(&self) -> Mac;
    /// Largest Ethernet payload (the frame minus its
    /// [`bcl_ether::HEADER_LEN`]-byte header).
    fn mtu(&self) -> usize;
    /// The PCI function's address.
    fn pci_address(&self) -> PciAddress;
    /// Transmit buffers free now.
    fn tx_space(&mut self) -> usize;
    /// Queues one frame made of `parts`; `Ok(false)` if no buffer is free.
    fn send(&mut self, parts: &[&[u8]]) -> Result<bool, NicError>;
    /// Hands queued frames to the device.
    fn flush(&mut self);
    /// Shows up to `budget` received frames to `f` (views valid during the
    /// call) and recycles their buffers; returns completions consumed.
    fn receive(&mut self, budget: usize, f: &mut dyn FnMut(DmaView<'_>))
        -> Result<usize, NicError>;
    /// An fd that becomes readable when frames arrive, if interrupts are on.
    fn interrupt_fd(&self) -> Option<RawFd>;
    /// Clears a pending interrupt (call before polling).
    fn ack_interrupt(&self);
    /// Stops the device.
    fn shutdown(&mut self);
}
