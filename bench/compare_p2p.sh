#!/usr/bin/env bash
# compare_p2p.sh: tccl point to point (tccl p2pbench) against Open MPI over TCP
# (bench/mpi_p2p.c), OSU style: latency, latency_async, bw, bibw between 2 ranks on
# loopback. Re-runnable; see bench/README.md.
#
# Usage: bench/compare_p2p.sh
#   For each of REPS repetitions, mode and size it runs tccl and Open MPI one after
#   the other (tccl first in odd repetitions, Open MPI first in even ones), one process
#   pair per run, each under `timeout`; then prints, as markdown, the medians over the
#   repetitions and the tccl / MPI ratios. Exit 1 if any run failed, timed out, printed
#   no row, or had #wrong > 0 (the table is printed first, with what there is).
#
# Settings (environment):
#   MODES="latency latency_async bw bibw"   SIZES="8 65536 4194304 67108864"   REPS=5
#   ITERS= WARMUP= (default: the tools' own, by mode and size; both tools have the same
#     rule and the summary checks that both ran the same counts)
#   WINDOW=64   INNER_REPS=5 (the tools' --reps: the median over that many slices of
#     the iterations is each run's figure)
#   TIMEOUT=600 (seconds, every process)   TCCL_TIMEOUT_MS=60000 (tccl's per-call limit)
#   BUILD_DIR=build-bench/p2p (tccl Release build; the MPI program goes there too)
#   TCCL=path/to/tccl (skip the tccl build)   MPICC=mpicc   MPIRUN=mpirun
#   MPI_ARGS (extra mpirun arguments)
#   QUIET_IDLE=80 QUIET_WAIT=60: before each run, wait up to QUIET_WAIT seconds for the
#     CPUs to be QUIET_IDLE % idle (bench/common.sh); QUIET_WAIT=0 disables
#   RAW=file (keep the raw per-run CSV there; default: a temporary file)
#   PYTHON=/usr/bin/python3 (for the summary)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

MODES=${MODES:-"latency latency_async bw bibw"}
SIZES=${SIZES:-"8 65536 4194304 67108864"}
REPS=${REPS:-5}
ITERS=${ITERS:-}
WARMUP=${WARMUP:-}
WINDOW=${WINDOW:-64}
INNER_REPS=${INNER_REPS:-5}
TIMEOUT=${TIMEOUT:-600}
TCCL_TIMEOUT_MS=${TCCL_TIMEOUT_MS:-60000}
BUILD_DIR=${BUILD_DIR:-build-bench/p2p}
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
MPI_ARGS=${MPI_ARGS:-}
QUIET_IDLE=${QUIET_IDLE:-80}
QUIET_WAIT=${QUIET_WAIT:-60}
PYTHON=${PYTHON:-/usr/bin/python3}
if [[ ! -x $PYTHON ]]; then PYTHON=python3; fi
if (($# > 0)); then
  echo "usage: $0   (settings through the environment; see the top of the script)" >&2
  exit 2
fi

log() { echo "[compare_p2p] $*" >&2; }
# idle_pct, wait_quiet, run_limited, bytes_of, build_tccl, machine_info
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

# Open MPI on TCP only (no shared memory: btl tcp,self), loopback only, ob1 (not the
# UCX/OFI pmls); as root it needs --allow-run-as-root, as compare_mpi.sh passes.
MPI_FLAGS=(-np 2 --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo --bind-to none)
if ((EUID == 0)); then MPI_FLAGS=(--allow-run-as-root "${MPI_FLAGS[@]}"); fi

# ---- build ------------------------------------------------------------------
build_tccl
MPIBIN=$BUILD_DIR/mpi_p2p
log "building $MPIBIN with $MPICC"
run_limited "$MPICC" -O2 -Wall -Wextra -o "$MPIBIN" bench/mpi_p2p.c

RAW=${RAW:-$(mktemp /tmp/compare_p2p.XXXXXX.csv)}
echo "impl,mode,size,rep,iters,warmup,time_us,gbps,wrong,idle_pct" >"$RAW"
FAILS=$(mktemp /tmp/compare_p2p.fails.XXXXXX)
log "raw results: $RAW"

common_args() { # mode size
  local a=(--mode "$1" --sizes "$2" --window "$WINDOW" --reps "$INNER_REPS")
  if [[ -n $ITERS ]]; then a+=(--iters "$ITERS"); fi
  if [[ -n $WARMUP ]]; then a+=(--warmup "$WARMUP"); fi
  echo "${a[@]}"
}

# record IMPL MODE SIZE REP RC OUTPUT: the row of the run (same table in both tools:
# size mode iters warmup reps time(us) GB/s #wrong) into RAW, failures into FAILS.
record() {
  local impl=$1 mode=$2 size=$3 rep=$4 rc=$5 out=$6 row
  row=$(awk -v s="$size" -v m="$mode" '$1 == s && $2 == m { print; exit }' <<<"$out")
  if [[ -n $row ]]; then
    local f
    read -r -a f <<<"$row"
    echo "$impl,$mode,$size,$rep,${f[2]},${f[3]},${f[5]},${f[6]},${f[7]},$IDLE" >>"$RAW"
    if ((f[7] != 0)); then echo "$impl $mode $size rep $rep: #wrong ${f[7]}" >>"$FAILS"; fi
  fi
  if ((rc != 0)) || [[ -z $row ]]; then
    local why="exit $rc"
    if ((rc == 124 || rc == 137)); then why="timed out after ${TIMEOUT}s"; fi
    if [[ -z $row ]]; then why="$why, no row"; fi
    echo "$impl $mode $size rep $rep: $why" >>"$FAILS"
    log "FAILED: $impl $mode $size rep $rep ($why): $(tail -n 5 <<<"$out" | tr '\n' ' ')"
  fi
}

run_tccl() { # mode size rep
  local out rc=0
  wait_quiet
  # shellcheck disable=SC2046
  out=$(run_limited "$TCCL" p2pbench $(common_args "$1" "$2") --timeout-ms "$TCCL_TIMEOUT_MS" 2>&1) || rc=$?
  record tccl "$1" "$2" "$3" "$rc" "$out"
}

run_mpi() { # mode size rep
  local out rc=0
  wait_quiet
  # shellcheck disable=SC2046,SC2086
  out=$(run_limited "$MPIRUN" "${MPI_FLAGS[@]}" $MPI_ARGS "$MPIBIN" $(common_args "$1" "$2") 2>&1) || rc=$?
  record mpi "$1" "$2" "$3" "$rc" "$out"
}

START=$(date +%s)
INFO=$(machine_info)
sizes_b=()
for s in $SIZES; do sizes_b+=("$(bytes_of "$s")"); done
log "modes [$MODES] sizes [${sizes_b[*]}] x $REPS repetitions"
for rep in $(seq 1 "$REPS"); do
  for mode in $MODES; do
    for size in "${sizes_b[@]}"; do
      log "rep $rep/$REPS $mode $size"
      if ((rep % 2)); then
        run_tccl "$mode" "$size" "$rep"
        run_mpi "$mode" "$size" "$rep"
      else
        run_mpi "$mode" "$size" "$rep"
        run_tccl "$mode" "$size" "$rep"
      fi
    done
  done
done
END=$(date +%s)

# ---- summary ----------------------------------------------------------------
echo "## tccl vs Open MPI point to point (osu-style), 2 ranks, TCP over lo"
echo
echo "$INFO"
echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg); wall time $((END - START)) s"
echo "- tccl: \`tccl p2pbench --mode M --sizes S --window $WINDOW --reps $INNER_REPS${ITERS:+ --iters $ITERS}${WARMUP:+ --warmup $WARMUP}\`"
echo "- Open MPI: \`mpirun ${MPI_FLAGS[*]} $MPI_ARGS mpi_p2p (same options)\`"
echo "- repetitions: $REPS (interleaved, order alternating); figures are medians over them"
echo
set +e
"$PYTHON" - "$RAW" "$REPS" "$MODES" "${sizes_b[*]}" <<'EOF'
import csv, statistics, sys
from collections import defaultdict

raw, reps, modes, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), [int(s) for s in sys.argv[4].split()]
rows = list(csv.DictReader(open(raw)))
g = defaultdict(list)
for r in rows:
    g[(r["impl"], r["mode"], int(r["size"]))].append(r)
idle = [int(r["idle_pct"]) for r in rows if r.get("idle_pct")]
if idle:
    print("- CPU idle %% just before each run (min/median): %d/%d over %d runs" % (
        min(idle), statistics.median(idle), len(idle)))
    print()

def fmt_size(b):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d %s" % (b // m, unit)
    return "%d B" % b

def med(rs, key):
    return statistics.median(float(r[key]) for r in rs) if rs else None

problems = []
print("time: median (min-max) over the runs; latency modes: half a round trip; bw, bibw: a window's"
      " time / window (per message). GB/s (1e9 B/s) of the median time; bibw counts both directions."
      " n: runs that produced a row (of %d)." % reps)
print()
print("| mode | size | iters | tccl time (us) | Open MPI time (us) | tccl / MPI time | tccl GB/s | Open MPI GB/s | tccl / MPI GB/s | n tccl/MPI |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for mode in modes:
    for size in sizes:
        t, m = g.get(("tccl", mode, size), []), g.get(("mpi", mode, size), [])
        its = {(r["iters"], r["warmup"]) for r in t + m}
        if len(its) > 1:
            problems.append("%s %d: the tools ran different iterations/warm-up: %s" % (mode, size, sorted(its)))
        it = "/".join(sorted({r["iters"] for r in t + m})) or "-"
        tt, mt = med(t, "time_us"), med(m, "time_us")
        # GB/s of the median time (so that time and bandwidth describe the same run).
        gb = lambda v: (2 if mode == "bibw" else 1) * size / (v * 1e-6) / 1e9 if v else None
        tb, mb = gb(tt), gb(mt)
        f = lambda v, p: ("%." + str(p) + "f") % v if v is not None else "-"
        ratio = lambda a, b: "%.2f" % (a / b) if a is not None and b else "-"
        def cell(rs, v):
            if not rs:
                return "-"
            ts = sorted(float(r["time_us"]) for r in rs)
            return "%s (%s-%s)" % (f(v, 2), f(ts[0], 1), f(ts[-1], 1)) if len(ts) > 1 else f(v, 2)
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |" % (
            mode, fmt_size(size), it, cell(t, tt), cell(m, mt), ratio(tt, mt), f(tb, 3), f(mb, 3),
            ratio(tb, mb), len(t), len(m)))
        for impl, rs in (("tccl", t), ("mpi", m)):
            if len(rs) < reps:
                problems.append("%s %s %d: %d of %d runs missing" % (impl, mode, size, reps - len(rs), reps))
print()
for p in problems:
    print("- PROBLEM: " + p)
sys.exit(1 if problems else 0)
EOF
summary_rc=$?
set -e
failed=0
if [[ -s $FAILS ]]; then
  echo
  echo "Failed runs (each fails the comparison):"
  sed 's/^/- /' "$FAILS"
  failed=1
fi
rm -f "$FAILS"
if ((summary_rc != 0 || failed != 0)); then exit 1; fi
exit 0
