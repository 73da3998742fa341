// The call queue and progress: every call takes its place in the issue order (which
// must be the same on every rank), then runs on the caller's thread when nothing is
// queued, else on the progress thread; execute runs one call in named steps (see
// docs/architecture.md, "Life of an all-reduce").
#include <algorithm>
#include <string_view>

#include "algorithms/collective_spec.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"
#include "transport/wire.hpp"

namespace tccl {

// What execute hands from one step to the next.
struct CallPlan {
  const algo::Schedule* schedule = nullptr;  // exec.memo's (planSchedule)
  ExecContext ctx;
  std::vector<uint8_t> inputCopy;  // naive all-reduce in place works from a copy
};

// ---- issue order ----------------------------------------------------------------------

// How long the progress thread waits for more work before it ends: long next to the gap
// between a training step's collectives, short next to a sub-communicator's idle life.
constexpr std::chrono::milliseconds kProgressLinger{1000};

WorkPtr Communicator::issue(PreparedCall&& call, bool async) {
  Impl& m = *impl_;
  m.checkUsable();
  m.validate(call);
  if (P2PRoom* room = m.p2pRoomIfAny(); room && room->inGroup()) {
    m.invalidCall(call, "a collective inside a point-to-point group (groupStart ... groupEnd)");
  }
  Impl::Queue& q = m.queue;
  std::unique_lock<std::mutex> issueLock(q.issueMu);
  call.seq = q.seq++;
  if (!async && q.pending.empty() && !q.busy) {
    // Nothing queued: run on this thread. Taking execMu before releasing issueMu keeps
    // anything issued after this call from running before it.
    std::lock_guard<std::mutex> exec(m.exec.execMu);
    issueLock.unlock();
    CallStats stats;
    m.execute(call, &stats);
    q.last = std::move(stats);
    return nullptr;
  }
  auto work =
      std::make_shared<Work>(std::string(algo::spec(call.kind).name), call.seq, m.boot.rank);
  q.pending.emplace_back(std::move(call), work);
  if (!q.progressRunning) {
    // The last one ended for want of work (it takes no lock after saying so): reap it.
    if (q.progress.joinable()) q.progress.join();
    q.progress = std::thread([&m] { m.progressLoop(); });
    q.progressRunning = true;
  }
  issueLock.unlock();
  q.cv.notify_all();
  if (async) return work;
  // Asynchronous work is queued ahead of this blocking call: wait for its turn.
  work->wait();
  q.last = work->stats();
  return nullptr;
}

void Communicator::Impl::progressLoop() {
  for (;;) {
    std::pair<PreparedCall, WorkPtr> task;
    {
      std::unique_lock<std::mutex> lk(queue.issueMu);
      queue.cv.wait_for(lk, kProgressLinger,
                        [&] { return queue.stopping || !queue.pending.empty(); });
      if (queue.pending.empty()) {
        // Stopping and drained, or idle for kProgressLinger: a communicator that is not
        // used (one of many torch groups, say) holds no thread; issue starts a new one.
        queue.progressRunning = false;
        return;
      }
      task = std::move(queue.pending.front());
      queue.pending.pop_front();
      queue.busy = true;
    }
    CallStats stats;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lk(exec.execMu);
      task.second->markStarted();
      try {
        execute(task.first, &stats);
      } catch (...) {
        error = std::current_exception();
      }
    }
    task.second->complete(std::move(stats), error);
    {
      std::lock_guard<std::mutex> lk(queue.issueMu);
      queue.busy = false;
    }
    queue.cv.notify_all();
  }
}

// ---- one call -------------------------------------------------------------------------

Deadline Communicator::Impl::deadlineFor(const std::optional<std::chrono::milliseconds>& perCall,
                                         int64_t* ms) const {
  // Both are in [1 ms, config::kMaxTimeoutMs] (checked when given): always finite.
  const auto t = perCall.value_or(boot.timeout);
  *ms = t.count();
  return Deadline::after(t);
}

std::optional<Algorithm> Communicator::Impl::forcedAllreduce(std::string* why) const {
  if (!boot.envAlgorithm || *boot.envAlgorithm == Algorithm::Auto) return std::nullopt;
  if (why) *why = "TCCL_ALGO";
  return *boot.envAlgorithm;
}

Algorithm Communicator::Impl::chooseAllreduce(size_t bytes, std::string* why) const {
  if (auto forced = forcedAllreduce(why)) return *forced;
  // More than one rank: the hosts matter (read from the store on first use, which
  // waits until every rank has published its host).
  return algo::chooseAllreduce(boot.size, bytes, boot.model, why,
                               boot.size > 1 ? &boot.topology->costs() : nullptr);
}

// The job's hosts, read from the store on first use (auto's cost model and hier's layout
// need them) within the call's deadline. A rank that never published its host fails the
// call like any other failure: a Timeout naming it, in phase "hosts" (failCall).
const Topology& Communicator::Impl::readHosts(const PreparedCall& call, Deadline deadline,
                                              int64_t timeoutMs) {
  try {
    boot.topology->layout(deadline);
    exec.hostsRead = true;
  } catch (const Error& e) {
    ErrorInfo info = e.info();
    info.collective = algo::spec(call.kind).name;
    info.seq = call.seq;
    info.phase = "hosts";
    info.timeoutMs = timeoutMs;
    throwError(std::move(info));
  }
  return *boot.topology;
}

void Communicator::Impl::execute(PreparedCall& call, CallStats* stats) {
  checkUsable();  // an earlier queued call may have failed
  int64_t timeoutMs = -1;
  const Deadline deadline = deadlineFor(call.timeout, &timeoutMs);
  const auto start = Deadline::Clock::now();
  CallPlan plan;
  // The call as issued, until its plan says more: what failCall reports if the plan
  // itself fails (reading the hosts).
  Running what = runningOf(call, plan, timeoutMs);
  // Only reading the hosts can wait before the call is entered, and only the first time.
  const bool mayReadHosts = call.algorithm == Algorithm::Hierarchical ||
                            (call.algorithm == Algorithm::Auto &&
                             algo::spec(call.kind).autoChoice == algo::AutoChoice::Allreduce);
  if (mayReadHosts && !exec.hostsRead) planCall(what);
  const CommStats before = boot.transport->stats();
  try {
    if (call.algorithm == Algorithm::Auto &&
        algo::spec(call.kind).autoChoice == algo::AutoChoice::Allreduce)
      chooseAuto(call, deadline, timeoutMs);
    beginStats(call, stats);
    planSchedule(call, plan, deadline, timeoutMs);
    if (stats->algorithm.empty()) stats->algorithm = plan.schedule->algorithm;
    fillContext(call, plan, deadline, timeoutMs);
    what = runningOf(call, plan, timeoutMs);
    enterCall(call.seq, what);
    runSchedule(call, plan, timeoutMs);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::InvalidArgument) throw;
    failCall(e, call, what);
  }
  completeCall(call.seq);
  countTraffic(before, stats);
  stats->seconds = std::chrono::duration<double>(Deadline::Clock::now() - start).count();
}

// Auto all-reduce, decided when the call runs (validate.cpp says why), remembered per size.
void Communicator::Impl::chooseAuto(PreparedCall& call, Deadline deadline, int64_t timeoutMs) {
  const size_t bytes = call.count * dataTypeSize(call.dtype);
  const bool explain = log::enabled(log::Level::Info);
  std::string* why = explain ? &call.why : nullptr;
  if (!explain && bytes == exec.autoMemoBytes) {
    call.algorithm = exec.autoMemoAlgo;
  } else {
    if (auto forced = forcedAllreduce(why)) {
      call.algorithm = *forced;
    } else {
      const algo::HostCosts* hosts =
          boot.size > 1 ? &readHosts(call, deadline, timeoutMs).costs() : nullptr;
      call.algorithm = algo::chooseAllreduce(boot.size, bytes, boot.model, why, hosts);
    }
    exec.autoMemoBytes = bytes;
    exec.autoMemoAlgo = call.algorithm;
  }
}

void Communicator::Impl::beginStats(const PreparedCall& call, CallStats* stats) const {
  const std::string_view name = algo::spec(call.kind).name;
  stats->collective = name;
  stats->algorithm = call.algorithm == Algorithm::Auto ? "" : std::string(toString(call.algorithm));
  stats->seq = call.seq;
  stats->count = call.count;
  stats->bytes = call.count * dataTypeSize(call.dtype);
  TCCL_INFO(name << " #" << call.seq << " " << call.count << " x " << toString(call.dtype) << " "
                 << toString(call.op)
                 << (call.root >= 0 ? " root/peer " + std::to_string(call.root) : std::string())
                 << ": " << (stats->algorithm.empty() ? "-" : stats->algorithm) << " (" << call.why
                 << ")");
}

// The call's row of the collective table builds its schedule: the algorithm's ops plus
// the local parts of the result that never cross the wire, as Copy ops (the executor
// skips one whose source is its destination, and at world size 1 divides there for
// avg), and the buffers' origins.
void Communicator::Impl::planSchedule(const PreparedCall& call, CallPlan& plan, Deadline deadline,
                                      int64_t timeoutMs) {
  const size_t elem = dataTypeSize(call.dtype);
  algo::BuildArgs args = argsOf(call);
  args.segElems = std::max<size_t>(1, boot.segmentBytes / elem);
  // Only hier needs the host layout (read within the call's deadline: readHosts).
  args.hosts = call.algorithm == Algorithm::Hierarchical
                   ? &readHosts(call, deadline, timeoutMs).layout(deadline)
                   : nullptr;
  args.inPlace = call.inPlace;
  // A loop of calls repeats one shape: the schedule depends only on the build
  // arguments, so the last one is kept (the uneven calls' counts live outside them, so
  // those are built every time).
  Exec::ScheduleMemo& memo = exec.memo;
  if (!memo.valid || args.v != nullptr || !algo::sameBuild(args, memo.args)) {
    memo.valid = false;
    memo.built = algo::build(args);
    memo.args = args;
    memo.valid = args.v == nullptr;
  }
  const algo::BuiltSchedule& built = memo.built;
  plan.schedule = &built.schedule;
  ExecContext& ctx = plan.ctx;
  ctx.inputOrigin = built.inputOrigin;
  ctx.outputOrigin = built.outputOrigin;
  const uint8_t* in = call.in;
  // Naive reads its input while it writes its output; in place, it works from a copy.
  if (built.needsInputCopy) {
    plan.inputCopy.assign(in, in + algo::inputElems(args) * elem);
    in = plan.inputCopy.data();
  }
  const algo::Schedule& schedule = *plan.schedule;
  if (schedule.scratchElems * elem > exec.scratch.size())
    exec.scratch.resize(schedule.scratchElems * elem);
  ctx.input = in;
  ctx.output = call.out;
  ctx.scratch = exec.scratch.data();
}

void Communicator::Impl::fillContext(const PreparedCall& call, CallPlan& plan, Deadline deadline,
                                     int64_t timeoutMs) {
  const std::string_view name = algo::spec(call.kind).name;
  ExecContext& ctx = plan.ctx;
  ctx.dtype = call.dtype;
  ctx.op = call.op;
  ctx.worldSize = boot.size;
  ctx.rank = boot.rank;
  ctx.seq = static_cast<uint32_t>(call.seq);
  // An uneven call's own counts differ between ranks by design: its fingerprint carries
  // the counts every rank must pass alike (a digest; 0 for alltoallv, gatherv, scatterv,
  // whose counts the count messages check pair by pair).
  const uint64_t count =
      algo::spec(call.kind).uneven ? algo::sharedCountsDigest(argsOf(call)) : call.count;
  ctx.fingerprint = wire::fingerprint(name, static_cast<uint8_t>(call.algorithm),
                                      static_cast<uint8_t>(call.dtype),
                                      static_cast<uint8_t>(call.op), count, call.root);
  ctx.collective = name;
  ctx.seqFull = call.seq;
  ctx.deadline = deadline;
  ctx.timeoutMs = timeoutMs;
  ctx.spinMicros = boot.spinMicros;
  ctx.wakeFd = failure.wakeFd;
  ctx.abortFlag = &failure.abortFlag;
  ctx.watchPeers = watchedPeers();
  const auto& fault = failure.fault;
  if (fault && (fault->seq < 0 || fault->seq == call.seq)) ctx.fault = &*fault;
}

Running Communicator::Impl::runningOf(const PreparedCall& call, const CallPlan& plan,
                                      int64_t timeoutMs) const {
  Running what;
  what.kind = call.kind;
  what.count = call.count;
  what.dtype = call.dtype;
  what.op = call.op;
  what.root = call.root;
  what.algorithm = call.algorithm;
  what.fingerprint = plan.ctx.fingerprint;
  what.v = call.v;
  const auto hbPeriod = failure.hbPeriod;
  if (timeoutMs > 0 && hbPeriod.count() > 0)
    what.period =
        std::chrono::milliseconds(std::clamp<int64_t>(timeoutMs / 10, 20, hbPeriod.count()));
  return what;
}

// Connects the schedule's peers (a failure there names the phase "connect"), then runs it.
void Communicator::Impl::runSchedule(const PreparedCall& call, CallPlan& plan, int64_t timeoutMs) {
  if (plan.schedule->ops.empty()) return;
  try {
    std::vector<char>& once = exec.connectedOnce;
    once.resize(static_cast<size_t>(boot.size), 0);
    const bool known = std::all_of(plan.schedule->peers.begin(), plan.schedule->peers.end(),
                                   [&](int p) { return once[static_cast<size_t>(p)] != 0; });
    if (!known) {
      boot.transport->connect(plan.schedule->peers, plan.ctx.deadline);
      for (int p : plan.schedule->peers) once[static_cast<size_t>(p)] = 1;
    }
  } catch (const Error& e) {
    ErrorInfo info = e.info();
    info.collective = algo::spec(call.kind).name;
    info.seq = call.seq;
    info.algorithm = plan.schedule->algorithm;
    info.phase = "connect";
    info.timeoutMs = timeoutMs;
    throwError(std::move(info));
  }
  exec.executor.run(*plan.schedule, plan.ctx, *boot.transport);
}

const std::vector<int>& Communicator::Impl::watchedPeers() {
  const uint64_t v = boot.transport->collectiveLinksVersion();
  if (v != exec.watchVersion) {
    exec.watchPeers = boot.transport->connectedPeers();
    exec.watchVersion = v;
  }
  return exec.watchPeers;
}

void Communicator::Impl::countTraffic(const CommStats& before, CallStats* stats) const {
  const CommStats after = boot.transport->stats();
  for (const auto& [peer, cnt] : after.perPeer) {
    auto it = before.perPeer.find(peer);
    stats->traffic.perPeer[peer] = it == before.perPeer.end() ? cnt : cnt - it->second;
  }
}

}  // namespace tccl
