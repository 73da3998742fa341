#include "algorithms/select.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "base/config.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {

namespace {

double parsePositive(const std::string& what, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x > 0) || !std::isfinite(x)) {
    throwError(ErrorKind::InvalidArgument, what + "='" + v + "' is not a positive number");
  }
  return x;
}

}  // namespace

std::string LinkModel::tuneFilePath() {
  if (auto f = config::getEnv("TCCL_TUNE_FILE")) return *f;
  if (auto home = config::getEnv("HOME")) return *home + "/.config/tccl/tune.conf";
  return "";
}

std::optional<LinkModel> LinkModel::load(const std::string& path) {
  std::ifstream f(path);
  if (path.empty() || !f) return std::nullopt;
  LinkModel m;
  bool alpha = false, beta = false;
  std::string line;
  while (std::getline(f, line)) {
    const auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "alpha_us") {
      m.alphaSec = parsePositive(path + ": alpha_us", value) * 1e-6;
      alpha = true;
    } else if (key == "hd_bandwidth_penalty") {
      m.hdBandwidthPenalty = parsePositive(path + ": hd_bandwidth_penalty", value);
    } else if (key == "hd_penalty_from_bytes") {
      m.hdPenaltyFromBytes = parsePositive(path + ": hd_penalty_from_bytes", value);
    } else if (key == "beta_gbps") {
      m.betaSecPerByte = 1.0 / (parsePositive(path + ": beta_gbps", value) * 1e9);
      beta = true;
    } else if (key == "inter_alpha_us") {
      m.interAlphaSec = parsePositive(path + ": inter_alpha_us", value) * 1e-6;
    } else if (key == "inter_beta_gbps") {
      m.interBetaSecPerByte = 1.0 / (parsePositive(path + ": inter_beta_gbps", value) * 1e9);
    } else if (key == "gamma_gbps") {
      m.gammaSecPerByte = 1.0 / (parsePositive(path + ": gamma_gbps", value) * 1e9);
    } else if (key == "flow_gbps") {
      m.flowSecPerByte = 1.0 / (parsePositive(path + ": flow_gbps", value) * 1e9);
    }
  }
  if (!alpha || !beta) {
    throwError(ErrorKind::InvalidArgument, path + ": needs alpha_us=... and beta_gbps=... lines");
  }
  return m;
}

void LinkModel::save(const std::string& path) const {
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::error_code ec;
    std::filesystem::create_directories(path.substr(0, slash), ec);
  }
  std::ofstream f(path);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "# written by tccl tune\nalpha_us=%.3f\nbeta_gbps=%.4f\nhd_bandwidth_penalty=%.3f\n"
                "inter_alpha_us=%.3f\ninter_beta_gbps=%.4f\n",
                alphaSec * 1e6, 1e-9 / betaSecPerByte, hdBandwidthPenalty, interAlphaSec * 1e6,
                1e-9 / interBetaSecPerByte);
  f << buf;
  std::snprintf(buf, sizeof buf, "hd_penalty_from_bytes=%.0f\n", hdPenaltyFromBytes);
  if (hdPenaltyFromBytes > 0) f << buf;
  if (gammaSecPerByte > 0) {  // 0: no reduction term (tests), not a figure to save
    std::snprintf(buf, sizeof buf, "gamma_gbps=%.4f\n", 1e-9 / gammaSecPerByte);
    f << buf;
  }
  if (flowSecPerByte > 0) {  // 0: no per-flow limit known
    std::snprintf(buf, sizeof buf, "flow_gbps=%.4f\n", 1e-9 / flowSecPerByte);
    f << buf;
  }
  if (!f) throwError(ErrorKind::System, "cannot write " + path);
}

namespace {

// The names encodeLinkModel writes, in its order (one per field of LinkModel).
constexpr const char* kLinkModelFields[] = {"alpha_sec",
                                            "beta_sec_per_byte",
                                            "hd_bandwidth_penalty",
                                            "hd_penalty_from_bytes",
                                            "inter_alpha_sec",
                                            "inter_beta_sec_per_byte",
                                            "gamma_sec_per_byte",
                                            "flow_sec_per_byte",
                                            "cores"};

}  // namespace

std::string encodeLinkModel(const LinkModel& m) {
  // Every field by name: adding one to LinkModel breaks this line until it is encoded.
  const auto& [alpha, beta, hdPenalty, hdFrom, interAlpha, interBeta, gamma, flow, cores] = m;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s=%.17g %s=%.17g %s=%.17g %s=%.17g %s=%.17g %s=%.17g %s=%.17g %s=%.17g %s=%d",
                kLinkModelFields[0], alpha, kLinkModelFields[1], beta, kLinkModelFields[2],
                hdPenalty, kLinkModelFields[3], hdFrom, kLinkModelFields[4], interAlpha,
                kLinkModelFields[5], interBeta, kLinkModelFields[6], gamma, kLinkModelFields[7],
                flow, kLinkModelFields[8], cores);
  return buf;
}

std::optional<LinkModel> decodeLinkModel(const std::string& s) {
  LinkModel m;
  auto& [alpha, beta, hdPenalty, hdFrom, interAlpha, interBeta, gamma, flow, cores] = m;
  double* doubles[] = {&alpha, &beta, &hdPenalty, &hdFrom, &interAlpha, &interBeta, &gamma, &flow};
  const char* p = s.c_str();
  for (size_t i = 0; i < std::size(kLinkModelFields); ++i) {
    if (i > 0 && *p++ != ' ') return std::nullopt;
    const size_t n = std::strlen(kLinkModelFields[i]);
    if (std::strncmp(p, kLinkModelFields[i], n) != 0 || p[n] != '=') return std::nullopt;
    p += n + 1;
    char* end = nullptr;
    errno = 0;
    if (i < std::size(doubles)) {
      *doubles[i] = std::strtod(p, &end);
    } else {
      const long v = std::strtol(p, &end, 10);
      if (v < INT32_MIN || v > INT32_MAX) return std::nullopt;
      cores = static_cast<int>(v);
    }
    if (end == p || errno == ERANGE) return std::nullopt;
    p = end;
  }
  if (*p != '\0') return std::nullopt;
  return m;
}

LinkModel LinkModel::fromEnv() {
  LinkModel m;
  if (auto tuned = load(tuneFilePath())) m = *tuned;
  if (auto v = config::getEnv("TCCL_ALPHA_US"))
    m.alphaSec = parsePositive("TCCL_ALPHA_US", *v) * 1e-6;
  if (auto v = config::getEnv("TCCL_BETA_GBPS"))
    m.betaSecPerByte = 1.0 / (parsePositive("TCCL_BETA_GBPS", *v) * 1e9);
  if (auto v = config::getEnv("TCCL_INTER_ALPHA_US"))
    m.interAlphaSec = parsePositive("TCCL_INTER_ALPHA_US", *v) * 1e-6;
  if (auto v = config::getEnv("TCCL_INTER_BETA_GBPS"))
    m.interBetaSecPerByte = 1.0 / (parsePositive("TCCL_INTER_BETA_GBPS", *v) * 1e9);
  if (auto v = config::getEnv("TCCL_GAMMA_GBPS"))
    m.gammaSecPerByte = 1.0 / (parsePositive("TCCL_GAMMA_GBPS", *v) * 1e9);
  if (auto v = config::getEnv("TCCL_FLOW_GBPS"))
    m.flowSecPerByte = 1.0 / (parsePositive("TCCL_FLOW_GBPS", *v) * 1e9);
  return m;
}

double reducedBytesFactor(Algorithm a, int n) {
  if (n <= 1) return 0;
  // The ring's and naive's schedules have O(n) ops per rank, and every rank does the
  // same: the ring reduces n-1 of the n chunks, naive every other rank's whole vector.
  // Their closed forms (checked against the schedules by select_test) save every
  // process 10 ms at its first auto call at 1,024 ranks.
  if (a == Algorithm::Ring) return (n - 1.0) / n;
  if (a == Algorithm::Naive) return n - 1.0;
  static std::mutex mu;
  static std::map<std::pair<int, int>, double> cache;
  const auto key = std::make_pair(static_cast<int>(a), n);
  {
    std::lock_guard<std::mutex> lk(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // A count every chunking here divides evenly for small worlds; one segment, so the
  // schedules stay small. Every rank for n <= 64, else a sample of them.
  const size_t count = size_t{720720} * static_cast<size_t>((n + 15) / 16);
  std::vector<int> ranks;
  for (int r = 0; r < n; r += (n <= 64 ? 1 : n / 16)) ranks.push_back(r);
  ranks.push_back(n - 1);
  double most = 0;
  for (int r : ranks) {
    const Schedule s = allreduceSchedule(a, r, n, count, count);
    size_t reduced = 0;
    for (const Op& op : s.ops) {
      if (op.type != OpType::Recv) continue;
      if (op.action == RecvAction::Reduce) reduced += op.range.count;
      if (op.thenSelf) reduced += op.range.count;
    }
    most = std::max(most, static_cast<double>(reduced) / static_cast<double>(count));
  }
  std::lock_guard<std::mutex> lk(mu);
  cache[key] = most;
  return most;
}

double hdPenalty(size_t bytes, const LinkModel& m) {
  return static_cast<double>(bytes) >= m.hdPenaltyFromBytes ? m.hdBandwidthPenalty : 1.0;
}

namespace {

// steps * alpha + bytesFactor * V * beta + reducedFactor * V * gamma.
double predict(int steps, double bytesFactor, double reducedFactor, size_t bytes,
               const LinkModel& m) {
  const double v = static_cast<double>(bytes);
  return steps * m.alphaSec + bytesFactor * v * m.betaSecPerByte +
         reducedFactor * v * m.gammaSecPerByte;
}

}  // namespace

double predictRingSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return predict(2 * (n - 1), 2.0 * (n - 1) / n, reducedBytesFactor(Algorithm::Ring, n), bytes, m);
}

double predictNaiveSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return predict(n - 1, n - 1.0, reducedBytesFactor(Algorithm::Naive, n), bytes, m);
}

double predictTreeSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return predict(treeSteps(n), treeMaxBytesFactor(n), reducedBytesFactor(Algorithm::Tree, n), bytes,
                 m);
}

double predictHalvingDoublingSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return predict(hdSteps(n), hdMaxBytesFactor(n) * hdPenalty(bytes, m),
                 reducedBytesFactor(Algorithm::HalvingDoubling, n), bytes, m);
}

double predictRecursiveDoublingSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return predict(rdSteps(n), rdMaxBytesFactor(n),
                 reducedBytesFactor(Algorithm::RecursiveDoubling, n), bytes, m);
}

namespace {

double predictFlatSec(Algorithm a, int n, size_t bytes, const LinkModel& m) {
  switch (a) {
    case Algorithm::Ring:
    case Algorithm::Hierarchical:  // one host, or one rank per host: the ring
      return predictRingSec(n, bytes, m);
    case Algorithm::Naive:
      return predictNaiveSec(n, bytes, m);
    case Algorithm::Tree:
      return predictTreeSec(n, bytes, m);
    case Algorithm::HalvingDoubling:
      return predictHalvingDoublingSec(n, bytes, m);
    case Algorithm::RecursiveDoubling:
      return predictRecursiveDoublingSec(n, bytes, m);
    default:
      return 0;
  }
}

// A flat algorithm's steps and busiest-rank bytes (multiple of V, hd's penalty in).
std::pair<int, double> flatShape(Algorithm a, int n, size_t bytes, const LinkModel& m) {
  switch (a) {
    case Algorithm::Ring:
      return {2 * (n - 1), 2.0 * (n - 1) / n};
    case Algorithm::Naive:
      return {n - 1, n - 1.0};
    case Algorithm::Tree:
      return {treeSteps(n), treeMaxBytesFactor(n)};
    case Algorithm::HalvingDoubling:
      return {hdSteps(n), hdMaxBytesFactor(n) * hdPenalty(bytes, m)};
    case Algorithm::RecursiveDoubling:
      return {rdSteps(n), rdMaxBytesFactor(n)};
    default:
      return {0, 0.0};
  }
}

double egressOf(const HostCosts& h, Algorithm a) {
  return h.egress[static_cast<size_t>(a) % h.egress.size()];
}

}  // namespace

HostCosts HostCosts::of(const HostLayout& layout) {
  HostCosts c;
  c.hosts = layout.hosts();
  c.maxLocal = layout.maxLocal();
  c.leaders = hierUsesLeaders(layout);
  // A count that every chunking here divides for small worlds; the factors are exact
  // then and within a few elements in a million otherwise.
  const size_t count = size_t{1} << 20;
  for (Algorithm a : allreduceAlgorithms()) {
    c.egress[static_cast<size_t>(a) % c.egress.size()] =
        static_cast<double>(hostEgressBytes(a, layout, count, 1)) / static_cast<double>(count);
  }
  return c;
}

double predictAllreduceSec(Algorithm a, int n, size_t bytes, const LinkModel& link,
                           const HostCosts* hosts) {
  if (n <= 1) return 0;
  LinkModel m = link;
  if (hosts != nullptr && m.cores > 0 && hosts->maxLocal > m.cores) {
    // More ranks than cores on a host: each step also waits to be scheduled.
    m.alphaSec *= std::sqrt(static_cast<double>(hosts->maxLocal) / m.cores);
  }
  if (hosts == nullptr || hosts->hosts <= 1) return predictFlatSec(a, n, bytes, m);
  const double v = static_cast<double>(bytes);
  const double e = egressOf(*hosts, a);
  if (a == Algorithm::Hierarchical) {
    if (hosts->maxLocal <= 1) return predictFlatSec(Algorithm::Ring, n, bytes, m);
    const double H = hosts->hosts;
    const double L = hosts->maxLocal;
    // Steps within hosts; the busiest rank's bytes (all its links) as a multiple of V.
    const double intraSteps = 2 * (L - 1);
    const double perRank =
        hosts->leaders ? 1 + 2 * (H - 1) / H : 2 * (L - 1) / L + 2 * (H - 1) / (H * L);
    return intraSteps * m.alphaSec + 2 * (H - 1) * m.interAlphaSec +
           std::max(e * m.interBetaSecPerByte, perRank * m.betaSecPerByte) * v +
           reducedBytesFactor(a, n) * v * m.gammaSecPerByte;
  }
  const auto [steps, perRank] = flatShape(a, n, bytes, m);
  if (steps == 0) return 0;
  // hd's measured penalty applies to whichever link bounds it.
  const double penalty = a == Algorithm::HalvingDoubling ? hdPenalty(bytes, m) : 1.0;
  return steps * m.interAlphaSec +
         std::max(e * penalty * m.interBetaSecPerByte, perRank * m.betaSecPerByte) * v +
         reducedBytesFactor(a, n) * v * m.gammaSecPerByte;
}

Algorithm chooseAllreduce(int n, size_t bytes, const LinkModel& m, std::string* why,
                          const HostCosts* hosts) {
  // In order of preference on a tie: the ring (bandwidth-optimal, one predictable
  // pattern), naive (folds in rank order), then the tree, hd, rd and hierarchical.
  static constexpr Algorithm kPreference[] = {Algorithm::Ring,
                                              Algorithm::Naive,
                                              Algorithm::Tree,
                                              Algorithm::HalvingDoubling,
                                              Algorithm::RecursiveDoubling,
                                              Algorithm::Hierarchical};
  const bool multi = hosts != nullptr && hosts->hosts > 1;
  const bool hier = hosts != nullptr && hosts->hierarchical();
  Algorithm pick = Algorithm::Ring;
  double best = predictAllreduceSec(Algorithm::Ring, n, bytes, m, hosts);
  for (Algorithm a : kPreference) {
    if (a == Algorithm::Hierarchical && !hier) continue;
    const double t = predictAllreduceSec(a, n, bytes, m, hosts);
    if (t < best) {
      best = t;
      pick = a;
    }
  }
  if (why != nullptr) {
    auto us = [&](Algorithm a) { return predictAllreduceSec(a, n, bytes, m, hosts) * 1e6; };
    char buf[384];
    int len = std::snprintf(
        buf, sizeof buf,
        "cost model: ring %.1f us, tree %.1f us, hd %.1f us, rd %.1f us, naive %.1f us",
        us(Algorithm::Ring), us(Algorithm::Tree), us(Algorithm::HalvingDoubling),
        us(Algorithm::RecursiveDoubling), us(Algorithm::Naive));
    if (hier && len > 0 && static_cast<size_t>(len) < sizeof buf) {
      len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", hier %.1f us",
                           us(Algorithm::Hierarchical));
    }
    if (len > 0 && static_cast<size_t>(len) < sizeof buf) {
      len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len),
                           " (alpha %.1f us, %.2f GB/s", m.alphaSec * 1e6, 1e-9 / m.betaSecPerByte);
    }
    if (multi && len > 0 && static_cast<size_t>(len) < sizeof buf) {
      len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len),
                           "; %d hosts, inter-host alpha %.1f us, %.2f GB/s", hosts->hosts,
                           m.interAlphaSec * 1e6, 1e-9 / m.interBetaSecPerByte);
    }
    if (len > 0 && static_cast<size_t>(len) < sizeof buf) {
      std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ")");
    }
    *why = buf;
  }
  return pick;
}

double predictTreeBroadcastSec(int n, size_t bytes, const LinkModel& m) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * (m.alphaSec + static_cast<double>(bytes) * m.betaSecPerByte);
}

double predictChainBroadcastSec(int n, size_t bytes, size_t segmentBytes, const LinkModel& m) {
  if (n <= 1) return 0;
  const size_t seg = std::max<size_t>(1, std::min(bytes, segmentBytes));
  const double k = bytes == 0 ? 1.0 : static_cast<double>((bytes + seg - 1) / seg);
  return (n - 2 + k) * (m.alphaSec + static_cast<double>(seg) * m.betaSecPerByte);
}

Algorithm chooseBroadcast(int n, size_t bytes, size_t segmentBytes, const LinkModel& m,
                          std::string* why) {
  const double tree = predictTreeBroadcastSec(n, bytes, m);
  const double chain = predictChainBroadcastSec(n, bytes, segmentBytes, m);
  const Algorithm pick = chain < tree ? Algorithm::Ring : Algorithm::Tree;
  if (why != nullptr) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "cost model: binomial tree %.1f us, pipelined chain %.1f us",
                  tree * 1e6, chain * 1e6);
    *why = buf;
  }
  return pick;
}

// ---- the pipeline segment of an all-reduce -------------------------------------------

size_t allreduceSegmentBytes(Algorithm a, int n, size_t bytes, const LinkModel& m, size_t cap) {
  cap = std::max<size_t>(1, cap);
  // Cutting finer overlaps a rank's receive, reduce and send on its own core; with more
  // ranks than cores (or the cores unknown) the CPU is the bottleneck and every extra
  // message costs it more (measured: docs/PERFORMANCE.md), so the default stays.
  if (n <= 1 || bytes == 0 || !(m.alphaSec > 0) || m.cores <= 0 || n > m.cores) return cap;
  double piece = 0;
  if (a == Algorithm::Ring) {
    piece = std::ceil(static_cast<double>(bytes) / n);
  } else if (a == Algorithm::HalvingDoubling) {
    piece = std::ceil(static_cast<double>(bytes) / 2);
  } else {
    return cap;
  }
  // k x alpha + c / k (c: the piece's wire and reduce time) is least at the integer k
  // next to sqrt(c / alpha): k = floor of it, or one more where k (k + 1) < c / alpha.
  const double ratio = piece * (m.betaSecPerByte + m.gammaSecPerByte) / m.alphaSec;
  double k = std::max(1.0, std::floor(std::sqrt(ratio)));
  if (k * (k + 1) < ratio) k += 1;
  constexpr double kGrain = 4096;
  const double seg = std::ceil(std::ceil(piece / k) / kGrain) * kGrain;
  return seg >= static_cast<double>(cap) ? cap : static_cast<size_t>(seg);
}

// ---- several sockets per peer ----------------------------------------------------------

double predictFlowsSec(int flows, size_t bytes, const LinkModel& m) {
  const double k = std::max(1, flows);
  const double perByte = std::max(m.interBetaSecPerByte, m.flowSecPerByte / k);
  return m.interAlphaSec + (k - 1) * m.alphaSec + static_cast<double>(bytes) * perByte;
}

StripeChoice chooseStriping(int nsocks, size_t segmentBytes, const LinkModel& m, std::string* why,
                            uint64_t floorBytes) {
  StripeChoice c;
  const int k = std::max(1, nsocks);
  const size_t seg = std::max<size_t>(1, segmentBytes);
  c.oneFlowSec = predictFlowsSec(1, seg, m);
  c.kFlowsSec = predictFlowsSec(k, seg, m);
  // Seconds per byte that K flows save over one.
  const double gain = std::max(m.interBetaSecPerByte, m.flowSecPerByte) -
                      std::max(m.interBetaSecPerByte, m.flowSecPerByte / k);
  if (k > 1 && gain > 0) {
    const double t = std::ceil((k - 1) * m.alphaSec / gain);
    const double floor = static_cast<double>(std::max<uint64_t>(1, floorBytes));
    if (std::max(t, floor) < static_cast<double>(seg) + 1) {
      c.stripe = true;
      c.minBytes = static_cast<uint64_t>(std::max(t, floor));
    }
  }
  if (why != nullptr) {
    char buf[400];
    if (k <= 1) {
      std::snprintf(buf, sizeof buf, "one socket per peer (TCCL_NSOCKS=1)");
    } else if (c.stripe) {
      std::snprintf(buf, sizeof buf,
                    "striping messages of %llu bytes and more over %d sockets (cost model: a "
                    "%zu-byte segment takes %.1f us on one flow, %.1f us on %d; flow %.3f GB/s, "
                    "link %.3f GB/s, alpha %.1f us)",
                    static_cast<unsigned long long>(c.minBytes), k, seg, c.oneFlowSec * 1e6,
                    c.kFlowsSec * 1e6, k, m.flowSecPerByte > 0 ? 1e-9 / m.flowSecPerByte : 0.0,
                    1e-9 / m.interBetaSecPerByte, m.alphaSec * 1e6);
    } else if (gain <= 0) {
      std::snprintf(buf, sizeof buf,
                    "not striping over the %d sockets: no per-flow limit below the link's %.3f "
                    "GB/s is known (TCCL_FLOW_GBPS%s), so %d flows are no faster than one",
                    k, 1e-9 / m.interBetaSecPerByte,
                    m.flowSecPerByte > 0 ? " is not below it" : " unset", k);
    } else {
      std::snprintf(buf, sizeof buf,
                    "not striping over the %d sockets: a %zu-byte segment takes %.1f us on one "
                    "flow and %.1f us on %d (the extra sockets cost more than they save)",
                    k, seg, c.oneFlowSec * 1e6, c.kFlowsSec * 1e6, k);
    }
    *why = buf;
  }
  return c;
}

// ---- the uneven collectives -----------------------------------------------------------

namespace {

double unevenSec(size_t n, double busiestBytes, double perByte, const LinkModel& m) {
  return n > 1 ? static_cast<double>(n - 1) * m.alphaSec + busiestBytes * perByte : 0;
}

// max over r of (sum of counts but counts[(r + shift) mod n]).
double busiestRing(const std::vector<size_t>& c, size_t shift) {
  double total = 0, most = 0;
  for (size_t x : c) total += static_cast<double>(x);
  for (size_t r = 0; r < c.size(); ++r) {
    most = std::max(most, total - static_cast<double>(c[(r + shift) % c.size()]));
  }
  return most;
}

}  // namespace

double predictAllGatherVSec(const std::vector<size_t>& counts, size_t e, const LinkModel& m) {
  return unevenSec(counts.size(), busiestRing(counts, 1) * static_cast<double>(e), m.betaSecPerByte,
                   m);
}

double predictReduceScatterVSec(const std::vector<size_t>& counts, size_t e, const LinkModel& m) {
  return unevenSec(counts.size(), busiestRing(counts, 0) * static_cast<double>(e),
                   m.betaSecPerByte + m.gammaSecPerByte, m);
}

double predictAllToAllVSec(const std::vector<std::vector<size_t>>& sends, size_t e,
                           const LinkModel& m) {
  const size_t n = sends.size();
  double most = 0;
  for (size_t r = 0; r < n; ++r) {
    double out = 0, in = 0;
    for (size_t p = 0; p < n; ++p) {
      if (p == r) continue;
      out += static_cast<double>(sends[r][p] * e + 8);
      in += static_cast<double>(sends[p][r] * e + 8);
    }
    most = std::max({most, out, in});
  }
  return unevenSec(n, most, m.betaSecPerByte, m);
}

double predictRootedVSec(const std::vector<size_t>& counts, int root, size_t e,
                         const LinkModel& m) {
  double bytes = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (static_cast<int>(p) != root) bytes += static_cast<double>(counts[p] * e + 8);
  }
  return unevenSec(counts.size(), bytes, m.betaSecPerByte, m);
}

}  // namespace tccl::algo
