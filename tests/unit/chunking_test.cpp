// Chunk and segment index math, the ring's chunk indices (checked by running the ring
// symbolically, element by element), and the closed forms for bytes on the wire.
#include "algorithms/chunking.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tccl::algo {
namespace {

std::vector<size_t> countGrid(size_t n) {
  std::vector<size_t> counts = {0, 1, n - 1, n, n + 1, 2 * n + 3, 100003};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

TEST(ChunkRange, KnownValues) {
  // 10 over 4: sizes 3 3 2 2.
  EXPECT_EQ(chunkRange(10, 4, 0), (Range{0, 3}));
  EXPECT_EQ(chunkRange(10, 4, 1), (Range{3, 3}));
  EXPECT_EQ(chunkRange(10, 4, 2), (Range{6, 2}));
  EXPECT_EQ(chunkRange(10, 4, 3), (Range{8, 2}));
  // Fewer elements than parts: trailing chunks are empty and sit at the end.
  EXPECT_EQ(chunkRange(2, 4, 0), (Range{0, 1}));
  EXPECT_EQ(chunkRange(2, 4, 1), (Range{1, 1}));
  EXPECT_EQ(chunkRange(2, 4, 2), (Range{2, 0}));
  EXPECT_EQ(chunkRange(2, 4, 3), (Range{2, 0}));
  EXPECT_EQ(chunkRange(0, 3, 2), (Range{0, 0}));
  EXPECT_EQ(chunkRange(7, 1, 0), (Range{0, 7}));
}

TEST(ChunkRange, ContiguousBalancedBiggerFirstOverGrid) {
  for (int n = 1; n <= 17; ++n) {
    const size_t un = static_cast<size_t>(n);
    for (size_t count : countGrid(un)) {
      SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count));
      size_t next = 0;
      size_t minSize = SIZE_MAX;
      size_t maxSize = 0;
      size_t prevSize = SIZE_MAX;
      for (int i = 0; i < n; ++i) {
        const Range r = chunkRange(count, n, i);
        ASSERT_EQ(r.offset, next) << "chunk " << i << " is not contiguous with chunk " << i - 1;
        const size_t expected = count / un + (static_cast<size_t>(i) < count % un ? 1 : 0);
        ASSERT_EQ(r.count, expected) << "chunk " << i;
        ASSERT_LE(r.count, prevSize) << "chunk " << i << " is bigger than the one before it";
        prevSize = r.count;
        minSize = std::min(minSize, r.count);
        maxSize = std::max(maxSize, r.count);
        next = r.offset + r.count;
      }
      EXPECT_EQ(next, count) << "chunks do not end at count";
      EXPECT_LE(maxSize - minSize, 1u);
    }
  }
}

TEST(Segments, KnownValues) {
  EXPECT_EQ(segmentCount(0, 5), 0u);
  EXPECT_EQ(segmentCount(1, 5), 1u);
  EXPECT_EQ(segmentCount(5, 5), 1u);
  EXPECT_EQ(segmentCount(6, 5), 2u);
  EXPECT_EQ(segmentCount(7, 1), 7u);
  EXPECT_EQ(segmentRange(Range{10, 7}, 3, 0), (Range{10, 3}));
  EXPECT_EQ(segmentRange(Range{10, 7}, 3, 1), (Range{13, 3}));
  EXPECT_EQ(segmentRange(Range{10, 7}, 3, 2), (Range{16, 1}));
  EXPECT_EQ(segmentRange(Range{4, 2}, 1000, 0), (Range{4, 2}));
}

TEST(Segments, CoverEveryChunkExactly) {
  for (int n = 1; n <= 17; ++n) {
    for (size_t count : countGrid(static_cast<size_t>(n))) {
      for (int i = 0; i < n; ++i) {
        const Range chunk = chunkRange(count, n, i);
        for (size_t seg : {size_t{1}, size_t{3}, size_t{1000}, chunk.count + 1, size_t{1} << 40}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count) +
                       " chunk=" + std::to_string(i) + " segElems=" + std::to_string(seg));
          const size_t segs = segmentCount(chunk.count, seg);
          ASSERT_EQ(segs, (chunk.count + seg - 1) / seg);
          size_t next = chunk.offset;
          for (size_t k = 0; k < segs; ++k) {
            const Range s = segmentRange(chunk, seg, k);
            ASSERT_EQ(s.offset, next) << "segment " << k;
            ASSERT_GT(s.count, 0u) << "segment " << k << " is empty";
            if (k + 1 < segs) {
              ASSERT_EQ(s.count, seg) << "only the last segment may be short";
            } else {
              ASSERT_LE(s.count, seg);
            }
            next = s.offset + s.count;
          }
          ASSERT_EQ(next, chunk.offset + chunk.count);
        }
      }
    }
  }
}

TEST(RingIndices, KnownValuesAndMod) {
  EXPECT_EQ(mod(-1, 5), 4);
  EXPECT_EQ(mod(-6, 5), 4);
  EXPECT_EQ(mod(5, 5), 0);
  EXPECT_EQ(mod(int64_t{-7}, 3), 2);
  EXPECT_EQ(mod(0, 1), 0);
  // n = 5, rank 2.
  EXPECT_EQ(ring::next(2, 5), 3);
  EXPECT_EQ(ring::prev(2, 5), 1);
  EXPECT_EQ(ring::next(4, 5), 0);
  EXPECT_EQ(ring::prev(0, 5), 4);
  EXPECT_EQ(ring::rsSendChunk(2, 5, 0), 2);
  EXPECT_EQ(ring::rsRecvChunk(2, 5, 0), 1);
  EXPECT_EQ(ring::rsSendChunk(2, 5, 3), 4);
  EXPECT_EQ(ring::rsRecvChunk(2, 5, 3), 3);
  EXPECT_EQ(ring::ownedChunk(2, 5), 3);
  EXPECT_EQ(ring::agSendChunk(2, 5, 0), 3);
  EXPECT_EQ(ring::agRecvChunk(2, 5, 0), 2);
  EXPECT_EQ(ring::agSendChunk(2, 5, 3), 0);
  EXPECT_EQ(ring::agRecvChunk(2, 5, 3), 4);
}

TEST(RingIndices, SendAndReceiveAgreeAndNeverCollide) {
  for (int n = 1; n <= 16; ++n) {
    for (int r = 0; r < n; ++r) {
      const int prev = ring::prev(r, n);
      std::vector<int> rsRecv;
      std::vector<int> agRecv;
      for (int s = 0; s + 1 < n; ++s) {
        SCOPED_TRACE("n=" + std::to_string(n) + " r=" + std::to_string(r) +
                     " s=" + std::to_string(s));
        // What r receives at step s is what its predecessor sends at step s.
        EXPECT_EQ(ring::rsRecvChunk(r, n, s), ring::rsSendChunk(prev, n, s));
        EXPECT_EQ(ring::agRecvChunk(r, n, s), ring::agSendChunk(prev, n, s));
        // A rank never receives into the chunk it is sending in the same step.
        EXPECT_NE(ring::rsRecvChunk(r, n, s), ring::rsSendChunk(r, n, s));
        EXPECT_NE(ring::agRecvChunk(r, n, s), ring::agSendChunk(r, n, s));
        // From step 1 on, a rank forwards what it received in the step before.
        if (s >= 1) {
          EXPECT_EQ(ring::rsSendChunk(r, n, s), ring::rsRecvChunk(r, n, s - 1));
          EXPECT_EQ(ring::agSendChunk(r, n, s), ring::agRecvChunk(r, n, s - 1));
        }
        rsRecv.push_back(ring::rsRecvChunk(r, n, s));
        agRecv.push_back(ring::agRecvChunk(r, n, s));
      }
      if (n >= 2) {
        // All-gather starts by sending the chunk reduce-scatter finished on this rank.
        EXPECT_EQ(ring::agSendChunk(r, n, 0), ring::ownedChunk(r, n));
        EXPECT_EQ(ring::rsRecvChunk(r, n, n - 2), ring::ownedChunk(r, n));
      }
      // Reduce-scatter receives every chunk but r; all-gather every chunk but r+1.
      std::sort(rsRecv.begin(), rsRecv.end());
      std::sort(agRecv.begin(), agRecv.end());
      std::vector<int> allBut;
      for (int c = 0; c < n; ++c) {
        if (c != r) allBut.push_back(c);
      }
      EXPECT_EQ(rsRecv, allBut) << "n=" << n << " r=" << r;
      allBut.clear();
      for (int c = 0; c < n; ++c) {
        if (c != ring::ownedChunk(r, n)) allBut.push_back(c);
      }
      EXPECT_EQ(agRecv, allBut) << "n=" << n << " r=" << r;
    }
  }
}

// Runs the ring symbolically: every element on every rank is a bit set of the ranks
// whose input has been folded into it. A receive that would fold a contribution twice
// (overlapping sets) is a failure, as is a rank that ends without every contribution.
TEST(RingIndices, SymbolicRingReducesEveryElementOnce) {
  for (int n = 1; n <= 12; ++n) {
    const size_t un = static_cast<size_t>(n);
    std::vector<size_t> counts = {0, 1, un - 1, un, un + 1, 37, 1000};
    for (size_t count : counts) {
      SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count));
      const uint32_t all = (1u << n) - 1;
      std::vector<std::vector<uint32_t>> have(un, std::vector<uint32_t>(count));
      for (int r = 0; r < n; ++r) {
        std::fill(have[static_cast<size_t>(r)].begin(), have[static_cast<size_t>(r)].end(),
                  1u << r);
      }
      // Reduce-scatter: all ranks send at once (a snapshot), then all receive.
      for (int s = 0; s + 1 < n; ++s) {
        std::vector<std::vector<uint32_t>> sent(un);
        for (int r = 0; r < n; ++r) {
          const Range c = chunkRange(count, n, ring::rsSendChunk(r, n, s));
          const auto& mine = have[static_cast<size_t>(r)];
          sent[static_cast<size_t>(r)].assign(
              mine.begin() + static_cast<ptrdiff_t>(c.offset),
              mine.begin() + static_cast<ptrdiff_t>(c.offset + c.count));
        }
        for (int r = 0; r < n; ++r) {
          const int from = ring::prev(r, n);
          const Range c = chunkRange(count, n, ring::rsRecvChunk(r, n, s));
          const auto& payload = sent[static_cast<size_t>(from)];
          ASSERT_EQ(payload.size(), c.count) << "step " << s << " rank " << r;
          for (size_t i = 0; i < c.count; ++i) {
            uint32_t& mine = have[static_cast<size_t>(r)][c.offset + i];
            ASSERT_EQ(mine & payload[i], 0u) << "rank " << r << " step " << s << " element "
                                             << c.offset + i << " folds a contribution twice";
            mine |= payload[i];
          }
        }
      }
      for (int r = 0; r < n; ++r) {
        const Range owned = chunkRange(count, n, ring::ownedChunk(r, n));
        for (size_t i = 0; i < owned.count; ++i) {
          ASSERT_EQ(have[static_cast<size_t>(r)][owned.offset + i], all)
              << "rank " << r << " owned element " << owned.offset + i << " is incomplete";
        }
      }
      // All-gather: copies.
      for (int s = 0; s + 1 < n; ++s) {
        std::vector<std::vector<uint32_t>> sent(un);
        for (int r = 0; r < n; ++r) {
          const Range c = chunkRange(count, n, ring::agSendChunk(r, n, s));
          const auto& mine = have[static_cast<size_t>(r)];
          for (size_t i = 0; i < c.count; ++i) {
            ASSERT_EQ(mine[c.offset + i], all)
                << "rank " << r << " all-gather step " << s << " forwards an incomplete element";
          }
          sent[static_cast<size_t>(r)].assign(
              mine.begin() + static_cast<ptrdiff_t>(c.offset),
              mine.begin() + static_cast<ptrdiff_t>(c.offset + c.count));
        }
        for (int r = 0; r < n; ++r) {
          const int from = ring::prev(r, n);
          const Range c = chunkRange(count, n, ring::agRecvChunk(r, n, s));
          ASSERT_EQ(sent[static_cast<size_t>(from)].size(), c.count);
          std::copy(sent[static_cast<size_t>(from)].begin(), sent[static_cast<size_t>(from)].end(),
                    have[static_cast<size_t>(r)].begin() + static_cast<ptrdiff_t>(c.offset));
        }
      }
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(have[static_cast<size_t>(r)][i], all)
              << "rank " << r << " element " << i << " is incomplete after all-gather";
        }
      }
    }
  }
}

TEST(BytesSent, RingKnownValues) {
  // 10 elements over 4 ranks: chunk sizes 3 3 2 2. Rank r skips chunks r+1 and r+2.
  EXPECT_EQ(ringBytesSent(10, 4, 4, 0), (20u - 3 - 2) * 4);  // skips 1, 2
  EXPECT_EQ(ringBytesSent(10, 4, 4, 1), (20u - 2 - 2) * 4);  // skips 2, 3
  EXPECT_EQ(ringBytesSent(10, 4, 4, 2), (20u - 2 - 3) * 4);  // skips 3, 0
  EXPECT_EQ(ringBytesSent(10, 4, 4, 3), (20u - 3 - 3) * 4);  // skips 0, 1
  EXPECT_EQ(ringBytesSent(1000, 8, 1, 0), 0u);
  EXPECT_EQ(ringBytesSent(1000, 8, 2, 0), 8000u);  // n = 2: V
  EXPECT_EQ(ringBytesSent(1000, 8, 2, 1), 8000u);
  EXPECT_EQ(ringBytesSent(0, 8, 5, 3), 0u);
  // One element over 3 ranks: chunk 0 holds it. Rank 0 skips the empty chunks 1 and 2, so
  // sends it twice (reduce-scatter and all-gather); ranks 1 and 2 skip chunk 0 once.
  EXPECT_EQ(ringBytesSent(1, 4, 3, 0), 8u);
  EXPECT_EQ(ringBytesSent(1, 4, 3, 1), 4u);
  EXPECT_EQ(ringBytesSent(1, 4, 3, 2), 4u);
}

TEST(BytesSent, RingMatchesChunkIndicesAndBound) {
  for (int n = 1; n <= 16; ++n) {
    const size_t un = static_cast<size_t>(n);
    for (size_t count : countGrid(un)) {
      uint64_t total = 0;
      for (int r = 0; r < n; ++r) {
        uint64_t elems = 0;
        for (int s = 0; s + 1 < n; ++s) {
          elems += chunkRange(count, n, ring::rsSendChunk(r, n, s)).count;
          elems += chunkRange(count, n, ring::agSendChunk(r, n, s)).count;
        }
        EXPECT_EQ(ringBytesSent(count, 4, n, r), elems * 4)
            << "n=" << n << " count=" << count << " r=" << r;
        total += ringBytesSent(count, 4, n, r);
      }
      // Every rank together sends each chunk 2(n-1) times.
      EXPECT_EQ(total, 2 * (un - 1) * count * 4) << "n=" << n << " count=" << count;
      if (count % un == 0) {
        for (int r = 0; r < n; ++r) {
          EXPECT_DOUBLE_EQ(static_cast<double>(ringBytesSent(count, 4, n, r)),
                           allreduceBoundBytes(count, 4, n))
              << "n=" << n << " count=" << count << " r=" << r;
        }
      }
    }
  }
}

TEST(BytesSent, NaiveAndBound) {
  EXPECT_EQ(naiveBytesSent(1000, 4, 1), 0u);
  EXPECT_EQ(naiveBytesSent(1000, 4, 2), 4000u);
  EXPECT_EQ(naiveBytesSent(1000, 4, 5), 16000u);
  EXPECT_EQ(naiveBytesSent(0, 4, 5), 0u);
  // Large enough to overflow 32 bits.
  EXPECT_EQ(naiveBytesSent(size_t{1} << 30, 8, 9), uint64_t{8} * 8 * (uint64_t{1} << 30));
  EXPECT_DOUBLE_EQ(allreduceBoundBytes(10, 4, 4), 60.0);
  EXPECT_DOUBLE_EQ(allreduceBoundBytes(1000, 8, 2), 8000.0);
  EXPECT_DOUBLE_EQ(allreduceBoundBytes(1000, 8, 1), 0.0);
  EXPECT_DOUBLE_EQ(allreduceBoundBytes(3, 4, 3), 16.0);  // 2 * 2/3 * 12
}

}  // namespace
}  // namespace tccl::algo
