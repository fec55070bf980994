//! Remote service requests (Nexus's RSRs, active messages): a request
//! names a handler registered under an id at the receiving process, which
//! runs it on the request's payload and answers; the requester gets the
//! answer as a completion.
//!
//! [`Rsr`] works over a [`Messenger`] (and so over any method): requests,
//! replies and errors are tagged messages in a context of their own
//! ([`RSR_CONTEXT`]), which keeps them apart from the messenger's other
//! traffic on the same per-peer links. A payload above the system
//! channel's eager limit rides a normal channel (the messenger's
//! rendezvous), with nothing for the caller to do. Requests from one
//! sender are taken in the order it sent them.
//!
//! Two kinds of handler, as in Nexus:
//!
//! - **Inline** ([`Rsr::register_handler`]) runs inside [`Rsr::progress`],
//!   in arrival order, on the request's payload where it arrived (the
//!   endpoint's receive ring, or a direct method's queue: no copy, see
//!   [`InPlace`]). It holds up every other request and all of the
//!   endpoint's traffic while it runs, so it must be short: a few
//!   microseconds (a lookup, an update, a copy), never a wait.
//! - **Threaded** ([`Rsr::register_threaded_handler`]) runs on a pool of
//!   worker threads ([`Rsr::set_workers`], 2 by default) and may block. It
//!   gets its own copy of the payload (it runs after the ring space is
//!   reused). The requests of one sender to one handler run one at a time,
//!   in the order sent, as inline ones do; other pairs' run beside them, and
//!   answers leave as they finish.
//!
//! A request to an id nobody registered gets [`RsrError::UnknownHandler`]
//! back, and a handler that panics [`RsrError::HandlerPanicked`] with the
//! panic's message; the receiving endpoint goes on either way.
//!
//! A progress call ends early when a message made an answer or a
//! completion, and answers are put on the wire before it returns: an
//! inline handler's reply does not wait for another receive poll.
//!
//! A worker that finishes a threaded handler signals an eventfd that the
//! endpoint waits on too ([`Endpoint::add_wake_source`]), so an endpoint
//! asleep in blocking mode (or an event loop on its descriptor) wakes to
//! send the answer.
//!
//! [`Endpoint::add_wake_source`]: crate::Endpoint::add_wake_source

use crate::coll::messenger::{InPlace, Messenger, Pattern, RecvId, SendId};
use crate::coll::CollError;
use bcl_core::ProcessAddr;
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// The messenger context of RSR traffic. Communicators use contexts
/// `2·id` and `2·id + 1` from 0 up; this one is beyond any of them.
pub const RSR_CONTEXT: u32 = u32::MAX;

/// Busy-polling rounds between clock readings of a waiting call.
const CLOCK_CHECK_ROUNDS: u32 = 64;

/// Largest handler id (30 bits: the rest of the tag holds the kind and
/// the request id).
pub const MAX_HANDLER_ID: u32 = (1 << 30) - 1;

/// Tag layout: kind in bits 62–63, handler id in 32–61, request id in 0–31.
const KIND_REQUEST: u64 = 0;
const KIND_REPLY: u64 = 1;
const KIND_ERROR: u64 = 2;

fn tag(kind: u64, handler: u32, request: u32) -> u64 {
    kind << 62 | u64::from(handler) << 32 | u64::from(request)
}

fn untag(tag: u64) -> (u64, u32, u32) {
    (
        tag >> 62,
        ((tag >> 32) & u64::from(MAX_HANDLER_ID)) as u32,
        tag as u32,
    )
}

/// Error codes in the first byte of an error reply (the rest is a UTF-8
/// message).
const ERROR_UNKNOWN_HANDLER: u8 = 1;
const ERROR_PANICKED: u8 = 2;

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
        /// What the messenger reported.
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

/// A request this process made, as [`Rsr::rsr`] returns it.
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

/// An inline handler: runs inside progress with the requester and the
/// payload; returns the reply.
pub type InlineHandler = Box<dyn FnMut(ProcessAddr, &[u8]) -> Vec<u8> + Send>;

/// A threaded handler: runs on a worker thread; may block.
pub type ThreadedHandler = Arc<dyn Fn(ProcessAddr, &[u8]) -> Vec<u8> + Send + Sync>;

enum Handler {
    Inline(InlineHandler),
    Threaded(ThreadedHandler),
}

/// A job for the worker pool and what comes back from it.
struct Job {
    from: ProcessAddr,
    handler_id: u32,
    request: u32,
    payload: Vec<u8>,
    handler: ThreadedHandler,
}

struct Answer {
    to: ProcessAddr,
    tag: u64,
    data: Vec<u8>,
}

/// The worker threads of threaded handlers.
struct Pool {
    jobs: Option<mpsc::Sender<Job>>,
    answers: mpsc::Receiver<Answer>,
    /// Readable while answers wait: wakes the endpoint.
    ready: Arc<EventFd>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn new(workers: usize) -> std::io::Result<Pool> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (answers_tx, answers) = mpsc::channel();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let ready = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?,
        );
        let threads = (0..workers.max(1))
            .map(|i| -> std::io::Result<_> {
                let jobs = jobs_rx.clone();
                let answers = answers_tx.clone();
                let ready = ready.clone();
                std::thread::Builder::new()
                    .name(format!("bcl-rsr-{i}"))
                    .spawn(move || loop {
                        let job = {
                            let rx = jobs.lock().unwrap_or_else(|e| e.into_inner());
                            rx.recv()
                        };
                        let Ok(job) = job else { return };
                        let answer = run_handler(job.from, job.handler_id, job.request, || {
                            (job.handler)(job.from, &job.payload)
                        });
                        if answers.send(answer).is_err() {
                            return;
                        }
                        // Cannot fail short of a counter at 2^64 - 1.
                        let _ = ready.write(1);
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Pool {
            jobs: Some(jobs_tx),
            answers,
            ready,
            threads,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the job queue ends every worker after its current job.
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs a handler, catching a panic: the reply, or an error reply.
fn run_handler(to: ProcessAddr, handler: u32, request: u32, f: impl FnOnce() -> Vec<u8>) -> Answer {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(data) => Answer {
            to,
            tag: tag(KIND_REPLY, handler, request),
            data,
        },
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            let mut data = vec![ERROR_PANICKED];
            data.extend_from_slice(message.as_bytes());
            Answer {
                to,
                tag: tag(KIND_ERROR, handler, request),
                data,
            }
        }
    }
}

/// Counters of an [`Rsr`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsrStats {
    /// Requests this process made.
    pub requests_sent: u64,
    /// Requests handled here (by either kind of handler, or answered
    /// with an error).
    pub requests_handled: u64,
    /// Replies and errors that matched no request of this process
    /// (dropped).
    pub unmatched_answers: u64,
    /// RSR messages (requests and answers) handled where they arrived,
    /// without a copy into a receive (see [`InPlace`]).
    pub taken_in_place: u64,
}

/// Remote service requests over a [`Messenger`] (see the module
/// documentation).
pub struct Rsr {
    m: Messenger,
    /// The receive that takes the next RSR message from anyone when it
    /// cannot be taken in place.
    posted: RecvId,
    sends: Sends,
    d: Dispatch,
}

/// Sends to watch: of requests (to fail their request if they fail) and of
/// answers (to forget once done). Inline sends complete when accepted and
/// are never here.
#[derive(Default)]
struct Sends {
    requests: Vec<(SendId, RequestId)>,
    answers: Vec<SendId>,
}

/// Everything of an [`Rsr`] that handles a message: apart from the
/// messenger, so that it can run while the messenger lends a message in
/// place.
struct Dispatch {
    handlers: HashMap<u32, Handler>,
    workers: usize,
    pool: Option<Pool>,
    next_request: u32,
    /// Requests awaiting their answer: handler id by request.
    pending: HashMap<RequestId, u32>,
    completions: VecDeque<Completion>,
    /// Answers made and not yet handed to the messenger.
    answers: Vec<Answer>,
    /// Threaded requests by (sender, handler) while one of the pair's runs:
    /// those waiting their turn. A pair's requests run one at a time, in
    /// arrival order, as its inline requests do.
    running: HashMap<(ProcessAddr, u32), VecDeque<Job>>,
    /// Requests handed to the worker pool and not yet answered.
    jobs_in_flight: usize,
    stats: RsrStats,
}

/// The pattern of the receive kept posted for RSR messages.
fn any_rsr() -> Pattern {
    Pattern {
        context: RSR_CONTEXT,
        from: None,
        tag: None,
    }
}

impl Rsr {
    /// RSRs over `m`'s endpoint.
    pub fn new(mut m: Messenger) -> Rsr {
        let posted = m.irecv_matching(any_rsr());
        Rsr {
            m,
            posted,
            sends: Sends::default(),
            d: Dispatch {
                handlers: HashMap::default(),
                workers: 2,
                pool: None,
                next_request: 0,
                pending: HashMap::default(),
                completions: VecDeque::new(),
                answers: Vec::new(),
                running: HashMap::default(),
                jobs_in_flight: 0,
                stats: RsrStats::default(),
            },
        }
    }

    /// The messenger underneath.
    pub fn messenger(&mut self) -> &mut Messenger {
        &mut self.m
    }

    /// This process's address.
    pub fn local(&self) -> ProcessAddr {
        self.m.local()
    }

    /// The counters.
    pub fn stats(&self) -> RsrStats {
        self.d.stats
    }

    /// Worker threads for threaded handlers (default 2), before the first
    /// threaded handler is registered.
    pub fn set_workers(&mut self, n: usize) {
        self.d.workers = n.max(1);
    }

    fn check_id(id: u32) -> Result<(), CollError> {
        if id > MAX_HANDLER_ID {
            return Err(CollError::Invalid(format!(
                "handler id {id} is above the largest, {MAX_HANDLER_ID}"
            )));
        }
        Ok(())
    }

    /// Registers an inline handler under `id` (replacing one there): it
    /// runs inside progress and must be short (see the module
    /// documentation).
    pub fn register_handler(
        &mut self,
        id: u32,
        handler: impl FnMut(ProcessAddr, &[u8]) -> Vec<u8> + Send + 'static,
    ) -> Result<(), CollError> {
        Self::check_id(id)?;
        self.d
            .handlers
            .insert(id, Handler::Inline(Box::new(handler)));
        Ok(())
    }

    /// Registers a handler under `id` that runs on the worker pool and may
    /// block.
    pub fn register_threaded_handler(
        &mut self,
        id: u32,
        handler: impl Fn(ProcessAddr, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<(), CollError> {
        Self::check_id(id)?;
        if self.d.pool.is_none() {
            let pool = Pool::new(self.d.workers).map_err(|e| {
                CollError::Invalid(format!("cannot start the RSR worker threads: {e}"))
            })?;
            self.m.endpoint_mut().add_wake_source(pool.ready.as_fd())?;
            self.d.pool = Some(pool);
        }
        self.d
            .handlers
            .insert(id, Handler::Threaded(Arc::new(handler)));
        Ok(())
    }

    /// Asks `peer` to run its handler `id` on `payload`; the answer comes
    /// as a [`Completion`] ([`Rsr::poll_completion`]). The request leaves
    /// with the next progress call (several made in a row leave together).
    pub fn rsr(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
    ) -> Result<RequestId, CollError> {
        Self::check_id(id)?;
        let number = self.d.next_request;
        let request = RequestId { peer, number };
        if self.d.pending.contains_key(&request) {
            return Err(CollError::Invalid(format!(
                "2^32 requests to {peer} are awaiting answers"
            )));
        }
        let send = self
            .m
            .isend(peer, RSR_CONTEXT, tag(KIND_REQUEST, id, number), payload)?;
        self.d.next_request = number.wrapping_add(1);
        self.d.pending.insert(request, id);
        if !send.completed_at_once() {
            self.sends.requests.push((send, request));
        }
        self.d.stats.requests_sent += 1;
        Ok(request)
    }

    /// The next answered request, if any.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.d.completions.pop_front()
    }

    /// Requests awaiting their answer.
    pub fn pending(&self) -> usize {
        self.d.pending.len()
    }

    /// One round of progress: the messenger's, handling every request
    /// that arrived (inline handlers run here, on the message where it
    /// arrived) and every answer; then the worker pool's answers and the
    /// outcomes of sends. Answers made leave before it returns. Returns
    /// the work done.
    pub fn progress(&mut self) -> Result<usize, CollError> {
        let d = &mut self.d;
        let mut in_place = InPlace {
            context: RSR_CONTEXT,
            behind: self.posted,
            take: &mut |from, tag, data| d.on_message_in_place(from, tag, data),
        };
        let moved = self.m.progress_in_place(&mut in_place)?;
        Ok(moved + self.after_progress()?)
    }

    /// [`Rsr::progress`], sleeping first until there is work or `until`
    /// when the endpoint blocks.
    pub fn progress_or_wait(&mut self, until: Option<bcl_core::Time>) -> Result<usize, CollError> {
        let d = &mut self.d;
        let mut in_place = InPlace {
            context: RSR_CONTEXT,
            behind: self.posted,
            take: &mut |from, tag, data| d.on_message_in_place(from, tag, data),
        };
        let moved = self.m.progress_or_wait_in_place(until, &mut in_place)?;
        Ok(moved + self.after_progress()?)
    }

    /// Progress for an event loop on the endpoint's descriptor
    /// ([`Messenger::service`]): the messenger's service, then requests,
    /// answers and sends, and again while that made work. The descriptor is
    /// armed when it returns.
    pub fn service(&mut self) -> Result<usize, CollError> {
        let mut moved = 0;
        loop {
            let d = &mut self.d;
            let mut in_place = InPlace {
                context: RSR_CONTEXT,
                behind: self.posted,
                take: &mut |from, tag, data| d.on_message_in_place(from, tag, data),
            };
            moved += self.m.service_in_place(&mut in_place)?;
            let handled = self.after_progress()?;
            moved += handled;
            if handled == 0 {
                return Ok(moved);
            }
        }
    }

    /// What follows the messenger's progress: RSR messages that came
    /// through the posted receive, answers of the worker pool, sending the
    /// answers made, and the outcomes of sends.
    fn after_progress(&mut self) -> Result<usize, CollError> {
        let mut moved = 0;
        while !self.m.is_waiting(self.posted) {
            let Some(got) = self.m.take_received(self.posted) else {
                break;
            };
            self.posted = self.m.irecv_matching(any_rsr());
            moved += 1;
            // The receive takes anyone: a failure names a peer that is
            // gone, whose requests fail through their sends.
            if let Ok(r) = got {
                self.d.on_message(r.from, r.tag, &r.data);
            }
        }
        moved += self.d.collect_pool_answers();
        if !self.d.answers.is_empty() {
            for a in self.d.answers.drain(..) {
                let id = self.m.isend(a.to, RSR_CONTEXT, a.tag, &a.data)?;
                if !id.completed_at_once() {
                    self.sends.answers.push(id);
                }
                moved += 1;
            }
            // Out now, not after the next round's receive half.
            self.m.endpoint_mut().transmit()?;
        }
        if !self.sends.requests.is_empty() || !self.sends.answers.is_empty() {
            self.reap_sends();
        }
        Ok(moved)
    }

    /// Forgets completed sends; a request whose send failed fails.
    fn reap_sends(&mut self) {
        let m = &mut self.m;
        self.sends.answers.retain(|&id| m.take_send(id).is_none());
        let mut failed = Vec::new();
        self.sends
            .requests
            .retain(|&(id, request)| match m.take_send(id) {
                None => true,
                Some(Ok(())) => false,
                Some(Err(e)) => {
                    failed.push((request, e));
                    false
                }
            });
        for (request, e) in failed {
            if let Some(handler) = self.d.pending.remove(&request) {
                self.d.completions.push_back(Completion {
                    request,
                    result: Err(RsrError::Failed {
                        peer: request.peer,
                        handler,
                        why: e.to_string(),
                    }),
                });
            }
        }
    }

    /// Sends a request and makes progress until its answer comes or
    /// `timeout` passes; other completions stay queued.
    pub fn call_blocking(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let request = self.rsr(peer, id, payload)?;
        // The caller waits for nothing else: out now.
        self.m.endpoint_mut().transmit().map_err(CollError::from)?;
        let deadline = self.m.endpoint().now() + timeout;
        // Busy-polling, the clock is read every few rounds only (a reading
        // is a large part of an idle round); a sleeping round reads it
        // every time.
        let every = match self.m.endpoint().mode() {
            crate::ProgressMode::BusyPoll => CLOCK_CHECK_ROUNDS,
            crate::ProgressMode::Blocking => 1,
        };
        let mut rounds = 0u32;
        loop {
            if let Some(i) = self.d.completions.iter().position(|c| c.request == request) {
                if let Some(c) = self.d.completions.remove(i) {
                    return c.result.map_err(CallError::Rsr);
                }
            }
            if rounds.is_multiple_of(every) && self.m.endpoint().now() >= deadline {
                return Err(CallError::Timeout(timeout));
            }
            rounds = rounds.wrapping_add(1);
            self.progress_or_wait(Some(deadline))?;
        }
    }
}

impl Dispatch {
    /// [`Dispatch::on_message`] on a message lent in place.
    fn on_message_in_place(&mut self, from: ProcessAddr, tag_bits: u64, data: &[u8]) -> bool {
        self.stats.taken_in_place += 1;
        self.on_message(from, tag_bits, data)
    }

    /// Handles one RSR message (in place or received); returns whether
    /// it made an answer or a completion (the caller's cue to stop polling
    /// and act on it).
    fn on_message(&mut self, from: ProcessAddr, tag_bits: u64, data: &[u8]) -> bool {
        let (kind, handler, number) = untag(tag_bits);
        match kind {
            KIND_REQUEST => self.on_request(from, handler, number, data),
            KIND_REPLY | KIND_ERROR => {
                let request = RequestId { peer: from, number };
                let Some(asked) = self.pending.remove(&request) else {
                    self.stats.unmatched_answers += 1;
                    return false;
                };
                let result = if kind == KIND_REPLY {
                    Ok(data.to_vec())
                } else {
                    Err(decode_error(from, asked, data))
                };
                self.completions.push_back(Completion { request, result });
                true
            }
            _ => {
                self.stats.unmatched_answers += 1;
                false
            }
        }
    }

    /// Runs (inline) or queues (threaded) the handler of a request.
    fn on_request(&mut self, from: ProcessAddr, id: u32, number: u32, payload: &[u8]) -> bool {
        self.stats.requests_handled += 1;
        let answer = match self.handlers.get_mut(&id) {
            None => {
                let mut data = vec![ERROR_UNKNOWN_HANDLER];
                data.extend_from_slice(format!("no handler {id}").as_bytes());
                Answer {
                    to: from,
                    tag: tag(KIND_ERROR, id, number),
                    data,
                }
            }
            Some(Handler::Inline(f)) => run_handler(from, id, number, || f(from, payload)),
            Some(Handler::Threaded(f)) => {
                // The worker runs after the ring space is reused: it gets
                // its own copy.
                let job = Job {
                    from,
                    handler_id: id,
                    request: number,
                    payload: payload.to_vec(),
                    handler: f.clone(),
                };
                match self.running.get_mut(&(from, id)) {
                    Some(waiting) => waiting.push_back(job),
                    None => {
                        self.running.insert((from, id), VecDeque::new());
                        self.start(job);
                    }
                }
                return false;
            }
        };
        self.answers.push(answer);
        true
    }

    /// Hands a job to the worker pool.
    fn start(&mut self, job: Job) {
        if let Some(jobs) = self.pool.as_ref().and_then(|p| p.jobs.as_ref()) {
            // The workers live as long as the pool: a send cannot fail
            // while it does.
            if jobs.send(job).is_ok() {
                self.jobs_in_flight += 1;
            }
        }
    }

    /// Takes the worker pool's answers into `answers`, starting the next
    /// waiting request of each pair whose request finished. Returns how
    /// many.
    fn collect_pool_answers(&mut self) -> usize {
        let Some(pool) = self.pool.as_ref().filter(|_| self.jobs_in_flight > 0) else {
            return 0;
        };
        // The eventfd counts the answers queued (a worker queues, then
        // counts): take exactly that many, and the count is zero whenever
        // no job is out. No system call while none is.
        let ready = pool.ready.read().unwrap_or(0);
        let mut finished = Vec::new();
        for _ in 0..ready {
            let Ok(a) = pool.answers.recv() else { break };
            self.jobs_in_flight -= 1;
            let (_, handler, _) = untag(a.tag);
            finished.push((a.to, handler));
            self.answers.push(a);
        }
        for pair in &finished {
            let next = self.running.get_mut(pair).and_then(|q| q.pop_front());
            match next {
                Some(job) => self.start(job),
                None => {
                    self.running.remove(pair);
                }
            }
        }
        finished.len()
    }
}

/// Why [`Rsr::call_blocking`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The request failed or was answered with an error.
    #[error(transparent)]
    Rsr(#[from] RsrError),
    /// The messenger or endpoint failed.
    #[error(transparent)]
    Coll(#[from] CollError),
    /// No answer in time (it may still come as a completion).
    #[error("no answer after {0:?}")]
    Timeout(Duration),
}

fn decode_error(peer: ProcessAddr, handler: u32, data: &[u8]) -> RsrError {
    let message = data
        .get(1..)
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_default();
    match data.first() {
        Some(&ERROR_UNKNOWN_HANDLER) => RsrError::UnknownHandler { peer, handler },
        Some(&ERROR_PANICKED) => RsrError::HandlerPanicked {
            peer,
            handler,
            message,
        },
        _ => RsrError::Malformed { peer, handler },
    }
}
