#!/usr/bin/env bash
# ABI check of BCL's mpi.h (mpi/include/mpi.h) against MPICH's.
#
# libbclmpi must run programs compiled with MPICH's mpicc unchanged, so every
# constant, handle value, type size and MPI_Status offset in our header must
# equal MPICH's, and every function we declare must have MPICH's prototype.
# This script checks, and exits non-zero on the first kind of disagreement
# after reporting all of them:
#
#   1. our header compiles warning-free as C99 (-pedantic), C11 and C++;
#   2. mpi/tests/c/abi_constants.c, built once against each header with plain
#      gcc (no MPI library: it uses only compile-time constants), prints the
#      same lines; MPI_VERSION/MPI_SUBVERSION are the one intended difference
#      (we say 3.1, MPICH 4.0) and are checked on their own;
#   3. our header declares exactly the functions in the function list (and no
#      PMPI_ name), each with MPICH's return and parameter types (parameter
#      names and whitespace ignored, T x[] read as T *x); MPI_User_function
#      is compared the same way;
#   4. the C compiler accepts MPICH's own prototypes as redeclarations of
#      ours (it rejects any incompatible type).
#
# Usage: mpi/tests/abi-check.sh   (from anywhere)
# Environment:
#   BCL_MPI_FUNCTIONS  the function list (default mpi/functions.txt)
#   MPICH_INCLUDE      MPICH's include directory
#                      (default /usr/include/x86_64-linux-gnu/mpich)
#   CC, CXX            compilers (default gcc, g++)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mpi_dir=$(cd "$here/.." && pwd)
ours_inc="$mpi_dir/include"
ours_h="$ours_inc/mpi.h"
prog="$here/c/abi_constants.c"
functions=${BCL_MPI_FUNCTIONS:-$mpi_dir/functions.txt}
mpich_inc=${MPICH_INCLUDE:-/usr/include/x86_64-linux-gnu/mpich}
CC=${CC:-gcc}
CXX=${CXX:-g++}

die() { echo "abi-check: $*" >&2; exit 2; }

for tool in "$CC" "$CXX" python3 diff; do
    command -v "$tool" >/dev/null || die "$tool not found; it is needed to run this check"
done
[ -f "$ours_h" ] || die "our header $ours_h is missing"
[ -f "$prog" ] || die "$prog is missing"
[ -f "$functions" ] || die "function list $functions is missing (set BCL_MPI_FUNCTIONS)"

# MPICH's header is the reference; install it if we may.
if [ ! -f "$mpich_inc/mpi.h" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "abi-check: $mpich_inc/mpi.h missing; installing libmpich-dev"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends libmpich-dev >/dev/null
    fi
    [ -f "$mpich_inc/mpi.h" ] ||
        die "MPICH's header $mpich_inc/mpi.h is missing; install it with
    apt-get install libmpich-dev   (as root)
or point MPICH_INCLUDE at the directory holding MPICH's mpi.h"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# 1. Our header compiles cleanly as C and C++.
printf '#include <mpi.h>\nint main(void) { return MPI_SUCCESS; }\n' >"$work/inc.c"
cp "$work/inc.c" "$work/inc.cc"
for cmd in "$CC -std=c99 -Wall -Wextra -pedantic" "$CC -std=c11 -Wall -Wextra -pedantic" \
    "$CXX -Wall -Wextra -pedantic"; do
    src="$work/inc.c"
    case $cmd in "$CXX"*) src="$work/inc.cc" ;; esac
    if ! $cmd -Werror -I "$ours_inc" -c "$src" -o "$work/inc.o" 2>"$work/inc.err"; then
        fail "our mpi.h does not compile cleanly with: $cmd"
        cat "$work/inc.err"
    fi
done

# 2. Constants, handles, sizes and the MPI_Status layout.
build() { # build NAME INCLUDE_DIR EXTRA_FLAGS
    $CC -std=c99 $3 -I "$2" -c "$prog" -o "$work/$1.o" &&
        $CC "$work/$1.o" -o "$work/$1" &&
        "$work/$1" >"$work/$1.txt"
}
build ours "$ours_inc" "-Wall -Wextra -pedantic -Werror" ||
    die "abi_constants.c does not build or run against our mpi.h"
build mpich "$mpich_inc" "-w" ||
    die "abi_constants.c does not build or run against MPICH's mpi.h"
version=$(grep -E '^MPI_(SUB)?VERSION ' "$work/ours.txt" | tr '\n' ' ')
[ "$version" = "MPI_VERSION 3 MPI_SUBVERSION 1 " ] ||
    fail "our MPI_VERSION/MPI_SUBVERSION are not 3/1: $version"
grep -vE '^MPI_(SUB)?VERSION ' "$work/ours.txt" >"$work/ours.cmp"
grep -vE '^MPI_(SUB)?VERSION ' "$work/mpich.txt" >"$work/mpich.cmp"
if ! diff -u --label "ours ($ours_h)" --label "mpich ($mpich_inc/mpi.h)" \
    "$work/ours.cmp" "$work/mpich.cmp" >"$work/constants.diff"; then
    fail "constants differ from MPICH's:"
    cat "$work/constants.diff"
else
    echo "ok: $(wc -l <"$work/ours.cmp") constants, sizes and offsets equal MPICH's"
fi

# 3a. Every listed function is declared (a plain grep for "NAME(").
names=$(grep -v '^[[:space:]]*#' "$functions" | tr -s '[:space:]' '\n' | grep . | sort -u)
missing=0
for name in $names; do
    grep -Eq "(^|[^A-Za-z0-9_])$name\(" "$ours_h" || { fail "$name is not declared in our mpi.h"; missing=1; }
done
[ $missing -eq 0 ] && echo "ok: all $(echo "$names" | wc -l) listed functions are declared"

# 3b, 4. Nothing else is declared; each prototype has MPICH's types.
if ! python3 - "$ours_h" "$mpich_inc" "$work/redecl.c" $names <<'PY'; then
import os
import re
import sys

ours_path, mpich_dir, redecl_path = sys.argv[1:4]
names = sys.argv[4:]
bad = False


def report(msg):
    global bad
    bad = True
    print("FAIL: " + msg)


def clean(text):
    """Drop comments, preprocessor lines and MPICH's attribute macros."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)
    text = re.sub(r"\bMPICH_[A-Z_]+\s*(\([^()]*\))?", " ", text)
    return text


def statements(text):
    return [re.sub(r"\s+", " ", s).strip() for s in clean(text).split(";")]


TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double",
              "signed", "unsigned", "const", "volatile", "struct", "_Bool"}


def param_type(param):
    """'const int recvcounts[]' -> 'const int *'; drops the parameter name."""
    toks = re.findall(r"[A-Za-z_]\w*|\*|\[\s*\w*\s*\]|\.\.\.", param)
    idents = [i for i, t in enumerate(toks) if re.match(r"[A-Za-z_]", t)]
    if len(idents) > 1:
        last = idents[-1]
        word = toks[last]
        if word not in TYPE_WORDS and not re.match(r"MPIX?_", word):
            del toks[last]
    toks = ["*" if t.startswith("[") else t for t in toks]
    out = " ".join(toks)
    return re.sub(r"\s*\*", " *", out).replace("* *", "**").strip()


def signature(ret, params):
    params = params.strip()
    types = [param_type(p) for p in params.split(",")] if params else []
    return "%s (%s)" % (" ".join(ret.split()), ", ".join(types))


def functions(text):
    """name -> signature for every function declaration (not typedefs)."""
    out = {}
    for s in statements(text):
        if "(" not in s or s.startswith("typedef"):
            continue
        m = re.match(r"^(?:extern )?([\w\s\*]+?)\s*\b(\w+)\s*\((.*)\)$", s)
        if m:
            out[m.group(2)] = signature(m.group(1), m.group(3))
    return out


def user_function(text):
    for s in statements(text):
        m = re.match(r"^typedef (\w+) \( ?MPI_User_function ?\) ?\((.*)\)$", s)
        if m:
            return signature(m.group(1), m.group(2)), m.group(1), m.group(2)
    return None


ours_text = open(ours_path).read()
mpich_text = "".join(open(os.path.join(mpich_dir, f)).read()
                     for f in ("mpi.h", "mpi_proto.h"))
ours = functions(ours_text)
mpich = functions(mpich_text)

if re.search(r"\bPMPIX?_\w+", clean(ours_text)):
    report("our mpi.h mentions a PMPI_ name")
extra = sorted(n for n in ours if n not in names)
for n in extra:
    report("our mpi.h declares %s, which is not in the function list" % n)

mismatches = 0
for n in names:
    if n not in mpich:
        report("%s: MPICH's header has no prototype for it" % n)
    elif n in ours and ours[n] != mpich[n]:
        mismatches += 1
        report("%s prototype differs\n  ours:  %s\n  mpich: %s" % (n, ours[n], mpich[n]))

uf_ours, uf_mpich = user_function(ours_text), user_function(mpich_text)
if uf_ours is None:
    report("our mpi.h does not declare the MPI_User_function typedef")
elif uf_mpich is None or uf_ours[0] != uf_mpich[0]:
    report("MPI_User_function differs\n  ours:  %s\n  mpich: %s"
           % (uf_ours[0], uf_mpich and uf_mpich[0]))

if not bad:
    print("ok: our mpi.h declares only the listed functions; all %d prototypes "
          "and MPI_User_function have MPICH's types" % len(names))

# For step 4: MPICH's declarations, to be compiled after our header.
with open(redecl_path, "w") as f:
    f.write('#include <mpi.h>\n/* MPICH\'s prototypes, redeclared: */\n')
    for n in names:
        m = re.search(r"^(int|double)\s+%s\s*\((.*?)\)[^;]*;" % n,
                      re.sub(r"/\*.*?\*/", " ", mpich_text, flags=re.S),
                      flags=re.S | re.M)
        if m:
            f.write("%s %s(%s);\n" % (m.group(1), n, " ".join(m.group(2).split())))
    if uf_mpich:
        f.write("extern MPI_User_function *bcl_abi_check_user_fn;\n")
        f.write("extern %s (*bcl_abi_check_user_fn)(%s);\n" % (uf_mpich[1], uf_mpich[2]))
    f.write("int main(void) { return 0; }\n")
sys.exit(1 if bad else 0)
PY
    failed=1
fi

# 4. The compiler agrees: redeclaring MPICH's prototypes after our header.
if [ -s "$work/redecl.c" ]; then
    if $CC -std=c99 -pedantic-errors -Wall -Werror -I "$ours_inc" -c "$work/redecl.c" \
        -o "$work/redecl.o" 2>"$work/redecl.err"; then
        echo "ok: gcc accepts MPICH's prototypes as redeclarations of ours"
    else
        fail "gcc rejects MPICH's prototypes against ours:"
        cat "$work/redecl.err"
    fi
fi

if [ $failed -ne 0 ]; then
    echo "abi-check: FAILED: mpi/include/mpi.h disagrees with MPICH's ABI (see above)"
    exit 1
fi
echo "abi-check: mpi/include/mpi.h matches MPICH's ABI"
