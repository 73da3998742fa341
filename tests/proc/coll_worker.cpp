// Worker process of the collective-suite tests (tests/proc/collectives_test.cpp):
// every collective other than all-reduce, over real sockets, with exact expected
// values and exact payload byte counts. argv[1] names the scenario:
//   suite      every collective x element size (every dtype) x count x root x placement
//   barrier    rank r sleeps r*40 ms, enters the barrier; publishes entry/exit times
//   async      a mix of asynchronous collectives issued back to back, then waited
// Exit status 0 means every check of this rank passed; the first failure is printed.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tccl/tccl.hpp"

using namespace tccl;

namespace {

int gRank = -1;
std::string gWhat;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[coll worker rank " << gRank << "] CHECK FAILED: " << gWhat << ": " << msg
            << std::endl;
  std::exit(1);
}

void check(bool ok, const std::string& msg) {
  if (!ok) die(msg);
}

// ---- byte-moving collectives: data is a byte pattern of (owner rank, block, byte) ------

uint8_t pattern(int owner, size_t block, size_t byte) {
  return static_cast<uint8_t>(
      (owner * 131 + static_cast<int>(block) * 17 + static_cast<int>(byte % 251) * 7 + 1) & 0xFF);
}

void fillBlock(uint8_t* p, size_t bytes, int owner, size_t block) {
  for (size_t j = 0; j < bytes; ++j) p[j] = pattern(owner, block, j);
}

void expectBlock(const uint8_t* p, size_t bytes, int owner, size_t block,
                 const std::string& where) {
  for (size_t j = 0; j < bytes; ++j) {
    if (p[j] != pattern(owner, block, j)) {
      die(where + ": byte " + std::to_string(j) + " is " + std::to_string(p[j]) + ", expected " +
          std::to_string(pattern(owner, block, j)) + " (from rank " + std::to_string(owner) +
          " block " + std::to_string(block) + ")");
    }
  }
}

uint64_t sentBytes(Communicator& comm) { return comm.lastCall().traffic.total().payloadSent; }
uint64_t recvBytes(Communicator& comm) { return comm.lastCall().traffic.total().payloadRecv; }

uint64_t sumOverRanks(Communicator& comm, uint64_t v) {
  int64_t x = static_cast<int64_t>(v);
  comm.allreduce(&x, 1, DataType::Int64, ReduceOp::Sum);
  return static_cast<uint64_t>(x);
}

// ---- reducing collectives: typed values with exact results (as the grid worker) ------

double valueOf(int r, size_t i, ReduceOp op) {
  if (op == ReduceOp::Prod) return ((i * 7 + static_cast<size_t>(r)) % 3 == 0) ? 2.0 : 1.0;
  return static_cast<double>(static_cast<int64_t>((i * 31 + static_cast<size_t>(r) * 17) % 23) -
                             11);
}

template <typename T>
T expectedT(int n, size_t i, ReduceOp op) {
  T acc = static_cast<T>(valueOf(0, i, op));
  for (int r = 1; r < n; ++r) {
    T v = static_cast<T>(valueOf(r, i, op));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = static_cast<T>(acc + v);
        break;
      case ReduceOp::Prod:
        acc = static_cast<T>(acc * v);
        break;
      case ReduceOp::Min:
        acc = v < acc ? v : acc;
        break;
      case ReduceOp::Max:
        acc = acc < v ? v : acc;
        break;
      case ReduceOp::BAnd:  // not in this worker's grids
      case ReduceOp::BOr:
      case ReduceOp::BXor:
        std::abort();
    }
  }
  if (op == ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <typename T>
void reducingSuite(Communicator& comm, size_t c, ReduceOp op, const std::vector<int>& roots) {
  const int n = comm.size(), r = comm.rank();
  const size_t N = static_cast<size_t>(n);
  const DataType dt = dataTypeOf<T>();
  const size_t elem = sizeof(T);
  // reduce-scatter: input N*c where element (p*c + i) carries valueOf(r, p*c + i).
  for (bool inPlace : {false, true}) {
    gWhat = "reduce_scatter c=" + std::to_string(c) + " " + std::string(toString(dt)) + " " +
            std::string(toString(op)) + (inPlace ? " in-place" : "");
    std::vector<T> in(N * c + 1), out(c + 1, static_cast<T>(-99));
    for (size_t i = 0; i < N * c; ++i) in[i] = static_cast<T>(valueOf(r, i, op));
    T* dst = inPlace ? in.data() + static_cast<size_t>(r) * c : out.data();
    comm.reduceScatter(in.data(), dst, c, dt, op);
    for (size_t i = 0; i < c; ++i) {
      const T e = expectedT<T>(n, static_cast<size_t>(r) * c + i, op);
      check(dst[i] == e, "index " + std::to_string(i) + " got " +
                             std::to_string(static_cast<double>(dst[i])) + " expected " +
                             std::to_string(static_cast<double>(e)));
    }
    check(sentBytes(comm) == (N - 1) * c * elem, "payload sent " + std::to_string(sentBytes(comm)));
    check(recvBytes(comm) == (N - 1) * c * elem,
          "payload received " + std::to_string(recvBytes(comm)));
  }
  // reduce to each root.
  for (int root : roots) {
    gWhat = "reduce root=" + std::to_string(root) + " c=" + std::to_string(c) + " " +
            std::string(toString(dt)) + " " + std::string(toString(op));
    std::vector<T> in(c + 1), out(c + 1, static_cast<T>(-99));
    for (size_t i = 0; i < c; ++i) in[i] = static_cast<T>(valueOf(r, i, op));
    comm.reduce(in.data(), out.data(), c, dt, op, root);
    if (r == root) {
      for (size_t i = 0; i < c; ++i)
        check(out[i] == expectedT<T>(n, i, op), "index " + std::to_string(i));
    } else {
      check(out[0] == static_cast<T>(-99), "a non-root's output was written");
    }
    check(sentBytes(comm) == (r == root ? 0 : c * elem),
          "payload sent " + std::to_string(sentBytes(comm)));
    check(sumOverRanks(comm, recvBytes(comm)) == (N - 1) * c * elem, "total received");
  }
}

void byteSuite(Communicator& comm, DataType dt, size_t c, const std::vector<int>& roots) {
  const int n = comm.size(), r = comm.rank();
  const size_t N = static_cast<size_t>(n), R = static_cast<size_t>(r);
  const size_t elem = dataTypeSize(dt);
  const size_t B = c * elem;  // bytes per block
  const std::string tag = " c=" + std::to_string(c) + " " + std::string(toString(dt));
  // all-gather
  for (bool inPlace : {false, true}) {
    gWhat = "allgather" + tag + (inPlace ? " in-place" : "");
    std::vector<uint8_t> in(B + 1), out(N * B + 1, 0xEE);
    uint8_t* src = inPlace ? out.data() + R * B : in.data();
    fillBlock(src, B, r, 0);
    comm.allGather(src, out.data(), c, dt);
    for (size_t p = 0; p < N; ++p)
      expectBlock(out.data() + p * B, B, static_cast<int>(p), 0, "block " + std::to_string(p));
    check(sentBytes(comm) == (N - 1) * B, "payload sent");
    check(recvBytes(comm) == (N - 1) * B, "payload received");
  }
  // broadcast, both algorithms, every root, in and out of place
  for (Algorithm algo : {Algorithm::Tree, Algorithm::Ring, Algorithm::Auto}) {
    for (int root : roots) {
      for (bool inPlace : {false, true}) {
        gWhat = "broadcast " + std::string(toString(algo)) + " root=" + std::to_string(root) + tag +
                (inPlace ? " in-place" : "");
        std::vector<uint8_t> in(B + 1), out(B + 1, 0xEE);
        if (r == root) fillBlock(inPlace ? out.data() : in.data(), B, root, 7);
        comm.broadcast(inPlace ? out.data() : in.data(), out.data(), c, dt, root,
                       {algo, std::nullopt});
        expectBlock(out.data(), B, root, 7, "result");
        const uint64_t sent = sentBytes(comm), received = recvBytes(comm);
        check(received == (r == root ? 0 : B), "payload received " + std::to_string(received));
        check(sumOverRanks(comm, sent) == (N - 1) * B, "total sent");
        if (algo == Algorithm::Ring) {  // chain: everyone but the last in the chain forwards once
          const bool last = static_cast<int>((R + N - static_cast<size_t>(root)) % N) == n - 1;
          check(sent == (last || n == 1 ? 0 : B), "chain payload sent " + std::to_string(sent));
        }
      }
    }
  }
  // all-to-all
  {
    gWhat = "alltoall" + tag;
    std::vector<uint8_t> in(N * B + 1), out(N * B + 1, 0xEE);
    for (size_t p = 0; p < N; ++p) fillBlock(in.data() + p * B, B, r, p);  // block p goes to rank p
    comm.allToAll(in.data(), out.data(), c, dt);
    for (size_t q = 0; q < N; ++q)
      expectBlock(out.data() + q * B, B, static_cast<int>(q), R, "from rank " + std::to_string(q));
    check(sentBytes(comm) == (N - 1) * B, "payload sent");
  }
  // gather and scatter
  for (int root : roots) {
    for (bool inPlace : {false, true}) {
      gWhat = "gather root=" + std::to_string(root) + tag + (inPlace ? " in-place" : "");
      std::vector<uint8_t> in(B + 1), out(N * B + 1, 0xEE);
      uint8_t* src = inPlace && r == root ? out.data() + R * B : in.data();
      fillBlock(src, B, r, 3);
      comm.gather(src, out.data(), c, dt, root);
      if (r == root) {
        for (size_t p = 0; p < N; ++p)
          expectBlock(out.data() + p * B, B, static_cast<int>(p), 3, "block");
        check(recvBytes(comm) == (N - 1) * B, "root received");
      } else {
        check(sentBytes(comm) == B, "non-root sent");
      }
      gWhat = "scatter root=" + std::to_string(root) + tag + (inPlace ? " in-place" : "");
      std::vector<uint8_t> sin(N * B + 1), sout(B + 1, 0xEE);
      if (r == root) {
        for (size_t p = 0; p < N; ++p) fillBlock(sin.data() + p * B, B, root, p);
      }
      uint8_t* dst = inPlace && r == root ? sin.data() + R * B : sout.data();
      comm.scatter(sin.data(), dst, c, dt, root);
      expectBlock(dst, B, root, R, "my block");
      check(sentBytes(comm) == (r == root ? (N - 1) * B : 0), "scatter sent");
    }
  }
  // send / recv around the ring (even ranks send first, odd ranks receive first)
  if (n > 1) {
    gWhat = "send/recv" + tag;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<uint8_t> out(B + 1), in(B + 1, 0xEE);
    fillBlock(out.data(), B, r, 11);
    if (r % 2 == 0) {
      comm.send(out.data(), c, dt, next);
      comm.recv(in.data(), c, dt, prev);
    } else {
      comm.recv(in.data(), c, dt, prev);
      comm.send(out.data(), c, dt, next);
    }
    expectBlock(in.data(), B, prev, 11, "from prev");
  }
}

std::vector<int> rootsFor(int n) {
  std::set<int> roots = {0, n - 1, n / 2};
  return {roots.begin(), roots.end()};
}

void runSuite(Communicator& comm, const std::vector<size_t>& counts) {
  const int n = comm.size();
  const std::vector<int> roots = rootsFor(n);
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                             DataType::Int64};
  for (size_t c : counts) {
    for (DataType dt : dtypes) byteSuite(comm, dt, c, roots);
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      reducingSuite<float>(comm, c, op, roots);
      reducingSuite<double>(comm, c, op, roots);
      reducingSuite<int32_t>(comm, c, op, roots);
      reducingSuite<int64_t>(comm, c, op, roots);
    }
  }
  // Every dtype's element size through the byte movers (and their names on the wire).
  for (int t = 0; isValid(static_cast<DataType>(t)); ++t)
    byteSuite(comm, static_cast<DataType>(t), 5, roots);
}

double monoSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process on the machine
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void runAsync(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const size_t N = static_cast<size_t>(n), c = 1000;
  gWhat = "async mix";
  std::vector<int64_t> ar(c, r + 1), rsIn(N * c, r + 1), rsOut(c), agOut(N * c),
      bc(c, r == 0 ? 42 : 0);
  std::vector<WorkPtr> w;
  w.push_back(comm.allreduceAsync(std::span<int64_t>(ar)));
  w.push_back(
      comm.reduceScatterAsync(rsIn.data(), rsOut.data(), c, DataType::Int64, ReduceOp::Sum));
  w.push_back(
      comm.allGatherAsync(ar.data(), agOut.data(), c, DataType::Int64));  // reads ar after #0
  w.push_back(comm.broadcastAsync(bc.data(), bc.data(), c, DataType::Int64, 0));
  w.push_back(comm.barrierAsync());
  for (auto& x : w) x->wait();
  const int64_t sum = static_cast<int64_t>(n) * (n + 1) / 2;
  check(ar[999] == sum, "allreduce");
  check(rsOut[0] == sum, "reduce_scatter");
  check(agOut[N * c - 1] == sum, "allgather sees the all-reduced values (issue order)");
  check(bc[500] == 42, "broadcast");
  for (size_t i = 0; i < w.size(); ++i)
    check(w[i]->seq() == static_cast<int64_t>(i), "sequence numbers");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tccl_coll_worker suite|barrier|async [counts]\n";
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(60000);
    Communicator comm = Communicator::fromEnv(opts);
    gRank = comm.rank();
    if (scenario == "suite") {
      std::vector<size_t> counts;
      std::stringstream ss(argc > 2 ? argv[2] : "0,1,N-1,N,N+1,4099");
      std::string item;
      const size_t n = static_cast<size_t>(comm.size());
      while (std::getline(ss, item, ',')) {
        counts.push_back(item == "N-1"   ? n - 1
                         : item == "N"   ? n
                         : item == "N+1" ? n + 1
                                         : std::stoull(item));
      }
      runSuite(comm, counts);
    } else if (scenario == "barrier") {
      std::this_thread::sleep_for(std::chrono::milliseconds(40 * comm.rank()));
      const double entered = monoSeconds();
      comm.barrier();
      const double left = monoSeconds();
      std::ostringstream os;
      os.precision(17);
      os << entered << " " << left;
      comm.store()->setString("coll/barrier/" + std::to_string(comm.rank()), os.str());
    } else if (scenario == "async") {
      runAsync(comm);
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
    comm.store()->setString("coll/" + scenario + "/done/" + std::to_string(comm.rank()), "ok");
  } catch (const Error& e) {
    std::cerr << "[coll worker rank " << gRank << "] " << gWhat << ": " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
