#!/usr/bin/env bash
# bench/coll-compare.sh — BCL's collectives against Open MPI's, in one run.
#
# bcl-coll (under bcl-run) and bench/coll/ompi_coll.c (under mpirun) do the
# same measurement: per operation (barrier, allreduce of f64 sums, bcast of
# bytes from rank 0) and size, --warmup untimed then --iters timed
# iterations back to back, each rank timing each iteration; the statistic
# is the median (and p99) over iterations of the slowest rank's time.
# Both check their results once per operation and size.
#
# This host's speed moves between minutes, so the two are only compared
# run against run: for each rank count, a BCL run and an Open MPI run
# alternate --pairs times (the order flips every pair). Prints, per (ranks,
# op, size), the median over pairs of each side's p50, and the median of the
# per-pair ratios BCL/Open MPI with their range (min-max over pairs); < 1
# means BCL is faster.
#
# All ranks on this one node (BCL: shared memory; Open MPI: ob1 with the
# self + vader (or sm) BTLs). When there are more ranks than cores, both
# poll but yield the CPU after a round that found nothing (BCL: --yield;
# Open MPI: mpi_yield_when_idle 1) (--bcl-mode overrides BCL's choice).
#
# With --lab, one more row set: 2 lab nodes x 2 ranks (configs/lab/pair.toml,
# nodes a and b), BCL with BCL_METHODS=shm,M (shm inside a node, method M of
# --lab-method across: packet by default, or udp), Open MPI with the tcp BTL between the same two
# namespaces (mpirun in namespace a; an rsh agent starts the remote daemon in
# namespace b with `ip netns exec`). Root only.
#
# Installs what it needs: Open MPI (apt-get install openmpi-bin
# libopenmpi-dev) when mpicc.openmpi or mpirun.openmpi is missing; builds
# bcl-coll and bcl-run in release; compiles ompi_coll.c with mpicc.openmpi
# (named explicitly: plain mpicc/mpirun follow Debian's alternatives, which
# may point at MPICH).
#
#   bench/coll-compare.sh [--pairs N] [--ranks 2,4] [--ops barrier,allreduce,bcast]
#       [--sizes 8,65536,4194304] [--iters N] [--warmup N] [--sync]
#       [--bcl-mode auto|busy-poll|yield|blocking] [--lab]
#       [--lab-method packet|udp] [--append]
#
#   --pairs N     BCL/Open MPI pairs per rank count (default 5)
#   --ranks LIST  rank counts on this node (default 2,4; none: only --lab)
#   --ops, --sizes, --iters, --warmup, --sync
#                 passed to both programs (defaults: theirs)
#   --bcl-mode M  auto (default: busy-poll up to one rank per core, yield
#                 above, as Open MPI), busy-poll, yield or blocking
#   --lab         add the 2 nodes x 2 ranks case in lab namespaces (root)
#   --lab-method M  BCL's method between the lab nodes: packet (default) or
#                 udp
#   --append      append the table, with command, date, commit and load, to
#                 docs/PERFORMANCE.md
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=5
RANKS=2,4
PASS=()
BCL_MODE=auto
LAB=0
LAB_METHOD=packet
APPEND=0
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --ops|--sizes|--iters|--warmup) PASS+=("$1" "$2"); shift 2 ;;
    --sync) PASS+=("$1"); shift ;;
    --bcl-mode) BCL_MODE=$2; shift 2 ;;
    --lab) LAB=1; shift ;;
    --lab-method) LAB_METHOD=$2; shift 2 ;;
    --append) APPEND=1; shift ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "coll-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$LAB_METHOD" in packet|udp) ;; *)
  echo "coll-compare: --lab-method takes packet or udp" >&2; exit 2 ;;
esac
[ "$RANKS" = none ] && RANKS=
if [ -z "$RANKS" ] && [ "$LAB" = 0 ]; then
  echo "coll-compare: --ranks none leaves nothing to run without --lab" >&2; exit 2
fi
case "$BCL_MODE" in auto|busy-poll|yield|blocking) ;; *)
  echo "coll-compare: --bcl-mode takes auto, busy-poll, yield or blocking" >&2; exit 2 ;;
esac

# --- What it needs ------------------------------------------------------
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "coll-compare: Open MPI is missing (mpicc.openmpi, mpirun.openmpi); run as root to install it, or apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 1
  fi
  echo "# installing Open MPI (apt-get install -y openmpi-bin libopenmpi-dev)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >&2
fi
if [ "$LAB" = 1 ] && [ "$(id -u)" != 0 ]; then
  echo "coll-compare: --lab needs root (network namespaces)" >&2
  exit 1
fi
cargo build --release -q -p bcl-tools --bin bcl-coll --bin bcl-run
if [ "$LAB" = 1 ]; then cargo build --release -q -p bcl-lab; fi
BIN=$(realpath "${CARGO_TARGET_DIR:-target}/release")
OUT=$(mktemp -d /tmp/coll-compare.XXXXXX)
mpicc.openmpi -O2 -Wall -o "$OUT/ompi_coll" bench/coll/ompi_coll.c

OMPI_VERSION=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p' | head -1)
# The shared-memory BTL is vader in Open MPI 3-4, sm in 5.
if ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then SHM_BTL=vader; else SHM_BTL=sm; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ob1 so that the BTL choice holds (UCX's pml would ignore it); no UCX osc
# (its warnings are noise; no one-sided calls here).
MPIRUN=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none
        --mca pml ob1 --mca osc ^ucx)
CORES=$(nproc)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# Keeps rank 0's JSON lines of a bcl-run output.
bcl_json() { sed -n 's/^\[0\] \({.*}\)$/\1/p'; }

# run_pair KEY SIDE: one run of SIDE (bcl|ompi) for the case KEY into
# $OUT/KEY-SIDE-PAIR.jsonl; stops the script with its error output if it fails.
run_one() {
  local key=$1 side=$2 pair=$3 cmd=()
  local out="$OUT/$key-$side-$pair.jsonl" err="$OUT/$key-$side-$pair.err"
  if [ "$side" = bcl ]; then cmd=("${BCL_CMD[@]}"); else cmd=("${OMPI_CMD[@]}"); fi
  if ! "${cmd[@]}" >"$out.raw" 2>"$err"; then
    echo "coll-compare: the $side run failed ($key, pair $pair): ${cmd[*]}" >&2
    tail -20 "$err" >&2
    exit 1
  fi
  if [ "$side" = bcl ]; then bcl_json <"$out.raw" >"$out"; else grep '^{' "$out.raw" >"$out" || true; fi
  if [ ! -s "$out" ]; then
    echo "coll-compare: the $side run printed no results ($key, pair $pair): ${cmd[*]}" >&2
    tail -20 "$err" >&2
    exit 1
  fi
}

# alternate KEY: --pairs pairs of BCL_CMD and OMPI_CMD, order flipping.
alternate() {
  local key=$1 r
  echo "# $key: bcl: ${BCL_CMD[*]}" >&2
  echo "# $key: ompi: ${OMPI_CMD[*]}" >&2
  for r in $(seq 1 "$PAIRS"); do
    if [ $((r % 2)) = 1 ]; then order="bcl ompi"; else order="ompi bcl"; fi
    for side in $order; do run_one "$key" "$side" "$r"; done
    echo "# $key: pair $r done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  done
  KEYS+=("$key")
}

KEYS=()
for n in ${RANKS//,/ }; do
  mode=$BCL_MODE
  if [ "$mode" = auto ]; then
    if [ "$n" -le "$CORES" ]; then mode=busy-poll; else mode=yield; fi
  fi
  bcl_flags=(); [ "$mode" = busy-poll ] || bcl_flags=(--"$mode")
  if [ "$n" -le "$CORES" ]; then
    ompi_mode=(--mode busy-poll); ompi_yield=()
  else
    ompi_mode=(--mode yield); ompi_yield=(--mca mpi_yield_when_idle 1)
  fi
  BCL_CMD=("$BIN/bcl-run" -n "$n" -- "$BIN/bcl-coll" "${bcl_flags[@]}" "${PASS[@]}")
  OMPI_CMD=("${MPIRUN[@]}" -np "$n" --mca btl "self,$SHM_BTL" "${ompi_yield[@]}"
            "$OUT/ompi_coll" "${ompi_mode[@]}" "${PASS[@]}")
  alternate "local-$n"
done

if [ "$LAB" = 1 ]; then
  # 2 nodes x 2 ranks in the namespaces of configs/lab/pair.toml.
  export BCL_LAB_PREFIX=bl-collcmp
  lab=configs/lab/pair.toml
  NS_A=$BCL_LAB_PREFIX.a NS_B=$BCL_LAB_PREFIX.b
  "$BIN/bcl-lab" down "$lab" >/dev/null 2>&1 || true
  "$BIN/bcl-lab" up "$lab" >/dev/null
  trap '"$BIN/bcl-lab" down "$lab" >/dev/null 2>&1 || true' EXIT
  IP_A=10.77.1.1 IP_B=10.77.1.2
  # mpirun's rsh agent: `AGENT HOST COMMAND...` runs COMMAND in HOST's
  # namespace (each with its own UTS name, so the two nodes differ).
  cat >"$OUT/netns-agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $IP_A) ns=$NS_A; name=collcmp-a ;;
  $IP_B) ns=$NS_B; name=collcmp-b ;;
  *) echo "netns-agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
EOF
  chmod +x "$OUT/netns-agent"
  mode=$BCL_MODE
  [ "$mode" = auto ] && { if [ 4 -le "$CORES" ]; then mode=busy-poll; else mode=yield; fi; }
  bcl_flags=(); [ "$mode" = busy-poll ] || bcl_flags=(--"$mode")
  ompi_yield=(); ompi_mode=(--mode busy-poll)
  [ 4 -le "$CORES" ] || { ompi_yield=(--mca mpi_yield_when_idle 1); ompi_mode=(--mode yield); }
  BCL_CMD=(env BCL_METHODS="shm,$LAB_METHOD" "$BIN/bcl-run" --lab "$lab" --nodes a,b --per-node 2 --
           "$BIN/bcl-coll" "${bcl_flags[@]}" "${PASS[@]}")
  OMPI_CMD=(ip netns exec "$NS_A" unshare --uts sh -c 'hostname collcmp-a; exec "$@"' sh
            "${MPIRUN[@]}" -np 4 --host "$IP_A:2,$IP_B:2" --mca plm_rsh_agent "$OUT/netns-agent"
            --mca btl "self,$SHM_BTL,tcp" --mca btl_tcp_if_include 10.77.1.0/24
            --mca oob_tcp_if_include 10.77.1.0/24 "${ompi_yield[@]}"
            "$OUT/ompi_coll" "${ompi_mode[@]}" "${PASS[@]}")
  alternate "lab-2x2-$LAB_METHOD"
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

TABLE=$(python3 - "$OUT" "$PAIRS" "${KEYS[@]}" <<'EOF'
import json, statistics, sys
out, pairs, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(key, side, r):
    rows = {}
    for line in open(f"{out}/{key}-{side}-{r}.jsonl"):
        j = json.loads(line)
        rows[(j["op"], j["size"])] = j
    return rows
def fmt(x):
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"
def ratio(x):
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"
print("| case | ranks | nodes | op | size B | BCL algorithm | BCL mode / Open MPI mode | BCL p50 µs | Open MPI p50 µs | BCL / Open MPI p50, median [min–max] | BCL p99 µs | Open MPI p99 µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in keys:
    runs = [(load(key, "bcl", r), load(key, "ompi", r)) for r in range(1, pairs + 1)]
    for k in runs[0][0]:
        b = [br[k] for br, _ in runs if k in br]
        o = [orr[k] for _, orr in runs if k in orr]
        if len(b) != pairs or len(o) != pairs:
            print(f"| {key} | | | {k[0]} | {k[1]} | missing in some runs | | | | | | |")
            continue
        ratios = sorted(x["p50_us"] / y["p50_us"] for x, y in zip(b, o))
        med = lambda v: statistics.median(v)
        print(f"| {key} | {b[0]['ranks']} | {b[0]['nodes']} | {k[0]} | {k[1]} | {b[0]['algorithm']} "
              f"| {b[0]['mode']} / {o[0]['mode']} "
              f"| {fmt(med([x['p50_us'] for x in b]))} | {fmt(med([y['p50_us'] for y in o]))} "
              f"| {ratio(med(ratios))} [{ratio(ratios[0])}–{ratio(ratios[-1])}] "
              f"| {fmt(med([x['p99_us'] for x in b]))} | {fmt(med([y['p99_us'] for y in o]))} |")
EOF
)
echo "# $(nproc) cores; Open MPI $OMPI_VERSION (pml ob1, btl self,$SHM_BTL); $PAIRS pairs per case; load before $LOAD_BEFORE, after $LOAD_AFTER"
echo "$TABLE"
echo "# p50/p99: over iterations of the slowest rank's time; columns: medians over pairs. Raw JSON lines: $OUT"

if [ "$APPEND" = 1 ]; then
  mkdir -p docs
  {
    echo
    echo "### bench/coll-compare.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
    echo
    echo "Command: \`bench/coll-compare.sh $ARGS\`. $(nproc) vCPUs, Open MPI $OMPI_VERSION (pml ob1, btl self,$SHM_BTL), load average before $LOAD_BEFORE, after $LOAD_AFTER. p50/p99 over iterations of the slowest rank's time; medians over $PAIRS alternating pairs."
    echo
    echo "$TABLE"
  } >> docs/PERFORMANCE.md
fi
