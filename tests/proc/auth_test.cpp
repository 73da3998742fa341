// Authenticated jobs over real processes and sockets: a job with a key computes exact
// results; strangers with a wrong key or none, dialling a rank's port or the store, are
// refused, logged with their address, and the job completes; two concurrent jobs with
// the same job id, communicator, ranks and world size but different keys never connect,
// even when one is pointed at the other's rank; without a key each process warns once.
//
// Every job runs under a hard deadline (ProcessGroup SIGKILLs what is left). Each rank's
// stderr goes to a file the test reads, to check what the ranks logged.
#include "auth/auth.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../unit/scoped_env.hpp"
#include "core/process.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"
#include "text_util.hpp"
#include "transport/transport.hpp"
#include "transport/wire.hpp"

using namespace tccl;
using namespace std::chrono_literals;
using tccl::testing::contains;
using tccl::testing::countOf;
using tccl::testing::readFile;
using tccl::testing::ScopedEnv;

namespace {

constexpr char kKeyA[] = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf";
constexpr char kKeyB[] =
    "5f5e5d5c5b5a59585756555453525150"
    "4f4e4d4c4b4a49484746454443424140";
constexpr char kWrongKey[] = "0000000000000000000000000000000000000000000000000000000000000001";

// One job: a TcpStore server hosted here (holding `key`, or none), `world` worker
// processes with the same key in their environment, each rank's stderr in a file.
class Job {
 public:
  Job(const char* key, int world, std::vector<std::string> args, proc::EnvList extraEnv = {})
      : world_(world), scenario_(args.empty() ? "" : args.front()) {
    char tmpl[] = "/tmp/tccl_auth_job_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    {
      ScopedEnv k("TCCL_AUTH_KEY", key);
      ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
      server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
      store_ = std::make_shared<TcpStore>("127.0.0.1", server_->port(), 10000ms);
    }
    // The worker's stderr goes to $TCCL_TEST_LOG; sh keeps argv intact ("$@").
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$TCCL_TEST_LOG\"",
                                     TCCL_PROC_WORKER_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string addr = storeAddress();
    group_.spawn(world, argv, [&](int r) {
      proc::EnvList env;
      env.push_back({"TCCL_AUTH_KEY", key ? key : ""});
      env.push_back({"TCCL_AUTH_KEY_FILE", ""});
      env.push_back({"TCCL_DEBUG", "WARN"});
      env.push_back({"TCCL_RANK", std::to_string(r)});
      env.push_back({"TCCL_WORLD_SIZE", std::to_string(world)});
      env.push_back({"TCCL_STORE", addr});
      env.push_back({"TCCL_TEST_LOG", logPath(r)});
      env.insert(env.end(), extraEnv.begin(), extraEnv.end());  // the last one wins
      return env;
    });
  }
  ~Job() {
    group_.killAll();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string storeAddress() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  uint16_t storePort() const { return server_->port(); }
  TcpStore& store() { return *store_; }
  std::string logPath(int r) const { return dir_ + "/rank" + std::to_string(r) + ".log"; }
  std::string log(int r) const { return readFile(logPath(r)); }
  // The listening address rank r published.
  std::string rankAddress(int r) {
    const std::string k = "tccl/default/addr/" + std::to_string(r);
    store_->wait({k}, 30000ms);
    return store_->getString(k);
  }
  uint64_t jobId() {
    store_->wait({"tccl/default/jobid"}, 30000ms);
    return std::stoull(store_->getString("tccl/default/jobid"));
  }

  std::vector<proc::ChildResult> wait(std::chrono::seconds deadline) {
    results_ = group_.wait(Deadline::after(deadline));
    return results_;
  }
  std::string record(int r) {
    const std::string k = "proc/" + scenario_ + "/" + std::to_string(r);
    return store_->check({k}) ? store_->getString(k) : "";
  }
  std::string describe() {
    std::ostringstream os;
    for (const auto& c : results_) {
      os << "rank " << c.index << ": " << c.describe() << " record: " << record(c.index)
         << "\n--- log ---\n"
         << log(c.index) << "\n";
    }
    return os.str();
  }
  int world() const { return world_; }

 private:
  int world_;
  std::string scenario_;
  std::string dir_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<TcpStore> store_;
  proc::ProcessGroup group_;
  std::vector<proc::ChildResult> results_;
};

void expectAllOk(Job& job) {
  for (const auto& c : job.wait(120s)) {
    EXPECT_TRUE(c.ok()) << job.describe();
    EXPECT_EQ(job.record(c.index), "ok") << job.describe();
  }
}

// A rank of "another job": a real Transport with its own key (or none) that claims to be
// rank 0 of the same job, communicator and world, and dials `target` at `address`.
std::string dialAsIntruder(const char* key, uint64_t jobId, int world, int target,
                           const std::string& address) {
  TransportConfig c;
  c.rank = 0;
  c.worldSize = world;
  c.jobId = jobId;
  c.commId = wire::hash64("default");
  c.authKeyFromEnv = false;
  if (key) {
    std::string err;
    c.authKey = auth::parseHexKey(key, &err);
  }
  auto fake = std::make_shared<HashStore>();
  Transport t(c, fake);
  fake->setString("addr/" + std::to_string(target), address);
  try {
    t.connect({target}, Deadline::after(30s));
  } catch (const Error& e) {
    return std::string(toString(e.kind())) + ": " + e.what();
  }
  return "connected";
}

// A TcpStore client with `key` (or none): "" if it connected, else the error.
std::string storeClient(const char* key, uint16_t port, ErrorKind* kind) {
  ScopedEnv k("TCCL_AUTH_KEY", key);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  try {
    TcpStore s("127.0.0.1", port, 5000ms);
    s.check({"x"});
  } catch (const Error& e) {
    *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(AuthJob, KeyedJobComputesExactResultsWithAuthenticatedConnections) {
  Job job(kKeyA, 3, {"grid", "1,N+1,1000"});
  expectAllOk(job);
  for (int r = 0; r < 3; ++r) {
    const std::string log = job.log(r);
    EXPECT_TRUE(contains(log, "grid ok")) << log;  // the worker checked every result
    EXPECT_FALSE(contains(log, "not authenticated")) << log;
    EXPECT_FALSE(contains(log, "rejected")) << log;
  }
}

TEST(AuthJob, KeyFromAFileWorksTheSame) {
  char tmpl[] = "/tmp/tccl_auth_key_XXXXXX";
  const int fd = ::mkstemp(tmpl);  // mode 0600
  ASSERT_GE(fd, 0);
  const std::string text = std::string(kKeyB) + "\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  const std::string path = tmpl;
  {
    // The store here holds key B from the variable; the ranks read it from the file.
    Job job(kKeyB, 2, {"grid", "1,1000"}, {{"TCCL_AUTH_KEY", ""}, {"TCCL_AUTH_KEY_FILE", path}});
    expectAllOk(job);
  }
  {
    // A store server and client that read the file, and a client given the key inline.
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    ScopedEnv f("TCCL_AUTH_KEY_FILE", path.c_str());
    TcpStoreServer server("127.0.0.1", 0);
    TcpStore client("127.0.0.1", server.port(), 5000ms);
    client.setString("k", "v");
    ScopedEnv k2("TCCL_AUTH_KEY", kKeyB);
    ScopedEnv f2("TCCL_AUTH_KEY_FILE", nullptr);
    TcpStore inlineClient("127.0.0.1", server.port(), 5000ms);
    EXPECT_EQ(inlineClient.getString("k"), "v");
  }
  ::unlink(path.c_str());
}

TEST(AuthJob, StrangersWithWrongOrNoKeyAreRejectedLoggedAndTheJobCompletes) {
  Job job(kKeyA, 3, {"wait-go"});
  const uint64_t jobId = job.jobId();
  // Rank 2 accepts from ranks 0 and 1: the strangers dial it before the job starts its
  // collectives, so they wait in its listen queue and are judged when it first serves it.
  const std::string rank2 = job.rankAddress(2);
  auto wrongKey =
      std::async(std::launch::async, [&] { return dialAsIntruder(kWrongKey, jobId, 3, 2, rank2); });
  auto noKey =
      std::async(std::launch::async, [&] { return dialAsIntruder(nullptr, jobId, 3, 2, rank2); });
  // A stranger that speaks the protocol, claims a key and answers the challenge with a
  // made-up MAC: the rank's own verification refuses it.
  auto forger = std::async(std::launch::async, [&] {
    auto [host, port] = net::splitHostPort(rank2);
    net::Fd fd = net::connectWithRetry(host, port, Deadline::after(10s));
    wire::Hello h;
    h.jobId = jobId;
    h.commId = wire::hash64("default");
    h.rank = 0;
    h.worldSize = 3;
    h.targetRank = 2;
    h.flags = wire::kHelloFlagAuth;
    h.nonce = auth::randomNonce();
    uint8_t b[wire::kHelloSize];
    wire::encodeHello(h, b);
    net::sendAll(fd.get(), b, sizeof b, Deadline::after(10s));
    wire::Hello reply;
    if (net::recvAll(fd.get(), b, sizeof b, Deadline::after(30s)) != net::IoStatus::Ok ||
        wire::decodeHello(b, &reply) != wire::DecodeStatus::Ok ||
        reply.kind != wire::HelloKind::Challenge) {
      return std::string("no challenge");
    }
    h.kind = wire::HelloKind::Proof;
    h.mac.fill(0x5A);
    wire::encodeHello(h, b);
    net::sendAll(fd.get(), b, sizeof b, Deadline::after(10s));
    if (net::recvAll(fd.get(), b, sizeof b, Deadline::after(30s)) != net::IoStatus::Ok ||
        wire::decodeHello(b, &reply) != wire::DecodeStatus::Ok) {
      return std::string("no verdict");
    }
    return std::string(reply.kind == wire::HelloKind::Reject ? "reject: " : "accept: ") +
           std::string(wire::toString(reply.reason));
  });

  // Strangers at the store, with a wrong key and with none.
  ::testing::internal::CaptureStderr();
  ErrorKind wrongKind = ErrorKind::InvalidArgument;
  ErrorKind noneKind = ErrorKind::InvalidArgument;
  const std::string storeWrong = storeClient(kWrongKey, job.storePort(), &wrongKind);
  const std::string storeNone = storeClient(nullptr, job.storePort(), &noneKind);
  std::this_thread::sleep_for(200ms);  // the server thread logs after the client gives up
  const std::string serverLog = ::testing::internal::GetCapturedStderr();

  // Let the strangers reach rank 2's queue, then start the job.
  std::this_thread::sleep_for(300ms);
  job.store().setString("go", "1");
  const std::string wrongKeyResult = wrongKey.get();
  const std::string noKeyResult = noKey.get();
  const std::string forgerResult = forger.get();
  expectAllOk(job);

  EXPECT_TRUE(contains(wrongKeyResult, "Handshake")) << wrongKeyResult;
  EXPECT_TRUE(contains(wrongKeyResult, rank2)) << wrongKeyResult;
  EXPECT_TRUE(contains(wrongKeyResult, "authentication failed")) << wrongKeyResult;
  EXPECT_TRUE(contains(noKeyResult, "Handshake")) << noKeyResult;
  EXPECT_TRUE(contains(noKeyResult, "requires an auth key")) << noKeyResult;
  EXPECT_EQ(forgerResult, "reject: " + std::string(wire::toString(wire::RejectReason::AuthFailed)));

  EXPECT_EQ(wrongKind, ErrorKind::Handshake) << storeWrong;
  EXPECT_TRUE(contains(storeWrong, job.storeAddress())) << storeWrong;
  EXPECT_TRUE(contains(storeWrong, "does not hold this job's key")) << storeWrong;
  EXPECT_EQ(noneKind, ErrorKind::Handshake) << storeNone;
  EXPECT_TRUE(contains(storeNone, "requires authentication")) << storeNone;
  EXPECT_EQ(countOf(serverLog, "closing connection from 127.0.0.1:"), 2u) << serverLog;

  // Rank 2 logged each refusal at WARN with the stranger's address.
  const std::string log2 = job.log(2);
  EXPECT_GE(countOf(log2, "WARN"), 3u) << log2;
  // The wrong key: it refused rank 2's challenge (logged then, or at rank 2's exit if rank 2
  // had all its peers by the time the refusal came).
  EXPECT_TRUE(contains(log2, "refused this rank's challenge") ||
              contains(log2, "never finished its handshake (no proof)"))
      << log2;
  EXPECT_TRUE(contains(log2, "there has no key")) << log2;       // no key
  EXPECT_TRUE(contains(log2, "authentication failed")) << log2;  // the forger
  EXPECT_GE(countOf(log2, "127.0.0.1:"), 3u) << log2;
}

TEST(AuthJob, TwoJobsWithTheSameIdsPortsAndRanksButDifferentKeysNeverConnect) {
  // Same job id, communicator, world size and ranks: only the keys differ.
  const proc::EnvList same = {{"TCCL_JOB_ID", "the-same-job"}};
  proc::EnvList bEnv = same;
  bEnv.push_back({"TCCL_TIMEOUT_MS", "4000"});  // B's orphaned rank gives up quickly
  Job a(kKeyA, 3, {"wait-go"}, same);
  Job b(kKeyB, 3, {"wait-go"}, bEnv);
  ASSERT_EQ(a.jobId(), b.jobId());
  const std::string a2 = a.rankAddress(2);
  ASSERT_NE(a2, b.rankAddress(2));

  // The same store: B's key does not open A's store, nor A's key B's.
  ErrorKind kind = ErrorKind::InvalidArgument;
  std::string err = storeClient(kKeyB, a.storePort(), &kind);
  EXPECT_EQ(kind, ErrorKind::Handshake) << err;
  EXPECT_TRUE(contains(err, a.storeAddress())) << err;
  kind = ErrorKind::InvalidArgument;
  err = storeClient(kKeyA, b.storePort(), &kind);
  EXPECT_EQ(kind, ErrorKind::Handshake) << err;

  // The same ports: point B's ranks at A's rank 2 (as if B's rank 2 had published A's
  // address), start B, then A. A2's transport serves its listener all the time, so B's
  // dials are answered (and refused) at once, whether or not A2 is connecting yet.
  b.store().setString("tccl/default/addr/2", a2);
  b.store().setString("go", "1");
  // B's ranks fail at the handshake (A2 challenges them with A's key) before A starts:
  // then A's own connections cannot be what turns B's dials away.
  std::vector<proc::ChildResult> bResults = b.wait(60s);
  a.store().setString("go", "1");

  // A completes with exact results; no rank of B got anywhere.
  expectAllOk(a);
  int refused = 0;
  for (const auto& c : bResults) {
    EXPECT_FALSE(c.ok()) << b.describe();
    EXPECT_EQ(b.record(c.index), "") << b.describe();
    const std::string log = b.log(c.index);
    if (contains(log, "Handshake") && contains(log, a2) && contains(log, "authentication failed"))
      ++refused;
  }
  EXPECT_GE(refused, 1) << b.describe();
  // A's rank 2 logged B's dial with its address: B refused its challenge (if A2 was still
  // connecting when B's refusal came), or at exit, a connection that never finished.
  const std::string log = a.log(2);
  EXPECT_TRUE(contains(log, "refused this rank's challenge") ||
              contains(log, "never finished its handshake (no proof)"))
      << log;
  EXPECT_TRUE(contains(log, "WARN [pid")) << log;
  EXPECT_TRUE(contains(log, "127.0.0.1:")) << log;
}

TEST(AuthJob, WithoutAKeyEachProcessWarnsOnceAndWorks) {
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  Job job(nullptr, 2, {"grid", "1,1000"});
  expectAllOk(job);
  for (int r = 0; r < 2; ++r) {
    // The store client and the transport both looked for a key; one line says so.
    EXPECT_EQ(countOf(job.log(r), "TCCL_AUTH_KEY is not set"), 1u) << job.log(r);
  }
}

}  // namespace
