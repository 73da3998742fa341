#!/usr/bin/python3
"""What one 8-byte torch.distributed call costs a process of world 1 (no network: the path
through torch and the backend alone), and a one-element torch op for scale; or, with `numpy`,
what one 8-byte `import tccl` call on numpy costs (tccl.all_reduce, the Communicator's method,
the binding itself, and `z += 0` for scale).

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_call_cost.py [tccl|gloo|numpy] [CALLS]

Each row: 3 x (500 warm-up + CALLS timed calls, default 20,000); prints the median of the 3
in microseconds per call. Sets RANK=0, WORLD_SIZE=1 and MASTER_ADDR/MASTER_PORT unless given
(MASTER_PORT defaults to 29511; give another to run two at once).
"""
import os
import sys
import time

os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")


def timed_rows(label, calls, rows):
    for name, fn in rows:
        runs = []
        for _ in range(3):
            for _ in range(500):
                fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            runs.append((time.perf_counter() - t0) / calls * 1e6)
        print(f"{label:5s} {name:36s} {sorted(runs)[1]:7.2f} us")


def numpy_rows(calls):
    import numpy as np
    import tccl

    tccl.init_process_group()
    z = np.zeros(2, dtype=np.float32)
    comm = tccl.default_communicator()
    binding, total, auto = comm._c.allreduce, tccl.ReduceOp.SUM, tccl.Algorithm.AUTO
    timed_rows("numpy", calls, [
        ("tccl.all_reduce(z)", lambda: tccl.all_reduce(z)),
        ("comm.all_reduce(z)", lambda: comm.all_reduce(z)),
        ("the binding (comm._c.allreduce)", lambda: binding(z, None, total, False, None, auto,
                                                            None)),
        ("z += 0", lambda: z.__iadd__(0)),
    ])
    if z.tolist() != [0.0, 0.0]:
        sys.exit(f"torch_call_cost.py: the array changed: {z.tolist()}")


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "tccl"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    if backend == "numpy":
        return numpy_rows(calls)
    import torch
    import torch.distributed as dist

    if backend == "tccl":
        import tccl.torch_backend  # noqa: F401  (registers "tccl")
    dist.init_process_group(backend)
    pg = dist.distributed_c10d._get_default_group()
    t = torch.zeros(2)
    opts = dist.AllreduceOptions()

    timed_rows(backend, calls, [
        ("dist.all_reduce(t)", lambda: dist.all_reduce(t)),
        ("pg.allreduce([t],opts).wait()", lambda: pg.allreduce([t], opts).wait()),
        ("pg.allreduce([t],opts)", lambda: pg.allreduce([t], opts)),
        ("t.add_(0)", lambda: t.add_(0)),
    ])
    if t.tolist() != [0.0, 0.0]:
        sys.exit(f"torch_call_cost.py: the tensor changed: {t.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
