#!/usr/bin/env bash
# bench/afxdp-hugepages.sh — the AF_XDP method with its UMEM on huge pages
# against normal pages, same binary, same minutes (root).
#
# The method maps its UMEM with MAP_HUGETLB when huge pages are reserved and
# falls back to normal pages when none are, so this script toggles the
# reservation (`sysctl vm.nr_hugepages`) between runs, alternating which goes
# first in every pair, and checks from the method's own report that each run
# got the pages it was meant to. Measures, on configs/lab/pair-xdp.toml:
#
#   latency:   bcl-pingpong --method afxdp --busy-poll --pin 1,0 --sizes 64
#              (p50 round trip, ns)
#   bandwidth: bcl-bw --method afxdp --busy-poll --pin 1,0 --sizes 64K
#              (MB/s)
#
# and prints every pair, then per figure the median ratio huge/normal with
# its range. The reservation is put back as it was at the end.
#
#   bench/afxdp-hugepages.sh [--runs N] [--pages N] [--bin DIR]
#
# --runs   pairs per figure (default 8)
# --pages  huge pages to reserve for the huge runs (default 64: 128 MiB,
#          8 per socket are used at the default ring sizes)
# --bin    where bcl-pingpong, bcl-bw and bcl-lab are (default target/release,
#          built here)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=8 PAGES=64 BIN=
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --pages) PAGES=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "afxdp-hugepages: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "afxdp-hugepages: needs root (AF_XDP, lab namespaces, sysctl)" >&2; exit 2; }
if [ -z "$BIN" ]; then
  cargo build --release -q --locked -p bcl-tools --bin bcl-pingpong --bin bcl-bw
  cargo build --release -q --locked -p bcl-lab --bin bcl-lab
  BIN=target/release
fi
export PATH="$PWD/$BIN:$PATH"
export BCL_LAB_PREFIX=${BCL_LAB_PREFIX:-bl-hp}
LAB=configs/lab/pair-xdp.toml
BEFORE=$(sysctl -n vm.nr_hugepages)
OUT=$(mktemp -d)
trap 'sysctl -qw vm.nr_hugepages="$BEFORE"; rm -rf "$OUT"' EXIT

# reserve PAGES|0 — and check the kernel gave them
reserve() {
  sysctl -qw vm.nr_hugepages="$1"
  local got
  got=$(sysctl -n vm.nr_hugepages)
  [ "$got" -eq "$1" ] || { echo "afxdp-hugepages: asked for $1 huge pages, the kernel has $got" >&2; exit 1; }
}

# one KIND(huge|normal) TOOL FILE ARGS...: runs it, checks the UMEM note
one() {
  local kind=$1 tool=$2 json=$3; shift 3
  if [ "$kind" = huge ]; then reserve "$PAGES"; else reserve 0; fi
  "$tool" --method afxdp --lab "$LAB" --nodes a,b --busy-poll --pin 1,0 --json "$json" "$@" \
    >"$json.log" 2>&1 || { cat "$json.log" >&2; exit 1; }
  if [ "$kind" = huge ]; then
    grep -q 'huge pages of 2 MiB' "$json.log" || { echo "afxdp-hugepages: a huge run got no huge pages:" >&2; grep UMEM "$json.log" >&2; exit 1; }
  else
    grep -q 'normal pages' "$json.log" || { echo "afxdp-hugepages: a normal run got huge pages:" >&2; grep UMEM "$json.log" >&2; exit 1; }
  fi
}

echo "# bench/afxdp-hugepages.sh --runs $RUNS --pages $PAGES; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u '+%F %H:%M UTC'); load before $(cut -d' ' -f1-3 /proc/loadavg)"
for figure in latency bandwidth; do
  if [ $figure = latency ]; then
    tool=bcl-pingpong field=p50_ns args=(--sizes 64 --iters 20000 --warmup 2000)
  else
    tool=bcl-bw field=mbytes_per_s args=(--sizes 64K --volume 128M)
  fi
  echo "## $figure: $tool ${args[*]} ($field)"
  echo "| pair | normal | huge | huge / normal |"
  echo "|---|---|---|---|"
  ratios=()
  for i in $(seq 1 "$RUNS"); do
    if [ $((i % 2)) -eq 1 ]; then order=(normal huge); else order=(huge normal); fi
    for kind in "${order[@]}"; do one "$kind" "$tool" "$OUT/$figure-$i-$kind.json" "${args[@]}"; done
    read -r n h r < <(python3 - "$OUT/$figure-$i-normal.json" "$OUT/$figure-$i-huge.json" "$field" <<'EOF'
import json, sys
n = json.load(open(sys.argv[1]))["results"][0][sys.argv[3]]
h = json.load(open(sys.argv[2]))["results"][0][sys.argv[3]]
print(f"{n:.1f} {h:.1f} {h / n:.3f}")
EOF
)
    echo "| $i | $n | $h | $r |"
    ratios+=("$r")
  done
  python3 - "${ratios[@]}" <<'EOF'
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
print(f"median huge/normal {statistics.median(r):.3f} (range {r[0]:.3f}-{r[-1]:.3f}, {len(r)} pairs)")
EOF
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg); vm.nr_hugepages back to $BEFORE"
