#!/usr/bin/env bash
# Bootstrap at scale in CI: `tccl launch` starts 128 ranks on this machine; each builds a
# communicator from the environment and runs one 8-byte `auto` all-reduce of rank+1
# (tests/proc/env_worker.cpp). Every rank must print the exact sum, n(n+1)/2, and the
# store must have served a bounded number of requests per rank, on one connection per rank
# (docs/store.md).
#   usage: scale_test.sh <tccl> <env_worker> [ranks]
set -uo pipefail
tccl=$1
worker=$2
n=${3:-128}
unset TCCL_AUTH_KEY TCCL_AUTH_KEY_FILE TCCL_RANK TCCL_WORLD_SIZE TCCL_STORE RANK WORLD_SIZE \
  MASTER_ADDR MASTER_PORT
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
# The hard limit: a hang fails here, and the launcher kills every rank when it is killed.
# INFO for the launcher alone: its last line gives the store's own counts.
TCCL_DEBUG=INFO timeout -k 5 100 "$tccl" launch --nproc-per-node "$n" --timeout 90 -- \
  env TCCL_DEBUG=WARN "$worker" --count 1 >"$out" 2>&1
rc=$?
elapsed=$(/usr/bin/python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.2f}')" "$start")
expected=$((n * (n + 1) / 2))
ok=$(grep -c "of $n .*allreduce sum=$expected OK" "$out")
if [[ $rc -ne 0 || $ok -ne $n ]]; then
  echo "FAILED: $n ranks: exit $rc, $ok of $n ranks printed sum=$expected OK (${elapsed} s)"
  grep -v " OK$" "$out" | head -40
  exit 1
fi
# Every rank reported exactly once.
for ((r = 0; r < n; r++)); do
  if [[ $(grep -c "^\(\[rank [0-9]*\] \)\?rank $r of $n " "$out") -ne 1 ]]; then
    echo "FAILED: rank $r did not report exactly once"
    exit 1
  fi
done
# The store's load: "the store served R requests on C connections (at most P at once)".
# One connection per rank (and the launcher's); requests per rank bounded independently of
# N: at most 16 for the bootstrap and the all-reduce (12 measured at 8 to 1,024 ranks),
# plus the failure watch's one CHECK per rank per heartbeat period (1 s here) of the job's
# life.
stats=$(grep -o "the store served [0-9]* requests on [0-9]* connections (at most [0-9]* at once)" "$out")
read -r requests peak < <(sed -E 's/.*served ([0-9]+) requests.*at most ([0-9]+) at once.*/\1 \2/' <<<"$stats")
if [[ -z ${requests:-} ]]; then
  echo "FAILED: the launcher did not report the store's counts"
  exit 1
fi
bound=$(/usr/bin/python3 -c "import math,sys; n,e=int(sys.argv[1]),float(sys.argv[2]); print(n*(16+math.ceil(e)))" "$n" "$elapsed")
if [[ $peak -gt $((n + 1)) || $requests -gt $bound ]]; then
  echo "FAILED: store load: $requests requests (bound $bound), at most $peak connections at once (bound $((n + 1)))"
  exit 1
fi
echo "ok: $n ranks bootstrapped and all-reduced in ${elapsed} s; the store served $requests requests ($((requests / n)) per rank), at most $peak connections at once"
