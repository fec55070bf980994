#!/usr/bin/env bash
# bench/afxdp-rows.sh — the AF_XDP rows of bench/veth-compare.sh.
# Run it through bench/veth-compare.sh (--afxdp-only for these rows alone).
#
#   bench/afxdp-rows.sh BIN OUT ITERS BW_ITERS APPEND COMMAND
#
# On configs/lab/pair-jumbo.toml (one veth pair, MTU 65535: the largest veth
# takes; AF_XDP carries such frames as multi-buffer frames spanning up to 17
# UMEM chunks of 4 KiB, with native XDP), busy-poll, server pinned to CPU 1
# and client to CPU 0, all in one run:
#   * round trips, 64 B and 1 KiB: BCL over afxdp, bare AF_XDP frames
#     (afxdp-raw: no BCL protocol), kernel UDP;
#   * message rate at 16 B (the smallest bcl-bw message: its data header),
#     window 1024 messages: BCL over afxdp and afxdp-raw;
#   * bandwidth at 64 KiB: BCL over afxdp (one 64 KiB message per frame)
#     against kernel TCP (TCP_NODELAY) on the same veth.
# Prints the table and the ratios against the targets (64 B p50 round trip
# <= 0.45 x kernel UDP and <= 1.15 x bare AF_XDP; p99 <= 2 x p50; >= 1 M
# messages/s on one core; 64 KiB bandwidth >= kernel TCP); with APPEND=1
# adds them, with COMMAND, to the New runs section of docs/PERFORMANCE.md.
set -euo pipefail
BIN=$1 OUT=$2 ITERS=$3 BW_ITERS=$4 APPEND=$5 COMMAND=$6
LAB=configs/lab/pair-jumbo.toml
export BCL_LAB_PREFIX=bl-vxdp

"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
"$BIN/bcl-lab" up "$LAB" >/dev/null
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true' EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
run() { # name tool args...: runs one measurement, keeps going if it fails
  local name=$1; shift
  echo "== $name"
  if ! "$@" --lab "$LAB" --nodes b,a --busy-poll --pin 1,0 --json "$OUT/x-$name.json" \
      2> "$OUT/x-$name.err" | grep -v '^\[server\]'; then
    echo "   (failed: see $OUT/x-$name.err)"
    rm -f "$OUT/x-$name.json"
  fi
}
for m in afxdp afxdp-raw kernel-udp; do
  run "pp-$m" "$BIN/bcl-pingpong" --method "$m" --sizes 64,1024 --iters "$ITERS" --warmup 2000
done
for m in afxdp afxdp-raw; do
  run "rate-$m" "$BIN/bcl-bw" --method "$m" --sizes 16 --window 1024 --iters "$BW_ITERS" --warmup 5
done
for m in afxdp kernel-tcp; do
  run "bw-$m" "$BIN/bcl-bw" --method "$m" --sizes 64K --iters "$BW_ITERS" --warmup 5
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
MODES=$(grep -h '^# afxdp:' "$OUT/x-pp-afxdp.err" 2>/dev/null | sed 's/^# afxdp: //' || true)

TABLE=$(python3 - "$OUT" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import json, sys, os
out, load_before, load_after = sys.argv[1:4]
def load(name):
    try:
        with open(os.path.join(out, f"x-{name}.json")) as f:
            return json.load(f)
    except OSError:
        return None
def pp(m, size):
    j = load(f"pp-{m}")
    return next((r for r in j["results"] if r["size"] == size), None) if j else None
def bw(name):
    j = load(name)
    return j["results"][0] if j else None
us = lambda r, k: f"{r[k]/1000:.2f}" if r else "failed"
L = []
L.append("Busy-poll, veth MTU 65535 (`configs/lab/pair-jumbo.toml`), 4096-byte UMEM chunks, multi-buffer frames, server on CPU 1, client on CPU 0.")
L.append("Round trips in µs; rate in messages/s; bandwidth in MB/s (10^6 B/s).")
L.append("")
L.append("| transport | 64 B p50 | 64 B p99 | 1 KiB p50 | 1 KiB p99 |")
L.append("|---|---|---|---|---|")
for m, label in (("afxdp", "BCL over afxdp"), ("afxdp-raw", "bare AF_XDP (afxdp-raw)"), ("kernel-udp", "kernel UDP")):
    a, b = pp(m, 64), pp(m, 1024)
    L.append(f"| {label} | {us(a,'p50_ns')} | {us(a,'p99_ns')} | {us(b,'p50_ns')} | {us(b,'p99_ns')} |")
L.append("")
L.append("| stream | messages/s | MB/s |")
L.append("|---|---|---|")
for name, label in (("rate-afxdp", "BCL over afxdp, 16 B, window 1024"), ("rate-afxdp-raw", "afxdp-raw, 16 B, window 1024"),
                    ("bw-afxdp", "BCL over afxdp, 64 KiB"), ("bw-kernel-tcp", "kernel TCP, 64 KiB")):
    r = bw(name)
    L.append(f"| {label} | {r['msgs_per_s']:.0f} | {r['mbytes_per_s']:.1f} |" if r else f"| {label} | failed | failed |")
L.append("")
L.append("| target | value | met? |")
L.append("|---|---|---|")
def row(what, value, target, ok):
    L.append(f"| {what} | {value} | {'met' if ok else '**not met**'} ({target}) |")
a, raw, k = pp("afxdp", 64), pp("afxdp-raw", 64), pp("kernel-udp", 64)
if a and k:
    r = a["p50_ns"] / k["p50_ns"]; row("BCL afxdp p50 / kernel UDP busy-poll p50, 64 B", f"{r:.2f}", "≤ 0.45", r <= 0.45)
if a and raw:
    r = a["p50_ns"] / raw["p50_ns"]; row("BCL afxdp p50 / bare AF_XDP p50, 64 B", f"{r:.2f}", "≤ 1.15", r <= 1.15)
if a:
    r = a["p99_ns"] / a["p50_ns"]; row("BCL afxdp p99 / p50, 64 B", f"{r:.2f}", "≤ 2", r <= 2)
r = bw("rate-afxdp")
if r:
    row("BCL afxdp message rate, 16 B (M msg/s)", f"{r['msgs_per_s']/1e6:.3f}", "≥ 1 M/s at 8 B; 16 B is bcl-bw's smallest", r["msgs_per_s"] >= 1e6)
b, t = bw("bw-afxdp"), bw("bw-kernel-tcp")
if b and t:
    r = b["mbytes_per_s"] / t["mbytes_per_s"]; row("64 KiB bandwidth, BCL afxdp / kernel TCP", f"{r:.2f}", "≥ 1", r >= 1)
L.append("")
L.append(f"Load average before / after: {load_before} / {load_after}.")
print("\n".join(L))
PY
)
echo
echo "$TABLE"
echo "modes obtained (BCL afxdp pingpong, both ends):"
echo "$MODES"

if [ "$APPEND" = 1 ]; then
  ENTRY=$(
    echo "### AF_XDP run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
    echo
    echo "Command: \`$COMMAND\` ($(nproc) vCPUs, $(uname -r), --iters $ITERS, bw --iters $BW_ITERS)"
    echo
    echo "$TABLE"
    echo
    echo "Modes obtained (both ends):"
    echo
    echo '```'
    echo "$MODES"
    echo '```'
  )
  python3 - docs/PERFORMANCE.md "$ENTRY" <<'PY'
import sys, os
path, entry = sys.argv[1], sys.argv[2]
head = "## New runs"
intro = """`bench/veth-compare.sh --afxdp-only` (or the AF_XDP part of a full
`bench/veth-compare.sh` run; the rows are measured by `bench/afxdp-rows.sh`)
brings up `configs/lab/pair-jumbo.toml` and measures, in one run and busy-poll,
BCL over `afxdp`, bare AF_XDP frames (`afxdp-raw`, no protocol) and kernel UDP
round trips, the 16 B message rate, and 64 KiB bandwidth against kernel TCP on
the same veth. Targets: BCL afxdp p50 ≤ 0.45 × kernel UDP busy-poll
p50 and ≤ 1.15 × bare AF_XDP p50; p99 ≤ 2 × p50; 8 B messages ≥ 1 M/s on one
core; 64 KiB bandwidth ≥ kernel TCP. Frames: veth MTU 65535, 4096-byte UMEM
chunks, frames up to 65549 bytes as multi-buffer frames (XDP_USE_SG), native
XDP, copy mode (veth has no zero-copy)."""
text = open(path).read() if os.path.exists(path) else "# BCL performance\n"
if head not in text:
    text = text.rstrip("\n") + f"\n\n{head}\n\n{intro}\n"
start = text.index(head)
nxt = text.find("\n## ", start + len(head))
end = len(text) if nxt < 0 else nxt + 1
section = text[start:end].rstrip("\n") + "\n\n" + entry.strip("\n") + "\n"
text = text[:start] + section + ("\n" + text[end:] if end < len(text) else "")
open(path, "w").write(text)
PY
  echo "appended to docs/PERFORMANCE.md (New runs section)"
fi
