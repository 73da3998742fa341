"""The semantics lab: what an all-reduce means, seen from Python.

Run it on 2 or 3 local ranks (build first; see docs/python.md):

    PYTHONPATH=build/python /usr/bin/python3 -m tccl.launch --nproc-per-node 2 \
        examples/semantics_lab.py

1. Rank r holds 2r+1 (ranks 0 and 1 hold 1 and 3). A sum all-reduce leaves the sum on every
   rank (4); dividing by the world size gives the mean (2); ReduceOp.AVG does both at once.
2. The same, elementwise, on short vectors, for every reduction.
3. A timing sweep over increasing sizes: small all-reduces are latency-bound (the time
   hardly grows with the size), large ones bandwidth-bound (the time grows with the size,
   bytes/s levels off). These are observations of this machine, not promises.
4. A disposable communicator where one rank skips a collective and, on another, where
   the ranks run two collectives in different orders: with a short timeout the error is
   caught and printed, with its fields, and nothing waits forever.
"""

import argparse
import sys
import time

import numpy as np

import tccl


def say(comm, *args):
    # One write per line: the ranks share the launcher's stdout.
    sys.stdout.write(" ".join([f"[rank {comm.rank}]", *map(str, args)]) + "\n")
    sys.stdout.flush()


def scalars(comm):
    r, n = comm.rank, comm.size
    x = np.array([2 * r + 1], dtype=np.float32)
    say(comm, f"holds {x[0]:g}")
    comm.all_reduce(x)  # op=SUM, in place: x itself now holds the sum
    say(comm, f"sum all-reduce: {x[0]:g}; divided by the world size ({n}): {x[0] / n:g}")
    y = np.array([2 * r + 1], dtype=np.float32)
    comm.all_reduce(y, op=tccl.ReduceOp.AVG)
    say(comm, f"AVG all-reduce: {y[0]:g}")


def vectors(comm):
    r = comm.rank
    base = np.arange(4, dtype=np.float32) + 2 * r + 1
    say(comm, f"holds {base.tolist()}")
    for op in (tccl.ReduceOp.SUM, tccl.ReduceOp.AVG, tccl.ReduceOp.MIN, tccl.ReduceOp.MAX,
               tccl.ReduceOp.PRODUCT):
        v = base.copy()
        comm.all_reduce(v, op=op)
        say(comm, f"{op.name:<8} -> {v.tolist()}")


def sweep(comm, max_exp):
    rows = []
    for k in range(max_exp + 1):
        count = 4 ** k
        x = np.ones(count, dtype=np.float32)
        comm.all_reduce(x)  # warm-up: connections, caches
        iters = max(3, min(50, (1 << 22) // (4 * count)))
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(x)
        seconds = (time.perf_counter() - t0) / iters
        rows.append((4 * count, seconds, comm.last_call()["algorithm"]))
    if comm.rank == 0:
        n = comm.size
        print(f"\n{'bytes':>10} {'time (us)':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  algorithm")
        for nbytes, seconds, algorithm in rows:
            algbw = nbytes / seconds / 1e9
            busbw = algbw * 2 * (n - 1) / n  # what each link carried (nccl-tests' convention)
            print(f"{nbytes:>10} {seconds * 1e6:>10.1f} {algbw:>11.4f} {busbw:>11.4f}  {algorithm}")
        small, large = rows[0], rows[-1]
        print(f"\n{small[0]} B took {small[1] * 1e6:.0f} us, {large[0]} B took "
              f"{large[1] * 1e6:.0f} us: {large[0] // small[0]}x the bytes for "
              f"{large[1] / small[1]:.0f}x the time\n", flush=True)


def failures(comm, timeout):
    # Disposable communicators over the same store (a name each), so that the failures
    # abort them and not the main one.
    skip = tccl.Communicator(comm.store, comm.rank, comm.size, timeout=timeout, name="lab-skip")
    x = np.ones(4, dtype=np.float32)
    if comm.rank == comm.size - 1:
        say(comm, "skips the all-reduce (and stays connected, as a rank stuck elsewhere would)")
    else:
        t0 = time.monotonic()
        try:
            skip.all_reduce(x, timeout=timeout)  # a per-call timeout beats TCCL_TIMEOUT_MS
        except tccl.Error as e:
            say(comm, f"caught {type(e).__name__} after {time.monotonic() - t0:.1f} s: {e}")
            say(comm, f"  kind={e.kind} collective={e.collective} seq={e.seq} peer={e.peer} "
                f"culprit={e.culprit} timeout_ms={e.timeout_ms}")
    comm.barrier()  # the skipping rank keeps its communicator until the others gave up
    del skip

    reorder = tccl.Communicator(comm.store, comm.rank, comm.size, timeout=timeout,
                                name="lab-reorder")
    t0 = time.monotonic()
    try:
        if comm.rank == 0:
            reorder.all_reduce(x, timeout=timeout)
            reorder.broadcast(x, src=0, timeout=timeout)
        else:
            reorder.broadcast(x, src=0, timeout=timeout)
            reorder.all_reduce(x, timeout=timeout)
    except tccl.Error as e:
        say(comm, f"caught {type(e).__name__} after {time.monotonic() - t0:.1f} s: {e}")
    del reorder
    comm.barrier()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep-max-exp", type=int, default=10,
                    help="largest all-reduce of the sweep: 4**k floats (default 10: 4 MiB)")
    ap.add_argument("--failure-timeout", type=float, default=1.0,
                    help="timeout of the disposable communicators, seconds")
    args = ap.parse_args()

    comm = tccl.init_process_group()  # torchrun's variables, set by tccl.launch
    if comm.rank == 0:
        print(f"== {comm.size} ranks\n", flush=True)
    scalars(comm)
    comm.barrier()
    vectors(comm)
    comm.barrier()
    sweep(comm, args.sweep_max_exp)
    comm.barrier()
    failures(comm, args.failure_timeout)
    stats = comm.stats()["total"]
    say(comm, f"sent {stats['payload_sent']} payload bytes ({stats['wire_sent']} on the wire)")
    tccl.destroy_process_group()


if __name__ == "__main__":
    main()
