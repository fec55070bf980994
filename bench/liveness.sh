#!/usr/bin/env bash
# bench/liveness.sh — how soon a dead peer is declared dead, and whether a
# live one ever is, between real processes over udp on the loopback.
#
# kills  tests/liveness.rs's a_killed_peer_is_declared_dead, --kills times
#   (release build): a parent waits on a child (a buffer posted for it),
#   the child is SIGKILLed, and the parent reports when liveness declared
#   it dead. Period 100 ms, 3 misses: the verdict comes 3 periods after
#   the child's last frame (an answer to a ping at most a period before
#   the kill). Reported: min, median, p99 and max of the detection time,
#   and how many exceeded 3 periods.
# soak   the same parent and child, the child alive all along, for
#   --soak-seconds while --load busy loops (default: one per CPU) keep
#   every CPU saturated. Reported: false deaths (target 0) and pings sent.
#
# node-kills  the same with liveness per node pair, between real processes
#   on two bcl-lab nodes (tools/tests/node_liveness.rs's rank, two ranks
#   per node over udp, period 100 ms, --node-misses silent checks, default
#   3): the two ranks of
#   node 1 watch those of node 2, rank 3 SIGKILLs itself 0.5-0.6 s in (a
#   phase that varies from run to run), and each watcher reports when it
#   declared it dead (both instants from the host's CLOCK_MONOTONIC). Also reported: pings per
#   node pair during the live phase, and any false death of rank 2.
#
# node-soak  the same job with a live phase of --node-soak-seconds while
#   --load busy loops keep every CPU saturated: false deaths (target 0)
#   and pings per node pair per period.
#
#   bench/liveness.sh [--kills 100] [--soak-seconds 600] [--load N] [--node-kills N]
#                     [--node-soak-seconds S] [--node-misses M]
set -euo pipefail
cd "$(dirname "$0")/.."

KILLS=100
SOAK=600
NODE_KILLS=0
NODE_SOAK=0
NODE_MISSES=3
LOAD=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) KILLS=$2; shift 2 ;;
    --soak-seconds) SOAK=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --node-kills) NODE_KILLS=$2; shift 2 ;;
    --node-soak-seconds) NODE_SOAK=$2; shift 2 ;;
    --node-misses) NODE_MISSES=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "liveness: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo test --release -q --test liveness --no-run
run() { cargo test --release -q --test liveness -- "$@" --exact --nocapture --test-threads=1; }

OUT=$(mktemp /tmp/liveness.XXXXXX)
if [ "$KILLS" -gt 0 ]; then
  for _ in $(seq "$KILLS"); do
    run a_killed_peer_is_declared_dead | sed -n 's/^declared dead \([0-9.]*\)\(m\?s\) after.*/\1 \2/p' >>"$OUT"
  done
  awk '{ v = ($2 == "s") ? $1 * 1000 : $1; print v }' "$OUT" | sort -n | awk -v kills="$KILLS" '
    { v[NR] = $1 } END {
      n = NR; if (n == 0) { print "kills: no measurement"; exit 1 }
      over = 0; for (i = 1; i <= n; i++) if (v[i] > 300) over++
      p99 = int(n * 0.99); if (p99 < 1) p99 = 1
      printf "kills: %d of %d measured; detection ms: min %.1f, median %.1f, p99 %.1f, max %.1f (bound 3 periods, 300 ms, after the last frame); over 300 ms: %d\n",
        n, kills, v[1], v[int((n + 1) / 2)], v[p99], v[n], over
    }'
fi
if [ "$SOAK" -gt 0 ]; then
  pids=()
  for _ in $(seq "$LOAD"); do (while :; do :; done) & pids+=($!); done
  trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
  BCL_LIVENESS_SOAK=$SOAK run soak_entry | grep '^soak' | sed "s/^/with $LOAD busy loops: /"
fi
if [ "$NODE_KILLS" -gt 0 ] || [ "$NODE_SOAK" -gt 0 ]; then
  cargo build --release -q -p bcl-tools --bin bcl-run && cargo build --release -q -p bcl-lab --bin bcl-lab
  exe=$(cargo test --release -p bcl-tools --test node_liveness --no-run 2>&1 | sed -n 's/.*(\(.*node_liveness-[0-9a-f]*\)).*/\1/p' | tail -1)
  [ -x "$exe" ] || { echo "liveness: cannot find the node_liveness test binary" >&2; exit 1; }
  export BCL_LAB_PREFIX=bench-nl
  target/release/bcl-lab down configs/lab/switched4.toml >/dev/null 2>&1 || true
  target/release/bcl-lab up configs/lab/switched4.toml >/dev/null
  trap 'target/release/bcl-lab down configs/lab/switched4.toml >/dev/null 2>&1 || true' EXIT
  if [ "$NODE_KILLS" -gt 0 ]; then
    NODE_OUT=$(mktemp /tmp/liveness-node.XXXXXX)
    false_deaths=0; pings=0
    for _ in $(seq "$NODE_KILLS"); do
      log=$(BCL_METHODS=udp BCL_LIVENESS=100ms,$NODE_MISSES BCL_NODE_LIVENESS_TEST=1 BCL_NODE_LIVENESS_PERIODS=5 \
        target/release/bcl-run -n 4 --per-node 2 --timeout 60 --lab configs/lab/switched4.toml \
        --nodes n1,n2 --keep-going -- "$exe" node_watching_rank --exact --nocapture --test-threads=1 -q 2>&1 || true)
      killed=$(echo "$log" | sed -n 's/^\[3\] killed at \([0-9]*\) ns/\1/p')
      [ -n "$killed" ] && echo "$log" | sed -n 's/^\[[01]\] rank 3 down after [0-9]* ms, at \([0-9]*\) ns/\1/p' |
        awk -v k="$killed" '{ printf "%.1f\n", ($1 - k) / 1e6 }' >>"$NODE_OUT"
      if echo "$log" | grep -q 'false death'; then false_deaths=$((false_deaths + 1)); fi
      p=$(echo "$log" | sed -n 's/^\[[01]\] pings while all lived: \([0-9]*\)/\1/p' | awk '{ s += $1 } END { print s + 0 }')
      pings=$((pings + p))
    done
    sort -n "$NODE_OUT" | awk -v kills="$NODE_KILLS" -v fd="$false_deaths" -v pings="$pings" -v misses="$NODE_MISSES" '
      { v[NR] = $1 } END {
        n = NR; if (n == 0) { print "node kills: no measurement"; exit 1 }
        over = 0; for (i = 1; i <= n; i++) if (v[i] > 100 * misses) over++
        p99 = int(n * 0.99); if (p99 < 1) p99 = 1
        printf "node kills: %d reports (2 watchers) of %d kills; detection ms: min %.1f, median %.1f, p99 %.1f, max %.1f (bound: misses periods after the last view that listed it); over misses periods: %d; false deaths of rank 2: %d; pings per node pair in the live phases: %.2f per period\n",
          n, kills, v[1], v[int((n + 1) / 2)], v[p99], v[n], over, fd, pings / (kills * 5)
      }'
    rm -f "$NODE_OUT"
  fi
  if [ "$NODE_SOAK" -gt 0 ]; then
    pids=()
    for _ in $(seq "$LOAD"); do (while :; do :; done) & pids+=($!); done
    log=$(BCL_METHODS=udp BCL_LIVENESS=100ms,$NODE_MISSES BCL_NODE_LIVENESS_TEST=1 BCL_NODE_LIVENESS_PERIODS=$((NODE_SOAK * 10)) \
      target/release/bcl-run -n 4 --per-node 2 --timeout 60 --lab configs/lab/switched4.toml \
      --nodes n1,n2 --keep-going -- "$exe" node_watching_rank --exact --nocapture --test-threads=1 -q 2>&1 || true)
    kill "${pids[@]}" 2>/dev/null || true
    false_deaths=$(echo "$log" | grep -c 'false death' || true)
    p=$(echo "$log" | sed -n 's/^\[[01]\] pings while all lived: \([0-9]*\)/\1/p' | awk '{ s += $1 } END { print s + 0 }')
    found=$(echo "$log" | grep -c 'rank 3 down after' || true)
    echo "node soak: ${NODE_SOAK} s with $LOAD busy loops: false deaths $false_deaths; pings per node pair ${p} ($(awk -v p="$p" -v s="$NODE_SOAK" 'BEGIN { printf "%.2f", p / (s * 10) }') per period); rank 3 then found dead by $found of 2 watchers"
  fi
fi
rm -f "$OUT"
echo "Machine load (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; commit $(git rev-parse --short HEAD)"
