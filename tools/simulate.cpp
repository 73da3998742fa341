// tccl simulate: predicted nccl-tests tables for clusters we cannot rent, from the real
// schedules replayed on SimGrid (sim/, docs/simulate.md).
//
//   tccl simulate --hosts 512 --ranks-per-host 8 --gbps 100 -b 1M -e 64M --algo all
//   tccl simulate --platform my_cluster.xml --ranks-per-host 2 --algo auto
//
// Per size and algorithm: one replay of every rank's schedule; time = the last rank's
// end, algbw and busbw as tccl bench (size = the larger buffer per rank, the table's
// busBwFactor), bytes/rank = the most payload any rank sent. Per size of an all-reduce
// also what `auto` (the cost model of src/algorithms/select.cpp, told the platform's
// figures) would choose, against the fastest replay.
//
// Built into its own program, tccl-simulate (simulate_main.cpp), which `tccl simulate`
// execs: only that program links SimGrid.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "algorithms/collective_spec.hpp"
#include "algorithms/select.hpp"
#include "cli.hpp"
#include "sim/platform.hpp"
#include "sim/replay.hpp"
#include "subcommands.hpp"

namespace tccl::cli {

namespace {

const std::vector<std::string> kValueOptions = {"world",
                                                "hosts",
                                                "ranks-per-host",
                                                "cores",
                                                "gbps",
                                                "latency-us",
                                                "loopback-gbps",
                                                "loopback-latency-us",
                                                "reduce-gbps",
                                                "overhead-us",
                                                "copy-gbps",
                                                "fat-tree",
                                                "platform",
                                                "sizes",
                                                "minbytes",
                                                "maxbytes",
                                                "stepfactor",
                                                "dtype",
                                                "op",
                                                "root",
                                                "algo",
                                                "segment-bytes",
                                                "simgrid-cfg"};
const std::vector<std::string> kFlags = {"csv", "no-replay-auto"};
const std::map<std::string, std::string> kShort = {{"-b", "--minbytes"},
                                                   {"-e", "--maxbytes"},
                                                   {"-f", "--stepfactor"},
                                                   {"-d", "--dtype"},
                                                   {"-r", "--root"}};

// The largest world a replay takes (memory: the ring's 2(N-1) ops per rank).
constexpr int64_t kMaxSimWorld = 65536;

struct SimConfig {
  sim::ClusterSpec cluster;
  std::string platform;
  int world = 0;
  int ranksPerHost = 1;
  algo::Collective coll = algo::Collective::AllReduce;
  std::vector<Algorithm> algos;
  bool withAuto = false;  // --algo auto or all: report the cost model's choice
  std::vector<uint64_t> sizes;
  DataType dtype = DataType::Float32;
  int root = 0;
  size_t segmentBytes = 1 << 20;
  double reduceBytesPerSec = 20e9;
  double overheadSec = 0;
  double copyBytesPerSec = 0;  // 0: sends cost no CPU per byte
  std::vector<std::string> simgridCfg;
  bool csv = false;
  bool replayAuto = true;  // replay auto's pick when --algo does not list it
};

std::vector<uint64_t> sweepSizes(const Args& a) {
  std::vector<uint64_t> sizes;
  if (auto list = a.get("sizes")) {
    if (a.get("minbytes") || a.get("maxbytes") || a.get("stepfactor"))
      throw UsageError{"--sizes and -b/-e/-f are exclusive"};
    return parseSizeList(*list);
  }
  const uint64_t lo = a.getSize("minbytes", 1 << 20);
  const uint64_t hi = a.getSize("maxbytes", 64 << 20);
  const auto f = static_cast<uint64_t>(a.getInt("stepfactor", 4, 2, int64_t{1} << 30));
  if (lo > hi) throw UsageError{"-b/--minbytes is larger than -e/--maxbytes"};
  for (uint64_t s = std::max<uint64_t>(lo, 1); s <= hi; s *= f) {
    sizes.push_back(s);
    if (s > hi / f) break;
  }
  return sizes;
}

// Gb/s (1e9 bits) -> bytes per second, positive and finite.
double rateOption(const Args& a, const std::string& name, double dfltGbps) {
  const double v = a.getDouble(name, dfltGbps);
  if (!(v > 0) || v > 1e6) throw UsageError{"--" + name + " must be in (0, 1e6]"};
  return v;
}

double microsOption(const Args& a, const std::string& name, double dflt) {
  const double v = a.getDouble(name, dflt);
  if (!(v >= 0) || v > 1e7) throw UsageError{"--" + name + " must be in [0, 1e7] us"};
  return v * 1e-6;
}

SimConfig parseSimulate(const Args& a) {
  SimConfig c;
  c.platform = a.get("platform", "");
  c.cluster.fatTree = a.get("fat-tree", "");
  if (!c.platform.empty() && !c.cluster.fatTree.empty())
    throw UsageError{"--platform and --fat-tree are exclusive"};
  c.ranksPerHost = static_cast<int>(a.getInt("ranks-per-host", 1, 1, 4096));
  c.cluster.hosts = static_cast<int>(a.getInt("hosts", 0, 0, kMaxSimWorld));
  c.world = static_cast<int>(a.getInt("world", 0, 0, kMaxSimWorld));
  if (c.world == 0 && c.cluster.hosts == 0 && c.cluster.fatTree.empty() && c.platform.empty())
    c.world = 8;
  if (c.cluster.hosts == 0 && c.cluster.fatTree.empty() && c.platform.empty())
    c.cluster.hosts = (c.world + c.ranksPerHost - 1) / c.ranksPerHost;
  if (c.world == 0 && c.cluster.hosts > 0) {
    if (int64_t{c.cluster.hosts} * c.ranksPerHost > kMaxSimWorld)
      throw UsageError{"--hosts x --ranks-per-host is over " + std::to_string(kMaxSimWorld)};
    c.world = c.cluster.hosts * c.ranksPerHost;
  }
  c.cluster.cores = static_cast<int>(a.getInt("cores", c.ranksPerHost, 1, 4096));
  c.cluster.nicBytesPerSec = rateOption(a, "gbps", 25) * 1e9 / 8;
  c.cluster.latencySec = microsOption(a, "latency-us", 5);
  c.cluster.loopbackBytesPerSec = rateOption(a, "loopback-gbps", 64) * 1e9 / 8;
  c.cluster.loopbackLatencySec = microsOption(a, "loopback-latency-us", 1);
  c.reduceBytesPerSec = a.getDouble("reduce-gbps", 20) * 1e9;
  if (!(c.reduceBytesPerSec > 0)) throw UsageError{"--reduce-gbps must be positive (GB/s)"};
  c.overheadSec = microsOption(a, "overhead-us", 0);
  c.copyBytesPerSec = a.getDouble("copy-gbps", 0) * 1e9;
  if (!(c.copyBytesPerSec >= 0)) throw UsageError{"--copy-gbps must not be negative (GB/s)"};
  c.sizes = sweepSizes(a);
  c.dtype = a.getDataType("dtype", DataType::Float32);
  const std::string opArg = a.get("op", "allreduce");
  const auto coll = algo::parseCollective(opArg);
  if (!coll)
    throw UsageError{"unknown --op " + quoted(opArg) + " (" + algo::collectiveNames() + ")"};
  c.coll = *coll;
  if (algo::spec(c.coll).uneven)
    throw UsageError{"--op " + quoted(opArg) +
                     ": the uneven collectives need per-rank counts, which simulate does not take"};
  c.root = static_cast<int>(a.getInt("root", 0, 0, kMaxSimWorld - 1));
  const int64_t seg = a.getInt("segment-bytes", 1 << 20, 1, int64_t{1} << 30);
  c.segmentBytes = static_cast<size_t>(seg);
  const algo::CollectiveSpec& s = algo::spec(c.coll);
  const std::string algoArg = a.get("algo", "all");
  if (algoArg == "all") {
    c.algos = s.algorithms.empty() ? std::vector<Algorithm>{s.defaultAlgorithm} : s.algorithms;
    c.withAuto = s.autoChoice == algo::AutoChoice::Allreduce;
  } else {
    for (const std::string& item : splitList("--algo", algoArg)) {
      const auto al = parseAlgorithm(item);
      if (!al) throw UsageError{"unknown algorithm " + quoted(item)};
      if (*al == Algorithm::Auto) {
        c.withAuto = true;
        continue;
      }
      if (!algo::allows(c.coll, *al))
        throw UsageError{std::string(s.name) + " has no algorithm " + quoted(item)};
      c.algos.push_back(*al);
    }
    if (c.withAuto && s.autoChoice != algo::AutoChoice::Allreduce) {
      c.withAuto = false;
      c.algos.push_back(s.defaultAlgorithm);
    }
  }
  if (auto cfg = a.get("simgrid-cfg")) c.simgridCfg = splitList("--simgrid-cfg", *cfg);
  c.csv = a.flag("csv");
  c.replayAuto = !a.flag("no-replay-auto");
  return c;
}

// The cost model told what the platform is: the intra-host route (rank 0's host to
// itself) and the inter-host one (rank 0's host to the last rank's).
algo::LinkModel modelOf(const SimConfig& c, const sim::RankPlacement& p) {
  algo::LinkModel m;
  const sim::RouteFigures intra = sim::routeBetween(p.hostOfRank.front(), p.hostOfRank.front());
  const sim::RouteFigures inter = sim::routeBetween(p.hostOfRank.front(), p.hostOfRank.back());
  m.alphaSec = intra.latencySec + c.overheadSec;
  m.betaSecPerByte = std::isfinite(intra.bytesPerSec) ? 1 / intra.bytesPerSec : 0;
  m.interAlphaSec = inter.latencySec + c.overheadSec;
  m.interBetaSecPerByte = std::isfinite(inter.bytesPerSec) ? 1 / inter.bytesPerSec : 0;
  m.gammaSecPerByte = 1 / c.reduceBytesPerSec;
  m.cores = sim::coreCount(p.hostOfRank.front());
  return m;
}

struct SimRow {
  uint64_t size = 0, count = 0;
  std::string algo;
  double seconds = 0, algbw = 0, busbw = 0, wall = 0;
  uint64_t bytesPerRank = 0, messages = 0;
};

// What a replay's child process sends back over its pipe.
struct ChildReport {
  double seconds = 0, wall = 0;
  uint64_t bytesPerRank = 0, messages = 0;
  int failed = 0;  // 1: `kind` and `what` say why
  ErrorKind kind = ErrorKind::System;
  char what[2048] = {};
};

// The replay in this (child) process.
ChildReport replayHere(const sim::ReplayConfig& rc) {
  ChildReport rep;
  try {
    const sim::ReplayResult r = sim::replay(rc);
    rep.seconds = r.seconds;
    rep.wall = r.wallSeconds;
    for (const sim::RankStats& s : r.ranks)
      rep.bytesPerRank = std::max(rep.bytesPerRank, s.bytesSent);
    rep.messages = r.messages;
  } catch (const Error& e) {
    rep.failed = 1;
    rep.kind = e.kind();
    std::snprintf(rep.what, sizeof rep.what, "%s", e.cause().c_str());
  } catch (const std::exception& e) {
    rep.failed = 1;
    std::snprintf(rep.what, sizeof rep.what, "%s", e.what());
  }
  return rep;
}

// Every replay runs in a child forked from this process, which has built the platform
// but never run the engine: each starts at simulated time 0 on the same engine state.
// (In one process, a replay starts at the clock the previous one left, and
// simultaneous events can then tie differently: naive at 33 ranks, 8 MiB, moved by
// 0.6 % after a 1 MiB replay.) A child killed by a signal (the OOM killer's SIGKILL) is
// named with what it was replaying.
ChildReport replayInChild(const sim::ReplayConfig& rc, const std::string& what) {
  int fds[2];
  if (pipe(fds) != 0)
    throwError(ErrorKind::System, std::string("simulate: pipe: ") + strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throwError(ErrorKind::System, std::string("simulate: fork: ") + strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    const ChildReport rep = replayHere(rc);
    // No destructors: the engine and the actors die with the process.
    _exit(writeAll(fds[1], &rep, sizeof rep) ? 0 : 3);
  }
  close(fds[1]);
  ChildReport rep;
  char* p = reinterpret_cast<char*>(&rep);
  size_t got = 0;
  while (got < sizeof rep) {
    const ssize_t r = read(fds[0], p + got, sizeof rep - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    throwError(ErrorKind::System,
               "simulate: the replay of " + what + " was killed by signal " + std::to_string(sig) +
                   " (" + strsignal(sig) + ")" +
                   (sig == SIGKILL ? "; out of memory? SimGrid holds about 2.5 KB per message "
                                     "in flight (naive: N(N-1) at once)"
                                   : ""));
  }
  if (got != sizeof rep || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throwError(ErrorKind::System, "simulate: the replay of " + what + " ended without a result");
  }
  if (rep.failed) throwError(rep.kind, rep.what);
  return rep;
}

SimRow runOne(const SimConfig& c, const sim::RankPlacement& p, uint64_t sizeBytes, Algorithm al) {
  const int n = static_cast<int>(p.hostOfRank.size());
  const size_t elem = dataTypeSize(c.dtype);
  const size_t in1 = algo::inputElems(c.coll, 1, n, c.root, c.root);
  const size_t out1 = algo::outputElems(c.coll, 1, n, c.root, c.root);
  const size_t blocks = std::max(in1, out1);
  sim::ReplayConfig rc;
  rc.collective = c.coll;
  rc.algorithm = al;
  rc.count =
      blocks == 0 ? 0 : std::max<size_t>(1, std::max<size_t>(blocks, sizeBytes / elem) / blocks);
  rc.elemSize = elem;
  rc.segElems = std::max<size_t>(1, c.segmentBytes / elem);
  rc.root = c.root;
  rc.reduceBytesPerSec = c.reduceBytesPerSec;
  rc.messageOverheadSec = c.overheadSec;
  rc.copyBytesPerSec = c.copyBytesPerSec;
  rc.layout = &p.layout;
  rc.hostOfRank = p.hostOfRank;
  SimRow row;
  row.count = blocks * rc.count;
  row.size = row.count * elem;
  row.algo = std::string(toString(al));
  const ChildReport r = replayInChild(rc, row.algo + " at " + std::to_string(row.size) + " B");
  row.seconds = r.seconds;
  row.algbw = r.seconds > 0 ? static_cast<double>(row.size) / r.seconds / 1e9 : 0;
  row.busbw = row.algbw * algo::busBwFactor(c.coll, n);
  row.bytesPerRank = r.bytesPerRank;
  row.messages = r.messages;
  row.wall = r.wall;
  return row;
}

void printRow(const SimConfig& c, const SimRow& r) {
  const auto dt = std::string(toString(c.dtype));
  if (c.csv) {
    std::printf("%llu,%llu,%s,%s,%.3f,%.6f,%.6f,%llu,%llu,%.3f\n",
                static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.count),
                dt.c_str(), r.algo.c_str(), r.seconds * 1e6, r.algbw, r.busbw,
                static_cast<unsigned long long>(r.bytesPerRank),
                static_cast<unsigned long long>(r.messages), r.wall);
  } else {
    std::printf("  %12llu %12llu %8s %10s %14.2f %11.3f %11.3f %14llu %12llu %9.2f\n",
                static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.count),
                dt.c_str(), r.algo.c_str(), r.seconds * 1e6, r.algbw, r.busbw,
                static_cast<unsigned long long>(r.bytesPerRank),
                static_cast<unsigned long long>(r.messages), r.wall);
  }
  std::fflush(stdout);
}

std::string describePlatform(const SimConfig& c, const sim::RankPlacement& p) {
  char buf[512];
  if (!c.platform.empty()) {
    std::snprintf(buf, sizeof buf, "platform %s, %s", c.platform.c_str(),
                  p.layout.describe().c_str());
    return buf;
  }
  std::snprintf(
      buf, sizeof buf,
      "%s, %s, NIC %.4g Gb/s full duplex, latency %.4g us host to host, loopback %.4g "
      "Gb/s %.4g us, %d cores per host, reduction %.4g GB/s per core, overhead %.4g us",
      c.cluster.fatTree.empty() ? "one switch" : ("fat tree " + c.cluster.fatTree).c_str(),
      p.layout.describe().c_str(), c.cluster.nicBytesPerSec * 8 / 1e9, c.cluster.latencySec * 1e6,
      c.cluster.loopbackBytesPerSec * 8 / 1e9, c.cluster.loopbackLatencySec * 1e6, c.cluster.cores,
      c.reduceBytesPerSec / 1e9, c.overheadSec * 1e6);
  return buf;
}

}  // namespace

int simulateMain(int argc, char** argv, int first) {
  std::vector<std::string> words;
  for (int i = first; i < argc; ++i) {
    auto it = kShort.find(argv[i]);
    words.push_back(it == kShort.end() ? argv[i] : it->second);
  }
  std::vector<char*> ptrs;
  for (auto& w : words) ptrs.push_back(w.data());
  const Args a(static_cast<int>(ptrs.size()), ptrs.data(), 0, kValueOptions, kFlags);
  const SimConfig c = parseSimulate(a);

  try {
    sim::startEngine(c.simgridCfg);
  } catch (const std::exception& e) {  // SimGrid's own refusal of a --simgrid-cfg item
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw UsageError{"--simgrid-cfg: " + why};
  }
  std::vector<simgrid::s4u::Host*> hosts;
  try {
    hosts = c.platform.empty() ? sim::buildCluster(c.cluster) : sim::loadPlatform(c.platform);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  } catch (const std::exception& e) {  // SimGrid's parse errors
    throw UsageError{"--platform " + quoted(c.platform) + ": " + e.what()};
  }
  const int world = c.world > 0 ? c.world : static_cast<int>(hosts.size()) * c.ranksPerHost;
  if (world > kMaxSimWorld) throw UsageError{"over " + std::to_string(kMaxSimWorld) + " ranks"};
  sim::RankPlacement place;
  try {
    place = sim::placeRanks(hosts, world, c.ranksPerHost);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  if (algo::spec(c.coll).rooted && c.root >= world)
    throw UsageError{"--root must be below the world size " + std::to_string(world)};

  const algo::LinkModel model = modelOf(c, place);
  const algo::HostCosts costs = algo::HostCosts::of(place.layout);
  std::printf("# tccl simulate: %s, %d ranks on %s\n", std::string(algo::spec(c.coll).name).c_str(),
              world, describePlatform(c, place).c_str());
  std::printf("# SimGrid replay of every rank's schedule; segment %zu B; time = last rank done\n",
              c.segmentBytes);
  if (c.csv) {
    std::printf(
        "size,count,type,algo,time_us,algbw_gbps,busbw_gbps,bytes_per_rank,messages,wall_s\n");
  } else {
    std::printf("# %12s %12s %8s %10s %14s %11s %11s %14s %12s %9s\n", "size", "count", "type",
                "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "bytes/rank", "messages",
                "wall(s)");
  }
  for (uint64_t size : c.sizes) {
    std::map<Algorithm, SimRow> rows;
    for (Algorithm al : c.algos) {
      rows[al] = runOne(c, place, size, al);
      printRow(c, rows[al]);
    }
    if (!c.withAuto) continue;
    const uint64_t bytes = algo::inputBytes(c.coll, 1, dataTypeSize(c.dtype), world, 0, 0) *
                           std::max<uint64_t>(1, size / dataTypeSize(c.dtype));
    std::string why;
    const Algorithm pick = algo::chooseAllreduce(world, bytes, model, &why, &costs);
    if (!rows.count(pick) && !c.replayAuto) {
      std::printf("# %llu B: auto picks %s (%s); not replayed (--no-replay-auto)\n",
                  static_cast<unsigned long long>(size), std::string(toString(pick)).c_str(),
                  why.c_str());
      continue;
    }
    if (!rows.count(pick)) {
      rows[pick] = runOne(c, place, size, pick);
      rows[pick].algo = "auto:" + rows[pick].algo;
      printRow(c, rows[pick]);
    }
    const SimRow* best = nullptr;
    for (const auto& [al, row] : rows) {
      if (!best || row.seconds < best->seconds) best = &row;
    }
    const double loss = best->seconds > 0 ? rows[pick].seconds / best->seconds - 1 : 0;
    std::printf("# %llu B: auto picks %s (%s); fastest replay: %s; auto's pick is %.1f %% slower\n",
                static_cast<unsigned long long>(size), std::string(toString(pick)).c_str(),
                why.c_str(), best->algo.c_str(), loss * 100);
  }
  return 0;
}

}  // namespace tccl::cli
