//! VFIO userspace PCI layer and the NIC drivers built on it.
//!
//! Layers, bottom up:
//!
//! 1. [`pci`]: the [`PciFunction`](pci::PciFunction) trait — configuration
//!    space, BARs as [`Mmio`](pci::Mmio) regions, DMA memory
//!    ([`dma::DmaRegion`]), MSI-X eventfds, reset — which every NIC driver
//!    is written against. Two hosts implement it:
//!    * [`vfio::VfioPciFunction`]: a real device bound to `vfio-pci`,
//!      through rust-vmm's `vfio-ioctls`, with DMA memory from 2 MiB huge
//!      pages mapped at IOVA = virtual address;
//!    * [`testing::InMemoryPci`] (feature `test-support`): a device model
//!      in Rust plays the device behind a software IOMMU.
//! 2. NIC drivers: [`virtio`] (virtio-net 1.x, modern PCI) and
//!    [`myri10ge`] (Myricom Myri-10G with its Ethernet firmware, BCL's
//!    Myrinet backend). Each implements [`nic::EthernetDevice`] (whole
//!    Ethernet frames in and out of DMA buffers) and knows nothing of the
//!    method above it.
//! 3. [`method`]: the `vfio` [`Method`](bcl_core::method::Method) — BCL
//!    frames in Ethernet II frames with EtherType 0x88B5 over any
//!    [`nic::EthernetDevice`], with the framing, receive filter,
//!    descriptor grammar and counters of [`bcl_ether`]:
//!    [`VirtioNetMethod`], [`Myri10geMethod`], [`open_nic`].
//!
//! [`sysfs`] reads what the kernel knows (drivers, IOMMU groups), for
//! [`probe`] and the `bcl-vfio` tool.
//!
//! All `unsafe` code of BCL's VFIO support lives in this crate; each block
//! states its contract in a `// SAFETY:` comment. DMA memory is never
//! referenced through Rust references, only through volatile or atomic
//! accessors (see [`dma`]).

pub mod devices;
pub mod dma;
pub mod kind;
pub mod method;
pub mod myri10ge;
pub mod nic;
pub mod pci;
pub mod sysfs;
#[cfg(any(test, doc, feature = "test-support"))]
pub mod testing;
pub mod vfio;
pub mod virtio;

pub use kind::VfioKind;
pub use method::{open_nic, probe, Myri10geMethod, NicMethod, VfioMethodConfig, VirtioNetMethod};
pub use nic::{EthernetDevice, NicError};
