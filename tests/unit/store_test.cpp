// One conformance suite for every Store (HashStore, FileStore, TcpStore, PrefixStore),
// then what only TcpStore and FileStore can get wrong: hostile clients, many clients,
// IPv6, shutdown, torn files, and several processes adding to one file.
#include "tccl/store.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <numeric>
#include <sstream>
#include <thread>

#include "net/socket.hpp"
#include "store/store_protocol.hpp"
#include "store_testing.hpp"
#include "tccl/error.hpp"

// The largest single allocation made through operator new while gTrackAllocations is
// set, by any thread of this test binary (the TcpStoreServer of a test runs in it):
// how HugeLengthsAreRejectedWithoutAllocating sees that a claimed length was not
// believed. The replacement forwards to malloc and free, as the default one does.
namespace {
std::atomic<bool> gTrackAllocations{false};
std::atomic<size_t> gLargestAllocation{0};
}  // namespace

void* operator new(size_t n) {
  if (gTrackAllocations.load(std::memory_order_relaxed)) {
    size_t seen = gLargestAllocation.load(std::memory_order_relaxed);
    while (n > seen && !gLargestAllocation.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC, inlining these into a `delete` of a `new`, cannot see that the two go together.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
// The other forms a program may call (std::get_temporary_buffer, under stable_sort, uses
// the nothrow one): all through malloc / free too, or a sanitizer's own operator new
// would hand out what the replaced delete frees (ASan: alloc-dealloc-mismatch).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n) { return ::operator new(n); }
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace tccl {
namespace {

using namespace storetest;

TYPED_TEST_SUITE(StoreConformance, Factories, FactoryName);

// Runs fn, which must throw a TimeoutError naming every key of `missing` and none of
// `present`, no earlier than `timeout`.
template <typename F>
void expectStoreTimeout(F fn, const std::vector<std::string>& missing,
                        const std::vector<std::string>& present,
                        std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  try {
    fn();
    ADD_FAILURE() << "expected a store timeout";
    return;
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Timeout);
    const std::string what = e.what();
    for (const std::string& k : missing) {
      EXPECT_NE(what.find(k), std::string::npos) << "'" << k << "' not named in: " << what;
    }
    for (const std::string& k : present) {
      EXPECT_EQ(e.cause().find(k), std::string::npos) << "'" << k << "' wrongly named: " << what;
    }
    EXPECT_EQ(e.info().timeoutMs, timeout.count());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a TimeoutError, got: " << e.what();
    return;
  }
  const int64_t elapsed = msSince(start);
  EXPECT_GE(elapsed, timeout.count() - 2);
  EXPECT_LT(elapsed, timeout.count() + 3000);
}

TYPED_TEST(StoreConformance, SetGetRoundTripsBinaryValues) {
  Store& s = *this->store;
  Bytes all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<uint8_t>(i));
  const Bytes zeros(17, 0);
  s.set("bin", all);
  s.set("zeros", zeros);
  s.set("empty", {});
  s.set(std::string("key\0with nul", 12), bytesOf("v"));
  s.set("", bytesOf("empty key"));
  EXPECT_EQ(s.get("bin"), all);
  EXPECT_EQ(s.get("zeros"), zeros);
  EXPECT_EQ(s.get("empty"), Bytes{});
  EXPECT_EQ(s.get(std::string("key\0with nul", 12)), bytesOf("v"));
  EXPECT_EQ(s.getString(""), "empty key");
  EXPECT_TRUE(s.check({"bin", "zeros", "empty", ""}));
  // Another handle sees the same data.
  EXPECT_EQ(this->factory.another()->get("bin"), all);
}

TYPED_TEST(StoreConformance, SetOverwrites) {
  Store& s = *this->store;
  s.setString("k", "first value, long");
  s.setString("k", "2nd");
  EXPECT_EQ(s.getString("k"), "2nd");
  this->factory.another()->setString("k", "");
  EXPECT_EQ(s.getString("k"), "");
}

TYPED_TEST(StoreConformance, AddIsDecimalAndAtomic) {
  Store& s = *this->store;
  EXPECT_EQ(s.add("n", 5), 5);  // absent counts as 0
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.getString("n"), "-2");
  EXPECT_EQ(s.add("n", 0), -2);
  s.setString("m", "40");
  EXPECT_EQ(s.add("m", 2), 42);
  s.setString("text", "forty");
  EXPECT_THROW(s.add("text", 1), InvalidArgumentError);
  s.setString("big", std::to_string(INT64_MAX));
  EXPECT_THROW(s.add("big", 1), InvalidArgumentError);
  EXPECT_EQ(s.getString("big"), std::to_string(INT64_MAX));

  constexpr int kThreads = 8;
  constexpr int kAdds = 250;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::shared_ptr<Store> h = this->factory.another();
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(h->add("counter", 1));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(s.getString("counter"), std::to_string(kThreads * kAdds));
  // Atomic: every intermediate value was returned to exactly one caller.
  std::vector<int64_t> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
}

TYPED_TEST(StoreConformance, CheckNeverWaits) {
  Store& s = *this->store;
  const auto start = Clock::now();
  EXPECT_FALSE(s.check({"a"}));
  EXPECT_TRUE(s.check({}));
  s.setString("a", "1");
  EXPECT_TRUE(s.check({"a"}));
  EXPECT_FALSE(s.check({"a", "b"}));
  s.add("b", 1);
  EXPECT_TRUE(s.check({"a", "b"}));
  EXPECT_LT(msSince(start), 2000);
}

TYPED_TEST(StoreConformance, WaitAndGetSeeKeysSetLater) {
  Store& s = *this->store;
  // Before the writer starts, which sleeps 80 ms before its last key of the wait: a
  // start taken after it could be late by however long this thread was descheduled.
  const auto start = Clock::now();
  std::thread writer([&] {
    std::shared_ptr<Store> h = this->factory.another();
    std::this_thread::sleep_for(50ms);
    h->setString("rank/1/addr", "10.0.0.1:7000");
    std::this_thread::sleep_for(30ms);
    h->add("ready", 1);
    std::this_thread::sleep_for(30ms);
    h->setString("late", "value");
  });
  s.wait({"rank/1/addr", "ready"}, kLongTimeout);
  EXPECT_GE(msSince(start), 70);
  EXPECT_EQ(s.getString("rank/1/addr"), "10.0.0.1:7000");
  s.setTimeout(kLongTimeout);
  EXPECT_EQ(s.getString("late"), "value");  // get() waits too
  writer.join();
  s.wait({"late"});  // the store's own timeout; present already
}

TYPED_TEST(StoreConformance, WaitTimeoutNamesMissingKeys) {
  Store& s = *this->store;
  s.setString("rank/4/addr", "x");
  expectStoreTimeout(
      [&] {
        s.wait({"rank/3/addr", "rank/4/addr", "rank/5/addr"}, kShortTimeout);
      },
      {"rank/3/addr", "rank/5/addr"}, {"rank/4/addr"}, kShortTimeout);
}

TYPED_TEST(StoreConformance, GetTimeoutNamesTheKey) {
  Store& s = *this->store;
  s.setTimeout(kShortTimeout);
  expectStoreTimeout([&] { s.get("rank/9/addr"); }, {"rank/9/addr"}, {}, kShortTimeout);
}

TYPED_TEST(StoreConformance, ZeroTimeoutChecksOnce) {
  Store& s = *this->store;
  s.setString("here", "1");
  s.wait({"here"}, 0ms);
  expectStoreTimeout([&] { s.wait({"here", "absent"}, 0ms); }, {"absent"}, {"here"}, 0ms);
}

TYPED_TEST(StoreConformance, Erase) {
  Store& s = *this->store;
  EXPECT_FALSE(s.erase("k"));
  s.setString("k", "v");
  s.setString("other", "w");
  EXPECT_TRUE(s.erase("k"));
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_FALSE(this->factory.another()->check({"k"}));
  EXPECT_FALSE(s.erase("k"));
  EXPECT_EQ(s.getString("other"), "w");
  EXPECT_EQ(s.add("k", 3), 3);  // erased counts as absent
  s.setString("k", "again");
  EXPECT_EQ(s.getString("k"), "again");
}

TYPED_TEST(StoreConformance, LimitsAreEnforced) {
  Store& s = *this->store;
  EXPECT_THROW(s.set(std::string(storeproto::kMaxKeyBytes + 1, 'k'), {}), InvalidArgumentError);
  // The store still works afterwards (a TcpStore must not have sent half a request).
  s.setString("fine", "yes");
  EXPECT_EQ(s.getString("fine"), "yes");
}

// ---- TcpStore ----------------------------------------------------------------------

class TcpStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<TcpStoreServer> server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);

  std::unique_ptr<TcpStore> client() {
    return std::make_unique<TcpStore>("127.0.0.1", server->port(), 5s);
  }
  net::Fd raw() { return net::connectWithRetry("127.0.0.1", server->port(), Deadline::after(5s)); }

  static void sendBytes(int fd, const Bytes& b) {
    ASSERT_EQ(net::sendAll(fd, b.data(), b.size(), Deadline::after(5s)), net::IoStatus::Ok);
  }
  // The server must close this connection (promptly, without a reply).
  static void expectClosedByServer(int fd) {
    uint8_t byte = 0;
    EXPECT_EQ(net::recvAll(fd, &byte, 1, Deadline::after(5s)), net::IoStatus::Closed);
  }
  // Reads responses until `count` have decoded, reading exactly what each frame needs.
  static std::vector<storeproto::Response> readResponses(int fd, size_t count) {
    std::vector<storeproto::Response> out;
    const Deadline deadline = Deadline::after(5s);
    Bytes buf;
    while (out.size() < count) {
      storeproto::Response r;
      storeproto::DecodeResult d = storeproto::decodeResponse(buf.data(), buf.size(), &r);
      if (d.status == storeproto::DecodeStatus::Ok) {
        out.push_back(std::move(r));
        buf.clear();
        continue;
      }
      if (d.status == storeproto::DecodeStatus::Error) {
        ADD_FAILURE() << d.error;
        break;
      }
      const size_t want = d.frameBytes > 0 ? d.frameBytes : storeproto::kHeaderBytes;
      const size_t have = buf.size();
      buf.resize(want);
      if (net::recvAll(fd, buf.data() + have, want - have, deadline) != net::IoStatus::Ok) {
        ADD_FAILURE() << "connection ended after " << out.size() << " responses";
        break;
      }
    }
    return out;
  }
  void expectServerStillServes() {
    auto c = client();
    c->setString("alive", "yes");
    EXPECT_EQ(c->getString("alive"), "yes");
  }
};

TEST_F(TcpStoreTest, GarbageClientIsDisconnected) {
  net::Fd fd = raw();
  sendBytes(fd.get(), bytesOf("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  expectClosedByServer(fd.get());
  expectServerStillServes();
}

TEST_F(TcpStoreTest, TruncatedHeaderDoesNotBlockOthers) {
  net::Fd held = raw();
  sendBytes(held.get(), {storeproto::kRequestMagic, storeproto::kVersion, 1});
  expectServerStillServes();  // one thread serves all: a partial frame must not stall it
  net::Fd gone = raw();
  sendBytes(gone.get(), {storeproto::kRequestMagic, storeproto::kVersion});
  gone.reset();
  expectServerStillServes();
}

TEST_F(TcpStoreTest, HugeLengthsAreRejectedWithoutAllocating) {
  // Every allocation while the server reads two frames claiming 4 GiB: none may come
  // near the claim (the largest legitimate buffer is a frame's, kMaxBodyBytes = 64 MiB
  // at most, and these frames carry 4 and 12 bytes).
  gLargestAllocation = 0;
  gTrackAllocations = true;
  {
    net::Fd fd = raw();
    sendBytes(fd.get(), {storeproto::kRequestMagic, storeproto::kVersion, 1, 0, 0xFF, 0xFF, 0xFF,
                         0xFF, 0, 0, 0, 0});
    expectClosedByServer(fd.get());
  }
  {
    // A small body whose key claims 4 GiB.
    net::Fd fd = raw();
    sendBytes(fd.get(), {storeproto::kRequestMagic, storeproto::kVersion, 6, 0, 4, 0, 0, 0, 0, 0, 0,
                         0, 0xFF, 0xFF, 0xFF, 0xFF});
    expectClosedByServer(fd.get());
  }
  gTrackAllocations = false;
  EXPECT_LT(gLargestAllocation.load(), size_t{1} << 20)
      << "the server allocated " << gLargestAllocation.load() << " bytes at once for a frame of "
      << "12 bytes claiming 4 GiB";
  expectServerStillServes();
}

TEST_F(TcpStoreTest, ParkedRequestDoesNotHoldUpLaterOnes) {
  net::Fd fd = raw();
  Bytes frames;
  storeproto::Request r;
  r.command = storeproto::Command::Wait;  // parks until the client below sets "later"
  r.keys = {"later"};
  r.timeoutMs = 5000;
  r.tag = 11;
  storeproto::encodeRequest(r, &frames);
  r = storeproto::Request();
  r.command = storeproto::Command::Get;
  r.key = "later";
  r.timeoutMs = 0;
  r.tag = 12;
  storeproto::encodeRequest(r, &frames);
  r = storeproto::Request();
  r.command = storeproto::Command::Ping;
  r.tag = 13;
  storeproto::encodeRequest(r, &frames);
  sendBytes(fd.get(), frames);
  // The two that do not wait are answered, in order, while the WAIT is parked.
  std::vector<storeproto::Response> resp = readResponses(fd.get(), 2);
  ASSERT_EQ(resp.size(), 2u);
  EXPECT_EQ(resp[0].command, storeproto::Command::Get);
  EXPECT_EQ(resp[0].tag, 12u);
  EXPECT_EQ(resp[0].status, storeproto::Status::Timeout);
  EXPECT_EQ(resp[0].keys, std::vector<std::string>{"later"});
  EXPECT_EQ(resp[1].command, storeproto::Command::Ping);
  EXPECT_EQ(resp[1].tag, 13u);
  client()->setString("later", "now");
  resp = readResponses(fd.get(), 1);
  ASSERT_EQ(resp.size(), 1u);
  EXPECT_EQ(resp[0].command, storeproto::Command::Wait);
  EXPECT_EQ(resp[0].tag, 11u);
  EXPECT_EQ(resp[0].status, storeproto::Status::Ok);
}

TEST_F(TcpStoreTest, PipelinedRepliesBeyondTheOutputCapAllArrive) {
  // Twelve 1 MiB replies requested at once: the server holds requests back while 4 MiB
  // of replies are queued, and must resume on its own once they drain.
  client()->set("v", Bytes(1 << 20, 0xAB));
  net::Fd fd = raw();
  Bytes frames;
  storeproto::Request r;
  r.command = storeproto::Command::Get;
  r.key = "v";
  r.timeoutMs = 0;
  for (int i = 0; i < 12; ++i) storeproto::encodeRequest(r, &frames);
  sendBytes(fd.get(), frames);
  std::vector<storeproto::Response> resp = readResponses(fd.get(), 12);
  ASSERT_EQ(resp.size(), 12u);
  for (const auto& p : resp) EXPECT_EQ(p.value, Bytes(1 << 20, 0xAB));
}

// The server's end of the TCP connection from local port `clientPort` to the server's
// `serverPort`, as the kernel lists it (/proc/net/tcp, IPv4 loopback): its state
// (01 established, 08 close-wait, ...), or -1 when the server has closed it.
int serverSideState(uint16_t serverPort, uint16_t clientPort) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string slot, local, remote, state;
    is >> slot >> local >> remote >> state;
    const auto port = [](const std::string& a) {
      return static_cast<uint16_t>(std::stoul(a.substr(a.find(':') + 1), nullptr, 16));
    };
    if (port(local) == serverPort && port(remote) == clientPort)
      return static_cast<int>(std::stoul(state, nullptr, 16));
  }
  return -1;
}

uint16_t localPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

TEST_F(TcpStoreTest, ParkedClientThatLeavesIsDropped) {
  // A client parks in a 60 s WAIT, then goes away (its end closes). The server must
  // notice and close its own end of that connection long before the WAIT would end:
  // a server that kept it would hold the socket in CLOSE_WAIT until the timeout.
  uint16_t port = 0;
  {
    net::Fd fd = raw();
    port = localPort(fd.get());
    ASSERT_NE(port, 0);
    storeproto::Request r;
    r.command = storeproto::Command::Wait;
    r.keys = {"never"};
    r.timeoutMs = 60000;
    Bytes frame;
    storeproto::encodeRequest(r, &frame);
    sendBytes(fd.get(), frame);
    const auto parked = Clock::now();
    while (serverSideState(server->port(), port) != 0x01 && msSince(parked) < 5000)
      std::this_thread::sleep_for(5ms);
    ASSERT_EQ(serverSideState(server->port(), port), 0x01) << "no connection from the client";
    // Parked: the server counts the request and holds the connection open.
    const Deadline until = Deadline::after(5s);
    while (server->stats().requests < 1 && !until.expired()) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(server->stats().connections, 1u);
  }
  const auto left = Clock::now();
  int state = serverSideState(server->port(), port);
  while (state != -1 && msSince(left) < 5000) {
    std::this_thread::sleep_for(5ms);
    state = serverSideState(server->port(), port);
  }
  EXPECT_EQ(state, -1) << "5 s after the client left, the server still holds its connection "
                       << "(state " << state << ")";
  EXPECT_EQ(server->stats().connections, 0u);  // and its own count agrees
  expectServerStillServes();
  client()->setString("never", "now it exists");  // waking a departed waiter is harmless
  expectServerStillServes();
}

TEST_F(TcpStoreTest, ManyClientsAddConcurrently) {
  constexpr int kClients = 16;
  constexpr int kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&] {
      auto c = client();
      for (int i = 0; i < kAdds; ++i) c->add("sum", 1);
      c->add("done", 1);
    });
  }
  auto c = client();
  c->wait({"done"}, kLongTimeout);
  for (auto& th : threads) th.join();
  EXPECT_EQ(c->getString("sum"), std::to_string(kClients * kAdds));
  EXPECT_EQ(c->getString("done"), std::to_string(kClients));
}

TEST_F(TcpStoreTest, LargeValueRoundTrips) {
  Bytes big(4 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  auto a = client();
  auto b = client();
  a->set("big", big);
  EXPECT_EQ(b->get("big"), big);
}

TEST_F(TcpStoreTest, LocalAddressAndEndpoint) {
  auto c = client();
  EXPECT_EQ(c->localAddress(), "127.0.0.1");
  EXPECT_EQ(c->host(), "127.0.0.1");
  EXPECT_EQ(c->port(), server->port());
  EXPECT_NE(server->port(), 0);
}

TEST_F(TcpStoreTest, StopWakesWaitingClientsWithStoreError) {
  auto c = client();
  std::atomic<bool> threw{false};
  std::string what;
  const auto start = Clock::now();
  std::thread waiter([&] {
    try {
      c->wait({"never"}, kLongTimeout);
    } catch (const StoreError& e) {
      what = e.what();
      threw = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  server->stop();
  waiter.join();
  EXPECT_TRUE(threw);
  EXPECT_LT(msSince(start), 3000);
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(server->port())), std::string::npos) << what;
  // The client stays broken, and says so, naming the store.
  try {
    c->setString("x", "y");
    ADD_FAILURE() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("earlier failure"), std::string::npos) << e.what();
  }
  server->stop();  // idempotent
}

TEST_F(TcpStoreTest, ConnectTimesOutWhenNobodyListens) {
  uint16_t port = 0;
  {
    net::Fd l = net::listenOn("127.0.0.1", 0);
    port = net::localAddress(l.get()).port();
  }
  const auto start = Clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, 200ms), TimeoutError);
  EXPECT_LT(msSince(start), 3000);
}

TEST_F(TcpStoreTest, NonStoreServerIsAStoreError) {
  net::Fd l = net::listenOn("127.0.0.1", 0);
  const uint16_t port = net::localAddress(l.get()).port();
  std::thread fake([&] {
    const Deadline deadline = Deadline::after(5s);
    while (!deadline.expired()) {
      net::Fd c = net::acceptNonBlocking(l.get());
      if (!c.valid()) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      const std::string reply = "HTTP/1.0 400 Bad Request\r\n\r\n";
      net::sendAll(c.get(), reply.data(), reply.size(), deadline);
      uint8_t b;
      net::recvAll(c.get(), &b, 1, Deadline::after(2s));  // until the client hangs up
      return;
    }
  });
  try {
    TcpStore s("127.0.0.1", port, 5s);
    ADD_FAILURE() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  fake.join();
}

TEST(TcpStoreIpv6, LoopbackWorks) {
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>("::1", 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  TcpStore c("::1", server->port(), 5s);
  c.setString("v6", "ok");
  EXPECT_EQ(c.getString("v6"), "ok");
  EXPECT_EQ(c.localAddress(), "::1");
}

// ---- FileStore ---------------------------------------------------------------------

TEST(FileStoreTest, ProcessesAddAtomically) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  constexpr int kChildren = 4;
  constexpr int kAdds = 1000;
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: its own FileStore (flock belongs to the open file), then _exit so no
      // gtest or static destructors run twice.
      int rc = 0;
      try {
        FileStore s(path);
        for (int n = 0; n < kAdds; ++n) s.add("sum", 1);
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  // Reap with a hard bound: a hung child is killed, never waited for forever.
  const auto start = Clock::now();
  std::vector<int> status(kChildren, -1);
  size_t left = kChildren;
  while (left > 0 && msSince(start) < 30000) {
    for (int i = 0; i < kChildren; ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(5ms);
  }
  for (int i = 0; i < kChildren; ++i) {
    if (status[i] == -1) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
      ADD_FAILURE() << "child " << i << " hung; killed";
    } else {
      EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0) << "child " << i;
    }
  }
  FileStore s(path);
  EXPECT_EQ(s.getString("sum"), std::to_string(kChildren * kAdds));
}

TEST(FileStoreTest, TornTailIsIgnoredThenCutOff) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  FileStore(path).setString("a", "1");
  {
    // A writer died after writing part of a set record.
    std::ofstream f(path, std::ios::binary | std::ios::app);
    const char torn[] = {'S', 5, 0, 0, 0, 'p', 'a'};
    f.write(torn, sizeof torn);
  }
  FileStore reader(path);
  EXPECT_EQ(reader.getString("a"), "1");
  EXPECT_FALSE(reader.check({"pa"}));
  FileStore writer(path);
  writer.setString("b", "2");
  EXPECT_EQ(FileStore(path).getString("b"), "2");
  EXPECT_EQ(reader.getString("b"), "2");
  // The torn bytes are gone: the file is header + two whole records.
  EXPECT_EQ(std::filesystem::file_size(path), 8u + 2 * (1 + 4 + 1 + 4 + 1));
}

TEST(FileStoreTest, ForeignFileIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  {
    std::ofstream f(path);
    f << "this is not a store file";
  }
  FileStore s(path);
  try {
    s.check({"x"});
    ADD_FAILURE() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(FileStore(dir.path() + "/no/such/dir/store"), SystemError);
}

TEST(PrefixStoreTest, KeysLandUnderThePrefix) {
  auto base = std::make_shared<HashStore>();
  PrefixStore p("job7", base);
  p.setString("rank/0", "x");
  EXPECT_EQ(base->getString("job7/rank/0"), "x");
  EXPECT_FALSE(base->check({"rank/0"}));
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.add("n", 2);
  EXPECT_EQ(base->getString("outer/inner/n"), "2");
  EXPECT_THROW(PrefixStore("x", nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace tccl
