#!/usr/bin/env bash
# bench/bundle-rate.sh — 16 B message rate with message bundling (bcl-bw,
# system channel, window 1024 messages, busy-poll) over udp and afxdp, next to
# the kernel UDP rate of the same bcl-bw loop, in one run.
#
#   bench/bundle-rate.sh [--runs N] [--iters N] [--before DIR] [--bin DIR]
#
# --bin: the bcl-bw and bcl-lab to measure (default target/release, built
# here). --before: a directory holding another build's bcl-bw (for example one
# from before bundling) measured in the same runs, row after row.
# Lab: configs/lab/pair-xdp.toml (one veth pair, MTU 3500), server on CPU 1,
# client on CPU 0. Prints one line per measurement and a table with ranges
# and ratios against kernel UDP. Needs root (lab namespaces, AF_XDP).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=3 ITERS=200 BEFORE= BIN=
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  cargo build --release -q -p bcl-tools --bin bcl-bw
  cargo build --release -q -p bcl-lab --bin bcl-lab
  BIN=target/release
fi
LAB=configs/lab/pair-xdp.toml
export BCL_LAB_PREFIX=${BCL_LAB_PREFIX:-bl-bnd}
OUT=$(mktemp -d)
"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
"$BIN/bcl-lab" up "$LAB" >/dev/null
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
rate() { # label bin method run
  local json="$OUT/$1-$3-$4.json"
  if timeout 120 "$2/bcl-bw" --method "$3" --sizes 16 --window 1024 --iters "$ITERS" --warmup 5 \
      --lab "$LAB" --nodes b,a --busy-poll --pin 1,0 --json "$json" >/dev/null 2>"$OUT/err"; then
    python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["results"][0]["msgs_per_s"]))' "$json"
  else
    rm -f "$json"; echo failed
  fi
}
for r in $(seq 1 "$RUNS"); do
  for m in kernel-udp udp afxdp; do
    for who in ${BEFORE:+before} after; do
      [ "$m" = kernel-udp ] && [ "$who" = before ] && continue
      bin=$BIN; [ "$who" = before ] && bin=$BEFORE
      echo "run $r $m $who: $(rate "$who" "$bin" "$m" "$r") msg/s"
    done
  done
done | tee "$OUT/lines"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$OUT/lines" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import sys, re, collections
rows = collections.defaultdict(list)
kernel = {}
for line in open(sys.argv[1]):
    m = re.match(r"run (\d+) (\S+) (\S+): (\d+) msg/s", line)
    if not m:
        continue
    run, method, who, rate = int(m[1]), m[2], m[3], int(m[4])
    if method == "kernel-udp":
        kernel[run] = rate
    else:
        rows[(method, who)].append((run, rate))
k = sorted(kernel.values())
print()
print(f"kernel UDP (same bcl-bw loop): {k[0]}–{k[-1]} msg/s" if k else "kernel UDP: failed")
print("| transport | build | msg/s (min–max) | ratio to kernel UDP of the same run (min–max) |")
print("|---|---|---|---|")
for (method, who), v in sorted(rows.items()):
    rates = sorted(r for _, r in v)
    ratios = sorted(r / kernel[run] for run, r in v if kernel.get(run))
    ratio = f"{ratios[0]:.1f}–{ratios[-1]:.1f}" if ratios else "n/a"
    print(f"| {method} | {who} | {rates[0]}–{rates[-1]} | {ratio} |")
for method in sorted({m for m, _ in rows}):
    before = dict(rows.get((method, "before"), []))
    after = dict(rows.get((method, "after"), []))
    gains = sorted(after[r] / before[r] for r in after if before.get(r))
    if gains:
        print(f"{method}: after / before in the same run: {gains[0]:.1f}–{gains[-1]:.1f}")
print(f"\nLoad average before / after: {sys.argv[2]} / {sys.argv[3]}")
PY
