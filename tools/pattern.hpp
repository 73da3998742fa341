// The data `tccl demo` and `tccl bench` check results with: inputs that depend on the
// rank and on the element's index, exact in every dtype, and expected results from a
// closed form computed here, never by tccl's reduction code.
//
// Reductions (all-reduce, reduce, reduce-scatter): with h(i) a hash of the global index
// i, t(i) = h(i) mod (T+1) and e(i) = (h(i) >> 32) mod m, rank r holds at index i
//   sum, avg, min, max:  e(i) + [r < t(i)]          prod:  1 + [r < t(i)]
// so that, for a world of n,
//   sum = t + n e,  avg = sum / n (rounded as the dtype divides),  min = e + [t = n],
//   max = e + [t > 0],  prod = 2^t (wrapping in the integer types, inf past the range).
// The bitwise ops (integer dtypes): bor: e + 64 [r < t], band: e + 64 [r >= t], bxor:
// e [r = 0] + 64 [r < t], so bor = e + 64 [t > 0], band = e + 64 [t = 0], bxor = e + 64
// [min(t, n) odd] (e < 7: every value below 128).
// T and m keep every partial sum an integer the dtype holds exactly (256 for bfloat16,
// 2048 for float16, 127 for int8, ...), in whatever order an algorithm adds: no result
// depends on the order, so each must match bit for bit. Products are powers of two.
// Data moved without arithmetic (gathers, broadcast, scatter, all-to-all, sendrecv):
// the element i that rank `src` sends to rank `dst` is (h(i) + 31 src + 7 dst) mod 97,
// an integer every dtype holds.
// A chunk at the wrong offset, from the wrong rank or to the wrong rank changes h(i),
// src or dst and so, almost always, the value.
#pragma once

#include <cstddef>
#include <optional>

#include "tccl/tccl.hpp"

namespace tccl::cli::pattern {

// Rank `rank`'s input at global index i of a reduction over `n` ranks.
double reduceInput(int rank, size_t i, int n, DataType dtype, ReduceOp op);
// The exact result at global index i (already rounded to the dtype).
double reduceExpected(size_t i, int n, DataType dtype, ReduceOp op);
// The element i that rank src sends to rank dst in a collective that only moves data.
double moved(int src, int dst, size_t i);

// Element k of buf as a double, and written from one (converted to the dtype).
double load(const void* buf, size_t k, DataType dtype);
void store(void* buf, size_t k, DataType dtype, double v);

// buf[k] = reduceInput(rank, first + k, ...) for k < count.
void fillReduce(void* buf, size_t count, DataType dtype, ReduceOp op, int rank, int n,
                size_t first);
// buf[k] = moved(src, dst, first + k).
void fillMoved(void* buf, size_t count, DataType dtype, int src, int dst, size_t first);

struct Wrong {
  size_t count = 0;  // elements that differ
  // The first of them: its index in buf, what it holds, what it should.
  size_t index = 0;
  double actual = 0, expected = 0;
};
// Compares buf[k] with reduceExpected(first + k, ...), bit for bit in the dtype.
Wrong checkReduce(const void* buf, size_t count, DataType dtype, ReduceOp op, int n, size_t first);
// Compares buf[k] with moved(src, dst, first + k).
Wrong checkMoved(const void* buf, size_t count, DataType dtype, int src, int dst, size_t first);

}  // namespace tccl::cli::pattern
