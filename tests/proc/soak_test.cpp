// The randomized fault soak (FaultSoak): TCCL_SOAK_TRIALS trials (default 40, about a
// minute on 2 cores; 20 in sanitizer builds) of a random fault x algorithm x step x world,
// TCCL_SOAK_PARALLEL at a time (default 2), seeded by TCCL_SOAK_SEED (default: the clock,
// printed); rerun one trial with TCCL_SOAK_SEED=<seed> TCCL_SOAK_ONLY=<trial>.
// scripts/soak.sh runs it at any size (1,000 trials for docs/faults.md). The faults: a
// kill at a step of the culprit's schedule or as a call starts; a kill during bootstrap;
// SIGSTOP from outside or from the hook inside a step; a rank stuck in compute; a rank
// that closes its connections and lives on; a skip, reorder, count, dtype or op
// mismatch; a kill or a close in a ring of sends and receives; and strangers sending
// garbage to a rank's listener and to the store while the job runs, which must change
// nothing. Every trial is judged (tests/proc/fault_harness.hpp), and the summary gives
// hangs, wrong culprits, failed trials and the slowest detection per kind.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>

#include "fault_harness.hpp"
#include "transport/wire.hpp"

using namespace faulttest;

namespace {

int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

enum class Judge { Detection, Bootstrap, PointToPoint, Untouched };

struct Trial {
  int index = 0;
  std::string kind;  // the row of the summary
  std::string what;
  FaultSpec spec;
  Expect expect;
  Judge judge = Judge::Detection;
  int culpritExit = -2;  // -2: not checked
  int iters = 0;         // Untouched: the loop every rank must finish
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDefaultSoakTrials = 20;
#else
constexpr int kDefaultSoakTrials = 40;
#endif
constexpr int64_t kSoakTimeoutMs = 5000;  // dead peers and mismatches
constexpr double kSoakWellUnderMs = 2000;
// Stopped and stalled peers; these trials first connect under a 30 s deadline (the
// worker's warmup=1), so that the 1 s is not spent on a loaded machine's handshakes.
constexpr int64_t kSoakSilentTimeoutMs = 1000;
// Kills during bootstrap: a rank killed before it published its address is waited for
// until the timeout; the bound is counted from the process's start.
constexpr int64_t kBootTimeoutMs = 3000;

// Rank r's record when it has one that reports an error (status `error`, or also
// `setup-error` when `setupToo`); else null, with the reason added to `bad`.
const Record* errorRecord(const FaultRun& run, int r, bool setupToo,
                          std::vector<std::string>* bad) {
  const std::string who = "rank " + std::to_string(r) + ": ";
  auto it = run.records.find(r);
  if (it == run.records.end()) {
    bad->push_back(who + "no record (hang or crash)");
    return nullptr;
  }
  const std::string st = it->second.get("status");
  if (st != "error" && !(setupToo && st == "setup-error")) {
    bad->push_back(who + "status " + st + " " + it->second.get("what"));
    return nullptr;
  }
  return &it->second;
}

// A bootstrap kill may land before the culprit published anything (the others time out
// waiting for it), while they connect (PeerClosed or Timeout) or in the first calls
// (PeerClosed): every survivor must end, with one of those kinds naming the culprit,
// within twice the timeout of its own start.
std::vector<std::string> judgeBootstrap(const FaultRun& run, const Trial& t) {
  std::vector<std::string> bad;
  for (int r : t.expect.ranks) {
    const std::string who = "rank " + std::to_string(r) + ": ";
    const Record* got = errorRecord(run, r, true, &bad);
    if (got == nullptr) continue;
    const Record& rec = *got;
    const std::string kind = rec.get("kind");
    if (kind != "PeerClosed" && kind != "Timeout" && kind != "Aborted")
      bad.push_back(who + "kind " + kind + ", expected PeerClosed, Timeout or Aborted");
    if (rec.num("culprit") != t.expect.culprit)
      bad.push_back(who + "culprit " + rec.get("culprit") + ", expected " +
                    std::to_string(t.expect.culprit));
    if (rec.real("elapsed_ms") > t.expect.boundMs)
      bad.push_back(who + "detected after " + rec.get("elapsed_ms") + " ms");
  }
  return bad;
}

// Point to point takes no part in the failure agreement of the collectives (no culprit,
// no abort of the others: docs/faults.md): the rank that receives from the culprit must
// raise PeerClosed naming it as the peer; the others (the one that sends to it may have
// completed its eager send, then waits on a rank that gave up) must end too, with
// PeerClosed or Timeout, within twice the timeout.
std::vector<std::string> judgePointToPoint(const FaultRun& run, const Trial& t) {
  std::vector<std::string> bad;
  const int n = t.spec.world, c = t.expect.culprit;
  for (int r : t.expect.ranks) {
    const std::string who = "rank " + std::to_string(r) + ": ";
    const Record* got = errorRecord(run, r, false, &bad);
    if (got == nullptr) continue;
    const Record& rec = *got;
    const std::string kind = rec.get("kind");
    const bool neighbour = r == (c + 1) % n;
    if (neighbour && (kind != "PeerClosed" || rec.num("peer") != c))
      bad.push_back(who + kind + " with peer " + rec.get("peer") + ", expected PeerClosed with " +
                    std::to_string(c));
    if (!neighbour && kind != "PeerClosed" && kind != "Timeout")
      bad.push_back(who + "kind " + kind + ", expected PeerClosed or Timeout");
    if (rec.real("elapsed_ms") > t.expect.boundMs)
      bad.push_back(who + "detected after " + rec.get("elapsed_ms") + " ms");
  }
  return bad;
}

// Strangers: every rank finishes every call, exact (the worker checks every sum).
std::vector<std::string> judgeUntouched(const FaultRun& run, const Trial& t) {
  std::vector<std::string> bad;
  for (int r : t.expect.ranks) {
    auto it = run.records.find(r);
    if (it == run.records.end()) {
      bad.push_back("rank " + std::to_string(r) + ": no record");
    } else if (it->second.get("status") != "ok" || it->second.num("iterations_done") != t.iters) {
      bad.push_back("rank " + std::to_string(r) + ": status " + it->second.get("status") + " " +
                    it->second.get("wrong") + it->second.get("what"));
    }
  }
  return bad;
}

// A stranger's bytes, chosen by `which`, to `addr`; the connection is left open until
// the job ends (the test holds it) or closed at once (connect-and-go).
void sendGarbage(const std::string& addr, int which, std::vector<net::Fd>* held) {
  net::Fd fd = dial(addr);
  if (which == 0) {
    std::string junk(300, '\x5a');
    net::sendAll(fd.get(), junk.data(), junk.size(), Deadline::after(5s));
  } else if (which == 1) {
    uint8_t hdr[wire::kHeaderSize];
    wire::MessageHeader h;
    h.length = ~uint64_t{0};
    wire::encodeHeader(h, hdr);
    net::sendAll(fd.get(), hdr, sizeof hdr, Deadline::after(5s));
  } else if (which == 2) {
    net::sendAll(fd.get(), "TC\x01", 3, Deadline::after(5s));
  } else {
    return;  // connect and go
  }
  held->push_back(std::move(fd));
}

struct Rng {
  std::mt19937_64 gen;
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
};

std::vector<std::string> commonArgs(Algorithm algo, size_t count, int64_t timeoutMs) {
  return {"algo=" + algoName(algo), "count=" + std::to_string(count),
          "timeout=" + std::to_string(timeoutMs)};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Faults in the collectives (the soak of the previous milestone): a kill at a step, a
// stop, a rank stuck in compute, a mismatch. `roll` in [0, 70).
void collectiveFault(Trial& t, Rng& g, int roll, Algorithm algo, size_t count, int& culprit) {
  FaultSpec& s = t.spec;
  const int world = s.world;
  std::ostringstream what;
  // Hooks fire in call 0 or 1 of 3: a survivor that had everything it needed from the
  // culprit may finish the faulty call, and must then meet the failure in a later one.
  if (roll < 25) {
    auto pts = faultPoints(algo, culprit, world, count);
    const int seq = g.pick(0, 1);
    const int which = g.pick(0, static_cast<int>(pts.size()));
    const std::string where =
        which == static_cast<int>(pts.size()) ? "start" : pts[static_cast<size_t>(which)].hook();
    s.faultEnv = "exit@" + where + "#" + std::to_string(seq);
    s.args = plus({"scenario=loop", "iters=3"}, commonArgs(algo, count, kSoakTimeoutMs));
    t.expect = {"PeerClosed", culprit, allBut(world, culprit), kSoakWellUnderMs, false, seq};
    t.culpritExit = 43;
    t.kind = "kill at a step";
    what << "TCCL_FAULT=" << s.faultEnv;
  } else if (roll < 33) {
    s.stopAtCall = g.pick(0, 5);
    s.culpritLingers = true;
    s.args = plus({"scenario=loop", "iters=1000000", "warmup=1"},
                  commonArgs(algo, count, kSoakSilentTimeoutMs));
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs};
    t.kind = "SIGSTOP";
    what << "SIGSTOP after call " << s.stopAtCall;
  } else if (roll < 39) {
    auto pts = faultPoints(algo, culprit, world, count);
    const int seq = g.pick(0, 1);
    // After the warm-up (collective #0), call k of the loop is collective #k+1.
    s.faultEnv = "stop@" +
                 pts[static_cast<size_t>(g.pick(0, static_cast<int>(pts.size()) - 1))].hook() +
                 "#" + std::to_string(seq + 1);
    s.culpritLingers = true;
    s.args = plus({"scenario=loop", "iters=3", "warmup=1"},
                  commonArgs(algo, count, kSoakSilentTimeoutMs));
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs,
                false,     seq + 1};
    t.kind = "stop at a step";
    what << "TCCL_FAULT=" << s.faultEnv;
  } else if (roll < 44) {
    const int call = g.pick(0, 2);
    s.culpritLingers = true;
    s.args =
        plus({"scenario=loop", "iters=3", "warmup=1",
              "sleep=" + std::to_string(call) + ":" + std::to_string(8 * kSoakSilentTimeoutMs)},
             commonArgs(algo, count, kSoakSilentTimeoutMs));
    t.expect = {"Timeout", culprit, allBut(world, culprit), 2.0 * kSoakSilentTimeoutMs,
                false,     call + 1};
    t.kind = "stuck in compute";
    what << "stuck before call " << call;
  } else {                        // a mismatched call in a sequence of five different collectives
    if (world == 2) culprit = 1;  // a 1-1 tie blames the group without rank 0
    static const char* kDeviations[] = {"skip", "reorder", "count", "dtype", "op"};
    const std::string dev = kDeviations[g.pick(0, 4)];
    int at = 0;
    if (dev == "skip" || dev == "reorder")
      at = g.pick(0, 3);
    else if (dev == "op")
      at = std::vector<int>{0, 3, 4}[static_cast<size_t>(g.pick(0, 2))];
    else
      at = g.pick(0, 4);
    s.reporters = everyRank(world);
    s.args = plus({"scenario=mismatch", "iters=5", "deviation=" + dev, "at=" + std::to_string(at)},
                  commonArgs(algo, count, kSoakTimeoutMs));
    t.expect = {"Mismatch", culprit, everyRank(world), kSoakTimeoutMs / 2.0, true, at};
    t.culpritExit = 0;
    t.kind = "mismatch";
    what << dev << " at call " << at;
  }
  t.what = what.str();
}

// Faults outside a collective's own steps. `roll` in [70, 100).
void otherFault(Trial& t, Rng& g, int roll, Algorithm algo, size_t count, int culprit) {
  FaultSpec& s = t.spec;
  const int world = s.world;
  std::ostringstream what;
  // 70-75 close, 76-85 kill in bootstrap, 86-90 p2p kill, 91-94 p2p close, 95-99 garbage.
  const bool p2p = roll >= 86 && roll < 95;
  const std::string coll = p2p ? "coll=p2p" : "coll=allreduce";
  if (roll < 76 || (roll >= 91 && roll < 95)) {  // a close from a live process
    const int call = g.pick(0, 2);
    // A ring of sends and receives runs on (a rank far from the culprit could finish
    // three calls on data sent before its neighbours gave up).
    s.args = plus(
        {"scenario=loop", coll, p2p ? "iters=1000000" : "iters=3", "close=" + std::to_string(call)},
        commonArgs(algo, count, kSoakTimeoutMs));
    t.expect = {"PeerClosed", culprit, allBut(world, culprit), kSoakWellUnderMs, false, call};
    t.culpritExit = 0;
    if (call == 0 && !p2p) {
      // Connections open in the first call: a rank that leaves before it has none to
      // close. A rank that dials it finds nothing listening (PeerClosed); one that waits
      // for it to dial sees a silent rank (Timeout). Either names it.
      t.expect.kind = "PeerClosed|Timeout";
      t.expect.boundMs = 2.0 * kSoakTimeoutMs;
      t.kind = "close before connecting";
    }
    if (p2p) {
      t.judge = Judge::PointToPoint;
      t.expect.boundMs = 2.0 * kSoakTimeoutMs;
    }
    if (t.kind.empty()) t.kind = p2p ? "p2p: close" : "close";
    what << "closes its communicator before call " << call << (p2p ? " (ring of send/recv)" : "");
  } else if (p2p) {  // SIGKILL from outside in an endless ring of sends and receives
    s.stopAtCall = g.pick(0, 5);
    s.stopSignal = SIGKILL;
    s.args =
        plus({"scenario=loop", coll, "iters=1000000"}, commonArgs(algo, count, kSoakTimeoutMs));
    t.expect = {"PeerClosed", culprit, allBut(world, culprit), 2.0 * kSoakTimeoutMs};
    t.judge = Judge::PointToPoint;
    t.kind = "p2p: SIGKILL";
    what << "SIGKILL after send/recv " << s.stopAtCall;
  } else if (roll < 86) {  // SIGKILL while bootstrapping (or just after)
    s.killAfterMs = g.pick(0, 250);
    s.args = plus({"scenario=loop", "iters=1000000"}, commonArgs(algo, count, kBootTimeoutMs));
    t.expect = {"PeerClosed|Timeout", culprit, allBut(world, culprit), 2.0 * kBootTimeoutMs + 1000};
    t.judge = Judge::Bootstrap;
    t.kind = "SIGKILL in bootstrap";
    what << "SIGKILL " << s.killAfterMs << " ms after spawn";
  } else {  // strangers, mid-job, to one rank's listener and to the store
    const int target = culprit;
    const int bytes = g.pick(0, 3);
    t.iters = 30;
    s.args =
        plus({"scenario=steady", "iters=30", "pause=5"}, commonArgs(algo, count, kSoakTimeoutMs));
    s.reporters = everyRank(world);
    // The strangers' connections stay open until the trial ends.
    auto held = std::make_shared<std::vector<net::Fd>>();
    s.whileRunningAt = [target, bytes, held](TcpStore& store, const std::string& storeAddr) {
      const std::string key = "tccl/default/addr/" + std::to_string(target);
      try {
        store.wait({key}, 20s);
        sendGarbage(store.getString(key), bytes, held.get());
        sendGarbage(storeAddr, bytes, held.get());
      } catch (const Error&) {
        // No address within 20 s: the ranks' records say why.
      }
    };
    t.expect = {"", -1, everyRank(world), 0};
    t.judge = Judge::Untouched;
    t.culpritExit = 0;
    t.kind = "garbage";
    static const char* kBytes[] = {"300 bytes of garbage", "a header claiming 2^64-1 bytes",
                                   "a truncated header", "connect-and-go"};
    what << kBytes[bytes] << " to rank " << target << "'s listener and to the store";
    culprit = -1;
  }
  s.culprit = culprit;
  t.what = what.str();
}

Trial makeTrial(uint64_t seed, int index) {
  Rng g{std::mt19937_64(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index))};
  Trial t;
  t.index = index;
  const int world = g.pick(2, 5);
  const Algorithm algo = kAlgos[g.pick(0, 4)];
  const size_t count = static_cast<size_t>(g.pick(world, 300));
  int culprit = g.pick(0, world - 1);
  const int roll = g.pick(0, 99);
  FaultSpec& s = t.spec;
  s.world = world;
  s.deadline = 30s;
  s.quiet = true;  // hundreds of processes: a failed trial prints its records instead
  if (roll < 70) {
    collectiveFault(t, g, roll, algo, count, culprit);
    s.culprit = culprit;
  } else {
    otherFault(t, g, roll, algo, count, culprit);
  }
  std::ostringstream full;
  full << "trial " << index << ": world " << world << " " << algoName(algo) << " count " << count
       << " culprit " << s.culprit << ": " << t.what;
  t.what = full.str();
  return t;
}

struct KindStats {
  int trials = 0, failed = 0, hangs = 0, wrongCulprits = 0;
  double slowestMs = 0;
};

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
  std::map<std::string, KindStats> byKind;
  int hangs = 0, wrongCulprits = 0;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (;;) {
      const int i = next++;
      if (i >= trials) return;
      if (only >= 0 && i != only) continue;
      Trial t = makeTrial(seed, i);
      FaultRun run = runFaultJob(t.spec);
      std::vector<std::string> bad;
      switch (t.judge) {
        case Judge::Detection:
          bad = judge(run, t.expect);
          break;
        case Judge::Bootstrap:
          bad = judgeBootstrap(run, t);
          break;
        case Judge::PointToPoint:
          bad = judgePointToPoint(run, t);
          break;
        case Judge::Untouched:
          bad = judgeUntouched(run, t);
          break;
      }
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
        if (t.judge == Judge::PointToPoint) {
          // Its receiver names the culprit as the peer; the others may name a neighbour.
          const int n = t.spec.world, c = t.expect.culprit;
          if (r == (c + 1) % n && it->second.num("peer") != c) wrongCulprit = true;
        } else if (t.judge != Judge::Untouched && it->second.num("culprit") != t.expect.culprit) {
          wrongCulprit = true;
        }
      }
      for (const auto& c : run.children) {
        if (c.index == t.spec.culprit) {
          if (t.culpritExit != -2 && !(c.exited && c.exitCode == t.culpritExit))
            bad.push_back("culprit " + c.describe() + ", expected exit " +
                          std::to_string(t.culpritExit));
        } else if (!(c.exited && c.exitCode == 0)) {
          // A worker whose construction failed exits 1 after publishing its record
          // (fault_worker.cpp): right for a kill during bootstrap.
          auto it = run.records.find(c.index);
          const bool setupFailed = t.judge == Judge::Bootstrap && c.exited && c.exitCode == 1 &&
                                   it != run.records.end() &&
                                   it->second.get("status") == "setup-error";
          if (!setupFailed) bad.push_back("rank " + std::to_string(c.index) + " " + c.describe());
        }
      }
      std::lock_guard<std::mutex> lk(mu);
      KindStats& k = byKind[t.kind];
      ++k.trials;
      k.failed += bad.empty() ? 0 : 1;
      k.hangs += hang ? 1 : 0;
      k.wrongCulprits += wrongCulprit ? 1 : 0;
      k.slowestMs = std::max(k.slowestMs, slowest);
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
  std::cout << "[ soak     ] | kind | trials | failed | hangs | wrong culprits | slowest "
               "detection (ms) |"
            << std::endl;
  for (const auto& [kind, v] : byKind)
    std::cout << "[ soak     ] | " << kind << " | " << v.trials << " | " << v.failed << " | "
              << v.hangs << " | " << v.wrongCulprits << " | "
              << (kind == "garbage" ? std::string("n/a") : std::to_string(long(v.slowestMs)))
              << " |" << std::endl;
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
