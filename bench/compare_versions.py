#!/usr/bin/python3
"""Two tccl builds side by side: the all-reduce of record (8 B and 64 MiB float32 sum, `auto`)
through each build's own `tccl bench`, interleaved in every repetition, medians per row.

It answers "did a change slow the collectives down": the old build is a checkout of the commit
before the change (git worktree add ../before COMMIT; cmake it in Release), the new one this tree.

    /usr/bin/python3 bench/compare_versions.py OLD_TCCL NEW_TCCL [--worlds 2,4,8] [--reps 5]
        [--sizes 8,67108864] [--limit-time 1.05] [--limit-busbw 0.95]

Per repetition the order of the two builds alternates (old first in odd repetitions). It prints a
markdown table of the medians and the new / old ratios, and exits 1 when a run failed or had
#wrong > 0, or when a ratio misses its limit: time at sizes below 1 MiB at most --limit-time x the
old, busbw at 1 MiB and above at least --limit-busbw x the old.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_all  # noqa: E402  (its runner, iteration counts and timeouts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="8,67108864")
    ap.add_argument("--limit-time", type=float, default=1.05)
    ap.add_argument("--limit-busbw", type=float, default=0.95)
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    sizes = [int(s) for s in a.sizes.split(",")]
    builds = {"old": a.old, "new": a.new}
    for name, path in builds.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"compare_versions: {name} build {path} is not an executable")
    samples = {}  # (build, world, size) -> [(time_us, busbw)]
    failed = []
    for rep in range(a.reps):
        order = ["old", "new"] if rep % 2 == 0 else ["new", "old"]
        for world in worlds:
            for size in sizes:
                for b in order:
                    compare_all.TCCL = builds[b]
                    try:
                        rows = compare_all.tccl(world, size, "auto")
                    except Exception as e:  # a failed or timed-out run: recorded, not fatal
                        failed.append(f"{b} world {world} size {size}: {e}")
                        continue
                    for ran, t, busbw, wrong, _ in rows:
                        if wrong:
                            failed.append(f"{b} world {world} size {size}: #wrong {wrong}")
                        samples.setdefault((b, world, size), []).append((t, busbw, ran))
                print(f"[compare_versions] rep {rep + 1}/{a.reps} world {world} done",
                      file=sys.stderr, flush=True)
    print(f"| world | size | ran (old/new) | old time (us) | new time (us) | new / old time "
          f"| old busbw | new busbw | new / old busbw | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bad = []
    for world in worlds:
        for size in sizes:
            o, n = samples.get(("old", world, size), []), samples.get(("new", world, size), [])
            if len(o) != a.reps or len(n) != a.reps:
                failed.append(f"world {world} size {size}: {len(o)} old, {len(n)} new runs")
                continue
            ot = statistics.median(x[0] for x in o)
            nt = statistics.median(x[0] for x in n)
            ob = statistics.median(x[1] for x in o)
            nb = statistics.median(x[1] for x in n)
            if size < (1 << 20):
                ok = nt <= a.limit_time * ot
                rule = f"time <= {a.limit_time}x"
            else:
                ok = nb >= a.limit_busbw * ob
                rule = f"busbw >= {a.limit_busbw}x"
            if not ok:
                bad.append(f"world {world} size {size}")
            ran = "/".join(sorted({x[2] for x in o} | {x[2] for x in n}))
            print(f"| {world} | {size} | {ran} | {ot:.2f} | {nt:.2f} | {nt / ot:.3f} | {ob:.4f} "
                  f"| {nb:.4f} | {nb / ob if ob else 0:.3f} | {'ok' if ok else 'MISSED'} ({rule}) |")
    for f in failed:
        print(f"FAILED: {f}")
    for b in bad:
        print(f"MISSED: {b}")
    sys.exit(1 if failed or bad else 0)


if __name__ == "__main__":
    main()
