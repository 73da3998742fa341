// The payload bytes a rank of the ring and of the naive all-reduce sends and receives,
// written from docs/algorithms.md for the tests, independently of src/algorithms (whose
// chunking helpers the schedules themselves use: an expectation computed with them would
// agree with a schedule that got them wrong).
//
// The vector of `count` elements is cut into n chunks, the first count % n of them one
// element longer. In the ring's reduce-scatter rank r sends every chunk but (r+1) mod n,
// which it ends up owning, and receives every chunk but r, its first send; in the
// all-gather it sends every chunk but (r+2) mod n and receives every chunk but
// (r+1) mod n, which it already holds. Naive sends the whole vector to each other rank.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tccl::testing {

inline uint64_t chunkElems(size_t count, int n, int c) {
  const size_t parts = static_cast<size_t>(n);
  return count / parts + (static_cast<size_t>(c) < count % parts ? 1 : 0);
}

inline uint64_t ringSentBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  return (2 * uint64_t{count} - chunkElems(count, n, (r + 1) % n) -
          chunkElems(count, n, (r + 2) % n)) *
         elem;
}

inline uint64_t ringRecvBytes(size_t count, size_t elem, int n, int r) {
  if (n <= 1) return 0;
  return (2 * uint64_t{count} - chunkElems(count, n, r) - chunkElems(count, n, (r + 1) % n)) * elem;
}

inline uint64_t naiveSentBytes(size_t count, size_t elem, int n) {
  return n <= 1 ? 0 : static_cast<uint64_t>(n - 1) * count * elem;
}

}  // namespace tccl::testing
