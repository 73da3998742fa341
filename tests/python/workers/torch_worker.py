"""torch.distributed with backend "tccl" on one rank: every supported operation, checked
against closed-form values (tests/python/test_torch_backend.py runs it on N ranks).
Exits non-zero on the first wrong value; prints "OK <n checks>" at the end."""

import sys

import torch
import torch.distributed as dist

import tccl
import tccl.torch_backend

checks = 0


def same(got, want, what):
    global checks
    checks += 1
    want = torch.as_tensor(want, dtype=got.dtype)
    if not torch.equal(got, want):
        raise AssertionError(f"rank {dist.get_rank()} {what}: got {got.tolist()}, "
                             f"want {want.tolist()}")


def main():
    dist.init_process_group("tccl")
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "tccl"
    held = [2 * q + 1 for q in range(n)]  # rank q holds 2q+1

    # all_reduce: every op, a few dtypes
    ops = {dist.ReduceOp.SUM: sum(held), dist.ReduceOp.MIN: min(held),
           dist.ReduceOp.MAX: max(held)}
    prod = 1
    for h in held:
        prod *= h
    ops[dist.ReduceOp.PRODUCT] = prod
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16):
        for op, want in ops.items():
            t = torch.full((5,), 2 * r + 1, dtype=dt)
            dist.all_reduce(t, op=op)
            same(t, [want] * 5, f"all_reduce {op} {dt}")
    t = torch.full((3,), float(2 * r + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    same(t, [sum(held) / n] * 3, "all_reduce AVG")
    t = torch.full((3,), 2 * r + 1, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    same(t, [sum(held) // n] * 3, "all_reduce AVG int64 (truncating)")

    # all_reduce_coalesced: several tensors, one flat all-reduce
    ts = [torch.full((2,), float(r)), torch.full((3, 2), float(2 * r))]
    dist.all_reduce_coalesced(ts)
    same(ts[0], [float(sum(range(n)))] * 2, "all_reduce_coalesced 0")
    same(ts[1], torch.full((3, 2), float(2 * sum(range(n)))), "all_reduce_coalesced 1")

    # reduce_scatter: input block p on rank q holds 100 q + p
    out = torch.zeros(2, dtype=torch.int64)
    inp = torch.cat([torch.full((2,), 100 * r + p, dtype=torch.int64) for p in range(n)])
    want = [sum(100 * q + r for q in range(n))] * 2
    dist.reduce_scatter_tensor(out, inp)
    same(out, want, "reduce_scatter_tensor")
    out.zero_()
    dist._reduce_scatter_base(out, inp)
    same(out, want, "_reduce_scatter_base")
    out.zero_()
    dist.reduce_scatter(out, list(inp.chunk(n)))
    same(out, want, "reduce_scatter (list)")
    outf = torch.zeros(2)
    dist.reduce_scatter_tensor(outf, inp.float(), op=dist.ReduceOp.MAX)
    same(outf, [float(100 * (n - 1) + r)] * 2, "reduce_scatter MAX")

    # all_gather
    mine = torch.tensor([r, 10 * r], dtype=torch.float32)
    want = [v for q in range(n) for v in (q, 10 * q)]
    g = torch.zeros(2 * n)
    dist.all_gather_into_tensor(g, mine)
    same(g, want, "all_gather_into_tensor")
    g.zero_()
    dist._all_gather_base(g, mine)
    same(g, want, "_all_gather_base")
    gl = [torch.zeros(2) for _ in range(n)]
    dist.all_gather(gl, mine)
    same(torch.cat(gl), want, "all_gather (list)")
    # a dtype tccl cannot reduce still moves (as bytes)
    bl = [torch.zeros(2, dtype=torch.bool) for _ in range(n)]
    dist.all_gather(bl, torch.tensor([r % 2 == 0, True]))
    same(torch.cat(bl), [v for q in range(n) for v in (q % 2 == 0, True)], "all_gather bool")
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r})
    assert objs == [{"rank": q} for q in range(n)], objs

    # broadcast, reduce, barrier
    b = torch.full((4,), float(r))
    dist.broadcast(b, src=n - 1)
    same(b, [float(n - 1)] * 4, "broadcast")
    c = torch.tensor([2 * r + 1], dtype=torch.int32)
    dist.reduce(c, dst=1 % n)
    same(c, [sum(held)] if r == 1 % n else [2 * r + 1], "reduce")
    dist.barrier()

    # all_to_all_single (equal splits), all_to_all (lists)
    a_in = torch.tensor([100 * r + p for p in range(n)], dtype=torch.int64)
    a_out = torch.zeros(n, dtype=torch.int64)
    dist.all_to_all_single(a_out, a_in)
    same(a_out, [100 * p + r for p in range(n)], "all_to_all_single")
    lo = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(lo, list(a_in.chunk(n)))
    same(torch.cat(lo), [100 * p + r for p in range(n)], "all_to_all")

    # gather / scatter
    gat = [torch.zeros(1) for _ in range(n)] if r == 0 else None
    dist.gather(torch.tensor([float(r)]), gat, dst=0)
    if r == 0:
        same(torch.cat(gat), [float(q) for q in range(n)], "gather")
    sc = torch.zeros(2)
    dist.scatter(sc, [torch.tensor([float(q), 1.0]) for q in range(n)] if r == 0 else None, src=0)
    same(sc, [float(r), 1.0], "scatter")

    # send / recv around a ring (even ranks send first)
    if n > 1:
        nxt, prv = (r + 1) % n, (r - 1) % n
        got = torch.zeros(3)
        if r % 2 == 0:
            dist.send(torch.full((3,), float(r)), nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(torch.full((3,), float(r)), nxt)
        same(got, [float(prv)] * 3, "send/recv")

    # async work and its future
    x = torch.ones(1000)
    w = dist.all_reduce(x, async_op=True)
    fut = w.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    w.wait()
    assert w.is_completed()
    same(x, [float(n)] * 1000, "async all_reduce")
    same(chained.wait(), [2.0 * n] * 1000, "future.then")
    # a future asked for only after the work ended (the backend makes it then, complete),
    # and asked for twice: the same future
    y = torch.full((5,), float(r + 1))
    w = dist.all_reduce(y, async_op=True)
    w.wait()
    late = w.get_future()
    assert late.done(), "a late future is not complete"
    same(late.value()[0], [n * (n + 1) / 2.0] * 5, "late future")
    same(late.then(lambda f: f.value()[0] + 1).wait(), [n * (n + 1) / 2.0 + 1] * 5,
         "late future.then")
    assert w.get_future().value()[0] is not None and w.get_future().done()
    # many asynchronous calls in flight, none waited on until the last, each with a future
    ys = [torch.full((3,), float(r * k)) for k in range(20)]
    ws = [dist.all_reduce(v, async_op=True) for v in ys]
    futs = [q.get_future() for q in ws[::2]]
    ws[-1].wait()
    for k, v in enumerate(ys):
        same(v, [k * n * (n - 1) / 2.0] * 3, f"in-flight all_reduce {k}")
    for k, f in zip(range(0, 20, 2), futs):
        same(f.wait()[0], [k * n * (n - 1) / 2.0] * 3, f"in-flight future {k}")
    g2 = torch.zeros(2 * n)
    w2 = dist.all_gather_into_tensor(g2, mine, async_op=True)
    w2.wait()
    same(g2, [v for q in range(n) for v in (q, 10 * q)], "async all_gather")

    # refusals are errors, not hangs
    for bad, why in [(lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND), "BAND"),
                     (lambda: dist.all_reduce(torch.ones(4, 4).t()), "non-contiguous"),
                     (lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)), "bool sum"),
                     (lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)), "int16 sum")]:
        try:
            bad()
        except tccl.InvalidArgumentError:
            pass
        else:
            raise AssertionError(f"{why} was accepted")

    # byte counters through the backend
    s = tccl.torch_backend.stats()
    assert s["payload_sent"] > 0 and s["wire_sent"] >= s["payload_sent"], s
    dist.barrier()
    dist.destroy_process_group()
    print(f"OK {checks}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
