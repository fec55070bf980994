//! [`RawXsk`]: whole Ethernet frames over AF_XDP, no BCL protocol.
//!
//! This is the machinery under [`crate::AfXdpMethod`] — the XDP program,
//! one socket per RX queue, UMEMs and rings — with a frame-level API. Tools
//! use it for the bare AF_XDP pingpong (`afxdp-raw`), the floor the BCL
//! protocol is compared with.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::config::{AfXdpConfig, AfXdpError, AttachMode, ModeReport, Queues};
use crate::netlink::{self, LinkInfo};
use crate::sys;
use crate::xdp::Attachment;
use crate::xsk::{QueueStats, Xsk, XskParams};
use bcl_ether::{Mac, HEADER_LEN};

/// An AF_XDP endpoint on one interface, moving whole Ethernet frames (see
/// the module documentation).
pub struct RawXsk {
    // Drop order: detach the program first, then close the sockets.
    attachment: Attachment,
    queues: Vec<Xsk>,
    /// Index (in `queues`) of the socket `send` uses.
    tx_queue: usize,
    /// Round-robin start of the next `recv`.
    next_rx: usize,
    epoll: Option<OwnedFd>,
    info: LinkInfo,
    mac: Mac,
    report: ModeReport,
    config: AfXdpConfig,
    /// Largest Ethernet frame sent or received.
    max_frame: usize,
}

impl RawXsk {
    /// Attaches the XDP program to `config.ifname` (in the calling thread's
    /// network namespace) and binds a socket to each selected RX queue.
    pub fn open(config: &AfXdpConfig) -> Result<RawXsk, AfXdpError> {
        config.validate()?;
        let info = netlink::link_info(&config.ifname).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENODEV) {
                AfXdpError::NotUsable(format!(
                    "no interface {} in this network namespace",
                    config.ifname
                ))
            } else {
                AfXdpError::io(format!("asking rtnetlink about {}", config.ifname))(e)
            }
        })?;
        if !info.is_up() {
            return Err(AfXdpError::NotUsable(format!(
                "interface {} is down (`ip link set {} up`)",
                info.name, info.name
            )));
        }
        let mac = info.mac.ok_or_else(|| {
            AfXdpError::NotUsable(format!("interface {} has no Ethernet address", info.name))
        })?;
        let active = ActiveQueues::of(&info);
        let queue_ids: Vec<u32> = match &config.queues {
            Queues::All => (0..active.count).collect(),
            Queues::List(l) => {
                if let Some(q) = l.iter().find(|&&q| q >= active.count) {
                    return Err(AfXdpError::Config(format!(
                        "queue {q} is not an active RX queue of {}: {}",
                        info.name,
                        active.describe(info.rx_queues)
                    )));
                }
                l.clone()
            }
        };
        let queues_note = active.note(&info, &queue_ids);
        // Frames larger than a chunk need multi-buffer support: from the
        // program (so the driver hands it such frames) and the sockets.
        let one_chunk = config.max_rx_frame();
        let mtu_frame = info.mtu as usize + HEADER_LEN;
        let multi_buffer = (config.multi_buffer && mtu_frame > one_chunk).then_some(mtu_frame);
        let attachment = Attachment::attach(
            &info,
            config.ethertype,
            info.rx_queues,
            config.force_attach,
            multi_buffer.is_some(),
        )?;
        let (zc_possible, zc_why_not) = match attachment.mode {
            AttachMode::Native => (true, ""),
            AttachMode::Generic => (false, "generic XDP has no zero-copy"),
        };
        let mut queues = Vec::with_capacity(queue_ids.len());
        let mut reports = Vec::with_capacity(queue_ids.len());
        for (i, &q) in queue_ids.iter().enumerate() {
            let params = XskParams {
                ifindex: info.ifindex,
                queue: q,
                frame_size: config.frame_size,
                rx_frames: config.rx_ring_size,
                tx_frames: if i == 0 || config.tx_on_all_queues {
                    config.tx_ring_size
                } else {
                    0
                },
                zero_copy_possible: zc_possible,
                zero_copy_why_not: zc_why_not,
                force_bind: config.force_bind,
                need_wakeup: config.need_wakeup,
                huge_pages: config.huge_pages,
                busy_poll: config
                    .busy_poll
                    .then_some((config.busy_poll_usecs, config.busy_poll_budget)),
                multi_buffer,
            };
            let (xsk, report) = Xsk::open(&params)?;
            attachment.insert(q, xsk.fd())?;
            queues.push(xsk);
            reports.push(report);
        }
        let epoll = if queues.len() > 1 {
            let fds: Vec<RawFd> = queues.iter().map(Xsk::fd).collect();
            Some(sys::epoll_for(&fds).map_err(AfXdpError::io("epoll over the queues' sockets"))?)
        } else {
            None
        };
        let multi = multi_buffer.filter(|_| queues.iter().all(Xsk::is_multi_buffer));
        let max_frame = multi.unwrap_or(one_chunk);
        let multi_buffer_note = match (multi_buffer, multi) {
            (_, Some(_)) => format!(
                "multi-buffer: a frame spans up to {} chunks of {} B (XDP_USE_SG)",
                max_frame.div_ceil(config.frame_size as usize),
                config.frame_size
            ),
            (Some(_), None) => format!(
                "multi-buffer refused by the kernel; frames stay within one chunk, MTU {} B",
                one_chunk - HEADER_LEN
            ),
            (None, _) if !config.multi_buffer => "one chunk per frame (multi-buffer off)".into(),
            (None, _) => "one chunk per frame (the MTU fits in one)".into(),
        };
        let report = ModeReport {
            ifname: info.name.clone(),
            ifindex: info.ifindex,
            mac,
            if_mtu: info.mtu,
            if_rx_queues: info.rx_queues,
            active_rx_queues: active.count,
            queues_note,
            attach: attachment.mode,
            attach_note: attachment.note.clone(),
            prog_id: attachment.prog_id,
            frame_size: config.frame_size,
            max_frame: max_frame as u32,
            multi_buffer_note,
            queues: reports,
        };
        Ok(RawXsk {
            attachment,
            queues,
            tx_queue: 0,
            next_rx: 0,
            epoll,
            info,
            mac,
            report,
            config: config.clone(),
            max_frame,
        })
    }

    /// The interface's MAC address.
    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.info.ifindex
    }

    /// The interface's MTU.
    pub fn if_mtu(&self) -> u32 {
        self.info.mtu
    }

    /// The configuration this endpoint was opened with.
    pub fn config(&self) -> &AfXdpConfig {
        &self.config
    }

    /// What was obtained: attach mode, bind mode per queue, and why.
    pub fn mode_report(&self) -> &ModeReport {
        &self.report
    }

    /// Id of our XDP program.
    pub fn prog_id(&self) -> u32 {
        self.attachment.prog_id
    }

    /// Largest Ethernet frame (header included) that can be received.
    pub fn max_rx_frame(&self) -> usize {
        self.max_frame
    }

    /// Largest Ethernet frame (header included) that can be sent: a whole
    /// chunk, or with multi-buffer frames the largest frame.
    pub fn max_tx_frame(&self) -> usize {
        if self.max_frame > self.config.max_rx_frame() {
            self.max_frame
        } else {
            self.config.frame_size as usize
        }
    }

    /// The bound RX queues, in socket order.
    pub fn queues(&self) -> Vec<u32> {
        self.queues.iter().map(Xsk::queue).collect()
    }

    /// Counters per bound queue (same order as [`RawXsk::queues`]).
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.queues.iter().map(|q| q.stats).collect()
    }

    /// The kernel's counters per bound queue (`XDP_STATISTICS`:
    /// rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full,
    /// rx_fill_ring_empty_descs, tx_ring_empty_descs).
    pub fn kernel_stats(&self) -> Vec<[u64; 6]> {
        self.queues
            .iter()
            .map(|q| {
                q.kernel_stats()
                    .map(|s| {
                        [
                            s.rx_dropped,
                            s.rx_invalid_descs,
                            s.tx_invalid_descs,
                            s.rx_ring_full,
                            s.rx_fill_ring_empty_descs,
                            s.tx_ring_empty_descs,
                        ]
                    })
                    .unwrap_or_default()
            })
            .collect()
    }

    /// A descriptor that becomes readable when a frame arrives on any bound
    /// queue: the socket itself with one queue, an epoll instance over all
    /// sockets with several. Poll it for `POLLIN`, then call
    /// [`RawXsk::recv`].
    pub fn readiness_fd(&self) -> RawFd {
        match &self.epoll {
            Some(e) => e.as_raw_fd(),
            None => self.queues[0].fd(),
        }
    }

    /// Shows up to `budget` received frames, each in place and whole
    /// (Ethernet header first), with the RX queue it arrived on; the bytes
    /// are valid during the call only. Queues are visited round robin.
    /// Also pushes out any TX frames still waiting for a kick. Returns the
    /// number of frames shown.
    pub fn recv(
        &mut self,
        budget: usize,
        f: &mut dyn FnMut(u32, &[u8]),
    ) -> Result<usize, AfXdpError> {
        let nq = self.queues.len();
        let mut left = u32::try_from(budget).unwrap_or(u32::MAX);
        let mut shown = 0usize;
        let start = self.next_rx;
        for k in 0..nq {
            if left == 0 {
                break;
            }
            let i = (start + k) % nq;
            let q = &mut self.queues[i];
            let queue = q.queue();
            let n = q.rx(left, &mut |b| f(queue, b));
            left -= n.min(left);
            shown += n as usize;
        }
        self.next_rx = (start + 1) % nq;
        self.flush()?;
        Ok(shown)
    }

    /// Lends TX buffers (each [`RawXsk::max_tx_frame`] bytes) to `f` until
    /// it returns `None` or buffers run out; `f` writes a whole Ethernet
    /// frame at the start and returns its length (0 ends the batch, like
    /// `None`). The batch is then handed to the kernel. Returns the number
    /// of frames queued.
    pub fn send_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, AfXdpError> {
        let i = self.tx_queue;
        self.send_on_index(i, f)
    }

    /// Like [`RawXsk::send_with`] on the socket of RX queue `queue` (it
    /// needs a TX ring: the first queue, or all with
    /// [`AfXdpConfig::tx_on_all_queues`]). On veth the peer receives a
    /// frame on the RX queue with the number of the TX queue it was sent
    /// from.
    pub fn send_on(
        &mut self,
        queue: u32,
        f: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, AfXdpError> {
        let i = self
            .queues
            .iter()
            .position(|q| q.queue() == queue && q.has_tx())
            .ok_or_else(|| AfXdpError::Config(format!("queue {queue} has no TX ring")))?;
        self.send_on_index(i, f)
    }

    fn send_on_index(
        &mut self,
        i: usize,
        f: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, AfXdpError> {
        let q = &mut self.queues[i];
        let queue = q.queue();
        q.tx(f)
            .map(|n| n as usize)
            .map_err(|e| kick_error(queue, e))
    }

    /// Sends one frame (copied into a TX buffer). `Ok(false)` if no buffer
    /// is free right now.
    pub fn send(&mut self, frame: &[u8]) -> Result<bool, AfXdpError> {
        if frame.is_empty() || frame.len() > self.max_tx_frame() {
            return Err(AfXdpError::Config(format!(
                "frame of {} bytes: must be 1..={}",
                frame.len(),
                self.max_tx_frame()
            )));
        }
        let mut once = Some(frame);
        let n = self.send_with(&mut |buf| {
            let fr = once.take()?;
            buf[..fr.len()].copy_from_slice(fr);
            Some(fr.len())
        })?;
        Ok(n == 1)
    }

    /// TX buffers free on the sending socket now.
    pub fn tx_space(&mut self) -> usize {
        let i = self.tx_queue;
        self.queues[i].tx_space() as usize
    }

    /// Kicks the kernel for TX frames still in the rings (copy mode sends
    /// only during a `sendto`; a kick can be cut short by a busy device).
    pub fn flush(&mut self) -> Result<(), AfXdpError> {
        for q in self.queues.iter_mut().filter(|q| q.has_tx()) {
            let queue = q.queue();
            q.flush().map_err(|e| kick_error(queue, e))?;
        }
        Ok(())
    }
}

/// The error of a failed TX kick (built only on failure: this is on the
/// data path).
#[cold]
fn kick_error(queue: u32, source: std::io::Error) -> AfXdpError {
    AfXdpError::Io {
        context: format!("queue {queue}: TX kick (sendto)"),
        source,
    }
}

/// How many of an interface's RX queues are active, and how that was
/// learnt (for the report).
struct ActiveQueues {
    count: u32,
    source: String,
}

impl ActiveQueues {
    /// The active RX queues of `info`: `ETHTOOL_GCHANNELS`' receive plus
    /// combined channels, at most the allocated ones; all allocated queues
    /// when the driver does not report channels.
    fn of(info: &netlink::LinkInfo) -> ActiveQueues {
        match sys::active_rx_queues(&info.name) {
            Ok(Some(n)) => ActiveQueues {
                count: n.min(info.rx_queues),
                source: format!("ETHTOOL_GCHANNELS: {n} active"),
            },
            Ok(None) => ActiveQueues {
                count: info.rx_queues,
                source: "the driver reports no channels; every allocated queue counted".into(),
            },
            Err(e) => ActiveQueues {
                count: info.rx_queues,
                source: format!(
                    "ETHTOOL_GCHANNELS failed ({}); every allocated queue counted",
                    sys::errno_name(&e)
                ),
            },
        }
    }

    /// "1 active of 2 allocated (ETHTOOL_GCHANNELS: 1 active)".
    fn describe(&self, allocated: u32) -> String {
        format!(
            "{} active of {allocated} allocated ({})",
            self.count, self.source
        )
    }

    /// What was bound and what was skipped, and why.
    fn note(&self, info: &netlink::LinkInfo, bound: &[u32]) -> String {
        let skipped: Vec<String> = (0..info.rx_queues)
            .filter(|q| !bound.contains(q))
            .map(|q| q.to_string())
            .collect();
        let state = self.describe(info.rx_queues);
        match skipped.as_slice() {
            [] => format!("RX queues: {state}; all bound"),
            s if self.count < info.rx_queues && bound.len() as u32 == self.count => format!(
                "RX queues: {state}; not bound: {} (allocated but not active: frames never arrive there, and the kernel refuses to bind them)",
                s.join(", ")
            ),
            s => format!("RX queues: {state}; not bound: {} (not asked for)", s.join(", ")),
        }
    }
}
