//! `bcl-plot`'s input: the tools' `--json` reports (shapes fixed by
//! `shared/contracts/tools.md`), read into chart series. Only the fields a
//! chart needs are required, so older reports and reports with added fields
//! plot alike. Every error names the file it is about.

use super::{run_label, Chart, LatencySeries, Quantity, SizePanel, SizeSeries};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A `bcl-pingpong` report, as far as a chart needs it.
#[derive(Clone, Debug, Deserialize)]
pub struct PingFile {
    /// The method measured.
    pub method: String,
    /// `busy-poll` or `blocking`.
    #[serde(default)]
    pub mode: Option<String>,
    /// One entry per size.
    pub results: Vec<PingFileResult>,
}

/// One size of a pingpong report.
#[derive(Clone, Debug, Deserialize)]
pub struct PingFileResult {
    /// Message size in bytes.
    pub size: usize,
    /// Timed round trips.
    pub iters: u64,
    /// Percentiles of the round trip, ns.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// The whole distribution, (quantile, ns), when the report has it.
    #[serde(default)]
    pub distribution: Option<Vec<(f64, u64)>>,
}

impl PingFileResult {
    /// The percentile curve: the report's distribution, or else the five
    /// summary points (p50, p90, p99, p99.9, max).
    pub fn points(&self) -> Vec<(f64, u64)> {
        match &self.distribution {
            Some(d) if !d.is_empty() => d.clone(),
            _ => vec![
                (0.5, self.p50_ns),
                (0.9, self.p90_ns),
                (0.99, self.p99_ns),
                (0.999, self.p999_ns),
                (1.0, self.max_ns),
            ],
        }
    }
}

/// A `bcl-bw` report, as far as a chart needs it.
#[derive(Clone, Debug, Deserialize)]
pub struct BwFile {
    /// The method measured.
    pub method: String,
    /// `system`, `normal` or `open`.
    #[serde(default)]
    pub channel: Option<String>,
    /// `busy-poll` or `blocking`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `sender` or `receiver`.
    #[serde(default)]
    pub role: Option<String>,
    /// One entry per size (the sender's; a receiver's report has none).
    pub results: Vec<BwFileResult>,
}

/// One size of a bw report.
#[derive(Clone, Debug, Deserialize)]
pub struct BwFileResult {
    /// Message size in bytes.
    pub size: usize,
    /// 10^6 bytes per second.
    pub mbytes_per_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
}

/// A report read from a file.
#[derive(Clone, Debug)]
pub enum Report {
    /// `"tool": "bcl-pingpong"`.
    Ping(PingFile),
    /// `"tool": "bcl-bw"`.
    Bw(BwFile),
}

impl Report {
    fn tool(&self) -> &'static str {
        match self {
            Report::Ping(_) => "bcl-pingpong",
            Report::Bw(_) => "bcl-bw",
        }
    }
}

/// Reads one report. Errors say which file and what is wrong with it:
/// unreadable, empty, not JSON, not a report, a tool that is not charted,
/// or no results.
pub fn read(path: &Path) -> Result<Report, String> {
    let p = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{p}: cannot read: {e}"))?;
    if text.trim().is_empty() {
        return Err(format!(
            "{p}: empty file (expected the --json report of bcl-pingpong or bcl-bw)"
        ));
    }
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{p}: not JSON: {e}"))?;
    let tool = value.get("tool").and_then(|t| t.as_str()).ok_or_else(|| {
        format!("{p}: no \"tool\" field: not a --json report of bcl-pingpong or bcl-bw")
    })?;
    let shape =
        |e: serde_json::Error| format!("{p}: not a {tool} report as the tool writes it: {e}");
    let report = match tool {
        "bcl-pingpong" => Report::Ping(PingFile::deserialize(&value).map_err(shape)?),
        "bcl-bw" => Report::Bw(BwFile::deserialize(&value).map_err(shape)?),
        other => {
            return Err(format!(
                "{p}: a {other} report; bcl-plot draws bcl-pingpong and bcl-bw reports"
            ))
        }
    };
    let empty = match &report {
        Report::Ping(f) => f.results.is_empty(),
        Report::Bw(f) => f.results.is_empty(),
    };
    if empty {
        let hint = match &report {
            Report::Bw(f) if f.role.as_deref() == Some("receiver") => {
                " (a receiver's report: plot the sender's, the --connect side)"
            }
            _ => "",
        };
        return Err(format!("{p}: no results{hint}"));
    }
    Ok(report)
}

/// What `bcl-plot` was asked to draw.
#[derive(Clone, Debug, Default)]
pub struct PlotRequest {
    /// The reports, in legend order.
    pub files: Vec<PathBuf>,
    /// Pingpong reports: this size only.
    pub size: Option<usize>,
    /// bw reports: message rate instead of bandwidth.
    pub rate: bool,
    /// Caption instead of the default one.
    pub title: Option<String>,
}

/// Makes equal labels distinct by adding their file's name.
fn disambiguate(labels: &mut [(String, &Path)]) {
    let dup: Vec<bool> = labels
        .iter()
        .map(|(l, _)| labels.iter().filter(|(m, _)| m == l).count() > 1)
        .collect();
    for ((label, path), d) in labels.iter_mut().zip(dup) {
        if d {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            label.push_str(&format!(" [{name}]"));
        }
    }
}

/// Reads the request's reports and makes their chart: pingpong reports
/// as percentile curves (every size, or `size`), bw reports as bandwidth
/// (or rate) against size, one curve per file, labelled by tool, method and
/// mode (`bcl-pingpong kernel-udp (busy-poll)`), so BCL and its baselines
/// are told apart. Refuses a mix of pingpong
/// and bw reports, options that do not apply to the reports' tool, and a
/// `size` a report does not have.
pub fn chart(req: &PlotRequest) -> Result<Chart, String> {
    if req.files.is_empty() {
        return Err("no report given: bcl-plot FILE.json... -o CHART.svg".into());
    }
    let mut reports = Vec::new();
    for f in &req.files {
        reports.push((f.as_path(), read(f)?));
    }
    let (first_path, first) = (&reports[0].0, &reports[0].1);
    if let Some((other_path, other)) = reports.iter().find(|(_, r)| r.tool() != first.tool()) {
        return Err(format!(
            "cannot draw bcl-pingpong and bcl-bw reports on one chart: {} is a {} report, {} a {} report",
            first_path.display(),
            first.tool(),
            other_path.display(),
            other.tool()
        ));
    }
    match first {
        Report::Ping(_) => {
            if req.rate {
                return Err(
                    "--rate applies to bcl-bw reports; these are bcl-pingpong reports".into(),
                );
            }
            latency_chart(&reports, req)
        }
        Report::Bw(_) => {
            if req.size.is_some() {
                return Err(
                    "--size applies to bcl-pingpong reports; these are bcl-bw reports (every size is on the x axis)"
                        .into(),
                );
            }
            size_chart(&reports, req)
        }
    }
}

fn latency_chart(reports: &[(&Path, Report)], req: &PlotRequest) -> Result<Chart, String> {
    let mut labelled: Vec<(String, &Path)> = Vec::new();
    let mut curves = Vec::new();
    for (path, r) in reports {
        let Report::Ping(f) = r else { continue };
        let run = format!(
            "bcl-pingpong {}",
            run_label(&f.method, None, f.mode.as_deref())
        );
        let chosen: Vec<&PingFileResult> = match req.size {
            Some(size) => {
                let r = f.results.iter().find(|r| r.size == size).ok_or_else(|| {
                    let have: Vec<String> = f.results.iter().map(|r| r.size.to_string()).collect();
                    format!(
                        "{}: no results for --size {size} (it has {})",
                        path.display(),
                        have.join(", ")
                    )
                })?;
                vec![r]
            }
            None => f.results.iter().collect(),
        };
        for r in chosen {
            let label = match req.size {
                Some(_) => run.clone(),
                None => format!("{run}, {}", super::size_label(r.size)),
            };
            labelled.push((label, path));
            curves.push((r.iters, r.points()));
        }
    }
    disambiguate(&mut labelled);
    let series = labelled
        .into_iter()
        .zip(curves)
        .map(|((label, _), (count, points))| LatencySeries {
            label,
            count,
            points,
        })
        .collect();
    let title = req.title.clone().unwrap_or_else(|| match req.size {
        Some(s) => format!("round trip by percentile, {}", super::size_label(s)),
        None => "round trip by percentile".into(),
    });
    Ok(Chart::Latency { title, series })
}

fn size_chart(reports: &[(&Path, Report)], req: &PlotRequest) -> Result<Chart, String> {
    let mut labelled: Vec<(String, &Path)> = Vec::new();
    let mut points = Vec::new();
    for (path, r) in reports {
        let Report::Bw(f) = r else { continue };
        labelled.push((
            format!(
                "bcl-bw {}",
                run_label(&f.method, f.channel.as_deref(), f.mode.as_deref())
            ),
            path,
        ));
        let mut p: Vec<(usize, f64)> = f
            .results
            .iter()
            .map(|r| {
                (
                    r.size,
                    if req.rate {
                        r.msgs_per_s
                    } else {
                        r.mbytes_per_s
                    },
                )
            })
            .collect();
        p.sort_by_key(|x| x.0);
        points.push(p);
    }
    disambiguate(&mut labelled);
    let series = labelled
        .into_iter()
        .zip(points)
        .map(|((label, _), points)| SizeSeries { label, points })
        .collect();
    let (quantity, what) = if req.rate {
        (Quantity::Rate, "message rate")
    } else {
        (Quantity::Bandwidth, "bandwidth")
    };
    Ok(Chart::Size {
        title: req
            .title
            .clone()
            .unwrap_or_else(|| format!("{what} against message size")),
        panels: vec![SizePanel { quantity, series }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const PING: &str = r#"{"tool": "bcl-pingpong", "method": "shm", "mode": "busy-poll",
        "results": [{"size": 8, "iters": 1000, "p50_ns": 500, "p90_ns": 600, "p99_ns": 900,
                     "p999_ns": 2000, "max_ns": 9000, "mean_ns": 520, "rtt": true},
                    {"size": 64, "iters": 1000, "p50_ns": 510, "p90_ns": 610, "p99_ns": 910,
                     "p999_ns": 2010, "max_ns": 9010, "mean_ns": 530, "rtt": true,
                     "distribution": [[0.0, 400], [0.5, 510], [1.0, 9010]]}],
        "first_contact_ns": 1, "counters": {}}"#;
    const BW: &str = r#"{"tool": "bcl-bw", "method": "shm", "channel": "normal", "mode": "blocking",
        "role": "sender", "results": [{"size": 1024, "messages": 1, "bytes": 1, "seconds": 1.0,
        "mbytes_per_s": 100.0, "msgs_per_s": 97656.0}], "counters": {}}"#;

    #[test]
    fn reports_become_curves() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a.json", PING);
        let b = file(dir.path(), "b.json", PING);
        let req = PlotRequest {
            files: vec![a.clone(), b],
            ..Default::default()
        };
        let Chart::Latency { series, .. } = chart(&req).unwrap() else {
            panic!("a latency chart")
        };
        assert_eq!(series.len(), 4);
        assert_eq!(
            series[0].label,
            "bcl-pingpong shm (busy-poll), 8 B [a.json]"
        );
        // The summary when there is no distribution, else the distribution.
        assert_eq!(series[0].points.len(), 5);
        assert_eq!(series[1].points, vec![(0.0, 400), (0.5, 510), (1.0, 9010)]);
        let req = PlotRequest {
            files: vec![a.clone()],
            size: Some(64),
            ..Default::default()
        };
        let Chart::Latency { series, .. } = chart(&req).unwrap() else {
            panic!("a latency chart")
        };
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].label, "bcl-pingpong shm (busy-poll)");
        let req = PlotRequest {
            files: vec![a],
            size: Some(4096),
            ..Default::default()
        };
        let e = chart(&req).unwrap_err();
        assert!(e.contains("a.json") && e.contains("8, 64"), "{e}");
    }

    #[test]
    fn bw_reports_become_bandwidth_or_rate() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a.json", BW);
        let req = PlotRequest {
            files: vec![a.clone()],
            rate: true,
            ..Default::default()
        };
        let Chart::Size { panels, .. } = chart(&req).unwrap() else {
            panic!("a size chart")
        };
        assert_eq!(panels[0].quantity, Quantity::Rate);
        assert_eq!(panels[0].series[0].label, "bcl-bw shm (normal, blocking)");
        assert_eq!(panels[0].series[0].points, vec![(1024, 97656.0)]);
        let req = PlotRequest {
            files: vec![a],
            size: Some(64),
            ..Default::default()
        };
        assert!(chart(&req).unwrap_err().contains("--size applies"));
    }

    #[test]
    fn bad_inputs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ping = file(dir.path(), "p.json", PING);
        let bw = file(dir.path(), "w.json", BW);
        let req = PlotRequest {
            files: vec![ping, bw],
            ..Default::default()
        };
        let e = chart(&req).unwrap_err();
        assert!(e.contains("cannot draw bcl-pingpong and bcl-bw"), "{e}");
        assert!(e.contains("p.json") && e.contains("w.json"), "{e}");
        for (name, text, want) in [
            ("empty.json", "  \n", "empty file"),
            ("junk.json", "{not json", "not JSON"),
            ("notool.json", "{\"results\": []}", "no \"tool\""),
            ("loggp.json", "{\"tool\": \"bcl-loggp\"}", "a bcl-loggp report"),
            (
                "shape.json",
                "{\"tool\": \"bcl-bw\", \"method\": 3, \"results\": []}",
                "not a bcl-bw report",
            ),
            (
                "recv.json",
                "{\"tool\": \"bcl-bw\", \"method\": \"udp\", \"role\": \"receiver\", \"results\": []}",
                "receiver",
            ),
        ] {
            let p = file(dir.path(), name, text);
            let e = read(&p).unwrap_err();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(want), "{name}: {e}");
        }
        let e = read(&dir.path().join("missing.json")).unwrap_err();
        assert!(e.contains("missing.json: cannot read"), "{e}");
    }
}
