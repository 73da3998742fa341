// The collective table (src/algorithms/collective_spec.hpp): every row's names, buffer
// sizes against literal values and an independent formula, the in-place rules, the
// algorithms each row takes, and that every row's schedule (the builder's ops plus its
// local Copy ops) writes exactly the output each rank must end with, reads only inside
// its buffers, and sends and receives the bytes of the closed forms.
#include "algorithms/collective_spec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/select.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {
namespace {

using C = Collective;

const std::vector<C> kAll = {C::AllReduce, C::ReduceScatter, C::AllGather, C::Broadcast, C::Reduce,
                             C::Barrier,   C::AllToAll,      C::Gather,    C::Scatter};
// The uneven rows (their own tests: uneven_test.cpp).
const std::vector<C> kUneven = {C::AllGatherV, C::ReduceScatterV, C::AllToAllV, C::GatherV,
                                C::ScatterV};

std::string what(C c, int n, int rank, int root, size_t count, Algorithm a = Algorithm::Auto) {
  return std::string(spec(c).name) + " n=" + std::to_string(n) + " rank=" + std::to_string(rank) +
         " root=" + std::to_string(root) + " count=" + std::to_string(count) +
         " algo=" + std::string(toString(a));
}

// ---- names -----------------------------------------------------------------------------

TEST(CollectiveSpec, RowsAreIndexedByTheirEnum) {
  ASSERT_EQ(collectiveTable().size(), kCollectiveCount);
  ASSERT_EQ(kAll.size() + kUneven.size(), kCollectiveCount);
  for (C c : kAll) EXPECT_EQ(spec(c).id, c);
  for (C c : kUneven) EXPECT_EQ(spec(c).id, c);
}

TEST(CollectiveSpec, NamesAreTheOnesInErrorsAndFingerprints) {
  const std::vector<std::pair<C, std::string>> names = {
      {C::AllReduce, "allreduce"}, {C::ReduceScatter, "reduce_scatter"},
      {C::AllGather, "allgather"}, {C::Broadcast, "broadcast"},
      {C::Reduce, "reduce"},       {C::Barrier, "barrier"},
      {C::AllToAll, "alltoall"},   {C::Gather, "gather"},
      {C::Scatter, "scatter"}};
  for (const auto& [c, name] : names) EXPECT_EQ(spec(c).name, name);
  EXPECT_EQ(collectiveNames(),
            "allreduce, reduce_scatter, allgather, broadcast, reduce, barrier, alltoall, gather, "
            "scatter, allgatherv, reduce_scatter_v, alltoallv, gatherv, scatterv");
}

TEST(CollectiveSpec, LookupByEveryName) {
  const std::vector<std::pair<std::string, C>> cases = {
      {"allreduce", C::AllReduce},
      {"all_reduce", C::AllReduce},
      {"ar", C::AllReduce},
      {"AllReduce", C::AllReduce},
      {"all-reduce", C::AllReduce},
      {"reduce_scatter", C::ReduceScatter},
      {"reducescatter", C::ReduceScatter},
      {"rs", C::ReduceScatter},
      {"reduce-scatter", C::ReduceScatter},
      {"allgather", C::AllGather},
      {"all_gather", C::AllGather},
      {"ag", C::AllGather},
      {"broadcast", C::Broadcast},
      {"bcast", C::Broadcast},
      {"reduce", C::Reduce},
      {"barrier", C::Barrier},
      {"alltoall", C::AllToAll},
      {"all_to_all", C::AllToAll},
      {"a2a", C::AllToAll},
      {"gather", C::Gather},
      {"scatter", C::Scatter},
  };
  for (const auto& [name, c] : cases) {
    auto got = parseCollective(name);
    ASSERT_TRUE(got.has_value()) << name;
    EXPECT_EQ(*got, c) << name;
  }
  for (const char* bad : {"", "allfoo", "send", "recv", "sendrecv", "all", "a_r"}) {
    EXPECT_FALSE(parseCollective(bad).has_value()) << bad;
  }
  // Every name of every row finds its row, and no name belongs to two rows.
  std::set<std::string> seen;
  for (const CollectiveSpec& r : collectiveTable()) {
    std::set<std::string> mine = {std::string(r.name), std::string(r.ncclName)};
    for (auto a : r.aliases) mine.insert(std::string(a));
    for (const std::string& name : mine) {
      EXPECT_EQ(parseCollective(name), r.id) << name;
      EXPECT_TRUE(seen.insert(name).second) << name << " names two rows";
    }
  }
}

TEST(CollectiveSpec, NcclTestsNames) {
  EXPECT_EQ(spec(C::AllReduce).ncclName, "all_reduce");
  EXPECT_EQ(spec(C::AllGather).ncclName, "all_gather");
  EXPECT_EQ(spec(C::ReduceScatter).ncclName, "reduce_scatter");
  EXPECT_EQ(spec(C::AllToAll).ncclName, "alltoall");
  EXPECT_EQ(spec(C::Broadcast).ncclName, "broadcast");
  EXPECT_EQ(spec(C::Reduce).ncclName, "reduce");
  EXPECT_EQ(spec(C::Gather).ncclName, "gather");
  EXPECT_EQ(spec(C::Scatter).ncclName, "scatter");
  EXPECT_EQ(spec(C::Barrier).ncclName, "barrier");
}

TEST(CollectiveSpec, RootedAndReduceOp) {
  for (C c : kAll) {
    const bool rooted = c == C::Broadcast || c == C::Reduce || c == C::Gather || c == C::Scatter;
    const bool op = c == C::AllReduce || c == C::ReduceScatter || c == C::Reduce;
    EXPECT_EQ(spec(c).rooted, rooted) << spec(c).name;
    EXPECT_EQ(spec(c).takesOp, op) << spec(c).name;
  }
}

// ---- buffers ---------------------------------------------------------------------------

struct SizeCase {
  C c;
  int n, rank, root;
  size_t count;
  size_t in, out;  // elements
};

TEST(CollectiveSpec, BufferSizesLiteral) {
  const SizeCase cases[] = {
      // world 1
      {C::AllReduce, 1, 0, -1, 5, 5, 5},
      {C::ReduceScatter, 1, 0, -1, 5, 5, 5},
      {C::AllGather, 1, 0, -1, 5, 5, 5},
      {C::Broadcast, 1, 0, 0, 5, 5, 5},
      {C::Reduce, 1, 0, 0, 5, 5, 5},
      {C::Barrier, 1, 0, -1, 5, 0, 0},
      {C::AllToAll, 1, 0, -1, 5, 5, 5},
      {C::Gather, 1, 0, 0, 5, 5, 5},
      {C::Scatter, 1, 0, 0, 5, 5, 5},
      // count 0
      {C::AllReduce, 4, 1, -1, 0, 0, 0},
      {C::ReduceScatter, 4, 1, -1, 0, 0, 0},
      {C::Gather, 4, 2, 2, 0, 0, 0},
      // world 4, count 3
      {C::AllReduce, 4, 2, -1, 3, 3, 3},
      {C::ReduceScatter, 4, 2, -1, 3, 12, 3},
      {C::AllGather, 4, 2, -1, 3, 3, 12},
      {C::Broadcast, 4, 2, 2, 3, 3, 3},
      {C::Broadcast, 4, 1, 2, 3, 0, 3},
      {C::Reduce, 4, 2, 2, 3, 3, 3},
      {C::Reduce, 4, 3, 2, 3, 3, 0},
      {C::Barrier, 4, 3, -1, 3, 0, 0},
      {C::AllToAll, 4, 0, -1, 3, 12, 12},
      {C::Gather, 4, 0, 0, 3, 3, 12},
      {C::Gather, 4, 1, 0, 3, 3, 0},
      {C::Scatter, 4, 3, 3, 3, 12, 3},
      {C::Scatter, 4, 0, 3, 3, 0, 3},
      // world 7, count 10, root 6
      {C::ReduceScatter, 7, 6, -1, 10, 70, 10},
      {C::AllGather, 7, 0, -1, 10, 10, 70},
      {C::Gather, 7, 6, 6, 10, 10, 70},
      {C::Scatter, 7, 5, 6, 10, 0, 10},
  };
  for (const SizeCase& k : cases) {
    const std::string w = what(k.c, k.n, k.rank, k.root, k.count);
    EXPECT_EQ(inputElems(k.c, k.count, k.n, k.rank, k.root), k.in) << w;
    EXPECT_EQ(outputElems(k.c, k.count, k.n, k.rank, k.root), k.out) << w;
    EXPECT_EQ(inputBytes(k.c, k.count, 8, k.n, k.rank, k.root), k.in * 8) << w;
    EXPECT_EQ(outputBytes(k.c, k.count, 2, k.n, k.rank, k.root), k.out * 2) << w;
  }
}

// The rules of Communicator::issue, written out independently of the table.
size_t expectedIn(C c, size_t count, int n, int rank, int root) {
  const size_t N = static_cast<size_t>(n);
  switch (c) {
    case C::AllReduce:
    case C::AllGather:
    case C::Reduce:
    case C::Gather:
      return count;
    case C::ReduceScatter:
    case C::AllToAll:
      return N * count;
    case C::Broadcast:
      return rank == root ? count : 0;
    case C::Scatter:
      return rank == root ? N * count : 0;
    case C::Barrier:
    default:  // the uneven rows: uneven_test.cpp
      return 0;
  }
  return 0;
}
size_t expectedOut(C c, size_t count, int n, int rank, int root) {
  const size_t N = static_cast<size_t>(n);
  switch (c) {
    case C::AllReduce:
    case C::ReduceScatter:
    case C::Broadcast:
    case C::Scatter:
      return count;
    case C::AllGather:
    case C::AllToAll:
      return N * count;
    case C::Reduce:
      return rank == root ? count : 0;
    case C::Gather:
      return rank == root ? N * count : 0;
    case C::Barrier:
    default:  // the uneven rows: uneven_test.cpp
      return 0;
  }
  return 0;
}

std::vector<int> rootsOf(C c, int n) {
  if (!spec(c).rooted) return {-1};
  std::set<int> roots = {0, n / 2, n - 1};
  return {roots.begin(), roots.end()};
}

TEST(CollectiveSpec, BufferSizesOverGrid) {
  for (C c : kAll) {
    for (int n = 1; n <= 9; ++n) {
      for (int root : rootsOf(c, n)) {
        for (int rank = 0; rank < n; ++rank) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
            const std::string w = what(c, n, rank, root, count);
            EXPECT_EQ(inputElems(c, count, n, rank, root), expectedIn(c, count, n, rank, root))
                << w;
            EXPECT_EQ(outputElems(c, count, n, rank, root), expectedOut(c, count, n, rank, root))
                << w;
            EXPECT_EQ(hasInput(c, rank, root), expectedIn(c, 1, n, rank, root) > 0) << w;
            EXPECT_EQ(hasOutput(c, rank, root), expectedOut(c, 1, n, rank, root) > 0) << w;
          }
        }
      }
    }
  }
}

TEST(CollectiveSpec, CountLimit) {
  EXPECT_TRUE(countFits(0, 4, 1));
  EXPECT_TRUE(countFits((size_t{1} << 62) / 4 / 3, 4, 3));
  EXPECT_FALSE(countFits((size_t{1} << 62) / 4 / 3 + 1, 4, 3));
  EXPECT_FALSE(countFits(SIZE_MAX, 1, 1));
}

// ---- in place --------------------------------------------------------------------------

constexpr size_t kCount = 3;  // the classification test's elements per block

TEST(CollectiveSpec, InPlaceClassification) {
  std::vector<uint8_t> mem(4096);
  uint8_t* b = mem.data();
  constexpr size_t e = 4, blk = kCount * e;  // 12 bytes a block
  auto cls = [&](C k, const void* in, const void* out, int n, int rank, int root = -1,
                 size_t count = kCount) { return classify(k, in, out, count, e, n, rank, root); };
  using P = Placement;
  // Same pointer.
  EXPECT_EQ(cls(C::AllReduce, b, b, 4, 1), P::InPlace);
  EXPECT_EQ(cls(C::AllReduce, b, b + 1000, 4, 1), P::Distinct);
  EXPECT_EQ(cls(C::AllReduce, b, b + 4, 4, 1), P::Overlap);
  EXPECT_EQ(cls(C::AllReduce, b, b + blk, 4, 1), P::Distinct);  // adjacent
  EXPECT_EQ(cls(C::Broadcast, b, b, 4, 0, 0), P::InPlace);
  EXPECT_EQ(cls(C::Broadcast, b, b + 4, 4, 0, 0), P::Overlap);
  EXPECT_EQ(cls(C::Broadcast, b, b + 4, 4, 1, 0), P::Distinct);  // a non-root has no input
  EXPECT_EQ(cls(C::Reduce, b, b + 4, 4, 1, 0), P::Distinct);     // a non-root has no output
  EXPECT_EQ(cls(C::Reduce, b, b + 4, 4, 0, 0), P::Overlap);
  // in == out + rank x block.
  EXPECT_EQ(cls(C::AllGather, b + 2 * blk, b, 4, 2), P::InPlace);
  EXPECT_EQ(cls(C::AllGather, b, b, 4, 0), P::InPlace);
  EXPECT_EQ(cls(C::AllGather, b, b, 4, 2), P::Overlap);
  EXPECT_EQ(cls(C::AllGather, b + blk, b, 4, 2), P::Overlap);
  EXPECT_EQ(cls(C::AllGather, b + 4 * blk, b, 4, 2), P::Distinct);
  EXPECT_EQ(cls(C::Gather, b + 3 * blk, b, 4, 3, 3), P::InPlace);
  EXPECT_EQ(cls(C::Gather, b + 3 * blk, b, 4, 2, 3), P::Distinct);  // a non-root's output: none
  EXPECT_EQ(cls(C::Gather, b + blk, nullptr, 4, 1, 3), P::Distinct);
  EXPECT_EQ(cls(C::Gather, b, b, 4, 3, 3), P::Overlap);
  // out == in + rank x block.
  EXPECT_EQ(cls(C::ReduceScatter, b, b + 2 * blk, 4, 2), P::InPlace);
  EXPECT_EQ(cls(C::ReduceScatter, b, b, 4, 0), P::InPlace);
  EXPECT_EQ(cls(C::ReduceScatter, b, b, 4, 1), P::Overlap);
  EXPECT_EQ(cls(C::ReduceScatter, b, b + 4 * blk, 4, 1), P::Distinct);
  EXPECT_EQ(cls(C::Scatter, b, b + blk, 4, 1, 1), P::InPlace);
  EXPECT_EQ(cls(C::Scatter, nullptr, b, 4, 2, 1), P::Distinct);
  EXPECT_EQ(cls(C::Scatter, b, b + blk, 4, 2, 1), P::Distinct);  // a non-root's input: none
  EXPECT_EQ(cls(C::Scatter, b, b, 4, 1, 1), P::Overlap);
  // All-to-all has no in-place form.
  EXPECT_EQ(cls(C::AllToAll, b, b, 4, 1), P::InPlaceRefused);
  EXPECT_EQ(cls(C::AllToAll, b, b + blk, 4, 1), P::Overlap);
  EXPECT_EQ(cls(C::AllToAll, b, b + 4 * blk, 4, 1), P::Distinct);
  EXPECT_EQ(cls(C::AllToAll, b, b, 4, 1, -1, 0), P::InPlace);  // nothing to move
  // The barrier has no buffers.
  EXPECT_EQ(cls(C::Barrier, nullptr, nullptr, 4, 1, -1, 0), P::InPlace);
  EXPECT_EQ(cls(C::Barrier, b, b + 1, 4, 1), P::Distinct);
  // World size 1: every in-place layout is the same pointer.
  for (C k : kAll) {
    if (k == C::AllToAll || k == C::Barrier) continue;
    EXPECT_EQ(cls(k, b, b, 1, 0, 0), P::InPlace) << spec(k).name;
  }
}

// ---- algorithms ------------------------------------------------------------------------

TEST(CollectiveSpec, AlgorithmsEachRowAllows) {
  EXPECT_EQ(spec(C::AllReduce).algorithms, allreduceAlgorithms());
  EXPECT_EQ(spec(C::Broadcast).algorithms,
            (std::vector<Algorithm>{Algorithm::Tree, Algorithm::Ring}));
  EXPECT_EQ(spec(C::ReduceScatter).algorithms, std::vector<Algorithm>{Algorithm::Ring});
  EXPECT_EQ(spec(C::AllGather).algorithms, std::vector<Algorithm>{Algorithm::Ring});
  EXPECT_EQ(spec(C::Reduce).algorithms, std::vector<Algorithm>{Algorithm::Tree});
  for (C c : {C::Barrier, C::AllToAll, C::Gather, C::Scatter}) {
    EXPECT_TRUE(spec(c).algorithms.empty()) << spec(c).name;
    EXPECT_TRUE(allows(c, Algorithm::Auto));
    EXPECT_FALSE(allows(c, Algorithm::Ring));
    EXPECT_FALSE(allows(c, Algorithm::Tree));
  }
  EXPECT_FALSE(allows(C::Broadcast, Algorithm::Naive));
  EXPECT_FALSE(allows(C::Reduce, Algorithm::Ring));
  EXPECT_TRUE(allows(C::AllReduce, Algorithm::Hierarchical));
}

TEST(CollectiveSpec, ResolveAtIssueAsTheCommunicatorDoes) {
  const LinkModel m;
  const size_t seg = 1 << 20;
  // All-reduce: Auto waits for the hosts; one rank runs the ring whatever was asked.
  EXPECT_EQ(resolveAtIssue(C::AllReduce, Algorithm::Auto, 4, 64, seg, m, nullptr), Algorithm::Auto);
  EXPECT_EQ(resolveAtIssue(C::AllReduce, Algorithm::Tree, 4, 64, seg, m, nullptr), Algorithm::Tree);
  EXPECT_EQ(resolveAtIssue(C::AllReduce, Algorithm::Naive, 1, 64, seg, m, nullptr),
            Algorithm::Ring);
  // Broadcast: the cost model picks, or the named one.
  for (size_t bytes : {size_t{8}, size_t{64} << 20}) {
    std::string why;
    EXPECT_EQ(resolveAtIssue(C::Broadcast, Algorithm::Auto, 8, bytes, seg, m, &why),
              chooseBroadcast(8, bytes, seg, m, nullptr));
  }
  EXPECT_EQ(resolveAtIssue(C::Broadcast, Algorithm::Ring, 8, 8, seg, m, nullptr), Algorithm::Ring);
  // Fixed rows: their one algorithm (Auto where there is nothing to name).
  EXPECT_EQ(resolveAtIssue(C::ReduceScatter, Algorithm::Auto, 4, 8, seg, m, nullptr),
            Algorithm::Ring);
  EXPECT_EQ(resolveAtIssue(C::AllGather, Algorithm::Ring, 4, 8, seg, m, nullptr), Algorithm::Ring);
  EXPECT_EQ(resolveAtIssue(C::Reduce, Algorithm::Auto, 4, 8, seg, m, nullptr), Algorithm::Tree);
  for (C c : {C::Barrier, C::AllToAll, C::Gather, C::Scatter}) {
    EXPECT_EQ(resolveAtIssue(c, Algorithm::Auto, 4, 8, seg, m, nullptr), Algorithm::Auto);
    EXPECT_FALSE(resolveAtIssue(c, Algorithm::Ring, 4, 8, seg, m, nullptr).has_value());
  }
  EXPECT_FALSE(resolveAtIssue(C::Reduce, Algorithm::Ring, 4, 8, seg, m, nullptr).has_value());
  EXPECT_FALSE(
      resolveAtIssue(C::Broadcast, Algorithm::HalvingDoubling, 4, 8, seg, m, nullptr).has_value());
}

TEST(CollectiveSpec, ReadsInputLateIsNaiveAllreduceOnly) {
  for (C c : kAll) {
    for (Algorithm a : allreduceAlgorithms()) {
      EXPECT_EQ(spec(c).readsInputLate(a), c == C::AllReduce && a == Algorithm::Naive);
    }
  }
}

TEST(CollectiveSpec, BusBandwidthFactors) {
  for (int n : {1, 2, 3, 4, 8}) {
    const double nn = n;
    EXPECT_DOUBLE_EQ(busBwFactor(C::AllReduce, n), n > 1 ? 2 * (nn - 1) / nn : 0);
    for (C c : {C::ReduceScatter, C::AllGather, C::AllToAll, C::Gather, C::Scatter})
      EXPECT_DOUBLE_EQ(busBwFactor(c, n), (nn - 1) / nn);
    EXPECT_DOUBLE_EQ(busBwFactor(C::Broadcast, n), 1);
    EXPECT_DOUBLE_EQ(busBwFactor(C::Reduce, n), 1);
    EXPECT_DOUBLE_EQ(busBwFactor(C::Barrier, n), 0);
  }
}

// ---- schedules -------------------------------------------------------------------------

// The logical elements rank `rank` must hold in its output at the end.
std::set<size_t> mustEndWith(C c, size_t count, int n, int rank, int root) {
  std::set<size_t> out;
  auto add = [&](size_t from, size_t len) {
    for (size_t i = from; i < from + len; ++i) out.insert(i);
  };
  const size_t N = static_cast<size_t>(n), R = static_cast<size_t>(rank);
  switch (c) {
    case C::AllReduce:
    case C::Broadcast:
      add(0, count);
      break;
    case C::ReduceScatter:
    case C::Scatter:
      add(R * count, count);
      break;
    case C::AllGather:
    case C::AllToAll:
      add(0, N * count);
      break;
    case C::Reduce:
      if (rank == root) add(0, count);
      break;
    case C::Gather:
      if (rank == root) add(0, N * count);
      break;
    case C::Barrier:
    default:  // the uneven rows: uneven_test.cpp
      break;
  }
  return out;
}

// The logical ranges the buffers span on this rank: [origin, origin + elems), with the
// origins the executor needs written out here (not read from the table).
struct Window {
  size_t origin, elems;
  bool holds(const Range& r) const {
    return r.count == 0 || (r.offset >= origin && r.offset + r.count <= origin + elems);
  }
};
size_t expectedInputOrigin(C c, size_t count, int rank, int root) {
  const size_t R = static_cast<size_t>(rank);
  if (c == C::AllGather) return R * count;
  if (c == C::Gather && rank == root) return R * count;
  return 0;
}
size_t expectedOutputOrigin(C c, size_t count, int rank) {
  const size_t R = static_cast<size_t>(rank);
  return c == C::ReduceScatter || c == C::Scatter ? R * count : 0;
}

std::vector<Algorithm> algorithmsOf(C c) {
  std::vector<Algorithm> a = spec(c).algorithms;
  a.push_back(Algorithm::Auto);
  return a;
}

// Host layouts for the hierarchical all-reduce: none (one host each), and two hosts of
// consecutive ranks when there are at least two ranks.
std::vector<HostLayout> layoutsOf(int n) {
  std::vector<HostLayout> out;
  if (n >= 2) out.push_back(HostLayout::contiguous({n / 2, n - n / 2}));
  if (n >= 3) out.push_back(HostLayout::contiguous({1, n - 1}));
  return out;
}

void checkSchedule(const BuildArgs& a, const HostLayout* layout) {
  const C c = a.collective;
  const std::string w = what(c, a.n, a.rank, a.root, a.count, a.algorithm) +
                        (layout ? " hosts=" + layout->describe() : "") +
                        (a.inPlace ? " in-place" : "");
  const BuiltSchedule b = build(a);
  const Schedule& s = b.schedule;
  EXPECT_EQ(b.inputOrigin, expectedInputOrigin(c, a.count, a.rank, a.root)) << w;
  EXPECT_EQ(b.outputOrigin, expectedOutputOrigin(c, a.count, a.rank)) << w;
  const Window in{b.inputOrigin, expectedIn(c, a.count, a.n, a.rank, a.root)};
  const Window out{b.outputOrigin, expectedOut(c, a.count, a.n, a.rank, a.root)};

  std::set<size_t> written;
  size_t copies = 0;
  for (const Op& op : s.ops) {
    auto touch = [&](BufferId id, const Range& r, bool writes) {
      if (id == BufferId::Input) {
        EXPECT_TRUE(in.holds(r) && !writes) << w << ": input range";
      }
      if (id == BufferId::Output) {
        EXPECT_TRUE(out.holds(r)) << w << ": output range " << r.offset << "+" << r.count;
        if (writes) {
          for (size_t i = r.offset; i < r.offset + r.count; ++i) written.insert(i);
        }
      }
      if (id == BufferId::Scratch) {
        EXPECT_LE(r.offset + r.count, s.scratchElems) << w << ": scratch range";
      }
    };
    switch (op.type) {
      case OpType::Send:
        touch(op.buffer, op.range, false);
        break;
      case OpType::Recv:
        if (op.action == RecvAction::Reduce) touch(op.buffer, op.range, false);
        if (op.thenSelf) touch(BufferId::Input, op.range, false);
        touch(op.dst, op.range, true);
        break;
      case OpType::Copy: {
        ++copies;
        EXPECT_EQ(op.peer, -1) << w;
        EXPECT_EQ(op.dependsOn, -1) << w << ": a local copy waits for nothing";
        EXPECT_EQ(op.buffer, BufferId::Input) << w;
        EXPECT_EQ(op.dst, BufferId::Output) << w;
        EXPECT_GT(op.range.count, 0u) << w << ": no empty copies";
        const bool reduces = c == C::AllReduce || c == C::ReduceScatter || c == C::Reduce;
        EXPECT_EQ(op.finalize, reduces && a.n == 1) << w;
        touch(op.buffer, op.range, false);
        touch(op.dst, op.range, true);
        break;
      }
    }
  }
  EXPECT_EQ(written, mustEndWith(c, a.count, a.n, a.rank, a.root)) << w;
  // The copies are exactly the local parts of the result (what never crosses the wire).
  size_t expectCopies = 0;
  if (a.count > 0) {
    switch (c) {
      case C::AllReduce:
      case C::ReduceScatter:
      case C::Reduce:
        expectCopies = a.n == 1 ? 1 : 0;
        break;
      case C::AllGather:
      case C::AllToAll:
        expectCopies = 1;
        break;
      case C::Broadcast:
      case C::Gather:
      case C::Scatter:
        expectCopies = a.rank == a.root ? 1 : 0;
        break;
      case C::Barrier:
      default:  // the uneven rows: uneven_test.cpp
        break;
    }
  }
  EXPECT_EQ(copies, expectCopies) << w;
  for (int p : s.peers) EXPECT_TRUE(p >= 0 && p < a.n && p != a.rank) << w << ": peer " << p;

  // Bytes against the closed forms.
  for (size_t e : {size_t{1}, size_t{4}}) {
    auto sent = bytesSent(a, e);
    ASSERT_TRUE(sent.has_value()) << w << ": every row and algorithm has a closed form";
    EXPECT_EQ(s.bytesSent(e), *sent) << w << " elem=" << e;
    if (auto got = bytesReceived(a, e)) {
      EXPECT_EQ(s.bytesReceived(e), *got) << w << " elem=" << e;
    }
  }
  const bool naive = c == C::AllReduce && a.algorithm == Algorithm::Naive;
  EXPECT_EQ(b.needsInputCopy, naive && a.inPlace && a.n > 1 && a.count > 0) << w;
}

TEST(CollectiveSpec, SchedulesCoverTheOutputAndMatchTheClosedForms) {
  for (C c : kAll) {
    for (int n = 1; n <= 9; ++n) {
      const size_t N = static_cast<size_t>(n);
      std::set<size_t> counts = {0, 1, N - 1, N, N + 1, 37};
      for (Algorithm algo : algorithmsOf(c)) {
        for (int root : rootsOf(c, n)) {
          for (size_t count : counts) {
            for (size_t seg : {size_t{3}, size_t{1} << 20}) {
              for (int rank = 0; rank < n; ++rank) {
                for (bool inPlace : {false, true}) {
                  BuildArgs a;
                  a.collective = c;
                  a.rank = rank;
                  a.n = n;
                  a.root = root;
                  a.count = count;
                  a.segElems = seg;
                  a.algorithm = algo;
                  a.inPlace = inPlace;
                  checkSchedule(a, nullptr);
                  if (algo == Algorithm::Hierarchical && !inPlace) {
                    for (const HostLayout& l : layoutsOf(n)) {
                      a.hosts = &l;
                      checkSchedule(a, &l);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(CollectiveSpec, ClosedFormsKnownValues) {
  auto sent = [](C c, Algorithm a, int n, int rank, int root, size_t count) {
    BuildArgs b;
    b.collective = c;
    b.algorithm = a;
    b.n = n;
    b.rank = rank;
    b.root = root;
    b.count = count;
    return bytesSent(b, 4).value();
  };
  EXPECT_EQ(sent(C::AllReduce, Algorithm::Ring, 4, 0, -1, 8), 2u * 3 * 2 * 4);  // 2(N-1) chunks
  EXPECT_EQ(sent(C::AllReduce, Algorithm::Naive, 4, 0, -1, 8), 3u * 8 * 4);
  EXPECT_EQ(sent(C::ReduceScatter, Algorithm::Auto, 4, 1, -1, 8), 3u * 8 * 4);
  EXPECT_EQ(sent(C::Broadcast, Algorithm::Tree, 8, 3, 3, 10), 3u * 10 * 4);  // root: log2 8
  EXPECT_EQ(sent(C::Broadcast, Algorithm::Tree, 8, 4, 0, 10), 2u * 10 * 4);  // v=4: 6, 5
  EXPECT_EQ(sent(C::Broadcast, Algorithm::Ring, 8, 2, 3, 10), 0u);           // the chain's last
  EXPECT_EQ(sent(C::Broadcast, Algorithm::Ring, 8, 3, 3, 10), 10u * 4);
  EXPECT_EQ(sent(C::Reduce, Algorithm::Tree, 5, 2, 2, 10), 0u);
  EXPECT_EQ(sent(C::Gather, Algorithm::Auto, 5, 1, 2, 10), 10u * 4);
  EXPECT_EQ(sent(C::Scatter, Algorithm::Auto, 5, 2, 2, 10), 4u * 10 * 4);
  EXPECT_EQ(sent(C::Barrier, Algorithm::Auto, 5, 2, -1, 10), 0u);
}

TEST(CollectiveSpec, BuildRefusesWhatTheRowDoesNot) {
  BuildArgs a;
  a.collective = C::Reduce;
  a.n = 4;
  a.rank = 1;
  a.root = 4;
  a.count = 3;
  EXPECT_THROW(build(a), InvalidArgumentError);  // root out of range
  a.root = 0;
  a.algorithm = Algorithm::Ring;
  EXPECT_THROW(build(a), InvalidArgumentError);  // reduce is a tree
  a.algorithm = Algorithm::Tree;
  EXPECT_NO_THROW(build(a));
  a.rank = 4;
  EXPECT_THROW(build(a), InvalidArgumentError);
  a.collective = C::Gather;
  a.rank = 0;
  a.algorithm = Algorithm::Tree;
  EXPECT_THROW(build(a), InvalidArgumentError);
}

}  // namespace
}  // namespace tccl::algo
