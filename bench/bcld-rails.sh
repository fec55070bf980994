#!/usr/bin/env bash
# bench/bcld-rails.sh — a node daemon with several NICs, used as rails, in
# one run on configs/lab/rails2.toml (nodes a and b joined by two veth
# pairs, to-r0 and to-r1), or with --shaped on configs/lab/rails4-shaped.toml
# (four rails through switches shaped to 100 Mbit/s each, to-r0 .. to-r3:
# the links, not the CPUs, bound each rail; every run with BCL's
# congestion control on, as a shared shaped link needs).
#
# Each round runs, alternating, --runs times (bcl-bw, 64 KiB messages,
# blocking, --bw-iters messages):
#
#   bcld-one    through the daemons (each owning every NIC), one NIC:
#               the tools as uid 65534, no --rails (the daemon's first NIC);
#   bcld-rails  the same with --rails over every NIC: one connection to
#               the daemon per NIC, the core striping over them;
#   bcld-four   four pairs at once through the daemons' first NIC (--port
#               1..4), their sum;
#   direct-one  the daemons' method (--method, default packet) as root
#               on to-r0 (daemons stopped);
#   direct-rails the same with --rails over every NIC.
#
# Prints MB/s per run and the median ratios with their ranges:
# bcld-rails / bcld-one (what the other NICs give through the daemon),
# bcld-rails / direct-rails (what the daemon costs on rails), bcld-four /
# direct-one (several clients sharing a NIC against one direct process).
# A bcl-bw iteration is a window of 64 messages: 4 MiB.
#
#   bench/bcld-rails.sh [--shaped] [--method packet|afxdp] [--runs 5] [--bw-iters 200]
#
# Needs root. Builds the release tools first (CARGO_TARGET_DIR is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=5
BW_ITERS=200
LAB=configs/lab/rails2.toml
NICS=(to-r0 to-r1)
CC=()
METHOD=packet
while [ $# -gt 0 ]; do
  case "$1" in
    --method) METHOD=$2; shift 2 ;;
    --shaped) LAB=configs/lab/rails4-shaped.toml; NICS=(to-r0 to-r1 to-r2 to-r3); CC=(--congestion on); shift ;;
    --runs) RUNS=$2; shift 2 ;;
    --bw-iters) BW_ITERS=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "bcld-rails.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bcld-rails.sh: needs root (namespaces, the daemons)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
export BCL_LAB_PREFIX=bl-bdr
RAILS=$(IFS=,; echo "${NICS[*]}")
NIC_ARGS=()
for n in "${NICS[@]}"; do NIC_ARGS+=(--nic "$n"); done
OUT=$(mktemp -d /tmp/bcld-rails-bench.XXXXXX)
chmod 777 "$OUT"
for t in bcl-bw bcld; do install -m 755 "$BIN/$t" "$OUT/$t"; done

"$BIN/bcl-lab" up "$LAB" >/dev/null
DPIDS=()
start_daemons() {
  local node=1
  for n in a b; do
    ip netns exec "$BCL_LAB_PREFIX.$n" "$OUT/bcld" --foreground --node $node --method "$METHOD" "${NIC_ARGS[@]}" --socket "$OUT/$n.sock" 2>>"$OUT/bcld.log" &
    DPIDS+=($!)
    node=2
  done
  for s in a b; do
    for _ in $(seq 100); do [ -S "$OUT/$s.sock" ] && break; sleep 0.05; done
  done
}
stop_daemons() {
  for p in "${DPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${DPIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  DPIDS=()
}
cleanup() {
  stop_daemons
  "$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
}
trap cleanup EXIT

NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
run() {
  local node=$1 sock=$2; shift 2
  if [ -z "$sock" ]; then
    ip netns exec "$BCL_LAB_PREFIX.$node" "$@"
  else
    ip netns exec "$BCL_LAB_PREFIX.$node" env BCL_BCLD_SOCKET="$sock" "${NOBODY[@]}" "$@"
  fi
}
# pair METHOD SOCK_A SOCK_B JSON ARGS...: bcl-bw server on b, client on a.
pair() {
  local method=$1 sa=$2 sb=$3 json=$4; shift 4
  local fifo; fifo=$(mktemp -u "$OUT/fifo.XXXXXX"); mkfifo "$fifo"
  run b "$sb" "$OUT/bcl-bw" --method "$method" --serve "$@" >"$fifo" 2>>"$OUT/server.log" &
  local spid=$!
  local d
  exec 3<"$fifo"
  read -r d <&3; d=${d#listening: }
  cat <&3 >/dev/null &
  exec 3<&-
  run a "$sa" "$OUT/bcl-bw" --method "$method" --connect "$d" --json "$json" "$@" >/dev/null 2>>"$OUT/client.log"
  wait "$spid" 2>/dev/null || true
  rm -f "$fifo"
}

BW=(--sizes 64K --iters "$BW_ITERS" "${CC[@]}")
for r in $(seq "$RUNS"); do
  echo "# round $r/$RUNS"
  start_daemons
  pair bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/bcld-one-$r.json" "${BW[@]}"
  pair bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/bcld-rails-$r.json" "${BW[@]}" --rails "$RAILS"
  FOUR=()
  for p in 1 2 3 4; do
    pair bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/bcld-four-$r-$p.json" "${BW[@]}" --port $p &
    FOUR+=($!)
  done
  wait "${FOUR[@]}"
  stop_daemons
  pair "$METHOD" "" "" "$OUT/direct-one-$r.json" "${BW[@]}" --ifname "${NICS[0]}"
  pair "$METHOD" "" "" "$OUT/direct-rails-$r.json" "${BW[@]}" --rails "$RAILS"
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def one(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)["results"][0]["mbytes_per_s"]
def mbs(kind, r):
    if kind == "bcld-four":
        return sum(one(f"{kind}-{r}-{p}") for p in (1, 2, 3, 4))
    return one(f"{kind}-{r}")
kinds = ["bcld-one", "bcld-rails", "bcld-four", "direct-one", "direct-rails"]
print("64 KiB, blocking, MB/s per round: " + ", ".join(kinds))
for r in range(1, runs + 1):
    print(f"  round {r}: " + "  ".join(f"{mbs(k, r):8.1f}" for k in kinds))
def ratio(label, a, b):
    xs = sorted(mbs(a, r) / mbs(b, r) for r in range(1, runs + 1))
    print(f"  {label:<34} median {statistics.median(xs):.3f}  range {xs[0]:.3f}-{xs[-1]:.3f}  (n={len(xs)})")
ratio("bcld-rails / bcld-one", "bcld-rails", "bcld-one")
ratio("bcld-rails / direct-rails", "bcld-rails", "direct-rails")
ratio("direct-rails / direct-one", "direct-rails", "direct-one")
ratio("bcld-one / direct-one", "bcld-one", "direct-one")
ratio("bcld-four / direct-one", "bcld-four", "direct-one")
print(f"raw JSON in {out}")
PY
