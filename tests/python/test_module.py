"""The tccl module in one process: buffers, dtypes, errors, the GIL, async works, stores.

Multi-rank cases run the ranks as threads of this process over a HashStore; they can
only make progress if every call releases the GIL while it runs.
"""

import threading

import numpy as np
import pytest

import tccl
from tccl import _tccl


def run_threads(world, fn, timeout=30.0, comm_timeout=10.0):
    """fn(comm) on `world` ranks as threads; returns their results in rank order and
    re-raises the first exception."""
    store = tccl.HashStore()
    results, errors = [None] * world, [None] * world

    def body(rank):
        try:
            comm = tccl.Communicator(store, rank, world, timeout=comm_timeout)
            results[rank] = fn(comm)
        except BaseException as e:  # noqa: B902 - handed to the main thread
            errors[rank] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank thread hung (is the GIL released during calls?)"
    for e in errors:
        if e is not None:
            raise e
    return results


# ---- in place, no copies --------------------------------------------------------------------

NUMPY_TYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]


@pytest.mark.parametrize("dtype", NUMPY_TYPES)
def test_numpy_all_reduce_in_place(dtype):
    def fn(c):
        a = np.arange(6, dtype=dtype) + c.rank
        address = a.ctypes.data
        assert c.all_reduce(a) is None
        return a, address, a.ctypes.data

    for a, before, after in run_threads(2, fn):
        assert before == after
        assert a.tolist() == [2 * i + 1 for i in range(6)]


def test_views_are_reduced_in_place_in_the_parent_array():
    def fn(c):
        parent = np.zeros((3, 4), dtype=np.float32)
        parent[1] = c.rank + 1
        c.all_reduce(parent[1])  # a contiguous row view: writes through
        return parent

    for p in run_threads(2, fn):
        assert p[1].tolist() == [3.0] * 4 and p[0].sum() == 0 and p[2].sum() == 0


def test_bitwise_ops_on_every_integer_dtype_and_refused_on_floats():
    # Three ranks; rank r holds (i * 37 + 11 r) mod 256 (as the dtype's bits) at index i.
    world, n = 3, 70

    def held(r, dt):
        return (np.arange(n, dtype=np.int64) * 37 + 11 * r).astype(np.uint8).view(np.uint8) \
            .astype(dt)

    def fn(c):
        out = {}
        for dt in (np.int8, np.uint8, np.int32, np.int64):
            for op in (tccl.ReduceOp.BAND, tccl.ReduceOp.BOR, tccl.ReduceOp.BXOR):
                x = held(c.rank, dt)
                c.all_reduce(x, op=op)
                out[(dt.__name__, op.name)] = x.tolist()
        for dt in (np.float32, np.float64):
            with pytest.raises(tccl.InvalidArgumentError, match="band"):
                c.all_reduce(np.ones(4, dtype=dt), op=tccl.ReduceOp.BAND)
        return out

    ref = {"BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}
    for out in run_threads(world, fn):
        for (dt, op), got in out.items():
            want = held(0, getattr(np, dt))
            for q in range(1, world):
                want = ref[op](want, held(q, getattr(np, dt)))
            assert got == want.tolist(), (dt, op)


def test_torch_cpu_tensors_in_place():
    torch = pytest.importorskip("torch")

    def fn(c):
        out = {}
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                   torch.int64, torch.int8, torch.uint8):
            t = torch.arange(4, dtype=dt) + c.rank
            ptr = t.data_ptr()
            c.all_reduce(t)
            assert t.data_ptr() == ptr
            out[str(dt)] = t.tolist()
        # requires_grad leaves are reduced through their data, as torch.distributed does
        w = torch.ones(3, requires_grad=True)
        c.all_reduce(w, op=tccl.ReduceOp.AVG)
        out["grad_leaf"] = w.tolist()
        s = torch.tensor(float(c.rank + 1))  # 0-d
        c.all_reduce(s)
        out["scalar"] = s.item()
        return out

    for out in run_threads(2, fn):
        for key, values in out.items():
            if key == "grad_leaf":
                assert values == [1.0, 1.0, 1.0]
            elif key == "scalar":
                assert values == 3.0
            else:
                assert values == [1, 3, 5, 7], key


def test_bfloat16_and_float16_round_to_nearest():
    torch = pytest.importorskip("torch")

    def fn(c):
        t = torch.tensor([1.0, 0.1, 1000.0], dtype=torch.bfloat16)
        c.all_reduce(t)
        h = np.array([1.0, 0.1, 1000.0], dtype=np.float16)
        c.all_reduce(h)
        return t.float().tolist(), h.astype(np.float64).tolist()

    for bf, f16 in run_threads(2, fn):
        assert bf == torch.tensor([2.0, 0.2, 2000.0], dtype=torch.bfloat16).float().tolist()
        assert f16 == np.array([2.0, 0.2, 2000.0], dtype=np.float16).astype(np.float64).tolist()


# ---- what is refused, and how ------------------------------------------------------------------


def one_rank():
    return tccl.Communicator(tccl.HashStore(), 0, 1)


@pytest.mark.parametrize("bad", [np.zeros(4, dtype=bool), np.zeros(4, dtype=np.complex64),
                                 np.zeros(4, dtype=np.int16), np.zeros(4, dtype=np.uint32),
                                 np.zeros(4, dtype=np.uint64), np.zeros(4, dtype=">f4")])
def test_unsupported_dtypes_are_refused(bad):
    with pytest.raises(tccl.InvalidArgumentError, match="unsupported element type") as e:
        one_rank().all_reduce(bad)
    assert e.value.kind == "InvalidArgument" and e.value.rank == 0
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)


def test_non_contiguous_is_refused():
    a = np.zeros((4, 4), dtype=np.float32)
    with pytest.raises(tccl.InvalidArgumentError, match="not contiguous"):
        one_rank().all_reduce(a[:, 1])
    with pytest.raises(tccl.InvalidArgumentError, match="not contiguous"):
        one_rank().all_reduce(a.T)


def test_non_contiguous_torch_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(tccl.InvalidArgumentError, match="not contiguous"):
        one_rank().all_reduce(torch.zeros(4, 4).t())


def test_the_numpy_fast_path_gives_what_the_checked_path_gives():
    """all_reduce skips its helpers for a type it has passed through before (a numpy
    array): the same results, works and refusals; a torch tensor after numpy arrays still
    goes through the checks (bfloat16 as bfloat16, non-contiguous refused)."""

    def fn(c):
        out = []
        for k in range(3):  # the first call takes the checked path, the others the fast one
            a = np.arange(5, dtype=np.float32) * (c.rank + 1) + k
            assert c.all_reduce(a) is None
            out.append(a.tolist())
        a = np.full(4, c.rank + 2, dtype=np.int64)
        w = c.all_reduce(a, tccl.ReduceOp.PRODUCT, async_op=True)
        assert isinstance(w, tccl.Work)
        w.wait()
        out.append(a.tolist())
        b = np.full(3, float(c.rank), dtype=np.float64)
        c.all_reduce(b, tccl.ReduceOp.MAX, timeout=30, algorithm="ring")  # the checked path
        out.append(b.tolist())
        return out

    for out in run_threads(2, fn):
        assert out[:3] == [[3.0 * i + 2 * k for i in range(5)] for k in range(3)]
        assert out[3] == [6] * 4
        assert out[4] == [1.0] * 3
    torch = pytest.importorskip("torch")
    c = one_rank()
    c.all_reduce(np.zeros(2, dtype=np.float32))
    with pytest.raises(tccl.InvalidArgumentError, match="not contiguous"):
        c.all_reduce(torch.zeros(4, 4).t())
    t = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    c.all_reduce(t)
    assert t.tolist() == [1.5, -2.25]
    with pytest.raises(tccl.InvalidArgumentError, match="not contiguous"):
        c.all_reduce(np.zeros((4, 4), dtype=np.float32).T)


def test_read_only_is_refused_where_written_but_accepted_as_a_source():
    ro = np.ones(4, dtype=np.float32)
    ro.setflags(write=False)
    c = one_rank()
    with pytest.raises(tccl.InvalidArgumentError, match="read-only"):
        c.all_reduce(ro)
    with pytest.raises(tccl.InvalidArgumentError, match="read-only"):
        c.all_gather(ro, np.ones(4, dtype=np.float32))
    out = np.zeros(4, dtype=np.float32)
    c.all_gather(out, ro)  # an input only needs to be readable
    assert out.tolist() == [1.0] * 4
    c.broadcast(ro, src=0)  # the root of a broadcast only reads


def test_objects_without_the_buffer_protocol_are_a_type_error():
    with pytest.raises(TypeError, match="buffer protocol"):
        one_rank().all_reduce([1.0, 2.0])


def test_size_mismatches_are_refused():
    def fn(c):
        with pytest.raises(tccl.InvalidArgumentError, match="expected 8"):
            c.all_gather(np.zeros(7, dtype=np.float32), np.zeros(4, dtype=np.float32))
        with pytest.raises(tccl.InvalidArgumentError, match="element types differ"):
            c.all_gather(np.zeros(8, dtype=np.float64), np.zeros(4, dtype=np.float32))
        with pytest.raises(tccl.InvalidArgumentError, match="expected 6"):
            c.reduce_scatter(np.zeros(3, dtype=np.float32), np.zeros(5, dtype=np.float32))
        return True

    assert run_threads(2, fn) == [True, True]


# ---- errors ----------------------------------------------------------------------------------------

FIELDS = ["kind", "message", "rank", "peer", "peer_address", "collective", "seq", "algorithm",
          "phase", "step", "steps", "bytes_moved", "bytes_expected", "elapsed_ms", "timeout_ms",
          "culprit", "culprit_address", "detected_by", "local_signature", "remote_signature",
          # a sub-communicator's ranks in its parent's and in the world's numbering
          # (None on a communicator without a parent)
          "rank_parent", "rank_world", "peer_parent", "peer_world", "culprit_parent",
          "culprit_world"]


@pytest.mark.parametrize("kind,cls", [
    ("InvalidArgument", tccl.InvalidArgumentError), ("Timeout", tccl.TimeoutError),
    ("PeerClosed", tccl.PeerClosedError), ("Protocol", tccl.ProtocolError),
    ("Mismatch", tccl.MismatchError), ("Handshake", tccl.HandshakeError),
    ("Store", tccl.StoreError), ("System", tccl.SystemError), ("Aborted", tccl.AbortedError)])
def test_each_error_kind_has_its_class_and_every_field(kind, cls):
    with pytest.raises(cls) as e:
        _tccl._raise_error(kind)
    err = e.value
    assert isinstance(err, tccl.Error) and isinstance(err, RuntimeError)
    assert sorted(err.fields()) == sorted(FIELDS)
    assert err.fields() == {
        "kind": kind, "message": "synthetic", "rank": 1, "peer": 2,
        "peer_address": "127.0.0.1:1234", "collective": "allreduce", "seq": 7,
        "algorithm": "ring", "phase": "reduce-scatter", "step": 3, "steps": 7,
        "bytes_moved": 100, "bytes_expected": 200, "elapsed_ms": 50, "timeout_ms": 40,
        "culprit": 2, "culprit_address": "127.0.0.1:1234", "detected_by": 1,
        "local_signature": "allreduce #7 f32 x4 sum",
        "remote_signature": "broadcast #7 f32 x4 root 0",
        # the synthetic error comes from a communicator without a parent
        "rank_parent": None, "rank_world": None, "peer_parent": None, "peer_world": None,
        "culprit_parent": None, "culprit_world": None}
    assert "allreduce #7" in str(err)  # the C++ what(), fields rendered


def test_every_kind_is_mapped():
    assert set(_tccl._error_kinds()) == set(tccl._ERROR_CLASSES)


def test_a_real_timeout_carries_where_it_failed():
    # Rank 1 never joins the all-reduce: rank 0 times out, with the facts.
    done = threading.Event()

    def fn(c):
        if c.rank == 1:
            done.wait(20)
            return None
        try:
            c.all_reduce(np.ones(4, dtype=np.float32), timeout=0.3)
        except tccl.TimeoutError as e:
            return e
        finally:
            done.set()
        return None

    err = run_threads(2, fn)[0]
    assert isinstance(err, tccl.TimeoutError), err
    assert err.kind == "Timeout" and err.rank == 0 and err.collective == "allreduce"
    assert err.seq == 0 and err.timeout_ms == 300 and err.elapsed_ms >= 300
    assert err.peer == 1 or err.culprit == 1


@pytest.mark.parametrize("bad", [0, 0.0, -1, -0.5, float("nan"), __import__("datetime").timedelta(0)])
def test_a_timeout_of_zero_or_less_is_refused_it_would_wait_forever(bad):
    # Some finite deadline is always in force: 0 or less is an InvalidArgumentError
    # naming the parameter, for the communicator, each call and shrink; and the same
    # value given straight to the binding (timeout_ms=0) is refused by the C++ side.
    with pytest.raises(tccl.InvalidArgumentError, match="must be positive"):
        tccl.Communicator(tccl.HashStore(), 0, 1, timeout=bad)
    with pytest.raises(tccl.InvalidArgumentError, match="must be positive"):
        tccl.Communicator.from_env(timeout=bad)
    c = tccl.Communicator(tccl.HashStore(), 0, 1)
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(tccl.InvalidArgumentError, match="timeout=.*must be positive"):
        c.all_reduce(x, timeout=bad)
    with pytest.raises(tccl.InvalidArgumentError, match="must be positive"):
        c.barrier(timeout=bad)
    with pytest.raises(tccl.InvalidArgumentError, match="must be positive"):
        c.shrink(timeout=bad)
    assert c.sequence == 0 and not c.aborted  # refused before anything was issued
    c.all_reduce(x, timeout=0.0001)  # under a millisecond: 1 ms, not 0
    assert c.sequence == 1


def test_timeout_ms_zero_through_the_binding_is_refused_by_cpp():
    with pytest.raises(tccl.InvalidArgumentError, match="CommOptions::timeout of 0 ms"):
        _tccl._Communicator(tccl.HashStore(), 0, 1, 0, "default", "", 0)
    c = tccl.Communicator(tccl.HashStore(), 0, 1)
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(tccl.InvalidArgumentError, match="per-call timeout .* of 0 ms"):
        c._c.allreduce(x, None, tccl.ReduceOp.SUM, False, 0, tccl.Algorithm.AUTO, None)


# ---- async works, threads, stats ---------------------------------------------------------


def test_async_works_complete_in_order_and_keep_buffers_alive():
    def fn(c):
        works = []
        for i in range(4):
            # The arrays are referenced only by their Works: they must stay alive.
            works.append((c.all_reduce(np.full(1000, i + c.rank, dtype=np.float64),
                                       async_op=True)))
        out = np.full(3, c.rank + 1, dtype=np.int32)
        w = c.all_reduce(out, async_op=True, op=tccl.ReduceOp.MAX)
        for x in works:
            assert x.wait() is True
            assert x.is_completed() and x.is_success()
            assert x.stats["collective"] == "allreduce" and x.stats["bytes"] == 8000
        w.wait(timeout=10)
        seqs = [x.seq for x in works] + [w.seq]
        return out.tolist(), seqs

    for out, seqs in run_threads(2, fn):
        assert out == [2, 2, 2]
        assert seqs == sorted(seqs)


def test_dropping_an_unfinished_work_waits_for_it():
    def fn(c):
        a = np.full(1 << 16, 1.0, dtype=np.float32)
        w = c.all_reduce(a, async_op=True)
        del w  # must not free the buffer under the running collective
        c.barrier()
        return a[0], a[-1]

    assert run_threads(2, fn) == [(2.0, 2.0), (2.0, 2.0)]


def test_other_python_threads_run_while_a_call_waits():
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.01)

    t = threading.Thread(target=ticker)
    t.start()

    def fn(c):
        if c.rank == 1:
            stop.wait(0.5)  # rank 0 sits in the all-reduce meanwhile
        x = np.ones(2, dtype=np.float32)
        c.all_reduce(x)
        return x.tolist()

    try:
        assert run_threads(2, fn) == [[2.0, 2.0]] * 2
    finally:
        stop.set()
        t.join()
    assert len(ticks) >= 10


@pytest.mark.parametrize("world", [2, 3])
def test_stats_count_the_bytes(world):
    # A ring all-reduce of V bytes, V a multiple of the world: each rank sends
    # 2(N-1) chunks of V/N bytes to the next rank and receives as many from the one
    # before, one message per step (one segment: 2 KiB is under the segment size), each
    # with a 24-byte header. The warm-up call opens the connections, so that the counted
    # call carries no handshake.
    count = 512 * world
    chunk = count * 4 // world

    def fn(c):
        c.all_reduce(np.ones(count, dtype=np.float32), algorithm="ring")
        c.reset_stats()
        x = np.full(count, c.rank + 1, dtype=np.float32)
        c.all_reduce(x, algorithm="ring")
        return c.stats(), c.last_call(), x

    steps = 2 * (world - 1)
    for rank, (total, last, x) in enumerate(run_threads(world, fn)):
        assert x.tolist() == [world * (world + 1) / 2] * count
        assert last["collective"] == "allreduce" and last["bytes"] == count * 4
        assert last["seconds"] > 0
        # One segment per step: the piece (2 KiB) fits the segment, whichever rule set it
        # (the cost model's 4 KiB grain, or the 1 MiB default with more ranks than cores).
        assert last["segment_bytes"] in (4096, 1 << 20), last
        t = total["total"]
        assert t["payload_sent"] == steps * chunk and t["payload_recv"] == steps * chunk
        assert t["messages_sent"] == steps and t["messages_recv"] == steps
        assert t["wire_sent"] == steps * (chunk + 24) and t["wire_recv"] == steps * (chunk + 24)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        sent = {p: v["payload_sent"] for p, v in total["per_peer"].items() if v["payload_sent"]}
        recv = {p: v["payload_recv"] for p, v in total["per_peer"].items() if v["payload_recv"]}
        assert sent == {nxt: steps * chunk} and recv == {prv: steps * chunk}, total


def test_world_of_one_and_the_default_communicator():
    assert not tccl.is_initialized()
    tccl.init_process_group(tccl.HashStore(), 0, 1)
    try:
        assert tccl.get_rank() == 0 and tccl.get_world_size() == 1
        x = np.arange(3, dtype=np.float32)
        tccl.all_reduce(x)
        assert x.tolist() == [0, 1, 2]
        with pytest.raises(tccl.InvalidArgumentError, match="twice"):
            tccl.init_process_group(tccl.HashStore(), 0, 1)
    finally:
        tccl.destroy_process_group()
    with pytest.raises(tccl.InvalidArgumentError, match="init_process_group"):
        tccl.get_rank()


# ---- stores --------------------------------------------------------------------------------


def test_tcp_store_from_python():
    server = tccl.TcpStoreServer("127.0.0.1", 0)
    try:
        a = tccl.TcpStore("127.0.0.1", server.port)
        b = tccl.PrefixStore("job", tccl.TcpStore("127.0.0.1", server.port))
        a.set("k", b"v1")
        assert a.get("k") == b"v1"
        assert a.add("n", 5) == 5 and a.add("n", -2) == 3
        b.set("x", "text")
        assert a.get("job/x") == b"text"
        assert a.check(["k", "n"]) and not a.check(["absent"])
        with pytest.raises(tccl.TimeoutError):
            a.wait(["absent"], timeout_ms=50)
        assert a.erase("k") and not a.check(["k"])
    finally:
        server.stop()


# ---- failures: abort and shrink (docs/errors.md) -----------------------------------------------


def test_abort_fails_this_rank_and_tells_the_peer():
    import time

    def fn(c):
        c.all_reduce(np.ones(2, dtype=np.float32))  # connected
        if c.rank == 0:
            c.abort("stopped by the test")
            assert c.aborted
            cause = c.abort_cause()
            assert isinstance(cause, tccl.Error) and "stopped by the test" in str(cause)
            with pytest.raises(tccl.AbortedError) as e:
                c.all_reduce(np.ones(2, dtype=np.float32))
            return e.value.kind, None
        t0 = time.monotonic()
        with pytest.raises(tccl.Error) as e:
            c.all_reduce(np.ones(2, dtype=np.float32))
        return e.value.kind, time.monotonic() - t0

    (kind0, _), (kind1, waited) = run_threads(2, fn, comm_timeout=20)
    assert kind0 == "Aborted"
    assert kind1 in ("Aborted", "PeerClosed"), kind1
    assert waited < 10  # told, not left to time out


def test_survivors_shrink_and_go_on():
    def fn(c):
        if c.rank == 2:
            return None  # leaves: its communicator closes
        with pytest.raises(tccl.Error):
            c.all_reduce(np.ones(2, dtype=np.float32), timeout=2)
        s = c.shrink(timeout=5)
        x = np.array([2 * c.rank + 1], dtype=np.float32)
        s.all_reduce(x)
        return s.rank, s.size, s.original_ranks, float(x[0])

    results = run_threads(3, fn, comm_timeout=20)
    assert results[:2] == [(0, 2, [0, 1], 4.0), (1, 2, [0, 1], 4.0)]
