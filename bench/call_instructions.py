#!/usr/bin/python3
"""N 8-byte all-reduces at world 1 (no network), through `import tccl` (blocking, or
asynchronous and waited on at once) or through torch, for counting instructions per call with
callgrind, which counts the same whatever else the machine does. Run it at two N and take
the difference over the difference in N, so that the interpreter's start and the import
drop out:

    for n in 10000 20000; do PYTHONPATH=build/python valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg_async_$n.out /usr/bin/python3 \\
        bench/call_instructions.py async $n; done
    # (totals: the 'summary:' line of each file; per function:
    #  callgrind_annotate --inclusive=yes /tmp/cg_async_20000.out)

MODE: blocking | async (`import tccl` on numpy), or torch: `dist.all_reduce(t)` on a torch
tensor through the tccl backend (torch's blocking call: the backend's asynchronous call and its
wait, plus torch's own Python and dispatch). Sets RANK=0, WORLD_SIZE=1 and
MASTER_ADDR/MASTER_PORT unless given (MASTER_PORT defaults to 29536). docs/PERFORMANCE.md
("2026-12-06 evening" and "2026-12-06 night") has the figures.
"""
import os
import sys

os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29536")


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode == "torch":
        import torch
        import torch.distributed as dist
        import tccl.torch_backend  # noqa: F401  (registers "tccl")

        dist.init_process_group("tccl")
        t = torch.zeros(2)
        for _ in range(n):
            dist.all_reduce(t)
        if t.any():
            sys.exit(f"call_instructions.py: a sum of zeros gave {t.tolist()}")
        dist.destroy_process_group()
        return
    import numpy as np
    import tccl

    tccl.init_process_group()
    comm = tccl.default_communicator()
    x = np.zeros(2, dtype=np.float32)
    if mode == "async":
        for _ in range(n):
            comm.all_reduce(x, async_op=True).wait()
    elif mode == "blocking":
        for _ in range(n):
            comm.all_reduce(x)
    else:
        sys.exit(f"call_instructions.py: unknown mode {mode!r}")
    if x.any():
        sys.exit(f"call_instructions.py: a sum of zeros gave {list(x)}")


if __name__ == "__main__":
    main()
