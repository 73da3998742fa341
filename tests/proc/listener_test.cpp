// Issue 14, the rank side, with real processes: a rank that would host the store beyond
// the loopback without a key refuses to start (and TCCL_AUTH=off opts out with one WARN);
// a stranger is refused at once while a rank sits in a long collective; a connection flood
// at a rank leaves the job exact and the rank idle. The flood's size is
// TCCL_TEST_FLOOD_ATTEMPTS (default 1000 here; docs/security.md has the 10,000 run).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/process.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"
#include "text_util.hpp"
#include "transport/wire.hpp"

using namespace tccl;
using namespace std::chrono_literals;
using tccl::testing::countOf;
using tccl::testing::readFile;

namespace {

constexpr char kKey[] = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf";

// A scratch directory for the ranks' stderr, removed at the end.
struct LogDir {
  std::string path;
  LogDir() {
    char tmpl[] = "/tmp/tccl_listener_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~LogDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string log(int r) const { return path + "/rank" + std::to_string(r) + ".log"; }
};

// Spawns the proc worker with `args` on `world` ranks, stderr of rank r in dir.log(r).
std::vector<proc::ChildResult> runRanks(const LogDir& dir, int world,
                                        const std::vector<std::string>& args,
                                        const std::function<proc::EnvList(int)>& env,
                                        const std::function<void()>& whileRunning = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$TCCL_TEST_LOG\"",
                                   TCCL_PROC_WORKER_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  proc::ProcessGroup group;
  group.spawn(world, argv, [&](int r) {
    proc::EnvList e = {{"TCCL_DEBUG", "WARN"}, {"TCCL_TEST_LOG", dir.log(r)}};
    for (auto& kv : env(r)) e.push_back(kv);
    return e;
  });
  if (whileRunning) whileRunning();
  return group.wait(Deadline::after(120s));
}

uint16_t freePort() {
  net::Fd probe = net::listenOn("127.0.0.1", 0);
  return net::localAddress(probe.get()).port();
}

// One rank that hosts its store on MASTER_ADDR=0.0.0.0 (torchrun's variables).
proc::EnvList wildcardStoreEnv(uint16_t port, const char* key, const char* auth) {
  return {{"RANK", "0"},
          {"WORLD_SIZE", "1"},
          {"MASTER_ADDR", "0.0.0.0"},
          {"MASTER_PORT", std::to_string(port)},
          {"TCCL_RANK", ""},
          {"TCCL_WORLD_SIZE", ""},
          {"TCCL_STORE", ""},
          {"TCCL_AUTH_KEY", key},
          {"TCCL_AUTH_KEY_FILE", ""},
          {"TCCL_AUTH", auth}};
}

TEST(SecureByDefaultProc, ARankHostingTheStoreOnTheWildcardWithoutAKeyRefusesToStart) {
  LogDir dir;
  auto res =
      runRanks(dir, 1, {"grid", "1,7"}, [&](int) { return wildcardStoreEnv(freePort(), "", ""); });
  ASSERT_EQ(res.size(), 1u);
  EXPECT_FALSE(res[0].ok()) << res[0].describe();
  const std::string log = readFile(dir.log(0));
  EXPECT_EQ(countOf(log, "the store server would listen on 0.0.0.0:"), 1u) << log;
  EXPECT_EQ(countOf(log, "TCCL_AUTH=off"), 1u) << log;  // in the one error, not a WARN
  EXPECT_EQ(countOf(log, "WARN"), 0u) << log;
}

TEST(SecureByDefaultProc, TheOptOutRunsAndWarnsOnceAndAKeyRunsSilently) {
  {
    LogDir dir;
    auto res = runRanks(dir, 1, {"grid", "1,7"},
                        [&](int) { return wildcardStoreEnv(freePort(), "", "off"); });
    const std::string log = readFile(dir.log(0));
    ASSERT_EQ(res.size(), 1u);
    EXPECT_TRUE(res[0].ok()) << res[0].describe() << log;
    EXPECT_EQ(countOf(log, "WARN"), 1u) << log;
    EXPECT_EQ(countOf(log,
                      "TCCL_AUTH=off: connections to and from this process are not "
                      "authenticated"),
              1u)
        << log;
  }
  {
    LogDir dir;
    auto res = runRanks(dir, 1, {"grid", "1,7"},
                        [&](int) { return wildcardStoreEnv(freePort(), kKey, ""); });
    const std::string log = readFile(dir.log(0));
    ASSERT_EQ(res.size(), 1u);
    EXPECT_TRUE(res[0].ok()) << res[0].describe() << log;
    EXPECT_EQ(countOf(log, "WARN"), 0u) << log;
  }
}

// A job of `world` ranks with a key, its store hosted here.
struct KeyedJob {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<TcpStore> store;
  KeyedJob() {
    ::setenv("TCCL_AUTH_KEY", kKey, 1);
    ::unsetenv("TCCL_AUTH_KEY_FILE");
    server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
    store = std::make_shared<TcpStore>("127.0.0.1", server->port(), 10000ms);
  }
  ~KeyedJob() { ::unsetenv("TCCL_AUTH_KEY"); }
  proc::EnvList env(int r, int world) const {
    return {{"TCCL_AUTH_KEY", kKey},
            {"TCCL_AUTH_KEY_FILE", ""},
            {"TCCL_RANK", std::to_string(r)},
            {"TCCL_WORLD_SIZE", std::to_string(world)},
            {"TCCL_STORE", "127.0.0.1:" + std::to_string(server->port())}};
  }
  std::string rankAddress(int r) {
    const std::string k = "tccl/default/addr/" + std::to_string(r);
    store->wait({k}, 30000ms);
    return store->getString(k);
  }
  std::string record(const std::string& scenario, int r) {
    const std::string k = "proc/" + scenario + "/" + std::to_string(r);
    return store->check({k}) ? store->getString(k) : "";
  }
};

// Sends 112 bytes of junk to addr; seconds until the rank's Reject came back (-1: none).
double secondsToReject(const std::string& addr) {
  auto [host, port] = net::splitHostPort(addr);
  net::Fd fd = net::connectWithRetry(host, port, Deadline::after(5s));
  uint8_t junk[wire::kHelloSize];
  std::fill(junk, junk + sizeof junk, 0x5A);
  const auto t0 = std::chrono::steady_clock::now();
  if (net::sendAll(fd.get(), junk, sizeof junk, Deadline::after(2s)) != net::IoStatus::Ok)
    return -1;
  uint8_t reply[wire::kHelloSize];
  wire::Hello h;
  if (net::recvAll(fd.get(), reply, sizeof reply, Deadline::after(10s)) != net::IoStatus::Ok ||
      wire::decodeHello(reply, &h) != wire::DecodeStatus::Ok || h.kind != wire::HelloKind::Reject) {
    return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ListenerProc, AStrangerIsRefusedAtOnceWhileTheRankSitsInALongCollective) {
  KeyedJob job;
  LogDir dir;
  double inCall = -1, idle = -1;
  // Rank 1 joins the all-reduce 4 s late: rank 0 waits inside it all that time.
  auto res = runRanks(
      dir, 2, {"late", "1", "4000"}, [&](int r) { return job.env(r, 2); },
      [&] {
        const std::string a0 = job.rankAddress(0);
        const std::string a1 = job.rankAddress(1);
        std::this_thread::sleep_for(1500ms);  // rank 0 is in the call by now
        inCall = secondsToReject(a0);
        idle = secondsToReject(a1);  // rank 1 sleeps outside any call
      });
  for (const auto& c : res) {
    EXPECT_TRUE(c.ok()) << c.describe() << readFile(dir.log(c.index));
    EXPECT_EQ(job.record("late", c.index), "ok");
  }
  EXPECT_GE(inCall, 0.0);
  EXPECT_LT(inCall, 0.5) << "seconds to the Reject from rank 0 inside its all-reduce";
  EXPECT_GE(idle, 0.0);
  EXPECT_LT(idle, 0.5);
  EXPECT_NE(readFile(dir.log(0)).find("rejected a connection from 127.0.0.1:"), std::string::npos);
}

// One hostile connection: kind 0 closes at once, 1 sends junk and reads the Reject, 2 sends
// half a Hello and leaves, 3 connects and sends nothing (closed when the flooder ends).
void hostileConnection(const std::string& host, uint16_t port, int kind,
                       std::vector<net::Fd>* held) {
  net::Fd fd = net::connectWithRetry(host, port, Deadline::after(5s));
  uint8_t b[wire::kHelloSize];
  std::fill(b, b + sizeof b, 0x33);
  if (kind == 1) {
    net::sendAll(fd.get(), b, sizeof b, Deadline::after(2s));
    net::recvAll(fd.get(), b, sizeof b, Deadline::after(2s));
  } else if (kind == 2) {
    net::sendAll(fd.get(), b, 7, Deadline::after(2s));
  } else if (kind == 3) {
    held->push_back(std::move(fd));
    if (held->size() > 64) held->erase(held->begin());
  }
}

TEST(ListenerProc, AConnectionFloodLeavesTheJobExactAndTheRankIdle) {
  const char* env = std::getenv("TCCL_TEST_FLOOD_ATTEMPTS");
  const int attempts = env ? std::atoi(env) : 1000;
  KeyedJob job;
  LogDir dir;
  double floodSeconds = 0;
  std::atomic<int> failedConnects{0};
  auto res = runRanks(
      dir, 2, {"flood-target"}, [&](int r) { return job.env(r, 2); },
      [&] {
        auto [host, port] = net::splitHostPort(job.rankAddress(1));
        std::this_thread::sleep_for(300ms);
        const auto t0 = std::chrono::steady_clock::now();
        constexpr int kThreads = 8;
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
          threads.emplace_back([&, t, host = host, port = port] {
            std::vector<net::Fd> held;
            for (int i = t; i < attempts; i += kThreads) {
              try {
                hostileConnection(host, port, i % 4, &held);
              } catch (const Error&) {
                failedConnects.fetch_add(1);
              }
            }
          });
        }
        for (auto& th : threads) th.join();
        floodSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::this_thread::sleep_for(300ms);
        job.store->setString("flood/done", "1");
      });
  std::cout << "flood: " << attempts << " attempts in " << floodSeconds << " s ("
            << failedConnects.load() << " connects failed)\n";
  for (const auto& c : res) {
    const std::string rec = job.record("flood-target", c.index);
    std::cout << "rank " << c.index << ": " << rec << "\n";
    EXPECT_TRUE(c.ok()) << c.describe() << readFile(dir.log(c.index));
    ASSERT_EQ(rec.rfind("ok calls=", 0), 0u) << rec;
    std::istringstream in(rec.substr(3));
    std::string field;
    double cpu = -1, wall = -1, rssKiB = -1;
    int calls = -1;
    while (in >> field) {
      const auto eq = field.find('=');
      const std::string k = field.substr(0, eq);
      const double v = std::stod(field.substr(eq + 1));
      if (k == "calls") calls = static_cast<int>(v);
      if (k == "cpu_s") cpu = v;
      if (k == "wall_s") wall = v;
      if (k == "maxrss_kib") rssKiB = v;
    }
    EXPECT_GT(calls, 0);
    // Nothing spins: a spinning thread would take about one core for the whole run.
    EXPECT_LT(cpu, 0.5 * wall) << rec;
    EXPECT_LT(rssKiB, 64 * 1024) << rec;  // docs/security.md: under 64 MiB
  }
  EXPECT_LT(floodSeconds, 120.0);
  // The flooded rank's log: at most ten stranger lines, then one, then the total.
  const std::string log1 = readFile(dir.log(1));
  EXPECT_LE(countOf(log1, "WARN"), 14u) << log1;
  EXPECT_EQ(countOf(log1, "the rest are counted, not logged"), 1u) << log1;
}

}  // namespace
