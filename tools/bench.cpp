// tccl bench: all-reduce time and bandwidth over a list of sizes, nccl-tests style.
// Spawns N local ranks (processes). Per size: warm-up iterations, then timed
// iterations; the time of a size is the average per-iteration time of the slowest
// rank (max over ranks, found with an all-reduce). A separate correctness pass
// counts wrong elements. algbw = bytes / time; busbw = algbw * 2(n-1)/n (1e9 B/s).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "algorithms/chunking.hpp"
#include "cli.hpp"
#include "core/process.hpp"
#include "subcommands.hpp"

namespace tccl::cli {
namespace {

const std::vector<std::string> kValueOptions = {
    "world", "sizes", "dtype", "op", "algo", "iters", "warmup", "timeout-ms", "segment-bytes"};
const std::vector<std::string> kFlags = {"json"};

struct BenchConfig {
  int world = 2;
  std::vector<uint64_t> sizes;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algo = Algorithm::Ring;
  int iters = 20;
  int warmup = 5;
  int64_t timeoutMs = 120000;
  int64_t segmentBytes = 0;
  bool json = false;
};

BenchConfig parseBench(const Args& a) {
  BenchConfig c;
  c.world = static_cast<int>(a.getInt("world", 2));
  std::string sizes = a.get("sizes", "8,1K,64K,1M,16M,64M");
  std::stringstream ss(sizes);
  std::string item;
  while (std::getline(ss, item, ',')) c.sizes.push_back(parseSize(item));
  c.dtype = a.getDataType("dtype", DataType::Float32);
  c.op = a.getOp("op", ReduceOp::Sum);
  c.algo = a.getAlgorithm("algo", Algorithm::Ring);
  c.iters = static_cast<int>(a.getInt("iters", 20));
  c.warmup = static_cast<int>(a.getInt("warmup", 5));
  c.timeoutMs = a.getInt("timeout-ms", 120000);
  c.segmentBytes = a.getInt("segment-bytes", 0);
  c.json = a.flag("json");
  if (c.world < 1) throw UsageError{"--world must be at least 1"};
  if (c.iters < 1 || c.warmup < 0) throw UsageError{"--iters must be >= 1 and --warmup >= 0"};
  if (c.sizes.empty()) throw UsageError{"--sizes is empty"};
  return c;
}

double maxOverRanks(Communicator& comm, double v) {
  double out = 0;
  comm.allreduce(&v, &out, 1, DataType::Float64, ReduceOp::Max, {Algorithm::Ring, std::nullopt});
  return out;
}

int runWorker(const BenchConfig& c) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(c.timeoutMs);
  opts.segmentBytes = static_cast<size_t>(c.segmentBytes);
  Communicator comm = Communicator::fromEnv(opts);
  const int n = comm.size();
  const size_t elem = dataTypeSize(c.dtype);
  AllreduceOptions ao;
  ao.algorithm = c.algo;
  char line[512];
  if (comm.rank() == 0 && !c.json) {
    std::printf(
        "# tccl bench: world %d, dtype %s, op %s, algo %s, %d warm-up + %d timed iterations\n", n,
        std::string(toString(c.dtype)).c_str(), std::string(toString(c.op)).c_str(),
        std::string(toString(c.algo)).c_str(), c.warmup, c.iters);
    std::printf("# %12s %12s %8s %6s %6s %12s %10s %10s %7s %14s %7s\n", "size", "count", "type",
                "redop", "algo", "time(us)", "algbw", "busbw", "#wrong", "bytes/rank", "/bound");
    std::printf("# %12s %12s %8s %6s %6s %12s %10s %10s %7s %14s %7s\n", "(B)", "(elements)", "",
                "", "", "", "(GB/s)", "(GB/s)", "", "(sent)", "");
  }
  std::ostringstream js;
  js << "{\"world\": " << n << ", \"dtype\": \"" << toString(c.dtype) << "\", \"op\": \""
     << toString(c.op) << "\", \"results\": [";
  bool firstRow = true;
  for (uint64_t bytes : c.sizes) {
    const size_t count = std::max<size_t>(1, bytes / elem);
    const size_t realBytes = count * elem;
    std::vector<uint8_t> in(realBytes), out(realBytes);
    // Correctness pass: rank r holds r+1.
    fill(in.data(), count, c.dtype, comm.rank() + 1);
    comm.allreduce(in.data(), out.data(), count, c.dtype, c.op, ao);
    const std::string algoRan = comm.lastCall().algorithm;
    const double sentBytes = static_cast<double>(comm.lastCall().traffic.total().payloadSent);
    double wrong = 0;
    const double expected = expectedConstant(n, c.dtype, c.op);
    for (size_t off = 0; off < count;) {
      auto bad = firstMismatch(out.data() + off * elem, count - off, c.dtype, expected);
      if (!bad) break;
      wrong += 1;
      off += bad->index + 1;
    }
    for (int i = 0; i < c.warmup; ++i)
      comm.allreduce(in.data(), out.data(), count, c.dtype, c.op, ao);
    maxOverRanks(comm, 0);  // line the ranks up before timing
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < c.iters; ++i)
      comm.allreduce(in.data(), out.data(), count, c.dtype, c.op, ao);
    double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / c.iters;
    sec = maxOverRanks(comm, sec);
    wrong = maxOverRanks(comm, wrong);
    const double maxSent = maxOverRanks(comm, sentBytes);
    const double algbw = static_cast<double>(realBytes) / sec / 1e9;
    const double busbw = algbw * (n > 1 ? 2.0 * (n - 1) / n : 0.0);
    const double bound = algo::allreduceBoundBytes(count, elem, n);
    const double ratio = bound > 0 ? maxSent / bound : 0;
    if (comm.rank() == 0) {
      if (c.json) {
        js << (firstRow ? "" : ", ") << "{\"size\": " << realBytes << ", \"count\": " << count
           << ", \"algo\": \"" << algoRan << "\", \"time_us\": " << sec * 1e6
           << ", \"algbw_gbps\": " << algbw << ", \"busbw_gbps\": " << busbw
           << ", \"wrong\": " << wrong << ", \"bytes_per_rank\": " << maxSent
           << ", \"ratio_to_bound\": " << ratio << "}";
      } else {
        std::snprintf(line, sizeof line,
                      "  %12zu %12zu %8s %6s %6s %12.2f %10.3f %10.3f %7.0f %14.0f %7.3f\n",
                      realBytes, count, std::string(toString(c.dtype)).c_str(),
                      std::string(toString(c.op)).c_str(), algoRan.c_str(), sec * 1e6, algbw, busbw,
                      wrong, maxSent, ratio);
        std::fputs(line, stdout);
        std::fflush(stdout);
      }
    }
    firstRow = false;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peakMiB = maxOverRanks(comm, static_cast<double>(ru.ru_maxrss) / 1024.0);
  if (comm.rank() == 0) {
    if (c.json) {
      js << "], \"peak_rss_mib_per_rank\": " << peakMiB << "}";
      std::cout << js.str() << std::endl;
    } else {
      std::printf("# peak RSS per rank (max over ranks): %.1f MiB\n", peakMiB);
    }
  }
  return 0;
}

}  // namespace

int benchMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  BenchConfig c = parseBench(a);
  LocalRun run = runLocalRanks(c.world, "_bench-worker", a.raw(),
                               Deadline::after(std::chrono::milliseconds(c.timeoutMs * 4)),
                               std::chrono::milliseconds(2000));
  const auto& results = run.children;
  int rc = 0;
  for (const auto& r : results) {
    if (!r.ok()) {
      std::cerr << "tccl bench: rank " << r.index << " " << r.describe() << "\n";
      rc = 1;
    }
  }
  return rc;
}

int benchWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  BenchConfig c = parseBench(a);
  try {
    return runWorker(c);
  } catch (const Error& e) {
    std::cerr << "tccl bench worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace tccl::cli
