// Several sockets per peer (TCCL_NSOCKS, docs/nsocks.md) between real processes: every
// all-reduce algorithm exact with exact byte counts while large messages are striped
// over 4 sockets per peer, with and without a job key; the sockets themselves (4 per ring
// neighbour, each carrying its share); and ranks that disagree on TCCL_NSOCKS, refused
// with an error naming the rank and both values. The same socket listing checks the
// socket buffers (TCCL_SOCKET_BUFFER and the same-host default). Every job runs under a
// hard deadline after which its processes are SIGKILLed (harness.hpp).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "../unit/scoped_env.hpp"
#include "harness.hpp"
#include "net/socket.hpp"

using namespace tccl;
using namespace tccl::testing;
using namespace std::chrono_literals;
using tccl::testing::ScopedEnv;

namespace {

// The threshold the tests force: at the striping floor, so that every ring chunk of
// 100003 elements (and most of the other counts' messages) is striped.
const proc::EnvList kStriped = {{"TCCL_NSOCKS", "4"}, {"TCCL_STRIPE_BYTES", "4096"}};

// tests/proc/worker.cpp's grid: every dtype x op x algorithm x placement, counts 0, 1,
// N-1, N, N+1, 100003; exact results, payload bytes equal to the closed forms (the ring:
// 2(N-1)/N x V), wire bytes = payload + headers + the handshakes of 4 sockets per peer.
TEST(NsocksProc, EveryAlgorithmExactWithExactBytesOverFourStripedSockets) {
  for (int n : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(n));
    JobSpec spec;
    spec.world = n;
    spec.args = {"grid", "0,1,N-1,N,N+1,100003"};
    spec.extraEnv = kStriped;
    spec.deadline = 240s;
    Job job = runJob(spec);
    expectAllOk(job);
    for (int r = 0; r < n; ++r) EXPECT_EQ(job.records[r], "ok") << describe(job);
  }
}

TEST(NsocksProc, AuthenticatedStripedSocketsEachProveTheKey) {
  const char* key = "8f3a6c1e9b2d4f708a5c3e1b9d7f6a4c2e0b8d6f4a2c0e8b6d4f2a0c8e6b4d2f";
  // The harness's store reads the key as the ranks do.
  ScopedEnv k("TCCL_AUTH_KEY", key);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  JobSpec spec;
  spec.world = 3;
  spec.args = {"grid", "1,N+1,100003"};
  spec.extraEnv = kStriped;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(job.records[r], "ok") << describe(job);
}

std::map<std::string, long long> fields(const std::string& rec) {
  std::map<std::string, long long> f;
  std::istringstream is(rec);
  std::string tok;
  while (is >> tok) {
    const auto eq = tok.find('=');
    if (eq != std::string::npos) f[tok.substr(0, eq)] = std::stoll(tok.substr(eq + 1));
  }
  return f;
}

// 4 ranks, ring, 2^22 int32 (16 MiB): each rank has 2 neighbours, so 8 sockets to them,
// and every one moved an equal share.
TEST(NsocksProc, FourSocketsPerNeighbourEachCarryItsShare) {
  JobSpec spec;
  spec.worker = TCCL_NSOCKS_WORKER_PATH;
  spec.world = 4;
  spec.args = {"sockets", "4194304"};
  spec.extraEnv = kStriped;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 4; ++r) {
    const std::string& rec = job.records[r];
    ASSERT_EQ(rec.rfind("ok ", 0), 0u) << describe(job);
    auto f = fields(rec);
    EXPECT_EQ(f["sockets"], 8) << rec;
    // A rank sends its right neighbour 2 x 3/4 x 16 MiB = 24 MiB and receives as much
    // from its left: a quarter, 6 MiB, on each socket (1 MiB segments in 4 chunks of
    // 256 KiB), plus the headers on socket 0.
    EXPECT_GT(f["min_bytes"], (6ll << 20) - 1) << rec;
    EXPECT_LT(f["max_bytes"], (6ll << 20) + 65536) << rec;
  }
}

TEST(NsocksProc, WithoutStripingEverythingStaysOnTheFirstSocket) {
  JobSpec spec;
  spec.worker = TCCL_NSOCKS_WORKER_PATH;
  spec.world = 4;
  spec.args = {"sockets", "4194304"};
  spec.extraEnv = {{"TCCL_NSOCKS", "4"}};  // no flow limit known: the cost model never stripes
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 4; ++r) {
    auto f = fields(job.records[r]);
    EXPECT_EQ(f["sockets"], 8) << job.records[r];
    EXPECT_LT(f["min_bytes"], 1 << 12) << "idle sockets carry only their handshake";
    EXPECT_GT(f["max_bytes"], 20ll << 20);
  }
}

// Socket buffers (docs/env.md, TCCL_SOCKET_BUFFER), read back from every rank's own
// sockets to its ring neighbours after a 16 MiB ring all-reduce. getsockopt reports
// twice what was set (the kernel's bookkeeping share).
Job socketsJob(int world, const proc::EnvList& env, bool p2p = false) {
  JobSpec spec;
  spec.worker = TCCL_NSOCKS_WORKER_PATH;
  spec.world = world;
  spec.args = {"sockets", "4194304"};
  if (p2p) spec.args.push_back("p2p");
  spec.extraEnv = env;
  return runJob(spec);
}

// Unset: links between ranks of one host (all of them here, on loopback) send from a
// fixed 256 KiB buffer and leave the receive side to the kernel's autotuning.
TEST(SocketBuffersProc, SameHostLinksSendFromA256KiBBufferByDefault) {
  for (int n : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(n));
    Job job = socketsJob(n, {{"TCCL_SOCKET_BUFFER", ""}});
    expectAllOk(job);
    for (int r = 0; r < n; ++r) {
      auto f = fields(job.records[r]);
      EXPECT_EQ(f["sockets"], n == 2 ? 1 : 2) << job.records[r];
      EXPECT_EQ(f["min_sndbuf"], 2 * 262144) << job.records[r];
      EXPECT_EQ(f["max_sndbuf"], 2 * 262144) << job.records[r];
      // Autotuned: 16 MiB went through, so the receive side grew past its initial size
      // (tcp_rmem's default) and past the send side's fixed one, which a receive buffer
      // set like the send buffer could not.
      EXPECT_GT(f["max_rcvbuf"], 2 * 262144) << job.records[r];
    }
  }
}

// The point-to-point lane's links between ranks of one host get 4 MiB on both sides where
// the kernel allows it (net.core.wmem_max and rmem_max at least 4 MiB), and autotune both
// elsewhere (a fixed 256 KiB send buffer cost 4 MiB bandwidth there; an autotuned receive
// buffer grew to 27 MB and halved bw at 64 KiB: docs/PERFORMANCE.md, 2026-12-07). After
// 16 MiB on each lane, the sockets to the ring neighbours are the collectives' two, sending
// from 512 KiB, and the p2p lane's two (to the same listeners).
TEST(SocketBuffersProc, PointToPointSameHostLinksGet4MiBBuffersWhereAllowed) {
  Job job = socketsJob(4, {{"TCCL_SOCKET_BUFFER", ""}}, /*p2p=*/true);
  expectAllOk(job);
  const bool allowed = net::bufferCapsAllow(4 << 20);
  for (int r = 0; r < 4; ++r) {
    auto f = fields(job.records[r]);
    EXPECT_EQ(f["sockets"], 4) << job.records[r];
    EXPECT_EQ(f["min_sndbuf"], 2 * 262144) << job.records[r];
    if (allowed) {
      EXPECT_EQ(f["max_sndbuf"], 2 * (4 << 20)) << job.records[r];
      EXPECT_GE(f["max_rcvbuf"], 2 * (4 << 20)) << job.records[r];
    } else {
      EXPECT_GT(f["max_sndbuf"], 2 * 262144) << job.records[r];  // autotuned, grew
    }
  }
}

// A value sets both buffers of every link.
TEST(SocketBuffersProc, TcclSocketBufferSetsBothSidesOfEveryLink) {
  Job job = socketsJob(4, {{"TCCL_SOCKET_BUFFER", "100000"}});
  expectAllOk(job);
  for (int r = 0; r < 4; ++r) {
    auto f = fields(job.records[r]);
    EXPECT_EQ(f["sockets"], 2) << job.records[r];
    EXPECT_EQ(f["min_sndbuf"], 200000) << job.records[r];
    EXPECT_EQ(f["max_sndbuf"], 200000) << job.records[r];
    EXPECT_EQ(f["min_rcvbuf"], 200000) << job.records[r];
    EXPECT_EQ(f["max_rcvbuf"], 200000) << job.records[r];
  }
}

// 0: the kernel autotunes both sides, as it did before the default for same-host links:
// the send buffers start at tcp_wmem's default and grow with the traffic, so they do not
// all sit at the default's fixed 512 KiB.
TEST(SocketBuffersProc, ZeroLeavesBothSidesToAutotuning) {
  Job job = socketsJob(4, {{"TCCL_SOCKET_BUFFER", "0"}});
  expectAllOk(job);
  for (int r = 0; r < 4; ++r) {
    auto f = fields(job.records[r]);
    EXPECT_EQ(f["sockets"], 2) << job.records[r];
    EXPECT_FALSE(f["min_sndbuf"] == 2 * 262144 && f["max_sndbuf"] == 2 * 262144) << job.records[r];
  }
}

// The failure paths over striped links (worker.cpp's scenarios, 4096 float32: every ring
// chunk is at least the 4096-byte floor, so striped): a peer that dies between two calls
// is found from its sockets at once, and a count mismatch at the first header.
TEST(NsocksProc, ADeadPeerIsFoundFromItsStripedSockets) {
  JobSpec spec;
  spec.world = 4;
  spec.args = {"die-mid", "2"};
  spec.extraEnv = kStriped;
  spec.deadline = 60s;
  Job job = runJob(spec);
  EXPECT_EQ(job.children[2].exitCode, 3) << describe(job);
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(job.records.count(r)) << describe(job);
    const Failure f = parseFailure(job.records[r]);
    EXPECT_EQ(f.kind, "PeerClosed") << job.records[r];
    EXPECT_LT(f.seconds, 5.0) << "found from the sockets, not at the 30 s timeout";
  }
  EXPECT_EQ(parseFailure(job.records[3]).peer, 2) << job.records[3];
}

TEST(NsocksProc, ACountMismatchIsReportedAtTheFirstStripedHeader) {
  JobSpec spec;
  spec.world = 3;
  spec.args = {"mismatch", "1"};
  spec.extraEnv = kStriped;
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  ASSERT_TRUE(job.records.count(2)) << describe(job);
  const Failure f = parseFailure(job.records[2]);
  EXPECT_EQ(f.kind, "Mismatch") << job.records[2];
  EXPECT_EQ(f.peer, 1) << job.records[2];
  EXPECT_EQ(f.culprit, 1) << job.records[2];
  EXPECT_EQ(f.phase, "reduce-scatter") << job.records[2];
  EXPECT_EQ(f.step, 0) << job.records[2];
  EXPECT_LT(f.seconds, 10.0);
}

// Rank 2 has TCCL_NSOCKS=2, the others 4: every rank fails its first call at once (the
// ranks that dial rank 2 are refused by it, rank 2 refuses them), and what each reports
// names rank 2 and both values.
TEST(NsocksProc, RanksThatDisagreeOnNsocksAreRefusedNamingTheRankAndBothValues) {
  JobSpec spec;
  spec.worker = TCCL_NSOCKS_WORKER_PATH;
  spec.world = 3;
  spec.args = {"mismatch", "2", "2"};
  spec.extraEnv = {{"TCCL_NSOCKS", "4"}};
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::string& rec = job.records[r];
    EXPECT_EQ(rec.rfind("error ", 0), 0u) << describe(job);
    EXPECT_NE(rec.find("TCCL_NSOCKS=2"), std::string::npos) << rec;
    EXPECT_NE(rec.find("TCCL_NSOCKS=4"), std::string::npos) << rec;
    EXPECT_NE(rec.find("rank 2 has TCCL_NSOCKS=2"), std::string::npos) << rec;
    // One cause for all (the failure protocol's agreement): a refused handshake.
    EXPECT_NE(rec.find("kind=Handshake"), std::string::npos) << rec;
  }
}

}  // namespace
