"""python3 -m tccl.launch: N ranks with torchrun's variables; a failing rank ends the job."""

import json
import os
import subprocess
import sys
import time

from ranks import WORKERS

SCRIPT = os.path.join(WORKERS, "launch_worker.py")


def json_objects(text):
    """Every JSON object in text (the ranks share one stdout, so lines may interleave)."""
    decoder, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        obj, end = decoder.raw_decode(text, i)
        out.append(obj)
        i = text.find("{", end)
    return out


def launch(*args, timeout=60):
    env = dict(os.environ, TCCL_DEBUG="NONE")
    env.pop("TCCL_STORE", None)
    return subprocess.run([sys.executable, "-m", "tccl.launch", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_three_ranks_get_their_variables_and_reduce():
    p = launch("--nproc-per-node", "3", SCRIPT, "ok")
    assert p.returncode == 0, p.stderr
    rows = json_objects(p.stdout)
    assert len(rows) == 3, p.stdout
    assert sorted(int(r["env"]["RANK"]) for r in rows) == [0, 1, 2]
    ports = {r["env"]["MASTER_PORT"] for r in rows}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for r in rows:
        e = r["env"]
        assert e["WORLD_SIZE"] == e["TCCL_WORLD_SIZE"] == e["LOCAL_WORLD_SIZE"] == "3"
        assert e["RANK"] == e["TCCL_RANK"] == e["LOCAL_RANK"]
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert r["sum"] == 9.0


def test_a_failing_rank_ends_the_job_with_its_status():
    t0 = time.monotonic()
    p = launch("--nproc-per-node", "3", SCRIPT, "fail", "7", timeout=50)
    elapsed = time.monotonic() - t0
    assert p.returncode == 7, (p.returncode, p.stderr)
    assert "rank 1 exited with status 7" in p.stderr
    assert elapsed < 30  # the sleeping ranks were killed, not waited for


def test_timeout_kills_every_rank():
    t0 = time.monotonic()
    p = launch("--nproc-per-node", "2", "--timeout", "1", SCRIPT, "fail", "0", timeout=50)
    # rank 1 exits 0 at once; rank 0 sleeps: the launcher's deadline ends it.
    assert p.returncode == 124, (p.returncode, p.stderr)
    assert time.monotonic() - t0 < 30


def test_usage_errors():
    p = launch("--nproc-per-node", "0", SCRIPT)
    assert p.returncode == 2 and "at least 1" in p.stderr
