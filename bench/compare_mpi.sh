#!/usr/bin/env bash
# compare_mpi.sh: tccl all-reduce against Open MPI's MPI_Allreduce over TCP on
# loopback, on one machine, float32 sum. Re-runnable; see bench/README.md.
#
# Usage: bench/compare_mpi.sh [compare|segments|spin|rss|all]   (default: compare)
#   compare   for each repetition, world and size, runs back to back (alternating):
#             tccl ring, tccl auto, Open MPI (pml ob1, btl tcp,self, lo only);
#             prints the medians over the repetitions and the ratios as markdown.
#   segments  tccl ring at SEG_SIZE (64M) for each --segment-bytes in SEGMENTS, at
#             each world in SEG_WORLDS, REPS times (alternating), medians.
#   spin      tccl ring at 8 B with TCCL_SPIN_US unset (library default) and =0
#             (and any values in SPIN_VALUES), worlds in WORLDS, REPS times, medians.
#   rss       peak RSS per rank of tccl ring at RSS_SIZE (64M) for worlds RSS_WORLDS.
#   all       all of the above.
#
# Settings (environment):
#   WORLDS="2 4"   SIZES="8 64M"   REPS=5
#   SMALL_ITERS=1000 SMALL_WARMUP=100   (sizes below 1 MiB)
#   LARGE_ITERS=20   LARGE_WARMUP=5     (sizes of 1 MiB and more)
#   TIMEOUT=300 (seconds, every process the script runs)
#   BUILD_DIR=build-bench/compare (tccl Release build; the MPI program goes there too)
#   TCCL=path/to/tccl (skip the tccl build)   MPICC=mpicc   MPIRUN=mpirun
#   MPI_ARGS (extra mpirun arguments, e.g. "--bind-to none")
#   SEGMENTS="65536 262144 1048576 4194304" SEG_WORLDS="2 4" SEG_SIZE=64M
#   SPIN_VALUES="" (extra TCCL_SPIN_US values to try besides default and 0)
#   RSS_WORLDS="2 4 8" RSS_SIZE=64M
#   QUIET_IDLE=80 QUIET_WAIT=60: before each run, wait up to QUIET_WAIT seconds for
#     the CPUs to be at least QUIET_IDLE % idle over half a second (other jobs on a
#     small machine skew the figures badly); QUIET_WAIT=0 disables; the idle % seen
#     is kept in the raw CSV
#   RAW=file (keep the raw per-run CSV there; default: a temporary file)
#   PYTHON=/usr/bin/python3 (for the summary)
set -euo pipefail

MODE=${1:-compare}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

WORLDS=${WORLDS:-"2 4"}
SIZES=${SIZES:-"8 64M"}
REPS=${REPS:-5}
SMALL_ITERS=${SMALL_ITERS:-1000}
SMALL_WARMUP=${SMALL_WARMUP:-100}
LARGE_ITERS=${LARGE_ITERS:-20}
LARGE_WARMUP=${LARGE_WARMUP:-5}
TIMEOUT=${TIMEOUT:-300}
BUILD_DIR=${BUILD_DIR:-build-bench/compare}
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
MPI_ARGS=${MPI_ARGS:-}
SEGMENTS=${SEGMENTS:-"65536 262144 1048576 4194304"}
SEG_WORLDS=${SEG_WORLDS:-"2 4"}
SEG_SIZE=${SEG_SIZE:-64M}
SPIN_VALUES=${SPIN_VALUES:-}
RSS_WORLDS=${RSS_WORLDS:-"2 4 8"}
RSS_SIZE=${RSS_SIZE:-64M}
PYTHON=${PYTHON:-/usr/bin/python3}
if [[ ! -x $PYTHON ]]; then PYTHON=python3; fi

case $MODE in compare | segments | spin | rss | all) ;; *)
  echo "usage: $0 [compare|segments|spin|rss|all]" >&2
  exit 2
  ;;
esac

QUIET_IDLE=${QUIET_IDLE:-80}
QUIET_WAIT=${QUIET_WAIT:-60}

log() { echo "[compare_mpi] $*" >&2; }

# idle_pct, wait_quiet, run_limited, bytes_of, build_tccl, machine_info
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

# ---- build ------------------------------------------------------------------
build_tccl
MPIBIN=$BUILD_DIR/mpi_allreduce
log "building $MPIBIN with $MPICC"
run_limited "$MPICC" -O2 -Wall -Wextra -o "$MPIBIN" bench/mpi_allreduce.c

RAW=${RAW:-$(mktemp /tmp/compare_mpi.XXXXXX.csv)}
echo "impl,world,size,param,rep,algo,time_us,busbw_gbps,wrong,rss_mib,idle_pct" >"$RAW"
log "raw results: $RAW"

iters_for() { if (($(bytes_of "$1") < 1048576)); then echo "$SMALL_ITERS $SMALL_WARMUP"; else echo "$LARGE_ITERS $LARGE_WARMUP"; fi; }

# tccl bench --json -> "algo,time_us,busbw,wrong,rss" (one size per run)
parse_tccl() {
  "$PYTHON" -c '
import json, sys
txt = sys.stdin.read()
d = json.loads(txt[txt.index("{"):])
r = d["results"][0]
print("%s,%.3f,%.6f,%d,%.1f" % (r["ran"], r["time_us"], r["busbw_gbps"], r["wrong"], d["peak_rss_mib_per_rank"]))
'
}

# run_tccl IMPL WORLD SIZE PARAM REP [extra bench args...]  (env passed through)
run_tccl() {
  local impl=$1 world=$2 size=$3 param=$4 rep=$5
  shift 5
  local it wu out
  read -r it wu <<<"$(iters_for "$size")"
  wait_quiet
  if ! out=$(run_limited "$TCCL" bench --world "$world" --sizes "$size" --dtype float32 --iters "$it" \
    --warmup "$wu" --json "$@" 2>&1); then
    log "FAILED: tccl bench --world $world --sizes $size $* : $out"
    MISSING=$((MISSING + 1))
    return 0
  fi
  echo "$impl,$world,$(bytes_of "$size"),$param,$rep,$(echo "$out" | parse_tccl),$IDLE" >>"$RAW"
}

run_mpi() {
  local world=$1 size=$2 rep=$3
  local it wu out
  read -r it wu <<<"$(iters_for "$size")"
  wait_quiet
  # shellcheck disable=SC2086
  # --bind-to none: mpirun would pin each rank to a core (to a socket above 2 ranks);
  # tccl's and Gloo's ranks are not pinned, so neither are MPI's: the same placement for
  # all, the kernel's.
  if ! out=$(run_limited "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$world" \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo $MPI_ARGS "$MPIBIN" --iters "$it" --warmup "$wu" --csv \
    "$size" 2>&1); then
    log "FAILED: mpirun -np $world mpi_allreduce $size : $out"
    MISSING=$((MISSING + 1))
    return 0
  fi
  local row rss
  row=$(echo "$out" | grep '^csv,' | head -1)
  rss=$(echo "$out" | grep '^rss,' | head -1 | cut -d, -f3)
  # csv,world,size,count,time_us,algbw,busbw,wrong
  IFS=, read -r _ _ _ _ t _ bw wr <<<"$row"
  echo "mpi,$world,$(bytes_of "$size"),-,$rep,ompi-tcp,$t,$bw,$wr,$rss,$IDLE" >>"$RAW"
}

# ---- modes ------------------------------------------------------------------
do_compare() {
  log "compare: worlds [$WORLDS] sizes [$SIZES] x $REPS repetitions"
  for rep in $(seq 1 "$REPS"); do
    for world in $WORLDS; do
      for size in $SIZES; do
        log "rep $rep/$REPS world $world size $size"
        run_tccl tccl-ring "$world" "$size" - "$rep" --algo ring
        run_tccl tccl-auto "$world" "$size" - "$rep" --algo auto
        run_mpi "$world" "$size" "$rep"
      done
    done
  done
}

do_segments() {
  log "segments: [$SEGMENTS] at $SEG_SIZE, worlds [$SEG_WORLDS] x $REPS"
  for rep in $(seq 1 "$REPS"); do
    for world in $SEG_WORLDS; do
      for seg in $SEGMENTS; do
        run_tccl seg "$world" "$SEG_SIZE" "$seg" "$rep" --algo ring --segment-bytes "$seg"
      done
    done
  done
}

do_spin() {
  log "spin: TCCL_SPIN_US default vs 0 [$SPIN_VALUES] at 8 B, worlds [$WORLDS] x $REPS"
  for rep in $(seq 1 "$REPS"); do
    for world in $WORLDS; do
      (unset TCCL_SPIN_US; run_tccl spin "$world" 8 default "$rep" --algo ring)
      for v in 0 $SPIN_VALUES; do
        TCCL_SPIN_US=$v run_tccl spin "$world" 8 "$v" "$rep" --algo ring
      done
    done
  done
}

do_rss() {
  log "rss: tccl ring at $RSS_SIZE, worlds [$RSS_WORLDS]"
  for world in $RSS_WORLDS; do
    run_tccl rss "$world" "$RSS_SIZE" - 1 --algo ring
  done
}

MISSING=0  # runs that failed or gave no result: the script then exits 1
START=$(date +%s)
INFO=$(machine_info)
case $MODE in
  compare) do_compare ;;
  segments) do_segments ;;
  spin) do_spin ;;
  rss) do_rss ;;
  all) do_compare; do_segments; do_spin; do_rss ;;
esac
END=$(date +%s)

# ---- summary ----------------------------------------------------------------
echo "## tccl vs Open MPI (TCP over lo), float32 sum all-reduce"
echo
echo "$INFO"
echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg); wall time $((END - START)) s"
echo "- CPU idle % just before each run (min/median): $("$PYTHON" -c '
import csv, statistics, sys
v = [int(r["idle_pct"]) for r in csv.DictReader(open(sys.argv[1])) if r.get("idle_pct")]
print("%d/%d over %d runs" % (min(v), statistics.median(v), len(v)) if v else "-")' "$RAW")"
echo "- repetitions: $REPS; iterations: $SMALL_ITERS timed + $SMALL_WARMUP warm-up below 1 MiB," \
  "$LARGE_ITERS + $LARGE_WARMUP from 1 MiB"
echo "- Open MPI: mpirun --allow-run-as-root --oversubscribe --bind-to none -np N --mca pml ob1 --mca btl tcp,self" \
  "--mca btl_tcp_if_include lo $MPI_ARGS"
echo
"$PYTHON" - "$RAW" <<'EOF'
import csv, statistics, sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
groups = defaultdict(list)
for r in rows:
    groups[(r["impl"], int(r["world"]), int(r["size"]), r["param"])].append(r)

def med(rs, key):
    return statistics.median(float(r[key]) for r in rs)

def spread(rs, key):
    v = sorted(float(r[key]) for r in rs)
    f = "%.1f" if key == "time_us" else "%.4f"
    return (f + "-" + f) % (v[0], v[-1])

def fmt_size(b):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d %s" % (b // m, unit)
    return "%d B" % b

def wrong(rs):
    return int(max(float(r["wrong"]) for r in rs))

impls = [k for k in groups]
if any(k[0] in ("tccl-ring", "tccl-auto", "mpi") for k in impls):
    print("### Medians (min-max over repetitions)")
    print()
    print("| world | size | impl | algo | n | time (us) | busbw (GB/s) | peak RSS/rank (MiB) | #wrong |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
    keys = sorted({(k[1], k[2]) for k in impls if k[0] in ("tccl-ring", "tccl-auto", "mpi")})
    for w, s in keys:
        for impl in ("tccl-ring", "tccl-auto", "mpi"):
            rs = groups.get((impl, w, s, "-"))
            if not rs:
                continue
            algos = "/".join(sorted({r["algo"] for r in rs}))
            print("| %d | %s | %s | %s | %d | %.2f (%s) | %.3f (%s) | %.1f | %d |" % (
                w, fmt_size(s), impl, algos, len(rs), med(rs, "time_us"), spread(rs, "time_us"),
                med(rs, "busbw_gbps"), spread(rs, "busbw_gbps"), med(rs, "rss_mib"), wrong(rs)))
    print()
    print("### Ratios (of medians)")
    print()
    print("| world | size | tccl ring / MPI time | tccl auto / MPI time | tccl ring / MPI busbw | tccl auto / MPI busbw |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w, s in keys:
        m = groups.get(("mpi", w, s, "-"))
        r = groups.get(("tccl-ring", w, s, "-"))
        a = groups.get(("tccl-auto", w, s, "-"))
        if not m:
            continue
        def ratio(g, key, inv=False):
            if not g:
                return "-"
            x, y = med(g, key), med(m, key)
            return "%.2f" % (x / y) if y else "-"
        print("| %d | %s | %s | %s | %s | %s |" % (w, fmt_size(s), ratio(r, "time_us"), ratio(a, "time_us"),
                                                  ratio(r, "busbw_gbps"), ratio(a, "busbw_gbps")))
    print()
    print("Targets: (a) 64 MiB ring busbw >= MPI busbw at worlds 2 and 4 (ratio >= 1);"
          " (b) 8 B at world 2: tccl time <= 2 x MPI time (ratio <= 2).")
    for w, s in keys:
        m = groups.get(("mpi", w, s, "-"))
        r = groups.get(("tccl-ring", w, s, "-"))
        a = groups.get(("tccl-auto", w, s, "-"))
        if not (m and r):
            continue
        if s == 64 << 20:
            ok = med(r, "busbw_gbps") >= med(m, "busbw_gbps")
            print("- (a) world %d, 64 MiB: ring busbw %.3f vs MPI %.3f GB/s: %s" % (
                w, med(r, "busbw_gbps"), med(m, "busbw_gbps"), "MET" if ok else "NOT MET"))
        if s == 8 and w == 2:
            for name, g in (("ring", r), ("auto", a)):
                if g:
                    ok = med(g, "time_us") <= 2 * med(m, "time_us")
                    print("- (b) world 2, 8 B: %s %.2f us vs MPI %.2f us (ratio %.2f): %s" % (
                        name, med(g, "time_us"), med(m, "time_us"), med(g, "time_us") / med(m, "time_us"),
                        "MET" if ok else "NOT MET"))
    print()

def table(impl, title, pname):
    ks = sorted((k for k in groups if k[0] == impl),
                key=lambda k: (k[1], k[2], float(k[3]) if k[3].replace(".", "").isdigit() else -1))
    if not ks:
        return
    print("### " + title)
    print()
    print("| world | size | %s | n | time (us) | busbw (GB/s) | peak RSS/rank (MiB) | #wrong |" % pname)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in ks:
        rs = groups[k]
        print("| %d | %s | %s | %d | %.2f (%s) | %.3f (%s) | %.1f | %d |" % (
            k[1], fmt_size(k[2]), k[3], len(rs), med(rs, "time_us"), spread(rs, "time_us"),
            med(rs, "busbw_gbps"), spread(rs, "busbw_gbps"), med(rs, "rss_mib"), wrong(rs)))
    print()

table("seg", "Segment-size sweep, tccl ring (medians, min-max)", "segment (B)")
table("spin", "TCCL_SPIN_US, tccl ring at 8 B (medians, min-max)", "TCCL_SPIN_US")
table("rss", "Peak RSS per rank, tccl ring", "-")
EOF

# Any wrong element or any missing run fails the whole comparison: a table with a hole or
# a wrong result in it is no comparison.
WRONG=$("$PYTHON" -c '
import csv, sys
print(sum(1 for r in csv.DictReader(open(sys.argv[1])) if r["wrong"] not in ("0", "0.0")))' "$RAW")
if [ "$MISSING" -gt 0 ] || [ "$WRONG" -gt 0 ]; then
  echo "compare_mpi.sh: FAILED: $MISSING missing runs, $WRONG runs with #wrong > 0 (raw: $RAW)" >&2
  exit 1
fi
