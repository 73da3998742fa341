// The call queue and progress: every call takes its place in the issue order (which
// must be the same on every rank), then runs on the caller's thread when nothing is
// queued, else on the progress thread; execute runs one call in named steps (see
// docs/architecture.md, "Life of an all-reduce").
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "algorithms/collective_spec.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "core/comm_impl.hpp"
#include "transport/wire.hpp"

namespace tccl {

// What execute hands from one step to the next.
struct CallPlan {
  const algo::Schedule* schedule = nullptr;  // exec.memo's (planSchedule)
  ExecContext ctx;
  std::vector<uint8_t> inputCopy;  // naive all-reduce in place works from a copy
  size_t segmentBytes = 0;         // what the schedule was cut into
};

// ---- issue order ----------------------------------------------------------------------

// How long the progress thread waits for more work before it ends: long next to the gap
// between a training step's collectives, short next to a sub-communicator's idle life.
constexpr std::chrono::milliseconds kProgressLinger{1000};
// How long the progress thread leaves a call issued to an idle queue to its waiter: a
// blocking collective of torch's is an asynchronous call waited on at once (a few us of
// Python later), and the waiter that runs it itself saves two thread wake-ups on its
// critical path. An asynchronous call nobody waits on starts this much later. 1 ms, not
// the 50 us of before: through torch on 2 cores, 8-byte all-reduces ran 1.2-1.6x faster
// (docs/PERFORMANCE.md, "The waiter's grace"). TCCL_ASYNC_GRACE_US overrides it (0: the
// progress thread takes every call at once).
constexpr std::chrono::microseconds kStealGrace{1000};

Communicator::Impl::Queue::Queue()
    : grace(config::getEnvInt("TCCL_ASYNC_GRACE_US", 0, 10'000'000).value_or(kStealGrace.count())) {
  wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  graceFd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (wakeFd < 0 || graceFd < 0) {
    const int err = errno;
    if (wakeFd >= 0) ::close(wakeFd);
    if (graceFd >= 0) ::close(graceFd);
    throwError(ErrorKind::System,
               std::string("the call queue's eventfd/timerfd: ") + std::strerror(err));
  }
}

Communicator::Impl::Queue::~Queue() {
  ::close(wakeFd);
  ::close(graceFd);
}

void Communicator::Impl::Queue::wake() const {
  const uint64_t one = 1;
  // Only EAGAIN can fail it (the counter at its maximum: a wake-up is pending anyway).
  [[maybe_unused]] const ssize_t n = ::write(wakeFd, &one, sizeof one);
}

void Communicator::Impl::Queue::armGrace(std::chrono::steady_clock::time_point until) {
  // steady_clock is CLOCK_MONOTONIC: an absolute expiry (a past one fires at once).
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count();
  itimerspec t{};
  t.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
  t.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
  if (t.it_value.tv_sec == 0 && t.it_value.tv_nsec == 0) t.it_value.tv_nsec = 1;
  ::timerfd_settime(graceFd, TFD_TIMER_ABSTIME, &t, nullptr);
  armedFor = until;
}

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
    m.recycleTraffic(q.last);  // its nodes serve the next call's statistics
    q.last = std::move(stats);
    return nullptr;
  }
  auto work =
      std::make_shared<Work>(std::string(algo::spec(call.kind).name), call.seq, m.boot.rank);
  // A waiter whose call is next runs it itself (runQueued): a call issued and waited on at
  // once, as torch's blocking collectives are, costs no hand-off to the progress thread
  // and back. Neither holds the other (a cycle), nor does it hold the communicator.
  work->setDriver(
      [gate = std::weak_ptr<Impl::Queue::Gate>(q.gate), &m, weak = std::weak_ptr<Work>(work)] {
        const auto g = gate.lock();
        const auto w = weak.lock();
        if (!g || !w) return;
        std::shared_lock<std::shared_mutex> alive(g->mu);
        if (g->alive) m.runQueued(w);
      });
  const bool idle = q.pending.empty() && !q.busy;
  if (idle) {
    q.graceUntil = std::chrono::steady_clock::now() + q.grace;
    // Armed already: for an earlier graceUntil, so it fires first and the progress thread
    // arms it again for this one.
    if (q.armedFor == std::chrono::steady_clock::time_point{}) q.armGrace(q.graceUntil);
  }
  q.pending.emplace_back(std::move(call), work);
  if (!q.progressRunning) {
    // The last one ended for want of work (it takes no lock after saying so): reap it.
    if (q.progress.joinable()) q.progress.join();
    q.progress = std::thread([&m] { m.progressLoop(); });
    q.progressRunning = true;
  }
  // An idle queue's call: the grace timer wakes the thread if need be. Behind others: a
  // thread that runs one looks again before it sleeps.
  const bool wake = !idle && q.progressAsleep;
  issueLock.unlock();
  if (wake) q.wake();
  if (async) return work;
  // Asynchronous work is queued ahead of this blocking call: wait for its turn.
  work->wait();
  q.last = work->stats();
  return nullptr;
}

void Communicator::Impl::progressLoop() {
  // Named, so that top -H, gdb and /proc show which thread is the call queue's (and a test
  // can count its wake-ups: Async.AStreamOfWaitedCallsNeverWakesTheProgressThread).
  ::pthread_setname_np(::pthread_self(), "tccl-progress");
  auto idleSince = std::chrono::steady_clock::now();
  for (;;) {
    std::pair<PreparedCall, WorkPtr> task;
    {
      std::unique_lock<std::mutex> lk(queue.issueMu);
      const auto now = std::chrono::steady_clock::now();
      // A waiter running a call (runQueued) keeps this thread: it may queue more, and the
      // destructor's join then waits for it too.
      const bool ready =
          !queue.busy && !queue.pending.empty() && (queue.stopping || now >= queue.graceUntil);
      if (!ready) {
        if (!queue.busy && queue.pending.empty() &&
            (queue.stopping || now - idleSince >= kProgressLinger)) {
          // Stopping and drained, or idle for kProgressLinger: a communicator that is not
          // used (one of many torch groups, say) holds no thread; issue starts a new one.
          queue.progressRunning = false;
          return;
        }
        if (queue.busy || !queue.pending.empty()) idleSince = now;
        // A call in its grace and a timer that fired before it (armed for an earlier call,
        // which its waiter ran): arm it for this one.
        const auto never = std::chrono::steady_clock::time_point{};
        if (!queue.busy && !queue.pending.empty() && queue.graceUntil != never &&
            queue.armedFor == never) {
          queue.armGrace(queue.graceUntil);
        }
        queue.progressAsleep = true;
        lk.unlock();
        // Until a wake-up, the grace timer, or the end of the linger.
        pollfd fds[2] = {{queue.wakeFd, POLLIN, 0}, {queue.graceFd, POLLIN, 0}};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kProgressLinger -
                                                                                (now - idleSince));
        ::poll(fds, 2, static_cast<int>(std::max<int64_t>(1, left.count() + 1)));
        uint64_t drain = 0;
        [[maybe_unused]] ssize_t n = ::read(queue.wakeFd, &drain, sizeof drain);
        const bool fired =
            ::read(queue.graceFd, &drain, sizeof drain) == static_cast<ssize_t>(sizeof drain);
        lk.lock();
        queue.progressAsleep = false;
        if (fired) queue.armedFor = never;  // the next call issued to an idle queue arms it
        continue;
      }
      task = std::move(queue.pending.front());
      queue.pending.pop_front();
      queue.graceUntil = {};
      queue.busy = true;
    }
    runTask(task);
    std::lock_guard<std::mutex> lk(queue.issueMu);
    queue.busy = false;
    idleSince = std::chrono::steady_clock::now();
  }
}

void Communicator::Impl::runQueued(const WorkPtr& work) {
  std::pair<PreparedCall, WorkPtr> task;
  {
    std::lock_guard<std::mutex> lk(queue.issueMu);
    if (queue.busy || queue.pending.empty() || queue.pending.front().second != work) return;
    task = std::move(queue.pending.front());
    queue.pending.pop_front();
    queue.graceUntil = {};
    queue.busy = true;
    // It is taken. The timer stays armed (lazy: touching it at every call would cost
    // each a system call), unless it would fire before the next call is likely taken
    // too: nothing else is queued, and its expiry is nearer than a quarter of the grace
    // or twice the time since the last call taken this way (calls come at an uneven
    // pace). Its firing would only wake the progress thread to find nothing to run, and
    // on a few shared cores that wake-up takes a core from a rank (async+wait cost 20.9
    // against 18.6 us per call at world 2 and 103.7 against 81.7 us at world 4 with the
    // timer firing against quiet: bench/async_grace_ab.py; docs/PERFORMANCE.md,
    // 2026-12-05). So it is pushed to a grace from now: one system call, and the next
    // call issued to this idle queue (its grace ends later than that) finds it armed and
    // arms nothing; if it fires before that call's grace ends, the progress thread arms
    // it again for it. Disarming it instead cost two (here, and at the next call's
    // issue), at every call once calls were more than a quarter of the grace apart, and
    // one timerfd_settime takes about 1.9 us in this VM (docs/PERFORMANCE.md,
    // 2026-12-06 evening).
    const auto now = std::chrono::steady_clock::now();
    const auto never = std::chrono::steady_clock::time_point{};
    if (queue.pending.empty() && queue.armedFor != never && queue.lastTaken != never &&
        queue.armedFor - now < std::max<std::chrono::steady_clock::duration>(
                                   queue.grace / 4, 2 * (now - queue.lastTaken))) {
      queue.armGrace(now + queue.grace);
    }
    queue.lastTaken = now;
  }
  runTask(task);
  bool more = false;
  {
    std::lock_guard<std::mutex> lk(queue.issueMu);
    queue.busy = false;
    more = queue.progressAsleep && (queue.stopping || !queue.pending.empty());
  }
  // The progress thread waits for a call to run or for the end, nothing else.
  if (more) queue.wake();
}

void Communicator::Impl::runTask(std::pair<PreparedCall, WorkPtr>& task) {
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
}

// ---- one call -------------------------------------------------------------------------

Deadline Communicator::Impl::deadlineFor(const std::optional<std::chrono::milliseconds>& perCall,
                                         int64_t* ms, Deadline::Clock::time_point now) const {
  // Both are in [1 ms, config::kMaxTimeoutMs] (checked when given): always finite.
  const auto t = perCall.value_or(boot.timeout);
  *ms = t.count();
  return Deadline::after(t, now);
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
  boot.transport->countersByPeer(exec.trafficBefore);
  try {
    if (call.algorithm == Algorithm::Auto &&
        algo::spec(call.kind).autoChoice == algo::AutoChoice::Allreduce)
      chooseAuto(call, deadline, timeoutMs);
    beginStats(call, stats);
    planSchedule(call, plan, deadline, timeoutMs);
    if (stats->algorithm.empty()) stats->algorithm = plan.schedule->algorithm;
    stats->segmentBytes = plan.segmentBytes;
    fillContext(call, plan, deadline, timeoutMs);
    what = runningOf(call, plan, timeoutMs);
    enterCall(call.seq, what);
    runSchedule(call, plan, timeoutMs);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::InvalidArgument) throw;
    failCall(e, call, what);
  }
  completeCall(call.seq);
  countTraffic(stats);
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
  // An all-reduce's segment, unless one is set, from the cost model: every rank computes
  // the same from the call and the job's model.
  const size_t segment =
      boot.segmentFixed || call.kind != algo::Collective::AllReduce
          ? boot.segmentBytes
          : algo::allreduceSegmentBytes(call.algorithm, boot.size, call.count * elem, boot.model,
                                        boot.segmentBytes);
  args.segElems = std::max<size_t>(1, segment / elem);
  plan.segmentBytes = segment;
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
  ctx.adaptiveYield = boot.adaptiveYield;
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

void Communicator::Impl::countTraffic(CallStats* stats) {
  boot.transport->countersByPeer(exec.trafficAfter);
  const auto& before = exec.trafficBefore;
  auto& out = stats->traffic.perPeer;
  auto& spare = exec.spareTraffic;
  size_t b = 0;  // both snapshots are in peer order
  for (const auto& [peer, cnt] : exec.trafficAfter) {
    while (b < before.size() && before[b].first < peer) ++b;
    const PeerCounters delta =
        b < before.size() && before[b].first == peer ? cnt - before[b].second : cnt;
    // A fresh CallStats, filled in peer order: each peer goes in once, at the end.
    if (spare.empty()) {
      out.emplace_hint(out.end(), peer, delta);
      continue;
    }
    auto node = std::move(spare.back());
    spare.pop_back();
    node.key() = peer;
    node.mapped() = delta;
    out.insert(out.end(), std::move(node));
  }
}

void Communicator::Impl::recycleTraffic(CallStats& stats) {
  auto& m = stats.traffic.perPeer;
  while (!m.empty()) exec.spareTraffic.push_back(m.extract(m.begin()));
}

}  // namespace tccl
