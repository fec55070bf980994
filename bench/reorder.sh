#!/usr/bin/env bash
# bench/reorder.sh — reordering is not loss: BCL's loss detection through the
# lab's impairment bridge, in one run.
#
# Three links between two lab nodes, each through a userspace impairment
# bridge (bcl-lab), both directions alike:
#   steady  one-way delay DELAY, nothing else (the reference);
#   jitter  delay DELAY ± JITTER, uniform per frame, so frames overtake each
#           other; no loss at all;
#   loss    delay DELAY and LOSS of the frames dropped, no jitter.
# On each, `bcl-bw --verify --sizes SIZE --iters ITERS` streams from a to b
# (server b, client a, pinned to CPUs 1 and 0) over every method of
# --methods: BCL's, and kernel TCP through the same bridge as the baseline
# (how much of a throughput change is the bridge's own: its jitter queue
# costs CPU on this two-core machine). The configurations alternate --reps
# times, so a slow minute of this shared machine falls on all of them alike.
#
# Reported per method and link: throughput (MB/s, median), retransmitted
# frames as a share of the data frames sent for the first time (median and
# range), jitter/steady and loss/steady throughput ratios (median and range
# of the per-repetition ratios), and whether every run delivered every
# message exactly once, in order, intact. Targets: jitter: retransmissions
# <= 2 % and throughput >= 0.9 x steady; loss: retransmissions <= 1.5 x LOSS.
#
#   bench/reorder.sh [--reps N] [--methods "packet afxdp kernel-tcp"] [--iters N]
#                    [--size BYTES] [--delay 100us] [--jitter 50us]
#                    [--loss 0.05] [--busy-poll] [--no-append]
#
# Needs root (namespaces, AF_PACKET, AF_XDP). Appends the table with the
# command, date, commit and machine load to docs/PERFORMANCE.md (unless
# --no-append).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=3
METHODS="packet afxdp kernel-tcp"
ITERS=1000
SIZE=1500
DELAY=100us
JITTER=50us
LOSS=0.05
MODE_FLAG=""
APPEND=1
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --jitter) JITTER=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --busy-poll) MODE_FLAG=--busy-poll; shift ;;
    --no-append) APPEND=0; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "reorder: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "reorder: needs root (network namespaces, AF_PACKET, AF_XDP)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/reorder.XXXXXX)

# One topology per link kind: two nodes, one veth queue each side (AF_XDP
# binds every active queue), MTU 1500, the bridge in the middle.
LINKS="steady jitter loss"
topology() { # name impair-lines
  cat >"$OUT/$1.toml" <<EOF
prefix = "bl-reo-$1"

[[node]]
name = "a"

[[node]]
name = "b"

[[link]]
name = "a-b"
endpoints = ["a", "b"]
queues = 1
mtu = 1500

[link.impair]
seed = 7
$2
EOF
}
topology steady "delay = \"$DELAY\""
topology jitter "delay = \"$DELAY\"
jitter = \"$JITTER\""
topology loss "delay = \"$DELAY\"
loss = $LOSS"

down_all() {
  for l in $LINKS; do "$BIN/bcl-lab" down "$OUT/$l.toml" >/dev/null 2>&1 || true; done
}
down_all
trap 'down_all; rm -rf "$OUT"' EXIT
for l in $LINKS; do "$BIN/bcl-lab" up "$OUT/$l.toml" >/dev/null; done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
for rep in $(seq 1 "$REPS"); do
  for m in $METHODS; do
    for l in $LINKS; do
      name="$m-$l-$rep"
      echo "== $name"
      # Exit status 1 means --verify found damage: recorded, not fatal.
      # shellcheck disable=SC2086
      "$BIN/bcl-bw" --lab "$OUT/$l.toml" --nodes b,a --pin 1,0 --method "$m" $MODE_FLAG \
        --verify --sizes "$SIZE" --iters "$ITERS" --json "$OUT/$name.json" \
        | grep -E '^ +[0-9]' || echo "reorder: $name failed or found damage (see its report)" >&2
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(( $(date +%s) - T0 ))

TABLE=$(python3 - "$OUT" "$REPS" "$METHODS" "$LOSS" "$DELAY" "$JITTER" "$SIZE" "$ITERS" \
  "$LOAD_BEFORE" "$LOAD_AFTER" "$ELAPSED" "${MODE_FLAG:-blocking}" <<'PY'
import json, os, statistics, sys
(out, reps, methods, loss, delay, jitter, size, iters,
 load_before, load_after, elapsed, mode) = sys.argv[1:13]
reps, methods, loss = int(reps), methods.split(), float(loss)
med = statistics.median

def run(m, l, r):
    p = os.path.join(out, f"{m}-{l}-{r}.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        v = json.load(f)
    res = v["results"][0]
    c = v["counters"]
    ver = v.get("verify") or {}
    intact = (ver.get("lost", 1), ver.get("duplicated", 1), ver.get("out_of_order", 1),
              ver.get("corrupted", 1)) == (0, 0, 0, 0)
    share = c["retransmits"] / c["data_frames"] if c.get("data_frames") else float("nan")
    return {"mbs": res["mbytes_per_s"], "retx": share, "intact": intact}

def span(xs, fmt):
    xs = [x for x in xs if x == x]
    if not xs:
        return "—"
    return f"{fmt(med(xs))} [{fmt(min(xs))}–{fmt(max(xs))}]"

pct = lambda x: f"{100 * x:.2f} %"
ratio = lambda x: f"{x:.2f}"
lines = [
    f"Loss detection through the impairment bridge: {size}-byte messages, {iters} windows, "
    f"{mode}, one-way delay {delay} both directions; jitter ±{jitter}; loss {100 * loss:g} %. "
    f"Retransmitted = frames resent / DATA frames sent for the first time; "
    f"throughput ratio against the steady link of the same repetition; median [range] of {reps}.",
    "",
    "| method | link | MB/s | retransmitted | throughput / steady | exactly once, in order, intact |",
    "|---|---|---|---|---|---|",
]
verdicts = []
for m in methods:
    runs = {l: [run(m, l, r) for r in range(1, reps + 1)] for l in ("steady", "jitter", "loss")}
    for l, rs in runs.items():
        ok = [x for x in rs if x]
        ratios = [x["mbs"] / s["mbs"] for x, s in zip(rs, runs["steady"]) if x and s]
        lines.append(
            f"| {m} | {l} | {span([x['mbs'] for x in ok], lambda v: f'{v:.1f}')} "
            f"| {span([x['retx'] for x in ok], pct)} "
            f"| {'—' if l == 'steady' else span(ratios, ratio)} "
            f"| {sum(x['intact'] for x in ok)}/{reps} |")
        if m.startswith("kernel"):
            continue
        if l == "jitter" and ok:
            retx, thr = med([x["retx"] for x in ok]), med(ratios) if ratios else float("nan")
            verdicts.append(f"{m} jitter: retransmitted {pct(retx)} (target <= 2 %), "
                            f"throughput {thr:.2f} x steady (target >= 0.9)")
        if l == "loss" and ok:
            retx = med([x["retx"] for x in ok])
            verdicts.append(f"{m} loss: retransmitted {pct(retx)} = {retx / loss:.2f} x the loss rate "
                            f"(target <= 1.5)")
lines.append("")
lines += [f"- {v}" for v in verdicts]
lines.append("")
lines.append(f"Machine load (1/5/15 min) before {load_before}, after {load_after}; {elapsed} s.")
print("\n".join(lines))
PY
)
echo
echo "$TABLE"
if [ "$APPEND" = 1 ]; then
  {
    echo
    echo "### Reordering is not loss ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
    echo
    echo "\`bench/reorder.sh $ARGS\`"
    echo
    echo "$TABLE"
  } >> docs/PERFORMANCE.md
  echo "reorder: appended to docs/PERFORMANCE.md"
fi
