#!/usr/bin/env bash
# A world of 2 on a host whose cores are all busy with other work (two busy loops): the
# ranks' spin must not hand their cores to that work for whole time slices (exec/spin.hpp).
# Before the adaptive yield, on 2 cores, an 8-byte all-reduce took 1.5-1.7 ms and p2p
# latency 1.1-1.9 ms with two nice-0 loops, and 20-106 us and up to 0.9 ms with two nice-10
# loops; after it, 4-85 us for all four (docs/PERFORMANCE.md, "2026-12-07 (afternoon)").
# The bound below, 400 us, sits between. A figure is measured up to 3 times and the best
# counts: the broken rule is slow in every run, while a single run beside CI's background
# build (at idle priority) once read 444 us (2026-12-07). Every process is bounded; the busy
# loops are killed on exit. A host of one core has no world of 2 that fits it: skipped there.
set -uo pipefail
tccl=$1
fails=0
pass=0
check() {
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
under() { /usr/bin/python3 -c "import sys; sys.exit(0 if 0 < float('${1:-0}') < 400 else 1)"; }
# measure WHAT CMD...: runs CMD (which prints one figure, in us) up to 3 times, until a run is
# under 400 us; a run that prints no figure (a wrong result, a failure) ends it failed.
measure() {
  local what=$1 attempt v; shift
  for attempt in 1 2 3; do
    v=$("$@")
    echo "$what, try $attempt: ${v:-no figure} us"
    [ -n "$v" ] || return 1
    under "$v" && return 0
  done
  return 1
}
allreduce_us() {
  timeout 120 "$tccl" bench --world 2 --sizes 8 --algo naive --iters 1000 --warmup 100 --json |
    /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin)["results"][0]; assert r["wrong"] == 0; print(r["time_us"])'
}
latency_us() {
  timeout 120 "$tccl" p2pbench --mode latency --sizes 8 --iters 1000 --warmup 100 --reps 3 |
    awk '$2 == "latency" && $1 == 8 && $8 == 0 { print $6 }'
}
loops=()
stop_loops() { [ ${#loops[@]} -gt 0 ] && kill "${loops[@]}" 2>/dev/null; loops=(); }
trap stop_loops EXIT
cores=$(nproc)
if [ "$cores" -lt 2 ]; then
  echo "SKIP: contention_test needs 2 cores (the rule applies to worlds no larger than the cores)"
  exit 0
fi
for nice in 0 10; do
  for _ in $(seq "$cores"); do
    nice -n $nice timeout 120 bash -c 'while :; do :; done' &
    loops+=($!)
  done
  sleep 0.5
  check "8-byte all-reduce beside busy loops at nice $nice under 400 us" \
    measure "nice $nice x $cores busy loops: 8-byte all-reduce" allreduce_us
  check "8-byte p2p latency beside busy loops at nice $nice under 400 us" \
    measure "nice $nice x $cores busy loops: 8-byte p2p latency" latency_us
  stop_loops
done
echo "contention_test: $pass passed, $fails failed"
[ $fails -eq 0 ]
