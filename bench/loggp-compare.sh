#!/usr/bin/env bash
# bench/loggp-compare.sh — LogGP parameters of BCL (bcl-loggp) beside BCL-3's
# Table 5.3, and the unified-poll check (o_r over shm against o_r over a
# network method, same run), over several runs that alternate the methods:
#
#   udp      on loopback, both ends in this process (--local), pinned 1,0;
#   packet   between the two namespaces of configs/lab/pair-xdp.toml,
#   afxdp    server on CPU 1, client on CPU 0 (root only);
#
# each with --check-unified-poll, so every run also measures shm (its server
# thread on CPU 1, the client on CPU 0) alternating with the network method.
#
#   bench/loggp-compare.sh [--runs N] [--sizes LIST] [--reps N] [--bin DIR] [--out DIR]
#
# --bin: where bcl-loggp and bcl-lab are (default target/release, built here).
# --out: keep the JSON reports there (default: a temporary directory).
# Prints each run's tables, then per method and size the median over the
# runs of each parameter (min–max in brackets) and the o_r ratio to shm of
# every run, with the command, commit and load.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=3 SIZES=8,1K,64K REPS=5 BIN= OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  cargo build --release -q -p bcl-tools --bin bcl-loggp
  cargo build --release -q -p bcl-lab --bin bcl-lab
  BIN=target/release
fi
LAB=configs/lab/pair-xdp.toml
# Namespaces of its own, so that other runs' labs are left alone.
export BCL_LAB_PREFIX=${BCL_LAB_PREFIX:-bl-lgp}
KEEP=1
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d)
  KEEP=0
fi
mkdir -p "$OUT"
cleanup() {
  if [ "$(id -u)" = 0 ]; then "$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true; fi
  if [ "$KEEP" = 0 ]; then rm -rf "$OUT"; fi
}
trap cleanup EXIT
METHODS=udp
if [ "$(id -u)" = 0 ]; then
  METHODS="udp packet afxdp"
  "$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
  "$BIN/bcl-lab" up "$LAB" >/dev/null
else
  echo "# not root: udp only (packet and afxdp need the lab's namespaces)"
fi
COMMON=(--busy-poll --pin 1,0 --sizes "$SIZES" --reps "$REPS" --check-unified-poll)
echo "# bench/loggp-compare.sh --runs $RUNS --sizes $SIZES --reps $REPS; commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)'); load before $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$RUNS"); do
  for m in $METHODS; do
    json="$OUT/$m-$r.json"
    if [ "$m" = udp ]; then
      where=(--local)
    else
      where=(--lab "$LAB" --nodes b,a --shm-pin 1)
    fi
    echo "## run $r: bcl-loggp --method $m ${where[*]} ${COMMON[*]}"
    # Exit status 1 is the check's verdict (o_r outside 10 %), not a failure.
    status=0
    timeout 600 "$BIN/bcl-loggp" --method "$m" "${where[@]}" "${COMMON[@]}" --json "$json" 2>/dev/null || status=$?
    if [ "$status" -gt 1 ]; then
      echo "## run $r $m: failed (exit status $status)"
      rm -f "$json"
    fi
  done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys, collections
runs = collections.defaultdict(list)       # (method, size) -> [result]
ratios = collections.defaultdict(list)     # (method, size) -> [ratio]
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    v = json.load(open(path))
    tag = v["method"]
    for r in v["results"]:
        runs[(tag, r["size"])].append(r)
    ref = v.get("reference")
    if ref:
        for r in ref["results"]:
            runs[(f"shm (beside {tag})", r["size"])].append(r)
    for p in (v.get("unified_poll") or {}).get("results", []):
        ratios[(tag, p["size"])].append(p["ratio"])

def cell(values, scale, digits):
    vs = sorted(x * scale for x in values)
    return f"{statistics.median(vs):.{digits}f} ({vs[0]:.{digits}f}–{vs[-1]:.{digits}f})"

print()
print("Median over runs of each run's mean (min–max); L, o_s, o_r, g, RTT/2 in µs, G in ns/B, 1/G in MB/s.")
print()
print("| method | size | runs | L | o_s | o_r | g | G | 1/G | RTT/2 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (m, size), rs in sorted(runs.items()):
    col = lambda k: [r[k] for r in rs]
    print(f"| {m} | {size} | {len(rs)} | {cell(col('L_ns'), 1e-3, 3)} | {cell(col('o_s_ns'), 1e-3, 3)} "
          f"| {cell(col('o_r_ns'), 1e-3, 3)} | {cell(col('g_ns'), 1e-3, 3)} | {cell(col('G_ns_per_byte'), 1, 3)} "
          f"| {cell(col('mbytes_per_s'), 1, 0)} | {cell([r['rtt_ns'] / 2 for r in rs], 1e-3, 3)} |")
print()
print("Unified poll: o_r(method) / o_r(shm), same run, one value per run (BCL-3: 1.0172 µs on both paths, ratio 1).")
print()
print("| method | size | ratio per run | within 10 % |")
print("|---|---|---|---|")
for (m, size), rs in sorted(ratios.items()):
    within = sum(abs(x - 1) <= 0.10 for x in rs)
    print(f"| {m} | {size} | {', '.join(f'{x:.2f}' for x in rs)} | {within} of {len(rs)} |")
PY
