"""Communicator.split in Python, and torch's new_group built on it (docs/python.md,
"Sub-communicators"): exact results per group, and one listener per process however many
groups it holds."""

import json

import pytest

from ranks import check_all_ok, run_ranks


@pytest.mark.parametrize("world", [1, 3, 5])
def test_split(world):
    for r in check_all_ok(run_ranks("split_worker.py", world, timeout=60)):
        assert r.stdout.strip().splitlines()[-1].startswith("OK "), repr(r)


def test_killed_rank_in_a_child_is_named_in_three_numberings():
    results = run_ranks("split_worker.py", 6, args=["kill"], timeout=60)
    assert results[3].returncode == -9, repr(results[3])
    for r in results[:3] + results[4:]:
        assert r.returncode == 0, repr(r)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        if r.rank % 2 == 0:
            assert out == {"member": False}
            continue
        # World 3 is child rank 1 (child 0 = world 5, 1 = world 3, 2 = world 1).
        assert out["culprit"] == 1, out
        assert (out["culprit_parent"], out["culprit_world"]) == (3, 3), out
        assert out["rank_world"] == r.rank, out
        assert "rank 1 (parent rank 3, world rank 3)" in out["error"], out


def _torch_results(world, args, timeout):
    pytest.importorskip("torch")
    pytest.importorskip("tccl._tccl_torch")
    results = check_all_ok(run_ranks("torch_groups_worker.py", world, args=args,
                                     torch_store=True, timeout=timeout))
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]


@pytest.mark.parametrize("world", [2, 4])
def test_torch_new_group_overlapping(world):
    for out in _torch_results(world, ["overlap"], 120):
        assert out["groups"] == 2 * world + 2


def test_torch_new_group_shares_the_listener():
    # 16 groups over 4 ranks here (CI); docs/PERFORMANCE.md has 64 over 8.
    for out in _torch_results(4, ["count", "16"], 120):
        assert out["attached"] == out["member_of"], out  # each a child of the default group
        for phase in ("busy", "after"):
            assert out[phase]["listening"] == out["before"]["listening"], out
        # Idle groups hold no thread (the progress threads linger 1 s, then end).
        assert out["after"]["threads"] == out["before"]["threads"], out
