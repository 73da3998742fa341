"""Runs a Python script on N local ranks, as torchrun does on one host::

    python3 -m tccl.launch --nproc-per-node 4 train.py --epochs 3

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
MASTER_PORT (a free port; rank 0 hosts the store there) and TCCL_RANK, TCCL_WORLD_SIZE.

As `tccl launch` does (tools/launch.cpp, docs/launch.md):

- output: each rank's stdout and stderr come through pipes and leave on the launcher's
  stdout and stderr one whole line at a time, each prefixed with ``[rank R] `` (a line
  longer than 64 KiB is cut into pieces; a last line without a newline is ended at exit),
  so two ranks' output never mixes inside a line. The ranks run with PYTHONUNBUFFERED=1
  (unless it is set), so their prints show as they happen, not at exit. --no-tag-output
  passes the output through untouched instead.
- job key: with neither TCCL_AUTH_KEY nor TCCL_AUTH_KEY_FILE set, the launcher makes one
  for the job (32 random bytes, hex) and gives it to every rank in TCCL_AUTH_KEY, so that
  the ranks' connections (to the store and to each other) are authenticated and two jobs
  on one host never accept each other's connections. A key that is set is passed on;
  with TCCL_AUTH=off (the explicit opt-out, docs/security.md) none is made.

When a rank fails, the others are killed at once (SIGKILL, to their whole process groups)
and the launcher exits with the failing rank's status (128 + signal number if it was
killed by a signal); on Ctrl-C or --timeout they get SIGTERM and a grace period first.
Pure Python: it needs nothing but the standard library.
"""

import argparse
import math
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time

MAX_LINE = 64 * 1024  # longer lines are cut into pieces this long, as tccl launch does
MAX_NPROC = 4096  # as tccl launch
_DRAIN_AFTER_EXIT = 0.5  # seconds: output held open by what a rank started


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _status(returncode):
    return 128 - returncode if returncode < 0 else returncode


def _say(msg):
    """One line of the launcher's own on stderr (bytes, like the ranks' lines)."""
    _write(sys.stderr, ("tccl.launch: " + msg + "\n").encode(errors="replace"))


def _write(stream, data):
    try:
        out = getattr(stream, "buffer", None)
        if out is not None:
            out.write(data)
        else:  # a text stream without a buffer (replaced by a caller)
            stream.write(data.decode(errors="replace"))
        stream.flush()
    except (OSError, ValueError):
        pass  # our own output is gone: drop it, keep supervising


def job_key_env(env):
    """env with a job key: unchanged when TCCL_AUTH_KEY or TCCL_AUTH_KEY_FILE is set (not
    empty) or when TCCL_AUTH=off opts out of authentication, else with a fresh
    TCCL_AUTH_KEY (32 random bytes, hex) for this job alone."""
    env = dict(env)
    if env.get("TCCL_AUTH_KEY") or env.get("TCCL_AUTH_KEY_FILE") or env.get("TCCL_AUTH") == "off":
        return env
    env.pop("TCCL_AUTH_KEY_FILE", None)  # set but empty
    env["TCCL_AUTH_KEY"] = secrets.token_hex(32)
    return env


class _Output:
    """The ranks' output pipes: bytes until a newline, then one tagged line."""

    def __init__(self):
        self._sel = selectors.DefaultSelector()
        self._partial = {}  # fd -> bytearray

    def add(self, pipe, rank, target):
        fd = pipe.fileno()
        os.set_blocking(fd, False)
        self._partial[fd] = bytearray()
        self._sel.register(fd, selectors.EVENT_READ, (pipe, b"[rank %d] " % rank, target))

    def open(self):
        return bool(self._partial)

    def _emit(self, fd, tag, target, final):
        buf = self._partial[fd]
        lines = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            lines.append(tag + bytes(buf[start:nl + 1]))
            start = nl + 1
        del buf[:start]
        while len(buf) >= MAX_LINE:
            lines.append(tag + bytes(buf[:MAX_LINE]) + b"\n")
            del buf[:MAX_LINE]
        if final and buf:
            lines.append(tag + bytes(buf) + b"\n")
            buf.clear()
        if lines:
            _write(target, b"".join(lines))

    def _close(self, key):
        pipe, tag, target = key.data
        self._emit(key.fd, tag, target, True)
        self._sel.unregister(key.fd)
        del self._partial[key.fd]
        pipe.close()

    def pump(self, timeout):
        """Waits up to timeout seconds for output and writes the whole lines that came."""
        if not self._partial:
            time.sleep(timeout)
            return
        for key, _ in self._sel.select(timeout):
            pipe, tag, target = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._close(key)
                continue
            self._partial[key.fd] += data
            self._emit(key.fd, tag, target, False)

    def finish(self, seconds):
        """Reads until every pipe is closed or `seconds` have passed; then ends every
        partial line and closes the pipes."""
        until = time.monotonic() + seconds
        while self._partial and time.monotonic() < until:
            self.pump(max(0.0, min(0.05, until - time.monotonic())))
        for key in list(self._sel.get_map().values()):
            self._close(key)


def _kill_all(procs, grace, output):
    """SIGTERM, up to grace seconds, then SIGKILL (grace 0: SIGKILL at once). Output keeps
    flowing meanwhile (a rank blocked writing to a full pipe could not stop)."""
    for p in procs if grace > 0 else ():
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        output.pump(0.02)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def launch(cmd, nproc, env=None, timeout=None, grace=3.0, master_addr="127.0.0.1",
           master_port=None, tag_output=True):
    """Starts nproc copies of cmd (a list) and waits. Returns 0, or the status of the first
    rank that failed (the rest are killed). timeout (seconds): kill everything and return
    124 when it passes. tag_output: each line of a rank's output prefixed with
    "[rank R] ", whole lines only (see the module's text)."""
    base = job_key_env(os.environ if env is None else env)
    port = master_port or free_port(master_addr)
    procs = []
    output = _Output()
    status = 0
    try:
        for rank in range(nproc):
            e = dict(base)
            e.update({
                "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0",
                "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
                "MASTER_ADDR": master_addr, "MASTER_PORT": str(port),
                "TCCL_RANK": str(rank), "TCCL_WORLD_SIZE": str(nproc),
            })
            e.pop("TCCL_STORE", None)  # rank 0 hosts the store on MASTER_PORT
            if tag_output:
                # A pipe is not a terminal: Python would hold a rank's prints until exit.
                e.setdefault("PYTHONUNBUFFERED", "1")
            pipe = subprocess.PIPE if tag_output else None
            # Its own process group, so that killing a rank kills what it started too.
            p = subprocess.Popen(cmd, env=e, start_new_session=True, stdout=pipe, stderr=pipe)
            procs.append(p)
            if tag_output:
                output.add(p.stdout, rank, sys.stdout)
                output.add(p.stderr, rank, sys.stderr)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            running = 0
            for rank, p in enumerate(procs):
                rc = p.poll()
                if rc is None:
                    running += 1
                elif rc != 0 and status == 0:
                    status = _status(rc)
                    output.pump(0)  # what it said before it failed comes first
                    _say(f"rank {rank} exited with status {status}; stopping the other ranks")
            if status != 0 or running == 0:
                break
            if deadline is not None and time.monotonic() > deadline:
                _say(f"timed out after {timeout} s; killing every rank")
                status = 124
                break
            output.pump(0.02)
    except KeyboardInterrupt:
        status = 130
    finally:
        # A failed rank: the others may be blocked on it; nothing to wait for.
        failed = status not in (0, 124, 130)
        _kill_all(procs, 0 if failed else grace, output)
        output.finish(_DRAIN_AFTER_EXIT)
    return status


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tccl.launch",
                                 description="Run a Python script on N local ranks.")
    ap.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True,
                    help=f"number of ranks (1 to {MAX_NPROC})")
    ap.add_argument("--master-port", "--master_port", type=int, default=None,
                    help="store port (default: a free one)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds before every rank is killed (exit status 124)")
    tag = ap.add_mutually_exclusive_group()
    tag.add_argument("--tag-output", dest="tag", action="store_true", default=True,
                     help="prefix each line a rank writes with [rank R] (the default)")
    tag.add_argument("--no-tag-output", dest="tag", action="store_false",
                     help="pass the ranks' output through as it comes")
    ap.add_argument("-m", dest="module", action="store_true",
                    help="the script is a module name (python3 -m)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc_per_node < 1:
        ap.error("--nproc-per-node must be at least 1")
    if a.nproc_per_node > MAX_NPROC:
        ap.error(f"--nproc-per-node must be at most {MAX_NPROC}")
    if a.master_port is not None and not 0 <= a.master_port <= 65535:
        ap.error("--master-port must be in [0, 65535]")
    if a.timeout is not None and not (math.isfinite(a.timeout) and a.timeout >= 0):
        ap.error("--timeout must be a finite number of seconds, not negative")
    cmd = [sys.executable] + (["-m"] if a.module else []) + [a.script] + a.args
    return launch(cmd, a.nproc_per_node, timeout=a.timeout, master_port=a.master_port,
                  tag_output=a.tag)


if __name__ == "__main__":
    sys.exit(main())
