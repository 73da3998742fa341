#!/usr/bin/env bash
# tccl launch as a user runs it, and a tccl program under the launchers people already
# use: Open MPI's mpirun (Debian's openmpi-bin) and, where installed, torchrun.
#   usage: launch_test.sh <tccl> <env_worker>
# The worker (tests/proc/env_worker.cpp) finds its rank with Communicator::fromEnv,
# all-reduces rank+1 and prints "rank R of N ... allreduce sum=S OK". Every command runs
# under `timeout`; every background process is killed on exit; the failure cases check
# that no rank (nor a process a rank started) outlives the launcher.
set -uo pipefail
tccl=$1
worker=$2
fails=0
pass=0
check() {  # description, command...; the command's exit status decides
  local what=$1
  shift
  if "$@"; then pass=$((pass + 1)); else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
unset TCCL_AUTH_KEY TCCL_AUTH_KEY_FILE TCCL_RANK TCCL_WORLD_SIZE TCCL_STORE RANK WORLD_SIZE \
  MASTER_ADDR MASTER_PORT
marker="launchtest$$"

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Processes whose command line contains the marker (read with bash builtins only, so
# that the search does not find itself).
count_marked() {
  local n=0 f parts
  for f in /proc/[0-9]*/cmdline; do
    mapfile -d '' parts <"$f" 2>/dev/null || continue
    [[ "${parts[*]}" == *"$marker"* ]] && n=$((n + 1))
  done
  echo "$n"
}
now() { date +%s.%N; }
elapsed_below() {  # start, limit seconds
  /usr/bin/python3 -c 'import sys, time; sys.exit(0 if time.time() - float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$1" "$2"
}
wait_for_lines() {  # file, pattern, count, seconds
  local i n
  for ((i = 0; i < $4 * 10; i++)); do
    n=$(grep -c -- "$2" "$1" 2>/dev/null)
    [ "${n:-0}" -ge "$3" ] && return 0
    sleep 0.1
  done
  return 1
}

# ---- one node, four ranks: the all-reduce, tagged output, a generated job key ---------
out=$(timeout 60 "$tccl" launch --nproc-per-node 4 -- "$worker" --show-key 2>&1); rc=$?
echo "$out"
check "launch 4 ranks exits 0" test $rc -eq 0
for r in 0 1 2 3; do
  check "rank $r tagged and correct" grep -q "^\[rank $r\] rank $r of 4 local $r of 4 launcher=tccl store=TCCL_STORE: allreduce sum=10 OK$" <<<"$out"
done
check "every line is tagged" test "$(grep -cv '^\[rank [0-3]\] ' <<<"$out")" -eq 0
check "a 32-byte key was generated for the job" test "$(grep -c 'key digits=64 ' <<<"$out")" -eq 4
check "every rank got the same key" test "$(grep -o 'digest=[0-9a-f]*' <<<"$out" | sort -u | wc -l)" -eq 1
check "no WARN about a missing key on a single node" test "$(grep -c 'not authenticated' <<<"$out")" -eq 0

digest() { grep -o 'digest=[0-9a-f]*' <<<"$1" | sort -u; }
first=$(digest "$out")
out=$(timeout 60 "$tccl" launch --nproc-per-node 2 -- "$worker" --show-key 2>&1)
check "each job gets a key of its own" test "$(digest "$out")" != "$first"
userkey=$(/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(32))')
a=$(TCCL_AUTH_KEY=$userkey timeout 60 "$tccl" launch --nproc-per-node 2 -- "$worker" --show-key 2>&1)
b=$(TCCL_AUTH_KEY=$userkey timeout 60 "$tccl" launch --nproc-per-node 2 -- "$worker" --show-key 2>&1)
check "a key the user set is passed on, not replaced" test "$(digest "$a")" = "$(digest "$b")" -a "$(digest "$a" | wc -l)" -eq 1
echo nothex >"$tmp/badkey"
chmod 600 "$tmp/badkey"
err=$(timeout 20 "$tccl" launch --auth-key-file "$tmp/badkey" -- "$worker" 2>&1); rc=$?
check "a malformed key file stops the launcher before any rank starts" test $rc -eq 1 -a "$(wc -l <<<"$err")" -eq 1
check "a malformed key file is named" grep -q "TCCL_AUTH_KEY_FILE='$tmp/badkey' is not a valid key" <<<"$err"

out=$(timeout 60 "$tccl" launch --nproc_per_node 2 --no-tag-output "$worker" 2>&1); rc=$?
check "--no-tag-output, torchrun-style option and no '--' exits 0" test $rc -eq 0
check "--no-tag-output leaves lines as they are" grep -q "^rank 1 of 2 local 1 of 2 launcher=tccl" <<<"$out"

# ---- a failing rank stops the rest, names itself, and decides the exit status ---------
start=$(now)
out=$(timeout 60 "$tccl" launch --nproc-per-node 4 -- "$worker" --fail-rank 2 --code 3 --grandchild --marker "$marker" 2>&1); rc=$?
echo "$out"
check "a rank exiting 3 makes launch exit 3" test $rc -eq 3
check "the failed rank is named, with why" grep -q "^tccl launch: rank 2 (node 0, local rank 2, pid [0-9]*) failed: exit 3; stopping the other 3 local rank(s)" <<<"$out"
check "the others are stopped within seconds" elapsed_below "$start" 10
sleep 0.2
check "no rank and no process a rank started is left" test "$(count_marked)" -eq 0

start=$(now)
out=$(timeout 60 "$tccl" launch --nproc-per-node 3 --grace 1 -- "$worker" --fail-rank 0 --signal 9 --on-term ignore --marker "$marker" 2>&1); rc=$?
echo "$out"
check "a rank killed by SIGKILL makes launch exit 137" test $rc -eq 137
check "the signal is named" grep -q "rank 0 (node 0, local rank 0, pid [0-9]*) failed: killed by SIGKILL (Killed)" <<<"$out"
check "ranks ignoring SIGTERM get SIGKILL after the grace period" test "$(grep -c 'did not stop within 1 s of SIGTERM: SIGKILL' <<<"$out")" -eq 2
check "grace 1 s: done within 6 s" elapsed_below "$start" 6
check "nothing left after SIGKILL" test "$(count_marked)" -eq 0

out=$(timeout 60 "$tccl" launch --nproc-per-node 2 -- /nonexistent/program 2>&1); rc=$?
check "a missing program: exit 127" test $rc -eq 127
check "a missing program is named" grep -q "cannot run '/nonexistent/program': No such file or directory" <<<"$out"
# The launcher forks and execs the command itself, searching PATH as execvp does.
out=$(timeout 60 env PATH="$tmp/nodir:/nonexistent:$(dirname "$(command -v sh)")" "$tccl" launch --nproc-per-node 2 -- sh -c 'echo "found rank $RANK"' 2>&1); rc=$?
check "a bare command name is found on PATH" test $rc -eq 0 -a "$(grep -c '^\[rank [01]\] found rank [01]$' <<<"$out")" -eq 2
out=$(timeout 60 env PATH=/nonexistent "$tccl" launch --nproc-per-node 1 -- sh -c true 2>&1); rc=$?
check "a bare name not on PATH: exit 127, named" test $rc -eq 127 -a "$(grep -c "cannot run 'sh': No such file or directory" <<<"$out")" -eq 1
printf '#!/bin/sh\necho never\n' >"$tmp/notexec"
chmod 644 "$tmp/notexec"
out=$(timeout 60 "$tccl" launch --nproc-per-node 1 -- "$tmp/notexec" 2>&1); rc=$?
check "a file that is not executable: exit 126, named" test $rc -eq 126 -a "$(grep -c "cannot run '$tmp/notexec': Permission denied" <<<"$out")" -eq 1

# ---- SIGTERM to the launcher reaches every rank ---------------------------------------
timeout 60 "$tccl" launch --nproc-per-node 3 -- "$worker" --sleep 30 --on-term report --marker "$marker" >"$tmp/term.out" 2>&1 &
pid=$!
bg+=("$pid")
check "ranks started" wait_for_lines "$tmp/term.out" "ready" 3 20
kill -TERM "$pid"
wait "$pid"; rc=$?
cat "$tmp/term.out"
check "launch stopped by SIGTERM exits 143" test $rc -eq 143
check "the launcher says it forwarded SIGTERM" grep -q "got SIGTERM: forwarding it to 3 rank(s)" "$tmp/term.out"
for r in 0 1 2; do
  check "rank $r received SIGTERM" grep -q "^\[rank $r\] got SIGTERM$" "$tmp/term.out"
done
check "nothing left after SIGTERM" test "$(count_marked)" -eq 0

# A launcher killed outright (no chance to stop anything) still takes its ranks along.
# (No timeout(1) here: it would be the one killed; this launcher is SIGKILLed within 20 s.)
"$tccl" launch --nproc-per-node 3 -- "$worker" --sleep 30 --marker "$marker" >"$tmp/kill.out" 2>&1 &
pid=$!
bg+=("$pid")
check "ranks started (SIGKILL case)" wait_for_lines "$tmp/kill.out" "ready" 3 20
check "the launcher and its 3 ranks are there" test "$(count_marked)" -eq 4
kill -KILL "$pid"
wait "$pid" 2>/dev/null
sleep 0.5
check "no rank outlives a launcher killed by SIGKILL" test "$(count_marked)" -eq 0

# ---- two "nodes" on loopback: two launchers, one store --------------------------------
two_nodes() {  # extra options for both launchers...; leaves node0.out, node1.out, rc0, rc1
  local port master=${MASTER:-127.0.0.1}
  port=$(free_port)
  timeout 60 "$tccl" launch --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" "$@" >"$tmp/node1.out" 2>&1 &
  local p1=$!
  bg+=("$p1")
  timeout 60 "$tccl" launch --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" "$@" >"$tmp/node0.out" 2>&1
  rc0=$?
  wait "$p1"
  rc1=$?
  cat "$tmp/node0.out" "$tmp/node1.out"
}
/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(32))' >"$tmp/key"
chmod 600 "$tmp/key"
two_nodes --auth-key-file "$tmp/key" -- "$worker"
check "two nodes: node 0 exits 0" test "$rc0" -eq 0
check "two nodes: node 1 exits 0" test "$rc1" -eq 0
for r in 0 1 2 3; do
  check "two nodes: rank $r correct" grep -q "^\[rank $r\] rank $r of 4 local $((r % 2)) of 2 launcher=tccl store=TCCL_STORE: allreduce sum=10 OK$" "$tmp/node$((r / 2)).out"
done
check "two nodes with a key: no WARN" test "$(cat "$tmp/node0.out" "$tmp/node1.out" | grep -c 'not authenticated')" -eq 0

two_nodes -- "$worker"
check "two nodes without a key still run" test "$rc0" -eq 0 -a "$rc1" -eq 0
check "two nodes without a key: the launcher warns once" test "$(grep -c "^tccl WARN .*not authenticated" "$tmp/node0.out")" -eq 1

# Secure by default (docs/security.md): a store beyond the loopback needs a key or TCCL_AUTH=off.
MASTER=0.0.0.0 two_nodes -- "$worker"
check "two nodes on 0.0.0.0 without a key: both launchers refuse" test "$rc0" -ne 0 -a "$rc1" -ne 0
check "they say how to set a key or opt out" grep -q "beyond the loopback, without a job key.*TCCL_AUTH_KEY=.*TCCL_AUTH=off" "$tmp/node0.out"
check "before any rank starts" test "$(cat "$tmp/node0.out" "$tmp/node1.out" | grep -c '^\[rank')" -eq 0
MASTER=0.0.0.0 TCCL_AUTH=off two_nodes -- "$worker"
check "two nodes on 0.0.0.0 with TCCL_AUTH=off run" test "$rc0" -eq 0 -a "$rc1" -eq 0
check "TCCL_AUTH=off: the store's launcher warns once" test "$(grep -c "^tccl WARN .*TCCL_AUTH=off" "$tmp/node0.out")" -eq 1

start=$(now)
two_nodes --auth-key-file "$tmp/key" -- "$worker" --fail-rank 3 --code 5 --marker "$marker"
check "a rank failing on node 1: node 1 exits 5" test "$rc1" -eq 5
check "a rank failing on node 1: node 0 exits 5 too" test "$rc0" -eq 5
check "node 0 says which rank on which node failed" grep -q "stopping node 0's 2 rank(s): rank 3 on node 1 failed: exit 5" "$tmp/node0.out"
check "the whole job stops within seconds" elapsed_below "$start" 15
check "nothing left on either node" test "$(count_marked)" -eq 0

port=$(free_port)
timeout 60 "$tccl" launch --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 \
  --master-port "$port" --timeout 20 -- "$worker" --sleep 20 --marker "$marker" >"$tmp/node0.out" 2>&1 &
p0=$!
bg+=("$p0")
out=$(timeout 60 "$tccl" launch --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
  --master-port "$port" -- "$worker" 2>&1); rc=$?
check "a node started with another shape exits 2" test $rc -eq 2
check "and says so" grep -q "node 1 was started with nnodes=2 nproc-per-node=1 but node 0 with nnodes=2 nproc-per-node=2" <<<"$out"
kill -TERM "$p0"
wait "$p0"
check "nothing left after the shape mismatch" test "$(count_marked)" -eq 0

start=$(now)
out=$(timeout 60 "$tccl" launch --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
  --master-port "$(free_port)" --rdzv-timeout 1 -- "$worker" 2>&1); rc=$?
check "node 1 without node 0 gives up: exit 1" test $rc -eq 1
check "node 1 without node 0 says where it looked" grep -q "node 1 could not meet node 0's store at 127.0.0.1:[0-9]* within 1 s (--rdzv-timeout)" <<<"$out"
check "node 1 gives up at its deadline" elapsed_below "$start" 10

# ---- usage errors: one line, exit 2 ---------------------------------------------------
for bad in "--nproc-per-node 2" "--nproc-per-node 0 -- true" "--nnodes 2 -- true" \
  "--nnodes 2 --master-addr 127.0.0.1 -- true" "--node-rank 1 -- true" "--bogus -- true"; do
  err=$(timeout 20 "$tccl" launch $bad 2>&1 >/dev/null); rc=$?
  check "launch $bad exits 2" test $rc -eq 2
  check "launch $bad prints one line" test "$(wc -l <<<"$err")" -eq 1
done

out=$(timeout 20 "$tccl" launch --help); rc=$?
check "launch --help exits 0 and shows the usage" test $rc -eq 0 -a "$(grep -c '^usage: tccl launch --nproc-per-node N' <<<"$out")" -eq 1

# ---- Open MPI's mpirun ----------------------------------------------------------------
if command -v mpirun >/dev/null; then
  mpi=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,tcp
    --mca btl_tcp_if_include lo --mca pml ob1)
  out=$("${mpi[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" "$worker" 2>&1); rc=$?
  echo "$out"
  check "mpirun: exits 0" test $rc -eq 0
  for r in 0 1 2 3; do
    check "mpirun: rank $r from Open MPI's variables, correct" grep -q "^rank $r of 4 local $r of 4 launcher=Open MPI store=MASTER_ADDR/MASTER_PORT: allreduce sum=10 OK$" <<<"$out"
  done
  out=$("${mpi[@]}" "$worker" 2>&1); rc=$?
  check "mpirun without a store address fails" test $rc -ne 0
  check "mpirun without a store address says what to set" grep -q "has no store address: set TCCL_STORE=host:port .* e.g. mpirun -x MASTER_ADDR=" <<<"$out"
else
  echo "SKIPPED: the mpirun tests (mpirun not found; scripts/deps.sh test installs openmpi-bin)"
fi

# ---- torchrun, and a PyTorch program under tccl launch (where torch is installed) -----
if command -v torchrun >/dev/null && /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  # --redirects/--tee 2: Debian's torch 1.13 on Python 3.11 cannot parse their default "0".
  # tccl's store goes on MASTER_PORT + 1: take both from below the ephemeral range, where
  # no outgoing connection (torchrun's own, to its store) can be holding P + 1.
  port=$(/usr/bin/python3 -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    try:
        for q in (p, p + 1):
            socket.socket().bind(("127.0.0.1", q))
        print(p)
        break
    except OSError:
        pass')
  out=$(timeout 120 torchrun --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
    --redirects 2 --tee 2 --no_python "$worker" 2>&1); rc=$?
  echo "$out" | grep -v '^\*\*\*\|OMP_NUM_THREADS'
  check "torchrun: exits 0" test $rc -eq 0
  for r in 0 1; do
    check "torchrun: rank $r, tccl's store beside torchrun's agent store, correct" grep -q "rank $r of 2 local $r of 2 launcher=torchrun store=MASTER_ADDR/MASTER_PORT+1 (torchrun agent store on MASTER_PORT): allreduce sum=3 OK" <<<"$out"
  done
  cat >"$tmp/torch_allreduce.py" <<'EOF'
import torch
import torch.distributed as dist
dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"torch rank {dist.get_rank()} of {dist.get_world_size()}: all_reduce {t.item():g}", flush=True)
dist.destroy_process_group()
EOF
  out=$(timeout 120 "$tccl" launch --nproc-per-node 2 -- /usr/bin/python3 "$tmp/torch_allreduce.py" 2>&1); rc=$?
  echo "$out"
  check "a PyTorch gloo program under tccl launch: exits 0" test $rc -eq 0
  check "a PyTorch gloo program under tccl launch: correct" test "$(grep -c '^\[rank [01]\] torch rank [01] of 2: all_reduce 3$' <<<"$out")" -eq 2
else
  echo "SKIPPED: the torchrun tests (torchrun or torch not installed)"
fi

echo "launch_test: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
