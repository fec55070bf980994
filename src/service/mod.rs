//! Remote service requests (Nexus's RSRs, active messages) in the engine:
//! a request names a handler registered under an id at the receiving
//! endpoint, which runs it on the request's payload and answers; the
//! requester gets the answer as a [`Completion`]. The calls are on
//! [`Endpoint`](crate::Endpoint): [`register_handler`], [`rsr`],
//! [`poll_rsr_completion`] (see [`api`]).
//!
//! Requests and answers are *service messages*
//! ([`FrameType::Service`](bcl_core::wire::FrameType::Service)): ordered
//! with the system channel's messages to the same peer, but never in the
//! application's receive queue. Every receive path of the endpoint hands
//! them to this layer — a progress round, and the in-place path of
//! [`Endpoint::poll_recv_with`](crate::Endpoint::poll_recv_with), where a
//! direct method's message is read in its receive slot. Each carries a
//! 12-byte header (`src/service/wire.rs`).
//!
//! Two kinds of handler, as in Nexus:
//!
//! - **Inline** ([`register_handler`]) runs inside progress, in arrival
//!   order, on the payload where it arrived (a direct method's receive
//!   slot, or the port's receive ring: no copy), and writes its reply into
//!   the outgoing message ([`Reply`]). It holds up every other request and
//!   all of the endpoint's traffic while it runs, so it must be short: a
//!   few microseconds (a lookup, an update, a copy), never a wait.
//! - **Threaded** ([`register_threaded_handler`]) runs on a pool of worker
//!   threads ([`set_rsr_workers`], 2 by default) and may block. It gets its
//!   own copy of the payload. The requests of one sender to one handler
//!   run one at a time, in the order sent, as inline ones do; other pairs'
//!   run beside them, and answers leave as they finish. A worker that
//!   finishes signals an eventfd the endpoint waits on too, so an endpoint
//!   asleep (or an event loop on its descriptor) wakes to send the answer.
//!
//! **Large payloads** — a request or reply above what one service message
//! carries (the port's eager limit less the header) — ride a normal
//! channel: the sender announces the length, the receiver posts a buffer
//! on a channel of its own and names it, and the payload goes there
//! (rendezvous, straight into the buffer). Requests from one sender are
//! still taken in the order it sent them: what comes from that sender after
//! a large request waits (copied) until its payload is in.
//!
//! A request to an id nobody registered gets [`RsrError::UnknownHandler`]
//! back, and a handler that panics [`RsrError::HandlerPanicked`] with the
//! panic's message; the receiving endpoint goes on either way. A request to
//! a peer that becomes unreachable (its method reports it gone, or the
//! request's frames go unacknowledged) completes with
//! [`RsrError::Failed`].
//!
//! Memory: a pending request costs a slot of 16 bytes in a table indexed by
//! its number (a hash map entry once it is old); the payload is not kept
//! once sent (a large one until its receiver takes it).
//!
//! ```
//! use bcl::SimCluster;
//!
//! let mut c = SimCluster::new(2, Default::default(), 1, 1500, |_, _| {}).unwrap();
//! let server = SimCluster::addr(1);
//! // Handler 7 at the server answers with the payload reversed.
//! c.endpoints[1]
//!     .register_handler(7, |_, payload, reply| {
//!         reply.extend_from_slice(&payload.iter().rev().copied().collect::<Vec<_>>())
//!     })
//!     .unwrap();
//! let request = c.endpoints[0].rsr(server, 7, b"abc").unwrap();
//! let done = loop {
//!     c.step().unwrap();
//!     if let Some(done) = c.endpoints[0].poll_rsr_completion() {
//!         break done;
//!     }
//! };
//! assert_eq!(done.request, request);
//! assert_eq!(done.result.unwrap(), b"cba");
//! ```
//!
//! [`register_handler`]: crate::Endpoint::register_handler
//! [`register_threaded_handler`]: crate::Endpoint::register_threaded_handler
//! [`set_rsr_workers`]: crate::Endpoint::set_rsr_workers
//! [`rsr`]: crate::Endpoint::rsr
//! [`poll_rsr_completion`]: crate::Endpoint::poll_rsr_completion

pub mod api;
mod pending;
mod pool;
pub(crate) mod wire;

use bcl_core::{ChannelId, ProcessAddr, SendHandle};
use pending::PendingTable;
use pool::{Answer, Job, Pool};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use wire::{Kind, ServiceHeader, HEADER_LEN};

/// Largest handler id.
pub const MAX_HANDLER_ID: u32 = (1 << 30) - 1;

/// Largest large payload a receiver takes by default (see
/// [`Endpoint::set_rsr_max_payload`](crate::Endpoint::set_rsr_max_payload)).
pub const DEFAULT_MAX_PAYLOAD: u64 = 1 << 30;

/// Error codes in the first byte of an error reply's body (the rest is a
/// UTF-8 message).
pub(crate) const ERROR_UNKNOWN_HANDLER: u8 = 1;
pub(crate) const ERROR_PANICKED: u8 = 2;
pub(crate) const ERROR_REFUSED: u8 = 3;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RsrError {
    /// The peer has no handler under this id.
    #[error("peer {peer} has no handler {handler}")]
    UnknownHandler {
        /// The peer.
        peer: ProcessAddr,
        /// The id asked for.
        handler: u32,
    },
    /// The handler panicked; the message is the panic's.
    #[error("handler {handler} at {peer} panicked: {message}")]
    HandlerPanicked {
        /// The peer.
        peer: ProcessAddr,
        /// The handler.
        handler: u32,
        /// The panic's message.
        message: String,
    },
    /// The request or its reply could not be delivered.
    #[error("request to handler {handler} at {peer} failed: {why}")]
    Failed {
        /// The peer.
        peer: ProcessAddr,
        /// The handler.
        handler: u32,
        /// What went wrong.
        why: String,
    },
    /// The peer's answer could not be read (a malformed error reply).
    #[error("malformed answer from {peer} to a request to handler {handler}")]
    Malformed {
        /// The peer.
        peer: ProcessAddr,
        /// The handler.
        handler: u32,
    },
}

/// A request this process made, as [`Endpoint::rsr`](crate::Endpoint::rsr)
/// returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    /// The peer asked.
    pub peer: ProcessAddr,
    /// Its number among this process's requests (wrapping).
    pub number: u32,
}

/// A request's outcome.
#[derive(Debug, PartialEq, Eq)]
pub struct Completion {
    /// The request.
    pub request: RequestId,
    /// The handler's answer, or why there is none.
    pub result: Result<Vec<u8>, RsrError>,
}

/// Where an inline handler writes its reply: the outgoing message, after
/// its header. Implements [`std::io::Write`] too.
pub struct Reply<'a> {
    message: &'a mut Vec<u8>,
}

impl Reply<'_> {
    /// Appends `bytes` to the reply.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.message.extend_from_slice(bytes);
    }

    /// Appends one byte.
    pub fn push(&mut self, byte: u8) {
        self.message.push(byte);
    }

    /// The reply's length so far.
    pub fn len(&self) -> usize {
        self.message.len() - HEADER_LEN
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::io::Write for Reply<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.message.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An inline handler: runs inside progress with the requester and the
/// payload, writes the reply.
pub type InlineHandler = Box<dyn FnMut(ProcessAddr, &[u8], &mut Reply<'_>) + Send>;

/// A threaded handler: runs on a worker thread; may block; returns the
/// reply.
pub type ThreadedHandler = Arc<dyn Fn(ProcessAddr, &[u8]) -> Vec<u8> + Send + Sync>;

enum Handler {
    Inline(InlineHandler),
    Threaded(ThreadedHandler),
}

/// Handler ids below this index a table; larger ones a hash map.
const TABLE_IDS: u32 = 1024;

/// The registered handlers by id.
#[derive(Default)]
struct Handlers {
    table: Vec<Option<Handler>>,
    others: HashMap<u32, Handler>,
}

impl Handlers {
    fn insert(&mut self, id: u32, h: Handler) {
        if id < TABLE_IDS {
            let i = id as usize;
            if self.table.len() <= i {
                self.table.resize_with(i + 1, || None);
            }
            self.table[i] = Some(h);
        } else {
            self.others.insert(id, h);
        }
    }

    #[inline]
    fn get_mut(&mut self, id: u32) -> Option<&mut Handler> {
        match self.table.get_mut(id as usize) {
            Some(h) => h.as_mut(),
            None if id < TABLE_IDS => None,
            None => self.others.get_mut(&id),
        }
    }
}

/// Counters of an endpoint's remote service requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsrStats {
    /// Requests this process made.
    pub requests_sent: u64,
    /// Requests handled here (by either kind of handler, or answered with
    /// an error).
    pub requests_handled: u64,
    /// Replies and errors that matched no request of this process
    /// (dropped).
    pub unmatched_answers: u64,
    /// Requests and answers handled where they arrived — a direct
    /// method's receive slot or the port's receive ring — without a copy
    /// (not counted: those held behind a large request, and large
    /// payloads, which land in a buffer posted for them).
    pub taken_in_place: u64,
    /// Payloads that went on a normal channel (sent or received).
    pub large_payloads: u64,
    /// Service messages that could not be read (dropped).
    pub malformed: u64,
}

/// What waits for a large request's payload from one sender: the request,
/// then copies of what came after it.
enum Held {
    Large,
    Message(Vec<u8>),
}

/// A large payload this endpoint is receiving on a channel of its own.
struct Incoming {
    from: ProcessAddr,
    handler: u32,
    request: u32,
    is_reply: bool,
}

/// A large payload this endpoint sends once cleared, or is sending.
struct Outgoing {
    peer: ProcessAddr,
    request: u32,
    is_reply: bool,
}

/// The engine's remote-service state (see the module documentation).
/// Handling a message only changes this state; what it asks of the port
/// (sends, channels) waits in it for [`api`]'s flush, so that a message can
/// be handled while a method lends it.
pub(crate) struct Services {
    handlers: Handlers,
    workers: usize,
    pool: Option<Pool>,
    next_request: u32,
    /// Requests awaiting their answer: the handler asked, by request.
    pending: PendingTable,
    completions: VecDeque<Completion>,
    /// Service messages to send, in order (answers, and what could not be
    /// sent at once).
    outbox: VecDeque<(ProcessAddr, Vec<u8>)>,
    /// An inline handler's answer made with the outbox empty, for its
    /// peer: sent before the outbox (the common case of one answer at a
    /// time, without a queue).
    pub(crate) answer: Vec<u8>,
    pub(crate) answer_to: Option<ProcessAddr>,
    /// Emptied message buffers for reuse.
    spare: Vec<Vec<u8>>,
    /// Threaded requests by (sender, handler) while one of the pair's
    /// runs: those waiting their turn.
    running: HashMap<(ProcessAddr, u32), VecDeque<Job>>,
    jobs_in_flight: usize,
    /// Per sender with a large request not yet in: what waits behind it.
    held: HashMap<ProcessAddr, VecDeque<Held>>,
    /// Large payloads announced by peers, to post a buffer for.
    to_clear: Vec<(ProcessAddr, ServiceHeader, u64)>,
    /// Large payloads of ours a peer cleared (channel or `NO_CHANNEL`).
    to_send: Vec<(ProcessAddr, Kind, u32, u16)>,
    /// Our large payloads awaiting their clearance, by (peer, request,
    /// is a reply).
    offers: HashMap<(ProcessAddr, u32, bool), (u32, Vec<u8>)>,
    bulk_in: HashMap<ChannelId, Incoming>,
    bulk_out: HashMap<SendHandle, Outgoing>,
    max_payload: u64,
    stats: RsrStats,
    /// Completions and answers made so far: a change tells the engine a
    /// round produced work for the application or the wire.
    events: u64,
    /// Service messages handled so far.
    handled: u64,
    /// The request an [`Endpoint::call`](crate::Endpoint::call) waits for:
    /// its reply goes to `awaited_reply` (a buffer kept for the purpose)
    /// and `awaited_done`, not to the completion queue.
    pub(crate) awaited: Option<RequestId>,
    pub(crate) awaited_done: bool,
    pub(crate) awaited_reply: Vec<u8>,
    pub(crate) awaited_error: Option<RsrError>,
}

impl Default for Services {
    fn default() -> Services {
        Services {
            handlers: Handlers::default(),
            workers: 2,
            pool: None,
            next_request: 0,
            pending: PendingTable::default(),
            completions: VecDeque::new(),
            outbox: VecDeque::new(),
            answer: Vec::new(),
            answer_to: None,
            spare: Vec::new(),
            running: HashMap::default(),
            jobs_in_flight: 0,
            held: HashMap::default(),
            to_clear: Vec::new(),
            to_send: Vec::new(),
            offers: HashMap::default(),
            bulk_in: HashMap::default(),
            bulk_out: HashMap::default(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            stats: RsrStats::default(),
            events: 0,
            handled: 0,
            awaited: None,
            awaited_done: false,
            awaited_reply: Vec::new(),
            awaited_error: None,
        }
    }
}

impl Services {
    /// Whether the engine has anything to do for this layer besides
    /// service messages arriving.
    #[inline]
    pub fn has_work(&self) -> bool {
        self.has_unsent()
            || self.has_clearances()
            || self.jobs_in_flight > 0
            || self.watches_channels()
    }

    /// Whether answers or other service messages wait to be sent.
    #[inline]
    pub fn has_unsent(&self) -> bool {
        self.answer_to.is_some() || !self.outbox.is_empty()
    }

    /// Whether large payloads wait for a buffer to be posted or for their
    /// sending.
    #[inline]
    pub fn has_clearances(&self) -> bool {
        !self.to_clear.is_empty() || !self.to_send.is_empty()
    }

    /// Whether channel events may be this layer's.
    #[inline]
    pub fn watches_channels(&self) -> bool {
        !self.bulk_in.is_empty() || !self.bulk_out.is_empty()
    }

    /// Completions and answers made so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Service messages handled plus completions and answers made, so far.
    pub fn activity(&self) -> u64 {
        self.handled + self.events
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b
    }

    fn recycle(&mut self, mut b: Vec<u8>) {
        if self.spare.len() < 64 && b.capacity() <= 64 << 10 {
            b.clear();
            self.spare.push(b);
        }
    }

    /// Handles one service message from `from` (in place, or out of the
    /// port's ring). Returns whether it made an answer or a completion.
    /// Requests from a sender whose large request is not in yet wait
    /// behind it (copied); answers and clearances never wait (two
    /// endpoints sending each other large requests would otherwise wait
    /// for each other's clearance).
    #[inline]
    pub fn on_message(&mut self, from: ProcessAddr, message: &[u8]) -> bool {
        self.handled += 1;
        let Some((h, body)) = ServiceHeader::parse(message) else {
            self.stats.malformed += 1;
            return false;
        };
        if !self.held.is_empty() && matches!(h.kind, Kind::Request | Kind::LargeRequest) {
            if let Some(q) = self.held.get_mut(&from) {
                q.push_back(Held::Message(message.to_vec()));
                return false;
            }
        }
        if matches!(h.kind, Kind::Request | Kind::Reply | Kind::Error) {
            self.stats.taken_in_place += 1;
        }
        self.handle(from, h, body)
    }

    #[inline(always)]
    fn handle(&mut self, from: ProcessAddr, h: ServiceHeader, body: &[u8]) -> bool {
        match h.kind {
            Kind::Request => self.on_request(from, h.handler, h.request, body),
            Kind::Reply => {
                let request = RequestId {
                    peer: from,
                    number: h.request,
                };
                if self.awaited == Some(request) && self.pending.remove(request).is_some() {
                    self.awaited_reply.clear();
                    self.awaited_reply.extend_from_slice(body);
                    self.awaited_done = true;
                    self.events += 1;
                    return true;
                }
                let mut reply = self.buffer();
                reply.extend_from_slice(body);
                self.complete(from, h.request, |_| Ok(reply))
            }
            _ => self.handle_other(from, h, body),
        }
    }

    /// The kinds of service message off the small round trip's path.
    #[cold]
    #[inline(never)]
    fn handle_other(&mut self, from: ProcessAddr, h: ServiceHeader, body: &[u8]) -> bool {
        match h.kind {
            Kind::Request | Kind::Reply => self.handle(from, h, body),
            Kind::Error => self.complete(from, h.request, |handler| {
                Err(decode_error(from, handler, body))
            }),
            Kind::LargeRequest | Kind::LargeReply => {
                let Some(len) = wire::read_len(body) else {
                    self.stats.malformed += 1;
                    return false;
                };
                if h.kind == Kind::LargeRequest {
                    self.held.entry(from).or_default().push_back(Held::Large);
                }
                self.to_clear.push((from, h, len));
                false
            }
            Kind::ClearRequest | Kind::ClearReply => {
                let Some(ch) = wire::read_channel(body) else {
                    self.stats.malformed += 1;
                    return false;
                };
                self.to_send.push((from, h.kind, h.request, ch));
                false
            }
        }
    }

    /// An answer to request `number` of ours came from `peer`.
    fn complete(
        &mut self,
        peer: ProcessAddr,
        number: u32,
        result: impl FnOnce(u32) -> Result<Vec<u8>, RsrError>,
    ) -> bool {
        let request = RequestId { peer, number };
        let Some(handler) = self.pending.remove(request) else {
            self.stats.unmatched_answers += 1;
            return false;
        };
        let result = result(handler);
        self.events += 1;
        if self.awaited == Some(request) {
            self.awaited_done = true;
            match result {
                Ok(reply) => {
                    let old = std::mem::replace(&mut self.awaited_reply, reply);
                    self.recycle(old);
                }
                Err(e) => self.awaited_error = Some(e),
            }
            return true;
        }
        self.completions.push_back(Completion { request, result });
        true
    }

    /// Runs (inline) or queues (threaded) the handler of a request.
    #[inline(always)]
    fn on_request(&mut self, from: ProcessAddr, id: u32, number: u32, payload: &[u8]) -> bool {
        self.stats.requests_handled += 1;
        let Some(Handler::Inline(f)) = self.handlers.get_mut(id) else {
            return self.on_other_request(from, id, number, payload);
        };
        if self.answer_to.is_none() && self.outbox.is_empty() {
            pool::run_handler(id, number, &mut self.answer, |message| {
                f(from, payload, &mut Reply { message })
            });
            self.answer_to = Some(from);
        } else {
            let mut out = self.spare.pop().unwrap_or_default();
            pool::run_handler(id, number, &mut out, |message| {
                f(from, payload, &mut Reply { message })
            });
            self.outbox.push_back((from, out));
        }
        self.events += 1;
        true
    }

    /// A request for a threaded handler, or for none.
    #[cold]
    #[inline(never)]
    fn on_other_request(
        &mut self,
        from: ProcessAddr,
        id: u32,
        number: u32,
        payload: &[u8],
    ) -> bool {
        let mut out = self.buffer();
        match self.handlers.get_mut(id) {
            None => {
                let why = format!("no handler {id}");
                wire::error_reply(&mut out, id, number, ERROR_UNKNOWN_HANDLER, &why);
            }
            Some(Handler::Inline(f)) => pool::run_handler(id, number, &mut out, |message| {
                f(from, payload, &mut Reply { message })
            }),
            Some(Handler::Threaded(f)) => {
                let job = Job {
                    from,
                    handler_id: id,
                    request: number,
                    payload: payload.to_vec(),
                    handler: f.clone(),
                };
                self.recycle(out);
                match self.running.get_mut(&(from, id)) {
                    Some(waiting) => waiting.push_back(job),
                    None => {
                        self.running.insert((from, id), VecDeque::new());
                        self.start(job);
                    }
                }
                return false;
            }
        }
        self.outbox.push_back((from, out));
        self.events += 1;
        true
    }

    fn start(&mut self, job: Job) {
        if self.pool.as_ref().is_some_and(|p| p.start(job)) {
            self.jobs_in_flight += 1;
        }
    }

    /// Takes the worker pool's answers into the outbox, starting the next
    /// waiting request of each pair whose request finished. Returns how
    /// many.
    fn collect_pool_answers(&mut self) -> usize {
        let Some(pool) = self.pool.as_ref().filter(|_| self.jobs_in_flight > 0) else {
            return 0;
        };
        let finished: Vec<Answer> = pool.finished().collect();
        for a in &finished {
            let pair = (a.to, a.handler_id);
            let next = self.running.get_mut(&pair).and_then(|q| q.pop_front());
            match next {
                Some(job) => self.start(job),
                None => {
                    self.running.remove(&pair);
                }
            }
        }
        let n = finished.len();
        self.jobs_in_flight -= n;
        self.events += n as u64;
        for a in finished {
            self.outbox.push_back((a.to, a.message));
        }
        n
    }

    /// The large request from `from` at the head of its held queue is
    /// handled (or given up): handles what waited behind it, up to the next
    /// large request.
    fn release_held(&mut self, from: ProcessAddr) {
        let Some(mut q) = self.held.remove(&from) else {
            return;
        };
        if matches!(q.front(), Some(Held::Large)) {
            q.pop_front();
        }
        while let Some(item) = q.pop_front() {
            let Held::Message(m) = item else { continue };
            if let Some((h, body)) = ServiceHeader::parse(&m) {
                self.handle(from, h, body);
            }
            self.recycle(m);
            // A large request again: the rest waits behind it.
            if let Some(behind) = self.held.get_mut(&from) {
                behind.extend(q);
                return;
            }
        }
    }

    /// Fails every pending request to `peer`.
    fn fail_peer(&mut self, peer: ProcessAddr, why: &str) {
        for (request, _) in self.pending.to_peer(peer) {
            self.complete(peer, request.number, |handler| {
                Err(RsrError::Failed {
                    peer,
                    handler,
                    why: why.to_string(),
                })
            });
        }
        self.held.remove(&peer);
    }

    /// Fails our request `number` to `peer` with `why`, if it is pending.
    fn fail_request(&mut self, peer: ProcessAddr, number: u32, why: String) {
        self.complete(peer, number, |handler| {
            Err(RsrError::Failed { peer, handler, why })
        });
    }
}

fn decode_error(peer: ProcessAddr, handler: u32, body: &[u8]) -> RsrError {
    let message = body
        .get(1..)
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_default();
    match body.first() {
        Some(&ERROR_UNKNOWN_HANDLER) => RsrError::UnknownHandler { peer, handler },
        Some(&ERROR_PANICKED) => RsrError::HandlerPanicked {
            peer,
            handler,
            message,
        },
        Some(&ERROR_REFUSED) => RsrError::Failed {
            peer,
            handler,
            why: message,
        },
        _ => RsrError::Malformed { peer, handler },
    }
}
