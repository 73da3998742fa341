#!/usr/bin/env bash
# tccl across hosts: 4 network-namespace "hosts" on a bridge (tests/netns/cluster.sh),
# one `tccl launch` per host, 2 ranks each. Usage:
#   netns_test.sh CASE TCCL_CLI NETNS_WORKER
# CASE: collectives | bytes | ifname | stranger | ratelimit | vanish | nsocks | all
# Exit 0: passed; 77: skipped (no namespaces here; the reason is printed); else failed.
# docs/testing-netns.md describes the cases and the figures they check.
set -uo pipefail
case_name=${1:?case}
TCCL=${2:?tccl cli}
WORKER=${3:?netns worker}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/cluster.sh
source "$here/cluster.sh"

HOSTS=4
NPROC=2
MASTER_ADDR=10.213.0.10  # host 0 on the mgmt net: cluster_addr 0
PORT=29500         # inside our own namespaces: nothing else can hold it
JOB_TIMEOUT=${TCCL_NETNS_JOB_TIMEOUT:-90}  # seconds per job, then every launcher is killed
LOGDIR=$(mktemp -d /tmp/tccl-netns.XXXXXX)
# Every job is authenticated, as a real multi-host job should be: the launchers of one
# job share a key (docs/security.md); a job is free to override it.
JOB_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
fails=0
pass=0
skipped=""  # the cases that could not run here (exit 77 when nothing else failed)

check() {  # description, command...
  local what=$1
  shift
  if "$@"; then
    pass=$((pass + 1))
  else
    echo "FAILED: $what"
    fails=$((fails + 1))
  fi
}

finish() {
  cluster_down
  if [ $fails -eq 0 ] && [ -z "${TCCL_NETNS_KEEP_LOGS:-}" ]; then
    rm -rf "$LOGDIR"
  else
    echo "logs kept in $LOGDIR"
  fi
}

show_logs() {  # job name
  local f
  for f in "$LOGDIR/$1".*.log; do
    echo "---- $(basename "$f") (last 40 lines)"
    tail -n 40 "$f"
  done
}

# run_job NAME HOSTS NPROC [VAR=VALUE...] -- worker args...
# One `tccl launch` per host, inside the host's namespace, all at once; waits for all.
# Sets JOB_RC (the first non-zero launcher status, else 0) and JOB_MS (wall time).
run_job() {
  local name=$1 hosts=$2 nproc=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  local i pids=() t0 rc
  t0=$(date +%s%N)
  for ((i = 0; i < hosts; i++)); do
    cluster_exec "$i" env TCCL_NETNS_HOST="$i" TCCL_TUNE_FILE=/nonexistent \
      TCCL_AUTH_KEY="$JOB_KEY" "${envs[@]}" \
      timeout -k 5 "$JOB_TIMEOUT" "$TCCL" launch --nproc-per-node "$nproc" --nnodes "$hosts" \
      --node-rank "$i" --master-addr "$MASTER_ADDR" --master-port "$PORT" -- \
      "$WORKER" "$@" >"$LOGDIR/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  JOB_RC=0
  for ((i = 0; i < hosts; i++)); do
    wait "${pids[$i]}"
    rc=$?
    if [ $rc -ne 0 ] && [ $JOB_RC -eq 0 ]; then JOB_RC=$rc; fi
  done
  JOB_MS=$((($(date +%s%N) - t0) / 1000000))
  echo "== job $name: ${hosts}x${nproc} ranks, exit $JOB_RC, $JOB_MS ms"
  if [ $JOB_RC -ne 0 ]; then show_logs "$name"; fi
}

job_ok() { [ "$JOB_RC" -eq 0 ]; }
# grep reads the files itself: `cat | grep -q` can fail under pipefail (SIGPIPE to cat).
logs_have() { grep -q -- "$2" "$LOGDIR/$1".*.log; }
logs_count() { cat "$LOGDIR/$1".*.log | grep -c -- "$2"; }

have_algo() { "$WORKER" has-algo "$1"; }

ALGOS="ring naive tree hd"
have_algo hier && ALGOS="$ALGOS hier"

# ---- correctness: every all-reduce algorithm and the other collectives ----------------
case_collectives() {
  local list
  list=$(tr ' ' ',' <<<"$ALGOS")
  run_job collectives $HOSTS $NPROC -- collectives "$list"
  check "collectives job exits 0" job_ok
  check "all $((HOSTS * NPROC)) ranks report correct results" \
    test "$(logs_count collectives 'collectives correct')" -eq $((HOSTS * NPROC))
  have_algo hier || echo "NOTE: this build has no hierarchical all-reduce; not tested"
}

# ---- bytes: interface counters vs the algorithm's inter-host bytes ---------------------
case_bytes() {
  local algo count=2097152  # 8 MiB of int32 (divisible by 8 ranks and by 4 hosts)
  for algo in $ALGOS; do
    run_job "bytes-$algo" $HOSTS $NPROC -- bytes "$algo" $count mgmt0
    grep -h '^\(\[.*\] \)\?\(bytes\|  \)' "$LOGDIR/bytes-$algo".0.log
    check "bytes $algo job exits 0" job_ok
    check "bytes $algo: counters match" logs_have "bytes-$algo" "bytes: PASS"
  done
  # Auto, told nothing about the hosts: the cost model sees the layout (4 hosts x 2 ranks)
  # and, for 8 MiB, must choose the algorithm that moves least between hosts: hier.
  if have_algo hier; then
    run_job bytes-auto $HOSTS $NPROC -- bytes auto $count mgmt0
    grep -h '^\(\[.*\] \)\?\(bytes\|  \)' "$LOGDIR/bytes-auto".0.log
    check "bytes auto job exits 0" job_ok
    check "auto chooses hier across 4 hosts x 2 ranks at 8 MiB" logs_have bytes-auto \
      "bytes: auto chose hier"
    check "bytes auto: counters match" logs_have bytes-auto "bytes: PASS"
  fi
}

# ---- interface selection ---------------------------------------------------------------
case_ifname() {
  local spec count=262144  # 1 MiB
  # The store is on the mgmt net; TCCL_SOCKET_IFNAME moves rank-to-rank traffic to data0
  # whichever way it names it (exact name, prefix, exclusion list, CIDR).
  for spec in =data0 data '^mgmt,lo' 10.213.1.0/24; do
    local tag
    tag=ifname-$(tr -c 'a-z0-9' '_' <<<"$spec")
    run_job "$tag" 2 $NPROC TCCL_SOCKET_IFNAME="$spec" TCCL_DEBUG=INFO -- \
      bytes ring $count data0
    grep -h '^\(\[.*\] \)\?\(bytes\|  \)' "$LOGDIR/$tag".0.log
    check "TCCL_SOCKET_IFNAME=$spec: job exits 0" job_ok
    check "TCCL_SOCKET_IFNAME=$spec: traffic on data0 only" logs_have "$tag" "bytes: PASS"
    check "TCCL_SOCKET_IFNAME=$spec: every rank logs its choice of data0 at INFO" test \
      "$(logs_count "$tag" 'INFO.*listen address 10\.213\.1\.[0-9]* (data0)')" -eq $((2 * NPROC))
  done
  # Without TCCL_SOCKET_IFNAME: the interface that routes to the store. With the store on
  # the data net, that is data0; over IPv6 on the mgmt net, mgmt0.
  MASTER_ADDR=$(cluster_addr 0 1)
  run_job ifname-route 2 $NPROC TCCL_DEBUG=INFO -- bytes ring $count data0
  MASTER_ADDR=$(cluster_addr 0)
  grep -h '^\(\[.*\] \)\?\(bytes\|  \)' "$LOGDIR/ifname-route".0.log
  check "store on the data net: job exits 0" job_ok
  check "store on the data net: traffic on data0 only" logs_have ifname-route "bytes: PASS"
  MASTER_ADDR=$(cluster_addr6 0)
  run_job ifname-ipv6 2 $NPROC TCCL_DEBUG=INFO -- bytes ring $count mgmt0
  MASTER_ADDR=$(cluster_addr 0)
  grep -h '^\(\[.*\] \)\?\(bytes\|  \)' "$LOGDIR/ifname-ipv6".0.log
  check "IPv6 store: job exits 0" job_ok
  check "IPv6 store: traffic on mgmt0 only" logs_have ifname-ipv6 "bytes: PASS"
  check "IPv6 store: every rank listens on its IPv6 address" test \
    "$(logs_count ifname-ipv6 'INFO.*listen address fd00:213::1[0-9] (mgmt0)')" -eq $((2 * NPROC))
  # A spec that matches nothing fails at once, naming the variable and the value.
  run_job ifname-none 2 $NPROC TCCL_SOCKET_IFNAME=nosuch9 -- collectives ring
  check "TCCL_SOCKET_IFNAME=nosuch9 fails" test "$JOB_RC" -ne 0 -a "$JOB_RC" -ne 124
  check "TCCL_SOCKET_IFNAME=nosuch9 fails quickly" test "$JOB_MS" -lt 30000
  check "TCCL_SOCKET_IFNAME=nosuch9: the error names the variable and the value" \
    logs_have ifname-none "TCCL_SOCKET_IFNAME='nosuch9'"
}

# ---- strangers: a process of no job knocks on the ranks' ports ------------------------
case_stranger() {
  local dir="$LOGDIR/sync"
  mkdir -p "$dir"
  run_job stranger $HOSTS $NPROC TCCL_JOB_ID=netns-stranger-job -- \
    wait-go "$dir" 2000 1 &
  local job=$!
  local i=0
  while [ "$(find "$dir" -name 'ready.*' | wc -l)" -lt $((HOSTS * NPROC)) ]; do
    i=$((i + 1))
    if [ $i -gt 1200 ]; then
      echo "FAILED: the ranks did not open their listeners within 60 s"
      fails=$((fails + 1))
      touch "$dir/go"
      wait $job
      show_logs stranger
      return
    fi
    sleep 0.05
  done
  # Host 1's listeners: ss shows each one's port and owning pid; pid.<pid> gives its rank.
  local line port pid rank strangers=() names=() mode
  while read -r line; do
    port=$(awk '{print $4}' <<<"$line")
    port=${port##*:}
    pid=$(sed -nE 's/.*pid=([0-9]+).*/\1/p' <<<"$line")
    [ -f "$dir/pid.$pid" ] || continue
    rank=$(cat "$dir/pid.$pid")
    # garbage: not tccl at all. nokey: the protocol, the job id (TCCL_JOB_ID is no
    # secret) and "I am rank 0", but no key. wrongkey: the same with a key of its own,
    # answering the rank's challenge with an HMAC that cannot verify.
    for mode in garbage nokey wrongkey; do
      cluster_exec x "$WORKER" stranger "$(cluster_addr 1)" "$port" $mode "$rank" \
        $((HOSTS * NPROC)) netns-stranger-job 30 >"$LOGDIR/x-$mode-$rank.out" 2>&1 &
      strangers+=($!)
      names+=("$mode-$rank")
    done
  done < <(cluster_exec 1 ss -Htlnp 2>/dev/null)
  check "found host 1's two listening ranks" test ${#strangers[@]} -eq 6
  sleep 0.5  # the strangers' connections wait in the listeners' backlogs
  touch "$dir/go"
  wait $job
  # run_job ran in a subshell: its verdict is in the logs
  check "every rank of the job completes correctly despite the strangers" \
    test "$(logs_count stranger 'collectives correct after the strangers')" -eq $((HOSTS * NPROC))
  local k
  for k in "${!strangers[@]}"; do
    check "stranger ${names[$k]} is disconnected by the rank" wait "${strangers[$k]}"
  done
  cat "$LOGDIR"/x-*.out
  for mode in garbage nokey wrongkey; do
    local want
    case $mode in
      garbage) want='Reject reason 1 ' ;;   # BadMagic
      nokey) want='Reject reason 9 ' ;;     # AuthRequired
      wrongkey) want='Reject reason 11 ' ;; # AuthFailed, after the challenge
    esac
    check "stranger $mode is told why ($want)" \
      test "$(cat "$LOGDIR"/x-$mode-*.out | grep -c "$want")" -eq 2
  done
  check "host 1 logs each rejected stranger with its address at WARN" test \
    "$(logs_count stranger "WARN.*$(cluster_addr x)")" -ge 6
  cat "$LOGDIR"/stranger.*.log | grep -- "$(cluster_addr x)"
}

# ---- a host that vanishes without a FIN, heartbeats off --------------------------------
case_vanish() {
  local dir="$LOGDIR/vanish"
  mkdir -p "$dir"
  # Host 1 drops its link once every rank is connected; nothing says goodbye, and with
  # TCCL_HEARTBEAT_MS=0 only the data sockets' keepalive / TCP_USER_TIMEOUT can tell
  # host 0 (3 s here; the communicator's timeout, 60 s, would be the only bound without).
  run_job vanish 2 1 TCCL_HEARTBEAT_MS=0 TCCL_TCP_USER_TIMEOUT_MS=3000 TCCL_TIMEOUT_MS=60000 \
    -- vanish "$dir" 1 &
  local job=$! i=0
  while [ "$(find "$dir" -name 'ready.*' | wc -l)" -lt 2 ]; do
    i=$((i + 1))
    if [ $i -gt 1200 ]; then
      echo "FAILED: the ranks did not connect within 60 s"
      fails=$((fails + 1))
      touch "$dir/down" "$dir/end"
      wait $job
      return
    fi
    sleep 0.05
  done
  cluster_exec 1 ip link set mgmt0 down
  cluster_exec 1 ip link set data0 down
  touch "$dir/down"
  i=0
  while ! grep -q "vanish: failed after" "$LOGDIR"/vanish.0.log 2>/dev/null && [ $i -lt 600 ]; do
    i=$((i + 1))
    sleep 0.1
  done
  # Host 1 back, so its launcher can say it is done, and its rank leaves.
  cluster_exec 1 ip link set mgmt0 up
  cluster_exec 1 ip link set data0 up
  touch "$dir/end"
  wait $job
  local line secs
  line=$(grep -h "vanish: failed after" "$LOGDIR"/vanish.0.log)
  echo "$line"
  secs=$(sed -nE 's/.*failed after ([0-9.]+) s.*/\1/p' <<<"$line" | head -1)
  check "the survivor's call fails" test -n "$secs"
  check "within 15 s of the link drop (TCP_USER_TIMEOUT 3 s; timeout 60 s)" \
    awk -v s="${secs:-999}" 'BEGIN { exit !(s < 15) }'
  check "the error names the vanished rank 1" grep -q "vanish: failed after.*rank 1" \
    "$LOGDIR"/vanish.0.log
  check "it is not the communicator's timeout" bash -c \
    "! grep 'vanish: failed after' '$LOGDIR/vanish.0.log' | grep -q 'Timeout'"
}

# ---- rate-limited links: the ring's advantage in seconds --------------------------------
case_ratelimit() {
  if ! cluster_shape 200mbit; then
    echo "SKIPPED: tc tbf is not available here (sch_tbf)"
    skipped="$skipped ratelimit"
    return
  fi
  # 4M int32 = 16 MiB; the busiest link carries 1.75 V (ring) vs 12 V (naive).
  run_job ratelimit $HOSTS $NPROC -- timing 4194304 3 200 1.5
  grep -h 'timing' "$LOGDIR/ratelimit".0.log
  check "timing job exits 0" job_ok
  check "ring beats naive by the margin the bytes predict" logs_have ratelimit "timing: PASS"
}

# ---- several sockets per peer (docs/nsocks.md): a per-flow rate limit ------------------
# 2 hosts, 1 rank each; every TCP connection limited to 100 Mbit/s (htb, a class per
# connection: cluster_shape_flows). A ring all-reduce of 8 MiB with TCCL_NSOCKS=1, then
# =4 with the flow limit told to the cost model (TCCL_FLOW_GBPS), which must choose to
# stripe and run several times faster, then =4 without it: the cost model must not stripe,
# and the run is as slow as one socket.
NSOCKS_MBIT=100
stripes_median() { sed -n 's/.*stripes: .* median \([0-9.e+-]*\) s.*/\1/p' "$LOGDIR/$1".0.log; }
# Classes of host 0 that carried more than $2 bytes between two cluster_class_bytes lists.
busy_classes() {
  awk -v min="$3" 'NR == FNR { b[$1] = $2; next } $2 - b[$1] > min { n++ } END { print n + 0 }' \
    "$1" "$2"
}
case_nsocks() {
  if ! cluster_shape_flows ${NSOCKS_MBIT}mbit sport dport; then
    echo "SKIPPED: tc htb with u32 filters is not available here"
    skipped="$skipped nsocks"
    return
  fi
  local count=2097152 reps=3 flow t1 t4 toff busy try JOB_TIMEOUT=30  # seconds per job
  flow=$(awk -v m=$NSOCKS_MBIT 'BEGIN { print m / 8000 }')  # GB/s
  run_job nsocks1 2 1 TCCL_NSOCKS=1 TCCL_FLOW_GBPS="$flow" -- stripes $count $reps
  grep -h 'stripes:' "$LOGDIR/nsocks1.0.log"
  check "K=1 job exits 0" job_ok
  # Two stripes whose ports share a class would share its rate: seen in the class bytes,
  # and the K=4 run is repeated once (new connections, new ports).
  for try in 1 2; do
    cluster_class_bytes 0 >"$LOGDIR/classes.before"
    run_job nsocks4 2 1 TCCL_NSOCKS=4 TCCL_FLOW_GBPS="$flow" TCCL_DEBUG=INFO -- \
      stripes $count $reps
    cluster_class_bytes 0 >"$LOGDIR/classes.after"
    busy=$(busy_classes "$LOGDIR/classes.before" "$LOGDIR/classes.after" 4000000)
    grep -h 'stripes:\|TCCL_NSOCKS=' "$LOGDIR/nsocks4.0.log"
    echo "nsocks: try $try: $busy htb classes of host 0 carried over 4 MB"
    [ "$busy" -ge 4 ] && break
    echo "nsocks: two of the 4 connections hashed to one class; once more"
  done
  check "K=4 job exits 0" job_ok
  check "the cost model chose to stripe" logs_have nsocks4 "TCCL_NSOCKS=4: striping messages of"
  check "every rank made 4 sockets to its peer" \
    test "$(logs_count nsocks4 'connected to rank .* (4 sockets)')" -eq 2
  check "4 connections each carried a share" test "$busy" -ge 4
  run_job nsocks4off 2 1 TCCL_NSOCKS=4 TCCL_DEBUG=INFO -- stripes $count $reps
  grep -h 'stripes:\|TCCL_NSOCKS=' "$LOGDIR/nsocks4off.0.log"
  check "K=4 without a flow limit exits 0" job_ok
  check "without a known flow limit the cost model does not stripe" \
    logs_have nsocks4off "TCCL_NSOCKS=4: not striping"
  t1=$(stripes_median nsocks1)
  t4=$(stripes_median nsocks4)
  toff=$(stripes_median nsocks4off)
  echo "nsocks: median ring all-reduce of 8 MiB at ${NSOCKS_MBIT} Mbit/s per flow:" \
    "K=1 ${t1:-?} s, K=4 ${t4:-?} s, K=4 not striped ${toff:-?} s"
  check "K=4 striped is at least 2.5x faster than K=1" \
    awk -v a="${t1:-0}" -v b="${t4:-0}" 'BEGIN { exit !(b > 0 && a / b >= 2.5) }'
  check "K=4 not striped is no faster than 1.5x K=1" \
    awk -v a="${t1:-0}" -v b="${toff:-0}" 'BEGIN { exit !(b > 0 && a / b < 1.5) }'
}

"$TCCL" --help 2>/dev/null | grep "^  launch" >/dev/null ||
  { echo "FAILED: $TCCL has no launch command"; exit 1; }
trap 'finish' EXIT
cluster_require
cluster_up $HOSTS || { echo "FAILED: could not build the namespace cluster"; exit 1; }
trap 'finish' EXIT  # cluster_up set its own traps; finish also deletes the cluster
case $case_name in
  collectives | bytes | ifname | stranger | ratelimit | vanish | nsocks) "case_$case_name" ;;
  all) for c in collectives bytes ifname stranger ratelimit vanish nsocks; do "case_$c"; done ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "netns $case_name: $pass checks passed, $fails failed${skipped:+, skipped:$skipped}"
[ $fails -eq 0 ] || exit 1
# A case that could not run is CTest's "skipped" (SKIP_RETURN_CODE 77), never a pass;
# `all` skips only when none of its cases ran a check.
if [ -n "$skipped" ] && { [ "$case_name" != all ] || [ $pass -eq 0 ]; }; then exit 77; fi
exit 0
