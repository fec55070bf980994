//! Myricom Myri-10G NICs (PCI vendor 0x14c1) running Myricom's Ethernet
//! firmware: the Myrinet backend of BCL.
//!
//! The firmware's host interface is public (the Linux `myri10ge` driver's
//! `myri10ge_mcp.h`): [`mcp`] has its definitions, [`driver`] the user-space
//! driver on the [`PciFunction`](crate::pci::PciFunction) layer, and (with
//! feature `test-support`) [`model`] an executable model of the firmware's
//! side, which the driver is tested against since no card exists here.
//!
//! # How the NIC is driven
//!
//! BAR 0 maps the NIC's SRAM (16 MiB of address space, 2 MiB of SRAM). The
//! driver
//!
//! 1. reads the running firmware's `mcp_gen_header` (pointer at SRAM
//!    0x3c) for the EEPROM string area and takes the MAC from its `MAC=`
//!    string;
//! 2. loads a firmware image ([`Firmware`]): PIO-copies it to SRAM at
//!    1 MiB, reads it back, and asks the running firmware to hand off to
//!    it through the `MXGEFW_BOOT_HANDOFF` mailbox, waiting for the
//!    confirmation word it DMAs back; then enables the dummy RDMAs
//!    (`MXGEFW_BOOT_DUMMY_RDMA`) as Linux does;
//! 3. talks to the firmware through the command mailbox
//!    (`MXGEFW_ETH_CMD`, 64-byte [`mcp::McpCmd`] written by PIO, 8-byte
//!    response DMAed back): reset, interrupt queue, buffer sizes, ring
//!    offsets and sizes (the firmware's answers size everything), MAC,
//!    statistics block, Ethernet up;
//! 4. sends by writing [`mcp::KreqEtherSend`] descriptors into the send
//!    ring in SRAM (the first descriptor's flags last), receives by posting
//!    [`mcp::KreqEtherRecv`] buffers to the small and big receive rings in
//!    groups of 8 and consuming the rx-done ring (`mcp_slot`) the firmware
//!    writes in host memory, and learns of finished sends and link changes
//!    from the [`mcp::IrqData`] block it DMAs before each interrupt.
//!
//! Interrupts only wake a blocking waiter: everything works by polling, so
//! a lost interrupt cannot stall the driver.

use std::path::PathBuf;
use std::time::Duration;

use crate::pci::PciError;

pub mod driver;
pub mod mcp;

#[cfg(any(test, doc, feature = "test-support"))]
pub mod model;

#[cfg(test)]
pub(crate) mod tests;

pub use driver::{LinkState, Myri10ge, Myri10geStats};

/// PCI vendor ID of Myricom.
pub const MYRICOM_VENDOR_ID: u16 = 0x14c1;
/// PCI device ID of the Myri-10G (Lanai Z8E) NIC
/// (`PCI_DEVICE_ID_MYRICOM_MYRI10GE_Z8E`).
pub const MYRI10GE_Z8E_DEVICE_ID: u16 = 0x0008;
/// PCI device ID of the Myri-10G Z8E, second variant
/// (`PCI_DEVICE_ID_MYRICOM_MYRI10GE_Z8E_9`); the Linux driver treats both
/// alike.
pub const MYRI10GE_Z8E_9_DEVICE_ID: u16 = 0x0009;

/// Where Debian's `firmware-myricom` package installs the Ethernet firmware
/// this driver loads by default: the variant that tolerates unaligned PCIe
/// completions, which goes with the 2 KiB transmit boundary we always use.
pub const DEFAULT_FIRMWARE_PATH: &str = "/lib/firmware/myri10ge_ethp_z8e.dat";

/// Which firmware the NIC runs.
#[derive(Clone, PartialEq, Eq)]
pub enum Firmware {
    /// Load the image file at this path (an `mcp_gen_header`-tagged blob
    /// such as `myri10ge_ethp_z8e.dat`).
    File(PathBuf),
    /// Load this image.
    Image(Vec<u8>),
    /// Keep the firmware the NIC is running (the one it booted from its
    /// EEPROM), as the Linux driver does when no image can be loaded. It
    /// must be an Ethernet firmware of interface version 1.4.
    Running,
}

impl std::fmt::Debug for Firmware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Firmware::File(p) => write!(f, "File({})", p.display()),
            Firmware::Image(b) => write!(f, "Image({} bytes)", b.len()),
            Firmware::Running => write!(f, "Running"),
        }
    }
}

/// Settings of a [`Myri10ge`] driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Myri10geConfig {
    /// The firmware to run.
    pub firmware: Firmware,
    /// MTU: largest Ethernet payload, 68..=9000. Receive buffers and the
    /// firmware's frame limit follow from it.
    pub mtu: usize,
    /// Use MSI-X vector 0 to wake a blocking waiter.
    pub interrupts: bool,
    /// Interrupt coalescing delay in microseconds (Linux: 75).
    pub interrupt_delay_us: u32,
    /// Honour and send Ethernet pause frames (Linux default: on).
    pub flow_control: bool,
    /// Receive unicast frames for other MACs, too.
    pub promiscuous: bool,
    /// How long a firmware command may take (Linux: 15 ms).
    pub command_timeout: Duration,
    /// How long the hand-off to a new image, and the link-down answer at
    /// shutdown, may take (Linux: about 0.5 s and 1 s).
    pub handoff_timeout: Duration,
}

impl Default for Myri10geConfig {
    fn default() -> Self {
        Self {
            firmware: Firmware::File(DEFAULT_FIRMWARE_PATH.into()),
            mtu: 1500,
            interrupts: true,
            interrupt_delay_us: 75,
            flow_control: true,
            promiscuous: false,
            command_timeout: Duration::from_millis(50),
            handoff_timeout: Duration::from_secs(1),
        }
    }
}

/// Errors of the Myri-10G driver. Firmware command failures name the
/// command and the firmware's result code.
#[derive(Debug, thiserror::Error)]
pub enum Myri10geError {
    /// A PCI-level operation failed.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The function is not a Myri-10G NIC.
    #[error("{address} is {vendor:04x}:{device:04x}, not a Myri-10G NIC (14c1:0008 or 14c1:0009)")]
    WrongDevice {
        /// PCI address.
        address: String,
        /// Vendor ID found.
        vendor: u16,
        /// Device ID found.
        device: u16,
    },
    /// BAR 0 cannot hold the SRAM and the mailboxes.
    #[error(
        "BAR 0 of {len:#x} bytes is too small for the Myri-10G SRAM and mailboxes (need {need:#x})"
    )]
    BarTooSmall {
        /// The BAR's length.
        len: u64,
        /// The length needed.
        need: u64,
    },
    /// The SRAM layout the running firmware reports is unusable (header
    /// pointer, SRAM size, EEPROM strings).
    #[error("NIC SRAM: {0}")]
    Sram(String),
    /// The firmware image or the running firmware is not one we can use.
    #[error("firmware {what}: {error}")]
    Firmware {
        /// Which firmware (a path, "image" or "running").
        what: String,
        /// Why not.
        #[source]
        error: mcp::FirmwareError,
    },
    /// The firmware image file could not be read.
    #[error("reading firmware image {path}: {error}")]
    FirmwareIo {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// Reading the image back from SRAM gave other bytes.
    #[error("firmware image read back from SRAM differs at byte {offset:#x} (wrote {wrote:#04x}, read {read:#04x})")]
    FirmwareReadback {
        /// Offset in the image.
        offset: usize,
        /// Byte written.
        wrote: u8,
        /// Byte read back.
        read: u8,
    },
    /// The hand-off to the new image was not confirmed.
    #[error("firmware hand-off failed: {0}")]
    Handoff(String),
    /// The firmware answered a command with an error code.
    #[error("firmware command {cmd} failed: {status}")]
    CommandFailed {
        /// The command.
        cmd: mcp::Cmd,
        /// The firmware's result code.
        status: mcp::CmdStatus,
    },
    /// The firmware did not answer a command in time.
    #[error("firmware command {cmd} timed out after {timeout:?} (no response DMAed back)")]
    CommandTimeout {
        /// The command.
        cmd: mcp::Cmd,
        /// How long we waited.
        timeout: Duration,
    },
    /// The firmware answered a command with a value we cannot use.
    #[error("firmware command {cmd} answered {data:#x}: {reason}")]
    BadAnswer {
        /// The command.
        cmd: mcp::Cmd,
        /// The answer.
        data: u32,
        /// Why it cannot be used.
        reason: String,
    },
    /// The configuration is impossible.
    #[error("bad Myri-10G configuration: {0}")]
    Config(String),
    /// A frame does not fit.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLong {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The interface is not up (it was shut down).
    #[error("the Myri-10G interface is down (shut down)")]
    Down,
}
