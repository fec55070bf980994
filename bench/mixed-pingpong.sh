#!/usr/bin/env bash
# Round-trip latency of the method the job's policy picks for three pairs of
# the mixed lab cluster (configs/lab/mixed.toml + configs/mixed.toml), each
# next to the same method opened alone by bcl-pingpong --method M (no job, one
# method per endpoint) and kernel UDP between the same two namespaces, all
# from one run, blocking mode:
#   a1,a2 -> afxdp    a1,p -> packet    a2,u -> udp (through the router)
# Prints p50 (and p99) of the three and the ratios job/alone, job/kernel. Needs root and a release
# build: cargo build --release -p bcl-tools --bins -p bcl-lab
#
#   bench/mixed-pingpong.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
bin=target/release
export BCL_LAB_PREFIX=bl-mxbench
unset BCL_METHODS
lab=configs/lab/mixed.toml
$bin/bcl-lab down $lab >/dev/null 2>&1 || true
$bin/bcl-lab up $lab >/dev/null
trap '$bin/bcl-lab down $lab >/dev/null 2>&1 || true' EXIT
out=$(mktemp -d)
p() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(' '.join(f\"{x['size']}:{x['p50_ns']}:{x['p99_ns']}\" for x in r))" "$1"; }
method() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['method'])" "$1"; }
echo "| pair | method | size | job p50 µs | alone p50 µs | kernel-udp p50 µs | job/alone | job/kernel | job p99 µs | alone p99 µs | kernel p99 µs |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for nodes in a1,a2 a1,p a2,u; do
    $bin/bcl-run --lab $lab --cluster configs/mixed.toml --nodes $nodes -- \
        $bin/bcl-pingpong --sizes 8,1024 --iters "$iters" --warmup 2000 --json "$out/bcl.json" >/dev/null
    $bin/bcl-pingpong --method kernel-udp --lab $lab --nodes $nodes --sizes 8,1024 \
        --iters "$iters" --warmup 2000 --json "$out/k.json" >/dev/null
    m=$(method "$out/bcl.json")
    $bin/bcl-pingpong --method "$m" --lab $lab --nodes $nodes --sizes 8,1024 \
        --iters "$iters" --warmup 2000 --json "$out/a.json" >/dev/null
    paste -d' ' <(p "$out/bcl.json" | tr ' ' '\n') <(p "$out/a.json" | tr ' ' '\n') <(p "$out/k.json" | tr ' ' '\n') |
    while read -r b a k; do
        IFS=: read -r size b50 b99 <<<"$b"
        IFS=: read -r _ a50 a99 <<<"$a"
        IFS=: read -r _ k50 k99 <<<"$k"
        python3 -c "import sys; s,b50,a50,k50,b99,a99,k99=map(int,sys.argv[1:]); print(f'| $nodes | $m | {s} | {b50/1000:.1f} | {a50/1000:.1f} | {k50/1000:.1f} | {b50/a50:.2f} | {b50/k50:.2f} | {b99/1000:.1f} | {a99/1000:.1f} | {k99/1000:.1f} |')" "$size" "$b50" "$a50" "$k50" "$b99" "$a99" "$k99"
    done
done
rm -rf "$out"
