//! [`Transport`] over a BCL [`Endpoint`], on any method. The waiting is
//! the endpoint's ([`Endpoint::send_until`],
//! [`Endpoint::recv_with_until`], [`Endpoint::flush_until`]); this module
//! only converts deadlines, remembers the peer and fails the measurement on
//! a failed send.

use crate::transport::{ChannelTransport, Incoming, Transport, TransportCounters, TransportError};
use bcl::{Endpoint, ProcessAddr, SendEvent, Time};
use std::time::Instant;

/// A BCL endpoint talking to one peer.
pub struct BclTransport {
    ep: Endpoint,
    peer: Option<ProcessAddr>,
    /// One instant on both clocks, to convert deadlines without reading
    /// either clock again (both are monotonic, counted in nanoseconds).
    base: (Instant, Time),
}

fn failed(e: impl std::fmt::Display) -> TransportError {
    TransportError(e.to_string())
}

impl BclTransport {
    /// A transport to `peer` (`None` on a server: the first sender).
    pub fn new(ep: Endpoint, peer: Option<ProcessAddr>) -> Self {
        let base = (Instant::now(), ep.now());
        BclTransport { ep, peer, base }
    }

    fn time(&self, deadline: Instant) -> Time {
        self.base.1 + deadline.saturating_duration_since(self.base.0)
    }

    /// Drops completion events, failing on a failed send.
    fn reap(&mut self) -> Result<(), TransportError> {
        while let Some(ev) = self.ep.poll_send_event() {
            if let SendEvent::Failed(_, f) = ev {
                return Err(failed(f));
            }
        }
        Ok(())
    }

    /// Whether a receive call got a message; the first sender becomes the
    /// peer.
    fn received(&mut self, from: Option<ProcessAddr>) -> bool {
        if self.peer.is_none() {
            self.peer = from;
        }
        from.is_some()
    }
}

impl Transport for BclTransport {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        self.send_queued(msg, deadline)?;
        // Out at once, not after the next receive round.
        self.transmit()
    }

    /// Queues `msg` (progress runs only while the port refuses more sends),
    /// so that several queued small messages leave together in one frame
    /// (bundling) at the next transmit.
    fn send_queued(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let peer = self
            .peer
            .ok_or_else(|| TransportError("no peer yet: nothing received".into()))?;
        let until = self.time(deadline);
        self.ep.send_until(peer, msg, until).map_err(failed)?;
        self.reap()
    }

    fn transmit(&mut self) -> Result<(), TransportError> {
        self.ep.transmit().map(drop).map_err(failed)
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        // Completions of earlier sends are reaped now, while the peer
        // works, not between a message's arrival and the caller.
        self.reap()?;
        let until = self.time(deadline);
        let from = self
            .ep
            .recv_with_until(until, |from, bytes| {
                f(bytes);
                from
            })
            .map_err(failed)?;
        Ok(self.received(from))
    }

    /// One busy-polling receive call ([`Endpoint::poll_recv_with`]: one
    /// progress round at most).
    fn try_recv(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<bool, TransportError> {
        self.reap()?;
        let from = self
            .ep
            .poll_recv_with(|from, bytes| {
                f(bytes);
                from
            })
            .map_err(failed)?;
        Ok(self.received(from))
    }

    fn flush(&mut self, deadline: Instant) -> Result<(), TransportError> {
        let until = self.time(deadline);
        self.ep.flush_until(until).map_err(failed)?;
        self.reap()
    }

    fn counters(&self) -> TransportCounters {
        let s = self.ep.port().stats();
        // Frames the methods dropped before the core saw them are bad
        // frames too (foreign or malformed).
        let dropped: u64 = self.ep.methods().map(|m| m.counters().rx_dropped()).sum();
        TransportCounters {
            retransmits: s.retransmits,
            bad_frames: s.bad_frames.total() + dropped,
            data_frames: s.data_frames_sent,
            congestion_decreases: s.congestion_decreases,
            pacing_waits: s.pacing_waits,
        }
    }

    fn max_message(&self) -> usize {
        self.ep.port().config().eager_limit
    }

    fn rails(&self) -> Vec<crate::report::RailReport> {
        let Some(peer) = self.peer else {
            return Vec::new();
        };
        let locals: Vec<String> = self
            .ep
            .methods()
            .map(|m| m.descriptor().to_string())
            .collect();
        self.ep
            .rails(peer)
            .into_iter()
            .map(|(method, r)| crate::report::RailReport {
                method: method.to_string(),
                local: locals
                    .get(usize::from(r.route.method))
                    .cloned()
                    .unwrap_or_default(),
                state: r.state.to_string(),
                frames_sent: r.frames_sent,
                bytes_sent: r.bytes_sent,
                bytes_delivered: r.bytes_delivered,
                frames_received: r.frames_received,
                downs: r.downs,
            })
            .collect()
    }

    fn channels(&mut self) -> Option<&mut dyn ChannelTransport> {
        Some(self)
    }

    fn details(&self) -> String {
        let peer = self
            .peer
            .and_then(|p| self.ep.port().peer_info(p))
            .map(|i| {
                format!(
                    "\n# peer: rto {:?} srtt {:?} {:?}\n# congestion: {:?}",
                    i.rto, i.srtt, i.stats, i.congestion
                )
            })
            .unwrap_or_default();
        let methods: String = self
            .ep
            .methods()
            .map(|m| format!("\n# {}: {:?}", m.name(), m.counters()))
            .collect();
        format!(
            "# port: {:?}\n# engine ({}): {:?}{peer}{methods}",
            self.ep.port().stats(),
            self.ep.mode().name(),
            self.ep.engine_stats()
        )
    }
}

impl ChannelTransport for BclTransport {
    fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    fn peer(&self) -> Option<ProcessAddr> {
        self.peer
    }

    fn recv_any(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Incoming>, TransportError> {
        let until = self.time(deadline);
        let mut sender = None;
        let got = self
            .ep
            .progress_until(until, |ep| {
                if let Some(ev) = ep.poll_channel_event() {
                    return Ok(Some(Incoming::Event(ev)));
                }
                let Some(d) = ep.poll_delivery() else {
                    return Ok(None);
                };
                f(ep.message(&d).unwrap_or_default());
                sender = Some(d.from);
                ep.release(d)?;
                Ok(Some(Incoming::Message))
            })
            .map_err(failed)?;
        self.received(sender);
        self.reap()?;
        Ok(got)
    }
}
