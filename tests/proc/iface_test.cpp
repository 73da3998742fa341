// Interface choice over real processes (tests/proc/iface_worker.cpp): all-reduce with
// the store and every rank on IPv6 (::1) chosen by address, by interface plus
// TCCL_SOCKET_FAMILY, and by the route to the store; an IPv4 CIDR; TCCL_SOCKET_IFNAME
// matching nothing; and a rank in another network namespace (another "host") refused
// loopback. Each rank's stderr (TCCL_DEBUG=INFO) goes to a file, so the tests also
// read the logged choice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/process.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct IfaceJob {
  std::vector<proc::ChildResult> children;
  std::vector<std::string> records;    // "iface/<rank>"
  std::vector<std::string> published;  // "tccl/default/addr/<rank>" (the listener)
  std::vector<std::string> logs;       // each rank's stderr
  std::string describe() const {
    std::ostringstream os;
    for (size_t r = 0; r < children.size(); ++r) {
      os << "rank " << r << ": " << children[r].describe() << " record '" << records[r]
         << "' published '" << published[r] << "'\n"
         << logs[r];
    }
    return os.str();
  }
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tccl-iface-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// argv that runs `argv` with stderr appended to $TCCL_IFACE_LOG.
std::vector<std::string> withLog(std::vector<std::string> argv) {
  std::vector<std::string> out = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>\"$TCCL_IFACE_LOG\""};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// Runs `world` iface workers against a TcpStoreServer on storeHost.
IfaceJob runTcpJob(const std::string& storeHost, int world, const proc::EnvList& env) {
  TempDir dir;
  TcpStoreServer server(storeHost, 0);
  const std::string addr = net::joinHostPort(storeHost, server.port());
  proc::ProcessGroup group;
  group.spawn(world, withLog({TCCL_IFACE_WORKER_PATH, "tcp"}), [&](int r) {
    // Nothing inherited from the caller's environment decides the choice.
    proc::EnvList e = {{"TCCL_SOCKET_IFNAME", ""}, {"TCCL_SOCKET_FAMILY", ""}};
    e.insert(e.end(), env.begin(), env.end());
    e.push_back({"TCCL_RANK", std::to_string(r)});
    e.push_back({"TCCL_WORLD_SIZE", std::to_string(world)});
    e.push_back({"TCCL_STORE", addr});
    e.push_back({"TCCL_DEBUG", "INFO"});
    e.push_back({"TCCL_IFACE_LOG", (dir.path() / ("rank" + std::to_string(r))).string()});
    return e;
  });
  IfaceJob job;
  job.children = group.wait(Deadline::after(60s));
  TcpStore store(storeHost, server.port(), 5s);
  for (int r = 0; r < world; ++r) {
    const std::string rec = "iface/" + std::to_string(r);
    const std::string pub = "tccl/default/addr/" + std::to_string(r);
    job.records.push_back(store.check({rec}) ? store.getString(rec) : "");
    job.published.push_back(store.check({pub}) ? store.getString(pub) : "");
    job.logs.push_back(slurp(dir.path() / ("rank" + std::to_string(r))));
  }
  return job;
}

bool ipv6LoopbackWorks() {
  try {
    return net::listenOn("::1", 0).valid();
  } catch (const Error&) {
    return false;
  }
}

void expectAllOkOn(const IfaceJob& job, const std::string& prefix, const std::string& logLine) {
  for (size_t r = 0; r < job.children.size(); ++r) {
    EXPECT_TRUE(job.children[r].ok()) << job.describe();
    EXPECT_EQ(job.records[r].rfind("ok " + prefix, 0), 0u) << job.describe();
    EXPECT_EQ(job.published[r].rfind(prefix, 0), 0u) << job.describe();
    EXPECT_EQ(job.records[r], "ok " + job.published[r]);
    EXPECT_NE(job.logs[r].find(logLine), std::string::npos) << job.describe();
  }
}

TEST(IfaceProc, Ipv6StoreAndListenersChosenByAddress) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  IfaceJob job = runTcpJob("::1", 3, {{"TCCL_SOCKET_IFNAME", "::1"}});
  expectAllOkOn(job, "[::1]:",
                "listen address ::1 (lo): TCCL_SOCKET_IFNAME=::1 matches lo ::1; the only match");
}

TEST(IfaceProc, Ipv6ByInterfaceNameAndFamilyWithAnIpv4Store) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  IfaceJob job = runTcpJob("127.0.0.1", 3,
                           {{"TCCL_SOCKET_IFNAME", "=lo"}, {"TCCL_SOCKET_FAMILY", "AF_INET6"}});
  expectAllOkOn(job, "[::1]:",
                "listen address ::1 (lo): TCCL_SOCKET_IFNAME==lo with "
                "TCCL_SOCKET_FAMILY=AF_INET6 matches lo ::1");
}

TEST(IfaceProc, Ipv6ByTheRouteToTheStore) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  IfaceJob job = runTcpJob("::1", 2, {{"TCCL_SOCKET_IFNAME", ""}});
  expectAllOkOn(job, "[::1]:", "listen address ::1 (lo): this host's address on its connection");
}

TEST(IfaceProc, Ipv4ByCidr) {
  IfaceJob job = runTcpJob("127.0.0.1", 2, {{"TCCL_SOCKET_IFNAME", "127.0.0.0/8"}});
  expectAllOkOn(job, "127.0.0.1:", "listen address 127.0.0.1 (lo): TCCL_SOCKET_IFNAME=127.0.0.0/8");
}

TEST(IfaceProc, NoMatchingInterfaceFailsEveryRankWithTheList) {
  IfaceJob job = runTcpJob("127.0.0.1", 2, {{"TCCL_SOCKET_IFNAME", "=nosuch0,10.255.255.254"}});
  for (size_t r = 0; r < job.children.size(); ++r) {
    EXPECT_TRUE(job.children[r].exited && job.children[r].exitCode == 1) << job.describe();
    EXPECT_EQ(job.records[r].rfind("error InvalidArgument TCCL_SOCKET_IFNAME='=nosuch0,"
                                   "10.255.255.254' matches no usable interface",
                                   0),
              0u)
        << job.describe();
    EXPECT_NE(job.records[r].find("Interfaces on this host: lo 127.0.0.1"), std::string::npos)
        << job.describe();
    EXPECT_EQ(job.published[r], "") << "a rank listened although its choice failed";
  }
}

TEST(IfaceProc, RankInAnotherNetworkNamespaceIsRefusedLoopback) {
  // Rank 1 runs in a network namespace of its own: another "host" whose loopback is
  // not rank 0's. With a FileStore there is no store route, so both would listen on
  // 127.0.0.1; rank 1 must refuse, naming rank 0's host.
  const char* unshare = "/usr/bin/unshare";
  if (::access(unshare, X_OK) != 0) GTEST_SKIP() << "no " << unshare;
  {
    proc::ProcessGroup probe;
    probe.spawn(1, {unshare, "-n", "/bin/true"}, [](int) { return proc::EnvList{}; });
    auto res = probe.wait(Deadline::after(10s));
    if (!res[0].ok()) GTEST_SKIP() << "cannot create a network namespace (unshare -n)";
  }
  TempDir dir;
  const std::string storePath = (dir.path() / "store").string();
  auto envFor = [&](int r) {
    return proc::EnvList{{"TCCL_RANK", std::to_string(r)},
                         {"TCCL_WORLD_SIZE", "2"},
                         {"TCCL_TIMEOUT_MS", "3000"},
                         {"TCCL_SOCKET_IFNAME", ""},
                         {"TCCL_SOCKET_FAMILY", ""},
                         {"TCCL_DEBUG", "INFO"},
                         {"TCCL_IFACE_LOG", (dir.path() / ("rank" + std::to_string(r))).string()}};
  };
  proc::ProcessGroup rank0, rank1;
  rank0.spawn(1, withLog({TCCL_IFACE_WORKER_PATH, "file:" + storePath}),
              [&](int) { return envFor(0); });
  rank1.spawn(1, withLog({unshare, "-n", TCCL_IFACE_WORKER_PATH, "file:" + storePath}),
              [&](int) { return envFor(1); });
  auto r1 = rank1.wait(Deadline::after(30s));
  auto r0 = rank0.wait(Deadline::after(30s));
  FileStore store(storePath);
  const std::string rec1 = store.check({"iface/1"}) ? store.getString("iface/1") : "";
  const std::string log1 = slurp(dir.path() / "rank1");
  EXPECT_TRUE(r1[0].exited && r1[0].exitCode == 1) << r1[0].describe() << "\n" << log1;
  EXPECT_EQ(rec1.rfind("error InvalidArgument refusing to listen on the loopback address "
                       "127.0.0.1: rank 0 runs on another host",
                       0),
            0u)
      << rec1 << "\n"
      << log1;
  // Rank 0 (same host as itself) listened, then could not reach rank 1 in time.
  EXPECT_FALSE(r0[0].ok()) << r0[0].describe();
  EXPECT_TRUE(store.check({"tccl/default/addr/0"}));
  EXPECT_FALSE(store.check({"tccl/default/addr/1"}));
}

}  // namespace
