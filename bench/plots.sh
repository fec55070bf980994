#!/usr/bin/env bash
# bench/plots.sh — the charts of docs/plots/, made from one run of the tools.
#
# Two ends on this node (--local), busy-polling, server pinned to CPU 1 and
# client to CPU 0; unprivileged (shm and udp over loopback need no root):
#   * pingpong-shm.svg, pingpong-udp.svg: `bcl-pingpong --plot`, the round
#     trip's percentile distribution (HdrHistogram's axis), one curve per
#     size (shm: 8 B, 1 KiB, 16 KiB; udp: 64 B, 1 KiB, 16 KiB);
#   * bw-shm.svg: `bcl-bw --plot`, bandwidth (memcpy of each size beside
#     it, --memcpy) and message rate from 64 B to 1 MiB;
#   * udp-vs-kernel-udp.svg: `bcl-plot` of two `--json` reports of this
#     run, BCL over udp and the kernel-UDP baseline (`--method kernel-udp`,
#     the same pingpong code over plain sockets), 64 B;
#   * bw-udp-vs-kernel-udp.svg: `bcl-plot` of the bw reports of udp and
#     kernel-udp, 64 B to 64 KiB.
# The --json reports are kept in OUT/json/: bcl-plot redraws from them.
# Then it prints the commit, date and load, for docs/plots/README.md: the
# host's speed moves between minutes, so only curves of one run compare.
#
#   bench/plots.sh [--out DIR] [--iters N]     (default: docs/plots, 100000)
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=docs/plots
ITERS=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "plots: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo build --release -q -p bcl-tools --bin bcl-pingpong --bin bcl-bw --bin bcl-plot
BIN=target/release
mkdir -p "$OUT/json"
J="$OUT/json"
RUN=(--local --busy-poll --pin 1,0)

set -x
"$BIN/bcl-pingpong" --method shm "${RUN[@]}" --sizes 8,1K,16K --iters "$ITERS" \
  --warmup 10000 --plot "$OUT/pingpong-shm.svg" --json "$J/pingpong-shm.json"
"$BIN/bcl-pingpong" --method udp "${RUN[@]}" --sizes 64,1K,16K --iters "$ITERS" \
  --warmup 10000 --plot "$OUT/pingpong-udp.svg" --json "$J/pingpong-udp.json"
"$BIN/bcl-pingpong" --method kernel-udp "${RUN[@]}" --sizes 64,1K,16K --iters "$ITERS" \
  --warmup 10000 --json "$J/pingpong-kernel-udp.json"
"$BIN/bcl-plot" "$J/pingpong-udp.json" "$J/pingpong-kernel-udp.json" --size 64 \
  --title "round trip by percentile, 64 B: BCL over udp against kernel UDP (same run)" \
  -o "$OUT/udp-vs-kernel-udp.svg"
"$BIN/bcl-bw" --method shm "${RUN[@]}" --sizes 64,256,1K,4K,16K,64K,256K,1M \
  --volume 64M --memcpy --plot "$OUT/bw-shm.svg" --json "$J/bw-shm.json"
"$BIN/bcl-bw" --method udp "${RUN[@]}" --sizes 64,256,1K,4K,16K,64K --volume 32M \
  --json "$J/bw-udp.json"
"$BIN/bcl-bw" --method kernel-udp "${RUN[@]}" --sizes 64,256,1K,4K,16K,64K --volume 32M \
  --json "$J/bw-kernel-udp.json"
"$BIN/bcl-plot" "$J/bw-udp.json" "$J/bw-kernel-udp.json" \
  --title "bandwidth: BCL over udp against kernel UDP (same run)" \
  -o "$OUT/bw-udp-vs-kernel-udp.svg"
set +x

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs/plots' || echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
ls -l "$OUT"/*.svg
