"""The uneven collectives from Python (numpy) and through the torch backend
(tests/python/workers/uneven_worker.py does the checking)."""

import importlib.util

import pytest

from ranks import check_all_ok, run_ranks


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_numpy_uneven_collectives(world):
    for r in check_all_ok(run_ranks("uneven_worker.py", world, ["numpy"], timeout=90)):
        assert r.stdout.strip().splitlines()[-1].startswith("OK "), repr(r)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")
@pytest.mark.parametrize("world", [2, 3])
def test_torch_all_to_all_splits_and_all_gather_coalesced(world):
    pytest.importorskip("tccl._tccl_torch")
    results = run_ranks("uneven_worker.py", world, ["torch"], timeout=90, torch_store=True)
    for r in check_all_ok(results):
        assert r.stdout.strip().splitlines()[-1].startswith("OK "), repr(r)


def test_disagreeing_counts_raise_a_mismatch_naming_both_ranks():
    results = check_all_ok(run_ranks("uneven_worker.py", 3, ["mismatch"], timeout=60))
    for r in results:
        lines = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
        assert lines, repr(r)
        assert "rank 1 sends 3 elements to rank 0, but rank 0 expects 2 from rank 1" in lines[0], \
            repr(r)
