#!/bin/sh
# Model-checks bcl-shm's lock-free algorithms with loom.
#
#   drivers/shm/loom.sh [extra libtest args, e.g. a test name filter]
#
# Environment: LOOM_MAX_PREEMPTIONS (default 2: every interleaving with at
# most two preemptions, about 75 s on 2 vCPUs, what CI runs; 3 goes deeper
# and takes over 15 minutes), CARGO_TARGET_DIR (default
# /work/targets/shm-loom if /work/targets exists, else target/shm-loom).
# Builds in release mode (loom explores tens of thousands of interleavings).
set -eu
cd "$(dirname "$0")/../.."
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
    if [ -d /work/targets ]; then CARGO_TARGET_DIR=/work/targets/shm-loom; else CARGO_TARGET_DIR=target/shm-loom; fi
fi
export CARGO_TARGET_DIR
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
exec cargo test -p bcl-shm --release --lib -- --test-threads=2 "$@"
