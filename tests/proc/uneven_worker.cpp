// Worker process of the uneven-collective tests (tests/proc/uneven_test.cpp): allgatherv,
// reduce_scatter_v, alltoallv, gatherv, scatterv over real sockets. argv[1] names the
// scenario:
//   grid       every uneven collective over count patterns (all zero, zeros on some
//              ranks, rank 0 8x the others, seeded random), blocking and asynchronous,
//              packed and gapped displacements, allgatherv in place: exact int64 data
//              depending on rank and index, gaps untouched, and this rank's payload bytes
//              against a closed form written here
//   mismatch   argv[2]: "a2av" (rank 2 sends 5 elements to rank 1, which expects 4),
//              "gatherv" (the root expects 6 from rank 2, which sends 4) or "agv" (rank
//              1 passes other recvCounts): every rank must fail, and publishes
//              "kind=<kind> culprit=<c> message=<text>" as proc/mismatch/<rank>, from
//              the call itself or, for a rank whose part of it was consistent, from the
//              barrier after it
// Exit status 0 means every check of this rank passed; the first failure is printed.
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tccl/tccl.hpp"

using namespace tccl;

namespace {

int gRank = -1;
std::string gWhat;
using Counts = std::vector<size_t>;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[uneven worker rank " << gRank << "] CHECK FAILED: " << gWhat << ": " << msg
            << std::endl;
  std::exit(1);
}
void check(bool ok, const std::string& msg) {
  if (!ok) die(msg);
}

constexpr int64_t kGap = -7;
size_t un(int x) { return static_cast<size_t>(x); }
int64_t val(int r, int p, size_t j) {
  return int64_t{r} * 1000000 + int64_t{p} * 1000 + static_cast<int64_t>(j);
}
size_t total(const Counts& c) { return std::accumulate(c.begin(), c.end(), size_t{0}); }
Counts packed(const Counts& c) {
  Counts d(c.size(), 0);
  for (size_t p = 1; p < c.size(); ++p) d[p] = d[p - 1] + c[p - 1];
  return d;
}
Counts gapped(const Counts& c) {  // reverse order, a gap of 3 before each block
  Counts d(c.size(), 0);
  size_t at = 0;
  for (size_t i = c.size(); i-- > 0;) {
    at += 3;
    d[i] = at;
    at += c[i];
  }
  return d;
}
size_t extent(const Counts& c, const Counts& d) {
  size_t e = 0;
  for (size_t p = 0; p < c.size(); ++p)
    if (c[p] > 0) e = std::max(e, d[p] + c[p]);
  return std::max<size_t>(e, 1);
}

// m[i][j]: elements rank i sends to rank j (the same on every rank: a seeded pattern).
using Matrix = std::vector<Counts>;
std::vector<Matrix> patterns(int n) {
  std::vector<Matrix> out;
  out.push_back(Matrix(un(n), Counts(un(n), 0)));  // all zero
  Matrix skew(un(n), Counts(un(n), 5));
  for (auto& x : skew[0]) x = 40;  // rank 0 sends 8x the others
  out.push_back(skew);
  Matrix some(un(n), Counts(un(n), 0));  // only odd ranks send
  for (int i = 1; i < n; i += 2)
    for (int j = 0; j < n; ++j) some[un(i)][un(j)] = un(i + 2 * j) + 1;
  out.push_back(some);
  std::mt19937_64 rng(static_cast<uint64_t>(n) * 7919);
  Matrix rnd(un(n), Counts(un(n)));
  for (auto& row : rnd)
    for (auto& x : row) x = rng() % 3 == 0 ? 0 : rng() % 3000;
  out.push_back(rnd);
  return out;
}

// This rank's payload bytes of its last call (blocking: lastCall; async: the Work's).
std::pair<uint64_t, uint64_t> traffic(const CallStats& s) {
  const PeerCounters t = s.traffic.total();
  return {t.payloadSent, t.payloadRecv};
}
void expectBytes(const CallStats& s, uint64_t sent, uint64_t recv) {
  const auto [gotSent, gotRecv] = traffic(s);
  check(gotSent == sent && gotRecv == recv,
        "payload sent " + std::to_string(gotSent) + " / " + std::to_string(sent) + ", received " +
            std::to_string(gotRecv) + " / " + std::to_string(recv));
}

// Runs a call blocking or asynchronously and returns its stats.
template <typename Sync, typename Async>
CallStats runCall(Communicator& comm, bool async, Sync sync, Async start) {
  if (!async) {
    sync();
    return comm.lastCall();
  }
  WorkPtr w = start();
  w->wait();
  return w->stats();
}

void allGatherV(Communicator& comm, const Counts& c, bool gaps, bool async, bool inPlace) {
  const int n = comm.size(), r = comm.rank();
  const Counts d = gaps ? gapped(c) : packed(c);
  std::vector<int64_t> in(std::max<size_t>(c[un(r)], 1)), out(extent(c, d), kGap);
  for (size_t j = 0; j < c[un(r)]; ++j) in[j] = val(r, 0, j);
  const void* send = in.data();
  if (inPlace) {
    std::copy(in.begin(), in.begin() + static_cast<long>(c[un(r)]),
              out.begin() + static_cast<long>(d[un(r)]));
    send = out.data() + d[un(r)];
  }
  const CallStats s = runCall(
      comm, async, [&] { comm.allGatherV(send, c[un(r)], out.data(), c, d, DataType::Int64); },
      [&] { return comm.allGatherVAsync(send, c[un(r)], out.data(), c, d, DataType::Int64); });
  std::vector<int64_t> want(out.size(), kGap);
  for (int p = 0; p < n; ++p)
    for (size_t j = 0; j < c[un(p)]; ++j) want[d[un(p)] + j] = val(p, 0, j);
  check(out == want, "allgatherv output");
  // Ring: block p is sent by p, p+1, ..., p+n-2 and received by all but p.
  uint64_t sent = 0, recv = 0;
  for (int p = 0; p < n && n > 1; ++p) {
    if ((r - p + n) % n != n - 1) sent += c[un(p)] * 8;
    if (p != r) recv += c[un(p)] * 8;
  }
  expectBytes(s, sent, recv);
}

void reduceScatterV(Communicator& comm, const Counts& c, bool async) {
  const int n = comm.size(), r = comm.rank();
  const Counts off = packed(c);
  std::vector<int64_t> in(std::max<size_t>(total(c), 1)), out(std::max<size_t>(c[un(r)], 1), kGap);
  for (int p = 0; p < n; ++p)
    for (size_t j = 0; j < c[un(p)]; ++j) in[off[un(p)] + j] = val(r, p, j);
  const CallStats s = runCall(
      comm, async,
      [&] { comm.reduceScatterV(in.data(), out.data(), c, DataType::Int64, ReduceOp::Sum); },
      [&] {
        return comm.reduceScatterVAsync(in.data(), out.data(), c, DataType::Int64, ReduceOp::Sum);
      });
  for (size_t j = 0; j < c[un(r)]; ++j) {
    int64_t want = 0;
    for (int q = 0; q < n; ++q) want += val(q, r, j);
    check(out[j] == want, "reduce_scatter_v element " + std::to_string(j));
  }
  // Ring: block p's partial sum is sent by every rank but p, received by all but p+1.
  uint64_t sent = 0, recv = 0;
  for (int p = 0; p < n && n > 1; ++p) {
    if (p != r) sent += c[un(p)] * 8;
    if ((p + 1) % n != r) recv += c[un(p)] * 8;
  }
  expectBytes(s, sent, recv);
}

void allToAllV(Communicator& comm, const Matrix& m, bool gaps, bool async) {
  const int n = comm.size(), r = comm.rank();
  Counts sc = m[un(r)], rc;
  for (int p = 0; p < n; ++p) rc.push_back(m[un(p)][un(r)]);
  const Counts sd = gaps ? gapped(sc) : packed(sc), rd = gaps ? packed(rc) : gapped(rc);
  std::vector<int64_t> in(extent(sc, sd), kGap), out(extent(rc, rd), kGap);
  for (int p = 0; p < n; ++p)
    for (size_t j = 0; j < sc[un(p)]; ++j) in[sd[un(p)] + j] = val(r, p, j);
  const CallStats s = runCall(
      comm, async, [&] { comm.allToAllV(in.data(), sc, sd, out.data(), rc, rd, DataType::Int64); },
      [&] { return comm.allToAllVAsync(in.data(), sc, sd, out.data(), rc, rd, DataType::Int64); });
  std::vector<int64_t> want(out.size(), kGap);
  for (int p = 0; p < n; ++p)
    for (size_t j = 0; j < rc[un(p)]; ++j) want[rd[un(p)] + j] = val(p, r, j);
  check(out == want, "alltoallv output");
  // Every other rank's block, and one 8-byte count message each way per pair.
  uint64_t sent = 0, recv = 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    sent += sc[un(p)] * 8 + 8;
    recv += rc[un(p)] * 8 + 8;
  }
  expectBytes(s, sent, recv);
}

void gatherScatterV(Communicator& comm, const Counts& c, int root, bool async) {
  const int n = comm.size(), r = comm.rank();
  const Counts d = root % 2 ? gapped(c) : packed(c);
  const bool isRoot = r == root;
  uint64_t rootBytes = 0;
  for (int p = 0; p < n; ++p)
    if (p != root) rootBytes += c[un(p)] * 8 + 8;  // the block and its count message
  const uint64_t mine = isRoot ? 0 : c[un(r)] * 8 + 8;
  {
    gWhat = "gatherv to " + std::to_string(root);
    std::vector<int64_t> in(std::max<size_t>(c[un(r)], 1)), out(isRoot ? extent(c, d) : 1, kGap);
    for (size_t j = 0; j < c[un(r)]; ++j) in[j] = val(r, 0, j);
    const Counts rc = isRoot ? c : Counts{}, rd = isRoot ? d : Counts{};
    const CallStats s = runCall(
        comm, async,
        [&] { comm.gatherV(in.data(), c[un(r)], out.data(), rc, rd, DataType::Int64, root); },
        [&] {
          return comm.gatherVAsync(in.data(), c[un(r)], out.data(), rc, rd, DataType::Int64, root);
        });
    if (isRoot) {
      std::vector<int64_t> want(out.size(), kGap);
      for (int p = 0; p < n; ++p)
        for (size_t j = 0; j < c[un(p)]; ++j) want[d[un(p)] + j] = val(p, 0, j);
      check(out == want, "gatherv output");
    }
    expectBytes(s, mine, isRoot ? rootBytes : 0);
  }
  {
    gWhat = "scatterv from " + std::to_string(root);
    std::vector<int64_t> in(isRoot ? extent(c, d) : 1, kGap),
        out(std::max<size_t>(c[un(r)], 1), kGap);
    if (isRoot)
      for (int p = 0; p < n; ++p)
        for (size_t j = 0; j < c[un(p)]; ++j) in[d[un(p)] + j] = val(root, p, j);
    const Counts sc = isRoot ? c : Counts{}, sd = isRoot ? d : Counts{};
    const CallStats s = runCall(
        comm, async,
        [&] { comm.scatterV(in.data(), sc, sd, out.data(), c[un(r)], DataType::Int64, root); },
        [&] {
          return comm.scatterVAsync(in.data(), sc, sd, out.data(), c[un(r)], DataType::Int64, root);
        });
    for (size_t j = 0; j < c[un(r)]; ++j) check(out[j] == val(root, r, j), "scatterv element");
    if (c[un(r)] == 0) check(out[0] == kGap, "scatterv wrote to an empty output");
    expectBytes(s, isRoot ? rootBytes : 0, mine);
  }
}

void runGrid(Communicator& comm) {
  const int n = comm.size();
  int k = 0;
  for (const Matrix& m : patterns(n)) {
    for (bool gaps : {false, true}) {
      const bool async = ++k % 2 == 0;
      const Counts& c = m[un(n - 1)];  // one row as a per-rank count vector
      gWhat = "allgatherv pattern " + std::to_string(k);
      allGatherV(comm, c, gaps, async, gaps && comm.rank() % 2 == 1);
      gWhat = "reduce_scatter_v pattern " + std::to_string(k);
      reduceScatterV(comm, c, async);
      gWhat = "alltoallv pattern " + std::to_string(k);
      allToAllV(comm, m, gaps, async);
      gatherScatterV(comm, c, gaps ? n - 1 : 0, async);
    }
  }
}

void runMismatch(Communicator& comm, const std::string& which) {
  const int n = comm.size(), r = comm.rank();
  std::vector<int64_t> in(64, r), out(64, kGap);
  try {
    if (which == "a2av") {
      Counts sc(un(n), 4), rc(un(n), 4);
      if (r == 2) sc[1] = 5;
      comm.allToAllV(in.data(), sc, {}, out.data(), rc, {}, DataType::Int64);
    } else if (which == "gatherv") {
      Counts rc(un(n), 3);
      rc[2] = 6;
      const size_t mine = r == 2 ? 4 : 3;
      comm.gatherV(in.data(), mine, out.data(), r == 0 ? rc : Counts{}, {}, DataType::Int64, 0);
    } else {
      Counts c(un(n), 3);
      if (r == 1) c[2] = 4;  // rank 1 thinks rank 2 contributes 4
      comm.allGatherV(in.data(), c[un(r)], out.data(), c, {}, DataType::Int64);
    }
    // A rank whose own part of the call was consistent may complete it (its data is
    // right); it must learn of the failure at its next call.
    comm.barrier();
  } catch (const Error& e) {
    comm.store()->setString("proc/mismatch/" + std::to_string(r),
                            "kind=" + std::string(toString(e.kind())) + " culprit=" +
                                std::to_string(e.info().culprit) + " message=" + e.info().message);
    return;
  }
  die("the call with disagreeing counts succeeded");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tccl_uneven_worker grid|mismatch [a2av|gatherv|agv]\n";
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(scenario == "mismatch" ? 20000 : 60000);
    Communicator comm = Communicator::fromEnv(opts);
    gRank = comm.rank();
    if (scenario == "grid") {
      runGrid(comm);
    } else if (scenario == "mismatch") {
      runMismatch(comm, argc > 2 ? argv[2] : "a2av");
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    die(std::string("exception: ") + e.what());
  }
  return 0;
}
