//! Charts end to end, unprivileged: `bcl-pingpong --plot` and `bcl-bw
//! --plot` after short shm runs in this process (`--local`), and `bcl-plot`
//! over the tools' own `--json` reports. Checks what a reader relies on —
//! the file is well-formed SVG (parsed as XML) or PNG (signature and
//! header), one curve per series, the axis labels and the legend — and
//! that bad input gets an error naming the file. Nothing here depends on
//! how fast the runs were.

use bcl_tools::plot::{PALETTE, PERCENTILE_AXIS, SIZE_AXIS};
use plotters::style::RGBColor;
use std::path::Path;
use std::process::{Command, Output};

const PINGPONG: &str = env!("CARGO_BIN_EXE_bcl-pingpong");
const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");
const PLOT: &str = env!("CARGO_BIN_EXE_bcl-plot");

/// A short pingpong run: two sizes, few round trips.
const PING_ARGS: &[&str] = &[
    "--local", "--sizes", "8,64", "--iters", "200", "--warmup", "20",
];
/// A short bw sweep: two sizes, few windows.
const BW_ARGS: &[&str] = &[
    "--method", "shm", "--local", "--sizes", "64,1K", "--iters", "4", "--warmup", "1", "--window",
    "16",
];

fn run(bin: &str, args: &[&str], extra: &[&Path]) -> Output {
    let out = Command::new(bin).args(args).args(extra).output().unwrap();
    assert!(
        out.status.success(),
        "{bin} {args:?} {extra:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `bin` expecting failure; returns its standard error.
fn refused(bin: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{bin} {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a test needs of an SVG chart.
struct Svg {
    /// The data curves: polylines of the curve width (axes and ticks are
    /// 1 pixel wide, legend swatches are rectangles).
    curves: usize,
    /// Every text element, trimmed.
    texts: Vec<String>,
}

fn svg(path: &Path) -> Svg {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert!(doc.root_element().has_tag_name("svg"), "root is not <svg>");
    let width = bcl_tools::plot::CURVE_WIDTH.to_string();
    let curves = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some(&width))
        .count();
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    Svg { curves, texts }
}

/// A PNG's (width, height) and RGB pixels; checks its signature first.
fn decode_png(path: &Path) -> ((u32, u32), Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a decodable PNG");
    let mut rgb = vec![0; reader.output_buffer_size().expect("a sane size")];
    let frame = reader.next_frame(&mut rgb).expect("pixels");
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    rgb.truncate(frame.buffer_size());
    ((frame.width, frame.height), rgb)
}

fn has(svg: &Svg, text: &str) -> bool {
    svg.texts.iter().any(|t| t == text)
}

#[test]
fn pingpong_plots_one_percentile_curve_per_size() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("x.svg");
    let json = dir.path().join("p.json");
    run(
        PINGPONG,
        &[PING_ARGS, &["--method", "shm", "--plot"]].concat(),
        &[&chart, Path::new("--json"), &json],
    );
    let s = svg(&chart);
    assert_eq!(s.curves, 2, "one curve per size: {:?}", s.texts);
    assert!(has(&s, PERCENTILE_AXIS), "{:?}", s.texts);
    assert!(
        s.texts.iter().any(|t| t.starts_with("round trip (µs")),
        "{:?}",
        s.texts
    );
    for label in ["8 B", "64 B", "0%", "90%", "99%"] {
        assert!(has(&s, label), "no {label:?} in {:?}", s.texts);
    }
    // The same chart as PNG: its size, and the first two series' colours
    // (curve and legend swatch) but not the third's.
    let png = dir.path().join("x.png");
    run(
        PINGPONG,
        &[PING_ARGS, &["--method", "shm", "--plot"]].concat(),
        &[&png],
    );
    let (size, rgb) = decode_png(&png);
    assert_eq!(size, (1000, 560));
    let has_colour = |i: usize| {
        let RGBColor(r, g, b) = PALETTE[i];
        rgb.chunks_exact(3).any(|p| p == [r, g, b])
    };
    assert!(has_colour(0) && has_colour(1) && !has_colour(2));

    // The report carries the distribution the curve was drawn from.
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let d = v["results"][0]["distribution"].as_array().unwrap();
    assert!(d.len() > 5, "{d:?}");
    assert_eq!(d.last().unwrap()[0], 1.0);
}

#[test]
fn bw_plots_bandwidth_and_rate_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("y.svg");
    run(BW, &[BW_ARGS, &["--plot"]].concat(), &[&chart]);
    let s = svg(&chart);
    // One series in each of the two panels.
    assert_eq!(s.curves, 2, "{:?}", s.texts);
    assert_eq!(s.texts.iter().filter(|t| *t == SIZE_AXIS).count(), 2);
    assert!(
        s.texts.iter().any(|t| t.starts_with("bandwidth (MB/s")),
        "{:?}",
        s.texts
    );
    assert!(
        s.texts.iter().any(|t| t.starts_with("message rate")),
        "{:?}",
        s.texts
    );
    for label in ["64 B", "1 KiB", "shm (blocking)"] {
        assert!(has(&s, label), "no {label:?} in {:?}", s.texts);
    }

    let png = dir.path().join("y.png");
    run(BW, &[BW_ARGS, &["--plot"]].concat(), &[&png]);
    // Two panels of 560 pixels.
    assert_eq!(decode_png(&png).0, (1000, 1120));
}

#[test]
fn bcl_plot_compares_runs_and_refuses_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let (shm, unix, bw) = (p("shm.json"), p("unix.json"), p("bw.json"));
    run(
        PINGPONG,
        &[PING_ARGS, &["--method", "shm", "--json"]].concat(),
        &[&shm],
    );
    run(
        PINGPONG,
        &[PING_ARGS, &["--method", "unix", "--json"]].concat(),
        &[&unix],
    );
    run(BW, &[BW_ARGS, &["--json"]].concat(), &[&bw]);

    let chart = p("c.svg");
    run(PLOT, &["--size", "64", "-o"], &[&chart, &shm, &unix]);
    let s = svg(&chart);
    assert_eq!(s.curves, 2, "{:?}", s.texts);
    assert!(
        has(&s, "bcl-pingpong shm (blocking)") && has(&s, "bcl-pingpong unix (blocking)"),
        "{:?}",
        s.texts
    );
    assert!(has(&s, PERCENTILE_AXIS));

    // Every size of both files without --size; bw reports as rate; PNG.
    let all = p("all.svg");
    run(PLOT, &["-o"], &[&all, &shm, &unix]);
    assert_eq!(svg(&all).curves, 4);
    let rate = p("rate.png");
    run(PLOT, &["--rate", "-o"], &[&rate, &bw]);
    assert_eq!(&std::fs::read(&rate).unwrap()[..8], b"\x89PNG\r\n\x1a\n");

    let mixed = p("mixed.svg");
    let shm_s = shm.to_str().unwrap();
    let bw_s = bw.to_str().unwrap();
    let e = refused(PLOT, &[shm_s, bw_s, "-o", mixed.to_str().unwrap()], &[]);
    assert!(
        e.contains("cannot draw bcl-pingpong and bcl-bw reports on one chart"),
        "{e}"
    );
    assert!(e.contains(shm_s) && e.contains(bw_s), "{e}");
    assert!(!mixed.exists());
}

#[test]
fn bad_input_gets_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let empty = p("empty.json");
    std::fs::write(&empty, "").unwrap();
    let junk = p("junk.json");
    std::fs::write(&junk, "{\"tool\": ").unwrap();
    let missing = p("missing.json");
    let out = p("out.svg");
    for (file, want) in [
        (&empty, "empty file"),
        (&junk, "not JSON"),
        (&missing, "cannot read"),
    ] {
        let e = refused(PLOT, &[file, "-o", &out], &[]);
        assert!(e.contains(file.as_str()) && e.contains(want), "{e}");
    }
    // Unknown extensions are refused before anything runs.
    let e = refused(PLOT, &[&empty, "-o", "chart.pdf"], &[]);
    assert!(e.contains("chart.pdf") && e.contains(".svg"), "{e}");
    let e = refused(PINGPONG, &["--local", "--plot", "lat.jpg"], &[]);
    assert!(
        e.contains("lat.jpg") && e.contains("unknown chart format"),
        "{e}"
    );
    // The serving side has nothing to draw.
    let e = refused(
        PINGPONG,
        &["--method", "udp", "--serve", "--plot", &out],
        &[],
    );
    assert!(e.contains("--connect side"), "{e}");
    // No font: the error names the file (and is given before measuring).
    let font = p("no-such-font.ttf");
    let e = refused(
        BW,
        &[BW_ARGS, &["--plot", &out]].concat(),
        &[("BCL_PLOT_FONT", font.as_str())],
    );
    assert!(e.contains(&font), "{e}");
    assert!(!Path::new(&out).exists());
}
