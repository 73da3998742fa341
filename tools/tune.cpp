// tccl tune: measure the cost model's link parameters and save them.
//
//   tccl tune [--world 2] [--file PATH] [--iters 200] [--bytes 8M]
//
// Spawns the ranks, measures between ranks 0 and 1 (Communicator::measureLinks: an
// 8-byte ping-pong for alpha, a large transfer for beta), and writes
// alpha_us / beta_gbps / gamma_gbps to PATH (default: TCCL_TUNE_FILE, else
// ~/.config/tccl/tune.conf), keeping the file's other lines. Communicators read that file at
// construction; rank 0's model is shared with every rank so that Auto agrees everywhere.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "algorithms/select.hpp"
#include "cli.hpp"
#include "reduce/reduce.hpp"
#include "subcommands.hpp"

namespace tccl::cli {
namespace {

const std::vector<std::string> kValueOptions = {"world", "file", "iters", "bytes", "timeout-ms"};
const std::vector<std::string> kFlags = {"json"};

struct TuneConfig {
  int world = 2;
  std::string file;
  int iters = 200;
  uint64_t bytes = 8 << 20;
  int64_t timeoutMs = 60000;
  bool json = false;
};

TuneConfig parseTune(const Args& a) {
  TuneConfig c;
  if (a.getInt("world", 2) < 2)
    throw UsageError{"--world must be at least 2 (it measures between ranks 0 and 1)"};
  c.world = getLocalWorld(a, "world", 2, 2);
  c.file = a.get("file", algo::LinkModel::tuneFilePath());
  c.iters = static_cast<int>(a.getInt("iters", 200, 1, kMaxIters));
  c.bytes = a.getSize("bytes", 8 << 20);
  c.timeoutMs = a.getInt("timeout-ms", 60000, 1, kMaxTimeoutMs);
  c.json = a.flag("json");
  if (c.bytes < 1 || c.bytes > (uint64_t{1} << 32))
    throw UsageError{"--bytes must be in [1, 4G] (got " + std::to_string(c.bytes) + ")"};
  if (c.file.empty()) throw UsageError{"no --file and no HOME or TCCL_TUNE_FILE to write to"};
  return c;
}

// gamma: the local reduction's throughput, bytes of result per second, for a float32
// sum of 4 MiB vectors (out-of-cache, like the segments a collective reduces); the
// best of several runs.
double measureReduceGbps() {
  const size_t n = size_t{1} << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n);
  double best = 1e9;
  for (int i = 0; i < 30; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    reduce::apply(reinterpret_cast<uint8_t*>(out.data()),
                  reinterpret_cast<const uint8_t*>(a.data()),
                  reinterpret_cast<const uint8_t*>(b.data()), n, DataType::Float32, ReduceOp::Sum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    std::swap(a, out);  // a different destination each time: no warm result in cache
  }
  return static_cast<double>(n * sizeof(float)) / best / 1e9;
}

// Writes what tune measured into `path`. A file that exists keeps every other line
// (hd_bandwidth_penalty, inter_* and whatever a user added, comments included) as it
// was, in its order: only the measured keys change, in place, or are appended. A new
// file gets the model's every field. Written to a temporary file and renamed over the
// old one, so a reader never sees half a file.
void saveTuned(const algo::LinkModel& m, const std::string& path) {
  std::ifstream old(path);
  if (!old) {
    m.save(path);
    return;
  }
  char buf[64];
  std::map<std::string, std::string> fresh;
  std::snprintf(buf, sizeof buf, "%.3f", m.alphaSec * 1e6);
  fresh["alpha_us"] = buf;
  std::snprintf(buf, sizeof buf, "%.4f", 1e-9 / m.betaSecPerByte);
  fresh["beta_gbps"] = buf;
  std::snprintf(buf, sizeof buf, "%.4f", 1e-9 / m.gammaSecPerByte);
  fresh["gamma_gbps"] = buf;
  std::ostringstream out;
  std::string line;
  while (std::getline(old, line)) {
    const auto eq = line.find('=');
    const std::string key = eq == std::string::npos ? "" : line.substr(0, eq);
    auto it = line.empty() || line[0] == '#' ? fresh.end() : fresh.find(key);
    if (it == fresh.end()) {
      out << line << "\n";
    } else {
      out << key << "=" << it->second << "\n";
      fresh.erase(it);
    }
  }
  for (const auto& [key, value] : fresh) out << key << "=" << value << "\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out.str();
    if (!f) throwError(ErrorKind::System, "cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throwError(ErrorKind::System, "cannot rename " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace

int tuneMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  TuneConfig c = parseTune(a);
  checkMemory("--world " + std::to_string(c.world) + " --bytes " + std::to_string(c.bytes), c.bytes,
              c.world, "the transfer buffer");
  LocalRun run = runLocalRanks(c.world, "_tune-worker", a.raw(),
                               Deadline::after(std::chrono::milliseconds(c.timeoutMs * 2)),
                               std::chrono::milliseconds(2000));
  throwIfRanksRefused(run.children);
  for (const auto& ch : run.children) {
    if (!ch.ok()) {
      std::cerr << "tccl tune: rank " << ch.index << " " << ch.describe() << "\n";
      return 1;
    }
  }
  return 0;
}

int tuneWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  TuneConfig c = parseTune(a);
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(c.timeoutMs);
    Communicator comm = Communicator::fromEnv(opts);
    const LinkEstimate before = comm.linkModel();
    const LinkEstimate e = comm.measureLinks(c.iters, static_cast<size_t>(c.bytes));
    if (comm.rank() != 0) return 0;
    algo::LinkModel m;
    m.alphaSec = e.alphaUs * 1e-6;
    m.betaSecPerByte = 1.0 / (e.gbps * 1e9);
    const double gamma = measureReduceGbps();
    m.gammaSecPerByte = 1.0 / (gamma * 1e9);
    saveTuned(m, c.file);
    if (c.json) {
      std::printf(
          "{\"alpha_us\": %.3f, \"beta_gbps\": %.4f, \"gamma_gbps\": %.4f, \"file\": \"%s\"}\n",
          e.alphaUs, e.gbps, gamma, c.file.c_str());
    } else {
      std::printf("tccl tune: world %d, between ranks 0 and 1 over TCP\n", comm.size());
      std::printf("  alpha (per-message time, half an 8-byte round trip): %.2f us   (was %.2f)\n",
                  e.alphaUs, before.alphaUs);
      std::printf("  beta  (bandwidth of a %s transfer):                 %.3f GB/s (was %.3f)\n",
                  formatBytes(static_cast<double>(c.bytes)).c_str(), e.gbps, before.gbps);
      std::printf("  gamma (float32 sum of 4 MiB vectors, one core):      %.3f GB/s\n", gamma);
      std::printf(
          "  saved to %s (read by every communicator; TCCL_ALPHA_US / TCCL_BETA_GBPS override)\n",
          c.file.c_str());
    }
    return 0;
  } catch (const Error& e) {
    std::cerr << "tccl tune worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace tccl::cli
