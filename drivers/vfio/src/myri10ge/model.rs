//! An executable model of the Myri-10G Ethernet firmware's host interface,
//! for the in-memory host ([`crate::testing`]); feature `test-support`.
//!
//! The model plays the NIC's side of everything in [`super::mcp`]: the
//! SRAM behind BAR 0 with a running firmware's `mcp_gen_header` and the
//! EEPROM strings, the boot hand-off and dummy-RDMA mailboxes, the command
//! mailbox (responses DMAed back), the send ring (descriptors written by
//! PIO, frames DMAed out of host memory onto a [`WirePort`]), the small and
//! big receive rings (groups of 8 handed over by the `addr_low` protocol),
//! the rx-done ring and the interrupt data block in host memory, the
//! interrupt-claim words, and MSI-X vector 0.
//!
//! It cannot run LANai code: after a hand-off it checks that the copied
//! image is an Ethernet firmware of interface version 1.4 (its header,
//! where the bootstrap put it) and then behaves as that firmware would.
//!
//! It is strict where the real firmware's tolerance is unknown, so that
//! driver mistakes fail tests ([`Myri10geModelStats::protocol_errors`],
//! [`Myri10geModel::last_error`]): a mailbox executed before all 64 bytes
//! were written, a receive group handed over out of order, over posted
//! buffers or with unwritten descriptors, a write to a posted receive
//! descriptor, a send descriptor without `FIRST`, a frame whose later
//! descriptors were not written before the first's flags, a segment that
//! crosses a 2 KiB boundary, checksum or TSO flags, `ETHERNET_UP` before
//! its parameters.
//!
//! Where the public header says nothing, the model makes a documented
//! choice (see the crate README): which counter a too-long frame goes to,
//! `valid` = 2 | (1 if frames arrived), interrupts held back until the
//! driver writes the claim words (word 0 re-arms receive interrupts,
//! word 1 the interrupt as a whole), a frame needing several big buffers
//! is dropped (the real firmware chains buffers), ring offsets in SRAM.
//!
//! Faults can be injected: failing, unanswered or wrongly answered
//! commands, lost MSI-X messages, interrupts lost entirely, bad rx-done
//! lengths, spurious rx-done entries, a `send_done_count` that jumps, a
//! failed hand-off, SRAM read-back corruption; plus bad EEPROM strings,
//! SRAM sizes, firmware types and ring sizes through the configuration.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::pci::{BarKind, CAP_ID_MSIX, CAP_ID_PCIE, CAP_ID_VENDOR};
use crate::testing::{ConfigSpace, DeviceCtx, DeviceModel, WirePort};

use super::mcp::{
    self, gen_header, Cmd, CmdStatus, IrqData, KreqEtherRecv, KreqEtherSend, McpCmd,
    EEPROM_STRINGS_SIZE, FW_OFFSET, MCP_HEADER_PTR_OFFSET, MXGEFW_BOOT_DUMMY_RDMA,
    MXGEFW_BOOT_HANDOFF, MXGEFW_ETH_CMD, MXGEFW_FLAGS_CKSUM, MXGEFW_FLAGS_FIRST,
    MXGEFW_FLAGS_NO_TSO, MXGEFW_MAX_MTU, MXGEFW_MAX_SEND_DESC, MXGEFW_PAD, RX_GROUP,
    RX_INVALID_ADDR_LOW,
};
use super::{MYRI10GE_Z8E_DEVICE_ID, MYRICOM_VENDOR_ID};

/// Size of BAR 0 (the Myri-10G's 16 MiB window).
pub const BAR0_LEN: u64 = 16 << 20;
/// SRAM size (2 MiB, the `sram_size` of Myricom's 1.4.57 images).
pub const SRAM_LEN: usize = 2 << 20;
/// Where the EEPROM strings are (`string_specs` of Myricom's 1.4.57
/// images).
pub const DEFAULT_STRING_SPECS: u32 = 0x1d_fe00;
/// Where the model's power-on firmware keeps its `mcp_gen_header`.
pub const EEPROM_FW_HEADER_AT: u32 = 0x4000;
/// The model's answer to `GET_SEND_OFFSET`.
pub const SEND_RING_AT: u64 = mcp::MXGEFW_ETH_SEND_4;
/// The model's answer to `GET_SMALL_RX_OFFSET`.
pub const SMALL_RING_AT: u64 = mcp::MXGEFW_ETH_RECV_SMALL;
/// The model's answer to `GET_BIG_RX_OFFSET`.
pub const BIG_RING_AT: u64 = mcp::MXGEFW_ETH_RECV_BIG;
/// The model's answer to `GET_IRQ_ACK_OFFSET` (two claim words).
pub const IRQ_ACK_AT: u64 = 0x3e_0000;
/// The model's answer to `GET_IRQ_DEASSERT_OFFSET`.
pub const IRQ_DEASSERT_AT: u64 = 0x3e_0100;
/// The model's answer to `GET_INTR_COAL_DELAY_OFFSET`.
pub const COAL_DELAY_AT: u64 = 0x3e_0200;
/// Transmit segments must not cross a multiple of this (the `ethp`
/// firmware's limit).
pub const TX_BOUNDARY: u64 = 2048;

/// A fault to put into the rx-done ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxFault {
    /// Report this length instead of the frame's for the next frame (the
    /// frame itself is written to the buffer the real length selects).
    BadLength(u16),
    /// After the next frame, write one more rx-done entry of this length
    /// that no buffer backs.
    Spurious(u16),
}

/// Settings of a [`Myri10geModel`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Myri10geModelConfig {
    /// The MAC in the EEPROM strings.
    pub mac: [u8; 6],
    /// PCI device ID (0x0008 or 0x0009).
    pub device_id: u16,
    /// Send ring entries (answered as bytes to `GET_SEND_RING_SIZE`).
    pub send_ring_entries: u32,
    /// Receive ring entries, each of small and big.
    pub rx_ring_entries: u32,
    /// MSI-X vectors.
    pub msix_vectors: u32,
    /// The EEPROM strings; `None` builds `SN=..\0MAC=..\0PC=..\0\0`.
    pub eeprom_strings: Option<Vec<u8>>,
    /// The address of the EEPROM strings in the running firmware's header
    /// (the driver takes it as the SRAM size).
    pub string_specs: u32,
    /// The power-on firmware's `mcp_type`.
    pub running_firmware_type: u32,
    /// The power-on firmware's version string.
    pub running_firmware_version: String,
}

impl Default for Myri10geModelConfig {
    fn default() -> Self {
        Self {
            mac: [0x00, 0x60, 0xdd, 0x47, 0x00, 0x01],
            device_id: MYRI10GE_Z8E_DEVICE_ID,
            send_ring_entries: 1024,
            rx_ring_entries: 512,
            msix_vectors: 2,
            eeprom_strings: None,
            string_specs: DEFAULT_STRING_SPECS,
            running_firmware_type: mcp::MCP_TYPE_ETH,
            running_firmware_version: "1.4.43 -- model EEPROM firmware".into(),
        }
    }
}

impl Myri10geModelConfig {
    /// The default configuration with `mac`.
    pub fn with_mac(mac: [u8; 6]) -> Self {
        Self {
            mac,
            ..Default::default()
        }
    }

    fn strings(&self) -> Vec<u8> {
        match &self.eeprom_strings {
            Some(s) => s.clone(),
            None => format!(
                "SN=424242\0MAC={}\0PC=10G-PCIE-8B-S\0\0",
                bcl_ether::Mac(self.mac)
            )
            .into_bytes(),
        }
    }
}

/// Counters of a [`Myri10geModel`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Myri10geModelStats {
    /// Commands executed (answered or not).
    pub commands: u64,
    /// Hand-offs completed (a firmware image started).
    pub handoffs: u64,
    /// Hand-offs refused (bad image or parameters, or injected).
    pub handoff_failures: u64,
    /// Dummy-RDMA requests confirmed.
    pub dummy_rdma_requests: u64,
    /// Frames taken from the send ring and put on the wire.
    pub tx_frames: u64,
    /// Send descriptors consumed.
    pub tx_descriptors: u64,
    /// Frames taken from the send ring but not sent (too long, DMA fault).
    pub tx_dropped: u64,
    /// Frames written into receive buffers.
    pub rx_frames: u64,
    /// Of those, into small buffers.
    pub rx_small: u64,
    /// Of those, into big buffers.
    pub rx_big: u64,
    /// Frames that arrived while Ethernet was down (lost).
    pub rx_while_down: u64,
    /// Groups of 8 buffers handed over on the small ring.
    pub small_groups_posted: u64,
    /// Groups of 8 buffers handed over on the big ring.
    pub big_groups_posted: u64,
    /// Interrupt blocks written (or lost by injection).
    pub interrupts: u64,
    /// MSI-X messages dropped by injection (block written).
    pub msix_lost: u64,
    /// Interrupts lost entirely by injection.
    pub interrupts_lost: u64,
    /// Claim-word writes.
    pub claims: u64,
    /// Protocol violations by the driver (see the module documentation).
    pub protocol_errors: u64,
    /// DMA accesses refused by the host's IOMMU.
    pub dma_errors: u64,
    /// Writes to BAR 0 outside anything modelled.
    pub stray_writes: u64,
    /// Function-level resets.
    pub function_resets: u64,
}

/// One command as the model saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// The command.
    pub cmd: Cmd,
    /// data0, data1, data2.
    pub data: [u32; 3],
    /// The result code answered (`None`: not answered).
    pub result: Option<CmdStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Fw {
    /// The power-on (EEPROM) firmware, or an image after a hand-off.
    Running { version: String, loaded: bool },
    /// A hand-off went wrong: nothing answers until a function reset.
    Crashed,
}

#[derive(Clone)]
struct Mailbox {
    bytes: [u8; 64],
    written: u64,
}

impl Mailbox {
    fn new() -> Self {
        Self {
            bytes: [0; 64],
            written: 0,
        }
    }
    /// Stores a write; returns true when byte 63 was written (the
    /// trigger), with whether all 64 bytes were written since the last
    /// trigger.
    fn write(&mut self, off: usize, data: &[u8]) -> Option<bool> {
        self.bytes[off..off + data.len()].copy_from_slice(data);
        for i in off..off + data.len() {
            self.written |= 1 << i;
        }
        (off + data.len() == 64).then(|| {
            let complete = self.written == u64::MAX;
            self.written = 0;
            complete
        })
    }
    fn word(&self, i: usize) -> u32 {
        u32::from_be_bytes(self.bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"))
    }
}

#[derive(Clone)]
struct RxRingModel {
    desc: Vec<[u8; 8]>,
    written: Vec<bool>,
    /// Buffers handed over.
    fill: u32,
    /// Buffers used.
    cnt: u32,
}

impl RxRingModel {
    fn new(entries: u32) -> Self {
        Self {
            desc: vec![[0; 8]; entries as usize],
            written: vec![false; entries as usize],
            fill: 0,
            cnt: 0,
        }
    }
    fn mask(&self) -> u32 {
        self.desc.len() as u32 - 1
    }
    fn live(&self, slot: u32) -> bool {
        (slot.wrapping_sub(self.cnt) & self.mask()) < self.fill.wrapping_sub(self.cnt)
    }
}

/// The Myri-10G firmware model (see the module documentation).
pub struct Myri10geModel {
    cfg: Myri10geModelConfig,
    port: WirePort,
    sram: Vec<u8>,
    fw: Fw,
    cmd_box: Mailbox,
    handoff_box: Mailbox,
    rdma_box: Mailbox,
    dummy_rdma: bool,
    // Ethernet state, cleared by MXGEFW_CMD_RESET.
    up: bool,
    intrq_dma: Option<u64>,
    intrq_slots: Option<u32>,
    stats_dma: Option<(u64, usize)>,
    small_size: Option<usize>,
    big_size: Option<usize>,
    frame_limit: Option<usize>,
    mac_filter: [u8; 6],
    promisc: bool,
    allmulti: bool,
    flow_control: bool,
    coal_delay: u32,
    send: Vec<[u8; 16]>,
    send_written: Vec<bool>,
    send_read: u32,
    small: RxRingModel,
    big: RxRingModel,
    rx_done_idx: u32,
    counters: IrqData,
    irq_armed: bool,
    rx_armed: bool,
    pending_rx: bool,
    pending_tx: bool,
    pending_stats: bool,
    pending_link_down: bool,
    // Faults.
    fail: HashMap<u32, (CmdStatus, Option<u32>)>,
    ignore: HashSet<u32>,
    answers: HashMap<u32, u32>,
    lose_msix: u32,
    lose_irqs: u32,
    rx_faults: VecDeque<RxFault>,
    send_done_jump: Option<u32>,
    fail_handoff: bool,
    corrupt_readback: Option<usize>,
    // Observation.
    log: Vec<CommandRecord>,
    last_error: Option<String>,
    stats: Myri10geModelStats,
}

impl Myri10geModel {
    /// A model sending and receiving frames on `port`, at power-on.
    pub fn new(cfg: Myri10geModelConfig, port: WirePort) -> Self {
        assert!(
            cfg.send_ring_entries.is_power_of_two() && cfg.rx_ring_entries.is_power_of_two(),
            "model ring sizes must be powers of two"
        );
        let mut me = Self {
            port,
            sram: Vec::new(),
            fw: Fw::Crashed,
            cmd_box: Mailbox::new(),
            handoff_box: Mailbox::new(),
            rdma_box: Mailbox::new(),
            dummy_rdma: false,
            up: false,
            intrq_dma: None,
            intrq_slots: None,
            stats_dma: None,
            small_size: None,
            big_size: None,
            frame_limit: None,
            mac_filter: cfg.mac,
            promisc: false,
            allmulti: false,
            flow_control: false,
            coal_delay: 0,
            send: Vec::new(),
            send_written: Vec::new(),
            send_read: 0,
            small: RxRingModel::new(cfg.rx_ring_entries),
            big: RxRingModel::new(cfg.rx_ring_entries),
            rx_done_idx: 0,
            counters: IrqData::default(),
            irq_armed: true,
            rx_armed: true,
            pending_rx: false,
            pending_tx: false,
            pending_stats: false,
            pending_link_down: false,
            fail: HashMap::new(),
            ignore: HashSet::new(),
            answers: HashMap::new(),
            lose_msix: 0,
            lose_irqs: 0,
            rx_faults: VecDeque::new(),
            send_done_jump: None,
            fail_handoff: false,
            corrupt_readback: None,
            log: Vec::new(),
            last_error: None,
            stats: Myri10geModelStats::default(),
            cfg,
        };
        me.power_on();
        me
    }

    /// SRAM as at power-on: the EEPROM firmware's header and strings.
    fn power_on(&mut self) {
        self.sram = vec![0; SRAM_LEN];
        let h = EEPROM_FW_HEADER_AT as usize;
        self.put32(MCP_HEADER_PTR_OFFSET as usize, EEPROM_FW_HEADER_AT);
        self.put32(h + gen_header::HEADER_LENGTH, gen_header::LEN as u32);
        self.put32(h + gen_header::MCP_TYPE, self.cfg.running_firmware_type);
        let v = self.cfg.running_firmware_version.clone();
        let n = v.len().min(gen_header::VERSION_LEN - 1);
        self.sram[h + gen_header::VERSION..h + gen_header::VERSION + n]
            .copy_from_slice(&v.as_bytes()[..n]);
        self.fill_runtime_header(h);
        let s = self.cfg.string_specs as usize;
        let strings = self.cfg.strings();
        if s < self.sram.len() {
            let n = strings
                .len()
                .min(EEPROM_STRINGS_SIZE)
                .min(self.sram.len() - s);
            self.sram[s..s + n].copy_from_slice(&strings[..n]);
        }
        self.fw = Fw::Running {
            version: v,
            loaded: false,
        };
        self.dummy_rdma = false;
        self.cmd_box = Mailbox::new();
        self.handoff_box = Mailbox::new();
        self.rdma_box = Mailbox::new();
        self.eth_reset();
    }

    /// The fields "filled by the MCP at run-time".
    fn fill_runtime_header(&mut self, h: usize) {
        self.put32(h + gen_header::SRAM_SIZE, SRAM_LEN as u32);
        self.put32(h + gen_header::STRING_SPECS, self.cfg.string_specs);
        self.put32(h + gen_header::STRING_SPECS_LEN, EEPROM_STRINGS_SIZE as u32);
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.sram[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// MXGEFW_CMD_RESET: forget every Ethernet parameter.
    fn eth_reset(&mut self) {
        self.up = false;
        self.intrq_dma = None;
        self.intrq_slots = None;
        self.stats_dma = None;
        self.small_size = None;
        self.big_size = None;
        self.frame_limit = None;
        self.mac_filter = self.cfg.mac;
        self.promisc = false;
        self.allmulti = false;
        self.send = vec![[0; 16]; self.cfg.send_ring_entries as usize];
        self.send_written = vec![false; self.cfg.send_ring_entries as usize];
        self.send_read = 0;
        self.small = RxRingModel::new(self.cfg.rx_ring_entries);
        self.big = RxRingModel::new(self.cfg.rx_ring_entries);
        self.rx_done_idx = 0;
        self.counters = IrqData {
            rdma_tags_available: 15,
            ..Default::default()
        };
        self.irq_armed = true;
        self.rx_armed = true;
        self.pending_rx = false;
        self.pending_tx = false;
        self.pending_stats = false;
        self.pending_link_down = false;
    }

    fn protocol_error(&mut self, why: String) {
        self.stats.protocol_errors += 1;
        self.last_error = Some(why);
    }

    // ----- Observation -----------------------------------------------------

    /// Counters.
    pub fn stats(&self) -> Myri10geModelStats {
        self.stats
    }

    /// Every command executed, in order.
    pub fn commands(&self) -> &[CommandRecord] {
        &self.log
    }

    /// The last protocol violation, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// True while Ethernet is up.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The running firmware's version (`None` after a failed hand-off),
    /// and whether it was loaded by a hand-off.
    pub fn running_firmware(&self) -> Option<(&str, bool)> {
        match &self.fw {
            Fw::Running { version, loaded } => Some((version, *loaded)),
            Fw::Crashed => None,
        }
    }

    /// Whether dummy RDMAs are enabled.
    pub fn dummy_rdma(&self) -> bool {
        self.dummy_rdma
    }

    /// The firmware's counters (what the next interrupt block carries).
    pub fn counters(&self) -> IrqData {
        self.counters
    }

    /// The interrupt-coalescing delay the driver wrote.
    pub fn coalescing_delay(&self) -> u32 {
        self.coal_delay
    }

    /// (small, big) buffer sizes and the frame limit the driver set.
    pub fn buffer_sizes(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        (self.small_size, self.big_size, self.frame_limit)
    }

    /// The MAC filter, promiscuous, all-multicast and flow-control state.
    pub fn filters(&self) -> ([u8; 6], bool, bool, bool) {
        (
            self.mac_filter,
            self.promisc,
            self.allmulti,
            self.flow_control,
        )
    }

    /// Receive buffers handed over and not yet used: (small, big).
    pub fn rx_buffers_posted(&self) -> (u32, u32) {
        (
            self.small.fill.wrapping_sub(self.small.cnt),
            self.big.fill.wrapping_sub(self.big.cnt),
        )
    }

    /// The SRAM contents.
    pub fn sram(&self) -> &[u8] {
        &self.sram
    }

    // ----- Faults ------------------------------------------------------------

    /// Answers `cmd` with `status` from now on (`times`: only the next
    /// that many times).
    pub fn fail_command(&mut self, cmd: Cmd, status: CmdStatus, times: Option<u32>) {
        self.fail.insert(cmd.0, (status, times));
    }

    /// Leaves `cmd` unanswered from now on (the driver times out).
    pub fn ignore_command(&mut self, cmd: Cmd) {
        self.ignore.insert(cmd.0);
    }

    /// Answers `cmd` successfully with `data` instead of the right value.
    pub fn override_answer(&mut self, cmd: Cmd, data: u32) {
        self.answers.insert(cmd.0, data);
    }

    /// Removes all command faults.
    pub fn clear_command_faults(&mut self) {
        self.fail.clear();
        self.ignore.clear();
        self.answers.clear();
    }

    /// Drops the MSI-X message of the next `n` interrupts (their blocks are
    /// still written).
    pub fn lose_interrupt_messages(&mut self, n: u32) {
        self.lose_msix = n;
    }

    /// Loses the next `n` interrupts entirely: no block, no message; the
    /// firmware still waits for their claim.
    pub fn lose_interrupts(&mut self, n: u32) {
        self.lose_irqs = n;
    }

    /// Queues a fault for the rx-done ring.
    pub fn inject_rx_fault(&mut self, fault: RxFault) {
        self.rx_faults.push_back(fault);
    }

    /// The next interrupt block reports `send_done_count` this far ahead.
    pub fn inject_send_done_jump(&mut self, delta: u32) {
        self.send_done_jump = Some(delta);
    }

    /// The next hand-off fails (the image "does not boot").
    pub fn fail_next_handoff(&mut self) {
        self.fail_handoff = true;
    }

    /// Reads of SRAM at `FW_OFFSET + offset` return the byte inverted.
    pub fn corrupt_readback(&mut self, offset: usize) {
        self.corrupt_readback = Some(offset);
    }

    // ----- Mailboxes -------------------------------------------------------

    fn execute_command(&mut self, ctx: &mut DeviceCtx<'_>, complete: bool) {
        let c = McpCmd::from_bytes(&self.cmd_box.bytes);
        let cmd = Cmd(c.cmd);
        let data = [c.data0, c.data1, c.data2];
        self.stats.commands += 1;
        if !complete {
            self.protocol_error(format!(
                "{cmd} executed before all 64 mailbox bytes were written"
            ));
        }
        let answer = if matches!(self.fw, Fw::Crashed) || self.ignore.contains(&c.cmd) {
            None
        } else if let Some((status, times)) = self.fail.get(&c.cmd).copied() {
            match times {
                Some(1) => {
                    self.fail.remove(&c.cmd);
                }
                Some(n) => {
                    self.fail.insert(c.cmd, (status, Some(n - 1)));
                }
                None => {}
            }
            Some((0, status))
        } else {
            Some(match self.run(ctx, cmd, data) {
                Ok(v) => (
                    self.answers.get(&c.cmd).copied().unwrap_or(v),
                    CmdStatus::OK,
                ),
                Err(s) => (0, s),
            })
        };
        self.log.push(CommandRecord {
            cmd,
            data,
            result: answer.map(|a| a.1),
        });
        if let Some((value, status)) = answer {
            let mut r = [0u8; 8];
            r[0..4].copy_from_slice(&value.to_be_bytes());
            r[4..8].copy_from_slice(&status.0.to_be_bytes());
            if ctx.dma_write(c.response_addr, &r).is_err() {
                self.stats.dma_errors += 1;
            }
        }
    }

    /// Executes a command; `Err` is the result code.
    fn run(&mut self, ctx: &mut DeviceCtx<'_>, cmd: Cmd, d: [u32; 3]) -> Result<u32, CmdStatus> {
        let addr = u64::from(d[1]) << 32 | u64::from(d[0]);
        let slice0 = |s: u32| {
            if s == 0 {
                Ok(())
            } else {
                Err(CmdStatus::ERROR_RANGE)
            }
        };
        match cmd {
            Cmd::NONE => Ok(0),
            Cmd::RESET => {
                self.eth_reset();
                Ok(0)
            }
            Cmd::SET_INTRQ_DMA => {
                slice0(d[2])?;
                self.intrq_dma = Some(addr);
                Ok(0)
            }
            Cmd::SET_INTRQ_SIZE => {
                let bytes = d[0] & !mcp::MXGEFW_CMD_SET_INTRQ_SIZE_FLAG_NO_STRICT_SIZE_CHECK;
                let slots = bytes / mcp::slot::LEN as u32;
                if !bytes.is_multiple_of(4)
                    || !slots.is_power_of_two()
                    || slots < 2 * self.cfg.rx_ring_entries
                {
                    return Err(CmdStatus::ERROR_RANGE);
                }
                self.intrq_slots = Some(slots);
                Ok(0)
            }
            Cmd::SET_BIG_BUFFER_SIZE => {
                let s = d[0] as usize;
                if !s.is_power_of_two() || !(64..=65536).contains(&s) {
                    return Err(CmdStatus::ERROR_RANGE);
                }
                self.big_size = Some(s);
                Ok(0)
            }
            Cmd::SET_SMALL_BUFFER_SIZE => {
                let s = d[0] as usize;
                if !(60..=4096).contains(&s) {
                    return Err(CmdStatus::ERROR_RANGE);
                }
                self.small_size = Some(s);
                Ok(0)
            }
            Cmd::GET_SEND_OFFSET => slice0(d[0]).map(|_| SEND_RING_AT as u32),
            Cmd::GET_SMALL_RX_OFFSET => slice0(d[0]).map(|_| SMALL_RING_AT as u32),
            Cmd::GET_BIG_RX_OFFSET => slice0(d[0]).map(|_| BIG_RING_AT as u32),
            Cmd::GET_IRQ_ACK_OFFSET => Ok(IRQ_ACK_AT as u32),
            Cmd::GET_IRQ_DEASSERT_OFFSET => Ok(IRQ_DEASSERT_AT as u32),
            Cmd::GET_INTR_COAL_DELAY_OFFSET => Ok(COAL_DELAY_AT as u32),
            Cmd::GET_SEND_RING_SIZE => Ok(self.cfg.send_ring_entries * KreqEtherSend::LEN as u32),
            Cmd::GET_RX_RING_SIZE => Ok(self.cfg.rx_ring_entries * KreqEtherRecv::LEN as u32),
            Cmd::ETHERNET_UP => {
                let missing: Vec<&str> = [
                    ("interrupt queue address", self.intrq_dma.is_none()),
                    ("interrupt queue size", self.intrq_slots.is_none()),
                    ("statistics block", self.stats_dma.is_none()),
                    ("small buffer size", self.small_size.is_none()),
                    ("big buffer size", self.big_size.is_none()),
                    ("MTU", self.frame_limit.is_none()),
                ]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| n)
                .collect();
                if !missing.is_empty() {
                    self.protocol_error(format!("ETHERNET_UP without {}", missing.join(", ")));
                    return Err(CmdStatus::ERROR_RANGE);
                }
                self.up = true;
                self.counters.link_up = mcp::MXGEFW_LINK_UP;
                self.pending_stats = true;
                self.process_sends(ctx);
                Ok(0)
            }
            Cmd::ETHERNET_DOWN => {
                self.up = false;
                self.counters.link_up = mcp::MXGEFW_LINK_DOWN;
                self.pending_stats = true;
                self.pending_link_down = true;
                Ok(0)
            }
            Cmd::SET_MTU => {
                let v = d[0] as usize;
                if !(60..=MXGEFW_MAX_MTU).contains(&v) {
                    return Err(CmdStatus::ERROR_RANGE);
                }
                self.frame_limit = Some(v);
                Ok(0)
            }
            Cmd::SET_STATS_INTERVAL => Ok(0),
            Cmd::SET_STATS_DMA_OBSOLETE => {
                self.stats_dma = Some((addr, IrqData::OLD_LEN));
                Ok(0)
            }
            Cmd::SET_STATS_DMA_V2 => {
                let size = (d[2] & 0xffff) as usize;
                slice0(d[2] >> 16)?;
                if size < IrqData::OLD_LEN {
                    return Err(CmdStatus::ERROR_RANGE);
                }
                // New fields are added at the start of mcp_irq_data: a
                // bigger driver block gets ours at its end, a smaller one
                // the end of ours.
                let (at, len) = if size >= IrqData::LEN {
                    (addr + (size - IrqData::LEN) as u64, IrqData::LEN)
                } else {
                    (addr, size)
                };
                self.stats_dma = Some((at, len));
                Ok(0)
            }
            Cmd::ENABLE_PROMISC => {
                self.promisc = true;
                Ok(0)
            }
            Cmd::DISABLE_PROMISC => {
                self.promisc = false;
                Ok(0)
            }
            Cmd::SET_MAC_ADDRESS => {
                let a = d[0].to_be_bytes();
                let b = (d[1] as u16).to_be_bytes();
                self.mac_filter = [a[0], a[1], a[2], a[3], b[0], b[1]];
                Ok(0)
            }
            Cmd::ENABLE_FLOW_CONTROL => {
                self.flow_control = true;
                Ok(0)
            }
            Cmd::DISABLE_FLOW_CONTROL => {
                self.flow_control = false;
                Ok(0)
            }
            Cmd::ENABLE_ALLMULTI => {
                self.allmulti = true;
                Ok(0)
            }
            Cmd::DISABLE_ALLMULTI => {
                self.allmulti = false;
                Ok(0)
            }
            Cmd::SET_RSS_MCP_SLOT_TYPE => {
                if d[0] == mcp::MXGEFW_RSS_MCP_SLOT_TYPE_MIN {
                    Ok(0)
                } else {
                    Err(CmdStatus::ERROR_RANGE)
                }
            }
            _ => Err(CmdStatus::UNKNOWN),
        }
    }

    fn execute_handoff(&mut self, ctx: &mut DeviceCtx<'_>, complete: bool) {
        let b = &self.handoff_box;
        let confirm = u64::from(b.word(0)) << 32 | u64::from(b.word(1));
        let confirm_data: [u8; 4] = b.bytes[8..12].try_into().expect("4 bytes");
        let (start, len, to, jump) = (
            b.word(3) as usize,
            b.word(4) as usize,
            b.word(5) as usize,
            b.word(6),
        );
        let fail = |me: &mut Self, why: String| {
            me.stats.handoff_failures += 1;
            me.fw = Fw::Crashed;
            me.protocol_error(format!("hand-off: {why}"));
        };
        if matches!(self.fw, Fw::Crashed) {
            return;
        }
        if !complete {
            return fail(self, "executed before all 64 bytes were written".into());
        }
        if start != FW_OFFSET as usize + 8 || to != 8 || jump != 0 {
            return fail(
                self,
                format!("copy {len:#x} bytes from {start:#x} to {to:#x}, jump to {jump:#x}"),
            );
        }
        if start + len > self.cfg.string_specs as usize || len < gen_header::LEN {
            return fail(self, format!("image of {len:#x} bytes at {start:#x}"));
        }
        // The bootstrap copies the image (its first 8 bytes stay).
        self.sram.copy_within(start..start + len, to);
        let hdr = u32::from_be_bytes(
            self.sram[MCP_HEADER_PTR_OFFSET as usize..MCP_HEADER_PTR_OFFSET as usize + 4]
                .try_into()
                .expect("4 bytes"),
        ) as usize;
        if !hdr.is_multiple_of(4) || hdr < to || hdr + gen_header::LEN > to + len {
            return fail(self, format!("copied image has its header at {hdr:#x}"));
        }
        let version = match mcp::validate_header(&self.sram[hdr..hdr + gen_header::LEN]) {
            Ok((v, _)) => v,
            Err(e) => return fail(self, format!("copied image: {e}")),
        };
        if std::mem::take(&mut self.fail_handoff) {
            self.stats.handoff_failures += 1;
            self.fw = Fw::Crashed;
            return;
        }
        self.fill_runtime_header(hdr);
        self.fw = Fw::Running {
            version,
            loaded: true,
        };
        self.dummy_rdma = false;
        self.eth_reset();
        self.stats.handoffs += 1;
        if ctx.dma_write(confirm, &confirm_data).is_err() {
            self.stats.dma_errors += 1;
        }
    }

    fn execute_dummy_rdma(&mut self, ctx: &mut DeviceCtx<'_>, complete: bool) {
        if matches!(self.fw, Fw::Crashed) {
            return;
        }
        let b = self.rdma_box.clone();
        if !complete {
            self.protocol_error("dummy RDMA executed before all 64 bytes were written".into());
            return;
        }
        let confirm = u64::from(b.word(0)) << 32 | u64::from(b.word(1));
        let dummy = u64::from(b.word(3)) << 32 | u64::from(b.word(4));
        let enable = b.word(5) != 0;
        if enable {
            // The periodic reads: one here, to check the address.
            let mut x = [0u8; 64];
            if ctx.dma_read(dummy, &mut x).is_err() {
                self.stats.dma_errors += 1;
                return;
            }
        }
        self.dummy_rdma = enable;
        self.stats.dummy_rdma_requests += 1;
        if ctx.dma_write(confirm, &b.bytes[8..12]).is_err() {
            self.stats.dma_errors += 1;
        }
    }

    // ----- Send --------------------------------------------------------------

    fn send_write(&mut self, ctx: &mut DeviceCtx<'_>, off: usize, data: &[u8]) {
        let s = off / KreqEtherSend::LEN;
        let within = off % KreqEtherSend::LEN;
        if self.send[s][KreqEtherSend::FLAGS] != 0 && within == 0 {
            self.protocol_error(format!("send descriptor {s} rewritten before it was sent"));
        }
        self.send[s][within..within + data.len()].copy_from_slice(data);
        self.send_written[s] = true;
        if within + data.len() > KreqEtherSend::FLAGS {
            self.process_sends(ctx);
        }
    }

    /// Sends every frame whose first descriptor (at the read index) has
    /// its flags set.
    fn process_sends(&mut self, ctx: &mut DeviceCtx<'_>) {
        if !self.up {
            return;
        }
        let entries = self.send.len() as u32;
        let mask = entries - 1;
        let mut frames = Vec::new();
        loop {
            let s = (self.send_read & mask) as usize;
            let d0 = KreqEtherSend::from_bytes(&self.send[s]);
            if d0.flags == 0 {
                break;
            }
            let n = u32::from(d0.rdma_count);
            if d0.flags & MXGEFW_FLAGS_FIRST == 0
                || n == 0
                || n as usize > MXGEFW_MAX_SEND_DESC
                || n > entries
            {
                self.protocol_error(format!(
                    "send descriptor {s}: flags {:#x}, rdma_count {n} (a frame must start with FIRST and 1..=12 descriptors)",
                    d0.flags
                ));
                self.send[s][KreqEtherSend::FLAGS] = 0;
                self.send_written[s] = false;
                self.send_read = self.send_read.wrapping_add(1);
                continue;
            }
            let mut frame = Vec::new();
            let mut ok = true;
            for k in 0..n {
                let sk = ((self.send_read + k) & mask) as usize;
                let d = KreqEtherSend::from_bytes(&self.send[sk]);
                if !self.send_written[sk] {
                    self.protocol_error(format!(
                        "send descriptor {sk} (segment {k} of the frame at {s}) not written before the frame was made valid"
                    ));
                    ok = false;
                }
                if k > 0 && d.flags & MXGEFW_FLAGS_FIRST != 0 {
                    self.protocol_error(format!("send descriptor {sk}: FIRST inside a frame"));
                    ok = false;
                }
                if d.flags & MXGEFW_FLAGS_CKSUM != 0
                    || d.flags & MXGEFW_FLAGS_NO_TSO == 0
                    || d.cksum_offset != 0
                    || d.pseudo_hdr_offset != 0
                {
                    self.protocol_error(format!(
                        "send descriptor {sk}: checksum or TSO offload (flags {:#x}) is not modelled",
                        d.flags
                    ));
                    ok = false;
                }
                let len = u64::from(d.length);
                if len == 0 || d.addr % TX_BOUNDARY + len > TX_BOUNDARY {
                    self.protocol_error(format!(
                        "send descriptor {sk}: {len} bytes at {:#x} cross a {TX_BOUNDARY}-byte boundary or are empty",
                        d.addr
                    ));
                    ok = false;
                }
                if ok {
                    let at = frame.len();
                    frame.resize(at + len as usize, 0);
                    if ctx.dma_read(d.addr, &mut frame[at..]).is_err() {
                        self.stats.dma_errors += 1;
                        ok = false;
                    }
                }
                self.send[sk][KreqEtherSend::FLAGS] = 0;
                self.send_written[sk] = false;
            }
            self.send_read = self.send_read.wrapping_add(n);
            self.stats.tx_descriptors += u64::from(n);
            self.counters.send_done_count = self.counters.send_done_count.wrapping_add(1);
            self.pending_tx = true;
            if ok && self.frame_limit.is_some_and(|l| frame.len() <= l) {
                self.stats.tx_frames += 1;
                frames.push(frame);
            } else {
                self.stats.tx_dropped += 1;
            }
        }
        if !frames.is_empty() {
            let port = self.port.clone();
            ctx.defer(move || {
                for f in frames {
                    port.send(f);
                }
            });
        }
    }

    // ----- Receive -----------------------------------------------------------

    fn rx_ring_write(&mut self, big: bool, off: usize, data: &[u8]) {
        let name = if big { "big" } else { "small" };
        let s = off / KreqEtherRecv::LEN;
        let within = off % KreqEtherRecv::LEN;
        let ring = if big { &self.big } else { &self.small };
        if ring.live(s as u32) {
            return self.protocol_error(format!("write to posted {name} receive descriptor {s}"));
        }
        let ring = if big { &mut self.big } else { &mut self.small };
        ring.desc[s][within..within + data.len()].copy_from_slice(data);
        ring.written[s] = true;
        let touches_low = within <= KreqEtherRecv::ADDR_LOW && within + data.len() >= 8;
        if !s.is_multiple_of(RX_GROUP)
            || !touches_low
            || KreqEtherRecv::addr_low(&ring.desc[s]) == RX_INVALID_ADDR_LOW
        {
            return;
        }
        // The group's first addr_low became valid: the group is handed over.
        let entries = ring.desc.len();
        let expected = (ring.fill & ring.mask()) as usize;
        let why = if s != expected {
            Some(format!(
                "{name} receive group handed over at {s}, expected {expected}"
            ))
        } else if ring.fill.wrapping_sub(ring.cnt) as usize + RX_GROUP > entries {
            Some(format!(
                "{name} receive group at {s} handed over while its buffers are posted"
            ))
        } else if !ring.written[s..s + RX_GROUP].iter().all(|&w| w) {
            Some(format!(
                "{name} receive group at {s} handed over before its 8 descriptors were written"
            ))
        } else {
            ring.written[s..s + RX_GROUP].fill(false);
            ring.fill = ring.fill.wrapping_add(RX_GROUP as u32);
            None
        };
        match why {
            Some(w) => self.protocol_error(w),
            None if big => self.stats.big_groups_posted += 1,
            None => self.stats.small_groups_posted += 1,
        }
    }

    fn drop_counted(&mut self, counter: fn(&mut IrqData) -> &mut u32) {
        let c = counter(&mut self.counters);
        *c = c.wrapping_add(1);
        self.pending_stats = true;
    }

    /// Writes one rx-done entry: checksum, then the length (the valid
    /// marker) last.
    fn write_rx_done(&mut self, ctx: &mut DeviceCtx<'_>, checksum: u16, len: u16) {
        let (Some(base), Some(slots)) = (self.intrq_dma, self.intrq_slots) else {
            return;
        };
        let at = base + u64::from(self.rx_done_idx & (slots - 1)) * mcp::slot::LEN as u64;
        match ctx.dma_read_u16(at + mcp::slot::LENGTH as u64) {
            Ok(0) => {}
            Ok(_) => self.protocol_error(format!(
                "rx-done entry {} still in use when the firmware needed it",
                self.rx_done_idx & (slots - 1)
            )),
            Err(_) => self.stats.dma_errors += 1,
        }
        if ctx
            .dma_write(at + mcp::slot::CHECKSUM as u64, &checksum.to_be_bytes())
            .is_err()
            || ctx
                .dma_write_u16(
                    at + mcp::slot::LENGTH as u64,
                    u16::from_le_bytes(len.to_be_bytes()),
                )
                .is_err()
        {
            self.stats.dma_errors += 1;
        }
        self.rx_done_idx = self.rx_done_idx.wrapping_add(1);
    }

    fn receive_frame(&mut self, ctx: &mut DeviceCtx<'_>, frame: Vec<u8>) {
        if !self.up {
            self.stats.rx_while_down += 1;
            return;
        }
        let len = frame.len();
        let (Some(small_size), Some(big_size), Some(limit)) =
            (self.small_size, self.big_size, self.frame_limit)
        else {
            return;
        };
        if len < 60 {
            return self.drop_counted(|c| &mut c.dropped_runt);
        }
        if len > limit || (len > small_size && len + MXGEFW_PAD > big_size) {
            // Too long for the MTU, or for one big buffer (chaining big
            // buffers is not modelled).
            return self.drop_counted(|c| &mut c.dropped_overrun);
        }
        let dst: [u8; 6] = frame[0..6].try_into().expect("6 bytes");
        if !self.promisc {
            if dst[0] & 1 != 0 {
                if dst != [0xff; 6] && !self.allmulti {
                    return self.drop_counted(|c| &mut c.dropped_multicast_filtered);
                }
            } else if dst != self.mac_filter {
                return self.drop_counted(|c| &mut c.dropped_unicast_filtered);
            }
        }
        let big = len > small_size;
        let ring = if big { &mut self.big } else { &mut self.small };
        if ring.cnt == ring.fill {
            return if big {
                self.drop_counted(|c| &mut c.dropped_no_big_buffer)
            } else {
                self.drop_counted(|c| &mut c.dropped_no_small_buffer)
            };
        }
        let slot = (ring.cnt & ring.mask()) as usize;
        let addr = KreqEtherRecv::from_bytes(&ring.desc[slot]).addr;
        ring.cnt = ring.cnt.wrapping_add(1);
        let mut data = vec![0u8; MXGEFW_PAD];
        data.extend_from_slice(&frame);
        if ctx.dma_write(addr, &data).is_err() {
            self.stats.dma_errors += 1;
            return;
        }
        let fault = self.rx_faults.pop_front();
        let reported = match fault {
            Some(RxFault::BadLength(l)) => l,
            _ => len as u16,
        };
        self.write_rx_done(ctx, mcp::partial_checksum(&frame), reported);
        if let Some(RxFault::Spurious(l)) = fault {
            self.write_rx_done(ctx, 0, l);
        }
        self.stats.rx_frames += 1;
        if big {
            self.stats.rx_big += 1;
        } else {
            self.stats.rx_small += 1;
        }
        self.pending_rx = true;
    }

    // ----- Interrupts ----------------------------------------------------------

    /// Raises an interrupt if there is news and the driver has claimed the
    /// last one: DMA the block (`valid` last), then MSI-X vector 0.
    fn maybe_interrupt(&mut self, ctx: &mut DeviceCtx<'_>) {
        let Some((addr, len)) = self.stats_dma else {
            return;
        };
        let rx = self.pending_rx && self.rx_armed;
        if !self.irq_armed
            || !(rx || self.pending_tx || self.pending_stats || self.pending_link_down)
        {
            return;
        }
        let mut d = self.counters;
        d.valid = if rx { 3 } else { 2 };
        d.stats_updated = u8::from(self.pending_stats);
        d.link_down = u8::from(self.pending_link_down);
        if let Some(j) = self.send_done_jump.take() {
            d.send_done_count = d.send_done_count.wrapping_add(j);
        }
        self.irq_armed = false;
        if rx {
            self.rx_armed = false;
            self.pending_rx = false;
        }
        self.pending_tx = false;
        self.pending_stats = false;
        self.pending_link_down = false;
        self.stats.interrupts += 1;
        if self.lose_irqs > 0 {
            self.lose_irqs -= 1;
            self.stats.interrupts_lost += 1;
            return;
        }
        let b = d.to_bytes();
        // Everything but `valid`, then `valid`.
        let start = IrqData::LEN - len;
        if ctx.dma_write(addr, &b[start..IrqData::VALID]).is_err()
            || ctx
                .dma_write(addr + (IrqData::VALID - start) as u64, &b[IrqData::VALID..])
                .is_err()
        {
            self.stats.dma_errors += 1;
            return;
        }
        if self.lose_msix > 0 {
            self.lose_msix -= 1;
            self.stats.msix_lost += 1;
        } else {
            ctx.raise_msix(0);
        }
    }

    fn claim_write(&mut self, off: u64) {
        self.stats.claims += 1;
        match off {
            0 => self.rx_armed = true,
            4 => self.irq_armed = true,
            _ => {}
        }
    }
}

/// A write's bytes as they land in memory.
fn write_bytes(width: u8, value: u64) -> Vec<u8> {
    value.to_ne_bytes()[..usize::from(width)].to_vec()
}

fn read_value(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    u64::from_ne_bytes(b)
}

impl DeviceModel for Myri10geModel {
    fn config_space(&self) -> ConfigSpace {
        let mut c = ConfigSpace::new(MYRICOM_VENDOR_ID, self.cfg.device_id, 0x020000, 0, true);
        c.set_bar(
            0,
            BAR0_LEN,
            BarKind::Memory {
                is_64bit: true,
                prefetchable: true,
            },
        );
        c.set_bar(
            2,
            0x1000,
            BarKind::Memory {
                is_64bit: true,
                prefetchable: false,
            },
        );
        c.add_capability(CAP_ID_VENDOR, &[0; 22]);
        c.add_capability(CAP_ID_PCIE, &[0; 58]);
        let mut msix = Vec::new();
        msix.extend_from_slice(&((self.cfg.msix_vectors.max(1) - 1) as u16).to_le_bytes());
        msix.extend_from_slice(&2u32.to_le_bytes());
        msix.extend_from_slice(&(0x800u32 | 2).to_le_bytes());
        c.add_capability(CAP_ID_MSIX, &msix);
        c
    }

    fn msix_vectors(&self) -> u32 {
        self.cfg.msix_vectors
    }

    fn mmio_read(&mut self, _ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8) -> u64 {
        if bar != 0 {
            return 0;
        }
        let w = usize::from(width);
        let o = offset as usize;
        let send_end = SEND_RING_AT as usize + self.send.len() * KreqEtherSend::LEN;
        let rx_len = self.small.desc.len() * KreqEtherRecv::LEN;
        if o + w <= self.sram.len() {
            let mut b = self.sram[o..o + w].to_vec();
            if let Some(c) = self.corrupt_readback {
                let at = FW_OFFSET as usize + c;
                if (o..o + w).contains(&at) {
                    b[at - o] ^= 0xff;
                }
            }
            read_value(&b)
        } else if (SEND_RING_AT as usize..send_end).contains(&o) {
            let r = o - SEND_RING_AT as usize;
            let (s, i) = (r / KreqEtherSend::LEN, r % KreqEtherSend::LEN);
            read_value(&self.send[s][i..i + w])
        } else if (SMALL_RING_AT as usize..SMALL_RING_AT as usize + rx_len).contains(&o) {
            let r = o - SMALL_RING_AT as usize;
            read_value(&self.small.desc[r / 8][r % 8..r % 8 + w])
        } else if (BIG_RING_AT as usize..BIG_RING_AT as usize + rx_len).contains(&o) {
            let r = o - BIG_RING_AT as usize;
            read_value(&self.big.desc[r / 8][r % 8..r % 8 + w])
        } else if offset == COAL_DELAY_AT && width == 4 {
            u64::from(u32::from_ne_bytes(self.coal_delay.to_be_bytes()))
        } else {
            0
        }
    }

    fn mmio_write(&mut self, ctx: &mut DeviceCtx<'_>, bar: u8, offset: u64, width: u8, value: u64) {
        if bar != 0 {
            return;
        }
        let data = write_bytes(width, value);
        let o = offset as usize;
        let w = data.len();
        let send_end = SEND_RING_AT + (self.send.len() * KreqEtherSend::LEN) as u64;
        let rx_len = (self.small.desc.len() * KreqEtherRecv::LEN) as u64;
        let in_box = |at: u64| (at..at + 64).contains(&offset);
        if o + w <= self.sram.len() {
            self.sram[o..o + w].copy_from_slice(&data);
        } else if in_box(MXGEFW_ETH_CMD) {
            if let Some(complete) = self.cmd_box.write(o - MXGEFW_ETH_CMD as usize, &data) {
                self.execute_command(ctx, complete);
            }
        } else if in_box(MXGEFW_BOOT_HANDOFF) {
            if let Some(complete) = self
                .handoff_box
                .write(o - MXGEFW_BOOT_HANDOFF as usize, &data)
            {
                self.execute_handoff(ctx, complete);
            }
        } else if in_box(MXGEFW_BOOT_DUMMY_RDMA) {
            if let Some(complete) = self
                .rdma_box
                .write(o - MXGEFW_BOOT_DUMMY_RDMA as usize, &data)
            {
                self.execute_dummy_rdma(ctx, complete);
            }
        } else if (SEND_RING_AT..send_end).contains(&offset) {
            self.send_write(ctx, o - SEND_RING_AT as usize, &data);
        } else if (SMALL_RING_AT..SMALL_RING_AT + rx_len).contains(&offset) {
            self.rx_ring_write(false, o - SMALL_RING_AT as usize, &data);
        } else if (BIG_RING_AT..BIG_RING_AT + rx_len).contains(&offset) {
            self.rx_ring_write(true, o - BIG_RING_AT as usize, &data);
        } else if (IRQ_ACK_AT..IRQ_ACK_AT + 8).contains(&offset) {
            if width != 4
                || u32::from_be_bytes(data[..4].try_into().expect("4")) != mcp::IRQ_CLAIM_VALUE
            {
                self.protocol_error(format!(
                    "claim word written with {value:#x} (width {width})"
                ));
            }
            self.claim_write(offset - IRQ_ACK_AT);
        } else if offset == COAL_DELAY_AT && width == 4 {
            self.coal_delay = u32::from_be_bytes(data[..4].try_into().expect("4 bytes"));
        } else if offset == IRQ_DEASSERT_AT {
            // Legacy INTx only; nothing to model.
        } else {
            self.stats.stray_writes += 1;
        }
        self.maybe_interrupt(ctx);
    }

    fn reset(&mut self, _ctx: &mut DeviceCtx<'_>) {
        self.stats.function_resets += 1;
        self.power_on();
    }

    fn poll(&mut self, ctx: &mut DeviceCtx<'_>) {
        while let Some(frame) = self.port.recv() {
            self.receive_frame(ctx, frame);
        }
        self.maybe_interrupt(ctx);
    }
}

/// Builds a synthetic firmware image for tests: a deterministic byte
/// pattern with a pointer at 0x3c to an `mcp_gen_header` at
/// `header_offset` (header length, type, version; run-time fields zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareImageSpec {
    /// `mcp_type`.
    pub mcp_type: u32,
    /// The version string.
    pub version: String,
    /// Image length.
    pub len: usize,
    /// Where the header goes (the value at 0x3c).
    pub header_offset: u32,
}

impl Default for FirmwareImageSpec {
    fn default() -> Self {
        Self {
            mcp_type: mcp::MCP_TYPE_ETH,
            version: "1.4.57 -P- model firmware".into(),
            len: 64 * 1024,
            header_offset: 0x2000,
        }
    }
}

impl FirmwareImageSpec {
    /// The image.
    pub fn build(&self) -> Vec<u8> {
        let mut b: Vec<u8> = (0..self.len)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let p = MCP_HEADER_PTR_OFFSET as usize;
        if b.len() >= p + 4 {
            b[p..p + 4].copy_from_slice(&self.header_offset.to_be_bytes());
        }
        let h = self.header_offset as usize;
        if h + gen_header::LEN <= b.len() {
            b[h..h + gen_header::LEN].fill(0);
            b[h..h + 4].copy_from_slice(&(gen_header::LEN as u32).to_be_bytes());
            b[h + 4..h + 8].copy_from_slice(&self.mcp_type.to_be_bytes());
            let v = self.version.as_bytes();
            let n = v.len().min(gen_header::VERSION_LEN - 1);
            b[h + gen_header::VERSION..h + gen_header::VERSION + n].copy_from_slice(&v[..n]);
        }
        b
    }
}

/// A valid synthetic Ethernet firmware image (version 1.4.57, 64 KiB).
pub fn firmware_image() -> Vec<u8> {
    FirmwareImageSpec::default().build()
}
