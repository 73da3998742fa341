// The TcpStoreServer at scale and under abuse: a storm of clients connecting at once, and
// each of its limits (docs/store.md, "Limits") reached on purpose.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "net/socket.hpp"
#include "sanitized.hpp"
#include "scoped_env.hpp"
#include "store/store_protocol.hpp"
#include "store_testing.hpp"
#include "tccl/error.hpp"

namespace tccl {
namespace {

using namespace storetest;
using tccl::testing::ScopedEnv;

// Raises the soft descriptor limit towards the hard one; returns the soft limit now.
rlim_t raiseFdLimit(rlim_t want) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = std::min(want, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

// 1,024 clients connect at once (one thread each, released together), each sets its own
// key and then waits on one shared key that the test sets once every client's key is
// there. Every request must be answered exactly, no client refused or timed out.
TEST(StoreStorm, ThousandClientsConnectSetAndWaitOnASharedKey) {
  constexpr int kWanted = 1024;
  // Each client holds one descriptor here and the server one: 2 per client plus slack.
  const rlim_t limit = raiseFdLimit(2 * kWanted + 256);
  const int clients = static_cast<int>(std::min<rlim_t>(kWanted, (limit - 256) / 2));
  if (clients < kWanted) {
    std::cerr << "RLIMIT_NOFILE is " << limit << ": storm of " << clients << " clients, not "
              << kWanted << "\n";
  }
  ASSERT_GE(clients, 64) << "RLIMIT_NOFILE " << limit << " is too low for a storm";
  TcpStoreServer server("127.0.0.1", 0);
  std::atomic<bool> go{false};
  std::atomic<int> ok{0};
  std::atomic<int64_t> slowestConnectMs{0};
  std::vector<std::string> errors(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      try {
        const auto start = Clock::now();
        TcpStore c("127.0.0.1", server.port(), 60s);
        int64_t ms = msSince(start);
        int64_t prev = slowestConnectMs.load();
        while (ms > prev && !slowestConnectMs.compare_exchange_weak(prev, ms)) {
        }
        c.setTimeout(60s);
        c.setString("client/" + std::to_string(i), std::to_string(i * 7919));
        c.wait({"shared"});
        if (c.getString("shared") != "go") throw std::runtime_error("wrong shared value");
        c.add("done", 1);
        ++ok;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  }
  const auto start = Clock::now();
  go = true;
  TcpStore main("127.0.0.1", server.port(), 60s);
  main.setTimeout(60s);
  std::vector<std::string> keys;
  for (int i = 0; i < clients; ++i) keys.push_back("client/" + std::to_string(i));
  // One request for every client's key: all there, each with its own exact value.
  std::vector<Bytes> values = main.multiGet(keys);
  ASSERT_EQ(values.size(), static_cast<size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    EXPECT_EQ(
        std::string(values[static_cast<size_t>(i)].begin(), values[static_cast<size_t>(i)].end()),
        std::to_string(i * 7919))
        << "client " << i;
  }
  main.setString("shared", "go");
  for (auto& t : threads) t.join();
  const int64_t elapsed = msSince(start);
  for (int i = 0; i < clients; ++i) {
    EXPECT_TRUE(errors[static_cast<size_t>(i)].empty())
        << "client " << i << ": " << errors[static_cast<size_t>(i)];
  }
  EXPECT_EQ(ok.load(), clients);
  EXPECT_EQ(main.getString("done"), std::to_string(clients));
  const TcpStoreServer::Stats st = server.stats();
  // HELLO, SET, WAIT, GET, ADD per client; HELLO, MULTI_GET, SET, GET for the test.
  EXPECT_EQ(st.requests, static_cast<uint64_t>(5 * clients + 4));
  EXPECT_EQ(st.accepted, static_cast<uint64_t>(clients + 1));
  EXPECT_EQ(st.limitHits, 0u);
  EXPECT_GE(st.peakConnections, 2u);
  std::cerr << clients << " clients in " << elapsed << " ms; slowest connect "
            << slowestConnectMs.load() << " ms; peak " << st.peakConnections
            << " connections; backlog " << net::kListenBacklog << "\n";
}

TEST(StoreLimits, ConnectionCapHoldsNewClientsInTheBacklog) {
  ScopedEnv cap("TCCL_STORE_MAX_CONNECTIONS", "2");
  TcpStoreServer server("127.0.0.1", 0);
  auto a = std::make_unique<TcpStore>("127.0.0.1", server.port(), 5s);
  TcpStore b("127.0.0.1", server.port(), 5s);
  std::atomic<bool> served{false};
  std::thread third([&] {
    TcpStore c("127.0.0.1", server.port(), 10s);  // waits in the backlog, not refused
    c.setString("third", "in");
    served = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(served.load());
  EXPECT_EQ(server.stats().connections, 2u);
  EXPECT_GE(server.stats().limitHits, 1u);
  a.reset();  // a slot frees: the waiting client is accepted and served
  third.join();
  EXPECT_TRUE(served.load());
  EXPECT_EQ(b.getString("third"), "in");
}

TEST(StoreLimits, StoredBytesCapRefusesWritesThatWouldExceedIt) {
  ScopedEnv cap("TCCL_STORE_MAX_BYTES", "1000");
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port(), 5s);
  s.set("a", Bytes(599));  // 600 bytes with its key
  try {
    s.set("b", Bytes(500));
    ADD_FAILURE() << "expected the store to be full";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("TCCL_STORE_MAX_BYTES"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(s.check({"b"}));
  s.set("a", Bytes(899));  // an overwrite counts the new size only
  EXPECT_THROW(s.multiSet({"c", "d"}, {Bytes(50), Bytes(60)}), InvalidArgumentError);
  EXPECT_FALSE(s.check({"c"}));  // a refused MULTI_SET stores none of its pairs
  EXPECT_EQ(s.add("n", 1), 1);   // 900 + 2 bytes: still within
  EXPECT_THROW(s.compareSet("n", bytesOf("1"), Bytes(200)), InvalidArgumentError);
  EXPECT_EQ(s.getString("n"), "1");
  EXPECT_TRUE(s.erase("a"));  // erasing frees its bytes
  s.set("b", Bytes(500));
  EXPECT_EQ(s.add("n", 5), 6);
  EXPECT_GE(server.stats().limitHits, 3u);
}

TEST(StoreLimits, RequestBytesCapRefusesALargeRequestFromItsHeader) {
  ScopedEnv cap("TCCL_STORE_MAX_REQUEST_BYTES", "4096");
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port(), 5s);
  s.set("small", Bytes(1000));
  try {
    s.set("big", Bytes(8192));
    ADD_FAILURE() << "expected a refusal";
  } catch (const Error& e) {
    // Refused with a reason, or (the server closes right after) the connection ended.
    EXPECT_TRUE(e.kind() == ErrorKind::InvalidArgument || e.kind() == ErrorKind::Store) << e.what();
  }
  TcpStore other("127.0.0.1", server.port(), 5s);
  EXPECT_FALSE(other.check({"big"}));
  EXPECT_EQ(other.get("small"), Bytes(1000));
}

TEST(StoreLimits, SilentStrangersTimeOutAndFreeTheirSlots) {
  ScopedEnv key("TCCL_AUTH_KEY",
                "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  ScopedEnv file("TCCL_AUTH_KEY_FILE", nullptr);
  ScopedEnv cap("TCCL_STORE_MAX_UNAUTHENTICATED", "2");
  ScopedEnv grace("TCCL_STORE_AUTH_TIMEOUT_MS", "300");
  TcpStoreServer server("127.0.0.1", 0);
  // Two strangers connect and say nothing: they hold every unauthenticated slot.
  net::Fd s1 = net::connectWithRetry("127.0.0.1", server.port(), Deadline::after(5s));
  net::Fd s2 = net::connectWithRetry("127.0.0.1", server.port(), Deadline::after(5s));
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  TcpStore good("127.0.0.1", server.port(), 10s);  // admitted once they are closed
  const int64_t waited = msSince(start);
  EXPECT_GE(waited, 150);
  EXPECT_LT(waited, 5000);
  good.setString("k", "v");
  EXPECT_EQ(good.getString("k"), "v");
  uint8_t b = 0;
  EXPECT_EQ(net::recvAll(s1.get(), &b, 1, Deadline::after(5s)), net::IoStatus::Closed);
  EXPECT_GE(server.stats().limitHits, 1u);
}

// A server that runs out of descriptors must not spin: accept() fails with EMFILE while
// clients wait in the backlog, and the loop pauses accepting instead of retrying at once.
TEST(StoreLimits, OutOfDescriptorsBacksOffInsteadOfSpinning) {
  TCCL_SKIP_WITHOUT_DESCRIPTORS_UNDER_SANITIZERS();
  int toChild[2];
  int toParent[2];
  ASSERT_EQ(::pipe(toChild), 0);
  ASSERT_EQ(::pipe(toParent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(toChild[1]);
    ::close(toParent[0]);
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = 48;  // a few for the server, too few for the clients below
    ::setrlimit(RLIMIT_NOFILE, &rl);
    int64_t cpuMs = -1;
    try {
      TcpStoreServer server("127.0.0.1", 0);
      const uint16_t port = server.port();
      if (::write(toParent[1], &port, sizeof port) != sizeof port) ::_exit(3);
      uint8_t ready = 0;
      if (::read(toChild[0], &ready, 1) != 1) ::_exit(4);  // the clients are connected
      rusage before{};
      rusage after{};
      ::getrusage(RUSAGE_SELF, &before);
      std::this_thread::sleep_for(1s);
      ::getrusage(RUSAGE_SELF, &after);
      auto ms = [](const timeval& t) { return int64_t{t.tv_sec} * 1000 + t.tv_usec / 1000; };
      cpuMs = ms(after.ru_utime) + ms(after.ru_stime) - ms(before.ru_utime) - ms(before.ru_stime);
    } catch (...) {
      ::_exit(5);
    }
    if (::write(toParent[1], &cpuMs, sizeof cpuMs) != sizeof cpuMs) ::_exit(6);
    ::_exit(0);
  }
  ::close(toChild[0]);
  ::close(toParent[1]);
  uint16_t port = 0;
  ASSERT_EQ(::read(toParent[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  std::vector<net::Fd> conns;
  for (int i = 0; i < 100; ++i) {
    conns.push_back(net::connectWithRetry("127.0.0.1", port, Deadline::after(5s)));
  }
  const uint8_t ready = 1;
  ASSERT_EQ(::write(toChild[1], &ready, 1), 1);
  int64_t cpuMs = -1;
  ASSERT_EQ(::read(toParent[0], &cpuMs, sizeof cpuMs), static_cast<ssize_t>(sizeof cpuMs));
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(toChild[1]);
  ::close(toParent[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // A spinning loop burns the whole second; pausing 100 ms at a time costs next to nothing.
  EXPECT_GE(cpuMs, 0);
  EXPECT_LT(cpuMs, 300) << "the server spun on EMFILE";
}

}  // namespace
}  // namespace tccl
