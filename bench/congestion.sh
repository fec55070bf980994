#!/usr/bin/env bash
# bench/congestion.sh — congestion control through a shaped switch, in one run.
#
# The lab's shaped switches ([switch.shape]: a tc token bucket on the
# bridge's egress towards each member, tail drop beyond --limit bytes per
# port) make the bottleneck; BCL's methods are measured against kernel TCP
# through the same switch, alternating, --reps times.
#
# bottleneck  nodes a and b through one switch (configs/lab/bottleneck.toml,
#   one copy per rate of --rates). Per rate and method of --methods:
#   bcl-bw --verify --sizes 65536 --iters ITERS --stats from a to b (server b
#   on CPU 1, client a on CPU 0). Reported: goodput (MB/s, median), goodput /
#   kernel TCP's in the same repetition (median [range]), retransmitted
#   frames / DATA frames (kernel TCP has no such counters: "-") and whether
#   every run delivered exactly once (exit status 0 and the verify counts).
#   Targets: goodput >= 0.95 x kernel TCP, retransmitted <= 5 %.
# incast  s1..s4, a probe client p and a receiver r on one switch shaped at
#   --incast-rate (configs/lab/incast.toml): the bottleneck is r's port.
#   Four senders stream to r at once, each to its own `bcl-bw --serve` on r
#   (--incast-iters windows of 64 x 64 KiB, a few seconds), while a fifth
#   flow, `bcl-pingpong` with 8 B messages from p to its own server on r,
#   probes the queue (--probe-iters round trips, started 0.5 s after the
#   senders). The same probe alone on the idle switch just before gives the
#   idle p99. Methods: packet and udp of --methods, and kernel TCP (4
#   kernel-tcp pairs, kernel-tcp probe) as the baseline, alternating. Over
#   packet the five flows share r's interface by EtherType (0x88b5..0x88b9:
#   the tools' ends all have the same process addresses, and an AF_PACKET
#   socket only sees its EtherType). afxdp is left out: one AF_XDP socket owns
#   an interface queue, so several processes cannot share r's interface
#   without a per-node engine. Incasts block (no --busy-poll: ten processes
#   share two CPUs) and are not pinned. Reported: aggregate goodput (sum of
#   the 4 senders' MB/s) / link rate, Jain's fairness index (sum x)^2 /
#   (n sum x^2) over the 4 senders, the bytes all four moved (warm-up
#   included) over the wall time from their start to the last one's exit (a
#   cross-check: the sum of rates counts each sender over its own timed
#   windows, which need not coincide), probe p99 under incast / idle p99 (per
#   repetition; "inside" counts the probes whose round trips ended before the
#   first sender did), retransmitted share, exactly once (all 8 ends exit 0,
#   verify counts clean). Targets: aggregate >= 0.9 x link, Jain >= 0.9,
#   p99 ratio <= 10.
# ab  uncongested A/B on a plain veth pair (configs/lab/pair.toml style, no
#   switch): `--congestion off`, `on` and `auto` alternate (order rotated
#   every repetition) for bcl-pingpong 64 B --busy-poll p50 and bcl-bw 64
#   KiB bandwidth over packet and afxdp. Reported: on/off and auto/off
#   median [range]. Targets: bandwidth 0.95-1.05, latency <= 1.05. Skipped,
#   saying so, when the tools have no --congestion flag (auto: when they
#   do not know auto).
#
#   bench/congestion.sh [--reps N] [--rates "200mbit 1gbit"] [--limit 256kb]
#                       [--methods "packet udp afxdp kernel-tcp"]
#
# BCL methods run with --congestion on; METHOD/off runs METHOD with it off,
# METHOD/auto with mode auto (control from a peer's first loss,
# or from the receiver's report of frames missing).
#                       [--sections "bottleneck incast ab"] [--iters N]
#                       [--incast-rate 1gbit] [--incast-iters N] [--probe-iters N]
#                       [--bin DIR] [--lab-bin PATH] [--busy-poll] [--no-append]
#                       [--keep]
#
# --bin DIR runs another build's tools (no cargo build then); --lab-bin PATH
# is the bcl-lab that brings the labs up (default DIR/bcl-lab); it must know
# [switch.shape]. The tools read the topologies through their own bcl-lab
# library, which an older build's predates: they get a copy without the
# [switch.shape] table (the lab is up by then; they only look up its
# namespaces), and BCL_LAB_BIN is set to --lab-bin. --busy-poll applies to
# the bottleneck and the ab bandwidth runs. --keep keeps the raw JSON and
# logs in /tmp/congestion.* (printed at the end).
#
# Needs root (namespaces, tc, AF_PACKET, AF_XDP). Appends the tables with the
# command, date, commit and machine load to docs/PERFORMANCE.md (unless
# --no-append).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=5
RATES="200mbit 1gbit"
LIMIT=256kb
METHODS="packet udp afxdp kernel-tcp"
SECTIONS="bottleneck incast ab"
ITERS=30
INCAST_RATE=1gbit
INCAST_ITERS=15
PROBE_ITERS=1000
BIN_DIR=""
LAB_BIN=""
MODE_FLAG=""
APPEND=1
KEEP=0
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --sections) SECTIONS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --incast-rate) INCAST_RATE=$2; shift 2 ;;
    --incast-iters) INCAST_ITERS=$2; shift 2 ;;
    --probe-iters) PROBE_ITERS=$2; shift 2 ;;
    --bin) BIN_DIR=$2; shift 2 ;;
    --lab-bin) LAB_BIN=$2; shift 2 ;;
    --busy-poll) MODE_FLAG=--busy-poll; shift ;;
    --no-append) APPEND=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "congestion: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "congestion: needs root (network namespaces, tc, AF_PACKET, AF_XDP)" >&2; exit 2; }
for s in $SECTIONS; do
  case "$s" in bottleneck|incast|ab) ;; *) echo "congestion: unknown section $s (bottleneck, incast, ab)" >&2; exit 2 ;; esac
done
has() { case " $1 " in *" $2 "*) return 0 ;; *) return 1 ;; esac; }

if [ -n "$BIN_DIR" ]; then
  BIN=$(cd "$BIN_DIR" && pwd)
else
  cargo build --release -q -p bcl-tools -p bcl-lab
  BIN=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
fi
LAB_BIN=${LAB_BIN:-$BIN/bcl-lab}
for t in bcl-bw bcl-pingpong; do
  [ -x "$BIN/$t" ] || { echo "congestion: no $BIN/$t" >&2; exit 2; }
done
[ -x "$LAB_BIN" ] || { echo "congestion: no bcl-lab at $LAB_BIN (--lab-bin)" >&2; exit 2; }
export BCL_LAB_BIN=$LAB_BIN
CC_FLAG=0
"$BIN/bcl-bw" --help 2>/dev/null | grep -q -- '--congestion' && CC_FLAG=1
OUT=$(mktemp -d /tmp/congestion.XXXXXX)

# ---------------------------------------------------------------- topologies
# FILE.toml is the lab (with [switch.shape]) for bcl-lab; FILE.tools.toml the
# same without the shape, for the tools (see the header).
switch_topology() { # file prefix rate "node ..."
  local members="" n
  {
    echo "prefix = \"$2\""
    for n in $4; do printf '\n[[node]]\nname = "%s"\n' "$n"; members="$members\"$n\", "; done
    printf '\n[[switch]]\nname = "sw"\nmembers = [%s]\nqueues = 1\nmtu = 1500\n' "${members%, }"
  } >"$OUT/$1.tools.toml"
  cp "$OUT/$1.tools.toml" "$OUT/$1.toml"
  printf '\n[switch.shape]\nrate = "%s"\nlimit = "%s"\n' "$3" "$LIMIT" >>"$OUT/$1.toml"
}
LABS=""
i=0
for rate in $RATES; do
  i=$((i + 1))
  switch_topology "bn-$i" "bl-cc-bn$i" "$rate" "a b"
  has "$SECTIONS" bottleneck && LABS="$LABS bn-$i"
done
switch_topology in bl-cc-in "$INCAST_RATE" "s1 s2 s3 s4 p r"
has "$SECTIONS" incast && LABS="$LABS in"
cat >"$OUT/ab.toml" <<EOF
prefix = "bl-cc-ab"

[[node]]
name = "a"

[[node]]
name = "b"

[[link]]
name = "a-b"
endpoints = ["a", "b"]
queues = 1
mtu = 1500
EOF
cp "$OUT/ab.toml" "$OUT/ab.tools.toml"
has "$SECTIONS" ab && LABS="$LABS ab"

if ! "$LAB_BIN" show "$OUT/in.toml" >/dev/null 2>"$OUT/show.err"; then
  echo "congestion: $LAB_BIN cannot read a shaped switch:" >&2
  cat "$OUT/show.err" >&2
  echo "congestion: give a bcl-lab that knows [switch.shape] with --lab-bin" >&2
  exit 2
fi

down_all() {
  local l
  for l in $LABS; do "$LAB_BIN" down "$OUT/$l.toml" >/dev/null 2>&1 || true; done
}
down_all
trap 'down_all; if [ "$KEEP" = 1 ]; then echo "congestion: raw results in $OUT"; else rm -rf "$OUT"; fi' EXIT
for l in $LABS; do
  "$LAB_BIN" up "$OUT/$l.toml" >/dev/null
  if [ "$l" != ab ]; then
    pfx=$(sed -n 's/^prefix = "\(.*\)"/\1/p' "$OUT/$l.toml")
    tc -n "$pfx.sw" qdisc show dev p0 | grep -q "qdisc tbf" \
      || { echo "congestion: $l is up but port p0 of $pfx.sw has no tbf" >&2; exit 1; }
  fi
done

now() { date +%s.%N; }

# ---------------------------------------------------------------- processes in nodes
# start_server NAME NS TOOL ARGS...: starts `TOOL --serve ARGS` in namespace NS
# (stdout OUT/NAME.out), waits for its `listening:` line; sets SPID and DESC.
start_server() {
  local name=$1 ns=$2 tool=$3 k
  shift 3
  ip netns exec "$ns" "$BIN/$tool" --serve "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
  SPID=$!
  DESC=""
  for k in $(seq 1 200); do
    DESC=$(sed -n 's/^listening: //p' "$OUT/$name.out")
    [ -n "$DESC" ] && return 0
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "congestion: server $name did not start:" >&2
  tail -5 "$OUT/$name.err" >&2
  kill "$SPID" 2>/dev/null || true
  return 1
}

# finish PID NAME: waits (at most 60 s) for a server, records its exit status.
finish() {
  local pid=$1 name=$2 k rc=0
  for k in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  echo "$rc" >"$OUT/$name.rc"
}

# method_args METHOD FLOW: the flags of flow FLOW (1..5) of METHOD on a shared node.
# BCL's congestion control is on for METHOD, off for METHOD/off and auto
# for METHOD/auto (tools without --congestion get none of them).
method_args() {
  local base=${1%/*} mode=on
  case "$1" in */off) mode=off ;; */auto) mode=auto ;; esac
  if [ "$base" = packet ]; then
    printf -- '--method packet --ethertype 0x%x' $((0x88b4 + $2))
  else
    printf -- '--method %s' "$base"
  fi
  if [ "$CC_FLAG" = 1 ]; then
    printf -- ' --congestion %s' "$mode"
  fi
}

# probe NAME METHOD: one 8 B pingpong from p to its own server on r; records
# its start, end and exit status.
probe() {
  local name=$1 m=$2 rc=0
  # shellcheck disable=SC2046
  start_server "$name-srv" bl-cc-in.r bcl-pingpong $(method_args "$m" 5) || { echo 1 >"$OUT/$name.rc"; return; }
  local spid=$SPID
  now >"$OUT/$name.start"
  # shellcheck disable=SC2046
  timeout 120 ip netns exec bl-cc-in.p "$BIN/bcl-pingpong" $(method_args "$m" 5) --connect "$DESC" \
    --sizes 8 --iters "$PROBE_ITERS" --warmup 100 --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1 || rc=$?
  now >"$OUT/$name.end"
  echo "$rc" >"$OUT/$name.rc"
  finish "$spid" "$name-srv"
}

# incast NAME METHOD: four senders s1..s4 to four servers on r, the probe
# from p during them.
incast() {
  local name=$1 m=$2 k p pids="" spids=""
  for k in 1 2 3 4; do
    # shellcheck disable=SC2046
    if ! start_server "$name-srv$k" bl-cc-in.r bcl-bw $(method_args "$m" "$k") --verify --json "$OUT/$name-srv$k.json"; then
      for p in $spids; do kill "$p" 2>/dev/null || true; done
      return 0
    fi
    spids="$spids $SPID"
    echo "$DESC" >"$OUT/$name-srv$k.desc"
  done
  now >"$OUT/$name.start"
  for k in 1 2 3 4; do
    (
      rc=0
      # shellcheck disable=SC2046
      timeout 300 ip netns exec "bl-cc-in.s$k" "$BIN/bcl-bw" $(method_args "$m" "$k") \
        --connect "$(cat "$OUT/$name-srv$k.desc")" --verify --sizes 65536 --iters "$INCAST_ITERS" --warmup 10 \
        --json "$OUT/$name-s$k.json" >"$OUT/$name-s$k.log" 2>&1 || rc=$?
      now >"$OUT/$name-s$k.end"
      echo "$rc" >"$OUT/$name-s$k.rc"
    ) &
    pids="$pids $!"
  done
  sleep 0.5
  probe "$name-probe" "$m"
  for k in $pids; do wait "$k" || true; done
  k=0
  for p in $spids; do k=$((k + 1)); finish "$p" "$name-srv$k"; done
}

# ---------------------------------------------------------------- runs
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
INCAST_METHODS=""
for m in $METHODS; do case "${m%/*}" in packet|udp|kernel-tcp) INCAST_METHODS="$INCAST_METHODS $m" ;; esac; done
has "$INCAST_METHODS" kernel-tcp || INCAST_METHODS="$INCAST_METHODS kernel-tcp"
AB_METHODS="packet afxdp"
AB_OK=1
AB_NOTE=""
if has "$SECTIONS" ab; then
  for t in bcl-bw bcl-pingpong; do
    if ! "$BIN/$t" --help 2>/dev/null | grep -q -- '--congestion'; then
      AB_OK=0
      AB_NOTE="$BIN/$t has no --congestion flag (a build before congestion control): the uncongested A/B is skipped"
    fi
  done
  [ "$AB_OK" = 1 ] || echo "congestion: $AB_NOTE" >&2
fi

for rep in $(seq 1 "$REPS"); do
  if has "$SECTIONS" bottleneck; then
    i=0
    for rate in $RATES; do
      i=$((i + 1))
      for m in $METHODS; do
        name="bn-$i-${m//\//_}-$rep"
        echo "== bottleneck $rate $m (repetition $rep)"
        rc=0
        # shellcheck disable=SC2046,SC2086
        timeout 600 "$BIN/bcl-bw" --lab "$OUT/bn-$i.tools.toml" --nodes b,a --pin 1,0 $(method_args "$m" 1) $MODE_FLAG \
          --verify --sizes 65536 --iters "$ITERS" --stats --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1 || rc=$?
        echo "$rc" >"$OUT/$name.rc"
        grep -E '^ +65536' "$OUT/$name.log" || { echo "congestion: $name failed or found damage (exit $rc):" >&2; tail -3 "$OUT/$name.log" >&2; }
      done
    done
  fi
  if has "$SECTIONS" incast; then
    for m in $INCAST_METHODS; do
      echo "== incast $m (repetition $rep): idle probe, then 4 senders + probe"
      probe "idle-${m//\//_}-$rep" "$m"
      incast "in-${m//\//_}-$rep" "$m"
    done
  fi
  if has "$SECTIONS" ab && [ "$AB_OK" = 1 ]; then
    case $((rep % 3)) in 1) ORDER="off on auto" ;; 2) ORDER="on auto off" ;; *) ORDER="auto off on" ;; esac
    for m in $AB_METHODS; do
      for c in $ORDER; do
        echo "== ab $m --congestion $c (repetition $rep)"
        timeout 300 "$BIN/bcl-pingpong" --lab "$OUT/ab.tools.toml" --nodes b,a --pin 1,0 --method "$m" --busy-poll \
          --sizes 64 --iters 20000 --warmup 1000 --congestion "$c" --json "$OUT/ab-lat-$m-$c-$rep.json" \
          >"$OUT/ab-lat-$m-$c-$rep.log" 2>&1 || echo "congestion: ab latency $m $c failed" >&2
        # shellcheck disable=SC2086
        timeout 300 "$BIN/bcl-bw" --lab "$OUT/ab.tools.toml" --nodes b,a --pin 1,0 --method "$m" $MODE_FLAG \
          --sizes 65536 --iters "$ITERS" --congestion "$c" --json "$OUT/ab-bw-$m-$c-$rep.json" \
          >"$OUT/ab-bw-$m-$c-$rep.log" 2>&1 || echo "congestion: ab bandwidth $m $c failed" >&2
      done
    done
  fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(( $(date +%s) - T0 ))

# ---------------------------------------------------------------- tables
TABLE=$(OUT=$OUT REPS=$REPS RATES=$RATES LIMIT=$LIMIT METHODS=$METHODS SECTIONS=$SECTIONS \
  ITERS=$ITERS INCAST_RATE=$INCAST_RATE INCAST_ITERS=$INCAST_ITERS PROBE_ITERS=$PROBE_ITERS \
  INCAST_METHODS=$INCAST_METHODS AB_METHODS=$AB_METHODS AB_OK=$AB_OK AB_NOTE=$AB_NOTE \
  MODE=${MODE_FLAG:-blocking} LOAD_BEFORE=$LOAD_BEFORE LOAD_AFTER=$LOAD_AFTER ELAPSED=$ELAPSED \
  python3 - <<'PY'
import json, os, re, statistics

E = os.environ
out, reps = E["OUT"], int(E["REPS"])
rates, methods, sections = E["RATES"].split(), E["METHODS"].split(), E["SECTIONS"].split()
med = statistics.median


def load(name):
    try:
        with open(os.path.join(out, name.replace("/", "_") + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(name, ext, default=None):
    try:
        with open(os.path.join(out, f"{name.replace('/', '_')}.{ext}")) as f:
            return f.read().strip()
    except OSError:
        return default


def rc(name):
    t = text(name, "rc")
    return int(t) if t is not None and t.lstrip("-").isdigit() else None


def rate_bps(s):
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?i?)bit", s.strip().lower())
    if not m:
        return float("nan")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[m.group(2)]
    return float(m.group(1)) * scale


def intact(v):
    ver = (v or {}).get("verify") or {}
    return (ver.get("lost", 1), ver.get("duplicated", 1), ver.get("out_of_order", 1),
            ver.get("corrupted", 1)) == (0, 0, 0, 0)


def span(xs, fmt):
    xs = [x for x in xs if x is not None and x == x]
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt(xs[0])
    return f"{fmt(med(xs))} [{fmt(min(xs))}–{fmt(max(xs))}]"


pct = lambda x: f"{100 * x:.2f} %"
r2 = lambda x: f"{x:.2f}"
r3 = lambda x: f"{x:.3f}"
mbs = lambda x: f"{x:.1f}"
us = lambda x: f"{x / 1000:.0f}"
lines, verdicts = [], []

# ---- bottleneck
if "bottleneck" in sections:
    def bn(i, m, r):
        name = f"bn-{i}-{m}-{r}"
        v = load(name)
        if not v or not v.get("results"):
            return None
        c = v.get("counters") or {}
        share = (c["retransmits"] / c["data_frames"]) if c.get("data_frames") else None
        return {"mbs": v["results"][0]["mbytes_per_s"], "retx": share,
                "ok": rc(name) == 0 and intact(v)}

    lines += [
        f"**Bottleneck**: a -> b through a switch shaped at each rate (tbf, limit {E['LIMIT']} per port), "
        f"64 KiB messages, {E['ITERS']} windows of 64, {E['MODE']}, `--verify`; retransmitted = frames "
        f"resent / DATA frames; goodput ratio against kernel TCP of the same rate and repetition; "
        f"median [range] of {reps}.",
        "",
        "| rate | method | goodput MB/s | / kernel TCP | retransmitted | exactly once |",
        "|---|---|---|---|---|---|",
    ]
    for i, rate in enumerate(rates, 1):
        tcp = [bn(i, "kernel-tcp", r) for r in range(1, reps + 1)]
        for m in methods:
            rs = [bn(i, m, r) for r in range(1, reps + 1)]
            ok = [x for x in rs if x]
            ratios = [x["mbs"] / t["mbs"] for x, t in zip(rs, tcp) if x and t and t["mbs"] > 0]
            tcpm = m.startswith("kernel")
            lines.append(
                f"| {rate} | {m} | {span([x['mbs'] for x in ok], mbs)} "
                f"| {'-' if tcpm else span(ratios, r2)} "
                f"| {'-' if tcpm else span([x['retx'] for x in ok], pct)} "
                f"| {sum(x['ok'] for x in ok)}/{reps} |")
            if not tcpm and ok:
                g = med(ratios) if ratios else float("nan")
                retx = [x["retx"] for x in ok if x["retx"] is not None]
                rt = med(retx) if retx else float("nan")
                verdicts.append(
                    f"bottleneck {rate} {m}: goodput {g:.2f} x kernel TCP (target >= 0.95: "
                    f"{'met' if g >= 0.95 else 'NOT met'}), retransmitted {pct(rt)} (target <= 5 %: "
                    f"{'met' if rt <= 0.05 else 'NOT met'})")
    lines.append("")

# ---- incast
if "incast" in sections:
    link = rate_bps(E["INCAST_RATE"]) / 8 / 1e6  # MB/s
    iters = int(E["PROBE_ITERS"])

    def p99(name):
        v = load(name)
        if not v or not v.get("results") or rc(name) != 0:
            return None
        return v["results"][0]["p99_ns"]

    def overhead(name):
        # Wall time of an idle probe beyond its round trips: start-up and the
        # tool's end of run; subtracted from a loaded probe's end.
        v, t0, t1 = load(name), text(name, "start"), text(name, "end")
        if not v or t0 is None or t1 is None:
            return None
        return float(t1) - float(t0) - (iters + 100) * v["results"][0]["mean_ns"] / 1e9

    def inc(m, r):
        name = f"in-{m}-{r}"
        senders = [load(f"{name}-s{k}") for k in range(1, 5)]
        if any(not s or not s.get("results") for s in senders):
            return None
        x = [s["results"][0]["mbytes_per_s"] for s in senders]
        # Every window, the 10 warm-up ones included, over the wall time.
        moved = sum(s["results"][0]["bytes"] * (s["results"][0]["messages"] + 640)
                    / s["results"][0]["messages"] for s in senders)
        ends = [text(f"{name}-s{k}", "end") for k in range(1, 5)]
        t0 = text(name, "start")
        wall = (moved / 1e6 / (max(float(e) for e in ends) - float(t0))
                if t0 is not None and all(e is not None for e in ends) else None)
        retx = sum((s.get("counters") or {}).get("retransmits", 0) for s in senders)
        frames = sum((s.get("counters") or {}).get("data_frames", 0) for s in senders)
        ok = all(rc(f"{name}-s{k}") == 0 and rc(f"{name}-srv{k}") == 0 for k in range(1, 5)) \
            and all(intact(s) for s in senders)
        idle, loaded = p99(f"idle-{m}-{r}"), p99(f"{name}-probe")
        pend, oh = text(f"{name}-probe", "end"), overhead(f"idle-{m}-{r}")
        inside = None
        if pend is not None and oh is not None and all(e is not None for e in ends):
            inside = float(pend) - oh <= min(float(e) for e in ends)
        return {"agg": sum(x), "share": sum(x) / link, "wall": wall / link if wall else None,
                "jain": sum(x) ** 2 / (len(x) * sum(v * v for v in x)),
                "retx": retx / frames if frames else None, "ok": ok,
                "idle": idle, "loaded": loaded,
                "ratio": loaded / idle if idle and loaded else None, "inside": inside}

    lines += [
        f"**Incast**: s1..s4 -> r at once through a switch shaped at {E['INCAST_RATE']} "
        f"(limit {E['LIMIT']} per port; r's port is the bottleneck), 64 KiB messages, "
        f"{E['INCAST_ITERS']} windows of 64 each, blocking, `--verify`; probe: 8 B pingpong p -> r, "
        f"{iters} round trips during the incast against the same alone just before (idle). "
        f"Aggregate = sum of the senders' MB/s; moved / wall = every byte of the four, warm-up "
        f"included, over the time from their start to the last one's exit; median [range] of {reps}.",
        "",
        "| method | aggregate MB/s | / link | moved / wall / link | Jain | probe p99 idle µs "
        "| p99 incast µs | p99 ratio | retransmitted | exactly once | probe inside |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in E["INCAST_METHODS"].split():
        rs = [inc(m, r) for r in range(1, reps + 1)]
        ok = [x for x in rs if x]
        tcpm = m.startswith("kernel")
        col = lambda k: [x[k] for x in ok]
        lines.append(
            f"| {m} | {span(col('agg'), mbs)} | {span(col('share'), r2)} | {span(col('wall'), r2)} "
            f"| {span(col('jain'), r3)} "
            f"| {span(col('idle'), us)} | {span(col('loaded'), us)} | {span(col('ratio'), r2)} "
            f"| {'-' if tcpm else span(col('retx'), pct)} | {sum(x['ok'] for x in ok)}/{reps} "
            f"| {sum(1 for x in ok if x['inside'])}/{reps} |")
        if ok:
            sh, jn = med(col("share")), med(col("jain"))
            rr = [x for x in col("ratio") if x is not None]
            ra = med(rr) if rr else float("nan")
            verdicts.append(
                f"incast {m}: aggregate {sh:.2f} x link (target >= 0.9: {'met' if sh >= 0.9 else 'NOT met'}), "
                f"Jain {jn:.3f} (target >= 0.9: {'met' if jn >= 0.9 else 'NOT met'}), "
                f"p99 {ra:.2f} x idle (target <= 10: {'met' if ra <= 10 else 'NOT met'})")
    lines.append("")

# ---- ab
if "ab" in sections:
    lines.append("**Uncongested A/B** (`--congestion on`, `auto` / `off`, plain veth pair, "
                 "pingpong 64 B busy-poll p50, bcl-bw 64 KiB):")
    lines.append("")
    if E["AB_OK"] != "1":
        lines += [f"Skipped: {E['AB_NOTE']}.", ""]
    else:
        lines += ["| method | measure | off | on | auto | on/off | auto/off | target |",
                  "|---|---|---|---|---|---|---|---|"]

        def get(kind, m, c, r):
            v = load(f"ab-{kind}-{m}-{c}-{r}")
            if not v or not v.get("results"):
                return None
            res = v["results"][0]
            return res["p50_ns"] if kind == "lat" else res["mbytes_per_s"]

        for m in E["AB_METHODS"].split():
            for kind, label, fmt, target, good in (
                    ("lat", "p50 µs", lambda x: f"{x / 1000:.2f}", "<= 1.05", lambda q: q <= 1.05),
                    ("bw", "MB/s", mbs, "0.95–1.05", lambda q: 0.95 <= q <= 1.05)):
                off = [get(kind, m, "off", r) for r in range(1, reps + 1)]
                on = [get(kind, m, "on", r) for r in range(1, reps + 1)]
                auto = [get(kind, m, "auto", r) for r in range(1, reps + 1)]
                ratios = [b / a for a, b in zip(off, on) if a and b]
                auto_ratios = [b / a for a, b in zip(off, auto) if a and b]
                lines.append(f"| {m} | {label} | {span(off, fmt)} | {span(on, fmt)} | {span(auto, fmt)} "
                             f"| {span(ratios, r3)} | {span(auto_ratios, r3)} | {target} |")
                for name, rs in (("on", ratios), ("auto", auto_ratios)):
                    if rs:
                        q = med(rs)
                        verdicts.append(f"ab {m} {label}: {name}/off {q:.3f} "
                                        f"(target {target}: {'met' if good(q) else 'NOT met'})")
        lines.append("")

lines += [f"- {v}" for v in verdicts]
lines.append("")
lines.append(f"Machine load (1/5/15 min) before {E['LOAD_BEFORE']}, after {E['LOAD_AFTER']}; {E['ELAPSED']} s.")
print("\n".join(lines))
PY
)
echo
echo "$TABLE"
if [ "$APPEND" = 1 ]; then
  COMMIT=$(git -C "$BIN" rev-parse --short HEAD 2>/dev/null || git rev-parse --short HEAD)
  {
    echo
    echo "### Congestion through a shaped switch ($(date -u +%Y-%m-%d), commit $COMMIT)"
    echo
    echo "\`bench/congestion.sh $ARGS\` (tools from \`$BIN\`)"
    echo
    echo "$TABLE"
  } >> docs/PERFORMANCE.md
  echo "congestion: appended to docs/PERFORMANCE.md"
fi
