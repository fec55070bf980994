#!/usr/bin/env bash
# bench/shm-compare.sh — BCL over shared memory against the floor, in one run.
#
# Two ends on this node, busy-polling, server pinned to CPU 1 and client to
# CPU 0 (the only placement two vCPUs allow), repeated --runs times:
#   * 8 B round trips: `spin` (two cache lines ping-ponged, the floor), BCL
#     `shm`, and `unix` (a Unix-domain stream socket, the kernel's way),
#     each a separate bcl-pingpong run; and bcl-shm-lat, which alternates
#     floor, line-ring (a fresh cache line per message, no protocol: what
#     any ring pays), bare-inbox and BCL blocks in the same two threads and
#     keeps the groups whose floor did not move (the host moves the vCPUs
#     every few hundred ms, so separate runs often see different
#     placements);
#   * message rate at 16 B (bcl-bw's smallest message: its 16-byte header);
#   * bandwidth of 4 MiB messages on a normal channel, one message in
#     flight (one send buffer and one posted buffer: the working set of the
#     memcpy baseline), two ways: one copy (bcl-bw's default: the send
#     buffer is in bcl-shm's shared heap and the receiver copies it straight
#     into the posted buffer) and two copies (--no-shared-heap: the
#     pipelined exchange queue); and of 1 MiB on the system channel; all
#     against single-thread memcpy of the same size (bcl-memcpy), next to
#     the bare exchange queue (bcl-shm-bench bw: the same two pipelined
#     copies, no engine), whose ceiling moves with the vCPUs' placement on
#     the host;
#   * the receive overhead o_r of shm and udp (bcl-or).
# Prints the figures and the ratios against the shm targets (one-way
# latency <= 1.3 x floor and <= 0.25 us, 4 MiB >= 0.8 x memcpy, rate >= 3 M
# messages/s) and appends them, with command, date, commit and load, to
# docs/PERFORMANCE.md unless --no-append.
#
# With --against DIR (another build's target/release), it measures only the
# 8 B latency A/B instead: this build's and DIR's bcl-pingpong --method shm
# alternating, --runs x 5 pairs (bench/ab.sh), median ratio and range.
#
#   bench/shm-compare.sh [--runs N] [--iters N] [--no-append] [--against DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=3
ITERS=200000
APPEND=1
AGAINST=""
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --no-append) APPEND=0; shift ;;
    --against) AGAINST=$2; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "shm-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -n "$AGAINST" ]; then
  exec bench/ab.sh --base "$AGAINST" --runs $((RUNS * 5)) -- bcl-pingpong --method shm \
    --local --busy-poll --pin 1,0 --sizes 8 --iters "$ITERS" --warmup 10000
fi

cargo build --release -q -p bcl-tools -p bcl-bench
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/shm-compare.XXXXXX)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# p50 round trip in ns of one pingpong run.
p50() {
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["results"][0]["p50_ns"]))' "$1"
}
p99() {
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["results"][0]["p99_ns"]))' "$1"
}
bw_field() {
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["results"][0][sys.argv[2]]))' "$1" "$2"
}

ROWS=""
for r in $(seq 1 "$RUNS"); do
  for m in spin shm unix; do
    "$BIN/bcl-pingpong" --method "$m" --local --busy-poll --pin 1,0 --sizes 8 \
      --iters "$ITERS" --warmup 10000 --json "$OUT/pp-$m-$r.json" >/dev/null
  done
  "$BIN/bcl-bw" --method shm --local --busy-poll --pin 1,0 --sizes 16 --window 256 \
    --iters 2000 --json "$OUT/rate-$r.json" >/dev/null
  "$BIN/bcl-bw" --method shm --local --busy-poll --pin 1,0 --channel normal --channels 1 \
    --sizes 4M --volume 4G --json "$OUT/bw4m-$r.json" >/dev/null
  "$BIN/bcl-bw" --method shm --local --busy-poll --pin 1,0 --channel normal --channels 1 \
    --sizes 4M --volume 4G --no-shared-heap --json "$OUT/bw4m2-$r.json" >/dev/null
  "$BIN/bcl-bw" --method shm --local --busy-poll --pin 1,0 --sizes 1M --window 16 \
    --iters 100 --json "$OUT/bw1m-$r.json" >/dev/null
  BARE=$("$BIN/bcl-shm-bench" bw | sed -n 's/^bandwidth 4 MiB: .*ratio \([0-9.]*\) \[\([0-9.]*\)\].*/\1 \2/p')
  read -r BARE_BEST BARE_MED <<<"${BARE:-0 0}"
  MEMCPY=$(taskset -c 0 "$BIN/bcl-memcpy" --sizes 1048576,4194304 | awk '!/^#/ {print $2}' | paste -sd' ')
  read -r MC1M MC4M <<<"$MEMCPY"
  LAT=$("$BIN/bcl-shm-lat" --pairs 20 --block 5000 --pin 1,0 | tail -1)
  LAT_RATIO=$(sed -n 's/.*BCL\/floor median \([0-9.]*\) (range \([0-9.]*-[0-9.]*\)).*/\1 [\2]/p' <<<"$LAT")
  LAT_ONEWAY=$(sed -n 's/.*one-way median: floor \([0-9]*\) ns, BCL \([0-9]*\) ns.*/\1 \/ \2/p' <<<"$LAT")
  LAT_KEPT=$(sed -n 's/^kept \([0-9]* of [0-9]*\) pairs.*/\1/p' <<<"$LAT")
  LAT_BOUNDS=$(sed -n 's/.*line ring [0-9]* ns (\([0-9.]*\) x floor), bare inbox [0-9]* ns (\([0-9.]*\) x floor).*/\1 \/ \2/p' <<<"$LAT")
  SPIN=$(p50 "$OUT/pp-spin-$r.json"); SHM=$(p50 "$OUT/pp-shm-$r.json"); UNIX=$(p50 "$OUT/pp-unix-$r.json")
  SHM99=$(p99 "$OUT/pp-shm-$r.json")
  RATE=$(bw_field "$OUT/rate-$r.json" msgs_per_s)
  BW4=$(bw_field "$OUT/bw4m-$r.json" mbytes_per_s)
  BW4TWO=$(bw_field "$OUT/bw4m2-$r.json" mbytes_per_s)
  BW1=$(bw_field "$OUT/bw1m-$r.json" mbytes_per_s)
  ROW=$(python3 - "$r" "$SPIN" "$SHM" "$SHM99" "$UNIX" "$RATE" "$BW4" "$MC4M" "$BW1" "$MC1M" "$BARE_BEST" "$BARE_MED" "$BW4TWO" "${LAT_ONEWAY:-?}" "${LAT_RATIO:-?}" "${LAT_KEPT:-0}" "${LAT_BOUNDS:-?}" <<'EOF'
import sys
r, spin, shm, shm99, unix, rate, bw4, mc4, bw1, mc1, bare, bare_med, bw4two, lat_ow, lat_ratio, lat_kept, lat_bounds = sys.argv[1:]
spin, shm, shm99, unix, rate, bw4, mc4, bw1, mc1, bw4two = map(float, (spin, shm, shm99, unix, rate, bw4, mc4, bw1, mc1, bw4two))
print(f"| {r} | {spin/2:.0f} | {shm/2:.0f} | {shm/spin:.2f} | {lat_ow} | {lat_ratio} ({lat_kept}) | {lat_bounds} | {shm99/2:.0f} | {unix/2:.0f} | {unix/shm:.1f} "
      f"| {rate/1e6:.2f} | {bw4:.0f} / {mc4:.0f} = {bw4/mc4:.2f} | {bw4two:.0f} / {mc4:.0f} = {bw4two/mc4:.2f} "
      f"| {bare} [{bare_med}] | {bw1:.0f} / {mc1:.0f} = {bw1/mc1:.2f} |")
EOF
)
  echo "$ROW"
  ROWS="$ROWS$ROW"$'\n'
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
OR=$("$BIN/bcl-or" --sizes 8,1024 --batches 1,16)
echo "$OR"

HEADER='| run | spin one-way ns (floor) | BCL shm one-way ns | shm / floor (≤ 1.3) | interleaved one-way ns, floor / BCL (≤ 250) | interleaved BCL / floor, median [range] (pairs kept) (≤ 1.3) | interleaved line ring / floor, bare inbox / floor | shm p99 one-way ns | unix one-way ns | unix / shm | 16 B rate M msg/s (≥ 3) | 4 MiB normal channel, one copy, MB/s / memcpy (≥ 0.8) | 4 MiB normal channel, two copies (--no-shared-heap) / memcpy | bare exchange queue 4 MiB / memcpy, best [median] window | 1 MiB system channel MB/s / memcpy |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|'
echo "$HEADER"
printf '%s' "$ROWS"
echo "raw JSON: $OUT; load before $LOAD_BEFORE, after $LOAD_AFTER"

if [ "$APPEND" = 1 ]; then
  mkdir -p docs
  {
    echo
    echo "### bench/shm-compare.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
    echo
    echo "Command: \`bench/shm-compare.sh $ARGS\`. $(nproc) vCPUs, load average before $LOAD_BEFORE, after $LOAD_AFTER. One-way = round trip / 2 (p50)."
    echo
    echo "$HEADER"
    printf '%s' "$ROWS"
    echo
    echo '```'
    echo "$OR"
    echo '```'
  } >> docs/PERFORMANCE.md
fi
