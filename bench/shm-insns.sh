#!/usr/bin/env bash
# bench/shm-insns.sh — instructions per one-way 8 B message over shared
# memory (send + receive, one thread: bcl-shm-insns), counted by callgrind,
# which counts the same for the same binary whatever the host's load.
#
# Runs bcl-shm-insns under callgrind with 2000 and 12000 round trips and
# divides the difference by the 20000 one-way messages between them, so
# set-up is not counted. With --against WORKTREE (a checkout of another
# commit, e.g. `git worktree add --detach /tmp/base REV`), builds the same
# program there too (the source file is copied in, not committed) and
# prints both counts and their ratio.
#
#   bench/shm-insns.sh [--against WORKTREE]
set -euo pipefail
cd "$(dirname "$0")/.."
AGAINST=""
while [ $# -gt 0 ]; do
  case "$1" in
    --against) AGAINST=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "shm-insns: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "shm-insns: needs valgrind (apt-get install valgrind)" >&2; exit 2; }

# Instructions per one-way message of the bcl-shm-insns binary $1.
per_message() {
  local bin=$1 out ir1 ir2
  out=$(mktemp -d /tmp/shm-insns.XXXXXX)
  for n in 2000 12000; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" "$bin" --iters "$n" >/dev/null 2>"$out/log.$n"
  done
  ir1=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$out/cg.2000")
  ir2=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$out/cg.12000")
  rm -rf "$out"
  echo $(( (ir2 - ir1) / 20000 ))
}

cargo build --release -q -p bcl-bench --bin bcl-shm-insns
NEW=$(per_message "${CARGO_TARGET_DIR:-target}/release/bcl-shm-insns")
echo "this build ($(git rev-parse --short HEAD)): $NEW instructions per one-way 8 B message"
if [ -n "$AGAINST" ]; then
  mkdir -p "$AGAINST/bench/src/bin"
  cp bench/src/bin/bcl-shm-insns.rs "$AGAINST/bench/src/bin/"
  (cd "$AGAINST" && cargo build --release -q -p bcl-bench --bin bcl-shm-insns)
  OLD=$(per_message "$AGAINST/target/release/bcl-shm-insns")
  echo "base ($(git -C "$AGAINST" rev-parse --short HEAD)): $OLD instructions per one-way 8 B message"
  python3 -c "print(f'new / base: {$NEW/$OLD:.3f}')"
fi
