#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz with clang (libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer, every report fatal, leak detection on) and fuzzes every
# decoder that reads bytes from the network for a bounded time. Fails on any crash, leak,
# sanitizer report, broken invariant, slow input or excessive allocation.
#
#   scripts/fuzz.sh                 every target, FUZZ_SECONDS (default 20) seconds each
#   scripts/fuzz.sh wire_hello_fuzz only the named targets
#
# Environment: FUZZ_SECONDS (0: only replay the seeds and tests/fuzz/corpus), FUZZ_JOBS
# (targets fuzzed at once, default nproc), FUZZ_BUILD_DIR (default build-fuzz), CC/CXX
# (default clang-14/clang++-14 if present, else clang/clang++). tests/fuzz/README.md
# explains the targets, the artifacts and how to reproduce a finding.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-$(nproc)}
dir=${FUZZ_BUILD_DIR:-build-fuzz}
if [ -z "${CXX:-}" ] || ! "$CXX" --version 2>/dev/null | grep -q clang; then
  if command -v clang++-14 >/dev/null; then CXX=clang++-14; else CXX=clang++; fi
fi
if ! command -v "$CXX" >/dev/null; then
  echo "tccl fuzz: $CXX not found (scripts/deps.sh test installs clang)" >&2
  exit 1
fi

echo "== tccl: building the fuzz targets in $dir ($CXX)"
cmake -S tests/fuzz -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" >/dev/null
cmake --build "$dir" -j "$jobs"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < "$dir/fuzz_targets.txt"
fi
rm -rf "$dir/seeds" "$dir/logs" "$dir/artifacts"
mkdir -p "$dir/logs" "$dir/artifacts"
"$dir/tccl_fuzz_seeds" "$dir/seeds"

# Leaks are findings; UBSan stops at the first report (the build also says
# -fno-sanitize-recover). The libFuzzer flags: -timeout fails an input that runs over 10 s,
# -malloc_limit_mb fails any single allocation over 64 MiB (an input is at most a few KiB,
# so that is a decoder trusting a length it was sent), -rss_limit_mb bounds the process.
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_target() {  # target
  local t=$1 work="$dir/corpus/$t" limit
  local -a corpora=("$work" "$dir/seeds/$t")
  mkdir -p "$work" "$dir/seeds/$t"
  [ -d "tests/fuzz/corpus/$t" ] && corpora+=("tests/fuzz/corpus/$t")
  local -a flags=(-timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 -max_len=8192
    -print_final_stats=1 "-artifact_prefix=$dir/artifacts/$t-")
  if [ "$seconds" -gt 0 ]; then
    flags+=("-max_total_time=$seconds")
  else
    flags+=(-runs=0)
  fi
  limit=$((seconds + 120))  # the whole run, seeds included, never hangs the suite
  set +e
  timeout -k 10 "$limit" "$dir/$t" "${flags[@]}" "${corpora[@]}" > "$dir/logs/$t.log" 2>&1
  echo $? > "$dir/logs/$t.rc"
  set -e
}

echo "== tccl: fuzzing ${#targets[@]} targets for ${seconds} s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
  if [ ! -x "$dir/$t" ]; then
    echo "tccl fuzz: no target $t (known: $(tr '\n' ' ' < "$dir/fuzz_targets.txt"))" >&2
    exit 1
  fi
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
for t in "${targets[@]}"; do
  log="$dir/logs/$t.log"
  rc=$(cat "$dir/logs/$t.rc" 2>/dev/null || echo missing)
  # A sanitizer report that somehow did not set the exit status still fails the run.
  if [ "$rc" != 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: )|runtime error:|fuzz invariant broken' "$log"; then
    failed=1
    echo "== tccl: FUZZ FAILURE in $t (exit status $rc); the log's end:"
    tail -n 60 "$log"
    for a in "$dir"/artifacts/"$t"-*; do
      [ -e "$a" ] || continue
      echo "   input: $a   reproduce: $dir/$t $a"
    done
  else
    stats=$(grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" |
      sed 's/^stat:://; s/: */=/' | tr '\n' ' ')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)
    echo "   $t: ok (${cov:-no coverage line}; $stats)"
  fi
done
if [ "$failed" != 0 ]; then
  echo "== tccl: fuzzing found problems (inputs under $dir/artifacts)" >&2
  exit 1
fi
echo "== tccl: fuzzing passed"
