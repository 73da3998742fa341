"""torch.distributed point to point on backend "tccl": one scenario (argv[1]) per run,
checked against exact data that depends on sender, receiver, tag and index
(tests/python/test_torch_p2p.py runs it on N ranks). Prints "OK <what>" at the end.

Scenarios: exchange BYTES | batch BYTES | tags | anysource BYTES | many K | noreceiver BYTES
"""

import datetime
import sys
import time

import torch
import torch.distributed as dist

import tccl.torch_backend  # noqa: F401  (registers "tccl")


def pattern(src, dst, tag, n):
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 131) ^ (src * 17) ^ (dst * 5) ^ (tag * 3) ^ (i >> 9)
    return (v & 0xFF).to(torch.uint8)


def expect(got, src, dst, tag, what):
    want = pattern(src, dst, tag, got.numel())
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[0].item()
        raise AssertionError(f"rank {dist.get_rank()} {what}: first wrong byte at {bad} of "
                             f"{got.numel()}: got {got[bad].item()}, want {want[bad].item()}")


def main():
    scenario = sys.argv[1]
    arg = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    timeout = datetime.timedelta(seconds=2 if scenario == "noreceiver" else 60)
    dist.init_process_group("tccl", timeout=timeout)
    r, n = dist.get_rank(), dist.get_world_size()
    right, left = (r + 1) % n, (r - 1) % n
    if scenario == "exchange":
        out, inp = pattern(r, right, 1, arg), torch.full((arg,), 0xA5, dtype=torch.uint8)
        s = dist.isend(out, right, tag=1)
        v = dist.irecv(inp, left, tag=1)
        s.wait()
        v.wait()
        expect(inp, left, r, 1, "isend/irecv exchange")
    elif scenario == "batch":
        out, inp = pattern(r, right, 0, arg), torch.zeros(arg, dtype=torch.uint8)
        ops = [dist.P2POp(dist.irecv, inp, left), dist.P2POp(dist.isend, out, right)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        expect(inp, left, r, 0, "batch_isend_irecv ring")
    elif scenario == "tags":
        if r == 0:
            dist.send(pattern(0, 1, 1, 3000), 1, tag=1)
            dist.send(pattern(0, 1, 2, 200000), 1, tag=2)
        elif r == 1:
            b, a = torch.zeros(200000, dtype=torch.uint8), torch.zeros(3000, dtype=torch.uint8)
            dist.recv(b, 0, tag=2)
            dist.recv(a, 0, tag=1)
            expect(b, 0, 1, 2, "tag 2")
            expect(a, 0, 1, 1, "tag 1")
    elif scenario == "anysource":
        if r == 0:
            seen = []
            for _ in range(n - 1):
                t = torch.zeros(arg, dtype=torch.uint8)
                src = dist.recv(t, tag=5)  # no src: from any rank
                expect(t, src, 0, 5, f"any-source message from {src}")
                seen.append(src)
            assert sorted(seen) == list(range(1, n)), seen
        else:
            dist.send(pattern(r, 0, 5, arg), 0, tag=5)
    elif scenario == "many":
        works, inps = [], []
        for i in range(arg):
            inps.append(torch.zeros(1, dtype=torch.int64))
            works.append(dist.irecv(inps[-1], left, tag=i % 4))
        outs = [torch.tensor([(r << 32) + i], dtype=torch.int64) for i in range(arg)]
        for i in range(arg):
            works.append(dist.isend(outs[i], right, tag=i % 4))
        for w in works:
            w.wait()
        for i in range(arg):
            assert inps[i].item() == (left << 32) + i, (i, inps[i].item())
    elif scenario == "noreceiver":
        if r == 0:
            t0 = time.monotonic()
            try:
                dist.isend(pattern(0, 1, 6, arg), 1, tag=6).wait()
                raise AssertionError("a send nobody receives completed")
            except RuntimeError as e:
                took = time.monotonic() - t0
                msg = str(e)
                assert "tag 6" in msg and "rank 1" in msg and "alive" in msg, msg
                assert 1.5 < took < 8, took
                print(f"ERROR {took:.2f} {msg}")
        else:
            time.sleep(3)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    dist.barrier()
    print(f"OK {scenario}")


if __name__ == "__main__":
    main()
