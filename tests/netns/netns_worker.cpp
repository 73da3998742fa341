// Worker of the network-namespace cluster tests (tests/netns/netns_test.sh): one rank of
// a job whose ranks live in several network namespaces ("hosts"), started by
// `tccl launch` (rank, world and store from the environment: Communicator::fromEnv).
// TCCL_NETNS_HOST names the host this rank runs on; the ranks exchange it, so the
// checks below know the real layout whatever rank numbering the launcher chose.
//
//   collectives ALGOS        all-reduce with each algorithm of ALGOS (comma list) and the
//                            other collectives, exact integer data; every rank checks
//   bytes ALGO COUNT IFACE   one int32 all-reduce of COUNT elements between two reads of
//                            each host's interface counters (/sys/class/net, read inside
//                            the namespace); rank 0 compares, per host, the bytes that
//                            left and entered through IFACE with the algorithm's expected
//                            inter-host bytes, and checks the other interfaces stayed quiet
//                            (ALGO auto: prints "auto chose X" and expects X's bytes)
//   timing COUNT REPS MBIT MINRATIO
//                            median time of ring and naive all-reduce over rate-limited
//                            links: both no faster than their bytes allow, naive/ring above
//                            MINRATIO
//   stripes COUNT REPS       ring all-reduce of COUNT int32 (exact data, and each rank's
//                            payload bytes equal to the ring's 2(N-1)/N x V), REPS times;
//                            rank 0 prints "stripes: nsocks=K ... median S s busbw G GB/s"
//                            (several sockets per peer, docs/nsocks.md)
//   wait-go DIR LATE_MS HOST writes DIR/ready.<rank> and DIR/pid.<pid> (= rank) once its
//                            listener is open, waits for DIR/go, then runs collectives that
//                            connect every pair (strangers are knocking on HOST meanwhile;
//                            the other hosts' ranks start LATE_MS later)
//   stranger ADDR PORT MODE TARGET WORLD JOBID SECONDS
//                            not a rank: a process of no job connects to ADDR:PORT and
//                            sends garbage (MODE garbage), or claims to be rank 0 of job
//                            JOBID without a key (nokey) or with a wrong one (wrongkey:
//                            it answers the rank's challenge), then reads until the rank
//                            closes the connection. Exit 0: closed within SECONDS
//   vanish DIR HOST          one all-reduce, then DIR/ready.<rank>; the ranks of HOST wait
//                            for DIR/end and leave; the others wait for DIR/down (the test
//                            dropped HOST's link) and run an all-reduce that must fail,
//                            printing "vanish: failed after S s: <error>"
//   has-algo NAME            exit 0 if this build implements all-reduce algorithm NAME
//
// Exit status 0 means every check passed; the first failure is printed with its figures.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/expected_bytes.hpp"
#include "algorithms/allreduce.hpp"
#include "algorithms/allreduce_algos.hpp"
#include "algorithms/chunking.hpp"
#include "auth/auth.hpp"
#include "base/config.hpp"
#include "tccl/tccl.hpp"
#include "transport/wire.hpp"

using namespace tccl;
namespace fs = std::filesystem;

namespace {

int gRank = -1;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[netns worker rank " << gRank << "] CHECK FAILED: " << msg << std::endl;
  std::exit(1);
}

void check(bool ok, const std::string& msg) {
  if (!ok) die(msg);
}

std::string envOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// ---- the job's layout --------------------------------------------------------------

struct Job {
  Communicator comm;
  int rank = 0;
  int n = 0;
  std::vector<int64_t> hostOf;  // hostOf[r]: TCCL_NETNS_HOST of rank r
  int hosts = 0;
  // The lowest rank of each host reads that host's interface counters.
  bool reporter() const {
    for (int r = 0; r < rank; ++r)
      if (hostOf[r] == hostOf[rank]) return false;
    return true;
  }
};

Job joinJob() {
  Job job{Communicator::fromEnv(), 0, 0, {}, 0};
  job.rank = job.comm.rank();
  job.n = job.comm.size();
  gRank = job.rank;
  int64_t mine = std::stoll(envOr("TCCL_NETNS_HOST", "-1"));
  check(mine >= 0, "TCCL_NETNS_HOST is not set");
  job.hostOf.assign(static_cast<size_t>(job.n), -1);
  job.comm.allGather(&mine, job.hostOf.data(), 1, DataType::Int64);
  job.hosts = static_cast<int>(*std::max_element(job.hostOf.begin(), job.hostOf.end()) + 1);
  return job;
}

// ---- exact data --------------------------------------------------------------------

int32_t valueOf(int r, size_t i) {
  return static_cast<int32_t>((static_cast<size_t>(r) * 7 + i * 13) % 101) - 50;
}

int32_t sumOf(int n, size_t i) {
  int32_t s = 0;
  for (int r = 0; r < n; ++r) s += valueOf(r, i);
  return s;
}

uint8_t pattern(int owner, size_t block, size_t byte) {
  return static_cast<uint8_t>(
      (owner * 131 + static_cast<int>(block) * 17 + static_cast<int>(byte % 251) * 7 + 1) & 0xFF);
}

void allreduceChecked(Job& job, Algorithm algo, size_t count) {
  std::vector<int32_t> in(count), out(count + 1, -12345);
  for (size_t i = 0; i < count; ++i) in[i] = valueOf(job.rank, i);
  CollectiveOptions o;
  o.algorithm = algo;
  job.comm.allreduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum, o);
  const std::string what =
      "allreduce " + std::string(toString(algo)) + " count " + std::to_string(count) + ": ";
  check(algo == Algorithm::Auto || job.comm.lastCall().algorithm == toString(algo),
        what + "ran " + job.comm.lastCall().algorithm);
  for (size_t i = 0; i < count; ++i) {
    if (out[i] != sumOf(job.n, i))
      die(what + "index " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
          std::to_string(sumOf(job.n, i)));
  }
  check(out[count] == -12345, what + "wrote past the end");
}

int collectivesMain(Job& job, const std::string& algos) {
  const size_t N = static_cast<size_t>(job.n), R = static_cast<size_t>(job.rank);
  std::stringstream ss(algos);
  std::string name;
  std::vector<std::string> done;
  while (std::getline(ss, name, ',')) {
    auto a = parseAlgorithm(name);
    check(a.has_value(), "unknown algorithm '" + name + "'");
    for (size_t count : {size_t{1}, size_t{13}, N * 65536 + 5}) allreduceChecked(job, *a, count);
    done.push_back(name);
  }
  // The other collectives, whatever algorithm Auto picks for them.
  const size_t c = 4099;  // bytes per block, odd on purpose
  std::vector<uint8_t> mine(c), all(N * c);
  for (size_t j = 0; j < c; ++j) mine[j] = pattern(job.rank, 0, j);
  job.comm.allGather(mine.data(), all.data(), c, DataType::UInt8);
  for (size_t p = 0; p < N; ++p)
    for (size_t j = 0; j < c; ++j)
      check(all[p * c + j] == pattern(static_cast<int>(p), 0, j),
            "allgather block " + std::to_string(p) + " byte " + std::to_string(j));

  const int root = job.n - 3 >= 0 ? job.n - 3 : 0;
  std::vector<uint8_t> b(c);
  if (job.rank == root)
    for (size_t j = 0; j < c; ++j) b[j] = pattern(root, 7, j);
  job.comm.broadcast(b.data(), c, DataType::UInt8, root);
  for (size_t j = 0; j < c; ++j)
    check(b[j] == pattern(root, 7, j), "broadcast byte " + std::to_string(j));

  std::vector<uint8_t> send(N * c), recv(N * c);
  for (size_t p = 0; p < N; ++p)
    for (size_t j = 0; j < c; ++j) send[p * c + j] = pattern(job.rank, p, j);
  job.comm.allToAll(send.data(), recv.data(), c, DataType::UInt8);
  for (size_t p = 0; p < N; ++p)
    for (size_t j = 0; j < c; ++j)
      check(recv[p * c + j] == pattern(static_cast<int>(p), R, j),
            "alltoall block " + std::to_string(p) + " byte " + std::to_string(j));

  const size_t rc = 1031;  // reduce-scatter elements per rank
  std::vector<int32_t> rin(N * rc), rout(rc);
  for (size_t i = 0; i < N * rc; ++i) rin[i] = valueOf(job.rank, i);
  job.comm.reduceScatter(rin.data(), rout.data(), rc, DataType::Int32, ReduceOp::Sum);
  for (size_t i = 0; i < rc; ++i)
    check(rout[i] == sumOf(job.n, R * rc + i), "reduce_scatter index " + std::to_string(i));
  job.comm.barrier();
  std::cout << "rank " << job.rank << " (host " << job.hostOf[R]
            << "): collectives correct: allreduce ";
  for (auto& d : done) std::cout << d << " ";
  std::cout << "+ allgather broadcast alltoall reduce_scatter barrier" << std::endl;
  return 0;
}

// ---- interface counters ------------------------------------------------------------

struct IfaceBytes {
  int64_t tx = 0, rx = 0;
};

int64_t readCounter(const fs::path& p) {
  std::ifstream f(p);
  int64_t v = -1;
  f >> v;
  check(f.good() || f.eof(), "cannot read " + p.string());
  return v;
}

// Every interface of this namespace except loopback (sorted by name). Traffic between
// ranks of the same host goes through loopback even when addressed to the veth's IP.
std::map<std::string, IfaceBytes> readInterfaces() {
  std::map<std::string, IfaceBytes> m;
  for (auto& e : fs::directory_iterator("/sys/class/net")) {
    const std::string name = e.path().filename().string();
    if (name == "lo") continue;
    m[name] = {readCounter(e.path() / "statistics/tx_bytes"),
               readCounter(e.path() / "statistics/rx_bytes")};
  }
  return m;
}

// Payload bytes each host's ranks send to ranks of other hosts, from the schedules the
// algorithm builds (exactly what the executor runs), and from the closed forms.
std::vector<int64_t> scheduleInterHostBytes(const Job& job, Algorithm a, size_t count,
                                            size_t elem) {
  std::vector<int64_t> perHost(static_cast<size_t>(job.hosts), 0);
  std::vector<std::string> keys;
  for (int64_t h : job.hostOf) keys.push_back(std::to_string(h));
  const algo::HostLayout layout = algo::HostLayout::fromKeys(keys);
  for (int r = 0; r < job.n; ++r) {
    algo::Schedule s = algo::allreduceSchedule(a, r, job.n, count, count, &layout);
    for (const auto& op : s.ops)
      if (op.type == algo::OpType::Send && job.hostOf[op.peer] != job.hostOf[r])
        perHost[job.hostOf[r]] += static_cast<int64_t>(op.range.count * elem);
  }
  return perHost;
}

// Closed forms (docs/testing-netns.md derives them). Empty: no closed form here.
std::vector<int64_t> closedFormInterHostBytes(const Job& job, const std::string& algo, size_t count,
                                              size_t elem) {
  const size_t H = static_cast<size_t>(job.hosts);
  std::vector<int64_t> perHost(H, 0);
  const int64_t V = static_cast<int64_t>(count * elem);
  if (algo == "ring") {
    // Only a rank whose ring successor lives on another host sends off-host, and it
    // sends its whole ring share (2V - |c(r+1)| - |c(r+2)|) there.
    for (int r = 0; r < job.n; ++r)
      if (job.hostOf[(r + 1) % job.n] != job.hostOf[r])
        perHost[job.hostOf[r]] +=
            static_cast<int64_t>(testing::ringSentBytes(count, elem, job.n, r));
  } else if (algo == "naive") {
    // Every rank sends V to every rank of another host.
    for (int r = 0; r < job.n; ++r)
      for (int p = 0; p < job.n; ++p)
        if (job.hostOf[p] != job.hostOf[r]) perHost[job.hostOf[r]] += V;
  } else if (algo == "hier") {
    // Only the inter-host rings leave a host: each host sends 2(H-1)/H of the vector in
    // all (the hosts' shards together cover it once), exactly when H divides count.
    for (size_t h = 0; h < H; ++h)
      perHost[h] = static_cast<int64_t>(2 * (H - 1) * count / H * elem);
  } else {
    perHost.clear();
  }
  return perHost;
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

int bytesMain(Job& job, const std::string& requested, size_t count, const std::string& iface) {
  auto algo = parseAlgorithm(requested);
  check(algo.has_value(), "unknown algorithm '" + requested + "'");
  const size_t elem = sizeof(int32_t);
  const size_t H = static_cast<size_t>(job.hosts), N = static_cast<size_t>(job.n);
  // Connect first (a full-size call of the same algorithm: the same peers), so that the
  // measured window holds no handshake and no store traffic.
  allreduceChecked(job, *algo, count);

  // Window: reporter reads, barrier, all-reduce, barrier, reporter reads.
  std::map<std::string, IfaceBytes> before;
  job.comm.barrier();
  if (job.reporter()) before = readInterfaces();
  job.comm.barrier();
  allreduceChecked(job, *algo, count);
  CallStats call = job.comm.lastCall();
  // With auto, the expectations are those of the algorithm the cost model chose.
  const std::string algoName = call.algorithm;
  algo = parseAlgorithm(algoName);
  check(algo.has_value() && *algo != Algorithm::Auto, "ran an unknown algorithm " + algoName);
  job.comm.barrier();
  std::map<std::string, IfaceBytes> after;
  if (job.reporter()) after = readInterfaces();

  // tccl's own counters for the all-reduce alone, to and from other hosts.
  int64_t mineOff[4] = {0, 0, 0, 0};  // payload sent, wire sent, payload recv, wire recv
  for (auto& [peer, c] : call.traffic.perPeer) {
    if (job.hostOf[peer] == job.hostOf[job.rank]) continue;
    mineOff[0] += static_cast<int64_t>(c.payloadSent);
    mineOff[1] += static_cast<int64_t>(c.wireSent);
    mineOff[2] += static_cast<int64_t>(c.payloadRecv);
    mineOff[3] += static_cast<int64_t>(c.wireRecv);
  }
  std::vector<int64_t> allOff(N * 4);
  job.comm.allGather(mineOff, allOff.data(), 4, DataType::Int64);

  // Interface deltas of every host: [iface index][tx, rx], the iface list fixed by name.
  // Every host has the same interface names (the harness builds them so).
  std::vector<std::string> names;
  for (auto& [name, b] : after) names.push_back(name);
  int64_t nNames = static_cast<int64_t>(names.size());
  job.comm.allreduce(&nNames, 1, DataType::Int64, ReduceOp::Max);
  std::vector<int64_t> mineIf(static_cast<size_t>(nNames) * 2 + 1, 0);
  mineIf[0] = job.reporter() ? 1 : 0;
  for (size_t i = 0; i < names.size(); ++i) {
    mineIf[1 + 2 * i] = after[names[i]].tx - before[names[i]].tx;
    mineIf[2 + 2 * i] = after[names[i]].rx - before[names[i]].rx;
  }
  std::vector<int64_t> allIf(N * mineIf.size());
  job.comm.allGather(mineIf.data(), allIf.data(), mineIf.size(), DataType::Int64);
  // Every rank needs the names to know which column is IFACE: the reporters of all
  // hosts list the same names, so rank 0's own list (it is a reporter) serves.
  if (job.rank != 0) return 0;

  const auto fromSchedule = scheduleInterHostBytes(job, *algo, count, elem);
  const auto closed = closedFormInterHostBytes(job, algoName, count, elem);
  const auto ifIt = std::find(names.begin(), names.end(), iface);
  check(ifIt != names.end(), "no interface named " + iface + " in host 0");
  const size_t col = static_cast<size_t>(ifIt - names.begin());
  const int64_t V = static_cast<int64_t>(count * elem);
  if (*parseAlgorithm(requested) == Algorithm::Auto)
    std::cout << "bytes: auto chose " << algoName << "\n";
  std::cout << "bytes: all-reduce " << algoName << " of V = " << mib(V) << " (" << count
            << " int32), " << N << " ranks on " << H << " hosts, measured on " << iface << "\n";
  bool ok = true;
  auto fail = [&](const std::string& msg) {
    std::cout << "  FAILED: " << msg << "\n";
    ok = false;
  };
  for (size_t h = 0; h < H; ++h) {
    int64_t off[4] = {0, 0, 0, 0};
    const int64_t* ifRow = nullptr;
    for (size_t r = 0; r < N; ++r) {
      if (static_cast<size_t>(job.hostOf[r]) != h) continue;
      for (int k = 0; k < 4; ++k) off[k] += allOff[r * 4 + static_cast<size_t>(k)];
      if (allIf[r * mineIf.size()] == 1) ifRow = &allIf[r * mineIf.size() + 1];
    }
    check(ifRow != nullptr, "no reporter on host " + std::to_string(h));
    const int64_t tx = ifRow[2 * col], rx = ifRow[2 * col + 1];
    int64_t others = 0;
    for (size_t i = 0; i < names.size(); ++i)
      if (i != col) others += ifRow[2 * i] + ifRow[2 * i + 1];
    const int64_t expect = !closed.empty() ? closed[h] : fromSchedule[h];
    std::cout << "  host " << h << ": expected out " << mib(expect) << " ("
              << static_cast<double>(expect) / static_cast<double>(V) << " V"
              << (closed.empty() ? ", from the schedules" : ", closed form") << ")"
              << "; tccl payload out " << mib(off[0]) << " in " << mib(off[2]) << ", wire out "
              << mib(off[1]) << " in " << mib(off[3]) << "; " << iface << " tx " << mib(tx) << " ("
              << static_cast<double>(tx) / static_cast<double>(V) << " V) rx " << mib(rx)
              << "; other interfaces " << others << " B\n";
    if (!fromSchedule.empty() && !closed.empty() && fromSchedule[h] != closed[h])
      fail("host " + std::to_string(h) + ": schedules say " + std::to_string(fromSchedule[h]) +
           " B, closed form " + std::to_string(closed[h]) + " B");
    if (off[0] != expect)
      fail("host " + std::to_string(h) + ": tccl sent " + std::to_string(off[0]) +
           " payload bytes to other hosts, expected " + std::to_string(expect));
    // The link carries the wire bytes plus TCP/IP/Ethernet headers (66 B per segment
    // of at most 1448 B: 4.6%, less with GSO) and ACKs for what comes in (66 B per one
    // or two segments: up to 4.6% of rx), plus the barriers around the window.
    const double hdr = 0.05;
    const int64_t slack = 64 * 1024;
    auto inBand = [&](int64_t got, int64_t out, int64_t in) {
      return got >= out && static_cast<double>(got) <= static_cast<double>(out) * (1 + hdr) +
                                                           static_cast<double>(in) * hdr +
                                                           static_cast<double>(slack);
    };
    if (!inBand(tx, off[1], off[3]))
      fail("host " + std::to_string(h) + ": " + iface + " sent " + std::to_string(tx) +
           " B, expected between the wire bytes out " + std::to_string(off[1]) +
           " and that plus 5% headers, 5% of the bytes in for ACKs, and 64 KiB");
    if (!inBand(rx, off[3], off[1]))
      fail("host " + std::to_string(h) + ": " + iface + " received " + std::to_string(rx) +
           " B, expected between the wire bytes in " + std::to_string(off[3]) +
           " and that plus 5% headers, 5% of the bytes out for ACKs, and 64 KiB");
    if (others > slack)
      fail("host " + std::to_string(h) + ": the other interfaces carried " +
           std::to_string(others) + " B (more than 64 KiB): traffic did not stay on " + iface);
  }
  std::cout << (ok ? "bytes: PASS" : "bytes: FAIL") << std::endl;
  return ok ? 0 : 1;
}

// ---- timing over rate-limited links ------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- several sockets per peer: the ring's time over per-flow rate limits ---------------

int stripesMain(Job& job, size_t count, int reps) {
  allreduceChecked(job, Algorithm::Ring, static_cast<size_t>(job.n) * 64);  // connect
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    job.comm.barrier();
    allreduceChecked(job, Algorithm::Ring, count);
    const PeerCounters tot = job.comm.lastCall().traffic.total();
    const uint64_t expect = testing::ringSentBytes(count, sizeof(int32_t), job.n, job.rank);
    check(tot.payloadSent == expect, "ring payload bytes sent " + std::to_string(tot.payloadSent) +
                                         " != closed form " + std::to_string(expect));
    double t = job.comm.lastCall().seconds;
    job.comm.allreduce(&t, 1, DataType::Float64, ReduceOp::Max);
    times.push_back(t);
  }
  if (job.rank != 0) return 0;
  const double med = median(times);
  const double bytes = static_cast<double>(count * sizeof(int32_t));
  const double busbw = bytes / med * 2.0 * (job.n - 1) / job.n / 1e9;
  std::cout << "stripes: nsocks=" << config::nsocks() << " world=" << job.n
            << " bytes=" << count * sizeof(int32_t) << " times";
  for (double t : times) std::cout << " " << t;
  std::cout << " median " << med << " s busbw " << busbw << " GB/s" << std::endl;
  return 0;
}

int timingMain(Job& job, size_t count, int reps, double mbit, double minRatio) {
  const size_t elem = sizeof(int32_t);
  std::map<std::string, double> med, boundSec;
  for (const char* name : {"ring", "naive"}) {
    const Algorithm a = *parseAlgorithm(name);
    allreduceChecked(job, a, static_cast<size_t>(job.n) * 64);  // connect
    const auto perHost = closedFormInterHostBytes(job, name, count, elem);
    const int64_t busiest = *std::max_element(perHost.begin(), perHost.end());
    // tbf counts Ethernet frames, so the payload alone at the link rate is a floor.
    boundSec[name] = static_cast<double>(busiest) * 8 / (mbit * 1e6);
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      job.comm.barrier();
      allreduceChecked(job, a, count);
      double t = job.comm.lastCall().seconds;
      job.comm.allreduce(&t, 1, DataType::Float64, ReduceOp::Max);
      times.push_back(t);
    }
    med[name] = median(times);
    if (job.rank == 0) {
      std::cout << "timing: " << name << " busiest host link carries " << mib(busiest) << ", at "
                << mbit << " Mbit/s >= " << boundSec[name] << " s; measured";
      for (double t : times) std::cout << " " << t;
      std::cout << " s, median " << med[name] << " s" << std::endl;
    }
  }
  if (job.rank != 0) return 0;
  const double ratio = med["naive"] / med["ring"];
  const double byBytes = boundSec["naive"] / boundSec["ring"];
  std::cout << "timing: naive/ring = " << ratio << " (bytes alone predict " << byBytes
            << "), required > " << minRatio << std::endl;
  bool ok = true;
  for (const char* name : {"ring", "naive"}) {
    if (med[name] < 0.95 * boundSec[name]) {
      std::cout << "  FAILED: " << name << " took " << med[name] << " s, faster than its "
                << "bytes allow at " << mbit << " Mbit/s (" << boundSec[name]
                << " s): the links are not rate-limited" << std::endl;
      ok = false;
    }
  }
  if (!(ratio > minRatio)) {
    std::cout << "  FAILED: naive/ring " << ratio << " <= " << minRatio << std::endl;
    ok = false;
  }
  std::cout << (ok ? "timing: PASS" : "timing: FAIL") << std::endl;
  return ok ? 0 : 1;
}

// ---- strangers ---------------------------------------------------------------------

void touch(const fs::path& p, const std::string& content) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << content << "\n";
  }
  fs::rename(tmp, p);  // atomic: a reader never sees a half-written file
}

int waitGoMain(Job& job, const std::string& dir, int lateMs, int64_t knockedHost) {
  touch(fs::path(dir) / ("pid." + std::to_string(getpid())), std::to_string(job.rank));
  touch(fs::path(dir) / ("ready." + std::to_string(job.rank)), "1");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(fs::path(dir) / "go")) {
    check(std::chrono::steady_clock::now() < until, "no " + dir + "/go within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The ranks of the knocked-on host enter the next call's connection phase at once and
  // wait there for the others, who come lateMs later: meanwhile they serve the
  // strangers' handshakes to the end (a stranger's answer to a challenge included).
  if (job.hostOf[static_cast<size_t>(job.rank)] != knockedHost)
    std::this_thread::sleep_for(std::chrono::milliseconds(lateMs));
  // Naive connects every pair: every listener accepts, strangers' connections included.
  allreduceChecked(job, Algorithm::Naive, 1000);
  allreduceChecked(job, Algorithm::Ring, static_cast<size_t>(job.n) * 1000 + 3);
  job.comm.barrier();
  std::cout << "rank " << job.rank << ": collectives correct after the strangers" << std::endl;
  return 0;
}

// A peer host that vanishes without a FIN (its link dropped) while heartbeats are off: the
// data sockets' keepalive / TCP_USER_TIMEOUT must fail the survivors' call in bounded time.
int vanishMain(Job& job, const std::string& dir, int64_t vanishingHost) {
  allreduceChecked(job, Algorithm::Ring, 1000);  // every link is up
  touch(fs::path(dir) / ("ready." + std::to_string(job.rank)), "1");
  const bool vanishing = job.hostOf[static_cast<size_t>(job.rank)] == vanishingHost;
  const std::string waitFor = vanishing ? "end" : "down";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(80);
  while (!fs::exists(fs::path(dir) / waitFor)) {
    check(std::chrono::steady_clock::now() < until, "no " + dir + "/" + waitFor + " within 80 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (vanishing) _exit(0);  // its peers failed already; nothing to tear down
  const auto t0 = std::chrono::steady_clock::now();
  try {
    allreduceChecked(job, Algorithm::Ring, 1000);
    die("vanish: the all-reduce with a vanished host succeeded");
  } catch (const tccl::Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "rank " << job.rank << " vanish: failed after " << s << " s: " << e.what()
              << std::endl;
  }
  _exit(0);  // the communicator's teardown would wait for the vanished ranks
}

// Reads exactly n bytes before the deadline; false on end-of-file, reset or time-out
// (*closed says whether the peer closed).
bool readExactly(int fd, uint8_t* out, size_t n, std::chrono::steady_clock::time_point until,
                 bool* closed) {
  size_t got = 0;
  *closed = false;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t k = recv(fd, out + got, n - got, 0);
    if (k <= 0) {
      *closed = true;
      return false;
    }
    got += static_cast<size_t>(k);
  }
  return true;
}

// A process of no job. MODE garbage: 112 bytes of 'X'. nokey: a well-formed Hello of
// "rank 0" of the right job and communicator (TCCL_JOB_ID is no secret), without an auth
// key. wrongkey: the same with a key, and when the rank's Challenge comes, a Proof made
// with a key of its own (the whole HMAC exchange, with a different key). Then it reads
// until the rank closes the connection. Prints the Reject's reason (number and text).
int strangerMain(const std::string& addr, int port, const std::string& mode, int target, int world,
                 const std::string& jobId, double seconds) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    std::cerr << "stranger: bad address " << addr << "\n";
    return 2;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    std::cerr << "stranger: cannot connect to " << addr << ":" << port << ": "
              << std::strerror(errno) << "\n";
    return 2;
  }
  const std::string who = "stranger " + mode + " -> " + addr + ":" + std::to_string(port);
  auth::Transcript t;
  t.jobId = wire::hash64(jobId);
  t.commId = wire::hash64("default");
  t.dialler = 0;
  t.acceptor = target;
  t.worldSize = world;
  t.diallerNonce = auth::randomNonce();
  uint8_t out[wire::kHelloSize];
  if (mode == "garbage") {
    std::memset(out, 'X', sizeof out);
  } else {
    wire::Hello h;
    h.jobId = t.jobId;
    h.commId = t.commId;
    h.rank = 0;
    h.worldSize = world;
    h.targetRank = target;
    if (mode == "wrongkey") h.flags = wire::kHelloFlagAuth;
    h.nonce = t.diallerNonce;
    wire::encodeHello(h, out);
  }
  auto sendAll = [&](const uint8_t* p, size_t n) {
    if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
      std::cout << who << ": send failed: " << std::strerror(errno) << std::endl;
  };
  sendAll(out, sizeof out);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  std::string said = "no Reject";
  bool provedWrong = false;
  while (true) {
    uint8_t msg[wire::kHelloSize];
    bool closed = false;
    if (!readExactly(fd, msg, sizeof msg, until, &closed)) {
      if (!closed) {
        std::cout << who << ": still open after " << seconds << " s" << std::endl;
        return 1;
      }
      std::cout << who << ": closed by the rank; " << said
                << (provedWrong ? " (after our proof with a wrong key)" : "") << std::endl;
      ::close(fd);
      return 0;
    }
    wire::Hello h;
    if (wire::decodeHello(msg, &h) != wire::DecodeStatus::Ok) continue;
    if (h.kind == wire::HelloKind::Reject) {
      said = "Reject reason " + std::to_string(static_cast<uint32_t>(h.reason)) + " (" +
             std::string(wire::toString(h.reason)) + ")";
    } else if (h.kind == wire::HelloKind::Challenge && mode == "wrongkey") {
      // Answer as a rank holding another job's key would.
      t.acceptorNonce = h.nonce;
      std::vector<uint8_t> bytes(32);
      const auth::Nonce random = auth::randomNonce();
      std::copy(random.begin(), random.end(), bytes.begin());
      const auth::Key otherKey(std::move(bytes));
      wire::Hello proof;
      proof.kind = wire::HelloKind::Proof;
      proof.jobId = t.jobId;
      proof.commId = t.commId;
      proof.rank = 0;
      proof.worldSize = world;
      proof.targetRank = target;
      proof.flags = wire::kHelloFlagAuth;
      proof.mac = auth::proof(otherKey, auth::Role::Dialler, t);
      wire::encodeHello(proof, out);
      sendAll(out, sizeof out);
      provedWrong = true;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tccl_netns_worker collectives|bytes|timing|wait-go|stranger|has-algo ..."
              << std::endl;
    return 2;
  }
  const std::string what = argv[1];
  auto arg = [&](int i) -> std::string {
    if (i >= argc) die("missing argument " + std::to_string(i) + " for " + what);
    return argv[i];
  };
  try {
    if (what == "has-algo") {
      auto a = parseAlgorithm(arg(2));
      if (!a) return 1;
      const auto& menu = algo::allreduceAlgorithms();
      return std::find(menu.begin(), menu.end(), *a) != menu.end() ? 0 : 1;
    }
    if (what == "stranger")
      return strangerMain(arg(2), std::stoi(arg(3)), arg(4), std::stoi(arg(5)), std::stoi(arg(6)),
                          arg(7), std::stod(arg(8)));
    Job job = joinJob();
    if (what == "collectives") return collectivesMain(job, arg(2));
    if (what == "bytes") return bytesMain(job, arg(2), std::stoull(arg(3)), arg(4));
    if (what == "timing")
      return timingMain(job, std::stoull(arg(2)), std::stoi(arg(3)), std::stod(arg(4)),
                        std::stod(arg(5)));
    if (what == "vanish") return vanishMain(job, arg(2), std::stoll(arg(3)));
    if (what == "stripes") return stripesMain(job, std::stoull(arg(2)), std::stoi(arg(3)));
    if (what == "wait-go") return waitGoMain(job, arg(2), std::stoi(arg(3)), std::stoll(arg(4)));
    std::cerr << "unknown scenario " << what << std::endl;
    return 2;
  } catch (const tccl::Error& e) {
    die(std::string("tccl error: ") + e.what());
  }
}
