"""DistributedDataParallel's standard communication hooks and gradient_as_bucket_view,
with backend "tccl" and with "gloo" side by side in the same ranks (tccl the default
group, gloo a second group over the same ranks), from the same seeds. For each
configuration: the per-step losses and the final parameters of both runs, as JSON.

    ddp_hooks_worker.py CONFIG...   CONFIG: none | allreduce | fp16 | bf16 | powersgd,
                                    with "+view" for gradient_as_bucket_view=True
"""

import copy
import gc
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import tccl.torch_backend  # noqa: F401  (registers "tccl")

STEPS = 6
BATCH = 8


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 12), nn.Tanh(),
                         nn.Linear(12, 2))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 2, generator=g)


def register(net, hook, group):
    if hook == "allreduce":
        net.register_comm_hook(group, default_hooks.allreduce_hook)
    elif hook == "fp16":
        net.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        # torch 1.13's register_comm_hook refuses a hook named bf16_compress_hook (or
        # bf16_compress_wrapper_hook) without CUDA 11 and NCCL 2.10, whatever the backend,
        # gloo too: the same hook is registered under another name.
        def bf16_hook(state, bucket) -> torch.futures.Future[torch.Tensor]:
            return default_hooks.bf16_compress_hook(state, bucket)
        net.register_comm_hook(group, bf16_hook)
    elif hook == "powersgd":
        # Rank-1 approximation from the third step on (the first two are plain
        # all-reduces), with error feedback and warm start: every path of the hook.
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=0.5,
                                       use_error_feedback=True, warm_start=True,
                                       random_seed=7)
        net.register_comm_hook(state, powersgd.powerSGD_hook)
    elif hook != "none":
        raise SystemExit(f"unknown hook {hook}")


def bf16_emulated(state, bucket) -> torch.futures.Future[torch.Tensor]:
    """bf16_compress_hook's arithmetic for a backend without bfloat16 (gloo): the bucket
    rounded to bfloat16 and divided by the world size, summed in float32 (exact for two
    bfloat16 values), the sum rounded to bfloat16 once, as tccl's bfloat16 sum rounds it."""
    group = state if state is not None else dist.group.WORLD
    t = bucket.buffer().to(torch.bfloat16).div_(dist.get_world_size(group)).to(torch.float32)
    fut = dist.all_reduce(t, group=group, async_op=True).get_future()

    def decompress(f):
        out = bucket.buffer()
        out.copy_(f.value()[0].to(torch.bfloat16))
        return out
    return fut.then(decompress)


def train(base, rank, config, group):
    hook, _, view = config.partition("+")
    net = DDP(copy.deepcopy(base), process_group=group, bucket_cap_mb=0.0005,
              gradient_as_bucket_view=view == "view")
    if hook == "bf16" and group is not dist.distributed_c10d._get_default_group():
        net.register_comm_hook(group, bf16_emulated)  # gloo has no bfloat16
    else:
        register(net, hook, group)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().reshape(-1).tolist() for p in net.module.parameters()]


def main():
    dist.init_process_group("tccl")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    tccl_group = dist.distributed_c10d._get_default_group()
    base = model()
    out = {}
    for config in sys.argv[1:]:
        t_losses, t_params = train(base, rank, config, tccl_group)
        g_losses, g_params = train(base, rank, config, gloo)
        out[config] = {"tccl": {"losses": t_losses, "params": t_params},
                       "gloo": {"losses": g_losses, "params": g_params},
                       "initial": [p.detach().reshape(-1).tolist() for p in base.parameters()]}
        # The DDP objects of these runs are in reference cycles and hold their groups:
        # collected here, on the main thread, so that none of them is left for a later
        # collection on some other thread. A guess at one abort of this test in CI
        # ("Resource deadlock avoided" at teardown, 2026-12-07), not a proven cause.
        gc.collect()
    print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
