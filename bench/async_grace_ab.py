#!/usr/bin/python3
"""What the call queue's grace timer costs an asynchronous call waited on at once (torch's
blocking collectives are exactly that), measured A/B inside one job so that the machine's
drift hits both sides alike:

    PYTHONPATH=build/python tccl launch --nproc-per-node N --no-tag-output -- \\
        /usr/bin/python3 bench/async_grace_ab.py [GRACE_US] [CALLS] [REPS]

Each rank splits the default communicator twice: one child made with TCCL_ASYNC_GRACE_US =
GRACE_US (default 1000, the library's default) and one with 10 s (its grace timer then fires
once per 10 s, not about once per millisecond of calls). Three contenders, in an order rotated
per repetition (REPS, default 6): `all_reduce(x, async_op=True).wait()` on either child, and
the blocking `all_reduce(x)` on the first (no queue, no timer). Each: 500 warm-up calls, a
barrier, CALLS timed calls (default 20,000) of 2 float32 elements. Rank 0 prints the median and
every repetition's microseconds per call. The sum of zeros is checked after each contender
(every element must stay 0), and one call of rank-dependent data before them.
docs/PERFORMANCE.md ("2026-12-05") has its figures.
"""
import os
import statistics
import sys
import time

import numpy as np
import tccl


def main():
    grace = sys.argv[1] if len(sys.argv) > 1 else "1000"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    tccl.init_process_group()
    parent = tccl.default_communicator()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # The grace is read when a communicator is made: one child each.
    os.environ["TCCL_ASYNC_GRACE_US"] = grace
    short = parent.split(0, rank)
    os.environ["TCCL_ASYNC_GRACE_US"] = "10000000"
    long_ = parent.split(0, rank)
    del os.environ["TCCL_ASYNC_GRACE_US"]

    x = np.array([rank + 1, 2 * rank], dtype=np.float32)
    short.all_reduce(x)
    want = [world * (world + 1) / 2, world * (world - 1)]
    if list(x) != want:
        sys.exit(f"rank {rank}: got {list(x)}, want {want}")
    x[:] = 0

    names = [f"async+wait, grace {grace} us", "async+wait, grace 10 s", "blocking"]
    calls_of = {
        names[0]: lambda: short.all_reduce(x, async_op=True).wait(),
        names[1]: lambda: long_.all_reduce(x, async_op=True).wait(),
        names[2]: lambda: short.all_reduce(x),
    }
    res = {n: [] for n in names}
    for rep in range(reps):
        for name in names[rep % 3:] + names[:rep % 3]:
            f = calls_of[name]
            for _ in range(500):
                f()
            parent.barrier()
            t = time.perf_counter()
            for _ in range(calls):
                f()
            res[name].append((time.perf_counter() - t) / calls * 1e6)
            if x.any():
                sys.exit(f"rank {rank}: {name}: a sum of zeros gave {list(x)}")
    if rank == 0:
        print(f"world {world}, {calls} calls x {reps} repetitions, us per call")
        for name in names:
            v = res[name]
            print(f"{name:>28}: median {statistics.median(v):.2f};  " + " ".join(f"{a:.2f}" for a in v))


if __name__ == "__main__":
    main()
