// Multi-process tests: real worker processes (tests/proc/worker.cpp) over real TCP
// sockets on loopback. Every job runs under a hard deadline after which every child
// is SIGKILLed, so no test can hang; CTest's TIMEOUT is the second line of defence.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "harness.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"
#include "transport/wire.hpp"

using namespace tccl;
using namespace tccl::testing;
using namespace std::chrono_literals;

namespace {

// ---- correctness grid ---------------------------------------------------------------

class GridTest : public ::testing::TestWithParam<int> {};

TEST_P(GridTest, EveryDtypeOpAlgorithmAndCountIsExactWithExactByteCounts) {
  const int n = GetParam();
  JobSpec spec;
  spec.world = n;
  spec.args = {"grid", "0,1,N-1,N,N+1,100003"};
  spec.deadline = 240s;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < n; ++r) EXPECT_EQ(job.records[r], "ok") << describe(job);
}

INSTANTIATE_TEST_SUITE_P(Worlds, GridTest, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& p) { return "world" + std::to_string(p.param); });

TEST(ProcTest, SmallSegmentsPipelineManySegmentsPerStep) {
  // 4-byte segments: every element is its own message, exercising deep pipelines.
  JobSpec spec;
  spec.world = 4;
  spec.args = {"grid", "N+1,37"};
  spec.extraEnv = {{"TCCL_SEGMENT_BYTES", "8"}};
  Job job = runJob(spec);
  expectAllOk(job);
}

TEST(ProcTest, TorchrunEnvironmentWithRankZeroHostingTheStore) {
  JobSpec spec;
  spec.world = 3;
  spec.args = {"grid", "1,N+1,1000"};
  spec.torchrunEnv = true;
  Job job = runJob(spec);
  expectAllOk(job);
}

TEST(ProcTest, HundredsOfMillionsOfElementsInPlaceWithLinearMemory) {
  // 200M float32 = 800 MB per rank; peak RSS must stay near V (no N x V buffers).
  JobSpec spec;
  spec.world = 2;
  spec.args = {"large", "200000000"};
  spec.deadline = 240s;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(job.records[r].rfind("ok", 0), 0u) << describe(job);
}

// ---- failures -------------------------------------------------------------------------

TEST(FailureTest, DeadPeerIsDetectedAtOnceAndNamedByItsRingNeighbours) {
  // Rank 2 exits between two all-reduces: its neighbours see the socket close.
  JobSpec spec;
  spec.world = 4;
  spec.args = {"die-mid", "2"};
  spec.deadline = 60s;
  Job job = runJob(spec);
  EXPECT_EQ(job.children[2].exitCode, 3) << describe(job);
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(job.children[static_cast<size_t>(r)].ok()) << describe(job);
    ASSERT_TRUE(job.records.count(r)) << describe(job);
    EXPECT_EQ(job.records[r].rfind("error", 0), 0u) << describe(job);
  }
  // Rank 3 receives from rank 2: it sees the socket close and names rank 2. The
  // others fail as the abort spreads (each names the neighbour whose socket closed;
  // naming the root cause on every rank is the failure-handling issue's work).
  Failure f3 = parseFailure(job.records[3]);
  EXPECT_EQ(f3.peer, 2) << job.records[3];
  EXPECT_EQ(f3.kind, "PeerClosed") << job.records[3];
  for (int r : {0, 1, 3}) {
    Failure f = parseFailure(job.records[r]);
    EXPECT_EQ(f.kind, "PeerClosed") << job.records[r];
    EXPECT_LT(f.seconds, 5.0)
        << "a dead peer must be found from the socket, not at the 30 s timeout";
  }
}

TEST(FailureTest, PeerDeadBeforeConnectingIsNamed) {
  // Rank 2 publishes its address, then exits. Rank 1 dials it and is refused at once;
  // rank 3 waits for rank 2 to dial in and gives up at the timeout, then reports the
  // cause the ranks agreed on through the store: rank 2 is gone.
  JobSpec spec;
  spec.world = 4;
  spec.args = {"die", "2"};
  spec.extraEnv = {{"TCCL_TIMEOUT_MS", "2000"}};
  spec.deadline = 60s;
  Job job = runJob(spec);
  EXPECT_EQ(job.children[2].exitCode, 3) << describe(job);
  ASSERT_TRUE(job.records.count(1) && job.records.count(3)) << describe(job);
  Failure f1 = parseFailure(job.records[1]);
  EXPECT_EQ(f1.kind, "PeerClosed") << job.records[1];
  EXPECT_EQ(f1.peer, 2) << job.records[1];
  EXPECT_LT(f1.seconds, 1.0) << job.records[1];
  Failure f3 = parseFailure(job.records[3]);
  EXPECT_EQ(f3.kind, "PeerClosed") << job.records[3];
  EXPECT_EQ(f3.peer, 2) << job.records[3];
  EXPECT_LE(f3.seconds, 4.0) << job.records[3];
}

TEST(FailureTest, SilentPeerIsNamedAtTheTimeout) {
  JobSpec spec;
  spec.world = 3;
  spec.args = {"sleep", "1", "6000"};
  spec.extraEnv = {{"TCCL_TIMEOUT_MS", "1500"}};
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  // Rank 2 receives from rank 1 in the ring.
  ASSERT_TRUE(job.records.count(2)) << describe(job);
  Failure f = parseFailure(job.records[2]);
  EXPECT_EQ(f.kind, "Timeout") << job.records[2];
  EXPECT_EQ(f.peer, 1) << job.records[2];
  EXPECT_GE(f.seconds, 1.4);
  EXPECT_LE(f.seconds, 3.0) << "within 2x the timeout";
}

TEST(FailureTest, CountMismatchIsReportedAtTheFirstMessage) {
  JobSpec spec;
  spec.world = 3;
  spec.args = {"mismatch", "1"};
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  ASSERT_TRUE(job.records.count(2)) << describe(job);
  Failure f = parseFailure(job.records[2]);
  EXPECT_EQ(f.kind, "Mismatch") << job.records[2];
  EXPECT_EQ(f.peer, 1) << job.records[2];
  EXPECT_EQ(f.culprit, 1) << job.records[2];
  EXPECT_EQ(f.seq, 0) << job.records[2];
  // The first message rank 2 receives is rank 1's, in the first step of the ring's
  // reduce-scatter (2 steps at world 3): its header says 4097 elements where 4096 were
  // expected, so the error comes before any payload byte is taken.
  EXPECT_EQ(f.phase, "reduce-scatter") << job.records[2];
  EXPECT_EQ(f.step, 0) << job.records[2];
  EXPECT_EQ(f.steps, 2) << job.records[2];
  EXPECT_EQ(f.bytesMoved, 0) << job.records[2];
  EXPECT_LT(f.seconds, 10.0);
}

TEST(FailureTest, MissingRankTimesOutNamingIt) {
  JobSpec spec;
  spec.world = 3;
  spec.spawn = 2;  // rank 2 never starts
  spec.args = {"die", "2"};
  spec.extraEnv = {{"TCCL_TIMEOUT_MS", "1500"}};
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r : {0, 1}) {
    ASSERT_TRUE(job.records.count(r)) << describe(job);
    Failure f = parseFailure(job.records[r]);
    EXPECT_EQ(f.kind, "Timeout") << job.records[r];
    EXPECT_EQ(f.peer, 2) << job.records[r];
    EXPECT_LE(f.seconds, 3.0);
  }
}

// ---- strangers --------------------------------------------------------------------

net::Fd dial(const std::string& addr) {
  auto [host, port] = net::splitHostPort(addr);
  return net::connectWithRetry(host, port, Deadline::after(5s));
}

TEST(StrangerTest, GarbageTruncatedAndForeignHellosAreRejectedAndTheJobCarriesOn) {
  JobSpec spec;
  spec.world = 3;
  spec.args = {"wait-go"};
  spec.deadline = 120s;
  wire::Hello reply;
  bool gotReply = false;
  size_t garbageAnswer = 0;
  spec.whileRunning = [&](TcpStore& store) {
    // Rank 2 accepts from ranks 0 and 1 in the ring: talk to its listener.
    store.wait({"tccl/default/addr/2"}, 30s);
    const std::string addr = store.getString("tccl/default/addr/2");
    net::Fd garbage = dial(addr);
    std::string junk(64, '\x5a');
    net::sendAll(garbage.get(), junk.data(), junk.size(), Deadline::after(5s));
    net::Fd truncated = dial(addr);
    net::sendAll(truncated.get(), "TCCL\x01", 5, Deadline::after(5s));
    truncated.reset();
    net::Fd hugeLength = dial(addr);
    uint8_t hdr[wire::kHeaderSize];
    wire::MessageHeader h;
    h.length = ~uint64_t{0};
    wire::encodeHeader(h, hdr);
    net::sendAll(hugeLength.get(), hdr, sizeof hdr, Deadline::after(5s));
    net::Fd silent = dial(addr);
    net::Fd foreign = dial(addr);
    wire::Hello hello;
    hello.jobId = 12345;  // another job
    hello.rank = 0;
    hello.worldSize = 3;
    hello.targetRank = 2;
    uint8_t buf[wire::kHelloSize];
    wire::encodeHello(hello, buf);
    net::sendAll(foreign.get(), buf, sizeof buf, Deadline::after(5s));
    store.setString("go", "1");
    uint8_t in[wire::kHelloSize];
    if (net::recvAll(foreign.get(), in, sizeof in, Deadline::after(30s)) == net::IoStatus::Ok) {
      gotReply = wire::decodeHello(in, &reply) == wire::DecodeStatus::Ok;
    }
    net::recvAll(garbage.get(), in, sizeof in, Deadline::after(30s), &garbageAnswer);
  };
  Job job = runJob(spec);
  expectAllOk(job);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(job.records[r], "ok") << describe(job);
  ASSERT_TRUE(gotReply) << "the foreign hello got no answer";
  EXPECT_EQ(reply.kind, wire::HelloKind::Reject);
  EXPECT_EQ(reply.reason, wire::RejectReason::WrongJob);
  // The garbage sender gets a Reject (BadMagic) and is disconnected.
  EXPECT_EQ(garbageAnswer, wire::kHelloSize);
}

}  // namespace
