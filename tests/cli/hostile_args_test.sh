#!/usr/bin/env bash
# Every subcommand of the tccl CLI fed hostile arguments, as a new user (or a fuzzer)
# might type them: huge numbers, 2^64, negative numbers, overflowing and empty lists,
# empty values, non-numbers, unknown and repeated options, control characters and long
# garbage. Each run must end, under `timeout 20`, within a few seconds, with exit status
# 2 and exactly one line on stderr, and never with "terminate called", an abort or a core
# dump. Then: the cases issue 14 named, out of memory in the workers (ulimit -v), a
# number-parsing error in a worker, --plot file names with shell syntax, and --op's
# nccl-tests names.
#   hostile_args_test.sh TCCL_BINARY
set -uo pipefail
tccl=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
fails=0
pass=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0  # a crash must show as a signal here, not leave a core file

fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
pre=()  # a command to run tccl under (a lowered limit)

# expect2 SUBCOMMAND ARGS...: exit 2, one stderr line, fast, no crash.
expect2() {
  local what="$*"
  local t0=$SECONDS
  timeout 20 ${pre[@]+"${pre[@]}"} "$tccl" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$? took=$((SECONDS - t0))
  local lines
  lines=$(wc -l <"$tmp/err")
  local shown=${what:0:120}
  if [ $rc -ne 2 ]; then
    fail "tccl $shown: exit $rc (want 2); stderr: $(head -c 400 "$tmp/err")"
  elif [ "$lines" -ne 1 ]; then
    fail "tccl $shown: $lines stderr lines (want 1): $(head -c 400 "$tmp/err")"
  elif grep -qiE "terminate called|core dumped|abort|what\(\):" "$tmp/err"; then
    fail "tccl $shown: crashed: $(cat "$tmp/err")"
  elif [ $took -gt 10 ]; then
    fail "tccl $shown: took $took s"
  elif [ -s "$tmp/out" ]; then
    fail "tccl $shown: printed on stdout: $(head -c 200 "$tmp/out")"
  else
    pass=$((pass + 1))
  fi
}

long=$(printf 'x%.0s' $(seq 1 5000))
ctrl=$'a\nb\rc\td\x01\x7f\xff\xfe'
fmt='%s%n%x%p'
two64=18446744073709551616
two64m1=18446744073709551615
two63=9223372036854775808

# Values no integer option of any subcommand accepts.
bad_ints=("$two64" "$two63" "-$two63" "-9223372036854775809" "99999999999999999999" "4294967297"
  "-1" "" "abc" "1.5" "0x10" "1e3" " 5" "5 " "--" "$long" "$ctrl" "$fmt")
# Values no floating-point option (seconds, scales) accepts.
bad_reals=("inf" "-inf" "nan" "1e999" "-1" "" "abc" "1e300" "0x" " 1" "$ctrl")
# Values no byte-size option accepts (or whose runs this machine cannot hold).
bad_sizes=("$two64" "$two64m1" "17179869184G" "-1" "" "abc" "1.5M" "1T" "0x10" "+5" " 5" "$ctrl")
# Lists of sizes / worlds.
many=$(seq -s, 1 100)
bad_lists=("8,,16" "8," ",8" "" "$many" "8,$two64" "8,-1" "8,abc")

# Garbage that is not an option of anything.
garbage=("--bogus" "--" "-x" "garbage" "--=1" "--$long" "$ctrl" "--$ctrl" "$fmt" "-")

# --- demo ---
for v in "${bad_ints[@]}"; do
  for o in world size iters timeout-ms segment-bytes; do expect2 demo "--$o" "$v"; done
  [ "$v" = "-1" ] || expect2 demo --world 2 --inject-error "$v"
done
for g in "${garbage[@]}"; do expect2 demo "$g"; done
expect2 demo --world 2 --inject-error 2
expect2 demo --world 0
expect2 demo --world 257
expect2 demo --world 2 --world 2
expect2 demo --json --json
expect2 demo --json=1
expect2 demo --world
expect2 demo --dtype ""
expect2 demo --dtype "$ctrl"
expect2 demo --op "$long"
# issue 14: no FAIL report of zeros, no std::bad_alloc
expect2 demo --world 2 --size 2305843009213693952
expect2 demo --size 1000000000000
expect2 demo --world 8 --size 1099511627776 --dtype float64

# --- bench ---
for v in "${bad_ints[@]}"; do
  for o in world iters warmup timeout-ms segment-bytes stepfactor root; do
    expect2 bench "--$o" "$v"
  done
  for o in -n -w -f -r; do expect2 bench "$o" "$v"; done
done
for v in "${bad_sizes[@]}"; do
  for o in -b -e --minbytes --maxbytes --sizes; do expect2 bench "$o" "$v"; done
done
for v in "${bad_lists[@]}"; do expect2 bench --sizes "$v"; done
for v in "2,99999999999" "0" "-2" "2,,4" "2," "$many" "2,4294967298" "2,257" "abc" "2,$two64"; do
  expect2 bench --scaling "$v"
done
for g in "${garbage[@]}"; do expect2 bench "$g"; done
expect2 bench --world 2 --world 2
expect2 bench -b 8 --minbytes 8
expect2 bench --sizes 8 -e 1M
expect2 bench -e 8 -b 1M
expect2 bench --op "$ctrl"
expect2 bench --op ""
expect2 bench --algo ","
expect2 bench --dtype "$long"
expect2 bench --plot ""
expect2 bench --plot x.gif
expect2 bench --scaling 2,4 --plot x.png
expect2 bench --world 4 --op broadcast --root 4
expect2 bench --world 2 --op gather -r 7
# --inplace where the collective has no in-place form (or no data, or uneven counts)
for op in alltoall barrier sendrecv allgatherv reduce_scatter_v alltoallv gatherv scatterv; do
  expect2 bench --world 2 --sizes 8 --op $op --inplace
done
expect2 bench --inplace --inplace
expect2 bench --world 2 -e "$two64m1"
expect2 bench --world 256 -e 1G

# --- overlap ---
for v in "${bad_ints[@]}"; do
  for o in world steps timeout-ms; do expect2 overlap "--$o" "$v"; done
done
for v in "${bad_reals[@]}"; do
  expect2 overlap --scale "$v"
  expect2 overlap --compute-ms "$v"
done
for v in "${bad_lists[@]}" "0" "1M,0" "$two64" "17179869184G"; do expect2 overlap --caps "$v"; done
for g in "${garbage[@]}"; do expect2 overlap "$g"; done
expect2 overlap --preset "$ctrl"
expect2 overlap --preset resnet50 --file /dev/null
expect2 overlap --file /nonexistent/"$long"
printf '10\n%s\n' "$two64" >"$tmp/model.txt"
expect2 overlap --file "$tmp/model.txt"
printf '10\n-5\n' >"$tmp/model.txt"
expect2 overlap --file "$tmp/model.txt"
printf '10 20\n' >"$tmp/model.txt"
expect2 overlap --file "$tmp/model.txt"
printf '1099511627776\n' >"$tmp/model.txt"
expect2 overlap --world 2 --file "$tmp/model.txt"
expect2 overlap --world 2 --scale 1000000

# --- tune ---
for v in "${bad_ints[@]}"; do
  for o in world iters timeout-ms; do expect2 tune "--$o" "$v"; done
done
for v in "${bad_sizes[@]}" 0 8G; do expect2 tune --bytes "$v"; done
for g in "${garbage[@]}"; do expect2 tune "$g"; done
expect2 tune --world 1
expect2 tune --file ""

# --- faults ---
for v in "${bad_ints[@]}"; do
  for o in world timeout-ms iters kill stop stuck skip reorder count-mismatch; do
    expect2 faults "--$o" "$v"
  done
  expect2 faults --all --rank "$v"
done
for v in "${bad_sizes[@]}" 1 5G; do expect2 faults --kill 1 --count "$v"; done
for v in "" "x" "reduce-scatter:" "reduce-scatter:$two64" "reduce-scatter:-1" "start#" "start#x" \
  "start#$two64" "reduce-scatter:1#-1" "$ctrl" "$long"; do
  expect2 faults --kill 1 --at "$v"
  expect2 faults --all --at "$v"
done
for g in "${garbage[@]}"; do expect2 faults "$g"; done
expect2 faults --kill 1 --kill 1
expect2 faults --all --all
expect2 faults --kill 1 --algo "$ctrl"

# --- launch (options before "--"; a wrong value must never start a rank) ---
for v in "${bad_ints[@]}"; do
  for o in nproc-per-node nnodes node-rank master-port; do expect2 launch "--$o" "$v" -- true; done
done
for v in "${bad_reals[@]}" 4294967297; do
  for o in timeout grace rdzv-timeout; do expect2 launch "--$o" "$v" -- true; done
done
for g in "--bogus" "--=1" "--$long" "--$ctrl"; do expect2 launch "$g" -- true; done
expect2 launch
expect2 launch --
expect2 launch --nproc-per-node 2
expect2 launch --nproc-per-node 2 --nproc-per-node 2 -- true
expect2 launch --nproc_per_node 2 --nproc-per-node 2 -- true
expect2 launch --tag-output --no-tag-output -- true
expect2 launch --tag-output=1 -- true
# More ranks than the limits allow: refused before one starts.
pre=(bash -c 'ulimit -n 64 && exec "$@"' limit)
expect2 launch --nproc-per-node 100 -- true
pre=(bash -c 'ulimit -u 10 && exec "$@"' limit)
expect2 launch --nproc-per-node 20 --no-tag-output -- true
pre=()
expect2 launch --master-addr "" -- true
expect2 launch --auth-key-file "" -- true
expect2 launch --nnodes 2 --node-rank 2 -- true
expect2 launch --nnodes 2 --master-addr 127.0.0.1 -- true

# --- unknown commands ---
for g in "${garbage[@]}" "_nosuch"; do expect2 "$g"; done

# --- a worker's number-parsing error (std::invalid_argument): one line, exit 2 ---
TCCL_STORE=127.0.0.1:notaport expect2 _faults-worker
TCCL_STORE=127.0.0.1:$two64 expect2 _faults-worker

# --- out of memory inside the workers: each says so in one line, the parent too ---
# 2 x 240 MB per rank under a 400 MB address-space limit (or, on a machine without that
# much available, the parent's own refusal). A sanitizer build reserves terabytes of shadow
# memory at start, which no address-space limit allows, so there the case cannot run.
if grep -qaE "__(asan|tsan|msan)_init" "$tccl"; then
  echo "skip: demo out of memory: $tccl is a sanitizer build (ulimit -v cannot apply)"
else
(
  ulimit -v 400000
  timeout 20 "$tccl" demo --world 2 --size 30000000 >"$tmp/out" 2>"$tmp/err"
  echo $? >"$tmp/rc"
)
rc=$(cat "$tmp/rc")
if [ "$rc" -ne 2 ]; then
  fail "demo out of memory: exit $rc (want 2): $(cat "$tmp/err")"
elif grep -qiE "terminate called|core dumped|abort" "$tmp/err"; then
  fail "demo out of memory crashed: $(cat "$tmp/err")"
elif ! tail -n 1 "$tmp/err" | grep -qE "^tccl demo: (rank 0 .*stopped on the error above|.*needs .* of memory)"; then
  fail "demo out of memory: last line: $(tail -n 1 "$tmp/err")"
elif [ -s "$tmp/out" ]; then
  fail "demo out of memory printed a report: $(head -c 300 "$tmp/out")"
else
  pass=$((pass + 1))
  grep -q "out of memory" "$tmp/err" && echo "ok: workers ran out of memory: $(head -n 1 "$tmp/err")"
fi
fi

# --- --plot: the file name goes to the converter as it is, never through a shell ---
if [ -z "$(grep -nE 'std::system|popen|system\(' "$here"/../../tools/*.cpp | grep -v '^.*//')" ]; then
  pass=$((pass + 1))
else
  fail "tools/ runs a shell: $(grep -nE 'std::system|popen|system\(' "$here"/../../tools/*.cpp)"
fi
(
  cd "$tmp" || exit 1
  for name in "x';touch pwned;'.png" 'y$(touch pwned).png' '-z.png'; do
    timeout 60 "$tccl" bench --world 2 --sizes 1K --iters 1 --warmup 0 --plot "$name" \
      >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ -e pwned ]; then
      echo "FAILED: --plot $name ran a shell command"
      exit 1
    fi
    if command -v rsvg-convert >/dev/null; then
      if [ $rc -ne 0 ] || [ ! -s "$name" ]; then
        echo "FAILED: --plot $name: exit $rc, $(cat "$tmp/err")"
        exit 1
      fi
    elif [ $rc -ne 2 ] || ! grep -q "rsvg-convert" "$tmp/err"; then
      echo "FAILED: --plot $name without rsvg-convert: exit $rc, $(cat "$tmp/err")"
      exit 1
    fi
  done
  # No converter on PATH: named, exit 2 (rank 0's line and the parent's).
  timeout 60 env PATH=/nonexistent "$tccl" bench --world 2 --sizes 1K --iters 1 --warmup 0 \
    --plot w.png >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "needs rsvg-convert" "$tmp/err"; then
    echo "FAILED: --plot without rsvg-convert: exit $rc, $(cat "$tmp/err")"
    exit 1
  fi
) && pass=$((pass + 1)) || fail "--plot file names (above)"

# --- bench --op: the nccl-tests names, short forms and barrier ---
for op in all_reduce all_gather reduce_scatter alltoall broadcast reduce gather scatter sendrecv \
  ar ag rs a2a bcast barrier; do
  out=$(timeout 60 "$tccl" bench --world 2 --op "$op" --sizes 1K --iters 1 --warmup 0 --csv 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^[0-9]" <<<"$out"; then pass=$((pass + 1)); else fail "bench --op $op: exit $rc: $out"; fi
done

echo "hostile_args_test: $pass passed, $fails failed"
[ $fails -eq 0 ]
