//! Async Rust over an endpoint, on tokio (cargo feature `tokio`).
//!
//! [`AsyncEndpoint`] owns an [`Endpoint`] and a driver task that waits on
//! the endpoint's descriptor ([`std::os::fd::AsFd`]) with tokio's
//! [`AsyncFd`] and calls [`Endpoint::service`] whenever it is readable: the
//! endpoint makes progress (acknowledgements, retransmissions, arrivals)
//! whether or not any task is awaiting something, and an idle endpoint
//! costs no wake-ups. A service here stops at the first round that made
//! events for the tasks (an arrival, a send's completion) without arming
//! the descriptor: the tasks act first (a reply leaves in the service its
//! send makes, which arms it), and the driver runs the service still owed
//! after them. That keeps the confirming receive poll and the timer's
//! arming off the path from an arrival to its answer, as in the blocking
//! API. Any number of tasks may use one `AsyncEndpoint` at
//! once (it is `Clone`, `Send` and `Sync`); each operation holds the
//! endpoint's lock only for the non-blocking calls it makes, never across
//! an `.await`.
//!
//! - [`AsyncEndpoint::send`] completes when the receiver has acknowledged
//!   the message (or fails with the reason).
//! - [`AsyncEndpoint::recv`] takes the next message from any peer. The
//!   driver copies arriving messages out of the endpoint's receive ring into
//!   a queue of [`RECV_QUEUE`] messages; when the queue is full it leaves
//!   them in the ring, which then pushes back on the senders as it does
//!   for a slow synchronous receiver.
//! - [`AsyncEndpoint::send_on_channel`] and
//!   [`AsyncEndpoint::recv_on_channel`] move a buffer into the buffer a
//!   peer posted on a normal channel (rendezvous, no copy through the ring),
//!   as their blocking namesakes on [`Endpoint`] do.
//!
//! # Cancellation
//!
//! - `send`: the message is accepted (or refused with an error) before the
//!   first `.await`. Dropping the future after that does not take the
//!   message back: it is still delivered and acknowledged, only nobody
//!   learns it. Cancel-safe in the sense that nothing is lost or sent twice.
//! - `recv`: cancel-safe. A message is taken from the queue only in the
//!   poll that returns it, so a dropped `recv` loses nothing; the next
//!   `recv` gets the message.
//! - `send_on_channel`: like `send`; the buffer of a dropped one is not
//!   returned to anyone.
//! - `recv_on_channel`: cancel-safe. Dropped before a message arrived, its
//!   buffer is taken back (`cancel_post`); dropped after, the message is
//!   kept for the next `recv_on_channel` on that channel, which returns it
//!   (in the buffer it arrived in) and drops the buffer it was given.
//! - Dropping the last handle stops the driver and closes the endpoint;
//!   sends that were in flight then may not be delivered.

use crate::channels::{TransferFailed, TransferFailure};
use crate::coll::CollError;
use crate::endpoint::{Endpoint, Error};
use crate::rsr::{CallError, RequestId, Rsr, RsrError};
use ::tokio::io::unix::AsyncFd;
use ::tokio::sync::{mpsc, oneshot, Mutex as AsyncMutex, Notify};
use ::tokio::task::JoinHandle;
use bcl_core::{ChannelEvent, ChannelId, ProcessAddr, SendEvent, SendFailure, SendHandle};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Messages the driver copies out of the receive ring ahead of `recv`.
pub const RECV_QUEUE: usize = 1024;

/// A received message: the sender and the bytes.
pub type Message = (ProcessAddr, Vec<u8>);

/// An [`Endpoint`] for async code (see the module documentation).
#[derive(Clone)]
pub struct AsyncEndpoint {
    shared: Arc<Shared>,
    _driver: Arc<DriverGuard>,
}

/// Aborts the driver task when the last handle goes.
struct DriverGuard(JoinHandle<()>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the handles and the driver share.
struct Shared {
    /// A duplicate of the endpoint's descriptor (the same epoll set),
    /// registered with tokio's reactor.
    fd: AsyncFd<OwnedFd>,
    state: Mutex<State>,
    local: ProcessAddr,
    /// Arriving messages, in order.
    inbox: AsyncMutex<mpsc::Receiver<Message>>,
    /// `recv` made room in the queue: the driver may take more from the
    /// ring.
    room: Notify,
    /// A service stopped at events and left the endpoint unarmed: the
    /// driver owes it another service ([`State::service_owed`]).
    service_owed: Notify,
}

struct State {
    ep: Endpoint,
    /// Sends whose outcome someone may await.
    sends: HashMap<SendHandle, oneshot::Sender<Result<(), SendFailure>>>,
    inbox: mpsc::Sender<Message>,
    /// Channel sends whose outcome someone may await.
    channel_sends: HashMap<SendHandle, oneshot::Sender<ChannelEvent>>,
    /// Receives posted on channels, awaited.
    channel_recvs: HashMap<ChannelId, oneshot::Sender<ChannelEvent>>,
    /// Messages that arrived on a channel for a receive that was dropped,
    /// for the next receive on that channel.
    channel_kept: HashMap<ChannelId, VecDeque<ChannelEvent>>,
    /// Why the driver stopped, once it has.
    failed: Option<String>,
    /// The last service stopped at events without arming the descriptor:
    /// nobody may rely on it to wake them until another service ran. The
    /// driver runs that one (after the woken tasks had their turn) unless
    /// a task's own service came first.
    service_owed: bool,
}

fn stopped(why: &str) -> Error {
    Error::Wait(io::Error::other(format!(
        "the endpoint's driver task stopped: {why}"
    )))
}

impl AsyncEndpoint {
    /// Takes `ep` over and starts its driver task on the current tokio
    /// runtime (an error outside one). The runtime needs its I/O driver
    /// (`enable_io`).
    pub fn new(ep: Endpoint) -> io::Result<AsyncEndpoint> {
        let runtime = ::tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        // `AsyncFd::new` is deprecated because an `AsRawFd` that does not
        // own its descriptor could close it while registered; an `OwnedFd`
        // owns it, so the registration is sound (the alternative,
        // `register`, is the same call marked unsafe).
        #[allow(deprecated)]
        let fd = AsyncFd::new(ep.as_fd().try_clone_to_owned()?)?;
        let (tx, rx) = mpsc::channel(RECV_QUEUE);
        let shared = Arc::new(Shared {
            fd,
            local: ep.local(),
            state: Mutex::new(State {
                ep,
                sends: HashMap::default(),
                inbox: tx,
                channel_sends: HashMap::default(),
                channel_recvs: HashMap::default(),
                channel_kept: HashMap::default(),
                failed: None,
                service_owed: false,
            }),
            inbox: AsyncMutex::new(rx),
            room: Notify::new(),
            service_owed: Notify::new(),
        });
        let driver = runtime.spawn(drive(shared.clone()));
        Ok(AsyncEndpoint {
            shared,
            _driver: Arc::new(DriverGuard(driver)),
        })
    }

    /// This endpoint's address.
    pub fn local(&self) -> ProcessAddr {
        self.shared.local
    }

    /// Runs `f` on the endpoint (to add peers, read statistics, ...), with
    /// the lock held: `f` must not block. The endpoint is served after it,
    /// so work `f` made leaves at once; events it produced for this
    /// handle's calls are handed out as usual.
    pub fn with_endpoint<R>(&self, f: impl FnOnce(&mut Endpoint) -> R) -> R {
        let mut state = self.shared.lock();
        let r = f(&mut state.ep);
        // An error shows again in the driver's next round.
        let _ = state.service();
        state.dispatch();
        r
    }

    /// Sends `data` to `dst` and waits until the receiver acknowledged it.
    /// See the module documentation for cancellation.
    pub async fn send(&self, dst: ProcessAddr, data: &[u8]) -> Result<(), Error> {
        let outcome = {
            let mut state = self.shared.lock();
            if let Some(why) = &state.failed {
                return Err(stopped(why));
            }
            let handle = state.ep.send(dst, data)?;
            let (tx, rx) = oneshot::channel();
            state.sends.insert(handle, tx);
            // The frames leave now (before the service's receive polls),
            // and a send that completed at once (a direct method) is
            // reported.
            let served = state.ep.transmit().and_then(|_| state.service());
            state.dispatch();
            served?;
            rx
        };
        match self.serving_until(outcome).await? {
            Ok(result) => Ok(result?),
            Err(_) => Err(stopped(
                self.shared.lock().failed.as_deref().unwrap_or("closed"),
            )),
        }
    }

    /// The next message from any peer. Cancel-safe (see the module
    /// documentation).
    pub async fn recv(&self) -> Result<Message, Error> {
        let mut inbox = self.shared.inbox.lock().await;
        match self.serving_until(inbox.recv()).await? {
            Some(m) => {
                self.shared.room.notify_one();
                Ok(m)
            }
            None => Err(stopped(
                self.shared.lock().failed.as_deref().unwrap_or("closed"),
            )),
        }
    }

    /// Sends `buffer` into the buffer `dst` posts on its normal channel `ch`
    /// and waits until it is received in full; gives the buffer back.
    pub async fn send_on_channel(
        &self,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Vec<u8>,
    ) -> Result<Vec<u8>, TransferFailed> {
        let outcome = {
            let mut state = self.shared.lock();
            if let Some(why) = &state.failed {
                return Err(endpoint_failed(stopped(why), None));
            }
            let handle = state.ep.send_on_channel(dst, ch, buffer)?;
            let (tx, rx) = oneshot::channel();
            state.channel_sends.insert(handle, tx);
            let served = state.service();
            state.dispatch();
            served.map_err(|e| endpoint_failed(e, None))?;
            rx
        };
        let event = self.serving_until(outcome).await;
        match event.map_err(|e| endpoint_failed(e, None))? {
            Ok(ChannelEvent::SendDone { buffer, .. }) => Ok(buffer),
            Ok(ChannelEvent::SendFailed { buffer, error, .. }) => Err(TransferFailed {
                error: error.into(),
                buffer: Some(buffer),
            }),
            Ok(other) => unreachable!("a send's event is SendDone or SendFailed: {other:?}"),
            Err(_) => Err(endpoint_failed(self.stopped_error(), None)),
        }
    }

    /// Posts `buffer` on the normal channel `ch` (for `from` only, if
    /// given) and waits for a message; returns the sender, the buffer and
    /// the message length. Cancel-safe (see the module documentation). One
    /// receive per channel at a time: a second one while the first waits
    /// is refused with the buffer back.
    pub async fn recv_on_channel(
        &self,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Vec<u8>,
    ) -> Result<(ProcessAddr, Vec<u8>, usize), TransferFailed> {
        let outcome = {
            let mut state = self.shared.lock();
            if let Some(why) = &state.failed {
                return Err(endpoint_failed(stopped(why), Some(buffer)));
            }
            if let Some(kept) = state
                .channel_kept
                .get_mut(&ch)
                .and_then(VecDeque::pop_front)
            {
                return received(kept);
            }
            if state.channel_recvs.contains_key(&ch) {
                return Err(TransferFailed {
                    error: TransferFailure::Refused(bcl_core::ChannelError::AlreadyPosted(ch)),
                    buffer: Some(buffer),
                });
            }
            state.ep.post(ch, from, buffer)?;
            let (tx, rx) = oneshot::channel();
            state.channel_recvs.insert(ch, tx);
            let served = state.service();
            state.dispatch();
            served.map_err(|e| endpoint_failed(e, None))?;
            rx
        };
        // Dropped while waiting, the guard takes the buffer back, or keeps a
        // message that came meanwhile for the next receive.
        let mut guard = PostedReceive {
            shared: &self.shared,
            ch,
            outcome: Some(outcome),
        };
        let event = match guard.outcome.as_mut() {
            Some(rx) => self.serving_until(rx).await,
            None => unreachable!("the outcome is taken only by drop"),
        };
        guard.outcome = None;
        match event.map_err(|e| endpoint_failed(e, None))? {
            Ok(ev) => received(ev),
            Err(_) => Err(endpoint_failed(self.stopped_error(), None)),
        }
    }

    fn stopped_error(&self) -> Error {
        stopped(self.shared.lock().failed.as_deref().unwrap_or("closed"))
    }

    /// Awaits `fut`, serving this endpoint meanwhile ([`serving_until`]).
    async fn serving_until<F: std::future::Future>(&self, fut: F) -> Result<F::Output, Error> {
        serving_until(&self.shared.fd, || self.shared.serve(), fut).await
    }
}

/// Awaits `fut`, running `serve` whenever `fd` (a duplicate of an
/// endpoint's descriptor) is readable meanwhile, as a driver task does:
/// what `fut` waits for then reaches the awaiting task without a hand-over
/// between tasks. Cancel-safe if `fut` is: a service runs to its end
/// within one poll.
async fn serving_until<F: std::future::Future, E: From<Error>>(
    fd: &AsyncFd<OwnedFd>,
    mut serve: impl FnMut() -> Result<(), E>,
    fut: F,
) -> Result<F::Output, E> {
    let mut fut = std::pin::pin!(fut);
    loop {
        ::tokio::select! {
            biased;
            out = &mut fut => return Ok(out),
            ready = fd.readable() => {
                let mut guard = ready.map_err(|e| E::from(Error::Wait(e)))?;
                // A service that stops at events leaves the next one to
                // the driver (`State::service_owed`).
                serve()?;
                guard.clear_ready();
            }
        }
    }
}

/// A channel receive's outcome as `recv_on_channel` returns it.
fn received(ev: ChannelEvent) -> Result<(ProcessAddr, Vec<u8>, usize), TransferFailed> {
    match ev {
        ChannelEvent::Received {
            from, buffer, len, ..
        } => Ok((from, buffer, len)),
        ChannelEvent::ReceiveFailed { error, buffer, .. } => Err(TransferFailed {
            error: error.into(),
            buffer,
        }),
        other => unreachable!("a channel receive's event is Received or ReceiveFailed: {other:?}"),
    }
}

fn endpoint_failed(e: Error, buffer: Option<Vec<u8>>) -> TransferFailed {
    TransferFailed {
        error: TransferFailure::Endpoint(e),
        buffer,
    }
}

/// A receive posted by `recv_on_channel` while its future waits for the
/// outcome (`None` once it has it).
struct PostedReceive<'a> {
    shared: &'a Shared,
    ch: ChannelId,
    outcome: Option<oneshot::Receiver<ChannelEvent>>,
}

impl Drop for PostedReceive<'_> {
    fn drop(&mut self) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        let mut state = self.shared.lock();
        state.channel_recvs.remove(&self.ch);
        match outcome.try_recv() {
            // The message came and nobody took it: the next receive does.
            Ok(ev) => state.channel_kept.entry(self.ch).or_default().push_back(ev),
            // Nothing yet: take the buffer back (and drop it). A message
            // being written into it cannot be taken back; its event comes
            // later and `dispatch` keeps it for the next receive.
            Err(_) => {
                let _ = state.ep.cancel_post(self.ch);
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held (in a caller's `with_endpoint`
        // closure) leaves the endpoint usable: every method keeps it
        // consistent between calls.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One service of the endpoint and the hand-out of what it produced;
    /// an error stops the endpoint for every handle. The service stops at
    /// the first round that made events (see
    /// [`Endpoint::service_for_events`]); if that left the endpoint
    /// unarmed, the driver is told it owes another.
    fn serve(&self) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(why) = &state.failed {
            return Err(stopped(why));
        }
        match state.ep.service_for_events() {
            Ok((_, armed)) => {
                state.service_owed = !armed;
                if !armed {
                    self.service_owed.notify_one();
                }
                state.dispatch();
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                state.fail(why);
                Err(e)
            }
        }
    }
}

impl State {
    /// A whole service of the endpoint (it arms the descriptor).
    fn service(&mut self) -> Result<usize, Error> {
        let moved = self.ep.service()?;
        self.service_owed = false;
        Ok(moved)
    }

    /// Hands completed sends to their waiters and arriving messages to the
    /// queue (as many as it has room for; the rest wait in the ring until
    /// `recv` makes room). Releasing a delivery only frees its ring slot
    /// (no frame or timer comes of it), so no service is due after.
    fn dispatch(&mut self) {
        while let Some(ev) = self.ep.poll_send_event() {
            let (handle, result) = match ev {
                SendEvent::Complete(h) => (h, Ok(())),
                SendEvent::Failed(h, why) => (h, Err(why)),
            };
            if let Some(tx) = self.sends.remove(&handle) {
                // The waiter may have gone (a cancelled send): fine.
                let _ = tx.send(result);
            }
        }
        while let Some(ev) = self.ep.poll_channel_event() {
            self.dispatch_channel_event(ev);
        }
        loop {
            let Ok(permit) = self.inbox.try_reserve() else {
                break;
            };
            let Some(d) = self.ep.poll_delivery() else {
                break;
            };
            let bytes = self.ep.message(&d).unwrap_or_default().to_vec();
            permit.send((d.from, bytes));
            // The delivery came from this endpoint: releasing it cannot
            // fail, and a failure would only leave its slot taken.
            let _ = self.ep.release(d);
        }
    }

    /// Hands a channel event to the task awaiting it; a received message
    /// nobody awaits any more is kept for the channel's next receive.
    fn dispatch_channel_event(&mut self, ev: ChannelEvent) {
        match ev {
            ChannelEvent::SendDone { handle, .. }
            | ChannelEvent::SendFailed { handle, .. }
            | ChannelEvent::PutDone { handle, .. }
            | ChannelEvent::GetDone { handle, .. }
            | ChannelEvent::RmaFailed { handle, .. } => {
                if let Some(tx) = self.channel_sends.remove(&handle) {
                    let _ = tx.send(ev);
                }
            }
            ChannelEvent::Received { channel, .. }
            | ChannelEvent::ReceiveFailed {
                channel,
                buffer: Some(_),
                ..
            } => {
                let undelivered = match self.channel_recvs.remove(&channel) {
                    Some(tx) => tx.send(ev).err(),
                    None => Some(ev),
                };
                if let Some(ev) = undelivered {
                    self.channel_kept.entry(channel).or_default().push_back(ev);
                }
            }
            // The transfer failed before writing into the buffer, which
            // stays posted for the next message.
            ChannelEvent::ReceiveFailed { buffer: None, .. } => {}
        }
    }

    fn fail(&mut self, why: String) {
        self.failed = Some(why);
        // Every awaited send learns it (their senders drop), and `recv`
        // once the queue is empty (its sender drops).
        self.sends.clear();
        self.channel_sends.clear();
        self.channel_recvs.clear();
        self.inbox = mpsc::channel(1).0;
    }
}

/// The driver: serves the endpoint whenever its descriptor is readable or
/// `recv` made room in the queue.
async fn drive(shared: Arc<Shared>) {
    if shared.serve().is_err() {
        return;
    }
    loop {
        ::tokio::select! {
            ready = shared.fd.readable() => {
                let mut guard = match ready {
                    Ok(g) => g,
                    Err(e) => {
                        shared.lock().fail(e.to_string());
                        return;
                    }
                };
                if shared.serve().is_err() {
                    return;
                }
                // The service armed the descriptor for what comes next, or
                // stopped at events and owes another (the branch below).
                guard.clear_ready();
            }
            () = shared.service_owed.notified() => {
                // The tasks the events woke go first: a reply they send
                // leaves in their own service, which arms the endpoint.
                ::tokio::task::yield_now().await;
                let owed = shared.lock().service_owed;
                if owed && shared.serve().is_err() {
                    return;
                }
            }
            () = shared.room.notified() => {
                shared.lock().dispatch();
            }
        }
    }
}

/// Remote service requests ([`crate::rsr`]) for async code: an [`Rsr`]
/// served by a driver task on its endpoint's descriptor, as
/// [`AsyncEndpoint`] serves an endpoint. Handlers are registered before
/// (on the [`Rsr`]) or through [`AsyncRsr::with_rsr`]; inline ones run in
/// the driver task (or in a task awaiting [`AsyncRsr::call`] that serves
/// meanwhile), threaded ones on the pool.
///
/// `call` is cancel-safe in the sense of `send`: the request is sent
/// before the first `.await`; dropped, its answer is discarded.
#[derive(Clone)]
pub struct AsyncRsr {
    shared: Arc<RsrShared>,
    _driver: Arc<DriverGuard>,
}

struct RsrShared {
    /// A duplicate of the endpoint's descriptor, in tokio's reactor.
    fd: AsyncFd<OwnedFd>,
    state: Mutex<RsrState>,
}

struct RsrState {
    rsr: Rsr,
    /// Calls awaiting their answer.
    calls: HashMap<RequestId, oneshot::Sender<Result<Vec<u8>, RsrError>>>,
    failed: Option<String>,
}

impl RsrState {
    /// Services the RSRs and hands answers to their callers.
    fn serve(&mut self) -> Result<(), CollError> {
        if let Some(why) = &self.failed {
            return Err(CollError::Endpoint(stopped(why)));
        }
        if let Err(e) = self.rsr.service() {
            self.failed = Some(e.to_string());
            self.calls.clear();
            return Err(e);
        }
        while let Some(c) = self.rsr.poll_completion() {
            if let Some(tx) = self.calls.remove(&c.request) {
                let _ = tx.send(c.result);
            }
        }
        Ok(())
    }
}

impl RsrShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, RsrState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AsyncRsr {
    /// Takes `rsr` over and starts its driver task on the current tokio
    /// runtime (an error outside one).
    pub fn new(mut rsr: Rsr) -> io::Result<AsyncRsr> {
        let runtime = ::tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        // See `AsyncEndpoint::new` on why `new` with an `OwnedFd` is sound.
        #[allow(deprecated)]
        let fd = AsyncFd::new(rsr.messenger().endpoint().as_fd().try_clone_to_owned()?)?;
        let shared = Arc::new(RsrShared {
            fd,
            state: Mutex::new(RsrState {
                rsr,
                calls: HashMap::default(),
                failed: None,
            }),
        });
        let driver = runtime.spawn(drive_rsr(shared.clone()));
        Ok(AsyncRsr {
            shared,
            _driver: Arc::new(DriverGuard(driver)),
        })
    }

    /// Runs `f` on the [`Rsr`] (to register handlers, read counters), with
    /// the lock held: `f` must not block. The RSRs are served after it, so
    /// work `f` made leaves at once.
    pub fn with_rsr<R>(&self, f: impl FnOnce(&mut Rsr) -> R) -> R {
        let mut state = self.shared.lock();
        let r = f(&mut state.rsr);
        // An error shows again in the driver's next round.
        let _ = state.serve();
        r
    }

    /// Asks `peer` to run its handler `id` on `payload` and waits for the
    /// answer.
    pub async fn call(
        &self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        let answer = {
            let mut state = self.shared.lock();
            let request = state.rsr.rsr(peer, id, payload)?;
            let (tx, rx) = oneshot::channel();
            state.calls.insert(request, tx);
            state.serve()?;
            rx
        };
        let answer =
            serving_until::<_, CollError>(&self.shared.fd, || self.shared.lock().serve(), answer)
                .await?;
        match answer {
            Ok(result) => result.map_err(CallError::Rsr),
            Err(_) => Err(CallError::Coll(CollError::Endpoint(stopped(
                self.shared.lock().failed.as_deref().unwrap_or("closed"),
            )))),
        }
    }
}

/// The RSR driver: serves whenever the descriptor is readable.
async fn drive_rsr(shared: Arc<RsrShared>) {
    if shared.lock().serve().is_err() {
        return;
    }
    loop {
        let Ok(mut guard) = shared.fd.readable().await else {
            return;
        };
        if shared.lock().serve().is_err() {
            return;
        }
        guard.clear_ready();
    }
}
