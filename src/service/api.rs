//! The endpoint's remote-service calls, and the engine's flush of what
//! handling service messages asked for (see the module documentation of
//! [`crate::service`]).

use super::pool::Pool;
use super::wire::{self, Kind, ServiceHeader, HEADER_LEN, NO_CHANNEL};
use super::{
    Completion, Handler, Incoming, Outgoing, Reply, RequestId, RsrError, RsrStats, ERROR_REFUSED,
    MAX_HANDLER_ID,
};
use crate::endpoint::{Endpoint, Error};
use bcl_core::port::SendError;
use bcl_core::{ChannelEvent, ChannelId, ProcessAddr, Time};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

/// Largest request (header included) [`Endpoint::rsr`] builds on the
/// stack.
const STACK_MESSAGE: usize = 128;

/// Quick polls of a busy-polling [`Endpoint::call`] between two looks at
/// the clock.
const CLOCK_CHECK_POLLS: u32 = 1024;

/// Why a remote service call was refused or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The handler id is above [`MAX_HANDLER_ID`].
    #[error("handler id {0} is above the largest, {MAX_HANDLER_ID}")]
    BadHandlerId(u32),
    /// 2^32 requests to the peer await answers.
    #[error("2^32 requests to {0} are awaiting answers")]
    TooManyPending(ProcessAddr),
    /// The worker threads could not be started.
    #[error("cannot start the RSR worker threads: {0}")]
    Workers(std::io::Error),
    /// The request failed or was answered with an error.
    #[error(transparent)]
    Rsr(#[from] RsrError),
    /// No answer in time (it may still come as a completion).
    #[error("no answer after {0:?}")]
    Timeout(Duration),
    /// The endpoint failed.
    #[error(transparent)]
    Endpoint(#[from] Error),
}

impl Endpoint {
    /// Registers an inline handler under `id` (replacing one there). It
    /// runs inside progress, on the payload where it arrived, and writes
    /// its reply into [`Reply`]; it must be short (see [`crate::service`]).
    pub fn register_handler(
        &mut self,
        id: u32,
        handler: impl FnMut(ProcessAddr, &[u8], &mut Reply<'_>) + Send + 'static,
    ) -> Result<(), ServiceError> {
        check_id(id)?;
        self.services
            .handlers
            .insert(id, Handler::Inline(Box::new(handler)));
        Ok(())
    }

    /// Registers a handler under `id` that runs on the worker pool and may
    /// block; it returns its reply.
    pub fn register_threaded_handler(
        &mut self,
        id: u32,
        handler: impl Fn(ProcessAddr, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<(), ServiceError> {
        check_id(id)?;
        if self.services.pool.is_none() {
            let pool = Pool::new(self.services.workers).map_err(ServiceError::Workers)?;
            self.add_wake_source(pool.ready.as_fd())?;
            self.services.pool = Some(pool);
        }
        self.services
            .handlers
            .insert(id, Handler::Threaded(Arc::new(handler)));
        Ok(())
    }

    /// Worker threads for threaded handlers (default 2), before the first
    /// threaded handler is registered.
    pub fn set_rsr_workers(&mut self, n: usize) {
        self.services.workers = n.max(1);
    }

    /// The largest large payload (request or reply) this endpoint takes
    /// from a peer ([`super::DEFAULT_MAX_PAYLOAD`] by default); a larger
    /// request is answered with an error, a larger reply fails its
    /// request.
    pub fn set_rsr_max_payload(&mut self, bytes: u64) {
        self.services.max_payload = bytes;
    }

    /// Asks `peer` to run its handler `id` on `payload`; the answer comes
    /// as a [`Completion`] ([`Endpoint::poll_rsr_completion`]). The request
    /// is on its way when this returns (as a message sent with
    /// [`Endpoint::send`]; [`Endpoint::transmit`] puts it on the wire at
    /// once). The payload is copied: the caller may reuse it.
    pub fn rsr(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
    ) -> Result<RequestId, ServiceError> {
        check_id(id)?;
        let s = &mut self.services;
        let number = s.next_request;
        let request = RequestId { peer, number };
        if s.pending.contains(request) {
            return Err(ServiceError::TooManyPending(peer));
        }
        s.next_request = number.wrapping_add(1);
        s.pending.insert(request, id);
        s.stats.requests_sent += 1;
        // A small request with nothing queued before it: built on the
        // stack and handed to a direct method, if the peer has one.
        if payload.len() <= STACK_MESSAGE - HEADER_LEN && !s.has_unsent() && peer != self.local() {
            let mut m = [0u8; STACK_MESSAGE];
            let len = HEADER_LEN + payload.len();
            ServiceHeader::new(Kind::Request, id, number).write_into(&mut m);
            m[HEADER_LEN..len].copy_from_slice(payload);
            if self.try_send_service_direct(peer, &m[..len]) {
                return Ok(request);
            }
        }
        let mut message = self.services.buffer();
        if peer != self.local() && payload.len() > self.service_payload_limit() {
            let s = &mut self.services;
            ServiceHeader::new(Kind::LargeRequest, id, number).write(&mut message);
            message.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            s.offers
                .insert((peer, number, false), (id, payload.to_vec()));
            s.stats.large_payloads += 1;
        } else {
            ServiceHeader::new(Kind::Request, id, number).write(&mut message);
            message.extend_from_slice(payload);
        }
        if let Err(e) = self.send_or_queue_service(peer, message) {
            // Refused at once (no route, say): nothing is pending.
            let s = &mut self.services;
            s.pending.remove(request);
            s.offers.remove(&(peer, number, false));
            return Err(e.into());
        }
        Ok(request)
    }

    /// The next answered request, if any. Call progress to get more.
    pub fn poll_rsr_completion(&mut self) -> Option<Completion> {
        self.services.completions.pop_front()
    }

    /// Shows the next answered request to `f` (the request, and the reply
    /// or why there is none) and keeps the reply's buffer for the next
    /// answer: the allocation-free form of
    /// [`Endpoint::poll_rsr_completion`].
    pub fn poll_rsr_completion_with<R>(
        &mut self,
        f: impl FnOnce(RequestId, Result<&[u8], &RsrError>) -> R,
    ) -> Option<R> {
        let c = self.services.completions.pop_front()?;
        match c.result {
            Ok(reply) => {
                let r = f(c.request, Ok(&reply));
                self.services.recycle(reply);
                Some(r)
            }
            Err(e) => Some(f(c.request, Err(&e))),
        }
    }

    /// Takes the completion of `request` if it is there (others stay).
    pub fn take_rsr_completion(&mut self, request: RequestId) -> Option<Completion> {
        let c = &mut self.services.completions;
        if c.front().is_some_and(|c| c.request == request) {
            return c.pop_front();
        }
        let i = c.iter().position(|c| c.request == request)?;
        c.remove(i)
    }

    /// Requests of this endpoint awaiting their answer.
    pub fn rsr_pending(&self) -> usize {
        self.services.pending.len()
    }

    /// The remote-service counters.
    pub fn rsr_stats(&self) -> RsrStats {
        self.services.stats
    }

    /// A count that grows with every service message handled and every
    /// answer or completion made: a caller's loop sees work done.
    pub fn rsr_activity(&self) -> u64 {
        self.services.activity()
    }

    /// Sends a request and makes progress (sleeping between idle rounds in
    /// blocking mode) until its answer comes or `timeout` passes; other
    /// completions stay queued. An answer that comes after the timeout is
    /// a completion ([`Endpoint::poll_rsr_completion`]).
    pub fn call(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, ServiceError> {
        self.call_with(peer, id, payload, timeout, <[u8]>::to_vec)
    }

    /// [`Endpoint::call`] that shows the reply to `f` and keeps its buffer
    /// for the next call (no allocation on the way).
    pub fn call_with<R>(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
        timeout: Duration,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, ServiceError> {
        let request = self.rsr(peer, id, payload)?;
        // The caller waits for nothing else: out now.
        self.transmit()?;
        let deadline = self.now() + timeout;
        self.services.awaited = Some(request);
        self.services.awaited_done = false;
        let waited = self.await_answer(deadline);
        self.services.awaited = None;
        if std::mem::take(&mut self.services.awaited_done) {
            return match self.services.awaited_error.take() {
                Some(e) => Err(e.into()),
                None => Ok(f(&self.services.awaited_reply)),
            };
        }
        waited?;
        Err(ServiceError::Timeout(timeout))
    }

    /// Makes progress until the awaited request is answered (its reply or
    /// error in the awaited slot) or `deadline`.
    fn await_answer(&mut self, deadline: Time) -> Result<(), Error> {
        let answered = |ep: &Endpoint| ep.services.awaited_done;
        if self.mode() == crate::ProgressMode::BusyPoll {
            // The quick service polls, with a look at the clock every so
            // many (a reading costs more than an empty poll).
            let mut polls = 0u32;
            while !answered(self) {
                self.poll_rsr()?;
                polls = polls.wrapping_add(1);
                if polls.is_multiple_of(CLOCK_CHECK_POLLS) && self.now() >= deadline {
                    break;
                }
            }
            return Ok(());
        }
        self.progress_until(deadline, |ep| Ok(answered(ep).then_some(())))?;
        Ok(())
    }

    /// The largest payload a request or reply carries in one service
    /// message; above it, the payload rides a normal channel.
    fn service_payload_limit(&self) -> usize {
        self.port().config().eager_limit - HEADER_LEN
    }

    /// Sends a service message now, or queues it behind those waiting.
    fn send_or_queue_service(&mut self, to: ProcessAddr, message: Vec<u8>) -> Result<(), Error> {
        if !self.services.has_unsent() {
            match self.send_service_now(to, &message) {
                Ok(true) => {
                    self.services.recycle(message);
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => {
                    self.services.recycle(message);
                    return Err(e);
                }
            }
        }
        self.services.outbox.push_back((to, message));
        Ok(())
    }

    /// Sends a service message; `Ok(false)`: no room now (back-pressure).
    /// One to this endpoint itself is handled at once.
    fn send_service_now(&mut self, to: ProcessAddr, message: &[u8]) -> Result<bool, Error> {
        if to == self.local() {
            self.services.on_message(to, message);
            return Ok(true);
        }
        match self.send_service(to, message) {
            Ok(()) => Ok(true),
            Err(Error::Send(SendError::WouldBlock(_))) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Handles the service messages delivered to the port, and does what
    /// handling messages asked for: answers sent (large ones announced),
    /// buffers posted for large payloads announced, cleared payloads sent,
    /// transfers' events taken, worker answers collected, requests to
    /// unreachable peers failed. Returns the work done.
    pub(crate) fn run_services(&mut self) -> Result<usize, Error> {
        let mut work = 0;
        while let Some(d) = self.port_mut().poll_service_delivery() {
            work += 1;
            let (port, services) = self.port_and_services();
            services.on_message(d.from, port.message(&d).unwrap_or_default());
            port.release(d.slot)?;
        }
        work += self.services.collect_pool_answers();
        while let Some(f) = self.port_mut().poll_service_failure() {
            self.services.fail_peer(f.peer(), &format!("{f}"));
            work += 1;
        }
        if !self.services.to_clear.is_empty() {
            work += self.clear_large_payloads();
        }
        if !self.services.to_send.is_empty() {
            work += self.send_cleared_payloads();
        }
        if self.services.watches_channels() {
            work += self.take_service_channel_events()?;
        }
        if self.services.has_unsent() {
            work += self.flush_service_outbox()?;
        }
        Ok(work)
    }

    /// Sends the outbox, in order, until the port pushes back. Answers too
    /// large for one message are announced and offered.
    pub(crate) fn flush_service_outbox(&mut self) -> Result<usize, Error> {
        let mut sent = 0;
        if let Some(to) = self.services.answer_to.take() {
            let small = self.services.answer.len() <= self.port().config().eager_limit;
            if small && to != self.local() && self.try_send_answer_direct(to) {
                sent = 1;
                if !self.services.has_unsent() {
                    return Ok(sent);
                }
            } else {
                // Not directly: the outbox's way, first in it.
                let answer = std::mem::take(&mut self.services.answer);
                self.services.outbox.push_front((to, answer));
            }
        }
        if self.services.outbox.is_empty() {
            return Ok(sent);
        }
        let limit = self.service_payload_limit();
        let mut through_port = false;
        while let Some((to, mut message)) = self.services.outbox.pop_front() {
            if to != self.local() && message.len() - HEADER_LEN > limit {
                message = self.offer_large_reply(to, message);
            } else if self.try_send_service_direct(to, &message) {
                sent += 1;
                self.services.recycle(message);
                continue;
            }
            match self.send_service_now(to, &message) {
                Ok(true) => {
                    sent += 1;
                    through_port = true;
                    self.services.recycle(message);
                }
                Ok(false) => {
                    self.services.outbox.push_front((to, message));
                    break;
                }
                // The peer cannot be sent to: its requests fail through
                // the port's service failures; the answer is dropped.
                Err(Error::Send(_)) => self.services.recycle(message),
                Err(e) => return Err(e),
            }
        }
        if through_port {
            self.transmit()?;
        }
        Ok(sent)
    }

    /// Turns a reply too large for one message into an offer; returns the
    /// announcement to send instead.
    fn offer_large_reply(&mut self, to: ProcessAddr, reply: Vec<u8>) -> Vec<u8> {
        let Some((h, _)) = ServiceHeader::parse(&reply) else {
            return reply;
        };
        let payload = reply[HEADER_LEN..].to_vec();
        let mut message = self.services.buffer();
        ServiceHeader::new(Kind::LargeReply, h.handler, h.request).write(&mut message);
        message.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        let s = &mut self.services;
        s.offers.insert((to, h.request, true), (h.handler, payload));
        s.stats.large_payloads += 1;
        s.recycle(reply);
        message
    }

    /// Posts a buffer on a channel of our own for each large payload a
    /// peer announced, and names the channel to it (or refuses).
    fn clear_large_payloads(&mut self) -> usize {
        let announced = std::mem::take(&mut self.services.to_clear);
        let n = announced.len();
        for (from, h, len) in announced {
            let is_reply = h.kind == Kind::LargeReply;
            let channel = self.post_for_large(from, h, len, is_reply);
            let kind = if is_reply {
                Kind::ClearReply
            } else {
                Kind::ClearRequest
            };
            let mut message = self.services.buffer();
            ServiceHeader::new(kind, h.handler, h.request).write(&mut message);
            let ch = match &channel {
                Ok(ch) => ch.0,
                Err(_) => NO_CHANNEL,
            };
            message.extend_from_slice(&ch.to_le_bytes());
            // An error here is the peer's: it shows up as a service failure.
            let _ = self.send_or_queue_service(from, message);
            if let Err(why) = channel {
                if is_reply {
                    self.services.fail_request(from, h.request, why);
                } else {
                    let mut out = self.services.buffer();
                    wire::error_reply(&mut out, h.handler, h.request, ERROR_REFUSED, &why);
                    self.services.outbox.push_back((from, out));
                    self.services.release_held(from);
                }
            }
        }
        n
    }

    /// Opens a channel and posts a buffer of `len` bytes on it for `from`.
    fn post_for_large(
        &mut self,
        from: ProcessAddr,
        h: ServiceHeader,
        len: u64,
        is_reply: bool,
    ) -> Result<ChannelId, String> {
        if len > self.services.max_payload {
            return Err(format!(
                "a payload of {len} bytes is above the receiver's limit of {}",
                self.services.max_payload
            ));
        }
        let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit here"))?;
        let ch = self
            .open_normal_channel()
            .map_err(|e| format!("no channel for a {len}-byte payload: {e}"))?;
        if let Err(e) = self.post(ch, Some(from), vec![0; len]) {
            let _ = self.close_channel(ch);
            return Err(format!("cannot post a {len}-byte buffer: {e:?}"));
        }
        self.services.bulk_in.insert(
            ch,
            Incoming {
                from,
                handler: h.handler,
                request: h.request,
                is_reply,
            },
        );
        self.services.stats.large_payloads += 1;
        Ok(ch)
    }

    /// Sends each payload a peer cleared on the channel it named.
    fn send_cleared_payloads(&mut self) -> usize {
        let cleared = std::mem::take(&mut self.services.to_send);
        let n = cleared.len();
        for (peer, kind, request, ch) in cleared {
            let is_reply = kind == Kind::ClearReply;
            let Some((_, payload)) = self.services.offers.remove(&(peer, request, is_reply)) else {
                self.services.stats.malformed += 1;
                continue;
            };
            if ch == NO_CHANNEL {
                // A refused request gets its error reply; a refused reply
                // is dropped (the requester failed it).
                continue;
            }
            match self.send_on_channel(peer, ChannelId(ch), payload) {
                Ok(handle) => {
                    let out = Outgoing {
                        peer,
                        request,
                        is_reply,
                    };
                    self.services.bulk_out.insert(handle, out);
                }
                Err(e) if !is_reply => {
                    let why = format!("cannot send the payload: {e:?}");
                    self.services.fail_request(peer, request, why);
                }
                Err(_) => {}
            }
        }
        n
    }

    /// Takes the port's channel events when this layer has transfers,
    /// keeping those of its transfers and queueing the others for the
    /// application (in `channel_events`, where the channel calls look
    /// first).
    pub(crate) fn route_service_channel_events(&mut self) {
        if self.services.watches_channels() {
            let _ = self.take_service_channel_events();
        }
    }

    /// Takes the port's channel events, keeping those of this layer's
    /// transfers and queueing the others for the application.
    fn take_service_channel_events(&mut self) -> Result<usize, Error> {
        let mut n = 0;
        while let Some(ev) = self.port_mut().poll_channel_event() {
            match self.on_service_channel_event(ev) {
                None => n += 1,
                Some(other) => self.channel_events.push_back(other),
            }
        }
        Ok(n)
    }

    /// Handles `ev` if it is one of this layer's transfers; else gives it
    /// back.
    fn on_service_channel_event(&mut self, ev: ChannelEvent) -> Option<ChannelEvent> {
        match ev {
            ChannelEvent::Received {
                channel,
                from,
                mut buffer,
                len,
            } if self.services.bulk_in.contains_key(&channel) => {
                let inc = self.services.bulk_in.remove(&channel)?;
                let _ = self.close_channel(channel);
                buffer.truncate(len);
                let s = &mut self.services;
                if inc.is_reply {
                    s.complete(from, inc.request, |_| Ok(buffer));
                } else {
                    s.on_request(from, inc.handler, inc.request, &buffer);
                    s.release_held(from);
                }
                None
            }
            ChannelEvent::ReceiveFailed { channel, error, .. }
                if self.services.bulk_in.contains_key(&channel) =>
            {
                let inc = self.services.bulk_in.remove(&channel)?;
                let _ = self.close_channel(channel);
                let s = &mut self.services;
                if inc.is_reply {
                    s.fail_request(
                        inc.from,
                        inc.request,
                        format!("the reply was lost: {error}"),
                    );
                } else {
                    s.release_held(inc.from);
                }
                None
            }
            ChannelEvent::SendDone { handle, buffer }
                if self.services.bulk_out.contains_key(&handle) =>
            {
                self.services.bulk_out.remove(&handle);
                drop(buffer);
                None
            }
            ChannelEvent::SendFailed { handle, error, .. }
                if self.services.bulk_out.contains_key(&handle) =>
            {
                let out = self.services.bulk_out.remove(&handle)?;
                if !out.is_reply {
                    let why = format!("the payload could not be sent: {error}");
                    self.services.fail_request(out.peer, out.request, why);
                }
                None
            }
            other => Some(other),
        }
    }
}

fn check_id(id: u32) -> Result<(), ServiceError> {
    if id > MAX_HANDLER_ID {
        return Err(ServiceError::BadHandlerId(id));
    }
    Ok(())
}
