//! [`Mailbox`]: the shared-memory side of one process.
//!
//! It owns the process's segment (its inbox, its directory of
//! senders with their exchange queues, its bell flag) and its doorbell
//! socket, keeps one [`Link`] per peer it sends to (the peer's mapped
//! segment, our directory entry there, our inbox producer and exchange
//! sender), and one record per peer that sends to it. It turns the
//! algorithms of [`crate::inbox`], [`crate::exchange`] and [`crate::bell`]
//! into the API a method needs: connect, send, receive in place, push and
//! pull large messages, wait, and learn about dead peers from
//! [`Mailbox::poll_event`]. It is not a BCL port (`bcl_core::Port`, the
//! protocol endpoint): [`crate::ShmMethod`] owns one mailbox and carries a
//! port's frames through it.

use crate::bell;
use crate::doorbell::{self, Doorbell, Rang, Ringer};
use crate::exchange::{ExReceiver, ExSender, ExView, PullProgress, PushProgress};
use crate::inbox::{
    pack_addr, unpack_addr, Head, InboxConsumer, InboxCtl, InboxProducer, InboxSendError,
    InboxView, FLAG_VOID,
};
use crate::layout::{entry_state, EntryHead, Geometry, Layout, STATE_READY};
use crate::proc::{self, Watch};
use crate::segment::{self, Segment};
use crate::sync::Ordering;
use crate::{SendError, ShmError};
use bcl_core::{JobKey, ProcessAddr};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a caller that makes no progress re-checks that the peer it
/// waits for is alive.
const LIVENESS_INTERVAL: Duration = Duration::from_millis(1);
/// How long the head slot may stay claimed by nobody we can find (a
/// protocol violation by a buggy peer) before it is skipped.
const ORPHAN_TIMEOUT: Duration = Duration::from_secs(1);
/// Idle polls between checks of a stuck head slot.
const IDLE_STUCK_MASK: u32 = (1 << 10) - 1;
/// Idle polls between peer checks ([`Mailbox::check_peers`]).
const IDLE_PEERS_MASK: u32 = (1 << 16) - 1;

const EP_BELL: u64 = 0;

/// What `check_peers` does about one directory entry.
enum Act {
    Nothing,
    Gone { died: bool },
    CheckUnknown,
}
const EP_LINK: u64 = 1 << 32;
const EP_SENDER: u64 = 2 << 32;

/// How to open a [`Mailbox`].
#[derive(Clone, Debug)]
pub struct MailboxConfig {
    /// The job: segments of other jobs are invisible.
    pub job: JobKey,
    /// This process's address.
    pub local: ProcessAddr,
    /// Where segments live (`/dev/shm`).
    pub dir: PathBuf,
    /// Sizes of the segment's parts.
    pub geometry: Geometry,
    /// Remove stale segments of dead processes when opening (default true).
    pub cleanup_on_open: bool,
}

impl MailboxConfig {
    /// The default configuration for `local` in `job`.
    pub fn new(job: JobKey, local: ProcessAddr) -> Self {
        MailboxConfig {
            job,
            local,
            dir: PathBuf::from("/dev/shm"),
            geometry: Geometry::default(),
            cleanup_on_open: true,
        }
    }
}

/// A peer this mailbox sends to, as returned by [`Mailbox::connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// Something the engine should know about a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShmEvent {
    /// The peer process died (its pid is gone, a zombie, or reused). Its
    /// unfinished messages are lost; messages it had completely published
    /// before dying may still be delivered after this event.
    PeerDied {
        /// The peer.
        addr: ProcessAddr,
        /// Its pid.
        pid: u32,
    },
    /// The peer closed its mailbox.
    PeerClosed {
        /// The peer.
        addr: ProcessAddr,
    },
    /// A peer broke the shared-memory protocol (a bug in it); the item
    /// concerned was skipped.
    Corrupt {
        /// The peer, if known.
        addr: Option<ProcessAddr>,
        /// What was wrong.
        what: &'static str,
    },
}

/// Rate limit for liveness checks of a peer that keeps making no
/// progress: the clock is read on every 64th such call, and the peer is
/// checked (a `poll` on its pidfd) at most once per [`LIVENESS_INTERVAL`].
#[derive(Debug, Default)]
struct Stall {
    calls: u32,
    last: Option<Instant>,
}

impl Stall {
    /// Called on each call that made no progress: whether to check now.
    fn due(&mut self) -> bool {
        self.calls = self.calls.wrapping_add(1);
        if self.calls % 64 != 1 {
            return false;
        }
        let now = Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < LIVENESS_INTERVAL => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }

    /// Makes the next [`due`](Self::due) true.
    fn force(&mut self) {
        self.calls = 0;
        self.last = None;
    }
}

/// A peer we send to.
#[derive(Debug)]
struct Link {
    addr: ProcessAddr,
    entry: u32,
    producer: InboxProducer,
    ex: ExSender,
    watch: Watch,
    ringer: Option<Ringer>,
    dead: bool,
    inbox_blocked: bool,
    ex_blocked: bool,
    stall: Stall,
    /// Last: the producer and exchange views point into this mapping.
    seg: Segment,
}

/// A peer that sends to us, in directory entry `entry`.
#[derive(Debug)]
struct Sender {
    generation: u32,
    addr: ProcessAddr,
    src: u64,
    watch: Watch,
    ex: ExReceiver,
    /// The exchange head when we last looked (pulled or prepared to wait).
    ex_seen: u64,
    ringer: Option<Ringer>,
    /// Dead or left: report it and free the entry once the inbox head
    /// reaches `free_after` (so everything it published is delivered
    /// before the event).
    gone: bool,
    died: bool,
    free_after: u64,
    stall: Stall,
    /// Our link to this sender, if we have one: receiving from it prepares
    /// a send to it ([`InboxProducer::prepare_send`]).
    reply: Option<PeerId>,
}

/// Prepares a send on `reply`, our link to the sender of the message just
/// received, if we have one (see [`InboxProducer::prepare_send`]).
#[inline]
fn prepare_reply(links: &[Link], reply: Option<PeerId>) {
    if let Some(l) = reply.and_then(|p| links.get(p.0 as usize)) {
        l.producer.prepare_send();
    }
}

/// The shared-memory side of one process (see the module documentation).
pub struct Mailbox {
    cfg: MailboxConfig,
    rx: InboxConsumer,
    senders: Vec<Option<Sender>>,
    by_addr: HashMap<ProcessAddr, u32>,
    /// The last sender looked up by address (exchange pulls repeat it).
    last_from: Option<(ProcessAddr, u32)>,
    links: Vec<Link>,
    link_by_addr: HashMap<ProcessAddr, PeerId>,
    events: VecDeque<ShmEvent>,
    reported: HashSet<(ProcessAddr, u32)>,
    epoll: OwnedFd,
    idle: u32,
    /// The head at the last stuck check.
    idle_head: u64,
    stuck_since: Option<Instant>,
    /// Senders that are gone and not yet reaped.
    gone_pending: usize,
    /// The head slot holds a message that `recv` handed out and nobody has
    /// released yet (what [`Mailbox::release_head`] releases).
    head_found: bool,
    pid: u32,
    start: u64,
    bell: Doorbell,
    /// Last: the consumer's view points into this mapping.
    seg: Segment,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("local", &self.cfg.local)
            .field("segment", &self.seg.path())
            .field("links", &self.links.len())
            .finish_non_exhaustive()
    }
}

fn inbox_view(seg: &Segment) -> InboxView {
    let l = seg.layout();
    // SAFETY: the layout was computed (own segment) or validated against the
    // file size (peer segment), so the control block and the
    // inbox_slots * block_size bytes of slots lie inside the mapping, which
    // lives as long as the Segment; the owner initialised the slots before
    // marking the segment ready. block_size is a multiple of 64 >= 64.
    unsafe {
        InboxView::new(
            seg.at(l.inbox_ctl_off) as *const InboxCtl,
            seg.at(l.inbox_off),
            l.geometry.block_size as usize,
            u64::from(l.geometry.inbox_slots),
        )
    }
}

fn entry(seg: &Segment, i: u32) -> &EntryHead {
    debug_assert!(i < seg.layout().geometry.dir_entries);
    // SAFETY: i < dir_entries (checked by every caller), so the entry lies
    // inside the mapping at a page-aligned offset; EntryHead holds only
    // atomics, so a shared reference is sound under concurrent writers.
    unsafe { &*(seg.at(seg.layout().entry_off(i)) as *const EntryHead) }
}

fn ex_view(seg: &Segment, i: u32) -> ExView {
    let l = seg.layout();
    let base = l.entry_off(i);
    // SAFETY: inside the (validated) entry: control lines, `chunks`
    // descriptors at descs_off and chunks * chunk_size bytes at data_off,
    // all inside the mapping, which lives as long as the Segment.
    unsafe {
        ExView::new(
            &entry(seg, i).ex,
            seg.at(base + l.descs_off) as *const _,
            seg.at(base + l.data_off),
            l.geometry.chunk_size as usize,
            u64::from(l.geometry.chunks),
        )
    }
}

fn epoll_ctl(ep: &OwnedFd, op: libc::c_int, fd: RawFd, data: u64) {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: data,
    };
    // SAFETY: valid epoll fd, fd and event struct. Failure (e.g. DEL of an
    // fd never added) is harmless and ignored.
    unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, fd, &mut ev) };
}

impl Mailbox {
    /// Creates this process's segment and doorbell (after removing stale
    /// segments of dead processes, if configured).
    pub fn open(cfg: MailboxConfig) -> Result<Mailbox, ShmError> {
        let layout = Layout::new(cfg.geometry).map_err(ShmError::BadConfig)?;
        if cfg.cleanup_on_open {
            segment::cleanup_stale(&cfg.dir)?;
        }
        let seg = Segment::create(&cfg.dir, cfg.job, cfg.local, layout, |seg| {
            inbox_view(seg).init();
        })?;
        let bell = Doorbell::bind(&doorbell::path_for(seg.path())).map_err(|e| ShmError::Io {
            context: format!("binding the doorbell of {}", seg.path().display()),
            source: e,
        })?;
        // SAFETY: plain epoll_create1; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(ShmError::Io {
                context: "epoll_create1".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh fd owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        epoll_ctl(&epoll, libc::EPOLL_CTL_ADD, bell.fd(), EP_BELL);
        let rx = InboxConsumer::new(inbox_view(&seg));
        let entries = layout.geometry.dir_entries as usize;
        Ok(Mailbox {
            rx,
            senders: (0..entries).map(|_| None).collect(),
            by_addr: HashMap::new(),
            last_from: None,
            links: Vec::new(),
            link_by_addr: HashMap::new(),
            events: VecDeque::new(),
            reported: HashSet::new(),
            epoll,
            idle: 0,
            idle_head: 0,
            stuck_since: None,
            gone_pending: 0,
            head_found: false,
            pid: std::process::id(),
            start: seg.header().owner_start,
            bell,
            seg,
            cfg,
        })
    }

    /// This process's address.
    pub fn local(&self) -> ProcessAddr {
        self.cfg.local
    }

    /// The configuration the mailbox was opened with.
    pub fn config(&self) -> &MailboxConfig {
        &self.cfg
    }

    /// Path of this process's segment.
    pub fn segment_path(&self) -> &Path {
        self.seg.path()
    }

    /// Path of this process's doorbell socket (beside the segment).
    pub fn doorbell_path(&self) -> PathBuf {
        doorbell::path_for(self.seg.path())
    }

    /// Largest message [`try_send`](Self::try_send) carries (one inbox slot).
    pub fn max_inline(&self) -> usize {
        self.rx.payload_max()
    }

    /// An fd that becomes readable when this mailbox may have work: a peer
    /// rang the doorbell or a watched peer died. For the engine's epoll
    /// set; see [`prepare_wait`](Self::prepare_wait) for the protocol.
    pub fn readiness_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    // ----------------------------------------------------------------
    // Sending side
    // ----------------------------------------------------------------

    /// Prepares sending to `addr`: maps its segment (checking it) and
    /// claims an entry in its directory. Idempotent; after the peer died or
    /// closed, connects to its new incarnation under the same id.
    pub fn connect(&mut self, addr: ProcessAddr) -> Result<PeerId, ShmError> {
        let existing = self.link_by_addr.get(&addr).copied();
        if let Some(id) = existing {
            if !self.links[id.0 as usize].dead {
                return Ok(id);
            }
        }
        let seg = Segment::open(&self.cfg.dir, self.cfg.job, addr)?;
        let entries = seg.layout().geometry.dir_entries;
        let mut claimed = None;
        for i in 0..entries {
            let e = entry(&seg, i);
            let s = e.ctl.state.load(Ordering::Acquire);
            if entry_state::tag(s) != entry_state::FREE {
                continue;
            }
            let generation = entry_state::generation(s).wrapping_add(1);
            let claiming = entry_state::pack(self.pid, generation, entry_state::CLAIMING);
            if e.ctl
                .state
                .compare_exchange(s, claiming, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                e.ctl.start.store(self.start, Ordering::Relaxed);
                e.ctl
                    .addr
                    .store(pack_addr(self.cfg.local), Ordering::Relaxed);
                e.ctl.waiting.store(0, Ordering::Relaxed);
                e.intent.store(0, Ordering::Relaxed);
                e.ctl.state.store(
                    entry_state::pack(self.pid, generation, entry_state::ACTIVE),
                    Ordering::Release,
                );
                claimed = Some(i);
                break;
            }
        }
        let Some(i) = claimed else {
            return Err(ShmError::DirectoryFull { addr });
        };
        let e = entry(&seg, i);
        // SAFETY: the intent word is inside our claimed entry of the peer's
        // mapping, which the Link keeps alive as long as the producer; no
        // other producer uses our entry.
        let producer = unsafe {
            InboxProducer::new(
                inbox_view(&seg),
                &*e.intent,
                i as u16,
                pack_addr(self.cfg.local),
            )
        };
        let ex = ExSender::new(ex_view(&seg, i));
        let h = seg.header();
        let watch = Watch::new(h.owner_pid, h.owner_start);
        let ringer = Ringer::connect(&doorbell::path_for(seg.path())).ok();
        let link = Link {
            addr,
            entry: i,
            producer,
            ex,
            watch,
            ringer,
            dead: false,
            inbox_blocked: false,
            ex_blocked: false,
            stall: Stall::default(),
            seg,
        };
        let id = match existing {
            Some(id) => {
                self.links[id.0 as usize] = link;
                id
            }
            None => {
                let id = PeerId(self.links.len() as u32);
                self.links.push(link);
                self.link_by_addr.insert(addr, id);
                if let Some(&i) = self.by_addr.get(&addr) {
                    if let Some(s) = self.senders[i as usize].as_mut().filter(|s| s.addr == addr) {
                        s.reply = Some(id);
                    }
                }
                id
            }
        };
        if let Some(fd) = self.links[id.0 as usize].watch.fd() {
            epoll_ctl(
                &self.epoll,
                libc::EPOLL_CTL_ADD,
                fd,
                EP_LINK | u64::from(id.0),
            );
        }
        Ok(id)
    }

    /// The address of a connected peer.
    pub fn peer_addr(&self, peer: PeerId) -> Option<ProcessAddr> {
        self.links.get(peer.0 as usize).map(|l| l.addr)
    }

    /// The process id of a connected peer (the owner of its segment).
    pub fn peer_pid(&self, peer: PeerId) -> Option<u32> {
        self.links
            .get(peer.0 as usize)
            .map(|l| l.seg.header().owner_pid)
    }

    /// The peer id of `addr`, if connected.
    pub fn peer_id(&self, addr: ProcessAddr) -> Option<PeerId> {
        self.link_by_addr.get(&addr).copied()
    }

    fn link(&mut self, peer: PeerId) -> Result<&mut Link, ShmError> {
        let l = self
            .links
            .get_mut(peer.0 as usize)
            .ok_or(ShmError::UnknownPeer(peer))?;
        if l.dead {
            return Err(ShmError::PeerGone { addr: l.addr });
        }
        Ok(l)
    }

    /// Whether `peer`'s inbox has a free slot now. Exact when this mailbox
    /// is the inbox's only sender; a hint otherwise (another sender may
    /// take the slot first). When there is none, a sleeping
    /// [`prepare_wait`](Self::prepare_wait) asks the peer to ring when it
    /// frees one, as after a [`try_send`](Self::try_send) that found the
    /// inbox full.
    pub fn has_room(&mut self, peer: PeerId) -> bool {
        let Some(link) = self.links.get_mut(peer.0 as usize) else {
            return false;
        };
        let room = !link.dead && link.producer.has_space();
        link.inbox_blocked = !room && !link.dead;
        room
    }

    /// Whether `peer`'s inbox has a free slot now, without asking to be
    /// woken when it gets one (for a sender that drops what does not fit,
    /// instead of waiting). Exact when this mailbox is the only sender.
    pub fn room_now(&self, peer: PeerId) -> bool {
        self.links
            .get(peer.0 as usize)
            .is_some_and(|l| !l.dead && l.producer.has_space())
    }

    /// Sends `msg` (at most [`max_inline`](Self::max_inline) bytes) through
    /// `peer`'s inbox: one claim, one copy, one publish. `Full` is
    /// back-pressure: nothing was sent, retry on a later progress call.
    ///
    /// The fast path does not look at the peer's health: a send to a peer
    /// that has just closed or died succeeds into its abandoned inbox (the
    /// message is lost with the peer). The death is reported when the inbox
    /// fills up (`PeerGone` instead of `Full`) or by
    /// [`check_peers`](Self::check_peers), which the engine runs
    /// periodically and after every sleep.
    #[inline]
    pub fn try_send(&mut self, peer: PeerId, msg: &[u8]) -> Result<(), SendError> {
        self.try_send_parts(peer, &[], msg)
    }

    /// As [`Mailbox::try_send`] with `prefix` followed by `msg`, written
    /// straight into the inbox slot (no staging copy to join them).
    pub fn try_send_prefixed(
        &mut self,
        peer: PeerId,
        prefix: &[u8],
        msg: &[u8],
    ) -> Result<(), SendError> {
        self.try_send_parts(peer, prefix, msg)
    }

    /// As [`Mailbox::try_send`] with the message `tag` followed by `msg`,
    /// written straight into the inbox slot.
    pub fn try_send_tagged(&mut self, peer: PeerId, tag: u8, msg: &[u8]) -> Result<(), SendError> {
        self.try_send_parts(peer, &[tag], msg)
    }

    #[inline]
    fn try_send_parts(&mut self, peer: PeerId, prefix: &[u8], msg: &[u8]) -> Result<(), SendError> {
        let Some(link) = self.links.get_mut(peer.0 as usize) else {
            return Err(SendError::UnknownPeer(peer));
        };
        if link.dead {
            return Err(SendError::PeerGone(link.addr));
        }
        let sent = match *prefix {
            [] => link.producer.try_send(msg),
            [tag] => link.producer.try_send_tagged(tag, msg),
            _ => link.producer.try_send_prefixed(prefix, msg),
        };
        match sent {
            Ok(wake) => {
                if link.inbox_blocked {
                    link.inbox_blocked = false;
                }
                if wake {
                    self.ring_link(peer);
                }
                Ok(())
            }
            Err(InboxSendError::TooLarge) => Err(SendError::TooLarge {
                len: msg.len() + prefix.len(),
                max: link.producer.payload_max(),
            }),
            Err(InboxSendError::Full) => {
                link.inbox_blocked = true;
                let addr = link.addr;
                match self.check_link(peer) {
                    Ok(()) => Err(SendError::Full),
                    Err(_) => Err(SendError::PeerGone(addr)),
                }
            }
        }
    }

    /// Fault injection for tests: claims an inbox slot of `peer`, writes
    /// `partial` into it and never publishes it, as a producer killed in
    /// the middle of a send would (call it, then die). Not for production
    /// use: the slot stays claimed until the receiver finds this process
    /// dead.
    #[doc(hidden)]
    pub fn test_abandon_claim(&mut self, peer: PeerId, partial: &[u8]) -> Result<(), ShmError> {
        let link = self.link(peer)?;
        let mut w = link.producer.claim().ok_or(ShmError::Full)?;
        w.write(0, partial);
        std::mem::forget(w);
        Ok(())
    }

    /// Publishes as many chunks of the large message `msg` into `peer`'s
    /// exchange queue as fit, continuing a message in progress. Call again
    /// with the same bytes until `done`; the receiver copies chunk k out
    /// while we copy chunk k+1 in.
    pub fn push_message(&mut self, peer: PeerId, msg: &[u8]) -> Result<PushProgress, ShmError> {
        let link = self.link(peer)?;
        if link.seg.state().load(Ordering::Relaxed) != STATE_READY {
            return Err(self.link_gone(peer));
        }
        let p = link.ex.push(msg)?;
        // Unfinished means the queue is full now, whether or not this call
        // moved chunks: a sleeping engine must ask the receiver to wake it
        // when it frees one (clearing this after a partial push left the
        // sender asleep until its timer).
        link.ex_blocked = !p.done;
        if p.chunks > 0 {
            if bell::should_wake(link.seg.bell_flag()) {
                self.ring_link(peer);
            }
        } else if !p.done {
            self.check_link(peer)?;
        }
        Ok(p)
    }

    fn ring_link(&mut self, peer: PeerId) {
        let l = &mut self.links[peer.0 as usize];
        if let Some(r) = &l.ringer {
            if r.ring() == Rang::Gone {
                l.stall.force();
                let _ = self.check_link(peer);
            }
        }
    }

    /// Rate-limited liveness check of a link that made no progress.
    fn check_link(&mut self, peer: PeerId) -> Result<(), ShmError> {
        let l = &mut self.links[peer.0 as usize];
        if l.seg.state().load(Ordering::Acquire) != STATE_READY {
            return Err(self.link_gone(peer));
        }
        if l.stall.due() && l.watch.is_dead() {
            return Err(self.link_gone(peer));
        }
        Ok(())
    }

    /// Marks a link dead and reports why; returns the error for the caller.
    fn link_gone(&mut self, peer: PeerId) -> ShmError {
        let l = &mut self.links[peer.0 as usize];
        let addr = l.addr;
        if !l.dead {
            l.dead = true;
            if let Some(fd) = l.watch.fd() {
                epoll_ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0);
            }
            let pid = l.watch.pid();
            let closed = l.seg.state().load(Ordering::Acquire) == crate::layout::STATE_CLOSED;
            if !closed && l.watch.is_dead() {
                self.report_death(addr, pid);
            } else {
                self.events.push_back(ShmEvent::PeerClosed { addr });
            }
        }
        ShmError::PeerGone { addr }
    }

    fn report_death(&mut self, addr: ProcessAddr, pid: u32) {
        if self.reported.insert((addr, pid)) {
            self.events.push_back(ShmEvent::PeerDied { addr, pid });
        }
    }

    // ----------------------------------------------------------------
    // Receiving side
    // ----------------------------------------------------------------

    /// The next message in the inbox, in place, or `None`. The
    /// message stays in the inbox until [`Incoming::release`]; dropping the
    /// `Incoming` without releasing leaves it at the head.
    #[inline]
    pub fn recv(&mut self) -> Option<Incoming<'_>> {
        // The fast paths inline: a message from a known sender, and nothing.
        match self.rx.poll() {
            Head::Ready(info) if info.flags == 0 => {
                if let Some(Some(s)) = self.senders.get(usize::from(info.entry)) {
                    if s.src == info.src {
                        let from = s.addr;
                        prepare_reply(&self.links, s.reply);
                        self.head_found = true;
                        return Some(Incoming {
                            mailbox: self,
                            from,
                            len: info.len,
                        });
                    }
                }
            }
            Head::NotReady => {
                self.idle = self.idle.wrapping_add(1);
                if self.gone_pending > 0 || self.idle & IDLE_STUCK_MASK == 0 {
                    self.on_idle();
                }
                return None;
            }
            _ => {}
        }
        self.recv_slow()
    }

    /// Releases the message at the head of the inbox that [`recv`](Self::recv)
    /// handed out (its [`Incoming`] was dropped or taken apart with
    /// [`Incoming::into_parts`]); does nothing if there is none. Returns
    /// whether it released one.
    #[inline]
    pub fn release_head(&mut self) -> bool {
        if !std::mem::take(&mut self.head_found) {
            return false;
        }
        self.rx.release();
        if self.rx.announce(false) {
            self.wake_space_waiters();
        }
        true
    }

    /// [`recv`](Self::recv) for everything but the fast paths: void and
    /// corrupt slots, a sender's first message.
    #[inline(never)]
    fn recv_slow(&mut self) -> Option<Incoming<'_>> {
        loop {
            match self.rx.poll() {
                Head::Ready(info) => {
                    if info.flags & FLAG_VOID != 0 {
                        self.rx.release();
                        continue;
                    }
                    match self.sender_addr(info.entry, info.src) {
                        Some(from) => {
                            let reply = self
                                .senders
                                .get(usize::from(info.entry))
                                .and_then(|s| s.as_ref()?.reply);
                            prepare_reply(&self.links, reply);
                            self.head_found = true;
                            return Some(Incoming {
                                mailbox: self,
                                from,
                                len: info.len,
                            });
                        }
                        None => {
                            self.rx.release();
                            self.events.push_back(ShmEvent::Corrupt {
                                addr: None,
                                what: "inbox message from an unregistered sender",
                            });
                        }
                    }
                }
                Head::Corrupt(_) => {
                    self.rx.release();
                    self.events.push_back(ShmEvent::Corrupt {
                        addr: None,
                        what: "inbox slot length beyond the slot",
                    });
                }
                Head::NotReady => return None,
            }
        }
    }

    /// Shows up to `budget` messages to `f` in place, releasing each after
    /// `f` returns. Returns the number shown.
    pub fn recv_burst(&mut self, budget: usize, mut f: impl FnMut(ProcessAddr, &[u8])) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(m) = self.recv() else { break };
            f(m.from, m.bytes());
            m.release();
            n += 1;
        }
        n
    }

    /// Address of the sender in directory entry `i` whose slot says `src`;
    /// registers the sender on its first message.
    #[inline]
    fn sender_addr(&mut self, i: u16, src: u64) -> Option<ProcessAddr> {
        if let Some(Some(s)) = self.senders.get(usize::from(i)) {
            if s.src == src {
                return Some(s.addr);
            }
        }
        self.resolve_sender(u32::from(i)).filter(|_| {
            self.senders[usize::from(i)]
                .as_ref()
                .is_some_and(|s| s.src == src)
        })
    }

    /// Reads directory entry `i` and records its sender (cold path).
    fn resolve_sender(&mut self, i: u32) -> Option<ProcessAddr> {
        if i >= self.seg.layout().geometry.dir_entries {
            return None;
        }
        let e = entry(&self.seg, i);
        let s = e.ctl.state.load(Ordering::Acquire);
        let tag = entry_state::tag(s);
        if tag != entry_state::ACTIVE && tag != entry_state::LEFT {
            return None;
        }
        let generation = entry_state::generation(s);
        if let Some(k) = &self.senders[i as usize] {
            if k.generation == generation {
                return Some(k.addr);
            }
        }
        let src = e.ctl.addr.load(Ordering::Relaxed);
        let addr = unpack_addr(src);
        let start = e.ctl.start.load(Ordering::Relaxed);
        let watch = Watch::new(entry_state::pid(s), start);
        if let Some(fd) = watch.fd() {
            epoll_ctl(
                &self.epoll,
                libc::EPOLL_CTL_ADD,
                fd,
                EP_SENDER | u64::from(i),
            );
        }
        let ex = ExReceiver::new(ex_view(&self.seg, i));
        let ex_seen = ex.view().head();
        if let Some(old) = self.senders[i as usize].take() {
            if let Some(fd) = old.watch.fd() {
                epoll_ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0);
            }
        }
        self.senders[i as usize] = Some(Sender {
            generation,
            addr,
            src,
            watch,
            ex,
            ex_seen,
            ringer: None,
            gone: false,
            died: false,
            free_after: 0,
            stall: Stall::default(),
            reply: self.link_by_addr.get(&addr).copied(),
        });
        self.by_addr.insert(addr, i);
        // A new process at an address we have a link to (it restarted):
        // the link still writes into the old, dead process's segment.
        // Connect to the new one in place (same peer id), so answers reach
        // it. (A late first message of the dead process itself changes
        // nothing: the link's process is then alive.)
        let pid = entry_state::pid(s);
        if let Some(&id) = self.link_by_addr.get(&addr) {
            let link = &mut self.links[id.0 as usize];
            if !link.watch.is(pid, start) && link.watch.is_dead() {
                self.links[id.0 as usize].dead = true;
                let _ = self.connect(addr);
            }
        }
        Some(addr)
    }

    /// Bookkeeping when the inbox has nothing for us: wake producers waiting
    /// for space, and now and then look for a stuck head and dead peers.
    #[cold]
    #[inline(never)]
    fn on_idle(&mut self) {
        if self.gone_pending > 0 {
            self.reap_gone();
        }
        if self.idle & IDLE_STUCK_MASK == 0 {
            // Only a head that has not moved for a whole stretch of idle
            // polls can be stuck, and only then are peers worth a system
            // call: while messages flow, leave the producers' tail line and
            // the kernel alone.
            let head = self.rx.head();
            if head != self.idle_head {
                self.idle_head = head;
                self.stuck_since = None;
                return;
            }
            self.check_head();
            if self.idle & IDLE_PEERS_MASK == 0 {
                self.check_peers();
            }
        }
    }

    /// Rings every sender that asked to be woken when space is freed.
    fn wake_space_waiters(&mut self) {
        for i in 0..self.seg.layout().geometry.dir_entries {
            let w = &entry(&self.seg, i).ctl.waiting;
            if w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::AcqRel) != 0 {
                self.ring_sender(i);
            }
        }
    }

    fn ring_sender(&mut self, i: u32) {
        if self.senders[i as usize].is_none() && self.resolve_sender(i).is_none() {
            return;
        }
        let (job, dir) = (self.cfg.job, self.cfg.dir.clone());
        let Some(s) = self.senders[i as usize].as_mut() else {
            return;
        };
        if s.ringer.is_none() {
            let path = doorbell::path_for(&dir.join(segment::segment_name(job, s.addr)));
            s.ringer = Ringer::connect(&path).ok();
        }
        if let Some(r) = &s.ringer {
            if r.ring() == Rang::Gone {
                s.ringer = None;
            }
        }
    }

    /// If the head slot is claimed but unpublished, finds its claimer
    /// through the intent words and skips the slot if the claimer is dead.
    fn check_head(&mut self) {
        if !self.rx.head_claimed() {
            self.stuck_since = None;
            return;
        }
        let now = Instant::now();
        let since = *self.stuck_since.get_or_insert(now);
        let target = self.rx.head() + 1;
        let mut found = false;
        let mut live = false;
        let mut dead = Vec::new();
        for i in 0..self.seg.layout().geometry.dir_entries {
            let e = entry(&self.seg, i);
            if e.intent.load(Ordering::Acquire) != target {
                continue;
            }
            found = true;
            if self.entry_alive(i) {
                live = true;
            } else {
                dead.push(i);
            }
        }
        let skip = if found {
            !live
        } else {
            now.duration_since(since) > ORPHAN_TIMEOUT
        };
        if skip && self.rx.head_claimed() {
            self.rx.skip_dead();
            self.stuck_since = None;
            if !found {
                self.events.push_back(ShmEvent::Corrupt {
                    addr: None,
                    what: "inbox slot claimed by no registered sender",
                });
            }
        }
        for i in dead {
            self.sender_gone(i, true);
        }
    }

    /// Whether the sender registered in entry `i` is alive.
    fn entry_alive(&mut self, i: u32) -> bool {
        let s = entry(&self.seg, i).ctl.state.load(Ordering::Acquire);
        if let Some(k) = self.senders[i as usize].as_mut() {
            if k.generation == entry_state::generation(s) {
                return !k.watch.is_dead();
            }
        }
        let start = entry(&self.seg, i).ctl.start.load(Ordering::Relaxed);
        match entry_state::tag(s) {
            entry_state::FREE => false,
            // A claimer that died before writing its start time: judge by
            // the pid alone.
            entry_state::CLAIMING => proc::stat(entry_state::pid(s))
                .map(|st| st.is_some_and(|(state, _)| state != 'Z' && state != 'X'))
                .unwrap_or(true),
            _ => proc::is_alive(entry_state::pid(s), start),
        }
    }

    /// The sender in entry `i` died (`died`) or closed. Its entry is freed,
    /// and the event reported, once everything it claimed in the inbox has
    /// been consumed (see [`reap_gone`](Self::reap_gone)).
    fn sender_gone(&mut self, i: u32, died: bool) {
        let tail = self.rx.tail();
        if self.senders[i as usize].is_none() && self.resolve_sender(i).is_none() {
            // Never got as far as registering (died while claiming).
            self.free_entry(i);
            return;
        }
        let Some(s) = self.senders[i as usize].as_mut() else {
            return;
        };
        if s.gone {
            return;
        }
        s.gone = true;
        s.died = died;
        s.free_after = tail;
        if let Some(fd) = s.watch.fd() {
            epoll_ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0);
        }
        self.gone_pending += 1;
        self.reap_gone();
    }

    /// Reports and frees the gone senders whose inbox messages have all
    /// been consumed (and, for one that closed cleanly, whose exchange
    /// queue has been drained).
    fn reap_gone(&mut self) {
        let head = self.rx.head();
        for i in 0..self.senders.len() {
            let Some(s) = &self.senders[i] else { continue };
            // A sender that closed cleanly keeps its entry until we have
            // also pulled what it left in its exchange queue; a dead one's
            // unpulled exchange data is discarded.
            let drained = s.died || s.ex.view().head() == s.ex.tail();
            if !s.gone || head < s.free_after || !drained {
                continue;
            }
            let (addr, pid, died) = (s.addr, s.watch.pid(), s.died);
            if died {
                self.report_death(addr, pid);
            } else {
                self.events.push_back(ShmEvent::PeerClosed { addr });
            }
            self.free_entry(i as u32);
        }
        self.gone_pending = self.senders.iter().flatten().filter(|s| s.gone).count();
    }

    /// Returns directory entry `i` to the free pool.
    fn free_entry(&mut self, i: u32) {
        let e = entry(&self.seg, i);
        ex_view(&self.seg, i).discard_all();
        self.seg.punch_entry_data(i);
        e.intent.store(0, Ordering::Relaxed);
        e.ctl.waiting.store(0, Ordering::Relaxed);
        let s = e.ctl.state.load(Ordering::Acquire);
        e.ctl.state.store(
            entry_state::pack(0, entry_state::generation(s), entry_state::FREE),
            Ordering::Release,
        );
        if let Some(old) = self.senders[i as usize].take() {
            if self.by_addr.get(&old.addr) == Some(&i) {
                self.by_addr.remove(&old.addr);
            }
        }
    }

    /// Looks for dead or departed peers, in both directions, and frees the
    /// directory entries of senders that are gone and fully consumed.
    /// Cheap (one non-blocking `epoll_wait` plus a load per peer); the
    /// engine should call it now and then (say every 10-100 ms) when it
    /// busy-polls; [`recv`](Self::recv) also calls it every 65536 idle
    /// polls while nothing arrives, and [`finish_wait`](Self::finish_wait)
    /// after every sleep.
    pub fn check_peers(&mut self) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: epoll_wait writes at most evs.len() events into evs.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as i32,
                0,
            )
        };
        for ev in evs.iter().take(n.max(0) as usize) {
            let data = ev.u64;
            match data & !0xffff_ffff {
                EP_LINK => {
                    let id = PeerId(data as u32);
                    if let Some(l) = self.links.get_mut(id.0 as usize) {
                        if !l.dead && l.watch.is_dead() {
                            self.link_gone(id);
                        }
                    }
                }
                EP_SENDER => {
                    let i = data as u32;
                    let dead = self
                        .senders
                        .get_mut(i as usize)
                        .and_then(|s| s.as_mut())
                        .is_some_and(|s| s.watch.is_dead());
                    if dead {
                        // A sender that closed its link and then exited
                        // left cleanly.
                        let st = entry(&self.seg, i).ctl.state.load(Ordering::Acquire);
                        self.sender_gone(i, entry_state::tag(st) != entry_state::LEFT);
                    }
                }
                _ => {}
            }
        }
        for id in 0..self.links.len() {
            let l = &mut self.links[id];
            if !l.dead
                && (l.seg.state().load(Ordering::Acquire) != STATE_READY
                    || (l.watch.fd().is_none() && l.watch.is_dead()))
            {
                self.link_gone(PeerId(id as u32));
            }
        }
        for i in 0..self.seg.layout().geometry.dir_entries {
            let s = entry(&self.seg, i).ctl.state.load(Ordering::Acquire);
            let tag = entry_state::tag(s);
            let act = match self.senders[i as usize].as_mut() {
                Some(k)
                    if k.generation == entry_state::generation(s) || tag == entry_state::FREE =>
                {
                    if k.gone {
                        Act::Nothing
                    } else if tag == entry_state::LEFT {
                        Act::Gone { died: false }
                    } else if k.watch.fd().is_none() && k.watch.is_dead() {
                        Act::Gone { died: true }
                    } else {
                        Act::Nothing
                    }
                }
                // An entry we have not heard from: register it (so its pidfd
                // is watched) or reclaim it if its claimer is gone.
                _ if tag == entry_state::FREE => Act::Nothing,
                _ if tag == entry_state::LEFT => Act::Gone { died: false },
                _ => Act::CheckUnknown,
            };
            match act {
                Act::Nothing => {}
                Act::Gone { died } => self.sender_gone(i, died),
                Act::CheckUnknown => {
                    if !self.entry_alive(i) {
                        self.sender_gone(i, true);
                    } else if tag == entry_state::ACTIVE {
                        self.resolve_sender(i);
                    }
                }
            }
        }
        self.reap_gone();
    }

    /// Whether [`Mailbox::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next event about a peer (death, departure, protocol violation).
    pub fn poll_event(&mut self) -> Option<ShmEvent> {
        self.events.pop_front()
    }

    // ----------------------------------------------------------------
    // Exchange queues, receiving side
    // ----------------------------------------------------------------

    fn sender_entry(&mut self, from: ProcessAddr) -> Option<u32> {
        if let Some((a, i)) = self.last_from {
            if a == from
                && self.senders[i as usize]
                    .as_ref()
                    .is_some_and(|s| s.addr == from)
            {
                return Some(i);
            }
        }
        if let Some(&i) = self.by_addr.get(&from) {
            self.last_from = Some((from, i));
            return Some(i);
        }
        for i in 0..self.seg.layout().geometry.dir_entries {
            let e = entry(&self.seg, i);
            let tag = entry_state::tag(e.ctl.state.load(Ordering::Acquire));
            if (tag == entry_state::ACTIVE || tag == entry_state::LEFT)
                && e.ctl.addr.load(Ordering::Relaxed) == pack_addr(from)
                && self.resolve_sender(i) == Some(from)
            {
                return Some(i);
            }
        }
        None
    }

    /// A sender whose exchange queue received chunks since we last looked,
    /// if any (scans the known senders).
    pub fn exchange_ready(&mut self) -> Option<ProcessAddr> {
        self.senders
            .iter_mut()
            .flatten()
            .find(|s| s.ex.view().head() != s.ex.tail())
            .map(|s| s.addr)
    }

    /// The length of the next large message from `from`, once its first
    /// chunk has arrived.
    pub fn next_message_len(&mut self, from: ProcessAddr) -> Result<Option<usize>, ShmError> {
        let s = self
            .sender_entry(from)
            .and_then(|i| self.senders[i as usize].as_mut())
            .ok_or(ShmError::PeerGone { addr: from })?;
        Ok(s.ex.next_len()?)
    }

    /// Copies as many chunks of the large message from `from` as have
    /// arrived into `dst` (which must hold the whole message), continuing a
    /// message in progress. Call again until `Done`. If the sender died,
    /// the chunks it published are still delivered; then the call fails
    /// with `PeerGone` instead of waiting forever.
    pub fn pull_into(
        &mut self,
        from: ProcessAddr,
        dst: &mut [u8],
    ) -> Result<PullProgress, ShmError> {
        let i = self
            .sender_entry(from)
            .ok_or(ShmError::PeerGone { addr: from })?;
        let s = self.senders[i as usize]
            .as_mut()
            .ok_or(ShmError::PeerGone { addr: from })?;
        let before = s.ex.tail();
        let r = s.ex.pull_into(dst);
        let moved = s.ex.tail() != before;
        s.ex_seen = s.ex.view().head();
        let p = match r {
            Ok(p) => p,
            Err(crate::exchange::ExError::Corrupt(what)) => {
                self.events.push_back(ShmEvent::Corrupt {
                    addr: Some(from),
                    what,
                });
                return Err(ShmError::Exchange(crate::exchange::ExError::Corrupt(what)));
            }
            Err(e) => return Err(e.into()),
        };
        if moved {
            if bell::should_wake(&entry(&self.seg, i).ctl.waiting) {
                self.ring_sender(i);
            }
            return Ok(p);
        }
        if matches!(p, PullProgress::Done { .. }) {
            return Ok(p);
        }
        // No progress: is the sender still there?
        if s.gone {
            return Err(ShmError::PeerGone { addr: from });
        }
        if !s.stall.due() {
            return Ok(p);
        }
        if s.watch.is_dead() {
            // Chunks published just before death may have arrived since.
            if s.ex.view().head() != s.ex.tail() {
                return Ok(p);
            }
            self.sender_gone(i, true);
            return Err(ShmError::PeerGone { addr: from });
        }
        Ok(p)
    }

    // ----------------------------------------------------------------
    // Sleeping
    // ----------------------------------------------------------------

    /// Prepares to sleep: arms the flags that make peers ring our doorbell
    /// (our inbox's sleep bit, our bell flag for exchange chunks, and the
    /// waiting flags in the peers we are blocked on), then re-checks
    /// everything. Returns true if the caller may now sleep in `epoll` on
    /// [`readiness_fd`](Self::readiness_fd) (alone or in its own epoll
    /// set); false if there is work (do not sleep). Either way, call
    /// [`finish_wait`](Self::finish_wait) afterwards.
    pub fn prepare_wait(&mut self) -> bool {
        // Hand consumed slots back before sleeping: producers may be
        // waiting for them.
        if self.rx.announce(true) {
            self.wake_space_waiters();
        }
        if !self.events.is_empty() {
            return false;
        }
        for l in self.blocked_links() {
            entry(&l.seg, l.entry)
                .ctl
                .waiting
                .store(1, Ordering::Relaxed);
            if l.inbox_blocked {
                l.producer.want_space();
            }
        }
        if !self.rx.arm_sleep() {
            return false;
        }
        bell::arm(self.seg.bell_flag());
        // Re-check everything after the fence in `arm`.
        if self.rx.poll() != Head::NotReady {
            return false;
        }
        let mut work = false;
        for s in self.senders.iter_mut().flatten() {
            let h = s.ex.view().head();
            if h != s.ex_seen {
                s.ex_seen = h;
                work = true;
            }
        }
        for l in self.links.iter().filter(|l| !l.dead) {
            if (l.inbox_blocked && l.producer.has_space())
                || (l.ex_blocked && l.ex.view().has_space())
            {
                work = true;
            }
        }
        !work
    }

    /// The live links whose last send found the peer's inbox or exchange
    /// queue full: while asleep we want to hear when they have room.
    fn blocked_links(&self) -> impl Iterator<Item = &Link> {
        self.links
            .iter()
            .filter(|l| !l.dead && (l.inbox_blocked || l.ex_blocked))
    }

    /// Undoes [`prepare_wait`](Self::prepare_wait) after sleeping (or not):
    /// disarms the flags, drains the doorbell and checks the peers.
    pub fn finish_wait(&mut self) {
        self.rx.disarm_sleep();
        bell::disarm(self.seg.bell_flag());
        for l in self.blocked_links() {
            entry(&l.seg, l.entry)
                .ctl
                .waiting
                .store(0, Ordering::Relaxed);
        }
        self.bell.drain();
        self.check_peers();
    }

    /// Sleeps until a peer rings, a watched peer dies, or `timeout` passes
    /// (`None`: no limit), unless there is work already. Returns whether
    /// it slept.
    pub fn wait(&mut self, timeout: Option<Duration>) -> bool {
        let slept = self.prepare_wait();
        if slept {
            let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
            // SAFETY: waits for at most one event into a valid buffer. The
            // events are re-read non-blockingly by check_peers.
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), ev.as_mut_ptr(), 1, ms) };
        }
        self.finish_wait();
        slept
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        // Leave the peers' directories: they free our entries once they
        // have consumed what we sent.
        for l in &self.links {
            if l.dead {
                continue;
            }
            let e = entry(&l.seg, l.entry);
            let s = e.ctl.state.load(Ordering::Acquire);
            if entry_state::tag(s) == entry_state::ACTIVE && entry_state::pid(s) == self.pid {
                e.ctl.state.store(
                    entry_state::pack(self.pid, entry_state::generation(s), entry_state::LEFT),
                    Ordering::Release,
                );
                if let Some(r) = &l.ringer {
                    r.ring();
                }
            }
        }
        // Tell our senders we are closing, and wake those that wait on us.
        self.seg
            .state()
            .store(crate::layout::STATE_CLOSED, Ordering::Release);
        for i in 0..self.seg.layout().geometry.dir_entries {
            if entry(&self.seg, i).ctl.waiting.swap(0, Ordering::AcqRel) != 0 {
                self.ring_sender(i);
            }
        }
    }
}

/// A message at the head of the inbox, shown in place.
pub struct Incoming<'a> {
    mailbox: &'a mut Mailbox,
    from: ProcessAddr,
    len: usize,
}

/// The `len` payload bytes of the message at the head of `mailbox`'s
/// inbox, found by [`Mailbox::recv`]. The slice borrows the mailbox, so
/// the slot cannot be released while it lives.
#[inline]
fn head_bytes(mailbox: &Mailbox, len: usize) -> &[u8] {
    mailbox.rx.reading(|| {
        // SAFETY: payload_ptr points to the head slot's payload area of
        // payload_max bytes in our mapping; len <= payload_max (checked by
        // poll); the slot is published and not released, so by the
        // protocol nobody writes it while the mailbox is borrowed (releasing
        // needs it mutably).
        unsafe { std::slice::from_raw_parts(mailbox.rx.payload_ptr(), len) }
    })
}

impl<'a> Incoming<'a> {
    /// The sender.
    pub fn from(&self) -> ProcessAddr {
        self.from
    }

    /// The message length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The message bytes, in the inbox slot.
    ///
    /// Valid until [`release`](Self::release). By the inbox protocol no
    /// process writes a published slot before the consumer releases it;
    /// a peer that breaks the protocol can change these bytes under the
    /// reader (then the reader sees garbage, which it must validate as it
    /// would any frame), but never their length or location, which were
    /// validated when the message was found.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        head_bytes(self.mailbox, self.len)
    }

    /// Copies the message into `dst`; returns the bytes copied.
    #[inline]
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        self.mailbox.rx.copy_head(self.len, dst)
    }

    /// Gives the slot back to the producers.
    #[inline]
    pub fn release(self) {
        self.mailbox.release_head();
    }

    /// The sender and the bytes, for as long as the mailbox is borrowed;
    /// the message stays at the head of the inbox (as when an `Incoming`
    /// is dropped) until [`Mailbox::release_head`].
    #[inline]
    pub fn into_parts(self) -> (ProcessAddr, &'a [u8]) {
        let mailbox: &'a Mailbox = self.mailbox;
        (self.from, head_bytes(mailbox, self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox(job: JobKey, port: u16) -> Mailbox {
        let mut cfg = MailboxConfig::new(job, ProcessAddr::new(1, port));
        cfg.geometry.inbox_slots = 16;
        cfg.geometry.dir_entries = 4;
        cfg.geometry.chunk_size = 4096;
        cfg.geometry.chunks = 4;
        Mailbox::open(cfg).unwrap()
    }

    fn take_one(p: &mut Mailbox) -> Vec<u8> {
        let m = p.recv().expect("a message");
        let bytes = m.bytes().to_vec();
        m.release();
        bytes
    }

    /// Receiving from a peer we have a link to prepares that link's next
    /// slot, whichever came first: the link or the peer's first message.
    #[test]
    fn receiving_prepares_the_reply_slot_whatever_came_first() {
        let job = JobKey(std::process::id() << 8 ^ 0x71);
        let mut a = mailbox(job, 1);
        let mut b = mailbox(job, 2);
        let a_to_b = a.connect(b.local()).unwrap();
        a.try_send(a_to_b, b"first").unwrap();
        assert_eq!(take_one(&mut b), b"first", "b has no link to a yet");
        // The link comes after the sender: connecting finds the sender.
        let b_to_a = b.connect(a.local()).unwrap();
        let prepared = |p: &Mailbox, id: PeerId| p.links[id.0 as usize].producer.prepared();
        assert_eq!(prepared(&b, b_to_a), None);
        a.try_send(a_to_b, b"second").unwrap();
        assert_eq!(take_one(&mut b), b"second");
        assert_eq!(
            prepared(&b, b_to_a),
            Some(0),
            "a's inbox tail, where b sends next"
        );
        // The sender comes after the link: registering finds the link.
        b.try_send(b_to_a, b"reply").unwrap();
        assert_eq!(take_one(&mut a), b"reply");
        assert_eq!(prepared(&a, a_to_b), Some(2), "a sent two into b's inbox");
        // Messages without an answer in between prepare the same slot.
        a.try_send(a_to_b, b"third").unwrap();
        a.try_send(a_to_b, b"fourth").unwrap();
        assert_eq!(take_one(&mut b), b"third");
        assert_eq!(take_one(&mut b), b"fourth");
        assert_eq!(prepared(&b, b_to_a), Some(1));
        // An inbox that looks full is left alone: its tail slot is the
        // consumer's.
        // (a has consumed one of b's messages and announced none: 16 slots
        // from position 0 are b's to fill.)
        for i in 0..14u8 {
            b.try_send(b_to_a, &[i]).unwrap();
        }
        a.try_send(a_to_b, b"fifth").unwrap();
        assert_eq!(take_one(&mut b), b"fifth");
        assert_eq!(prepared(&b, b_to_a), Some(15));
        b.try_send(b_to_a, b"last").unwrap();
        assert!(matches!(b.try_send(b_to_a, b"over"), Err(SendError::Full)));
        a.try_send(a_to_b, b"sixth").unwrap();
        assert_eq!(take_one(&mut b), b"sixth");
        assert_eq!(prepared(&b, b_to_a), Some(15), "full: nothing prepared");
    }
}
