#!/usr/bin/env bash
# bench/veth-compare.sh — BCL over a veth pair against the kernel, in one run.
#
# Brings up configs/lab/pair.toml (two namespaces, one veth pair), then runs
# bcl-pingpong and bcl-bw for BCL over `packet` and `udp` and for the kernel
# UDP and TCP (TCP_NODELAY) baselines, in busy-poll and blocking mode, with
# the server pinned to CPU 1 and the client to CPU 0. Prints the figures and
# the ratios against their targets (64 B p50 round trip, busy-poll: packet
# <= 0.75 x kernel UDP, udp <= 1.2 x kernel UDP), and appends the table with
# its command, date, commit and machine load to the New runs section of
# docs/PERFORMANCE.md.
#
# Before that, the AF_XDP rows (bench/afxdp-rows.sh), on
# configs/lab/pair-jumbo.toml (veth MTU 65535; AF_XDP multi-buffer frames
# over 4 KiB UMEM chunks), busy-poll, same pinning: BCL over `afxdp`, the
# bare AF_XDP floor `afxdp-raw` and kernel UDP (64 B and 1 KiB round
# trips), the 16 B message rate (the smallest bcl-bw message) of afxdp and
# afxdp-raw, and 64 KiB bandwidth of afxdp against kernel TCP on the same
# veth; ratios against their targets (see bench/afxdp-rows.sh), appended to
# the same section.
#
# After them, bench/channels-compare.sh --reps 1 --no-shm: normal channels
# 64 KiB-64 MiB against kernel TCP and the eager/rendezvous crossover.
#
#   bench/veth-compare.sh [--iters N] [--bw-iters N] [--no-append] [--afxdp-only | --no-afxdp]
#
# Needs root. Builds the release tools first (CARGO_TARGET_DIR is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."

ITERS=20000
BW_ITERS=400
APPEND=1
VETH=1
AFXDP=1
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS=$2; shift 2 ;;
    --bw-iters) BW_ITERS=$2; shift 2 ;;
    --no-append) APPEND=0; shift ;;
    --afxdp-only) VETH=0; shift ;;
    --no-afxdp) AFXDP=0; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "veth-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "veth-compare: needs root (network namespaces, AF_PACKET)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
LAB=configs/lab/pair.toml
export BCL_LAB_PREFIX=bl-vcmp
OUT=$(mktemp -d /tmp/veth-compare.XXXXXX)

if [ "$AFXDP" = 1 ]; then
  bench/afxdp-rows.sh "$BIN" "$OUT" "$ITERS" "$BW_ITERS" "$APPEND" "bench/veth-compare.sh $ARGS"
fi
[ "$VETH" = 1 ] || { echo "raw JSON and .hgrm files: $OUT"; exit 0; }

"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
"$BIN/bcl-lab" up "$LAB" >/dev/null
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true' EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
METHODS="packet udp kernel-udp kernel-tcp"
for mode in busy-poll blocking; do
  flag=""; [ "$mode" = busy-poll ] && flag="--busy-poll"
  for m in $METHODS; do
    echo "== pingpong $m $mode"
    "$BIN/bcl-pingpong" --method "$m" --lab "$LAB" --nodes b,a $flag --pin 1,0 \
      --sizes 64,1024,8192 --iters "$ITERS" --warmup 2000 \
      --json "$OUT/pp-$m-$mode.json" --hgrm "$OUT/pp-$m-$mode.hgrm" | grep -v '^\[server\]'
    echo "== bandwidth $m $mode"
    "$BIN/bcl-bw" --method "$m" --lab "$LAB" --nodes b,a $flag --pin 1,0 \
      --sizes 64,1024,8192,64K --iters "$BW_ITERS" --warmup 10 \
      --json "$OUT/bw-$m-$mode.json" | grep -v '^\[server\]'
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

TABLE=$(python3 - "$OUT" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import json, sys, os
out, load_before, load_after = sys.argv[1:4]
methods = ["packet", "udp", "kernel-udp", "kernel-tcp"]
modes = ["busy-poll", "blocking"]
def load(kind, m, mode):
    with open(os.path.join(out, f"{kind}-{m}-{mode}.json")) as f:
        return json.load(f)
def pp(m, mode, size):
    for r in load("pp", m, mode)["results"]:
        if r["size"] == size:
            return r
def bw(m, mode, size):
    for r in load("bw", m, mode)["results"]:
        if r["size"] == size:
            return r["mbytes_per_s"]
us = lambda ns: f"{ns/1000:.2f}"
lines = []
lines.append("Round trip (µs, p50 / p99) and one-way bandwidth (MB/s = 10^6 B/s), veth pair, server on CPU 1, client on CPU 0:")
lines.append("")
lines.append("| mode | method | 64 B p50 | 64 B p99 | 1 KiB p50 | 8 KiB p50 | bw 64 B | bw 1 KiB | bw 8 KiB | bw 64 KiB |")
lines.append("|---|---|---|---|---|---|---|---|---|---|")
for mode in modes:
    for m in methods:
        a, b, c = pp(m, mode, 64), pp(m, mode, 1024), pp(m, mode, 8192)
        lines.append(f"| {mode} | {m} | {us(a['p50_ns'])} | {us(a['p99_ns'])} | {us(b['p50_ns'])} | {us(c['p50_ns'])} | "
                     f"{bw(m, mode, 64):.1f} | {bw(m, mode, 1024):.1f} | {bw(m, mode, 8192):.1f} | {bw(m, mode, 65536):.1f} |")
lines.append("")
lines.append("Ratios against the targets (same run):")
lines.append("")
lines.append("| mode | ratio | value | target |")
lines.append("|---|---|---|---|")
for mode in modes:
    k = pp("kernel-udp", mode, 64)["p50_ns"]
    for m, target in (("packet", "≤ 0.75" if mode == "busy-poll" else "(none)"), ("udp", "≤ 1.2" if mode == "busy-poll" else "(none)")):
        r = pp(m, mode, 64)["p50_ns"] / k
        ok = ""
        if mode == "busy-poll":
            ok = " met" if r <= (0.75 if m == "packet" else 1.2) else " **missed**"
        lines.append(f"| {mode} | 64 B p50 RTT, BCL {m} / kernel UDP | {r:.2f} | {target}{ok} |")
    for m in ("packet", "udp"):
        for base in ("kernel-tcp", "kernel-udp"):
            r = bw(m, mode, 65536) / bw(base, mode, 65536)
            lines.append(f"| {mode} | 64 KiB bandwidth, BCL {m} / {base} | {r:.2f} | (reported) |")
lines.append("")
lines.append(f"Load average before / after the run: {load_before} / {load_after}.")
print("\n".join(lines))
PY
)
echo
echo "$TABLE"

if [ "$APPEND" = 1 ]; then
  DOC=docs/PERFORMANCE.md
  mkdir -p docs
  if [ ! -f "$DOC" ]; then
    cat > "$DOC" <<'MD'
# BCL performance

Every figure here comes from a benchmark that measures BCL and the kernel
baseline in the same run and prints the ratio; the command that produced it
is given with each table.
MD
  fi
  if ! grep -q '^## New runs' "$DOC"; then
    cat >> "$DOC" <<'MD'

## New runs

`bench/veth-compare.sh` brings up `configs/lab/pair.toml`, runs `bcl-pingpong`
and `bcl-bw` for BCL over `packet` (AF_PACKET, TPACKET_V2 rings) and `udp`
(recvmmsg/sendmmsg) and for the kernel UDP and TCP baselines (same timing code,
`--method kernel-udp|kernel-tcp`) in busy-poll and blocking mode, server pinned
to CPU 1 and client to CPU 0, and appends one entry per run below. Targets:
64 B p50 round trip busy-poll, BCL `packet` ≤ 0.75 × kernel UDP, BCL `udp`
≤ 1.2 × kernel UDP; bandwidth at 64 KiB reported against kernel TCP and UDP.
Kernel UDP bandwidth counts only what the receiver got.
MD
  fi
  {
    echo
    echo "### Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
    echo
    echo "Command: \`bench/veth-compare.sh --iters $ITERS --bw-iters $BW_ITERS\` ($(nproc) vCPUs, $(uname -r))"
    echo
    echo "$TABLE"
  } >> "$DOC"
  echo "appended to $DOC"
fi
echo "raw JSON and .hgrm files: $OUT"
# Normal channels 64 KiB-64 MiB against kernel TCP, and the eager/rendezvous
# crossover (see the header of channels-compare.sh).
[ "$VETH" = 0 ] || bench/channels-compare.sh --reps 1 --no-shm $([ "$APPEND" = 1 ] || echo --no-append)
