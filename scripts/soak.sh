#!/usr/bin/env bash
# The fault soak at any size: TRIALS random faults (kill, stop, stuck, close, garbage,
# mismatch; collectives and point to point; kills during bootstrap) x algorithm x step x
# world, each judged (tests/proc/soak_test.cpp, docs/faults.md "The soak").
#   scripts/soak.sh [TRIALS [SEED]]        default 1000 trials, a seed from the clock
# Environment: BUILD (default build), TCCL_SOAK_PARALLEL (default 2), SOAK_TIMEOUT (the
# whole run's hard limit in seconds, default 3 s per trial + 600). Builds the test binary
# and its worker when needed, prints the seed, the per-kind table (trials, failed, hangs,
# wrong culprits, slowest detection) and every failed trial, and exits 0 only when every
# trial passed; 124 when the hard limit ended it.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-1000}
seed=${2:-$(($(date +%s) % 1000000007))}
build=${BUILD:-build}
case $trials in '' | *[!0-9]*) echo "soak.sh: TRIALS must be a number" >&2; exit 2 ;; esac
case $seed in '' | *[!0-9]*) echo "soak.sh: SEED must be a number" >&2; exit 2 ;; esac
if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" --target tccl_proc_tests tccl_fault_worker >/dev/null
limit=${SOAK_TIMEOUT:-$((trials * 3 + 600))}
echo "== tccl soak: $trials trials, seed $seed, ${TCCL_SOAK_PARALLEL:-2} at a time, limit ${limit} s"
# TCCL_DEBUG=NONE in the trials keeps their warnings out; the records say it all.
set +e
TCCL_SOAK_TRIALS=$trials TCCL_SOAK_SEED=$seed \
  timeout -k 30 "$limit" "$build/tests/tccl_proc_tests" --gtest_filter='FaultSoak.*' 2>&1 |
  grep -v 'TCCL_AUTH_KEY is not set'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "== tccl soak: stopped at the hard limit of ${limit} s (SOAK_TIMEOUT)"
  exit 124
fi
exit "$rc"
