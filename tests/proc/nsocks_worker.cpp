// A rank for tests/proc/nsocks_test.cpp (several sockets per peer, docs/nsocks.md).
//
//   tccl_nsocks_worker sockets COUNT [p2p]
//     One ring all-reduce of COUNT int32 (exact rank- and index-dependent data, the
//     closed-form bytes), then a look at this process's own sockets: every connection
//     to a ring neighbour (the peers' listening addresses, and this rank's own) is
//     listed with the bytes TCP moved on it (TCP_INFO), so the test sees that there are
//     TCCL_NSOCKS of them per neighbour and that every one carried a share of the data,
//     and with their socket buffers.
//     Publishes "ok sockets=S min_bytes=B max_bytes=B min_sndbuf=X max_sndbuf=X
//     min_rcvbuf=X max_rcvbuf=X" (the buffers as getsockopt reports them: twice what was
//     set, the kernel's bookkeeping share included). With p2p, every rank also sends COUNT
//     int32 to its right neighbour on the point-to-point lane, whose sockets (to the same
//     neighbours' listeners) are listed too.
//   tccl_nsocks_worker mismatch ODD_RANK ODD_NSOCKS
//     Rank ODD_RANK sets TCCL_NSOCKS=ODD_NSOCKS before it joins; every rank runs one
//     all-reduce and publishes what it threw ("error kind=... what=...").
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/expected_bytes.hpp"
#include "base/config.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;

namespace {

int gRank = -1;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[nsocks worker rank " << gRank << "] CHECK FAILED: " << msg << std::endl;
  std::exit(1);
}

void publish(Communicator& comm, const std::string& scenario, const std::string& record) {
  comm.store()->setString("proc/" + scenario + "/" + std::to_string(comm.rank()), record);
}

// Element i of rank r, and the sum over n ranks, exact in int32.
int32_t valueOf(int r, size_t i) { return static_cast<int32_t>((r + 1) * 1000 + i % 997); }
int32_t sumOf(int n, size_t i) {
  return static_cast<int32_t>(1000 * n * (n + 1) / 2 + n * static_cast<int>(i % 997));
}

std::string ipPort(const sockaddr_storage& a) {
  net::SockAddr s;
  std::memcpy(&s.storage, &a, sizeof a);
  s.len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  return net::joinHostPort(s.ip(), s.port());
}

struct SocketBytes {
  std::string peer;
  uint64_t bytes = 0;    // acked + received
  uint32_t unacked = 0;  // segments sent and not yet acknowledged
  int sndbuf = 0;        // SO_SNDBUF, SO_RCVBUF
  int rcvbuf = 0;
};

int bufferOption(int fd, int option) {
  int v = 0;
  socklen_t len = sizeof v;
  if (::getsockopt(fd, SOL_SOCKET, option, &v, &len) != 0) die("getsockopt failed");
  return v;
}

// This process's TCP connections whose far end is one of `listeners` (we dialled it) or
// whose near end is `mine` (it dialled us).
std::vector<SocketBytes> rankSockets(const std::set<std::string>& listeners,
                                     const std::string& mine) {
  std::vector<SocketBytes> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) die("cannot list /proc/self/fd");
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage local{}, remote{};
    socklen_t ll = sizeof local, rl = sizeof remote;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0) continue;
    const std::string l = ipPort(local), r = ipPort(remote);
    if (listeners.count(r) == 0 && l != mine) continue;
    tcp_info ti{};
    socklen_t tl = sizeof ti;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) die("TCP_INFO failed");
    out.push_back({r, ti.tcpi_bytes_acked + ti.tcpi_bytes_received, ti.tcpi_unacked,
                   bufferOption(fd, SO_SNDBUF), bufferOption(fd, SO_RCVBUF)});
  }
  ::closedir(d);
  return out;
}

void runSockets(Communicator& comm, size_t count, bool p2p) {
  const int n = comm.size(), r = comm.rank();
  std::vector<int32_t> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = valueOf(r, i);
  comm.allreduce(std::span<int32_t>(buf), ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
  for (size_t i = 0; i < count; ++i) {
    if (buf[i] != sumOf(n, i)) {
      die("index " + std::to_string(i) + " = " + std::to_string(buf[i]) + ", expected " +
          std::to_string(sumOf(n, i)));
    }
  }
  const PeerCounters tot = comm.lastCall().traffic.total();
  if (tot.payloadSent != testing::ringSentBytes(count, 4, n, r)) {
    die("payload bytes sent " + std::to_string(tot.payloadSent) + " != the closed form " +
        std::to_string(testing::ringSentBytes(count, 4, n, r)));
  }
  if (p2p) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<int32_t> in(count);
    for (size_t i = 0; i < count; ++i) buf[i] = valueOf(r, i);
    WorkPtr s = comm.sendAsync(buf.data(), count, DataType::Int32, right);
    comm.recv(in.data(), count, DataType::Int32, left);
    s->wait();
    for (size_t i = 0; i < count; ++i) {
      if (in[i] != valueOf(left, i)) die("p2p index " + std::to_string(i) + " differs");
    }
  }
  // The neighbours' listening addresses (a socket to one is one this rank dialled: on the
  // collectives' lane only a higher rank's, on the p2p lane either), and this rank's own
  // (a socket on it was dialled by a neighbour: only neighbours talk here).
  std::set<std::string> listeners;
  const std::string prefix = "tccl/default/addr/";
  for (int p : {(r + 1) % n, (r + n - 1) % n}) {
    if (p != r) listeners.insert(comm.store()->getString(prefix + std::to_string(p)));
  }
  const std::string mine = comm.store()->getString(prefix + std::to_string(r));
  // A rank's call ends once its own receives are in, when the last segment it sent may
  // still wait for its acknowledgement (a delayed ACK: these sockets carry data one way),
  // and bytes_acked lacks it. So look again until nothing is unacknowledged (at most 5 s).
  std::vector<SocketBytes> socks = rankSockets(listeners, mine);
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::any_of(socks.begin(), socks.end(), [](const SocketBytes& s) { return s.unacked; }) &&
         std::chrono::steady_clock::now() < giveUp) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    socks = rankSockets(listeners, mine);
  }
  uint64_t lo = UINT64_MAX, hi = 0;
  int sndLo = std::numeric_limits<int>::max(), sndHi = 0;
  int rcvLo = std::numeric_limits<int>::max(), rcvHi = 0;
  for (const SocketBytes& s : socks) {
    lo = std::min(lo, s.bytes);
    hi = std::max(hi, s.bytes);
    sndLo = std::min(sndLo, s.sndbuf);
    sndHi = std::max(sndHi, s.sndbuf);
    rcvLo = std::min(rcvLo, s.rcvbuf);
    rcvHi = std::max(rcvHi, s.rcvbuf);
  }
  if (socks.empty()) lo = 0, sndLo = 0, rcvLo = 0;
  std::ostringstream os;
  os << "ok sockets=" << socks.size() << " min_bytes=" << lo << " max_bytes=" << hi
     << " min_sndbuf=" << sndLo << " max_sndbuf=" << sndHi << " min_rcvbuf=" << rcvLo
     << " max_rcvbuf=" << rcvHi;
  publish(comm, "sockets", os.str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tccl_nsocks_worker sockets COUNT | mismatch ODD_RANK ODD_NSOCKS\n";
    return 2;
  }
  const std::string scenario = argv[1];
  const char* rankEnv = std::getenv("TCCL_RANK");
  gRank = rankEnv ? std::atoi(rankEnv) : -1;
  if (scenario == "mismatch" && argc > 3 && gRank == std::atoi(argv[2])) {
    ::setenv("TCCL_NSOCKS", argv[3], 1);
  }
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(20000);
  Communicator comm = Communicator::fromEnv(opts);
  try {
    if (scenario == "sockets") {
      runSockets(comm, std::stoull(argv[2]), argc > 3 && std::string(argv[3]) == "p2p");
      // Stay until every rank has listed its sockets: a rank that exits closes its end,
      // and a neighbour's p2p lane then drops the link before that neighbour lists it.
      std::vector<std::string> keys;
      for (int p = 0; p < comm.size(); ++p) keys.push_back("proc/sockets/" + std::to_string(p));
      comm.store()->wait(keys, std::chrono::milliseconds(20000));
    } else if (scenario == "mismatch") {
      std::vector<int32_t> buf(100000, 1);
      comm.allreduce(std::span<int32_t>(buf), ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
      publish(comm, scenario, "no error");
    } else {
      die("unknown scenario " + scenario);
    }
  } catch (const Error& e) {
    std::ostringstream os;
    os << "error kind=" << toString(e.kind()) << " peer=" << e.peer() << " what=" << e.what();
    std::cerr << "[nsocks worker rank " << gRank << "] " << os.str() << std::endl;
    publish(comm, scenario, os.str());
    // Stay until every rank has reported, so that no exit becomes another's failure.
    std::vector<std::string> keys;
    for (int p = 0; p < comm.size(); ++p)
      keys.push_back("proc/" + scenario + "/" + std::to_string(p));
    try {
      comm.store()->wait(keys, std::chrono::milliseconds(20000));
    } catch (const Error&) {
    }
    return 0;
  }
  return 0;
}
