#!/usr/bin/env python3
"""bench/whatif_table.py: bench/whatif_sim.sh's output -> the markdown tables of
docs/PERFORMANCE.md ("What if"). One table per world: a row per NIC rate, ranks per host
and size; a column per algorithm (simulated time, the fastest in bold); then auto's pick,
the cost model's choice, and how much slower it replays than the fastest. A cell the
replays lack shows the cost model's figure for it in italics ("_model 21.80 ms_") when an
auto line gave one (bench/whatif_sim.sh's auto lines, or `--algo auto --no-replay-auto`).

    bench/whatif_sim.sh build/tccl | bench/whatif_table.py
"""
import re
import sys

ALGOS = ["ring", "tree", "hd", "hier"]


def size_name(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} us"


def main():
    rows, picks, model = {}, {}, {}
    for line in sys.stdin:
        m = re.match(r"# (\d+),(\d+),(\d+): # (\d+) B: auto picks (\w+) ", line)
        if m:
            key = tuple(int(x) for x in m.groups()[:4])
            picks[key] = m.group(5)
            model[key] = {a: float(us) for a, us in re.findall(r"(\w+) ([0-9.]+) us", line)}
            continue
        f = line.strip().split(",")
        if len(f) < 8 or not f[0].isdigit():
            continue
        world, gbps, rph, size = int(f[0]), int(f[1]), int(f[2]), int(f[3])
        algo = f[6].removeprefix("auto:")
        rows.setdefault((world, gbps, rph, size), {})[algo] = (float(f[7]), float(f[12]))
    for world in sorted({k[0] for k in rows}):
        print(f"\n**{world:,} ranks** (simulated time per all-reduce; fastest in bold)\n")
        print("| NIC | ranks/host | size | " + " | ".join(ALGOS) + " | auto picks | auto vs fastest |")
        print("|---" * (len(ALGOS) + 5) + "|")
        for key in sorted(k for k in rows if k[0] == world):
            r = rows[key]
            best = min(r, key=lambda a: r[a][0])
            cells = []
            for a in ALGOS:
                if a not in r:
                    if a == "hier" and key[2] == 1:
                        cells.append("= ring")
                    elif a in model.get(key, {}):
                        cells.append(f"_model {fmt_us(model[key][a])}_")
                    else:
                        cells.append("-")
                else:
                    t = fmt_us(r[a][0])
                    cells.append(f"**{t}**" if a == best else t)
            pick = picks.get(key, "")
            loss = ""
            if pick in r and len(r) == 1:
                loss = "- (one replay)"
            elif pick in r:
                loss = f"{(r[pick][0] / r[best][0] - 1) * 100:+.0f} %"
                if pick == best or (pick == "hier" and key[2] == 1):
                    loss = "agrees" if pick == best else loss
            print(f"| {key[1]} Gb/s | {key[2]} | {size_name(key[3])} | " + " | ".join(cells) +
                  f" | {pick} | {loss} |")
        walls = [w for k, v in rows.items() if k[0] == world for (_, w) in v.values()]
        print(f"\nReplay wall time here: {min(walls):.1f} to {max(walls):.1f} s per row.")


if __name__ == "__main__":
    main()
