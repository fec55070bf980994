//! The `shm` method: BCL over shared memory between processes of one node.
//!
//! Everything a process receives arrives through its one inbox, in
//! order, as *items* tagged by their first byte:
//!
//! | tag | item | |
//! |---|---|---|
//! | 1 `FRAME` | a BCL frame, inline | small frames (control messages, small system messages) |
//! | 2 `DIRECT` | a whole system-channel message, inline, no BCL header | the engine's shortcut for small messages (one cache line for 8 bytes) |
//! | 3 `BIG_FRAME` | "my next exchange message is a BCL frame" | frames too large for a slot (up to 64 KiB) |
//! | 4 `BULK` | "my next exchange message is transfer data": kind, channel, transfer, length | normal-channel messages, RMA puts and get replies, copied by the receiver straight into their destination while the sender is still copying in (pipelined) |
//! | 5 `BULK_SHARED` | "transfer data is in my shared heap": kind, channel, transfer, length, memfd, allocation number, offset | the same, when the sender's buffer is in its [`SharedHeap`](crate::heap::SharedHeap): the receiver copies it from there, one copy |
//! | 6 `BULK_PULLED` | kind, transfer | "I have copied it": the sender's buffer is free |
//! | 7 `BULK_REFUSED` | kind, transfer | "I cannot map it": the sender pushes the data through the exchange queue instead |
//! | 8 `DIRECT_SERVICE` | a whole service message, inline, as `DIRECT` | remote service requests and their answers ([`MessageClass::Service`]): the engine's service layer takes them, never the application |
//!
//! Large data travels in the per-pair exchange queue. A big frame is pushed
//! whole before its notice goes into the inbox, so the receiver finds it
//! complete; transfer data is announced first and pulled while it streams.
//! Transfer data from a sender's shared heap does not travel at all: the
//! receiver maps the sender's allocation (once; up to
//! [`PeerMappings::CAPACITY`](crate::heap::PeerMappings::CAPACITY) are kept)
//! and copies from it, and the sender's transfer completes when the
//! receiver says so.
//! Per sender, items keep their order: a sender's later frames wait behind
//! its earlier ones (in its queue when the inbox or exchange queue is full,
//! at the receiver behind an unfinished pull).
//!
//! The method never loses, duplicates or reorders (`caps().reliable`) and
//! memory does not corrupt bytes (`caps().integrity`): the core skips
//! sequence numbers, acknowledgements, retransmission and CRC32C for it. A
//! full inbox or exchange queue is back-pressure, never loss.
//!
//! The method is a [`DirectMethod`]: an engine drives receiving with
//! [`DirectMethod::poll_rx`] (frames, direct messages and transfer data
//! together) and moves transfers with [`DirectMethod::housekeeping`]; the
//! generic [`Method::rx_burst`] handles frames only and drops other items
//! (counted).

use crate::heap::{self, PeerMappings, SharedBytes, SharedRef};
use crate::{Mailbox, MailboxConfig, PeerId, PullProgress, ShmError, ShmEvent};
use bcl_core::method::{
    Descriptor, DirectError, DirectHead, DirectMethod, LinkId, MessageClass, Method, MethodCaps,
    MethodCounters, MethodError, RxHandler, TransferHost, TxFrame,
};
use bcl_core::port::{BulkKind, BulkToken, OutboundBulk};
use bcl_core::{Availability, JobKey, ProcessAddr};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::os::fd::RawFd;

/// The method's name.
pub const METHOD_NAME: &str = "shm";

const TAG_FRAME: u8 = 1;
const TAG_DIRECT: u8 = 2;
const TAG_BIG_FRAME: u8 = 3;
const TAG_BULK: u8 = 4;
const TAG_BULK_SHARED: u8 = 5;
const TAG_BULK_PULLED: u8 = 6;
const TAG_BULK_REFUSED: u8 = 7;
/// A direct message of the service class (see [`MessageClass::Service`]).
const TAG_DIRECT_SERVICE: u8 = 8;
/// Bytes of a `BULK` notice: tag, kind, channel, transfer, length.
const BULK_NOTICE_LEN: usize = 1 + 1 + 2 + 4 + 8;
/// Bytes of a `BULK_SHARED` notice: a `BULK` notice, then memfd,
/// allocation number and offset.
const SHARED_NOTICE_LEN: usize = BULK_NOTICE_LEN + 4 + 8 + 8;
/// Bytes of a `BULK_PULLED` or `BULK_REFUSED` answer: tag, kind, transfer.
const ANSWER_LEN: usize = 1 + 1 + 4;
/// Transfers at least this long are read from the sender's shared heap
/// when they are in it.
const MIN_SHARED_PULL: u64 = 64 << 10;
/// Bytes copied from a shared allocation per progress call, so one huge
/// transfer does not stall the engine's other work.
const SHARED_COPY_STEP: usize = 8 << 20;
/// Largest BCL frame the method carries.
const MTU: usize = 65_535;

/// Whether shared memory can be used here.
pub fn probe() -> Availability {
    match std::fs::metadata("/dev/shm") {
        Ok(m) if m.is_dir() => Availability::Usable,
        _ => Availability::NotUsable("/dev/shm is not available".into()),
    }
}

/// Parses the address of a `shm:` descriptor, `NODE.PORT@NODEID`: the
/// process and the node identity ([`node_identity`]) it runs on.
pub fn parse_address(address: &str) -> Result<(ProcessAddr, &str), String> {
    let (addr, node) = address
        .split_once('@')
        .ok_or_else(|| format!("{address:?} is not NODE.PORT@NODEID"))?;
    let addr: ProcessAddr = addr.parse().map_err(|e| format!("{e}"))?;
    if node.is_empty() {
        return Err(format!("{address:?} has no node identity after '@'"));
    }
    Ok((addr, node))
}

/// This node's identity for shared memory: processes can share segments only
/// if they run on the same boot of the same machine and see the same
/// `/dev/shm`; the network namespace is included so that lab "nodes" (one
/// namespace each) count as different nodes.
pub fn node_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let boot: String = boot
        .trim()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect();
    let netns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or(0);
    format!("{boot}-{netns:x}")
}

/// Counters of the method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmMethodStats {
    /// Frames sent inline through the inbox.
    pub frames_inline: u64,
    /// Frames sent through the exchange queue.
    pub frames_big: u64,
    /// Direct messages sent.
    pub direct_sent: u64,
    /// Direct messages received.
    pub direct_received: u64,
    /// Bulk transfers sent.
    pub bulk_sent: u64,
    /// Bulk transfers received.
    pub bulk_received: u64,
    /// Of the bulk transfers sent, those the receiver copied from this
    /// process's shared heap (one copy).
    pub bulk_sent_shared: u64,
    /// Of the bulk transfers received, those copied from the sender's
    /// shared heap.
    pub bulk_received_shared: u64,
    /// Transfers announced in a shared heap that could not be mapped here
    /// (the sender then pushed them through the exchange queue).
    pub shared_refused: u64,
    /// Times an item had to wait because an inbox or exchange queue was full.
    pub backpressure: u64,
    /// Items dropped because the receiving side could not handle them (a
    /// generic `rx_burst` caller, or data nobody waited for).
    pub dropped: u64,
    /// Frames lost because the peer was gone.
    pub lost_to_gone_peers: u64,
}

/// Something waiting to go to a peer, in order.
enum Out {
    /// An inbox item (tag included) the inbox had no room for.
    Item(Vec<u8>),
    /// A frame being pushed into the exchange queue; its notice follows.
    BigFrame(Vec<u8>),
    /// A bulk transfer: its notice (`announced` once in the inbox), then its
    /// data, pushed by the engine.
    Bulk {
        notice: [u8; BULK_NOTICE_LEN],
        announced: bool,
        token: BulkToken,
        len: u64,
    },
    /// A bulk transfer whose data is in this process's shared heap: only
    /// its notice goes; the receiver copies the data.
    SharedBulk {
        notice: [u8; SHARED_NOTICE_LEN],
        token: BulkToken,
        len: u64,
    },
}

/// A transfer whose data a receiver is copying from our shared heap.
struct Lent {
    token: BulkToken,
    link: LinkId,
    channel: u16,
    len: u64,
}

struct Link {
    peer: PeerId,
    addr: ProcessAddr,
    pending: VecDeque<Out>,
    dead: bool,
    /// BCL frames written for the peer to read, since the link was made.
    written: u64,
    /// In `ShmMethod::written_dirty`.
    dirty: bool,
}

/// An announced exchange message a sender is owed.
enum Expected {
    /// Transfer data, pulled into its destination (or discarded).
    Bulk { token: Option<BulkToken>, len: u64 },
    /// Transfer data in the sender's shared heap, copied from there
    /// ([`SHARED_COPY_STEP`] bytes at a time).
    Shared {
        token: Option<BulkToken>,
        kind: u8,
        transfer: u32,
        src: SharedBytes,
        copied: usize,
    },
}

/// The shared-memory method (see the module documentation).
pub struct ShmMethod {
    mailbox: Mailbox,
    node: String,
    links: Vec<Link>,
    by_addr: HashMap<ProcessAddr, LinkId>,
    /// Lent to the core for one frame: byte 0 is the tag.
    staging: Vec<u8>,
    /// Per sender: transfer data announced and not yet pulled, in order.
    expected: HashMap<ProcessAddr, VecDeque<Expected>>,
    /// A big frame pulled but not yet taken by the engine, per sender.
    held: HashMap<ProcessAddr, Vec<u8>>,
    scratch: Vec<u8>,
    /// Links whose `written` count changed since the last `drain_written`.
    written_dirty: Vec<LinkId>,
    /// False only when no link has anything queued: lets `flush` and
    /// `bulk_to_push`, called every progress round, skip the link scan.
    maybe_queued: bool,
    /// Transfers receivers are copying from our shared heap, by (receiver,
    /// kind, transfer).
    lent: HashMap<(ProcessAddr, u8, u32), Lent>,
    /// Of those, the ones the receiver has copied: done for the engine.
    pulled: Vec<BulkToken>,
    /// Senders' shared allocations mapped here.
    mappings: PeerMappings,
    /// Whether transfers announced in a sender's shared heap are read from
    /// there (otherwise refused: the sender pushes them).
    read_peer_heaps: bool,
    /// Housekeeping's list of transfers to push, kept to reuse its memory.
    to_push: Vec<(LinkId, BulkToken)>,
    /// The message at the head of the inbox is lent to the engine by
    /// `take_direct`; the next receive call gives its slot back.
    head_lent: bool,
    stats: ShmMethodStats,
}

impl ShmMethod {
    /// Opens the shared-memory side of process `local` of job `job`
    /// (creating its segment under /dev/shm, removing stale ones).
    pub fn open(job: JobKey, local: ProcessAddr) -> Result<ShmMethod, MethodError> {
        Self::with_config(MailboxConfig::new(job, local))
    }

    /// Opens with a full configuration.
    pub fn with_config(cfg: MailboxConfig) -> Result<ShmMethod, MethodError> {
        let mailbox = Mailbox::open(cfg).map_err(|e| MethodError::Other {
            method: METHOD_NAME,
            reason: e.to_string(),
        })?;
        Ok(ShmMethod {
            mailbox,
            node: node_identity(),
            links: Vec::new(),
            by_addr: HashMap::default(),
            staging: vec![0; MTU + 1],
            expected: HashMap::default(),
            held: HashMap::default(),
            scratch: Vec::new(),
            written_dirty: Vec::new(),
            maybe_queued: false,
            lent: HashMap::default(),
            pulled: Vec::new(),
            mappings: PeerMappings::default(),
            read_peer_heaps: true,
            to_push: Vec::new(),
            head_lent: false,
            stats: ShmMethodStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> ShmMethodStats {
        self.stats
    }

    /// Whether to read transfers from senders' shared heaps (on by
    /// default). Off, every such transfer is refused and the sender pushes
    /// it through the exchange queue (two copies): for a process that must
    /// not map its peers' memory, and to compare the two paths.
    pub fn set_read_peer_heaps(&mut self, on: bool) {
        self.read_peer_heaps = on;
    }

    /// The mailbox this method sends and receives through (segment,
    /// inbox, exchange queues), for inspection.
    pub fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    /// Gives back the inbox slot of the direct message `take_direct` lent.
    #[inline]
    fn return_lent(&mut self) {
        if std::mem::take(&mut self.head_lent) && self.mailbox.release_head() {
            self.stats.direct_received += 1;
        }
    }

    /// Takes the inbox's head if it is a direct service message, or (with
    /// `applications`) a direct message for the application; lends it
    /// until the next receive call (see [`DirectMethod::take_direct`]).
    #[inline]
    fn take_head(&mut self, applications: bool) -> DirectHead<'_> {
        self.return_lent();
        let Some(m) = self.mailbox.recv() else {
            return DirectHead::Empty;
        };
        let (from, bytes) = m.into_parts();
        match bytes.split_first() {
            Some((&TAG_DIRECT, message)) if applications => {
                self.head_lent = true;
                DirectHead::Message(from, message)
            }
            Some((&TAG_DIRECT_SERVICE, message)) => {
                self.head_lent = true;
                DirectHead::Service(from, message)
            }
            _ => DirectHead::Other,
        }
    }

    /// Largest direct message.
    pub fn max_direct(&self) -> usize {
        self.mailbox.max_inline() - 1
    }

    fn link(&self, link: LinkId) -> Option<&Link> {
        self.links.get(link.0 as usize)
    }

    fn link_for(&mut self, addr: ProcessAddr) -> Result<LinkId, ShmError> {
        if let Some(&l) = self.by_addr.get(&addr) {
            if !self.links[l.0 as usize].dead {
                return Ok(l);
            }
        }
        let peer = self.mailbox.connect(addr)?;
        let link = Link {
            peer,
            addr,
            pending: VecDeque::new(),
            dead: false,
            written: 0,
            dirty: false,
        };
        let id = match self.by_addr.get(&addr) {
            Some(&l) => {
                self.links[l.0 as usize] = link;
                l
            }
            None => {
                self.links.push(link);
                let l = LinkId(self.links.len() as u32 - 1);
                self.by_addr.insert(addr, l);
                l
            }
        };
        Ok(id)
    }

    /// The link's peer address.
    pub fn link_addr(&self, link: LinkId) -> Option<ProcessAddr> {
        self.link(link).map(|l| l.addr)
    }

    /// Takes over an outgoing bulk transfer from the port, whose data is
    /// `src`: its notice goes in order with the link's frames. If `src`
    /// lies in this process's shared heap, the receiver copies it from there
    /// and the transfer is done when it says so ([`ShmMethod::drain_pulled`]);
    /// otherwise the data is pushed (see [`ShmMethod::bulk_to_push`] and
    /// [`ShmMethod::push_bulk`]).
    fn start_bulk(&mut self, b: &OutboundBulk, src: &[u8]) {
        let notice = bulk_notice(b.kind.code(), b.channel, b.transfer, b.len);
        let shared = if b.len >= MIN_SHARED_PULL && src.len() as u64 == b.len {
            heap::locate(src)
        } else {
            None
        };
        let out = match shared {
            Some(r) => {
                let mut n = [0u8; SHARED_NOTICE_LEN];
                n[..BULK_NOTICE_LEN].copy_from_slice(&notice);
                n[0] = TAG_BULK_SHARED;
                n[16..20].copy_from_slice(&r.fd.to_le_bytes());
                n[20..28].copy_from_slice(&r.seq.to_le_bytes());
                n[28..36].copy_from_slice(&r.offset.to_le_bytes());
                Out::SharedBulk {
                    notice: n,
                    token: b.token,
                    len: b.len,
                }
            }
            None => Out::Bulk {
                notice,
                announced: false,
                token: b.token,
                len: b.len,
            },
        };
        if let Some(l) = self.links.get_mut(b.route.link.0 as usize) {
            self.maybe_queued = true;
            l.pending.push_back(out);
        }
        self.flush_link(b.route.link.0 as usize);
    }

    /// Transfers receivers are copying from this process's shared heap
    /// (announced, not yet answered).
    pub fn transfers_lent(&self) -> usize {
        self.lent.len()
    }

    /// Transfers this process is copying from senders' shared heaps
    /// (started, not finished).
    pub fn copies_in_progress(&self) -> usize {
        self.expected
            .values()
            .flatten()
            .filter(|e| matches!(e, Expected::Shared { .. }))
            .count()
    }

    /// Reports the transfers whose receivers have copied them from this
    /// process's shared heap: the engine completes them (their buffers are
    /// free).
    fn drain_pulled(&mut self, mut done: impl FnMut(BulkToken)) -> usize {
        let n = self.pulled.len();
        for t in self.pulled.drain(..) {
            done(t);
        }
        n
    }

    /// Bulk transfers whose data is to be pushed now (announced, at the head
    /// of their link's queue): fills `out` with (link, token).
    fn bulk_to_push(&self, out: &mut Vec<(LinkId, BulkToken)>) {
        out.clear();
        if !self.maybe_queued {
            return;
        }
        for (i, l) in self.links.iter().enumerate() {
            if let Some(Out::Bulk {
                announced: true,
                token,
                ..
            }) = l.pending.front()
            {
                out.push((LinkId(i as u32), *token));
            }
        }
    }

    /// Pushes more of the bulk transfer at the head of `link`'s queue, whose
    /// bytes are `data`. Ok(true) when all is pushed (the transfer is done
    /// for the sender); Err when the peer is gone.
    fn push_bulk(&mut self, link: LinkId, data: &[u8]) -> Result<bool, ProcessAddr> {
        let i = link.0 as usize;
        let Some(l) = self.links.get(i) else {
            return Err(ProcessAddr::default());
        };
        let (peer, addr) = (l.peer, l.addr);
        if l.dead {
            self.fail_pending(i);
            return Err(addr);
        }
        let done = if data.is_empty() {
            true
        } else {
            match self.mailbox.push_message(peer, data) {
                Ok(p) => {
                    if !p.done {
                        self.stats.backpressure += u64::from(p.chunks == 0);
                    }
                    p.done
                }
                Err(_) => {
                    self.mark_dead(link);
                    return Err(addr);
                }
            }
        };
        if done {
            self.links[i].pending.pop_front();
            self.stats.bulk_sent += 1;
            self.flush_link(i);
        }
        Ok(done)
    }

    /// Tries to move what waits on every link.
    fn flush(&mut self) {
        if !self.maybe_queued {
            return;
        }
        let mut queued = false;
        for i in 0..self.links.len() {
            if !self.links[i].pending.is_empty() {
                self.flush_link(i);
                queued |= !self.links[i].pending.is_empty();
            }
        }
        self.maybe_queued = queued;
    }

    /// Sends as much of link `i`'s queue as the inbox and exchange queue take.
    fn flush_link(&mut self, i: usize) {
        loop {
            let l = &mut self.links[i];
            if l.dead {
                return;
            }
            let (peer, addr) = (l.peer, l.addr);
            let Some(front) = l.pending.front_mut() else {
                return;
            };
            let progressed = match front {
                // Queued items are frames: inline ones, or the notice of a
                // big frame already in the exchange queue.
                Out::Item(item) => match self.mailbox.try_send(peer, item) {
                    Ok(()) => {
                        self.links[i].pending.pop_front();
                        self.count_written(i);
                        true
                    }
                    Err(crate::SendError::Full) => false,
                    Err(_) => {
                        self.mark_dead(LinkId(i as u32));
                        return;
                    }
                },
                Out::BigFrame(frame) => match self.mailbox.push_message(peer, frame) {
                    Ok(p) if p.done => {
                        // The frame is in the exchange queue: announce it.
                        self.links[i].pending[0] = Out::Item(vec![TAG_BIG_FRAME]);
                        true
                    }
                    Ok(_) => false,
                    Err(_) => {
                        self.mark_dead(LinkId(i as u32));
                        return;
                    }
                },
                Out::Bulk {
                    notice,
                    announced: false,
                    ..
                } => match self.mailbox.try_send(peer, &notice[..]) {
                    Ok(()) => {
                        if let Some(Out::Bulk { announced, .. }) = self.links[i].pending.front_mut()
                        {
                            *announced = true;
                        }
                        // The data is pushed by the engine (push_bulk); an
                        // empty transfer is done with its notice.
                        if matches!(
                            self.links[i].pending.front(),
                            Some(Out::Bulk { len: 0, .. })
                        ) {
                            return;
                        }
                        return;
                    }
                    Err(crate::SendError::Full) => false,
                    Err(_) => {
                        self.mark_dead(LinkId(i as u32));
                        return;
                    }
                },
                // Announced: waits for the engine to push its data.
                Out::Bulk {
                    announced: true, ..
                } => return,
                Out::SharedBulk { notice, token, len } => {
                    let (token, len, notice) = (*token, *len, *notice);
                    let channel = u16::from_le_bytes([notice[2], notice[3]]);
                    let key = (addr, notice[1], le_u32(&notice[4..8]));
                    match self.mailbox.try_send(peer, &notice[..]) {
                        Ok(()) => {
                            self.links[i].pending.pop_front();
                            let link = LinkId(i as u32);
                            self.lent.insert(
                                key,
                                Lent {
                                    token,
                                    link,
                                    channel,
                                    len,
                                },
                            );
                            true
                        }
                        Err(crate::SendError::Full) => false,
                        Err(_) => {
                            self.mark_dead(LinkId(i as u32));
                            return;
                        }
                    }
                }
            };
            if !progressed {
                self.stats.backpressure += 1;
                return;
            }
        }
    }

    /// Counts one BCL frame of link `i` as written.
    fn count_written(&mut self, i: usize) {
        let l = &mut self.links[i];
        l.written += 1;
        if !l.dirty {
            l.dirty = true;
            self.written_dirty.push(LinkId(i as u32));
        }
    }

    /// Reports, for each link whose count changed, its peer and the number
    /// of BCL frames written to it since the link was made (frames queued
    /// behind back-pressure count only once actually in the peer's inbox).
    fn drain_written(&mut self, mut report: impl FnMut(ProcessAddr, u64)) {
        for link in self.written_dirty.drain(..) {
            if let Some(l) = self.links.get_mut(link.0 as usize) {
                l.dirty = false;
                if !l.dead {
                    report(l.addr, l.written);
                }
            }
        }
    }

    fn mark_dead(&mut self, link: LinkId) {
        let i = link.0 as usize;
        if let Some(l) = self.links.get_mut(i) {
            if !l.dead {
                l.dead = true;
                self.fail_pending(i);
            }
        }
    }

    /// Frames queued to a dead link are lost with it (the engine fails the
    /// peer's sends when it learns of the death).
    fn fail_pending(&mut self, i: usize) {
        let n = self.links[i]
            .pending
            .iter()
            .filter(|o| !matches!(o, Out::Bulk { .. }))
            .count();
        self.stats.lost_to_gone_peers += n as u64;
        self.links[i]
            .pending
            .retain(|o| matches!(o, Out::Bulk { .. }));
    }

    /// Sends one frame the core wrote at `staging[1..1 + len]`.
    fn send_frame(&mut self, link: LinkId, len: usize) -> Result<(), MethodError> {
        let i = link.0 as usize;
        let Some(l) = self.links.get(i) else {
            return Err(MethodError::Other {
                method: METHOD_NAME,
                reason: format!("no link {link:?}"),
            });
        };
        if l.dead {
            self.stats.lost_to_gone_peers += 1;
            return Ok(());
        }
        let peer = l.peer;
        let inline = len < self.mailbox.max_inline();
        if l.pending.is_empty() && inline {
            self.staging[0] = TAG_FRAME;
            match self.mailbox.try_send(peer, &self.staging[..1 + len]) {
                Ok(()) => {
                    self.stats.frames_inline += 1;
                    self.count_written(i);
                    return Ok(());
                }
                Err(crate::SendError::Full) => self.stats.backpressure += 1,
                Err(_) => {
                    self.mark_dead(link);
                    self.stats.lost_to_gone_peers += 1;
                    return Ok(());
                }
            }
        }
        let out = if inline {
            let mut item = self.staging[..1 + len].to_vec();
            item[0] = TAG_FRAME;
            self.stats.frames_inline += 1;
            Out::Item(item)
        } else {
            self.stats.frames_big += 1;
            Out::BigFrame(self.staging[1..1 + len].to_vec())
        };
        self.maybe_queued = true;
        self.links[i].pending.push_back(out);
        self.flush_link(i);
        Ok(())
    }

    /// A sender announced transfer data: find where it goes.
    fn on_bulk_notice(
        &mut self,
        from: ProcessAddr,
        notice: &[u8; BULK_NOTICE_LEN],
        h: &mut dyn RxHandler,
    ) {
        let kind = BulkKind::from_code(notice[1]);
        let channel = u16::from_le_bytes([notice[2], notice[3]]);
        let transfer = u32::from_le_bytes([notice[4], notice[5], notice[6], notice[7]]);
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&notice[8..16]);
        let len = u64::from_le_bytes(len_bytes);
        let token = kind.and_then(|k| h.bulk_start(from, k, channel, transfer, len));
        if token.is_none() {
            self.stats.dropped += 1;
        }
        if len == 0 {
            if let Some(t) = token {
                h.bulk_done(t);
                self.stats.bulk_received += 1;
            }
        } else {
            self.expected
                .entry(from)
                .or_default()
                .push_back(Expected::Bulk { token, len });
        }
    }

    /// A sender announced transfer data in its shared heap: map it (or
    /// refuse, and the sender pushes it instead), then copy it as
    /// [`ShmMethod::pull_bulk`] gets to it.
    fn on_shared_notice(
        &mut self,
        from: ProcessAddr,
        notice: &[u8; SHARED_NOTICE_LEN],
        h: &mut dyn RxHandler,
    ) {
        let code = notice[1];
        let channel = u16::from_le_bytes([notice[2], notice[3]]);
        let transfer = le_u32(&notice[4..8]);
        let len = le_u64(&notice[8..16]);
        // The allocation is named in the sender's own process: the one
        // that owns the segment we reach it by.
        let pid = self
            .link_for(from)
            .ok()
            .and_then(|l| self.link(l).map(|l| l.peer))
            .and_then(|peer| self.mailbox.peer_pid(peer));
        let r = pid.map(|pid| SharedRef {
            pid,
            fd: le_u32(&notice[16..20]),
            seq: le_u64(&notice[20..28]),
            offset: le_u64(&notice[28..36]),
        });
        let src = r
            .filter(|_| self.read_peer_heaps)
            .and_then(|r| self.mappings.bytes(&r, len).ok());
        let (Some(kind), Some(src)) = (BulkKind::from_code(code), src) else {
            self.stats.shared_refused += 1;
            self.answer(from, TAG_BULK_REFUSED, code, transfer);
            return;
        };
        let token = h.bulk_start(from, kind, channel, transfer, len);
        if token.is_none() {
            self.stats.dropped += 1;
        }
        self.expected
            .entry(from)
            .or_default()
            .push_back(Expected::Shared {
                token,
                kind: code,
                transfer,
                src,
                copied: 0,
            });
    }

    /// Tells the sender of a shared-heap transfer that it was copied
    /// (`BULK_PULLED`) or cannot be (`BULK_REFUSED`).
    fn answer(&mut self, to: ProcessAddr, tag: u8, kind: u8, transfer: u32) {
        let Ok(link) = self.link_for(to) else {
            // The sender is gone: nobody waits for the answer.
            return;
        };
        let mut item = vec![tag, kind];
        item.extend_from_slice(&transfer.to_le_bytes());
        let i = link.0 as usize;
        self.maybe_queued = true;
        self.links[i].pending.push_back(Out::Item(item));
        self.flush_link(i);
    }

    /// A receiver answered about a transfer from our shared heap.
    fn on_answer(&mut self, from: ProcessAddr, tag: u8, kind: u8, transfer: u32) {
        let Some(lent) = self.lent.remove(&(from, kind, transfer)) else {
            self.stats.dropped += 1;
            return;
        };
        if tag == TAG_BULK_PULLED {
            self.stats.bulk_sent += 1;
            self.stats.bulk_sent_shared += 1;
            self.pulled.push(lent.token);
            return;
        }
        // Refused: push the data after all, behind what the link has queued.
        let i = lent.link.0 as usize;
        if let Some(l) = self.links.get_mut(i) {
            l.pending.push_back(Out::Bulk {
                notice: bulk_notice(kind, lent.channel, transfer, lent.len),
                announced: false,
                token: lent.token,
                len: lent.len,
            });
            self.maybe_queued = true;
            self.flush_link(i);
        }
    }

    /// Pulls a big frame announced by `from` and hands it over; false if it
    /// is not complete yet or the engine cannot take it now.
    fn take_big_frame(&mut self, from: ProcessAddr, h: &mut dyn RxHandler) -> bool {
        let frame = match self.held.remove(&from) {
            Some(f) => f,
            None => {
                let len = match self.mailbox.next_message_len(from) {
                    Ok(Some(len)) => len,
                    _ => return false,
                };
                let mut buf = vec![0u8; len];
                match self.mailbox.pull_into(from, &mut buf) {
                    Ok(PullProgress::Done { .. }) => buf,
                    // The sender pushes the whole frame before announcing
                    // it, so this does not happen; try again later.
                    _ => return false,
                }
            }
        };
        let link = match self.link_for(from) {
            Ok(l) => l,
            Err(_) => return false,
        };
        if h.frame(link, &frame) {
            true
        } else {
            self.held.insert(from, frame);
            false
        }
    }

    /// Moves announced transfer data into its destinations, as far as it
    /// has arrived. Returns transfers completed, plus copy steps of
    /// transfers from shared heaps not yet complete.
    fn pull_bulk(&mut self, h: &mut dyn RxHandler) -> usize {
        if self.expected.is_empty() {
            return 0;
        }
        let mut done = 0;
        let mut answers = Vec::new();
        let ShmMethod {
            expected,
            mailbox,
            scratch,
            stats,
            ..
        } = self;
        // Per sender, in order; a sender whose queue empties (or who is
        // gone: what it owed never comes, the engine fails the transfers on
        // the death event) leaves the map, so an empty map means nothing
        // to pull.
        expected.retain(|&from, queue| {
            while let Some(Expected::Shared {
                token,
                kind,
                transfer,
                src,
                copied,
            }) = queue.front_mut()
            {
                let src = src.as_slice();
                let end = src.len().min(*copied + SHARED_COPY_STEP);
                let mut fits = true;
                if let Some(dst) = token.and_then(|t| h.bulk_dest(t)) {
                    fits = dst.len() == src.len();
                    if fits {
                        // SAFETY: [copied, end) lies in both `src` (a
                        // peer's mapping, kept alive by the SharedBytes)
                        // and `dst` (same length), which are distinct
                        // memory (ours is private to this process).
                        unsafe {
                            crate::copy::copy_bytes(
                                dst.as_mut_ptr().add(*copied),
                                src.as_ptr().add(*copied),
                                end - *copied,
                            )
                        };
                    }
                }
                *copied = end;
                if end < src.len() {
                    // More next call: other work goes first. The step is
                    // work done (an engine must not sleep after it).
                    done += 1;
                    return true;
                }
                match *token {
                    Some(t) if fits => {
                        h.bulk_done(t);
                        stats.bulk_received += 1;
                        stats.bulk_received_shared += 1;
                    }
                    // The destination does not have the announced length:
                    // nothing was written; the data is dropped.
                    _ => stats.dropped += 1,
                }
                answers.push((from, *kind, *transfer));
                queue.pop_front();
                done += 1;
            }
            while let Some(&Expected::Bulk { token, len }) = queue.front() {
                let progress = match token.and_then(|t| h.bulk_dest(t)) {
                    Some(dst) => mailbox.pull_into(from, dst),
                    None => {
                        scratch.resize(usize::try_from(len).unwrap_or(0), 0);
                        mailbox.pull_into(from, scratch)
                    }
                };
                match progress {
                    Ok(PullProgress::Done { .. }) => {
                        queue.pop_front();
                        if let Some(t) = token {
                            h.bulk_done(t);
                            stats.bulk_received += 1;
                        }
                        done += 1;
                    }
                    Ok(_) => break,
                    Err(_) => return false,
                }
            }
            !queue.is_empty()
        });
        for (from, kind, transfer) in answers {
            self.answer(from, TAG_BULK_PULLED, kind, transfer);
        }
        done
    }

    /// Next event about a peer (died, closed, broke the protocol).
    pub fn poll_event(&mut self) -> Option<ShmEvent> {
        let mut ev = self.mailbox.poll_event()?;
        // The death of a process that another has since replaced at its
        // address (a restart we are linked to already) concerns nothing
        // the engine still has: only its shared heap goes.
        while let ShmEvent::PeerDied { addr, pid } = ev {
            let current = self
                .mailbox
                .peer_id(addr)
                .and_then(|p| self.mailbox.peer_pid(p));
            if current.is_none_or(|p| p == pid) {
                break;
            }
            self.mappings.forget(pid);
            ev = self.mailbox.poll_event()?;
        }
        if let ShmEvent::PeerDied { addr, .. } | ShmEvent::PeerClosed { addr } = &ev {
            if let Some(&l) = self.by_addr.get(addr) {
                self.mark_dead(l);
            }
            self.expected.remove(addr);
            self.held.remove(addr);
            // Transfers it was copying from us: the engine fails them with
            // the peer's other sends.
            self.lent.retain(|&(to, ..), _| to != *addr);
        }
        if let ShmEvent::PeerDied { pid, .. } = &ev {
            // Its shared heap is gone with it: unmap what we kept of it.
            self.mappings.forget(*pid);
        }
        Some(ev)
    }

    /// Looks for dead peers (call now and then when busy-polling).
    pub fn check_peers(&mut self) {
        self.mailbox.check_peers();
    }
}

/// A `BULK` notice.
fn bulk_notice(kind: u8, channel: u16, transfer: u32, len: u64) -> [u8; BULK_NOTICE_LEN] {
    let mut notice = [0u8; BULK_NOTICE_LEN];
    notice[0] = TAG_BULK;
    notice[1] = kind;
    notice[2..4].copy_from_slice(&channel.to_le_bytes());
    notice[4..8].copy_from_slice(&transfer.to_le_bytes());
    notice[8..16].copy_from_slice(&len.to_le_bytes());
    notice
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Generic receiving: frames only (see the module documentation).
struct FramesOnly<'a> {
    sink: &'a mut dyn FnMut(LinkId, &[u8]),
    dropped: u64,
}

impl RxHandler for FramesOnly<'_> {
    fn frame(&mut self, link: LinkId, bytes: &[u8]) -> bool {
        (self.sink)(link, bytes);
        true
    }
    fn direct(&mut self, _from: ProcessAddr, _class: MessageClass, _bytes: &[u8]) -> bool {
        self.dropped += 1;
        true
    }
    fn bulk_start(
        &mut self,
        _: ProcessAddr,
        _: BulkKind,
        _: u16,
        _: u32,
        _: u64,
    ) -> Option<BulkToken> {
        self.dropped += 1;
        None
    }
    fn bulk_dest(&mut self, _: BulkToken) -> Option<&mut [u8]> {
        None
    }
    fn bulk_done(&mut self, _: BulkToken) {}
}

impl DirectMethod for ShmMethod {
    fn poll_rx(&mut self, budget: usize, h: &mut dyn RxHandler) -> usize {
        self.return_lent();
        let mut n = self.pull_bulk(h);
        let mut reconnected = None;
        while n < budget {
            let Some(m) = self.mailbox.recv() else { break };
            let from = m.from();
            let tag = m.bytes().first().copied();
            // Only frames need the link (a lookup per item would cost more
            // than the rest of a direct message's handling).
            let known = match tag {
                Some(TAG_FRAME) => self.by_addr.get(&from).copied(),
                _ => None,
            };
            match (tag, known) {
                // A frame on a link we gave up as dead: its process
                // restarted at the same address. Connect to the new one
                // (the link keeps its id) and read the item again; if that
                // fails, the frame still goes up on the old link.
                (Some(TAG_FRAME), Some(link))
                    if self.links[link.0 as usize].dead && reconnected != Some(from) =>
                {
                    reconnected = Some(from);
                    let _ = self.link_for(from);
                    continue;
                }
                (Some(TAG_FRAME), Some(link)) => {
                    if !h.frame(link, &m.bytes()[1..]) {
                        break;
                    }
                    m.release();
                }
                (Some(TAG_FRAME), None) => {
                    // First frame from this sender: connect back, then read
                    // the item again (it stays first in the inbox).
                    if self.link_for(from).is_err() {
                        break;
                    }
                    continue;
                }
                (Some(t @ (TAG_DIRECT | TAG_DIRECT_SERVICE)), _) => {
                    let class = if t == TAG_DIRECT {
                        MessageClass::Application
                    } else {
                        MessageClass::Service
                    };
                    if !h.direct(from, class, &m.bytes()[1..]) {
                        break;
                    }
                    m.release();
                    self.stats.direct_received += 1;
                }
                (Some(TAG_BIG_FRAME), _) => {
                    // Left in the inbox until the frame is taken.
                    // Transfer data announced earlier by this sender comes
                    // first in its exchange queue.
                    if self.expected.get(&from).is_some_and(|q| !q.is_empty()) {
                        break;
                    }
                    if !self.take_big_frame(from, h) {
                        break;
                    }
                    if let Some(m) = self.mailbox.recv() {
                        m.release();
                    }
                }
                (Some(TAG_BULK), _) if m.len() == BULK_NOTICE_LEN => {
                    let mut notice = [0u8; BULK_NOTICE_LEN];
                    notice.copy_from_slice(m.bytes());
                    m.release();
                    self.on_bulk_notice(from, &notice, h);
                }
                (Some(TAG_BULK_SHARED), _) if m.len() == SHARED_NOTICE_LEN => {
                    let mut notice = [0u8; SHARED_NOTICE_LEN];
                    notice.copy_from_slice(m.bytes());
                    m.release();
                    self.on_shared_notice(from, &notice, h);
                }
                (Some(tag @ (TAG_BULK_PULLED | TAG_BULK_REFUSED)), _) if m.len() == ANSWER_LEN => {
                    let kind = m.bytes()[1];
                    let transfer = le_u32(&m.bytes()[2..6]);
                    m.release();
                    self.on_answer(from, tag, kind, transfer);
                }
                _ => {
                    m.release();
                    self.stats.dropped += 1;
                }
            }
            n += 1;
        }
        n + self.pull_bulk(h)
    }

    #[inline]
    fn take_direct(&mut self) -> DirectHead<'_> {
        self.take_head(true)
    }

    fn take_direct_service(&mut self) -> DirectHead<'_> {
        self.take_head(false)
    }

    fn send_direct(
        &mut self,
        link: LinkId,
        class: MessageClass,
        data: &[u8],
    ) -> Result<(), DirectError> {
        if data.len() > self.max_direct() {
            return Err(DirectError::TooLarge);
        }
        let Some(l) = self.links.get(link.0 as usize) else {
            return Err(DirectError::Busy);
        };
        if l.dead {
            return Err(DirectError::Gone(l.addr));
        }
        if !l.pending.is_empty() {
            return Err(DirectError::Busy);
        }
        let (peer, addr) = (l.peer, l.addr);
        let tag = match class {
            MessageClass::Application => TAG_DIRECT,
            MessageClass::Service => TAG_DIRECT_SERVICE,
        };
        match self.mailbox.try_send_tagged(peer, tag, data) {
            Ok(()) => {
                self.stats.direct_sent += 1;
                Ok(())
            }
            Err(crate::SendError::Full) => {
                self.stats.backpressure += 1;
                Err(DirectError::Busy)
            }
            Err(_) => {
                self.mark_dead(link);
                Err(DirectError::Gone(addr))
            }
        }
    }

    fn housekeeping(&mut self, host: &mut dyn TransferHost, check_peers: bool) -> usize {
        let mut work = 0;
        // Transfers the port hands over.
        while let Some(b) = host.next_transfer() {
            work += 1;
            let src = host.transfer_data(b.token).unwrap_or(&[]);
            self.start_bulk(&b, src);
        }
        // Their data, as far as the exchange queues take it.
        let mut to_push = std::mem::take(&mut self.to_push);
        self.bulk_to_push(&mut to_push);
        for &(link, token) in &to_push {
            let Some(src) = host.transfer_data(token) else {
                continue;
            };
            match self.push_bulk(link, src) {
                Ok(true) => {
                    host.transfer_sent(token);
                    work += 1;
                }
                Ok(false) => {}
                Err(addr) => host.transfer_failed(token, addr),
            }
        }
        self.to_push = to_push;
        self.flush();
        // Transfers receivers copied from our shared heap are done.
        work += self.drain_pulled(|token| host.transfer_sent(token));
        // Frames to shared-memory peers are delivered once in the peer's inbox.
        self.drain_written(|addr, written| host.frames_written(addr, written));
        if check_peers {
            self.check_peers();
        }
        while let Some(ev) = self.poll_event() {
            work += 1;
            if let ShmEvent::PeerDied { addr, .. } | ShmEvent::PeerClosed { addr } = ev {
                host.peer_gone(addr);
            }
        }
        work
    }

    fn has_pending_work(&self) -> bool {
        self.maybe_queued
            || !self.written_dirty.is_empty()
            || !self.pulled.is_empty()
            || self.mailbox.has_events()
    }

    #[inline]
    fn has_queued_work(&self) -> bool {
        !self.expected.is_empty() || !self.held.is_empty() || self.has_pending_work()
    }
}

impl Method for ShmMethod {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: MTU,
            integrity: true,
            reliable: true,
        }
    }

    fn descriptor(&self) -> Descriptor {
        let a = self.mailbox.local();
        Descriptor::new(METHOD_NAME, format!("{a}@{}", self.node))
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let bad = |reason: &str| MethodError::BadDescriptor {
            method: METHOD_NAME,
            descriptor: peer.clone(),
            reason: reason.into(),
        };
        if peer.method != METHOD_NAME {
            return Err(bad("not a shm descriptor"));
        }
        let (addr, node) = parse_address(&peer.address).map_err(|e| bad(&e))?;
        if node != self.node {
            return Err(bad(
                "the peer is on another node (shared memory is per node)",
            ));
        }
        self.link_for(addr).map_err(|e| bad(&e.to_string()))
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        let mut h = FramesOnly { sink, dropped: 0 };
        let n = self.poll_rx(budget, &mut h);
        self.stats.dropped += h.dropped;
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.flush();
        let mut sent = 0;
        while let Some(f) = source(&mut self.staging[1..]) {
            self.send_frame(f.link, f.len)?;
            sent += 1;
            if sent >= 64 {
                break;
            }
        }
        Ok(sent)
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        Some(self.mailbox.readiness_fd())
    }

    fn prepare_wait(&mut self) -> bool {
        // A transfer being copied from a sender's shared heap is work that
        // waits for nobody: no peer will ring for it.
        let copying = self.copies_in_progress() > 0;
        // Answers (and other items) queued behind a full inbox: the peer
        // rings when it frees room, which the mailbox's flags arm.
        self.mailbox.prepare_wait() && !copying
    }

    fn finish_wait(&mut self) {
        self.mailbox.finish_wait();
    }

    fn counters(&self) -> MethodCounters {
        let s = self.stats;
        MethodCounters {
            // Received frames are not counted (the port counts what it
            // gets); direct messages and transfers are, below.
            tx_frames: s.frames_inline + s.frames_big,
            detail: vec![
                ("frames_inline", s.frames_inline),
                ("frames_big", s.frames_big),
                ("direct_sent", s.direct_sent),
                ("direct_received", s.direct_received),
                ("bulk_sent", s.bulk_sent),
                ("bulk_received", s.bulk_received),
                ("bulk_sent_shared", s.bulk_sent_shared),
                ("bulk_received_shared", s.bulk_received_shared),
                ("shared_refused", s.shared_refused),
                ("backpressure", s.backpressure),
                ("dropped", s.dropped),
                ("lost_to_gone_peers", s.lost_to_gone_peers),
            ],
            ..MethodCounters::default()
        }
    }

    fn into_direct(self: Box<Self>) -> Result<Box<dyn DirectMethod>, Box<dyn Method>> {
        Ok(self)
    }
}
