#!/bin/bash
# Where a small message's time goes: tccl, Open MPI and no library at all (raw_pingpong),
# each traced by socket_trace.so (bench/socket_trace.c), alternated REPS times.
#
#   TCCL=$PWD/build/tccl REPS=5 bash bench/message_floor.sh [pingpong|exchange]
#
# pingpong: tccl p2pbench --mode latency, mpi_p2p --mode latency, raw_pingpong pingpong
#           (8 bytes of payload). exchange: the 8-byte all-reduce at world 2 (tccl bench
#           --algo naive, mpi_allreduce) against raw_pingpong exchange. Each run prints the
#           program's own figure and bench/socket_trace.py's split; at the end, medians per
#           contender over runs of: the figure, send, to-read, read, turnaround (us).
# Builds raw_pingpong and socket_trace.so into build-bench/trace; the MPI programs as
# bench/README.md says (build-bench/p2p/mpi_p2p, build-bench/compare/mpi_allreduce).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TCCL=${TCCL:-$ROOT/build/tccl}
REPS=${REPS:-5}
MODE=${1:-pingpong}
OUT=$ROOT/build-bench/trace
MPI_P2P=${MPI_P2P:-$ROOT/build-bench/p2p/mpi_p2p}
MPI_AR=${MPI_AR:-$ROOT/build-bench/compare/mpi_allreduce}
mkdir -p "$OUT"
gcc -O2 -shared -fPIC -o "$OUT/socket_trace.so" "$ROOT/bench/socket_trace.c" -ldl
gcc -O2 -o "$OUT/raw_pingpong" "$ROOT/bench/raw_pingpong.c"
ST=$OUT/socket_trace.so
case "$MODE" in
  pingpong) need=$MPI_P2P ;;
  exchange) need=$MPI_AR ;;
  *) echo "usage: message_floor.sh [pingpong|exchange]" >&2; exit 2 ;;
esac
[ -x "$TCCL" ] && [ -x "$need" ] || { echo "message_floor.sh: need $TCCL and $need" >&2; exit 1; }
MPIRUN=(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1
        --mca btl tcp,self --mca btl_tcp_if_include lo -x LD_PRELOAD="$ST")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
results=$TMP/results
run() {  # name, command...: runs it traced, appends "name figure send to-read read turnaround"
  local name=$1
  shift
  rm -f "$TMP"/st.*
  local fig
  fig=$("$@")
  local split
  split=$(/usr/bin/python3 "$ROOT/bench/socket_trace.py" --last 9000 "$TMP"/st.* 2>/dev/null |
          /usr/bin/python3 -c '
import re, statistics, sys
rows = [dict((k, float(v)) for k, v in re.findall(r"([a-z-]+) ([0-9.]+)", l)) for l in sys.stdin]
keys = ("send", "to-read", "read", "turnaround")
print(" ".join("%.3f" % statistics.mean(r[k] for r in rows) for k in keys))')
  echo "$name $fig $split" | tee -a "$results"
}
tccl_p2p() { SOCKET_TRACE=$TMP/st LD_PRELOAD=$ST timeout 120 "$TCCL" p2pbench --mode latency --sizes 8 --reps 1 --iters 10000 |
             awk '$2 == "latency" {print $6}'; }
mpi_p2p() { "${MPIRUN[@]}" -x SOCKET_TRACE="$TMP/st" "$MPI_P2P" --mode latency --sizes 8 --reps 1 --iters 10000 2>/dev/null |
            awk '$2 == "latency" {print $6}'; }
raw() { SOCKET_TRACE=$TMP/st LD_PRELOAD=$ST timeout 120 "$OUT/raw_pingpong" "$1" --iters 10000 | awk '{print $(NF-1)}'; }
tccl_ar() { SOCKET_TRACE=$TMP/st LD_PRELOAD=$ST timeout 120 "$TCCL" bench --world 2 --sizes 8 --algo naive --iters 10000 --warmup 1000 --json |
            /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["time_us"])'; }
mpi_ar() { "${MPIRUN[@]}" -x SOCKET_TRACE="$TMP/st" "$MPI_AR" --iters 10000 --warmup 1000 --csv 8 2>/dev/null |
           awk -F, '$1 == "csv" {print $5}'; }
echo "# $MODE, $(date -u '+%Y-%m-%d %H:%M UTC'); columns: contender, its own figure (us), send, to-read, read, turnaround (us, socket_trace.py, mean of the two directions)"
for r in $(seq 1 "$REPS"); do
  if [ "$MODE" = pingpong ]; then
    run tccl tccl_p2p
    run openmpi mpi_p2p
    run raw raw pingpong
  else
    run tccl tccl_ar
    run openmpi mpi_ar
    run raw raw exchange
  fi
done
echo "# medians over $REPS runs"
/usr/bin/python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) for x in f[1:]])
print("| contender | figure | send | to-read | read | turnaround |")
print("|---|---:|---:|---:|---:|---:|")
for name, rs in rows.items():
    med = [statistics.median(c) for c in zip(*rs)]
    print(f"| {name} | " + " | ".join(f"{m:.2f}" for m in med) + " |")
EOF
