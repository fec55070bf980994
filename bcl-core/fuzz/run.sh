#!/usr/bin/env bash
# Builds bcl-core's fuzz targets and runs each with libFuzzer for a bounded
# time; fails when a target crashes (a panic, a failed assertion, an
# AddressSanitizer report, a leak or a time-out on one input). What CI runs,
# from scripts/test.
#
#   bcl-core/fuzz/run.sh [SECONDS]    seconds per target (default 45)
#
# Installs cargo-fuzz (the pinned version below) when `cargo fuzz` is
# missing. cargo-fuzz passes nightly-only flags (-Zsanitizer=address, ...)
# to rustc; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
# Builds into $CARGO_TARGET_DIR/fuzz (default target/fuzz). A crashing
# input is kept in bcl-core/fuzz/artifacts/TARGET/; libFuzzer's output of
# each run goes to TARGET.log in the build directory, and is printed, less
# its progress lines, when the run fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

CARGO_FUZZ_VERSION=0.13.2
seconds=${1:-45}
case $seconds in
    '' | *[!0-9]*) echo "fuzz/run.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

target_dir=${CARGO_TARGET_DIR:-target}/fuzz
case $target_dir in /*) ;; *) target_dir=$root/$target_dir ;; esac
mkdir -p "$target_dir"
export RUSTC_BOOTSTRAP=1

cd bcl-core
targets=$(cargo fuzz list)
[ -n "$targets" ] || { echo "fuzz/run.sh: no fuzz targets found" >&2; exit 1; }
cargo fuzz build --target-dir "$target_dir"
for t in $targets; do
    log=$target_dir/$t.log
    echo "fuzz/run.sh: $t for ${seconds} s"
    if ! cargo fuzz run --target-dir "$target_dir" "$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        # What went wrong (the panic message or sanitizer report comes
        # first), without libFuzzer's progress lines.
        grep -av -e '^#[0-9]' -e '^INFO: ' "$log" | head -n 150 >&2
        echo "fuzz/run.sh: $t FAILED (full output: $log; crashing input in bcl-core/fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    # libFuzzer's closing line, e.g. "Done 2155520 runs in 46 second(s)".
    grep -a '^Done [0-9]* runs' "$log" | sed "s/^/fuzz\/run.sh: $t: /" || true
done
