#!/usr/bin/env bash
# bench/liveness.sh — how soon a dead peer is declared dead, and whether a
# live one ever is, between real processes over udp on the loopback.
#
# kills  tests/liveness.rs's a_killed_peer_is_declared_dead, --kills times
#   (release build): a parent waits on a child (a buffer posted for it),
#   the child is SIGKILLed, and the parent reports when liveness declared
#   it dead. Period 100 ms, 4 silent checks: the bound is 4 to 5 periods
#   after the child's last frame. Reported: min, median, p99 and max of
#   the detection time, and how many exceeded 5 periods.
# soak   the same parent and child, the child alive all along, for
#   --soak-seconds while --load busy loops (default: one per CPU) keep
#   every CPU saturated. Reported: false deaths (target 0) and pings sent.
#
#   bench/liveness.sh [--kills 100] [--soak-seconds 600] [--load N]
set -euo pipefail
cd "$(dirname "$0")/.."

KILLS=100
SOAK=600
LOAD=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) KILLS=$2; shift 2 ;;
    --soak-seconds) SOAK=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
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
      over = 0; for (i = 1; i <= n; i++) if (v[i] > 500) over++
      p99 = int(n * 0.99); if (p99 < 1) p99 = 1
      printf "kills: %d of %d measured; detection ms: min %.1f, median %.1f, p99 %.1f, max %.1f (bound 400-500); over 500 ms: %d\n",
        n, kills, v[1], v[int((n + 1) / 2)], v[p99], v[n], over
    }'
fi
if [ "$SOAK" -gt 0 ]; then
  pids=()
  for _ in $(seq "$LOAD"); do (while :; do :; done) & pids+=($!); done
  trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
  BCL_LIVENESS_SOAK=$SOAK run soak_entry | grep '^soak' | sed "s/^/with $LOAD busy loops: /"
fi
rm -f "$OUT"
echo "Machine load (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; commit $(git rev-parse --short HEAD)"
