#!/usr/bin/env bash
# bench/stage-breakdown.sh — where a round trip's CPU time goes, stage by
# stage, for BCL's Ethernet methods and their bare floors: `bcl-pingpong`
# (64 B, busy-poll, lab pair, server b on CPU 1, client a on CPU 0) under
# `perf record -a -g -e cpu-clock` (a software clock: this machine has no
# hardware counters), method and floor alternating --reps times.
#
# Every sample of the bcl-pingpong processes is put in one stage by its
# leaf function, or, for a sample in the kernel, by the user-space function
# that entered it (a send is the TX kick, a receive the RX poll):
#
#   core send    Port::send and the endpoint's send path
#   frame build  poll_transmit, the encoders, the method's tx_burst
#   TX kick      the send system call and everything the kernel does in
#                it (on veth: the peer's receive too, in the sender's
#                softirq)
#   RX poll      the method's rx_burst, ring reads, the receive system call
#                (busy polling drives the driver there); waiting is here
#   parse        wire::parse and the frame views
#   CRC32C       the checksum, both ways
#   delivery     the port's receive path: sequencing, reassembly, delivery
#                queue, release, the application's receive call
#   ACK handling acknowledgements: sent, parsed, applied
#   timers+clock the port's timers and clock readings
#   engine loop  progress rounds and scheduling
#   other        the rest (the tool's own loop, page faults)
#   set-up       start-up and tear-down (sockets, maps, rings, the lab's
#                configuration): shown, not counted in the total
#
# Reported: CPU µs per round trip in each stage (both ends together; the
# median of the repetitions), for the method, its floor, and the
# difference, and each run's p50. Sampling at 2 kHz stretches a round trip
# (the p50s are printed for that): the shares, not the absolute times, are
# the result.
#
#   bench/stage-breakdown.sh [--reps N] [--methods "afxdp packet"] [--iters N]
#
# Needs root and perf (apt-get install linux-perf). Prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=3
METHODS="afxdp packet"
ITERS=30000
FREQ=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "stage-breakdown: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "stage-breakdown: needs root (network namespaces, AF_PACKET, AF_XDP, perf -a)" >&2; exit 2; }
command -v perf >/dev/null || { echo "stage-breakdown: needs perf (apt-get install linux-perf)" >&2; exit 2; }

cargo build --release -q -p bcl-tools -p bcl-lab
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=$(mktemp -d /tmp/stage-breakdown.XXXXXX)
export BCL_LAB_PREFIX=bl-stage
LAB=configs/lab/pair.toml
"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true
trap '"$BIN/bcl-lab" down "$LAB" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$BIN/bcl-lab" up "$LAB" >/dev/null

WARMUP=1000
for rep in $(seq 1 "$REPS"); do
  for m in $METHODS; do
    for t in "$m" "$m-raw"; do
      perf record -q -a -g -e cpu-clock -F "$FREQ" -o "$OUT/$t-$rep.data" -- \
        "$BIN/bcl-pingpong" --lab "$LAB" --nodes b,a --pin 1,0 --method "$t" --busy-poll \
        --sizes 64 --iters "$ITERS" --warmup "$WARMUP" --json "$OUT/$t-$rep.json" \
        >/dev/null 2>"$OUT/$t-$rep.err" \
        || { echo "stage-breakdown: $t failed (repetition $rep):" >&2; tail -5 "$OUT/$t-$rep.err" >&2; exit 1; }
      perf script -i "$OUT/$t-$rep.data" --comm bcl-pingpong -F ip,sym 2>/dev/null >"$OUT/$t-$rep.txt"
      rm -f "$OUT/$t-$rep.data"
      [ -n "${STAGE_KEEP:-}" ] && cp "$OUT/$t-$rep.txt" "$OUT/$t-$rep.json" "$STAGE_KEEP/"
    done
  done
done

python3 - "$OUT" "$REPS" "$METHODS" "$FREQ" "$((ITERS + WARMUP))" <<'PY'
import json, re, statistics, sys
out, reps, methods, freq, rts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4]), int(sys.argv[5])
STAGES = ["core send", "frame build", "TX kick", "RX poll", "parse", "CRC32C", "delivery",
          "ACK handling", "timers+clock", "engine loop", "other", "set-up"]
# Start-up and tear-down of the tool and its sockets: shown, not counted.
SETUP_CALLER = r"mmap|munmap|execve|setsockopt|_dl_|libc_write|__open|socket|bind|clone|fork|wait|exit|ioctl|sendmsg_nl|netlink"
SETUP_LEAF = r"toml|clap|bcl_lab|_dl_|init_cpu|dl_main|ld-linux|getauxval"
# Leaf user-space functions, first match wins.
USER = [
    ("CRC32C", r"crc32c"),
    ("ACK handling", r"on_cumulative_ack|on_ack_body|ack_body|AckBody|ack_now|sack|Sack|make_ack|poll_ack"),
    ("parse", r"wire::parse|wire::Frame|::parse\b|frame_view|EtherFrame|ether::"),
    ("frame build", r"poll_transmit|encode|tx_burst|fill_frame|write_frame|Xsk::tx|::send_frame|flush|RawXsk::send|TxRing|tx_ring|frame_for"),
    ("RX poll", r"rx_burst|Xsk::rx|RawXsk::recv|reap|RxRing|rx_ring|fill_ring|refill|::recv\b|recv_frame|poll_rx"),
    ("delivery", r"on_sequenced|deliver|handle_frame|recv_with_until|poll_recv_with|::release|ring::|SystemRing|on_unsequenced|RxWindow|reassembl"),
    ("core send", r"Port::send|send_ordered|queue_ordered|send_until|Endpoint::send|take_buffer|alloc_message|schedule\b"),
    ("timers+clock", r"handle_timeout|arm_timer|timer|clock_gettime|Timespec|Instant|MonotonicClock|::now\b"),
    ("engine loop", r"progress|Schedule|schedule::|end_round|has_transmit_work|wants_transmit"),
]
def stage_of(frames):
    # frames: list of (is_kernel, symbol), leaf first
    if not frames:
        return "other"
    if any(not k and re.search(SETUP_LEAF, sym) for k, sym in frames):
        return "set-up"
    if frames[0][0]:
        for k, sym in frames:
            if k:
                continue
            if re.search(SETUP_CALLER, sym):
                return "set-up"
            if re.search(r"sendto|sendmsg|__send\b", sym):
                return "TX kick"
            if re.search(r"recvfrom|recvmsg|\bpoll\b|__poll|ppoll", sym):
                return "RX poll"
            if re.search(r"clock_gettime", sym):
                return "timers+clock"
            return "other"
        return "other"
    sym = frames[0][1]
    if re.search(r"__libc_sendto|sendto|sendmsg", sym):
        return "TX kick"
    if re.search(r"__libc_recvfrom|recvfrom|recvmsg", sym):
        return "RX poll"
    for st, pat in USER:
        if re.search(pat, sym):
            return st
    return "other"

def stages(path):
    counts = dict.fromkeys(STAGES, 0)
    frames = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                if frames:
                    counts[stage_of(frames)] += 1
                frames = []
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                continue
            ip, sym = parts
            frames.append((ip.startswith("ffffffff"), sym))
    if frames:
        counts[stage_of(frames)] += 1
    # CPU microseconds per round trip.
    return {k: v / freq * 1e6 / rts for k, v in counts.items()}

def p50(path):
    try:
        with open(path) as f:
            j = json.load(f)
        return j["results"][0]["p50_ns"] / 1000
    except Exception:
        return float("nan")

for m in methods:
    per = {t: [stages(f"{out}/{t}-{r}.txt") for r in range(1, reps + 1)] for t in (m, m + "-raw")}
    lat = {t: [p50(f"{out}/{t}-{r}.json") for r in range(1, reps + 1)] for t in (m, m + "-raw")}
    med = {t: {s: statistics.median(x[s] for x in per[t]) for s in STAGES} for t in per}
    print(f"\n{m} against {m}-raw: CPU µs per round trip by stage (both ends), median of {reps}")
    print(f"{'stage':>14} {m:>10} {m + '-raw':>12} {'added':>8}")
    for s in STAGES[:-1]:
        a, b = med[m][s], med[m + "-raw"][s]
        print(f"{s:>14} {a:10.2f} {b:12.2f} {a - b:8.2f}")
    ta = sum(v for k, v in med[m].items() if k != "set-up")
    tb = sum(v for k, v in med[m + "-raw"].items() if k != "set-up")
    print(f"{'total':>14} {ta:10.2f} {tb:12.2f} {ta - tb:8.2f}")
    print(f"{'(set-up)':>14} {med[m]['set-up']:10.2f} {med[m + '-raw']['set-up']:12.2f}")
    pa, pb = statistics.median(lat[m]), statistics.median(lat[m + "-raw"])
    print(f"{'p50 (µs)':>14} {pa:10.2f} {pb:12.2f} {pa - pb:8.2f}")
PY
