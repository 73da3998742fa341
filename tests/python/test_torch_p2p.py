"""torch.distributed point to point on backend "tccl" (tccl's p2p engine): isend/irecv
exchanges from 0 B to 1 GiB, batch_isend_irecv rings, tags out of order, receives from any
source, many messages in flight, and a send nobody receives. Every rank is killed at the
test's deadline."""

import pytest

from ranks import check_all_ok, run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("tccl._tccl_torch")


def ok(results, scenario):
    for r in check_all_ok(results):
        assert r.stdout.strip().splitlines()[-1] == f"OK {scenario}", repr(r)


@pytest.mark.parametrize("world,size", [(2, 0), (2, 1), (2, 65536), (2, 64 << 20), (3, 1),
                                        (4, 65536), (4, 64 << 20), (8, 1), (8, 65536)])
def test_exchange(world, size):
    ok(run_ranks("torch_p2p_worker.py", world, ["exchange", size], torch_store=True,
                 timeout=180), "exchange")


def test_exchange_one_gibibyte():
    ok(run_ranks("torch_p2p_worker.py", 2, ["exchange", 1 << 30], torch_store=True,
                 timeout=300), "exchange")


@pytest.mark.parametrize("world,size", [(2, 64 << 20), (3, 1000), (5, 1 << 20)])
def test_batch_isend_irecv_ring(world, size):
    ok(run_ranks("torch_p2p_worker.py", world, ["batch", size], torch_store=True,
                 timeout=180), "batch")


def test_tags_out_of_order():
    ok(run_ranks("torch_p2p_worker.py", 2, ["tags"], torch_store=True, timeout=90), "tags")


@pytest.mark.parametrize("world,size", [(2, 8), (4, 300000)])
def test_recv_from_any_source(world, size):
    ok(run_ranks("torch_p2p_worker.py", world, ["anysource", size], torch_store=True,
                 timeout=90), "anysource")


def test_many_small_messages_in_flight():
    ok(run_ranks("torch_p2p_worker.py", 3, ["many", 500], torch_store=True, timeout=120),
       "many")


def test_send_nobody_receives_fails_naming_peer_and_tag():
    results = run_ranks("torch_p2p_worker.py", 2, ["noreceiver", 4 << 20], torch_store=True,
                        timeout=90)
    ok(results, "noreceiver")
    assert any(line.startswith("ERROR ") for line in results[0].stdout.splitlines())
