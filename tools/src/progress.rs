//! Progress bars of long runs (the `bcl-bw` size sweep), on standard
//! error and only when standard error is a terminal: scripts, tests and
//! pipes see exactly the output they saw before. The bar is drawn from the
//! measuring thread when it advances (indicatif limits redraws to about 20
//! a second) and has no ticker thread, so it adds no thread competing with
//! the pinned ends for the CPUs.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `len` steps named `what`, drawn on standard error if it is a
/// terminal, hidden otherwise. Finish it with
/// [`ProgressBar::finish_and_clear`] before printing results, so it leaves
/// no trace.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{bar:32}] {pos}/{len} {msg} ({elapsed}, about {eta} left)",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}
