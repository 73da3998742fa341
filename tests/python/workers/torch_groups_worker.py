"""torch.distributed.new_group with backend "tccl" on one rank (tests/python/test_split.py
runs it on N ranks).

mode "overlap": overlapping groups, each rank in several, every group's all_reduce checked
exactly, and two groups that share ranks driven concurrently from two threads.
mode "count" <groups>: `groups` groups of every subset shape, one all_reduce in each, then
this process's listening sockets and threads before and after (the measurement of
docs/PERFORMANCE.md). Prints one JSON line."""

import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import tccl.torch_backend


def listening_sockets():
    """This process's TCP sockets in state LISTEN (/proc/self/net/tcp{,6} x its fds)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: TCP_LISTEN
                count += 1
    return count


def threads():
    return len(os.listdir("/proc/self/task"))


def members_of(g, n):
    """Group g's ranks: a window of 2..n ranks starting at g % n (wrapping), sorted."""
    size = 2 + g % (n - 1)
    return sorted({(g + i) % n for i in range(size)})


def overlap(r, n):
    groups = [members_of(g, n) for g in range(2 * n)]
    pgs = [dist.new_group(ranks) for ranks in groups]  # every rank calls every new_group
    for ranks, pg in zip(groups, pgs):
        if r not in ranks:
            continue
        t = torch.full((3,), r + 1, dtype=torch.int64)
        dist.all_reduce(t, group=pg)
        want = sum(q + 1 for q in ranks)
        assert t.tolist() == [want] * 3, (ranks, t.tolist())
        assert dist.get_rank(pg) == ranks.index(r)
    # Two overlapping groups at once, from two threads: each keeps its own order.
    a, b = [0, 1], [1, 2] if n > 2 else [0, 1]
    pa, pb = dist.new_group(a), dist.new_group(b)
    errors = []

    def loop(ranks, pg, k):
        try:
            for i in range(30):
                t = torch.full((100,), r * k + i, dtype=torch.float64)
                dist.all_reduce(t, group=pg)
                want = float(sum(q * k + i for q in ranks))
                assert torch.all(t == want), (ranks, i, t[0].item(), want)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(repr(e))

    ts = [threading.Thread(target=loop, args=(m, p, k))
          for m, p, k in ((a, pa, 1), (b, pb, 1000)) if r in m]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    return {"groups": len(groups) + 2}


def count(r, n, groups):
    t = torch.ones(4)
    dist.all_reduce(t)
    time.sleep(1.5)  # past the progress thread's linger
    before = {"listening": listening_sockets(), "threads": threads()}
    t0 = time.monotonic()
    pgs = [(members_of(g, n), dist.new_group(members_of(g, n))) for g in range(groups)]
    create_s = time.monotonic() - t0
    for ranks, pg in pgs:
        if r in ranks:
            x = torch.full((2,), r + 1, dtype=torch.int64)
            dist.all_reduce(x, group=pg)
            assert x.tolist() == [sum(q + 1 for q in ranks)] * 2
    busy = {"listening": listening_sockets(), "threads": threads()}
    time.sleep(1.5)
    after = {"listening": listening_sockets(), "threads": threads()}
    attached = tccl.torch_backend.attached_communicators()
    return {"before": before, "busy": busy, "after": after, "attached": attached,
            "member_of": sum(r in m for m, _ in pgs), "create_s": create_s}


def main():
    dist.init_process_group("tccl")
    r, n = dist.get_rank(), dist.get_world_size()
    mode = sys.argv[1] if len(sys.argv) > 1 else "overlap"
    out = overlap(r, n) if mode == "overlap" else count(r, n, int(sys.argv[2]))
    dist.barrier()
    out["rank"] = r
    print(json.dumps(out))


if __name__ == "__main__":
    main()
