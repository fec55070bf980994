//! Normal and open channels on an [`Endpoint`]: rendezvous transfers into
//! posted buffers, and remote memory access.
//!
//! Buffers move by ownership. Posting a buffer, sending one on a channel,
//! putting or getting hands the `Vec<u8>` to the endpoint; the completion
//! event (or the error) hands it back. So a posted buffer cannot be read
//! before its message is complete, and a buffer being sent cannot be
//! changed — the type system says so.
//!
//! Every call comes in a non-blocking form (returns at once; watch
//! [`Endpoint::poll_channel_event`]) and a blocking form that makes progress
//! until its own completion, keeping other events for later.
//!
//! ```
//! use bcl::SimCluster;
//! use std::time::Duration;
//!
//! let mut c = SimCluster::new(2, Default::default(), 1, 1500, |_, _| {}).unwrap();
//! let (a, b) = (SimCluster::addr(0), SimCluster::addr(1));
//! let ch = c.endpoints[1].open_normal_channel().unwrap();
//! // Receiver first: the buffer is posted for `a`, which is told at once.
//! c.endpoints[1].post(ch, Some(a), vec![0; 1 << 20]).unwrap();
//! c.endpoints[0].send_on_channel(b, ch, vec![7; 300_000]).unwrap();
//! let got = loop {
//!     c.step().unwrap();
//!     if let Some(ev) = c.endpoints[1].poll_channel_event() {
//!         break ev;
//!     }
//! };
//! assert!(matches!(got, bcl::ChannelEvent::Received { len: 300_000, .. }));
//! ```

use crate::endpoint::{Endpoint, Error};
use bcl_core::lent::{LentBytes, LentBytesMut};
use bcl_core::{
    ChannelError, ChannelEvent, ChannelId, ProcessAddr, Refused, RegionId, SendHandle,
    TransferError,
};
use std::time::Duration;

/// A transfer that failed, with its buffer.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct TransferFailed {
    /// Why.
    pub error: TransferFailure,
    /// The buffer, back with its owner (when the failure gave it back).
    pub buffer: Option<Vec<u8>>,
}

/// Why a blocking channel call failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferFailure {
    /// The transfer failed at the protocol level.
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// The call was refused before anything was sent.
    #[error(transparent)]
    Refused(#[from] ChannelError),
    /// The endpoint failed.
    #[error(transparent)]
    Endpoint(#[from] Error),
    /// The wait ran out of time; the transfer may still complete later
    /// (watch the channel events).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl From<Refused> for TransferFailed {
    fn from(r: Refused) -> Self {
        TransferFailed {
            error: TransferFailure::Refused(r.error),
            buffer: Some(r.buffer),
        }
    }
}

impl Endpoint {
    /// Opens a normal channel for receiving rendezvous transfers.
    pub fn open_normal_channel(&mut self) -> Result<ChannelId, ChannelError> {
        self.port_mut().open_normal_channel()
    }

    /// Closes a channel; a buffer still posted on it comes back.
    pub fn close_channel(&mut self, ch: ChannelId) -> Result<Option<Vec<u8>>, ChannelError> {
        let now = self.now();
        self.port_mut().close_channel(now, ch)
    }

    /// Posts `buffer` on `ch` for the next message (only from `from`, if
    /// given, which is then told at once). Non-blocking: the message arrives
    /// as [`ChannelEvent::Received`].
    pub fn post(
        &mut self,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Vec<u8>,
    ) -> Result<(), Refused> {
        let now = self.now();
        self.port_mut().post(now, ch, from, buffer)
    }

    /// Posts memory lent to the port on `ch` instead of a vector (see
    /// [`bcl_core::lent`] for the contract: valid and untouched until the
    /// channel event, whose buffer is then empty).
    pub fn post_lent(
        &mut self,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Box<dyn LentBytesMut>,
    ) -> Result<(), Refused> {
        let now = self.now();
        self.port_mut().post_lent(now, ch, from, buffer)
    }

    /// Takes back the buffer posted on `ch`, if any (cancelling a message
    /// being written into it).
    pub fn cancel_post(&mut self, ch: ChannelId) -> Result<Option<Vec<u8>>, ChannelError> {
        let now = self.now();
        self.port_mut().cancel_post(now, ch)
    }

    /// Sends `buffer` into the buffer `dst` posts on its channel `ch`.
    /// Non-blocking: [`ChannelEvent::SendDone`] gives the buffer back.
    pub fn send_on_channel(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        let now = self.now();
        self.port_mut().send_on_channel(now, dst, ch, buffer)
    }

    /// Sends memory lent to the port into the buffer `dst` posts on its
    /// channel `ch` (see [`bcl_core::lent`] for the contract: valid and
    /// unchanged until the channel event, whose buffer is then empty).
    pub fn send_lent_on_channel(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Box<dyn LentBytes>,
    ) -> Result<SendHandle, Refused> {
        let now = self.now();
        self.port_mut().send_lent_on_channel(now, dst, ch, buffer)
    }

    /// Registers `buffer` for remote access (moves it in, no copy).
    pub fn register(&mut self, buffer: Vec<u8>) -> RegionId {
        self.port_mut().register(buffer)
    }

    /// Unregisters `region` and gives its buffer back (refused while it
    /// serves remote reads).
    pub fn unregister(&mut self, region: RegionId) -> Result<Vec<u8>, ChannelError> {
        let now = self.now();
        self.port_mut().unregister(now, region)
    }

    /// The bytes of a registered region.
    pub fn region(&self, region: RegionId) -> Option<&[u8]> {
        self.port().region(region)
    }

    /// The bytes of a registered region, writable.
    pub fn region_mut(&mut self, region: RegionId) -> Option<&mut [u8]> {
        self.port_mut().region_mut(region)
    }

    /// Exposes `region` on a new open channel for peers presenting `key`.
    pub fn open_rma_channel(
        &mut self,
        region: RegionId,
        key: u64,
    ) -> Result<ChannelId, ChannelError> {
        self.port_mut().open_rma_channel(region, key)
    }

    /// Writes `data` at `offset` of the region `dst` exposes on `ch`.
    /// Non-blocking: [`ChannelEvent::PutDone`] gives the buffer back.
    pub fn put(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        let now = self.now();
        self.port_mut().put(now, dst, ch, key, offset, data)
    }

    /// Reads `buffer.len()` bytes at `offset` of the region `dst` exposes on
    /// `ch`. Non-blocking: [`ChannelEvent::GetDone`] gives the buffer back
    /// filled.
    pub fn get(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        buffer: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        let now = self.now();
        self.port_mut().get(now, dst, ch, key, offset, buffer)
    }

    /// Next channel event (transfer completions and failures).
    pub fn poll_channel_event(&mut self) -> Option<ChannelEvent> {
        self.route_service_channel_events();
        self.channel_events
            .pop_front()
            .or_else(|| self.port_mut().poll_channel_event())
    }

    /// Makes progress until a channel event satisfying `wanted` arrives, and
    /// returns it; other events are kept for
    /// [`Endpoint::poll_channel_event`].
    pub fn wait_channel_event(
        &mut self,
        mut wanted: impl FnMut(&ChannelEvent) -> bool,
        timeout: Duration,
    ) -> Result<ChannelEvent, Error> {
        if let Some(i) = self.channel_events.iter().position(&mut wanted) {
            if let Some(ev) = self.channel_events.remove(i) {
                return Ok(ev);
            }
        }
        let deadline = self.now() + timeout;
        loop {
            // Remote service requests' transfers are not the application's.
            self.route_service_channel_events();
            if let Some(i) = self.channel_events.iter().position(&mut wanted) {
                if let Some(ev) = self.channel_events.remove(i) {
                    return Ok(ev);
                }
            }
            while let Some(ev) = self.port_mut().poll_channel_event() {
                if wanted(&ev) {
                    return Ok(ev);
                }
                self.channel_events.push_back(ev);
            }
            if self.now() >= deadline {
                return Err(Error::Timeout(timeout));
            }
            self.progress_or_wait(Some(deadline))?;
        }
    }

    /// Sends `buffer` on channel `ch` of `dst` and waits until it is
    /// received in full; gives the buffer back.
    pub fn send_on_channel_blocking(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransferFailed> {
        let h = self.send_on_channel(dst, ch, buffer)?;
        match self.wait_for_handle(h, timeout)? {
            ChannelEvent::SendDone { buffer, .. } => Ok(buffer),
            ChannelEvent::SendFailed { buffer, error, .. } => Err(TransferFailed {
                error: error.into(),
                buffer: Some(buffer),
            }),
            _ => unreachable!("events of a send handle are SendDone or SendFailed"),
        }
    }

    /// Posts `buffer` on `ch` (for `from` only, if given) and waits for a
    /// message; returns the sender, the buffer and the message length.
    /// On timeout the buffer is taken back.
    pub fn recv_on_channel(
        &mut self,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Vec<u8>,
        timeout: Duration,
    ) -> Result<(ProcessAddr, Vec<u8>, usize), TransferFailed> {
        self.post(ch, from, buffer)?;
        let ev = self.wait_channel_event(
            |e| matches!(e, ChannelEvent::Received { channel, .. } | ChannelEvent::ReceiveFailed { channel, buffer: Some(_), .. } if *channel == ch),
            timeout,
        );
        match ev {
            Ok(ChannelEvent::Received {
                from, buffer, len, ..
            }) => Ok((from, buffer, len)),
            Ok(ChannelEvent::ReceiveFailed { error, buffer, .. }) => Err(TransferFailed {
                error: error.into(),
                buffer,
            }),
            Ok(_) => unreachable!("only receive events were waited for"),
            Err(e) => {
                let buffer = self.cancel_post(ch).ok().flatten();
                let error = match e {
                    Error::Timeout(t) => TransferFailure::Timeout(t),
                    e => TransferFailure::Endpoint(e),
                };
                Err(TransferFailed { error, buffer })
            }
        }
    }

    /// Writes `data` at `offset` of the region `dst` exposes on `ch` and
    /// waits until it is in; gives the buffer back.
    pub fn put_blocking(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        data: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransferFailed> {
        let h = self.put(dst, ch, key, offset, data)?;
        self.rma_result(h, timeout)
    }

    /// Reads into `buffer` from `offset` of the region `dst` exposes on `ch`
    /// and waits for the data.
    pub fn get_blocking(
        &mut self,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        buffer: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransferFailed> {
        let h = self.get(dst, ch, key, offset, buffer)?;
        self.rma_result(h, timeout)
    }

    fn rma_result(&mut self, h: SendHandle, timeout: Duration) -> Result<Vec<u8>, TransferFailed> {
        match self.wait_for_handle(h, timeout)? {
            ChannelEvent::PutDone { buffer, .. } | ChannelEvent::GetDone { buffer, .. } => {
                Ok(buffer)
            }
            ChannelEvent::RmaFailed { buffer, error, .. } => Err(TransferFailed {
                error: error.into(),
                buffer: Some(buffer),
            }),
            _ => unreachable!("events of an RMA handle are PutDone, GetDone or RmaFailed"),
        }
    }

    fn wait_for_handle(
        &mut self,
        h: SendHandle,
        timeout: Duration,
    ) -> Result<ChannelEvent, TransferFailed> {
        self.wait_channel_event(|e| event_handle(e) == Some(h), timeout)
            .map_err(|e| TransferFailed {
                error: match e {
                    Error::Timeout(t) => TransferFailure::Timeout(t),
                    e => TransferFailure::Endpoint(e),
                },
                buffer: None,
            })
    }
}

/// The send handle an event is about, if any.
fn event_handle(e: &ChannelEvent) -> Option<SendHandle> {
    match e {
        ChannelEvent::SendDone { handle, .. }
        | ChannelEvent::SendFailed { handle, .. }
        | ChannelEvent::PutDone { handle, .. }
        | ChannelEvent::GetDone { handle, .. }
        | ChannelEvent::RmaFailed { handle, .. } => Some(*handle),
        ChannelEvent::Received { .. } | ChannelEvent::ReceiveFailed { .. } => None,
    }
}
