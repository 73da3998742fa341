"""DistributedDataParallel with backend "tccl" and with "gloo", side by side in the same
ranks (tccl as the default group, gloo as a second group over the same ranks): a small
model, a few SGD steps, each rank its own batch. Prints the final parameters of both
runs and of a local reference (full-batch training on every rank's data) as JSON."""

import copy
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tccl.torch_backend  # noqa: F401  (registers "tccl")

STEPS = 4
BATCH = 8


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(),
                         nn.Linear(8, 2))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 2, generator=g)


def train(net, rank, world):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return net


def reference(world):
    """The same training on one process over every rank's batch: DDP averages the ranks'
    gradients, which for equal batches is the gradient of the mean loss over all of them."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(STEPS):
        xs, ys = zip(*(batch(q, step) for q in range(world)))
        opt.zero_grad()
        nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return net


def params(net):
    return [p.detach().reshape(-1).tolist() for p in net.parameters()]


def main():
    dist.init_process_group("tccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    base = model()
    # Small buckets: several asynchronous all-reduces per step, overlapping backward.
    tccl_net = train(DDP(copy.deepcopy(base), bucket_cap_mb=0.0005), rank, world).module
    gloo_net = train(DDP(copy.deepcopy(base), process_group=gloo, bucket_cap_mb=0.0005),
                     rank, world).module
    print(json.dumps({"initial": params(base), "tccl": params(tccl_net), "gloo": params(gloo_net),
                      "reference": params(reference(world))}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
