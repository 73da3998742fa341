// The all-reduce schedules as data: byte counts against the closed forms, message
// matching between every ordered pair of ranks (what the wire protocol relies on),
// dependency shape, fold order, finalization, and a simulated execution of all ranks
// with in-memory FIFOs in a random, dependency-respecting order.
#include "algorithms/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/chunking.hpp"
#include "reduce/reduce.hpp"

namespace tccl::algo {
namespace {

// The edges (0, 1, n-1, n, n+1), `big`, and optionally `mid` (0: none).
std::vector<size_t> countGrid(int n, size_t big, size_t mid = 0) {
  const size_t un = static_cast<size_t>(n);
  std::vector<size_t> counts = {0, 1, un - 1, un, un + 1, big};
  if (mid > 0) counts.push_back(mid);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

const size_t kSegGrid[] = {1, 7, 4096, size_t{1} << 20};
// Tens of thousands of segments (100003 elements in segments of 1 or 7) are millions of
// ops per world and add nothing over 1003 elements in the same segments; the structure
// grids skip them to keep the suite fast.
constexpr size_t kMaxSegments = 5000;

std::string label(const char* algo, int n, size_t count, size_t seg) {
  return std::string(algo) + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
         " segElems=" + std::to_string(seg);
}

// (step, offset, count) of every message, in schedule order.
using MsgKey = std::tuple<uint32_t, size_t, size_t>;

// Per peer, the messages a schedule sends to it or receives from it.
std::vector<std::vector<MsgKey>> messages(const Schedule& s, OpType type, int n) {
  std::vector<std::vector<MsgKey>> out(static_cast<size_t>(n));
  for (const Op& op : s.ops) {
    if (op.type == type && op.peer >= 0 && op.peer < n) {
      out[static_cast<size_t>(op.peer)].emplace_back(op.step, op.range.offset, op.range.count);
    }
  }
  return out;
}

// ---- structure, over the full grid -----------------------------------------------------

// Properties every schedule of every rank must have. Fatal failures return early; the
// caller stops the grid at the first failure.
void checkCommon(const std::vector<Schedule>& all, int n, size_t count, bool ring) {
  for (int r = 0; r < n; ++r) {
    const Schedule& s = all[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    // Bytes against the closed forms.
    for (size_t elem : {size_t{1}, size_t{4}, size_t{8}}) {
      if (ring) {
        ASSERT_EQ(s.bytesSent(elem), ringBytesSent(count, elem, n, r));
        ASSERT_EQ(s.bytesReceived(elem), ringBytesSent(count, elem, n, ring::prev(r, n)));
      } else {
        ASSERT_EQ(s.bytesSent(elem), naiveBytesSent(count, elem, n));
        ASSERT_EQ(s.bytesReceived(elem), naiveBytesSent(count, elem, n));
      }
    }
    // Dependencies point backwards, to receives.
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op& op = s.ops[i];
      ASSERT_NE(op.peer, r) << "op " << i << " talks to itself";
      ASSERT_GE(op.peer, 0);
      ASSERT_LT(op.peer, n);
      ASSERT_GT(op.range.count, 0u) << "op " << i << " moves no data";
      ASSERT_LE(op.range.offset + op.range.count, count) << "op " << i;
      if (op.dependsOn >= 0) {
        ASSERT_LT(static_cast<size_t>(op.dependsOn), i) << "op " << i << " depends forward";
        ASSERT_EQ(s.ops[static_cast<size_t>(op.dependsOn)].type, OpType::Recv)
            << "op " << i << " depends on a send";
      } else {
        ASSERT_EQ(op.dependsOn, -1) << "op " << i;
      }
      if (op.type == OpType::Send) {
        ASSERT_FALSE(op.thenSelf) << "op " << i;
        ASSERT_FALSE(op.finalize) << "op " << i;
      }
    }
    // Peers: distinct, ascending, exactly those the ops talk to.
    std::vector<int> used;
    for (const Op& op : s.ops) used.push_back(op.peer);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    ASSERT_EQ(s.peers, used);
    // maxRecvElems is the largest receive.
    size_t maxRecv = 0;
    for (const Op& op : s.ops) {
      if (op.type == OpType::Recv) maxRecv = std::max(maxRecv, op.range.count);
    }
    ASSERT_EQ(s.maxRecvElems(), maxRecv);
  }
  // Messages match pairwise, in order: what r sends to p is what p expects from r.
  std::vector<std::vector<std::vector<MsgKey>>> sends;
  std::vector<std::vector<std::vector<MsgKey>>> recvs;
  for (const Schedule& s : all) {
    sends.push_back(messages(s, OpType::Send, n));
    recvs.push_back(messages(s, OpType::Recv, n));
  }
  for (size_t r = 0; r < all.size(); ++r) {
    for (size_t p = 0; p < all.size(); ++p) {
      ASSERT_EQ(sends[r][p].size(), recvs[p][r].size())
          << "rank " << r << " sends " << sends[r][p].size() << " messages to rank " << p
          << ", which expects " << recvs[p][r].size();
      for (size_t m = 0; m < sends[r][p].size(); ++m) {
        ASSERT_EQ(sends[r][p][m], recvs[p][r][m])
            << "message " << m << " from rank " << r << " to rank " << p << " does not match";
      }
    }
  }
}

void checkRing(const std::vector<Schedule>& all, int n, size_t count, size_t seg) {
  for (int r = 0; r < n; ++r) {
    const Schedule& s = all[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(s.algorithm, "ring");
    const uint32_t steps = static_cast<uint32_t>(n - 1);
    ASSERT_EQ(s.phases.size(), 2u);
    EXPECT_EQ(s.phases[0].name, "reduce-scatter");
    EXPECT_EQ(s.phases[0].firstStep, 0u);
    EXPECT_EQ(s.phases[0].steps, steps);
    EXPECT_EQ(s.phases[1].name, "all-gather");
    EXPECT_EQ(s.phases[1].firstStep, steps);
    EXPECT_EQ(s.phases[1].steps, steps);
    if (n >= 2) {
      ASSERT_NE(s.phaseOf(0), nullptr);
      EXPECT_EQ(s.phaseOf(0)->name, "reduce-scatter");
      EXPECT_EQ(s.phaseOf(steps - 1)->name, "reduce-scatter");
      EXPECT_EQ(s.phaseOf(steps)->name, "all-gather");
      EXPECT_EQ(s.phaseOf(2 * steps - 1)->name, "all-gather");
    }
    EXPECT_EQ(s.phaseOf(2 * steps), nullptr);
    if (n == 1 || count == 0) {
      EXPECT_TRUE(s.ops.empty());
      EXPECT_TRUE(s.peers.empty());
      continue;
    }
    // Peers: exactly {prev, next}.
    std::vector<int> peers = {ring::prev(r, n), ring::next(r, n)};
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    // Empty chunks may leave a rank without traffic to one side.
    for (int p : s.peers) {
      EXPECT_TRUE(std::find(peers.begin(), peers.end(), p) != peers.end()) << "peer " << p;
    }
    if (count >= static_cast<size_t>(n)) {
      EXPECT_EQ(s.peers, peers);
    }
    if (n == 2) {
      EXPECT_EQ(s.peers.size(), 1u);
    }

    const Range owned = chunkRange(count, n, ring::ownedChunk(r, n));
    std::vector<int> finalized(count, 0);
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op& op = s.ops[i];
      ASSERT_LT(op.step, 2 * steps) << "op " << i;
      const bool rs = op.step < steps;
      const int st = static_cast<int>(rs ? op.step : op.step - steps);
      const int chunk = op.type == OpType::Send
                            ? (rs ? ring::rsSendChunk(r, n, st) : ring::agSendChunk(r, n, st))
                            : (rs ? ring::rsRecvChunk(r, n, st) : ring::agRecvChunk(r, n, st));
      const Range c = chunkRange(count, n, chunk);
      ASSERT_GE(op.range.offset, c.offset) << "op " << i << " outside its chunk";
      ASSERT_LE(op.range.offset + op.range.count, c.offset + c.count) << "op " << i;
      ASSERT_LE(op.range.count, seg) << "op " << i << " larger than a segment";
      if (op.type == OpType::Send) {
        ASSERT_EQ(op.peer, ring::next(r, n)) << "op " << i;
        ASSERT_EQ(op.buffer, op.step == 0 ? BufferId::Input : BufferId::Output) << "op " << i;
        if (op.step == 0) {
          ASSERT_EQ(op.dependsOn, -1) << "op " << i;
        } else {
          // Forwards what it received in the step before: same range, step - 1.
          ASSERT_GE(op.dependsOn, 0) << "op " << i;
          const Op& dep = s.ops[static_cast<size_t>(op.dependsOn)];
          ASSERT_EQ(dep.type, OpType::Recv);
          ASSERT_EQ(dep.step + 1, op.step) << "op " << i;
          ASSERT_EQ(dep.range, op.range) << "op " << i;
        }
      } else {
        ASSERT_EQ(op.peer, ring::prev(r, n)) << "op " << i;
        ASSERT_EQ(op.dependsOn, -1) << "op " << i;
        ASSERT_FALSE(op.thenSelf) << "op " << i;
        if (rs) {
          ASSERT_EQ(op.action, RecvAction::Reduce) << "op " << i;
          ASSERT_EQ(op.buffer, BufferId::Input) << "op " << i;
        } else {
          ASSERT_EQ(op.action, RecvAction::Copy) << "op " << i;
        }
        if (op.finalize) {
          ASSERT_EQ(op.step, steps - 1) << "op " << i << " finalizes outside the last RS step";
          ASSERT_GE(op.range.offset, owned.offset);
          ASSERT_LE(op.range.offset + op.range.count, owned.offset + owned.count);
          for (size_t e = 0; e < op.range.count; ++e) finalized[op.range.offset + e]++;
        }
      }
    }
    for (size_t e = 0; e < count; ++e) {
      const bool mine = e >= owned.offset && e < owned.offset + owned.count;
      ASSERT_EQ(finalized[e], mine ? 1 : 0) << "element " << e << " finalized wrongly";
    }
  }
}

void checkNaive(const std::vector<Schedule>& all, int n, size_t count, size_t seg) {
  for (int r = 0; r < n; ++r) {
    const Schedule& s = all[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(s.algorithm, "naive");
    ASSERT_EQ(s.phases.size(), 1u);
    EXPECT_EQ(s.phases[0].name, "exchange");
    EXPECT_EQ(s.phases[0].firstStep, 0u);
    EXPECT_EQ(s.phases[0].steps, n > 1 ? 1u : 0u);
    if (n == 1 || count == 0) {
      EXPECT_TRUE(s.ops.empty());
      EXPECT_TRUE(s.peers.empty());
      continue;
    }
    std::vector<int> others;
    for (int p = 0; p < n; ++p) {
      if (p != r) others.push_back(p);
    }
    EXPECT_EQ(s.peers, others);
    EXPECT_EQ(s.phaseOf(0)->name, "exchange");

    // Per segment: the receives that fold into it, in schedule order.
    std::map<size_t, std::vector<size_t>> bySegment;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op& op = s.ops[i];
      ASSERT_EQ(op.step, 0u);
      ASSERT_LE(op.range.count, seg);
      if (op.type == OpType::Send) {
        ASSERT_EQ(op.buffer, BufferId::Input) << "op " << i;
        ASSERT_EQ(op.dependsOn, -1) << "op " << i;
        continue;
      }
      bySegment[op.range.offset].push_back(i);
    }
    ASSERT_EQ(bySegment.size(), segmentCount(count, seg));
    size_t next = 0;
    for (const auto& [offset, idx] : bySegment) {
      SCOPED_TRACE("segment at " + std::to_string(offset));
      ASSERT_EQ(offset, next);
      ASSERT_EQ(idx.size(), static_cast<size_t>(n - 1));
      const Range range = s.ops[idx[0]].range;
      next = range.offset + range.count;
      // Fold symbolically: the list of ranks in the order they are combined.
      std::vector<int> fold;
      int starts = 0;
      int selves = 0;
      int finals = 0;
      for (size_t j = 0; j < idx.size(); ++j) {
        const Op& op = s.ops[idx[j]];
        ASSERT_EQ(op.range, range);
        ASSERT_EQ(op.peer, others[j]) << "receives not in rank order";
        ASSERT_EQ(op.dependsOn, j == 0 ? -1 : static_cast<int32_t>(idx[j - 1]))
            << "receive " << j << " does not wait for the one before";
        ASSERT_EQ(finals, 0) << "a receive after the finalizing one";
        if (op.action == RecvAction::Copy) {
          ASSERT_EQ(j, 0u) << "a copy would overwrite earlier contributions";
          fold = {op.peer};
          ++starts;
        } else if (op.buffer == BufferId::Input) {
          ASSERT_EQ(j, 0u) << "reduce against the input after the start";
          fold = {r, op.peer};
          ++starts;
          ++selves;
        } else {
          ASSERT_GT(j, 0u) << "reduce against an unwritten output";
          fold.push_back(op.peer);
        }
        if (op.thenSelf) {
          fold.push_back(r);
          ++selves;
        }
        if (op.finalize) ++finals;
      }
      EXPECT_EQ(starts, 1);
      EXPECT_EQ(selves, 1);
      EXPECT_EQ(finals, 1);
      EXPECT_TRUE(s.ops[idx.back()].finalize) << "the last receive must finalize";
      std::vector<int> ranks(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) ranks[static_cast<size_t>(p)] = p;
      EXPECT_EQ(fold, ranks) << "contributions not folded in rank order";
    }
    ASSERT_EQ(next, count);
  }
}

TEST(Schedule, RingStructureOverGrid) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : countGrid(n, 100003, 1003)) {
      for (size_t seg : kSegGrid) {
        if (segmentCount(count, seg) > kMaxSegments) continue;
        SCOPED_TRACE(label("ring", n, count, seg));
        std::vector<Schedule> all;
        for (int r = 0; r < n; ++r) all.push_back(ringAllreduce(r, n, count, seg));
        checkCommon(all, n, count, true);
        checkRing(all, n, count, seg);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(Schedule, NaiveStructureOverGrid) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : countGrid(n, 100003, 1003)) {
      for (size_t seg : kSegGrid) {
        if (segmentCount(count, seg) > kMaxSegments) continue;
        SCOPED_TRACE(label("naive", n, count, seg));
        std::vector<Schedule> all;
        for (int r = 0; r < n; ++r) all.push_back(naiveAllreduce(r, n, count, seg));
        checkCommon(all, n, count, false);
        checkNaive(all, n, count, seg);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(Schedule, RingKnownShape) {
  // n = 3, 6 elements (chunks [0,2) [2,4) [4,6)), one segment per chunk, rank 1.
  const Schedule s = ringAllreduce(1, 3, 6, 1024);
  ASSERT_EQ(s.ops.size(), 8u);
  // step 0: send chunk 1 from Input, receive chunk 0 and reduce against Input.
  EXPECT_EQ(s.ops[0].type, OpType::Send);
  EXPECT_EQ(s.ops[0].peer, 2);
  EXPECT_EQ(s.ops[0].range, (Range{2, 2}));
  EXPECT_EQ(s.ops[0].buffer, BufferId::Input);
  EXPECT_EQ(s.ops[1].type, OpType::Recv);
  EXPECT_EQ(s.ops[1].peer, 0);
  EXPECT_EQ(s.ops[1].range, (Range{0, 2}));
  EXPECT_EQ(s.ops[1].action, RecvAction::Reduce);
  EXPECT_FALSE(s.ops[1].finalize);
  // step 1: forward chunk 0 (depends on op 1), receive chunk 2 (owned) and finalize.
  EXPECT_EQ(s.ops[2].step, 1u);
  EXPECT_EQ(s.ops[2].range, (Range{0, 2}));
  EXPECT_EQ(s.ops[2].dependsOn, 1);
  EXPECT_EQ(s.ops[2].buffer, BufferId::Output);
  EXPECT_EQ(s.ops[3].range, (Range{4, 2}));
  EXPECT_TRUE(s.ops[3].finalize);
  // step 2 (all-gather 0): send chunk 2, receive chunk 1 as a copy.
  EXPECT_EQ(s.ops[4].step, 2u);
  EXPECT_EQ(s.ops[4].range, (Range{4, 2}));
  EXPECT_EQ(s.ops[4].dependsOn, 3);
  EXPECT_EQ(s.ops[5].range, (Range{2, 2}));
  EXPECT_EQ(s.ops[5].action, RecvAction::Copy);
  // step 3: forward chunk 1, receive chunk 0.
  EXPECT_EQ(s.ops[6].step, 3u);
  EXPECT_EQ(s.ops[6].range, (Range{2, 2}));
  EXPECT_EQ(s.ops[6].dependsOn, 5);
  EXPECT_EQ(s.ops[7].range, (Range{0, 2}));
  EXPECT_EQ(s.bytesSent(4), 32u);
  EXPECT_EQ(s.maxRecvElems(), 2u);
  EXPECT_EQ(s.peers, (std::vector<int>{0, 2}));
}

// An op's type, step and range, as a known-shape test expects them in order.
struct WantOp {
  OpType type;
  uint32_t step;
  Range range;
};

void expectOps(const Schedule& s, const std::vector<WantOp>& want) {
  ASSERT_EQ(s.ops.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("op " + std::to_string(i));
    EXPECT_EQ(s.ops[i].type, want[i].type);
    EXPECT_EQ(s.ops[i].step, want[i].step);
    EXPECT_EQ(s.ops[i].range, want[i].range);
  }
}

TEST(Schedule, RingOfTwoInterleavesEachSegmentsReduceScatterAndAllGather) {
  // n = 2, 7 elements (chunks [0,4) [4,7)) in segments of 2, rank 0: per segment k, the
  // reduce-scatter send and receive, then the all-gather send of the segment just
  // reduced and its receive; chunk 0 has one segment more than chunk 1.
  const Schedule s = ringAllreduce(0, 2, 7, 2);
  const std::vector<WantOp> want = {{OpType::Send, 0, {0, 2}}, {OpType::Recv, 0, {4, 2}},
                                    {OpType::Send, 1, {4, 2}}, {OpType::Recv, 1, {0, 2}},
                                    {OpType::Send, 0, {2, 2}}, {OpType::Recv, 0, {6, 1}},
                                    {OpType::Send, 1, {6, 1}}, {OpType::Recv, 1, {2, 2}}};
  expectOps(s, want);
  // Each all-gather send forwards the receive just before it, renumbered.
  EXPECT_EQ(s.ops[2].dependsOn, 1);
  EXPECT_EQ(s.ops[6].dependsOn, 5);
  EXPECT_EQ(s.ops[2].buffer, BufferId::Output);
}

// Below kRingWaveMinBytes (the element size known) the two-rank ring goes step by step,
// as with more ranks: every reduce-scatter send first, then the all-gather. At the
// threshold, and with the element size unknown, it interleaves as above. The ring's
// structure checks hold for both orders, over a grid of counts and segments.
TEST(Schedule, RingOfTwoGoesStepByStepBelowTheWaveThreshold) {
  const Schedule small = ringAllreduce(0, 2, 7, 2, /*elemSize=*/4);
  const std::vector<WantOp> want = {{OpType::Send, 0, {0, 2}}, {OpType::Recv, 0, {4, 2}},
                                    {OpType::Send, 0, {2, 2}}, {OpType::Recv, 0, {6, 1}},
                                    {OpType::Send, 1, {4, 2}}, {OpType::Recv, 1, {0, 2}},
                                    {OpType::Send, 1, {6, 1}}, {OpType::Recv, 1, {2, 2}}};
  expectOps(small, want);
  EXPECT_EQ(small.ops[4].dependsOn, 1);  // the all-gather send forwards the reduced segment
  EXPECT_EQ(small.ops[6].dependsOn, 3);
  // The threshold, in bytes: one element short of it is step by step, at it the wave.
  const size_t elems = kRingWaveMinBytes / 4;
  const size_t seg = elems / 8;
  auto firstAllGatherSend = [](const Schedule& s) {
    for (size_t i = 0; i < s.ops.size(); ++i) {
      if (s.ops[i].type == OpType::Send && s.ops[i].step == 1) return i;
    }
    return s.ops.size();
  };
  EXPECT_EQ(firstAllGatherSend(ringAllreduce(0, 2, elems - 1, seg, 4)), 8u);  // after 4 + 4
  EXPECT_EQ(firstAllGatherSend(ringAllreduce(0, 2, elems, seg, 4)), 2u);
  EXPECT_EQ(firstAllGatherSend(ringAllreduce(0, 2, elems - 1, seg, 0)), 2u);
  // Both orders are valid rings over the grid.
  for (size_t elemSize : {size_t{0}, size_t{1}}) {
    for (size_t count : countGrid(2, 100003, 1003)) {
      for (size_t sg : kSegGrid) {
        if (segmentCount(count, sg) > kMaxSegments) continue;
        SCOPED_TRACE(label("ring", 2, count, sg) + " elemSize " + std::to_string(elemSize));
        std::vector<Schedule> all;
        for (int r = 0; r < 2; ++r) all.push_back(ringAllreduce(r, 2, count, sg, elemSize));
        checkCommon(all, 2, count, true);
        checkRing(all, 2, count, sg);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(Schedule, OrderByWaveIsStableAndRenumbersDependencies) {
  Schedule s;
  addSend(s, 1, 0, {0, 1}, BufferId::Input);                        // 0, wave 1
  addRecvCopy(s, 1, 0, {1, 1}, BufferId::Output);                   // 1, wave 0
  addSend(s, 1, 1, {1, 1}, BufferId::Output, /*dependsOn=*/1);      // 2, wave 1
  addRecvCopy(s, 1, 1, {2, 1}, BufferId::Output, /*dependsOn=*/0);  // 3, wave 2
  orderByWave(s, {1, 0, 1, 2});
  ASSERT_EQ(s.ops.size(), 4u);
  EXPECT_EQ(s.ops[0].range.offset, 1u);  // the old op 1
  EXPECT_EQ(s.ops[1].range.offset, 0u);  // old op 0 before old op 2: stable
  EXPECT_EQ(s.ops[2].range.offset, 1u);
  EXPECT_EQ(s.ops[2].type, OpType::Send);
  EXPECT_EQ(s.ops[2].dependsOn, 0);  // was 1
  EXPECT_EQ(s.ops[3].dependsOn, 1);  // was 0
}

TEST(Schedule, NaiveKnownShape) {
  // n = 3, 5 elements in segments of 3, rank 1: sends to 2 then 0; receives fold 0, 1, 2.
  const Schedule s = naiveAllreduce(1, 3, 5, 3);
  ASSERT_EQ(s.ops.size(), 8u);
  EXPECT_EQ(s.ops[0].peer, 2);
  EXPECT_EQ(s.ops[0].range, (Range{0, 3}));
  EXPECT_EQ(s.ops[1].peer, 2);
  EXPECT_EQ(s.ops[1].range, (Range{3, 2}));
  EXPECT_EQ(s.ops[2].peer, 0);
  EXPECT_EQ(s.ops[3].peer, 0);
  // Segment 0: copy from rank 0, add own input, then reduce rank 2's and finalize.
  EXPECT_EQ(s.ops[4].type, OpType::Recv);
  EXPECT_EQ(s.ops[4].peer, 0);
  EXPECT_EQ(s.ops[4].action, RecvAction::Copy);
  EXPECT_TRUE(s.ops[4].thenSelf);
  EXPECT_FALSE(s.ops[4].finalize);
  EXPECT_EQ(s.ops[5].peer, 2);
  EXPECT_EQ(s.ops[5].action, RecvAction::Reduce);
  EXPECT_EQ(s.ops[5].buffer, BufferId::Output);
  EXPECT_EQ(s.ops[5].dependsOn, 4);
  EXPECT_TRUE(s.ops[5].finalize);
  EXPECT_EQ(s.ops[6].range, (Range{3, 2}));
  EXPECT_EQ(s.ops[7].dependsOn, 6);
  EXPECT_EQ(s.maxRecvElems(), 3u);
  // Rank 0 starts by reducing rank 1's payload against its own input.
  const Schedule s0 = naiveAllreduce(0, 3, 5, 3);
  const Op* first = nullptr;
  for (const Op& op : s0.ops) {
    if (op.type == OpType::Recv) {
      first = &op;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->peer, 1);
  EXPECT_EQ(first->action, RecvAction::Reduce);
  EXPECT_EQ(first->buffer, BufferId::Input);
  EXPECT_FALSE(first->thenSelf);
}

// The simulated execution of these schedules (every rank's ops against in-memory
// queues, random dependency-respecting orders, deadlock detection, exact results) lives
// with the other algorithms' in allreduce_algos_test.cpp: one stricter simulator for
// every schedule of the all-reduce menu.

}  // namespace
}  // namespace tccl::algo
