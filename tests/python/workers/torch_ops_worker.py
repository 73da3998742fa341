"""torch.distributed with backend "tccl": BAND / BOR / BXOR on every integer dtype
(all_reduce, reduce, all_reduce_coalesced, reduce_scatter), refused on floating
dtypes; and sparse all-reduce (SUM), against values computed here from every rank's
inputs. Prints "OK <n checks>" at the end; exits non-zero on the first wrong value."""

import functools
import operator
import sys

import torch
import torch.distributed as dist

import tccl
import tccl.torch_backend  # noqa: F401  (registers "tccl")

checks = 0


def same(got, want, what):
    global checks
    checks += 1
    if got.layout != want.layout or not torch.equal(got.to_dense(), want.to_dense()):
        raise AssertionError(f"rank {dist.get_rank()} {what}: got {got}, want {want}")


def pattern(q, n, dtype):
    """Rank q's tensor of n elements: bit patterns that differ by rank and index, covering
    0, all ones and the sign bit."""
    bits = torch.iinfo(dtype).bits
    vals = []
    for i in range(n):
        k = (i + 3 * q) % 6
        if k == 0:
            v = 0
        elif k == 1:
            v = -1
        elif k == 2:
            v = 1 << (bits - 1)
        else:
            v = ((i + 1) * 2654435761 ^ (q + 1) * 40503) % (1 << bits)
        if dtype != torch.uint8 and v >= 1 << (bits - 1):
            v -= 1 << bits
        if dtype == torch.uint8:
            v %= 256
        vals.append(v)
    return torch.tensor(vals, dtype=dtype)


OPS = {dist.ReduceOp.BAND: operator.and_, dist.ReduceOp.BOR: operator.or_,
       dist.ReduceOp.BXOR: operator.xor}


def bitwise(r, world):
    for dt in (torch.int8, torch.uint8, torch.int32, torch.int64):
        for op, f in OPS.items():
            for n in (0, 1, 37, 1000):
                want = functools.reduce(f, (pattern(q, n, dt) for q in range(world)))
                t = pattern(r, n, dt)
                dist.all_reduce(t, op=op)
                same(t, want, f"all_reduce {op} {dt} n={n}")
                t = pattern(r, n, dt)
                dist.reduce(t, dst=world - 1, op=op)
                if r == world - 1:
                    same(t, want, f"reduce {op} {dt} n={n}")
            # reduce_scatter: block p of rank q is pattern(q + 10 p)
            blocks = [pattern(r + 10 * p, 5, dt) for p in range(world)]
            out = torch.empty(5, dtype=dt)
            dist.reduce_scatter(out, blocks, op=op)
            want = functools.reduce(f, (pattern(q + 10 * r, 5, dt) for q in range(world)))
            same(out, want, f"reduce_scatter {op} {dt}")
    # Floating dtypes are refused, naming the op; the group stays usable.
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        try:
            dist.all_reduce(torch.ones(4, dtype=dt), op=dist.ReduceOp.BXOR)
        except tccl.InvalidArgumentError as e:
            assert "bxor" in str(e), str(e)
        else:
            raise AssertionError(f"BXOR on {dt} was accepted")
    t = torch.full((3,), 1 << r, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.BOR)
    same(t, torch.full((3,), (1 << world) - 1, dtype=torch.int64), "BOR after the refusals")


def sparse_input(q, world, dense):
    """Rank q's sparse tensor: q entries at rows q, q+1, ... (mod world + 2), so rank 0 has
    none, ranks overlap, and the values depend on rank and entry."""
    rows = [(q + k) % (world + 2) for k in range(q)]
    shape = [world + 2] + [3] * dense
    values = torch.stack([torch.full([3] * dense, float(10 * q + k)) for k in range(q)]) \
        if q else torch.zeros([0] + [3] * dense)
    return torch.sparse_coo_tensor(torch.tensor([rows], dtype=torch.int64).reshape(1, q),
                                   values, shape)


def sparse(r, world):
    for dense in (0, 1, 2):
        want = functools.reduce(operator.add,
                                (sparse_input(q, world, dense) for q in range(world)))
        t = sparse_input(r, world, dense)
        dist.all_reduce(t)
        same(t, want.coalesce(), f"sparse all_reduce dense dims {dense}")
    # Async, then a dense all-reduce behind it: issue order holds.
    t = sparse_input(r, world, 1)
    w = dist.all_reduce(t, async_op=True)
    d = torch.full((2,), float(r))
    dist.all_reduce(d)
    w.wait()
    same(d, torch.full((2,), float(sum(range(world)))), "dense after sparse")
    # Only SUM; and shapes that differ between ranks are an error on every rank.
    try:
        dist.all_reduce(sparse_input(r, world, 0), op=dist.ReduceOp.MAX)
    except tccl.InvalidArgumentError as e:
        assert "SUM" in str(e), str(e)
    else:
        raise AssertionError("sparse MAX was accepted")
    odd = torch.sparse_coo_tensor(torch.zeros(1, 1, dtype=torch.int64), torch.ones(1),
                                  [world + 2 + (1 if r == world - 1 else 0)])
    try:
        dist.all_reduce(odd)
    except tccl.InvalidArgumentError as e:
        assert f"rank {world - 1}" in str(e), str(e)
    else:
        raise AssertionError("sparse tensors of different shapes were accepted")


def main():
    dist.init_process_group("tccl")
    r, world = dist.get_rank(), dist.get_world_size()
    bitwise(r, world)
    sparse(r, world)
    dist.barrier()
    print(f"OK {checks}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
