#!/bin/bash
# bench/py_vs_cxx.sh: the 8-byte and 64 MiB all-reduce through torch (tccl, gloo) and `import
# tccl` beside the C++ call (`tccl bench`), interleaved, 3 repetitions; one line per run:
#   label world size time_us busbw_gbps wrong [algorithm]
# NEW: a build directory (default build); OLD: another one to compare with (optional: its
# torch tccl and import tccl rows run when its python/tccl holds the modules).
cd "$(dirname "$0")/.."
NEW=$(realpath "${NEW:-build}"); OLD=${OLD:-/nonexistent}
one() {  # label build impl world size iters warmup
  local label=$1 b=$2 impl=$3 w=$4 s=$5 it=$6 wu=$7
  if [ "$impl" = cxx ]; then
    r=$(timeout 120 $b/tccl bench --world $w --sizes $s --algo auto --iters $it --warmup $wu --json 2>/dev/null |
      /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin)['results'][0]; print(r['time_us'], r['busbw_gbps'], r['wrong'], r['ran'])")
  else
    r=$(PYTHONPATH=$b/python timeout 300 $NEW/tccl launch --nproc-per-node $w --no-tag-output -- \
      /usr/bin/python3 bench/py_allreduce.py $impl $s $it $wu 2>&1 | grep '^csv' | cut -d, -f5,7,8 | tr , ' ')
  fi
  echo "$label $w $s $r"
}
SIZES=${SIZES:-8 67108864}  # e.g. SIZES=8: the 8-byte rows only
for rep in 1 2 3; do
  for w in 2 4 8; do
    for s in $SIZES; do
      if [ $s = 8 ]; then it=3000; wu=300; else it=20; wu=5; fi
      one cxx $NEW cxx $w $s $it $wu
      one torch-tccl-new $NEW torch-tccl $w $s $it $wu
      if ls $OLD/python/tccl/_tccl_torch*.so >/dev/null 2>&1; then one torch-tccl-old $OLD torch-tccl $w $s $it $wu; fi
      if [ $s = 8 ]; then
        one numpy-new $NEW tccl-numpy $w $s $it $wu
        if ls $OLD/python/tccl/_tccl.*.so >/dev/null 2>&1; then one numpy-old $OLD tccl-numpy $w $s $it $wu; fi
      fi
      one torch-gloo $NEW torch-gloo $w $s $it $wu
    done
  done
done
