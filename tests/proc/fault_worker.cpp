// Worker process of the failure-injection tests (tests/proc/faults_test.cpp). It
// builds a Communicator from the environment, runs a sequence of collectives in
// which one rank (the culprit) misbehaves, catches the first tccl::Error, checks that
// a later call fails with Aborted, and publishes what it saw as "key=value" lines
// under "faults/result/<rank>" in the job's store. The faults themselves come from:
//   - the library's hook, TCCL_FAULT=<exit|stop|hang>@<phase>:<step>[#<seq>], set by
//     the test on the culprit's environment only;
//   - the test, which SIGSTOPs the culprit once it announces a call (announce=1);
//   - this worker's arguments (a culprit that sleeps before a call, skips one, calls
//     two in the other order or with another count, dtype, op or root).
//
// Arguments are key=value:
//   scenario=loop|mismatch|shrink|steady   (default loop)
//     loop      `iters` calls of `coll` (allreduce with `algo`; or broadcast,
//               allgather, reducescatter, reduce, barrier, alltoall, gather, scatter;
//               or p2p: a ring exchange, sendAsync to rank+1 and recv from rank-1 with
//               the call's number as tag, the received values verified)
//     mismatch  a sequence of different collectives (allreduce, broadcast, allgather,
//               reducescatter, allreduce, ...); the culprit deviates at call `at`
//               as `deviation` says: skip|reorder|count|dtype|op|root
//     shrink    `iters` all-reduces; after the first error the survivors shrink and
//               redo the failed iteration on the smaller world, verifying every result
//     steady    `iters` all-reduces `pause` ms apart, every result verified (the
//               stranger tests disturb it from outside)
//   algo=ring|tree|hd|rd|naive count=N iters=K culprit=R timeout=MS
//   sleep=K:MS       the culprit sleeps MS ms before call K (stuck in compute)
//   announce=1       set "faults/entered/<rank>/<call>" before each call
//   pause=MS         steady: the pause between calls
//   then=allreduce   loop: an all-reduce after each call of `coll`
//   warmup=1         loop/mismatch: a one-element all-reduce with a 30 s deadline first
//                    (collective #0; the sequence then starts at #1)
//   calltimeout=MS   every call of the sequence with this per-call timeout (the
//                    communicator's stays `timeout`)
//   absent=1         the culprit never creates its communicator: it waits for
//                    "faults/done" and exits 0
//   close=K          the culprit destroys its communicator (closing its connections)
//                    before call K, stays alive until "faults/done" and exits 0
// After publishing, the worker waits (bounded) for the key "faults/done" so that its
// exit cannot become another rank's failure; the test kills whatever is left.
// Exit status: 0, or 1 when a result was wrong (also in the record), 2 for bad usage.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error_fields.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string scenario = "loop";
  std::string coll = "allreduce";
  Algorithm algo = Algorithm::Ring;
  size_t count = 4096;
  int iters = 4;
  int culprit = -1;
  int64_t timeoutMs = 10000;
  int sleepCall = -1;
  int64_t sleepMs = 0;
  bool announce = false;
  std::string deviation;
  int at = 1;
  int64_t pauseMs = 0;
  bool then = false;
  bool warmup = false;
  int64_t callTimeoutMs = 0;  // 0: the communicator's
  bool absent = false;
  int closeCall = -1;
};

[[noreturn]] void usage(const std::string& msg) {
  std::cerr << "tccl_fault_worker: " << msg << std::endl;
  std::exit(2);
}

Config parseArgs(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq == std::string::npos) usage("expected key=value, got '" + a + "'");
    std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "scenario") {
      c.scenario = v;
    } else if (k == "coll") {
      c.coll = v;
    } else if (k == "algo") {
      auto al = parseAlgorithm(v);
      if (!al) usage("unknown algorithm " + v);
      c.algo = *al;
    } else if (k == "count") {
      c.count = std::stoull(v);
    } else if (k == "iters") {
      c.iters = std::stoi(v);
    } else if (k == "culprit") {
      c.culprit = std::stoi(v);
    } else if (k == "timeout") {
      c.timeoutMs = std::stoll(v);
    } else if (k == "sleep") {
      auto colon = v.find(':');
      if (colon == std::string::npos) usage("sleep=K:MS");
      c.sleepCall = std::stoi(v.substr(0, colon));
      c.sleepMs = std::stoll(v.substr(colon + 1));
    } else if (k == "announce") {
      c.announce = v == "1";
    } else if (k == "deviation") {
      c.deviation = v;
    } else if (k == "at") {
      c.at = std::stoi(v);
    } else if (k == "pause") {
      c.pauseMs = std::stoll(v);
    } else if (k == "then") {
      c.then = v == "allreduce";
    } else if (k == "warmup") {
      c.warmup = v == "1";
    } else if (k == "calltimeout") {
      c.callTimeoutMs = std::stoll(v);
    } else if (k == "absent") {
      c.absent = v == "1";
    } else if (k == "close") {
      c.closeCall = std::stoi(v);
    } else {
      usage("unknown key " + k);
    }
  }
  return c;
}

// One collective call of the sequence.
struct Call {
  std::string coll = "allreduce";
  size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  Algorithm algo = Algorithm::Auto;
};

std::string show(const Call& c) {
  std::ostringstream os;
  os << c.coll << " " << toString(c.dtype) << " x" << c.count << " " << toString(c.op) << " root "
     << c.root;
  return os.str();
}

// Element i of (original) rank o in iteration it: small integers, exact in float32
// for every world and count the tests use.
float valueOf(int o, int it, size_t i) {
  return static_cast<float>((o + 1) * (it % 5 + 1) + static_cast<int>(i % 7));
}

class Worker {
 public:
  Worker(Config c, Communicator comm, std::shared_ptr<Store> results)
      : c_(std::move(c)), comm_(std::move(comm)), results_(std::move(results)) {
    origRank_ = comm_.rank();
    isCulprit_ = origRank_ == c_.culprit;
  }

  int run() {
    if (c_.scenario == "loop") return runSequence(loopCalls());
    if (c_.scenario == "mismatch") return runSequence(mismatchCalls());
    if (c_.scenario == "shrink" || c_.scenario == "steady") return runAllreduces();
    usage("unknown scenario " + c_.scenario);
  }

  void waitDone() {
    try {
      results_->wait({"faults/done"}, std::chrono::milliseconds(4 * c_.timeoutMs + 30000));
    } catch (const Error&) {
    }
  }

 private:
  std::vector<Call> loopCalls() const {
    std::vector<Call> calls;
    for (int i = 0; i < c_.iters; ++i) {
      Call call;
      call.coll = c_.coll;
      call.count = c_.count;
      call.algo = c_.coll == "allreduce" ? c_.algo : Algorithm::Auto;
      calls.push_back(call);
      if (c_.then) {
        // An all-reduce after each call: every rank needs every other rank's data at
        // least once per iteration, even when `coll` (a broadcast, say) lets some
        // ranks finish without the culprit.
        call.coll = "allreduce";
        call.algo = c_.algo;
        calls.push_back(call);
      }
    }
    return calls;
  }

  std::vector<Call> mismatchCalls() const {
    static const char* kCycle[] = {"allreduce", "broadcast", "allgather", "reducescatter"};
    std::vector<Call> calls;
    for (int i = 0; i < c_.iters; ++i) {
      Call call;
      call.coll = kCycle[i % 4];
      call.count = c_.count;
      call.algo = call.coll == "allreduce" ? c_.algo : Algorithm::Auto;
      calls.push_back(call);
    }
    if (!isCulprit_) return calls;
    const size_t k = static_cast<size_t>(c_.at);
    if (k >= calls.size()) usage("at= is past the sequence");
    if (c_.deviation == "skip") {
      calls.erase(calls.begin() + c_.at);
    } else if (c_.deviation == "reorder") {
      if (k + 1 >= calls.size()) usage("reorder needs a call after at=");
      std::swap(calls[k], calls[k + 1]);
    } else if (c_.deviation == "count") {
      calls[k].count += 1;
    } else if (c_.deviation == "dtype") {
      calls[k].dtype = DataType::Int32;
    } else if (c_.deviation == "op") {
      calls[k].op = ReduceOp::Max;
    } else if (c_.deviation == "root") {
      calls[k].root = 1;
    } else {
      usage("unknown deviation '" + c_.deviation + "'");
    }
    return calls;
  }

  void beforeCall(size_t i) {
    if (c_.announce) {
      results_->setString("faults/entered/" + std::to_string(origRank_) + "/" + std::to_string(i),
                          "1");
    }
    if (isCulprit_ && static_cast<int>(i) == c_.sleepCall) {
      std::this_thread::sleep_for(std::chrono::milliseconds(c_.sleepMs));
    }
  }

  // Float32 sums carry the exact pattern valueOf (checked by verify); other calls
  // move bytes whose values nobody checks.
  void issue(const Call& call, int it = 0) {
    const size_t nn = static_cast<size_t>(comm_.size());
    const size_t elem = dataTypeSize(call.dtype);
    in_.assign((nn + 1) * (call.count + 1) * elem, 1);
    out_.assign((nn + 1) * (call.count + 1) * elem, 0);
    if (call.dtype == DataType::Float32) {
      float* f = reinterpret_cast<float*>(in_.data());
      for (size_t i = 0; i < call.count; ++i) f[i] = valueOf(origRank_, it, i);
    }
    CollectiveOptions o;
    o.algorithm = call.algo;
    if (c_.callTimeoutMs > 0) o.timeout = std::chrono::milliseconds(c_.callTimeoutMs);
    const std::string& k = call.coll;
    if (k == "allreduce") {
      comm_.allreduce(in_.data(), out_.data(), call.count, call.dtype, call.op, o);
    } else if (k == "broadcast") {
      comm_.broadcast(in_.data(), out_.data(), call.count, call.dtype, call.root, o);
    } else if (k == "allgather") {
      comm_.allGather(in_.data(), out_.data(), call.count, call.dtype, o);
    } else if (k == "reducescatter") {
      comm_.reduceScatter(in_.data(), out_.data(), call.count, call.dtype, call.op, o);
    } else if (k == "reduce") {
      comm_.reduce(in_.data(), out_.data(), call.count, call.dtype, call.op, call.root, o);
    } else if (k == "barrier") {
      comm_.barrier(o);
    } else if (k == "alltoall") {
      comm_.allToAll(in_.data(), out_.data(), call.count, call.dtype, o);
    } else if (k == "gather") {
      comm_.gather(in_.data(), out_.data(), call.count, call.dtype, call.root, o);
    } else if (k == "scatter") {
      comm_.scatter(in_.data(), out_.data(), call.count, call.dtype, call.root, o);
    } else if (k == "p2p") {
      const int n = comm_.size(), r = comm_.rank();
      WorkPtr sent = comm_.sendAsync(in_.data(), call.count, call.dtype, (r + 1) % n, it, o);
      try {
        comm_.recv(out_.data(), call.count, call.dtype, (r + n - 1) % n, it, o);
      } catch (const Error&) {
        // The send may still be in flight: its buffer must stay as it is (MPI's rule),
        // so it is parked with its Work rather than refilled by the next call.
        inFlight_.emplace_back(std::move(sent), std::move(in_));
        in_.clear();
        throw;
      }
      sent->wait();
    } else {
      usage("unknown collective " + k);
    }
  }

  // An all-reduce that succeeded must hold the exact sum over every rank; a ring
  // exchange the previous rank's values.
  bool verify(const Call& call, int it) {
    const bool p2p = call.coll == "p2p";
    if ((call.coll != "allreduce" && !p2p) || call.dtype != DataType::Float32 ||
        call.op != ReduceOp::Sum)
      return true;
    const float* f = reinterpret_cast<const float*>(out_.data());
    const int n = comm_.size();
    for (size_t i = 0; i < call.count; ++i) {
      float expect = 0;
      if (p2p) {
        expect = valueOf((origRank_ + n - 1) % n, it, i);
      } else {
        for (int r = 0; r < n; ++r) expect += valueOf(r, it, i);
      }
      if (f[i] != expect) {
        std::ostringstream os;
        os << "call " << it << " index " << i << ": expected " << expect << " got " << f[i];
        rec_["status"] = "wrong";
        rec_["wrong"] = os.str();
        publish();
        return false;
      }
    }
    return true;
  }

  void recordError(const Error& e, size_t call, double ms) {
    rec_["status"] = "error";
    rec_["call"] = std::to_string(call);
    putErrorFields(e.info(), rec_);
    rec_["elapsed_ms"] = std::to_string(ms);
    rec_["what"] = e.what();
  }

  // A later call must fail at once with Aborted naming the same culprit.
  void recordLaterCall(const Call& call) {
    const auto t0 = Clock::now();
    try {
      issue(call);
      rec_["later_kind"] = "none";
    } catch (const Error& e) {
      rec_["later_kind"] = std::string(toString(e.kind()));
      rec_["later_culprit"] = std::to_string(e.culprit());
      rec_["later_quotes_cause"] =
          std::string(e.what()).find("earlier error") != std::string::npos ? "1" : "0";
    }
    rec_["later_ms"] = std::to_string(msSince(t0));
    auto cause = comm_.abortCause();
    rec_["abort_cause_culprit"] = cause ? std::to_string(cause->culprit) : "none";
  }

  static double msSince(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  int runSequence(const std::vector<Call>& calls) {
    std::string mine;
    // The first calls only: an endless loop (a million calls) would make megabytes.
    for (size_t i = 0; i < calls.size() && i < 12; ++i) mine += show(calls[i]) + "; ";
    if (calls.size() > 12) mine += "... (" + std::to_string(calls.size()) + " calls)";
    rec_["calls"] = mine;
    size_t offset = 0;
    if (c_.warmup) {
      // Opens the connections under a generous deadline, so that a short timeout
      // meant for the fault is not spent on a loaded machine's handshakes. It is
      // collective #0: call i of the sequence is then collective #i+1, and "call" in
      // the record is that number.
      CollectiveOptions o;
      o.algorithm = c_.algo;
      o.timeout = std::chrono::milliseconds(30000);
      float x = 1;
      try {
        comm_.allreduce(&x, 1, DataType::Float32, ReduceOp::Sum, o);
      } catch (const Error& e) {
        recordError(e, 0, 0);
        rec_["status"] = "warmup-error";
        publish();
        return 0;
      }
      offset = 1;
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      beforeCall(i);
      if (isCulprit_ && static_cast<int>(i) == c_.closeCall) {
        // Closes every connection of this rank while the process lives on: the others
        // see orderly closes (FIN), not a dead process.
        { Communicator gone = std::move(comm_); }
        rec_["status"] = "closed";
        publish();
        return 0;
      }
      const auto t0 = Clock::now();
      try {
        issue(calls[i], static_cast<int>(i));
      } catch (const Error& e) {
        recordError(e, i + offset, msSince(t0));
        recordLaterCall(calls[i]);
        publish();
        return 0;
      }
      if (!verify(calls[i], static_cast<int>(i))) return 1;
    }
    rec_["status"] = "ok";
    publish();
    return 0;
  }

  // shrink and steady: verified all-reduces; shrink survives the first failure.
  int runAllreduces() {
    std::vector<float> buf(c_.count);
    std::vector<int> members;
    for (int r = 0; r < comm_.size(); ++r) members.push_back(r);
    int verifiedAfterShrink = 0;
    bool shrunk = false;
    int status = 0;
    for (int it = 0; it < c_.iters; ++it) {
      beforeCall(static_cast<size_t>(it));
      for (size_t i = 0; i < c_.count; ++i) buf[i] = valueOf(origRank_, it, i);
      const auto t0 = Clock::now();
      try {
        CollectiveOptions o;
        o.algorithm = c_.algo;
        comm_.allreduce(buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum, o);
      } catch (const Error& e) {
        if (c_.scenario != "shrink" || shrunk) {
          if (!shrunk) recordError(e, static_cast<size_t>(it), msSince(t0));
          rec_["second_error"] = shrunk ? e.what() : "";
          publish();
          return 0;
        }
        recordError(e, static_cast<size_t>(it), msSince(t0));
        Call later;
        later.count = c_.count;
        later.algo = c_.algo;
        recordLaterCall(later);
        const auto s0 = Clock::now();
        try {
          Communicator next = comm_.shrink();
          comm_ = std::move(next);
        } catch (const Error& se) {
          rec_["shrink_error"] = se.what();
          publish();
          return 0;
        }
        rec_["shrink_ms"] = std::to_string(msSince(s0));
        members = comm_.originalRanks();
        std::string list;
        for (int m : members) list += (list.empty() ? "" : ",") + std::to_string(m);
        rec_["shrink_size"] = std::to_string(comm_.size());
        rec_["shrink_rank"] = std::to_string(comm_.rank());
        rec_["shrink_members"] = list;
        shrunk = true;
        // The survivors may have failed in different iterations (one that got all
        // it needed from the culprit finished the iteration the others failed in):
        // agree on the earliest and redo from there on the smaller world.
        int64_t resume = it;
        try {
          comm_.allreduce(&resume, 1, DataType::Int64, ReduceOp::Min);
        } catch (const Error& re) {
          rec_["shrink_error"] = std::string("agreeing where to resume: ") + re.what();
          publish();
          return 0;
        }
        rec_["resume_at"] = std::to_string(resume);
        it = static_cast<int>(resume) - 1;
        continue;
      }
      // Exact check against the members' contributions.
      for (size_t i = 0; i < c_.count; ++i) {
        float expect = 0;
        for (int m : members) expect += valueOf(m, it, i);
        if (buf[i] != expect) {
          std::ostringstream os;
          os << "iteration " << it << " index " << i << ": expected " << expect << " got " << buf[i]
             << " (world " << members.size() << ")";
          rec_["wrong"] = os.str();
          status = 1;
          break;
        }
      }
      if (shrunk) ++verifiedAfterShrink;
      if (c_.pauseMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c_.pauseMs));
    }
    if (!rec_.count("status")) rec_["status"] = "ok";
    rec_["finished"] = "1";
    rec_["iterations_done"] = std::to_string(c_.iters);
    rec_["verified_after_shrink"] = std::to_string(verifiedAfterShrink);
    publish();
    return status;
  }

  void publish() {
    std::string s;
    for (const auto& [k, v] : rec_) {
      s += k + "=";
      for (char ch : v) s += ch == '\n' ? ' ' : ch;
      s += "\n";
    }
    results_->setString("faults/result/" + std::to_string(origRank_), s);
  }

  Config c_;
  Communicator comm_;
  std::shared_ptr<Store> results_;
  int origRank_ = -1;
  bool isCulprit_ = false;
  std::vector<uint8_t> in_, out_;
  std::vector<std::pair<WorkPtr, std::vector<uint8_t>>> inFlight_;  // p2p sends never waited
  std::map<std::string, std::string> rec_;
};

std::shared_ptr<Store> resultStore() {
  const char* addr = std::getenv("TCCL_STORE");
  if (addr == nullptr) usage("TCCL_STORE is not set");
  std::string a = addr;
  auto colon = a.rfind(':');
  if (colon == std::string::npos) usage("TCCL_STORE=host:port");
  return std::make_shared<TcpStore>(a.substr(0, colon),
                                    static_cast<uint16_t>(std::stoi(a.substr(colon + 1))),
                                    std::chrono::milliseconds(30000));
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = Clock::now();
  Config c = parseArgs(argc, argv);
  // Records go through a store client of their own, independent of the
  // communicator's (which the failure may have left in any state).
  std::shared_ptr<Store> results = resultStore();
  int rank = -1;
  const char* envRank = std::getenv("TCCL_RANK");
  if (c.absent && envRank != nullptr && std::atoi(envRank) == c.culprit) {
    // A rank that never arrives: the others must name it, and this process must not
    // exit (its end would not be what they are to find) before they have.
    try {
      results->wait({"faults/done"}, std::chrono::milliseconds(4 * c.timeoutMs + 30000));
    } catch (const Error&) {
    }
    return 0;
  }
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(c.timeoutMs);
    Communicator comm = Communicator::fromEnv(opts);
    rank = comm.rank();
    Worker w(c, std::move(comm), results);
    int rc = w.run();
    w.waitDone();
    return rc;
  } catch (const Error& e) {
    // A failure outside the collectives (construction, shrink's own store traffic).
    std::cerr << "[fault worker rank " << rank << "] " << e.what() << std::endl;
    const char* r = std::getenv("TCCL_RANK");
    std::map<std::string, std::string> fields;
    putErrorFields(e.info(), fields);
    std::string rec = std::string("status=setup-error\nwhat=") + e.what() + "\n";
    // From the process's start: the whole bootstrap until it failed.
    rec +=
        "elapsed_ms=" +
        std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - started).count()) +
        "\n";
    for (const auto& [k, v] : fields) {
      rec += k + "=";
      for (char ch : v) rec += ch == '\n' ? ' ' : ch;
      rec += "\n";
    }
    results->setString(std::string("faults/result/") + (r ? r : "?"), rec);
    return 1;
  }
}
