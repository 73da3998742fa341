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
//   hier       argv[2] lists each rank's fake host ("0,0,1,1,..."): this rank sets
//              TCCL_HOST_ID accordingly, then runs every dtype x op x placement of the
//              hierarchical all-reduce over the counts of argv[3], checking exact results
//              and the payload bytes sent to ranks on its own host and on others against
//              hierBytesSent; then one Auto call of argv[4] float32 elements that must
//              pick "hier" (the test makes the inter-host link slow).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../common/expected_bytes.hpp"
#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/chunking.hpp"
#include "base/config.hpp"
#include "core/topology.hpp"
#include "tccl/tccl.hpp"
#include "transport/wire.hpp"

using namespace tccl;

namespace {

int gRank = -1;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[worker rank " << gRank << "] CHECK FAILED: " << msg << std::endl;
  std::exit(1);
}

// Element i of rank r. Prod uses 1s and 2s so that products stay exact; the others
// use small signed integers so that every op is exact in every dtype: in uint8 the
// negative ones wrap (to 245..255), and the expected fold wraps the same way; in
// float16 and bfloat16 every partial sum, in any order, stays within 11 x 8 = 88, an
// exactly representable integer, so the ring's order of additions cannot matter, and
// products of 1s and 2s are powers of two.
double valueOf(int r, size_t i, ReduceOp op) {
  if (op == ReduceOp::Prod) return ((i * 7 + static_cast<size_t>(r)) % 3 == 0) ? 2.0 : 1.0;
  return static_cast<double>(static_cast<int64_t>((i * 31 + static_cast<size_t>(r) * 17) % 23) -
                             11);
}

constexpr bool isHalf(DataType t) { return t == DataType::Float16 || t == DataType::BFloat16; }

// The value v as a T: integers wrap modulo 2^bits (via int64, no undefined behaviour
// for a negative value in an unsigned type), 16-bit floats round to nearest even.
template <typename T>
T toT(double v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<int64_t>(v));
  else if constexpr (isHalf(dataTypeOf<T>()))
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename T>
void fillT(T* p, size_t n, int r, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) p[i] = toT<T>(valueOf(r, i, op));
}

// The library's arithmetic on T: integers wrap (C++20 narrowing is modular), 16-bit
// floats compute in float and round each result.
template <typename T>
struct Arith {
  static T add(T a, T b) { return static_cast<T>(a + b); }
  static T mul(T a, T b) { return static_cast<T>(a * b); }
  static bool less(T a, T b) { return a < b; }
  static T div(T a, int n) { return static_cast<T>(a / n); }  // integers: toward zero
  static bool same(T a, T b) { return a == b; }
  static std::string show(T a) {
    std::ostringstream os;
    os << +a;
    return os.str();
  }
};

template <typename H>
struct HalfArith {
  static float f(H a) { return static_cast<float>(a); }
  static H add(H a, H b) { return H(f(a) + f(b)); }
  static H mul(H a, H b) { return H(f(a) * f(b)); }
  static bool less(H a, H b) { return f(a) < f(b); }
  static H div(H a, int n) { return H(f(a) / static_cast<float>(n)); }
  static bool same(H a, H b) { return a.bits == b.bits; }  // bit for bit, -0 and NaN too
  static std::string show(H a) {
    std::ostringstream os;
    os << f(a) << " (bits 0x" << std::hex << a.bits << ")";
    return os.str();
  }
};
template <>
struct Arith<float16> : HalfArith<float16> {};
template <>
struct Arith<bfloat16> : HalfArith<bfloat16> {};

// The expected result, folding rank 0..n-1 in T with the library's documented
// semantics (Avg: sum, then one division by n; integers truncate).
template <typename T>
T expectedT(int n, size_t i, ReduceOp op) {
  using A = Arith<T>;
  T acc = toT<T>(valueOf(0, i, op));
  for (int r = 1; r < n; ++r) {
    T v = toT<T>(valueOf(r, i, op));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = A::add(acc, v);
        break;
      case ReduceOp::Prod:
        acc = A::mul(acc, v);
        break;
      case ReduceOp::Min:
        acc = A::less(v, acc) ? v : acc;
        break;
      case ReduceOp::Max:
        acc = A::less(acc, v) ? v : acc;
        break;
      case ReduceOp::BAnd:  // not in this worker's grids
      case ReduceOp::BOr:
      case ReduceOp::BXor:
        die("expectedT: bitwise ops are not covered here");
    }
  }
  if (op == ReduceOp::Avg) acc = A::div(acc, n);
  return acc;
}

template <typename T>
void checkT(const T* p, size_t count, int n, ReduceOp op, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    T e = expectedT<T>(n, i, op);
    if (!Arith<T>::same(p[i], e)) {
      std::ostringstream os;
      os << what << ": index " << i << " expected " << Arith<T>::show(e) << " got "
         << Arith<T>::show(p[i]);
      die(os.str());
    }
  }
}

// Calls f(T{}) with T the C++ element type of t.
template <typename F>
void withType(DataType t, F f) {
  switch (t) {
    case DataType::Float32:
      return f(float{});
    case DataType::Float64:
      return f(double{});
    case DataType::Int32:
      return f(int32_t{});
    case DataType::Int64:
      return f(int64_t{});
    case DataType::Float16:
      return f(float16{});
    case DataType::BFloat16:
      return f(bfloat16{});
    case DataType::Int8:
      return f(int8_t{});
    case DataType::UInt8:
      return f(uint8_t{});
  }
}

void fillAny(void* p, size_t n, DataType t, int r, ReduceOp op) {
  withType(t, [&](auto tag) { fillT(static_cast<decltype(tag)*>(p), n, r, op); });
}

void checkAny(const void* p, size_t count, DataType t, int n, ReduceOp op,
              const std::string& what) {
  withType(t, [&](auto tag) { checkT(static_cast<const decltype(tag)*>(p), count, n, op, what); });
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
  const ErrorInfo& i = e.info();
  os << "error kind=" << toString(e.kind()) << " peer=" << e.peer() << " seconds=" << seconds
     << " phase=" << (i.phase.empty() ? "-" : i.phase) << " step=" << i.step << " steps=" << i.steps
     << " seq=" << i.seq << " culprit=" << i.culprit << " bytes_moved=" << i.bytesMoved
     << " bytes_expected=" << i.bytesExpected << " what=" << e.what();
  return os.str();
}

// The hosts of this job as the communicator sees them (hierarchical bytes).
algo::HostLayout gHosts;

// The payload bytes each algorithm's closed form says rank r sends (docs/algorithms.md).
uint64_t closedFormBytesSent(Algorithm a, size_t count, size_t elem, int n, int r) {
  switch (a) {
    // Every one from the docs' own formulas (tests/common/expected_bytes.hpp), not from
    // src/algorithms; hier takes only the ranks' hosts from the topology.
    case Algorithm::Hierarchical:
      return testing::hierSentBytes(gHosts.hostOf, count, elem, r).total();
    case Algorithm::Ring:
      return testing::ringSentBytes(count, elem, n, r);
    case Algorithm::Naive:
      return testing::naiveSentBytes(count, elem, n);
    case Algorithm::Tree:
      return testing::treeSentBytes(count, elem, n, r);
    case Algorithm::HalvingDoubling:
      return testing::hdSentBytes(count, elem, n, r);
    case Algorithm::RecursiveDoubling:
      return testing::rdSentBytes(count, elem, n, r);
    default:
      die(std::string("no closed form for ") + std::string(toString(a)));
  }
}

void runGrid(Communicator& comm, const std::vector<size_t>& counts) {
  const int n = comm.size();
  const int r = comm.rank();
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                             DataType::Int64,   DataType::Float16, DataType::BFloat16,
                             DataType::Int8,    DataType::UInt8};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                          ReduceOp::Avg};
  // Every all-reduce algorithm this build implements.
  const std::vector<Algorithm>& algos = algo::allreduceAlgorithms();
  gHosts = Topology::read(comm.store(), "default", n, std::chrono::milliseconds(30000));
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
            const uint64_t expectSent = closedFormBytesSent(algo, count, elem, n, r);
            if (tot.payloadSent != expectSent) {
              die(what.str() + ": payload bytes sent " + std::to_string(tot.payloadSent) +
                  " != closed form " + std::to_string(expectSent));
            }
            // Every rank receives what the others send: the ring receives every chunk
            // but r (reduce-scatter) and every chunk but r+1 (all-gather).
            uint64_t expectRecv = expectSent;
            if (algo == Algorithm::Ring) expectRecv = testing::ringRecvBytes(count, elem, n, r);
            if ((algo == Algorithm::Ring || algo == Algorithm::Naive) &&
                tot.payloadRecv != expectRecv) {
              die(what.str() + ": payload bytes received " + std::to_string(tot.payloadRecv) +
                  " != " + std::to_string(expectRecv));
            }
            // Wire = payload + one 24-byte header per message (+ the handshake on the
            // call that opened a connection: one 112-byte message each way, two with a
            // key, on each of the TCCL_NSOCKS connections; see docs/protocol.md).
            const uint64_t overhead = tot.wireSent - tot.payloadSent;
            const uint64_t headers = 24 * tot.messagesSent;
            const uint64_t sockets = static_cast<uint64_t>(config::nsocks());
            if (overhead < headers || (overhead - headers) % wire::kHelloSize != 0 ||
                (overhead - headers) / wire::kHelloSize > 2 * sockets * cs.traffic.perPeer.size()) {
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

std::vector<int> parseInts(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

void runHier(Communicator& comm, const std::vector<int>& hostOf, const std::vector<size_t>& counts,
             size_t autoCount) {
  const int n = comm.size();
  const int r = comm.rank();
  const algo::HostLayout hosts =
      Topology::read(comm.store(), "default", n, std::chrono::milliseconds(30000));
  std::vector<std::string> keys;
  for (int h : hostOf) keys.push_back("fakehost" + std::to_string(h));
  if (hosts.hostOf != algo::HostLayout::fromKeys(keys).hostOf)
    die("hier: the store's hosts differ");
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                             DataType::Int64,   DataType::Float16, DataType::BFloat16,
                             DataType::Int8,    DataType::UInt8};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                          ReduceOp::Avg};
  uint64_t intraTotal = 0, interTotal = 0;
  for (size_t count : counts) {
    for (DataType t : dtypes) {
      const size_t elem = dataTypeSize(t);
      std::vector<uint8_t> in(count * elem + 1), out(count * elem + 1);
      for (ReduceOp op : ops) {
        for (bool inPlace : {false, true}) {
          std::ostringstream what;
          what << "hier " << hosts.describe() << " count " << count << " " << toString(t) << " "
               << toString(op) << (inPlace ? " in-place" : " out-of-place");
          fillAny(in.data(), count, t, r, op);
          void* dst = inPlace ? in.data() : out.data();
          if (!inPlace) std::memset(out.data(), 0xAB, out.size());
          comm.allreduce(in.data(), dst, count, t, op, {Algorithm::Hierarchical, std::nullopt});
          checkAny(dst, count, t, n, op, what.str());
          const CallStats& cs = comm.lastCall();
          if (cs.algorithm != "hier") die(what.str() + ": ran " + cs.algorithm);
          algo::HostBytes got;
          for (const auto& [peer, c] : cs.traffic.perPeer) {
            const bool same =
                hosts.hostOf[static_cast<size_t>(peer)] == hosts.hostOf[static_cast<size_t>(r)];
            (same ? got.intra : got.inter) += c.payloadSent;
          }
          const auto want = testing::hierSentBytes(hosts.hostOf, count, elem, r);
          if (got.intra != want.intra || got.inter != want.inter) {
            die(what.str() + ": bytes to this host's ranks " + std::to_string(got.intra) +
                ", to other hosts " + std::to_string(got.inter) + "; closed forms " +
                std::to_string(want.intra) + " and " + std::to_string(want.inter));
          }
          intraTotal += got.intra;
          interTotal += got.inter;
        }
      }
    }
  }
  // Auto over these hosts (the test sets a slow inter-host link): the cost model's pick.
  std::vector<float> v(autoCount, static_cast<float>(r));
  comm.allreduce(std::span<float>(v));
  const float want = static_cast<float>(n * (n - 1) / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != want) die("hier auto: index " + std::to_string(i) + " = " + std::to_string(v[i]));
  }
  std::ostringstream rec;
  rec << "ok intra=" << intraTotal << " inter=" << interTotal
      << " auto=" << comm.lastCall().algorithm;
  publish(comm, "hier", rec.str());
}

// A job under a connection flood (listener_test.cpp): exact all-reduces every 20 ms
// until the test says "flood/done", then this rank's CPU seconds, peak RSS and calls.
void runFloodTarget(Communicator& comm) {
  const int r = comm.rank();
  const int n = comm.size();
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = std::chrono::steady_clock::now();
  int calls = 0;
  for (;;) {
    // Every rank decides from the same store read, so all run the same number of calls.
    std::vector<int64_t> go = {comm.store()->check({"flood/done"}) ? 1 : 0};
    comm.allreduce(std::span<int64_t>(go), ReduceOp::Max);
    if (go[0] != 0) break;
    const size_t count = 1000 + static_cast<size_t>(calls % 7);
    std::vector<int64_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<int64_t>(i) * (r + 1) + calls;
    comm.allreduce(std::span<int64_t>(v));
    const int64_t ranks = int64_t{n} * (n + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      if (v[i] != static_cast<int64_t>(i) * ranks + int64_t{n} * calls)
        die("flood: call " + std::to_string(calls) + " index " + std::to_string(i));
    }
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  const double cpu =
      sec(after.ru_utime) + sec(after.ru_stime) - sec(before.ru_utime) - sec(before.ru_stime);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream rec;
  rec << "ok calls=" << calls << " cpu_s=" << cpu << " wall_s=" << wall
      << " maxrss_kib=" << after.ru_maxrss;
  publish(comm, "flood-target", rec.str());
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
  if (scenario == "late" && r == culprit) {
    // Joins the collective late: the others sit in it meanwhile (listener_test.cpp).
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
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
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != static_cast<float>(comm.size()))
        die(scenario + ": wrong sum at " + std::to_string(i));
    }
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
  if (scenario == "hier") {
    // Fake hosts: this rank's host from the map in argv[2], before the communicator
    // publishes it.
    const std::vector<int> hostOf = parseInts(argc > 2 ? argv[2] : "");
    const char* rank = std::getenv("TCCL_RANK");
    const size_t r = rank ? static_cast<size_t>(std::atoi(rank)) : 0;
    if (r >= hostOf.size()) die("hier: no host for rank " + std::to_string(r));
    ::setenv("TCCL_HOST_ID", ("fakehost" + std::to_string(hostOf[r])).c_str(), 1);
  }
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(30000);
    Communicator comm = Communicator::fromEnv(opts);
    gRank = comm.rank();
    if (scenario == "grid") {
      runGrid(comm, parseCounts(argc > 2 ? argv[2] : "0,1,N-1,N,N+1,100003", comm.size()));
      publish(comm, scenario, "ok");
    } else if (scenario == "hier") {
      runHier(comm, parseInts(argv[2]), parseCounts(argc > 3 ? argv[3] : "1", comm.size()),
              argc > 4 ? std::stoull(argv[4]) : 1000);
    } else if (scenario == "wait-go") {
      comm.store()->wait({"go"}, std::chrono::milliseconds(30000));
      runGrid(comm, parseCounts("0,1,N+1,1000", comm.size()));
      publish(comm, scenario, "ok");
    } else if (scenario == "flood-target") {
      runFloodTarget(comm);
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
      if (tot.payloadSent != testing::ringSentBytes(count, 4, comm.size(), comm.rank()))
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
