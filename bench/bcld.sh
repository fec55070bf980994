#!/usr/bin/env bash
# bench/bcld.sh — the node daemon bcld against the direct method it wraps,
# in one run, on configs/lab/pair.toml (one veth pair, nodes a and b).
#
# Each round runs the direct method (--method, default packet; as root,
# daemons stopped) and then the same through a daemon on each node (bcld
# --method the same, the tools as uid 65534), alternating, --runs times:
#
#   latency   bcl-pingpong 64 B, blocking (everything sleeps when idle):
#             p50 and p99 round trips; ratio bcld / direct. Through the
#             daemons a round trip takes 4 more hand-offs (client -> daemon
#             -> NIC -> daemon -> client, each way), each a wake-up here.
#   bandwidth bcl-bw 64 KiB messages, blocking: MB/s, ratio bcld / direct.
#   four      four bcl-bw pairs at once through the same two daemons
#             (--port 1..4): their sum against one direct pair of the same
#             round.
#   cpu       host CPU time per GB moved during the bandwidth runs, bcld /
#             direct: the work per byte the daemons add.
#   idle      CPU time the two daemons used over --idle-seconds with a
#             client connected to each and no traffic (target: none).
#   bundling  four bcl-bw pairs of 16 B messages at once through the
#             daemons, bundling (the default) against `bcld --no-bundle`:
#             their summed messages/s, ratio bundled / not, and the frames
#             per container the sending daemon reported.
#   local     bcl-pingpong 64 B --local, both ends in one process as two
#             clients of node b's daemon (frames go ring to ring through
#             the daemon), against shm --local (the method same-node ranks
#             use), blocking, as uid 65534; ratio bcld / shm.
#   hand-off  the wake-up a daemon adds against a blocking endpoint's own,
#             with the placement fixed: node b's daemon pinned to CPU 1,
#             the two --local clients to CPU 0, so each of the four
#             hand-offs of a round trip is one cross-CPU wake-up; against
#             shm --local --pin 0,1, whose round trip is two. Ratio: bcld
#             p50 / 4 over shm p50 / 2.
#
# Busy-polling is not measured: through the daemons a round trip involves
# four busy processes, and this host has two CPUs.
#
#   bench/bcld.sh [--method packet|afxdp] [--runs 5] [--iters 5000] [--bw-iters 200] [--idle-seconds 10]
#
# Needs root. Builds the release tools first (CARGO_TARGET_DIR is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=5
ITERS=5000
BW_ITERS=200
IDLE=10
METHOD=packet
while [ $# -gt 0 ]; do
  case "$1" in
    --method) METHOD=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --bw-iters) BW_ITERS=$2; shift 2 ;;
    --idle-seconds) IDLE=$2; shift 2 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) echo "bcld.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bcld.sh: needs root (namespaces, the daemons)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
LAB=configs/lab/pair.toml
export BCL_LAB_PREFIX=bl-bcld
OUT=$(mktemp -d /tmp/bcld-bench.XXXXXX)
chmod 777 "$OUT"
# Copies an unprivileged user can execute wherever the checkout lives.
for t in bcl-pingpong bcl-bw bcld bcl-info; do install -m 755 "$BIN/$t" "$OUT/$t"; done
ETHERTYPE=0x88b6

"$BIN/bcl-lab" up "$LAB" >/dev/null
DPIDS=()
cleanup() {
  stop_daemons
  "$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
}
# start_daemons [EXTRA BCLD ARGS...]; with PIN_B set, node b's daemon runs
# on that CPU only.
start_daemons() {
  ip netns exec "$BCL_LAB_PREFIX.a" "$OUT/bcld" --foreground --node 1 --method "$METHOD" --socket "$OUT/a.sock" "$@" 2>>"$OUT/bcld.log" &
  DPIDS+=($!)
  ip netns exec "$BCL_LAB_PREFIX.b" ${PIN_B:+taskset -c "$PIN_B"} "$OUT/bcld" --foreground --node 2 --method "$METHOD" --socket "$OUT/b.sock" "$@" 2>>"$OUT/bcld.log" &
  DPIDS+=($!)
  for s in a b; do
    for _ in $(seq 100); do [ -S "$OUT/$s.sock" ] && break; sleep 0.05; done
  done
}
stop_daemons() {
  for p in "${DPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${DPIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  DPIDS=()
}
trap cleanup EXIT

NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
# run NODE SOCKET_OR_EMPTY TOOL ARGS...: as root when no socket, else as nobody.
run() {
  local node=$1 sock=$2; shift 2
  if [ -z "$sock" ]; then
    ip netns exec "$BCL_LAB_PREFIX.$node" "$@"
  else
    ip netns exec "$BCL_LAB_PREFIX.$node" env BCL_BCLD_SOCKET="$sock" "${NOBODY[@]}" "$@"
  fi
}
# pair TOOL METHOD SOCK_A SOCK_B JSON ARGS...: server on b, client on a.
pair() {
  local tool=$1 method=$2 sa=$3 sb=$4 json=$5; shift 5
  local fifo; fifo=$(mktemp -u "$OUT/fifo.XXXXXX"); mkfifo "$fifo"
  run b "$sb" "$OUT/$tool" --method "$method" --ethertype $ETHERTYPE --serve "$@" >"$fifo" 2>>"$OUT/server.log" &
  local spid=$!
  local d
  exec 3<"$fifo"
  read -r d <&3; d=${d#listening: }
  cat <&3 >/dev/null &
  exec 3<&-
  run a "$sa" "$OUT/$tool" --method "$method" --ethertype $ETHERTYPE --connect "$d" --json "$json" "$@" >/dev/null 2>>"$OUT/client.log"
  wait "$spid" 2>/dev/null || true
  rm -f "$fifo"
}

# busy: CPU time of the whole host (user, nice, system, irq, softirq), in
# clock ticks; every process and the kernel's veth work count.
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }

# small_pairs PREFIX: four bcl-bw pairs of 16 B messages at once through
# the daemons (--port 21..24).
small_pairs() {
  local pids=()
  for p in 1 2 3 4; do
    pair bcl-bw bcld "$OUT/a.sock" "$OUT/b.sock" "$1-$p.json" --sizes 16 --iters 20000 --port $((20 + p)) &
    pids+=($!)
  done
  wait "${pids[@]}"
}

for r in $(seq "$RUNS"); do
  echo "# round $r/$RUNS"
  pair bcl-pingpong "$METHOD" "" "" "$OUT/lat-direct-$r.json" --sizes 64 --iters "$ITERS"
  t0=$(busy)
  pair bcl-bw "$METHOD" "" "" "$OUT/bw-direct-$r.json" --sizes 64K --iters "$BW_ITERS"
  echo $(( $(busy) - t0 )) >"$OUT/cpu-direct-$r"
  start_daemons
  pair bcl-pingpong bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/lat-bcld-$r.json" --sizes 64 --iters "$ITERS"
  t0=$(busy)
  pair bcl-bw bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/bw-bcld-$r.json" --sizes 64K --iters "$BW_ITERS"
  echo $(( $(busy) - t0 )) >"$OUT/cpu-bcld-$r"
  FOUR=()
  for p in 1 2 3 4; do
    pair bcl-bw bcld "$OUT/a.sock" "$OUT/b.sock" "$OUT/four-$r-$p.json" --sizes 64K --iters "$BW_ITERS" --port $p &
    FOUR+=($!)
  done
  wait "${FOUR[@]}"
  small_pairs "$OUT/small-bundle-$r"
  echo "$(BCL_BCLD_SOCKET="$OUT/a.sock" "$OUT/bcl-info" --json 2>/dev/null | python3 -c 'import json,sys; c=json.load(sys.stdin)["bcld"]["counters"]; print(c.get("tx_containers",0), c.get("tx_frames_bundled",0))' 2>/dev/null || echo "0 0")" >"$OUT/containers-$r"
  run b "" "${NOBODY[@]}" "$OUT/bcl-pingpong" --method shm --local --sizes 64 --iters "$ITERS" --json "$OUT/local-shm-$r.json" >/dev/null 2>>"$OUT/client.log"
  run b "$OUT/b.sock" "$OUT/bcl-pingpong" --method bcld --local --sizes 64 --iters "$ITERS" --port 10 --json "$OUT/local-bcld-$r.json" >/dev/null 2>>"$OUT/client.log"
  stop_daemons
  start_daemons --no-bundle
  small_pairs "$OUT/small-plain-$r"
  stop_daemons
done

# Hand-off against wake-up, placement fixed.
for r in $(seq "$RUNS"); do
  PIN_B=1 start_daemons
  run b "$OUT/b.sock" "$OUT/bcl-pingpong" --method bcld --local --pin 0,0 --sizes 64 --iters "$ITERS" --port 30 --json "$OUT/handoff-bcld-$r.json" >/dev/null 2>>"$OUT/client.log"
  stop_daemons
  run b "" "${NOBODY[@]}" "$OUT/bcl-pingpong" --method shm --local --pin 0,1 --sizes 64 --iters "$ITERS" --json "$OUT/handoff-shm-$r.json" >/dev/null 2>>"$OUT/client.log"
done

# Idle: a client on each daemon, no traffic.
start_daemons
run b "$OUT/b.sock" "$OUT/bcl-pingpong" --method bcld --serve >/dev/null 2>&1 &
IDLE_SERVER=$!
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before=0; for p in "${DPIDS[@]}"; do before=$((before + $(ticks "$p"))); done
sleep "$IDLE"
after=0; for p in "${DPIDS[@]}"; do after=$((after + $(ticks "$p"))); done
kill "$IDLE_SERVER" 2>/dev/null || true
wait "$IDLE_SERVER" 2>/dev/null || true
HZ=$(getconf CLK_TCK)

python3 - "$OUT" "$RUNS" "$(( after - before ))" "$HZ" "$IDLE" "$METHOD" <<'EOF'
import json, statistics, sys
out, runs, idle_ticks, hz, idle_s, method = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
def load(name):
    with open(f"{out}/{name}") as f:
        return json.load(f)
def summary(label, xs, unit=""):
    xs = sorted(xs)
    print(f"  {label:<44} median {statistics.median(xs):8.3f}{unit}  range {xs[0]:.3f}-{xs[-1]:.3f}  (n={len(xs)})")
lat = {"p50": [], "p99": []}
rows = []
bw, four = [], []
cpu = []
def ticks(name):
    with open(f"{out}/{name}") as f:
        return int(f.read())
for r in range(1, runs + 1):
    d = load(f"lat-direct-{r}.json")["results"][0]
    b = load(f"lat-bcld-{r}.json")["results"][0]
    lat["p50"].append(b["p50_ns"] / d["p50_ns"])
    lat["p99"].append(b["p99_ns"] / d["p99_ns"])
    rows.append((d["p50_ns"] / 1e3, b["p50_ns"] / 1e3, d["p99_ns"] / 1e3, b["p99_ns"] / 1e3))
    bd = load(f"bw-direct-{r}.json")["results"][0]["mbytes_per_s"]
    bb = load(f"bw-bcld-{r}.json")["results"][0]["mbytes_per_s"]
    f = sum(load(f"four-{r}-{p}.json")["results"][0]["mbytes_per_s"] for p in (1, 2, 3, 4))
    bw.append((bd, bb, f))
    # CPU seconds per GB moved (10^9 bytes), host-wide.
    per_gb = lambda kind: ticks(f"cpu-{kind}-{r}") / hz / (load(f"bw-{kind}-{r}.json")["results"][0]["bytes"] / 1e9)
    cpu.append((per_gb("direct"), per_gb("bcld")))
print("Round trips, 64 B, blocking (µs): direct p50, bcld p50, direct p99, bcld p99")
for row in rows:
    print("  " + "  ".join(f"{x:8.1f}" for x in row))
summary(f"p50 ratio bcld / direct {method}", lat["p50"])
summary(f"p99 ratio bcld / direct {method}", lat["p99"])
added = [ (b - d) / 4 for d, b, _, _ in rows ]
half = [ d / 2 for d, _, _, _ in rows ]
summary("added per daemon hand-off, µs ((bcld-direct)/4)", added)
summary("direct one-way (half round trip), µs", half)
summary("hand-off / direct one-way", [a / h for a, h in zip(added, half)])
print("Bandwidth, 64 KiB, blocking (MB/s): direct, bcld, four bcld pairs together")
for row in bw:
    print("  " + "  ".join(f"{x:8.1f}" for x in row))
summary(f"one client: bcld / direct {method}", [b / d for d, b, _ in bw])
summary("four clients together / one direct", [f / d for d, _, f in bw])
print("CPU seconds per GB moved, whole host (direct, bcld)")
for row in cpu:
    print("  " + "  ".join(f"{x:8.2f}" for x in row))
summary(f"CPU per GB: bcld / direct {method}", [b / d for d, b in cpu])
small = []
for r in range(1, runs + 1):
    b = sum(load(f"small-bundle-{r}-{p}.json")["results"][0]["msgs_per_s"] for p in (1, 2, 3, 4))
    u = sum(load(f"small-plain-{r}-{p}.json")["results"][0]["msgs_per_s"] for p in (1, 2, 3, 4))
    with open(f"{out}/containers-{r}") as f:
        c, fr = (int(x) for x in f.read().split())
    small.append((b, u, fr / c if c else 0.0))
print("Four pairs of 16 B messages at once (messages/s summed): bundling, --no-bundle, frames per container")
for row in small:
    print(f"  {row[0]:10.0f}  {row[1]:10.0f}  {row[2]:6.1f}")
summary("bundled / not bundled, messages/s", [b / u for b, u, _ in small])
def p50_pairs(title, first, second):
    """Per round, the p50 (µs) of runs `first` and `second`, printed."""
    rows = [tuple(load(f"{name}-{r}.json")["results"][0]["p50_ns"] / 1e3 for name in (first, second))
            for r in range(1, runs + 1)]
    print(title)
    for row in rows:
        print("  " + "  ".join(f"{x:8.1f}" for x in row))
    return rows
local = p50_pairs("Two clients of one node, 64 B round trip p50, blocking (µs): shm --local, bcld --local",
                  "local-shm", "local-bcld")
summary("local: bcld / shm", [b / s for s, b in local])
hand = p50_pairs("Placement fixed, 64 B p50 (µs): bcld --local (clients CPU 0, daemon CPU 1), shm --local --pin 0,1",
                 "handoff-bcld", "handoff-shm")
summary("hand-off (bcld/4) / shm wake-up (shm/2)", [(b / 4) / (s / 2) for b, s in hand])
print(f"Idle: the two daemons used {idle_ticks} clock ticks ({idle_ticks / hz:.3f} s of CPU) in {idle_s:.0f} s with a client each")
EOF
echo "raw JSON: $OUT"
