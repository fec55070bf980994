#!/usr/bin/env bash
# bench/floor-compare.sh — BCL's Ethernet methods against their bare floors:
# `packet` against `packet-raw` (bare frames on the same AF_PACKET socket
# and rings) and `afxdp` against `afxdp-raw` (bare AF_XDP frames), ping-pong
# round trips between two lab nodes (configs/lab/pair.toml, server b on CPU
# 1, client a on CPU 0), alternating method and floor --reps times in the
# same minutes.
#
# Reported per method: p50 and p99 round trips (median of the repetitions),
# the p50 ratio method / floor (median and range of the per-repetition
# ratios), and p99 / p50 of each (median and range). Targets: p50 <= 1.10 x
# the floor, p99 <= 2 x p50.
#
# With --bandwidth: streams instead (bcl-bw, BCL on normal channels, the
# floors sending bare frames of the same size) on the MTU-65535 veth
# (configs/lab/pair-jumbo.toml), --size 65000 by default, about --volume
# bytes per run; reported: MB/s of each (median) and method / floor
# (median and range of the per-repetition ratios). Target: >= 0.9.
#
#   bench/floor-compare.sh [--reps N] [--methods "packet afxdp"] [--size BYTES]
#                          [--iters N] [--blocking] [--bandwidth [--volume BYTES]]
#
# Needs root (namespaces, AF_PACKET, AF_XDP). Prints the table; nothing is
# appended (copy it to docs/PERFORMANCE.md with the command and commit).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=5
METHODS="packet afxdp"
SIZE=
ITERS=20000
MODE=--busy-poll
BANDWIDTH=0
VOLUME=512M
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --blocking) MODE=""; shift ;;
    --bandwidth) BANDWIDTH=1; shift ;;
    --volume) VOLUME=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "floor-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "floor-compare: needs root (network namespaces, AF_PACKET, AF_XDP)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/floor-compare.XXXXXX)
export BCL_LAB_PREFIX=bl-floor
if [ "$BANDWIDTH" = 1 ]; then
  LAB=configs/lab/pair-jumbo.toml
  SIZE=${SIZE:-65000}
else
  LAB=configs/lab/pair.toml
  SIZE=${SIZE:-64}
fi
"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$BIN/bcl-lab" up "$LAB" >/dev/null

# bandwidth TOOL REP: one bcl-bw stream of TOOL (a method on normal
# channels, or its floor) into $OUT/TOOL-REP.json.
bandwidth() {
  local t=$1 rep=$2 channel=()
  case "$t" in *-raw) ;; *) channel=(--channel normal) ;; esac
  # shellcheck disable=SC2086
  "$BIN/bcl-bw" --lab "$LAB" --nodes b,a --pin 1,0 --method "$t" "${channel[@]}" $MODE \
    --sizes "$SIZE" --volume "$VOLUME" --json "$OUT/$t-$rep.json" >/dev/null 2>"$OUT/$t-$rep.err" \
    || { echo "floor-compare: $t failed (repetition $rep):" >&2; tail -5 "$OUT/$t-$rep.err" >&2; exit 1; }
}

if [ "$BANDWIDTH" = 1 ]; then
  for rep in $(seq 1 "$REPS"); do
    for m in $METHODS; do
      for t in "$m" "$m-raw"; do bandwidth "$t" "$rep"; done
    done
  done
  python3 - "$OUT" "$REPS" "$METHODS" "$SIZE" "${MODE:-blocking}" <<'PY'
import json, statistics, sys
out, reps, methods, size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], sys.argv[5]
med = statistics.median
def mbs(t, r):
    with open(f"{out}/{t}-{r}.json") as f:
        return json.load(f)["results"][0]["mbytes_per_s"]
print(f"Streams of {size} B messages, {mode.lstrip('-')}, MTU-65535 lab pair (veth), median of {reps} alternating repetitions:")
print()
print("| method | MB/s (normal channels) | floor MB/s (bare frames) | method / floor |")
print("|---|---|---|---|")
for m in methods:
    a = [mbs(m, r) for r in range(1, reps + 1)]
    b = [mbs(f"{m}-raw", r) for r in range(1, reps + 1)]
    ratios = [x / y for x, y in zip(a, b)]
    print(f"| {m} | {med(a):.0f} | {med(b):.0f} | {med(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] |")
PY
  exit 0
fi

for rep in $(seq 1 "$REPS"); do
  for m in $METHODS; do
    for t in "$m" "$m-raw"; do
      # shellcheck disable=SC2086
      "$BIN/bcl-pingpong" --lab "$LAB" --nodes b,a --pin 1,0 --method "$t" $MODE \
        --sizes "$SIZE" --iters "$ITERS" --warmup 1000 --json "$OUT/$t-$rep.json" >/dev/null 2>"$OUT/$t-$rep.err" \
        || { echo "floor-compare: $t failed (repetition $rep):" >&2; tail -5 "$OUT/$t-$rep.err" >&2; exit 1; }
    done
  done
done

python3 - "$OUT" "$REPS" "$METHODS" "$SIZE" "${MODE:-blocking}" <<'PY'
import json, statistics, sys
out, reps, methods, size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], sys.argv[5]
med = statistics.median
def res(t, r):
    with open(f"{out}/{t}-{r}.json") as f:
        return json.load(f)["results"][0]
span = lambda xs: f"{med(xs):.2f} [{min(xs):.2f}–{max(xs):.2f}]"
print(f"Round trips, {size} B, {mode.lstrip('-')}, lab pair (veth), median of {reps} alternating repetitions:")
print()
print("| method | p50 µs | p99 µs | floor p50 µs | floor p99 µs | p50 / floor | p99 / p50 | floor p99 / p50 |")
print("|---|---|---|---|---|---|---|---|")
for m in methods:
    a = [res(m, r) for r in range(1, reps + 1)]
    b = [res(f"{m}-raw", r) for r in range(1, reps + 1)]
    us = lambda xs, k: f"{med(x[k] for x in xs) / 1000:.2f}"
    print(f"| {m} | {us(a, 'p50_ns')} | {us(a, 'p99_ns')} | {us(b, 'p50_ns')} | {us(b, 'p99_ns')} "
          f"| {span([x['p50_ns'] / y['p50_ns'] for x, y in zip(a, b)])} "
          f"| {span([x['p99_ns'] / x['p50_ns'] for x in a])} "
          f"| {span([y['p99_ns'] / y['p50_ns'] for y in b])} |")
PY
