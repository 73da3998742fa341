#!/usr/bin/python3
"""One rank of a float32 sum all-reduce benchmark through Python: torch.distributed with the
tccl or gloo backend, or `import tccl` on numpy. Run N of it under `tccl launch`:

    tccl launch --nproc-per-node N --no-tag-output -- \\
        /usr/bin/python3 bench/py_allreduce.py IMPL SIZE ITERS WARMUP

IMPL: torch-tccl | torch-gloo | tccl-numpy. SIZE in bytes (a multiple of 4). An optional fifth
argument, BUSY_US (default 0), spins that many microseconds of Python before every call, warm-up
included: a stand-in for a per-call cost (docs/PERFORMANCE.md, "Through torch: the lazy grace
timer and the lazy future", used it to put torch's per-call cost on `import tccl`).

The method of bench/compare_all.py's other contenders: a checked all-reduce of data that
depends on rank and index, a warm-up, a barrier, a timed loop, and the slowest rank's average
per op (a MAX all-reduce of every rank's). torch's all_reduce works in place, so every
contender here does: the timed loop reduces zeros (a sum that stays exact), checked after it.
Rank 0 prints one line: csv,IMPL,world,size,time_us,algbw_gbps,busbw_gbps,wrong
"""
import os
import sys
import time


def main():
    impl, size, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    busy = float(sys.argv[5]) * 1e-6 if len(sys.argv) > 5 else 0.0
    count = max(1, size // 4)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if impl.startswith("torch-"):
        import torch
        import torch.distributed as dist
        if impl == "torch-tccl":
            import tccl.torch_backend  # noqa: F401  (registers "tccl")
        dist.init_process_group(impl[len("torch-"):])
        allreduce, barrier, MAX = dist.all_reduce, dist.barrier, dist.ReduceOp.MAX
        f32 = lambda n: torch.arange(n, dtype=torch.float32)  # noqa: E731
        f64 = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    elif impl == "tccl-numpy":
        import numpy as np
        import tccl
        tccl.init_process_group()
        allreduce, barrier, MAX = tccl.all_reduce, tccl.barrier, tccl.ReduceOp.MAX
        f32 = lambda n: np.arange(n, dtype=np.float32)  # noqa: E731
        f64 = lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    else:
        sys.exit(f"py_allreduce.py: unknown implementation {impl!r}")

    def max_of(x):
        t = f64(x)
        allreduce(t, op=MAX)
        return float(t[0])

    def count_wrong(t, expected):
        return int((t != expected).sum())

    idx = f32(count)
    check = (idx % 7) + rank
    zeros = idx * 0

    # Exact in float32: every element is a small integer sum.
    expected = (idx % 7) * world + world * (world - 1) / 2
    allreduce(check)
    wrong = count_wrong(check, expected)
    if busy > 0:
        inner = allreduce

        def allreduce(t, **kw):
            until = time.perf_counter() + busy
            while time.perf_counter() < until:
                pass
            inner(t, **kw)

    for _ in range(warmup):
        allreduce(zeros)
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        allreduce(zeros)
    per_op = (time.perf_counter() - t0) / iters
    wrong += count_wrong(zeros, 0)
    slowest = max_of(per_op)
    wrong = int(max_of(float(wrong)))
    if rank == 0:
        algbw = count * 4 / slowest / 1e9
        busbw = algbw * 2 * (world - 1) / world
        print(f"csv,{impl},{world},{count * 4},{slowest * 1e6:.3f},{algbw:.6f},{busbw:.6f},{wrong}")


if __name__ == "__main__":
    main()
