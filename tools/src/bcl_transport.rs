//! [`Transport`] over a BCL [`Endpoint`], on any method.

use crate::transport::{Transport, TransportCounters, TransportError};
use bcl::core::SendError;
use bcl::{ChannelEvent, Endpoint, ProcessAddr, SendEvent, Time};
use std::time::Instant;

/// What [`BclTransport::recv_any`] found.
#[derive(Debug)]
pub enum Incoming {
    /// A message on the system channel (shown to the caller's function).
    Message,
    /// A channel event: a completion on a normal or open channel.
    Event(ChannelEvent),
}

/// Extra bad-frame counts a method keeps itself (frames it dropped before
/// the core saw them).
pub type ExtraBadFrames = Box<dyn Fn() -> u64 + Send>;

/// A BCL endpoint talking to one peer.
pub struct BclTransport {
    ep: Endpoint,
    peer: Option<ProcessAddr>,
    extra_bad: Option<ExtraBadFrames>,
    /// One instant on both clocks, to convert deadlines without reading
    /// either clock again (both are monotonic, counted in nanoseconds).
    base: (Instant, Time),
    /// The endpoint busy-polls: receive with [`Endpoint::poll_recv_with`].
    busy_poll: bool,
}

impl BclTransport {
    /// A transport to `peer` (`None` on a server: the first sender).
    pub fn new(ep: Endpoint, peer: Option<ProcessAddr>, extra_bad: Option<ExtraBadFrames>) -> Self {
        let base = (Instant::now(), ep.now());
        let busy_poll = ep.mode() == bcl::ProgressMode::BusyPoll;
        BclTransport {
            ep,
            peer,
            extra_bad,
            base,
            busy_poll,
        }
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The endpoint, for channel calls.
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// The peer: given to a client, learnt by a server from the first
    /// message.
    pub fn peer(&self) -> Option<ProcessAddr> {
        self.peer
    }

    /// Waits until `deadline` for the next system-channel message (shown to
    /// `f`) or channel event (returned), whichever comes first; `None` if
    /// nothing came in time.
    pub fn recv_any(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Incoming>, TransportError> {
        let until = self.time(deadline);
        let mut idle_rounds = 0u32;
        loop {
            if let Some(ev) = self.ep.poll_channel_event() {
                self.reap()?;
                return Ok(Some(Incoming::Event(ev)));
            }
            if let Some(d) = self.ep.poll_delivery() {
                if self.peer.is_none() {
                    self.peer = Some(d.from);
                }
                f(self.ep.message(&d).unwrap_or_default());
                self.ep
                    .release(d)
                    .map_err(|e| TransportError(e.to_string()))?;
                self.reap()?;
                return Ok(Some(Incoming::Message));
            }
            idle_rounds = idle_rounds.wrapping_add(1);
            if idle_rounds.is_multiple_of(64) && self.ep.now() >= until {
                return Ok(None);
            }
            self.step(until)?;
        }
    }

    /// Puts what the port has ready on the wire now (after a channel call).
    pub fn transmit(&mut self) -> Result<(), TransportError> {
        self.ep
            .transmit()
            .map(drop)
            .map_err(|e| TransportError(e.to_string()))
    }

    /// Queues `msg` for the peer without transmitting it yet (progress runs
    /// only while the port refuses more sends), so that several queued
    /// small messages can leave together in one frame (bundling) at the
    /// next [`BclTransport::transmit`].
    pub fn send_queued(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let peer = self
            .peer
            .ok_or_else(|| TransportError("no peer yet: nothing received".into()))?;
        let until = self.time(deadline);
        loop {
            match self.ep.send(peer, msg) {
                Ok(_) => return Ok(()),
                Err(bcl::Error::Send(SendError::WouldBlock(_))) if self.ep.now() < until => {
                    self.reap()?;
                    self.step(until)?;
                }
                Err(e) => return Err(TransportError(e.to_string())),
            }
        }
    }

    fn time(&self, deadline: Instant) -> Time {
        self.base.1 + deadline.saturating_duration_since(self.base.0)
    }

    /// Drops completion events, failing on a failed send.
    fn reap(&mut self) -> Result<(), TransportError> {
        while let Some(ev) = self.ep.poll_send_event() {
            if let SendEvent::Failed(_, f) = ev {
                return Err(TransportError(f.to_string()));
            }
        }
        Ok(())
    }

    fn step(&mut self, until: Time) -> Result<(), TransportError> {
        self.ep
            .progress_or_wait(Some(until))
            .map(drop)
            .map_err(|e| TransportError(e.to_string()))
    }
}

impl Transport for BclTransport {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        self.send_queued(msg, deadline)?;
        // Out at once, not after the next receive round.
        self.ep
            .transmit()
            .map(drop)
            .map_err(|e| TransportError(e.to_string()))
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        let until = self.time(deadline);
        let mut idle_rounds = 0u32;
        if self.busy_poll {
            // Completions of earlier sends are reaped now, while the peer
            // works, not between a message's arrival and the caller.
            self.reap()?;
        }
        loop {
            if self.busy_poll {
                let got = self
                    .ep
                    .poll_recv_with(|from, bytes| {
                        f(bytes);
                        from
                    })
                    .map_err(|e| TransportError(e.to_string()))?;
                if let Some(from) = got {
                    if self.peer.is_none() {
                        self.peer = Some(from);
                    }
                    return Ok(true);
                }
                idle_rounds = idle_rounds.wrapping_add(1);
                if idle_rounds.is_multiple_of(1024) && self.ep.now() >= until {
                    return Ok(false);
                }
                continue;
            }
            if let Some(d) = self.ep.poll_delivery() {
                if self.peer.is_none() {
                    self.peer = Some(d.from);
                }
                f(self.ep.message(&d).unwrap_or_default());
                self.ep
                    .release(d)
                    .map_err(|e| TransportError(e.to_string()))?;
                self.reap()?;
                return Ok(true);
            }
            // The deadline is for timeouts: reading the clock every round
            // would slow the busy-poll loop (progress reads it already).
            idle_rounds = idle_rounds.wrapping_add(1);
            if idle_rounds.is_multiple_of(64) && self.ep.now() >= until {
                return Ok(false);
            }
            self.step(until)?;
        }
    }

    fn flush(&mut self, deadline: Instant) -> Result<(), TransportError> {
        let until = self.time(deadline);
        loop {
            self.reap()?;
            if self.ep.port().outstanding_sends() == 0 || self.ep.now() >= until {
                break;
            }
            self.step(until)?;
        }
        // Keep answering (final ACKs) until the port has nothing left to do,
        // briefly.
        while self.ep.next_timeout().is_some() && self.ep.now() < until {
            self.step(until)?;
            self.reap()?;
        }
        Ok(())
    }

    fn counters(&self) -> TransportCounters {
        let s = self.ep.port().stats();
        TransportCounters {
            retransmits: s.retransmits,
            bad_frames: s.bad_frames.total() + self.extra_bad.as_ref().map_or(0, |f| f()),
        }
    }

    fn max_message(&self) -> usize {
        self.ep.port().config().eager_limit
    }

    fn bcl(&mut self) -> Option<&mut BclTransport> {
        Some(self)
    }

    fn has_channels(&self) -> bool {
        true
    }

    fn details(&self) -> String {
        let peer = self
            .peer
            .and_then(|p| self.ep.port().peer_info(p))
            .map(|i| format!("\n# peer: rto {:?} srtt {:?} {:?}", i.rto, i.srtt, i.stats))
            .unwrap_or_default();
        format!(
            "# port: {:?}\n# engine ({}): {:?}{peer}",
            self.ep.port().stats(),
            self.ep.mode().name(),
            self.ep.engine_stats()
        )
    }
}
