"""Point to point through `import tccl` (send/recv/isend/irecv with tags, any source, groups,
batch_isend_irecv): exchanges from 0 B to 1 GiB over 2-8 processes, tags out of order,
receives from any source, rings, many messages in flight, a send nobody receives,
truncation, and torch tensors. The multi-rank cases run workers/p2p_worker.py as separate
processes (every rank is killed at the test's deadline); the in-process ones run ranks as
threads, which only progress if every blocking call releases the GIL.
"""

import threading
import time

import numpy as np
import pytest

import tccl
from ranks import check_all_ok, run_ranks


def ok(results, scenario):
    for r in check_all_ok(results):
        assert r.stdout.strip().splitlines()[-1] == f"OK {scenario}", repr(r)
    return results


def worker(world, scenario, *args, timeout=120):
    return ok(run_ranks("p2p_worker.py", world, [scenario, *args], timeout=timeout), scenario)


# ---- across processes -----------------------------------------------------------------------

SIZES = [0, 1, 64 << 10, 64 << 20]


@pytest.mark.parametrize("world", range(2, 9))
def test_pairwise_exchange(world):
    worker(world, "exchange", ",".join(map(str, SIZES)), timeout=240)


def test_pairwise_exchange_one_gibibyte():
    worker(2, "exchange", str(1 << 30), timeout=300)


def test_tags_out_of_order():
    worker(2, "tags")


def test_recv_from_any_source_names_the_sender():
    worker(4, "anysource")


@pytest.mark.parametrize("world,size", [(2, 1000), (3, 8 << 20), (5, 1 << 20)])
def test_batch_isend_irecv_ring(world, size):
    worker(world, "batch", size)


@pytest.mark.parametrize("world,size", [(2, 1000), (4, 8 << 20)])
def test_group_ring(world, size):
    worker(world, "group", size)


def test_many_small_messages_in_flight():
    worker(3, "many", 1000)


def test_send_nobody_receives_times_out_naming_peer_and_tag():
    results = worker(2, "noreceiver", timeout=90)
    errors = [line for line in results[0].stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 2, repr(results[0])


# The receiver posted nothing while the send timed out, so it reads the withdrawn Rts and
# its Cancel only once the later receive is posted: that receive must not fail on it.
def test_a_timed_out_message_is_gone_for_a_later_receive_of_its_tag():
    worker(2, "noreceiver", "reuse", timeout=90)


def test_truncation_raises_on_the_receiver():
    results = worker(2, "truncation")
    assert sum(line.startswith("receiver ") for line in results[1].stdout.splitlines()) == 2


def test_torch_tensors():
    pytest.importorskip("torch")
    worker(2, "torch")
    worker(3, "torch")


# ---- in one process -------------------------------------------------------------------------


def run_threads(world, fn, timeout=30.0):
    store = tccl.HashStore()
    results, errors = [None] * world, [None] * world

    def body(rank):
        try:
            comm = tccl.Communicator(store, rank, world, timeout=10)
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


def test_blocking_calls_release_the_gil():
    # Rank 1 blocks in recv before rank 0 sends: rank 0's thread only runs if rank 1's recv
    # let go of the GIL; likewise rank 0's blocking rendezvous send.
    def fn(c):
        big = 4 << 20
        if c.rank == 0:
            time.sleep(0.2)
            c.send(np.arange(10, dtype=np.int64), 1, tag=3)
            c.send(np.ones(big, dtype=np.uint8), 1)
            return None
        a, b = np.zeros(10, dtype=np.int64), np.zeros(big, dtype=np.uint8)
        src = c.recv(a, tag=3)
        time.sleep(0.2)  # rank 0 sits in its send meanwhile
        c.recv(b, 0)
        return src, a.tolist(), int(b.sum())

    assert run_threads(2, fn)[1] == (0, list(range(10)), 4 << 20)


def test_p2p_beside_a_collective_and_source_tag_of_works():
    def fn(c):
        peer = 1 - c.rank
        inp = np.zeros(3, dtype=np.float32)
        v = c.irecv(inp, None, tag=None)
        assert v.source is None and v.tag is None and v.stats is None
        x = np.ones(4, dtype=np.float32)
        c.all_reduce(x)  # a collective while the receive is pending
        s = c.isend(np.full(3, c.rank + 0.5, dtype=np.float32), peer, tag=11 + c.rank)
        v.wait()
        s.wait()
        return v.source, v.tag, v.stats["bytes"], inp.tolist(), x.tolist()

    r0, r1 = run_threads(2, fn)
    assert r0 == (1, 12, 12, [1.5] * 3, [2.0] * 4)
    assert r1 == (0, 11, 12, [0.5] * 3, [2.0] * 4)


def test_bad_arguments_are_refused():
    def fn(c):
        a = np.zeros(4, dtype=np.uint8)
        with pytest.raises(tccl.InvalidArgumentError, match="tag"):
            c.send(a, 1 - c.rank, tag=-2)
        with pytest.raises(tccl.InvalidArgumentError, match="tag"):
            c.isend(a, 1 - c.rank, tag=tccl.ANY_TAG)  # any tag is for receives
        with pytest.raises(tccl.InvalidArgumentError, match="peer"):
            c.send(a, c.rank)  # not to itself
        with pytest.raises(tccl.InvalidArgumentError, match="peer"):
            c.isend(a, tccl.ANY_SOURCE)
        with pytest.raises(tccl.InvalidArgumentError, match="source"):
            c.irecv(a, 5)
        with pytest.raises(tccl.InvalidArgumentError, match="read-only"):
            ro = np.zeros(4, dtype=np.uint8)
            ro.flags.writeable = False
            c.recv(ro, 1 - c.rank)
        with pytest.raises(tccl.InvalidArgumentError, match="group_end"):
            c.group_end()
        with pytest.raises(tccl.InvalidArgumentError, match="P2POp"):
            tccl.batch_isend_irecv([])
        with pytest.raises(tccl.InvalidArgumentError, match="isend or irecv"):
            tccl.P2POp(c.send, a, 0)
        with pytest.raises(tccl.InvalidArgumentError, match="timeout"):
            c.send(a, 1 - c.rank, timeout=0)
        # A collective inside a group is refused, and the group still closes.
        with pytest.raises(tccl.InvalidArgumentError, match="group"):
            with c.group():
                c.barrier()
        c.barrier()
        return True

    assert run_threads(2, fn) == [True, True]


def test_constants():
    assert tccl.ANY_SOURCE == -1 and tccl.ANY_TAG == -1
    for name in ("send", "recv", "isend", "irecv", "P2POp", "batch_isend_irecv", "group",
                 "ANY_SOURCE", "ANY_TAG"):
        assert name in tccl.__all__, name
