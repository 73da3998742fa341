#!/usr/bin/python3
"""Splits a small message's time from two processes' socket traces (bench/socket_trace.c).

    /usr/bin/python3 bench/socket_trace.py [--last N] TRACE_FILE...

Of the files given, the two with the most sends are taken as the two ranks (a launcher's
or store's trace, with a few sends, is left out; said on stderr). For each direction P -> Q,
over the messages after the first tenth (warm-up), or over the last N messages with --last
(the timed loop only: a program's own set-up traffic before it, such as `tccl bench`'s
300 ms of settling calls, has another pattern), medians in us of:

  send        P's send call, start to return (the sender's system call: on loopback it
              also runs the receiver's TCP stack);
  to-read     P's send start to the return of Q's next read with data (the message's
              trip, including Q noticing it and Q's read call);
  read        Q's read call that returned it, start to return;
  turnaround  the return of that read to Q's next send start: the program's own time
              between taking a message in and putting the next one out (in a ping-pong,
              the reply; in an exchange loop, the next iteration's message).

A ping-pong's half round trip is to-read + turnaround; so is an exchange's period.
"""
import bisect
import statistics
import sys


def load(path):
    ev = {0: [], 1: [], 3: [], 4: []}
    with open(path) as f:
        for line in f:
            k, t = line.split()
            k = int(k)
            if k in ev:
                ev[k].append(int(t))
    return ev


def median_us(xs):
    return statistics.median(xs) / 1000 if xs else float("nan")


def direction(p, q, last=0):
    s0, s1 = p[0], p[1]
    q3, q4, q0 = q[3], q[4], q[0]
    send, trip, read, turn = [], [], [], []
    for i, t in enumerate(s0):
        j = bisect.bisect_left(q4, t)
        if j >= len(q4):
            break
        got = q4[j]
        n = bisect.bisect_left(q0, got)
        if n >= len(q0):
            break
        m = bisect.bisect_right(q3, got) - 1
        if i < len(s1):
            send.append(s1[i] - t)
        trip.append(got - t)
        if m >= 0:
            read.append(got - q3[m])
        turn.append(q0[n] - got)
    cut = (lambda xs: xs[-last:]) if last else (lambda xs: xs[len(xs) // 10:])
    return {k: median_us(cut(v)) for k, v in
            (("send", send), ("to-read", trip), ("read", read), ("turnaround", turn))}, \
        len(cut(trip))


def main():
    files = sys.argv[1:]
    last = 0
    if files[:1] == ["--last"] and len(files) > 1:
        last = int(files[1])
        files = files[2:]
    if len(files) < 2:
        sys.exit(__doc__)
    traces = sorted(((load(f), f) for f in files), key=lambda x: len(x[0][0]), reverse=True)
    for _, f in traces[2:]:
        print(f"socket_trace.py: left out {f} (fewer sends)", file=sys.stderr)
    (a, fa), (b, fb) = traces[0], traces[1]
    for (p, fp), (q, fq) in (((a, fa), (b, fb)), ((b, fb), (a, fa))):
        r, n = direction(p, q, last)
        print(f"{fp} -> {fq}: {n} messages; " +
              ", ".join(f"{k} {v:.3f}" for k, v in r.items()) + " (us, medians)")


if __name__ == "__main__":
    main()
