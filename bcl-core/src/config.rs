//! Configuration of a port.

use crate::addr::{JobKey, ProcessAddr};
use crate::port::{CongestionConfig, LivenessConfig};
use crate::rtt::RtoConfig;
use crate::sack::RX_WINDOW;
use crate::wire::HEADER_LEN;
use std::time::Duration;

/// Everything that shapes one port's protocol behaviour. [`PortConfig::new`]
/// gives sane defaults; [`PortConfig::validate`] explains any bad value.
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// This port's process address.
    pub local: ProcessAddr,
    /// The job; frames of other jobs are dropped.
    pub job: JobKey,
    /// Incarnation number, different each time a process opens this address
    /// (the progress engine picks a random one).
    pub epoch: u32,
    /// Largest message the system channel carries (default 16 KiB).
    pub eager_limit: usize,
    /// Blocks in the receive ring (default 4096).
    pub ring_blocks: u32,
    /// Bytes per ring block (default 256): ring size is blocks × size.
    pub ring_block_size: usize,
    /// Frames in flight per peer, at most [`RX_WINDOW`] (default 128).
    pub tx_window: u32,
    /// Sends outstanding per port (queued, unacknowledged, or completed but
    /// their completion not yet polled); beyond it `send` reports
    /// back-pressure (default 4096).
    pub max_outstanding_sends: usize,
    /// Peers a port will keep state for; frames from further new peers are
    /// dropped and counted (default 65536).
    pub max_peers: usize,
    /// Acknowledge at once after this many in-order frames (default 16).
    pub ack_every: u32,
    /// Otherwise acknowledge at most this long after a frame arrived, unless
    /// a reply carried the acknowledgement first (default 20 µs).
    pub ack_delay: Duration,
    /// Retransmission timeout bounds.
    pub rto: RtoConfig,
    /// Consecutive timeouts without progress after which a peer's sends fail
    /// (default 30, at most [`MAX_TIMEOUTS_LIMIT`]).
    pub max_timeouts: u32,
    /// First back-off after the receiver reports a full ring (default 20 µs);
    /// it doubles while the ring stays full, up to `rto.max`.
    pub ring_full_backoff: Duration,
    /// Compute and require CRC32C on frames (default true). A port whose
    /// methods all guarantee integrity may turn it off.
    pub crc: bool,
    /// An arriving transfer (or a remote read) that sees nothing from its
    /// peer for this long fails with an error event (default 10 s).
    pub transfer_timeout: Duration,
    /// Bundle small system-channel messages (default true): when a DATA
    /// frame is built for a peer and further small messages to it are
    /// already queued, they travel in the same frame (one sequence number,
    /// one header, up to the method's MTU). Never waits for messages to
    /// come: a lone message goes alone. Only on methods that sequence
    /// frames (not shared memory). Turn off to get one frame per message.
    pub bundle: bool,
    /// First sequence number this port sends to each peer (default 0; tests
    /// start near `u32::MAX` to exercise wrap-around).
    pub initial_seq: u32,
    /// Bytes a rail of a multi-rail peer sends in a row before the next
    /// rail takes over (default 4096, a page, as BCL-3 striped): large
    /// enough that each rail sends whole frames in bursts, small enough to
    /// spread a message over every rail (see `Port::set_rails`).
    pub stripe_bytes: u32,
    /// Congestion control of peers over methods that may lose frames: a
    /// delay-based window with pacing (see [`CongestionConfig`]).
    pub congestion: CongestionConfig,
    /// Watching the peers this port depends on, and declaring the silent
    /// ones dead (see [`LivenessConfig`]).
    pub liveness: LivenessConfig,
}

/// The largest [`PortConfig::max_timeouts`]: each peer counts its
/// consecutive timeouts in a byte (254 of them, backed off to `rto.max`,
/// last nearly a minute by default).
pub const MAX_TIMEOUTS_LIMIT: u32 = 254;

/// A configuration value that cannot work, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid port configuration: {field} {problem}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl PortConfig {
    /// Defaults for a port at `local` in `job`.
    pub fn new(local: ProcessAddr, job: JobKey) -> Self {
        PortConfig {
            local,
            job,
            epoch: 1,
            eager_limit: 16 * 1024,
            ring_blocks: 4096,
            ring_block_size: 256,
            tx_window: 128,
            max_outstanding_sends: 4096,
            max_peers: 65536,
            ack_every: 16,
            ack_delay: Duration::from_micros(20),
            rto: RtoConfig::default(),
            max_timeouts: 30,
            ring_full_backoff: Duration::from_micros(20),
            crc: true,
            transfer_timeout: Duration::from_secs(10),
            bundle: true,
            initial_seq: 0,
            stripe_bytes: 4096,
            congestion: CongestionConfig::default(),
            liveness: LivenessConfig::default(),
        }
    }

    /// The largest eager limit frames of `mtu` bytes allow, in whole KiB:
    /// an eager message is reassembled in the receive window, so it must
    /// fit in [`RX_WINDOW`] frames ([`PortConfig::validate`] checks the
    /// same). The ring must also hold it (`ring_block_size ×
    /// ring_blocks`).
    pub fn max_eager_limit(mtu: usize) -> usize {
        let fit = RX_WINDOW as usize * mtu.saturating_sub(HEADER_LEN);
        fit / 1024 * 1024
    }

    /// Checks that the values can work together and, given a method's MTU,
    /// that the eager limit fits that method's frames.
    pub fn validate(&self, mtu: Option<usize>) -> Result<(), ConfigError> {
        let bad = |field, problem: String| Err(ConfigError { field, problem });
        if self.tx_window == 0 || self.tx_window > RX_WINDOW {
            return bad(
                "tx_window",
                format!("is {}, must be 1..={RX_WINDOW}", self.tx_window),
            );
        }
        if let Some((field, problem)) = self.congestion.problem(self.tx_window) {
            return bad(field, problem);
        }
        if let Some((field, problem)) = self.liveness.problem() {
            return bad(field, problem);
        }
        if self.ring_blocks == 0 || self.ring_block_size == 0 {
            return bad("ring_blocks", "and ring_block_size must be positive".into());
        }
        let ring_bytes = self.ring_blocks as usize * self.ring_block_size;
        if self.eager_limit > ring_bytes {
            return bad(
                "eager_limit",
                format!("{} exceeds the ring size {ring_bytes}", self.eager_limit),
            );
        }
        if self.eager_limit > u32::MAX as usize {
            return bad("eager_limit", "must fit in 32 bits".into());
        }
        if let Some(mtu) = mtu {
            if mtu <= HEADER_LEN {
                return bad(
                    "mtu",
                    format!("{mtu} leaves no room after the {HEADER_LEN}-byte header"),
                );
            }
            let frags = self.eager_limit.div_ceil(mtu - HEADER_LEN);
            if frags > RX_WINDOW as usize {
                return bad(
                    "eager_limit",
                    format!(
                        "{} needs {frags} frames at MTU {mtu}, more than the {RX_WINDOW}-frame window",
                        self.eager_limit
                    ),
                );
            }
        }
        if self.stripe_bytes == 0 {
            return bad("stripe_bytes", "must be positive".into());
        }
        if self.max_outstanding_sends == 0 {
            return bad("max_outstanding_sends", "must be positive".into());
        }
        if self.ack_every == 0 {
            return bad("ack_every", "must be positive".into());
        }
        if self.rto.min > self.rto.max || self.rto.min.is_zero() {
            return bad("rto", "needs 0 < min <= max".into());
        }
        if self.max_timeouts == 0 || self.max_timeouts > MAX_TIMEOUTS_LIMIT {
            return bad(
                "max_timeouts",
                format!(
                    "is {}, must be 1..={MAX_TIMEOUTS_LIMIT} (a peer counts them in a byte)",
                    self.max_timeouts
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_eager_limit_is_the_largest_that_validates() {
        for mtu in [200, 1452, 1472, 1500, 9000, 65_507] {
            let mut cfg = PortConfig::new(ProcessAddr::new(1, 0), JobKey(1));
            cfg.ring_block_size = 256;
            cfg.ring_blocks = 1 << 16;
            cfg.eager_limit = PortConfig::max_eager_limit(mtu);
            assert_eq!(cfg.eager_limit % 1024, 0);
            cfg.validate(Some(mtu)).unwrap();
            cfg.eager_limit += 1024;
            let e = cfg.validate(Some(mtu)).unwrap_err();
            assert_eq!(e.field, "eager_limit", "{e}");
        }
        assert_eq!(PortConfig::max_eager_limit(HEADER_LEN), 0);
    }
}
