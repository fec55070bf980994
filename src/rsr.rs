//! Remote service requests beside a [`Messenger`]'s traffic: the
//! endpoint's RSRs ([`crate::service`]: handlers, requests, completions,
//! large payloads on normal channels) driven by the messenger's progress,
//! for programs that use tagged messages or collectives on the same
//! endpoint. Everything here is the endpoint's; [`Rsr`] keeps the
//! messenger's traffic moving while it waits, and takes handlers that
//! return their reply as a `Vec`.
//!
//! A program without a messenger calls the endpoint directly
//! ([`Endpoint::register_handler`](crate::Endpoint::register_handler),
//! [`Endpoint::rsr`](crate::Endpoint::rsr),
//! [`Endpoint::call`](crate::Endpoint::call)): the same requests, one
//! layer less.

use crate::coll::messenger::Messenger;
use crate::coll::CollError;
use crate::service::api::ServiceError;
use bcl_core::ProcessAddr;
use std::time::Duration;

pub use crate::service::{Completion, RequestId, RsrError, RsrStats, MAX_HANDLER_ID};

/// Busy-polling rounds between clock readings of a waiting call.
const CLOCK_CHECK_ROUNDS: u32 = 64;

/// Remote service requests on a [`Messenger`]'s endpoint (see the module
/// documentation).
pub struct Rsr {
    m: Messenger,
}

impl From<ServiceError> for CollError {
    fn from(e: ServiceError) -> CollError {
        match e {
            ServiceError::Endpoint(e) => CollError::Endpoint(e),
            other => CollError::Invalid(other.to_string()),
        }
    }
}

impl Rsr {
    /// RSRs over `m`'s endpoint.
    pub fn new(m: Messenger) -> Rsr {
        Rsr { m }
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
        self.m.endpoint().rsr_stats()
    }

    /// Worker threads for threaded handlers (default 2), before the first
    /// threaded handler is registered.
    pub fn set_workers(&mut self, n: usize) {
        self.m.endpoint_mut().set_rsr_workers(n);
    }

    /// Registers an inline handler under `id` (replacing one there): it
    /// runs inside progress and must be short (see [`crate::service`]).
    /// Its reply is copied into the answer;
    /// [`Endpoint::register_handler`](crate::Endpoint::register_handler)
    /// writes it there directly.
    pub fn register_handler(
        &mut self,
        id: u32,
        mut handler: impl FnMut(ProcessAddr, &[u8]) -> Vec<u8> + Send + 'static,
    ) -> Result<(), CollError> {
        self.m
            .endpoint_mut()
            .register_handler(id, move |from, payload, reply| {
                reply.extend_from_slice(&handler(from, payload))
            })?;
        Ok(())
    }

    /// Registers a handler under `id` that runs on the worker pool and may
    /// block.
    pub fn register_threaded_handler(
        &mut self,
        id: u32,
        handler: impl Fn(ProcessAddr, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<(), CollError> {
        self.m
            .endpoint_mut()
            .register_threaded_handler(id, handler)?;
        Ok(())
    }

    /// Asks `peer` to run its handler `id` on `payload`; the answer comes
    /// as a [`Completion`] ([`Rsr::poll_completion`]).
    pub fn rsr(
        &mut self,
        peer: ProcessAddr,
        id: u32,
        payload: &[u8],
    ) -> Result<RequestId, CollError> {
        Ok(self.m.endpoint_mut().rsr(peer, id, payload)?)
    }

    /// The next answered request, if any.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.m.endpoint_mut().poll_rsr_completion()
    }

    /// Requests awaiting their answer.
    pub fn pending(&self) -> usize {
        self.m.endpoint().rsr_pending()
    }

    /// One round of the messenger's progress, which handles the service
    /// messages that came (inline handlers run there) and sends the answers
    /// made. Returns the work done.
    pub fn progress(&mut self) -> Result<usize, CollError> {
        let before = self.m.endpoint().rsr_activity();
        let moved = self.m.progress()?;
        Ok(moved + self.activity_since(before))
    }

    /// [`Rsr::progress`], sleeping first until there is work or `until`
    /// when the endpoint blocks.
    pub fn progress_or_wait(&mut self, until: Option<bcl_core::Time>) -> Result<usize, CollError> {
        let before = self.m.endpoint().rsr_activity();
        let moved = self.m.progress_or_wait(until)?;
        Ok(moved + self.activity_since(before))
    }

    /// Progress for an event loop on the endpoint's descriptor
    /// ([`Messenger::service`]); the descriptor is armed when it returns.
    pub fn service(&mut self) -> Result<usize, CollError> {
        let before = self.m.endpoint().rsr_activity();
        let moved = self.m.service()?;
        Ok(moved + self.activity_since(before))
    }

    fn activity_since(&self, before: u64) -> usize {
        (self.m.endpoint().rsr_activity() - before) as usize
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
            if let Some(c) = self.m.endpoint_mut().take_rsr_completion(request) {
                return c.result.map_err(CallError::Rsr);
            }
            if rounds.is_multiple_of(every) && self.m.endpoint().now() >= deadline {
                return Err(CallError::Timeout(timeout));
            }
            rounds = rounds.wrapping_add(1);
            self.progress_or_wait(Some(deadline))?;
        }
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
