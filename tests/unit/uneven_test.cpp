// The uneven collectives (allgatherv, reduce_scatter_v, alltoallv, gatherv, scatterv):
// their table rows' schedules run by the real executor over in-memory links, one thread
// per rank, for grids of counts (zeros on some ranks, all zero, one rank 8x the others,
// random) and displacements (packed, gapped, out of order) on worlds 1-8. Every output
// element is checked against exact data depending on rank and index, the gaps between
// blocks must stay untouched, and every rank's payload bytes on the wire must equal a
// closed form derived here from how each algorithm moves the blocks (not from the
// schedules or the table). Disagreeing counts must fail with a Mismatch naming both
// ranks, never hang.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "algorithms/collective_spec.hpp"
#include "algorithms/select.hpp"
#include "exec_harness.hpp"

namespace tccl::algo {
namespace {

using exectest::bytesOf;
using exectest::ExecOutcome;
using exectest::MeshOptions;
using exectest::RankBuffers;
using exectest::valuesOf;
using C = Collective;
using Counts = std::vector<size_t>;

constexpr int64_t kGap = -7;  // what the output holds where no block lands

// The value rank r sends as element j of its block for rank p.
int64_t val(int r, int p, size_t j) {
  return int64_t{r} * 1000000 + int64_t{p} * 1000 + static_cast<int64_t>(j);
}

size_t total(const Counts& c) { return std::accumulate(c.begin(), c.end(), size_t{0}); }
size_t un(int x) { return static_cast<size_t>(x); }

Counts packed(const Counts& c) {
  Counts d(c.size(), 0);
  for (size_t p = 1; p < c.size(); ++p) d[p] = d[p - 1] + c[p - 1];
  return d;
}
// Blocks in reverse rank order with a gap of 2 before each.
Counts gapped(const Counts& c) {
  Counts d(c.size(), 0);
  size_t at = 0;
  for (size_t i = c.size(); i-- > 0;) {
    at += 2;
    d[i] = at;
    at += c[i];
  }
  return d;
}
size_t extent(const Counts& c, const Counts& d) {
  size_t e = 0;
  for (size_t p = 0; p < c.size(); ++p) {
    if (c[p] > 0) e = std::max(e, d[p] + c[p]);
  }
  return e;
}

// Count vectors for world n: all zero, zeros on some ranks, one rank 8x the others,
// random with zeros.
std::vector<Counts> countGrid(int n, uint64_t seed) {
  std::vector<Counts> g;
  g.push_back(Counts(un(n), 0));
  Counts someZero(un(n));
  for (int p = 0; p < n; ++p) someZero[un(p)] = p % 2 == 0 ? 0 : un(p) + 1;
  g.push_back(someZero);
  Counts skew(un(n), 3);
  skew[0] = 24;
  g.push_back(skew);
  std::mt19937_64 rng(seed);
  Counts rnd(un(n));
  for (auto& x : rnd) x = rng() % 4 == 0 ? 0 : rng() % 150;
  g.push_back(rnd);
  return g;
}

struct VRun {
  std::vector<Schedule> scheds;
  std::vector<RankBuffers> bufs;
  std::vector<VCounts> v;  // per rank (the schedules point into these)
};

// Builds every rank's schedule from its row of the table, as the communicator does.
void buildAll(VRun& k, C c, int n, int root, const std::vector<size_t>& countOf, size_t seg,
              const std::vector<bool>& inPlace = {}) {
  for (int r = 0; r < n; ++r) {
    BuildArgs a;
    a.collective = c;
    a.rank = r;
    a.n = n;
    a.root = root;
    a.count = countOf[un(r)];
    a.segElems = seg;
    a.v = &k.v[un(r)];
    ASSERT_EQ(checkCounts(a, 8), std::nullopt) << "rank " << r;
    BuiltSchedule b = build(a);
    k.scheds.push_back(b.schedule);
    RankBuffers& rb = k.bufs[un(r)];
    rb.inputOrigin = b.inputOrigin;
    rb.outputOrigin = b.outputOrigin;
    rb.inPlace = !inPlace.empty() && inPlace[un(r)];
  }
}

MeshOptions mesh(uint64_t seed) {
  MeshOptions o;
  o.seed = seed;
  o.minCapacity = 16;
  o.maxCapacity = 4096;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// Each rank's payload bytes on the wire against the expected ones (sent, received).
std::string checkBytes(const ExecOutcome& out,
                       const std::vector<std::pair<uint64_t, uint64_t>>& want) {
  for (size_t r = 0; r < want.size(); ++r) {
    if (out.counters[r].payloadSent != want[r].first ||
        out.counters[r].payloadRecv != want[r].second) {
      return "rank " + std::to_string(r) + " sent " + std::to_string(out.counters[r].payloadSent) +
             " / " + std::to_string(want[r].first) + " received " +
             std::to_string(out.counters[r].payloadRecv) + " / " + std::to_string(want[r].second);
    }
  }
  return "";
}

// The table's closed forms must say the same.
void checkTable(C c, int n, int root, const std::vector<size_t>& countOf, const VRun& k,
                const std::vector<std::pair<uint64_t, uint64_t>>& want) {
  for (int r = 0; r < n; ++r) {
    BuildArgs a;
    a.collective = c;
    a.rank = r;
    a.n = n;
    a.root = root;
    a.count = countOf[un(r)];
    a.v = &k.v[un(r)];
    EXPECT_EQ(bytesSent(a, 8), want[un(r)].first) << "rank " << r;
    EXPECT_EQ(bytesReceived(a, 8), want[un(r)].second) << "rank " << r;
    EXPECT_EQ(k.scheds[un(r)].bytesSent(8), want[un(r)].first) << "rank " << r;
  }
}

std::string name(const char* what, int n, const Counts& c, size_t seg) {
  std::string s =
      std::string(what) + " n=" + std::to_string(n) + " seg=" + std::to_string(seg) + " counts";
  for (size_t x : c) s += " " + std::to_string(x);
  return s;
}

// ---- allgatherv --------------------------------------------------------------------------

// Ring: block p leaves rank p and is forwarded by p+1, ..., p+n-2; every rank but p
// receives it once.
std::vector<std::pair<uint64_t, uint64_t>> ringGatherBytes(const Counts& c, int n) {
  std::vector<std::pair<uint64_t, uint64_t>> b(un(n));
  for (int p = 0; p < n; ++p) {
    for (int hop = 0; hop < n - 1; ++hop) {
      b[un((p + hop) % n)].first += c[un(p)] * 8;
      b[un((p + hop + 1) % n)].second += c[un(p)] * 8;
    }
  }
  return b;
}

TEST(Uneven, AllGatherV) {
  uint64_t seed = 1;
  for (int n = 1; n <= 8; ++n) {
    for (const Counts& c : countGrid(n, seed)) {
      for (bool gaps : {false, true}) {
        const size_t seg = gaps ? 7 : 64;
        SCOPED_TRACE(name(gaps ? "allgatherv gapped" : "allgatherv", n, c, seg));
        const Counts d = gaps ? gapped(c) : packed(c);
        const size_t outElems = extent(c, d);
        VRun k;
        k.v.assign(un(n), VCounts{{}, {}, c, d});
        k.bufs.resize(un(n));
        std::vector<bool> inPlace(un(n));
        for (int r = 0; r < n; ++r) inPlace[un(r)] = gaps && r % 2 == 1;
        buildAll(k, C::AllGatherV, n, -1, c, seg, inPlace);
        for (int r = 0; r < n; ++r) {
          std::vector<int64_t> in(c[un(r)]), out(std::max<size_t>(outElems, 1), kGap);
          for (size_t j = 0; j < in.size(); ++j) in[j] = val(r, 0, j);
          if (inPlace[un(r)])
            std::copy(in.begin(), in.end(), out.begin() + static_cast<long>(d[un(r)]));
          k.bufs[un(r)].input = bytesOf(in.empty() ? std::vector<int64_t>{0} : in);
          k.bufs[un(r)].output = bytesOf(out);
        }
        ExecOutcome o =
            exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, mesh(seed++));
        ASSERT_EQ(o.firstError(), "");
        for (int r = 0; r < n; ++r) {
          std::vector<int64_t> want(std::max<size_t>(outElems, 1), kGap);
          for (int p = 0; p < n; ++p) {
            for (size_t j = 0; j < c[un(p)]; ++j) want[d[un(p)] + j] = val(p, 0, j);
          }
          ASSERT_EQ(valuesOf<int64_t>(k.bufs[un(r)].output, want.size()), want) << "rank " << r;
        }
        const auto bytes = ringGatherBytes(c, n);
        ASSERT_EQ(checkBytes(o, bytes), "");
        checkTable(C::AllGatherV, n, -1, c, k, bytes);
      }
    }
  }
}

// ---- reduce_scatter_v --------------------------------------------------------------------

// Ring: block p's partial sum starts at rank p+1 and is forwarded p+1 -> p+2 -> ... -> p:
// sent by every rank but p, received by every rank but p+1.
std::vector<std::pair<uint64_t, uint64_t>> ringReduceBytes(const Counts& c, int n) {
  std::vector<std::pair<uint64_t, uint64_t>> b(un(n));
  for (int p = 0; p < n; ++p) {
    for (int hop = 1; hop < n; ++hop) {
      b[un((p + hop) % n)].first += c[un(p)] * 8;
      b[un((p + hop + 1) % n)].second += c[un(p)] * 8;
    }
  }
  return b;
}

TEST(Uneven, ReduceScatterV) {
  uint64_t seed = 100;
  for (int n = 1; n <= 8; ++n) {
    for (const Counts& c : countGrid(n, seed)) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        const size_t seg = op == ReduceOp::Sum ? 5 : 64;
        SCOPED_TRACE(name(op == ReduceOp::Sum ? "rsv sum" : "rsv max", n, c, seg));
        const Counts off = packed(c);
        VRun k;
        k.v.assign(un(n), VCounts{{}, {}, c, {}});
        k.bufs.resize(un(n));
        std::vector<size_t> own(un(n));
        for (int r = 0; r < n; ++r) own[un(r)] = c[un(r)];
        buildAll(k, C::ReduceScatterV, n, -1, own, seg);
        auto input = [&](int r, int p, size_t j) {
          return op == ReduceOp::Max ? val((r + p + static_cast<int>(j)) % n, p, j) : val(r, p, j);
        };
        for (int r = 0; r < n; ++r) {
          std::vector<int64_t> in(std::max<size_t>(total(c), 1));
          for (int p = 0; p < n; ++p) {
            for (size_t j = 0; j < c[un(p)]; ++j) in[off[un(p)] + j] = input(r, p, j);
          }
          k.bufs[un(r)].input = bytesOf(in);
          k.bufs[un(r)].output = bytesOf(std::vector<int64_t>(std::max<size_t>(c[un(r)], 1), kGap));
        }
        ExecOutcome o = exectest::execute(k.scheds, k.bufs, DataType::Int64, op, mesh(seed++));
        ASSERT_EQ(o.firstError(), "");
        for (int r = 0; r < n; ++r) {
          std::vector<int64_t> want(std::max<size_t>(c[un(r)], 1), kGap);
          for (size_t j = 0; j < c[un(r)]; ++j) {
            int64_t acc = op == ReduceOp::Max ? INT64_MIN : 0;
            for (int q = 0; q < n; ++q) {
              const int64_t x = input(q, r, j);
              acc = op == ReduceOp::Max ? std::max(acc, x) : acc + x;
            }
            want[j] = acc;
          }
          ASSERT_EQ(valuesOf<int64_t>(k.bufs[un(r)].output, want.size()), want) << "rank " << r;
        }
        const auto bytes = ringReduceBytes(c, n);
        ASSERT_EQ(checkBytes(o, bytes), "");
        checkTable(C::ReduceScatterV, n, -1, own, k, bytes);
      }
    }
  }
}

// ---- alltoallv ---------------------------------------------------------------------------

// m[i][j]: elements rank i sends to rank j.
using Matrix = std::vector<Counts>;

std::vector<Matrix> matrixGrid(int n, uint64_t seed) {
  std::vector<Matrix> g;
  g.push_back(Matrix(un(n), Counts(un(n), 0)));
  Matrix skew(un(n), Counts(un(n), 4));
  for (auto& x : skew[0]) x = 32;  // rank 0 sends 8x the others
  g.push_back(skew);
  Matrix rnd(un(n), Counts(un(n)));
  std::mt19937_64 rng(seed);
  for (auto& row : rnd) {
    for (auto& x : row) x = rng() % 3 == 0 ? 0 : rng() % 90;
  }
  g.push_back(rnd);
  Matrix zeroRows(un(n), Counts(un(n), 0));  // only odd ranks send, only to even ranks
  for (int i = 1; i < n; i += 2) {
    for (int j = 0; j < n; j += 2) zeroRows[un(i)][un(j)] = un(i + j) + 1;
  }
  g.push_back(zeroRows);
  return g;
}

TEST(Uneven, AllToAllV) {
  uint64_t seed = 200;
  for (int n = 1; n <= 8; ++n) {
    for (const Matrix& m : matrixGrid(n, seed)) {
      for (bool gaps : {false, true}) {
        const size_t seg = gaps ? 6 : 64;
        SCOPED_TRACE(name(gaps ? "alltoallv gapped" : "alltoallv", n, m[0], seg));
        VRun k;
        k.bufs.resize(un(n));
        std::vector<size_t> own(un(n));
        std::vector<std::pair<uint64_t, uint64_t>> bytes(un(n));
        for (int r = 0; r < n; ++r) {
          VCounts v;
          v.sendCounts = m[un(r)];
          for (int p = 0; p < n; ++p) v.recvCounts.push_back(m[un(p)][un(r)]);
          v.sendDispls = gaps ? gapped(v.sendCounts) : packed(v.sendCounts);
          v.recvDispls = gaps ? packed(v.recvCounts) : gapped(v.recvCounts);
          k.v.push_back(v);
          own[un(r)] = total(v.sendCounts);
          // Every other rank's block, plus one 8-byte count message each way per pair.
          for (int p = 0; p < n; ++p) {
            if (p == r) continue;
            bytes[un(r)].first += v.sendCounts[un(p)] * 8 + 8;
            bytes[un(r)].second += v.recvCounts[un(p)] * 8 + 8;
          }
        }
        buildAll(k, C::AllToAllV, n, -1, own, seg);
        for (int r = 0; r < n; ++r) {
          const VCounts& v = k.v[un(r)];
          std::vector<int64_t> in(std::max<size_t>(extent(v.sendCounts, v.sendDispls), 1), kGap);
          for (int p = 0; p < n; ++p) {
            for (size_t j = 0; j < v.sendCounts[un(p)]; ++j)
              in[v.sendDispls[un(p)] + j] = val(r, p, j);
          }
          k.bufs[un(r)].input = bytesOf(in);
          k.bufs[un(r)].output = bytesOf(
              std::vector<int64_t>(std::max<size_t>(extent(v.recvCounts, v.recvDispls), 1), kGap));
        }
        ExecOutcome o =
            exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, mesh(seed++));
        ASSERT_EQ(o.firstError(), "");
        for (int r = 0; r < n; ++r) {
          const VCounts& v = k.v[un(r)];
          std::vector<int64_t> want(std::max<size_t>(extent(v.recvCounts, v.recvDispls), 1), kGap);
          for (int p = 0; p < n; ++p) {
            for (size_t j = 0; j < v.recvCounts[un(p)]; ++j)
              want[v.recvDispls[un(p)] + j] = val(p, r, j);
          }
          ASSERT_EQ(valuesOf<int64_t>(k.bufs[un(r)].output, want.size()), want) << "rank " << r;
        }
        ASSERT_EQ(checkBytes(o, bytes), "");
        checkTable(C::AllToAllV, n, -1, own, k, bytes);
      }
    }
  }
}

// ---- gatherv and scatterv ----------------------------------------------------------------

TEST(Uneven, GatherVAndScatterV) {
  uint64_t seed = 300;
  for (int n = 1; n <= 8; ++n) {
    for (int root : {0, n - 1, n / 2}) {
      for (const Counts& c : countGrid(n, seed)) {
        const size_t seg = c[0] % 2 == 0 ? 4 : 64;
        const Counts d = root % 2 == 0 ? gapped(c) : packed(c);
        // Flat: every non-root's block crosses once, after an 8-byte count message.
        std::vector<std::pair<uint64_t, uint64_t>> g(un(n)), s(un(n));
        for (int p = 0; p < n; ++p) {
          if (p == root) continue;
          g[un(p)].first = s[un(p)].second = c[un(p)] * 8 + 8;
          g[un(root)].second += c[un(p)] * 8 + 8;
          s[un(root)].first += c[un(p)] * 8 + 8;
        }
        {
          SCOPED_TRACE(name(("gatherv to " + std::to_string(root)).c_str(), n, c, seg));
          VRun k;
          k.bufs.resize(un(n));
          for (int r = 0; r < n; ++r) k.v.push_back(r == root ? VCounts{{}, {}, c, d} : VCounts{});
          buildAll(k, C::GatherV, n, root, c, seg);
          for (int r = 0; r < n; ++r) {
            std::vector<int64_t> in(std::max<size_t>(c[un(r)], 1));
            for (size_t j = 0; j < c[un(r)]; ++j) in[j] = val(r, 0, j);
            k.bufs[un(r)].input = bytesOf(in);
            k.bufs[un(r)].output = bytesOf(
                std::vector<int64_t>(r == root ? std::max<size_t>(extent(c, d), 1) : 1, kGap));
          }
          ExecOutcome o =
              exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, mesh(seed++));
          ASSERT_EQ(o.firstError(), "");
          std::vector<int64_t> want(std::max<size_t>(extent(c, d), 1), kGap);
          for (int p = 0; p < n; ++p) {
            for (size_t j = 0; j < c[un(p)]; ++j) want[d[un(p)] + j] = val(p, 0, j);
          }
          ASSERT_EQ(valuesOf<int64_t>(k.bufs[un(root)].output, want.size()), want);
          ASSERT_EQ(checkBytes(o, g), "");
          checkTable(C::GatherV, n, root, c, k, g);
        }
        {
          SCOPED_TRACE(name(("scatterv from " + std::to_string(root)).c_str(), n, c, seg));
          VRun k;
          k.bufs.resize(un(n));
          for (int r = 0; r < n; ++r) k.v.push_back(r == root ? VCounts{c, d, {}, {}} : VCounts{});
          buildAll(k, C::ScatterV, n, root, c, seg);
          for (int r = 0; r < n; ++r) {
            std::vector<int64_t> in(r == root ? std::max<size_t>(extent(c, d), 1) : 1, kGap);
            if (r == root) {
              for (int p = 0; p < n; ++p) {
                for (size_t j = 0; j < c[un(p)]; ++j) in[d[un(p)] + j] = val(root, p, j);
              }
            }
            k.bufs[un(r)].input = bytesOf(in);
            k.bufs[un(r)].output =
                bytesOf(std::vector<int64_t>(std::max<size_t>(c[un(r)], 1), kGap));
          }
          ExecOutcome o =
              exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, mesh(seed++));
          ASSERT_EQ(o.firstError(), "");
          for (int r = 0; r < n; ++r) {
            std::vector<int64_t> want(std::max<size_t>(c[un(r)], 1), kGap);
            for (size_t j = 0; j < c[un(r)]; ++j) want[j] = val(root, r, j);
            ASSERT_EQ(valuesOf<int64_t>(k.bufs[un(r)].output, want.size()), want) << "rank " << r;
          }
          ASSERT_EQ(checkBytes(o, s), "");
          checkTable(C::ScatterV, n, root, c, k, s);
        }
      }
    }
  }
}

// ---- counts that disagree ------------------------------------------------------------------

// An alltoallv of 4 ranks where every pair agrees but (from, to): `from` sends `sends`
// elements to `to`, which expects `expects`. Returns each rank's error.
std::vector<std::string> disagreeingAllToAllV(int from, int to, size_t sends, size_t expects,
                                              uint64_t seed) {
  const int n = 4;
  Matrix m(un(n), Counts(un(n), 5));
  VRun k;
  k.bufs.resize(un(n));
  std::vector<size_t> own(un(n));
  for (int r = 0; r < n; ++r) {
    VCounts v;
    v.sendCounts = m[un(r)];
    for (int p = 0; p < n; ++p) v.recvCounts.push_back(m[un(p)][un(r)]);
    if (r == from) v.sendCounts[un(to)] = sends;
    if (r == to) v.recvCounts[un(from)] = expects;
    v.sendDispls = packed(v.sendCounts);
    v.recvDispls = packed(v.recvCounts);
    k.v.push_back(v);
    own[un(r)] = total(v.sendCounts);
  }
  buildAll(k, C::AllToAllV, n, -1, own, 2);
  for (int r = 0; r < n; ++r) {
    const VCounts& v = k.v[un(r)];
    k.bufs[un(r)].input = bytesOf(std::vector<int64_t>(total(v.sendCounts) + 1, r));
    k.bufs[un(r)].output = bytesOf(std::vector<int64_t>(total(v.recvCounts) + 1, kGap));
  }
  MeshOptions o = mesh(seed);
  o.timeout = std::chrono::milliseconds(5000);
  const auto t0 = std::chrono::steady_clock::now();
  ExecOutcome out = exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, o);
  // Found by the count message, long before the deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
  return out.errors;
}

TEST(Uneven, DisagreeingAllToAllVCountsNameBothRanks) {
  struct Case {
    size_t sends, expects;
  };
  // More, fewer, none sent where some are expected, some sent where none are expected,
  // and counts that differ only past a segment boundary.
  for (Case c : {Case{5, 4}, Case{4, 5}, Case{0, 3}, Case{3, 0}, Case{7, 6}}) {
    SCOPED_TRACE(std::to_string(c.sends) + " vs " + std::to_string(c.expects));
    const auto errors = disagreeingAllToAllV(2, 1, c.sends, c.expects, c.sends + 10);
    const std::string want = "rank 2 sends " + std::to_string(c.sends) +
                             " elements to rank 1, but rank 1 expects " +
                             std::to_string(c.expects) + " from rank 2";
    EXPECT_NE(errors[1].find(want), std::string::npos) << errors[1];
    EXPECT_NE(errors[1].find("Mismatch"), std::string::npos) << errors[1];
  }
}

TEST(Uneven, DisagreeingGatherVAndScatterVCounts) {
  const int n = 3, root = 0;
  const Counts c = {2, 3, 4};
  for (bool gather : {true, false}) {
    SCOPED_TRACE(gather ? "gatherv" : "scatterv");
    VRun k;
    k.bufs.resize(un(n));
    Counts rootView = c;
    rootView[2] = 6;  // the root thinks rank 2 has 6; rank 2 says 4
    for (int r = 0; r < n; ++r) {
      if (r != root) {
        k.v.push_back(VCounts{});
      } else if (gather) {
        k.v.push_back(VCounts{{}, {}, rootView, packed(rootView)});
      } else {
        k.v.push_back(VCounts{rootView, packed(rootView), {}, {}});
      }
    }
    buildAll(k, gather ? C::GatherV : C::ScatterV, n, root, c, 64);
    for (int r = 0; r < n; ++r) {
      k.bufs[un(r)].input = bytesOf(std::vector<int64_t>(16, r));
      k.bufs[un(r)].output = bytesOf(std::vector<int64_t>(16, kGap));
    }
    ExecOutcome o = exectest::execute(k.scheds, k.bufs, DataType::Int64, ReduceOp::Sum, mesh(9));
    const std::string& err = gather ? o.errors[0] : o.errors[2];
    const std::string want = gather ? "rank 2 sends 4 elements to rank 0, but rank 0 expects 6"
                                    : "rank 0 sends 6 elements to rank 2, but rank 2 expects 4";
    EXPECT_NE(err.find(want), std::string::npos) << err;
  }
}

// ---- what the table checks locally ---------------------------------------------------------

TEST(Uneven, CheckCountsNamesWhatIsWrong) {
  VCounts v;
  BuildArgs a;
  a.n = 3;
  a.rank = 1;
  a.v = &v;
  auto why = [&](C c, size_t count, int root = -1) {
    a.collective = c;
    a.count = count;
    a.root = root;
    return checkCounts(a, 4).value_or("");
  };
  v.recvCounts = {1, 2};
  v.recvDispls = {0, 1};
  EXPECT_EQ(why(C::AllGatherV, 2), "recvCounts has 2 entries for 3 ranks");
  v.recvCounts = {1, 2, 3};
  v.recvDispls = {0, 1, 3};
  EXPECT_EQ(why(C::AllGatherV, 2), "");
  EXPECT_EQ(why(C::AllGatherV, 5), "sendCount 5 but recvCounts[1] is 2");
  v.recvDispls = {0, 2, 3};  // [0, 1), [2, 4), [3, 6)
  EXPECT_EQ(why(C::AllGatherV, 2), "blocks 1 and 2 of the output overlap");
  v.recvDispls = {0, 1};
  EXPECT_EQ(why(C::AllGatherV, 2), "recvDispls has 2 entries for 3 ranks");
  EXPECT_EQ(why(C::ReduceScatterV, 2), "");
  // A non-root's gatherv and scatterv read no vectors.
  v = VCounts{};
  EXPECT_EQ(why(C::GatherV, 9, 0), "");
  EXPECT_EQ(why(C::ScatterV, 9, 0), "");
  EXPECT_EQ(why(C::GatherV, 9, 1), "recvCounts has 0 entries for 3 ranks");
  v.sendCounts = {1, 1, 1};
  v.sendDispls = {0, 1, 2};
  v.recvCounts = {1, 2, 1};
  v.recvDispls = {0, 1, 3};
  EXPECT_EQ(why(C::AllToAllV, 3), "sendCounts[1] 1 but recvCounts[1] is 2");
  // Empty blocks may sit anywhere, even on top of others.
  v.recvCounts = {1, 1, 0};
  v.recvDispls = {0, 1, 0};
  EXPECT_EQ(why(C::AllToAllV, 3), "");
  EXPECT_EQ(why(C::ScatterV, 1, 1), "");
  EXPECT_EQ(why(C::ScatterV, 2, 1), "recvCount 2 but sendCounts[1] is 1");
  v.sendCounts = {SIZE_MAX / 2, 1, 1};
  EXPECT_NE(why(C::ScatterV, 1, 1).find("too large"), std::string::npos);
}

TEST(Uneven, BufferSizesAndInPlace) {
  VCounts v{{}, {}, {2, 0, 3}, {5, 99, 0}};
  BuildArgs a;
  a.collective = C::AllGatherV;
  a.n = 3;
  a.rank = 2;
  a.count = 3;
  a.v = &v;
  EXPECT_EQ(inputElems(a), 3u);
  EXPECT_EQ(outputElems(a), 7u);  // block 0 ends at 7; the empty block 1 does not count
  std::vector<uint8_t> mem(256);
  uint8_t* b = mem.data();
  EXPECT_EQ(classify(a, b, b, 4), Placement::InPlace);  // recvDispls[2] = 0
  a.rank = 0;
  a.count = 2;
  EXPECT_EQ(classify(a, b + 20, b, 4), Placement::InPlace);
  EXPECT_EQ(classify(a, b + 4, b, 4), Placement::Overlap);
  EXPECT_EQ(classify(a, b + 28, b, 4), Placement::Distinct);
  a.collective = C::ReduceScatterV;
  a.rank = 2;
  a.count = 3;
  EXPECT_EQ(inputElems(a), 5u);
  EXPECT_EQ(outputElems(a), 3u);
  EXPECT_EQ(classify(a, b, b + 8, 4), Placement::InPlace);  // out = in + (2 + 0) elements
  VCounts w{{1, 2}, {0, 1}, {2, 2}, {0, 2}};
  a.collective = C::AllToAllV;
  a.n = 2;
  a.rank = 0;
  a.v = &w;
  EXPECT_EQ(classify(a, b, b, 4), Placement::InPlaceRefused);
  EXPECT_EQ(inputElems(a), 3u);
  EXPECT_EQ(outputElems(a), 4u);
  a.collective = C::GatherV;
  a.root = 1;
  EXPECT_EQ(outputElems(a), 0u);  // off the root
  a.collective = C::ScatterV;
  EXPECT_EQ(inputElems(a), 0u);
}

TEST(Uneven, RowsNamesAndDigest) {
  for (C c : {C::AllGatherV, C::ReduceScatterV, C::AllToAllV, C::GatherV, C::ScatterV}) {
    EXPECT_TRUE(spec(c).uneven);
    EXPECT_EQ(parseCollective(spec(c).name), c);
  }
  EXPECT_EQ(parseCollective("a2av"), C::AllToAllV);
  EXPECT_EQ(parseCollective("all-gatherv"), C::AllGatherV);
  EXPECT_TRUE(spec(C::GatherV).rooted);
  EXPECT_TRUE(spec(C::ReduceScatterV).takesOp);
  VCounts x{{}, {}, {1, 2, 3}, {}}, y{{}, {}, {1, 3, 2}, {}};
  BuildArgs a;
  a.collective = C::AllGatherV;
  a.n = 3;
  a.v = &x;
  const uint64_t dx = sharedCountsDigest(a);
  a.v = &y;
  EXPECT_NE(dx, sharedCountsDigest(a));
  a.collective = C::AllToAllV;  // local counts: nothing shared
  EXPECT_EQ(sharedCountsDigest(a), 0u);
}

// ---- the cost model ------------------------------------------------------------------------

TEST(Uneven, CostModelEntries) {
  LinkModel m;
  m.alphaSec = 10e-6;
  m.betaSecPerByte = 1e-9;
  m.gammaSecPerByte = 0;
  // 4 ranks, rank 0 sends 8 units (of 1000 float32) to every rank, the others 1 unit.
  std::vector<std::vector<size_t>> a2a(4, std::vector<size_t>(4, 1000));
  for (auto& x : a2a[0]) x = 8000;
  // Busiest: rank 0 sends 3 x 8000 x 4 + 3 x 8 bytes.
  EXPECT_DOUBLE_EQ(predictAllToAllVSec(a2a, 4, m), 3 * 10e-6 + (3 * 32000.0 + 24) * 1e-9);
  // Even counts: every rank's link carries N-1 blocks.
  EXPECT_DOUBLE_EQ(predictAllGatherVSec({5, 5, 5}, 8, m), 2 * 10e-6 + 10 * 8 * 1e-9);
  // Skewed: rank 2 (whose successor holds the small block) forwards the most.
  EXPECT_DOUBLE_EQ(predictAllGatherVSec({1, 9, 9}, 1, m), 2 * 10e-6 + 18 * 1e-9);
  EXPECT_DOUBLE_EQ(predictReduceScatterVSec({1, 9, 9}, 1, m), 2 * 10e-6 + 18 * 1e-9);
  EXPECT_DOUBLE_EQ(predictRootedVSec({4, 0, 2}, 0, 1, m), 2 * 10e-6 + (0 + 8 + 2 + 8) * 1e-9);
  EXPECT_EQ(predictAllToAllVSec({{7}}, 4, m), 0);  // one rank: nothing moves
}

}  // namespace
}  // namespace tccl::algo
