#!/usr/bin/env bash
# The protocol core's own cost per message, against a bare memcpy of the payload
# measured in the same run; prints the table and appends it to the New runs
# section (the end) of docs/PERFORMANCE.md.
#
#   bench/core-cost.sh [--no-append]
set -euo pipefail
cd "$(dirname "$0")/.."
append=1
[ "${1:-}" = "--no-append" ] && append=0
target="${CARGO_TARGET_DIR:-target}"
cmd="cargo bench -p bcl-bench --bench core_cost -- per_message"
echo "== $cmd (load: $(cut -d' ' -f1-3 /proc/loadavg))"
taskset -c 1 $cmd --warm-up-time 2 --measurement-time 5 >/dev/null
table=$(python3 - "$target/criterion" <<'PY'
import json, sys, os
root = sys.argv[1]
batch = 64  # messages per iteration, see benches/core_cost.rs
rows = []
for size in ["8B", "1KiB"]:
    def ns(fn):
        p = os.path.join(root, f"per_message_{size}", fn, "new", "estimates.json")
        with open(p) as f:
            return json.load(f)["median"]["point_estimate"] / batch
    core, base = ns("bcl_core_exchange"), ns("memcpy_baseline")
    rows.append(f"| {size} | {core:.0f} | {base:.1f} | {core / base:.0f}x |")
print("| message | BCL core, ns/message | memcpy of the payload, ns | ratio |")
print("|---|---|---|---|")
print("\n".join(rows))
PY
)
echo "$table"
if [ $append -eq 1 ]; then
    mkdir -p docs
    [ -f docs/PERFORMANCE.md ] || printf '# Performance\n\nMeasured results, each with the command that produced it and the baseline from the same run.\n' > docs/PERFORMANCE.md
    {
        echo
        echo "### Protocol core cost per message ($(date -u +%Y-%m-%d), $(nproc) vCPU, load $(cut -d' ' -f1 /proc/loadavg))"
        echo
        echo "Command: \`bench/core-cost.sh\` (\`$cmd\`, pinned to CPU 1). One message = send, encode with CRC32C,"
        echo "parse and check, reassemble into the ring, deliver, release, and its share of the"
        echo "acknowledgement and completion, both ports in memory (no I/O). Median of criterion samples."
        echo
        echo "$table"
    } >> docs/PERFORMANCE.md
    echo "appended to docs/PERFORMANCE.md"
fi
