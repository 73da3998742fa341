"""The uneven collectives on one rank (tests/python/test_uneven.py runs it on N ranks).

Usage: uneven_worker.py numpy|torch|mismatch. numpy: tccl's own calls (all_to_all_v,
all_gather_v, reduce_scatter_v, gather_v, scatter_v, all_to_all_single with splits) over
numpy arrays, blocking and async, with exact data depending on rank and index and the
payload bytes of the last call. torch: torch.distributed with backend "tccl":
all_to_all_single with split sizes, all_to_all with tensors of different sizes,
all_gather_coalesced. mismatch: rank 1 passes splits rank 0 disagrees with; prints the
error. Exits non-zero on the first wrong value; prints "OK <checks>" at the end."""

import sys

import numpy as np

import tccl

checks = 0


def same(got, want, what):
    global checks
    checks += 1
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want.tolist()}")


def val(r, p, j):
    return r * 1000000 + p * 1000 + j


def counts_of(n, pattern):
    """m[i][j]: elements rank i sends to rank j."""
    if pattern == "zero":
        return [[0] * n for _ in range(n)]
    if pattern == "skew":  # rank 0 sends 8x the others
        return [[40 if i == 0 else 5] * n for i in range(n)]
    return [[(i * 7 + j * 3) % 11 if (i + j) % 3 else 0 for j in range(n)] for i in range(n)]


def packed(c):
    return [int(x) for x in np.concatenate([[0], np.cumsum(c)[:-1]])] if c else []


def numpy_calls():
    c = tccl.Communicator.from_env()
    r, n = c.rank, c.size
    for k, pattern in enumerate(("zero", "skew", "mixed")):
        m = counts_of(n, pattern)
        asy = k % 2 == 1
        sc = m[r]
        rc = [m[p][r] for p in range(n)]
        inp = np.array([val(r, p, j) for p in range(n) for j in range(sc[p])], dtype=np.int64)
        out = np.full(sum(rc), -7, dtype=np.int64)
        w = c.all_to_all_v(out, inp, sc, rc, async_op=asy)
        if w is not None:
            w.wait()
        want = [val(p, r, j) for p in range(n) for j in range(rc[p])]
        same(out, np.array(want, dtype=np.int64), f"all_to_all_v {pattern}")
        if not asy:
            t = c.last_call()["traffic"]["total"]
            # every other rank's block, plus one 8-byte count message each way per pair
            same(t["payload_sent"], sum(sc[p] * 8 + 8 for p in range(n) if p != r),
                 "alltoallv bytes sent")
            same(t["payload_recv"], sum(rc[p] * 8 + 8 for p in range(n) if p != r),
                 "alltoallv bytes received")
        # torch's spelling of the same call
        out2 = np.full(sum(rc), -7, dtype=np.int64)
        c.all_to_all_single(out2, inp, rc, sc)
        same(out2, out, f"all_to_all_single splits {pattern}")
        # allgatherv / gatherv / scatterv / reduce_scatter_v over row n-1 as counts
        cnt = m[n - 1]
        mine = np.array([val(r, 0, j) for j in range(cnt[r])], dtype=np.int64)
        ag = np.full(sum(cnt), -7, dtype=np.int64)
        c.all_gather_v(ag, mine, cnt)
        same(ag, np.array([val(p, 0, j) for p in range(n) for j in range(cnt[p])],
                          dtype=np.int64), f"all_gather_v {pattern}")
        g = np.full(sum(cnt), -7, dtype=np.int64) if r == 0 else None
        c.gather_v(mine, g, cnt if r == 0 else (), dst=0)
        if r == 0:
            same(g, ag, f"gather_v {pattern}")
        sv = np.full(cnt[r], -7, dtype=np.int64)
        c.scatter_v(sv, ag if r == n - 1 else None, cnt if r == n - 1 else (), src=n - 1)
        same(sv, mine, f"scatter_v {pattern}")
        rs_in = np.array([val(r, p, j) for p in range(n) for j in range(cnt[p])], dtype=np.int64)
        rs = np.full(cnt[r], -7, dtype=np.int64)
        c.reduce_scatter_v(rs, rs_in, cnt)
        same(rs, np.array([sum(val(q, r, j) for q in range(n)) for j in range(cnt[r])],
                          dtype=np.int64), f"reduce_scatter_v {pattern}")
    # a buffer shorter than its counts is refused before anything moves
    try:
        c.all_to_all_v(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), [2] * n, [2] * n)
    except tccl.InvalidArgumentError as e:
        same("the counts need" in str(e), True, "short buffer refused")
    else:
        raise AssertionError("a short buffer was accepted")


def torch_calls():
    import torch
    import torch.distributed as dist

    import tccl.torch_backend  # noqa: F401

    dist.init_process_group("tccl")
    r, n = dist.get_rank(), dist.get_world_size()
    m = counts_of(n, "mixed")
    m[0][n - 1] = 9  # rank 0 sends rows to the last rank whatever the pattern
    # all_to_all_single with splits: rows of 2 elements
    sc, rc = m[r], [m[p][r] for p in range(n)]
    inp = torch.tensor([[val(r, p, j), -val(r, p, j)] for p in range(n) for j in range(sc[p])],
                       dtype=torch.int64).reshape(-1, 2)
    out = torch.full((sum(rc), 2), -7, dtype=torch.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=rc, input_split_sizes=sc)
    want = torch.tensor([[val(p, r, j), -val(p, r, j)] for p in range(n) for j in range(rc[p])],
                        dtype=torch.int64).reshape(-1, 2)
    same(out.numpy(), want.numpy(), "all_to_all_single with splits")
    # all_to_all with tensors of different sizes
    ins = [torch.tensor([val(r, p, j) for j in range(sc[p])], dtype=torch.float64)
           for p in range(n)]
    outs = [torch.full((rc[p],), -7.0, dtype=torch.float64) for p in range(n)]
    dist.all_to_all(outs, ins)
    for p in range(n):
        same(outs[p].numpy(), np.array([val(p, r, j) for j in range(rc[p])], dtype=np.float64),
             f"all_to_all from {p}")
    # all_gather_coalesced: two tensors of different shapes
    a = torch.full((3,), r + 1, dtype=torch.float32)
    b = torch.arange(4, dtype=torch.float32).reshape(2, 2) + 10 * r
    lists = [[torch.zeros(3), torch.zeros(2, 2)] for _ in range(n)]
    dist.all_gather_coalesced(lists, [a, b])
    for p in range(n):
        same(lists[p][0].numpy(), np.full(3, p + 1, dtype=np.float32), f"coalesced a from {p}")
        same(lists[p][1].numpy(), (np.arange(4, dtype=np.float32).reshape(2, 2) + 10 * p),
             f"coalesced b from {p}")
    # uneven reduce_scatter: input p has p+1 elements on every rank
    ins = [torch.tensor([val(r, p, j) for j in range(p + 1)], dtype=torch.int64) for p in range(n)]
    out = torch.full((r + 1,), -7, dtype=torch.int64)
    dist.reduce_scatter(out, ins)
    same(out.numpy(), np.array([sum(val(q, r, j) for q in range(n)) for j in range(r + 1)]),
         "uneven reduce_scatter")
    dist.destroy_process_group()


def mismatch():
    c = tccl.Communicator.from_env(timeout=20)
    r, n = c.rank, c.size
    sc = [2] * n
    rc = [2] * n
    if r == 1:
        sc[0] = 3  # rank 0 expects 2
    try:
        c.all_to_all_v(np.zeros(3 * n, dtype=np.int64), np.zeros(3 * n, dtype=np.int64), sc, rc)
        c.barrier()
    except tccl.Error as e:
        print("ERROR", type(e).__name__, e, flush=True)
        return
    raise AssertionError("disagreeing counts went unnoticed")


if __name__ == "__main__":
    {"numpy": numpy_calls, "torch": torch_calls, "mismatch": mismatch}[sys.argv[1]]()
    print("OK", checks, flush=True)
