#!/usr/bin/env bash
# `tccl simulate` as a user runs it: the table has its columns and one row per size and
# algorithm, the bytes column is the closed form, `auto` is reported, a SimGrid platform
# file works, and bad usage exits 2 with one line. Every run is under `timeout`.
set -uo pipefail
tccl=$1
fails=0
pass=0
check() {  # description, command...; the command's exit status decides
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
run() { timeout 120 "$tccl" simulate "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$(run --hosts 4 --ranks-per-host 2 --sizes 1M,4M --algo all 2>&1); rc=$?
echo "$out"
check "all: exits 0" test $rc -eq 0
check "all: header" grep -qE "^# +size +count +type +algo +time\(us\) +algbw\(GB/s\) +busbw\(GB/s\) +bytes/rank" <<<"$out"
check "all: 12 rows (2 sizes x 6 algorithms)" test "$(grep -cE '^ +[0-9]+ +[0-9]+ +float32 ' <<<"$out")" -eq 12
check "all: auto reported per size" test "$(grep -c "auto picks" <<<"$out")" -eq 2
# Ring bytes per rank at 1 MiB, 8 ranks: 2 x 7/8 x 1 MiB = 1835008.
check "ring bytes/rank is 2(N-1)/N V" grep -qE "^ +1048576 +262144 +float32 +ring +[0-9.]+ +[0-9.]+ +[0-9.]+ +1835008 " <<<"$out"

csv=$(run --world 5 --sizes 64K --algo ring,tree --csv 2>&1); rc=$?
check "csv: exits 0" test $rc -eq 0
check "csv: header and two rows" test "$(grep -c '^65536,16384,float32,' <<<"$csv")" -eq 2

out=$(run --world 6 --op broadcast --root 5 --sizes 1M 2>&1); rc=$?
check "broadcast: exits 0, two algorithms" test $rc -eq 0 -a "$(grep -c 'float32' <<<"$out")" -eq 2

out=$(run --fat-tree "2;4,4;1,2;1,2" --ranks-per-host 2 --sizes 1M --algo ring,hier 2>&1); rc=$?
echo "$out"
check "fat tree: exits 0 with 32 ranks" test $rc -eq 0
check "fat tree: 16 hosts x 2 ranks" grep -q "16 hosts x 2 ranks" <<<"$out"

cat >"$tmp/p.xml" <<'XML'
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <host id="n1" speed="1f" core="2"/>
    <host id="n2" speed="1f" core="2"/>
    <host id="n10" speed="1f" core="2"/>
    <link id="l1" bandwidth="1GBps" latency="10us" sharing_policy="SPLITDUPLEX"/>
    <link id="l2" bandwidth="1GBps" latency="10us" sharing_policy="SPLITDUPLEX"/>
    <link id="l10" bandwidth="1GBps" latency="10us" sharing_policy="SPLITDUPLEX"/>
    <link id="lo" bandwidth="10GBps" latency="1us" sharing_policy="FATPIPE"/>
    <route src="n1" dst="n2"><link_ctn id="l1" direction="UP"/><link_ctn id="l2" direction="DOWN"/></route>
    <route src="n1" dst="n10"><link_ctn id="l1" direction="UP"/><link_ctn id="l10" direction="DOWN"/></route>
    <route src="n2" dst="n10"><link_ctn id="l2" direction="UP"/><link_ctn id="l10" direction="DOWN"/></route>
    <route src="n1" dst="n1"><link_ctn id="lo"/></route>
    <route src="n2" dst="n2"><link_ctn id="lo"/></route>
    <route src="n10" dst="n10"><link_ctn id="lo"/></route>
  </zone>
</platform>
XML
out=$(run --platform "$tmp/p.xml" --ranks-per-host 2 --sizes 1M --algo all 2>&1); rc=$?
echo "$out"
check "platform file: exits 0" test $rc -eq 0
check "platform file: 3 hosts x 2 ranks" grep -q "3 hosts x 2 ranks" <<<"$out"

# Every replay runs in its own child process from simulated time 0, so a row does not
# depend on what was replayed before it: in one process, naive at 8 MiB moved by 0.6 %
# after a 1 MiB replay (its simultaneous completions tied differently at a later clock).
alone=$(run --world 33 --gbps 100 --algo naive --sizes 8M --csv | grep '^8388608,' | cut -d, -f5)
after=$(run --world 33 --gbps 100 --algo naive --sizes 1M,8M --csv | grep '^8388608,' | cut -d, -f5)
behind=$(run --world 33 --gbps 100 --algo tree,naive --sizes 8M --csv | grep '^8388608,.*,naive,' | cut -d, -f5)
echo "naive 8M at 33 ranks: alone $alone us, after 1M $after us, after tree $behind us"
check "a replay does not depend on the ones before it" test -n "$alone" -a "$alone" = "$after" -a "$alone" = "$behind"

# A replay's child killed by a signal (as the OOM killer does): named, exit 1, no row.
"$tccl" simulate --world 256 --algo naive --sizes 1M >"$tmp/killed.out" 2>"$tmp/killed.err" &
parent=$!
child=""
for _ in $(seq 100); do
  child=$(pgrep -P "$parent" | head -1)
  [ -n "$child" ] && break
  sleep 0.1
done
[ -n "$child" ] && kill -9 "$child"
timeout 60 tail --pid="$parent" -f /dev/null
kill -9 "$parent" 2>/dev/null  # still running after 60 s: end it (and fail below)
wait "$parent"; rc=$?
cat "$tmp/killed.err"
check "killed replay: exit 1 ($rc)" test $rc -eq 1
check "killed replay: names the replay and the signal" \
  grep -q "the replay of naive at 1048576 B was killed by signal 9" "$tmp/killed.err"
check "killed replay: no row" test "$(grep -c float32 "$tmp/killed.out")" -eq 0

usage() {  # description, args...: exit 2 and one line on stderr
  local what=$1; shift
  local err rc
  err=$(timeout 60 "$tccl" simulate "$@" 2>&1 >/dev/null); rc=$?
  check "$what: exit 2 ($rc)" test $rc -eq 2
  check "$what: one line" test "$(wc -l <<<"$err")" -eq 1
}
usage "bad fat tree" --fat-tree "2;4;1,2;1,2"
usage "fat tree hosts mismatch" --fat-tree "1;4;1;1" --hosts 5
usage "too few hosts" --hosts 2 --world 9
usage "missing platform" --platform "$tmp/nope.xml"
usage "unknown algorithm" --algo warp
usage "no such algorithm here" --op reduce_scatter --algo tree
usage "zero bandwidth" --gbps 0
usage "root outside" --world 4 --op broadcast --root 4
usage "unknown option" --frobnicate 1
usage "world 2^64" --world 18446744073709551616
usage "negative latency" --latency-us -1
usage "nan rate" --gbps nan
usage "empty size list item" --sizes 1M,,2M
usage "bad SimGrid config key" --simgrid-cfg bogus:1
usage "over the world limit" --hosts 300 --ranks-per-host 300

# The simulator is a program of its own, tccl-simulate beside tccl, which `tccl simulate`
# execs (tools/main.cpp): tccl itself, and so every rank process that demo, bench, faults
# and tune start, loads no SimGrid. Without its helper, tccl simulate says where it looked.
check "tccl links no SimGrid" bash -c '! ldd "$1" | grep -q libsimgrid' _ "$tccl"
check "tccl-simulate does" bash -c 'ldd "$1" | grep -q libsimgrid' _ "$(dirname "$tccl")/tccl-simulate"
cp "$tccl" "$tmp/tccl"
err=$(timeout 60 "$tmp/tccl" simulate --world 4 2>&1 >/dev/null); rc=$?
echo "$err"
check "no helper: exit 2 ($rc)" test $rc -eq 2
check "no helper: one line naming the missing helper" \
  test "$err" = "tccl simulate: runs in '$tmp/tccl-simulate', which is missing (install it beside tccl; docs/simulate.md)"
err=$(timeout 60 "$(dirname "$tccl")/tccl-simulate" --world 4 2>&1 >/dev/null); rc=$?
check "the helper alone: exit 2 ($rc) and one line" test $rc -eq 2 -a "$(wc -l <<<"$err")" -eq 1

echo "simulate_test: $pass passed, $fails failed"
test $fails -eq 0
