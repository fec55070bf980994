#!/usr/bin/env bash
# Checks the Spin models of BCL (models/README.md) and ties them to the code:
#
#   1. the constants headers in models/generated/ must be what the code's
#      generators print now (a constant changed in the code without
#      re-verifying the models fails here);
#   2. every model is verified exhaustively (spin -a, gcc, pan) with the
#      bounds below: safety (assertions, invalid end states), and for the
#      reliability protocol the liveness claim `completes` under weak
#      fairness; each run must report errors: 0, except the runs marked
#      "must fail", which check that the model still finds a bug the code
#      once had;
#   3. fresh traces of the reliability model (models/traces.sh) are
#      replayed on two real ports (bcl-core/tests/trace_replay.rs).
#
# Prints, per run, the states stored, transitions, depth, memory and time,
# and the total time. Needs spin and gcc (Debian packages spin, gcc) and
# cargo. Run from anywhere: models/check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t0=$(date +%s%N)

for tool in spin gcc cargo; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "models/check.sh: $tool is missing (apt-get install spin gcc)" >&2
        exit 2
    fi
done
echo "models/check.sh: $(spin -V)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. Constants generated from the code -------------------------------
cargo run -q --locked -p bcl-core --example promela_core_constants >"$work/core_constants.h"
cargo run -q --locked -p bcl-shm --example promela_shm_constants >"$work/shm_constants.h"
for h in core_constants.h shm_constants.h; do
    if ! diff -u "models/generated/$h" "$work/$h"; then
        echo "models/check.sh: models/generated/$h differs from the code's constants:" >&2
        echo "  regenerate it (see its first line), re-run this script, commit both" >&2
        exit 1
    fi
done
echo "constants: models/generated/*.h match the code"

# ---- 2. Verification runs -------------------------------------------------
# label | model | spin defines | gcc defines | pan options | expect (ok, fail)
runs=(
    "reliability safety: 3 messages, 2 losses|reliability.pml|-DNMSG=3|-DSAFETY -DNOCLAIM|-m100000|ok"
    "reliability safety: 3 messages, 3 losses|reliability.pml|-DNMSG=3 -DLOSS_MAX=3|-DSAFETY -DNOCLAIM|-m100000|ok"
    "reliability liveness: <> completes, weak fairness|reliability.pml|-DNMSG=3||-m100000 -a -f -N completes|ok"
    "inbox: 2 slots, 3 producers, 4 messages|inbox.pml||-DSAFETY|-m100000|ok"
    "inbox: 8 slots (batch 2), 2 producers, 10 messages|inbox.pml|-DSLOTS=8 -DNP=2 -DK=1 -DK0=9|-DSAFETY|-m100000|ok"
    "rendezvous: 3 sends, 2 sizes|rendezvous.pml||-DSAFETY|-m100000|ok"
    "rendezvous -DOVERLAP (sends not taking turns: must fail)|rendezvous.pml|-DOVERLAP|-DSAFETY|-m100000|fail"
)
cp models/*.pml "$work/"
cp -r models/generated "$work/"
failed=0
t_spin=$(date +%s%N)
printf '%-56s %12s %13s %6s %9s %7s %s\n' "run" "states" "transitions" "depth" "memory" "time" "errors"
for r in "${runs[@]}"; do
    IFS='|' read -r label model sdefs cdefs popts expect <<<"$r"
    (
        cd "$work"
        rm -f pan pan.* ./*.trail
        # shellcheck disable=SC2086
        spin -a $sdefs "$model" >spin.out 2>&1 || { cat spin.out; exit 1; }
        # shellcheck disable=SC2086
        gcc -O2 -w -DMEMLIM=4096 $cdefs -o pan pan.c
        # shellcheck disable=SC2086
        ./pan $popts >pan.out 2>&1 || true
    ) || { echo "models/check.sh: $label: spin or gcc failed" >&2; exit 1; }
    out="$work/pan.out"
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -1)
    trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out" | tail -1)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
    mem=$(sed -n 's/^ *\([0-9.]*\)\ttotal actual memory usage.*/\1/p' "$out" | tail -1)
    secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' "$out" | tail -1)
    printf '%-56s %12s %13s %6s %7s MB %6ss %s\n' "$label" "${states:-?}" "${trans:-?}" \
        "${depth:-?}" "${mem:-?}" "${secs:-?}" "${errors:-?}"
    if [ -z "$errors" ]; then
        echo "models/check.sh: $label: no result from pan:" >&2
        cat "$out" >&2
        failed=1
    elif [ "$expect" = ok ] && [ "$errors" != 0 ]; then
        echo "models/check.sh: $label: pan found an error:" >&2
        grep -E 'pan:[0-9]|violated|invalid end state|acceptance cycle' "$out" >&2 || true
        (cd "$work" && spin -t $sdefs "$model" | grep -E 'TRACE|assert|violated' | tail -40) >&2 || true
        failed=1
    elif [ "$expect" = fail ] && [ "$errors" = 0 ]; then
        echo "models/check.sh: $label: the model no longer finds the bug it must find" >&2
        failed=1
    fi
done
[ "$failed" = 0 ] || exit 1
ms=$((($(date +%s%N) - t_spin) / 1000000))
printf 'spin, gcc and pan: %d.%01d s\n' $((ms / 1000)) $((ms % 1000 / 100))

# ---- 3. Fresh traces replayed on the code -------------------------------
models/traces.sh "$work/traces" 12
if ! BCL_TRACE_DIR="$work/traces" cargo test -q --locked -p bcl-core --test trace_replay \
    -- --nocapture >"$work/replay.out" 2>&1; then
    cat "$work/replay.out" >&2
    echo "models/check.sh: the ports do not follow a fresh trace of the model" >&2
    exit 1
fi
grep -E '^replayed' "$work/replay.out"

t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
printf 'models/check.sh: all checks passed in %d.%01d s (with building the constants generators and the replay test)\n' $((ms / 1000)) $((ms % 1000 / 100))
