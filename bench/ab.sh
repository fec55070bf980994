#!/usr/bin/env bash
# bench/ab.sh — one measurement, two builds, alternating in the same minutes.
#
# This host's speed moves by 2x between minutes, so a build is compared with
# another only run against run: TOOL ARGS --json FILE runs with the base
# build's TOOL, then with this build's, --runs times (the order flips every
# pair, so neither build always runs first). Prints each pair's figures and
# its ratio new/base, then the median ratio with its range.
#
#   bench/ab.sh --base DIR [--runs N] [--field KEY] -- TOOL ARGS...
#
#   --base DIR   the other build's binaries (a target/release directory),
#                e.g. `git worktree add --detach /tmp/base REV` and
#                `cargo build --release -p bcl-tools` there
#   --runs N     pairs to run (default 10)
#   --field KEY  the figure compared, a key of the JSON report's first
#                result (default p50_ns; mbytes_per_s or msgs_per_s for
#                bcl-bw)
#   TOOL ARGS    a tool that writes --json (bcl-pingpong, bcl-bw) and its
#                arguments, without --json
#
# Example (shared-memory latency of two builds, 8 B, pinned):
#   bench/ab.sh --base /tmp/base/target/release -- bcl-pingpong --method shm \
#       --local --busy-poll --pin 1,0 --sizes 8 --iters 200000 --warmup 10000
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=""
RUNS=10
FIELD=p50_ns
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --field) FIELD=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "ab: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$BASE" ] || { echo "ab: --base DIR is required (see --help)" >&2; exit 2; }
[ $# -ge 1 ] || { echo "ab: name the tool and its arguments after -- (see --help)" >&2; exit 2; }
TOOL=$1; shift
NEW=${CARGO_TARGET_DIR:-target}/release/$TOOL
OLD=$BASE/$TOOL
[ -x "$OLD" ] || { echo "ab: no $OLD (build the base with cargo build --release)" >&2; exit 2; }
cargo build --release -q -p bcl-tools
[ -x "$NEW" ] || { echo "ab: no $NEW" >&2; exit 2; }

OUT=$(mktemp -d /tmp/ab.XXXXXX)
field() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0][sys.argv[2]])' "$1" "$FIELD"
}
echo "# base: $OLD"
echo "# new:  $NEW ($(git rev-parse --short HEAD))"
echo "# $TOOL $* -- $FIELD; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| pair | base | new | new / base |"
echo "|---|---|---|---|"
RATIOS=()
for r in $(seq 1 "$RUNS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$NEW; [ "$which" = old ] && bin=$OLD
    if ! "$bin" "$@" --json "$OUT/$which-$r.json" >/dev/null 2>"$OUT/$which-$r.err"; then
      echo "ab: the $which build failed (pair $r):" >&2
      cat "$OUT/$which-$r.err" >&2
      exit 1
    fi
  done
  A=$(field "$OUT/old-$r.json"); B=$(field "$OUT/new-$r.json")
  RATIO=$(python3 -c "print(f'{$B/$A:.3f}')")
  RATIOS+=("$RATIO")
  echo "| $r | $A | $B | $RATIO |"
done
python3 - "${RATIOS[@]}" <<'EOF'
import statistics, sys
r = sorted(map(float, sys.argv[1:]))
print(f"median new/base {statistics.median(r):.3f} (range {r[0]:.3f}-{r[-1]:.3f}, {len(r)} pairs)")
EOF
echo "# raw JSON: $OUT; load after $(cut -d' ' -f1-3 /proc/loadavg)"
