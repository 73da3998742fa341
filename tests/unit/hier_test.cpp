// The hierarchical all-reduce: host layouts, the schedule's structure over many layouts
// (uniform, uneven, interleaved), its closed forms (bytes within and across hosts,
// steps), its execution by the real executor over in-memory links (exec_harness.hpp), the cost
// model's view of hosts, the topology published through the store, and the
// communicator running it over real sockets with hosts faked through the store.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "../common/expected_bytes.hpp"
#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/chunking.hpp"
#include "algorithms/schedule.hpp"
#include "algorithms/select.hpp"
#include "core/topology.hpp"
#include "cost_model_testing.hpp"
#include "exec_harness.hpp"
#include "schedule_chain.hpp"
#include "scoped_env.hpp"
#include "tccl/tccl.hpp"

namespace tccl::algo {
namespace {

using tccl::testing::ScopedEnv;

// Host of each rank, as labels: {0, 0, 1, 1} is two hosts of two ranks.
HostLayout layoutOf(const std::vector<int>& hostOfRank) {
  std::vector<std::string> keys;
  for (int h : hostOfRank) keys.push_back("host" + std::to_string(h));
  return HostLayout::fromKeys(keys);
}

std::string show(const HostLayout& h) {
  std::ostringstream os;
  os << "hosts [";
  for (size_t r = 0; r < h.hostOf.size(); ++r) os << (r ? " " : "") << h.hostOf[r];
  os << "]";
  return os.str();
}

// Every layout of worlds 1..9 worth testing: one host, one rank per host, uniform
// (contiguous and interleaved), and uneven (contiguous and interleaved).
std::vector<HostLayout> layouts() {
  std::vector<HostLayout> all;
  for (int n = 1; n <= 9; ++n) {
    all.push_back(HostLayout::contiguous({n}));
    if (n > 1) all.push_back(HostLayout::separate(n));
    for (int L = 2; L < n; ++L) {
      if (n % L != 0) continue;
      all.push_back(HostLayout::contiguous(std::vector<int>(static_cast<size_t>(n / L), L)));
      std::vector<int> rr;  // round robin: rank r on host r mod H
      for (int r = 0; r < n; ++r) rr.push_back(r % (n / L));
      all.push_back(layoutOf(rr));
    }
  }
  // Uneven.
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{2, 1},
                                                                     {1, 2},
                                                                     {3, 1},
                                                                     {1, 1, 2},
                                                                     {3, 2},
                                                                     {2, 3, 1},
                                                                     {4, 1, 2},
                                                                     {1, 4},
                                                                     {3, 3, 2},
                                                                     {2, 2, 2, 3},
                                                                     {5, 1, 1, 2}}) {
    all.push_back(HostLayout::contiguous(sizes));
  }
  all.push_back(layoutOf({0, 1, 0, 2, 2, 0, 1}));  // uneven and interleaved: 3+2+2
  all.push_back(layoutOf({0, 1, 1, 1, 0, 2}));     // 2+3+1
  return all;
}

std::vector<Schedule> schedulesOf(const HostLayout& h, size_t count, size_t seg) {
  std::vector<Schedule> all;
  for (int r = 0; r < h.worldSize(); ++r) {
    all.push_back(allreduceSchedule(Algorithm::Hierarchical, r, h.worldSize(), count, seg, &h));
  }
  return all;
}

std::vector<size_t> countsFor(const HostLayout& h) {
  const size_t n = static_cast<size_t>(h.worldSize());
  const size_t hl = static_cast<size_t>(h.hosts() * h.maxLocal());
  std::vector<size_t> c = {0, 1, n - 1, n, n + 1, hl + 1, 2 * hl - 1, 37, 257};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// ---- the layout ----------------------------------------------------------------------

TEST(HostLayout, GroupsEqualKeysInRankOrder) {
  const HostLayout h =
      HostLayout::fromKeys({"10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"});
  EXPECT_EQ(h.worldSize(), 5);
  ASSERT_EQ(h.hosts(), 3);
  // Hosts numbered by their lowest rank: rank 0's host is host 0.
  EXPECT_EQ(h.hostOf, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(h.localOf, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(h.members[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(h.members[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(h.members[2], (std::vector<int>{3}));
  EXPECT_EQ(h.localSize(2), 2);
  EXPECT_EQ(h.localSize(3), 1);
  EXPECT_EQ(h.maxLocal(), 2);
  EXPECT_FALSE(h.uniform());
  EXPECT_TRUE(hierUsesLeaders(h));
  EXPECT_EQ(h.describe(), "3 hosts (2+2+1 ranks)");
  const HostLayout u = HostLayout::contiguous({2, 2, 2, 2});
  EXPECT_TRUE(u.uniform());
  EXPECT_FALSE(hierUsesLeaders(u));
  EXPECT_EQ(u.describe(), "4 hosts x 2 ranks");
  EXPECT_EQ(u.members[3], (std::vector<int>{6, 7}));
  EXPECT_EQ(HostLayout::separate(3).describe(), "3 hosts x 1 rank");
  EXPECT_EQ(HostLayout::contiguous({1}).describe(), "1 host x 1 rank");
}

// ---- structure and closed forms --------------------------------------------------------

using MsgKey = std::tuple<uint32_t, size_t, size_t>;  // step, offset, count

void checkStructure(const HostLayout& h, size_t count, size_t seg) {
  const int n = h.worldSize();
  const std::vector<Schedule> all = schedulesOf(h, count, seg);
  const bool leaders = hierUsesLeaders(h);
  std::vector<int> finalized(count, 0);
  std::vector<std::vector<std::vector<MsgKey>>> sends(static_cast<size_t>(n)),
      recvs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Schedule& s = all[static_cast<size_t>(r)];
    ASSERT_EQ(s.algorithm, "hier");
    ASSERT_EQ(s.scratchElems, 0u);
    uint32_t phaseSteps = 0;
    for (const Phase& ph : s.phases) phaseSteps += ph.steps;
    ASSERT_EQ(static_cast<int>(phaseSteps), hierSteps(h));
    // Bytes, split by whether the peer shares this rank's host.
    for (size_t elem : {size_t{1}, size_t{4}}) {
      HostBytes got;
      for (const Op& op : s.ops) {
        if (op.type != OpType::Send) continue;
        const bool same =
            h.hostOf[static_cast<size_t>(op.peer)] == h.hostOf[static_cast<size_t>(r)];
        (same ? got.intra : got.inter) += op.range.count * elem;
      }
      // From the docs' formula (tests/common), not src/algorithms' hierBytesSent.
      const auto want = tccl::testing::hierSentBytes(h.hostOf, count, elem, r);
      ASSERT_EQ(got.intra, want.intra) << "elem " << elem;
      ASSERT_EQ(got.inter, want.inter) << "elem " << elem;
      ASSERT_EQ(s.bytesSent(elem), want.total());
    }
    if (n == 1 || count == 0) {
      ASSERT_TRUE(s.ops.empty());
      continue;
    }
    sends[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
    recvs[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
    std::vector<int> used;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const Op& op = s.ops[i];
      ASSERT_NE(op.peer, r) << "op " << i;
      ASSERT_GE(op.peer, 0) << "op " << i;
      ASSERT_LT(op.peer, n) << "op " << i;
      ASSERT_GT(op.range.count, 0u) << "op " << i << " moves no data";
      ASSERT_LE(op.range.count, seg) << "op " << i;
      ASSERT_LE(op.range.offset + op.range.count, count) << "op " << i;
      ASSERT_NE(s.phaseOf(op.step), nullptr) << "op " << i << " step " << op.step;
      ASSERT_LT(op.dependsOn, static_cast<int32_t>(i)) << "op " << i;
      ASSERT_NE(op.buffer, BufferId::Scratch) << "op " << i;
      ASSERT_FALSE(op.thenSelf);
      // Across hosts only equal local indices talk (uniform), or leaders.
      const bool cross = h.hostOf[static_cast<size_t>(op.peer)] != h.hostOf[static_cast<size_t>(r)];
      if (cross && leaders) {
        ASSERT_EQ(h.localOf[static_cast<size_t>(r)], 0) << "op " << i;
        ASSERT_EQ(h.localOf[static_cast<size_t>(op.peer)], 0) << "op " << i;
      } else if (cross) {
        ASSERT_EQ(h.localOf[static_cast<size_t>(r)], h.localOf[static_cast<size_t>(op.peer)]);
      }
      const std::string& phase = s.phaseOf(op.step)->name;
      ASSERT_EQ(cross, phase.find("inter-host") != std::string::npos) << "op " << i << " " << phase;
      if (op.type == OpType::Send) {
        ASSERT_FALSE(op.finalize);
        sends[static_cast<size_t>(r)][static_cast<size_t>(op.peer)].emplace_back(
            op.step, op.range.offset, op.range.count);
      } else {
        ASSERT_EQ(op.dst, BufferId::Output);
        if (op.finalize) {
          ASSERT_EQ(op.action, RecvAction::Reduce);
          for (size_t e = 0; e < op.range.count; ++e) finalized[op.range.offset + e]++;
        }
        recvs[static_cast<size_t>(r)][static_cast<size_t>(op.peer)].emplace_back(
            op.step, op.range.offset, op.range.count);
      }
      used.push_back(op.peer);
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    ASSERT_EQ(s.peers, used);
  }
  if (n == 1 || count == 0) return;
  for (size_t e = 0; e < count; ++e) ASSERT_EQ(finalized[e], 1) << "element " << e;
  for (size_t a = 0; a < static_cast<size_t>(n); ++a) {
    for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
      ASSERT_EQ(sends[a][b], recvs[b][a]) << "messages from rank " << a << " to rank " << b;
    }
  }
}

TEST(HierarchicalAllreduce, StructureBytesAndMessageMatchingOverLayouts) {
  for (const HostLayout& h : layouts()) {
    for (size_t count : countsFor(h)) {
      for (size_t seg : {size_t{1}, size_t{3}, size_t{64}, size_t{1} << 20}) {
        SCOPED_TRACE(show(h) + " count=" + std::to_string(count) + " seg=" + std::to_string(seg));
        checkStructure(h, count, seg);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(HierarchicalAllreduce, InterHostBytesPerHostAreTwoHMinusOneOverHOfV) {
  // 4 hosts x 2 ranks, count divisible by H x L: per host 2(H-1)/H x V = 1.5 V leaves,
  // against 2(N-1)/N x V = 1.75 V for the flat ring with consecutive ranks per host.
  const HostLayout h = HostLayout::contiguous({2, 2, 2, 2});
  const size_t count = 800, elem = 4, v = count * elem;
  for (int host = 0; host < 4; ++host) {
    uint64_t inter = 0;
    for (int r : h.members[static_cast<size_t>(host)])
      inter += hierBytesSent(h, count, elem, r).inter;
    EXPECT_EQ(inter, v * 3 / 2) << "host " << host;
  }
  EXPECT_EQ(hostEgressBytes(Algorithm::Hierarchical, h, count, elem), v * 3 / 2);
  EXPECT_EQ(hostEgressBytes(Algorithm::Ring, h, count, elem), v * 7 / 4);
  // Naive: each of a host's 2 ranks sends V to the 6 ranks elsewhere.
  EXPECT_EQ(hostEgressBytes(Algorithm::Naive, h, count, elem), 12 * v);
  // hd: the distance-4 and distance-2 rounds cross hosts: (V/2 + V/4) x 2 phases x 2 ranks.
  EXPECT_EQ(hostEgressBytes(Algorithm::HalvingDoubling, h, count, elem), 3 * v);
  // Round robin (rank r on host r mod 4): every ring hop crosses hosts.
  const HostLayout rr = layoutOf({0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_EQ(hostEgressBytes(Algorithm::Ring, rr, count, elem), 2 * v * 7 / 4);
  EXPECT_EQ(hostEgressBytes(Algorithm::Hierarchical, rr, count, elem), v * 3 / 2);
  // Uneven (leaders): 3 + 1 + 2 ranks, H = 3 divides 600: each leader sends 4/3 V.
  const HostLayout u = HostLayout::contiguous({3, 1, 2});
  for (int r = 0; r < 6; ++r) {
    const HostBytes b = hierBytesSent(u, 600, 1, r);
    const int l = u.localOf[static_cast<size_t>(r)];
    EXPECT_EQ(b.inter, l == 0 ? 800u : 0u) << "rank " << r;
  }
  EXPECT_EQ(hierBytesSent(u, 600, 1, 0).intra, 600u);   // leader: V down the chain
  EXPECT_EQ(hierBytesSent(u, 600, 1, 1).intra, 1200u);  // middle: V up, V down
  EXPECT_EQ(hierBytesSent(u, 600, 1, 2).intra, 600u);   // tail: V up
  EXPECT_EQ(hierBytesSent(u, 600, 1, 3).intra, 0u);     // alone on its host
  EXPECT_EQ(hierSteps(h), 2 + 6);
  EXPECT_EQ(hierSteps(u), 4 + 4);
  EXPECT_EQ(hierSteps(HostLayout::contiguous({5})), 8);  // one host: the ring's 2(N-1)
  EXPECT_EQ(hierSteps(HostLayout::separate(5)), 8);
}

TEST(HierarchicalAllreduce, DegenerateLayoutsAreTheRing) {
  // One host, or one rank per host: the same bytes as the ring, rank by rank.
  for (int n = 1; n <= 9; ++n) {
    for (const HostLayout& h : {HostLayout::contiguous({n}), HostLayout::separate(n)}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}}) {
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(hierBytesSent(h, count, 4, r).total(), ringBytesSent(count, 4, n, r))
              << show(h) << " count " << count << " rank " << r;
        }
      }
    }
  }
  // Without a layout the menu treats every rank as its own host.
  const Schedule s = allreduceSchedule(Algorithm::Hierarchical, 2, 5, 100, 7);
  EXPECT_EQ(s.algorithm, "hier");
  EXPECT_EQ(s.bytesSent(4), ringBytesSent(100, 4, 5, 2));
  const HostLayout wrong = HostLayout::contiguous({2, 2});
  EXPECT_THROW(allreduceSchedule(Algorithm::Hierarchical, 0, 5, 100, 7, &wrong),
               InvalidArgumentError);
  EXPECT_FALSE(allreduceReadsInputLate(Algorithm::Hierarchical));
  const auto& menu = allreduceAlgorithms();
  EXPECT_NE(std::find(menu.begin(), menu.end(), Algorithm::Hierarchical), menu.end());
}

TEST(HierarchicalAllreduce, PhasesNameWhereAStepRuns) {
  const HostLayout h = HostLayout::contiguous({2, 2, 2});
  const Schedule s = allreduceSchedule(Algorithm::Hierarchical, 3, 6, 60, 100, &h);
  EXPECT_EQ(s.phaseOf(0)->name, "intra-host reduce-scatter");
  EXPECT_EQ(s.phaseOf(1)->name, "inter-host reduce-scatter");
  EXPECT_EQ(s.phaseOf(3)->name, "inter-host all-gather");
  EXPECT_EQ(s.phaseOf(5)->name, "intra-host all-gather");
  EXPECT_EQ(s.phaseOf(6), nullptr);
  // Rank 3 is local 1 of host 1: its intra peer is rank 2, its inter peers ranks 1, 5.
  EXPECT_EQ(s.peers, (std::vector<int>{1, 2, 5}));
  const HostLayout u = HostLayout::contiguous({3, 1});
  const Schedule lead = allreduceSchedule(Algorithm::Hierarchical, 0, 4, 60, 100, &u);
  EXPECT_EQ(lead.phaseOf(0)->name, "intra-host reduce to the leader");
  EXPECT_EQ(lead.phaseOf(2)->name, "inter-host reduce-scatter (leaders)");
  EXPECT_EQ(lead.phaseOf(5)->name, "intra-host broadcast from the leader");
  EXPECT_EQ(lead.peers, (std::vector<int>{1, 3}));
}

TEST(HierarchicalAllreduce, StepsAreTheLongestMessageChain) {
  for (const HostLayout& h : layouts()) {
    const size_t count = 64 * static_cast<size_t>(h.worldSize());
    SCOPED_TRACE(show(h));
    const int longest = chain::longestMessageChain(schedulesOf(h, count, count));
    if (hierUsesLeaders(h)) {
      EXPECT_LE(longest, hierSteps(h));
    } else {
      EXPECT_EQ(longest, hierSteps(h));
    }
  }
  // The point of it: 4 hosts x 2 ranks take 2 + 6 steps, a flat ring 14.
  EXPECT_EQ(chain::longestMessageChain(schedulesOf(HostLayout::contiguous({2, 2, 2, 2}), 64, 64)),
            8);
}

// ---- execution (the real executor over in-memory links) --------------------------------

// Links with sockets' worth of buffer (1 KiB..64 KiB) or, every third case, buffers
// smaller than a message (a send waits for its receiver; 1..64 bytes for small
// vectors, up to 1 KiB for large ones, whose every byte would otherwise be a wake-up).
exectest::MeshOptions meshFor(uint64_t seed, size_t count = 0) {
  exectest::MeshOptions o;
  o.seed = seed;
  if (seed % 3 == 0) {
    o.minCapacity = count > 64 ? 64 : 1;
    o.maxCapacity = count > 64 ? 1024 : 64;
  }
  return o;
}

TEST(HierarchicalAllreduce, ExecutionIsExactOverLayouts) {
  uint64_t seed = 9001;
  int k = 0;
  for (const HostLayout& h : layouts()) {
    for (size_t count : countsFor(h)) {
      for (size_t seg : {size_t{1}, size_t{3}, size_t{64}}) {
        if (seg == 1 && count > 64) continue;  // hundreds of segments add nothing
        // Sum and avg, in and out of place, in turn: every layout sees each.
        const ReduceOp op = k % 2 == 0 ? ReduceOp::Sum : ReduceOp::Avg;
        const bool inPlace = (k / 2) % 2 == 1;
        ++k;
        SCOPED_TRACE(show(h) + " count=" + std::to_string(count) + " seg=" + std::to_string(seg) +
                     " " + std::string(toString(op)) + (inPlace ? " in-place" : "") +
                     " seed=" + std::to_string(seed));
        ASSERT_EQ(exectest::allreduceInt(schedulesOf(h, count, seg), count, op, inPlace, false,
                                         meshFor(seed, count)),
                  "");
        ++seed;
      }
    }
  }
}

TEST(HierarchicalAllreduce, ManyInterleavingsWithTinyBuffers) {
  uint64_t seed = 4711;
  for (const HostLayout& h :
       {HostLayout::contiguous({2, 2, 2, 2}), HostLayout::contiguous({3, 1, 2}),
        layoutOf({0, 1, 0, 1, 0, 1}), layoutOf({0, 1, 0, 2, 2, 0, 1})}) {
    for (int k = 0; k < 20; ++k) {
      SCOPED_TRACE(show(h) + " seed=" + std::to_string(seed));
      exectest::MeshOptions o;
      o.seed = seed++;
      o.minCapacity = 1;
      o.maxCapacity = k % 2 == 0 ? 8 : 200;
      ASSERT_EQ(
          exectest::allreduceInt(schedulesOf(h, 23, 2), 23, ReduceOp::Sum, k % 3 == 0, false, o),
          "");
    }
  }
}

TEST(HierarchicalAllreduce, FloatResultsAreBitwiseIdenticalOnAllRanks) {
  // Every element is reduced on one rank and copied to the others.
  for (const HostLayout& h : {HostLayout::contiguous({2, 2, 2}), HostLayout::contiguous({3, 2}),
                              layoutOf({0, 1, 1, 0})}) {
    const int n = h.worldSize();
    const size_t count = 97;
    std::vector<std::vector<uint8_t>> inputs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i)
        v[i] = 0.1f * static_cast<float>(r + 1) + (i % 5 == 0 ? 1e6f : 0.3f);
      inputs[static_cast<size_t>(r)].resize(count * 4);
      std::memcpy(inputs[static_cast<size_t>(r)].data(), v.data(), count * 4);
    }
    std::vector<std::vector<uint8_t>> outputs;
    ASSERT_EQ(exectest::allreduceBytes(schedulesOf(h, count, 5), DataType::Float32, ReduceOp::Sum,
                                       inputs, &outputs, meshFor(5)),
              "")
        << show(h);
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(outputs[static_cast<size_t>(r)], outputs[0]) << show(h) << " rank " << r;
    }
  }
}

// ---- the cost model --------------------------------------------------------------------

TEST(HierarchicalCostModel, HostCostsCountTheBusiestHostsBytes) {
  const HostCosts c = HostCosts::of(HostLayout::contiguous({2, 2, 2, 2}));
  EXPECT_EQ(c.hosts, 4);
  EXPECT_EQ(c.maxLocal, 2);
  EXPECT_FALSE(c.leaders);
  EXPECT_TRUE(c.hierarchical());
  auto e = [&](Algorithm a) { return c.egress[static_cast<size_t>(a)]; };
  EXPECT_DOUBLE_EQ(e(Algorithm::Ring), 1.75);
  EXPECT_DOUBLE_EQ(e(Algorithm::Hierarchical), 1.5);
  EXPECT_DOUBLE_EQ(e(Algorithm::Naive), 12.0);
  EXPECT_DOUBLE_EQ(e(Algorithm::HalvingDoubling), 3.0);
  EXPECT_FALSE(HostCosts::of(HostLayout::separate(4)).hierarchical());
  EXPECT_FALSE(HostCosts::of(HostLayout::contiguous({4})).hierarchical());
  EXPECT_TRUE(HostCosts::of(HostLayout::contiguous({3, 1})).leaders);
}

TEST(HierarchicalCostModel, PredictionsFollowTheFormulas) {
  LinkModel m = formulaModel();
  m.alphaSec = 10e-6;
  m.betaSecPerByte = 0.1e-9;  // 10 GB/s within a host
  m.interAlphaSec = 50e-6;
  m.interBetaSecPerByte = 1e-9;  // 1 GB/s between hosts
  m.hdBandwidthPenalty = 1.0;
  const HostCosts c = HostCosts::of(HostLayout::contiguous({2, 2, 2, 2}));
  const double v = 1e6;
  // hier: 2(L-1) alpha + 2(H-1) interAlpha + max(1.5 V interBeta, (1 + 3/4) V beta).
  EXPECT_NEAR(predictAllreduceSec(Algorithm::Hierarchical, 8, 1000000, m, &c),
              2 * 10e-6 + 6 * 50e-6 + 1.5 * v * 1e-9, 1e-12);
  // ring: 14 interAlpha + max(1.75 V interBeta, 1.75 V beta).
  EXPECT_NEAR(predictAllreduceSec(Algorithm::Ring, 8, 1000000, m, &c), 14 * 50e-6 + 1.75e-3, 1e-12);
  // rd: 3 interAlpha + max(E_rd V interBeta, 3 V beta); E_rd = 2 ranks x 2 crossing rounds.
  EXPECT_NEAR(predictAllreduceSec(Algorithm::RecursiveDoubling, 8, 1000000, m, &c),
              3 * 50e-6 + 4e-3, 1e-12);
  // Leaders (3 + 1 ranks): 2(Lmax-1) alpha + 2 interAlpha + max(V interBeta, 2V beta).
  const HostCosts u = HostCosts::of(HostLayout::contiguous({3, 1}));
  EXPECT_NEAR(predictAllreduceSec(Algorithm::Hierarchical, 4, 1000000, m, &u),
              4 * 10e-6 + 2 * 50e-6 + v * 1e-9, 1e-12);
  // Within hosts the busiest rank's link can be the bound: 1 GB/s within, 10 across.
  LinkModel slowInside = m;
  slowInside.betaSecPerByte = 1e-9;
  slowInside.interBetaSecPerByte = 0.1e-9;
  EXPECT_NEAR(predictAllreduceSec(Algorithm::Hierarchical, 8, 1000000, slowInside, &c),
              2 * 10e-6 + 6 * 50e-6 + 1.75 * v * 1e-9, 1e-12);
  // One host: the one-link model, hier as the ring.
  const HostCosts one = HostCosts::of(HostLayout::contiguous({4}));
  EXPECT_DOUBLE_EQ(predictAllreduceSec(Algorithm::Hierarchical, 4, 1000000, m, &one),
                   predictRingSec(4, 1000000, m));
  EXPECT_DOUBLE_EQ(predictAllreduceSec(Algorithm::Tree, 4, 1000000, m, &one),
                   predictTreeSec(4, 1000000, m));
  EXPECT_EQ(predictAllreduceSec(Algorithm::Hierarchical, 1, 1000000, m, &one), 0.0);
}

TEST(HierarchicalCostModel, AutoPicksItWhereItWinsAndOnlyAcrossHosts) {
  LinkModel m = formulaModel();  // loopback-class within a host; 10 GbE-class between hosts
  const HostCosts multi = HostCosts::of(HostLayout::contiguous({2, 2, 2, 2}));
  LinkModel slowLinks = m;
  slowLinks.interBetaSecPerByte = 1.0 / 0.1e9;  // 100 MB/s between hosts
  const HostCosts oneHost = HostCosts::of(HostLayout::contiguous({8}));
  const HostCosts separate = HostCosts::of(HostLayout::separate(8));
  std::string why;
  for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 4) {
    EXPECT_NE(chooseAllreduce(8, bytes, m, nullptr, nullptr), Algorithm::Hierarchical) << bytes;
    EXPECT_NE(chooseAllreduce(8, bytes, m, nullptr, &oneHost), Algorithm::Hierarchical) << bytes;
    EXPECT_NE(chooseAllreduce(8, bytes, m, nullptr, &separate), Algorithm::Hierarchical) << bytes;
    // The pick is the least predicted time among the candidates.
    const Algorithm pick = chooseAllreduce(8, bytes, slowLinks, nullptr, &multi);
    for (Algorithm a : allreduceAlgorithms()) {
      EXPECT_LE(predictAllreduceSec(pick, 8, bytes, slowLinks, &multi),
                predictAllreduceSec(a, 8, bytes, slowLinks, &multi))
          << bytes << " " << toString(pick) << " over " << toString(a);
    }
  }
  // Tiny messages: recursive doubling's 3 steps beat hier's 2 + 6. Large ones over a slow
  // inter-host link: hier (1.5 V across against the ring's 1.75 V, rd's 4 V, hd's 3 V).
  EXPECT_EQ(chooseAllreduce(8, 8, slowLinks, nullptr, &multi), Algorithm::RecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(8, size_t{64} << 20, slowLinks, &why, &multi), Algorithm::Hierarchical);
  EXPECT_NE(why.find("hier "), std::string::npos) << why;
  EXPECT_NE(why.find("4 hosts, inter-host alpha 50.0 us, 0.10 GB/s"), std::string::npos) << why;
  // With the defaults too, at 64 MiB (1.5 V across hosts in 6 steps, the ring's 1.75 V
  // in 14).
  EXPECT_EQ(chooseAllreduce(8, size_t{64} << 20, m, nullptr, &multi), Algorithm::Hierarchical);
  // The crossover with rd (3 x 50 us + 4 V x 0.8 ns against 340 us + 1.5 V x 0.8 ns): 95 KB.
  EXPECT_EQ(chooseAllreduce(8, 90000, m, nullptr, &multi), Algorithm::RecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(8, 100000, m, nullptr, &multi), Algorithm::Hierarchical);
  // Single-host reporting is unchanged.
  chooseAllreduce(8, 8, m, &why, &oneHost);
  EXPECT_EQ(why.find("hier"), std::string::npos) << why;
  EXPECT_EQ(why.find("hosts"), std::string::npos) << why;
}

TEST(HierarchicalCostModel, InterHostLinkFromEnvironmentAndTuneFile) {
  ScopedEnv f("TCCL_TUNE_FILE", "/nonexistent");
  {
    ScopedEnv a("TCCL_INTER_ALPHA_US", nullptr);
    ScopedEnv b("TCCL_INTER_BETA_GBPS", nullptr);
    const LinkModel m = withoutGamma(LinkModel::fromEnv());
    EXPECT_DOUBLE_EQ(m.interAlphaSec, 50e-6);
    EXPECT_DOUBLE_EQ(m.interBetaSecPerByte, 1.0 / 1.25e9);
  }
  {
    ScopedEnv a("TCCL_INTER_ALPHA_US", "120");
    ScopedEnv b("TCCL_INTER_BETA_GBPS", "0.5");
    const LinkModel m = withoutGamma(LinkModel::fromEnv());
    EXPECT_DOUBLE_EQ(m.interAlphaSec, 120e-6);
    EXPECT_DOUBLE_EQ(m.interBetaSecPerByte, 1.0 / 0.5e9);
  }
  for (const char* bad : {"x", "0", "-1"}) {
    ScopedEnv a("TCCL_INTER_BETA_GBPS", bad);
    EXPECT_THROW(LinkModel::fromEnv(), InvalidArgumentError) << bad;
  }
  char tmpl[] = "/tmp/tccl-hier-tune-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/tune.conf";
  LinkModel m = formulaModel();
  m.interAlphaSec = 75e-6;
  m.interBetaSecPerByte = 1.0 / 3e9;
  m.save(path);
  auto back = LinkModel::load(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_NEAR(back->interAlphaSec, 75e-6, 1e-12);
  EXPECT_NEAR(1.0 / back->interBetaSecPerByte, 3e9, 1e5);
  {
    std::ofstream o(path);
    o << "alpha_us=3\nbeta_gbps=1\n";  // a file from before the inter-host keys
  }
  back = LinkModel::load(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->interAlphaSec, 50e-6);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace tccl::algo

// ---- the topology and the communicator ----------------------------------------------

namespace tccl {
namespace {

using tccl::testing::ScopedEnv;

TEST(Topology, HostKeyIsTheHostIdElseTheListenIp) {
  {
    ScopedEnv e("TCCL_HOST_ID", nullptr);
    EXPECT_EQ(Topology::hostKey("10.1.2.3:4567"), "10.1.2.3");
    EXPECT_EQ(Topology::hostKey("[::1]:80"), "::1");
  }
  ScopedEnv e("TCCL_HOST_ID", "rack7-node3");
  EXPECT_EQ(Topology::hostKey("10.1.2.3:4567"), "rack7-node3");
}

TEST(Topology, PublishedAtConstructionReadOnFirstUse) {
  auto store = std::make_shared<HashStore>();
  auto ns = std::make_shared<PrefixStore>("tccl/t", store);
  std::vector<std::unique_ptr<Topology>> ranks;
  const char* keys[] = {"a", "b", "a", "b", "c"};
  for (int r = 0; r < 5; ++r) {
    ScopedEnv e("TCCL_HOST_ID", keys[r]);
    ranks.push_back(std::make_unique<Topology>(ns, r, 5, "127.0.0.1:1", std::chrono::seconds(5)));
    EXPECT_EQ(ranks.back()->key(), keys[r]);
  }
  const algo::HostLayout& l = ranks[3]->layout();
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(&ranks[3]->layout(), &l);  // read once
  EXPECT_EQ(ranks[0]->costs().hosts, 3);
  EXPECT_EQ(Topology::read(store, "t", 5, std::chrono::seconds(5)).hostOf, l.hostOf);
  // A rank that never published: the read times out with the store's error.
  auto lonely = std::make_shared<PrefixStore>("tccl/u", store);
  Topology t(lonely, 0, 2, "127.0.0.1:1", std::chrono::milliseconds(100));
  EXPECT_THROW(t.layout(), Error);
}

// Ranks as threads over a HashStore; after construction and before the first call the
// host keys are rewritten in the store (TCCL_HOST_ID is per process; the multi-process
// test uses it), giving `hostOf` fake hosts.
void runFakeHosts(const std::vector<int>& hostOf, const std::function<void(Communicator&)>& fn) {
  const int n = static_cast<int>(hostOf.size());
  auto store = std::make_shared<HashStore>();
  std::barrier sync(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, n);
        sync.arrive_and_wait();
        if (r == 0) {
          for (int p = 0; p < n; ++p) {
            store->setString("tccl/default/host/" + std::to_string(p),
                             "fake" + std::to_string(hostOf[static_cast<size_t>(p)]));
          }
        }
        sync.arrive_and_wait();
        fn(comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(HierarchicalCommunicator, ExactResultsAndBytesSplitByHost) {
  for (const std::vector<int>& hostOf :
       {std::vector<int>{0, 0, 1, 1, 2, 2}, std::vector<int>{0, 0, 0, 1, 2, 2}}) {
    const algo::HostLayout layout = algo::HostLayout::fromKeys([&] {
      std::vector<std::string> k;
      for (int h : hostOf) k.push_back("fake" + std::to_string(h));
      return k;
    }());
    runFakeHosts(hostOf, [&](Communicator& comm) {
      const int r = comm.rank(), n = comm.size();
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{7}, size_t{1001}}) {
        for (bool inPlace : {false, true}) {
          std::vector<int64_t> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<int64_t>(i) * (r + 1) - 3;
          int64_t* dst = inPlace ? in.data() : out.data();
          comm.allreduce(in.data(), dst, count, DataType::Int64, ReduceOp::Sum,
                         {Algorithm::Hierarchical, std::nullopt});
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(dst[i], static_cast<int64_t>(i) * n * (n + 1) / 2 - 3 * n) << i;
          }
          const CallStats& cs = comm.lastCall();
          EXPECT_EQ(cs.algorithm, "hier");
          algo::HostBytes got;
          for (const auto& [peer, c] : cs.traffic.perPeer) {
            const bool same =
                layout.hostOf[static_cast<size_t>(peer)] == layout.hostOf[static_cast<size_t>(r)];
            (same ? got.intra : got.inter) += c.payloadSent;
          }
          const auto want = tccl::testing::hierSentBytes(layout.hostOf, count, 8, r);
          EXPECT_EQ(got.intra, want.intra) << "count " << count;
          EXPECT_EQ(got.inter, want.inter) << "count " << count;
        }
      }
      // Auto: with these hosts, hier competes (and the explanation says so).
      std::string why;
      comm.chooseAllreduceAlgorithm(64 << 20, &why);
      EXPECT_NE(why.find("hier"), std::string::npos) << why;
    });
  }
}

TEST(HierarchicalCommunicator, OneHostNeverPicksItUnderAuto) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  std::vector<Algorithm> picks(3);
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Communicator comm(store, r, 3);
      for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{1} << 28}) {
        EXPECT_NE(comm.chooseAllreduceAlgorithm(bytes), Algorithm::Hierarchical);
      }
      picks[static_cast<size_t>(r)] = comm.chooseAllreduceAlgorithm(1 << 20);
      std::vector<float> v(10, 1.0f);
      comm.allreduce(std::span<float>(v));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(picks[0], picks[1]);
  EXPECT_EQ(picks[0], picks[2]);
}

}  // namespace
}  // namespace tccl
