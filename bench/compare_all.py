#!/usr/bin/python3
"""tccl `auto` against Open MPI (TCP) and Gloo (TCP), and against tccl's own fixed algorithms.

Re-runnable: builds nothing itself (run bench/compare_mpi.sh once for the tccl Release build and
the MPI program, and see bench/README.md for the Gloo one), runs every process under a timeout,
alternates the contenders within each repetition, and prints markdown tables of medians.

    /usr/bin/python3 bench/compare_all.py [--worlds 2,4,8] [--reps 3] [--sizes 8,1M,64M] [--sweep]

  Every contender but the rows marked in place runs out of place (separate input and output
  buffers), unpinned (mpirun --bind-to none); any wrong element, failed or missing run ends
  the script with an error (but a torch gloo run that aborts, as torch 1.13's gloo does now
  and then, is tried again up to twice, said on stderr and listed with the tables).

  compare: 8 B, 1 MiB and 64 MiB float32 sum all-reduce at each world: tccl auto (out of place,
           and in place: `tccl bench --inplace`, the row "in place: tccl auto"), Open MPI
           (mpirun --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo), Gloo ring and
           bcube (its halving-doubling-like algorithm) over 127.0.0.1, and through Python
           (bench/py_allreduce.py under `tccl launch`): torch.distributed with the tccl and the
           gloo backend, and `import tccl` on numpy. Those three work in place (torch's
           all_reduce does); --no-python leaves them out; --sizes runs a subset of the three
           sizes (a ratio whose size did not run prints nan). PYTHONPATH_TCCL (default: the
           directory of TCCL's build + /python) holds the tccl package.
  --sweep: every fixed all-reduce algorithm and `auto` (in one job per size, in an order rotated per
           repetition) over 8 B..16 MiB (x8) and 64 MiB at each world; for each size `auto` against
           the best fixed algorithm, medians over the repetitions, and at the end the worst ratio
           where `auto` chose another algorithm than the fastest and the largest deviation where it
           ran the fastest itself (the measurement's own noise).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCCL = os.environ.get("TCCL", os.path.join(ROOT, "build-bench/compare/tccl"))
MPI_BIN = os.environ.get("MPI_BIN", os.path.join(ROOT, "build-bench/compare/mpi_allreduce"))
GLOO_BIN = os.environ.get("GLOO_BIN", os.path.join(ROOT, "build-bench/compare/gloo_allreduce"))
TIMEOUT = int(os.environ.get("TIMEOUT", "300"))


def iters_for(size):
    # (timed iterations, warm-up): every timed loop lasts tens of milliseconds or more,
    # so that one scheduler hiccup does not decide a row (20 iterations of 2 MiB at
    # world 4 are 40 ms, where ring and hd swapped places from run to run).
    if size < (1 << 20):
        return (1000, 100)
    if size < (16 << 20):
        return (100, 10)
    return (20, 5)


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-500:]}")
    return out.stdout


def tccl(world, size, algo, inplace=False):
    it, wu = iters_for(size)
    out = run([TCCL, "bench", "--world", str(world), "--sizes", str(size), "--algo", algo,
               "--iters", str(it), "--warmup", str(wu), "--json"] + (["--inplace"] if inplace else []))
    rows = json.loads(out)["results"]
    # "ran": the algorithm that ran (for auto's row, the one it chose; "algo" says "auto:ring")
    return [(r["ran"], r["time_us"], r["busbw_gbps"], r["wrong"], r["requested"]) for r in rows]


def mpi(world, size):
    it, wu = iters_for(size)
    # --bind-to none: tccl's and Gloo's ranks are not pinned, so MPI's are not either.
    out = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(world),
               "--mca", "pml", "ob1",
               "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo", MPI_BIN, "--iters", str(it),
               "--warmup", str(wu), "--csv", str(size)])
    for line in out.splitlines():
        f = line.split(",")
        if f[0] == "csv":  # csv,world,size,count,time_us,algbw_gbps,busbw_gbps,wrong
            return float(f[4]), float(f[6]), float(f[7])
    raise RuntimeError("no result from mpi_allreduce:\n" + out)


def gloo(world, size, algo):
    it, wu = iters_for(size)
    with tempfile.TemporaryDirectory() as d:
        procs = [subprocess.Popen([GLOO_BIN, str(r), str(world), d, str(it), str(wu), algo, str(size)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
        outs = []
        for p in procs:
            try:
                o, e = p.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            if p.returncode != 0:
                raise RuntimeError(f"gloo rank failed: {e[-300:]}")
            outs.append(o)
    for line in outs[0].splitlines():
        f = line.split(",")
        if f[0] == "gloo":
            return float(f[4]), float(f[6]), float(f[7])
    raise RuntimeError("no result from gloo_allreduce")


PY_BENCH = os.path.join(ROOT, "bench", "py_allreduce.py")
PY_IMPLS = [("torch tccl", "torch-tccl"), ("torch gloo", "torch-gloo"), ("import tccl (numpy)", "tccl-numpy")]


# torch 1.13's own gloo backend aborts a rank now and then ("terminate called without an
# active exception", at world 4 or 8 and 1 MiB, inside libtorch's gloo, not tccl): such a run
# of torch gloo is tried again, up to this many times, and each retry is reported on stderr
# and listed with the tables. A failed run of any other contender, tccl's above all, is never
# retried: it ends the script.
OTHER_RETRIES = 2
retries = []


def python_row(world, size, impl):
    it, wu = iters_for(size)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH_TCCL", os.path.join(os.path.dirname(TCCL), "python"))
    cmd = [TCCL, "launch", "--nproc-per-node", str(world), "--no-tag-output", "--",
           "/usr/bin/python3", PY_BENCH, impl, str(size), str(it), str(wu)]
    for attempt in range(OTHER_RETRIES + 1):
        try:
            out = run(cmd, env=env)
            break
        except RuntimeError as e:
            if impl != "torch-gloo" or attempt == OTHER_RETRIES:
                raise
            retries.append((world, size, impl))
            print(f"[compare] {impl} world {world} size {size} failed, tried again: {str(e)[-200:]}",
                  file=sys.stderr)
    for line in out.splitlines():
        f = line.split(",")
        if f[0] == "csv":  # csv,impl,world,size,time_us,algbw_gbps,busbw_gbps,wrong
            return float(f[4]), float(f[6]), float(f[7])
    raise RuntimeError(f"no result from py_allreduce.py {impl}:\n" + out)


SIZE_NAMES = {8: "8 B", 1 << 20: "1 MiB", 64 << 20: "64 MiB"}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def compare(worlds, reps, python=True, sizes=(8, 1 << 20, 64 << 20)):
    res = {}
    for rep in range(reps):
        for w in worlds:
            for s in sizes:
                print(f"[compare] rep {rep + 1}/{reps} world {w} size {s}", file=sys.stderr)
                a, t, b, wrong, _ = tccl(w, s, "auto")[0]
                res.setdefault((w, s, "tccl auto (" + a + ")"), []).append((t, b, wrong))
                # In place too, as torch's rows run (named so that no "tccl" prefix matches it).
                a, t, b, wrong, _ = tccl(w, s, "auto", inplace=True)[0]
                res.setdefault((w, s, "in place: tccl auto (" + a + ")"), []).append((t, b, wrong))
                res.setdefault((w, s, "Open MPI"), []).append(mpi(w, s))
                for g in ("ring", "bcube"):
                    res.setdefault((w, s, "Gloo " + g), []).append(gloo(w, s, g))
                for name, impl in (PY_IMPLS if python else []):
                    res.setdefault((w, s, name), []).append(python_row(w, s, impl))
    bad = [(k, max(x[2] for x in v)) for k, v in res.items() if max(x[2] for x in v) != 0]
    if bad:
        sys.exit(f"compare_all.py: wrong results: {bad}")
    if retries:
        print(f"Runs of torch gloo that failed and were tried again: {retries}\n")
    print("| world | size | impl | time (us) | busbw (GB/s) | #wrong |")
    print("|---:|---:|---|---:|---:|---:|")
    for (w, s, impl), v in sorted(res.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        print(f"| {w} | {SIZE_NAMES[s]} | {impl} | {med([x[0] for x in v]):.2f} | "
              f"{med([x[1] for x in v]):.3f} | {max(x[2] for x in v):.0f} |")
    print()
    print("| world | 8 B: tccl auto / MPI time | 8 B: tccl auto / best Gloo time | "
          "1 MiB: tccl auto / MPI busbw | 64 MiB: tccl auto / MPI busbw | "
          "64 MiB: tccl auto / best Gloo busbw |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w in worlds:
        def pick(s, prefix):
            return [v for (ww, ss, impl), v in res.items() if ww == w and ss == s and impl.startswith(prefix)]
        nan = float("nan")
        t_auto = med([x[0] for v in pick(8, "tccl") for x in v])
        t_mpi = med([x[0] for v in pick(8, "Open MPI") for x in v])
        t_gloo = min((med([x[0] for x in v]) for v in pick(8, "Gloo")), default=nan)
        m_auto = med([x[1] for v in pick(1 << 20, "tccl") for x in v])
        m_mpi = med([x[1] for v in pick(1 << 20, "Open MPI") for x in v])
        b_auto = med([x[1] for v in pick(64 << 20, "tccl") for x in v])
        b_mpi = med([x[1] for v in pick(64 << 20, "Open MPI") for x in v])
        b_gloo = max((med([x[1] for x in v]) for v in pick(64 << 20, "Gloo")), default=nan)
        print(f"| {w} | {t_auto / t_mpi:.2f} | {t_auto / t_gloo:.2f} | {m_auto / m_mpi:.2f} | "
              f"{b_auto / b_mpi:.2f} | {b_auto / b_gloo:.2f} |")
    if not python:
        return
    print()
    print("| world | 8 B: torch tccl / tccl C++ time | 8 B: import tccl / tccl C++ time | "
          "8 B: torch gloo / torch tccl time | 64 MiB: torch tccl / tccl C++ busbw | "
          "64 MiB: torch tccl / torch gloo busbw | 64 MiB, both in place: tccl C++ / torch gloo busbw |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for w in worlds:
        def m(s, prefix, i):
            return med([x[i] for (ww, ss, impl), v in res.items() if ww == w and ss == s and impl.startswith(prefix)
                        for x in v])
        big = 64 << 20
        print(f"| {w} | {m(8, 'torch tccl', 0) / m(8, 'tccl auto', 0):.2f} | {m(8, 'import tccl', 0) / m(8, 'tccl auto', 0):.2f} | "
              f"{m(8, 'torch gloo', 0) / m(8, 'torch tccl', 0):.2f} | {m(big, 'torch tccl', 1) / m(big, 'tccl auto', 1):.2f} | "
              f"{m(big, 'torch tccl', 1) / m(big, 'torch gloo', 1):.2f} | "
              f"{m(big, 'in place: tccl', 1) / m(big, 'torch gloo', 1):.2f} |")


# The fixed all-reduce algorithms on one host (hier needs several) and auto.
ALGOS = ["ring", "naive", "tree", "hd", "rd", "hier", "auto"]


def sweep(worlds, reps):
    sizes = [8 * 8 ** k for k in range(8)] + [64 << 20]  # 8 B .. 16 MiB, and 64 MiB
    print("| world | size (B) | best fixed (us) | auto ran | auto (us) | auto / best |")
    print("|---:|---:|---|---|---:|---:|")
    worst = 0.0
    worst_other = 0.0  # rows where auto ran another algorithm than the fastest fixed one
    noise = 0.0  # rows where it ran the fastest: the ratio is measurement noise
    for w in worlds:
        times = {}  # size -> {algo or "auto:<ran>": [us]}
        for rep in range(reps):
            print(f"[sweep] rep {rep + 1}/{reps} world {w}", file=sys.stderr)
            for s in sizes:
                # Every algorithm and auto in one job, in an order rotated per repetition,
                # so that no contender always runs first or last.
                k = rep % len(ALGOS)
                rows = tccl(w, s, ",".join(ALGOS[k:] + ALGOS[:k]))
                for ran, t, _, wrong, requested in rows:
                    assert wrong == 0, (w, s, ran)
                    key = "auto:" + ran if requested == "auto" else ran
                    times.setdefault(s, {}).setdefault(key, []).append(t)
        for s in sizes:
            fixed = {a: med(v) for a, v in times[s].items() if not a.startswith("auto:")}
            best = min(fixed, key=fixed.get)
            auto_t = med([t for a, v in times[s].items() if a.startswith("auto:") for t in v])
            ran = "/".join(sorted(a[5:] for a in times[s] if a.startswith("auto:")))
            ratio = auto_t / fixed[best]
            worst = max(worst, ratio)
            if ran == best:
                noise = max(noise, abs(ratio - 1))
            else:
                worst_other = max(worst_other, ratio)
            print(f"| {w} | {s} | {best} {fixed[best]:.1f} | {ran} | {auto_t:.1f} | {ratio:.2f} |")
    print(f"\nworst auto / best fixed: {worst:.2f}")
    print(f"worst where auto ran another algorithm than the fastest fixed one: {worst_other:.2f}")
    print(f"largest deviation where auto ran the fastest one itself (noise): {noise:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--no-python", action="store_true", help="leave out the torch and import tccl rows")
    ap.add_argument("--sizes", default="8,1M,64M",
                    help="compare mode: a subset of 8, 1M and 64M (default: all three)")
    a = ap.parse_args()
    worlds = [int(x) for x in a.worlds.split(",")]
    if a.sweep:
        sweep(worlds, a.reps)
    else:
        names = {"8": 8, "1M": 1 << 20, "64M": 64 << 20}
        bad = [x for x in a.sizes.split(",") if x not in names]
        if bad:
            ap.error(f"--sizes: {bad} not among 8, 1M, 64M")
        compare(worlds, a.reps, python=not a.no_python, sizes=[names[x] for x in a.sizes.split(",")])


if __name__ == "__main__":
    main()
