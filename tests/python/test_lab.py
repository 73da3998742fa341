"""The semantics lab (docs/python.md): what an all-reduce means, measured on real ranks.

Each test runs workers/lab_worker.py as separate processes with a hard deadline.
"""

import json

import pytest

from ranks import check_all_ok, run_ranks


def lines(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def one(result):
    rows = lines(result)
    assert len(rows) == 1, repr(result)
    return rows[0]


def test_two_ranks_holding_1_and_3():
    for r in check_all_ok(run_ranks("lab_worker.py", 2, ["scalars"], timeout=30)):
        got = one(r)
        assert got["sum"] == 4.0  # 1 + 3 on both
        assert got["divided"] == 2.0  # the sum / world size
        assert got["avg"] == 2.0  # AVG does it directly


def test_three_ranks_holding_1_3_5():
    for r in check_all_ok(run_ranks("lab_worker.py", 3, ["scalars"], timeout=30)):
        got = one(r)
        assert got["sum"] == 9.0
        assert got["avg"] == 3.0


@pytest.mark.parametrize("world", [2, 3])
def test_vectors_elementwise(world):
    results = check_all_ok(run_ranks("lab_worker.py", world, ["vectors"], timeout=30))
    for r in results:
        got = one(r)["vectors"]
        for key, values in got.items():
            dt, op = key.split("/")
            for i, v in enumerate(values):
                held = [i + 2 * q + 1 for q in range(world)]  # what each rank held
                want = {"SUM": sum(held), "MIN": min(held), "MAX": max(held)}.get(op)
                if op == "PRODUCT":
                    want = 1
                    for h in held:
                        want *= h
                if op == "AVG":
                    # integer AVG truncates toward zero (C++ division), floats divide
                    want = sum(held) // world if dt.startswith("int") else sum(held) / world
                assert v == pytest.approx(want), (key, i, values)


def test_collectives_through_python():
    world = 3
    for r in check_all_ok(run_ranks("lab_worker.py", world, ["collectives"], timeout=40)):
        got = one(r)
        rank = r.rank
        assert got["reduce_scatter"] == [world * rank + 10 * (0 + 1 + 2)] * 3
        assert got["reduce_scatter_list"] == got["reduce_scatter"]
        assert got["all_gather"] == [0, 0.5, 1, 1.5, 2, 2.5]
        assert got["all_gather_list"] == [[0, 0.5], [1, 1.5], [2, 2.5]]
        assert got["broadcast"] == [7 * (world - 1), 1]
        assert got["reduce"] == ([3.0] if rank == 0 else [rank + 1.0])
        assert got["all_to_all"] == [100 * p + rank for p in range(world)]
        if rank == 1:
            assert got["gather"] == [0, 1, 2]
        assert got["scatter"] == [rank, rank + 1]
        assert got["ring"] == [(rank - 1) % world] * 4
        assert got["async"] == [0 + 1 + 2] * 8
        assert got["async_stats"] == "allreduce"
        assert got["stats"]["payload_sent"] > 0 and got["stats"]["wire_sent"] > 0


def test_timing_sweep_shows_latency_and_bandwidth_regimes():
    # 4 B .. 1 MiB. Local observations, printed as a table; the only claim checked is the
    # shape: a tiny all-reduce is latency-bound (far lower bytes/s than a large one).
    results = check_all_ok(run_ranks("lab_worker.py", 2, ["sweep", 9], timeout=60))
    rows = one(results[0])["sweep"]
    print(results[0].stderr)  # the table, with pytest -s
    assert [row["bytes"] for row in rows] == [4 * 4 ** k for k in range(10)]
    assert all(row["us"] > 0 for row in rows)
    assert rows[-1]["algbw"] > 20 * rows[0]["algbw"], rows
    # Time grows far less than size at the small end (latency-bound): 64x the bytes
    # cost well under 64x the time.
    assert rows[3]["us"] < 16 * rows[0]["us"], rows


def test_skipped_collective_times_out_instead_of_hanging():
    timeout_s = 1.0
    results = check_all_ok(run_ranks("lab_worker.py", 2, ["skip", timeout_s], timeout=30))
    got = one(results[0])
    assert got["error"] == "TimeoutError", got
    f = got["fields"]
    assert f["kind"] == "Timeout"
    assert f["rank"] == 0
    assert f["collective"] == "allreduce"
    assert f["seq"] == 0
    assert f["timeout_ms"] == 1000
    assert got["elapsed"] < timeout_s + 10
    assert "allreduce" in got["text"]
    assert one(results[1]) == {"skipped": True}


def test_reordered_collectives_fail_with_a_mismatch_naming_the_culprit():
    # Ranks 0 and 1 call all-reduce then broadcast, rank 2 the other way round: the
    # majority's call is the right one, so every rank (the culprit included) must raise
    # MismatchError naming rank 2, for collective #0, fast.
    timeout_s = 5.0
    results = check_all_ok(run_ranks("lab_worker.py", 3, ["reorder", timeout_s, 2], timeout=60))
    rows = [one(r) for r in results]
    for rank, row in enumerate(rows):
        assert row["error"] == "MismatchError", rows
        f = row["fields"]
        assert f["kind"] == "Mismatch" and f["rank"] == rank, rows
        assert f["culprit"] == 2, rows
        assert f["seq"] == 0 and f["collective"] in ("allreduce", "broadcast"), rows
        assert f["local_signature"] and f["remote_signature"], rows
        if rank != 2:
            assert f["local_signature"] != f["remote_signature"], rows
        assert row["elapsed"] < timeout_s, rows  # found by the protocol, not the deadline
