// Issue 14, the rank side: secure by default (no listener beyond the loopback without a
// key unless TCCL_AUTH=off) and a rank's listener under abuse (its cap on connections in
// their handshake, the handshake deadline, accept(2) out of descriptors, keepalive on the
// data sockets). Strangers here are raw sockets; peers are real Transports.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "auth/auth.hpp"
#include "net/socket.hpp"
#include "sanitized.hpp"
#include "scoped_env.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"
#include "transport/tcp_link.hpp"
#include "transport/transport.hpp"
#include "transport/wire.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using testing::ScopedEnv;

constexpr char kKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TransportConfig config(int rank, int world, const std::string& host = "127.0.0.1") {
  TransportConfig c;
  c.rank = rank;
  c.worldSize = world;
  c.jobId = 77;
  c.commId = wire::hash64("default");
  c.listenAddress = host;
  return c;
}

// The error a Transport listening on `host` throws at construction ("" if none).
std::string transportError(const std::string& host) {
  try {
    Transport t(config(0, 2, host), std::make_shared<HashStore>());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

std::string storeServerError(const std::string& host) {
  try {
    TcpStoreServer s(host, 0);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(SecureByDefault, NoListenerBeyondTheLoopbackWithoutAKey) {
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  ScopedEnv a("TCCL_AUTH", nullptr);
  for (const std::string host : {"0.0.0.0", "::", ""}) {
    const std::string rank = transportError(host);
    EXPECT_TRUE(contains(rank, "rank 0 would listen on")) << host << ": " << rank;
    EXPECT_TRUE(contains(rank, "beyond the loopback")) << rank;
    EXPECT_TRUE(contains(rank, "TCCL_AUTH_KEY=")) << rank;
    EXPECT_TRUE(contains(rank, "TCCL_AUTH_KEY_FILE=")) << rank;
    EXPECT_TRUE(contains(rank, "TCCL_AUTH=off")) << rank;
    const std::string store = storeServerError(host);
    EXPECT_TRUE(contains(store, "the store server would listen on")) << host << ": " << store;
    EXPECT_TRUE(contains(store, "TCCL_AUTH=off")) << store;
  }
  // The loopback needs no key.
  EXPECT_EQ(transportError("127.0.0.1"), "");
  EXPECT_EQ(transportError("::1"), "");
  EXPECT_EQ(storeServerError("127.0.0.1"), "");
  EXPECT_EQ(storeServerError("localhost"), "");
}

TEST(SecureByDefault, AKeyOrAnExplicitOptOutLetsItListenAnywhere) {
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  {
    ScopedEnv k("TCCL_AUTH_KEY", kKey);
    ScopedEnv a("TCCL_AUTH", nullptr);
    EXPECT_EQ(transportError("0.0.0.0"), "");
    EXPECT_EQ(storeServerError("0.0.0.0"), "");
  }
  {
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    ScopedEnv a("TCCL_AUTH", "off");
    EXPECT_TRUE(auth::optedOut());
    EXPECT_EQ(transportError("0.0.0.0"), "");
    EXPECT_EQ(storeServerError("0.0.0.0"), "");
    // A launcher makes no key for a job that opted out.
    EXPECT_FALSE(auth::ensureJobKeyInEnv());
    EXPECT_EQ(std::getenv("TCCL_AUTH_KEY"), nullptr);
  }
  {
    // "on" is the default, said out loud.
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    ScopedEnv a("TCCL_AUTH", "on");
    EXPECT_FALSE(auth::optedOut());
    EXPECT_TRUE(contains(transportError("0.0.0.0"), "beyond the loopback"));
  }
}

TEST(SecureByDefault, ContradictoryOrUnknownSettingsAreRefusedByName) {
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  {
    ScopedEnv k("TCCL_AUTH_KEY", kKey);
    ScopedEnv a("TCCL_AUTH", "off");
    try {
      auth::keyFromEnv();
      FAIL() << "off with a key was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_TRUE(contains(e.what(), "TCCL_AUTH=off and TCCL_AUTH_KEY are both set")) << e.what();
      EXPECT_FALSE(contains(e.what(), kKey));
    }
  }
  {
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    ScopedEnv a("TCCL_AUTH", "Off!");
    try {
      auth::optedOut();
      FAIL() << "a bad TCCL_AUTH was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_TRUE(contains(e.what(), "TCCL_AUTH='Off!'")) << e.what();
    }
  }
}

// ---- the listener under abuse ------------------------------------------------------------

net::Fd rawConnect(const std::string& addr) {
  auto [host, port] = net::splitHostPort(addr);
  return net::connectWithRetry(host, port, Deadline::after(5s));
}

// True once the far end closed fd (end of file or reset), waiting at most `wait`.
bool closedByPeer(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

TEST(Listener, ThePendingCapClosesTheOldestSilentConnectionsAndPeersStillGetIn) {
  auto store = std::make_shared<HashStore>();
  TransportConfig c1 = config(1, 2);
  c1.authKeyFromEnv = false;
  c1.maxPending = 4;
  Transport t1(c1, store);
  std::vector<net::Fd> silent;
  for (int i = 0; i < 12; ++i) {
    silent.push_back(rawConnect(t1.listenAddress()));
    std::this_thread::sleep_for(20ms);  // accepted in order: "oldest" is well defined
  }
  std::this_thread::sleep_for(300ms);
  int closed = 0;
  for (size_t i = 0; i < silent.size(); ++i) {
    const bool c = closedByPeer(silent[i].get(), 200ms);
    closed += c ? 1 : 0;
    // The 8 oldest made room for the newer ones; the 4 newest are still waiting.
    EXPECT_EQ(c, i < 8) << "connection " << i;
  }
  EXPECT_EQ(closed, 8);
  // A real peer still connects: its Hello comes at once, so it is never the oldest.
  TransportConfig c0 = config(0, 2);
  c0.authKeyFromEnv = false;
  c0.maxPending = 4;
  Transport t0(c0, store);
  auto peer = std::async(std::launch::async, [&] { t0.connect({1}, Deadline::after(10s)); });
  t1.connect({0}, Deadline::after(10s));
  peer.get();
  EXPECT_TRUE(t1.connected(0));
}

TEST(Listener, AConnectionThatDoesNotFinishItsHandshakeInTimeIsClosed) {
  TransportConfig c = config(1, 2);
  c.authKeyFromEnv = false;
  c.handshakeTimeout = 300ms;
  Transport t(c, std::make_shared<HashStore>());
  net::Fd fd = rawConnect(t.listenAddress());
  // Half a Hello: a stranger that starts and stalls is held no longer than a silent one.
  uint8_t half[wire::kHelloSize / 2] = {};
  wire::Hello h;
  uint8_t full[wire::kHelloSize];
  wire::encodeHello(h, full);
  std::copy(full, full + sizeof half, half);
  ASSERT_EQ(net::sendAll(fd.get(), half, sizeof half, Deadline::after(1s)), net::IoStatus::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(closedByPeer(fd.get(), 5000ms));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 0.2);
  EXPECT_LT(s, 2.5);  // the deadline plus the service thread's 1 s round
}

TEST(Listener, AStrangerIsRefusedAtOnceWhileTheRankIsInNoCall) {
  TransportConfig c = config(1, 2);
  c.authKeyFromEnv = false;
  Transport t(c, std::make_shared<HashStore>());
  net::Fd fd = rawConnect(t.listenAddress());
  uint8_t junk[wire::kHelloSize];
  std::fill(junk, junk + sizeof junk, 0x41);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(net::sendAll(fd.get(), junk, sizeof junk, Deadline::after(1s)), net::IoStatus::Ok);
  uint8_t reply[wire::kHelloSize];
  ASSERT_EQ(net::recvAll(fd.get(), reply, sizeof reply, Deadline::after(2s)), net::IoStatus::Ok);
  wire::Hello r;
  ASSERT_EQ(wire::decodeHello(reply, &r), wire::DecodeStatus::Ok);
  EXPECT_EQ(r.kind, wire::HelloKind::Reject);
  EXPECT_EQ(r.reason, wire::RejectReason::BadMagic);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
}

// CPU seconds (user + system) this process used so far.
double cpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

TEST(Listener, OutOfDescriptorsTheServiceThreadBacksOffInsteadOfSpinning) {
  TCCL_SKIP_WITHOUT_DESCRIPTORS_UNDER_SANITIZERS();
  // A child with a low descriptor limit hosts the listener; this process floods it. Before
  // the fix the queued connections kept the listener readable while accept(2) failed with
  // EMFILE, and the service thread spun a core.
  int toChild[2], fromChild[2];
  ASSERT_EQ(::pipe(toChild), 0);
  ASSERT_EQ(::pipe(fromChild), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);  // never outlive the test
    try {
      TransportConfig c = config(1, 2);
      c.authKeyFromEnv = false;
      Transport t(c, std::make_shared<HashStore>());
      // Exactly two descriptors left: lower the limit, fill every free slot below it,
      // give two back.
      int highest = 0;
      for (int fd = 0; fd < 4096; ++fd) {
        if (::fcntl(fd, F_GETFD) >= 0) highest = fd;
      }
      rlimit rl{static_cast<rlim_t>(highest + 8), static_cast<rlim_t>(highest + 8)};
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(3);
      std::vector<int> filler;
      for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
      if (filler.size() < 2) ::_exit(9);
      ::close(filler.back());
      filler.pop_back();
      ::close(filler.back());
      filler.pop_back();
      const std::string addr = t.listenAddress() + "\n";
      if (::write(fromChild[1], addr.data(), addr.size()) < 0) ::_exit(4);
      char go;
      if (::read(toChild[0], &go, 1) != 1) ::_exit(5);  // the flood is in the queue
      const double before = cpuSeconds();
      std::this_thread::sleep_for(2s);
      const double used = cpuSeconds() - before;
      const std::string out = std::to_string(used) + "\n";
      if (::write(fromChild[1], out.data(), out.size()) < 0) ::_exit(6);
      if (::read(toChild[0], &go, 1) != 1) ::_exit(7);
    } catch (...) {
      ::_exit(8);
    }
    ::_exit(0);
  }
  ::close(toChild[0]);
  ::close(fromChild[1]);
  auto readLine = [&] {
    std::string s;
    char ch;
    while (::read(fromChild[0], &ch, 1) == 1 && ch != '\n') s += ch;
    return s;
  };
  const std::string addr = readLine();
  ASSERT_FALSE(addr.empty());
  // The flood goes on while the child measures: the listener always has a queue.
  std::atomic<bool> stop{false};
  std::thread flooder([&] {
    std::vector<net::Fd> open;
    while (!stop.load()) {
      try {
        open.push_back(rawConnect(addr));
      } catch (const Error&) {
      }
      if (open.size() > 100) open.erase(open.begin());
      std::this_thread::sleep_for(1ms);
    }
  });
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(::write(toChild[1], "g", 1), 1);
  const std::string used = readLine();
  stop.store(true);
  flooder.join();
  ASSERT_EQ(::write(toChild[1], "g", 1), 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(toChild[1]);
  ::close(fromChild[0]);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_FALSE(used.empty());
  // Spinning would be about 2 s of CPU; backing off (10 ms .. 1 s) is well under 0.2 s.
  EXPECT_LT(std::stod(used), 0.2) << "CPU seconds in 2 s with accept failing: " << used;
}

int intOption(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  getsockopt(fd, level, name, &v, &len);
  return v;
}

TEST(Listener, DataSocketsCarryKeepaliveAndTheUserTimeout) {
  auto store = std::make_shared<HashStore>();
  TransportConfig c0 = config(0, 2);
  TransportConfig c1 = config(1, 2);
  c0.authKeyFromEnv = c1.authKeyFromEnv = false;
  c0.deadPeerTimeout = c1.deadPeerTimeout = 20000ms;
  Transport t0(c0, store);
  Transport t1(c1, store);
  auto peer = std::async(std::launch::async, [&] { t0.connect({1}, Deadline::after(10s)); });
  t1.connect({0}, Deadline::after(10s));
  peer.get();
  for (Transport* t : {&t0, &t1}) {
    const int fd = t->link(t == &t0 ? 1 : 0).pollFd();
    EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 20000);
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), 5);   // a quarter
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), 2);  // a tenth
  }
  // 0 turns it off.
  TransportConfig d0 = config(0, 2);
  TransportConfig d1 = config(1, 2);
  d0.authKeyFromEnv = d1.authKeyFromEnv = false;
  d0.deadPeerTimeout = d1.deadPeerTimeout = 0ms;
  d0.commId = d1.commId = wire::hash64("other");
  auto store2 = std::make_shared<HashStore>();
  Transport u0(d0, store2);
  Transport u1(d1, store2);
  auto peer2 = std::async(std::launch::async, [&] { u0.connect({1}, Deadline::after(10s)); });
  u1.connect({0}, Deadline::after(10s));
  peer2.get();
  EXPECT_EQ(intOption(u1.link(0).pollFd(), SOL_SOCKET, SO_KEEPALIVE), 0);
  EXPECT_EQ(intOption(u1.link(0).pollFd(), IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
}

}  // namespace
}  // namespace tccl
