#!/usr/bin/env bash
# bench/rails.sh — multi-rail striping against one rail, in one run.
#
# Topology: configs/lab/rails4-shaped.toml, nodes a and b joined by four
# rails, each through its own switch whose ports are shaped by a token
# bucket (--rate per rail, default 100mbit), so the link and not the CPU
# bounds each rail on this 2-core machine (AF_PACKET's qdisc bypass and XDP
# skip a qdisc on the sender's own veth: the shaping is in the middle).
# Method: packet (--method). Server on b (CPU 1), client on a (CPU 0).
#
# bandwidth  bcl-bw --channel normal --sizes 1M --window 4 --iters ITERS
#   --verify over 1 rail (--ifname to-r0), 2 rails (--rails to-r0,to-r1)
#   and 4 rails, the three alternating (order rotated every repetition),
#   --reps times; kernel TCP over rail 0 (kernel-tcp, the same sizes) in
#   the same rotation as what a user would run on one NIC. Reported: MB/s
#   (median), 2 rails / 1 rail and 4 rails / 1 rail per repetition (median
#   [range]), exactly once (every run's verify clean). Targets: >= 1.8 and
#   >= 3.4.
# latency  bcl-pingpong 64 B --busy-poll --iters PP_ITERS, 1 rail against 2
#   rails, alternating, --reps times. Reported: p50 and p99 of each, 2 rails
#   / 1 rail p50 (median [range]). Target: <= 1.0 within noise (small
#   messages go on one rail).
# failover  bcl-bw over 2 rails, 64 KiB messages in windows of 8 (one window
#   every ~20 ms), --timeline; 1.5 s into the stream rail 1 is taken down
#   (ip link set to-r1 down on a) and stays down. From the timeline: the
#   rate over the second before (two rails), the rate after (from 1 s after
#   the outage to the end: one rail), the settle time — from the link going
#   down to the start of the first 100 ms span (10 ms steps) that runs at
#   >= 85 % of the rate after — and the lowest 100 ms span of the second
#   after that, against the rate after (the one rail's own dips). --reps
#   times. Target: settles within 100 ms.
#
#   bench/rails.sh [--reps N] [--rate 100mbit] [--iters N] [--pp-iters N]
#                  [--method packet] [--sections "bandwidth latency failover"]
#                  [--congestion on|off] [--bin DIR] [--keep]
#
# BCL runs with congestion control on by default (--congestion): a shaped
# port drops what overflows its queue, and without control a fixed window
# keeps overflowing it (one rail then runs at ~75 % of its link with
# thousands of resends).
#
# Needs root (namespaces, tc, AF_PACKET). Prints the tables; paste them
# into docs/PERFORMANCE.md with the command and commit.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=5
RATE=100mbit
ITERS=6
PP_ITERS=2000
METHOD=packet
SECTIONS="bandwidth latency failover"
CONGESTION=on
BIN=""
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --pp-iters) PP_ITERS=$2; shift 2 ;;
    --method) METHOD=$2; shift 2 ;;
    --sections) SECTIONS=$2; shift 2 ;;
    --congestion) CONGESTION=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "bench/rails.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "bench/rails.sh: needs root (network namespaces, tc, AF_PACKET)" >&2
  exit 1
fi
if [ -z "$BIN" ]; then
  cargo build --release -q -p bcl-tools -p bcl-lab
  BIN=target/release
fi
for tool in bcl-bw bcl-pingpong bcl-lab; do
  [ -x "$BIN/$tool" ] || { echo "bench/rails.sh: $BIN/$tool is missing" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/rails.XXXXXX)
CFG=$WORK/rails.toml
sed "s/^rate = \"100mbit\"/rate = \"$RATE\"/" configs/lab/rails4-shaped.toml > "$CFG"
export BCL_LAB_PREFIX=bl-rbench
cleanup() {
  "$BIN/bcl-lab" down "$CFG" >/dev/null 2>&1 || true
  if [ "$KEEP" = 1 ]; then echo "# raw results kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
"$BIN/bcl-lab" up "$CFG" >/dev/null

CC="--congestion $CONGESTION"
RAILS1="--ifname to-r0"
RAILS2="--rails to-r0,to-r1"
RAILS4="--rails to-r0,to-r1,to-r2,to-r3"

# bw NAME METHOD PLACEMENT...: one verified bandwidth run, MB/s to $WORK/NAME.json
bw() {
  local name=$1 method=$2; shift 2
  local cc=$CC
  [ "$method" = kernel-tcp ] && cc=""
  "$BIN/bcl-bw" --method "$method" --lab "$CFG" --nodes b,a --pin 1,0 "$@" \
    --sizes 1M --window 4 --iters "$ITERS" --warmup 1 --verify $cc \
    --json "$WORK/$name.json" > "$WORK/$name.log" 2>&1 || {
      echo "bench/rails.sh: $name failed:"; tail -5 "$WORK/$name.log"; return 1; }
}

median_range() { # values on stdin -> "median [min-max]"
  python3 -c '
import sys
v = sorted(float(x) for x in sys.stdin.read().split())
if not v: print("-"); sys.exit()
m = v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
print(f"{m:.2f} [{v[0]:.2f}-{v[-1]:.2f}]")'
}

json_field() { # FILE EXPR
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

echo "# bench/rails.sh --reps $REPS --rate $RATE --iters $ITERS --method $METHOD"
echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ " $SECTIONS " == *" bandwidth "* ]]; then
  : > "$WORK/bw.tsv"
  clean=yes
  for rep in $(seq 1 "$REPS"); do
    order=(1 2 4 tcp)
    shift_by=$(( (rep - 1) % 4 ))
    order=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
    for k in "${order[@]}"; do
      case $k in
        1) bw "r$rep-1" "$METHOD" $RAILS1 --channel normal ;;
        2) bw "r$rep-2" "$METHOD" $RAILS2 --channel normal ;;
        4) bw "r$rep-4" "$METHOD" $RAILS4 --channel normal ;;
        tcp) bw "r$rep-tcp" kernel-tcp ;;
      esac
    done
    for k in 1 2 4 tcp; do
      f=$WORK/r$rep-$k.json
      mb=$(json_field "$f" 'd["results"][0]["mbytes_per_s"]')
      v=$(json_field "$f" 'all(d["verify"][k]==0 for k in ("lost","duplicated","out_of_order","corrupted"))')
      [ "$v" = True ] || clean=no
      printf '%s\t%s\t%s\n' "$rep" "$k" "$mb" >> "$WORK/bw.tsv"
    done
  done
  echo
  echo "## bandwidth, 1 MiB messages (normal channel), $METHOD, each rail shaped at $RATE"
  echo
  echo "| rails | MB/s (median) | / 1 rail, median [range] |"
  echo "|---|---|---|"
  for k in 1 2 4 tcp; do
    med=$(awk -v k=$k '$2==k {print $3}' "$WORK/bw.tsv" | median_range | cut -d' ' -f1)
    if [ "$k" = tcp ]; then
      ratio=$(for rep in $(seq 1 "$REPS"); do
        awk -v r=$rep '$1==r && $2=="tcp" {t=$3} $1==r && $2==1 {o=$3} END {print t/o}' "$WORK/bw.tsv"; done | median_range)
      echo "| kernel TCP, rail 0 | $med | $ratio |"
    else
      ratio=$(for rep in $(seq 1 "$REPS"); do
        awk -v r=$rep -v k=$k '$1==r && $2==k {n=$3} $1==r && $2==1 {o=$3} END {print n/o}' "$WORK/bw.tsv"; done | median_range)
      echo "| $k | $med | $ratio |"
    fi
  done
  echo
  echo "every BCL run delivered exactly once: $clean"
fi

if [[ " $SECTIONS " == *" latency "* ]]; then
  : > "$WORK/pp.tsv"
  for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then order="1 2"; else order="2 1"; fi
    for k in $order; do
      if [ "$k" = 1 ]; then place=$RAILS1; else place=$RAILS2; fi
      "$BIN/bcl-pingpong" --method "$METHOD" --lab "$CFG" --nodes b,a --pin 1,0 $place \
        --busy-poll --sizes 64 --iters "$PP_ITERS" --warmup 200 $CC \
        --json "$WORK/pp-$rep-$k.json" > "$WORK/pp-$rep-$k.log" 2>&1
      p50=$(json_field "$WORK/pp-$rep-$k.json" 'd["results"][0]["p50_ns"]/1000')
      p99=$(json_field "$WORK/pp-$rep-$k.json" 'd["results"][0]["p99_ns"]/1000')
      printf '%s\t%s\t%s\t%s\n' "$rep" "$k" "$p50" "$p99" >> "$WORK/pp.tsv"
    done
  done
  echo
  echo "## latency, 64 B round trip, $METHOD --busy-poll"
  echo
  echo "| rails | p50 µs (median) | p99 µs (median) | p50 / 1 rail, median [range] |"
  echo "|---|---|---|---|"
  for k in 1 2; do
    p50=$(awk -v k=$k '$2==k {print $3}' "$WORK/pp.tsv" | median_range | cut -d' ' -f1)
    p99=$(awk -v k=$k '$2==k {print $4}' "$WORK/pp.tsv" | median_range | cut -d' ' -f1)
    ratio=$(for rep in $(seq 1 "$REPS"); do
      awk -v r=$rep -v k=$k '$1==r && $2==k {n=$3} $1==r && $2==1 {o=$3} END {print n/o}' "$WORK/pp.tsv"; done | median_range)
    echo "| $k | $p50 | $p99 | $ratio |"
  done
fi

if [[ " $SECTIONS " == *" failover "* ]]; then
  : > "$WORK/fo.tsv"
  ns_a="$BCL_LAB_PREFIX.a"
  for rep in $(seq 1 "$REPS"); do
    ip netns exec "$ns_a" ip link set to-r1 up
    sleep 0.3
    "$BIN/bcl-bw" --method "$METHOD" --lab "$CFG" --nodes b,a --pin 1,0 $RAILS2 \
      --sizes 64K --window 8 --iters 300 --warmup 1 --verify $CC \
      --timeline "$WORK/fo-$rep.timeline" --json "$WORK/fo-$rep.json" \
      > "$WORK/fo-$rep.log" 2>&1 &
    pid=$!
    # 1.5 s into the stream (the first window marks its start).
    for _ in $(seq 1 100); do
      [ -s "$WORK/fo-$rep.timeline" ] && break
      [ -e /proc/$pid ] || break
      sleep 0.05
    done
    sleep 1.5
    down_ns=$(date +%s%N)
    ip netns exec "$ns_a" ip link set to-r1 down
    wait "$pid" || { echo "bench/rails.sh: failover run $rep failed:"; tail -5 "$WORK/fo-$rep.log"; }
    python3 - "$WORK/fo-$rep.timeline" "$down_ns" "$rep" >> "$WORK/fo.tsv" <<'PY'
import sys
pts = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
down = int(sys.argv[2]); rep = sys.argv[3]
def rate(t0, t1):
    # bytes acknowledged between t0 and t1, by interpolation, per second
    def at(t):
        prev = pts[0]
        for p in pts:
            if p[0] >= t:
                if p[0] == prev[0]: return p[1]
                return prev[1] + (p[1]-prev[1]) * (t-prev[0]) / (p[0]-prev[0])
            prev = p
        return pts[-1][1]
    return (at(t1) - at(t0)) / ((t1 - t0) / 1e9)
before = rate(down - 1_000_000_000, down)
end = pts[-1][0]
after = rate(down + 1_000_000_000, end) if end > down + 1_500_000_000 else float("nan")
target = 0.85 * after
span = 100_000_000
step = 10_000_000
settle = None
t = down
while t + span <= end:
    if rate(t, t + span) >= target:
        settle = (t - down) / 1e6
        break
    t += step
# The lowest 100 ms span of the second after settling, against the rate
# after (dips of the one rail left, not of the failover).
low = float("nan")
if settle is not None:
    s0 = down + int(settle * 1e6)
    spans = [rate(x, x + span) for x in range(s0, min(end - span, s0 + 1_000_000_000) + 1, step)]
    if spans:
        low = min(spans) / after
print(f"{rep}\t{before/1e6:.2f}\t{after/1e6:.2f}\t{settle if settle is not None else 'never'}\t{low:.2f}")
PY
  done
  ip netns exec "$ns_a" ip link set to-r1 up
  echo
  echo "## failover: rail 1 of 2 taken down mid-stream (64 KiB messages, $METHOD)"
  echo
  echo "| repetition | MB/s before (2 rails) | MB/s after (1 rail) | settle ms | lowest 100 ms in the next s / after |"
  echo "|---|---|---|---|---|"
  awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$WORK/fo.tsv"
  echo
  echo "settle ms, median [range]: $(cut -f4 "$WORK/fo.tsv" | grep -v never | median_range)"
fi
