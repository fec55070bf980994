#!/usr/bin/env bash
# bench/channels-compare.sh — BCL's normal channels against kernel TCP on a
# veth pair, the eager/rendezvous crossover, and shm normal channels against
# memcpy, in one run.
#
# 1. Bandwidth sweep 64 KiB–64 MiB: `bcl-bw --channel normal` over `packet`
#    and `udp`, and kernel TCP with the same loop, on configs/lab/pair.toml
#    (MTU 1500) and configs/lab/pair-jumbo.toml (MTU 65535; udp then sends
#    65507-byte frames, --udp-mtu), server pinned to CPU 1 and client to
#    CPU 0. Ratios BCL / kernel TCP per size, same lab, same repetition.
# 2. Crossover: the system channel (eager) against normal channels
#    (rendezvous) by size, 1 KiB up to the system channel's largest message
#    (256 KiB at MTU 1500, 1 MiB at MTU 65535), over packet in both labs.
# 3. shm: normal channels, 64 KiB–64 MiB, against memcpy of the same sizes
#    timed by bcl-bw --memcpy in the same run (skipped with --no-shm).
#
# Every configuration runs --reps times, the configurations interleaved, so
# that the load of a shared machine falls on all of them alike; the tables
# give medians (ratios: the median of the per-repetition ratios).
#
#   bench/channels-compare.sh [--reps N] [--volume BYTES] [--modes "busy-poll blocking"]
#                             [--labs "pair pair-jumbo"] [--sizes LIST] [--no-cross]
#                             [--no-shm] [--no-append]
#
# Needs root (namespaces, AF_PACKET). Appends the tables with the command,
# date, commit and machine load to the New runs section of
# docs/PERFORMANCE.md (unless --no-append). Target: 64 KiB-4 MiB on a normal
# channel over the best veth method >= 1.0 x kernel TCP.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=3
VOLUME=256M
MODES="busy-poll blocking"
SHM=1
CROSS=1
APPEND=1
LABS="pair pair-jumbo"
SWEEP=64K,256K,1M,4M,16M,64M
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --volume) VOLUME=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --labs) LABS=$2; shift 2 ;;
    --sizes) SWEEP=$2; shift 2 ;;
    --no-cross) CROSS=0; shift ;;
    --no-shm) SHM=0; shift ;;
    --no-append) APPEND=0; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "channels-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "channels-compare: needs root (network namespaces, AF_PACKET)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/channels-compare.XXXXXX)
# Up to the system channel's largest message (256 frames): 359 KiB at MTU
# 1500, 1 MiB at MTU 65535.
CROSS_pair=1K,2K,4K,8K,16K,32K,64K,128K,256K
CROSS_jumbo=$CROSS_pair,256K,512K,1M

# One namespace prefix per lab (both labs are up at once).
down_all() {
  for l in $LABS; do
    BCL_LAB_PREFIX=bl-chc-$l "$BIN/bcl-lab" down "configs/lab/$l.toml" >/dev/null 2>&1 || true
  done
}
down_all
trap down_all EXIT
for l in $LABS; do BCL_LAB_PREFIX=bl-chc-$l "$BIN/bcl-lab" up "configs/lab/$l.toml" >/dev/null; done

bw() { # name lab args...
  local name=$1 lab=$2; shift 2
  echo "== $name"
  BCL_LAB_PREFIX=bl-chc-$lab "$BIN/bcl-bw" --lab "configs/lab/$lab.toml" --nodes b,a --pin 1,0 --json "$OUT/$name.json" "$@" \
    | grep -v '^\[server\]' | grep -E '^ +[0-9]' || { echo "channels-compare: $name failed" >&2; exit 1; }
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
for rep in $(seq 1 "$REPS"); do
  for mode in $MODES; do
    flag=""; [ "$mode" = busy-poll ] && flag="--busy-poll"
    for lab in $LABS; do
      udp_mtu=""; [ "$lab" = pair-jumbo ] && udp_mtu="--udp-mtu 65507"
      bw "sweep-$lab-$mode-packet-$rep" "$lab" --method packet --channel normal $flag --sizes $SWEEP --volume "$VOLUME"
      # shellcheck disable=SC2086
      bw "sweep-$lab-$mode-udp-$rep" "$lab" --method udp $udp_mtu --channel normal $flag --sizes $SWEEP --volume "$VOLUME"
      bw "sweep-$lab-$mode-kernel-tcp-$rep" "$lab" --method kernel-tcp $flag --sizes $SWEEP --volume "$VOLUME"
      cross=$CROSS_pair; [ "$lab" = pair-jumbo ] && cross=$CROSS_jumbo
      [ "$CROSS" = 1 ] && for ch in system normal; do
        bw "cross-$lab-$mode-$ch-$rep" "$lab" --method packet --channel $ch $flag --sizes $cross --volume 32M
      done
    done
    if [ "$SHM" = 1 ]; then
      echo "== shm-$mode-$rep"
      "$BIN/bcl-bw" --method shm --local --pin 1,0 $flag --channel normal --sizes $SWEEP \
        --volume "$VOLUME" --memcpy --timeout-ms 20000 --json "$OUT/shm-$mode-$rep.json" \
        | grep -E '^ +[0-9]' || echo "channels-compare: shm $mode failed (see the report)" >&2
    fi
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(( $(date +%s) - T0 ))

TABLE=$(python3 - "$OUT" "$REPS" "$MODES" "$SHM" "$LOAD_BEFORE" "$LOAD_AFTER" "$ELAPSED" "$LABS" "$CROSS" <<'PY'
import json, os, statistics, sys
out, reps, modes, shm, load_before, load_after, elapsed, run_labs, cross = sys.argv[1:10]
reps, modes = int(reps), modes.split()
labs = {l: m for l, m in (("pair", "MTU 1500"), ("pair-jumbo", "MTU 65535")) if l in run_labs.split()}
med = statistics.median

def rates(name):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        v = json.load(f)
    return {r["size"]: r for r in v["results"]}

def size_name(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"

lines = []
lines.append(f"Normal-channel bandwidth against kernel TCP (MB/s = 10^6 B/s, median of {reps}; ratio = median of the per-repetition ratios BCL / kernel TCP):")
lines.append("")
lines.append("| lab | mode | size | packet | udp | kernel TCP | packet / TCP | udp / TCP |")
lines.append("|---|---|---|---|---|---|---|---|")
best = {}
for lab, mtu in labs.items():
    for mode in modes:
        runs = {m: [rates(f"sweep-{lab}-{mode}-{m}-{r}") for r in range(1, reps + 1)]
                for m in ("packet", "udp", "kernel-tcp")}
        for size in sorted(runs["kernel-tcp"][0]):
            bw = {m: med(x[size]["mbytes_per_s"] for x in runs[m]) for m in runs}
            ratio = {m: med(runs[m][i][size]["mbytes_per_s"] / runs["kernel-tcp"][i][size]["mbytes_per_s"]
                            for i in range(reps)) for m in ("packet", "udp")}
            for m in ratio:
                best.setdefault((lab, mode, m), {})[size] = ratio[m]
            lines.append(f"| {lab} ({mtu}) | {mode} | {size_name(size)} | {bw['packet']:.0f} | {bw['udp']:.0f} | "
                         f"{bw['kernel-tcp']:.0f} | {ratio['packet']:.2f} | {ratio['udp']:.2f} |")
lines.append("")
lines.append("Target: 64 KiB–4 MiB on a normal channel over the best veth method ≥ 1.0 × kernel TCP. "
             "Lowest ratio over 64 KiB–4 MiB per configuration:")
lines.append("")
lines.append("| lab | mode | method | lowest ratio 64 KiB–4 MiB | at | target |")
lines.append("|---|---|---|---|---|---|")
for (lab, mode, m), by in sorted(best.items()):
    inr = {s: r for s, r in by.items() if 64 << 10 <= s <= 4 << 20}
    if not inr:
        continue
    s = min(inr, key=inr.get)
    ok = "met" if inr[s] >= 1.0 else "**missed**"
    lines.append(f"| {lab} | {mode} | {m} | {inr[s]:.2f} | {size_name(s)} | {ok} |")
if cross == "1":
  lines.append("")
  lines.append(f"Eager (system channel) against rendezvous (normal channels) over packet, MB/s, median of {reps}; ratio = normal / system:")
  lines.append("")
  lines.append("| lab | mode | size | system | normal | normal / system |")
  lines.append("|---|---|---|---|---|---|")
  for lab, mtu in labs.items():
      for mode in modes:
          sysr = [rates(f"cross-{lab}-{mode}-system-{r}") for r in range(1, reps + 1)]
          nor = [rates(f"cross-{lab}-{mode}-normal-{r}") for r in range(1, reps + 1)]
          for size in sorted(sysr[0]):
              a = med(x[size]["mbytes_per_s"] for x in sysr)
              b = med(x[size]["mbytes_per_s"] for x in nor)
              q = med(nor[i][size]["mbytes_per_s"] / sysr[i][size]["mbytes_per_s"] for i in range(reps))
              lines.append(f"| {lab} ({mtu}) | {mode} | {size_name(size)} | {a:.0f} | {b:.0f} | {q:.2f} |")
if shm == "1":
    lines.append("")
    lines.append(f"shm normal channels against memcpy of the same size (same run, same pinned thread), MB/s, median of {reps}:")
    lines.append("")
    lines.append("| mode | size | shm normal | memcpy | shm / memcpy |")
    lines.append("|---|---|---|---|---|")
    for mode in modes:
        runs = [rates(f"shm-{mode}-{r}") for r in range(1, reps + 1)]
        runs = [r for r in runs if r]
        if not runs:
            lines.append(f"| {mode} | (failed: see the report) | | | |")
            continue
        for size in sorted(runs[0]):
            a = med(x[size]["mbytes_per_s"] for x in runs)
            b = med(x[size]["memcpy_mbytes_per_s"] for x in runs)
            q = med(x[size]["mbytes_per_s"] / x[size]["memcpy_mbytes_per_s"] for x in runs)
            lines.append(f"| {mode} | {size_name(size)} | {a:.0f} | {b:.0f} | {q:.2f} |")
lines.append("")
lines.append(f"Load average before / after the run: {load_before} / {load_after}; {elapsed} s.")
print("\n".join(lines))
PY
)
echo
echo "$TABLE"

if [ "$APPEND" = 1 ]; then
  DOC=docs/PERFORMANCE.md
  if ! grep -q '^## New runs' "$DOC"; then
    cat >> "$DOC" <<'MD'

## New runs

`bench/channels-compare.sh` (see its header) runs `bcl-bw --channel normal`
over `packet` and `udp` and `bcl-bw --method kernel-tcp` (the same window
loop over a TCP socket) on a veth pair at MTU 1500 (`configs/lab/pair.toml`)
and at MTU 65535 (`configs/lab/pair-jumbo.toml`), server on CPU 1, client on
CPU 0; then the system channel against normal channels by size over packet;
then shm normal channels against memcpy timed in the same process. Target:
64 KiB–4 MiB on a normal channel over the best veth method ≥ 1.0 × kernel
TCP. Each run appends one entry below.
MD
  fi
  {
    echo
    echo "### Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
    echo
    echo "Command: \`bench/channels-compare.sh${ARGS:+ $ARGS}\` ($(nproc) vCPUs, $(uname -r))"
    echo
    echo "$TABLE"
  } >> "$DOC"
  echo "appended to $DOC"
fi
echo "raw JSON: $OUT"
