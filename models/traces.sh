#!/usr/bin/env bash
# Writes traces of the reliability model (models/reliability.pml) for
# bcl-core/tests/trace_replay.rs, which replays each on two real ports.
#
#   models/traces.sh [OUT_DIR [SEEDS]]
#
# OUT_DIR (default models/traces) receives, for each instance below:
#   - sim-<instance>-<seed>.trace: Spin random simulations, seeds 1..SEEDS
#     (default 12);
#   - witness-<instance>-<name>.trace (first instance only): the
#     counterexample of a witness run
#     (-DWITNESS=bits: the model asserts that no complete execution shows
#     those events, so Spin's trail is one that does: ring-full back-off,
#     a full resend, a resend on a NAK, an early timeout, duplicated
#     frames). Reneging (SEEN_RENEGE) has no witness: with one sender and
#     one-block messages the headroom rule keeps the ring from ever being
#     full of held messages (Spin finds no such execution).
# Every trace is a complete execution (all messages delivered and
# completed); the model runs with -DREPLAY (see its header). Needs spin and
# gcc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/traces}
seeds=${2:-12}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.trace

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/reliability.pml" "$work/"
cp -r "$here/generated" "$work/"
cd "$work"

# Instances: name and Spin defines.
instances=(
    "n3:-DNMSG=3"
    "n4:-DNMSG=4"
)
# Witnesses: name and the `seen` bits (reliability.pml, SEEN_*).
witnesses=(
    "ring-full:2"
    "full-resend:4"
    "gap-retx:8"
    "early-timeout:16"
    "dup-data:32"
    "dup-ack:64"
    "ring-full-gap-retx:10"
)

# Keeps the TRACE lines of Spin's output $1 as trace $2 if complete.
keep() {
    local src=$1 dst=$2 nmsg=$3
    {
        echo "# $(basename "$dst" .trace): models/reliability.pml $4"
        sed -n 's/^[[:space:]]*TRACE //p' "$src"
    } >"$dst.tmp"
    if grep -qx "B delivers $((nmsg - 1))" "$dst.tmp" && grep -qx "A completes $((nmsg - 1))" "$dst.tmp"; then
        mv "$dst.tmp" "$dst"
    else
        rm -f "$dst.tmp"
        echo "traces.sh: $(basename "$dst"): incomplete run, not kept" >&2
    fi
}

for inst in "${instances[@]}"; do
    name=${inst%%:*}
    read -r -a defs <<<"${inst#*:}"
    nmsg=$(sed -n 's/.*-DNMSG=\([0-9]*\).*/\1/p' <<<"${inst#*:}")
    for seed in $(seq 1 "$seeds"); do
        spin -T -DREPLAY "${defs[@]}" -n"$seed" -u200000 reliability.pml >sim.out 2>&1 || true
        keep sim.out "$out/sim-$name-$seed.trace" "$nmsg" "-DREPLAY ${defs[*]} -n$seed"
    done
    # Witness runs are small searches: the first instance is enough, and
    # pan is compiled without optimisation (compiling dominates).
    [ "$inst" = "${instances[0]}" ] || continue
    for w in "${witnesses[@]}"; do
        wname=${w%%:*}
        bits=${w#*:}
        rm -f reliability.pml.trail
        spin -a -DREPLAY "${defs[@]}" -DWITNESS="$bits" reliability.pml >/dev/null
        gcc -O0 -w -DSAFETY -DNOCLAIM -DMEMLIM=2048 -o pan pan.c
        ./pan -m100000 >pan.out 2>&1 || true
        if [ ! -f reliability.pml.trail ]; then
            echo "traces.sh: witness $wname ($name): no execution shows it" >&2
            continue
        fi
        spin -T -t -DREPLAY "${defs[@]}" -DWITNESS="$bits" reliability.pml >trail.out 2>&1 || true
        keep trail.out "$out/witness-$name-$wname.trace" "$nmsg" "-DREPLAY ${defs[*]} -DWITNESS=$bits (trail)"
    done
done
made=$(find "$out" -name '*.trace' | wc -l)
echo "traces.sh: $made traces in $out"
[ "$made" -gt 0 ]
