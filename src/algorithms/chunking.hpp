// Pure index math shared by the algorithms. Units are elements, never bytes, so a
// chunk never splits an element.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tccl::algo {

struct Range {
  size_t offset = 0;
  size_t count = 0;
  bool operator==(const Range&) const = default;
};

// Split `count` elements into `parts` contiguous chunks whose sizes differ by at most
// one: chunk i has count/parts elements, plus one if i < count % parts.
//   offset(i) = i * (count / parts) + min(i, count % parts)
Range chunkRange(size_t count, int parts, int i);

// Number of pipeline segments of at most segElems elements covering n elements
// (0 for n == 0).
size_t segmentCount(size_t n, size_t segElems);
// Segment k of a chunk: [chunk.offset + k*segElems, ... ) clipped to the chunk.
Range segmentRange(Range chunk, size_t segElems, size_t k);

// x mod n for possibly negative x, in [0, n).
inline int mod(int64_t x, int n) {
  int64_t m = x % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

// The ring schedule's chunk indices for rank r of n, step s in [0, n-1).
// Reduce-scatter: send chunk (r - s), receive and reduce chunk (r - s - 1).
// After n-1 steps rank r holds the fully reduced chunk (r + 1).
// All-gather: send chunk (r + 1 - s), receive and copy chunk (r - s).
namespace ring {
inline int rsSendChunk(int r, int n, int s) { return mod(int64_t{r} - s, n); }
inline int rsRecvChunk(int r, int n, int s) { return mod(int64_t{r} - s - 1, n); }
inline int agSendChunk(int r, int n, int s) { return mod(int64_t{r} + 1 - s, n); }
inline int agRecvChunk(int r, int n, int s) { return mod(int64_t{r} - s, n); }
inline int ownedChunk(int r, int n) { return mod(int64_t{r} + 1, n); }
inline int next(int r, int n) { return mod(int64_t{r} + 1, n); }
inline int prev(int r, int n) { return mod(int64_t{r} - 1, n); }
}  // namespace ring

// Closed forms for the payload bytes a rank sends (elemSize-byte elements).
// Ring: reduce-scatter sends every chunk but (r+1), all-gather every chunk but (r+2):
//   ringBytesSent(r) = (2*count - |chunk (r+1)| - |chunk (r+2)|) * elemSize
// which is exactly 2(n-1)/n * V when n divides count, and 0 for n == 1.
uint64_t ringBytesSent(size_t count, size_t elemSize, int n, int r);
// Naive: the whole vector to each of the n-1 others: (n-1) * V.
uint64_t naiveBytesSent(size_t count, size_t elemSize, int n);
// The bandwidth-optimal lower bound of all-reduce, 2(n-1)/n * V, as a real number.
double allreduceBoundBytes(size_t count, size_t elemSize, int n);

}  // namespace tccl::algo
