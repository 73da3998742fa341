#!/usr/bin/python3
"""One rank of a point-to-point benchmark through Python, osu_bw / osu_latency style: torch.distributed
with the tccl or gloo backend, or `import tccl` on numpy. Run 2 of it under `tccl launch`:

    tccl launch --nproc-per-node 2 --no-tag-output -- \\
        /usr/bin/python3 bench/py_p2p.py IMPL MODE SIZE ITERS WARMUP [WINDOW]

IMPL: torch-tccl | torch-gloo | tccl-numpy. MODE: bw | latency. SIZE in bytes (a multiple of 4).
- bw: rank 0 posts a window (WINDOW, default 64) of isend, one after another, and waits for
  them all; rank 1 posts as many irecv and waits; then rank 1 sends a 4-byte ack. Time per
  message: a window's time / WINDOW.
- latency: blocking send and recv back and forth; time: half a round trip.

Every message's data depends on the window's index and the message's place in it; rank 1
checks every message of every window (after the timed loop for the timing windows, whose last
contents it keeps: each window overwrites the buffers). Rank 0 prints one line:
csv,IMPL,MODE,size,window,time_us,gbps,wrong
"""
import os
import sys
import time


def main():
    impl, mode = sys.argv[1], sys.argv[2]
    size, iters, warmup = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    window = int(sys.argv[6]) if len(sys.argv) > 6 else 64
    count = max(1, size // 4)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 2:
        sys.exit("py_p2p.py: run it with 2 ranks")
    if impl.startswith("torch-"):
        import torch
        import torch.distributed as dist
        if impl == "torch-tccl":
            import tccl.torch_backend  # noqa: F401  (registers "tccl")
        dist.init_process_group(impl[len("torch-"):])
        isend, irecv, send, recv, barrier = dist.isend, dist.irecv, dist.send, dist.recv, dist.barrier
        i32 = lambda n: torch.zeros(n, dtype=torch.int32)  # noqa: E731
        peer_kw = ("dst", "src")
    elif impl == "tccl-numpy":
        import numpy as np
        import tccl
        tccl.init_process_group()
        isend, irecv, send, recv, barrier = tccl.isend, tccl.irecv, tccl.send, tccl.recv, tccl.barrier
        i32 = lambda n: np.zeros(n, dtype=np.int32)  # noqa: E731
        peer_kw = ("dst", "src")
    else:
        sys.exit(f"py_p2p.py: unknown implementation {impl!r}")
    dst_kw, src_kw = peer_kw
    peer = 1 - rank
    bufs = [i32(count) for _ in range(window)]
    ack = i32(1)

    def fill(w):  # what rank 0 sends in window w
        for i, b in enumerate(bufs):
            b[0] = w * 1000 + i
            b[-1] = -(w * 1000 + i)

    def wrong_in(w):  # rank 1: messages of window w that did not arrive as sent
        return sum(1 for i, b in enumerate(bufs) if b[0] != w * 1000 + i or b[-1] != -(w * 1000 + i))

    def bw_window(w, check):
        if rank == 0:
            if check:
                fill(w)
            works = [isend(b, **{dst_kw: peer}) for b in bufs]
            for x in works:
                x.wait()
            recv(ack, **{src_kw: peer})
            return 0
        works = [irecv(b, **{src_kw: peer}) for b in bufs]
        for x in works:
            x.wait()
        send(ack, **{dst_kw: peer})
        return wrong_in(w) if check else 0

    def ping(w, check):
        b = bufs[0]
        if rank == 0:
            if check:
                b[0], b[-1] = w, -w
            send(b, **{dst_kw: peer})
            recv(b, **{src_kw: peer})
            return 0
        recv(b, **{src_kw: peer})
        bad = 1 if check and (b[0] != w or b[-1] != -w) else 0
        send(b, **{dst_kw: peer})
        return bad

    step = bw_window if mode == "bw" else ping
    per = window if mode == "bw" else 2
    wrong = sum(step(w, True) for w in range(3))  # checked before timing
    for w in range(warmup):
        step(w, False)
    barrier()
    if rank == 0 and mode == "bw":
        fill(99)  # the timed windows all carry window 99's contents
    t0 = time.perf_counter()
    for _ in range(iters):
        step(99, False)
    per_msg = (time.perf_counter() - t0) / (iters * per)
    if rank == 1:
        wrong += wrong_in(99) if mode == "bw" else 0
        send(i32(1) + wrong, **{dst_kw: 0})
    else:
        got = i32(1)
        recv(got, **{src_kw: 1})
        wrong = int(got[0])
        print(f"csv,{impl},{mode},{size},{window},{per_msg * 1e6:.2f},"
              f"{size / per_msg / 1e9:.4f},{wrong}", flush=True)
    barrier()


if __name__ == "__main__":
    main()
