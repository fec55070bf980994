//! Machine-readable reports in the shapes fixed by the tool contracts
//! (`shared/contracts/tools.md`), and the human-readable table.

use crate::latency::{micros, LatencySummary};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// One size's figures in the pingpong report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PingResult {
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations.
    pub iters: u64,
    /// Median round trip.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: u64,
    /// The figures are round-trip times (one-way = RTT / 2).
    pub rtt: bool,
    /// The whole percentile distribution, (quantile in 0..=1, ns) by
    /// ascending quantile, the rows of the `.hgrm` file: what `bcl-plot`
    /// draws (an added field; reports without it plot their summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Vec<(f64, u64)>>,
}

impl PingResult {
    /// The entry for `size` with `iters` timed round trips summarised by `s`.
    pub fn new(size: usize, iters: u64, s: &LatencySummary) -> Self {
        PingResult {
            size,
            iters,
            p50_ns: s.p50_ns,
            p90_ns: s.p90_ns,
            p99_ns: s.p99_ns,
            p999_ns: s.p999_ns,
            max_ns: s.max_ns,
            mean_ns: s.mean_ns,
            rtt: true,
            distribution: None,
        }
    }

    /// The same with its percentile distribution.
    pub fn with_distribution(mut self, points: Vec<(f64, u64)>) -> Self {
        self.distribution = Some(points);
        self
    }
}

/// Counters of the pingpong report.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PingCounters {
    /// Messages the client sent.
    pub sent: u64,
    /// Exact echoes received.
    pub received: u64,
    /// Messages without a reply.
    pub lost: u64,
    /// Duplicate deliveries seen by the application.
    pub duplicates: u64,
    /// Damaged deliveries seen by the application.
    pub corrupt: u64,
    /// Frames retransmitted by the transport.
    pub retransmits: u64,
    /// Frames the transport dropped as malformed, corrupted or foreign.
    pub bad_frames: u64,
}

/// The `--json` output of `bcl-pingpong`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PingReport {
    /// Always `bcl-pingpong`.
    pub tool: String,
    /// The method measured.
    pub method: String,
    /// `busy-poll` or `blocking`.
    pub mode: String,
    /// One entry per size.
    pub results: Vec<PingResult>,
    /// The first exchange, kept out of the histograms.
    pub first_contact_ns: u64,
    /// Counters.
    pub counters: PingCounters,
}

/// Writes `value` as pretty JSON to `path` (atomically: a temporary file
/// renamed into place).
pub fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        serde_json::to_writer_pretty(&mut f, value)?;
        f.write_all(b"\n")?;
    }
    std::fs::rename(tmp, path)
}

/// The OSU-style table of round-trip percentiles, in microseconds.
pub fn latency_table(results: &[PingResult]) -> String {
    let mut out = format!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10}   (round trip, µs)\n",
        "# Size", "p50", "p90", "p99", "p99.9", "max"
    );
    for r in results {
        out.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            r.size,
            micros(r.p50_ns),
            micros(r.p90_ns),
            micros(r.p99_ns),
            micros(r.p999_ns),
            micros(r.max_ns)
        ));
    }
    out
}

/// One size's figures in the bandwidth report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BwResult {
    /// Message size in bytes.
    pub size: usize,
    /// Messages delivered in the timed windows.
    pub messages: u64,
    /// Bytes delivered in the timed windows.
    pub bytes: u64,
    /// Duration of the timed windows.
    pub seconds: f64,
    /// 10^6 bytes per second.
    pub mbytes_per_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// Messages per window (the receiver acknowledged each window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// Normal and open channels: messages in flight (channels with a posted
    /// buffer each, or slots of the open channel's region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
    /// With `--memcpy`: the bandwidth of copying messages of this size from
    /// one buffer to another in the sending thread, measured in the same
    /// run (the baseline of shared-memory methods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_mbytes_per_s: Option<f64>,
}

impl BwResult {
    /// The same with the window and the messages in flight it ran with.
    pub fn with_plan(mut self, window: u32, channels: Option<usize>) -> Self {
        self.window = Some(window);
        self.channels = channels;
        self
    }

    /// The entry for `messages` of `size` bytes delivered in `seconds`.
    pub fn new(size: usize, messages: u64, seconds: f64) -> Self {
        let bytes = messages * size as u64;
        let rate = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        BwResult {
            size,
            messages,
            bytes,
            seconds,
            mbytes_per_s: rate(bytes as f64 / 1e6),
            msgs_per_s: rate(messages as f64),
            window: None,
            channels: None,
            memcpy_mbytes_per_s: None,
        }
    }
}

/// The receiver's verify counts in the bandwidth report.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VerifyReport {
    /// Distinct intact messages.
    pub delivered: u64,
    /// Messages that never arrived.
    pub lost: u64,
    /// Intact messages that arrived again.
    pub duplicated: u64,
    /// Intact messages that arrived after a later one.
    pub out_of_order: u64,
    /// Damaged messages.
    pub corrupted: u64,
}

/// Transport counters of the bandwidth report.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BwCounters {
    /// Frames retransmitted by the transport (both ends when known).
    pub retransmits: u64,
    /// Frames dropped as malformed, corrupted or foreign (both ends when
    /// known).
    pub bad_frames: u64,
    /// DATA frames the transport sent for the first time (both ends when
    /// known; BCL only): the base of a retransmission rate.
    #[serde(default)]
    pub data_frames: u64,
    /// Times congestion control shrank a window (the sending end; BCL
    /// only).
    #[serde(default)]
    pub congestion_decreases: u64,
    /// Times new data waited for pacing (the sending end; BCL only).
    #[serde(default)]
    pub pacing_waits: u64,
}

/// The `--json` output of `bcl-bw`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BwReport {
    /// Always `bcl-bw`.
    pub tool: String,
    /// The method measured.
    pub method: String,
    /// Where BCL's data messages landed: `system` (the system channel,
    /// eager messages; also written for the channel-less kernel baselines),
    /// `normal` (normal channels, rendezvous) or `open` (an open channel,
    /// RMA puts).
    pub channel: String,
    /// `busy-poll` or `blocking`.
    pub mode: String,
    /// This side: `sender` or `receiver`.
    pub role: String,
    /// One entry per size (the sender's measurements; the receiver's report
    /// repeats none).
    pub results: Vec<BwResult>,
    /// Present with `--verify`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyReport>,
    /// Counters.
    pub counters: BwCounters,
    /// With `--rails`: this side's traffic on each rail, in rail order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<RailReport>,
}

/// One rail of a multi-rail run (`--rails`), as this side saw it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RailReport {
    /// The rail's method.
    pub method: String,
    /// This side's descriptor on it (its NIC).
    pub local: String,
    /// `up`, `down (timeouts)` or `down (link)` at the end of the run.
    pub state: String,
    /// Frames sent on it (first sendings and resends).
    pub frames_sent: u64,
    /// Payload bytes sent on it.
    pub bytes_sent: u64,
    /// Payload bytes sent on it and acknowledged.
    pub bytes_delivered: u64,
    /// Frames received on it.
    pub frames_received: u64,
    /// Times it was taken out of service.
    pub downs: u32,
}

/// The OSU-style bandwidth table (with memcpy columns when measured).
pub fn bandwidth_table(results: &[BwResult]) -> String {
    let memcpy = results.iter().any(|r| r.memcpy_mbytes_per_s.is_some());
    let mut out = format!(
        "{:>10} {:>14} {:>14} {:>12}",
        "# Size", "MB/s", "Messages/s", "Messages"
    );
    if memcpy {
        out.push_str(&format!(" {:>14} {:>10}", "memcpy MB/s", "/ memcpy"));
    }
    out.push('\n');
    for r in results {
        out.push_str(&format!(
            "{:>10} {:>14.2} {:>14.0} {:>12}",
            r.size, r.mbytes_per_s, r.msgs_per_s, r.messages
        ));
        if let Some(m) = r.memcpy_mbytes_per_s {
            let ratio = if m > 0.0 { r.mbytes_per_s / m } else { 0.0 };
            out.push_str(&format!(" {m:>14.2} {ratio:>10.2}"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_json_has_the_contract_fields() {
        let report = BwReport {
            tool: "bcl-bw".into(),
            method: "udp".into(),
            channel: "system".into(),
            mode: "blocking".into(),
            role: "sender".into(),
            results: vec![BwResult::new(65536, 10, 0.5)],
            verify: Some(VerifyReport::default()),
            counters: BwCounters::default(),
            rails: Vec::new(),
        };
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert!(v.get("rails").is_none(), "no rails key without --rails");
        for key in ["tool", "method", "channel", "results", "verify", "counters"] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        let r = &v["results"][0];
        for key in [
            "size",
            "messages",
            "bytes",
            "seconds",
            "mbytes_per_s",
            "msgs_per_s",
        ] {
            assert!(r.get(key).is_some(), "missing results.{key}");
        }
        assert_eq!(r["bytes"], 655_360);
        assert!((r["mbytes_per_s"].as_f64().unwrap() - 1.31072).abs() < 1e-9);
        for key in [
            "delivered",
            "lost",
            "duplicated",
            "out_of_order",
            "corrupted",
        ] {
            assert!(v["verify"].get(key).is_some(), "missing verify.{key}");
        }
        for key in ["retransmits", "bad_frames"] {
            assert!(v["counters"].get(key).is_some(), "missing counters.{key}");
        }
        assert!(bandwidth_table(&report.results).contains("1.31"));
    }

    #[test]
    fn json_has_the_contract_fields() {
        let report = PingReport {
            tool: "bcl-pingpong".into(),
            method: "sim".into(),
            mode: "busy-poll".into(),
            results: vec![PingResult::new(64, 10, &LatencySummary::default())],
            first_contact_ns: 5,
            counters: PingCounters::default(),
        };
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        for key in [
            "tool",
            "method",
            "mode",
            "results",
            "first_contact_ns",
            "counters",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        let r = &v["results"][0];
        for key in [
            "size", "iters", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "mean_ns", "rtt",
        ] {
            assert!(r.get(key).is_some(), "missing results.{key}");
        }
        for key in [
            "sent",
            "received",
            "lost",
            "duplicates",
            "corrupt",
            "retransmits",
            "bad_frames",
        ] {
            assert!(v["counters"].get(key).is_some(), "missing counters.{key}");
        }
    }
}
