#!/usr/bin/env bash
# Bootstrap at scale (issue 13's method): N local processes, each building a communicator
# from the environment and running one 8-byte all-reduce (a double: rank + 1, checked
# against N(N+1)/2); the figure is the wall time from launch until every process has
# exited. tccl runs under `tccl launch` (tests/proc/env_worker.cpp, `auto`); Open MPI under
# `mpirun --mca btl self,tcp` (TCP only); torch.distributed with gloo under `tccl launch`
# (which sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT). Each run has a hard limit.
#   usage: bench/bootstrap_scale.sh BUILD_DIR "8 64 256 1024" REPS [tccl,mpi,torch] [LIMIT_S]
# MPI_MAX_N / TORCH_MAX_N (default: no limit) skip Open MPI / torch+gloo above that N
# (torch: each Python process holds about 115 MB of private memory after importing torch,
# so 256 of them do not fit in 24 GiB). mpirun runs as root here (CI's and this machine's
# user), so the script allows it.
# Prints one line per run: "impl N rep seconds ok|FAILED"; then, per N, one tccl run with
# the launcher's store statistics (requests served, peak connections).
set -uo pipefail
build=${1:?build dir}
sizes=${2:-"8 64 256"}
reps=${3:-3}
impls=${4:-tccl,mpi,torch}
limit=${5:-300}
tccl=$build/tccl
worker=$build/tests/tccl_env_worker
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi_max=${MPI_MAX_N:-1000000000}
torch_max=${TORCH_MAX_N:-1000000000}
unset TCCL_AUTH_KEY TCCL_AUTH_KEY_FILE RANK WORLD_SIZE MASTER_ADDR MASTER_PORT TCCL_STORE

cat >"$work/mpi_one.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  double v = r + 1.0, s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (s != n * (n + 1) / 2.0) printf("WRONG %d\n", r);
  MPI_Finalize();
  return 0;
}
C
cat >"$work/torch_one.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
n, r = dist.get_world_size(), dist.get_rank()
t = torch.tensor([r + 1.0], dtype=torch.float64)
dist.all_reduce(t)
if t.item() != n * (n + 1) / 2: print("WRONG", r)
dist.destroy_process_group()
PY
if [[ $impls == *mpi* ]]; then mpicc -O2 -o "$work/mpi_one" "$work/mpi_one.c" || impls=${impls/mpi/}; fi

run() {  # impl n rep
  local impl=$1 n=$2 rep=$3 out=$work/out start end rc
  start=$(date +%s.%N)
  case $impl in
    tccl) timeout -k 5 "$limit" "$tccl" launch --nproc-per-node "$n" --no-tag-output -- \
            "$worker" --count 1 >"$out" 2>&1 ;;
    mpi) timeout -k 5 "$limit" mpirun --oversubscribe --bind-to none --mca btl self,tcp \
           --mca pml ob1 -np "$n" "$work/mpi_one" >"$out" 2>&1 ;;
    torch) timeout -k 5 "$limit" "$tccl" launch --nproc-per-node "$n" --no-tag-output -- \
             /usr/bin/python3 "$work/torch_one.py" >"$out" 2>&1 ;;
  esac
  rc=$?
  end=$(date +%s.%N)
  local ok=ok
  if [[ $rc -ne 0 ]] || grep -q WRONG "$out"; then ok="FAILED(rc=$rc)"; fi
  if [[ $impl == tccl && $ok == ok && $(grep -c "allreduce sum=.* OK" "$out") -ne $n ]]; then
    ok="FAILED(missing ranks)"
  fi
  [[ $ok != ok ]] && tail -3 "$out" | sed 's/^/    /' >&2
  printf '%s %s %s %.2f %s\n' "$impl" "$n" "$rep" "$(echo "$end - $start" | bc)" "$ok"
}

for n in $sizes; do
  for ((rep = 1; rep <= reps; rep++)); do  # interleaved: every impl once per repetition
    for impl in ${impls//,/ }; do
      if [[ ($impl == mpi && $n -gt $mpi_max) || ($impl == torch && $n -gt $torch_max) ]]; then
        echo "$impl $n $rep - skipped (above ${impl^^}_MAX_N)"
        continue
      fi
      run "$impl" "$n" "$rep"
    done
  done
  # The store's own count of what it served, from the launcher (INFO for the launcher only).
  TCCL_DEBUG=INFO timeout -k 5 "$limit" "$tccl" launch --nproc-per-node "$n" --no-tag-output -- \
    env TCCL_DEBUG=WARN "$worker" --count 1 2>&1 | grep "the store served" |
    sed "s/^/stats N=$n: /"
done
