//! The progress bar of `bcl-bw`'s sweep is drawn only when standard error
//! is a terminal: under a pipe (scripts, CI, these tests) the output is
//! the results alone; under a pseudo-terminal (util-linux's `script`, as a
//! person at a terminal would run it) the bar shows, counts every window
//! and names the size being measured. Unprivileged.

use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

/// Two sizes, (4 timed + 1 warm-up) windows each: a bar of 10 steps.
const ARGS: &str = "--method shm --local --sizes 64,1K --iters 4 --warmup 1 --window 16";

/// What the bar's template starts with (src/progress.rs).
const BAR: &str = "bcl-bw [";

#[test]
fn no_bar_when_standard_error_is_a_pipe() {
    let out = Command::new(BW).args(ARGS.split(' ')).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("# bcl-bw: method shm"), "{stdout}");
    // Nothing of a bar: no bar text, no carriage return, no escape.
    assert!(!stderr.contains(BAR), "{stderr:?}");
    assert!(!stderr.contains(['\r', '\x1b']), "{stderr:?}");
    assert!(
        !stdout.contains(BAR) && !stdout.contains('\x1b'),
        "{stdout:?}"
    );
}

#[test]
fn the_bar_counts_the_sweep_on_a_terminal() {
    // `script` runs the command on a new pseudo-terminal (standard output
    // and error both) and copies what it wrote to our pipe.
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &format!("{BW} {ARGS}"), "/dev/null"])
        .output()
        .expect("script (util-linux) runs the tool on a pseudo-terminal");
    assert!(out.status.success(), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains(BAR), "{tty:?}");
    // Every window of both sizes, and the size measured.
    assert!(tty.contains("10/10"), "{tty:?}");
    assert!(tty.contains(" 64 B ") && tty.contains(" 1 KiB "), "{tty:?}");
    // The results follow the bar, which was cleared first.
    assert!(tty.contains("# bcl-bw: method shm"), "{tty:?}");
}
