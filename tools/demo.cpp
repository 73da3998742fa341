// tccl demo: the lab's report. Spawns N real worker processes that rendezvous through
// a TcpStore hosted here, run the ring and the naive all-reduce on vectors whose values
// depend on the rank and the index (tools/pattern.hpp), check every element bit for bit
// against a closed form, hand their verdicts back through the store (not through a
// collective), and report the bytes each rank put on the wire (as counted by the
// transport) against the 2(N-1)/N x V bound.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "algorithms/chunking.hpp"
#include "cli.hpp"
#include "core/process.hpp"
#include "pattern.hpp"
#include "subcommands.hpp"

namespace tccl::cli {
namespace {

const std::vector<std::string> kValueOptions = {
    "world", "size", "dtype", "op", "iters", "timeout-ms", "segment-bytes", "inject-error"};
const std::vector<std::string> kFlags = {"json"};

struct DemoConfig {
  int world = 8;
  int64_t size = 80000;
  DataType dtype = DataType::Float64;
  ReduceOp op = ReduceOp::Sum;
  int iters = 5;
  int64_t timeoutMs = 60000;
  int64_t segmentBytes = 0;
  int injectRank = -1;  // testing hook: this rank corrupts one element of its result
  bool json = false;
};

// The largest vector: 2^40 elements (8 TiB of doubles) keeps count x element size and
// every byte count derived from it far from overflow; the memory check decides the rest.
constexpr int64_t kMaxElements = int64_t{1} << 40;

DemoConfig parseDemo(const Args& a) {
  DemoConfig c;
  c.world = getLocalWorld(a, "world", 8, 1);
  c.size = a.getInt("size", 80000, 0, kMaxElements);
  c.dtype = a.getDataType("dtype", DataType::Float64);
  c.op = a.getOp("op", ReduceOp::Sum);
  c.iters = static_cast<int>(a.getInt("iters", 5, 1, kMaxIters));
  c.timeoutMs = a.getInt("timeout-ms", 60000, 1, kMaxTimeoutMs);
  c.segmentBytes = a.getInt("segment-bytes", 0, 0, int64_t{1} << 30);
  c.injectRank = static_cast<int>(a.getInt("inject-error", -1, -1, c.world - 1));
  c.json = a.flag("json");
  return c;
}

// Every rank holds an input and an output vector, and every rank runs here.
void checkDemoMemory(const DemoConfig& c) {
  const uint64_t vector = saturatingMul(static_cast<uint64_t>(c.size), dataTypeSize(c.dtype));
  checkMemory("--world " + std::to_string(c.world) + " --size " + std::to_string(c.size),
              saturatingMul(vector, 2), c.world, "input and output vectors");
}

const Algorithm kAlgos[] = {Algorithm::Ring, Algorithm::Naive};

// ---- worker ---------------------------------------------------------------------

int runWorker(const DemoConfig& c) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(c.timeoutMs);
  opts.segmentBytes = static_cast<size_t>(c.segmentBytes);
  Communicator comm = Communicator::fromEnv(opts);
  const int r = comm.rank();
  const int n = comm.size();
  const size_t count = static_cast<size_t>(c.size);
  const size_t elem = dataTypeSize(c.dtype);
  std::vector<uint8_t> in(count * elem), out(count * elem);
  pattern::fillReduce(in.data(), count, c.dtype, c.op, r, n, 0);
  std::map<std::string, std::string> rec;
  rec["status"] = "ok";
  for (Algorithm algo : kAlgos) {
    const std::string name(toString(algo));
    AllreduceOptions ao;
    ao.algorithm = algo;
    for (size_t k = 0; k < count; ++k) pattern::store(out.data(), k, c.dtype, -1);
    // The verified call: its counters include the connection handshakes.
    comm.allreduce(in.data(), out.data(), count, c.dtype, c.op, ao);
    const PeerCounters first = comm.lastCall().traffic.total();
    if (c.injectRank == r && count > 0) {
      const size_t k = count / 2;
      pattern::store(out.data(), k, c.dtype, pattern::reduceExpected(k, n, c.dtype, c.op) + 1);
    }
    const pattern::Wrong bad = pattern::checkReduce(out.data(), count, c.dtype, c.op, n, 0);
    if (bad.count > 0) {
      rec[name + "_bad_index"] = std::to_string(bad.index);
      rec[name + "_bad_actual"] = formatValue(bad.actual, c.dtype);
      rec[name + "_bad_expected"] = formatValue(bad.expected, c.dtype);
      rec[name + "_bad_count"] = std::to_string(bad.count);
    }
    // Steady-state timing.
    std::vector<double> times;
    PeerCounters steady;
    for (int i = 0; i < c.iters; ++i) {
      comm.allreduce(in.data(), out.data(), count, c.dtype, c.op, ao);
      times.push_back(comm.lastCall().seconds);
      steady = comm.lastCall().traffic.total();
    }
    std::sort(times.begin(), times.end());
    rec[name + "_payload"] = std::to_string(first.payloadSent);
    rec[name + "_wire_first"] = std::to_string(first.wireSent);
    rec[name + "_wire"] = std::to_string(steady.wireSent);
    rec[name + "_payload_steady"] = std::to_string(steady.payloadSent);
    rec[name + "_messages"] = std::to_string(steady.messagesSent);
    rec[name + "_median_s"] = std::to_string(times[times.size() / 2]);
  }
  comm.store()->setString("demo/result/" + std::to_string(r), encodeRecord(rec));
  return 0;
}

// ---- parent ---------------------------------------------------------------------

struct RankReport {
  bool present = false;
  std::map<std::string, std::string> kv;
  uint64_t num(const std::string& k) const {
    auto it = kv.find(k);
    return it == kv.end() ? 0 : std::stoull(it->second);
  }
  double real(const std::string& k) const {
    auto it = kv.find(k);
    return it == kv.end() ? 0 : std::stod(it->second);
  }
};

std::string opPhrase(ReduceOp op, int n) {
  return std::string(toString(op)) + " over " + std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

int runParent(const DemoConfig& c, const std::vector<std::string>& rawArgs) {
  // The workers' own timeout bounds every wait; this deadline bounds the whole run.
  LocalRun run = runLocalRanks(c.world, "_demo-worker", rawArgs,
                               Deadline::after(std::chrono::milliseconds(c.timeoutMs * 2 + 30000)),
                               std::chrono::milliseconds(std::min<int64_t>(c.timeoutMs, 10000)));
  const auto& children = run.children;
  throwIfRanksRefused(children);
  const double wall = run.seconds;

  TcpStore store("127.0.0.1", run.server->port(), std::chrono::milliseconds(5000));
  std::vector<RankReport> reports(static_cast<size_t>(c.world));
  for (int r = 0; r < c.world; ++r) {
    const std::string key = "demo/result/" + std::to_string(r);
    if (store.check({key})) {
      reports[static_cast<size_t>(r)].present = true;
      reports[static_cast<size_t>(r)].kv = decodeRecord(store.getString(key));
    }
  }

  const int n = c.world;
  const size_t count = static_cast<size_t>(c.size);
  const size_t elem = dataTypeSize(c.dtype);
  const double V = static_cast<double>(count * elem);

  // Crashed or failed workers.
  std::vector<std::string> failures;
  for (const auto& ch : children) {
    if (!ch.ok())
      failures.push_back("rank " + std::to_string(ch.index) + " " + ch.describe());
    else if (!reports[static_cast<size_t>(ch.index)].present)
      failures.push_back("rank " + std::to_string(ch.index) + " reported nothing");
  }
  // First wrong element, by algorithm then rank.
  std::string wrong;
  for (Algorithm algo : kAlgos) {
    const std::string name(toString(algo));
    for (int r = 0; r < n && wrong.empty(); ++r) {
      const auto& kv = reports[static_cast<size_t>(r)].kv;
      auto it = kv.find(name + "_bad_index");
      if (it != kv.end()) {
        wrong = name + ": rank " + std::to_string(r) + " index " + it->second + ": expected " +
                kv.at(name + "_bad_expected") + ", got " + kv.at(name + "_bad_actual") + " (" +
                kv.at(name + "_bad_count") + " wrong)";
      }
    }
  }
  const bool pass = failures.empty() && wrong.empty();

  auto maxOver = [&](const std::string& key) {
    uint64_t m = 0;
    for (const auto& rep : reports) m = std::max(m, rep.num(key));
    return m;
  };
  auto maxReal = [&](const std::string& key) {
    double m = 0;
    for (const auto& rep : reports) m = std::max(m, rep.real(key));
    return m;
  };
  const uint64_t ringBytes = maxOver("ring_payload");
  const uint64_t naiveBytes = maxOver("naive_payload");
  const uint64_t ringWire = maxOver("ring_wire");
  const uint64_t naiveWire = maxOver("naive_wire");
  const uint64_t ringHandshake = maxOver("ring_wire_first") - maxOver("ring_wire");
  const uint64_t naiveHandshake = maxOver("naive_wire_first") - maxOver("naive_wire");
  const double ringTime = maxReal("ring_median_s");
  const double naiveTime = maxReal("naive_median_s");
  const double bound = algo::allreduceBoundBytes(count, elem, n);
  const double ratioToBound = bound > 0 ? static_cast<double>(ringBytes) / bound : 0;
  const double advantage =
      ringBytes > 0 ? static_cast<double>(naiveBytes) / static_cast<double>(ringBytes) : 0;

  char buf[256];
  if (c.json) {
    std::ostringstream js;
    js << "{\"world\": " << n << ", \"count\": " << count << ", \"dtype\": \"" << toString(c.dtype)
       << "\", \"op\": \"" << toString(c.op) << "\", \"vector_bytes\": " << count * elem
       << ", \"correct\": " << (pass ? "true" : "false")
       << ", \"check\": \"every element, bit for bit, against a closed form; inputs depend on "
          "rank and index\"";
    if (!wrong.empty()) js << ", \"first_wrong\": \"" << wrong << "\"";
    js << ", \"failures\": [";
    for (size_t i = 0; i < failures.size(); ++i)
      js << (i ? ", " : "") << "\"" << failures[i] << "\"";
    js << "], \"bound_bytes\": " << bound
       << ", \"ring\": {\"payload_bytes_per_rank\": " << ringBytes
       << ", \"wire_bytes_per_rank\": " << ringWire << ", \"handshake_bytes\": " << ringHandshake
       << ", \"median_seconds\": " << ringTime << ", \"ratio_to_bound\": " << ratioToBound
       << "}, \"naive\": {\"payload_bytes_per_rank\": " << naiveBytes
       << ", \"wire_bytes_per_rank\": " << naiveWire << ", \"handshake_bytes\": " << naiveHandshake
       << ", \"median_seconds\": " << naiveTime << "}, \"naive_over_ring_bytes\": " << advantage
       << ", \"iters\": " << c.iters << ", \"wall_seconds\": " << wall << "}";
    std::cout << js.str() << std::endl;
  } else {
    std::cout << "ring all-reduce: world=" << n << ", vector=" << count << " "
              << elementNoun(c.dtype) << "\n";
    if (pass) {
      std::cout
          << "  correctness: PASS (every element of every rank's result == the closed form of "
          << opPhrase(c.op, n) << ", inputs depending on rank and index)\n";
    } else {
      std::cout << "  correctness: FAIL (" << (wrong.empty() ? "" : wrong)
                << (wrong.empty() || failures.empty() ? "" : "; ");
      for (size_t i = 0; i < failures.size(); ++i) std::cout << (i ? "; " : "") << failures[i];
      std::cout << ")\n";
    }
    std::cout << "  bytes/rank moved : ring=" << withCommas(ringBytes)
              << "   naive_allgather=" << withCommas(naiveBytes) << "\n";
    if (bound > 0) {
      std::snprintf(buf, sizeof buf, "%.2fx", ratioToBound);
      std::cout << "  per-rank volume vs 2(N-1)/N*V bound: " << buf
                << "  (1.00 = bandwidth-optimal)\n";
      std::snprintf(buf, sizeof buf, "%.1fx", advantage);
      std::cout << "  ring moves " << buf << " fewer bytes than naive all-gather\n";
    } else {
      std::cout << "  per-rank volume vs 2(N-1)/N*V bound: n/a (a world of 1 or an empty vector "
                   "moves nothing)\n";
    }
    std::cout << "  wire bytes/rank (payload + " << 24
              << " B headers): ring=" << withCommas(ringWire)
              << "   naive=" << withCommas(naiveWire) << "   (+ handshakes: ring " << ringHandshake
              << " B, naive " << naiveHandshake << " B)\n";
    std::snprintf(buf, sizeof buf,
                  "  time (median of %d, slowest rank): ring=%.3f ms   naive=%.3f ms", c.iters,
                  ringTime * 1e3, naiveTime * 1e3);
    std::cout << buf << "\n";
    (void)V;
  }
  return pass ? 0 : 1;
}

}  // namespace

int demoMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  DemoConfig c = parseDemo(a);
  checkDemoMemory(c);
  return runParent(c, a.raw());
}

int demoWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  DemoConfig c = parseDemo(a);
  try {
    return runWorker(c);
  } catch (const Error& e) {
    std::cerr << "tccl demo worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace tccl::cli
