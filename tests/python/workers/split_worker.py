"""tccl.Communicator.split on one rank (tests/python/test_split.py runs it on N ranks):
parity halves reversed by key, the last rank left out (color None), a nested split, and
exact all-reduces on each child. Prints "OK <n checks>".

With argument "kill": the odd ranks split off, reversed (world 5, 3, 1 = child 0, 1, 2 at
world 6); world rank 3 SIGKILLs itself and the others print the error of their child's
all_reduce as one JSON line."""

import json
import os
import signal
import sys

import numpy as np

import tccl

checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(what)


def main():
    comm = tccl.Communicator.from_env()
    r, n = comm.rank, comm.size
    color = None if r == n - 1 else r % 2
    child = comm.split(color, key=-r)
    if color is None:
        check(child is None, "a rank with no color got a communicator")
    else:
        members = sorted((q for q in range(n - 1) if q % 2 == color), reverse=True)
        check(child.size == len(members), f"size {child.size}, want {len(members)}")
        check(child.rank == members.index(r), f"rank {child.rank}")
        check(child.parent_ranks == members, f"parent_ranks {child.parent_ranks}")
        check(child.world_ranks == members, f"world_ranks {child.world_ranks}")
        check(child.listen_address == comm.listen_address, "a second listener")
        x = np.array([r + 1, 10 * (r + 1)], dtype=np.int64)
        child.all_reduce(x)
        s = sum(q + 1 for q in members)
        check(x.tolist() == [s, 10 * s], f"all_reduce {x.tolist()}")
        # Nested: the first two members of the child together, the rest alone.
        grand = child.split(0 if child.rank < 2 else 1 + child.rank, key=0)
        want = members[:2] if child.rank < 2 else [r]
        check(grand.world_ranks == want, f"grandchild world_ranks {grand.world_ranks}")
        y = np.array([r], dtype=np.int64)
        grand.all_reduce(y)
        check(int(y[0]) == sum(want), f"grandchild all_reduce {y.tolist()}")
        check(comm.attached_communicators == 2, f"attached {comm.attached_communicators}")
    z = np.array([r], dtype=np.int64)
    comm.all_reduce(z)
    check(int(z[0]) == n * (n - 1) // 2, "the parent's all_reduce")
    print("OK", checks)


def kill():
    comm = tccl.Communicator.from_env(timeout=10.0)
    r = comm.rank
    child = comm.split(0 if r % 2 else None, key=-r)
    if child is None:
        print(json.dumps({"member": False}))
        return
    if r == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    x = np.ones(1 << 16, dtype=np.float32)
    try:
        for _ in range(100):
            child.all_reduce(x)
        print(json.dumps({"member": True, "error": None}))
    except tccl.Error as e:
        print(json.dumps({"member": True, "error": str(e), "culprit": e.culprit,
                          "culprit_parent": e.culprit_parent, "culprit_world": e.culprit_world,
                          "rank_world": e.rank_world}))


if __name__ == "__main__":
    kill() if sys.argv[1:] == ["kill"] else main()
