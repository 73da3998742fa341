#!/usr/bin/env bash
# `tccl faults` as a user runs it: every scenario exits 0 (the detection was right)
# within its bound, the JSON is well formed and says the same, a fault that never
# fires exits 1, and bad usage exits 2 with one line. Every run is under `timeout`.
set -uo pipefail
tccl=$1
fails=0
pass=0
check() {  # description, command...; the command's exit status decides
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
run() { timeout 90 "$tccl" faults "$@" 2>/dev/null; }

out=$(run --kill 2 --at reduce-scatter:2); rc=$?
echo "$out"
check "kill exits 0" test $rc -eq 0
check "kill passes" grep -q "verdict: PASS" <<<"$out"
check "kill: every survivor names rank 2" test "$(grep -cE "PeerClosed +culprit 2," <<<"$out")" -eq 3
check "kill: the culprit exited with the hook's status" grep -q "rank 2: (culprit) no report; process exit 43" <<<"$out"
check "kill: later calls are Aborted" test "$(grep -c "later call: Aborted" <<<"$out")" -eq 3

json=$(run --kill 1 --algo tree --world 5 --json); rc=$?
echo "$json"
check "kill --json exits 0" test $rc -eq 0
check "kill --json fields" /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["pass"] is True, d
s = d["scenarios"][0]
assert s["scenario"] == "kill" and s["world"] == 5 and s["algorithm"] == "tree", s
assert s["culprit"] == 1 and s["expected_kind"] == "PeerClosed", s
survivors = [r for r in s["ranks"] if r["role"] == "survivor"]
assert len(survivors) == 4, s["ranks"]
for r in survivors:
    assert r["kind"] == "PeerClosed" and r["culprit"] == 1, r
    assert r["elapsed_ms"] < s["bound_ms"], r
    assert r["later_kind"] == "Aborted" and r["later_culprit"] == 1, r
    assert r["collective"] == "allreduce" and r["seq"] >= 0 and r["message"], r
' "$json"

start=$(date +%s)
out=$(run --stop 3 --timeout-ms 1000); rc=$?
echo "$out"
check "stop exits 0" test $rc -eq 0
check "stop names rank 3 as Timeout" test "$(grep -cE "Timeout +culprit 3," <<<"$out")" -eq 3
check "stop ends by itself well within 2 x timeout + 15 s" test $(($(date +%s) - start)) -le 17

out=$(run --stuck 0 --timeout-ms 1000 --algo hd); rc=$?
echo "$out"
check "stuck exits 0" test $rc -eq 0

for s in "--skip 1" "--reorder 2 --world 3" "--count-mismatch 3 --algo naive"; do
  out=$(run $s); rc=$?
  echo "$out"
  check "$s exits 0" test $rc -eq 0
  check "$s: Mismatch on every rank" grep -q "verdict: PASS" <<<"$out"
done

out=$(run --shrink --kill 2 --world 5 --algo ring --iters 6); rc=$?
echo "$out"
check "shrink exits 0" test $rc -eq 0
check "shrink: every survivor is in a world of 4" test "$(grep -c "of 4 (members 0,1,3,4)" <<<"$out")" -eq 4
check "shrink: the rest of the loop is verified" grep -qE "resumed at iteration (2, 4|3, 3) more all-reduces verified exactly" <<<"$out"

out=$(run --all --world 3 --timeout-ms 1000); rc=$?
echo "$out"
check "--all exits 0" test $rc -eq 0
check "--all prints the summary table" grep -q "^scenario .*culprit .*expected .*reported .*slowest .*bound .*result" <<<"$out"
check "--all runs seven scenarios, all PASS" test "$(grep -cE "^(kill|stop|stuck|skip|reorder|count-mismatch|shrink) .* PASS$" <<<"$out")" -eq 7

# A fault that never fires (collective #99 of 3): nobody raises anything, exit 1.
out=$(run --kill 1 --at start#99); rc=$?
echo "$out"
check "a wrong detection exits 1" test $rc -eq 1
check "it says why" grep -q "the fault did not fire" <<<"$out"

for bad in "" "--kill 9" "--kill 1 --at nosuch:1" "--kill 1 --at reduce-scatter:7" "--world 1 --kill 0" \
  "--algo auto --kill 1" "--algo hier --kill 1" "--skip 0 --world 2" "--kill 1 --stop 2" "--stuck 1 --at reduce-scatter:1" "--bogus"; do
  err=$(timeout 30 "$tccl" faults $bad 2>&1 >/dev/null); rc=$?
  check "faults $bad exits 2" test $rc -eq 2
  check "faults $bad prints one line" test "$(wc -l <<<"$err")" -eq 1
done

echo "faults_test: $pass passed, $fails failed"
[ $fails -eq 0 ]
