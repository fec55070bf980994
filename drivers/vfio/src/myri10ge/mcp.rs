//! The host interface of Myricom's Myri-10G Ethernet firmware ("MCP",
//! Myricom Control Program, running on the NIC's LANai processor), as the
//! Linux driver's public headers describe it: `myri10ge_mcp.h` (commands,
//! rings, interrupt data) and `myri10ge_mcp_gen_header.h` (the header every
//! firmware image carries). Names follow the header (`MXGEFW_*`, `mcp_*`);
//! the code is ours.
//!
//! Everything the firmware reads or writes is **big-endian** (the LANai is
//! a big-endian processor): command words, ring descriptors, the interrupt
//! data block, the `mcp_gen_header`. The encoders and decoders here produce
//! and take byte arrays in that order; the driver moves whole arrays with
//! [`bytes_to_u64`]-style native-order MMIO stores so that the bytes land in
//! SRAM exactly as laid out.
//!
//! Nothing here touches hardware; the driver ([`super::driver`]) and the
//! device model ([`super::model`]) both build on it, so every layout is
//! written once.

use std::fmt;

/// Firmware interface major version this driver speaks
/// (`MXGEFW_VERSION_MAJOR`).
pub const MXGEFW_VERSION_MAJOR: u32 = 1;
/// Firmware interface minor version this driver speaks
/// (`MXGEFW_VERSION_MINOR`).
pub const MXGEFW_VERSION_MINOR: u32 = 4;

// ---------------------------------------------------------------------------
// SRAM (BAR 0) addresses.

/// Where a firmware image's `mcp_gen_header` offset is stored, both in the
/// image file and in SRAM while it runs (`MCP_HEADER_PTR_OFFSET`).
pub const MCP_HEADER_PTR_OFFSET: u64 = 0x3c;
/// Boot hand-off mailbox: 64 bytes asking the running firmware (the
/// bootstrap) to copy and start a new image (`MXGEFW_BOOT_HANDOFF`).
pub const MXGEFW_BOOT_HANDOFF: u64 = 0xfc_0000;
/// Dummy-RDMA mailbox: 64 bytes enabling or disabling periodic reads from
/// the host, a workaround for chipsets that drop PCIe messages
/// (`MXGEFW_BOOT_DUMMY_RDMA`).
pub const MXGEFW_BOOT_DUMMY_RDMA: u64 = 0xfc_01c0;
/// Command mailbox: one 64-byte [`McpCmd`] per command (`MXGEFW_ETH_CMD`).
pub const MXGEFW_ETH_CMD: u64 = 0xf8_0000;
/// Send area of slice 0 in old firmware (`MXGEFW_ETH_SEND_4`); current
/// drivers ask for the send ring with [`Cmd::GET_SEND_OFFSET`].
pub const MXGEFW_ETH_SEND_4: u64 = 0x20_0000;
/// Small receive ring area in old firmware (`MXGEFW_ETH_RECV_SMALL`).
pub const MXGEFW_ETH_RECV_SMALL: u64 = 0x30_0000;
/// Big receive ring area in old firmware (`MXGEFW_ETH_RECV_BIG`).
pub const MXGEFW_ETH_RECV_BIG: u64 = 0x34_0000;
/// "Send go" doorbell of slice 0, only used with several transmit queues
/// (`MXGEFW_ETH_SEND_GO`).
pub const MXGEFW_ETH_SEND_GO: u64 = 0x38_0000;
/// "Send stop" doorbell of slice 0 (`MXGEFW_ETH_SEND_STOP`).
pub const MXGEFW_ETH_SEND_STOP: u64 = 0x3c_0000;

/// Where the Linux driver copies a firmware image in SRAM before the
/// hand-off (`MYRI10GE_FW_OFFSET`, 1 MiB).
pub const FW_OFFSET: u64 = 1 << 20;
/// Size of the EEPROM string area, which starts at the running firmware's
/// `string_specs` address (`MYRI10GE_EEPROM_STRINGS_SIZE`).
pub const EEPROM_STRINGS_SIZE: usize = 256;
/// Bytes of padding the firmware puts before every received frame
/// (`MXGEFW_PAD`), so that the IP header is 4-byte aligned.
pub const MXGEFW_PAD: usize = 2;
/// Frames up to this length are "small" for the send flags
/// (`MXGEFW_SEND_SMALL_SIZE`).
pub const MXGEFW_SEND_SMALL_SIZE: usize = 1520;
/// Largest MTU the firmware accepts (`MXGEFW_MAX_MTU`).
pub const MXGEFW_MAX_MTU: usize = 9400;
/// Most send descriptors one (non-TSO) frame may use
/// (`MXGEFW_MAX_SEND_DESC`).
pub const MXGEFW_MAX_SEND_DESC: usize = 12;
/// Value the driver puts in a response's `result` before a command; the
/// firmware's answer replaces it (`MYRI10GE_NO_RESPONSE_RESULT`).
pub const NO_RESPONSE_RESULT: u32 = 0xffff_ffff;
/// Confirmation value of the hand-off and dummy-RDMA mailboxes: the
/// firmware writes it to the confirmation address when it is alive
/// (`MYRI10GE_NO_CONFIRM_DATA`).
pub const NO_CONFIRM_DATA: u32 = 0xffff_ffff;
/// The receive-ring "not yet valid" marker: the driver writes it as the
/// first descriptor's `addr_low` of a group of 8, then the real value last
/// (`myri10ge_submit_8rx`).
pub const RX_INVALID_ADDR_LOW: u32 = 0xffff_ffff;
/// Receive descriptors are handed over in groups of this many.
pub const RX_GROUP: usize = 8;
/// Value the Linux driver writes to the interrupt-claim words.
pub const IRQ_CLAIM_VALUE: u32 = 3;

// ---------------------------------------------------------------------------
// Firmware types (mcp_gen_header.mcp_type).

/// `"MX  "`: an MX (Myrinet Express) firmware, not Ethernet.
pub const MCP_TYPE_MX: u32 = 0x4d58_2020;
/// `"PCIE"`: a PCIe-only firmware.
pub const MCP_TYPE_PCIE: u32 = 0x7063_6965;
/// `"ETH "`: the Ethernet firmware this driver speaks to.
pub const MCP_TYPE_ETH: u32 = 0x4554_4820;
/// `"MCP0"`.
pub const MCP_TYPE_MCP0: u32 = 0x4d43_5030;
/// `"    "`: default.
pub const MCP_TYPE_DFLT: u32 = 0x2020_2020;
/// `"ETHZ"`.
pub const MCP_TYPE_ETHZ: u32 = 0x4554_485a;

// ---------------------------------------------------------------------------
// Send flags (mcp_kreq_ether_send.flags).

/// Frame of at most [`MXGEFW_SEND_SMALL_SIZE`] bytes (first segment).
pub const MXGEFW_FLAGS_SMALL: u8 = 0x1;
/// First segment of a frame. Writing it last makes the frame valid.
pub const MXGEFW_FLAGS_FIRST: u8 = 0x2;
/// The cumulative length of previous segments is odd (checksum offload).
pub const MXGEFW_FLAGS_ALIGN_ODD: u8 = 0x4;
/// Checksum offload requested.
pub const MXGEFW_FLAGS_CKSUM: u8 = 0x8;
/// Not a TSO frame.
pub const MXGEFW_FLAGS_NO_TSO: u8 = 0x10;

// ---------------------------------------------------------------------------
// Link states (mcp_irq_data.link_up).

/// Link down (`MXGEFW_LINK_DOWN`).
pub const MXGEFW_LINK_DOWN: u32 = 0;
/// Link up (`MXGEFW_LINK_UP`).
pub const MXGEFW_LINK_UP: u32 = 1;
/// A Myrinet (not Ethernet) peer was detected (`MXGEFW_LINK_MYRINET`).
pub const MXGEFW_LINK_MYRINET: u32 = 2;
/// Unknown (`MXGEFW_LINK_UNKNOWN`).
pub const MXGEFW_LINK_UNKNOWN: u32 = 3;

/// `SET_INTRQ_SIZE` flag: do not check the size strictly.
pub const MXGEFW_CMD_SET_INTRQ_SIZE_FLAG_NO_STRICT_SIZE_CHECK: u32 = 1 << 31;
/// `SET_RSS_MCP_SLOT_TYPE` value for the 4-byte `mcp_slot` ([`slot`]).
pub const MXGEFW_RSS_MCP_SLOT_TYPE_MIN: u32 = 0;

/// A firmware command code (`enum myri10ge_mcp_cmd_type`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cmd(pub u32);

macro_rules! commands {
    ($($(#[$doc:meta])* $name:ident = $value:expr, $text:literal;)*) => {
        impl Cmd {
            $($(#[$doc])* pub const $name: Cmd = Cmd($value);)*

            /// The header's name of the command, if it is one we know.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

commands! {
    /// No operation.
    NONE = 0, "MXGEFW_CMD_NONE";
    /// Resets the firmware's Ethernet state; it then waits for all its
    /// parameters again.
    RESET = 1, "MXGEFW_CMD_RESET";
    /// The running firmware's version.
    GET_MCP_VERSION = 2, "MXGEFW_GET_MCP_VERSION";
    /// data0/data1: low/high half of the interrupt queue (rx-done ring)
    /// address; data2: slice.
    SET_INTRQ_DMA = 3, "MXGEFW_CMD_SET_INTRQ_DMA";
    /// Big receive buffer size in bytes, a power of two.
    SET_BIG_BUFFER_SIZE = 4, "MXGEFW_CMD_SET_BIG_BUFFER_SIZE";
    /// Small receive buffer size in bytes.
    SET_SMALL_BUFFER_SIZE = 5, "MXGEFW_CMD_SET_SMALL_BUFFER_SIZE";
    /// SRAM offset of the send ring (data0: slice).
    GET_SEND_OFFSET = 6, "MXGEFW_CMD_GET_SEND_OFFSET";
    /// SRAM offset of the small receive ring (data0: slice).
    GET_SMALL_RX_OFFSET = 7, "MXGEFW_CMD_GET_SMALL_RX_OFFSET";
    /// SRAM offset of the big receive ring (data0: slice).
    GET_BIG_RX_OFFSET = 8, "MXGEFW_CMD_GET_BIG_RX_OFFSET";
    /// SRAM offset of the interrupt-claim words.
    GET_IRQ_ACK_OFFSET = 9, "MXGEFW_CMD_GET_IRQ_ACK_OFFSET";
    /// SRAM offset of the legacy-interrupt deassert word.
    GET_IRQ_DEASSERT_OFFSET = 10, "MXGEFW_CMD_GET_IRQ_DEASSERT_OFFSET";
    /// Send ring size in bytes.
    GET_SEND_RING_SIZE = 11, "MXGEFW_CMD_GET_SEND_RING_SIZE";
    /// Receive ring size in bytes (each of small and big).
    GET_RX_RING_SIZE = 12, "MXGEFW_CMD_GET_RX_RING_SIZE";
    /// Interrupt queue (rx-done ring) size in bytes.
    SET_INTRQ_SIZE = 13, "MXGEFW_CMD_SET_INTRQ_SIZE";
    /// Brings the Ethernet interface up.
    ETHERNET_UP = 14, "MXGEFW_CMD_ETHERNET_UP";
    /// Brings it down; the firmware answers with a link-down interrupt.
    ETHERNET_DOWN = 15, "MXGEFW_CMD_ETHERNET_DOWN";
    /// Largest frame (Ethernet header and VLAN tag included).
    SET_MTU = 16, "MXGEFW_CMD_SET_MTU";
    /// SRAM offset of the interrupt-coalescing delay (microseconds).
    GET_INTR_COAL_DELAY_OFFSET = 17, "MXGEFW_CMD_GET_INTR_COAL_DELAY_OFFSET";
    /// Statistics interval in microseconds.
    SET_STATS_INTERVAL = 18, "MXGEFW_CMD_SET_STATS_INTERVAL";
    /// Old form of `SET_STATS_DMA_V2` (40-byte block).
    SET_STATS_DMA_OBSOLETE = 19, "MXGEFW_CMD_SET_STATS_DMA_OBSOLETE";
    /// Receive every unicast frame.
    ENABLE_PROMISC = 20, "MXGEFW_ENABLE_PROMISC";
    /// Receive only unicast frames for our MAC.
    DISABLE_PROMISC = 21, "MXGEFW_DISABLE_PROMISC";
    /// data0: MAC bytes 0..4, data1: bytes 4..6 (big-endian packed).
    SET_MAC_ADDRESS = 22, "MXGEFW_SET_MAC_ADDRESS";
    /// Honour and send pause frames.
    ENABLE_FLOW_CONTROL = 23, "MXGEFW_ENABLE_FLOW_CONTROL";
    /// Ignore pause frames.
    DISABLE_FLOW_CONTROL = 24, "MXGEFW_DISABLE_FLOW_CONTROL";
    /// DMA benchmark.
    DMA_TEST = 25, "MXGEFW_DMA_TEST";
    /// Receive every multicast frame.
    ENABLE_ALLMULTI = 26, "MXGEFW_ENABLE_ALLMULTI";
    /// Receive only joined multicast groups.
    DISABLE_ALLMULTI = 27, "MXGEFW_DISABLE_ALLMULTI";
    /// Join a multicast group.
    JOIN_MULTICAST_GROUP = 28, "MXGEFW_JOIN_MULTICAST_GROUP";
    /// Leave a multicast group.
    LEAVE_MULTICAST_GROUP = 29, "MXGEFW_LEAVE_MULTICAST_GROUP";
    /// Leave all multicast groups.
    LEAVE_ALL_MULTICAST_GROUPS = 30, "MXGEFW_LEAVE_ALL_MULTICAST_GROUPS";
    /// data0/data1: address of the [`IrqData`] block; data2: its size
    /// (low 16 bits) and slice (high 16 bits).
    SET_STATS_DMA_V2 = 31, "MXGEFW_CMD_SET_STATS_DMA_V2";
    /// DMA test that fails on unaligned completions.
    UNALIGNED_TEST = 32, "MXGEFW_CMD_UNALIGNED_TEST";
    /// Whether the chipset is known to be unaligned.
    UNALIGNED_STATUS = 33, "MXGEFW_CMD_UNALIGNED_STATUS";
    /// Always use N big buffers per frame.
    ALWAYS_USE_N_BIG_BUFFERS = 34, "MXGEFW_CMD_ALWAYS_USE_N_BIG_BUFFERS";
    /// Most RSS queues (slices).
    GET_MAX_RSS_QUEUES = 35, "MXGEFW_CMD_GET_MAX_RSS_QUEUES";
    /// Enables RSS queues.
    ENABLE_RSS_QUEUES = 36, "MXGEFW_CMD_ENABLE_RSS_QUEUES";
    /// Header size limit of IPv6 TSO.
    GET_MAX_TSO6_HDR_SIZE = 44, "MXGEFW_CMD_GET_MAX_TSO6_HDR_SIZE";
    /// TSO mode (Linux or NDIS style).
    SET_TSO_MODE = 45, "MXGEFW_CMD_SET_TSO_MODE";
    /// Which `mcp_slot` layout to use (0: the 4-byte one).
    SET_RSS_MCP_SLOT_TYPE = 52, "MXGEFW_CMD_SET_RSS_MCP_SLOT_TYPE";
    /// SRAM offset of the DCA control.
    GET_DCA_OFFSET = 56, "MXGEFW_CMD_GET_DCA_OFFSET";
    /// Allow receive buffers at any address.
    RELAX_RXBUFFER_ALIGNMENT = 64, "MXGEFW_CMD_RELAX_RXBUFFER_ALIGNMENT";
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "command {}", self.0),
        }
    }
}

impl fmt::Debug for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A command's result code (`enum myri10ge_mcp_cmd_status`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmdStatus(pub u32);

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident = $value:expr, $text:literal;)*) => {
        impl CmdStatus {
            $($(#[$doc])* pub const $name: CmdStatus = CmdStatus($value);)*

            /// The header's name of the result code, if we know it.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    /// Success.
    OK = 0, "MXGEFW_CMD_OK";
    /// The firmware does not know the command.
    UNKNOWN = 1, "MXGEFW_CMD_UNKNOWN";
    /// A parameter is out of range.
    ERROR_RANGE = 2, "MXGEFW_CMD_ERROR_RANGE";
    /// Busy; try again.
    ERROR_BUSY = 3, "MXGEFW_CMD_ERROR_BUSY";
    /// Empty.
    ERROR_EMPTY = 4, "MXGEFW_CMD_ERROR_EMPTY";
    /// Closed.
    ERROR_CLOSED = 5, "MXGEFW_CMD_ERROR_CLOSED";
    /// Hash error.
    ERROR_HASH_ERROR = 6, "MXGEFW_CMD_ERROR_HASH_ERROR";
    /// Bad port.
    ERROR_BAD_PORT = 7, "MXGEFW_CMD_ERROR_BAD_PORT";
    /// Out of resources.
    ERROR_RESOURCES = 8, "MXGEFW_CMD_ERROR_RESOURCES";
    /// Multicast table full or address unknown.
    ERROR_MULTICAST = 9, "MXGEFW_CMD_ERROR_MULTICAST";
    /// Unaligned completions seen.
    ERROR_UNALIGNED = 10, "MXGEFW_CMD_ERROR_UNALIGNED";
    /// No MDIO.
    ERROR_NO_MDIO = 11, "MXGEFW_CMD_ERROR_NO_MDIO";
    /// I2C failure.
    ERROR_I2C_FAILURE = 12, "MXGEFW_CMD_ERROR_I2C_FAILURE";
    /// I2C absent.
    ERROR_I2C_ABSENT = 13, "MXGEFW_CMD_ERROR_I2C_ABSENT";
    /// Bad PCIe link.
    ERROR_BAD_PCIE_LINK = 14, "MXGEFW_CMD_ERROR_BAD_PCIE_LINK";
}

impl fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "unknown result code {:#x}", self.0),
        }
    }
}

impl fmt::Debug for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------
// Byte helpers.

/// The native-order `u64` whose in-memory bytes are `b`: what to pass to
/// an 8-byte MMIO store so that SRAM receives exactly `b`.
pub fn bytes_to_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(w)
}

/// The native-order `u32` whose in-memory bytes are `b`.
pub fn bytes_to_u32(b: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[..4]);
    u32::from_ne_bytes(w)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

// ---------------------------------------------------------------------------
// Structures.

/// `struct mcp_cmd` (64 bytes, big-endian), written by PIO to
/// [`MXGEFW_ETH_CMD`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McpCmd {
    /// `cmd`: the command code.
    pub cmd: u32,
    /// `data0` (low half of a 64-bit argument).
    pub data0: u32,
    /// `data1` (high half of a 64-bit argument).
    pub data1: u32,
    /// `data2`.
    pub data2: u32,
    /// `response_addr` {high, low}: where the firmware DMAs its
    /// `mcp_cmd_response` ([`response`]).
    pub response_addr: u64,
}

impl McpCmd {
    /// Size of the structure.
    pub const LEN: usize = 64;

    /// The 64 bytes as they go to SRAM.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&self.cmd.to_be_bytes());
        b[4..8].copy_from_slice(&self.data0.to_be_bytes());
        b[8..12].copy_from_slice(&self.data1.to_be_bytes());
        b[12..16].copy_from_slice(&self.data2.to_be_bytes());
        b[16..20].copy_from_slice(&((self.response_addr >> 32) as u32).to_be_bytes());
        b[20..24].copy_from_slice(&(self.response_addr as u32).to_be_bytes());
        b
    }

    /// Decodes the 64 bytes of the mailbox.
    pub fn from_bytes(b: &[u8; 64]) -> Self {
        Self {
            cmd: be32(b, 0),
            data0: be32(b, 4),
            data1: be32(b, 8),
            data2: be32(b, 12),
            response_addr: (u64::from(be32(b, 16)) << 32) | u64::from(be32(b, 20)),
        }
    }
}

/// `struct mcp_cmd_response` (8 bytes, big-endian): DMAed by the firmware
/// to the command's `response_addr`.
pub mod response {
    /// Offset of `data` (the command's answer; also the confirmation word
    /// of the hand-off and dummy-RDMA mailboxes).
    pub const DATA: usize = 0;
    /// Offset of `result` ([`CmdStatus`](super::CmdStatus)).
    pub const RESULT: usize = 4;
    /// Size of the structure.
    pub const LEN: usize = 8;
}

/// `struct mcp_kreq_ether_send` (16 bytes, big-endian): one send
/// descriptor, written by PIO into the send ring in SRAM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KreqEtherSend {
    /// `addr_high`/`addr_low`: bus address of the segment.
    pub addr: u64,
    /// `pseudo_hdr_offset` (checksum offload; MSS for TSO).
    pub pseudo_hdr_offset: u16,
    /// `length` of the segment.
    pub length: u16,
    /// `pad`.
    pub pad: u8,
    /// `rdma_count`: on a frame's first descriptor, how many descriptors
    /// the frame uses.
    pub rdma_count: u8,
    /// `cksum_offset`.
    pub cksum_offset: u8,
    /// `flags` (`MXGEFW_FLAGS_*`).
    pub flags: u8,
}

impl KreqEtherSend {
    /// Size of the structure.
    pub const LEN: usize = 16;
    /// Offset of the last 32-bit word (`pad`, `rdma_count`,
    /// `cksum_offset`, `flags`), which the driver rewrites last to make a
    /// frame valid.
    pub const FLAGS_WORD: usize = 12;
    /// Offset of `flags`.
    pub const FLAGS: usize = 15;

    /// The 16 bytes as they go to SRAM.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&((self.addr >> 32) as u32).to_be_bytes());
        b[4..8].copy_from_slice(&(self.addr as u32).to_be_bytes());
        b[8..10].copy_from_slice(&self.pseudo_hdr_offset.to_be_bytes());
        b[10..12].copy_from_slice(&self.length.to_be_bytes());
        b[12] = self.pad;
        b[13] = self.rdma_count;
        b[14] = self.cksum_offset;
        b[15] = self.flags;
        b
    }

    /// Decodes a descriptor.
    pub fn from_bytes(b: &[u8; 16]) -> Self {
        Self {
            addr: (u64::from(be32(b, 0)) << 32) | u64::from(be32(b, 4)),
            pseudo_hdr_offset: be16(b, 8),
            length: be16(b, 10),
            pad: b[12],
            rdma_count: b[13],
            cksum_offset: b[14],
            flags: b[15],
        }
    }
}

/// `struct mcp_kreq_ether_recv` (8 bytes, big-endian): one receive buffer,
/// written by PIO into a receive ring in groups of [`RX_GROUP`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KreqEtherRecv {
    /// `addr_high`/`addr_low`: bus address of the buffer.
    pub addr: u64,
}

impl KreqEtherRecv {
    /// Size of the structure.
    pub const LEN: usize = 8;
    /// Offset of `addr_low`.
    pub const ADDR_LOW: usize = 4;

    /// The 8 bytes as they go to SRAM.
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..4].copy_from_slice(&((self.addr >> 32) as u32).to_be_bytes());
        b[4..8].copy_from_slice(&(self.addr as u32).to_be_bytes());
        b
    }

    /// Decodes a descriptor.
    pub fn from_bytes(b: &[u8; 8]) -> Self {
        Self {
            addr: (u64::from(be32(b, 0)) << 32) | u64::from(be32(b, 4)),
        }
    }

    /// The `addr_low` word of an encoded descriptor.
    pub fn addr_low(b: &[u8; 8]) -> u32 {
        be32(b, 4)
    }
}

/// `struct mcp_slot` (4 bytes, big-endian): one entry of the rx-done ring
/// (the "interrupt queue") in host memory. A non-zero `length` marks a
/// received frame; the driver zeroes it after use.
pub mod slot {
    /// Offset of `checksum` (a partial checksum of the frame).
    pub const CHECKSUM: usize = 0;
    /// Offset of `length`.
    pub const LENGTH: usize = 2;
    /// Size of the structure.
    pub const LEN: usize = 4;
}

/// `struct mcp_dma_addr` size; the Linux driver counts receive ring
/// entries with it (`GET_RX_RING_SIZE / sizeof(mcp_dma_addr)`).
pub const MCP_DMA_ADDR_LEN: usize = 8;

/// `struct mcp_irq_data` (64 bytes, big-endian): the block the firmware
/// DMAs to host memory before it interrupts (set with
/// [`Cmd::SET_STATS_DMA_V2`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqData {
    /// `future_use[1]`.
    pub future_use: u32,
    /// `dropped_pause`.
    pub dropped_pause: u32,
    /// `dropped_unicast_filtered`.
    pub dropped_unicast_filtered: u32,
    /// `dropped_bad_crc32`.
    pub dropped_bad_crc32: u32,
    /// `dropped_bad_phy`.
    pub dropped_bad_phy: u32,
    /// `dropped_multicast_filtered`.
    pub dropped_multicast_filtered: u32,
    /// `send_done_count`: frames the firmware has finished sending (wraps).
    pub send_done_count: u32,
    /// `link_up` (`MXGEFW_LINK_*`).
    pub link_up: u32,
    /// `dropped_link_overflow`.
    pub dropped_link_overflow: u32,
    /// `dropped_link_error_or_filtered`.
    pub dropped_link_error_or_filtered: u32,
    /// `dropped_runt`.
    pub dropped_runt: u32,
    /// `dropped_overrun`.
    pub dropped_overrun: u32,
    /// `dropped_no_small_buffer`.
    pub dropped_no_small_buffer: u32,
    /// `dropped_no_big_buffer`.
    pub dropped_no_big_buffer: u32,
    /// `rdma_tags_available`.
    pub rdma_tags_available: u32,
    /// `tx_stopped`.
    pub tx_stopped: u8,
    /// `link_down`: the interface went down (answer to
    /// [`Cmd::ETHERNET_DOWN`]).
    pub link_down: u8,
    /// `stats_updated`: the counters and `link_up` changed.
    pub stats_updated: u8,
    /// `valid`: non-zero when the block is fresh; bit 0 set when frames
    /// were received. The driver zeroes it.
    pub valid: u8,
}

impl IrqData {
    /// Size of the structure.
    pub const LEN: usize = 64;
    /// Size of the block before `SET_STATS_DMA_V2` (`MXGEFW_OLD_IRQ_DATA_LEN`:
    /// from `send_done_count` to the end).
    pub const OLD_LEN: usize = 40;
    /// Offset of `send_done_count`.
    pub const SEND_DONE_COUNT: usize = 24;
    /// Offset of `valid`.
    pub const VALID: usize = 63;
    /// Offset of `link_down`.
    pub const LINK_DOWN: usize = 61;

    /// Decodes the block.
    pub fn from_bytes(b: &[u8; 64]) -> Self {
        Self {
            future_use: be32(b, 0),
            dropped_pause: be32(b, 4),
            dropped_unicast_filtered: be32(b, 8),
            dropped_bad_crc32: be32(b, 12),
            dropped_bad_phy: be32(b, 16),
            dropped_multicast_filtered: be32(b, 20),
            send_done_count: be32(b, 24),
            link_up: be32(b, 28),
            dropped_link_overflow: be32(b, 32),
            dropped_link_error_or_filtered: be32(b, 36),
            dropped_runt: be32(b, 40),
            dropped_overrun: be32(b, 44),
            dropped_no_small_buffer: be32(b, 48),
            dropped_no_big_buffer: be32(b, 52),
            rdma_tags_available: be32(b, 56),
            tx_stopped: b[60],
            link_down: b[61],
            stats_updated: b[62],
            valid: b[63],
        }
    }

    /// Encodes the block.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (i, v) in [
            self.future_use,
            self.dropped_pause,
            self.dropped_unicast_filtered,
            self.dropped_bad_crc32,
            self.dropped_bad_phy,
            self.dropped_multicast_filtered,
            self.send_done_count,
            self.link_up,
            self.dropped_link_overflow,
            self.dropped_link_error_or_filtered,
            self.dropped_runt,
            self.dropped_overrun,
            self.dropped_no_small_buffer,
            self.dropped_no_big_buffer,
            self.rdma_tags_available,
        ]
        .into_iter()
        .enumerate()
        {
            b[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[60] = self.tx_stopped;
        b[61] = self.link_down;
        b[62] = self.stats_updated;
        b[63] = self.valid;
        b
    }
}

/// Offsets in `struct mcp_gen_header` (all fields big-endian).
pub mod gen_header {
    /// `header_length`.
    pub const HEADER_LENGTH: usize = 0;
    /// `mcp_type` (`MCP_TYPE_*`).
    pub const MCP_TYPE: usize = 4;
    /// `version`: a NUL-terminated string such as `"1.4.57 -- ..."`.
    pub const VERSION: usize = 8;
    /// Length of the `version` field.
    pub const VERSION_LEN: usize = 128;
    /// `mcp_private`.
    pub const MCP_PRIVATE: usize = 136;
    /// `sram_size`, filled by the running firmware.
    pub const SRAM_SIZE: usize = 140;
    /// `string_specs`: SRAM address of the EEPROM strings, filled by the
    /// running firmware. The Linux driver takes it as the SRAM size, too.
    pub const STRING_SPECS: usize = 144;
    /// `string_specs_len`.
    pub const STRING_SPECS_LEN: usize = 148;
    /// `handoff_id_major` (16 bits).
    pub const HANDOFF_ID_MAJOR: usize = 164;
    /// Size of the structure as the Linux header defines it.
    pub const LEN: usize = 192;
}

/// A validated Ethernet firmware image: an `mcp_gen_header`-tagged blob.
#[derive(Clone, PartialEq, Eq)]
pub struct FirmwareImage {
    bytes: Vec<u8>,
    header_offset: usize,
    version: String,
    version_numbers: (u32, u32, u32),
}

impl fmt::Debug for FirmwareImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirmwareImage")
            .field("len", &self.bytes.len())
            .field("header_offset", &self.header_offset)
            .field("version", &self.version)
            .finish()
    }
}

/// Why a firmware image or header was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FirmwareError {
    /// The image is shorter than a header pointer or does not fit the
    /// SRAM above [`FW_OFFSET`].
    #[error("firmware image of {len} bytes: {reason}")]
    BadSize {
        /// The image length.
        len: usize,
        /// Why.
        reason: String,
    },
    /// The header pointer at 0x3c is unaligned or points past the image.
    #[error("bad firmware header pointer {offset:#x} ({reason})")]
    BadHeaderPointer {
        /// The pointer.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// Not an Ethernet firmware.
    #[error("firmware type {found:#010x} ({text:?}) is not the Ethernet firmware (\"ETH \")")]
    WrongType {
        /// The `mcp_type` found.
        found: u32,
        /// It as text.
        text: String,
    },
    /// The interface version is not the one we speak.
    #[error("firmware version {found:?}: this driver needs {MXGEFW_VERSION_MAJOR}.{MXGEFW_VERSION_MINOR}.x")]
    WrongVersion {
        /// The version string found.
        found: String,
    },
}

/// Parses `"1.4.57 -- 2013/..."` into (1, 4, 57); missing numbers are 0
/// (as `sscanf("%d.%d.%d")` leaves them).
pub fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let mut nums = [0u32; 3];
    let mut rest = s.trim_start();
    for (i, n) in nums.iter_mut().enumerate() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return (i > 0).then_some((nums[0], nums[1], nums[2]));
        }
        *n = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        if i < 2 {
            match rest.strip_prefix('.') {
                Some(r) => rest = r,
                None => return Some((nums[0], nums[1], nums[2])),
            }
        }
    }
    Some((nums[0], nums[1], nums[2]))
}

/// Checks an `mcp_gen_header` (at least [`gen_header::LEN`] bytes): an
/// Ethernet firmware of interface version 1.4 (as
/// `myri10ge_validate_firmware` does). Returns the version string and
/// numbers.
pub fn validate_header(hdr: &[u8]) -> Result<(String, (u32, u32, u32)), FirmwareError> {
    let mcp_type = be32(hdr, gen_header::MCP_TYPE);
    if mcp_type != MCP_TYPE_ETH {
        let text = mcp_type
            .to_be_bytes()
            .iter()
            .map(|&c| {
                if c.is_ascii_graphic() || c == b' ' {
                    c as char
                } else {
                    '?'
                }
            })
            .collect();
        return Err(FirmwareError::WrongType {
            found: mcp_type,
            text,
        });
    }
    let field = &hdr[gen_header::VERSION..gen_header::VERSION + gen_header::VERSION_LEN];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let version = String::from_utf8_lossy(&field[..end]).into_owned();
    match parse_version(&version) {
        Some(v) if v.0 == MXGEFW_VERSION_MAJOR && v.1 == MXGEFW_VERSION_MINOR => Ok((version, v)),
        _ => Err(FirmwareError::WrongVersion { found: version }),
    }
}

impl FirmwareImage {
    /// Validates an image file's bytes as `myri10ge_load_hotplug_firmware`
    /// does: at least a header pointer long, smaller than the SRAM above
    /// [`FW_OFFSET`] (`sram_size - FW_OFFSET`), a 4-byte-aligned header
    /// pointer at [`MCP_HEADER_PTR_OFFSET`] with the whole header inside
    /// the image, and the header of an Ethernet firmware of version 1.4.
    pub fn parse(bytes: Vec<u8>, sram_size: u64) -> Result<Self, FirmwareError> {
        let len = bytes.len();
        let min = MCP_HEADER_PTR_OFFSET as usize + 4;
        if len < min {
            return Err(FirmwareError::BadSize {
                len,
                reason: format!("shorter than the {min} bytes up to the header pointer"),
            });
        }
        let room = sram_size.saturating_sub(FW_OFFSET);
        if len as u64 >= room {
            return Err(FirmwareError::BadSize {
                len,
                reason: format!(
                    "does not fit the {room} bytes of SRAM above {FW_OFFSET:#x} (SRAM size {sram_size:#x})"
                ),
            });
        }
        let hdr = u64::from(be32(&bytes, MCP_HEADER_PTR_OFFSET as usize));
        if !hdr.is_multiple_of(4) {
            return Err(FirmwareError::BadHeaderPointer {
                offset: hdr,
                reason: "not 4-byte aligned".into(),
            });
        }
        if hdr + gen_header::LEN as u64 > len as u64 {
            return Err(FirmwareError::BadHeaderPointer {
                offset: hdr,
                reason: format!(
                    "a {}-byte header there ends past the image",
                    gen_header::LEN
                ),
            });
        }
        let h = hdr as usize;
        let (version, version_numbers) = validate_header(&bytes[h..h + gen_header::LEN])?;
        Ok(Self {
            bytes,
            header_offset: h,
            version,
            version_numbers,
        })
    }

    /// The image.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True if the image is empty (never, once validated).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Offset of its `mcp_gen_header`.
    pub fn header_offset(&self) -> usize {
        self.header_offset
    }

    /// Its version string.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Its version as (major, minor, tiny).
    pub fn version_numbers(&self) -> (u32, u32, u32) {
        self.version_numbers
    }
}

/// What the EEPROM strings say about the board.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EepromInfo {
    /// `MAC=`: the board's MAC address.
    pub mac: bcl_ether::Mac,
    /// `SN=`: serial number, if present and numeric.
    pub serial_number: Option<u64>,
    /// `PC=`: product code, if present.
    pub product_code: Option<String>,
}

/// Parses the EEPROM strings: NUL-terminated `KEY=value` strings, ended by
/// an empty one, within [`EEPROM_STRINGS_SIZE`] bytes (as
/// `myri10ge_read_mac_addr` reads them, e.g. `SN=123456\0MAC=00:60:dd:
/// 47:ab:cd\0PC=10G-PCIE-8B-S\0\0`). The MAC must be in
/// [`bcl_ether::Mac`]'s text form (six two-digit hex octets); stricter
/// than the Linux parser, which accepts anything `simple_strtoul` does.
pub fn parse_eeprom_strings(area: &[u8]) -> Result<EepromInfo, String> {
    let area = &area[..area.len().min(EEPROM_STRINGS_SIZE)];
    let mut mac = None;
    let mut info = EepromInfo::default();
    for s in area.split(|&b| b == 0) {
        if s.is_empty() {
            break;
        }
        let s = String::from_utf8_lossy(s);
        if let Some(m) = s.strip_prefix("MAC=") {
            let m: bcl_ether::Mac = m
                .parse()
                .map_err(|_| format!("EEPROM string {s:?} is not a MAC address"))?;
            mac = Some(m);
        } else if let Some(sn) = s.strip_prefix("SN=") {
            info.serial_number = sn.trim().parse().ok();
        } else if let Some(pc) = s.strip_prefix("PC=") {
            info.product_code = Some(pc.to_string());
        }
    }
    info.mac = mac.ok_or("the EEPROM strings have no MAC= entry")?;
    if info.mac.is_multicast() || info.mac == [0; 6] {
        return Err(format!(
            "the EEPROM MAC {} is not a unicast address",
            info.mac
        ));
    }
    Ok(info)
}

/// The partial checksum the model puts in [`slot::CHECKSUM`]: the
/// ones'-complement sum of the frame after its 14-byte Ethernet header, as
/// big-endian 16-bit words, folded to 16 bits (what the Linux driver hands
/// to the stack as `CHECKSUM_COMPLETE` for IP frames). Our driver does not
/// use it: BCL frames carry their own CRC32C.
pub fn partial_checksum(frame: &[u8]) -> u16 {
    let data = frame.get(bcl_ether::HEADER_LEN..).unwrap_or(&[]);
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += u32::from(w);
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_status_names_come_from_the_header() {
        assert_eq!(Cmd::RESET.to_string(), "MXGEFW_CMD_RESET (1)");
        assert_eq!(Cmd::ETHERNET_UP.to_string(), "MXGEFW_CMD_ETHERNET_UP (14)");
        assert_eq!(Cmd::SET_STATS_DMA_V2.0, 31);
        assert_eq!(Cmd(999).to_string(), "command 999");
        assert_eq!(
            CmdStatus::ERROR_BUSY.to_string(),
            "MXGEFW_CMD_ERROR_BUSY (3)"
        );
        assert_eq!(CmdStatus(0x77).to_string(), "unknown result code 0x77");
    }

    #[test]
    fn structures_have_the_header_layout_and_round_trip() {
        let c = McpCmd {
            cmd: 14,
            data0: 0x0102_0304,
            data1: 5,
            data2: 6,
            response_addr: 0x0000_0040_0000_1000,
        };
        let b = c.to_bytes();
        assert_eq!(&b[0..4], &[0, 0, 0, 14]);
        assert_eq!(&b[4..8], &[1, 2, 3, 4]);
        assert_eq!(&b[16..24], &[0, 0, 0, 0x40, 0, 0, 0x10, 0]);
        assert_eq!(McpCmd::from_bytes(&b), c);

        let s = KreqEtherSend {
            addr: 0x1_2345_6789,
            pseudo_hdr_offset: 0,
            length: 1514,
            pad: 0,
            rdma_count: 1,
            cksum_offset: 0,
            flags: MXGEFW_FLAGS_FIRST | MXGEFW_FLAGS_NO_TSO,
        };
        let b = s.to_bytes();
        assert_eq!(&b[0..8], &[0, 0, 0, 1, 0x23, 0x45, 0x67, 0x89]);
        assert_eq!(&b[10..12], &1514u16.to_be_bytes());
        assert_eq!(b[KreqEtherSend::FLAGS], 0x12);
        assert_eq!(KreqEtherSend::from_bytes(&b), s);

        let r = KreqEtherRecv {
            addr: 0xab_cdef_0123,
        };
        let b = r.to_bytes();
        assert_eq!(KreqEtherRecv::addr_low(&b), 0xcdef_0123);
        assert_eq!(KreqEtherRecv::from_bytes(&b), r);

        let mut d = IrqData {
            send_done_count: 0x0102_0304,
            dropped_no_big_buffer: 9,
            valid: 3,
            ..Default::default()
        };
        d.link_up = MXGEFW_LINK_UP;
        let b = d.to_bytes();
        assert_eq!(&b[IrqData::SEND_DONE_COUNT..28], &[1, 2, 3, 4]);
        assert_eq!(b[IrqData::VALID], 3);
        assert_eq!(&b[52..56], &9u32.to_be_bytes());
        assert_eq!(IrqData::from_bytes(&b), d);
        assert_eq!(IrqData::LEN - IrqData::SEND_DONE_COUNT, IrqData::OLD_LEN);
    }

    #[test]
    fn versions_parse_like_sscanf() {
        assert_eq!(parse_version("1.4.57 -- 2013/07/25"), Some((1, 4, 57)));
        assert_eq!(parse_version("1.4"), Some((1, 4, 0)));
        assert_eq!(parse_version("2"), Some((2, 0, 0)));
        assert_eq!(parse_version("x1.4"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn eeprom_strings_give_mac_serial_and_product_code() {
        let s = b"SN=123456\0MAC=00:60:dd:47:ab:cd\0PC=10G-PCIE-8B-S\0\0garbage";
        let i = parse_eeprom_strings(s).unwrap();
        assert_eq!(i.mac, [0x00, 0x60, 0xdd, 0x47, 0xab, 0xcd]);
        assert_eq!(i.serial_number, Some(123456));
        assert_eq!(i.product_code.as_deref(), Some("10G-PCIE-8B-S"));
        for bad in [
            &b"SN=1\0\0"[..],
            b"MAC=00:60:dd:47:ab\0\0",
            b"MAC=00:60:dd:47:ab:zz\0\0",
            b"MAC=0:60:dd:47:ab:cd:1\0\0",
            b"MAC=01:00:5e:00:00:01\0\0",
            b"\0MAC=00:60:dd:47:ab:cd\0",
            &[0xff; 256][..],
        ] {
            assert!(parse_eeprom_strings(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn partial_checksum_sums_the_payload_words() {
        let mut f = vec![0u8; 14];
        f.extend_from_slice(&[0x12, 0x34, 0xff, 0xff, 0x01]);
        // 0x1234 + 0xffff + 0x0100 = 0x11333 -> 0x1334
        assert_eq!(partial_checksum(&f), 0x1334);
        assert_eq!(partial_checksum(&[1, 2, 3]), 0);
    }
}
