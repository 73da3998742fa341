"""tccl: collective communication over TCP, from Python.

The API follows torch.distributed::

    import numpy as np, tccl
    tccl.init_process_group()                # TCCL_RANK/WORLD_SIZE/STORE or torchrun's variables
    grad = np.ones(1024, dtype=np.float32)
    tccl.all_reduce(grad, op=tccl.ReduceOp.AVG)   # in place, no copy
    work = tccl.all_reduce(grad, async_op=True)   # returns a Work
    work.wait()
    tccl.stats()["total"]["payload_sent"]

Arrays are numpy arrays, CPU torch tensors, or any C-contiguous writable object with the
buffer protocol; they are used in place. Errors are tccl.Error subclasses carrying the
failure's fields (kind, rank, culprit, collective, seq, step, ...). See docs/python.md.
"""

import atexit as _atexit
import datetime as _datetime
import sys as _sys
import threading as _threading

from . import _tccl
from ._tccl import (  # noqa: F401  (re-exported)
    Algorithm,
    DataType,
    FileStore,
    HashStore,
    PrefixStore,
    ReduceOp,
    Store,
    TcpStore,
    TcpStoreServer,
)

__all__ = [
    "Algorithm", "DataType", "ReduceOp", "Store", "HashStore", "FileStore", "PrefixStore",
    "TcpStore", "TcpStoreServer", "Communicator", "Work", "Error", "InvalidArgumentError",
    "TimeoutError", "PeerClosedError", "ProtocolError", "MismatchError", "HandshakeError",
    "StoreError", "SystemError", "AbortedError", "init_process_group", "destroy_process_group",
    "is_initialized", "get_rank", "get_world_size", "default_communicator", "all_reduce",
    "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
    "broadcast", "reduce", "barrier", "all_to_all_single", "gather", "scatter", "send", "recv",
    "all_to_all_v", "all_gather_v", "reduce_scatter_v", "gather_v", "scatter_v",
    "isend", "irecv", "ANY_SOURCE", "ANY_TAG", "P2POp", "batch_isend_irecv", "group_start",
    "group_end", "group", "stats", "reset_stats", "last_call",
]

# Point to point: a receive from any rank, or with any tag (src=None / tag=None say the same).
ANY_SOURCE = -1
ANY_TAG = -1

# ---- errors -----------------------------------------------------------------------------

_FIELDS = (
    "kind", "message", "rank", "peer", "peer_address", "collective", "seq", "algorithm",
    "phase", "step", "steps", "bytes_moved", "bytes_expected", "elapsed_ms", "timeout_ms",
    "culprit", "culprit_address", "detected_by", "local_signature", "remote_signature",
    "rank_parent", "rank_world", "peer_parent", "peer_world", "culprit_parent", "culprit_world",
)


class Error(RuntimeError):
    """Base of every tccl error. str(e) is the full message; the fields are attributes.

    kind: the ErrorKind name ("Timeout", "Mismatch", ...); message: the cause alone;
    rank: this process's rank; peer / peer_address: the peer involved; collective, seq,
    algorithm, phase, step, steps: where it failed; bytes_moved / bytes_expected,
    elapsed_ms / timeout_ms: how far it got; culprit / culprit_address / detected_by: the
    rank the survivors agree caused it; local_signature / remote_signature: the two calls
    of a mismatch. A field that is unknown is None.
    """

    def __init__(self, *args):
        super().__init__(*args)
        for f in _FIELDS:
            setattr(self, f, None)

    def fields(self):
        """The fields as a dict."""
        return {f: getattr(self, f) for f in _FIELDS}


class InvalidArgumentError(Error, ValueError):
    """Bad input from the caller: a count, dtype, rank, non-contiguous or read-only array."""


class TimeoutError(Error):  # noqa: A001  (tccl.TimeoutError, as in the C++ API)
    """A deadline passed (connect, handshake, store, send, receive)."""


class PeerClosedError(Error):
    """The peer's socket closed or reset."""


class ProtocolError(Error):
    """Bytes on the wire that do not decode, or do not match the schedule."""


class MismatchError(Error):
    """The peer runs a different collective (sequence number or signature differs)."""


class HandshakeError(Error):
    """A connection was refused during the handshake."""


class StoreError(Error):
    """The rendezvous store failed or refused."""


class SystemError(Error):  # noqa: A001
    """An OS call failed."""


class AbortedError(Error):
    """The communicator was aborted by an earlier error."""


_ERROR_CLASSES = {
    "InvalidArgument": InvalidArgumentError,
    "Timeout": TimeoutError,
    "PeerClosed": PeerClosedError,
    "Protocol": ProtocolError,
    "Mismatch": MismatchError,
    "Handshake": HandshakeError,
    "Store": StoreError,
    "System": SystemError,
    "Aborted": AbortedError,
}
_tccl._set_error_classes(_ERROR_CLASSES)

# ---- arrays -----------------------------------------------------------------------------


def _torch_tensor_type():
    torch = _sys.modules.get("torch")  # never import torch just to check
    return getattr(torch, "Tensor", None) if torch is not None else None


# The exact types _as_buffer has passed through unchanged (numpy arrays, say): no torch tensor
# type is among them (a type seen before torch was imported can't be a torch.Tensor), so a
# call with one of them may skip _as_buffer (all_reduce's fast path).
_PASSED_THROUGH = set()


def _as_buffer(x, what):
    """(object with the buffer protocol sharing x's memory, dtype override or None)."""
    tensor_type = _torch_tensor_type()
    if tensor_type is not None and isinstance(x, tensor_type):
        if x.device.type != "cpu":
            raise InvalidArgumentError(f"tccl: {what} is on {x.device}; tccl moves CPU tensors")
        if x.layout != _sys.modules["torch"].strided:
            raise InvalidArgumentError(f"tccl: {what} is not a dense tensor")
        if not x.is_contiguous():
            raise InvalidArgumentError(
                f"tccl: {what} is not contiguous; tccl works in place on contiguous tensors "
                "(call .contiguous() and copy the result back)")
        torch = _sys.modules["torch"]
        t = x.detach()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
            return t.view(torch.int16).numpy(), DataType.BFLOAT16
        if t.dim() == 0:
            t = t.reshape(1)
        return t.numpy(), None  # shares the tensor's storage
    _PASSED_THROUGH.add(type(x))
    return x, None


# The longest timeout tccl takes (2^40 ms, about 35 years), as in C++ (config::kMaxTimeoutMs).
_MAX_TIMEOUT_MS = 1 << 40


def _timeout_ms(timeout, what="timeout"):
    """None, seconds (int/float) or a datetime.timedelta -> milliseconds or None.

    A communicator's or a call's timeout must be positive: 0 or less once meant "wait
    forever", and some finite deadline is always in force now (docs/env.md). A positive
    timeout under a millisecond counts as 1 ms.
    """
    if timeout is None:
        return None
    if isinstance(timeout, _datetime.timedelta):
        seconds = timeout.total_seconds()
    else:
        seconds = float(timeout)
    if not seconds > 0:  # also NaN
        raise InvalidArgumentError(
            f"tccl: {what}={timeout!r}: a timeout must be positive (0 or less would wait "
            "forever); use a large value instead, e.g. 86400 (a day)")
    if seconds * 1000 > _MAX_TIMEOUT_MS:
        raise InvalidArgumentError(
            f"tccl: {what}={timeout!r}: more than the longest timeout, {_MAX_TIMEOUT_MS} ms "
            "(about 35 years)")
    return max(1, int(seconds * 1000))


def _wait_ms(timeout):
    """Work.wait's timeout -> milliseconds or None (0 or less: do not wait, just check)."""
    if timeout is None:
        return None
    if isinstance(timeout, _datetime.timedelta):
        return int(timeout.total_seconds() * 1000)
    return int(float(timeout) * 1000)


def _algorithm(algorithm):
    if algorithm is None:
        return Algorithm.AUTO
    if isinstance(algorithm, str):
        return _tccl.parse_algorithm(algorithm)
    return algorithm


def _empty_like_flat(x, n):
    """A new contiguous 1-D array or tensor of n elements of x's type."""
    tensor_type = _torch_tensor_type()
    if tensor_type is not None and isinstance(x, tensor_type):
        return _sys.modules["torch"].empty(n, dtype=x.dtype)
    import numpy

    return numpy.empty(n, dtype=numpy.asarray(x).dtype)


def _numel(x):
    return x.numel() if hasattr(x, "numel") else int(getattr(x, "size", len(x)))


def _counts(c):
    """A counts or displacements list as non-negative ints ([] for None)."""
    if c is None:
        return []
    out = [int(x) for x in c]
    if any(x < 0 for x in out):
        raise InvalidArgumentError(f"tccl: negative count or displacement in {list(c)}")
    return out


def _splits(sizes, array, world, what):
    """torch's split sizes, or equal blocks of `array` when None."""
    if sizes is not None:
        return _counts(sizes)
    n = _numel(array)
    if n % world != 0:
        raise InvalidArgumentError(
            f"tccl: all_to_all_single {what} has {n} elements, not a multiple of the world "
            f"size {world} (pass {what}_split_sizes)")
    return [n // world] * world


def _concat(arrays):
    """The arrays packed into one new flat array (a copy)."""
    tensor_type = _torch_tensor_type()
    if tensor_type is not None and isinstance(arrays[0], tensor_type):
        return _sys.modules["torch"].cat([a.reshape(-1) for a in arrays])
    import numpy

    return numpy.concatenate([numpy.asarray(a).reshape(-1) for a in arrays])


def _split_into(flat, arrays):
    """Copies consecutive blocks of flat into each of arrays."""
    offset = 0
    for a in arrays:
        n = a.numel() if hasattr(a, "numel") else a.size
        block = flat[offset:offset + n]
        if hasattr(a, "copy_"):
            a.copy_(block.reshape(a.shape))
        else:
            a[...] = block.reshape(a.shape)
        offset += n


# ---- works and communicators -----------------------------------------------------------------


class Work:
    """Handle of an asynchronous call. wait() rethrows the call's error.

    The buffers stay in use until the call completes; dropping an unfinished Work waits
    for it first.
    """

    def __init__(self, work, finish=None, group=None):
        self._work = work
        self._finish = finish
        self._group = group  # the point-to-point group it was issued in, if any

    def wait(self, timeout=None):
        """Blocks until done (or, with a timeout in seconds/timedelta, raises
        tccl.TimeoutError if not done by then; the call goes on). Returns True."""
        if self._group is not None and self._group.open:
            raise InvalidArgumentError(
                "tccl: wait() inside the group that issued the operation: a group's "
                "operations are posted at its end (after the with block, or group_end()); "
                "wait after it")
        self._work.wait(_wait_ms(timeout))
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self):
        return self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    @property
    def stats(self):
        """The call's figures (algorithm, bytes, seconds, traffic) once completed, else None."""
        return self._work.stats

    @property
    def seq(self):
        return self._work.seq

    @property
    def source(self):
        """A receive's sender, once it completed (None before, and for other calls)."""
        return self._work.source

    @property
    def tag(self):
        """A receive's message tag, once it completed (None before, and for other calls)."""
        return self._work.tag


class _Group:
    """One thread's open point-to-point group on one communicator."""

    def __init__(self):
        self.open = True
        self.depth = 1
        self.works = []     # every operation issued in it (kept until it is posted)
        self.deferred = []  # those of blocking send/recv, completed at its end


class _GroupContext:
    """`with comm.group():` -- group_start() on entry, group_end() on exit."""

    def __init__(self, comm):
        self._comm = comm

    def __enter__(self):
        self._comm.group_start()
        return self._comm

    def __exit__(self, exc_type, exc, tb):
        self._comm._group_end(raising=exc_type is not None)
        return False


class Communicator:
    """One rank's communicator: every rank builds one with the same store and world size.

    Communicator(store, rank, world_size, timeout=None, name="default", listen_address="")
    Communicator.from_env(): from TCCL_RANK/TCCL_WORLD_SIZE/TCCL_STORE or torchrun's
    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (docs/env.md).
    """

    def __init__(self, store, rank, world_size, timeout=None, name="default", listen_address="",
                 segment_bytes=0, _impl=None):
        if _impl is None:
            _impl = _tccl._Communicator(store, rank, world_size, _timeout_ms(timeout), name,
                                        listen_address, segment_bytes)
        self._c = _impl
        self._local = _threading.local()  # .group: this thread's open p2p group
        self._parked = []  # operations of groups left by an exception, until they complete

    @classmethod
    def from_env(cls, timeout=None, name="default", listen_address="", segment_bytes=0):
        return cls(None, 0, 0, _impl=_tccl._Communicator.from_env(
            _timeout_ms(timeout), name, listen_address, segment_bytes))

    @property
    def rank(self):
        return self._c.rank

    @property
    def size(self):
        return self._c.size

    def get_rank(self):
        return self._c.rank

    def get_world_size(self):
        return self._c.size

    @property
    def sequence(self):
        """Number of collectives issued so far."""
        return self._c.sequence

    @property
    def listen_address(self):
        return self._c.listen_address

    @property
    def store(self):
        """The store this communicator met its peers through (another communicator with a
        different name may share it)."""
        return self._c.store

    # -- failures (docs/errors.md) --

    def abort(self, reason="aborted by the application"):
        """Every pending and later call fails with AbortedError; the peers are told."""
        self._c.abort(reason)

    @property
    def aborted(self):
        return self._c.aborted

    def abort_cause(self):
        """The first fatal error (a tccl.Error instance, not raised), or None."""
        return self._c.abort_cause()

    def shrink(self, timeout=None):
        """After a failure, every survivor calls it: a new Communicator over the ranks still
        alive, renumbered in their old order (original_ranks maps them back)."""
        return Communicator(None, 0, 0, _impl=self._c.shrink(_timeout_ms(timeout)))

    @property
    def original_ranks(self):
        """The first communicator's ranks of this one's members."""
        return list(self._c.original_ranks)

    # -- sub-communicators (docs/python.md, "Sub-communicators") --

    NO_COLOR = -1

    def split(self, color, key=0):
        """MPI_Comm_split: every rank calls it; ranks passing the same color form a new
        Communicator, ranked by key (ties: by rank here). A rank passing None (or
        NO_COLOR) joins none and gets None. The child shares this communicator's store,
        listener and heartbeat thread, and runs concurrently with it."""
        if color is not None and not isinstance(color, int):
            raise TypeError("split: color must be an int or None, not %s" % type(color).__name__)
        child = self._c.split(color, int(key))
        return None if child is None else Communicator(None, 0, 0, _impl=child)

    @property
    def parent_ranks(self):
        """This communicator's ranks in its parent's numbering (split, shrink)."""
        return list(self._c.parent_ranks)

    @property
    def world_ranks(self):
        """This communicator's ranks in the world's numbering: the communicator built by
        the constructor, at the root of its split/shrink family."""
        return list(self._c.world_ranks)

    @property
    def attached_communicators(self):
        """Communicators sharing this one's listener, besides the family's root."""
        return self._c.attached_communicators

    def stats(self):
        """Byte counters since construction: {"total": {...}, "per_peer": {rank: {...}}}."""
        return self._c.stats()

    def reset_stats(self):
        self._c.reset_stats()

    def last_call(self):
        """What the last blocking call did: collective, algorithm, seq, bytes, seconds, traffic."""
        return self._c.last_call()

    def choose_allreduce_algorithm(self, nbytes):
        """(algorithm name, why) that Auto would pick for an all-reduce of nbytes."""
        return self._c.choose_allreduce_algorithm(nbytes)

    @staticmethod
    def _wrap(work, finish=None):
        if work is None:
            if finish is not None:
                finish()
            return None
        return Work(work, finish)

    # -- collectives (torch.distributed's names and argument order) --

    def all_reduce(self, tensor, op=ReduceOp.SUM, async_op=False, *, timeout=None,
                   algorithm=None):
        """In place: tensor = op over ranks of tensor."""
        if timeout is None and algorithm is None and type(tensor) in _PASSED_THROUGH:
            # The common call, without the helpers: 0.5-1 us of Python less per call
            # (docs/PERFORMANCE.md, "import tccl: the Python layer").
            work = self._c.allreduce(tensor, None, op, async_op, None, Algorithm.AUTO, None)
            return None if work is None else Work(work, None)
        b, dt = _as_buffer(tensor, "tensor")
        return self._wrap(self._c.allreduce(b, None, op, async_op, _timeout_ms(timeout),
                                            _algorithm(algorithm), dt))

    def reduce_scatter(self, output, input, op=ReduceOp.SUM, async_op=False, *, timeout=None):
        """output = op over ranks of block `rank` of input. input: a flat array of
        world_size x len(output) elements, or a list of world_size arrays (packed: a copy)."""
        if isinstance(input, (list, tuple)):
            input = _concat(input)
        ob, dt = _as_buffer(output, "output")
        ib, _ = _as_buffer(input, "input")
        return self._wrap(self._c.reduce_scatter(ib, ob, op, async_op, _timeout_ms(timeout),
                                                 Algorithm.AUTO, dt))

    def reduce_scatter_tensor(self, output, input, op=ReduceOp.SUM, async_op=False, *,
                              timeout=None):
        return self.reduce_scatter(output, input, op, async_op, timeout=timeout)

    def all_gather(self, output, input, async_op=False, *, timeout=None):
        """output = every rank's input, in rank order. output: a flat array of world_size x
        len(input) elements, or a list of world_size arrays (filled from a scratch copy)."""
        ib, dt = _as_buffer(input, "input")
        finish = None
        if isinstance(output, (list, tuple)):
            outputs = output
            n = input.numel() if hasattr(input, "numel") else input.size
            output = _empty_like_flat(input, n * self.size)

            def finish():
                _split_into(output, outputs)

        ob, _ = _as_buffer(output, "output")
        return self._wrap(self._c.all_gather(ib, ob, async_op, _timeout_ms(timeout),
                                             Algorithm.AUTO, dt), finish)

    def all_gather_into_tensor(self, output, input, async_op=False, *, timeout=None):
        return self.all_gather(output, input, async_op, timeout=timeout)

    def broadcast(self, tensor, src=0, async_op=False, *, timeout=None, algorithm=None):
        """In place: every rank's tensor = src's tensor."""
        b, dt = _as_buffer(tensor, "tensor")
        return self._wrap(self._c.broadcast(b, src, async_op, _timeout_ms(timeout),
                                            _algorithm(algorithm), dt))

    def reduce(self, tensor, dst=0, op=ReduceOp.SUM, async_op=False, *, timeout=None):
        """In place at dst: tensor = op over ranks of tensor (others' tensors unchanged)."""
        b, dt = _as_buffer(tensor, "tensor")
        return self._wrap(self._c.reduce(b, dst, op, async_op, _timeout_ms(timeout),
                                         Algorithm.AUTO, dt))

    def barrier(self, async_op=False, *, timeout=None):
        return self._wrap(self._c.barrier(async_op, _timeout_ms(timeout)))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          async_op=False, *, timeout=None):
        """Block p of output = rank p's block `rank` of input. Equal blocks, or (as
        torch.distributed) the split sizes: input_split_sizes[p] elements go to rank p,
        output_split_sizes[p] come from rank p; None for either means equal blocks of that
        array (an alltoallv, docs/python.md)."""
        if isinstance(output_split_sizes, bool):  # the old (output, input, async_op) order
            output_split_sizes, async_op = None, output_split_sizes
        if output_split_sizes is None and input_split_sizes is None:
            ib, dt = _as_buffer(input, "input")
            ob, _ = _as_buffer(output, "output")
            return self._wrap(self._c.all_to_all(ib, ob, async_op, _timeout_ms(timeout), dt))
        send = _splits(input_split_sizes, input, self.size, "input")
        recv = _splits(output_split_sizes, output, self.size, "output")
        return self.all_to_all_v(output, input, send, recv, async_op=async_op, timeout=timeout)

    # -- uneven collectives (MPI's ...v calls; counts in elements, one per rank; the
    # displacements default to packed) --

    def _uneven(self, kind, send, recv, count=0, send_counts=(), send_displs=None,
                recv_counts=(), recv_displs=None, root=-1, op=ReduceOp.SUM, async_op=False,
                timeout=None):
        sb, dt = _as_buffer(send, "input") if send is not None else (None, None)
        rb, dt2 = _as_buffer(recv, "output") if recv is not None else (None, None)
        return self._wrap(self._c.uneven(
            kind, sb, rb, int(count), _counts(send_counts), _counts(send_displs),
            _counts(recv_counts), _counts(recv_displs), root, op, async_op, _timeout_ms(timeout),
            dt if dt is not None else dt2))

    def all_to_all_v(self, output, input, send_counts, recv_counts, send_displs=None,
                     recv_displs=None, async_op=False, *, timeout=None):
        """MPI_Alltoallv: send_counts[p] elements at input[send_displs[p]:] go to rank p;
        recv_counts[p] from rank p land at output[recv_displs[p]:]."""
        return self._uneven("alltoallv", input, output, 0, send_counts, send_displs,
                            recv_counts, recv_displs, async_op=async_op, timeout=timeout)

    def all_gather_v(self, output, input, recv_counts, recv_displs=None, async_op=False, *,
                     timeout=None):
        """MPI_Allgatherv: output[recv_displs[p]:][:recv_counts[p]] = rank p's input;
        recv_counts the same on every rank, len(input) == recv_counts[rank]."""
        return self._uneven("allgatherv", input, output, _numel(input), (), None, recv_counts,
                            recv_displs, async_op=async_op, timeout=timeout)

    def reduce_scatter_v(self, output, input, recv_counts, op=ReduceOp.SUM, async_op=False, *,
                         timeout=None):
        """MPI_Reduce_scatter: input holds the blocks packed (block p: recv_counts[p]
        elements); output = op over ranks of block `rank`."""
        return self._uneven("reduce_scatter_v", input, output, 0, (), None, recv_counts, None,
                            op=op, async_op=async_op, timeout=timeout)

    def gather_v(self, tensor, output=None, recv_counts=(), recv_displs=None, dst=0,
                 async_op=False, *, timeout=None):
        """MPI_Gatherv: rank p's tensor lands at dst's output[recv_displs[p]:]
        (recv_counts and output read at dst only)."""
        return self._uneven("gatherv", tensor, output, _numel(tensor), (), None, recv_counts,
                            recv_displs, root=dst, async_op=async_op, timeout=timeout)

    def scatter_v(self, tensor, input=None, send_counts=(), send_displs=None, src=0,
                  async_op=False, *, timeout=None):
        """MPI_Scatterv: tensor = src's send_counts[rank] elements at input[send_displs[rank]:]
        (send_counts and input read at src only)."""
        return self._uneven("scatterv", input, tensor, _numel(tensor), send_counts, send_displs,
                            (), None, root=src, async_op=async_op, timeout=timeout)

    def gather(self, tensor, gather_list=None, dst=0, async_op=False, *, timeout=None):
        """At dst, gather_list receives every rank's tensor: a flat array of world_size x
        len(tensor) elements, or a list of world_size arrays."""
        ib, dt = _as_buffer(tensor, "tensor")
        finish = None
        ob = None
        if self.rank == dst:
            if gather_list is None:
                raise InvalidArgumentError("tccl: gather needs gather_list at the destination")
            flat = gather_list
            if isinstance(gather_list, (list, tuple)):
                outputs = gather_list
                n = tensor.numel() if hasattr(tensor, "numel") else tensor.size
                flat = _empty_like_flat(tensor, n * self.size)

                def finish():
                    _split_into(flat, outputs)

            ob, _ = _as_buffer(flat, "gather_list")
        return self._wrap(self._c.gather(ib, ob, dst, async_op, _timeout_ms(timeout), dt),
                          finish)

    def scatter(self, tensor, scatter_list=None, src=0, async_op=False, *, timeout=None):
        """tensor = block `rank` of src's scatter_list (flat, or a list of world_size arrays)."""
        ob, dt = _as_buffer(tensor, "tensor")
        inp = None
        if self.rank == src:
            if scatter_list is None:
                raise InvalidArgumentError("tccl: scatter needs scatter_list at the source")
            if isinstance(scatter_list, (list, tuple)):
                scatter_list = _concat(scatter_list)
            inp, _ = _as_buffer(scatter_list, "scatter_list")
        return self._wrap(self._c.scatter(inp, ob, src, async_op, _timeout_ms(timeout), dt))

    # -- point to point (MPI's matching; docs/python.md) --

    def _open_group(self):
        return getattr(self._local, "group", None)

    def _p2p(self, is_send, tensor, peer, tag, timeout, blocking):
        """Issues one send or receive: a blocking one returns its (source, tag, count), an
        asynchronous one its Work. Inside a group, a blocking one is issued as an
        asynchronous one and completed at the group's end (returns None)."""
        if self._parked:
            self._parked = [w for w in self._parked if not w.is_completed()]
        b, dt = _as_buffer(tensor, "tensor")
        call = self._c.send if is_send else self._c.recv
        g = self._open_group()
        if g is None:
            if blocking:
                return call(b, peer, tag, False, _timeout_ms(timeout), dt)
            return Work(call(b, peer, tag, True, _timeout_ms(timeout), dt))
        work = Work(call(b, peer, tag, True, _timeout_ms(timeout), dt), group=g)
        g.works.append(work._work)  # an unfinished _Work dropped now would wait: not yet
        if blocking:
            g.deferred.append(work)
            return None
        return work

    def send(self, tensor, dst, *, tag=0, timeout=None):
        """Sends tensor to rank dst with tag (>= 0); returns once its bytes are on the
        wire (a small one may return before dst receives it). Inside a group: recorded,
        and completed at the group's end."""
        self._p2p(True, tensor, dst, tag, timeout, True)

    def recv(self, tensor, src=None, *, tag=0, timeout=None):
        """Receives into tensor the first message from src (None: any rank) with tag
        (None: any tag); returns the sender's rank. tensor is a capacity: a shorter message
        fills its beginning (Work.stats["bytes"] of irecv says how long), a longer one
        fails with InvalidArgumentError (truncation). Inside a group: recorded, completed
        at the group's end, and returns None."""
        st = self._p2p(False, tensor, _source(src), _recv_tag(tag), timeout, True)
        return None if st is None else st[0]

    def isend(self, tensor, dst, *, tag=0, timeout=None):
        """send, asynchronously: returns a Work."""
        return self._p2p(True, tensor, dst, tag, timeout, False)

    def irecv(self, tensor, src=None, *, tag=0, timeout=None):
        """recv, asynchronously: returns a Work whose .source and .tag name the message
        once wait() returned."""
        return self._p2p(False, tensor, _source(src), _recv_tag(tag), timeout, False)

    def group_start(self):
        """Opens a group on this thread (ncclGroupStart): the point-to-point calls until
        group_end() are recorded, then posted as one. Groups nest. Prefer `with group()`."""
        self._c.group_start()
        g = self._open_group()
        if g is None:
            self._local.group = _Group()
        else:
            g.depth += 1

    def group_end(self):
        """Closes the group (ncclGroupEnd): the outermost one posts every operation recorded
        and waits for the blocking send/recv among them, raising the first error."""
        self._group_end(raising=False)

    def _group_end(self, raising):
        g = self._open_group()
        if g is None:
            raise InvalidArgumentError("tccl: group_end without a matching group_start")
        if g.depth > 1:
            g.depth -= 1
            self._c.group_end()
            return
        g.open = False
        self._local.group = None
        # The group lets go of its operations (the Works returned hold their own); those
        # dropped unfinished are waited for by their destructor when `works` goes, below.
        works, g.works = g.works, []
        deferred, g.deferred = g.deferred, []
        self._c.group_end()  # posts (the blocking calls were issued as asynchronous ones)
        if raising:
            # The block raised: do not wait for its operations (they complete, or fail at
            # their deadline, on their own); keep the unfinished ones' buffers held.
            self._parked.extend(w for w in works if not w.is_completed())
            return
        first = None
        for w in deferred:
            try:
                w.wait()
            except Error as e:
                if first is None:
                    first = e
        del works
        if first is not None:
            raise first

    def group(self):
        """`with comm.group(): comm.isend(...); comm.irecv(...)`: the calls in the block
        are posted as one at its end, where its blocking send/recv complete. The Works of
        isend/irecv are waited for after the block. An exception in the block still closes
        the group (its operations are posted, and not waited for)."""
        return _GroupContext(self)


def _source(src):
    return ANY_SOURCE if src is None else src


def _recv_tag(tag):
    return ANY_TAG if tag is None else tag


class P2POp:
    """One operation for batch_isend_irecv (torch.distributed.P2POp): op is isend or irecv
    (a Communicator's, or tccl's own on the default communicator); peer is the
    destination or source; tag as for isend/irecv."""

    def __init__(self, op, tensor, peer, tag=0):
        comm = getattr(op, "__self__", None)
        if isinstance(comm, Communicator) and getattr(op, "__func__", None) in (
                Communicator.isend, Communicator.irecv):
            is_send = op.__func__ is Communicator.isend
        elif op in (isend, irecv):
            comm, is_send = None, op is isend
        else:
            raise InvalidArgumentError(
                f"tccl: P2POp's op must be isend or irecv (tccl's or a Communicator's), not "
                f"{op!r}")
        self.op, self.tensor, self.peer, self.tag = op, tensor, peer, tag
        self._comm, self._is_send = comm, is_send

    def __repr__(self):
        return (f"P2POp({'isend' if self._is_send else 'irecv'}, peer={self.peer}, "
                f"tag={self.tag})")


def batch_isend_irecv(p2p_op_list):
    """Posts the operations as one group (torch.distributed.batch_isend_irecv) and returns
    their Works, in order. Every op must be on the same communicator."""
    ops = list(p2p_op_list)
    if not ops or not all(isinstance(p, P2POp) for p in ops):
        raise InvalidArgumentError("tccl: batch_isend_irecv takes a non-empty list of P2POp")
    comms = {id(p._comm or default_communicator()): p._comm or default_communicator()
             for p in ops}
    if len(comms) != 1:
        raise InvalidArgumentError(
            "tccl: batch_isend_irecv: every P2POp must be on the same communicator")
    (comm,) = comms.values()
    works = []
    with comm.group():
        for p in ops:
            if p._is_send:
                works.append(comm.isend(p.tensor, p.peer, tag=p.tag))
            else:
                works.append(comm.irecv(p.tensor, p.peer, tag=p.tag))
    return works


# ---- the default communicator (torch.distributed-style functions) ----------------------------

_default = None


def init_process_group(store=None, rank=None, world_size=None, *, timeout=None, name="default",
                       listen_address=""):
    """Creates the default communicator.

    With no store: from the environment (TCCL_RANK, TCCL_WORLD_SIZE, TCCL_STORE, else
    torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). With a store: rank and
    world_size are required. timeout: seconds or a timedelta (default: TCCL_TIMEOUT_MS or
    300 s). Returns the Communicator.
    """
    global _default
    if _default is not None:
        raise InvalidArgumentError("tccl: init_process_group called twice "
                                   "(call destroy_process_group first)")
    if store is None:
        if rank is not None or world_size is not None:
            raise InvalidArgumentError("tccl: rank and world_size need a store "
                                       "(or set them in the environment)")
        _default = Communicator.from_env(timeout=timeout, name=name,
                                         listen_address=listen_address)
    else:
        if rank is None or world_size is None:
            raise InvalidArgumentError("tccl: a store needs rank and world_size")
        _default = Communicator(store, rank, world_size, timeout=timeout, name=name,
                                listen_address=listen_address)
    return _default


def destroy_process_group():
    """Drops the default communicator (it closes once its pending Works are gone too)."""
    global _default
    _default = None


# Close the default communicator while the interpreter is whole (its destructor may wait for
# the other ranks to leave the store), not at some point of the interpreter's teardown.
_atexit.register(destroy_process_group)


def is_initialized():
    return _default is not None


def default_communicator():
    if _default is None:
        raise InvalidArgumentError("tccl: call tccl.init_process_group() first")
    return _default


def get_rank():
    return default_communicator().rank


def get_world_size():
    return default_communicator().size


def all_reduce(tensor, op=ReduceOp.SUM, async_op=False, **kw):
    comm = _default if _default is not None else default_communicator()
    return comm.all_reduce(tensor, op, async_op, **kw)


def reduce_scatter(output, input, op=ReduceOp.SUM, async_op=False, **kw):
    return default_communicator().reduce_scatter(output, input, op, async_op, **kw)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, async_op=False, **kw):
    return default_communicator().reduce_scatter(output, input, op, async_op, **kw)


def all_gather(output, input, async_op=False, **kw):
    return default_communicator().all_gather(output, input, async_op, **kw)


def all_gather_into_tensor(output, input, async_op=False, **kw):
    return default_communicator().all_gather(output, input, async_op, **kw)


def broadcast(tensor, src=0, async_op=False, **kw):
    return default_communicator().broadcast(tensor, src, async_op, **kw)


def reduce(tensor, dst=0, op=ReduceOp.SUM, async_op=False, **kw):
    return default_communicator().reduce(tensor, dst, op, async_op, **kw)


def barrier(async_op=False, **kw):
    return default_communicator().barrier(async_op, **kw)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      async_op=False, **kw):
    return default_communicator().all_to_all_single(output, input, output_split_sizes,
                                                    input_split_sizes, async_op, **kw)


def all_to_all_v(output, input, send_counts, recv_counts, send_displs=None, recv_displs=None,
                 async_op=False, **kw):
    return default_communicator().all_to_all_v(output, input, send_counts, recv_counts,
                                               send_displs, recv_displs, async_op, **kw)


def all_gather_v(output, input, recv_counts, recv_displs=None, async_op=False, **kw):
    return default_communicator().all_gather_v(output, input, recv_counts, recv_displs,
                                               async_op, **kw)


def reduce_scatter_v(output, input, recv_counts, op=ReduceOp.SUM, async_op=False, **kw):
    return default_communicator().reduce_scatter_v(output, input, recv_counts, op, async_op,
                                                   **kw)


def gather_v(tensor, output=None, recv_counts=(), recv_displs=None, dst=0, async_op=False, **kw):
    return default_communicator().gather_v(tensor, output, recv_counts, recv_displs, dst,
                                           async_op, **kw)


def scatter_v(tensor, input=None, send_counts=(), send_displs=None, src=0, async_op=False, **kw):
    return default_communicator().scatter_v(tensor, input, send_counts, send_displs, src,
                                            async_op, **kw)


def gather(tensor, gather_list=None, dst=0, async_op=False, **kw):
    return default_communicator().gather(tensor, gather_list, dst, async_op, **kw)


def scatter(tensor, scatter_list=None, src=0, async_op=False, **kw):
    return default_communicator().scatter(tensor, scatter_list, src, async_op, **kw)


def send(tensor, dst, *, tag=0, timeout=None):
    return default_communicator().send(tensor, dst, tag=tag, timeout=timeout)


def recv(tensor, src=None, *, tag=0, timeout=None):
    """Returns the sender's rank (src None: from any rank; tag None: any tag)."""
    return default_communicator().recv(tensor, src, tag=tag, timeout=timeout)


def isend(tensor, dst, *, tag=0, timeout=None):
    return default_communicator().isend(tensor, dst, tag=tag, timeout=timeout)


def irecv(tensor, src=None, *, tag=0, timeout=None):
    return default_communicator().irecv(tensor, src, tag=tag, timeout=timeout)


def group_start():
    default_communicator().group_start()


def group_end():
    default_communicator().group_end()


def group():
    """`with tccl.group(): ...` on the default communicator (see Communicator.group)."""
    return default_communicator().group()


def stats():
    """The default communicator's byte counters (see Communicator.stats)."""
    return default_communicator().stats()


def reset_stats():
    default_communicator().reset_stats()


def last_call():
    return default_communicator().last_call()


def register_torch_backend():
    """Registers the "tccl" backend with torch.distributed (same as importing
    tccl.torch_backend)."""
    from . import torch_backend

    torch_backend.register()
