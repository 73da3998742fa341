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
#include "net/socket.hpp"
#include "tccl/tccl.hpp"
#include "transport/wire.hpp"

using namespace tccl;
using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

namespace {

// ---- the job runner ------------------------------------------------------------------

struct Record {
  bool present = false;
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k) const {
    auto it = kv.find(k);
    return it == kv.end() ? "" : it->second;
  }
  long num(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end() || it->second.empty()) return -99;
    return std::stol(it->second);
  }
  double real(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end() || it->second.empty()) return 1e18;
    return std::stod(it->second);
  }
};

Record parseRecord(const std::string& s) {
  Record r;
  r.present = true;
  std::istringstream is(s);
  std::string line;
  while (std::getline(is, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) r.kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return r;
}

struct FaultSpec {
  int world = 4;
  std::vector<std::string> args;  // key=value, for the worker
  int culprit = -1;
  std::string faultEnv;                      // TCCL_FAULT on the culprit only
  std::map<int, std::string> otherFaultEnv;  // TCCL_FAULT on other ranks (slow ones)
  int stopAtCall = -1;                       // SIGSTOP the culprit once it announces this call
  bool culpritLingers = false;               // stopped or stalled: killed once the others reported
  std::vector<int> reporters;  // ranks whose records end the job (default: all but culprit)
  Ms deadline{60000};
  std::function<void(TcpStore& store)> whileRunning;
  bool quiet = false;  // TCCL_DEBUG=NONE: no warnings on stderr (the records say it all)
};

struct FaultRun {
  std::vector<proc::ChildResult> children;
  std::map<int, Record> records;
  double seconds = 0;
  std::string describe() const {
    std::ostringstream os;
    for (const auto& c : children) {
      os << "rank " << c.index << ": " << c.describe() << "\n";
      auto it = records.find(c.index);
      if (it != records.end()) {
        for (const auto& [k, v] : it->second.kv) os << "    " << k << "=" << v << "\n";
      }
    }
    return os.str();
  }
};

FaultRun runFaultJob(const FaultSpec& spec) {
  TcpStoreServer server("127.0.0.1", 0);
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::string> argv = {TCCL_FAULT_WORKER_PATH};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  argv.push_back("culprit=" + std::to_string(spec.culprit));
  if (spec.stopAtCall >= 0) argv.push_back("announce=1");
  const Deadline deadline = Deadline::after(spec.deadline);
  const auto start = std::chrono::steady_clock::now();
  proc::ProcessGroup group;
  group.spawn(spec.world, argv, [&](int r) {
    proc::EnvList env = {{"TCCL_RANK", std::to_string(r)},
                         {"TCCL_WORLD_SIZE", std::to_string(spec.world)},
                         {"TCCL_STORE", addr},
                         {"TCCL_TUNE_FILE", "/nonexistent"}};
    if (r == spec.culprit && !spec.faultEnv.empty()) env.push_back({"TCCL_FAULT", spec.faultEnv});
    if (auto it = spec.otherFaultEnv.find(r); it != spec.otherFaultEnv.end())
      env.push_back({"TCCL_FAULT", it->second});
    if (spec.quiet) env.push_back({"TCCL_DEBUG", "NONE"});
    return env;
  });
  TcpStore store("127.0.0.1", server.port(), 10s);
  auto remaining = [&] {
    return std::max(
        Ms(1), std::chrono::duration_cast<Ms>(deadline.at() - std::chrono::steady_clock::now()));
  };
  if (spec.stopAtCall >= 0) {
    try {
      store.wait({"faults/entered/" + std::to_string(spec.culprit) + "/" +
                  std::to_string(spec.stopAtCall)},
                 remaining());
      // Let it get into the collective (or stop it just before: silent either way).
      std::this_thread::sleep_for(20ms);
      ::kill(group.pids()[static_cast<size_t>(spec.culprit)], SIGSTOP);
    } catch (const Error&) {
      // Never announced: the records below will say what happened.
    }
  }
  if (spec.whileRunning) spec.whileRunning(store);
  std::vector<int> reporters = spec.reporters;
  if (reporters.empty()) {
    for (int r = 0; r < spec.world; ++r)
      if (r != spec.culprit) reporters.push_back(r);
  }
  std::vector<std::string> keys;
  for (int r : reporters) keys.push_back("faults/result/" + std::to_string(r));
  try {
    store.wait(keys, remaining());
  } catch (const Error&) {
  }
  store.setString("faults/done", "1");
  if (spec.culpritLingers && spec.culprit >= 0)
    ::kill(group.pids()[static_cast<size_t>(spec.culprit)], SIGKILL);
  FaultRun run;
  run.children = group.wait(Deadline::after(std::min(Ms(10000), remaining() + Ms(2000))));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < spec.world; ++r) {
    const std::string key = "faults/result/" + std::to_string(r);
    if (store.check({key})) run.records[r] = parseRecord(store.getString(key));
  }
  return run;
}

// ---- what a correct detection looks like ----------------------------------------------

struct Expect {
  std::string kind;
  int culprit = -1;
  std::vector<int> ranks;  // the ranks that must report it
  double boundMs = 0;
  bool signatures = false;  // Mismatch: both signatures, different
  int call = -1;            // the call that must fail (+-1), if known
};

// Every problem with the run, one line each (empty: the detection was right).
std::vector<std::string> judge(const FaultRun& run, const Expect& e) {
  std::vector<std::string> bad;
  for (int r : e.ranks) {
    const std::string who = "rank " + std::to_string(r) + ": ";
    auto it = run.records.find(r);
    if (it == run.records.end()) {
      bad.push_back(who + "no record (hang or crash: " +
                    run.children[static_cast<size_t>(r)].describe() + ")");
      continue;
    }
    const Record& rec = it->second;
    if (rec.get("status") != "error") {
      bad.push_back(who + "status " + rec.get("status") + " " + rec.get("wrong") + rec.get("what"));
      continue;
    }
    if (rec.get("kind") != e.kind)
      bad.push_back(who + "kind " + rec.get("kind") + ", expected " + e.kind);
    if (rec.num("culprit") != e.culprit)
      bad.push_back(who + "culprit " + rec.get("culprit") + ", expected " +
                    std::to_string(e.culprit));
    if (rec.real("elapsed_ms") > e.boundMs)
      bad.push_back(who + "detected after " + rec.get("elapsed_ms") + " ms, bound " +
                    std::to_string(static_cast<long>(e.boundMs)) + " ms");
    if (rec.get("collective").empty() || rec.num("seq") < 0)
      bad.push_back(who + "the error names no collective and sequence number");
    // A rank may fail one call late (it finished the faulty call without needing the
    // culprit's data and waits for it in the next), never further. It may fail early:
    // one call early when the abort reaches it while it finishes the call before; any
    // number of calls early when it is a slow rank that the others did not need for
    // the calls in between (a leaf of a broadcast), provided it learnt of the failure
    // from another rank rather than judged one itself.
    if (e.call >= 0 && rec.num("call") > e.call + 1)
      bad.push_back(who + "failed in call " + rec.get("call") + ", expected " +
                    std::to_string(e.call) + " (or one later)");
    if (e.call >= 0 && rec.num("call") < e.call - 1 && rec.num("detected_by") == r)
      bad.push_back(who + "detected a failure itself in call " + rec.get("call") +
                    ", before the faulty call " + std::to_string(e.call));
    if (rec.num("seq") != rec.num("call"))
      bad.push_back(who + "the error names collective #" + rec.get("seq") +
                    " but the failing call was #" + rec.get("call"));
    if (rec.num("detected_by") < 0) bad.push_back(who + "detectedBy not set");
    if (rec.get("culprit_address").empty()) bad.push_back(who + "culpritAddress empty");
    // Both signatures; on every rank but the culprit they differ (on the culprit
    // both are its own call).
    if (e.signatures) {
      if (rec.get("local_sig").empty() || rec.get("remote_sig").empty() ||
          (r != e.culprit && rec.get("local_sig") == rec.get("remote_sig")))
        bad.push_back(who + "signatures '" + rec.get("local_sig") + "' vs '" +
                      rec.get("remote_sig") + "'");
    }
    if (rec.get("later_kind") != "Aborted" || rec.num("later_culprit") != e.culprit ||
        rec.get("later_quotes_cause") != "1")
      bad.push_back(who + "a later call raised " + rec.get("later_kind") + " culprit " +
                    rec.get("later_culprit") + " (expected Aborted quoting the cause, culprit " +
                    std::to_string(e.culprit) + ")");
    if (rec.num("abort_cause_culprit") != e.culprit)
      bad.push_back(who + "abortCause() culprit " + rec.get("abort_cause_culprit"));
  }
  return bad;
}

std::string joinLines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += "  " + l + "\n";
  return s;
}

#define EXPECT_DETECTION(run, expect)                                                     \
  do {                                                                                    \
    auto problems_ = judge(run, expect);                                                  \
    EXPECT_TRUE(problems_.empty()) << joinLines(problems_) << "job:\n" << run.describe(); \
  } while (0)

// Every process ended on its own with status 0, but `except` (which may end as
// `exceptStatus`, or be killed when -1).
void expectCleanExits(const FaultRun& run, int except = -1, int exceptStatus = 0) {
  for (const auto& c : run.children) {
    if (c.index == except && exceptStatus < 0) continue;
    const int want = c.index == except ? exceptStatus : 0;
    EXPECT_TRUE(c.exited && c.exitCode == want)
        << "rank " << c.index << " " << c.describe() << ", expected exit " << want << "\n"
        << run.describe();
  }
}

std::vector<int> allBut(int world, int culprit) {
  std::vector<int> v;
  for (int r = 0; r < world; ++r)
    if (r != culprit) v.push_back(r);
  return v;
}

std::vector<int> everyRank(int world) { return allBut(world, -1); }

// ---- where a rank can be killed: the (phase, step) pairs of its own schedule -----------

struct FaultPoint {
  std::string phase;  // as errors print it (every hook name is a prefix of it)
  int step = 0;       // 1-based within the phase
  std::string hook() const { return phase + ":" + std::to_string(step); }
};

std::vector<FaultPoint> faultPoints(Algorithm a, int rank, int n, size_t count) {
  const algo::Schedule s = algo::allreduceSchedule(a, rank, n, count, size_t{1} << 18);
  std::vector<FaultPoint> out;
  std::set<std::pair<std::string, int>> seen;
  for (const algo::Op& op : s.ops) {
    const algo::Phase* ph = s.phaseOf(op.step);
    if (ph == nullptr) continue;
    const int local = static_cast<int>(op.step - ph->firstStep) + 1;
    if (seen.insert({ph->name, local}).second) out.push_back({ph->name, local});
  }
  return out;
}

const Algorithm kAlgos[] = {Algorithm::Ring, Algorithm::Tree, Algorithm::HalvingDoubling,
                            Algorithm::Naive, Algorithm::RecursiveDoubling};

std::string algoName(Algorithm a) { return std::string(toString(a)); }

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

net::Fd dial(const std::string& addr) {
  auto [host, port] = net::splitHostPort(addr);
  return net::connectWithRetry(host, port, Deadline::after(5s));
}

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

// ---- the randomized soak -------------------------------------------------------------------

int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

struct Trial {
  int index = 0;
  std::string what;
  FaultSpec spec;
  Expect expect;
  int culpritExit = -2;  // -2: not checked
};

// Sanitizer builds run every process several times slower: half the trials.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDefaultSoakTrials = 60;
#else
constexpr int kDefaultSoakTrials = 200;
#endif
constexpr int64_t kSoakTimeoutMs = 5000;  // dead peers and mismatches
constexpr double kSoakWellUnderMs = 2000;
// Stopped and stalled peers; these trials first connect under a 30 s deadline (the
// worker's warmup=1), so that the 1 s is not spent on a loaded machine's handshakes.
constexpr int64_t kSoakSilentTimeoutMs = 1000;

Trial makeTrial(uint64_t seed, int index) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Trial t;
  t.index = index;
  const int world = pick(2, 5);
  const Algorithm algo = kAlgos[pick(0, 4)];
  const size_t count = static_cast<size_t>(pick(world, 300));
  int culprit = pick(0, world - 1);
  const int roll = pick(0, 99);
  std::ostringstream what;
  FaultSpec& s = t.spec;
  s.world = world;
  s.deadline = 30s;
  s.quiet = true;  // hundreds of processes: a failed trial prints its records instead
  std::vector<std::string> common = {"algo=" + algoName(algo), "count=" + std::to_string(count)};
  auto args = [&](std::vector<std::string> more, int64_t timeoutMs) {
    more.insert(more.end(), common.begin(), common.end());
    more.push_back("timeout=" + std::to_string(timeoutMs));
    return more;
  };
  // Hooks fire in call 0 or 1 of 3: a survivor that had everything it needed from the
  // culprit may finish the faulty call, and must then meet the failure in a later one.
  if (roll < 35) {  // a dead peer, at a random step of its own schedule or as it starts
    auto pts = faultPoints(algo, culprit, world, count);
    const int seq = pick(0, 1);
    const int which = pick(0, static_cast<int>(pts.size()));
    const std::string where =
        which == static_cast<int>(pts.size()) ? "start" : pts[static_cast<size_t>(which)].hook();
    s.faultEnv = "exit@" + where + "#" + std::to_string(seq);
    s.args = args({"scenario=loop", "iters=3"}, kSoakTimeoutMs);
    t.expect = {"PeerClosed", culprit, allBut(world, culprit), kSoakWellUnderMs, false, seq};
    t.culpritExit = 43;
    what << "TCCL_FAULT=" << s.faultEnv;
  } else if (roll < 45) {  // SIGSTOP from outside, somewhere in an endless loop
    s.stopAtCall = pick(0, 5);
    s.culpritLingers = true;
    s.args = args({"scenario=loop", "iters=1000000", "warmup=1"}, kSoakSilentTimeoutMs);
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs};
    what << "SIGSTOP after call " << s.stopAtCall;
  } else if (roll < 53) {  // SIGSTOP from the hook, inside a step
    auto pts = faultPoints(algo, culprit, world, count);
    const int seq = pick(0, 1);
    // After the warm-up (collective #0), call k of the loop is collective #k+1.
    s.faultEnv = "stop@" +
                 pts[static_cast<size_t>(pick(0, static_cast<int>(pts.size()) - 1))].hook() + "#" +
                 std::to_string(seq + 1);
    s.culpritLingers = true;
    s.args = args({"scenario=loop", "iters=3", "warmup=1"}, kSoakSilentTimeoutMs);
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs,
                false,     seq + 1};
    what << "TCCL_FAULT=" << s.faultEnv;
  } else if (roll < 60) {  // stuck in compute before a call
    const int call = pick(0, 2);
    s.culpritLingers = true;
    s.args =
        args({"scenario=loop", "iters=3", "warmup=1",
              "sleep=" + std::to_string(call) + ":" + std::to_string(8 * kSoakSilentTimeoutMs)},
             kSoakSilentTimeoutMs);
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs,
                false,     call + 1};
    what << "stuck before call " << call;
  } else {                        // a mismatched call in a sequence of five different collectives
    if (world == 2) culprit = 1;  // a 1-1 tie blames the group without rank 0
    static const char* kDeviations[] = {"skip", "reorder", "count", "dtype", "op"};
    const std::string dev = kDeviations[pick(0, 4)];
    int at = 0;
    if (dev == "skip" || dev == "reorder")
      at = pick(0, 3);
    else if (dev == "op")
      at = std::vector<int>{0, 3, 4}[static_cast<size_t>(pick(0, 2))];
    else
      at = pick(0, 4);
    s.reporters = everyRank(world);
    s.args = args({"scenario=mismatch", "iters=5", "deviation=" + dev, "at=" + std::to_string(at)},
                  kSoakTimeoutMs);
    t.expect = {"Mismatch", culprit, everyRank(world), kSoakTimeoutMs / 2.0, true, at};
    t.culpritExit = 0;
    what << dev << " at call " << at;
  }
  s.culprit = culprit;
  std::ostringstream full;
  full << "trial " << index << ": world " << world << " " << algoName(algo) << " count " << count
       << " culprit " << culprit << ": " << what.str();
  t.what = full.str();
  return t;
}

TEST(FaultSoak, RandomFaultsRanksAlgorithmsAndStepsNeverHangAndAlwaysNameTheCulprit) {
  const int trials = envInt("TCCL_SOAK_TRIALS", kDefaultSoakTrials);
  const int parallel = std::max(1, envInt("TCCL_SOAK_PARALLEL", 2));
  const int only = envInt("TCCL_SOAK_ONLY", -1);
  const uint64_t seed =
      std::getenv("TCCL_SOAK_SEED") != nullptr
          ? std::strtoull(std::getenv("TCCL_SOAK_SEED"), nullptr, 10)
          : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
                1000000007ull;
  std::cout << "[ soak     ] seed " << seed << ", " << trials << " trials, " << parallel
            << " at a time (reproduce: TCCL_SOAK_SEED=" << seed << " TCCL_SOAK_ONLY=<trial>)"
            << std::endl;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::map<std::string, std::pair<int, double>> byKind;  // kind -> trials, slowest ms
  int hangs = 0, wrongCulprits = 0;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (;;) {
      const int i = next++;
      if (i >= trials) return;
      if (only >= 0 && i != only) continue;
      Trial t = makeTrial(seed, i);
      FaultRun run = runFaultJob(t.spec);
      std::vector<std::string> bad = judge(run, t.expect);
      if (only >= 0) {
        for (const auto& [r, rec] : run.records)
          std::cout << "rank " << r << ": " << rec.get("what") << "\n";
      }
      bool hang = false, wrongCulprit = false;
      double slowest = 0;
      for (int r : t.expect.ranks) {
        auto it = run.records.find(r);
        if (it == run.records.end()) {
          hang = true;
          continue;
        }
        if (!it->second.get("elapsed_ms").empty())
          slowest = std::max(slowest, it->second.real("elapsed_ms"));
        if (it->second.num("culprit") != t.expect.culprit) wrongCulprit = true;
      }
      for (const auto& c : run.children) {
        if (c.index == t.spec.culprit) {
          if (t.culpritExit != -2 && !(c.exited && c.exitCode == t.culpritExit))
            bad.push_back("culprit " + c.describe() + ", expected exit " +
                          std::to_string(t.culpritExit));
        } else if (!(c.exited && c.exitCode == 0)) {
          bad.push_back("rank " + std::to_string(c.index) + " " + c.describe());
        }
      }
      std::lock_guard<std::mutex> lk(mu);
      auto& k = byKind[t.expect.kind];
      ++k.first;
      k.second = std::max(k.second, slowest);
      hangs += hang ? 1 : 0;
      wrongCulprits += wrongCulprit ? 1 : 0;
      if (!bad.empty()) failures.push_back(t.what + "\n" + joinLines(bad) + run.describe());
    }
  };
  std::vector<std::thread> pool;
  for (int p = 0; p < parallel; ++p) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ soak     ] " << trials << " trials in " << secs << " s: " << hangs << " hangs, "
            << wrongCulprits << " wrong culprits, " << failures.size() << " failed trials"
            << std::endl;
  for (const auto& [kind, v] : byKind)
    std::cout << "[ soak     ]   " << kind << ": " << v.first << " trials, slowest detection "
              << static_cast<long>(v.second) << " ms" << std::endl;
  EXPECT_EQ(hangs, 0);
  EXPECT_EQ(wrongCulprits, 0);
  // Every failed trial in one line (the trial and its first problem), then the first
  // ten in full.
  std::sort(failures.begin(), failures.end());
  for (const auto& f : failures) {
    const auto nl = f.find('\n');
    const auto nl2 = f.find('\n', nl + 1);
    std::cout << "[ soak     ] FAILED " << f.substr(0, nl) << " |"
              << f.substr(nl + 1, nl2 == std::string::npos ? std::string::npos : nl2 - nl - 1)
              << std::endl;
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i)
    ADD_FAILURE() << "seed " << seed << " " << failures[i];
}

}  // namespace
