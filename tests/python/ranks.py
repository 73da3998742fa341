"""Runs a worker script on N ranks as separate processes, with a hard deadline.

Every rank runs in its own process group; on timeout (or any failure to finish) all of
them are SIGKILLed, so a test can never hang. The store is either a tccl TcpStoreServer
hosted here (TCCL_STORE, for tccl workers) or torchrun-style MASTER_ADDR/MASTER_PORT
(for torch workers; rank 0 hosts torch's store).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

import tccl
from tccl.launch import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
PYTHON = sys.executable


class RankResult:
    def __init__(self, rank, returncode, stdout, stderr):
        self.rank = rank
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return (f"rank {self.rank}: rc={self.returncode}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_ranks(script, world, args=(), timeout=60.0, env=None, torch_store=False,
              per_rank_env=None):
    """Runs workers/<script> on `world` ranks; returns [RankResult] in rank order.

    Raises AssertionError (with every rank's output) if they do not all exit within
    `timeout` seconds; every rank is SIGKILLed first."""
    server = None
    base = dict(os.environ)
    base.update(env or {})
    base.setdefault("TCCL_DEBUG", "NONE")
    base["PYTHONUNBUFFERED"] = "1"
    if torch_store:
        base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        base.pop("TCCL_STORE", None)
    else:
        server = tccl.TcpStoreServer("127.0.0.1", 0)
        base["TCCL_STORE"] = f"127.0.0.1:{server.port}"
    procs, files = [], []
    try:
        for rank in range(world):
            e = dict(base)
            e.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                      "TCCL_RANK": str(rank), "TCCL_WORLD_SIZE": str(world)})
            if per_rank_env:
                e.update(per_rank_env(rank))
            # Files, not pipes: a chatty rank can never block on a full pipe.
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            files.append((out, err))
            procs.append(subprocess.Popen(
                [PYTHON, os.path.join(WORKERS, script), *map(str, args)], env=e,
                stdout=out, stderr=err, text=True, start_new_session=True))
        deadline = time.monotonic() + timeout
        timed_out = False
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.02)
    finally:
        _kill(procs)
        for p in procs:
            p.wait()
        if server is not None:
            server.stop()
    results = []
    for r, (p, (out, err)) in enumerate(zip(procs, files)):
        out.seek(0)
        err.seek(0)
        results.append(RankResult(r, p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    if timed_out:
        raise AssertionError(f"{script} on {world} ranks did not finish within {timeout} s "
                             "(every rank killed):\n" + "\n".join(map(repr, results)))
    return results


def check_all_ok(results):
    """Asserts that every rank exited 0, showing every rank's output if not."""
    bad = [r for r in results if r.returncode != 0]
    assert not bad, "\n".join(map(repr, results))
    return results
