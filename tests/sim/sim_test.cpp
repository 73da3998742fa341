// The simulator against the closed forms, on one switch (docs/simulate.md, "Tests"):
//   - bytes exactly: every rank's payload bytes in the replay against formulas written
//     here from first principles (ring 2(N-1)/N V, naive (N-1) V, rd log2(N) V, hd
//     2(p-1)/p V, the trees' 2(N-1) V in total) and against the table's closed forms for
//     every collective, algorithm and edge count;
//   - times within the alpha-beta model: on a star of full-duplex NICs the ring, hd, rd
//     and naive have exact alpha-beta times (every step's messages cross disjoint links),
//     so the replay must match them to 0.5 %; the pipelined tree and the hierarchical
//     algorithm are checked against the cost model's prediction (select.cpp) within its
//     stated tolerance.
// SimGrid allows one engine and one platform per process: every test shares one star of
// 16 hosts, placing ranks on it one or two per host.
#include <gtest/gtest.h>

#include <cmath>

#include "algorithms/allreduce_algos.hpp"
#include "algorithms/collective_spec.hpp"
#include "algorithms/select.hpp"
#include "sim/platform.hpp"
#include "sim/replay.hpp"
#include "tccl/error.hpp"
#include "transport/wire.hpp"

namespace tccl::sim {
namespace {

constexpr double kBytesPerSec = 1e9;  // 8 Gb/s NICs
constexpr double kLatency = 20e-6;    // host to host
constexpr int kHosts = 16;

const std::vector<simgrid::s4u::Host*>& cluster() {
  static const std::vector<simgrid::s4u::Host*> hosts = [] {
    startEngine({});
    ClusterSpec spec;
    spec.hosts = kHosts;
    spec.cores = 2;
    spec.nicBytesPerSec = kBytesPerSec;
    spec.latencySec = kLatency;
    spec.loopbackBytesPerSec = 4e9;
    spec.loopbackLatencySec = 1e-6;
    return buildCluster(spec);
  }();
  return hosts;
}

struct SimRun {
  RankPlacement place;
  ReplayResult result;
};

SimRun simulate(algo::Collective c, Algorithm a, int n, size_t count, int perHost = 1,
                size_t segElems = size_t{1} << 30, double reduceRate = 1e30, int root = 0) {
  SimRun r;
  r.place = placeRanks(cluster(), n, perHost);
  ReplayConfig cfg;
  cfg.collective = c;
  cfg.algorithm = a;
  cfg.count = count;
  cfg.elemSize = 4;
  cfg.segElems = segElems;
  cfg.root = root;
  cfg.reduceBytesPerSec = reduceRate;
  cfg.layout = &r.place.layout;
  cfg.hostOfRank = r.place.hostOfRank;
  r.result = replay(cfg);
  return r;
}

uint64_t totalSent(const ReplayResult& r) {
  uint64_t t = 0;
  for (const RankStats& s : r.ranks) t += s.bytesSent;
  return t;
}
uint64_t totalReceived(const ReplayResult& r) {
  uint64_t t = 0;
  for (const RankStats& s : r.ranks) t += s.bytesReceived;
  return t;
}

bool powerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }
int log2of(int n) {
  int l = 0;
  while ((1 << (l + 1)) <= n) ++l;
  return l;
}

TEST(SimHeader, MatchesTheWire) { EXPECT_EQ(kHeaderBytes, wire::kHeaderSize); }

TEST(SimBytes, AllreduceMatchesIndependentClosedForms) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 12, 16}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t(n) - 1, size_t(n), size_t(n) + 1,
                         size_t{1000}, size_t{64} * 16 * 3}) {
      const uint64_t v = count * 4;
      SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count));
      const SimRun ring = simulate(algo::Collective::AllReduce, Algorithm::Ring, n, count);
      const SimRun naive = simulate(algo::Collective::AllReduce, Algorithm::Naive, n, count);
      const SimRun tree = simulate(algo::Collective::AllReduce, Algorithm::Tree, n, count);
      const SimRun rd =
          simulate(algo::Collective::AllReduce, Algorithm::RecursiveDoubling, n, count);
      const SimRun hd = simulate(algo::Collective::AllReduce, Algorithm::HalvingDoubling, n, count);
      for (int r = 0; r < n; ++r) {
        const auto rr = static_cast<size_t>(r);
        if (count % static_cast<size_t>(n) == 0) {
          EXPECT_EQ(ring.result.ranks[rr].bytesSent, 2 * uint64_t(n - 1) * v / uint64_t(n));
        }
        EXPECT_EQ(naive.result.ranks[rr].bytesSent, uint64_t(n - 1) * v);
        if (powerOfTwo(n)) {
          EXPECT_EQ(rd.result.ranks[rr].bytesSent, uint64_t(log2of(n)) * v);
          if (count % static_cast<size_t>(n) == 0) {
            EXPECT_EQ(hd.result.ranks[rr].bytesSent, 2 * uint64_t(n - 1) * v / uint64_t(n));
          }
        }
      }
      // Each of the two trees carries its half up every edge once and down every edge
      // once: 2(n-1) edges' worth of the whole vector in total.
      EXPECT_EQ(totalSent(tree.result), 2 * uint64_t(n - 1) * v);
      for (const SimRun* run : {&ring, &naive, &tree, &rd, &hd}) {
        EXPECT_EQ(totalSent(run->result), totalReceived(run->result));
      }
    }
  }
}

// Every collective and algorithm of the table, against the table's own closed forms
// (which tests/unit check against the schedules), here through the replay's accounting.
TEST(SimBytes, EveryCollectiveMatchesTheTable) {
  for (const algo::CollectiveSpec& s : algo::collectiveTable()) {
    // The uneven rows need per-rank counts, which the simulator does not take yet.
    if (s.uneven) continue;
    std::vector<Algorithm> algos = s.algorithms;
    if (algos.empty()) algos.push_back(s.defaultAlgorithm);
    for (Algorithm a : algos) {
      for (int n : {1, 2, 3, 6, 8}) {
        for (int perHost : {1, 2}) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{777}}) {
            const int root = s.rooted ? n - 1 : 0;
            const SimRun run = simulate(s.id, a, n, count, perHost, 100, 1e30, root);
            for (int r = 0; r < n; ++r) {
              algo::BuildArgs args;
              args.collective = s.id;
              args.rank = r;
              args.n = n;
              args.root = s.rooted ? root : -1;
              args.count = count;
              args.algorithm = a;
              args.hosts = &run.place.layout;
              SCOPED_TRACE(std::string(s.name) + " " + std::string(toString(a)) +
                           " n=" + std::to_string(n) + " perHost=" + std::to_string(perHost) +
                           " count=" + std::to_string(count) + " rank=" + std::to_string(r));
              const auto& st = run.result.ranks[static_cast<size_t>(r)];
              if (auto sent = algo::bytesSent(args, 4)) {
                EXPECT_EQ(st.bytesSent, *sent);
              }
              if (auto recv = algo::bytesReceived(args, 4)) {
                EXPECT_EQ(st.bytesReceived, *recv);
              }
            }
          }
        }
      }
    }
  }
}

// One message of `bytes` payload between two hosts: latency + (payload + header) / bw.
double hop(double bytes) { return kLatency + (bytes + kHeaderBytes) / kBytesPerSec; }

void expectNear(double got, double want, double tolerance) {
  EXPECT_NEAR(got / want, 1.0, tolerance)
      << "got " << got * 1e6 << " us, want " << want * 1e6 << " us";
}

TEST(SimTime, RingHdRdNaiveAreExactAlphaBeta) {
  for (int n : {2, 3, 4, 8, 16}) {
    const size_t count = size_t{16} * 1024 * 3;  // divisible by every n here but 5, 7
    const double v = static_cast<double>(count) * 4;
    SCOPED_TRACE("n=" + std::to_string(n));
    const SimRun ring = simulate(algo::Collective::AllReduce, Algorithm::Ring, n, count);
    expectNear(ring.result.seconds, 2.0 * (n - 1) * hop(v / n), 0.005);
    const SimRun naive = simulate(algo::Collective::AllReduce, Algorithm::Naive, n, count);
    // n-1 messages at once share the sender's NIC; every NIC does the same.
    expectNear(naive.result.seconds, kLatency + (n - 1) * (v + kHeaderBytes) / kBytesPerSec, 0.005);
    if (powerOfTwo(n)) {
      const int l = log2of(n);
      const SimRun rd =
          simulate(algo::Collective::AllReduce, Algorithm::RecursiveDoubling, n, count);
      expectNear(rd.result.seconds, l * hop(v), 0.005);
      const SimRun hd = simulate(algo::Collective::AllReduce, Algorithm::HalvingDoubling, n, count);
      double want = 0;
      for (int j = 1; j <= l; ++j) want += 2 * hop(v / (1 << j));
      expectNear(hd.result.seconds, want, 0.005);
    }
  }
}

TEST(SimTime, ReductionCostSitsOnTheRingsChain) {
  const int n = 8;
  const size_t count = size_t{1} << 18;
  const double v = static_cast<double>(count) * 4;
  const double rate = 2e9;  // slow enough to matter next to the 1 GB/s links
  const SimRun ring =
      simulate(algo::Collective::AllReduce, Algorithm::Ring, n, count, 1, size_t{1} << 30, rate);
  // Reduce-scatter: each step receives, reduces, then forwards: n-1 reductions of V/n in
  // sequence; the all-gather copies.
  expectNear(ring.result.seconds, 2.0 * (n - 1) * hop(v / n) + (n - 1) * (v / n) / rate, 0.005);
  for (const RankStats& s : ring.result.ranks) {
    EXPECT_EQ(s.bytesReduced, uint64_t(n - 1) * count / n * 4);
  }
}

// Segmented: every segment is its own message with its own header. A stream (one
// peer, one direction) carries one message at a time and each pays the route's latency
// (replay.hpp): the ring's stream to its successor is never idle, so the time is
// 2(n-1) k (alpha + S beta) for k segments of S bytes per step.
TEST(SimTime, SegmentsPipelineTheRing) {
  const int n = 4;
  const size_t count = size_t{1} << 16;  // 64 Ki floats, 16 Ki per chunk
  const size_t seg = 4096;               // 4 segments per chunk
  const SimRun ring = simulate(algo::Collective::AllReduce, Algorithm::Ring, n, count, 1, seg);
  const double k = static_cast<double>(count) / n / seg;
  expectNear(ring.result.seconds, 2.0 * (n - 1) * k * hop(seg * 4.0), 0.005);
  for (const RankStats& s : ring.result.ranks) {
    EXPECT_EQ(s.messagesSent, uint64_t(2 * (n - 1)) * static_cast<uint64_t>(k));
  }
}

// The double binary tree at n = 2 (each half goes up its one edge, then down it; the
// halves travel opposite ways at once) is exact. Beyond, the trees and the hierarchical
// algorithm pipeline segments across depths and phases: the tree is held to its
// bandwidth floor (the busiest rank's bytes at the NIC's rate) and the hierarchical
// algorithm to the cost model's prediction (select.cpp) within 35 %. (The cost model
// ignores the trees' pipeline fill: docs/simulate.md shows where that matters.)
TEST(SimTime, TreeAndHierAgainstTheModels) {
  const size_t count = size_t{3} << 16;
  const double v = static_cast<double>(count) * 4;
  const SimRun tree2 = simulate(algo::Collective::AllReduce, Algorithm::Tree, 2, count);
  expectNear(tree2.result.seconds, 2 * hop(v / 2), 0.005);
  algo::LinkModel m;
  m.alphaSec = 1e-6;
  m.betaSecPerByte = 1 / 4e9;
  m.interAlphaSec = kLatency;
  m.interBetaSecPerByte = 1 / kBytesPerSec;
  m.gammaSecPerByte = 0;
  m.cores = 2;
  for (int hosts : {2, 4, 8}) {
    SCOPED_TRACE("hosts=" + std::to_string(hosts));
    const SimRun tree = simulate(algo::Collective::AllReduce, Algorithm::Tree, hosts, count);
    uint64_t busiest = 0;
    for (const RankStats& s : tree.result.ranks) busiest = std::max(busiest, s.bytesSent);
    EXPECT_GE(tree.result.seconds, static_cast<double>(busiest) / kBytesPerSec);
    const SimRun hier =
        simulate(algo::Collective::AllReduce, Algorithm::Hierarchical, 2 * hosts, count, 2);
    const algo::HostCosts costs = algo::HostCosts::of(hier.place.layout);
    expectNear(hier.result.seconds,
               algo::predictAllreduceSec(Algorithm::Hierarchical, 2 * hosts, count * 4, m, &costs),
               0.35);
  }
}

TEST(SimPlatform, PlacementAndNames) {
  EXPECT_TRUE(naturalLess("node-2", "node-10"));
  EXPECT_FALSE(naturalLess("node-10", "node-2"));
  EXPECT_TRUE(naturalLess("a", "ab"));
  EXPECT_TRUE(naturalLess("h01", "h2"));
  EXPECT_FALSE(naturalLess("h1", "h1"));
  const RankPlacement p = placeRanks(cluster(), 7, 2);
  EXPECT_EQ(p.layout.hosts(), 4);
  EXPECT_EQ(p.hostOfRank[6], cluster()[3]);
  EXPECT_THROW(placeRanks(cluster(), kHosts * 2 + 1, 2), Error);
  EXPECT_THROW(placeRanks(cluster(), 0, 1), Error);
  const RouteFigures inter = routeBetween(cluster()[0], cluster()[1]);
  EXPECT_NEAR(inter.latencySec, kLatency, 1e-12);
  EXPECT_DOUBLE_EQ(inter.bytesPerSec, kBytesPerSec);
}

TEST(SimReplay, RefusesWhatTheTableRefuses) {
  EXPECT_THROW(simulate(algo::Collective::ReduceScatter, Algorithm::Tree, 4, 8), Error);
  EXPECT_THROW(simulate(algo::Collective::Broadcast, Algorithm::Tree, 4, 8, 1, 8, 1e30, 4), Error);
  EXPECT_THROW(simulate(algo::Collective::AllReduce, Algorithm::Ring, 4, 8, 1, 8, 0), Error);
}

}  // namespace
}  // namespace tccl::sim
