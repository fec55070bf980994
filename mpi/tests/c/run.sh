#!/usr/bin/env bash
# run.sh - compile and run the BCL MPI C test programs against an MPI.
#
# See --help.
set -u

here=$(cd "$(dirname "$0")" && pwd)
all_programs="hello ring pi p2p coll types errors"

usage() {
    cat <<EOF
usage: $(basename "$0") --cc CC --launch "LAUNCH PREFIX" [--ranks "1 2 3 4"]
                        [--out DIR] [--timeout SECONDS] [PROGRAM...]

Compiles each test program in $here with
    CC -O2 -Wall -Wextra -Werror -o DIR/PROGRAM PROGRAM.c -lm
then runs it as
    timeout SECONDS LAUNCH PREFIX -n N DIR/PROGRAM
for every N in the rank list, and checks that the exit status is 0 and that
the last line on stdout is exactly "OK PROGRAM ranks=N".

Options:
  --cc CC           the MPI C compiler wrapper (e.g. mpicc.mpich, mpicc.openmpi)
  --launch PREFIX   the launcher command before "-n N" (e.g. "mpiexec.hydra",
                    "mpirun.openmpi --allow-run-as-root --oversubscribe")
  --ranks LIST      the rank counts to run, default "1 2 3 4"
  --out DIR         where binaries and logs go, default a new temporary dir;
                    each run's output is in DIR/PROGRAM.nN.out and .err
  --timeout S       the timeout of one run in seconds, default 60
  -h, --help        this text
  PROGRAM...        the programs to run (default: $all_programs)

Prints one line per (program, N):
    PASS|FAIL  PROGRAM  ranks=N  SECONDSs  [reason]
followed by any NOTE lines the program printed (behaviour the MPI standard
leaves open), and on failure the FAIL lines / the end of the output.
Exits 0 when everything passed, 1 otherwise (2 on a usage error).

Examples:
  $0 --cc mpicc.mpich --launch "mpiexec.hydra"
  $0 --cc mpicc.openmpi --launch "mpirun.openmpi --allow-run-as-root --oversubscribe"
EOF
}

cc=""
launch=""
ranks="1 2 3 4"
out=""
tmo=60
programs=()

while [ $# -gt 0 ]; do
    case "$1" in
    --cc) [ $# -ge 2 ] || { usage >&2; exit 2; }; cc=$2; shift 2 ;;
    --launch) [ $# -ge 2 ] || { usage >&2; exit 2; }; launch=$2; shift 2 ;;
    --ranks) [ $# -ge 2 ] || { usage >&2; exit 2; }; ranks=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; out=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || { usage >&2; exit 2; }; tmo=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    *) programs+=("${1%.c}"); shift ;;
    esac
done

if [ -z "$cc" ] || [ -z "$launch" ]; then
    echo "run.sh: --cc and --launch are required" >&2
    usage >&2
    exit 2
fi
[ ${#programs[@]} -gt 0 ] || read -r -a programs <<<"$all_programs"
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/bclmpi-ctests.XXXXXX")
fi
mkdir -p "$out"
echo "cc: $cc  launch: $launch  ranks: $ranks  out: $out"

failed=0
total=0
for prog in "${programs[@]}"; do
    src="$here/$prog.c"
    if [ ! -f "$src" ]; then
        echo "FAIL  $prog  no such program: $src"
        total=$((total + 1))
        failed=$((failed + 1))
        continue
    fi
    # shellcheck disable=SC2086
    if ! $cc -O2 -Wall -Wextra -Werror -o "$out/$prog" "$src" -lm \
        >"$out/$prog.build" 2>&1; then
        echo "FAIL  $prog  build failed:"
        sed 's/^/    /' "$out/$prog.build" | head -40
        total=$((total + 1))
        failed=$((failed + 1))
        continue
    fi
    for n in $ranks; do
        total=$((total + 1))
        log="$out/$prog.n$n"
        start=$(date +%s%N)
        # shellcheck disable=SC2086
        timeout -k 10 "$tmo" $launch -n "$n" "$out/$prog" </dev/null >"$log.out" 2>"$log.err"
        rc=$?
        ms=$((($(date +%s%N) - start) / 1000000))
        secs=$(printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)))
        last=$(grep -v '^[[:space:]]*$' "$log.out" | tail -n 1)
        reason=""
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            reason="timed out after ${tmo}s"
        elif [ $rc -ne 0 ]; then
            reason="exit status $rc"
        elif [ "$last" != "OK $prog ranks=$n" ]; then
            reason="last stdout line is not 'OK $prog ranks=$n': '$last'"
        fi
        if [ -z "$reason" ]; then
            printf 'PASS  %-7s ranks=%s  %6ss\n' "$prog" "$n" "$secs"
        else
            printf 'FAIL  %-7s ranks=%s  %6ss  %s\n' "$prog" "$n" "$secs" "$reason"
            failed=$((failed + 1))
        fi
        grep '^NOTE ' "$log.err" | sed 's/ rank=[0-9]*:/:/' | sort -u | sed 's/^/    /'
        if [ -n "$reason" ]; then
            if grep -q '^FAIL ' "$log.err"; then
                grep '^FAIL ' "$log.err" | head -20 | sed 's/^/    /'
            else
                tail -n 20 "$log.err" | sed 's/^/    stderr: /'
                tail -n 5 "$log.out" | sed 's/^/    stdout: /'
            fi
        fi
    done
done

echo "$((total - failed)) of $total runs passed ($failed failures); logs in $out"
[ $failed -eq 0 ]
