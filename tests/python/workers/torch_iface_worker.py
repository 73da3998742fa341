"""init_process_group("tccl") with the environment it is given (MASTER_ADDR,
TCCL_SOCKET_IFNAME, ...), one all-reduce, then "ADDR <the address this rank listens on>".
On a failure to start: "ERROR <message>" and exit 3."""

import sys

import torch
import torch.distributed as dist

import tccl
import tccl.torch_backend

try:
    dist.init_process_group("tccl")
except tccl.Error as e:
    print(f"ERROR {e}", flush=True)
    sys.exit(3)
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
assert torch.equal(t, torch.full((4,), float(n * (n + 1) // 2))), t
host = tccl.torch_backend.listen_address().rsplit(":", 1)[0].strip("[]")  # host:port
print(f"ADDR {host}", flush=True)
dist.barrier()
dist.destroy_process_group()
