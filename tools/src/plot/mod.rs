//! Charts of the tools' results, drawn with plotters to SVG or PNG (chosen
//! by the file's extension):
//!
//! - [`Chart::Latency`]: round-trip latency against percentile, one curve
//!   per run and message size (`bcl-pingpong --plot`, `bcl-plot` over
//!   pingpong reports). The percentile axis is the one HdrHistogram's
//!   plotter draws: 1/(1−p) on a log scale, labelled 0 %, 90 %, 99 %,
//!   99.9 %…, so each decade of the axis is one more "nine" and the tail
//!   gets as much room as the body.
//! - [`Chart::Size`]: bandwidth (MB/s) or message rate against message size
//!   on a log axis, one curve per run, one panel per quantity (`bcl-bw
//!   --plot` draws both panels, `bcl-plot` one).
//!
//! Text needs a font ([`font`]). [`reports`] turns the tools' `--json`
//! files into charts for `bcl-plot`.

pub mod font;
pub mod reports;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Width of every chart, in pixels (SVG user units).
const WIDTH: u32 = 1000;
/// Height of the latency chart and of one panel of a size chart.
const PANEL_HEIGHT: u32 = 560;
/// Stroke width of a data curve: the legend's swatches are filled boxes and
/// the axes 1 pixel wide, so in an SVG the polylines of this width are
/// exactly the curves.
pub const CURVE_WIDTH: u32 = 2;
/// Curves with at most this many points also get a marker at each point
/// (a size sweep, a summary read from JSON), so sparse data is not
/// mistaken for a measured line.
const MARKED_POINTS: usize = 16;

/// The file format of a chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics (text stays text).
    Svg,
    /// A bitmap, PNG-encoded.
    Png,
}

impl Format {
    /// The format named by `path`'s extension (`.svg` or `.png`, any case).
    pub fn of(path: &Path) -> Result<Format, String> {
        let ext = path.extension().and_then(|e| e.to_str());
        match ext.map(str::to_ascii_lowercase).as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            Some(other) => Err(format!(
                "{}: unknown chart format .{other}: name the file FILE.svg or FILE.png",
                path.display()
            )),
            None => Err(format!(
                "{}: no extension to choose the chart format: name the file FILE.svg or FILE.png",
                path.display()
            )),
        }
    }
}

/// Where a chart goes: a path whose extension names a known [`Format`]
/// (checked when the command line is parsed, before anything is measured).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotFile {
    /// The file to write.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
}

impl std::str::FromStr for PlotFile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let path = PathBuf::from(s);
        let format = Format::of(&path)?;
        Ok(PlotFile { path, format })
    }
}

/// One curve of a latency chart: the percentile distribution of one run
/// and message size.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySeries {
    /// Legend text.
    pub label: String,
    /// Samples behind the distribution. The largest sample is drawn at the
    /// percentile 1 − 1/count (1/(1−p) = count), where a histogram of
    /// `count` samples puts it, rather than at 100 % (infinitely far on
    /// this axis).
    pub count: u64,
    /// (quantile in 0..=1, round trip in ns), by ascending quantile.
    pub points: Vec<(f64, u64)>,
}

/// One curve of a size chart.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeSeries {
    /// Legend text.
    pub label: String,
    /// (message size in bytes, value), by ascending size.
    pub points: Vec<(usize, f64)>,
}

/// What a size chart's panel shows on its y axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// MB/s (10^6 bytes per second), on a linear axis from 0, or a log
    /// axis when the values span more than [`LOG_SPAN`] (small messages
    /// against large ones, or memcpy beside a network), where a linear axis
    /// would flatten the smaller curves onto 0.
    Bandwidth,
    /// Messages per second, on a log axis (small and large messages differ
    /// by orders of magnitude).
    Rate,
}

/// The ratio of largest to smallest positive value beyond which a
/// bandwidth axis is logarithmic.
pub const LOG_SPAN: f64 = 100.0;

impl Quantity {
    /// The y axis's label, on a log axis or not.
    pub fn axis_label(self, log: bool) -> &'static str {
        match (self, log) {
            (Quantity::Bandwidth, false) => "bandwidth (MB/s, 10^6 bytes per second)",
            (Quantity::Bandwidth, true) => "bandwidth (MB/s, 10^6 bytes per second, log scale)",
            (Quantity::Rate, _) => "message rate (messages/s, log scale)",
        }
    }
}

/// One panel of a size chart.
#[derive(Clone, Debug, PartialEq)]
pub struct SizePanel {
    /// Its y axis.
    pub quantity: Quantity,
    /// Its curves.
    pub series: Vec<SizeSeries>,
}

/// A chart, ready to be written.
#[derive(Clone, Debug, PartialEq)]
pub enum Chart {
    /// Round trip against percentile.
    Latency {
        /// Caption.
        title: String,
        /// Curves.
        series: Vec<LatencySeries>,
    },
    /// Bandwidth or message rate against message size, panels stacked.
    Size {
        /// Caption.
        title: String,
        /// Panels, top to bottom.
        panels: Vec<SizePanel>,
    },
}

/// The label of the x axis of latency charts.
pub const PERCENTILE_AXIS: &str = "percentile (log scale of 1/(1-p), as HdrHistogram plots)";
/// The label of the y axis of latency charts.
pub const ROUND_TRIP_AXIS: &str = "round trip (µs)";
/// The label of the x axis of size charts.
pub const SIZE_AXIS: &str = "message size (bytes, log scale)";

/// Curve colours (Tableau 10: distinct, readable on white), in series
/// order; a curve and its legend swatch share one.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The percentile at 1/(1−p) = `x` as the axis shows it: 1 → "0%",
/// 10 → "90%", 100 → "99%", 1000 → "99.9%".
pub fn percentile_label(x: f64) -> String {
    if x < 1.5 {
        return "0%".into();
    }
    let decades = x.log10().round() as usize;
    match decades {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        n => format!("99.{}%", "9".repeat(n - 2)),
    }
}

/// Where a quantile lies on the percentile axis: 1/(1−q), at most `count`
/// (see [`LatencySeries::count`]).
pub fn percentile_x(q: f64, count: u64) -> f64 {
    let cap = count.max(2) as f64;
    if q >= 1.0 {
        return cap;
    }
    (1.0 / (1.0 - q.max(0.0))).min(cap)
}

/// A run's legend text: `method (mode)`, with a bw run's channel when it
/// is not the system channel: `shm (normal, busy-poll)`.
pub fn run_label(method: &str, channel: Option<&str>, mode: Option<&str>) -> String {
    let mut what: Vec<&str> = Vec::new();
    if let Some(c) = channel.filter(|c| *c != "system") {
        what.push(c);
    }
    if let Some(m) = mode {
        what.push(m);
    }
    if what.is_empty() {
        method.to_string()
    } else {
        format!("{method} ({})", what.join(", "))
    }
}

/// A message size as the axis shows it: 64 B, 1 KiB, 4 MiB.
pub fn size_label(bytes: usize) -> String {
    const KI: usize = 1024;
    match bytes {
        b if b >= KI * KI && b % (KI * KI) == 0 => format!("{} MiB", b / (KI * KI)),
        b if b >= KI && b % KI == 0 => format!("{} KiB", b / KI),
        b => format!("{b} B"),
    }
}

/// A count with an SI suffix: 2500 → "2.5k", 3e6 → "3M".
fn si_label(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.1}");
    format!("{}{suffix}", text.trim_end_matches(".0"))
}

/// `plotters` errors as text.
fn drawing<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    format!("drawing the chart: {e}")
}

impl Chart {
    /// The chart's size in pixels.
    fn pixels(&self) -> (u32, u32) {
        match self {
            Chart::Latency { .. } => (WIDTH, PANEL_HEIGHT),
            Chart::Size { panels, .. } => (WIDTH, PANEL_HEIGHT * panels.len().max(1) as u32),
        }
    }

    /// Draws the chart into `file` (SVG or PNG by its format). Needs the
    /// font ([`font::load`]); the file is written whole or not at all (a
    /// temporary file renamed into place). Errors name the file.
    pub fn write(&self, file: &PlotFile) -> Result<(), String> {
        font::load()?;
        let path = &file.path;
        let size = self.pixels();
        let bytes = match file.format {
            Format::Svg => {
                let mut svg = String::new();
                {
                    let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                    self.draw(&root)?;
                    root.present().map_err(drawing)?;
                }
                svg.into_bytes()
            }
            Format::Png => {
                let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
                {
                    let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                    self.draw(&root)?;
                    root.present().map_err(drawing)?;
                }
                encode_png(&rgb, size).map_err(|e| format!("{}: {e}", path.display()))?
            }
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("cannot write the chart {}: {e}", path.display())
            })
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(drawing)?;
        match self {
            Chart::Latency { title, series } => draw_latency(root, title, series),
            Chart::Size { title, panels } => {
                let body = root.titled(title, (font::FAMILY, 24)).map_err(drawing)?;
                let areas = body.split_evenly((panels.len().max(1), 1));
                for (area, panel) in areas.iter().zip(panels) {
                    draw_size_panel(area, panel)?;
                }
                Ok(())
            }
        }
    }
}

/// PNG of an RGB buffer.
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc
        .write_header()
        .map_err(|e| format!("encoding PNG: {e}"))?;
    writer
        .write_image_data(rgb)
        .map_err(|e| format!("encoding PNG: {e}"))?;
    writer.finish().map_err(|e| format!("encoding PNG: {e}"))?;
    Ok(out)
}

/// A curve to draw: legend, colour, points in chart coordinates.
struct Curve<'a> {
    label: &'a str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// How a y axis maps values.
#[derive(Clone, Copy, Debug, PartialEq)]
enum YScale {
    /// From 0 to `end`.
    Linear { end: f64 },
    /// From `lo` to `hi`, logarithmic (both positive).
    Log { lo: f64, hi: f64 },
}

/// The text around a panel's plotting area.
struct Axes<'a> {
    caption: Option<&'a str>,
    x_desc: &'a str,
    x_label: &'a dyn Fn(&f64) -> String,
    y_desc: &'a str,
    y_label: &'a dyn Fn(&f64) -> String,
    /// Where the legend goes: a corner the curves usually leave empty.
    legend: SeriesLabelPosition,
}

/// Ticks of a log axis from `lo` to `hi`: 1, 2, 5 times the powers of 10
/// (decades only when that would be more than 12 ticks).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let within = |m: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|k| m.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    };
    let ticks = within(&[1.0, 2.0, 5.0]);
    if ticks.len() > 12 {
        within(&[1.0])
    } else {
        ticks
    }
}

/// The largest of 1, 2, 5 times a power of 10 at or below `v` (> 0): the
/// lower end of a log axis, so that its first tick is at the bottom.
fn nice_floor(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * decade)
        .find(|t| *t <= v)
        .unwrap_or(decade)
}

/// A number with at most three significant digits and no trailing zeros:
/// 40000, 12.5, 0.84.
fn number_label(v: f64) -> String {
    let decimals = match v.abs() {
        a if a >= 100.0 || a == 0.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Draws one panel: axes, mesh, curves (lines, and markers on sparse ones;
/// on a log axis, points at or below 0 are left out), and the legend.
fn draw_panel<DB, X>(
    area: &DrawingArea<DB, Shift>,
    axes: &Axes<'_>,
    x: X,
    y: YScale,
    curves: Vec<Curve<'_>>,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut builder = ChartBuilder::on(area);
    if let Some(c) = axes.caption {
        builder.caption(c, (font::FAMILY, 24));
    }
    builder
        .margin(16)
        .margin_right(40)
        .x_label_area_size(56)
        .y_label_area_size(80);
    match y {
        YScale::Linear { end } => {
            let y: RangedCoordf64 = (0.0..end).into();
            let mut chart = builder.build_cartesian_2d(x, y).map_err(drawing)?;
            finish_panel(&mut chart, axes, curves)
        }
        YScale::Log { lo, hi } => {
            let y = (lo..hi).log_scale().with_key_points(log_ticks(lo, hi));
            let mut chart = builder.build_cartesian_2d(x, y).map_err(drawing)?;
            let curves = curves
                .into_iter()
                .map(|mut c| {
                    c.points.retain(|p| p.1 > 0.0);
                    c
                })
                .collect();
            finish_panel(&mut chart, axes, curves)
        }
    }
}

fn finish_panel<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    axes: &Axes<'_>,
    curves: Vec<Curve<'_>>,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(axes.x_label)
        .y_label_formatter(axes.y_label)
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.12))
        .label_style((font::FAMILY, 14))
        .axis_desc_style((font::FAMILY, 16))
        .draw()
        .map_err(drawing)?;
    for c in curves {
        let color = c.color;
        chart
            .draw_series(LineSeries::new(
                c.points.iter().copied(),
                color.stroke_width(CURVE_WIDTH),
            ))
            .map_err(drawing)?
            .label(c.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.filled()));
        if c.points.len() <= MARKED_POINTS {
            chart
                .draw_series(c.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(drawing)?;
        }
    }
    chart
        .configure_series_labels()
        .position(axes.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((font::FAMILY, 15))
        .draw()
        .map_err(drawing)
}

/// The y scale of a latency chart: linear from 0, as HdrHistogram's
/// plotter draws it, unless the tail reaches beyond 20 times the lowest
/// median; then logarithmic, or the body of the distribution would be a
/// flat line at the bottom.
fn latency_scale(series: &[LatencySeries]) -> YScale {
    let us = |ns: u64| ns as f64 / 1000.0;
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| us(p.1)));
    let top = values().fold(0.0f64, f64::max);
    let median = series
        .iter()
        .filter_map(|s| s.points.iter().find(|p| p.0 >= 0.5).map(|p| us(p.1)))
        .fold(f64::INFINITY, f64::min);
    if median.is_finite() && median > 0.0 && top > 20.0 * median {
        let bottom = values().filter(|v| *v > 0.0).fold(top, f64::min);
        YScale::Log {
            lo: nice_floor(bottom / 1.2),
            hi: top * 1.5,
        }
    } else {
        YScale::Linear {
            end: (top * 1.08).max(0.001),
        }
    }
}

fn draw_latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[LatencySeries],
) -> Result<(), String> {
    let most = series.iter().map(|s| s.count).max().unwrap_or(100);
    // Whole decades, at least up to 99 %.
    let decades = ((most.max(2) as f64).log10().ceil() as i32).max(2);
    let ticks: Vec<f64> = (0..=decades).map(|k| 10f64.powi(k)).collect();
    let x = (1f64..10f64.powi(decades))
        .log_scale()
        .with_key_points(ticks);
    let y = latency_scale(series);
    let y_desc = match y {
        YScale::Linear { .. } => ROUND_TRIP_AXIS.to_string(),
        YScale::Log { .. } => format!("{ROUND_TRIP_AXIS}, log scale"),
    };
    let axes = Axes {
        caption: Some(title),
        x_desc: PERCENTILE_AXIS,
        x_label: &|x| percentile_label(*x),
        y_desc: &y_desc,
        y_label: &|y| number_label(*y),
        legend: SeriesLabelPosition::UpperLeft,
    };
    let curves = series
        .iter()
        .enumerate()
        .map(|(i, s)| Curve {
            label: &s.label,
            color: PALETTE[i % PALETTE.len()],
            points: s
                .points
                .iter()
                .map(|&(q, ns)| (percentile_x(q, s.count), ns as f64 / 1000.0))
                .collect(),
        })
        .collect();
    draw_panel(root, &axes, x, y, curves)
}

/// The x axis's ticks: every size measured, thinned to at most 12.
fn size_ticks(series: &[SizeSeries]) -> Vec<f64> {
    let mut sizes: Vec<usize> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let step = sizes.len().div_ceil(12).max(1);
    sizes.iter().step_by(step).map(|s| *s as f64).collect()
}

/// The y scale of a size chart's panel: message rates on a log axis;
/// bandwidth linear from 0 unless its values span more than [`LOG_SPAN`].
fn size_scale(panel: &SizePanel) -> YScale {
    let values = || {
        panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
    };
    let top = values().fold(0.0f64, f64::max);
    let bottom = values().filter(|v| *v > 0.0).fold(top, f64::min);
    let log = match panel.quantity {
        Quantity::Bandwidth => top > LOG_SPAN * bottom,
        Quantity::Rate => true,
    };
    if log {
        let top = top.max(1.0);
        YScale::Log {
            lo: nice_floor(bottom.clamp(f64::MIN_POSITIVE, top) / 1.2),
            hi: top * 2.0,
        }
    } else {
        YScale::Linear {
            end: (top * 1.1).max(1.0),
        }
    }
}

fn draw_size_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &SizePanel,
) -> Result<(), String> {
    let sizes = size_ticks(&panel.series);
    let (lo, hi) = match (sizes.first(), sizes.last()) {
        (Some(a), Some(b)) => (*a, *b),
        _ => (1.0, 1024.0),
    };
    let x = ((lo / 1.5)..(hi * 1.5)).log_scale().with_key_points(sizes);
    let y = size_scale(panel);
    let log = matches!(y, YScale::Log { .. });
    let (y_label, legend): (&dyn Fn(&f64) -> String, _) = match panel.quantity {
        // Bandwidth rises with size: the upper left is free.
        Quantity::Bandwidth => (&|v| number_label(*v), SeriesLabelPosition::UpperLeft),
        // The rate falls with size: the upper right is free.
        Quantity::Rate => (&|v| si_label(*v), SeriesLabelPosition::UpperRight),
    };
    let axes = Axes {
        caption: None,
        x_desc: SIZE_AXIS,
        x_label: &|x| size_label(x.round() as usize),
        y_desc: panel.quantity.axis_label(log),
        y_label,
        legend,
    };
    let curves = panel
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| Curve {
            label: &s.label,
            color: PALETTE[i % PALETTE.len()],
            points: s.points.iter().map(|&(size, v)| (size as f64, v)).collect(),
        })
        .collect();
    draw_panel(area, &axes, x, y, curves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_axis_counts_nines() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e5), "99.999%");
        assert_eq!(percentile_x(0.0, 100), 1.0);
        assert!((percentile_x(0.9, 100) - 10.0).abs() < 1e-9);
        // The largest sample sits at 1/(1-p) = count, not at infinity.
        assert_eq!(percentile_x(1.0, 1000), 1000.0);
        assert_eq!(percentile_x(0.9999, 1000), 1000.0);
    }

    #[test]
    fn labels_of_sizes_and_counts() {
        assert_eq!(size_label(64), "64 B");
        assert_eq!(size_label(1536), "1536 B");
        assert_eq!(size_label(65536), "64 KiB");
        assert_eq!(size_label(4 << 20), "4 MiB");
        assert_eq!(si_label(2500.0), "2.5k");
        assert_eq!(si_label(3e6), "3M");
        assert_eq!(si_label(12.0), "12");
    }

    #[test]
    fn the_extension_chooses_the_format() {
        assert_eq!(Format::of(Path::new("a/b.svg")), Ok(Format::Svg));
        assert_eq!(Format::of(Path::new("b.PNG")), Ok(Format::Png));
        let e = Format::of(Path::new("chart.pdf")).unwrap_err();
        assert!(e.contains("chart.pdf") && e.contains(".svg"), "{e}");
        let e = "chart".parse::<PlotFile>().unwrap_err();
        assert!(e.contains("chart") && e.contains("no extension"), "{e}");
    }

    #[test]
    fn log_ticks_and_numbers() {
        assert_eq!(log_ticks(0.3, 30.0), vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
        assert_eq!(log_ticks(1.0, 1e9).len(), 10);
        assert_eq!(nice_floor(0.9), 0.5);
        assert_eq!(nice_floor(3.0), 2.0);
        assert_eq!(nice_floor(70.0), 50.0);
        assert_eq!(nice_floor(10.0), 10.0);
        assert_eq!(number_label(40000.0), "40000");
        assert_eq!(number_label(12.5), "12.5");
        assert_eq!(number_label(0.84), "0.84");
        assert_eq!(number_label(2.0), "2");
    }

    #[test]
    fn latency_goes_log_when_the_tail_dwarfs_the_body() {
        let s = |max| LatencySeries {
            label: "x".into(),
            count: 100,
            points: vec![(0.0, 900), (0.5, 1000), (1.0, max)],
        };
        assert_eq!(latency_scale(&[s(2000)]), YScale::Linear { end: 2.16 });
        assert!(matches!(latency_scale(&[s(50_000)]), YScale::Log { .. }));
    }

    #[test]
    fn bandwidth_goes_log_when_it_spans_decades() {
        let panel = |values: &[f64]| SizePanel {
            quantity: Quantity::Bandwidth,
            series: vec![SizeSeries {
                label: "x".into(),
                points: values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (64 << i, *v))
                    .collect(),
            }],
        };
        assert_eq!(
            size_scale(&panel(&[100.0, 5000.0])),
            YScale::Linear { end: 5500.0 }
        );
        assert_eq!(
            size_scale(&panel(&[10.0, 5000.0])),
            YScale::Log {
                lo: 5.0,
                hi: 10000.0
            }
        );
        let rate = SizePanel {
            quantity: Quantity::Rate,
            ..panel(&[1000.0, 2000.0])
        };
        assert!(matches!(size_scale(&rate), YScale::Log { .. }));
    }

    #[test]
    fn size_ticks_are_the_sizes_thinned() {
        let s = SizeSeries {
            label: "x".into(),
            points: (4..30).map(|k| (1usize << k, 1.0)).collect(),
        };
        let t = size_ticks(&[s]);
        assert!(t.len() <= 12, "{t:?}");
        assert_eq!(t[0], 16.0);
    }
}
