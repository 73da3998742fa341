"""examples/semantics_lab.py runs as documented, and says what the lab says."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "semantics_lab.py")


def test_semantics_lab_example_on_two_ranks():
    env = dict(os.environ, TCCL_DEBUG="NONE")
    env.pop("TCCL_STORE", None)
    p = subprocess.run([sys.executable, "-m", "tccl.launch", "--nproc-per-node", "2",
                        "--timeout", "60", EXAMPLE, "--sweep-max-exp", "5",
                        "--failure-timeout", "1"],
                       env=env, capture_output=True, text=True, timeout=90)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    for rank in (0, 1):
        assert f"[rank {rank}] sum all-reduce: 4; divided by the world size (2): 2" in out
        assert f"[rank {rank}] AVG all-reduce: 2" in out
        assert f"[rank {rank}] SUM      -> [4.0, 6.0, 8.0, 10.0]" in out
        assert f"[rank {rank}] PRODUCT  -> [3.0, 8.0, 15.0, 24.0]" in out
    assert "algbw GB/s" in out and out.count(" naive") + out.count(" ring") >= 6
    assert "[rank 1] skips the all-reduce" in out
    assert "[rank 0] caught TimeoutError" in out  # the skip: rank 0 gave up, nobody hung
    assert out.count("caught ") >= 3  # and the reordered pair failed on both ranks
