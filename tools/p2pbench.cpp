// tccl p2pbench: point-to-point latency and bandwidth between two ranks, as the OSU
// micro-benchmarks measure them (osu_latency, osu_bw, osu_bibw).
//
//   tccl p2pbench [--mode latency|latency_async|bw|bibw|all, or a list: latency,bw]
//                 [--sizes 8,64K,4M,64M] [--iters N] [--warmup N] [--window 64]
//                 [--reps 5] [--json FILE] [--timeout-ms 120000] [--inject-error]
//
// Spawns two local ranks (processes) that talk over TCP on 127.0.0.1, or, with a rank
// in the environment (TCCL_RANK / RANK: tccl launch, torchrun), runs as that rank of a
// world of two. Modes:
//   latency        rank 0: send then recv; rank 1: recv then send (blocking calls);
//                  time = half the round trip.
//   latency_async  the same with sendAsync / recvAsync and wait(): rank 0 issues its
//                  send and its receive, then waits for both; rank 1 receives, then
//                  sends.
//   bw             rank 0 issues a window of sendAsync of one size and waits for all;
//                  rank 1 issues as many recvAsync, waits for all, then sends a 4-byte
//                  ack (blocking) that rank 0 receives; time = window time / window.
//   bibw           both ranks issue a window of recvAsync, then one of sendAsync, and
//                  wait for all; time = window time / window, and the bandwidth counts
//                  both directions.
// Per mode and size: `warmup` untimed iterations, then `iters` timed ones split into
// `reps` repetitions, each preceded by a barrier; the figure is the median over the
// repetitions of rank 0's average per iteration (as OSU, rank 0's clock). GB/s = 1e9
// B/s: size / time (latency, bw), 2 x size / time (bibw). Every message of a window
// uses the same buffer (as OSU does). Data: every message carries a pattern of its
// byte index and size (and the sender's rank), so that a wrong offset or a message of
// another size is caught; the receiver clears its buffer after the warm-up and checks
// the last message it received; #wrong counts the wrong bytes, and any makes the
// command exit 1 (--inject-error: rank 0 sends one wrong byte in every message, to see
// it caught). bench/mpi_p2p.c measures Open MPI the same way (bench/README.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "subcommands.hpp"

namespace tccl::cli {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kValueOptions = {"mode",   "sizes", "iters", "warmup",
                                                "window", "reps",  "json",  "timeout-ms"};
const std::vector<std::string> kFlags = {"inject-error"};

enum class Mode { Latency, LatencyAsync, Bw, Bibw };
const std::vector<std::pair<std::string, Mode>> kModes = {{"latency", Mode::Latency},
                                                          {"latency_async", Mode::LatencyAsync},
                                                          {"bw", Mode::Bw},
                                                          {"bibw", Mode::Bibw}};

const char* modeName(Mode m) {
  for (const auto& [name, mode] : kModes) {
    if (mode == m) return name.c_str();
  }
  return "?";
}

bool isLatency(Mode m) { return m == Mode::Latency || m == Mode::LatencyAsync; }

struct P2PConfig {
  std::vector<Mode> modes;
  std::vector<uint64_t> sizes;
  int iters = 0;    // 0: by size (defaultIters)
  int warmup = -1;  // -1: by iterations (defaultWarmup)
  int window = 64;
  int reps = 5;
  std::string json;
  int64_t timeoutMs = 120000;
  bool injectError = false;  // rank 0 sends one wrong byte (tests the check)
};

P2PConfig parseP2P(const Args& a) {
  P2PConfig c;
  std::stringstream modes(a.get("mode", "all"));
  std::string item;
  while (std::getline(modes, item, ',')) {
    bool known = false;
    for (const auto& [name, m] : kModes) {
      if (item != "all" && item != name) continue;
      known = true;
      if (std::find(c.modes.begin(), c.modes.end(), m) == c.modes.end()) c.modes.push_back(m);
    }
    if (!known) {
      throw UsageError{"unknown --mode '" + item + "' (latency, latency_async, bw, bibw or all)"};
    }
  }
  if (c.modes.empty()) throw UsageError{"no --mode to run"};
  c.sizes = parseSizeList(a.get("sizes", "8,64K,4M,64M"));
  c.iters = static_cast<int>(a.getInt("iters", 0));
  c.warmup = static_cast<int>(a.getInt("warmup", -1));
  c.window = static_cast<int>(a.getInt("window", 64));
  c.reps = static_cast<int>(a.getInt("reps", 5));
  c.json = a.get("json", "");
  c.timeoutMs = a.getInt("timeout-ms", 120000);
  c.injectError = a.flag("inject-error");
  if (c.sizes.empty()) throw UsageError{"no sizes to run"};
  for (uint64_t s : c.sizes) {
    if (s == 0) throw UsageError{"--sizes: sizes must be at least 1 byte"};
  }
  if (a.get("iters") && c.iters < 1) throw UsageError{"--iters must be at least 1"};
  if (a.get("warmup") && c.warmup < 0) throw UsageError{"--warmup must not be negative"};
  if (c.window < 1 || c.window > 4096) throw UsageError{"--window must be in [1, 4096]"};
  if (c.reps < 1) throw UsageError{"--reps must be at least 1"};
  if (c.timeoutMs < 1) throw UsageError{"--timeout-ms must be positive"};
  return c;
}

// Default iterations: fewer for large sizes, so that a row moves about 1 GiB (latency:
// round trips) or 2 GiB (bw, bibw: per direction); bench/mpi_p2p.c has the same rule.
int defaultIters(Mode m, uint64_t size, int window) {
  if (isLatency(m)) {
    return static_cast<int>(std::clamp<uint64_t>((uint64_t{1} << 30) / (2 * size), 10, 1000));
  }
  return static_cast<int>(
      std::clamp<uint64_t>((uint64_t{2} << 30) / (size * static_cast<uint64_t>(window)), 2, 100));
}
int defaultWarmup(int iters) { return std::max(1, iters / 10); }

// The message pattern: 32-bit words of a hash of (word index, seed), the seed made of
// the size and the sender's rank. bench/mpi_p2p.c writes the same bytes.
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
uint32_t patternSeed(uint64_t size, int sender) {
  return mix32(static_cast<uint32_t>(size) * 2654435761U ^ static_cast<uint32_t>(size >> 32) ^
               (static_cast<uint32_t>(sender) + 1) * 0x9e3779b9U);
}
uint32_t patternWord(size_t word, uint32_t seed) {
  return mix32(static_cast<uint32_t>(word) ^ seed) + static_cast<uint32_t>(word);
}
void fillPattern(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t off = 0; off < n; off += 4) {
    const uint32_t v = patternWord(off / 4, seed);
    std::memcpy(p + off, &v, std::min<size_t>(4, n - off));
  }
}
struct Check {
  int64_t wrong = 0;
  int64_t firstIndex = -1;
  int64_t expected = 0, actual = 0;
};
Check checkPattern(const uint8_t* p, size_t n, uint32_t seed) {
  Check c;
  for (size_t off = 0; off < n; off += 4) {
    const uint32_t v = patternWord(off / 4, seed);
    uint8_t want[4];
    std::memcpy(want, &v, 4);
    const size_t k = std::min<size_t>(4, n - off);
    for (size_t j = 0; j < k; ++j) {
      if (p[off + j] != want[j]) {
        if (c.wrong++ == 0) {
          c.firstIndex = static_cast<int64_t>(off + j);
          c.expected = want[j];
          c.actual = p[off + j];
        }
      }
    }
  }
  return c;
}

struct Row {
  Mode mode = Mode::Latency;
  uint64_t size = 0;
  int iters = 0, warmup = 0, reps = 0;
  double timeUs = 0, gbps = 0;
  std::vector<double> repUs;
  int64_t wrong = 0;
  std::string firstWrong;  // where, on which rank, when wrong > 0
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

class Runner {
 public:
  Runner(Communicator& comm, const P2PConfig& c) : comm_(comm), c_(c) {
    rank_ = comm.rank();
    peer_ = 1 - rank_;
    const uint64_t maxSize = *std::max_element(c.sizes.begin(), c.sizes.end());
    sbuf_.assign(maxSize, 0);
    rbuf_.assign(maxSize, 0);
    works_.reserve(2 * static_cast<size_t>(c.window));
  }

  Row run(Mode mode, uint64_t size) {
    Row row;
    row.mode = mode;
    row.size = size;
    row.iters = c_.iters > 0 ? c_.iters : defaultIters(mode, size, c_.window);
    row.warmup = c_.warmup >= 0 ? c_.warmup : defaultWarmup(row.iters);
    row.reps = std::min(c_.reps, row.iters);
    size_ = size;
    fillPattern(sbuf_.data(), size, patternSeed(size, rank_));
    if (c_.injectError && rank_ == 0) sbuf_[size / 2] ^= 0x5a;
    comm_.barrier();
    for (int i = 0; i < row.warmup; ++i) iteration(mode);
    std::fill_n(rbuf_.begin(), size, uint8_t{0});
    for (int r = 0; r < row.reps; ++r) {
      // Iterations split as evenly as they go: 20 in 5 repetitions are 4 each.
      const int n = row.iters / row.reps + (r < row.iters % row.reps ? 1 : 0);
      comm_.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) iteration(mode);
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      const double perIter = sec / n;
      row.repUs.push_back(1e6 * (isLatency(mode) ? perIter / 2 : perIter / c_.window));
    }
    row.timeUs = median(row.repUs);
    const double bytes = static_cast<double>(size) * (mode == Mode::Bibw ? 2 : 1);
    row.gbps = bytes / (row.timeUs * 1e-6) / 1e9;

    // The last message this rank received; then rank 1 tells rank 0 what it found.
    const bool receives = mode != Mode::Bw || rank_ == 1;
    Check mine;
    if (receives) mine = checkPattern(rbuf_.data(), size, patternSeed(size, peer_));
    int64_t report[4] = {mine.wrong, mine.firstIndex, mine.expected, mine.actual};
    if (rank_ == 1) {
      comm_.send(report, 4, DataType::Int64, 0);
      row.wrong = mine.wrong;
      return row;
    }
    int64_t theirs[4] = {0, -1, 0, 0};
    comm_.recv(theirs, 4, DataType::Int64, 1);
    row.wrong = mine.wrong + theirs[0];
    const int64_t* bad = mine.wrong ? report : theirs[0] ? theirs : nullptr;
    if (bad) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "rank %d, byte %lld: expected 0x%02llx, got 0x%02llx",
                    bad == report ? 0 : 1, static_cast<long long>(bad[1]),
                    static_cast<unsigned long long>(bad[2]),
                    static_cast<unsigned long long>(bad[3]));
      row.firstWrong = buf;
    }
    return row;
  }

 private:
  void iteration(Mode mode) {
    const size_t n = size_;
    uint8_t* s = sbuf_.data();
    uint8_t* r = rbuf_.data();
    const DataType u8 = DataType::UInt8;
    switch (mode) {
      case Mode::Latency:
        if (rank_ == 0) {
          comm_.send(s, n, u8, peer_);
          comm_.recv(r, n, u8, peer_);
        } else {
          comm_.recv(r, n, u8, peer_);
          comm_.send(s, n, u8, peer_);
        }
        break;
      case Mode::LatencyAsync:
        if (rank_ == 0) {
          WorkPtr out = comm_.sendAsync(s, n, u8, peer_);
          WorkPtr in = comm_.recvAsync(r, n, u8, peer_);
          out->wait();
          in->wait();
        } else {
          comm_.recvAsync(r, n, u8, peer_)->wait();
          comm_.sendAsync(s, n, u8, peer_)->wait();
        }
        break;
      case Mode::Bw:
        works_.clear();
        for (int w = 0; w < c_.window; ++w) {
          works_.push_back(rank_ == 0 ? comm_.sendAsync(s, n, u8, peer_)
                                      : comm_.recvAsync(r, n, u8, peer_));
        }
        for (const WorkPtr& w : works_) w->wait();
        if (rank_ == 0) {
          comm_.recv(ack_, sizeof ack_, u8, peer_);
        } else {
          comm_.send(ack_, sizeof ack_, u8, peer_);
        }
        break;
      case Mode::Bibw:
        works_.clear();
        for (int w = 0; w < c_.window; ++w) works_.push_back(comm_.recvAsync(r, n, u8, peer_));
        for (int w = 0; w < c_.window; ++w) works_.push_back(comm_.sendAsync(s, n, u8, peer_));
        for (const WorkPtr& w : works_) w->wait();
        break;
    }
  }

  Communicator& comm_;
  const P2PConfig& c_;
  int rank_ = 0, peer_ = 1;
  size_t size_ = 0;
  std::vector<uint8_t> sbuf_, rbuf_;
  std::vector<WorkPtr> works_;
  uint8_t ack_[4] = {0, 0, 0, 0};
};

void writeJson(const std::string& path, const P2PConfig& c, const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw UsageError{"--json: cannot write " + path};
  f << "{\"tool\": \"tccl p2pbench\", \"ranks\": 2, \"window\": " << c.window << ", \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"mode\": \"%s\", \"size\": %llu, \"iters\": %d, \"warmup\": %d, \"reps\": %d, "
                  "\"time_us\": %.4f, \"gbps\": %.6f, \"wrong\": %lld, \"rep_time_us\": [",
                  modeName(r.mode), static_cast<unsigned long long>(r.size), r.iters, r.warmup,
                  r.reps, r.timeUs, r.gbps, static_cast<long long>(r.wrong));
    f << (i ? ", " : "") << buf;
    for (size_t k = 0; k < r.repUs.size(); ++k) {
      std::snprintf(buf, sizeof buf, "%s%.4f", k ? ", " : "", r.repUs[k]);
      f << buf;
    }
    f << "]}";
  }
  f << "]}\n";
}

int runWorker(const P2PConfig& c) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(c.timeoutMs);
  Communicator comm = Communicator::fromEnv(opts);
  if (comm.size() != 2) {
    throw UsageError{"p2pbench runs on exactly 2 ranks, not " + std::to_string(comm.size())};
  }
  const bool lead = comm.rank() == 0;
  if (lead) {
    std::printf(
        "# tccl p2pbench: 2 ranks, TCP on loopback, window %d, median of %d repetitions of the "
        "average per iteration\n",
        c.window, c.reps);
    std::printf(
        "# time(us): latency = half a round trip; bw, bibw = a window's time / window. GB/s = "
        "1e9 B/s (bibw: both directions)\n");
    std::printf("# %12s %14s %7s %7s %5s %12s %10s %7s\n", "size", "mode", "iters", "warmup",
                "reps", "time(us)", "GB/s", "#wrong");
    std::fflush(stdout);
  }
  Runner runner(comm, c);
  std::vector<Row> rows;
  int64_t wrong = 0;
  for (Mode m : c.modes) {
    for (uint64_t size : c.sizes) {
      Row row = runner.run(m, size);
      wrong += row.wrong;
      rows.push_back(row);
      if (!lead) continue;
      std::printf("  %12llu %14s %7d %7d %5d %12.2f %10.4f %7lld\n",
                  static_cast<unsigned long long>(row.size), modeName(row.mode), row.iters,
                  row.warmup, row.reps, row.timeUs, row.gbps, static_cast<long long>(row.wrong));
      if (row.wrong) {
        std::printf("# #wrong: %s %llu B: %s\n", modeName(row.mode),
                    static_cast<unsigned long long>(row.size), row.firstWrong.c_str());
      }
      std::fflush(stdout);
    }
  }
  if (!lead) return wrong == 0 ? 0 : 1;
  std::printf("# #wrong total: %lld %s\n", static_cast<long long>(wrong),
              wrong == 0 ? "OK" : "FAILED");
  if (!c.json.empty()) writeJson(c.json, c, rows);
  return wrong == 0 ? 0 : 1;
}

int workerGuarded(const P2PConfig& c) {
  try {
    return runWorker(c);
  } catch (const Error& e) {
    std::cerr << "tccl p2pbench worker: " << e.what() << std::endl;
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "tccl p2pbench: " << e.message << std::endl;
    return 2;
  }
}

}  // namespace

int p2pbenchMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  P2PConfig c = parseP2P(a);
  if (rankFromEnvironment()) return workerGuarded(c);
  // Every call has its own deadline (--timeout-ms); this one bounds the whole run.
  const auto deadline = std::chrono::milliseconds(c.timeoutMs * 10);
  LocalRun run = runLocalRanks(2, "_p2pbench-worker", a.raw(), Deadline::after(deadline),
                               std::chrono::milliseconds(2000));
  return exitStatusOf(run, "p2pbench");
}

int p2pbenchWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  return workerGuarded(parseP2P(a));
}

}  // namespace tccl::cli
