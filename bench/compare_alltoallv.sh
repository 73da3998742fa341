#!/usr/bin/env bash
# compare_alltoallv.sh: tccl alltoallv against Open MPI's MPI_Alltoallv over TCP on
# loopback, skewed counts (rank 0 sends SKEW x what every other rank sends), float32.
# For each repetition, world and size, runs back to back (interleaved): tccl bench
# --op alltoallv --skew SKEW, then mpi_alltoallv; prints the medians over the
# repetitions and the ratio tccl / MPI as markdown.
#
# Settings (environment): WORLDS="4 8" SIZES="64K 8M" REPS=5 SKEW=8 ITERS=20 WARMUP=5
#   TCCL=build/tccl BUILD_DIR=build-bench/alltoallv MPICC=mpicc MPIRUN=mpirun
#   TIMEOUT=300 (seconds, every process the script runs)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORLDS=${WORLDS:-"4 8"}
SIZES=${SIZES:-"64K 8M"}
REPS=${REPS:-5}
SKEW=${SKEW:-8}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
TIMEOUT=${TIMEOUT:-300}
TCCL=${TCCL:-build/tccl}
BUILD_DIR=${BUILD_DIR:-build-bench/alltoallv}
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
mkdir -p "$BUILD_DIR"
"$MPICC" -O2 -o "$BUILD_DIR/mpi_alltoallv" bench/mpi_alltoallv.c
RAW=$(mktemp)
for rep in $(seq "$REPS"); do
  for w in $WORLDS; do
    for s in $SIZES; do
      t=$(timeout "$TIMEOUT" "$TCCL" bench --world "$w" --op alltoallv --skew "$SKEW" \
            --sizes "$s" --iters "$ITERS" --warmup "$WARMUP" --csv | grep -v '^#' | tail -1 |
          awk -F, '{print $7}')
      m=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$TIMEOUT" "$MPIRUN" --oversubscribe --mca pml ob1 --mca btl tcp,self \
            --mca btl_tcp_if_include lo -np "$w" "$BUILD_DIR/mpi_alltoallv" --skew "$SKEW" \
            --iters "$ITERS" --warmup "$WARMUP" "$s" | grep '^csv' | awk -F, '{print $5}')
      echo "$rep,$w,$s,$t,$m" >> "$RAW"
    done
  done
done
/usr/bin/python3 - "$RAW" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    rep, w, s, t, m = line.strip().split(",")
    rows.setdefault((int(w), s), []).append((float(t), float(m)))
print("| world | size | tccl alltoallv (us, median) | MPI_Alltoallv (us, median) | tccl / MPI | reps |")
print("|---|---|---|---|---|---|")
for (w, s), v in sorted(rows.items()):
    t = statistics.median(x[0] for x in v)
    m = statistics.median(x[1] for x in v)
    print(f"| {w} | {s} | {t:.1f} | {m:.1f} | {t / m:.2f} | {len(v)} |")
PY
rm -f "$RAW"
