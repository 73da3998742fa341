"""Point to point through `import tccl` on one rank: one scenario (argv[1]) per run, checked
against exact data that depends on sender, receiver, tag and index (tests/python/test_p2p.py
runs it on N ranks). Prints "OK <scenario>" at the end; exits non-zero on anything wrong.

Scenarios: exchange SIZE[,SIZE...] | tags | anysource | batch SIZE | group SIZE | many K |
           noreceiver [reuse] | truncation | torch
"""

import sys
import time

import numpy as np

import tccl

from p2p_pattern import check, pattern


def expect(got, src, dst, tag, what):
    check(got, src, dst, tag, what, tccl.get_rank())


def say(*args):
    print(*args, flush=True)


# ---- scenarios -------------------------------------------------------------------------


def exchange(c, sizes):
    """Everyone isends to the right and irecvs from the left, then waits; every size."""
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    for i, size in enumerate(sizes):
        tag = 1 + i
        out = pattern(r, right, tag, size)
        inp = np.full(size, 0xA5, dtype=np.uint8)
        t0 = time.monotonic()
        s = c.isend(out, right, tag=tag)
        v = c.irecv(inp, left, tag=tag)
        s.wait()
        v.wait()
        took = time.monotonic() - t0
        expect(inp, left, r, tag, f"exchange of {size} bytes")
        assert (v.source, v.tag) == (left, tag), (v.source, v.tag)
        assert s.source is None and s.tag is None  # a send has neither
        assert v.stats["bytes"] == size and s.stats["bytes"] == size, (v.stats, s.stats)
        assert v.stats["collective"] == "recv" and s.stats["collective"] == "send"
        say(f"size {size} took {took:.3f} s")


def tags(c):
    """Rank 0 sends tags 1..5 in order (sizes from eager to rendezvous); rank 1 receives
    them in reverse order, blocking and asynchronously, and each lands by its tag."""
    sizes = {1: 3000, 2: 200000, 3: 1, 4: 70000, 5: 2 << 20}
    if c.rank == 0:
        works = [c.isend(pattern(0, 1, t, sizes[t]), 1, tag=t) for t in sizes]
        for w in works:
            w.wait()
        c.send(pattern(0, 1, 9, 500), 1, tag=9)  # blocking, received with any tag
    elif c.rank == 1:
        bufs = {t: np.zeros(sizes[t], dtype=np.uint8) for t in sizes}
        assert c.recv(bufs[5], 0, tag=5) == 0  # the last sent, first received
        late = {t: c.irecv(bufs[t], 0, tag=t) for t in (4, 3, 2)}
        assert tccl.recv(bufs[1], 0, tag=1) == 0
        for t, w in late.items():
            w.wait()
            assert (w.source, w.tag) == (0, t), (w.source, w.tag)
        for t in sizes:
            expect(bufs[t], 0, 1, t, f"tag {t}")
        anyb = np.zeros(600, dtype=np.uint8)  # a capacity: the 500-byte message fits
        w = c.irecv(anyb, 0, tag=None)
        w.wait()
        assert (w.source, w.tag, w.stats["bytes"]) == (0, 9, 500), (w.source, w.tag, w.stats)
        expect(anyb[:500], 0, 1, 9, "any-tag receive")
        assert (anyb[500:] == 0).all()


def anysource(c):
    """Rank 0 receives from any source: the blocking recv returns the sender, and irecv
    with any source and any tag names both."""
    r, n = c.rank, c.size
    size = 300000
    if r == 0:
        seen = []
        for _ in range(n - 1):
            t = np.zeros(size, dtype=np.uint8)
            src = c.recv(t, tag=5)  # src None: from any rank
            expect(t, src, 0, 5, f"any-source message from {src}")
            seen.append(src)
        assert sorted(seen) == list(range(1, n)), seen
        seen = []
        for _ in range(n - 1):
            t = np.zeros(100, dtype=np.uint8)
            w = tccl.irecv(t, tccl.ANY_SOURCE, tag=tccl.ANY_TAG)
            w.wait()
            assert w.tag == 10 + w.source, (w.source, w.tag)
            expect(t, w.source, 0, w.tag, f"any-source any-tag message from {w.source}")
            seen.append(w.source)
        assert sorted(seen) == list(range(1, n)), seen
    else:
        tccl.send(pattern(r, 0, 5, size), 0, tag=5)
        tccl.send(pattern(r, 0, 10 + r, 100), 0, tag=10 + r)


def batch(c, size):
    """A ring through batch_isend_irecv: P2POps of tccl's functions and of the
    communicator's methods, then of torch-style argument order."""
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    for round_, (recv_op, send_op) in enumerate([(tccl.irecv, tccl.isend),
                                                 (c.irecv, c.isend)]):
        tag = 20 + round_
        out, inp = pattern(r, right, tag, size), np.zeros(size, dtype=np.uint8)
        ops = [tccl.P2POp(recv_op, inp, left, tag), tccl.P2POp(send_op, out, right, tag=tag)]
        works = tccl.batch_isend_irecv(ops)
        assert len(works) == 2
        for w in works:
            w.wait()
        expect(inp, left, r, tag, f"batch_isend_irecv ring {round_}")
        assert (works[0].source, works[0].tag) == (left, tag)


def group(c, size):
    """A ring in `with comm.group()`: blocking send before blocking recv (which would
    deadlock outside a group for a rendezvous size), isend/irecv Works, a nested group,
    wait() inside the group refused, and an exception in the block still closing it."""
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    out, inp = pattern(r, right, 30, size), np.zeros(size, dtype=np.uint8)
    with c.group():
        assert c.send(out, right, tag=30) is None
        assert c.recv(inp, left, tag=30) is None  # the sender is known at the end
    expect(inp, left, r, 30, "blocking send/recv in a group")

    out, inp = pattern(r, right, 31, size), np.zeros(size, dtype=np.uint8)
    with c.group():
        v = c.irecv(inp, left, tag=31)
        with c.group():  # nested: only the outermost posts
            s = c.isend(out, right, tag=31)
        try:
            v.wait()
            raise AssertionError("wait() inside the open group returned")
        except tccl.InvalidArgumentError as e:
            assert "group" in str(e), e
    s.wait()
    v.wait()
    expect(inp, left, r, 31, "isend/irecv in a group")
    assert (v.source, v.tag) == (left, 31)

    # The module-level group on the default communicator, with group_start/group_end.
    out, inp = pattern(r, right, 32, size), np.zeros(size, dtype=np.uint8)
    tccl.group_start()
    tccl.isend(out, right, tag=32)  # the Work is dropped: waited for at the end
    w = tccl.irecv(inp, left, tag=32)
    tccl.group_end()
    w.wait()
    expect(inp, left, r, 32, "tccl.group_start/group_end")

    # An exception inside the block: the group is closed (its operations posted, not
    # waited for), the exception propagates, and the next group opens fine.
    out, inp = pattern(r, right, 33, size), np.zeros(size, dtype=np.uint8)
    try:
        with c.group():
            s = c.isend(out, right, tag=33)
            v = c.irecv(inp, left, tag=33)
            raise KeyError("boom")
    except KeyError:
        pass
    else:
        raise AssertionError("the exception was swallowed")
    s.wait()
    v.wait()
    expect(inp, left, r, 33, "the group an exception left")
    with c.group():
        pass  # opens and closes: nothing was left open
    try:
        c.group_end()
        raise AssertionError("group_end without group_start passed")
    except tccl.InvalidArgumentError:
        pass


def many(c, k):
    """k 8-byte messages in flight each way, tags cycling, all receives posted first."""
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    inps = [np.zeros(8, dtype=np.uint8) for _ in range(k)]
    works = [c.irecv(inps[i], left, tag=i % 7) for i in range(k)]
    outs = [pattern(r, right, i % 7, 8) ^ np.uint8(i & 0xFF) for i in range(k)]
    works += [c.isend(outs[i], right, tag=i % 7) for i in range(k)]
    for w in works:
        w.wait()
    for i in range(k):
        want = pattern(left, r, i % 7, 8) ^ np.uint8(i & 0xFF)
        if not np.array_equal(inps[i], want):
            raise AssertionError(f"message {i} (tag {i % 7}): got {inps[i].tolist()}, want "
                                 f"{want.tolist()}")
        assert works[i].tag == i % 7


def noreceiver(c, reuse):
    """Rank 0's sends to rank 1, who never receives, time out after 1 s naming rank 1 and
    the tag; the communicator stays usable: a barrier, then point to point on new tags
    (reuse: on the same tags, whose timed-out messages must be gone)."""
    size = 4 << 20
    if c.rank == 0:
        for tag, blocking in ((6, True), (7, False)):
            t0 = time.monotonic()
            try:
                if blocking:
                    c.send(pattern(0, 1, tag, size), 1, tag=tag, timeout=1)
                else:
                    c.isend(pattern(0, 1, tag, size), 1, tag=tag, timeout=1.0).wait()
                raise AssertionError("a send nobody receives completed")
            except tccl.TimeoutError as e:
                took = time.monotonic() - t0
                msg = str(e)
                assert f"tag {tag}" in msg and "rank 1" in msg, msg
                assert e.peer == 1, e.fields()
                assert 1.0 <= took < 5.0, took
                say(f"ERROR {took:.2f} {msg}")
    c.barrier()  # still usable
    big, small = (6, 7) if reuse else (60, 61)
    if c.rank == 0:
        c.send(pattern(0, 1, 100 + big, size), 1, tag=big)
        c.send(pattern(0, 1, 100 + small, 100), 1, tag=small)
    elif c.rank == 1:
        a, b = np.zeros(size, dtype=np.uint8), np.zeros(100, dtype=np.uint8)
        assert c.recv(a, 0, tag=big) == 0
        w = c.irecv(b, 0, tag=small)
        w.wait()
        expect(a, 0, 1, 100 + big, f"tag {big} after the timeouts")
        expect(b, 0, 1, 100 + small, f"tag {small} after the timeouts")
        assert w.stats["bytes"] == 100


def truncation(c):
    """A receive smaller than its message raises on the receiver (eager and rendezvous
    sizes; a rendezvous sender too); a larger one takes the shorter message; the
    communicator stays usable."""
    if c.rank == 0:
        c.send(pattern(0, 1, 40, 1000), 1, tag=40)  # eager: may complete before
        try:
            c.send(pattern(0, 1, 41, 1 << 20), 1, tag=41)  # rendezvous: refused, both ends
            raise AssertionError("a send into a smaller receive passed")
        except tccl.InvalidArgumentError as e:
            assert "truncation" in str(e), e
            say(f"sender 41: {e}")
        c.send(pattern(0, 1, 42, 1000), 1, tag=42)
    elif c.rank == 1:
        for tag, cap, size in ((40, 999, 1000), (41, 512 << 10, 1 << 20)):
            t = np.zeros(cap, dtype=np.uint8)
            try:
                c.recv(t, 0, tag=tag)
                raise AssertionError(f"a {cap}-byte receive of a {size}-byte message passed")
            except tccl.InvalidArgumentError as e:
                assert "truncation" in str(e), e
                say(f"receiver {tag}: {e}")
        big = np.zeros(4000, dtype=np.uint8)
        w = c.irecv(big, 0, tag=42)
        w.wait()
        assert w.stats["bytes"] == 1000, w.stats
        expect(big[:1000], 0, 1, 42, "a short message into a large buffer")
        assert (big[1000:] == 0).all()
    c.barrier()
    exchange(c, [12345])  # still usable


def torch_tensors(c):
    """CPU torch tensors through `import tccl`: uint8 exactly, bfloat16 and float32 values,
    a 0-d tensor, and non-contiguous tensors refused."""
    import torch

    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    out = torch.from_numpy(pattern(r, right, 50, 100000))
    inp = torch.zeros(100000, dtype=torch.uint8)
    s = c.isend(out, right, tag=50)
    assert c.recv(inp, None, tag=50) == left  # any source: only the left rank sends it
    s.wait()
    expect(inp.numpy(), left, r, 50, "torch uint8")
    for dt in (torch.bfloat16, torch.float32, torch.int64, torch.float16):
        out = torch.arange(1000, dtype=dt) + r
        inp = torch.zeros(1000, dtype=dt)
        ptr = inp.data_ptr()
        works = tccl.batch_isend_irecv([tccl.P2POp(tccl.irecv, inp, left, tag=51),
                                        tccl.P2POp(tccl.isend, out, right, tag=51)])
        for w in works:
            w.wait()
        assert inp.data_ptr() == ptr  # in place
        assert torch.equal(inp, torch.arange(1000, dtype=dt) + left), (dt, inp[:4])
        assert works[0].stats["bytes"] == 1000 * inp.element_size()
    scalar_out, scalar_in = torch.tensor(float(r)), torch.tensor(-1.0)
    with c.group():
        c.isend(scalar_out, right, tag=52)
        w = c.irecv(scalar_in, left, tag=52)
    w.wait()
    assert scalar_in.item() == float(left)
    try:
        c.send(torch.zeros(10, 10)[:, 0], right)
        raise AssertionError("a non-contiguous tensor was sent")
    except tccl.InvalidArgumentError as e:
        assert "contiguous" in str(e), e


def main():
    scenario = sys.argv[1]
    args = sys.argv[2:]
    c = tccl.init_process_group(timeout=60)
    if scenario == "exchange":
        exchange(c, [int(s) for s in args[0].split(",")])
    elif scenario == "tags":
        tags(c)
    elif scenario == "anysource":
        anysource(c)
    elif scenario == "batch":
        batch(c, int(args[0]))
    elif scenario == "group":
        group(c, int(args[0]))
    elif scenario == "many":
        many(c, int(args[0]))
    elif scenario == "noreceiver":
        noreceiver(c, bool(args and args[0] == "reuse"))
    elif scenario == "truncation":
        truncation(c)
    elif scenario == "torch":
        torch_tensors(c)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    c.barrier()
    say(f"OK {scenario}")
    tccl.destroy_process_group()


if __name__ == "__main__":
    main()
