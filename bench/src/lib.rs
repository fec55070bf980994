//! Benchmarks of BCL. The benchmarks live in `benches/` and `src/bin/`,
//! the comparison scripts beside this crate; this library holds what they
//! share: [`PortPair`], two protocol ports joined in memory, the
//! shared-memory [`floors`] (also bcl-pingpong's `spin` baseline), and the
//! one-thread [`recv_overhead`] measurement (`bcl-or`, and beside its own
//! figures in `bcl-loggp --check-unified-poll`).

pub mod floors;
pub mod recv_overhead;

use bcl_core::method::{LinkId, MethodCaps, Route};
use bcl_core::{JobKey, Port, PortConfig, ProcessAddr, Time};

/// Two ports joined in memory, for measuring the protocol's own cost.
pub struct PortPair {
    /// The sending port.
    pub a: Port,
    /// The receiving port.
    pub b: Port,
    buf: Vec<u8>,
    now: u64,
}

/// MTU of the in-memory link, a standard Ethernet payload.
pub const MTU: usize = 1500;

impl Default for PortPair {
    fn default() -> Self {
        Self::new()
    }
}

impl PortPair {
    /// A connected pair with default configuration.
    pub fn new() -> Self {
        let caps = MethodCaps {
            mtu: MTU,
            integrity: false,
            reliable: false,
        };
        let (aa, ba) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
        let mut a = Port::new(PortConfig::new(aa, JobKey(1))).expect("config");
        let mut b = Port::new(PortConfig::new(ba, JobKey(1))).expect("config");
        a.add_method(caps).expect("method");
        b.add_method(caps).expect("method");
        let route = Route {
            method: 0,
            link: LinkId(0),
        };
        a.set_route(Time::ZERO, ba, route).expect("route");
        b.set_route(Time::ZERO, aa, route).expect("route");
        PortPair {
            a,
            b,
            buf: vec![0; MTU],
            now: 0,
        }
    }

    /// Sends `count` messages of `payload` from `a` to `b` and moves every
    /// frame until all are delivered, released and acknowledged: encode,
    /// parse, reassembly, delivery, acknowledgement and completion. Returns
    /// the number of completions seen (always `count`).
    pub fn exchange(&mut self, payload: &[u8], count: usize) -> usize {
        let b_addr = self.b.local();
        for _ in 0..count {
            self.now += 100;
            let now = Time::from_nanos(self.now);
            self.a.send(now, b_addr, payload).expect("send");
            while let Some(tx) = self.a.poll_transmit(0, now, &mut self.buf) {
                self.b.handle_frame(
                    now,
                    Route {
                        method: 0,
                        link: LinkId(0),
                    },
                    &self.buf[..tx.len],
                );
            }
            while let Some(d) = self.b.poll_delivery() {
                self.b.release(d.slot).expect("release");
            }
            while let Some(tx) = self.b.poll_transmit(0, now, &mut self.buf) {
                self.a.handle_frame(
                    now,
                    Route {
                        method: 0,
                        link: LinkId(0),
                    },
                    &self.buf[..tx.len],
                );
            }
        }
        // Flush the last delayed acknowledgement.
        self.now += 1_000_000;
        let now = Time::from_nanos(self.now);
        self.b.handle_timeout(now);
        while let Some(tx) = self.b.poll_transmit(0, now, &mut self.buf) {
            self.a.handle_frame(
                now,
                Route {
                    method: 0,
                    link: LinkId(0),
                },
                &self.buf[..tx.len],
            );
        }
        let mut done = 0;
        while self.a.poll_send_event().is_some() {
            done += 1;
        }
        done
    }

    /// Like [`PortPair::exchange`], but all `count` messages are queued
    /// before the first frame is built, so small ones travel bundled (many
    /// to a frame), as they do from an application that sends a burst.
    /// Returns the number of completions seen (always `count`).
    pub fn exchange_queued(&mut self, payload: &[u8], count: usize) -> usize {
        let b_addr = self.b.local();
        let route = Route {
            method: 0,
            link: LinkId(0),
        };
        self.now += 100;
        let now = Time::from_nanos(self.now);
        for _ in 0..count {
            self.a.send(now, b_addr, payload).expect("send");
        }
        let mut done = 0;
        while done < count {
            self.now += 100;
            let now = Time::from_nanos(self.now);
            while let Some(tx) = self.a.poll_transmit(0, now, &mut self.buf) {
                self.b.handle_frame(now, route, &self.buf[..tx.len]);
            }
            while let Some(d) = self.b.poll_delivery() {
                self.b.release(d.slot).expect("release");
            }
            // The receiver's delayed acknowledgement.
            self.now += 1_000_000;
            let now = Time::from_nanos(self.now);
            self.b.handle_timeout(now);
            while let Some(tx) = self.b.poll_transmit(0, now, &mut self.buf) {
                self.a.handle_frame(now, route, &self.buf[..tx.len]);
            }
            while self.a.poll_send_event().is_some() {
                done += 1;
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_completes_every_message() {
        let mut p = PortPair::new();
        assert_eq!(p.exchange(&[7u8; 1024], 100), 100);
        assert_eq!(p.b.stats().messages_delivered, 100);
        assert_eq!(p.a.stats().retransmits, 0);
    }

    #[test]
    fn the_queued_exchange_completes_every_message_in_bundles() {
        let mut p = PortPair::new();
        assert_eq!(p.exchange_queued(&[7u8; 8], 64), 64);
        assert_eq!(p.b.stats().messages_delivered, 64);
        assert_eq!(p.a.stats().data_frames_sent, 1, "one bundle of 64");
        assert_eq!(p.a.stats().retransmits, 0);
    }
}
