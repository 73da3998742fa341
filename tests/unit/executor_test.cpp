// The real executor (src/exec) over in-memory links (exec_harness.hpp): every
// collective's schedules on worlds 1..8 and beyond, with random partial reads and
// writes on links of small capacities, exact integer data checked against closed forms
// computed here (not through the schedule code), byte counters against the schedules;
// local copy ops; and the executor's failure paths (closed peers, mismatches seen on a
// watched link, aborts, deadlines).
#include "exec/executor.hpp"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/collectives.hpp"
#include "algorithms/schedule.hpp"
#include "exec_harness.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using algo::BufferId;
using algo::Schedule;
using exectest::allreduceInt;
using exectest::bytesOf;
using exectest::ExecOutcome;
using exectest::MemLinkSet;
using exectest::MeshOptions;
using exectest::RankBuffers;
using exectest::valuesOf;

// The edges 0, 1, n-1, n, n+1, and `big` (several segments).
std::vector<size_t> countsFor(int n, size_t big) {
  const size_t un = static_cast<size_t>(n);
  std::vector<size_t> c = {0, 1, un - 1, un, un + 1, big};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// A mesh whose capacities go from smaller than a header to larger than most messages.
MeshOptions mesh(uint64_t seed) {
  MeshOptions o;
  o.seed = seed;
  o.minCapacity = seed % 4 == 0 ? 16 : 1024;
  o.maxCapacity = 64 * 1024;
  o.timeout = 30s;
  return o;
}

std::string caseName(const std::string& what, int n, size_t count, size_t seg, uint64_t seed) {
  return what + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
         " seg=" + std::to_string(seg) + " seed=" + std::to_string(seed);
}

// ---- all-reduce: every algorithm --------------------------------------------------------

// Hosts of two consecutive ranks (the last one alone for odd n): uniform for even n, the
// leader variant for odd n.
algo::HostLayout pairsOfHosts(int n) {
  std::vector<int> sizes;
  for (int left = n; left > 0; left -= 2) sizes.push_back(std::min(left, 2));
  return algo::HostLayout::contiguous(sizes);
}

std::vector<Schedule> allreduceSchedules(Algorithm a, int n, size_t count, size_t seg) {
  const algo::HostLayout hosts = pairsOfHosts(n);
  std::vector<Schedule> all;
  for (int r = 0; r < n; ++r) {
    all.push_back(algo::allreduceSchedule(a, r, n, count, seg,
                                          a == Algorithm::Hierarchical ? &hosts : nullptr));
  }
  return all;
}

void allreduceGrid(Algorithm a) {
  uint64_t seed = 1000 + static_cast<uint64_t>(a) * 100000;
  int k = 0;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13}) {
    for (size_t count : countsFor(n, 1001)) {
      for (size_t seg : {size_t{1}, size_t{3}, size_t{64}, size_t{4096}}) {
        if (seg == 1 && count > 100) continue;  // thousands of messages add nothing
        for (int rep = 0; rep < 2; ++rep) {
          // Sum, avg and max, in and out of place, each over the grid.
          const ReduceOp op = k % 3 == 0   ? ReduceOp::Sum
                              : k % 3 == 1 ? ReduceOp::Avg
                                           : ReduceOp::Max;
          const bool inPlace = (k / 3) % 2 == 1;
          ++k;
          ++seed;
          SCOPED_TRACE(caseName(std::string(toString(a)) + " " + std::string(toString(op)) +
                                    (inPlace ? " in-place" : ""),
                                n, count, seg, seed));
          ASSERT_EQ(allreduceInt(allreduceSchedules(a, n, count, seg), count, op, inPlace,
                                 algo::allreduceReadsInputLate(a), mesh(seed)),
                    "");
        }
      }
    }
  }
}

TEST(ExecutorAllreduce, Ring) { allreduceGrid(Algorithm::Ring); }
TEST(ExecutorAllreduce, Naive) { allreduceGrid(Algorithm::Naive); }
TEST(ExecutorAllreduce, Tree) { allreduceGrid(Algorithm::Tree); }
TEST(ExecutorAllreduce, HalvingDoubling) { allreduceGrid(Algorithm::HalvingDoubling); }
TEST(ExecutorAllreduce, RecursiveDoubling) { allreduceGrid(Algorithm::RecursiveDoubling); }
TEST(ExecutorAllreduce, Hierarchical) { allreduceGrid(Algorithm::Hierarchical); }

// Messages of hundreds of KB (the grid's are at most 8 KB) over links that take up to
// 1 MiB and cut reads and writes at random, mid-element: exact results for sum, avg and
// max, in and out of place, with segments that are not a multiple of the world.
TEST(ExecutorAllreduce, LargeMessagesCutAtRandom) {
  uint64_t seed = 77;
  int k = 0;
  for (Algorithm a :
       {Algorithm::Ring, Algorithm::HalvingDoubling, Algorithm::Tree, Algorithm::Naive}) {
    for (int n : {2, 3, 5}) {
      const size_t count = 150001;  // 1.2 MB of int64, messages of up to 512 KiB + 24 B
      const size_t seg = 65536 + 3;
      const ReduceOp op = k % 3 == 0 ? ReduceOp::Sum : k % 3 == 1 ? ReduceOp::Avg : ReduceOp::Max;
      const bool inPlace = k % 2 == 1;
      ++k;
      MeshOptions o = mesh(++seed);
      o.minCapacity = 64 * 1024;
      o.maxCapacity = 1024 * 1024;
      SCOPED_TRACE(caseName(
          std::string(toString(a)) + " " + std::string(toString(op)) + (inPlace ? " in-place" : ""),
          n, count, seg, seed));
      ASSERT_EQ(allreduceInt(allreduceSchedules(a, n, count, seg), count, op, inPlace,
                             algo::allreduceReadsInputLate(a), o),
                "");
    }
  }
}

TEST(ExecutorAllreduce, EveryAlgorithmIsInTheGrid) {
  // A new algorithm of the menu needs its own test above.
  EXPECT_EQ(algo::allreduceAlgorithms().size(), 6u);
}

// ---- the other collectives -------------------------------------------------------------

// Distinct values per (rank, index); w adds a block index.
int64_t v(int r, size_t i) { return int64_t{r} * 1000003 + static_cast<int64_t>(i) * 7 + 1; }
int64_t w(int a, int b, size_t i) {
  return int64_t{a} * 100000007 + int64_t{b} * 10007 + static_cast<int64_t>(i);
}

std::vector<int64_t> garbage(size_t count) { return std::vector<int64_t>(count, -777); }

struct Case {
  std::vector<Schedule> scheds;
  std::vector<RankBuffers> bufs;
  std::vector<std::vector<int64_t>> want;  // per rank, its whole output (empty: not checked)
  ReduceOp op = ReduceOp::Sum;
};

std::string run(Case& c, const MeshOptions& o) {
  const ExecOutcome out = exectest::execute(c.scheds, c.bufs, DataType::Int64, c.op, o);
  if (std::string e = out.firstError(); !e.empty()) return e;
  for (size_t r = 0; r < c.want.size(); ++r) {
    const std::vector<int64_t>& want = c.want[r];
    const std::vector<int64_t> got = valuesOf<int64_t>(c.bufs[r].output, want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] != want[i]) {
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": got " +
               std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
      }
    }
  }
  return exectest::checkCounters(c.scheds, out, 8);
}

// These cases run the bare builders (collectives.hpp), so they do the local part of the
// result themselves before the schedule runs; the collective table's build() adds it as
// Copy ops instead (the communicator runs those: tests/proc/collectives_test.cpp).
void localCopy(std::vector<uint8_t>& dst, size_t dstElem, const std::vector<uint8_t>& src,
               size_t srcElem, size_t count) {
  if (count > 0) std::memcpy(dst.data() + dstElem * 8, src.data() + srcElem * 8, count * 8);
}

Case reduceScatterCase(int n, size_t c, size_t seg, ReduceOp op) {
  Case k;
  k.op = op;
  const size_t total = static_cast<size_t>(n) * c;
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::ringReduceScatter(r, n, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(total);
    for (size_t i = 0; i < total; ++i) in[i] = exectest::allreduceInput(op, n, r, i);
    b.input = bytesOf(in);
    b.output = bytesOf(garbage(c));
    b.outputOrigin = static_cast<size_t>(r) * c;
    if (n == 1) localCopy(b.output, 0, b.input, 0, c);
    std::vector<int64_t> want(c);
    for (size_t j = 0; j < c; ++j) {
      want[j] = n == 1 ? in[j] : exectest::allreduceExpected(op, n, static_cast<size_t>(r) * c + j);
    }
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case allGatherCase(int n, size_t c, size_t seg, bool inPlace) {
  Case k;
  std::vector<int64_t> want;
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < c; ++j) want.push_back(v(p, j));
  }
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::ringAllGather(r, n, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(c);
    for (size_t j = 0; j < c; ++j) in[j] = v(r, j);
    b.output = bytesOf(garbage(static_cast<size_t>(n) * c));
    if (inPlace) {
      // The input is block r of the output.
      localCopy(b.output, static_cast<size_t>(r) * c, bytesOf(in), 0, c);
      b.inPlace = true;
    } else {
      b.input = bytesOf(in);
      b.inputOrigin = static_cast<size_t>(r) * c;
      localCopy(b.output, static_cast<size_t>(r) * c, b.input, 0, c);
    }
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case broadcastCase(int n, int root, size_t c, size_t seg, bool tree) {
  Case k;
  std::vector<int64_t> want(c);
  for (size_t j = 0; j < c; ++j) want[j] = v(root, j);
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(tree ? algo::binomialBroadcast(r, n, root, c, seg)
                            : algo::chainBroadcast(r, n, root, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(c);
    for (size_t j = 0; j < c; ++j) in[j] = r == root ? v(r, j) : -5;
    b.input = bytesOf(in);
    b.output = bytesOf(garbage(c));
    if (r == root) localCopy(b.output, 0, b.input, 0, c);
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case reduceCase(int n, int root, size_t c, size_t seg, ReduceOp op) {
  Case k;
  k.op = op;
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::binomialReduce(r, n, root, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(c);
    for (size_t j = 0; j < c; ++j) in[j] = exectest::allreduceInput(op, n, r, j);
    b.input = bytesOf(in);
    b.output = bytesOf(garbage(c));
    if (n == 1) localCopy(b.output, 0, b.input, 0, c);
    std::vector<int64_t> want;  // only the root's output is defined
    if (r == root) {
      for (size_t j = 0; j < c; ++j)
        want.push_back(n == 1 ? in[j] : exectest::allreduceExpected(op, n, j));
    }
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case allToAllCase(int n, size_t c, size_t seg) {
  Case k;
  const size_t total = static_cast<size_t>(n) * c;
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::pairwiseAllToAll(r, n, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(total), want(total);
    for (int p = 0; p < n; ++p) {
      for (size_t j = 0; j < c; ++j) {
        in[static_cast<size_t>(p) * c + j] = w(r, p, j);    // block p goes to rank p
        want[static_cast<size_t>(p) * c + j] = w(p, r, j);  // and lands in its block r
      }
    }
    b.input = bytesOf(in);
    b.output = bytesOf(garbage(total));
    localCopy(b.output, static_cast<size_t>(r) * c, b.input, static_cast<size_t>(r) * c, c);
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case gatherCase(int n, int root, size_t c, size_t seg) {
  Case k;
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::flatGather(r, n, root, c, seg));
    RankBuffers b;
    std::vector<int64_t> in(c);
    for (size_t j = 0; j < c; ++j) in[j] = v(r, j);
    b.input = bytesOf(in);
    std::vector<int64_t> want;
    if (r == root) {
      b.output = bytesOf(garbage(static_cast<size_t>(n) * c));
      localCopy(b.output, static_cast<size_t>(r) * c, b.input, 0, c);
      for (int p = 0; p < n; ++p) {
        for (size_t j = 0; j < c; ++j) want.push_back(v(p, j));
      }
    } else {
      b.output = bytesOf(garbage(1));
    }
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

Case scatterCase(int n, int root, size_t c, size_t seg) {
  Case k;
  for (int r = 0; r < n; ++r) {
    k.scheds.push_back(algo::flatScatter(r, n, root, c, seg));
    RankBuffers b;
    std::vector<int64_t> in;
    if (r == root) {
      for (int p = 0; p < n; ++p) {
        for (size_t j = 0; j < c; ++j) in.push_back(w(root, p, j));
      }
    } else {
      in.assign(1, -9);
    }
    b.input = bytesOf(in);
    b.output = bytesOf(garbage(c));
    b.outputOrigin = static_cast<size_t>(r) * c;
    if (r == root) localCopy(b.output, 0, b.input, static_cast<size_t>(r) * c, c);
    std::vector<int64_t> want(c);
    for (size_t j = 0; j < c; ++j) want[j] = w(root, r, j);
    k.bufs.push_back(std::move(b));
    k.want.push_back(want);
  }
  return k;
}

const int kWorlds[] = {1, 2, 3, 4, 5, 6, 7, 8};

std::vector<int> rootsFor(int n) {
  std::vector<int> roots = {0, n - 1, n / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

TEST(ExecutorCollectives, ReduceScatter) {
  uint64_t seed = 1;
  for (int n : kWorlds) {
    for (size_t c : countsFor(n, 300)) {
      for (size_t seg : {size_t{2}, size_t{64}}) {
        const ReduceOp op = seed % 3 == 0   ? ReduceOp::Max
                            : seed % 3 == 1 ? ReduceOp::Sum
                                            : ReduceOp::Avg;
        SCOPED_TRACE(caseName("reduce-scatter " + std::string(toString(op)), n, c, seg, seed));
        Case k = reduceScatterCase(n, c, seg, op);
        ASSERT_EQ(run(k, mesh(seed++)), "");
      }
    }
  }
}

TEST(ExecutorCollectives, AllGather) {
  uint64_t seed = 100;
  for (int n : kWorlds) {
    for (size_t c : countsFor(n, 300)) {
      for (size_t seg : {size_t{2}, size_t{64}}) {
        const bool inPlace = seed % 2 == 0;
        SCOPED_TRACE(caseName(inPlace ? "all-gather in place" : "all-gather", n, c, seg, seed));
        Case k = allGatherCase(n, c, seg, inPlace);
        ASSERT_EQ(run(k, mesh(seed++)), "");
      }
    }
  }
}

TEST(ExecutorCollectives, BroadcastTreeAndChain) {
  uint64_t seed = 200;
  for (bool tree : {true, false}) {
    for (int n : kWorlds) {
      for (int root : rootsFor(n)) {
        for (size_t c : countsFor(n, 500)) {
          const size_t seg = c % 2 == 0 ? 3 : 128;
          SCOPED_TRACE(caseName(
              std::string(tree ? "tree" : "chain") + " broadcast from " + std::to_string(root), n,
              c, seg, seed));
          Case k = broadcastCase(n, root, c, seg, tree);
          ASSERT_EQ(run(k, mesh(seed++)), "");
        }
      }
    }
  }
}

TEST(ExecutorCollectives, Reduce) {
  uint64_t seed = 300;
  for (int n : kWorlds) {
    for (int root : rootsFor(n)) {
      for (size_t c : countsFor(n, 500)) {
        const ReduceOp op = seed % 3 == 0   ? ReduceOp::Max
                            : seed % 3 == 1 ? ReduceOp::Sum
                                            : ReduceOp::Avg;
        const size_t seg = c % 2 == 0 ? 3 : 128;
        SCOPED_TRACE(caseName("reduce " + std::string(toString(op)) + " to " + std::to_string(root),
                              n, c, seg, seed));
        Case k = reduceCase(n, root, c, seg, op);
        ASSERT_EQ(run(k, mesh(seed++)), "");
      }
    }
  }
}

TEST(ExecutorCollectives, AllToAll) {
  uint64_t seed = 400;
  for (int n : kWorlds) {
    for (size_t c : countsFor(n, 200)) {
      for (size_t seg : {size_t{3}, size_t{64}}) {
        SCOPED_TRACE(caseName("all-to-all", n, c, seg, seed));
        Case k = allToAllCase(n, c, seg);
        ASSERT_EQ(run(k, mesh(seed++)), "");
      }
    }
  }
}

TEST(ExecutorCollectives, GatherAndScatter) {
  uint64_t seed = 500;
  for (int n : kWorlds) {
    for (int root : rootsFor(n)) {
      for (size_t c : countsFor(n, 300)) {
        const size_t seg = c % 2 == 0 ? 3 : 64;
        SCOPED_TRACE(caseName("gather to " + std::to_string(root), n, c, seg, seed));
        Case g = gatherCase(n, root, c, seg);
        ASSERT_EQ(run(g, mesh(seed++)), "");
        SCOPED_TRACE(caseName("scatter from " + std::to_string(root), n, c, seg, seed));
        Case s = scatterCase(n, root, c, seg);
        ASSERT_EQ(run(s, mesh(seed++)), "");
      }
    }
  }
}

TEST(ExecutorCollectives, Barrier) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 13}) {
    SCOPED_TRACE("barrier n=" + std::to_string(n));
    Case k;
    for (int r = 0; r < n; ++r) {
      k.scheds.push_back(algo::disseminationBarrier(r, n));
      RankBuffers b;
      b.input.assign(8, 0);
      b.output.assign(8, 0);
      k.bufs.push_back(std::move(b));
    }
    ASSERT_EQ(run(k, mesh(static_cast<uint64_t>(n))), "");
  }
}

// Near rendezvous: capacities below one message, so every send waits for its receiver.
TEST(ExecutorCollectives, TinyCapacitiesManySeeds) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    MeshOptions o = mesh(seed);
    o.minCapacity = 1;
    o.maxCapacity = 40;
    for (Algorithm a : algo::allreduceAlgorithms()) {
      const int n = 3 + static_cast<int>(seed % 4);
      SCOPED_TRACE(caseName(std::string(toString(a)), n, 13, 2, seed));
      ASSERT_EQ(allreduceInt(allreduceSchedules(a, n, 13, 2), 13, ReduceOp::Sum, seed % 2 == 0,
                             algo::allreduceReadsInputLate(a), o),
                "");
    }
    Case k = allToAllCase(5, 7, 3);
    ASSERT_EQ(run(k, o), "");
  }
}

// ---- local copies ---------------------------------------------------------------------

// A world of one: copies only, no links.
TEST(ExecutorCopy, LocalCopiesRunWithoutLinks) {
  Schedule s;
  s.algorithm = "copies";
  algo::addLocalCopy(s, {0, 4}, BufferId::Input, BufferId::Output);
  algo::addLocalCopy(s, {4, 4}, BufferId::Input, BufferId::Scratch);
  // Depends on the previous copy: Scratch -> Output, finalized (avg divides by 2).
  algo::addLocalCopy(s, {4, 4}, BufferId::Scratch, BufferId::Output, /*dependsOn=*/1,
                     /*finalize=*/true);
  s.scratchElems = 8;
  algo::collectPeers(s);
  EXPECT_TRUE(s.peers.empty());
  EXPECT_EQ(s.bytesSent(8), 0u);
  std::vector<uint8_t> input = bytesOf(std::vector<int64_t>{10, 20, 30, 40, 50, 60, 70, 80});
  std::vector<uint8_t> output = bytesOf(garbage(8));
  std::vector<uint8_t> scratch(64, 0);
  ExecContext ctx;  // avg in a world of 2: the finalized copy divides by 2
  ctx.input = input.data();
  ctx.output = output.data();
  ctx.scratch = scratch.data();
  ctx.dtype = DataType::Int64;
  ctx.op = ReduceOp::Avg;
  ctx.worldSize = 2;
  ctx.deadline = Deadline::after(5s);
  MemLinkSet none;
  Executor ex;
  ex.run(s, ctx, none);
  EXPECT_EQ(valuesOf<int64_t>(output, 8), (std::vector<int64_t>{10, 20, 30, 40, 25, 30, 35, 40}));
  EXPECT_EQ(valuesOf<int64_t>(input, 8), (std::vector<int64_t>{10, 20, 30, 40, 50, 60, 70, 80}));
}

TEST(ExecutorCopy, InPlaceCopyIsSkippedButStillFinalized) {
  Schedule s;
  algo::addLocalCopy(s, {0, 3}, BufferId::Input, BufferId::Output, -1, /*finalize=*/true);
  std::vector<int64_t> buf = {9, 12, 15};
  ExecContext ctx;
  ctx.input = reinterpret_cast<const uint8_t*>(buf.data());
  ctx.output = reinterpret_cast<uint8_t*>(buf.data());
  ctx.dtype = DataType::Int64;
  ctx.op = ReduceOp::Avg;
  ctx.worldSize = 3;
  MemLinkSet none;
  Executor ex;
  ex.run(s, ctx, none);
  EXPECT_EQ(buf, (std::vector<int64_t>{3, 4, 5}));
  // With an origin, the same buffer at another place is a real copy.
  Schedule t;
  algo::addLocalCopy(t, {2, 2}, BufferId::Input, BufferId::Output);
  std::vector<int64_t> b2 = {1, 2, 3, 4, 5, 6};
  ctx.input = reinterpret_cast<const uint8_t*>(b2.data());
  ctx.output = reinterpret_cast<uint8_t*>(b2.data());
  ctx.outputOrigin = 0;
  ctx.inputOrigin = 2;  // Input element 2 is b2[0]
  ctx.op = ReduceOp::Sum;
  ex.run(t, ctx, none);
  EXPECT_EQ(b2, (std::vector<int64_t>{1, 2, 1, 2, 5, 6}));
}

// A copy that depends on a receive runs as soon as the payload is reduced, and a send
// that depends on the copy forwards its result.
TEST(ExecutorCopy, CopiesBetweenMessages) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::vector<Schedule> scheds(2);
    // Rank 0: receive 5 elements from 1 into Scratch, copy them to Output[5..10), send
    // that range back.
    const int32_t rv = algo::addRecvCopy(scheds[0], 1, 0, {5, 5}, BufferId::Scratch);
    const int32_t cp =
        algo::addLocalCopy(scheds[0], {5, 5}, BufferId::Scratch, BufferId::Output, rv);
    algo::addSend(scheds[0], 1, 1, {5, 5}, BufferId::Output, cp);
    algo::addLocalCopy(scheds[0], {0, 5}, BufferId::Input, BufferId::Output);
    scheds[0].scratchElems = 10;
    scheds[0].phases.push_back({"there and back", 0, 2});
    // Rank 1: send its Input[5..10), receive it back into Output.
    algo::addSend(scheds[1], 0, 0, {5, 5}, BufferId::Input);
    algo::addRecvCopy(scheds[1], 0, 1, {5, 5}, BufferId::Output);
    for (Schedule& s : scheds) algo::collectPeers(s);
    std::vector<RankBuffers> bufs(2);
    bufs[0].input = bytesOf(std::vector<int64_t>{1, 2, 3, 4, 5, 0, 0, 0, 0, 0});
    bufs[0].output = bytesOf(garbage(10));
    bufs[1].input = bytesOf(std::vector<int64_t>{0, 0, 0, 0, 0, 6, 7, 8, 9, 10});
    bufs[1].output = bytesOf(garbage(10));
    const ExecOutcome out =
        exectest::execute(scheds, bufs, DataType::Int64, ReduceOp::Sum, mesh(seed));
    ASSERT_EQ(out.firstError(), "");
    EXPECT_EQ(valuesOf<int64_t>(bufs[0].output, 10),
              (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    EXPECT_EQ(valuesOf<int64_t>(bufs[1].output, 10),
              (std::vector<int64_t>{-777, -777, -777, -777, -777, 6, 7, 8, 9, 10}));
    EXPECT_EQ(exectest::checkCounters(scheds, out, 8), "");
  }
}

TEST(ExecutorCopy, ACopyThatCanNeverRunIsAnError) {
  Schedule s;
  algo::addLocalCopy(s, {0, 1}, BufferId::Input, BufferId::Output, /*dependsOn=*/0);
  int64_t a = 1, b = 2;
  ExecContext ctx;
  ctx.input = reinterpret_cast<const uint8_t*>(&a);
  ctx.output = reinterpret_cast<uint8_t*>(&b);
  ctx.dtype = DataType::Int64;
  MemLinkSet none;
  Executor ex;
  try {
    ex.run(s, ctx, none);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("local copy"), std::string::npos) << e.what();
  }
}

// ---- failures ---------------------------------------------------------------------------

// Whole transfers: a peek sees a whole header, so what the executor decides does not
// depend on how the bytes were cut.
MeshOptions plain() {
  MeshOptions o;
  o.seed = 0;
  return o;
}

// Two ranks exchanging `count` elements each way, in one step.
std::vector<Schedule> exchangeSchedules(size_t count) {
  std::vector<Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    s[static_cast<size_t>(r)].algorithm = "exchange";
    s[static_cast<size_t>(r)].phases.push_back({"swap", 0, 1});
    algo::addSend(s[static_cast<size_t>(r)], 1 - r, 0, {0, count}, BufferId::Input);
    algo::addRecvCopy(s[static_cast<size_t>(r)], 1 - r, 0, {0, count}, BufferId::Output);
    algo::collectPeers(s[static_cast<size_t>(r)]);
  }
  return s;
}

ExecContext contextFor(int rank, int n, std::vector<int64_t>& in, std::vector<int64_t>& out,
                       Deadline deadline) {
  ExecContext ctx;
  ctx.input = reinterpret_cast<const uint8_t*>(in.data());
  ctx.output = reinterpret_cast<uint8_t*>(out.data());
  ctx.dtype = DataType::Int64;
  ctx.worldSize = n;
  ctx.rank = rank;
  ctx.seq = 3;
  ctx.fingerprint = 99;
  ctx.collective = "exchange";
  ctx.seqFull = 3;
  ctx.deadline = deadline;
  return ctx;
}

struct Failure {
  ErrorKind kind = ErrorKind::InvalidArgument;
  std::string message;
  int peer = -1;
  int culprit = -1;
  std::string phase;
};

Failure failureOf(const std::function<void()>& fn) {
  Failure f;
  try {
    fn();
    f.message = "(no error)";
  } catch (const Error& e) {
    f.kind = e.kind();
    f.message = e.info().message;
    f.peer = e.info().peer;
    f.culprit = e.info().culprit;
    f.phase = e.info().phase;
  }
  return f;
}

TEST(ExecutorFailures, APeerThatClosesIsPeerClosed) {
  auto mesh2 = exectest::makeMesh(2, plain());
  mesh2[1].clear();  // rank 1 is gone
  std::vector<int64_t> in(100, 1), out(100, 0);
  const auto s = exchangeSchedules(100);
  Executor ex;
  const Failure f =
      failureOf([&] { ex.run(s[0], contextFor(0, 2, in, out, Deadline::after(5s)), mesh2[0]); });
  EXPECT_EQ(f.kind, ErrorKind::PeerClosed) << f.message;
  EXPECT_EQ(f.peer, 1);
  EXPECT_EQ(f.phase, "swap");
  EXPECT_TRUE(f.message == "connection closed by the peer while sending" ||
              f.message == "connection closed by the peer")
      << f.message;
}

TEST(ExecutorFailures, NothingArrivesBeforeTheDeadline) {
  auto mesh2 = exectest::makeMesh(2, plain());
  std::vector<int64_t> in(10, 1), out(10, 0);
  const auto s = exchangeSchedules(10);
  Executor ex;
  const auto t0 = std::chrono::steady_clock::now();
  const Failure f =
      failureOf([&] { ex.run(s[0], contextFor(0, 2, in, out, Deadline::after(100ms)), mesh2[0]); });
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 95ms);
  EXPECT_EQ(f.kind, ErrorKind::Timeout);
  EXPECT_EQ(f.message, "no data from the peer before the deadline (waiting to receive)");
  EXPECT_EQ(f.peer, 1);
}

TEST(ExecutorFailures, AnotherCollectivesMessageIsAMismatch) {
  auto mesh2 = exectest::makeMesh(2, plain());
  const auto s = exchangeSchedules(10);
  std::vector<int64_t> in0(10, 1), out0(10, 0), in1(10, 2), out1(10, 0);
  Failure f0, f1;
  std::thread t1([&] {
    ExecContext c1 = contextFor(1, 2, in1, out1, Deadline::after(5s));
    c1.fingerprint = 100;  // another signature
    Executor ex;
    f1 = failureOf([&] { ex.run(s[1], c1, mesh2[1]); });
  });
  Executor ex;
  f0 = failureOf([&] { ex.run(s[0], contextFor(0, 2, in0, out0, Deadline::after(5s)), mesh2[0]); });
  t1.join();
  EXPECT_EQ(f0.kind, ErrorKind::Mismatch) << f0.message;
  EXPECT_EQ(f1.kind, ErrorKind::Mismatch) << f1.message;
  EXPECT_NE(f0.message.find("the peer is running a different collective"), std::string::npos);
}

// Rank 2 is connected but outside the schedule: a message of this very collective from
// it fails the call at once (a schedule disagreement), where a later call's message is
// left for that call.
TEST(ExecutorFailures, AWatchedPeerSendingThisCollectivesMessageIsAMismatch) {
  for (bool later : {false, true}) {
    auto mesh3 = exectest::makeMesh(3, plain());
    const auto s = exchangeSchedules(10);
    std::vector<int64_t> in(10, 1), out(10, 0);
    // Rank 2 sends a data header of collective #3 (or #4) to rank 0.
    wire::MessageHeader h;
    h.seq = later ? 4 : 3;
    h.fingerprint = 99;
    h.step = 0;
    h.length = 0;
    TxFrame tx;
    tx.start(h, nullptr);
    while (!tx.done()) ASSERT_NE(tx.pump(mesh3[2].link(0)).status, LinkStatus::Closed);
    ExecContext c0 = contextFor(0, 2, in, out, Deadline::after(later ? 300ms : 5s));
    const std::vector<int> watch = {1, 2};
    c0.watchPeers = watch;
    Executor ex;
    const Failure f = failureOf([&] { ex.run(s[0], c0, mesh3[0]); });
    if (later) {
      // Left for the next call: the call waits for rank 1, which never comes.
      EXPECT_EQ(f.kind, ErrorKind::Timeout) << f.message;
      EXPECT_EQ(f.peer, 1);
    } else {
      EXPECT_EQ(f.kind, ErrorKind::Mismatch) << f.message;
      EXPECT_EQ(f.peer, 2);
      EXPECT_NE(f.message.find("does not expect"), std::string::npos) << f.message;
    }
  }
}

TEST(ExecutorFailures, AnAbortMessageNamesItsCulprit) {
  auto mesh2 = exectest::makeMesh(2, plain());
  const auto s = exchangeSchedules(10);
  std::vector<int64_t> in(10, 1), out(10, 0);
  wire::MessageHeader h;
  h.kind = wire::MsgKind::Abort;
  h.seq = 3;
  h.fingerprint = 1;  // the culprit
  TxFrame tx;
  tx.start(h, nullptr);
  while (!tx.done()) ASSERT_EQ(tx.pump(mesh2[1].link(0)).status, LinkStatus::Progress);
  mesh2[1].link(0).shutdownWrite();
  Executor ex;
  const Failure f =
      failureOf([&] { ex.run(s[0], contextFor(0, 2, in, out, Deadline::after(5s)), mesh2[0]); });
  EXPECT_EQ(f.kind, ErrorKind::Aborted) << f.message;
  EXPECT_EQ(f.culprit, 1);
  EXPECT_EQ(f.message, "rank 1 aborted the communicator (culprit rank 1)");
}

TEST(ExecutorFailures, AnAbortFromAnotherThreadInterruptsTheWait) {
  auto mesh2 = exectest::makeMesh(2, plain());
  const auto s = exchangeSchedules(10);
  std::vector<int64_t> in(10, 1), out(10, 0);
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  std::atomic<bool> aborted{false};
  ExecContext c0 = contextFor(0, 2, in, out, Deadline::after(10s));
  c0.wakeFd = wake.get();
  c0.abortFlag = &aborted;
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    aborted = true;
    const uint64_t one = 1;
    EXPECT_EQ(::write(wake.get(), &one, sizeof one), 8);
  });
  Executor ex;
  const auto t0 = std::chrono::steady_clock::now();
  const Failure f = failureOf([&] { ex.run(s[0], c0, mesh2[0]); });
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(f.kind, ErrorKind::Aborted) << f.message;
  EXPECT_EQ(f.message, "the communicator was aborted while this call waited");
}

TEST(ExecutorFailures, APointToPointKindOnTheCollectivesLinkIsAProtocolError) {
  auto mesh2 = exectest::makeMesh(2, plain());
  const auto s = exchangeSchedules(10);
  std::vector<int64_t> in(10, 1), out(10, 0);
  wire::MessageHeader h;
  h.kind = wire::MsgKind::Rts;
  h.seq = 3;
  h.fingerprint = 99;
  h.length = 80;
  TxFrame tx;
  tx.start(h, nullptr);
  while (!tx.done()) ASSERT_EQ(tx.pump(mesh2[1].link(0)).status, LinkStatus::Progress);
  Executor ex;
  const Failure f =
      failureOf([&] { ex.run(s[0], contextFor(0, 2, in, out, Deadline::after(5s)), mesh2[0]); });
  EXPECT_EQ(f.kind, ErrorKind::Protocol) << f.message;
}

}  // namespace
}  // namespace tccl
