"""Registers tccl as the torch.distributed backend "tccl" (torch 1.13)::

    import torch.distributed as dist
    import tccl.torch_backend              # registers "tccl"
    dist.init_process_group("tccl")        # env:// as with gloo: RANK, WORLD_SIZE, MASTER_*
    dist.all_reduce(t, op=dist.ReduceOp.AVG)

Rendezvous uses the store torch creates for the group. CPU tensors only. See docs/python.md.
"""

import os
import socket

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _tccl_torch

BACKEND = "tccl"


def _route_address():
    """The local address on the route to the store host (MASTER_ADDR or TCCL_STORE's host),
    so that ranks on other hosts can reach this one; "" (loopback) on one host. tccl listens
    there unless TCCL_SOCKET_IFNAME / TCCL_SOCKET_FAMILY choose (CommOptions.routeAddress:
    the same rule as for a TcpStore's connection, docs/network.md)."""
    host = os.environ.get("MASTER_ADDR", "")
    store = os.environ.get("TCCL_STORE", "")
    if not host and store:
        host = store.rsplit(":", 1)[0].strip("[]")
    if not host or host in ("localhost", "127.0.0.1", "::1"):
        return ""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # no packet is sent: this only asks the routing table
            return s.getsockname()[0]
    except OSError:
        return ""


def _timeout_ms(timeout):
    # None: the communicator's default; 0 or less is refused (it would wait forever).
    return int(timeout.total_seconds() * 1000) if timeout is not None else None


def _create(store, rank, world_size, timeout):
    return _tccl_torch.create_process_group(store, rank, world_size, _timeout_ms(timeout),
                                            route_address=_route_address())


def _default_group():
    try:
        return dist.distributed_c10d._get_default_group()
    except RuntimeError:  # not initialised: this call creates it
        return None


def _create_extended(opts, pg_options=None):
    """torch's creator with the extended API, which names the group's global ranks: a
    new_group becomes a child of the default group's communicator (Communicator::
    createGroup), sharing its listener, store and heartbeat thread, instead of a new
    communicator with its own. The default group itself, or a group under a default
    group of another backend, gets a communicator of its own."""
    del pg_options  # tccl takes no backend options
    ranks = list(opts.global_ranks_in_group)
    default = _default_group() if ranks else None
    if default is not None:
        if opts.group_rank != ranks.index(default.rank()):
            raise RuntimeError("tccl new_group: group rank %d is not this rank's index in %s"
                               % (opts.group_rank, ranks))
        pg = _tccl_torch.create_subgroup(default, ranks, str(opts.group_id),
                                         _timeout_ms(opts.timeout))
        if pg is not None:
            return pg
    return _create(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def register():
    """Registers the backend once (idempotent)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True)


def attached_communicators(group=None):
    """How many communicators share the listener of a tccl group's family (new_group
    children of the default group), besides the default group's own."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _tccl_torch.attached_communicators(pg)


def listen_address(group=None):
    """The address a tccl process group listens on (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _tccl_torch.listen_address(pg)


def stats(group=None):
    """The byte counters of a tccl process group (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _tccl_torch.stats(pg)


register()
