//! The Myri-10G driver: firmware load and hand-off, the command protocol,
//! ring set-up, send, receive and interrupt data, on a
//! [`PciFunction`].
//!
//! The sequence follows the Linux `myri10ge` driver (`myri10ge_probe`,
//! `myri10ge_load_firmware`, `myri10ge_reset`, `myri10ge_open`); where we
//! differ, the comment says so. Every value the NIC reports (SRAM layout,
//! ring offsets and sizes, rx-done lengths, send-done counts) is checked
//! before use; nothing the device writes can make the driver panic or touch
//! memory outside its buffers.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use crate::dma::{DmaRegion, DmaView};
use crate::nic::{EthernetDevice, NicError};
use crate::pci::{
    EventFd, Mmio, MmioWindow, PciAddress, PciFunction, CFG_COMMAND, COMMAND_BUS_MASTER,
};
use bcl_ether::{
    Mac, HEADER_LEN as ETH_HLEN, MIN_FRAME_LEN as ETH_ZLEN, VLAN_TAG_LEN as VLAN_HLEN,
};

use super::mcp::{
    self, bytes_to_u32, bytes_to_u64, response, slot, Cmd, CmdStatus, EepromInfo, FirmwareImage,
    IrqData, KreqEtherRecv, KreqEtherSend, McpCmd, EEPROM_STRINGS_SIZE, FW_OFFSET,
    MCP_DMA_ADDR_LEN, MCP_HEADER_PTR_OFFSET, MXGEFW_BOOT_DUMMY_RDMA, MXGEFW_BOOT_HANDOFF,
    MXGEFW_ETH_CMD, MXGEFW_FLAGS_FIRST, MXGEFW_FLAGS_NO_TSO, MXGEFW_FLAGS_SMALL,
    MXGEFW_MAX_SEND_DESC, MXGEFW_PAD, MXGEFW_SEND_SMALL_SIZE, NO_CONFIRM_DATA, NO_RESPONSE_RESULT,
    RX_GROUP, RX_INVALID_ADDR_LOW,
};
use super::{
    Firmware, Myri10geConfig, Myri10geError, MYRI10GE_Z8E_9_DEVICE_ID, MYRI10GE_Z8E_DEVICE_ID,
    MYRICOM_VENDOR_ID,
};

// Ethernet sizes are bcl-ether's, under the names the Linux driver uses:
// ETH_HLEN (header), VLAN_HLEN (the firmware's frame limit includes one
// tag, as in Linux) and ETH_ZLEN (shorter frames are padded to it).
/// Smallest MTU we accept (IPv4's minimum, as Linux).
pub const MIN_MTU: usize = 68;
/// Largest MTU we accept (Linux: `MYRI10GE_MAX_ETHER_MTU` 9014 minus the
/// header).
pub const MAX_MTU: usize = 9000;
/// Transmit segments never cross a multiple of this (Linux `tx_boundary`:
/// 2 KiB is safe with both firmware variants; 4 KiB needs aligned PCIe
/// completions).
pub const TX_BOUNDARY: usize = 2048;
/// Largest ring (entries) we accept from the firmware.
pub const MAX_RING_ENTRIES: u32 = 1 << 14;
// A largest frame fits in the descriptors one frame may use.
const _: () = assert!((MAX_MTU + ETH_HLEN).div_ceil(TX_BOUNDARY) <= MXGEFW_MAX_SEND_DESC);

/// Polls without an interrupt block, after which the driver re-arms the
/// firmware's interrupt by writing the claim words again (see
/// [`Myri10geStats::irq_rearms`]).
pub const STALL_POLLS: u32 = 4096;

/// Control memory: the command response (also the hand-off and
/// dummy-RDMA confirmation word) at 0, the interrupt data block at 64.
const CTL_RESPONSE: usize = 0;
const CTL_IRQ: usize = 64;
const CTL_LEN: usize = 4096;
/// BAR 0 must reach past the last mailbox.
const BAR_NEED: u64 = MXGEFW_BOOT_DUMMY_RDMA + 64;

/// The link state the firmware reports (`mcp_irq_data.link_up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// No report yet.
    Unknown,
    /// `MXGEFW_LINK_DOWN`.
    Down,
    /// `MXGEFW_LINK_UP`.
    Up,
    /// `MXGEFW_LINK_MYRINET`: the peer speaks Myrinet, not Ethernet.
    Myrinet,
    /// Any other value (`MXGEFW_LINK_UNKNOWN` or nonsense).
    Other(u32),
}

impl LinkState {
    fn from_fw(v: u32) -> Self {
        match v {
            mcp::MXGEFW_LINK_DOWN => LinkState::Down,
            mcp::MXGEFW_LINK_UP => LinkState::Up,
            mcp::MXGEFW_LINK_MYRINET => LinkState::Myrinet,
            v => LinkState::Other(v),
        }
    }
}

/// Counters of a [`Myri10ge`] driver. The firmware's own counters are in
/// [`Myri10ge::firmware_counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Myri10geStats {
    /// Frames handed to the NIC.
    pub tx_frames: u64,
    /// Send descriptors written.
    pub tx_descriptors: u64,
    /// Send attempts refused because the send ring was full.
    pub tx_ring_full: u64,
    /// Frames received and shown.
    pub rx_frames: u64,
    /// Of those, frames that arrived in small buffers.
    pub rx_small: u64,
    /// Of those, frames that arrived in big buffers.
    pub rx_big: u64,
    /// Groups of 8 receive buffers posted.
    pub rx_groups_posted: u64,
    /// rx-done entries whose length does not fit the buffer or is shorter
    /// than an Ethernet header (buffer consumed, frame skipped).
    pub bad_rx_len: u64,
    /// rx-done entries for a ring with no posted buffer (skipped).
    pub rx_no_buffer: u64,
    /// Interrupt blocks whose `send_done_count` claims more frames than
    /// were in flight (ignored).
    pub bad_send_done: u64,
    /// Interrupt data blocks handled.
    pub irq_blocks: u64,
    /// Times the interrupt was re-armed after [`STALL_POLLS`] polls without
    /// an interrupt block (recovery from an interrupt the host never saw).
    pub irq_rearms: u64,
    /// Link state changes reported.
    pub link_changes: u64,
    /// Link-down events (answers to `ETHERNET_DOWN`).
    pub link_down_events: u64,
    /// Drops in `rdma_tags_available` (the firmware's RDMAs timed out).
    pub rdma_timeouts: u64,
    /// Dummy-RDMA requests the firmware did not confirm.
    pub dummy_rdma_failures: u64,
}

/// The firmware mailboxes, control memory and PCI function.
struct Ctl<P: PciFunction> {
    sram: P::Bar,
    cmd_box: MmioWindow<P::Bar>,
    handoff_box: MmioWindow<P::Bar>,
    rdma_box: MmioWindow<P::Bar>,
    command_timeout: Duration,
    handoff_timeout: Duration,
    /// The firmware knows addresses of our memory (it may DMA).
    active: bool,
    dummy_rdma: bool,
    irq: Option<u32>,
    mem: DmaRegion,
    pci: P,
}

/// Spins, then yields, then sleeps, until `done` or the deadline.
fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut round = 0u32;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return done();
        }
        round += 1;
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl<P: PciFunction> Ctl<P> {
    fn response_data(&self) -> u32 {
        // Raw bytes: the confirmation value is all ones in any byte order.
        self.mem
            .load_u32(CTL_RESPONSE + response::DATA, Ordering::Acquire)
    }

    /// Writes 64 bytes to a mailbox as eight 64-bit stores, in order (as
    /// `myri10ge_pio_copy` does).
    fn pio64(window: &MmioWindow<P::Bar>, bytes: &[u8; 64]) {
        for (i, chunk) in bytes.chunks_exact(8).enumerate() {
            window.write_u64(8 * i as u64, bytes_to_u64(chunk));
        }
    }

    /// Sends one command and waits for its response
    /// (`myri10ge_send_cmd`): the result word is set to all ones, the
    /// 64-byte `mcp_cmd` is written to the mailbox, and the firmware DMAs
    /// `{data, result}` back.
    fn command(&self, cmd: Cmd, data: [u32; 3]) -> Result<u32, Myri10geError> {
        let result_at = CTL_RESPONSE + response::RESULT;
        self.mem
            .store_u32(result_at, NO_RESPONSE_RESULT, Ordering::Release);
        fence(Ordering::SeqCst);
        let c = McpCmd {
            cmd: cmd.0,
            data0: data[0],
            data1: data[1],
            data2: data[2],
            response_addr: self.mem.iova_at(CTL_RESPONSE),
        };
        Self::pio64(&self.cmd_box, &c.to_bytes());
        let answered = || self.mem.load_u32(result_at, Ordering::Acquire) != NO_RESPONSE_RESULT;
        if !wait_for(self.command_timeout, answered) {
            return Err(Myri10geError::CommandTimeout {
                cmd,
                timeout: self.command_timeout,
            });
        }
        let result = u32::from_be(self.mem.load_u32(result_at, Ordering::Acquire));
        let value = u32::from_be(self.mem.read_u32(CTL_RESPONSE + response::DATA));
        if result == CmdStatus::OK.0 {
            Ok(value)
        } else {
            Err(Myri10geError::CommandFailed {
                cmd,
                status: CmdStatus(result),
            })
        }
    }

    /// A boot mailbox request (hand-off or dummy RDMA): clears the
    /// confirmation word, writes the 16 big-endian words, waits for the
    /// firmware to DMA [`NO_CONFIRM_DATA`] there.
    fn boot_request(&self, window: &MmioWindow<P::Bar>, words: &[u32], timeout: Duration) -> bool {
        self.mem
            .store_u32(CTL_RESPONSE + response::DATA, 0, Ordering::Release);
        fence(Ordering::SeqCst);
        let mut b = [0u8; 64];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        Self::pio64(window, &b);
        wait_for(timeout, || self.response_data() == NO_CONFIRM_DATA)
    }

    fn confirm_addr(&self) -> (u32, u32) {
        let a = self.mem.iova_at(CTL_RESPONSE + response::DATA);
        ((a >> 32) as u32, a as u32)
    }

    /// Enables or disables the firmware's periodic dummy reads from host
    /// memory (`myri10ge_dummy_rdma`); a failure is only counted, as in
    /// Linux.
    fn set_dummy_rdma(&mut self, enable: bool) -> bool {
        let (hi, lo) = self.confirm_addr();
        let words = [hi, lo, NO_CONFIRM_DATA, hi, lo, u32::from(enable)];
        let ok = self.boot_request(&self.rdma_box, &words, self.command_timeout);
        if ok {
            self.dummy_rdma = enable;
        } else {
            tracing::warn!(
                "myri10ge {}: dummy RDMA {} not confirmed",
                self.pci.address(),
                if enable { "enable" } else { "disable" }
            );
        }
        ok
    }

    /// Copies `image` to SRAM at [`FW_OFFSET`] (256 bytes at a time, each
    /// chunk followed by a read to flush posted writes), reads it back,
    /// and asks the running firmware to hand off to it
    /// (`myri10ge_load_firmware`): copy from `FW_OFFSET + 8`, `len - 8`
    /// bytes, to SRAM 8, jump to 0.
    fn handoff(&mut self, image: &FirmwareImage) -> Result<(), Myri10geError> {
        let bytes = image.bytes();
        // Linux copies len / 8 quadwords and drops a tail; we pad it with
        // zeros instead (firmware images are multiples of 8 bytes anyway).
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().next_multiple_of(8), 0);
        for (i, chunk) in padded.chunks(256).enumerate() {
            let base = FW_OFFSET + 256 * i as u64;
            for (j, q) in chunk.chunks_exact(8).enumerate() {
                self.sram.write_u64(base + 8 * j as u64, bytes_to_u64(q));
            }
            let _ = self.sram.read_u32(0);
        }
        for (i, q) in padded.chunks_exact(8).enumerate() {
            let back = self.sram.read_u64(FW_OFFSET + 8 * i as u64).to_ne_bytes();
            if let Some(k) = (0..8).find(|&k| back[k] != q[k]) {
                return Err(Myri10geError::FirmwareReadback {
                    offset: 8 * i + k,
                    wrote: q[k],
                    read: back[k],
                });
            }
        }
        self.active = true;
        let (hi, lo) = self.confirm_addr();
        let len = bytes.len() as u32;
        let words = [
            hi,
            lo,
            NO_CONFIRM_DATA,
            (FW_OFFSET + 8) as u32, // where the code starts
            len - 8,                // its length
            8,                      // where to copy it
            0,                      // where to jump
        ];
        if self.boot_request(&self.handoff_box, &words, self.handoff_timeout) {
            Ok(())
        } else {
            Err(Myri10geError::Handoff(format!(
                "the firmware did not confirm the hand-off to {:?} within {:?}",
                image.version(),
                self.handoff_timeout
            )))
        }
    }

    /// Stops everything the firmware does with our memory: dummy RDMAs
    /// off, `MXGEFW_CMD_RESET`, MSI-X off, bus mastering off. Best effort.
    fn quiesce(&mut self) {
        if self.active {
            if self.dummy_rdma {
                self.set_dummy_rdma(false);
            }
            if let Err(e) = self.command(Cmd::RESET, [0; 3]) {
                tracing::warn!("myri10ge {}: reset at shutdown: {e}", self.pci.address());
            }
            self.active = false;
        }
        if self.irq.take().is_some() {
            let _ = self.pci.disable_msix();
        }
        // Not in Linux: without bus mastering nothing can DMA into memory
        // we are about to free, whatever the firmware does.
        if let Ok(c) = self.pci.config_read_u16(CFG_COMMAND) {
            let _ = self
                .pci
                .config_write_u16(CFG_COMMAND, c & !COMMAND_BUS_MASTER);
        }
    }
}

/// One receive ring (small or big): descriptors in SRAM, buffers in DMA
/// memory, one fixed buffer per ring slot.
struct RxRing<B> {
    window: MmioWindow<B>,
    mask: u32,
    /// Buffers consumed (rx-done entries taken for this ring).
    cnt: u32,
    /// Buffers posted to the firmware.
    fill: u32,
    /// Offset of slot 0's buffer in the receive memory.
    base: usize,
    stride: usize,
    /// Most bytes the firmware may write into one buffer (pad included).
    cap: usize,
}

impl<B: Mmio> RxRing<B> {
    fn entries(&self) -> u32 {
        self.mask + 1
    }

    fn buffer(&self, slot: u32) -> usize {
        self.base + slot as usize * self.stride
    }

    /// Posts groups of 8 buffers while a whole group is free
    /// (`myri10ge_alloc_rx_pages` + `myri10ge_submit_8rx`): the group's
    /// first `addr_low` is written as all ones with the others, then its
    /// real value last, which hands the group over.
    fn refill(&mut self, mem: &DmaRegion) -> u64 {
        let mut groups = 0;
        while self.fill.wrapping_sub(self.cnt) as usize + RX_GROUP <= self.entries() as usize {
            let first = self.fill & self.mask;
            let mut first_low = 0;
            fence(Ordering::SeqCst);
            for i in 0..RX_GROUP as u32 {
                let s = (first + i) & self.mask;
                let addr = mem.iova_at(self.buffer(s));
                let mut d = KreqEtherRecv { addr }.to_bytes();
                if i == 0 {
                    first_low = bytes_to_u32(&d[KreqEtherRecv::ADDR_LOW..]);
                    d[KreqEtherRecv::ADDR_LOW..]
                        .copy_from_slice(&RX_INVALID_ADDR_LOW.to_be_bytes());
                }
                self.window
                    .write_u64(u64::from(s) * KreqEtherRecv::LEN as u64, bytes_to_u64(&d));
            }
            fence(Ordering::SeqCst);
            self.window.write_u32(
                u64::from(first) * KreqEtherRecv::LEN as u64 + KreqEtherRecv::ADDR_LOW as u64,
                first_low,
            );
            self.fill = self.fill.wrapping_add(RX_GROUP as u32);
            groups += 1;
        }
        groups
    }
}

/// The send ring: descriptors in SRAM, one [`TX_BOUNDARY`]-sized chunk of
/// DMA memory per ring slot, so that no segment crosses the boundary.
struct TxRing<B> {
    window: MmioWindow<B>,
    mask: u32,
    /// Descriptors written.
    req: u32,
    /// Descriptors completed.
    done: u32,
    /// Frames completed (the firmware's `send_done_count` we have seen).
    pkt_done: u32,
    /// Descriptors used by each frame in flight, oldest first.
    in_flight: VecDeque<u8>,
}

impl<B> TxRing<B> {
    /// Free descriptors, keeping two in reserve as Linux does
    /// (`avail = mask - 1 - (req - done)`).
    fn avail(&self) -> usize {
        (self.mask as usize)
            .saturating_sub(1)
            .saturating_sub(self.req.wrapping_sub(self.done) as usize)
    }
}

/// A Myri-10G NIC driven from user space (see the [module
/// documentation](super)).
pub struct Myri10ge<P: PciFunction> {
    mac: Mac,
    eeprom: EepromInfo,
    firmware_version: String,
    sram_size: u64,
    mtu: usize,
    small_bytes: usize,
    big_bytes: usize,
    tx: TxRing<P::Bar>,
    small: RxRing<P::Bar>,
    big: RxRing<P::Bar>,
    /// rx-done ring: entries and frames consumed.
    rx_done_mask: u32,
    rx_done_cnt: u32,
    irq_claim: MmioWindow<P::Bar>,
    rx_claim_pending: bool,
    quiet_polls: u32,
    up: bool,
    link: LinkState,
    rdma_tags: u32,
    counters: IrqData,
    stats: Myri10geStats,
    // Dropped after `Drop::drop` has quiesced the NIC, and before `ctl`
    // (which owns the PCI function).
    rx_mem: DmaRegion,
    tx_mem: DmaRegion,
    ctl: Ctl<P>,
}

impl<P: PciFunction> std::fmt::Debug for Myri10ge<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Myri10ge")
            .field("address", &self.ctl.pci.address())
            .field("mac", &self.mac)
            .field("firmware", &self.firmware_version)
            .field("mtu", &self.mtu)
            .field("send_ring", &(self.tx.mask + 1))
            .field("rx_ring", &self.small.entries())
            .field("link", &self.link)
            .finish()
    }
}

/// The firmware's answer as a validated SRAM window of `len` bytes.
fn sram_window<B: Mmio + Clone>(
    sram: &B,
    cmd: Cmd,
    offset: u32,
    len: u64,
) -> Result<MmioWindow<B>, Myri10geError> {
    if !offset.is_multiple_of(8) {
        return Err(Myri10geError::BadAnswer {
            cmd,
            data: offset,
            reason: "the offset is not 8-byte aligned".into(),
        });
    }
    MmioWindow::new(sram.clone(), u64::from(offset), len).ok_or_else(|| Myri10geError::BadAnswer {
        cmd,
        data: offset,
        reason: format!(
            "{offset:#x}+{len:#x} is outside BAR 0 ({:#x} bytes)",
            sram.len()
        ),
    })
}

/// A ring size answer in bytes, as a power-of-two number of entries of
/// `entry` bytes within `min..=MAX_RING_ENTRIES`.
fn ring_entries(cmd: Cmd, bytes: u32, entry: usize, min: u32) -> Result<u32, Myri10geError> {
    let n = bytes / entry as u32;
    if !bytes.is_multiple_of(entry as u32)
        || !n.is_power_of_two()
        || n < min
        || n > MAX_RING_ENTRIES
    {
        return Err(Myri10geError::BadAnswer {
            cmd,
            data: bytes,
            reason: format!(
                "a ring must be a power-of-two number of {entry}-byte entries, {min}..={MAX_RING_ENTRIES}"
            ),
        });
    }
    Ok(n)
}

/// Runs `$e`; on error, quiesces the NIC before the error (and any DMA
/// memory in scope) is returned.
macro_rules! tri {
    ($ctl:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                $ctl.quiesce();
                return Err(e.into());
            }
        }
    };
}

impl<P: PciFunction> Myri10ge<P> {
    /// Initialises the NIC: reads the EEPROM strings, loads and hands off
    /// to the firmware, resets it, sets up the interrupt queue, rings and
    /// statistics block, posts all receive buffers and brings Ethernet up.
    /// On failure the NIC is left reset with bus mastering off.
    pub fn new(pci: P, config: Myri10geConfig) -> Result<Self, Myri10geError> {
        let (vendor, device) = pci.ids()?;
        if vendor != MYRICOM_VENDOR_ID
            || (device != MYRI10GE_Z8E_DEVICE_ID && device != MYRI10GE_Z8E_9_DEVICE_ID)
        {
            return Err(Myri10geError::WrongDevice {
                address: pci.address().to_string(),
                vendor,
                device,
            });
        }
        if !(MIN_MTU..=MAX_MTU).contains(&config.mtu) {
            return Err(Myri10geError::Config(format!(
                "MTU {} is outside {MIN_MTU}..={MAX_MTU}",
                config.mtu
            )));
        }
        let sram = pci.map_bar(0)?;
        if sram.len() < BAR_NEED {
            return Err(Myri10geError::BarTooSmall {
                len: sram.len(),
                need: BAR_NEED,
            });
        }
        let window = |at: u64| MmioWindow::new(sram.clone(), at, 64).expect("checked BAR_NEED");
        pci.enable_bus_master()?;
        let mem = pci.alloc_dma(CTL_LEN)?;
        let mut ctl = Ctl {
            cmd_box: window(MXGEFW_ETH_CMD),
            handoff_box: window(MXGEFW_BOOT_HANDOFF),
            rdma_box: window(MXGEFW_BOOT_DUMMY_RDMA),
            sram,
            command_timeout: config.command_timeout,
            handoff_timeout: config.handoff_timeout,
            active: false,
            dummy_rdma: false,
            irq: None,
            mem,
            pci,
        };
        let (sram_size, eeprom) = tri!(ctl, read_sram_layout(&ctl.sram));
        let firmware_version = tri!(ctl, load_firmware(&mut ctl, &config.firmware, sram_size));
        ctl.active = true;
        // Linux enables the dummy RDMAs after every (re)load; a failure is
        // only reported.
        let rdma_ok = ctl.set_dummy_rdma(true);
        Self::open(ctl, config, sram_size, eeprom, firmware_version, rdma_ok)
    }

    fn open(
        mut ctl: Ctl<P>,
        config: Myri10geConfig,
        sram_size: u64,
        eeprom: EepromInfo,
        firmware_version: String,
        rdma_ok: bool,
    ) -> Result<Self, Myri10geError> {
        let mtu = config.mtu;
        // myri10ge_get_firmware_capabilities: the interrupt queue holds
        // two entries per receive-ring entry (small and big).
        let rx_bytes = tri!(ctl, ctl.command(Cmd::GET_RX_RING_SIZE, [0; 3]));
        let rx_entries = tri!(
            ctl,
            ring_entries(
                Cmd::GET_RX_RING_SIZE,
                rx_bytes,
                MCP_DMA_ADDR_LEN,
                RX_GROUP as u32
            )
        );
        let slots = 2 * rx_entries;

        // Buffer sizes as myri10ge_open chooses them.
        let small_bytes = if mtu <= 1500 { 128 - MXGEFW_PAD } else { 1518 };
        let small_cap = small_bytes + MXGEFW_PAD;
        let small_stride = small_cap.next_power_of_two();
        let big_bytes = (mtu + ETH_HLEN + VLAN_HLEN + MXGEFW_PAD).next_power_of_two();
        let done_len = (slots as usize * slot::LEN).next_multiple_of(4096);
        let small_len = (rx_entries as usize * small_stride).next_multiple_of(4096);
        let rx_mem = tri!(
            ctl,
            ctl.pci
                .alloc_dma(done_len + small_len + rx_entries as usize * big_bytes)
        );

        // myri10ge_reset.
        tri!(ctl, ctl.command(Cmd::RESET, [0; 3]));
        // The 4-byte mcp_slot; older firmware does not know the command
        // and uses that slot anyway, so failures are ignored as in Linux.
        match ctl.command(
            Cmd::SET_RSS_MCP_SLOT_TYPE,
            [mcp::MXGEFW_RSS_MCP_SLOT_TYPE_MIN, 0, 0],
        ) {
            Ok(_) | Err(Myri10geError::CommandFailed { .. }) => {}
            Err(e) => tri!(ctl, Err(e)),
        }
        tri!(
            ctl,
            ctl.command(Cmd::SET_INTRQ_SIZE, [slots * slot::LEN as u32, 0, 0])
        );
        let done_iova = rx_mem.iova();
        tri!(
            ctl,
            ctl.command(
                Cmd::SET_INTRQ_DMA,
                [done_iova as u32, (done_iova >> 32) as u32, 0]
            )
        );
        let ack = tri!(ctl, ctl.command(Cmd::GET_IRQ_ACK_OFFSET, [0; 3]));
        let irq_claim = tri!(ctl, sram_window(&ctl.sram, Cmd::GET_IRQ_ACK_OFFSET, ack, 8));
        // Only legacy INTx needs the deassert word; we use MSI-X or
        // polling, but check the answer like the others.
        let deassert = tri!(ctl, ctl.command(Cmd::GET_IRQ_DEASSERT_OFFSET, [0; 3]));
        tri!(
            ctl,
            MmioWindow::new(ctl.sram.clone(), u64::from(deassert), 4)
                .filter(|_| deassert % 4 == 0)
                .ok_or_else(|| Myri10geError::BadAnswer {
                    cmd: Cmd::GET_IRQ_DEASSERT_OFFSET,
                    data: deassert,
                    reason: "not a 4-byte word inside BAR 0".into(),
                })
        );
        let coal = tri!(ctl, ctl.command(Cmd::GET_INTR_COAL_DELAY_OFFSET, [0; 3]));
        let coal_w = tri!(
            ctl,
            MmioWindow::new(ctl.sram.clone(), u64::from(coal), 4)
                .filter(|_| coal % 4 == 0)
                .ok_or_else(|| Myri10geError::BadAnswer {
                    cmd: Cmd::GET_INTR_COAL_DELAY_OFFSET,
                    data: coal,
                    reason: "not a 4-byte word inside BAR 0".into(),
                })
        );
        coal_w.write_u32(0, config.interrupt_delay_us.to_be());
        rx_mem.fill(0, slots as usize * slot::LEN, 0);
        let mac = eeprom.mac.octets();
        tri!(
            ctl,
            ctl.command(
                Cmd::SET_MAC_ADDRESS,
                [
                    u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]),
                    u32::from(u16::from_be_bytes([mac[4], mac[5]])),
                    0
                ]
            )
        );
        let pause = if config.flow_control {
            Cmd::ENABLE_FLOW_CONTROL
        } else {
            Cmd::DISABLE_FLOW_CONTROL
        };
        tri!(ctl, ctl.command(pause, [0; 3]));
        let promisc = if config.promiscuous {
            Cmd::ENABLE_PROMISC
        } else {
            Cmd::DISABLE_PROMISC
        };
        tri!(ctl, ctl.command(promisc, [0; 3]));
        // All multicast (and broadcast) frames: the method filters.
        tri!(ctl, ctl.command(Cmd::ENABLE_ALLMULTI, [0; 3]));

        // myri10ge_open: ring locations and sizes from the firmware.
        let send_off = tri!(ctl, ctl.command(Cmd::GET_SEND_OFFSET, [0; 3]));
        let small_off = tri!(ctl, ctl.command(Cmd::GET_SMALL_RX_OFFSET, [0; 3]));
        let big_off = tri!(ctl, ctl.command(Cmd::GET_BIG_RX_OFFSET, [0; 3]));
        let tx_bytes = tri!(ctl, ctl.command(Cmd::GET_SEND_RING_SIZE, [0; 3]));
        let segs_max = (mtu + ETH_HLEN).div_ceil(TX_BOUNDARY) as u32;
        let tx_entries = tri!(
            ctl,
            ring_entries(
                Cmd::GET_SEND_RING_SIZE,
                tx_bytes,
                KreqEtherSend::LEN,
                (segs_max + 2).next_power_of_two().max(4)
            )
        );
        let rx_again = tri!(ctl, ctl.command(Cmd::GET_RX_RING_SIZE, [0; 3]));
        if rx_again != rx_bytes {
            tri!(
                ctl,
                Err(Myri10geError::BadAnswer {
                    cmd: Cmd::GET_RX_RING_SIZE,
                    data: rx_again,
                    reason: format!("it said {rx_bytes:#x} before the reset"),
                })
            );
        }
        let tx_window = tri!(
            ctl,
            sram_window(
                &ctl.sram,
                Cmd::GET_SEND_OFFSET,
                send_off,
                u64::from(tx_entries) * KreqEtherSend::LEN as u64
            )
        );
        let rx_win = |cmd, off| {
            sram_window(
                &ctl.sram,
                cmd,
                off,
                u64::from(rx_entries) * KreqEtherRecv::LEN as u64,
            )
        };
        let small_window = tri!(ctl, rx_win(Cmd::GET_SMALL_RX_OFFSET, small_off));
        let big_window = tri!(ctl, rx_win(Cmd::GET_BIG_RX_OFFSET, big_off));
        let tx_mem = tri!(ctl, ctl.pci.alloc_dma(tx_entries as usize * TX_BOUNDARY));

        let mut me = Self {
            mac: Mac(mac),
            eeprom,
            firmware_version,
            sram_size,
            mtu,
            small_bytes,
            big_bytes,
            tx: TxRing {
                window: tx_window,
                mask: tx_entries - 1,
                req: 0,
                done: 0,
                pkt_done: 0,
                in_flight: VecDeque::new(),
            },
            small: RxRing {
                window: small_window,
                mask: rx_entries - 1,
                cnt: 0,
                fill: 0,
                base: done_len,
                stride: small_stride,
                cap: small_cap,
            },
            big: RxRing {
                window: big_window,
                mask: rx_entries - 1,
                cnt: 0,
                fill: 0,
                base: done_len + small_len,
                stride: big_bytes,
                cap: big_bytes,
            },
            rx_done_mask: slots - 1,
            rx_done_cnt: 0,
            irq_claim,
            rx_claim_pending: false,
            quiet_polls: 0,
            up: false,
            link: LinkState::Unknown,
            rdma_tags: 15,
            counters: IrqData::default(),
            stats: Myri10geStats {
                dummy_rdma_failures: u64::from(!rdma_ok),
                ..Default::default()
            },
            rx_mem,
            tx_mem,
            ctl,
        };
        // From here on `me` owns everything; its Drop quiesces the NIC.
        me.stats.rx_groups_posted += me.small.refill(&me.rx_mem);
        me.stats.rx_groups_posted += me.big.refill(&me.rx_mem);
        me.set_stats_dma()?;
        let frame_limit = (mtu + ETH_HLEN + VLAN_HLEN) as u32;
        me.ctl.command(Cmd::SET_MTU, [frame_limit, 0, 0])?;
        me.ctl
            .command(Cmd::SET_SMALL_BUFFER_SIZE, [small_bytes as u32, 0, 0])?;
        me.ctl
            .command(Cmd::SET_BIG_BUFFER_SIZE, [big_bytes as u32, 0, 0])?;
        if config.interrupts && me.ctl.pci.msix_vectors() >= 1 && me.ctl.pci.enable_msix(1).is_ok()
        {
            me.ctl.irq = Some(0);
        }
        me.ctl.command(Cmd::ETHERNET_UP, [0; 3])?;
        me.up = true;
        Ok(me)
    }

    /// `MXGEFW_CMD_SET_STATS_DMA_V2` with our 64-byte block; firmware that
    /// does not know it gets the obsolete command with the address of
    /// `send_done_count` (its 40-byte block is the tail of ours), as in
    /// Linux `myri10ge_set_stats`.
    fn set_stats_dma(&mut self) -> Result<(), Myri10geError> {
        let a = self.ctl.mem.iova_at(CTL_IRQ);
        match self.ctl.command(
            Cmd::SET_STATS_DMA_V2,
            [a as u32, (a >> 32) as u32, IrqData::LEN as u32],
        ) {
            Err(Myri10geError::CommandFailed {
                status: CmdStatus::UNKNOWN,
                ..
            }) => {
                let old = a + IrqData::SEND_DONE_COUNT as u64;
                self.ctl.command(
                    Cmd::SET_STATS_DMA_OBSOLETE,
                    [old as u32, (old >> 32) as u32, 0],
                )?;
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }

    /// The MAC address from the EEPROM strings.
    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// The EEPROM strings' contents (MAC, serial number, product code).
    pub fn eeprom(&self) -> &EepromInfo {
        &self.eeprom
    }

    /// The running firmware's version string.
    pub fn firmware_version(&self) -> &str {
        &self.firmware_version
    }

    /// The SRAM size the firmware reported (where the EEPROM strings are).
    pub fn sram_size(&self) -> u64 {
        self.sram_size
    }

    /// The MTU (largest Ethernet payload).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The largest frame [`send`](Self::send) accepts (header included, no
    /// FCS).
    pub fn max_frame_len(&self) -> usize {
        self.mtu + ETH_HLEN
    }

    /// Small receive buffer size told to the firmware: frames up to this
    /// long arrive in small buffers.
    pub fn small_buffer_size(&self) -> usize {
        self.small_bytes
    }

    /// Big receive buffer size told to the firmware (a power of two).
    pub fn big_buffer_size(&self) -> usize {
        self.big_bytes
    }

    /// Send ring entries (from the firmware).
    pub fn send_ring_entries(&self) -> u32 {
        self.tx.mask + 1
    }

    /// Entries of each receive ring (from the firmware).
    pub fn rx_ring_entries(&self) -> u32 {
        self.small.entries()
    }

    /// Entries of the rx-done ring (twice the receive ring).
    pub fn rx_done_entries(&self) -> u32 {
        self.rx_done_mask + 1
    }

    /// The PCI function.
    pub fn pci(&self) -> &P {
        &self.ctl.pci
    }

    /// The driver's counters.
    pub fn stats(&self) -> Myri10geStats {
        self.stats
    }

    /// The firmware's counters from the last interrupt block with
    /// `stats_updated` (drops per cause, link state).
    pub fn firmware_counters(&self) -> IrqData {
        self.counters
    }

    /// The link state the firmware last reported.
    pub fn link_state(&self) -> LinkState {
        self.link
    }

    /// True between Ethernet up and shutdown.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The eventfd signalled by the NIC's interrupt (MSI-X vector 0), if
    /// interrupts are on. Call [`ack_interrupt`](Self::ack_interrupt)
    /// before polling.
    pub fn interrupt_fd(&self) -> Option<&EventFd> {
        self.ctl.irq.and_then(|v| self.ctl.pci.interrupt_eventfd(v))
    }

    /// Clears a pending interrupt; returns how many arrived.
    pub fn ack_interrupt(&self) -> u64 {
        self.interrupt_fd().and_then(|e| e.read().ok()).unwrap_or(0)
    }

    fn claim(&self, word: u64) {
        self.irq_claim
            .write_u32(4 * word, mcp::IRQ_CLAIM_VALUE.to_be());
    }

    /// Handles the interrupt data block if the firmware wrote a fresh one
    /// (`valid` set; as `myri10ge_intr` with MSI): clears `valid`, takes
    /// finished sends, link state and counters, and claims the interrupt
    /// so the firmware may raise the next. Called on every poll, so it
    /// does not matter whether the interrupt message itself arrived.
    /// After [`STALL_POLLS`] polls without a block the claim words are
    /// written again, in case the firmware's last interrupt never reached
    /// us. Returns whether a block was handled.
    pub fn poll_irq(&mut self) -> bool {
        if !self.ctl.active {
            // Shut down: the firmware was reset and knows no block.
            return false;
        }
        let last = self
            .ctl
            .mem
            .load_u32(CTL_IRQ + 60, Ordering::Acquire)
            .to_ne_bytes();
        let valid = last[3];
        if valid == 0 {
            self.quiet_polls += 1;
            if self.quiet_polls >= STALL_POLLS {
                self.quiet_polls = 0;
                if self.up {
                    self.stats.irq_rearms += 1;
                    self.claim(0);
                    self.claim(1);
                }
            }
            return false;
        }
        self.quiet_polls = 0;
        self.ctl.mem.write_u8(CTL_IRQ + IrqData::VALID, 0);
        let mut b = [0u8; IrqData::LEN];
        self.ctl.mem.read_bytes(CTL_IRQ, &mut b);
        b[IrqData::VALID] = valid;
        let d = IrqData::from_bytes(&b);
        self.stats.irq_blocks += 1;
        if valid & 1 != 0 {
            self.rx_claim_pending = true;
        }
        self.tx_done(d.send_done_count);
        if d.stats_updated != 0 {
            let link = LinkState::from_fw(d.link_up);
            if link != self.link {
                self.link = link;
                self.stats.link_changes += 1;
                tracing::info!("myri10ge {}: link {link:?}", self.ctl.pci.address());
            }
            if d.rdma_tags_available < self.rdma_tags {
                self.stats.rdma_timeouts += 1;
                tracing::warn!(
                    "myri10ge {}: RDMA timed out, {} tags left",
                    self.ctl.pci.address(),
                    d.rdma_tags_available
                );
            }
            self.rdma_tags = d.rdma_tags_available;
            self.counters = d;
        }
        if d.link_down != 0 {
            self.stats.link_down_events += u64::from(d.link_down);
        }
        self.claim(1);
        true
    }

    /// Retires frames the firmware reports sent (`myri10ge_tx_done`). A
    /// count that runs ahead of what is in flight is counted and ignored.
    fn tx_done(&mut self, count: u32) {
        let n = count.wrapping_sub(self.tx.pkt_done);
        if n == 0 {
            return;
        }
        if n as usize > self.tx.in_flight.len() {
            self.stats.bad_send_done += 1;
            tracing::warn!(
                "myri10ge {}: send_done_count {count} is {n} frames ahead, only {} in flight",
                self.ctl.pci.address(),
                self.tx.in_flight.len()
            );
            return;
        }
        for _ in 0..n {
            if let Some(d) = self.tx.in_flight.pop_front() {
                self.tx.done = self.tx.done.wrapping_add(u32::from(d));
            }
        }
        self.tx.pkt_done = count;
    }

    fn segments(len: usize) -> usize {
        len.max(ETH_ZLEN).div_ceil(TX_BOUNDARY)
    }

    /// Frames of the largest size that fit in the send ring now (0 once
    /// shut down).
    pub fn tx_available(&mut self) -> usize {
        if !self.up {
            return 0;
        }
        self.poll_irq();
        self.tx.avail() / Self::segments(self.max_frame_len())
    }

    /// Queues one frame made of `parts` (concatenated: Ethernet header,
    /// payload, ...), padded to 60 bytes. Returns `Ok(false)` if the send
    /// ring is full. The NIC starts sending it at once (there is no
    /// doorbell: the descriptor write is the doorbell).
    pub fn send(&mut self, parts: &[&[u8]]) -> Result<bool, Myri10geError> {
        if !self.up {
            return Err(Myri10geError::Down);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_frame_len() {
            return Err(Myri10geError::FrameTooLong {
                len,
                max: self.max_frame_len(),
            });
        }
        let padded = len.max(ETH_ZLEN);
        let nseg = Self::segments(len);
        if self.tx.avail() < nseg {
            self.poll_irq();
            if self.tx.avail() < nseg {
                self.stats.tx_ring_full += 1;
                return Ok(false);
            }
        }
        let first = self.tx.req;
        let chunk = |seg: usize| ((first + seg as u32) & self.tx.mask) as usize * TX_BOUNDARY;
        let mut at = 0usize;
        for p in parts {
            let mut p = *p;
            while !p.is_empty() {
                let (seg, off) = (at / TX_BOUNDARY, at % TX_BOUNDARY);
                let n = (TX_BOUNDARY - off).min(p.len());
                self.tx_mem.write_bytes(chunk(seg) + off, &p[..n]);
                at += n;
                p = &p[n..];
            }
        }
        while at < padded {
            let (seg, off) = (at / TX_BOUNDARY, at % TX_BOUNDARY);
            let n = (TX_BOUNDARY - off).min(padded - at);
            self.tx_mem.fill(chunk(seg) + off, n, 0);
            at += n;
        }
        let small = if padded <= MXGEFW_SEND_SMALL_SIZE {
            MXGEFW_FLAGS_SMALL
        } else {
            0
        };
        let desc = |seg: usize| KreqEtherSend {
            addr: self.tx_mem.iova_at(chunk(seg)),
            pseudo_hdr_offset: 0,
            length: (padded - seg * TX_BOUNDARY).min(TX_BOUNDARY) as u16,
            pad: 0,
            rdma_count: if seg == 0 { nseg as u8 } else { 1 },
            cksum_offset: 0,
            flags: if seg == 0 {
                MXGEFW_FLAGS_FIRST | MXGEFW_FLAGS_NO_TSO | small
            } else {
                MXGEFW_FLAGS_NO_TSO | small
            },
        };
        let slot_off =
            |seg: usize| u64::from((first + seg as u32) & self.tx.mask) * KreqEtherSend::LEN as u64;
        // myri10ge_submit_req: the first descriptor goes out with flags 0,
        // then the others, then the first's last word with the flags,
        // which makes the frame valid.
        let first_bytes = desc(0).to_bytes();
        let mut hidden = first_bytes;
        hidden[KreqEtherSend::FLAGS] = 0;
        fence(Ordering::SeqCst);
        self.tx
            .window
            .write_u64(slot_off(0), bytes_to_u64(&hidden[0..8]));
        self.tx
            .window
            .write_u64(slot_off(0) + 8, bytes_to_u64(&hidden[8..16]));
        for seg in 1..nseg {
            let b = desc(seg).to_bytes();
            self.tx
                .window
                .write_u64(slot_off(seg), bytes_to_u64(&b[0..8]));
            self.tx
                .window
                .write_u64(slot_off(seg) + 8, bytes_to_u64(&b[8..16]));
        }
        fence(Ordering::SeqCst);
        self.tx.window.write_u32(
            slot_off(0) + KreqEtherSend::FLAGS_WORD as u64,
            bytes_to_u32(&first_bytes[KreqEtherSend::FLAGS_WORD..]),
        );
        self.tx.req = self.tx.req.wrapping_add(nseg as u32);
        self.tx.in_flight.push_back(nseg as u8);
        self.stats.tx_frames += 1;
        self.stats.tx_descriptors += nseg as u64;
        Ok(true)
    }

    /// Shows up to `budget` received frames to `f` (each a view of the
    /// Ethernet frame in its DMA buffer, valid during the call), then
    /// hands freed buffers back in groups of 8. Returns how many rx-done
    /// entries were consumed (bad ones included; they are counted and
    /// skipped). Works without interrupts: the rx-done ring is in host
    /// memory.
    pub fn receive(
        &mut self,
        budget: usize,
        mut f: impl FnMut(DmaView<'_>),
    ) -> Result<usize, Myri10geError> {
        if !self.up {
            return Ok(0);
        }
        self.poll_irq();
        let mut consumed = 0;
        while consumed < budget {
            let at = (self.rx_done_cnt & self.rx_done_mask) as usize * slot::LEN;
            let len = usize::from(u16::from_be(
                self.rx_mem.load_u16(at + slot::LENGTH, Ordering::Acquire),
            ));
            if len == 0 {
                break;
            }
            self.rx_mem.write_u16(at + slot::LENGTH, 0);
            self.rx_done_cnt = self.rx_done_cnt.wrapping_add(1);
            consumed += 1;
            // As myri10ge_rx_done: the length alone says which ring's next
            // buffer holds the frame.
            let small = len <= self.small_bytes;
            let ring = if small {
                &mut self.small
            } else {
                &mut self.big
            };
            if ring.cnt == ring.fill {
                self.stats.rx_no_buffer += 1;
                continue;
            }
            let buf = ring.buffer(ring.cnt & ring.mask);
            ring.cnt = ring.cnt.wrapping_add(1);
            if len < ETH_HLEN || len + MXGEFW_PAD > ring.cap {
                self.stats.bad_rx_len += 1;
                continue;
            }
            match self.rx_mem.view(buf + MXGEFW_PAD, len) {
                Some(view) => {
                    self.stats.rx_frames += 1;
                    if small {
                        self.stats.rx_small += 1;
                    } else {
                        self.stats.rx_big += 1;
                    }
                    f(view);
                }
                None => self.stats.bad_rx_len += 1,
            }
        }
        if consumed > 0 {
            self.stats.rx_groups_posted += self.small.refill(&self.rx_mem);
            self.stats.rx_groups_posted += self.big.refill(&self.rx_mem);
        }
        if consumed < budget && self.rx_claim_pending {
            // The rx-done ring is drained: let the firmware interrupt for
            // new frames again (the end of myri10ge_poll).
            self.rx_claim_pending = false;
            self.claim(0);
        }
        Ok(consumed)
    }

    /// Brings Ethernet down (waiting for the firmware's link-down
    /// interrupt block, as `myri10ge_close` does), disables the dummy
    /// RDMAs, resets the firmware and turns bus mastering and MSI-X off.
    pub fn shutdown(&mut self) {
        if self.up {
            self.up = false;
            let before = self.stats.link_down_events;
            match self.ctl.command(Cmd::ETHERNET_DOWN, [0; 3]) {
                Ok(_) => {
                    let timeout = self.ctl.handoff_timeout;
                    let deadline = Instant::now() + timeout;
                    while self.stats.link_down_events == before && Instant::now() < deadline {
                        if !self.poll_irq() {
                            // Re-arm now and then while waiting.
                            if self.quiet_polls % 256 == 255 {
                                self.claim(1);
                            }
                            std::thread::yield_now();
                        }
                    }
                    if self.stats.link_down_events == before {
                        tracing::warn!(
                            "myri10ge {}: no link-down interrupt within {timeout:?}",
                            self.ctl.pci.address()
                        );
                    }
                }
                Err(e) => tracing::warn!("myri10ge {}: {e}", self.ctl.pci.address()),
            }
        }
        self.ctl.quiesce();
    }
}

impl<P: PciFunction> Drop for Myri10ge<P> {
    fn drop(&mut self) {
        // The NIC must stop using our memory before it is freed.
        self.shutdown();
    }
}

/// Reads the running firmware's header for the SRAM size (really the
/// EEPROM strings' address, `string_specs`, as Linux takes it) and the
/// EEPROM strings (`myri10ge_probe`, `myri10ge_read_mac_addr`).
fn read_sram_layout<B: Mmio>(sram: &B) -> Result<(u64, EepromInfo), Myri10geError> {
    let bar = sram.len();
    let hdr = u64::from(u32::from_be(sram.read_u32(MCP_HEADER_PTR_OFFSET)) & 0xffffc);
    let ss = hdr + mcp::gen_header::STRING_SPECS as u64;
    if ss + 4 > bar {
        return Err(Myri10geError::Sram(format!(
            "the firmware header pointer {hdr:#x} points outside BAR 0"
        )));
    }
    let sram_size = u64::from(u32::from_be(sram.read_u32(ss)));
    if sram_size <= FW_OFFSET || sram_size + EEPROM_STRINGS_SIZE as u64 > bar {
        return Err(Myri10geError::Sram(format!(
            "invalid SRAM size {sram_size:#x} (must be above {FW_OFFSET:#x}, with the \
             {EEPROM_STRINGS_SIZE}-byte EEPROM strings inside BAR 0 of {bar:#x} bytes)"
        )));
    }
    let mut strings = [0u8; EEPROM_STRINGS_SIZE];
    if sram_size % 4 == 0 {
        for (i, w) in strings.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&sram.read_u32(sram_size + 4 * i as u64).to_ne_bytes());
        }
    } else {
        for (i, b) in strings.iter_mut().enumerate() {
            *b = sram.read_u8(sram_size + i as u64);
        }
    }
    // As Linux: the last two bytes are forced to NUL.
    strings[EEPROM_STRINGS_SIZE - 2..].fill(0);
    let eeprom = mcp::parse_eeprom_strings(&strings)
        .map_err(|e| Myri10geError::Sram(format!("EEPROM strings at {sram_size:#x}: {e}")))?;
    Ok((sram_size, eeprom))
}

/// Loads the configured firmware (or adopts the running one); returns its
/// version string.
fn load_firmware<P: PciFunction>(
    ctl: &mut Ctl<P>,
    firmware: &Firmware,
    sram_size: u64,
) -> Result<String, Myri10geError> {
    let (what, bytes) = match firmware {
        Firmware::Running => return adopt_running_firmware(&ctl.sram, sram_size),
        Firmware::File(path) => (
            path.display().to_string(),
            std::fs::read(path).map_err(|error| Myri10geError::FirmwareIo {
                path: path.clone(),
                error,
            })?,
        ),
        Firmware::Image(b) => ("image".to_string(), b.clone()),
    };
    let image = FirmwareImage::parse(bytes, sram_size)
        .map_err(|error| Myri10geError::Firmware { what, error })?;
    ctl.handoff(&image)?;
    Ok(image.version().to_string())
}

/// Validates the header of the firmware the NIC runs
/// (`myri10ge_adopt_running_firmware`).
fn adopt_running_firmware<B: Mmio>(sram: &B, sram_size: u64) -> Result<String, Myri10geError> {
    let hdr = u64::from(u32::from_be(sram.read_u32(MCP_HEADER_PTR_OFFSET)));
    let len = mcp::gen_header::LEN as u64;
    if !hdr.is_multiple_of(4) || hdr + len > sram_size {
        return Err(Myri10geError::Sram(format!(
            "the running firmware's header offset {hdr:#x} is unaligned or past the SRAM ({sram_size:#x})"
        )));
    }
    let mut h = vec![0u8; mcp::gen_header::LEN];
    for (i, w) in h.chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&sram.read_u32(hdr + 4 * i as u64).to_ne_bytes());
    }
    mcp::validate_header(&h)
        .map(|(v, _)| v)
        .map_err(|error| Myri10geError::Firmware {
            what: "running on the NIC".into(),
            error,
        })
}

impl<P: PciFunction> EthernetDevice for Myri10ge<P> {
    fn mac(&self) -> Mac {
        Myri10ge::mac(self)
    }
    fn mtu(&self) -> usize {
        Myri10ge::mtu(self)
    }
    fn pci_address(&self) -> PciAddress {
        self.ctl.pci.address()
    }
    fn tx_space(&mut self) -> usize {
        self.tx_available()
    }
    fn send(&mut self, parts: &[&[u8]]) -> Result<bool, NicError> {
        Ok(Myri10ge::send(self, parts)?)
    }
    fn flush(&mut self) {
        // Descriptors are live as soon as they are written.
    }
    fn receive(
        &mut self,
        budget: usize,
        f: &mut dyn FnMut(DmaView<'_>),
    ) -> Result<usize, NicError> {
        Ok(Myri10ge::receive(self, budget, f)?)
    }
    fn interrupt_fd(&self) -> Option<RawFd> {
        Myri10ge::interrupt_fd(self).map(|e| e.as_raw_fd())
    }
    fn ack_interrupt(&self) {
        Myri10ge::ack_interrupt(self);
    }
    fn shutdown(&mut self) {
        Myri10ge::shutdown(self)
    }
}
