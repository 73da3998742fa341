#!/usr/bin/python3
"""Context switches and CPU per second, by kind of thread, of a running multi-process job.

    bench/thread_switches.py [--match TEXT] [--after S] [--window S] -- COMMAND...

Starts COMMAND, waits --after seconds (default 15: past start-up, torch's import included),
then reads every thread's /proc/PID/task/TID/status (voluntary_ctxt_switches,
nonvoluntary_ctxt_switches) and stat (utime + stime) twice, --window seconds apart (default
3), for each process whose command line contains --match (default: the last word of COMMAND). It then stops COMMAND and prints,
per kind of thread, the count and the rates over the window:
- main: a process's first thread (for ranks run by `tccl launch`, the launcher's is one of them);
- active: another thread that switched more than 10 times in the window (tccl's progress threads);
- idle: the other threads.

The job must still be running at the end of the window: give it enough iterations. Used by
docs/PERFORMANCE.md, "Where the rest of the torch gap and the bibw gap go", e.g.

    PYTHONPATH=build/python bench/thread_switches.py --match py_allreduce.py -- \\
        build/tccl launch --nproc-per-node 8 --no-tag-output -- \\
        /usr/bin/python3 bench/py_allreduce.py torch-tccl 8 100000 100
"""
import argparse
import collections
import glob
import os
import subprocess
import sys
import time


def snapshot(match):
    out = {}
    me = str(os.getpid())
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        pid = path.split("/")[2]
        if pid == me:  # this script's own command line names the match too
            continue
        try:
            with open(path, "rb") as f:
                if match.encode() not in f.read():
                    continue
            for task in glob.glob(f"/proc/{pid}/task/*"):
                tid = task.rsplit("/", 1)[1]
                fields = {}
                with open(task + "/status") as f:
                    for line in f:
                        k, _, v = line.partition(":")
                        fields[k] = v.strip()
                with open(task + "/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                ticks = int(stat[11]) + int(stat[12])  # utime, stime (fields 14, 15)
                out[(pid, tid)] = (int(fields["voluntary_ctxt_switches"]),
                                   int(fields["nonvoluntary_ctxt_switches"]), ticks, pid == tid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread or process that ended meanwhile
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--match")
    ap.add_argument("--after", type=float, default=15.0)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no COMMAND")
    match = args.match or cmd[-1]
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        time.sleep(args.after)
        a = snapshot(match)
        time.sleep(args.window)
        b = snapshot(match)
        if job.poll() is not None:
            sys.exit("thread_switches.py: the job ended before the window did; give it more work")
    finally:
        job.terminate()
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            job.kill()
    kinds = collections.defaultdict(lambda: [0, 0, 0, 0])
    for key, (vol, invol, ticks, is_main) in b.items():
        if key not in a:
            continue
        dv, dn, dt = vol - a[key][0], invol - a[key][1], ticks - a[key][2]
        kind = "main" if is_main else ("active" if dv + dn > 10 else "idle")
        k = kinds[kind]
        k[0] += 1
        k[1] += dv
        k[2] += dn
        k[3] += dt
    hz = os.sysconf("SC_CLK_TCK")
    w = args.window
    for kind in ("main", "active", "idle"):
        if kind in kinds:
            n, dv, dn, dt = kinds[kind]
            print(f"{kind}: threads={n} voluntary/s={dv / w:.0f} involuntary/s={dn / w:.0f} "
                  f"cpu_s/s={dt / hz / w:.3f}")


if __name__ == "__main__":
    main()
