#!/usr/bin/python3
"""One rank of a 64 MiB float32 sum all-reduce, in place against out of place, alternating
within one job (`import tccl` on numpy, the binding's allreduce, algorithm auto):

    PYTHONPATH=build/python tccl launch --nproc-per-node N --no-tag-output -- \\
        /usr/bin/python3 bench/inplace_vs_outofplace.py [SIZE_BYTES] [REPS] [CALLS]

For each of REPS repetitions (default 4; the order of the two alternates per repetition):
2 warm-up calls, a barrier, CALLS timed calls (default 8); rank 0 prints each repetition's
milliseconds per call for both. The data is zeros (the sum stays exact); the first call of
each kind is checked against the closed form of a rank-and-index pattern first.
docs/PERFORMANCE.md ("2026-12-05") uses it: compare_all.py's Python rows run in place and its
C++ rows out of place, and the two differ by more than the harness.
"""
import os
import sys
import time

import numpy as np
import tccl


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    tccl.init_process_group()
    comm = tccl.default_communicator()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    n = max(1, size // 4)
    x = np.zeros(n, np.float32)
    y = np.zeros(n, np.float32)

    def call(mode):
        comm._c.allreduce(x, None if mode == "in" else y, tccl.ReduceOp.SUM, False, None,
                          tccl.Algorithm.AUTO, None)

    # Correctness first: element i of rank r holds (i % 7) + r, so the sum over the
    # ranks is world * (i % 7) + world (world - 1) / 2, exact in float32.
    idx = np.arange(n, dtype=np.float32)
    want = world * (idx % 7) + world * (world - 1) / 2
    for mode in ("in", "out"):
        x[:] = (idx % 7) + rank
        call(mode)
        got = x if mode == "in" else y
        wrong = int((got != want).sum())
        if wrong:
            sys.exit(f"rank {rank}: {mode} of place: {wrong} wrong elements")
    x[:] = 0
    y[:] = 0

    res = {"in": [], "out": []}
    for rep in range(reps):
        for mode in (("in", "out") if rep % 2 == 0 else ("out", "in")):
            for _ in range(2):
                call(mode)
            tccl.barrier()
            t = time.perf_counter()
            for _ in range(calls):
                call(mode)
            res[mode].append((time.perf_counter() - t) / calls * 1e3)
    if rank == 0:
        for mode, label in (("in", "in place"), ("out", "out of place")):
            print(f"{label:>13}: " + " ".join(f"{v:.1f}" for v in res[mode]) + " ms per call")


if __name__ == "__main__":
    main()
