"""torch.distributed.init_process_group("tccl"): every operation, and DDP vs Gloo.

Skipped when torch or the backend module is not built (docs/python.md)."""

import json

import pytest

from ranks import check_all_ok, run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("tccl._tccl_torch")


@pytest.mark.parametrize("world", [3])
def test_every_operation(world):
    results = check_all_ok(run_ranks("torch_worker.py", world, torch_store=True, timeout=90))
    for r in results:
        last = r.stdout.strip().splitlines()[-1]
        assert last.startswith("OK ") and int(last.split()[1]) > 30, repr(r)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world):
    results = check_all_ok(run_ranks("ddp_worker.py", world, torch_store=True, timeout=120))
    runs = [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]
    for run in runs:
        for name in ("tccl", "gloo"):
            for got, ref in zip(run[name], run["reference"]):
                assert torch.allclose(torch.tensor(got), torch.tensor(ref), atol=1e-5), name
        for t, g in zip(run["tccl"], run["gloo"]):
            assert torch.allclose(torch.tensor(t), torch.tensor(g), atol=1e-6, rtol=1e-5)
    # every rank ends with the same parameters
    for run in runs[1:]:
        assert run["tccl"] == runs[0]["tccl"]
    # and training moved them
    moved = max(abs(a - b) for t, i in zip(runs[0]["tccl"], runs[0]["initial"])
                for a, b in zip(t, i))
    assert moved > 1e-3
