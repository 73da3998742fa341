"""Runs a Python script on N local ranks, as torchrun does on one host::

    python3 -m tccl.launch --nproc-per-node 4 train.py --epochs 3

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
MASTER_PORT (a free port; rank 0 hosts the store there) and TCCL_RANK, TCCL_WORLD_SIZE.
When a rank fails, the others are killed at once (SIGKILL, to their whole process groups)
and the launcher exits with the failing rank's status (128 + signal number if it was
killed by a signal); on Ctrl-C or --timeout they get SIGTERM and a grace period first.
Pure Python: it needs nothing but the standard library.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _status(returncode):
    return 128 - returncode if returncode < 0 else returncode


def _kill_all(procs, grace):
    """SIGTERM, up to grace seconds, then SIGKILL (grace 0: SIGKILL at once)."""
    for p in procs if grace > 0 else ():
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def launch(cmd, nproc, env=None, timeout=None, grace=3.0, master_addr="127.0.0.1",
           master_port=None):
    """Starts nproc copies of cmd (a list) and waits. Returns 0, or the status of the first
    rank that failed (the rest are killed). timeout (seconds): kill everything and return
    124 when it passes."""
    base = dict(os.environ if env is None else env)
    port = master_port or free_port(master_addr)
    procs = []
    for rank in range(nproc):
        e = dict(base)
        e.update({
            "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0",
            "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(port),
            "TCCL_RANK": str(rank), "TCCL_WORLD_SIZE": str(nproc),
        })
        e.pop("TCCL_STORE", None)  # rank 0 hosts the store on MASTER_PORT
        # Its own process group, so that killing a rank kills what it started too.
        procs.append(subprocess.Popen(cmd, env=e, start_new_session=True))
    deadline = None if timeout is None else time.monotonic() + timeout
    status = 0
    try:
        while True:
            running = 0
            for rank, p in enumerate(procs):
                rc = p.poll()
                if rc is None:
                    running += 1
                elif rc != 0 and status == 0:
                    status = _status(rc)
                    print(f"tccl.launch: rank {rank} exited with status {status}; "
                          "stopping the other ranks", file=sys.stderr)
            if status != 0 or running == 0:
                break
            if deadline is not None and time.monotonic() > deadline:
                print(f"tccl.launch: timed out after {timeout} s; killing every rank",
                      file=sys.stderr)
                status = 124
                break
            time.sleep(0.02)
    except KeyboardInterrupt:
        status = 130
    finally:
        # A failed rank: the others may be blocked on it; nothing to wait for.
        failed = status not in (0, 124, 130)
        _kill_all(procs, 0 if failed else grace)
    return status


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tccl.launch",
                                 description="Run a Python script on N local ranks.")
    ap.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True,
                    help="number of ranks")
    ap.add_argument("--master-port", "--master_port", type=int, default=None,
                    help="store port (default: a free one)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds before every rank is killed (exit status 124)")
    ap.add_argument("-m", dest="module", action="store_true",
                    help="the script is a module name (python3 -m)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc_per_node < 1:
        ap.error("--nproc-per-node must be at least 1")
    cmd = [sys.executable] + (["-m"] if a.module else []) + [a.script] + a.args
    return launch(cmd, a.nproc_per_node, timeout=a.timeout, master_port=a.master_port)


if __name__ == "__main__":
    sys.exit(main())
