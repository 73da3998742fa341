// The harness of the failure-injection tests (faults_test.cpp, soak_test.cpp): runs a
// job of tests/proc/fault_worker.cpp processes under a hard deadline, collects every
// rank's record from the job's store, and judges a detection.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/allreduce.hpp"
#include "core/process.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"

namespace faulttest {

using namespace tccl;
using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

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
    // Not a number ("none", say): -98, which no expectation holds, instead of throwing.
    char* end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    return *end == '\0' ? v : -98;
  }
  double real(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end() || it->second.empty()) return 1e18;
    return std::stod(it->second);
  }
};

inline Record parseRecord(const std::string& s) {
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
  int stopSignal = SIGSTOP;                  // what stopAtCall sends (SIGKILL: a kill)
  int killAfterMs = -1;         // SIGKILL the culprit this long after it was spawned (bootstrap)
  bool culpritLingers = false;  // stopped or stalled: killed once the others reported
  std::vector<int> reporters;   // ranks whose records end the job (default: all but culprit)
  Ms deadline{60000};
  std::function<void(TcpStore& store)> whileRunning;
  // The same, also told the store's address.
  std::function<void(TcpStore& store, const std::string& storeAddr)> whileRunningAt;
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

inline FaultRun runFaultJob(const FaultSpec& spec) {
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
  if (spec.killAfterMs >= 0 && spec.culprit >= 0) {
    std::this_thread::sleep_for(Ms(spec.killAfterMs));
    ::kill(group.pids()[static_cast<size_t>(spec.culprit)], SIGKILL);
  }
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
      ::kill(group.pids()[static_cast<size_t>(spec.culprit)], spec.stopSignal);
    } catch (const Error&) {
      // Never announced: the records below will say what happened.
    }
  }
  if (spec.whileRunning) spec.whileRunning(store);
  if (spec.whileRunningAt) spec.whileRunningAt(store, addr);
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
  bool collective = true;   // false: point to point, which takes no sequence number
};

// `expected` is one kind or several separated by '|' ("PeerClosed|Timeout").
inline bool kindMatches(const std::string& expected, const std::string& kind) {
  std::istringstream is(expected);
  std::string one;
  while (std::getline(is, one, '|'))
    if (one == kind) return true;
  return false;
}

// Every problem with the run, one line each (empty: the detection was right).
inline std::vector<std::string> judge(const FaultRun& run, const Expect& e) {
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
    if (!kindMatches(e.kind, rec.get("kind")))
      bad.push_back(who + "kind " + rec.get("kind") + ", expected " + e.kind);
    if (rec.num("culprit") != e.culprit)
      bad.push_back(who + "culprit " + rec.get("culprit") + ", expected " +
                    std::to_string(e.culprit));
    if (rec.real("elapsed_ms") > e.boundMs)
      bad.push_back(who + "detected after " + rec.get("elapsed_ms") + " ms, bound " +
                    std::to_string(static_cast<long>(e.boundMs)) + " ms");
    if (e.collective && (rec.get("collective").empty() || rec.num("seq") < 0))
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
    if (e.collective && rec.num("seq") != rec.num("call"))
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

inline std::string joinLines(const std::vector<std::string>& v) {
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
inline void expectCleanExits(const FaultRun& run, int except = -1, int exceptStatus = 0) {
  for (const auto& c : run.children) {
    if (c.index == except && exceptStatus < 0) continue;
    const int want = c.index == except ? exceptStatus : 0;
    EXPECT_TRUE(c.exited && c.exitCode == want)
        << "rank " << c.index << " " << c.describe() << ", expected exit " << want << "\n"
        << run.describe();
  }
}

inline std::vector<int> allBut(int world, int culprit) {
  std::vector<int> v;
  for (int r = 0; r < world; ++r)
    if (r != culprit) v.push_back(r);
  return v;
}

inline std::vector<int> everyRank(int world) { return allBut(world, -1); }

// ---- where a rank can be killed: the (phase, step) pairs of its own schedule -----------

struct FaultPoint {
  std::string phase;  // as errors print it (every hook name is a prefix of it)
  int step = 0;       // 1-based within the phase
  std::string hook() const { return phase + ":" + std::to_string(step); }
};

inline std::vector<FaultPoint> faultPoints(Algorithm a, int rank, int n, size_t count) {
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

inline const Algorithm kAlgos[] = {Algorithm::Ring, Algorithm::Tree, Algorithm::HalvingDoubling,
                                   Algorithm::Naive, Algorithm::RecursiveDoubling};

inline std::string algoName(Algorithm a) { return std::string(toString(a)); }

inline net::Fd dial(const std::string& addr) {
  auto [host, port] = net::splitHostPort(addr);
  return net::connectWithRetry(host, port, Deadline::after(5s));
}

}  // namespace faulttest
