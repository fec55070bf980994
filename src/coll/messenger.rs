//! Tagged point-to-point messages over an [`Endpoint`]: what communicators
//! and collectives are built on.
//!
//! A message is addressed by (context id, tag) and matched at the receiver
//! by (context id, sender, tag), in the order the sender sent them. Small
//! messages travel inline on the system channel (`EAGER`); a message larger
//! than the system channel's eager limit sends a request (`RTS`), the
//! receiver posts a buffer of the right size on a normal channel once a
//! receive matches and answers (`CTS`), and the data goes straight into that
//! buffer. So large messages cost the receiver no ring space and no copy,
//! and a large message nobody has asked for yet occupies nothing but its
//! request.
//!
//! Messages that arrive before their receive is posted wait in the
//! unexpected queue. A message to oneself is delivered locally. A peer whose
//! sends fail (unreachable) fails every send and receive involving it.
//!
//! A receive may also take any sender or any tag ([`Pattern`], MPI's
//! `MPI_ANY_SOURCE` and `MPI_ANY_TAG`). Matching then follows MPI's order:
//! a message goes to the earliest-posted receive it matches, and a receive
//! takes the earliest-arrived message it matches. Posts and arrivals carry
//! a sequence number for that; receives with an exact (sender, tag) stay in
//! the hashed queues, so the collectives, which never use wildcards, pay
//! one emptiness check for them. A synchronous send ([`Messenger::isend_sync`])
//! completes only once a receive matched it.

use super::error::CollError;
use super::wire::Msg;
use crate::endpoint::{Endpoint, Error};
use bcl_core::lent::{LentBytes, LentBytesMut};
use bcl_core::{ChannelEvent, ChannelId, PeerEvent, ProcessAddr, SendEvent, SendHandle};
use bcl_shm::cma::Region;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// Where a message is matched: (context id, sender, tag).
type Key = (u32, ProcessAddr, u64);

/// What a receive accepts: one context, and one sender or any, one tag or
/// any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// The context id.
    pub context: u32,
    /// The sender, or any.
    pub from: Option<ProcessAddr>,
    /// The tag, or any.
    pub tag: Option<u64>,
}

impl Pattern {
    /// Whether a message under `key` matches.
    fn matches(&self, key: &Key) -> bool {
        self.context == key.0
            && self.from.is_none_or(|f| f == key.1)
            && self.tag.is_none_or(|t| t == key.2)
    }

    /// The key, if the pattern names one sender and one tag.
    fn exact(&self) -> Option<Key> {
        Some((self.context, self.from?, self.tag?))
    }
}

/// A received message with its envelope.
#[derive(Debug, PartialEq, Eq)]
pub struct Received {
    /// Who sent it.
    pub from: ProcessAddr,
    /// Its tag.
    pub tag: u64,
    /// The message.
    pub data: Vec<u8>,
}

/// A message waiting for a receive, as [`Messenger::probe`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Who sent it.
    pub from: ProcessAddr,
    /// Its tag.
    pub tag: u64,
    /// Its length in bytes.
    pub len: usize,
}

/// Memory a receive's message is written into as soon as it matches,
/// during any progress round: the receiver's own buffer, so a message never
/// waits for its receiver to ask for it, and lands with one copy.
pub trait RecvBuffer: Send + std::any::Any {
    /// The buffer (a message longer than it is cut to it).
    fn bytes(&mut self) -> &mut [u8];

    /// Whether the messenger may keep this buffer once its message landed,
    /// for [`Messenger::spare_buffer`] to hand back (a buffer that only
    /// borrows memory its owner refills). Otherwise (the default) it is
    /// dropped then, so a buffer that gives its bytes back on drop does.
    fn reusable(&self) -> bool {
        false
    }

    /// The same memory as [`RecvBuffer::bytes`], lent to the port so a
    /// large message is written there as it arrives, with no copy
    /// ([`bcl_core::lent`]: valid and untouched until the receive
    /// completes). `None` (the default): the message arrives in a buffer of
    /// the messenger's and is copied in when complete.
    fn lend(&mut self) -> Option<Box<dyn LentBytesMut>> {
        None
    }
}

impl std::fmt::Debug for dyn RecvBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecvBuffer")
    }
}

/// What a completed receive got ([`Messenger::take_incoming`]).
#[derive(Debug)]
pub enum Incoming {
    /// The message.
    Data(Received),
    /// The message is in the receive's [`RecvBuffer`] (`len` is its whole
    /// length, which may exceed the buffer's).
    Landed(Envelope),
}

/// What [`Messenger::recv_now`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum RecvNow {
    /// A message was copied into the buffer (`len` is its whole length,
    /// which may exceed the buffer's).
    Got(Envelope),
    /// The earliest match is large: a receive is posted for it.
    Posted(RecvId),
    /// Nothing matching yet.
    Nothing,
}

/// A message met by [`Messenger::recv_now`]'s poll.
enum Polled {
    /// Copied into the caller's buffer: (tag, length, token to answer).
    Taken(u64, usize, Option<u32>),
    /// Another message, to handle as usual.
    Other(Owned),
}

/// A receive of a [`Messenger`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvId(usize);

/// A send of a [`Messenger`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendId(usize);

impl SendId {
    /// A send complete when accepted (inline messages, pieces, messages to
    /// oneself): nothing to keep track of.
    pub(crate) const COMPLETE: SendId = SendId(usize::MAX);

    /// Whether the send was complete when accepted (nothing to wait for:
    /// [`Messenger::take_send`] gives `Ok` at once).
    pub fn completed_at_once(&self) -> bool {
        *self == SendId::COMPLETE
    }
}

/// Largest message sent in pieces on the system channel by default: none
/// (every message above the eager limit goes by rendezvous). Measured on
/// shared memory, 2 ranks busy-polling, bcl-coll p50 with pieces up to 128
/// KiB against rendezvous (3 alternating runs): allreduce 64 KiB 73–85 µs
/// against 42–43, bcast 64 KiB 45–54 against 23–25 — the system channel
/// copies twice where a normal channel's bulk path copies once. With more
/// ranks than cores (4 ranks yielding on 2 cores) pieces win: allreduce 64
/// KiB 387 µs against 1367, since a rendezvous waits for the receiver to
/// be scheduled twice. `BCL_COLL_FRAGMENT_LIMIT` (bytes) or
/// [`Messenger::set_fragment_limit`] turns them on.
pub const DEFAULT_FRAGMENT_LIMIT: usize = 0;

/// Largest medium message a receiver puts together from pieces.
pub const FRAGMENT_LIMIT: usize = 1 << 20;

/// Largest message a receiver accepts (4 GiB): a request announcing more
/// fails its receive rather than an allocation of that size.
pub const MAX_MESSAGE: usize = 1 << 32;

/// Messages taken from the endpoint per progress call, at most.
const RX_BUDGET: usize = 64;

/// A received message, copied out of the endpoint's receive ring.
enum Owned {
    Eager {
        context: u32,
        tag: u64,
        data: Vec<u8>,
    },
    Rts {
        context: u32,
        tag: u64,
        len: usize,
        token: u32,
    },
    Cts {
        token: u32,
        channel: ChannelId,
    },
    Sync {
        context: u32,
        tag: u64,
        token: u32,
        data: Vec<u8>,
    },
    RtsRemote {
        context: u32,
        tag: u64,
        token: u32,
        region: Region,
    },
    Malformed,
    /// A piece of a medium message, kept until the message is whole.
    Nothing,
}

/// A medium message being put together from its pieces.
struct Assembly {
    context: u32,
    tag: u64,
    buf: Vec<u8>,
    filled: usize,
}

impl Owned {
    /// Parses `bytes` from `from`; a medium message's piece goes into its
    /// sender's assembly (`Nothing` until the last piece is in, then the
    /// whole message as `Eager`). Pieces out of place (not at the offset
    /// expected, beyond the length, of another message) drop the assembly
    /// and count as malformed.
    fn parse(
        from: ProcessAddr,
        bytes: &[u8],
        assembling: &mut HashMap<ProcessAddr, Assembly>,
        pool: &mut super::pool::Pool,
    ) -> Owned {
        match Msg::parse(bytes) {
            Ok(Msg::Fragment {
                context,
                tag,
                total,
                offset,
                data,
            }) => {
                let (Ok(total), Ok(offset)) = (usize::try_from(total), usize::try_from(offset))
                else {
                    return Owned::Malformed;
                };
                if total > FRAGMENT_LIMIT || offset.saturating_add(data.len()) > total {
                    assembling.remove(&from);
                    return Owned::Malformed;
                }
                if offset == 0 {
                    if let Some(old) = assembling.insert(
                        from,
                        Assembly {
                            context,
                            tag,
                            buf: pool.take(total),
                            filled: 0,
                        },
                    ) {
                        // A message left unfinished: its sender moved on.
                        pool.give(old.buf);
                        return Owned::Malformed;
                    }
                }
                let Some(a) = assembling.get_mut(&from) else {
                    return Owned::Malformed;
                };
                if a.context != context
                    || a.tag != tag
                    || a.filled != offset
                    || a.buf.len() != total
                {
                    if let Some(a) = assembling.remove(&from) {
                        pool.give(a.buf);
                    }
                    return Owned::Malformed;
                }
                a.buf[offset..offset + data.len()].copy_from_slice(data);
                a.filled += data.len();
                if a.filled < total {
                    return Owned::Nothing;
                }
                let a = assembling.remove(&from).expect("just used");
                Owned::Eager {
                    context: a.context,
                    tag: a.tag,
                    data: a.buf,
                }
            }
            Ok(Msg::Eager { context, tag, data }) => Owned::Eager {
                context,
                tag,
                data: pool.copy_of(data),
            },
            Ok(Msg::Rts {
                context,
                tag,
                len,
                token,
            }) => Owned::Rts {
                context,
                tag,
                len: usize::try_from(len).unwrap_or(usize::MAX),
                token,
            },
            Ok(Msg::Sync {
                context,
                tag,
                token,
                data,
            }) => Owned::Sync {
                context,
                tag,
                token,
                data: data.to_vec(),
            },
            Ok(Msg::RtsRemote {
                context,
                tag,
                token,
                region,
            }) => Owned::RtsRemote {
                context,
                tag,
                token,
                region,
            },
            Ok(Msg::Hello) => Owned::Nothing,
            Ok(Msg::Cts { token, channel }) => Owned::Cts {
                token,
                channel: ChannelId(channel),
            },
            Err(_) => Owned::Malformed,
        }
    }
}

/// A message that came before its receive.
#[derive(Debug)]
enum Arrival {
    /// Inline data.
    Eager(Vec<u8>),
    /// A large message's request.
    Rts { len: usize, token: u32 },
    /// Inline data whose sender waits for the match.
    Sync { data: Vec<u8>, token: u32 },
    /// A large message to read from the sender's memory.
    Remote { region: Region, token: u32 },
}

impl Arrival {
    /// The message's length.
    fn len(&self) -> usize {
        match self {
            Arrival::Eager(d) | Arrival::Sync { data: d, .. } => d.len(),
            Arrival::Rts { len, .. } => *len,
            Arrival::Remote { region, .. } => usize::try_from(region.len).unwrap_or(usize::MAX),
        }
    }
}

#[derive(Debug)]
enum RecvState {
    /// Posted, nothing matched yet; the buffer the message goes into, if
    /// the receive has one.
    Waiting(Option<Box<dyn RecvBuffer>>),
    /// Matched a large message; its data comes on `channel`: straight into
    /// the receive's buffer if it was lent to the port (`lent`), else into
    /// a pool buffer, then copied into the receive's buffer if it has one.
    OnChannel {
        from: ProcessAddr,
        tag: u64,
        buffer: Option<Box<dyn RecvBuffer>>,
        channel: ChannelId,
        lent: bool,
    },
    /// The message is in the receive's buffer.
    Landed(Envelope),
    Done(Received),
    Failed(CollError),
}

/// The bytes of a large message waiting for its receiver.
enum Outgoing {
    /// A copy in a pool buffer.
    Copy(Vec<u8>),
    /// The caller's memory ([`Messenger::isend_lent`]).
    Lent(Box<dyn LentBytes>),
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outgoing::Copy(v) => write!(f, "Copy({} bytes)", v.len()),
            Outgoing::Lent(l) => write!(f, "Lent({} bytes)", l.bytes().len()),
        }
    }
}

#[derive(Debug)]
enum SendState {
    /// A large message (or a synchronous one, with its data already sent)
    /// waiting for the receiver's answer.
    AwaitCts {
        dst: ProcessAddr,
        data: Outgoing,
    },
    /// Its data is going out on a normal channel; from memory lent to the
    /// port if `lent` (the send then ends only with the port's event: the
    /// port reads that memory until then).
    OnChannel {
        dst: ProcessAddr,
        lent: bool,
    },
    /// A message offered as a region of this process's memory, waiting
    /// for the receiver to read it.
    AwaitRead {
        dst: ProcessAddr,
    },
    /// The receiver could not read the region: it waits on `channel` for
    /// the bytes, which the owner of the send supplies
    /// ([`Messenger::supply`]).
    NeedsData {
        dst: ProcessAddr,
        channel: ChannelId,
    },
    Done,
    Failed(CollError),
}

/// Counters of a [`Messenger`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessengerStats {
    /// Messages sent inline.
    pub eager_sent: u64,
    /// Medium messages sent in pieces on the system channel.
    pub fragmented_sent: u64,
    /// Large messages sent through a normal channel.
    pub rendezvous_sent: u64,
    /// Messages that arrived before their receive.
    pub unexpected: u64,
    /// Messages of an agree-and-shrink that had returned here, dropped
    /// (a member still in an earlier round sent them).
    pub late_shrink_dropped: u64,
    /// Messages dropped because they could not be parsed.
    pub malformed: u64,
    /// Messages to oneself, delivered locally.
    pub local: u64,
    /// Large messages offered as a region of this process's memory.
    pub regions_sent: u64,
    /// Large messages read from the sender's memory.
    pub read_remote: u64,
    /// Large messages sent from memory lent to the port (no copy).
    pub lent_sent: u64,
    /// Large messages written straight into a receive's lent buffer.
    pub lent_received: u64,
}

/// Tagged messages over one endpoint (see the module documentation).
pub struct Messenger {
    ep: Endpoint,
    /// Largest message sent inline (the eager limit less the header).
    eager_max: usize,
    /// Receives of one sender and tag, with their post sequence numbers.
    posted: HashMap<Key, VecDeque<(u64, RecvId)>>,
    /// Receives of any sender or tag, in post order.
    wild: Vec<(u64, Pattern, RecvId)>,
    /// Messages before their receive, with their arrival sequence numbers.
    unexpected: HashMap<Key, VecDeque<(u64, Arrival)>>,
    /// Empty queues of the two maps, for reuse.
    spare_posts: Vec<VecDeque<(u64, RecvId)>>,
    spare_arrivals: Vec<VecDeque<(u64, Arrival)>>,
    /// Receive buffers whose message landed, for the caller to reuse
    /// ([`Messenger::spare_buffer`]): a stream of receives then allocates
    /// no box per message.
    spare_buffers: Vec<Box<dyn RecvBuffer>>,
    /// Orders posts among themselves and arrivals among themselves.
    next_seq: u64,
    recvs: Slab<RecvState>,
    sends: Slab<SendState>,
    /// Large sends waiting for a CTS, by (receiver, token).
    awaiting_cts: HashMap<(ProcessAddr, u32), SendId>,
    /// Large sends in progress on a channel.
    channel_sends: HashMap<SendHandle, SendId>,
    /// Large receives in progress, by channel.
    channel_recvs: HashMap<ChannelId, RecvId>,
    free_channels: Vec<ChannelId>,
    /// System messages the port had no room for yet.
    backlog: VecDeque<(ProcessAddr, Vec<u8>)>,
    /// Peers whose sends failed, and why.
    failed: HashMap<ProcessAddr, String>,
    /// Peers this process has sent to (so its link to them exists, and
    /// their methods report if they die).
    contacted: rustc_hash::FxHashSet<ProcessAddr>,
    /// Peers a posted receive waits for, marked critical in the port so
    /// liveness notices them dying (a receive alone sends nothing to them);
    /// unmarked once no receive waits for them.
    awaited: rustc_hash::FxHashSet<ProcessAddr>,
    /// Peers declared failed so far (grows by one per failure): a waiting
    /// loop that remembers it looks for failed members only after a change.
    failures: u64,
    /// Failure notices received (collective context, sender, body), not
    /// yet taken (see [`NOTICE_TAG`]).
    notices: Vec<(u32, ProcessAddr, Vec<u8>)>,
    /// Per collective context, the last agree-and-shrink that returned
    /// (see [`SHRINK_TAG`]): its late messages, and earlier ones', are
    /// dropped instead of kept for a receive that will never be posted.
    shrinks_done: HashMap<u32, u32>,
    /// Drains since `awaited` was last trimmed.
    drains_since_trim: u32,
    /// The peer contacted last (in `contacted`): a point-to-point stream
    /// meets the same peer call after call, and a comparison is cheaper
    /// than the set's lookup on every send and every waiting round.
    last_contacted: Option<ProcessAddr>,
    next_token: u32,
    scratch: Vec<u8>,
    stats: MessengerStats,
    /// Large buffers for reuse.
    pub(crate) pool: super::pool::Pool,
    /// Medium messages being put together, by sender.
    assembling: HashMap<ProcessAddr, Assembly>,
    /// Largest message this process sends in pieces.
    fragment_limit: usize,
}

impl Messenger {
    /// Tagged messaging over `ep`, which it owns from now on: every message
    /// and channel event of the endpoint goes through it.
    pub fn new(ep: Endpoint) -> Messenger {
        let eager_max = ep
            .port()
            .config()
            .eager_limit
            .saturating_sub(super::wire::HEADER_LEN);
        Messenger {
            ep,
            eager_max,
            posted: HashMap::default(),
            wild: Vec::new(),
            unexpected: HashMap::default(),
            spare_posts: Vec::new(),
            spare_arrivals: Vec::new(),
            spare_buffers: Vec::new(),
            next_seq: 0,
            recvs: Slab::default(),
            sends: Slab::default(),
            awaiting_cts: HashMap::default(),
            channel_sends: HashMap::default(),
            channel_recvs: HashMap::default(),
            free_channels: Vec::new(),
            backlog: VecDeque::new(),
            failed: HashMap::default(),
            contacted: Default::default(),
            awaited: Default::default(),
            failures: 0,
            notices: Vec::new(),
            shrinks_done: HashMap::default(),
            drains_since_trim: 0,
            last_contacted: None,
            next_token: 1,
            scratch: Vec::new(),
            stats: MessengerStats::default(),
            pool: super::pool::Pool::default(),
            assembling: HashMap::default(),
            fragment_limit: std::env::var("BCL_COLL_FRAGMENT_LIMIT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_FRAGMENT_LIMIT)
                .min(FRAGMENT_LIMIT),
        }
    }

    /// The endpoint underneath.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The endpoint underneath, for calls the messenger does not make
    /// itself (statistics, peer tables). Receiving from it directly would
    /// take messages the messenger is waiting for.
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// Gives the endpoint back.
    pub fn into_endpoint(self) -> Endpoint {
        self.ep
    }

    /// This process's address.
    pub fn local(&self) -> ProcessAddr {
        self.ep.local()
    }

    /// Counters.
    pub fn stats(&self) -> MessengerStats {
        self.stats
    }

    /// The largest message sent inline.
    pub fn eager_max(&self) -> usize {
        self.eager_max
    }

    /// Sends messages above the eager limit and up to `bytes` (at most
    /// [`FRAGMENT_LIMIT`]) in pieces on the system channel instead of by
    /// rendezvous (see [`DEFAULT_FRAGMENT_LIMIT`] for when that pays).
    /// Receivers accept pieces whatever their own setting.
    pub fn set_fragment_limit(&mut self, bytes: usize) {
        self.fragment_limit = bytes.min(FRAGMENT_LIMIT);
    }

    /// Sends `data` to `dst` under (`context`, `tag`). The data is copied
    /// (inline messages into the port, large ones into the transfer
    /// buffer), so the caller may reuse it at once.
    pub fn isend(
        &mut self,
        dst: ProcessAddr,
        context: u32,
        tag: u64,
        data: &[u8],
    ) -> Result<SendId, CollError> {
        if data.len() > MAX_MESSAGE {
            return Err(CollError::Invalid(format!(
                "a message of {} bytes is above the {MAX_MESSAGE}-byte limit",
                data.len()
            )));
        }
        if let Some(why) = self.failed.get(&dst) {
            return Err(peer_failed(dst, why));
        }
        if dst == self.local() {
            self.stats.local += 1;
            let copy = self.pool.copy_of(data);
            self.arrive((context, dst, tag), Arrival::Eager(copy));
            return Ok(SendId::COMPLETE);
        }
        if data.len() <= self.eager_max {
            self.stats.eager_sent += 1;
            let mut msg = std::mem::take(&mut self.scratch);
            Msg::Eager { context, tag, data }.encode(&mut msg);
            self.send_system(dst, msg)?;
            return Ok(SendId::COMPLETE);
        }
        if data.len() <= self.fragment_limit {
            self.stats.fragmented_sent += 1;
            let piece = self.eager_max + super::wire::HEADER_LEN - super::wire::FRAGMENT_OVERHEAD;
            for (i, chunk) in data.chunks(piece).enumerate() {
                let mut msg = std::mem::take(&mut self.scratch);
                Msg::Fragment {
                    context,
                    tag,
                    total: data.len() as u64,
                    offset: (i * piece) as u64,
                    data: chunk,
                }
                .encode(&mut msg);
                self.send_system(dst, msg)?;
            }
            return Ok(SendId::COMPLETE);
        }
        let copy = self.pool.copy_of(data);
        self.rendezvous(dst, context, tag, Outgoing::Copy(copy))
    }

    /// Whether a message of `len` bytes to another process goes by
    /// rendezvous (above the inline and fragment limits).
    pub fn goes_by_rendezvous(&self, len: usize) -> bool {
        len > self.eager_max.max(self.fragment_limit) && len <= MAX_MESSAGE
    }

    /// Sends the message in memory the caller lends ([`bcl_core::lent`])
    /// to `dst` under (`context`, `tag`). A message that goes by rendezvous
    /// is sent from that memory, with no copy, and the send completes when
    /// it has all been delivered: the memory must stay valid and unchanged
    /// until then. A smaller one (or one to this process) is copied at once,
    /// as by [`Messenger::isend`].
    pub fn isend_lent(
        &mut self,
        dst: ProcessAddr,
        context: u32,
        tag: u64,
        data: Box<dyn LentBytes>,
    ) -> Result<SendId, CollError> {
        let len = data.bytes().len();
        if dst == self.local() || !self.goes_by_rendezvous(len) {
            return self.isend(dst, context, tag, data.bytes());
        }
        if let Some(why) = self.failed.get(&dst) {
            return Err(peer_failed(dst, why));
        }
        self.rendezvous(dst, context, tag, Outgoing::Lent(data))
    }

    /// Sends `data` to `dst` under (`context`, `tag`) and completes only
    /// once a receive matched it (MPI's synchronous send). A small message
    /// travels inline and the receiver answers on the match; a large one
    /// goes by rendezvous, which waits for the match anyway. A message to
    /// oneself is delivered locally, complete once a receive takes it.
    pub fn isend_sync(
        &mut self,
        dst: ProcessAddr,
        context: u32,
        tag: u64,
        data: &[u8],
    ) -> Result<SendId, CollError> {
        if dst == self.local() {
            // Delivered locally, complete once a receive takes it.
            self.stats.local += 1;
            let token = self.token();
            let id = self.sends.insert(SendState::AwaitCts {
                dst,
                data: Outgoing::Copy(Vec::new()),
            });
            self.awaiting_cts.insert((dst, token), id);
            let data = self.pool.copy_of(data);
            self.arrive((context, dst, tag), Arrival::Sync { data, token });
            return Ok(id);
        }
        if data.len() + super::wire::SYNC_OVERHEAD > self.eager_max {
            return self.isend(dst, context, tag, data);
        }
        if let Some(why) = self.failed.get(&dst) {
            return Err(peer_failed(dst, why));
        }
        self.stats.eager_sent += 1;
        let state = SendState::AwaitCts {
            dst,
            data: Outgoing::Copy(Vec::new()),
        };
        self.send_awaiting(
            dst,
            |token| Msg::Sync {
                context,
                tag,
                token,
                data,
            },
            state,
        )
    }

    /// Sends the message in `region` (bytes of this process's memory, which
    /// stay as they are until the send completes) to `dst`, a process of
    /// this node, under (`context`, `tag`): the receiver reads it from this
    /// process's memory when a receive matches (one copy, by the kernel,
    /// nothing through the rings), then says so, and the send completes.
    /// If the receiver cannot read it, the send waits for its bytes
    /// ([`Messenger::needs_data`], [`Messenger::supply`]).
    pub fn isend_region(
        &mut self,
        dst: ProcessAddr,
        context: u32,
        tag: u64,
        region: Region,
    ) -> Result<SendId, CollError> {
        if dst == self.local() {
            return Err(CollError::Invalid(
                "a message to oneself is not sent as a region".into(),
            ));
        }
        if let Some(why) = self.failed.get(&dst) {
            return Err(peer_failed(dst, why));
        }
        self.stats.regions_sent += 1;
        let make = |token| Msg::RtsRemote {
            context,
            tag,
            token,
            region,
        };
        self.send_awaiting(dst, make, SendState::AwaitRead { dst })
    }

    /// Whether send `id` (a region the receiver could not read) waits for
    /// its bytes.
    pub fn needs_data(&self, id: SendId) -> bool {
        matches!(self.sends.try_get(id.0), Some(SendState::NeedsData { .. }))
    }

    /// Gives send `id` its bytes (the region's contents), when it
    /// [needs them](Messenger::needs_data); they go out on the channel the
    /// receiver posted.
    pub fn supply(&mut self, id: SendId, data: &[u8]) -> Result<(), CollError> {
        let Some(&SendState::NeedsData { dst, channel }) = self.sends.try_get(id.0) else {
            return Err(CollError::NoSuchRequest);
        };
        let data = self.pool.copy_of(data);
        self.send_on_channel(id, dst, channel, Outgoing::Copy(data));
        Ok(())
    }

    /// Starts send `id`'s data to `dst` on the channel its receiver
    /// posted: `OnChannel` until the transfer's event, or `Failed`.
    fn send_on_channel(&mut self, id: SendId, dst: ProcessAddr, ch: ChannelId, data: Outgoing) {
        let lent = matches!(data, Outgoing::Lent(_));
        self.stats.lent_sent += u64::from(lent);
        let sent = match data {
            Outgoing::Copy(v) => self.ep.send_on_channel(dst, ch, v),
            Outgoing::Lent(l) => self.ep.send_lent_on_channel(dst, ch, l),
        };
        *self.sends.get_mut(id.0) = match sent {
            Ok(h) => {
                self.channel_sends.insert(h, id);
                SendState::OnChannel { dst, lent }
            }
            Err(r) => SendState::Failed(CollError::Invalid(format!(
                "sending a large message to {dst}: {}",
                r.error
            ))),
        };
    }

    /// A fresh token for a message that waits for its receiver.
    fn token(&mut self) -> u32 {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        token
    }

    /// Sends a request for a large message and keeps its data until the
    /// receiver answers.
    fn rendezvous(
        &mut self,
        dst: ProcessAddr,
        context: u32,
        tag: u64,
        data: Outgoing,
    ) -> Result<SendId, CollError> {
        self.stats.rendezvous_sent += 1;
        let len = match &data {
            Outgoing::Copy(v) => v.len(),
            Outgoing::Lent(l) => l.bytes().len(),
        } as u64;
        let state = SendState::AwaitCts { dst, data };
        let make = |token| Msg::Rts {
            context,
            tag,
            len,
            token,
        };
        self.send_awaiting(dst, make, state)
    }

    /// Sends the message `make` builds around a fresh token, and keeps the
    /// send in `state` until the receiver answers with that token.
    fn send_awaiting<'a>(
        &mut self,
        dst: ProcessAddr,
        make: impl FnOnce(u32) -> Msg<'a>,
        state: SendState,
    ) -> Result<SendId, CollError> {
        let token = self.token();
        let mut msg = std::mem::take(&mut self.scratch);
        make(token).encode(&mut msg);
        self.send_system(dst, msg)?;
        let id = self.sends.insert(state);
        self.awaiting_cts.insert((dst, token), id);
        Ok(id)
    }

    /// Posts a receive for the next message from `src` under (`context`,
    /// `tag`).
    pub fn irecv(&mut self, src: ProcessAddr, context: u32, tag: u64) -> Result<RecvId, CollError> {
        Ok(self.irecv_matching(Pattern {
            context,
            from: Some(src),
            tag: Some(tag),
        }))
    }

    /// Posts a receive for the earliest message that matches `pattern` (see
    /// the module documentation for the order).
    pub fn irecv_matching(&mut self, pattern: Pattern) -> RecvId {
        self.irecv_with(pattern, None)
    }

    /// Takes back the data of a [`Received`] message its receiver is done
    /// with, to reuse for a later large message (memory handed back to
    /// the allocator would fault in every page again when it is reused).
    pub fn give_back(&mut self, data: Vec<u8>) {
        self.pool.give(data);
    }

    /// A receive buffer of type `B` that an earlier receive is done with,
    /// to refill and pass to [`Messenger::irecv_into`] again.
    pub fn spare_buffer<B: RecvBuffer>(&mut self) -> Option<Box<B>> {
        let b: Box<dyn std::any::Any> = self.spare_buffers.pop()?;
        b.downcast().ok()
    }

    /// Keeps a receive's buffer, done with, for [`Messenger::spare_buffer`].
    fn retire(&mut self, buffer: Option<Box<dyn RecvBuffer>>) {
        const KEPT: usize = 64;
        if let Some(b) = buffer.filter(|b| b.reusable() && self.spare_buffers.len() < KEPT) {
            self.spare_buffers.push(b);
        }
    }

    /// [`Messenger::irecv_matching`] with the buffer the message is to land
    /// in (the receive then completes as [`Incoming::Landed`], except for a
    /// message sent through a channel, which comes as data).
    pub fn irecv_into(&mut self, pattern: Pattern, buffer: Box<dyn RecvBuffer>) -> RecvId {
        self.irecv_with(pattern, Some(buffer))
    }

    fn irecv_with(&mut self, pattern: Pattern, buffer: Option<Box<dyn RecvBuffer>>) -> RecvId {
        if let Some(from) = pattern.from {
            self.watch(from);
            if !self.awaited.contains(&from) && from != self.local() {
                self.awaited.insert(from);
                let _ = self.ep.watch_peer(from, true);
            }
        }
        let seq = self.sequence();
        let id = self.recvs.insert(RecvState::Waiting(buffer));
        let arrival = match pattern.exact() {
            Some(key) => pop_first(&mut self.unexpected, &key, &mut self.spare_arrivals)
                .map(|(_, a)| (key, a)),
            None => self.earliest_unexpected(&pattern).and_then(|key| {
                let (_, a) = pop_first(&mut self.unexpected, &key, &mut self.spare_arrivals)?;
                Some((key, a))
            }),
        };
        match arrival {
            Some((key, a)) => {
                if let Err(e) = self.matched(id, key, a) {
                    *self.recvs.get_mut(id.0) = RecvState::Failed(e);
                }
            }
            None => match pattern.from.and_then(|f| self.peer_failure(f)) {
                Some(e) => *self.recvs.get_mut(id.0) = RecvState::Failed(e),
                None => match pattern.exact() {
                    Some(key) => self
                        .posted
                        .entry(key)
                        .or_insert_with(|| self.spare_posts.pop().unwrap_or_default())
                        .push_back((seq, id)),
                    None => self.wild.push((seq, pattern, id)),
                },
            },
        }
        id
    }

    /// The key of the earliest-arrived message that matches `pattern`.
    fn earliest_unexpected(&self, pattern: &Pattern) -> Option<Key> {
        self.unexpected
            .iter()
            .filter(|(key, _)| pattern.matches(key))
            .filter_map(|(key, q)| Some((q.front()?.0, *key)))
            .min()
            .map(|(_, key)| key)
    }

    /// A receive completed in the caller's buffer, without a posted
    /// receive: the earliest message matching `pattern` if it is small and
    /// here (already arrived, or at the head of the endpoint's queue), copied
    /// into `into` (as much as fits); a large one gets a posted receive
    /// ([`RecvNow::Posted`], then [`Messenger::take_received`]). One poll of
    /// the endpoint at most (busy-polling; none in blocking mode, where
    /// messages come with progress rounds); other messages it meets are
    /// handled as by [`Messenger::progress`]. The blocking receive's fast path: no
    /// allocation, no queue entry, one copy from the receive ring.
    ///
    /// Matching order holds: the message is taken only if no posted receive
    /// matches it (those were posted earlier).
    pub fn recv_now(&mut self, pattern: &Pattern, into: &mut [u8]) -> Result<RecvNow, CollError> {
        self.recv_now_or_lend(pattern, into, || None)
    }

    /// [`Messenger::recv_now`], and a large message that must be waited
    /// for goes into the buffer `lend` gives (the same memory as `into`,
    /// see [`RecvBuffer::lend`]), with no copy, instead of a pool buffer.
    pub fn recv_now_or_lend(
        &mut self,
        pattern: &Pattern,
        into: &mut [u8],
        lend: impl FnOnce() -> Option<Box<dyn RecvBuffer>>,
    ) -> Result<RecvNow, CollError> {
        if let Some(from) = pattern.from {
            self.watch(from);
        }
        let key = match pattern.exact() {
            _ if self.unexpected.is_empty() => None,
            Some(key) => self.unexpected.contains_key(&key).then_some(key),
            None => self.earliest_unexpected(pattern),
        };
        if let Some(key) = key {
            let (_, a) = pop_first(&mut self.unexpected, &key, &mut self.spare_arrivals)
                .expect("just found");
            let (data, ack) = match a {
                Arrival::Eager(data) => (data, None),
                Arrival::Sync { data, token } => (data, Some(token)),
                Arrival::Remote { region, token } if bcl_shm::cma::read(&region, into).is_ok() => {
                    self.stats.read_remote += 1;
                    self.acknowledge(key.1, Some(token))?;
                    return Ok(RecvNow::Got(Envelope {
                        from: key.1,
                        tag: key.2,
                        len: usize::try_from(region.len).unwrap_or(usize::MAX),
                    }));
                }
                other => {
                    // Large: a posted receive, whose matching reads the
                    // region or (if that failed here) asks the sender.
                    let id = self.recvs.insert(RecvState::Waiting(lend()));
                    if let Err(e) = self.matched(id, key, other) {
                        *self.recvs.get_mut(id.0) = RecvState::Failed(e);
                    }
                    return Ok(RecvNow::Posted(id));
                }
            };
            let len = data.len();
            copy_what_fits(into, &data);
            self.pool.give(data);
            self.acknowledge(key.1, ack)?;
            return Ok(RecvNow::Got(Envelope {
                from: key.1,
                tag: key.2,
                len,
            }));
        }
        if let Some(f) = pattern
            .from
            .filter(|f| !self.failed.is_empty() && self.failed.contains_key(f))
        {
            return Err(self.peer_failure(f).expect("failed"));
        }
        if self.ep.mode() == crate::endpoint::ProgressMode::Blocking {
            // Messages come through progress rounds; the next call finds
            // them among the arrived.
            return Ok(RecvNow::Nothing);
        }
        let (posted, wild) = (&self.posted, &self.wild);
        let (assembling, pool) = (&mut self.assembling, &mut self.pool);
        let ours = |key: &Key| {
            pattern.matches(key)
                && !posted.contains_key(key)
                && !wild.iter().any(|w| w.1.matches(key))
        };
        let polled = self
            .ep
            .poll_recv_with(|from, bytes| match Msg::parse(bytes) {
                Ok(Msg::Eager { context, tag, data }) if ours(&(context, from, tag)) => {
                    copy_what_fits(into, data);
                    (from, Polled::Taken(tag, data.len(), None))
                }
                Ok(Msg::Sync {
                    context,
                    tag,
                    token,
                    data,
                }) if ours(&(context, from, tag)) => {
                    copy_what_fits(into, data);
                    (from, Polled::Taken(tag, data.len(), Some(token)))
                }
                _ => (
                    from,
                    Polled::Other(Owned::parse(from, bytes, assembling, pool)),
                ),
            })?;
        match polled {
            Some((from, Polled::Taken(tag, len, ack))) => {
                self.acknowledge(from, ack)?;
                Ok(RecvNow::Got(Envelope { from, tag, len }))
            }
            Some((from, Polled::Other(m))) => {
                self.handle(from, m)?;
                Ok(RecvNow::Nothing)
            }
            None => Ok(RecvNow::Nothing),
        }
    }

    /// Answers a synchronous message's sender once it matched.
    fn acknowledge(&mut self, from: ProcessAddr, token: Option<u32>) -> Result<(), CollError> {
        let Some(token) = token else {
            return Ok(());
        };
        if from == self.local() {
            return self.cleared(from, token, ChannelId(super::wire::NO_CHANNEL));
        }
        let mut msg = std::mem::take(&mut self.scratch);
        Msg::Cts {
            token,
            channel: super::wire::NO_CHANNEL,
        }
        .encode(&mut msg);
        self.send_system(from, msg)
    }

    /// The earliest-arrived message matching `pattern` that no receive has
    /// taken yet, without taking it (MPI's probe).
    pub fn probe(&self, pattern: &Pattern) -> Option<Envelope> {
        let key = match pattern.exact() {
            Some(key) => key,
            None => self.earliest_unexpected(pattern)?,
        };
        let (_, a) = self.unexpected.get(&key)?.front()?;
        Some(Envelope {
            from: key.1,
            tag: key.2,
            len: a.len(),
        })
    }

    /// Withdraws a receive nothing matched yet; false (and nothing done) if
    /// a message already matched it.
    pub fn cancel_recv(&mut self, id: RecvId) -> bool {
        if !matches!(self.recvs.try_get(id.0), Some(RecvState::Waiting(_))) {
            return false;
        }
        if let Some(i) = self.wild.iter().position(|w| w.2 == id) {
            self.wild.remove(i);
        } else {
            let key = self
                .posted
                .iter()
                .find(|(_, q)| q.iter().any(|p| p.1 == id))
                .map(|(k, _)| *k);
            if let Some(key) = key {
                let q = self.posted.get_mut(&key).expect("just found");
                q.retain(|p| p.1 != id);
                if q.is_empty() {
                    self.posted.remove(&key);
                }
            }
        }
        self.recvs.remove(id.0);
        true
    }

    /// The next sequence number.
    fn sequence(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The message of a completed receive (and forgets the receive), or
    /// `None` while it is not complete.
    pub fn take_recv(&mut self, id: RecvId) -> Option<Result<Vec<u8>, CollError>> {
        self.take_received(id).map(|r| r.map(|r| r.data))
    }

    /// The message of a completed receive with its sender and tag (and
    /// forgets the receive), or `None` while it is not complete. For a
    /// receive with its own buffer, a message that landed there comes back
    /// as a copy ([`Messenger::take_incoming`] avoids it).
    pub fn take_received(&mut self, id: RecvId) -> Option<Result<Received, CollError>> {
        if matches!(self.recvs.try_get(id.0), Some(RecvState::Landed(_))) {
            return Some(Err(CollError::Invalid(
                "the message landed in the receive's own buffer: use take_incoming".into(),
            )));
        }
        Some(match self.take_incoming(id)? {
            Ok(Incoming::Data(r)) => Ok(r),
            Ok(Incoming::Landed(_)) => unreachable!("checked above"),
            Err(e) => Err(e),
        })
    }

    /// What completed receive `id` got (and forgets the receive), or
    /// `None` while it is not complete.
    pub fn take_incoming(&mut self, id: RecvId) -> Option<Result<Incoming, CollError>> {
        let Some(state) = self.recvs.try_get(id.0) else {
            return Some(Err(CollError::NoSuchRequest));
        };
        match state {
            RecvState::Done(_) | RecvState::Failed(_) | RecvState::Landed(_) => {
                match self.recvs.remove(id.0) {
                    RecvState::Done(r) => Some(Ok(Incoming::Data(r))),
                    RecvState::Landed(e) => Some(Ok(Incoming::Landed(e))),
                    RecvState::Failed(e) => Some(Err(e)),
                    _ => unreachable!("checked above"),
                }
            }
            _ => None,
        }
    }

    /// The error of a peer whose sends failed, if `peer` is one.
    pub(crate) fn peer_failure(&self, peer: ProcessAddr) -> Option<CollError> {
        self.failed.get(&peer).map(|why| peer_failed(peer, why))
    }

    /// How many peers have been declared failed so far (it only grows).
    pub(crate) fn failure_count(&self) -> u64 {
        self.failures
    }

    /// The failure of the first of `peers` that failed (and is not back),
    /// if any; one comparison while no peer is failed.
    pub(crate) fn first_failure(&self, peers: &[ProcessAddr]) -> Option<CollError> {
        if self.failed.is_empty() {
            return None;
        }
        peers.iter().find_map(|&p| self.peer_failure(p))
    }

    /// Agree-and-shrink number `instance` on collective context `ctx` has
    /// returned: its messages still waiting for a receive, and any that
    /// come later, are dropped (see [`SHRINK_TAG`]).
    pub(crate) fn shrink_done(&mut self, ctx: u32, instance: u32) {
        let done = self.shrinks_done.entry(ctx).or_insert(instance);
        *done = (*done).max(instance);
        let keys: Vec<Key> = self
            .unexpected
            .keys()
            .filter(|&&k| k.0 == ctx && self.shrink_is_done(k))
            .copied()
            .collect();
        for k in keys {
            if let Some(q) = self.unexpected.remove(&k) {
                self.stats.late_shrink_dropped += q.len() as u64;
            }
        }
    }

    /// Whether `peer` is taken as failed now (operations with it fail at
    /// once); a frame from it after that makes it usable again.
    pub fn peer_failed(&self, peer: ProcessAddr) -> bool {
        self.failed.contains_key(&peer)
    }

    /// Messages that arrived and wait for a receive.
    pub fn unexpected_waiting(&self) -> usize {
        self.unexpected.values().map(VecDeque::len).sum()
    }

    /// Whether `key` is a message of an agree-and-shrink that returned.
    fn shrink_is_done(&self, key: Key) -> bool {
        key.2 & SHRINK_TAG != 0
            && self
                .shrinks_done
                .get(&key.0)
                .is_some_and(|&done| ((key.2 >> 32) as u32 & !(1 << 31)) <= done)
    }

    /// Takes the failure notices received so far (see [`NOTICE_TAG`]).
    pub(crate) fn take_notices(&mut self) -> Vec<(u32, ProcessAddr, Vec<u8>)> {
        std::mem::take(&mut self.notices)
    }

    /// Whether failure notices wait to be taken.
    pub(crate) fn has_notices(&self) -> bool {
        !self.notices.is_empty()
    }

    /// Whether a send is complete (and forgets it), `None` while not.
    pub fn take_send(&mut self, id: SendId) -> Option<Result<(), CollError>> {
        if id == SendId::COMPLETE {
            return Some(Ok(()));
        }
        let Some(state) = self.sends.try_get(id.0) else {
            return Some(Err(CollError::NoSuchRequest));
        };
        match state {
            SendState::Done | SendState::Failed(_) => match self.sends.remove(id.0) {
                SendState::Failed(e) => Some(Err(e)),
                _ => Some(Ok(())),
            },
            _ => None,
        }
    }

    /// One round of progress: the endpoint's, then every message, send
    /// event and channel event it produced. Returns the endpoint's count of
    /// frames moved plus the messages handled.
    ///
    /// Busy-polling, it takes messages by the endpoint's shortest receive
    /// path ([`Endpoint::poll_recv_with`]: a direct method's queue read in
    /// place, with a full progress round every few calls) rather than a
    /// full round each time.
    pub fn progress(&mut self) -> Result<usize, CollError> {
        if self.ep.mode() == crate::endpoint::ProgressMode::Blocking {
            let mut moved = self.ep.progress()?;
            moved += self.drain()?;
            return Ok(moved);
        }
        let mut moved = 0;
        let rounds = self.ep.engine_stats().rounds;
        for _ in 0..RX_BUDGET {
            let (assembling, pool) = (&mut self.assembling, &mut self.pool);
            match self
                .ep
                .poll_recv_with(|from, bytes| (from, Owned::parse(from, bytes, assembling, pool)))?
            {
                Some((from, m)) => {
                    moved += 1;
                    self.handle(from, m)?;
                }
                None => break,
            }
        }
        // A call that met nothing and ran no endpoint round (a quick poll
        // of a direct queue) left nothing new to drain: the events of
        // sends made meanwhile wait for the next round. An idle polling
        // loop is that much shorter, and so is the wait for an arrival.
        if moved == 0 && self.ep.engine_stats().rounds == rounds && self.backlog.is_empty() {
            return Ok(0);
        }
        moved += self.drain()?;
        Ok(moved)
    }

    /// Whether receive `id` is posted and unmatched (a cheap check before
    /// [`Messenger::take_received`] in a polling loop).
    pub fn is_waiting(&self, id: RecvId) -> bool {
        matches!(self.recvs.try_get(id.0), Some(RecvState::Waiting(_)))
    }

    /// One full progress round of the endpoint (every method and timer),
    /// then every message and event it produced.
    pub fn progress_full(&mut self) -> Result<usize, CollError> {
        let moved = self.ep.progress()?;
        Ok(moved + self.drain()?)
    }

    /// Acts on one received message.
    fn handle(&mut self, from: ProcessAddr, m: Owned) -> Result<(), CollError> {
        match m {
            Owned::Eager { context, tag, data } => {
                self.arrive((context, from, tag), Arrival::Eager(data))
            }
            Owned::Rts {
                context,
                tag,
                len,
                token,
            } => self.arrive((context, from, tag), Arrival::Rts { len, token }),
            Owned::Sync {
                context,
                tag,
                token,
                data,
            } => self.arrive((context, from, tag), Arrival::Sync { data, token }),
            Owned::RtsRemote {
                context,
                tag,
                token,
                region,
            } => self.arrive((context, from, tag), Arrival::Remote { region, token }),
            Owned::Cts { token, channel } => self.cleared(from, token, channel)?,
            Owned::Malformed => self.stats.malformed += 1,
            Owned::Nothing => {}
        }
        Ok(())
    }

    /// Sleeps until the endpoint has something to do or `until` (blocking
    /// mode; returns at once when busy-polling), then makes progress.
    pub fn progress_or_wait(&mut self, until: Option<bcl_core::Time>) -> Result<usize, CollError> {
        if self.ep.mode() == crate::endpoint::ProgressMode::BusyPoll {
            return self.progress();
        }
        let mut moved = self.ep.progress_or_wait(until)?;
        moved += self.drain()?;
        Ok(moved)
    }

    /// Progress for an event loop that waits on the endpoint's descriptor
    /// ([`Endpoint::service`], whose contract this keeps): the endpoint's
    /// rounds, every message and event they produced, and again while
    /// handling them made work (answers, clear-to-sends); the descriptor is
    /// then armed for what comes next.
    pub fn service(&mut self) -> Result<usize, CollError> {
        let mut moved = 0;
        loop {
            moved += self.ep.service()?;
            let handled = self.drain()?;
            moved += handled;
            if handled == 0 {
                return Ok(moved);
            }
        }
    }

    /// Handles every delivered message and every event of the endpoint.
    fn drain(&mut self) -> Result<usize, CollError> {
        if !self.awaited.is_empty() {
            self.trim_awaited();
        }
        let mut moved = 0;
        while let Some(d) = self.ep.poll_delivery() {
            moved += 1;
            let bytes = self.ep.message(&d).unwrap_or_default();
            let m = Owned::parse(d.from, bytes, &mut self.assembling, &mut self.pool);
            self.ep.release(d)?;
            self.handle(d.from, m)?;
        }
        while let Some(ev) = self.ep.poll_send_event() {
            if let SendEvent::Failed(_, why) = ev {
                self.peer_down(why.peer(), why.to_string());
            }
        }
        while let Some(ev) = self.ep.poll_peer_event() {
            match ev {
                PeerEvent::Down(p) => {
                    if !self.failed.contains_key(&p) {
                        self.peer_down(p, "its process is gone or silent".into());
                    }
                }
                // What was pending with it has failed already (above, or
                // when it went down); new operations may use it again.
                PeerEvent::Up(p) | PeerEvent::Restarted(p) => {
                    self.failed.remove(&p);
                }
            }
        }
        while let Some(ev) = self.ep.poll_channel_event() {
            moved += 1;
            self.channel_event(ev);
        }
        while let Some((dst, msg)) = self.backlog.pop_front() {
            match self.ep.send(dst, &msg) {
                Ok(_) => self.scratch = msg,
                Err(Error::Send(bcl_core::port::SendError::WouldBlock(_))) => {
                    self.backlog.push_front((dst, msg));
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(moved)
    }

    /// Makes sure this process's link to `peer` exists (a `HELLO` the
    /// first time), so that a receive waiting for it learns if it dies:
    /// a method reports the death of a peer it has a link with, and a
    /// network link fails when the peer stops acknowledging.
    /// Whether a posted receive waits for `peer` (it is marked critical in
    /// the port for that).
    pub(crate) fn awaits(&self, peer: ProcessAddr) -> bool {
        self.awaited.contains(&peer)
    }

    /// Unmarks the peers no posted receive waits for any more: at once
    /// when none waits at all, else every 1024 drains (a scan of the
    /// posted receives).
    fn trim_awaited(&mut self) {
        self.drains_since_trim += 1;
        let none_posted = self.posted.is_empty() && self.wild.is_empty();
        if !none_posted && self.drains_since_trim < 1024 {
            return;
        }
        self.drains_since_trim = 0;
        let (posted, wild) = (&self.posted, &self.wild);
        let ep = &mut self.ep;
        self.awaited.retain(|&peer| {
            let waited_for =
                posted.keys().any(|k| k.1 == peer) || wild.iter().any(|w| w.1.from == Some(peer));
            if !waited_for {
                let _ = ep.watch_peer(peer, false);
            }
            waited_for
        });
    }

    fn watch(&mut self, peer: ProcessAddr) {
        if self.last_contacted == Some(peer)
            || peer == self.local()
            || self.contacted.contains(&peer)
            || self.failed.contains_key(&peer)
        {
            return;
        }
        let mut msg = std::mem::take(&mut self.scratch);
        Msg::Hello.encode(&mut msg);
        // A failure shows up as the peer's failure, like any send's.
        let _ = self.send_system(peer, msg);
    }

    /// Sends a system-channel message, or keeps it until the port has
    /// room.
    fn send_system(&mut self, dst: ProcessAddr, msg: Vec<u8>) -> Result<(), CollError> {
        if self.last_contacted != Some(dst) {
            self.contacted.insert(dst);
            self.last_contacted = Some(dst);
        }
        if !self.backlog.is_empty() {
            self.backlog.push_back((dst, msg));
            return Ok(());
        }
        match self.ep.send(dst, &msg) {
            Ok(_) => {
                self.scratch = msg;
                Ok(())
            }
            Err(Error::Send(bcl_core::port::SendError::WouldBlock(_))) => {
                self.backlog.push_back((dst, msg));
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A message (or a large message's request) came.
    fn arrive(&mut self, key: Key, a: Arrival) {
        let exact = self.posted.get(&key).and_then(|q| q.front()).map(|p| p.0);
        let wild = self.wild.iter().position(|w| w.1.matches(&key));
        let posted = match (exact, wild) {
            (Some(e), Some(w)) if self.wild[w].0 < e => Some(self.wild.remove(w).2),
            (Some(_), _) => pop_first(&mut self.posted, &key, &mut self.spare_posts).map(|p| p.1),
            (None, Some(w)) => Some(self.wild.remove(w).2),
            (None, None) => None,
        };
        match posted {
            Some(id) => {
                if let Err(e) = self.matched(id, key, a) {
                    *self.recvs.get_mut(id.0) = RecvState::Failed(e);
                }
            }
            // A failure notice is never received by a posted receive: it
            // is set aside for the collectives' runtime.
            None if key.2 & NOTICE_TAG != 0 && key.0 & 1 == 1 => {
                if let Arrival::Eager(data) = a {
                    self.notices.push((key.0, key.1, data));
                }
            }
            None if matches!(a, Arrival::Eager(_)) && self.shrink_is_done(key) => {
                self.stats.late_shrink_dropped += 1;
            }
            None => {
                self.stats.unexpected += 1;
                let seq = self.sequence();
                self.unexpected
                    .entry(key)
                    .or_insert_with(|| self.spare_arrivals.pop().unwrap_or_default())
                    .push_back((seq, a));
            }
        }
    }

    /// Receive `id` matched `a`, sent under `key`.
    fn matched(&mut self, id: RecvId, key: Key, a: Arrival) -> Result<(), CollError> {
        let (from, tag) = (key.1, key.2);
        let mut buffer = match std::mem::replace(self.recvs.get_mut(id.0), RecvState::Waiting(None))
        {
            RecvState::Waiting(b) => b,
            _ => None,
        };
        let landed = |len| RecvState::Landed(Envelope { from, tag, len });
        let ack = match &a {
            Arrival::Sync { token, .. } => Some(*token),
            _ => None,
        };
        match a {
            Arrival::Eager(data) | Arrival::Sync { data, .. } if buffer.is_some() => {
                copy_what_fits(buffer.as_mut().expect("checked").bytes(), &data);
                *self.recvs.get_mut(id.0) = landed(data.len());
                self.pool.give(data);
                self.retire(buffer);
                self.acknowledge(from, ack)?;
            }
            Arrival::Eager(data) => {
                *self.recvs.get_mut(id.0) = RecvState::Done(Received { from, tag, data })
            }
            Arrival::Sync { data, token } => {
                *self.recvs.get_mut(id.0) = RecvState::Done(Received { from, tag, data });
                self.acknowledge(from, Some(token))?;
            }
            Arrival::Remote { region, token } => {
                let len = usize::try_from(region.len).unwrap_or(usize::MAX);
                if len > MAX_MESSAGE {
                    return self.matched(id, key, Arrival::Rts { len, token });
                }
                // Read now (progress must not wait for the receiver to ask:
                // its sender waits for the word that it was read), into
                // the receive's buffer if it has one.
                let read = match buffer.as_mut() {
                    Some(b) => bcl_shm::cma::read(&region, b.bytes()).map(|_| landed(len)),
                    None => {
                        let mut data = self.pool.take(len);
                        bcl_shm::cma::read(&region, &mut data)
                            .map(|_| RecvState::Done(Received { from, tag, data }))
                    }
                };
                match read {
                    Ok(state) => {
                        self.stats.read_remote += 1;
                        *self.recvs.get_mut(id.0) = state;
                        self.retire(buffer);
                        self.acknowledge(from, Some(token))?;
                    }
                    // Not readable from here: the sender sends it.
                    Err(_) => return self.matched(id, key, Arrival::Rts { len, token }),
                }
            }
            Arrival::Rts { len, .. } if len > MAX_MESSAGE => {
                // A length no sender of ours announces (corrupted, or
                // another build's): fail the receive instead of trying to
                // allocate it.
                return Err(CollError::Invalid(format!(
                    "{from} announced a message of {len} bytes, above the {MAX_MESSAGE}-byte limit"
                )));
            }
            Arrival::Rts { len, token } => {
                let ch = match self.free_channels.pop() {
                    Some(c) => c,
                    None => self.ep.open_normal_channel().map_err(|e| {
                        CollError::Invalid(format!("no channel for a large message: {e}"))
                    })?,
                };
                // The receive's own memory when it can be lent and holds
                // the whole message (a shorter one gets what fits, copied).
                let lent = match buffer.as_mut() {
                    Some(b) => {
                        let fits = b.bytes().len() >= len;
                        fits.then(|| b.lend()).flatten()
                    }
                    None => None,
                };
                let is_lent = lent.is_some();
                self.stats.lent_received += u64::from(is_lent);
                match lent {
                    Some(l) => self.ep.post_lent(ch, Some(from), l),
                    None => self.ep.post(ch, Some(from), self.pool.take(len)),
                }
                .map_err(|r| CollError::Invalid(format!("posting a buffer: {}", r.error)))?;
                self.channel_recvs.insert(ch, id);
                *self.recvs.get_mut(id.0) = RecvState::OnChannel {
                    from,
                    tag,
                    buffer,
                    channel: ch,
                    lent: is_lent,
                };
                let mut msg = std::mem::take(&mut self.scratch);
                Msg::Cts {
                    token,
                    channel: ch.0,
                }
                .encode(&mut msg);
                self.send_system(from, msg)?;
            }
        }
        Ok(())
    }

    /// The receiver of large message `token` posted its buffer on `ch`.
    fn cleared(&mut self, from: ProcessAddr, token: u32, ch: ChannelId) -> Result<(), CollError> {
        let Some(id) = self.awaiting_cts.remove(&(from, token)) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        if let SendState::AwaitRead { dst } = *self.sends.get(id.0) {
            *self.sends.get_mut(id.0) = if ch.0 == super::wire::NO_CHANNEL {
                SendState::Done
            } else {
                SendState::NeedsData { dst, channel: ch }
            };
            return Ok(());
        }
        if ch.0 == super::wire::NO_CHANNEL {
            // A synchronous message matched: nothing more to send.
            *self.sends.get_mut(id.0) = SendState::Done;
            return Ok(());
        }
        let state = std::mem::replace(
            self.sends.get_mut(id.0),
            SendState::OnChannel {
                dst: from,
                lent: false,
            },
        );
        let SendState::AwaitCts { dst, data } = state else {
            *self.sends.get_mut(id.0) = state;
            return Ok(());
        };
        self.send_on_channel(id, dst, ch, data);
        Ok(())
    }

    fn channel_event(&mut self, ev: ChannelEvent) {
        match ev {
            ChannelEvent::SendDone { handle, buffer } => {
                self.pool.give(buffer);
                if let Some(id) = self.channel_sends.remove(&handle) {
                    *self.sends.get_mut(id.0) = SendState::Done;
                }
            }
            ChannelEvent::SendFailed { handle, error, .. } => {
                if let Some(id) = self.channel_sends.remove(&handle) {
                    let dst = match self.sends.get(id.0) {
                        SendState::OnChannel { dst, .. } => *dst,
                        _ => self.local(),
                    };
                    *self.sends.get_mut(id.0) =
                        SendState::Failed(peer_failed(dst, &error.to_string()));
                }
            }
            ChannelEvent::Received {
                channel,
                mut buffer,
                len,
                ..
            } => {
                if let Some(id) = self.channel_recvs.remove(&channel) {
                    buffer.truncate(len);
                    let state =
                        std::mem::replace(self.recvs.get_mut(id.0), RecvState::Waiting(None));
                    *self.recvs.get_mut(id.0) = match state {
                        // Written where it belongs as it arrived.
                        RecvState::OnChannel {
                            from,
                            tag,
                            buffer,
                            lent: true,
                            ..
                        } => {
                            self.retire(buffer);
                            RecvState::Landed(Envelope { from, tag, len })
                        }
                        // Into the receive's own buffer; the channel's
                        // buffer goes back to the pool, so the next large
                        // message does not fault in fresh pages.
                        RecvState::OnChannel {
                            from,
                            tag,
                            buffer: Some(mut into),
                            ..
                        } => {
                            copy_what_fits(into.bytes(), &buffer);
                            self.pool.give(buffer);
                            self.retire(Some(into));
                            RecvState::Landed(Envelope { from, tag, len })
                        }
                        RecvState::OnChannel {
                            from,
                            tag,
                            buffer: None,
                            ..
                        } => RecvState::Done(Received {
                            from,
                            tag,
                            data: buffer,
                        }),
                        other => {
                            self.pool.give(buffer);
                            other
                        }
                    };
                    self.free_channels.push(channel);
                }
            }
            // A failure that left the buffer posted lets the sender retry
            // the transfer; one that took it down ends the receive.
            ChannelEvent::ReceiveFailed {
                channel,
                from,
                error,
                buffer: Some(_),
            } => {
                if let Some(id) = self.channel_recvs.remove(&channel) {
                    *self.recvs.get_mut(id.0) =
                        RecvState::Failed(peer_failed(from, &error.to_string()));
                    self.free_channels.push(channel);
                }
            }
            _ => {}
        }
    }

    /// Fails everything that involves `peer`.
    fn peer_down(&mut self, peer: ProcessAddr, why: String) {
        if let Some(a) = self.assembling.remove(&peer) {
            self.pool.give(a.buf);
        }
        let (failing, waiting) = std::mem::take(&mut self.wild)
            .into_iter()
            .partition(|w| w.1.from == Some(peer));
        self.wild = waiting;
        for (_, _, id) in failing {
            *self.recvs.get_mut(id.0) = RecvState::Failed(peer_failed(peer, &why));
        }
        for (key, q) in std::mem::take(&mut self.posted) {
            if key.1 == peer {
                for (_, id) in q {
                    *self.recvs.get_mut(id.0) = RecvState::Failed(peer_failed(peer, &why));
                }
            } else {
                self.posted.insert(key, q);
            }
        }
        let mut lent_posts = Vec::new();
        for state in self.recvs.iter_mut() {
            if let RecvState::OnChannel {
                from,
                channel,
                lent,
                ..
            } = state
            {
                if *from == peer {
                    if *lent {
                        lent_posts.push(*channel);
                    }
                    *state = RecvState::Failed(peer_failed(peer, &why));
                }
            }
        }
        // The port gives lent memory back before the receive ends (its
        // owner may free it then): a late frame must not write there.
        for ch in lent_posts {
            if self.ep.cancel_post(ch).is_ok() {
                self.channel_recvs.remove(&ch);
                self.free_channels.push(ch);
            }
        }
        for state in self.sends.iter_mut() {
            // A send from lent memory ends only with the port's own event:
            // the port reads that memory until then.
            if matches!(state, SendState::AwaitCts { dst, .. } | SendState::OnChannel { dst, lent: false } | SendState::AwaitRead { dst } | SendState::NeedsData { dst, .. } if *dst == peer)
            {
                *state = SendState::Failed(peer_failed(peer, &why));
            }
        }
        self.failed.insert(peer, why);
        self.failures += 1;
    }
}

/// Copies `data` into `into`, cut to `into`'s length (a receive reports
/// the whole length; the caller decides whether that is truncation).
fn copy_what_fits(into: &mut [u8], data: &[u8]) {
    let n = data.len().min(into.len());
    into[..n].copy_from_slice(&data[..n]);
}

/// The first entry queued under `key`; a queue left empty is removed, so
/// the maps hold only keys with something waiting, and kept in `spare`
/// for the next key (a queue allocates on its first push: reusing one
/// saves an allocation per message).
fn pop_first<T>(
    map: &mut HashMap<Key, VecDeque<T>>,
    key: &Key,
    spare: &mut Vec<VecDeque<T>>,
) -> Option<T> {
    let q = map.get_mut(key)?;
    let first = q.pop_front();
    if q.is_empty() {
        if let Some(q) = map.remove(key) {
            if spare.len() < SPARE_QUEUES {
                spare.push(q);
            }
        }
    }
    first
}

/// The tag bit of a failure notice on a collective context: a member
/// telling the others that a member failed during a collective, so that
/// members waiting on live ones learn it too (see `coll::notice`). Below
/// the shrink's bit (63); collectives' tags are their sequence numbers.
pub(crate) const NOTICE_TAG: u64 = 1 << 62;

/// The tag bit of agree-and-shrink messages on a collective context (see
/// `coll::shrink`): the shrink's number on the communicator in bits 32–62
/// (below this bit), the round in bits 0–31.
pub(crate) const SHRINK_TAG: u64 = 1 << 63;

/// Empty queues kept for reuse, per map.
const SPARE_QUEUES: usize = 64;

fn peer_failed(peer: ProcessAddr, why: &str) -> CollError {
    CollError::PeerFailed {
        peer,
        rank: None,
        why: why.to_string(),
    }
}

/// Entries by index, with reuse of freed indices.
#[derive(Debug)]
struct Slab<T> {
    entries: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    fn insert<I: From<usize>>(&mut self, v: T) -> I {
        match self.free.pop() {
            Some(i) => {
                self.entries[i] = Some(v);
                I::from(i)
            }
            None => {
                self.entries.push(Some(v));
                I::from(self.entries.len() - 1)
            }
        }
    }

    fn get(&self, i: usize) -> &T {
        self.entries[i].as_ref().expect("live entry")
    }

    fn try_get(&self, i: usize) -> Option<&T> {
        self.entries.get(i).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, i: usize) -> &mut T {
        self.entries[i].as_mut().expect("live entry")
    }

    fn remove(&mut self, i: usize) -> T {
        self.free.push(i);
        self.entries[i].take().expect("live entry")
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().flatten()
    }
}

impl From<usize> for RecvId {
    fn from(i: usize) -> Self {
        RecvId(i)
    }
}

impl From<usize> for SendId {
    fn from(i: usize) -> Self {
        SendId(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(context: u32, tag: u64, total: u64, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        Msg::Fragment {
            context,
            tag,
            total,
            offset,
            data,
        }
        .encode(&mut v);
        v
    }

    fn parse(from: ProcessAddr, bytes: &[u8], asm: &mut HashMap<ProcessAddr, Assembly>) -> Owned {
        Owned::parse(from, bytes, asm, &mut super::super::pool::Pool::default())
    }

    #[test]
    fn pieces_in_order_make_the_message() {
        let (a, b) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
        let mut asm = HashMap::default();
        // Two senders interleaved: each sender's pieces are its own.
        assert!(matches!(
            parse(a, &piece(1, 2, 6, 0, b"abc"), &mut asm),
            Owned::Nothing
        ));
        assert!(matches!(
            parse(b, &piece(1, 2, 4, 0, b"wx"), &mut asm),
            Owned::Nothing
        ));
        match parse(a, &piece(1, 2, 6, 3, b"def"), &mut asm) {
            Owned::Eager { context, tag, data } => {
                assert_eq!((context, tag, data.as_slice()), (1, 2, &b"abcdef"[..]))
            }
            _ => panic!("a's message is whole"),
        }
        assert!(matches!(
            parse(b, &piece(1, 2, 4, 2, b"yz"), &mut asm),
            Owned::Eager { .. }
        ));
        assert!(asm.is_empty());
    }

    #[test]
    fn pieces_out_of_place_are_dropped_and_counted() {
        let a = ProcessAddr::new(1, 0);
        let mut asm = HashMap::default();
        // A gap, a piece past the end, a piece of another message, a
        // length beyond the limit, a piece with no first piece.
        parse(a, &piece(1, 2, 6, 0, b"ab"), &mut asm);
        assert!(matches!(
            parse(a, &piece(1, 2, 6, 3, b"d"), &mut asm),
            Owned::Malformed
        ));
        assert!(asm.is_empty());
        parse(a, &piece(1, 2, 6, 0, b"ab"), &mut asm);
        assert!(matches!(
            parse(a, &piece(1, 2, 6, 2, b"cdefg"), &mut asm),
            Owned::Malformed
        ));
        parse(a, &piece(1, 2, 6, 0, b"ab"), &mut asm);
        assert!(matches!(
            parse(a, &piece(1, 3, 6, 2, b"cd"), &mut asm),
            Owned::Malformed
        ));
        let too_big = FRAGMENT_LIMIT as u64 + 1;
        assert!(matches!(
            parse(a, &piece(1, 2, too_big, 0, b"ab"), &mut asm),
            Owned::Malformed
        ));
        assert!(matches!(
            parse(a, &piece(1, 2, 6, 2, b"cd"), &mut asm),
            Owned::Malformed
        ));
        assert!(asm.is_empty());
    }
}
