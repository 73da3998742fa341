#include "exec/p2p.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "base/log.hpp"
#include "exec/p2p_util.hpp"
#include "exec/spin.hpp"

namespace tccl {
using wire::MsgKind;
using namespace p2p_util;

P2PEngine::P2PEngine(P2PConfig config, P2PLinkSource& links)
    : cfg_(std::move(config)), source_(links) {
  cfg_.chunkBytes = std::max<size_t>(cfg_.chunkBytes, 1);
  cfg_.eagerBytes = std::min(cfg_.eagerBytes, cfg_.poolBytes);
  graceBackoff_ = std::chrono::microseconds(std::max(cfg_.graceMicros, 1));
  wakeFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  idleFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  graceFd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  leftFd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (wakeFd_ < 0 || idleFd_ < 0 || graceFd_ < 0 || leftFd_ < 0) {
    const int err = errno;
    for (int fd : {wakeFd_, idleFd_, graceFd_, leftFd_}) {
      if (fd >= 0) ::close(fd);
    }
    throwError(ErrorKind::System,
               std::string("the p2p engine's eventfd/timerfd: ") + std::strerror(err));
  }
}

P2PEngine::~P2PEngine() {
  ErrorInfo cause;
  cause.kind = ErrorKind::Aborted;
  cause.rank = cfg_.rank;
  cause.message = "the communicator was destroyed with this operation pending";
  std::vector<P2PHandle> completed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    for (const P2PHandle& op : std::vector<P2PHandle>(all_)) {
      fail(op, errorFor(*op, ErrorKind::Aborted, cause.message), completed);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    wakeProgressLocked(true);
  }
  driverCv_.notify_all();
  kick();
  if (progress_.joinable()) progress_.join();
  runCompletions(completed);
  ::close(wakeFd_);
  ::close(idleFd_);
  ::close(graceFd_);
  ::close(leftFd_);
}

void P2PEngine::fill(P2POp& op, bool isSend, const void* buf, size_t bytes, int peer, int tag,
                     Deadline deadline, int64_t timeoutMs) {
  op.isSend = isSend;
  op.buf = const_cast<uint8_t*>(static_cast<const uint8_t*>(buf));
  op.bytes = bytes;
  op.peer = peer;
  op.tag = tag;
  op.deadline = deadline;
  op.timeoutMs = timeoutMs;
}

P2PHandle P2PEngine::makeSend(const void* buf, size_t bytes, int peer, int tag, Deadline deadline,
                              int64_t timeoutMs, P2PCompletion onDone) {
  auto op = std::make_shared<P2POp>();
  fill(*op, true, buf, bytes, peer, tag, deadline, timeoutMs);
  op->onDone = std::move(onDone);
  return op;
}

P2PHandle P2PEngine::makeRecv(void* buf, size_t capacity, int source, int tag, Deadline deadline,
                              int64_t timeoutMs, P2PCompletion onDone) {
  auto op = std::make_shared<P2POp>();
  fill(*op, false, buf, capacity, source, tag, deadline, timeoutMs);
  op->onDone = std::move(onDone);
  return op;
}

size_t P2PEngine::unexpectedBytesPeak() const {
  std::lock_guard<std::mutex> lk(mu_);
  return unexpectedPeak_;
}

size_t P2PEngine::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return all_.size();
}

void P2PEngine::kick() {
  if (wakeFd_ < 0) return;
  kicked_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t n = ::write(wakeFd_, &one, sizeof one);
  (void)n;
}

namespace {
// A timer that fires while a caller is still posting is re-armed for the rest of the
// grace, up to the grace plus the longer of the grace and this from its arming.
constexpr std::chrono::microseconds kPostingCap{1000};

void armTimer(int fd, std::chrono::microseconds after) {
  itimerspec t{};
  t.it_value.tv_sec = static_cast<time_t>(after.count() / 1'000'000);
  t.it_value.tv_nsec = static_cast<long>(after.count() % 1'000'000) * 1000L;
  if (t.it_value.tv_sec == 0 && t.it_value.tv_nsec == 0) t.it_value.tv_nsec = 1000;
  ::timerfd_settime(fd, 0, &t, nullptr);
}

int64_t steadyNs(Deadline::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void P2PEngine::leftPendingLocked() {
  if (graceArmed_ && !leftArmed_ && !driving_ && callersWaiting_ == 0 && cfg_.graceMicros > 0 &&
      !all_.empty()) {
    armTimer(leftFd_, std::chrono::microseconds(cfg_.graceMicros));
    leftArmed_ = true;
  }
  wakeProgressLocked();
}

void P2PEngine::callerBackLocked() {
  if (!leftArmed_) return;
  itimerspec off{};
  ::timerfd_settime(leftFd_, 0, &off, nullptr);
  leftArmed_ = false;
}

void P2PEngine::wakeProgressLocked(bool now) {
  if (now) {
    graceArmed_ = false;  // the timer may still fire: a spurious wake, looked at and slept on
    uint64_t one = 1;
    ssize_t n = ::write(idleFd_, &one, sizeof one);
    (void)n;
    return;
  }
  if (driving_ || callersWaiting_ > 0 || graceArmed_ || !hasWork()) return;
  if (cfg_.graceMicros <= 0) {
    if (progressIdle_) wakeProgressLocked(true);
    return;
  }
  // Armed whether or not the progress thread sleeps now: one that is about to look for
  // work (just started, or just woken) sees graceArmed_ and sleeps until the timer.
  armTimer(graceFd_, std::chrono::microseconds(cfg_.graceMicros));
  graceArmed_ = true;
  graceArmedNs_.store(steadyNs(Deadline::Clock::now()), std::memory_order_relaxed);
}

// The grace timer's wake-ups while a caller keeps driving (a window of waits, each ending
// with operations still pending) are looked at without the lock: the timer is re-armed,
// twice as late each time up to cfg_.idleLookMaxMicros (8 ms), and graceArmed_ stays
// set, so the caller's posts arm nothing and the progress thread does not contend for
// the lock it drives under. Each wake-up costs a context switch on a core a driving
// caller needs (up to 1 ms apart, they cost p2p latency 5-15 %: docs/PERFORMANCE.md).
// Once nobody drives or waits at a wake-up, the thread takes the lock and looks for
// work. A caller that stops waiting with operations pending arms a second timer,
// leftFd_, for the grace, and its next wait disarms it (leftPendingLocked,
// callerBackLocked: two timerfd_settime calls, only for waits that leave operations
// pending), so what a caller leaves starts moving about a grace after it left; an
// operation posted while nobody drives, after waits that kept the caller driving,
// starts moving at most about idleLookMaxMicros late.
void P2PEngine::sleepIdle(std::unique_lock<std::mutex>& lk) {
  progressIdle_ = true;
  lk.unlock();
  pollfd fds[3] = {{idleFd_, POLLIN, 0}, {graceFd_, POLLIN, 0}, {leftFd_, POLLIN, 0}};
  uint64_t v;
  for (;;) {
    while (::poll(fds, 3, -1) < 0 && errno == EINTR) {
    }
    const bool urgent = ::read(idleFd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
    const bool graceFired = ::read(graceFd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
    // A caller left operations pending a grace ago (leftPendingLocked): looked at as the
    // grace timer's wake-up is.
    const bool leftFired = ::read(leftFd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
    if (leftFired) leftArmed_ = false;  // at worst a caller disarms a timer that is not armed
    const bool fired = graceFired || leftFired;
    const bool busy = driving_ || callersWaiting_ > 0;
    if (fired && !urgent && !busy && cfg_.graceMicros > 0) {
      // Nobody drives or waits, but a caller may still be posting: the grace counts from
      // its last post, up to the grace plus the longer of the grace and kPostingCap from
      // when the timer was armed (1.05 ms by default).
      const int64_t now = steadyNs(Deadline::Clock::now());
      const int64_t grace = int64_t{cfg_.graceMicros} * 1000;
      const int64_t sincePost = now - lastPostNs_.load(std::memory_order_relaxed);
      const int64_t sinceArm = now - graceArmedNs_.load(std::memory_order_relaxed);
      const int64_t cap = grace + std::max(grace, std::chrono::nanoseconds(kPostingCap).count());
      if (sincePost < grace && sinceArm < cap) {
        armTimer(graceFd_, std::chrono::microseconds((grace - sincePost) / 1000 + 1));
        continue;
      }
    }
    if (urgent || !fired || !busy) {
      lk.lock();
      progressIdle_ = false;
      if (fired) graceArmed_ = false;  // graceFd_ may still fire: a spurious wake-up
      graceBackoff_ = std::chrono::microseconds(std::max(cfg_.graceMicros, 1));
      return;
    }
    graceBackoff_ =
        std::min(graceBackoff_ * 2,
                 std::chrono::microseconds(std::max(cfg_.idleLookMaxMicros, cfg_.graceMicros)));
    armTimer(graceFd_, graceBackoff_);
  }
}

void P2PEngine::wakeDriverWaitersLocked() {
  if (driverWaiters_ > 0) driverCv_.notify_all();
}

void P2PEngine::ensureProgressThread() {
  if (!progress_.joinable() && !stop_) progress_ = std::thread([this] { progressLoop(); });
}

// ---- posting ----------------------------------------------------------------------------

// A burst of posts (postThenWait): each within kBurstGap of the one before, with no wait
// between; at most kBurstPosts of them wait for the next drive.
constexpr std::chrono::nanoseconds kBurstGap = std::chrono::microseconds(20);
constexpr int kBurstPosts = static_cast<int>(TxFrame::kMaxFramesPerWrite);

// A caller that will wait counts itself a waiter before it posts, so the progress thread
// never starts driving operations the caller is about to drive itself (that hand-off
// would cost a context switch per blocking send or receive).
void P2PEngine::postThenWait(std::span<const P2PHandle> ops, std::span<const P2PHandle> waitFor) {
  std::vector<P2PHandle> completed;
  const bool waits = !waitFor.empty();
  bool kickDriver = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (waits) {
      callersWaiting_++;
      callerBackLocked();
      endBurstLocked();
    }
    for (const P2PHandle& op : ops) postLocked(op, completed);
    if (!ops.empty()) lastPostNs_.store(steadyNs(ops.back()->posted), std::memory_order_relaxed);
    // What is not done at once progresses on the progress thread unless a caller waits.
    ensureProgressThread();
    if (!waits) {
      // Nobody drives: move what can move now on this thread (an eager send leaves at
      // once and completes), so that the progress thread is woken only for what is left.
      // Not within a burst, though: posts that follow the last one within kBurstGap
      // with no wait between (a window of sendAsync / recvAsync) are left, up to
      // kBurstPosts of them, to the next drive (the caller's wait, the post that fills
      // the burst, or the progress thread once the grace ends), which hands their frames
      // to the socket several to a writev instead of one system call per message.
      const int64_t at = ops.empty() ? 0 : steadyNs(ops.front()->posted);
      const bool burst = burstPostNs_ != 0 && at - burstPostNs_ < kBurstGap.count() &&
                         burstDeferred_ + 1 < kBurstPosts && cfg_.graceMicros > 0;
      if (!ops.empty()) burstPostNs_ = steadyNs(ops.back()->posted);
      if (burst) {
        burstDeferred_++;
      } else if (!driving_ && callersWaiting_ == 0) {
        burstDeferred_ = 0;
        driving_ = true;
        pumpAll(completed);
        driving_ = false;
      }
      wakeProgressLocked();
      kickDriver = driving_;  // a driver asleep in poll must see the new operations
    }
  }
  runCompletions(completed);
  if (!waits) {
    if (kickDriver) kick();
    return;
  }
  finishWait(waitFor);
}

void P2PEngine::postLocked(const P2PHandle& op, std::vector<P2PHandle>& completed) {
  if (op->posted == Deadline::Clock::time_point{}) op->posted = Deadline::Clock::now();
  op->id = nextId_++;
  if (nextId_ == 0) nextId_ = 1;  // 0 means "refused" in a Cts
  all_.push_back(op);
  op->state = P2POp::State::Queued;
  if (aborted_) {
    fail(op,
         errorFor(*op, ErrorKind::Aborted,
                  "the communicator was aborted before this operation: " + aborted_->message),
         completed);
  } else if (op->isSend) {
    auto it = links_.find(op->peer);
    if (it != links_.end() && it->second.closed) {
      fail(op, errorFor(*op, it->second.closedKind, it->second.closedWhy), completed);
    } else if (it != links_.end()) {
      it->second.sends.push_back(op);
    } else {
      unconnected_[op->peer].push_back(op);
    }
  } else if (!matchUnexpected(op, completed)) {
    auto it = op->peer == kAnySource ? links_.end() : links_.find(op->peer);
    if (it != links_.end() && it->second.closed) {
      fail(op, errorFor(*op, it->second.closedKind, it->second.closedWhy), completed);
    } else {
      recvs_.push_back(op);
      // This side may be the one that dials: start now, so that the sender finds us.
      if (op->peer != kAnySource && it == links_.end()) unconnected_[op->peer];
    }
  }
}

// ---- waiting and driving ---------------------------------------------------------------

void P2PEngine::waitAll(std::span<const P2PHandle> ops) {
  bool kickDriver = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    callersWaiting_++;
    callerBackLocked();
    endBurstLocked();
    kickDriver = driving_;
  }
  if (kickDriver) kick();  // a driving progress thread hands the driving over
  finishWait(ops);
}

// With this caller counted in callersWaiting_: drives until every op is done, then
// counts itself out and rethrows the first error.
void P2PEngine::finishWait(std::span<const P2PHandle> ops) {
  auto allDone = [&] {
    return std::all_of(ops.begin(), ops.end(), [](const P2PHandle& o) { return o->done(); });
  };
  try {
    if (!allDone()) drive(allDone, false);
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    callersWaiting_--;
    leftPendingLocked();
    throw;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    callersWaiting_--;
    leftPendingLocked();  // operations left pending go on without this caller
  }
  for (const P2PHandle& o : ops) {
    if (o->error()) std::rethrow_exception(o->error());
  }
}

void P2PEngine::progressLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (graceArmed_ || driving_ || callersWaiting_ > 0 || !hasWork()) {
      sleepIdle(lk);
      continue;
    }
    lk.unlock();
    drive([] { return false; }, true);
    lk.lock();
  }
}

// Pending operations, or frames still to send (a Credit, Cts or Cancel outlives the
// operation that caused it).
bool P2PEngine::hasWork() const {
  if (!all_.empty()) return true;
  for (const auto& [peer, ls] : links_) {
    if (ls.closed) continue;
    if (!ls.tx.idle() || !ls.control.empty() || !ls.sends.empty() || !ls.streams.empty())
      return true;
  }
  return false;
}

Deadline P2PEngine::earliestDeadline() const {
  Deadline d = Deadline::never();
  for (const P2PHandle& op : all_) {
    if (op->deadline.at() < d.at()) d = op->deadline;
  }
  return d;
}

bool P2PEngine::drive(const std::function<bool()>& until, bool yieldToCallers) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (until()) return true;
    if (yieldToCallers && (stop_ || callersWaiting_ > 0 || driving_)) return false;
    if (driving_) {
      // Another thread drives; it completes our operations too, or (the progress
      // thread, seeing this caller) hands the driving over within a round. Yield for
      // the spin time before sleeping: a hand-off by futex costs two context switches.
      const auto spinUntil = Deadline::Clock::now() + std::chrono::microseconds(cfg_.spinMicros);
      while (driving_ && !until() && Deadline::Clock::now() < spinUntil) {
        lk.unlock();
        sched_yield();  // a hand-off between this process's threads: yield always
        lk.lock();
      }
      if (!driving_ || until()) continue;
      driverWaiters_++;
      driverCv_.wait_for(lk, std::chrono::milliseconds(5));
      driverWaiters_--;
      continue;
    }
    driving_ = true;
    auto lastProgress = Deadline::Clock::now();
    const auto spin = std::chrono::microseconds(cfg_.spinMicros);
    // Kept across the rounds (cleared, not freed): a round allocates nothing.
    std::vector<P2PHandle> completed;
    std::vector<LinkWait> waits;
    std::vector<int> waitPeers;
    std::vector<int> wakeFds;
    for (;;) {
      bool progress = pumpAll(completed);
      if (anyExpired()) {
        // What is known of the peers' health goes into the errors; asking may take a
        // store round trip or two, so not under the lock (driving_ keeps others out).
        std::map<int, std::string> health;
        for (const P2PHandle& op : all_) {
          if (op->deadline.expired() && op->peer >= 0) health[op->peer];
        }
        lk.unlock();
        for (auto& [peer, text] : health) text = source_.describePeer(peer);
        lk.lock();
        expire(health, completed);
      }
      if (!completed.empty()) {
        lk.unlock();
        runCompletions(completed);
        lk.lock();
        wakeDriverWaitersLocked();
        progress = true;
      }
      if (until()) break;
      if (yieldToCallers && (stop_ || callersWaiting_ > 0 || !hasWork())) {
        break;
      }
      if (progress) {
        lastProgress = Deadline::Clock::now();
        continue;
      }
      waits.clear();
      waitPeers.clear();
      for (auto& [peer, ls] : links_) {
        if (ls.closed) continue;
        LinkWait w;
        w.link = ls.link;
        w.read = true;
        w.write = ls.wantWrite;
        waits.push_back(w);
        waitPeers.push_back(peer);
      }
      Deadline until2 = earliestDeadline();
      // Connections in progress: the source's descriptor says when to look again; a
      // source without one is looked at every 2 ms.
      const int serviceFd = source_.serviceFd();
      if (!unconnected_.empty() && serviceFd < 0) {
        const Deadline soon = Deadline::after(std::chrono::milliseconds(2));
        if (soon.at() < until2.at()) until2 = soon;
      }
      wakeFds.assign({wakeFd_, serviceFd});
      lk.unlock();
      bool woken = false;
      if (Deadline::Clock::now() - lastProgress < spin) {
        // Spin on poll(2) without a timeout, not on reads: a poll takes no socket lock,
        // while a read attempt does, and a segment that arrives meanwhile then waits in
        // the socket's backlog until the read lets go (perf showed lock_sock contention
        // when spinning on readv). Give the core away between polls: with more ranks than
        // cores the peer we wait for may need this very core (exec/spin.hpp: not while it
        // loses the core to other work for long).
        while (!pollLinks(waits, wakeFds, &woken) && Deadline::Clock::now() - lastProgress < spin) {
          spinYield(cfg_.adaptiveYield);
        }
      } else {
        waitLinks(waits, wakeFds, until2, &woken);
      }
      if (woken) {
        uint64_t v;
        if (wakeFd_ >= 0 && kicked_.exchange(false, std::memory_order_acq_rel)) {
          ssize_t n = ::read(wakeFd_, &v, sizeof v);
          (void)n;
        }
        if (serviceFd >= 0) {  // ours alone: drained here, looked at in the next round
          ssize_t n = ::read(serviceFd, &v, sizeof v);
          (void)n;
        }
      }
      lk.lock();
      for (size_t i = 0; i < waits.size(); ++i) {
        if (!waits[i].stirred()) continue;
        if (auto it = links_.find(waitPeers[i]); it != links_.end()) it->second.rxStirred = true;
      }
    }
    driving_ = false;
    wakeDriverWaitersLocked();
    wakeProgressLocked();
    return until();
  }
}

void P2PEngine::runCompletions(std::vector<P2PHandle>& completed) {
  for (const P2PHandle& op : completed) {
    if (op->onDone) {
      try {
        op->onDone(std::move(op->result_), op->error_);
      } catch (const std::exception& e) {
        TCCL_WARN("a point-to-point completion callback threw: " << e.what());
      }
      op->onDone = nullptr;  // called once; what it holds (a Work) goes with it
    }
    op->done_.store(true, std::memory_order_release);
  }
  completed.clear();
}

// ---- links ------------------------------------------------------------------------------

P2PEngine::LinkState* P2PEngine::stateFor(int peer) {
  auto it = links_.find(peer);
  return it == links_.end() ? nullptr : &it->second;
}

// What a p2p link's reads take beyond the frame at hand (RxFrame::enableReadAhead): a
// small message in one readv, and a chunk's read brings the next header along.
constexpr size_t kReadAheadBytes = 8192;

void P2PEngine::adoptLinks(std::vector<P2PHandle>& completed) {
  source_.service();
  // Listing the links takes the transport's lock and a vector: only when they changed.
  const uint64_t version = source_.linksVersion();
  if (version == 0 || version != linksSeen_) {
    linksSeen_ = version;
    for (Link* l : source_.links()) {
      if (links_.count(l->peer())) continue;
      LinkState& ls = links_[l->peer()];
      ls.link = l;
      ls.peer = l->peer();
      ls.credit = cfg_.poolBytes;
      ls.rx.enableReadAhead(kReadAheadBytes);
    }
  }
  if (unconnected_.empty()) return;
  for (auto it = unconnected_.begin(); it != unconnected_.end();) {
    const int peer = it->first;
    Link* l = nullptr;
    std::string error;
    ErrorKind kind = ErrorKind::System;
    try {
      l = source_.link(peer);
    } catch (const Error& e) {
      error = e.info().message;
      kind = e.kind();
    }
    if (!error.empty()) {
      for (const P2PHandle& op : it->second) {
        fail(op, errorFor(*op, kind, "could not connect: " + error), completed);
      }
      for (const P2PHandle& op : std::deque<P2PHandle>(recvs_)) {
        if (op->peer == peer) {
          eraseFrom(recvs_, op);
          fail(op, errorFor(*op, kind, "could not connect: " + error), completed);
        }
      }
      it = unconnected_.erase(it);
      continue;
    }
    if (!l) {
      ++it;
      continue;
    }
    LinkState& ls = links_[peer];
    if (!ls.link) {
      ls.link = l;
      ls.peer = peer;
      ls.credit = cfg_.poolBytes;
      ls.rx.enableReadAhead(kReadAheadBytes);
    }
    for (const P2PHandle& op : it->second) ls.sends.push_back(op);
    it = unconnected_.erase(it);
  }
}

bool P2PEngine::pumpAll(std::vector<P2PHandle>& completed) {
  adoptLinks(completed);
  bool progress = false;
  for (auto& [peer, ls] : links_) {
    if (ls.closed) continue;
    progress |= pumpTx(ls, completed);
    if (!ls.closed) progress |= pumpRx(ls, completed);
  }
  return progress;
}

// The next frame for the link: control first, then envelopes in posting order, then the
// next chunk of the oldest cleared stream. Taking it commits it (credit spent, the Rts
// awaited); untakeTx puts back one that did not leave.
bool P2PEngine::takeTx(LinkState& ls, Tx& t) {
  t = Tx{};
  if (!ls.control.empty()) {
    t = ls.control.front();
    ls.control.pop_front();
  } else if (!ls.sends.empty()) {
    P2PHandle op = ls.sends.front();
    ls.sends.pop_front();
    t.op = op;
    t.header.seq = static_cast<uint32_t>(op->tag);
    t.header.step = op->id;
    t.header.length = op->bytes;
    if (op->bytes <= cfg_.eagerBytes && op->bytes <= ls.credit) {
      ls.credit -= op->bytes;
      t.header.kind = MsgKind::Eager;
      t.payload = op->buf;
      op->state = P2POp::State::Envelope;
    } else {
      t.header.kind = MsgKind::Rts;
      op->state = P2POp::State::AwaitCts;
      awaitingCts_[op->id] = op;
    }
  } else if (!ls.streams.empty()) {
    P2PHandle op = ls.streams.front();
    const size_t n = std::min(cfg_.chunkBytes, op->bytes - op->moved);
    t.op = op;
    t.header.kind = MsgKind::Chunk;
    t.header.fingerprint = op->remoteId;
    t.header.step = op->id;
    t.header.length = n;
    t.payload = op->buf + op->moved;
    op->moved += n;
    if (op->moved == op->bytes) ls.streams.pop_front();
  } else {
    return false;
  }
  return true;
}

// Undoes takeTx for the frame taken last (frames are put back newest first).
void P2PEngine::untakeTx(LinkState& ls, const Tx& t) {
  const P2PHandle& op = t.op;
  switch (t.header.kind) {
    case MsgKind::Eager:
    case MsgKind::Rts:
      if (t.header.kind == MsgKind::Eager) {
        ls.credit += op->bytes;
      } else {
        awaitingCts_.erase(op->id);
      }
      op->state = P2POp::State::Queued;
      ls.sends.push_front(op);
      break;
    case MsgKind::Chunk:
      op->moved -= t.header.length;
      if (ls.streams.empty() || ls.streams.front() != op) ls.streams.push_front(op);
      break;
    default:  // Cts (its op is the receive), Credit, Cancel
      ls.control.push_front(t);
      break;
  }
}

// What one writev may carry: frames queued behind the first go with it (TxFrame::pumpMany:
// control frames, envelopes and chunks, in takeTx's order) and add up to at most this.
// Chunks share writes too: a rendezvous message of 64 KiB is a frame of 64 KiB + 24
// bytes, just over loopback's segment (MSS 65,483), and sent alone each frame became a
// full segment and a tiny one, whose buffer overhead filled the receiver's window (zero
// windows, twice the segments): bibw at 64 KiB ran at half the bandwidth of 60 KiB. A
// chunk taken behind another commits nothing that untakeTx cannot put back, and a
// stream completes only in sentFrame, once its last chunk is out.
constexpr size_t kBatchBytes = 256 * 1024;

bool P2PEngine::pumpTx(LinkState& ls, std::vector<P2PHandle>& completed) {
  bool progress = false;
  for (;;) {
    if (ls.tx.idle()) {
      Tx t;
      if (!takeTx(ls, t)) {
        ls.wantWrite = false;
        return progress;
      }
      ls.txNow = std::move(t);
      ls.tx.start(ls.txNow.header, ls.txNow.payload);
    }
    // The frames behind it, as far as the link and the budget allow: frames[k] is
    // ls.tx for k = 0, else txMore_[k - 1].
    size_t n = 1;
    txFrames_[0] = &ls.tx;
    auto queued = [&ls] { return !ls.control.empty() || !ls.sends.empty() || !ls.streams.empty(); };
    if (queued() && ls.link->framesShareWrites()) {
      size_t bytes = ls.tx.total() - ls.tx.sent();
      while (n < TxFrame::kMaxFramesPerWrite && bytes < kBatchBytes && queued()) {
        Tx& t = txMore_[n - 1];
        if (!takeTx(ls, t)) break;
        TxFrame& f = txMoreFrames_[n - 1];
        f.start(t.header, t.payload);
        if (bytes + f.total() > kBatchBytes) {
          untakeTx(ls, t);
          t = Tx{};
          break;
        }
        bytes += f.total();
        txFrames_[n++] = &f;
      }
    }
    const LinkIo r = TxFrame::pumpMany(*ls.link, txFrames_.data(), n);
    // Frames behind the first that did not finish go back to their queues, newest
    // first, but for one that went out in part: it becomes the link's frame in flight.
    size_t out = 0;  // frames [0, out) are all out
    while (out < n && txFrames_[out]->done()) ++out;
    const size_t keep = out > 0 && out < n && txFrames_[out]->sent() > 0 ? out + 1 : out;
    for (size_t k = n; k-- > std::max<size_t>(keep, 1);) {
      untakeTx(ls, txMore_[k - 1]);
      txMore_[k - 1] = Tx{};
    }
    if (r.status == LinkStatus::Closed || r.status == LinkStatus::Error) {
      closeLink(ls, ErrorKind::PeerClosed,
                r.status == LinkStatus::Closed ? "connection closed by the peer while sending"
                                               : "send failed: " + ls.link->errorText(),
                completed);
      return true;
    }
    if (r.status == LinkStatus::Blocked) {
      // Nothing was written: the first frame stays in flight (not started, or as before).
      ls.wantWrite = true;
      return progress;
    }
    progress = true;
    if (out == 0) continue;  // the first frame is still going out
    sentFrame(ls, ls.txNow, completed);
    ls.tx.reset();
    ls.txNow = Tx{};
    for (size_t k = 1; k < out; ++k) {
      sentFrame(ls, txMore_[k - 1], completed);
      txMore_[k - 1] = Tx{};
    }
    if (keep > out) {  // out >= 1: that frame is part sent
      ls.txNow = std::move(txMore_[out - 1]);
      ls.tx = txMoreFrames_[out - 1];
      txMore_[out - 1] = Tx{};
    }
  }
}

// A frame is all out: an eager send, or a stream's last chunk, completes. Frames leave in
// the order taken, so the chunk that ends the message is out after all the others (several
// chunks of one stream may share a write: the end is where this chunk ends, not how far
// takeTx has got).
void P2PEngine::sentFrame(LinkState& ls, const Tx& t, std::vector<P2PHandle>& completed) {
  const wire::MessageHeader& h = t.header;
  const P2PHandle& op = t.op;
  if (!op || op->state == P2POp::State::Done) return;
  const size_t payload = wire::carriesPayload(h.kind) ? h.length : 0;
  addTraffic(*op, ls.peer, true, payload, wire::kHeaderSize + payload);
  if (h.kind == MsgKind::Eager) {
    op->result_.bytes = op->bytes;
    finish(op, completed);
  } else if (h.kind == MsgKind::Chunk && t.payload + h.length == op->buf + op->bytes) {
    op->result_.bytes = op->bytes;
    finish(op, completed);
  }
}

// ---- failures ---------------------------------------------------------------------------

ErrorInfo P2PEngine::errorFor(const P2POp& op, ErrorKind kind, std::string why) const {
  ErrorInfo info;
  info.kind = kind;
  info.rank = cfg_.rank;
  info.peer = op.peer;
  info.collective = op.isSend ? "send" : "recv";
  info.phase = op.isSend ? "to rank " + std::to_string(op.peer) + ", " + tagText(op.tag)
                         : "from " + sourceText(op.peer) + ", " + tagText(op.tag);
  info.bytesMoved = static_cast<int64_t>(op.moved);
  info.bytesExpected = static_cast<int64_t>(op.isSend ? op.bytes : op.expect);
  info.elapsedMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - op.posted)
          .count();
  info.timeoutMs = op.timeoutMs;
  info.message = std::move(why);
  if (auto it = links_.find(op.peer); it != links_.end() && it->second.link) {
    info.peerAddress = it->second.link->address();
  }
  return info;
}

void P2PEngine::finish(const P2PHandle& op, std::vector<P2PHandle>& completed) {
  if (op->state == P2POp::State::Done) return;
  op->state = P2POp::State::Done;
  auto it = std::find(all_.begin(), all_.end(), op);
  if (it != all_.end()) all_.erase(it);
  op->result_.stats.collective = op->isSend ? "send" : "recv";
  op->result_.stats.algorithm = "p2p";
  op->result_.stats.bytes = op->result_.bytes;
  op->result_.ended = Deadline::Clock::now();
  op->result_.stats.seconds = std::chrono::duration<double>(op->result_.ended - op->posted).count();
  completed.push_back(op);
}

void P2PEngine::fail(const P2PHandle& op, ErrorInfo info, std::vector<P2PHandle>& completed) {
  if (op->state == P2POp::State::Done) return;
  source_.annotate(info);
  try {
    throwError(std::move(info));
  } catch (...) {
    op->error_ = std::current_exception();
  }
  finish(op, completed);
}

bool P2PEngine::anyExpired() const {
  const auto now = Deadline::Clock::now();
  for (const P2PHandle& op : all_) {
    if (!op->deadline.isNever() && now >= op->deadline.at()) return true;
  }
  return false;
}

void P2PEngine::expire(const std::map<int, std::string>& health,
                       std::vector<P2PHandle>& completed) {
  const auto now = Deadline::Clock::now();
  for (const P2PHandle& op : std::vector<P2PHandle>(all_)) {
    if (op->deadline.isNever() || now < op->deadline.at()) continue;
    if (op->state == P2POp::State::Done) continue;
    LinkState* ls = stateFor(op->peer);
    std::string why;
    auto known = health.find(op->peer);
    const std::string tail =
        known == health.end() || known->second.empty() ? "" : " (" + known->second + ")";
    if (op->isSend) {
      if (auto u = unconnected_.find(op->peer); u != unconnected_.end()) eraseFrom(u->second, op);
      if (ls) {
        eraseFrom(ls->sends, op);
        eraseFrom(ls->streams, op);
        if (ls->txNow.op == op && !ls->tx.idle()) {
          // Half a frame is on the wire: the connection cannot carry anything else.
          fail(op,
               errorFor(*op, ErrorKind::Timeout,
                        "rank " + std::to_string(op->peer) +
                            " stopped reading before the deadline" + tail),
               completed);
          closeLink(*ls, ErrorKind::PeerClosed,
                    "the connection was closed after a send to the peer timed out", completed);
          continue;
        }
      }
      if (awaitingCts_.erase(op->id) && ls) {
        Tx t;
        t.header.kind = MsgKind::Cancel;
        t.header.step = op->id;
        ls->control.push_back(t);
        why = "rank " + std::to_string(op->peer) + " did not post a matching receive (" +
              tagText(op->tag) + ", " + std::to_string(op->bytes) + " bytes) before the deadline";
      } else if (op->state == P2POp::State::Queued && !ls) {
        why = "rank " + std::to_string(op->peer) + " never connected for point-to-point";
      } else {
        why = "the message to rank " + std::to_string(op->peer) + " (" + tagText(op->tag) +
              ") did not leave before the deadline";
      }
    } else {
      eraseFrom(recvs_, op);
      streamingRecvs_.erase(op->id);
      for (const auto& u : unexpected_) {
        if (u->boundRecv == op) u->boundRecv.reset();
      }
      for (auto& [peer, l] : links_) {
        if (l.rxOp == op) {
          l.discard.resize(l.rx.header().length);
          l.rx.setTarget(l.discard.data());
          l.rxOp.reset();
        }
      }
      if (op->state == P2POp::State::Queued) {
        why = "no message from " + sourceText(op->peer) + " with " + tagText(op->tag) +
              " arrived before the deadline";
      } else {
        why = "the message from rank " + std::to_string(op->result_.source) +
              " did not finish arriving before the deadline";
      }
    }
    fail(op, errorFor(*op, ErrorKind::Timeout, why + tail), completed);
  }
}

// Ends a link: every operation that needs it fails; complete unexpected messages from
// it stay receivable.
void P2PEngine::closeLink(LinkState& ls, ErrorKind kind, const std::string& why,
                          std::vector<P2PHandle>& completed) {
  if (ls.closed) return;
  ls.closed = true;
  ls.closedKind = kind;
  ls.closedWhy = why;
  if (ls.link->open()) ls.link->shutdownWrite();
  const int peer = ls.peer;
  auto failOp = [&](const P2PHandle& op) {
    ErrorInfo info = errorFor(*op, kind, why);
    info.peer = peer;
    fail(op, std::move(info), completed);
  };
  for (const P2PHandle& op : std::deque<P2PHandle>(ls.sends)) failOp(op);
  for (const P2PHandle& op : std::deque<P2PHandle>(ls.streams)) failOp(op);
  ls.sends.clear();
  ls.streams.clear();
  if (ls.txNow.op) failOp(ls.txNow.op);
  for (auto it = awaitingCts_.begin(); it != awaitingCts_.end();) {
    if (it->second->peer == peer) {
      failOp(it->second);
      it = awaitingCts_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = streamingRecvs_.begin(); it != streamingRecvs_.end();) {
    if (it->second->result_.source == peer) {
      failOp(it->second);
      it = streamingRecvs_.erase(it);
    } else {
      ++it;
    }
  }
  if (ls.rxOp) failOp(ls.rxOp);
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if ((*it)->peer == peer && (!(*it)->complete || (*it)->rendezvous)) {
      if ((*it)->boundRecv) failOp((*it)->boundRecv);
      if (!(*it)->rendezvous) unexpectedBytes_ -= (*it)->data.size();
      it = unexpected_.erase(it);
    } else {
      ++it;
    }
  }
  for (const P2PHandle& op : std::deque<P2PHandle>(recvs_)) {
    if (op->peer == peer) {
      eraseFrom(recvs_, op);
      failOp(op);
    }
  }
}

void P2PEngine::abort(const ErrorInfo& cause) {
  std::vector<P2PHandle> completed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_) return;
    aborted_ = cause;
    const std::string why = "the communicator was aborted: " + cause.message;
    for (auto& [peer, ls] : links_) {
      if (ls.closed) continue;
      if (!ls.link->txPartial && ls.tx.idle()) {
        wire::MessageHeader ah;
        ah.kind = MsgKind::Abort;
        ah.fingerprint =
            cause.culprit >= 0 ? static_cast<uint32_t>(cause.culprit) : wire::kNoCulprit;
        ah.step = static_cast<uint32_t>(cause.kind);
        TxFrame f;
        f.start(ah, nullptr);
        (void)f.pump(*ls.link);  // 24 bytes into an idle socket: all or nothing in practice
      }
      closeLink(ls, ErrorKind::Aborted, why, completed);
    }
    for (const P2PHandle& op : std::vector<P2PHandle>(all_)) {
      fail(op, errorFor(*op, ErrorKind::Aborted, why), completed);
    }
    unconnected_.clear();
    recvs_.clear();
    awaitingCts_.clear();
    streamingRecvs_.clear();
  }
  runCompletions(completed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    wakeDriverWaitersLocked();
    wakeProgressLocked(true);
  }
  kick();
}

}  // namespace tccl
