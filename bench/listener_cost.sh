#!/usr/bin/env bash
# The cost of the listener's limits and the data sockets' keepalive / TCP_USER_TIMEOUT on
# 8-byte all-reduce latency (issue 14; docs/PERFORMANCE.md): interleaved repetitions of
#   A  BASE_TCCL (a build without them, e.g. main before issue 14)
#   B  TCCL with TCCL_TCP_USER_TIMEOUT_MS=0 (listener limits, no keepalive)
#   C  TCCL as shipped (listener limits + keepalive)
# at each world of WORLDS, printing the median time_us of each.
# Usage: BASE_TCCL=/path/to/old/tccl TCCL=build/tccl [WORLDS="2 4"] [REPS=5] bench/listener_cost.sh
set -euo pipefail
TCCL=${TCCL:-build/tccl}
BASE_TCCL=${BASE_TCCL:?BASE_TCCL: a tccl build to compare with}
WORLDS=${WORLDS:-"2 4"}
REPS=${REPS:-5}
ITERS=${ITERS:-2000}
export TCCL_TUNE_FILE=/nonexistent
one() {  # binary [env...] -> time_us
  local bin=$1
  shift
  env "$@" timeout 300 "$bin" bench --world "$W" --sizes 8 --iters "$ITERS" --warmup 200 \
    --algo ring --json | sed -nE 's/.*"time_us": ([0-9.]+).*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "| world | A: base (us) | B: limits, no keepalive (us) | C: limits + keepalive (us) | C/A | C/B |"
echo "|---|---|---|---|---|---|"
for W in $WORLDS; do
  a=() b=() c=()
  for ((r = 0; r < REPS; r++)); do
    a+=("$(one "$BASE_TCCL")")
    b+=("$(one "$TCCL" TCCL_TCP_USER_TIMEOUT_MS=0)")
    c+=("$(one "$TCCL")")
  done
  ma=$(printf '%s\n' "${a[@]}" | median)
  mb=$(printf '%s\n' "${b[@]}" | median)
  mc=$(printf '%s\n' "${c[@]}" | median)
  echo "| $W | $ma | $mb | $mc | $(awk -v x="$mc" -v y="$ma" 'BEGIN{printf "%.2f", x/y}') | $(awk -v x="$mc" -v y="$mb" 'BEGIN{printf "%.2f", x/y}') |"
  echo "  raw A: ${a[*]}" >&2
  echo "  raw B: ${b[*]}" >&2
  echo "  raw C: ${c[*]}" >&2
done
