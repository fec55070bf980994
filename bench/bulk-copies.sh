#!/usr/bin/env bash
# bench/bulk-copies.sh — normal-channel bulk bandwidth over udp on a veth
# pair, this build against another build and against kernel TCP,
# interleaved in the same minutes.
#
# Per repetition, per mode and size: `bcl-bw --method udp --udp-mtu 65507
# --channel normal` with the base build, with this build, then `bcl-bw
# --method kernel-tcp` (the order of the two builds flips every
# repetition). Prints per configuration the median MB/s of each, and the
# medians [min-max] of the per-repetition ratios new/base and new/TCP.
# The udp receiver's and sender's method counters of the last run show how
# many frames were placed (received straight into the posted buffer) and
# gathered (sent from the application's buffer).
#
#   bench/bulk-copies.sh --base DIR [--reps N] [--volume BYTES]
#                        [--sizes LIST] [--modes "busy-poll blocking"]
#                        [--lab pair-jumbo|pair]
#
#   --base DIR  the other build's binaries (a target/release directory with
#               bcl-bw), e.g. `git worktree add --detach /tmp/base REV` and
#               `CARGO_TARGET_DIR=/tmp/base-target cargo build --release
#               -p bcl-tools` there
#
#   --lab NAME  configs/lab/NAME.toml: pair-jumbo (MTU 65535, udp frames of
#               65507 bytes; the default) or pair (MTU 1500, 1472)
#
# Needs root (namespaces). Server pinned to CPU 1, client to CPU 0.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=""
REPS=9
VOLUME=512M
SIZES=64K,1M,4M
MODES="busy-poll blocking"
LABNAME=pair-jumbo
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --volume) VOLUME=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --lab) LABNAME=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bulk-copies: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$BASE" ] || { echo "bulk-copies: --base DIR is required (see --help)" >&2; exit 2; }
[ -x "$BASE/bcl-bw" ] || { echo "bulk-copies: no bcl-bw in $BASE" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bulk-copies: needs root (network namespaces)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/bulk-copies.XXXXXX)
LAB=configs/lab/$LABNAME.toml
[ -f "$LAB" ] || { echo "bulk-copies: no lab $LAB" >&2; exit 2; }
UDP_MTU=(); [ "$LABNAME" = pair-jumbo ] && UDP_MTU=(--udp-mtu 65507)
export BCL_LAB_PREFIX=bl-bulk
"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true' EXIT
"$BIN/bcl-lab" up "$LAB" >/dev/null

run() { # name bin args...
  local name=$1 bin=$2; shift 2
  "$bin" --lab "$LAB" --nodes b,a --pin 1,0 --json "$OUT/$name.json" --sizes "$SIZES" \
    --volume "$VOLUME" "$@" > "$OUT/$name.txt" 2>&1 \
    || { echo "bulk-copies: $name failed:" >&2; tail -5 "$OUT/$name.txt" >&2; exit 1; }
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq 1 "$REPS"); do
  for mode in $MODES; do
    flag=""; [ "$mode" = busy-poll ] && flag="--busy-poll"
    udp=(--method udp "${UDP_MTU[@]}" --channel normal $flag)
    if [ $((rep % 2)) = 1 ]; then
      run "base-$mode-$rep" "$BASE/bcl-bw" "${udp[@]}"
      run "new-$mode-$rep" "$BIN/bcl-bw" "${udp[@]}" --stats
    else
      run "new-$mode-$rep" "$BIN/bcl-bw" "${udp[@]}" --stats
      run "base-$mode-$rep" "$BASE/bcl-bw" "${udp[@]}"
    fi
    run "tcp-$mode-$rep" "$BIN/bcl-bw" --method kernel-tcp $flag
    echo "repetition $rep $mode done"
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

LABNAME=$LABNAME python3 - "$OUT" "$REPS" "$MODES" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import json, os, statistics, sys
out, reps, modes, before, after = sys.argv[1:6]
reps, modes = int(reps), modes.split()
med = statistics.median

def rates(name):
    with open(os.path.join(out, name + ".json")) as f:
        return {r["size"]: r["mbytes_per_s"] for r in json.load(f)["results"]}

def size_name(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"

print(f"udp normal channels on {os.environ.get('LABNAME', '')}, MB/s (median of {reps}); ratios: median [min-max] of per-repetition ratios")
print()
print("| mode | size | base udp | new udp | kernel TCP | new / base | new / TCP | base / TCP |")
print("|---|---|---|---|---|---|---|---|")
for mode in modes:
    runs = {k: [rates(f"{k}-{mode}-{r}") for r in range(1, reps + 1)] for k in ("base", "new", "tcp")}
    for size in sorted(runs["tcp"][0]):
        v = {k: [x[size] for x in runs[k]] for k in runs}
        def ratio(a, b):
            q = [x / y for x, y in zip(v[a], v[b])]
            return f"{med(q):.2f} [{min(q):.2f}-{max(q):.2f}]"
        print(f"| {mode} | {size_name(size)} | {med(v['base']):.0f} | {med(v['new']):.0f} | "
              f"{med(v['tcp']):.0f} | {ratio('new', 'base')} | {ratio('new', 'tcp')} | {ratio('base', 'tcp')} |")
print()
print(f"Load average before / after: {before} / {after}")
PY
for mode in $MODES; do
  f="$OUT/new-$mode-$REPS.txt"
  echo "new build, $mode, last repetition, sender: $(grep -v '\[server\]' "$f" | grep -oE '"(tx_gathered|tx_segmented)", [0-9]*' | tr '\n' ' ')" \
    "receiver: $(grep '\[server\]' "$f" | grep -oE '"(rx_placed|rx_coalesced)", [0-9]*' | tr '\n' ' ')"
done
echo "raw: $OUT"
