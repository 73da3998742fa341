// The worker process of the multi-process tests (tests/proc/proc_test.cpp spawns N
// of these). It builds a Communicator from the environment, runs one scenario, and
// publishes a record "proc/<scenario>/<rank>" through the store: "ok" or the error's
// kind, peer and timing. Exit status 0 means every check of this rank passed.
//
// Scenarios (argv[1]):
//   grid       every dtype x op x algorithm x placement over the counts of argv[2..]
//              (a comma-separated list; "N-1", "N", "N+1" are relative to the world),
//              exact results and exact payload byte counts against the closed forms.
//   large      one in-place ring sum of argv[2] float32 elements; checks every element
//              and that peak RSS stays within 1.25 x V + 64 MiB.
//   die        rank argv[2] exits abruptly before its first collective; the others run
//              a ring all-reduce and must fail with a tccl::Error.
//   die-mid    the same, after one good all-reduce (connections are up).
//   sleep      rank argv[2] sleeps argv[3] ms before its collective (silent peer).
//   mismatch   rank argv[2] calls with a different count.
//   wait-go    waits for the store key "go" (the test plays a stranger first), then
//              runs a grid over a small count.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/chunking.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;

namespace {

int gRank = -1;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[worker rank " << gRank << "] CHECK FAILED: " << msg << std::endl;
  std::exit(1);
}

// Element i of rank r. Prod uses 1s and 2s so that products stay exact; the others
// use small signed integers so that every op is exact in every dtype.
double valueOf(int r, size_t i, ReduceOp op) {
  if (op == ReduceOp::Prod) return ((i * 7 + static_cast<size_t>(r)) % 3 == 0) ? 2.0 : 1.0;
  return static_cast<double>(static_cast<int64_t>((i * 31 + static_cast<size_t>(r) * 17) % 23) -
                             11);
}

template <typename T>
void fillT(T* p, size_t n, int r, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(valueOf(r, i, op));
}

// The expected result, folding rank 0..n-1 in T with the library's documented
// semantics (Avg: sum, then one division by n; integers truncate).
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
    }
  }
  if (op == ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <typename T>
void checkT(const T* p, size_t count, int n, ReduceOp op, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    T e = expectedT<T>(n, i, op);
    if (!(p[i] == e)) {
      std::ostringstream os;
      os << what << ": index " << i << " expected " << +e << " got " << +p[i];
      die(os.str());
    }
  }
}

void fillAny(void* p, size_t n, DataType t, int r, ReduceOp op) {
  switch (t) {
    case DataType::Float32:
      fillT(static_cast<float*>(p), n, r, op);
      break;
    case DataType::Float64:
      fillT(static_cast<double*>(p), n, r, op);
      break;
    case DataType::Int32:
      fillT(static_cast<int32_t*>(p), n, r, op);
      break;
    case DataType::Int64:
      fillT(static_cast<int64_t*>(p), n, r, op);
      break;
  }
}

void checkAny(const void* p, size_t count, DataType t, int n, ReduceOp op,
              const std::string& what) {
  switch (t) {
    case DataType::Float32:
      checkT(static_cast<const float*>(p), count, n, op, what);
      break;
    case DataType::Float64:
      checkT(static_cast<const double*>(p), count, n, op, what);
      break;
    case DataType::Int32:
      checkT(static_cast<const int32_t*>(p), count, n, op, what);
      break;
    case DataType::Int64:
      checkT(static_cast<const int64_t*>(p), count, n, op, what);
      break;
  }
}

std::vector<size_t> parseCounts(const std::string& s, int n) {
  std::vector<size_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "N-1")
      out.push_back(static_cast<size_t>(n - 1));
    else if (item == "N")
      out.push_back(static_cast<size_t>(n));
    else if (item == "N+1")
      out.push_back(static_cast<size_t>(n + 1));
    else
      out.push_back(std::stoull(item));
  }
  return out;
}

void publish(Communicator& comm, const std::string& scenario, const std::string& record) {
  comm.store()->setString("proc/" + scenario + "/" + std::to_string(comm.rank()), record);
}

std::string describe(const Error& e, double seconds) {
  std::ostringstream os;
  os << "error kind=" << toString(e.kind()) << " peer=" << e.peer() << " seconds=" << seconds
     << " phase=" << e.info().phase << " what=" << e.what();
  return os.str();
}

void runGrid(Communicator& comm, const std::vector<size_t>& counts) {
  const int n = comm.size();
  const int r = comm.rank();
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                             DataType::Int64};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                          ReduceOp::Avg};
  const Algorithm algos[] = {Algorithm::Ring, Algorithm::Naive};
  int calls = 0;
  for (size_t count : counts) {
    for (DataType t : dtypes) {
      const size_t elem = dataTypeSize(t);
      std::vector<uint8_t> in(count * elem + 1), out(count * elem + 1);
      for (ReduceOp op : ops) {
        for (Algorithm algo : algos) {
          for (bool inPlace : {false, true}) {
            std::ostringstream what;
            what << "count " << count << " " << toString(t) << " " << toString(op) << " "
                 << toString(algo) << (inPlace ? " in-place" : " out-of-place");
            fillAny(in.data(), count, t, r, op);
            void* dst = inPlace ? in.data() : out.data();
            if (!inPlace) std::memset(out.data(), 0xAB, out.size());
            AllreduceOptions ao;
            ao.algorithm = algo;
            comm.allreduce(in.data(), dst, count, t, op, ao);
            ++calls;
            checkAny(dst, count, t, n, op, what.str());
            if (!inPlace) {
              // The input is untouched by an out-of-place call.
              std::vector<uint8_t> ref(count * elem);
              fillAny(ref.data(), count, t, r, op);
              if (!ref.empty() && std::memcmp(ref.data(), in.data(), ref.size()) != 0) {
                die(what.str() + ": input was modified");
              }
            }
            const CallStats& cs = comm.lastCall();
            if (cs.algorithm != toString(algo) && n > 1) die(what.str() + ": ran " + cs.algorithm);
            const PeerCounters tot = cs.traffic.total();
            const uint64_t expectSent = algo == Algorithm::Ring
                                            ? algo::ringBytesSent(count, elem, n, r)
                                            : algo::naiveBytesSent(count, elem, n);
            if (tot.payloadSent != expectSent) {
              die(what.str() + ": payload bytes sent " + std::to_string(tot.payloadSent) +
                  " != closed form " + std::to_string(expectSent));
            }
            // Every rank receives what the others send: the ring receives every chunk
            // but r (reduce-scatter) and every chunk but r+1 (all-gather).
            uint64_t expectRecv = expectSent;
            if (algo == Algorithm::Ring && n > 1) {
              expectRecv = (2 * count - algo::chunkRange(count, n, r).count -
                            algo::chunkRange(count, n, algo::ring::ownedChunk(r, n)).count) *
                           elem;
            }
            if (tot.payloadRecv != expectRecv) {
              die(what.str() + ": payload bytes received " + std::to_string(tot.payloadRecv) +
                  " != " + std::to_string(expectRecv));
            }
            // Wire = payload + one 24-byte header per message (+ 40-byte hellos on
            // the call that opened a connection).
            const uint64_t overhead = tot.wireSent - tot.payloadSent;
            const uint64_t headers = 24 * tot.messagesSent;
            if (overhead < headers || (overhead - headers) % 40 != 0 ||
                (overhead - headers) / 40 > cs.traffic.perPeer.size()) {
              die(what.str() + ": wire overhead " + std::to_string(overhead) +
                  " is not headers + hellos");
            }
          }
        }
      }
    }
  }
  std::cerr << "[worker rank " << r << "] grid ok: " << calls << " all-reduces" << std::endl;
}

int runFailure(Communicator& comm, const std::string& scenario, int culprit, int sleepMs) {
  const int r = comm.rank();
  size_t count = 4096;
  if (scenario == "die" && r == culprit) _exit(3);
  if (scenario == "die-mid") {
    // One good all-reduce connects the ring; then the culprit dies between calls.
    std::vector<float> warm(count, 1.0f);
    comm.allreduce(warm.data(), count, DataType::Float32, ReduceOp::Sum,
                   {Algorithm::Ring, std::nullopt});
    if (r == culprit) _exit(3);
  }
  if (scenario == "sleep" && r == culprit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    return 0;
  }
  if (scenario == "mismatch" && r == culprit) count = 4097;
  std::vector<float> buf(count, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  try {
    comm.allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum,
                   {Algorithm::Ring, std::nullopt});
    publish(comm, scenario, "ok");
  } catch (const Error& e) {
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    publish(comm, scenario, describe(e, sec));
    // A second call must fail fast with Aborted, naming the first error.
    try {
      comm.allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum);
      die("a call after an error succeeded");
    } catch (const AbortedError& a) {
      if (std::string(a.what()).find("earlier error") == std::string::npos)
        die("Aborted without the cause");
    }
  }
  // Stay up (listener open) until every survivor has reported, so that one rank's
  // exit does not become another rank's failure.
  std::vector<std::string> keys;
  for (int p = 0; p < comm.size(); ++p) {
    if (p != culprit) keys.push_back("proc/" + scenario + "/" + std::to_string(p));
  }
  try {
    comm.store()->wait(keys, std::chrono::milliseconds(20000));
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tccl_proc_worker <scenario> [args]\n";
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(30000);
    Communicator comm = Communicator::fromEnv(opts);
    gRank = comm.rank();
    if (scenario == "grid") {
      runGrid(comm, parseCounts(argc > 2 ? argv[2] : "0,1,N-1,N,N+1,100003", comm.size()));
      publish(comm, scenario, "ok");
    } else if (scenario == "wait-go") {
      comm.store()->wait({"go"}, std::chrono::milliseconds(30000));
      runGrid(comm, parseCounts("0,1,N+1,1000", comm.size()));
      publish(comm, scenario, "ok");
    } else if (scenario == "large") {
      const size_t count = std::stoull(argv[2]);
      std::vector<float> buf(count);
      const float mine = static_cast<float>(comm.rank() + 1);
      std::fill(buf.begin(), buf.end(), mine);
      comm.allreduce(std::span<float>(buf), ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
      const float expect = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
      for (size_t i = 0; i < count; ++i) {
        if (buf[i] != expect)
          die("large: index " + std::to_string(i) + " = " + std::to_string(buf[i]));
      }
      const PeerCounters tot = comm.lastCall().traffic.total();
      if (tot.payloadSent != algo::ringBytesSent(count, 4, comm.size(), comm.rank()))
        die("large: byte count");
      rusage ru{};
      getrusage(RUSAGE_SELF, &ru);
      const double rssBytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
      const double limit = 1.25 * static_cast<double>(count * 4) + 64.0 * 1024 * 1024;
      std::cerr << "[worker rank " << gRank << "] large: peak RSS " << rssBytes / 1048576
                << " MiB for V = " << count * 4 / 1048576.0 << " MiB" << std::endl;
      if (rssBytes > limit)
        die("large: peak RSS " + std::to_string(rssBytes) + " over " + std::to_string(limit));
      publish(comm, scenario, "ok rss_mib=" + std::to_string(rssBytes / 1048576));
    } else {
      int culprit = argc > 2 ? std::atoi(argv[2]) : 0;
      int sleepMs = argc > 3 ? std::atoi(argv[3]) : 0;
      return runFailure(comm, scenario, culprit, sleepMs);
    }
  } catch (const Error& e) {
    std::cerr << "[worker rank " << gRank << "] " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
