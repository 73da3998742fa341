// Every all-reduce algorithm of the menu (allreduceAlgorithms()) as a schedule: the
// tree's shape, the closed forms for bytes and steps, message matching between every
// ordered pair of ranks, dependency shape, finalization, and the execution of all ranks
// by the real executor over in-memory links with partial I/O and small buffers
// (exec_harness.hpp), checked against closed forms.
// The hierarchical algorithm's layouts have their own tests (hier_test.cpp).
#include "algorithms/allreduce_algos.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../common/expected_bytes.hpp"
#include "algorithms/allreduce.hpp"
#include "algorithms/chunking.hpp"
#include "algorithms/schedule.hpp"
#include "algorithms/select.hpp"
#include "cost_model_testing.hpp"
#include "exec_harness.hpp"
#include "reduce/reduce.hpp"
#include "schedule_chain.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {
namespace {

std::string label(Algorithm a, int n, size_t count, size_t seg) {
  return std::string(toString(a)) + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
         " segElems=" + std::to_string(seg);
}

std::vector<size_t> countGrid(int n, size_t big, size_t mid = 0) {
  const size_t un = static_cast<size_t>(n);
  std::vector<size_t> counts = {0, 1, un - 1, un, un + 1, big};
  if (mid > 0) counts.push_back(mid);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

std::vector<Schedule> schedules(Algorithm a, int n, size_t count, size_t seg) {
  std::vector<Schedule> all;
  for (int r = 0; r < n; ++r) all.push_back(allreduceSchedule(a, r, n, count, seg));
  return all;
}

// The closed form for rank r's payload bytes, from the docs' formulas (tests/common), not
// from src/algorithms' own closed forms.
uint64_t closedFormBytes(Algorithm a, size_t count, size_t elem, int n, int r) {
  switch (a) {
    case Algorithm::Ring:
      return tccl::testing::ringSentBytes(count, elem, n, r);
    case Algorithm::Naive:
      return tccl::testing::naiveSentBytes(count, elem, n);
    case Algorithm::Tree:
      return tccl::testing::treeSentBytes(count, elem, n, r);
    case Algorithm::HalvingDoubling:
      return tccl::testing::hdSentBytes(count, elem, n, r);
    case Algorithm::RecursiveDoubling:
      return tccl::testing::rdSentBytes(count, elem, n, r);
    default:
      return ~uint64_t{0};
  }
}

int closedFormSteps(Algorithm a, int n) {
  switch (a) {
    case Algorithm::Ring:
      return n > 1 ? 2 * (n - 1) : 0;
    case Algorithm::Naive:
      return n > 1 ? 1 : 0;
    case Algorithm::Tree:
      return treeSteps(n);
    case Algorithm::HalvingDoubling:
      return hdSteps(n);
    case Algorithm::RecursiveDoubling:
      return rdSteps(n);
    default:
      return -1;
  }
}

const Algorithm kNew[] = {Algorithm::Tree, Algorithm::HalvingDoubling,
                          Algorithm::RecursiveDoubling};

// ---- menu ---------------------------------------------------------------------------

TEST(AllreduceMenu, RegistersEveryAlgorithm) {
  const std::vector<Algorithm>& menu = allreduceAlgorithms();
  for (Algorithm a : {Algorithm::Ring, Algorithm::Naive, Algorithm::Tree,
                      Algorithm::HalvingDoubling, Algorithm::RecursiveDoubling}) {
    EXPECT_NE(std::find(menu.begin(), menu.end(), a), menu.end()) << toString(a);
    EXPECT_EQ(allreduceSchedule(a, 1, 4, 10, 3).algorithm, toString(a));
  }
  EXPECT_EQ(std::find(menu.begin(), menu.end(), Algorithm::Auto), menu.end());
  EXPECT_THROW(allreduceSchedule(Algorithm::Auto, 0, 2, 10, 3), InvalidArgumentError);
  // Only naive needs a copy of the input in place.
  EXPECT_TRUE(allreduceReadsInputLate(Algorithm::Naive));
  for (Algorithm a : kNew) EXPECT_FALSE(allreduceReadsInputLate(a)) << toString(a);
}

// ---- the trees ------------------------------------------------------------------------

TEST(DoubleBinaryTree, BothTreesAreBinaryTreesOfDepthCeilLog2) {
  for (int n = 1; n <= 70; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    int expectDepth = 0;
    while ((1 << expectDepth) < n) ++expectDepth;
    ASSERT_EQ(btree::depth(n), expectDepth);
    int maxDepth = 0;
    for (int pos = 0; pos < n; ++pos) {
      const int par = btree::parent(pos, n);
      int kids[2] = {-1, -1};
      const int k = btree::children(pos, n, kids);
      ASSERT_LE(k, 2);
      if (pos == 0) {
        ASSERT_EQ(par, -1);
        ASSERT_EQ(k, n > 1 ? 1 : 0) << "the root has one child";
      } else {
        ASSERT_GE(par, 0);
        ASSERT_LT(par, n);
        int pk[2];
        const int pn = btree::children(par, n, pk);
        ASSERT_TRUE(std::find(pk, pk + pn, pos) != pk + pn)
            << "position " << pos << "'s parent " << par << " does not list it";
      }
      if (k == 2) {
        ASSERT_LT(kids[0], kids[1]);
      }
      for (int c = 0; c < k; ++c) {
        ASSERT_GT(kids[c], 0);
        ASSERT_LT(kids[c], n);
        ASSERT_EQ(btree::parent(kids[c], n), pos);
      }
      // Odd positions are exactly the leaves.
      ASSERT_EQ(k == 0, pos % 2 == 1 || n == 1) << "position " << pos;
      const int d = btree::depthOf(pos, n);  // terminates: no cycles
      ASSERT_LE(d, expectDepth);
      maxDepth = std::max(maxDepth, d);
    }
    ASSERT_EQ(maxDepth, expectDepth);
    // Tree 1 is a relabelling: position and rank are inverse permutations.
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r) {
      const int pos = btree::position(1, r, n);
      ASSERT_GE(pos, 0);
      ASSERT_LT(pos, n);
      ASSERT_EQ(btree::rankAt(1, pos, n), r);
      seen[static_cast<size_t>(pos)]++;
    }
    ASSERT_EQ(std::count(seen.begin(), seen.end(), 1), n);
  }
}

TEST(DoubleBinaryTree, EveryRankIsALeafInOneTree) {
  for (int n = 2; n <= 70; ++n) {
    for (int r = 0; r < n; ++r) {
      int kids[2];
      const bool leaf0 = btree::children(btree::position(0, r, n), n, kids) == 0;
      const bool leaf1 = btree::children(btree::position(1, r, n), n, kids) == 0;
      EXPECT_FALSE(leaf0 && leaf1) << "n=" << n << " rank " << r << " is a leaf in both";
      // Odd worlds: rank 0 is the root of tree 0 and inner in tree 1.
      if (n % 2 == 0 || r != 0) {
        EXPECT_TRUE(leaf0 || leaf1) << "n=" << n << " rank " << r << " is inner in both";
      }
    }
  }
}

TEST(DoubleBinaryTree, KnownShape) {
  // n = 14 (the picture in NCCL's trees.cc): 0 - 8 - {4, 12}; 12 - {10, 13}.
  int kids[2];
  ASSERT_EQ(btree::children(0, 14, kids), 1);
  EXPECT_EQ(kids[0], 8);
  ASSERT_EQ(btree::children(8, 14, kids), 2);
  EXPECT_EQ(kids[0], 4);
  EXPECT_EQ(kids[1], 12);
  ASSERT_EQ(btree::children(12, 14, kids), 2);
  EXPECT_EQ(kids[0], 10);
  EXPECT_EQ(kids[1], 13);
  EXPECT_EQ(btree::parent(13, 14), 12);
  EXPECT_EQ(btree::parent(11, 14), 10);
  // n = 6: 0 - 4 - {2, 5}, 2 - {1, 3}. Tree 1 mirrors: rank 5 is its root.
  ASSERT_EQ(btree::children(4, 6, kids), 2);
  EXPECT_EQ(kids[1], 5);
  EXPECT_EQ(btree::rankAt(1, 0, 6), 5);
  // n = 5 (odd): tree 1 shifts by one: rank 1 is its root.
  EXPECT_EQ(btree::rankAt(1, 0, 5), 1);
  EXPECT_EQ(btree::position(1, 0, 5), 4);
}

// ---- closed forms --------------------------------------------------------------------

TEST(AllreduceClosedForms, MaxBytesFactorsAreTheBusiestRank) {
  for (int n = 1; n <= 70; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Fold f = foldOf(n);
    // count a multiple of 2 and of p, so the factors are exact.
    const size_t count = 6 * static_cast<size_t>(f.p);
    uint64_t tree = 0;
    uint64_t hd = 0;
    uint64_t rd = 0;
    for (int r = 0; r < n; ++r) {
      tree = std::max(tree, treeBytesSent(count, 1, n, r));
      hd = std::max(hd, hdBytesSent(count, 1, n, r));
      rd = std::max(rd, rdBytesSent(count, 1, n, r));
    }
    const double v = static_cast<double>(count);
    EXPECT_EQ(static_cast<double>(tree), treeMaxBytesFactor(n) * v);
    EXPECT_EQ(static_cast<double>(hd), hdMaxBytesFactor(n) * v);
    EXPECT_EQ(static_cast<double>(rd), rdMaxBytesFactor(n) * v);
  }
}

TEST(AllreduceClosedForms, LibraryFormsAgreeWithTheDocsFormulas) {
  // src/algorithms' closed forms (which the cost model and tccl bench use) against the
  // tests' own, written from docs/algorithms.md; the schedules are checked against the
  // latter (AllreduceAlgos.StructureOverGrid, the hier tests, the multi-process grid).
  for (int n = 1; n <= 70; ++n) {
    for (size_t count : countGrid(n, 1000003, 4096)) {
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count) +
                     " r=" + std::to_string(r));
        ASSERT_EQ(treeBytesSent(count, 4, n, r), tccl::testing::treeSentBytes(count, 4, n, r));
        ASSERT_EQ(hdBytesSent(count, 4, n, r), tccl::testing::hdSentBytes(count, 4, n, r));
        ASSERT_EQ(rdBytesSent(count, 4, n, r), tccl::testing::rdSentBytes(count, 4, n, r));
      }
    }
  }
  // Hosts given as keys in any order (round robin, blocks, uneven, one host, all apart).
  const std::vector<std::vector<int>> keyings = {{0},
                                                 {0, 0},
                                                 {0, 1},
                                                 {5, 5, 7, 7},
                                                 {0, 1, 0, 1},
                                                 {3, 3, 3, 9},
                                                 {1, 2, 2, 2, 1},
                                                 {0, 1, 2, 0, 1, 2},
                                                 {4, 4, 4, 4, 4, 4, 4},
                                                 {0, 1, 2, 3, 4},
                                                 {2, 0, 1, 0, 2, 1, 0, 1}};
  for (const auto& keys : keyings) {
    std::vector<std::string> names;
    for (int k : keys) names.push_back("host" + std::to_string(k));
    const HostLayout h = HostLayout::fromKeys(names);
    for (size_t count : countGrid(static_cast<int>(keys.size()), 100003, 96)) {
      for (int r = 0; r < static_cast<int>(keys.size()); ++r) {
        SCOPED_TRACE(h.describe() + " count=" + std::to_string(count) + " r=" + std::to_string(r));
        const HostBytes lib = hierBytesSent(h, count, 8, r);
        const auto doc = tccl::testing::hierSentBytes(keys, count, 8, r);
        ASSERT_EQ(lib.intra, doc.intra);
        ASSERT_EQ(lib.inter, doc.inter);
      }
    }
  }
}

TEST(AllreduceClosedForms, KnownValues) {
  // n = 8, count 800 (blocks of 100): hd core ranks send 2 * 7/8 * 800 = 1400 elements.
  for (int r = 0; r < 8; ++r) EXPECT_EQ(hdBytesSent(800, 4, 8, r), 1400u * 4);
  // n = 6: p = 4, fold pairs (0,1), (2,3); core blocks of 200 elements of 800.
  EXPECT_EQ(hdBytesSent(800, 1, 6, 1), 800u);         // odd: its input
  EXPECT_EQ(hdBytesSent(800, 1, 6, 0), 1200u + 800);  // even: core + the result back
  EXPECT_EQ(hdBytesSent(800, 1, 6, 5), 1200u);        // core only
  // Uneven blocks: count 10 over p = 4 is 3 3 2 2; rank 0 sends |b0 b1| + all = 6 + 10.
  EXPECT_EQ(hdBytesSent(10, 1, 4, 0), 16u);
  EXPECT_EQ(hdBytesSent(10, 1, 4, 3), 4u + 10);
  EXPECT_EQ(rdBytesSent(100, 8, 8, 5), 3u * 800);
  EXPECT_EQ(rdBytesSent(100, 8, 6, 0), 3u * 800);  // L = 2, plus the result back
  EXPECT_EQ(rdBytesSent(100, 8, 6, 1), 800u);
  EXPECT_EQ(rdBytesSent(100, 8, 6, 4), 2u * 800);
  // Tree, n = 4: tree 0 is 0 - 2 - {1, 3}; tree 1 mirrors (rank 3 root, 1 - {2, 0}).
  // Rank 1: leaf of tree 0 (h0 up) and inner with two children in tree 1 (3 h1).
  EXPECT_EQ(treeBytesSent(10, 1, 4, 1), 5u + 15);
  EXPECT_EQ(treeBytesSent(10, 1, 4, 0), 5u + 5);   // root of tree 0 (one child), leaf of 1
  EXPECT_EQ(treeBytesSent(11, 1, 4, 1), 6u + 15);  // halves 6 and 5
  for (int n : {1, 2, 5}) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(treeBytesSent(0, 4, n, r), 0u);
      EXPECT_EQ(hdBytesSent(0, 4, n, r), 0u);
      EXPECT_EQ(rdBytesSent(0, 4, n, r), 0u);
    }
  }
  EXPECT_EQ(treeSteps(1), 0);
  EXPECT_EQ(treeSteps(2), 2);
  EXPECT_EQ(treeSteps(5), 6);
  EXPECT_EQ(treeSteps(8), 6);
  EXPECT_EQ(hdSteps(8), 6);
  EXPECT_EQ(hdSteps(12), 8);
  EXPECT_EQ(rdSteps(8), 3);
  EXPECT_EQ(rdSteps(12), 4);  // p = 8, rem = 4: the fold-in overlaps
  EXPECT_EQ(rdSteps(13), 5);  // rem = 5 > p/2
  EXPECT_EQ(rdSteps(3), 2);
  EXPECT_EQ(rdSteps(7), 4);
  EXPECT_EQ(rdSteps(2), 1);
  EXPECT_EQ(hdSteps(1), 0);
  EXPECT_EQ(rdSteps(1), 0);
}

// ---- structure over the grid ---------------------------------------------------------

using MsgKey = std::tuple<uint32_t, size_t, size_t>;  // step, offset, count

void checkStructure(Algorithm a, const std::vector<Schedule>& all, int n, size_t count,
                    size_t seg) {
  // Elements finalized, summed over ranks (tree and hd: each element once overall;
  // rd: once per core rank).
  std::vector<int> finalized(count, 0);
  int coreRanks = 0;
  for (int r = 0; r < n; ++r) {
    const Schedule& s = all[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(s.algorithm, toString(a));
    ASSERT_EQ(s.scratchElems, 0u);
    // The phases: the tree's two trees run side by side; rd's fold hops count as phases
    // but may overlap the exchange (StepsAreTheLongestMessageChain checks the steps).
    uint32_t totalSteps = 0;
    for (const Phase& ph : s.phases) totalSteps += ph.steps;
    const Fold f = foldOf(n);
    const int phaseSteps = a == Algorithm::Tree ? 2 * treeSteps(n)
                           : a == Algorithm::RecursiveDoubling
                               ? (n > 1 ? f.log2p + (f.rem > 0 ? 2 : 0) : 0)
                               : closedFormSteps(a, n);
    ASSERT_EQ(static_cast<int>(totalSteps), phaseSteps);
    for (size_t elem : {size_t{1}, size_t{4}, size_t{8}}) {
      ASSERT_EQ(s.bytesSent(elem), closedFormBytes(a, count, elem, n, r)) << "elem " << elem;
    }
    if (n == 1 || count == 0) {
      ASSERT_TRUE(s.ops.empty());
      ASSERT_TRUE(s.peers.empty());
      continue;
    }
    std::vector<int> mine(count, 0);
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op& op = s.ops[i];
      ASSERT_NE(op.peer, r) << "op " << i << " talks to itself";
      ASSERT_GE(op.peer, 0) << "op " << i;
      ASSERT_LT(op.peer, n) << "op " << i;
      ASSERT_GT(op.range.count, 0u) << "op " << i << " moves no data";
      ASSERT_LE(op.range.count, seg) << "op " << i << " larger than a segment";
      ASSERT_LE(op.range.offset + op.range.count, count) << "op " << i;
      ASSERT_NE(s.phaseOf(op.step), nullptr) << "op " << i << " step " << op.step;
      ASSERT_GE(op.dependsOn, -1) << "op " << i;
      ASSERT_LT(op.dependsOn, static_cast<int32_t>(i)) << "op " << i << " depends forward";
      ASSERT_NE(op.buffer, BufferId::Scratch) << "op " << i;
      ASSERT_FALSE(op.thenSelf) << "op " << i;
      if (op.type == OpType::Send) {
        ASSERT_FALSE(op.finalize) << "op " << i;
      } else {
        ASSERT_EQ(op.dst, BufferId::Output) << "op " << i;
        if (op.finalize) {
          ASSERT_EQ(op.action, RecvAction::Reduce) << "op " << i;
          for (size_t e = 0; e < op.range.count; ++e) mine[op.range.offset + e]++;
        }
      }
    }
    std::vector<int> used;
    for (const Op& op : s.ops) used.push_back(op.peer);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    ASSERT_EQ(s.peers, used);
    if (a == Algorithm::RecursiveDoubling) {
      const bool core = foldVirtualRank(r, foldOf(n)) >= 0;
      coreRanks += core;
      for (size_t e = 0; e < count; ++e) ASSERT_EQ(mine[e], core ? 1 : 0) << "element " << e;
    }
    for (size_t e = 0; e < count; ++e) finalized[e] += mine[e];
  }
  if (n > 1 && count > 0) {
    const int expected = a == Algorithm::RecursiveDoubling ? coreRanks : 1;
    for (size_t e = 0; e < count; ++e) {
      ASSERT_EQ(finalized[e], expected) << "element " << e << " finalized wrongly";
    }
  }
  // Messages match pairwise, in order.
  std::vector<std::vector<std::vector<MsgKey>>> sends(static_cast<size_t>(n));
  std::vector<std::vector<std::vector<MsgKey>>> recvs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    sends[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
    recvs[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
    for (const Op& op : all[static_cast<size_t>(r)].ops) {
      auto& q =
          op.type == OpType::Send ? sends[static_cast<size_t>(r)] : recvs[static_cast<size_t>(r)];
      q[static_cast<size_t>(op.peer)].emplace_back(op.step, op.range.offset, op.range.count);
    }
  }
  for (size_t r = 0; r < static_cast<size_t>(n); ++r) {
    for (size_t p = 0; p < static_cast<size_t>(n); ++p) {
      ASSERT_EQ(sends[r][p].size(), recvs[p][r].size())
          << "rank " << r << " sends " << sends[r][p].size() << " messages to rank " << p
          << ", which expects " << recvs[p][r].size();
      for (size_t m = 0; m < sends[r][p].size(); ++m) {
        ASSERT_EQ(sends[r][p][m], recvs[p][r][m])
            << "message " << m << " from rank " << r << " to rank " << p << " does not match";
      }
    }
  }
  (void)seg;
}

TEST(AllreduceAlgos, StructureOverGrid) {
  for (Algorithm a : kNew) {
    for (int n = 1; n <= 17; ++n) {
      for (size_t count : countGrid(n, 1000, 37)) {
        for (size_t seg : {size_t{1}, size_t{3}, size_t{64}, size_t{1} << 20}) {
          SCOPED_TRACE(label(a, n, count, seg));
          checkStructure(a, schedules(a, n, count, seg), n, count, seg);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// With one segment per range, the longest chain of messages (a receive completes one
// hop after its send; an op starts after its dependency) is the closed-form step count.
TEST(AllreduceAlgos, StepsAreTheLongestMessageChain) {
  for (Algorithm a : kNew) {
    for (int n = 1; n <= 33; ++n) {
      const size_t count = 64 * static_cast<size_t>(n);
      SCOPED_TRACE(label(a, n, count, count));
      const std::vector<Schedule> all = schedules(a, n, count, count);
      EXPECT_EQ(chain::longestMessageChain(all), closedFormSteps(a, n));
    }
  }
}

TEST(AllreduceAlgos, RecursiveDoublingKnownShape) {
  // n = 4, 5 elements in segments of 3, rank 1: partners 0 then 3.
  const Schedule s = recursiveDoublingAllreduce(1, 4, 5, 3);
  ASSERT_EQ(s.ops.size(), 8u);
  EXPECT_EQ(s.peers, (std::vector<int>{0, 3}));
  // Round 0, segment 0: send the input, then reduce into Output once the send is out.
  EXPECT_EQ(s.ops[0].type, OpType::Send);
  EXPECT_EQ(s.ops[0].peer, 0);
  EXPECT_EQ(s.ops[0].buffer, BufferId::Input);
  EXPECT_EQ(s.ops[0].range, (Range{0, 3}));
  EXPECT_EQ(s.ops[1].type, OpType::Recv);
  EXPECT_EQ(s.ops[1].action, RecvAction::Reduce);
  EXPECT_EQ(s.ops[1].buffer, BufferId::Input);
  EXPECT_EQ(s.ops[1].dst, BufferId::Output);
  EXPECT_EQ(s.ops[1].dependsOn, 0);
  EXPECT_FALSE(s.ops[1].finalize);
  // Round 1, segment 0: send the partial after round 0's receive; finalize.
  EXPECT_EQ(s.ops[4].peer, 3);
  EXPECT_EQ(s.ops[4].step, 1u);
  EXPECT_EQ(s.ops[4].buffer, BufferId::Output);
  EXPECT_EQ(s.ops[4].dependsOn, 1);
  EXPECT_EQ(s.ops[5].buffer, BufferId::Output);
  EXPECT_EQ(s.ops[5].dependsOn, 4);
  EXPECT_TRUE(s.ops[5].finalize);
  // n = 3: rank 1 folds into rank 0 and gets the result back; rank 2 is core rank 1.
  const Schedule odd = recursiveDoublingAllreduce(1, 3, 4, 10);
  ASSERT_EQ(odd.ops.size(), 2u);
  EXPECT_EQ(odd.ops[0].peer, 0);
  EXPECT_EQ(odd.ops[0].step, 0u);
  EXPECT_EQ(odd.ops[1].action, RecvAction::Copy);
  EXPECT_EQ(odd.ops[1].step, 2u);
  EXPECT_EQ(odd.phaseOf(2)->name, "fold-out");
  const Schedule even = recursiveDoublingAllreduce(0, 3, 4, 10);
  EXPECT_EQ(even.peers, (std::vector<int>{1, 2}));
  EXPECT_EQ(even.phaseOf(1)->name, "exchange");
}

TEST(AllreduceAlgos, HalvingDoublingKnownShape) {
  // n = 4, 8 elements (blocks of 2), one segment per range, rank 1 (virtual 1).
  const Schedule s = halvingDoublingAllreduce(1, 4, 8, 100);
  ASSERT_EQ(s.ops.size(), 8u);
  // Halving, distance 2 (partner 3): send blocks 2-3, reduce blocks 0-1 from the input.
  EXPECT_EQ(s.ops[0].peer, 3);
  EXPECT_EQ(s.ops[0].range, (Range{4, 4}));
  EXPECT_EQ(s.ops[0].buffer, BufferId::Input);
  EXPECT_EQ(s.ops[1].peer, 3);
  EXPECT_EQ(s.ops[1].range, (Range{0, 4}));
  EXPECT_EQ(s.ops[1].buffer, BufferId::Input);
  // Distance 1 (partner 0): send block 0, reduce block 1 (finalize).
  EXPECT_EQ(s.ops[2].peer, 0);
  EXPECT_EQ(s.ops[2].range, (Range{0, 2}));
  EXPECT_EQ(s.ops[2].dependsOn, 1);
  EXPECT_EQ(s.ops[3].range, (Range{2, 2}));
  EXPECT_EQ(s.ops[3].buffer, BufferId::Output);
  EXPECT_TRUE(s.ops[3].finalize);
  // Doubling, distance 1: send block 1, copy block 0; distance 2: send 0-1, copy 2-3.
  EXPECT_EQ(s.ops[4].range, (Range{2, 2}));
  EXPECT_EQ(s.ops[4].dependsOn, 3);
  EXPECT_EQ(s.ops[5].action, RecvAction::Copy);
  EXPECT_EQ(s.ops[5].range, (Range{0, 2}));
  EXPECT_EQ(s.ops[6].peer, 3);
  EXPECT_EQ(s.ops[6].range, (Range{0, 4}));
  EXPECT_EQ(s.ops[6].dependsOn, 5);  // the latest write into blocks 0-1
  EXPECT_EQ(s.ops[7].range, (Range{4, 4}));
  EXPECT_EQ(s.ops[7].dependsOn, 5);  // the chain: completes after block 0 arrived
  EXPECT_EQ(s.phaseOf(0)->name, "reduce-scatter");
  EXPECT_EQ(s.phaseOf(2)->name, "all-gather");
}

TEST(AllreduceAlgos, TreeKnownShape) {
  // n = 4, 4 elements (halves [0,2) and [2,4)), one segment each, depth 2. Tree 0:
  // 0 - 2 - {1, 3}; tree 1 mirrors: 3 - 1 - {2, 0}. Rank 2 is inner in tree 0 (depth
  // 1) and a leaf of tree 1 (depth 2). Ops in pipeline-time order (T, tree):
  const Schedule s = treeAllreduce(2, 4, 4, 100);
  EXPECT_EQ(s.peers, (std::vector<int>{0, 1, 3}));
  struct Want {
    OpType type;
    int peer;
    uint32_t step;
    Range range;
    BufferId buffer;
    int32_t dependsOn;
  };
  const Want want[] = {
      {OpType::Recv, 1, 0, {0, 2}, BufferId::Input, -1},  // T 0: fold child 1 into Input
      {OpType::Recv, 3, 0, {0, 2}, BufferId::Output, 0},  // T 0: then child 3
      {OpType::Send, 1, 4, {2, 2}, BufferId::Input, -1},  // T 0: tree 1 leaf, up to 1
      {OpType::Send, 0, 1, {0, 2}, BufferId::Output, 1},  // T 1: folded half up to 0
      {OpType::Recv, 0, 2, {0, 2}, BufferId::Input, -1},  // T 2: the final half (Copy)
      {OpType::Send, 1, 3, {0, 2}, BufferId::Output, 4},  // T 3: down to the children
      {OpType::Send, 3, 3, {0, 2}, BufferId::Output, 4},
      {OpType::Recv, 1, 7, {2, 2}, BufferId::Input, -1},  // T 3: tree 1's final half
  };
  ASSERT_EQ(s.ops.size(), std::size(want));
  for (size_t i = 0; i < s.ops.size(); ++i) {
    SCOPED_TRACE("op " + std::to_string(i));
    const Op& op = s.ops[i];
    EXPECT_EQ(op.type, want[i].type);
    EXPECT_EQ(op.peer, want[i].peer);
    EXPECT_EQ(op.step, want[i].step);
    EXPECT_EQ(op.range, want[i].range);
    EXPECT_EQ(op.dependsOn, want[i].dependsOn);
    if (op.type == OpType::Send || op.action == RecvAction::Reduce) {
      EXPECT_EQ(op.buffer, want[i].buffer);
    }
  }
  EXPECT_EQ(s.ops[4].action, RecvAction::Copy);
  EXPECT_EQ(s.ops[7].action, RecvAction::Copy);
  // The root of tree 0 (rank 0) finalizes its half; rank 3 (root of tree 1) the other.
  auto finalizes = [](const Schedule& x) {
    std::vector<Range> f;
    for (const Op& op : x.ops) {
      if (op.finalize) f.push_back(op.range);
    }
    return f;
  };
  EXPECT_EQ(finalizes(treeAllreduce(0, 4, 4, 100)), (std::vector<Range>{{0, 2}}));
  EXPECT_EQ(finalizes(treeAllreduce(3, 4, 4, 100)), (std::vector<Range>{{2, 2}}));
  EXPECT_TRUE(finalizes(s).empty());
  EXPECT_EQ(s.phaseOf(0)->name, "reduce (tree 0)");
  EXPECT_EQ(s.phaseOf(3)->name, "broadcast (tree 0)");
  EXPECT_EQ(s.phaseOf(4)->name, "reduce (tree 1)");
  EXPECT_EQ(s.phaseOf(7)->name, "broadcast (tree 1)");
}

// ---- execution (the real executor over in-memory links: exec_harness.hpp) -----------

// Three kinds of links, by k: sockets' worth of buffer (1 KiB..64 KiB), buffers
// smaller than a message (a send waits for its receiver: the deadlock test; 1..64 bytes
// for small vectors, up to 1 KiB for large ones, whose every byte would otherwise be a
// wake-up), and large buffers with whole transfers.
exectest::MeshOptions meshFor(int k, uint64_t seed, size_t count = 0) {
  exectest::MeshOptions o;
  o.seed = seed;
  if (k % 3 == 1) {
    o.minCapacity = count > 64 ? 64 : 1;
    o.maxCapacity = count > 64 ? 1024 : 64;
  } else if (k % 3 == 2) {
    o.seed = 0;
    o.maxCapacity = 1 << 20;
  }
  return o;
}

// Runs one case; returns "" or what went wrong (the first wrong element).
std::string executeInt(Algorithm a, int n, size_t count, size_t seg, ReduceOp op, bool inPlace,
                       int k, uint64_t seed) {
  return exectest::allreduceInt(schedules(a, n, count, seg), count, op, inPlace,
                                allreduceReadsInputLate(a), meshFor(k, seed, count));
}

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};

std::vector<int> execWorlds() {
  std::vector<int> w;
  for (int n = 1; n <= 12; ++n) w.push_back(n);
  w.push_back(16);
  w.push_back(17);
  return w;
}

void executeGrid(Algorithm a) {
  uint64_t seed = 2024;
  int k = 0;
  for (int n : execWorlds()) {
    for (size_t count : countGrid(n, 1001)) {
      for (size_t seg : {size_t{1}, size_t{7}, size_t{64}}) {
        if (seg == 1 && count > 100) continue;  // a thousand segments add nothing
        for (ReduceOp op : kOps) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(label(a, n, count, seg) + " op=" + std::string(toString(op)) +
                         (inPlace ? " in-place" : " out-of-place") +
                         " links=" + std::to_string(k % 3) + " seed=" + std::to_string(seed));
            ASSERT_EQ(executeInt(a, n, count, seg, op, inPlace, k, seed), "");
            ++seed;
            ++k;
          }
        }
      }
    }
  }
}

TEST(AllreduceExecution, TreeOverGrid) { executeGrid(Algorithm::Tree); }
TEST(AllreduceExecution, HalvingDoublingOverGrid) { executeGrid(Algorithm::HalvingDoubling); }
TEST(AllreduceExecution, RecursiveDoublingOverGrid) { executeGrid(Algorithm::RecursiveDoubling); }

// The ring and naive schedules the same way (naive in place works from a copy of the
// input, as the communicator arranges): worlds 1..9, sum (exact results) and avg (the
// division happens once, at finalize).
TEST(AllreduceExecution, RingAndNaive) {
  uint64_t seed = 77;
  int k = 0;
  for (Algorithm a : {Algorithm::Ring, Algorithm::Naive}) {
    for (int n = 1; n <= 9; ++n) {
      for (size_t count : countGrid(n, 1001)) {
        for (size_t seg : {size_t{1}, size_t{3}, size_t{7}, size_t{64}}) {
          if (seg == 1 && count > 100) continue;
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
            for (bool inPlace : {false, true}) {
              SCOPED_TRACE(label(a, n, count, seg) + " op=" + std::string(toString(op)) +
                           (inPlace ? " in-place" : " out-of-place") +
                           " seed=" + std::to_string(seed));
              ASSERT_EQ(executeInt(a, n, count, seg, op, inPlace, k++, seed), "");
              ++seed;
            }
          }
        }
      }
    }
  }
}

// Many interleavings of a few small cases, every algorithm, buffers of a few bytes.
TEST(AllreduceExecution, ManySeedsSmallCases) {
  uint64_t seed = 31337;
  for (Algorithm a : allreduceAlgorithms()) {
    for (int n : {2, 3, 5, 6, 7, 8}) {
      for (size_t count : {size_t{5}, size_t{13}}) {
        for (int k = 0; k < 10; ++k) {
          SCOPED_TRACE(label(a, n, count, 2) + " seed=" + std::to_string(seed));
          ASSERT_EQ(executeInt(a, n, count, 2, ReduceOp::Sum, k % 3 == 0, 1, seed), "");
          ++seed;
        }
      }
    }
  }
}

// Floating point: every rank ends with bitwise the same result, for every algorithm
// (rd evaluates a op b on one partner and b op a on the other: equal for commutative
// ops on finite values), close to the exact sum.
TEST(AllreduceExecution, FloatResultsAreBitwiseIdenticalOnAllRanks) {
  uint64_t seed = 4242;
  for (Algorithm a : allreduceAlgorithms()) {
    for (DataType dt : {DataType::Float32, DataType::Float64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Avg}) {
        for (int n : {3, 4, 6, 7, 8, 11}) {
          const size_t count = 97;
          std::mt19937 gen(static_cast<uint32_t>(seed));
          std::uniform_real_distribution<double> val(0.5, 1.5);
          std::vector<std::vector<uint8_t>> inputs(static_cast<size_t>(n));
          std::vector<double> exact(count, op == ReduceOp::Prod ? 1.0 : 0.0);
          const size_t elem = dataTypeSize(dt);
          for (int r = 0; r < n; ++r) {
            inputs[static_cast<size_t>(r)].resize(count * elem);
            for (size_t i = 0; i < count; ++i) {
              // Mixed magnitudes make the order of additions show in the last bits.
              const double x = val(gen) * (op != ReduceOp::Prod && i % 5 == 0 ? 1e6 : 1.0);
              if (dt == DataType::Float32) {
                const float f = static_cast<float>(x);
                std::memcpy(&inputs[static_cast<size_t>(r)][i * 4], &f, 4);
                exact[i] = op == ReduceOp::Prod  ? exact[i] * f
                           : op == ReduceOp::Max ? std::max(exact[i], double{f})
                                                 : exact[i] + f;
              } else {
                std::memcpy(&inputs[static_cast<size_t>(r)][i * 8], &x, 8);
                exact[i] = op == ReduceOp::Prod  ? exact[i] * x
                           : op == ReduceOp::Max ? std::max(exact[i], x)
                                                 : exact[i] + x;
              }
            }
          }
          if (op == ReduceOp::Avg) {
            for (double& e : exact) e /= n;
          }
          SCOPED_TRACE(label(a, n, count, 5) + " " + std::string(toString(dt)) + " " +
                       std::string(toString(op)) + " seed=" + std::to_string(seed));
          std::vector<std::vector<uint8_t>> outputs;
          ASSERT_EQ(exectest::allreduceBytes(schedules(a, n, count, 5), dt, op, inputs, &outputs,
                                             meshFor(0, seed++)),
                    "");
          for (int r = 1; r < n; ++r) {
            ASSERT_EQ(outputs[static_cast<size_t>(r)], outputs[0])
                << "rank " << r << " differs from rank 0";
          }
          for (size_t i = 0; i < count; ++i) {
            double got = 0;
            if (dt == DataType::Float32) {
              float f;
              std::memcpy(&f, &outputs[0][i * 4], 4);
              got = f;
            } else {
              std::memcpy(&got, &outputs[0][i * 8], 8);
            }
            ASSERT_NEAR(got, exact[i], std::abs(exact[i]) * 1e-5) << "element " << i;
          }
        }
      }
    }
  }
}

// ---- the cost model over all five ----------------------------------------------------

TEST(AllreduceCostModel, PredictionsFollowTheClosedForms) {
  LinkModel m = formulaModel();
  m.alphaSec = 1e-5;
  m.betaSecPerByte = 1e-9;
  for (int n = 2; n <= 40; ++n) {
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20}) {
      const double v = static_cast<double>(bytes);
      EXPECT_DOUBLE_EQ(predictTreeSec(n, bytes, m),
                       treeSteps(n) * 1e-5 + treeMaxBytesFactor(n) * v * 1e-9);
      EXPECT_DOUBLE_EQ(predictHalvingDoublingSec(n, bytes, m),
                       hdSteps(n) * 1e-5 + hdMaxBytesFactor(n) * m.hdBandwidthPenalty * v * 1e-9);
      EXPECT_DOUBLE_EQ(predictRecursiveDoublingSec(n, bytes, m),
                       rdSteps(n) * 1e-5 + rdMaxBytesFactor(n) * v * 1e-9);
      for (Algorithm a : allreduceAlgorithms()) {
        EXPECT_GE(predictAllreduceSec(a, n, bytes, m), 0.0);
      }
    }
  }
  for (Algorithm a : allreduceAlgorithms()) EXPECT_EQ(predictAllreduceSec(a, 1, 1 << 20, m), 0.0);
}

}  // namespace
}  // namespace tccl::algo
