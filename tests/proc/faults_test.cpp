// Failure-injection tests: real worker processes (tests/proc/fault_worker.cpp) over
// real sockets, one of which dies, stops, stalls or calls the wrong collective. Every
// survivor must raise the right kind naming the agreed culprit within the bound
// (dead peers and mismatches: well under the timeout; silent peers: within twice
// the timeout), and later calls must fail with Aborted naming the same culprit.
// Every job runs under a hard deadline after which every child is SIGKILLed.
//
// The randomized soak test (FaultSoak) runs TCCL_SOAK_TRIALS trials (default 200; 60
// in sanitizer builds) of random fault, rank, algorithm, world and step,
// TCCL_SOAK_PARALLEL at a time (default 2), seeded by TCCL_SOAK_SEED (default: the
// clock, printed); rerun one trial with TCCL_SOAK_SEED=<seed> TCCL_SOAK_ONLY=<trial>.
// See docs/faults.md.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/allreduce.hpp"
#include "core/process.hpp"
#include "fault_harness.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"
#include "transport/wire.hpp"

using namespace tccl;
using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;
using namespace faulttest;

namespace {

// ---- dead peers ----------------------------------------------------------------------

constexpr int64_t kLongTimeoutMs = 10000;  // dead peers and mismatches: found long before
constexpr double kWellUnderMs = 3000;      // "well under the timeout"
// A mismatch that no message shows (the culprit only receives, say) is found by
// comparing heartbeats, three periods of a tenth of the timeout: "long before it".
constexpr double kMismatchBoundMs = kLongTimeoutMs / 2;
constexpr int64_t kSilentTimeoutMs = 1500;

struct KillCase {
  Algorithm algo;
  int world;
  int culprit;
  FaultPoint point;
  int seq;
};

std::string killCaseName(const KillCase& k) {
  std::string s = algoName(k.algo) + "_w" + std::to_string(k.world) + "_r" +
                  std::to_string(k.culprit) + "_" + k.point.phase + "_" +
                  std::to_string(k.point.step) + "_seq" + std::to_string(k.seq);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

void PrintTo(const KillCase& k, std::ostream* os) { *os << killCaseName(k); }

// For every algorithm, worlds 4 and 5 (a power of two and a fold), two culprits, and
// the first, a middle and the last (phase, step) of each culprit's own schedule.
std::vector<KillCase> killCases() {
  std::vector<KillCase> cases;
  for (Algorithm a : kAlgos) {
    for (int world : {4, 5}) {
      for (int culprit : {1, world - 1}) {
        auto pts = faultPoints(a, culprit, world, 1000);
        if (pts.empty()) continue;
        std::set<size_t> picks = {0, pts.size() / 2, pts.size() - 1};
        for (size_t i : picks) cases.push_back({a, world, culprit, pts[i], i == 0 ? 1 : 0});
      }
    }
  }
  return cases;
}

class KillMidCollective : public ::testing::TestWithParam<KillCase> {};

TEST_P(KillMidCollective, EverySurvivorRaisesPeerClosedNamingItAtOnce) {
  const KillCase& k = GetParam();
  FaultSpec spec;
  spec.world = k.world;
  spec.culprit = k.culprit;
  spec.faultEnv = "exit@" + k.point.hook() + "#" + std::to_string(k.seq);
  spec.args = {"scenario=loop", "algo=" + algoName(k.algo), "count=1000", "iters=3",
               "timeout=" + std::to_string(kLongTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  EXPECT_EQ(run.children[static_cast<size_t>(k.culprit)].exitCode, 43)
      << "the fault hook did not fire (TCCL_FAULT=" << spec.faultEnv << ")\n"
      << run.describe();
  expectCleanExits(run, k.culprit, 43);
  EXPECT_DETECTION(run, (Expect{"PeerClosed", k.culprit, allBut(k.world, k.culprit), kWellUnderMs,
                                false, k.seq}));
  // The ranks that talked to the culprit in that phase name it with the phase too.
  for (const auto& [r, rec] : run.records) {
    if (rec.get("phase") == k.point.phase) {
      EXPECT_EQ(rec.get("algorithm"), algoName(k.algo)) << run.describe();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, KillMidCollective, ::testing::ValuesIn(killCases()),
                         [](const auto& p) { return killCaseName(p.param); });

// The other collectives, killed as they start and in their one phase.
class KillOtherCollective : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(KillOtherCollective, EverySurvivorRaisesPeerClosedNamingIt) {
  const auto& [coll, hook] = GetParam();
  FaultSpec spec;
  spec.world = 4;
  spec.culprit = 2;
  spec.faultEnv = hook;
  // Calls: coll #0, allreduce #1, coll #2 (the culprit dies here), allreduce #3, ...
  spec.args = {"scenario=loop", "coll=" + coll, "then=allreduce",
               "count=777",     "iters=3",      "timeout=" + std::to_string(kLongTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  EXPECT_EQ(run.children[2].exitCode, 43) << run.describe();
  expectCleanExits(run, 2, 43);
  EXPECT_DETECTION(run, (Expect{"PeerClosed", 2, allBut(4, 2), kWellUnderMs, false, 2}));
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, KillOtherCollective,
    ::testing::Values(std::pair<std::string, std::string>{"broadcast", "exit@broadcast:1#2"},
                      std::pair<std::string, std::string>{"allgather", "exit@all-gather:2#2"},
                      std::pair<std::string, std::string>{"reducescatter",
                                                          "exit@reduce-scatter:2#2"},
                      std::pair<std::string, std::string>{"reduce", "exit@reduce:1#2"},
                      std::pair<std::string, std::string>{"barrier", "exit@barrier:1#2"},
                      std::pair<std::string, std::string>{"alltoall", "exit@all-to-all:1#2"},
                      std::pair<std::string, std::string>{"gather", "exit@gather:1#2"},
                      std::pair<std::string, std::string>{"allreduce", "exit@start#2"}),
    [](const auto& p) { return p.param.first; });

// ---- silent peers ----------------------------------------------------------------------

class StoppedPeer : public ::testing::TestWithParam<Algorithm> {};

// Every rank of `ranks` that reported a Timeout says `text` (a rank that instead failed
// with the agreed cause quoted in an Aborted error says it there too).
void expectVerdictSays(const FaultRun& run, const std::vector<int>& ranks,
                       const std::string& text) {
  for (int r : ranks) {
    auto it = run.records.find(r);
    if (it == run.records.end()) continue;  // EXPECT_DETECTION has said so
    EXPECT_NE(it->second.get("what").find(text), std::string::npos) << "rank " << r << "\n"
                                                                    << run.describe();
  }
}

TEST_P(StoppedPeer, SigstopInsideTheCollectiveIsATimeoutNamingItWithinTwiceTheTimeout) {
  const Algorithm a = GetParam();
  FaultSpec spec;
  spec.world = 4;
  spec.culprit = 2;
  spec.stopAtCall = 1;
  spec.culpritLingers = true;
  // An endless loop of large calls: the stop lands inside one or just before one.
  spec.args = {"scenario=loop", "algo=" + algoName(a), "count=200000", "iters=1000000",
               "timeout=" + std::to_string(kSilentTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  EXPECT_DETECTION(run, (Expect{"Timeout", 2, allBut(4, 2), 2.0 * kSilentTimeoutMs}));
  // The census: a stopped rank does not answer it (docs/errors.md, "Heartbeats").
  expectVerdictSays(run, allBut(4, 2), "rank 2 is not responding: its heartbeat stopped");
}

TEST_P(StoppedPeer, StopHookInsideAStepIsATimeoutNamingIt) {
  const Algorithm a = GetParam();
  const int world = 5, culprit = 3;
  auto pts = faultPoints(a, culprit, world, 1000);
  ASSERT_FALSE(pts.empty());
  FaultSpec spec;
  spec.world = world;
  spec.culprit = culprit;
  spec.faultEnv = "stop@" + pts[pts.size() / 2].hook() + "#1";
  spec.culpritLingers = true;
  spec.args = {"scenario=loop", "algo=" + algoName(a), "count=1000", "iters=3",
               "timeout=" + std::to_string(kSilentTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  EXPECT_DETECTION(
      run, (Expect{"Timeout", culprit, allBut(world, culprit), 2.0 * kSilentTimeoutMs, false, 1}));
  expectVerdictSays(
      run, allBut(world, culprit),
      "rank " + std::to_string(culprit) + " is not responding: its heartbeat stopped");
}

TEST_P(StoppedPeer, RankStuckInComputeBeforeTheCollectiveIsATimeoutNamingIt) {
  const Algorithm a = GetParam();
  FaultSpec spec;
  spec.world = 4;
  spec.culprit = 1;
  spec.culpritLingers = true;
  spec.args = {"scenario=loop",
               "algo=" + algoName(a),
               "count=1000",
               "iters=3",
               "sleep=1:" + std::to_string(6 * kSilentTimeoutMs),
               "timeout=" + std::to_string(kSilentTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  EXPECT_DETECTION(run, (Expect{"Timeout", 1, allBut(4, 1), 2.0 * kSilentTimeoutMs, false, 1}));
  // It answers the census: alive, and behind.
  expectVerdictSays(run, allBut(4, 1), "rank 1 is alive but has not entered collective #");
}

INSTANTIATE_TEST_SUITE_P(Algorithms, StoppedPeer, ::testing::ValuesIn(kAlgos),
                         [](const auto& p) { return algoName(p.param); });

// ---- a rank that never arrives ----------------------------------------------------------

// One rank of three never creates its communicator; the others run an all-reduce that
// needs every rank's host from the store (auto's cost model, hier's layout) with a short
// per-call timeout (the communicator's is long). That wait is the call's: bounded by its
// deadline, and its end is a failure like any other: a Timeout naming the missing rank
// within twice the timeout, every survivor agreeing, and Aborted for the next call.
class MissingRank : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MissingRank, TheCallTimesOutNamingTheRankThatNeverArrivedThenAborts) {
  constexpr int64_t kCallTimeoutMs = 2000;
  FaultSpec spec;
  spec.world = 3;
  spec.culprit = 2;
  spec.args = {"scenario=loop",
               "algo=" + algoName(GetParam()),
               "count=1000",
               "iters=2",
               "absent=1",
               "timeout=60000",
               "calltimeout=" + std::to_string(kCallTimeoutMs)};
  spec.deadline = Ms(40000);
  FaultRun run = runFaultJob(spec);
  expectCleanExits(run);
  for (int r : {0, 1}) {
    auto it = run.records.find(r);
    ASSERT_NE(it, run.records.end()) << "rank " << r << " has no record\n" << run.describe();
    const Record& rec = it->second;
    EXPECT_EQ(rec.get("status"), "error") << run.describe();
    EXPECT_EQ(rec.get("kind"), "Timeout") << run.describe();
    EXPECT_EQ(rec.num("culprit"), 2) << run.describe();
    EXPECT_EQ(rec.num("call"), 0) << run.describe();
    EXPECT_EQ(rec.num("seq"), 0) << run.describe();
    EXPECT_EQ(rec.get("collective"), "allreduce") << run.describe();
    EXPECT_EQ(rec.get("phase"), "hosts") << run.describe();
    EXPECT_GE(rec.num("detected_by"), 0) << run.describe();
    EXPECT_LT(rec.real("elapsed_ms"), 2.0 * kCallTimeoutMs) << run.describe();
    EXPECT_NE(rec.get("what").find("rank 2 never published a heartbeat"), std::string::npos)
        << run.describe();
    EXPECT_EQ(rec.get("later_kind"), "Aborted") << run.describe();
    EXPECT_EQ(rec.num("later_culprit"), 2) << run.describe();
    EXPECT_EQ(rec.get("later_quotes_cause"), "1") << run.describe();
    EXPECT_EQ(rec.num("abort_cause_culprit"), 2) << run.describe();
  }
  // Both survivors report the one verdict: the same detector.
  if (run.records.count(0) && run.records.count(1)) {
    EXPECT_EQ(run.records[0].get("detected_by"), run.records[1].get("detected_by"))
        << run.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MissingRank,
                         ::testing::Values(Algorithm::Auto, Algorithm::Hierarchical),
                         [](const auto& p) { return algoName(p.param); });

// ---- mismatched collectives ------------------------------------------------------------

struct MismatchCase {
  std::string deviation;
  int at;
  int world;
  int culprit;
  Algorithm algo;
};

void PrintTo(const MismatchCase& m, std::ostream* os) {
  *os << m.deviation << " at call " << m.at << ", world " << m.world << ", culprit " << m.culprit
      << ", " << algoName(m.algo);
}

class MismatchedCall : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(MismatchedCall, EveryRankRaisesMismatchNamingTheCulpritAndBothSignatures) {
  const MismatchCase& m = GetParam();
  FaultSpec spec;
  spec.world = m.world;
  spec.culprit = m.culprit;
  spec.reporters = everyRank(m.world);
  spec.args = {"scenario=mismatch",
               "deviation=" + m.deviation,
               "at=" + std::to_string(m.at),
               "algo=" + algoName(m.algo),
               "count=999",
               "iters=5",
               "timeout=" + std::to_string(kLongTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  expectCleanExits(run);
  EXPECT_DETECTION(
      run, (Expect{"Mismatch", m.culprit, everyRank(m.world), kMismatchBoundMs, true, m.at}));
}

INSTANTIATE_TEST_SUITE_P(
    Deviations, MismatchedCall,
    ::testing::Values(MismatchCase{"skip", 1, 4, 2, Algorithm::Ring},
                      MismatchCase{"skip", 0, 3, 0, Algorithm::Tree},
                      MismatchCase{"skip", 3, 5, 4, Algorithm::HalvingDoubling},
                      MismatchCase{"reorder", 0, 4, 1, Algorithm::Ring},
                      MismatchCase{"reorder", 2, 3, 2, Algorithm::Naive},
                      MismatchCase{"reorder", 1, 2, 1, Algorithm::RecursiveDoubling},
                      MismatchCase{"count", 0, 4, 3, Algorithm::Ring},
                      MismatchCase{"count", 0, 5, 0, Algorithm::Tree},
                      MismatchCase{"count", 2, 3, 1, Algorithm::HalvingDoubling},
                      MismatchCase{"count", 4, 4, 2, Algorithm::Naive},
                      MismatchCase{"dtype", 0, 4, 1, Algorithm::RecursiveDoubling},
                      MismatchCase{"op", 3, 4, 2, Algorithm::Ring},
                      MismatchCase{"root", 1, 3, 2, Algorithm::Ring}),
    [](const auto& p) {
      return p.param.deviation + "_at" + std::to_string(p.param.at) + "_w" +
             std::to_string(p.param.world) + "_r" + std::to_string(p.param.culprit) + "_" +
             algoName(p.param.algo);
    });

// A rank still inside an earlier collective when the mismatch aborts the others must get to
// the collective where the ranks disagree and report what it runs there: the verdict needs
// its vote. World 4, broadcast #1 from root 0 is a binomial tree 0->1, 0->2->3; rank 2
// stalls 600 ms before forwarding to rank 3, so rank 3 waits inside #1 while ranks 0 and 1
// go on and meet rank 1's count mismatch at all-gather #2. Rank 0's abort (sent from #2)
// reaches rank 3 inside #1. Before the executor let such an abort wait for the next call,
// rank 3 failed in #1; the decider then had 2 votes against 1 at #2, not a majority of
// the world, and blamed the peer it had detected the mismatch from.
TEST(MismatchVerdict, ASlowRankStillInAnEarlierCollectiveReportsAtTheFaultyOne) {
  FaultSpec spec;
  spec.world = 4;
  spec.culprit = 1;
  spec.reporters = everyRank(4);
  spec.otherFaultEnv[2] = "slow600@broadcast:1#1";
  spec.args = {"scenario=mismatch",
               "deviation=count",
               "at=2",
               "algo=ring",
               "count=64",
               "iters=5",
               "timeout=" + std::to_string(kLongTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  expectCleanExits(run);
  EXPECT_DETECTION(run, (Expect{"Mismatch", 1, everyRank(4), kMismatchBoundMs, true, 2}));
  auto waiting = run.records.find(3);
  ASSERT_NE(waiting, run.records.end()) << run.describe();
  EXPECT_EQ(waiting->second.num("call"), 2)
      << "rank 3 did not finish broadcast #1 before failing:\n"
      << run.describe();
}

// ---- surviving: shrink ------------------------------------------------------------------

struct ShrinkCase {
  Algorithm algo;
  int world;
  int culprit;
  bool midStep;  // killed inside a step of the algorithm, else as the call starts
};

void PrintTo(const ShrinkCase& c, std::ostream* os) {
  *os << algoName(c.algo) << ", world " << c.world << ", culprit " << c.culprit
      << (c.midStep ? ", killed mid-step" : ", killed as the call starts");
}

class ShrinkAfterKill : public ::testing::TestWithParam<ShrinkCase> {};

TEST_P(ShrinkAfterKill, SurvivorsShrinkAndFinishTheLoopWithExactResultsForTheSmallerWorld) {
  const ShrinkCase& c = GetParam();
  constexpr int kIters = 8, kKillAt = 3;
  std::string hook = "exit@start#" + std::to_string(kKillAt);
  if (c.midStep) {
    auto pts = faultPoints(c.algo, c.culprit, c.world, 1000);
    ASSERT_FALSE(pts.empty());
    hook = "exit@" + pts[pts.size() / 2].hook() + "#" + std::to_string(kKillAt);
  }
  FaultSpec spec;
  spec.world = c.world;
  spec.culprit = c.culprit;
  spec.faultEnv = hook;
  spec.args = {"scenario=shrink", "algo=" + algoName(c.algo), "count=1000",
               "iters=" + std::to_string(kIters), "timeout=" + std::to_string(kLongTimeoutMs)};
  FaultRun run = runFaultJob(spec);
  expectCleanExits(run, c.culprit, 43);
  EXPECT_DETECTION(run, (Expect{"PeerClosed", c.culprit, allBut(c.world, c.culprit), kWellUnderMs,
                                false, kKillAt}));
  std::string members;
  for (int r : allBut(c.world, c.culprit))
    members += (members.empty() ? "" : ",") + std::to_string(r);
  int newRank = 0;
  for (int r : allBut(c.world, c.culprit)) {
    const Record& rec = run.records[r];
    EXPECT_EQ(rec.get("shrink_error"), "") << run.describe();
    EXPECT_EQ(rec.num("shrink_size"), c.world - 1) << run.describe();
    EXPECT_EQ(rec.get("shrink_members"), members) << run.describe();
    EXPECT_EQ(rec.num("shrink_rank"), newRank++) << run.describe();
    EXPECT_LT(rec.real("shrink_ms"), kWellUnderMs) << "shrink waited for the dead rank\n"
                                                   << run.describe();
    EXPECT_EQ(rec.get("finished"), "1") << run.describe();
    EXPECT_EQ(rec.get("wrong"), "") << run.describe();
    // Every survivor resumes where the earliest one failed: the killed call, or the
    // one before when a survivor was aborted while finishing it.
    const long resume = rec.num("resume_at");
    EXPECT_TRUE(resume == kKillAt || resume == kKillAt - 1) << run.describe();
    EXPECT_EQ(rec.num("verified_after_shrink"), kIters - resume) << run.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ShrinkAfterKill,
                         ::testing::Values(ShrinkCase{Algorithm::Ring, 4, 2, true},
                                           ShrinkCase{Algorithm::Ring, 5, 0, false},
                                           ShrinkCase{Algorithm::Tree, 4, 0, true},
                                           ShrinkCase{Algorithm::HalvingDoubling, 5, 4, true},
                                           ShrinkCase{Algorithm::Naive, 3, 1, false},
                                           ShrinkCase{Algorithm::RecursiveDoubling, 4, 3, true}),
                         [](const auto& p) {
                           return algoName(p.param.algo) + "_w" + std::to_string(p.param.world) +
                                  "_r" + std::to_string(p.param.culprit) +
                                  (p.param.midStep ? "_mid" : "_start");
                         });

// ---- strangers on a running job ------------------------------------------------------------

// proc_test.cpp's StrangerTest talks to a listener before the job starts (while the
// ranks are connecting and read it). This one connects while the ranks are in the
// middle of a loop of collectives, heartbeats running: garbage, a truncated header,
// headers claiming 2^64-1 and kMaxPayload+1 bytes, a silent connection and a burst of
// connect-and-go. Every result must stay exact, no rank may fail, and no stranger's
// connection may outlive the job (answered with at most a Reject, then closed).
TEST(FaultStrangers, GarbageTruncatedHugeAndSilentConnectionsMidJobLeaveTheJobExact) {
  FaultSpec spec;
  spec.world = 3;
  spec.reporters = everyRank(3);
  spec.args = {"scenario=steady",
               "algo=ring",
               "count=5000",
               "iters=40",
               "pause=25",
               "announce=1",
               "timeout=" + std::to_string(kLongTimeoutMs)};
  std::vector<std::pair<std::string, net::Fd>> strangers;
  spec.whileRunning = [&](TcpStore& store) {
    store.wait({"faults/entered/2/3"}, 30s);
    for (int target : {2, 0}) {
      const std::string addr = store.getString("tccl/default/addr/" + std::to_string(target));
      const std::string to = " to rank " + std::to_string(target);
      net::Fd garbage = dial(addr);
      std::string junk(300, '\x5a');
      net::sendAll(garbage.get(), junk.data(), junk.size(), Deadline::after(5s));
      strangers.emplace_back("garbage" + to, std::move(garbage));
      net::Fd truncated = dial(addr);
      net::sendAll(truncated.get(), "TC\x01", 3, Deadline::after(5s));
      strangers.emplace_back("truncated header" + to, std::move(truncated));
      net::Fd huge = dial(addr);
      uint8_t hdr[wire::kHeaderSize];
      wire::MessageHeader h;
      h.length = ~uint64_t{0};
      wire::encodeHeader(h, hdr);
      net::sendAll(huge.get(), hdr, sizeof hdr, Deadline::after(5s));
      h.length = wire::kMaxPayload + 1;
      wire::encodeHeader(h, hdr);
      net::sendAll(huge.get(), hdr, sizeof hdr, Deadline::after(5s));
      strangers.emplace_back("huge length" + to, std::move(huge));
      strangers.emplace_back("silent" + to, dial(addr));
      for (int i = 0; i < 20; ++i) dial(addr).reset();  // connect-and-go
    }
  };
  FaultRun run = runFaultJob(spec);
  expectCleanExits(run);
  for (int r = 0; r < 3; ++r) {
    const Record& rec = run.records[r];
    EXPECT_EQ(rec.get("status"), "ok") << run.describe();
    EXPECT_EQ(rec.get("finished"), "1") << run.describe();
    EXPECT_EQ(rec.num("iterations_done"), 40) << run.describe();
  }
  ASSERT_EQ(strangers.size(), 8u);
  for (auto& [what, fd] : strangers) {
    std::vector<uint8_t> in(4096);
    size_t got = 0;
    net::IoStatus st = net::recvAll(fd.get(), in.data(), in.size(), Deadline::after(5s), &got);
    EXPECT_TRUE(st == net::IoStatus::Closed || st == net::IoStatus::Error)
        << what << ": the connection is still open after the job ended";
    EXPECT_LE(got, wire::kHelloSize) << what << ": got more than one Reject";
  }
}

}  // namespace
