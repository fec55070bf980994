//! The font of the charts' text.
//!
//! plotters lays text out (the SVG backend measures it to place labels and
//! the legend, the PNG backend also draws its glyphs) with a font it is
//! given: with its `ab_glyph` feature, TrueType or OpenType bytes registered
//! under a family name. The charts use DejaVu Sans compiled into the tools
//! (the `dejavu` crate's copy), so they draw the same on every machine and
//! need no font installed; `BCL_PLOT_FONT` names another TrueType file
//! (read at run time) for text DejaVu Sans lacks.

use plotters::style::FontStyle;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Environment variable naming a TrueType/OpenType file to use instead of
/// the built-in DejaVu Sans.
pub const FONT_ENV: &str = "BCL_PLOT_FONT";

/// The family name the charts' text styles ask for.
pub const FAMILY: &str = "sans-serif";

static LOADED: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers the charts' font with plotters as [`FAMILY`] (once per
/// process; later calls return the first call's outcome): the file named
/// by [`FONT_ENV`] when it is set, else the built-in DejaVu Sans. The only
/// errors are about that file (unreadable, not a font), and name it.
pub fn load() -> Result<(), String> {
    LOADED.get_or_init(load_once).clone()
}

fn load_once() -> Result<(), String> {
    let chosen = std::env::var_os(FONT_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let (bytes, what): (&'static [u8], String) = match chosen {
        None => (dejavu::sans::regular(), "the built-in DejaVu Sans".into()),
        Some(path) => {
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "{FONT_ENV}={}: cannot read the charts' font: {e}",
                    path.display()
                )
            })?;
            // plotters keeps a `&'static` reference to the font's bytes:
            // they stay allocated for the rest of the process (one file,
            // read once).
            (
                Box::leak(bytes.into_boxed_slice()),
                format!("{FONT_ENV}={}", path.display()),
            )
        }
    };
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| format!("{what}: not a TrueType or OpenType font"))
}
