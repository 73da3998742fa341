"""The bytes the point-to-point workers send (p2p_worker.py, torch_p2p_worker.py): byte i of
the message from src to dst with tag is (i*131) ^ (src*17) ^ (dst*5) ^ (tag*3) ^ (i >> 9),
low 8 bits, so a byte in the wrong place, from the wrong rank or of the wrong tag shows.

Built and checked as numpy uint8 arrays in blocks of rows (i = 512*k + j: the first term
depends on j alone, the last is k), never through a full-size array of indices: a 1 GiB
message costs its own 1 GiB, not 8.
"""

import numpy as np

ROW = 512
BLOCK = 32 << 20  # bytes checked at a time


def _row(src, dst, tag):
    j = np.arange(ROW, dtype=np.uint32)
    return (((j * 131) ^ (src * 17) ^ (dst * 5) ^ (tag * 3)) & 0xFF).astype(np.uint8)


def fill(out, start, src, dst, tag):
    """out[:] = the message's bytes start .. start + out.size (start a multiple of ROW)."""
    row = _row(src, dst, tag)
    n = out.size
    full, k0 = n // ROW, start // ROW
    if full:
        ks = (np.arange(k0, k0 + full, dtype=np.uint64) & 0xFF).astype(np.uint8)
        np.bitwise_xor(row[None, :], ks[:, None], out=out[:full * ROW].reshape(full, ROW))
    if n % ROW:
        out[full * ROW:] = row[:n % ROW] ^ np.uint8((k0 + full) & 0xFF)


def pattern(src, dst, tag, n):
    out = np.empty(n, dtype=np.uint8)
    for start in range(0, n, BLOCK):
        fill(out[start:start + BLOCK], start, src, dst, tag)
    return out


def check(got, src, dst, tag, what, rank):
    """Raises AssertionError naming the first wrong index unless got (a uint8 array) holds
    the message exactly."""
    n = got.size
    want = np.empty(min(n, BLOCK), dtype=np.uint8)
    for start in range(0, n, BLOCK):
        block = got[start:start + BLOCK]
        w = want[:block.size]
        fill(w, start, src, dst, tag)
        if not np.array_equal(block, w):
            bad = start + int(np.argmax(block != w))
            raise AssertionError(
                f"rank {rank} {what}: first wrong byte at index {bad} of {n}: got "
                f"{int(got[bad])}, want {int(w[bad - start])} (from {src} to {dst}, tag {tag})")
