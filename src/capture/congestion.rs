//! Congestion-state records (kind 4): the changes of each peer's congestion
//! window, taken from the port's congestion log and written on one extra
//! interface per endpoint, `NODE.PORT/cc` (see the [module
//! documentation](super) for the body).

use super::{CaptureFile, Direction, Kind, PseudoHeader};
use bcl_core::port::Port;
use bcl_core::{CongestionCause, CongestionChange, ProcessAddr};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a congestion-state record's body.
pub const CONGESTION_BODY_LEN: usize = 32;

/// The method name of congestion-state records.
pub const CONGESTION_METHOD: &str = "cc";

/// The body code of `cause` (byte 0 of a congestion-state body).
pub fn cause_code(cause: CongestionCause) -> u8 {
    match cause {
        CongestionCause::Increase => 1,
        CongestionCause::DelayDecrease => 2,
        CongestionCause::Loss => 3,
        CongestionCause::Timeout => 4,
        CongestionCause::Undo => 5,
        CongestionCause::Echo => 6,
    }
}

/// `d` in nanoseconds, at most `u32::MAX - 1`; `u32::MAX` for `None`
/// (unknown, not measured).
fn ns32(d: Option<Duration>) -> u32 {
    d.map_or(u32::MAX, |d| {
        u32::try_from(d.as_nanos())
            .unwrap_or(u32::MAX)
            .min(u32::MAX - 1)
    })
}

/// The body of the congestion-state record of `c` (layout in the [module
/// documentation](super)).
pub fn congestion_body(c: &CongestionChange) -> [u8; CONGESTION_BODY_LEN] {
    let mut b = [0u8; CONGESTION_BODY_LEN];
    b[0] = cause_code(c.cause);
    b[1] = u8::from(c.slow_start);
    b[4..8].copy_from_slice(&c.info.window.to_be_bytes());
    b[8..12].copy_from_slice(&ns32(c.info.base_rtt).to_be_bytes());
    b[12..16].copy_from_slice(&ns32(c.info.queueing_delay).to_be_bytes());
    b[16..20].copy_from_slice(&ns32(c.srtt).to_be_bytes());
    b[20..24].copy_from_slice(&c.in_flight.to_be_bytes());
    b[24..32].copy_from_slice(&c.info.pacing_rate.unwrap_or(0).to_be_bytes());
    b
}

/// One endpoint's congestion-state records: where they go.
pub(crate) struct CongestionTap {
    file: Arc<CaptureFile>,
    iface: u32,
    local: ProcessAddr,
    pid: u32,
}

impl CongestionTap {
    pub(crate) fn new(file: Arc<CaptureFile>, iface: u32, local: ProcessAddr) -> CongestionTap {
        CongestionTap {
            file,
            iface,
            local,
            pid: std::process::id(),
        }
    }

    /// Writes every change `port` has logged, one record each, and flushes
    /// the file if there was any.
    pub(crate) fn drain(&mut self, port: &mut Port) {
        let mut wrote = false;
        while let Some(c) = port.poll_congestion_change() {
            let ph = PseudoHeader {
                kind: Kind::Congestion,
                direction: Direction::None,
                method: CONGESTION_METHOD,
                local: self.local,
                peer: Some(c.peer),
                link: None,
                bulk_kind: 0,
                channel: 0,
                transfer: 0,
                pid: self.pid,
                total_len: CONGESTION_BODY_LEN as u64,
            };
            self.file.record(self.iface, &ph, &congestion_body(&c));
            wrote = true;
        }
        if wrote {
            self.file.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcl_core::{CongestionInfo, Time};

    #[test]
    fn the_body_is_laid_out_as_documented() {
        let mut c = CongestionChange {
            peer: ProcessAddr::new(2, 0),
            at: Time::ZERO,
            cause: CongestionCause::DelayDecrease,
            slow_start: true,
            info: CongestionInfo {
                window: 12,
                base_rtt: Some(Duration::from_micros(45)),
                queueing_delay: None,
                pacing_rate: Some(0x0102_0304_0506),
            },
            srtt: Some(Duration::from_secs(10)),
            in_flight: 7,
        };
        let b = congestion_body(&c);
        assert_eq!(b[0], 2);
        assert_eq!(b[1], 1);
        assert_eq!(b[2..4], [0, 0]);
        assert_eq!(b[4..8], 12u32.to_be_bytes());
        assert_eq!(b[8..12], 45_000u32.to_be_bytes());
        assert_eq!(b[12..16], [0xff; 4], "unknown");
        assert_eq!(b[16..20], (u32::MAX - 1).to_be_bytes(), "saturated");
        assert_eq!(b[20..24], 7u32.to_be_bytes());
        assert_eq!(b[24..32], 0x0102_0304_0506u64.to_be_bytes());
        c.info.pacing_rate = None;
        c.slow_start = false;
        let b = congestion_body(&c);
        assert_eq!(b[1], 0);
        assert_eq!(b[24..32], [0; 8]);
        let codes: Vec<u8> = [
            CongestionCause::Increase,
            CongestionCause::DelayDecrease,
            CongestionCause::Loss,
            CongestionCause::Timeout,
            CongestionCause::Undo,
            CongestionCause::Echo,
        ]
        .into_iter()
        .map(cause_code)
        .collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
    }
}
