#!/usr/bin/env bash
# Builds tccl and runs every test: unit, multi-process, package (find_package) and
# CLI tests in a warnings-as-errors build, then the suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded unit tests under
# ThreadSanitizer, then fuzzes the decoders of network bytes (scripts/fuzz.sh). Set
# TCCL_TEST_QUICK=1 to skip the sanitizer builds and the fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh test
jobs=$(nproc)
t0=$SECONDS
stamp() { echo "== tccl: $* (at $((SECONDS - t0)) s)"; }

# A stage's tests keep about one of the two cores busy on average: the multi-process
# tests wait on sockets, on timeouts and on their ranks' start. So the next stage's build
# runs beside them at idle priority (SCHED_IDLE where the kernel allows it, and nice 19),
# which gets only the CPU time the tests leave unused (docs/testing.md has the times).
# build() waits for it, then builds again in the foreground: nothing to do after a
# background build that succeeded, the same build with its errors in this log after one
# that failed.
idle=(nice -n 19)
if chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0 nice -n 19); fi
declare -A background=()
# A stage that fails stops the script: its background build goes with it (setsid gives
# the build a process group of its own, ninja and the compilers included).
trap 'for pid in "${background[@]}"; do kill -- "-$pid" 2>/dev/null || true; done' EXIT

build() {  # dir, cmake args...; $targets: what to build (all)
  local dir=$1; shift
  if [ -n "${background[$dir]:-}" ]; then
    wait "${background[$dir]}" || echo "== tccl: the background build of $dir failed; again:"
    unset "background[$dir]"
  fi
  stamp "building $dir ($*)"
  cmake -S . -B "$dir" -G Ninja -DTCCL_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" ${targets:+--target $targets}
}

build_in_background() {  # dir, cmake args...; $targets: what to build (all)
  local dir=$1; shift
  stamp "building $dir in the background, at idle priority"
  cmake -S . -B "$dir" -G Ninja -DTCCL_WERROR=ON "$@" >/dev/null
  setsid "${idle[@]}" cmake --build "$dir" -j "$jobs" ${targets:+--target $targets} \
    >"$dir/background-build.log" 2>&1 &
  background[$dir]=$!
}

run_tests() {  # dir, ctest args...
  local dir=$1; shift
  stamp "testing $dir"
  if ! (cd "$dir" && ctest --output-on-failure --timeout 600 "$@"); then
    # The failing tests' own words again, last, where a truncated CI log still shows them:
    # gtest's "file:line: Failure", the shell tests' "FAILED: ...", pytest's "FAILED" and
    # "E   " lines, and shell errors.
    echo "== tccl: FAILED in $dir; the failures in short:"
    grep -v 'TCCL_AUTH_KEY is not set' "$dir/Testing/Temporary/LastTest.log" |
      grep -A14 -E ': Failure$|^FAILED|^E   |^[^ ]*\.sh: ' | head -150 || true
    return 1
  fi
  stamp "$dir passed"
}

full=1
[ "${TCCL_TEST_QUICK:-0}" = 1 ] && full=0
# The sanitizer builds: Debug (assertions on) at -O1, as the sanitizers' own docs advise for
# speed; -O0 took 25 min for the ASan stage's tests here, -O1 20 (docs/testing.md). For CI's
# time: -g1 (line tables, all a sanitizer's report needs), and the two test binaries' own
# code at -O0 (TCCL_TEST_CXX_FLAGS; the library, the CLI and the workers stay at -O1), which
# compiles about 3x faster (docs/testing.md has the times).
san=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DTCCL_TEST_CXX_FLAGS=-O0)
asan=("${san[@]}" -DTCCL_SANITIZE=address,undefined)
tsan=("${san[@]}" -DTCCL_SANITIZE=thread)
# ThreadSanitizer runs only tests in tccl_unit_tests (below), so only it is built (the rest
# of the build took 1 min 46 s of that stage's 5 min 34 s).
tsan_targets=tccl_unit_tests

build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
[ $full = 1 ] && build_in_background build-asan "${asan[@]}"
# PyTorch's whole distributed suite (label torch_suite_full) takes too long for CI; its
# subset (torch_suite.ci) runs here. ctest -L torch_suite_full runs the whole of it.
run_tests build -LE torch_suite_full
if [ $full = 1 ]; then
  build build-asan "${asan[@]}"
  targets=$tsan_targets build_in_background build-tsan "${tsan[@]}"
  # The netns timing cases (ratelimit, nsocks) measure seconds on rate-limited links:
  # meaningless, and slow, under the sanitizers (the other netns cases do run under
  # them). Left to the release suite too, for CI's time: the 128-rank bootstrap (128
  # sanitized processes on 2 cores outrun its time bound) and the exact-result grid at
  # worlds 7 and 8 (the same code as worlds 2 to 5, which do run here). cli.contention
  # bounds latencies beside busy loops, and P2PProc.RanksPingPongingOnOneCpuMoveApart reads
  # the spin's yields by their length: timings the sanitizers' slowdown is not part of.
  run_tests build-asan -LE package \
    -E '^(netns\.ratelimit|netns\.nsocks|P2PProc\.OneGibibyteExchange|P2PProc\.RanksPingPongingOnOneCpuMoveApart|cli\.scale_128|cli\.contention|Worlds/GridTest\..*world[78].*)$'
  targets=$tsan_targets build build-tsan "${tsan[@]}"
  # ThreadSanitizer: the tests that run threads (stores, communicators as threads,
  # async collectives, the bucketer, the authenticated handshakes between threads, links
  # and the executor's ranks as threads, the transport's two lanes, the striped links and
  # transports of TCCL_NSOCKS); the single-threaded pure-logic tests gain nothing from it
  # and run 10x slower under it. They are all in tccl_unit_tests.
  run_tests build-tsan -L unit \
    -R '^(Store|TcpStore|FileStore|PrefixStore|Communicator|Async|Bucketer|Half.TypedAllreduce|AuthTransport|AuthStore\.|HierarchicalCommunicator|Topology|LinkFrames|LinkPeek|MemLink|TcpLink|WaitLinks|Executor|TransportLanes|TransportAddress|P2P|Grid/PairwiseExchange|StripedLink|TransportNsocks)'
  # Once more with nothing built beside it: the release stage ran it with the ASan build in
  # the background, where it skips (more runnable tasks than CPUs; docs/testing.md).
  run_tests build -R '^P2PProc\.RanksPingPongingOnOneCpuMoveApart$'
  # libFuzzer (clang, ASan + UBSan) on every decoder of network bytes, FUZZ_SECONDS each.
  stamp "fuzzing"
  bash scripts/fuzz.sh
fi
stamp "all test suites passed"
