#include "algorithms/chunking.hpp"

#include <algorithm>

namespace tccl::algo {

Range chunkRange(size_t count, int parts, int i) {
  const size_t p = static_cast<size_t>(parts);
  const size_t idx = static_cast<size_t>(i);
  const size_t base = count / p;
  const size_t rem = count % p;
  Range r;
  r.offset = idx * base + std::min(idx, rem);
  r.count = base + (idx < rem ? 1 : 0);
  return r;
}

size_t segmentCount(size_t n, size_t segElems) { return (n + segElems - 1) / segElems; }

Range segmentRange(Range chunk, size_t segElems, size_t k) {
  Range r;
  r.offset = chunk.offset + k * segElems;
  r.count = std::min(segElems, chunk.count - k * segElems);
  return r;
}

uint64_t ringBytesSent(size_t count, size_t elemSize, int n, int r) {
  if (n <= 1) return 0;
  const size_t a = chunkRange(count, n, ring::ownedChunk(r, n)).count;
  const size_t b = chunkRange(count, n, mod(int64_t{r} + 2, n)).count;
  return static_cast<uint64_t>(2 * count - a - b) * elemSize;
}

uint64_t naiveBytesSent(size_t count, size_t elemSize, int n) {
  return n <= 1 ? 0 : static_cast<uint64_t>(n - 1) * count * elemSize;
}

double allreduceBoundBytes(size_t count, size_t elemSize, int n) {
  return 2.0 * (n - 1) / n * static_cast<double>(count) * static_cast<double>(elemSize);
}

}  // namespace tccl::algo
