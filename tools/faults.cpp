// tccl faults: failure scenarios, each spawning N real worker processes, injecting one
// fault, and printing what every rank reported (error kind, culprit, who detected it,
// the collective and its sequence number, algorithm/phase/step, message) and how long
// detection took. The exit status says whether detection was right: 0 when every rank
// that must report raised the expected kind naming the expected culprit within the
// bound (dead peers and mismatches: under half the timeout; silent peers: within
// twice the timeout), 1 otherwise, 2 for bad usage. Every scenario is bounded: its
// processes are SIGKILLed at 2 x timeout + 15 s whatever happens. docs/faults.md.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "algorithms/allreduce.hpp"
#include "cli.hpp"
#include "core/error_fields.hpp"
#include "core/process.hpp"
#include "subcommands.hpp"

namespace tccl::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// 2^32 float32 elements (16 GiB) per buffer at most; the memory check decides the rest.
constexpr int64_t kMaxCount = int64_t{1} << 32;

const std::vector<std::string> kValueOptions = {
    "world", "algo",  "timeout-ms", "count",   "iters",          "kill", "at",
    "stop",  "stuck", "skip",       "reorder", "count-mismatch", "rank"};
const std::vector<std::string> kFlags = {"json", "shrink", "all"};

// The worker's own options (set by the parent, not documented for users).
const std::vector<std::string> kWorkerValueOptions = {
    "mode", "culprit", "algo", "count", "timeout-ms", "iters", "deviation", "deviate-at", "sleep"};
const std::vector<std::string> kWorkerFlags = {"announce"};

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// ---- worker ----------------------------------------------------------------------------

struct Call {
  std::string coll = "allreduce";
  size_t count = 0;
  Algorithm algo = Algorithm::Auto;
};

// Element i of original rank o in iteration it: small integers, exact in float32.
float valueOf(int o, int it, size_t i) {
  return static_cast<float>((o + 1) * (it % 5 + 1) + static_cast<int>(i % 7));
}

class FaultWorker {
 public:
  FaultWorker(const Args& a, Communicator comm, std::shared_ptr<Store> results)
      : comm_(std::move(comm)), results_(std::move(results)) {
    mode_ = a.get("mode", "loop");
    culprit_ = static_cast<int>(a.getInt("culprit", -1, -1, kMaxLocalWorld));
    algo_ = a.getAlgorithm("algo", Algorithm::Ring);
    count_ = static_cast<size_t>(a.getInt("count", 65536, 0, kMaxCount));
    iters_ = static_cast<int>(a.getInt("iters", 3, 0, kMaxIters));
    timeoutMs_ = a.getInt("timeout-ms", 3000, 1, kMaxTimeoutMs);
    deviation_ = a.get("deviation", "");
    deviateAt_ = static_cast<int>(a.getInt("deviate-at", 1, 0, kMaxIters));
    announce_ = a.flag("announce");
    const std::string sleep = a.get("sleep", "");
    if (!sleep.empty()) {
      auto colon = sleep.find(':');
      if (colon == std::string::npos) throw UsageError{"--sleep K:MS"};
      sleepCall_ = static_cast<int>(parseInt(sleep.substr(0, colon), "--sleep K", 0, kMaxIters));
      sleepMs_ = parseInt(sleep.substr(colon + 1), "--sleep MS", 0, kMaxTimeoutMs);
    }
    rank_ = comm_.rank();
  }

  void run() {
    if (mode_ == "shrink") {
      runShrink();
    } else {
      runSequence(mode_ == "mismatch" ? mismatchCalls() : loopCalls());
    }
    publish();
    try {
      results_->wait({"faults/done"}, Ms(4 * timeoutMs_ + 30000));
    } catch (const Error&) {
    }
  }

 private:
  std::vector<Call> loopCalls() const {
    return std::vector<Call>(static_cast<size_t>(iters_), Call{"allreduce", count_, algo_});
  }

  // allreduce, broadcast, allgather, reducescatter, allreduce, ...; the culprit
  // deviates at call deviateAt_.
  std::vector<Call> mismatchCalls() const {
    static const char* kCycle[] = {"allreduce", "broadcast", "allgather", "reducescatter"};
    std::vector<Call> calls;
    for (int i = 0; i < iters_; ++i)
      calls.push_back({kCycle[i % 4], count_, i % 4 == 0 ? algo_ : Algorithm::Auto});
    if (rank_ != culprit_) return calls;
    const auto k = static_cast<size_t>(deviateAt_);
    if (deviation_ == "skip" && k < calls.size()) {
      calls.erase(calls.begin() + deviateAt_);
    } else if (deviation_ == "reorder" && k + 1 < calls.size()) {
      std::swap(calls[k], calls[k + 1]);
    } else if (deviation_ == "count" && k < calls.size()) {
      calls[k].count += 1;
    } else {
      throw UsageError{"bad deviation '" + deviation_ + "' at " + std::to_string(deviateAt_)};
    }
    return calls;
  }

  void beforeCall(int i) {
    if (announce_)
      results_->setString("faults/entered/" + std::to_string(rank_) + "/" + std::to_string(i), "1");
    if (rank_ == culprit_ && i == sleepCall_) std::this_thread::sleep_for(Ms(sleepMs_));
  }

  void issue(const Call& call, int it) {
    const size_t n = static_cast<size_t>(comm_.size()) + 1;
    in_.assign(n * (call.count + 1), 0.0f);
    out_.assign(n * (call.count + 1), 0.0f);
    for (size_t i = 0; i < call.count; ++i) in_[i] = valueOf(rank_, it, i);
    CollectiveOptions o;
    o.algorithm = call.algo;
    const DataType f = DataType::Float32;
    if (call.coll == "allreduce")
      comm_.allreduce(in_.data(), out_.data(), call.count, f, ReduceOp::Sum, o);
    else if (call.coll == "broadcast")
      comm_.broadcast(in_.data(), out_.data(), call.count, f, 0, o);
    else if (call.coll == "allgather")
      comm_.allGather(in_.data(), out_.data(), call.count, f, o);
    else
      comm_.reduceScatter(in_.data(), out_.data(), call.count, f, ReduceOp::Sum, o);
  }

  static double msSince(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  void recordError(const Error& e, int call, double ms) {
    rec_["status"] = "error";
    rec_["call"] = std::to_string(call);
    putErrorFields(e.info(), rec_);
    rec_["elapsed_ms"] = std::to_string(ms);
    rec_["message"] = e.what();
  }

  void recordLaterCall(const Call& call, int it) {
    try {
      issue(call, it);
      rec_["later_kind"] = "none";
    } catch (const Error& e) {
      rec_["later_kind"] = std::string(toString(e.kind()));
      rec_["later_culprit"] = std::to_string(e.culprit());
    }
  }

  bool verify(const Call& call, int it, const std::vector<int>& members) {
    if (call.coll != "allreduce") return true;
    for (size_t i = 0; i < call.count; ++i) {
      float expect = 0;
      for (int m : members) expect += valueOf(m, it, i);
      if (out_[i] != expect) {
        std::ostringstream os;
        os << "iteration " << it << " index " << i << ": expected " << expect << ", got " << out_[i]
           << " (world " << members.size() << ")";
        rec_["wrong"] = os.str();
        return false;
      }
    }
    return true;
  }

  void runSequence(const std::vector<Call>& calls) {
    std::vector<int> all;
    for (int r = 0; r < comm_.size(); ++r) all.push_back(r);
    for (size_t i = 0; i < calls.size(); ++i) {
      const int it = static_cast<int>(i);
      beforeCall(it);
      const auto t0 = Clock::now();
      try {
        issue(calls[i], it);
      } catch (const Error& e) {
        recordError(e, it, msSince(t0));
        recordLaterCall(calls[i], it);
        return;
      }
      if (!verify(calls[i], it, all)) {
        rec_["status"] = "wrong";
        return;
      }
    }
    rec_["status"] = "ok";
  }

  // A loop of all-reduces; after the first failure the survivors shrink and redo
  // the failed iteration on the smaller world, verifying every result exactly.
  void runShrink() {
    std::vector<int> members;
    for (int r = 0; r < comm_.size(); ++r) members.push_back(r);
    const Call call{"allreduce", count_, algo_};
    bool shrunk = false;
    int verified = 0;
    for (int it = 0; it < iters_; ++it) {
      beforeCall(it);
      const auto t0 = Clock::now();
      try {
        issue(call, it);
      } catch (const Error& e) {
        if (shrunk) {
          rec_["second_error"] = e.what();
          return;
        }
        recordError(e, it, msSince(t0));
        recordLaterCall(call, it);
        const auto s0 = Clock::now();
        try {
          Communicator next = comm_.shrink();
          comm_ = std::move(next);
        } catch (const Error& se) {
          rec_["shrink_error"] = se.what();
          return;
        }
        rec_["shrink_ms"] = std::to_string(msSince(s0));
        members = comm_.originalRanks();
        std::string list;
        for (int m : members) list += (list.empty() ? "" : ",") + std::to_string(m);
        rec_["shrink_members"] = list;
        rec_["shrink_size"] = std::to_string(comm_.size());
        rec_["shrink_rank"] = std::to_string(comm_.rank());
        shrunk = true;
        // Survivors may have failed in different iterations (one that got what it
        // needed from the culprit finished the iteration the others failed in):
        // agree on the earliest and redo from there on the smaller world.
        int64_t resume = it;
        try {
          comm_.allreduce(&resume, 1, DataType::Int64, ReduceOp::Min);
        } catch (const Error& re) {
          rec_["shrink_error"] = std::string("agreeing where to resume: ") + re.what();
          return;
        }
        rec_["resume_at"] = std::to_string(resume);
        it = static_cast<int>(resume) - 1;
        continue;
      }
      if (!verify(call, it, members)) {
        rec_["status"] = "wrong";
        return;
      }
      if (shrunk) ++verified;
    }
    if (!rec_.count("status")) rec_["status"] = "ok";
    rec_["finished"] = "1";
    rec_["verified_after_shrink"] = std::to_string(verified);
  }

  void publish() {
    results_->setString("faults/result/" + std::to_string(rank_), encodeRecord(rec_));
  }

  Communicator comm_;
  std::shared_ptr<Store> results_;
  std::string mode_, deviation_;
  int culprit_ = -1, iters_ = 3, deviateAt_ = 1, sleepCall_ = -1, rank_ = -1;
  Algorithm algo_ = Algorithm::Ring;
  size_t count_ = 0;
  int64_t timeoutMs_ = 3000, sleepMs_ = 0;
  bool announce_ = false;
  std::vector<float> in_, out_;
  std::map<std::string, std::string> rec_;
};

std::shared_ptr<Store> storeFromEnv() {
  const char* addr = std::getenv("TCCL_STORE");
  if (addr == nullptr)
    throw UsageError{"TCCL_STORE is not set (run `tccl faults`, not the worker)"};
  std::string a = addr;
  auto colon = a.rfind(':');
  if (colon == std::string::npos) throw UsageError{"TCCL_STORE=host:port"};
  return std::make_shared<TcpStore>(
      a.substr(0, colon), static_cast<uint16_t>(std::stoi(a.substr(colon + 1))), Ms(30000));
}

// ---- parent: the scenarios -----------------------------------------------------------

struct FaultsConfig {
  int world = 4;
  Algorithm algo = Algorithm::Ring;
  int64_t timeoutMs = 3000;
  size_t count = 65536;
  int iters = 10;
  bool json = false;
};

struct Scenario {
  std::string name;  // kill, stop, stuck, skip, reorder, count-mismatch, shrink
  std::string injected;
  int culprit = -1;
  ErrorKind expect = ErrorKind::PeerClosed;
  bool culpritReports = false;  // mismatches: the culprit raises it too
  int64_t boundMs = 0;
  std::string faultEnv;         // TCCL_FAULT for the culprit
  int stopAtCall = -1;          // the parent SIGSTOPs the culprit once it announces this call
  bool culpritLingers = false;  // stopped or stalled: killed once the others reported
  int culpritExit = -2;         // expected exit status of the culprit (-2: any)
  bool shrink = false;
  std::vector<std::string> workerArgs;
};

struct RankOutcome {
  int rank = -1;
  bool mustReport = false;
  std::map<std::string, std::string> rec;
  proc::ChildResult child;
  std::string get(const std::string& k) const {
    auto it = rec.find(k);
    return it == rec.end() ? "" : it->second;
  }
  double ms() const {
    auto it = rec.find("elapsed_ms");
    return it == rec.end() ? -1 : std::stod(it->second);
  }
};

struct ScenarioResult {
  Scenario s;
  std::vector<RankOutcome> ranks;
  std::vector<std::string> problems;
  double slowestMs = 0;
  double wallSeconds = 0;
  std::string stopNote;
  bool pass() const { return problems.empty(); }
};

// The (phase, step) pairs of the culprit's own all-reduce schedule: where a fault can
// be injected. Phases as errors print them; steps 1-based.
std::vector<std::pair<std::string, int>> faultPoints(Algorithm a, int rank, int n, size_t count) {
  std::vector<std::pair<std::string, int>> out;
  const algo::Schedule s = algo::allreduceSchedule(a, rank, n, count, size_t{1} << 18);
  std::set<std::pair<std::string, int>> seen;
  for (const algo::Op& op : s.ops) {
    const algo::Phase* ph = s.phaseOf(op.step);
    if (ph == nullptr) continue;
    std::pair<std::string, int> p{ph->name, static_cast<int>(op.step - ph->firstStep) + 1};
    if (seen.insert(p).second) out.push_back(p);
  }
  return out;
}

std::string listPoints(const std::vector<std::pair<std::string, int>>& pts) {
  std::string s;
  for (const auto& [ph, st] : pts) s += (s.empty() ? "" : ", ") + ph + ":" + std::to_string(st);
  return s.empty() ? "none" : s;
}

// Checks --at PHASE:STEP[#SEQ] (or start[#SEQ]) against the culprit's schedule.
void checkAt(const std::string& at, const FaultsConfig& c, int culprit) {
  const auto hash = at.find('#');
  if (hash != std::string::npos)
    (void)parseInt(at.substr(hash + 1), "--at " + quoted(at) + ": the call number", 0, kMaxIters);
  std::string where = at.substr(0, hash);
  if (where == "start") return;
  auto colon = where.rfind(':');
  if (colon == std::string::npos)
    throw UsageError{"--at expects PHASE:STEP[#SEQ] or start[#SEQ], got " + quoted(at)};
  const std::string phase = where.substr(0, colon);
  const int step = static_cast<int>(
      parseInt(where.substr(colon + 1), "--at " + quoted(at) + ": the step", 1, 1 << 20));
  auto pts = faultPoints(c.algo, culprit, c.world, c.count);
  for (const auto& [ph, st] : pts)
    if (ph.rfind(phase, 0) == 0 && st == step) return;
  throw UsageError{"rank " + std::to_string(culprit) + " has no step " + phase + ":" +
                   std::to_string(step) + " in a " + std::string(toString(c.algo)) +
                   " all-reduce of world " + std::to_string(c.world) + " (it has " +
                   listPoints(pts) + ")"};
}

std::string defaultKillPoint(const FaultsConfig& c, int culprit) {
  auto pts = faultPoints(c.algo, culprit, c.world, c.count);
  if (pts.empty()) return "start";
  const auto& p = pts[pts.size() / 2];
  return p.first + ":" + std::to_string(p.second);
}

std::vector<std::string> baseArgs(const FaultsConfig& c, const std::string& mode, int culprit,
                                  int iters) {
  return {"--mode",       mode,
          "--culprit",    std::to_string(culprit),
          "--algo",       std::string(toString(c.algo)),
          "--count",      std::to_string(c.count),
          "--timeout-ms", std::to_string(c.timeoutMs),
          "--iters",      std::to_string(iters)};
}

std::string algoText(const FaultsConfig& c) { return std::string(toString(c.algo)); }

// "reduce-scatter:3#2" -> "reduce-scatter step 3 of all-reduce #2"; "start#1" -> "the
// start of all-reduce #1".
std::string atText(const std::string& at) {
  const auto hash = at.find('#');
  const std::string where = at.substr(0, hash);
  const std::string seq = hash == std::string::npos ? "" : " #" + at.substr(hash + 1);
  if (where == "start") return "the start of all-reduce" + (seq.empty() ? " #0" : seq);
  const auto colon = where.rfind(':');
  return where.substr(0, colon) + " step " + where.substr(colon + 1) +
         (seq.empty() ? "" : " of all-reduce" + seq);
}

Scenario killScenario(const FaultsConfig& c, int r, const std::string& at) {
  Scenario s;
  s.name = "kill";
  s.culprit = r;
  s.faultEnv = "exit@" + at;
  s.injected = "rank " + std::to_string(r) + " exits at " + algoText(c) + " " + atText(at) +
               " (TCCL_FAULT=" + s.faultEnv + ")";
  s.expect = ErrorKind::PeerClosed;
  s.boundMs = c.timeoutMs / 2;
  s.culpritExit = 43;
  s.workerArgs = baseArgs(c, "loop", r, 3);
  return s;
}

Scenario stopScenario(const FaultsConfig& c, int r, const std::optional<std::string>& at) {
  Scenario s;
  s.name = "stop";
  s.culprit = r;
  s.expect = ErrorKind::Timeout;
  s.boundMs = 2 * c.timeoutMs;
  s.culpritLingers = true;
  if (at) {
    s.faultEnv = "stop@" + *at;
    s.injected = "rank " + std::to_string(r) + " SIGSTOPs itself at " + algoText(c) + " " +
                 atText(*at) + " (TCCL_FAULT=" + s.faultEnv + ")";
    s.workerArgs = baseArgs(c, "loop", r, 3);
  } else {
    s.stopAtCall = 2;
    s.injected = "the parent SIGSTOPs rank " + std::to_string(r) + " inside all-reduce #2";
    s.workerArgs = baseArgs(c, "loop", r, 1000000);
    s.workerArgs.push_back("--announce");
  }
  return s;
}

Scenario stuckScenario(const FaultsConfig& c, int r) {
  Scenario s;
  s.name = "stuck";
  s.culprit = r;
  s.expect = ErrorKind::Timeout;
  s.boundMs = 2 * c.timeoutMs;
  s.culpritLingers = true;
  s.injected = "rank " + std::to_string(r) + " computes for " + std::to_string(10 * c.timeoutMs) +
               " ms before all-reduce #1";
  s.workerArgs = baseArgs(c, "loop", r, 3);
  s.workerArgs.insert(s.workerArgs.end(), {"--sleep", "1:" + std::to_string(10 * c.timeoutMs)});
  return s;
}

Scenario mismatchScenario(const FaultsConfig& c, const std::string& kind, int r) {
  Scenario s;
  s.name = kind;
  s.culprit = r;
  s.expect = ErrorKind::Mismatch;
  s.culpritReports = true;
  s.boundMs = c.timeoutMs / 2;
  s.culpritExit = 0;
  std::string deviation = kind, at = "1";
  if (kind == "skip") {
    s.injected = "rank " + std::to_string(r) + " skips broadcast #1 (the others: all-reduce, " +
                 "broadcast, all-gather, reduce-scatter, all-reduce)";
  } else if (kind == "reorder") {
    s.injected = "rank " + std::to_string(r) + " calls all-gather before broadcast (#1, #2)";
  } else {
    deviation = "count";
    at = "0";
    s.injected = "rank " + std::to_string(r) + " calls all-reduce #0 with " +
                 std::to_string(c.count + 1) + " elements, the others " + std::to_string(c.count);
  }
  s.workerArgs = baseArgs(c, "mismatch", r, 5);
  s.workerArgs.insert(s.workerArgs.end(), {"--deviation", deviation, "--deviate-at", at});
  return s;
}

Scenario shrinkScenario(const FaultsConfig& c, int r, const std::optional<std::string>& at) {
  Scenario s;
  s.name = "shrink";
  s.culprit = r;
  s.shrink = true;
  s.expect = ErrorKind::PeerClosed;
  s.boundMs = c.timeoutMs / 2;
  s.culpritExit = 43;
  const int killAt = std::min(3, std::max(0, c.iters - 1));
  s.faultEnv = "exit@" + (at ? *at : "start#" + std::to_string(killAt));
  s.injected = "rank " + std::to_string(r) + " exits during a loop of " + std::to_string(c.iters) +
               " all-reduces (TCCL_FAULT=" + s.faultEnv +
               "); the survivors shrink and finish the loop";
  s.workerArgs = baseArgs(c, "shrink", r, c.iters);
  return s;
}

std::string kindText(ErrorKind k) { return std::string(toString(k)); }

ScenarioResult runScenario(const Scenario& s, const FaultsConfig& c) {
  ScenarioResult res;
  res.s = s;
  TcpStoreServer server("127.0.0.1", 0);
  const std::string storeAddr = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::string> argv = {proc::selfExe(), "_faults-worker"};
  argv.insert(argv.end(), s.workerArgs.begin(), s.workerArgs.end());
  const Deadline hard = Deadline::after(Ms(2 * c.timeoutMs + 15000));
  auto remaining = [&] {
    return std::max(Ms(1), std::chrono::duration_cast<Ms>(hard.at() - Clock::now()));
  };
  const auto start = Clock::now();
  proc::ProcessGroup group;
  group.spawn(c.world, argv, [&](int r) {
    proc::EnvList env = {{"TCCL_RANK", std::to_string(r)},
                         {"TCCL_WORLD_SIZE", std::to_string(c.world)},
                         {"TCCL_STORE", storeAddr}};
    if (r == s.culprit && !s.faultEnv.empty()) env.push_back({"TCCL_FAULT", s.faultEnv});
    return env;
  });
  TcpStore store("127.0.0.1", server.port(), Ms(10000));
  if (s.stopAtCall >= 0) {
    try {
      store.wait(
          {"faults/entered/" + std::to_string(s.culprit) + "/" + std::to_string(s.stopAtCall)},
          remaining());
      std::this_thread::sleep_for(Ms(20));
      ::kill(group.pids()[static_cast<size_t>(s.culprit)], SIGSTOP);
      res.stopNote = "SIGSTOP sent to rank " + std::to_string(s.culprit) + " (pid " +
                     std::to_string(group.pids()[static_cast<size_t>(s.culprit)]) + ")";
    } catch (const Error&) {
      res.stopNote = "rank " + std::to_string(s.culprit) + " never reached the call to stop";
    }
  }
  std::vector<std::string> keys;
  for (int r = 0; r < c.world; ++r) {
    if (r != s.culprit || s.culpritReports) keys.push_back("faults/result/" + std::to_string(r));
  }
  try {
    store.wait(keys, remaining());
  } catch (const Error&) {
  }
  store.setString("faults/done", "1");
  if (s.culpritLingers) ::kill(group.pids()[static_cast<size_t>(s.culprit)], SIGKILL);
  std::vector<proc::ChildResult> children =
      group.wait(Deadline::after(std::min(Ms(5000), remaining())));
  res.wallSeconds = std::chrono::duration<double>(Clock::now() - start).count();

  for (int r = 0; r < c.world; ++r) {
    RankOutcome o;
    o.rank = r;
    o.mustReport = r != s.culprit || s.culpritReports;
    o.child = children[static_cast<size_t>(r)];
    const std::string key = "faults/result/" + std::to_string(r);
    if (store.check({key})) o.rec = decodeRecord(store.getString(key));
    res.ranks.push_back(o);
  }

  // The verdict.
  const std::string want = kindText(s.expect);
  for (const RankOutcome& o : res.ranks) {
    const std::string who = "rank " + std::to_string(o.rank) + ": ";
    if (o.rank == s.culprit && s.culpritExit != -2 &&
        !(o.child.exited && o.child.exitCode == s.culpritExit)) {
      res.problems.push_back(who + o.child.describe() + ", expected exit " +
                             std::to_string(s.culpritExit) +
                             (s.culpritExit == 43 ? " (the fault did not fire)" : ""));
    }
    if (!o.mustReport) continue;
    if (!(o.child.exited && o.child.exitCode == 0))
      res.problems.push_back(who + "the process " + o.child.describe());
    if (o.rec.empty()) {
      res.problems.push_back(who + "reported nothing before the deadline");
      continue;
    }
    if (o.get("status") != "error") {
      res.problems.push_back(who + "no error raised (status " + o.get("status") + ")" +
                             (o.get("wrong").empty() ? "" : ": " + o.get("wrong")));
      continue;
    }
    if (o.get("kind") != want)
      res.problems.push_back(who + "raised " + o.get("kind") + ", expected " + want);
    if (o.get("culprit") != std::to_string(s.culprit))
      res.problems.push_back(who + "named culprit " + o.get("culprit") + ", expected " +
                             std::to_string(s.culprit));
    if (o.ms() > static_cast<double>(s.boundMs))
      res.problems.push_back(who + "took " + std::to_string(static_cast<long>(o.ms())) +
                             " ms, bound " + std::to_string(s.boundMs) + " ms");
    if (o.get("later_kind") != "Aborted" || o.get("later_culprit") != std::to_string(s.culprit))
      res.problems.push_back(who + "a later call raised " + o.get("later_kind") + " naming " +
                             o.get("later_culprit") + ", expected Aborted naming " +
                             std::to_string(s.culprit));
    res.slowestMs = std::max(res.slowestMs, o.ms());
    if (s.shrink) {
      if (!o.get("shrink_error").empty())
        res.problems.push_back(who + "shrink failed: " + o.get("shrink_error"));
      else if (o.get("shrink_size") != std::to_string(c.world - 1))
        res.problems.push_back(who + "shrank to " + o.get("shrink_size") + " ranks, expected " +
                               std::to_string(c.world - 1));
      if (!o.get("wrong").empty()) res.problems.push_back(who + "wrong result: " + o.get("wrong"));
      if (!o.get("second_error").empty())
        res.problems.push_back(who + "failed again after shrinking: " + o.get("second_error"));
      if (o.get("finished") != "1" && o.get("shrink_error").empty() && o.get("wrong").empty())
        res.problems.push_back(who + "did not finish the loop");
    }
  }
  return res;
}

// ---- reporting -----------------------------------------------------------------------------

std::string fmtMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.1f ms" : "%.0f ms", ms);
  return buf;
}

std::string where(const RankOutcome& o) {
  std::string w = o.get("collective") + " #" + o.get("seq");
  if (!o.get("algorithm").empty() || !o.get("phase").empty()) {
    w += " (" + o.get("algorithm");
    if (!o.get("phase").empty()) w += (o.get("algorithm").empty() ? "" : " ") + o.get("phase");
    if (o.get("step") != "-1" && !o.get("step").empty())
      w += " step " + std::to_string(std::stoi(o.get("step")) + 1) + "/" + o.get("steps");
    w += ")";
  }
  return w;
}

void printText(const ScenarioResult& r, const FaultsConfig& c) {
  const Scenario& s = r.s;
  std::cout << "scenario " << s.name << ": " << s.injected << "\n";
  std::cout << "  world " << c.world << ", " << algoText(c) << ", " << c.count
            << " floats, timeout " << c.timeoutMs << " ms; expect " << kindText(s.expect)
            << " naming rank " << s.culprit << " on "
            << (s.culpritReports ? "every rank" : "every survivor") << " within " << s.boundMs
            << " ms\n";
  if (!r.stopNote.empty()) std::cout << "  " << r.stopNote << "\n";
  for (const RankOutcome& o : r.ranks) {
    std::cout << "  rank " << o.rank << ": ";
    if (o.rec.empty() || o.get("status") == "") {
      std::cout << (o.rank == s.culprit ? "(culprit) " : "") << "no report; process "
                << o.child.describe() << "\n";
      continue;
    }
    if (o.get("status") == "ok") {
      std::cout << "completed without error" << (o.rank == s.culprit ? " (culprit)" : "") << "\n";
      continue;
    }
    if (o.get("status") == "setup-error") {
      std::cout << "failed outside the scenario: " << o.get("message") << "\n";
      continue;
    }
    if (o.get("status") == "wrong") {
      std::cout << "WRONG RESULT: " << o.get("wrong") << "\n";
      continue;
    }
    std::cout << std::left << std::setw(10) << o.get("kind") << " culprit " << o.get("culprit")
              << ", detected by " << o.get("detected_by") << ", in " << where(o) << ", after "
              << fmtMs(o.ms()) << "; later call: " << o.get("later_kind") << "\n";
    std::cout << "      " << o.get("message") << "\n";
    if (s.shrink && !o.get("shrink_size").empty()) {
      std::cout << "      shrink: new rank " << o.get("shrink_rank") << " of "
                << o.get("shrink_size") << " (members " << o.get("shrink_members") << ") in "
                << fmtMs(std::stod(o.get("shrink_ms"))) << "; resumed at iteration "
                << o.get("resume_at") << ", " << o.get("verified_after_shrink")
                << " more all-reduces verified exactly\n";
    }
    if (o.rank == s.culprit && !s.culpritReports) std::cout << "      (this is the culprit)\n";
  }
  if (r.pass()) {
    std::cout << "  verdict: PASS (slowest detection " << fmtMs(r.slowestMs) << ", bound "
              << s.boundMs << " ms; " << std::fixed << std::setprecision(1) << r.wallSeconds
              << std::defaultfloat << " s in all)\n";
  } else {
    std::cout << "  verdict: FAIL\n";
    for (const auto& p : r.problems) std::cout << "    " << p << "\n";
  }
}

std::string resultJson(const ScenarioResult& r, const FaultsConfig& c) {
  const Scenario& s = r.s;
  std::ostringstream js;
  js << "{\"scenario\": " << jsonString(s.name) << ", \"injected\": " << jsonString(s.injected)
     << ", \"world\": " << c.world << ", \"algorithm\": " << jsonString(algoText(c))
     << ", \"count\": " << c.count << ", \"timeout_ms\": " << c.timeoutMs
     << ", \"culprit\": " << s.culprit << ", \"expected_kind\": " << jsonString(kindText(s.expect))
     << ", \"bound_ms\": " << s.boundMs << ", \"pass\": " << (r.pass() ? "true" : "false")
     << ", \"slowest_detection_ms\": " << r.slowestMs << ", \"wall_seconds\": " << r.wallSeconds
     << ", \"problems\": [";
  for (size_t i = 0; i < r.problems.size(); ++i) js << (i ? ", " : "") << jsonString(r.problems[i]);
  js << "], \"ranks\": [";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankOutcome& o = r.ranks[i];
    js << (i ? ", " : "") << "{\"rank\": " << o.rank
       << ", \"role\": " << jsonString(o.rank == s.culprit ? "culprit" : "survivor")
       << ", \"process\": " << jsonString(o.child.describe())
       << ", \"status\": " << jsonString(o.get("status"));
    for (const char* k : {"kind", "collective", "algorithm", "phase", "message", "later_kind",
                          "local_sig", "remote_sig", "shrink_members"}) {
      if (!o.get(k).empty()) js << ", \"" << k << "\": " << jsonString(o.get(k));
    }
    for (const char* k : {"culprit", "detected_by", "peer", "seq", "step", "steps", "later_culprit",
                          "shrink_size", "shrink_rank", "resume_at", "verified_after_shrink"}) {
      if (!o.get(k).empty()) js << ", \"" << k << "\": " << std::stol(o.get(k));
    }
    for (const char* k : {"elapsed_ms", "shrink_ms"}) {
      if (!o.get(k).empty()) js << ", \"" << k << "\": " << std::stod(o.get(k));
    }
    js << "}";
  }
  js << "]}";
  return js.str();
}

void printTable(const std::vector<ScenarioResult>& results) {
  std::cout << "\n"
            << std::left << std::setw(16) << "scenario" << std::setw(8) << "culprit"
            << std::setw(12) << "expected" << std::setw(10) << "reported" << std::setw(12)
            << "slowest" << std::setw(12) << "bound"
            << "result\n";
  for (const auto& r : results) {
    int right = 0, must = 0;
    for (const auto& o : r.ranks) {
      if (!o.mustReport) continue;
      ++must;
      if (o.get("kind") == kindText(r.s.expect) && o.get("culprit") == std::to_string(r.s.culprit))
        ++right;
    }
    std::cout << std::left << std::setw(16) << r.s.name << std::setw(8) << r.s.culprit
              << std::setw(12) << kindText(r.s.expect) << std::setw(10)
              << (std::to_string(right) + "/" + std::to_string(must)) << std::setw(12)
              << fmtMs(r.slowestMs) << std::setw(12) << (std::to_string(r.s.boundMs) + " ms")
              << (r.pass() ? "PASS" : "FAIL") << "\n";
  }
}

FaultsConfig parseConfig(const Args& a) {
  FaultsConfig c;
  c.world = static_cast<int>(a.getInt("world", 4, 2, 64));
  c.algo = a.getAlgorithm("algo", Algorithm::Ring);
  c.timeoutMs = a.getInt("timeout-ms", 3000, 100, kMaxTimeoutMs / 4);
  const uint64_t count = a.getSize("count", 65536);
  if (count > static_cast<uint64_t>(kMaxCount))
    throw UsageError{"--count must be at most " + std::to_string(kMaxCount) + " (got " +
                     std::to_string(count) + ")"};
  c.count = static_cast<size_t>(count);
  c.iters = static_cast<int>(a.getInt("iters", 10, 2, 100000));
  c.json = a.flag("json");
  // Auto would choose at run time, and the hierarchical all-reduce's schedule depends on
  // the host layout: the scenarios need to know the culprit's steps in advance.
  if (c.algo == Algorithm::Auto || c.algo == Algorithm::Hierarchical)
    throw UsageError{"--algo must be ring, tree, hd, rd or naive (not " +
                     std::string(toString(c.algo)) + ")"};
  if (c.count < static_cast<size_t>(c.world))
    throw UsageError{"--count must be at least the world size"};
  return c;
}

int checkRank(const Args& a, const std::string& opt, const FaultsConfig& c) {
  const int64_t r = a.getInt(opt, -1);
  if (r < 0 || r >= c.world)
    throw UsageError{"--" + opt + " must be a rank in [0, " + std::to_string(c.world) + ")"};
  return static_cast<int>(r);
}

std::vector<Scenario> plan(const Args& a, const FaultsConfig& c) {
  std::vector<Scenario> out;
  const auto at = a.get("at");
  if (a.flag("all")) {
    const int r = a.get("rank") ? checkRank(a, "rank", c) : 1;
    if (at) checkAt(*at, c, r);
    out.push_back(killScenario(c, r, at ? *at : defaultKillPoint(c, r)));
    out.push_back(stopScenario(c, r, std::nullopt));
    out.push_back(stuckScenario(c, r));
    for (const char* k : {"skip", "reorder", "count-mismatch"}) {
      // A 1-1 tie blames the side without rank 0, so at world 2 the culprit is rank 1.
      out.push_back(mismatchScenario(c, k, c.world == 2 ? 1 : r));
    }
    out.push_back(shrinkScenario(c, r, std::nullopt));
    return out;
  }
  int chosen = 0;
  for (const char* o : {"kill", "stop", "stuck", "skip", "reorder", "count-mismatch"})
    chosen += a.get(o) ? 1 : 0;
  if (a.flag("shrink")) {
    if (chosen > 1 || a.get("stop") || a.get("stuck") || a.get("skip") || a.get("reorder") ||
        a.get("count-mismatch"))
      throw UsageError{"--shrink takes at most --kill R (default rank 1)"};
    const int r = a.get("kill") ? checkRank(a, "kill", c) : 1;
    if (at) checkAt(*at, c, r);
    out.push_back(shrinkScenario(c, r, at));
    return out;
  }
  if (chosen != 1)
    throw UsageError{
        "choose one scenario: --kill R [--at PHASE:STEP], --stop R, --stuck R, --skip R, "
        "--reorder R, --count-mismatch R, --shrink, or --all"};
  if (a.get("kill")) {
    const int r = checkRank(a, "kill", c);
    const std::string where = at ? *at : defaultKillPoint(c, r);
    checkAt(where, c, r);
    out.push_back(killScenario(c, r, where));
  } else if (a.get("stop")) {
    const int r = checkRank(a, "stop", c);
    if (at) checkAt(*at, c, r);
    out.push_back(stopScenario(c, r, at));
  } else if (a.get("stuck")) {
    out.push_back(stuckScenario(c, checkRank(a, "stuck", c)));
  } else {
    for (const char* k : {"skip", "reorder", "count-mismatch"}) {
      if (!a.get(k)) continue;
      const int r = checkRank(a, k, c);
      if (c.world == 2 && r == 0)
        throw UsageError{"at world 2 a mismatch is a 1-1 tie, blamed on rank 1: use --" +
                         std::string(k) + " 1"};
      out.push_back(mismatchScenario(c, k, r));
    }
  }
  if (at && !a.get("kill") && !a.get("stop"))
    throw UsageError{"--at applies to --kill, --stop and --shrink"};
  return out;
}

}  // namespace

int faultsMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  const FaultsConfig c = parseConfig(a);
  const std::vector<Scenario> scenarios = plan(a, c);
  checkMemory("--world " + std::to_string(c.world) + " --count " + std::to_string(c.count),
              saturatingMul(c.count, 2 * sizeof(float)), c.world, "input and output vectors");
  std::vector<ScenarioResult> results;
  bool pass = true;
  for (const Scenario& s : scenarios) {
    if (!c.json && scenarios.size() > 1 && !results.empty()) std::cout << "\n";
    results.push_back(runScenario(s, c));
    pass = pass && results.back().pass();
    if (!c.json) {
      printText(results.back(), c);
      std::cout.flush();
    }
  }
  if (c.json) {
    std::cout << "{\"pass\": " << (pass ? "true" : "false") << ", \"scenarios\": [";
    for (size_t i = 0; i < results.size(); ++i)
      std::cout << (i ? ", " : "") << resultJson(results[i], c);
    std::cout << "]}" << std::endl;
  } else if (results.size() > 1) {
    printTable(results);
  }
  return pass ? 0 : 1;
}

int faultsWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kWorkerValueOptions, kWorkerFlags);
  std::shared_ptr<Store> results = storeFromEnv();
  const int64_t timeoutMs = a.getInt("timeout-ms", 3000);
  try {
    CommOptions opts;
    opts.timeout = Ms(timeoutMs);
    Communicator comm = Communicator::fromEnv(opts);
    FaultWorker w(a, std::move(comm), results);
    w.run();
    return 0;
  } catch (const Error& e) {
    std::cerr << "tccl faults worker: " << e.what() << std::endl;
    const char* r = std::getenv("TCCL_RANK");
    results->setString(std::string("faults/result/") + (r ? r : "?"),
                       encodeRecord({{"status", "setup-error"}, {"message", e.what()}}));
    return 1;
  }
}

}  // namespace tccl::cli
