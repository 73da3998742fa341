"""The semantics lab on one rank (tests/python/test_lab.py runs it on N ranks).

Usage: lab_worker.py SCENARIO [args]. Prints one JSON line per result; exits non-zero
on any unexpected outcome.
"""

import json
import sys
import time

import numpy as np

import tccl


def emit(**kw):
    print(json.dumps(kw), flush=True)


def scalars(c):
    """Rank r holds 2r+1: sum, sum / world size, and AVG."""
    r, n = c.rank, c.size
    x = np.array([2 * r + 1], dtype=np.float32)
    c.all_reduce(x)
    s = float(x[0])
    divided = s / n
    y = np.array([2 * r + 1], dtype=np.float32)
    c.all_reduce(y, op=tccl.ReduceOp.AVG)
    emit(sum=s, divided=divided, avg=float(y[0]))


def vectors(c):
    """The same, elementwise, for every op and a few dtypes, on short vectors."""
    r, n = c.rank, c.size
    out = {}
    for dt in ("float32", "float64", "int32", "int64"):
        base = np.arange(5, dtype=dt) + (2 * r + 1)
        for op in ("SUM", "PRODUCT", "MIN", "MAX", "AVG"):
            x = base.copy()
            ptr = x.ctypes.data
            c.all_reduce(x, op=getattr(tccl.ReduceOp, op))
            assert x.ctypes.data == ptr  # in place: the same memory
            out[f"{dt}/{op}"] = x.tolist()
    emit(vectors=out)


def sweep(c, max_exp):
    """All-reduce of 4**k floats; rank 0 prints the table and emits the rows."""
    rows = []
    for k in range(0, int(max_exp) + 1):
        count = 4 ** k
        x = np.full(count, c.rank + 1, dtype=np.float32)
        c.all_reduce(x)  # warm-up, and a check
        want = c.size * (c.size + 1) / 2
        assert x[0] == want and x[-1] == want, (x[0], want)
        iters = 20 if count < 4096 else 5
        c.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            c.all_reduce(x)
        dt = (time.perf_counter() - t0) / iters
        nbytes = count * 4
        algbw = nbytes / dt / 1e9
        busbw = algbw * 2 * (c.size - 1) / c.size
        rows.append({"bytes": nbytes, "us": dt * 1e6, "algbw": algbw, "busbw": busbw,
                     "algorithm": c.last_call()["algorithm"]})
    if c.rank == 0:
        print(f"{'bytes':>10} {'time (us)':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  algorithm",
              file=sys.stderr)
        for row in rows:
            print(f"{row['bytes']:>10} {row['us']:>10.1f} {row['algbw']:>11.4f} "
                  f"{row['busbw']:>11.4f}  {row['algorithm']}", file=sys.stderr)
    emit(sweep=rows)


def skip(c, timeout_s):
    """The last rank skips the all-reduce (and idles past the timeout); the others wait
    for it and must fail with a TimeoutError, not hang."""
    timeout_s = float(timeout_s)
    if c.rank == c.size - 1:
        time.sleep(timeout_s * 3)
        emit(skipped=True)
        return
    x = np.ones(4, dtype=np.float32)
    t0 = time.monotonic()
    try:
        c.all_reduce(x, timeout=timeout_s)
    except tccl.Error as e:
        emit(error=type(e).__name__, elapsed=time.monotonic() - t0, fields=e.fields(),
             text=str(e))
        return
    emit(error=None)


def reorder(c, timeout_s, culprit):
    """Every rank runs all-reduce then broadcast but `culprit`, which runs them the other
    way round."""
    timeout_s, culprit = float(timeout_s), int(culprit)
    x = np.ones(4, dtype=np.float32)
    t0 = time.monotonic()
    try:
        if c.rank != culprit:
            c.all_reduce(x, timeout=timeout_s)
            c.broadcast(x, 0, timeout=timeout_s)
        else:
            c.broadcast(x, 0, timeout=timeout_s)
            c.all_reduce(x, timeout=timeout_s)
    except tccl.Error as e:
        emit(error=type(e).__name__, elapsed=time.monotonic() - t0, fields=e.fields(),
             text=str(e))
        return
    emit(error=None)


def collectives(c):
    """Every other collective through the Python API, with exact values."""
    r, n = c.rank, c.size
    res = {}
    # reduce_scatter: input block p holds p + 10 r; output = sum over ranks of block r.
    inp = np.concatenate([np.full(3, p + 10 * r, dtype=np.int64) for p in range(n)])
    out = np.zeros(3, dtype=np.int64)
    c.reduce_scatter(out, inp)
    res["reduce_scatter"] = out.tolist()
    lst = [np.full(3, p + 10 * r, dtype=np.int64) for p in range(n)]
    out2 = np.zeros(3, dtype=np.int64)
    c.reduce_scatter(out2, lst)
    res["reduce_scatter_list"] = out2.tolist()
    # all_gather, flat and list
    g = np.zeros(2 * n, dtype=np.float64)
    c.all_gather(g, np.array([r, r + 0.5]))
    res["all_gather"] = g.tolist()
    gl = [np.zeros(2) for _ in range(n)]
    c.all_gather(gl, np.array([r, r + 0.5]))
    res["all_gather_list"] = [a.tolist() for a in gl]
    # broadcast from the last rank
    b = np.array([r * 7, 1], dtype=np.int32)
    c.broadcast(b, src=n - 1)
    res["broadcast"] = b.tolist()
    # reduce to rank 0 (in place there)
    d = np.array([r + 1.0])
    c.reduce(d, dst=0, op=tccl.ReduceOp.MAX)
    res["reduce"] = d.tolist()
    # all_to_all_single: output block p = rank p's block r
    a_in = np.array([100 * r + p for p in range(n)], dtype=np.int32)
    a_out = np.zeros(n, dtype=np.int32)
    c.all_to_all_single(a_out, a_in)
    res["all_to_all"] = a_out.tolist()
    # gather to 1 % n, scatter from 0
    root = 1 % n
    gl2 = [np.zeros(1, dtype=np.int8) for _ in range(n)] if r == root else None
    c.gather(np.array([r], dtype=np.int8), gl2, dst=root)
    if r == root:
        res["gather"] = [int(a[0]) for a in gl2]
    s_out = np.zeros(2, dtype=np.uint8)
    c.scatter(s_out, [np.array([p, p + 1], dtype=np.uint8) for p in range(n)] if r == 0 else None,
              src=0)
    res["scatter"] = s_out.tolist()
    # send/recv around a ring, ordered so that nobody deadlocks
    if n > 1:
        nxt, prv = (r + 1) % n, (r - 1) % n
        got = np.zeros(4, dtype=np.float32)
        mine = np.full(4, r, dtype=np.float32)
        if r % 2 == 0:
            c.send(mine, nxt)
            c.recv(got, prv)
        else:
            c.recv(got, prv)
            c.send(mine, nxt)
        res["ring"] = got.tolist()
    # async: two in flight, waited in order
    w1 = c.all_reduce(np.ones(8, dtype=np.float32), async_op=True)
    x2 = np.full(8, r, dtype=np.float32)
    w2 = c.all_reduce(x2, async_op=True)
    w1.wait()
    w2.wait(timeout=30)
    res["async"] = x2.tolist()
    res["async_stats"] = w2.stats["collective"]
    res["stats"] = c.stats()["total"]
    emit(**res)


def main():
    scenario, args = sys.argv[1], sys.argv[2:]
    c = tccl.init_process_group()
    assert tccl.get_rank() == c.rank and tccl.get_world_size() == c.size
    globals()[scenario](c, *args)
    tccl.destroy_process_group()


if __name__ == "__main__":
    main()
