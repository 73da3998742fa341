"""A tccl group whose last reference goes in its own future's callback, on the group's
completion thread (tests/python/test_torch_backend.py, test_group_dropped_in_its_own_callback).

Each try: a new group over every rank, an async all_reduce in it, torch's own reference to the
group dropped (destroy_process_group), and a callback on the work's future that drops the last
one. The group (its communicator and its completion threads) is then destroyed on one of its
own completion threads. A try whose future completed before the callback was attached runs it
on this thread instead and does not count. Then every thread the groups started must end: this
process goes back to the threads it had before. Prints one JSON line."""

import json
import os
import threading
import time

import torch
import torch.distributed as dist

import tccl.torch_backend  # noqa: F401 (registers "tccl")
from tccl import _tccl_torch


def threads():
    return len(os.listdir("/proc/self/task"))


def settle(target, deadline_s):
    """Waits until this process has at most `target` threads (lingering ones end after 1 s)."""
    end = time.monotonic() + deadline_s
    while threads() > target and time.monotonic() < end:
        time.sleep(0.1)
    return threads()


dist.init_process_group("tccl")
rank, world = dist.get_rank(), dist.get_world_size()
default = dist.distributed_c10d._get_default_group()
dist.barrier()
time.sleep(2.5)  # the default group's progress thread ends 1 s after its last call
before = threads()

main = threading.get_ident()
off_main = 0
tries = 0
values_ok = True
while off_main < 3 and tries < 12:
    g = dist.new_group(list(range(world)), backend="tccl")
    t = torch.full((1 << 20,), float(rank + tries))
    work = dist.all_reduce(t, group=g, async_op=True)
    holder = [g]
    dist.destroy_process_group(g)
    del g
    seen = {}

    def callback(fut, holder=holder, seen=seen):
        seen["thread"] = threading.get_ident()
        holder.clear()  # the last reference to the group
        return fut.value()

    fut = work.get_future().then(callback)
    del work, holder
    fut.wait()
    expected = float(sum(r + tries for r in range(world)))
    values_ok = values_ok and t[0].item() == expected and t[-1].item() == expected
    if seen["thread"] != main:
        off_main += 1
    tries += 1

attached = _tccl_torch.attached_communicators(default)
dist.barrier()
after = settle(before, 15.0)
print(json.dumps({"rank": rank, "tries": tries, "off_main": off_main, "values_ok": values_ok,
                  "attached": attached, "threads_before": before, "threads_after": after}))
