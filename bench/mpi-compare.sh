#!/usr/bin/env bash
# bench/mpi-compare.sh — BCL's MPI against Open MPI, the same C program, in one run.
#
# bench/mpi/mpi_pingpong.c is built twice: with target/release/bclcc (BCL's
# libbclmpi) and with mpicc.openmpi. Between 2 ranks it measures, per size,
# the latency of a ping-pong (p50 and p99 of the one-way time, half the
# round trip, µs) and the bandwidth of windows of MPI_Isend (MB/s, 10^6
# bytes per second).
#
# Beside them, the floor of BCL's MPI layer: bcl-pingpong (BCL's raw
# messages, no MPI) between two processes over the same method at 8 B,
# busy-poll; it reports round trips, halved here to one-way.
#
# This host's speed moves between minutes, so the runs are only compared
# run against run: per case, a BCL MPI run, an Open MPI run and a
# bcl-pingpong run follow each other --pairs times, the order reversing
# every round (odd: BCL, Open MPI, bcl-pingpong; even: the other way).
# Prints, per (case, test, size), the median over rounds of each side's
# figure and the median of the per-round ratios with their range (min-max
# over rounds). Both ratios are of times, so < 1 always means BCL is faster:
#   latency:   BCL p50 / Open MPI p50
#   bandwidth: Open MPI MB/s / BCL MB/s
# and "MPI layer cost" = BCL MPI p50 / bcl-pingpong p50 one-way at 8 B
# (> 1: what the MPI layer adds over BCL's raw messages; skipped, with the
# bcl-pingpong runs, when --sizes has no 8).
#
# Every side busy-polls: BCL MPI with BCL_MPI_PROGRESS=busy, Open MPI with
# mpi_yield_when_idle 0, bcl-pingpong with --busy-poll. No pinning.
#
# Cases:
#   shm  2 ranks on this node. BCL: bcl-run -n 2 (shared memory); Open MPI:
#        pml ob1, btl self + vader (or sm, Open MPI 5); bcl-pingpong --method
#        shm, --serve in one process and --connect in another.
#   lab  (--lab, root) 2 lab nodes x 1 rank (configs/lab/pair.toml, nodes a
#        and b): BCL with BCL_METHODS=packet (--lab-method), Open MPI with the
#        tcp BTL between the same two namespaces (mpirun in namespace a; an
#        rsh agent starts the remote daemon in namespace b with `ip netns
#        exec`), bcl-pingpong --lab over the same method. With afxdp, the
#        BCL job gets a cluster file allowing it on the pair (bcl-run
#        --cluster; written into the run's directory).
#
# Installs what it needs: Open MPI (apt-get install openmpi-bin
# libopenmpi-dev) when mpicc.openmpi or mpirun.openmpi is missing (root);
# builds bcl-mpi (libbclmpi, bclcc), bcl-run, bcl-pingpong and bcl-lab in
# release. mpicc.openmpi and mpirun.openmpi are named explicitly: MPICH may
# be installed too, and plain mpicc/mpirun follow Debian's alternatives.
# The binaries and libbclmpi are copied into the run's directory first, so
# a rebuild in the tree during the run does not change what is measured.
#
#   bench/mpi-compare.sh [--pairs N] [--sizes 8,65536,4194304] [--iters N]
#       [--warmup N] [--window W] [--lab] [--lab-method afxdp|packet|udp]
#       [--append]
#
#   --pairs N        rounds per case (default 5)
#   --sizes LIST     message sizes in bytes (default 8,65536,4194304)
#   --iters N        timed iterations, passed to mpi_pingpong (default: its
#                    1000; it runs fewer for sizes >= 1 MiB) and, at 8 B,
#                    to bcl-pingpong
#   --warmup N       untimed iterations (default: mpi_pingpong's 100)
#   --window W       messages per bandwidth window (default: its 16)
#   --lab            add the 2 lab nodes x 1 rank case (root)
#   --lab-method M   BCL's method between the lab nodes: afxdp, packet
#                    (default) or udp
#   --append         append the tables, with command, date, commit and
#                    load, to docs/PERFORMANCE.md
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=5
SIZES=8,65536,4194304
ITERS=1000
WARMUP=100
PASS=()
LAB=0
LAB_METHOD=packet
APPEND=0
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --iters) ITERS=$2; PASS+=("$1" "$2"); shift 2 ;;
    --warmup) WARMUP=$2; PASS+=("$1" "$2"); shift 2 ;;
    --window) PASS+=("$1" "$2"); shift 2 ;;
    --lab) LAB=1; shift ;;
    --lab-method) LAB_METHOD=$2; shift 2 ;;
    --append) APPEND=1; shift ;;
    -h|--help) sed -n '2,65p' "$0"; exit 0 ;;
    *) echo "mpi-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$LAB_METHOD" in afxdp|packet|udp) ;; *)
  echo "mpi-compare: --lab-method takes afxdp, packet or udp" >&2; exit 2 ;;
esac
case "$PAIRS" in ''|*[!0-9]*|0) echo "mpi-compare: --pairs takes a positive number" >&2; exit 2 ;; esac
PASS+=(--sizes "$SIZES")
# The MPI layer cost row needs the 8 B latency of the MPI runs.
RAW=0
case ",$SIZES," in *,8,*) RAW=1 ;; esac

# --- What it needs ------------------------------------------------------
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "mpi-compare: Open MPI is missing (mpicc.openmpi, mpirun.openmpi); run as root to install it, or apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 1
  fi
  echo "# installing Open MPI (apt-get install -y openmpi-bin libopenmpi-dev)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >&2
fi
if [ "$LAB" = 1 ] && [ "$(id -u)" != 0 ]; then
  echo "mpi-compare: --lab needs root (network namespaces)" >&2
  exit 1
fi
cargo build --release -q -p bcl-mpi
cargo build --release -q -p bcl-tools --bin bcl-run --bin bcl-pingpong
if [ "$LAB" = 1 ]; then cargo build --release -q -p bcl-lab; fi
TARGET=$(realpath "${CARGO_TARGET_DIR:-target}/release")
OUT=$(mktemp -d /tmp/mpi-compare.XXXXXX)
# A snapshot of what is measured (others may rebuild the tree meanwhile):
# the tools, and libbclmpi as libmpi.so.12 first on LD_LIBRARY_PATH (bclcc
# links with a RUNPATH, which LD_LIBRARY_PATH overrides).
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$TARGET/bcl-run" "$TARGET/bcl-pingpong" "$OUT/bin/"
if [ "$LAB" = 1 ]; then cp "$TARGET/bcl-lab" "$OUT/bin/"; fi
cp "$TARGET/libbclmpi.so" "$OUT/lib/libmpi.so.12"
BIN=$OUT/bin
"$TARGET/bclcc" -O2 -Wall -o "$OUT/mpi_pingpong.bcl" bench/mpi/mpi_pingpong.c
mpicc.openmpi -O2 -Wall -o "$OUT/mpi_pingpong.ompi" bench/mpi/mpi_pingpong.c

OMPI_VERSION=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p' | head -1)
# The shared-memory BTL is vader in Open MPI 3-4, sm in 5.
if ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then SHM_BTL=vader; else SHM_BTL=sm; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ob1 so that the BTL choice holds (UCX's pml would ignore it); no UCX osc
# (its warnings are noise; no one-sided calls here).
MPIRUN=(mpirun.openmpi --allow-run-as-root --bind-to none --mca pml ob1
        --mca osc ^ucx --mca mpi_yield_when_idle 0)
BCL_ENV=(env LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" BCL_MPI_PROGRESS=busy)
RAW_ARGS=(--busy-poll --sizes 8 --iters "$ITERS" --warmup "$WARMUP")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  if [ "$LAB" = 1 ] && [ -n "${lab:-}" ]; then "$BIN/bcl-lab" down "$lab" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# Keeps rank 0's JSON lines of a bcl-run output.
bcl_json() { sed -n 's/^\[0\] \({.*}\)$/\1/p'; }

fail_run() { # SIDE KEY PAIR ERRFILE COMMAND...
  local side=$1 key=$2 pair=$3 err=$4; shift 4
  echo "mpi-compare: the $side run failed ($key, round $pair): $*" >&2
  tail -20 "$err" >&2
  exit 1
}

# The raw shm floor: a bcl-pingpong server in one process, its client in
# another; the client writes the JSON report.
raw_shm() { # OUTBASE KEY PAIR
  local base=$1 key=$2 pair=$3 desc= i
  "$BIN/bcl-pingpong" --method shm --serve "${RAW_ARGS[@]}" >"$base.srv.out" 2>"$base.srv.err" &
  SERVER_PID=$!
  for i in $(seq 1 200); do
    desc=$(sed -n 's/^listening: //p' "$base.srv.out")
    [ -n "$desc" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$desc" ]; then
    fail_run raw "$key" "$pair" "$base.srv.err" "$BIN/bcl-pingpong --method shm --serve ${RAW_ARGS[*]} (no listening: line)"
  fi
  if ! "$BIN/bcl-pingpong" --method shm --connect "$desc" "${RAW_ARGS[@]}" --json "$base.json" \
      >"$base.raw" 2>"$base.err"; then
    fail_run raw "$key" "$pair" "$base.err" "$BIN/bcl-pingpong --method shm --connect $desc ${RAW_ARGS[*]}"
  fi
  if ! wait "$SERVER_PID"; then
    SERVER_PID=
    fail_run raw "$key" "$pair" "$base.srv.err" "$BIN/bcl-pingpong --method shm --serve ${RAW_ARGS[*]}"
  fi
  SERVER_PID=
}

# run_one KEY SIDE PAIR: one run of SIDE (bcl|ompi|raw) for the case KEY
# into $OUT/KEY-SIDE-PAIR.jsonl (raw: .json); stops the script with its
# error output if it fails.
run_one() {
  local key=$1 side=$2 pair=$3 cmd=()
  local base="$OUT/$key-$side-$pair"
  if [ "$side" = raw ]; then
    if [ "${#RAW_CMD[@]}" = 0 ]; then
      raw_shm "$base" "$key" "$pair"
    elif ! "${RAW_CMD[@]}" --json "$base.json" >"$base.raw" 2>"$base.err"; then
      fail_run raw "$key" "$pair" "$base.err" "${RAW_CMD[@]}"
    fi
    return
  fi
  if [ "$side" = bcl ]; then cmd=("${BCL_CMD[@]}"); else cmd=("${OMPI_CMD[@]}"); fi
  if ! "${cmd[@]}" >"$base.raw" 2>"$base.err"; then
    fail_run "$side" "$key" "$pair" "$base.err" "${cmd[@]}"
  fi
  if [ "$side" = bcl ]; then bcl_json <"$base.raw" >"$base.jsonl"; else grep '^{' "$base.raw" >"$base.jsonl" || true; fi
  if [ ! -s "$base.jsonl" ]; then
    echo "mpi-compare: the $side run printed no results ($key, round $pair): ${cmd[*]}" >&2
    tail -20 "$base.err" >&2
    exit 1
  fi
}

# alternate KEY: --pairs rounds of BCL_CMD, OMPI_CMD and the raw floor, the
# order reversing every round.
alternate() {
  local key=$1 r sides
  echo "# $key: bcl: ${BCL_CMD[*]}" >&2
  echo "# $key: ompi: ${OMPI_CMD[*]}" >&2
  if [ "$RAW" = 1 ]; then
    if [ "${#RAW_CMD[@]}" = 0 ]; then
      echo "# $key: raw: $BIN/bcl-pingpong --method shm --serve / --connect DESCRIPTOR ${RAW_ARGS[*]}" >&2
    else
      echo "# $key: raw: ${RAW_CMD[*]}" >&2
    fi
  fi
  for r in $(seq 1 "$PAIRS"); do
    if [ $((r % 2)) = 1 ]; then sides="bcl ompi raw"; else sides="raw ompi bcl"; fi
    for side in $sides; do
      if [ "$side" = raw ] && [ "$RAW" = 0 ]; then continue; fi
      run_one "$key" "$side" "$r"
    done
    echo "# $key: round $r done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  done
  KEYS+=("$key")
}

KEYS=()
CASES=()

# --- shm: 2 ranks on this node -------------------------------------------
BCL_CMD=("${BCL_ENV[@]}" "$BIN/bcl-run" -n 2 -- "$OUT/mpi_pingpong.bcl" "${PASS[@]}")
OMPI_CMD=("${MPIRUN[@]}" --mca btl "self,$SHM_BTL" -np 2 "$OUT/mpi_pingpong.ompi" "${PASS[@]}")
RAW_CMD=()
alternate shm
CASES+=("shm|2 ranks, this node|shm|self,$SHM_BTL")

# --- lab: 2 lab nodes x 1 rank -------------------------------------------
if [ "$LAB" = 1 ]; then
  export BCL_LAB_PREFIX=bl-mpicmp
  lab=configs/lab/pair.toml
  NS_A=$BCL_LAB_PREFIX.a NS_B=$BCL_LAB_PREFIX.b
  "$BIN/bcl-lab" down "$lab" >/dev/null 2>&1 || true
  "$BIN/bcl-lab" up "$lab" >/dev/null
  IP_A=10.77.1.1 IP_B=10.77.1.2
  # mpirun's rsh agent: `AGENT HOST COMMAND...` runs COMMAND in HOST's
  # namespace (each with its own UTS name, so the two nodes differ).
  cat >"$OUT/netns-agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $IP_A) ns=$NS_A; name=mpicmp-a ;;
  $IP_B) ns=$NS_B; name=mpicmp-b ;;
  *) echo "netns-agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
EOF
  chmod +x "$OUT/netns-agent"
  # A job opens afxdp only where a cluster configuration allows it (it
  # attaches an XDP program to the NIC): one for the pair's two nodes.
  cluster=()
  if [ "$LAB_METHOD" = afxdp ]; then
    cat >"$OUT/cluster.toml" <<EOF
name = "mpicmp-pair"

[[fabric]]
name = "pair"
subnet = "10.77.1.0/24"

[[node]]
name = "a"
host = "$IP_A"
[[node.nic]]
fabric = "pair"
methods = ["afxdp", "packet", "udp"]

[[node]]
name = "b"
host = "$IP_B"
[[node.nic]]
fabric = "pair"
methods = ["afxdp", "packet", "udp"]
EOF
    cluster=(--cluster "$OUT/cluster.toml")
  fi
  BCL_CMD=("${BCL_ENV[@]}" BCL_METHODS="$LAB_METHOD" "$BIN/bcl-run" --lab "$lab" "${cluster[@]}"
           --nodes a,b --per-node 1 -- "$OUT/mpi_pingpong.bcl" "${PASS[@]}")
  OMPI_CMD=(ip netns exec "$NS_A" unshare --uts sh -c 'hostname mpicmp-a; exec "$@"' sh
            "${MPIRUN[@]}" -np 2 --host "$IP_A:1,$IP_B:1" --mca plm_rsh_agent "$OUT/netns-agent"
            --mca btl self,tcp --mca btl_tcp_if_include 10.77.1.0/24
            --mca oob_tcp_if_include 10.77.1.0/24 "$OUT/mpi_pingpong.ompi" "${PASS[@]}")
  RAW_CMD=("$BIN/bcl-pingpong" --method "$LAB_METHOD" --lab "$lab" --nodes a,b "${RAW_ARGS[@]}")
  alternate "lab-$LAB_METHOD"
  CASES+=("lab-$LAB_METHOD|2 lab nodes x 1 rank|$LAB_METHOD|self,tcp")
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

TABLE=$(python3 - "$OUT" "$PAIRS" "$RAW" "${CASES[@]}" <<'EOF'
import json, statistics, sys
out, pairs, raw, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
med = statistics.median
def load(key, side, r):
    rows = {}
    for line in open(f"{out}/{key}-{side}-{r}.jsonl"):
        j = json.loads(line)
        rows[(j["test"], j["size"])] = j
    return rows
def load_raw(key, r):
    j = json.load(open(f"{out}/{key}-raw-{r}.json"))
    (res,) = [x for x in j["results"] if x["size"] == 8]
    return res["p50_ns"] / 2 / 1000  # one-way, µs
def fmt(x):
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"
def ratio(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"
def span(rs):
    # rs: per-round ratios, None where a figure was 0 (printed as 0.0).
    ok = sorted(x for x in rs if x is not None)
    if not ok:
        return "n/a (a figure of 0 in every round)"
    note = "" if len(ok) == len(rs) else f" ({len(ok)} of {len(rs)} rounds: the others had a figure of 0)"
    return f"{ratio(med(ok))} [{ratio(ok[0])}–{ratio(ok[-1])}]{note}"
def div(x, y):
    return x / y if x > 0 and y > 0 else None
def metric(test):
    return "latency p50 one-way µs" if test == "latency" else "bandwidth MB/s"
print("| case | ranks | BCL method / Open MPI BTL | test | size B | BCL | Open MPI "
      "| BCL time ÷ Open MPI time, median [min–max] (< 1: BCL faster) | BCL p99 µs | Open MPI p99 µs |")
print("|---|---|---|---|---|---|---|---|---|---|")
cost = []
for case in cases:
    key, ranks, method, btl = case.split("|")
    runs = [(load(key, "bcl", r), load(key, "ompi", r)) for r in range(1, pairs + 1)]
    for k in runs[0][0]:
        test, size = k
        b = [br[k] for br, _ in runs if k in br]
        o = [orr[k] for _, orr in runs if k in orr]
        head = f"| {key} | {ranks} | {method} / {btl} | {metric(test)} | {size}"
        if len(b) != pairs or len(o) != pairs:
            print(f"{head} | missing in some runs | | | | |")
            continue
        if test == "latency":
            bv = [x["p50_us"] for x in b]; ov = [y["p50_us"] for y in o]
            rs = [div(x, y) for x, y in zip(bv, ov)]
            p99 = f"{fmt(med([x['p99_us'] for x in b]))} | {fmt(med([y['p99_us'] for y in o]))}"
        else:
            bv = [x["mb_s"] for x in b]; ov = [y["mb_s"] for y in o]
            rs = [div(y, x) for x, y in zip(bv, ov)]
            p99 = " | "
        print(f"{head} | {fmt(med(bv))} | {fmt(med(ov))} | {span(rs)} | {p99} |")
    if raw:
        mpi = [br.get(("latency", 8), {}).get("p50_us") for br, _ in runs]
        floor = [load_raw(key, r) for r in range(1, pairs + 1)]
        if None in mpi:
            continue
        rs = [div(m, f) for m, f in zip(mpi, floor)]
        cost.append(f"| {key} | {method} | {fmt(med(mpi))} | {fmt(med(floor))} | {span(rs)} |")
if cost:
    print()
    print("| case | BCL method | BCL MPI p50 one-way µs, 8 B | bcl-pingpong p50 one-way µs, 8 B "
          "| MPI layer cost: BCL MPI p50 ÷ bcl-pingpong p50, median [min–max] |")
    print("|---|---|---|---|---|")
    print("\n".join(cost))
EOF
)
DIRTY=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then DIRTY=" (with uncommitted changes)"; fi
SUMMARY="$(nproc) cores; Open MPI $OMPI_VERSION (pml ob1); all busy-poll; $PAIRS rounds per case (BCL MPI, Open MPI, bcl-pingpong, order reversing each round); load before $LOAD_BEFORE, after $LOAD_AFTER"
echo "# $SUMMARY"
echo "$TABLE"
echo "# columns BCL/Open MPI/p99: medians over rounds; ratios: per round, then median [min–max]. Bandwidth ratio = Open MPI MB/s ÷ BCL MB/s. Raw output: $OUT"

if [ "$APPEND" = 1 ]; then
  mkdir -p docs
  {
    echo
    echo "### bench/mpi-compare.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)$DIRTY"
    echo
    echo "Command: \`bench/mpi-compare.sh $ARGS\`. $(nproc) vCPUs, Open MPI $OMPI_VERSION (pml ob1), load average before $LOAD_BEFORE, after $LOAD_AFTER. bench/mpi/mpi_pingpong.c built with bclcc and mpicc.openmpi; all sides busy-poll; medians over $PAIRS rounds of BCL MPI, Open MPI and bcl-pingpong (order reversing each round). Ratios are of times (bandwidth: Open MPI MB/s ÷ BCL MB/s): < 1 means BCL is faster."
    echo
    echo "$TABLE"
  } >> docs/PERFORMANCE.md
fi
