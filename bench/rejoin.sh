#!/usr/bin/env bash
# bench/rejoin.sh — how soon a restarted process talks to the survivors
# again, between real processes over udp on the loopback.
#
# Runs tests/rejoin.rs (release build) --runs times: two survivors stream
# to each other (checked exactly once and in order) while a third process
# at a fixed address is SIGKILLed and restarted at once, three times per
# run; each start (the first included) is timed from spawning the process
# to its first message delivered at both survivors. That includes starting
# the process (exec of the test binary, opening its socket); the target is
# 1 s. Reported: min, median, p99 and max over all restarts, and how many
# exceeded 1 s.
#
#   bench/rejoin.sh [--runs 25] [--load N]
#
# --load N keeps N busy loops running meanwhile (default 0).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=25
LOAD=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "rejoin: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo test --release -q --test rejoin --no-run
pids=()
for _ in $(seq "$LOAD"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

OUT=$(mktemp /tmp/rejoin.XXXXXX)
for _ in $(seq "$RUNS"); do
  cargo test --release -q --test rejoin -- a_process_killed_and_restarted_three_times_rejoins_while_survivors_stream_on --exact --nocapture --test-threads=1 \
    | sed -n 's/^rejoin: incarnation \([0-9]*\): first message at both survivors \([0-9.]*\)\(µs\|ms\|s\) after.*/\1 \2 \3/p' >>"$OUT"
done
awk '{ v = $2; if ($3 == "s") v *= 1000; else if ($3 == "µs") v /= 1000; print v }' "$OUT" | sort -n | awk -v runs="$RUNS" -v load="$LOAD" '
  { v[NR] = $1 } END {
    n = NR; if (n == 0) { print "rejoin: no measurement"; exit 1 }
    over = 0; for (i = 1; i <= n; i++) if (v[i] > 1000) over++
    p99 = int(n * 0.99); if (p99 < 1) p99 = 1
    printf "rejoin (%d runs, 4 starts each, %d busy loops): first message at both survivors, ms after start: min %.1f, median %.1f, p99 %.1f, max %.1f (target 1000); over 1 s: %d of %d\n",
      runs, load, v[1], v[int((n + 1) / 2)], v[p99], v[n], over, n
  }'
rm -f "$OUT"
echo "Machine load (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; commit $(git rev-parse --short HEAD)"
