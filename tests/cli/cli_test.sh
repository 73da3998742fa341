#!/usr/bin/env bash
# The tccl CLI as a user sees it: the demo's report and figures, its JSON, its
# failure report, and its one-line errors with exit status 2. Every run is bounded.
set -uo pipefail
tccl=$1
fails=0
pass=0
check() {  # description, command...; the command's exit status decides
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
run() { timeout 120 "$tccl" "$@"; }

out8=$(run demo --world 8); rc=$?
echo "$out8"
check "demo --world 8 exits 0" test $rc -eq 0
check "demo --world 8 passes" grep -q "correctness: PASS (every element of every rank's result == the closed form of sum over 8 ranks, inputs depending on rank and index)" <<<"$out8"
check "demo --world 8 ring bytes" grep -q "ring=1,120,000   naive_allgather=4,480,000" <<<"$out8"
check "demo --world 8 bound ratio" grep -q "bound: 1.00x" <<<"$out8"
check "demo --world 8 shows 4.0x" grep -q "ring moves 4.0x fewer bytes" <<<"$out8"
check "demo prints wire bytes" grep -q "wire bytes/rank" <<<"$out8"
check "demo prints times" grep -q "time (median" <<<"$out8"

out4=$(run demo --world 4); rc=$?
check "demo --world 4 exits 0" test $rc -eq 0
check "demo --world 4 shows 2.0x" grep -q "ring moves 2.0x fewer bytes" <<<"$out4"

out=$(run demo --world 5 --size 100003 --dtype int32 --op max); rc=$?
check "demo int32 max exits 0" test $rc -eq 0
check "demo int32 max passes" grep -q "PASS (every element .* closed form of max over 5 ranks" <<<"$out"

json=$(run demo --world 3 --size 1000 --dtype float32 --op avg --json); rc=$?
echo "$json"
check "demo --json exits 0" test $rc -eq 0
check "demo --json is JSON with the measured bytes" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["correct"] and d["world"] == 3 and d["count"] == 1000, d
# chunks of 1000 over 3 ranks: 334, 333, 333; the busiest rank sends (2000-333-333)*4
assert d["ring"]["payload_bytes_per_rank"] == 5336, d["ring"]
assert d["naive"]["payload_bytes_per_rank"] == 8000, d["naive"]
' "$json"

out=$(run demo --world 3 --size 1000 --inject-error 1); rc=$?
echo "$out"
check "a wrong result exits non-zero" test $rc -eq 1
# The closed form at index 500 of a world-3 sum (tools/pattern.cpp) is 4; the hook adds 1.
check "a wrong result names rank, index, expected, actual" grep -q "FAIL (ring: rank 1 index 500: expected 4, got 5 (1 wrong))" <<<"$out"

for bad in "--world 0" "--world -3" "--size -1" "--dtype float16x" "--op median" "--bogus" "--world"; do
  err=$(run demo $bad 2>&1 >/dev/null); rc=$?
  check "demo $bad exits 2" test $rc -eq 2
  check "demo $bad prints one line" test "$(wc -l <<<"$err")" -eq 1
done

out=$(run bench --world 3 -b 8 -e 1M -f 16 --algo all --iters 3 --warmup 1); rc=$?
echo "$out"
check "bench exits 0" test $rc -eq 0
check "bench table has nccl-tests columns" grep -q "size.*count.*type.*redop.*root.*algo.*time(us).*algbw(GB/s).*busbw(GB/s).*#wrong.*bytes/rank.*/bound" <<<"$out"
check "bench reports no wrong values" grep -q "out of bounds values : 0 OK" <<<"$out"
json=$(run bench --world 4 --sizes 4K,64K --algo all --iters 3 --warmup 1 --json); rc=$?
check "bench --json exits 0" test $rc -eq 0
check "bench --json: every algorithm, exact ring bytes, correct" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
rows = d["results"]
algos = {r["algo"] for r in rows}
assert {"ring", "naive"} <= algos, algos
for r in rows:
    assert r["wrong"] == 0 and r["time_us"] > 0, r
    if r["algo"] == "ring":
        assert abs(r["ratio_to_bound"] - 1.0) < 1e-9, r      # 2(N-1)/N V exactly
        assert abs(r["busbw_gbps"] / r["algbw_gbps"] - 1.5) < 1e-3, r  # busbw = algbw x 2(N-1)/N
    if r["algo"] == "naive":
        assert abs(r["ratio_to_bound"] - 2.0) < 1e-9, r      # (N-1) V = 2x the bound at N=4
' "$json"
for op in reduce_scatter allgather broadcast reduce alltoall gather scatter sendrecv; do
  out=$(run bench --world 3 --sizes 4K,256K --op $op --algo all --iters 3 --warmup 1 --csv); rc=$?
  check "bench --op $op exits 0" test $rc -eq 0
  check "bench --op $op csv rows, nothing wrong" awk -F, 'NR == 1 { if ($10 != "wrong") exit 1; next } { n++; if ($10 != 0) exit 1 } END { if (n < 2) exit 1 }' <<<"$out"
done
# --op takes every name of the collective table (src/algorithms/collective_spec.hpp) and
# reports the canonical one.
for alias in all_reduce:allreduce ar:allreduce all_gather:allgather ag:allgather rs:reduce_scatter bcast:broadcast a2a:alltoall all_to_all:alltoall; do
  json=$(run bench --world 2 --sizes 4K --op "${alias%%:*}" --iters 2 --warmup 0 --json); rc=$?
  check "bench --op ${alias%%:*} exits 0" test $rc -eq 0
  check "bench --op ${alias%%:*} runs ${alias##*:}" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["collective"] == sys.argv[2], d["collective"]
assert all(r["wrong"] == 0 for r in d["results"]), d
' "$json" "${alias##*:}"
done
# --inplace: one buffer in the collective's in-place layout (block `rank` of the output is
# the input, or the other way round), every element checked; rooted ones at a root that
# is not rank 0. The table's header and the JSON say which placement ran.
for op in allreduce reduce_scatter allgather broadcast reduce gather scatter; do
  out=$(run bench --world 3 --sizes 8,4K,256K --op $op --root 1 --algo all --iters 3 --warmup 1 --inplace --csv); rc=$?
  check "bench --op $op --inplace exits 0" test $rc -eq 0
  check "bench --op $op --inplace csv rows, nothing wrong" awk -F, 'NR == 1 { if ($10 != "wrong") exit 1; next } { n++; if ($10 != 0) exit 1 } END { if (n < 3) exit 1 }' <<<"$out"
done
out=$(run bench --world 4 --sizes 1M --dtype int32 --redop max --algo all --iters 3 --warmup 1 --inplace); rc=$?
check "bench --inplace int32 max exits 0" test $rc -eq 0
check "bench --inplace: the header says in place" grep -q "^# tccl bench: allreduce, world 4, dtype int32, redop max, .*, in place$" <<<"$out"
check "bench --inplace reports no wrong values" grep -q "out of bounds values : 0 OK" <<<"$out"
for ip in "" --inplace; do
  json=$(run bench --world 2 --sizes 64K --iters 2 --warmup 0 --json $ip); rc=$?
  check "bench --json $ip exits 0" test $rc -eq 0
  check "bench --json $ip: in_place is $([ -n "$ip" ] && echo true || echo false)" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["in_place"] is (sys.argv[2] == "--inplace"), d
assert d["results"] and all(r["wrong"] == 0 for r in d["results"]), d
' "$json" "$ip"
done
out=$(run bench --world 3 --op barrier --iters 3 --warmup 1 --csv); rc=$?
check "bench --op barrier exits 0" test $rc -eq 0
check "bench --op barrier: one row, no data" awk -F, 'NR == 1 { next } { n++; if ($1 != 0 || $10 != 0) exit 1 } END { if (n != 1) exit 1 }' <<<"$out"
svg=$(mktemp --suffix=.svg)
out=$(run bench --world 4 --crossover -f 8 --iters 3 --warmup 1 --plot "$svg"); rc=$?
echo "$out"
check "bench --crossover exits 0" test $rc -eq 0
check "bench --crossover reports measured and auto's own picks" grep -q "crossover (smallest size where ring beats tree): measured .*, auto's cost model picks ring from .* (auto picks: [a-z]* from " <<<"$out"
check "bench --plot writes an SVG" /usr/bin/python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert d.getElementsByTagName("polyline")' "$svg"
out=$(run bench --scaling 2,4,8 -e 256K --plot "$svg"); rc=$?
echo "$out"
check "bench --scaling exits 0" test $rc -eq 0
check "bench --scaling: ring 1.75 V and naive 7 V at world 8" grep -qE "^ +8 +1\.750 +7\.000" <<<"$out"
png=$(mktemp --suffix=.png)
if command -v rsvg-convert >/dev/null; then
  out=$(run bench --world 2 -b 8 -e 64K -f 8 --algo ring,tree --iters 3 --warmup 1 --plot "$png"); rc=$?
  check "bench --plot FILE.png exits 0" test $rc -eq 0
  check "bench --plot writes a PNG" /usr/bin/python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", d[:8]
w, h = struct.unpack(">II", d[16:24])
assert w >= 600 and h >= 300, (w, h)
' "$png"
else
  echo "SKIP: bench --plot FILE.png (no rsvg-convert; scripts/deps.sh test installs librsvg2-bin)"
fi
rm -f "$svg" "$png"
for bad in "--op allfoo" "--algo tree --op gather" "--op bcast --algo hd" "-f 1" "--plot x.pdf" "--algo bogus" "--json --csv"; do
  err=$(run bench --world 2 $bad 2>&1 >/dev/null); rc=$?
  check "bench $bad exits 2" test $rc -eq 2
done

out=$(run p2pbench --mode all --sizes 8,64K,1M --iters 20 --warmup 2 --timeout-ms 30000); rc=$?
echo "$out"
check "p2pbench --mode all exits 0" test $rc -eq 0
check "p2pbench has osu-style columns" grep -qE "^# +size +mode +iters +warmup +reps +time\(us\) +GB/s +#wrong" <<<"$out"
check "p2pbench: a row per mode and size, each with 20 iterations and nothing wrong" awk '
  $1 ~ /^[0-9]+$/ { if ($3 != 20 || $4 != 2 || !($6 > 0) || $8 != 0) exit 1; seen[$2 " " $1] = 1 }
  END { n = split("latency latency_async bw bibw", m, " ")
        for (i = 1; i <= n; i++) if (!(seen[m[i] " 8"] && seen[m[i] " 65536"] && seen[m[i] " 1048576"])) exit 1 }' <<<"$out"
check "p2pbench reports no wrong bytes" grep -q "^# #wrong total: 0 OK" <<<"$out"
out=$(run p2pbench --mode latency,bw --sizes 8,4097 --iters 4 --warmup 1 --inject-error); rc=$?
check "p2pbench --inject-error exits 1" test $rc -eq 1
check "p2pbench --inject-error: #wrong names the byte" grep -q "^# #wrong: bw 4097 B: rank 1, byte 2048: expected" <<<"$out"
for bad in "--mode pingpong" "--sizes 0" "--window 0" "--iters 0" "--bogus"; do
  err=$(run p2pbench $bad 2>&1 >/dev/null); rc=$?
  check "p2pbench $bad exits 2" test $rc -eq 2
done

out=$(run overlap --world 2 --preset resnet50 --scale 0.05 --steps 1 --caps 256K,4M --compute-ms 5 --json); rc=$?
echo "$out"
check "overlap exits 0" test $rc -eq 0
check "overlap JSON: correct, every variant, sane figures" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["correct"] and d["world"] == 2 and d["tensors"] == 161, d
names = [v["name"] for v in d["variants"]]
assert names == ["sync (1 all-reduce)", "per-tensor async", "bucket 256 KiB", "bucket 4 MiB"], names
for v in d["variants"]:
    assert v["step_ms"] > 0 and v["comm_ms"] > 0 and 0 <= v["hidden"] <= 1, v
assert d["variants"][1]["buckets"] == 161  # one all-reduce per tensor
' "$out"
svg=$(mktemp --suffix=.svg)
out=$(run overlap --world 2 --preset gpt2-small --scale 0.01 --steps 1 --caps 1M --plot "$svg"); rc=$?
echo "$out"
check "overlap gpt2-small exits 0" test $rc -eq 0
check "overlap reports PASS" grep -q "correctness: PASS" <<<"$out"
check "overlap writes an SVG plot" grep -q "<svg" "$svg"
rm -f "$svg"
for bad in "--preset vgg" "--steps 0" "--caps 0" "--plot x.png" "--scale -1" "--file /nonexistent"; do
  err=$(run overlap $bad 2>&1 >/dev/null); rc=$?
  check "overlap $bad exits 2" test $rc -eq 2
done

tune=$(mktemp -d)
out=$(run tune --file "$tune/tune.conf" --iters 50 --bytes 1M); rc=$?
echo "$out"
check "tune exits 0" test $rc -eq 0
check "tune writes alpha_us and beta_gbps" grep -qE "^alpha_us=[0-9.]+$" "$tune/tune.conf"
check "tune file has beta" grep -qE "^beta_gbps=[0-9.]+$" "$tune/tune.conf"
alpha=$(sed -n 's/^alpha_us=//p' "$tune/tune.conf")
log=$(TCCL_TUNE_FILE="$tune/tune.conf" TCCL_DEBUG=INFO timeout 120 "$tccl" bench --world 3 --sizes 8 --iters 1 --warmup 0 2>&1)
check "communicators use the tuned model (INFO names its alpha)" grep -q "alpha $(printf '%.1f' "$alpha") us" <<<"$log"
# A second tune changes only what it measures: the other settings, a user's comment and
# an unknown key stay, in their order.
printf '# mine\nhd_bandwidth_penalty=2.500\ninter_alpha_us=77.000\nalpha_us=999.000\nmy_key=1\n' \
  > "$tune/kept.conf"
run tune --file "$tune/kept.conf" --iters 20 --bytes 64K >/dev/null; rc=$?
check "tune over a file exits 0" test $rc -eq 0
check "tune keeps the file's other settings in order" test \
  "$(grep -vE '^(alpha_us|beta_gbps|gamma_gbps)=' "$tune/kept.conf")" = \
  "$(printf '# mine\nhd_bandwidth_penalty=2.500\ninter_alpha_us=77.000\nmy_key=1')"
check "tune replaces alpha_us in place" test "$(sed -n 4p "$tune/kept.conf" | cut -d= -f1)" = alpha_us
check "tune measured a new alpha_us" test "$(grep -c '^alpha_us=999.000$' "$tune/kept.conf")" = 0
check "tune adds beta_gbps and gamma_gbps" grep -qE '^gamma_gbps=[0-9.]+$' "$tune/kept.conf"
rm -rf "$tune"
err=$(run tune --world 1 2>&1 >/dev/null); rc=$?
check "tune --world 1 exits 2" test $rc -eq 2

echo "$pass passed, $fails failed"
test $fails -eq 0
